//===- PPOps.cpp - pp dialect op verifiers --------------------------------===//
//
// Local structure only: ranges, uniqueness, placement. Whole-schedule
// semantics (each work exactly once, dependencies, matched messages, no
// deadlock) are checked by --pp-verify-schedule through the schedule library.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/PP/IR/PPOps.h"

#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace pipeforge::pp;

#include "pipeforge/Dialect/PP/IR/PPEnums.cpp.inc"

//===----------------------------------------------------------------------===//
// Stage level
//===----------------------------------------------------------------------===//

int64_t PipelineOp::expectedRank(int64_t copy, int64_t stage) {
  int64_t p = getNumRanks();
  switch (getPlacement()) {
  case PlacementKind::linear:
  case PlacementKind::interleaved:
    return stage % p;
  case PlacementKind::v:
    return stage < p ? stage : 2 * p - 1 - stage;
  case PlacementKind::dual:
    return copy == 0 ? stage : p - 1 - stage;
  }
  return -1;
}

LogicalResult PipelineOp::verifyRegions() {
  int64_t stages = getNumStages(), ranks = getNumRanks();
  if (stages < 1)
    return emitOpError("expects at least one stage, got ") << stages;
  if (ranks < 1)
    return emitOpError("expects at least one rank, got ") << ranks;
  switch (getPlacement()) {
  case PlacementKind::linear:
  case PlacementKind::dual:
    if (stages != ranks)
      return emitOpError("placement '")
             << stringifyPlacementKind(getPlacement()) << "' needs stages == ranks, got "
             << stages << " stages on " << ranks << " ranks";
    break;
  case PlacementKind::interleaved:
    if (stages % ranks != 0)
      return emitOpError("placement 'interleaved' needs stages to be a "
                         "multiple of ranks, got ")
             << stages << " stages on " << ranks << " ranks";
    break;
  case PlacementKind::v:
    if (stages != 2 * ranks)
      return emitOpError("placement 'v' needs stages == 2 x ranks, got ")
             << stages << " stages on " << ranks << " ranks";
    break;
  }
  if (getPlacement() == PlacementKind::dual && ranks % 2 != 0)
    return emitOpError("placement 'dual' needs an even number of ranks, got ")
           << ranks;

  llvm::DenseSet<std::pair<int64_t, int64_t>> seen;
  for (Operation &op : getBody().front()) {
    auto stage = dyn_cast<StageOp>(op);
    if (!stage)
      return op.emitOpError("is not allowed directly inside 'pp.pipeline' "
                            "(only 'pp.stage')");
    int64_t copy = stage.getCopy(), idx = stage.getIndex();
    if (copy >= getNumCopies())
      return stage.emitOpError("copy ")
             << copy << " out of range: the pipeline has " << getNumCopies()
             << " model cop" << (getNumCopies() == 1 ? "y" : "ies");
    if (idx >= stages)
      return stage.emitOpError("index ")
             << idx << " out of range [0, " << stages << ")";
    if (!seen.insert({copy, idx}).second)
      return stage.emitOpError("duplicates stage ")
             << idx << (copy ? " of copy 1" : "");
    int64_t want = expectedRank(copy, idx);
    if (stage.getRank() != want)
      return stage.emitOpError("is on rank ")
             << stage.getRank() << " but placement '"
             << stringifyPlacementKind(getPlacement()) << "' puts stage " << idx
             << " on rank " << want;
    int64_t wantChunk = getPlacement() == PlacementKind::v
                            ? (idx < ranks ? 0 : 1)
                            : idx / ranks;
    if (getPlacement() == PlacementKind::dual)
      wantChunk = copy;
    if (stage.getChunk() != wantChunk)
      return stage.emitOpError("is chunk ")
             << stage.getChunk() << " of its rank but placement '"
             << stringifyPlacementKind(getPlacement()) << "' makes it chunk "
             << wantChunk;
  }
  int64_t want = stages * getNumCopies();
  if ((int64_t)seen.size() != want)
    return emitOpError("has ") << seen.size() << " stages, expected " << want;
  return success();
}

