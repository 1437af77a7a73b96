//===- GradReduce.cpp - Data-parallel gradient reduction overlap ----------===//

#include "pipeforge/Plan/GradReduce.h"

#include <algorithm>
#include <limits>

using namespace pipeforge;
using namespace pipeforge::plan;

const char *plan::gradOverlapName(GradOverlap g) {
  switch (g) {
  case GradOverlap::Off:
    return "off";
  case GradOverlap::Stage:
    return "stage";
  case GradOverlap::Layer:
    return "layer";
  }
  return "?";
}

bool plan::parseGradOverlap(const std::string &text, GradOverlap &out) {
  for (GradOverlap g :
       {GradOverlap::Off, GradOverlap::Stage, GradOverlap::Layer})
    if (text == gradOverlapName(g)) {
      out = g;
      return true;
    }
  return false;
}

namespace {
/// The weight-gradient work (W or BW) in action `a`, if any.
const sched::Work *weightWork(const sched::Action &a) {
  auto grads = [](const sched::Work &w) {
    return w.kind == sched::WorkKind::W || w.kind == sched::WorkKind::BW;
  };
  if (a.kind == sched::ActionKind::Compute && grads(a.work))
    return &a.work;
  if (a.kind == sched::ActionKind::Overlap && grads(a.work2))
    return &a.work2;
  return nullptr;
}

struct Ready {
  double at, seconds;
};
} // namespace

GradReduceTiming plan::gradReduceTiming(const sched::Schedule &schedule,
                                        const sched::SimResult &sim,
                                        const StageBuckets &buckets,
                                        double total, GradOverlap mode) {
  GradReduceTiming t;
  t.total = total;
  const sched::Placement &pl = schedule.placement;
  if (mode == GradOverlap::Off || pl.numCopies > 1 || total <= 0) {
    t.exposed = total;
    return t;
  }
  // The end of the last weight-gradient work of every (copy, stage): the
  // simulator's intervals are in start order per rank.
  struct Last {
    const sched::Interval *iv = nullptr;
    bool fused = false; ///< a BW: the whole backward
  };
  std::vector<std::vector<Last>> last(pl.numCopies,
                                      std::vector<Last>(pl.numStages));
  for (const sched::Interval &iv : sim.intervals) {
    const sched::Work *w =
        weightWork(schedule.programs[iv.rank][iv.actionIndex]);
    if (!w || w->copy < 0 || w->copy >= pl.numCopies || w->stage < 0 ||
        w->stage >= pl.numStages)
      continue;
    Last &l = last[w->copy][w->stage];
    if (!l.iv || iv.end >= l.iv->end)
      l = {&iv, w->kind == sched::WorkKind::BW};
  }
  double stepEnd = sim.makespan;
  for (int r = 0; r < pl.numRanks; ++r) {
    std::vector<Ready> ready;
    for (int c = 0; c < pl.numCopies; ++c)
      for (int s = 0; s < pl.numStages; ++s) {
        if (pl.rank(c, s) != r || s >= int(buckets.size()))
          continue;
        const sched::Interval *iv = last[c][s].iv;
        const bool fused = last[c][s].fused;
        const double start = iv ? iv->start : sim.ranks[r].lastEnd;
        const double end = iv ? iv->end : sim.ranks[r].lastEnd;
        const std::vector<GradBucket> &bs = buckets[s];
        double weightSum = 0, seconds = 0;
        auto weight = [&](const GradBucket &b) {
          return fused ? b.bwTime : b.wTime;
        };
        for (const GradBucket &b : bs) {
          weightSum += weight(b);
          seconds += b.seconds;
        }
        if (mode == GradOverlap::Stage || weightSum <= 0) {
          ready.push_back({end, seconds});
          continue;
        }
        // The backward passes the layers last to first.
        double done = 0;
        for (auto it = bs.rbegin(); it != bs.rend(); ++it) {
          done += weight(*it);
          ready.push_back(
              {start + (end - start) * std::min(1.0, done / weightSum),
               it->seconds});
        }
      }
    std::stable_sort(ready.begin(), ready.end(),
                     [](const Ready &a, const Ready &b) { return a.at < b.at; });
    // One link per rank: the reductions run one after another.
    double link = -std::numeric_limits<double>::infinity();
    for (const Ready &x : ready)
      link = std::max(link, x.at) + x.seconds;
    const double end = std::max(sim.ranks[r].lastEnd, link);
    if (end > stepEnd || r == 0) {
      if (end > stepEnd)
        stepEnd = end;
      t.rank = r;
      t.firstReady = ready.empty() ? sim.ranks[r].lastEnd : ready.front().at;
      t.lastCompute = sim.ranks[r].lastEnd;
    }
  }
  t.exposed = std::max(0.0, stepEnd - sim.makespan);
  return t;
}
