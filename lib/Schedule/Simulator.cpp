//===- Simulator.cpp - Event-driven replay on a cost model ----------------===//
//
// Every rank runs its program in order. An action starts when the rank is
// free and its inputs are ready. The replay engine (Replay.h, shared with
// the verifier) decides when an action can run, advances the ranks, keeps
// the activation memory and explains a deadlock; this file is its timed
// client: it gives each action its start and end from the cost model, the
// comm resource and the components of overlapped pairs.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Simulator.h"
#include "pipeforge/Schedule/PairOrder.h"

#include "Deps.h"
#include "Parallel.h"
#include "Replay.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <tuple>

namespace pipeforge::sched {

namespace {
double pick(const std::vector<double> &perStage, int stage, double uniform) {
  if (stage >= 0 && static_cast<size_t>(stage) < perStage.size())
    return perStage[stage];
  return uniform;
}
} // namespace

double CostModel::timeOf(WorkKind k, int stage) const {
  switch (k) {
  case WorkKind::F:
    return pick(tfStage, stage, tf);
  case WorkKind::B:
    return pick(tbStage, stage, tb);
  case WorkKind::W:
    return pick(twStage, stage, tw);
  case WorkKind::BW:
    return tbw >= 0 ? tbw : pick(tbStage, stage, tb) + pick(twStage, stage, tw);
  }
  return 0;
}

double CostModel::a2aTime(int stage) const {
  return pick(tA2AStage, stage, tA2A);
}

int CostModel::moeLayers(int stage) const {
  if (stage >= 0 && static_cast<size_t>(stage) < moeLayersStage.size())
    return moeLayersStage[stage];
  return moeLayersPerStage;
}

double CostModel::memDelta(WorkKind k, int stage) const {
  double mb = pick(memBStage, stage, memB);
  double mw = pick(memWStage, stage, memW);
  switch (k) {
  case WorkKind::F:
    return mb;
  case WorkKind::B:
    return -(mb - mw);
  case WorkKind::W:
    return -mw;
  case WorkKind::BW:
    return -mb;
  }
  return 0;
}

double CostModel::gatherTime(int stage) const {
  return gatherBytesPerTime > 0
             ? pick(paramBytesStage, stage, paramBytes) / gatherBytesPerTime
             : 0;
}

double CostModel::copyTime(int stage) const {
  return hostBytesPerTime > 0
             ? std::abs(memDelta(WorkKind::F, stage)) / hostBytesPerTime
             : 0;
}

double CostModel::gradStageBytes(int stage) const {
  return pick(gradBytesStage, stage, gradBytes);
}

double CostModel::gradReduceTime(double bytes) const {
  return gradReduceLatency +
         (gradReduceBytesPerTime > 0
              ? gradReduceShare * bytes / gradReduceBytesPerTime
              : 0);
}

double CostModel::gatherMem(int stage) const {
  return memPerParamByte > 0
             ? pick(paramBytesStage, stage, paramBytes) * memPerParamByte
             : 0;
}

namespace {
std::string costNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
} // namespace

Status checkCosts(const CostModel &c, int64_t numStages, int64_t actions) {
  // Each field finite and >= 0 (tbw and tfb may be < 0: "the sum").
  auto field = [](const char *name, double v, bool negativeMeansSum,
                  int64_t stage) -> Status {
    if (std::isfinite(v) && (v >= 0 || negativeMeansSum))
      return Status::ok();
    return Status::error(
        std::string("cost model: ") + name +
        (stage >= 0 ? " of stage " + std::to_string(stage) : std::string()) +
        " is " + costNumber(v) + "; times and memory must be finite and >= 0");
  };
  for (auto [name, v, sum] :
       {std::make_tuple("F time (tf)", c.tf, false),
        std::make_tuple("B time (tb)", c.tb, false),
        std::make_tuple("W time (tw)", c.tw, false),
        std::make_tuple("BW time (tbw)", c.tbw, true),
        std::make_tuple("F&B pair time (tfb)", c.tfb, true),
        std::make_tuple("message time (tcomm)", c.tcomm, false),
        std::make_tuple("dispatch time", c.dispatch, false),
        std::make_tuple("all-to-all time (tA2A)", c.tA2A, false),
        std::make_tuple("attention share", c.attnShare, false),
        std::make_tuple("M_B (memB)", c.memB, false),
        std::make_tuple("M_W (memW)", c.memW, false),
        std::make_tuple("parameter bytes", c.paramBytes, false),
        std::make_tuple("gather bandwidth", c.gatherBytesPerTime, false),
        std::make_tuple("host copy bandwidth", c.hostBytesPerTime, false),
        std::make_tuple("memory per parameter byte", c.memPerParamByte,
                        false),
        std::make_tuple("gradient bytes", c.gradBytes, false),
        std::make_tuple("gradient reduce bandwidth", c.gradReduceBytesPerTime,
                        false),
        std::make_tuple("gradient reduce latency", c.gradReduceLatency, false),
        std::make_tuple("gradient reduce share", c.gradReduceShare, false)})
    if (Status st = field(name, v, sum, -1); !st)
      return st;
  for (auto [name, vec] :
       {std::make_pair("F time", &c.tfStage),
        std::make_pair("B time", &c.tbStage),
        std::make_pair("W time", &c.twStage),
        std::make_pair("all-to-all time", &c.tA2AStage),
        std::make_pair("M_B", &c.memBStage),
        std::make_pair("M_W", &c.memWStage),
        std::make_pair("parameter bytes", &c.paramBytesStage),
        std::make_pair("gradient bytes", &c.gradBytesStage)})
    for (size_t s = 0; s < vec->size(); ++s)
      if (Status st = field(name, (*vec)[s], false, int64_t(s)); !st)
        return st;
  auto layersOk = [](int64_t n) {
    return n >= 0 && n <= kMaxMoELayersPerStage;
  };
  if (!layersOk(c.moeLayersPerStage))
    return Status::error("cost model: MoE layers per stage is " +
                         std::to_string(c.moeLayersPerStage) +
                         "; it must be in [0, " +
                         std::to_string(kMaxMoELayersPerStage) + "]");
  for (size_t s = 0; s < c.moeLayersStage.size(); ++s)
    if (!layersOk(c.moeLayersStage[s]))
      return Status::error("cost model: MoE layers of stage " +
                           std::to_string(s) + " is " +
                           std::to_string(c.moeLayersStage[s]) +
                           "; it must be in [0, " +
                           std::to_string(kMaxMoELayersPerStage) + "]");
  // The largest action: the most expensive of a stage's F, B, W and BW,
  // each with its all-to-alls (2 per MoE layer), twice for an overlapped
  // pair (or tfb and both members' all-to-alls), then a message's tcomm.
  // Stages past numStages but inside a vector count too (their values
  // exist even if no action names them).
  int64_t stages = std::max<int64_t>(numStages, 1);
  for (size_t n : {c.tfStage.size(), c.tbStage.size(), c.twStage.size(),
                   c.tA2AStage.size(), c.moeLayersStage.size(),
                   c.memBStage.size(), c.memWStage.size(),
                   c.paramBytesStage.size(), c.gradBytesStage.size()})
    stages = std::max<int64_t>(stages, int64_t(n));
  double action = 0, alloc = 0, grads = 0;
  int64_t layers = 0;
  for (int64_t s = 0; s < stages; ++s) {
    int st = int(std::min<int64_t>(s, INT32_MAX));
    layers = std::max<int64_t>(layers, c.moeLayers(st));
    double a2a = 2.0 * double(c.moeLayers(st)) * c.a2aTime(st);
    for (WorkKind k :
         {WorkKind::F, WorkKind::B, WorkKind::W, WorkKind::BW})
      action = std::max(action, c.timeOf(k, st) +
                                    (k == WorkKind::W ? 0.0 : a2a));
    // A gather waits behind the rank's earlier ones: at most its time
    // again per action, as an action's own.
    action = std::max(action, c.gatherTime(st));
    action = std::max(action, c.copyTime(st)); // likewise a stash's copy
    grads += c.gradStageBytes(st);
    alloc = std::max(alloc, c.gatherMem(st));
    alloc = std::max(alloc, std::abs(c.memDelta(WorkKind::F, st)));
    alloc = std::max(alloc, std::abs(c.memDelta(WorkKind::B, st)));
    alloc = std::max(alloc, std::abs(c.memDelta(WorkKind::W, st)));
  }
  // The replay's per-layer steps: 950 million MoE layers on a CSV of 20
  // actions ran the fuzzer out of memory.
  const int64_t acts = std::max<int64_t>(actions, 1);
  if (layers > 0 && acts > kMaxMoELayerSteps / layers)
    return Status::error(
        "cost model: " + std::to_string(actions) + " actions x " +
        std::to_string(layers) +
        " MoE layers a stage are more per-layer steps than a replay takes (" +
        std::to_string(kMaxMoELayerSteps) +
        "): it times every MoE layer of every F and backward");
  // A GRADREDUCE sums at most both copies of every stage.
  action = std::max(action, c.gradReduceTime(2 * grads));
  action = 2 * action + std::max(0.0, c.tfb) + c.tcomm;
  const double n = double(std::max<int64_t>(actions, 1));
  const double total = n * action, memory = n * alloc;
  if (!(total <= kMaxScheduleTotal) || !(memory <= kMaxScheduleTotal)) {
    bool time = !(total <= kMaxScheduleTotal);
    if (!std::isfinite(time ? action : alloc))
      return Status::error(
          std::string("cost model: the ") +
          (time ? "times overflow: one action (an overlapped pair with its "
                  "all-to-alls, plus tcomm) takes"
                : "memory deltas overflow: one allocation is") +
          " more than the largest number; give smaller units");
    return Status::error(
        std::string("cost model: the ") + (time ? "times" : "memory deltas") +
        " overflow: " + std::to_string(actions) + " actions of up to " +
        costNumber(time ? action : alloc) +
        (time ? " time units each (an overlapped pair with its all-to-alls, "
                "plus tcomm)"
              : " each") +
        " add up to " + costNumber(time ? total : memory) + ", above " +
        costNumber(kMaxScheduleTotal) +
        ", the most a replay computes with; give smaller units");
  }
  return Status::ok();
}

Status checkCosts(const CostModel &c, const Schedule &s) {
  int64_t actions = 0;
  for (const std::vector<Action> &p : s.programs)
    actions += int64_t(p.size());
  return checkCosts(c, s.placement.numStages, actions);
}

namespace {
using namespace detail;

class Simulation {
public:
  Simulation(const Schedule &s, const CostModel &cost, const SimOptions &o)
      : s(s), cost(cost), keep(o.intervals), verified(o.verified && s.hasComm),
        idx(s), numRanks(s.numRanks()),
        engine(s, idx, locs, engineOptions(cost, verified)) {}

