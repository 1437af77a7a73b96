//===- NNDialect.cpp - The nn dialect -------------------------------------===//

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace pipeforge::nn;

#include "pipeforge/Dialect/NN/IR/NNOpsDialect.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "pipeforge/Dialect/NN/IR/NNOps.cpp.inc"
      >();
}
