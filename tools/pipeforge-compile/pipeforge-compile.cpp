//===- pipeforge-compile.cpp - config.json / nn IR to a program file ------===//
//
//   pipeforge-compile examples/gpt-tiny.json --schedule zb-h1 --ranks 4 \
//       --microbatches 8 --seq-len 16 --microbatch-size 2 -o gpt.pfp
//   pipeforge-compile --check gpt.pfp [--dump]
//
// Runs the whole flow in-process (docs/compile.md): import -> pp-partition
// -> pp-split-backward -> pp-schedule -> pp-insert-comm ->
// pp-verify-schedule (with --fuse-overlap also pp-split-components after
// pp-split-backward and pp-fuse-overlap at the end), then lowers the
// schedule-level module to a rt::Program and writes it
// (docs/program-format.md). Every bad option or impossible request is an
// error message and exit code 1.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"
#include "pipeforge/Target/Program/ProgramLowering.h"

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/rt/Program.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

#include <set>

using namespace llvm;
using namespace pipeforge;

static cl::OptionCategory cat("pipeforge-compile options");
static cl::opt<std::string> inputPath(cl::Positional,
                                      cl::desc("<config.json | model.mlir>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string>
    scheduleName("schedule",
                 cl::desc("gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe "
                          "dualpipev, or none (single-process reference)"),
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
static cl::opt<int> microbatches(
    "microbatches",
    cl::desc("Microbatches per step, over both copies for DualPipe "
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
             cl::desc("Per-rank activation limit in M_B units, or <k>p "
                      "(k x ranks); checked by pp-verify-schedule"),
             cl::init(""), cl::cat(cat));
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

namespace {
struct Plan {
  int stages = 0;
  std::string placement;
  int ranks = 0;
};
} // namespace

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
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "PipeForge compiler: config.json or nn IR -> pipeline program file\n");
  if (check)
    return runCheck();
  if (outputPath.empty() && !dump && !emitMlir)
    return fail("nothing to do: give -o FILE, --dump or --emit-mlir");

  // --- Options -------------------------------------------------------------
  const std::string kind = scheduleName;
  const bool none = kind == "none";
  std::optional<sched::ScheduleKind> sk;
  if (!none) {
    sk = sched::parseScheduleKind(kind);
    if (!sk || *sk == sched::ScheduleKind::Auto)
      return fail("unknown schedule '" + kind + "' (expected one of: gpipe " +
                  "1f1b interleaved zb-h1 zb-h2 zbv dualpipe dualpipev none)");
  }
  int numRanks = ranks;
  if (none) {
    if (numRanks != 0 && numRanks != 1)
      return fail("--schedule none is the single-process reference: it "
                  "needs --ranks 1 (got " + Twine(numRanks) + ")");
    numRanks = 1;
  } else if (numRanks == 0) {
    numRanks = 2;
  }
  if (numRanks < 1)
    return fail("--ranks must be at least 1 (got " + Twine(numRanks) + ")");
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
  if (microbatches < 0)
    return fail("--microbatches must be positive (got " +
                Twine(int(microbatches)) + ")");
  Plan plan;
  plan.ranks = numRanks;
  if (none) {
    plan = {1, "linear", 1};
  } else {
    switch (*sk) {
    case sched::ScheduleKind::Interleaved:
      plan = {2 * numRanks, "interleaved", numRanks};
      break;
    case sched::ScheduleKind::ZBV:
    case sched::ScheduleKind::DualPipeV:
      plan = {2 * numRanks, "v", numRanks};
      break;
    case sched::ScheduleKind::DualPipe:
      if (numRanks % 2 != 0)
        return fail("dualpipe needs an even number of ranks (got " +
                    Twine(numRanks) + ")");
      plan = {numRanks, "dual", numRanks};
      break;
    default:
      plan = {numRanks, "linear", numRanks};
    }
  }
  int mb = microbatches;
  if (!none) {
    int minMb = sched::minMicrobatches(*sk, numRanks);
    if (mb == 0)
      mb = minMb;
    else if (mb < minMb)
      return fail("--microbatches " + Twine(mb) + " is too few for " + kind +
                  " on " + Twine(numRanks) + " ranks (needs at least " +
                  Twine(minMb) + ")");
  } else if (mb == 0) {
    mb = 1;
  }
  double memLimitValue = 0;
  if (!memLimit.empty()) {
    StringRef s = memLimit;
    double factor = 1;
    if (s.consume_back("p"))
      factor = numRanks;
    if (s.getAsDouble(memLimitValue) || memLimitValue <= 0)
      return fail("--mem-limit '" + memLimit +
                  "' is not a positive number of M_B units or <k>p");
    memLimitValue *= factor;
  }

  // --- Input ---------------------------------------------------------------
  mlir::DialectRegistry registry;
  registry.insert<nn::NNDialect, pp::PPDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.printOpOnDiagnostic(false);
  pp::registerPPPasses();

  auto buffer = MemoryBuffer::getFileOrSTDIN(inputPath);
  if (!buffer)
    return fail(inputPath + ": cannot read: " + buffer.getError().message());
  llvm::SourceMgr srcMgr;
  srcMgr.AddNewSourceBuffer(std::move(*buffer), SMLoc());
  mlir::SourceMgrDiagnosticHandler diag(srcMgr, &ctx);

  target::LowerOptions lo;
  lo.model.name = sys::path::stem(inputPath).str();
  lo.training.schedule = kind;
  lo.training.dataParallel = dp;
  lo.training.expertParallel = ep;
  lo.training.seed = seed;

  mlir::OwningOpRef<mlir::ModuleOp> module;
  StringRef text = srcMgr.getMemoryBuffer(srcMgr.getMainFileID())->getBuffer();
  if (StringRef(inputPath).ends_with(".json")) {
    auto config = import::parseModelConfig(text, seqLen, microbatchSize);
    if (!config)
      return fail(inputPath + ": " + toString(config.takeError()));
    config->name = lo.model.name;
    auto loc = mlir::FileLineColLoc::get(&ctx, inputPath, 1, 1);
    module = import::buildModel(*config, &ctx, loc);
    if (mlir::failed(mlir::verify(*module)))
      return fail("internal error: the imported model does not verify");
  } else {
    if (seqLen != 0)
      return fail("--seq-len applies to config.json input only (nn IR has "
                  "its shapes)");
    module = mlir::parseSourceFile<mlir::ModuleOp>(srcMgr, &ctx);
    if (!module)
      return 1;
  }

  // The stage count check on @model.
  auto model = module->lookupSymbol<mlir::func::FuncOp>("model");
  if (!model)
    return fail(inputPath + ": no func.func @model (docs/model-ir.md)");
  std::set<int64_t> layers;
  model.walk([&](mlir::Operation *op) {
    if (auto l = op->getAttrOfType<mlir::IntegerAttr>("nn.layer"))
      layers.insert(l.getInt());
  });
  if (plan.stages > int(layers.size()))
    return fail(Twine(kind) + " on " + Twine(numRanks) + " ranks needs " +
                Twine(plan.stages) + " stages but the model has only " +
                Twine(layers.size()) + " layers to cut");

  // --- Pass pipeline -------------------------------------------------------
  std::string pipeline = "pp-partition{stages=" +
                         std::to_string(plan.stages) +
                         " placement=" + plan.placement +
                         " ranks=" + std::to_string(plan.ranks) +
                         "},pp-split-backward";
  if (fuseOverlap)
    pipeline += ",pp-split-components";
  if (!none) {
    pipeline += ",pp-schedule{kind=" + kind +
                " microbatches=" + std::to_string(mb) + "},pp-insert-comm";
    pipeline += ",pp-verify-schedule";
    if (memLimitValue > 0)
      pipeline += "{mem-limit=" + std::to_string(memLimitValue) + "}";
    // Component programs for the overlapped pairs (from the stages'
    // pp.components) and early receive posts; the pass re-verifies.
    if (fuseOverlap)
      pipeline += ",pp-fuse-overlap";
  }
  mlir::PassManager pm(&ctx);
  if (mlir::failed(mlir::parsePassPipeline(pipeline, pm, errs())))
    return fail("internal error: bad pass pipeline " + pipeline);
  if (mlir::failed(pm.run(*module)))
    return 1;

  if (none) {
    // The unpipelined reference: F then BW per microbatch on one rank.
    sched::Schedule s;
    s.name = "none";
    s.placement = sched::Placement::linear(1);
    s.numMicrobatches = mb;
    s.hasComm = false;
    s.programs.resize(1);
    for (int j = 0; j < mb; ++j) {
      s.programs[0].push_back(
          sched::Action::compute({sched::WorkKind::F, 0, j, 0}));
      s.programs[0].push_back(
          sched::Action::compute({sched::WorkKind::BW, 0, j, 0}));
    }
    lo.schedule = std::move(s);
  }
  if (emitMlir)
    module->print(outs());

  auto prog = target::lowerToProgram(*module, lo);
  if (mlir::failed(prog))
    return 1;
  if (sched::Status st = rt::validateProgram(*prog); !st)
    return fail("internal error: the lowered program is invalid: " +
                st.message());
  if (!outputPath.empty())
    if (sched::Status st = rt::writeProgram(*prog, outputPath); !st)
      return fail(st.message());
  if (dump)
    outs() << rt::dumpProgram(*prog);
  return 0;
}
