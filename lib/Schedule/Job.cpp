//===- Job.cpp - One schedule job: obtain, place messages, check, simulate ===//
//
// See Job.h. The order of the steps matters: messages are placed for the
// costs the schedule will be simulated with, and the memory limit is
// resolved against the schedule's own placement (a V placement has two
// stages per rank, each half of a rank's share of the model).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Job.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/JsonWriter.h"
#include "pipeforge/Schedule/MemoryLimit.h"
#include "pipeforge/Schedule/Offload.h"
#include "pipeforge/Schedule/ParamGathers.h"
#include "pipeforge/Schedule/Verify.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <ostream>
#include <sstream>

namespace pipeforge::sched {

namespace {

/// M_B in bytes (one microbatch's activations on a rank's share of the
/// model: layers / ranks layers of s b (34h + 5as) bytes), or 0 without a
/// model shape.
double bytesPerMB(const ScheduleJob &j, int ranks, int stages) {
  if (!(j.hidden > 0))
    return 0;
  double layers = j.layers > 0 ? j.layers : stages;
  return activationBytesPerLayer(j.hidden, j.heads, j.seq, j.microbatchSize) *
         layers / ranks;
}

/// The memory limit in M_B units: "2p" -> 2 * ranks, "3.5" -> 3.5, "12GB"
/// -> 12e9 bytes / M_B in bytes (docs/auto-scheduler.md).
Expected<double> memLimitInMB(const ScheduleJob &j, int ranks, int stages) {
  auto l = parseMemoryLimit(j.memLimit);
  if (!l)
    return Status::error("--mem-limit: " + l.message());
  auto v = resolveMemoryLimit(
      *l, ranks, bytesPerMB(j, ranks, stages),
      "give --hidden, --heads and --seq (and --microbatch-size, --layers if "
      "not 1 and one per stage) so that M_B = s b (34h + 5as) bytes per "
      "layer is known");
  if (!v)
    return Status::error("--mem-limit: " + v.message());
  return *v;
}

/// --cost-unit rank: a stage's share of the given per-rank times (ranks /
/// stages per copy, as M_B's); 1 with per-stage times.
double timeScale(const ScheduleJob &j, int ranks, int stagesPerCopy) {
  return j.costsPerRank ? double(ranks) / stagesPerCopy : 1.0;
}

void scaleTimes(CostModel &c, double f) {
  c.tf *= f;
  c.tb *= f;
  c.tw *= f;
  for (std::vector<double> *v : {&c.tfStage, &c.tbStage, &c.twStage})
    for (double &t : *v)
      t *= f;
  if (c.tbw >= 0)
    c.tbw *= f;
  if (c.tfb >= 0)
    c.tfb *= f;
}

Expected<std::array<std::vector<double>, 3>>
parseStageCosts(const std::string &text, int stages) {
  std::array<std::vector<double>, 3> out;
  size_t at = 0;
  int s = 0;
  while (at <= text.size()) {
    size_t end = text.find(',', at);
    std::string item =
        text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    double v[3];
    char tail = 0;
    if (std::sscanf(item.c_str(), "%lf:%lf:%lf%c", &v[0], &v[1], &v[2],
                    &tail) != 3)
      return Status::error("--stage-costs: stage " + std::to_string(s) +
                           ": expected F:B:W times, got '" + item + "'");
    for (int k = 0; k < 3; ++k) {
      if (!(v[k] >= 0) || !std::isfinite(v[k]))
        return Status::error("--stage-costs: stage " + std::to_string(s) +
                             ": times must be finite and >= 0");
      out[size_t(k)].push_back(v[k]);
    }
    ++s;
    if (end == std::string::npos)
      break;
    at = end + 1;
  }
  if (s != stages)
    return Status::error("--stage-costs: " + std::to_string(s) +
                         " stages given, the schedule has " +
                         std::to_string(stages) + " per copy");
  return out;
}

Status checkJob(const ScheduleJob &j) {
  for (auto [name, v] : {std::pair<const char *, double>{"--tf", j.tf},
                         {"--tb", j.tb},
                         {"--tw", j.tw},
                         {"--tcomm", j.tcomm},
                         {"--dispatch", j.dispatch},
                         {"--ta2a", j.ta2a},
                         {"--tgather", j.tgather},
                         {"--tgradreduce", j.tgradreduce},
                         {"--tcopy", j.tcopy}})
    if (!(v >= 0) || !std::isfinite(v))
      return Status::error(std::string(name) + " must be finite and >= 0");
  for (auto [name, v] :
       {std::pair<const char *, double>{"--tbw", j.tbw}, {"--tfb", j.tfb}})
    if (std::isnan(v) || std::isinf(v))
      return Status::error(std::string(name) + " must be finite");
  if (!(j.memW >= 0 && j.memW <= 1))
    return Status::error("--mem-w must be in [0, 1]");
  int shape = (j.hidden > 0) + (j.heads > 0) + (j.seq > 0);
  if (shape != 0 && shape != 3)
    return Status::error("--hidden, --heads and --seq go together (all > 0)");
  if (!(j.microbatchSize > 0) || !std::isfinite(j.microbatchSize))
    return Status::error("--microbatch-size must be finite and > 0");
  if (!j.memLimit.empty())
    if (auto l = parseMemoryLimit(j.memLimit); !l)
      return Status::error("--mem-limit: " + l.message());
  if (j.copies < 1 || j.copies > 2)
    return Status::error("--copies must be 1 or 2 (DualPipe's two model "
                         "copies)");
  if (!(j.timeLimit >= 0) || !(j.gap >= 0))
    return Status::error("--time-limit and --gap must be >= 0");
  if (j.searchMoves < 0 || j.ilpNodes < 0)
    return Status::error("--search-moves and --ilp-nodes must be >= 0");
  // Costs whose sums overflow are refused before any schedule is built:
  // the estimate of a linear placement's actions (F, B, W and a send and a
  // receive each way per stage and microbatch); the schedule itself is
  // checked again once built (runOneScheduleJob).
  if (j.ranks > 0) {
    CostModel c;
    c.tf = j.tf;
    c.tb = j.tb;
    c.tw = j.tw;
    c.tbw = j.tbw;
    c.tfb = j.tfb;
    c.tcomm = j.tcomm;
    c.tA2A = j.ta2a;
    c.moeLayersPerStage = j.moeLayers;
    int64_t m = std::max(j.microbatches, 1);
    if (Status st = checkCosts(c, j.ranks, 7 * int64_t(j.ranks) * m); !st)
      return st;
  }
  return Status::ok();
}

Expected<Schedule> obtainSchedule(const ScheduleJob &j,
                                  std::optional<AutoResult> &autoResult,
                                  int64_t &ignoredFsdp,
                                  int64_t &ignoredWaits) {
  if (j.csvText) {
    if (!j.schedule.empty())
      return Status::error("give either --schedule or --import-csv, not both");
    CsvImportOptions io;
    io.name = "csv";
    io.ignoredFsdpActions = &ignoredFsdp;
    io.ignoredWaitActions = &ignoredWaits;
    return importCsv(*j.csvText, io);
  }
  if (j.schedule.empty())
    return Status::error("--schedule is required (one of: gpipe 1f1b "
                         "interleaved zb-h1 zb-h2 zbv dualpipe dualpipev "
                         "chimera v-half v-min auto)");
  auto kind = parseScheduleKind(j.schedule);
  if (!kind)
    return Status::error("unknown schedule '" + j.schedule +
                         "'; expected one of: gpipe 1f1b interleaved zb-h1 "
                         "zb-h2 zbv dualpipe dualpipev chimera v-half v-min "
                         "auto");
  if (j.ranks < 1)
    return Status::error("--ranks is required (>= 1)");
  if (*kind != ScheduleKind::Auto) {
    GenOptions g;
    g.ranks = j.ranks;
    g.chunksPerRank = j.chunks;
    auto rule = parseInterleavedRule(j.interleavedRule);
    if (!rule)
      return rule.status();
    g.interleavedRule = *rule;
    g.microbatches = j.microbatches > 0
                         ? j.microbatches
                         : minMicrobatches(*kind, j.ranks, j.chunks);
    return generate(*kind, g);
  }
  auto ao = autoOptionsForJob(j);
  if (!ao)
    return ao.status();
  int stages = ao->vShape ? 2 * j.ranks : j.ranks;
  auto r = autoSchedule(*ao);
  if (!r) {
    std::string msg = r.message();
    if (auto l = parseMemoryLimit(j.memLimit); l && l->isBytes())
      msg += " (in M_B units; --mem-limit " + j.memLimit + " = " +
             formatBytes(l->value) +
             ", 1 M_B = " + formatBytes(bytesPerMB(j, j.ranks, stages)) + ")";
    return Status::error(msg);
  }
  autoResult = r.take();
  return autoResult->schedule;
}

/// The text format's lines above the grid.
std::string renderTextSummary(const ScheduleJobResult &r) {
  const Schedule &s = r.schedule;
  const SimResult &sim = r.sim;
  char line[256];
  std::snprintf(line, sizeof line,
                "%s: %d ranks, %d stages x %d cop%s, %d microbatches\n"
                "makespan %.4f  bubble_rate %.4f  zb_bubble_rate %.4f\n",
                s.name.c_str(), s.numRanks(), s.placement.numStages,
                s.placement.numCopies, s.placement.numCopies == 1 ? "y" : "ies",
                s.numMicrobatches, sim.makespan, sim.bubbleRate,
                sim.zbBubbleRate);
  std::string out = line;
  if (r.autoResult) {
    const AutoResult &a = *r.autoResult;
    std::snprintf(line, sizeof line,
                  "auto: method %s  zb_cost %.4f  lower_bound %.4f  gap "
                  "%.2f%%  (makespan lower bound %.4f)\n",
                  a.method.c_str(), a.zbCost, a.bound.zbCost, 100 * a.gap,
                  a.bound.makespan);
    out += line;
    if (a.ilpRan) {
      std::snprintf(line, sizeof line,
                    "auto: ILP %s (%s, %lld nodes), bound within its model "
                    "%.4f, gap %.2f%%\n",
                    a.ilpOptimal ? "optimal" : "stopped", a.ilpStatus.c_str(),
                    (long long)a.ilpNodes, a.ilpBound, 100 * a.ilpGap);
      out += line;
    }
    std::snprintf(line, sizeof line, "auto: local search %lld moves%s\n",
                  (long long)a.searchMovesUsed,
                  a.searchConverged ? ", local optimum" : "");
    out += line;
    if (a.timeLimitHit)
      out += "auto: cut short by the time limit (" + a.cutShort +
             "): the result may differ on another machine or load\n";
    if (!a.note.empty())
      out += "auto: " + a.note + "\n";
  }
  for (size_t i = 0; i < sim.ranks.size(); ++i) {
    const RankStats &rs = sim.ranks[i];
    std::snprintf(line, sizeof line,
                  "rank %zu: busy %.4f  idle %.4f  peak_activation %.4f M_B\n",
                  i, rs.busy, sim.makespan - rs.busy, rs.peakMemory);
    out += line;
    if (rs.exposedP2P > 0 || rs.exposedA2A > 0) {
      std::snprintf(line, sizeof line,
                    "rank %zu: exposed p2p %.4f  a2a %.4f  (comm busy %.4f)\n",
                    i, rs.exposedP2P, rs.exposedA2A, rs.commBusy);
      out += line;
    }
    if (rs.gatherBusy > 0) { // ZeRO-3's gathers take time
      std::snprintf(line, sizeof line,
                    "rank %zu: parameter gathers %.4f, exposed %.4f\n", i,
                    rs.gatherBusy, rs.exposedGather);
      out += line;
    }
    if (rs.copyBusy > 0) { // activation offload's copies take time
      std::snprintf(line, sizeof line,
                    "rank %zu: offload copies %.4f, exposed %.4f\n", i,
                    rs.copyBusy, rs.exposedCopy);
      out += line;
    }
  }
  return out;
}

/// The job checked, with M_W derived from the model shape when given.
Expected<ScheduleJob> checkedJob(const ScheduleJob &jobIn) {
  ScheduleJob j = jobIn;
  if (Status st = checkJob(j); !st)
    return st;
  if (j.hidden > 0)
    j.memW = memWRatio(j.hidden, j.heads, j.seq);
  return j;
}

} // namespace

Expected<AutoOptions> autoOptionsForJob(const ScheduleJob &jobIn) {
  auto checked = checkedJob(jobIn);
  if (!checked)
    return checked.status();
  const ScheduleJob &j = *checked;
  if (j.ranks < 1)
    return Status::error("--ranks is required (>= 1)");
  if (j.microbatches < 1)
    return Status::error("--schedule auto needs --microbatches (>= 1)");
  AutoOptions ao;
  ao.ranks = j.ranks;
  ao.microbatches = j.microbatches;
  ao.vShape = j.vPlacement;
  ao.cost.tf = j.tf;
  ao.cost.tb = j.tb;
  ao.cost.tw = j.tw;
  ao.cost.tcomm = j.tcomm;
  // M_B: one microbatch on a rank's share of a p-way split (a V stage is
  // half of it), as for every other schedule.
  int stages = ao.vShape ? 2 * j.ranks : j.ranks;
  scaleTimes(ao.cost, timeScale(j, j.ranks, stages));
  ao.cost.memB = ao.vShape ? 0.5 : 1.0;
  ao.cost.memW = ao.cost.memB * j.memW;
  if (!j.memLimit.empty()) {
    auto l = memLimitInMB(j, j.ranks, stages);
    if (!l)
      return l.status();
    ao.memLimit = *l;
  }
  ao.useIlp = j.useIlp;
  ao.timeLimit = j.timeLimit;
  ao.searchMoves = j.searchMoves;
  ao.ilpMaxNodes = j.ilpNodes;
  ao.ilpGap = j.gap;
  return ao;
}

Expected<ScheduleJobResult> runOneScheduleJob(const ScheduleJob &jobIn);

/// --schedule auto (--placement any, the default): the search on both
/// placements and every single-copy handcrafted schedule (DualPipe too
/// with copies = 2) that fits the memory limit (a candidate over it fails
/// verification and drops out), compared by
/// makespan under per-rank costs; ties keep the earlier candidate (the
/// searches first). The winner is reported as auto with a note naming it.
Expected<ScheduleJobResult> runAnyPlacement(const ScheduleJob &j) {
  if (Status st = checkJob(j); !st)
    return st;
  if (!j.costsPerRank)
    return Status::error(
        "--schedule auto compares placements, which needs the times per "
        "rank's share of the model (--cost-unit rank, the default); with "
        "--cost-unit stage choose the placement (--placement linear or v)");
  // The time limit bounds the whole comparison: the linear search may use
  // half of it, the V search what is left; the handcrafted orders cost
  // next to nothing.
  auto deadline = detail::Deadline::in(j.timeLimit);
  std::optional<ScheduleJobResult> best;
  std::string bestName, bestKind, tried;
  Status firstError = Status::ok();
  std::optional<AutoResult> searched[2]; // linear, V
  auto consider = [&](ScheduleJob c, const std::string &name) {
    c.anyPlacement = false;
    auto r = runOneScheduleJob(c);
    tried += (tried.empty() ? "" : ", ") + name;
    if (!r) {
      if (firstError)
        firstError = Status::error(name + ": " + r.message());
      return;
    }
    if (r->autoResult)
      searched[c.vPlacement ? 1 : 0] = r->autoResult;
    if (!best || r->sim.makespan < best->sim.makespan - 1e-9) {
      best = r.take();
      bestName = name;
      bestKind = c.schedule;
    }
  };
  for (bool v : {false, true}) {
    ScheduleJob c = j;
    c.vPlacement = v;
    c.timeLimit = v ? deadline.left() : deadline.left() / 2;
    consider(c, v ? "auto on the V placement" : "auto on the linear placement");
  }
  // V-Half and V-Min (controllable memory) last: under a limit the others
  // miss they are what fits.
  std::vector<const char *> kinds = {
      "1f1b", "gpipe",     "zb-h1",  "zb-h2", "interleaved",
      "zbv",  "dualpipev", "v-half", "v-min"};
  if (j.copies >= 2)
    kinds.push_back("dualpipe");
  // Past the ceiling, the handcrafted orders not yet tried are left out
  // (each costs a whole generate, verify and simulate: seconds at millions
  // of actions); the result says which.
  std::string skipped;
  for (const char *kind : kinds) {
    if (deadline.passed() && best) {
      skipped += (skipped.empty() ? "" : ", ") + std::string(kind);
      continue;
    }
    ScheduleJob c = j;
    c.schedule = kind;
    auto layout = stageLayoutFor(kind, j.ranks, j.chunks);
    c.vPlacement = layout && layout->placement == "v";
    consider(c, std::string("the ") + kind + " order");
  }
  if (!best)
    return Status::error("no placement fits: " + firstError.message());
  ScheduleJobResult r = std::move(*best);
  r.schedule.name = "auto";
  r.chosenKind = bestKind;
  if (!r.autoResult) {
    // A handcrafted order won: report it with the bound of the search on
    // its placement (none for interleaved).
    const Placement &pl = r.schedule.placement;
    bool v = pl.numStages == 2 * pl.numRanks && pl.numCopies == 1 &&
             pl.rankOf[0] == Placement::vShape(pl.numRanks).rankOf[0];
    bool linear = pl.numStages == pl.numRanks && pl.numCopies == 1;
    AutoResult a;
    if ((v || linear) && searched[v ? 1 : 0])
      a.bound = searched[v ? 1 : 0]->bound;
    a.method = "handcrafted";
    a.schedule = r.schedule;
    a.sim = r.sim;
    a.makespan = r.sim.makespan;
    for (const RankStats &rs : r.sim.ranks)
      a.zbCost = std::max(a.zbCost, rs.lastEnd - rs.firstStart);
    a.gap = a.bound.zbCost > 0 && a.zbCost > 0
                ? (a.zbCost - a.bound.zbCost) / a.zbCost
                : 0;
    if (!(v || linear))
      a.note = "no lower bound for this placement";
    r.autoResult = a;
  }
  r.autoResult->note += std::string(r.autoResult->note.empty() ? "" : "; ") +
                        "placement any: " + bestName + " is the fastest of " +
                        tried;
  if (!skipped.empty()) {
    AutoResult &a = *r.autoResult;
    a.timeLimitHit = true;
    a.cutShort += std::string(a.cutShort.empty() ? "" : ", ") +
                  "handcrafted orders not tried: " + skipped;
  }
  return r;
}

Expected<ScheduleJobResult> runScheduleJob(const ScheduleJob &jobIn) {
  if (jobIn.anyPlacement && jobIn.schedule == "auto" && !jobIn.csvText)
    return runAnyPlacement(jobIn);
  return runOneScheduleJob(jobIn);
}

Expected<ScheduleJobResult> runOneScheduleJob(const ScheduleJob &jobIn) {
  auto checked = checkedJob(jobIn);
  if (!checked)
    return checked.status();
  ScheduleJob j = checked.take();

  auto step = [&](const char *name) {
    if (j.onStep)
      j.onStep(name);
  };
  step(j.schedule == "auto" ? "searching" : "generating");
  ScheduleJobResult r;
  auto s = obtainSchedule(j, r.autoResult, r.ignoredFsdpActions,
                          r.ignoredWaitActions);
  if (!s)
    return s.status();
  r.schedule = s.take();
  const Schedule &sch = r.schedule;

  // Memory in units of M_B: the activation of one microbatch on a rank's
  // share of a p-way split, so a stage of an S-stage copy is p/S of it.
  CostModel &cost = r.cost;
  cost.tf = j.tf;
  cost.tb = j.tb;
  cost.tw = j.tw;
  cost.tbw = j.tbw;
  cost.tfb = j.tfb;
  cost.tcomm = j.tcomm;
  cost.dispatch = j.dispatch;
  if (!j.stageCosts.empty()) {
    auto sc = parseStageCosts(j.stageCosts, sch.placement.numStages);
    if (!sc)
      return sc.status();
    cost.tfStage = (*sc)[0];
    cost.tbStage = (*sc)[1];
    cost.twStage = (*sc)[2];
  }
  cost.tA2A = j.ta2a;
  cost.moeLayersPerStage = j.moeLayers;
  cost.overlapComm = j.overlapComm;
  cost.memB = double(sch.numRanks()) / sch.placement.numStages;
  cost.memW = cost.memB * j.memW;
  cost.offloadGap = j.offloadGap;
  // ZeRO-3: an UNSHARD takes tgather (its bytes over a unit bandwidth).
  if (j.tgather > 0) {
    cost.paramBytes = j.tgather;
    cost.gatherBytesPerTime = 1;
  }
  // GRADREDUCE: tgradreduce per stage's gradients (their bytes over a unit
  // bandwidth) after a message's latency; ZeRO over the pair sends half.
  if (j.tgradreduce > 0) {
    cost.gradBytes = j.tgradreduce;
    cost.gradReduceBytesPerTime = 1;
    cost.gradReduceLatency = j.tcomm;
    cost.gradReduceShare = j.zero >= 1 ? 0.5 : 1;
  }
  // Activation offload as actions: a stash's copy takes tcopy per M_B.
  if (j.tcopy > 0) {
    if (j.offloadGap <= 0)
      return Status::error("--tcopy times activation offload's copies: it "
                           "needs --offload-activations auto or all");
    cost.hostBytesPerTime = 1 / j.tcopy;
  }
  scaleTimes(cost, timeScale(j, sch.numRanks(), sch.placement.numStages));

  // Costs whose sums overflow are refused here, before message placement
  // and the replays compute with them.
  if (Status st = checkCosts(cost, sch); !st)
    return st;

  // Messages are placed for the costs the schedule will be simulated with.
  step("inserting messages");
  if (!j.computeOnly && !sch.hasComm)
    if (Status st = insertComm(r.schedule, cost); !st)
      return Status::error("cannot insert messages: " + st.message());
  // ZeRO-3: each stage's parameters gathered before its first compute on a
  // rank and released after its last (ParamGathers.h).
  if (j.zero == 3 && !hasParamGathers(r.schedule))
    if (Status st = insertParamGathers(r.schedule, j.paramPrefetch); !st)
      return Status::error("cannot insert parameter gathers: " +
                           st.message());
  // Activation offload whose copies take time: the plan as actions, which
  // the simulator times (the memory replay reads the same plan from them).
  if (j.tcopy > 0 && j.offloadGap > 0 && !hasOffloadActions(r.schedule))
    if (Status st = insertOffload(r.schedule, j.offloadGap); !st)
      return Status::error("cannot insert activation offload: " +
                           st.message());

  VerifyOptions vo;
  vo.cost = cost;
  if (!j.memLimit.empty()) {
    auto l = memLimitInMB(j, sch.numRanks(), sch.placement.numStages);
    if (!l)
      return l.status();
    vo.memLimit = *l;
  }
  // The simulator needs only the verifier's static checks: it runs beside
  // the verifier's replay (the deadlock proof) on big schedules, after it
  // on small ones; its result counts once verify() accepts the schedule,
  // and it need not check the schedule again.
  SimOptions so;
  so.intervals = j.intervals;
  so.verified = true;
  std::optional<Expected<SimResult>> sim;
  vo.alongsideReplay = [&] { sim.emplace(simulate(sch, cost, so)); };
  step("verifying and simulating");
  if (Status st = verify(sch, vo); !st)
    return Status::error("invalid schedule: " + st.message());
  if (!sim)
    return Status::error("internal error: the schedule was verified but "
                         "not simulated");
  if (!*sim)
    return Status::error("simulation failed: " + sim->message());
  r.sim = sim->take();
  return r;
}

bool isJobFormat(const std::string &format) {
  for (const char *f : kJobFormats)
    if (format == f)
      return true;
  return false;
}

SimIntervals intervalsForFormat(const std::string &format) {
  if (format == "text")
    return SimIntervals::Compute;
  if (format == "json" || format == "csv")
    return SimIntervals::None;
  return SimIntervals::All;
}

namespace {
/// The automatic scheduler's members of the JSON "summary": deterministic
/// fields only (no elapsed times), so the same inputs give the same JSON
/// unless the time limit fired, which "time_limit" says.
void writeAutoSummary(JsonWriter &w, const AutoResult &a) {
  w.field("lower_bound", a.bound.zbCost);
  w.field("lower_bound_makespan", a.bound.makespan);
  w.field("gap", a.gap);
  w.field("method", a.method);
  w.key("ilp");
  w.beginObject();
  w.field("ran", a.ilpRan);
  if (a.ilpRan) {
    w.field("status", a.ilpStatus);
    w.field("optimal", a.ilpOptimal);
    w.field("bound", a.ilpBound);
    w.field("gap", a.ilpGap);
    w.field("nodes", int64_t(a.ilpNodes));
  }
  if (!a.note.empty()) {
    w.field("note", a.note);
  }
  w.endObject();
  w.field("search_moves", int64_t(a.searchMovesUsed));
  w.field("search_converged", a.searchConverged);
  w.key("time_limit");
  w.value(a.timeLimitHit ? "cut short by the time limit: " + a.cutShort
                         : std::string("not reached"));
}
} // namespace

void renderScheduleJob(const ScheduleJobResult &r, const std::string &format,
                       std::ostream &os) {
  if (format == "json") {
    std::function<void(JsonWriter &)> more;
    if (r.autoResult)
      more = [&](JsonWriter &w) { writeAutoSummary(w, *r.autoResult); };
    exportJson(r.schedule, os, &r.sim, 2, more);
  } else if (format == "csv") {
    exportCsv(r.schedule, os);
  } else if (format == "svg") {
    os << exportSvg(r.schedule, r.sim);
  } else if (format == "trace") {
    os << exportTrace(r.schedule, r.sim);
  } else {
    os << renderTextSummary(r);
    exportTextGrid(r.schedule, r.sim, os);
  }
}

std::string renderScheduleJob(const ScheduleJobResult &r,
                              const std::string &format) {
  std::ostringstream os;
  renderScheduleJob(r, format, os);
  return os.str();
}

} // namespace pipeforge::sched
