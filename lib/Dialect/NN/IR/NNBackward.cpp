//===- NNBackward.cpp - reverse-mode rules of the nn ops, split in B and W ===//
//
// BackwardOpInterface of every model-level nn op. B builds the gradients of
// the activation operands, W those of the parameter operands; W reads only
// forward values and the result gradient, never anything B derives from it,
// so W can run later than B (Zero Bubble). The gradient ops follow the CPU
// reference kernels (runtime/backends/cpu/Kernels.h): linear_bwd_weight returns dW and
// db, cross_entropy_bwd scales by 1/tokens, moe_bwd_weight recomputes the
// expert-internal gradients from forward values, attention_bwd rotates q and k
// itself when `rotary` is set.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace pipeforge::nn;

using FwdMap = llvm::function_ref<Value(Value)>;

/// Starts `grads` with one null gradient per operand of `op` and returns the
/// index of the first one.
static unsigned appendNullGrads(Operation *op, SmallVectorImpl<Value> &grads) {
  unsigned first = grads.size();
  grads.append(op->getNumOperands(), Value());
  return first;
}

//===----------------------------------------------------------------------===//
// nn.linear: dx = dy W (B); dW = dy^T x, db = sum dy (W).
//===----------------------------------------------------------------------===//

SmallVector<unsigned> LinearOp::getParamOperandIndices() {
  SmallVector<unsigned> idx{1};
  if (getBias())
    idx.push_back(2);
  return idx;
}

LogicalResult LinearOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                           ValueRange resultGrads,
                                           SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] = LinearBwdInputOp::create(b, getLoc(), getInput().getType(),
                                           dy, fwd(getWeight()));
  return success();
}

LogicalResult LinearOp::buildBackwardWeight(OpBuilder &b, FwdMap fwd,
                                            ValueRange resultGrads,
                                            SmallVectorImpl<Value> &grads) {
  Value dy = resultGrads[0];
  if (!dy)
    return emitOpError("needs its result gradient to build W");
  Value bias = getBias();
  auto op = LinearBwdWeightOp::create(
      b, getLoc(), getWeight().getType(), bias ? bias.getType() : Type(),
      fwd(getInput()), dy, bias ? b.getUnitAttr() : UnitAttr());
  grads.push_back(op.getWeightGrad());
  if (bias)
    grads.push_back(op.getBiasGrad());
  return success();
}

//===----------------------------------------------------------------------===//
// nn.layernorm and nn.rmsnorm.
//===----------------------------------------------------------------------===//

SmallVector<unsigned> LayerNormOp::getParamOperandIndices() { return {1, 2}; }

LogicalResult LayerNormOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                              ValueRange resultGrads,
                                              SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] = LayerNormBwdInputOp::create(
        b, getLoc(), getInput().getType(), fwd(getInput()), fwd(getGamma()),
        dy, getEpsilonAttr());
  return success();
}

LogicalResult LayerNormOp::buildBackwardWeight(OpBuilder &b, FwdMap fwd,
                                               ValueRange resultGrads,
                                               SmallVectorImpl<Value> &grads) {
  Value dy = resultGrads[0];
  if (!dy)
    return emitOpError("needs its result gradient to build W");
  auto op = LayerNormBwdWeightOp::create(
      b, getLoc(), getGamma().getType(), getBeta().getType(), fwd(getInput()),
      dy, getEpsilonAttr());
  grads.push_back(op.getGammaGrad());
  grads.push_back(op.getBetaGrad());
  return success();
}

SmallVector<unsigned> RMSNormOp::getParamOperandIndices() { return {1}; }

LogicalResult RMSNormOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                            ValueRange resultGrads,
                                            SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] = RMSNormBwdInputOp::create(
        b, getLoc(), getInput().getType(), fwd(getInput()), fwd(getGamma()),
        dy, getEpsilonAttr());
  return success();
}

LogicalResult RMSNormOp::buildBackwardWeight(OpBuilder &b, FwdMap fwd,
                                             ValueRange resultGrads,
                                             SmallVectorImpl<Value> &grads) {
  Value dy = resultGrads[0];
  if (!dy)
    return emitOpError("needs its result gradient to build W");
  grads.push_back(RMSNormBwdWeightOp::create(b, getLoc(), getGamma().getType(),
                                             fwd(getInput()), dy,
                                             getEpsilonAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise ops: no parameters, so W is empty.
//===----------------------------------------------------------------------===//

/// W of an op without parameters: nothing to build.
#define NN_NO_PARAMS(OpTy)                                                     \
  SmallVector<unsigned> OpTy::getParamOperandIndices() { return {}; }          \
  LogicalResult OpTy::buildBackwardWeight(OpBuilder &, FwdMap, ValueRange,     \
                                          SmallVectorImpl<Value> &) {          \
    return success();                                                          \
  }

NN_NO_PARAMS(GeluOp)
NN_NO_PARAMS(SiluOp)
NN_NO_PARAMS(AddOp)
NN_NO_PARAMS(DropoutOp)
NN_NO_PARAMS(MulOp)
NN_NO_PARAMS(AttentionOp)
NN_NO_PARAMS(ConcatHeadsOp)
NN_NO_PARAMS(CrossEntropyOp)
NN_NO_PARAMS(TPCopyOp)
NN_NO_PARAMS(TPAllReduceOp)
NN_NO_PARAMS(TPAllGatherOp)
NN_NO_PARAMS(TPReduceScatterOp)
NN_NO_PARAMS(VocabParallelCrossEntropyOp)
#undef NN_NO_PARAMS

LogicalResult GeluOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                         ValueRange resultGrads,
                                         SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] =
        GeluBwdOp::create(b, getLoc(), getType(), fwd(getInput()), dy);
  return success();
}

LogicalResult SiluOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                         ValueRange resultGrads,
                                         SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] =
        SiluBwdOp::create(b, getLoc(), getType(), fwd(getInput()), dy);
  return success();
}

