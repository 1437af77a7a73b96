//===- cuda_gemm.cpp - GEMM TFLOP/s of the CUDA backend -------------------===//
//
// Times cuda::gemm() (the one GEMM entry point of the CUDA backend: cuBLAS
// fp32, or bf16 inputs with fp32 accumulation) on square and
// transformer-shaped products and prints a table of TFLOP/s. Without a GPU
// it says so and exits 0.
//
//   cuda_gemm [--iters N]
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/CudaBackend.h"

#include "cuda/GemmCtx.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace pipeforge::rt;

namespace {

struct Shape {
  const char *what;
  int64_t m, n, k;
};

int fail(const Status &s) {
  std::fprintf(stderr, "cuda_gemm: %s\n", s.message().c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  int iters = 20;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = std::max(1, std::atoi(argv[++i]));
  std::string why;
  if (cudaDeviceCount(&why) == 0) {
    std::printf("cuda_gemm: no CUDA device (%s): nothing to measure\n",
                why.c_str());
    return 0;
  }
  const Shape shapes[] = {
      {"square 2048", 2048, 2048, 2048},
      {"square 4096", 4096, 4096, 4096},
      {"square 8192", 8192, 8192, 8192},
      {"mlp up (8k tok, 4096->16384)", 8192, 16384, 4096},
      {"mlp down (8k tok, 16384->4096)", 8192, 4096, 16384},
      {"gpt-tiny linear (256 tok, 64->256)", 256, 256, 64},
  };
  std::printf("%-36s %10s %10s\n", "GEMM (m x n x k)", "fp32", "bf16");
  for (const Shape &s : shapes) {
    double tflops[2] = {0, 0};
    for (int pi = 0; pi < 2; ++pi) {
      CudaBackendOptions o;
      o.precision = pi ? GemmPrecision::BF16 : GemmPrecision::FP32;
      auto be = createCudaBackend(o);
      if (!be)
        return fail(be.status());
      cuda::GemmCtx ctx;
      ctx.stream = static_cast<cudaStream_t>((*be)->computeStream());
      ctx.precision = o.precision;
      if (cublasCreate(&ctx.blas) != CUBLAS_STATUS_SUCCESS ||
          cublasSetStream(ctx.blas, ctx.stream) != CUBLAS_STATUS_SUCCESS)
        return fail(Status::error("cublasCreate failed"));
      auto *A = static_cast<float *>((*be)->alloc(s.m * s.k * 4));
      auto *B = static_cast<float *>((*be)->alloc(s.n * s.k * 4));
      auto *C = static_cast<float *>((*be)->alloc(s.m * s.n * 4));
      if (!A || !B || !C)
        return fail(Status::error("out of device memory"));
      // y = x W^T, the linear layer's product.
      auto once = [&] {
        return cuda::gemm(ctx, false, true, s.m, s.n, s.k, 1.0f, A, s.k, B, s.k,
                          0.0f, C, s.n);
      };
      if (Status st = once(); !st) // warm-up (and bf16 scratch)
        return fail(st);
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaEventRecord(e0, ctx.stream);
      for (int i = 0; i < iters; ++i)
        if (Status st = once(); !st)
          return fail(st);
      cudaEventRecord(e1, ctx.stream);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      tflops[pi] = 2.0 * s.m * s.n * s.k * iters / (ms * 1e-3) / 1e12;
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      if (ctx.bf16Scratch)
        cudaFreeAsync(ctx.bf16Scratch, ctx.stream);
      cudaStreamSynchronize(ctx.stream);
      cublasDestroy(ctx.blas);
      (*be)->free(A);
      (*be)->free(B);
      (*be)->free(C);
    }
    char dims[64];
    std::snprintf(dims, sizeof dims, " (%lldx%lldx%lld)", (long long)s.m,
                  (long long)s.n, (long long)s.k);
    std::printf("%-36s %10.1f %10.1f  TFLOP/s%s\n", s.what, tflops[0],
                tflops[1], dims);
  }
  std::printf("(bf16 includes rounding both fp32 inputs to bf16 per call)\n");
  return 0;
}
