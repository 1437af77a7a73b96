//===- RecomputePass.cpp - --pp-recompute: activation recomputation -------===//
//
// After --pp-split-backward, trades compute for activation memory the way
// Megatron-LM does. policy=full: @forward stashes only its inputs (the
// activations it received, the tokens and targets it read), and the
// backward recomputes everything else from them. policy=selective
// (Korthikanti et al. 2022): only cheap ops' outputs are recomputed (a
// norm's, an activation function's or a dropout's stashed output whose
// inputs F stashes anyway), so F keeps the expensive values.
//
// For each stage (of `stages`, default all):
//   - the recomputed stash values: the forward ops they depend on (a slice
//     of @forward's body; selective: the one cheap op) are cloned at the top
//     of @backward_input (B) and @backward (BW), reading the new stash (the
//     slice's non-parameter inputs) and the parameters (added as arguments
//     where B or BW did not take them);
//   - @backward_weight (W) does not recompute: the recomputed values it reads
//     become W-stash results of B (W's stash arguments turn into W-stash
//     arguments), so the memory held from B to W is what W needs, as before;
//   - @forward returns the new stash; the stage gets `pp.recompute` (the
//     policy) and, selective, `pp.recompute_flops`, which the stage cost
//     model reads (B and BW cost one more forward, or those FLOPs; the
//     stash is what @forward now returns).
//
// Recomputed values equal the stashed ones bit for bit (the same kernels on
// the same inputs), so training is unchanged.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/NN/IR/NNStash.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Support/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPRECOMPUTE
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;

namespace {

/// Index attribute `key` of argument / result `i` (-1 when absent).
int64_t argIndex(func::FuncOp f, unsigned i, StringRef key) {
  auto a = f.getArgAttrOfType<IntegerAttr>(i, key);
  return a ? a.getInt() : -1;
}
int64_t resultIndex(func::FuncOp f, unsigned i, StringRef key) {
  auto a = f.getResultAttrOfType<IntegerAttr>(i, key);
  return a ? a.getInt() : -1;
}

class StageRecompute {
public:
  StageRecompute(pp::StageOp stage, func::FuncOp fwd, func::FuncOp bIn,
                 func::FuncOp bW, func::FuncOp bw, bool selective)
      : stage(stage), fwd(fwd), bIn(bIn), bW(bW), bw(bw), selective(selective),
        b(stage.getContext()) {}
  LogicalResult run();

private:
  pp::StageOp stage;
  func::FuncOp fwd, bIn, bW, bw;
  bool selective;
  OpBuilder b;
  /// Old stash slot -> the forward value it holds.
  DenseMap<int64_t, Value> oldStash;
  /// The new stash: forward arguments (activations in, tokens, targets)
  /// and, selective, the forward values F keeps.
  llvm::SetVector<Value> newStash;
  /// Forward ops in program order that some recomputed value needs.
  llvm::SetVector<Operation *> slice;

