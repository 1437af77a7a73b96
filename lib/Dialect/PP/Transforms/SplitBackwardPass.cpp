//===- SplitBackwardPass.cpp - --pp-split-backward ------------------------===//
//
// Differentiates each stage's @forward in reverse mode with the ops'
// BackwardOpInterface rules and splits the backward into B
// (@backward_input), W (@backward_weight) and the fused BW (@backward).
//
// The backward is first built once, in a scratch block whose arguments are
// placeholders for what it reads: parameters, forward values ("stash") and
// the gradients of @forward's results. Every op built there is tagged B or W
// by the rule method that built it. The four functions are then slices of
// that block:
//   B  = what the activation gradients and the W-stash need (B ops only);
//   W  = the W ops the parameter gradients need; every value they read that
//        a B op computes (or B receives) is a W-stash B returns;
//   BW = what both need; @forward returns the stash B and W read.
// Slicing is dead-code elimination: nothing unused is built or stashed.
// The argument/result convention is in docs/split-backward.md.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Support/AttrNames.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPSPLITBACKWARD
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;

namespace {

/// The names of the functions a split produces.
struct SplitNames {
  StringRef input = "backward_input", weight = "backward_weight",
            fused = "backward";
};

/// What an argument of @forward is, from its `nn.role`.
enum class ArgKind { Activation, Data, Param };

/// What a placeholder argument of the scratch backward stands for.
enum class PlaceholderKind { Param, Stash, GradIn };

struct Placeholder {
  PlaceholderKind kind;
  Value fwdValue; ///< the forward value (Param, Stash)
  unsigned index; ///< forward argument (Param) or result (GradIn) index
};

/// A value to pass or return, with its argument/result attributes.
using Slot = std::pair<Value, DictionaryAttr>;

class BackwardSplitter {
public:
  BackwardSplitter(func::FuncOp fwd, bool lossStage)
      : fwd(fwd), ctx(fwd.getContext()), b(fwd.getContext()),
        lossStage(lossStage) {
    scratch.push_back(new Block);
  }

  /// Builds B, W and BW after `fwd` and rewrites `fwd` to return the stash.
  LogicalResult run(const SplitNames &names);

private:
  LogicalResult classifyArguments();
  LogicalResult differentiate();
  LogicalResult differentiateOp(Operation &op);
  Value mapForward(Value v);
  void accumulate(DenseMap<Value, Value> &sums, Value key, Value grad, bool isW,
                  Location loc);
  void tagNewOps(Operation *after, bool isW, Operation *fwdOp);
  FailureOr<Value> zeros(Type type, bool isW, Location loc, Twine what);
  SmallVector<Operation *> liveOps(ArrayRef<Value> roots);
  func::FuncOp emit(StringRef name, ArrayRef<Slot> args,
                    ArrayRef<Operation *> ops, ArrayRef<Slot> results);

  DictionaryAttr attrs(ArrayRef<NamedAttribute> list) {
    return DictionaryAttr::get(ctx, list);
  }
  NamedAttribute role(pp::Role r) {
    return b.getNamedAttr(attrs::kPPRole, pp::getRoleAttr(ctx, r));
  }
  NamedAttribute index(StringRef key, int64_t i) {
    return b.getNamedAttr(key, b.getI64IntegerAttr(i));
  }
  /// `pp.role = "param"`-like attributes of forward argument `i`, keeping
  /// its `nn.name`.
  DictionaryAttr paramAttrs(pp::Role r, unsigned i) {
    SmallVector<NamedAttribute> list{role(r), index(attrs::kPPArg, i)};
    if (Attribute name = fwd.getArgAttr(i, attrs::kNNName))
      list.push_back(b.getNamedAttr(attrs::kNNName, name));
    return attrs(list);
  }
  bool isLoss(unsigned result) {
    auto t = dyn_cast<RankedTensorType>(fwd.getResultTypes()[result]);
    return lossStage && t && t.getRank() == 0;
  }

