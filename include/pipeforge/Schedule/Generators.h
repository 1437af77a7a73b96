//===- Generators.h - Handcrafted pipeline schedules ------------*- C++ -*-===//
//
// GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2, ZB-V, DualPipe, DualPipeV,
// Chimera, V-Half and V-Min.
// The result holds compute actions only (Compute and Overlap); run
// insertComm() to add the messages. Invalid requests return an error that
// says which rule was broken; nothing asserts on user input.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_GENERATORS_H
#define PIPEFORGE_SCHEDULE_GENERATORS_H

#include "pipeforge/Schedule/Action.h"

#include <string>

namespace pipeforge::sched {

/// Upper bounds that keep a request from exhausting memory, for the
/// generators and the automatic scheduler alike. A schedule holds about
/// 3 * stages * microbatches actions; 64 Mi of them is far beyond any real
/// pipeline.
inline constexpr int64_t kMaxRanks = 1 << 16;
inline constexpr int64_t kMaxMicrobatches = 1 << 24;
inline constexpr int64_t kMaxComputeActions = int64_t(1) << 26;

/// Interleaved 1F1B's order rules. Megatron: microbatches in groups of p
/// (m a multiple of p); at m = p every forward runs before the first
/// backward. PyTorch (ScheduleInterleaved1F1B): groups of m / R, R = max(1,
/// m / p) rounds (m a multiple of R), warm-up (v-1) m/R + 2 (p-1-r) on rank
/// r. The two agree whenever p divides m and m > p. Auto: Megatron where p
/// divides m, else PyTorch.
enum class InterleavedRule : uint8_t { Auto, Megatron, PyTorch };

struct GenOptions {
  int32_t ranks = 0;
  /// Microbatches. For DualPipe and Chimera this is the total C (C/2 per
  /// copy); for every other kind it is m, the count per (single) copy.
  int32_t microbatches = 0;
  /// Interleaved 1F1B: model chunks per rank (v >= 2).
  int32_t chunksPerRank = 2;
  InterleavedRule interleavedRule = InterleavedRule::Auto;
};

/// "auto", "megatron" or "pytorch".
Expected<InterleavedRule> parseInterleavedRule(const std::string &name);
/// The rule generate() uses for p ranks and m microbatches.
InterleavedRule effectiveInterleavedRule(InterleavedRule rule, int32_t ranks,
                                         int32_t microbatches);

/// The smallest microbatch count `kind` accepts for `ranks` ranks, and the
/// default where none is given. Interleaved: p (Megatron's smallest;
/// generate() also takes PyTorch's one round of m < p, but the compile
/// path does not).
int32_t minMicrobatches(ScheduleKind kind, int32_t ranks,
                        int32_t chunksPerRank = 2);

/// Generate the compute-only schedule. `Auto` is not handled here (see the
/// automatic scheduler) and returns an error.
Expected<Schedule> generate(ScheduleKind kind, const GenOptions &opts);

/// The single-process reference, named "none": every stage of one copy on
/// one rank; for each microbatch, F of stages 0 .. S-1, then BW of stages
/// S-1 .. 0. Each stage's gradients accumulate in microbatch order, so a
/// pipelined run whose W of every stage runs in microbatch order computes
/// the same bits. Compute actions only, as every generator.
Expected<Schedule> generateNone(int32_t stages, int32_t microbatches);

/// How a schedule lays its stages out: the placement ("linear",
/// "interleaved", "v", "dual"; pp-partition's names), the stages per model
/// copy and the ranks. One table for the compile pipeline, pp-schedule and
/// the planner. `kind` is a scheduleKindName, "auto" (linear, or v with
/// `autoV`) or "none" (one stage on one rank; `ranks` must be 1). Errors:
/// an unknown kind, ranks < 1, DualPipe or Chimera with an odd rank count.
struct StageLayout {
  std::string placement;
  int32_t stages = 0;
  int32_t ranks = 0;
};
Expected<StageLayout> stageLayoutFor(const std::string &kind, int32_t ranks,
                                     int32_t chunksPerRank = 2,
                                     bool autoV = false);

} // namespace pipeforge::sched

#endif
