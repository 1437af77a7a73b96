//===- Verify.cpp - Schedule verifier -------------------------------------===//
//
// The checks run from the cheapest and most local to the global one, so the
// first error is the most precise: frame, each action on its own, the
// exactly-once rule, the dependencies visible inside one rank, the message
// pairing per channel, then a rendezvous execution of all programs (the
// deadlock proof) and the memory limit.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Verify.h"

#include "Deps.h"

#include <algorithm>
#include <cstdint>

namespace pipeforge::sched {

namespace {
using namespace detail;

class Verifier {
public:
  Verifier(const Schedule &s, const VerifyOptions &opts)
      : s(s), opts(opts), idx(s), numRanks(s.numRanks()) {}

  Status run();

private:
  Status err(int32_t r, size_t step, const std::string &msg) const {
    return Status::errorAt(r, long(step), stepError(s, r, step, msg));
  }
  Status checkActions();
  Status checkOnce();
  Status checkLocalDeps();
  Status checkMessages();
  Status checkChannels();
  Status execute();
  Status checkMemory();

  // Rendezvous execution.
  enum class Step { Done, Blocked };
  Step advance(int32_t r);
  void park(int32_t r, size_t key) { waits.park(r, key); }
  void wake(size_t key) { waits.wake(key, ready); }
  /// Rendezvous: rank r arrives at message `ordinal` of its side of a
  /// channel (counted in `mine[chan]`, waking the other side's waiters at
  /// `wakeKey`), and may pass once the other side has arrived there too;
  /// otherwise it parks on `parkKey`.
  bool meet(int32_t r, std::vector<int32_t> &mine, int32_t chan,
            size_t wakeKey, const int32_t &otherArrived, int32_t ordinal,
            size_t parkKey) {
    if (!arrived[r]) {
      arrived[r] = 1;
      ++mine[chan];
      wake(wakeKey);
    }
    if (otherArrived <= ordinal) {
      park(r, parkKey);
      return false;
    }
    return true;
  }
  std::string blockedReason(int32_t r) const;
  std::string whereIs(int32_t q) const;

  const Schedule &s;
  const VerifyOptions &opts;
  WorkIndex idx;
  int32_t numRanks;
  std::vector<Loc> locs;
  ChannelMap chans;
  std::vector<std::vector<CommSlot>> slots;
  /// Per channel, the (rank, step) of its sends / receives, in order.
  std::vector<std::vector<Loc>> chanSends, chanRecvs;
  /// By messageKey: where the message is received (first occurrence).
  std::vector<Loc> recvAt;
  bool anyComm = false;