  Expected<SimResult> run();

  // The engine's client interface (Replay.h).
  void compute(int32_t r, size_t i, const Action &a, const Input &in1,
               const Input &in2);
  void send(int32_t r, size_t i, const Action &a, const CommSlot &sl);
  void recv(int32_t r, size_t i, const Action &a, const CommSlot &sl);
  void gradReduceArrive(int32_t r, size_t, const CommSlot &sl) {
    grArrive[sl.chan].push_back(now[r]);
  }
  void gradReduce(int32_t r, size_t i, const CommSlot &sl);
  void paramGather(int32_t r, size_t i, const Action &a);
  void stashCopy(int32_t r, size_t i, const Action &a);

private:
  static ReplayEngine::Options engineOptions(const CostModel &cost,
                                             bool verified) {
    ReplayEngine::Options o;
    o.memCost = &cost;
    o.verified = verified;
    return o;
  }
  Status prepare();
  /// When input `in` is ready, and when it left its sender.
  void inputTimes(const Input &in, double &readyAt, double &sent) const {
    switch (in.kind) {
    case Input::None:
      readyAt = sent = 0;
      return;
    case Input::Local:
      readyAt = sent = endTime[endSlot(in.id)];
      return;
    case Input::Message:
      readyAt = recvTime[in.id];
      sent = sentAt.empty() ? readyAt : sentAt[in.id];
      return;
    case Input::Edge: // compute-only: an edge delay, not a message
      readyAt = sent = endTime[in.id] + cost.tcomm;
      return;
    }
  }
  /// Runs compute action `i` (Compute or Overlap) of rank r from `start`
  /// with its components (communication model); returns its end.
  double runComponents(int32_t r, size_t i, const Action &a, double start,
                       double &busy);
  /// Occupies rank r's comm resource from `ready` for `dur`; returns the end.
  double occupyComm(int32_t r, double ready, double dur) {
    double st = cost.overlapComm ? std::max(ready, commFree[r]) : ready;
    double en = st + dur;
    if (cost.overlapComm)
      commFree[r] = std::max(commFree[r], en);
    stats[r].commBusy += dur;
    return en;
  }
  void addComm(int32_t r, size_t i, double a, double b, CommInterval::Kind k,
               int which = 0, int member = 0, int layer = 0) {
    if (b > a || k == CommInterval::P2P || k == CommInterval::A2A)
      commIv[r].push_back(CommInterval{r, i, a, b, k,
                                       static_cast<uint8_t>(which),
                                       static_cast<uint8_t>(member), layer});
  }
  bool stageHasA2A(int stage) const {
    return cost.moeLayers(stage) > 0 && cost.a2aTime(stage) > 0;
  }

