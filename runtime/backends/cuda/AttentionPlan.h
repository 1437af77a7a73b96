//===- AttentionPlan.h - Step sequence of the CUDA attention ----*- C++ -*-===//
//
// The order of the attention steps, their GEMM shapes and strides and the
// workspace layout, written once over an executor `Exec` so that the CUDA
// kernels (AttentionKernels.cu, Exec launches kernels and cuBLAS) and the
// CPU test (Exec runs AttentionMath.h with loops) follow the same plan.
//
// q, k, v are copied into head layout [batch, heads, seq, d] (q and k
// rotated when rotary: the whole head, or its trailing rope_dim entries; v
// and the output in value heads of dv, which may differ from d: MLA). The heads of one kv group are then adjacent, so group (b, g) is a
// [group*seq, d] block of Q against the [seq, d] K and V of its kv head and
// every product is ONE strided-batched GEMM over batch*kvHeads groups:
//   forward   S = scale Q K^T, P = causal softmax(S), O = D(P) V
//   backward  dP = D(dO V^T), dS = P (dP - rowdot(P, dP)),
//             dQ = scale dS K, dK = scale dS^T Q, dV = D(P)^T dO
// D is the probabilities' dropout (the identity at rate 0; with a rate, D(P)
// lives in its own buffer).
// The transposed products contract over the whole group, so dK and dV come
// out summed over the heads of a group. Gradients go back to token layout
// (un-rotated when rotary). The backward recomputes P.
//
// Exec provides (each returns Status):
//   gemm(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc,
//        batch, strideA, strideB, strideC)        row-major, as cuda::gemm
//   toHeads(HeadLayout, src, dst), fromHeads(HeadLayout, src, dst)
//   causalSoftmax(ScoreRows, probs), causalSoftmaxGrad(ScoreRows, probs, ds)
//   scoreDropout(ScoreDropout, in, out, n)            out may be in
//   copyInts(dst, hostSrc, n)        host ints to the device (document starts)
//
// With document starts (cpu::AttentionShape::docStart, host memory) the
// plan copies them into the workspace first: the softmax rows see only their
// document's keys and q, k rotate by positions within the document.
//
// Header-only, host-includable without nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_ATTENTIONPLAN_H
#define PIPEFORGE_RUNTIME_CUDA_ATTENTIONPLAN_H

#include "cpu/Kernels.h"
#include "cuda/AttentionMath.h"
#include "pipeforge/rt/Backend.h"

#include <cstddef>

