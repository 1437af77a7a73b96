//===- NNOps.cpp - nn dialect op verifiers --------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNOps.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace pipeforge::nn;

/// Two extents agree when equal or when either is dynamic.
static bool dimsAgree(int64_t a, int64_t b) {
  return a == b || ShapedType::isDynamic(a) || ShapedType::isDynamic(b);
}

/// Prints a shape as `[2, ?, 8]` for diagnostics.
static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::interleave(
      shape,
      [&](int64_t d) { s += ShapedType::isDynamic(d) ? "?" : std::to_string(d); },
      [&] { s += ", "; });
  return s + "]";
}

static LogicalResult checkSameElementType(Operation *op, ValueRange values) {
  Type elt = cast<RankedTensorType>(values.front().getType()).getElementType();
  for (Value v : values.drop_front())
    if (cast<RankedTensorType>(v.getType()).getElementType() != elt)
      return op->emitOpError("expects all float operands and the result to "
                             "have element type ")
             << elt;
  return success();
}

LogicalResult LinearOp::verify() {
  auto x = getInput().getType();
  auto w = getWeight().getType();
  auto y = getResult().getType();
  if (x.getRank() < 1)
    return emitOpError("expects input of rank >= 1");
  if (w.getRank() != 2)
    return emitOpError("expects weight of rank 2 ([out, in]), got rank ")
           << w.getRank();
  int64_t in = x.getShape().back(), out = w.getDimSize(0);
  if (!dimsAgree(in, w.getDimSize(1)))
    return emitOpError("input features ")
           << in << " do not match weight " << shapeStr(w.getShape())
           << " ([out, in])";
  SmallVector<Value> floats{getInput(), getWeight(), getResult()};
  if (Value b = getBias()) {
    auto bt = cast<RankedTensorType>(b.getType());
    if (bt.getRank() != 1 || !dimsAgree(bt.getDimSize(0), out))
      return emitOpError("expects bias of shape [")
             << out << "], got " << shapeStr(bt.getShape());
    floats.push_back(b);
  }
  SmallVector<int64_t> expected(x.getShape().drop_back());
  expected.push_back(out);
  if (y.getRank() != x.getRank() ||
      !llvm::all_of(llvm::zip(expected, y.getShape()), [](auto p) {
        return dimsAgree(std::get<0>(p), std::get<1>(p));
      }))
    return emitOpError("result shape ")
           << shapeStr(y.getShape()) << " does not match expected "
           << shapeStr(expected);
  return checkSameElementType(*this, floats);
}

LogicalResult LayerNormOp::verify() {
  auto x = getInput().getType();
  if (x.getRank() < 1)
    return emitOpError("expects input of rank >= 1");
  int64_t d = x.getShape().back();
  for (auto [name, v] : {std::pair<StringRef, Value>{"gamma", getGamma()},
                         {"beta", getBeta()}}) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() != 1 || !dimsAgree(t.getDimSize(0), d))
      return emitOpError("expects ")
             << name << " of shape [" << d << "], got " << shapeStr(t.getShape());
  }
  if (getResult().getType() != x)
    return emitOpError("expects the result type to equal the input type");
  if (!(getEpsilon().convertToFloat() > 0.0f))
    return emitOpError("expects epsilon > 0");
  return checkSameElementType(*this, {getInput(), getGamma(), getBeta()});
}

LogicalResult CrossEntropyOp::verify() {
  auto logits = getLogits().getType();
  auto targets = getTargets().getType();
  if (logits.getRank() != 2)
    return emitOpError("expects logits of rank 2 ([tokens, vocab]), got rank ")
           << logits.getRank();
  if (targets.getRank() != 1)
    return emitOpError("expects targets of rank 1 ([tokens]), got rank ")
           << targets.getRank();
  if (!dimsAgree(logits.getDimSize(0), targets.getDimSize(0)))
    return emitOpError("has ")
           << logits.getDimSize(0) << " logit rows but "
           << targets.getDimSize(0) << " targets";
  if (getLoss().getType().getElementType() != logits.getElementType())
    return emitOpError("expects the loss element type to match the logits");
  return success();
}

#define GET_OP_CLASSES
#include "pipeforge/Dialect/NN/IR/NNOps.cpp.inc"
