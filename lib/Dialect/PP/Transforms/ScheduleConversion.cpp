//===- ScheduleConversion.cpp - pp.schedule <-> schedule library ----------===//

#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

static sched::WorkKind toLib(WorkKind k) {
  switch (k) {
  case WorkKind::F:
    return sched::WorkKind::F;
  case WorkKind::B:
    return sched::WorkKind::B;
  case WorkKind::W:
    return sched::WorkKind::W;
  case WorkKind::BW:
    return sched::WorkKind::BW;
  }
  return sched::WorkKind::F;
}

static WorkKind fromLib(sched::WorkKind k) {
  switch (k) {
  case sched::WorkKind::F:
    return WorkKind::F;
  case sched::WorkKind::B:
    return WorkKind::B;
  case sched::WorkKind::W:
    return WorkKind::W;
  case sched::WorkKind::BW:
    return WorkKind::BW;
  }
  return WorkKind::F;
}

template <typename OpT> static sched::Work workOf(OpT op) {
  sched::Work w;
  w.kind = toLib(op.getKind());
  w.stage = op.getStage();
  w.mb = op.getMb();
  w.copy = op.getCopy();
  return w;
}

static sched::Payload payloadOf(sched::WorkKind producer) {
  return producer == sched::WorkKind::F ? sched::Payload::Activation
                                        : sched::Payload::Gradient;
}

sched::Schedule pp::toLibrarySchedule(ScheduleOp op) {
  sched::Schedule s;
  s.name = op.getKind().str();
  s.numMicrobatches = op.getNumMicrobatches();
  sched::Placement &pl = s.placement;
  pl.numRanks = op.getNumRanks();
  pl.numStages = op.getNumStages();
  pl.numCopies = op.getNumCopies();
  pl.rankOf.assign(pl.numCopies, std::vector<int32_t>(pl.numStages));
  for (int c = 0; c < pl.numCopies; ++c)
    for (int st = 0; st < pl.numStages; ++st)
      pl.rankOf[c][st] = op.rankOf(c, st);

  s.programs.assign(pl.numRanks, {});
  for (auto prog : op.getBody().getOps<RankProgramOp>()) {
    auto &actions = s.programs[prog.getRank()];
    for (Operation &a : prog.getBody().front()) {
      if (auto c = dyn_cast<ComputeOp>(a)) {
        actions.push_back(sched::Action::compute(workOf(c)));
      } else if (auto o = dyn_cast<OverlapOp>(a)) {
        auto members = o.getBody().getOps<ComputeOp>();
        auto it = members.begin();
        sched::Work f = workOf(*it++);
        sched::Action act = sched::Action::overlap(f, workOf(*it));
        sched::PairComponentOrder order;
        // A fused pair (--pp-fuse-overlap): its compute components in
        // program order; the all-to-alls (pp.comm_start / pp.comm_wait) are
        // implied by the mlp components under expert parallelism.
        for (auto c : o.getBody().getOps<ComponentOp>()) {
          if (c.getComponent() != ComponentKind::attn &&
              c.getComponent() != ComponentKind::mlp)
            continue;
          sched::PairComponentStep p;
          p.member = c.getKind() == WorkKind::F   ? sched::PairComponentStep::F
                     : c.getKind() == WorkKind::W ? sched::PairComponentStep::W
                                                  : sched::PairComponentStep::B;
          p.kind = c.getComponent() == ComponentKind::attn
                       ? sched::PairComponentStep::Attn
                       : sched::PairComponentStep::Mlp;
          p.layer = int16_t(c.getLayer());
          order.push_back(p);
        }
        // Past 65,535 distinct orders the pair runs in the runtime's own
        // order (the same results; only the interleaving differs).
        if (sched::Status st = s.setPairOrder(act, std::move(order)); !st)
          o.emitWarning() << st.message()
                          << "; this pair runs in the runtime's own order";
        actions.push_back(std::move(act));
      } else if (auto snd = dyn_cast<SendOp>(a)) {
        sched::Work w = workOf(snd);
        actions.push_back(
            sched::Action::send(payloadOf(w.kind), w, snd.getPeer()));
        s.hasComm = true;
      } else if (isa<RecvPostOp>(a)) {
        // Posting never blocks; the wait is the library's Recv.
        continue;
      } else if (auto rw = dyn_cast<RecvWaitOp>(a)) {
        sched::Work w = workOf(rw);
        actions.push_back(
            sched::Action::recv(payloadOf(w.kind), w, rw.getPeer()));
        s.hasComm = true;
      } else if (auto rcv = dyn_cast<RecvOp>(a)) {
        sched::Work w = workOf(rcv);
        actions.push_back(
            sched::Action::recv(payloadOf(w.kind), w, rcv.getPeer()));
        s.hasComm = true;
      } else if (auto gr = dyn_cast<GradReduceOp>(a)) {
        actions.push_back(sched::Action::gradReduce(gr.getPeer()));
        s.hasComm = true;
      } else if (auto u = dyn_cast<UnshardOp>(a)) {
        actions.push_back(sched::Action::unshard(u.getStage(), u.getCopy()));
      } else if (auto rs = dyn_cast<ReshardOp>(a)) {
        actions.push_back(sched::Action::reshard(rs.getStage(), rs.getCopy()));
      } else if (auto of = dyn_cast<OffloadOp>(a)) {
        actions.push_back(sched::Action::offload(sched::Work(
            sched::WorkKind::F, of.getStage(), of.getMb(), of.getCopy())));
      } else if (auto rl = dyn_cast<ReloadOp>(a)) {
        actions.push_back(sched::Action::reload(sched::Work(
            sched::WorkKind::F, rl.getStage(), rl.getMb(), rl.getCopy())));
      }
    }
  }
  return s;
}

