//===- Planner.h - Choosing a parallel setup for a cluster ------*- C++ -*-===//
//
// Plain C++ (no MLIR): the planning half of `pipeforge-plan`. Given the
// per-layer costs of a model (FLOPs of F, B and W, activation bytes, parameter
// count, all per sequence of one microbatch), a cluster and a global batch, it
// sweeps
//
//   tensor-parallel degree t (a divisor of the GPUs per node that the
//   model's heads, KV heads, MLP width, vocabulary and sequence allow),
//   expert-parallel degree e (mixture-of-experts models: a divisor of d
//   and of every moe layer's experts),
//   activation recomputation (none, selective, full),
//   optimizer sharding (ZeRO stage 0 or 1; 2 and 3 when asked for),
//   pipeline degree p (a divisor of GPUs / t, at most the layers),
//   data-parallel degree d = GPUs / (p t),
//   microbatch size b and count m = global batch / (d b),
//   schedule (1f1b zb-h1 zb-h2 zbv dualpipe dualpipev interleaved ...),
//   GPU layout (pipeline ranks or data-parallel ranks inside a node),
//
// runs each setup through the schedule generators and the simulator, and
// ranks the ones that fit in memory by step time. See docs/planner.md for the
// model of time and memory.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_PLAN_PLANNER_H
#define PIPEFORGE_PLAN_PLANNER_H

#include "pipeforge/Plan/GradReduce.h"
#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Simulator.h"

#include <functional>
#include <string>
#include <vector>

namespace pipeforge::plan {

using sched::Expected;
using sched::Status;

/// What a layer is, as far as tensor parallelism and recomputation care.
enum class LayerKind {
  Other,     ///< no tensor-parallel collectives, never recomputed
  Embedding, ///< vocabulary-parallel: one all-reduce of the hidden state in F
  Block,     ///< a transformer block: 2 all-reduces in F, 2 in B; recomputed
  Head,      ///< final norm, LM head and loss: one all-reduce in B
};

/// The cost of one layer (the unit a partition never splits) for ONE
/// sequence (microbatch size 1); the planner multiplies by b. Every number
/// is for the whole layer (tensor parallelism t = 1); the planner divides.
struct LayerCost {
  double fwdFlops = 0, bwdInputFlops = 0, bwdWeightFlops = 0;
  double stashBytes = 0;       ///< M_B share: allocated by F, freed by B+W
  double weightStashBytes = 0; ///< M_W share: kept after B until W
  double params = 0;           ///< parameter count (elements)
  /// Bytes that cross the cut right after this layer (the activation sent
  /// to the next stage; the gradient coming back has the same size).
  double outputBytes = 0;

  LayerKind kind = LayerKind::Other;
  /// Bytes of one hidden state (seq x hidden x bytes per element): the size
  /// of each tensor-parallel all-reduce, and what full recomputation keeps of
  /// a block (its input).
  double hiddenBytes = 0;
  /// Of `stashBytes`: what the cost model counts but a compiled stage does
  /// not keep (nn::LayerCosts::unkeptBytes): the attention scores,
  /// probabilities and masks (the GPU backend's backward recomputes them)
  /// and the dropout masks (drawn again in B).
  double unkeptBytes = 0;
  /// Forward FLOPs of the attention core (Q K^T and P V); the GPU
  /// backward computes Q K^T again, half of it.
  double attnCoreFlops = 0;
  /// Of `stashBytes`: what selective recomputation drops (the stashed
  /// outputs of norms, activations and dropout whose inputs stay), as
  /// --pp-recompute=policy=selective does.
  double selectiveBytes = 0;
  /// Of `params`: the routed experts' weights (nn.moe's w1, w2, w3), which
  /// expert parallelism shards over the e ranks of an expert group.
  double expertParams = 0;
  /// Bytes of the token rows one all-to-all of this layer moves for one
  /// sequence (tokens x top_k x hidden x bytes per element): the dispatch
  /// to the experts' ranks, and the combine back, each, in F and in B.
  double routedBytes = 0;
  /// Routed experts per token (nn.moe's top_k); 0: not a moe layer.
  int topK = 0;
  /// Group-limited routing (DeepSeek-V3's n_group and topk_group): the
  /// routed experts are cut into `routingGroups` groups of consecutive
  /// experts and a token picks its top_k among `groupsPerToken` of them.
  /// 0: every token may reach every expert. With the groups on nodes this
  /// is node-limited routing, and the planner charges the dispatch a
  /// row per distinct destination node (nodeLimitedRows).
  int routingGroups = 0, groupsPerToken = 0;

