//===- CommInsertion.cpp - Send/recv insertion ----------------------------===//
//
// How the messages are ordered, and why that cannot deadlock:
//
// 1. Replay the compute programs as an ASAP list schedule on the cost model
//    (by default F = B = W = 1, BW = 2, an overlapped pair the sum of its
//    members, no communication time): every action starts when its rank is
//    free and its inputs are done (plus tcomm when they come from another
//    rank). The replay is the verifier's and the simulator's engine
//    (Replay.h), dependency rule included (Deps.h); this file only times it.
//    With the real costs, every message sits where the simulator will need
//    it, so inserting messages does not stretch the schedule. Programs whose
//    compute order cannot run (a cycle through the dependencies) are
//    rejected here.
// 2. Every cross-rank dependency becomes one message with the global key
//    (end time of its producer in the replay, message id). The id is unique
//    per producer, so the keys are totally ordered.
// 3. On each rank, the compute actions (at their replay start times) and the
//    rank's messages (at their key times) are merged by time, messages first
//    on ties. A Send comes after its producer (key = producer end > producer
//    start) and a Recv before its consumer (consumer start >= producer end
//    = key, and messages win ties). The messages of one rank appear in
//    increasing key order.
//
// Deadlock freedom under rendezvous semantics: compute actions never block
// (their inputs were received earlier in the program, local inputs were
// produced earlier, as the replay proved). Suppose every unfinished rank is
// blocked at a Send or Recv, and let M be the pending message with the
// smallest key among those heads. M's other endpoint has not executed M, and
// its messages come in increasing key order, so its head is a message with
// key <= key(M); by minimality that head is M itself. Both endpoints are at
// M, which therefore completes: a contradiction. The final DualPipe
// GradReduce pairs come after everything else on both ranks of each pair.
//
// Cost: O(A log p) for A actions on p ranks: a rank's keys come out of the
// replay in time order (a sort only where ties break it), and the ranks'
// lists are merged.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/CommInsertion.h"

#include "Deps.h"
#include "Parallel.h"
#include "Replay.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace pipeforge::sched {

namespace {
using detail::release;
using detail::WorkIndex;

/// The result slots a work fills, for the exactly-once check: F fills slot
/// F; B and BW fill slot B ("input gradient ready"); BW and W fill slot W.
enum Slot : int { SlotF = 0, SlotB = 1, SlotW = 2 };
constexpr size_t kSlots = 3;

Status checkShape(const Schedule &s) {
  const Placement &pl = s.placement;
  if (pl.numRanks < 1 || int64_t(s.programs.size()) != pl.numRanks)
    return Status::error("schedule has " + std::to_string(s.programs.size()) +
                         " programs for " + std::to_string(pl.numRanks) +
                         " ranks");
  if (pl.numCopies < 1 || pl.numCopies > 2 || pl.numStages < 1 ||
      int64_t(pl.rankOf.size()) != pl.numCopies)
    return Status::error("schedule placement is malformed");
  for (const auto &copy : pl.rankOf) {
    if (int64_t(copy.size()) != pl.numStages)
      return Status::error("schedule placement is malformed");
    for (int32_t r : copy)
      if (r < 0 || r >= pl.numRanks)
        return Status::error("placement puts a stage on rank " +
                             std::to_string(r) + ", outside 0.." +
                             std::to_string(pl.numRanks - 1));
  }
  if (s.numMicrobatches < 1)
    return Status::error("schedule has no microbatches");
  return Status::ok();
}

/// One message: its key's time (the producer's end in the replay) and its
/// producer, which names the message; the key's tie-break is the producer's
/// messageKey (item index * 2 + gradient?). 16 bytes per message, kept
/// once, in its sender's list for its receiver; the Send and the Recv are
/// formed from it when they are merged into the two programs.
struct MsgKey {
  double time;
  Work producer;
};

/// What one rank sends, by receiving rank (a rank sends to the few ranks
/// of its stages' neighbours: a SmallMap, not a table of p entries): the
/// message count from the validation, then the keys, collected in the
/// sender's program order. Aligned to a cache line: each rank counts its
/// own on its own thread.
struct alignas(64) Outbox {
  struct ToRank {
    size_t count = 0;
    std::vector<MsgKey> keys;
  };
  detail::SmallMap<ToRank> to;
};

/// insertComm's phases over one schedule, in order: validate the compute
/// programs, replay them (step 1, collecting step 2's keys), order the
/// keys (step 2), merge them into the programs (step 3).
class CommInserter {
public:
  CommInserter(Schedule &s, const CostModel &cost)
      : s(s), cost(cost), idx(s), numRanks(s.placement.numRanks),
        parallel(detail::parallelWorth(s)), outbox(size_t(numRanks)) {}