static void buildWork(OpBuilder &b, Location loc, const sched::Work &w) {
  ComputeOp::create(b, loc, fromLib(w.kind), w.stage, w.mb, w.copy);
}

static void buildProgram(OpBuilder &b, Location loc,
                         const std::vector<sched::Action> &actions) {
  for (const sched::Action &a : actions) {
    const sched::Work &w = a.work;
    switch (a.kind) {
    case sched::ActionKind::Compute:
      buildWork(b, loc, w);
      break;
    case sched::ActionKind::Overlap: {
      auto o = OverlapOp::create(b, loc, ArrayAttr(), ArrayAttr());
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&o.getBody().emplaceBlock());
      buildWork(b, loc, a.work);
      buildWork(b, loc, a.work2);
      break;
    }
    case sched::ActionKind::Send:
      SendOp::create(b, loc, fromLib(w.kind), w.stage, w.mb, w.copy, a.peer);
      break;
    case sched::ActionKind::Recv:
      RecvOp::create(b, loc, fromLib(w.kind), w.stage, w.mb, w.copy, a.peer);
      break;
    case sched::ActionKind::GradReduce:
      GradReduceOp::create(b, loc, a.peer);
      break;
    case sched::ActionKind::Unshard:
      UnshardOp::create(b, loc, w.stage, w.copy);
      break;
    case sched::ActionKind::Reshard:
      ReshardOp::create(b, loc, w.stage, w.copy);
      break;
    case sched::ActionKind::Offload:
      OffloadOp::create(b, loc, w.stage, w.mb, w.copy);
      break;
    case sched::ActionKind::Reload:
      ReloadOp::create(b, loc, w.stage, w.mb, w.copy);
      break;
    }
  }
}

static void buildPrograms(OpBuilder &b, Location loc,
                          const sched::Schedule &s) {
  for (int r = 0; r < s.numRanks(); ++r) {
    auto prog = RankProgramOp::create(b, loc, r);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&prog.getBody().emplaceBlock());
    buildProgram(b, loc, s.programs[r]);
  }
}

ScheduleOp pp::buildScheduleOp(OpBuilder &b, Location loc,
                               const sched::Schedule &s) {
  SmallVector<int32_t> placement;
  for (const auto &copy : s.placement.rankOf)
    placement.append(copy.begin(), copy.end());
  auto op = ScheduleOp::create(b, loc, s.name, s.numRanks(),
                               s.placement.numStages, s.numMicrobatches,
                               placement);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&op.getBody().emplaceBlock());
  buildPrograms(b, loc, s);
  return op;
}

void pp::replaceRankPrograms(ScheduleOp op, const sched::Schedule &s) {
  Block &body = op.getBody().front();
  Location loc = op.getLoc();
  while (!body.empty())
    body.back().erase();
  OpBuilder b = OpBuilder::atBlockEnd(&body);
  buildPrograms(b, loc, s);
}

Operation *pp::actionOp(ScheduleOp op, int rank, size_t step) {
  for (auto prog : op.getBody().getOps<RankProgramOp>()) {
    if ((int)prog.getRank() != rank)
      continue;
    size_t i = 0;
    for (Operation &a : prog.getBody().front())
      if (!isa<RecvPostOp>(a) && i++ == step)
        return &a;
  }
  return nullptr;
}

sched::CostModel pp::makeCostModel(const sched::Schedule &s, double tf,
                                   double tb, double tw, double tfb,
                                   double tcomm, double memW) {
  sched::CostModel cost;
  cost.tf = tf;
  cost.tb = tb;
  cost.tw = tw;
  cost.tfb = tfb;
  cost.tcomm = tcomm;
  cost.memB = double(s.numRanks()) / s.placement.numStages;
  cost.memW = cost.memB * memW;
  return cost;
}

void pp::insertLibraryActions(
    ScheduleOp op, const sched::Schedule &s,
    llvm::function_ref<bool(const sched::Action &)> added,
    llvm::function_ref<void(OpBuilder &, const sched::Action &)> create) {
  for (auto prog : op.getBody().getOps<RankProgramOp>()) {
    // The library's actions are the program's ops less pp.recv_post; the
    // new list is the old one with the added actions between.
    SmallVector<Operation *> ops;
    for (Operation &a : prog.getBody().front())
      if (!isa<RecvPostOp>(a))
        ops.push_back(&a);
    OpBuilder b = OpBuilder::atBlockBegin(&prog.getBody().front());
    size_t next = 0;
    for (const sched::Action &a : s.programs[prog.getRank()]) {
      if (!added(a)) {
        b.setInsertionPointAfter(ops[next++]);
        continue;
      }
      create(b, a);
    }
  }
}
