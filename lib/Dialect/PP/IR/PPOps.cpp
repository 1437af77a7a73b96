//===- PPOps.cpp - pp dialect op verifiers --------------------------------===//
//
// Local structure only: ranges, uniqueness, placement. Whole-schedule
// semantics (each work exactly once, dependencies, matched messages, no
// deadlock) are checked by --pp-verify-schedule through the schedule library.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Schedule/Action.h"

#include "llvm/ADT/DenseSet.h"

#include <map>
#include <tuple>

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
  if (stages > pipeforge::sched::kMaxStages)
    return emitOpError("supports at most ")
           << pipeforge::sched::kMaxStages << " stages, got " << stages;
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
  // Split receives: every wait after its post, every post waited for.
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t>;
  auto keyOf = [](auto m) {
    return Key{(int)m.getKind(), (int64_t)m.getStage(), (int64_t)m.getMb(),
               (int64_t)m.getCopy(), (int64_t)m.getPeer()};
  };
  std::map<Key, Operation *> posted;
  for (Operation &op : getBody().front()) {
    if (!isa<ComputeOp, OverlapOp, SendOp, RecvOp, RecvPostOp, RecvWaitOp,
             GradReduceOp, UnshardOp, ReshardOp, OffloadOp, ReloadOp>(op))
      return op.emitOpError("is not a schedule action");
    if (auto post = dyn_cast<RecvPostOp>(op)) {
      if (!posted.emplace(keyOf(post), &op).second)
        return op.emitOpError("posts a receive that is already posted");
    } else if (auto wait = dyn_cast<RecvWaitOp>(op)) {
      if (!posted.erase(keyOf(wait)))
        return op.emitOpError("waits for a receive that was not posted "
                              "before it");
    }
  }
  if (!posted.empty())
    return posted.begin()->second->emitOpError(
        "posts a receive that no later 'pp.recv_wait' waits for");
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
  if (ops.size() < 2 || !isa<ComputeOp>(ops.front()) ||
      !isa<ComputeOp>(*std::next(ops.begin())) ||
      llvm::any_of(llvm::drop_begin(ops, 2),
                   [](Operation &op) { return isa<ComputeOp>(op); }))
    return emitOpError("expects exactly two 'pp.compute' ops (an F, then a B "
                       "or BW)");
  auto f = cast<ComputeOp>(ops.front());
  auto b = cast<ComputeOp>(*std::next(ops.begin()));
  if (f.getKind() != WorkKind::F)
    return emitOpError("expects its first member to be an F, got ")
           << stringifyWorkKind(f.getKind());
  if (b.getKind() != WorkKind::B && b.getKind() != WorkKind::BW)
    return emitOpError("expects its second member to be a B or BW, got ")
           << stringifyWorkKind(b.getKind());
  return verifyComponentProgram(*this);
}

//===----------------------------------------------------------------------===//
// Fused pairs: the component program
//===----------------------------------------------------------------------===//

static bool isCommComponent(ComponentKind c) {
  return c == ComponentKind::dispatch || c == ComponentKind::combine;
}

template <typename OpT> static LogicalResult verifyComponentFields(OpT op) {
  if (op.getKind() == WorkKind::BW)
    return op.emitOpError("names a member part F, B or W, not BW");
  bool comm = isCommComponent(op.getComponent());
  if (isa<ComponentOp>(op.getOperation()) && comm)
    return op.emitOpError("runs compute components (attn, mlp); '")
           << stringifyComponentKind(op.getComponent())
           << "' is an all-to-all: use pp.comm_start / pp.comm_wait";
  if (!isa<ComponentOp>(op.getOperation()) && !comm)
    return op.emitOpError("expects an all-to-all component (dispatch, "
                          "combine), got '")
           << stringifyComponentKind(op.getComponent()) << "'";
  if (!isa<ComponentOp>(op.getOperation()) && op.getKind() == WorkKind::W)
    return op.emitOpError("W has no all-to-all (weight gradients stay "
                          "local)");
  return success();
}

LogicalResult ComponentOp::verify() { return verifyComponentFields(*this); }
LogicalResult CommStartOp::verify() { return verifyComponentFields(*this); }
LogicalResult CommWaitOp::verify() { return verifyComponentFields(*this); }

namespace {
/// One event of a component program: a compute component, or the start or
/// wait of an all-to-all, of one member part (F, B or W).
struct Event {
  enum Kind { Compute, Start, Wait } what;
  WorkKind part;
  ComponentKind comp;
  int64_t layer;
  auto tie() const { return std::make_tuple((int)what, (int)part, (int)comp, layer); }
  bool operator<(const Event &o) const { return tie() < o.tie(); }
  bool operator==(const Event &o) const { return tie() == o.tie(); }
};
} // namespace

