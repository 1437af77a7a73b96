//===- CostSum.cpp - Sums of the nn cost model ----------------------------===//

#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/NN/IR/NNStash.h"

#include "pipeforge/Support/AttrNames.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>
#include <map>

using namespace mlir;

namespace pipeforge::nn {

void CostSum::add(CostOpInterface op, unsigned bytesPerElement) {
  forward += op.getForwardFlops();
  backwardInput += op.getBackwardInputFlops();
  backwardWeight += op.getBackwardWeightFlops();
  stash += op.getStashBytes(bytesPerElement);
  weightStash += op.getWeightStashBytes(bytesPerElement);
  params += op.getParamBytes(bytesPerElement);
  paramElements += op.getParamBytes(1);
  if (auto comm = dyn_cast<CommOpInterface>(op.getOperation())) {
    forwardComm += comm.getForwardCommBytes(bytesPerElement);
    backwardComm += comm.getBackwardCommBytes(bytesPerElement);
  }
  ++ops;
}

void CostSum::add(const CostSum &o) {
  forward += o.forward;
  backwardInput += o.backwardInput;
  backwardWeight += o.backwardWeight;
  stash += o.stash;
  weightStash += o.weightStash;
  params += o.params;
  paramElements += o.paramElements;
  forwardComm += o.forwardComm;
  backwardComm += o.backwardComm;
  ops += o.ops;
}

CostSum sumCosts(Operation *root, unsigned bytesPerElement) {
  CostSum sum;
  root->walk([&](CostOpInterface op) { sum.add(op, bytesPerElement); });
  return sum;
}

double sumFlops(Operation *root) {
  // Summed per kind as CostSum does, so the bits are flops()'s.
  double forward = 0, backwardInput = 0, backwardWeight = 0;
  root->walk([&](CostOpInterface op) {
    forward += op.getForwardFlops();
    backwardInput += op.getBackwardInputFlops();
    backwardWeight += op.getBackwardWeightFlops();
  });
  return forward + backwardInput + backwardWeight;
}

/// Bytes of a statically shaped tensor value (floats at `bpe` bytes).
static double valueBytes(Value v, unsigned bpe) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape())
    return 0;
  double elems = static_cast<double>(t.getNumElements());
  Type e = t.getElementType();
  if (isa<FloatType>(e))
    return elems * bpe;
  return elems * std::max<unsigned>(1, e.getIntOrFloatBitWidth() / 8);
}

std::optional<int64_t> layerOf(Operation *op) {
  if (auto a = op->getAttrOfType<IntegerAttr>(attrs::kNNLayer))
    return a.getInt();
  return std::nullopt;
}

LayerIndex LayerIndex::of(Operation *root) {
  LayerIndex index;
  root->walk([&](Operation *op) {
    if (auto id = layerOf(op))
      index.position_.emplace(*id, 0);
  });
  for (auto &[id, i] : index.position_) {
    i = index.ids_.size();
    index.ids_.push_back(id);
  }
  return index;
}

std::optional<size_t> LayerIndex::position(int64_t id) const {
  auto it = position_.find(id);
  if (it == position_.end())
    return std::nullopt;
  return it->second;
}

std::optional<size_t> LayerIndex::positionOf(Operation *op) const {
  if (auto id = layerOf(op))
    return position(*id);
  return std::nullopt;
}

CostsByLayer sumCostsByLayer(Operation *root, unsigned bytesPerElement) {
  CostsByLayer out;
  out.index = LayerIndex::of(root);
  out.layers.resize(out.index.size());
  root->walk([&](CostOpInterface op) {
    if (auto li = out.index.positionOf(op))
      out.layers[*li].add(op, bytesPerElement);
    else
      out.untagged.add(op, bytesPerElement);
  });
  return out;
}

llvm::Expected<LayerCosts> collectLayerCosts(func::FuncOp func,
                                             unsigned bytesPerElement) {
  Operation *untagged = nullptr;
  func.walk([&](Operation *op) {
    if (!layerOf(op) && isa<CostOpInterface>(op) && !untagged)
      untagged = op;
  });
  if (untagged)
    return llvm::createStringError("an '" +
                                   untagged->getName().getStringRef().str() +
                                   "' op has no nn.layer attribute");
  LayerCosts lc;
  lc.index = LayerIndex::of(func);
  if (lc.index.empty())
    return llvm::createStringError("@" + func.getSymName().str() +
                                   " has no ops with an nn.layer attribute");
  const LayerIndex &index = lc.index;
  lc.ids = index.ids();
  lc.layers.resize(lc.ids.size());
  lc.crossingBytes.assign(lc.ids.size(), 0);
  func.walk([&](Operation *op) {
    auto at = index.positionOf(op);
    if (!at)
      return;
    size_t li = *at;
    if (auto cost = dyn_cast<CostOpInterface>(op))
      lc.layers[li].add(cost, bytesPerElement);
    for (Value res : op->getResults()) {
      size_t last = li;
      for (Operation *user : res.getUsers())
        if (auto ul = index.positionOf(user))
          last = std::max(last, *ul);
      double bytes = valueBytes(res, bytesPerElement);
      for (size_t c = li; c < last; ++c)
        lc.crossingBytes[c] += bytes;
    }
  });
  // What only the cost model keeps: the attention's stash beyond q, k and v
  // (which it owns: only the attention stashes them), a dropout's mask.
  lc.unkeptBytes.assign(lc.ids.size(), 0);
  func.walk([&](Operation *op) {
    auto at = index.positionOf(op);
    if (!at || !isa<AttentionOp, DropoutOp>(op))
      return;
    double bytes = double(cast<CostOpInterface>(op).getStashBytes(
        bytesPerElement));
    if (auto att = dyn_cast<AttentionOp>(op)) {
      llvm::SmallPtrSet<Value, 3> qkv(llvm::from_range,
                                      stashedOperands(att));
      for (Value v : qkv)
        bytes -= valueBytes(v, bytesPerElement);
    }
    lc.unkeptBytes[*at] += std::max(0.0, bytes);
  });

  // Selective recomputation: a cheap op's stashed output whose inputs are
  // stashed too (or are arguments: parameters, tokens) is dropped and redone
  // in B. It is charged to the layer the cost model charged it to, that of
  // its first stashing user.
  lc.selectiveBytes.assign(lc.ids.size(), 0);
  llvm::DenseSet<Value> stashed;
  func.walk([&](CostOpInterface op) {
    for (Value v : stashedOperands(op))
      stashed.insert(v);
  });
  func.walk([&](Operation *op) {
    if (!isCheapToRecompute(op) || op->getNumResults() != 1 ||
        !stashed.contains(op->getResult(0)))
      return;
    if (!llvm::all_of(op->getOperands(), [&](Value o) {
          return isa<BlockArgument>(o) || stashed.contains(o);
        }))
      return;
    Value r = op->getResult(0);
    Operation *owner = nullptr;
    for (Operation *user : r.getUsers())
      if (llvm::is_contained(stashedOperands(user), r) &&
          (!owner || (user->getBlock() == owner->getBlock() &&
                      user->isBeforeInBlock(owner))))
        owner = user;
    if (auto at = owner ? index.positionOf(owner) : std::nullopt)
      lc.selectiveBytes[*at] += valueBytes(r, bytesPerElement);
  });
  return lc;
}

} // namespace pipeforge::nn
