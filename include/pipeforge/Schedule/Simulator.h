//===- Simulator.h - Event-driven replay on a cost model --------*- C++ -*-===//
#ifndef PIPEFORGE_SCHEDULE_SIMULATOR_H
#define PIPEFORGE_SCHEDULE_SIMULATOR_H

#include "pipeforge/Schedule/Action.h"

#include <vector>

namespace pipeforge::sched {

/// Times and memory deltas. Per-stage vectors, when non-empty, override the
/// uniform values (index = stage; the same for both DualPipe copies).
struct CostModel {
  double tf = 1, tb = 1, tw = 1;
  /// Time of a full backward BW; < 0 means tb + tw.
  double tbw = -1;
  /// Time of an overlapped F&B pair; < 0 means the sum of its members.
  double tfb = -1;
  /// Time on every cross-rank F or B edge (added between producer end and
  /// consumer start).
  double tcomm = 0;
  std::vector<double> tfStage, tbStage, twStage;
  /// The runtime's own time per compute action (posting messages, polling,
  /// bookkeeping; pipeforge-sched --dispatch): the rank spends it before
  /// each compute action, and it is not busy time, as the runtime's bubble
  /// counts it. 0: none.
  double dispatch = 0;

  /// Activation memory: F allocates memB, B frees memB - memW, W frees memW,
  /// BW frees memB. Units are free (default: M_B = 1 per stage).
  double memB = 1, memW = 0.5;
  std::vector<double> memBStage, memWStage;
  /// Activation offload (Schedule/Offload.h; pipeforge-run
  /// --offload-activations): the memory accounting replays
  /// planOffload(program, offloadGap) on every rank (an offloaded F's memB
  /// leaves at the end of the next compute action and returns at the start
  /// of the one before its B). 0: none. The copies take no time here (they
  /// run beside compute). A schedule with OFFLOAD/RELOAD actions
  /// (insertOffload) carries its own plan, which the accounting replays
  /// instead (offloadPlanOf: the same peaks for the same plan).
  int offloadGap = 0;
  /// Activation offload's copy time (OFFLOAD / RELOAD actions only): the
  /// memory units (memB's: M_B, or bytes where memB is in bytes) a rank
  /// copies between device and host per time unit. An OFFLOAD or RELOAD of
  /// a stash of stage s occupies the rank's copy channel (one per rank,
  /// copies in order, beside compute, messages and gathers) for
  /// memDelta(F, s) / hostBytesPerTime from when the rank reaches it (or
  /// the channel frees); the compute action after an OFFLOAD ends no
  /// earlier than its copy (the runtime frees the device memory there,
  /// waiting for it) and the B/BW that reads a reloaded stash starts no
  /// earlier than its RELOAD's copy (RankStats::exposedCopy). 0: copies
  /// take no time (every output as without this field).
  double hostBytesPerTime = 0;

  /// ZeRO-3's parameter gathers (UNSHARD / RESHARD; ParamGathers.h). Per
  /// stage (index = stage, both copies alike; empty: the uniform value),
  /// the bytes of the stage's parameters a rank gathers: those it does not
  /// own. An UNSHARD posts the gather on the rank's gather channel (one
  /// per rank, beside compute and messages; gathers run one after another
  /// on it), which takes paramBytes / gatherBytesPerTime; the stage's next
  /// compute on the rank waits for it to finish. gatherBytesPerTime 0:
  /// gathers take no time. With memPerParamByte > 0 the gathered bytes
  /// count in the rank's memory (memory units per byte) from the UNSHARD
  /// to the RESHARD. The defaults (0) replay as without gathers.
  double paramBytes = 0;
  std::vector<double> paramBytesStage;
  double gatherBytesPerTime = 0;
  double memPerParamByte = 0;

  /// DualPipe's and Chimera's GRADREDUCE: the two ranks that hold the same
  /// stages, one model copy each, exchange their gradients and each adds
  /// the other's (pipeforge-run: Executor::Impl::gradReduce, a blocking
  /// exchange in the rank's last action: nothing overlaps it, and it is
  /// not busy time). Per stage (index = stage, both copies alike; empty:
  /// the uniform gradBytes), the bytes of one copy's gradients of the
  /// stage. A rank's GRADREDUCE sends gradReduceShare of the bytes of
  /// every (copy, stage) it holds (1: the sum, each side sends all; 0.5:
  /// ZeRO over the pair, a reduce-scatter: each side sends what the other
  /// updates) and ends gradReduceLatency + bytes / gradReduceBytesPerTime
  /// (the larger of the pair's two) after both ranks have reached it; the
  /// whole counts in exposedComm. gradReduceBytesPerTime 0: the bytes take
  /// no time. The defaults replay as without a cost.
  double gradBytes = 0;
  std::vector<double> gradBytesStage;
  double gradReduceBytesPerTime = 0;
  double gradReduceLatency = 0;
  double gradReduceShare = 1;

