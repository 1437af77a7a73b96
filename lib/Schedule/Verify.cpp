//===- Verify.cpp - Schedule verifier -------------------------------------===//
//
// The checks run from the cheapest and most local to the global one, so the
// first error is the most precise: frame, each action on its own, the
// exactly-once rule, ZeRO-3's parameter gathers (each stage a rank computes
// gathered once before its first compute and released once after its
// last), activation offload's copies (each stash offloaded at most once
// after its F on the rank that ran it, reloaded after that and before the
// B/BW that reads it), the dependencies visible inside one rank, the message
// pairing per channel, then a rendezvous execution of all programs on the
// replay engine (Replay.h; the deadlock proof) and the memory limit it
// accounts.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Verify.h"

#include "Deps.h"
#include "Parallel.h"
#include "Replay.h"

#include <algorithm>
#include <cstdint>
#include <map>

namespace pipeforge::sched {

namespace {
using namespace detail;

class Verifier {
public:
  Verifier(const Schedule &s, const VerifyOptions &opts)
      : s(s), opts(opts), idx(s), numRanks(s.numRanks()),
        parallel(parallelWorth(s)),
        engine(s, idx, locs, engineOptions(opts)) {}

  Status run();

private:
  static ReplayEngine::Options engineOptions(const VerifyOptions &opts) {
    ReplayEngine::Options o;
    o.rendezvousSends = true;
    o.prechecked = true; // run() replays only after the static checks
    if (opts.memLimit)
      o.memCost = &opts.cost;
    o.memLimit = opts.memLimit;
    return o;
  }
  Status err(int32_t r, size_t step, const std::string &msg) const {
    return Status::errorAt(r, long(step), stepError(s, r, step, msg));
  }
  /// The per-rank checks below run the ranks in parallel on big schedules
  /// (Parallel.h): each writes only its own rank's entries (a work lives on
  /// one rank, checkActions proves it first; a message has one sender and
  /// one receiver, checkMessages proves it before recording) and the lowest
  /// rank's first error is the one reported, as in a loop in order.
  template <class Check> Status eachRank(Check check) const {
    return firstFailure(size_t(numRanks), parallel,
                        [&](size_t r) { return check(int32_t(r)); });
  }
  Status checkActions();
  Status checkParamGathers();
  Status checkStashCopies();
  Status checkOnce();
  Status checkLocalDeps();
  Status checkMessages();
  Status checkChannels();
  Status execute();

  /// The verifier's replay is untimed: nothing happens beyond the engine's
  /// own bookkeeping.
  struct Untimed {
    void compute(int32_t, size_t, const Action &, const Input &,
                 const Input &) {}
    void send(int32_t, size_t, const Action &, const CommSlot &) {}
    void recv(int32_t, size_t, const Action &, const CommSlot &) {}
    void gradReduceArrive(int32_t, size_t, const CommSlot &) {}
    void gradReduce(int32_t, size_t, const CommSlot &) {}
    void paramGather(int32_t, size_t, const Action &) {}
    void stashCopy(int32_t, size_t, const Action &) {}
  };

