//===- NNDialect.cpp - The nn dialect -------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Support/AttrNames.h"
#include "pipeforge/rt/Program.h"

using namespace mlir;
using namespace pipeforge::nn;

#include "pipeforge/Dialect/NN/IR/NNOpsDialect.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "pipeforge/Dialect/NN/IR/NNOps.cpp.inc"
      >();
}

LogicalResult NNDialect::verifyRegionArgAttribute(Operation *op,
                                                  unsigned regionIndex,
                                                  unsigned argIndex,
                                                  NamedAttribute attr) {
  if (attr.getName() == pipeforge::attrs::kNNTied) {
    // The target is another parameter of the model: after partitioning it
    // may live in another stage's function, so only its form is checked
    // here (the lowering checks that it exists with the same type).
    auto to = dyn_cast<StringAttr>(attr.getValue());
    auto fn = dyn_cast<FunctionOpInterface>(op);
    StringAttr self = fn ? fn.getArgAttrOfType<StringAttr>(
                               argIndex, pipeforge::attrs::kNNName)
                         : StringAttr();
    if (!to || to.getValue().empty())
      return op->emitOpError()
             << "argument #" << argIndex << ": '" << pipeforge::attrs::kNNTied
             << "' must name a parameter, got " << attr.getValue();
    if (self && self == to)
      return op->emitOpError() << "argument #" << argIndex << ": parameter '"
                               << to.getValue() << "' is tied to itself";
    return success();
  }
  if (attr.getName() != pipeforge::attrs::kNNInit)
    return success();
  auto spec = dyn_cast<StringAttr>(attr.getValue());
  if (spec && pipeforge::rt::isValidInitSpec(spec.str()))
    return success();
  return op->emitOpError() << "argument #" << argIndex << ": '"
                           << pipeforge::attrs::kNNInit << "' must be one of "
                           << pipeforge::rt::kInitSpecForms << ", got "
                           << attr.getValue();
}
