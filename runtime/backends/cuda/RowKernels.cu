//===- RowKernels.cu - Norm, loss, embedding, elementwise, AdamW on CUDA --===//
//
// Launch shapes (kThreads = 256 threads per block everywhere):
//   * row kernels (norm statistics, norm forward / input gradient,
//     cross-entropy): one block per row, blocks striding over the rows. A
//     row sum is a fixed-order block reduction (blockSum): thread i sums
//     elements i, i + 256, ... in order, then a shared-memory tree (thread
//     i adds i + s for s = 128, 64, ..., 1). Norm statistics and their
//     backward sums are double, the softmax max and denominator float.
//   * parameter gradients over tokens (dgamma, dbeta, dtable, dpos): one
//     thread per output column (dtable: per column and token bucket),
//     looping over the tokens in token order, which is the CPU reference's
//     float summation order.
//   * elementwise ops, the embedding lookup and AdamW: one thread per
//     element of a grid-stride loop.
// The per-element math is RowMath.h / ElementwiseMath.h. Scratch that the
// API does not pass in (norm statistics for dgamma, per-row losses) is
// stream-ordered (cudaMallocAsync / cudaFreeAsync on ctx.stream).
//
//===----------------------------------------------------------------------===//

#include "cpu/DropoutRng.h"
#include "cuda/Launch.cuh"
#include "cuda/RowKernels.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace pipeforge::rt::cuda {

namespace {

/// Token buckets of the embedding gradient: thread (bucket, column) owns
/// the tokens with token % buckets == bucket, so every dtable element is
/// still summed by one thread in token order.
constexpr long long kEmbedBuckets = 32;

/// Blocks for a one-block-per-row kernel (rows > 0).
unsigned rowBlocks(long long rows) {
  return unsigned(std::min<long long>(rows, 1 << 20));
}

/// Block-uniform loop over rows: every thread of a block sees the same r,
/// so the block reductions inside are reached by all of them.
#define PF_ROW_LOOP(r, rows)                                                   \
  for (long long r = blockIdx.x; r < rows; r += gridDim.x)
/// Thread-strided loop over the elements of one row.
#define PF_ROW_ELEMS(i, n) for (long long i = threadIdx.x; i < n; i += kThreads)

__device__ void reportError(int *word, DeviceError code, long long element,
                            int value, long long limit) {
  if (word)
    reportIndexError(word, code, element, value, limit);
}

/// Sum of every thread's v, in a fixed order; every thread gets the total.
/// Must be reached by all threads of the block; sh holds kThreads values.
template <typename T> __device__ T blockSum(T v, T *sh) {
  const int tid = threadIdx.x;
  sh[tid] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s)
      sh[tid] += sh[tid + s];
    __syncthreads();
  }
  T total = sh[0];
  __syncthreads(); // sh is reused by the next reduction
  return total;
}

/// Max with the CPU's comparison (b > a ? b : a); same contract as blockSum.
__device__ float blockMax(float v, float *sh) {
  const int tid = threadIdx.x;
  sh[tid] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) {
      float b = sh[tid + s];
      sh[tid] = b > sh[tid] ? b : sh[tid];
    }
    __syncthreads();
  }
  float m = sh[0];
  __syncthreads();
  return m;
}

//===--- Norms ---===//

struct RowStats {
  float mean, rstd; ///< mean = 0 for rmsnorm
};

/// The statistics of row xr [H] (KernelsNorm.cpp's layerNormF / rmsNormF).
template <bool Layer>
__device__ RowStats rowStats(const float *xr, long long H, double eps,
                             double *sh) {
  if (Layer) {
    double s = 0;
    PF_ROW_ELEMS(i, H)
    s += xr[i];
    double mean = blockSum(s, sh) / double(H);
    double q = 0;
    PF_ROW_ELEMS(i, H)
    q += normSquaredDeviation(xr[i], mean);
    double var = blockSum(q, sh) / double(H);
    return {float(mean), normRstd(var, eps)};
  }
  double q = 0;
  PF_ROW_ELEMS(i, H)
  q += normSquare(xr[i]);
  return {0.0f, normRstd(blockSum(q, sh) / double(H), eps)};
}

