//===- Kernels.h - CPU reference kernels: F, B and W per op -----*- C++ -*-===//
//
// Reference kernels of the PipeForge runtime, plain C++17 over OpenBLAS.
// Every op with a backward splits it in two:
//   B  gradient w.r.t. the op's inputs (activations): what the upstream stage
//      waits for;
//   W  gradient w.r.t. the op's parameters: nothing B produces depends on it.
// BW runs both (fused) and gives the same bits as B followed by W.
//
// Calling convention, the same for every op `xxx`:
//   xxxF (shape, params, inputs..., outputs..., XxxSaved &saved [, ws])
//   xxxB (shape, const XxxSaved &saved, dy, input grads... [, ws])
//   xxxW (shape, const XxxSaved &saved, dy, XxxGrads grads [, ws])
//   xxxBW(shape, const XxxSaved &saved, dy, input grads..., grads [, ws])
// So W reads only what F saved plus the dy that B received (see the
// structural test in unittests/Runtime/KernelsTest.cpp).
//
// Tensors are row-major raw pointers with explicit sizes; a microbatch is
// `batch` sequences of `seq` tokens, tokens = batch * seq, hidden = h.
//
// Output rules:
//   * F and B outputs are overwritten.
//   * W outputs (parameter gradients) are ACCUMULATED (+=), so gradients of
//     several microbatches sum in place; zero them before the first one.
//
// Saved structs: F fills them. They hold (a) non-owning pointers to forward
// inputs and parameters, which the caller keeps alive and unchanged until the
// last of B/W has run, and (b) owned buffers the kernel computed (statistics,
// probabilities, routing). Saved structs are move-only: owned buffers move
// with them, so internal pointers stay valid.
//
// Workspace: scratch memory passed explicitly; no kernel keeps global state.
//
// Determinism: all loops are sequential with a fixed order; with OpenBLAS
// limited to one thread the result bits depend only on the inputs.
//
// Templates are instantiated for float and double (double runs the
// finite-difference gradient checks).
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CPU_KERNELS_H
#define PIPEFORGE_RUNTIME_CPU_KERNELS_H