  func::FuncOp fwd;
  MLIRContext *ctx;
  OpBuilder b;
  bool lossStage;

  SmallVector<ArgKind> argKinds;
  Region scratch;
  Block &body() { return scratch.front(); }
  /// Per scratch block argument: what it stands for.
  SmallVector<Placeholder> placeholders;
  DenseMap<Value, Value> toScratch;  ///< forward value -> placeholder
  SmallVector<Value> gradIns;        ///< placeholder per forward result
  DenseSet<Operation *> wOps;        ///< scratch ops W builds
  DenseMap<Value, Value> grads;      ///< forward value -> its gradient (B)
  DenseMap<Value, Value> paramGrads; ///< parameter argument -> gradient (W)
};

} // namespace

LogicalResult BackwardSplitter::classifyArguments() {
  // Arguments without `nn.role` that an op reads as a parameter operand.
  DenseSet<Value> usedAsParam;
  for (auto iface : fwd.front().getOps<nn::BackwardOpInterface>())
    for (unsigned i : iface.getParamOperandIndices())
      usedAsParam.insert(iface->getOperand(i));
  for (BlockArgument arg : fwd.getArguments()) {
    auto r =
        fwd.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrs::kNNRole);
    auto type = dyn_cast<ShapedType>(arg.getType());
    if (!r && type && type.getElementType().isInteger())
      argKinds.push_back(ArgKind::Data);
    else if (!r && usedAsParam.contains(arg))
      argKinds.push_back(ArgKind::Param);
    else if (!r)
      argKinds.push_back(ArgKind::Activation);
    else if (r.getValue() == "param")
      argKinds.push_back(ArgKind::Param);
    else if (r.getValue() == "tokens" || r.getValue() == "targets")
      argKinds.push_back(ArgKind::Data);
    else
      return fwd.emitError() << "argument #" << arg.getArgNumber()
                             << " has unknown nn.role \"" << r.getValue()
                             << "\" (expected \"param\", \"tokens\" or "
                                "\"targets\")";
  }
  return success();
}

/// The argument number of `v` when it is a parameter of `fwd`.
static std::optional<unsigned> paramIndex(func::FuncOp fwd,
                                          ArrayRef<ArgKind> kinds, Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &fwd.front() ||
      kinds[arg.getArgNumber()] != ArgKind::Param)
    return std::nullopt;
  return arg.getArgNumber();
}

Value BackwardSplitter::mapForward(Value v) {
  if (Value s = toScratch.lookup(v))
    return s;
  std::optional<unsigned> p = paramIndex(fwd, argKinds, v);
  Value s = body().addArgument(v.getType(), v.getLoc());
  placeholders.push_back(
      {p ? PlaceholderKind::Param : PlaceholderKind::Stash, v, p.value_or(0)});
  toScratch[v] = s;
  return s;
}

void BackwardSplitter::tagNewOps(Operation *after, bool isW, Operation *fwdOp) {
  Block::iterator it = after ? std::next(after->getIterator()) : body().begin();
  for (Operation &op : llvm::make_range(it, body().end())) {
    if (isW)
      wOps.insert(&op);
    if (Attribute layer = fwdOp ? fwdOp->getAttr(attrs::kNNLayer) : Attribute())
      op.setAttr(attrs::kNNLayer, layer);
  }
}

void BackwardSplitter::accumulate(DenseMap<Value, Value> &sums, Value key,
                                  Value grad, bool isW, Location loc) {
  auto [it, inserted] = sums.try_emplace(key, grad);
  if (inserted)
    return;
  auto add = nn::AddOp::create(b, loc, it->second, grad);
  if (isW)
    wOps.insert(add);
  it->second = add;
}

