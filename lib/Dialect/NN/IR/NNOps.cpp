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
  if (logits.getRank() < 2)
    return emitOpError("expects logits of rank >= 2 ([..., vocab]), got rank ")
           << logits.getRank();
  ArrayRef<int64_t> lead = logits.getShape().drop_back();
  if (targets.getRank() != (int64_t)lead.size() ||
      !llvm::all_of(llvm::zip(lead, targets.getShape()), [](auto p) {
        return dimsAgree(std::get<0>(p), std::get<1>(p));
      }))
    return emitOpError("targets ")
           << shapeStr(targets.getShape()) << " do not match the logits' "
           << "leading shape " << shapeStr(lead);
  if (getLoss().getType().getElementType() != logits.getElementType())
    return emitOpError("expects the loss element type to match the logits");
  return success();
}

LogicalResult RMSNormOp::verify() {
  auto x = getInput().getType();
  if (x.getRank() < 1)
    return emitOpError("expects input of rank >= 1");
  auto g = getGamma().getType();
  if (g.getRank() != 1 || !dimsAgree(g.getDimSize(0), x.getShape().back()))
    return emitOpError("expects gamma of shape [")
           << x.getShape().back() << "], got " << shapeStr(g.getShape());
  if (getResult().getType() != x)
    return emitOpError("expects the result type to equal the input type");
  if (!(getEpsilon().convertToFloat() > 0.0f))
    return emitOpError("expects epsilon > 0");
  return checkSameElementType(*this, {getInput(), getGamma()});
}

LogicalResult EmbeddingOp::verify() {
  auto tok = getTokens().getType();
  auto table = getTable().getType();
  auto y = getResult().getType();
  if (tok.getRank() != 2)
    return emitOpError("expects tokens of rank 2 ([batch, seq]), got rank ")
           << tok.getRank();
  if (table.getRank() != 2)
    return emitOpError("expects a table of rank 2 ([vocab, hidden]), got rank ")
           << table.getRank();
  int64_t h = table.getDimSize(1);
  SmallVector<int64_t> expected{tok.getDimSize(0), tok.getDimSize(1), h};
  if (Value pos = getPositions()) {
    auto pt = cast<RankedTensorType>(pos.getType());
    if (pt.getRank() != 2 || !dimsAgree(pt.getDimSize(1), h))
      return emitOpError("expects positions of shape [max_positions, ")
             << h << "], got " << shapeStr(pt.getShape());
    if (!ShapedType::isDynamic(pt.getDimSize(0)) &&
        !ShapedType::isDynamic(tok.getDimSize(1)) &&
        pt.getDimSize(0) < tok.getDimSize(1))
      return emitOpError("has ")
             << pt.getDimSize(0) << " positions for sequences of length "
             << tok.getDimSize(1);
    if (pt.getElementType() != table.getElementType())
      return emitOpError("expects positions and table of one element type");
  }
  if (y.getRank() != 3 ||
      !llvm::all_of(llvm::zip(expected, y.getShape()), [](auto p) {
        return dimsAgree(std::get<0>(p), std::get<1>(p));
      }))
    return emitOpError("result shape ")
           << shapeStr(y.getShape()) << " does not match expected "
           << shapeStr(expected);
  if (y.getElementType() != table.getElementType())
    return emitOpError("expects the result element type to match the table");
  return success();
}

