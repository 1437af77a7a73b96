//===- NcclTransport.h - NCCL between GPUs, bootstrapped by MPI -*- C++ -*-===//
//
// Point-to-point messages with ncclSend/ncclRecv on device buffers, one
// two-rank communicator per directed pipeline channel (so pre-posted
// receives never block sends to another peer), each on its own stream
// ordered after the producing kernels by events; allreduce (data
// parallelism) and grouped send/recv all-to-all (expert parallelism) on the
// world communicator's sub-communicators. Communicators are created from a
// unique id broadcast over MPI, so `mpirun -np N pipeforge-run --backend
// cuda --transport nccl` works on one or many nodes (one GPU per rank: local
// rank i uses device i mod #devices). Errors and timeouts abort the
// communicators and end the job with a message, never a hang.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_NCCLTRANSPORT_H
#define PIPEFORGE_RT_NCCLTRANSPORT_H

#include "pipeforge/rt/Transport.h"

#include <memory>

namespace pipeforge::rt {

/// Initializes MPI (if needed) and returns the transport; communicators are
/// created by setupGrid(). Null with a message on stderr when MPI fails.
std::unique_ptr<Transport> createNcclTransport(int *argc, char ***argv);

/// The CUDA device this process should use: its node-local MPI rank modulo
/// the number of devices (MPI must be initialized; -1 without devices).
int ncclLocalDevice();

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_NCCLTRANSPORT_H
