//===- CompilePass.cpp - pp-compile: the compile flow as one pass ---------===//
//
//   pipeforge-opt model.mlir --pp-compile="schedule=auto ranks=2"
//
// The plan and pipeline phases of compile() on the module the pass runs on:
// the options are resolved, the auto placement is chosen on this module's
// costs (a remark names it), the model is checked to have the layers, and
// the pipeline phase runs as a dynamic pipeline. So pipeforge-opt and
// pipeforge-compile agree under every option, `placement=any` included.
// The options are forEachCompileOption's pipeline options.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Pipelines/CompilePipeline.h"

#include "pipeforge/Dialect/Dialects.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

#include <type_traits>

using namespace mlir;

namespace pipeforge::pipelines {

namespace {
template <typename T> struct PassOptionFor {
  using type = Pass::Option<T>;
};
template <> struct PassOptionFor<std::vector<int64_t>> {
  using type = Pass::ListOption<int64_t>;
};

bool isPipelineOption(const OptionInfo &info) {
  return info.phase == OptionPhase::Pipeline;
}

struct CompilePass
    : public PassWrapper<CompilePass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(CompilePass)

  CompilePass() { declareOptions(); }
  // The options are members made at run time: a copy declares its own (the
  // pass manager then copies their values, Pass::clone).
  CompilePass(const CompilePass &other) : PassWrapper(other) {
    declareOptions();
  }

  StringRef getArgument() const final { return "pp-compile"; }
  StringRef getDescription() const final {
    return "The whole compile flow from nn IR to the schedule-level module "
           "(what pipeforge-compile runs before it lowers)";
  }
  void getDependentDialects(DialectRegistry &registry) const final {
    registerPipeForgeDialects(registry);
  }

  void runOnOperation() final {
    ModuleOp module = getOperation();
    CompileOptions o = options();
    Status s = planCompile(module, o, [&](StringRef note) {
      emitRemark(module.getLoc()) << "pp-compile: " << note;
    });
    if (!s) {
      emitError(module.getLoc()) << "pp-compile: " << s.message();
      return signalPassFailure();
    }
    OpPassManager pm(ModuleOp::getOperationName());
    buildCompilePipeline(pm, o);
    if (failed(runPipeline(pm, module)))
      signalPassFailure();
  }

private:
  void declareOptions() {
    CompileOptions defaults;
    forEachCompileOption(defaults, [&](const OptionInfo &info, auto &field) {
      if (!isPipelineOption(info))
        return;
      using T = std::decay_t<decltype(field)>;
      llvm::cl::desc help(info.help);
      if constexpr (std::is_same_v<T, std::vector<int64_t>>)
        declared.push_back(std::make_unique<ListOption<int64_t>>(
            *this, info.name, help));
      else
        declared.push_back(std::make_unique<Option<T>>(
            *this, info.name, help, llvm::cl::init(field)));
    });
  }

  /// The options' current values as CompileOptions.
  CompileOptions options() const {
    CompileOptions o;
    readCompileOptions<PassOptionFor>(o, declared, isPipelineOption);
    return o;
  }

  std::vector<std::unique_ptr<llvm::cl::Option>> declared;
};
} // namespace

void registerCompilePass() { PassRegistration<CompilePass>(); }

} // namespace pipeforge::pipelines
