//===- FuseOverlapPass.cpp - --pp-fuse-overlap ----------------------------===//
//
// Expands each overlapped F&B pair into an interleaved component program and
// splits every receive into an early post and a late wait.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Schedule/PairOrder.h"
#include "pipeforge/Schedule/Verify.h"
#include "pipeforge/Support/AttrNames.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"

#include <map>

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPFUSEOVERLAP
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

namespace {
using Layers = std::vector<std::vector<ComponentKind>>;
struct Step {
  ComponentKind comp;
  WorkKind part; // F, B or W
};

static const char *kDeepSeekOrder =
    "combine:B,attn:F,mlp:B,dispatch:F,dispatch:B,mlp:W,mlp:F,attn:B,attn:W,"
    "combine:F";

static bool isComm(ComponentKind c) {
  return c == ComponentKind::dispatch || c == ComponentKind::combine;
}

static FailureOr<std::vector<Step>> parseOrder(StringRef text, Operation *at) {
  std::vector<Step> steps;
  SmallVector<StringRef> items;
  text.split(items, ',', -1, false);
  for (StringRef item : items) {
    auto [c, p] = item.trim().split(':');
    auto comp = symbolizeComponentKind(c.trim());
    auto part = symbolizeWorkKind(p.trim());
    if (!comp || !part || *part == WorkKind::BW ||
        (*part == WorkKind::W && isComm(*comp))) {
      at->emitError() << "order: bad entry '" << item
                      << "' (expected <attn|dispatch|mlp|combine>:<F|B|W>, "
                         "W only with attn or mlp)";
      return failure();
    }
    steps.push_back({*comp, *part});
  }
  return steps;
}

static ArrayAttr layersAttr(MLIRContext *ctx, const Layers &layers) {
  SmallVector<Attribute> out;
  for (const auto &l : layers) {
    SmallVector<Attribute> names;
    for (ComponentKind c : l)
      names.push_back(StringAttr::get(ctx, stringifyComponentKind(c)));
    out.push_back(ArrayAttr::get(ctx, names));
  }
  return ArrayAttr::get(ctx, out);
}

/// Builds the component program of one pair at the end of its body.
class ProgramBuilder {
public:
  ProgramBuilder(OpBuilder &b, Location loc, const Layers &fl, const Layers &bl,
                 bool hasW)
      : b(b), loc(loc), fl(fl), bl(bl), hasW(hasW) {}

  /// Emits everything; returns the number of all-to-alls with no compute of
  /// the other member between their start and wait (exposed).
  int build(ArrayRef<Step> order) {
    int64_t steps = std::max(fl.size(), bl.size());
    for (int64_t k = 0; k < steps; ++k) {
      int64_t fLayer = k < (int64_t)fl.size() ? k : -1;
      int64_t bLayer = (int64_t)bl.size() - 1 - k;
      std::vector<ComponentKind> fSeq, bSeq;
      if (fLayer >= 0)
        fSeq = fl[fLayer];
      if (bLayer >= 0)
        bSeq.assign(bl[bLayer].rbegin(), bl[bLayer].rend());
      size_t fDone = 0, bDone = 0;
      std::vector<ComponentKind> wDone;
      auto runW = [&](ComponentKind c) {
        if (!hasW || bLayer < 0 || isComm(c) ||
            llvm::is_contained(wDone, c))
          return;
        // Its B first.
        auto it = llvm::find(bSeq, c);
        if (it == bSeq.end())
          return;
        advance(WorkKind::B, bSeq, bDone, it - bSeq.begin() + 1, bLayer);
        emit(WorkKind::W, c, bLayer);
        wDone.push_back(c);
      };
      for (const Step &s : order) {
        if (s.part == WorkKind::W) {
          runW(s.comp);
          continue;
        }
        auto &seq = s.part == WorkKind::F ? fSeq : bSeq;
        size_t &done = s.part == WorkKind::F ? fDone : bDone;
        auto it = llvm::find(seq, s.comp);
        if (it == seq.end())
          continue;
        advance(s.part, seq, done, it - seq.begin() + 1,
                s.part == WorkKind::F ? fLayer : bLayer);
      }
      // Whatever the order did not name.
      advance(WorkKind::F, fSeq, fDone, fSeq.size(), fLayer);
      advance(WorkKind::B, bSeq, bDone, bSeq.size(), bLayer);
      for (ComponentKind c : bSeq)
        runW(c);
    }
    flush(WorkKind::F);
    flush(WorkKind::B);
    return exposed;
  }

private:
  /// Runs `seq[done, upto)` of member part `part`.
  void advance(WorkKind part, const std::vector<ComponentKind> &seq,
               size_t &done, size_t upto, int64_t layer) {
    for (; done < upto; ++done) {
      ComponentKind c = seq[done];
      flush(part); // what this one needs from the previous all-to-all
      if (isComm(c)) {
        CommStartOp::create(b, loc, part, c, layer);
        pending.push_back({part, c, layer, computeCount(otherOf(part))});
      } else {
        emit(part, c, layer);
      }
    }
  }
  void emit(WorkKind part, ComponentKind c, int64_t layer) {
    ComponentOp::create(b, loc, part, c, layer);
    ++computes[part == WorkKind::F ? 0 : 1];
  }
  static WorkKind otherOf(WorkKind p) {
    return p == WorkKind::F ? WorkKind::B : WorkKind::F;
  }
  int computeCount(WorkKind p) { return computes[p == WorkKind::F ? 0 : 1]; }
  void flush(WorkKind part) {
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->part != part) {
        ++it;
        continue;
      }
      CommWaitOp::create(b, loc, it->part, it->comp, it->layer);
      if (computeCount(otherOf(part)) == it->otherComputesAtStart)
        ++exposed;
      it = pending.erase(it);
    }
  }

  struct Pending {
    WorkKind part;
    ComponentKind comp;
    int64_t layer;
    int otherComputesAtStart;
  };
  OpBuilder &b;
  Location loc;
  const Layers &fl, &bl;
  bool hasW;
  std::vector<Pending> pending;
  int computes[2] = {0, 0}; // F member; backward member (B and W)
  int exposed = 0;
};

