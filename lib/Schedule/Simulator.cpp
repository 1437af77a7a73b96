//===- Simulator.cpp - Event-driven replay on a cost model ----------------===//
//
// Every rank runs its program in order. An action starts when the rank is
// free and its inputs are ready; since ranks share nothing but data, the
// replay is a dataflow evaluation: a rank advances until it needs something
// not produced yet, parks on that item, and is woken when it appears. Each
// action is evaluated O(1) times (plus its wake-ups), so the replay is
// linear in the number of actions. A rank that is still parked when nothing
// can move is reported as a deadlock with its rank and step.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Simulator.h"
#include "pipeforge/Schedule/PairOrder.h"

#include "Deps.h"

#include <algorithm>
#include <cstdint>

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
    return tbw >= 0 ? tbw
                    : pick(tbStage, stage, tb) + pick(twStage, stage, tw);
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


namespace {
using namespace detail;

class Replay {
public:
  Replay(const Schedule &s, const CostModel &cost)
      : s(s), cost(cost), idx(s), numRanks(s.numRanks()) {}

  Expected<SimResult> run();

private:
  enum class Step { Done, Blocked, Failed };

  Status prepare();
  Step advance(int32_t r);
  /// Ready time of `w`'s input on rank r, or a block / failure.
  Step inputReady(int32_t r, size_t step, const Work &w, double &ready);
  void complete(int32_t r, const Work &w, double end);
  void park(int32_t r, size_t key) { waits.park(r, key); }
  void wake(size_t key) { waits.wake(key, ready); }
  Step fail(int32_t r, size_t step, const std::string &msg) {
    error = stepError(s, r, step, msg);
    return Step::Failed;
  }
  std::string blockedReason(int32_t r) const;
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
  WorkIndex idx;
  int32_t numRanks;
  std::vector<Loc> locs;
  std::vector<std::vector<CommSlot>> slots;
  ChannelMap chans;

  // Dataflow state.
  std::vector<char> done;
  std::vector<double> endTime;
  std::vector<char> received; ///< by messageKey: a Recv completed
  std::vector<double> recvTime;
  std::vector<std::vector<double>> sendPost;      ///< per channel
  std::vector<std::vector<const Action *>> sendMsg;
  std::vector<std::vector<double>> grArrive;      ///< per channel

  // Rank state.
  std::vector<size_t> pc;
  std::vector<double> now, mem;
  std::vector<RankStats> stats;
  std::vector<char> anyCompute;
  std::vector<std::vector<Interval>> intervals;
  // Communication model.
  bool commModel = false; ///< overlapComm, or some stage has all-to-alls
  std::vector<double> commFree;                    ///< per rank
  std::vector<std::vector<CommInterval>> commIv;   ///< per rank
  std::vector<std::vector<double>> sendArrive;     ///< per channel
  std::vector<double> sentAt;                      ///< by messageKey
  double lastSent = 0; ///< inputReady: when the input left its sender

