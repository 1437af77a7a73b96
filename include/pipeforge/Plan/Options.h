//===- Options.h - pipeforge-plan's flags as PlanOptions --------*- C++ -*-===//
//
// Plain C++: the text of pipeforge-plan's list flags checked and turned into
// PlanOptions, and its progress line on stderr. The tool declares the flags;
// everything it says about them lives here (and in Report.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_PLAN_OPTIONS_H
#define PIPEFORGE_PLAN_OPTIONS_H

#include "pipeforge/Plan/Planner.h"

#include <chrono>
#include <functional>
#include <string>

namespace pipeforge::plan {

/// The ranges of pipeforge-plan's numeric flags (docs/reliability.md).
constexpr double kMaxStateBytesPerParam = 1024; ///< --state-bytes-per-param
constexpr double kMaxGradBytesPerParam = 64;    ///< --grad-bytes
constexpr int64_t kMaxBytesPerElement = 16;     ///< --bytes-per-element
/// --top: setups listed. A larger N keeps more automatic-schedule runs
/// from being pruned (each must be able to reach the list): --top 1000 took
/// 38 s on Llama-3-8B over 64 GPUs against 3 s at the default 5 and 4 s at
/// 100, so the list stops at 100.
constexpr int64_t kMaxTopN = 100;
constexpr int64_t kMaxGlobalBatch = int64_t(1) << 30; ///< --global-batch

/// The flags as given (lists as comma-separated text; "" = the default).
/// Every list refuses an empty item ("--ep 1,2,,4").
struct PlanFlags {
  int64_t globalBatch = 0;
  std::string microbatchSizes = "1,2,4,8";
  std::string schedules, pp, tp, ep, recompute, zero;
  /// --offload: off, auto (comma separated; "" = off).
  std::string offload;
  std::string chunks = "2,4,8";
  /// --chunks was given (not its default): refused when --schedules lists
  /// no interleaved, the one schedule that reads it.
  bool chunksGiven = false;
  double stateBytesPerParam = 16, gradBytesPerParam = 4;
  int topN = 5;
  std::string modelPath; ///< as the user named it; "-": stdin
  /// --overlap-grad-reduce: layer (default), stage, off (GradReduce.h).
  std::string gradOverlap = "layer";
  /// Checked only: --format (table, json), --progress (auto, always,
  /// never), --bytes-per-element (> 0).
  std::string format = "table", progress = "auto";
  unsigned bytesPerElement = 2;
  /// --zero-shard (replicas, all), --layouts (comma separated), and
  /// --compare (a table only: not with --format json).
  std::string zeroShard = "replicas", layouts;
  bool compare = false;
  /// --routing-groups G,g (checked here, applied to the model by
  /// applyRoutingGroupsFlag once it is loaded).
  std::string routingGroups;
  /// --float8 (off, linear, linear-gather), --async-tp, --zero-gather
  /// (layer, stage).
  std::string float8 = "off", zeroGather = "layer";
  bool asyncTp = false;
  /// --interleaved-rule (auto, megatron, pytorch): the interleaved order.
  std::string interleavedRule = "auto";
};

/// The options the flags ask for, with the heuristic automatic scheduler.
/// Errors name the flag, e.g. "--zero: expected ZeRO stages 0, 1, 2, 3
/// separated by commas, got '4'".
Expected<PlanOptions> optionsFromFlags(const PlanFlags &flags);

/// --routing-groups "G,g" applied to every moe layer of `model` ("" leaves
/// the groups the IR carries).
Status applyRoutingGroupsFlag(ModelCosts &model, const std::string &text);

/// The progress line of a search (`--progress`): `mode` auto (on a terminal,
/// once the search has run for a second), always, or never. Lines go to
/// `write`, at most one every half second; on a terminal the line is
/// redrawn in place.
class ProgressLine {
public:
  ProgressLine(std::string mode, bool terminal,
               std::function<void(const std::string &)> write);
  /// For PlanOptions::progress (empty with mode never).
  std::function<void(const char *, int, int, int)> callback();
  /// The closing "searched N setups in S s" line, when one is due.
  void finish(int evaluated);

private:
  double elapsed() const;
  std::string mode;
  bool terminal;
  std::function<void(const std::string &)> write;
  std::chrono::steady_clock::time_point started;
  bool shown = false;
  double lastShown = -1;
};

/// The --fit-throughput line above the table.
std::string formatFitLine(double efficiency, double clusterEfficiency,
                          double tokensPerSecond);

} // namespace pipeforge::plan

#endif // PIPEFORGE_PLAN_OPTIONS_H
