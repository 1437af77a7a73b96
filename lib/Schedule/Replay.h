//===- Replay.h - The replay engine of the verifier and simulator -*- C++
//-*-===//
//
// One engine walks the ranks' programs in dependency order for both the
// verifier (untimed, rendezvous sends: the deadlock proof, memory limit) and
// the simulator (times from the cost model, eager sends), and comm
// insertion's ASAP replay of a compute-only schedule (CommInsertion.cpp). It
// is the one place that knows when an action can run -- by the dependency
// rule of Deps.h, a compute's inputs are there (a local
// producer has run, the message was received, or, in a compute-only
// schedule, the remote producer has run), a Recv's matching Send was posted
// (in FIFO order per channel), a GradReduce's peer has arrived, and, with
// rendezvous sends, a Send's matching Recv has arrived -- how ranks advance
// (dataflow: a rank runs until it needs something not there yet, parks on
// that item and is woken when it appears, so the replay is linear in the
// number of actions), and how to explain a blocked state. It also keeps the
// per-rank activation memory (F +M_B, B -(M_B-M_W), W -M_W, BW -M_B; and
// ZeRO-3's gathered parameters from UNSHARD to RESHARD, CostModel::gatherMem).
//
// A client supplies what happens when an action runs, through these member
// functions (the engine calls them inline; the verifier's are empty):
//
//   void compute(int32_t r, size_t i, const Action &a, const Input &in1,
//                const Input &in2);   // a Compute or Overlap runs
//   void send(int32_t r, size_t i, const Action &a, const CommSlot &sl);
//                                     // a Send is posted (once)
//   void recv(int32_t r, size_t i, const Action &a, const CommSlot &sl);
//                                     // a Recv completes (its Send posted)
//   void gradReduceArrive(int32_t r, size_t i, const CommSlot &sl);
//   void gradReduce(int32_t r, size_t i, const CommSlot &sl);
//                                     // arrives at / leaves a GradReduce
//   void paramGather(int32_t r, size_t i, const Action &a);
//   void stashCopy(int32_t r, size_t i, const Action &a); // OFFLOAD/RELOAD
//                                     // an UNSHARD or RESHARD (ZeRO-3)
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_LIB_SCHEDULE_REPLAY_H
#define PIPEFORGE_LIB_SCHEDULE_REPLAY_H

#include "Deps.h"

#include "pipeforge/Schedule/Offload.h"
#include "pipeforge/Schedule/Simulator.h"

#include <optional>
#include <string>
#include <vector>

namespace pipeforge::sched::detail {

/// Where a compute member's input comes from, as the engine resolved it.
struct Input {
  enum Kind : uint8_t {
    None,    ///< no input (F of stage 0)
    Local,   ///< produced earlier on this rank; `id` is the producer's work id
    Message, ///< received on this rank; `id` is the messageKey
    Edge     ///< compute-only schedule: remote producer `id` has run
  };
  // With Options::verified or byPlacement, `id` of Local and Edge is the
  // nominal producer's (B standing for BW).
  Kind kind = None;
  size_t id = 0;
};

class ReplayEngine {
public:
  struct Options {
    /// A Send waits for its matching Recv to arrive (rendezvous: the
    /// verifier's deadlock proof); otherwise sends are buffered (eager: the
    /// simulator).
    bool rendezvousSends = false;
    /// The programs passed the verifier's static checks (every compute
    /// input is produced earlier on its rank or received before it, every
    /// Send follows its producer, every Recv names its channel's matching
    /// Send): the engine does not check them again, and leaves the Inputs
    /// of schedules with messages unresolved (None).
    bool prechecked = false;
    /// For a timed client of a schedule with messages that passed verify():
    /// the checks are skipped as with `prechecked`, and inputs are resolved
    /// from the placement alone (a producer on this rank is Local with the
    /// nominal producer's id, B standing for BW too; another rank's is a
    /// Message), so the engine needs no work locator (`locs` may be
    /// empty) and keeps no per-channel Loc lists (sendsOn, recvsOn).
    bool verified = false;
    /// For a compute-only schedule whose works each run at most once, on
    /// their placement's rank (comm insertion checks that much, nothing
    /// else): inputs are resolved from the placement alone, as with
    /// `verified`, and a compute waits for its input's output (F's
    /// activation; B's or BW's gradient), local or remote. A producer that
    /// no rank runs, or that runs later on the compute's own rank, leaves
    /// it parked: such programs end in a deadlock at the lowest stuck
    /// rank, which the client explains in its own words. No work locator
    /// (`locs` may be empty).
    bool byPlacement = false;
    /// Memory accounting with this cost model's memDelta.
    const CostModel *memCost = nullptr;
    /// With memCost: note, per rank, the first step whose activation memory
    /// (after the action's first work) exceeds this.
    std::optional<double> memLimit;
  };

