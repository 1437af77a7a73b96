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
#include "pipeforge/Schedule/Offload.h"

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
  if (c.offload)
    out += " offload=auto";
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
  /// ZeRO-3: the layer's all-gather (F) and all-gather + reduce-scatter
  /// (B) beyond the compute they overlap (exposed), and all of it.
  double zF = 0, zB = 0, zTraffic = 0;
  double total() const {
    return f + b + w + tpF + tpB + epF + epB + rc + zF + zB;
  }
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
  const double rate8 = cl.fp8FlopsPerSecond();
  const bool fp8 = opts.fp8Linear;
  const double memBw = cl.memoryBytesPerSecond();
  // Float8's casts, elements per sequence of a block: F the inputs of the
  // linears (attention's and the MLP's input, the output projection's and
  // the down projection's: 3 h + ffn per token), B the gradients of their
  // outputs (q, k, v, o, gate, up, down: 3 h + 2 kv + 2 ffn).
  const ModelShape &sh = model.shape;
  const double kvDim =
      sh.heads > 0 ? double(sh.hidden) * sh.kvHeads / sh.heads : 0;
  const double castF = double(model.seqLen) * (3.0 * sh.hidden + sh.ffn);
  const double castB =
      double(model.seqLen) * (3.0 * sh.hidden + 2 * kvDim + 2.0 * sh.ffn);
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
    if (fp8 && block) {
      // torchtitan's Float8 linears: the GEMMs of F, B's input gradient
      // and W at the FP8 rate (a linear's input gradient costs its
      // forward's FLOPs), attention's core at bf16's. Each operand is cast
      // by a separate pass before its GEMM (read bf16, write float8, per
      // rank's 1/t: torchtitan casts before the sequence-parallel gather):
      // F the linears' inputs, B the gradients of their outputs, and the
      // weights when they are not gathered in float8.
      const double lin = std::min(lc.fwdFlops - lc.attnCoreFlops,
                                  lc.bwdInputFlops);
      auto gemm = [&](double fp8Flops, double bf16Flops, double bytes) {
        return std::max(b * (fp8Flops / rate8 + bf16Flops / rate) / t,
                        bytes / memBw);
      };
      const double wCast =
          opts.fp8AllGather ? 0 : 3 * weights / opts.weightBytesPerParam;
      r.f = gemm(lin, lc.fwdFlops - lin, weights + acts) +
            (3 * b * castF / t + wCast) / memBw;
      r.b = gemm(lin, lc.bwdInputFlops - lin + rescore, weights + 2 * acts) +
            (3 * b * castB / t + wCast) / memBw;
      r.w = gemm(lc.bwdWeightFlops, 0, weights + acts);
    } else {
      r.f = roofline(b * lc.fwdFlops / t, weights + acts, rate, memBw);
      r.b = roofline(b * (lc.bwdInputFlops + rescore) / t, weights + 2 * acts,
                     rate, memBw);
      r.w = roofline(b * lc.bwdWeightFlops / t, weights + acts, rate, memBw);
    }
    const double hidden = allReduce(b * lc.hiddenBytes);
    switch (lc.kind) {
    case LayerKind::Block: // after attention and after the MLP
      r.tpF = r.tpB = 2 * hidden;
      // Float8: F's all-gathers (half of each all-reduce) carry the
      // float8 input, 1 byte of 2; B's collectives stay bf16.
      if (fp8)
        r.tpF *= 0.75;
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
    // AsyncTP: the collectives are split and run under the pass's GEMMs.
    if (opts.asyncTp) {
      r.tpF = std::max(0.0, r.tpF - r.f);
      r.tpB = std::max(0.0, r.tpB - (r.b + r.w));
    }
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
  /// Activation offload: evaluate without it (`offloadOff`), with it
  /// (`offloadOn`); with both, with it only the setups over memory
  /// without.
  bool offloadOff = true, offloadOn = false;
};

/// The degrees that follow from a setup, checked against the model, the
/// cluster and the global batch.
struct Degrees {
  const char *name = nullptr; ///< the schedule's
  int L = 0;                  ///< layers
  int d = 0;                  ///< data-parallel ranks
  int dE = 0;                 ///< replicas of an expert shard (d / e)
  int m = 0;                  ///< microbatches per pipeline
  int chunks = 0;             ///< chunks per rank the generators take
  int S = 0;                  ///< stages per model copy
};

Expected<Degrees> checkDegrees(const ModelCosts &model, const Cluster &cluster,
                               const PlanOptions &opts, ScheduleKind kind,
                               int pp, int b, int t, int e) {
  Degrees g;
  g.L = static_cast<int>(model.layers.size());
  g.name = sched::scheduleKindName(kind);
  const std::string name = g.name;
  if (g.L == 0)
    return Status::error("the model has no layers");
  if (Status st = checkTensorDegree(model, cluster, t); !st)
    return st;
  if (pp < 1 || cluster.gpus % (int64_t(pp) * t) != 0)
    return Status::error("pipeline degree " + fmtInt(pp) +
                         (t > 1 ? " x tp=" + fmtInt(t) : std::string()) +
                         " does not divide " + fmtInt(cluster.gpus) + " GPUs");
  if (b < 1)
    return Status::error("microbatch size must be >= 1");
  g.d = cluster.gpus / (pp * t);
  if (Status st = checkExpertDegree(model, e, g.d); !st)
    return st;
  g.dE = g.d / e;
  if (opts.globalBatch < 1 || opts.globalBatch % (int64_t(g.d) * b) != 0)
    return Status::error(
        "global batch " + fmtInt(opts.globalBatch) +
        " is not a multiple of dp x microbatch = " + fmtInt(int64_t(g.d) * b));
  const int64_t m64 = opts.globalBatch / (int64_t(g.d) * b);
  if (m64 > 1000000)
    return Status::error("too many microbatches (" + fmtInt(m64) + ")");
  g.m = static_cast<int>(m64);
  g.chunks = std::max(2, opts.chunksPerRank);
  g.S = stagesFor(kind, pp, g.chunks);
  if (g.S > g.L)
    return Status::error(name + " with pp=" + fmtInt(pp) + " needs " +
                         fmtInt(g.S) + " stages but the model has " +
                         fmtInt(g.L) + " layers");
  if (g.m < sched::minMicrobatches(kind, pp, g.chunks))
    return Status::error(name + " with pp=" + fmtInt(pp) + " needs at least " +
                         fmtInt(sched::minMicrobatches(kind, pp, g.chunks)) +
                         " microbatches, got " + fmtInt(g.m));
  return g;
}

/// Where a setup's groups sit (one node or several) and the bandwidths of
/// their links, each at the achieved fraction of its kind of transfer.
struct Links {
  bool ppInterNode = false, dpInterNode = false;
  int e = 1;                       ///< the expert group's size
  int epLocal = 1;                 ///< of its ranks, those on one node
  int expertReplicasLocal = 1;     ///< replicas of an expert shard on one node
  int epNodes = 1;                 ///< the nodes an expert group spans
  double intraBw = 0, interBw = 0; ///< NVLink and network, bytes/s
  double ppBw = 0, dpBw = 0, expertDpBw = 0;
  double allToAllEfficiency = 1;

  /// The time of one expert all-to-all of `lc` in which a rank sends
  /// `bytes`. Of what a rank sends, (local - 1) / e goes over NVLink and
  /// (e - local) / e over the network, at once. Under group-limited routing
  /// whose groups sit on nodes (nodeLimit), a row crosses the network once
  /// per distinct remote node and NVLink forwards it (nodeLimitedRows): the
  /// two links at once.
  double allToAll(double bytes, const LayerCost &lc) const {
    const double eff = allToAllEfficiency;
    const int limit = nodeLimit(lc.routingGroups, lc.groupsPerToken, epNodes);
    if (limit > 0 && lc.topK > 0) {
      DispatchRows rows = nodeLimitedRows(lc.topK, epNodes, epLocal, limit);
      const double row = bytes / lc.topK;
      return std::max(row * rows.nvlink / (intraBw * eff),
                      row * rows.network / (interBw * eff));
    }
    double intra = bytes * (epLocal - 1) / e / (intraBw * eff);
    double inter =
        epLocal < e ? bytes * (e - epLocal) / e / (interBw * eff) : 0;
    return std::max(intra, inter);
  }
};

