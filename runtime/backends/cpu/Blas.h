//===- Blas.h - Precision-overloaded GEMM over OpenBLAS ---------*- C++ -*-===//
//
// gemm() is cblas_sgemm for float and cblas_dgemm for double (row-major), so
// the kernels can be templates over the scalar type. Internal to runtime/backends/cpu.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CPU_BLAS_H
#define PIPEFORGE_RUNTIME_CPU_BLAS_H

#include <cblas.h>
#include <cstdint>

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

inline void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M == 0 || N == 0)
    return;
  if (K == 0)
    return gemmEmpty(M, N, beta, C, ldc);
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha,
              A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

inline void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 double alpha, const double *A, int64_t lda, const double *B,
                 int64_t ldb, double beta, double *C, int64_t ldc) {
  if (M == 0 || N == 0)
    return;
  if (K == 0)
    return gemmEmpty(M, N, beta, C, ldc);
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha,
              A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

} // namespace detail
} // namespace cpu
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CPU_BLAS_H
