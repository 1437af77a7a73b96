//===- pipeforge-plan.cpp - Recommend a parallel setup for a cluster -------===//
//
//   pipeforge-plan examples/gpt2-small.json --cluster examples/clusters/8xh100.json \
//       --global-batch 64 [--seq-len 1024] [--microbatch-sizes 1,2,4,8] \
//       [--schedules 1f1b,zbv] [--top 5] [--format table|json] [-o FILE]
//
// Reads the model (a config.json through the importer, or an nn .mlir with
// func @model), sums the nn cost interface per layer (nn.layer), and hands
// the per-layer costs to the planner library (pipeforge/Plan/Planner.h).
// Errors go to stderr with exit code 1.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/IR/NNInterfaces.h"
#include "pipeforge/Plan/Planner.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <map>

#if __has_include("pipeforge/Schedule/AutoScheduler.h")
#include "pipeforge/Schedule/AutoScheduler.h"
#define PIPEFORGE_PLAN_HAVE_AUTO 1
#endif

using namespace llvm;
using namespace pipeforge;

static cl::OptionCategory cat("pipeforge-plan options");
static cl::opt<std::string> modelPath(cl::Positional,
                                      cl::desc("<config.json | model.mlir | - (nn IR on stdin)>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string> clusterPath("cluster",
                                        cl::desc("Cluster description JSON"),
                                        cl::value_desc("file"), cl::Required,
                                        cl::cat(cat));
static cl::opt<int64_t> globalBatch("global-batch",
                                    cl::desc("Sequences per training step"),
                                    cl::Required, cl::cat(cat));
static cl::opt<int64_t> seqLen(
    "seq-len",
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
    ppList("pp", cl::desc("Pipeline degrees to try (default: every divisor "
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

/// Bytes of a statically shaped tensor value (floats at `bpe` bytes).
static double valueBytes(mlir::Value v, unsigned bpe) {
  auto t = dyn_cast<mlir::RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape())
    return 0;
  double elems = static_cast<double>(t.getNumElements());
  mlir::Type e = t.getElementType();
  if (isa<mlir::FloatType>(e))
    return elems * bpe;
  return elems * std::max<unsigned>(1, e.getIntOrFloatBitWidth() / 8);
}

/// Per-layer costs of func @model, divided by its batch (the tokens
/// argument's leading dimension) to get per-sequence numbers.
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

  // Layer ids in order; ops of a layer must be contiguous (model-ir.md).
  std::map<int64_t, size_t> index;
  std::vector<int64_t> ids;
  std::string error;
  func.walk([&](mlir::Operation *op) {
    auto attr = op->getAttrOfType<mlir::IntegerAttr>("nn.layer");
    if (!attr) {
      if (isa<nn::CostOpInterface>(op) && error.empty())
        error = "an '" + op->getName().getStringRef().str() +
                "' op has no nn.layer attribute";
      return;
    }
    if (!index.count(attr.getInt())) {
      index[attr.getInt()] = 0;
      ids.push_back(attr.getInt());
    }
  });
  if (!error.empty())
    return createStringError(error);
  if (ids.empty())
    return createStringError("@model has no ops with an nn.layer attribute");
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size(); ++i)
    index[ids[i]] = i;

  const unsigned bpe = bytesPerElement;
  const double perSeq = 1.0 / static_cast<double>(batch);
  plan::ModelCosts model;
  model.name = name.str();
  model.seqLen = seq;
  model.layers.resize(ids.size());
  std::vector<double> crossing(ids.size(), 0);
  func.walk([&](mlir::Operation *op) {
    auto attr = op->getAttrOfType<mlir::IntegerAttr>("nn.layer");
    if (!attr)
      return;
    size_t li = index[attr.getInt()];
    plan::LayerCost &lc = model.layers[li];
    if (auto cost = dyn_cast<nn::CostOpInterface>(op)) {
      lc.fwdFlops += cost.getForwardFlops() * perSeq;
      lc.bwdInputFlops += cost.getBackwardInputFlops() * perSeq;
      lc.bwdWeightFlops += cost.getBackwardWeightFlops() * perSeq;
      lc.stashBytes += double(cost.getStashBytes(bpe)) * perSeq;
      lc.weightStashBytes += double(cost.getWeightStashBytes(bpe)) * perSeq;
      lc.params += double(cost.getParamBytes(1)); // elements, not per seq
    }
    // Values that cross the cuts after this layer.
    for (mlir::Value res : op->getResults()) {
      size_t last = li;
      for (mlir::Operation *user : res.getUsers())
        if (auto ua = user->getAttrOfType<mlir::IntegerAttr>("nn.layer"))
          last = std::max(last, index[ua.getInt()]);
      double bytes = valueBytes(res, bpe) * perSeq;
      for (size_t c = li; c < last; ++c)
        crossing[c] += bytes;
    }
  });
  for (size_t i = 0; i < ids.size(); ++i)
    model.layers[i].outputBytes = crossing[i];
  return model;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(
      argc, argv,
      "PipeForge planner: the fastest pipeline x data-parallel setup that "
      "fits a cluster\n");

  if (outFormat != "table" && outFormat != "json")
    return fail("--format: expected 'table' or 'json', got '" + outFormat + "'");
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
                "commas, got '" + mbSizes + "'");
  opts.microbatchSizes = *sizes;
  if (!ppList.empty()) {
    auto pps = parseIntList(ppList);
    if (!pps)
      return fail("--pp: expected positive integers separated by commas");
    opts.pipelineDegrees = *pps;
  }
#ifdef PIPEFORGE_PLAN_HAVE_AUTO
  // The automatic scheduler, heuristic only (the ILP would cost seconds per
  // setup), under the activation memory the model state leaves free.
  opts.autoScheduler = [](int ranks, int microbatches,
                          const sched::CostModel &cost,
                          double memLimit) -> sched::Expected<sched::Schedule> {
    sched::AutoOptions a;
    a.ranks = ranks;
    a.microbatches = microbatches;
    a.cost = cost;
    a.memLimit = memLimit;
    a.useIlp = false;
    a.searchTimeLimit = 0; // no wall-clock search: deterministic
    auto r = sched::autoSchedule(a);
    if (!r)
      return r.status();
    return std::move(r->schedule);
  };
#endif
  if (!scheduleList.empty()) {
    SmallVector<StringRef> parts;
    StringRef(scheduleList).split(parts, ',', -1, false);
    for (StringRef p : parts) {
      auto k = sched::parseScheduleKind(p.trim().str());
      if (!k)
        return fail("--schedules: unknown schedule '" + p.trim() +
                    "' (known: " + sched::scheduleKindNames() + ")");
      if (*k == sched::ScheduleKind::Auto && !opts.autoScheduler)
        return fail("--schedules: 'auto' is not built into this planner yet");
      opts.schedules.push_back(*k);
    }
  }

  // Cluster.
  auto clusterBuf = MemoryBuffer::getFile(clusterPath);
  if (!clusterBuf)
    return fail(clusterPath + ": cannot read: " +
                clusterBuf.getError().message());
  auto cluster = plan::parseCluster((*clusterBuf)->getBuffer().str());
  if (!cluster)
    return fail(clusterPath + ": " + cluster.message());

  // Model.
  auto modelBuf = MemoryBuffer::getFileOrSTDIN(modelPath);
  if (!modelBuf)
    return fail(modelPath + ": cannot read: " + modelBuf.getError().message());
  mlir::MLIRContext ctx;
  ctx.loadDialect<nn::NNDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module;
  StringRef stem = modelPath == "-" ? StringRef("model")
                                     : sys::path::stem(modelPath);
  if (modelPath == "-" || StringRef(modelPath).ends_with(".mlir")) {
    SourceMgr sm;
    sm.AddNewSourceBuffer(std::move(*modelBuf), SMLoc());
    mlir::SourceMgrDiagnosticHandler handler(sm, &ctx);
    module = mlir::parseSourceFile<mlir::ModuleOp>(sm, &ctx);
    if (!module)
      return fail(modelPath + ": cannot parse the nn IR");
  } else {
    auto config = import::parseModelConfig((*modelBuf)->getBuffer(), seqLen,
                                           /*batch=*/1);
    if (!config)
      return fail(modelPath + ": " + toString(config.takeError()));
    auto loc = mlir::FileLineColLoc::get(&ctx, modelPath, 1, 1);
    module = import::buildModel(*config, &ctx, loc);
    if (mlir::failed(mlir::verify(*module)))
      return fail("internal error: the imported model does not verify");
  }
  auto model = costsOf(*module, stem);
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
  out->keep();
  return 0;
}
