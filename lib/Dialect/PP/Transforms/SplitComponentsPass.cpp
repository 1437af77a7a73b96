//===- SplitComponentsPass.cpp - --pp-split-components --------------------===//
//
// Tags each op of a stage's bodies with its layer component (attribute only;
// numerics unchanged) and records the per-layer component lists on the stage.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPSPLITCOMPONENTS
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

namespace {
static std::optional<int64_t> layerOf(Operation *op) {
  if (auto a = op->getAttrOfType<IntegerAttr>("nn.layer"))
    return a.getInt();
  return std::nullopt;
}
static bool isMoE(Operation *op) {
  return isa<nn::MoEOp, nn::MoEBwdInputOp, nn::MoEBwdWeightOp>(op);
}

struct SplitComponentsPass
    : public pp::impl::PPSplitComponentsBase<SplitComponentsPass> {
  using PPSplitComponentsBase::PPSplitComponentsBase;

  void tag(Operation *op, StringRef comp, int64_t local) {
    Builder b(op->getContext());
    op->setAttr("pp.component", b.getStringAttr(comp));
    op->setAttr("pp.layer", b.getI64IntegerAttr(local));
    if (isMoE(op))
      op->setAttr("pp.span", b.getStrArrayAttr({"dispatch", "mlp", "combine"}));
  }

  void runOnStage(StageOp stage) {
    auto fwd = dyn_cast_or_null<func::FuncOp>(
        SymbolTable::lookupSymbolIn(stage, "forward"));
    if (!fwd)
      return;
    // Local layer index, in order of first appearance.
    std::map<int64_t, int64_t> local;
    std::vector<SmallVector<Operation *>> layerOps;
    fwd.walk([&](Operation *op) {
      if (auto l = layerOf(op)) {
        auto [it, fresh] = local.emplace(*l, (int64_t)local.size());
        if (fresh)
          layerOps.emplace_back();
        layerOps[it->second].push_back(op);
      }
    });
    std::vector<std::vector<std::string>> comps(layerOps.size());
    for (auto [li, ops] : llvm::enumerate(layerOps)) {
      int moe = -1, attn = -1, split = -1;
      for (auto [i, op] : llvm::enumerate(ops)) {
        if (moe < 0 && isa<nn::MoEOp>(op))
          moe = i;
        if (attn < 0 && isa<nn::AttentionOp>(op))
          attn = i;
        if (attn >= 0 && split < 0 && (int)i > attn && isa<nn::AddOp>(op))
          split = i;
      }
      if (attn >= 0 && split < 0)
        split = attn;
      bool hasAttn = false, hasMlp = false;
      for (auto [i, op] : llvm::enumerate(ops)) {
        int ii = i;
        StringRef c = "mlp";
        if (moe >= 0 && ii > moe)
          c = "combine";
        else if (moe < 0 || ii < moe)
          c = (attn >= 0 && (ii <= split || (moe >= 0 && ii < moe))) ? "attn"
                                                                      : "mlp";
        hasAttn |= c == "attn";
        hasMlp |= c == "mlp";
        tag(op, c, li);
      }
      if (hasAttn)
        comps[li].push_back("attn");
      if (moe >= 0)
        comps[li].insert(comps[li].end(), {"dispatch", "mlp", "combine"});
      else if (hasMlp)
        comps[li].push_back("mlp");
    }
    // Forward parameter index -> component of its first tagged user.
    std::map<unsigned, StringRef> paramComp;
    for (BlockArgument a : fwd.getArguments())
      for (Operation *u : a.getUsers())
        if (auto c = u->getAttrOfType<StringAttr>("pp.component")) {
          paramComp.emplace(a.getArgNumber(), c.getValue());
          break;
        }

    for (StringRef name : {"backward_input", "backward_weight", "backward"}) {
      auto fn = dyn_cast_or_null<func::FuncOp>(
          SymbolTable::lookupSymbolIn(stage, name));
      if (!fn)
        continue;
      auto linked = [&](Operation *op) -> std::optional<StringRef> {
        if (isMoE(op))
          return StringRef("mlp");
        for (Value v : op->getOperands())
          if (auto a = dyn_cast<BlockArgument>(v);
              a && a.getOwner() == &fn.front())
            if (auto idx = fn.getArgAttrOfType<IntegerAttr>(a.getArgNumber(),
                                                            "pp.arg");
                idx && fn.getArgAttrOfType<StringAttr>(a.getArgNumber(),
                                                       "pp.role") &&
                fn.getArgAttrOfType<StringAttr>(a.getArgNumber(), "pp.role")
                        .getValue() == "param")
              if (auto it = paramComp.find(idx.getInt()); it != paramComp.end())
                return it->second;
        for (Value r : op->getResults())
          for (OpOperand &use : r.getUses())
            if (isa<func::ReturnOp>(use.getOwner()))
              if (auto idx = fn.getResultAttrOfType<IntegerAttr>(
                      use.getOperandNumber(), "pp.arg"))
                if (auto it = paramComp.find(idx.getInt());
                    it != paramComp.end())
                  return it->second;
        return std::nullopt;
      };
      SmallVector<Operation *> ops;
      fn.walk([&](Operation *op) {
        if (layerOf(op) && local.count(*layerOf(op)))
          ops.push_back(op);
      });
      std::map<int64_t, StringRef> last; // per local layer
      SmallVector<Operation *> untagged;
      for (Operation *op : ops) {
        int64_t li = local[*layerOf(op)];
        std::optional<StringRef> c = linked(op);
        if (!c && last.count(li))
          c = last[li];
        if (!c) {
          untagged.push_back(op);
          continue;
        }
        last[li] = *c;
        tag(op, *c, li);
      }
      for (Operation *op : untagged) {
        int64_t li = local[*layerOf(op)];
        tag(op, last.count(li) ? last[li] : StringRef(comps[li].front()), li);
      }
    }
    Builder b(stage.getContext());
    SmallVector<Attribute> layers;
    for (auto &l : comps) {
      SmallVector<StringRef> refs(l.begin(), l.end());
      layers.push_back(b.getStrArrayAttr(refs));
    }
    stage->setAttr("pp.components", b.getArrayAttr(layers));
  }

  void runOnOperation() override {
    getOperation().walk([&](StageOp stage) { runOnStage(stage); });
  }
};
} // namespace
