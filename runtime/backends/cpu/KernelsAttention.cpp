//===- KernelsAttention.cpp - Causal GQA attention core F/B ---------------===//
//
// Per (sequence, head): S = scale Q K^T, P = causal softmax(S), O = D(P) V,
// with GEMMs on strided head slices (no transposes materialised). With
// document starts (AttentionShape::docStart) the softmax of query i runs
// over its document's keys only and rotary positions restart per document;
// the GEMMs are unchanged (the masked probabilities are exact zeros). D is the
// probabilities' dropout (identity at rate 0; its mask drawn from the
// counter-based key, DropoutRng.h). The probabilities (and D(P)) are saved
// for B; B does not recompute them.
//
//===----------------------------------------------------------------------===//

#include "Blas.h"
#include "DropoutRng.h"
#include "ElementwiseMath.h"
#include "Kernels.h"

#include <algorithm>
#include <vector>

namespace pipeforge {
namespace rt {
namespace cpu {

using detail::gemm;

bool isValid(const AttentionShape &s) {
  if (s.batch < 0 || s.seq < 0 || s.heads <= 0 || s.kvHeads <= 0 ||
      s.headDim <= 0)
    return false;
  if (s.heads % s.kvHeads != 0)
    return false;
  if (s.vHeadDim < 0 || s.ropeDim < 0 || s.ropeDim > s.headDim)
    return false;
  if (s.rotary && s.rotatedDim() % 2 != 0)
    return false;
  if (s.docStart)
    for (Index b = 0; b < s.batch; ++b)
      for (Index i = 0; i < s.seq; ++i)
        if (s.rowStart(b, i) < 0 || s.rowStart(b, i) > i)
          return false;
  return true;
}

/// Rotates (transpose = false) or un-rotates (transpose = true) every head of
/// x [batch*seq, nHeads*d] in place: its trailing R = rotatedDim() entries
/// (the whole head unless ropeDim is set), pairs (j, j + R/2) of them. Token
/// i of sequence b turns by its position in its document, i - rowStart.
/// The cos / sin table of (seq, R, theta): the same numbers on every call,
/// so each thread keeps its last one (a layer's q and k, its F and B, and
/// every layer of the stage share it) instead of recomputing seq x R / 2
/// angles with pow, cos and sin four times per layer and microbatch.
template <typename T> struct RotaryTable {
  Index seq = -1, rotated = -1;
  double theta = 0;
  std::vector<T> cosT, sinT;
};
template <typename T>
static const RotaryTable<T> &rotaryTable(Index seq, Index R, double theta) {
  thread_local RotaryTable<T> t;
  if (t.seq == seq && t.rotated == R && t.theta == theta)
    return t;
  const Index half = R / 2;
  t.cosT.assign(size_t(seq * half), T(0));
  t.sinT.assign(size_t(seq * half), T(0));
  for (Index i = 0; i < seq; ++i)
    for (Index j = 0; j < half; ++j) {
      T a = math::rotaryAngle<T>(i, j, R, T(theta));
      t.cosT[size_t(i * half + j)] = math::pfCos(a);
      t.sinT[size_t(i * half + j)] = math::pfSin(a);
    }
  t.seq = seq;
  t.rotated = R;
  t.theta = theta;
  return t;
}

template <typename T>
PF_CPU_CLONES static void applyRotary(const AttentionShape &s, Index nHeads, T *x,
                        bool transpose) {
  const Index D = s.headDim, R = s.rotatedDim(), half = R / 2;
  const RotaryTable<T> &table = rotaryTable<T>(s.seq, R, double(s.ropeTheta));
  const std::vector<T> &cosT = table.cosT, &sinT = table.sinT;
  for (Index b = 0; b < s.batch; ++b)
    for (Index i = 0; i < s.seq; ++i) {
      T *row = x + (b * s.seq + i) * nHeads * D;
      const Index pos = i - s.rowStart(b, i);
      for (Index h = 0; h < nHeads; ++h) {
        T *v = row + h * D + (D - R);
        for (Index j = 0; j < half; ++j) {
          T c = cosT[pos * half + j], sn = sinT[pos * half + j];
          T y1, y2;
          if (transpose)
            math::rotaryRotateTranspose(v[j], v[j + half], c, sn, y1, y2);
          else
            math::rotaryRotate(v[j], v[j + half], c, sn, y1, y2);
          v[j] = y1;
          v[j + half] = y2;
        }
      }
    }
}

/// The dropout of one (sequence b, local head h) [S, S] block: out = P *
/// mask / (1 - rate); `out` may be `P` (in place: B drops dP the same way).
template <typename T>
static void dropRows(const AttentionShape &s, Index b, Index h, const T *P,
                     T *out) {
  const Index S = s.seq;
  const uint32_t thr = dropout::threshold(s.dropout);
  const T scale = T(1.0 / (1.0 - s.dropout));
  const uint64_t bh = (uint64_t(b) << 32) | uint64_t(s.headStart + h);
  for (Index i = 0; i < S; ++i) {
    uint64_t row = dropout::rowKey(s.dropoutKey, bh, uint64_t(i));
    for (Index j = 0; j < S; ++j)
      out[i * S + j] =
          dropout::keep(row, uint64_t(j), thr) ? P[i * S + j] * scale : T(0);
  }
}

/// Causal attention needs only the lower triangle of each [S, S] block of
/// scores: the products run over blocks of kCausalRows rows, each as wide
/// as its last row needs (rows [i0, i0 + rows) see columns [0, cols)), so
/// at S = 128 they do 5/8 of the square's multiply-adds and at S = 256
/// 9/16. What they skip is exact zeros (masked probabilities and their
/// gradients), so each sum keeps its terms and order.
constexpr Index kCausalRows = 32;
/// Columns of the softmax's vector loops: AVX-512's 16 floats.
constexpr Index kSoftmaxPad = 16;
template <class Fn> static void forCausalBlocks(Index S, Fn fn) {
  for (Index i0 = 0; i0 < S; i0 += kCausalRows) {
    const Index rows = std::min(kCausalRows, S - i0);
    fn(i0, rows, i0 + rows);
  }
}

template <typename T>
PF_CPU_CLONES void attentionF(const AttentionShape &s, const T *q, const T *k, const T *v,
                T *out, AttentionSaved<T> &saved) {
  const Index S = s.seq, D = s.headDim, DV = s.valueDim(), A = s.heads,
              KV = s.kvHeads;
  const Index group = A / KV, tokens = s.batch * S;
  const Index ldq = A * D, ldk = KV * D, ldv = KV * DV, ldo = A * DV;
  saved.v = v;
  if (s.rotary) {
    saved.qRot.assign(q, q + tokens * ldq);
    saved.kRot.assign(k, k + tokens * ldk);
    applyRotary(s, A, saved.qRot.data(), false);
    applyRotary(s, KV, saved.kRot.data(), false);
    saved.q = saved.qRot.data();
    saved.k = saved.kRot.data();
  } else {
    saved.qRot.clear();
    saved.kRot.clear();
    saved.q = q;
    saved.k = k;
  }
  // Every element is written below (the softmax loop writes whole rows,
  // dropRows whole blocks): no clearing, and a caller that reuses `saved`
  // (the CPU backend does) keeps the memory.
  saved.probs.resize(size_t(s.batch * A * S * S));
  const bool drop = s.dropout > 0.0;
  if (drop)
    saved.dropped.resize(size_t(s.batch * A * S * S));
  else
    saved.dropped.clear();
  const T scale = T(1) / math::pfSqrt(T(D));
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < A; ++h) {
      const Index g = h / group;
      const T *Q = saved.q + b * S * ldq + h * D;
      const T *K = saved.k + b * S * ldk + g * D;
      const T *V = v + b * S * ldv + g * DV;
      T *P = saved.probs.data() + (b * A + h) * S * S;
      // Scores of the lower triangle only (the rest of P stays 0).
      forCausalBlocks(S, [&](Index i0, Index rows, Index cols) {
        gemm(false, true, rows, cols, D, scale, Q + i0 * ldq, ldq, K, ldk,
             T(0), P + i0 * S, S);
      });
      // Softmax over keys [lo, i]: the query's document up to itself. The
      // exp and scale loops run on to a whole number of kSoftmaxPad columns
      // (within the row): the vector loop then ends without a scalar tail
      // of up to 15 exps per row. What they compute past i is discarded
      // (cleared below); the sum and the kept values are unchanged.
      for (Index i = 0; i < S; ++i) {
        T *row = P + i * S;
        const Index lo = s.rowStart(b, i);
        const Index n = i + 1 - lo;
        const Index end =
            std::min(S, lo + (n + kSoftmaxPad - 1) / kSoftmaxPad * kSoftmaxPad);
        const T m = rowLaneMax(row + lo, n);
        T inv = T(1) / rowSoftmaxExp(row + lo, n, end - lo, m);
        for (Index j = lo; j < end; ++j)
          row[j] *= inv;
        for (Index j = 0; j < lo; ++j)
          row[j] = T(0);
        for (Index j = i + 1; j < S; ++j)
          row[j] = T(0);
      }
      const T *PV = P;
      if (drop) {
        T *PD = saved.dropped.data() + (b * A + h) * S * S;
        dropRows(s, b, h, P, PD);
        PV = PD;
      }
      if (out)
        forCausalBlocks(S, [&](Index i0, Index rows, Index cols) {
          gemm(false, false, rows, DV, cols, T(1), PV + i0 * S, S, V, ldv,
               T(0), out + b * S * ldo + h * DV + i0 * ldo, ldo);
        });
    }
}

template <typename T>
PF_CPU_CLONES void attentionB(const AttentionShape &s, const AttentionSaved<T> &saved,
                const T *dout, T *dq, T *dk, T *dv, Workspace<T> &ws) {
  const Index S = s.seq, D = s.headDim, DV = s.valueDim(), A = s.heads,
              KV = s.kvHeads;
  const Index group = A / KV, tokens = s.batch * S;
  const Index ldq = A * D, ldk = KV * D, ldv = KV * DV, ldo = A * DV;
  for (Index i = 0; i < tokens * ldk; ++i)
    dk[i] = T(0);
  for (Index i = 0; i < tokens * ldv; ++i)
    dv[i] = T(0);
  T *dS = ws.get(size_t(S * S));
  const bool drop = s.dropout > 0.0;
  const T scale = T(1) / math::pfSqrt(T(D));
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < A; ++h) {
      const Index g = h / group;
      const Index qOff = b * S * ldq + h * D, kOff = b * S * ldk + g * D;
      const Index vOff = b * S * ldv + g * DV, oOff = b * S * ldo + h * DV;
      const T *P = saved.probs.data() + (b * A + h) * S * S;
      const T *PV = drop ? saved.dropped.data() + (b * A + h) * S * S : P;
      // dP = D'(dO V^T): the gradient of D(P) is dropped with the same mask.
      // Lower triangle only; the loop below clears the rest of each row,
      // but dropRows reads whole rows first, so with dropout it is cleared
      // here.
      forCausalBlocks(S, [&](Index i0, Index rows, Index cols) {
        gemm(false, true, rows, cols, DV, T(1), dout + oOff + i0 * ldo, ldo,
             saved.v + vOff, ldv, T(0), dS + i0 * S, S);
        if (drop)
          for (Index i = i0; i < i0 + rows; ++i)
            std::fill(dS + i * S + cols, dS + (i + 1) * S, T(0));
      });
      if (drop)
        dropRows(s, b, h, dS, dS);
      // dS = P (dP - rowdot(P, dP)), over the keys the forward saw.
      softmaxGradRows(S, P, dS, [&](Index i) { return s.rowStart(b, i); });
      // dQ = scale dS K ; dK += scale dS^T Q ; dV += P^T dO. Row block i0
      // of dQ needs the columns before its end; column block j0 of dK and
      // dV the rows from j0 on (dS and P are 0 above the diagonal).
      forCausalBlocks(S, [&](Index i0, Index rows, Index cols) {
        gemm(false, false, rows, D, cols, scale, dS + i0 * S, S,
             saved.k + kOff, ldk, T(0), dq + qOff + i0 * ldq, ldq);
        gemm(true, false, rows, D, S - i0, scale, dS + i0 * S + i0, S,
             saved.q + qOff + i0 * ldq, ldq, T(1), dk + kOff + i0 * ldk, ldk);
        gemm(true, false, rows, DV, S - i0, T(1), PV + i0 * S + i0, S,
             dout + oOff + i0 * ldo, ldo, T(1), dv + vOff + i0 * ldv, ldv);
      });
    }
  if (s.rotary) {
    applyRotary(s, A, dq, true);
    applyRotary(s, KV, dk, true);
  }
}

#define PF_INSTANTIATE(T)                                                      \
  template void attentionF<T>(const AttentionShape &, const T *, const T *,    \
                              const T *, T *, AttentionSaved<T> &);            \
  template void attentionB<T>(const AttentionShape &,                          \
                              const AttentionSaved<T> &, const T *, T *, T *,  \
                              T *, Workspace<T> &);
PF_INSTANTIATE(float)
PF_INSTANTIATE(double)
#undef PF_INSTANTIATE

} // namespace cpu
} // namespace rt
} // namespace pipeforge