  std::vector<char> done;
  std::vector<int32_t> sendArr, recvArr, grArr;
  std::vector<size_t> pc;
  std::vector<char> arrived;
  detail::WaitLists waits;
  std::vector<int32_t> ready;
  size_t sendWaitBase = 0, recvWaitBase = 0, grBase = 0;
};

Status Verifier::checkActions() {
  const Placement &pl = s.placement;
  slots.resize(numRanks);
  for (int32_t r = 0; r < numRanks; ++r) {
    const std::vector<Action> &prog = s.programs[r];
    slots[r].resize(prog.size());
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      auto checkWork = [&](const Work &w) -> Status {
        if (!idx.inRange(w))
          return err(r, i,
                     toString(w) + " is out of range (" +
                         std::to_string(idx.numCopies) + " copies, " +
                         std::to_string(idx.numStages) + " stages, " +
                         std::to_string(idx.numMb) + " microbatches)");
        int32_t home = pl.rank(w.copy, w.stage);
        if (home != r)
          return err(r, i,
                     toString(w) + " runs on the wrong rank: stage " +
                         std::to_string(w.stage) + " of copy " +
                         std::to_string(w.copy) + " lives on rank " +
                         std::to_string(home));
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
            return err(r, i,
                       "an overlapped pair must be an F with a B or BW, not " +
                           toString(a));
        }
        continue;
      }
      anyComm = true;
      if (!s.hasComm)
        return err(r, i, "message action in a schedule without hasComm set");
      if (a.peer < 0 || a.peer >= numRanks)
        return err(r, i,
                   "peer rank " + std::to_string(a.peer) +
                       " is out of range (" + std::to_string(numRanks) +
                       " ranks)");
      if (a.peer == r)
        return err(r, i, "a message to this rank itself");
      CommSlot &sl = slots[r][i];
      if (a.kind == ActionKind::GradReduce) {
        sl.chan = chans.get(r, a.peer);
        sl.other = chans.get(a.peer, r);
        continue;
      }
      // Weight-gradient messages feed no F/B/W: only the channel pairing
      // and the rendezvous apply to them.
      if (a.payload == Payload::WeightGrad) {
        sl.chan = a.kind == ActionKind::Send ? chans.get(r, a.peer)
                                             : chans.get(a.peer, r);
        continue;
      }
      bool kindOk = (a.payload == Payload::Activation &&
                     a.work.kind == WorkKind::F) ||
                    (a.payload == Payload::Gradient &&
                     (a.work.kind == WorkKind::B ||
                      a.work.kind == WorkKind::BW));
      if (!kindOk)
        return err(r, i,
                   std::string("a ") + payloadName(a.payload) +
                       " message must name its producer (F for act, B or "
                       "BW for grad), not " +
                       toString(a.work));
      if (!idx.inRange(a.work))
        return err(r, i, "message " + toString(a.work) + " is out of range");
      int32_t cs = consumerStage(a);
      if (cs < 0 || cs >= idx.numStages)
        return err(r, i,
                   "message " + toString(a) + " has no consumer stage " +
                       std::to_string(cs));
      sl.chan = a.kind == ActionKind::Send ? chans.get(r, a.peer)
                                           : chans.get(a.peer, r);
    }
  }
  return Status::ok();
}

Status Verifier::checkOnce() {
  std::vector<Loc> first(idx.size());
  for (int32_t r = 0; r < numRanks; ++r) {
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if (a.isComm())
        continue;
      for (const Work *w : {&a.work, &a.work2}) {
        if (w == &a.work2 && a.kind != ActionKind::Overlap)
          break;
        Loc &l = first[idx.id(*w)];
        if (l.present())
          return err(r, i,
                     toString(*w) + " runs twice; first at rank " +
                         std::to_string(l.rank) + ", step " +
                         std::to_string(l.step));
        l = Loc{r, static_cast<int32_t>(i)};
      }
    }
  }
  locs = first;
  for (int8_t c = 0; c < idx.numCopies; ++c)
    for (int32_t st = 0; st < idx.numStages; ++st)
      for (int32_t j = 0; j < idx.numMb; ++j) {
        auto at = [&](WorkKind k) -> const Loc & {
          Work w;
          w.kind = k;
          w.stage = st;
          w.mb = j;
          w.copy = c;
          return locs[idx.id(w)];
        };
        Work w;
        w.stage = st;
        w.mb = j;
        w.copy = c;
        auto named = [&](WorkKind k) {
          w.kind = k;
          return toString(w);
        };
        int32_t home = s.placement.rank(c, st);
        size_t end = s.programs[home].size();
        const Loc &f = at(WorkKind::F), &b = at(WorkKind::B),
                  &wt = at(WorkKind::W), &bw = at(WorkKind::BW);
        if (!f.present())
          return err(home, end, "missing " + named(WorkKind::F));
        if (bw.present() && b.present())
          return err(bw.rank, bw.step,
                     named(WorkKind::BW) + " and " + named(WorkKind::B) +
                         " (step " + std::to_string(b.step) +
                         ") both run: use BW or B+W, not both");
        if (bw.present() && wt.present())
          return err(bw.rank, bw.step,
                     named(WorkKind::BW) + " and " + named(WorkKind::W) +
                         " (step " + std::to_string(wt.step) +
                         ") both run: BW already computes the weight "
                         "gradient");
        if (!bw.present() && !b.present())
          return err(home, end,
                     "missing " + named(WorkKind::B) + " (or " +
                         named(WorkKind::BW) + ")");
        if (b.present() && !wt.present())
          return err(home, end,
                     "missing " + named(WorkKind::W) + " after " +
                         named(WorkKind::B) + " (step " +
                         std::to_string(b.step) + ")");
      }
  return Status::ok();
}

