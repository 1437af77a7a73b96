//===- Planner.h - Choosing a parallel setup for a cluster ------*- C++ -*-===//
//
// Plain C++ (no MLIR): the planning half of `pipeforge-plan`. Given the
// per-layer costs of a model (FLOPs of F, B and W, activation bytes, parameter
// count, all per sequence of one microbatch), a cluster and a global batch, it
// sweeps
//
//   pipeline degree p (a divisor of the GPU count, at most the layers),
//   data-parallel degree d = GPUs / p,
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

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Simulator.h"

#include <functional>
#include <string>
#include <vector>

namespace pipeforge::plan {

using sched::Expected;
using sched::Status;

/// The cost of one layer (the unit a partition never splits) for ONE
/// sequence (microbatch size 1); the planner multiplies by b.
struct LayerCost {
  double fwdFlops = 0, bwdInputFlops = 0, bwdWeightFlops = 0;
  double stashBytes = 0;       ///< M_B share: allocated by F, freed by B+W
  double weightStashBytes = 0; ///< M_W share: kept after B until W
  double params = 0;           ///< parameter count (elements)
  /// Bytes that cross the cut right after this layer (the activation sent
  /// to the next stage; the gradient coming back has the same size).
  double outputBytes = 0;

  double totalFlops() const {
    return fwdFlops + bwdInputFlops + bwdWeightFlops;
  }
};

struct ModelCosts {
  std::string name;
  int64_t seqLen = 0; ///< tokens per sequence (for the throughput column)
  std::vector<LayerCost> layers;
};

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
  double efficiency = 1.0;  ///< achieved fraction of peak (MFU), (0, 1]

  int numNodes() const {
    return gpusPerNode > 0 ? (gpus + gpusPerNode - 1) / gpusPerNode : 0;
  }
  double flopsPerSecond() const { return peakTflops * 1e12 * efficiency; }
  double usableBytes() const {
    return (memoryGiB - reservedGiB) * 1024.0 * 1024.0 * 1024.0;
  }
};

/// Parses and validates a cluster JSON text. Errors name the key, e.g.
/// "cluster: key 'memory_gb': expected a positive number".
Expected<Cluster> parseCluster(const std::string &jsonText);

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

struct PlanOptions {
  int64_t globalBatch = 0; ///< sequences per step
  std::vector<int> microbatchSizes = {1, 2, 4, 8};
  /// Empty: every kind the planner supports (plus Auto when autoScheduler
  /// is set).
  std::vector<sched::ScheduleKind> schedules;
  int chunksPerRank = 2;          ///< interleaved 1F1B
  double stateBytesPerParam = 16; ///< weights + grads + Adam states
  double gradBytesPerParam = 4;   ///< bytes all-reduced per param
  int topN = 5;
  /// Pipeline degrees to try; empty means every divisor of the GPU count.
  std::vector<int> pipelineDegrees;
  AutoScheduleFn autoScheduler; ///< optional
};

/// The schedule kinds swept by default, in tie-breaking order.
std::vector<sched::ScheduleKind> defaultSchedules(bool withAuto);

/// Where the ranks sit: `PipelineInNode` numbers the GPUs with the pipeline
/// stage varying fastest (a pipeline stays inside a node when p <= GPUs per
/// node), `DataInNode` with the data-parallel index varying fastest.
enum class Layout { PipelineInNode, DataInNode };
const char *layoutName(Layout l); ///< "pp-in-node" / "dp-in-node"

/// One evaluated setup. Times in seconds, memory in bytes.
struct Candidate {
  sched::ScheduleKind kind = sched::ScheduleKind::OneFOneB;
  std::string schedule;   ///< its name, e.g. "zb-h1"
  int pp = 1, dp = 1;     ///< pipeline and data-parallel degree
  int microbatchSize = 1; ///< b
  int microbatches = 1;   ///< m per pipeline (DualPipe: the total C)
  int stages = 1;         ///< stages per model copy
  Layout layout = Layout::PipelineInNode;
  bool ppInterNode = false;    ///< pipeline hops cross nodes
  bool dpInterNode = false;    ///< the data-parallel ring crosses nodes
  std::vector<int> layerSplit; ///< layers per stage (copy 0)

  double pipelineTime = 0;    ///< simulated makespan
  double dpTime = 0;          ///< gradient all-reduce over d replicas
  double dualReduceTime = 0;  ///< DualPipe: summing the two copies' grads
  double stepTime = 0;        ///< pipelineTime + dualReduceTime + dpTime
  double bubbleRate = 0;      ///< of the pipeline (simulator's bubble_rate)
  double commTime = 0;        ///< T_comm on a cross-stage edge
  double paramBytes = 0;      ///< model state bytes on the fullest rank
  double activationBytes = 0; ///< simulated peak activation, fullest rank
  double memoryBytes = 0;     ///< max over ranks of state + activation
  bool fits = false;
  double tokensPerSecond = 0;
};

struct PlanResult {
  /// Setups that fit, fastest first (ties: less memory, then fewer pipeline
  /// stages, smaller microbatch, schedule order, layout).
  std::vector<Candidate> ranked;
  /// Setups over the memory limit, least memory first.
  std::vector<Candidate> overMemory;
  int evaluated = 0;
  /// Setups that could not be formed (e.g. "dualpipe: needs an even number
  /// of ranks"), one line each, deduplicated.
  std::vector<std::string> skipped;
};

/// Evaluates one setup (no memory check against the cluster is skipped:
/// `fits` is set). Errors when the schedule cannot be generated.
Expected<Candidate> evaluate(const ModelCosts &model, const Cluster &cluster,
                             const PlanOptions &opts, sched::ScheduleKind kind,
                             int pp, int microbatchSize, Layout layout);

/// The sweep. Errors: bad inputs (no layers, a global batch no setup
/// divides), or nothing fits in memory (the message gives the smallest need
/// and the capacity).
Expected<PlanResult> plan(const ModelCosts &model, const Cluster &cluster,
                          const PlanOptions &opts);

/// Human-readable report: the header, the top N, the recommendation.
std::string formatTable(const PlanResult &r, const ModelCosts &model,
                        const Cluster &cluster, const PlanOptions &opts);
/// The same as JSON (see docs/planner.md).
std::string formatJson(const PlanResult &r, const ModelCosts &model,
                       const Cluster &cluster, const PlanOptions &opts);

} // namespace pipeforge::plan

#endif // PIPEFORGE_PLAN_PLANNER_H
