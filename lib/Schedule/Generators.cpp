//===- Generators.cpp - Schedule generator dispatch and validation --------===//
//
// Checks a generator request against the rules of its schedule kind and
// dispatches to the generator families (GenPipeline.cpp, GenZeroBubble.cpp,
// GenDualPipe.cpp, GenChimera.cpp, GenControllable.cpp). Every broken rule
// is reported as a Status error naming the rule; nothing asserts on user
// input.
//
//===----------------------------------------------------------------------===//

#include "GenUtil.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace pipeforge::sched {

namespace {

std::string name(ScheduleKind kind) { return scheduleKindName(kind); }

/// V-Half and V-Min squeeze their warm-up and cool-down pass by pass (about
/// p^2 passes, each trying up to ~p slots and replaying its rank's ~6m
/// slots per try: ~p^3 m steps; 2^32 is some 20 s).
constexpr int64_t kMaxControllableRanks = 256;
constexpr int64_t kMaxControllableWork = int64_t(1) << 32;

/// V-Half and V-Min take any m >= 1: with fewer microbatches than the
/// building blocks' steady state needs (m <= p or so), the repeated blocks
/// are cut short and the squeeze leaves a larger bubble, never a deadlock
/// (test/Schedule/controllable.test verifies m = 1 .. 3p+1).
Status validateControllable(ScheduleKind kind, int64_t p, int64_t m) {
  const std::string k = name(kind);
  if (p > kMaxControllableRanks || p * p * p * m > kMaxControllableWork)
    return Status::error(
        k + " supports at most " + std::to_string(kMaxControllableRanks) +
        " ranks and ranks^3 x microbatches <= 2^32 (its squeeze replays a "
        "rank for every slot it tries), got " + std::to_string(p) +
        " ranks x " + std::to_string(m) + " microbatches");
  return Status::ok();
}

Status validate(ScheduleKind kind, const GenOptions &opts) {
  const int64_t p = opts.ranks;
  const int64_t m = opts.microbatches;
  const int64_t v = opts.chunksPerRank;
  const std::string k = name(kind);

  if (kind == ScheduleKind::Auto)
    return Status::error("schedule kind 'auto' is produced by the automatic "
                         "scheduler, not by generate()");

  const int64_t minRanks =
      (kind == ScheduleKind::Interleaved || kind == ScheduleKind::DualPipe ||
       kind == ScheduleKind::Chimera)
          ? 2
          : 1;
  if (p < minRanks)
    return Status::error(k + " needs at least " + std::to_string(minRanks) +
                         " rank" + (minRanks > 1 ? "s" : "") + ", got " +
                         std::to_string(p));
  if (p > kMaxRanks)
    return Status::error(k + " supports at most " + std::to_string(kMaxRanks) +
                         " ranks, got " + std::to_string(p));
  if (m < 1)
    return Status::error(k + " needs at least 1 microbatch, got " +
                         std::to_string(m));
  if (m > kMaxMicrobatches)
    return Status::error(k + " supports at most " +
                         std::to_string(kMaxMicrobatches) +
                         " microbatches, got " + std::to_string(m));

  int64_t stagesTimesMb = p * m; // per copy, 1 stage per rank
  switch (kind) {
  case ScheduleKind::GPipe:
  case ScheduleKind::OneFOneB:
  case ScheduleKind::ZBH1:
    break;
  case ScheduleKind::Interleaved:
    if (v < 2)
      return Status::error("interleaved needs at least 2 chunks per rank, got " +
                           std::to_string(v));
    if (v > 1024)
      return Status::error("interleaved supports at most 1024 chunks per "
                           "rank, got " + std::to_string(v));
    if (opts.interleavedRule == InterleavedRule::Megatron && m % p != 0)
      return Status::error(
          "interleaved (Megatron virtual pipeline) needs the microbatch count "
          "to be a multiple of the rank count, got " + std::to_string(m) +
          " microbatches for " + std::to_string(p) +
          " ranks (PyTorch's rule takes a multiple of max(1, m / p))");
    if (int64_t rounds = std::max<int64_t>(1, m / p); m % rounds != 0)
      return Status::error(
          "interleaved needs the microbatch count to be a multiple of the rank "
          "count (Megatron) or of its rounds, max(1, m / p) = " +
          std::to_string(rounds) + " (PyTorch), got " + std::to_string(m) +
          " microbatches for " + std::to_string(p) + " ranks");
    stagesTimesMb = p * v * m;
    break;
  case ScheduleKind::ZBH2:
    if (m < 2 * p)
      return Status::error("zb-h2 needs at least 2 * ranks = " +
                           std::to_string(2 * p) + " microbatches, got " +
                           std::to_string(m));
    break;
  case ScheduleKind::ZBV:
    stagesTimesMb = 2 * p * std::max<int64_t>(m, 2 * p - 1);
    break;
  case ScheduleKind::DualPipe:
    if (p % 2 != 0)
      return Status::error("dualpipe needs an even number of ranks, got " +
                           std::to_string(p));
    if (m % 2 != 0)
      return Status::error("dualpipe needs an even number of microbatches "
                           "(half per direction), got " + std::to_string(m));
    if (m < 2 * p)
      return Status::error("dualpipe needs at least 2 * ranks = " +
                           std::to_string(2 * p) + " microbatches, got " +
                           std::to_string(m));
    stagesTimesMb = p * m; // two copies of p stages, m/2 microbatches each
    break;
  case ScheduleKind::DualPipeV:
    if (m < 2 * p)
      return Status::error("dualpipev needs at least 2 * ranks = " +
                           std::to_string(2 * p) + " microbatches, got " +
                           std::to_string(m));
    stagesTimesMb = 2 * p * m;
    break;
  case ScheduleKind::Chimera:
    if (p % 2 != 0)
      return Status::error("chimera needs an even number of ranks (a down "
                           "and an up pipeline of D/2 microbatches each per "
                           "unit), got " + std::to_string(p));
    if (m % p != 0)
      return Status::error(
          "chimera needs the microbatch count to be a multiple of the rank "
          "count (units of D microbatches, D/2 per direction, concatenated), "
          "got " + std::to_string(m) + " microbatches for " +
          std::to_string(p) + " ranks");
    stagesTimesMb = p * m; // two copies of p stages, m/2 microbatches each
    break;
  case ScheduleKind::VHalf:
  case ScheduleKind::VMin:
    if (Status st = validateControllable(kind, p, m); !st)
      return st;
    stagesTimesMb = 2 * p * m;
    break;
  case ScheduleKind::Auto:
    break;
  }
  if (3 * stagesTimesMb > kMaxComputeActions)
    return Status::error(k + " request too large: " + std::to_string(p) +
                         " ranks x " + std::to_string(m) +
                         " microbatches exceeds " +
                         std::to_string(kMaxComputeActions) + " actions");
  return Status::ok();
}

} // namespace

