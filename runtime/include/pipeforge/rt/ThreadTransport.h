//===- ThreadTransport.h - Ranks as threads of one process ------*- C++ -*-===//
//
// pipeforge-run --local-ranks N: the ranks of a program as N threads of one
// process, each with its own backend; point-to-point messages are copies
// made by the receiver's backend (device-to-device on a GPU), collectives
// meet in shared memory. The single-GPU multi-rank mode (several ranks on
// one GPU, which NCCL refuses), and a quick way to run a pipeline on CPUs
// without mpirun. Results equal the MPI transport's bitwise.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_THREADTRANSPORT_H
#define PIPEFORGE_RT_THREADTRANSPORT_H

#include "pipeforge/rt/Transport.h"

#include <memory>
#include <vector>

namespace pipeforge::rt {

/// One transport per rank (world rank = index), all sharing one hub; use
/// each from its own thread.
std::vector<std::unique_ptr<Transport>> createThreadTransports(int n);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_THREADTRANSPORT_H