/// Tensor-parallel groups fill nodes first (tensor index fastest in the GPU
/// numbering), so pipelines and replicas see nodes of GPUs-per-node / t.
/// The d data-parallel ranks are (replica, expert) pairs, numbered as the
/// runtime's rank layouts do (docs/multi-node.md):
/// pp-in-node ((replica x e + expert) x p + pipeline) x t + tensor,
/// dp-in-node ((pipeline x e + expert) x d/e + replica) x t + tensor.
Links placeLinks(const Cluster &cluster, Layout layout, int pp, int t, int e,
                 const Degrees &g) {
  const int d = g.d, dE = g.dE;
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
  Links k;
  k.e = e;
  k.epLocal = e;
  k.expertReplicasLocal = dE;
  if (multiNode) {
    if (layout == Layout::PipelineInNode) {
      k.ppInterNode = pp > nodeSize;
      k.dpInterNode = d > 1;
      k.epLocal = perNode(int64_t(pp) * t, e);
      k.expertReplicasLocal = perNode(int64_t(pp) * t * e, dE);
    } else if (layout == Layout::DataInNode) {
      k.dpInterNode = d > nodeSize;
      k.ppInterNode = pp > 1;
      k.epLocal = perNode(int64_t(dE) * t, e);
      k.expertReplicasLocal = perNode(t, dE);
    } else {
      // ((pipeline x d/e + replica) x e + expert) x t + tensor.
      k.dpInterNode = d > nodeSize;
      k.ppInterNode = pp > 1;
      k.epLocal = perNode(t, e);
      k.expertReplicasLocal = perNode(int64_t(e) * t, dE);
    }
  }
  k.epNodes = (e + k.epLocal - 1) / k.epLocal;
  k.intraBw = cluster.intraNodeGBps * 1e9;
  k.interBw = cluster.interNodeGBps * 1e9;
  k.ppBw = (k.ppInterNode ? k.interBw : k.intraBw) * cluster.p2pEfficiency;
  k.dpBw =
      (k.dpInterNode ? k.interBw : k.intraBw) * cluster.allReduceEfficiency;
  k.expertDpBw = (k.expertReplicasLocal < dE ? k.interBw : k.intraBw) *
                 cluster.allReduceEfficiency;
  k.allToAllEfficiency = cluster.allToAllEfficiency;
  return k;
}

/// One setup as evaluateZeros models it: its inputs and what follows from
/// them.
struct Setup {
  const ModelCosts &model;
  const Cluster &cluster;
  const PlanOptions &opts;
  ScheduleKind kind;
  int pp, b, t, e;
  Degrees g;
  Links links;
  /// ZeRO-3 (FSDP): the parameters are gathered per layer and microbatch
  /// (docs/planner.md, "ZeRO-2 and ZeRO-3").
  bool zero3 = false;
};

/// Two model copies per rank (DualPipe, Chimera): ZeRO shards over the
/// pair of ranks that hold the same stages too.
bool twoCopies(ScheduleKind kind) {
  return kind == ScheduleKind::DualPipe || kind == ScheduleKind::Chimera;
}

/// ZeRO-3's shard groups of a setup: the dense parameters over `nDense`
/// ranks (the d / e replicas, or all d with --zero-shard all), the expert
/// shards over `nExpert` (d / e), each times 2 over DualPipe's pair; and
/// the bandwidths of their collectives (the slower of the data-parallel
/// and the pipeline link across the pair).
struct ZeroGroups {
  int nDense = 1, nExpert = 1;
  double bwDense = 0, bwExpert = 0;
};

ZeroGroups zeroGroups(const Setup &su) {
  ZeroGroups z;
  const int copies = twoCopies(su.kind) ? 2 : 1;
  const bool all = su.opts.zeroDenseOverAll || su.e == 1;
  z.nDense = (all ? su.g.d : su.g.dE) * copies;
  z.nExpert = su.g.dE * copies;
  z.bwDense = all ? su.links.dpBw : su.links.expertDpBw;
  z.bwExpert = su.links.expertDpBw;
  if (copies > 1) {
    z.bwDense = std::min(z.bwDense, su.links.ppBw);
    z.bwExpert = std::min(z.bwExpert, su.links.ppBw);
  }
  return z;
}

/// The candidate's setup and placement, before any time or memory.
Candidate describeSetup(const Setup &su, Layout layout, Recompute recompute) {
  Candidate c;
  c.kind = su.kind;
  c.schedule = su.g.name;
  c.pp = su.pp;
  c.dp = su.g.d;
  c.tp = su.t;
  c.ep = su.e;
  c.recompute = recompute;
  c.zeroGatherStage = su.opts.zeroGatherStage;
  c.microbatchSize = su.b;
  c.microbatches = su.g.m;
  c.stages = su.g.S;
  c.layout = layout;
  c.ppInterNode = su.links.ppInterNode;
  c.dpInterNode = su.links.dpInterNode;
  c.epInterNode = su.links.epLocal < su.e;
  c.epNodes = su.links.epNodes;
  if (su.e > 1)
    for (const LayerCost &lc : su.model.layers)
      if (lc.topK > 0 && lc.routingGroups > 0)
        c.epNodeLimit =
            nodeLimit(lc.routingGroups, lc.groupsPerToken, c.epNodes);
  return c;
}

/// The fraction of the expert all-to-alls that DualPipe's overlapped F&B
/// pairs run beside the other microbatch's compute: in a pair only what
/// exceeds the pair's compute stays exposed. The pairs are the steady phase
/// (step 4): per direction C/2 - p + h + 1 of a rank's C/2 forwards
/// (DualPipeV: C - 2p + h + 1 of C), h the rank's distance from the end,
/// averaged over the ranks; warm-up and drain run unpaired.
double overlappedAllToAll(const Setup &su) {
  const int pp = su.pp, m = su.g.m;
  if (su.e <= 1 ||
      (su.kind != ScheduleKind::DualPipe && su.kind != ScheduleKind::DualPipeV))
    return 0;
  double pairs, passes;
  if (su.kind == ScheduleKind::DualPipe) {
    passes = m / 2.0;
    pairs = passes - pp + 1 + (pp / 2.0 - 1) / 2;
  } else {
    passes = m;
    pairs = passes - 2.0 * pp + 1 + (pp - 1) / 2.0;
  }
  return std::clamp(pairs / passes, 0.0, 1.0);
}

/// Per-layer times on one tensor-parallel rank under `rc`, the all-to-alls
/// DualPipe overlaps taken out.
std::vector<LayerRun> runsUnder(const Setup &su, Recompute rc) {
  const Links &k = su.links;
  std::vector<LayerRun> runs =
      layerRuns(su.model, su.cluster, su.opts, su.t, su.e, rc, su.b,
                [&k](double bytes, const LayerCost &lc) {
                  return k.allToAll(bytes, lc);
                });
  const double overlapped = overlappedAllToAll(su);
  for (LayerRun &r : runs) {
    const double a2a = r.epF + r.epB;
    if (overlapped <= 0 || a2a <= 0)
      continue;
    const double excess = std::max(0.0, a2a - (r.f + r.b + r.w + r.rc));
    const double keep = (1 - overlapped) + overlapped * excess / a2a;
    r.epF *= keep;
    r.epB *= keep;
  }
  if (!su.zero3)
    return runs;
  // ZeRO-3 as FSDP runs it, per layer (the FSDP unit) and per microbatch:
  // an all-gather of the layer's parameter shards before F, again before
  // B (resharded after the forward), and a reduce-scatter of its gradients
  // after B. The next layer's collective is prefetched while this one
  // computes, so a pass costs the slower of its compute and its
  // collectives.
  const ZeroGroups zg = zeroGroups(su);
  auto ring = [](int n, double bytes, double bw) {
    return n > 1 ? (n - 1.0) / n * bytes / bw : 0.0;
  };
  for (size_t l = 0; l < runs.size(); ++l) {
    LayerRun &r = runs[l];
    const LayerCost &lc = su.model.layers[l];
    const double expert = std::min(lc.expertParams, lc.params);
    const double dense = (lc.params - expert) / su.t;
    const double experts = expert / (double(su.t) * su.e);
    // Float8 all-gather: the blocks' weights travel as float8.
    const double gatherBytes =
        su.opts.fp8Linear && su.opts.fp8AllGather &&
                lc.kind == LayerKind::Block
            ? 1
            : su.opts.weightBytesPerParam;
    const double gather = ring(zg.nDense, dense * gatherBytes, zg.bwDense) +
                          ring(zg.nExpert, experts * gatherBytes, zg.bwExpert);
    const double scatter =
        ring(zg.nDense, dense * su.opts.gradBytesPerParam, zg.bwDense) +
        ring(zg.nExpert, experts * su.opts.gradBytesPerParam, zg.bwExpert);
    if (su.opts.zeroGatherStage) {
      // --zero-gather stage: once per step, the gather under the first
      // microbatch's F and the reduce-scatter under the last one's B (each
      // layer's prefetched under the one before), spread over the m
      // microbatches the simulator charges alike.
      const double m = su.g.m;
      r.zF = std::max(0.0, gather - (r.f + r.tpF + r.epF)) / m;
      r.zB = std::max(0.0, scatter - (r.b + r.w + r.tpB + r.epB + r.rc)) / m;
      r.zTraffic = (gather + scatter) / m;
      continue;
    }
    r.zF = std::max(0.0, gather - (r.f + r.tpF + r.epF));
    r.zB = std::max(0.0, gather + scatter -
                             (r.b + r.w + r.tpB + r.epB + r.rc));
    r.zTraffic = 2 * gather + scatter;
  }
  return runs;
}

/// The layers' runs and their cut into stages.
struct LayerPlan {
  std::vector<LayerRun> runs;
  partition::StageCut cut;
  /// The stages that recompute (sorted) when not all do; else empty.
  std::vector<int> recomputeStages;
  int first(int s) const { return cut.firstLayer(s); }
  int end(int s) const { return cut.firstLayer(s) + cut.sizes[s]; }
};

