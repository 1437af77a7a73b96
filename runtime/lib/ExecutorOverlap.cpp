//===- ExecutorOverlap.cpp - Overlapped F&B pairs ------------------------===//
//
// An Overlap action: F of one microbatch and the backward of another, one
// trace event. With component ranges in the program (and fuseOverlap) the
// two run interleaved, each one's all-to-alls in flight while the other
// computes (docs/runtime.md, "Fused overlap"); the same bits as F then B.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include <algorithm>
#include <cstdio>

namespace pipeforge::rt {

Status Executor::Impl::doOverlap(const Action &a, bool &fusedRun) {
  fusedRun = false;
  const Work *wf = a.work.kind == WorkKind::F    ? &a.work
                   : a.work2.kind == WorkKind::F ? &a.work2
                                                 : nullptr;
  const Work *wb = wf == &a.work ? &a.work2 : &a.work;
  bool ok = opts.fuseOverlap && wf &&
            (wb->kind == WorkKind::B || wb->kind == WorkKind::BW);
  for (const Work *w : {&a.work, &a.work2})
    if (w->copy < 0 || w->copy >= prog.schedule.placement.numCopies ||
        w->stage < 0 || w->stage >= numStages ||
        rankOf(w->copy, w->stage) != prank)
      ok = false; // compute() reports it
  int bWhich = 1;
  if (ok) {
    const Stage &sf = stageOf(wf->copy, wf->stage);
    const Stage &sb = stageOf(wb->copy, wb->stage);
    bWhich = wb->kind == WorkKind::BW && !sb.backward.empty() ? 3 : 1;
    ok = !sf.forward.components.empty() &&
         !stageFunction(sb, bWhich == 3 ? FunctionKind::Backward
                                        : FunctionKind::BackwardInput)
              .components.empty();
  }
  if (!ok) {
    if (Status s = compute(a.work); !s)
      return s;
    return compute(a.work2);
  }
  fusedRun = true;
  const Stage &sf = stageOf(wf->copy, wf->stage);
  const Stage &sb = stageOf(wb->copy, wb->stage);
  Key kb{wb->copy, wb->stage, wb->mb};
  if (Status s = ensureResident(kb); !s) // activation offload
    return s;
  std::vector<BufP> fStash, bWs;
  BufP fAct, fNone, bAct, bGout;
  FnRun rf, rb;
  rf.st = &sf;
  rf.which = 0;
  rf.c = wf->copy;
  rf.mb = wf->mb;
  rf.stashOut = &fStash;
  rf.actOut = &fAct;
  rf.gradOut = &fNone;
  rf.label = sched::toString(*wf);
  if (Status s = fnBegin(rf); !s)
    return s;
  auto g = gradInFor(*wb);
  if (!g)
    return g.status();
  BufP gin = *g;
  rb.st = &sb;
  rb.which = bWhich;
  rb.c = wb->copy;
  rb.mb = wb->mb;
  rb.stashIn = &stash[kb];
  rb.gradIn = gin->f();
  rb.wstashOut = &bWs;
  rb.actOut = &bAct;
  rb.gradOut = &bGout;
  rb.label = sched::toString(*wb);
  if (Status s = fnBegin(rb); !s)
    return s;
  // One trace event per contiguous run of one member's component.
  auto compOf = [](const FnRun &r) {
    const auto &cs = r.fn->components;
    for (size_t i = 0; i < cs.size(); ++i)
      if (int32_t(r.next) >= cs[i].begin && int32_t(r.next) < cs[i].end)
        return int(i);
    return -1;
  };
  const FnRun *segR = nullptr;
  int segC = -1;
  double segT0 = 0;
  auto closeSeg = [&](double t) {
    if (!segR || !opts.trace)
      return;
    std::string n = segR->label;
    if (segC >= 0) {
      const ComponentRange &cr = segR->fn->components[size_t(segC)];
      n += " " + cr.kind + " L" + std::to_string(cr.layer);
    }
    record(n, 0, segT0, t, "\"component\":1", "component");
  };
  bool poll = !tr.asyncProgress();
  // One step of r (trace segment bookkeeping, polling).
  auto stepOnce = [&](FnRun &r, bool &posted) -> Status {
    int ci = compOf(r);
    if (&r != segR || ci != segC) {
      double t = nowS();
      closeSeg(t);
      segR = &r;
      segC = ci;
      segT0 = t;
    }
    if (Status s = fnStep(r, posted); !s)
      return s;
    if (poll)
      tr.progress();
    return Status::ok();
  };
  if (const sched::PairComponentOrder *order = prog.schedule.pairOrderOf(a)) {
    // The compiled order (Schedule::pairOrderOf, from the pp.component ops of
    // the fused pp.overlap). A step (member, kind, layer) runs that
    // member's kernels up to the end of the component's kernel range in
    // the member's function (a member's kernels always run in its own
    // order: whatever of it comes before the range runs first). A step
    // ends early when the member has posted the last all-to-all of the
    // component's last (moe) kernel: that all-to-all stays in flight across
    // the component boundary (the IR's pp.comm_start ... pp.comm_wait) and
    // is waited for when the member runs next. Other all-to-alls inside a
    // component are waited for within it. W steps: the runtime's BW
    // function has no separate W ranges (W is inside the B components), so
    // they are no-ops after their B. Steps naming a range the function
    // lacks are skipped. Whatever is left runs at the end, F first. The
    // switch points depend only on the program.
    auto rangeOf =
        [](const FnRun &r,
           const sched::PairComponentStep &p) -> const ComponentRange * {
      const char *k = p.kind == sched::PairComponentStep::Attn ? "attn" : "mlp";
      for (const ComponentRange &cr : r.fn->components)
        if (cr.kind == k && cr.layer == p.layer)
          return &cr;
      return nullptr;
    };
    for (const sched::PairComponentStep &p : *order) {
      if (p.member == sched::PairComponentStep::W)
        continue;
      FnRun &r = p.member == sched::PairComponentStep::F ? rf : rb;
      const ComponentRange *cr = rangeOf(r, p);
      if (!cr)
        continue;
      size_t end = size_t(std::max<int32_t>(cr->end, 0));
      while (!r.done() && r.next < end) {
        bool inRange = r.next >= size_t(std::max<int32_t>(cr->begin, 0));
        bool posted = false;
        if (Status s = stepOnce(r, posted); !s)
          return s;
        if (posted && inRange && r.next + 1 == end && r.moe &&
            r.moe->phasesLeft() == 1)
          break;
      }
    }
    for (FnRun *r : {&rf, &rb})
      while (!r->done()) {
        bool posted = false;
        if (Status s = stepOnce(*r, posted); !s)
          return s;
      }
  } else {
    // Without expert parallelism nothing is posted: F then B.
    FnRun *cur = E > 1 ? &rb : &rf, *oth = E > 1 ? &rf : &rb;
    while (!rf.done() || !rb.done()) {
      if (cur->done())
        std::swap(cur, oth);
      bool posted = false;
      if (Status s = stepOnce(*cur, posted); !s)
        return s;
      if (posted && !oth->done())
        std::swap(cur, oth);
    }
  }
  closeSeg(nowS());
  if (Status s = fnResults(rf); !s)
    return s;
  if (Status s = finishF(*wf, fStash, fAct); !s)
    return s;
  if (Status s = fnResults(rb); !s)
    return s;
  return finishB(*wb, wb->kind == WorkKind::BW, bWs, bGout);
}

} // namespace pipeforge::rt
