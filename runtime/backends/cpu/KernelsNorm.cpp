//===- KernelsNorm.cpp - LayerNorm and RMSNorm F/B/W ----------------------===//
//
// Statistics are accumulated in double for float inputs too (then stored as
// T), which keeps float results close to the double reference. Each row sum
// runs in kNormLanes interleaved partial sums (normLaneSum): a fixed order,
// so the bits are the same on every run, and one the compiler vectorises
// (AVX-512, AVX2 or SSE2 by the CPU: PF_CPU_CLONES, the same bits).
//
//===----------------------------------------------------------------------===//

#include "ElementwiseMath.h"
#include "Kernels.h"

// The V4d helpers below are always inlined: no vector crosses a call, so
// GCC's note on the ABI of 32-byte vector returns without AVX does not apply.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace pipeforge {
namespace rt {
namespace cpu {

using math::pfSqrt;

/// Four doubles, lane l holding term i + l of a block: kNormLanes' partial
/// sums as one vector (GCC's vector extensions: a ymm register on AVX2 and
/// AVX-512, two xmm on SSE2; lanewise, so the same bits on each). No
/// function here takes or returns a vector by value unless it is always
/// inlined: the clones of a kernel share its out-of-line helpers, whose
/// vector ABI is the baseline's.
typedef double V4d __attribute__((vector_size(32)));
static_assert(kNormLanes == 4, "one V4d holds the kNormLanes partial sums");
template <typename T> struct Lanes;
template <> struct Lanes<float> {
  typedef float V __attribute__((vector_size(16)));
};
template <> struct Lanes<double> {
  typedef double V __attribute__((vector_size(32)));
};
#define PF_INLINE __attribute__((always_inline)) inline
/// Four consecutive T of p.
template <typename T> PF_INLINE typename Lanes<T>::V load4(const T *p) {
  typename Lanes<T>::V v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T> PF_INLINE typename Lanes<T>::V splat4(T x) {
  return typename Lanes<T>::V{x, x, x, x};
}
template <typename VT> PF_INLINE V4d toV4d(VT v) {
  return __builtin_convertvector(v, V4d);
}
/// normLaneSum's combination of the lanes and the tail terms.
PF_INLINE double combineLanes(const V4d &s, const double (&tail)[kNormLanes]) {
  return ((s[0] + tail[0]) + (s[1] + tail[1])) +
         ((s[2] + tail[2]) + (s[3] + tail[3]));
}

/// The statistics of rows [t0, t0 + R), each as the one-row loop gave them
/// (normLaneSum's lanes, tail and combination): R rows' sums run as R
/// independent chains of vector adds, so a sum no longer waits on the
/// latency of its previous add.
template <int R, typename T>
PF_INLINE void statsRows(const NormShape &s, bool centered, const T *x,
                         Index t0, T *mean, T *rstd) {
  const Index H = s.hidden;
  const Index body = H / kNormLanes * kNormLanes;
  const T *xr = x + t0 * H;
  V4d acc[R];
  double tail[R][kNormLanes] = {};
  double sum[R];
  for (int k = 0; k < R; ++k)
    acc[k] = V4d{0, 0, 0, 0};
  if (!centered) {
    for (Index i = 0; i < body; i += kNormLanes)
      for (int k = 0; k < R; ++k) {
        V4d v = toV4d(load4(xr + k * H + i));
        acc[k] += v * v;
      }
    for (Index i = body; i < H; ++i)
      for (int k = 0; k < R; ++k)
        tail[k][i % kNormLanes] = double(xr[k * H + i]) * double(xr[k * H + i]);
    for (int k = 0; k < R; ++k) {
      sum[k] = combineLanes(acc[k], tail[k]);
      rstd[t0 + k] = T(1) / pfSqrt(T(sum[k] / double(H)) + T(s.eps));
    }
    return;
  }
  for (Index i = 0; i < body; i += kNormLanes)
    for (int k = 0; k < R; ++k)
      acc[k] += toV4d(load4(xr + k * H + i));
  for (Index i = body; i < H; ++i)
    for (int k = 0; k < R; ++k)
      tail[k][i % kNormLanes] = double(xr[k * H + i]);
  double mu[R];
  for (int k = 0; k < R; ++k) {
    mu[k] = combineLanes(acc[k], tail[k]) / double(H);
    acc[k] = V4d{0, 0, 0, 0};
  }
  for (Index i = 0; i < body; i += kNormLanes)
    for (int k = 0; k < R; ++k) {
      V4d d = toV4d(load4(xr + k * H + i)) - mu[k];
      acc[k] += d * d;
    }
  for (Index i = body; i < H; ++i)
    for (int k = 0; k < R; ++k) {
      double d = xr[k * H + i] - mu[k];
      tail[k][i % kNormLanes] = d * d;
    }
  for (int k = 0; k < R; ++k) {
    const double var = combineLanes(acc[k], tail[k]);
    mean[t0 + k] = T(mu[k]);
    rstd[t0 + k] = T(1) / pfSqrt(T(var / double(H)) + T(s.eps));
  }
}

template <typename T>
PF_CPU_CLONES void normStats(const NormShape &s, bool centered, const T *x,
                             const T *gamma, NormSaved<T> &saved) {
  saved.x = x;
  saved.gamma = gamma;
  saved.rstd.resize(size_t(s.tokens));
  if (centered)
    saved.mean.resize(size_t(s.tokens));
  else
    saved.mean.clear();
  T *mean = centered ? saved.mean.data() : nullptr, *rstd = saved.rstd.data();
  // Four rows at a time (independent sums; each row's bits as alone).
  Index t = 0;
  for (; t + 4 <= s.tokens; t += 4)
    statsRows<4>(s, centered, x, t, mean, rstd);
  for (; t < s.tokens; ++t)
    statsRows<1>(s, centered, x, t, mean, rstd);
}

template <typename T>
PF_CPU_CLONES void layerNormF(const NormShape &s, const NormParams<T> &p, const T *x, T *y,
                NormSaved<T> &saved) {
  const Index H = s.hidden;
  normStats(s, /*centered=*/true, x, p.gamma, saved);
  const T *__restrict gamma = p.gamma, *__restrict beta = p.beta;
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = x + t * H;
    const T m = saved.mean[size_t(t)], r = saved.rstd[size_t(t)];
    T *yr = y + t * H;
    for (Index i = 0; i < H; ++i)
      yr[i] = (xr[i] - m) * r * gamma[i] + beta[i];
  }
}

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
/// rms variant: dx = rstd * (g - xhat * mean(g * xhat)).
/// Rows [t0, t0 + R): the sums of g and g * xhat of all R rows run at once
/// (each in normLaneSum's order: the bits of one row alone).
template <int R, typename T>
PF_INLINE void normBRows(const NormShape &s, const NormSaved<T> &saved,
                             const T *dy, T *dx, bool centered, Index t0) {
  const Index H = s.hidden;
  const T *xr = saved.x + t0 * H;
  const T *dyr = dy + t0 * H;
  const T *gamma = saved.gamma;
  T m[R], r[R];
  for (int k = 0; k < R; ++k) {
    m[k] = centered ? saved.mean[size_t(t0 + k)] : T(0);
    r[k] = saved.rstd[size_t(t0 + k)];
  }
  // sg: the sum of g = dy * gamma, sgx: of g * xhat (both in T, each term
  // then in double), in normLaneSum's order, R rows at once.
  const Index body = H / kNormLanes * kNormLanes;
  V4d accG[R], accGX[R];
  double tailG[R][kNormLanes] = {}, tailGX[R][kNormLanes] = {};
  for (int k = 0; k < R; ++k)
    accG[k] = accGX[k] = V4d{0, 0, 0, 0};
  for (Index i = 0; i < body; i += kNormLanes)
    for (int k = 0; k < R; ++k) {
      const auto g = load4(dyr + k * H + i) * load4(gamma + i);
      const auto xhat =
          (load4(xr + k * H + i) - splat4(m[k])) * splat4(r[k]);
      if (centered)
        accG[k] += toV4d(g);
      accGX[k] += toV4d(g * xhat);
    }
  for (Index i = body; i < H; ++i)
    for (int k = 0; k < R; ++k) {
      const T g = dyr[k * H + i] * gamma[i];
      tailG[k][i % kNormLanes] = double(g);
      tailGX[k][i % kNormLanes] = double(g * ((xr[k * H + i] - m[k]) * r[k]));
    }
  double sg[R], sgx[R];
  for (int k = 0; k < R; ++k) {
    sg[k] = combineLanes(accG[k], tailG[k]);
    sgx[k] = combineLanes(accGX[k], tailGX[k]);
  }
  for (int k = 0; k < R; ++k) {
    const T mg = centered ? T(sg[k] / double(H)) : T(0);
    const T mgx = T(sgx[k] / double(H));
    const T mk = m[k], rk = r[k];
    const T *__restrict xk = xr + k * H;
    const T *__restrict dyk = dyr + k * H;
    T *__restrict dxr = dx + (t0 + k) * H;
    for (Index i = 0; i < H; ++i) {
      T g = dyk[i] * gamma[i];
      T xhat = (xk[i] - mk) * rk;
      dxr[i] = rk * (g - mg - xhat * mgx);
    }
  }
}

template <typename T>
PF_CPU_CLONES static void normB(const NormShape &s, const NormSaved<T> &saved,
                                const T *dy, T *dx, bool centered) {
  Index t = 0;
  for (; t + 2 <= s.tokens; t += 2)
    normBRows<2>(s, saved, dy, dx, centered, t);
  for (; t < s.tokens; ++t)
    normBRows<1>(s, saved, dy, dx, centered, t);
}

template <typename T>
PF_CPU_CLONES static void normW(const NormShape &s, const NormSaved<T> &saved,
                                const T *dy, const NormGrads<T> &g,
                                bool centered) {
  // Local restrict pointers: a store to dgamma may not alias the struct
  // that holds the pointers (else each iteration reloads them, unvectorised).
  const Index H = s.hidden;
  T *__restrict dgamma = g.dgamma;
  T *__restrict dbeta = g.dbeta;
  for (Index t = 0; t < s.tokens; ++t) {
    const T *__restrict xr = saved.x + t * H;
    const T *__restrict dyr = dy + t * H;
    const T m = centered ? saved.mean[size_t(t)] : T(0);
    const T r = saved.rstd[size_t(t)];
    for (Index i = 0; i < H; ++i)
      dgamma[i] += dyr[i] * ((xr[i] - m) * r);
    if (centered)
      for (Index i = 0; i < H; ++i)
        dbeta[i] += dyr[i];
  }
}

template <typename T>
void layerNormB(const NormShape &s, const NormSaved<T> &saved, const T *dy,
                T *dx) {
  normB(s, saved, dy, dx, /*centered=*/true);
}
template <typename T>
void layerNormW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
                const NormGrads<T> &g) {
  normW(s, saved, dy, g, /*centered=*/true);
}
template <typename T>
void layerNormBW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
                 T *dx, const NormGrads<T> &g) {
  layerNormB(s, saved, dy, dx);
  layerNormW(s, saved, dy, g);
}

