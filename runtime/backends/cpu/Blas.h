//===- Blas.h - Precision-overloaded GEMM over oneDNN / OpenBLAS -*- C++ -*-===//
//
// gemm() is row-major C = alpha op(A) op(B) + beta C for float and double,
// so the kernels can be templates over the scalar type. float goes to
// oneDNN's JIT sgemm where the build found libdnnl (PIPEFORGE_HAVE_ONEDNN:
// 10-30% faster than OpenBLAS 0.3.21 at a transformer's shapes on AVX-512),
// else to cblas_sgemm; double always to cblas_dgemm. One library serves
// every float product of a build, so pipelined and single-process runs add
// up the same. Internal to runtime/backends/cpu.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CPU_BLAS_H
#define PIPEFORGE_RUNTIME_CPU_BLAS_H

#include <atomic>
#include <cblas.h>
#include <chrono>
#include <cstdint>

#if PIPEFORGE_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

namespace pipeforge {
namespace rt {
namespace cpu {
namespace detail {

/// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, all row-major.
/// Empty products are handled here (OpenBLAS rejects zero leading dims).
template <typename T>
inline void gemmEmpty(int64_t M, int64_t N, T beta, T *C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

/// The GEMM threads of each rank (1 unless PIPEFORGE_BLAS_THREADS says
/// otherwise; CpuBackend sets it, for OpenBLAS and for oneDNN).
inline std::atomic<int> &gemmThreads() {
  static std::atomic<int> n{1};
  return n;
}

/// The time and FLOPs of this thread's GEMMs (each rank computes on one
/// thread) while `on` (Backend::timeGemms: pipeforge-run --trace, the step
/// events' gemm_us and gemm_gflop). Two clock reads per product when on.
struct GemmClock {
  bool on = false;
  double seconds = 0, flops = 0;
};
inline GemmClock &gemmClock() {
  thread_local GemmClock c;
  return c;
}
/// C = op(A) op(B) [M, N] by `product` (one library call), after the cases
/// the libraries reject (an empty C; K = 0: C = beta C), timed when the
/// clock is on.
template <typename T, class Fn>
inline void gemmChecked(int64_t M, int64_t N, int64_t K, T beta, T *C,
                        int64_t ldc, Fn product) {
  if (M == 0 || N == 0)
    return;
  if (K == 0)
    return gemmEmpty(M, N, beta, C, ldc);
  GemmClock &c = gemmClock();
  if (!c.on)
    return product();
  auto t0 = std::chrono::steady_clock::now();
  product();
  c.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             t0)
                   .count();
  c.flops += 2.0 * double(M) * double(N) * double(K);
}

inline void gemmF32(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *A, int64_t lda, const float *B,
                    int64_t ldb, float beta, float *C, int64_t ldc) {
#if PIPEFORGE_HAVE_ONEDNN
  // oneDNN runs on OpenMP, whose thread count is per calling thread (each
  // --local-ranks rank is one): set it once on each.
  thread_local int threads = -1;
  if (threads != gemmThreads().load(std::memory_order_relaxed)) {
    threads = gemmThreads().load(std::memory_order_relaxed);
    omp_set_num_threads(threads);
  }
  if (dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A,
                 lda, B, ldb, beta, C, ldc) == dnnl_success)
    return;
  // It fails on invalid arguments (cblas reports those too) or when out of
  // memory for its packing buffers: OpenBLAS then computes this product
  // (the same value, possibly other rounding).
#endif
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha,
              A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

inline void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc) {
  gemmChecked(M, N, K, beta, C, ldc, [&] {
    gemmF32(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  });
}

inline void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 double alpha, const double *A, int64_t lda, const double *B,
                 int64_t ldb, double beta, double *C, int64_t ldc) {
  gemmChecked(M, N, K, beta, C, ldc, [&] {
    cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
  });
}

} // namespace detail
} // namespace cpu
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CPU_BLAS_H