  /// The end of a run. `message` is the bare text; the client adds the
  /// "rank R, step I:" frame and the program excerpt (stepError).
  struct Outcome {
    enum Kind { Finished, Failed, Deadlock };
    Kind kind = Finished;
    int32_t rank = -1;
    size_t step = 0;
    std::string message;
    explicit operator bool() const { return kind == Finished; }
  };

  /// `idx` and `locs` (locateWork of every compute work) must outlive the
  /// engine.
  ReplayEngine(const Schedule &s, const WorkIndex &idx,
               const std::vector<Loc> &locs, Options opts);

  /// Gives every message action its channel and its ordinal on it. Requires
  /// every message action's peer to be a rank other than its own.
  void assignChannels();

  /// Replays the programs with `client`. Requires assignChannels().
  template <class Client> Outcome run(Client &client);

  // The channel tables (after assignChannels).
  int32_t numChannels() const { return chans.size(); }
  /// How many Sends channel `c` carries.
  size_t numSends(int32_t c) const { return chanSendCount[c]; }
  /// Where each Send / Recv of channel `c` is, in ordinal (FIFO) order
  /// (empty with Options::verified).
  const std::vector<Loc> &sendsOn(int32_t c) const { return chanSends[c]; }
  const std::vector<Loc> &recvsOn(int32_t c) const { return chanRecvs[c]; }
  /// Frees the per-channel Loc lists (sendsOn, recvsOn are empty after
  /// this): a run with Options::prechecked does not read them.
  void releaseChannelLists() {
    std::vector<std::vector<Loc>>().swap(chanSends);
    std::vector<std::vector<Loc>>().swap(chanRecvs);
    chanSends.resize(chanSendCount.size());
    chanRecvs.resize(chanSendCount.size());
  }

  // Memory accounting (after run, with Options::memCost).
  double peakMemory(int32_t r) const { return peak[r]; }
  /// The first rank (lowest) with a step over Options::memLimit: its step
  /// and the memory there.
  struct MemoryExcess {
    int32_t rank;
    size_t step;
    double memory;
  };
  std::optional<MemoryExcess> memoryExcess() const;

private:
  enum class Step { Done, Blocked, Failed };

