//===- pipeforge-sched.cpp - Pipeline schedules from the command line -----===//
//
// For users who only want schedules: generate (or import), insert messages,
// verify, simulate, and print as text, JSON, PyTorch CSV, SVG or a Chrome
// trace. Plain C++: links the schedule library only, no MLIR. The work is
// one library call (pipeforge/Schedule/Job.h); this file parses options.
//
//   pipeforge-sched --schedule zb-h1 --ranks 4 --microbatches 8 --format text
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Job.h"
#include "pipeforge/Schedule/Offload.h"
#include "pipeforge/Schedule/ParamGathers.h"
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
  --tcomm T --tgather T        a cross-rank edge's time; an UNSHARD's (both 0)
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
  --layers L            transformer layers of the model (default: one per
                        stage, L = stages); a stage holds L / stages of them

Output:
  --format F            text (default) json csv svg trace; --csv-dialect pytorch
  -o FILE               write to FILE instead of standard output
  --time-limit S        ceiling of the whole command, seconds > 0 (default none;
                        output included): past it an error, exit 1, no -o file
)";

[[noreturn]] void usageError(const std::string &msg) {
  std::cerr << "pipeforge-sched: error: " << msg << "\n"
            << "(run with --help for usage)\n";
  std::exit(2);
}

[[noreturn]] void fail(const std::string &msg) {
  std::cerr << "pipeforge-sched: error: " << msg << "\n";
  std::exit(1);
}

/// A numeric option: where it goes and the closed range it must lie in.
struct NumberOption {
  const char *flag;
  double *real = nullptr;
  int *integer = nullptr;
  double lo, hi;
};

void parseNumber(const NumberOption &n, const std::string &v) {
  char *end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  bool ok = !v.empty() && *end == '\0' && std::isfinite(d) && d >= n.lo &&
            d <= n.hi && (!n.integer || d == std::floor(d));
  if (!ok) {
    std::ostringstream range;
    range.precision(12);
    if (std::isinf(n.hi))
      range << ">= " << n.lo;
    else
      range << "in [" << n.lo << ", " << n.hi << "]";
    usageError(std::string(n.flag) + " expects " +
               (n.integer ? "an integer" : "a finite number") + " " +
               range.str() + ", got '" + v + "'");
  }
  if (n.integer)
    *n.integer = int(d);
  else
    *n.real = d;
}