  Status validate();
  Status replay();
  void orderKeys();
  void merge();

private:
  struct Asap;

  /// The rank work `w`, run on rank r, sends its output to, or -1: the
  /// rank of the work that reads it (Deps.h's nominalConsumer), unless
  /// that is r itself (a hand-off) or there is none.
  int32_t receiverOf(const Work &w, int32_t r) const {
    std::optional<Work> c = detail::nominalConsumer(w, idx.numStages);
    if (!c)
      return -1;
    const int32_t to = s.placement.rank(c->copy, c->stage);
    return to != r ? to : -1;
  }
  Status validateRank(int32_t r);
  Status explainStuck(int32_t r, size_t step) const;
  /// The keys' total order: (time, producer's messageKey).
  bool before(const MsgKey &x, const MsgKey &y) const {
    if (x.time != y.time)
      return x.time < y.time;
    return detail::messageKey(x.producer, idx) <
           detail::messageKey(y.producer, idx);
  }
  /// Each rank's incoming lists: (sender, its keys for this rank).
  using Inbox = std::vector<std::pair<int32_t, const std::vector<MsgKey> *>>;
  void mergeRank(int32_t r, const Inbox &incoming);

  Schedule &s;
  const CostModel &cost;
  const WorkIndex idx;
  const int32_t numRanks;
  const bool parallel;
  std::vector<Outbox> outbox;
  /// By item * kSlots + slot: scheduled (validate), to tell a work that no
  /// rank runs from a deadlock.
  std::vector<uint8_t> seen;
  /// By WorkIndex::outputKey: when the replay produced it, -1 while pending.
  std::vector<double> end;
  /// Per rank and step: the replay's start time of each compute action.
  std::vector<std::vector<double>> startAt;
};

/// Validates the actions and records which slots get produced. Each rank
/// marks only the items of its own stages (checked first), so the ranks run
/// in parallel on big schedules; the lowest rank's first error is reported.
Status CommInserter::validate() {
  seen.assign(idx.numItems() * kSlots, 0);
  return detail::firstFailure(size_t(numRanks), parallel, [&](size_t r) {
    return validateRank(int32_t(r));
  });
}

Status CommInserter::validateRank(int32_t r) {
  detail::SmallMap<Outbox::ToRank> &sends = outbox[size_t(r)].to;
  for (size_t i = 0; i < s.programs[r].size(); ++i) {
    const Action &a = s.programs[r][i];
    auto where = [&] {
      return "rank " + std::to_string(r) + " step " + std::to_string(i) +
             " (" + toString(a) + ")";
    };
    if (a.isComm())
      return Status::error(where() + ": schedule already has messages "
                                     "(strip them first)");
    if (a.isParamGather())
      return Status::error(where() + ": schedule already gathers its "
                                     "parameters (insert the messages "
                                     "first, then the gathers)");
    if (a.isStashCopy())
      return Status::error(where() + ": schedule already offloads "
                                     "activations (insert the messages "
                                     "first, then the offload)");
    if (a.kind == ActionKind::Overlap && !detail::isPairShape(a))
      return Status::error(where() + ": an overlapped pair must be an F "
                                     "with a B or BW");
    for (const Work *w : detail::membersOf(a)) {
      if (!idx.inRange(*w))
        return Status::error(where() + ": no such stage, microbatch or copy");
      if (s.placement.rank(w->copy, w->stage) != r)
        return Status::error(
            where() + ": stage " + std::to_string(w->stage) +
            " lives on rank " +
            std::to_string(s.placement.rank(w->copy, w->stage)));
      const size_t item = idx.item(*w);
      auto mark = [&](int slot) -> bool {
        uint8_t &flag = seen[item * kSlots + slot];
        if (flag)
          return false;
        flag = 1;
        return true;
      };
      bool fresh = true;
      switch (w->kind) {
      case WorkKind::F:
        fresh = mark(SlotF);
        break;
      case WorkKind::B:
        fresh = mark(SlotB);
        break;
      case WorkKind::W:
        fresh = mark(SlotW);
        break;
      case WorkKind::BW:
        fresh = mark(SlotB) && mark(SlotW);
        break;
      }
      if (!fresh)
        return Status::error(where() + ": " + toString(*w) +
                             " is scheduled more than once");
      if (int32_t to = receiverOf(*w, r); to >= 0)
        ++sends.at(to).count;
    }
  }
  return Status::ok();
}

/// The replay engine's client for step 1: each compute starts when its
/// rank is free and its inputs are done (tcomm later for a remote one);
/// the end of each work that sends its output becomes that message's key,
/// in its sender's outbox (collected in the sender's program order).
struct CommInserter::Asap {
  CommInserter &ci;
  std::vector<double> clock; ///< per rank: when it is free

