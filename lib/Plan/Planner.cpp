//===- Planner.cpp - The sweep over parallel setups -----------------------===//
//
// Per setup: time each layer on one tensor-parallel rank (a roofline of its
// FLOPs / t and the bytes it moves, plus its tensor-parallel all-reduces and
// recomputation), cut the layers into stages (optimal partition of those
// times), generate the schedule, simulate it (T_comm = boundary activation /
// link bandwidth on every cross-rank edge), add the data-parallel ring
// all-reduce of the gradients, and size memory per rank (model state, ZeRO-1
// sharded or not, + simulated peak activation). See docs/planner.md.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/Planner.h"

#include "pipeforge/Partition/Partition.h"
#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/Generators.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
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
  switch (l) {
  case Layout::PipelineInNode:
    return "pp-in-node";
  case Layout::DataInNode:
    return "dp-in-node";
  case Layout::ExpertInNode:
    return "ep-in-node";
  }
  return "?";
}

bool plan::parseLayout(const std::string &text, Layout &out) {
  for (Layout l :
       {Layout::PipelineInNode, Layout::DataInNode, Layout::ExpertInNode})
    if (text == layoutName(l)) {
      out = l;
      return true;
    }
  return false;
}

DispatchRows plan::nodeLimitedRows(int topK, int nodes, int perNode,
                                   int maxNodes) {
  DispatchRows rows;
  if (topK <= 0)
    return rows;
  const double k = topK, n = std::max(1, nodes), l = std::max(1, perNode);
  rows.nvlink = k * (l - 1) / l;
  if (n <= 1)
    return rows;
  // Expected distinct remote nodes of k experts drawn uniformly over n
  // nodes, and of M nodes drawn uniformly (the own one among them with
  // probability M / n).
  const double uniform = (n - 1) * (1 - std::pow(1 - 1 / n, k));
  const double limited =
      maxNodes > 0 && maxNodes < n ? maxNodes * (n - 1) / n : uniform;
  rows.network = std::min(uniform, limited);
  return rows;
}

Status plan::setRoutingGroups(ModelCosts &model, int groups,
                              int groupsPerToken) {
  if (groups < 1 || groupsPerToken < 1 || groupsPerToken > groups)
    return Status::error("expected G,g with 1 <= g <= G, got '" +
                         std::to_string(groups) + "," + std::to_string(groupsPerToken) + "'");
  if (model.shape.experts <= 0)
    return Status::error("the model has no moe layers");
  if (model.shape.experts % groups != 0)
    return Status::error(std::to_string(groups) + " groups do not divide the " +
                         std::to_string(model.shape.experts) + " experts per layer");
  for (LayerCost &lc : model.layers)
    if (lc.topK > 0) {
      lc.routingGroups = groups > 1 ? groups : 0;
      lc.groupsPerToken = groupsPerToken;
    }
  return Status::ok();
}

int plan::nodeLimit(int groups, int groupsPerToken, int nodes) {
  if (groups <= 0 || groupsPerToken <= 0 || nodes <= 0)
    return 0;
  const int nodesPerGroup = std::max(1, (nodes + groups - 1) / groups);
  return std::min(nodes, groupsPerToken * nodesPerGroup);
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

/// " tp=2 recompute=full zero=1" for what differs from the plain setup.
std::string setupSuffix(const Candidate &c) {
  std::string out;
  if (c.tp > 1)
    out += " tp=" + fmtInt(c.tp);
  if (c.ep > 1)
    out += " ep=" + fmtInt(c.ep);
  if (c.recompute != Recompute::None)
    out += std::string(" recompute=") + recomputeName(c.recompute);
  for (size_t i = 0; i < c.recomputeStages.size(); ++i)
    out += (i ? "+" : " recompute-stages=") + fmtInt(c.recomputeStages[i]);
  if (c.zero)
    out += " zero=" + fmtInt(c.zero);
  return out;
}
} // namespace

const char *plan::recomputeName(Recompute r) {
  switch (r) {
  case Recompute::None:
    return "none";
  case Recompute::Selective:
    return "selective";
  case Recompute::Full:
    return "full";
  }
  return "?";
}

bool plan::parseRecompute(const std::string &text, Recompute &out) {
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    if (text == recomputeName(r)) {
      out = r;
      return true;
    }
  return false;
}

Status plan::checkTensorDegree(const ModelCosts &model, const Cluster &cluster,
                               int t) {
  const std::string tp = "tp=" + fmtInt(t);
  if (t < 1)
    return Status::error(tp + ": the tensor-parallel degree must be >= 1");
  if (t == 1)
    return Status::ok();
  if (cluster.gpusPerNode % t != 0)
    return Status::error(tp + ": does not divide the " +
                         fmtInt(cluster.gpusPerNode) +
                         " GPUs per node (tensor-parallel groups stay inside "
                         "a node)");
  const ModelShape &sh = model.shape;
  if (sh.heads <= 0)
    return Status::error(tp + ": the model's attention heads are unknown");
  // What the Megatron-style split (nn-shard-tensor) divides by t.
  const std::pair<int64_t, const char *> dims[] = {
      {sh.heads, "attention heads"},
      {sh.kvHeads, "KV heads"},
      {sh.ffn, "MLP width"},
      {sh.vocab, "vocabulary (split unpadded)"},
      {model.seqLen, "sequence length (sequence parallelism)"}};
  for (auto [n, what] : dims)
    if (n > 0 && n % t != 0)
      return Status::error(tp + ": does not divide the " + what + " (" +
                           fmtInt(n) + ")");
  return Status::ok();
}

Status plan::checkExpertDegree(const ModelCosts &model, int e, int d) {
  const std::string ep = "ep=" + fmtInt(e);
  if (e < 1)
    return Status::error(ep + ": the expert-parallel degree must be >= 1");
  if (e == 1)
    return Status::ok();
  if (model.shape.experts <= 0)
    return Status::error(ep + ": the model has no mixture-of-experts layers");
  if (model.shape.experts % e != 0)
    return Status::error(ep + ": does not divide the experts per layer (" +
                         fmtInt(model.shape.experts) + ")");
  if (d % e != 0)
    return Status::error(ep + ": does not divide the " + fmtInt(d) +
                         " data-parallel ranks (an expert group is e of them)");
  return Status::ok();
}

