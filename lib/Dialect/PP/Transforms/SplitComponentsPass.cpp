//===- SplitComponentsPass.cpp - --pp-split-components --------------------===//
//
// Tags each op of a stage's bodies with its layer component (attribute only;
// numerics unchanged) and records the per-layer component lists on the stage.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Support/AttrNames.h"

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
using nn::layerOf;
static bool isMoE(Operation *op) {
  return isa<nn::MoEOp, nn::MoEBwdInputOp, nn::MoEBwdWeightOp>(op);
}

struct SplitComponentsPass
    : public pp::impl::PPSplitComponentsBase<SplitComponentsPass> {
  using PPSplitComponentsBase::PPSplitComponentsBase;

  void tag(Operation *op, StringRef comp, int64_t local) {
    Builder b(op->getContext());
    op->setAttr(attrs::kPPComponent, b.getStringAttr(comp));
    op->setAttr(attrs::kPPLayer, b.getI64IntegerAttr(local));
    if (isMoE(op))
      op->setAttr(attrs::kPPSpan,
                  b.getStrArrayAttr({"dispatch", "mlp", "combine"}));
  }

  /// Gives every op of `ops` (a function body in order) that `tag` left
  /// untagged — gradient accumulations and zero constants carry no
  /// nn.layer — the component and layer of the op before it, or at the
  /// start of the body of the first tagged op after it. So each function's
  /// ops form runs per (layer, component) and every op has both.
  void fillUntagged(ArrayRef<Operation *> ops) {
    Operation *prev = nullptr;
    SmallVector<Operation *> head;
    auto copy = [&](Operation *to, Operation *from) {
      to->setAttr(attrs::kPPComponent, from->getAttr(attrs::kPPComponent));
      to->setAttr(attrs::kPPLayer, from->getAttr(attrs::kPPLayer));
    };
    for (Operation *op : ops) {
      if (op->hasAttr(attrs::kPPComponent)) {
        if (!prev)
          for (Operation *h : head)
            copy(h, op);
        prev = op;
        continue;
      }
      if (prev)
        copy(op, prev);
      else
        head.push_back(op);
    }
  }

  static SmallVector<Operation *> bodyOps(func::FuncOp fn) {
    SmallVector<Operation *> ops;
    if (fn.getBody().empty())
      return ops;
    for (Operation &op : fn.front().without_terminator())
      ops.push_back(&op);
    return ops;
  }

  LogicalResult runOnStage(StageOp stage) {
    auto fwd = dyn_cast_or_null<func::FuncOp>(
        SymbolTable::lookupSymbolIn(stage, "forward"));
    if (!fwd) {
      stage.emitOpError("has no @forward to split into components");
      return failure();
    }
    SmallVector<Operation *> fwdOps = bodyOps(fwd);
    // Local layer index, in order of first appearance.
    std::map<int64_t, int64_t> local;
    std::vector<SmallVector<Operation *>> layerOps;
    for (Operation *op : fwdOps) {
      if (auto l = layerOf(op)) {
        auto [it, fresh] = local.emplace(*l, (int64_t)local.size());
        if (fresh)
          layerOps.emplace_back();
        layerOps[it->second].push_back(op);
      }
    }
    if (layerOps.empty()) {
      stage.emitWarning("no op of @forward has nn.layer: nothing to split "
                        "into components");
      return success();
    }
    std::vector<std::vector<std::string>> comps(layerOps.size());
    for (auto [li, ops] : llvm::enumerate(layerOps)) {
      // attn: up to the residual add after nn.attention, and in an MoE layer
      // everything before the nn.moe (the pre-MoE norm feeds the router,
      // which must run before the dispatch); mlp: the nn.moe and the rest;
      // combine: what follows the nn.moe (the residual add).
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
    fillUntagged(fwdOps);
    // Forward parameter index -> component of its first tagged user.
    std::map<unsigned, StringRef> paramComp;
    for (BlockArgument a : fwd.getArguments())
      for (Operation *u : a.getUsers())
        if (auto c = u->getAttrOfType<StringAttr>(attrs::kPPComponent)) {
          paramComp.emplace(a.getArgNumber(), c.getValue());
          break;
        }

    for (StringRef name : {"backward_input", "backward_weight", "backward"}) {
      auto fn = dyn_cast_or_null<func::FuncOp>(
          SymbolTable::lookupSymbolIn(stage, name));
      if (!fn)
        continue;
      auto paramCompOf =
          [&](std::optional<int64_t> idx) -> std::optional<StringRef> {
        if (!idx)
          return std::nullopt;
        if (auto it = paramComp.find(*idx); it != paramComp.end())
          return it->second;
        return std::nullopt;
      };
      // The component of the forward op whose parameter `op` reads or whose
      // parameter gradient it returns.
      auto linked = [&](Operation *op) -> std::optional<StringRef> {
        if (isMoE(op))
          return StringRef("mlp");
        for (Value v : op->getOperands())
          if (auto a = dyn_cast<BlockArgument>(v);
              a && a.getOwner() == &fn.front()) {
            auto idx = fn.getArgAttrOfType<IntegerAttr>(a.getArgNumber(),
                                                        attrs::kPPArg);
            if (getArgRole(fn, a.getArgNumber()) == Role::param && idx)
              if (auto c = paramCompOf(idx.getInt()))
                return c;
          }
        for (Value r : op->getResults())
          for (OpOperand &use : r.getUses())
            if (isa<func::ReturnOp>(use.getOwner()))
              if (auto idx = fn.getResultAttrOfType<IntegerAttr>(
                      use.getOperandNumber(), attrs::kPPArg))
                if (auto c = paramCompOf(idx.getInt()))
                  return c;
        return std::nullopt;
      };
      SmallVector<Operation *> ops = bodyOps(fn);
      // Ops of a layer: the linked component, else that of the op before it
      // in its layer, else (none before) that of the next one after it.
      std::map<int64_t, StringRef> last;                   // per layer
      std::map<int64_t, SmallVector<Operation *>> pending; // per layer
      for (Operation *op : ops) {
        std::optional<int64_t> l = layerOf(op);
        if (!l)
          continue;
        auto lit = local.find(*l);
        if (lit == local.end()) {
          op->emitOpError() << "belongs to layer " << *l << " (nn.layer) but "
                            << "@forward of its stage has no op of that layer";
          return failure();
        }
        int64_t li = lit->second;
        std::optional<StringRef> c = linked(op);
        if (!c && last.count(li))
          c = last[li];
        if (!c) {
          pending[li].push_back(op);
          continue;
        }
        last[li] = *c;
        for (Operation *p : pending[li])
          tag(p, *c, li);
        pending[li].clear();
        tag(op, *c, li);
      }
      // A layer with no op linked to a parameter: its first component in
      // backward order.
      for (auto &[li, ops] : pending)
        for (Operation *op : ops)
          tag(op,
              comps[li].back() == "combine" ? StringRef("mlp")
                                            : StringRef(comps[li].back()),
              li);
      fillUntagged(ops);
    }
    Builder b(stage.getContext());
    SmallVector<Attribute> layers;
    for (auto &l : comps) {
      SmallVector<StringRef> refs(l.begin(), l.end());
      layers.push_back(b.getStrArrayAttr(refs));
    }
    stage->setAttr(attrs::kPPComponents, b.getArrayAttr(layers));
    return success();
  }

  void runOnOperation() override {
    bool ok = true, any = false;
    getOperation().walk([&](StageOp stage) {
      any = true;
      if (failed(runOnStage(stage)))
        ok = false;
    });
    if (!any)
      getOperation().emitWarning(
          "no pp.stage to split into components (run --pp-partition and "
          "--pp-split-backward first)");
    if (!ok)
      signalPassFailure();
  }
};
} // namespace
