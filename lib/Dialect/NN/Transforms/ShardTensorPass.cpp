//===- ShardTensorPass.cpp - Megatron-style tensor parallelism ------------===//
//
// --nn-shard-tensor="tp=T [sequence-parallel=true]": rewrites each model
// function into what one rank of a tensor-parallel group computes
// (Shoeybi et al., 2019; sequence parallelism: Korthikanti et al., 2022).
//
// One walk in program order tracks how each activation is laid out over
// the group:
//
//   Replicated  every rank holds the whole tensor
//   Sequence    rank r holds sequence positions [r S/T, (r+1) S/T)
//               (sequence parallelism's form of "replicated")
//   Split       rank r holds features [r n/T, (r+1) n/T) of the last
//               dimension (the output of a column-parallel linear, the
//               heads of attention)
//   Partial     every rank holds a summand (a row-parallel linear, a
//               vocabulary-parallel embedding); completed at once
//
// and rewrites each op by the layout of its operands. The collectives are
// explicit ops (nn.tp_*), placed where Megatron-LM places them; their
// backward rules (NNBackward.cpp) put the dual collective in B.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/NN/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Support/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

namespace pipeforge::nn {
#define GEN_PASS_DEF_NNSHARDTENSOR
#include "pipeforge/Dialect/NN/Transforms/Passes.h.inc"
} // namespace pipeforge::nn

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::nn;

namespace {

enum class Layout { Replicated, Sequence, Split, Partial };

const char *layoutName(Layout l) {
  switch (l) {
  case Layout::Replicated:
    return "replicated";
  case Layout::Sequence:
    return "sequence-split";
  case Layout::Split:
    return "feature-split";
  case Layout::Partial:
    return "partial";
  }
  return "?";
}

/// `t` with dimension `dim` divided (or multiplied) by `factor`.
RankedTensorType scaleDim(RankedTensorType t, int64_t dim, int64_t factor,
                          bool divide) {
  SmallVector<int64_t> shape(t.getShape());
  shape[size_t(dim)] =
      divide ? shape[size_t(dim)] / factor : shape[size_t(dim)] * factor;
  return RankedTensorType::get(shape, t.getElementType());
}

/// The rewrite of one function.
class Sharder {
public:
  Sharder(func::FuncOp func, int64_t tp, bool sp)
      : func(func), tp(tp), sp(sp), b(func.getContext()),
        tpAttr(b.getI64IntegerAttr(tp)) {}

  LogicalResult run();

private:
  func::FuncOp func;
  int64_t tp;
  bool sp;
  OpBuilder b;
  IntegerAttr tpAttr;
  /// The layout of every activation seen so far (absent: replicated, e.g.
  /// the tokens).
  DenseMap<Value, Layout> layout;
  /// The one nn.tp_copy / nn.tp_all_gather of a value that feeds
  /// column-parallel linears (q, k and v share it).
  DenseMap<Value, Value> columnInput;
  /// Parameter arguments already split: the dimension (a parameter read by
  /// two ops must be split the same way by both).
  DenseMap<BlockArgument, int64_t> splitDim;

  /// What the model's "replicated" activations are: Sequence with sequence
  /// parallelism.
  Layout whole() const { return sp ? Layout::Sequence : Layout::Replicated; }
  Layout layoutOf(Value v) const {
    auto it = layout.find(v);
    return it == layout.end() ? Layout::Replicated : it->second;
  }

  LogicalResult checkDivisible(Operation *op, int64_t n, StringRef what);
  LogicalResult precheck();
  LogicalResult splitParam(Operation *op, Value v, int64_t dim);
  void markReduceGrad(Value v);
  void setLayer(Operation *newOp, Operation *like);
  /// Completes `op`'s partial result: an all-reduce, or a reduce-scatter
  /// along the sequence.
  void completePartial(Operation *op);
  Value columnInputOf(Operation *user, Value x);

