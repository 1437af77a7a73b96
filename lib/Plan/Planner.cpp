//===- Planner.cpp - The sweep over parallel setups
//------------------------===//
//
// Per setup: cut the layers into stages (optimal partition of F+B+W FLOPs),
// turn stage FLOPs into times (FLOPs / (peak x efficiency)), generate the
// schedule, simulate it (T_comm = boundary activation / link bandwidth on
// every cross-rank edge), add the data-parallel ring all-reduce of the
// gradients, and size memory per rank (model state + simulated peak
// activation). See docs/planner.md.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/Planner.h"

#include "pipeforge/Partition/Partition.h"
#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/Generators.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>

using namespace pipeforge;

using namespace pipeforge::plan;
using sched::ScheduleKind;

AutoScheduleFn plan::heuristicAutoScheduler() {
  return [](int ranks, int microbatches, const sched::CostModel &cost,
            double memLimit) -> sched::Expected<sched::Schedule> {
    sched::AutoOptions a;
    a.ranks = ranks;
    a.microbatches = microbatches;
    a.cost = cost;
    a.memLimit = memLimit;
    a.useIlp = false;
    a.searchTimeLimit = 0;
    auto r = sched::autoSchedule(a);
    if (!r)
      return r.status();
    return std::move(r->schedule);
  };
}

const char *plan::layoutName(Layout l) {
  return l == Layout::PipelineInNode ? "pp-in-node" : "dp-in-node";
}

std::vector<ScheduleKind> plan::defaultSchedules(bool withAuto) {
  std::vector<ScheduleKind> kinds = {
      ScheduleKind::OneFOneB,   ScheduleKind::ZBH1,     ScheduleKind::ZBH2,
      ScheduleKind::ZBV,        ScheduleKind::DualPipe, ScheduleKind::DualPipeV,
      ScheduleKind::Interleaved};
  if (withAuto)
    kinds.push_back(ScheduleKind::Auto);
  return kinds;
}

namespace {
std::string fmtInt(long long v) { return std::to_string(v); }

/// Stages per model copy that `kind` needs on p ranks.
int stagesFor(ScheduleKind kind, int p, int chunks) {
  auto l = sched::stageLayoutFor(sched::scheduleKindName(kind), p, chunks);
  return l ? l->stages : p;
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }
} // namespace

