//===- pipeforge-compile.cpp - config.json / nn IR to a program file ------===//
//
//   pipeforge-compile examples/gpt-tiny.json --schedule zb-h1 --ranks 4 \
//       --microbatches 8 --seq-len 16 --microbatch-size 2 -o gpt.pfp
//   pipeforge-compile --check gpt.pfp [--dump]
//
// Option parsing around the compile driver (pipelines::compile,
// Pipelines/CompilePipeline.h; docs/compile.md): load, plan, the pass
// pipeline, the lowering; then writes the program (docs/program-format.md)
// or an executable. A bad flag is a usage error (exit 2); an impossible
// request is an error message and exit code 1.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/Dialects.h"
#include "pipeforge/Pipelines/CompilePipeline.h"
#include "pipeforge/Support/ToolHelp.h"
#include "pipeforge/Target/Executable/EmitExecutable.h"
#include "pipeforge/rt/Program.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace pipeforge;

static cl::OptionCategory cat("pipeforge-compile options");
static cl::opt<std::string> inputPath(cl::Positional,
                                      cl::desc("<config.json | model.mlir>"),
                                      cl::Required, cl::cat(cat));
// Every phase's options, declared once (pipelines::forEachCompileOption).
static pipelines::CompileFlags compileFlags(
    cat, {pipelines::OptionPhase::Load, pipelines::OptionPhase::Pipeline,
          pipelines::OptionPhase::Lowering});
static cl::opt<std::string> outputPath("o", cl::desc("Write the program file"),
                                       cl::value_desc("file"), cl::init(""),
                                       cl::cat(cat));
static cl::opt<std::string>
    emitKind("emit",
             cl::desc("What -o writes: program (the program file, default) "
                      "or exe (a stand-alone executable that takes "
                      "pipeforge-run's options; docs/compile.md)"),
             cl::init("program"), cl::cat(cat));
static cl::opt<std::string> runtimeLibDir(
    "runtime-lib-dir",
    cl::desc("--emit exe: the folder of libpipeforge-rt-driver.so (default: "
             "../lib next to pipeforge-compile)"),
    cl::init(""), cl::cat(cat));
static cl::opt<bool> dump("dump", cl::desc("Print the program listing"),
                          cl::cat(cat));
static cl::opt<bool> emitMlir("emit-mlir",
                              cl::desc("Print the schedule-level module"),
                              cl::cat(cat));
static cl::opt<bool> check("check",
                           cl::desc("Read and validate the program file given "
                                    "as input (with --dump: list it)"),
                           cl::cat(cat));

static int fail(const Twine &msg) {
  WithColor::error(errs(), "pipeforge-compile") << msg << "\n";
  return 1;
}

static int runCheck() {
  auto p = rt::readProgram(inputPath);
  if (!p)
    return fail(p.message());
  if (dump)
    outs() << rt::dumpProgram(*p);
  else
    outs() << inputPath << ": ok: " << p->params.size() << " params, "
           << p->stages.size() << " stages, " << p->schedule.numRanks()
           << " ranks, schedule " << p->training.schedule << "\n";
  return 0;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  pipeforge::hideForeignOptions({&cat});
  pipeforge::parseToolCommandLine(
      argc, argv,
      "PipeForge compiler: config.json or nn IR -> pipeline program file\n");
  if (check)
    return runCheck();
  if (outputPath.empty() && !dump && !emitMlir)
    return fail("nothing to do: give -o FILE, --dump or --emit-mlir");
  if (emitKind != "program" && emitKind != "exe")
    return fail("--emit must be program or exe (got '" + emitKind + "')");
  if (emitKind == "exe" && outputPath.empty())
    return fail("--emit exe needs -o FILE");

  pipelines::CompileOptions options;
  compileFlags.apply(options);
  mlir::DialectRegistry registry;
  registerPipeForgeDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.printOpOnDiagnostic(false);
  llvm::SourceMgr srcMgr;
  mlir::SourceMgrDiagnosticHandler diag(srcMgr, &ctx);

  // --emit-mlir prints the module before it is lowered.
  pipelines::CompileResult result;
  auto note = [](StringRef n) {
    errs() << "pipeforge-compile: note: " << n << "\n";
  };
  sched::Status s =
      pipelines::compile(inputPath, options, ctx, srcMgr, result,
                         emitMlir ? pipelines::CompilePhase::Pipeline
                                  : pipelines::CompilePhase::Lower,
                         note);
  if (!s)
    return s.message().empty() ? 1 : fail(s.message());
  if (emitMlir) {
    result.module->print(outs());
    auto prog = pipelines::lowerCompiled(*result.module, options);
    if (mlir::failed(prog))
      return 1;
    result.program = std::move(*prog);
  }
  const rt::Program &prog = *result.program;

  if (!outputPath.empty() && emitKind == "exe") {
    target::ExecutableOptions eo;
    eo.runtimeLibDir = runtimeLibDir.empty()
                           ? target::findRuntimeLibDir(argv[0], (void *)&main)
                           : std::string(runtimeLibDir);
    if (eo.runtimeLibDir.empty())
      return fail("--emit exe: cannot find " +
                  Twine(target::kRuntimeDriverLibrary) +
                  " in ../lib next to pipeforge-compile; give "
                  "--runtime-lib-dir");
    if (Error e =
            target::emitExecutable(rt::serializeProgram(prog), outputPath, eo))
      return fail(toString(std::move(e)));
  } else if (!outputPath.empty()) {
    if (sched::Status st = rt::writeProgram(prog, outputPath); !st)
      return fail(st.message());
  }
  if (dump)
    outs() << rt::dumpProgram(prog);
  return 0;
}