FailureOr<Value> BackwardSplitter::zeros(Type type, bool isW, Location loc,
                                         Twine what) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape() || !isa<FloatType>(t.getElementType()))
    return fwd.emitError() << what
                           << " has no gradient and a zero gradient of type "
                           << type << " cannot be built (needs a static shape)";
  auto c = arith::ConstantOp::create(b, loc, cast<TypedAttr>(b.getZeroAttr(t)));
  if (isW)
    wOps.insert(c);
  return c.getResult();
}

LogicalResult BackwardSplitter::differentiateOp(Operation &op) {
  SmallVector<Value> resultGrads;
  for (Value r : op.getResults())
    resultGrads.push_back(grads.lookup(r));
  if (llvm::all_of(resultGrads, [](Value g) { return !g; }))
    return success(); // Does not reach the outputs: nothing to do.

  auto iface = dyn_cast<nn::BackwardOpInterface>(op);
  if (!iface) {
    if (op.getNumOperands() == 0)
      return success(); // A constant: no operand to differentiate.
    return op.emitOpError("has no backward rule (BackwardOpInterface); "
                          "--pp-split-backward cannot differentiate it");
  }

  SmallVector<unsigned> paramOperands = iface.getParamOperandIndices();
  for (OpOperand &use : op.getOpOperands()) {
    bool isParamOperand =
        llvm::is_contained(paramOperands, use.getOperandNumber());
    if (isParamOperand && !paramIndex(fwd, argKinds, use.get()))
      return op.emitOpError("operand #")
             << use.getOperandNumber()
             << " is a parameter and must be an argument of @"
             << fwd.getSymName() << " with nn.role = \"param\"";
  }

  b.setInsertionPointToEnd(&body());
  auto mapFn = [&](Value v) { return mapForward(v); };

  // B: gradients of the operands that are not parameters.
  Operation *mark = body().empty() ? nullptr : &body().back();
  SmallVector<Value> operandGrads;
  if (failed(iface.buildBackwardInput(b, mapFn, resultGrads, operandGrads)))
    return failure();
  if (operandGrads.size() != op.getNumOperands())
    return op.emitOpError("backward rule returned ")
           << operandGrads.size() << " operand gradients for "
           << op.getNumOperands() << " operands";
  tagNewOps(mark, /*isW=*/false, &op);
  for (auto [operand, g] : llvm::zip(op.getOperands(), operandGrads))
    if (g)
      accumulate(grads, operand, g, /*isW=*/false, op.getLoc());

  // W: gradients of the parameter operands.
  if (paramOperands.empty())
    return success();
  mark = body().empty() ? nullptr : &body().back();
  SmallVector<Value> pGrads;
  if (failed(iface.buildBackwardWeight(b, mapFn, resultGrads, pGrads)))
    return failure();
  if (pGrads.size() != paramOperands.size())
    return op.emitOpError("backward rule returned ")
           << pGrads.size() << " parameter gradients for "
           << paramOperands.size() << " parameters";
  tagNewOps(mark, /*isW=*/true, &op);
  for (auto [idx, g] : llvm::zip(paramOperands, pGrads))
    accumulate(paramGrads, op.getOperand(idx), g, /*isW=*/true, op.getLoc());
  return success();
}

LogicalResult BackwardSplitter::differentiate() {
  Operation *ret = fwd.front().getTerminator();
  b.setInsertionPointToEnd(&body());
  for (auto [i, r] : llvm::enumerate(ret->getOperands())) {
    Value g = body().addArgument(r.getType(), fwd.getLoc());
    placeholders.push_back({PlaceholderKind::GradIn, Value(), (unsigned)i});
    gradIns.push_back(g);
    accumulate(grads, r, g, /*isW=*/false, fwd.getLoc());
  }
  for (Operation &op : llvm::reverse(fwd.front().without_terminator()))
    if (failed(differentiateOp(op)))
      return failure();
  return success();
}

SmallVector<Operation *> BackwardSplitter::liveOps(ArrayRef<Value> roots) {
  DenseSet<Operation *> live;
  SmallVector<Value> work(roots);
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !live.insert(def).second)
      continue;
    llvm::append_range(work, def->getOperands());
  }
  SmallVector<Operation *> ordered;
  for (Operation &op : body())
    if (live.contains(&op))
      ordered.push_back(&op);
  return ordered;
}

