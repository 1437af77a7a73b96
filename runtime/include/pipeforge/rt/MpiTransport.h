//===- MpiTransport.h - OpenMPI transport (PipeForgeRuntimeMPI) -*- C++ -*-===//
#ifndef PIPEFORGE_RT_MPITRANSPORT_H
#define PIPEFORGE_RT_MPITRANSPORT_H

#include "pipeforge/rt/Transport.h"

namespace pipeforge::rt {

/// True when this process was started by mpirun (OpenMPI, PMI or PMIx
/// environment present).
bool launchedByMpirun();

/// Initialises MPI (once) and returns the transport; MPI_Finalize runs when
/// the transport is destroyed.
std::unique_ptr<Transport> createMpiTransport(int *argc, char ***argv);

} // namespace pipeforge::rt

#endif
