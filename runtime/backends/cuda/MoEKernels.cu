//===- MoEKernels.cu - Top-k mixture of experts on CUDA -------------------===//
//
// The CUDA executor of MoEPlan.h: routing with one thread per token, the
// capacity scan with one thread per expert, gate gradients with one warp per
// assignment (shuffle reduction), every other step as a grid-stride kernel
// with one thread per element, the products through gemm(). The per-thread
// bodies live in MoEMath.h.
//
//===----------------------------------------------------------------------===//

#include "cuda/Launch.cuh"
#include "cuda/MoEKernels.h"
#include "cuda/MoEPlan.h"

#include <algorithm>

namespace pipeforge::rt::cuda {

namespace {

__global__ void routeKernel(float *probs, cpu::MoEShape s, const float *bias,
                            int32_t *topIdx, float *gates) {
  PF_GRID_LOOP(t, s.tokens)
  moeRouteToken(s, probs + t * s.experts, bias, topIdx + t * s.topK,
                gates + t * s.topK);
}

/// load[e] += the assignments to expert e: whole numbers in float, so the
/// atomics' order does not change the result (below 2^24).
__global__ void loadKernel(const int32_t *topIdx, long long assignments,
                           float *load) {
  PF_GRID_LOOP(a, assignments)
  atomicAdd(load + topIdx[a], 1.0f);
}

__global__ void assignKernel(const int32_t *topIdx, long long assignments,
                             long long experts, long long rows, int32_t *slotOf,
                             int32_t *rowAssign) {
  PF_GRID_LOOP(e, experts)
  moeAssignExpert(topIdx, assignments, int32_t(e), rows, slotOf, rowAssign);
}

__global__ void gatherKernel(long long n, long long hidden, long long topK,
                             const int32_t *rowAssign, const float *x,
                             float *xe) {
  PF_GRID_LOOP(i, n)
  moeGatherElement(i, hidden, topK, rowAssign, x, xe);
}

__global__ void actKernel(long long n, Activation act, const float *pre,
                          const float *pre3, float *out) {
  PF_GRID_LOOP(i, n)
  moeActElement(i, act, pre, pre3, out);
}

__global__ void combineKernel(long long n, long long hidden, long long topK,
                              long long rows, const int32_t *topIdx,
                              const int32_t *slotOf, const float *gates,
                              const float *eout, float *y) {
  PF_GRID_LOOP(i, n)
  moeCombineElement(i, hidden, topK, rows, topIdx, slotOf, gates, eout, y);
}

/// One warp per assignment; the loop bound is uniform across a warp.
__global__ void gateGradKernel(long long assignments, long long hidden,
                               long long topK, long long rows,
                               const int32_t *topIdx, const int32_t *slotOf,
                               const float *dy, const float *eout, float *dg) {
  const int lane = threadIdx.x % kWarp;
  const long long nWarps = (long long)gridDim.x * blockDim.x / kWarp;
  for (long long a = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kWarp;
       a < assignments; a += nWarps) {
    float v = moeGateGradPart(a, hidden, topK, rows, topIdx, slotOf, dy, eout,
                              lane, kWarp);
    v = warpSum(v);
    if (lane == 0)
      dg[a] = v;
  }
}

__global__ void routerGradKernel(const float *probs, cpu::MoEShape s,
                                 const int32_t *topIdx, const float *gates,
                                 const float *dg, float *dlogits) {
  PF_GRID_LOOP(t, s.tokens)
  moeRouterGradToken(s, probs + t * s.experts, topIdx + t * s.topK,
                     gates + t * s.topK, dg + t * s.topK,
                     dlogits + t * s.experts);
}

__global__ void dyeKernel(long long n, long long hidden, long long topK,
                          const int32_t *rowAssign, const float *gates,
                          const float *dy, float *dye) {
  PF_GRID_LOOP(i, n)
  moeDyeElement(i, hidden, topK, rowAssign, gates, dy, dye);
}

__global__ void expertGradKernel(long long n, Activation act, const float *pre,
                                 const float *pre3, float *dpre, float *dpre3) {
  PF_GRID_LOOP(i, n)
  moeExpertGradElement(i, act, pre, pre3, dpre, dpre3);
}

__global__ void scatterKernel(long long n, long long hidden, long long topK,
                              long long rows, const int32_t *topIdx,
                              const int32_t *slotOf, const float *dxe,
                              float *dx) {
  PF_GRID_LOOP(i, n)
  moeScatterElement(i, hidden, topK, rows, topIdx, slotOf, dxe, dx);
}

/// MoEPlan.h's executor: everything queued on ctx.stream.
struct CudaExec : GemmExec {
  Status route(float *probs, const cpu::MoEShape &s, const float *bias,
               int32_t *topIdx, float *gates) {
    routeKernel<<<blocksFor(s.tokens), kThreads, 0, ctx.stream>>>(
        probs, s, bias, topIdx, gates);
    return launchStatus("moe route");
  }
  Status assign(const int32_t *topIdx, long long assignments, long long experts,
                long long rows, int32_t *slotOf, int32_t *rowAssign) {
    assignKernel<<<blocksFor(experts), kThreads, 0, ctx.stream>>>(
        topIdx, assignments, experts, rows, slotOf, rowAssign);
    return launchStatus("moe assign");
  }
  Status gather(long long n, long long hidden, long long topK,
                const int32_t *rowAssign, const float *x, float *xe) {
    gatherKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(n, hidden, topK,
                                                            rowAssign, x, xe);
    return launchStatus("moe gather");
  }
  Status act(long long n, Activation a, const float *pre, const float *pre3,
             float *out) {
    actKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(n, a, pre, pre3, out);
    return launchStatus("moe act");
  }
  Status combine(long long n, long long hidden, long long topK, long long rows,
                 const int32_t *topIdx, const int32_t *slotOf,
                 const float *gates, const float *eout, float *y) {
    combineKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(
        n, hidden, topK, rows, topIdx, slotOf, gates, eout, y);
    return launchStatus("moe combine");
  }
  Status gateGrad(long long assignments, long long hidden, long long topK,
                  long long rows, const int32_t *topIdx, const int32_t *slotOf,
                  const float *dy, const float *eout, float *dg) {
    gateGradKernel<<<blocksFor(assignments * kWarp), kThreads, 0, ctx.stream>>>(
        assignments, hidden, topK, rows, topIdx, slotOf, dy, eout, dg);
    return launchStatus("moe gateGrad");
  }
  Status routerGrad(const float *probs, const cpu::MoEShape &s,
                    const int32_t *topIdx, const float *gates, const float *dg,
                    float *dlogits) {
    routerGradKernel<<<blocksFor(s.tokens), kThreads, 0, ctx.stream>>>(
        probs, s, topIdx, gates, dg, dlogits);
    return launchStatus("moe routerGrad");
  }
  Status dye(long long n, long long hidden, long long topK,
             const int32_t *rowAssign, const float *gates, const float *dy,
             float *out) {
    dyeKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(
        n, hidden, topK, rowAssign, gates, dy, out);
    return launchStatus("moe dye");
  }
  Status expertGrad(long long n, Activation a, const float *pre,
                    const float *pre3, float *dpre, float *dpre3) {
    expertGradKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(n, a, pre, pre3,
                                                                dpre, dpre3);
    return launchStatus("moe expertGrad");
  }
  Status scatter(long long n, long long hidden, long long topK, long long rows,
                 const int32_t *topIdx, const int32_t *slotOf, const float *dxe,
                 float *dx) {
    scatterKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(
        n, hidden, topK, rows, topIdx, slotOf, dxe, dx);
    return launchStatus("moe scatter");
  }
  Status zero(float *p, long long floats) {
    return cudaStatus(
        cudaMemsetAsync(p, 0, size_t(floats) * sizeof(float), ctx.stream),
        "moe: zero gradient");
  }
};

} // namespace

size_t moeWorkspaceBytes(const cpu::MoEShape &s) {
  MoEBuffers b;
  return carveMoE(s, nullptr, b);
}

Status moeForward(GemmCtx &ctx, const cpu::MoEShape &s, const float *x,
                  const float *router, const float *w1, const float *w2,
                  const float *w3, float *y, void *ws, const float *bias,
                  float *load) {
  if (!cpu::isValid(s))
    return Status::error("moe: invalid shape");
  if (s.tokens == 0)
    return Status::ok();
  MoEBuffers b;
  carveMoE(s, ws, b);
  b.bias = bias;
  CudaExec e{{ctx}};
  if (Status st = moeForwardPlan(e, s, x, router, w1, w2, w3, y, b); !st)
    return st;
  if (!load)
    return Status::ok();
  const long long n = s.tokens * s.topK;
  loadKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(b.topIdx, n, load);
  return launchStatus("moe load");
}

Status moeBackwardInput(GemmCtx &ctx, const cpu::MoEShape &s, const float *x,
                        const float *router, const float *w1, const float *w2,
                        const float *w3, const float *dy, float *dx, void *ws,
                        const float *bias) {
  if (!cpu::isValid(s))
    return Status::error("moe: invalid shape");
  if (s.tokens == 0)
    return Status::ok();
  MoEBuffers b;
  carveMoE(s, ws, b);
  b.bias = bias;
  CudaExec e{{ctx}};
  return moeBackwardInputPlan(e, s, x, router, w1, w2, w3, dy, dx, b);
}

Status moeBackwardWeight(GemmCtx &ctx, const cpu::MoEShape &s, const float *x,
                         const float *router, const float *w1, const float *w2,
                         const float *w3, const float *dy, float *drouter,
                         float *dw1, float *dw2, float *dw3, void *ws,
                         const float *bias) {
  if (!cpu::isValid(s))
    return Status::error("moe: invalid shape");
  if (w3 && !dw3)
    return Status::error("moe: missing w3 gradient");
  MoEBuffers b;
  carveMoE(s, ws, b);
  b.bias = bias;
  CudaExec e{{ctx}};
  return moeBackwardWeightPlan(e, s, x, router, w1, w2, w3, dy, drouter, dw1,
                               dw2, dw3, b);
}

} // namespace pipeforge::rt::cuda