  const Schedule &s;
  const VerifyOptions &opts;
  WorkIndex idx;
  int32_t numRanks;
  bool parallel;
  std::vector<Loc> locs;
  /// By messageKey: where the message is received (first occurrence).
  std::vector<Loc> recvAt;
  bool anyComm = false;
  bool anyGather = false;
  bool anyStashCopy = false;
  ReplayEngine engine;
};

Status Verifier::checkActions() {
  const Placement &pl = s.placement;
  std::vector<uint8_t> rankHasComm(size_t(numRanks), 0);
  std::vector<uint8_t> rankHasGather(size_t(numRanks), 0);
  std::vector<uint8_t> rankHasStashCopy(size_t(numRanks), 0);
  Status st = eachRank([&](int32_t r) -> Status {
    const std::vector<Action> &prog = s.programs[r];
    // Set once at the end: the ranks' flags share a cache line.
    bool hasComm = false, hasGather = false, hasStashCopy = false;
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
          if (!isPairShape(a))
            return err(r, i,
                       "an overlapped pair must be an F with a B or BW, not " +
                           toString(a));
        }
        continue;
      }
      if (a.isStashCopy()) {
        hasStashCopy = true;
        if (a.work.kind != WorkKind::F)
          return err(r, i,
                     toString(a) + " names a " + workKindName(a.work.kind) +
                         ": a stash is named by the F that made it");
        if (!idx.inRange(a.work))
          return err(r, i,
                     toString(a) + " is out of range (" +
                         std::to_string(idx.numCopies) + " copies, " +
                         std::to_string(idx.numStages) + " stages, " +
                         std::to_string(idx.numMb) + " microbatches)");
        continue;
      }
      if (a.isParamGather()) {
        hasGather = true;
        if (a.work.stage < 0 || a.work.stage >= idx.numStages ||
            a.work.copy < 0 || a.work.copy >= idx.numCopies)
          return err(r, i,
                     toString(a) + " is out of range (" +
                         std::to_string(idx.numCopies) + " copies, " +
                         std::to_string(idx.numStages) + " stages)");
        continue;
      }
      hasComm = true;
      if (!s.hasComm)
        return err(r, i, "message action in a schedule without hasComm set");
      if (a.peer < 0 || a.peer >= numRanks)
        return err(r, i,
                   "peer rank " + std::to_string(a.peer) +
                       " is out of range (" + std::to_string(numRanks) +
                       " ranks)");
      if (a.peer == r)
        return err(r, i, "a message to this rank itself");
      // Weight-gradient messages feed no F/B/W: only the channel pairing
      // and the rendezvous apply to them.
      if (a.kind == ActionKind::GradReduce || a.payload == Payload::WeightGrad)
        continue;
      bool kindOk =
          (a.payload == Payload::Activation && a.work.kind == WorkKind::F) ||
          (a.payload == Payload::Gradient &&
           (a.work.kind == WorkKind::B || a.work.kind == WorkKind::BW));
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
    }
    rankHasComm[size_t(r)] = hasComm;
    rankHasGather[size_t(r)] = hasGather;
    rankHasStashCopy[size_t(r)] = hasStashCopy;
    return Status::ok();
  });
  anyComm = std::find(rankHasComm.begin(), rankHasComm.end(), 1) !=
            rankHasComm.end();
  anyGather = std::find(rankHasGather.begin(), rankHasGather.end(), 1) !=
              rankHasGather.end();
  anyStashCopy = std::find(rankHasStashCopy.begin(), rankHasStashCopy.end(),
                           1) != rankHasStashCopy.end();
  return st;
}

namespace {
/// "stage 3", or "stage 3 of copy 1".
std::string stageName(int32_t stage, int32_t copy) {
  return "stage " + std::to_string(stage) +
         (copy ? " of copy " + std::to_string(copy) : std::string());
}
} // namespace

// A schedule with any UNSHARD/RESHARD (ZeRO-3): on every rank, every
// (stage, copy) the rank computes is gathered exactly once before the
// first compute that uses it and released exactly once after the last;
// none for a stage the rank does not compute. Runs after checkActions
// (every compute in range and on its stage's rank).
Status Verifier::checkParamGathers() {
  const int32_t nStages = idx.numStages;
  return eachRank([&](int32_t r) -> Status {
    const std::vector<Action> &prog = s.programs[r];
    const size_t n = size_t(idx.numCopies) * size_t(nStages);
    auto key = [&](const Work &w) {
      return size_t(w.copy) * size_t(nStages) + size_t(w.stage);
    };
    // Per (copy, stage): the rank's last compute of it (npos: none), and
    // where it was gathered and released (npos: not yet).
    constexpr size_t npos = size_t(-1);
    std::vector<size_t> lastUse(n, npos), unshardAt(n, npos),
        reshardAt(n, npos);
    for (size_t i = 0; i < prog.size(); ++i)
      if (prog[i].kind == ActionKind::Compute ||
          prog[i].kind == ActionKind::Overlap)
        for (const Work *w : membersOf(prog[i]))
          lastUse[key(*w)] = i;
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if (a.isParamGather()) {
        const size_t k = key(a.work);
        const bool un = a.kind == ActionKind::Unshard;
        const char *what = un ? "UNSHARD" : "RESHARD";
        if (lastUse[k] == npos)
          return err(r, i,
                     toString(a) + " on rank " + std::to_string(r) +
                         ", which computes no action of " +
                         stageName(a.work.stage, a.work.copy));
        size_t &at = un ? unshardAt[k] : reshardAt[k];
        if (at != npos)
          return err(r, i,
                     std::string(what) + " of " +
                         stageName(a.work.stage, a.work.copy) +
                         " duplicated: the first is action " +
                         std::to_string(at));
        if (!un && unshardAt[k] == npos)
          return err(r, i,
                     toString(a) + " releases " +
                         stageName(a.work.stage, a.work.copy) +
                         "'s parameters before its UNSHARD");
        at = i;
        continue;
      }
      if (a.kind != ActionKind::Compute && a.kind != ActionKind::Overlap)
        continue;
      for (const Work *w : membersOf(a)) {
        const size_t k = key(*w);
        if (unshardAt[k] == npos)
          return err(r, i,
                     toString(*w) + " (action " + std::to_string(i) +
                         ") uses " + stageName(w->stage, w->copy) +
                         "'s parameters before its UNSHARD");
        if (reshardAt[k] != npos)
          return err(r, i,
                     toString(*w) + " (action " + std::to_string(i) +
                         ") uses " + stageName(w->stage, w->copy) +
                         "'s parameters after its RESHARD (action " +
                         std::to_string(reshardAt[k]) + ")");
      }
    }
    for (size_t k = 0; k < n; ++k)
      if (lastUse[k] != npos && reshardAt[k] == npos) {
        int32_t copy = int32_t(k / size_t(nStages)),
                stage = int32_t(k % size_t(nStages));
        return err(r, prog.size(),
                   "no RESHARD of " + stageName(stage, copy) +
                       " after its last compute (action " +
                       std::to_string(lastUse[k]) + ")");
      }
    return Status::ok();
  });
}

