//===- PPDialect.cpp - The pp dialect -------------------------------------===//

#include "pipeforge/Dialect/PP/IR/PPDialect.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Support/AttrNames.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

#include "pipeforge/Dialect/PP/IR/PPOpsDialect.cpp.inc"

void PPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "pipeforge/Dialect/PP/IR/PPOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Roles
//===----------------------------------------------------------------------===//

bool pp::isArgumentRole(Role r) {
  switch (r) {
  case Role::act_in:
  case Role::data:
  case Role::tokens:
  case Role::targets:
  case Role::param:
  case Role::grad_in:
  case Role::loss_seed:
  case Role::stash:
  case Role::wstash:
    return true;
  default:
    return false;
  }
}

bool pp::isResultRole(Role r) {
  switch (r) {
  case Role::stash:
  case Role::wstash:
  case Role::act_out:
  case Role::loss:
  case Role::grad_out:
  case Role::param_grad:
    return true;
  default:
    return false;
  }
}

std::optional<Role> pp::getArgRole(FunctionOpInterface fn, unsigned i) {
  auto s = fn.getArgAttrOfType<StringAttr>(i, attrs::kPPRole);
  return s ? symbolizeRole(s.getValue()) : std::nullopt;
}

std::optional<Role> pp::getResultRole(FunctionOpInterface fn, unsigned i) {
  auto s = fn.getResultAttrOfType<StringAttr>(i, attrs::kPPRole);
  return s ? symbolizeRole(s.getValue()) : std::nullopt;
}

StringAttr pp::getRoleAttr(MLIRContext *ctx, Role r) {
  return StringAttr::get(ctx, stringifyRole(r));
}

//===----------------------------------------------------------------------===//
// Attribute verifiers
//===----------------------------------------------------------------------===//