template <bool Layer>
__global__ void normForwardKernel(long long rows, long long H, double eps,
                                  const float *x, const float *gamma,
                                  const float *beta, float *y) {
  __shared__ double sh[kThreads];
  PF_ROW_LOOP(r, rows) {
    const float *xr = x + r * H;
    float *yr = y + r * H;
    RowStats st = rowStats<Layer>(xr, H, eps, sh);
    PF_ROW_ELEMS(i, H)
    yr[i] = Layer ? layerNormValue(xr[i], st.mean, st.rstd, gamma[i], beta[i])
                  : rmsNormValue(xr[i], st.rstd, gamma[i]);
  }
}

/// dx = rstd (g - mean(g) - xhat mean(g xhat)); mean(g) = 0 for rmsnorm.
template <bool Layer>
__global__ void normBwdInputKernel(long long rows, long long H, double eps,
                                   const float *x, const float *gamma,
                                   const float *dy, float *dx) {
  __shared__ double sh[kThreads];
  PF_ROW_LOOP(r, rows) {
    const float *xr = x + r * H;
    const float *dyr = dy + r * H;
    float *dxr = dx + r * H;
    RowStats st = rowStats<Layer>(xr, H, eps, sh);
    double sg = 0, sgx = 0;
    PF_ROW_ELEMS(i, H) {
      NormBwdTerm t = normBwdTerm(dyr[i], gamma[i], xr[i], st.mean, st.rstd);
      sg += double(t.g);
      sgx += normBwdGX(t);
    }
    float mg = 0.0f;
    if (Layer) // compile-time constant: uniform across the block
      mg = normBwdMean(blockSum(sg, sh), H);
    float mgx = normBwdMean(blockSum(sgx, sh), H);
    PF_ROW_ELEMS(i, H) {
      NormBwdTerm t = normBwdTerm(dyr[i], gamma[i], xr[i], st.mean, st.rstd);
      dxr[i] = normBwdDx(t, st.rstd, mg, mgx);
    }
  }
}

/// Row statistics into mean [rows] and rstd [rows].
template <bool Layer>
__global__ void normStatsKernel(long long rows, long long H, double eps,
                                const float *x, float *mean, float *rstd) {
  __shared__ double sh[kThreads];
  PF_ROW_LOOP(r, rows) {
    RowStats st = rowStats<Layer>(x + r * H, H, eps, sh);
    if (threadIdx.x == 0) {
      mean[r] = st.mean;
      rstd[r] = st.rstd;
    }
  }
}

/// One thread per column j: dgamma[j] (and dbeta[j] when given) summed over
/// the tokens in token order. __fadd_rn keeps the product out of an FMA, so
/// the sum rounds like the CPU's `dgamma[j] += dy * xhat`.
__global__ void normWeightKernel(long long rows, long long H, const float *x,
                                 const float *dy, const float *mean,
                                 const float *rstd, float *dgamma,
                                 float *dbeta) {
  PF_GRID_LOOP(j, H) {
    float g = 0.0f, b = 0.0f;
    for (long long t = 0; t < rows; ++t) {
      float d = dy[t * H + j];
      g = __fadd_rn(g, normGammaTerm(d, x[t * H + j], mean[t], rstd[t]));
      b += d;
    }
    dgamma[j] = g;
    if (dbeta)
      dbeta[j] = b;
  }
}

//===--- Elementwise ---===//

__global__ void activationForwardKernel(bool gelu, long long n, const float *x,
                                        float *y) {
  PF_GRID_LOOP(i, n)
  y[i] = gelu ? math::gelu(x[i]) : math::silu(x[i]);
}

