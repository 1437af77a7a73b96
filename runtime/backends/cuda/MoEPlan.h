//===- MoEPlan.h - Step sequence of the CUDA mixture of experts -*- C++ -*-===//
//
// The order of the MoE steps, their GEMM shapes and strides and the
// workspace layout, written once over an executor `Exec` so that the CUDA
// kernels (MoEKernels.cu, Exec launches kernels and cuBLAS) and the CPU test
// (Exec runs MoEMath.h with loops) follow the same plan.
//
// Forward (also the recompute at the start of both backward calls):
//   logits = x Wr^T; routing per token (softmax, top-k, gates); capacity
//   scan per expert; gather of the rows' inputs; per expert, as GEMMs
//   batched over experts on `rows` padded rows each: pre = xe W1^T
//   (pre3 = xe W3^T), act, eout = act W2^T; combine per output element.
// Backward input: gate gradients dg = dy . eout; router gradient per token;
//   dye = gate * dy; dh = dye W2; expert-internal gradients;
//   dx = dlogits Wr + scatter of dxe = dpre W1 (+ dpre3 W3).
// Backward weight: the same gradients, then dW2 = dye^T act,
//   dW1 = dpre^T xe (dW3 = dpre3^T xe), dWr = dlogits^T x.
//
// Exec provides (each returns Status; n is a thread count):
//   gemm(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc,
//        batch, strideA, strideB, strideC)          row-major, as cuda::gemm
//   route(probs, shape, bias, topIdx, gates) (the routing fields of shape;
//                                           bias [E] or null)
//   assign(topIdx, assignments, experts, rows, slotOf, rowAssign)
//   gather(n, hidden, topK, rowAssign, x, xe)
//   act(n, Activation, pre, pre3, out)
//   combine(n, hidden, topK, rows, topIdx, slotOf, gates, eout, y)
//   gateGrad(assignments, hidden, topK, rows, topIdx, slotOf, dy, eout, dg)
//   routerGrad(probs, shape, topIdx, gates, dg, dlogits)
//   dye(n, hidden, topK, rowAssign, gates, dy, dye)
//   expertGrad(n, Activation, pre, pre3, dpre, dpre3)
//   scatter(n, hidden, topK, rows, topIdx, slotOf, dxe, dx)
//   zero(p, floats)
// each calling the MoEMath.h function of the same name over its range.
//
// Header-only, host-includable without nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_MOEPLAN_H
#define PIPEFORGE_RUNTIME_CUDA_MOEPLAN_H

#include "cpu/Kernels.h"
#include "cuda/MoEMath.h"
#include "pipeforge/rt/Backend.h"

#include <cstddef>