/// The consumer of a received message: F(s+1) for the activation of F(s),
/// B/BW(s-1) for the gradient of B/BW(s).
static bool consumes(ComputeOp c, RecvWaitOp m) {
  if (c.getMb() != m.getMb() || c.getCopy() != m.getCopy())
    return false;
  if (m.getKind() == WorkKind::F)
    return c.getKind() == WorkKind::F && c.getStage() == m.getStage() + 1;
  return (c.getKind() == WorkKind::B || c.getKind() == WorkKind::BW) &&
         c.getStage() + 1 == m.getStage();
}
static bool consumes(Operation *op, RecvWaitOp m) {
  if (auto c = dyn_cast<ComputeOp>(op))
    return consumes(c, m);
  if (auto o = dyn_cast<OverlapOp>(op))
    return llvm::any_of(o.getBody().getOps<ComputeOp>(),
                        [&](ComputeOp c) { return consumes(c, m); });
  return false;
}
static bool sameChannel(RecvWaitOp a, RecvWaitOp b) {
  return a.getPeer() == b.getPeer() &&
         (a.getKind() == WorkKind::F) == (b.getKind() == WorkKind::F);
}

struct FuseOverlapPass : public pp::impl::PPFuseOverlapBase<FuseOverlapPass> {
  using PPFuseOverlapBase::PPFuseOverlapBase;

  /// Component lists per (copy, stage) from the pipeline, if it has them.
  std::map<std::pair<int, int>, Layers> stageLayers(ScheduleOp sched) {
    std::map<std::pair<int, int>, Layers> out;
    for (PipelineOp p : getOperation().getOps<PipelineOp>()) {
      if (p.getNumStages() != sched.getNumStages() ||
          p.getNumRanks() != sched.getNumRanks())
        continue;
      for (StageOp st : p.getBody().getOps<StageOp>()) {
        auto attr = st->getAttrOfType<ArrayAttr>(attrs::kPPComponents);
        if (!attr)
          continue;
        Layers layers;
        for (Attribute l : attr) {
          auto &out = layers.emplace_back();
          for (Attribute c : cast<ArrayAttr>(l))
            if (auto k = symbolizeComponentKind(cast<StringAttr>(c).getValue()))
              out.push_back(*k);
        }
        out[{(int)st.getCopy(), (int)st.getIndex()}] = std::move(layers);
      }
    }
    return out;
  }

  void splitReceives(RankProgramOp prog) {
    Block &body = prog.getBody().front();
    OpBuilder b(prog.getContext());
    for (RecvOp r : llvm::make_early_inc_range(body.getOps<RecvOp>())) {
      b.setInsertionPoint(r);
      auto wait = RecvWaitOp::create(b, r.getLoc(), r.getKind(), r.getStage(),
                                     r.getMb(), r.getCopy(), r.getPeer());
      r.erase();
      // Sink past compute to just before the consumer, never past a message.
      Operation *stop = wait->getNextNode();
      while (stop && isa<ComputeOp, OverlapOp, RecvPostOp>(stop) &&
             !consumes(stop, wait))
        stop = stop->getNextNode();
      if (stop)
        wait->moveBefore(stop);
      else
        wait->moveBefore(&body, body.end());
    }
    // Post each receive right after the previous wait of its channel.
    for (RecvWaitOp w : llvm::to_vector(body.getOps<RecvWaitOp>())) {
      Operation *anchor = nullptr;
      for (Operation *p = w->getPrevNode(); p; p = p->getPrevNode())
        if (auto pw = dyn_cast<RecvWaitOp>(p); pw && sameChannel(pw, w)) {
          anchor = p;
          break;
        }
      if (anchor)
        b.setInsertionPointAfter(anchor);
      else
        b.setInsertionPointToStart(&body);
      RecvPostOp::create(b, w.getLoc(), w.getKind(), w.getStage(), w.getMb(),
                         w.getCopy(), w.getPeer());
    }
  }