__global__ void activationBackwardKernel(bool gelu, long long n, const float *x,
                                         const float *dy, float *dx) {
  PF_GRID_LOOP(i, n)
  dx[i] = dy[i] * (gelu ? math::geluGrad(x[i]) : math::siluGrad(x[i]));
}

__global__ void addKernel(long long n, const float *a, const float *b,
                          float *y) {
  PF_GRID_LOOP(i, n)
  y[i] = a[i] + b[i];
}

/// One thread per element of x [batch, seq, features].
__global__ void dropoutKernel(long long n, long long seq, long long features,
                              long long seqStart, uint64_t key, uint32_t thr,
                              float scale, const float *x, float *y) {
  PF_GRID_LOOP(idx, n) {
    const long long j = idx % features, r = idx / features;
    const long long i = r % seq, b = r / seq;
    uint64_t row = dropout::rowKey(key, uint64_t(b), uint64_t(seqStart + i));
    y[idx] = dropout::keep(row, uint64_t(j), thr) ? x[idx] * scale : 0.f;
  }
}

__global__ void mulKernel(long long n, const float *a, const float *b,
                          float *y) {
  PF_GRID_LOOP(i, n)
  y[i] = a[i] * b[i];
}

__global__ void accumulateKernel(long long n, float *dst, const float *src) {
  PF_GRID_LOOP(i, n)
  dst[i] += src[i];
}

__global__ void scaleKernel(long long n, float *x, float a) {
  PF_GRID_LOOP(i, n)
  x[i] *= a;
}

//===--- Embedding ---===//

/// One thread per element of y [tokens, H]; column 0 reports a bad token
/// (outside the whole vocabulary, `total` = vocab x shards). The table holds
/// rows [start, start + vocab) (one vocabulary shard; start 0 and total =
/// vocab without tensor parallelism). Positions are added when pos is not
/// null (RowKernels.h), whatever s.learnedPositions says.
__global__ void embeddingForwardKernel(long long n, long long H, long long seq,
                                       long long vocab, long long start,
                                       long long total, const float *table,
                                       const float *pos, const int32_t *tokens,
                                       float *y, int *errorWord) {
  PF_GRID_LOOP(i, n) {
    long long t = i / H, j = i - t * H;
    int tok = tokens[t];
    if (!indexInRange(tok, total)) {
      if (j == 0)
        reportError(errorWord, DeviceErrorEmbeddingToken, t, tok, total);
      continue;
    }
    y[i] = embeddingShardValue(table, pos, tok, start, vocab, t % seq, j, H);
  }
}

/// Thread (bucket, column j) adds dy[t, j] into dtable[token - start, j]
/// for the tokens t of this shard's rows [start, start + vocab) in its
/// bucket, in token order; dtable is zero beforehand.
__global__ void embeddingTableGradKernel(long long tokens, long long H,
                                         long long vocab, long long start,
                                         long long total, long long buckets,
                                         const int32_t *tok, const float *dy,
                                         float *dtable, int *errorWord) {
  PF_GRID_LOOP(i, buckets * H) {
    long long bucket = i / H, j = i - bucket * H;
    for (long long t = 0; t < tokens; ++t) {
      int v = tok[t];
      if (!indexInRange(v, total)) {
        if (i == 0)
          reportError(errorWord, DeviceErrorEmbeddingBwdToken, t, v, total);
        continue;
      }
      long long local = (long long)v - start;
      if (local >= 0 && local < vocab && local % buckets == bucket)
        dtable[local * H + j] += dy[t * H + j];
    }
  }
}

/// dpos[p, j] = sum over the batch (in batch order) of dy[b * seq + p, j].
__global__ void embeddingPosGradKernel(long long batch, long long seq,
                                       long long H, const float *dy,
                                       float *dpos) {
  PF_GRID_LOOP(i, seq * H) {
    float acc = 0.0f;
    for (long long b = 0; b < batch; ++b)
      acc += dy[b * seq * H + i];
    dpos[i] = acc;
  }
}

//===--- Cross-entropy ---===//

