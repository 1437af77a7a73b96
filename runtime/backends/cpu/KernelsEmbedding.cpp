//===- KernelsEmbedding.cpp - Token + learned position embedding ----------===//

#include "Kernels.h"

namespace pipeforge {
namespace rt {
namespace cpu {

Index firstInvalidIndex(const int32_t *v, Index n, Index limit) {
  for (Index i = 0; i < n; ++i)
    if (v[i] < 0 || Index(v[i]) >= limit)
      return i;
  return -1;
}

template <typename T>
void embeddingF(const EmbeddingShape &s, const EmbeddingParams<T> &p,
                const int32_t *tokens, T *y, EmbeddingSaved &saved) {
  const Index H = s.hidden;
  for (Index b = 0; b < s.batch; ++b)
    for (Index i = 0; i < s.seq; ++i) {
      Index t = b * s.seq + i;
      Index local = Index(tokens[t]) - s.vocabStart;
      const T *row =
          local >= 0 && local < s.vocab ? p.table + local * H : nullptr;
      T *yr = y + t * H;
      const T *pr = s.learnedPositions ? p.pos + i * H : nullptr;
      for (Index j = 0; j < H; ++j)
        yr[j] = row && pr ? row[j] + pr[j] : row ? row[j] : pr ? pr[j] : T(0);
    }
  saved.tokens = tokens;
}

template <typename T>
void embeddingW(const EmbeddingShape &s, const EmbeddingSaved &saved,
                const T *dy, const EmbeddingGrads<T> &g) {
  const Index H = s.hidden;
  // Sequential scatter-add in token order: deterministic for repeated tokens.
  for (Index b = 0; b < s.batch; ++b)
    for (Index i = 0; i < s.seq; ++i) {
      Index t = b * s.seq + i;
      const T *dyr = dy + t * H;
      Index local = Index(saved.tokens[t]) - s.vocabStart;
      if (local >= 0 && local < s.vocab) {
        T *dt = g.dtable + local * H;
        for (Index j = 0; j < H; ++j)
          dt[j] += dyr[j];
      }
      if (s.learnedPositions) {
        T *dp = g.dpos + i * H;
        for (Index j = 0; j < H; ++j)
          dp[j] += dyr[j];
      }
    }
}

#define PF_INSTANTIATE(T)                                                      \
  template void embeddingF<T>(const EmbeddingShape &,                          \
                              const EmbeddingParams<T> &, const int32_t *,     \
                              T *, EmbeddingSaved &);                          \
  template void embeddingW<T>(const EmbeddingShape &, const EmbeddingSaved &,  \
                              const T *, const EmbeddingGrads<T> &);
PF_INSTANTIATE(float)
PF_INSTANTIATE(double)
#undef PF_INSTANTIATE

} // namespace cpu
} // namespace rt
} // namespace pipeforge
