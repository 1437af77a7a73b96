//===- pipeforge-plan.cpp - Recommend a parallel setup for a cluster
//-------===//
//
//   pipeforge-plan examples/gpt2-small.json --cluster
//   examples/clusters/8xh100.json \
//       --global-batch 64 [--seq-len 1024] [--microbatch-sizes 1,2,4,8] \
//       [--schedules 1f1b,zbv] [--top 5] [--format table|json] [-o FILE]
//
// Reads the model (a config.json through the importer, or an nn .mlir with
// func @model), takes its per-layer costs from the nn cost analysis
// (nn/Analysis/CostSum.h), and hands them to the planner library
// (pipeforge/Plan/Planner.h).
// Errors go to stderr with exit code 1.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Import/ModelLoader.h"
#include "pipeforge/Support/ToolHelp.h"

#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Plan/Planner.h"
#include "pipeforge/Support/OutputFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace pipeforge;

static cl::OptionCategory cat("pipeforge-plan options");
static cl::opt<std::string>
    modelPath(cl::Positional,
              cl::desc("<config.json | model.mlir | - (nn IR on stdin)>"),
              cl::Required, cl::cat(cat));
static cl::opt<std::string> clusterPath("cluster",
                                        cl::desc("Cluster description JSON"),
                                        cl::value_desc("file"), cl::Required,
                                        cl::cat(cat));
static cl::opt<int64_t> globalBatch("global-batch",
                                    cl::desc("Sequences per training step"),
                                    cl::Required, cl::cat(cat));
static cl::opt<int64_t>
    seqLen("seq-len",
           cl::desc("Sequence length (config.json: default the model's maximum "
                    "positions; .mlir: fixed by the IR)"),
           cl::init(0), cl::cat(cat));
static cl::opt<std::string>
    mbSizes("microbatch-sizes",
            cl::desc("Microbatch sizes to try, comma separated (default "
                     "1,2,4,8)"),
            cl::init("1,2,4,8"), cl::cat(cat));
static cl::opt<std::string> scheduleList(
    "schedules",
    cl::desc("Schedules to try, comma separated (default: 1f1b zb-h1 zb-h2 "
             "zbv dualpipe dualpipev interleaved, and auto when built in)"),
    cl::init(""), cl::cat(cat));
static cl::opt<std::string>
    ppList("pp",
           cl::desc("Pipeline degrees to try (default: every divisor "
                    "of the GPU count up to the layers)"),
           cl::init(""), cl::cat(cat));
static cl::opt<int> chunks("chunks",
                           cl::desc("Chunks per rank for interleaved (2)"),
                           cl::init(2), cl::cat(cat));
static cl::opt<unsigned>
    bytesPerElement("bytes-per-element",
                    cl::desc("Bytes per activation element (default 2)"),
                    cl::init(2), cl::cat(cat));
static cl::opt<double> stateBytes(
    "state-bytes-per-param",
    cl::desc("Model state bytes per parameter: weights, grads, optimizer "
             "(default 16: bf16 weights and grads, fp32 master + Adam)"),
    cl::init(16), cl::cat(cat));
static cl::opt<double>
    gradBytes("grad-bytes",
              cl::desc("Bytes per parameter in the gradient all-reduce "
                       "(default 4)"),
              cl::init(4), cl::cat(cat));
static cl::opt<int> topN("top", cl::desc("Setups to list (default 5)"),
                         cl::init(5), cl::cat(cat));
static cl::opt<std::string> outFormat("format",
                                      cl::desc("table (default) or json"),
                                      cl::init("table"), cl::cat(cat));
