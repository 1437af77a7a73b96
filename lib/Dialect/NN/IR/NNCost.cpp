//===- NNCost.cpp - cost model of the nn ops ------------------------------===//
//
// CostOpInterface for every forward nn op: FLOPs of F, B and W, the
// activation bytes F stashes (Megatron-LM / Korthikanti et al. accounting),
// the bytes W still needs after B, and parameter bytes. Summed over a GPT
// layer this gives exactly the Zero Bubble paper's table:
//
//   F = sbh(24h + 4s), B = sbh(24h + 8s), W = 24sbh^2,
//   M_B = sb(34h + 5as) (2 bytes per element), M_W = 32sbh.
//
// docs/cost-model.md has the per-op derivation.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/NN/IR/NNStash.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace pipeforge::nn;

namespace {
/// The cost of one op, in elements: bytes are elements x bytesPerElement,
/// plus dropout masks at one byte per element.
struct OpCost {
  double forward = 0, backwardInput = 0, backwardWeight = 0;
  int64_t stashElements = 0;  // activations kept for the backward
  int64_t stashMaskBytes = 0; // dropout masks (1 byte per element)
  int64_t weightStashElements = 0;
  int64_t paramElements = 0;

  int64_t stashBytes(unsigned bpe) const {
    return stashElements * bpe + stashMaskBytes;
  }
  int64_t weightStashBytes(unsigned bpe) const {
    return weightStashElements * bpe;
  }
  int64_t paramBytes(unsigned bpe) const { return paramElements * bpe; }
};
} // namespace

/// Elements of a statically shaped tensor value; 0 when absent or dynamic
/// (the cost model does not guess sizes).
static int64_t numElements(Value v) {
  if (!v)
    return 0;
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape())
    return 0;
  return t.getNumElements();
}

/// Tokens of a `[..., features]` activation: all elements over the last
/// extent.
static int64_t numTokens(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  int64_t last = t.getRank() ? t.getShape().back() : 1;
  if (last <= 0 || ShapedType::isDynamic(last))
    return 0;
  return numElements(v) / last;
}

SmallVector<Value> pipeforge::nn::stashedOperands(Operation *op) {
  return TypeSwitch<Operation *, SmallVector<Value>>(op)
      .Case<LinearOp, LayerNormOp, RMSNormOp, GeluOp, SiluOp, MoEOp>(
          [](auto o) { return SmallVector<Value>{o.getInput()}; })
      .Case([](MulOp o) {
        return SmallVector<Value>{o.getLhs(), o.getRhs()};
      })
      .Case([](AttentionOp o) {
        return SmallVector<Value>{o.getQ(), o.getK(), o.getV()};
      })
      .Case([](CrossEntropyOp o) { return SmallVector<Value>{o.getLogits()}; })
      .Default([](Operation *) { return SmallVector<Value>{}; });
}

bool pipeforge::nn::isCheapToRecompute(Operation *op) {
  return isa<LayerNormOp, RMSNormOp, GeluOp, SiluOp, DropoutOp>(op);
}

/// A value is stored once however many ops read it in their backward (the
/// q, k and v projections share their input, as do SwiGLU's gate and up):
/// it is charged to its first stashing user in the block.
static bool ownsStash(Operation *op, Value v) {
  for (Operation *user : v.getUsers()) {
    if (user == op || user->getBlock() != op->getBlock() ||
        !user->isBeforeInBlock(op))
      continue;
    if (llvm::is_contained(stashedOperands(user), v))
      return false;
  }
  return true;
}

/// Elements of the distinct stashed operands `op` is charged for.
static int64_t ownedStashElements(Operation *op) {
  int64_t total = 0;
  llvm::SmallPtrSet<void *, 4> seen;
  for (Value v : stashedOperands(op))
    if (seen.insert(v.getAsOpaquePointer()).second && ownsStash(op, v))
      total += numElements(v);
  return total;
}

//===----------------------------------------------------------------------===//
// Per-op costs
//===----------------------------------------------------------------------===//

