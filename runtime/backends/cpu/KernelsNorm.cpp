//===- KernelsNorm.cpp - LayerNorm and RMSNorm F/B/W ----------------------===//
//
// Statistics are accumulated in double for float inputs too (then stored as
// T), which keeps float results close to the double reference. Each row sum
// runs in kNormLanes interleaved partial sums (normLaneSum): a fixed order,
// so the bits are the same on every run, and one the compiler vectorises.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseMath.h"
#include "Kernels.h"

namespace pipeforge {
namespace rt {
namespace cpu {

using math::pfSqrt;

template <typename T>
void normStats(const NormShape &s, bool centered, const T *x, const T *gamma,
               NormSaved<T> &saved) {
  const Index H = s.hidden;
  saved.x = x;
  saved.gamma = gamma;
  saved.rstd.resize(size_t(s.tokens));
  if (centered)
    saved.mean.resize(size_t(s.tokens));
  else
    saved.mean.clear();
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = x + t * H;
    if (!centered) {
      double ss = normLaneSum(
          H, [&](Index i) { return double(xr[i]) * double(xr[i]); });
      saved.rstd[size_t(t)] = T(1) / pfSqrt(T(ss / double(H)) + T(s.eps));
      continue;
    }
    double mean =
        normLaneSum(H, [&](Index i) { return double(xr[i]); }) / double(H);
    double var = normLaneSum(H,
                             [&](Index i) {
                               double d = xr[i] - mean;
                               return d * d;
                             }) /
                 double(H);
    saved.mean[size_t(t)] = T(mean);
    saved.rstd[size_t(t)] = T(1) / pfSqrt(T(var) + T(s.eps));
  }
}

template <typename T>
void layerNormF(const NormShape &s, const NormParams<T> &p, const T *x, T *y,
                NormSaved<T> &saved) {
  const Index H = s.hidden;
  normStats(s, /*centered=*/true, x, p.gamma, saved);
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = x + t * H;
    const T m = saved.mean[size_t(t)], r = saved.rstd[size_t(t)];
    T *yr = y + t * H;
    for (Index i = 0; i < H; ++i)
      yr[i] = (xr[i] - m) * r * p.gamma[i] + p.beta[i];
  }
}

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
/// rms variant: dx = rstd * (g - xhat * mean(g * xhat)).
template <typename T>
static void normB(const NormShape &s, const NormSaved<T> &saved, const T *dy,
                  T *dx, bool centered) {
  const Index H = s.hidden;
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = saved.x + t * H;
    const T *dyr = dy + t * H;
    T m = centered ? saved.mean[t] : T(0);
    T r = saved.rstd[t];
    const T *gamma = saved.gamma;
    double sg =
        centered
            ? normLaneSum(H, [&](Index i) { return double(dyr[i] * gamma[i]); })
            : 0.0;
    double sgx = normLaneSum(H, [&](Index i) {
      return double((dyr[i] * gamma[i]) * ((xr[i] - m) * r));
    });
    T mg = centered ? T(sg / double(H)) : T(0);
    T mgx = T(sgx / double(H));
    T *dxr = dx + t * H;
    for (Index i = 0; i < H; ++i) {
      T g = dyr[i] * saved.gamma[i];
      T xhat = (xr[i] - m) * r;
      dxr[i] = r * (g - mg - xhat * mgx);
    }
  }
}

template <typename T>
static void normW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
                  const NormGrads<T> &g, bool centered) {
  const Index H = s.hidden;
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = saved.x + t * H;
    const T *dyr = dy + t * H;
    T m = centered ? saved.mean[t] : T(0);
    T r = saved.rstd[t];
    for (Index i = 0; i < H; ++i) {
      g.dgamma[i] += dyr[i] * ((xr[i] - m) * r);
      if (centered)
        g.dbeta[i] += dyr[i];
    }
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
void rmsNormF(const NormShape &s, const NormParams<T> &p, const T *x, T *y,
              NormSaved<T> &saved) {
  const Index H = s.hidden;
  normStats(s, /*centered=*/false, x, p.gamma, saved);
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = x + t * H;
    const T r = saved.rstd[size_t(t)];
    T *yr = y + t * H;
    for (Index i = 0; i < H; ++i)
      yr[i] = xr[i] * r * p.gamma[i];
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
