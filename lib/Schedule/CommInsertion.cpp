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

#include "Parallel.h"

#include <algorithm>
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

/// One message: its key, producer end in the replay, and id (item index *
/// 2 + gradient?), which names the producer and so both ranks. 16 bytes per
/// message and rank; the Send or Recv is formed when it is merged in.
struct MsgKey {
  double time;
  uint64_t id;
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
  const ItemSpace space{s.placement.numStages, s.numMicrobatches,
                        s.placement.numCopies};
  const int32_t numRanks = s.placement.numRanks;
  const int32_t lastStage = space.stages - 1;

  // Whether work `w`, run on rank r, sends its output to another rank: W
  // sends nothing, neither do the last stage's F and stage 0's B.
  auto sendsMessage = [&](const Work &w, int32_t r) {
    if (w.kind == WorkKind::W)
      return false;
    const bool grad = w.kind != WorkKind::F;
    if (grad ? w.stage == 0 : w.stage == lastStage)
      return false;
    const int32_t consumer = grad ? w.stage - 1 : w.stage + 1;
    return s.placement.rank(w.copy, consumer) != r; // else a hand-off
  };
  std::vector<size_t> numSends(numRanks, 0);

  // Validate actions and record which slots get produced (to report a work
  // that nobody runs separately from a deadlock). Each rank marks only the
  // items of its own stages (checked first), so the ranks run in parallel
  // on big schedules; the lowest rank's first error is reported.
  const bool parallel = detail::parallelWorth(s);
  const size_t numItems = space.size();
  std::vector<uint8_t> seen(numItems * 3, 0);
  std::vector<uint8_t> fusedBackward(numItems, 0); // produced by a BW
  Status valid = detail::firstFailure(size_t(numRanks), parallel, [&](size_t rr) {
    const int32_t r = int32_t(rr);
    // Counted here, stored once: the ranks' counters share a cache line.
    size_t sends = 0;
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
          fusedBackward[idx] = 1;
          break;
        }
        if (!fresh)
          return Status::error(where() + ": " + toString(*w) +
                               " is scheduled more than once");
        sends += sendsMessage(*w, r);
      }
    }
    numSends[r] = sends;
    return Status::ok();
  });
  if (!valid)
    return valid;

  // The work that produced an item's activation (F) or gradient (B or BW).
  auto producerOf = [&](size_t idx, bool grad) {
    Work w;
    w.mb = int32_t(idx % space.mbs);
    w.stage = int32_t((idx / space.mbs) % space.stages);
    w.copy = int8_t(idx / (size_t(space.mbs) * space.stages));
    w.kind = !grad ? WorkKind::F
                   : fusedBackward[idx] ? WorkKind::BW : WorkKind::B;
    return w;
  };

  // ASAP replay (step 1). end[idx * kWaitSlots + slot] = end time, -1
  // while pending.
  std::vector<double> end(numItems * kWaitSlots, -1);
  std::vector<int32_t> waitHead(numItems * kWaitSlots, -1);
  std::vector<int32_t> nextWaiter(numRanks, -1);
  std::vector<size_t> pc(numRanks, 0);
  std::vector<double> clock(numRanks, 0);
  std::vector<std::vector<double>> startAt(numRanks);
  // Step 2's message keys, by producing rank, collected as the replay
  // finishes each producer (so in program order per rank).
  std::vector<std::vector<MsgKey>> keys(numRanks);
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
  // The key of the message `w` (run on rank r, ending at `finish`) sends.
  auto collect = [&](const Work &w, int32_t r, double finish) {
    if (sendsMessage(w, r))
      keys[r].push_back({finish, uint64_t(space.index(w)) * 2 +
                                     (w.kind == WorkKind::F ? 0 : 1)});
  };
  for (int32_t r = 0; r < numRanks; ++r)
    keys[r].reserve(numSends[r]);

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
      double finish = start + std::max(dur, 1e-9);
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

  // Messages (step 2): the keys in one global order. The id encodes the
  // producer (item index * 2 + gradient?), so the key alone describes the
  // message. Each rank's keys, collected in program order, are already
  // sorted but for ties (the two members of a pair, zero-length actions):
  // sorted per rank where needed, then merged across ranks (O(A log p),
  // not a sort of all messages).
  // The replay's per-item state is no longer needed.
  release(end);
  release(waitHead);
  release(seen);
  auto before = [](const MsgKey &x, const MsgKey &y) {
    return x.time != y.time ? x.time < y.time : x.id < y.id;
  };
  for (int32_t r = 0; r < numRanks; ++r)
    if (!std::is_sorted(keys[r].begin(), keys[r].end(), before))
      std::sort(keys[r].begin(), keys[r].end(), before);
  // The two ranks of a message (sender, receiver).
  auto ranksOf = [&](uint64_t id) {
    const Work w = producerOf(size_t(id / 2), id % 2);
    return std::pair<int32_t, int32_t>(
        s.placement.rank(w.copy, w.stage),
        s.placement.rank(w.copy, id % 2 ? w.stage - 1 : w.stage + 1));
  };
  std::vector<size_t> perRank(numRanks, 0);
  for (int32_t r = 0; r < numRanks; ++r)
    for (const MsgKey &k : keys[r]) {
      ++perRank[r];
      ++perRank[ranksOf(k.id).second];
    }
  std::vector<std::vector<MsgKey>> events(numRanks);
  for (int32_t r = 0; r < numRanks; ++r)
    events[r].reserve(perRank[r]);
  // Merged in key order (a heap of the ranks' next keys) and distributed,
  // so every rank's list is sorted too.
  std::vector<size_t> head(numRanks, 0);
  std::vector<int32_t> heap;
  auto later = [&](int32_t x, int32_t y) {
    return before(keys[y][head[y]], keys[x][head[x]]);
  };
  for (int32_t r = 0; r < numRanks; ++r)
    if (!keys[r].empty())
      heap.push_back(r);
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    int32_t q = heap.back();
    const MsgKey &k = keys[q][head[q]++];
    events[q].push_back(k);
    events[ranksOf(k.id).second].push_back(k);
    if (head[q] < keys[q].size())
      std::push_heap(heap.begin(), heap.end(), later);
    else {
      heap.pop_back();
      release(keys[q]);
    }
  }
  // The Send (on the producer's rank) or Recv of one message.
  auto messageOn = [&](int32_t r, uint64_t id) {
    const Work w = producerOf(size_t(id / 2), id % 2);
    auto [src, dst] = ranksOf(id);
    const Payload payload = id % 2 ? Payload::Gradient : Payload::Activation;
    return r == src ? Action::send(payload, w, dst)
                    : Action::recv(payload, w, src);
  };

  // Merge (step 3), each rank on its own, in place: the program grows to
  // its final length (within the room the generators reserve, so without
  // a copy) and is filled from the back. A message goes right before the
  // first compute action that starts at or after its key (start times
  // rise strictly along a program), so walking back, the messages with a
  // key after compute action i's start go after it. The write position
  // stays above the compute action read next: nothing is overwritten
  // before it is moved.
  detail::forEachParallel(size_t(numRanks), [&](size_t rr) {
    const int32_t r = int32_t(rr);
    const std::vector<MsgKey> &ev = events[r];
    const std::vector<double> &start = startAt[r];
    std::vector<Action> &prog = s.programs[r];
    const size_t compute = prog.size(), total = compute + ev.size();
    const bool gradReduce =
        s.placement.numCopies == 2 && numRanks - 1 - r != r;
    prog.resize(total + (gradReduce ? 1 : 0));
    if (gradReduce)
      prog[total] = Action::gradReduce(numRanks - 1 - r);
    size_t w = total, e = ev.size();
    for (size_t i = compute; i-- > 0;) {
      while (e > 0 && ev[e - 1].time > start[i])
        prog[--w] = messageOn(r, ev[--e].id);
      prog[--w] = prog[i];
    }
    while (e > 0)
      prog[--w] = messageOn(r, ev[--e].id);
    release(events[r]);
    release(startAt[r]);
  }, parallel);
  s.hasComm = true;
  return Status::ok();
}

} // namespace pipeforge::sched