/// The optimal cut of the per-layer times into S stages. With
/// recomputation on some stages only, the layers are cut as without it and
/// those stages' layers then recompute.
Expected<LayerPlan> planLayers(const Setup &su, Recompute recompute,
                               const std::vector<int> &recomputeStages) {
  const int S = su.g.S;
  std::vector<int> rcOnly = recomputeStages;
  std::sort(rcOnly.begin(), rcOnly.end());
  rcOnly.erase(std::unique(rcOnly.begin(), rcOnly.end()), rcOnly.end());
  for (int s : rcOnly)
    if (s < 0 || s >= S)
      return Status::error("recompute stage " + fmtInt(s) + " is not one of " +
                           std::string(su.g.name) + "'s " + fmtInt(S) +
                           " stages (0.." + fmtInt(S - 1) + ")");
  const bool partial = recompute != Recompute::None && !rcOnly.empty();
  LayerPlan lp;
  lp.runs = runsUnder(su, partial ? Recompute::None : recompute);
  std::vector<double> layerTime;
  layerTime.reserve(su.g.L);
  for (const LayerRun &r : lp.runs)
    layerTime.push_back(r.total());
  auto cut = partition::partitionBalanced(layerTime, S);
  if (!cut)
    return cut.status();
  lp.cut = cut.take();
  if (partial) {
    std::vector<LayerRun> redo = runsUnder(su, recompute);
    for (int s : rcOnly)
      for (int l = lp.first(s), end = lp.end(s); l < end; ++l)
        lp.runs[l] = redo[l];
    lp.recomputeStages = rcOnly;
  }
  return lp;
}

/// Model state bytes of `dense` replicated and `experts` expert-shard
/// parameters: weights and gradients, and the optimizer state. ZeRO-1
/// shards it over the runtime's data-parallel group, the d / e replicas
/// of an expert rank (pipeforge-run --zero 1), for dense and expert
/// parameters alike: the expert ranks are not in that group.
/// With PlanOptions::zeroDenseOverAll (Megatron's distributed optimizer,
/// DeepSeek-V3) the dense parameters' state is sharded over all d ranks.
/// With two model copies (DualPipe, Chimera) ZeRO-1 also splits the state
/// between the two ranks that hold the same stages (pipeforge-run: each
/// tensor is updated on one side of the pair; docs/optimizer.md), so
/// `copies` divides it once more.
/// ZeRO-2 shards the gradients the same way, but pipeforge-run frees a
/// gradient another rank owns only once the stage's gradients are final:
/// with gradient accumulation (m > 1) the peak holds them all, as ZeRO-1;
/// with one microbatch and the overlapped reduction they leave during the
/// backward, and the peak holds the shard plus the buckets in flight.
/// ZeRO-3 (FSDP) shards the weights too, and adds the gathered layers in
/// flight (the layer computing and the one prefetched, their weights and
/// unsharded gradients).
struct MemoryModel {
  explicit MemoryModel(const Setup &su)
      : opts(su.opts), d(su.g.d), dE(su.g.dE), m(su.g.m),
        stageGather(su.opts.zeroGatherStage),
        gatheredBytes(su.opts.fp8Linear && su.opts.fp8AllGather
                          ? 1
                          : su.opts.weightBytesPerParam),
        optimizerPerParam(std::max(0.0, opts.stateBytesPerParam -
                                            opts.weightBytesPerParam -
                                            opts.gradStateBytesPerParam)) {
    for (const LayerCost &lc : su.model.layers) {
      const double expert = std::min(lc.expertParams, lc.params);
      unit = std::max(unit, (lc.params - expert) / su.t +
                                expert / (double(su.t) * su.e));
    }
  }

  /// `dense` and `experts` over their shard groups (and the pair).
  double sharded(double dense, double experts, int copies) const {
    return (dense / (opts.zeroDenseOverAll ? d : dE) + experts / dE) /
           std::max(1, copies);
  }
  /// Parameters gathered whole at once: two layers (ZeRO-2: the gradient
  /// buckets in flight), at most what the rank holds.
  double inflight(double dense, double experts) const {
    return std::min(2 * unit, dense + experts);
  }
  /// ZeRO-2: are the gradients sharded at the peak?
  bool gradsSharded(int zero) const {
    return zero >= 3 ||
           (zero == 2 && m == 1 && opts.gradOverlap != GradOverlap::Off);
  }

  double optimizerBytes(double dense, double experts, int zero,
                        int copies = 1) const {
    if (!zero)
      return optimizerPerParam * (dense + experts);
    return optimizerPerParam *
           (dense / (opts.zeroDenseOverAll ? d : dE) + experts / dE) /
           std::max(1, copies);
  }
  /// Weights and gradients: sharded (`withInflight`: plus the layers in
  /// flight) or whole.
  double weightBytes(double dense, double experts, int zero, int copies,
                     bool withInflight = true) const {
    if (zero < 3)
      return (dense + experts) * opts.weightBytesPerParam;
    // --zero-gather stage: the stage's weights held gathered for the step
    // (float8 with its all-gather in float8).
    if (stageGather)
      return sharded(dense, experts, copies) * opts.weightBytesPerParam +
             (withInflight ? (dense + experts) * gatheredBytes : 0);
    return (sharded(dense, experts, copies) +
            (withInflight ? inflight(dense, experts) : 0)) *
           opts.weightBytesPerParam;
  }
  double gradBytes(double dense, double experts, int zero, int copies,
                   bool withInflight = true) const {
    if (!gradsSharded(zero))
      return (dense + experts) * opts.gradStateBytesPerParam;
    // --zero-gather stage: the stage's gradients accumulate unsharded over
    // the microbatches, in the reduction's type (--grad-bytes), until the
    // step's one reduce-scatter.
    if (zero >= 3 && stageGather)
      return sharded(dense, experts, copies) * opts.gradStateBytesPerParam +
             (withInflight ? (dense + experts) * opts.gradBytesPerParam : 0);
    return (sharded(dense, experts, copies) +
            (withInflight ? inflight(dense, experts) : 0)) *
           opts.gradStateBytesPerParam;
  }
  /// The model state; without `withInflight`, ZeRO-2/3's sharded state
  /// only (what one more stage adds: DualPipe's second copy).
  double stateBytes(double dense, double experts, int zero, int copies = 1,
                    bool withInflight = true) const {
    if (zero <= 1)
      return (dense + experts) *
                 (opts.weightBytesPerParam + opts.gradStateBytesPerParam) +
             optimizerBytes(dense, experts, zero, copies);
    return weightBytes(dense, experts, zero, copies, withInflight) +
           gradBytes(dense, experts, zero, copies, withInflight) +
           optimizerBytes(dense, experts, zero, copies);
  }

  const PlanOptions &opts;
  const int d, dE, m;
  const bool stageGather;
  const double gatheredBytes;
  const double optimizerPerParam;
  double unit = 0; ///< the largest layer's parameters on one rank
};

/// The data-parallel gradient all-reduces: dense gradients over d
/// replicas, expert shards' over d / e.
struct GradRing {
  explicit GradRing(const Setup &su) : su(su) {}

  /// Ring all-reduce of `params` gradients over n replicas.
  double ring(int n, double params, double bw) const {
    return n > 1 ? 2.0 * (n - 1) / n * params * su.opts.gradBytesPerParam / bw
                 : 0.0;
  }
  /// `dense` replicated and `experts` expert-shard parameters' gradients.
  double reduce(double dense, double experts) const {
    return ring(su.g.d, dense, su.links.dpBw) +
           ring(su.g.dE, experts, su.links.expertDpBw);
  }
  /// One layer's bucket (GradReduce.h).
  double layerReduce(int l) const {
    const LayerCost &lc = su.model.layers[l];
    const double expert = std::min(lc.expertParams, lc.params);
    return reduce((lc.params - expert) / su.t, expert / (double(su.t) * su.e));
  }

  const Setup &su;
};

/// Stage costs (per microbatch of b sequences, per tensor-parallel rank),
/// the parameters each stage holds and the step's sums over the stages.
struct StageCosts {
  sched::CostModel cost;
  /// Parameters per stage on one rank: all, and of them the expert shards
  /// (the dense ones are replicated over the d ranks, the expert shards
  /// over d / e).
  std::vector<double> params, experts;
  double computeSum = 0, tpSum = 0, epSum = 0, rcSum = 0;
  /// ZeRO-3's collectives per microbatch: exposed, and all of them.
  double zeroSum = 0, zeroTraffic = 0;
  double transient = 0; ///< largest rematerialisation during one B
};

