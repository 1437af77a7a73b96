//===- CostReportPass.cpp - print the nn cost model -----------------------===//
//
// --nn-cost-report: per-layer (nn.layer) and per-stage (pp.stage @forward)
// sums of the CostOpInterface (nn/Analysis/CostSum.h), printed to stdout.
// The IR is unchanged.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/NN/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Support/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace pipeforge::nn {
#define GEN_PASS_DEF_NNCOSTREPORT
#include "pipeforge/Dialect/NN/Transforms/Passes.h.inc"
} // namespace pipeforge::nn

using namespace mlir;
using namespace pipeforge;

namespace {
using nn::CostSum;

/// `comm`: the tensor-parallel columns too (bytes each rank sends in F and
/// in B), only for tensor-parallel modules.
void printHeader(raw_ostream &os, StringRef first, bool comm) {
  os << llvm::format("  %-14s %18s %18s %18s %16s %16s %14s",
                     first.str().c_str(), "F_flops", "B_flops", "W_flops",
                     "stash_bytes", "W_stash_bytes", "param_bytes");
  if (comm)
    os << llvm::format(" %14s %14s", "tp_F_bytes", "tp_B_bytes");
  os << "\n";
}

void printRow(raw_ostream &os, StringRef label, const CostSum &c, bool comm) {
  os << llvm::format("  %-14s %18.0f %18.0f %18.0f %16lld %16lld %14lld",
                     label.str().c_str(), c.forward, c.backwardInput,
                     c.backwardWeight, (long long)c.stash,
                     (long long)c.weightStash, (long long)c.params);
  if (comm)
    os << llvm::format(" %14lld %14lld", (long long)c.forwardComm,
                       (long long)c.backwardComm);
  os << "\n";
}

struct CostReportPass : public nn::impl::NNCostReportBase<CostReportPass> {
  using NNCostReportBase::NNCostReportBase;
  bool comm = false;

  void reportFunction(raw_ostream &os, func::FuncOp func) {
    // The cost analysis's layers (ids ascending), each with a cost op.
    nn::CostsByLayer byLayer = nn::sumCostsByLayer(func, bytesPerElement);
    const CostSum &untagged = byLayer.untagged;
    bool any = untagged.ops > 0;
    for (const CostSum &c : byLayer.layers)
      any |= c.ops > 0;
    if (!any)
      return;
    os << "function @" << func.getSymName() << "\n";
    printHeader(os, "layer", comm);
    CostSum total;
    for (auto [i, cost] : llvm::enumerate(byLayer.layers)) {
      if (!cost.ops)
        continue;
      printRow(os, "layer " + std::to_string(byLayer.index.ids()[i]), cost,
               comm);
      total.add(cost);
    }
    if (untagged.ops) {
      printRow(os, "(no nn.layer)", untagged, comm);
      total.add(untagged);
    }
    printRow(os, "total", total, comm);
    // The model's parameter count: elements of its parameter arguments, a
    // tied copy (nn.tied: the LM head of tied embeddings) counted once.
    int64_t count = 0, tied = 0;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto role = func.getArgAttrOfType<StringAttr>(i, attrs::kNNRole);
      auto ty = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
      if (!role || role.getValue() != "param" || !ty || !ty.hasStaticShape())
        continue;
      (func.getArgAttr(i, attrs::kNNTied) ? tied : count) +=
          ty.getNumElements();
    }
    if (count + tied > 0) {
      os << "  parameters " << count;
      if (tied)
        os << " (tied copies, counted once: " << tied << ")";
      os << "\n";
    }
  }

  void reportPipeline(raw_ostream &os, pp::PipelineOp pipeline) {
    os << "pipeline @" << pipeline.getSymName() << "\n";
    printHeader(os, "stage", comm);
    CostSum total;
    for (auto stage : pipeline.getBody().getOps<pp::StageOp>()) {
      auto fwd = dyn_cast_or_null<func::FuncOp>(
          SymbolTable::lookupSymbolIn(stage, "forward"));
      if (!fwd) {
        stage.emitWarning("stage has no @forward; counted as empty");
        continue;
      }
      CostSum cost = nn::sumCosts(fwd, bytesPerElement);
      std::string label = "stage " + std::to_string(stage.getIndex());
      if (pipeline.getNumCopies() > 1)
        label += "." + std::to_string(stage.getCopy());
      label += " r" + std::to_string(stage.getRank());
      printRow(os, label, cost, comm);
      total.add(cost);
    }
    printRow(os, "total", total, comm);
  }

  void runOnOperation() override {
    if (bytesPerElement == 0) {
      emitError(getOperation().getLoc(),
                "nn-cost-report: bytes-per-element must be > 0");
      return signalPassFailure();
    }
    getOperation().walk([&](nn::CommOpInterface) { comm = true; });
    raw_ostream &os = llvm::outs();
    os << "nn cost report (" << bytesPerElement
       << " bytes per element, dropout masks 1 byte)\n";
    // Model-level functions: the module's own (not a pp.stage's).
    for (auto func : getOperation().getOps<func::FuncOp>())
      reportFunction(os, func);
    for (auto pipeline : getOperation().getOps<pp::PipelineOp>())
      reportPipeline(os, pipeline);
    markAllAnalysesPreserved();
  }
};
} // namespace
