//===- RunOptions.h - pipeforge-run's command line, parsed ------*- C++ -*-===//
//
// pipeforge-run's options as one value (RunOptions), read from argv through
// one table of flags (RunOptions.cpp, a table of Support/FlagTable.h, the
// parser pipeforge-export and pipeforge-tokenize share): each flag's name,
// its place in the usage text, what it takes (nothing, an integer or a
// number in a range, one of a few words, any text) and where it goes. The
// same table prints the usage text and parses; a bad flag is a usage error
// (exit 2, a message that names the flag). Private to the driver
// (RunDriver.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_DRIVER_RUNOPTIONS_H
#define PIPEFORGE_RT_DRIVER_RUNOPTIONS_H

#include "pipeforge/rt/Optimizer.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace pipeforge::rt::driver {

/// Every option of pipeforge-run, with its default.
struct RunOptions {
  std::string progPath; ///< the executable itself for an embedded program
  std::string tracePath, dumpPath, initFrom, saveHf;
  std::string data = "auto", optimizer = "adamw";
  std::string backend = "cpu", precision = "fp32";
  std::string transport;   ///< "": MPI under mpirun, else one process
  int64_t localRanks = -1; ///< -1: not given
  int64_t device = -1;     ///< -1: not given
  bool asyncCompute = false, deviceCollectives = false;
  int64_t steps = 10;
  double lr = 1e-3, maxGradNorm = 0, commTimeout = 120, weightDecay = 0;
  bool decayAll = false;
  LrSchedule::Kind lrScheduleKind = LrSchedule::Kind::Constant;
  int64_t warmupSteps = 0, decaySteps = -1; ///< decaySteps -1: --steps
  double minLr = 0;
  /// The schedule those four make, once parseRunOptions has checked it.
  LrSchedule lrSchedule;
  int64_t recvLookahead = 8;
  bool quiet = false, resume = false, noFuse = false, memoryReport = false,
       printPlacement = false;
  /// --max-memory (MemoryCheck.h): off, or a cap in bytes (-1: auto, what
  /// the host or device has); --memory-plan prints the check's plan.
  bool maxMemoryOff = false, memoryPlan = false;
  int64_t maxMemory = -1;
  int64_t zero = 0;
  bool docMask = false;
  int64_t eos = -1; ///< --eos: none
  std::string overlapGradReduce = "on";
  std::string offloadActivations = "off";
  double gradBucketMb = 25;
  std::string rankLayout = "pp-fastest";
  std::string checkpointDir, optimizerSync = "sync";
  int64_t saveEvery = 0, skipStep = 0, nanStep = 0, nanMb = 0;
  bool help = false; ///< -h / --help: print the usage, nothing else
};

/// Reads argv[1..argc) (and PIPEFORGE_INJECT_NAN, before them) into `out`,
/// then checks the options against each other. `embedded`: the program is
/// not on the command line (progPath becomes argv[0]). Returns the usage
/// error, or nullopt; with -h / --help it stops there (out.help).
std::optional<std::string> parseRunOptions(int argc, char **argv, bool embedded,
                                           RunOptions &out);

/// The usage text (from the table of flags).
std::string runUsage();

/// runUsage() on `to`.
void printRunUsage(std::FILE *to);

} // namespace pipeforge::rt::driver

#endif // PIPEFORGE_RT_DRIVER_RUNOPTIONS_H
