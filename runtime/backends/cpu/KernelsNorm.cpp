//===- KernelsNorm.cpp - LayerNorm and RMSNorm F/B/W ----------------------===//
//
// Statistics are accumulated in double for float inputs too (then stored as
// T), which keeps float results close to the double reference.
//
//===----------------------------------------------------------------------===//

#include "ElementwiseMath.h"
#include "Kernels.h"

namespace pipeforge {
namespace rt {
namespace cpu {

using math::pfSqrt;

template <typename T>
void layerNormF(const NormShape &s, const NormParams<T> &p, const T *x, T *y,
                NormSaved<T> &saved) {
  const Index H = s.hidden;
  saved.x = x;
  saved.gamma = p.gamma;
  saved.mean.assign(s.tokens, T(0));
  saved.rstd.assign(s.tokens, T(0));
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = x + t * H;
    double sum = 0;
    for (Index i = 0; i < H; ++i)
      sum += xr[i];
    double mean = sum / double(H);
    double var = 0;
    for (Index i = 0; i < H; ++i) {
      double d = xr[i] - mean;
      var += d * d;
    }
    var /= double(H);
    T m = T(mean);
    T r = T(1) / pfSqrt(T(var) + T(s.eps));
    saved.mean[t] = m;
    saved.rstd[t] = r;
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
    double sg = 0, sgx = 0;
    for (Index i = 0; i < H; ++i) {
      T g = dyr[i] * saved.gamma[i];
      T xhat = (xr[i] - m) * r;
      sg += g;
      sgx += g * xhat;
    }
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
  saved.x = x;
  saved.gamma = p.gamma;
  saved.mean.clear();
  saved.rstd.assign(s.tokens, T(0));
  for (Index t = 0; t < s.tokens; ++t) {
    const T *xr = x + t * H;
    double ss = 0;
    for (Index i = 0; i < H; ++i)
      ss += double(xr[i]) * double(xr[i]);
    T r = T(1) / pfSqrt(T(ss / double(H)) + T(s.eps));
    saved.rstd[t] = r;
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
