//===- Replay.cpp - The replay engine of the verifier and simulator -------===//

#include "Replay.h"

#include "Parallel.h"

#include <algorithm>
#include <cstdint>

namespace pipeforge::sched::detail {

ReplayEngine::ReplayEngine(const Schedule &s, const WorkIndex &idx,
                           const std::vector<Loc> &locs, Options opts)
    : s(s), idx(idx), locs(locs), opts(std::move(opts)), numRanks(s.numRanks()),
      chans(s.numRanks()) {}

namespace {
/// One rank's channels in the order it first touches them: its message
/// counts on each, then the channel's number and the rank's write cursors
/// into the channel's lists. Aligned to a cache line: the ranks' lookups
/// run on different threads.
struct alignas(64) RankChannels {
  struct Entry {
    size_t sends = 0, recvs = 0;
    int32_t chan = -1;
  };
  SmallMap<Entry> map; ///< by key(src, dst)

  static int64_t key(int32_t src, int32_t dst) {
    return (int64_t(src) << 32) | uint32_t(dst);
  }
  Entry &at(int32_t src, int32_t dst) { return map.at(key(src, dst)); }
};
} // namespace

void ReplayEngine::assignChannels() {
  // Channels are numbered in program order (callers report channel errors
  // in that order); each message action's ordinal on its channel is derived
  // as the replay reaches it (slotOf). A first pass numbers the channels
  // and counts their messages, so that every table is sized once
  // (millions of messages: no growth by doubling).
  //
  // Each rank first lists the channels it touches (RankChannels), the ranks
  // in parallel on big schedules; the lists are then numbered rank after
  // rank, which is program order.
  const bool parallel = parallelWorth(s);
  std::vector<RankChannels> ranks(static_cast<size_t>(numRanks));
  forEachParallel(size_t(numRanks), [&](size_t rr) {
    const int32_t r = int32_t(rr);
    RankChannels &rc = ranks[rr];
    for (const Action &a : s.programs[r]) {
      if (a.kind == ActionKind::Send) {
        ++rc.at(r, a.peer).sends;
      } else if (a.kind == ActionKind::Recv) {
        ++rc.at(a.peer, r).recvs;
      } else if (a.kind == ActionKind::GradReduce) {
        // Both directions, no Send or Recv.
        rc.at(r, a.peer);
        rc.at(a.peer, r);
      }
    }
  }, parallel);
  std::vector<size_t> nSend, nRecv;
  for (RankChannels &rc : ranks)
    for (auto &item : rc.map.items()) {
      RankChannels::Entry &t = item.value;
      t.chan = chans.get(int32_t(item.key >> 32), int32_t(uint32_t(item.key)));
      size_t c = static_cast<size_t>(t.chan);
      if (c >= nSend.size()) {
        nSend.resize(c + 1, 0);
        nRecv.resize(c + 1, 0);
      }
      nSend[c] += t.sends;
      nRecv[c] += t.recvs;
    }
  chanSends.resize(nSend.size());
  chanRecvs.resize(nSend.size());
  chanSendCount = nSend;
  if (opts.verified)
    return;
  // The Loc lists of the checks and error reports, in ordinal order. A
  // channel's sends all come from its source rank and its receives from its
  // destination, so each rank fills its own entries through the cursors of
  // its own list (the lists' headers sit side by side: growing them from
  // two threads would bounce their cache line).
  for (size_t c = 0; c < nSend.size(); ++c) {
    chanSends[c].resize(nSend[c]);
    chanRecvs[c].resize(nRecv[c]);
  }
  forEachParallel(size_t(numRanks), [&](size_t rr) {
    const int32_t r = int32_t(rr);
    RankChannels &rc = ranks[rr];
    for (auto &item : rc.map.items())
      item.value.sends = item.value.recvs = 0; // now the write cursors
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      Loc here{r, static_cast<int32_t>(i)};
      if (a.kind == ActionKind::Send) {
        RankChannels::Entry &t = rc.at(r, a.peer);
        chanSends[size_t(t.chan)][t.sends++] = here;
      } else if (a.kind == ActionKind::Recv) {
        RankChannels::Entry &t = rc.at(a.peer, r);
        chanRecvs[size_t(t.chan)][t.recvs++] = here;
      }
    }
  }, parallel);
}