  void compute(int32_t r, size_t i, const Action &a, const detail::Input &in1,
               const detail::Input &in2) {
    const bool isPair = a.kind == ActionKind::Overlap;
    double start = clock[size_t(r)];
    auto wait = [&](const detail::Input &in) {
      if (in.kind == detail::Input::None)
        return;
      const double e = ci.end[WorkIndex::outputKey(in.id)];
      start = std::max(start,
                       in.kind == detail::Input::Edge ? e + ci.cost.tcomm : e);
    };
    wait(in1);
    if (isPair)
      wait(in2);
    double dur = ci.cost.timeOf(a.work.kind, a.work.stage);
    if (isPair)
      dur = ci.cost.tfb >= 0
                ? ci.cost.tfb
                : dur + ci.cost.timeOf(a.work2.kind, a.work2.stage);
    // A zero-length action would tie its own start with its messages'
    // keys; a tiny positive length keeps every Send after its producer.
    // Where the times are large next to the length (start 1e16, length
    // 0.5: the sum rounds back to start) the next double does: without
    // it a correct schedule got a Send before its producer ("sends F0.2
    // before producing it").
    double finish = start + std::max(dur, 1e-9);
    if (!(finish > start))
      finish = std::nextafter(start, HUGE_VAL);
    ci.startAt[size_t(r)][i] = start;
    clock[size_t(r)] = finish;
    for (const Work *w : detail::membersOf(a)) {
      if (w->kind != WorkKind::W) // W produces nothing another work reads
        ci.end[WorkIndex::outputKey(ci.idx.id(*w))] = finish;
      if (int32_t to = ci.receiverOf(*w, r); to >= 0)
        ci.outbox[size_t(r)].to.at(to).keys.push_back({finish, *w});
    }
  }
  // A compute-only schedule has no messages.
  void send(int32_t, size_t, const Action &, const detail::CommSlot &) {}
  void recv(int32_t, size_t, const Action &, const detail::CommSlot &) {}
  void gradReduceArrive(int32_t, size_t, const detail::CommSlot &) {}
  void gradReduce(int32_t, size_t, const detail::CommSlot &) {}
  void paramGather(int32_t, size_t, const Action &) {}
  void stashCopy(int32_t, size_t, const Action &) {}
};

/// Step 1 on the replay engine, its inputs resolved from the placement
/// (Options::byPlacement: validate() proved every work runs at most once,
/// on its own rank). A compute whose input no rank produces, or whose
/// input comes later on its own rank, stays parked: programs whose compute
/// order cannot run end in a deadlock, explained at the lowest stuck rank.
Status CommInserter::replay() {
  const std::vector<detail::Loc> noLocs;
  detail::ReplayEngine::Options opts;
  opts.byPlacement = true;
  detail::ReplayEngine engine(s, idx, noLocs, opts);
  engine.assignChannels();
  end.assign(idx.numMessages(), -1);
  startAt.resize(size_t(numRanks));
  for (int32_t r = 0; r < numRanks; ++r)
    startAt[size_t(r)].resize(s.programs[r].size());
  for (Outbox &o : outbox)
    for (auto &item : o.to.items())
      item.value.keys.reserve(item.value.count);
  Asap asap{*this, std::vector<double>(size_t(numRanks), 0)};
  detail::ReplayEngine::Outcome out = engine.run(asap);
  if (out.kind != detail::ReplayEngine::Outcome::Finished)
    return explainStuck(out.rank, out.step);
  // The replay's per-item state is no longer needed.
  release(end);
  release(seen);
  return Status::ok();
}

/// "compute order cannot run": rank r's action at `step` waits for the
/// first of its members' predecessors (Deps.h's rule, the saved F first)
/// that the replay never produced.
Status CommInserter::explainStuck(int32_t r, size_t step) const {
  const Action &a = s.programs[r][step];
  std::string missing;
  auto find = [&](const Work &pred, detail::DepRole) -> bool {
    const size_t id = idx.id(pred);
    if (end[WorkIndex::outputKey(id)] >= 0)
      return true;
    const int slot = pred.kind == WorkKind::F ? SlotF : SlotB;
    missing =
        toString(pred) +
        (seen[idx.item(pred) * kSlots + slot] ? "" : " (never scheduled)");
    return false;
  };
  for (const Work *w : detail::membersOf(a))
    if (!detail::forEachPredecessor(*w, idx.numStages, find))
      break;
  return Status::error("compute order cannot run: rank " + std::to_string(r) +
                       " step " + std::to_string(step) + " (" + toString(a) +
                       ") waits for " + missing);
}

/// Step 2: one global order of the keys, (time, producer's messageKey);
/// the messageKey is unique, so the order is total. A pair's keys,
/// collected in its sender's program order, are already sorted but for
/// ties (the two members of a pair, zero-length actions): sorted where
/// needed. A rank's messages are the pairs it sends on and those it
/// receives on; step 3 merges each rank's few sorted lists on its own
/// (O(A log p), the ranks in parallel: no global sort or merge).
void CommInserter::orderKeys() {
  auto less = [&](const MsgKey &x, const MsgKey &y) { return before(x, y); };
  detail::forEachParallel(size_t(numRanks), [&](size_t q) {
    for (auto &item : outbox[q].to.items()) {
      std::vector<MsgKey> &k = item.value.keys;
      if (!std::is_sorted(k.begin(), k.end(), less))
        std::sort(k.begin(), k.end(), less);
    }
  }, parallel);
}

/// Step 3, each rank on its own.
void CommInserter::merge() {
  std::vector<Inbox> inbox(static_cast<size_t>(numRanks));
  for (int32_t q = 0; q < numRanks; ++q)
    for (const auto &item : outbox[size_t(q)].to.items())
      inbox[size_t(item.key)].emplace_back(q, &item.value.keys);
  detail::forEachParallel(size_t(numRanks), [&](size_t r) {
    mergeRank(int32_t(r), inbox[r]);
  }, parallel);
  s.hasComm = true;
}

/// Merges rank r's messages into its program in place: the program grows
/// to its final length (within the room the generators reserve, so without
/// a copy) and is filled from the back. A message goes right before the
/// first compute action that starts at or after its key (start times rise
/// strictly along a program), so walking back, the messages with a key
/// after compute action i's start go after it, the latest key first (the
/// lists' last keys in a heap). The write position stays above the compute
/// action read next: nothing is overwritten before it is moved.
void CommInserter::mergeRank(int32_t r, const Inbox &incoming) {
  // The rank's lists: the pairs it sends on, then those it receives on.
  struct List {
    const MsgKey *begin, *end; // end moves back as keys are taken
    int32_t peer;
    bool send;
  };
  std::vector<List> lists;
  size_t messages = 0;
  auto add = [&](const std::vector<MsgKey> &l, int32_t peer, bool send) {
    if (!l.empty())
      lists.push_back({l.data(), l.data() + l.size(), peer, send});
    messages += l.size();
  };
  for (const auto &item : outbox[size_t(r)].to.items())
    add(item.value.keys, int32_t(item.key), true);
  for (const auto &[q, keys] : incoming)
    add(*keys, q, false);
  // A heap of the lists by their last remaining key, the latest on top.
  auto earlier = [&](size_t x, size_t y) {
    return before(lists[x].end[-1], lists[y].end[-1]);
  };
  std::vector<size_t> heap(lists.size());
  for (size_t k = 0; k < lists.size(); ++k)
    heap[k] = k;
  std::make_heap(heap.begin(), heap.end(), earlier);
  // The latest message not yet placed, as an action (the heap's top).
  auto takeLatest = [&] {
    std::pop_heap(heap.begin(), heap.end(), earlier);
    List &l = lists[heap.back()];
    const Work &w = (--l.end)->producer;
    const Payload payload =
        w.kind == WorkKind::F ? Payload::Activation : Payload::Gradient;
    if (l.end == l.begin)
      heap.pop_back();
    else
      std::push_heap(heap.begin(), heap.end(), earlier);
    return l.send ? Action::send(payload, w, l.peer)
                  : Action::recv(payload, w, l.peer);
  };
  auto latestTime = [&] { return lists[heap.front()].end[-1].time; };
  const std::vector<double> &start = startAt[size_t(r)];
  std::vector<Action> &prog = s.programs[r];
  const size_t compute = prog.size(), total = compute + messages;
  const bool gradReduce = s.placement.numCopies == 2 && numRanks - 1 - r != r;
  prog.resize(total + (gradReduce ? 1 : 0));
  if (gradReduce)
    prog[total] = Action::gradReduce(numRanks - 1 - r);
  size_t w = total;
  for (size_t i = compute; i-- > 0;) {
    while (!heap.empty() && latestTime() > start[i])
      prog[--w] = takeLatest();
    prog[--w] = prog[i];
  }
  while (!heap.empty())
    prog[--w] = takeLatest();
  release(startAt[size_t(r)]);
}

} // namespace