struct Options {
  ScheduleJob job;
  std::string importCsv, format = "text", output;
  /// --csv-dialect pytorch: CsvOptions::pytorchStrict.
  bool pytorchCsv = false;
  /// --time-limit given: the whole command's ceiling in seconds.
  std::optional<double> commandLimit;
};

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
  ScheduleJob &j = o.job;
  std::string placement = "any", costUnit = "rank";
  const double inf = HUGE_VAL, maxInt = double(1 << 30);
  double searchMoves = double(j.searchMoves), ilpNodes = double(j.ilpNodes);
  double commandLimit = 0;
  bool searchLimitGiven = false;
  const NumberOption numbers[] = {
      {"--ranks", nullptr, &j.ranks, 1, maxInt},
      {"--microbatches", nullptr, &j.microbatches, 1, maxInt},
      {"--chunks", nullptr, &j.chunks, 1, maxInt},
      {"--copies", nullptr, &j.copies, 1, maxInt},
      {"--tf", &j.tf, nullptr, 0, inf},
      {"--tb", &j.tb, nullptr, 0, inf},
      {"--tw", &j.tw, nullptr, 0, inf},
      {"--tbw", &j.tbw, nullptr, 0, inf},
      {"--tfb", &j.tfb, nullptr, 0, inf},
      {"--tcomm", &j.tcomm, nullptr, 0, inf},
      {"--dispatch", &j.dispatch, nullptr, 0, inf},
      {"--tgather", &j.tgather, nullptr, 0, inf},
      {"--tcopy", &j.tcopy, nullptr, 0, inf},
      {"--ta2a", &j.ta2a, nullptr, 0, inf},
      {"--moe-layers", nullptr, &j.moeLayers, 0,
       double(kMaxMoELayersPerStage)},
      {"--mem-w", &j.memW, nullptr, 0, 1},
      {"--search-limit", &j.timeLimit, nullptr, 0, inf},
      {"--time-limit", &commandLimit, nullptr, 0, inf},
      {"--gap", &j.gap, nullptr, 0, inf},
      {"--search-moves", &searchMoves, nullptr, 0, 1e15},
      {"--ilp-nodes", &ilpNodes, nullptr, 0, 1e9},
      {"--hidden", &j.hidden, nullptr, 1, inf},
      {"--heads", &j.heads, nullptr, 1, inf},
      {"--seq", &j.seq, nullptr, 1, inf},
      {"--microbatch-size", &j.microbatchSize, nullptr, 1, inf},
      {"--layers", nullptr, &j.layers, 1, maxInt},
      {"--zero", nullptr, &j.zero, 0, 3},
      {"--param-prefetch", nullptr, &j.paramPrefetch, 0,
       double(kMaxParamPrefetch)},
  };
  const std::pair<const char *, bool *> switches[] = {
      {"--compute-only", &j.computeOnly}, {"--overlap-comm", &j.overlapComm}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (a == "--no-ilp") {
      j.useIlp = false;
      continue;
    }
    bool isSwitch = false;
    for (auto [flag, target] : switches)
      if (a == flag)
        *target = isSwitch = true;
    if (isSwitch)
      continue;
    // --flag=value or --flag value; an unknown flag is named as such
    // before its value is looked for.
    std::string flag = a, value;
    size_t eq = a.rfind("--", 0) == 0 ? a.find('=') : std::string::npos;
    if (eq != std::string::npos)
      flag = a.substr(0, eq);
    const NumberOption *number = nullptr;
    for (const NumberOption &n : numbers)
      if (flag == n.flag)
        number = &n;
    static const char *const stringFlags[] = {
        "--schedule",  "--import-csv", "--format",           "-o",
        "--mem-limit", "--placement",  "--interleaved-rule", "--cost-unit",
        "--csv-dialect", "--offload-activations", "--stage-costs"};
    if (!number && std::find(std::begin(stringFlags), std::end(stringFlags),
                             flag) == std::end(stringFlags))
      usageError("unknown option '" + a + "'");
    if (eq != std::string::npos)
      value = a.substr(eq + 1);
    else if (i + 1 >= argc)
      usageError(a + " expects a value");
    else
      value = argv[++i];
    if (number) {
      parseNumber(*number, value);
      // A zero ceiling is refused for every schedule: the watchdog would
      // race the command (a small schedule finishing before it fires, a
      // large one stopped), one behaviour for all is the error.
      if (flag == "--time-limit" && commandLimit == 0)
        usageError("--time-limit expects a number of seconds > 0, got '" +
                   value + "' (leave --time-limit out for no limit)");
      if (flag == "--time-limit")
        o.commandLimit = commandLimit;
      searchLimitGiven |= flag == "--search-limit";
    } else if (flag == "--schedule")
      j.schedule = value;
    else if (flag == "--import-csv")
      o.importCsv = value;
    else if (flag == "--stage-costs")
      j.stageCosts = value;
    else if (flag == "--format")
      o.format = value;
    else if (flag == "-o")
      o.output = value;
    else if (flag == "--mem-limit")
      j.memLimit = value;
    else if (flag == "--placement")
      placement = value;
    else if (flag == "--interleaved-rule")
      j.interleavedRule = value;
    else if (flag == "--cost-unit")
      costUnit = value;
    else if (flag == "--offload-activations") {
      if (value != "off" && value != "auto" && value != "all")
        usageError("--offload-activations expects off, auto or all, got '" +
                   value + "'");
      j.offloadGap = value == "auto"  ? kOffloadGapAuto
                     : value == "all" ? kOffloadGapAll
                                      : 0;
    } else if (flag == "--csv-dialect") {
      if (value != "pipeforge" && value != "pytorch")
        usageError("--csv-dialect expects pipeforge or pytorch, got '" +
                   value + "'");
      o.pytorchCsv = value == "pytorch";
    }
  }
  if (searchMoves != std::floor(searchMoves) || ilpNodes != std::floor(ilpNodes))
    usageError("--search-moves and --ilp-nodes expect integers");
  j.searchMoves = int64_t(searchMoves);
  j.ilpNodes = int64_t(ilpNodes);
  if (placement != "linear" && placement != "v" && placement != "any")
    usageError("--placement expects linear, v or any, got '" + placement +
               "'");
  j.vPlacement = placement == "v";
  j.anyPlacement = placement == "any";
  if (costUnit != "stage" && costUnit != "rank")
    usageError("--cost-unit expects stage or rank, got '" + costUnit + "'");
  j.costsPerRank = costUnit == "rank";
  // The whole command has S seconds: unless told otherwise, the search
  // half of them, the rest is left for verifying, simulating and writing
  // the result.
  if (o.commandLimit && !searchLimitGiven)
    j.timeLimit = *o.commandLimit / 2;
  if (!isJobFormat(o.format))
    usageError("unknown --format '" + o.format +
               "'; expected text, json, csv, svg or trace");
  j.intervals = intervalsForFormat(o.format);
  if (o.pytorchCsv && o.format != "csv")
    usageError("--csv-dialect pytorch needs --format csv, got --format " +
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
    o.job.onStep = [&](const char *step) { watchdog->enter(step); };
  }
  if (watchdog)
    watchdog->enter("reading the input");
  if (!o.importCsv.empty())
    o.job.csvText = std::make_shared<const std::string>(readFile(o.importCsv));
  auto r = runScheduleJob(o.job);
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
