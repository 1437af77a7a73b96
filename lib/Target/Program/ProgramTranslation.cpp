//===- ProgramTranslation.cpp - --pp-to-program for pipeforge-translate ---===//
//
// The lowering as mlir-translate style translations (docs/compile.md):
//
//   pipeforge-translate --pp-to-program sched.mlir -o prog.pfp
//   pipeforge-translate --pp-to-program-dump sched.mlir
//
// The input is a schedule-level module (after pp-schedule and
// pp-insert-comm, e.g. the output of `pipeforge-opt --pp-compile=...`). The
// run's data- and expert-parallel degrees and the initialisation seed are
// options, as pipeforge-compile's --dp, --ep and --seed. The result is
// validated before it is written.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Target/Program/ProgramLowering.h"

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"

using namespace mlir;

namespace pipeforge::target {

namespace {
struct TranslationOptions {
  llvm::cl::opt<int> dp{"pp-program-dp",
                        llvm::cl::desc("--pp-to-program: data-parallel "
                                       "replicas recorded in the program"),
                        llvm::cl::init(1)};
  llvm::cl::opt<int> ep{"pp-program-ep",
                        llvm::cl::desc("--pp-to-program: expert-parallel "
                                       "group size (must divide every moe "
                                       "layer's experts)"),
                        llvm::cl::init(1)};
  llvm::cl::opt<uint64_t> seed{"pp-program-seed",
                               llvm::cl::desc("--pp-to-program: the "
                                              "initialisation seed"),
                               llvm::cl::init(1234)};
};

FailureOr<rt::Program> lowerWithOptions(ModuleOp module,
                                        const TranslationOptions &o) {
  if (o.dp < 1 || o.ep < 1)
    return module.emitError() << "--pp-program-dp and --pp-program-ep must "
                                 "be at least 1",
           failure();
  LowerOptions lo;
  lo.model.name = "model";
  lo.training.dataParallel = o.dp;
  lo.training.expertParallel = o.ep;
  lo.training.seed = o.seed;
  auto prog = lowerToProgram(module, lo);
  if (failed(prog))
    return failure();
  if (sched::Status st = rt::validateProgram(*prog); !st)
    return module.emitError() << "the lowered program is invalid: "
                              << st.message(),
           failure();
  return prog;
}

void registerDialects(DialectRegistry &registry) {
  registry.insert<nn::NNDialect, pp::PPDialect, func::FuncDialect,
                  arith::ArithDialect, tensor::TensorDialect>();
}
} // namespace

void registerToProgramTranslation() {
  static TranslationOptions *options = new TranslationOptions();
  // Lowers, then writes what `emit` makes of the program.
  auto translate = [](std::string (*emit)(const rt::Program &)) {
    return [emit](ModuleOp module, raw_ostream &os) -> LogicalResult {
      auto prog = lowerWithOptions(module, *options);
      if (failed(prog))
        return failure();
      os << emit(*prog);
      return success();
    };
  };
  static TranslateFromMLIRRegistration toProgram(
      "pp-to-program",
      "lower a schedule-level pp module to a program file (binary)",
      translate(rt::serializeProgram), registerDialects);
  static TranslateFromMLIRRegistration toProgramDump(
      "pp-to-program-dump",
      "lower a schedule-level pp module to a program and print its listing",
      translate(rt::dumpProgram), registerDialects);
}

} // namespace pipeforge::target
