//===- pipeforge-opt.cpp - The PipeForge optimizer driver -----------------===//
//
// mlir-opt for PipeForge: the nn and pp dialects, func/arith/tensor, and
// every pass the project defines (registered one by one: no InitAll*).
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Pipelines/CompilePipeline.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<pipeforge::nn::NNDialect, pipeforge::pp::PPDialect,
                  mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::tensor::TensorDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  pipeforge::pp::registerPPPasses();
  pipeforge::nn::registerNNPasses();
  pipeforge::pipelines::registerCompilePipeline();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "PipeForge optimizer driver\n", registry));
}