/// logsumexp of row [V] as KernelsLoss.cpp computes it: the max starting
/// from row[0] with `x > m ? x : m` (so a NaN row[0] propagates as on the
/// CPU), the float sum of exp(x - max), lse = max + log(sum).
__device__ float rowLse(const float *row, long long V, float *sh) {
  float m = row[0];
  PF_ROW_ELEMS(j, V)
  m = row[j] > m ? row[j] : m;
  m = blockMax(m, sh);
  float s = 0.0f;
  PF_ROW_ELEMS(j, V)
  s += math::softmaxExp(row[j], m);
  return crossEntropyLse(m, blockSum(s, sh));
}

/// rowLoss[r] = lse - logit[target] (0 for a skipped row).
__global__ void crossEntropyRowKernel(long long rows, long long V,
                                      const float *logits,
                                      const int32_t *targets, float *rowLoss,
                                      int *errorWord) {
  __shared__ float sh[kThreads];
  PF_ROW_LOOP(r, rows) {
    const float *row = logits + r * V;
    float lse = rowLse(row, V, sh);
    if (threadIdx.x == 0) {
      int tg = targets[r];
      float l = 0.0f;
      if (indexInRange(tg, V))
        l = crossEntropyRowLoss(lse, row[tg]);
      else
        reportError(errorWord, DeviceErrorCrossEntropyTarget, r, tg, V);
      rowLoss[r] = l;
    }
  }
}

/// One block: *loss = mean of rowLoss, summed in double in blockSum order.
__global__ void crossEntropyTotalKernel(long long rows, const float *rowLoss,
                                        float *loss) {
  __shared__ double sh[kThreads];
  double s = 0;
  PF_ROW_ELEMS(t, rows)
  s += double(rowLoss[t]);
  double total = blockSum(s, sh);
  if (threadIdx.x == 0)
    *loss = crossEntropyMean(total, rows);
}

/// dlogits = *dloss / rows * (softmax - onehot); a bad target skips its row.
__global__ void crossEntropyBwdKernel(long long rows, long long V,
                                      const float *logits,
                                      const int32_t *targets,
                                      const float *dloss, float *dlogits,
                                      int *errorWord) {
  __shared__ float sh[kThreads];
  const float scale = crossEntropyScale(*dloss, rows);
  PF_ROW_LOOP(r, rows) {
    const float *row = logits + r * V;
    float lse = rowLse(row, V, sh); // before any branch: all threads reduce
    int tg = targets[r];
    if (indexInRange(tg, V)) {
      float *d = dlogits + r * V;
      PF_ROW_ELEMS(j, V)
      d[j] = crossEntropyGrad(row[j], lse, scale, j == tg);
    } else if (threadIdx.x == 0) {
      reportError(errorWord, DeviceErrorCrossEntropyBwdTarget, r, tg, V);
    }
  }
}

//===--- AdamW ---===//

__global__ void adamwKernel(AdamWCoeffs c, long long n, float *theta, float *m,
                            float *v, const float *grad, bool undo) {
  PF_GRID_LOOP(i, n) {
    float th = theta[i], mi = m[i], vi = v[i];
    if (undo)
      adamwUndo(c, grad[i], th, mi, vi);
    else
      adamwUpdate(c, grad[i], th, mi, vi);
    theta[i] = th;
    m[i] = mi;
    v[i] = vi;
  }
}

/// One double partial sum of squares per block (grid-stride, then the
/// block's fixed-order reduction).
__global__ void sumSquaresKernel(long long n, const float *x, double *partial) {
  __shared__ double sh[kThreads];
  double q = 0;
  // Launched with kThreads threads per block (sh and blockSum assume it).
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < n;
       i += (long long)gridDim.x * kThreads)
    q += normSquare(x[i]);
  double t = blockSum(q, sh);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = t;
}

#undef PF_ROW_LOOP
#undef PF_ROW_ELEMS

