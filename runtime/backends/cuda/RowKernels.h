//===- RowKernels.h - Norm, loss, embedding, elementwise, AdamW on CUDA -===//
//
// The CUDA versions of the CPU reference's row and elementwise kernels
// (runtime/backends/cpu/Kernels*.cpp) and of AdamWT<float>::step: one block (or one
// warp) per row with a fixed-order block reduction, the per-element math of
// RowMath.h / ElementwiseMath.h. All pointers are device pointers; all work
// is queued on ctx.stream with no host synchronisation. A token or target
// outside [0, vocab) is recorded in ctx.errorWord (DeviceError.h) and the
// row is skipped (no out-of-range access).
//
// Output rules follow the backend's gradient ops: every output is
// OVERWRITTEN, parameter gradients included (the executor accumulates them).
// Reductions over tokens (dgamma, dbeta, the embedding gradient) run in
// token order, so results are deterministic run to run.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_ROWKERNELS_H
#define PIPEFORGE_RUNTIME_CUDA_ROWKERNELS_H

#include "cpu/Kernels.h"
#include "cuda/GemmCtx.h"
#include "cuda/RowMath.h"

namespace pipeforge::rt::cuda {

//===--- Norms: x, y [tokens, hidden] ---===//
/// y = layernorm(x) * gamma + beta.
Status layerNormForward(GemmCtx &ctx, const cpu::NormShape &s, const float *x,
                        const float *gamma, const float *beta, float *y);
/// y = rmsnorm(x) * gamma.
Status rmsNormForward(GemmCtx &ctx, const cpu::NormShape &s, const float *x,
                      const float *gamma, float *y);
/// dx from (x, gamma, dy); the row statistics are recomputed.
/// layer: layernorm, else rmsnorm.
Status normBackwardInput(GemmCtx &ctx, const cpu::NormShape &s, bool layer,
                         const float *x, const float *gamma, const float *dy,
                         float *dx);
/// dgamma [hidden] and (layer only; may be null) dbeta [hidden] from (x, dy).
Status normBackwardWeight(GemmCtx &ctx, const cpu::NormShape &s, bool layer,
                          const float *x, const float *dy, float *dgamma,
                          float *dbeta);

//===--- Elementwise, n elements ---===//
Status activationForward(GemmCtx &ctx, cpu::Activation act, long long n,
                         const float *x, float *y);
/// dx = dy * act'(x).
Status activationBackward(GemmCtx &ctx, cpu::Activation act, long long n,
                          const float *x, const float *dy, float *dx);
/// y = a + b.
Status addForward(GemmCtx &ctx, long long n, const float *a, const float *b,
                  float *y);
/// nn.dropout (cpu::dropoutF's mask, bit for bit): y = x * mask / (1 - rate).
Status dropoutForward(GemmCtx &ctx, const cpu::DropoutShape &s, const float *x,
                      float *y);
/// y = a * b.
Status mulForward(GemmCtx &ctx, long long n, const float *a, const float *b,
                  float *y);
/// dst[i] += src[i].
Status accumulate(GemmCtx &ctx, long long n, float *dst, const float *src);
/// x[i] *= a.
Status scale(GemmCtx &ctx, long long n, float *x, float a);

//===--- Embedding: tokens [batch, seq] int32, y [batch*seq, hidden] ---===//
/// y[t] = table[tokens[t]] (+ pos[t % seq] when pos is not null).
Status embeddingForward(GemmCtx &ctx, const cpu::EmbeddingShape &s,
                        const float *table, const float *pos,
                        const int32_t *tokens, float *y);
/// dtable [vocab, hidden] = scatter-add of dy by token (in token order);
/// dpos [seq, hidden] (when not null) = sum of dy over the batch.
Status embeddingBackwardWeight(GemmCtx &ctx, const cpu::EmbeddingShape &s,
                               const int32_t *tokens, const float *dy,
                               float *dtable, float *dpos);

//===--- Cross-entropy: logits [tokens, vocab], targets [tokens] int32 ---===//
/// *loss (one device float) = mean over tokens of lse - logit[target].
Status crossEntropyForward(GemmCtx &ctx, const cpu::CrossEntropyShape &s,
                           const float *logits, const int32_t *targets,
                           float *loss);
/// dlogits = *dloss (a device float) * (softmax - onehot) / tokens.
Status crossEntropyBackward(GemmCtx &ctx, const cpu::CrossEntropyShape &s,
                            const float *logits, const int32_t *targets,
                            const float *dloss, float *dlogits);

//===--- AdamW on a flat fp32 parameter (RowMath.h adamwUpdate) ---===//
/// theta, m, v updated in place from grad with the coefficients of one step;
/// `undo`: its exact inverse (adamwUndo), the post-validation rollback.
Status adamwStep(GemmCtx &ctx, const AdamWCoeffs &c, long long n, float *theta,
                 float *m, float *v, const float *grad, bool undo = false);
/// The sum of x's squares in double (per-block partials, summed on the host
/// in block order); synchronizes the stream.
Status sumSquares(GemmCtx &ctx, long long n, const float *x, double *out);

} // namespace pipeforge::rt::cuda

#endif // PIPEFORGE_RUNTIME_CUDA_ROWKERNELS_H
