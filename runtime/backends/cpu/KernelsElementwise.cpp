//===- KernelsElementwise.cpp - Activations, add, mul ---------------------===//

#include "DropoutRng.h"
#include "ElementwiseMath.h"
#include "Kernels.h"

#include <type_traits>

// The float loops (GELU, SiLU, add, mul) have AVX-512 and AVX2 clones,
// picked at load time by the CPU (Kernels.h, PF_CPU_CLONES): the same bits
// on every path (elementwise, correctly rounded, never reassociated, no
// contraction into FMA).
#define PF_VECTOR_CLONES PF_CPU_CLONES

namespace pipeforge {
namespace rt {
namespace cpu {
namespace detail {
PF_VECTOR_CLONES void geluLoop(Index n, const float *x, float *y) {
  for (Index i = 0; i < n; ++i)
    y[i] = math::gelu(x[i]);
}
PF_VECTOR_CLONES void geluGradLoop(Index n, const float *x, const float *dy,
                                   float *dx) {
  for (Index i = 0; i < n; ++i)
    dx[i] = dy[i] * math::geluGrad(x[i]);
}
PF_VECTOR_CLONES void siluLoop(Index n, const float *x, float *y) {
  for (Index i = 0; i < n; ++i)
    y[i] = math::silu(x[i]);
}
PF_VECTOR_CLONES void siluGradLoop(Index n, const float *x, const float *dy,
                                   float *dx) {
  for (Index i = 0; i < n; ++i)
    dx[i] = dy[i] * math::siluGrad(x[i]);
}
} // namespace detail

template <typename T>
void activationF(Activation act, Index n, const T *x, T *y,
                 ActivationSaved<T> &saved) {
  if constexpr (std::is_same_v<T, float>) {
    if (act == Activation::Gelu)
      detail::geluLoop(n, x, y);
    else
      detail::siluLoop(n, x, y);
    saved.x = x;
    return;
  }
  if (act == Activation::Gelu)
    for (Index i = 0; i < n; ++i)
      y[i] = math::gelu(x[i]);
  else
    for (Index i = 0; i < n; ++i)
      y[i] = math::silu(x[i]);
  saved.x = x;
}

template <typename T>
void activationB(Activation act, Index n, const ActivationSaved<T> &saved,
                 const T *dy, T *dx) {
  const T *x = saved.x;
  if constexpr (std::is_same_v<T, float>)
    return act == Activation::Gelu ? detail::geluGradLoop(n, x, dy, dx)
                                   : detail::siluGradLoop(n, x, dy, dx);
  if (act == Activation::Gelu)
    for (Index i = 0; i < n; ++i)
      dx[i] = dy[i] * math::geluGrad(x[i]);
  else
    for (Index i = 0; i < n; ++i)
      dx[i] = dy[i] * math::siluGrad(x[i]);
}

template <typename T>
void geluF(Index n, const T *x, T *y, ActivationSaved<T> &saved) {
  activationF(Activation::Gelu, n, x, y, saved);
}
template <typename T>
void geluB(Index n, const ActivationSaved<T> &saved, const T *dy, T *dx) {
  activationB(Activation::Gelu, n, saved, dy, dx);
}
template <typename T>
void siluF(Index n, const T *x, T *y, ActivationSaved<T> &saved) {
  activationF(Activation::Silu, n, x, y, saved);
}
template <typename T>
void siluB(Index n, const ActivationSaved<T> &saved, const T *dy, T *dx) {
  activationB(Activation::Silu, n, saved, dy, dx);
}

template <typename T> PF_CPU_CLONES void addF(Index n, const T *a, const T *b, T *y) {
  for (Index i = 0; i < n; ++i)
    y[i] = a[i] + b[i];
}
template <typename T> PF_CPU_CLONES void addB(Index n, const T *dy, T *da, T *db) {
  for (Index i = 0; i < n; ++i) {
    T g = dy[i];
    da[i] = g;
    db[i] = g;
  }
}

template <typename T> void dropoutF(const DropoutShape &s, const T *x, T *y) {
  const uint32_t thr = dropout::threshold(s.rate);
  const T scale = T(1.0 / (1.0 - s.rate));
  for (Index b = 0; b < s.batch; ++b)
    for (Index i = 0; i < s.seq; ++i) {
      uint64_t row =
          dropout::rowKey(s.key, uint64_t(b), uint64_t(s.seqStart + i));
      const Index off = (b * s.seq + i) * s.features;
      for (Index j = 0; j < s.features; ++j)
        y[off + j] =
            dropout::keep(row, uint64_t(j), thr) ? x[off + j] * scale : T(0);
    }
}

template <typename T>
PF_CPU_CLONES void mulF(Index n, const T *a, const T *b, T *y, MulSaved<T> &saved) {
  for (Index i = 0; i < n; ++i)
    y[i] = a[i] * b[i];
  saved.a = a;
  saved.b = b;
}
template <typename T>
PF_CPU_CLONES void mulB(Index n, const MulSaved<T> &saved, const T *dy, T *da, T *db) {
  for (Index i = 0; i < n; ++i) {
    T g = dy[i];
    T a = saved.a[i], b = saved.b[i];
    da[i] = g * b;
    db[i] = g * a;
  }
}

#define PF_INSTANTIATE(T)                                                      \
  template void activationF<T>(Activation, Index, const T *, T *,              \
                               ActivationSaved<T> &);                          \
  template void activationB<T>(Activation, Index, const ActivationSaved<T> &,  \
                               const T *, T *);                                \
  template void geluF<T>(Index, const T *, T *, ActivationSaved<T> &);         \
  template void geluB<T>(Index, const ActivationSaved<T> &, const T *, T *);   \
  template void siluF<T>(Index, const T *, T *, ActivationSaved<T> &);         \
  template void siluB<T>(Index, const ActivationSaved<T> &, const T *, T *);   \
  template void addF<T>(Index, const T *, const T *, T *);                     \
  template void addB<T>(Index, const T *, T *, T *);                           \
  template void dropoutF<T>(const DropoutShape &, const T *, T *);             \
  template void mulF<T>(Index, const T *, const T *, T *, MulSaved<T> &);      \
  template void mulB<T>(Index, const MulSaved<T> &, const T *, T *, T *);
PF_INSTANTIATE(float)
PF_INSTANTIATE(double)
#undef PF_INSTANTIATE

} // namespace cpu
} // namespace rt
} // namespace pipeforge
