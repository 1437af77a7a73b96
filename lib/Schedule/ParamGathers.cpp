//===- ParamGathers.cpp - ZeRO-3's parameter gathers in a schedule --------===//

#include "pipeforge/Schedule/ParamGathers.h"

#include <map>
#include <utility>

namespace pipeforge::sched {

bool hasParamGathers(const Schedule &s) {
  for (const std::vector<Action> &acts : s.programs)
    for (const Action &a : acts)
      if (a.isParamGather())
        return true;
  return false;
}

namespace {
using StageKey = std::pair<int32_t, int32_t>; ///< (copy, stage)

/// The stages compute action `a` works on (one, or an overlapped pair's two).
template <typename Fn> void forEachStage(const Action &a, Fn &&fn) {
  if (a.kind == ActionKind::Compute) {
    fn(StageKey{a.work.copy, a.work.stage});
  } else if (a.kind == ActionKind::Overlap) {
    StageKey f{a.work.copy, a.work.stage}, b{a.work2.copy, a.work2.stage};
    fn(f);
    if (b != f)
      fn(b);
  }
}
} // namespace

Status insertParamGathers(Schedule &s, int prefetch) {
  if (prefetch < 0 || prefetch > kMaxParamPrefetch)
    return Status::error("parameter prefetch " + std::to_string(prefetch) +
                         " is outside [0, " +
                         std::to_string(kMaxParamPrefetch) + "]");
  if (hasParamGathers(s))
    return Status::error("the schedule already gathers its parameters "
                         "(UNSHARD/RESHARD)");
  for (std::vector<Action> &acts : s.programs) {
    // Positions of the compute actions, and each stage's first and last
    // compute action (indices into acts), in order of first use.
    std::vector<size_t> computeAt;
    std::vector<StageKey> order;
    std::map<StageKey, std::pair<size_t, size_t>> span; // first, last action
    std::map<StageKey, size_t> firstCompute;            // index in computeAt
    for (size_t i = 0; i < acts.size(); ++i) {
      if (acts[i].kind != ActionKind::Compute &&
          acts[i].kind != ActionKind::Overlap)
        continue;
      forEachStage(acts[i], [&](StageKey k) {
        auto [it, fresh] = span.try_emplace(k, i, i);
        if (fresh) {
          order.push_back(k);
          firstCompute[k] = computeAt.size();
        }
        it->second.second = i;
      });
      computeAt.push_back(i);
    }
    // before[i]: the UNSHARDs placed before action i; after[i]: the
    // RESHARDs placed after it.
    std::map<size_t, std::vector<Action>> before, after;
    for (const StageKey &k : order) {
      size_t c = firstCompute[k];
      size_t at = c >= size_t(prefetch) ? computeAt[c - size_t(prefetch)] : 0;
      before[at].push_back(Action::unshard(k.second, k.first));
    }
    // RESHARDs after the same action: in order of first use too.
    for (const StageKey &k : order)
      after[span[k].second].push_back(Action::reshard(k.second, k.first));
    spliceActions(acts, before, after);
  }
  return Status::ok();
}

} // namespace pipeforge::sched