  double timeOf(WorkKind k, int stage) const;
  double memDelta(WorkKind k, int stage) const;
  /// One copy's gradient bytes of `stage`, and the time of a GRADREDUCE
  /// whose rank holds `bytes` of gradients (before gradReduceShare).
  double gradStageBytes(int stage) const;
  double gradReduceTime(double bytes) const;
  /// The time of an UNSHARD of `stage`, and the memory it holds.
  double gatherTime(int stage) const;
  double gatherMem(int stage) const;
  /// The time of an OFFLOAD or RELOAD of a stash of `stage`.
  double copyTime(int stage) const;

  //--- Communication model (docs/schedule-library.md, "Communication
  //--- model"). The defaults add nothing: tA2A = 0 and overlapComm = false
  //--- replay exactly as without these fields.

  /// Time of one all-to-all (a dispatch or a combine) of one MoE layer for
  /// one microbatch; an F runs 2 per MoE layer, a B or BW another 2.
  double tA2A = 0;
  /// MoE layers per stage (uniform). A stage's F/B/BW is split into
  /// layers x (attention, dispatch, MLP, combine).
  int moeLayersPerStage = 0;
  /// Per-stage overrides (index = stage), as for tfStage.
  std::vector<double> tA2AStage;
  std::vector<int> moeLayersStage;
  /// Attention's share of a layer's compute (the MLP takes the rest), for
  /// F, B and W alike.
  double attnShare = 0.5;
  /// Communication runs on a separate per-rank resource (one FIFO channel
  /// per rank) concurrent with compute: a Send occupies the sender's
  /// channel for tcomm, a Recv does not block (the consumer waits for the
  /// arrival), all-to-alls queue on the channel. false: blocking messages
  /// as before, all-to-alls inline in the compute.
  bool overlapComm = false;
  /// With overlapComm: an Overlap pair is fused, its members' components
  /// interleaved in DeepSeek's per-layer order on the two resources; false
  /// runs the pair as F then B.
  bool fusePairs = true;