Expected<Candidate> plan::evaluate(const ModelCosts &model,
                                   const Cluster &cluster,
                                   const PlanOptions &opts, ScheduleKind kind,
                                   int pp, int b, Layout layout) {
  const int L = static_cast<int>(model.layers.size());
  const char *name = sched::scheduleKindName(kind);
  if (L == 0)
    return Status::error("the model has no layers");
  if (pp < 1 || cluster.gpus % pp != 0)
    return Status::error("pipeline degree " + fmtInt(pp) + " does not divide " +
                         fmtInt(cluster.gpus) + " GPUs");
  if (b < 1)
    return Status::error("microbatch size must be >= 1");
  const int d = cluster.gpus / pp;
  if (opts.globalBatch < 1 || opts.globalBatch % (int64_t(d) * b) != 0)
    return Status::error(
        "global batch " + fmtInt(opts.globalBatch) +
        " is not a multiple of dp x microbatch = " + fmtInt(int64_t(d) * b));
  const int64_t m64 = opts.globalBatch / (int64_t(d) * b);
  if (m64 > 1000000)
    return Status::error("too many microbatches (" + fmtInt(m64) + ")");
  const int m = static_cast<int>(m64);
  const int chunks = std::max(2, opts.chunksPerRank);
  const int S = stagesFor(kind, pp, chunks);
  if (S > L)
    return Status::error(std::string(name) + " with pp=" + fmtInt(pp) +
                         " needs " + fmtInt(S) + " stages but the model has " +
                         fmtInt(L) + " layers");
  if (m < sched::minMicrobatches(kind, pp, chunks))
    return Status::error(std::string(name) + " with pp=" + fmtInt(pp) +
                         " needs at least " +
                         fmtInt(sched::minMicrobatches(kind, pp, chunks)) +
                         " microbatches, got " + fmtInt(m));

  // The optimal cut of F+B+W FLOPs into S stages.
  std::vector<double> layerFlops;
  layerFlops.reserve(L);
  for (const LayerCost &lc : model.layers)
    layerFlops.push_back(lc.totalFlops());
  auto cut = partition::partitionBalanced(layerFlops, S);
  if (!cut)
    return cut.status();

  // Links.
  const bool multiNode = cluster.gpus > cluster.gpusPerNode;
  Candidate c;
  c.kind = kind;
  c.schedule = name;
  c.pp = pp;
  c.dp = d;
  c.microbatchSize = b;
  c.microbatches = m;
  c.stages = S;
  c.layout = layout;
  c.layerSplit = cut->sizes;
  if (multiNode) {
    if (layout == Layout::PipelineInNode) {
      c.ppInterNode = pp > cluster.gpusPerNode;
      c.dpInterNode = d > 1;
    } else {
      c.dpInterNode = d > cluster.gpusPerNode;
      c.ppInterNode = pp > 1;
    }
  }
  const double ppBw =
      (c.ppInterNode ? cluster.interNodeGBps : cluster.intraNodeGBps) * 1e9;
  const double dpBw =
      (c.dpInterNode ? cluster.interNodeGBps : cluster.intraNodeGBps) * 1e9;

  // Stage costs (per microbatch of b sequences).
  const double rate = cluster.flopsPerSecond();
  sched::CostModel cost;
  std::vector<double> stageParams(S, 0);
  double maxBoundary = 0;
  for (int s = 0; s < S; ++s) {
    double f = 0, bi = 0, w = 0, mb = 0, mw = 0, params = 0;
    int first = cut->firstLayer(s);
    for (int l = first; l < first + cut->sizes[s]; ++l) {
      const LayerCost &lc = model.layers[l];
      f += lc.fwdFlops;
      bi += lc.bwdInputFlops;
      w += lc.bwdWeightFlops;
      mb += lc.stashBytes;
      mw += lc.weightStashBytes;
      params += lc.params;
    }
    cost.tfStage.push_back(b * f / rate);
    cost.tbStage.push_back(b * bi / rate);
    cost.twStage.push_back(b * w / rate);
    cost.memBStage.push_back(b * mb);
    cost.memWStage.push_back(b * std::min(mw, mb));
    stageParams[s] = params;
    if (s + 1 < S)
      maxBoundary = std::max(
          maxBoundary, b * model.layers[first + cut->sizes[s] - 1].outputBytes);
  }
  cost.tcomm = pp > 1 ? maxBoundary / ppBw : 0;
  c.commTime = cost.tcomm;

  // The schedule.
  sched::Schedule schedule;
  if (kind == ScheduleKind::Auto) {
    if (!opts.autoScheduler)
      return Status::error("auto: no automatic scheduler is built in");
    // The activation budget: what memory leaves after the model state of the
    // fullest rank (a linear placement).
    double maxParams =
        *std::max_element(stageParams.begin(), stageParams.end());
    double limit = cluster.usableBytes() - maxParams * opts.stateBytesPerParam;
    if (limit <= 0)
      return Status::error("auto: the model state alone exceeds the memory");
    auto s = opts.autoScheduler(pp, m, cost, limit);
    if (!s)
      return Status::error(std::string("auto: ") + s.message());
    schedule = s.take();
  } else {
    sched::GenOptions g;
    g.ranks = pp;
    g.microbatches = m;
    g.chunksPerRank = chunks;
    auto s = sched::generate(kind, g);
    if (!s)
      return Status::error(std::string(name) + " with pp=" + fmtInt(pp) + ", " +
                           fmtInt(m) + " microbatches: " + s.message());
    schedule = s.take();
  }
  if (schedule.placement.numStages != S)
    return Status::error(std::string(name) + ": the schedule has " +
                         fmtInt(schedule.placement.numStages) +
                         " stages, expected " + fmtInt(S));

  auto sim = sched::simulate(schedule, cost);
  if (!sim)
    return Status::error(std::string(name) +
                         ": simulation failed: " + sim.message());

  // Memory per rank: model state of every stage it holds + peak activation.
  const sched::Placement &pl = schedule.placement;
  std::vector<double> rankParams(pp, 0);
  for (int copy = 0; copy < pl.numCopies; ++copy)
    for (int s = 0; s < S; ++s)
      rankParams[pl.rank(copy, s)] += stageParams[s];
  double maxRankParams = 0;
  for (int r = 0; r < pp; ++r) {
    double state = rankParams[r] * opts.stateBytesPerParam;
    double act = sim->ranks[r].peakMemory;
    double total = state + act;
    maxRankParams = std::max(maxRankParams, rankParams[r]);
    if (total > c.memoryBytes || r == 0) {
      c.memoryBytes = total;
      c.paramBytes = state;
      c.activationBytes = act;
    }
  }
  c.fits = c.memoryBytes <= cluster.usableBytes();

  c.pipelineTime = sim->makespan;
  c.bubbleRate = sim->bubbleRate;
  if (pl.numCopies > 1) {
    // Ranks r and p-1-r swap one copy's stage gradients and sum them.
    double maxStage = *std::max_element(stageParams.begin(), stageParams.end());
    c.dualReduceTime = maxStage * opts.gradBytesPerParam / ppBw;
  }
  if (d > 1)
    c.dpTime =
        2.0 * (d - 1) / d * maxRankParams * opts.gradBytesPerParam / dpBw;
  c.stepTime = c.pipelineTime + c.dualReduceTime + c.dpTime;
  if (c.stepTime > 0)
    c.tokensPerSecond =
        double(opts.globalBatch) * double(model.seqLen) / c.stepTime;
  return c;
}