namespace pipeforge::rt::cuda {

/// Workspace regions (each 256-byte aligned); R = experts * rows.
struct MoEBuffers {
  float *probs;           ///< [N, E] logits, then probabilities
  float *gates, *dg;      ///< [N, K]
  float *dlogits;         ///< [N, E]
  float *xe, *eout, *dye; ///< [R, H]; backward input reuses eout for dxe
  float *pre, *pre3, *act, *dpre, *dpre3; ///< [R, F]
  int32_t *topIdx, *slotOf;               ///< [N, K]
  int32_t *rowAssign;                     ///< [R]
  /// [E] the load-balancing bias (choice only), or null; the caller's, not
  /// carved from the workspace.
  const float *bias = nullptr;
};

/// Lays the buffers out from `base` (null: sizing only); returns the bytes.
/// Sized for the gated expert, so one size serves w3 present or not.
inline size_t carveMoE(const cpu::MoEShape &s, void *base, MoEBuffers &b) {
  const size_t N = size_t(s.tokens), E = size_t(s.experts), K = size_t(s.topK),
               H = size_t(s.hidden), F = size_t(s.ffn);
  const size_t R = E * size_t(moeExpertRows(s));
  size_t off = 0;
  auto take = [&](size_t bytes) {
    void *p = base ? static_cast<char *>(base) + off : nullptr;
    off += (bytes + 255) / 256 * 256;
    return p;
  };
  auto floats = [&](size_t n) {
    return static_cast<float *>(take(n * sizeof(float)));
  };
  auto ints = [&](size_t n) {
    return static_cast<int32_t *>(take(n * sizeof(int32_t)));
  };
  b.probs = floats(N * E);
  b.gates = floats(N * K);
  b.dg = floats(N * K);
  b.dlogits = floats(N * E);
  b.xe = floats(R * H);
  b.eout = floats(R * H);
  b.dye = floats(R * H);
  b.pre = floats(R * F);
  b.pre3 = floats(R * F);
  b.act = floats(R * F);
  b.dpre = floats(R * F);
  b.dpre3 = floats(R * F);
  b.topIdx = ints(N * K);
  b.slotOf = ints(N * K);
  b.rowAssign = ints(R);
  return off;
}

/// Routing and the expert forward up to eout. Expects tokens > 0.
template <class Exec>
Status moeExpertForward(Exec &x, const cpu::MoEShape &s, const float *in,
                        const float *router, const float *w1, const float *w2,
                        const float *w3, const MoEBuffers &b) {
  const long long N = s.tokens, H = s.hidden, F = s.ffn, E = s.experts,
                  K = s.topK, rows = moeExpertRows(s);
  const int experts = int(E);
  if (Status st = x.gemm(false, true, N, E, H, 1.f, in, H, router, H, 0.f,
                         b.probs, E, 1, 0, 0, 0);
      !st)
    return st;
  if (Status st = x.route(b.probs, s, b.bias, b.topIdx, b.gates); !st)
    return st;
  if (Status st = x.assign(b.topIdx, N * K, E, rows, b.slotOf, b.rowAssign);
      !st)
    return st;
  if (Status st = x.gather(E * rows * H, H, K, b.rowAssign, in, b.xe); !st)
    return st;
  // Per expert: pre [rows, F] = xe [rows, H] W1_e^T (W1_e [F, H]).
  if (Status st = x.gemm(false, true, rows, F, H, 1.f, b.xe, H, w1, H, 0.f,
                         b.pre, F, experts, rows * H, F * H, rows * F);
      !st)
    return st;
  if (w3) {
    if (Status st = x.gemm(false, true, rows, F, H, 1.f, b.xe, H, w3, H, 0.f,
                           b.pre3, F, experts, rows * H, F * H, rows * F);
        !st)
      return st;
  }
  if (Status st =
          x.act(E * rows * F, s.act, b.pre, w3 ? b.pre3 : nullptr, b.act);
      !st)
    return st;
  // Per expert: eout [rows, H] = act [rows, F] W2_e^T (W2_e [H, F]).
  return x.gemm(false, true, rows, H, F, 1.f, b.act, F, w2, F, 0.f, b.eout, H,
                experts, rows * F, H * F, rows * H);
}

/// After moeExpertForward: dg, dlogits, dye and dpre (dpre3 when gated).
template <class Exec>
Status moeExpertBackward(Exec &x, const cpu::MoEShape &s, const float *w2,
                         const float *w3, const float *dy,
                         const MoEBuffers &b) {
  const long long N = s.tokens, H = s.hidden, F = s.ffn, E = s.experts,
                  K = s.topK, rows = moeExpertRows(s);
  if (Status st =
          x.gateGrad(N * K, H, K, rows, b.topIdx, b.slotOf, dy, b.eout, b.dg);
      !st)
    return st;
  if (Status st = x.routerGrad(b.probs, s, b.topIdx, b.gates, b.dg,
                               b.dlogits);
      !st)
    return st;
  if (Status st = x.dye(E * rows * H, H, K, b.rowAssign, b.gates, dy, b.dye);
      !st)
    return st;
  // Per expert: dh [rows, F] = dye [rows, H] W2_e [H, F].
  if (Status st = x.gemm(false, false, rows, F, H, 1.f, b.dye, H, w2, F, 0.f,
                         b.dpre, F, int(E), rows * H, H * F, rows * F);
      !st)
    return st;
  return x.expertGrad(E * rows * F, s.act, b.pre, w3 ? b.pre3 : nullptr, b.dpre,
                      w3 ? b.dpre3 : nullptr);
}

/// y [N, H] (overwritten). Expects a valid shape with tokens > 0.
template <class Exec>
Status moeForwardPlan(Exec &x, const cpu::MoEShape &s, const float *in,
                      const float *router, const float *w1, const float *w2,
                      const float *w3, float *y, const MoEBuffers &b) {
  const long long N = s.tokens, H = s.hidden, K = s.topK,
                  rows = moeExpertRows(s);
  if (Status st = moeExpertForward(x, s, in, router, w1, w2, w3, b); !st)
    return st;
  return x.combine(N * H, H, K, rows, b.topIdx, b.slotOf, b.gates, b.eout, y);
}

/// dx [N, H] (overwritten). Expects a valid shape with tokens > 0.
template <class Exec>
Status moeBackwardInputPlan(Exec &x, const cpu::MoEShape &s, const float *in,
                            const float *router, const float *w1,
                            const float *w2, const float *w3, const float *dy,
                            float *dx, const MoEBuffers &b) {
  const long long N = s.tokens, H = s.hidden, F = s.ffn, E = s.experts,
                  K = s.topK, rows = moeExpertRows(s);
  if (Status st = moeExpertForward(x, s, in, router, w1, w2, w3, b); !st)
    return st;
  if (Status st = moeExpertBackward(x, s, w2, w3, dy, b); !st)
    return st;
  // dx [N, H] = dlogits [N, E] Wr [E, H].
  if (Status st = x.gemm(false, false, N, H, E, 1.f, b.dlogits, E, router, H,
                         0.f, dx, H, 1, 0, 0, 0);
      !st)
    return st;
  // eout is dead once the gate gradients are done: it holds dxe.
  float *dxe = b.eout;
  // Per expert: dxe [rows, H] = dpre [rows, F] W1_e [F, H] (+ dpre3 W3_e).
  if (Status st = x.gemm(false, false, rows, H, F, 1.f, b.dpre, F, w1, H, 0.f,
                         dxe, H, int(E), rows * F, F * H, rows * H);
      !st)
    return st;
  if (w3) {
    if (Status st = x.gemm(false, false, rows, H, F, 1.f, b.dpre3, F, w3, H,
                           1.f, dxe, H, int(E), rows * F, F * H, rows * H);
        !st)
      return st;
  }
  return x.scatter(N * H, H, K, rows, b.topIdx, b.slotOf, dxe, dx);
}

/// drouter, dw1, dw2 (, dw3 when w3) overwritten. Expects a valid shape and
/// dw3 != null when w3 != null.
template <class Exec>
Status moeBackwardWeightPlan(Exec &x, const cpu::MoEShape &s, const float *in,
                             const float *router, const float *w1,
                             const float *w2, const float *w3, const float *dy,
                             float *drouter, float *dw1, float *dw2, float *dw3,
                             const MoEBuffers &b) {
  const long long N = s.tokens, H = s.hidden, F = s.ffn, E = s.experts,
                  rows = moeExpertRows(s);
  const int experts = int(E);
  if (N == 0) {
    // No tokens: every gradient is zero.
    if (Status st = x.zero(drouter, E * H); !st)
      return st;
    if (Status st = x.zero(dw1, E * F * H); !st)
      return st;
    if (Status st = x.zero(dw2, E * H * F); !st)
      return st;
    return w3 ? x.zero(dw3, E * F * H) : Status::ok();
  }
  if (Status st = moeExpertForward(x, s, in, router, w1, w2, w3, b); !st)
    return st;
  if (Status st = moeExpertBackward(x, s, w2, w3, dy, b); !st)
    return st;
  // Per expert: dW2_e [H, F] = dye^T [H, rows] act [rows, F].
  if (Status st = x.gemm(true, false, H, F, rows, 1.f, b.dye, H, b.act, F, 0.f,
                         dw2, F, experts, rows * H, rows * F, H * F);
      !st)
    return st;
  // Per expert: dW1_e [F, H] = dpre^T [F, rows] xe [rows, H] (dW3 alike).
  if (Status st = x.gemm(true, false, F, H, rows, 1.f, b.dpre, F, b.xe, H, 0.f,
                         dw1, H, experts, rows * F, rows * H, F * H);
      !st)
    return st;
  if (w3) {
    if (Status st = x.gemm(true, false, F, H, rows, 1.f, b.dpre3, F, b.xe, H,
                           0.f, dw3, H, experts, rows * F, rows * H, F * H);
        !st)
      return st;
  }
  // dWr [E, H] = dlogits^T [E, N] x [N, H].
  return x.gemm(true, false, E, H, N, 1.f, b.dlogits, E, in, H, 0.f, drouter, H,
                1, 0, 0, 0);
}

} // namespace pipeforge::rt::cuda

#endif // PIPEFORGE_RUNTIME_CUDA_MOEPLAN_H
