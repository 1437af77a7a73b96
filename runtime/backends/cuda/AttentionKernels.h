//===- AttentionKernels.h - Causal GQA attention on CUDA --------*- C++ -*-===//
//
// The CUDA version of cpu::attentionF / cpu::attentionB (same semantics:
// causal, grouped-query heads, optional rotary embedding, scale 1/sqrt(d),
// token layout [batch, seq, heads*d], document starts). All pointers are
// device pointers except the shape's document starts (host memory, copied
// into the workspace on ctx.stream); all work is queued on ctx.stream with
// no host synchronisation. Matrix
// products go through gemm(); the backward recomputes the probabilities
// (nothing is saved between the two calls).
//
// `ws` is device scratch of at least attentionWorkspaceBytes(shape) bytes,
// 256-byte aligned; the same size serves both calls.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_ATTENTIONKERNELS_H
#define PIPEFORGE_RUNTIME_CUDA_ATTENTIONKERNELS_H

#include "cpu/Kernels.h"
#include "cuda/GemmCtx.h"

#include <cstddef>

namespace pipeforge::rt::cuda {

size_t attentionWorkspaceBytes(const cpu::AttentionShape &s);

/// out [tokens, heads*d] = causal attention of q [tokens, heads*d] over
/// k, v [tokens, kvHeads*d].
Status attentionForward(GemmCtx &ctx, const cpu::AttentionShape &s,
                        const float *q, const float *k, const float *v,
                        float *out, void *ws);

/// dq, dk, dv (overwritten) from the output gradient dy.
Status attentionBackward(GemmCtx &ctx, const cpu::AttentionShape &s,
                         const float *q, const float *k, const float *v,
                         const float *dy, float *dq, float *dk, float *dv,
                         void *ws);

/// nn.concat_heads: out [rows, heads*(a+b)] from lhs and rhs (device
/// pointers; cpu::concatHeadsF's semantics).
Status concatHeadsForward(GemmCtx &ctx, const cpu::ConcatHeadsShape &s,
                          const float *lhs, const float *rhs, float *out);
/// nn.concat_heads_bwd: dlhs, drhs (overwritten; a broadcast rhs's
/// gradient summed over the heads in head order, as on the CPU).
Status concatHeadsBackward(GemmCtx &ctx, const cpu::ConcatHeadsShape &s,
                           const float *dout, float *dlhs, float *drhs);

} // namespace pipeforge::rt::cuda

#endif // PIPEFORGE_RUNTIME_CUDA_ATTENTIONKERNELS_H
