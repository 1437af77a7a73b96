//===- CompilePipeline.h - The compile driver: one entry, one options type ===//
//
// config.json / nn IR -> schedule-level pp IR -> rt::Program
// (docs/compile.md, docs/architecture.md), in phases:
//
//   load      config.json or nn IR -> func @model (import)
//   plan      resolve the options, choose the auto placement, check that the
//             model has the layers the stages need
//   pipeline  [nn-shard-tensor] -> pp-partition -> pp-split-backward
//             [-> pp-recompute] [-> pp-split-components] -> pp-schedule
//             -> pp-insert-comm [-> pp-insert-param-gathers]
//             [-> pp-insert-offload]
//             -> pp-verify-schedule [-> pp-fuse-overlap]
//             -> pp-component-ranges -> pp-assign-buffers
//   lower     -> rt::Program, validated as the runtime will validate it
//
// compile() runs them and can stop after any (tests, the fuzzers);
// pipeforge-compile is option parsing around it, and the pass `pp-compile`
// runs the plan and pipeline phases on the module it is given, so
//
//   pipeforge-opt model.mlir --pp-compile="schedule=auto ranks=2"
//
// runs exactly what `pipeforge-compile --schedule auto --ranks 2` runs
// before it lowers. Every option is declared once, in forEachCompileOption:
// the tools' flags and the pass's options are made from that list.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_PIPELINES_COMPILEPIPELINE_H
#define PIPEFORGE_PIPELINES_COMPILEPIPELINE_H

#include "pipeforge/Support/Status.h"
#include "pipeforge/rt/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace pipeforge::pipelines {

/// The options of the whole compile. Each field is declared as an option
/// (flag name, help, phase) once, in forEachCompileOption below.
struct CompileOptions {
  // --- load (config.json input only) ---
  /// Sequence length; 0: the model's maximum positions.
  int64_t seqLen = 0;
  /// Sequences per microbatch.
  int64_t microbatchSize = 1;

  // --- pipeline ---
  /// A schedule kind (gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe
  /// dualpipev chimera v-half v-min auto) or "none", the single-process
  /// reference.
  std::string schedule = "1f1b";
  /// Pipeline ranks; 0: 2 (none: 1).
  int ranks = 0;
  /// Microbatches per step (DualPipe: over both copies); 0: the smallest the
  /// schedule accepts (none: 1).
  int microbatches = 0;
  /// Interleaved 1F1B: model chunks per rank.
  int chunks = 2;
  /// auto: the placement, any (chooseAutoPlacement picks it), linear or v.
  std::string placement = "any";
  /// Per-rank activation limit (M_B units, <k>p, or bytes: 12GB, 512MiB):
  /// the auto scheduler's constraint, and checked by pp-verify-schedule.
  std::string memLimit;
  /// Per-rank device memory (bytes: 80GB, 512MiB): the model state at the
  /// ZeRO level (given, or the lowest of 0-3 that fits) plus the
  /// activations; what is left after the state becomes the activation
  /// limit (docs/compile.md, "Device memory"). Activations are then costed
  /// at pipeforge-run's 4 bytes per element.
  std::string deviceMemory;
  /// pp-split-components and pp-fuse-overlap: fused F&B pairs.
  bool fuseOverlap = false;
  /// nn-shard-tensor: the tensor-parallel group size (1: none) and
  /// sequence parallelism.
  int tp = 1;
  bool sequenceParallel = false;
  /// pp-recompute: "none", "full" (stash stage inputs only) or "selective"
  /// (recompute norms, activation functions and dropouts). "true" and ""
  /// are read as "full", "false" as "none".
  std::string recompute = "none";
  /// The stages (indices of a model copy's stages) `recompute` applies to;
  /// empty: every stage.
  std::vector<int64_t> recomputeStages;
  /// ZeRO level (0-3) the program is compiled for: 3 inserts the gathers
  /// and releases of each stage's parameters (pp-insert-param-gathers)
  /// after the messages; 0-2 change nothing in the program (pipeforge-run
  /// --zero shards the optimizer state and gradients). -1: not given, which
  /// the plan phase resolves to 0, or under `deviceMemory` to the lowest
  /// level that fits.
  int zero = -1;
  /// --zero 3: compute actions a stage's gather runs ahead of its first use.
  int paramPrefetch = 1;
  /// Activation offload: off (default), auto or all; auto and all insert
  /// the OFFLOAD/RELOAD actions (pp-insert-offload) after the messages and
  /// the gathers, which pipeforge-run executes.
  std::string offloadActivations = "off";

