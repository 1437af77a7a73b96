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
  for (Index t = 0; t < s.tokens; ++t) {
    const T *row = logits + t * V;
    const T m = rowLaneMax(row, V);
    T lse = m + math::pfLog(rowExpSum(row, V, m));
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
    for (Index j = 0; j < V; ++j)
      d[j] = math::pfExpFast(row[j] - lse) * scale;
    d[saved.targets[t]] -= scale;
  }
}

void vocabShardMax(Index tokens, Index V, const float *logits, float *m) {
  for (Index t = 0; t < tokens; ++t) {
    m[t] = rowLaneMax(logits + t * V, V);
  }
}

void vocabShardStats(Index tokens, Index V, Index start, const float *logits,
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

void vocabParallelLossBwd(Index tokens, Index V, Index start,
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
    for (Index j = 0; j < V; ++j)
      d[j] = math::pfExpFast(row[j] - lse) * scale;
    Index local = Index(targets[t]) - start;
    if (local >= 0 && local < V)
      d[local] -= scale;
  }
}

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