namespace {
/// One layer as a tensor-parallel rank runs it for a microbatch of b
/// sequences under a recomputation policy. Times in seconds, memory in
/// bytes.
struct LayerRun {
  double f = 0, b = 0, w = 0; ///< compute (roofline) of F, B, W
  double tpF = 0, tpB = 0;    ///< tensor-parallel all-reduces in F and B
  double epF = 0, epB = 0;    ///< expert all-to-alls in F and B
  double rc = 0;              ///< forward work recomputed in B
  double memB = 0;            ///< kept from F until B (M_B)
  double memBFull = 0;        ///< what F produces for B (without recompute)
  double memW = 0;            ///< kept from B until W (M_W)
  double total() const { return f + b + w + tpF + tpB + epF + epB + rc; }
};

/// Time of the roofline: compute at peak x efficiency, or moving `bytes`
/// through HBM, whichever is slower.
double roofline(double flops, double bytes, double rate, double memBw) {
  return std::max(flops / rate, bytes / memBw);
}

/// Per-layer times and memory of the whole model on one tensor-parallel rank
/// (docs/planner.md, "Searching tensor parallelism, recomputation and
/// ZeRO-1").
/// `allToAll(bytes, layer)`: the time of one expert all-to-all of `layer`
/// in which a rank sends `bytes` (its share of the routed rows, all
/// destinations).
std::vector<LayerRun>
layerRuns(const ModelCosts &model, const Cluster &cl, const PlanOptions &opts,
          int t, int e, Recompute rc, int b,
          const std::function<double(double, const LayerCost &)> &allToAll) {
  const double rate = cl.flopsPerSecond();
  const double memBw = cl.memoryBytesPerSecond();
  const double intraBw = cl.intraNodeGBps * 1e9 * cl.allReduceEfficiency;
  // Ring all-reduce of `bytes` over the t ranks of a node.
  auto allReduce = [&](double bytes) {
    return t > 1 ? 2.0 * (t - 1) / t * bytes / intraBw : 0.0;
  };
  std::vector<LayerRun> out;
  out.reserve(model.layers.size());
  for (const LayerCost &lc : model.layers) {
    LayerRun r;
    // Tensor parallelism divides the FLOPs, the parameters and (roughly:
    // exactly with sequence parallelism) the activations by t.
    // Expert parallelism divides the routed experts' weights by e (each
    // rank runs its experts on the rows every rank of the group sends it).
    const double expert = std::min(lc.expertParams, lc.params);
    const double weights =
        lc.kind == LayerKind::Embedding
            ? 0 // a gather reads only the rows it needs
            : ((lc.params - expert) / t + expert / (double(t) * e)) *
                  opts.weightBytesPerParam;
    // What a compiled stage keeps: no score matrix (the GPU backend's
    // attention, as FlashAttention, computes Q K^T again in B, half the
    // core's forward) and no dropout masks.
    const bool block = lc.kind == LayerKind::Block;
    const double unkept = std::min(lc.unkeptBytes, lc.stashBytes);
    const double stash = lc.stashBytes - unkept;
    const double acts = b * (stash + lc.outputBytes) / t;
    const double rescore = block ? lc.attnCoreFlops / 2 : 0;
    r.f = roofline(b * lc.fwdFlops / t, weights + acts, rate, memBw);
    r.b = roofline(b * (lc.bwdInputFlops + rescore) / t, weights + 2 * acts,
                   rate, memBw);
    r.w = roofline(b * lc.bwdWeightFlops / t, weights + acts, rate, memBw);
    const double hidden = allReduce(b * lc.hiddenBytes);
    switch (lc.kind) {
    case LayerKind::Block: // after attention and after the MLP
      r.tpF = r.tpB = 2 * hidden;
      break;
    case LayerKind::Embedding: // the partial lookups are summed
      r.tpF = hidden;
      break;
    case LayerKind::Head: // the gradient of the replicated LM head input
      r.tpB = hidden;
      break;
    case LayerKind::Other:
      break;
    }
    // Dispatch and combine in F; their gradients (combine, then dispatch)
    // in B. With sequence parallelism a tensor-parallel rank routes its 1/t
    // of the tokens.
    if (e > 1 && lc.routedBytes > 0)
      r.epF = r.epB = 2 * allToAll(b * lc.routedBytes / t, lc);
    r.memBFull = b * stash / t;
    r.memW = b * std::min(lc.weightStashBytes, stash) / t;
    // The runtime's policies (--pp-recompute): selective drops the stashed
    // outputs of norms, activations and dropout, which B redoes from their
    // kept inputs (memory-bound: read the input, write the output); full
    // keeps a block's input and runs its forward again in B.
    double kept = stash;
    if (block && rc == Recompute::Selective) {
      const double dropped = std::min(lc.selectiveBytes, stash);
      kept = stash - dropped;
      r.rc = roofline(0, 2 * b * dropped / t, rate, memBw);
    } else if (block && rc == Recompute::Full) {
      kept = lc.hiddenBytes > 0 ? std::min(lc.hiddenBytes, stash) : stash;
      r.rc = r.f + r.tpF;
      r.epB += r.epF; // the forward's all-to-alls again
    }
    r.memB = b * kept / t;
    out.push_back(r);
  }
  return out;
}
} // namespace

namespace {
/// The generators' schedules depend only on (kind, ranks, microbatches,
/// chunks): a sweep generates each once.
using ScheduleCache = std::map<std::tuple<int, int, int, int>, sched::Schedule>;

/// What the sweep asks of evaluateZeros beyond one setup.
struct SweepHooks {
  /// Auto is not run when a lower bound of its step time is above this.
  double pruneAbove = std::numeric_limits<double>::infinity();
  ScheduleCache *schedules = nullptr; ///< shared generated schedules
  /// Split the idle time into the exposed pipeline communication and the
  /// bubble (a second simulation, without T_comm). The sweep ranks without
  /// it and splits the setups it shows.
  bool splitPipelineComm = true;
};
} // namespace