  // --- lowering ---
  /// The model's name where the IR does not record one (nn.model_name);
  /// compile() sets it to the input file's stem. Not a flag.
  std::string modelName = "model";
  int dp = 1;
  int ep = 1;
  uint64_t seed = 1234;
};

/// The phase an option belongs to: which tools and passes declare it.
enum class OptionPhase { Load, Pipeline, Lowering };

struct OptionInfo {
  const char *name;      ///< --name (tools), name= (pp-compile)
  const char *valueDesc; ///< for --help; "" for flags
  const char *help;
  OptionPhase phase;
  bool valueOptional = false; ///< a bare --name gives the empty string
};

/// Calls visit(const OptionInfo &, Field &) for every option of `o`, in the
/// order --help lists them. The one declaration of the compile options.
template <typename Visitor>
void forEachCompileOption(CompileOptions &o, Visitor &&visit) {
  using P = OptionPhase;
  visit(OptionInfo{"schedule", "kind",
                   "gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe dualpipev "
                   "chimera v-half v-min auto, or none (single-process "
                   "reference)",
                   P::Pipeline},
        o.schedule);
  visit(OptionInfo{"ranks", "n", "Pipeline ranks (default 2; none: 1)",
                   P::Pipeline},
        o.ranks);
  visit(OptionInfo{"dp", "n", "Data-parallel replicas", P::Lowering}, o.dp);
  visit(OptionInfo{"ep", "n",
                   "Expert-parallel group size: each nn.moe layer's experts "
                   "are split over this many ranks (must divide the expert "
                   "count)",
                   P::Lowering},
        o.ep);
  visit(OptionInfo{"tp", "n",
                   "Tensor-parallel group size: each layer is split "
                   "Megatron-style over this many ranks (--nn-shard-tensor, "
                   "docs/tensor-parallel.md)",
                   P::Pipeline},
        o.tp);
  visit(OptionInfo{"sequence-parallel", "",
                   "With --tp: split the activations between the sharded "
                   "layers along the sequence",
                   P::Pipeline},
        o.sequenceParallel);
  visit(OptionInfo{"recompute", "full|selective|none",
                   "Activation recomputation (--pp-recompute): full (the "
                   "default of a bare --recompute) stashes each stage's "
                   "inputs only and B recomputes the rest; selective "
                   "recomputes norms, activation functions and dropouts",
                   P::Pipeline, /*valueOptional=*/true},
        o.recompute);
  visit(OptionInfo{"recompute-stages", "s,s,...",
                   "With --recompute: only these stages (indices of a model "
                   "copy's stages; default every stage)",
                   P::Pipeline},
        o.recomputeStages);
  visit(OptionInfo{"chunks", "n",
                   "Interleaved: model chunks per rank (virtual stages; "
                   "default 2)",
                   P::Pipeline},
        o.chunks);
  visit(OptionInfo{"microbatches", "n",
                   "Microbatches per step, over both copies for DualPipe and "
                   "Chimera (default: the smallest the schedule accepts)",
                   P::Pipeline},
        o.microbatches);
  visit(OptionInfo{"microbatch-size", "b", "Sequences per microbatch",
                   P::Load},
        o.microbatchSize);
  visit(OptionInfo{"seq-len", "s",
                   "Sequence length (default: the model's maximum; "
                   "config.json input only)",
                   P::Load},
        o.seqLen);
  visit(OptionInfo{"mem-limit", "limit",
                   "Per-rank activation limit: M_B units, <k>p (k x ranks) "
                   "or bytes (12GB, 512MiB); the auto scheduler's "
                   "constraint, checked by pp-verify-schedule",
                   P::Pipeline},
        o.memLimit);
  visit(OptionInfo{"device-memory", "bytes",
                   "Per-rank memory budget (80GB, 512MiB): the model state "
                   "at the --zero level (default: the lowest of 0-3 that "
                   "fits) plus the activations, whose limit is what the "
                   "state leaves; a note gives the split",
                   P::Pipeline},
        o.deviceMemory);
  visit(OptionInfo{"placement", "any|linear|v",
                   "--schedule auto: any (default: the placement, or the "
                   "handcrafted order, that pipeforge-sched --schedule auto "
                   "picks for the model's M_B; a note names it), linear or v "
                   "(the others imply theirs)",
                   P::Pipeline},
        o.placement);
  visit(OptionInfo{"seed", "n", "Initialisation seed", P::Lowering}, o.seed);
  visit(OptionInfo{"zero", "n",
                   "ZeRO level 0-3 (default 0; with --device-memory the "
                   "lowest that fits); 3 gathers each stage's parameters "
                   "before its first compute and releases them after its "
                   "last (UNSHARD/RESHARD in the schedule, for pipeforge-run "
                   "--zero 3)",
                   P::Pipeline},
        o.zero);
  visit(OptionInfo{"param-prefetch", "n",
                   "--zero 3: compute actions each gather runs ahead of its "
                   "stage's first use (default 1)",
                   P::Pipeline},
        o.paramPrefetch);
  visit(OptionInfo{"offload-activations", "off|auto|all",
                   "Activation offload in the schedule (--pp-insert-offload): "
                   "auto (all) moves the F-stashes with at least 2 (1) "
                   "compute actions between their F and B to host memory "
                   "(OFFLOAD/RELOAD, executed by pipeforge-run on a device "
                   "backend); default off",
                   P::Pipeline},
        o.offloadActivations);
  visit(OptionInfo{"fuse-overlap", "",
                   "Split the stage bodies into per-layer components "
                   "(--pp-split-components) and fuse each overlapped F&B "
                   "pair (--pp-fuse-overlap); the program's functions carry "
                   "their component ranges",
                   P::Pipeline},
        o.fuseOverlap);
}

