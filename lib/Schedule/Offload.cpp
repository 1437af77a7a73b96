//===- Offload.cpp - Activation offload's plan ----------------------------===//
//
// See Offload.h.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Offload.h"

#include <string>

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

bool hasOffloadActions(const std::vector<Action> &program) {
  for (const Action &a : program)
    if (a.isStashCopy())
      return true;
  return false;
}

bool hasOffloadActions(const Schedule &s) {
  for (const std::vector<Action> &prog : s.programs)
    if (hasOffloadActions(prog))
      return true;
  return false;
}

OffloadPlan offloadPlanOf(const std::vector<Action> &program) {
  OffloadPlan plan;
  // The stashes whose OFFLOAD / RELOAD stands since the last compute
  // action: the copy runs under the next one.
  std::vector<StashKey> leaving, coming;
  for (size_t i = 0; i < program.size(); ++i) {
    const Action &a = program[i];
    if (a.isStashCopy()) {
      StashKey k{a.work.copy, a.work.stage, a.work.mb};
      if (a.kind == ActionKind::Offload) {
        plan.keys.insert(k);
        leaving.push_back(k);
      } else {
        coming.push_back(k);
      }
      continue;
    }
    if (!a.isCompute())
      continue;
    if (!leaving.empty())
      plan.awayAfter[i] = std::move(leaving);
    if (!coming.empty())
      plan.reloadBefore[i] = std::move(coming);
    leaving.clear();
    coming.clear();
  }
  return plan;
}

Status insertOffload(Schedule &s, int minGap) {
  if (minGap < 1)
    return Status::error("activation offload's gap must be at least 1 (got " +
                         std::to_string(minGap) + ")");
  if (hasOffloadActions(s))
    return Status::error("the schedule already offloads activations "
                         "(OFFLOAD/RELOAD)");
  for (std::vector<Action> &acts : s.programs) {
    OffloadPlan plan = planOffload(acts, minGap);
    if (plan.empty())
      continue;
    // Where planOffload starts each copy, as positions in `acts`: a copy
    // out right after its F's compute action, a copy back right before
    // the compute action it runs under.
    std::map<size_t, std::vector<Action>> before, after;
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action &a = acts[i];
      if (!a.isCompute())
        continue;
      for (const Work *w :
           {&a.work, a.kind == ActionKind::Overlap ? &a.work2 : nullptr})
        if (w && w->kind == WorkKind::F &&
            plan.keys.count(StashKey{w->copy, w->stage, w->mb}))
          after[i].push_back(Action::offload(*w));
    }
    for (auto &[i, keys] : plan.reloadBefore)
      for (const StashKey &k : keys)
        before[i].push_back(Action::reload(Work(WorkKind::F, std::get<1>(k),
                                                std::get<2>(k),
                                                std::get<0>(k))));
    spliceActions(acts, before, after);
  }
  return Status::ok();
}

} // namespace pipeforge::sched