static OpCost computeCost(LinearOp op) {
  OpCost c;
  int64_t tokens = numTokens(op.getInput());
  auto w = op.getWeight().getType();
  double out = w.getDimSize(0), in = w.getDimSize(1);
  if (!w.hasStaticShape())
    out = in = 0;
  // y = x W^T, dx = dy W, dW = dy^T x: one [T, in] x [in, out] matmul each.
  c.forward = c.backwardInput = c.backwardWeight = 2.0 * tokens * in * out;
  c.stashElements = ownedStashElements(op);
  // W keeps the input (shared, charged once) and the output gradient.
  c.weightStashElements = c.stashElements + numElements(op.getResult());
  c.paramElements = numElements(op.getWeight()) + numElements(op.getBias());
  return c;
}

/// Normalisations: ~0 FLOPs, stash their input.
template <typename NormOp> static OpCost normCost(NormOp op) {
  OpCost c;
  c.stashElements = ownedStashElements(op);
  for (Value p : op->getOperands().drop_front())
    c.paramElements += numElements(p);
  return c;
}
static OpCost computeCost(LayerNormOp op) { return normCost(op); }
static OpCost computeCost(RMSNormOp op) { return normCost(op); }

/// Activations and the gating product: ~0 FLOPs, stash their inputs.
static OpCost computeCost(GeluOp op) {
  OpCost c;
  c.stashElements = ownedStashElements(op);
  return c;
}
static OpCost computeCost(SiluOp op) {
  OpCost c;
  c.stashElements = ownedStashElements(op);
  return c;
}
static OpCost computeCost(MulOp op) {
  OpCost c;
  c.stashElements = ownedStashElements(op);
  return c;
}

/// The residual add stashes nothing.
static OpCost computeCost(AddOp op) { return OpCost(); }

/// Dropout: the 1-byte mask a stored-mask implementation keeps for B
/// (Korthikanti et al.'s accounting). PipeForge's runtime draws the mask
/// again from its counter-based key instead, so it holds none: the model
/// stays an upper bound (docs/cost-model.md).
static OpCost computeCost(DropoutOp op) {
  OpCost c;
  if (op.getRate().convertToDouble() > 0.0)
    c.stashMaskBytes = numElements(op.getResult());
  return c;
}

/// The softmax of the logits is recomputed from the stashed logits.
static OpCost computeCost(CrossEntropyOp op) {
  OpCost c;
  c.stashElements = ownedStashElements(op);
  return c;
}

/// A gather; its weight gradient is a scatter-add (counted as 0 FLOPs).
static OpCost computeCost(EmbeddingOp op) {
  OpCost c;
  c.paramElements = numElements(op.getTable()) + numElements(op.getPositions());
  return c;
}

/// Attention core. FLOPs count the full (non-causal) score matrix, as the
/// Zero Bubble paper does: QK^T and PV are 2bs^2(ad) each in F, twice that
/// in B. Stash: Q, K, V, the softmax output and, with dropout, the mask
/// (1 byte) and the dropped-out probabilities.
static OpCost computeCost(AttentionOp op) {
  OpCost c;
  auto q = op.getQ().getType();
  auto y = op.getResult().getType();
  if (!q.hasStaticShape() || !y.hasStaticShape())
    return c;
  // QK^T over the q/k head dimension d, PV over the value head dimension
  // dv (MLA: d != dv): 2bs^2(ad) + 2bs^2(a dv).
  double b = q.getDimSize(0), s = q.getDimSize(1), ad = q.getDimSize(2),
         adv = y.getDimSize(2);
  c.forward = 2.0 * b * s * s * (ad + adv);
  c.backwardInput = 2.0 * c.forward;
  int64_t scores =
      q.getDimSize(0) * op.getNumHeads() * q.getDimSize(1) * q.getDimSize(1);
  c.stashElements = ownedStashElements(op) + scores;
  if (op.getDropout().convertToDouble() > 0.0) {
    c.stashElements += scores;
    c.stashMaskBytes = scores;
  }
  return c;
}