/// Reads options made from forEachCompileOption back into `o`: `made` holds
/// one option per field `selected` accepts, in the list's order, and
/// OptionFor<T>::type is the class of the option for a field of type T
/// (llvm::cl::opt<T> for the tools, mlir::Pass::Option<T> for the pass).
template <template <typename> class OptionFor, typename Selected>
void readCompileOptions(
    CompileOptions &o,
    const std::vector<std::unique_ptr<llvm::cl::Option>> &made,
    Selected selected) {
  size_t i = 0;
  forEachCompileOption(o, [&](const OptionInfo &info, auto &field) {
    if (!selected(info))
      return;
    using T = std::decay_t<decltype(field)>;
    const auto &opt =
        static_cast<const typename OptionFor<T>::type &>(*made[i++]);
    if constexpr (std::is_same_v<T, std::vector<int64_t>>)
      field.assign(opt.begin(), opt.end());
    else
      field = opt.getValue();
  });
}

/// The options of some phases as command-line flags (--<prefix><name>) in
/// `category`: construct before cl::ParseCommandLineOptions, then apply()
/// writes the parsed values into a CompileOptions (its other fields keep
/// theirs).
class CompileFlags {
public:
  CompileFlags(llvm::cl::OptionCategory &category,
               std::vector<OptionPhase> phases, llvm::StringRef prefix = "");
  ~CompileFlags();
  void apply(CompileOptions &o) const;

private:
  bool selected(const OptionInfo &info) const;
  std::vector<OptionPhase> phases;
  std::vector<std::unique_ptr<std::string>> names;
  std::vector<std::unique_ptr<llvm::cl::Option>> flags;
};