Status zeroFloats(GemmCtx &ctx, float *p, long long n, const char *what) {
  if (!p || n <= 0)
    return Status::ok();
  return cudaStatus(
      cudaMemsetAsync(p, 0, size_t(n) * sizeof(float), ctx.stream), what);
}

/// Stream-ordered float scratch; freed with freeScratch on the same stream.
Status allocScratch(GemmCtx &ctx, long long n, float **p, const char *what) {
  return cudaStatus(cudaMallocAsync(reinterpret_cast<void **>(p),
                                    size_t(n) * sizeof(float), ctx.stream),
                    what);
}

/// Frees p after `st` (the work that used it); returns the first error.
Status freeScratch(GemmCtx &ctx, float *p, Status st, const char *what) {
  Status fr = cudaStatus(cudaFreeAsync(p, ctx.stream), what);
  return st ? fr : st;
}

} // namespace

//===--- Norms ---===//

Status layerNormForward(GemmCtx &ctx, const cpu::NormShape &s, const float *x,
                        const float *gamma, const float *beta, float *y) {
  if (s.tokens <= 0 || s.hidden <= 0)
    return Status::ok();
  normForwardKernel<true><<<rowBlocks(s.tokens), kThreads, 0, ctx.stream>>>(
      s.tokens, s.hidden, s.eps, x, gamma, beta, y);
  return launchStatus("layerNormForward");
}

Status rmsNormForward(GemmCtx &ctx, const cpu::NormShape &s, const float *x,
                      const float *gamma, float *y) {
  if (s.tokens <= 0 || s.hidden <= 0)
    return Status::ok();
  normForwardKernel<false><<<rowBlocks(s.tokens), kThreads, 0, ctx.stream>>>(
      s.tokens, s.hidden, s.eps, x, gamma, nullptr, y);
  return launchStatus("rmsNormForward");
}

Status normBackwardInput(GemmCtx &ctx, const cpu::NormShape &s, bool layer,
                         const float *x, const float *gamma, const float *dy,
                         float *dx) {
  if (s.tokens <= 0 || s.hidden <= 0)
    return Status::ok();
  if (layer)
    normBwdInputKernel<true><<<rowBlocks(s.tokens), kThreads, 0, ctx.stream>>>(
        s.tokens, s.hidden, s.eps, x, gamma, dy, dx);
  else
    normBwdInputKernel<false><<<rowBlocks(s.tokens), kThreads, 0, ctx.stream>>>(
        s.tokens, s.hidden, s.eps, x, gamma, dy, dx);
  return launchStatus("normBackwardInput");
}

Status normBackwardWeight(GemmCtx &ctx, const cpu::NormShape &s, bool layer,
                          const float *x, const float *dy, float *dgamma,
                          float *dbeta) {
  if (s.hidden <= 0)
    return Status::ok();
  if (!layer)
    dbeta = nullptr;
  if (s.tokens <= 0) { // no tokens: the overwritten gradients are zero
    if (Status st = zeroFloats(ctx, dgamma, s.hidden, "normBackwardWeight");
        !st)
      return st;
    return zeroFloats(ctx, dbeta, s.hidden, "normBackwardWeight");
  }
  float *stats = nullptr; // mean [tokens], rstd [tokens]
  if (Status st = allocScratch(ctx, 2 * s.tokens, &stats,
                               "normBackwardWeight: cudaMallocAsync");
      !st)
    return st;
  float *mean = stats, *rstd = stats + s.tokens;
  if (layer)
    normStatsKernel<true><<<rowBlocks(s.tokens), kThreads, 0, ctx.stream>>>(
        s.tokens, s.hidden, s.eps, x, mean, rstd);
  else
    normStatsKernel<false><<<rowBlocks(s.tokens), kThreads, 0, ctx.stream>>>(
        s.tokens, s.hidden, s.eps, x, mean, rstd);
  Status st = launchStatus("normBackwardWeight stats");
  if (st) {
    normWeightKernel<<<blocksFor(s.hidden), kThreads, 0, ctx.stream>>>(
        s.tokens, s.hidden, x, dy, mean, rstd, dgamma, dbeta);
    st = launchStatus("normBackwardWeight");
  }
  return freeScratch(ctx, stats, std::move(st),
                     "normBackwardWeight: cudaFreeAsync");
}