/// A copy: no FLOPs, nothing stashed (B only splits the gradient).
static OpCost computeCost(ConcatHeadsOp) { return {}; }

/// Mixture of experts: the router, then top_k expert MLPs per token
/// (capacity limits ignored: an upper bound). Stash: the input, the router
/// probabilities and, per routed token, the expert MLP's intermediates as
/// the equivalent dense ops would (gelu: act input and output; SwiGLU: gate,
/// up, act and product).
static OpCost computeCost(MoEOp op) {
  OpCost c;
  int64_t tokens = numTokens(op.getInput());
  auto w1 = op.getW1().getType();
  if (!w1.hasStaticShape())
    return c;
  double e = op.getNumExperts(), f = w1.getDimSize(1), h = w1.getDimSize(2);
  double k = op.getTopK();
  bool gated = static_cast<bool>(op.getW3());
  double matmuls = gated ? 3 : 2;
  double flops = 2.0 * tokens * h * e + k * tokens * matmuls * 2.0 * h * f;
  c.forward = c.backwardInput = c.backwardWeight = flops;
  int64_t routed = op.getTopK() * tokens, ffn = w1.getDimSize(1),
          hidden = w1.getDimSize(2), experts = op.getNumExperts();
  int64_t input = ownedStashElements(op);
  c.stashElements = input + tokens * experts + routed * ffn * (gated ? 4 : 2);
  // Each matmul keeps its input and its output gradient for W.
  c.weightStashElements =
      input + tokens * experts +
      routed * ((hidden + ffn) * (gated ? 2 : 1) + ffn + hidden);
  c.paramElements = numElements(op.getRouter()) + numElements(op.getW1()) +
                    numElements(op.getW2()) + numElements(op.getW3());
  return c;
}

/// Tensor-parallel collectives compute nothing and keep nothing (the
/// backward of each is a collective of the gradient); their time is
/// communication (CommOpInterface below).
static OpCost computeCost(TPCopyOp) { return {}; }
static OpCost computeCost(TPAllReduceOp) { return {}; }
static OpCost computeCost(TPAllGatherOp) { return {}; }
static OpCost computeCost(TPReduceScatterOp) { return {}; }
/// As nn.cross_entropy, on this rank's vocabulary shard.
static OpCost computeCost(VocabParallelCrossEntropyOp op) {
  OpCost c;
  c.stashElements = ownedStashElements(op);
  return c;
}

//===----------------------------------------------------------------------===//
// Interface methods
//===----------------------------------------------------------------------===//

#define NN_DEFINE_COST_METHODS(OP)                                             \
  double OP::getForwardFlops() { return computeCost(*this).forward; }          \
  double OP::getBackwardInputFlops() {                                         \
    return computeCost(*this).backwardInput;                                   \
  }                                                                            \
  double OP::getBackwardWeightFlops() {                                        \
    return computeCost(*this).backwardWeight;                                  \
  }                                                                            \
  int64_t OP::getStashBytes(unsigned bytesPerElement) {                        \
    return computeCost(*this).stashBytes(bytesPerElement);                     \
  }                                                                            \
  int64_t OP::getWeightStashBytes(unsigned bytesPerElement) {                  \
    return computeCost(*this).weightStashBytes(bytesPerElement);               \
  }                                                                            \
  int64_t OP::getParamBytes(unsigned bytesPerElement) {                        \
    return computeCost(*this).paramBytes(bytesPerElement);                     \
  }