StageCosts stageCosts(const Setup &su, const LayerPlan &lp) {
  const int S = su.g.S, t = su.t, e = su.e, b = su.b;
  StageCosts sc;
  sched::CostModel &cost = sc.cost;
  sc.params.assign(S, 0);
  sc.experts.assign(S, 0);
  double maxBoundary = 0;
  for (int s = 0; s < S; ++s) {
    double f = 0, bi = 0, w = 0, mb = 0, mbFull = 0, mw = 0, params = 0,
           experts = 0;
    for (int l = lp.first(s), end = lp.end(s); l < end; ++l) {
      const LayerRun &r = lp.runs[l];
      f += r.f + r.tpF + r.epF + r.zF;
      bi += r.b + r.tpB + r.epB + r.rc + r.zB;
      sc.zeroSum += r.zF + r.zB;
      sc.zeroTraffic += r.zTraffic;
      w += r.w;
      mb += r.memB;
      mbFull += r.memBFull;
      mw += r.memW;
      sc.computeSum += r.f + r.b + r.w;
      sc.tpSum += r.tpF + r.tpB;
      sc.epSum += r.epF + r.epB;
      sc.rcSum += r.rc;
      sc.transient = std::max(sc.transient, r.memBFull - r.memB);
      const LayerCost &lc = su.model.layers[l];
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
    sc.params[s] = params + experts;
    sc.experts[s] = experts;
    // With sequence parallelism each tensor-parallel rank sends its 1/t of
    // the boundary activation.
    if (s + 1 < S)
      maxBoundary = std::max(
          maxBoundary, b * su.model.layers[lp.end(s) - 1].outputBytes / t);
  }
  cost.tcomm = su.pp > 1 ? maxBoundary / su.links.ppBw : 0;
  return sc;
}

/// What the automatic scheduler is measured against before it runs.
struct AutoBound {
  double step = 0;     ///< a lower bound of the step time
  double maxState = 0; ///< the model state of the fullest rank
};

/// The bound, for a linear placement (stage s on rank s): rank s cannot
/// start before the first microbatch's F has crossed stages 0..s-1, runs m
/// passes of F, B and W, and after its last B that microbatch's B still
/// crosses stages s-1..0; the gradient all-reduce follows.
AutoBound autoBound(const Setup &su, const LayerPlan &lp, const StageCosts &sc,
                    int zero) {
  const int S = su.g.S, m = su.g.m;
  const sched::CostModel &cost = sc.cost;
  const MemoryModel mem(su);
  const GradRing grad(su);
  AutoBound out;
  double pipeBound = 0, gradBound = 0, fill = 0, drain = 0;
  // Per stage: the earliest its last B can end (from stage s on), the
  // earliest all its work can be done, and the B time before it.
  std::vector<double> lastB(S, 0), busyEnd(S, 0), drains(S, 0);
  for (int s = 0; s < S; ++s) {
    const double tf = cost.tfStage[s], tb = cost.tbStage[s],
                 tw = cost.twStage[s];
    pipeBound = std::max(
        pipeBound, fill + std::max(m * (tf + tb + tw), m * (tf + tb) + drain));
    // Stage s's last B, and with it the way back to every earlier stage.
    drains[s] = drain;
    busyEnd[s] = fill + m * (tf + tb + tw);
    for (int r = 0; r <= s; ++r)
      lastB[r] = std::max(lastB[r], fill + m * (tf + tb) + drain - drains[r]);
    fill += tf + cost.tcomm;
    drain += tb + cost.tcomm;
    const double dense = sc.params[s] - sc.experts[s];
    if (su.opts.gradOverlap == GradOverlap::Off)
      gradBound = std::max(gradBound, grad.reduce(dense, sc.experts[s]));
    out.maxState =
        std::max(out.maxState, mem.stateBytes(dense, sc.experts[s], zero));
  }
  if (su.opts.gradOverlap != GradOverlap::Off) {
    // Overlapped (GradReduce.cpp), a stage's buckets are ready no earlier
    // than the start of its last W (or BW). That work ends after the
    // stage's last B and after all the stage's work, and lasts tw (tb +
    // tw for a BW). The buckets queue one after another on the rank's
    // link (one stage per rank in the linear placement).
    for (int s = 0; s < S; ++s) {
      double all = 0;
      for (int l = lp.first(s), end = lp.end(s); l < end; ++l)
        all += grad.layerReduce(l);
      const double tb = cost.tbStage[s], tw = cost.twStage[s];
      const double lastStart = std::max(lastB[s] - tb, busyEnd[s] - tb - tw);
      gradBound = std::max(gradBound, lastStart + all - pipeBound);
    }
  }
  out.step = pipeBound + gradBound;
  return out;
}

/// The automatic scheduler's schedule, into `out`; null when its step time
/// bound is above `pruneAbove`. The activation budget: what memory leaves
/// after the model state of the fullest rank (a linear placement).
Expected<const sched::Schedule *>
autoSchedule(const Setup &su, const LayerPlan &lp, const StageCosts &sc,
             const std::vector<int> &zeros, double pruneAbove,
             sched::Schedule &out) {
  if (!su.opts.autoScheduler)
    return Status::error("auto: no automatic scheduler is built in");
  const AutoBound bound =
      autoBound(su, lp, sc, zeros.empty() ? 0 : zeros.front());
  // Compared at the ranking's resolution (ns): a bound that equals the
  // threshold can tie it, and ties go to less memory.
  if (std::isfinite(pruneAbove) &&
      std::llround(bound.step * 1e9) > std::llround(pruneAbove * 1e9))
    return static_cast<const sched::Schedule *>(nullptr);
  double limit = su.cluster.usableBytes() - bound.maxState - sc.transient;
  if (limit <= 0)
    return Status::error("auto: the model state alone exceeds the memory");
  auto s = su.opts.autoScheduler(su.pp, su.g.m, sc.cost, limit);
  if (!s)
    return Status::error(std::string("auto: ") + s.message());
  out = s.take();
  return &out;
}

/// The generator's schedule: from `cache` (where it then stays) or into
/// `out`.
Expected<const sched::Schedule *>
generatedSchedule(const Setup &su, ScheduleCache *cache, sched::Schedule &out) {
  const int pp = su.pp, m = su.g.m;
  const auto key = std::make_tuple(int(su.kind), pp, m, su.g.chunks);
  if (auto hit = cache ? cache->find(key) : ScheduleCache::iterator();
      cache && hit != cache->end())
    return &hit->second;
  sched::GenOptions g;
  g.ranks = pp;
  g.microbatches = m;
  g.chunksPerRank = su.g.chunks;
  g.interleavedRule = su.opts.interleavedRule;
  auto s = sched::generate(su.kind, g);
  if (!s)
    return Status::error(std::string(su.g.name) + " with pp=" + fmtInt(pp) +
                         ", " + fmtInt(m) + " microbatches: " + s.message());
  out = s.take();
  if (cache)
    return &cache->emplace(key, std::move(out)).first->second;
  return &out;
}

/// Parameters per pipeline rank (every stage it holds): all, and of them
/// the expert shards.
struct RankParams {
  std::vector<double> params, experts;
};

RankParams rankParams(const Setup &su, const sched::Placement &pl,
                      const StageCosts &sc) {
  RankParams rp{std::vector<double>(su.pp, 0), std::vector<double>(su.pp, 0)};
  for (int copy = 0; copy < pl.numCopies; ++copy)
    for (int s = 0; s < su.g.S; ++s) {
      rp.params[pl.rank(copy, s)] += sc.params[s];
      rp.experts[pl.rank(copy, s)] += sc.experts[s];
    }
  return rp;
}

/// The gradient reductions: DualPipe's swap of the copies' gradients, the
/// data-parallel all-reduce of the busiest rank, and what the step sees of
/// it.
void reduceGradients(const Setup &su, Candidate &c,
                     const sched::Schedule &schedule,
                     const sched::SimResult &sim, const StageCosts &sc,
                     const LayerPlan &lp, const RankParams &rp) {
  const sched::Placement &pl = schedule.placement;
  const GradRing grad(su);
  if (su.zero3) {
    // ZeRO-3: the gradients leave per layer and microbatch as
    // reduce-scatters inside the backward (the layers' times), over DualPipe's
    // pair too: no all-reduce, no copy sum after the pipeline.
    c.gradOverlap = GradOverlap::Off;
    return;
  }
  if (pl.numCopies > 1) {
    // Ranks r and p-1-r swap one copy's stage gradients and sum them.
    double maxStage = *std::max_element(sc.params.begin(), sc.params.end());
    c.dualReduceTime = maxStage * su.opts.gradBytesPerParam / su.links.ppBw;
  }
  for (int r = 0; r < su.pp; ++r)
    c.dpReduceTime =
        std::max(c.dpReduceTime,
                 grad.reduce(rp.params[r] - rp.experts[r], rp.experts[r]));
  // What the step sees of it: the reductions start as the last microbatches'
  // weight gradients are done (GradReduce.h), one bucket per layer.
  StageBuckets buckets(su.g.S);
  for (int s = 0; s < su.g.S; ++s)
    for (int l = lp.first(s), end = lp.end(s); l < end; ++l) {
      const LayerRun &r = lp.runs[l];
      buckets[s].push_back(
          {r.w, r.b + r.tpB + r.epB + r.rc + r.w, grad.layerReduce(l)});
    }
  const GradReduceTiming timing = gradReduceTiming(
      schedule, sim, buckets, c.dpReduceTime, su.opts.gradOverlap);
  c.gradOverlap = pl.numCopies > 1 ? GradOverlap::Off : su.opts.gradOverlap;
  c.dpTime = timing.exposed;
  c.dpTailRank = timing.rank;
  c.dpOverlapWindow = std::max(0.0, timing.lastCompute - timing.firstReady);
}

/// The step time, its throughput and MFU, and its split. Every microbatch
/// runs every stage once, so the ranks' busy time adds up to m x the stage
/// sums; averaged over the p ranks. With `splitPipelineComm` a second
/// simulation without T_comm splits the idle time.
Status splitStep(const Setup &su, Candidate &c, const sched::Schedule &schedule,
                 const StageCosts &sc, bool splitPipelineComm) {
  const int pp = su.pp, m = su.g.m;
  c.stepTime =
      c.pipelineTime + c.dualReduceTime + c.dpTime + c.offloadCopyTime;
  if (c.stepTime > 0) {
    c.tokensPerSecond =
        double(su.opts.globalBatch) * double(su.model.seqLen) / c.stepTime;
    double modelFlops = 0;
    for (const LayerCost &lc : su.model.layers)
      modelFlops += lc.totalFlops();
    modelFlops *= double(su.opts.globalBatch);
    c.mfu = modelFlops / (double(su.cluster.gpus) * su.cluster.peakTflops *
                          1e12 * c.stepTime);
  }
  c.computeTime = m * sc.computeSum / pp;
  c.tpCommTime = m * sc.tpSum / pp;
  c.epCommTime = m * sc.epSum / pp;
  c.recomputeTime = m * sc.rcSum / pp;
  c.zeroExposedTime = m * sc.zeroSum / pp;
  c.zeroCommTime = m * sc.zeroTraffic / pp;
  const double idle =
      std::max(0.0, c.pipelineTime - c.computeTime - c.tpCommTime -
                        c.epCommTime - c.recomputeTime - c.zeroExposedTime);
  if (sc.cost.tcomm > 0 && splitPipelineComm) {
    sched::CostModel noComm = sc.cost;
    noComm.tcomm = 0;
    auto sim0 = sched::simulate(schedule, noComm);
    if (!sim0)
      return Status::error(std::string(su.g.name) +
                           ": simulation failed: " + sim0.message());
    c.ppCommTime = std::clamp(c.pipelineTime - sim0->makespan, 0.0, idle);
  }
  c.bubbleTime = idle - c.ppCommTime;
  c.dpCommTime = c.dpTime + c.dualReduceTime + c.zeroExposedTime;
  return Status::ok();
}

/// What activation offload (`--offload-activations auto`) does to a setup:
/// the schedule replayed with the runtime's plan (sched::planOffload at
/// sched::kOffloadGapAuto, which the simulator's accounting applies), the
/// host memory the plan holds at once, and the copies' exposed time.
struct OffloadEffect {
  sched::SimResult sim; ///< the replay with the plan: peaks per rank
  double hostBytes = 0; ///< the most stash bytes in host memory, any rank
  /// On the rank whose copies are the most exposed: its offloaded stashes,
  /// their copies in full, and what the compute under them leaves exposed.
  int stashes = 0;
  double copyTotal = 0, copyExposed = 0;
};

/// Each offloaded stash crosses the host link twice (out under the compute
/// action after its F, back under the one before its B, as the plan
/// places them); a copy is exposed by what it exceeds that action's time
/// (max(0, copy - action)), summed over the rank's stashes; the step is
/// charged the most exposed rank's sum. Copies are assumed not to queue
/// behind each other on the link.
Expected<OffloadEffect> offloadEffect(const Setup &su,
                                      const sched::Schedule &schedule,
                                      const sched::SimResult &sim,
                                      const sched::CostModel &cost) {
  OffloadEffect out;
  sched::CostModel withOffload = cost;
  withOffload.offloadGap = sched::kOffloadGapAuto;
  sched::SimOptions so;
  so.intervals = sched::SimIntervals::None;
  auto replay = sched::simulate(schedule, withOffload, so);
  if (!replay)
    return Status::error(std::string(su.g.name) +
                         ": simulation with activation offload failed: " +
                         replay.message());
  out.sim = replay.take();
  const double bw = su.cluster.hostLinkBytesPerSecond();
  // The compute actions' times, from the replay without offload (the same
  // times: the simulator's copies are free).
  std::vector<std::vector<double>> dur(schedule.programs.size());
  for (size_t r = 0; r < schedule.programs.size(); ++r)
    dur[r].assign(schedule.programs[r].size(), 0);
  for (const sched::Interval &iv : sim.intervals)
    dur[size_t(iv.rank)][iv.actionIndex] = iv.end - iv.start;
  for (size_t r = 0; r < schedule.programs.size(); ++r) {
    const sched::OffloadPlan plan =
        sched::planOffload(schedule.programs[r], sched::kOffloadGapAuto);
    auto bytesOf = [&](const sched::StashKey &k) {
      return cost.memDelta(sched::WorkKind::F, std::get<1>(k));
    };
    double host = 0, hostPeak = 0, total = 0, exposed = 0;
    for (size_t i = 0; i < schedule.programs[r].size(); ++i) {
      if (auto it = plan.reloadBefore.find(i); it != plan.reloadBefore.end())
        for (const sched::StashKey &k : it->second) {
          const double copy = bytesOf(k) / bw;
          total += copy;
          exposed += std::max(0.0, copy - dur[r][i]);
          host -= bytesOf(k);
        }
      if (auto it = plan.awayAfter.find(i); it != plan.awayAfter.end())
        for (const sched::StashKey &k : it->second) {
          const double copy = bytesOf(k) / bw;
          total += copy;
          exposed += std::max(0.0, copy - dur[r][i]);
          host += bytesOf(k);
          hostPeak = std::max(hostPeak, host);
        }
    }
    out.hostBytes = std::max(out.hostBytes, hostPeak);
    if (r == 0 || exposed > out.copyExposed) {
      out.stashes = int(plan.keys.size());
      out.copyTotal = total;
      out.copyExposed = exposed;
    }
  }
  return out;
}

/// Memory per rank, per ZeRO stage: model state of every stage it holds +
/// peak activation (+ the one layer B rematerialises, with recomputation).
/// A candidate per stage in `zeros`.
std::vector<Candidate> sizeMemory(const Setup &su, const Candidate &c,
                                  const sched::Placement &pl,
                                  const sched::SimResult &sim,
                                  const StageCosts &sc, const RankParams &rp,
                                  const std::vector<int> &zeros) {
  const MemoryModel mem(su);
  const double usable = su.cluster.usableBytes();
  std::vector<Candidate> out;
  for (int zero : zeros) {
    Candidate z = c;
    z.zero = zero;
    std::vector<char> over(su.pp, 0);
    for (int r = 0; r < su.pp; ++r) {
      const double dense = rp.params[r] - rp.experts[r];
      double state =
          mem.stateBytes(dense, rp.experts[r], zero, pl.numCopies);
      double act = sim.ranks[r].peakMemory + sc.transient;
      double total = state + act;
      over[r] = total > usable;
      if (total > z.memoryBytes || r == 0) {
        z.memoryBytes = total;
        z.paramBytes = state;
        z.activationBytes = act;
        z.weightBytes = rp.params[r] * su.opts.weightBytesPerParam;
        z.gradBytes = rp.params[r] * su.opts.gradStateBytesPerParam;
        if (zero >= 2) {
          z.weightBytes =
              mem.weightBytes(dense, rp.experts[r], zero, pl.numCopies);
          z.gradBytes = mem.gradBytes(dense, rp.experts[r], zero, pl.numCopies);
        }
        z.optimizerBytes =
            mem.optimizerBytes(dense, rp.experts[r], zero, pl.numCopies);
      }
    }
    z.fits = z.memoryBytes <= usable;
    // DualPipe's second copy: the copy-1 stage a rank holds beside its
    // copy-0 stage.
    if (pl.numCopies > 1)
      for (int s = 0; s < su.g.S; ++s) {
        const double bytes =
            mem.stateBytes(sc.params[s] - sc.experts[s], sc.experts[s], zero,
                           pl.numCopies, /*withInflight=*/false);
        if (bytes > z.secondCopyBytes) {
          z.secondCopyBytes = bytes;
          z.secondCopyParams = sc.params[s];
        }
      }
    for (int s = 0; s < su.g.S; ++s)
      for (int copy = 0; copy < pl.numCopies; ++copy)
        if (over[pl.rank(copy, s)]) {
          z.stagesOverMemory.push_back(s);
          break;
        }
    out.push_back(std::move(z));
  }
  return out;
}
} // namespace