Status Verifier::checkLocalDeps() {
  for (int32_t r = 0; r < numRanks; ++r) {
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if (a.isComm())
        continue;
      for (const Work *w : {&a.work, &a.work2}) {
        if (w == &a.work2 && a.kind != ActionKind::Overlap)
          break;
        std::optional<Work> nominal = nominalProducer(*w, idx.numStages);
        if (!nominal)
          continue;
        std::optional<Work> prod = resolveProducer(*nominal, locs, idx);
        if (!prod) // checkOnce guarantees producers exist
          return err(r, i, "missing producer for " + toString(*w));
        const Loc &pl = locs[idx.id(*prod)];
        if (pl.rank == r) {
          if (static_cast<size_t>(pl.step) == i)
            return err(r, i,
                       "the overlapped pair " + toString(a) +
                           " depends on itself: " + toString(*w) +
                           " needs " + toString(*prod));
          if (static_cast<size_t>(pl.step) > i)
            return err(r, i,
                       "dependency order: " + toString(*w) + " needs " +
                           describeAt(*prod, pl) +
                           ", which runs later on this rank");
          continue;
        }
        if (!s.hasComm)
          continue;
        const Loc &rv = recvAt[messageKey(*prod, idx)];
        if (!rv.present() || rv.rank != r)
          return err(r, i,
                     "missing message: " + toString(*w) + " needs " +
                         describeAt(*prod, pl) +
                         " but this rank never receives it");
        if (static_cast<size_t>(rv.step) > i)
          return err(r, i,
                     "dependency order: " + toString(*w) + " needs " +
                         toString(*prod) + ", received only at step " +
                         std::to_string(rv.step));
      }
    }
  }
  return Status::ok();
}

Status Verifier::checkMessages() {
  std::vector<Loc> sentAt(idx.size());
  recvAt.assign(idx.size(), Loc());
  for (int32_t r = 0; r < numRanks; ++r) {
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if ((a.kind != ActionKind::Send && a.kind != ActionKind::Recv) ||
          a.payload == Payload::WeightGrad)
        continue;
      size_t key = messageKey(a.work, idx);
      if (!locs[idx.id(a.work)].present()) {
        std::string alt;
        if (a.work.kind != WorkKind::F) {
          Work other = a.work;
          other.kind =
              a.work.kind == WorkKind::B ? WorkKind::BW : WorkKind::B;
          if (locs[idx.id(other)].present())
            alt = " (it runs " + toString(other) + ")";
        }
        return err(r, i,
                   "message names " + toString(a.work) +
                       ", which no rank runs" + alt);
      }
      std::optional<Work> prod = a.work;
      const Loc &pl = locs[idx.id(*prod)];
      Work consumer = a.work;
      consumer.stage = consumerStage(a);
      int32_t consumerRank = s.placement.rank(consumer.copy, consumer.stage);
      bool isSend = a.kind == ActionKind::Send;
      int32_t src = isSend ? r : a.peer, dst = isSend ? a.peer : r;
      if (pl.rank != src)
        return err(r, i,
                   toString(a) + ": " + describeAt(*prod, pl) +
                       " is not produced on the sending rank " +
                       std::to_string(src));
      if (consumerRank != dst)
        return err(r, i,
                   toString(a) + ": its consumer stage " +
                       std::to_string(consumer.stage) + " lives on rank " +
                       std::to_string(consumerRank) + ", not rank " +
                       std::to_string(dst));
      if (isSend && static_cast<size_t>(pl.step) > i)
        return err(r, i,
                   "sends " + describeAt(*prod, pl) + " before producing it");
      Loc &seen = isSend ? sentAt[key] : recvAt[key];
      if (seen.present())
        return err(r, i,
                   std::string(isSend ? "sent" : "received") +
                       " twice; first at rank " + std::to_string(seen.rank) +
                       ", step " + std::to_string(seen.step));
      seen = Loc{r, static_cast<int32_t>(i)};
    }
  }
  return Status::ok();
}