  double a2aTime(int stage) const;
  int moeLayers(int stage) const;
};

struct RankStats {
  double busy = 0;          ///< compute time
  double firstStart = 0;    ///< start of the first compute
  double lastEnd = 0;       ///< end of the last compute
  double peakMemory = 0;    ///< peak activation memory (CostModel units)
  /// Time blocked on communication: waiting for a message (in a Recv, or,
  /// with overlapComm, in the compute that consumes it; including the time
  /// before the sender sent) plus exposedA2A.
  double exposedComm = 0;
  /// Part of the message waits while the message was in flight (sent, not
  /// yet arrived): exposed P2P transfer time.
  double exposedP2P = 0;
  /// Compute idle inside F/B/BW/pairs waiting for all-to-alls.
  double exposedA2A = 0;
  /// Compute idle waiting for a ZeRO-3 parameter gather (UNSHARD) to
  /// finish (also counted in exposedComm), and the time the rank's gather
  /// channel was busy.
  double exposedGather = 0;
  double gatherBusy = 0;
  /// Activation offload's copies (CostModel::hostBytesPerTime): the time
  /// the rank waited for them (a B/BW for its RELOAD, the compute action
  /// after an OFFLOAD for its copy out; also counted in exposedComm), and
  /// the time its copy channel was busy.
  double exposedCopy = 0;
  double copyBusy = 0;
  /// Time the comm resource was busy (all-to-alls and, with overlapComm,
  /// P2P transfers).
  double commBusy = 0;
};

/// One occupancy of a rank's comm resource, or one exposed wait.
struct CommInterval {
  enum Kind : uint8_t {
    A2A,        ///< an all-to-all on the comm resource
    P2P,        ///< a P2P transfer on the sender's comm resource
    ExposedA2A, ///< compute idle waiting for all-to-alls
    ExposedP2P, ///< compute (or a Recv) waiting for a message in flight
    Gather,     ///< a ZeRO-3 parameter gather (UNSHARD) on the rank's
                ///< gather channel (only when it takes time)
    Copy        ///< an activation offload copy (OFFLOAD / RELOAD) on the
                ///< rank's copy channel (only when it takes time)
  };
  int32_t rank;
  size_t actionIndex; ///< into programs[rank]
  double start, end;
  Kind kind;
  /// A2A: 0 dispatch, 1 combine; member 0 = F, 1 = backward.
  uint8_t which = 0, member = 0;
  int32_t layer = 0;
};

/// One executed compute (or comm) interval, for traces. 24 bytes: one per
/// action of a schedule of millions is resident (simulate refuses programs
/// of 2^32 actions or more).
struct Interval {
  int32_t rank;
  uint32_t actionIndex; ///< into programs[rank]
  double start, end;
  /// Left unset, as a plain struct's members, even when value-initialised
  /// (`Interval{}` does not zero them): the simulator sizes its array of
  /// millions and writes each entry once.
  Interval() {}
  Interval(int32_t rank, uint32_t actionIndex, double start, double end)
      : rank(rank), actionIndex(actionIndex), start(start), end(end) {}
};
static_assert(sizeof(Interval) <= 24, "one Interval per action is resident");

struct SimResult {
  double makespan = 0;
  /// 1 - sum(busy) / (ranks * makespan)
  double bubbleRate = 0;
  /// The Zero Bubble paper's: cost = max over ranks of (lastEnd - firstStart);
  /// (cost - max busy) / cost.
  double zbBubbleRate = 0;
  std::vector<RankStats> ranks;
  /// Every action (or those SimIntervals asks for), rank after rank, in
  /// program (= start) order per rank.
  std::vector<Interval> intervals;
  /// Totals over ranks of the RankStats fields of the same names.
  double exposedComm = 0, exposedP2P = 0, exposedA2A = 0;
  /// Comm resource occupancy and exposed waits, per rank in time order
  /// (empty when there are no all-to-alls, overlapComm is off and no
  /// parameter gather takes time).
  std::vector<CommInterval> commIntervals;
};

/// Which actions SimResult::intervals records. A front end that prints only
/// the statistics (JSON, CSV) or only the compute grid (text) asks for less:
/// at millions of actions the intervals are the simulator's largest output.
enum class SimIntervals : uint8_t {
  All,     ///< every action
  Compute, ///< Compute and Overlap actions only
  None     ///< none (makespan, bubble rates, RankStats and comm intervals only)
};

struct SimOptions {
  /// The intervals to keep.
  SimIntervals intervals = SimIntervals::All;
  /// The schedule passed verify() (a front end that verified it first):
  /// with messages, the simulator skips its own checks and resolves each
  /// input from the placement, without the table of where every work runs
  /// (less time and memory at millions of actions; the same result).
  /// Requires a schedule that verify() accepts; ignored without messages.
  bool verified = false;
};

/// The largest time, and the largest activation memory, any replay of a
/// schedule computes with (cost-model units): a start or an end is at most
/// the sum of every action's time and every message's tcomm, a peak at most
/// the sum of every allocation, and both must stay at most this. Costs
/// past it are refused (checkCosts) before anything is computed with them.
constexpr double kMaxScheduleTotal = 1e30;
/// MoE layers per stage (CostModel::moeLayersPerStage, moeLayersStage): at
/// most a model's layers (the importer's n_layer bound, 2^14); and a
/// replay, which times every MoE layer of every F and backward (and keeps
/// their all-to-alls), takes at most this many per-layer steps (actions x
/// the most MoE layers of a stage), the bound of a schedule's compute
/// actions (kMaxComputeActions).
constexpr int64_t kMaxMoELayersPerStage = int64_t(1) << 14;
constexpr int64_t kMaxMoELayerSteps = int64_t(1) << 26;

/// The costs checked before a schedule of `actions` actions over
/// `numStages` stages is timed (simulate, insertComm, verify and the
/// automatic scheduler call it; pipeforge-sched before all of them): every
/// time and memory field finite and >= 0 (tbw, tfb: < 0 for "the sum"),
/// per-stage vectors too, MoE layer counts >= 0; and `actions` actions of
/// the largest action's time (an overlapped pair with its all-to-alls, plus
/// tcomm) and of the largest allocation add up to at most
/// kMaxScheduleTotal; MoE layers at most kMaxMoELayersPerStage a stage and
/// kMaxMoELayerSteps over the actions. Products such as an all-to-all time of 1e308 times
/// the MoE layers overflow to infinity, which this refuses. The message
/// names the field and, for a per-stage value, the stage.
Status checkCosts(const CostModel &c, int64_t numStages, int64_t actions);
/// The same for `s`: its placement's stages and every rank's actions.
Status checkCosts(const CostModel &c, const Schedule &s);

/// Replays the schedule. Works on compute-only schedules (dependencies are
/// inferred, tcomm is added on cross-rank edges) and on schedules with
/// messages (a Recv completes at the matching Send's time + tcomm). Fails
/// with the rank and step if the programs cannot finish (deadlock or a
/// missing producer).
Expected<SimResult> simulate(const Schedule &s, const CostModel &cost,
                             const SimOptions &opts = {});

} // namespace pipeforge::sched

#endif