#include "ElementwiseMath.h"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace pipeforge {
namespace rt {
namespace cpu {

using Index = int64_t;

/// The row and elementwise loops of the float kernels are built three times,
/// for AVX-512 (16 lanes), AVX2 (8) and the x86-64 baseline (SSE2, 4), and
/// the loader picks one by the CPU (GCC's target_clones; elsewhere one
/// plain build). The same bits on every path: the kernels' files are
/// compiled with -ffp-contract=off (runtime/CMakeLists.txt: AVX-512 has FMA,
/// which would otherwise fuse a * b + c), and a clone neither reassociates
/// nor changes a sum's lanes (the kNormLanes / kRowLanes partial sums are
/// the same lanes at every vector width).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    defined(__linux__)
#define PF_CPU_CLONES                                                          \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PF_CPU_CLONES
#endif
/// Helpers the cloned kernels call in their loops: always inlined, so each
/// clone runs them at its own vector width (an out-of-line copy is built
/// for the baseline's SSE2 only; the loss's rowExpSum was one, 2.6% of a
/// medium Llama step).
#if defined(__GNUC__)
#define PF_CPU_INLINE __attribute__((always_inline)) inline
#else
#define PF_CPU_INLINE inline
#endif

/// Scratch memory for kernels that need temporaries. Grows, never shrinks;
/// reuse one per thread of execution.
template <typename T> class Workspace {
public:
  /// Returns at least `n` elements; invalidates earlier pointers.
  T *get(size_t n) {
    if (buf.size() < n)
      buf.resize(n);
    return buf.data();
  }
  size_t capacity() const { return buf.size(); }

private:
  std::vector<T> buf;
};

/// Base of all saved-tensor structs: move-only.
struct SavedBase {
  SavedBase() = default;
  SavedBase(const SavedBase &) = delete;
  SavedBase &operator=(const SavedBase &) = delete;
  SavedBase(SavedBase &&) = default;
  SavedBase &operator=(SavedBase &&) = default;
};

//===----------------------------------------------------------------------===//
// Linear: y = x W^T (+ b).  x [tokens, in], W [out, in], b [out], y [tokens,
// out] Also the LM head (hasBias = false).
//===----------------------------------------------------------------------===//

struct LinearShape {
  Index tokens = 0, in = 0, out = 0;
  bool hasBias = true;
};
template <typename T> struct LinearParams {
  const T *weight = nullptr; ///< [out, in]
  const T *bias = nullptr;   ///< [out]; ignored when !hasBias
};
template <typename T> struct LinearGrads {
  T *dweight = nullptr; ///< [out, in], accumulated
  T *dbias = nullptr;   ///< [out], accumulated; ignored when !hasBias
  /// dweight holds no value yet: the GEMM writes it (beta = 0) instead of
  /// adding to it, so the caller need not clear it first (the same bits as
  /// adding to zeros: 0 + p = p).
  bool overwriteWeight = false;
};
/// B needs the weight, W needs x.
template <typename T> struct LinearSaved : SavedBase {
  const T *x = nullptr;
  const T *weight = nullptr;
};

template <typename T>
void linearF(const LinearShape &s, const LinearParams<T> &p, const T *x, T *y,
             LinearSaved<T> &saved);
/// dx = dy W.
template <typename T>
void linearB(const LinearShape &s, const LinearSaved<T> &saved, const T *dy,
             T *dx);
/// dW += dy^T x, db += sum_t dy.
template <typename T>
void linearW(const LinearShape &s, const LinearSaved<T> &saved, const T *dy,
             const LinearGrads<T> &g);
template <typename T>
void linearBW(const LinearShape &s, const LinearSaved<T> &saved, const T *dy,
              T *dx, const LinearGrads<T> &g);

//===----------------------------------------------------------------------===//
// LayerNorm and RMSNorm over the last dimension. x, y [tokens, hidden].
//   layernorm: y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps)
//   rmsnorm:   y = x * rstd * gamma,                 rstd = 1/sqrt(ms + eps)
//===----------------------------------------------------------------------===//

struct NormShape {
  Index tokens = 0, hidden = 0;
  double eps = 1e-5;
};
template <typename T> struct NormParams {
  const T *gamma = nullptr; ///< [hidden]
  const T *beta = nullptr;  ///< [hidden]; layernorm only
};
template <typename T> struct NormGrads {
  T *dgamma = nullptr; ///< accumulated
  T *dbeta = nullptr;  ///< accumulated; layernorm only
};
/// B needs x, gamma, mean, rstd; W needs x, mean, rstd.
template <typename T> struct NormSaved : SavedBase {
  const T *x = nullptr;
  const T *gamma = nullptr;
  std::vector<T> mean; ///< [tokens]; empty for rmsnorm
  std::vector<T> rstd; ///< [tokens]
};

/// The row sums of the norms (statistics, and the backward's sums of g and
/// g * xhat): sum_{i < n} f(i) in double as kNormLanes partial sums, lane k
/// adding the terms i = k (mod kNormLanes) in index order, combined as
/// (s0 + s1) + (s2 + s3). A fixed order (the same bits every run) that
/// vectorises; the CUDA kernels' block reductions agree to rounding.
constexpr int kNormLanes = 4;
template <typename F> inline double normLaneSum(Index n, F f) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  Index i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes) {
    s0 += f(i);
    s1 += f(i + 1);
    s2 += f(i + 2);
    s3 += f(i + 3);
  }
  double tail[kNormLanes] = {0, 0, 0, 0};
  for (; i < n; ++i)
    tail[i % kNormLanes] = f(i);
  return ((s0 + tail[0]) + (s1 + tail[1])) + ((s2 + tail[2]) + (s3 + tail[3]));
}

