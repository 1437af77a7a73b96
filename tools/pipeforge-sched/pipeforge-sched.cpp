//===- pipeforge-sched.cpp - Pipeline schedules from the command line -----===//
//
// For users who only want schedules: generate (or import), insert messages,
// verify, simulate, and print as text, JSON, PyTorch CSV, SVG or a Chrome
// trace. Plain C++: links the schedule library only, no MLIR.
//
//   pipeforge-sched --schedule zb-h1 --ranks 4 --microbatches 8 --format text
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/MemoryLimit.h"
#include "pipeforge/Schedule/Simulator.h"
#include "pipeforge/Schedule/Verify.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

using namespace pipeforge::sched;

namespace {

const char *kUsage = R"(usage: pipeforge-sched [options]

Generate, verify and simulate a pipeline schedule.

Schedule:
  --schedule NAME       gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe dualpipev
                        auto (automatic: heuristic + ILP under --mem-limit)
  --ranks N             pipeline ranks
  --microbatches M      microbatches (DualPipe: the total over both
                        directions); default: the smallest the kind accepts
  --chunks V            model chunks per rank for interleaved (default 2)
  --import-csv FILE     read a PyTorch schedule CSV instead of generating
  --compute-only        do not insert send/recv

Cost model (time units are yours; memory in units of M_B):
  --tf T  --tb T  --tw T       times of F, B and W (default 1)
  --tbw T                      time of a full backward BW (default: tb + tw)
  --tfb T                      time of an overlapped F&B pair (default: sum)
  --tcomm T                    time on every cross-rank edge (default 0)
  --ta2a T                     time of one all-to-all (MoE dispatch or
                               combine) per MoE layer and microbatch
  --moe-layers L               MoE layers per stage (default 0)
  --overlap-comm               communication on its own per-rank resource;
                               overlapped F&B pairs fused (docs/schedule-
                               library.md, "Communication model")
  --mem-w R                    M_W / M_B (default 0.5)
  --mem-limit X                per-rank activation limit: a number of M_B,
                               "<k>p" for k x ranks M_B (e.g. 2p), or bytes
                               (12GB, 512MiB, 1e9B; suffixes B KB MB GB are
                               powers of 1000, KiB MiB GiB of 1024), which
                               needs --hidden --heads --seq

Automatic schedule (--schedule auto; docs/auto-scheduler.md):
  --placement P         linear (default) or v (auto ZB-V)
  --time-limit S        ILP time limit in seconds (default 10)
  --gap G               ILP relative gap target (default 0.0001)
  --no-ilp              heuristic only

Model shape (DOMAIN.md; any schedule):
  --hidden H --heads A --seq S
                        derive M_W / M_B = 32h / (34h + 5as) (overrides --mem-w)
                        and M_B in bytes: s b (34h + 5as) per layer with
                        2-byte activations, times the layers on a rank
  --microbatch-size B   b, sequences per microbatch (default 1)
  --layers L            transformer layers of the model (default: one per
                        stage, L = stages); a stage holds L / stages of them

Output:
  --format F            text (default) json csv svg trace
  -o FILE               write to FILE instead of standard output
)";

struct Options {
  std::string schedule, importCsv, format = "text", output;
  int ranks = 0, microbatches = 0, chunks = 2;
  bool computeOnly = false;
  bool overlapComm = false;
  double ta2a = 0;
  int moeLayers = 0;
  double tf = 1, tb = 1, tw = 1, tbw = -1, tfb = -1, tcomm = 0, memW = 0.5;
  std::string memLimit;
  // --schedule auto
  std::string placement = "linear";
  double timeLimit = 10, gap = 1e-4;
  bool noIlp = false;
  double hidden = 0, heads = 0, seq = 0;
  double microbatchSize = 1;
  int layers = 0; ///< 0: one per stage
};

[[noreturn]] void usageError(const std::string &msg) {
  std::cerr << "pipeforge-sched: error: " << msg << "\n"
            << "(run with --help for usage)\n";
  std::exit(2);
}

[[noreturn]] void fail(const std::string &msg) {
  std::cerr << "pipeforge-sched: error: " << msg << "\n";
  std::exit(1);
}