void ReplayEngine::reset() {
  size_t nc = chans.size();
  tracked = !s.hasComm || !(opts.prechecked || opts.verified);
  placed = opts.byPlacement && !s.hasComm;
  const size_t workKeys = placed ? idx.numMessages() : idx.size();
  done.assign(tracked ? workKeys : 0, 0);
  received.assign(tracked && !placed ? idx.numMessages() : 0, 0);
  sendArr.assign(nc, 0);
  recvArr.assign(nc, 0);
  grArr.assign(nc, 0);
  pc.assign(numRanks, 0);
  arrived.assign(numRanks, 0);
  mem.assign(numRanks, 0);
  peak.assign(numRanks, 0);
  overStep.assign(numRanks, SIZE_MAX);
  overMem.assign(numRanks, 0);
  offload.clear();
  offState.clear();
  // The schedule's own OFFLOAD/RELOAD actions state the plan where it has
  // them (offloadPlanOf); else CostModel::offloadGap derives it.
  const bool actions = opts.memCost && hasOffloadActions(s);
  if (opts.memCost && (actions || opts.memCost->offloadGap > 0)) {
    offload.resize(size_t(numRanks));
    offState.resize(size_t(numRanks));
    for (int32_t r = 0; r < numRanks; ++r)
      offload[size_t(r)] =
          actions ? offloadPlanOf(s.programs[size_t(r)])
                  : planOffload(s.programs[size_t(r)],
                                opts.memCost->offloadGap);
  }
  sendKeyBase = s.hasComm ? 0 : workKeys;
  recvKeyBase = sendKeyBase + nc;
  grKeyBase = recvKeyBase + nc;
  waits.reset(grKeyBase + nc, numRanks);
  ready.clear();
  outcome = Outcome();
}

ReplayEngine::Step ReplayEngine::resolveInput(int32_t r, size_t i,
                                              const Work &w, Input &in) {
  std::optional<Work> nominal = nominalProducer(w, idx.numStages);
  if (!nominal) {
    in = Input();
    return Step::Done;
  }
  std::optional<Work> prod = resolveProducer(*nominal, locs, idx);
  if (!prod)
    return fail(r, i,
                "missing producer: " + toString(w) + " needs " +
                    toString(*nominal) +
                    (nominal->kind == WorkKind::B ? " (or BW)" : "") +
                    ", which no rank runs");
  size_t pid = idx.id(*prod);
  const Loc &pl = locs[pid];
  if (pl.rank == r) {
    if (!done[pid])
      return fail(r, i,
                  toString(w) + " needs " + describeAt(*prod, pl) +
                      ", which runs later on this rank");
    in = Input{Input::Local, pid};
    return Step::Done;
  }
  if (s.hasComm) {
    size_t key = messageKey(*prod, idx);
    if (!received[key])
      return fail(r, i,
                  toString(w) + " needs " + describeAt(*prod, pl) +
                      " but this rank has not received it (no RECV before "
                      "this step)");
    in = Input{Input::Message, key};
    return Step::Done;
  }
  if (!done[pid])
    return park(r, pid);
  in = Input{Input::Edge, pid};
  return Step::Done;
}

ReplayEngine::Step ReplayEngine::checkSend(int32_t r, size_t i,
                                           const Action &a) {
  if (a.payload == Payload::WeightGrad)
    return Step::Done;
  std::optional<Work> prod = resolveProducer(a.work, locs, idx);
  if (!prod)
    return fail(r, i, "sends " + toString(a.work) + ", which no rank produces");
  const Loc &pl = locs[idx.id(*prod)];
  if (pl.rank != r)
    return fail(r, i,
                "sends " + describeAt(*prod, pl) +
                    ", which another rank produces");
  if (!done[idx.id(*prod)])
    return fail(r, i,
                "sends " + describeAt(*prod, pl) + " before producing it");
  return Step::Done;
}

ReplayEngine::Step ReplayEngine::checkRecv(int32_t r, size_t i, const Action &a,
                                           const CommSlot &sl) {
  const Loc &at = chanSends[sl.chan][sl.ordinal];
  const Action &sent = s.programs[at.rank][at.step];
  if (!sameMessage(sent, a))
    return fail(r, i,
                "receives " + toString(a) +
                    " but the matching send on this channel is " +
                    toString(sent));
  return Step::Done;
}

void ReplayEngine::noteMemory(int32_t r, size_t i, double delta) {
  mem[r] += delta;
  peak[r] = std::max(peak[r], mem[r]);
  if (delta > 0 && opts.memLimit && overStep[r] == SIZE_MAX &&
      mem[r] > *opts.memLimit + 1e-9) {
    overStep[r] = i;
    overMem[r] = mem[r];
  }
}