LogicalResult StageOp::verify() {
  if (getRank() >= getParentOp().getNumRanks())
    return emitOpError("rank ") << getRank() << " out of range [0, "
                                << getParentOp().getNumRanks() << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// Schedule level
//===----------------------------------------------------------------------===//

LogicalResult ScheduleOp::verifyRegions() {
  int64_t ranks = getNumRanks(), stages = getNumStages();
  if (ranks < 1)
    return emitOpError("expects at least one rank, got ") << ranks;
  if (stages < 1)
    return emitOpError("expects at least one stage, got ") << stages;
  if (getNumMicrobatches() < 1)
    return emitOpError("expects at least one microbatch, got ")
           << getNumMicrobatches();
  ArrayRef<int32_t> placement = getPlacement();
  if (placement.empty() || placement.size() % stages != 0 ||
      placement.size() / stages > 2)
    return emitOpError("placement lists ")
           << placement.size() << " ranks; expected " << stages
           << " (one model copy) or " << 2 * stages << " (two copies)";
  for (auto [i, r] : llvm::enumerate(placement))
    if (r < 0 || r >= ranks)
      return emitOpError("placement puts stage ")
             << (int64_t)i % stages << " on rank " << r << ", out of range [0, "
             << ranks << ")";

  llvm::DenseSet<int32_t> seen;
  for (Operation &op : getBody().front()) {
    auto prog = dyn_cast<RankProgramOp>(op);
    if (!prog)
      return op.emitOpError("is not allowed directly inside 'pp.schedule' "
                            "(only 'pp.rank_program')");
    if (!seen.insert(prog.getRank()).second)
      return prog.emitOpError("duplicates rank ") << prog.getRank();
  }
  if ((int64_t)seen.size() != ranks)
    return emitOpError("has ") << seen.size() << " rank programs, expected "
                               << ranks;
  return success();
}

LogicalResult RankProgramOp::verify() {
  int64_t ranks = getParentOp().getNumRanks();
  if (getRank() < 0 || getRank() >= ranks)
    return emitOpError("rank ") << getRank() << " out of range [0, " << ranks
                                << ")";
  for (Operation &op : getBody().front())
    if (!isa<ComputeOp, OverlapOp, SendOp, RecvOp, GradReduceOp>(op))
      return op.emitOpError("is not a schedule action");
  return success();
}

/// Checks the (kind, stage, mb, copy) fields of a work reference against the
/// enclosing schedule; `onRank` also requires the stage to live on the
/// enclosing rank (computes) or the stage to neighbour it (messages).
static LogicalResult verifyWork(Operation *op, int64_t stage, int64_t mb,
                                int64_t copy) {
  auto sched = op->getParentOfType<ScheduleOp>();
  if (!sched)
    return op->emitOpError("must be inside a 'pp.schedule'");
  if (stage < 0 || stage >= sched.getNumStages())
    return op->emitOpError("stage ")
           << stage << " out of range [0, " << sched.getNumStages() << ")";
  if (mb >= sched.getNumMicrobatches())
    return op->emitOpError("microbatch ")
           << mb << " out of range [0, " << sched.getNumMicrobatches() << ")";
  if (copy < 0 || copy >= sched.getNumCopies())
    return op->emitOpError("copy ")
           << copy << " out of range: the schedule has " << sched.getNumCopies()
           << " model cop" << (sched.getNumCopies() == 1 ? "y" : "ies");
  return success();
}

static RankProgramOp enclosingProgram(Operation *op) {
  return op->getParentOfType<RankProgramOp>();
}

LogicalResult ComputeOp::verify() {
  if (failed(verifyWork(*this, getStage(), getMb(), getCopy())))
    return failure();
  RankProgramOp prog = enclosingProgram(*this);
  auto sched = getOperation()->getParentOfType<ScheduleOp>();
  if (prog && sched.rankOf(getCopy(), getStage()) != prog.getRank())
    return emitOpError("stage ")
           << getStage() << (getCopy() ? " of copy 1" : "") << " is placed on rank "
           << sched.rankOf(getCopy(), getStage()) << ", not on rank "
           << prog.getRank();
  return success();
}

LogicalResult OverlapOp::verify() {
  auto &ops = getBody().front().getOperations();
  if (ops.size() != 2 || !llvm::all_of(ops, [](Operation &op) {
        return isa<ComputeOp>(op);
      }))
    return emitOpError("expects exactly two 'pp.compute' ops (an F, then a B "
                       "or BW)");
  auto f = cast<ComputeOp>(ops.front());
  auto b = cast<ComputeOp>(ops.back());
  if (f.getKind() != WorkKind::F)
    return emitOpError("expects its first member to be an F, got ")
           << stringifyWorkKind(f.getKind());
  if (b.getKind() != WorkKind::B && b.getKind() != WorkKind::BW)
    return emitOpError("expects its second member to be a B or BW, got ")
           << stringifyWorkKind(b.getKind());
  return success();
}

template <typename MsgOp> static LogicalResult verifyMessage(MsgOp op) {
  if (failed(verifyWork(op, op.getStage(), op.getMb(), op.getCopy())))
    return failure();
  if (op.getKind() == WorkKind::W)
    return op.emitOpError("cannot carry the output of a W (weight gradients "
                          "stay on their rank)");
  auto sched = op->template getParentOfType<ScheduleOp>();
  int64_t peer = op.getPeer();
  if (peer < 0 || peer >= sched.getNumRanks())
    return op.emitOpError("peer ") << peer << " out of range [0, "
                                   << sched.getNumRanks() << ")";
  if (RankProgramOp prog = enclosingProgram(op))
    if (prog.getRank() == peer)
      return op.emitOpError("peer ") << peer << " is the rank itself";
  return success();
}

LogicalResult SendOp::verify() { return verifyMessage(*this); }
LogicalResult RecvOp::verify() { return verifyMessage(*this); }

LogicalResult GradReduceOp::verify() {
  auto sched = getOperation()->getParentOfType<ScheduleOp>();
  if (!sched)
    return emitOpError("must be inside a 'pp.schedule'");
  int64_t peer = getPeer();
  if (peer < 0 || peer >= sched.getNumRanks())
    return emitOpError("peer ") << peer << " out of range [0, "
                                << sched.getNumRanks() << ")";
  if (RankProgramOp prog = enclosingProgram(*this))
    if (prog.getRank() == peer)
      return emitOpError("peer ") << peer << " is the rank itself";
  if (sched.getNumCopies() != 2)
    return emitOpError("needs a schedule with two model copies");
  return success();
}

#define GET_OP_CLASSES
#include "pipeforge/Dialect/PP/IR/PPOps.cpp.inc"