void stripComm(Schedule &s) {
  for (std::vector<Action> &prog : s.programs)
    prog.erase(std::remove_if(prog.begin(), prog.end(),
                              [](const Action &a) { return a.isComm(); }),
               prog.end());
  s.hasComm = false;
}

Status insertComm(Schedule &s) { return insertComm(s, CostModel()); }

namespace {
/// ZeRO-3's gathers of a compute-only schedule (an imported CSV): each
/// UNSHARD stays before the compute action it preceded, each RESHARD after
/// the one it followed; the messages go in between (insertComm).
Status insertCommAroundGathers(Schedule &s, const CostModel &cost) {
  // Per rank: (compute ordinal, before?) of each gather, in program order.
  struct Anchor {
    size_t compute;
    Action gather;
  };
  std::vector<std::vector<Anchor>> before(s.programs.size()),
      after(s.programs.size());
  Schedule bare = s;
  for (size_t r = 0; r < s.programs.size(); ++r) {
    std::vector<Action> &prog = bare.programs[r];
    size_t computes = 0;
    for (const Action &a : prog) {
      if (a.kind == ActionKind::Unshard)
        before[r].push_back({computes, a});
      else if (a.kind == ActionKind::Reshard && computes > 0)
        after[r].push_back({computes - 1, a});
      else if (a.kind == ActionKind::Reshard) // before any compute
        before[r].push_back({0, a});
      computes += a.isCompute();
    }
    prog.erase(std::remove_if(prog.begin(), prog.end(),
                              [](const Action &a) { return a.isParamGather(); }),
               prog.end());
  }
  if (Status st = insertComm(bare, cost); !st)
    return st;
  for (size_t r = 0; r < s.programs.size(); ++r) {
    std::vector<Action> out;
    out.reserve(bare.programs[r].size() + before[r].size() + after[r].size());
    size_t computes = 0, b = 0, e = 0;
    for (const Action &a : bare.programs[r]) {
      if (a.isCompute())
        while (b < before[r].size() && before[r][b].compute == computes)
          out.push_back(before[r][b++].gather);
      out.push_back(a);
      if (a.isCompute()) {
        while (e < after[r].size() && after[r][e].compute == computes)
          out.push_back(after[r][e++].gather);
        ++computes;
      }
    }
    // After the last compute (a program that gathers what it never uses:
    // the verifier names it).
    for (; b < before[r].size(); ++b)
      out.push_back(before[r][b].gather);
    bare.programs[r] = std::move(out);
  }
  s = std::move(bare);
  return Status::ok();
}
} // namespace

Status insertComm(Schedule &s, const CostModel &cost) {
  if (s.hasComm)
    return Status::error("schedule already has messages (strip them first)");
  for (const std::vector<Action> &prog : s.programs)
    for (const Action &a : prog)
      if (a.isParamGather())
        return insertCommAroundGathers(s, cost);
  if (Status st = checkShape(s); !st)
    return st;
  if (Status st = checkCosts(cost, s); !st)
    return st;
  CommInserter ci(s, cost);
  if (Status st = ci.validate(); !st)
    return st;
  if (Status st = ci.replay(); !st)
    return st;
  ci.orderKeys();
  ci.merge();
  return Status::ok();
}

} // namespace pipeforge::sched
