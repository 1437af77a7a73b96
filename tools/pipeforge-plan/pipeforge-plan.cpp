//===- pipeforge-plan.cpp - Recommend a parallel setup --------------------===//
//
//   pipeforge-plan examples/gpt2-small.json \
//       --cluster examples/clusters/8xh100.json --global-batch 64 [...]
//
// Reads the model and its per-layer costs (pipeforge/Plan/CostsFromIR.h),
// turns the flags into the planner's options (pipeforge/Plan/Options.h) and
// prints what the planner library (pipeforge/Plan/Planner.h) finds.
// Errors go to stderr with exit code 1.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/Compare.h"
#include "pipeforge/Plan/CostsFromIR.h"
#include "pipeforge/Plan/Options.h"
#include "pipeforge/Support/OutputFile.h"
#include "pipeforge/Support/ToolHelp.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace pipeforge;

static cl::OptionCategory cat("pipeforge-plan options");
/// The flags, as the planner library takes them (pipeforge/Plan/Options.h).
static plan::PlanFlags flags;
static cl::opt<std::string, true>
    modelPath(cl::Positional,
              cl::desc("<config.json | model.mlir | - (nn IR on stdin)>"),
              cl::Required, cl::location(flags.modelPath), cl::cat(cat));
static cl::opt<std::string> clusterPath("cluster",
                                        cl::desc("Cluster description JSON"),
                                        cl::value_desc("file"), cl::Required,
                                        cl::cat(cat));
static cl::opt<int64_t, true>
    globalBatch("global-batch", cl::desc("Sequences per training step"),
                cl::Required, cl::location(flags.globalBatch), cl::cat(cat));
static cl::opt<int64_t>
    seqLen("seq-len",
           cl::desc("Sequence length (config.json: default the model's maximum "
                    "positions; .mlir: fixed by the IR)"),
           cl::init(0), cl::cat(cat));
static cl::opt<std::string, true>
    mbSizes("microbatch-sizes",
            cl::desc("Microbatch sizes to try, comma separated (default "
                     "1,2,4,8)"),
            cl::location(flags.microbatchSizes), cl::init("1,2,4,8"),
            cl::cat(cat));
static cl::opt<std::string, true> scheduleList(
    "schedules",
    cl::desc("Schedules to try, comma separated (default: 1f1b zb-h1 zb-h2 "
             "zbv dualpipe dualpipev interleaved, and auto when built in)"),
    cl::location(flags.schedules), cl::init(""), cl::cat(cat));
static cl::opt<std::string, true>
    ppList("pp",
           cl::desc("Pipeline degrees to try (default: every divisor "
                    "of the GPU count up to the layers)"),
           cl::location(flags.pp), cl::init(""), cl::cat(cat));
static cl::opt<std::string, true>
    tpList("tp",
           cl::desc("Tensor-parallel degrees to try (default: every divisor "
                    "of the GPUs per node that divides the heads, KV heads, "
                    "MLP width, vocabulary and sequence)"),
           cl::location(flags.tp), cl::init(""), cl::cat(cat));
static cl::opt<std::string, true>
    epList("ep",
           cl::desc("Expert-parallel degrees to try (default: every divisor "
                    "of the data-parallel degree that divides every moe "
                    "layer's experts; 1 for a dense model)"),
           cl::location(flags.ep), cl::init(""), cl::cat(cat));
static cl::opt<std::string, true> recomputeList(
    "recompute",
    cl::desc("Recomputation policies to try, comma separated: none, "
             "selective, full (default: all)"),
    cl::location(flags.recompute), cl::init(""), cl::cat(cat));
static cl::opt<std::string, true>
    zeroList("zero",
             cl::desc("ZeRO stages to try, comma separated: 0 (replicated "
                      "optimizer state), 1 (sharded over the data-parallel "
                      "replicas), 2 (the gradients too), 3 (the weights "
                      "too, gathered per layer: FSDP) (default: 0,1)"),
             cl::location(flags.zero), cl::init(""), cl::cat(cat));