//===--- Elementwise ---===//

Status activationForward(GemmCtx &ctx, cpu::Activation act, long long n,
                         const float *x, float *y) {
  if (n <= 0)
    return Status::ok();
  activationForwardKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(
      act == cpu::Activation::Gelu, n, x, y);
  return launchStatus("activationForward");
}

Status activationBackward(GemmCtx &ctx, cpu::Activation act, long long n,
                          const float *x, const float *dy, float *dx) {
  if (n <= 0)
    return Status::ok();
  activationBackwardKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(
      act == cpu::Activation::Gelu, n, x, dy, dx);
  return launchStatus("activationBackward");
}

Status addForward(GemmCtx &ctx, long long n, const float *a, const float *b,
                  float *y) {
  if (n <= 0)
    return Status::ok();
  addKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(n, a, b, y);
  return launchStatus("addForward");
}

Status dropoutForward(GemmCtx &ctx, const cpu::DropoutShape &s, const float *x,
                      float *y) {
  const long long n = s.batch * s.seq * s.features;
  if (n <= 0)
    return Status::ok();
  dropoutKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(
      n, s.seq, s.features, s.seqStart, s.key, dropout::threshold(s.rate),
      float(1.0 / (1.0 - s.rate)), x, y);
  return launchStatus("dropoutForward");
}

Status mulForward(GemmCtx &ctx, long long n, const float *a, const float *b,
                  float *y) {
  if (n <= 0)
    return Status::ok();
  mulKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(n, a, b, y);
  return launchStatus("mulForward");
}

Status accumulate(GemmCtx &ctx, long long n, float *dst, const float *src) {
  if (n <= 0)
    return Status::ok();
  accumulateKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(n, dst, src);
  return launchStatus("accumulate");
}

Status scale(GemmCtx &ctx, long long n, float *x, float a) {
  if (n <= 0)
    return Status::ok();
  scaleKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(n, x, a);
  return launchStatus("scale");
}

//===--- Embedding ---===//

Status embeddingForward(GemmCtx &ctx, const cpu::EmbeddingShape &s,
                        const float *table, const float *pos,
                        const int32_t *tokens, float *y) {
  const long long n = (long long)s.batch * s.seq * s.hidden;
  if (n <= 0)
    return Status::ok();
  embeddingForwardKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(
      n, s.hidden, s.seq, s.vocab, s.vocabStart, s.vocab * s.vocabShards, table,
      pos, tokens, y, ctx.errorWord);
  return launchStatus("embeddingForward");
}

Status embeddingBackwardWeight(GemmCtx &ctx, const cpu::EmbeddingShape &s,
                               const int32_t *tokens, const float *dy,
                               float *dtable, float *dpos) {
  if (s.hidden <= 0)
    return Status::ok();
  const long long H = s.hidden, tokenCount = (long long)s.batch * s.seq;
  if (Status st =
          zeroFloats(ctx, dtable, (long long)s.vocab * H, "embedding dtable");
      !st)
    return st;
  if (tokenCount <= 0) // no tokens: dpos is zero too
    return zeroFloats(ctx, dpos, (long long)s.seq * H, "embedding dpos");
  // Launched for vocab = 0 too: every token is then reported, none written.
  long long buckets =
      std::max<long long>(1, std::min<long long>(kEmbedBuckets, s.vocab));
  embeddingTableGradKernel<<<blocksFor(buckets * H), kThreads, 0, ctx.stream>>>(
      tokenCount, H, s.vocab, s.vocabStart, s.vocab * s.vocabShards, buckets,
      tokens, dy, dtable, ctx.errorWord);
  if (Status st = launchStatus("embeddingBackwardWeight dtable"); !st)
    return st;
  if (!dpos)
    return Status::ok();
  embeddingPosGradKernel<<<blocksFor((long long)s.seq * H), kThreads, 0,
                           ctx.stream>>>(s.batch, s.seq, H, dy, dpos);
  return launchStatus("embeddingBackwardWeight dpos");
}

