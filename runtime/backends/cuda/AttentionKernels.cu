//===- AttentionKernels.cu - Causal GQA attention on CUDA -----------------===//
//
// The CUDA executor of AttentionPlan.h: layout conversions as grid-stride
// kernels (one thread per element or rotary pair), the causal softmax and
// its backward with one warp per score row (shuffle reductions), the
// products through gemm(). The per-thread bodies live in AttentionMath.h.
//
//===----------------------------------------------------------------------===//

#include "cuda/AttentionKernels.h"
#include "cuda/AttentionPlan.h"
#include "cuda/Launch.cuh"

#include <algorithm>

namespace pipeforge::rt::cuda {

namespace {

__global__ void toHeadsKernel(HeadLayout l, long long n, const float *src,
                              float *dst) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    toHeadsElement(l, i, src, dst);
}

__global__ void fromHeadsKernel(HeadLayout l, long long n, const float *src,
                                float *dst) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    fromHeadsElement(l, i, src, dst);
}

/// One warp per score row; row r is query position r % seq, its keys those
/// of its document up to it (scoreRow). The loop bound is uniform across a
/// warp, so every lane takes part in the shuffles.
__global__ void causalSoftmaxKernel(ScoreRows s, float *probs) {
  const int lane = threadIdx.x % kWarp;
  const long long nWarps = (long long)gridDim.x * blockDim.x / kWarp;
  for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kWarp;
       r < s.rows; r += nWarps) {
    float *row = probs + r * s.seq;
    long long lo, i;
    scoreRow(s, r, lo, i);
    float m = warpMax(causalRowMaxPart(row, lo, i, lane, kWarp));
    float sum = warpSum(causalRowExpPart(row, lo, i, m, lane, kWarp));
    causalRowScalePart(row, lo, i, s.seq, sum, lane, kWarp);
  }
}

/// dS = P (dP - rowdot(P, dP)) in place over dP; one warp per row.
__global__ void causalSoftmaxGradKernel(ScoreRows s, const float *probs,
                                        float *ds) {
  const int lane = threadIdx.x % kWarp;
  const long long nWarps = (long long)gridDim.x * blockDim.x / kWarp;
  for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kWarp;
       r < s.rows; r += nWarps) {
    const float *p = probs + r * s.seq;
    float *d = ds + r * s.seq;
    long long lo, i;
    scoreRow(s, r, lo, i);
    float dot = warpSum(causalRowDotPart(p, d, lo, i, lane, kWarp));
    causalRowGradPart(p, d, lo, i, s.seq, dot, lane, kWarp);
  }
}

__global__ void scoreDropoutKernel(ScoreDropout d, long long n, const float *in,
                                   float *out) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    scoreDropoutElement(d, i, in, out);
}

__global__ void concatHeadsKernel(ConcatHeadsLayout l, long long n,
                                  const float *lhs, const float *rhs,
                                  float *out) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    concatHeadsElement(l, i, lhs, rhs, out);
}

__global__ void concatHeadsGradKernel(ConcatHeadsLayout l, long long n,
                                      const float *dout, float *dlhs,
                                      float *drhs) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    concatHeadsGradElement(l, i, dout, dlhs, drhs);
}

__global__ void concatHeadsSharedGradKernel(ConcatHeadsLayout l, long long n,
                                            const float *dout, float *drhs) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    concatHeadsSharedGradElement(l, i, dout, drhs);
}

ConcatHeadsLayout concatLayout(const cpu::ConcatHeadsShape &s) {
  return ConcatHeadsLayout{s.rows, s.heads, s.lhsDim, s.rhsDim, s.broadcast};
}