static cl::opt<std::string, true> offloadList(
    "offload",
    cl::desc("Activation offload to try, comma separated: off, auto "
             "(pipeforge-run --offload-activations auto; with both, tried "
             "for setups over memory without it) (default: off)"),
    cl::location(flags.offload), cl::init(""), cl::cat(cat));
static cl::opt<std::string, true>
    chunkList("chunks",
              cl::desc("Chunks per rank (virtual stages) to try for "
                       "interleaved, comma separated (default 2,4,8; p v must "
                       "not exceed the layers)"),
              cl::location(flags.chunks), cl::init("2,4,8"), cl::cat(cat));
static cl::opt<unsigned, true> bytesPerElement(
    "bytes-per-element", cl::desc("Bytes per activation element (default 2)"),
    cl::location(flags.bytesPerElement), cl::init(2), cl::cat(cat));
static cl::opt<double, true> stateBytes(
    "state-bytes-per-param",
    cl::desc("Model state bytes per parameter: weights, grads, optimizer "
             "(default 16: bf16 weights and grads, fp32 master + Adam)"),
    cl::location(flags.stateBytesPerParam), cl::init(16), cl::cat(cat));
static cl::opt<double, true>
    gradBytes("grad-bytes",
              cl::desc("Bytes per parameter in the gradient all-reduce "
                       "(default 4)"),
              cl::location(flags.gradBytesPerParam), cl::init(4), cl::cat(cat));
static cl::opt<std::string, true> gradOverlap(
    "overlap-grad-reduce",
    cl::desc("When the gradient all-reduce starts: layer (default: "
             "per-layer buckets as the last microbatches' backward finishes "
             "them, as pipeforge-run, DDP and Megatron do), stage (a stage's "
             "once its last W is done), off (after the pipeline)"),
    cl::location(flags.gradOverlap), cl::init("layer"), cl::cat(cat));
static cl::opt<int, true> topN("top", cl::desc("Setups to list (default 5)"),
                               cl::location(flags.topN), cl::init(5),
                               cl::cat(cat));
static cl::opt<std::string, true> outFormat("format",
                                            cl::desc("table (default) or json"),
                                            cl::location(flags.format),
                                            cl::init("table"), cl::cat(cat));
static cl::opt<std::string> explainSetup(
    "explain",
    cl::desc("Also evaluate this setup and show its rank, e.g. "
             "\"schedule=interleaved pp=8 tp=8 b=1 recompute=full zero=1 "
             "chunks=2\" (keys: schedule pp tp ep dp b recompute zero chunks "
             "layout offload)"),
    cl::value_desc("setup"), cl::init(""), cl::cat(cat));
static cl::opt<double> fitThroughput(
    "fit-throughput",
    cl::desc("With --explain: first set the cluster's efficiency to the value "
             "at which the explained setup is predicted at this many tokens/s "
             "(a published run's throughput), then plan with it"),
    cl::value_desc("tokens/s"), cl::init(0), cl::cat(cat));
static cl::opt<std::string, true> progressMode(
    "progress",
    cl::desc("Progress on stderr: auto (default: on a terminal, once the "
             "search has run for a second), always, never"),
    cl::location(flags.progress), cl::init("auto"), cl::cat(cat));
static cl::opt<bool, true> compareSchedulesFlag(
    "compare",
    cl::desc(
        "Then the schedules at the explained setup (or the recommendation): "
        "bubble, all-to-all, GPU-hours, DualPipe's second copy"),
    cl::location(flags.compare), cl::init(false), cl::cat(cat));
static cl::opt<std::string, true> layoutList(
    "layouts",
    cl::desc("GPU layouts to try on more than one node, comma separated: "
             "pp-in-node, dp-in-node, ep-in-node (default: pp-in-node,"
             "dp-in-node, the runtime's)"),
    cl::location(flags.layouts), cl::init(""), cl::cat(cat));
static cl::opt<std::string, true> zeroShard(
    "zero-shard",
    cl::desc("ZeRO-1 shards dense optimizer state over: replicas (default, as "
             "pipeforge-run --zero 1) or all data-parallel ranks"),
    cl::location(flags.zeroShard), cl::init("replicas"), cl::cat(cat));
