//===- GradReduce.h - Data-parallel gradient reduction overlap --*- C++ -*-===//
//
// Plain C++: when the data-parallel all-reduce of a pipeline rank's weight
// gradients can run, given the simulated schedule, and how much of it the
// step sees (docs/planner.md, "Gradient all-reduce overlap").
//
// A stage's gradients are final once its last weight-gradient work (the W,
// or BW, of its last microbatch) is done. Bucketed per layer, as PyTorch DDP,
// Megatron (--overlap-grad-reduce) and DeepSpeed do, a layer's gradients are
// final once that work has passed the layer (the backward runs the layers
// last to first); per stage, as pipeforge-run posts them, once the work has
// ended. A rank's reductions queue on its data-parallel link in the order
// they become ready; what ends after the rank's last compute is exposed.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_PLAN_GRADREDUCE_H
#define PIPEFORGE_PLAN_GRADREDUCE_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Simulator.h"

#include <string>
#include <vector>

namespace pipeforge::plan {

/// When the data-parallel gradient reduction may start.
enum class GradOverlap {
  Off,   ///< after the whole pipeline step, in series
  Stage, ///< a stage's gradients once its last W/BW is done (pipeforge-run)
  Layer, ///< a layer's gradients once the last W/BW has passed the layer
};
const char *gradOverlapName(GradOverlap g); ///< "off" / "stage" / "layer"
/// Parses a gradOverlapName; false when unknown.
bool parseGradOverlap(const std::string &text, GradOverlap &out);

/// One layer's gradients of a stage.
struct GradBucket {
  /// The layer's time in the stage's last gradient work: in a W (its W
  /// time) and in a BW (its whole backward); any non-negative scale.
  double wTime = 0, bwTime = 0;
  double seconds = 0; ///< its data-parallel all-reduce
};

/// Per stage (the same for every model copy): its layers' buckets, first
/// layer first.
using StageBuckets = std::vector<std::vector<GradBucket>>;

struct GradReduceTiming {
  /// What the step sees of the reduction: the latest end over the ranks of
  /// their last compute or their last reduction, minus the makespan.
  double exposed = 0;
  /// The busiest rank's reduction time (in series, as with Off).
  double total = 0;
  int rank = 0; ///< the rank whose reduction ends last
  /// That rank: when its first reduction could start and when its last
  /// compute ends (the window the reduction overlaps).
  double firstReady = 0, lastCompute = 0;
};

/// The reduction's timing on `schedule` as `sim` replayed it. `total` is the
/// busiest rank's series time (the caller's, so that Off is exactly the
/// series model). Schedules with two model copies (DualPipe) sum the copies'
/// gradients after the pipeline first: their reduction stays in series.
GradReduceTiming gradReduceTiming(const sched::Schedule &schedule,
                                  const sched::SimResult &sim,
                                  const StageBuckets &buckets, double total,
                                  GradOverlap mode);

} // namespace pipeforge::plan

#endif // PIPEFORGE_PLAN_GRADREDUCE_H
