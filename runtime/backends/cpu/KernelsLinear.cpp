//===- KernelsLinear.cpp - Linear layer F/B/W -----------------------------===//

#include "Blas.h"
#include "Kernels.h"

#include <algorithm>

namespace pipeforge {
namespace rt {
namespace cpu {

using detail::gemm;

template <typename T>
void linearF(const LinearShape &s, const LinearParams<T> &p, const T *x, T *y,
             LinearSaved<T> &saved) {
  // y [tokens, out] = x [tokens, in] * W^T (+ bias). With a bias, y starts
  // as the bias rows and the GEMM adds to it (beta = 1): no clearing of y
  // inside the BLAS and no second pass over y for the bias.
  if (s.hasBias)
    for (Index t = 0; t < s.tokens; ++t)
      std::copy(p.bias, p.bias + s.out, y + t * s.out);
  gemm(false, true, s.tokens, s.out, s.in, T(1), x, s.in, p.weight, s.in,
       s.hasBias ? T(1) : T(0), y, s.out);
  saved.x = x;
  saved.weight = p.weight;
}

template <typename T>
void linearB(const LinearShape &s, const LinearSaved<T> &saved, const T *dy,
             T *dx) {
  // dx [tokens, in] = dy [tokens, out] * W [out, in]
  gemm(false, false, s.tokens, s.in, s.out, T(1), dy, s.out, saved.weight, s.in,
       T(0), dx, s.in);
}

template <typename T>
PF_CPU_CLONES void linearW(const LinearShape &s, const LinearSaved<T> &saved, const T *dy,
             const LinearGrads<T> &g) {
  // dW [out, in] += dy^T [out, tokens] * x [tokens, in] (= when
  // overwriteWeight: beta 0, no clearing pass over dW)
  gemm(true, false, s.out, s.in, s.tokens, T(1), dy, s.out, saved.x, s.in,
       g.overwriteWeight ? T(0) : T(1), g.dweight, s.in);
  if (s.hasBias) {
    // A local pointer: a store through g.dbias may not alias g itself (else
    // every iteration reloads it and the loop does not vectorise).
    T *__restrict db = g.dbias;
    for (Index t = 0; t < s.tokens; ++t) {
      const T *__restrict dyr = dy + t * s.out;
      for (Index o = 0; o < s.out; ++o)
        db[o] += dyr[o];
    }
  }
}

template <typename T>
void linearBW(const LinearShape &s, const LinearSaved<T> &saved, const T *dy,
              T *dx, const LinearGrads<T> &g) {
  linearB(s, saved, dy, dx);
  linearW(s, saved, dy, g);
}

#define PF_INSTANTIATE(T)                                                      \
  template void linearF<T>(const LinearShape &, const LinearParams<T> &,       \
                           const T *, T *, LinearSaved<T> &);                  \
  template void linearB<T>(const LinearShape &, const LinearSaved<T> &,        \
                           const T *, T *);                                    \
  template void linearW<T>(const LinearShape &, const LinearSaved<T> &,        \
                           const T *, const LinearGrads<T> &);                 \
  template void linearBW<T>(const LinearShape &, const LinearSaved<T> &,       \
                            const T *, T *, const LinearGrads<T> &);
PF_INSTANTIATE(float)
PF_INSTANTIATE(double)
#undef PF_INSTANTIATE

} // namespace cpu
} // namespace rt
} // namespace pipeforge
