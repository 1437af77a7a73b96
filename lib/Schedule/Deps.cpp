//===- Deps.cpp - Work indexing and dependency inference ------------------===//

#include "Deps.h"

#include <algorithm>

namespace pipeforge::sched::detail {

Status checkShape(const Schedule &s) {
  const Placement &pl = s.placement;
  int32_t numRanks = s.numRanks();
  if (numRanks <= 0)
    return Status::error("schedule has no ranks");
  if (s.programs.size() != static_cast<size_t>(numRanks))
    return Status::error("schedule has " + std::to_string(s.programs.size()) +
                         " programs for " + std::to_string(numRanks) +
                         " ranks");
  if (pl.numCopies < 1 || pl.numStages < 1 || s.numMicrobatches < 0 ||
      pl.rankOf.size() != static_cast<size_t>(pl.numCopies))
    return Status::error("placement is malformed: " +
                         std::to_string(pl.numCopies) + " copies, " +
                         std::to_string(pl.numStages) + " stages, " +
                         std::to_string(pl.rankOf.size()) + " rankOf rows");
  for (size_t c = 0; c < pl.rankOf.size(); ++c) {
    if (pl.rankOf[c].size() != static_cast<size_t>(pl.numStages))
      return Status::error("placement: rankOf[" + std::to_string(c) +
                           "] has " + std::to_string(pl.rankOf[c].size()) +
                           " entries for " + std::to_string(pl.numStages) +
                           " stages");
    for (size_t st = 0; st < pl.rankOf[c].size(); ++st) {
      int32_t r = pl.rankOf[c][st];
      if (r < 0 || r >= numRanks)
        return Status::error("placement: stage " + std::to_string(st) +
                             " of copy " + std::to_string(c) +
                             " is on rank " + std::to_string(r) +
                             ", out of range");
    }
  }
  return Status::ok();
}

std::vector<Loc> locateWork(const Schedule &s, const WorkIndex &idx) {
  std::vector<Loc> locs(idx.size());
  auto note = [&](const Work &w, int32_t rank, int32_t step) {
    if (!idx.inRange(w))
      return;
    Loc &l = locs[idx.id(w)];
    if (!l.present())
      l = Loc{rank, step};
  };
  for (size_t r = 0; r < s.programs.size(); ++r) {
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if (a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap)
        note(a.work, static_cast<int32_t>(r), static_cast<int32_t>(i));
      if (a.kind == ActionKind::Overlap)
        note(a.work2, static_cast<int32_t>(r), static_cast<int32_t>(i));
    }
  }
  return locs;
}

int32_t consumerStage(const Action &msg) {
  switch (msg.payload) {
  case Payload::Activation:
    return msg.work.stage + 1;
  case Payload::Gradient:
    return msg.work.stage - 1;
  case Payload::WeightGrad:
    return -1;
  }
  return -1;
}

std::string stepError(const Schedule &s, int32_t rank, size_t step,
                      const std::string &msg, size_t context) {
  std::string out = "rank " + std::to_string(rank) + ", step " +
                    std::to_string(step) + ": " + msg;
  if (rank < 0 || static_cast<size_t>(rank) >= s.programs.size())
    return out;
  const std::vector<Action> &prog = s.programs[rank];
  out += "\n  rank " + std::to_string(rank) + " program (" +
         std::to_string(prog.size()) + " actions):";
  size_t lo = step > context ? step - context : 0;
  size_t hi = std::min(prog.size(), step + context + 1);
  if (lo > 0)
    out += "\n     ...";
  for (size_t i = lo; i < hi; ++i)
    out += std::string(i == step ? "\n  -> " : "\n     ") + std::to_string(i) +
           ": " + toString(prog[i]);
  if (step >= prog.size())
    out += "\n  -> " + std::to_string(prog.size()) + ": (end of program)";
  else if (hi < prog.size())
    out += "\n     ...";
  return out;
}

std::string describeAt(const Work &w, const Loc &loc) {
  if (!loc.present())
    return toString(w) + " (absent)";
  return toString(w) + " (rank " + std::to_string(loc.rank) + ", step " +
         std::to_string(loc.step) + ")";
}

} // namespace pipeforge::sched::detail
