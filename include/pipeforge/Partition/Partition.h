//===- Partition.h - Cutting a chain of layers into stages -------*- C++
//-*-===//
//
// Plain C++ (no MLIR): the balancing half of --pp-partition, reusable by a
// planner. A model is a chain of L layers with a cost each (FLOPs of F + B +
// W); a cut splits it into k contiguous, non-empty stages.
//
// partitionBalanced() returns an OPTIMAL cut: the largest stage cost is as
// small as possible. Ties are broken deterministically, in this order:
//
//   1. the smallest maximum stage cost (the bottleneck of the pipeline);
//   2. among those, the smallest sum of squared stage costs (the most even
//      spread of the remaining stages);
//   3. among those, the lexicographically smallest vector of stage sizes
//      (earliest cuts).
//
// Both criteria are solved by dynamic programming over (stage, first layer):
// O(k L^2) time, O(L^2 + k L) memory: microseconds for real models (L up to
// a few hundred layers).
//
// partitionWithLayout() takes an explicit Megatron-style layout (layers per
// stage, e.g. 3,4,4,3) and only validates and measures it.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_PARTITION_PARTITION_H
#define PIPEFORGE_PARTITION_PARTITION_H

#include "pipeforge/Schedule/Action.h"

#include <string>
#include <vector>

namespace pipeforge::partition {

using sched::Expected;
using sched::Status;

/// A cut of a chain of layers into contiguous stages.
struct StageCut {
  /// Layers per stage, every entry >= 1. Stage s holds the layers
  /// [firstLayer(s), firstLayer(s) + sizes[s]).
  std::vector<int> sizes;
  /// Sum of the layer costs of each stage.
  std::vector<double> stageCosts;
  double maxCost = 0;
  double minCost = 0;
  /// Total cost / number of stages.
  double meanCost = 0;
  /// maxCost / meanCost: 1 is perfect balance (also 1 when all costs are 0).
  double imbalance = 1;

  int numStages() const { return static_cast<int>(sizes.size()); }
  int firstLayer(int stage) const;
  /// The stage that holds `layer`, or -1 when it is out of range.
  int stageOf(int layer) const;
};

/// The optimal cut of `costs` (one entry per layer, finite and >= 0) into
/// `numStages` stages (see the file comment for the tie-breaking order).
/// Errors: no layers, numStages < 1, more stages than layers, a negative or
/// non-finite cost.
Expected<StageCut> partitionBalanced(const std::vector<double> &costs,
                                     int numStages);

/// The cut given by `layout` (layers per stage). Errors: an empty layout, a
/// stage with fewer than one layer, counts that do not sum to the number of
/// layers, a bad cost.
Expected<StageCut> partitionWithLayout(const std::vector<double> &costs,
                                       const std::vector<int> &layout);

/// partitionBalanced() when `layout` is empty, else partitionWithLayout()
/// after checking that the layout has `numStages` entries.
Expected<StageCut> partition(const std::vector<double> &costs, int numStages,
                             const std::vector<int> &layout = {});

/// Parses a layout such as "3,4,4,3" (spaces allowed around entries).
Expected<std::vector<int>> parseLayout(const std::string &text);

/// The cost of layers [begin, end), summed the way every function here sums
/// it (right to left), so results compare exactly.
double rangeCost(const std::vector<double> &costs, int begin, int end);

} // namespace pipeforge::partition

#endif // PIPEFORGE_PARTITION_PARTITION_H
