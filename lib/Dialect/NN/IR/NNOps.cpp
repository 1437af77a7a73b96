//===- NNOps.cpp - nn dialect op verifiers --------------------------------===//
//
// The shape rules of every op come from one table shared with the program
// validator (the contract's contract/include/pipeforge/rt/OpShapes.h): an op
// the verifier accepts lowers to a kernel the validator accepts, and the
// validator accepts no kernel the CPU kernels would overrun. What stays here
// is MLIR's own: element types beyond f32 / i32 and the result comparisons
// with dynamic extents, in the wording of the existing diagnostics.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/rt/OpShapes.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace pipeforge::nn;
namespace rt = pipeforge::rt;

/// Prints a shape as `[2, ?, 8]` for diagnostics.
static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::interleave(
      shape,
      [&](int64_t d) {
        s += ShapedType::isDynamic(d) ? "?" : std::to_string(d);
      },
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

//===----------------------------------------------------------------------===//
// The shared rules on MLIR types.
//===----------------------------------------------------------------------===//

/// `t` as the shared rules see it: f32 for any float element type and i32
/// for any integer one (the ODS constraints check the element types), a
/// dynamic extent as rt::kDynamicDim.
static rt::TensorType toRt(Type t) {
  auto rtt = cast<RankedTensorType>(t);
  rt::TensorType r;
  r.dtype =
      isa<IntegerType>(rtt.getElementType()) ? rt::DType::I32 : rt::DType::F32;
  for (int64_t d : rtt.getShape())
    r.shape.push_back(ShapedType::isDynamic(d) ? rt::kDynamicDim : d);
  return r;
}

/// The inverse for shapes: rt::kDynamicDim back to ShapedType::kDynamic.
static SmallVector<int64_t> fromRt(const std::vector<int64_t> &shape) {
  SmallVector<int64_t> r;
  for (int64_t d : shape)
    r.push_back(d == rt::kDynamicDim ? ShapedType::kDynamic : d);
  return r;
}

/// The op's attributes as the program file carries them (the conversion of
/// lib/Target/Program): absent ones take their ODS defaults in the rules.
static rt::AttrMap toRtAttrs(Operation *op) {
  rt::AttrMap m;
  for (NamedAttribute na : op->getAttrDictionary()) {
    StringRef name = na.getName().getValue();
    Attribute v = na.getValue();
    if (name.contains('.'))
      continue; // discardable (nn.layer, ...)
    if (auto b = dyn_cast<BoolAttr>(v))
      m[name.str()] = b.getValue();
    else if (isa<UnitAttr>(v))
      m[name.str()] = true;
    else if (auto i = dyn_cast<IntegerAttr>(v))
      m[name.str()] = int64_t(i.getValue().getSExtValue());
    else if (auto f = dyn_cast<FloatAttr>(v))
      m[name.str()] = f.getValueAsDouble();
    else if (auto str = dyn_cast<StringAttr>(v))
      m[name.str()] = str.getValue().str();
  }
  return m;
}

/// Runs the shared rules of `op` (OpShapes.h) and reports the first broken
/// one as the op's error; on success the derived result types, by result
/// slot of the op's table entry.
static FailureOr<rt::OpShapeResult> inferShared(Operation *op) {
  const rt::OpSpec *spec = rt::lookupOpSpec(op->getName().stripDialect());
  if (!spec)
    return op->emitOpError("has no entry in the shared op table (OpShapes.h)");
  std::vector<int> slotOf;
  if (std::string e =
          rt::mapSlots(spec->operands, op->getNumOperands(), slotOf);
      !e.empty())
    return op->emitOpError(e);
  std::vector<rt::TensorType> types;
  for (Value v : op->getOperands())
    types.push_back(toRt(v.getType()));
  rt::AttrMap attrs = toRtAttrs(op);
  rt::OpShapeInput in{{}, attrs};
  for (int at : slotOf)
    in.operands.push_back(at < 0 ? nullptr : &types[size_t(at)]);
  rt::OpShapeResult r = rt::inferOpShapes(*spec, in);
  if (!r)
    return op->emitOpError(r.error);
  return r;
}

/// Two extents agree when equal or when either is dynamic.
static bool dimsAgree(int64_t a, int64_t b) {
  return a == b || ShapedType::isDynamic(a) || ShapedType::isDynamic(b);
}
static bool shapesAgree(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  return a.size() == b.size() && llvm::all_of(llvm::zip(a, b), [](auto p) {
           return dimsAgree(std::get<0>(p), std::get<1>(p));
         });
}

/// The derived shape of result slot `slot` (which must be present).
static SmallVector<int64_t> sharedResultShape(const rt::OpShapeResult &r,
                                              size_t slot) {
  return fromRt(r.results[slot]->shape);
}

/// Gradient ops: everything from the shared rules; each result present
/// exactly when derived, with the derived shape.
static LogicalResult verifyShared(Operation *op) {
  FailureOr<rt::OpShapeResult> r = inferShared(op);
  if (failed(r))
    return failure();
  const rt::OpSpec &spec = *rt::lookupOpSpec(op->getName().stripDialect());
  std::vector<int> slotOf;
  if (std::string e = rt::mapSlots(spec.results, op->getNumResults(), slotOf);
      !e.empty())
    return op->emitOpError("results: ") << e;
  for (size_t s = 0; s < spec.results.size(); ++s) {
    const char *name = spec.results[s].name;
    const std::optional<rt::TensorType> &want = r->results[s];
    if (slotOf[s] < 0) {
      if (want)
        return op->emitOpError("expects a ") << name << " result";
      continue;
    }
    if (!want)
      return op->emitOpError("has a ")
             << name << " result that its operands and attributes do not "
             << "produce";
    auto got = cast<RankedTensorType>(op->getResult(slotOf[s]).getType());
    SmallVector<int64_t> shape = fromRt(want->shape);
    if (!shapesAgree(got.getShape(), shape))
      return op->emitOpError("result ")
             << name << " has shape " << rt::shapeString(toRt(got).shape)
             << ", expected " << rt::shapeString(want->shape);
  }
  return success();
}

#define PIPEFORGE_NN_SHARED_VERIFIER(OP)                                       \
  LogicalResult OP::verify() { return verifyShared(*this); }
PIPEFORGE_NN_SHARED_VERIFIER(LinearBwdInputOp)
PIPEFORGE_NN_SHARED_VERIFIER(LinearBwdWeightOp)
PIPEFORGE_NN_SHARED_VERIFIER(LayerNormBwdInputOp)
PIPEFORGE_NN_SHARED_VERIFIER(LayerNormBwdWeightOp)
PIPEFORGE_NN_SHARED_VERIFIER(RMSNormBwdInputOp)
PIPEFORGE_NN_SHARED_VERIFIER(RMSNormBwdWeightOp)
PIPEFORGE_NN_SHARED_VERIFIER(GeluBwdOp)
PIPEFORGE_NN_SHARED_VERIFIER(SiluBwdOp)
PIPEFORGE_NN_SHARED_VERIFIER(EmbeddingBwdWeightOp)
PIPEFORGE_NN_SHARED_VERIFIER(AttentionBwdOp)
PIPEFORGE_NN_SHARED_VERIFIER(ConcatHeadsBwdOp)
PIPEFORGE_NN_SHARED_VERIFIER(MoEBwdInputOp)
PIPEFORGE_NN_SHARED_VERIFIER(MoEBwdWeightOp)
PIPEFORGE_NN_SHARED_VERIFIER(CrossEntropyBwdOp)
PIPEFORGE_NN_SHARED_VERIFIER(VocabParallelCrossEntropyBwdOp)
PIPEFORGE_NN_SHARED_VERIFIER(TPAllGatherOp)
PIPEFORGE_NN_SHARED_VERIFIER(TPReduceScatterOp)
#undef PIPEFORGE_NN_SHARED_VERIFIER

//===----------------------------------------------------------------------===//
// Forward ops: the shared rules, then MLIR's element types and results.
//===----------------------------------------------------------------------===//

/// The result's shape against the shared rules' first result.
static LogicalResult verifySharedResultShape(Operation *op,
                                             const rt::OpShapeResult &r,
                                             RankedTensorType y) {
  SmallVector<int64_t> expected = sharedResultShape(r, 0);
  if (!shapesAgree(y.getShape(), expected))
    return op->emitOpError("result shape ")
           << shapeStr(y.getShape()) << " does not match expected "
           << shapeStr(expected);
  return success();
}

LogicalResult LinearOp::verify() {
  FailureOr<rt::OpShapeResult> r = inferShared(*this);
  if (failed(r))
    return failure();
  auto y = getResult().getType();
  if (failed(verifySharedResultShape(*this, *r, y)))
    return failure();
  SmallVector<Value> floats{getInput(), getWeight(), getResult()};
  if (Value b = getBias())
    floats.push_back(b);
  return checkSameElementType(*this, floats);
}

/// Norms, moe: the result is the input's type (shape from the shared rules).
static LogicalResult verifyResultIsInput(Operation *op,
                                         const rt::OpShapeResult &r,
                                         RankedTensorType x,
                                         RankedTensorType y) {
  if (!shapesAgree(y.getShape(), sharedResultShape(r, 0)) ||
      y.getElementType() != x.getElementType())
    return op->emitOpError("expects the result type to equal the input type");
  return success();
}

LogicalResult LayerNormOp::verify() {
  FailureOr<rt::OpShapeResult> r = inferShared(*this);
  if (failed(r) || failed(verifyResultIsInput(*this, *r, getInput().getType(),
                                              getResult().getType())))
    return failure();
  return checkSameElementType(*this, {getInput(), getGamma(), getBeta()});
}

/// The losses (nn.cross_entropy, nn.vocab_parallel_cross_entropy).
template <typename LossOp> static LogicalResult verifyLoss(LossOp op) {
  if (failed(inferShared(op)))
    return failure();
  if (op.getLoss().getType().getElementType() !=
      op.getLogits().getType().getElementType())
    return op.emitOpError("expects the loss element type to match the logits");
  return success();
}
/// The shared rule: rate in [0, 1), site >= 0 (the shape is the input's,
/// SameOperandsAndResultType).
LogicalResult DropoutOp::verify() { return inferShared(*this); }

LogicalResult CrossEntropyOp::verify() { return verifyLoss(*this); }
LogicalResult VocabParallelCrossEntropyOp::verify() {
  return verifyLoss(*this);
}

LogicalResult RMSNormOp::verify() {
  FailureOr<rt::OpShapeResult> r = inferShared(*this);
  if (failed(r) || failed(verifyResultIsInput(*this, *r, getInput().getType(),
                                              getResult().getType())))
    return failure();
  return checkSameElementType(*this, {getInput(), getGamma()});
}

LogicalResult EmbeddingOp::verify() {
  FailureOr<rt::OpShapeResult> r = inferShared(*this);
  if (failed(r))
    return failure();
  auto table = getTable().getType();
  auto y = getResult().getType();
  if (Value pos = getPositions())
    if (cast<RankedTensorType>(pos.getType()).getElementType() !=
        table.getElementType())
      return emitOpError("expects positions and table of one element type");
  if (failed(verifySharedResultShape(*this, *r, y)))
    return failure();
  if (y.getElementType() != table.getElementType())
    return emitOpError("expects the result element type to match the table");
  return success();
}

LogicalResult AttentionOp::verify() {
  FailureOr<rt::OpShapeResult> r = inferShared(*this);
  if (failed(r))
    return failure();
  auto q = getQ().getType();
  auto y = getResult().getType();
  SmallVector<int64_t> expected = sharedResultShape(*r, 0);
  if (!shapesAgree(y.getShape(), expected) ||
      y.getElementType() != q.getElementType())
    return emitOpError("expects the result shape ")
           << shapeStr(expected)
           << " (heads x the value head dimension) and the element type of q";
  return checkSameElementType(*this, {getQ(), getK(), getV()});
}

LogicalResult ConcatHeadsOp::verify() {
  FailureOr<rt::OpShapeResult> r = inferShared(*this);
  if (failed(r))
    return failure();
  auto y = getResult().getType();
  if (failed(verifySharedResultShape(*this, *r, y)))
    return failure();
  return checkSameElementType(*this, {getLhs(), getRhs(), getResult()});
}

LogicalResult MoEOp::verify() {
  FailureOr<rt::OpShapeResult> r = inferShared(*this);
  if (failed(r) || failed(verifyResultIsInput(*this, *r, getInput().getType(),
                                              getResult().getType())))
    return failure();
  SmallVector<Value> floats{getInput(), getRouter(), getW1(), getW2()};
  if (Value w3 = getW3())
    floats.push_back(w3);
  return checkSameElementType(*this, floats);
}

#define GET_OP_CLASSES
#include "pipeforge/Dialect/NN/IR/NNOps.cpp.inc"
