//===- Deps.h - Work indexing and dependency inference ---------*- C++ -*-===//
//
// Internal helpers shared by the simulator, the verifier, comm insertion,
// the automatic scheduler and the exporters: a dense index over (copy,
// stage, mb, kind), the dependency rule of a schedule (the one statement of
// which works a work waits for), the table of where each work runs,
// message identities, and the "rank r, step i: ..." diagnostic with a
// program excerpt.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_LIB_SCHEDULE_DEPS_H
#define PIPEFORGE_LIB_SCHEDULE_DEPS_H

#include "pipeforge/Schedule/Action.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace pipeforge::sched::detail {

/// Dense ids for (copy, stage, mb, kind); kinds F=0 B=1 W=2 BW=3.
struct WorkIndex {
  int32_t numCopies = 1, numStages = 0, numMb = 0;

  explicit WorkIndex(const Schedule &s)
      : numCopies(s.placement.numCopies), numStages(s.placement.numStages),
        numMb(s.numMicrobatches) {}

  size_t size() const { return numItems() * 4; }
  /// Items (copy, stage, mb); each has 4 work ids and 2 message keys.
  size_t numItems() const {
    return static_cast<size_t>(numCopies) * numStages * numMb;
  }
  /// The range of messageKey: an activation and a gradient per item.
  size_t numMessages() const { return numItems() * 2; }
  bool inRange(const Work &w) const {
    return w.copy >= 0 && w.copy < numCopies && w.stage >= 0 &&
           w.stage < numStages && w.mb >= 0 && w.mb < numMb;
  }
  /// Requires inRange(w).
  size_t id(const Work &w) const {
    return item(w) * 4 + static_cast<size_t>(w.kind);
  }
  /// The item (copy, stage, mb) of `w`, in [0, numItems()). Requires
  /// inRange(w).
  size_t item(const Work &w) const {
    return (static_cast<size_t>(w.copy) * numStages + w.stage) * numMb + w.mb;
  }
  /// The output a work produces, by work id, in [0, numMessages()): its
  /// item's activation (F) or input gradient (B or BW: the same output).
  /// W produces nothing another work reads; it maps to the gradient too.
  static size_t outputKey(size_t workId) {
    return workId / 4 * 2 + (workId % 4 == size_t(WorkKind::F) ? 0 : 1);
  }
};

/// The schedule's frame is sound: ranks > 0, one program per rank, the
/// placement's rankOf has numCopies rows of numStages ranks in range.
Status checkShape(const Schedule &s);

/// Where a work runs: its rank and step, or rank -1 when absent.
struct Loc {
  int32_t rank = -1;
  int32_t step = -1;
  bool present() const { return rank >= 0; }
};

/// The location of every compute work (Compute actions and both members of
/// Overlap actions). Out-of-range works are skipped; a duplicate keeps the
/// first occurrence.
std::vector<Loc> locateWork(const Schedule &s, const WorkIndex &idx);

//===- The dependency rule ------------------------------------------------===//
//
// When a work may run, stated once; every replay (the verifier's and the
// simulator's ReplayEngine, comm insertion's ASAP replay, the automatic
// scheduler's list replay) and the ILP's precedence edges ask these
// functions. A work's predecessors, all of the same (copy, mb):
//
//   F(s)       input  F(s-1)                        (none on stage 0)
//   B(s), BW   saved  F(s), its own forward's activations (s < last)
//              input  B(s+1), B standing for BW too; F(s) on the last stage
//   W(s)       input  B(s), whose saved input gradient it reads
//
// Stages are a copy's own order, whatever the placement: chunks of an
// interleaved or V-shaped placement and the second copy of DualPipe /
// Chimera (its stages on the ranks in reverse) follow the same rule; an
// overlapped pair runs when both members' predecessors have run.
//
// The input is the output a work reads from the work before it on its
// item's chain (below; a message when that work runs on another rank), or,
// for W, from its own B. The saved F of a B below the last stage is implied
// by its input (F(s) -> F(s+1) -> ... -> F(last) -> B(last) -> ... ->
// B(s+1)), so the replays that wait for inputs alone (the verifier, the
// simulator, comm insertion's) and the ILP's edges enforce it too; comm
// insertion's error and the automatic scheduler's replay walk both.
//
//===----------------------------------------------------------------------===//

/// The works a compute action runs: its work and, for an overlapped pair,
/// the second member: `for (const Work *w : membersOf(a))`.
struct Members {
  const Work *works[2];
  size_t count;
  const Work *const *begin() const { return works; }
  const Work *const *end() const { return works + count; }
};
inline Members membersOf(const Action &a) {
  return Members{{&a.work, &a.work2},
                 a.kind == ActionKind::Overlap ? size_t(2) : size_t(1)};
}
/// An overlapped pair is an F with a B or BW, whose members each wait for
/// their own predecessors.
inline bool isPairShape(const Action &a) {
  return a.work.kind == WorkKind::F &&
         (a.work2.kind == WorkKind::B || a.work2.kind == WorkKind::BW);
}