/// Evaluates one setup for every ZeRO stage in `zeros` (they share the
/// schedule and its times unless the automatic scheduler's memory limit
/// depends on the stage: callers pass one stage for Auto). With
/// `pruneAbove`, the automatic scheduler is not run when a lower bound of
/// the step time exceeds it (autoBound): the result is then empty. The
/// phases: the degrees and links, the layers' times and their cut into
/// stages, the stage costs, the schedule and its simulation, the gradient
/// reductions and the step's split, the memory per ZeRO stage.
static Expected<std::vector<Candidate>>
evaluateSharing(const ModelCosts &model, const Cluster &cluster,
                const PlanOptions &opts, ScheduleKind kind, int pp, int b,
                Layout layout, int t, int e, Recompute recompute,
                const std::vector<int> &recomputeStages,
                const std::vector<int> &zeros, const SweepHooks &hooks,
                bool zero3) {
  auto g = checkDegrees(model, cluster, opts, kind, pp, b, t, e);
  if (!g)
    return g.status();
  const Setup su{model,
                 cluster,
                 opts,
                 kind,
                 pp,
                 b,
                 t,
                 e,
                 *g,
                 placeLinks(cluster, layout, pp, t, e, *g),
                 zero3};
  Candidate c = describeSetup(su, layout, recompute);
  auto lp = planLayers(su, recompute, recomputeStages);
  if (!lp)
    return lp.status();
  c.layerSplit = lp->cut.sizes;
  c.recomputeStages = lp->recomputeStages;
  const StageCosts sc = stageCosts(su, *lp);
  c.commTime = sc.cost.tcomm;

  sched::Schedule generated;
  auto picked =
      kind == ScheduleKind::Auto
          ? autoSchedule(su, *lp, sc, zeros, hooks.pruneAbove, generated)
          : generatedSchedule(su, hooks.schedules, generated);
  if (!picked)
    return picked.status();
  if (!*picked)
    return std::vector<Candidate>{}; // pruned
  const sched::Schedule &schedule = **picked;
  const sched::Placement &pl = schedule.placement;
  const std::string name = g->name;
  c.chunks = g->S * pl.numCopies / pp;
  if (pl.numStages != g->S)
    return Status::error(name + ": the schedule has " + fmtInt(pl.numStages) +
                         " stages, expected " + fmtInt(g->S));
  auto sim = sched::simulate(schedule, sc.cost);
  if (!sim)
    return Status::error(name + ": simulation failed: " + sim.message());
  c.pipelineTime = sim->makespan;
  c.bubbleRate = sim->bubbleRate;

  const RankParams rp = rankParams(su, pl, sc);
  reduceGradients(su, c, schedule, *sim, sc, *lp, rp);
  Candidate on = c;
  if (Status st = splitStep(su, c, schedule, sc, hooks.splitPipelineComm); !st)
    return st;
  std::vector<Candidate> out = sizeMemory(su, c, pl, *sim, sc, rp, zeros);
  if (!hooks.offloadOn)
    return out;
  // Activation offload: with both, tried only where the setup is over
  // memory without it.
  const std::vector<Candidate> without = out;
  if (hooks.offloadOff &&
      std::all_of(out.begin(), out.end(),
                  [](const Candidate &z) { return z.fits; }))
    return out;
  auto eff = offloadEffect(su, schedule, *sim, sc.cost);
  if (!eff)
    return eff.status();
  // Nothing offloaded (no stash waits long enough, e.g. one stage): the
  // setup without offload, as the runtime would run it.
  if (eff->hostBytes <= 0)
    return out;
  on.offload = true;
  on.offloadHostBytes = eff->hostBytes;
  on.offloadStashes = eff->stashes;
  on.offloadCopyTotal = eff->copyTotal;
  on.offloadCopyTime = eff->copyExposed;
  if (Status st = splitStep(su, on, schedule, sc, hooks.splitPipelineComm);
      !st)
    return st;
  std::vector<Candidate> with = sizeMemory(su, on, pl, eff->sim, sc, rp, zeros);
  if (!hooks.offloadOff)
    out.clear();
  for (size_t i = 0; i < with.size(); ++i) {
    with[i].activationBytesNoOffload = without[i].activationBytes;
    if (!hooks.offloadOff || !without[i].fits)
      out.push_back(std::move(with[i]));
  }
  return out;
}

