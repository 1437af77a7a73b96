//===- GemmCtx.h - cuBLAS GEMMs for the CUDA kernels ----------*- C++ -*-===//
//
// What every CUDA kernel family of the backend needs to launch work: the
// compute stream, the cuBLAS handle bound to it, the GEMM precision, a bf16
// staging buffer and the device-side error word. gemm() is the one
// row-major GEMM entry point (fp32 or bf16 inputs, fp32 accumulation and
// output) used by linear, attention and MoE alike.
//
// The device error word (DeviceError.h) is where a kernel that meets an
// invalid index reports it; the backend's takeAsyncError() reads, reports
// and clears it.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_GEMMCTX_H
#define PIPEFORGE_RUNTIME_CUDA_GEMMCTX_H

#include "cuda/DeviceError.h"
#include "pipeforge/rt/CudaBackend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pipeforge {
namespace rt {
namespace cuda {

struct GemmCtx {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr; ///< bound to `stream`
  GemmPrecision precision = GemmPrecision::FP32;
  /// bf16 copies of the GEMM inputs. gemm() grows it when too small
  /// (stream-ordered cudaFreeAsync + cudaMallocAsync, updating both fields);
  /// the owner of the context frees it.
  void *bf16Scratch = nullptr;
  size_t bf16ScratchBytes = 0;
  int *errorWord = nullptr; ///< device int[kDeviceErrorInts], DeviceError.h
};

/// A failed CUDA runtime call as a Status: "<what>: <cudaGetErrorString>";
/// ok for cudaSuccess.
Status cudaStatus(cudaError_t e, const char *what);
/// The same for a cuBLAS call.
Status cublasStatus(cublasStatus_t e, const char *what);
/// cudaGetLastError() after a kernel launch, as a Status naming the kernel.
Status launchStatus(const char *kernel);

/// Row-major C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, where
/// op(A) = A ([m,k], leading dimension lda) or, with transA, A^T of a stored
/// [k,m] matrix (ditto B). Batched when batch > 1: matrix i starts at
/// A + i*strideA, B + i*strideB, C + i*strideC (a stride may be 0). fp32:
/// cublasSgemm(StridedBatched) in true fp32 (no TF32). BF16: A and B are
/// rounded to bf16 in ctx.bf16Scratch and multiplied by cublasGemmEx with
/// fp32 accumulation and an fp32 C. Queued on ctx.stream.
Status gemm(GemmCtx &ctx, bool transA, bool transB, int64_t m, int64_t n,
            int64_t k, float alpha, const float *A, int64_t lda, const float *B,
            int64_t ldb, float beta, float *C, int64_t ldc, int batch = 1,
            int64_t strideA = 0, int64_t strideB = 0, int64_t strideC = 0);

/// Grows a stream-ordered scratch buffer to at least `need` bytes (at least
/// 1 MiB): the old one is freed on `s`, so work queued before still reads
/// it. `buf` / `bytes` describe the buffer; the owner frees it.
Status growScratch(void *&buf, size_t &bytes, size_t need, cudaStream_t s,
                   const char *what);

/// The GEMM of the kernel families' plan executors (AttentionPlan.h,
/// MoEPlan.h): gemm() on `ctx`.
struct GemmExec {
  GemmCtx &ctx;
  Status gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
              float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc, int batch,
              int64_t strideA, int64_t strideB, int64_t strideC) {
    return cuda::gemm(ctx, transA, transB, m, n, k, alpha, A, lda, B, ldb, beta,
                      C, ldc, batch, strideA, strideB, strideC);
  }
};

/// y[r, :] = bias for every row r of y [rows, cols] (the linear layer's
/// bias, written before the GEMM accumulates with beta = 1).
Status biasRows(GemmCtx &ctx, int64_t rows, int64_t cols, const float *bias,
                float *y);
/// out[c] = sum over rows of x[r, c] in row order, overwritten (the bias
/// gradient; fp32 in both precisions).
Status columnSums(GemmCtx &ctx, int64_t rows, int64_t cols, const float *x,
                  float *out);

} // namespace cuda
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CUDA_GEMMCTX_H
