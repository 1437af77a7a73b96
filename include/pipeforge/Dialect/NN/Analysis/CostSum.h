//===- CostSum.h - Sums of the nn cost model, per op set and per layer ----===//
//
// The one place that adds up the CostOpInterface and groups ops into layers
// (`nn.layer`): the cost report (--nn-cost-report), the partitioner
// (--pp-partition balances F+B+W per layer), the schedule pass's per-stage
// costs and the planner all read their numbers and their layers from here,
// so they cannot disagree about what a layer is or what it costs.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_DIALECT_NN_ANALYSIS_COSTSUM_H
#define PIPEFORGE_DIALECT_NN_ANALYSIS_COSTSUM_H

#include "pipeforge/Dialect/NN/IR/NNInterfaces.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace pipeforge::nn {

/// Sums of the cost model over a set of ops. Bytes at `bytesPerElement`
/// bytes per floating-point element (the value given to `add`).
struct CostSum {
  double forward = 0, backwardInput = 0, backwardWeight = 0; ///< FLOPs
  int64_t stash = 0;       ///< activation bytes kept from F for B and W
  int64_t weightStash = 0; ///< of which kept from B for W
  int64_t params = 0;      ///< parameter bytes
  int64_t paramElements = 0;
  /// Tensor-parallel communication (CommOpInterface): bytes each rank
  /// sends in F and in B.
  int64_t forwardComm = 0, backwardComm = 0;
  int64_t ops = 0; ///< ops with a cost model

  void add(CostOpInterface op, unsigned bytesPerElement);
  void add(const CostSum &other);
  double flops() const { return forward + backwardInput + backwardWeight; }
};

/// The costs of every op nested in `root` (and `root` itself). Ops without
/// a cost model (constants, reshapes) are free.
CostSum sumCosts(mlir::Operation *root, unsigned bytesPerElement);

/// F + B + W FLOPs of every op nested in `root` (and `root` itself), as
/// sumCosts(root, any).flops() gives them: FLOPs have no element size.
double sumFlops(mlir::Operation *root);

/// The layer of `op`: its `nn.layer` attribute, or nullopt without one.
std::optional<int64_t> layerOf(mlir::Operation *op);

/// The layers of the ops nested in an op: every `nn.layer` id one of them
/// carries, ascending. The one grouping of ops into layers.
class LayerIndex {
public:
  /// The layers of the ops nested in `root` (and `root` itself).
  static LayerIndex of(mlir::Operation *root);

  /// Layer ids, ascending.
  const std::vector<int64_t> &ids() const { return ids_; }
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  /// The position of layer `id` in ids(), or nullopt.
  std::optional<size_t> position(int64_t id) const;
  /// The position of `op`'s layer in ids(), or nullopt (no `nn.layer`, or a
  /// layer this index does not hold).
  std::optional<size_t> positionOf(mlir::Operation *op) const;

private:
  std::vector<int64_t> ids_;
  std::map<int64_t, size_t> position_;
};

/// The costs of the ops nested in `root` with a cost model, per layer
/// (LayerIndex::of(root)'s order), and of those without `nn.layer`.
struct CostsByLayer {
  LayerIndex index;
  std::vector<CostSum> layers; ///< costs of layer index.ids()[i]
  CostSum untagged;            ///< ops with a cost model but no nn.layer
};
CostsByLayer sumCostsByLayer(mlir::Operation *root, unsigned bytesPerElement);

/// Per-layer costs of a model function whose ops carry `nn.layer`.
struct LayerCosts {
  LayerIndex index;            ///< the grouping (LayerIndex::of(func))
  std::vector<int64_t> ids;    ///< layer ids, ascending (index.ids())
  std::vector<CostSum> layers; ///< costs of layer ids[i]
  /// Bytes of the values that cross the cut after layer ids[i] (produced at
  /// or before it, used after it): what a pipeline cut there sends.
  std::vector<double> crossingBytes;
  /// Of layer ids[i]'s stash: the bytes selective recomputation drops (the
  /// stashed outputs of cheap ops whose inputs are kept anyway, NNStash.h),
  /// as --pp-recompute=policy=selective does in a stage.
  std::vector<double> selectiveBytes;
  /// Of layer ids[i]'s stash: what the cost model counts but a compiled
  /// stage does not keep between F and B: the attention's scores,
  /// probabilities and masks (its kernel recomputes or holds them) and the
  /// dropout masks (drawn again in B).
  std::vector<double> unkeptBytes;
};

/// Groups the cost ops of `func` by `nn.layer`. Error: an op with a cost
/// model but no `nn.layer`, or no layered op at all.
llvm::Expected<LayerCosts> collectLayerCosts(mlir::func::FuncOp func,
                                             unsigned bytesPerElement);

} // namespace pipeforge::nn

#endif // PIPEFORGE_DIALECT_NN_ANALYSIS_COSTSUM_H