/// Fills the defaults and checks the options against each other (an unknown
/// schedule, ranks < 1, DualPipe with an odd rank count, too few
/// microbatches, a malformed memory limit, placement other than any, linear
/// or v, dp/ep/microbatch-size below 1, a ZeRO level other than 0-3, a
/// parameter prefetch outside [0, 64], an offload mode other than off, auto
/// or all, a device memory that is not a positive number of bytes). Errors
/// name the option.
Status resolveCompileOptions(CompileOptions &o);

/// --schedule auto --placement any (the default): chooses what to compile
/// as pipeforge-sched --schedule auto would for the model's M_B (the search
/// on the linear and the V placement and every single-copy handcrafted
/// order under the memory limit, uniform stages, times per rank's share):
/// sets o.placement to the winning search's placement, or o.schedule to the
/// handcrafted kind that won; `note` names it. When no candidate fits,
/// o.placement becomes linear and the pipeline reports why. A no-op for
/// other options.
Status chooseAutoPlacement(mlir::ModuleOp module, CompileOptions &o,
                           std::string &note);

/// Checks that the model in `module` (func @model, nn.layer on its ops) has
/// at least as many layers as the resolved options need stages: a message
/// naming the schedule and both counts, before pp-partition would fail.
Status checkModelFits(mlir::ModuleOp module, const CompileOptions &o);

/// The plan phase on a loaded module: resolveCompileOptions, the
/// --device-memory budget (the ZeRO level and the activation limit, a
/// note with the split), chooseAutoPlacement (its note, if any, to
/// `note`), checkModelFits.
Status planCompile(mlir::ModuleOp module, CompileOptions &o,
                   llvm::function_ref<void(llvm::StringRef)> note = {});

/// Adds the pipeline phase for planned options to `pm` (a module pass
/// manager).
void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &o);

/// The lower phase: `module` after the pipeline phase -> a validated
/// rt::Program. Errors are diagnostics on `module`.
mlir::FailureOr<rt::Program> lowerCompiled(mlir::ModuleOp module,
                                           const CompileOptions &o);

enum class CompilePhase { Load, Plan, Pipeline, Lower };

struct CompileResult {
  /// The module as the last phase run left it.
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// After the lower phase.
  std::optional<rt::Program> program;
};

/// Runs the phases up to `stopAfter` on `inputPath` (config.json, a model
/// directory, or nn IR; "-" reads nn IR from standard input). `o` is
/// resolved in place. Errors: the Status's message, or, where the IR has a
/// location, diagnostics already emitted on `ctx` (the Status's message is
/// then empty). `ctx` needs the dialects of registerPipeForgeDialects
/// (Dialect/Dialects.h).
Status compile(llvm::StringRef inputPath, CompileOptions &o,
               mlir::MLIRContext &ctx, llvm::SourceMgr &srcMgr,
               CompileResult &result,
               CompilePhase stopAfter = CompilePhase::Lower,
               llvm::function_ref<void(llvm::StringRef)> note = {});

/// The same from an already loaded module (the load phase is done).
Status compileModule(mlir::OwningOpRef<mlir::ModuleOp> module,
                     CompileOptions &o, CompileResult &result,
                     CompilePhase stopAfter = CompilePhase::Lower,
                     llvm::function_ref<void(llvm::StringRef)> note = {});

/// Registers the pass `pp-compile` (the plan and pipeline phases on the
/// module it runs on), with the pipeline options of forEachCompileOption.
void registerCompilePass();

/// Registers the translations `--pp-to-program` (the program file) and
/// `--pp-to-program-dump` (its listing) for mlirTranslateMain: the lower
/// phase, with the lowering options as --pp-program-dp, --pp-program-ep and
/// --pp-program-seed.
void registerToProgramTranslation();

} // namespace pipeforge::pipelines

#endif // PIPEFORGE_PIPELINES_COMPILEPIPELINE_H