Status Verifier::checkChannels() {
  size_t nc = chans.size();
  chanSends.assign(nc, {});
  chanRecvs.assign(nc, {});
  std::vector<int32_t> nGr(nc);
  for (int32_t r = 0; r < numRanks; ++r) {
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      CommSlot &sl = slots[r][i];
      Loc here{r, static_cast<int32_t>(i)};
      switch (prog[i].kind) {
      case ActionKind::Send:
        sl.ordinal = static_cast<int32_t>(chanSends[sl.chan].size());
        chanSends[sl.chan].push_back(here);
        break;
      case ActionKind::Recv:
        sl.ordinal = static_cast<int32_t>(chanRecvs[sl.chan].size());
        chanRecvs[sl.chan].push_back(here);
        break;
      case ActionKind::GradReduce:
        sl.ordinal = nGr[sl.chan]++;
        break;
      default:
        break;
      }
    }
  }
  for (size_t c = 0; c < nc; ++c) {
    const std::vector<Loc> &snd = chanSends[c], &rcv = chanRecvs[c];
    size_t n = std::min(snd.size(), rcv.size());
    for (size_t k = 0; k < n; ++k) {
      const Action &a = s.programs[snd[k].rank][snd[k].step];
      const Action &b = s.programs[rcv[k].rank][rcv[k].step];
      if (!sameMessage(a, b))
        return err(rcv[k].rank, rcv[k].step,
                   "FIFO mismatch on channel r" + std::to_string(snd[k].rank) +
                       "->r" + std::to_string(rcv[k].rank) + ": receive #" +
                       std::to_string(k) + " is " + toString(b) +
                       " but send #" + std::to_string(k) + " is " +
                       toString(a) + " (rank " + std::to_string(snd[k].rank) +
                       ", step " + std::to_string(snd[k].step) + ")");
    }
    if (snd.size() > n) {
      const Loc &l = snd[n];
      return err(l.rank, l.step,
                 "unmatched send: rank " +
                     std::to_string(s.programs[l.rank][l.step].peer) +
                     " has no receive for it (channel carries " +
                     std::to_string(snd.size()) + " sends, " +
                     std::to_string(rcv.size()) + " receives)");
    }
    if (rcv.size() > n) {
      const Loc &l = rcv[n];
      return err(l.rank, l.step,
                 "unmatched receive: rank " +
                     std::to_string(s.programs[l.rank][l.step].peer) +
                     " has no send for it (channel carries " +
                     std::to_string(snd.size()) + " sends, " +
                     std::to_string(rcv.size()) + " receives)");
    }
  }
  return Status::ok();
}

Verifier::Step Verifier::advance(int32_t r) {
  const std::vector<Action> &prog = s.programs[r];
  while (pc[r] < prog.size()) {
    size_t i = pc[r];
    const Action &a = prog[i];
    const CommSlot &sl = slots[r][i];
    switch (a.kind) {
    case ActionKind::Compute:
    case ActionKind::Overlap: {
      // Remote producers (compute-only schedules) must have run; local ones
      // and received ones are guaranteed by checkLocalDeps.
      for (const Work *w : {&a.work, &a.work2}) {
        if (w == &a.work2 && a.kind != ActionKind::Overlap)
          break;
        std::optional<Work> nominal = nominalProducer(*w, idx.numStages);
        if (!nominal || s.hasComm)
          continue;
        std::optional<Work> prod = resolveProducer(*nominal, locs, idx);
        size_t pid = idx.id(*prod);
        if (!done[pid]) {
          park(r, pid);
          return Step::Blocked;
        }
      }
      done[idx.id(a.work)] = 1;
      wake(idx.id(a.work));
      if (a.kind == ActionKind::Overlap) {
        done[idx.id(a.work2)] = 1;
        wake(idx.id(a.work2));
      }
      break;
    }
    case ActionKind::Send:
      if (!meet(r, sendArr, sl.chan, recvWaitBase + sl.chan, recvArr[sl.chan],
                sl.ordinal, sendWaitBase + sl.chan))
        return Step::Blocked;
      break;
    case ActionKind::Recv:
      if (!meet(r, recvArr, sl.chan, sendWaitBase + sl.chan, sendArr[sl.chan],
                sl.ordinal, recvWaitBase + sl.chan))
        return Step::Blocked;
      break;
    case ActionKind::GradReduce:
      if (!meet(r, grArr, sl.chan, grBase + sl.chan, grArr[sl.other],
                sl.ordinal, grBase + sl.other))
        return Step::Blocked;
      break;
    }
    arrived[r] = 0;
    ++pc[r];
  }
  return Step::Done;
}