static std::string describe(const Event &e) {
  std::string s = e.what == Event::Compute ? "pp.component "
                  : e.what == Event::Start ? "pp.comm_start "
                                           : "pp.comm_wait ";
  s += stringifyWorkKind(e.part).str() + " " +
       stringifyComponentKind(e.comp).str() + " layer " +
       std::to_string(e.layer);
  return s;
}

/// Parses `f_layers` / `b_layers`: one array of component names per layer.
static FailureOr<std::vector<std::vector<ComponentKind>>>
parseLayers(OverlapOp op, ArrayAttr attr, StringRef name) {
  std::vector<std::vector<ComponentKind>> layers;
  if (!attr) {
    op.emitOpError("has a component program but no '") << name << "'";
    return failure();
  }
  for (Attribute l : attr) {
    auto arr = dyn_cast<ArrayAttr>(l);
    if (!arr) {
      op.emitOpError("'") << name << "' must list an array of component "
                          << "names per layer";
      return failure();
    }
    auto &out = layers.emplace_back();
    for (Attribute c : arr) {
      auto str = dyn_cast<StringAttr>(c);
      std::optional<ComponentKind> k =
          str ? symbolizeComponentKind(str.getValue()) : std::nullopt;
      if (!k) {
        op.emitOpError("'") << name << "' names an unknown component " << c;
        return failure();
      }
      out.push_back(*k);
    }
  }
  return layers;
}

static void appendComponent(std::vector<Event> &seq, WorkKind part,
                            ComponentKind c, int64_t layer) {
  if (isCommComponent(c)) {
    seq.push_back({Event::Start, part, c, layer});
    seq.push_back({Event::Wait, part, c, layer});
  } else {
    seq.push_back({Event::Compute, part, c, layer});
  }
}