// A schedule with any OFFLOAD/RELOAD (activation offload): on every rank,
// each stash (named by its F) is offloaded at most once, on the rank that
// ran its F and after it, and before the B/BW that reads it; an offloaded
// stash is reloaded exactly once, after its OFFLOAD and before that B/BW
// (an overlapped pair's B/BW member included). Runs after checkOnce (every
// F/B/W once, on its stage's rank).
Status Verifier::checkStashCopies() {
  const Placement &pl = s.placement;
  return eachRank([&](int32_t r) -> Status {
    const std::vector<Action> &prog = s.programs[r];
    // Per stash: where its F and the B/BW reading it run on this rank, and
    // where it was offloaded and reloaded.
    std::map<StashKey, size_t> fAt, bAt, offAt, relAt;
    auto keyOf = [](const Work &w) {
      return StashKey{w.copy, w.stage, w.mb};
    };
    for (size_t i = 0; i < prog.size(); ++i)
      if (prog[i].isCompute())
        for (const Work *w : membersOf(prog[i])) {
          if (w->kind == WorkKind::F)
            fAt.emplace(keyOf(*w), i);
          else if (w->kind == WorkKind::B || w->kind == WorkKind::BW)
            bAt.emplace(keyOf(*w), i);
        }
    auto stashName = [](const Work &w) {
      return "the stash of " + toString(w);
    };
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if (a.isStashCopy()) {
        const StashKey k = keyOf(a.work);
        const bool out = a.kind == ActionKind::Offload;
        std::map<StashKey, size_t> &at = out ? offAt : relAt;
        if (auto d = at.find(k); d != at.end())
          return err(r, i,
                     std::string(out ? "OFFLOAD" : "RELOAD") + " of " +
                         stashName(a.work) +
                         " duplicated: the first is action " +
                         std::to_string(d->second));
        if (out) {
          int32_t home = pl.rank(a.work.copy, a.work.stage);
          if (home != r)
            return err(r, i,
                       toString(a) + " on rank " + std::to_string(r) +
                           ", which does not run " + toString(a.work) +
                           " (rank " + std::to_string(home) + " does)");
          auto f = fAt.find(k);
          if (f == fAt.end() || f->second > i)
            return err(r, i,
                       toString(a) + " before " + toString(a.work) +
                           " made the stash" +
                           (f == fAt.end()
                                ? std::string()
                                : " (action " + std::to_string(f->second) +
                                      ")"));
          if (auto b = bAt.find(k); b != bAt.end() && b->second < i)
            return err(r, i,
                       toString(a) + " after the B/BW that reads " +
                           stashName(a.work) + " (action " +
                           std::to_string(b->second) + ")");
        } else if (!offAt.count(k)) {
          return err(r, i,
                     toString(a) + " before any OFFLOAD of " +
                         stashName(a.work));
        }
        at.emplace(k, i);
        continue;
      }
      if (!a.isCompute())
        continue;
      for (const Work *w : membersOf(a)) {
        if (w->kind != WorkKind::B && w->kind != WorkKind::BW)
          continue;
        const StashKey k = keyOf(*w);
        auto o = offAt.find(k);
        if (o != offAt.end() && !relAt.count(k))
          return err(r, i,
                     toString(*w) + " (action " + std::to_string(i) +
                         ") reads " +
                         stashName(Work(WorkKind::F, w->stage, w->mb,
                                        w->copy)) +
                         " while it is offloaded (OFFLOAD at action " +
                         std::to_string(o->second) +
                         ", no RELOAD before this action)");
      }
    }
    // An OFFLOAD without its RELOAD fails at the B/BW above: every stash a
    // rank makes is read on that rank (checkOnce).
    return Status::ok();
  });
}

