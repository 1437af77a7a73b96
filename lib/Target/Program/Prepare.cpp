//===- Prepare.cpp - Program preparation: buffers, component ranges -------===//
//
// See Prepare.h. The passes --pp-assign-buffers and --pp-component-ranges
// write what the lowering would compute; the lowering reads it back.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Target/Program/Prepare.h"
#include "pipeforge/Target/Program/ProgramLowering.h"

#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Support/AttrNames.h"
#include "pipeforge/Support/Numeric.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>

namespace pipeforge::target {
#define GEN_PASS_DEF_PPASSIGNBUFFERS
#define GEN_PASS_DEF_PPCOMPONENTRANGES
#include "pipeforge/Target/Program/Passes.h.inc"
} // namespace pipeforge::target

using namespace mlir;

namespace pipeforge::target {

std::optional<rt::FunctionKind> stageFunctionKind(StringRef name) {
  for (int k = 0; k < 4; ++k)
    if (name == kStageFunctionNames[k])
      return rt::FunctionKind(k);
  return std::nullopt;
}

FailureOr<rt::TensorType> lowerTensorType(Type t, Operation *where) {
  auto rt = dyn_cast<RankedTensorType>(t);
  if (!rt || !rt.hasStaticShape()) {
    where->emitError() << "cannot lower type " << t
                       << " to the program file (static tensors only)";
    return failure();
  }
  rt::TensorType out;
  Type e = rt.getElementType();
  if (e.isF32())
    out.dtype = rt::DType::F32;
  else if (e.isSignlessInteger() || e.isSignedInteger())
    out.dtype = rt::DType::I32;
  else {
    where->emitError() << "cannot lower element type " << e
                       << " to the program file (f32 or integers)";
    return failure();
  }
  out.shape.assign(rt.getShape().begin(), rt.getShape().end());
  // The program file's limits (Support/Numeric.h): checked here, before any
  // size arithmetic, so that an oversized model is an error at the op.
  std::string why = checkTensorShape(out.shape, 4);
  if (!why.empty()) {
    where->emitError() << "cannot lower type " << t << ": " << why;
    return failure();
  }
  return out;
}

std::string kernelName(Operation &op) {
  StringRef name = op.getName().getStringRef();
  if (name.consume_front("nn."))
    return name.str();
  if (isa<arith::ConstantOp>(op))
    return "zeros";
  return name.str();
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

namespace {
/// The values of a function in program order, with where each is defined
/// and last read (positions as in computeBufferPlan's comment).
struct Liveness {
  std::vector<Value> values;
  std::vector<Operation *> where; ///< for diagnostics
  std::vector<int32_t> def, lastUse;
};

Liveness computeLiveness(func::FuncOp fn) {
  Liveness l;
  llvm::DenseMap<Value, int32_t> ids;
  auto add = [&](Value v, int32_t pos, Operation *where) {
    ids[v] = int32_t(l.values.size());
    l.values.push_back(v);
    l.where.push_back(where);
    l.def.push_back(pos);
    l.lastUse.push_back(pos);
  };
  auto use = [&](Value v, int32_t pos) {
    auto it = ids.find(v);
    if (it != ids.end())
      l.lastUse[it->second] = std::max(l.lastUse[it->second], pos);
  };
  Block &body = fn.getBody().front();
  for (BlockArgument a : body.getArguments())
    add(a, 0, fn);
  int32_t pos = 0;
  for (Operation &op : body.without_terminator()) {
    ++pos;
    for (Value v : op.getOperands())
      use(v, pos);
    for (Value r : op.getResults())
      add(r, pos, &op);
  }
  const int32_t end = pos + 1;
  for (Value v : body.getTerminator()->getOperands())
    use(v, end);
  // Arguments are bound to storage outside the function: never reused.
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    l.lastUse[i] = end;
  return l;
}
} // namespace

FailureOr<BufferPlan> computeBufferPlan(func::FuncOp fn) {
  Liveness l = computeLiveness(fn);
  rt::Function f;
  for (size_t v = 0; v < l.values.size(); ++v) {
    auto ty = lowerTensorType(l.values[v].getType(), l.where[v]);
    if (failed(ty))
      return failure();
    f.values.push_back(*ty);
  }
  assignBuffers(f, l.def, l.lastUse);
  return BufferPlan{std::move(f.buffer), std::move(f.bufferBytes)};
}

FailureOr<std::optional<BufferPlan>> readBufferPlan(func::FuncOp fn) {
  auto bytes = fn->getAttrOfType<DenseI64ArrayAttr>(attrs::kPPBuffers);
  if (!bytes)
    return std::optional<BufferPlan>();
  BufferPlan plan;
  plan.bytes.assign(bytes.asArrayRef().begin(), bytes.asArrayRef().end());
  Liveness l = computeLiveness(fn);
  Block &body = fn.getBody().front();
  auto bad = [&](size_t v) {
    return l.where[v]->emitError()
           << (v < body.getNumArguments() ? "argument " : "value ") << v
           << ": ";
  };
  // The buffer of each value, in program order.
  for (unsigned i = 0; i < body.getNumArguments(); ++i) {
    auto id = fn.getArgAttrOfType<IntegerAttr>(i, attrs::kPPBuffer);
    if (!id)
      return bad(i) << "no pp.buffer (rerun --pp-assign-buffers)", failure();
    plan.buffer.push_back(int32_t(id.getInt()));
  }
  for (Operation &op : body.without_terminator()) {
    if (!op.getNumResults())
      continue;
    auto ids = op.getAttrOfType<DenseI64ArrayAttr>(attrs::kPPBuffer);
    if (!ids || ids.size() != int64_t(op.getNumResults()))
      return bad(plan.buffer.size())
                 << "no pp.buffer per result (rerun --pp-assign-buffers)",
             failure();
    for (int64_t b : ids.asArrayRef())
      plan.buffer.push_back(int32_t(b));
  }
  // Each value fits its buffer exactly, and no two values live at once
  // share one.
  std::vector<std::vector<size_t>> users(plan.bytes.size());
  for (size_t v = 0; v < l.values.size(); ++v) {
    int32_t b = plan.buffer[v];
    if (b < 0 || size_t(b) >= plan.bytes.size())
      return bad(v) << "pp.buffer " << b << " out of range", failure();
    auto ty = lowerTensorType(l.values[v].getType(), l.where[v]);
    if (failed(ty))
      return failure();
    if (ty->numBytes() != plan.bytes[b])
      return bad(v) << ty->numBytes() << " bytes in buffer " << b << " of "
                    << plan.bytes[b] << " bytes",
             failure();
    users[b].push_back(v);
  }
  for (size_t b = 0; b < users.size(); ++b) {
    std::vector<size_t> &u = users[b];
    std::stable_sort(u.begin(), u.end(),
                     [&](size_t x, size_t y) { return l.def[x] < l.def[y]; });
    for (size_t k = 1; k < u.size(); ++k)
      if (l.lastUse[u[k - 1]] >= l.def[u[k]])
        return bad(u[k]) << "shares buffer " << b << " with value " << u[k - 1]
                         << ", which is still live",
               failure();
  }
  return std::optional<BufferPlan>(std::move(plan));
}

void annotateBufferPlan(func::FuncOp fn, const BufferPlan &plan) {
  Builder b(fn.getContext());
  fn->setAttr(attrs::kPPBuffers, b.getDenseI64ArrayAttr(plan.bytes));
  Block &body = fn.getBody().front();
  size_t v = 0;
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    fn.setArgAttr(i, attrs::kPPBuffer, b.getI64IntegerAttr(plan.buffer[v++]));
  for (Operation &op : body.without_terminator()) {
    if (!op.getNumResults()) {
      op.removeAttr(attrs::kPPBuffer);
      continue;
    }
    SmallVector<int64_t> ids;
    for (unsigned r = 0; r < op.getNumResults(); ++r)
      ids.push_back(plan.buffer[v++]);
    op.setAttr(attrs::kPPBuffer, b.getDenseI64ArrayAttr(ids));
  }
}

//===----------------------------------------------------------------------===//
// Component ranges
//===----------------------------------------------------------------------===//

bool hasComponentTags(Operation *root) {
  return root
      ->walk([&](Operation *op) {
        return op->hasAttr(attrs::kPPComponent) ? WalkResult::interrupt()
                                                : WalkResult::advance();
      })
      .wasInterrupted();
}

namespace {
std::optional<std::pair<std::string, int32_t>> componentOf(Operation &op) {
  auto c = op.getAttrOfType<StringAttr>(attrs::kPPComponent);
  auto l = op.getAttrOfType<IntegerAttr>(attrs::kPPLayer);
  if (!c || !l || l.getInt() < 0 || l.getInt() > INT32_MAX)
    return std::nullopt;
  StringRef kind = c.getValue();
  if (kind == "attn")
    return std::make_pair(std::string("attn"), int32_t(l.getInt()));
  if (kind == "mlp" || kind == "dispatch" || kind == "combine")
    return std::make_pair(std::string("mlp"), int32_t(l.getInt()));
  return std::nullopt;
}
} // namespace

std::vector<rt::ComponentRange> computeComponentRanges(func::FuncOp fn,
                                                       rt::FunctionKind kind) {
  std::vector<std::optional<std::pair<std::string, int32_t>>> tags;
  std::vector<Operation *> ops;
  for (Operation &op : fn.getBody().front().without_terminator()) {
    tags.push_back(componentOf(op));
    ops.push_back(&op);
  }
  if (tags.empty())
    return {};
  size_t untagged = llvm::count(tags, std::nullopt);
  if (untagged) {
    fn.emitWarning() << untagged << " of " << tags.size()
                     << " kernels carry no pp.component / pp.layer "
                        "(--pp-split-components): @"
                     << fn.getSymName() << " of this stage gets no components";
    return {};
  }
  std::vector<rt::ComponentRange> ranges;
  for (size_t i = 0; i < tags.size(); ++i) {
    const auto &[k, l] = *tags[i];
    if (!ranges.empty() && ranges.back().kind == k &&
        ranges.back().layer == l) {
      ranges.back().end = int32_t(i + 1);
      continue;
    }
    if (!ranges.empty()) {
      int32_t prev = ranges.back().layer;
      bool fwd = kind == rt::FunctionKind::Forward;
      if (fwd ? l < prev : l > prev) {
        fn.emitWarning() << "kernel " << i << " (" << kernelName(*ops[i])
                         << ") of layer " << l << " follows layer " << prev
                         << ": @" << fn.getSymName()
                         << " of this stage gets no components";
        return {};
      }
    }
    ranges.push_back({k, l, int32_t(i), int32_t(i + 1)});
  }
  return ranges;
}

std::optional<std::vector<rt::ComponentRange>>
readComponentRanges(func::FuncOp fn) {
  auto list = fn->getAttrOfType<ArrayAttr>(attrs::kPPComponentRanges);
  if (!list)
    return std::nullopt;
  std::vector<rt::ComponentRange> ranges;
  for (Attribute a : list) {
    auto d = cast<DictionaryAttr>(a); // the dialect verifier checked the form
    ranges.push_back({d.getAs<StringAttr>("kind").getValue().str(),
                      int32_t(d.getAs<IntegerAttr>("layer").getInt()),
                      int32_t(d.getAs<IntegerAttr>("begin").getInt()),
                      int32_t(d.getAs<IntegerAttr>("end").getInt())});
  }
  return ranges;
}

void annotateComponentRanges(func::FuncOp fn,
                             ArrayRef<rt::ComponentRange> ranges) {
  Builder b(fn.getContext());
  SmallVector<Attribute> list;
  for (const rt::ComponentRange &r : ranges)
    list.push_back(b.getDictionaryAttr({
        b.getNamedAttr("kind", b.getStringAttr(r.kind)),
        b.getNamedAttr("layer", b.getI64IntegerAttr(r.layer)),
        b.getNamedAttr("begin", b.getI64IntegerAttr(r.begin)),
        b.getNamedAttr("end", b.getI64IntegerAttr(r.end)),
    }));
  fn->setAttr(attrs::kPPComponentRanges, b.getArrayAttr(list));
}

//===----------------------------------------------------------------------===//
// Passes
//===----------------------------------------------------------------------===//

namespace {
/// Calls `f(fn, kind)` for each of the four functions of every pp.stage.
template <typename F> bool forEachStageFunction(ModuleOp m, F f) {
  bool ok = true;
  m.walk([&](pp::StageOp st) {
    for (const char *name : kStageFunctionNames)
      if (auto fn = st.lookupSymbol<func::FuncOp>(name))
        if (!fn.isExternal())
          ok &= succeeded(f(fn, *stageFunctionKind(name)));
  });
  return ok;
}

struct AssignBuffersPass : public impl::PPAssignBuffersBase<AssignBuffersPass> {
  void runOnOperation() override {
    bool ok = forEachStageFunction(getOperation(),
                                   [](func::FuncOp fn, rt::FunctionKind) {
                                     auto plan = computeBufferPlan(fn);
                                     if (failed(plan))
                                       return failure();
                                     annotateBufferPlan(fn, *plan);
                                     return success();
                                   });
    if (!ok)
      signalPassFailure();
  }
};

struct ComponentRangesPass
    : public impl::PPComponentRangesBase<ComponentRangesPass> {
  void runOnOperation() override {
    if (!hasComponentTags(getOperation())) {
      markAllAnalysesPreserved();
      return;
    }
    forEachStageFunction(
        getOperation(), [](func::FuncOp fn, rt::FunctionKind kind) {
          annotateComponentRanges(fn, computeComponentRanges(fn, kind));
          return success();
        });
  }
};
} // namespace

} // namespace pipeforge::target