Expected<InterleavedRule> parseInterleavedRule(const std::string &name) {
  if (name == "auto")
    return InterleavedRule::Auto;
  if (name == "megatron")
    return InterleavedRule::Megatron;
  if (name == "pytorch")
    return InterleavedRule::PyTorch;
  return Status::error("unknown interleaved rule '" + name +
                       "' (expected auto, megatron or pytorch)");
}

InterleavedRule effectiveInterleavedRule(InterleavedRule rule, int32_t ranks,
                                         int32_t microbatches) {
  if (rule != InterleavedRule::Auto)
    return rule;
  return ranks > 0 && microbatches % ranks == 0 ? InterleavedRule::Megatron
                                                : InterleavedRule::PyTorch;
}

int32_t minMicrobatches(ScheduleKind kind, int32_t ranks,
                        int32_t chunksPerRank) {
  (void)chunksPerRank;
  const int32_t p = ranks < 1 ? 1 : ranks;
  switch (kind) {
  case ScheduleKind::Interleaved:
    return p; // Megatron: a multiple of the rank count
  case ScheduleKind::Chimera:
    return p; // one basic unit: D/2 per direction
  case ScheduleKind::ZBH2:
  case ScheduleKind::DualPipe:  // total C; C/2 >= N per direction
  case ScheduleKind::DualPipeV:
    return 2 * p;
  case ScheduleKind::GPipe:
  case ScheduleKind::OneFOneB:
  case ScheduleKind::ZBH1:
  case ScheduleKind::ZBV:
  case ScheduleKind::VHalf:
  case ScheduleKind::VMin:
  case ScheduleKind::Auto:
    return 1;
  }
  return 1;
}