/// Evaluates one setup for every ZeRO stage in `zeros` (they share the
/// schedule and its times unless the automatic scheduler's memory limit
/// depends on the stage: callers pass one stage for Auto). With
/// `pruneAbove`, the automatic scheduler is not run when a lower bound of
/// the step time exceeds it: the result is then empty. The bound, for a
/// linear placement: rank s cannot start before the first microbatch's F
/// has crossed stages 0..s-1, runs m passes of F, B and W, and after its
/// last B that microbatch's B still crosses stages s-1..0; the gradient
/// all-reduce follows.
static Expected<std::vector<Candidate>>
evaluateZeros(const ModelCosts &model, const Cluster &cluster,
              const PlanOptions &opts, ScheduleKind kind, int pp, int b,
              Layout layout, int t, int e, Recompute recompute,
              const std::vector<int> &recomputeStages,
              const std::vector<int> &zeros, const SweepHooks &hooks = {}) {
  const double pruneAbove = hooks.pruneAbove;
  ScheduleCache *schedules = hooks.schedules;
  const int L = static_cast<int>(model.layers.size());
  const char *name = sched::scheduleKindName(kind);
  if (L == 0)
    return Status::error("the model has no layers");
  if (Status st = checkTensorDegree(model, cluster, t); !st)
    return st;
  if (pp < 1 || cluster.gpus % (int64_t(pp) * t) != 0)
    return Status::error("pipeline degree " + fmtInt(pp) +
                         (t > 1 ? " x tp=" + fmtInt(t) : std::string()) +
                         " does not divide " + fmtInt(cluster.gpus) + " GPUs");
  if (b < 1)
    return Status::error("microbatch size must be >= 1");
  const int d = cluster.gpus / (pp * t);
  if (Status st = checkExpertDegree(model, e, d); !st)
    return st;
  const int dE = d / e; // replicas of an expert shard
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
  const double optimizerPerParam =
      std::max(0.0, opts.stateBytesPerParam - opts.weightBytesPerParam -
                        opts.gradStateBytesPerParam);

  // Links. Tensor-parallel groups fill nodes first (tensor index fastest in
  // the GPU numbering), so pipelines and replicas see nodes of
  // GPUs-per-node / t. The d data-parallel ranks are (replica, expert)
  // pairs, numbered as the runtime's rank layouts do (docs/multi-node.md):
  // pp-in-node ((replica x e + expert) x p + pipeline) x t + tensor,
  // dp-in-node ((pipeline x e + expert) x d/e + replica) x t + tensor.
  const bool multiNode = cluster.gpus > cluster.gpusPerNode;
  const int nodeSize = std::max(1, cluster.gpusPerNode / t);
  // How many of `count` ranks `spacing` GPUs apart share a node.
  auto perNode = [&](int64_t spacing, int count) {
    if (!multiNode)
      return count;
    return spacing >= cluster.gpusPerNode
               ? 1
               : std::min<int>(count, int(cluster.gpusPerNode / spacing));
  };
  Candidate c;
  c.kind = kind;
  c.schedule = name;
  c.pp = pp;
  c.dp = d;
  c.tp = t;
  c.ep = e;
  c.recompute = recompute;
  c.microbatchSize = b;
  c.microbatches = m;
  c.stages = S;
  c.layout = layout;
  int epLocal = e, expertReplicasLocal = dE;
  if (multiNode) {
    if (layout == Layout::PipelineInNode) {
      c.ppInterNode = pp > nodeSize;
      c.dpInterNode = d > 1;
      epLocal = perNode(int64_t(pp) * t, e);
      expertReplicasLocal = perNode(int64_t(pp) * t * e, dE);
    } else if (layout == Layout::DataInNode) {
      c.dpInterNode = d > nodeSize;
      c.ppInterNode = pp > 1;
      epLocal = perNode(int64_t(dE) * t, e);
      expertReplicasLocal = perNode(t, dE);
    } else {
      // ((pipeline x d/e + replica) x e + expert) x t + tensor.
      c.dpInterNode = d > nodeSize;
      c.ppInterNode = pp > 1;
      epLocal = perNode(t, e);
      expertReplicasLocal = perNode(int64_t(e) * t, dE);
    }
  }
  c.epInterNode = epLocal < e;
  c.epNodes = (e + epLocal - 1) / epLocal;
  if (e > 1)
    for (const LayerCost &lc : model.layers)
      if (lc.topK > 0 && lc.routingGroups > 0)
        c.epNodeLimit =
            nodeLimit(lc.routingGroups, lc.groupsPerToken, c.epNodes);
  // Link bandwidths, each at the achieved fraction of its kind of transfer.
  const double intraBw = cluster.intraNodeGBps * 1e9;
  const double interBw = cluster.interNodeGBps * 1e9;
  const double ppBw =
      (c.ppInterNode ? interBw : intraBw) * cluster.p2pEfficiency;
  const double dpBw =
      (c.dpInterNode ? interBw : intraBw) * cluster.allReduceEfficiency;
  const double expertDpBw = (expertReplicasLocal < dE ? interBw : intraBw) *
                            cluster.allReduceEfficiency;
  // An all-to-all over the expert group: of what a rank sends, (local - 1)
  // / e goes over NVLink and (e - local) / e over the network, at once.
  // Under group-limited routing whose groups sit on nodes (nodeLimit), a
  // row crosses the network once per distinct remote node and NVLink
  // forwards it (nodeLimitedRows): the two links at once.
  auto allToAll = [&](double bytes, const LayerCost &lc) {
    const double eff = cluster.allToAllEfficiency;
    const int limit =
        nodeLimit(lc.routingGroups, lc.groupsPerToken, c.epNodes);
    if (limit > 0 && lc.topK > 0) {
      DispatchRows rows =
          nodeLimitedRows(lc.topK, c.epNodes, epLocal, limit);
      const double row = bytes / lc.topK;
      return std::max(row * rows.nvlink / (intraBw * eff),
                      row * rows.network / (interBw * eff));
    }
    double intra = bytes * (epLocal - 1) / e / (intraBw * eff);
    double inter =
        epLocal < e ? bytes * (e - epLocal) / e / (interBw * eff) : 0;
    return std::max(intra, inter);
  };

  // Per-layer times on one tensor-parallel rank, and the optimal cut of
  // their sum into S stages.
  // DualPipe's overlapped F&B pairs run one microbatch's all-to-alls while
  // the other computes: in a pair only what exceeds the pair's compute
  // stays exposed. The pairs are the steady phase (step 4): per direction
  // C/2 - p + h + 1 of a rank's C/2 forwards (DualPipeV: C - 2p + h + 1 of
  // C), h the rank's distance from the end, averaged over the ranks;
  // warm-up and drain run unpaired.
  double overlapped = 0;
  if (e > 1 &&
      (kind == ScheduleKind::DualPipe || kind == ScheduleKind::DualPipeV)) {
    double pairs, passes;
    if (kind == ScheduleKind::DualPipe) {
      passes = m / 2.0;
      pairs = passes - pp + 1 + (pp / 2.0 - 1) / 2;
    } else {
      passes = m;
      pairs = passes - 2.0 * pp + 1 + (pp - 1) / 2.0;
    }
    overlapped = std::clamp(pairs / passes, 0.0, 1.0);
  }
  auto runsUnder = [&](Recompute rc) {
    std::vector<LayerRun> runs =
        layerRuns(model, cluster, opts, t, e, rc, b, allToAll);
    for (LayerRun &r : runs) {
      const double a2a = r.epF + r.epB;
      if (overlapped <= 0 || a2a <= 0)
        continue;
      const double excess = std::max(0.0, a2a - (r.f + r.b + r.w + r.rc));
      const double keep = (1 - overlapped) + overlapped * excess / a2a;
      r.epF *= keep;
      r.epB *= keep;
    }
    return runs;
  };
  // With recomputation on some stages only, the layers are cut as without
  // it and those stages' layers then recompute.
  std::vector<int> rcOnly = recomputeStages;
  std::sort(rcOnly.begin(), rcOnly.end());
  rcOnly.erase(std::unique(rcOnly.begin(), rcOnly.end()), rcOnly.end());
  for (int s : rcOnly)
    if (s < 0 || s >= S)
      return Status::error("recompute stage " + fmtInt(s) + " is not one of " +
                           std::string(name) + "'s " + fmtInt(S) +
                           " stages (0.." + fmtInt(S - 1) + ")");
  const bool partial = recompute != Recompute::None && !rcOnly.empty();
  std::vector<LayerRun> runs = runsUnder(partial ? Recompute::None : recompute);
  std::vector<double> layerTime;
  layerTime.reserve(L);
  for (const LayerRun &r : runs)
    layerTime.push_back(r.total());
  auto cut = partition::partitionBalanced(layerTime, S);
  if (!cut)
    return cut.status();
  c.layerSplit = cut->sizes;
  if (partial) {
    std::vector<LayerRun> redo = runsUnder(recompute);
    for (int s : rcOnly)
      for (int l = cut->firstLayer(s); l < cut->firstLayer(s) + cut->sizes[s];
           ++l)
        runs[l] = redo[l];
    c.recomputeStages = rcOnly;
  }

  // Model state bytes of `dense` replicated and `experts` expert-shard
  // parameters: weights and gradients, and the optimizer state. ZeRO-1
  // shards it over the runtime's data-parallel group, the d / e replicas
  // of an expert rank (pipeforge-run --zero 1), for dense and expert
  // parameters alike: the expert ranks are not in that group.
  // With PlanOptions::zeroDenseOverAll (Megatron's distributed optimizer,
  // DeepSeek-V3) the dense parameters' state is sharded over all d ranks.
  auto optimizerBytes = [&](double dense, double experts, int zero) {
    if (!zero)
      return optimizerPerParam * (dense + experts);
    return optimizerPerParam *
           (dense / (opts.zeroDenseOverAll ? d : dE) + experts / dE);
  };
  // Ring all-reduce of `params` gradients over n replicas.
  auto ring = [&](int n, double params, double bw) {
    return n > 1 ? 2.0 * (n - 1) / n * params * opts.gradBytesPerParam / bw
                 : 0.0;
  };
  // One layer's bucket: its dense gradients over d replicas, its expert
  // shards' over d / e (GradReduce.h).
  auto layerReduce = [&](int l) {
    const LayerCost &lc = model.layers[l];
    const double expert = std::min(lc.expertParams, lc.params);
    return ring(d, (lc.params - expert) / t, dpBw) +
           ring(dE, expert / (double(t) * e), expertDpBw);
  };
  auto stateBytes = [&](double dense, double experts, int zero) {
    return (dense + experts) *
               (opts.weightBytesPerParam + opts.gradStateBytesPerParam) +
           optimizerBytes(dense, experts, zero);
  };

  // Stage costs (per microbatch of b sequences, per tensor-parallel rank).
  sched::CostModel cost;
  // Parameters per stage on one rank: the dense ones (replicated over the
  // d ranks) and the expert shards (replicated over d / e).
  std::vector<double> stageParams(S, 0), stageExperts(S, 0);
  double maxBoundary = 0, computeSum = 0, tpSum = 0, epSum = 0, rcSum = 0;
  double transient = 0; // largest rematerialisation during one B
  for (int s = 0; s < S; ++s) {
    double f = 0, bi = 0, w = 0, mb = 0, mbFull = 0, mw = 0, params = 0,
           experts = 0;
    int first = cut->firstLayer(s);
    for (int l = first; l < first + cut->sizes[s]; ++l) {
      const LayerRun &r = runs[l];
      f += r.f + r.tpF + r.epF;
      bi += r.b + r.tpB + r.epB + r.rc;
      w += r.w;
      mb += r.memB;
      mbFull += r.memBFull;
      mw += r.memW;
      computeSum += r.f + r.b + r.w;
      tpSum += r.tpF + r.tpB;
      epSum += r.epF + r.epB;
      rcSum += r.rc;
      transient = std::max(transient, r.memBFull - r.memB);
      const LayerCost &lc = model.layers[l];
      const double expert = std::min(lc.expertParams, lc.params);
      params += (lc.params - expert) / t;
      experts += expert / (double(t) * e);
    }
    cost.tfStage.push_back(f);
    cost.tbStage.push_back(bi);
    cost.twStage.push_back(w);
    cost.memBStage.push_back(mb);
    // W keeps M_W; with recomputation B rebuilds it (B then allocates
    // M_W - M_B when that is positive).
    cost.memWStage.push_back(std::min(mw, mbFull));
    stageParams[s] = params + experts;
    stageExperts[s] = experts;
    // With sequence parallelism each tensor-parallel rank sends its 1/t of
    // the boundary activation.
    if (s + 1 < S)
      maxBoundary =
          std::max(maxBoundary,
                   b * model.layers[first + cut->sizes[s] - 1].outputBytes / t);
  }
  cost.tcomm = pp > 1 ? maxBoundary / ppBw : 0;
  c.commTime = cost.tcomm;

  // The schedule.
  sched::Schedule generated;
  const sched::Schedule *schedule = &generated;
  if (kind == ScheduleKind::Auto) {
    if (!opts.autoScheduler)
      return Status::error("auto: no automatic scheduler is built in");
    // The activation budget: what memory leaves after the model state of the
    // fullest rank (a linear placement, stage s on rank s).
    const int zero = zeros.empty() ? 0 : zeros.front();
    double pipeBound = 0, gradBound = 0, maxState = 0, fill = 0, drain = 0;
    // Per stage: the earliest its last B can end (from stage s on), the
    // earliest all its work can be done, and the B time before it.
    std::vector<double> lastB(S, 0), busyEnd(S, 0), drains(S, 0);
    for (int s = 0; s < S; ++s) {
      const double tf = cost.tfStage[s], tb = cost.tbStage[s],
                   tw = cost.twStage[s];
      pipeBound = std::max(pipeBound, fill + std::max(m * (tf + tb + tw),
                                                      m * (tf + tb) + drain));
      // Stage s's last B, and with it the way back to every earlier stage.
      drains[s] = drain;
      busyEnd[s] = fill + m * (tf + tb + tw);
      for (int r = 0; r <= s; ++r)
        lastB[r] = std::max(lastB[r], fill + m * (tf + tb) + drain - drains[r]);
      fill += tf + cost.tcomm;
      drain += tb + cost.tcomm;
      const double dense = stageParams[s] - stageExperts[s];
      if (opts.gradOverlap == GradOverlap::Off)
        gradBound =
            std::max(gradBound, ring(d, dense, dpBw) +
                                    ring(dE, stageExperts[s], expertDpBw));
      maxState = std::max(maxState, stateBytes(dense, stageExperts[s], zero));
    }
    if (opts.gradOverlap != GradOverlap::Off) {
      // Overlapped (GradReduce.cpp), a stage's buckets are ready no earlier
      // than the start of its last W (or BW). That work ends after the
      // stage's last B and after all the stage's work, and lasts tw (tb +
      // tw for a BW). The buckets queue one after another on the rank's
      // link (one stage per rank in the linear placement).
      for (int s = 0; s < S; ++s) {
        double all = 0;
        for (int l = cut->firstLayer(s); l < cut->firstLayer(s) + cut->sizes[s];
             ++l)
          all += layerReduce(l);
        const double tb = cost.tbStage[s], tw = cost.twStage[s];
        const double lastStart = std::max(lastB[s] - tb, busyEnd[s] - tb - tw);
        gradBound = std::max(gradBound, lastStart + all - pipeBound);
      }
    }
    // Compared at the ranking's resolution (ns): a bound that equals the
    // threshold can tie it, and ties go to less memory.
    if (std::isfinite(pruneAbove) &&
        std::llround((pipeBound + gradBound) * 1e9) >
            std::llround(pruneAbove * 1e9))
      return std::vector<Candidate>{};
    double limit = cluster.usableBytes() - maxState - transient;
    if (limit <= 0)
      return Status::error("auto: the model state alone exceeds the memory");
    auto s = opts.autoScheduler(pp, m, cost, limit);
    if (!s)
      return Status::error(std::string("auto: ") + s.message());
    generated = s.take();
  } else {
    const auto key = std::make_tuple(int(kind), pp, m, chunks);
    if (auto hit = schedules ? schedules->find(key) : ScheduleCache::iterator();
        schedules && hit != schedules->end()) {
      schedule = &hit->second;
    } else {
      sched::GenOptions g;
      g.ranks = pp;
      g.microbatches = m;
      g.chunksPerRank = chunks;
      auto s = sched::generate(kind, g);
      if (!s)
        return Status::error(std::string(name) + " with pp=" + fmtInt(pp) +
                             ", " + fmtInt(m) +
                             " microbatches: " + s.message());
      generated = s.take();
      if (schedules)
        schedule = &schedules->emplace(key, std::move(generated)).first->second;
    }
  }
  c.chunks = S * schedule->placement.numCopies / pp;
  if (schedule->placement.numStages != S)
    return Status::error(std::string(name) + ": the schedule has " +
                         fmtInt(schedule->placement.numStages) +
                         " stages, expected " + fmtInt(S));

  auto sim = sched::simulate(*schedule, cost);
  if (!sim)
    return Status::error(std::string(name) +
                         ": simulation failed: " + sim.message());

  c.pipelineTime = sim->makespan;
  c.bubbleRate = sim->bubbleRate;
  const sched::Placement &pl = schedule->placement;
  if (pl.numCopies > 1) {
    // Ranks r and p-1-r swap one copy's stage gradients and sum them.
    double maxStage = *std::max_element(stageParams.begin(), stageParams.end());
    c.dualReduceTime = maxStage * opts.gradBytesPerParam / ppBw;
  }

  // Parameters per rank (every stage it holds); the gradient all-reduce of
  // the busiest rank: the dense gradients over d replicas, the expert
  // shards' over d / e.
  std::vector<double> rankParams(pp, 0), rankExperts(pp, 0);
  for (int copy = 0; copy < pl.numCopies; ++copy)
    for (int s = 0; s < S; ++s) {
      rankParams[pl.rank(copy, s)] += stageParams[s];
      rankExperts[pl.rank(copy, s)] += stageExperts[s];
    }
  for (int r = 0; r < pp; ++r)
    c.dpReduceTime = std::max(c.dpReduceTime,
                              ring(d, rankParams[r] - rankExperts[r], dpBw) +
                                  ring(dE, rankExperts[r], expertDpBw));
  // What the step sees of it: the reductions start as the last microbatches'
  // weight gradients are done (GradReduce.h), one bucket per layer.
  StageBuckets buckets(S);
  for (int s = 0; s < S; ++s)
    for (int l = cut->firstLayer(s); l < cut->firstLayer(s) + cut->sizes[s];
         ++l) {
      const LayerRun &r = runs[l];
      buckets[s].push_back(
          {r.w, r.b + r.tpB + r.epB + r.rc + r.w, layerReduce(l)});
    }
  const GradReduceTiming grad = gradReduceTiming(
      *schedule, *sim, buckets, c.dpReduceTime, opts.gradOverlap);
  c.gradOverlap = pl.numCopies > 1 ? GradOverlap::Off : opts.gradOverlap;
  c.dpTime = grad.exposed;
  c.dpTailRank = grad.rank;
  c.dpOverlapWindow = std::max(0.0, grad.lastCompute - grad.firstReady);
  c.stepTime = c.pipelineTime + c.dualReduceTime + c.dpTime;
  if (c.stepTime > 0) {
    c.tokensPerSecond =
        double(opts.globalBatch) * double(model.seqLen) / c.stepTime;
    double modelFlops = 0;
    for (const LayerCost &lc : model.layers)
      modelFlops += lc.totalFlops();
    modelFlops *= double(opts.globalBatch);
    c.mfu = modelFlops /
            (double(cluster.gpus) * cluster.peakTflops * 1e12 * c.stepTime);
  }

  // The step split. Every microbatch runs every stage once, so the ranks'
  // busy time adds up to m x the stage sums; averaged over the p ranks.
  c.computeTime = m * computeSum / pp;
  c.tpCommTime = m * tpSum / pp;
  c.epCommTime = m * epSum / pp;
  c.recomputeTime = m * rcSum / pp;
  const double idle =
      std::max(0.0, c.pipelineTime - c.computeTime - c.tpCommTime -
                        c.epCommTime - c.recomputeTime);
  if (cost.tcomm > 0 && hooks.splitPipelineComm) {
    sched::CostModel noComm = cost;
    noComm.tcomm = 0;
    auto sim0 = sched::simulate(*schedule, noComm);
    if (!sim0)
      return Status::error(std::string(name) +
                           ": simulation failed: " + sim0.message());
    c.ppCommTime = std::clamp(c.pipelineTime - sim0->makespan, 0.0, idle);
  }
  c.bubbleTime = idle - c.ppCommTime;
  c.dpCommTime = c.dpTime + c.dualReduceTime;

  // Memory per rank, per ZeRO stage: model state of every stage it holds +
  // peak activation (+ the one layer B rematerialises, with recomputation).
  std::vector<Candidate> out;
  for (int zero : zeros) {
    Candidate z = c;
    z.zero = zero;
    std::vector<char> over(pp, 0);
    for (int r = 0; r < pp; ++r) {
      const double dense = rankParams[r] - rankExperts[r];
      double state = stateBytes(dense, rankExperts[r], zero);
      double act = sim->ranks[r].peakMemory + transient;
      double total = state + act;
      over[r] = total > cluster.usableBytes();
      if (total > z.memoryBytes || r == 0) {
        z.memoryBytes = total;
        z.paramBytes = state;
        z.activationBytes = act;
        z.weightBytes = rankParams[r] * opts.weightBytesPerParam;
        z.gradBytes = rankParams[r] * opts.gradStateBytesPerParam;
        z.optimizerBytes = optimizerBytes(dense, rankExperts[r], zero);
      }
    }
    z.fits = z.memoryBytes <= cluster.usableBytes();
    // DualPipe's second copy: the copy-1 stage a rank holds beside its
    // copy-0 stage.
    if (pl.numCopies > 1)
      for (int s = 0; s < S; ++s) {
        const double bytes =
            stateBytes(stageParams[s] - stageExperts[s], stageExperts[s], zero);
        if (bytes > z.secondCopyBytes) {
          z.secondCopyBytes = bytes;
          z.secondCopyParams = stageParams[s];
        }
      }
    for (int s = 0; s < S; ++s)
      for (int copy = 0; copy < pl.numCopies; ++copy)
        if (over[pl.rank(copy, s)]) {
          z.stagesOverMemory.push_back(s);
          break;
        }
    out.push_back(std::move(z));
  }
  return out;
}