func::FuncOp BackwardSplitter::emit(StringRef name, ArrayRef<Slot> args,
                                    ArrayRef<Operation *> ops,
                                    ArrayRef<Slot> results) {
  SmallVector<Type> argTypes, resultTypes;
  for (const Slot &s : args)
    argTypes.push_back(s.first.getType());
  for (const Slot &s : results)
    resultTypes.push_back(s.first.getType());
  auto fn = func::FuncOp::create(b, fwd.getLoc(), name,
                                 b.getFunctionType(argTypes, resultTypes));
  Block *entry = fn.addEntryBlock();
  IRMapping map;
  for (auto [i, s] : llvm::enumerate(args)) {
    map.map(s.first, entry->getArgument(i));
    fn.setArgAttrs(i, s.second);
  }
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(entry);
  for (Operation *op : ops)
    b.clone(*op, map);
  SmallVector<Value> returned;
  for (auto [i, s] : llvm::enumerate(results)) {
    returned.push_back(map.lookupOrDefault(s.first));
    fn.setResultAttrs(i, s.second);
  }
  func::ReturnOp::create(b, fwd.getLoc(), returned);
  return fn;
}

LogicalResult BackwardSplitter::run(const SplitNames &names) {
  if (failed(classifyArguments()) || failed(differentiate()))
    return failure();

  // The roots: activation gradients (B) and parameter gradients (W).
  b.setInsertionPointToEnd(&body());
  SmallVector<Slot> actGrads, paramTotals;
  for (auto [i, kind] : llvm::enumerate(argKinds)) {
    BlockArgument arg = fwd.getArgument(i);
    if (kind == ArgKind::Data)
      continue;
    bool isW = kind == ArgKind::Param;
    Value g = grads.lookup(arg);
    if (isW) {
      // A parameter also used as a plain operand gets a B-built part too.
      Value w = paramGrads.lookup(arg);
      if (w && g) {
        auto add = nn::AddOp::create(b, arg.getLoc(), w, g);
        wOps.insert(add);
        g = add;
      } else if (w) {
        g = w;
      }
    }
    if (!g) {
      FailureOr<Value> z = zeros(arg.getType(), isW, arg.getLoc(),
                                 Twine("argument #") + Twine(i));
      if (failed(z))
        return failure();
      g = *z;
    }
    (isW ? paramTotals : actGrads)
        .push_back({g, isW ? paramAttrs(pp::Role::param_grad, i)
                           : attrs({role(pp::Role::grad_out),
                                    index(attrs::kPPArg, i)})});
  }

  // W never feeds B: W values flow only into W ops and the W results.
  for (Operation *op : wOps)
    for (Operation *user : op->getUsers())
      if (!wOps.contains(user))
        return user->emitError("internal error: a weight-gradient value "
                               "feeds the input-gradient computation");

  // W's ops, and the values it reads that B computes or receives.
  SmallVector<Value> paramRoots =
      llvm::map_to_vector(paramTotals, [](const Slot &s) { return s.first; });
  SmallVector<Operation *> wFuncOps;
  for (Operation *op : liveOps(paramRoots))
    if (wOps.contains(op))
      wFuncOps.push_back(op);
  llvm::SetVector<Value> wStash;
  auto isPlaceholderOfForward = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner() == &body() &&
           placeholders[arg.getArgNumber()].kind != PlaceholderKind::GradIn;
  };
  auto collectWStash = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!(def && wOps.contains(def)) && !isPlaceholderOfForward(v))
      wStash.insert(v);
  };
  for (Operation *op : wFuncOps)
    llvm::for_each(op->getOperands(), collectWStash);
  llvm::for_each(paramRoots, collectWStash);

  // B's and BW's ops.
  SmallVector<Value> bRoots =
      llvm::map_to_vector(actGrads, [](const Slot &s) { return s.first; });
  SmallVector<Value> fusedRoots(bRoots);
  llvm::append_range(bRoots, wStash);
  llvm::append_range(fusedRoots, paramRoots);
  SmallVector<Operation *> bFuncOps = liveOps(bRoots);
  SmallVector<Operation *> fusedOps = liveOps(fusedRoots);
  for (Operation *op : bFuncOps)
    if (wOps.contains(op))
      return op->emitError("internal error: B needs a weight-gradient op");

  // The placeholders each function reads.
  auto used = [&](ArrayRef<Operation *> ops, ArrayRef<Value> roots) {
    llvm::SetVector<unsigned> args;
    auto note = [&](Value v) {
      if (auto arg = dyn_cast<BlockArgument>(v);
          arg && arg.getOwner() == &body())
        args.insert(arg.getArgNumber());
    };
    for (Operation *op : ops)
      llvm::for_each(op->getOperands(), note);
    llvm::for_each(roots, note);
    return args;
  };
  llvm::SetVector<unsigned> bUsed = used(bFuncOps, bRoots);
  llvm::SetVector<unsigned> wUsed = used(wFuncOps, paramRoots);

  // The stash: forward values B or W read, in forward order.
  DenseMap<Value, int64_t> fwdOrder;
  for (BlockArgument arg : fwd.getArguments())
    fwdOrder[arg] = fwdOrder.size();
  fwd.walk([&](Operation *op) {
    for (Value r : op->getResults())
      fwdOrder[r] = fwdOrder.size();
  });
  SmallVector<unsigned> stash, params;
  for (auto [i, p] : llvm::enumerate(placeholders)) {
    if (!bUsed.contains(i) && !wUsed.contains(i))
      continue;
    if (p.kind == PlaceholderKind::Stash)
      stash.push_back(i);
    else if (p.kind == PlaceholderKind::Param)
      params.push_back(i);
  }
  llvm::sort(stash, [&](unsigned x, unsigned y) {
    return fwdOrder[placeholders[x].fwdValue] <
           fwdOrder[placeholders[y].fwdValue];
  });
  llvm::sort(params, [&](unsigned x, unsigned y) {
    return placeholders[x].index < placeholders[y].index;
  });
  DenseMap<unsigned, int64_t> stashId;
  for (auto [k, i] : llvm::enumerate(stash))
    stashId[i] = k;

  // Argument lists: params, then stash, then grad_in (B, BW) or wstash (W).
  auto placeholderArgs = [&](const llvm::SetVector<unsigned> *filter) {
    SmallVector<Slot> args;
    for (unsigned i : params)
      if (!filter || filter->contains(i))
        args.push_back({body().getArgument(i),
                        paramAttrs(pp::Role::param, placeholders[i].index)});
    for (unsigned i : stash)
      if (!filter || filter->contains(i))
        args.push_back({body().getArgument(i),
                        attrs({role(pp::Role::stash),
                               index(attrs::kPPStash, stashId[i])})});
    return args;
  };
  SmallVector<Slot> gradInArgs;
  for (auto [r, g] : llvm::enumerate(gradIns))
    gradInArgs.push_back(
        {g, attrs({role(isLoss(r) ? pp::Role::loss_seed : pp::Role::grad_in),
                   index(attrs::kPPResult, r)})});
  SmallVector<Slot> wStashSlots;
  for (auto [j, v] : llvm::enumerate(wStash))
    wStashSlots.push_back(
        {v, attrs({role(pp::Role::wstash), index(attrs::kPPWStash, j)})});

  SmallVector<Slot> bArgs = placeholderArgs(&bUsed);
  llvm::append_range(bArgs, gradInArgs);
  SmallVector<Slot> bResults(actGrads);
  llvm::append_range(bResults, wStashSlots);

  SmallVector<Slot> wArgs = placeholderArgs(&wUsed);
  llvm::append_range(wArgs, wStashSlots);

  SmallVector<Slot> fusedArgs = placeholderArgs(nullptr);
  llvm::append_range(fusedArgs, gradInArgs);
  SmallVector<Slot> fusedResults(actGrads);
  llvm::append_range(fusedResults, paramTotals);

  b.setInsertionPointAfter(fwd);
  func::FuncOp bFn = emit(names.input, bArgs, bFuncOps, bResults);
  b.setInsertionPointAfter(bFn);
  func::FuncOp wFn = emit(names.weight, wArgs, wFuncOps, paramTotals);
  b.setInsertionPointAfter(wFn);
  emit(names.fused, fusedArgs, fusedOps, fusedResults);

  // @forward: roles on its arguments and results, and the stash returned.
  for (auto [i, kind] : llvm::enumerate(argKinds))
    fwd.setArgAttr(i, attrs::kPPRole,
                   pp::getRoleAttr(ctx, kind == ArgKind::Param ? pp::Role::param
                                        : kind == ArgKind::Data
                                            ? pp::Role::data
                                            : pp::Role::act_in));
  Operation *ret = fwd.front().getTerminator();
  unsigned numOutputs = ret->getNumOperands();
  SmallVector<DictionaryAttr> resultAttrs;
  for (unsigned r = 0; r < numOutputs; ++r) {
    NamedAttrList list(fwd.getResultAttrDict(r));
    list.set(
        attrs::kPPRole,
        pp::getRoleAttr(ctx, isLoss(r) ? pp::Role::loss : pp::Role::act_out));
    resultAttrs.push_back(list.getDictionary(ctx));
  }
  for (auto [k, i] : llvm::enumerate(stash)) {
    ret->insertOperands(ret->getNumOperands(), placeholders[i].fwdValue);
    resultAttrs.push_back(
        attrs({role(pp::Role::stash), index(attrs::kPPStash, k)}));
  }
  fwd.setType(
      b.getFunctionType(fwd.getArgumentTypes(), ret->getOperandTypes()));
  fwd.setAllResultAttrs(resultAttrs);
  return success();
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {
struct SplitBackwardPass
    : public pp::impl::PPSplitBackwardBase<SplitBackwardPass> {
  void runOnOperation() override;
};
} // namespace