/// The sums and maxima over a softmax row (attention's scores, the loss's
/// logits) in kRowLanes interleaved partial results of T, lane k taking the
/// terms j = k (mod kRowLanes) in index order, combined pairwise: a fixed
/// order (the same bits every run) that GCC vectorises, where one running
/// sum is a chain of dependent adds. The CUDA kernels' block reductions
/// agree to rounding.
constexpr int kRowLanes = 8;
/// Adds x[0..n) to the lanes, term j to lane j mod kRowLanes.
template <typename T>
PF_CPU_INLINE void addToRowLanes(T (&s)[kRowLanes], const T *x, Index n) {
  Index j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes)
    for (int l = 0; l < kRowLanes; ++l)
      s[l] += x[j + l];
  for (int l = 0; j < n; ++j, ++l)
    s[l] += x[j];
}
template <typename T> PF_CPU_INLINE T combineRowLanes(const T (&s)[kRowLanes]) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
template <typename T> PF_CPU_INLINE T rowLaneSum(const T *x, Index n) {
  T s[kRowLanes] = {};
  addToRowLanes(s, x, n);
  return combineRowLanes(s);
}
/// max_{j < n} x[j], n >= 1 (exact in any order; a NaN in the row reaches
/// the softmax through its exp whatever the max is).
template <typename T> PF_CPU_INLINE T rowLaneMax(const T *x, Index n) {
  T m[kRowLanes];
  for (int l = 0; l < kRowLanes; ++l)
    m[l] = x[0];
  Index j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes)
    for (int l = 0; l < kRowLanes; ++l)
      m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
  for (int l = 0; j < n; ++j, ++l)
    m[l] = x[j] > m[l] ? x[j] : m[l];
  for (int l = 1; l < kRowLanes; ++l)
    m[0] = m[l] > m[0] ? m[l] : m[0];
  return m[0];
}
/// sum_{j < n} exp(x[j] - m) in rowLaneSum's order, the exps computed a
/// block at a time into a stack buffer (a loop GCC vectorises).
template <typename T> PF_CPU_INLINE T rowExpSum(const T *x, Index n, T m) {
  constexpr Index kBlock = 256; // a multiple of kRowLanes
  T s[kRowLanes] = {};
  T e[kBlock];
  for (Index j0 = 0; j0 < n; j0 += kBlock) {
    const Index len = n - j0 < kBlock ? n - j0 : kBlock;
    for (Index j = 0; j < len; ++j)
      e[j] = math::softmaxExp(x[j0 + j], m);
    addToRowLanes(s, e, len); // j0 is a multiple of kRowLanes: same lanes
  }
  return combineRowLanes(s);
}
/// The softmax numerators of a row in place: x[j] = exp(x[j] - m) for j <
/// padded (n <= padded), returning the sum of the first n in rowLaneSum's
/// order (what rowLaneSum(x, n) of the stored values gives).
template <typename T>
PF_CPU_INLINE T rowSoftmaxExp(T *x, Index n, Index padded, T m) {
  for (Index j = 0; j < padded; ++j)
    x[j] = math::softmaxExp(x[j], m);
  return rowLaneSum(x, n);
}
/// rowExpSum(x, n, m), and mNext = rowLaneMax(next, n).
template <typename T>
PF_CPU_INLINE T rowExpSumNextMax(const T *x, Index n, T m, const T *next,
                                 T &mNext) {
  mNext = rowLaneMax(next, n);
  return rowExpSum(x, n, m);
}
/// out[j] = exp(x[j] - sub) * scale, j < n (the loss's gradient rows).
template <typename T>
PF_CPU_INLINE void rowExpScaled(const T *x, Index n, T sub, T scale, T *out) {
  for (Index j = 0; j < n; ++j)
    out[j] = math::pfExpFast(x[j] - sub) * scale;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    defined(__linux__) && !defined(__CUDACC__)
/// The float rows on AVX-512 (KernelsLoss.cpp: functions built for avx512f,
/// 16 floats a vector): GCC does not vectorise the loops above well where
/// they are inlined (rowLaneMax stayed scalar in the kernels' avx512f
/// clones, the lanes' sum took a lane out in a scalar chain, the exps went
/// through a stack buffer). Called out of line on a CPU with AVX-512 (from
/// any clone, or from code that is not cloned); the loops above elsewhere.
/// The same bits: the max is exact; the sums keep the kRowLanes lanes (a
/// vector of 16 adds its low half, then its high half, into the 8 lanes:
/// each lane's terms in index order); the exp is pfExpFast operation for
/// operation.
#define PF_CPU_AVX512_ROWS 1
namespace detail {
inline bool avx512Rows() { return __builtin_cpu_supports("avx512f"); }
float rowLaneMaxAvx512(const float *x, Index n);
float rowExpSumAvx512(const float *x, Index n, float m);
float rowSoftmaxExpAvx512(float *x, Index n, Index padded, float m);
/// Also the max of the next row, in the same loop.
float rowExpSumNextMaxAvx512(const float *x, Index n, float m,
                             const float *next, float &mNext);
void rowExpScaledAvx512(const float *x, Index n, float sub, float scale,
                        float *out);
/// pfExpFast of n floats (the tests' check of the vector exp).
void expFastAvx512(const float *x, Index n, float *out);
} // namespace detail

PF_CPU_INLINE float rowLaneMax(const float *x, Index n) {
  if (detail::avx512Rows())
    return detail::rowLaneMaxAvx512(x, n);
  return rowLaneMax<float>(x, n);
}
PF_CPU_INLINE float rowExpSum(const float *x, Index n, float m) {
  if (detail::avx512Rows())
    return detail::rowExpSumAvx512(x, n, m);
  return rowExpSum<float>(x, n, m);
}
PF_CPU_INLINE float rowSoftmaxExp(float *x, Index n, Index padded, float m) {
  if (detail::avx512Rows())
    return detail::rowSoftmaxExpAvx512(x, n, padded, m);
  return rowSoftmaxExp<float>(x, n, padded, m);
}
PF_CPU_INLINE float rowExpSumNextMax(const float *x, Index n, float m,
                                     const float *next, float &mNext) {
  if (detail::avx512Rows())
    return detail::rowExpSumNextMaxAvx512(x, n, m, next, mNext);
  return rowExpSumNextMax<float>(x, n, m, next, mNext);
}
PF_CPU_INLINE void rowExpScaled(const float *x, Index n, float sub,
                                float scale, float *out) {
  if (detail::avx512Rows())
    return detail::rowExpScaledAvx512(x, n, sub, scale, out);
  rowExpScaled<float>(x, n, sub, scale, out);
}
#endif

/// The softmax's backward over an [S, S] block: row i of dS (dP on entry)
/// becomes P (dP - dot), dot = sum_j P[i, j] dP[i, j] over the keys
/// [lo(i), i] in index order (one running sum), 0 outside them. A row's sum
/// is a chain of dependent adds: kSoftmaxGradRows rows run theirs side by
/// side (each still in its own index order: the same bits).
constexpr Index kSoftmaxGradRows = 8;
template <typename T, typename Lo>
PF_CPU_INLINE void softmaxGradRows(Index S, const T *P, T *dS, Lo lo) {
  constexpr Index R = kSoftmaxGradRows;
  T dots[R];
  Index i0 = 0;
  for (; i0 < S; i0 += R) {
    const Index rows = S - i0 < R ? S - i0 : R;
    Index common = lo(i0);
    for (Index r = 0; r < rows; ++r) {
      const Index l = lo(i0 + r);
      common = l > common ? l : common;
    }
    // Keys every row of the group sees: [common, i0] (row i0 + r sees
    // [lo, i0 + r]).
    const bool interleave = rows == R && common <= i0;
    for (Index r = 0; r < rows; ++r) {
      const T *p = P + (i0 + r) * S;
      const T *d = dS + (i0 + r) * S;
      const Index end = interleave ? common : i0 + r + 1;
      T dot = 0;
      for (Index j = lo(i0 + r); j < end; ++j)
        dot += p[j] * d[j];
      dots[r] = dot;
    }
    if (interleave) {
      const T *p = P + i0 * S, *d = dS + i0 * S;
      for (Index j = common; j <= i0; ++j)
        for (Index r = 0; r < R; ++r)
          dots[r] += p[r * S + j] * d[r * S + j];
      for (Index r = 1; r < R; ++r)
        for (Index j = i0 + 1; j <= i0 + r; ++j)
          dots[r] += p[r * S + j] * d[r * S + j];
    }
    for (Index r = 0; r < rows; ++r) {
      const Index i = i0 + r, l = lo(i);
      const T *p = P + i * S;
      T *d = dS + i * S;
      for (Index j = l; j <= i; ++j)
        d[j] = math::softmaxGrad(p[j], d[j], dots[r]);
      for (Index j = 0; j < l; ++j)
        d[j] = T(0);
      for (Index j = i + 1; j < S; ++j)
        d[j] = T(0);
    }
  }
}

/// The statistics of x into `saved` (x, gamma, mean for a centered norm,
/// rstd) without the output: what the gradient ops recompute.
template <typename T>
void normStats(const NormShape &s, bool centered, const T *x, const T *gamma,
               NormSaved<T> &saved);

template <typename T>
void layerNormF(const NormShape &s, const NormParams<T> &p, const T *x, T *y,
                NormSaved<T> &saved);
template <typename T>
void layerNormB(const NormShape &s, const NormSaved<T> &saved, const T *dy,
                T *dx);
template <typename T>
void layerNormW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
                const NormGrads<T> &g);