LogicalResult pipeforge::pp::verifyComponentProgram(OverlapOp op) {
  if (!op.isFused())
    return success();
  auto &ops = op.getBody().front().getOperations();
  auto bMember = cast<ComputeOp>(*std::next(ops.begin()));
  bool hasW = bMember.getKind() == WorkKind::BW;
  auto fl = parseLayers(op, op.getFLayersAttr(), "f_layers");
  if (failed(fl))
    return failure();
  auto bl = parseLayers(op, op.getBLayersAttr(), "b_layers");
  if (failed(bl))
    return failure();

  // The expected event sequence of each member part.
  std::vector<Event> fSeq, bSeq, wSet;
  for (int64_t l = 0; l < (int64_t)fl->size(); ++l)
    for (ComponentKind c : (*fl)[l])
      appendComponent(fSeq, WorkKind::F, c, l);
  for (int64_t l = (int64_t)bl->size() - 1; l >= 0; --l)
    for (ComponentKind c : llvm::reverse((*bl)[l])) {
      appendComponent(bSeq, WorkKind::B, c, l);
      if (hasW && !isCommComponent(c))
        wSet.push_back({Event::Compute, WorkKind::W, c, l});
    }
  std::map<Event, int> expected;
  for (auto *seq : {&fSeq, &bSeq, &wSet})
    for (const Event &e : *seq)
      expected[e] = 0;

  // The program's events, with their ops.
  std::vector<std::pair<Event, Operation *>> prog;
  std::map<Event, size_t> firstAt;
  for (Operation &o : llvm::drop_begin(ops, 2)) {
    Event e;
    if (auto c = dyn_cast<ComponentOp>(o))
      e = {Event::Compute, c.getKind(), c.getComponent(), (int64_t)c.getLayer()};
    else if (auto s = dyn_cast<CommStartOp>(o))
      e = {Event::Start, s.getKind(), s.getComponent(), (int64_t)s.getLayer()};
    else if (auto w = dyn_cast<CommWaitOp>(o))
      e = {Event::Wait, w.getKind(), w.getComponent(), (int64_t)w.getLayer()};
    else
      return o.emitOpError("is not allowed in a fused 'pp.overlap' (only "
                           "pp.component, pp.comm_start, pp.comm_wait after "
                           "the two members)");
    if (e.part == WorkKind::W && !hasW)
      return o.emitOpError("runs a W component, but the backward member is "
                           "a B (its W runs later)");
    auto it = expected.find(e);
    if (it == expected.end())
      return o.emitOpError("is not a component of the pair: ")
             << "layer " << e.layer << " of the "
             << (e.part == WorkKind::F ? "F" : "backward")
             << " member's stage has no " << stringifyComponentKind(e.comp)
             << (e.what == Event::Compute ? "" : " all-to-all")
             << " (see f_layers / b_layers)";
    if (++it->second > 1)
      return o.emitOpError("duplicates ") << describe(e);
    firstAt[e] = prog.size();
    prog.push_back({e, &o});
  }
  // Waits before their start, starts without a wait.
  for (auto &[e, o] : prog) {
    if (e.what != Event::Wait)
      continue;
    Event s = e;
    s.what = Event::Start;
    if (!expected[s] || firstAt[s] > firstAt[e])
      return o->emitOpError("waits before its ") << describe(s);
  }
  for (auto &[e, o] : prog) {
    if (e.what != Event::Start)
      continue;
    Event w = e;
    w.what = Event::Wait;
    if (!expected[w])
      return o->emitOpError("is never waited for: no later ") << describe(w);
  }
  for (auto &[e, n] : expected)
    if (n == 0)
      return op.emitOpError("component program misses ") << describe(e);
  // Dependency order: each member part's events in its sequence's order.
  for (auto *seq : {&fSeq, &bSeq}) {
    if (seq->empty())
      continue;
    size_t next = 0;
    for (auto &[e, o] : prog) {
      if (e.part != (*seq)[0].part)
        continue;
      if (!(e == (*seq)[next]))
        return o->emitOpError("is out of dependency order: the ")
               << ((*seq)[0].part == WorkKind::F ? "F member runs its layers "
                                                   "in order"
                                                 : "backward member runs its "
                                                   "layers in reverse order")
               << ", so " << describe((*seq)[next]) << " comes first";
      ++next;
    }
  }
  for (const Event &w : wSet) {
    Event b = w;
    b.part = WorkKind::B;
    if (firstAt[w] < firstAt[b])
      return prog[firstAt[w]].second->emitOpError("runs before its ")
             << describe(b);
  }
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
LogicalResult RecvPostOp::verify() { return verifyMessage(*this); }
LogicalResult RecvWaitOp::verify() { return verifyMessage(*this); }

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

/// pp.unshard / pp.reshard: the stage and copy exist and the stage is
/// placed on the enclosing rank (a rank gathers only what it computes).
template <typename OpT> static LogicalResult verifyParamGather(OpT op) {
  auto sched = op->template getParentOfType<ScheduleOp>();
  if (!sched)
    return op.emitOpError("must be inside a 'pp.schedule'");
  int64_t stage = op.getStage(), copy = op.getCopy();
  if (stage < 0 || stage >= sched.getNumStages())
    return op.emitOpError("stage ")
           << stage << " out of range [0, " << sched.getNumStages() << ")";
  if (copy < 0 || copy >= sched.getNumCopies())
    return op.emitOpError("copy ")
           << copy << " out of range: the schedule has " << sched.getNumCopies()
           << " model cop" << (sched.getNumCopies() == 1 ? "y" : "ies");
  if (RankProgramOp prog = enclosingProgram(op))
    if (int64_t(sched.rankOf(copy, stage)) != int64_t(prog.getRank()))
      return op.emitOpError("stage ")
             << stage << (copy ? " of copy 1" : "") << " is placed on rank "
             << sched.rankOf(copy, stage) << ", not on rank "
             << prog.getRank() << ": a rank gathers only the parameters of "
             << "stages it computes";
  return success();
}

LogicalResult UnshardOp::verify() { return verifyParamGather(*this); }
LogicalResult ReshardOp::verify() { return verifyParamGather(*this); }

/// pp.offload / pp.reload: the stash's F exists and its stage is placed on
/// the enclosing rank (a stash stays on the rank that made it). Where they
/// stand against the F and its B is --pp-verify-schedule's check.
template <typename OpT> static LogicalResult verifyStashCopy(OpT op) {
  if (failed(verifyWork(op, op.getStage(), op.getMb(), op.getCopy())))
    return failure();
  auto sched = op->template getParentOfType<ScheduleOp>();
  if (RankProgramOp prog = enclosingProgram(op))
    if (sched.rankOf(op.getCopy(), op.getStage()) != prog.getRank())
      return op.emitOpError("stage ")
             << op.getStage() << (op.getCopy() ? " of copy 1" : "")
             << " is placed on rank "
             << sched.rankOf(op.getCopy(), op.getStage()) << ", not on rank "
             << prog.getRank() << ": a stash moves only on the rank that "
             << "made it";
  return success();
}

LogicalResult OffloadOp::verify() { return verifyStashCopy(*this); }
LogicalResult ReloadOp::verify() { return verifyStashCopy(*this); }

#define GET_OP_CLASSES
#include "pipeforge/Dialect/PP/IR/PPOps.cpp.inc"
