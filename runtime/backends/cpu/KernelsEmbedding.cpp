//===- KernelsEmbedding.cpp - Token + learned position embedding ----------===//

#include "Kernels.h"

#include <algorithm>
#include <utility>
#include <vector>

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
  const Index H = s.hidden, n = s.batch * s.seq;
  // Each table row's sum over this call's tokens (token order, from +0:
  // what a cleared buffer's scatter-add holds), then added to the gradient
  // once: the bits of "write into a cleared buffer, then accumulate", with
  // no buffer of the table's size to clear and re-add (the caller may pass
  // the parameter's gradient itself, Backend::canAddTo).
  std::vector<std::pair<int32_t, Index>> rows;
  rows.reserve(size_t(n));
  for (Index t = 0; t < n; ++t) {
    Index local = Index(saved.tokens[t]) - s.vocabStart;
    if (local >= 0 && local < s.vocab)
      rows.push_back({int32_t(local), t});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<T> sum(static_cast<size_t>(H));
  auto addSum = [&](T *dst) {
    for (Index j = 0; j < H; ++j)
      dst[j] += sum[size_t(j)];
  };
  for (size_t k = 0; k < rows.size();) {
    std::fill(sum.begin(), sum.end(), T(0));
    size_t e = k;
    for (; e < rows.size() && rows[e].first == rows[k].first; ++e) {
      const T *dyr = dy + rows[e].second * H;
      for (Index j = 0; j < H; ++j)
        sum[size_t(j)] += dyr[j];
    }
    addSum(g.dtable + Index(rows[k].first) * H);
    k = e;
  }
  if (!s.learnedPositions || !g.dpos)
    return;
  for (Index i = 0; i < s.seq; ++i) {
    std::fill(sum.begin(), sum.end(), T(0));
    for (Index b = 0; b < s.batch; ++b) {
      const T *dyr = dy + (b * s.seq + i) * H;
      for (Index j = 0; j < H; ++j)
        sum[size_t(j)] += dyr[j];
    }
    addSum(g.dpos + i * H);
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