/// evaluateSharing for the stages in `zeros`: 0, 1 and 2 share their
/// times; ZeRO-3, whose collectives change them, is evaluated apart.
static Expected<std::vector<Candidate>>
evaluateZeros(const ModelCosts &model, const Cluster &cluster,
              const PlanOptions &opts, ScheduleKind kind, int pp, int b,
              Layout layout, int t, int e, Recompute recompute,
              const std::vector<int> &recomputeStages,
              const std::vector<int> &zeros, const SweepHooks &hooks = {}) {
  std::vector<int> shared;
  bool three = false;
  for (int z : zeros) {
    if (z == 3)
      three = true;
    else
      shared.push_back(z);
  }
  std::vector<Candidate> out;
  if (!shared.empty() || !three) {
    auto r = evaluateSharing(model, cluster, opts, kind, pp, b, layout, t, e,
                             recompute, recomputeStages, shared, hooks,
                             /*zero3=*/false);
    if (!r || !three)
      return r;
    out = std::move(*r);
    if (out.empty() && kind == ScheduleKind::Auto)
      return out; // pruned
  }
  auto r3 = evaluateSharing(model, cluster, opts, kind, pp, b, layout, t, e,
                            recompute, recomputeStages, {3}, hooks,
                            /*zero3=*/true);
  if (!r3) {
    if (out.empty())
      return r3;
    return out; // the other stages stand
  }
  for (Candidate &c : *r3)
    out.push_back(std::move(c));
  return out;
}

Expected<Candidate> plan::evaluate(const ModelCosts &model,
                                   const Cluster &cluster,
                                   const PlanOptions &opts, ScheduleKind kind,
                                   int pp, int b, Layout layout,
                                   const SetupOptions &setup) {
  if (setup.zero < 0 || setup.zero > 3)
    return Status::error("ZeRO stage " + fmtInt(setup.zero) +
                         ": only 0, 1, 2 and 3 are modelled");
  SweepHooks hooks;
  hooks.offloadOff = !setup.offload;
  hooks.offloadOn = setup.offload;
  auto r = evaluateZeros(model, cluster, opts, kind, pp, b, layout, setup.tp,
                         setup.ep, setup.recompute, setup.recomputeStages,
                         {setup.zero}, hooks);
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
      int(c.offload), c.zero);
}