void ReplayEngine::account(int32_t r, size_t i, const Action &a) {
  if (!opts.memCost)
    return;
  const CostModel &c = *opts.memCost;
  const OffloadPlan *plan = offload.empty() ? nullptr : &offload[size_t(r)];
  auto stashOf = [&](const StashKey &k) {
    return c.memDelta(WorkKind::F, std::get<1>(k));
  };
  // Activation offload: the stashes coming back under this action.
  if (plan)
    if (auto it = plan->reloadBefore.find(i); it != plan->reloadBefore.end())
      for (const StashKey &k : it->second) {
        uint8_t &st = offState[size_t(r)][k];
        if (st == 2)
          noteMemory(r, i, stashOf(k));
        st = 0;
      }
  noteMemory(r, i, c.memDelta(a.work.kind, a.work.stage));
  if (a.kind == ActionKind::Overlap) {
    // The pair's second member: its growth is not a new excess step
    // (the first member's is).
    mem[r] += c.memDelta(a.work2.kind, a.work2.stage);
    peak[r] = std::max(peak[r], mem[r]);
  }
  if (!plan)
    return;
  for (const Work *w : {&a.work, a.kind == ActionKind::Overlap ? &a.work2
                                                              : nullptr})
    if (w && w->kind == WorkKind::F &&
        plan->keys.count(StashKey{w->copy, w->stage, w->mb}))
      offState[size_t(r)][StashKey{w->copy, w->stage, w->mb}] = 1;
  // The stashes whose copy out ran under this action leave the device.
  if (auto it = plan->awayAfter.find(i); it != plan->awayAfter.end())
    for (const StashKey &k : it->second) {
      uint8_t &st = offState[size_t(r)][k];
      if (st == 1) {
        mem[r] -= stashOf(k);
        st = 2;
      }
    }
}

std::optional<ReplayEngine::MemoryExcess> ReplayEngine::memoryExcess() const {
  for (int32_t r = 0; r < numRanks; ++r)
    if (overStep[r] != SIZE_MAX)
      return MemoryExcess{r, overStep[r], overMem[r]};
  return std::nullopt;
}

std::string ReplayEngine::whereIs(int32_t q) const {
  if (pc[q] >= s.programs[q].size())
    return "rank " + std::to_string(q) + " has finished its program";
  return "rank " + std::to_string(q) + " is blocked at step " +
         std::to_string(pc[q]) + ": " + toString(s.programs[q][pc[q]]);
}

std::string ReplayEngine::blockedReason(int32_t r) const {
  const Action &a = s.programs[r][pc[r]];
  switch (a.kind) {
  case ActionKind::Send:
    return toString(a) + " blocks until rank " + std::to_string(a.peer) +
           " reaches the matching RECV; " + whereIs(a.peer);
  case ActionKind::Recv:
    return toString(a) + " blocks until rank " + std::to_string(a.peer) +
           " reaches the matching SEND; " + whereIs(a.peer);
  case ActionKind::GradReduce:
    return toString(a) + " blocks until rank " + std::to_string(a.peer) +
           " reaches its matching GRADREDUCE; " + whereIs(a.peer);
  default: {
    // A compute waiting on a remote producer (compute-only schedules).
    if (locs.empty())
      return toString(a) + " cannot proceed";
    size_t key = waits.parkedOn(r);
    if (!waits.isParked(r) || key >= sendKeyBase)
      return toString(a) + " cannot proceed";
    for (const Work *w : membersOf(a)) {
      std::optional<Work> nominal = nominalProducer(*w, idx.numStages);
      if (!nominal)
        continue;
      std::optional<Work> prod = resolveProducer(*nominal, locs, idx);
      if (prod && idx.id(*prod) == key) {
        const Loc &l = locs[key];
        return toString(*w) + " waits for " + describeAt(*prod, l) + "; " +
               whereIs(l.rank);
      }
    }
    return toString(a) + " cannot proceed";
  }
  }
}

ReplayEngine::Outcome ReplayEngine::deadlock() const {
  std::vector<int32_t> stuck;
  for (int32_t r = 0; r < numRanks; ++r)
    if (pc[r] < s.programs[r].size())
      stuck.push_back(r);
  if (stuck.empty())
    return Outcome();
  int32_t r = stuck.front();
  std::string msg = "deadlock: " + blockedReason(r);
  msg += "\n  blocked ranks:";
  for (size_t k = 0; k < stuck.size() && k < 8; ++k)
    msg += " r" + std::to_string(stuck[k]) + "@" + std::to_string(pc[stuck[k]]);
  if (stuck.size() > 8)
    msg += " ... (" + std::to_string(stuck.size()) + " in all)";
  return Outcome{Outcome::Deadlock, r, pc[r], std::move(msg)};
}

} // namespace pipeforge::sched::detail
