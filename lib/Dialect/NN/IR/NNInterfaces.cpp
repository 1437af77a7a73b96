//===- NNInterfaces.cpp - cost model and backward rules -------------------===//

#include "pipeforge/Dialect/NN/IR/NNInterfaces.h"

#include "pipeforge/Dialect/NN/IR/NNInterfaces.cpp.inc"