  // Parking: intrusive lists keyed by work id, then channel keys.
  detail::WaitLists waits;
  std::vector<int32_t> ready;
  size_t sendKeyBase = 0, grKeyBase = 0;
  std::string error;
};

Status Replay::prepare() {
  if (Status st = checkShape(s); !st)
    return st;
  const Placement &pl = s.placement;
  locs = locateWork(s, idx);
  slots.resize(numRanks);
  for (int32_t r = 0; r < numRanks; ++r) {
    const std::vector<Action> &prog = s.programs[r];
    slots[r].resize(prog.size());
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      auto checkWork = [&](const Work &w) -> Status {
        if (!idx.inRange(w))
          return Status::error(stepError(s, r, i, toString(w) +
                                                      " is out of range"));
        if (pl.rank(w.copy, w.stage) != r)
          return Status::error(stepError(
              s, r, i,
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
          if (a.work.kind != WorkKind::F ||
              (a.work2.kind != WorkKind::B && a.work2.kind != WorkKind::BW))
            return Status::error(stepError(
                s, r, i, "an overlapped pair must be F with B or BW"));
        }
        continue;
      }
      if (a.peer < 0 || a.peer >= numRanks || a.peer == r)
        return Status::error(
            stepError(s, r, i, "peer rank " + std::to_string(a.peer) +
                                   " is out of range or this rank"));
      if (a.kind != ActionKind::GradReduce && a.payload != Payload::WeightGrad &&
          !idx.inRange(a.work))
        return Status::error(
            stepError(s, r, i, "message " + toString(a.work) +
                                   " is out of range"));
      CommSlot &sl = slots[r][i];
      if (a.kind == ActionKind::Send)
        sl.chan = chans.get(r, a.peer);
      else if (a.kind == ActionKind::Recv)
        sl.chan = chans.get(a.peer, r);
      else {
        sl.chan = chans.get(r, a.peer);
        sl.other = chans.get(a.peer, r);
      }
    }
  }
  // Ordinals per channel and direction.
  size_t nc = chans.size();
  std::vector<int32_t> nSend(nc), nRecv(nc), nGr(nc);
  for (int32_t r = 0; r < numRanks; ++r)
    for (size_t i = 0; i < s.programs[r].size(); ++i) {
      CommSlot &sl = slots[r][i];
      switch (s.programs[r][i].kind) {
      case ActionKind::Send:
        sl.ordinal = nSend[sl.chan]++;
        break;
      case ActionKind::Recv:
        sl.ordinal = nRecv[sl.chan]++;
        break;
      case ActionKind::GradReduce:
        sl.ordinal = nGr[sl.chan]++;
        break;
      default:
        break;
      }
    }
  done.assign(idx.size(), 0);
  endTime.assign(idx.size(), 0);
  received.assign(idx.size(), 0);
  recvTime.assign(idx.size(), 0);
  sendPost.resize(nc);
  sendMsg.resize(nc);
  grArrive.resize(nc);
  pc.assign(numRanks, 0);
  now.assign(numRanks, 0);
  mem.assign(numRanks, 0);
  stats.assign(numRanks, RankStats());
  anyCompute.assign(numRanks, 0);
  intervals.resize(numRanks);
  commModel = cost.overlapComm;
  for (int st = 0; st < pl.numStages && !commModel; ++st)
    commModel = stageHasA2A(st);
  commFree.assign(numRanks, 0);
  commIv.resize(numRanks);
  sendArrive.resize(nc);
  sentAt.assign(idx.size(), 0);
  sendKeyBase = idx.size();
  grKeyBase = sendKeyBase + nc;
  waits.reset(grKeyBase + nc, numRanks);
  return Status::ok();
}

void Replay::complete(int32_t r, const Work &w, double end) {
  (void)r;
  size_t id = idx.id(w);
  done[id] = 1;
  endTime[id] = end;
  wake(id);
}

Replay::Step Replay::inputReady(int32_t r, size_t step, const Work &w,
                                double &readyAt) {
  readyAt = 0;
  lastSent = 0;
  std::optional<Work> nominal = nominalProducer(w, idx.numStages);
  if (!nominal)
    return Step::Done;
  std::optional<Work> prod = resolveProducer(*nominal, locs, idx);
  if (!prod)
    return fail(r, step,
                "missing producer: " + toString(w) + " needs " +
                    toString(*nominal) +
                    (nominal->kind == WorkKind::B ? " (or BW)" : "") +
                    ", which no rank runs");
  size_t pid = idx.id(*prod);
  const Loc &pl = locs[pid];
  if (pl.rank == r) {
    if (done[pid]) {
      readyAt = lastSent = endTime[pid];
      return Step::Done;
    }
    return fail(r, step,
                toString(w) + " needs " + describeAt(*prod, pl) +
                    ", which runs later on this rank");
  }
  if (s.hasComm) {
    size_t key = messageKey(*prod, idx);
    if (received[key]) {
      readyAt = recvTime[key];
      lastSent = sentAt[key];
      return Step::Done;
    }
    return fail(r, step,
                toString(w) + " needs " + describeAt(*prod, pl) +
                    " but this rank has not received it (no RECV before "
                    "this step)");
  }
  if (done[pid]) {
    readyAt = endTime[pid] + cost.tcomm;
    lastSent = readyAt; // compute-only: an edge delay, not a message
    return Step::Done;
  }
  park(r, pid);
  return Step::Blocked;
}

Replay::Step Replay::advance(int32_t r) {
  const std::vector<Action> &prog = s.programs[r];
  while (pc[r] < prog.size()) {
    size_t i = pc[r];
    const Action &a = prog[i];
    double t = now[r];
    RankStats &st = stats[r];
    switch (a.kind) {
    case ActionKind::Compute:
    case ActionKind::Overlap: {
      double in1 = 0, in2 = 0, sent1 = 0, sent2 = 0;
      Step k = inputReady(r, i, a.work, in1);
      if (k != Step::Done)
        return k;
      sent1 = lastSent;
      bool pair = a.kind == ActionKind::Overlap;
      if (pair) {
        if (Step k2 = inputReady(r, i, a.work2, in2); k2 != Step::Done)
          return k2;
        sent2 = lastSent;
      }
      double start = std::max({t, in1, in2});
      if (cost.overlapComm && s.hasComm && start > t) {
        // The Recv did not block: the consumer waits here.
        st.exposedComm += start - t;
        double fl = std::max(0.0, std::max(in1 - std::max(t, sent1),
                                           in2 - std::max(t, sent2)));
        st.exposedP2P += fl;
        addComm(r, i, start - fl, start, CommInterval::ExposedP2P);
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
      mem[r] += cost.memDelta(a.work.kind, a.work.stage);
      st.peakMemory = std::max(st.peakMemory, mem[r]);
      if (pair) {
        mem[r] += cost.memDelta(a.work2.kind, a.work2.stage);
        st.peakMemory = std::max(st.peakMemory, mem[r]);
      }
      if (!anyCompute[r]) {
        anyCompute[r] = 1;
        st.firstStart = start;
      }
      st.busy += busy;
      st.lastEnd = end;
      now[r] = end;
      intervals[r].push_back(Interval{r, i, start, end});
      complete(r, a.work, end);
      if (pair)
        complete(r, a.work2, end);
      break;
    }
    case ActionKind::Send: {
      const CommSlot &sl = slots[r][i];
      if (a.payload != Payload::WeightGrad) {
        std::optional<Work> prod = resolveProducer(a.work, locs, idx);
        if (!prod)
          return fail(r, i, "sends " + toString(a.work) +
                                ", which no rank produces");
        const Loc &pl = locs[idx.id(*prod)];
        if (pl.rank != r)
          return fail(r, i, "sends " + describeAt(*prod, pl) +
                                ", which another rank produces");
        if (!done[idx.id(*prod)])
          return fail(r, i, "sends " + describeAt(*prod, pl) +
                                " before producing it");
      }
      sendPost[sl.chan].push_back(t);
      sendMsg[sl.chan].push_back(&a);
      if (cost.overlapComm) {
        double arrive = occupyComm(r, t, cost.tcomm);
        addComm(r, i, arrive - cost.tcomm, arrive, CommInterval::P2P);
        sendArrive[sl.chan].push_back(arrive);
      } else {
        sendArrive[sl.chan].push_back(t + cost.tcomm);
      }
      intervals[r].push_back(Interval{r, i, t, t});
      wake(sendKeyBase + sl.chan);
      break;
    }
    case ActionKind::Recv: {
      const CommSlot &sl = slots[r][i];
      if (sendPost[sl.chan].size() <= static_cast<size_t>(sl.ordinal)) {
        park(r, sendKeyBase + sl.chan);
        return Step::Blocked;
      }
      const Action &sent = *sendMsg[sl.chan][sl.ordinal];
      if (!sameMessage(sent, a))
        return fail(r, i, "receives " + toString(a) + " but the matching send "
                          "on this channel is " + toString(sent));
      double posted = sendPost[sl.chan][sl.ordinal];
      double arrive = sendArrive[sl.chan][sl.ordinal];
      // Blocking (default): the rank waits here. overlapComm: the receive
      // is posted and the consumer waits for `arrive`.
      double end = cost.overlapComm ? t : std::max(t, arrive);
      st.exposedComm += end - t;
      if (!cost.overlapComm) {
        double fl = std::max(0.0, end - std::max(t, posted));
        st.exposedP2P += fl;
        if (commModel)
          addComm(r, i, end - fl, end, CommInterval::ExposedP2P);
      }
      now[r] = end;
      intervals[r].push_back(Interval{r, i, t, end});
      if (a.payload != Payload::WeightGrad) {
        size_t key = messageKey(a.work, idx);
        received[key] = 1;
        recvTime[key] = cost.overlapComm ? std::max(t, arrive) : end;
        sentAt[key] = posted;
      }
      break;
    }
    case ActionKind::GradReduce: {
      const CommSlot &sl = slots[r][i];
      size_t k = static_cast<size_t>(sl.ordinal);
      if (grArrive[sl.chan].size() == k) {
        grArrive[sl.chan].push_back(t);
        wake(grKeyBase + sl.chan);
      }
      if (grArrive[sl.other].size() <= k) {
        park(r, grKeyBase + sl.other);
        return Step::Blocked;
      }
      double end = std::max(t, grArrive[sl.other][k]);
      st.exposedComm += end - t;
      now[r] = end;
      intervals[r].push_back(Interval{r, i, t, end});
      break;
    }
    }
    ++pc[r];
  }
  return Step::Done;
}

double Replay::runComponents(int32_t r, size_t i, const Action &a,
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
    auto chain = [&](double dur, bool comm, int which, int member,
                     int layer) {
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
    // DeepSeek's per-layer order (DOMAIN.md; PairOrder.h). Layer k pairs
    // F's k-th layer with the backward's k-th (in its own, reversed,
    // order); a member with fewer layers has empty components there.
    cs = fusedPairComponents(cost, a.work, a.work2, deepSeekPairOrder(),
                             scale);
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

std::string Replay::blockedReason(int32_t r) const {
  const Action &a = s.programs[r][pc[r]];
  auto where = [&](int32_t q) {
    if (pc[q] >= s.programs[q].size())
      return "rank " + std::to_string(q) + " has finished its program";
    return "rank " + std::to_string(q) + " is at step " +
           std::to_string(pc[q]) + ": " + toString(s.programs[q][pc[q]]);
  };
  if (a.kind == ActionKind::Recv)
    return "deadlock: " + toString(a) + " waits for a send that never comes; " +
           where(a.peer);
  if (a.kind == ActionKind::GradReduce)
    return "deadlock: " + toString(a) + " waits for rank " +
           std::to_string(a.peer) + " to reach its matching GRADREDUCE; " +
           where(a.peer);
  // A compute waiting on a remote producer (compute-only schedules).
  size_t key = waits.parkedOn(r);
  if (key < idx.size()) {
    // Recover the work from its dense id.
    size_t rest = key / 4;
    Work w;
    w.kind = static_cast<WorkKind>(key % 4);
    w.mb = static_cast<int32_t>(rest % idx.numMb);
    rest /= idx.numMb;
    w.stage = static_cast<int32_t>(rest % idx.numStages);
    w.copy = static_cast<int8_t>(rest / idx.numStages);
    const Loc &l = locs[key];
    return "deadlock: " + toString(a) + " waits for " + describeAt(w, l) +
           "; " + where(l.rank);
  }
  return "deadlock: cannot proceed";
}

Expected<SimResult> Replay::run() {
  if (Status st = prepare(); !st)
    return st;
  for (int32_t r = numRanks - 1; r >= 0; --r)
    ready.push_back(r);
  while (!ready.empty()) {
    int32_t r = ready.back();
    ready.pop_back();
    if (waits.isParked(r))
      continue; // parked again since it was queued
    if (advance(r) == Step::Failed)
      return Status::error(error);
  }
  for (int32_t r = 0; r < numRanks; ++r)
    if (pc[r] < s.programs[r].size())
      return Status::error(stepError(s, r, pc[r], blockedReason(r)));

  SimResult res;
  res.ranks = stats;
  for (int32_t r = 0; r < numRanks; ++r) {
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
    for (const Interval &iv : intervals[r])
      res.makespan = std::max(res.makespan, iv.end);
  }
  if (res.makespan > 0)
    res.bubbleRate = 1 - sumBusy / (numRanks * res.makespan);
  if (zbCost > 0)
    res.zbBubbleRate = (zbCost - maxBusy) / zbCost;
  size_t total = 0;
  for (const auto &v : intervals)
    total += v.size();
  res.intervals.reserve(total);
  for (auto &v : intervals)
    res.intervals.insert(res.intervals.end(), v.begin(), v.end());
  return res;
}
} // namespace

Expected<SimResult> simulate(const Schedule &s, const CostModel &cost) {
  Replay replay(s, cost);
  return replay.run();
}

} // namespace pipeforge::sched