static cl::opt<std::string, true>
    routingGroupsOpt("routing-groups",
                     cl::desc("Group-limited routing G,g of every moe layer "
                              "(default: the IR's n_group, topk_group)"),
                     cl::value_desc("G,g"), cl::location(flags.routingGroups),
                     cl::init(""), cl::cat(cat));
static cl::opt<std::string, true> float8Opt(
    "float8",
    cl::desc("off (default), linear (the blocks' linear GEMMs at the FP8 "
             "rate, as torchtitan's Float8), linear-gather (ZeRO-3 gathers "
             "them in float8 too)"),
    cl::location(flags.float8), cl::init("off"), cl::cat(cat));
static cl::opt<bool, true> asyncTpOpt(
    "async-tp", cl::desc("Overlap the TP collectives with the GEMMs"),
    cl::location(flags.asyncTp), cl::init(false), cl::cat(cat));
static cl::opt<std::string, true> zeroGatherOpt(
    "zero-gather",
    cl::desc("ZeRO-3 gathers per layer and microbatch (default) or per "
             "stage and step (stage: torchtitan under PP, pipeforge-run)"),
    cl::location(flags.zeroGather), cl::init("layer"), cl::cat(cat));
static cl::opt<std::string, true> interleavedRuleOpt(
    "interleaved-rule",
    cl::desc("Interleaved 1F1B's order: auto (default: Megatron's where p "
             "divides m, else PyTorch's), megatron, pytorch (torch's "
             "ScheduleInterleaved1F1B: differs in warm-up when m = p)"),
    cl::location(flags.interleavedRule), cl::init("auto"), cl::cat(cat));
static cl::opt<std::string> outputPath("o", cl::desc("Output file"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::cat(cat));

static int fail(const Twine &msg) {
  WithColor::error(errs(), "pipeforge-plan") << msg << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  pipeforge::hideForeignOptions({&cat});
  pipeforge::parseToolCommandLine(
      argc, argv,
      "PipeForge planner: the fastest pipeline x data x tensor-parallel setup "
      "(with recomputation and ZeRO-1) that fits a cluster\n");

  flags.chunksGiven = chunkList.getNumOccurrences() > 0;
  auto parsed = plan::optionsFromFlags(flags);
  if (!parsed)
    return fail(parsed.message());
  plan::PlanOptions opts = parsed.take();

  std::optional<plan::SetupSpec> spec;
  if (explainSetup.getNumOccurrences()) {
    auto s = plan::parseSetup(explainSetup);
    if (!s)
      return fail("--explain: " + s.message());
    spec = *s;
  }

  auto cluster = plan::readClusterFile(clusterPath);
  if (!cluster)
    return fail(cluster.message());

  auto model =
      plan::loadModelCosts(flags.modelPath, seqLen, flags.bytesPerElement);
  if (!model)
    return fail(toString(model.takeError()));

  if (auto st = plan::applyRoutingGroupsFlag(*model, flags.routingGroups); !st)
    return fail(st.message());

  std::string fitLine;
  if (fitThroughput.getNumOccurrences()) {
    if (!spec)
      return fail("--fit-throughput needs --explain (the setup to fit)");
    auto eff =
        plan::fitEfficiency(*model, *cluster, opts, *spec, fitThroughput);
    if (!eff)
      return fail("--fit-throughput: " + eff.message());
    fitLine = plan::formatFitLine(*eff, cluster->efficiency, fitThroughput);
    cluster->efficiency = *eff;
  }

  // Progress: a line every half second (redrawn in place on a terminal).
  plan::ProgressLine progress(flags.progress, errs().is_displayed(),
                              [](const std::string &line) { errs() << line; });
  opts.progress = progress.callback();
  auto result = plan::plan(*model, *cluster, opts);
  progress.finish(result ? result->evaluated : 0);
  if (!result) {
    // The explained setup still says what it needs (against no ranked
    // setups) before the sweep's error.
    if (spec && flags.format == "table")
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
  out->os() << plan::formatPlanOutput(*result, *model, *cluster, opts,
                                      explained ? &*explained : nullptr,
                                      fitLine, flags.format, flags.compare);
  if (auto err = pipeforge::finishOutput(*out))
    return fail(*err);
  return 0;
}
