//===- Compile.cpp - compile(): the phases from an input file to a program ===//
//
// load -> plan -> pipeline -> lower (CompilePipeline.h). pipeforge-compile
// is option parsing around compile(); the fuzzers and the tests stop it
// after a phase.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Pipelines/CompilePipeline.h"

#include "pipeforge/Import/ModelLoader.h"
#include "pipeforge/Target/Program/ProgramLowering.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Path.h"

using namespace mlir;

namespace pipeforge::pipelines {

FailureOr<rt::Program> lowerCompiled(ModuleOp module,
                                     const CompileOptions &o) {
  target::LowerOptions lo;
  lo.model.name = o.modelName;
  lo.training.dataParallel = o.dp;
  lo.training.expertParallel = o.ep;
  lo.training.seed = o.seed;
  auto prog = target::lowerToProgram(module, lo);
  if (failed(prog))
    return failure();
  // What the runtime will check on load: a failure here is the compiler's.
  if (Status st = rt::validateProgram(*prog); !st)
    return module.emitError()
               << "internal error: the lowered program is invalid: "
               << st.message(),
           failure();
  return prog;
}

Status compileModule(OwningOpRef<ModuleOp> module, CompileOptions &o,
                     CompileResult &result, CompilePhase stopAfter,
                     llvm::function_ref<void(llvm::StringRef)> note) {
  result.module = std::move(module);
  result.program.reset();
  ModuleOp m = *result.module;
  if (stopAfter == CompilePhase::Load)
    return Status::ok();
  if (Status s = planCompile(m, o, note); !s)
    return s;
  if (stopAfter == CompilePhase::Plan)
    return Status::ok();
  PassManager pm(m.getContext());
  buildCompilePipeline(pm, o);
  if (failed(pm.run(m)))
    return Status::error(""); // reported as diagnostics
  if (stopAfter == CompilePhase::Pipeline)
    return Status::ok();
  auto prog = lowerCompiled(m, o);
  if (failed(prog))
    return Status::error("");
  result.program = std::move(*prog);
  return Status::ok();
}

Status compile(llvm::StringRef inputPath, CompileOptions &o, MLIRContext &ctx,
               llvm::SourceMgr &srcMgr, CompileResult &result,
               CompilePhase stopAfter,
               llvm::function_ref<void(llvm::StringRef)> note) {
  // The options are checked before the model is read: a bad flag costs no
  // import.
  CompileOptions checked = o;
  if (Status s = resolveCompileOptions(checked); !s)
    return s;
  if (o.seqLen != 0 && !import::isConfigPath(inputPath))
    return Status::error("--seq-len applies to config.json input only (nn IR "
                         "has its shapes)");
  import::LoadOptions load;
  load.seqLen = o.seqLen;
  load.microbatchSize = o.microbatchSize;
  auto module = import::loadModel(inputPath, &ctx, srcMgr, load);
  if (!module)
    return Status::error(llvm::toString(module.takeError()));
  o.modelName = llvm::sys::path::stem(inputPath).str();
  return compileModule(std::move(*module), o, result, stopAfter, note);
}

} // namespace pipeforge::pipelines
