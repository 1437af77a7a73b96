//===- Launch.cuh - Launch shapes and warp reductions of the CUDA kernels -===//
//
// Shared by every .cu file of the backend: 256 threads per block, grid-
// stride loops capped at 2^20 blocks, and the warp shuffles (butterfly
// order, so every lane ends with the same bits). nvcc only.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_LAUNCH_CUH
#define PIPEFORGE_RUNTIME_CUDA_LAUNCH_CUH

#include <algorithm>

namespace pipeforge::rt::cuda {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

/// Blocks for n threads of a grid-stride loop (n > 0).
inline unsigned blocksFor(long long n) {
  return unsigned(std::min<long long>((n + kThreads - 1) / kThreads, 1 << 20));
}

/// for (i = this thread; i < n; i += all threads)
#define PF_GRID_LOOP(i, n)                                                     \
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;  \
       i += (long long)gridDim.x * blockDim.x)

__device__ inline float warpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Butterfly sum: every lane ends with the same bits.
__device__ inline float warpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

} // namespace pipeforge::rt::cuda

#endif // PIPEFORGE_RUNTIME_CUDA_LAUNCH_CUH
