//===- cuda_runtime.h - Host-only stand-in for the CUDA runtime -*- C++ -*-===//
//
// Test stand-in, not CUDA: nccl-protocol-test compiles
// runtime/transports/nccl/NcclTransport.cpp with this directory ahead of every other
// include path, so the transport builds and runs on a machine without CUDA.
// It declares exactly the part of the runtime API the transport uses, with
// CUDA's signatures; MockCudaNccl.cpp implements it on the host ("device"
// memory is host memory, a stream is an in-order queue of steps) and checks
// how the transport uses it (see there).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_TEST_NCCLMOCK_CUDA_RUNTIME_H
#define PIPEFORGE_TEST_NCCLMOCK_CUDA_RUNTIME_H

#include <cstddef>

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorNoDevice = 100,
  cudaErrorNotReady = 600
};
typedef enum cudaError cudaError_t;

struct MockStream;
struct MockEvent;
typedef MockStream *cudaStream_t;
typedef MockEvent *cudaEvent_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

#define cudaStreamNonBlocking 0x01u
#define cudaEventDisableTiming 0x02u

const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned flags);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            cudaMemcpyKind kind, cudaStream_t stream);

#endif // PIPEFORGE_TEST_NCCLMOCK_CUDA_RUNTIME_H
