//===- CostSum.cpp - Sums of the nn cost model ----------------------------===//

#include "pipeforge/Dialect/NN/Analysis/CostSum.h"

#include "pipeforge/Support/AttrNames.h"

#include "mlir/IR/BuiltinTypes.h"

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

llvm::Expected<LayerCosts> collectLayerCosts(func::FuncOp func,
                                             unsigned bytesPerElement) {
  auto layerOf = [](Operation *op) {
    return op->getAttrOfType<IntegerAttr>(attrs::kNNLayer);
  };
  std::map<int64_t, size_t> index;
  Operation *untagged = nullptr;
  func.walk([&](Operation *op) {
    if (auto a = layerOf(op))
      index.emplace(a.getInt(), 0);
    else if (isa<CostOpInterface>(op) && !untagged)
      untagged = op;
  });
  if (untagged)
    return llvm::createStringError("an '" +
                                   untagged->getName().getStringRef().str() +
                                   "' op has no nn.layer attribute");
  if (index.empty())
    return llvm::createStringError("@" + func.getSymName().str() +
                                   " has no ops with an nn.layer attribute");

  LayerCosts lc;
  for (auto &[id, i] : index) {
    i = lc.ids.size();
    lc.ids.push_back(id);
  }
  lc.layers.resize(lc.ids.size());
  lc.crossingBytes.assign(lc.ids.size(), 0);
  func.walk([&](Operation *op) {
    auto a = layerOf(op);
    if (!a)
      return;
    size_t li = index[a.getInt()];
    if (auto cost = dyn_cast<CostOpInterface>(op))
      lc.layers[li].add(cost, bytesPerElement);
    for (Value res : op->getResults()) {
      size_t last = li;
      for (Operation *user : res.getUsers())
        if (auto ua = layerOf(user))
          last = std::max(last, index[ua.getInt()]);
      double bytes = valueBytes(res, bytesPerElement);
      for (size_t c = li; c < last; ++c)
        lc.crossingBytes[c] += bytes;
    }
  });
  return lc;
}

} // namespace pipeforge::nn