  LogicalResult shard(EmbeddingOp op);
  LogicalResult shard(LinearOp op);
  LogicalResult shard(AttentionOp op);
  LogicalResult shard(ConcatHeadsOp op);
  LogicalResult shard(CrossEntropyOp op);
  LogicalResult shardNorm(Operation *op);
  LogicalResult shardWhole(Operation *op);
  LogicalResult shardElementwise(Operation *op);
  LogicalResult shardMoE(MoEOp op);
  LogicalResult shardOther(Operation *op);
};

LogicalResult Sharder::checkDivisible(Operation *op, int64_t n,
                                      StringRef what) {
  if (ShapedType::isDynamic(n))
    return op->emitOpError("needs a static ")
           << what << " to be split over tp = " << tp;
  if (n % tp)
    return op->emitOpError()
           << what << " (" << n << ") is not divisible by tp = " << tp;
  return success();
}

/// The divisibility rules, before anything is rewritten: the first error
/// names the op and the number at fault.
LogicalResult Sharder::precheck() {
  WalkResult r = func.walk([&](Operation *op) {
    LogicalResult ok =
        TypeSwitch<Operation *, LogicalResult>(op)
            .Case([&](AttentionOp a) -> LogicalResult {
              if (failed(checkDivisible(a, a.getNumHeads(),
                                        "number of attention heads")))
                return failure();
              if (a.getNumKvHeads() % tp)
                return a.emitOpError()
                       << "number of KV heads (" << a.getNumKvHeads()
                       << ") is not divisible by tp = " << tp
                       << " (grouped-query attention splits whole KV heads; "
                          "use a tp that divides it)";
              return success();
            })
            .Case([&](EmbeddingOp e) -> LogicalResult {
              if (failed(checkDivisible(e, e.getTable().getType().getDimSize(0),
                                        "vocabulary size")))
                return failure();
              if (e.getVocabShards().value_or(1) != 1)
                return e.emitOpError("is already vocabulary-parallel");
              if (sp)
                return checkDivisible(e, e.getResult().getType().getDimSize(1),
                                      "sequence length (sequence parallelism)");
              return success();
            })
            .Case<TPCopyOp, TPAllReduceOp, TPAllGatherOp, TPReduceScatterOp,
                  VocabParallelCrossEntropyOp>(
                [&](Operation *o) -> LogicalResult {
                  return o->emitOpError("is already tensor-parallel");
                })
            .Default([](Operation *) -> LogicalResult { return success(); });
    return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(r.wasInterrupted());
}

void Sharder::setLayer(Operation *newOp, Operation *like) {
  if (Attribute layer = like->getAttr(attrs::kNNLayer))
    newOp->setAttr(attrs::kNNLayer, layer);
}

/// Splits parameter `v` (a function argument) along `dim`.
LogicalResult Sharder::splitParam(Operation *op, Value v, int64_t dim) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &func.getBody().front())
    return op->emitOpError("needs its weights as function arguments to "
                           "split them over tp = ")
           << tp;
  auto it = splitDim.find(arg);
  if (it != splitDim.end()) {
    if (it->second != dim)
      return op->emitOpError("reads parameter #")
             << arg.getArgNumber() << " split along dimension " << it->second
             << " elsewhere, along " << dim << " here";
    return success();
  }
  auto t = cast<RankedTensorType>(arg.getType());
  if (failed(checkDivisible(op, t.getDimSize(dim),
                            "dimension " + std::to_string(dim) +
                                " of parameter #" +
                                std::to_string(arg.getArgNumber()))))
    return failure();
  arg.setType(scaleDim(t, dim, tp, /*divide=*/true));
  func.setArgAttr(arg.getArgNumber(), attrs::kTPDim, b.getI64IntegerAttr(dim));
  splitDim[arg] = dim;
  return success();
}

void Sharder::markReduceGrad(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (arg.getOwner() == &func.getBody().front())
      func.setArgAttr(arg.getArgNumber(), attrs::kTPReduceGrad,
                      b.getUnitAttr());
}

void Sharder::completePartial(Operation *op) {
  Value partial = op->getResult(0);
  b.setInsertionPointAfter(op);
  Operation *done;
  if (sp) {
    auto t = cast<RankedTensorType>(partial.getType());
    done = TPReduceScatterOp::create(b, op->getLoc(), scaleDim(t, 1, tp, true),
                                     partial, tpAttr, b.getI64IntegerAttr(1));
  } else {
    done = TPAllReduceOp::create(b, op->getLoc(), partial, tpAttr);
  }
  setLayer(done, op);
  partial.replaceAllUsesExcept(done->getResult(0), done);
  layout[partial] = Layout::Partial;
  layout[done->getResult(0)] = whole();
}

/// The input of a column-parallel linear: `x` passed through one
/// nn.tp_copy (or, under sequence parallelism, one nn.tp_all_gather)
/// placed right after x's definition and shared by every such linear.
Value Sharder::columnInputOf(Operation *user, Value x) {
  auto it = columnInput.find(x);
  if (it != columnInput.end())
    return it->second;
  if (auto arg = dyn_cast<BlockArgument>(x))
    b.setInsertionPointToStart(arg.getOwner());
  else
    b.setInsertionPointAfter(x.getDefiningOp());
  Operation *c;
  if (layoutOf(x) == Layout::Sequence) {
    auto t = cast<RankedTensorType>(x.getType());
    c = TPAllGatherOp::create(b, user->getLoc(), scaleDim(t, 1, tp, false), x,
                              tpAttr, b.getI64IntegerAttr(1));
  } else {
    c = TPCopyOp::create(b, user->getLoc(), x, tpAttr);
  }
  setLayer(c, user);
  columnInput[x] = c->getResult(0);
  layout[c->getResult(0)] = Layout::Replicated;
  return c->getResult(0);
}

/// Vocabulary-parallel: rows of the table; the result is partial.
LogicalResult Sharder::shard(EmbeddingOp op) {
  if (failed(splitParam(op, op.getTable(), 0)))
    return failure();
  op.setVocabShards(tp);
  completePartial(op);
  return success();
}

/// Whether every user of a linear's result takes a feature-split operand
/// (nn.concat_heads: its per-head `lhs`, not a shared head).
static bool feedsSplitConsumers(Value v) {
  if (v.use_empty())
    return false;
  return llvm::all_of(v.getUses(), [](OpOperand &u) {
    Operation *o = u.getOwner();
    if (auto c = dyn_cast<ConcatHeadsOp>(o))
      return u.getOperandNumber() == 0 || !c.getBroadcast();
    return isa<AttentionOp, GeluOp, SiluOp, MulOp, CrossEntropyOp>(o);
  });
}

LogicalResult Sharder::shard(LinearOp op) {
  Value x = op.getInput();
  Layout in = layoutOf(x);
  auto resultType = op.getResult().getType();
  int64_t last = resultType.getRank() - 1;
  if (in == Layout::Split) {
    // Row-parallel: the weight's columns; the bias is added once (rank 0).
    if (failed(splitParam(op, op.getWeight(), 1)))
      return failure();
    op.setPartial(true);
    completePartial(op);
    return success();
  }
  if (in == Layout::Partial)
    return op->emitOpError("reads a partial sum");
  if (!feedsSplitConsumers(op.getResult())) {
    // Not part of a column/row pair: computed whole on every rank (on a
    // sequence split: on its tokens, its parameter gradients partial).
    if (in == Layout::Sequence) {
      for (Value p : op->getOperands().drop_front())
        markReduceGrad(p);
      op.getResult().setType(scaleDim(resultType, 1, tp, true));
    }
    layout[op.getResult()] = in;
    return success();
  }
  // Column-parallel: the weight's rows and the bias.
  if (failed(splitParam(op, op.getWeight(), 0)))
    return failure();
  if (Value bias = op.getBias())
    if (failed(splitParam(op, bias, 0)))
      return failure();
  op.getInputMutable().assign(columnInputOf(op, x));
  op.getResult().setType(scaleDim(resultType, last, tp, true));
  layout[op.getResult()] = Layout::Split;
  return success();
}

LogicalResult Sharder::shard(AttentionOp op) {
  for (Value v : {op.getQ(), op.getK(), op.getV()})
    if (layoutOf(v) != Layout::Split)
      return op->emitOpError("expects q, k and v from column-parallel "
                             "linears, got a ")
             << layoutName(layoutOf(v)) << " operand";
  op.setNumHeads(op.getNumHeads() / tp);
  op.setNumKvHeads(op.getNumKvHeads() / tp);
  auto resultType = op.getResult().getType();
  op.getResult().setType(
      scaleDim(resultType, resultType.getRank() - 1, tp, true));
  layout[op.getResult()] = Layout::Split;
  return success();
}

/// MLA's keys: each rank concatenates the heads it holds. A shared head
/// (`broadcast`, the one RoPE key) is whole on every rank: it passes an
/// nn.tp_copy (sequence parallelism: an nn.tp_all_gather) first, whose B
/// sums the ranks' partial gradients of it (each rank's heads' share).
LogicalResult Sharder::shard(ConcatHeadsOp op) {
  if (layoutOf(op.getLhs()) != Layout::Split)
    return op->emitOpError("expects per-head values from a column-parallel "
                           "linear, got a ")
           << layoutName(layoutOf(op.getLhs())) << " operand";
  if (failed(checkDivisible(op, op.getNumHeads(), "num_heads")))
    return failure();
  Layout rhs = layoutOf(op.getRhs());
  if (op.getBroadcast()) {
    if (rhs != Layout::Replicated && rhs != Layout::Sequence)
      return op->emitOpError("expects a whole shared head, got a ")
             << layoutName(rhs) << " operand";
    op.getRhsMutable().assign(columnInputOf(op, op.getRhs()));
  } else if (rhs != Layout::Split) {
    return op->emitOpError("expects per-head values from a column-parallel "
                           "linear, got a ")
           << layoutName(rhs) << " operand";
  }
  op.setNumHeads(op.getNumHeads() / tp);
  auto resultType = op.getResult().getType();
  op.getResult().setType(
      scaleDim(resultType, resultType.getRank() - 1, tp, true));
  layout[op.getResult()] = Layout::Split;
  return success();
}

/// Logits split over the vocabulary: the vocabulary-parallel loss.
LogicalResult Sharder::shard(CrossEntropyOp op) {
  Layout in = layoutOf(op.getLogits());
  if (in == Layout::Replicated)
    return success();
  if (in != Layout::Split)
    return op->emitOpError("expects whole or vocabulary-split logits, got ")
           << layoutName(in) << " ones";
  b.setInsertionPoint(op);
  auto vp = VocabParallelCrossEntropyOp::create(
      b, op.getLoc(), op.getLoss().getType(), op.getLogits(), op.getTargets(),
      tpAttr);
  vp->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  op.getLoss().replaceAllUsesWith(vp.getLoss());
  op.erase();
  return success();
}

/// Norms run on whole (or, sequence-parallel, sequence-split) activations;
/// on a sequence split each rank's parameter gradient covers its tokens
/// only, so they are summed over the group.
LogicalResult Sharder::shardNorm(Operation *op) { return shardWhole(op); }

/// An op that runs whole on every rank (its first operand the activation,
/// the rest parameters): on a sequence split, its parameters' gradients
/// are partial.
LogicalResult Sharder::shardWhole(Operation *op) {
  Layout in = layoutOf(op->getOperand(0));
  if (in != Layout::Replicated && in != Layout::Sequence)
    return op->emitOpError("expects a whole activation, got a ")
           << layoutName(in) << " one";
  if (in == Layout::Sequence)
    for (Value p : op->getOperands().drop_front())
      markReduceGrad(p);
  op->getResult(0).setType(op->getOperand(0).getType());
  layout[op->getResult(0)] = in;
  return success();
}

/// Elementwise ops: every operand in one layout (and type), kept.
LogicalResult Sharder::shardElementwise(Operation *op) {
  Layout in = layoutOf(op->getOperand(0));
  for (Value v : op->getOperands())
    if (layoutOf(v) != in)
      return op->emitOpError("mixes a ")
             << layoutName(in) << " and a " << layoutName(layoutOf(v))
             << " operand";
  if (in == Layout::Partial)
    return op->emitOpError("reads a partial sum");
  // A dropout's mask is drawn over the whole tensor's positions: the runtime
  // places sequence shards (seq_start), not feature shards.
  if (in == Layout::Split && isa<DropoutOp>(op))
    return op->emitOpError("on a feature-split activation is not supported "
                           "under tensor parallelism (its mask would not "
                           "match the unsharded model's)");
  op->getResult(0).setType(op->getOperand(0).getType());
  layout[op->getResult(0)] = in;
  return success();
}

/// Experts stay under expert parallelism: the MoE layer runs on every rank
/// of the group, on whole activations (sequence-parallel: on its tokens,
/// with its parameter gradients summed over the group).
LogicalResult Sharder::shardMoE(MoEOp op) { return shardWhole(op); }

/// Any other op (func.return, ...) must see whole values only.
LogicalResult Sharder::shardOther(Operation *op) {
  for (Value v : op->getOperands()) {
    Layout l = layoutOf(v);
    bool scalar = cast<ShapedType>(v.getType()).getRank() == 0;
    if (l == Layout::Replicated || scalar)
      continue;
    return op->emitOpError("cannot be split over tp = ")
           << tp << ": it reads a " << layoutName(l)
           << " operand (docs/tensor-parallel.md lists the ops that can)";
  }
  for (Value r : op->getResults())
    layout[r] = Layout::Replicated;
  return success();
}

LogicalResult Sharder::run() {
  if (failed(precheck()))
    return failure();
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front())
    ops.push_back(&op);
  for (Operation *op : ops) {
    LogicalResult ok =
        TypeSwitch<Operation *, LogicalResult>(op)
            .Case([&](EmbeddingOp o) { return shard(o); })
            .Case([&](LinearOp o) { return shard(o); })
            .Case([&](AttentionOp o) { return shard(o); })
            .Case([&](ConcatHeadsOp o) { return shard(o); })
            .Case([&](CrossEntropyOp o) { return shard(o); })
            .Case([&](MoEOp o) { return shardMoE(o); })
            .Case<LayerNormOp, RMSNormOp>(
                [&](Operation *o) { return shardNorm(o); })
            .Case<AddOp, MulOp, GeluOp, SiluOp, DropoutOp>(
                [&](Operation *o) { return shardElementwise(o); })
            .Default([&](Operation *o) -> LogicalResult {
              return o->getNumOperands() &&
                             llvm::all_of(
                                 o->getOperandTypes(),
                                 [](Type t) { return isa<ShapedType>(t); })
                         ? shardOther(o)
                         : success();
            });
    if (failed(ok))
      return failure();
  }
  // The signature follows the split arguments.
  func.setFunctionType(FunctionType::get(
      func.getContext(), func.getBody().front().getArgumentTypes(),
      func.getResultTypes()));
  func->setAttr(attrs::kTensorParallel, tpAttr);
  if (sp)
    func->setAttr(attrs::kSequenceParallel, b.getUnitAttr());
  return success();
}

struct ShardTensorPass : public nn::impl::NNShardTensorBase<ShardTensorPass> {
  using NNShardTensorBase::NNShardTensorBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tp < 1) {
      emitError(module.getLoc(), "nn-shard-tensor: tp must be >= 1, got ")
          << int64_t(tp);
      return signalPassFailure();
    }
    if (tp == 1) {
      if (sequenceParallel) {
        emitError(module.getLoc(), "nn-shard-tensor: sequence-parallel needs "
                                   "tp >= 2");
        return signalPassFailure();
      }
      return markAllAnalysesPreserved();
    }
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      bool model = false;
      func.walk(
          [&](Operation *op) { model |= isa<NNDialect>(op->getDialect()); });
      if (!model)
        continue;
      if (func->hasAttr(attrs::kTensorParallel)) {
        func.emitOpError("is already tensor-parallel (")
            << attrs::kTensorParallel << ")";
        return signalPassFailure();
      }
      if (failed(Sharder(func, tp, sequenceParallel).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