  double totalFlops() const {
    return fwdFlops + bwdInputFlops + bwdWeightFlops;
  }
};

/// The model's dimensions that decide which tensor-parallel degrees are
/// possible. 0: unknown; a model
/// with unknown heads only runs with t = 1.
struct ModelShape {
  int64_t hidden = 0;
  int64_t heads = 0, kvHeads = 0; ///< attention heads, key/value heads
  int64_t ffn = 0;                ///< MLP (intermediate) width
  int64_t vocab = 0;
  /// Routed experts per moe layer (the gcd over the layers, which every
  /// expert-parallel degree must divide); 0: a dense model.
  int64_t experts = 0;
};

struct ModelCosts {
  std::string name;
  int64_t seqLen = 0; ///< tokens per sequence (for the throughput column)
  std::vector<LayerCost> layers;
  ModelShape shape;
  /// Parameters of tied copies (the LM head of tied embeddings): counted in
  /// their layer's `params` (the stage holds them and all-reduces their
  /// gradient) but not in the model's size.
  double tiedParams = 0;
};

/// The host link of a cluster file without host_link_gb_per_s: 25 GB/s,
/// PCIe 4.0 x16 as a copy engine achieves it (32 GB/s raw, about 80%).
constexpr double kDefaultHostLinkGBps = 25;

/// A cluster description (docs/planner.md: the JSON schema).
struct Cluster {
  std::string name;
  int gpus = 0;
  int gpusPerNode = 0;
  double memoryGiB = 0;     ///< per GPU
  double reservedGiB = 0;   ///< per GPU, unavailable to the model
  double intraNodeGBps = 0; ///< per GPU, one direction, 1e9 bytes/s
  double interNodeGBps = 0; ///< per GPU, one direction
  double peakTflops = 0;    ///< dense peak per GPU, 1e12 FLOP/s
  double efficiency = 1.0;  ///< achieved fraction of peak in a GEMM, (0, 1]
  /// HBM bandwidth per GPU, 1e9 bytes/s; 0: the default for the GPU class
  /// (defaultMemoryBandwidthGBps).
  double memoryBandwidthGBps = 0;
  /// Achieved fraction of the link bandwidth, per kind of transfer, (0, 1]
  /// (cluster keys all_reduce_efficiency, all_to_all_efficiency,
  /// p2p_efficiency; default 1): all-reduces (tensor-parallel and gradient
  /// rings), the expert all-to-alls, and pipeline sends (and DualPipe's
  /// gradient swap).
  double allReduceEfficiency = 1, allToAllEfficiency = 1, p2pEfficiency = 1;
  /// Host-to-device bandwidth per GPU, one direction, 1e9 bytes/s (cluster
  /// key host_link_gb_per_s): what activation offload's copies use; 0:
  /// kDefaultHostLinkGBps.
  double hostLinkGBps = 0;
  /// Dense FP8 tensor-core peak per GPU, 1e12 FLOP/s (cluster key
  /// fp8_peak_tflops): the rate of --float8's linear layers, at the same
  /// efficiency; 0: 2 x peakTflops on an H100-class GPU (peak >= 900:
  /// H100 SXM 1979 against 989), peakTflops below (no FP8 tensor cores).
  double fp8PeakTflops = 0;