  /// search=true: the fastest per-layer order of pair `o` under the
  /// simulator's communication model; records pp.order and pp.predicted.
  LogicalResult searchOrder(OverlapOp o, const Layers &fl, const Layers &bl,
                            bool full, std::vector<Step> &out) {
    // A stage is MoE (its layers each with a dispatch and a combine) when
    // any of its layers has an all-to-all; stage 0 = F, 1 = backward.
    auto moeLayers = [](const Layers &ls) {
      for (const auto &l : ls)
        if (llvm::any_of(l, isComm))
          return (int)ls.size();
      return 0;
    };
    sched::CostModel c;
    c.tf = tf;
    c.tb = tb;
    c.tw = tw;
    c.tA2A = ta2a;
    c.attnShare = attnShare;
    c.overlapComm = true;
    c.moeLayersStage = {moeLayers(fl), moeLayers(bl)};
    double fused = 0;
    std::vector<sched::PairStep> best =
        sched::searchPairOrder(c, 0, 1, full, &fused);
    double def =
        sched::fusedPairTime(c, 0, 1, full, sched::deepSeekPairOrder());
    double serial = sched::serialPairTime(c, 0, 1, full);
    std::string text = sched::pairOrderToString(best);
    auto steps = parseOrder(text, o);
    if (failed(steps))
      return failure();
    out = std::move(*steps);
    MLIRContext *ctx = o.getContext();
    Builder b(ctx);
    o->setAttr(attrs::kPPOrder, b.getStringAttr(text));
    o->setAttr(attrs::kPPPredicted,
               b.getDictionaryAttr(
                   {b.getNamedAttr("default", b.getF64FloatAttr(def)),
                    b.getNamedAttr("fused", b.getF64FloatAttr(fused)),
                    b.getNamedAttr("unfused", b.getF64FloatAttr(serial))}));
    return success();
  }

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    if (search && !order.empty()) {
      getOperation().emitError("order and search are exclusive");
      return signalPassFailure();
    }
    if (search && (ta2a < 0 || tf < 0 || tb < 0 || tw < 0 ||
                   attnShare < 0 || attnShare > 1)) {
      getOperation().emitError(
          "search: times must be >= 0 and attn-share in [0, 1]");
      return signalPassFailure();
    }
    auto ord = parseOrder(order.empty() ? StringRef(kDeepSeekOrder)
                                        : StringRef(order),
                          getOperation());
    if (failed(ord))
      return signalPassFailure();
    if (layers < 1) {
      getOperation().emitError("layers must be >= 1");
      return signalPassFailure();
    }
    Layers fallback(layers, moe ? std::vector<ComponentKind>{
                                      ComponentKind::attn,
                                      ComponentKind::dispatch,
                                      ComponentKind::mlp,
                                      ComponentKind::combine}
                                : std::vector<ComponentKind>{
                                      ComponentKind::attn,
                                      ComponentKind::mlp});
    for (ScheduleOp sched : getOperation().getOps<ScheduleOp>()) {
      auto known = stageLayers(sched);
      auto layersOf = [&](ComputeOp c) -> const Layers & {
        auto it = known.find({(int)c.getCopy(), (int)c.getStage()});
        return it == known.end() ? fallback : it->second;
      };
      for (RankProgramOp prog : sched.getBody().getOps<RankProgramOp>()) {
        for (OverlapOp o : prog.getBody().getOps<OverlapOp>()) {
          if (o.isFused())
            continue;
          auto members = llvm::to_vector(o.getBody().getOps<ComputeOp>());
          const Layers &fl = layersOf(members[0]);
          const Layers &bl = layersOf(members[1]);
          o.setFLayersAttr(layersAttr(ctx, fl));
          o.setBLayersAttr(layersAttr(ctx, bl));
          bool full = members[1].getKind() == WorkKind::BW;
          std::vector<Step> chosen = *ord;
          if (search && failed(searchOrder(o, fl, bl, full, chosen)))
            return signalPassFailure();
          OpBuilder b = OpBuilder::atBlockEnd(&o.getBody().front());
          ProgramBuilder pb(b, o.getLoc(), fl, bl, full);
          int exposed = pb.build(chosen);
          o->setAttr(attrs::kPPExposedComm,
                     IntegerAttr::get(IntegerType::get(ctx, 64), exposed));
        }
        if (asyncP2P)
          splitReceives(prog);
      }
      // The pass's own check: the op verifiers (component programs, post /
      // wait pairing) and the library's (completeness, dependencies,
      // deadlock), which sees each fused pair as its Overlap action.
      if (failed(mlir::verify(sched)))
        return signalPassFailure();
      sched::Schedule s = toLibrarySchedule(sched);
      sched::VerifyOptions opts;
      opts.cost = makeCostModel(s, 1, 1, 1, -1, 0, 0.5);
      if (sched::Status st = sched::verify(s, opts); !st) {
        Operation *at = st.rank() >= 0 && st.step() >= 0
                            ? actionOp(sched, st.rank(), st.step())
                            : nullptr;
        (at ? at : sched.getOperation())->emitError()
            << "fused schedule is invalid: " << st.message();
        return signalPassFailure();
      }
    }
  }
};
} // namespace