template <typename T>
void layerNormBW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
                 T *dx, const NormGrads<T> &g);

template <typename T>
void rmsNormF(const NormShape &s, const NormParams<T> &p, const T *x, T *y,
              NormSaved<T> &saved);
template <typename T>
void rmsNormB(const NormShape &s, const NormSaved<T> &saved, const T *dy,
              T *dx);
template <typename T>
void rmsNormW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
              const NormGrads<T> &g);
template <typename T>
void rmsNormBW(const NormShape &s, const NormSaved<T> &saved, const T *dy,
               T *dx, const NormGrads<T> &g);

//===----------------------------------------------------------------------===//
// Elementwise: activations (gelu tanh-approx, silu), add, mul. n elements.
// No parameters, so no W.
//===----------------------------------------------------------------------===//

enum class Activation { Gelu, Silu };

template <typename T> struct ActivationSaved : SavedBase {
  const T *x = nullptr;
};
template <typename T>
void activationF(Activation act, Index n, const T *x, T *y,
                 ActivationSaved<T> &saved);
template <typename T>
void activationB(Activation act, Index n, const ActivationSaved<T> &saved,
                 const T *dy, T *dx);

template <typename T>
void geluF(Index n, const T *x, T *y, ActivationSaved<T> &saved);
template <typename T>
void geluB(Index n, const ActivationSaved<T> &saved, const T *dy, T *dx);
template <typename T>
void siluF(Index n, const T *x, T *y, ActivationSaved<T> &saved);
template <typename T>
void siluB(Index n, const ActivationSaved<T> &saved, const T *dy, T *dx);