  int numNodes() const {
    return gpusPerNode > 0 ? (gpus + gpusPerNode - 1) / gpusPerNode : 0;
  }
  double flopsPerSecond() const { return peakTflops * 1e12 * efficiency; }
  double fp8FlopsPerSecond() const {
    const double peak = fp8PeakTflops > 0      ? fp8PeakTflops
                        : peakTflops >= 900 ? 2 * peakTflops
                                            : peakTflops;
    return peak * 1e12 * efficiency;
  }
  /// H100-class (peak >= 900 TFLOP/s): 3350 GB/s (H100 SXM), else
  /// A100-class: 2039 GB/s (A100 SXM 80 GB).
  double defaultMemoryBandwidthGBps() const {
    return peakTflops >= 900 ? 3350 : 2039;
  }
  double memoryBytesPerSecond() const {
    return (memoryBandwidthGBps > 0 ? memoryBandwidthGBps
                                    : defaultMemoryBandwidthGBps()) *
           1e9;
  }
  /// The host link activation offload copies over (bytes/s).
  double hostLinkBytesPerSecond() const;
  double usableBytes() const {
    return (memoryGiB - reservedGiB) * 1024.0 * 1024.0 * 1024.0;
  }
};

/// Parses and validates a cluster JSON text. Errors name the key, e.g.
/// "cluster: key 'memory_gb': expected a positive number".
Expected<Cluster> parseCluster(const std::string &jsonText);
/// parseCluster of a file's text; errors start with the path.
Expected<Cluster> readClusterFile(const std::string &path);

/// The automatic scheduler, when one is wired in: returns a schedule for
/// `ranks` ranks, `microbatches` microbatches under the per-rank activation
/// limit `memLimit` (same units as the cost model's memB), or an error.
using AutoScheduleFn = std::function<Expected<sched::Schedule>(
    int ranks, int microbatches, const sched::CostModel &cost,
    double memLimit)>;

/// The automatic scheduler as the planner uses it: heuristic only (the ILP
/// would cost seconds per setup) and no wall-clock search, so plans are
/// deterministic.
AutoScheduleFn heuristicAutoScheduler();

/// Activation recomputation: the policy of `pipeforge-compile --recompute`,
/// on every stage or on some (`--recompute-stages`).
enum class Recompute {
  None,      ///< keep every activation B and W need
  Selective, ///< drop the stashed outputs of norms, activations and dropout
  Full,      ///< keep each block's input only, redo its forward in B
};
const char *recomputeName(Recompute r); ///< "none" / "selective" / "full"
/// Parses a recomputeName; false when unknown.
bool parseRecompute(const std::string &text, Recompute &out);

/// Where the ranks sit: `PipelineInNode` numbers the GPUs with the pipeline
/// stage varying fastest (a pipeline stays inside a node when p <= GPUs per
/// node), `DataInNode` with the data-parallel index varying fastest.
/// `ExpertInNode` numbers the expert ranks of a group fastest, then the
/// replicas of the expert shards, then the pipeline stage (an expert group
/// fills whole nodes, as DeepSeek-V3's 64-way groups span 8 nodes); the
/// runtime has no rank layout for it, so the sweep tries it only when
/// PlanOptions::layouts names it.
enum class Layout { PipelineInNode, DataInNode, ExpertInNode };
/// "pp-in-node" / "dp-in-node" / "ep-in-node"
const char *layoutName(Layout l);
/// Parses a layoutName; false when unknown.
bool parseLayout(const std::string &text, Layout &out);

/// Rows of one token that a node-limited dispatch (or combine) moves, per
/// link (docs/planner.md, "Node-limited routing").
struct DispatchRows {
  double network = 0; ///< over the inter-node links (one per remote node)
  double nvlink = 0;  ///< forwarded inside a node to the experts' GPUs
};
/// A token's top_k rows to an expert group over `nodes` nodes of
/// `perNode` members each, with every token's experts on at most
/// `maxNodes` nodes (DeepSeek-V3's dispatch: a row crosses the network
/// once per distinct remote node, then NVLink forwards it to each
/// expert's GPU): network = min(M (N-1)/N, (N-1)(1 - (1 - 1/N)^k)), the
/// expected distinct remote nodes with the M nodes chosen uniformly (the
/// own node among them with probability M/N) and with k uniform experts;
/// nvlink = k (L-1)/L, the rows whose expert is not on the GPU they land
/// on. One node (N = 1): network 0.
DispatchRows nodeLimitedRows(int topK, int nodes, int perNode, int maxNodes);
/// The nodes a token can reach under group-limited routing of `groups`
/// groups, `groupsPerToken` chosen, when the expert group spans `nodes`
/// nodes holding consecutive experts: min(N, g x max(1, ceil(N / G))). 0
/// when routing is not group-limited (groups <= 0).
int nodeLimit(int groups, int groupsPerToken, int nodes);

/// Sets group-limited routing on every moe layer of `model` (G groups, g
/// per token; G = 1 is no limit). Errors: g outside 1..G, a dense model,
/// G not dividing the experts per layer.
Status setRoutingGroups(ModelCosts &model, int groups, int groupsPerToken);

/// The choices inside a pipeline stage: tensor-parallel degree, recomputation
/// and optimizer sharding.
struct SetupOptions {
  int tp = 1;                            ///< tensor-parallel degree t
  Recompute recompute = Recompute::None; ///< activation recomputation
  /// 1: the optimizer state is sharded over the d replicas; 2: the
  /// gradients too (lower at the peak only with one microbatch); 3: the
  /// weights too, gathered per layer and microbatch (FSDP).
  int zero = 0;
  /// Expert-parallel degree e: the experts of every moe layer are split
  /// over e of the d data-parallel ranks (which stay data-parallel for the
  /// rest of the model).
  int ep = 1;
  /// The stages (of a model copy, 0..S-1) `recompute` applies to; empty:
  /// every stage. With some stages only, the layers are cut as without
  /// recomputation.
  std::vector<int> recomputeStages;
  /// Activation offload as `pipeforge-run --offload-activations auto`.
  bool offload = false;
};

/// Why tensor-parallel degree `t` cannot run `model` on `cluster` (ok when
/// it can): t must divide the GPUs per node (tensor-parallel groups never
/// leave a node) and the heads, KV heads, MLP width, vocabulary (the
/// vocabulary-parallel embedding splits it as it is, unpadded) and sequence
/// (sequence parallelism).
Status checkTensorDegree(const ModelCosts &model, const Cluster &cluster,
                         int t);

/// Why expert-parallel degree `e` cannot run `model` with `d` data-parallel
/// ranks (ok when it can): e must divide d (an expert group is e of the
/// data-parallel ranks) and every moe layer's expert count; a dense model
/// only runs with e = 1.
Status checkExpertDegree(const ModelCosts &model, int e, int d);

struct PlanOptions {
  int64_t globalBatch = 0; ///< sequences per step
  std::vector<int> microbatchSizes = {1, 2, 4, 8};
  /// Empty: every kind the planner supports (plus Auto when autoScheduler
  /// is set).
  std::vector<sched::ScheduleKind> schedules;
  int chunksPerRank = 2; ///< interleaved 1F1B (one evaluation's v)
  /// Interleaved: the chunks per rank v to sweep (virtual stages); empty:
  /// {chunksPerRank}.
  std::vector<int> chunkCounts;
  double stateBytesPerParam = 16; ///< weights + grads + Adam states
  /// Of stateBytesPerParam: the weights (bf16) and the gradients (bf16); the
  /// rest (fp32 master weights, Adam m and v: 12) is the optimizer state
  /// that ZeRO-1 divides by d. The weight bytes are also what a pass reads
  /// per parameter (the roofline).
  double weightBytesPerParam = 2;
  double gradStateBytesPerParam = 2;
  double gradBytesPerParam = 4; ///< bytes all-reduced per param
  /// ZeRO-1 shards the dense parameters' optimizer state over all d
  /// data-parallel ranks (Megatron's distributed optimizer, DeepSeek-V3),
  /// not only over the d / e replicas of an expert rank (the runtime's
  /// `pipeforge-run --zero 1`, the default). Expert shards: d / e always.
  bool zeroDenseOverAll = false;
  /// When the data-parallel gradient all-reduce may start
  /// (--overlap-grad-reduce; GradReduce.h): by default bucketed per layer,
  /// overlapped with the backward work of the last microbatches, as
  /// pipeforge-run does (layer); off: after the pipeline.
  GradOverlap gradOverlap = GradOverlap::Layer;
  /// --float8 (torchtitan's Float8 training, tensorwise dynamic scaling):
  /// the blocks' linear GEMMs (not attention's core, not the LM head) run
  /// at the cluster's FP8 rate, their operands cast by separate
  /// memory-bound passes, and the tensor-parallel all-gathers of F move 1
  /// byte per element; with `fp8AllGather` ZeRO-3 gathers the blocks'
  /// weights in float8 too (1 byte per parameter, gathered and held so).
  bool fp8Linear = false, fp8AllGather = false;
  /// --async-tp: the tensor-parallel collectives overlap the pass's GEMMs;
  /// only what exceeds them is charged.
  bool asyncTp = false;
  /// --zero-gather stage: ZeRO-3 gathers a stage's weights once per step
  /// (at its first F, held to its last B: torchtitan under pipeline
  /// parallelism, pipeforge-run --zero 3) and reduce-scatters its
  /// gradients once (accumulated unsharded, --grad-bytes per parameter),
  /// instead of per layer and microbatch.
  bool zeroGatherStage = false;
  /// --interleaved-rule: the order of interleaved 1F1B's warm-up and
  /// cool-down (sched::InterleavedRule). Auto: Megatron's where p divides
  /// m, else PyTorch's; PyTorch: ScheduleInterleaved1F1B's (its rounds of
  /// min(m, p) microbatches and warm-up (v-1) m/R + 2 (p-1-r), capped at
  /// v m), which differs from Megatron's when m = p: the last ranks then
  /// start their backwards before their last chunk's forwards, and hold
  /// fewer microbatches.
  sched::InterleavedRule interleavedRule = sched::InterleavedRule::Auto;
  int topN = 5;
  /// Pipeline degrees to try; empty means every divisor of the GPU count.
  std::vector<int> pipelineDegrees;
  /// Tensor-parallel degrees to try; empty means every degree
  /// checkTensorDegree allows (1 always).
  std::vector<int> tensorDegrees;
  /// Expert-parallel degrees to try; empty means every degree
  /// checkExpertDegree allows (1 for a dense model).
  std::vector<int> expertDegrees;
  /// GPU layouts to try on more than one node; empty means the runtime's
  /// two (pp-in-node, dp-in-node). ExpertInNode is tried only for
  /// setups with 1 < e < d, where it differs from dp-in-node.
  std::vector<Layout> layouts;
  /// Recomputation policies to try; empty means all three.
  std::vector<Recompute> recomputePolicies;
  /// ZeRO stages to try (0 to 3); empty means 0 and 1 (1, 2 and 3 only
  /// with d / e > 1, where they differ from 0).
  std::vector<int> zeroStages;
  AutoScheduleFn autoScheduler; ///< optional
  /// Called as the sweep goes: `phase` is "setup groups" (done and total
  /// count the (t, recomputation, p) groups) or "auto runs" (the automatic
  /// scheduler's runs), `evaluated` the setups so far. Optional.
  std::function<void(const char *phase, int done, int total, int evaluated)>
      progress;
  /// Activation offload (pipeforge-run --offload-activations) to try:
  /// false = off, true = auto (sched::kOffloadGapAuto). Empty: off only.
  /// With both, a setup is tried with offload only when it is over memory
  /// without (offload never makes a step faster).
  std::vector<bool> offloadModes;
  /// The model file as the user named it, for the launch commands the
  /// report prints ("MODEL" when empty).
  std::string modelPath;
};

/// The commands that realise `c` (docs/planner.md, "Launching the
/// recommendation"): pipeforge-compile with its degrees, microbatches,
/// recomputation and sequence length, then mpirun with the mapping that
/// gives its layout and pipeforge-run with its ZeRO stage. One line each.
std::string launchCommands(const struct Candidate &c, const ModelCosts &m,
                           const Cluster &cl, const PlanOptions &opts);

/// The schedule kinds swept by default, in tie-breaking order.
std::vector<sched::ScheduleKind> defaultSchedules(bool withAuto);


/// One evaluated setup. Times in seconds, memory in bytes.
struct Candidate {
  sched::ScheduleKind kind = sched::ScheduleKind::OneFOneB;
  std::string schedule; ///< its name, e.g. "zb-h1"
  int pp = 1, dp = 1;   ///< pipeline and data-parallel degree
  int tp = 1;           ///< tensor-parallel degree
  int ep = 1;           ///< expert-parallel degree (of the dp ranks)
  Recompute recompute = Recompute::None;
  /// The stages `recompute` applies to (sorted); empty: every stage.
  std::vector<int> recomputeStages;
  int zero = 0;           ///< ZeRO stage (0 to 3)
  /// ZeRO-3 gathered per stage and step (--zero-gather stage).
  bool zeroGatherStage = false;
  int microbatchSize = 1; ///< b
  int microbatches = 1;   ///< m per pipeline (DualPipe: the total C)
  int stages = 1;         ///< stages per model copy
  /// Stages per rank: v for interleaved, 2 for the V-shapes and DualPipe
  /// (two copies), 1 for the linear schedules.
  int chunks = 1;
  Layout layout = Layout::PipelineInNode;
  bool ppInterNode = false;    ///< pipeline hops cross nodes
  bool dpInterNode = false;    ///< the data-parallel ring crosses nodes
  bool epInterNode = false;    ///< the expert group spans nodes
  std::vector<int> layerSplit; ///< layers per stage (copy 0)

