//===- PPDialect.cpp - The pp dialect -------------------------------------===//

#include "pipeforge/Dialect/PP/IR/PPDialect.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"

using namespace mlir;
using namespace pipeforge::pp;

#include "pipeforge/Dialect/PP/IR/PPOpsDialect.cpp.inc"

void PPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "pipeforge/Dialect/PP/IR/PPOps.cpp.inc"
      >();
}
