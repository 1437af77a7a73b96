//===- GemmCtx.cu - cuBLAS GEMMs and the linear layer's bias kernels ------===//
//
// gemm(): row-major products on column-major cuBLAS. A row-major [r, c]
// matrix with leading dimension ld is the column-major [c, r] matrix with
// the same ld, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T:
// cuBLAS gets (B, A) swapped with the same transpose flags and (n, m).
//
// fp32: cublasSgemm(StridedBatched) with CUBLAS_DEFAULT_MATH (no TF32).
// bf16: each input span is rounded to bf16 (round-to-nearest-even) into the
// context's scratch, then cublasGemmStridedBatchedEx with
// CUBLAS_COMPUTE_32F accumulates in fp32 into the fp32 C.
//
//===----------------------------------------------------------------------===//

#include "cuda/GemmCtx.h"
#include "cuda/Launch.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <string>

namespace pipeforge::rt::cuda {

namespace {

__global__ void toBf16Kernel(long long n, const float *src,
                             __nv_bfloat16 *dst) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

/// y[r, c] = bias[c].
__global__ void biasRowsKernel(long long rows, long long cols,
                               const float *bias, float *y) {
  long long n = rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = bias[i % cols];
}

/// out[c] = sum over r of x[r, c], rows in order (the CPU's order).
__global__ void columnSumsKernel(long long rows, long long cols, const float *x,
                                 float *out) {
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols;
       c += (long long)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (long long r = 0; r < rows; ++r)
      s += x[r * cols + c];
    out[c] = s;
  }
}

/// Elements one operand of a (batched) GEMM spans: the last matrix's end.
long long operandSpan(long long rows, long long cols, long long ld, int batch,
                      long long stride) {
  if (rows == 0 || cols == 0)
    return 0;
  return (long long)(batch - 1) * stride + (rows - 1) * ld + cols;
}

bool fitsInt(long long v) { return v >= 0 && v <= INT_MAX; }

} // namespace

Status cudaStatus(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return Status::ok();
  return Status::error(std::string(what) + ": " + cudaGetErrorString(e));
}

Status cublasStatus(cublasStatus_t e, const char *what) {
  if (e == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  return Status::error(std::string(what) + ": " + cublasGetStatusString(e));
}

Status launchStatus(const char *kernel) {
  return cudaStatus(cudaGetLastError(), kernel);
}

Status gemm(GemmCtx &ctx, bool transA, bool transB, int64_t m, int64_t n,
            int64_t k, float alpha, const float *A, int64_t lda, const float *B,
            int64_t ldb, float beta, float *C, int64_t ldc, int batch,
            int64_t strideA, int64_t strideB, int64_t strideC) {
  if (m == 0 || n == 0 || batch == 0)
    return Status::ok();
  if (!fitsInt(m) || !fitsInt(n) || !fitsInt(k) || !fitsInt(lda) ||
      !fitsInt(ldb) || !fitsInt(ldc) || batch < 0)
    return Status::error(
        "gemm: a dimension exceeds cuBLAS's int range (m=" + std::to_string(m) +
        " n=" + std::to_string(n) + " k=" + std::to_string(k) + ")");
  if (k == 0) {
    // An empty sum: C = beta C. cuBLAS would reject the leading dimensions
    // (lda = k = 0) and, in bf16, the empty scratch.
    if (beta == 1.0f)
      return Status::ok();
    if (beta != 0.0f)
      return Status::error("gemm: k = 0 with beta " + std::to_string(beta));
    for (int b = 0; b < batch; ++b)
      if (Status s = cudaStatus(cudaMemset2DAsync(C + b * strideC,
                                                  size_t(ldc) * sizeof(float),
                                                  0, size_t(n) * sizeof(float),
                                                  size_t(m), ctx.stream),
                                "cudaMemset2DAsync (gemm, k = 0)");
          !s)
        return s;
    return Status::ok();
  }
  cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (ctx.precision == GemmPrecision::FP32) {
    if (batch == 1)
      return cublasStatus(cublasSgemm(ctx.blas, opB, opA, int(n), int(m),
                                      int(k), &alpha, B, int(ldb), A, int(lda),
                                      &beta, C, int(ldc)),
                          "cublasSgemm");
    return cublasStatus(
        cublasSgemmStridedBatched(ctx.blas, opB, opA, int(n), int(m), int(k),
                                  &alpha, B, int(ldb), strideB, A, int(lda),
                                  strideA, &beta, C, int(ldc), strideC, batch),
        "cublasSgemmStridedBatched");
  }

  // bf16: round both input spans into the scratch (A first, then B).
  long long spanA =
      operandSpan(transA ? k : m, transA ? m : k, lda, batch, strideA);
  long long spanB =
      operandSpan(transB ? n : k, transB ? k : n, ldb, batch, strideB);
  long long offB = (spanA + 127) / 128 * 128; // keep B 256-byte aligned
  size_t need = size_t(offB + spanB) * sizeof(__nv_bfloat16);
  if (Status s = growScratch(ctx.bf16Scratch, ctx.bf16ScratchBytes, need,
                             ctx.stream, "bf16 scratch");
      !s)
    return s;
  auto *a16 = static_cast<__nv_bfloat16 *>(ctx.bf16Scratch);
  __nv_bfloat16 *b16 = a16 + offB;
  if (spanA > 0)
    toBf16Kernel<<<blocksFor(spanA), kThreads, 0, ctx.stream>>>(spanA, A, a16);
  if (spanB > 0)
    toBf16Kernel<<<blocksFor(spanB), kThreads, 0, ctx.stream>>>(spanB, B, b16);
  if (Status s = launchStatus("gemm bf16 rounding"); !s)
    return s;
  return cublasStatus(
      cublasGemmStridedBatchedEx(ctx.blas, opB, opA, int(n), int(m), int(k),
                                 &alpha, b16, CUDA_R_16BF, int(ldb), strideB,
                                 a16, CUDA_R_16BF, int(lda), strideA, &beta, C,
                                 CUDA_R_32F, int(ldc), strideC, batch,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx (bf16)");
}

Status growScratch(void *&buf, size_t &bytes, size_t need, cudaStream_t s,
                   const char *what) {
  if (need <= bytes)
    return Status::ok();
  if (buf)
    if (Status st =
            cudaStatus(cudaFreeAsync(buf, s),
                       (std::string("cudaFreeAsync (") + what + ")").c_str());
        !st)
      return st;
  buf = nullptr;
  bytes = 0;
  size_t n = std::max(need, size_t(1) << 20);
  if (Status st =
          cudaStatus(cudaMallocAsync(&buf, n, s),
                     (std::string("cudaMallocAsync (") + what + ")").c_str());
      !st)
    return st;
  bytes = n;
  return Status::ok();
}

Status biasRows(GemmCtx &ctx, int64_t rows, int64_t cols, const float *bias,
                float *y) {
  if (rows == 0 || cols == 0)
    return Status::ok();
  biasRowsKernel<<<blocksFor(rows * cols), kThreads, 0, ctx.stream>>>(
      rows, cols, bias, y);
  return launchStatus("linear bias");
}

Status columnSums(GemmCtx &ctx, int64_t rows, int64_t cols, const float *x,
                  float *out) {
  if (cols == 0)
    return Status::ok();
  columnSumsKernel<<<blocksFor(cols), kThreads, 0, ctx.stream>>>(rows, cols, x,
                                                                 out);
  return launchStatus("linear bias gradient");
}

} // namespace pipeforge::rt::cuda