/// y = a + b. B: da = db = dy (either may alias dy).
template <typename T> void addF(Index n, const T *a, const T *b, T *y);
template <typename T> void addB(Index n, const T *dy, T *da, T *db);

/// Inverted dropout (nn.dropout; its backward is the same op on dy):
/// x [batch, seq, features] is rows [seqStart, seqStart + seq) of a
/// [batch, seq_whole, features] tensor (sequence parallelism); element (b,
/// s, j) is kept when dropout::keep(rowKey(key, b, seqStart + s), j) and then
/// scaled by 1 / (1 - rate). `key` is the site's (dropout::siteKey).
struct DropoutShape {
  Index batch = 0, seq = 0, features = 0, seqStart = 0;
  double rate = 0.0;
  uint64_t key = 0;
};
template <typename T> void dropoutF(const DropoutShape &s, const T *x, T *y);

/// y = a * b (SwiGLU's gate). B: da = dy * b, db = dy * a.
template <typename T> struct MulSaved : SavedBase {
  const T *a = nullptr;
  const T *b = nullptr;
};
template <typename T>
void mulF(Index n, const T *a, const T *b, T *y, MulSaved<T> &saved);
template <typename T>
void mulB(Index n, const MulSaved<T> &saved, const T *dy, T *da, T *db);

//===----------------------------------------------------------------------===//
// Token embedding + learned positions.
//   y[t] = table[tokens[t]] + pos[t % seq]     y [batch*seq, hidden]
// No B (tokens are integers). Tokens must lie in [0, vocab): check them with
// firstInvalidIndex() where they enter the runtime.
//===----------------------------------------------------------------------===//

struct EmbeddingShape {
  Index batch = 0, seq = 0, hidden = 0, vocab = 0;
  bool learnedPositions = true; ///< pos table [seq_max >= seq, hidden]
  /// Vocabulary parallelism: the table holds rows [vocabStart, vocabStart +
  /// vocab) of a table of vocab x vocabShards rows; other tokens read (and
  /// write) nothing.
  Index vocabStart = 0, vocabShards = 1;
};
template <typename T> struct EmbeddingParams {
  const T *table = nullptr; ///< [vocab, hidden]
  const T *pos = nullptr;   ///< [>= seq, hidden]
};
template <typename T> struct EmbeddingGrads {
  T *dtable = nullptr; ///< accumulated (scatter-add)
  T *dpos = nullptr;   ///< accumulated
};
struct EmbeddingSaved : SavedBase {
  const int32_t *tokens = nullptr;
};

template <typename T>
void embeddingF(const EmbeddingShape &s, const EmbeddingParams<T> &p,
                const int32_t *tokens, T *y, EmbeddingSaved &saved);