template <typename T> void sortUnique(std::vector<T> &v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

/// The sweep's inputs that no setup can repair.
Status checkPlanInputs(const ModelCosts &model, const Cluster &cluster,
                       const PlanOptions &opts) {
  if (model.layers.empty())
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
  return Status::ok();
}

/// What the sweep tries, each list sorted and without repeats (the
/// schedules in the order given).
struct SweepAxes {
  std::vector<ScheduleKind> kinds;
  std::vector<int> tps;
  /// `none` first: its setups decide the stages a policy is also tried on
  /// alone (per-stage recomputation).
  std::vector<Recompute> policies;
  std::vector<int> zeroStages;
  /// Interleaved 1F1B once per chunk count v (virtual stages), each with
  /// its own options (PlanOptions::chunksPerRank is one evaluation's v).
  std::vector<PlanOptions> chunkOpts;
  std::vector<int> sizes;
  std::vector<Layout> layouts;
};

/// The tensor-parallel degrees: those asked for (the ones the model or the
/// cluster rule out go to `skipped`), or every one possible.
std::vector<int> tensorDegrees(const ModelCosts &model, const Cluster &cluster,
                               const PlanOptions &opts,
                               std::set<std::string> &skipped) {
  std::vector<int> tps = opts.tensorDegrees;
  sortUnique(tps);
  if (tps.empty()) {
    for (int t = 1; t <= cluster.gpusPerNode; ++t)
      if (checkTensorDegree(model, cluster, t) && cluster.gpus % t == 0)
        tps.push_back(t);
    return tps;
  }
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
  return ok;
}

Expected<SweepAxes> sweepAxes(const ModelCosts &model, const Cluster &cluster,
                              const PlanOptions &opts,
                              std::set<std::string> &skipped) {
  SweepAxes a;
  a.kinds = opts.schedules.empty() ? defaultSchedules(bool(opts.autoScheduler))
                                   : opts.schedules;
  a.tps = tensorDegrees(model, cluster, opts, skipped);
  a.policies = opts.recomputePolicies;
  if (a.policies.empty()) {
    // Recomputation applies to transformer blocks; without any, the
    // policies are all the same setup.
    bool blocks = std::any_of(
        model.layers.begin(), model.layers.end(),
        [](const LayerCost &l) { return l.kind == LayerKind::Block; });
    a.policies = {Recompute::None};
    if (blocks)
      a.policies.insert(a.policies.end(),
                        {Recompute::Selective, Recompute::Full});
  }
  sortUnique(a.policies);
  a.zeroStages = opts.zeroStages;
  if (a.zeroStages.empty())
    a.zeroStages = {0, 1};
  for (int z : a.zeroStages)
    if (z < 0 || z > 3)
      return Status::error("ZeRO stage " + fmtInt(z) +
                           ": only 0, 1, 2 and 3 are modelled");
  std::vector<int> chunkCounts = opts.chunkCounts;
  if (chunkCounts.empty())
    chunkCounts = {opts.chunksPerRank};
  sortUnique(chunkCounts);
  for (int v : chunkCounts) {
    if (v < 2)
      return Status::error("interleaved: " + fmtInt(v) +
                           " chunks per rank (at least 2)");
    a.chunkOpts.push_back(opts);
    a.chunkOpts.back().chunksPerRank = v;
  }
  a.sizes = opts.microbatchSizes;
  sortUnique(a.sizes);
  // On one node the layouts coincide.
  a.layouts = {Layout::PipelineInNode};
  if (cluster.gpus > cluster.gpusPerNode) {
    a.layouts = opts.layouts;
    if (a.layouts.empty())
      a.layouts = {Layout::PipelineInNode, Layout::DataInNode};
    sortUnique(a.layouts);
  }
  return a;
}

/// The sweep over every setup of the axes: the generators' schedules first,
/// then the automatic scheduler's runs, pruned against their times.
class Sweep {
public:
  Sweep(const ModelCosts &model, const Cluster &cluster,
        const PlanOptions &opts, const SweepAxes &axes,
        std::set<std::string> &skipped, PlanResult &r)
      : model(model), cluster(cluster), opts(opts), axes(axes),
        skipped(skipped), r(r) {
    hooks.schedules = &schedules;
    hooks.splitPipelineComm = false;
    const auto &modes = opts.offloadModes;
    hooks.offloadOff =
        modes.empty() || std::find(modes.begin(), modes.end(), false) !=
                             modes.end();
    hooks.offloadOn = std::find(modes.begin(), modes.end(), true) !=
                      modes.end();
  }

  /// Every generator's setup; the automatic scheduler's are queued.
  void generators();
  /// The queued automatic scheduler's runs.
  void autoRuns();
  /// Every candidate evaluated, in the order of evaluation.
  std::vector<Candidate> all;

private:
  std::vector<int> pipelineDegrees(int t) const;
  void pipeline(int t, Recompute rc, int p);
  void schedulesAt(int p, int b, int t, int e, int d, Recompute rc,
                   const std::vector<int> &zeros);
  void runSetup(const PlanOptions &o, ScheduleKind k, int p, int b, Layout lay,
                int t, int e, Recompute rc, const std::vector<int> &zeros);
  void add(Expected<std::vector<Candidate>> c);

  const ModelCosts &model;
  const Cluster &cluster;
  const PlanOptions &opts;
  const SweepAxes &axes;
  std::set<std::string> &skipped;
  PlanResult &r;
  ScheduleCache schedules;
  SweepHooks hooks;
  /// The automatic scheduler's runs, done after the generators' setups (it
  /// costs far more: it is pruned against their times).
  struct AutoRun {
    int p, b, t, e;
    Layout lay;
    Recompute rc;
    int zero;
  };
  std::vector<AutoRun> queued;
  /// A setup without recomputation that is over memory on some of its ranks
  /// only: the stages those ranks hold, where a recomputation policy is then
  /// also tried alone (per-stage recomputation). Keyed by (t, p, e, b,
  /// schedule, layout, interleaved chunks, ZeRO stage).
  using SetupKey = std::tuple<int, int, int, int, int, int, int, int>;
  std::map<SetupKey, std::vector<int>> overStages;
};

void Sweep::add(Expected<std::vector<Candidate>> c) {
  if (!c) {
    skipped.insert(c.message());
    return;
  }
  for (Candidate &cand : *c) {
    ++r.evaluated;
    if (cand.recompute == Recompute::None && !cand.fits && !cand.offload &&
        !cand.stagesOverMemory.empty() &&
        int(cand.stagesOverMemory.size()) < cand.stages)
      overStages[{cand.tp, cand.pp, cand.ep, cand.microbatchSize,
                  int(cand.kind), int(cand.layout),
                  cand.kind == ScheduleKind::Interleaved ? cand.chunks : 0,
                  cand.zero}] = cand.stagesOverMemory;
    all.push_back(std::move(cand));
  }
}

/// One setup under policy rc on every stage, and (rc != none) on only the
/// stages whose ranks the same setup without recomputation overfills.
void Sweep::runSetup(const PlanOptions &o, ScheduleKind k, int p, int b,
                     Layout lay, int t, int e, Recompute rc,
                     const std::vector<int> &zeros) {
  add(evaluateZeros(model, cluster, o, k, p, b, lay, t, e, rc, {}, zeros,
                    hooks));
  if (rc == Recompute::None)
    return;
  for (int z : zeros) {
    auto it = overStages.find(
        {t, p, e, b, int(k), int(lay),
         k == ScheduleKind::Interleaved ? o.chunksPerRank : 0, z});
    if (it != overStages.end())
      add(evaluateZeros(model, cluster, o, k, p, b, lay, t, e, rc, it->second,
                        {z}, hooks));
  }
}

std::vector<int> Sweep::pipelineDegrees(int t) const {
  std::vector<int> degrees = opts.pipelineDegrees;
  if (degrees.empty())
    for (int p = 1; p <= cluster.gpus / t; ++p)
      if ((cluster.gpus / t) % p == 0 && p <= int(model.layers.size()))
        degrees.push_back(p);
  sortUnique(degrees);
  return degrees;
}

void Sweep::generators() {
  int groups = 0, groupsDone = 0;
  for (int t : axes.tps)
    groups += int(pipelineDegrees(t).size() * axes.policies.size());
  for (int t : axes.tps) {
    const std::vector<int> degrees = pipelineDegrees(t);
    for (Recompute rc : axes.policies)
      for (int p : degrees) {
        if (opts.progress)
          opts.progress("setup groups", groupsDone, groups, r.evaluated);
        ++groupsDone;
        pipeline(t, rc, p);
      }
  }
}

/// Every setup of pipeline degree p with t and rc: the expert-parallel
/// degrees, ZeRO stages and microbatch sizes it allows.
void Sweep::pipeline(int t, Recompute rc, int p) {
  if ((cluster.gpus / t) % p != 0) {
    skipped.insert("pp=" + fmtInt(p) + " tp=" + fmtInt(t) +
                   ": p x t does not divide " + fmtInt(cluster.gpus) + " GPUs");
    return;
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
    for (int z : axes.zeroStages)
      if (z == 0 || d / e > 1)
        zeros.push_back(z);
    if (zeros.empty())
      continue;
    for (int b : axes.sizes) {
      if (opts.globalBatch % (int64_t(d) * b) != 0) {
        skipped.insert(
            "pp=" + fmtInt(p) + " tp=" + fmtInt(t) + " b=" + fmtInt(b) +
            ": global batch " + fmtInt(opts.globalBatch) +
            " is not a multiple of dp x b = " + fmtInt(int64_t(d) * b));
        continue;
      }
      schedulesAt(p, b, t, e, d, rc, zeros);
    }
  }
}

/// Every schedule and layout of one (p, b, t, e, rc).
void Sweep::schedulesAt(int p, int b, int t, int e, int d, Recompute rc,
                        const std::vector<int> &zeros) {
  // On one rank there is no pipeline: every linear schedule is plain
  // data parallelism, so only the first one listed is evaluated.
  bool pureDpDone = false;
  for (ScheduleKind k : axes.kinds) {
    if (p == 1) {
      bool linear = stagesFor(k, 1, 2) == 1 && k != ScheduleKind::DualPipe &&
                    k != ScheduleKind::Chimera;
      if (!linear || pureDpDone)
        continue;
      pureDpDone = true;
    }
    for (Layout lay : axes.layouts) {
      // With p = 1 or d = 1 the layouts coincide (unless an expert group
      // and the replicas of its shards take turns inside the node).
      if (lay == Layout::DataInNode &&
          ((p == 1 && (e == 1 || e == d)) || d == 1))
        continue;
      // Expert ranks fastest differs from dp-in-node only when the group
      // is some of the d ranks.
      if (lay == Layout::ExpertInNode && !(e > 1 && e < d))
        continue;
      // The automatic scheduler's memory budget depends on the ZeRO stage:
      // one run each. The generators' schedules are shared.
      if (k == ScheduleKind::Auto) {
        for (int z : zeros)
          queued.push_back({p, b, t, e, lay, rc, z});
        continue;
      }
      if (k == ScheduleKind::Interleaved) {
        for (const PlanOptions &o : axes.chunkOpts)
          runSetup(o, k, p, b, lay, t, e, rc, zeros);
        continue;
      }
      runSetup(opts, k, p, b, lay, t, e, rc, zeros);
    }
  }
}

/// Auto cannot enter the list (top N, at least the recommendation and the
/// runner-up) when its lower bound is above the N-th fastest setup that
/// fits; such runs are counted as pruned.
void Sweep::autoRuns() {
  if (queued.empty())
    return;
  std::vector<double> fitTimes;
  for (const Candidate &c : all)
    if (c.fits)
      fitTimes.push_back(c.stepTime);
  // Each setup can come twice (ZeRO-1 and 0, the same times), so twice
  // the shown setups keep the runner-up too.
  size_t keep = std::max<size_t>(2, axes.zeroStages.size()) *
                size_t(std::max(2, opts.topN));
  double threshold = std::numeric_limits<double>::infinity();
  if (fitTimes.size() >= keep) {
    std::nth_element(fitTimes.begin(), fitTimes.begin() + (keep - 1),
                     fitTimes.end());
    threshold = fitTimes[keep - 1];
  }
  SweepHooks pruneAt = hooks;
  pruneAt.pruneAbove = threshold;
  for (size_t i = 0; i < queued.size(); ++i) {
    const AutoRun &a = queued[i];
    if (opts.progress)
      opts.progress("auto runs", int(i), int(queued.size()), r.evaluated);
    auto c = evaluateZeros(model, cluster, opts, ScheduleKind::Auto, a.p, a.b,
                           a.lay, a.t, a.e, a.rc, {}, {a.zero}, pruneAt);
    if (c && c->empty()) {
      ++r.pruned;
      continue;
    }
    add(std::move(c));
  }
}

/// The setups that fit, fastest first, and the runner-up: the next setup
/// that differs in more than the ZeRO stage. The others, least memory
/// first.
void rank(PlanResult &r, std::vector<Candidate> &all) {
  for (Candidate &c : all)
    (c.fits ? r.ranked : r.overMemory).push_back(std::move(c));
  std::stable_sort(r.ranked.begin(), r.ranked.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return rankKey(a) < rankKey(b);
                   });
  for (size_t i = 1; i < r.ranked.size() && r.runnerUp < 0; ++i) {
    const Candidate &c = r.ranked[i], &best = r.ranked.front();
    if (c.kind != best.kind || c.pp != best.pp || c.tp != best.tp ||
        c.ep != best.ep || c.chunks != best.chunks ||
        c.microbatchSize != best.microbatchSize || c.layout != best.layout ||
        c.recompute != best.recompute ||
        c.recomputeStages != best.recomputeStages)
      r.runnerUp = int(i);
  }
}