/// Splits `fwd`; the functions go into the symbol table `table` holds.
static LogicalResult splitOne(Operation *table, func::FuncOp fwd,
                              bool lossStage) {
  SplitNames names;
  for (StringRef name : {names.input, names.weight, names.fused})
    if (SymbolTable::lookupSymbolIn(table, name))
      return table->emitError("already has @")
             << name << "; --pp-split-backward runs once";
  if (fwd.isExternal() || !fwd.getBody().hasOneBlock())
    return fwd.emitError("expects a body of one block to differentiate");
  return BackwardSplitter(fwd, lossStage).run(names);
}

void SplitBackwardPass::runOnOperation() {
  ModuleOp module = getOperation();
  bool anyPipeline = false;
  for (pp::PipelineOp pipeline : module.getOps<pp::PipelineOp>()) {
    anyPipeline = true;
    int64_t last = pipeline.getNumStages() - 1;
    for (pp::StageOp stage : pipeline.getBody().getOps<pp::StageOp>()) {
      auto fwd = dyn_cast_or_null<func::FuncOp>(
          SymbolTable::lookupSymbolIn(stage, "forward"));
      if (!fwd) {
        stage.emitError("has no func.func @forward to differentiate");
        return signalPassFailure();
      }
      if (failed(splitOne(stage, fwd, stage.getIndex() == last)))
        return signalPassFailure();
    }
  }
  if (anyPipeline)
    return;
  // Standalone: the whole model as one stage.
  if (auto model = module.lookupSymbol<func::FuncOp>("model"))
    if (failed(splitOne(module, model, /*lossStage=*/true)))
      return signalPassFailure();
}