template <typename T>
PF_CPU_CLONES void rmsNormF(const NormShape &s, const NormParams<T> &p, const T *x, T *y,
              NormSaved<T> &saved) {
  const Index H = s.hidden;
  normStats(s, /*centered=*/false, x, p.gamma, saved);
  const T *__restrict gamma = p.gamma;
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = x + t * H;
    const T r = saved.rstd[size_t(t)];
    T *yr = y + t * H;
    for (Index i = 0; i < H; ++i)
      yr[i] = xr[i] * r * gamma[i];
  }
}
template <typename T>
void rmsNormB(const NormShape &s, const NormSaved<T> &saved, const T *dy,
              T *dx) {
  normB(s, saved, dy, dx, /*centered=*/false);
}
template <typename T>
void rmsNormW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
              const NormGrads<T> &g) {
  normW(s, saved, dy, g, /*centered=*/false);
}
template <typename T>
void rmsNormBW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
               T *dx, const NormGrads<T> &g) {
  rmsNormB(s, saved, dy, dx);
  rmsNormW(s, saved, dy, g);
}

template void normStats<float>(const NormShape &, bool, const float *,
                               const float *, NormSaved<float> &);
template void normStats<double>(const NormShape &, bool, const double *,
                                const double *, NormSaved<double> &);

#define PF_INSTANTIATE_NORM(NAME, T)                                           \
  template void NAME##F<T>(const NormShape &, const NormParams<T> &,           \
                           const T *, T *, NormSaved<T> &);                    \
  template void NAME##B<T>(const NormShape &, const NormSaved<T> &, const T *, \
                           T *);                                               \
  template void NAME##W<T>(const NormShape &, const NormSaved<T> &, const T *, \
                           const NormGrads<T> &);                              \
  template void NAME##BW<T>(const NormShape &, const NormSaved<T> &,           \
                            const T *, T *, const NormGrads<T> &);
PF_INSTANTIATE_NORM(layerNorm, float)
PF_INSTANTIATE_NORM(layerNorm, double)
PF_INSTANTIATE_NORM(rmsNorm, float)
PF_INSTANTIATE_NORM(rmsNorm, double)
#undef PF_INSTANTIATE_NORM

} // namespace cpu
} // namespace rt
} // namespace pipeforge