namespace {
/// A strict weak order: step time (to the nanosecond), then memory (to the
/// byte), then simpler setups.
auto rankKey(const Candidate &c) {
  return std::make_tuple(std::llround(c.stepTime * 1e9),
                         std::llround(c.memoryBytes), c.pp, c.microbatchSize,
                         static_cast<int>(c.kind), static_cast<int>(c.layout));
}
} // namespace

Expected<PlanResult> plan::plan(const ModelCosts &model, const Cluster &cluster,
                                const PlanOptions &opts) {
  const int L = static_cast<int>(model.layers.size());
  if (L == 0)
    return Status::error("the model has no layers");
  if (cluster.gpus < 1)
    return Status::error("the cluster has no GPUs");
  if (opts.globalBatch < 1)
    return Status::error("the global batch must be >= 1 sequence");
  if (opts.microbatchSizes.empty())
    return Status::error("no microbatch sizes to try");
  for (int b : opts.microbatchSizes)
    if (b < 1)
      return Status::error("microbatch size " + fmtInt(b) + " must be >= 1");

  std::vector<ScheduleKind> kinds =
      opts.schedules.empty() ? defaultSchedules(bool(opts.autoScheduler))
                             : opts.schedules;
  std::vector<int> degrees = opts.pipelineDegrees;
  if (degrees.empty())
    for (int p = 1; p <= cluster.gpus; ++p)
      if (cluster.gpus % p == 0 && p <= L)
        degrees.push_back(p);
  std::vector<int> sizes = opts.microbatchSizes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

  std::vector<Layout> layouts = {Layout::PipelineInNode};
  if (cluster.gpus > cluster.gpusPerNode)
    layouts.push_back(Layout::DataInNode);

  PlanResult r;
  std::set<std::string> skipped;
  std::vector<Candidate> all;
  for (int p : degrees) {
    int d = cluster.gpus / p;
    for (int b : sizes) {
      if (opts.globalBatch % (int64_t(d) * b) != 0) {
        skipped.insert(
            "pp=" + fmtInt(p) + " b=" + fmtInt(b) + ": global batch " +
            fmtInt(opts.globalBatch) +
            " is not a multiple of dp x b = " + fmtInt(int64_t(d) * b));
        continue;
      }
      // On one rank there is no pipeline: every linear schedule is plain
      // data parallelism, so only the first one listed is evaluated.
      bool pureDpDone = false;
      for (ScheduleKind k : kinds) {
        if (p == 1) {
          bool linear = stagesFor(k, 1, 2) == 1 && k != ScheduleKind::DualPipe;
          if (!linear || pureDpDone)
            continue;
          pureDpDone = true;
        }
        for (Layout lay : layouts) {
          // With p = 1 or d = 1 on one node the layouts coincide.
          if (lay == Layout::DataInNode && (p == 1 || d == 1))
            continue;
          auto c = evaluate(model, cluster, opts, k, p, b, lay);
          if (!c) {
            skipped.insert(c.message());
            continue;
          }
          ++r.evaluated;
          all.push_back(c.take());
        }
      }
    }
  }
  r.skipped.assign(skipped.begin(), skipped.end());
  for (Candidate &c : all)
    (c.fits ? r.ranked : r.overMemory).push_back(std::move(c));
  std::stable_sort(r.ranked.begin(), r.ranked.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return rankKey(a) < rankKey(b);
                   });
  std::stable_sort(
      r.overMemory.begin(), r.overMemory.end(),
      [](const Candidate &a, const Candidate &b) {
        return std::make_tuple(std::llround(a.memoryBytes), rankKey(a)) <
               std::make_tuple(std::llround(b.memoryBytes), rankKey(b));
      });

  if (r.ranked.empty()) {
    if (r.overMemory.empty()) {
      std::string msg = "no setup can be formed for " + fmtInt(cluster.gpus) +
                        " GPUs and a global batch of " +
                        fmtInt(opts.globalBatch);
      size_t shown = 0;
      for (const std::string &s : r.skipped) {
        if (shown++ == 3) {
          msg += "\n  ... (" + fmtInt(r.skipped.size() - 3) + " more)";
          break;
        }
        msg += "\n  " + s;
      }
      return Status::error(msg);
    }
    const Candidate &best = r.overMemory.front();
    char buf[512];
    std::snprintf(
        buf, sizeof buf,
        "infeasible: no setup fits in memory: the smallest need is %.2f GiB "
        "per GPU (%s, pp=%d dp=%d b=%d: %.2f GiB model state + %.2f GiB "
        "activations) but a GPU offers %.2f GiB (memory_gb %.6g - "
        "reserved_memory_gb %.6g); %d setups evaluated",
        gib(best.memoryBytes), best.schedule.c_str(), best.pp, best.dp,
        best.microbatchSize, gib(best.paramBytes), gib(best.activationBytes),
        gib(cluster.usableBytes()), cluster.memoryGiB, cluster.reservedGiB,
        r.evaluated);
    return Status::error(buf);
  }
  return r;
}
