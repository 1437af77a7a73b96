//===- DeviceError.h - Errors that CUDA kernels report asynchronously -----===//
//
// A kernel cannot return an error, so one that meets an invalid index (a
// token or target outside [0, vocab)) records it in the backend's device
// error word, an int[kDeviceErrorInts] = {code, element, value, limit}, and
// carries on without touching memory out of range. The first error wins
// (atomicCAS on the code). CudaBackend::takeAsyncError() turns it into the
// message the CPU backend gives for the same input and clears it.
//
// Host-includable: the device function exists only under nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_RUNTIME_CUDA_DEVICEERROR_H
#define PIPEFORGE_RUNTIME_CUDA_DEVICEERROR_H

namespace pipeforge {
namespace rt {
namespace cuda {

/// What went wrong; the op and the operand follow from the code.
enum DeviceError : int {
  DeviceErrorNone = 0,
  DeviceErrorEmbeddingToken = 1,        ///< embedding: token
  DeviceErrorEmbeddingBwdToken = 2,     ///< embedding_bwd_weight: token
  DeviceErrorCrossEntropyTarget = 3,    ///< cross_entropy: target
  DeviceErrorCrossEntropyBwdTarget = 4, ///< cross_entropy_bwd: target
};

/// {code, element index, value, limit}.
constexpr int kDeviceErrorInts = 4;

#ifdef __CUDACC__
/// Records an index error unless an earlier one is recorded already.
__device__ inline void reportIndexError(int *word, DeviceError code,
                                        long long element, int value,
                                        long long limit) {
  if (atomicCAS(word, int(DeviceErrorNone), int(code)) == DeviceErrorNone) {
    word[1] = int(element);
    word[2] = value;
    word[3] = int(limit);
  }
}
#endif

} // namespace cuda
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CUDA_DEVICEERROR_H
