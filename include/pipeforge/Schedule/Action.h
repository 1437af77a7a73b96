//===- Action.h - The action model of a pipeline schedule -------*- C++ -*-===//
//
// Plain C++ (no MLIR): the vocabulary every part of the schedule library,
// the MLIR passes, the planner and the runtime share.
//
//   F  = forward                      B  = input-gradient backward
//   W  = weight-gradient backward     BW = full backward (B then W, fused)
//   FB = an overlapped pair: F of one microbatch with B or BW of another
//
// ZeRO-3 adds two actions per stage a rank computes: UNSHARD gathers the
// stage's parameters the rank does not own (their owners serve them) before
// its first F/B/W work of the step, RESHARD releases them after its last
// (ParamGathers.h inserts them, Verify.h checks them).
//
// Activation offload adds two actions per stash that leaves the device:
// OFFLOAD F3.1 copies the stash of F3.1 (what its B reads) to host memory
// after that F (its device memory is freed at the end of the next compute
// action, which the copy runs under), RELOAD F3.1 brings it back before the
// compute action before its B (Offload.h places them, Verify.h checks
// them).
//
// A schedule is one ordered action list per rank. Stages are numbered per
// model copy: stage 0 takes the input, stage numStages-1 computes the loss.
// DualPipe and Chimera have two copies (copy 0 enters at rank 0, copy 1 at
// rank N-1);
// every other schedule has one. Microbatches are numbered 0..m-1 per copy.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_ACTION_H
#define PIPEFORGE_SCHEDULE_ACTION_H

#include "pipeforge/Support/Status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipeforge::sched {

// Errors: Status and Expected (Support/Status.h), named here as before.
using pipeforge::Expected;
using pipeforge::Status;

//===----------------------------------------------------------------------===//
// Work items and actions
//===----------------------------------------------------------------------===//

/// The kind of one unit of compute on one stage for one microbatch.
enum class WorkKind : uint8_t { F, B, W, BW };

/// The largest stage count a schedule may have: Work keeps its stage in 26
/// bits (a schedule of millions of actions stays compact; kMaxComputeActions
/// bounds the generators well below this). Parsers and the pp.schedule
/// verifier refuse more.
inline constexpr int32_t kMaxStages = int32_t(1) << 25;
/// Model copies: two (DualPipe, Chimera) at most; Work keeps the copy in 3
/// bits.
inline constexpr int32_t kMaxCopies = 2;

/// One unit of compute: `kind` of stage `stage` of model copy `copy` on
/// microbatch `mb`.
/// 8 bytes: the microbatch, then stage, copy and kind packed in one word
/// (Action holds two Works; a schedule holds millions of Actions). The
/// constructor keeps the (kind, stage, mb, copy) order of brace lists.
struct Work {
  int32_t mb = 0;
  int32_t stage : 26; ///< [0, kMaxStages); negative only in malformed input
  int32_t copy : 3;   ///< [0, kMaxCopies)
  WorkKind kind : 3;

  Work() : stage(0), copy(0), kind(WorkKind::F) {}
  Work(WorkKind kind, int32_t stage, int32_t mb, int32_t copy = 0)
      : mb(mb), stage(stage), copy(copy), kind(kind) {}

  /// Whether (stage, copy) read from input fit the packed fields.
  static bool fits(int64_t stage, int64_t copy) {
    return stage >= -kMaxStages && stage < kMaxStages && copy >= -4 &&
           copy < 4;
  }

  friend bool operator==(const Work &a, const Work &b) {
    return a.kind == b.kind && a.stage == b.stage && a.mb == b.mb &&
           a.copy == b.copy;
  }
  friend bool operator!=(const Work &a, const Work &b) { return !(a == b); }
};
static_assert(sizeof(Work) == 8, "Work is held twice in every Action");

/// What a message carries: the activation produced by F(stage, mb) (sent
/// downstream to stage+1) or the gradient produced by B/BW(stage, mb) (sent
/// upstream to stage-1), or a copy's weight gradients (DualPipe reduction).
enum class Payload : uint8_t { Activation, Gradient, WeightGrad };

enum class ActionKind : uint8_t {
  Compute,   ///< `work` (F, B, W or BW)
  Overlap,   ///< FB pair: `work` is the F member, `work2` the B or BW member
  Send,      ///< send `payload` of (`work.stage`, `work.mb`, `work.copy`)
  Recv,      ///< receive it
  GradReduce, ///< DualPipe: sum this rank's two copies' weight grads with `peer`
  Unshard,    ///< ZeRO-3: gather stage (`work.stage`, `work.copy`)'s
              ///< parameters that other ranks own (posted here, complete
              ///< before the stage's next compute)
  Reshard,    ///< ZeRO-3: release them (after the stage's last compute)
  Offload,    ///< activation offload: copy the stash of F `work` to host
              ///< memory (after that F, on its rank)
  Reload      ///< bring it back (before the B/BW that reads it)
};