static cl::opt<std::string> outputPath("o", cl::desc("Output file"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::cat(cat));

static int fail(const Twine &msg) {
  WithColor::error(errs(), "pipeforge-plan") << msg << "\n";
  return 1;
}

static std::optional<std::vector<int>> parseIntList(StringRef text) {
  std::vector<int> out;
  SmallVector<StringRef> parts;
  text.split(parts, ',', -1, false);
  for (StringRef p : parts) {
    int v;
    if (p.trim().getAsInteger(10, v) || v < 1)
      return std::nullopt;
    out.push_back(v);
  }
  if (out.empty())
    return std::nullopt;
  return out;
}

/// Per-layer costs of func @model (nn/Analysis/CostSum.h), divided by its
/// batch (the tokens argument's leading dimension) to get per-sequence
/// numbers.
static Expected<plan::ModelCosts> costsOf(mlir::ModuleOp module,
                                          StringRef name) {
  auto func = dyn_cast_or_null<mlir::func::FuncOp>(
      mlir::SymbolTable::lookupSymbolIn(module, "model"));
  if (!func || func.isExternal())
    return createStringError("no func.func @model with a body (an nn model "
                             "as pipeforge-import writes it)");
  int64_t batch = 0, seq = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto role = func.getArgAttrOfType<mlir::StringAttr>(i, "nn.role");
    auto t = dyn_cast<mlir::RankedTensorType>(func.getArgument(i).getType());
    if (role && role.getValue() == "tokens" && t && t.getRank() == 2 &&
        t.hasStaticShape()) {
      batch = t.getDimSize(0);
      seq = t.getDimSize(1);
    }
  }
  if (batch <= 0 || seq <= 0)
    return createStringError("@model has no static [batch, seq] argument "
                             "with nn.role = \"tokens\"");
  auto layers = nn::collectLayerCosts(func, bytesPerElement);
  if (!layers)
    return layers.takeError();
  const double perSeq = 1.0 / static_cast<double>(batch);
  plan::ModelCosts model;
  model.name = name.str();
  model.seqLen = seq;
  for (size_t i = 0; i < layers->ids.size(); ++i) {
    const nn::CostSum &c = layers->layers[i];
    plan::LayerCost lc;
    lc.fwdFlops = c.forward * perSeq;
    lc.bwdInputFlops = c.backwardInput * perSeq;
    lc.bwdWeightFlops = c.backwardWeight * perSeq;
    lc.stashBytes = double(c.stash) * perSeq;
    lc.weightStashBytes = double(c.weightStash) * perSeq;
    lc.params = double(c.paramElements); // not per sequence
    lc.outputBytes = layers->crossingBytes[i] * perSeq;
    model.layers.push_back(lc);
  }
  return model;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  pipeforge::hideForeignOptions({&cat});
  cl::ParseCommandLineOptions(
      argc, argv,
      "PipeForge planner: the fastest pipeline x data-parallel setup that "
      "fits a cluster\n");

  if (outFormat != "table" && outFormat != "json")
    return fail("--format: expected 'table' or 'json', got '" + outFormat +
                "'");
  if (globalBatch < 1)
    return fail("--global-batch must be >= 1");
  if (bytesPerElement == 0)
    return fail("--bytes-per-element must be > 0");

  plan::PlanOptions opts;
  opts.globalBatch = globalBatch;
  opts.chunksPerRank = chunks;
  opts.stateBytesPerParam = stateBytes;
  opts.gradBytesPerParam = gradBytes;
  opts.topN = topN;
  auto sizes = parseIntList(mbSizes);
  if (!sizes)
    return fail("--microbatch-sizes: expected positive integers separated by "
                "commas, got '" +
                mbSizes + "'");
  opts.microbatchSizes = *sizes;
  if (!ppList.empty()) {
    auto pps = parseIntList(ppList);
    if (!pps)
      return fail("--pp: expected positive integers separated by commas");
    opts.pipelineDegrees = *pps;
  }
  // The automatic scheduler, heuristic only, under the activation memory
  // the model state leaves free.
  opts.autoScheduler = plan::heuristicAutoScheduler();
  if (!scheduleList.empty()) {
    SmallVector<StringRef> parts;
    StringRef(scheduleList).split(parts, ',', -1, false);
    for (StringRef p : parts) {
      auto k = sched::parseScheduleKind(p.trim().str());
      if (!k)
        return fail("--schedules: unknown schedule '" + p.trim() +
                    "' (known: " + sched::scheduleKindNames() + ")");
      opts.schedules.push_back(*k);
    }
  }

  // Cluster.
  auto clusterBuf = MemoryBuffer::getFile(clusterPath);
  if (!clusterBuf)
    return fail(clusterPath +
                ": cannot read: " + clusterBuf.getError().message());
  auto cluster = plan::parseCluster((*clusterBuf)->getBuffer().str());
  if (!cluster)
    return fail(clusterPath + ": " + cluster.message());

  // Model.
  mlir::MLIRContext ctx;
  ctx.loadDialect<nn::NNDialect, mlir::func::FuncDialect>();
  SourceMgr sm;
  mlir::SourceMgrDiagnosticHandler handler(sm, &ctx);
  import::LoadOptions load;
  load.seqLen = import::isConfigPath(modelPath) ? int64_t(seqLen) : 0;
  auto module = import::loadModel(modelPath, &ctx, sm, load);
  if (!module)
    return fail(toString(module.takeError()));
  StringRef stem =
      modelPath == "-" ? StringRef("model") : sys::path::stem(modelPath);
  auto model = costsOf(**module, stem);
  if (!model)
    return fail(modelPath + ": " + toString(model.takeError()));
  if (seqLen > 0 && model->seqLen != seqLen)
    return fail("--seq-len " + Twine(seqLen) + " differs from the IR's " +
                Twine(model->seqLen) + " (an .mlir model fixes it)");

  auto result = plan::plan(*model, *cluster, opts);
  if (!result)
    return fail(result.message());

  std::string error;
  auto out = mlir::openOutputFile(outputPath, &error);
  if (!out)
    return fail(error);
  out->os() << (outFormat == "json"
                    ? plan::formatJson(*result, *model, *cluster, opts)
                    : plan::formatTable(*result, *model, *cluster, opts));
  if (auto err = pipeforge::finishOutput(*out))
    return fail(*err);
  return 0;
}
