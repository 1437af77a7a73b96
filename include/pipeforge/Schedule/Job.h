//===- Job.h - One schedule job: obtain, place messages, check, simulate --===//
//
// What `pipeforge-sched` does, as a library call: generate a schedule (or
// run the automatic scheduler, or import a PyTorch CSV), insert the
// point-to-point messages for the given costs, verify it (under an optional
// memory limit), simulate it, and render the result in one of the output
// formats. The tool is option parsing plus `runScheduleJob` and
// `renderScheduleJob`; tests and other front ends call the same two.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_SCHEDULE_JOB_H
#define PIPEFORGE_SCHEDULE_JOB_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/Simulator.h"

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

namespace pipeforge::sched {

struct ScheduleJob {
  /// A schedule kind name (parseScheduleKind), or empty with `csvText`.
  std::string schedule;
  /// The contents of a PyTorch schedule CSV to import instead of generating
  /// (shared: a job's copies do not copy hundreds of megabytes).
  std::shared_ptr<const std::string> csvText;
  int ranks = 0;
  int microbatches = 0; ///< 0: the smallest the kind accepts
  int chunks = 2;       ///< model chunks per rank (interleaved)
  /// Interleaved's order rule (Generators.h): auto, megatron, pytorch.
  std::string interleavedRule = "auto";
  bool computeOnly = false;

  /// Per-stage times, as `CostModel`; tbw / tfb < 0: the sums.
  double tf = 1, tb = 1, tw = 1, tbw = -1, tfb = -1, tcomm = 0, ta2a = 0;
  /// CostModel::dispatch (pipeforge-sched --dispatch).
  double dispatch = 0;
  /// Per-stage F:B:W times, "F:B:W,F:B:W,..." one per stage of a copy
  /// (pipeforge-sched --stage-costs); empty: tf, tb, tw everywhere.
  std::string stageCosts;
  int moeLayers = 0;
  bool overlapComm = false;
  double memW = 0.5; ///< M_W / M_B; replaced by the model shape's ratio
  /// Activation offload's gap (CostModel::offloadGap; pipeforge-sched
  /// --offload-activations): 0 none.
  int offloadGap = 0;
  /// Activation offload's copy time (pipeforge-sched --tcopy, with
  /// offloadGap > 0): the schedule gets the plan as OFFLOAD/RELOAD actions
  /// (insertOffload, after the messages and gathers) and each copy of a
  /// stash takes tcopy per M_B (CostModel::hostBytesPerTime = 1 / tcopy);
  /// 0: free, no actions (memory only, as without it); > 0 without
  /// offloadGap is an error.
  double tcopy = 0;
  /// ZeRO level (0-3; pipeforge-sched --zero): 3 inserts the gathers of
  /// each stage's parameters (insertParamGathers, after the messages) with
  /// `paramPrefetch`, unless the schedule (an imported CSV) has its own.
  int zero = 0;
  int paramPrefetch = 1;
  /// The time of one UNSHARD (pipeforge-sched --tgather): the simulator's
  /// gather of a stage's parameters (CostModel::paramBytes over a
  /// gatherBytesPerTime of 1); 0: free.
  double tgather = 0;
  /// DualPipe's and Chimera's GRADREDUCE (pipeforge-sched --tgradreduce):
  /// the exchange of a stage's gradients, their bytes over a unit
  /// bandwidth (CostModel::gradBytes, gradReduceBytesPerTime 1), after one
  /// message's latency (gradReduceLatency = tcomm); a rank exchanges those
  /// of every stage it holds (DualPipe, Chimera: two), half of them under
  /// ZeRO (zero >= 1: gradReduceShare 0.5, the runtime's reduce-scatter
  /// over the pair). 0: free, as before.
  double tgradreduce = 0;

  /// Memory limit text (parseMemoryLimit), empty: none.
  std::string memLimit;
  /// Model shape for byte limits and M_W / M_B (all 0: none).
  double hidden = 0, heads = 0, seq = 0, microbatchSize = 1;
  int layers = 0; ///< transformer layers of the model; 0: one per stage