Expected<Candidate> plan::evaluate(const ModelCosts &model,
                                   const Cluster &cluster,
                                   const PlanOptions &opts, ScheduleKind kind,
                                   int pp, int b, Layout layout,
                                   const SetupOptions &setup) {
  if (setup.zero != 0 && setup.zero != 1)
    return Status::error("ZeRO stage " + fmtInt(setup.zero) +
                         ": only 0 and 1 are modelled");
  auto r = evaluateZeros(model, cluster, opts, kind, pp, b, layout, setup.tp,
                         setup.ep, setup.recompute, setup.recomputeStages,
                         {setup.zero});
  if (!r)
    return r.status();
  return std::move(r->front());
}

namespace {
/// A strict weak order: step time (to the nanosecond), then memory (to the
/// byte), then simpler setups (fewer stages, less tensor parallelism, ...).
auto rankKey(const Candidate &c) {
  return std::make_tuple(
      std::llround(c.stepTime * 1e9), std::llround(c.memoryBytes), c.pp, c.tp,
      c.ep, c.microbatchSize, static_cast<int>(c.kind), c.chunks,
      static_cast<int>(c.layout), static_cast<int>(c.recompute),
      // Recomputing fewer stages is simpler (empty: every stage).
      c.recomputeStages.empty() ? c.stages : int(c.recomputeStages.size()),
      c.zero);
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

  if (opts.stateBytesPerParam <
      opts.weightBytesPerParam + opts.gradStateBytesPerParam)
    return Status::error("the model state per parameter (" +
                         std::to_string(opts.stateBytesPerParam) +
                         " bytes) is less than its weights and gradients");

  std::vector<ScheduleKind> kinds =
      opts.schedules.empty() ? defaultSchedules(bool(opts.autoScheduler))
                             : opts.schedules;
  std::set<std::string> skipped;
  std::vector<int> tps = opts.tensorDegrees;
  std::sort(tps.begin(), tps.end());
  tps.erase(std::unique(tps.begin(), tps.end()), tps.end());
  if (tps.empty()) {
    for (int t = 1; t <= cluster.gpusPerNode; ++t)
      if (checkTensorDegree(model, cluster, t) && cluster.gpus % t == 0)
        tps.push_back(t);
  } else {
    // Requested degrees the model or the cluster rule out are reported.
    std::vector<int> ok;
    for (int t : tps) {
      if (Status st = checkTensorDegree(model, cluster, t); !st)
        skipped.insert(st.message());
      else if (cluster.gpus % t != 0)
        skipped.insert("tp=" + fmtInt(t) + ": does not divide " +
                       fmtInt(cluster.gpus) + " GPUs");
      else
        ok.push_back(t);
    }
    tps = ok;
  }
  std::vector<Recompute> policies = opts.recomputePolicies;
  if (policies.empty()) {
    // Recomputation applies to transformer blocks; without any, the
    // policies are all the same setup.
    bool blocks = std::any_of(
        model.layers.begin(), model.layers.end(),
        [](const LayerCost &l) { return l.kind == LayerKind::Block; });
    policies = {Recompute::None};
    if (blocks)
      policies.insert(policies.end(), {Recompute::Selective, Recompute::Full});
  }
  // `none` first: its setups decide the stages a policy is also tried on
  // alone (per-stage recomputation).
  auto sortUnique = [](auto &v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  sortUnique(policies);
  std::vector<int> zeroStages = opts.zeroStages;
  if (zeroStages.empty())
    zeroStages = {0, 1};
  for (int z : zeroStages)
    if (z != 0 && z != 1)
      return Status::error("ZeRO stage " + fmtInt(z) +
                           ": only 0 and 1 are modelled");
  // Interleaved 1F1B once per chunk count v (virtual stages), each with
  // its own options (PlanOptions::chunksPerRank is one evaluation's v).
  std::vector<int> chunkCounts = opts.chunkCounts;
  if (chunkCounts.empty())
    chunkCounts = {opts.chunksPerRank};
  std::sort(chunkCounts.begin(), chunkCounts.end());
  chunkCounts.erase(std::unique(chunkCounts.begin(), chunkCounts.end()),
                    chunkCounts.end());
  std::vector<PlanOptions> chunkOpts;
  for (int v : chunkCounts) {
    if (v < 2)
      return Status::error("interleaved: " + fmtInt(v) +
                           " chunks per rank (at least 2)");
    chunkOpts.push_back(opts);
    chunkOpts.back().chunksPerRank = v;
  }
  std::vector<int> sizes = opts.microbatchSizes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

  // On one node the layouts coincide.
  std::vector<Layout> layouts = {Layout::PipelineInNode};
  if (cluster.gpus > cluster.gpusPerNode) {
    layouts = opts.layouts;
    if (layouts.empty())
      layouts = {Layout::PipelineInNode, Layout::DataInNode};
    sortUnique(layouts);
  }

  PlanResult r;
  std::vector<Candidate> all;
  // The automatic scheduler's runs, done after the generators' setups (it
  // costs far more: it is pruned against their times).
  struct AutoRun {
    int p, b, t, e;
    Layout lay;
    Recompute rc;
    int zero;
  };
  std::vector<AutoRun> autoRuns;
  ScheduleCache schedules;
  SweepHooks sweep;
  sweep.schedules = &schedules;
  sweep.splitPipelineComm = false;
  // A setup without recomputation that is over memory on some of its ranks
  // only: the stages those ranks hold, where a recomputation policy is then
  // also tried alone (per-stage recomputation). Keyed by (t, p, e, b,
  // schedule, layout, interleaved chunks, ZeRO stage).
  using SetupKey = std::tuple<int, int, int, int, int, int, int, int>;
  std::map<SetupKey, std::vector<int>> overStages;
  auto add = [&](Expected<std::vector<Candidate>> c) {
    if (!c) {
      skipped.insert(c.message());
      return;
    }
    for (Candidate &cand : *c) {
      ++r.evaluated;
      if (cand.recompute == Recompute::None && !cand.fits &&
          !cand.stagesOverMemory.empty() &&
          int(cand.stagesOverMemory.size()) < cand.stages)
        overStages[{cand.tp, cand.pp, cand.ep, cand.microbatchSize,
                    int(cand.kind), int(cand.layout),
                    cand.kind == ScheduleKind::Interleaved ? cand.chunks : 0,
                    cand.zero}] = cand.stagesOverMemory;
      all.push_back(std::move(cand));
    }
  };
  // One setup under policy rc on every stage, and (rc != none) on only the
  // stages whose ranks the same setup without recomputation overfills.
  auto runSetup = [&](const PlanOptions &o, ScheduleKind k, int p, int b,
                      Layout lay, int t, int e, Recompute rc,
                      const std::vector<int> &zeros) {
    add(evaluateZeros(model, cluster, o, k, p, b, lay, t, e, rc, {}, zeros,
                      sweep));
    if (rc == Recompute::None)
      return;
    for (int z : zeros) {
      auto it = overStages.find(
          {t, p, e, b, int(k), int(lay),
           k == ScheduleKind::Interleaved ? o.chunksPerRank : 0, z});
      if (it != overStages.end())
        add(evaluateZeros(model, cluster, o, k, p, b, lay, t, e, rc, it->second,
                          {z}, sweep));
    }
  };
  auto pipelineDegrees = [&](int t) {
    std::vector<int> degrees = opts.pipelineDegrees;
    if (degrees.empty())
      for (int p = 1; p <= cluster.gpus / t; ++p)
        if ((cluster.gpus / t) % p == 0 && p <= L)
          degrees.push_back(p);
    sortUnique(degrees);
    return degrees;
  };
  int groups = 0, groupsDone = 0;
  for (int t : tps)
    groups += int(pipelineDegrees(t).size() * policies.size());
  for (int t : tps) {
    const std::vector<int> degrees = pipelineDegrees(t);
    for (Recompute rc : policies) {
      for (int p : degrees) {
        if (opts.progress)
          opts.progress("setup groups", groupsDone, groups, r.evaluated);
        ++groupsDone;
        if ((cluster.gpus / t) % p != 0) {
          skipped.insert("pp=" + fmtInt(p) + " tp=" + fmtInt(t) +
                         ": p x t does not divide " + fmtInt(cluster.gpus) +
                         " GPUs");
          continue;
        }
        int d = cluster.gpus / (p * t);
        // Expert-parallel degrees: what the model and d allow.
        std::vector<int> eps;
        if (opts.expertDegrees.empty()) {
          for (int e = 1; e <= d; ++e)
            if (checkExpertDegree(model, e, d))
              eps.push_back(e);
        } else {
          for (int e : opts.expertDegrees) {
            if (Status st = checkExpertDegree(model, e, d); !st)
              skipped.insert("pp=" + fmtInt(p) + " tp=" + fmtInt(t) + " " +
                             st.message());
            else
              eps.push_back(e);
          }
          sortUnique(eps);
        }
        for (int e : eps) {
          // ZeRO-1 shards over the d / e replicas: with one it is stage 0.
          std::vector<int> zeros;
          for (int z : zeroStages)
            if (z == 0 || d / e > 1)
              zeros.push_back(z);
          if (zeros.empty())
            continue;
          for (int b : sizes) {
            if (opts.globalBatch % (int64_t(d) * b) != 0) {
              skipped.insert(
                  "pp=" + fmtInt(p) + " tp=" + fmtInt(t) + " b=" + fmtInt(b) +
                  ": global batch " + fmtInt(opts.globalBatch) +
                  " is not a multiple of dp x b = " + fmtInt(int64_t(d) * b));
              continue;
            }
            // On one rank there is no pipeline: every linear schedule is plain
            // data parallelism, so only the first one listed is evaluated.
            bool pureDpDone = false;
            for (ScheduleKind k : kinds) {
              if (p == 1) {
                bool linear =
                    stagesFor(k, 1, 2) == 1 && k != ScheduleKind::DualPipe &&
                    k != ScheduleKind::Chimera;
                if (!linear || pureDpDone)
                  continue;
                pureDpDone = true;
              }
              for (Layout lay : layouts) {
                // With p = 1 or d = 1 the layouts coincide (unless an expert
                // group and the replicas of its shards take turns inside
                // the node).
                if (lay == Layout::DataInNode &&
                    ((p == 1 && (e == 1 || e == d)) || d == 1))
                  continue;
                // Expert ranks fastest differs from dp-in-node only when
                // the group is some of the d ranks.
                if (lay == Layout::ExpertInNode && !(e > 1 && e < d))
                  continue;
                // The automatic scheduler's memory budget depends on the ZeRO
                // stage: one run each. The generators' schedules are shared.
                if (k == ScheduleKind::Auto) {
                  for (int z : zeros)
                    autoRuns.push_back({p, b, t, e, lay, rc, z});
                  continue;
                }
                if (k == ScheduleKind::Interleaved) {
                  for (const PlanOptions &o : chunkOpts)
                    runSetup(o, k, p, b, lay, t, e, rc, zeros);
                  continue;
                }
                runSetup(opts, k, p, b, lay, t, e, rc, zeros);
              }
            }
          }
        }
      }
    }
  }
  // Auto cannot enter the list (top N, at least the recommendation and the
  // runner-up) when its lower bound is above the N-th fastest setup that
  // fits; such runs are counted as pruned.
  if (!autoRuns.empty()) {
    std::vector<double> fitTimes;
    for (const Candidate &c : all)
      if (c.fits)
        fitTimes.push_back(c.stepTime);
    // Each setup can come twice (ZeRO-1 and 0, the same times), so twice
    // the shown setups keep the runner-up too.
    size_t keep = 2 * size_t(std::max(2, opts.topN));
    double threshold = std::numeric_limits<double>::infinity();
    if (fitTimes.size() >= keep) {
      std::nth_element(fitTimes.begin(), fitTimes.begin() + (keep - 1),
                       fitTimes.end());
      threshold = fitTimes[keep - 1];
    }
    SweepHooks pruneAt = sweep;
    pruneAt.pruneAbove = threshold;
    for (size_t i = 0; i < autoRuns.size(); ++i) {
      const AutoRun &a = autoRuns[i];
      if (opts.progress)
        opts.progress("auto runs", int(i), int(autoRuns.size()), r.evaluated);
      auto c = evaluateZeros(model, cluster, opts, ScheduleKind::Auto, a.p, a.b,
                             a.lay, a.t, a.e, a.rc, {}, {a.zero}, pruneAt);
      if (c && c->empty()) {
        ++r.pruned;
        continue;
      }
      add(std::move(c));
    }
  }
  r.skipped.assign(skipped.begin(), skipped.end());
  for (Candidate &c : all)
    (c.fits ? r.ranked : r.overMemory).push_back(std::move(c));
  std::stable_sort(r.ranked.begin(), r.ranked.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return rankKey(a) < rankKey(b);
                   });
  // The runner-up: the next setup that differs in more than the ZeRO stage.
  for (size_t i = 1; i < r.ranked.size() && r.runnerUp < 0; ++i) {
    const Candidate &c = r.ranked[i], &best = r.ranked.front();
    if (c.kind != best.kind || c.pp != best.pp || c.tp != best.tp ||
        c.ep != best.ep || c.chunks != best.chunks ||
        c.microbatchSize != best.microbatchSize || c.layout != best.layout ||
        c.recompute != best.recompute ||
        c.recomputeStages != best.recomputeStages)
      r.runnerUp = int(i);
  }
  // The setups the report shows (the top N and the runner-up) get their
  // idle time split (the same schedule and times again, with the second
  // simulation).
  std::vector<size_t> shownIdx;
  for (size_t i = 0;
       i < std::min<size_t>(r.ranked.size(), size_t(std::max(1, opts.topN)));
       ++i)
    shownIdx.push_back(i);
  if (r.runnerUp >= std::max(1, opts.topN))
    shownIdx.push_back(size_t(r.runnerUp));
  PlanOptions shown = opts;
  for (size_t i : shownIdx) {
    Candidate &c = r.ranked[i];
    shown.chunksPerRank =
        c.kind == ScheduleKind::Interleaved ? c.chunks : opts.chunksPerRank;
    auto full = evaluateZeros(model, cluster, shown, c.kind, c.pp,
                              c.microbatchSize, c.layout, c.tp, c.ep,
                              c.recompute, c.recomputeStages, {c.zero});
    if (full && full->size() == 1 && full->front().chunks == c.chunks &&
        std::llround(full->front().stepTime * 1e9) ==
            std::llround(c.stepTime * 1e9))
      c = std::move(full->front());
  }

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
        "per GPU (%s, pp=%d dp=%d%s b=%d: %.2f GiB model state + %.2f GiB "
        "activations) but a GPU offers %.2f GiB (memory_gb %.6g - "
        "reserved_memory_gb %.6g); %d setups evaluated",
        gib(best.memoryBytes),
        (best.schedule + (best.kind == ScheduleKind::Interleaved
                              ? " v=" + fmtInt(best.chunks)
                              : std::string()))
            .c_str(),
        best.pp, best.dp, setupSuffix(best).c_str(), best.microbatchSize,
        gib(best.paramBytes), gib(best.activationBytes),
        gib(cluster.usableBytes()), cluster.memoryGiB, cluster.reservedGiB,
        r.evaluated);
    return Status::error(buf);
  }
  return r;
}

