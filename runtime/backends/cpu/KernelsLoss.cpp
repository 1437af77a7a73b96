//===- KernelsLoss.cpp - Cross-entropy over the vocabulary ----------------===//

#include "ElementwiseMath.h"
#include "Kernels.h"

namespace pipeforge {
namespace rt {
namespace cpu {

template <typename T>
PF_CPU_CLONES T crossEntropyF(const CrossEntropyShape &s, const T *logits,
                const int32_t *targets, CrossEntropySaved<T> &saved) {
  const Index V = s.vocab;
  saved.logits = logits;
  saved.targets = targets;
  saved.lse.assign(s.tokens, T(0));
  double total = 0;
  // Each row's max is taken while the row before is summed (the first
  // read of a row from memory overlaps the exps of the one before).
  T m = s.tokens ? rowLaneMax(logits, V) : T(0);
  for (Index t = 0; t < s.tokens; ++t) {
    const T *row = logits + t * V;
    T mNext = m;
    const T sum = t + 1 < s.tokens
                      ? rowExpSumNextMax(row, V, m, row + V, mNext)
                      : rowExpSum(row, V, m);
    T lse = m + math::pfLog(sum);
    m = mNext;
    saved.lse[t] = lse;
    total += double(lse - row[targets[t]]);
  }
  return s.tokens ? T(total / double(s.tokens)) : T(0);
}

template <typename T>
PF_CPU_CLONES void crossEntropyB(const CrossEntropyShape &s,
                   const CrossEntropySaved<T> &saved, T dloss, T *dlogits) {
  const Index V = s.vocab;
  if (s.tokens == 0)
    return;
  T scale = dloss / T(s.tokens);
  for (Index t = 0; t < s.tokens; ++t) {
    const T *row = saved.logits + t * V;
    T lse = saved.lse[t];
    T *d = dlogits + t * V;
    rowExpScaled(row, V, lse, scale, d);
    d[saved.targets[t]] -= scale;
  }
}

PF_CPU_CLONES void vocabShardMax(Index tokens, Index V, const float *logits, float *m) {
  for (Index t = 0; t < tokens; ++t) {
    m[t] = rowLaneMax(logits + t * V, V);
  }
}

PF_CPU_CLONES void vocabShardStats(Index tokens, Index V, Index start, const float *logits,
                     const int32_t *targets, const float *m, float *stats) {
  for (Index t = 0; t < tokens; ++t) {
    const float *row = logits + t * V;
    const float sum = rowExpSum(row, V, m[t]);
    Index local = Index(targets[t]) - start;
    stats[2 * t] = sum;
    stats[2 * t + 1] = local >= 0 && local < V ? row[local] : 0.0f;
  }
}

float vocabParallelLoss(Index tokens, const float *m, const float *stats) {
  double total = 0;
  for (Index t = 0; t < tokens; ++t) {
    float lse = m[t] + math::pfLog(stats[2 * t]);
    total += double(lse - stats[2 * t + 1]);
  }
  return tokens ? float(total / double(tokens)) : 0.0f;
}

PF_CPU_CLONES void vocabParallelLossBwd(Index tokens, Index V, Index start,
                          const float *logits, const int32_t *targets,
                          const float *m, const float *stats, float dloss,
                          float *dlogits) {
  if (tokens == 0)
    return;
  float scale = dloss / float(tokens);
  for (Index t = 0; t < tokens; ++t) {
    const float *row = logits + t * V;
    float lse = m[t] + math::pfLog(stats[2 * t]);
    float *d = dlogits + t * V;
    rowExpScaled(row, V, lse, scale, d);
    Index local = Index(targets[t]) - start;
    if (local >= 0 && local < V)
      d[local] -= scale;
  }
}

#ifdef PF_CPU_AVX512_ROWS
// The float row helpers on AVX-512 (Kernels.h): GCC's generic vectors of 16
// floats in functions built for avx512f (on other targets GCC breaks a
// comparison of such vectors into scalars).
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace detail {
namespace {
typedef float F16 __attribute__((vector_size(64)));
typedef float F8 __attribute__((vector_size(32)));
typedef int I16 __attribute__((vector_size(64)));
typedef unsigned U16 __attribute__((vector_size(64)));
constexpr Index kWidth = 16;
static_assert(2 * kRowLanes == kWidth, "a vector is two rounds of the lanes");

inline F16 load(const float *p) {
  F16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float *p, F16 v) { __builtin_memcpy(p, &v, sizeof v); }
/// s[l] += v[l], then s[l] += v[8 + l].
inline void addToLanes(F8 &s, F16 v) {
  s += __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  s += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
}
/// math::pfExpFast(float) on 16 floats: the same operations in the same
/// order (ElementwiseMath.h).
inline F16 expFast(F16 x) {
  const F16 zero = {}, hi = zero + 88.7228394f, lo = zero - 87.3365479f;
  const F16 xc = x > hi ? hi : (x < lo ? lo : x);
  const float shifter = 12582912.0f;
  const F16 t = xc * 1.44269504088896341f + shifter;
  const F16 n = t - shifter;
  F16 r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  F16 p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const F16 y = p * (r * r) + r + 1.0f;
  const I16 ni = I16(U16(t) - 0x4b400000u); // t's bits - the shifter's
  const I16 half = ni >> 1;
  const F16 s1 = F16((U16(half) + 127u) << 23);
  const F16 s2 = F16((U16(ni) + 127u - U16(half)) << 23);
  const F16 e = y * s1 * s2;
  return x < lo ? zero : (x > hi ? zero + INFINITY : (x != x ? x : e));
}
/// The 8 lanes' sums of a row's exps so far (`s`, the first j terms, j a
/// multiple of kRowLanes) with the terms j..n added one at a time, combined.
inline float expSumTail(F8 s, const float *x, Index j, Index n, float m) {
  float l[kRowLanes];
  __builtin_memcpy(l, &s, sizeof l);
  for (int k = 0; j < n; ++j, ++k)
    l[k % kRowLanes] += math::softmaxExp(x[j], m);
  return combineRowLanes(l);
}
} // namespace

float rowLaneMaxAvx512(const float *x, Index n) {
  Index j = 0;
  float m = x[0];
  if (n >= 2 * kWidth) {
    F16 m0 = F16{} + x[0], m1 = m0;
    for (; j + 2 * kWidth <= n; j += 2 * kWidth) {
      const F16 a = load(x + j), b = load(x + j + kWidth);
      m0 = a > m0 ? a : m0;
      m1 = b > m1 ? b : m1;
    }
    m0 = m1 > m0 ? m1 : m0;
    for (int l = 0; l < kWidth; ++l)
      m = m0[l] > m ? m0[l] : m;
  }
  for (; j < n; ++j)
    m = x[j] > m ? x[j] : m;
  return m;
}

float rowExpSumAvx512(const float *x, Index n, float m) {
  F8 s = {};
  Index j = 0;
  for (; j + kWidth <= n; j += kWidth)
    addToLanes(s, expFast(load(x + j) - m));
  return expSumTail(s, x, j, n, m);
}

float rowSoftmaxExpAvx512(float *x, Index n, Index padded, float m) {
  F8 s = {};
  Index j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    const F16 e = expFast(load(x + j) - m);
    store(x + j, e);
    addToLanes(s, e);
  }
  if (j < n && j + kWidth <= padded) {
    // The last vector runs past n: +0 into the lanes there, which changes
    // nothing (a lane of exps is +0, positive, inf or NaN).
    const I16 iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const F16 e = expFast(load(x + j) - m);
    store(x + j, e);
    addToLanes(s, iota < int(n - j) ? e : F16{});
    j += kWidth;
  }
  float l[kRowLanes];
  __builtin_memcpy(l, &s, sizeof l);
  for (int k = 0; j < padded; ++j, ++k) {
    x[j] = math::softmaxExp(x[j], m);
    if (j < n)
      l[k % kRowLanes] += x[j];
  }
  return combineRowLanes(l);
}

float rowExpSumNextMaxAvx512(const float *x, Index n, float m,
                             const float *next, float &mNext) {
  F8 s = {};
  F16 mv = F16{} + next[0];
  Index j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    const F16 a = load(next + j);
    mv = a > mv ? a : mv;
    addToLanes(s, expFast(load(x + j) - m));
  }
  float mx = next[0];
  for (int k = 0; k < kWidth; ++k)
    mx = mv[k] > mx ? mv[k] : mx;
  for (Index i = j; i < n; ++i)
    mx = next[i] > mx ? next[i] : mx;
  mNext = mx;
  return expSumTail(s, x, j, n, m);
}

void rowExpScaledAvx512(const float *x, Index n, float sub, float scale,
                        float *out) {
  Index j = 0;
  for (; j + kWidth <= n; j += kWidth)
    store(out + j, expFast(load(x + j) - sub) * scale);
  for (; j < n; ++j)
    out[j] = math::pfExpFast(x[j] - sub) * scale;
}

void expFastAvx512(const float *x, Index n, float *out) {
  Index j = 0;
  for (; j + kWidth <= n; j += kWidth)
    store(out + j, expFast(load(x + j)));
  for (; j < n; ++j)
    out[j] = math::pfExpFast(x[j]);
}
} // namespace detail
#pragma GCC pop_options
#endif

#define PF_INSTANTIATE(T)                                                      \
  template T crossEntropyF<T>(const CrossEntropyShape &, const T *,            \
                              const int32_t *, CrossEntropySaved<T> &);        \
  template void crossEntropyB<T>(const CrossEntropyShape &,                    \
                                 const CrossEntropySaved<T> &, T, T *);
PF_INSTANTIATE(float)
PF_INSTANTIATE(double)
#undef PF_INSTANTIATE

} // namespace cpu
} // namespace rt
} // namespace pipeforge