/// The setups the report shows (the top N and the runner-up) get their
/// idle time split (the same schedule and times again, with the second
/// simulation).
void splitShown(PlanResult &r, const ModelCosts &model, const Cluster &cluster,
                const PlanOptions &opts) {
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
    SweepHooks hooks;
    hooks.offloadOff = !c.offload;
    hooks.offloadOn = c.offload;
    auto full = evaluateZeros(model, cluster, shown, c.kind, c.pp,
                              c.microbatchSize, c.layout, c.tp, c.ep,
                              c.recompute, c.recomputeStages, {c.zero}, hooks);
    if (full && full->size() == 1 && full->front().chunks == c.chunks &&
        std::llround(full->front().stepTime * 1e9) ==
            std::llround(c.stepTime * 1e9))
      c = std::move(full->front());
  }
}

/// Why nothing was ranked: no setup could be formed (the first reasons),
/// or none fits (the smallest need against the capacity).
Status nothingFits(const PlanResult &r, const Cluster &cluster,
                   const PlanOptions &opts) {
  if (r.overMemory.empty()) {
    std::string msg = "no setup can be formed for " + fmtInt(cluster.gpus) +
                      " GPUs and a global batch of " + fmtInt(opts.globalBatch);
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
} // namespace

namespace {
Expected<PlanResult> sweepOnce(const ModelCosts &model, const Cluster &cluster,
                               const PlanOptions &opts);
} // namespace

Expected<PlanResult> plan::plan(const ModelCosts &model, const Cluster &cluster,
                                const PlanOptions &opts) {
  auto r = sweepOnce(model, cluster, opts);
  // Memory needs them: without --zero, nothing fits at ZeRO 0 or 1, so ZeRO
  // 2 and 3 are swept (their step times price the gathers and scatters).
  if (r || !opts.zeroStages.empty() ||
      r.message().find("infeasible") == std::string::npos)
    return r;
  PlanOptions deeper = opts;
  deeper.zeroStages = {2, 3};
  auto z = sweepOnce(model, cluster, deeper);
  if (!z)
    return r; // still nothing: the error of the default sweep
  // "the smallest need is X GiB per GPU (setup) but a GPU offers Y GiB (...)"
  std::string why = r.message();
  const std::string lead = "no setup fits in memory: ";
  if (size_t at = why.find(lead); at != std::string::npos)
    why = why.substr(at + lead.size());
  if (size_t at = why.rfind("; "); at != std::string::npos)
    why = why.substr(0, at);
  z->zeroNote = "nothing fits at ZeRO 0 or 1 (" + why +
                "): ZeRO 2 and 3 swept";
  return z;
}

namespace {
Expected<PlanResult> sweepOnce(const ModelCosts &model, const Cluster &cluster,
                               const PlanOptions &opts) {
  if (Status st = checkPlanInputs(model, cluster, opts); !st)
    return st;
  std::set<std::string> skipped;
  auto axes = sweepAxes(model, cluster, opts, skipped);
  if (!axes)
    return axes.status();
  PlanResult r;
  Sweep sweep(model, cluster, opts, *axes, skipped, r);
  sweep.generators();
  sweep.autoRuns();
  r.skipped.assign(skipped.begin(), skipped.end());
  rank(r, sweep.all);
  splitShown(r, model, cluster, opts);
  std::stable_sort(
      r.overMemory.begin(), r.overMemory.end(),
      [](const Candidate &a, const Candidate &b) {
        return std::make_tuple(std::llround(a.memoryBytes), rankKey(a)) <
               std::make_tuple(std::llround(b.memoryBytes), rankKey(b));
      });
  if (r.ranked.empty())
    return nothingFits(r, cluster, opts);
  return r;
}
} // namespace

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
      "schedule pp tp ep dp b recompute recompute-stages zero chunks layout "
      "offload";
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
      if (value.size() != 1 || value[0] < '0' || value[0] > '3')
        return Status::error("key 'zero': expected 0, 1, 2 or 3, got '" +
                             value + "'");
      spec.zero = value[0] - '0';
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
    } else if (key == "offload") {
      if (value != "off" && value != "auto")
        return Status::error("key 'offload': expected off or auto, got '" +
                             value + "'");
      spec.offload = value == "auto";
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
  if (spec.zero >= 1 && d / spec.ep == 1) {
    const std::string z = fmtInt(spec.zero);
    return Status::error(
        d == 1 ? "zero=" + z + " needs data parallelism (dp = 1 here)"
               : "zero=" + z +
                     " needs data parallelism beyond the expert group (dp "
                     "= ep = " +
                     fmtInt(d) + " here: ZeRO-" + z + " shards over dp / ep)");
  }
  PlanOptions o = opts;
  if (spec.chunks > 0)
    o.chunksPerRank = spec.chunks;
  SetupOptions setup;
  setup.tp = spec.tp;
  setup.ep = spec.ep;
  setup.recomputeStages = spec.recomputeStages;
  setup.recompute = spec.recompute;
  setup.zero = spec.zero;
  setup.offload = spec.offload;

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

namespace {
template <typename V, typename X> bool has(const V &v, X x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

/// Why the sweep does not try `c` (with recomputation on some of its
/// stages only) although the options allow it; nullopt when it does. `o`:
/// the options with the setup's chunks.
std::optional<std::string> partialRecomputeReason(const Candidate &c,
                                                  const ModelCosts &model,
                                                  const Cluster &cluster,
                                                  const PlanOptions &opts,
                                                  const PlanOptions &o) {
  // The sweep tries a policy on some stages only where the same setup
  // without recomputation overfills exactly those stages' ranks.
  const std::string what =
      "recompute-stages: the sweep recomputes some stages only where the "
      "setup without recomputation is over memory on their ranks";
  if (c.kind == sched::ScheduleKind::Auto)
    return what + " (not for auto)";
  if (!opts.recomputePolicies.empty() &&
      !has(opts.recomputePolicies, Recompute::None))
    return what + " (none is not in --recompute)";
  SetupOptions plain;
  plain.tp = c.tp;
  plain.ep = c.ep;
  plain.zero = c.zero;
  auto none = evaluate(model, cluster, o, c.kind, c.pp, c.microbatchSize,
                       c.layout, plain);
  if (none && (none->fits || none->stagesOverMemory != c.recomputeStages))
    return what + (none->fits ? " (here it fits)"
                              : " (here: stages " +
                                    joinInts(none->stagesOverMemory) + ")");
  return std::nullopt;
}

/// Why the sweep's search space leaves out `c` (empty when it does not).
std::vector<std::string>
notSearched(const Candidate &c, const ModelCosts &model, const Cluster &cluster,
            const PlanOptions &opts, const PlanOptions &o) {
  std::vector<std::string> why;
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
  {
    const std::vector<bool> modes =
        opts.offloadModes.empty() ? std::vector<bool>{false}
                                  : opts.offloadModes;
    if (!has(modes, c.offload))
      why.push_back(std::string("offload=") + (c.offload ? "auto" : "off") +
                    " is not in --offload");
  }
  const std::vector<int> sweptChunks =
      opts.chunkCounts.empty() ? std::vector<int>{opts.chunksPerRank}
                               : opts.chunkCounts;
  if (c.kind == sched::ScheduleKind::Interleaved &&
      !has(sweptChunks, o.chunksPerRank))
    why.push_back("chunks=" + fmtInt(o.chunksPerRank) + " is not in --chunks " +
                  joinInts(sweptChunks));
  if (!c.recomputeStages.empty())
    if (auto reason = partialRecomputeReason(c, model, cluster, opts, o))
      why.push_back(*reason);
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
  return why;
}

/// The setup's place among the ranked ones: its rank when the sweep has it,
/// else where it would rank.
void placeAmongRanked(Explanation &e, const PlanResult &r) {
  const Candidate &c = e.setup;
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const Candidate &x = r.ranked[i];
    if (x.kind == c.kind && x.pp == c.pp && x.tp == c.tp && x.ep == c.ep &&
        x.recompute == c.recompute && x.zero == c.zero &&
        x.microbatchSize == c.microbatchSize && x.layout == c.layout &&
        x.stages == c.stages && x.chunks == c.chunks &&
        x.recomputeStages == c.recomputeStages && x.offload == c.offload) {
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
}
} // namespace

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
  // Is it in the sweep's search space?
  std::vector<std::string> why = notSearched(e.setup, model, cluster, opts, o);
  for (size_t i = 0; i < why.size(); ++i)
    e.notSearched += (i ? "; " : "") + why[i];
  placeAmongRanked(e, r);
  return e;
}
