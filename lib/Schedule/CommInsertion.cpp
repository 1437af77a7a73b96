//===- CommInsertion.cpp - Send/recv insertion ----------------------------===//
//
// How the messages are ordered, and why that cannot deadlock:
//
// 1. Replay the compute programs as an ASAP list schedule on the cost model
//    (by default F = B = W = 1, BW = 2, an overlapped pair the sum of its
//    members, no communication time): every action starts when its rank is
//    free and its inputs are done (plus tcomm when they come from another
//    rank). With the real costs, every message sits where the simulator will
//    need it, so inserting messages does not stretch the schedule. Programs
//    whose compute order cannot run (a cycle through the dependencies) are
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace pipeforge::sched {

namespace {
using detail::release;

/// Dense indices for (copy, stage, mb) and per-item replay state.
struct ItemSpace {
  int32_t stages = 0, mbs = 0, copies = 0;
  size_t index(const Work &w) const {
    return (size_t(w.copy) * stages + w.stage) * mbs + w.mb;
  }
  size_t size() const { return size_t(copies) * stages * mbs; }
  bool contains(const Work &w) const {
    return w.copy >= 0 && w.copy < copies && w.stage >= 0 &&
           w.stage < stages && w.mb >= 0 && w.mb < mbs;
  }
};

/// The result slots a work fills: F fills slot F; B and BW fill slot B
/// ("input gradient ready"); BW and W fill slot W. No work waits on slot W
/// (W produces nothing another work reads): the replay keeps times for the
/// first kWaitSlots only.
enum Slot : int { SlotF = 0, SlotB = 1, SlotW = 2 };
constexpr size_t kWaitSlots = 2;


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
/// id (item index * 2 + gradient?). 16 bytes per message, kept once, in
/// its sender's list for its receiver; the Send and the Recv are formed
/// from it when they are merged into the two programs.
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

} // namespace

void stripComm(Schedule &s) {
  for (std::vector<Action> &prog : s.programs)
    prog.erase(std::remove_if(prog.begin(), prog.end(),
                              [](const Action &a) { return a.isComm(); }),
               prog.end());
  s.hasComm = false;
}

Status insertComm(Schedule &s) { return insertComm(s, CostModel()); }

Status insertComm(Schedule &s, const CostModel &cost) {
  if (s.hasComm)
    return Status::error("schedule already has messages (strip them first)");
  if (Status st = checkShape(s); !st)
    return st;
  if (Status st = checkCosts(cost, s); !st)
    return st;
  const ItemSpace space{s.placement.numStages, s.numMicrobatches,
                        s.placement.numCopies};
  const int32_t numRanks = s.placement.numRanks;
  const int32_t lastStage = space.stages - 1;

  // The rank work `w`, run on rank r, sends its output to, or -1: W sends
  // nothing, neither do the last stage's F and stage 0's B, nor a work
  // whose consumer runs on its own rank (a hand-off).
  auto receiverOf = [&](const Work &w, int32_t r) -> int32_t {
    if (w.kind == WorkKind::W)
      return -1;
    const bool grad = w.kind != WorkKind::F;
    if (grad ? w.stage == 0 : w.stage == lastStage)
      return -1;
    const int32_t to = s.placement.rank(w.copy, grad ? w.stage - 1 : w.stage + 1);
    return to != r ? to : -1;
  };
  std::vector<Outbox> outbox(static_cast<size_t>(numRanks));

  // Validate actions and record which slots get produced (to report a work
  // that nobody runs separately from a deadlock). Each rank marks only the
  // items of its own stages (checked first), so the ranks run in parallel
  // on big schedules; the lowest rank's first error is reported.
  const bool parallel = detail::parallelWorth(s);
  const size_t numItems = space.size();
  std::vector<uint8_t> seen(numItems * 3, 0);
  Status valid = detail::firstFailure(size_t(numRanks), parallel, [&](size_t rr) {
    const int32_t r = int32_t(rr);
    detail::SmallMap<Outbox::ToRank> &sends = outbox[rr].to;
    for (size_t i = 0; i < s.programs[r].size(); ++i) {
      const Action &a = s.programs[r][i];
      auto where = [&] {
        return "rank " + std::to_string(r) + " step " + std::to_string(i) +
               " (" + toString(a) + ")";
      };
      if (a.isComm())
        return Status::error(where() + ": schedule already has messages "
                                       "(strip them first)");
      if (a.kind == ActionKind::Overlap &&
          (a.work.kind != WorkKind::F ||
           (a.work2.kind != WorkKind::B && a.work2.kind != WorkKind::BW)))
        return Status::error(where() + ": an overlapped pair must be an F "
                                       "with a B or BW");
      const Work *members[2] = {&a.work,
                                a.kind == ActionKind::Overlap ? &a.work2
                                                              : nullptr};
      for (const Work *w : members) {
        if (!w)
          continue;
        if (!space.contains(*w))
          return Status::error(where() + ": no such stage, microbatch or copy");
        if (s.placement.rank(w->copy, w->stage) != r)
          return Status::error(
              where() + ": stage " + std::to_string(w->stage) + " lives on rank " +
              std::to_string(s.placement.rank(w->copy, w->stage)));
        size_t idx = space.index(*w);
        auto mark = [&](int slot) -> bool {
          uint8_t &flag = seen[idx * 3 + slot];
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
  });
  if (!valid)
    return valid;

  // ASAP replay (step 1). end[idx * kWaitSlots + slot] = end time, -1
  // while pending.
  std::vector<double> end(numItems * kWaitSlots, -1);
  std::vector<int32_t> waitHead(numItems * kWaitSlots, -1);
  std::vector<int32_t> nextWaiter(numRanks, -1);
  std::vector<size_t> pc(numRanks, 0);
  std::vector<double> clock(numRanks, 0);
  std::vector<std::vector<double>> startAt(numRanks);
  std::vector<int32_t> ready;
  ready.reserve(numRanks);
  for (int32_t r = numRanks - 1; r >= 0; --r) {
    ready.push_back(r);
    startAt[r].resize(s.programs[r].size());
  }

  // The (slot) items work `w` needs before it can start, with the rank
  // that produces each (the placement's: every work runs on its own).
  auto forEachDep = [&](const Work &w, auto &&fn) -> bool {
    Work d = w;
    const int32_t own = s.placement.rank(w.copy, w.stage);
    switch (w.kind) {
    case WorkKind::F:
      if (w.stage > 0) {
        d.stage = w.stage - 1;
        return fn(space.index(d) * kWaitSlots + SlotF,
                  s.placement.rank(d.copy, d.stage));
      }
      return true;
    case WorkKind::B:
    case WorkKind::BW:
      if (!fn(space.index(w) * kWaitSlots + SlotF, own))
        return false;
      if (w.stage < lastStage) {
        d.stage = w.stage + 1;
        return fn(space.index(d) * kWaitSlots + SlotB,
                  s.placement.rank(d.copy, d.stage));
      }
      return true;
    case WorkKind::W:
      return fn(space.index(w) * kWaitSlots + SlotB, own);
    }
    return true;
  };
  // The key of the message `w` (run on rank r, ending at `finish`) sends,
  // into its sender's outbox (step 2's keys, collected as the replay
  // finishes each producer: in the sender's program order).
  auto collect = [&](const Work &w, int32_t r, double finish) {
    if (int32_t to = receiverOf(w, r); to >= 0)
      outbox[size_t(r)].to.at(to).keys.push_back({finish, w});
  };
  for (Outbox &o : outbox)
    for (auto &item : o.to.items())
      item.value.keys.reserve(item.value.count);

  while (!ready.empty()) {
    int32_t r = ready.back();
    ready.pop_back();
    std::vector<Action> &prog = s.programs[r];
    while (pc[r] < prog.size()) {
      const Action &a = prog[pc[r]];
      const bool isPair = a.kind == ActionKind::Overlap;
      double start = clock[r];
      auto need = [&](size_t slotIdx, int32_t producerRank) -> bool {
        if (end[slotIdx] < 0) {
          nextWaiter[r] = waitHead[slotIdx];
          waitHead[slotIdx] = r;
          return false;
        }
        start = std::max(start,
                         end[slotIdx] + (producerRank == r ? 0.0 : cost.tcomm));
        return true;
      };
      if (!forEachDep(a.work, need) ||
          (isPair && !forEachDep(a.work2, need)))
        break;
      double dur = cost.timeOf(a.work.kind, a.work.stage);
      if (isPair)
        dur = cost.tfb >= 0 ? cost.tfb
                            : dur + cost.timeOf(a.work2.kind, a.work2.stage);
      // A zero-length action would tie its own start with its messages'
      // keys; a tiny positive length keeps every Send after its producer.
      // Where the times are large next to the length (start 1e16, length
      // 0.5: the sum rounds back to start) the next double does: without
      // it a correct schedule got a Send before its producer ("sends F0.2
      // before producing it").
      double finish = start + std::max(dur, 1e-9);
      if (!(finish > start))
        finish = std::nextafter(start, HUGE_VAL);
      startAt[r][pc[r]] = start;
      clock[r] = finish;
      auto produce = [&](const Work &w) {
        size_t base = space.index(w) * kWaitSlots;
        auto fill = [&](int slot) {
          end[base + slot] = finish;
          for (int32_t q = waitHead[base + slot]; q >= 0;) {
            int32_t nq = nextWaiter[q];
            ready.push_back(q);
            q = nq;
          }
          waitHead[base + slot] = -1;
        };
        if (w.kind == WorkKind::F)
          fill(SlotF);
        else if (w.kind != WorkKind::W)
          fill(SlotB);
      };
      produce(a.work);
      collect(a.work, r, finish);
      if (isPair) {
        produce(a.work2);
        collect(a.work2, r, finish);
      }
      ++pc[r];
    }
  }
  for (int32_t r = 0; r < numRanks; ++r) {
    if (pc[r] == s.programs[r].size())
      continue;
    const Action &a = s.programs[r][pc[r]];
    std::string missing;
    auto find = [&](size_t slotIdx, int32_t) -> bool {
      if (end[slotIdx] >= 0)
        return true;
      size_t idx = slotIdx / kWaitSlots;
      int slot = int(slotIdx % kWaitSlots);
      Work w;
      w.mb = int32_t(idx % space.mbs);
      w.stage = int32_t((idx / space.mbs) % space.stages);
      w.copy = int8_t(idx / (size_t(space.mbs) * space.stages));
      w.kind = slot == SlotF ? WorkKind::F : WorkKind::B;
      missing =
          toString(w) + (seen[idx * 3 + slot] ? "" : " (never scheduled)");
      return false;
    };
    if (forEachDep(a.work, find) && a.kind == ActionKind::Overlap)
      forEachDep(a.work2, find);
    return Status::error("compute order cannot run: rank " + std::to_string(r) +
                         " step " + std::to_string(pc[r]) + " (" +
                         toString(a) + ") waits for " + missing);
  }

  // Messages (step 2): one global order of the keys, (time, producer id);
  // the id (item index * 2 + gradient?) is unique, so the order is total.
  // A pair's keys, collected in its sender's program order, are already
  // sorted but for ties (the two members of a pair, zero-length actions):
  // sorted where needed. A rank's messages are the pairs it sends on and
  // those it receives on; step 3 merges each rank's few sorted lists on
  // its own (O(A log p), the ranks in parallel: no global sort or merge).
  // The replay's per-item state is no longer needed.
  release(end);
  release(waitHead);
  release(seen);
  auto before = [&](const MsgKey &x, const MsgKey &y) {
    if (x.time != y.time)
      return x.time < y.time;
    auto id = [&](const Work &w) {
      return uint64_t(space.index(w)) * 2 + (w.kind == WorkKind::F ? 0 : 1);
    };
    return id(x.producer) < id(y.producer);
  };
  detail::forEachParallel(size_t(numRanks), [&](size_t q) {
    for (auto &item : outbox[q].to.items()) {
      std::vector<MsgKey> &k = item.value.keys;
      if (!std::is_sorted(k.begin(), k.end(), before))
        std::sort(k.begin(), k.end(), before);
    }
  }, parallel);
  // Each rank's incoming lists: (sender, its keys for this rank).
  std::vector<std::vector<std::pair<int32_t, const std::vector<MsgKey> *>>>
      inbox(static_cast<size_t>(numRanks));
  for (int32_t q = 0; q < numRanks; ++q)
    for (const auto &item : outbox[size_t(q)].to.items())
      inbox[size_t(item.key)].emplace_back(q, &item.value.keys);

  // Merge (step 3), each rank on its own, in place: the program grows to
  // its final length (within the room the generators reserve, so without
  // a copy) and is filled from the back. A message goes right before the
  // first compute action that starts at or after its key (start times
  // rise strictly along a program), so walking back, the messages with a
  // key after compute action i's start go after it, the latest key first
  // (the lists' last keys in a heap). The write position stays above the
  // compute action read next: nothing is overwritten before it is moved.
  detail::forEachParallel(size_t(numRanks), [&](size_t rr) {
    const int32_t r = int32_t(rr);
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
    for (const auto &item : outbox[rr].to.items())
      add(item.value.keys, int32_t(item.key), true);
    for (const auto &[q, keys] : inbox[rr])
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
    const std::vector<double> &start = startAt[r];
    std::vector<Action> &prog = s.programs[r];
    const size_t compute = prog.size(), total = compute + messages;
    const bool gradReduce =
        s.placement.numCopies == 2 && numRanks - 1 - r != r;
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
    release(startAt[r]);
  }, parallel);
  s.hasComm = true;
  return Status::ok();
}

} // namespace pipeforge::sched