/// d(a + b) = dy for both operands: the gradient is passed through.
LogicalResult AddOp::buildBackwardInput(OpBuilder &, FwdMap,
                                        ValueRange resultGrads,
                                        SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  grads[base] = grads[base + 1] = resultGrads[0];
  return success();
}

/// Dropout is its own derivative: dx = dy * m / (1 - rate) with the same
/// mask, which the same rate and site draw again.
LogicalResult DropoutOp::buildBackwardInput(OpBuilder &b, FwdMap,
                                            ValueRange resultGrads,
                                            SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] = DropoutOp::create(b, getLoc(), dy, getRateAttr(),
                                    getSiteAttr());
  return success();
}

/// d(a * b) = (dy * b, dy * a).
LogicalResult MulOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                        ValueRange resultGrads,
                                        SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0]) {
    grads[base] = MulOp::create(b, getLoc(), dy, fwd(getRhs()));
    grads[base + 1] = MulOp::create(b, getLoc(), dy, fwd(getLhs()));
  }
  return success();
}

LogicalResult AttentionOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                              ValueRange resultGrads,
                                              SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  auto op = AttentionBwdOp::create(
      b, getLoc(), getQ().getType(), getK().getType(), getV().getType(),
      fwd(getQ()), fwd(getK()), fwd(getV()), dy, getNumHeadsAttr(),
      getNumKvHeadsAttr(), getRotaryAttr(), getRopeThetaAttr(),
      getDropoutAttr(), getDropoutSiteAttr(), getRopeDimAttr());
  grads[base] = op.getQGrad();
  grads[base + 1] = op.getKGrad();
  grads[base + 2] = op.getVGrad();
  return success();
}

/// The per-head split of the gradient (summed over the heads for a
/// broadcast rhs); reads no forward value.
LogicalResult ConcatHeadsOp::buildBackwardInput(OpBuilder &b, FwdMap,
                                                ValueRange resultGrads,
                                                SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  Value dy = resultGrads[0];
  if (!dy)
    return success();
  int64_t lhsHeadDim =
      getLhs().getType().getShape().back() / getNumHeads();
  auto op = ConcatHeadsBwdOp::create(
      b, getLoc(), getLhs().getType(), getRhs().getType(), dy,
      getNumHeadsAttr(), b.getI64IntegerAttr(lhsHeadDim), getBroadcastAttr());
  grads[base] = op.getLhsGrad();
  grads[base + 1] = op.getRhsGrad();
  return success();
}

/// dlogits = dloss (softmax - onehot) / tokens; targets have no gradient.
LogicalResult CrossEntropyOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                                 ValueRange resultGrads,
                                                 SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dloss = resultGrads[0])
    grads[base] = CrossEntropyBwdOp::create(b, getLoc(), getLogits().getType(),
                                            fwd(getLogits()),
                                            fwd(getTargets()), dloss);
  return success();
}

//===----------------------------------------------------------------------===//
// Tensor-parallel collectives: the backward of each is its dual, in B.
//===----------------------------------------------------------------------===//

/// f: the ranks' input gradients are partial; B sums them.
LogicalResult TPCopyOp::buildBackwardInput(OpBuilder &b, FwdMap,
                                           ValueRange resultGrads,
                                           SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] = TPAllReduceOp::create(b, getLoc(), dy, getTpAttr());
  return success();
}

/// g: every rank's output gradient is the whole gradient already.
LogicalResult TPAllReduceOp::buildBackwardInput(OpBuilder &, FwdMap,
                                                ValueRange resultGrads,
                                                SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  grads[base] = resultGrads[0];
  return success();
}

LogicalResult TPAllGatherOp::buildBackwardInput(OpBuilder &b, FwdMap,
                                                ValueRange resultGrads,
                                                SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] = TPReduceScatterOp::create(
        b, getLoc(), getInput().getType(), dy, getTpAttr(), getDimAttr());
  return success();
}

