//===- Compare.h - Schedules side by side at one setup ----------*- C++ -*-===//
//
// Plain C++ (no MLIR): `pipeforge-plan --compare`. At one setup (the
// explained one, or the recommendation) the same degrees, microbatches,
// layout, recomputation and ZeRO stage are evaluated under several
// schedules (DualPipe, DualPipeV, 1F1B, ZB-V by default): their bubble,
// exposed expert all-to-all time, GPU-hours per million tokens, what 1F1B
// would lose against each, and DualPipe's second parameter copy. See
// docs/planner.md, "Comparing schedules".
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_PLAN_COMPARE_H
#define PIPEFORGE_PLAN_COMPARE_H

#include "pipeforge/Plan/Planner.h"

#include <string>
#include <vector>

namespace pipeforge::plan {

/// One schedule at the compared setup: the evaluated setup, or why it
/// cannot be formed (e.g. "zbv with pp=16 needs 32 stages but the model has
/// 24 layers").
struct ScheduleRow {
  sched::ScheduleKind kind = sched::ScheduleKind::OneFOneB;
  bool ok = false;
  Candidate setup;
  std::string error;
};

struct Comparison {
  Candidate base;  ///< the setup compared at
  std::string why; ///< "the explained setup" / "the recommendation"
  std::vector<ScheduleRow> rows;
  int64_t tokensPerStep = 0;
  int gpus = 0;
  double modelParams = 0;  ///< the model's size (tied copies once)
  double expertParams = 0; ///< of which routed experts
};

/// The schedules `--compare` shows by default, in this order.
std::vector<sched::ScheduleKind> comparedSchedules();

/// GPU-hours to train on one million tokens at `c`'s step time: GPUs x
/// step / 3600 s per (global batch x sequence / 1e6).
double gpuHoursPerMillionTokens(const Candidate &c, const Cluster &cluster,
                                const ModelCosts &model,
                                const PlanOptions &opts);

/// Evaluates `base`'s setup under each of `kinds` (empty: comparedSchedules)
/// with the sweep's model. A row keeps the base's degrees, microbatch size,
/// layout, recomputation policy and ZeRO stage (recomputation on some
/// stages only carries over to the base's own schedule; the others
/// recompute every stage).
Comparison compareSchedules(const ModelCosts &model, const Cluster &cluster,
                            const PlanOptions &opts, const Candidate &base,
                            const std::string &why,
                            std::vector<sched::ScheduleKind> kinds = {});

/// The comparison as text (docs/planner.md shows an example).
std::string formatCompare(const Comparison &cmp, const ModelCosts &model,
                          const Cluster &cluster, const PlanOptions &opts);

/// pipeforge-plan's whole output: as JSON (`format` "json"), or the
/// --fit-throughput line, the table, the explained setup and, with
/// `compare`, the schedules compared at the explained setup (else at the
/// recommendation).
std::string formatPlanOutput(const PlanResult &result, const ModelCosts &model,
                             const Cluster &cluster, const PlanOptions &opts,
                             const Explanation *explained,
                             const std::string &fitLine,
                             const std::string &format, bool compare);

} // namespace pipeforge::plan

#endif // PIPEFORGE_PLAN_COMPARE_H
