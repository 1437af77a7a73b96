//===- PairOrder.h - Component order of a fused F&B pair --------*- C++ -*-===//
//
// An overlapped F&B pair runs as one interleaved component program: layer
// step k pairs F's k-th layer with the k-th layer the backward processes,
// and every layer step runs its ten components in one per-layer order
// (DeepSeek's by default, docs/background.md). This header list-schedules
// such a program on two resources (compute, one FIFO comm channel) under the
// simulator's communication model (docs/schedule-library.md) and searches
// the per-layer orders for the fastest one.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_PAIRORDER_H
#define PIPEFORGE_SCHEDULE_PAIRORDER_H

#include "pipeforge/Schedule/Simulator.h"

#include <string>
#include <vector>

namespace pipeforge::sched {

/// One component of a layer step. F: attn -> dispatch -> mlp -> combine;
/// backward: combine -> mlp -> dispatch -> attn, with the weight parts
/// (MlpW, AttnW; empty unless the backward member is a BW) after their
/// input-gradient parts. Dispatch and combine are all-to-alls (comm).
enum class PairStep : uint8_t {
  AttnF,
  DispF,
  MlpF,
  CombF,
  CombB,
  MlpB,
  DispB,
  AttnB,
  MlpW,
  AttnW,
};
constexpr int kNumPairSteps = 10;

/// "attn:F", "dispatch:B", "mlp:W", ... (the --pp-fuse-overlap `order`
/// syntax).
const char *pairStepName(PairStep s);
/// Comma-separated pairStepName list.
std::string pairOrderToString(const std::vector<PairStep> &order);

/// DeepSeek's per-layer order: combine(B), attn(F), mlp(B), dispatch(F),
/// dispatch(B), mlp(W), mlp(F), attn(B), attn(W), combine(F).
const std::vector<PairStep> &deepSeekPairOrder();

/// Every step exactly once, F's and the backward's chains in their order,
/// each W part after its B part.
bool isValidPairOrder(const std::vector<PairStep> &order);

/// Every valid per-layer order (840: the 4 F steps interleaved with the 6
/// backward steps, whose order is fixed up to where MlpW goes), in
/// lexicographic order of the step values.
std::vector<std::vector<PairStep>> allPairOrders();

/// The components of one work (F, B or BW of one stage) split by layer.
/// Compute: attention and MLP (B: input-gradient parts; W: weight parts);
/// comm: dispatch and combine all-to-alls.
struct WorkParts {
  int layers = 1;             ///< >= 1 (a dense stage is one layer, no comm)
  double attn = 0, mlp = 0;   ///< per layer: F, or B's input-gradient part
  double attnW = 0, mlpW = 0; ///< per layer: BW's weight-gradient part
  double a2a = 0;             ///< per all-to-all
};
/// `scale` multiplies the compute (the simulator's tfb scaling).
WorkParts splitWork(const CostModel &cost, const Work &w, double scale = 1);

/// One component to place on a resource.
struct PairComp {
  double dur;
  bool comm;
  int dep1 = -1, dep2 = -1;      ///< indices of earlier components
  uint8_t which = 0, member = 0; ///< A2A: 0 dispatch 1 combine; member 0 = F
  int32_t layer = 0;
};

/// The component list of fused pair (fw, bw) in `order` (repeated for
/// every layer step), with its dependencies. A member with fewer layers
/// has empty components in the extra steps. `order` must be valid.
std::vector<PairComp> fusedPairComponents(const CostModel &cost,
                                          const Work &fw, const Work &bw,
                                          const std::vector<PairStep> &order,
                                          double scale = 1);

/// One comm-resource occupancy (an all-to-all) or one compute idle wait.
struct PairSegment {
  double start, end;
  double dur;   ///< the all-to-all's duration (end - start up to rounding)
  bool exposed; ///< compute idle waiting for all-to-alls; else an A2A
  uint8_t which = 0, member = 0;
  int32_t layer = 0;
};

struct PairBreakdown {
  double end = 0;     ///< both resources done
  double busy = 0;    ///< compute time
  double exposed = 0; ///< compute idle waiting for all-to-alls
  double commBusy = 0;
  /// In scheduling order (the simulator replays them as CommIntervals).
  std::vector<PairSegment> segments;
};

/// List scheduling in list order: compute and comm each run their
/// components in order; a component starts when its resource is free and
/// its dependencies are done. Starts at `start` with the comm channel free
/// at `commFree`; `queueComm` = false lets every all-to-all start when
/// ready (the blocking model), true queues them on the channel and updates
/// `commFree`. `issueInOrder` models a host that issues each all-to-all
/// when its program reaches it (not before the compute listed before it
/// has ended); the simulator's default lets it start as soon as it is
/// ready (a comm stream). Returns the end.
double listSchedulePair(const std::vector<PairComp> &cs, double start,
                        double &commFree, bool queueComm,
                        PairBreakdown *out = nullptr,
                        bool issueInOrder = false);

/// Time of the fused pair F(fStage) & B(bStage) (BW when bIsFull) in
/// `order`, from an idle rank (compute and comm free at 0), under `cost`
/// (tfb scaling included), as the simulator replays it. NaN when `order`
/// is not valid.
double fusedPairTime(const CostModel &cost, int fStage, int bStage,
                     bool bIsFull, const std::vector<PairStep> &order,
                     PairBreakdown *out = nullptr, bool issueInOrder = false);

/// The same pair run unfused: F then B/BW with its all-to-alls inline.
double serialPairTime(const CostModel &cost, int fStage, int bStage,
                      bool bIsFull);

/// The valid order with the least fusedPairTime (within a relative 1e-9).
/// DeepSeek's order when none is faster; otherwise, among the fastest, the
/// one with the least issue-in-order time (so that the program the pass
/// emits in that order overlaps as well on a host-issued runtime), then
/// the lexicographically smallest.
std::vector<PairStep> searchPairOrder(const CostModel &cost, int fStage,
                                      int bStage, bool bIsFull,
                                      double *time = nullptr);

} // namespace pipeforge::sched

#endif
