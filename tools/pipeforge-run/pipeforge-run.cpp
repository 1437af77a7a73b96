//===- pipeforge-run.cpp - Runs a compiled pipeline program ---------------===//
//
//   mpirun -np N pipeforge-run prog.pfp --steps K [options]
//
// Everything is in the driver library (runtime/lib/driver/RunDriver.cpp,
// docs/runtime.md), which compiled executables share.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/RunDriver.h"

int main(int argc, char **argv) { return pipeforge::rt::runDriver(argc, argv); }