/// One step of the compiled component order of a fused Overlap pair
/// (pipeforge-compile --fuse-overlap): component `kind` of layer `layer` of
/// member part `member`. All-to-alls are implied by the mlp components
/// under expert parallelism.
struct PairComponentStep {
  enum Member : uint8_t { F = 0, B = 1, W = 2 }; ///< W: the BW member's W part
  enum Kind : uint8_t { Attn = 0, Mlp = 1 };
  uint8_t member = F;
  uint8_t kind = Attn;
  int16_t layer = 0;
  friend bool operator==(const PairComponentStep &a,
                         const PairComponentStep &b) {
    return a.member == b.member && a.kind == b.kind && a.layer == b.layer;
  }
};

/// The component order of one fused pair. A schedule keeps each distinct
/// order once (Schedule::pairOrders); an Overlap action names its order by
/// index (Action::pairOrder), so that an Action stays 24 bytes.
using PairComponentOrder = std::vector<PairComponentStep>;

struct Action {
  Work work;            ///< Compute / Overlap (F member) / message identity
  Work work2;           ///< Overlap: the backward member (B or BW)
  int32_t peer = -1;    ///< Send / Recv / GradReduce: the other rank
  ActionKind kind = ActionKind::Compute;
  Payload payload = Payload::Activation; ///< Send / Recv
  /// Overlap only, optional: 1 + the index of the fused pair's compiled
  /// component order in Schedule::pairOrders; 0: none (the runtime's own
  /// policy). Ignored by operator== (Schedule::pairOrderOf reads it).
  uint16_t pairOrder = 0;

  static Action compute(Work w) {
    Action a;
    a.kind = ActionKind::Compute;
    a.work = w;
    return a;
  }
  static Action overlap(Work f, Work b) {
    Action a;
    a.kind = ActionKind::Overlap;
    a.work = f;
    a.work2 = b;
    return a;
  }
  /// Message actions: `producer` is the work whose output travels
  /// (F(s,j) for an activation, B/BW(s,j) for a gradient).
  static Action send(Payload p, Work producer, int32_t peer) {
    Action a;
    a.kind = ActionKind::Send;
    a.payload = p;
    a.work = producer;
    a.peer = peer;
    return a;
  }
  static Action recv(Payload p, Work producer, int32_t peer) {
    Action a = send(p, producer, peer);
    a.kind = ActionKind::Recv;
    return a;
  }
  static Action gradReduce(int32_t peer) {
    Action a;
    a.kind = ActionKind::GradReduce;
    a.peer = peer;
    a.payload = Payload::WeightGrad;
    return a;
  }

  /// ZeRO-3's gather (UNSHARD) and release (RESHARD) of the parameters of
  /// stage (`stage`, `copy`); `work` holds the stage (kind F, mb 0).
  static Action unshard(int32_t stage, int32_t copy = 0) {
    Action a;
    a.kind = ActionKind::Unshard;
    a.work = Work(WorkKind::F, stage, 0, copy);
    return a;
  }
  static Action reshard(int32_t stage, int32_t copy = 0) {
    Action a = unshard(stage, copy);
    a.kind = ActionKind::Reshard;
    return a;
  }
  /// Activation offload's copy out (OFFLOAD) and back (RELOAD) of the stash
  /// of forward `f` (kind F: the work item whose stash moves).
  static Action offload(Work f) {
    Action a;
    a.kind = ActionKind::Offload;
    a.work = f;
    return a;
  }
  static Action reload(Work f) {
    Action a = offload(f);
    a.kind = ActionKind::Reload;
    return a;
  }
  /// A Compute or an Overlap: the actions that run F/B/W work.
  bool isCompute() const {
    return kind == ActionKind::Compute || kind == ActionKind::Overlap;
  }
  bool isParamGather() const {
    return kind == ActionKind::Unshard || kind == ActionKind::Reshard;
  }
  /// OFFLOAD or RELOAD (activation offload).
  bool isStashCopy() const {
    return kind == ActionKind::Offload || kind == ActionKind::Reload;
  }
  /// Actions that wait on no other rank and run no F/B/W work: ZeRO-3's
  /// gathers and activation offload's copies.
  bool isLocalAux() const { return isParamGather() || isStashCopy(); }