  void reset();
  template <class Client> Step advance(int32_t r, Client &client);
  Step input(int32_t r, size_t i, const Work &w, Input &in) {
    if (opts.verified && s.hasComm)
      return resolveVerified(r, w, in);
    if (opts.byPlacement && !s.hasComm)
      return resolvePlaced(r, w, in);
    if (opts.prechecked && s.hasComm) {
      in = Input();
      return Step::Done;
    }
    return resolveInput(r, i, w, in);
  }
  Step resolveInput(int32_t r, size_t i, const Work &w, Input &in);
  Step resolveVerified(int32_t r, const Work &w, Input &in) {
    std::optional<Work> nominal = nominalProducer(w, idx.numStages);
    if (!nominal)
      in = Input();
    else if (s.placement.rank(nominal->copy, nominal->stage) == r)
      in = Input{Input::Local, idx.id(*nominal)};
    else
      in = Input{Input::Message, messageKey(*nominal, idx)};
    return Step::Done;
  }
  Step resolvePlaced(int32_t r, const Work &w, Input &in) {
    std::optional<Work> nominal = nominalProducer(w, idx.numStages);
    if (!nominal) {
      in = Input();
      return Step::Done;
    }
    size_t key = messageKey(*nominal, idx);
    if (!done[key])
      return park(r, key);
    in = Input{s.placement.rank(nominal->copy, nominal->stage) == r
                   ? Input::Local
                   : Input::Edge,
               idx.id(*nominal)};
    return Step::Done;
  }
  Step checkSend(int32_t r, size_t i, const Action &a);
  Step checkRecv(int32_t r, size_t i, const Action &a, const CommSlot &sl);
  void account(int32_t r, size_t i, const Action &a);
  void complete(const Work &w) {
    if (!tracked)
      return;
    if (placed) { // keyed by output; W's is no one's input
      if (w.kind != WorkKind::W) {
        size_t key = messageKey(w, idx);
        done[key] = 1;
        waits.wake(key, ready);
      }
      return;
    }
    size_t id = idx.id(w);
    done[id] = 1;
    if (!s.hasComm) // only compute-only schedules park on work ids
      waits.wake(id, ready);
  }
  Step fail(int32_t r, size_t i, std::string msg) {
    outcome = Outcome{Outcome::Failed, r, i, std::move(msg)};
    return Step::Failed;
  }
  Step park(int32_t r, size_t key) {
    waits.park(r, key);
    return Step::Blocked;
  }
  /// The channel and ordinal of rank r's current message action `a`,
  /// derived when the rank reaches it (no table per message: millions of
  /// messages). One side of a channel is one rank's program, so the
  /// action's ordinal is that side's arrival count so far, less its own
  /// arrival once counted.
  CommSlot slotOf(int32_t r, const Action &a) {
    CommSlot sl;
    int32_t self = arrived[r];
    switch (a.kind) {
    case ActionKind::Send:
      sl.chan = chans.get(r, a.peer);
      sl.ordinal = int32_t(sendArr[sl.chan]) - self;
      break;
    case ActionKind::Recv:
      sl.chan = chans.get(a.peer, r);
      sl.ordinal = int32_t(recvArr[sl.chan]) - self;
      break;
    case ActionKind::GradReduce:
      sl.chan = chans.get(r, a.peer);
      sl.other = chans.get(a.peer, r);
      sl.ordinal = int32_t(grArr[sl.chan]) - self;
      break;
    default:
      break;
    }
    return sl;
  }
  /// True the first time rank r reaches its current step.
  bool arrive(int32_t r) {
    if (arrived[r])
      return false;
    arrived[r] = 1;
    return true;
  }
  size_t sendKey(int32_t c) const { return sendKeyBase + c; }
  size_t recvKey(int32_t c) const { return recvKeyBase + c; }
  size_t grKey(int32_t c) const { return grKeyBase + c; }
  Outcome deadlock() const;
  std::string blockedReason(int32_t r) const;
  std::string whereIs(int32_t q) const;

  const Schedule &s;
  const WorkIndex &idx;
  const std::vector<Loc> &locs;
  Options opts;
  int32_t numRanks;

  // Channels.
  ChannelMap chans;
  std::vector<std::vector<Loc>> chanSends, chanRecvs;
  std::vector<size_t> chanSendCount;

  // Dataflow state.
  /// Whether the replay keeps `done` and `received`. Its own checks read
  /// them, and so do a compute-only schedule's waits; a schedule with
  /// messages that passed the static checks needs neither (tens of
  /// megabytes at millions of microbatches).
  bool tracked = true;
  /// Options::byPlacement on a compute-only schedule: `done` and the
  /// compute waits are keyed by output (messageKey), not by work id.
  bool placed = false;
  std::vector<char> done;     ///< by work id (or output, `placed`): has run
  std::vector<char> received; ///< by messageKey: a Recv completed
  /// Per channel: Sends posted, Recvs arrived, GradReduces arrived.
  std::vector<int32_t> sendArr, recvArr, grArr;
  std::vector<size_t> pc;
  std::vector<char> arrived; ///< rank r has arrived at step pc[r]
  std::vector<double> mem, peak;
  std::vector<size_t> overStep; ///< first step over memLimit, or SIZE_MAX
  std::vector<double> overMem;
  /// Activation offload (CostModel::offloadGap): per rank, the plan and
  /// where each offloaded stash is (0 on the device, 1 leaving, 2 away).
  std::vector<OffloadPlan> offload;
  std::vector<std::map<StashKey, uint8_t>> offState;
  void noteMemory(int32_t r, size_t i, double delta);