double parseNumber(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0')
    usageError(flag + " expects a number, got '" + v + "'");
  return d;
}

int parseInt(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0 || n > (1L << 30))
    usageError(flag + " expects a non-negative integer, got '" + v + "'");
  return static_cast<int>(n);
}

Options parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (a == "--compute-only") {
      o.computeOnly = true;
      continue;
    }
    if (a == "--overlap-comm") {
      o.overlapComm = true;
      continue;
    }
    if (a == "--no-ilp") {
      o.noIlp = true;
      continue;
    }
    // --flag=value or --flag value
    std::string flag = a, value;
    if (size_t eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
    } else {
      if (i + 1 >= argc)
        usageError(a + " expects a value");
      value = argv[++i];
    }
    if (flag == "--schedule")
      o.schedule = value;
    else if (flag == "--import-csv")
      o.importCsv = value;
    else if (flag == "--format")
      o.format = value;
    else if (flag == "-o")
      o.output = value;
    else if (flag == "--ranks")
      o.ranks = parseInt(flag, value);
    else if (flag == "--microbatches")
      o.microbatches = parseInt(flag, value);
    else if (flag == "--chunks")
      o.chunks = parseInt(flag, value);
    else if (flag == "--tf")
      o.tf = parseNumber(flag, value);
    else if (flag == "--tb")
      o.tb = parseNumber(flag, value);
    else if (flag == "--tw")
      o.tw = parseNumber(flag, value);
    else if (flag == "--tbw")
      o.tbw = parseNumber(flag, value);
    else if (flag == "--tfb")
      o.tfb = parseNumber(flag, value);
    else if (flag == "--tcomm")
      o.tcomm = parseNumber(flag, value);
    else if (flag == "--ta2a")
      o.ta2a = parseNumber(flag, value);
    else if (flag == "--moe-layers")
      o.moeLayers = parseInt(flag, value);
    else if (flag == "--mem-w")
      o.memW = parseNumber(flag, value);
    else if (flag == "--mem-limit")
      o.memLimit = value;
    else if (flag == "--placement")
      o.placement = value;
    else if (flag == "--time-limit")
      o.timeLimit = parseNumber(flag, value);
    else if (flag == "--gap")
      o.gap = parseNumber(flag, value);
    else if (flag == "--hidden")
      o.hidden = parseNumber(flag, value);
    else if (flag == "--heads")
      o.heads = parseNumber(flag, value);
    else if (flag == "--seq")
      o.seq = parseNumber(flag, value);
    else if (flag == "--microbatch-size")
      o.microbatchSize = parseNumber(flag, value);
    else if (flag == "--layers")
      o.layers = parseInt(flag, value);
    else
      usageError("unknown option '" + a + "'");
  }
  for (auto [name, v] : {std::pair<const char *, double>{"--tf", o.tf},
                         {"--tb", o.tb},
                         {"--tw", o.tw},
                         {"--tcomm", o.tcomm},
                         {"--ta2a", o.ta2a}})
    if (v < 0)
      usageError(std::string(name) + " must be >= 0");
  if (o.memW < 0 || o.memW > 1)
    usageError("--mem-w must be in [0, 1]");
  int shape = (o.hidden > 0) + (o.heads > 0) + (o.seq > 0);
  if (shape != 0 && shape != 3)
    usageError("--hidden, --heads and --seq go together (all > 0)");
  if (shape == 3)
    o.memW = memWRatio(o.hidden, o.heads, o.seq);
  if (!(o.microbatchSize > 0))
    usageError("--microbatch-size must be > 0");
  if (!o.memLimit.empty())
    if (auto l = parseMemoryLimit(o.memLimit); !l)
      usageError("--mem-limit: " + l.message());
  if (o.placement != "linear" && o.placement != "v")
    usageError("--placement expects linear or v, got '" + o.placement + "'");
  if (o.timeLimit < 0 || o.gap < 0)
    usageError("--time-limit and --gap must be >= 0");
  return o;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// M_B in bytes (one microbatch's activations on a rank's share of the
/// model: layers / ranks layers of s b (34h + 5as) bytes), or 0 without a
/// model shape.
double bytesPerMB(const Options &o, int ranks, int stages) {
  if (!(o.hidden > 0))
    return 0;
  double layers = o.layers > 0 ? o.layers : stages;
  return activationBytesPerLayer(o.hidden, o.heads, o.seq, o.microbatchSize) *
         layers / ranks;
}