/// Which predecessor: the input a work reads, or the saved forward a
/// backward below the last stage reads on its own rank.
enum class DepRole : uint8_t { Input, Saved };

/// The chain of an item (copy, mb): F(0) .. F(last), B(last) .. B(0), each
/// work reading the output of the one before it; a work's position on it
/// (W is off the chain: it reads its own B's output). B stands for BW.
inline int32_t chainPosition(const Work &w, int32_t numStages) {
  return w.kind == WorkKind::F ? w.stage : 2 * numStages - 1 - w.stage;
}
/// The work at `pos` on `item`'s chain, in [0, 2 * numStages).
inline Work chainWork(const Work &item, int32_t pos, int32_t numStages) {
  // Built whole, not a copy with its bit-fields reassigned: the partial
  // stores would stall the load of the whole Work that follows.
  return pos < numStages
             ? Work(WorkKind::F, pos, item.mb, item.copy)
             : Work(WorkKind::B, 2 * numStages - 1 - pos, item.mb, item.copy);
}

/// The nominal producer of `w`'s input: F(s-1) for F, the backward of s+1
/// (kind B) or F(last) for B and BW, B(s) for W. None for F on stage 0.
/// Requires w.stage in [0, numStages). Inline: the verifier and the
/// simulator ask it for every compute.
inline std::optional<Work> nominalProducer(const Work &w, int32_t numStages) {
  if (w.kind == WorkKind::W)
    return Work(WorkKind::B, w.stage, w.mb, w.copy);
  int32_t pos = chainPosition(w, numStages);
  if (pos == 0)
    return std::nullopt;
  return chainWork(w, pos - 1, numStages);
}

/// The nominal work that reads `w`'s output as its input from the chain:
/// F(s+1) for F, B(last) for F on the last stage, B(s-1) for B and BW;
/// none for stage 0's backward and for W (W(s) also reads B(s)'s output,
/// on its own rank, off the chain: not asked for here).
inline std::optional<Work> nominalConsumer(const Work &w, int32_t numStages) {
  if (w.kind == WorkKind::W)
    return std::nullopt;
  int32_t pos = chainPosition(w, numStages) + 1;
  if (pos == 2 * numStages)
    return std::nullopt;
  return chainWork(w, pos, numStages);
}

/// Calls fn(pred, role) for each predecessor of `w` (nominal: B stands for
/// BW), the saved F first, then the input; stops at the first call that
/// returns false. Returns whether none did.
template <class Fn>
inline bool forEachPredecessor(const Work &w, int32_t numStages, Fn &&fn) {
  if ((w.kind == WorkKind::B || w.kind == WorkKind::BW) &&
      w.stage != numStages - 1) {
    if (!fn(Work(WorkKind::F, w.stage, w.mb, w.copy), DepRole::Saved))
      return false;
  }
  if (std::optional<Work> in = nominalProducer(w, numStages))
    return fn(*in, DepRole::Input);
  return true;
}

/// Resolves a nominal producer against the table: a nominal B means "B or
/// BW", whichever exists; W's producer B may also be satisfied by nothing
/// else. Returns the actual producer work, or nullopt when absent.
inline std::optional<Work> resolveProducer(const Work &nominal,
                                           const std::vector<Loc> &locs,
                                           const WorkIndex &idx) {
  if (!idx.inRange(nominal))
    return std::nullopt;
  if (locs[idx.id(nominal)].present())
    return nominal;
  if (nominal.kind == WorkKind::B) {
    Work bw = nominal;
    bw.kind = WorkKind::BW;
    if (locs[idx.id(bw)].present())
      return bw;
  }
  return std::nullopt;
}

/// The identity of a message: payload kind plus the producer's (copy, stage,
/// mb); B and BW producers carry the same gradient identity.
inline bool sameMessage(const Action &a, const Action &b) {
  return a.payload == b.payload && a.work.stage == b.work.stage &&
         a.work.mb == b.work.mb && a.work.copy == b.work.copy;
}

/// The id used to key a message, in [0, idx.numMessages()): the producer's
/// item, activation (F) or gradient (B or BW, whatever the producer kind).
/// Dense, half the work ids: tables keyed by it stay small. Requires
/// idx.inRange.
inline size_t messageKey(const Work &producer, const WorkIndex &idx) {
  return WorkIndex::outputKey(idx.id(producer));
}

/// The stage that consumes a message: stage+1 for activations, stage-1 for
/// gradients; -1 (none) for weight grads.
int32_t consumerStage(const Action &msg);