  // Parking: keys are work ids (compute-only schedules: a compute waits
  // for a remote producer; none with messages; outputs when `placed`),
  // then send, recv and GradReduce channel keys.
  WaitLists waits;
  std::vector<int32_t> ready;
  size_t sendKeyBase = 0, recvKeyBase = 0, grKeyBase = 0;
  Outcome outcome;
};

template <class Client> ReplayEngine::Outcome ReplayEngine::run(Client &c) {
  reset();
  for (int32_t r = numRanks - 1; r >= 0; --r)
    ready.push_back(r);
  while (!ready.empty()) {
    int32_t r = ready.back();
    ready.pop_back();
    if (waits.isParked(r))
      continue; // parked again since it was queued
    if (advance(r, c) == Step::Failed)
      return outcome;
  }
  return deadlock();
}

template <class Client>
ReplayEngine::Step ReplayEngine::advance(int32_t r, Client &c) {
  const std::vector<Action> &prog = s.programs[r];
  while (pc[r] < prog.size()) {
    size_t i = pc[r];
    const Action &a = prog[i];
    switch (a.kind) {
    case ActionKind::Compute:
    case ActionKind::Overlap: {
      bool pair = a.kind == ActionKind::Overlap;
      Input in1, in2;
      if (Step k = input(r, i, a.work, in1); k != Step::Done)
        return k;
      if (pair)
        if (Step k = input(r, i, a.work2, in2); k != Step::Done)
          return k;
      c.compute(r, i, a, in1, in2);
      account(r, i, a);
      complete(a.work);
      if (pair)
        complete(a.work2);
      break;
    }
    case ActionKind::Send: {
      const CommSlot sl = slotOf(r, a);
      if (arrive(r)) {
        if (!opts.prechecked && !opts.verified)
          if (Step k = checkSend(r, i, a); k != Step::Done)
            return k;
        c.send(r, i, a, sl);
        ++sendArr[sl.chan];
        waits.wake(recvKey(sl.chan), ready);
      }
      if (opts.rendezvousSends && recvArr[sl.chan] <= sl.ordinal)
        return park(r, sendKey(sl.chan));
      break;
    }
    case ActionKind::Recv: {
      const CommSlot sl = slotOf(r, a);
      if (arrive(r)) {
        ++recvArr[sl.chan];
        if (opts.rendezvousSends)
          waits.wake(sendKey(sl.chan), ready);
      }
      if (sendArr[sl.chan] <= sl.ordinal)
        return park(r, recvKey(sl.chan));
      if (!opts.prechecked && !opts.verified)
        if (Step k = checkRecv(r, i, a, sl); k != Step::Done)
          return k;
      c.recv(r, i, a, sl);
      if (tracked && a.payload != Payload::WeightGrad)
        received[messageKey(a.work, idx)] = 1;
      break;
    }
    case ActionKind::GradReduce: {
      const CommSlot sl = slotOf(r, a);
      if (arrive(r)) {
        c.gradReduceArrive(r, i, sl);
        ++grArr[sl.chan];
        waits.wake(grKey(sl.chan), ready);
      }
      if (grArr[sl.other] <= sl.ordinal)
        return park(r, grKey(sl.other));
      c.gradReduce(r, i, sl);
      break;
    }
    case ActionKind::Unshard:
    case ActionKind::Reshard:
      // ZeRO-3's gathers wait on no other rank: the owners serve the values
      // they hold all step (Verify.cpp checks where they stand). The
      // gathered parameters count in the rank's memory until the RESHARD.
      c.paramGather(r, i, a);
      if (opts.memCost)
        if (double m = opts.memCost->gatherMem(a.work.stage); m != 0)
          noteMemory(r, i, a.kind == ActionKind::Unshard ? m : -m);
      break;
    case ActionKind::Offload:
    case ActionKind::Reload:
      // Activation offload's copies wait on no other rank either; the
      // memory they move is accounted at the compute actions they run
      // under (account(), the plan offloadPlanOf reads from them).
      c.stashCopy(r, i, a);
      break;
    }
    arrived[r] = 0;
    ++pc[r];
  }
  return Step::Done;
}

} // namespace pipeforge::sched::detail

#endif // PIPEFORGE_LIB_SCHEDULE_REPLAY_H