namespace {
/// Checks `pp.role = "<r>"` on argument or result `i` of `op`.
LogicalResult verifyRole(Operation *op, bool result, unsigned i,
                         Attribute value) {
  const char *what = result ? "result" : "argument";
  auto s = dyn_cast<StringAttr>(value);
  if (!s)
    return op->emitOpError()
           << what << " " << i << ": pp.role must be a string, got " << value;
  bool (*allowed)(Role) = result ? isResultRole : isArgumentRole;
  std::optional<Role> r = symbolizeRole(s.getValue());
  if (r && allowed(*r))
    return success();
  std::string names;
  for (uint32_t k = 0; k <= getMaxEnumValForRole(); ++k)
    if (auto c = symbolizeRole(k); c && allowed(*c))
      names += (names.empty() ? "" : ", ") + stringifyRole(*c).str();
  return op->emitOpError()
         << what << " " << i << ": "
         << (r ? "pp.role '" + s.getValue().str() + "' is not a" +
                     (result ? " result" : "n argument") + " role"
               : "unknown pp.role '" + s.getValue().str() + "'")
         << " (expected one of: " << names << ")";
}

/// `pp.buffers` of the function around `op` (itself, or its parent).
DenseI64ArrayAttr buffersOf(Operation *op) {
  auto fn = isa<FunctionOpInterface>(op)
                ? op
                : op->getParentOfType<FunctionOpInterface>();
  return fn ? fn->getAttrOfType<DenseI64ArrayAttr>(attrs::kPPBuffers)
            : DenseI64ArrayAttr();
}

LogicalResult verifyBufferIds(Operation *op, Twine what,
                              ArrayRef<int64_t> ids) {
  DenseI64ArrayAttr bufs = buffersOf(op);
  for (int64_t b : ids)
    if (b < 0 || (bufs && b >= int64_t(bufs.size())))
      return op->emitOpError()
             << what << ": pp.buffer " << b << " out of range"
             << (bufs ? " (the function has " + std::to_string(bufs.size()) +
                            " buffers)"
                      : std::string());
  return success();
}

/// `pp.buffers` on a function: every argument and every op of its body is
/// annotated.
LogicalResult verifyBuffers(Operation *op, Attribute value) {
  auto bytes = dyn_cast<DenseI64ArrayAttr>(value);
  if (!bytes)
    return op->emitOpError() << "pp.buffers must be an array<i64> of byte "
                                "sizes, got "
                             << value;
  for (int64_t n : bytes.asArrayRef())
    if (n < 0)
      return op->emitOpError() << "pp.buffers: negative byte size " << n;
  auto fn = dyn_cast<FunctionOpInterface>(op);
  if (!fn || fn.isExternal())
    return op->emitOpError() << "pp.buffers belongs on a function with a body";
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (!fn.getArgAttr(i, attrs::kPPBuffer))
      return op->emitOpError() << "argument " << i
                               << " has no pp.buffer (rerun "
                                  "--pp-assign-buffers)";
  for (Block &b : fn.getFunctionBody())
    for (Operation &o : b.without_terminator())
      if (o.getNumResults() && !o.hasAttr(attrs::kPPBuffer))
        return o.emitOpError() << "has no pp.buffer, but its function has "
                                  "pp.buffers (rerun --pp-assign-buffers)";
  return success();
}

/// `pp.component_ranges` on a function: [{kind = "attn"|"mlp", layer,
/// begin, end}], ordered and disjoint, over the ops of its body.
LogicalResult verifyComponentRanges(Operation *op, Attribute value) {
  auto fn = dyn_cast<FunctionOpInterface>(op);
  auto list = dyn_cast<ArrayAttr>(value);
  if (!fn || fn.isExternal() || !list)
    return op->emitOpError() << "pp.component_ranges must be an array on a "
                                "function with a body";
  int64_t kernels = 0;
  for (Block &b : fn.getFunctionBody())
    kernels += int64_t(b.getOperations().size()) - 1;
  int64_t prevEnd = 0;
  for (auto [k, a] : llvm::enumerate(list)) {
    auto d = dyn_cast<DictionaryAttr>(a);
    auto kind = d ? d.getAs<StringAttr>("kind") : StringAttr();
    auto layer = d ? d.getAs<IntegerAttr>("layer") : IntegerAttr();
    auto begin = d ? d.getAs<IntegerAttr>("begin") : IntegerAttr();
    auto end = d ? d.getAs<IntegerAttr>("end") : IntegerAttr();
    if (!kind || !layer || !begin || !end || d.size() != 4)
      return op->emitOpError()
             << "pp.component_ranges[" << k
             << "] must be {kind, layer, begin, end}, got " << a;
    if (kind.getValue() != "attn" && kind.getValue() != "mlp")
      return op->emitOpError() << "pp.component_ranges[" << k << "]: kind '"
                               << kind.getValue() << "' (expected attn or mlp)";
    if (layer.getInt() < 0 || layer.getInt() > INT32_MAX ||
        begin.getInt() < prevEnd || end.getInt() <= begin.getInt() ||
        end.getInt() > kernels)
      return op->emitOpError()
             << "pp.component_ranges[" << k << "]: layer " << layer.getInt()
             << ", kernels [" << begin.getInt() << ", " << end.getInt()
             << ") (ranges are ordered, disjoint, non-empty and within the "
             << kernels << " ops of the body)";
    prevEnd = end.getInt();
  }
  return success();
}
} // namespace

LogicalResult PPDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == attrs::kPPBuffers)
    return verifyBuffers(op, attr.getValue());
  if (name == attrs::kPPComponentRanges)
    return verifyComponentRanges(op, attr.getValue());
  if (name == attrs::kPPBuffer) {
    auto ids = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!ids || ids.size() != int64_t(op->getNumResults()))
      return op->emitOpError()
             << "pp.buffer must be an array<i64> with one buffer per result ("
             << op->getNumResults() << "), got " << attr.getValue();
    return verifyBufferIds(op, "result", ids.asArrayRef());
  }
  if (name == attrs::kPPRole)
    return op->emitOpError() << "pp.role belongs on a function's arguments "
                                "and results, not on an op";
  return success();
}

LogicalResult PPDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                  unsigned argIndex,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == attrs::kPPRole)
    return verifyRole(op, /*result=*/false, argIndex, attr.getValue());
  if (name == attrs::kPPBuffer) {
    auto id = dyn_cast<IntegerAttr>(attr.getValue());
    if (!id)
      return op->emitOpError()
             << "argument " << argIndex
             << ": pp.buffer must be an integer, got " << attr.getValue();
    return verifyBufferIds(op, "argument " + Twine(argIndex), {id.getInt()});
  }
  return success();
}

LogicalResult PPDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                     unsigned resultIndex,
                                                     NamedAttribute attr) {
  if (attr.getName().getValue() == attrs::kPPRole)
    return verifyRole(op, /*result=*/true, resultIndex, attr.getValue());
  return success();
}