  /// --schedule auto (AutoOptions). timeLimit (pipeforge-sched
  /// --search-limit; the tool's --time-limit bounds the whole command
  /// instead, see onStep): wall-clock ceiling of the
  /// whole automatic search in seconds (>= 0; under anyPlacement both
  /// placements' searches together); the work budgets searchMoves (local-search moves) and
  /// ilpNodes (CBC nodes) decide how far the search goes, so the result
  /// does not depend on the machine unless the ceiling fires (then the
  /// result says so).
  ///
  /// Placement of --schedule auto: anyPlacement (the default) searches the
  /// linear and the V placement and tries every single-copy handcrafted
  /// order (and DualPipe with copies = 2) under the memory limit; the
  /// fastest wins and a note names it. anyPlacement = false: the search
  /// on one placement, V when vPlacement, else linear.
  bool vPlacement = false;
  bool anyPlacement = true;
  /// Parameter copies a rank may hold under anyPlacement (2 admits
  /// DualPipe's two model copies as a candidate).
  int copies = 1;
  /// true (the default, --cost-unit rank): tf, tb, tw (and tbw, tfb) are
  /// the times of one rank's share of the model (1/p of it), as M_B is its
  /// activation memory; a placement with k stages per rank per copy (V: 2,
  /// interleaved: v) runs each stage in 1/k of them, so every placement
  /// runs the same model. false (--cost-unit stage, for the paper's
  /// per-stage tables): the times are per stage, whatever the placement;
  /// placements cannot be compared then, so anyPlacement is refused.
  bool costsPerRank = true;
  double timeLimit = 10, gap = 1e-4;
  int64_t searchMoves = kDefaultSearchMoves;
  int64_t ilpNodes = kDefaultIlpNodes;
  bool useIlp = true;
  /// The intervals the simulation keeps (SimResult::intervals): All by
  /// default; intervalsForFormat(format) keeps only what that output
  /// format prints (at millions of actions, hundreds of MB fewer).
  SimIntervals intervals = SimIntervals::All;
  /// Called as each step begins ("generating", "searching", "inserting
  /// messages", "verifying", "simulating"), e.g. for a front end that bounds
  /// the whole command and names the step it stopped in. May be empty.
  std::function<void(const char *step)> onStep;
};

struct ScheduleJobResult {
  Schedule schedule;
  CostModel cost;
  SimResult sim;
  std::optional<AutoResult> autoResult;
  /// --schedule auto on any placement: the kind that won ("auto" for the
  /// search, on the schedule's placement, or a handcrafted kind's name);
  /// empty otherwise.
  std::string chosenKind;
  /// --import-csv: FSDP actions of a PyTorch compute_comms dump skipped.
  int64_t ignoredFsdpActions = 0;
  /// --import-csv: waits for a posted send (WAIT_SEND_F, WAIT_SEND_B)
  /// skipped.
  int64_t ignoredWaitActions = 0;
};

/// The automatic scheduler's options for a `--schedule auto` job: the cost
/// model (M_B = 1 per rank's share, M_W / M_B from --hidden --heads --seq or
/// --mem-w), the memory limit in M_B units, the budgets and the ceiling.
/// What `runScheduleJob` passes to autoSchedule; benchmarks/auto_table.cpp
/// uses it too, so the tool and the benchmark run the same search.
Expected<AutoOptions> autoOptionsForJob(const ScheduleJob &job);

/// Checks the job's numbers (a message naming the option on error), then
/// obtains, completes, verifies and simulates the schedule.
Expected<ScheduleJobResult> runScheduleJob(const ScheduleJob &job);

/// The output formats `renderScheduleJob` knows.
inline constexpr const char *kJobFormats[] = {"text", "json", "csv", "svg",
                                              "trace"};
bool isJobFormat(const std::string &format);
/// What `format` needs of the simulation's intervals: text the compute
/// actions' (its grid), json and csv none, svg and trace all.
SimIntervals intervalsForFormat(const std::string &format);

/// The result as `format`: text (summary, per-rank statistics and the
/// grid), json (docs/schedule-json.md; with the automatic scheduler's
/// bound), csv (PyTorch), svg or trace (Chrome).
std::string renderScheduleJob(const ScheduleJobResult &r,
                              const std::string &format);
/// The same, written to `os`; the text format streams its grid (a schedule
/// of millions of actions is not held as one string).
void renderScheduleJob(const ScheduleJobResult &r, const std::string &format,
                       std::ostream &os);

} // namespace pipeforge::sched

#endif // PIPEFORGE_SCHEDULE_JOB_H
