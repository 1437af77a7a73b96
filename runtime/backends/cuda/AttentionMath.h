//===- AttentionMath.h - Per-thread bodies of the CUDA attention kernels --===//
//
// The work of one CUDA thread (or one lane of a warp) of the attention
// kernels in AttentionKernels.cu, as PF_HOST_DEVICE functions: the kernels
// are thin grid-stride loops around them, and the CPU test
// (unittests/CudaMath/AttentionMoEMathTest.cpp) runs the same functions over
// whole tensors with loops in place of the grid, against cpu::attentionF/B.
//
// Layouts (B batch, S seq, nH heads of a tensor, D head dim):
//   token layout  [B, S, nH*D]   (the op's q, k, v, out and gradients)
//   head layout   [B, nH, S, D]  (contiguous per head, for batched GEMMs)
//   scores        [B, heads, S, S], row (b, h, i) holds query position i.
//
// Row reductions run on one warp per row: lane `lane` of `lanes` visits the
// columns j = lo + lane, lo + lane + lanes, ... of the row's keys lo <= j <=
// i and returns a partial result; the caller combines the partials (warp
// shuffle on the GPU, a loop in the test) and passes the total to the next
// phase. lo is 0 (causal), or with document starts (--doc-mask) the first
// token of the query's document (ScoreRows).
//
// Header-only, host-includable without nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_ATTENTIONMATH_H
#define PIPEFORGE_RUNTIME_CUDA_ATTENTIONMATH_H

#include "cpu/DropoutRng.h"
#include "cpu/ElementwiseMath.h"

#include <math.h>

