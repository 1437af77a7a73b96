//===- DeviceError.h - Errors that CUDA kernels report asynchronously -----===//
//
// A kernel cannot return an error, so one that meets an invalid index (a
// token or target outside [0, vocab)) records it in the backend's device
// error word and carries on without touching memory out of range. The word
// is an int[kDeviceErrorInts] = {code, limit, packed (8-byte aligned, 2
// ints)}: the first kernel to report sets the code (atomicCAS), and among
// its reports the lowest element wins (atomicMin on packed = element << 32
// | value), so the message names the first bad index, as the CPU's does,
// whatever order the threads ran in. CudaBackend::takeAsyncError() turns it
// into the CPU backend's message for the same input and clears it
// (kDeviceErrorClear).
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

/// {code, limit, packed low, packed high}; allocate 8-byte aligned.
constexpr int kDeviceErrorInts = 4;
/// The cleared word: no code, packed = all ones (atomicMin's identity).
constexpr int kDeviceErrorClear[kDeviceErrorInts] = {0, 0, -1, -1};

/// The element and the value of the reported index (packed is
/// little-endian: word[2] is its low half, the value; word[3] the element).
inline long long deviceErrorElement(const int *w) {
  return (long long)(unsigned)w[3];
}
inline int deviceErrorValue(const int *w) { return w[2]; }

#ifdef __CUDACC__
/// Records an index error: the first reporting kernel's code, the lowest
/// element among its reports.
__device__ inline void reportIndexError(int *word, DeviceError code,
                                        long long element, int value,
                                        long long limit) {
  int prev = atomicCAS(word, int(DeviceErrorNone), int(code));
  if (prev != DeviceErrorNone && prev != int(code))
    return;
  word[1] = int(limit); // every report of one code has the same limit
  unsigned long long packed =
      (unsigned long long)element << 32 | (unsigned long long)(unsigned)value;
  atomicMin(reinterpret_cast<unsigned long long *>(word + 2), packed);
}
#endif

} // namespace cuda
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CUDA_DEVICEERROR_H