//===----------------------------------------------------------------------===//
// --explain: one user-given setup against the sweep
//===----------------------------------------------------------------------===//

namespace {
std::string joinInts(const std::vector<int> &v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i)
    out += (i ? "," : "") + fmtInt(v[i]);
  return out;
}

bool parseInt(const std::string &text, int min, int &out) {
  if (text.empty() || text.size() > 9)
    return false;
  for (char ch : text)
    if (ch < '0' || ch > '9')
      return false;
  out = std::stoi(text);
  return out >= min;
}
} // namespace

Expected<SetupSpec> plan::parseSetup(const std::string &text) {
  static const char *known =
      "schedule pp tp ep dp b recompute recompute-stages zero chunks layout";
  SetupSpec spec;
  std::set<std::string> seen;
  std::vector<std::string> words;
  std::string cur;
  for (char ch : text) {
    if (ch == ' ' || ch == '\t' || ch == ',' || ch == '\n') {
      if (!cur.empty())
        words.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty())
    words.push_back(cur);
  if (words.empty())
    return Status::error("empty setup: expected KEY=VALUE words (keys: " +
                         std::string(known) + ")");
  for (const std::string &w : words) {
    size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::error("expected KEY=VALUE, got '" + w + "'");
    std::string key = w.substr(0, eq), value = w.substr(eq + 1);
    if (!seen.insert(key).second)
      return Status::error("key '" + key + "' given twice");
    auto intValue = [&](int min, int &out) -> Status {
      if (!parseInt(value, min, out))
        return Status::error(
            "key '" + key + "': expected " +
            (min == 1 ? std::string("a positive integer")
                      : std::string("an integer >= ") + fmtInt(min)) +
            ", got '" + value + "'");
      return Status::ok();
    };
    Status st = Status::ok();
    if (key == "schedule") {
      auto k = sched::parseScheduleKind(value);
      if (!k)
        return Status::error("key 'schedule': unknown schedule '" + value +
                             "' (known: " + sched::scheduleKindNames() + ")");
      spec.kind = *k;
    } else if (key == "pp") {
      st = intValue(1, spec.pp);
    } else if (key == "tp") {
      st = intValue(1, spec.tp);
    } else if (key == "ep") {
      st = intValue(1, spec.ep);
    } else if (key == "dp") {
      st = intValue(1, spec.dp);
    } else if (key == "b") {
      st = intValue(1, spec.microbatchSize);
    } else if (key == "chunks") {
      st = intValue(2, spec.chunks);
    } else if (key == "zero") {
      if (value != "0" && value != "1")
        return Status::error("key 'zero': expected 0 or 1, got '" + value +
                             "'");
      spec.zero = value == "1";
    } else if (key == "recompute") {
      if (!parseRecompute(value, spec.recompute))
        return Status::error("key 'recompute': unknown policy '" + value +
                             "' (known: none selective full)");
    } else if (key == "recompute-stages") {
      size_t start = 0;
      while (true) {
        size_t plus = value.find('+', start);
        std::string one =
            value.substr(start, plus == std::string::npos ? std::string::npos
                                                          : plus - start);
        int s;
        if (!parseInt(one, 0, s))
          return Status::error("key 'recompute-stages': expected stage "
                               "indices joined by '+' (e.g. 0+1), got '" +
                               value + "'");
        spec.recomputeStages.push_back(s);
        if (plus == std::string::npos)
          break;
        start = plus + 1;
      }
    } else if (key == "layout") {
      if (!parseLayout(value, spec.layout))
        return Status::error("key 'layout': expected pp-in-node, dp-in-node "
                             "or ep-in-node, got '" +
                             value + "'");
      spec.hasLayout = true;
    } else {
      return Status::error("unknown key '" + key + "' (known: " + known + ")");
    }
    if (!st)
      return st;
  }
  for (const char *required : {"schedule", "pp"})
    if (!seen.count(required))
      return Status::error(std::string("missing key '") + required + "'");
  if (!spec.recomputeStages.empty() && spec.recompute == Recompute::None)
    return Status::error("key 'recompute-stages' needs recompute=selective or "
                         "recompute=full");
  // A key the schedule would ignore is an error, not silence.
  if (seen.count("chunks") && spec.kind != sched::ScheduleKind::Interleaved)
    return Status::error(
        std::string("key 'chunks' applies to schedule=interleaved only; "
                    "schedule=") +
        sched::scheduleKindName(spec.kind) + " places " +
        (spec.kind == sched::ScheduleKind::ZBV ||
                 spec.kind == sched::ScheduleKind::DualPipeV
             ? "two chunks per rank (the V) by itself"
             : spec.kind == sched::ScheduleKind::Auto
                   ? "its chunks by itself"
                   : spec.kind == sched::ScheduleKind::DualPipe ||
                             spec.kind == sched::ScheduleKind::Chimera
                         ? "one stage of each of two copies per rank"
                         : "one stage per rank"));
  return spec;
}

namespace {
/// The spec evaluated as the sweep would; with its layout left open, the
/// faster of the two (`otherStep`: the other one's step time, 0 when they
/// coincide).
Expected<Candidate> evaluateSpec(const ModelCosts &model,
                                 const Cluster &cluster,
                                 const PlanOptions &opts, const SetupSpec &spec,
                                 double *otherStep) {
  const int64_t pt = int64_t(spec.pp) * spec.tp;
  if (spec.pp < 1 || spec.tp < 1 || cluster.gpus % pt != 0)
    return Status::error("pp=" + fmtInt(spec.pp) + " x tp=" + fmtInt(spec.tp) +
                         " does not divide the cluster's " +
                         fmtInt(cluster.gpus) + " GPUs");
  const int d = int(cluster.gpus / pt);
  if (spec.dp > 0 && spec.dp != d)
    return Status::error("dp=" + fmtInt(spec.dp) +
                         ": pp x tp x dp = " + fmtInt(pt * spec.dp) +
                         " differs from the cluster's " + fmtInt(cluster.gpus) +
                         " GPUs (dp = GPUs / (pp tp) = " + fmtInt(d) + ")");
  if (Status st = checkExpertDegree(model, spec.ep, d); !st)
    return st;
  if (spec.zero == 1 && d / spec.ep == 1)
    return Status::error(
        d == 1 ? "zero=1 needs data parallelism (dp = 1 here)"
               : "zero=1 needs data parallelism beyond the expert group (dp "
                 "= ep = " +
                     fmtInt(d) + " here: ZeRO-1 shards over dp / ep)");
  PlanOptions o = opts;
  if (spec.chunks > 0)
    o.chunksPerRank = spec.chunks;
  SetupOptions setup;
  setup.tp = spec.tp;
  setup.ep = spec.ep;
  setup.recomputeStages = spec.recomputeStages;
  setup.recompute = spec.recompute;
  setup.zero = spec.zero;

  std::vector<Layout> layouts;
  if (spec.hasLayout)
    layouts = {spec.layout};
  else if (cluster.gpus > cluster.gpusPerNode && d > 1 &&
           (spec.pp > 1 || (spec.ep > 1 && spec.ep < d)))
    layouts = {Layout::PipelineInNode, Layout::DataInNode};
  else
    layouts = {Layout::PipelineInNode};
  std::optional<Candidate> best;
  double other = 0;
  for (Layout lay : layouts) {
    auto c = evaluate(model, cluster, o, spec.kind, spec.pp,
                      spec.microbatchSize, lay, setup);
    if (!c)
      return c.status();
    if (!best) {
      best = std::move(*c);
    } else if (rankKey(*c) < rankKey(*best)) {
      other = best->stepTime;
      best = std::move(*c);
    } else {
      other = c->stepTime;
    }
  }
  if (otherStep)
    *otherStep = std::llround(other * 1e9) == std::llround(best->stepTime * 1e9)
                     ? 0
                     : other;
  return std::move(*best);
}
} // namespace

Expected<double> plan::fitEfficiency(const ModelCosts &model,
                                     const Cluster &cluster,
                                     const PlanOptions &opts,
                                     const SetupSpec &spec,
                                     double tokensPerSecond) {
  if (!(tokensPerSecond > 0) || !std::isfinite(tokensPerSecond))
    return Status::error("the throughput to fit must be a positive number");
  auto at = [&](double eff) -> Expected<double> {
    Cluster c = cluster;
    c.efficiency = eff;
    auto r = evaluateSpec(model, c, opts, spec, nullptr);
    if (!r)
      return r.status();
    return r->tokensPerSecond;
  };
  auto hi = at(1.0);
  if (!hi)
    return hi.status();
  if (*hi < tokensPerSecond) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "cannot fit: even at efficiency 1 the setup is predicted "
                  "at %.0f tokens/s, below %.0f",
                  *hi, tokensPerSecond);
    return Status::error(buf);
  }
  // The throughput never falls as the efficiency rises (every pass time is
  // a roofline max of FLOPs / rate and a rate-free term): bisect.
  double lo = 1e-4, up = 1.0;
  auto low = at(lo);
  if (!low)
    return low.status();
  if (*low > tokensPerSecond)
    return Status::error("cannot fit: even at efficiency 0.0001 the setup is "
                         "predicted faster than the target");
  for (int i = 0; i < 60 && up - lo > 1e-9; ++i) {
    double mid = 0.5 * (lo + up);
    auto v = at(mid);
    if (!v)
      return v.status();
    (*v < tokensPerSecond ? lo : up) = mid;
  }
  return up;
}