  const Schedule &s;
  const CostModel &cost;
  SimIntervals keep;
  /// SimOptions::verified, with messages: no checks, no work locator.
  bool verified;
  WorkIndex idx;
  int32_t numRanks;
  std::vector<Loc> locs;
  ReplayEngine engine;

  // Times.
  /// By endSlot of the work id. A verified replay keeps two per item (F,
  /// and B or BW: what it resolves a local input to; W produces nothing),
  /// any other replay one per work id.
  std::vector<double> endTime;
  size_t endSlot(size_t workId) const {
    return verified ? WorkIndex::outputKey(workId) : workId;
  }
  std::vector<double> recvTime; ///< by messageKey
  /// By messageKey: when the Send posted (overlapComm only: it measures
  /// the exposed transfer in the consumer).
  std::vector<double> sentAt;
  /// Per channel, by ordinal: when each Send posted and (overlapComm only;
  /// else tcomm later) when it arrives.
  std::vector<std::vector<double>> sendPost, sendArrive;
  std::vector<std::vector<double>> grArrive;             ///< per channel
  /// Per rank: the gradient bytes of the (copy, stage)s it holds, which
  /// its GRADREDUCE exchanges (CostModel::gradBytes; empty: no cost).
  std::vector<double> gradHeld;

  // Rank state.
  std::vector<double> now;
  std::vector<RankStats> stats;
  std::vector<char> anyCompute;
  /// The kept actions' intervals, rank after rank in program order (rank
  /// r's n-th kept action at base[r] + n): sized once, written in place,
  /// handed to the result without a copy (one 24-byte Interval per kept
  /// action resident).
  std::vector<Interval> intervals;
  std::vector<size_t> base, kept;
  std::optional<Prefault> prefault; ///< of `intervals`, during the replay
  double makespan = 0;
  void place(int32_t r, size_t i, double start, double end, bool isCompute) {
    makespan = std::max(makespan, end);
    if (keep == SimIntervals::All ||
        (keep == SimIntervals::Compute && isCompute))
      intervals[base[r] + kept[r]++] =
          Interval{r, static_cast<uint32_t>(i), start, end};
  }
  // ZeRO-3's gathers: per rank, when its gather channel is free, and per
  // (copy, stage) when its last UNSHARD finishes (gatherKey).
  std::vector<double> gatherFree;
  bool gatherIntervals = false; ///< commIv holds Gather or Copy intervals
  std::vector<std::vector<double>> gatherDone;
  size_t gatherKey(const Work &w) const {
    return size_t(w.copy) * size_t(s.placement.numStages) + size_t(w.stage);
  }
  /// When the parameters of `w`'s stage are there on rank r.
  double paramsReady(int32_t r, const Work &w) const {
    return gatherDone[r].empty() ? 0 : gatherDone[r][gatherKey(w)];
  }
  // Activation offload's copies (CostModel::hostBytesPerTime > 0): per rank,
  // when its copy channel is free, when the copies out posted since its
  // last compute action end, and per stash when its RELOAD's copy ends.
  bool copyModel = false;
  std::vector<double> copyFree, copyOutEnd;
  std::vector<std::map<StashKey, double>> reloadDone;
  // Communication model.
  bool commModel = false;       ///< overlapComm, or some stage has all-to-alls
  std::vector<double> commFree; ///< per rank
  std::vector<std::vector<CommInterval>> commIv; ///< per rank
};

Status Simulation::prepare() {
  if (Status st = checkShape(s); !st)
    return st;
  if (Status st = checkCosts(cost, s); !st)
    return st;
  const Placement &pl = s.placement;
  for (int32_t r = 0; r < numRanks; ++r)
    if (s.programs[r].size() > UINT32_MAX)
      return Status::error("rank " + std::to_string(r) + " has " +
                           std::to_string(s.programs[r].size()) +
                           " actions; the simulator takes at most 2^32 - 1 "
                           "per rank");
  for (int32_t r = 0; r < numRanks && !verified; ++r) {
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      auto checkWork = [&](const Work &w) -> Status {
        if (!idx.inRange(w))
          return Status::error(
              stepError(s, r, i, toString(w) + " is out of range"));
        if (pl.rank(w.copy, w.stage) != r)
          return Status::error(
              stepError(s, r, i,
                        toString(w) + " belongs on rank " +
                            std::to_string(pl.rank(w.copy, w.stage))));
        return Status::ok();
      };
      if (a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap) {
        if (Status st = checkWork(a.work); !st)
          return st;
        if (a.kind == ActionKind::Overlap) {
          if (Status st = checkWork(a.work2); !st)
            return st;
          if (!isPairShape(a))
            return Status::error(stepError(
                s, r, i, "an overlapped pair must be F with B or BW"));
        }
        continue;
      }
      if (a.isParamGather()) {
        if (a.work.stage < 0 || a.work.stage >= pl.numStages ||
            a.work.copy < 0 || a.work.copy >= pl.numCopies)
          return Status::error(
              stepError(s, r, i, toString(a) + " is out of range"));
        continue;
      }
      if (a.isStashCopy()) {
        if (!idx.inRange(a.work))
          return Status::error(
              stepError(s, r, i, toString(a) + " is out of range"));
        continue;
      }
      if (a.peer < 0 || a.peer >= numRanks || a.peer == r)
        return Status::error(stepError(s, r, i,
                                       "peer rank " + std::to_string(a.peer) +
                                           " is out of range or this rank"));
      if (a.kind != ActionKind::GradReduce &&
          a.payload != Payload::WeightGrad && !idx.inRange(a.work))
        return Status::error(stepError(
            s, r, i, "message " + toString(a.work) + " is out of range"));
    }
  }
  if (!verified)
    locs = locateWork(s, idx);
  engine.assignChannels();
  size_t nc = engine.numChannels();
  sendPost.resize(nc);
  sendArrive.resize(nc);
  // Sized once: a channel's sends are known (growth by doubling would
  // hold up to twice the bytes).
  for (size_t c = 0; c < nc; ++c) {
    sendPost[c].reserve(engine.numSends(c));
    if (cost.overlapComm)
      sendArrive[c].reserve(engine.numSends(c));
  }
  endTime.assign(verified ? idx.numMessages() : idx.size(), 0);
  recvTime.assign(idx.numMessages(), 0);
  if (cost.overlapComm)
    sentAt.assign(idx.numMessages(), 0);
  grArrive.resize(nc);
  gradHeld.clear();
  if (cost.gradReduceLatency > 0 || cost.gradReduceBytesPerTime > 0) {
    gradHeld.assign(numRanks, 0);
    for (int c = 0; c < pl.numCopies; ++c)
      for (int st = 0; st < pl.numStages; ++st)
        if (int32_t r = pl.rank(c, st); r >= 0 && r < numRanks)
          gradHeld[r] += cost.gradStageBytes(st);
  }
  now.assign(numRanks, 0);
  stats.assign(numRanks, RankStats());
  anyCompute.assign(numRanks, 0);
  base.assign(numRanks + 1, 0);
  kept.assign(numRanks, 0);
  for (int32_t r = 0; r < numRanks; ++r) {
    size_t n = 0;
    if (keep == SimIntervals::All)
      n = s.programs[r].size();
    else if (keep == SimIntervals::Compute)
      for (const Action &a : s.programs[r])
        n += a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap;
    base[r + 1] = base[r] + n;
  }
  // Written once each, by the replay (rank r's from base[r] on): not
  // cleared first, and mapped in on the other core as the replay goes.
  intervals.resize(base[numRanks]);
  std::vector<std::pair<void *, size_t>> fresh;
  for (int32_t r = 0; r < numRanks; ++r)
    fresh.emplace_back(intervals.data() + base[r],
                       (base[r + 1] - base[r]) * sizeof(Interval));
  prefault.emplace(std::move(fresh));
  commModel = cost.overlapComm;
  for (int st = 0; st < pl.numStages && !commModel; ++st)
    commModel = stageHasA2A(st);
  commFree.assign(numRanks, 0);
  commIv.resize(numRanks);
  copyModel = cost.hostBytesPerTime > 0;
  copyFree.assign(copyModel ? numRanks : 0, 0);
  copyOutEnd.assign(copyModel ? numRanks : 0, 0);
  reloadDone.assign(copyModel ? numRanks : 0, {});
  gatherFree.assign(numRanks, 0);
  gatherDone.assign(numRanks, {});
  for (int32_t r = 0; r < numRanks; ++r)
    for (const Action &a : s.programs[r])
      if (a.isParamGather()) {
        gatherDone[r].assign(size_t(pl.numCopies) * size_t(pl.numStages), 0);
        break;
      }
  return Status::ok();
}

// A GRADREDUCE: both ranks of the pair wait for each other, then exchange
// their gradients (CostModel::gradReduceTime of the larger of the two
// ranks' bytes), blocking, as the runtime's pairwise sum does: both leave
// together.
void Simulation::gradReduce(int32_t r, size_t i, const CommSlot &sl) {
  double t = now[r];
  double end = std::max(t, grArrive[sl.other][sl.ordinal]);
  if (!gradHeld.empty()) {
    int32_t peer = s.programs[r][i].peer;
    end += cost.gradReduceTime(std::max(gradHeld[r], gradHeld[peer]));
  }
  stats[r].exposedComm += end - t;
  now[r] = end;
  place(r, i, t, end, false);
}

// An UNSHARD is posted at the rank's time and runs on its gather channel
// after the gathers posted before it; the stage's next compute waits for
// it (compute). A RESHARD frees memory only (Replay.h).
void Simulation::paramGather(int32_t r, size_t i, const Action &a) {
  double t = now[r];
  if (a.kind == ActionKind::Unshard) {
    double start = std::max(t, gatherFree[r]);
    double dur = cost.gatherTime(a.work.stage);
    gatherFree[r] = start + dur;
    stats[r].gatherBusy += dur;
    if (dur > 0) {
      addComm(r, i, start, start + dur, CommInterval::Gather);
      gatherIntervals = true;
    }
    if (!gatherDone[r].empty())
      gatherDone[r][gatherKey(a.work)] = start + dur;
  }
  place(r, i, t, t, false);
}

// An OFFLOAD / RELOAD is posted at the rank's time and runs on its copy
// channel after the copies posted before it (CostModel::hostBytesPerTime);
// compute() waits for them where the runtime does.
void Simulation::stashCopy(int32_t r, size_t i, const Action &a) {
  double t = now[r];
  if (copyModel) {
    double start = std::max(t, copyFree[r]);
    double dur = cost.copyTime(a.work.stage);
    copyFree[r] = start + dur;
    stats[r].copyBusy += dur;
    if (dur > 0) {
      addComm(r, i, start, start + dur, CommInterval::Copy);
      gatherIntervals = true; // posted ahead of their start too
    }
    if (a.kind == ActionKind::Offload)
      copyOutEnd[r] = std::max(copyOutEnd[r], start + dur);
    else
      reloadDone[r][StashKey{a.work.copy, a.work.stage, a.work.mb}] =
          start + dur;
  }
  place(r, i, t, t, false);
}

void Simulation::compute(int32_t r, size_t i, const Action &a, const Input &in1,
                         const Input &in2) {
  double t = now[r] + cost.dispatch; // the runtime's own work comes first
  RankStats &st = stats[r];
  bool pair = a.kind == ActionKind::Overlap;
  double ready1 = 0, ready2 = 0, sent1 = 0, sent2 = 0;
  inputTimes(in1, ready1, sent1);
  if (pair)
    inputTimes(in2, ready2, sent2);
  double start = std::max({t, ready1, ready2});
  if (cost.overlapComm && s.hasComm && start > t) {
    // The Recv did not block: the consumer waits here.
    st.exposedComm += start - t;
    double fl = std::max(0.0, std::max(ready1 - std::max(t, sent1),
                                       ready2 - std::max(t, sent2)));
    st.exposedP2P += fl;
    addComm(r, i, start - fl, start, CommInterval::ExposedP2P);
  }
  if (!gatherDone[r].empty()) {
    // ZeRO-3: the members' stages' parameters, gathered.
    double params = paramsReady(r, a.work);
    if (pair)
      params = std::max(params, paramsReady(r, a.work2));
    if (params > start) {
      st.exposedGather += params - start;
      st.exposedComm += params - start;
      start = params;
    }
  }
  if (copyModel) {
    // Activation offload: a B/BW reads its stash once the RELOAD's copy is
    // done.
    double back = 0;
    for (const Work *w : {&a.work, pair ? &a.work2 : nullptr})
      if (w && (w->kind == WorkKind::B || w->kind == WorkKind::BW))
        if (auto it = reloadDone[r].find(StashKey{w->copy, w->stage, w->mb});
            it != reloadDone[r].end()) {
          back = std::max(back, it->second);
          reloadDone[r].erase(it);
        }
    if (back > start) {
      st.exposedCopy += back - start;
      st.exposedComm += back - start;
      start = back;
    }
  }
  double busy = 0;
  double end = commModel ? runComponents(r, i, a, start, busy) : 0;
  if (!commModel) {
    double dur = cost.timeOf(a.work.kind, a.work.stage);
    if (pair)
      dur = cost.tfb >= 0 ? cost.tfb
                          : dur + cost.timeOf(a.work2.kind, a.work2.stage);
    end = start + dur;
    busy = dur;
  }
  if (!anyCompute[r]) {
    anyCompute[r] = 1;
    st.firstStart = start;
  }
  st.busy += busy;
  st.lastEnd = end;
  now[r] = end;
  place(r, i, start, end, true);
  if (copyModel && copyOutEnd[r] > 0) {
    // The stashes offloaded before this action leave the device at its end:
    // the rank waits for their copies out.
    if (copyOutEnd[r] > end) {
      st.exposedCopy += copyOutEnd[r] - end;
      st.exposedComm += copyOutEnd[r] - end;
      now[r] = copyOutEnd[r];
      makespan = std::max(makespan, now[r]);
    }
    copyOutEnd[r] = 0;
  }
  auto finish = [&](const Work &w) {
    // A verified replay resolves a local input by its nominal producer (B
    // stands for BW too; W is no producer and would take B's slot).
    if (!(verified && w.kind == WorkKind::W))
      endTime[endSlot(idx.id(w))] = end;
  };
  finish(a.work);
  if (pair)
    finish(a.work2);
}

void Simulation::send(int32_t r, size_t i, const Action &, const CommSlot &sl) {
  double t = now[r];
  sendPost[sl.chan].push_back(t);
  if (cost.overlapComm) {
    double arrive = occupyComm(r, t, cost.tcomm);
    addComm(r, i, arrive - cost.tcomm, arrive, CommInterval::P2P);
    sendArrive[sl.chan].push_back(arrive);
  }
  place(r, i, t, t, false);
}

void Simulation::recv(int32_t r, size_t i, const Action &a,
                      const CommSlot &sl) {
  double t = now[r];
  RankStats &st = stats[r];
  double posted = sendPost[sl.chan][sl.ordinal];
  // Without overlapComm a message arrives tcomm after it was posted.
  double arrive =
      cost.overlapComm ? sendArrive[sl.chan][sl.ordinal] : posted + cost.tcomm;
  // Blocking (default): the rank waits here. overlapComm: the receive is
  // posted and the consumer waits for `arrive`.
  double end = cost.overlapComm ? t : std::max(t, arrive);
  st.exposedComm += end - t;
  if (!cost.overlapComm) {
    double fl = std::max(0.0, end - std::max(t, posted));
    st.exposedP2P += fl;
    if (commModel)
      addComm(r, i, end - fl, end, CommInterval::ExposedP2P);
  }
  now[r] = end;
  place(r, i, t, end, false);
  if (a.payload != Payload::WeightGrad) {
    size_t key = messageKey(a.work, idx);
    recvTime[key] = cost.overlapComm ? std::max(t, arrive) : end;
    if (!sentAt.empty())
      sentAt[key] = posted;
  }
}

double Simulation::runComponents(int32_t r, size_t i, const Action &a,
                                 double start, double &busy) {
  bool pair = a.kind == ActionKind::Overlap;
  // tfb (when given) is the pair's compute; scale both members to it.
  double scale = 1;
  if (pair && cost.tfb >= 0) {
    double sum = cost.timeOf(a.work.kind, a.work.stage) +
                 cost.timeOf(a.work2.kind, a.work2.stage);
    scale = sum > 0 ? cost.tfb / sum : 0;
  }
  std::vector<PairComp> cs;
  bool fused = pair && cost.overlapComm && cost.fusePairs;
  if (!fused) {
    // Serial: every component waits for the one before it.
    int prev = -1;
    auto chain = [&](double dur, bool comm, int which, int member, int layer) {
      PairComp c;
      c.dur = dur;
      c.comm = comm;
      c.dep1 = prev;
      c.which = static_cast<uint8_t>(which);
      c.member = static_cast<uint8_t>(member);
      c.layer = layer;
      cs.push_back(c);
      prev = static_cast<int>(cs.size()) - 1;
    };
    const Work *ws[2] = {&a.work, pair ? &a.work2 : nullptr};
    for (int m = 0; m < 2 && ws[m]; ++m) {
      const Work &w = *ws[m];
      WorkParts p = splitWork(cost, w, scale);
      for (int l = 0; l < p.layers; ++l) {
        if (w.kind == WorkKind::F) {
          chain(p.attn, false, 0, m, l);
          chain(p.a2a, true, 0, m, l);
          chain(p.mlp, false, 0, m, l);
          chain(p.a2a, true, 1, m, l);
        } else if (w.kind == WorkKind::W) {
          chain(p.attn + p.mlp, false, 0, m, l);
        } else {
          chain(p.a2a, true, 1, m, l);
          chain(p.mlp, false, 0, m, l);
          chain(p.mlpW, false, 0, m, l);
          chain(p.a2a, true, 0, m, l);
          chain(p.attn, false, 0, m, l);
          chain(p.attnW, false, 0, m, l);
        }
      }
    }
  } else {
    // DeepSeek's per-layer order (docs/background.md; PairOrder.h). Layer
    // k pairs F's k-th layer with the backward's k-th (in its own, reversed,
    // order); a member with fewer layers has empty components there.
    cs = fusedPairComponents(cost, a.work, a.work2, deepSeekPairOrder(), scale);
  }
  // List scheduling in the given order on compute and rank r's comm
  // channel (PairOrder.h); its segments become the comm intervals.
  PairBreakdown bd;
  double end = listSchedulePair(cs, start, commFree[r], cost.overlapComm, &bd);
  RankStats &st = stats[r];
  for (const PairSegment &sg : bd.segments) {
    if (sg.exposed) {
      addComm(r, i, sg.start, sg.end, CommInterval::ExposedA2A);
    } else {
      st.commBusy += sg.dur;
      addComm(r, i, sg.start, sg.end, CommInterval::A2A, sg.which, sg.member,
              sg.layer);
    }
  }
  busy = bd.busy;
  st.exposedA2A += bd.exposed;
  st.exposedComm += bd.exposed;
  return end;
}

Expected<SimResult> Simulation::run() {
  if (Status st = prepare(); !st)
    return st;
  ReplayEngine::Outcome out = engine.run(*this);
  prefault.reset();
  if (!out)
    return Status::error(stepError(s, out.rank, out.step, out.message));

  for (int32_t r = 0; r < numRanks; ++r)
    stats[r].peakMemory = engine.peakMemory(r);
  SimResult res;
  res.ranks = stats;
  for (int32_t r = 0; r < numRanks; ++r) {
    // A gather is noted when posted and may start after intervals noted
    // later: back into time order.
    if (gatherIntervals)
      std::stable_sort(commIv[r].begin(), commIv[r].end(),
                       [](const CommInterval &a, const CommInterval &b) {
                         return a.start < b.start;
                       });
    res.exposedComm += stats[r].exposedComm;
    res.exposedP2P += stats[r].exposedP2P;
    res.exposedA2A += stats[r].exposedA2A;
    res.commIntervals.insert(res.commIntervals.end(), commIv[r].begin(),
                             commIv[r].end());
  }
  double sumBusy = 0, maxBusy = 0, zbCost = 0;
  for (int32_t r = 0; r < numRanks; ++r) {
    const RankStats &st = stats[r];
    sumBusy += st.busy;
    maxBusy = std::max(maxBusy, st.busy);
    if (anyCompute[r])
      zbCost = std::max(zbCost, st.lastEnd - st.firstStart);
  }
  res.makespan = makespan;
  if (res.makespan > 0)
    res.bubbleRate = 1 - sumBusy / (numRanks * res.makespan);
  if (zbCost > 0)
    res.zbBubbleRate = (zbCost - maxBusy) / zbCost;
  res.intervals = std::move(intervals);
  return res;
}
} // namespace

Expected<SimResult> simulate(const Schedule &s, const CostModel &cost,
                             const SimOptions &opts) {
  Simulation sim(s, cost, opts);
  return sim.run();
}

} // namespace pipeforge::sched