Expected<Schedule> generate(ScheduleKind kind, const GenOptions &opts) {
  if (Status st = validate(kind, opts); !st)
    return st;
  switch (kind) {
  case ScheduleKind::GPipe:
    return detail::genGPipe(opts);
  case ScheduleKind::OneFOneB:
    return detail::genOneFOneB(opts);
  case ScheduleKind::Interleaved:
    return detail::genInterleaved(opts);
  case ScheduleKind::ZBH1:
    return detail::genZBH1(opts);
  case ScheduleKind::ZBH2:
    return detail::genZBH2(opts);
  case ScheduleKind::ZBV:
    return detail::genZBV(opts);
  case ScheduleKind::DualPipe:
    return detail::genDualPipe(opts);
  case ScheduleKind::DualPipeV:
    return detail::genDualPipeV(opts);
  case ScheduleKind::Chimera:
    return detail::genChimera(opts);
  case ScheduleKind::VHalf:
    return detail::genVHalf(opts);
  case ScheduleKind::VMin:
    return detail::genVMin(opts);
  case ScheduleKind::Auto:
    break;
  }
  return Status::error("unknown schedule kind");
}

} // namespace pipeforge::sched

namespace pipeforge::sched {

Expected<Schedule> generateNone(int32_t stages, int32_t microbatches) {
  if (stages < 1)
    return Status::error("none needs at least 1 stage, got " +
                         std::to_string(stages));
  if (microbatches < 1)
    return Status::error("none needs at least 1 microbatch, got " +
                         std::to_string(microbatches));
  if (2 * int64_t(stages) * microbatches > kMaxComputeActions)
    return Status::error("none request too large: " + std::to_string(stages) +
                         " stages x " + std::to_string(microbatches) +
                         " microbatches exceeds " +
                         std::to_string(kMaxComputeActions) + " actions");
  Schedule s;
  s.name = "none";
  s.placement.numRanks = 1;
  s.placement.numStages = stages;
  s.placement.numCopies = 1;
  s.placement.rankOf = {std::vector<int32_t>(size_t(stages), 0)};
  s.numMicrobatches = microbatches;
  s.hasComm = false; // compute only, as every generator (insertComm adds none)
  s.programs.resize(1);
  for (int32_t j = 0; j < microbatches; ++j) {
    for (int32_t st = 0; st < stages; ++st)
      s.programs[0].push_back(Action::compute({WorkKind::F, st, j, 0}));
    for (int32_t st = stages - 1; st >= 0; --st)
      s.programs[0].push_back(Action::compute({WorkKind::BW, st, j, 0}));
  }
  return s;
}

Expected<StageLayout> stageLayoutFor(const std::string &kind, int32_t ranks,
                                     int32_t chunksPerRank, bool autoV) {
  if (kind == "none") {
    if (ranks != 1)
      return Status::error("none is the single-process reference: it needs "
                           "1 rank (got " + std::to_string(ranks) + ")");
    return StageLayout{"linear", 1, 1};
  }
  auto k = parseScheduleKind(kind);
  if (!k)
    return Status::error("unknown schedule '" + kind + "' (expected one of: " +
                         scheduleKindNames() + " none)");
  if (ranks < 1)
    return Status::error("ranks must be at least 1 (got " +
                         std::to_string(ranks) + ")");
  switch (*k) {
  case ScheduleKind::Interleaved:
    if (chunksPerRank < 2)
      return Status::error("interleaved needs at least 2 chunks per rank "
                           "(got " + std::to_string(chunksPerRank) + ")");
    return StageLayout{"interleaved", chunksPerRank * ranks, ranks};
  case ScheduleKind::ZBV:
  case ScheduleKind::DualPipeV:
  case ScheduleKind::VHalf:
  case ScheduleKind::VMin:
    return StageLayout{"v", 2 * ranks, ranks};
  case ScheduleKind::DualPipe:
  case ScheduleKind::Chimera:
    if (ranks % 2 != 0)
      return Status::error(std::string(scheduleKindName(*k)) +
                           " needs an even number of ranks (got " +
                           std::to_string(ranks) + ")");
    return StageLayout{"dual", ranks, ranks};
  case ScheduleKind::Auto:
    return autoV ? StageLayout{"v", 2 * ranks, ranks}
                 : StageLayout{"linear", ranks, ranks};
  default:
    return StageLayout{"linear", ranks, ranks};
  }
}

} // namespace pipeforge::sched
