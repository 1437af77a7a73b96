//===- pipeforge-plan.cpp - Recommend a parallel setup --------------------===//
//
//   pipeforge-plan examples/gpt2-small.json --cluster
//   examples/clusters/8xh100.json \
//       --global-batch 64 [--seq-len 1024] [--microbatch-sizes 1,2,4,8] \
//       [--schedules 1f1b,zbv] [--tp 1,2] [--ep 1,8] [--recompute none,full]
//       [--zero 0,1]
//       [--top 5] [--format table|json] [-o FILE]
//       [--explain "schedule=interleaved pp=8 tp=8 b=1 recompute=full zero=1"]
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
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Plan/Compare.h"
#include "pipeforge/Plan/Planner.h"
#include "pipeforge/Support/AttrNames.h"
#include "pipeforge/Support/OutputFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <chrono>
#include <map>
#include <numeric>

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
static cl::opt<std::string>
    tpList("tp",
           cl::desc("Tensor-parallel degrees to try (default: every divisor "
                    "of the GPUs per node that divides the heads, KV heads, "
                    "MLP width, vocabulary and sequence)"),
           cl::init(""), cl::cat(cat));
static cl::opt<std::string>
    epList("ep",
           cl::desc("Expert-parallel degrees to try (default: every divisor "
                    "of the data-parallel degree that divides every moe "
                    "layer's experts; 1 for a dense model)"),
           cl::init(""), cl::cat(cat));
static cl::opt<std::string> recomputeList(
    "recompute",
    cl::desc("Recomputation policies to try, comma separated: none, "
             "selective, full (default: all)"),
    cl::init(""), cl::cat(cat));
static cl::opt<std::string>
    zeroList("zero",
             cl::desc("ZeRO stages to try, comma separated: 0 (replicated "
                      "optimizer state), 1 (sharded over the data-parallel "
                      "replicas) (default: both)"),
             cl::init(""), cl::cat(cat));
static cl::opt<std::string>
    chunkList("chunks",
              cl::desc("Chunks per rank (virtual stages) to try for "
                       "interleaved, comma separated (default 2,4,8; p v must "
                       "not exceed the layers)"),
              cl::init("2,4,8"), cl::cat(cat));
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
static cl::opt<std::string> explainSetup(
    "explain",
    cl::desc("Also evaluate this setup and show its rank, e.g. "
             "\"schedule=interleaved pp=8 tp=8 b=1 recompute=full zero=1 "
             "chunks=2\" (keys: schedule pp tp ep dp b recompute zero chunks "
             "layout)"),
    cl::value_desc("setup"), cl::init(""), cl::cat(cat));
static cl::opt<double> fitThroughput(
    "fit-throughput",
    cl::desc("With --explain: first set the cluster's efficiency to the value "
             "at which the explained setup is predicted at this many tokens/s "
             "(a published run's throughput), then plan with it"),
    cl::value_desc("tokens/s"), cl::init(0), cl::cat(cat));
static cl::opt<std::string> progressMode(
    "progress",
    cl::desc("Progress on stderr: auto (default: on a terminal, once the "
             "search has run for a second), always, never"),
    cl::init("auto"), cl::cat(cat));
static cl::opt<bool> compareSchedulesFlag(
    "compare",
    cl::desc("After the report, the explained setup (or the recommendation) "
             "under dualpipe, dualpipev, 1f1b and zbv: bubble, exposed "
             "all-to-all time, GPU-hours per million tokens, what 1F1B "
             "loses, DualPipe's second parameter copy"),
    cl::init(false), cl::cat(cat));
static cl::opt<std::string> layoutList(
    "layouts",
    cl::desc("GPU layouts to try on more than one node, comma separated: "
             "pp-in-node, dp-in-node, ep-in-node (default: pp-in-node,"
             "dp-in-node, the runtime's)"),
    cl::init(""), cl::cat(cat));
static cl::opt<std::string> zeroShard(
    "zero-shard",
    cl::desc("What ZeRO-1 shards the dense parameters' optimizer state "
             "over: replicas (default: the d/e replicas of an expert rank, as "
             "pipeforge-run --zero 1) or all (every data-parallel rank, as "
             "Megatron's distributed optimizer and DeepSeek-V3)"),
    cl::init("replicas"), cl::cat(cat));
static cl::opt<std::string> routingGroupsOpt(
    "routing-groups",
    cl::desc("Group-limited routing of every moe layer, G,g: G groups of "
             "consecutive experts, a token's experts in g of them "
             "(DeepSeek-V3: 8,4; default: the nn.moe's n_group and "
             "topk_group attributes when the IR has them)"),
    cl::value_desc("G,g"), cl::init(""), cl::cat(cat));