/// AttentionPlan.h's executor: everything queued on ctx.stream.
struct CudaExec : GemmExec {
  Status toHeads(const HeadLayout &l, const float *src, float *dst) {
    long long n = headLayoutThreads(l);
    toHeadsKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(l, n, src, dst);
    return launchStatus("attention toHeads");
  }
  Status fromHeads(const HeadLayout &l, const float *src, float *dst) {
    long long n = headLayoutThreads(l);
    fromHeadsKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(l, n, src, dst);
    return launchStatus("attention fromHeads");
  }
  Status causalSoftmax(const ScoreRows &s, float *probs) {
    causalSoftmaxKernel<<<blocksFor(s.rows * kWarp), kThreads, 0, ctx.stream>>>(
        s, probs);
    return launchStatus("attention causalSoftmax");
  }
  /// Pageable host memory: the copy is staged, so `src` may go away when
  /// this returns.
  Status copyInts(int32_t *dst, const int32_t *src, long long n) {
    if (cudaMemcpyAsync(dst, src, size_t(n) * sizeof(int32_t),
                        cudaMemcpyHostToDevice, ctx.stream) != cudaSuccess)
      return Status::error("attention: copying the document starts failed");
    return Status::ok();
  }
  Status scoreDropout(const ScoreDropout &d, const float *in, float *out,
                      long long n) {
    scoreDropoutKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(d, n, in,
                                                                  out);
    return launchStatus("attention scoreDropout");
  }
  Status causalSoftmaxGrad(const ScoreRows &s, const float *probs, float *ds) {
    causalSoftmaxGradKernel<<<blocksFor(s.rows * kWarp), kThreads, 0,
                              ctx.stream>>>(s, probs, ds);
    return launchStatus("attention causalSoftmaxGrad");
  }
};

} // namespace

size_t attentionWorkspaceBytes(const cpu::AttentionShape &s) {
  AttentionBuffers b;
  return carveAttention(s, nullptr, b);
}

Status attentionForward(GemmCtx &ctx, const cpu::AttentionShape &s,
                        const float *q, const float *k, const float *v,
                        float *out, void *ws) {
  if (!cpu::isValid(s))
    return Status::error("attention: invalid shape");
  if (s.batch == 0 || s.seq == 0)
    return Status::ok();
  AttentionBuffers b;
  carveAttention(s, ws, b);
  CudaExec x{{ctx}};
  return attentionForwardPlan(x, s, q, k, v, out, b);
}

Status attentionBackward(GemmCtx &ctx, const cpu::AttentionShape &s,
                         const float *q, const float *k, const float *v,
                         const float *dy, float *dq, float *dk, float *dv,
                         void *ws) {
  if (!cpu::isValid(s))
    return Status::error("attention: invalid shape");
  if (s.batch == 0 || s.seq == 0)
    return Status::ok();
  AttentionBuffers b;
  carveAttention(s, ws, b);
  CudaExec x{{ctx}};
  return attentionBackwardPlan(x, s, q, k, v, dy, dq, dk, dv, b);
}

Status concatHeadsForward(GemmCtx &ctx, const cpu::ConcatHeadsShape &s,
                          const float *lhs, const float *rhs, float *out) {
  if (!cpu::isValid(s))
    return Status::error("concat_heads: invalid shape");
  const long long n = s.rows * s.heads * (s.lhsDim + s.rhsDim);
  if (n == 0)
    return Status::ok();
  concatHeadsKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(
      concatLayout(s), n, lhs, rhs, out);
  return launchStatus("concat_heads");
}

Status concatHeadsBackward(GemmCtx &ctx, const cpu::ConcatHeadsShape &s,
                           const float *dout, float *dlhs, float *drhs) {
  if (!cpu::isValid(s))
    return Status::error("concat_heads_bwd: invalid shape");
  const long long n = s.rows * s.heads * (s.lhsDim + s.rhsDim);
  if (n == 0)
    return Status::ok();
  ConcatHeadsLayout l = concatLayout(s);
  concatHeadsGradKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(l, n, dout,
                                                                   dlhs, drhs);
  if (Status st = launchStatus("concat_heads_bwd"); !st || !s.broadcast)
    return st;
  const long long m = s.rows * s.rhsDim;
  concatHeadsSharedGradKernel<<<blocksFor(m), kThreads, 0, ctx.stream>>>(
      l, m, dout, drhs);
  return launchStatus("concat_heads_bwd shared head");
}

} // namespace pipeforge::rt::cuda
