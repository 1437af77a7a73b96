//===- KernelsMoE.cpp - Top-k mixture of experts F/B/W --------------------===//
//
// Dispatch: assignments (token t, rank r) are visited in order t, then r.
// Each kept assignment gets a row; rows are grouped by expert and, inside an
// expert, ordered by token. Experts then run as dense GEMMs over their rows.
// All reductions (combine, scatter of dx) follow that fixed order.
//
//===----------------------------------------------------------------------===//

#include "Blas.h"
#include "ElementwiseMath.h"
#include "Kernels.h"
#include "MoERouting.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pipeforge {
namespace rt {
namespace cpu {

using detail::gemm;

bool isValid(const MoEShape &s) {
  if (!(s.tokens >= 0 && s.hidden > 0 && s.ffn > 0 && s.experts > 0 &&
        s.topK >= 1 && s.topK <= s.experts && s.capacity >= 0))
    return false;
  if (!(s.scale > 0.f) || !std::isfinite(s.scale) || s.groups < 1 ||
      s.groups > 64 || s.experts % s.groups != 0 || s.topkGroup < 1 ||
      s.topkGroup > s.groups)
    return false;
  return s.topkGroup * (s.experts / s.groups) >= s.topK;
}

Index moeCapacity(double capacityFactor, Index tokens, Index topK,
                  Index experts) {
  if (capacityFactor <= 0 || experts <= 0)
    return 0;
  double c = std::ceil(capacityFactor * double(tokens) * double(topK) /
                       double(experts));
  return std::max<Index>(1, Index(c));
}

template <typename T> Index MoESaved<T>::dropped() const {
  Index n = 0;
  for (int32_t r : rowOf)
    n += r < 0;
  return n;
}

/// The experts' elementwise loops over [i0, i1), one loop per activation so
/// that each vectorises (the activation is a loop invariant, not a branch
/// per element), with the kernels' AVX-512/AVX2 clones (Kernels.h): the
/// bits of the scalar expressions (elementwise, no contraction). They were
/// a third of a small MoE step, run as scalar code.
namespace {
template <Activation A, typename T> PF_CPU_INLINE T act(T x) {
  return A == Activation::Gelu ? math::gelu(x) : math::silu(x);
}
template <Activation A, typename T> PF_CPU_INLINE T actD(T x) {
  return A == Activation::Gelu ? math::geluGrad(x) : math::siluGrad(x);
}
/// act = f(pre) [* pre3].
template <Activation A, typename T>
PF_CPU_CLONES void expertActLoop(Index n, const T *pre, const T *pre3,
                                 T *out) {
  if (pre3)
    for (Index i = 0; i < n; ++i)
      out[i] = act<A>(pre[i]) * pre3[i];
  else
    for (Index i = 0; i < n; ++i)
      out[i] = act<A>(pre[i]);
}
/// Gated: dpre3 = dh f(pre), dpre = dh pre3 f'(pre); plain: dpre *= f'(pre).
/// dh arrives in dpre.
template <Activation A, typename T>
PF_CPU_CLONES void expertActGradLoop(Index n, const T *pre, const T *pre3,
                                     T *dpre, T *dpre3) {
  if (pre3)
    for (Index i = 0; i < n; ++i) {
      T dh = dpre[i], pr = pre[i];
      dpre3[i] = dh * act<A>(pr);
      dpre[i] = dh * pre3[i] * actD<A>(pr);
    }
  else
    for (Index i = 0; i < n; ++i)
      dpre[i] *= actD<A>(pre[i]);
}
} // namespace

template <typename T>
void expertAct(Activation a, Index n, const T *pre, const T *pre3, T *out) {
  if (a == Activation::Gelu)
    expertActLoop<Activation::Gelu>(n, pre, pre3, out);
  else
    expertActLoop<Activation::Silu>(n, pre, pre3, out);
}
template <typename T>
void expertActGrad(Activation a, Index n, const T *pre, const T *pre3, T *dpre,
                   T *dpre3) {
  if (a == Activation::Gelu)
    expertActGradLoop<Activation::Gelu>(n, pre, pre3, dpre, dpre3);
  else
    expertActGradLoop<Activation::Silu>(n, pre, pre3, dpre, dpre3);
}

template <typename T>
void moeF(const MoEShape &s, const MoEParams<T> &p, const T *x, T *y,
          MoESaved<T> &saved) {
  const Index N = s.tokens, H = s.hidden, F = s.ffn, E = s.experts, K = s.topK;
  saved.x = x;
  saved.params = p;
  // Every buffer below is written whole before it is read (the GEMMs with
  // beta = 0, the gathers, the selection), so a `saved` reused across calls
  // keeps its storage and is not cleared (resize, not assign).

  // Router: scores of x Wr^T, then top-k and gates (MoERouting.h).
  saved.probs.resize(size_t(N * E));
  T *probs = saved.probs.data();
  gemm(false, true, N, E, H, T(1), x, H, p.router, H, T(0), probs, E);
  saved.topIdx.resize(size_t(N * K));
  saved.gates.resize(size_t(N * K));
  for (Index t = 0; t < N; ++t) {
    moeScoreToken(s, probs + t * E);
    moeSelectToken(s, probs + t * E, p.bias, saved.topIdx.data() + t * K,
                   saved.gates.data() + t * K);
  }

  // Capacity and dispatch rows.
  std::vector<Index> count(E, 0);
  saved.rowOf.assign(N * K, -1);
  for (Index a = 0; a < N * K; ++a) {
    Index e = saved.topIdx[a];
    if (s.capacity == 0 || count[e] < s.capacity) {
      saved.rowOf[a] = 0; // kept; row assigned below
      ++count[e];
    }
  }
  saved.expertStart.assign(E + 1, 0);
  for (Index e = 0; e < E; ++e)
    saved.expertStart[e + 1] = saved.expertStart[e] + count[e];
  const Index R = saved.expertStart[E];
  saved.rowAssign.resize(size_t(R));
  std::vector<Index> fill(saved.expertStart.begin(),
                          saved.expertStart.end() - 1);
  for (Index a = 0; a < N * K; ++a) {
    if (saved.rowOf[a] < 0)
      continue;
    Index row = fill[saved.topIdx[a]]++;
    saved.rowOf[a] = int32_t(row);
    saved.rowAssign[row] = int32_t(a);
  }

  // Experts.
  saved.xe.resize(size_t(R * H));
  saved.pre.resize(size_t(R * F));
  saved.act.resize(size_t(R * F));
  const bool gated = p.w3 != nullptr;
  if (gated)
    saved.pre3.resize(size_t(R * F));
  else
    saved.pre3.clear();
  saved.eout.resize(size_t(R * H));
  for (Index r = 0; r < R; ++r) {
    const T *src = x + Index(saved.rowAssign[r] / K) * H;
    std::copy(src, src + H, saved.xe.data() + r * H);
  }
  for (Index e = 0; e < E; ++e) {
    Index r0 = saved.expertStart[e], n = saved.expertStart[e + 1] - r0;
    gemm(false, true, n, F, H, T(1), saved.xe.data() + r0 * H, H,
         p.w1 + e * F * H, H, T(0), saved.pre.data() + r0 * F, F);
    if (gated)
      gemm(false, true, n, F, H, T(1), saved.xe.data() + r0 * H, H,
           p.w3 + e * F * H, H, T(0), saved.pre3.data() + r0 * F, F);
    expertAct(s.act, n * F, saved.pre.data() + r0 * F,
              gated ? saved.pre3.data() + r0 * F : nullptr,
              saved.act.data() + r0 * F);
    gemm(false, true, n, H, F, T(1), saved.act.data() + r0 * F, F,
         p.w2 + e * H * F, F, T(0), saved.eout.data() + r0 * H, H);
  }

  // Combine in (token, rank) order.
  for (Index i = 0; i < N * H; ++i)
    y[i] = T(0);
  for (Index a = 0; a < N * K; ++a) {
    Index row = saved.rowOf[a];
    if (row < 0)
      continue;
    T g = saved.gates[a];
    const T *eo = saved.eout.data() + row * H;
    T *yr = y + (a / K) * H;
    for (Index j = 0; j < H; ++j)
      yr[j] += g * eo[j];
  }
}

/// dye[row] = gate * dy[token]; dh = dye W2_e; then
///   plain: dpre = dh * act'(pre)
///   gated: dpre = dh * pre3 * act'(pre), dpre3 = dh * act(pre)
/// dpre3 lives at dpre + rows * ffn.
template <typename T>
static void expertGrads(const MoEShape &s, const MoESaved<T> &saved,
                        const T *dy, T *dye, T *dpre) {
  const Index H = s.hidden, F = s.ffn, E = s.experts, K = s.topK;
  const Index R = saved.rows();
  for (Index r = 0; r < R; ++r) {
    Index a = saved.rowAssign[r];
    T g = saved.gates[a];
    const T *src = dy + (a / K) * H;
    T *dst = dye + r * H;
    for (Index j = 0; j < H; ++j)
      dst[j] = g * src[j];
  }
  for (Index e = 0; e < E; ++e) {
    Index r0 = saved.expertStart[e], n = saved.expertStart[e + 1] - r0;
    gemm(false, false, n, F, H, T(1), dye + r0 * H, H,
         saved.params.w2 + e * H * F, F, T(0), dpre + r0 * F, F);
  }
  const bool gated = saved.params.w3 != nullptr;
  expertActGrad(s.act, R * F, saved.pre.data(),
                gated ? saved.pre3.data() : nullptr, dpre,
                gated ? dpre + R * F : nullptr);
}

/// dlogits [tokens, E]: through the gates, their renormalisation over the
/// top-k and the softmax or sigmoid (MoERouting.h). Top-k membership and
/// drops are constants.
template <typename T>
static void routerGrads(const MoEShape &s, const MoESaved<T> &saved,
                        const T *dy, T *dlogits) {
  const Index N = s.tokens, H = s.hidden, E = s.experts, K = s.topK;
  std::vector<T> dg(K);
  for (Index t = 0; t < N; ++t) {
    const T *dyr = dy + t * H;
    for (Index r = 0; r < K; ++r) {
      Index row = saved.rowOf[t * K + r];
      T d = 0;
      if (row >= 0) {
        const T *eo = saved.eout.data() + row * H;
        for (Index j = 0; j < H; ++j)
          d += dyr[j] * eo[j];
      }
      dg[r] = d;
    }
    moeRouterGradToken(s, saved.probs.data() + t * E,
                       saved.topIdx.data() + t * K,
                       saved.gates.data() + t * K, dg.data(), dlogits + t * E);
  }
}

template <typename T>
static void moeBImpl(const MoEShape &s, const MoESaved<T> &saved,
                     const T *dlogits, const T *dpre, T *dxe, T *dx) {
  const Index N = s.tokens, H = s.hidden, F = s.ffn, E = s.experts, K = s.topK;
  const MoEParams<T> &p = saved.params;
  gemm(false, false, N, H, E, T(1), dlogits, E, p.router, H, T(0), dx, H);
  for (Index e = 0; e < E; ++e) {
    Index r0 = saved.expertStart[e], n = saved.expertStart[e + 1] - r0;
    gemm(false, false, n, H, F, T(1), dpre + r0 * F, F, p.w1 + e * F * H, H,
         T(0), dxe + r0 * H, H);
    if (p.w3)
      gemm(false, false, n, H, F, T(1), dpre + saved.rows() * F + r0 * F, F,
           p.w3 + e * F * H, H, T(1), dxe + r0 * H, H);
  }
  // Scatter in (token, rank) order.
  for (Index a = 0; a < N * K; ++a) {
    Index row = saved.rowOf[a];
    if (row < 0)
      continue;
    const T *src = dxe + row * H;
    T *dst = dx + (a / K) * H;
    for (Index j = 0; j < H; ++j)
      dst[j] += src[j];
  }
}

template <typename T>
static void moeWImpl(const MoEShape &s, const MoESaved<T> &saved,
                     const T *dlogits, const T *dye, const T *dpre,
                     const MoEGrads<T> &g) {
  const Index N = s.tokens, H = s.hidden, F = s.ffn, E = s.experts;
  for (Index e = 0; e < E; ++e) {
    Index r0 = saved.expertStart[e], n = saved.expertStart[e + 1] - r0;
    gemm(true, false, H, F, n, T(1), dye + r0 * H, H, saved.act.data() + r0 * F,
         F, T(1), g.dw2 + e * H * F, F);
    gemm(true, false, F, H, n, T(1), dpre + r0 * F, F, saved.xe.data() + r0 * H,
         H, T(1), g.dw1 + e * F * H, H);
    if (saved.params.w3)
      gemm(true, false, F, H, n, T(1), dpre + saved.rows() * F + r0 * F, F,
           saved.xe.data() + r0 * H, H, T(1), g.dw3 + e * F * H, H);
  }
  gemm(true, false, E, H, N, T(1), dlogits, E, saved.x, H, T(1), g.drouter, H);
}

/// Scratch layout: dlogits [N*E] | dye [R*H] | dpre [2*R*F] | dxe [R*H]
/// (the second half of dpre is dpre3, used only when gated).
template <typename T>
static T *moeScratch(const MoEShape &s, const MoESaved<T> &saved,
                     Workspace<T> &ws, T *&dlogits, T *&dye, T *&dpre,
                     T *&dxe) {
  const Index R = saved.rows();
  T *base =
      ws.get(size_t(s.tokens * s.experts + R * (2 * s.hidden + 2 * s.ffn)));
  dlogits = base;
  dye = dlogits + s.tokens * s.experts;
  dpre = dye + R * s.hidden;
  dxe = dpre + 2 * R * s.ffn;
  return base;
}

template <typename T>
void moeB(const MoEShape &s, const MoESaved<T> &saved, const T *dy, T *dx,
          Workspace<T> &ws) {
  T *dlogits, *dye, *dpre, *dxe;
  moeScratch(s, saved, ws, dlogits, dye, dpre, dxe);
  routerGrads(s, saved, dy, dlogits);
  expertGrads(s, saved, dy, dye, dpre);
  moeBImpl(s, saved, dlogits, dpre, dxe, dx);
}

template <typename T>
void moeW(const MoEShape &s, const MoESaved<T> &saved, const T *dy,
          const MoEGrads<T> &g, Workspace<T> &ws) {
  T *dlogits, *dye, *dpre, *dxe;
  moeScratch(s, saved, ws, dlogits, dye, dpre, dxe);
  routerGrads(s, saved, dy, dlogits);
  expertGrads(s, saved, dy, dye, dpre);
  moeWImpl(s, saved, dlogits, dye, dpre, g);
}

template <typename T>
void moeBW(const MoEShape &s, const MoESaved<T> &saved, const T *dy, T *dx,
           const MoEGrads<T> &g, Workspace<T> &ws) {
  T *dlogits, *dye, *dpre, *dxe;
  moeScratch(s, saved, ws, dlogits, dye, dpre, dxe);
  routerGrads(s, saved, dy, dlogits);
  expertGrads(s, saved, dy, dye, dpre);
  moeBImpl(s, saved, dlogits, dpre, dxe, dx);
  moeWImpl(s, saved, dlogits, dye, dpre, g);
}

#define PF_INSTANTIATE(T)                                                      \
  template struct MoESaved<T>;                                                 \
  template void expertAct<T>(Activation, Index, const T *, const T *, T *);    \
  template void expertActGrad<T>(Activation, Index, const T *, const T *, T *, \
                                 T *);                                         \
  template void moeF<T>(const MoEShape &, const MoEParams<T> &, const T *,     \
                        T *, MoESaved<T> &);                                   \
  template void moeB<T>(const MoEShape &, const MoESaved<T> &, const T *, T *, \
                        Workspace<T> &);                                       \
  template void moeW<T>(const MoEShape &, const MoESaved<T> &, const T *,      \
                        const MoEGrads<T> &, Workspace<T> &);                  \
  template void moeBW<T>(const MoEShape &, const MoESaved<T> &, const T *,     \
                         T *, const MoEGrads<T> &, Workspace<T> &);
PF_INSTANTIATE(float)
PF_INSTANTIATE(double)
#undef PF_INSTANTIATE

} // namespace cpu
} // namespace rt
} // namespace pipeforge
