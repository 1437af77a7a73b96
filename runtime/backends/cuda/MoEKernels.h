//===- MoEKernels.h - Top-k mixture of experts on CUDA ----------*- C++ -*-===//
//
// The CUDA version of cpu::moeF / moeB / moeW (same semantics: router
// softmax, top-k with ties to the lower expert, renormalised gates or not,
// per-expert capacity in token order with drops, gelu/silu, optional SwiGLU
// gate w3, the routing of MoERouting.h with its optional load-balancing
// bias [E] in the choice; no expert biases). All pointers are device pointers;
// all work is queued on ctx.stream with no host synchronisation: the routing
// stays on the device and every expert runs on a capacity-padded block of rows,
// so the expert GEMMs have static shapes (see MoEMath.h). Both backward calls
// recompute the routing and the expert forward (nothing is saved).
//
// Weights: router [E, hidden], w1, w3 [E, ffn, hidden], w2 [E, hidden, ffn];
// w3 null means the plain (ungated) expert. All outputs are overwritten.
//
// `ws` is device scratch of at least moeWorkspaceBytes(shape) bytes,
// 256-byte aligned; the same size serves all three calls, gated or not.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_MOEKERNELS_H
#define PIPEFORGE_RUNTIME_CUDA_MOEKERNELS_H

#include "cpu/Kernels.h"
#include "cuda/GemmCtx.h"

#include <cstddef>

namespace pipeforge::rt::cuda {

size_t moeWorkspaceBytes(const cpu::MoEShape &s);

/// y [tokens, hidden] = sum over kept assignments of gate * expert(x).
/// `bias` [E] (or null): the load-balancing bias; `load` [E] (or null): each
/// top-k choice adds 1 to its expert's entry (before capacity drops).
Status moeForward(GemmCtx &ctx, const cpu::MoEShape &s, const float *x,
                  const float *router, const float *w1, const float *w2,
                  const float *w3, float *y, void *ws,
                  const float *bias = nullptr, float *load = nullptr);

/// dx [tokens, hidden]: through the experts and the router.
Status moeBackwardInput(GemmCtx &ctx, const cpu::MoEShape &s, const float *x,
                        const float *router, const float *w1, const float *w2,
                        const float *w3, const float *dy, float *dx, void *ws,
                        const float *bias = nullptr);

/// drouter, dw1, dw2 and, when w3 is given, dw3.
Status moeBackwardWeight(GemmCtx &ctx, const cpu::MoEShape &s, const float *x,
                         const float *router, const float *w1, const float *w2,
                         const float *w3, const float *dy, float *drouter,
                         float *dw1, float *dw2, float *dw3, void *ws,
                         const float *bias = nullptr);

} // namespace pipeforge::rt::cuda

#endif // PIPEFORGE_RUNTIME_CUDA_MOEKERNELS_H
