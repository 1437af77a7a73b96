//===- RowMath.h - Per-row and per-element math of the CUDA kernels -------===//
//
// The arithmetic of the CUDA backend's norm, loss, embedding and AdamW
// kernels, as PF_HOST_DEVICE functions in exactly the precision and order of
// operations of the CPU reference (runtime/backends/cpu, runtime/lib/Optimizer.cpp).
// A kernel reduces a row with a block reduction and calls these functions
// on the partial sums and the elements; the CPU test
// (unittests/CudaMath/RowMathTest.cpp) runs the same functions with plain
// loops over whole tensors against the reference kernels.
//
// Reductions: norm statistics and the loss total in double (as the CPU
// does), the softmax denominator of the loss in float.
//
// Header-only, host-includable without nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_ROWMATH_H
#define PIPEFORGE_RUNTIME_CUDA_ROWMATH_H

#include "cpu/ElementwiseMath.h"
#include "pipeforge/rt/AdamWMath.h"

#include <math.h>

namespace pipeforge {
namespace rt {
namespace cuda {

//===--- LayerNorm / RMSNorm ----------------------------------------------===//
// Row statistics: mean = sum(x) / H; var = sum((x - mean)^2) / H with the
// double mean; rmsnorm's mean square = sum(x^2) / H.

PF_HOST_DEVICE inline double normSquaredDeviation(float x, double mean) {
  double d = double(x) - mean;
  return d * d;
}
PF_HOST_DEVICE inline double normSquare(float x) {
  return double(x) * double(x);
}
/// 1 / sqrt(var + eps) (layernorm) or 1 / sqrt(meanSquare + eps) (rmsnorm).
PF_HOST_DEVICE inline float normRstd(double meanSquare, double eps) {
  return 1.0f / math::pfSqrt(float(meanSquare) + float(eps));
}
PF_HOST_DEVICE inline float layerNormValue(float x, float mean, float rstd,
                                           float gamma, float beta) {
  return (x - mean) * rstd * gamma + beta;
}
PF_HOST_DEVICE inline float rmsNormValue(float x, float rstd, float gamma) {
  return x * rstd * gamma;
}

/// Backward for dx. Per element g = dy * gamma and xhat = (x - mean) * rstd
/// (mean = 0 for rmsnorm); the row sums sg = sum g, sgx = sum g * xhat (in
/// double) give mg = sg / H (0 for rmsnorm) and mgx = sgx / H; then
/// dx = rstd * (g - mg - xhat * mgx).
struct NormBwdTerm {
  float g, xhat;
};
PF_HOST_DEVICE inline NormBwdTerm normBwdTerm(float dy, float gamma, float x,
                                              float mean, float rstd) {
  return {dy * gamma, (x - mean) * rstd};
}
PF_HOST_DEVICE inline double normBwdGX(const NormBwdTerm &t) {
  return double(t.g * t.xhat);
}
PF_HOST_DEVICE inline float normBwdMean(double rowSum, long long hidden) {
  return float(rowSum / double(hidden));
}
PF_HOST_DEVICE inline float normBwdDx(const NormBwdTerm &t, float rstd,
                                      float mg, float mgx) {
  return rstd * (t.g - mg - t.xhat * mgx);
}

/// One token's contribution to dgamma (dbeta's is dy itself); summed over
/// the tokens in token order, in float.
PF_HOST_DEVICE inline float normGammaTerm(float dy, float x, float mean,
                                          float rstd) {
  return dy * ((x - mean) * rstd);
}

//===--- Cross-entropy -----------------------------------------------------===//
// Row: m = max logit, sum = sum exp(x - m) in float, lse = m + log(sum).
// Loss: mean over tokens of (lse - x[target]), summed in double.
// Gradient: dx = exp(x - lse) * scale, minus scale at the target, with
// scale = dloss / tokens.

PF_HOST_DEVICE inline float crossEntropyLse(float rowMax, float expSum) {
  return rowMax + math::pfLog(expSum);
}
PF_HOST_DEVICE inline float crossEntropyRowLoss(float lse, float targetLogit) {
  return lse - targetLogit;
}
PF_HOST_DEVICE inline float crossEntropyMean(double total, long long tokens) {
  return tokens ? float(total / double(tokens)) : 0.0f;
}
PF_HOST_DEVICE inline float crossEntropyScale(float dloss, long long tokens) {
  return dloss / float(tokens);
}
PF_HOST_DEVICE inline float crossEntropyGrad(float x, float lse, float scale,
                                             bool isTarget) {
  float d = math::pfExpFast(x - lse) * scale;
  return isTarget ? d - scale : d;
}

//===--- Embedding ---------------------------------------------------------===//

PF_HOST_DEVICE inline bool indexInRange(int v, long long limit) {
  return v >= 0 && (long long)v < limit;
}
/// y[t, j] = table[token, j] (+ pos[position, j] with learned positions).
PF_HOST_DEVICE inline float embeddingValue(const float *table,
                                           const float *pos, int token,
                                           long long position, long long j,
                                           long long hidden) {
  float v = table[(long long)token * hidden + j];
  return pos ? v + pos[position * hidden + j] : v;
}

/// The same for a vocabulary shard (tensor parallelism, cpu::embeddingF with
/// vocabStart): the table holds rows [start, start + vocab); a token outside
/// them reads no row (the position alone, or 0).
PF_HOST_DEVICE inline float embeddingShardValue(const float *table,
                                                const float *pos, int token,
                                                long long start,
                                                long long vocab,
                                                long long position,
                                                long long j, long long hidden) {
  const long long local = (long long)token - start;
  const bool in = local >= 0 && local < vocab;
  if (in && pos)
    return table[local * hidden + j] + pos[position * hidden + j];
  if (in)
    return table[local * hidden + j];
  return pos ? pos[position * hidden + j] : 0.f;
}

//===--- AdamW -------------------------------------------------------------===//
// One element of AdamWT<float>'s step and rollback: pipeforge/rt/AdamWMath.h, shared
// with the host optimizer and the CPU backends.

using ::pipeforge::rt::AdamWCoeffs;

/// The coefficients of step t (1-based) as the CPU optimizer rounds them.
inline AdamWCoeffs adamwCoeffs(double beta1, double beta2, double eps,
                               double weightDecay, long long t, double lr,
                               double clipScale, bool decays = true) {
  return adamwCoeffsT<float>(beta1, beta2, eps, weightDecay, t, lr, clipScale,
                             decays);
}

PF_HOST_DEVICE inline void adamwUpdate(const AdamWCoeffs &c, float grad,
                                       float &theta, float &m, float &v) {
  adamwElement(c, grad, theta, m, v);
}

PF_HOST_DEVICE inline void adamwUndo(const AdamWCoeffs &c, float grad,
                                     float &theta, float &m, float &v) {
  adamwElementUndo(c, grad, theta, m, v);
}

} // namespace cuda
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CUDA_ROWMATH_H
