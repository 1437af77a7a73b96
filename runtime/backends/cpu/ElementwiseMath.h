//===- ElementwiseMath.h - Scalar math shared by CPU and CUDA kernels -----===//
//
// Per-element math of the reference kernels: GELU (tanh approximation), SiLU,
// their derivatives, the rotary-embedding rotation and the pieces of a
// numerically stable softmax. Header-only and free of the C++ library beyond
// <math.h>, so a CUDA kernel can include it: every function is PF_HOST_DEVICE.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CPU_ELEMENTWISEMATH_H
#define PIPEFORGE_RUNTIME_CPU_ELEMENTWISEMATH_H

#include "pipeforge/rt/HostDevice.h"

#include <math.h>

namespace pipeforge {
namespace rt {
namespace math {

// Precision-matched wrappers: float calls the f-suffixed C functions, double
// the plain ones (both exist on host and device).
PF_HOST_DEVICE inline float pfExp(float x) { return expf(x); }
PF_HOST_DEVICE inline double pfExp(double x) { return exp(x); }
/// exp in float as plain arithmetic (Cephes' expf: x = n ln2 + r with
/// |r| <= ln2 / 2 by Cody-Waite, exp(r) by a degree-6 polynomial, 2^n from
/// the exponent bits in two factors so that n = 128 does not overflow): at
/// most 2 ulp from exp over the normal range, 0 below -87.34 (where exp is
/// subnormal), +inf above 88.72, NaN for NaN. No libm call and no
/// float-to-int conversion, so GCC vectorises the softmax loops around it
/// (libm's expf is a call per element) and a CUDA kernel computes the same
/// expression.
PF_HOST_DEVICE inline float pfExpFast(float x) {
  const float hi = 88.7228394f, lo = -87.3365479f;
  const float xc = x > hi ? hi : (x < lo ? lo : x);
  // 1.5 * 2^23: adding it rounds x log2(e) to an integer n, which then sits
  // in the low mantissa bits of t.
  const float shifter = 12582912.0f;
  const float t = xc * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  float r = xc - n * 0.693359375f; // ln 2 split: 0.693359375 is exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
#ifdef __CUDA_ARCH__
  const int ni = __float_as_int(t) - __float_as_int(shifter);
  const float s1 = __int_as_float((127 + (ni >> 1)) << 23);
  const float s2 = __int_as_float((127 + ni - (ni >> 1)) << 23);
#else
  unsigned tb, sb = 0x4b400000u; // the bits of `shifter`
  __builtin_memcpy(&tb, &t, 4);
  const int ni = int(tb - sb); // |n| <= 128
  const unsigned b1 = unsigned(127 + (ni >> 1)) << 23,
                 b2 = unsigned(127 + ni - (ni >> 1)) << 23;
  float s1, s2;
  __builtin_memcpy(&s1, &b1, 4);
  __builtin_memcpy(&s2, &b2, 4);
#endif
  const float e = y * s1 * s2;
  return x < lo ? 0.0f : (x > hi ? INFINITY : (x != x ? x : e));
}
PF_HOST_DEVICE inline double pfExpFast(double x) { return exp(x); }
PF_HOST_DEVICE inline float pfLog(float x) { return logf(x); }
PF_HOST_DEVICE inline double pfLog(double x) { return log(x); }
/// tanh in float as a rational function (Eigen's generic_fast_tanh_float:
/// an odd degree-13 / even degree-6 minimax fit on [-7.905, 7.905], clamped
/// outside, x itself below 4e-4): at most 4e-7 from tanh over the floats,
/// against tanhf's libm call per element. Plain arithmetic and selects, so
/// GCC vectorises the GELU loops around it (GELU's tanh was ~25% of a GPT-2
/// training step on the CPU; benchmarks/README.md), and a CUDA kernel
/// computes the same expression.
PF_HOST_DEVICE inline float pfTanh(float x) {
  const float clamp = 7.90531110763549805f;
  float xc = x < -clamp ? -clamp : (x > clamp ? clamp : x);
  float x2 = xc * xc;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  float r = p * xc / q;
  return (x < 0.0004f && x > -0.0004f) ? x : r;
}
PF_HOST_DEVICE inline double pfTanh(double x) { return tanh(x); }
PF_HOST_DEVICE inline float pfSqrt(float x) { return sqrtf(x); }
PF_HOST_DEVICE inline double pfSqrt(double x) { return sqrt(x); }
PF_HOST_DEVICE inline float pfCos(float x) { return cosf(x); }
PF_HOST_DEVICE inline double pfCos(double x) { return cos(x); }
PF_HOST_DEVICE inline float pfSin(float x) { return sinf(x); }
PF_HOST_DEVICE inline double pfSin(double x) { return sin(x); }
PF_HOST_DEVICE inline float pfPow(float x, float y) { return powf(x, y); }
PF_HOST_DEVICE inline double pfPow(double x, double y) { return pow(x, y); }

//===--- GELU, tanh approximation -----------------------------------------===//
// gelu(x) = 0.5 x (1 + tanh(c (x + 0.044715 x^3))),  c = sqrt(2 / pi).

template <typename T> PF_HOST_DEVICE inline T geluTanhInner(T x) {
  const T c = T(0.7978845608028654); // sqrt(2/pi)
  return c * (x + T(0.044715) * x * x * x);
}

template <typename T> PF_HOST_DEVICE inline T gelu(T x) {
  return T(0.5) * x * (T(1) + pfTanh(geluTanhInner(x)));
}

/// d gelu / dx.
template <typename T> PF_HOST_DEVICE inline T geluGrad(T x) {
  const T c = T(0.7978845608028654);
  T t = pfTanh(geluTanhInner(x));
  T du = c * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

//===--- SiLU
//---------------------------------------------------------------===//

template <typename T> PF_HOST_DEVICE inline T sigmoid(T x) {
  // Stable on both tails: e = exp(-|x|) <= 1. Both sides computed and one
  // selected (no branch), with pfExpFast (plain arithmetic in float), so
  // GCC vectorises the SiLU loops around it; a CUDA kernel computes the
  // same expression. (With libm's expf, SwiGLU's sigmoid was ~14% of a
  // Llama training step on the CPU.)
  T e = pfExpFast(x >= T(0) ? -x : x);
  T d = T(1) + e;
  return x >= T(0) ? T(1) / d : e / d;
}

template <typename T> PF_HOST_DEVICE inline T silu(T x) {
  return x * sigmoid(x);
}

/// d silu / dx = s (1 + x (1 - s)), s = sigmoid(x).
template <typename T> PF_HOST_DEVICE inline T siluGrad(T x) {
  T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

//===--- Rotary embedding
//---------------------------------------------------===//
// Convention: "rotate half" (HF Llama / GPT-NeoX). For a head vector of even
// size d, element i < d/2 pairs with element i + d/2, both rotated by the angle
// pos * theta^(-2i/d).

template <typename T>
PF_HOST_DEVICE inline T rotaryAngle(long long pos, long long i, long long d,
                                    T theta) {
  T invFreq = pfPow(theta, -T(2 * i) / T(d));
  return T(pos) * invFreq;
}

/// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
template <typename T>
PF_HOST_DEVICE inline void rotaryRotate(T x1, T x2, T c, T s, T &y1, T &y2) {
  y1 = x1 * c - x2 * s;
  y2 = x2 * c + x1 * s;
}

/// The transpose (= inverse) rotation; maps a gradient w.r.t. the rotated
/// pair back onto the unrotated pair.
template <typename T>
PF_HOST_DEVICE inline void rotaryRotateTranspose(T g1, T g2, T c, T s, T &x1,
                                                 T &x2) {
  x1 = g1 * c + g2 * s;
  x2 = g2 * c - g1 * s;
}

//===--- Softmax pieces
//-----------------------------------------------------===//

/// exp(x - rowMax): the unnormalised, overflow-free softmax numerator
/// (pfExpFast: the loops over a row vectorise).
template <typename T> PF_HOST_DEVICE inline T softmaxExp(T x, T rowMax) {
  return pfExpFast(x - rowMax);
}

/// Online (streaming) softmax: fold x into the running max m and running sum
/// l of exp(. - m).
template <typename T>
PF_HOST_DEVICE inline void onlineSoftmaxUpdate(T x, T &m, T &l) {
  if (x > m) {
    l = l * pfExp(m - x) + T(1);
    m = x;
  } else {
    l += pfExp(x - m);
  }
}

/// Softmax backward for one element: dx_i = p_i (dp_i - sum_j p_j dp_j),
/// given dot = sum_j p_j dp_j.
template <typename T> PF_HOST_DEVICE inline T softmaxGrad(T p, T dp, T dot) {
  return p * (dp - dot);
}

} // namespace math
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CPU_ELEMENTWISEMATH_H
