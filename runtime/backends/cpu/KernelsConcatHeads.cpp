//===- KernelsConcatHeads.cpp - Per-head concatenation F/B ----------------===//
//
// nn.concat_heads: a copy per (row, head) of lhs_h then rhs_h (or the one
// shared rhs head). B copies the gradient back and, for a shared rhs head,
// sums its slices over the heads in head order (deterministic, so every
// schedule and rank layout gives the same bits).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

namespace pipeforge {
namespace rt {
namespace cpu {

bool isValid(const ConcatHeadsShape &s) {
  return s.rows >= 0 && s.heads > 0 && s.lhsDim > 0 && s.rhsDim > 0;
}

template <typename T>
void concatHeadsF(const ConcatHeadsShape &s, const T *lhs, const T *rhs,
                  T *out) {
  const Index A = s.lhsDim, B = s.rhsDim, W = A + B, H = s.heads;
  const Index rhsRow = s.rhsHeads() * B;
  for (Index r = 0; r < s.rows; ++r)
    for (Index h = 0; h < H; ++h) {
      T *o = out + (r * H + h) * W;
      const T *a = lhs + (r * H + h) * A;
      const T *b = rhs + r * rhsRow + (s.broadcast ? 0 : h * B);
      for (Index j = 0; j < A; ++j)
        o[j] = a[j];
      for (Index j = 0; j < B; ++j)
        o[A + j] = b[j];
    }
}

template <typename T>
void concatHeadsB(const ConcatHeadsShape &s, const T *dout, T *dlhs, T *drhs) {
  const Index A = s.lhsDim, B = s.rhsDim, W = A + B, H = s.heads;
  const Index rhsRow = s.rhsHeads() * B;
  for (Index r = 0; r < s.rows; ++r) {
    if (s.broadcast)
      for (Index j = 0; j < B; ++j)
        drhs[r * B + j] = T(0);
    for (Index h = 0; h < H; ++h) {
      const T *d = dout + (r * H + h) * W;
      T *a = dlhs + (r * H + h) * A;
      for (Index j = 0; j < A; ++j)
        a[j] = d[j];
      T *b = drhs + r * rhsRow + (s.broadcast ? 0 : h * B);
      if (s.broadcast)
        for (Index j = 0; j < B; ++j)
          b[j] += d[A + j];
      else
        for (Index j = 0; j < B; ++j)
          b[j] = d[A + j];
    }
  }
}

#define PF_INSTANTIATE(T)                                                      \
  template void concatHeadsF<T>(const ConcatHeadsShape &, const T *,           \
                                const T *, T *);                               \
  template void concatHeadsB<T>(const ConcatHeadsShape &, const T *, T *, T *);
PF_INSTANTIATE(float)
PF_INSTANTIATE(double)
#undef PF_INSTANTIATE

} // namespace cpu
} // namespace rt
} // namespace pipeforge
