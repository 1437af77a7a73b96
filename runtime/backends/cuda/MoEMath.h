//===- MoEMath.h - Per-thread bodies of the CUDA MoE kernels ----*- C++ -*-===//
//
// The work of one CUDA thread (or one lane of a warp) of the MoE kernels in
// MoEKernels.cu, as PF_HOST_DEVICE functions: the kernels are thin
// grid-stride loops around them, and the CPU test
// (unittests/CudaMath/AttentionMoEMathTest.cpp) runs the same functions over
// whole tensors with loops in place of the grid, against cpu::moeF/B/W.
//
// Routing stays on the device, so the expert GEMMs have static shapes: every
// expert owns `rows = moeExpertRows(shape)` dispatch rows, row e * rows + slot
// for its slot-th kept assignment in token order (the CPU kernel's order
// within an expert); unused rows hold zeros and contribute nothing.
//
// Tensors (N tokens, H hidden, F ffn, E experts, K top-k, R = E * rows):
//   probs [N, E], topIdx / gates / slotOf [N, K] (assignment a = t * K + r,
//   slotOf -1 when dropped), rowAssign [R] (assignment of a row, -1 unused),
//   xe / eout / dye / dxe [R, H], pre / pre3 / act / dpre / dpre3 [R, F].
//
// Header-only, host-includable without nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_MOEMATH_H
#define PIPEFORGE_RUNTIME_CUDA_MOEMATH_H

#include "cpu/ElementwiseMath.h"
#include "cpu/Kernels.h"
#include "cpu/MoERouting.h"

#include <stdint.h>