  double pipelineTime = 0; ///< simulated makespan
  /// The exposed part of the gradient all-reduce over d (experts: d / e)
  /// replicas: what ends after the pipeline's makespan (GradReduce.h).
  double dpTime = 0;
  /// The busiest rank's gradient all-reduce in full (what the step would see
  /// without overlap); dpTime <= dpReduceTime.
  double dpReduceTime = 0;
  /// The rank whose all-reduce ends last, and the window its reduction
  /// overlaps: from its first ready bucket to its last compute.
  int dpTailRank = 0;
  double dpOverlapWindow = 0;
  GradOverlap gradOverlap = GradOverlap::Off;
  double dualReduceTime = 0;  ///< DualPipe: summing the two copies' grads
  /// pipelineTime + dualReduceTime + dpTime + offloadCopyTime
  double stepTime = 0;
  double bubbleRate = 0;      ///< of the pipeline (simulator's bubble_rate)
  double commTime = 0;        ///< T_comm on a cross-stage edge
  double paramBytes = 0;      ///< model state bytes on the fullest rank
  double activationBytes = 0; ///< simulated peak activation, fullest rank
  double memoryBytes = 0;     ///< max over ranks of state + activation
  /// The stages (of copy 0) held by a rank over the memory: where a partial
  /// recomputation policy would apply.
  std::vector<int> stagesOverMemory;
  bool fits = false;
  double tokensPerSecond = 0;
  /// Model FLOPs (F + B + W of the cost model, without recomputation) per
  /// step over (GPUs x peak x step time).
  double mfu = 0;

