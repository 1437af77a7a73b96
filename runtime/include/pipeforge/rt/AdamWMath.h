//===- AdamWMath.h - One AdamW element, forward and inverse ---------------===//
//
// The per-element arithmetic of the AdamW step and of its exact-inverse
// rollback (docs/background.md), shared by the host optimizer
// (runtime/lib/Optimizer.cpp, float and double), the CPU backends' on-device
// step (Backend::adamw) and the CUDA kernel (backends/cuda/RowKernels.cu), so
// that a step taken by any of them has the same bits (products through
// adamwMul, which nvcc may not fuse into an FMA). Header-only and free
// of the C++ library beyond <math.h>, so a CUDA kernel can include it.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RT_ADAMWMATH_H
#define PIPEFORGE_RT_ADAMWMATH_H

#include "pipeforge/rt/HostDevice.h"

#include <math.h>

namespace pipeforge {
namespace rt {

PF_HOST_DEVICE inline float adamwSqrt(float x) { return sqrtf(x); }
PF_HOST_DEVICE inline double adamwSqrt(double x) { return sqrt(x); }

/// A product that is never fused into a following add: nvcc contracts
/// a * b + c into one FMA by default (--fmad=true), which rounds once where
/// the host rounds twice. __fmul_rn is never contracted; the host compiler
/// does not contract across these statements (no -ffp-contract=fast).
PF_HOST_DEVICE inline float adamwMul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PF_HOST_DEVICE inline double adamwMul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/// The coefficients of one step, rounded to T as the optimizer rounds them.
template <typename T> struct AdamWCoeffsT {
  T b1, b2, ob1, ob2, eps, decay, scale;
  /// lr / (1 - b1^t) and 1 / sqrt(1 - b2^t), computed in double and rounded
  /// once: the bias corrections folded into the step size and the second
  /// moment's square root, so an element divides once (as PyTorch's fused
  /// AdamW; three divisions per element made the host step compute-bound).
  T stepSize, rsqrtBc2;
  bool scaled; ///< multiply the gradient by `scale` (clipping)
};
using AdamWCoeffs = AdamWCoeffsT<float>;

/// Step t (1-based) with learning rate `lr` and gradient scale `clipScale`;
/// `decays` false: no weight decay for this tensor (biases, norm weights).
template <typename T>
inline AdamWCoeffsT<T> adamwCoeffsT(double beta1, double beta2, double eps,
                                    double weightDecay, long long t, double lr,
                                    double clipScale, bool decays = true) {
  AdamWCoeffsT<T> c;
  c.b1 = T(beta1);
  c.b2 = T(beta2);
  c.ob1 = T(1.0 - beta1);
  c.ob2 = T(1.0 - beta2);
  c.stepSize = T(lr / (1.0 - pow(beta1, double(t))));
  c.rsqrtBc2 = T(1.0 / sqrt(1.0 - pow(beta2, double(t))));
  c.eps = T(eps);
  c.decay = decays ? T(1.0 - lr * weightDecay) : T(1);
  c.scale = T(clipScale);
  c.scaled = clipScale != 1.0;
  return c;
}

/// The update term lr/(1-b1^t) m / (sqrt(v) / sqrt(1-b2^t) + eps): one
/// division and one square root per element, both correctly rounded.
template <typename T>
PF_HOST_DEVICE inline T adamwUpdateTerm(const AdamWCoeffsT<T> &c, T m, T v) {
  return adamwMul(c.stepSize, m) /
         (adamwMul(adamwSqrt(v), c.rsqrtBc2) + c.eps);
}

/// theta (1 - lr wd) - lr m' / (sqrt(v') + eps), after the moment updates
/// (m' and v' bias-corrected: adamwUpdateTerm).
template <typename T>
PF_HOST_DEVICE inline void adamwElement(const AdamWCoeffsT<T> &c, T grad,
                                        T &theta, T &m, T &v) {
  T g = c.scaled ? adamwMul(grad, c.scale) : grad;
  m = adamwMul(c.b1, m) + adamwMul(c.ob1, g);
  v = adamwMul(c.b2, v) + adamwMul(c.ob2, adamwMul(g, g));
  T upd = adamwUpdateTerm(c, m, v);
  T x = adamwMul(theta, c.decay);
  theta = x - upd;
}

/// The inverse of adamwElement with the same coefficients and gradient:
/// theta = (theta + lr m'/(sqrt(v')+eps)) / (1 - lr wd), m = (m - (1-b1) g)
/// / b1, v = (v - (1-b2) g^2) / b2, clamped at 0 against rounding.
template <typename T>
PF_HOST_DEVICE inline void adamwElementUndo(const AdamWCoeffsT<T> &c, T grad,
                                            T &theta, T &m, T &v) {
  T g = c.scaled ? adamwMul(grad, c.scale) : grad;
  T upd = adamwUpdateTerm(c, m, v);
  theta = (theta + upd) / c.decay;
  m = (m - adamwMul(c.ob1, g)) / c.b1;
  T vi = (v - adamwMul(c.ob2, adamwMul(g, g))) / c.b2;
  v = vi > T(0) ? vi : T(0);
}

/// Whole tensors, in element order. The coefficients are copied first: a
/// store through theta, m or v could otherwise alias them (the caller's
/// copy), which keeps the compiler from vectorising the loop (built with
/// -fno-math-errno, runtime/CMakeLists.txt; the bits do not change).
template <typename T>
inline void adamwTensor(const AdamWCoeffsT<T> &coeffs, long long n, T *theta,
                        T *m, T *v, const T *grad, bool undo) {
  const AdamWCoeffsT<T> c = coeffs;
  if (undo)
    for (long long i = 0; i < n; ++i)
      adamwElementUndo(c, grad[i], theta[i], m[i], v[i]);
  else
    for (long long i = 0; i < n; ++i)
      adamwElement(c, grad[i], theta[i], m[i], v[i]);
}

/// The sum of squares in double (the gradient norm), in eight interleaved
/// partial sums: lane k takes the elements i = k (mod 8) in index order,
/// the lanes combined pairwise. A fixed order (the same bits for a tensor
/// on any rank layout) that vectorises, where one running sum is a chain
/// of dependent adds (2.3% of a medium Llama step).
template <typename T> inline double sumSquaresTensor(const T *x, long long n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  long long i = 0;
  // Blocks of 64 elements with the memory 4 KiB ahead requested: one
  // stream read once, where the hardware prefetch alone left the loop
  // waiting on memory (1.6x on 440 MB; the order of the sums is the same).
  constexpr long long kBlock = 64;
  for (; i + kBlock <= n; i += kBlock) {
#if defined(__GNUC__) && !defined(__CUDA_ARCH__)
    constexpr long long kAhead = 4096 / (long long)sizeof(T);
    for (long long p = 0; p < kBlock; p += 64 / (long long)sizeof(T))
      __builtin_prefetch(x + i + kAhead + p, 0, 0);
#endif
    for (long long k = 0; k < kBlock; k += 8)
      for (int l = 0; l < 8; ++l)
        s[l] += double(x[i + k + l]) * double(x[i + k + l]);
  }
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      s[l] += double(x[i + l]) * double(x[i + l]);
  for (int l = 0; i < n; ++i, ++l)
    s[l] += double(x[i]) * double(x[i]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// sumSquaresTensor and adamwTensor over floats on the host, built for
/// AVX-512, AVX2 and the baseline and picked at load time (Optimizer.cpp):
/// the same bits at every width.
double sumSquaresHost(const float *x, long long n);
void adamwHost(const AdamWCoeffs &c, long long n, float *theta, float *m,
               float *v, const float *grad, bool undo);

} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RT_ADAMWMATH_H