template <typename T>
void embeddingW(const EmbeddingShape &s, const EmbeddingSaved &saved,
                const T *dy, const EmbeddingGrads<T> &g);

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy (tensor parallelism): each rank holds a
// [tokens, V] shard of the logits, vocabulary entries [start, start + V);
// the executor all-reduces the per-token statistics between the steps.
// Summed over the shards, the steps give crossEntropyF / crossEntropyB.
//===----------------------------------------------------------------------===//

/// m[t] = max_j logits[t, j] over this shard.
void vocabShardMax(Index tokens, Index V, const float *logits, float *m);
/// With the global max m: stats[2t] = sum_j exp(logits[t, j] - m[t]) over
/// this shard, stats[2t + 1] = logits[t, target - start] when the target
/// is in the shard, else 0.
void vocabShardStats(Index tokens, Index V, Index start, const float *logits,
                     const int32_t *targets, const float *m, float *stats);
/// The mean loss from the global statistics: m + log(sum) - target logit.
float vocabParallelLoss(Index tokens, const float *m, const float *stats);
/// dlogits of this shard: (exp(l - m) / sum - onehot) dloss / tokens.
void vocabParallelLossBwd(Index tokens, Index V, Index start,
                          const float *logits, const int32_t *targets,
                          const float *m, const float *stats, float dloss,
                          float *dlogits);

/// Index of the first value outside [0, limit), or -1 when all are valid.
Index firstInvalidIndex(const int32_t *v, Index n, Index limit);

//===----------------------------------------------------------------------===//
// Causal multi-head attention core (grouped-query).
//   q [tokens, heads*d], k, v [tokens, kvHeads*d], out [tokens, heads*d]
//   head h reads kv-head h / (heads / kvHeads); scale 1/sqrt(d); causal within
//   each sequence; optional rotary embedding on q and k ("rotate half", see
//   ElementwiseMath.h; positions are 0..seq-1 within each sequence).
// Saves the softmax probabilities [batch, heads, seq, seq] (no recompute).
//===----------------------------------------------------------------------===//

struct AttentionShape {
  Index batch = 0, seq = 0, heads = 0, kvHeads = 0, headDim = 0;
  /// The value head dimension (MLA: != headDim); 0 means headDim. v is
  /// [tokens, kvHeads*vHeadDim], the output [tokens, heads*vHeadDim].
  Index vHeadDim = 0;
  bool rotary = false;
  /// With rotary: the trailing ropeDim dimensions of every q / k head are
  /// rotated (pairs (j, j + ropeDim/2) of that part, angles over ropeDim);
  /// 0 means the whole head.
  Index ropeDim = 0;
  double ropeTheta = 10000.0;
  /// Dropout of the probabilities (DropoutShape's scheme): row (sequence b,
  /// head headStart + h, query i) of the whole model's heads, element key j;
  /// `dropoutKey` is the site's key. headStart: this tensor-parallel rank's
  /// first head.
  double dropout = 0.0;
  uint64_t dropoutKey = 0;
  Index headStart = 0;
  /// Attention within documents (--doc-mask): docStart[b * seq + i] is the
  /// position in sequence b where the document of token i starts (0 <=
  /// docStart <= i). Query i then sees keys [docStart, i] only, and its
  /// rotary position is i - docStart (each document counts from 0). Null:
  /// one document per sequence, plain causal attention. Host memory.
  const int32_t *docStart = nullptr;

  Index valueDim() const { return vHeadDim > 0 ? vHeadDim : headDim; }
  Index rotatedDim() const { return ropeDim > 0 ? ropeDim : headDim; }
  /// The first key query i of sequence b sees.
  Index rowStart(Index b, Index i) const {
    return docStart ? Index(docStart[b * seq + i]) : 0;
  }
};
/// B needs (rotated) q and k, v and the probabilities.
template <typename T> struct AttentionSaved : SavedBase {
  const T *v = nullptr;
  const T *q = nullptr;      ///< rotated copy when rotary, else the input
  const T *k = nullptr;      ///< rotated copy when rotary, else the input
  std::vector<T> qRot, kRot; ///< owned storage when rotary
  std::vector<T> probs;      ///< [batch, heads, seq, seq], 0 above diagonal
  /// With dropout: the probabilities after it (what multiplies V).
  std::vector<T> dropped;
};

