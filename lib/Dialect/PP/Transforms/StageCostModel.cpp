//===- StageCostModel.cpp - Per-stage costs from a pipeline's bodies ------===//

#include "pipeforge/Dialect/PP/Transforms/StageCostModel.h"
#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Support/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>
#include <numeric>

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

double StageCosts::bytesPerMB() const {
  double total = std::accumulate(stashBytes.begin(), stashBytes.end(), 0.0);
  return ranks > 0 ? total / ranks : 0;
}

std::pair<int, double>
StageCosts::maxRankStash(const std::vector<int> &rankOf) const {
  std::vector<double> need(ranks, 0);
  for (int s = 0; s < numStages() && s < (int)rankOf.size(); ++s)
    if (rankOf[s] >= 0 && rankOf[s] < ranks)
      need[rankOf[s]] += stashBytes[s];
  auto it = std::max_element(need.begin(), need.end());
  return {int(it - need.begin()), *it};
}

FailureOr<std::optional<StageCosts>>
pp::collectStageCosts(PipelineOp p, unsigned bytesPerElement) {
  StageCosts c;
  c.ranks = p.getNumRanks();
  c.bytesPerElement = bytesPerElement;
  int n = p.getNumStages();
  c.fwdFlops.assign(n, 0);
  c.bwdInputFlops.assign(n, 0);
  c.bwdWeightFlops.assign(n, 0);
  c.stashBytes.assign(n, 0);
  c.weightStashBytes.assign(n, 0);
  c.fwdCommBytes.assign(n, 0);
  c.bwdCommBytes.assign(n, 0);
  int withBody = 0, without = 0;
  int64_t firstWithout = -1;
  for (StageOp stage : p.getBody().getOps<StageOp>()) {
    if (stage.getCopy() != 0)
      continue; // a dual pipeline's second copy has the same stages
    auto fwd = dyn_cast_or_null<func::FuncOp>(
        SymbolTable::lookupSymbolIn(stage, "forward"));
    if (!fwd || fwd.isExternal()) {
      ++without;
      if (firstWithout < 0)
        firstWithout = stage.getIndex();
      continue;
    }
    ++withBody;
    int64_t s = stage.getIndex();
    if (s < 0 || s >= n)
      continue; // the pipeline verifier reports it
    nn::CostSum sum = nn::sumCosts(fwd, bytesPerElement);
    c.fwdFlops[s] = sum.forward;
    c.bwdInputFlops[s] = sum.backwardInput;
    c.bwdWeightFlops[s] = sum.backwardWeight;
    c.stashBytes[s] = double(sum.stash);
    c.weightStashBytes[s] = double(sum.weightStash);
    c.fwdCommBytes[s] = double(sum.forwardComm);
    c.bwdCommBytes[s] = double(sum.backwardComm);
    if (stage->hasAttr(attrs::kPPRecompute)) {
      // --pp-recompute: B (and BW) run the forward again (full) or the
      // recomputed ops (selective: pp.recompute_flops); F stashes what its
      // stash results hold (W still needs what it needed, now from B).
      auto policy = stage->getAttrOfType<StringAttr>(attrs::kPPRecompute);
      if (policy && policy.getValue() == "selective") {
        if (auto f = stage->getAttrOfType<FloatAttr>(attrs::kPPRecomputeFlops))
          c.bwdInputFlops[s] += f.getValueAsDouble();
      } else {
        c.bwdInputFlops[s] += sum.forward;
      }
      double inputs = 0;
      for (unsigned r = 0; r < fwd.getNumResults(); ++r) {
        if (pp::getResultRole(fwd, r) != pp::Role::stash)
          continue;
        auto t = dyn_cast<RankedTensorType>(fwd.getResultTypes()[r]);
        if (!t || !t.hasStaticShape())
          continue;
        unsigned bytes = isa<FloatType>(t.getElementType())
                             ? bytesPerElement
                             : std::max(1u, t.getElementTypeBitWidth() / 8);
        inputs += double(t.getNumElements()) * bytes;
      }
      c.stashBytes[s] = inputs;
    }
  }
  if (withBody == 0)
    return std::optional<StageCosts>();
  if (without > 0) {
    p.emitError() << "stage " << firstWithout << " of @" << p.getSymName()
                  << " has no func.func @forward while others have one; the "
                     "cost model needs a body in every stage or in none";
    return failure();
  }
  return std::optional<StageCosts>(std::move(c));
}

sched::CostModel pp::stageCostModel(const StageCosts &c, double flopsPerTime,
                                    double tf, double tb, double tw,
                                    double tcomm, double memB, double memW,
                                    double tpBytesPerTime) {
  sched::CostModel cost;
  cost.tf = tf;
  cost.tb = tb;
  cost.tw = tw;
  cost.tcomm = tcomm;
  cost.memB = memB;
  cost.memW = memW;
  int n = c.numStages();
  double meanF =
      n ? std::accumulate(c.fwdFlops.begin(), c.fwdFlops.end(), 0.0) / n : 0;
  double scale = flopsPerTime > 0 ? flopsPerTime : meanF;
  if (scale > 0) {
    for (int s = 0; s < n; ++s) {
      cost.tfStage.push_back(c.fwdFlops[s] / scale);
      cost.tbStage.push_back(c.bwdInputFlops[s] / scale);
      cost.twStage.push_back(c.bwdWeightFlops[s] / scale);
      if (tpBytesPerTime > 0 && flopsPerTime > 0 &&
          s < int(c.fwdCommBytes.size()) && s < int(c.bwdCommBytes.size())) {
        cost.tfStage.back() += c.fwdCommBytes[s] / tpBytesPerTime;
        cost.tbStage.back() += c.bwdCommBytes[s] / tpBytesPerTime;
      }
    }
  }
  double unit = c.bytesPerMB();
  if (unit > 0) {
    for (int s = 0; s < n; ++s) {
      cost.memBStage.push_back(c.stashBytes[s] / unit);
      cost.memWStage.push_back(c.weightStashBytes[s] / unit);
    }
  }
  return cost;
}