namespace pipeforge {
namespace rt {
namespace cuda {

using cpu::Activation;

/// Dispatch rows per expert: the capacity, or every token when unlimited
/// (an expert receives at most one assignment per token).
PF_HOST_DEVICE inline long long moeExpertRows(const cpu::MoEShape &s) {
  return s.capacity == 0 || s.capacity > s.tokens ? s.tokens : s.capacity;
}

PF_HOST_DEVICE inline float moeAct(Activation a, float x) {
  return a == Activation::Gelu ? math::gelu(x) : math::silu(x);
}
PF_HOST_DEVICE inline float moeActGrad(Activation a, float x) {
  return a == Activation::Gelu ? math::geluGrad(x) : math::siluGrad(x);
}

/// One token's routing (cpu/MoERouting.h, shared with the CPU kernels and
/// the expert-parallel path): probs [E] holds the logits on entry and the
/// scores (softmax or sigmoid) on return; top-k with ties to the lower
/// expert index, group-limited when s.groups > 1, on the scores plus the
/// optional load-balancing bias [E]; the gates (unbiased).
PF_HOST_DEVICE inline void moeRouteToken(const cpu::MoEShape &s, float *probs,
                                         const float *bias, int32_t *topIdx,
                                         float *gates) {
  cpu::moeScoreToken(s, probs);
  cpu::moeSelectToken(s, probs, bias, topIdx, gates);
}

/// Expert e's capacity scan: its assignments in token order take slots
/// 0, 1, ... while fewer than `rows` are taken; later ones are dropped
/// (slotOf = -1). Fills rowAssign for the expert's rows, -1 when unused.
/// Each assignment is written by exactly the thread of its expert.
PF_HOST_DEVICE inline void moeAssignExpert(const int32_t *topIdx,
                                           long long assignments, int32_t e,
                                           long long rows, int32_t *slotOf,
                                           int32_t *rowAssign) {
  long long count = 0;
  for (long long a = 0; a < assignments; ++a) {
    if (topIdx[a] != e)
      continue;
    if (count < rows) {
      slotOf[a] = int32_t(count);
      rowAssign[e * rows + count] = int32_t(a);
      ++count;
    } else {
      slotOf[a] = -1;
    }
  }
  for (long long r = count; r < rows; ++r)
    rowAssign[e * rows + r] = -1;
}

/// Element idx of xe [R, H]: the row's token input, 0 for unused rows.
PF_HOST_DEVICE inline void moeGatherElement(long long idx, long long hidden,
                                            long long topK,
                                            const int32_t *rowAssign,
                                            const float *x, float *xe) {
  long long row = idx / hidden, j = idx % hidden;
  int32_t a = rowAssign[row];
  xe[idx] = a >= 0 ? x[(a / topK) * hidden + j] : 0.f;
}

/// Element i of act [R, F]: act(pre), times pre3 when gated (pre3 != null).
PF_HOST_DEVICE inline void moeActElement(long long i, Activation act,
                                         const float *pre, const float *pre3,
                                         float *out) {
  float v = moeAct(act, pre[i]);
  out[i] = pre3 ? v * pre3[i] : v;
}

/// Element idx of y [N, H]: sum over the token's kept ranks, in rank order,
/// of gate * expert output.
PF_HOST_DEVICE inline void
moeCombineElement(long long idx, long long hidden, long long topK,
                  long long rows, const int32_t *topIdx, const int32_t *slotOf,
                  const float *gates, const float *eout, float *y) {
  long long t = idx / hidden, j = idx % hidden;
  float sum = 0.f;
  for (long long r = 0; r < topK; ++r) {
    long long a = t * topK + r;
    int32_t slot = slotOf[a];
    if (slot < 0)
      continue;
    sum += gates[a] * eout[(topIdx[a] * rows + slot) * hidden + j];
  }
  y[idx] = sum;
}

/// Lane `lane` of `lanes` of assignment a's gate gradient
/// dg[a] = dot(dy[token], eout[row]) (0 when dropped): a partial sum.
PF_HOST_DEVICE inline float
moeGateGradPart(long long a, long long hidden, long long topK, long long rows,
                const int32_t *topIdx, const int32_t *slotOf, const float *dy,
                const float *eout, int lane, int lanes) {
  int32_t slot = slotOf[a];
  if (slot < 0)
    return 0.f;
  const float *d = dy + (a / topK) * hidden;
  const float *eo = eout + (topIdx[a] * rows + slot) * hidden;
  float sum = 0.f;
  for (long long j = lane; j < hidden; j += lanes)
    sum += d[j] * eo[j];
  return sum;
}

/// One token's router gradient: dg [K] -> gates -> scaling and
/// renormalisation over the top-k -> softmax or sigmoid -> dlogits [E]
/// (cpu/MoERouting.h; top-k membership and drops are constants).
PF_HOST_DEVICE inline void moeRouterGradToken(const cpu::MoEShape &s,
                                              const float *probs,
                                              const int32_t *topIdx,
                                              const float *gates,
                                              const float *dg, float *dlogits) {
  cpu::moeRouterGradToken(s, probs, topIdx, gates, dg, dlogits);
}

/// Element idx of dye [R, H]: gate * dy[token], 0 for unused rows.
PF_HOST_DEVICE inline void moeDyeElement(long long idx, long long hidden,
                                         long long topK,
                                         const int32_t *rowAssign,
                                         const float *gates, const float *dy,
                                         float *dye) {
  long long row = idx / hidden, j = idx % hidden;
  int32_t a = rowAssign[row];
  dye[idx] = a >= 0 ? gates[a] * dy[(a / topK) * hidden + j] : 0.f;
}

/// Element i of the expert-internal gradients; dpre holds dh = dye W2 on
/// entry.  plain: dpre = dh act'(pre);  gated (pre3, dpre3 != null):
/// dpre3 = dh act(pre), dpre = dh pre3 act'(pre).
PF_HOST_DEVICE inline void moeExpertGradElement(long long i, Activation act,
                                                const float *pre,
                                                const float *pre3, float *dpre,
                                                float *dpre3) {
  float dh = dpre[i], pr = pre[i];
  if (pre3) {
    dpre3[i] = dh * moeAct(act, pr);
    dpre[i] = dh * pre3[i] * moeActGrad(act, pr);
  } else {
    dpre[i] = dh * moeActGrad(act, pr);
  }
}

/// Element idx of dx [N, H] (holding the router part dlogits Wr on entry):
/// adds the token's kept rows of dxe in rank order.
PF_HOST_DEVICE inline void moeScatterElement(long long idx, long long hidden,
                                             long long topK, long long rows,
                                             const int32_t *topIdx,
                                             const int32_t *slotOf,
                                             const float *dxe, float *dx) {
  long long t = idx / hidden, j = idx % hidden;
  float sum = dx[idx];
  for (long long r = 0; r < topK; ++r) {
    long long a = t * topK + r;
    int32_t slot = slotOf[a];
    if (slot >= 0)
      sum += dxe[(topIdx[a] * rows + slot) * hidden + j];
  }
  dx[idx] = sum;
}

} // namespace cuda
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CUDA_MOEMATH_H