LogicalResult
TPReduceScatterOp::buildBackwardInput(OpBuilder &b, FwdMap,
                                      ValueRange resultGrads,
                                      SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] = TPAllGatherOp::create(b, getLoc(), getInput().getType(), dy,
                                        getTpAttr(), getDimAttr());
  return success();
}

/// This rank's shard of (softmax - onehot) dloss / tokens.
LogicalResult VocabParallelCrossEntropyOp::buildBackwardInput(
    OpBuilder &b, FwdMap fwd, ValueRange resultGrads,
    SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dloss = resultGrads[0])
    grads[base] = VocabParallelCrossEntropyBwdOp::create(
        b, getLoc(), getLogits().getType(), fwd(getLogits()),
        fwd(getTargets()), dloss, getTpAttr());
  return success();
}

//===----------------------------------------------------------------------===//
// nn.embedding: tokens are integers, so B is empty; W scatter-adds dy into
// the table (and the positions).
//===----------------------------------------------------------------------===//

SmallVector<unsigned> EmbeddingOp::getParamOperandIndices() {
  SmallVector<unsigned> idx{1};
  if (getPositions())
    idx.push_back(2);
  return idx;
}

LogicalResult EmbeddingOp::buildBackwardInput(OpBuilder &, FwdMap, ValueRange,
                                              SmallVectorImpl<Value> &grads) {
  appendNullGrads(*this, grads);
  return success();
}

LogicalResult EmbeddingOp::buildBackwardWeight(OpBuilder &b, FwdMap fwd,
                                               ValueRange resultGrads,
                                               SmallVectorImpl<Value> &grads) {
  Value dy = resultGrads[0];
  if (!dy)
    return emitOpError("needs its result gradient to build W");
  int64_t vocab = getTable().getType().getDimSize(0);
  if (ShapedType::isDynamic(vocab))
    return emitOpError("needs a static vocabulary size to build its weight "
                       "gradient");
  IntegerAttr maxPositions;
  Value pos = getPositions();
  if (pos) {
    int64_t n = cast<RankedTensorType>(pos.getType()).getDimSize(0);
    if (ShapedType::isDynamic(n))
      return emitOpError("needs a static number of positions to build its "
                         "weight gradient");
    maxPositions = b.getI64IntegerAttr(n);
  }
  auto op = EmbeddingBwdWeightOp::create(
      b, getLoc(), getTable().getType(), pos ? pos.getType() : Type(),
      fwd(getTokens()), dy, b.getI64IntegerAttr(vocab), maxPositions,
      getVocabShardsAttr());
  grads.push_back(op.getTableGrad());
  if (pos)
    grads.push_back(op.getPositionsGrad());
  return success();
}

//===----------------------------------------------------------------------===//
// nn.moe: B through the experts and the gates; W the router and experts.
//===----------------------------------------------------------------------===//

SmallVector<unsigned> MoEOp::getParamOperandIndices() {
  SmallVector<unsigned> idx{1, 2, 3};
  if (getW3())
    idx.push_back(4);
  return idx;
}

/// `fwd` of an optional operand: null stays null.
static Value fwdOrNull(FwdMap fwd, Value v) { return v ? fwd(v) : Value(); }

LogicalResult MoEOp::buildBackwardInput(OpBuilder &b, FwdMap fwd,
                                        ValueRange resultGrads,
                                        SmallVectorImpl<Value> &grads) {
  unsigned base = appendNullGrads(*this, grads);
  if (Value dy = resultGrads[0])
    grads[base] = MoEBwdInputOp::create(
        b, getLoc(), getInput().getType(), fwd(getInput()), fwd(getRouter()),
        fwd(getW1()), fwd(getW2()), fwdOrNull(fwd, getW3()), dy, getTopKAttr(),
        getCapacityFactorAttr(), getActivationAttr(), getScoringAttr(),
        getNormTopkProbAttr(), getRoutedScalingFactorAttr(), getNGroupAttr(),
        getTopkGroupAttr(), getBiasAttr());
  return success();
}

LogicalResult MoEOp::buildBackwardWeight(OpBuilder &b, FwdMap fwd,
                                         ValueRange resultGrads,
                                         SmallVectorImpl<Value> &grads) {
  Value dy = resultGrads[0];
  if (!dy)
    return emitOpError("needs its result gradient to build W");
  Value w3 = getW3();
  auto op = MoEBwdWeightOp::create(
      b, getLoc(), getRouter().getType(), getW1().getType(), getW2().getType(),
      w3 ? w3.getType() : Type(), fwd(getInput()), fwd(getRouter()),
      fwd(getW1()), fwd(getW2()), fwdOrNull(fwd, w3), dy, getTopKAttr(),
      getCapacityFactorAttr(), getActivationAttr(), getScoringAttr(),
      getNormTopkProbAttr(), getRoutedScalingFactorAttr(), getNGroupAttr(),
      getTopkGroupAttr(), getBiasAttr());
  grads.push_back(op.getRouterGrad());
  grads.push_back(op.getW1Grad());
  grads.push_back(op.getW2Grad());
  if (w3)
    grads.push_back(op.getW3Grad());
  return success();
}