namespace pipeforge::rt::cuda {

/// Workspace regions (floats, each 256-byte aligned).
struct AttentionBuffers {
  float *qh, *kh, *vh; ///< rotated q, k and v in head layout
  float *oh;           ///< forward: O; backward: dO (both [b, heads, s, d])
  float *probs, *ds;   ///< [b, heads, s, s]
  float *dqh, *dkh, *dvh;
  float *pd;    ///< D(P) [b, heads, s, s]; only with dropout (else null)
  int32_t *doc; ///< the document starts [b * s]; only with them (else null)
};

/// Lays the buffers out from `base` (null: sizing only); returns the bytes.
inline size_t carveAttention(const cpu::AttentionShape &s, void *base,
                             AttentionBuffers &b) {
  const size_t q = size_t(s.batch * s.heads * s.seq * s.headDim);
  const size_t kv = size_t(s.batch * s.kvHeads * s.seq * s.headDim);
  const size_t vv = size_t(s.batch * s.kvHeads * s.seq * s.valueDim());
  const size_t o = size_t(s.batch * s.heads * s.seq * s.valueDim());
  const size_t scores = size_t(s.batch * s.heads * s.seq * s.seq);
  size_t off = 0;
  auto take = [&](size_t floats) {
    float *p = base ? reinterpret_cast<float *>(static_cast<char *>(base) + off)
                    : nullptr;
    off += (floats * sizeof(float) + 255) / 256 * 256;
    return p;
  };
  b.qh = take(q);
  b.kh = take(kv);
  b.vh = take(vv);
  b.oh = take(o);
  b.probs = take(scores);
  b.ds = take(scores);
  b.dqh = take(q);
  b.dkh = take(kv);
  b.dvh = take(vv);
  b.pd = s.dropout > 0.0 ? take(scores) : nullptr;
  b.doc = s.docStart ? reinterpret_cast<int32_t *>(
                           take(size_t(s.batch * s.seq))) // 4-byte ints
                     : nullptr;
  return off;
}

inline ScoreDropout scoreDropout(const cpu::AttentionShape &s) {
  return ScoreDropout{s.dropoutKey,
                      dropout::threshold(s.dropout),
                      float(1.0 / (1.0 - s.dropout)),
                      s.heads,
                      s.headStart,
                      s.seq};
}

/// The score rows of a call (with the workspace's document starts).
inline ScoreRows scoreRows(const cpu::AttentionShape &s,
                           const AttentionBuffers &b) {
  return ScoreRows{s.batch * s.heads * s.seq, s.seq, s.heads, b.doc};
}

/// D(P) into b.pd when the shape has dropout; the buffer V multiplies.
template <class Exec>
Status droppedProbabilities(Exec &x, const cpu::AttentionShape &s,
                            const AttentionBuffers &b, const float *&pv) {
  pv = b.probs;
  if (!(s.dropout > 0.0))
    return Status::ok();
  pv = b.pd;
  return x.scoreDropout(scoreDropout(s), b.probs, b.pd,
                        s.batch * s.heads * s.seq * s.seq);
}

/// q and k (rotary: their trailing rotatedDim() entries rotate, by
/// positions within their documents when `doc` is set).
inline HeadLayout headLayout(const cpu::AttentionShape &s, long long heads,
                             bool rotary, const int32_t *doc) {
  return HeadLayout{s.batch,   s.seq,
                    heads,     s.headDim,
                    rotary,    float(s.ropeTheta),
                    s.ropeDim, rotary ? doc : nullptr};
}
/// v, the output and their gradients: value heads, never rotated.
inline HeadLayout valueLayout(const cpu::AttentionShape &s, long long heads) {
  return HeadLayout{s.batch,      s.seq, heads, s.valueDim(),
                    /*rotary=*/false, float(s.ropeTheta)};
}

/// Head layout of q, k (rotated when rotary) and v, then the causal
/// probabilities P = softmax(scale Q K^T).
template <class Exec>
Status attentionProbabilities(Exec &x, const cpu::AttentionShape &s,
                              const float *q, const float *k, const float *v,
                              const AttentionBuffers &b) {
  const long long S = s.seq, D = s.headDim, G = s.heads / s.kvHeads;
  const int groups = int(s.batch * s.kvHeads);
  if (s.docStart)
    if (Status st = x.copyInts(b.doc, s.docStart, s.batch * S); !st)
      return st;
  if (Status st = x.toHeads(headLayout(s, s.heads, s.rotary, b.doc), q, b.qh);
      !st)
    return st;
  if (Status st = x.toHeads(headLayout(s, s.kvHeads, s.rotary, b.doc), k, b.kh);
      !st)
    return st;
  if (Status st = x.toHeads(valueLayout(s, s.kvHeads), v, b.vh); !st)
    return st;
  const float scale = 1.f / math::pfSqrt(float(D));
  // Per group: S [G*S, S] = scale Q [G*S, D] K^T.
  if (Status st = x.gemm(false, true, G * S, S, D, scale, b.qh, D, b.kh, D, 0.f,
                         b.probs, S, groups, G * S * D, S * D, G * S * S);
      !st)
    return st;
  return x.causalSoftmax(scoreRows(s, b), b.probs);
}

/// out [tokens, heads*dv] (overwritten). Expects a valid, non-empty shape.
template <class Exec>
Status attentionForwardPlan(Exec &x, const cpu::AttentionShape &s,
                            const float *q, const float *k, const float *v,
                            float *out, const AttentionBuffers &b) {
  const long long S = s.seq, D = s.valueDim(), G = s.heads / s.kvHeads;
  const int groups = int(s.batch * s.kvHeads);
  if (Status st = attentionProbabilities(x, s, q, k, v, b); !st)
    return st;
  const float *pv = nullptr;
  if (Status st = droppedProbabilities(x, s, b, pv); !st)
    return st;
  // Per group: O [G*S, Dv] = D(P) [G*S, S] V [S, Dv].
  if (Status st = x.gemm(false, false, G * S, D, S, 1.f, pv, S, b.vh, D, 0.f,
                         b.oh, D, groups, G * S * S, S * D, G * S * D);
      !st)
    return st;
  return x.fromHeads(valueLayout(s, s.heads), b.oh, out);
}

/// dq, dk, dv (overwritten). Expects a valid, non-empty shape.
template <class Exec>
Status attentionBackwardPlan(Exec &x, const cpu::AttentionShape &s,
                             const float *q, const float *k, const float *v,
                             const float *dy, float *dq, float *dk, float *dv,
                             const AttentionBuffers &b) {
  const long long S = s.seq, D = s.headDim, DV = s.valueDim(),
                  G = s.heads / s.kvHeads;
  const int groups = int(s.batch * s.kvHeads);
  const float scale = 1.f / math::pfSqrt(float(D));
  if (Status st = attentionProbabilities(x, s, q, k, v, b); !st)
    return st;
  float *doh = b.oh;
  if (Status st = x.toHeads(valueLayout(s, s.heads), dy, doh); !st)
    return st;
  // dP [G*S, S] = D(dO [G*S, Dv] V^T): the same mask as the forward's.
  if (Status st = x.gemm(false, true, G * S, S, DV, 1.f, doh, DV, b.vh, DV,
                         0.f, b.ds, S, groups, G * S * DV, S * DV, G * S * S);
      !st)
    return st;
  const float *pv = nullptr;
  if (Status st = droppedProbabilities(x, s, b, pv); !st)
    return st;
  if (s.dropout > 0.0)
    if (Status st = x.scoreDropout(scoreDropout(s), b.ds, b.ds,
                                   s.batch * s.heads * S * S);
        !st)
      return st;
  if (Status st = x.causalSoftmaxGrad(scoreRows(s, b), b.probs, b.ds); !st)
    return st;
  // dQ [G*S, D] = scale dS [G*S, S] K [S, D].
  if (Status st = x.gemm(false, false, G * S, D, S, scale, b.ds, S, b.kh, D,
                         0.f, b.dqh, D, groups, G * S * S, S * D, G * S * D);
      !st)
    return st;
  // dK [S, D] = scale dS^T [S, G*S] Q [G*S, D]: summed over the group.
  if (Status st = x.gemm(true, false, S, D, G * S, scale, b.ds, S, b.qh, D, 0.f,
                         b.dkh, D, groups, G * S * S, G * S * D, S * D);
      !st)
    return st;
  // dV [S, Dv] = D(P)^T [S, G*S] dO [G*S, Dv]: summed over the group.
  if (Status st = x.gemm(true, false, S, DV, G * S, 1.f, pv, S, doh, DV, 0.f,
                         b.dvh, DV, groups, G * S * S, G * S * DV, S * DV);
      !st)
    return st;
  if (Status st =
          x.fromHeads(headLayout(s, s.heads, s.rotary, b.doc), b.dqh, dq);
      !st)
    return st;
  if (Status st =
          x.fromHeads(headLayout(s, s.kvHeads, s.rotary, b.doc), b.dkh, dk);
      !st)
    return st;
  return x.fromHeads(valueLayout(s, s.kvHeads), b.dvh, dv);
}

} // namespace pipeforge::rt::cuda

#endif // PIPEFORGE_RUNTIME_CUDA_ATTENTIONPLAN_H
