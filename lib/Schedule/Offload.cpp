//===- Offload.cpp - Activation offload's plan ----------------------------===//
//
// See Offload.h.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Offload.h"

namespace pipeforge::sched {

OffloadPlan planOffload(const std::vector<Action> &program, int minGap) {
  OffloadPlan plan;
  if (minGap <= 0)
    return plan;
  // Per compute action (Compute or Overlap), in program order: its action
  // index; where each F and each B / BW of a stash is.
  std::vector<size_t> actionOf;
  std::map<StashKey, size_t> fAt, bAt;
  auto note = [&](const Work &w) {
    StashKey k{w.copy, w.stage, w.mb};
    if (w.kind == WorkKind::F)
      fAt.emplace(k, actionOf.size());
    else if (w.kind == WorkKind::B || w.kind == WorkKind::BW)
      bAt.emplace(k, actionOf.size());
  };
  for (size_t i = 0; i < program.size(); ++i) {
    const Action &a = program[i];
    if (a.kind != ActionKind::Compute && a.kind != ActionKind::Overlap)
      continue;
    note(a.work);
    if (a.kind == ActionKind::Overlap)
      note(a.work2);
    actionOf.push_back(i);
  }
  for (auto &[k, f] : fAt) {
    auto b = bAt.find(k);
    if (b == bAt.end() || b->second < f + 1 + size_t(minGap))
      continue;
    plan.keys.insert(k);
    plan.awayAfter[actionOf[f + 1]].push_back(k);
    plan.reloadBefore[actionOf[b->second - 1]].push_back(k);
  }
  return plan;
}

} // namespace pipeforge::sched
