//===- MemoryCheck.h - Memory checked before it is spent -------*- C++ -*-===//
//
// pipeforge-run adds up, before it allocates anything, the bytes each rank
// will hold at its peak (planRankMemory: the executor's own buffer plans,
// replayed over the rank's action list, in the classes --memory-report
// measures), and stops every rank with an error when the ranks of one host
// (one device, on a device backend) plan more than that host (device) has
// (checkPlannedMemory, collective). docs/runtime.md, "Memory checked at
// start".
//
// The host's memory: /proc/meminfo's MemAvailable and the headroom of the
// process's memory cgroup (v2: memory.max - memory.current; v1:
// memory.limit_in_bytes - memory.usage_in_bytes; both without the
// reclaimable inactive file cache of memory.stat), whichever is lower. The
// parsers take the files' text, so the unit tests give them any.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_MEMORYCHECK_H
#define PIPEFORGE_RT_MEMORYCHECK_H

#include "pipeforge/rt/Executor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipeforge::rt {

/// One rank's planned bytes at its peak, in --memory-report's classes.
struct MemoryPlan {
  int64_t params = 0, grads = 0, optimizer = 0;
  /// The peak of the sum of every backend buffer (params, grads, stash,
  /// messages, workspace, tokens), and each class's part at that peak.
  int64_t buffersPeak = 0;
  int64_t stash = 0, messages = 0, workspace = 0, data = 0;
  /// The largest parameters (name, bytes held here) and the stages' shares
  /// ("stage S[ copy C]", workspace + one microbatch's stash), largest
  /// first, a few of each.
  std::vector<std::pair<std::string, int64_t>> largestParams, largestStages;
  /// buffersPeak + optimizer: what --memory-report's "= N bytes" measures.
  int64_t total() const { return buffersPeak + optimizer; }
};

/// What planRankMemory needs beyond the executor's options.
struct MemoryPlanOptions {
  /// Optimizer state per element of a parameter this rank updates: AdamW's
  /// m and v (8), with post-validation's gradient snapshot (12), SGD (0).
  int64_t optimizerBytesPerElement = 8;
};

/// This rank's plan (collective only where the executor's set-up is: the
/// ZeRO pair check of a two-copy schedule). Allocates no backend memory.
Expected<MemoryPlan> planRankMemory(const Program &prog, Backend &be,
                                    Transport &tr, const ExecutorOptions &o,
                                    const MemoryPlanOptions &po);

/// The memory a rank may use and where the number comes from.
struct AvailableMemory {
  int64_t bytes = -1; ///< -1: unknown (not checked)
  std::string source; ///< "MemAvailable", "cgroup v2 memory.max", ...
};

/// /proc/meminfo's MemAvailable in bytes (its "kB" are KiB); nullopt when
/// absent or unreadable.
std::optional<int64_t> parseMemAvailable(const std::string &meminfo);
/// A cgroup limit file (v2 memory.max, v1 memory.limit_in_bytes): the
/// bytes, or nullopt for "max", a v1 "no limit" (>= 2^62) or bad text.
std::optional<int64_t> parseCgroupLimit(const std::string &text);
/// A "key value" line's value in memory.stat text (nullopt: absent).
std::optional<int64_t> parseStatField(const std::string &stat,
                                      const std::string &key);
/// The memory cgroup paths of /proc/self/cgroup: v2's ("0::PATH") and v1's
/// memory controller ("N:...memory...:PATH"); empty when absent.
struct CgroupPaths {
  std::string v2, v1;
};
CgroupPaths parseProcCgroup(const std::string &text);
/// limit - (usage - reclaimable file cache), >= 0; nullopt without a limit.
/// `v2`: memory.stat's inactive_file, else v1's total_inactive_file.
std::optional<int64_t> cgroupHeadroom(const std::string &limit,
                                      const std::string &usage,
                                      const std::string &stat, bool v2);
/// This host's: the lower of MemAvailable and the cgroup headrooms (the
/// cgroup's folder and its parents up to the mount point).
AvailableMemory hostAvailableMemory();

/// --max-memory: "auto" (detected), "off" (no check), or a size in the
/// syntax of --mem-limit's bytes (512MiB, 2GB, 1e9B): the memory the ranks
/// of one host (one device) may plan together, below what is detected.
struct MemoryCap {
  bool off = false;
  int64_t bytes = -1; ///< -1: auto
};
/// nullopt and `why` set on bad text.
std::optional<MemoryCap> parseMemoryCap(const std::string &text,
                                        std::string &why);

/// One rank's entry in the check: where its memory comes from (the pool:
/// its host, or its host and device), its plan and the pool's memory.
struct RankMemory {
  int rank = 0;
  std::string pool;
  MemoryPlan plan;
  AvailableMemory available;
  bool device = false;
  int zero = 0, dp = 1, copies = 1; ///< for the suggestions
};
/// The text of one rank's entry (gathered over the transport) and back.
std::string encodeRankMemory(const RankMemory &r);
std::optional<RankMemory> decodeRankMemory(const std::string &s);

/// The pools whose ranks plan more than they have: the report (what
/// rank 0 prints: each pool's sum, each rank's classes and largest
/// consumers, the options that would fit), or "" when all fit.
/// `printAll`: every pool's and rank's lines even when they fit
/// (--memory-plan).
std::string memoryCheckReport(const std::vector<RankMemory> &ranks,
                              bool printAll, bool &fits);

/// The whole check (collective over the world): every rank plans, rank 0
/// decides per pool and prints, every rank learns the verdict. An error on
/// every rank when a pool does not fit (nothing is allocated yet).
struct MemoryCheckOptions {
  MemoryCap cap;
  bool print = false; ///< --memory-plan: print the plan even when it fits
  MemoryPlanOptions plan;
};
Status checkPlannedMemory(const Program &prog, Backend &be, Transport &tr,
                          const ExecutorOptions &eo,
                          const MemoryCheckOptions &mo,
                          const std::string &host);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_MEMORYCHECK_H