  /// The step time split; the parts add up to stepTime. Compute, recompute
  /// and tensor-parallel collectives are averages over the pipeline ranks of
  /// their busy time; the pipeline's idle time (bubbleRate x pipelineTime)
  /// is split into the exposed pipeline communication (the makespan with
  /// T_comm minus the makespan without) and the bubble proper.
  double computeTime = 0;   ///< GEMMs and the rest of F, B, W (roofline)
  double recomputeTime = 0; ///< forward work repeated in B
  double tpCommTime = 0;    ///< exposed tensor-parallel all-reduces
  /// Exposed expert all-to-alls (dispatch and combine in F and B; DualPipe's
  /// overlapped F&B pairs hide them behind the other microbatch's compute).
  double epCommTime = 0;
  double bubbleTime = 0; ///< idle, without the pipeline communication
  double ppCommTime = 0; ///< exposed stage-to-stage transfers
  /// dpTime + dualReduceTime + zeroExposedTime
  double dpCommTime = 0;
  /// ZeRO-3: the per-layer all-gathers (F and B) and reduce-scatters (B)
  /// of a step, averaged over the pipeline ranks: all of them, and what
  /// the layers' compute does not hide (part of the pipeline's time).
  double zeroCommTime = 0, zeroExposedTime = 0;
  /// The model state split (on the fullest rank; they add up to
  /// paramBytes).
  double weightBytes = 0, gradBytes = 0, optimizerBytes = 0;
  /// DualPipe: the model state of the second copy's stage on the rank
  /// where it is largest (weights, gradients, optimizer state under the
  /// ZeRO stage), and its parameters; 0 for one-copy schedules.
  double secondCopyBytes = 0, secondCopyParams = 0;
  /// Nodes an expert group spans (1: inside one node) and the most nodes a
  /// token's experts can be on under group-limited routing (0: no limit).
  int epNodes = 1, epNodeLimit = 0;

