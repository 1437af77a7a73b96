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