/// Checks heads % kvHeads == 0, the rotated part even and within the head
/// when rotary, sizes >= 0, document starts within [0, i].
bool isValid(const AttentionShape &s);

/// `out` null: only what B needs (`saved`: the probabilities and, with
/// dropout, their dropped copy), not the output (attention_bwd recomputes).
template <typename T>
void attentionF(const AttentionShape &s, const T *q, const T *k, const T *v,
                T *out, AttentionSaved<T> &saved);
/// dq [tokens, heads*d], dk [tokens, kvHeads*d], dv [tokens, kvHeads*dv]:
/// all overwritten.
template <typename T>
void attentionB(const AttentionShape &s, const AttentionSaved<T> &saved,
                const T *dout, T *dq, T *dk, T *dv, Workspace<T> &ws);

//===----------------------------------------------------------------------===//
// Per-head concatenation (nn.concat_heads, MLA's keys).
//   lhs [rows, heads*lhsDim], rhs [rows, heads*rhsDim] or, broadcast,
//   [rows, rhsDim]; out [rows, heads*(lhsDim+rhsDim)], head h = [lhs_h |
//   rhs_h] (or [lhs_h | rhs]). B splits dout back; the broadcast rhs's
//   gradient is the sum over the heads (in head order).
//===----------------------------------------------------------------------===//

struct ConcatHeadsShape {
  Index rows = 0, heads = 0, lhsDim = 0, rhsDim = 0;
  bool broadcast = false;
  Index rhsHeads() const { return broadcast ? 1 : heads; }
};
bool isValid(const ConcatHeadsShape &s);
template <typename T>
void concatHeadsF(const ConcatHeadsShape &s, const T *lhs, const T *rhs,
                  T *out);
/// dlhs, drhs overwritten.
template <typename T>
void concatHeadsB(const ConcatHeadsShape &s, const T *dout, T *dlhs, T *drhs);

//===----------------------------------------------------------------------===//
// Cross-entropy over vocab V with integer targets (after the LM head, which is
// linear*() with hasBias = false).
//   F: mean over tokens of (logsumexp(logits[t]) - logits[t, target[t]])
//   B: dlogits = dloss * (softmax(logits) - onehot(target)) / tokens
//===----------------------------------------------------------------------===//

struct CrossEntropyShape {
  Index tokens = 0, vocab = 0;
};
template <typename T> struct CrossEntropySaved : SavedBase {
  const T *logits = nullptr;
  const int32_t *targets = nullptr;
  std::vector<T> lse; ///< [tokens] logsumexp per row
};
template <typename T>
T crossEntropyF(const CrossEntropyShape &s, const T *logits,
                const int32_t *targets, CrossEntropySaved<T> &saved);
template <typename T>
void crossEntropyB(const CrossEntropyShape &s,
                   const CrossEntropySaved<T> &saved, T dloss, T *dlogits);

//===----------------------------------------------------------------------===//
// Mixture of experts.
//   logits = x Wr^T [tokens, E]; p = softmax(logits); top-k of p (ties to the
//   lower expert index); gates g = p[topk] / sum p[topk] (or g = p[topk]
//   when !renormalize); sigmoid scores, group-limited routing and the
//   routed scaling factor as MoERouting.h says; expert e is w2_e act(w1_e x), or with w3 the gated
//   (SwiGLU) form w2_e (act(w1_e x) * (w3_e x)), no biases;
//   y[t] = sum_{kept (t,e)} g_te expert_e(x_t).
//   Capacity C > 0: each expert keeps its first C assignments in token order
//   and drops the rest (the dropped expert contributes 0; the kept gates are
//   not renormalised again). C = 0: no limit.
// B: dx through the experts and through the router (gates -> renormalisation
// -> softmax -> Wr); the top-k choice and the drops are treated as constant.
// W: dWr, dw1, dw2 (, dw3). W recomputes the expert-internal gradients
// (dy*g -> w2 -> act') from saved tensors instead of taking them from B: one
// extra GEMM per expert, so that W reads only saved tensors and dy.
//===----------------------------------------------------------------------===//

/// nn.moe's `scoring`: the router's scores from its logits.
enum class MoEScoring { Softmax, Sigmoid };

