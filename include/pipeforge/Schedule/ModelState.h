//===- ModelState.h - Model state bytes per rank under ZeRO ------*- C++ -*-===//
//
// The parameters, gradients and optimizer state one pipeline rank keeps,
// at each ZeRO level, as pipeforge-run keeps them (docs/optimizer.md,
// "ZeRO-1" to "ZeRO-3"; benchmarks/model_state.py measures them with
// --memory-report): float32 values and gradients, AdamW's two float32
// moments, each sharded over the ZeRO group from its level on (1: the
// optimizer state, 2: the gradients, 3: the values). The group is the
// data-parallel replicas, times 2 on a two-copy schedule (DualPipe,
// Chimera: the pair of ranks that hold the same stages).
//
// Two views: what a rank holds between steps, and what it holds at the
// step's peak, which a device's memory must take. They differ from ZeRO-2
// on: a stage's gradients are final only at its last W, so every gradient
// buffer is live through the step; under ZeRO-3 a stage's tensors are
// gathered from before its first compute to after its last, so the
// stages gathered at the peak count whole. The compile driver's
// --device-memory budget (docs/compile.md) uses the peak. Whole-tensor
// shards make the runtime's share exceed params / shards by the balance of
// the largest tensors (at most 1.5% on the tiny examples).
//
// Plain C++, no MLIR: the compile driver uses it, and the planner can.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_MODELSTATE_H
#define PIPEFORGE_SCHEDULE_MODELSTATE_H

namespace pipeforge::sched {

/// Bytes per parameter of each part of the model state. The defaults are
/// pipeforge-run's: float32 values and gradients, AdamW's m and v.
struct StateBytesPerParam {
  double weights = 4, grads = 4, optimizer = 8;
};

struct ModelStateBytes {
  double params = 0, grads = 0, optimizer = 0;
  double total() const { return params + grads + optimizer; }
};

/// The ZeRO group a rank's state is sharded over: `dp` replicas, times the
/// `copies` of a two-copy schedule.
inline int zeroShards(int dp, int copies) {
  return (dp < 1 ? 1 : dp) * (copies < 1 ? 1 : copies);
}

/// What a rank that holds `params` parameters (every stage it computes,
/// both copies on DualPipe) keeps between steps at ZeRO `zero` (0-3) over
/// `shards` ranks: from level 1 the optimizer state, from 2 the gradients,
/// from 3 the values, each params / shards.
ModelStateBytes modelStateHeld(double params, int zero, int shards,
                               StateBytesPerParam per = {});

/// What the rank holds at the step's peak: the gradients whole (ZeRO-2
/// frees a non-owned gradient only at its stage's ready point); under
/// ZeRO-3 its own shard plus the others' part of the `gatheredAtPeak`
/// parameters, those of the stages gathered at the peak (pipeforge-run
/// gathers a stage from its first compute to its last, so on every
/// schedule all of a rank's stages: pass `params`).
ModelStateBytes modelStateAtPeak(double params, int zero, int shards,
                                 double gatheredAtPeak,
                                 StateBytesPerParam per = {});

} // namespace pipeforge::sched

#endif
