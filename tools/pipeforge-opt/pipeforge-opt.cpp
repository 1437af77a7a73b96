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
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Pipelines/CompilePipeline.h"
#include "pipeforge/Support/OutputFile.h"
#include "pipeforge/Target/Program/Prepare.h"

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
  pipeforge::target::registerProgramPreparePasses();
  pipeforge::pipelines::registerCompilePipeline();
  // MlirOptMain(argc, argv, ...) keeps its output stream's write error
  // until the destructor aborts ("LLVM ERROR: IO failure"): run its steps
  // here and check the output (pipeforge/Support/OutputFile.h).
  llvm::InitLLVM init(argc, argv);
  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "PipeForge optimizer driver\n", registry);
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
  std::string error;
  auto input = mlir::openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << "pipeforge-opt: error: " << error << "\n";
    return 1;
  }
  auto output = mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << "pipeforge-opt: error: " << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry,
                                     config))) {
    // Not kept: the partial file goes; a write error is not reported twice.
    output->os().clear_error();
    return 1;
  }
  if (auto err = pipeforge::finishOutput(*output)) {
    llvm::errs() << "pipeforge-opt: error: " << *err << "\n";
    return 1;
  }
  return 0;
}
