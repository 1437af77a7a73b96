//===- StageCostModel.h - Per-stage costs from a pipeline's bodies -*- C++ -*-===//
//
// When the stages of a pp.pipeline have bodies (`func.func @forward` with nn
// ops, as --pp-partition builds them), the nn CostOpInterface gives each
// stage's F / B / W FLOPs and the bytes one microbatch stashes (M_B) and of
// them the bytes W still needs after B (M_W). --pp-schedule kind=auto and
// --pp-verify-schedule (byte limits) use them instead of the uniform
// cost options. docs/auto-scheduler.md, "Memory limits".
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_DIALECT_PP_TRANSFORMS_STAGECOSTMODEL_H
#define PIPEFORGE_DIALECT_PP_TRANSFORMS_STAGECOSTMODEL_H

#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Schedule/Simulator.h"

#include "mlir/Support/LogicalResult.h"

#include <optional>
#include <vector>

namespace pipeforge::pp {

/// Per stage (index = stage; copy 0 of a dual pipeline), from @forward.
struct StageCosts {
  int ranks = 0;
  std::vector<double> fwdFlops, bwdInputFlops, bwdWeightFlops;
  /// Stash bytes of one microbatch (sum over the forward ops), and of them
  /// the bytes W needs after B.
  std::vector<double> stashBytes, weightStashBytes;
  /// Tensor-parallel collectives (CommOpInterface): bytes one rank sends in
  /// the stage's F and in its B.
  std::vector<double> fwdCommBytes, bwdCommBytes;
  unsigned bytesPerElement = 2;

  int numStages() const { return static_cast<int>(stashBytes.size()); }
  /// One M_B in bytes: the stash of one microbatch over all stages divided
  /// by the ranks (linear: the mean stage's stash). 0 if nothing stashes.
  double bytesPerMB() const;
  /// The rank with the most stash bytes for one microbatch and that amount,
  /// given the stage -> rank map.
  std::pair<int, double> maxRankStash(const std::vector<int> &rankOf) const;
};

/// The stage costs of `p`'s bodies. std::nullopt when no stage has a
/// @forward (uniform costs apply); an error (emitted on `p`) when only some
/// do.
mlir::FailureOr<std::optional<StageCosts>>
collectStageCosts(PipelineOp p, unsigned bytesPerElement);

/// A cost model in M_B units (memBStage / memWStage = stash / bytesPerMB())
/// with per-stage times = FLOPs / flopsPerTime, or, when flopsPerTime <= 0,
/// FLOPs / (mean stage F FLOPs), so that the mean stage's F takes 1. When
/// the stages have no FLOPs the uniform times `tf`, `tb`, `tw` stay; when
/// nothing stashes, the uniform memory `memB` / `memW` stays.
/// Per-stage times from FLOPs (`flopsPerTime`; 0: the mean stage's F takes
/// 1) plus, with `tpBytesPerTime` > 0 (bytes per the same time unit; needs
/// `flopsPerTime` > 0), the tensor-parallel collectives: they block the
/// stage, so their time adds to F and B.
sched::CostModel stageCostModel(const StageCosts &c, double flopsPerTime,
                                double tf, double tb, double tw, double tcomm,
                                double memB, double memW,
                                double tpBytesPerTime = 0);

} // namespace pipeforge::pp

#endif
