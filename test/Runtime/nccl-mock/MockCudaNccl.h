//===- MockCudaNccl.h - Test controls of the CUDA / NCCL stand-ins -*- C++ -*-//
//
// What NcclProtocolDriver.cpp needs from MockCudaNccl.cpp beyond the CUDA and
// NCCL API (include/cuda_runtime.h, include/nccl.h): a collective start, a
// way to hold a stream (a long-running kernel), and counters to check the
// transport's work and its shutdown against.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_TEST_NCCLMOCK_MOCKCUDANCCL_H
#define PIPEFORGE_TEST_NCCLMOCK_MOCKCUDANCCL_H

#include "cuda_runtime.h"

namespace mock {

/// Collective over MPI_COMM_WORLD, once MPI is initialized and before the
/// first NCCL call: the mock's messages get a communicator of their own.
void init();

/// Runs every queued stream step that can run now.
void pump();

/// Queues on `s` a step that blocks the stream until release(s): a kernel
/// that runs for as long as the test wants.
void hold(cudaStream_t s);
void release(cudaStream_t s);

struct Stats {
  long ncclSends = 0, ncclRecvs = 0; ///< point-to-point calls
  long deviceCopies = 0;             ///< cudaMemcpyDeviceToDevice calls
  int commsCreated = 0, commsDestroyed = 0, commsAborted = 0;
  int streamsLive = 0, eventsLive = 0;
  long allocationsLive = 0; ///< device allocations whose free has not run
  long stepsQueued = 0;     ///< stream steps not yet run (all streams)
};
Stats stats();

} // namespace mock

#endif // PIPEFORGE_TEST_NCCLMOCK_MOCKCUDANCCL_H