  int64_t newIndexOf(Value v) {
    return int64_t(llvm::find(newStash, v) - newStash.begin());
  }
  bool isParam(BlockArgument a) {
    return pp::getArgRole(fwd, a.getArgNumber()) == pp::Role::param;
  }
  bool isParam(Value v) {
    auto a = dyn_cast<BlockArgument>(v);
    return a && isParam(a);
  }
  LogicalResult collect();
  void collectSelective();
  /// Rebuilds `f` (B or BW): the slice cloned first; old stash arguments
  /// replaced. Returns the value each old slot holds now, for B's W-stash.
  FailureOr<DenseMap<int64_t, Value>> rebuild(func::FuncOp f);
  Value paramIn(func::FuncOp f, BlockArgument fwdParam);
  LogicalResult rewriteForward();
  /// Makes `f` return `results` with result attributes `attrs`.
  void setResults(func::FuncOp f, ArrayRef<Value> results,
                  ArrayRef<Attribute> attrs) {
    Operation *ret = f.front().getTerminator();
    b.setInsertionPoint(ret);
    func::ReturnOp::create(b, ret->getLoc(), results);
    ret->erase();
    f.setType(b.getFunctionType(f.getArgumentTypes(),
                                ValueRange(results).getTypes()));
    f.setAllResultAttrs(attrs);
  }
  LogicalResult rewriteWeight(const DenseMap<int64_t, Value> &inB);
};

/// Selective: a stash value made by a cheap op whose other inputs are
/// stashed too (or are @forward's arguments) is recomputed by that op
/// alone; every other stash value stays.
void StageRecompute::collectSelective() {
  llvm::SmallPtrSet<Value, 16> stashed;
  for (auto &[k, v] : oldStash)
    stashed.insert(v);
  llvm::SmallPtrSet<Operation *, 8> redo;
  for (auto &[k, v] : oldStash) {
    Operation *op = v.getDefiningOp();
    if (!op || !nn::isCheapToRecompute(op))
      continue;
    bool inputsKept = llvm::all_of(op->getOperands(), [&](Value o) {
      return isParam(o) || isa<BlockArgument>(o) || stashed.contains(o);
    });
    if (inputsKept)
      redo.insert(op);
  }
  SmallVector<Value> keep;
  for (auto &[k, v] : oldStash) {
    Operation *op = v.getDefiningOp();
    if (op && redo.contains(op)) {
      for (Value o : op->getOperands())
        if (!isParam(o))
          keep.push_back(o);
    } else {
      keep.push_back(v);
    }
  }
  for (Operation &op : fwd.front().without_terminator())
    if (redo.contains(&op))
      slice.insert(&op);
  // Stable order: the arguments by number, then the values by definition.
  llvm::DenseMap<Operation *, unsigned> pos;
  for (Operation &op : fwd.front().without_terminator())
    pos[&op] = unsigned(pos.size());
  auto rank = [&](Value v) -> std::pair<unsigned, unsigned> {
    if (auto a = dyn_cast<BlockArgument>(v))
      return {0, a.getArgNumber()};
    return {1 + pos[v.getDefiningOp()], cast<OpResult>(v).getResultNumber()};
  };
  llvm::sort(keep, [&](Value x, Value y) { return rank(x) < rank(y); });
  newStash.insert(keep.begin(), keep.end());
}

LogicalResult StageRecompute::collect() {
  Operation *ret = fwd.front().getTerminator();
  for (unsigned r = 0; r < ret->getNumOperands(); ++r)
    if (pp::getResultRole(fwd, r) == pp::Role::stash)
      oldStash[resultIndex(fwd, r, attrs::kPPStash)] = ret->getOperand(r);
  if (selective) {
    collectSelective();
    return success();
  }
  // The slice: every op a computed stash value depends on.
  llvm::SetVector<Operation *> need;
  SmallVector<Value> work;
  for (auto &[k, v] : oldStash)
    work.push_back(v);
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (auto a = dyn_cast<BlockArgument>(v)) {
      if (a.getOwner() != &fwd.front())
        return fwd.emitError("pp-recompute: a stash value is defined outside "
                             "@forward's body");
      if (!isParam(a))
        newStash.insert(a);
      continue;
    }
    Operation *op = v.getDefiningOp();
    if (op->getNumRegions())
      return op->emitError("pp-recompute: cannot recompute an op with "
                           "regions");
    if (!need.insert(op))
      continue;
    for (Value o : op->getOperands())
      work.push_back(o);
  }
  for (Operation &op : fwd.front().without_terminator())
    if (need.contains(&op))
      slice.insert(&op);
  // Stable order: by argument number.
  SmallVector<Value> sorted(newStash.begin(), newStash.end());
  llvm::sort(sorted, [](Value x, Value y) {
    return cast<BlockArgument>(x).getArgNumber() <
           cast<BlockArgument>(y).getArgNumber();
  });
  newStash.clear();
  newStash.insert(sorted.begin(), sorted.end());
  return success();
}

/// The argument of `f` that carries forward parameter `p` (added when `f`
/// does not take it yet).
Value StageRecompute::paramIn(func::FuncOp f, BlockArgument p) {
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (pp::getArgRole(f, i) == pp::Role::param &&
        argIndex(f, i, attrs::kPPArg) == int64_t(p.getArgNumber()))
      return f.getArgument(i);
  unsigned at = f.getNumArguments();
  SmallVector<NamedAttribute> list{
      b.getNamedAttr(attrs::kPPRole,
                     fwd.getArgAttr(p.getArgNumber(), attrs::kPPRole)),
      b.getNamedAttr(attrs::kPPArg, b.getI64IntegerAttr(p.getArgNumber()))};
  if (Attribute name = fwd.getArgAttr(p.getArgNumber(), attrs::kNNName))
    list.push_back(b.getNamedAttr(attrs::kNNName, name));
  (void)f.insertArgument(at, p.getType(), b.getDictionaryAttr(list),
                         f.getLoc());
  return f.getArgument(at);
}