//===--- Cross-entropy ---===//

Status crossEntropyForward(GemmCtx &ctx, const cpu::CrossEntropyShape &s,
                           const float *logits, const int32_t *targets,
                           float *loss) {
  if (s.tokens <= 0 || s.vocab <= 0) // the CPU's loss over no tokens: 0
    return zeroFloats(ctx, loss, 1, "crossEntropyForward");
  float *rowLoss = nullptr;
  if (Status st = allocScratch(ctx, s.tokens, &rowLoss,
                               "crossEntropyForward: cudaMallocAsync");
      !st)
    return st;
  crossEntropyRowKernel<<<rowBlocks(s.tokens), kThreads, 0, ctx.stream>>>(
      s.tokens, s.vocab, logits, targets, rowLoss, ctx.errorWord);
  Status st = launchStatus("crossEntropyForward rows");
  if (st) {
    crossEntropyTotalKernel<<<1, kThreads, 0, ctx.stream>>>(s.tokens, rowLoss,
                                                            loss);
    st = launchStatus("crossEntropyForward total");
  }
  return freeScratch(ctx, rowLoss, std::move(st),
                     "crossEntropyForward: cudaFreeAsync");
}

Status crossEntropyBackward(GemmCtx &ctx, const cpu::CrossEntropyShape &s,
                            const float *logits, const int32_t *targets,
                            const float *dloss, float *dlogits) {
  if (s.tokens <= 0 || s.vocab <= 0)
    return Status::ok();
  crossEntropyBwdKernel<<<rowBlocks(s.tokens), kThreads, 0, ctx.stream>>>(
      s.tokens, s.vocab, logits, targets, dloss, dlogits, ctx.errorWord);
  return launchStatus("crossEntropyBackward");
}

//===--- AdamW ---===//

Status adamwStep(GemmCtx &ctx, const AdamWCoeffs &c, long long n, float *theta,
                 float *m, float *v, const float *grad, bool undo) {
  if (n <= 0)
    return Status::ok();
  adamwKernel<<<blocksFor(n), kThreads, 0, ctx.stream>>>(c, n, theta, m, v,
                                                         grad, undo);
  return launchStatus("adamwStep");
}

Status sumSquares(GemmCtx &ctx, long long n, const float *x, double *out) {
  *out = 0;
  if (n <= 0)
    return Status::ok();
  unsigned blocks = blocksFor(n) < 1024u ? blocksFor(n) : 1024u;
  double *partial = nullptr;
  if (Status s = cudaStatus(cudaMallocAsync((void **)&partial,
                                            blocks * sizeof(double), ctx.stream),
                            "cudaMallocAsync (sum of squares)");
      !s)
    return s;
  sumSquaresKernel<<<blocks, kThreads, 0, ctx.stream>>>(n, x, partial);
  Status st = launchStatus("sumSquares");
  std::vector<double> host(blocks, 0.0);
  if (st)
    st = cudaStatus(cudaMemcpyAsync(host.data(), partial,
                                    blocks * sizeof(double),
                                    cudaMemcpyDeviceToHost, ctx.stream),
                    "cudaMemcpyAsync (sum of squares)");
  Status fr = cudaStatus(cudaFreeAsync(partial, ctx.stream),
                         "cudaFreeAsync (sum of squares)");
  if (st)
    st = cudaStatus(cudaStreamSynchronize(ctx.stream),
                    "cudaStreamSynchronize (sum of squares)");
  if (!st)
    return st;
  if (!fr)
    return fr;
  for (double p : host) // block order: the same sum on every run
    *out += p;
  return Status::ok();
}

} // namespace pipeforge::rt::cuda