  /// Activation offload (`--offload-activations auto`; docs/planner.md,
  /// "Activation offload"): activationBytes is then the simulator's peak
  /// with the offload plan replayed.
  bool offload = false;
  /// The most bytes of F-stashes in host memory at once, on the rank that
  /// holds the most.
  double offloadHostBytes = 0;
  /// The peak activation of the fullest rank without offload (for the
  /// report's comparison).
  double activationBytesNoOffload = 0;
  /// Offloaded stashes, and their copies (two each) in full, on the rank
  /// whose copies are the most exposed; offloadCopyTime: what of them the
  /// compute actions they run under do not hide (part of stepTime).
  int offloadStashes = 0;
  double offloadCopyTotal = 0, offloadCopyTime = 0;
};

struct PlanResult {
  /// Setups that fit, fastest first (ties: less memory, then fewer pipeline
  /// stages, less tensor parallelism, smaller microbatch, schedule order,
  /// layout, less recomputation, ZeRO stage).
  std::vector<Candidate> ranked;
  /// Index in `ranked` of the runner-up: the next setup that differs from
  /// the recommendation in more than the ZeRO stage (which changes only
  /// memory); -1 when there is none.
  int runnerUp = -1;
  /// Setups over the memory limit, least memory first.
  std::vector<Candidate> overMemory;
  int evaluated = 0;
  /// Automatic-scheduler setups not run because a lower bound of their step
  /// time is above the N-th fastest fitting setup (N = top, at least 2).
  int pruned = 0;
  /// Setups that could not be formed (e.g. "dualpipe: needs an even number
  /// of ranks"), one line each, deduplicated.
  std::vector<std::string> skipped;
  /// Without --zero, the sweep tries ZeRO 0 and 1; when nothing fits there
  /// it sweeps ZeRO 2 and 3 (the gradients, then the parameters sharded)
  /// and says so here (empty otherwise).
  std::string zeroNote;
};

/// Evaluates one setup (no memory check against the cluster is skipped:
/// `fits` is set). Errors when the schedule cannot be generated or the
/// tensor-parallel degree is not possible.
Expected<Candidate> evaluate(const ModelCosts &model, const Cluster &cluster,
                             const PlanOptions &opts, sched::ScheduleKind kind,
                             int pp, int microbatchSize, Layout layout,
                             const SetupOptions &setup = {});

/// The sweep. Errors: bad inputs (no layers, a global batch no setup
/// divides), or nothing fits in memory (the message gives the smallest need
/// and the capacity).
Expected<PlanResult> plan(const ModelCosts &model, const Cluster &cluster,
                          const PlanOptions &opts);

/// A user-given setup (`pipeforge-plan --explain`), parsed from
/// space-separated KEY=VALUE words:
///   schedule=NAME (required), pp=P (required), tp=T (1), dp=D (optional: a
///   check, d is GPUs / (p t)), ep=E (1: experts per group of E of the d
///   ranks), b=B (1), recompute=none|selective|full, recompute-stages=S+S
///   (every stage),
///   (none), zero=0|1|2|3 (0), chunks=V (PlanOptions::chunksPerRank),
///   layout=pp-in-node|dp-in-node|ep-in-node (optional: the faster of
///   the runtime's two), offload=off|auto (off).
struct SetupSpec {
  sched::ScheduleKind kind = sched::ScheduleKind::OneFOneB;
  int pp = 0, tp = 1, ep = 1;
  int dp = 0; ///< 0: not given
  int microbatchSize = 1;
  Recompute recompute = Recompute::None;
  /// recompute-stages=S+S+...: only these stages (empty: every stage).
  std::vector<int> recomputeStages;
  int zero = 0;
  int chunks = 0; ///< 0: not given (the sweep's)
  bool hasLayout = false;
  Layout layout = Layout::PipelineInNode;
  bool offload = false; ///< offload=auto
};

/// Parses a setup string; errors name the word or the key, e.g.
/// "key 'pp': expected a positive integer, got 'x'".
Expected<SetupSpec> parseSetup(const std::string &text);

/// A user-given setup evaluated with the sweep's model, and where it stands
/// among the swept setups.
struct Explanation {
  Candidate setup;
  /// 1-based position among PlanResult::ranked; 0 when it is not there
  /// (over memory, pruned, or outside the search space).
  int rank = 0;
  /// Where it would stand among the ranked setups by its step time (1 +
  /// the setups ahead of it); the same as `rank` when it is ranked.
  int wouldRank = 0;
  /// Why the sweep did not consider it ("" when the sweep's options cover
  /// it), e.g. "pp=16 is not in --pp 2,4".
  std::string notSearched;
  /// The other layout's step time, when the spec left the layout open and
  /// the two differ (0 otherwise).
  double otherLayoutStepTime = 0;
};

/// Evaluates `spec` as the sweep would (same options; `chunks` overrides
/// PlanOptions::chunksPerRank for this setup only) and places it against
/// `r`, the sweep's result. Errors: the setup cannot be formed (dp that does
/// not match the GPUs, a schedule rule, a tensor degree the model forbids).
Expected<Explanation> explain(const PlanResult &r, const ModelCosts &model,
                              const Cluster &cluster, const PlanOptions &opts,
                              const SetupSpec &spec);

/// The cluster efficiency (Cluster::efficiency) at which `spec`, evaluated
/// as by explain(), is predicted at `tokensPerSecond`: a bisection on (0, 1]
/// to 1e-9. Errors when even efficiency 1 is slower than the target.
Expected<double> fitEfficiency(const ModelCosts &model, const Cluster &cluster,
                               const PlanOptions &opts, const SetupSpec &spec,
                               double tokensPerSecond);

/// The explanation as text: the setup's step time, throughput, MFU, memory,
/// its rank, and what the recommendation gains over it.
std::string formatExplain(const Explanation &e, const PlanResult &r,
                          const Cluster &cluster);

/// Human-readable report: the header, the top N, the recommendation.
std::string formatTable(const PlanResult &r, const ModelCosts &model,
                        const Cluster &cluster, const PlanOptions &opts);
/// The same as JSON (see docs/planner.md).
/// With `explained`, an "explain" object (the setup, its rank, why it was not
/// searched, and the recommendation's speedup over it).
std::string formatJson(const PlanResult &r, const ModelCosts &model,
                       const Cluster &cluster, const PlanOptions &opts,
                       const Explanation *explained = nullptr);

} // namespace pipeforge::plan

#endif // PIPEFORGE_PLAN_PLANNER_H