FailureOr<DenseMap<int64_t, Value>> StageRecompute::rebuild(func::FuncOp f) {
  Block &body = f.front();
  // The new stash arguments, after the existing ones.
  IRMapping map;
  const unsigned firstNew = f.getNumArguments();
  for (auto [k, a] : llvm::enumerate(newStash)) {
    unsigned at = f.getNumArguments();
    SmallVector<NamedAttribute> list{
        b.getNamedAttr(attrs::kPPRole,
                       pp::getRoleAttr(b.getContext(), pp::Role::stash)),
        b.getNamedAttr(attrs::kPPStash, b.getI64IntegerAttr(int64_t(k)))};
    (void)f.insertArgument(at, a.getType(), b.getDictionaryAttr(list),
                           f.getLoc());
    map.map(a, f.getArgument(at));
  }
  // The slice, at the top, reading the new stash and the parameters.
  b.setInsertionPointToStart(&body);
  for (Operation *op : slice) {
    for (Value o : op->getOperands())
      if (auto a = dyn_cast<BlockArgument>(o); a && !map.contains(a))
        map.map(a, paramIn(f, a));
    b.clone(*op, map);
  }
  // Old stash arguments (before the new ones) -> their values here; then
  // drop them.
  DenseMap<int64_t, Value> held;
  llvm::BitVector drop(f.getNumArguments());
  for (unsigned i = 0; i < firstNew; ++i) {
    if (pp::getArgRole(f, i) != pp::Role::stash)
      continue;
    int64_t k = argIndex(f, i, attrs::kPPStash);
    auto it = oldStash.find(k);
    if (it == oldStash.end())
      return f.emitError("pp-recompute: stash slot ") << k << " is unknown";
    Value now = map.lookupOrDefault(it->second);
    f.getArgument(i).replaceAllUsesWith(now);
    held[k] = now;
    drop.set(i);
  }
  if (failed(f.eraseArguments(drop)))
    return failure();
  // Every recomputed slot, for the W-stash (W may read slots B does not).
  for (auto &[k, v] : oldStash)
    if (!held.count(k))
      held[k] = map.lookupOrDefault(v);
  return held;
}

/// Erases the recomputed ops nothing reads (BW's copies of what only W
/// needed in the split form).
static void eraseDead(func::FuncOp f) {
  SmallVector<Operation *> ops;
  for (Operation &op : f.front().without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (op->use_empty() && isMemoryEffectFree(op))
      op->erase();
}

/// W reads B's recomputed values as W-stash: B returns them.
LogicalResult
StageRecompute::rewriteWeight(const DenseMap<int64_t, Value> &inB) {
  if (!bW)
    return success();
  Operation *ret = bIn.front().getTerminator();
  int64_t nextW = 0;
  for (unsigned r = 0; r < ret->getNumOperands(); ++r)
    if (pp::getResultRole(bIn, r) == pp::Role::wstash)
      nextW = std::max(nextW, resultIndex(bIn, r, attrs::kPPWStash) + 1);
  SmallVector<Value> extra;
  SmallVector<DictionaryAttr> extraAttrs;
  llvm::BitVector drop(bW.getNumArguments());
  for (unsigned i = 0; i < bW.getNumArguments(); ++i) {
    if (pp::getArgRole(bW, i) != pp::Role::stash)
      continue;
    int64_t k = argIndex(bW, i, attrs::kPPStash);
    auto v = oldStash.find(k);
    if (v == oldStash.end())
      return bW.emitError("pp-recompute: stash slot ") << k << " is unknown";
    if (newStash.contains(v->second)) {
      // Still stashed: renumber.
      bW.setArgAttr(i, attrs::kPPStash,
                    b.getI64IntegerAttr(newIndexOf(v->second)));
      continue;
    }
    auto held = inB.find(k);
    if (held == inB.end())
      return bW.emitError("pp-recompute: W reads stash slot ")
             << k << " that B does not recompute";
    // A W-stash argument instead, filled by a new result of B.
    int64_t j = nextW++;
    extra.push_back(held->second);
    extraAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(attrs::kPPRole,
                        pp::getRoleAttr(b.getContext(), pp::Role::wstash)),
         b.getNamedAttr(attrs::kPPWStash, b.getI64IntegerAttr(j))}));
    unsigned at = bW.getNumArguments();
    (void)bW.insertArgument(at, bW.getArgument(i).getType(), extraAttrs.back(),
                            bW.getLoc());
    bW.getArgument(i).replaceAllUsesWith(bW.getArgument(at));
    drop.set(i);
  }
  drop.resize(bW.getNumArguments());
  if (failed(bW.eraseArguments(drop)))
    return failure();
  if (extra.empty())
    return success();
  SmallVector<Value> results(ret->getOperands());
  SmallVector<Attribute> resAttrs;
  for (unsigned r = 0; r < ret->getNumOperands(); ++r)
    resAttrs.push_back(bIn.getResultAttrDict(r)
                           ? Attribute(bIn.getResultAttrDict(r))
                           : Attribute(b.getDictionaryAttr({})));
  for (auto [v, a] : llvm::zip(extra, extraAttrs)) {
    results.push_back(v);
    resAttrs.push_back(a);
  }
  setResults(bIn, results, resAttrs);
  return success();
}