std::string Verifier::whereIs(int32_t q) const {
  if (pc[q] >= s.programs[q].size())
    return "rank " + std::to_string(q) + " has finished its program";
  return "rank " + std::to_string(q) + " is blocked at step " +
         std::to_string(pc[q]) + ": " + toString(s.programs[q][pc[q]]);
}

std::string Verifier::blockedReason(int32_t r) const {
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
    size_t key = waits.parkedOn(r);
    if (key >= idx.size())
      return toString(a) + " cannot proceed";
    for (const Work *w : {&a.work, &a.work2}) {
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

Status Verifier::execute() {
  size_t nc = chans.size();
  done.assign(idx.size(), 0);
  sendArr.assign(nc, 0);
  recvArr.assign(nc, 0);
  grArr.assign(nc, 0);
  pc.assign(numRanks, 0);
  arrived.assign(numRanks, 0);
  sendWaitBase = idx.size();
  recvWaitBase = sendWaitBase + nc;
  grBase = recvWaitBase + nc;
  waits.reset(grBase + nc, numRanks);
  for (int32_t r = numRanks - 1; r >= 0; --r)
    ready.push_back(r);
  while (!ready.empty()) {
    int32_t r = ready.back();
    ready.pop_back();
    if (!waits.isParked(r))
      advance(r);
  }
  std::vector<int32_t> stuck;
  for (int32_t r = 0; r < numRanks; ++r)
    if (pc[r] < s.programs[r].size())
      stuck.push_back(r);
  if (stuck.empty())
    return Status::ok();
  int32_t r = stuck.front();
  std::string msg = "deadlock: " + blockedReason(r);
  msg += "\n  blocked ranks:";
  for (size_t k = 0; k < stuck.size() && k < 8; ++k)
    msg += " r" + std::to_string(stuck[k]) + "@" + std::to_string(pc[stuck[k]]);
  if (stuck.size() > 8)
    msg += " ... (" + std::to_string(stuck.size()) + " in all)";
  return err(r, pc[r], msg);
}

Status Verifier::checkMemory() {
  if (!opts.memLimit)
    return Status::ok();
  double limit = *opts.memLimit;
  for (int32_t r = 0; r < numRanks; ++r) {
    const std::vector<Action> &prog = s.programs[r];
    double mem = 0;
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if (a.isComm())
        continue;
      mem += opts.cost.memDelta(a.work.kind, a.work.stage);
      double peak = mem;
      if (a.kind == ActionKind::Overlap)
        mem += opts.cost.memDelta(a.work2.kind, a.work2.stage);
      if (peak > limit + 1e-9)
        return err(r, i,
                   "activation memory " + std::to_string(peak) +
                       " exceeds the limit " + std::to_string(limit));
    }
  }
  return Status::ok();
}

Status Verifier::run() {
  if (Status st = checkShape(s); !st)
    return st;
  if (Status st = checkActions(); !st)
    return st;
  if (Status st = checkOnce(); !st)
    return st;
  recvAt.assign(idx.size(), Loc());
  if (anyComm) {
    if (Status st = checkMessages(); !st)
      return st;
  }
  if (Status st = checkChannels(); !st)
    return st;
  if (Status st = checkLocalDeps(); !st)
    return st;
  if (Status st = execute(); !st)
    return st;
  return checkMemory();
}

} // namespace

Status verify(const Schedule &s, const VerifyOptions &opts) {
  Verifier v(s, opts);
  return v.run();
}

} // namespace pipeforge::sched