Expected<Explanation> plan::explain(const PlanResult &r,
                                    const ModelCosts &model,
                                    const Cluster &cluster,
                                    const PlanOptions &opts,
                                    const SetupSpec &spec) {
  Explanation e;
  auto ev = evaluateSpec(model, cluster, opts, spec, &e.otherLayoutStepTime);
  if (!ev)
    return ev.status();
  e.setup = std::move(*ev);
  PlanOptions o = opts;
  if (spec.chunks > 0)
    o.chunksPerRank = spec.chunks;
  const Candidate &c = e.setup;

  // Is it in the sweep's search space?
  std::vector<std::string> why;
  auto has = [](const auto &v, auto x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  if (!opts.pipelineDegrees.empty() && !has(opts.pipelineDegrees, c.pp))
    why.push_back("pp=" + fmtInt(c.pp) + " is not in --pp " +
                  joinInts(opts.pipelineDegrees));
  if (opts.pipelineDegrees.empty() &&
      c.pp > static_cast<int>(model.layers.size()))
    why.push_back("pp=" + fmtInt(c.pp) + " is above the layers");
  if (!opts.tensorDegrees.empty() && !has(opts.tensorDegrees, c.tp))
    why.push_back("tp=" + fmtInt(c.tp) + " is not in --tp " +
                  joinInts(opts.tensorDegrees));
  if (!has(opts.microbatchSizes, c.microbatchSize))
    why.push_back("b=" + fmtInt(c.microbatchSize) +
                  " is not in --microbatch-sizes " +
                  joinInts(opts.microbatchSizes));
  std::vector<sched::ScheduleKind> kinds =
      opts.schedules.empty() ? defaultSchedules(bool(opts.autoScheduler))
                             : opts.schedules;
  if (!has(kinds, c.kind))
    why.push_back(
        std::string("schedule ") + c.schedule +
        (opts.schedules.empty() ? " is not swept" : " is not in --schedules"));
  if (!opts.expertDegrees.empty() && !has(opts.expertDegrees, c.ep))
    why.push_back("ep=" + fmtInt(c.ep) + " is not in --ep " +
                  joinInts(opts.expertDegrees));
  if (!opts.recomputePolicies.empty() &&
      !has(opts.recomputePolicies, c.recompute))
    why.push_back(std::string("recompute=") + recomputeName(c.recompute) +
                  " is not in --recompute");
  if (opts.recomputePolicies.empty() && c.recompute != Recompute::None &&
      std::none_of(
          model.layers.begin(), model.layers.end(),
          [](const LayerCost &l) { return l.kind == LayerKind::Block; }))
    why.push_back("recomputation is searched only for transformer blocks");
  if (cluster.gpus > cluster.gpusPerNode &&
      (opts.layouts.empty() ? c.layout == Layout::ExpertInNode
                            : !has(opts.layouts, c.layout)))
    why.push_back(std::string("layout ") + layoutName(c.layout) +
                  (opts.layouts.empty() ? " is tried only when --layouts "
                                          "names it"
                                        : " is not in --layouts"));
  if (!opts.zeroStages.empty() && !has(opts.zeroStages, c.zero))
    why.push_back("zero=" + fmtInt(c.zero) + " is not in --zero");
  const std::vector<int> sweptChunks =
      opts.chunkCounts.empty() ? std::vector<int>{opts.chunksPerRank}
                               : opts.chunkCounts;
  if (c.kind == sched::ScheduleKind::Interleaved &&
      !has(sweptChunks, o.chunksPerRank))
    why.push_back("chunks=" + fmtInt(o.chunksPerRank) + " is not in --chunks " +
                  joinInts(sweptChunks));
  if (!c.recomputeStages.empty()) {
    // The sweep tries a policy on some stages only where the same setup
    // without recomputation overfills exactly those stages' ranks.
    const std::string what =
        "recompute-stages: the sweep recomputes some stages only where the "
        "setup without recomputation is over memory on their ranks";
    if (c.kind == sched::ScheduleKind::Auto) {
      why.push_back(what + " (not for auto)");
    } else if (!opts.recomputePolicies.empty() &&
               !has(opts.recomputePolicies, Recompute::None)) {
      why.push_back(what + " (none is not in --recompute)");
    } else {
      SetupOptions plain;
      plain.tp = c.tp;
      plain.ep = c.ep;
      plain.zero = c.zero;
      auto none = evaluate(model, cluster, o, c.kind, c.pp, c.microbatchSize,
                           c.layout, plain);
      if (none && (none->fits || none->stagesOverMemory != c.recomputeStages))
        why.push_back(
            what + (none->fits ? " (here it fits)"
                               : " (here: stages " +
                                     joinInts(none->stagesOverMemory) + ")"));
    }
  }
  if (c.pp == 1 && has(kinds, c.kind)) {
    // As the sweep: on one rank only the first linear schedule listed.
    auto first = std::find_if(kinds.begin(), kinds.end(), [](auto k) {
      return stagesFor(k, 1, 2) == 1 && k != sched::ScheduleKind::DualPipe &&
             k != sched::ScheduleKind::Chimera;
    });
    if (first == kinds.end() || *first != c.kind)
      why.push_back("with pp=1 the sweep evaluates only the first linear "
                    "schedule (plain data parallelism)");
  }
  for (size_t i = 0; i < why.size(); ++i)
    e.notSearched += (i ? "; " : "") + why[i];

  // Its place among the ranked setups.
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const Candidate &x = r.ranked[i];
    if (x.kind == c.kind && x.pp == c.pp && x.tp == c.tp && x.ep == c.ep &&
        x.recompute == c.recompute && x.zero == c.zero &&
        x.microbatchSize == c.microbatchSize && x.layout == c.layout &&
        x.stages == c.stages && x.chunks == c.chunks &&
        x.recomputeStages == c.recomputeStages) {
      e.rank = int(i) + 1;
      break;
    }
  }
  if (e.rank > 0) {
    e.wouldRank = e.rank;
  } else {
    const auto key = rankKey(c);
    e.wouldRank = 1 + int(std::count_if(r.ranked.begin(), r.ranked.end(),
                                        [&](const Candidate &x) {
                                          return rankKey(x) < key;
                                        }));
  }
  return e;
}