NN_DEFINE_COST_METHODS(LinearOp)
NN_DEFINE_COST_METHODS(LayerNormOp)
NN_DEFINE_COST_METHODS(RMSNormOp)
NN_DEFINE_COST_METHODS(GeluOp)
NN_DEFINE_COST_METHODS(SiluOp)
NN_DEFINE_COST_METHODS(MulOp)
NN_DEFINE_COST_METHODS(AddOp)
NN_DEFINE_COST_METHODS(DropoutOp)
NN_DEFINE_COST_METHODS(CrossEntropyOp)
NN_DEFINE_COST_METHODS(EmbeddingOp)
NN_DEFINE_COST_METHODS(AttentionOp)
NN_DEFINE_COST_METHODS(ConcatHeadsOp)
NN_DEFINE_COST_METHODS(MoEOp)
NN_DEFINE_COST_METHODS(TPCopyOp)
NN_DEFINE_COST_METHODS(TPAllReduceOp)
NN_DEFINE_COST_METHODS(TPAllGatherOp)
NN_DEFINE_COST_METHODS(TPReduceScatterOp)
NN_DEFINE_COST_METHODS(VocabParallelCrossEntropyOp)

#undef NN_DEFINE_COST_METHODS

//===----------------------------------------------------------------------===//
// Communication of the tensor-parallel ops (ring volumes per rank)
//===----------------------------------------------------------------------===//

/// Bytes one rank sends in a ring all-reduce of `n` elements over `t`
/// ranks: 2 (t-1)/t n elements.
static int64_t allReduceBytes(int64_t n, int64_t t, unsigned bpe) {
  return t > 1 ? 2 * (t - 1) * n / t * int64_t(bpe) : 0;
}
/// Bytes one rank sends in a ring all-gather (or reduce-scatter) whose whole
/// tensor has `n` elements: (t-1)/t n elements.
static int64_t gatherBytes(int64_t n, int64_t t, unsigned bpe) {
  return t > 1 ? (t - 1) * n / t * int64_t(bpe) : 0;
}

int64_t TPCopyOp::getForwardCommBytes(unsigned) { return 0; }
int64_t TPCopyOp::getBackwardCommBytes(unsigned bpe) {
  return allReduceBytes(numElements(getInput()), getTp(), bpe);
}
int64_t TPCopyOp::getGroupSize() { return getTp(); }

int64_t TPAllReduceOp::getForwardCommBytes(unsigned bpe) {
  return allReduceBytes(numElements(getInput()), getTp(), bpe);
}
int64_t TPAllReduceOp::getBackwardCommBytes(unsigned) { return 0; }
int64_t TPAllReduceOp::getGroupSize() { return getTp(); }

int64_t TPAllGatherOp::getForwardCommBytes(unsigned bpe) {
  return gatherBytes(numElements(getResult()), getTp(), bpe);
}
int64_t TPAllGatherOp::getBackwardCommBytes(unsigned bpe) {
  return gatherBytes(numElements(getResult()), getTp(), bpe);
}
int64_t TPAllGatherOp::getGroupSize() { return getTp(); }

int64_t TPReduceScatterOp::getForwardCommBytes(unsigned bpe) {
  return gatherBytes(numElements(getInput()), getTp(), bpe);
}
int64_t TPReduceScatterOp::getBackwardCommBytes(unsigned bpe) {
  return gatherBytes(numElements(getInput()), getTp(), bpe);
}
int64_t TPReduceScatterOp::getGroupSize() { return getTp(); }

/// Per token: the max, then the sum of exponentials and the target logit
/// (F); B all-reduces the max and the sum again.
int64_t VocabParallelCrossEntropyOp::getForwardCommBytes(unsigned bpe) {
  return allReduceBytes(3 * numTokens(getLogits()), getTp(), bpe);
}
int64_t VocabParallelCrossEntropyOp::getBackwardCommBytes(unsigned bpe) {
  return allReduceBytes(2 * numTokens(getLogits()), getTp(), bpe);
}
int64_t VocabParallelCrossEntropyOp::getGroupSize() { return getTp(); }

/// A gradient op: what it sends when it runs is its "forward".
int64_t VocabParallelCrossEntropyBwdOp::getForwardCommBytes(unsigned bpe) {
  return allReduceBytes(2 * numTokens(getLogits()), getTp(), bpe);
}
int64_t VocabParallelCrossEntropyBwdOp::getBackwardCommBytes(unsigned) {
  return 0;
}
int64_t VocabParallelCrossEntropyBwdOp::getGroupSize() { return getTp(); }