struct MoEShape {
  Index tokens = 0, hidden = 0, ffn = 0, experts = 0, topK = 1;
  Index capacity = 0; ///< 0 = unlimited
  Activation act = Activation::Gelu;
  /// true: gates = p / sum of the top-k p (Mixtral); false: gates = p
  /// (Switch / GShard style; with top-1 only this trains the router).
  bool renormalize = true;
  /// The routing of DeepSeek-V2/V3 (MoERouting.h): the router's scores,
  /// the gates' factor (routed_scaling_factor) and group-limited routing
  /// (the experts in `groups` groups, the top-k from the `topkGroup` best).
  MoEScoring scoring = MoEScoring::Softmax;
  float scale = 1.f;
  Index groups = 1, topkGroup = 1;
};
template <typename T> struct MoEParams {
  const T *router = nullptr; ///< [E, hidden]
  const T *w1 = nullptr;     ///< [E, ffn, hidden]
  const T *w2 = nullptr;     ///< [E, hidden, ffn]
  const T *w3 = nullptr;     ///< [E, ffn, hidden]; optional SwiGLU gate
  /// [E]; optional load-balancing bias, added to the scores for the top-k
  /// choice only (MoERouting.h).
  const T *bias = nullptr;
};
template <typename T> struct MoEGrads {
  T *drouter = nullptr; ///< accumulated
  T *dw1 = nullptr;     ///< accumulated
  T *dw2 = nullptr;     ///< accumulated
  T *dw3 = nullptr;     ///< accumulated; only when params.w3 was given
};
template <typename T> struct MoESaved : SavedBase {
  const T *x = nullptr;
  MoEParams<T> params;
  std::vector<T> probs;           ///< [tokens, E] router softmax
  std::vector<int32_t> topIdx;    ///< [tokens, k] expert ids, by rank
  std::vector<T> gates;           ///< [tokens, k] renormalised gates
  std::vector<int32_t> rowOf;     ///< [tokens, k] dispatch row, -1 dropped
  std::vector<Index> expertStart; ///< [E + 1] row ranges per expert
  std::vector<int32_t> rowAssign; ///< [rows] t * k + rank of each row
  std::vector<T> xe;              ///< [rows, hidden] gathered inputs
  std::vector<T> pre;             ///< [rows, ffn] w1 x
  std::vector<T> pre3;            ///< [rows, ffn] w3 x; empty unless gated
  std::vector<T> act;             ///< [rows, ffn] act(w1 x) (* w3 x, gated)
  std::vector<T> eout;            ///< [rows, hidden] expert outputs
  Index rows() const { return (Index)rowAssign.size(); }
  Index dropped() const; ///< assignments over capacity
};

/// The experts' elementwise step over n elements: out = act(pre) [* pre3]
/// (pre3 null: not gated), vectorised and cloned.
template <typename T>
void expertAct(Activation a, Index n, const T *pre, const T *pre3, T *out);
/// Its gradient, dh arriving in dpre: gated, dpre3 = dh act(pre) and dpre =
/// dh pre3 act'(pre); plain (pre3 and dpre3 null), dpre *= act'(pre).
template <typename T>
void expertActGrad(Activation a, Index n, const T *pre, const T *pre3, T *dpre,
                   T *dpre3);

/// Checks 1 <= topK <= experts, sizes >= 0 and the routing: scale > 0,
/// 1 <= topkGroup <= groups <= 64, groups dividing the experts and the
/// eligible experts (topkGroup * experts / groups) at least topK.
bool isValid(const MoEShape &s);

/// nn.moe's capacity_factor as a per-expert capacity:
/// ceil(factor * tokens * topK / experts); 0 when factor <= 0 (no limit).
Index moeCapacity(double capacityFactor, Index tokens, Index topK,
                  Index experts);

template <typename T>
void moeF(const MoEShape &s, const MoEParams<T> &p, const T *x, T *y,
          MoESaved<T> &saved);
template <typename T>
void moeB(const MoEShape &s, const MoESaved<T> &saved, const T *dy, T *dx,
          Workspace<T> &ws);
template <typename T>
void moeW(const MoEShape &s, const MoESaved<T> &saved, const T *dy,
          const MoEGrads<T> &g, Workspace<T> &ws);
/// Computes the expert-internal gradients once for both halves.
template <typename T>
void moeBW(const MoEShape &s, const MoESaved<T> &saved, const T *dy, T *dx,
           const MoEGrads<T> &g, Workspace<T> &ws);

} // namespace cpu
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CPU_KERNELS_H