Status Verifier::checkOnce() {
  std::vector<Loc> first(idx.size());
  Status st = eachRank([&](int32_t r) -> Status {
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if (a.isComm() || a.isLocalAux())
        continue;
      for (const Work *w : membersOf(a)) {
        Loc &l = first[idx.id(*w)];
        if (l.present())
          return err(r, i,
                     toString(*w) + " runs twice; first at rank " +
                         std::to_string(l.rank) + ", step " +
                         std::to_string(l.step));
        l = Loc{r, static_cast<int32_t>(i)};
      }
    }
    return Status::ok();
  });
  if (!st)
    return st;
  locs = std::move(first);
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
  return eachRank([&](int32_t r) -> Status {
    const std::vector<Action> &prog = s.programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      const Action &a = prog[i];
      if (a.isComm() || a.isLocalAux())
        continue;
      for (const Work *w : membersOf(a)) {
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
                           " depends on itself: " + toString(*w) + " needs " +
                           toString(*prod));
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
    return Status::ok();
  });
}

Status Verifier::checkMessages() {
  std::vector<Loc> sentAt(idx.numMessages());
  recvAt.assign(idx.numMessages(), Loc());
  return eachRank([&](int32_t r) -> Status {
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
          other.kind = a.work.kind == WorkKind::B ? WorkKind::BW : WorkKind::B;
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
    return Status::ok();
  });
}

Status Verifier::checkChannels() {
  return firstFailure(size_t(engine.numChannels()), parallel,
                      [&](size_t c) -> Status {
    const std::vector<Loc> &snd = engine.sendsOn(int32_t(c)),
                            &rcv = engine.recvsOn(int32_t(c));
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
    return Status::ok();
  });
}

Status Verifier::execute() {
  Untimed untimed;
  ReplayEngine::Outcome out = engine.run(untimed);
  if (!out)
    return err(out.rank, out.step, out.message);
  if (std::optional<ReplayEngine::MemoryExcess> ex = engine.memoryExcess())
    return err(ex->rank, ex->step,
               "activation memory " + std::to_string(ex->memory) +
                   " exceeds the limit " + std::to_string(*opts.memLimit));
  return Status::ok();
}

Status Verifier::run() {
  if (Status st = checkShape(s); !st)
    return st;
  if (Status st = checkCosts(opts.cost, s); !st)
    return st;
  if (Status st = checkActions(); !st)
    return st;
  if (anyGather)
    if (Status st = checkParamGathers(); !st)
      return st;
  engine.assignChannels();
  if (Status st = checkOnce(); !st)
    return st;
  if (anyStashCopy)
    if (Status st = checkStashCopies(); !st)
      return st;
  recvAt.assign(idx.numMessages(), Loc());
  if (anyComm) {
    if (Status st = checkMessages(); !st)
      return st;
  }
  if (Status st = checkChannels(); !st)
    return st;
  if (Status st = checkLocalDeps(); !st)
    return st;
  if (s.hasComm) {
    // The replay of a schedule with messages reads none of the static
    // checks' tables (hundreds of megabytes at millions of actions).
    release(locs);
    release(recvAt);
    engine.releaseChannelLists();
  }
  if (!opts.alongsideReplay)
    return execute();
  // Beside the replay only where the static checks' tables were freed: a
  // compute-only schedule's replay still reads them, and its simulation
  // builds its own.
  if (!parallel || !s.hasComm) {
    Status st = execute();
    if (st)
      opts.alongsideReplay();
    return st;
  }
  // The replay and the callback as two items on the cores (an exception
  // on either reaches the caller once both have stopped).
  Status st = Status::ok();
  forEachParallel(2, [&](size_t i) {
    if (i == 0)
      st = execute();
    else
      opts.alongsideReplay();
  });
  return st;
}

} // namespace

Status verify(const Schedule &s, const VerifyOptions &opts) {
  Verifier v(s, opts);
  return v.run();
}

} // namespace pipeforge::sched