LogicalResult AttentionOp::verify() {
  auto q = getQ().getType(), k = getK().getType(), v = getV().getType();
  for (auto [name, t] : {std::pair<StringRef, RankedTensorType>{"q", q},
                         {"k", k},
                         {"v", v}})
    if (t.getRank() != 3)
      return emitOpError("expects ")
             << name << " of rank 3 ([batch, seq, heads x head_dim]), got rank "
             << t.getRank();
  int64_t a = getNumHeads(), kv = getNumKvHeads();
  if (a % kv != 0)
    return emitOpError("num_heads ")
           << a << " is not a multiple of num_kv_heads " << kv;
  int64_t qw = q.getDimSize(2);
  if (ShapedType::isDynamic(qw))
    return emitOpError("expects a static feature dimension on q");
  if (qw % a != 0)
    return emitOpError("q features ")
           << qw << " are not divisible by num_heads " << a;
  int64_t d = qw / a;
  if (getRotary() && d % 2 != 0)
    return emitOpError("rotary embedding needs an even head dimension, got ")
           << d;
  SmallVector<int64_t> kvShape{q.getDimSize(0), q.getDimSize(1), kv * d};
  for (auto [name, t] : {std::pair<StringRef, RankedTensorType>{"k", k},
                         {"v", v}})
    if (!llvm::all_of(llvm::zip(kvShape, t.getShape()), [](auto p) {
          return dimsAgree(std::get<0>(p), std::get<1>(p));
        }))
      return emitOpError("expects ")
             << name << " of shape " << shapeStr(kvShape) << " ("
             << kv << " kv heads of dimension " << d << "), got "
             << shapeStr(t.getShape());
  if (getResult().getType() != q)
    return emitOpError("expects the result type to equal the type of q");
  float p = getDropout().convertToFloat();
  if (!(p >= 0.0f && p < 1.0f))
    return emitOpError("expects dropout in [0, 1), got ") << p;
  return checkSameElementType(*this, {getQ(), getK(), getV()});
}

LogicalResult MoEOp::verify() {
  auto x = getInput().getType();
  auto r = getRouter().getType();
  auto w1 = getW1().getType(), w2 = getW2().getType();
  if (x.getRank() < 1)
    return emitOpError("expects input of rank >= 1");
  int64_t h = x.getShape().back();
  if (r.getRank() != 2 || !dimsAgree(r.getDimSize(1), h))
    return emitOpError("expects router of shape [experts, ")
           << h << "], got " << shapeStr(r.getShape());
  int64_t e = r.getDimSize(0);
  if (w1.getRank() != 3 || !dimsAgree(w1.getDimSize(0), e) ||
      !dimsAgree(w1.getDimSize(2), h))
    return emitOpError("expects w1 of shape [")
           << e << ", ffn, " << h << "], got " << shapeStr(w1.getShape());
  int64_t f = w1.getDimSize(1);
  SmallVector<int64_t> w2Shape{e, h, f};
  if (w2.getRank() != 3 ||
      !llvm::all_of(llvm::zip(w2Shape, w2.getShape()), [](auto p) {
        return dimsAgree(std::get<0>(p), std::get<1>(p));
      }))
    return emitOpError("expects w2 of shape ")
           << shapeStr(w2Shape) << ", got " << shapeStr(w2.getShape());
  SmallVector<Value> floats{getInput(), getRouter(), getW1(), getW2()};
  if (Value w3 = getW3()) {
    auto t = cast<RankedTensorType>(w3.getType());
    if (t.getShape() != w1.getShape())
      return emitOpError("expects w3 of the shape of w1 ")
             << shapeStr(w1.getShape()) << ", got " << shapeStr(t.getShape());
    floats.push_back(w3);
  }
  if (!ShapedType::isDynamic(e) && getTopK() > e)
    return emitOpError("top_k ") << getTopK() << " exceeds the " << e
                                 << " experts";
  if (getCapacityFactor().convertToFloat() < 0.0f)
    return emitOpError("expects capacity_factor >= 0");
  if (getActivation() != "gelu" && getActivation() != "silu")
    return emitOpError("activation must be \"gelu\" or \"silu\", got \"")
           << getActivation() << "\"";
  if (getResult().getType() != x)
    return emitOpError("expects the result type to equal the input type");
  return checkSameElementType(*this, floats);
}

#define GET_OP_CLASSES
#include "pipeforge/Dialect/NN/IR/NNOps.cpp.inc"