/// --mem-limit in M_B units: "2p" -> 2 * ranks, "3.5" -> 3.5, "12GB" -> 12e9
/// bytes / M_B in bytes (docs/auto-scheduler.md).
double parseMemLimit(const Options &o, int ranks, int stages) {
  auto l = parseMemoryLimit(o.memLimit);
  if (!l)
    usageError("--mem-limit: " + l.message());
  auto v = resolveMemoryLimit(
      *l, ranks, bytesPerMB(o, ranks, stages),
      "give --hidden, --heads and --seq (and --microbatch-size, --layers if "
      "not 1 and one per stage) so that M_B = s b (34h + 5as) bytes per "
      "layer is known");
  if (!v)
    usageError("--mem-limit: " + v.message());
  return *v;
}

std::optional<AutoResult> autoResult;

Schedule obtainSchedule(const Options &o) {
  if (!o.importCsv.empty()) {
    if (!o.schedule.empty())
      usageError("give either --schedule or --import-csv, not both");
    CsvImportOptions io;
    io.name = "csv";
    auto s = importCsv(readFile(o.importCsv), io);
    if (!s)
      fail(o.importCsv + ": " + s.message());
    return s.take();
  }
  if (o.schedule.empty())
    usageError("--schedule is required (one of: gpipe 1f1b interleaved zb-h1 "
               "zb-h2 zbv dualpipe dualpipev)");
  auto kind = parseScheduleKind(o.schedule);
  if (!kind)
    usageError("unknown schedule '" + o.schedule +
               "'; expected one of: gpipe 1f1b interleaved zb-h1 zb-h2 zbv "
               "dualpipe dualpipev auto");
  if (o.ranks < 1)
    usageError("--ranks is required (>= 1)");
  if (*kind == ScheduleKind::Auto) {
    if (o.microbatches < 1)
      usageError("--schedule auto needs --microbatches (>= 1)");
    AutoOptions ao;
    ao.ranks = o.ranks;
    ao.microbatches = o.microbatches;
    ao.vShape = o.placement == "v";
    ao.cost.tf = o.tf;
    ao.cost.tb = o.tb;
    ao.cost.tw = o.tw;
    ao.cost.tcomm = o.tcomm;
    // M_B: one microbatch on a rank's share of a p-way split (a V stage is
    // half of it), as for every other schedule below.
    ao.cost.memB = ao.vShape ? 0.5 : 1.0;
    ao.cost.memW = ao.cost.memB * o.memW;
    if (!o.memLimit.empty())
      ao.memLimit = parseMemLimit(o, o.ranks, ao.vShape ? 2 * o.ranks : o.ranks);
    ao.useIlp = !o.noIlp;
    ao.ilpTimeLimit = o.timeLimit;
    ao.ilpGap = o.gap;
    auto r = autoSchedule(ao);
    if (!r) {
      std::string msg = r.message();
      if (auto l = parseMemoryLimit(o.memLimit); l && l->isBytes())
        msg += " (in M_B units; --mem-limit " + o.memLimit + " = " +
               formatBytes(l->value) + ", 1 M_B = " +
               formatBytes(bytesPerMB(o, ao.ranks,
                                      ao.vShape ? 2 * ao.ranks : ao.ranks)) +
               ")";
      fail(msg);
    }
    autoResult = r.take();
    return autoResult->schedule;
  }
  GenOptions g;
  g.ranks = o.ranks;
  g.chunksPerRank = o.chunks;
  g.microbatches = o.microbatches > 0
                       ? o.microbatches
                       : minMicrobatches(*kind, o.ranks, o.chunks);
  auto s = generate(*kind, g);
  if (!s)
    fail(s.message());
  return s.take();
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  if (o.format != "text" && o.format != "json" && o.format != "csv" &&
      o.format != "svg" && o.format != "trace")
    usageError("unknown --format '" + o.format +
               "'; expected text, json, csv, svg or trace");

  Schedule s = obtainSchedule(o);

  // Memory in units of M_B: the activation of one microbatch on a rank's
  // share of a p-way split, so a stage of an S-stage copy is p/S of it.
  CostModel cost;
  cost.tf = o.tf;
  cost.tb = o.tb;
  cost.tw = o.tw;
  cost.tbw = o.tbw;
  cost.tfb = o.tfb;
  cost.tcomm = o.tcomm;
  cost.tA2A = o.ta2a;
  cost.moeLayersPerStage = o.moeLayers;
  cost.overlapComm = o.overlapComm;
  cost.memB = double(s.numRanks()) / s.placement.numStages;
  cost.memW = cost.memB * o.memW;

  // Messages are placed for the costs the schedule will be simulated with.
  if (!o.computeOnly && !s.hasComm)
    if (Status st = insertComm(s, cost); !st)
      fail("cannot insert messages: " + st.message());

  VerifyOptions vo;
  vo.cost = cost;
  if (!o.memLimit.empty())
    vo.memLimit = parseMemLimit(o, s.numRanks(), s.placement.numStages);
  if (Status st = verify(s, vo); !st)
    fail("invalid schedule: " + st.message());

  auto sim = simulate(s, cost);
  if (!sim)
    fail("simulation failed: " + sim.message());

  std::string out;
  if (o.format == "json") {
    out = exportJson(s, &*sim, cost);
    if (autoResult) {
      auto j = nlohmann::ordered_json::parse(out);
      j["summary"]["lower_bound"] = autoResult->bound.zbCost;
      j["summary"]["lower_bound_makespan"] = autoResult->bound.makespan;
      j["summary"]["gap"] = autoResult->gap;
      j["summary"]["method"] = autoResult->method;
      out = j.dump(2) + "\n";
    }
  } else if (o.format == "csv") {
    out = exportCsv(s);
  } else if (o.format == "svg") {
    out = exportSvg(s, *sim);
  } else if (o.format == "trace") {
    out = exportTrace(s, *sim);
  } else {
    char line[256];
    std::snprintf(line, sizeof line,
                  "%s: %d ranks, %d stages x %d cop%s, %d microbatches\n"
                  "makespan %.4f  bubble_rate %.4f  zb_bubble_rate %.4f\n",
                  s.name.c_str(), s.numRanks(), s.placement.numStages,
                  s.placement.numCopies, s.placement.numCopies == 1 ? "y" : "ies",
                  s.numMicrobatches, sim->makespan, sim->bubbleRate,
                  sim->zbBubbleRate);
    out = line;
    if (autoResult) {
      const AutoResult &a = *autoResult;
      std::snprintf(line, sizeof line,
                    "auto: method %s  zb_cost %.4f  lower_bound %.4f  gap "
                    "%.2f%%  (makespan lower bound %.4f)\n",
                    a.method.c_str(), a.zbCost, a.bound.zbCost, 100 * a.gap,
                    a.bound.makespan);
      out += line;
      if (a.ilpRan) {
        std::snprintf(line, sizeof line,
                      "auto: ILP %s, bound within its model %.4f\n",
                      a.ilpOptimal ? "optimal" : "stopped", a.ilpBound);
        out += line;
      }
      if (!a.note.empty())
        out += "auto: " + a.note + "\n";
    }
    for (size_t r = 0; r < sim->ranks.size(); ++r) {
      const RankStats &rs = sim->ranks[r];
      std::snprintf(line, sizeof line,
                    "rank %zu: busy %.4f  idle %.4f  peak_activation %.4f M_B\n",
                    r, rs.busy, sim->makespan - rs.busy, rs.peakMemory);
      out += line;
      if (rs.exposedP2P > 0 || rs.exposedA2A > 0) {
        std::snprintf(line, sizeof line,
                      "rank %zu: exposed p2p %.4f  a2a %.4f  (comm busy "
                      "%.4f)\n",
                      r, rs.exposedP2P, rs.exposedA2A, rs.commBusy);
        out += line;
      }
    }
    out += exportTextGrid(s, *sim);
  }

  if (o.output.empty()) {
    std::cout << out;
  } else {
    std::ofstream f(o.output, std::ios::binary);
    if (!f || !(f << out))
      fail("cannot write '" + o.output + "'");
  }
  return 0;
}
