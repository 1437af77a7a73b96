//===- pipeforge-compile.cpp - config.json / nn IR to a program file ------===//
//
//   pipeforge-compile examples/gpt-tiny.json --schedule zb-h1 --ranks 4 \
//       --microbatches 8 --seq-len 16 --microbatch-size 2 -o gpt.pfp
//   pipeforge-compile --check gpt.pfp [--dump]
//
// Runs the whole flow in-process (docs/compile.md): import ->
// [nn-shard-tensor with --tp] -> pp-partition
// -> pp-split-backward -> pp-schedule -> pp-insert-comm ->
// pp-verify-schedule (with --fuse-overlap also pp-split-components after
// pp-split-backward and pp-fuse-overlap at the end), then lowers the
// schedule-level module to a rt::Program and writes it
// (docs/program-format.md). Every bad option or impossible request is an
// error message and exit code 1.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Import/ModelLoader.h"
#include "pipeforge/Pipelines/CompilePipeline.h"
#include "pipeforge/Support/ToolHelp.h"
#include "pipeforge/Target/Executable/EmitExecutable.h"
#include "pipeforge/Target/Program/ProgramLowering.h"

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/rt/Program.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace pipeforge;

static cl::OptionCategory cat("pipeforge-compile options");
static cl::opt<std::string> inputPath(cl::Positional,
                                      cl::desc("<config.json | model.mlir>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string>
    scheduleName("schedule",
                 cl::desc("gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe "
                          "dualpipev chimera auto, or none (single-process "
                          "reference)"),
                 cl::init("1f1b"), cl::cat(cat));
static cl::opt<int> ranks("ranks",
                          cl::desc("Pipeline ranks (default 2; none: 1)"),
                          cl::init(0), cl::cat(cat));
static cl::opt<int> dp("dp", cl::desc("Data-parallel replicas"), cl::init(1),
                       cl::cat(cat));
static cl::opt<int> ep("ep",
                       cl::desc("Expert-parallel group size: each nn.moe "
                                "layer's experts are split over this many "
                                "ranks (must divide the expert count)"),
                       cl::init(1), cl::cat(cat));
static cl::opt<int> tp("tp",
                       cl::desc("Tensor-parallel group size: each layer is "
                                "split Megatron-style over this many ranks "
                                "(--nn-shard-tensor, docs/tensor-parallel.md)"),
                       cl::init(1), cl::cat(cat));
static cl::opt<bool> sequenceParallel(
    "sequence-parallel",
    cl::desc("With --tp: split the activations between the sharded layers "
             "along the sequence"),
    cl::cat(cat));
static cl::opt<std::string> recompute(
    "recompute", cl::ValueOptional, cl::init("none"),
    cl::value_desc("full|selective|none"),
    cl::desc("Activation recomputation (--pp-recompute): full (the default "
             "of a bare --recompute) stashes each stage's inputs only and B "
             "recomputes the rest; selective recomputes norms, activation "
             "functions and dropouts"),
    cl::cat(cat));
static cl::list<int64_t> recomputeStages(
    "recompute-stages", cl::CommaSeparated, cl::value_desc("s,s,..."),
    cl::desc("With --recompute: only these stages (indices of a model "
             "copy's stages; default every stage)"),
    cl::cat(cat));
static cl::opt<int>
    chunks("chunks",
           cl::desc("Interleaved: model chunks per rank (virtual stages; "
                    "default 2)"),
           cl::init(2), cl::cat(cat));
static cl::opt<int> microbatches(
    "microbatches",
    cl::desc("Microbatches per step, over both copies for DualPipe and "
             "Chimera "
             "(default: the smallest the schedule accepts)"),
    cl::init(0), cl::cat(cat));
static cl::opt<int64_t> microbatchSize("microbatch-size",
                                       cl::desc("Sequences per microbatch"),
                                       cl::init(1), cl::cat(cat));
static cl::opt<int64_t>
    seqLen("seq-len",
           cl::desc("Sequence length (default: the model's maximum; "
                    "config.json input only)"),
           cl::init(0), cl::cat(cat));
static cl::opt<std::string>
    memLimit("mem-limit",
             cl::desc("Per-rank activation limit: M_B units, <k>p (k x "
                      "ranks) or bytes (12GB, 512MiB); the auto scheduler's "
                      "constraint, checked by pp-verify-schedule"),
             cl::init(""), cl::cat(cat));
static cl::opt<std::string>
    placement("placement",
              cl::desc("--schedule auto: any (default: the placement, or "
                       "the handcrafted order, that pipeforge-sched "
                       "--schedule auto picks for the model's M_B; a note "
                       "names it), linear or v (the others imply theirs)"),
              cl::init("any"), cl::cat(cat));
static cl::opt<uint64_t> seed("seed", cl::desc("Initialisation seed"),
                              cl::init(1234), cl::cat(cat));
static cl::opt<std::string> outputPath("o", cl::desc("Write the program file"),
                                       cl::value_desc("file"), cl::init(""),
                                       cl::cat(cat));
static cl::opt<bool> fuseOverlap(
    "fuse-overlap",
    cl::desc("Split the stage bodies into per-layer components "
             "(--pp-split-components) and fuse each overlapped F&B pair "
             "(--pp-fuse-overlap); the program's functions carry their "
             "component ranges"),
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
  cl::ParseCommandLineOptions(
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

  // --- Options -------------------------------------------------------------
  pipelines::CompileOptions co;
  co.schedule = scheduleName;
  co.ranks = ranks;
  co.microbatches = microbatches;
  co.chunks = chunks;
  co.placement = placement;
  co.memLimit = memLimit;
  co.fuseOverlap = fuseOverlap;
  co.tp = tp;
  co.sequenceParallel = sequenceParallel;
  co.recompute = recompute;
  co.recomputeStages.assign(recomputeStages.begin(), recomputeStages.end());
  if (sched::Status s = pipelines::resolveCompileOptions(co); !s)
    return fail(s.message());
  if (dp < 1)
    return fail("--dp must be at least 1 (got " + Twine(int(dp)) + ")");
  if (ep < 1)
    return fail("--ep must be at least 1 (got " + Twine(int(ep)) + ")");
  if (microbatchSize < 1)
    return fail("--microbatch-size must be at least 1 (got " +
                Twine(int64_t(microbatchSize)) + ")");
  if (seqLen < 0)
    return fail("--seq-len must be positive (got " + Twine(int64_t(seqLen)) +
                ")");

  // --- Input ---------------------------------------------------------------
  mlir::DialectRegistry registry;
  registry.insert<nn::NNDialect, pp::PPDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.printOpOnDiagnostic(false);
  pp::registerPPPasses();

  llvm::SourceMgr srcMgr;
  mlir::SourceMgrDiagnosticHandler diag(srcMgr, &ctx);
  if (seqLen != 0 && !import::isConfigPath(inputPath))
    return fail("--seq-len applies to config.json input only (nn IR has "
                "its shapes)");
  import::LoadOptions load;
  load.seqLen = seqLen;
  load.microbatchSize = microbatchSize;
  auto module = import::loadModel(inputPath, &ctx, srcMgr, load);
  if (!module)
    return fail(toString(module.takeError()));
  std::string autoNote;
  if (sched::Status s = pipelines::chooseAutoPlacement(**module, co, autoNote);
      !s)
    return fail(s.message());
  if (!autoNote.empty())
    errs() << "pipeforge-compile: note: --schedule auto: " << autoNote << "\n";
  if (sched::Status s = pipelines::checkModelFits(**module, co); !s)
    return fail(s.message());

  target::LowerOptions lo;
  lo.model.name = sys::path::stem(inputPath).str();
  lo.training.dataParallel = dp;
  lo.training.expertParallel = ep;
  lo.training.seed = seed;

  // --- Pass pipeline -------------------------------------------------------
  mlir::PassManager pm(&ctx);
  pipelines::buildCompilePipeline(pm, co);
  if (mlir::failed(pm.run(**module)))
    return 1;

  if (emitMlir)
    (*module)->print(outs());

  auto prog = target::lowerToProgram(**module, lo);
  if (mlir::failed(prog))
    return 1;
  if (sched::Status st = rt::validateProgram(*prog); !st)
    return fail("internal error: the lowered program is invalid: " +
                st.message());
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
            target::emitExecutable(rt::serializeProgram(*prog), outputPath, eo))
      return fail(toString(std::move(e)));
  } else if (!outputPath.empty()) {
    if (sched::Status st = rt::writeProgram(*prog, outputPath); !st)
      return fail(st.message());
  }
  if (dump)
    outs() << rt::dumpProgram(*prog);
  return 0;
}