LogicalResult StageRecompute::rewriteForward() {
  Operation *ret = fwd.front().getTerminator();
  SmallVector<Value> results;
  SmallVector<Attribute> resAttrs;
  for (unsigned r = 0; r < ret->getNumOperands(); ++r)
    if (pp::getResultRole(fwd, r) != pp::Role::stash) {
      results.push_back(ret->getOperand(r));
      resAttrs.push_back(fwd.getResultAttrDict(r)
                             ? Attribute(fwd.getResultAttrDict(r))
                             : Attribute(b.getDictionaryAttr({})));
    }
  for (auto [k, a] : llvm::enumerate(newStash)) {
    results.push_back(a);
    resAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(attrs::kPPRole,
                        pp::getRoleAttr(b.getContext(), pp::Role::stash)),
         b.getNamedAttr(attrs::kPPStash, b.getI64IntegerAttr(int64_t(k)))}));
  }
  setResults(fwd, results, resAttrs);
  return success();
}

LogicalResult StageRecompute::run() {
  if (failed(collect()))
    return failure();
  auto inB = rebuild(bIn);
  if (failed(inB))
    return failure();
  if (bw && failed(rebuild(bw)))
    return failure();
  if (failed(rewriteWeight(*inB)) || failed(rewriteForward()))
    return failure();
  eraseDead(bIn);
  if (bw)
    eraseDead(bw);
  stage->setAttr(attrs::kPPRecompute,
                 b.getStringAttr(selective ? "selective" : "full"));
  if (selective) {
    double flops = 0;
    for (Operation *op : slice)
      if (auto c = dyn_cast<nn::CostOpInterface>(op))
        flops += c.getForwardFlops();
    stage->setAttr(attrs::kPPRecomputeFlops, b.getF64FloatAttr(flops));
  }
  return success();
}

struct RecomputePass : public pp::impl::PPRecomputeBase<RecomputePass> {
  using PPRecomputeBase::PPRecomputeBase;

  void runOnOperation() override {
    if (policy != "full" && policy != "selective") {
      emitError(getOperation().getLoc(), "pp-recompute: policy must be full "
                                         "or selective, got '")
          << policy << "'";
      return signalPassFailure();
    }
    llvm::SmallDenseSet<int64_t> only(stages.begin(), stages.end());
    WalkResult r = getOperation().walk([&](pp::StageOp stage) {
      if (stage->hasAttr(attrs::kPPRecompute))
        return WalkResult::advance();
      if (!only.empty() && !only.count(stage.getIndex()))
        return WalkResult::advance();
      auto get = [&](StringRef n) {
        return dyn_cast_or_null<func::FuncOp>(
            SymbolTable::lookupSymbolIn(stage, n));
      };
      func::FuncOp fwd = get("forward"), bIn = get("backward_input"),
                   bW = get("backward_weight"), bw = get("backward");
      if (!fwd || !bIn) {
        stage.emitError("pp-recompute: the stage has no @forward and "
                        "@backward_input (run --pp-split-backward first)");
        return WalkResult::interrupt();
      }
      if (failed(StageRecompute(stage, fwd, bIn, bW, bw, policy == "selective")
                     .run()))
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