namespace pipeforge {
namespace rt {
namespace cuda {

/// The dropout of the probabilities (cpu::AttentionShape's scheme, so both
/// backends draw the same mask): scores [B, heads, S, S], row (b, h, i) is
/// the whole model's row (b, headStart + h, i).
struct ScoreDropout {
  uint64_t key;
  uint32_t threshold;
  float scale; ///< 1 / (1 - rate), rounded to float as the CPU kernel does
  long long heads, headStart, seq;
};

/// Element `idx` of the scores: out = in * mask * scale (out may be in).
PF_HOST_DEVICE inline void scoreDropoutElement(const ScoreDropout &d,
                                               long long idx, const float *in,
                                               float *out) {
  const long long j = idx % d.seq, r = idx / d.seq;
  const long long i = r % d.seq, bh = r / d.seq;
  const long long h = bh % d.heads, b = bh / d.heads;
  uint64_t row = dropout::rowKey(
      d.key, (uint64_t(b) << 32) | uint64_t(d.headStart + h), uint64_t(i));
  out[idx] =
      dropout::keep(row, uint64_t(j), d.threshold) ? in[idx] * d.scale : 0.f;
}

/// Sizes of a token <-> head layout conversion.
struct HeadLayout {
  long long batch, seq, heads, headDim;
  bool rotary;
  float ropeTheta; ///< float, as the CPU kernel computes its angles
  /// With rotary: only the trailing ropeDim entries of a head rotate (MLA's
  /// decoupled RoPE); 0 means the whole head.
  long long ropeDim = 0;
  /// Document starts [batch * seq] (device memory; cpu::AttentionShape::
  /// docStart): a token's rotary position counts from its document's first
  /// token. Null: from the sequence's.
  const int32_t *docStart = nullptr;
};

/// The rotated part R of a head and the leading entries `nope` it leaves.
PF_HOST_DEVICE inline long long rotatedDim(const HeadLayout &l) {
  return l.ropeDim > 0 ? l.ropeDim : l.headDim;
}

/// Threads per head: one per element, or when rotary one per unrotated
/// element and one per rotary pair (element j and j + R/2 of the rotated
/// part): headDim - R/2.
PF_HOST_DEVICE inline long long headLayoutPerHead(const HeadLayout &l) {
  return l.rotary ? l.headDim - rotatedDim(l) / 2 : l.headDim;
}

/// Threads of one conversion.
PF_HOST_DEVICE inline long long headLayoutThreads(const HeadLayout &l) {
  return l.batch * l.seq * l.heads * headLayoutPerHead(l);
}

/// Thread `idx` of a conversion: the token-layout and head-layout offsets of
/// its element, its rotary position (in the sequence, or in its document
/// when l.docStart) and its index j in the head.
PF_HOST_DEVICE inline void headLayoutOffsets(const HeadLayout &l, long long idx,
                                             long long &tokenOff,
                                             long long &headOff, long long &pos,
                                             long long &j) {
  // Thread j of a head handles element j: below nope = headDim - R a plain
  // copy, from nope on the first element of a rotary pair.
  long long perHead = headLayoutPerHead(l);
  j = idx % perHead;
  long long rest = idx / perHead;
  long long h = rest % l.heads;
  rest /= l.heads;
  pos = rest % l.seq;
  long long b = rest / l.seq;
  tokenOff = (b * l.seq + pos) * l.heads * l.headDim + h * l.headDim + j;
  headOff = ((b * l.heads + h) * l.seq + pos) * l.headDim + j;
  if (l.docStart)
    pos -= l.docStart[b * l.seq + pos];
}

/// Rotates (transpose = false) or un-rotates (transpose = true) the pair
/// (x1, x2) = (v[j], v[j + d/2]) of a head vector at sequence position pos.
PF_HOST_DEVICE inline void rotaryPair(float &x1, float &x2, long long pos,
                                      long long j, long long d, float theta,
                                      bool transpose) {
  float a = math::rotaryAngle<float>(pos, j, d, theta);
  float c = math::pfCos(a), s = math::pfSin(a), y1, y2;
  if (transpose)
    math::rotaryRotateTranspose(x1, x2, c, s, y1, y2);
  else
    math::rotaryRotate(x1, x2, c, s, y1, y2);
  x1 = y1;
  x2 = y2;
}

/// Thread `idx` of token layout -> head layout, rotating q / k when
/// l.rotary.
PF_HOST_DEVICE inline void toHeadsElement(const HeadLayout &l, long long idx,
                                          const float *src, float *dst) {
  long long tokenOff, headOff, pos, j;
  headLayoutOffsets(l, idx, tokenOff, headOff, pos, j);
  const long long r = rotatedDim(l), nope = l.headDim - r;
  if (!l.rotary || j < nope) {
    dst[headOff] = src[tokenOff];
    return;
  }
  const long long half = r / 2;
  float x1 = src[tokenOff], x2 = src[tokenOff + half];
  rotaryPair(x1, x2, pos, j - nope, r, l.ropeTheta, /*transpose=*/false);
  dst[headOff] = x1;
  dst[headOff + half] = x2;
}

/// Thread `idx` of head layout -> token layout, applying the transposed
/// rotation to dq / dk when l.rotary.
PF_HOST_DEVICE inline void fromHeadsElement(const HeadLayout &l, long long idx,
                                            const float *src, float *dst) {
  long long tokenOff, headOff, pos, j;
  headLayoutOffsets(l, idx, tokenOff, headOff, pos, j);
  const long long r = rotatedDim(l), nope = l.headDim - r;
  if (!l.rotary || j < nope) {
    dst[tokenOff] = src[headOff];
    return;
  }
  const long long half = r / 2;
  float x1 = src[headOff], x2 = src[headOff + half];
  rotaryPair(x1, x2, pos, j - nope, r, l.ropeTheta, /*transpose=*/true);
  dst[tokenOff] = x1;
  dst[tokenOff + half] = x2;
}

//===--- Per-head concatenation (nn.concat_heads) -------------------------===//

/// Sizes of nn.concat_heads: rows of heads x (a + b) outputs; the rhs has
/// one head per output head, or one shared head when broadcast.
struct ConcatHeadsLayout {
  long long rows, heads, a, b;
  bool broadcast;
};

/// Thread `idx` of the forward, one per output element.
PF_HOST_DEVICE inline void concatHeadsElement(const ConcatHeadsLayout &l,
                                              long long idx, const float *lhs,
                                              const float *rhs, float *out) {
  const long long w = l.a + l.b;
  const long long j = idx % w, rh = idx / w; // rh = row * heads + h
  if (j < l.a) {
    out[idx] = lhs[rh * l.a + j];
    return;
  }
  const long long h = rh % l.heads, r = rh / l.heads;
  out[idx] = rhs[l.broadcast ? r * l.b + (j - l.a) : (r * l.heads + h) * l.b +
                                                           (j - l.a)];
}

/// Thread `idx` of the backward's lhs part and unshared rhs part, one per
/// element of the result gradient (a broadcast rhs is left to
/// concatHeadsSharedGradElement).
PF_HOST_DEVICE inline void concatHeadsGradElement(const ConcatHeadsLayout &l,
                                                  long long idx,
                                                  const float *dout,
                                                  float *dlhs, float *drhs) {
  const long long w = l.a + l.b;
  const long long j = idx % w, rh = idx / w;
  if (j < l.a)
    dlhs[rh * l.a + j] = dout[idx];
  else if (!l.broadcast)
    drhs[rh * l.b + (j - l.a)] = dout[idx];
}

/// Thread `idx` (one per element of the shared head's gradient [rows, b]):
/// the sum over the heads, in head order (as the CPU kernel).
PF_HOST_DEVICE inline void
concatHeadsSharedGradElement(const ConcatHeadsLayout &l, long long idx,
                             const float *dout, float *drhs) {
  const long long j = idx % l.b, r = idx / l.b, w = l.a + l.b;
  float sum = 0.f;
  for (long long h = 0; h < l.heads; ++h)
    sum += dout[(r * l.heads + h) * w + l.a + j];
  drhs[idx] = sum;
}

//===--- Causal softmax of one score row (query position i) ---------------===//

/// The score rows [batch, heads, seq] of one attention call and, with
/// --doc-mask, the document starts [batch * seq] (device memory).
struct ScoreRows {
  long long rows, seq, heads;
  const int32_t *docStart = nullptr;
};

/// Row r's query position i and its first key lo (its document's start;
/// 0 without document starts).
PF_HOST_DEVICE inline void scoreRow(const ScoreRows &s, long long r,
                                    long long &lo, long long &i) {
  i = r % s.seq;
  lo = s.docStart ? s.docStart[(r / (s.seq * s.heads)) * s.seq + i] : 0;
}

/// Phase 1: partial max of row[j], lo <= j <= i.
PF_HOST_DEVICE inline float causalRowMaxPart(const float *row, long long lo,
                                             long long i, int lane, int lanes) {
  float m = -INFINITY;
  for (long long j = lo + lane; j <= i; j += lanes)
    m = row[j] > m ? row[j] : m;
  return m;
}

/// Phase 2: row[j] = exp(row[j] - rowMax) for lo <= j <= i; returns their
/// partial sum.
PF_HOST_DEVICE inline float causalRowExpPart(float *row, long long lo,
                                             long long i, float rowMax,
                                             int lane, int lanes) {
  float sum = 0.f;
  for (long long j = lo + lane; j <= i; j += lanes) {
    row[j] = math::softmaxExp(row[j], rowMax);
    sum += row[j];
  }
  return sum;
}

/// Phase 3: row[j] *= 1 / sum for lo <= j <= i, row[j] = 0 elsewhere (above
/// the diagonal, before the document).
PF_HOST_DEVICE inline void causalRowScalePart(float *row, long long lo,
                                              long long i, long long seq,
                                              float sum, int lane, int lanes) {
  const float inv = 1.f / sum;
  for (long long j = lane; j < seq; j += lanes)
    row[j] = j >= lo && j <= i ? row[j] * inv : 0.f;
}

//===--- Its backward: dS = P (dP - rowdot(P, dP)) ------------------------===//

/// Phase 1: partial sum of p[j] * dp[j], lo <= j <= i.
PF_HOST_DEVICE inline float causalRowDotPart(const float *p, const float *dp,
                                             long long lo, long long i,
                                             int lane, int lanes) {
  float dot = 0.f;
  for (long long j = lo + lane; j <= i; j += lanes)
    dot += p[j] * dp[j];
  return dot;
}

/// Phase 2: d[j] = softmaxGrad(p[j], d[j], dot) for lo <= j <= i, 0
/// elsewhere (d holds dP on entry, dS on exit).
PF_HOST_DEVICE inline void causalRowGradPart(const float *p, float *d,
                                             long long lo, long long i,
                                             long long seq, float dot, int lane,
                                             int lanes) {
  for (long long j = lane; j < seq; j += lanes)
    d[j] = j >= lo && j <= i ? math::softmaxGrad(p[j], d[j], dot) : 0.f;
}

} // namespace cuda
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CUDA_ATTENTIONMATH_H
