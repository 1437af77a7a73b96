//===- RunDriver.h - The pipeforge-run driver as a library ------*- C++ -*-===//
//
// pipeforge-run's whole command line (docs/runtime.md): options, the
// backend, the transport (MPI when started by mpirun, --local-ranks threads,
// NCCL), then rt::Trainer. pipeforge-run's main calls runDriver with no
// embedded program; an executable from `pipeforge-compile --emit exe`
// carries its program and calls pipeforge_rt_main_embedded, so that
//
//   mpirun -np 4 ./train --steps 20  ==  mpirun -np 4 pipeforge-run prog.pfp
//   --steps 20
//
// (the same options, the same output). libpipeforge-rt-driver.so holds this
// driver and the whole runtime for such executables.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_RUNDRIVER_H
#define PIPEFORGE_RT_RUNDRIVER_H

#include <cstdint>
#include <string>

namespace pipeforge::rt {

/// Returns the process exit code. `embedded`: the program file's bytes
/// (then no program path is taken from the command line).
int runDriver(int argc, char **argv, const std::string *embedded = nullptr);

} // namespace pipeforge::rt

/// The entry point of a compiled executable (C linkage: called from the
/// LLVM-emitted main).
extern "C" int pipeforge_rt_main_embedded(int argc, char **argv,
                                          const char *data, uint64_t size);

#endif // PIPEFORGE_RT_RUNDRIVER_H