static cl::opt<std::string> outputPath("o", cl::desc("Output file"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::cat(cat));

static int fail(const Twine &msg) {
  WithColor::error(errs(), "pipeforge-plan") << msg << "\n";
  return 1;
}

static std::optional<std::vector<int>> parseIntList(StringRef text,
                                                    int min = 1) {
  std::vector<int> out;
  SmallVector<StringRef> parts;
  text.split(parts, ',', -1, false);
  for (StringRef p : parts) {
    int v;
    if (p.trim().getAsInteger(10, v) || v < min)
      return std::nullopt;
    out.push_back(v);
  }
  if (out.empty())
    return std::nullopt;
  return out;
}

/// Group-limited routing of a moe layer (DeepSeek-V3's n_group and
/// topk_group), when the op carries it.
static void routingGroups(nn::MoEOp moe, plan::LayerCost &lc) {
  auto groups = moe->getAttrOfType<mlir::IntegerAttr>("n_group");
  auto perToken = moe->getAttrOfType<mlir::IntegerAttr>("topk_group");
  // One group (the default) is no limit.
  if (!groups || !perToken || groups.getInt() <= 1)
    return;
  lc.routingGroups = int(groups.getInt());
  lc.groupsPerToken = int(perToken.getInt());
}

/// What tensor parallelism and recomputation need beyond the cost sums: the
/// kind of each layer (embedding, transformer block: one with attention,
/// head: one with the loss), the model's heads, KV heads, hidden size, MLP
/// width and vocabulary, and per block the attention core's FLOPs. An IR that
/// is already tensor-parallel leaves the shape unknown (the planner then only
/// tries t = 1).
static void describeLayers(mlir::func::FuncOp func,
                           const std::vector<int64_t> &ids,
                           plan::ModelCosts &model, double perSeq) {
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < ids.size(); ++i)
    index[ids[i]] = i;
  plan::ModelShape shape;
  bool sharded = false;
  func.walk([&](mlir::Operation *op) {
    if (isa<nn::TPCopyOp, nn::TPAllReduceOp, nn::TPAllGatherOp,
            nn::TPReduceScatterOp, nn::VocabParallelCrossEntropyOp>(op))
      sharded = true;
    auto layerAttr = op->getAttrOfType<mlir::IntegerAttr>(attrs::kNNLayer);
    if (!layerAttr)
      return;
    auto it = index.find(layerAttr.getInt());
    if (it == index.end())
      return;
    plan::LayerCost &lc = model.layers[it->second];
    if (auto a = dyn_cast<nn::AttentionOp>(op)) {
      auto q = cast<mlir::RankedTensorType>(a.getQ().getType());
      if (!q.hasStaticShape())
        return;
      lc.kind = plan::LayerKind::Block;
      shape.heads = a.getNumHeads();
      shape.kvHeads = a.getNumKvHeads();
      shape.hidden = q.getDimSize(2);
      auto cost = cast<nn::CostOpInterface>(op);
      lc.attnCoreFlops += cost.getForwardFlops() * perSeq;
    } else if (auto e = dyn_cast<nn::EmbeddingOp>(op)) {
      if (lc.kind == plan::LayerKind::Other)
        lc.kind = plan::LayerKind::Embedding;
      shape.vocab = e.getTable().getType().getDimSize(0);
    } else if (isa<nn::CrossEntropyOp, nn::VocabParallelCrossEntropyOp>(op)) {
      if (lc.kind == plan::LayerKind::Other)
        lc.kind = plan::LayerKind::Head;
    } else if (isa<nn::GeluOp, nn::SiluOp>(op)) {
      auto t = cast<mlir::RankedTensorType>(op->getResult(0).getType());
      shape.ffn = t.getShape().back();
    } else if (auto moe = dyn_cast<nn::MoEOp>(op)) {
      auto w1 = moe.getW1().getType();
      auto x = cast<mlir::RankedTensorType>(moe.getInput().getType());
      if (!w1.hasStaticShape() || !x.hasStaticShape())
        return;
      shape.ffn = w1.getDimSize(1);
      shape.experts = std::gcd(shape.experts, moe.getNumExperts());
      // The routed experts' weights, sharded by expert parallelism.
      for (mlir::Value w : {moe.getW1(), moe.getW2(), moe.getW3()})
        if (w)
          lc.expertParams += double(
              cast<mlir::RankedTensorType>(w.getType()).getNumElements());
      // Each token's hidden row goes to top_k experts: one all-to-all moves
      // tokens x top_k rows.
      const double hidden = double(x.getShape().back());
      const double tokens = double(x.getNumElements()) / hidden * perSeq;
      lc.routedBytes +=
          tokens * double(moe.getTopK()) * hidden * double(bytesPerElement);
      lc.topK = int(moe.getTopK());
      routingGroups(moe, lc);
    }
  });
  if (sharded)
    shape = {};
  model.shape = shape;
  // The hidden state (seq x hidden) of the embedding's output, a block's
  // input and the head's input: the tensor-parallel all-reduce size.
  if (shape.hidden > 0)
    for (plan::LayerCost &lc : model.layers)
      if (lc.kind != plan::LayerKind::Other)
        lc.hiddenBytes = double(model.seqLen) * double(shape.hidden) *
                         double(bytesPerElement);
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
  // The importer's name for the model (its config file's stem) where the IR
  // carries it: a model piped in from pipeforge-import keeps its name.
  auto named = func->getAttrOfType<mlir::StringAttr>(attrs::kModelName);
  model.name =
      named && !named.getValue().empty() ? named.getValue().str() : name.str();
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
    lc.selectiveBytes = layers->selectiveBytes[i] * perSeq;
    lc.unkeptBytes = layers->unkeptBytes[i] * perSeq;
    model.layers.push_back(lc);
  }
  describeLayers(func, layers->ids, model, perSeq);
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, "nn.tied"))
      if (auto t =
              dyn_cast<mlir::RankedTensorType>(func.getArgument(i).getType());
          t && t.hasStaticShape())
        model.tiedParams += double(t.getNumElements());
  return model;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  pipeforge::hideForeignOptions({&cat});
  cl::ParseCommandLineOptions(
      argc, argv,
      "PipeForge planner: the fastest pipeline x data x tensor-parallel setup "
      "(with recomputation and ZeRO-1) that fits a cluster\n");

  if (outFormat != "table" && outFormat != "json")
    return fail("--format: expected 'table' or 'json', got '" + outFormat +
                "'");
  if (globalBatch < 1)
    return fail("--global-batch must be >= 1");
  if (zeroShard != "replicas" && zeroShard != "all")
    return fail("--zero-shard: expected replicas or all, got '" + zeroShard +
                "'");
  if (compareSchedulesFlag && outFormat == "json")
    return fail("--compare prints a table only (not with --format json)");
  if (progressMode != "auto" && progressMode != "always" &&
      progressMode != "never")
    return fail("--progress: expected auto, always or never, got '" +
                progressMode + "'");
  if (bytesPerElement == 0)
    return fail("--bytes-per-element must be > 0");

  plan::PlanOptions opts;
  opts.globalBatch = globalBatch;
  auto chunkCounts = parseIntList(chunkList, /*min=*/2);
  if (!chunkCounts)
    return fail("--chunks: expected integers >= 2 separated by commas, got '" +
                chunkList + "'");
  opts.chunkCounts = *chunkCounts;
  // An explained interleaved setup without chunks= takes the smallest.
  opts.chunksPerRank =
      *std::min_element(chunkCounts->begin(), chunkCounts->end());
  opts.stateBytesPerParam = stateBytes;
  opts.gradBytesPerParam = gradBytes;
  opts.zeroDenseOverAll = zeroShard == "all";
  opts.topN = topN;
  opts.modelPath =
      modelPath == "-" ? std::string("MODEL") : std::string(modelPath);
  auto sizes = parseIntList(mbSizes);
  if (!sizes)
    return fail("--microbatch-sizes: expected positive integers separated by "
                "commas, got '" +
                mbSizes + "'");
  opts.microbatchSizes = *sizes;
  if (!tpList.empty()) {
    auto tps = parseIntList(tpList);
    if (!tps)
      return fail("--tp: expected positive integers separated by commas");
    opts.tensorDegrees = *tps;
  }
  if (!epList.empty()) {
    auto eps = parseIntList(epList);
    if (!eps)
      return fail("--ep: expected positive integers separated by commas");
    opts.expertDegrees = *eps;
  }
  if (!recomputeList.empty()) {
    SmallVector<StringRef> parts;
    StringRef(recomputeList).split(parts, ',', -1, false);
    for (StringRef p : parts) {
      plan::Recompute r;
      if (!plan::parseRecompute(p.trim().str(), r))
        return fail("--recompute: unknown policy '" + p.trim() +
                    "' (known: none selective full)");
      opts.recomputePolicies.push_back(r);
    }
  }
  if (!zeroList.empty()) {
    auto zs = parseIntList(zeroList, /*min=*/0);
    if (!zs || llvm::any_of(*zs, [](int z) { return z > 1; }))
      return fail("--zero: expected 0 and/or 1 separated by commas, got '" +
                  zeroList + "'");
    opts.zeroStages = *zs;
  }
  if (!layoutList.empty()) {
    SmallVector<StringRef> parts;
    StringRef(layoutList).split(parts, ',', -1, false);
    for (StringRef p : parts) {
      plan::Layout l;
      if (!plan::parseLayout(p.trim().str(), l))
        return fail("--layouts: unknown layout '" + p.trim() +
                    "' (known: pp-in-node dp-in-node ep-in-node)");
      opts.layouts.push_back(l);
    }
  }
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

  std::optional<plan::SetupSpec> spec;
  if (explainSetup.getNumOccurrences()) {
    auto s = plan::parseSetup(explainSetup);
    if (!s)
      return fail("--explain: " + s.message());
    spec = *s;
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

  if (!routingGroupsOpt.empty()) {
    auto gs = parseIntList(routingGroupsOpt);
    if (!gs || gs->size() != 2)
      return fail("--routing-groups: expected G,g with 1 <= g <= G, got '" +
                  routingGroupsOpt + "'");
    if (plan::Status st = plan::setRoutingGroups(*model, (*gs)[0], (*gs)[1]); !st)
      return fail("--routing-groups: " + st.message());
  }

  std::string fitLine;
  if (fitThroughput.getNumOccurrences()) {
    if (!spec)
      return fail("--fit-throughput needs --explain (the setup to fit)");
    auto eff =
        plan::fitEfficiency(*model, *cluster, opts, *spec, fitThroughput);
    if (!eff)
      return fail("--fit-throughput: " + eff.message());
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "fit: efficiency %.4f (the cluster file has %.4g): the "
                  "explained setup is predicted at %.0f tokens/s\n",
                  *eff, cluster->efficiency, double(fitThroughput));
    fitLine = buf;
    cluster->efficiency = *eff;
  }

  // Progress: a line every half second (redrawn in place on a terminal).
  const auto started = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         started)
        .count();
  };
  const bool terminal = errs().is_displayed();
  bool shown = false;
  double lastShown = -1;
  if (progressMode != "never")
    opts.progress = [&](const char *phase, int done, int total, int evaluated) {
      const double now = elapsed();
      if (progressMode == "auto" && (!terminal || now < 1.0))
        return;
      if (shown && now - lastShown < 0.5)
        return;
      // On a terminal the line is redrawn in place (and cleared to its
      // end, "\x1b[K", as it may be shorter than the last).
      errs() << (terminal ? "\r" : "")
             << formatv("pipeforge-plan: {0} {1}/{2}, {3} setups evaluated, "
                        "{4:f1} s",
                        phase, done, total, evaluated, now)
             << (terminal ? "\x1b[K" : "\n");
      shown = true;
      lastShown = now;
    };
  auto result = plan::plan(*model, *cluster, opts);
  if (shown || progressMode == "always")
    errs() << (terminal && shown ? "\r" : "")
           << formatv("pipeforge-plan: searched {0} setups in {1:f1} s",
                      result ? result->evaluated : 0, elapsed())
           << (terminal && shown ? "\x1b[K\n" : "\n");
  if (!result) {
    // The explained setup still says what it needs (against no ranked
    // setups) before the sweep's error.
    if (spec && outFormat == "table")
      if (auto e =
              plan::explain(plan::PlanResult{}, *model, *cluster, opts, *spec))
        outs() << plan::formatExplain(*e, plan::PlanResult{}, *cluster);
    return fail(result.message());
  }

  std::optional<plan::Explanation> explained;
  if (spec) {
    auto e = plan::explain(*result, *model, *cluster, opts, *spec);
    if (!e)
      return fail("--explain: " + e.message());
    explained = std::move(*e);
  }

  std::string error;
  auto out = mlir::openOutputFile(outputPath, &error);
  if (!out)
    return fail(error);
  if (outFormat == "json") {
    out->os() << plan::formatJson(*result, *model, *cluster, opts,
                                  explained ? &*explained : nullptr);
  } else {
    out->os() << fitLine << plan::formatTable(*result, *model, *cluster, opts);
    if (explained)
      out->os() << "\n" << plan::formatExplain(*explained, *result, *cluster);
    if (compareSchedulesFlag) {
      const bool atExplained = explained.has_value();
      auto cmp = plan::compareSchedules(
          *model, *cluster, opts,
          atExplained ? explained->setup : result->ranked.front(),
          atExplained ? "the explained setup" : "the recommendation");
      out->os() << "\n" << plan::formatCompare(cmp, *model, *cluster, opts);
    }
  }
  if (auto err = pipeforge::finishOutput(*out))
    return fail(*err);
  return 0;
}