  bool isComm() const {
    return kind == ActionKind::Send || kind == ActionKind::Recv ||
           kind == ActionKind::GradReduce;
  }
  friend bool operator==(const Action &a, const Action &b) {
    return a.kind == b.kind && a.work == b.work &&
           (a.kind != ActionKind::Overlap || a.work2 == b.work2) &&
           (!a.isComm() || (a.payload == b.payload && a.peer == b.peer));
  }
};

static_assert(sizeof(Action) <= 24,
              "Action is resident once per action of a schedule of millions");

//===----------------------------------------------------------------------===//
// Placement and schedule
//===----------------------------------------------------------------------===//

/// Where every stage of every model copy lives.
struct Placement {
  int32_t numRanks = 0;
  int32_t numStages = 0; ///< stages per copy
  int32_t numCopies = 1; ///< 2 for DualPipe and Chimera
  /// rankOf[copy][stage]
  std::vector<std::vector<int32_t>> rankOf;

  int32_t rank(int copy, int stage) const { return rankOf[copy][stage]; }

  /// Stage i on rank i (p stages on p ranks).
  static Placement linear(int ranks);
  /// v chunks per rank: stage k on rank k mod p (p*v stages).
  static Placement interleaved(int ranks, int chunksPerRank);
  /// 2p stages, rank r holds stages r and 2p-1-r.
  static Placement vShape(int ranks);
  /// Two copies of p stages: copy 0 stage r on rank r, copy 1 stage r on
  /// rank p-1-r.
  static Placement dual(int ranks);
};

enum class ScheduleKind : uint8_t {
  GPipe,
  OneFOneB,
  Interleaved,
  ZBH1,
  ZBH2,
  ZBV,
  DualPipe,
  DualPipeV,
  Chimera,
  VHalf,
  VMin,
  Auto
};

/// The name used by `--schedule` / `kind=`: gpipe 1f1b interleaved zb-h1 zb-h2
/// zbv dualpipe dualpipev chimera v-half v-min auto.
const char *scheduleKindName(ScheduleKind k);
std::optional<ScheduleKind> parseScheduleKind(const std::string &name);
/// All names, space separated, for help texts and error messages.
std::string scheduleKindNames();

struct Schedule {
  std::string name;          ///< e.g. "zb-h1"
  Placement placement;
  int32_t numMicrobatches = 0; ///< per copy
  bool hasComm = false;        ///< send/recv inserted
  std::vector<std::vector<Action>> programs; ///< per rank, in order
  /// The distinct compiled component orders of fused Overlap pairs
  /// (pipeforge-compile --fuse-overlap), named by Action::pairOrder.
  std::vector<PairComponentOrder> pairOrders;

  int32_t numRanks() const { return placement.numRanks; }

  /// The compiled component order of Overlap action `a`, or null (none, or
  /// an index out of range).
  const PairComponentOrder *pairOrderOf(const Action &a) const {
    if (a.kind != ActionKind::Overlap || a.pairOrder == 0 ||
        a.pairOrder > pairOrders.size())
      return nullptr;
    return &pairOrders[a.pairOrder - 1];
  }
  /// Gives `a` the order `order` (empty: none), kept once in pairOrders.
  /// Fails past 65,535 distinct orders.
  Status setPairOrder(Action &a, PairComponentOrder order);
};

//===----------------------------------------------------------------------===//
// Text forms
//===----------------------------------------------------------------------===//

const char *workKindName(WorkKind k); ///< "F" "B" "W" "BW"
std::optional<WorkKind> parseWorkKind(const std::string &s);
const char *payloadName(Payload p);   ///< "act" "grad" "wgrad"

/// Compact text: "F3.0" (kind, stage, mb), "F3.0@1" for copy 1,
/// "F3.0+BW5.1" for an overlapped pair, "SEND act F3.0 ->r2",
/// "RECV grad B4.0 <-r3", "GRADREDUCE <->r1", "UNSHARD 3", "RESHARD 3@1".
std::string toString(const Work &w);
std::string toString(const Action &a);

/// `acts` with before[i] placed before action i and after[i] after it (the
/// passes that add actions: ParamGathers.h, Offload.h).
void spliceActions(std::vector<Action> &acts,
                   const std::map<size_t, std::vector<Action>> &before,
                   const std::map<size_t, std::vector<Action>> &after);

} // namespace pipeforge::sched

#endif // PIPEFORGE_SCHEDULE_ACTION_H