/// A few values looked up by an integer key, kept in the order their keys
/// were first asked for. Made for a rank's peers or channels: a rank talks
/// to a few ranks, so the last key hit is tried first, a short list is
/// searched, and only a long one (over 16 keys) is hashed.
template <class V> class SmallMap {
public:
  struct Item {
    int64_t key;
    V value;
  };
  /// The value of `key`, value-initialised on first use.
  V &at(int64_t key) {
    if (last < list.size() && list[last].key == key)
      return list[last].value;
    if (list.size() > kShort) {
      if (auto it = where.find(key); it != where.end())
        return list[last = it->second].value;
    } else {
      for (size_t i = 0; i < list.size(); ++i)
        if (list[i].key == key)
          return list[last = i].value;
    }
    last = list.size();
    list.push_back(Item{key, V()});
    if (list.size() > kShort) {
      if (where.empty())
        for (size_t i = 0; i < list.size(); ++i)
          where.emplace(list[i].key, i);
      else
        where.emplace(key, last);
    }
    return list[last].value;
  }
  std::vector<Item> &items() { return list; }
  const std::vector<Item> &items() const { return list; }

private:
  static constexpr size_t kShort = 16;
  std::vector<Item> list;
  std::unordered_map<int64_t, size_t> where;
  size_t last = 0;
};

/// Dense ids for the (src, dst) channels used by the program's messages,
/// numbered in order of first use. Up to kDenseRanks ranks a p x p table
/// answers (a lookup per message action of millions); beyond, a hash map.
class ChannelMap {
public:
  static constexpr int32_t kDenseRanks = 1024;
  explicit ChannelMap(int32_t numRanks = 0) {
    if (numRanks > 0 && numRanks <= kDenseRanks) {
      n = numRanks;
      dense.assign(size_t(n) * n, -1);
    }
  }
  /// Id of channel src->dst, creating it on first use.
  int32_t get(int32_t src, int32_t dst) {
    if (src >= 0 && src < n && dst >= 0 && dst < n) {
      int32_t &id = dense[size_t(src) * n + dst];
      if (id < 0)
        id = count++;
      return id;
    }
    int64_t key =
        (static_cast<int64_t>(src) << 32) | static_cast<uint32_t>(dst);
    // find first: emplace would allocate a node on every call.
    if (auto it = ids.find(key); it != ids.end())
      return it->second;
    int32_t id = count++;
    ids.emplace(key, id);
    return id;
  }
  int32_t size() const { return count; }

private:
  int32_t n = 0, count = 0;
  std::vector<int32_t> dense;
  std::unordered_map<int64_t, int32_t> ids;
};

/// "rank R, step I: MSG" followed by the rank's program around step I
/// (`context` actions each side) with "  -> I: ACTION" marking the step.
/// A step equal to the program size marks the end of the program.
std::string stepError(const Schedule &s, int32_t rank, size_t step,
                      const std::string &msg, size_t context = 3);

/// "F3.0 (rank 1, step 7)" or "F3.0 (absent)".
std::string describeAt(const Work &w, const Loc &loc);

/// Per message action: the channel it uses and its ordinal on that channel
/// (the n-th Send, Recv or GradReduce of that channel in program order).
struct CommSlot {
  int32_t chan = -1;  ///< Send/Recv: src->dst; GradReduce: self->peer
  int32_t other = -1; ///< GradReduce: peer->self
  int32_t ordinal = -1;
};

/// Ranks blocked on keys (an item not yet produced, a message not yet
/// matched): one intrusive list per key, so parking and waking are O(1)
/// per rank. Used by the replays of the simulator and the verifier.
class WaitLists {
public:
  void reset(size_t numKeys, int32_t numRanks) {
    head.assign(numKeys, -1);
    next.assign(numRanks, -1);
    parked.assign(numRanks, kNone);
  }
  void park(int32_t r, size_t key) {
    parked[r] = key;
    next[r] = head[key];
    head[key] = r;
  }
  /// Unparks every rank waiting on `key` and appends it to `ready`.
  void wake(size_t key, std::vector<int32_t> &ready) {
    for (int32_t r = head[key]; r >= 0;) {
      int32_t n = next[r];
      parked[r] = kNone;
      next[r] = -1;
      ready.push_back(r);
      r = n;
    }
    head[key] = -1;
  }
  bool isParked(int32_t r) const { return parked[r] != kNone; }
  /// The key rank r waits on (only while parked).
  size_t parkedOn(int32_t r) const { return parked[r]; }

private:
  static constexpr size_t kNone = SIZE_MAX;
  std::vector<int32_t> head, next;
  std::vector<size_t> parked;
};

} // namespace pipeforge::sched::detail

#endif // PIPEFORGE_LIB_SCHEDULE_DEPS_H
