//===- pipeforge-sched.cpp - Pipeline schedules from the command line -----===//
//
// For users who only want schedules: generate (or import), insert messages,
// verify, simulate, and print as text, JSON, PyTorch CSV, SVG or a Chrome
// trace. Plain C++: links the schedule library only, no MLIR. The work is
// one library call (pipeforge/Schedule/Job.h); this file parses options,
// from one table of flags (Support/FlagTable.h): --flag value or
// --flag=value, a bad command line "pipeforge-sched: MESSAGE", the usage,
// exit 2.
//
//   pipeforge-sched --schedule zb-h1 --ranks 4 --microbatches 8 --format text
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Job.h"
#include "pipeforge/Schedule/Offload.h"
#include "pipeforge/Schedule/ParamGathers.h"
#include "pipeforge/Support/FlagTable.h"
#include "pipeforge/Support/InputFile.h"

#include <atomic>
#include <chrono>
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

using namespace pipeforge::sched;
using pipeforge::flags::Place;

namespace {

const char *kUsage = R"(usage: pipeforge-sched [options]: generate, verify, simulate a schedule

Schedule:
  --schedule NAME       gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe dualpipev
                        chimera v-half v-min auto (heuristic + ILP, --mem-limit)
  --ranks N             pipeline ranks
  --microbatches M      microbatches (DualPipe, Chimera: the total over both
                        directions); default: the smallest the kind accepts
  --chunks V            model chunks per rank for interleaved (default 2)
  --interleaved-rule R  megatron | pytorch | auto (default: megatron where p
                        divides m, else PyTorch's Interleaved1F1B order)
  --import-csv FILE     read a PyTorch schedule CSV (- : standard input)
  --compute-only        do not insert send/recv
  --zero Z              3: UNSHARD (gather) each stage's parameters N computes
  --param-prefetch N    before its first on a rank (default 1), RESHARD after

Cost model (time units are yours; memory in units of M_B):
  --tf T --tb T --tw T         F, B, W times (default 1) of a rank's share of
  --stage-costs F:B:W,...      the model (a V stage takes half), or per stage
  --cost-unit U                rank (default) or stage: per stage whatever
                               the placement (auto: --placement linear or v)
  --tbw T --tfb T --dispatch D BW, F&B pair (default: sums); D idle per action
  --tcomm T --tgather T        a cross-rank edge's time; an UNSHARD's; and
  --tgradreduce T              GRADREDUCE's per stage a rank holds (all 0)
  --ta2a T --moe-layers L      an MoE all-to-all's time; MoE layers per stage
  --overlap-comm               communication on its own per-rank resource,
                               F&B pairs fused (docs/schedule-library.md)
  --mem-w R                    M_W / M_B (default 0.5)
  --offload-activations O      off (default) | auto | all: memory as offload
  --tcopy T                    leaves it; T: each OFFLOAD/RELOAD's time per M_B
  --mem-limit X                per-rank activation limit: M_B, "<k>p" (k x
                               ranks M_B) or bytes (12GB, 512MiB, 1e9B; B KB
                               MB GB: powers of 1000, KiB MiB GiB: of 1024),
                               which needs --hidden --heads --seq

Automatic schedule (--schedule auto; docs/auto-scheduler.md):
  --placement P         any (default): search linear and V and try every
                        handcrafted order under --mem-limit (a note names
                        the winner); linear or v: that placement only
  --copies N            parameter copies a rank may hold under any (1, or 2:
                        DualPipe joins the comparison; default 1)
  --search-limit S      ceiling of the search in seconds (default 10, or half
                        of --time-limit); the output says if it cut it short
  --search-moves N      local-search moves tried (default 20000; 0: none)
  --ilp-nodes N --gap G CBC's node budget (default 20), relative gap (0.0001)
  --no-ilp              heuristic only

Model shape (docs/background.md; any schedule):
  --hidden H --heads A --seq S
                        derive M_W / M_B = 32h / (34h + 5as) (overrides --mem-w)
                        and M_B in bytes: s b (34h + 5as) per layer with
                        2-byte activations, times the layers on a rank
  --microbatch-size B   b, sequences per microbatch (default 1)
  --layers L            model layers, L / stages a stage (default: stages)

Output:
  --format F            text (default) json csv svg trace; --csv-dialect pytorch
  -o FILE               write to FILE instead of standard output
  --time-limit S        ceiling of the whole command, seconds > 0 (default none;
                        output included): past it an error, exit 1, no -o file
)";

[[noreturn]] void fail(const std::string &msg) {
  std::cerr << "pipeforge-sched: error: " << msg << "\n";
  std::exit(1);
}

/// The command line: the job, and the tool's own settings.
struct Options : ScheduleJob {
  std::string importCsv, format = "text", output;
  /// Words, the job's fields once parsed (parseArgs).
  std::string placement = "any", costUnit = "rank", offload = "off",
              csvDialect = "pipeforge";
  bool noIlp = false, help = false;
  /// --csv-dialect pytorch: CsvOptions::pytorchStrict.
  bool pytorchCsv = false;
  /// --time-limit given: the whole command's ceiling in seconds.
  std::optional<double> commandLimit;
  bool searchLimitGiven = false;
};

using O = Options;

// A zero ceiling is refused for every schedule: the watchdog would race the
// command (a small schedule finishing before it fires, a large one
// stopped), one behaviour for all is the error.
std::optional<std::string> setTimeLimit(O &o, const std::string &v) {
  double seconds = 0;
  if (auto err = pipeforge::parseNumberOption("--time-limit", v,
                                              {0, HUGE_VAL, true}, seconds))
    return *err + " (leave --time-limit out for no limit)";
  o.commandLimit = seconds;
  return std::nullopt;
}

std::optional<std::string> setSearchLimit(O &o, const std::string &v) {
  o.searchLimitGiven = true;
  return pipeforge::parseNumberOption("--search-limit", v, {0, HUGE_VAL},
                                      o.timeLimit);
}

std::optional<std::string> setFormat(O &o, const std::string &v) {
  if (!isJobFormat(v))
    return "--format must be text, json, csv, svg or trace, got '" + v + "'";
  o.format = v;
  return std::nullopt;
}

const double kInf = HUGE_VAL, kMaxInt = double(1 << 30);

// Every flag, in the order of the usage text (kUsage, written by hand: its
// groups say more than a list would).
const pipeforge::flags::Flag<O> kFlags[] = {
    {"--schedule", "NAME", Place::Line, &O::schedule},
    {"--ranks", "N", Place::Line, &O::ranks, 1, kMaxInt},
    {"--microbatches", "M", Place::Line, &O::microbatches, 1, kMaxInt},
    {"--chunks", "V", Place::Line, &O::chunks, 1, kMaxInt},
    {"--interleaved-rule", "R", Place::Line, &O::interleavedRule},
    {"--import-csv", "FILE", Place::Line, &O::importCsv},
    {"--compute-only", nullptr, Place::Line, &O::computeOnly},
    {"--zero", "Z", Place::Line, &O::zero, 0, 3},
    {"--param-prefetch", "N", Place::Line, &O::paramPrefetch, 0,
     kMaxParamPrefetch},
    {"--tf", "T", Place::Line, &O::tf, 0, kInf},
    {"--tb", "T", Place::Next, &O::tb, 0, kInf},
    {"--tw", "T", Place::Next, &O::tw, 0, kInf},
    {"--stage-costs", "F:B:W,...", Place::Line, &O::stageCosts},
    {"--cost-unit", "stage|rank", Place::Line, &O::costUnit, 0, 0, true},
    {"--tbw", "T", Place::Line, &O::tbw, 0, kInf},
    {"--tfb", "T", Place::Next, &O::tfb, 0, kInf},
    {"--dispatch", "D", Place::Next, &O::dispatch, 0, kInf},
    {"--tcomm", "T", Place::Line, &O::tcomm, 0, kInf},
    {"--tgather", "T", Place::Next, &O::tgather, 0, kInf},
    {"--tgradreduce", "T", Place::Line, &O::tgradreduce, 0, kInf},
    {"--ta2a", "T", Place::Line, &O::ta2a, 0, kInf},
    {"--moe-layers", "L", Place::Next, &O::moeLayers, 0,
     double(kMaxMoELayersPerStage)},
    {"--overlap-comm", nullptr, Place::Line, &O::overlapComm},
    {"--mem-w", "R", Place::Line, &O::memW, 0, 1},
    {"--offload-activations", "off|auto|all", Place::Line, &O::offload, 0, 0,
     true},
    {"--tcopy", "T", Place::Line, &O::tcopy, 0, kInf},
    {"--mem-limit", "X", Place::Line, &O::memLimit},
    {"--placement", "linear|v|any", Place::Line, &O::placement, 0, 0, true},
    {"--copies", "N", Place::Line, &O::copies, 1, kMaxInt},
    {"--search-limit", "S", Place::Line, setSearchLimit},
    {"--search-moves", "N", Place::Line, &O::searchMoves, 0, 1e15},
    {"--ilp-nodes", "N", Place::Line, &O::ilpNodes, 0, 1e9},
    {"--gap", "G", Place::Next, &O::gap, 0, kInf},
    {"--no-ilp", nullptr, Place::Line, &O::noIlp},
    {"--hidden", "H", Place::Line, &O::hidden, 1, kInf},
    {"--heads", "A", Place::Next, &O::heads, 1, kInf},
    {"--seq", "S", Place::Next, &O::seq, 1, kInf},
    {"--microbatch-size", "B", Place::Line, &O::microbatchSize, 1, kInf},
    {"--layers", "L", Place::Line, &O::layers, 1, kMaxInt},
    {"--format", "F", Place::Line, setFormat},
    {"--csv-dialect", "pipeforge|pytorch", Place::Next, &O::csvDialect, 0, 0,
     true},
    {"-o", "FILE", Place::Line, &O::output},
    {"--time-limit", "S", Place::Line, setTimeLimit},
    {"-h", nullptr, Place::Hidden, &O::help},
    {"--help", nullptr, Place::Hidden, &O::help},
};

[[noreturn]] void usage(const std::optional<std::string> &msg) {
  pipeforge::flags::exitWithUsage("pipeforge-sched", msg, kUsage);
}

/// --time-limit S bounds the whole command: a thread waits S seconds, then
/// reports the step the command is in and ends the process (exit 1),
/// removing an unfinished -o file. The library's steps are not
/// interruptible one by one; this bounds them all, output included.
class Watchdog {
public:
  Watchdog(double seconds, std::string outputPath)
      : limit(seconds), output(std::move(outputPath)) {
    auto at = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(std::min(seconds, 1e9)));
    thread = std::thread([this, at] {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_until(lock, at, [this] { return done; }))
        return;
      std::ostringstream msg;
      msg << "pipeforge-sched: error: --time-limit " << limit
          << " s reached while " << step.load()
          << "; the command stopped (a larger limit, or none, lets it "
             "finish)\n";
      std::cerr << msg.str() << std::flush;
      if (!output.empty())
        std::remove(output.c_str());
      std::_Exit(1);
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_one();
    thread.join();
  }
  void enter(const char *s) { step.store(s); }

private:
  double limit;
  std::string output;
  std::atomic<const char *> step{"starting"};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread thread;
};

Options parseArgs(int argc, char **argv) {
  Options o;
  auto err = pipeforge::flags::parseFlags(
      kFlags, argc, argv, o,
      [](const std::string &a) -> std::optional<std::string> {
        return "unexpected argument '" + a + "'";
      },
      &O::help);
  if (err || o.help)
    usage(err);
  // The words as the job's fields.
  o.useIlp = !o.noIlp;
  o.vPlacement = o.placement == "v";
  o.anyPlacement = o.placement == "any";
  o.costsPerRank = o.costUnit == "rank";
  o.offloadGap = o.offload == "auto"  ? kOffloadGapAuto
                 : o.offload == "all" ? kOffloadGapAll
                                      : 0;
  o.pytorchCsv = o.csvDialect == "pytorch";
  // The whole command has S seconds: unless told otherwise, the search
  // half of them, the rest is left for verifying, simulating and writing
  // the result.
  if (o.commandLimit && !o.searchLimitGiven)
    o.timeLimit = *o.commandLimit / 2;
  o.intervals = intervalsForFormat(o.format);
  if (o.pytorchCsv && o.format != "csv")
    usage("--csv-dialect pytorch needs --format csv, got --format " +
          o.format);
  return o;
}

/// The whole file (Support/InputFile.h): a regular file, or standard
/// input as - or /dev/stdin; a directory, a FIFO, a device or an unreadable
/// file is refused by name before it is opened.
std::string readFile(const std::string &path) {
  std::string text, error;
  if (!pipeforge::readInputFile(path, text, error))
    fail("--import-csv: " + error);
  return text;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  std::optional<Watchdog> watchdog;
  if (o.commandLimit) {
    watchdog.emplace(*o.commandLimit, o.output);
    o.onStep = [&](const char *step) { watchdog->enter(step); };
  }
  if (watchdog)
    watchdog->enter("reading the input");
  if (!o.importCsv.empty())
    o.csvText = std::make_shared<const std::string>(readFile(o.importCsv));
  auto r = runScheduleJob(o);
  if (!r)
    fail((o.importCsv.empty() ? "" : o.importCsv + ": ") + r.message());
  if (r->ignoredFsdpActions)
    std::cerr << "pipeforge-sched: note: " << o.importCsv << ": skipped "
              << r->ignoredFsdpActions
              << " FSDP action(s) (REDUCE_GRAD, WAIT_REDUCE_GRAD): a "
                 "pipeline schedule has no equivalent\n";
  if (r->ignoredWaitActions)
    std::cerr << "pipeforge-sched: note: " << o.importCsv << ": skipped "
              << r->ignoredWaitActions
              << " wait(s) for a posted send (WAIT_SEND_F, WAIT_SEND_B): a "
                 "PipeForge send completes on its own\n";
  if (o.pytorchCsv) {
    Status st = pytorchCsvSupported(r->schedule);
    if (!st.isOk())
      fail("--csv-dialect pytorch: " + st.message());
  }
  // PyTorch's dialect, or the job's rendering of the format.
  auto render = [&](std::ostream &os) {
    if (!o.pytorchCsv)
      return renderScheduleJob(*r, o.format, os);
    CsvOptions csv;
    csv.pytorchStrict = true;
    exportCsv(r->schedule, os, csv);
  };
  if (watchdog)
    watchdog->enter("writing the output");
  if (o.output.empty()) {
    render(std::cout);
    std::cout << std::flush;
    if (!std::cout)
      fail("cannot write to standard output");
    return 0;
  }
  std::ofstream f(o.output, std::ios::binary);
  render(f);
  f.close();
  if (!f)
    fail("cannot write '" + o.output + "'");
  return 0;
}
