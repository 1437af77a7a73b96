//===- ExecutorMemoryPlan.cpp - A rank's peak bytes, before allocating ----===//
//
// planRankMemory (MemoryCheck.h): the executor's set-up without its
// allocations (the stages, the expert and tensor groups, the local
// parameters, ZeRO's owners, the gradients written straight into place,
// the functions' buffer plans), then one step of the rank's action list
// replayed over byte counts, with the executor's rules:
//   - parameters and gradients whole (a ZeRO-2 gradient is made again at
//     every step's start; ZeRO-3 gathers every stage of a rank during the
//     step, and its set-up holds them all once);
//   - each function's workspace (pp.buffers) allocated at its first run and
//     kept, except the buffers a stash result takes away (stashResult):
//     those are made again by each run and become the stash;
//   - F's stash kept until W (a separate B frees the slots W does not
//     read), B's W-stash until W, a fused BW's until its end;
//   - a message bundle from its producer (or a receive's posting,
//     --recv-lookahead actions ahead) until its consumer ran, or until the
//     end of its Send (sends are taken as complete by then);
//   - the tokens and targets of each microbatch from their first use to
//     the step's end, and the loss seed.
// Not counted (as --memory-report does not): host staging, the kernels'
// own scratch, the device collectives' flat buffers, activation offload
// (the plan keeps every stash on the device: an upper bound there).
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include "pipeforge/rt/MemoryCheck.h"

#include <algorithm>
#include <set>

namespace pipeforge::rt {

namespace {

/// The executor's collaborators that planning never calls.
struct NoTokens final : TokenSource {
  Status fill(int64_t, int, int64_t, int64_t, int64_t, int32_t *,
              int32_t *) override {
    return Status::error("memory plan: no data");
  }
};
struct NoOptimizer final : StepOptimizer {
  Status update(const std::vector<ParamSlot> &, double, int64_t) override {
    return Status::error("memory plan: no optimizer");
  }
};

/// One function's buffers as the executor allocates them (fnPrepare,
/// stashResult): those it keeps between runs, those its stash results take
/// (made again by every run), the stash copies it makes, and each stash
/// slot's bytes by index (F's Stash, B's WStash results).
struct FnMemory {
  int64_t kept = 0, moved = 0, copied = 0;
  std::vector<int64_t> slots;
  int64_t stashBytes() const { return moved + copied; }
};

FnMemory functionMemory(const Executor::Impl &im, const Function &fn,
                        const FnPlan &plan) {
  FnMemory m;
  const size_t nv = fn.values.size();
  auto dg = im.directGrads.find(&fn);
  auto direct = [&](int32_t v) {
    return dg != im.directGrads.end() && dg->second.param[size_t(v)] >= 0;
  };
  auto bufOf = [&](int32_t v) {
    return plan.perValue ? size_t(v) : size_t(fn.buffer[size_t(v)]);
  };
  auto bufBytes = [&](size_t b) {
    int64_t n = plan.perValue ? fn.values[b].numBytes() : fn.bufferBytes[b];
    return std::max<int64_t>(n, 4);
  };
  std::vector<bool> defined(nv, false), used(plan.bufs.size(), false),
      handed(plan.bufs.size(), false);
  for (const Kernel &k : fn.kernels)
    for (int32_t v : k.outputs)
      if (v >= 0 && size_t(v) < nv && !direct(v)) {
        defined[size_t(v)] = true;
        used[bufOf(v)] = true;
      }
  for (size_t b = 0; b < used.size(); ++b)
    m.kept += used[b] ? bufBytes(b) : 0;
  for (const ResultBinding &r : fn.results) {
    if ((r.role != ResultRole::Stash && r.role != ResultRole::WStash) ||
        r.value < 0 || size_t(r.value) >= nv)
      continue;
    const int64_t want =
        std::max<int64_t>(fn.values[size_t(r.value)].numBytes(), 4);
    if (m.slots.size() <= size_t(r.index))
      m.slots.resize(size_t(r.index) + 1, 0);
    m.slots[size_t(r.index)] = want;
    size_t b = defined[size_t(r.value)] ? bufOf(r.value) : used.size();
    if (b < used.size() && !handed[b] && bufBytes(b) == want) {
      handed[b] = true;
      m.moved += want;
    } else {
      m.copied += want;
    }
  }
  return m;
}

/// One step of a rank's actions over byte counts (the file comment's rules).
struct Replay {
  Executor::Impl &im;
  MemoryPlan &out;
  int64_t base = 0; ///< parameters, gradients, the workspace kept
  int64_t stash = 0, msgs = 0, data = 4;             ///< data: the loss seed
  std::map<std::tuple<int, int, int>, FnMemory> fns; ///< (copy, stage, which)
  std::map<Key, std::vector<int64_t>> fSlots;
  std::map<Key, int64_t> wBytes;
  std::map<std::tuple<int, int, int, int>, int64_t> inbox, outbox;
  std::set<std::pair<int, int>> tokens;

  const FnMemory &fn(int c, int s, int which) {
    auto key = std::make_tuple(c, s, which);
    auto it = fns.find(key);
    if (it != fns.end())
      return it->second;
    const Stage &st = im.stageOf(c, s);
    const Function *f[4] = {&st.forward, &st.backwardInput, &st.backwardWeight,
                            &st.backward};
    return fns[key] =
               functionMemory(im, *f[which], im.plans[{c, s}][size_t(which)]);
  }
  void note() {
    int64_t t = base + stash + msgs + data;
    if (t > out.buffersPeak) {
      out.buffersPeak = t;
      out.stash = stash;
      out.messages = msgs;
      out.data = data;
    }
  }
  int64_t bundle(int c, int layoutStage) {
    return std::max<int64_t>(im.actBytes[{c, layoutStage}], 4);
  }
  int64_t take(std::tuple<int, int, int, int> key) {
    auto it = inbox.find(key);
    int64_t n = it == inbox.end() ? 0 : it->second;
    if (it != inbox.end())
      inbox.erase(it);
    return n;
  }
  void produce(Payload p, int c, int from, int to, int mb, int layout) {
    int64_t n = bundle(c, layout);
    msgs += n;
    if (im.rankOf(c, to) == im.prank)
      inbox[{int(p), c, to, mb}] = n;
    else
      outbox[{int(p), c, from, mb}] = n;
  }
  void postRecv(const Action &a) {
    const Work &w = a.work;
    bool act = a.payload == Payload::Activation;
    int64_t n = bundle(w.copy, act ? w.stage : w.stage - 1);
    msgs += n;
    inbox[{int(a.payload), w.copy, act ? w.stage + 1 : w.stage - 1, w.mb}] = n;
  }
  void useTokens(const Function &f, int c, int mb) {
    for (const ArgBinding &a : f.args)
      if ((a.role == ArgRole::Tokens || a.role == ArgRole::Targets) &&
          tokens.insert({c, mb}).second)
        data += 2 * im.prog.model.microbatchSize * im.prog.model.seqLen * 4;
  }
  void forward(const Work &w) {
    const Stage &st = im.stageOf(w.copy, w.stage);
    int64_t held = w.stage > 0
                       ? take({int(Payload::Activation), w.copy, w.stage, w.mb})
                       : 0;
    useTokens(st.forward, w.copy, w.mb);
    const FnMemory &m = fn(w.copy, w.stage, 0);
    stash += m.stashBytes();
    fSlots[Key{w.copy, w.stage, w.mb}] = m.slots;
    if (w.stage + 1 < im.numStages)
      produce(Payload::Activation, w.copy, w.stage, w.stage + 1, w.mb, w.stage);
    note();
    msgs -= held;
  }
  /// B (which 1) or a fused BW (3): the W-stash, the gradient out.
  void backward(const Work &w, int which) {
    const Stage &st = im.stageOf(w.copy, w.stage);
    int64_t held = w.stage + 1 < im.numStages
                       ? take({int(Payload::Gradient), w.copy, w.stage, w.mb})
                       : 0;
    useTokens(which == 3 ? st.backward : st.backwardInput, w.copy, w.mb);
    const FnMemory &m = fn(w.copy, w.stage, which);
    stash += m.stashBytes();
    wBytes[Key{w.copy, w.stage, w.mb}] += m.stashBytes();
    if (w.stage > 0)
      produce(Payload::Gradient, w.copy, w.stage, w.stage - 1, w.mb,
              w.stage - 1);
    note();
    msgs -= held;
  }
  /// F's slots that W does not read, after a separate B.
  void dropUnread(const Work &w) {
    std::vector<int64_t> &slots = fSlots[Key{w.copy, w.stage, w.mb}];
    const std::vector<bool> &keep = im.stashForW(im.stageOf(w.copy, w.stage));
    for (size_t i = 0; i < slots.size(); ++i)
      if (i >= keep.size() || !keep[i]) {
        stash -= slots[i];
        slots[i] = 0;
      }
  }
  void release(const Work &w) {
    Key k{w.copy, w.stage, w.mb};
    for (int64_t n : fSlots[k])
      stash -= n;
    stash -= wBytes[k];
    fSlots.erase(k);
    wBytes.erase(k);
  }
  /// A work item of a stage of this rank (compute() reports the others).
  bool local(const Work &w) const {
    return w.copy >= 0 && w.copy < im.prog.schedule.placement.numCopies &&
           w.stage >= 0 && w.stage < im.numStages &&
           im.rankOf(w.copy, w.stage) == im.prank;
  }
  void compute(const Work &w) {
    if (!local(w))
      return;
    const Stage &st = im.stageOf(w.copy, w.stage);
    switch (w.kind) {
    case WorkKind::F:
      return forward(w);
    case WorkKind::B:
      backward(w, 1);
      return dropUnread(w);
    case WorkKind::W:
      if (!st.backwardWeight.empty()) {
        fn(w.copy, w.stage, 2);
        note();
      }
      return release(w);
    case WorkKind::BW:
      backward(w, st.backward.empty() ? 1 : 3);
      if (st.backward.empty() && !st.backwardWeight.empty())
        fn(w.copy, w.stage, 2);
      return release(w);
    }
  }
  void run(const std::vector<Action> &acts, int lookahead);
};

void Replay::run(const std::vector<Action> &acts, int lookahead) {
  // The workspace every function of the step keeps (from the step before).
  for (const Action &a : acts) {
    if (a.kind != ActionKind::Compute && a.kind != ActionKind::Overlap)
      continue;
    for (const Work *w : {&a.work, &a.work2}) {
      if (w == &a.work2 && a.kind != ActionKind::Overlap)
        break;
      if (!local(*w))
        continue;
      const Stage &st = im.stageOf(w->copy, w->stage);
      const bool split = w->kind == WorkKind::BW && st.backward.empty();
      if (w->kind == WorkKind::F)
        fn(w->copy, w->stage, 0);
      else if (w->kind == WorkKind::B || split)
        fn(w->copy, w->stage, 1);
      else if (w->kind == WorkKind::BW)
        fn(w->copy, w->stage, 3);
      if ((w->kind == WorkKind::W || split) && !st.backwardWeight.empty())
        fn(w->copy, w->stage, 2);
    }
  }
  for (auto &[key, m] : fns)
    out.workspace += m.kept - m.moved;
  base = out.params + out.grads + out.workspace;
  note();
  size_t nextPost = 0;
  for (size_t i = 0; i < acts.size(); ++i) {
    size_t horizon =
        std::min(acts.size(), i + 1 + size_t(std::max(0, lookahead)));
    for (; nextPost < horizon; ++nextPost)
      if (acts[nextPost].kind == ActionKind::Recv)
        postRecv(acts[nextPost]);
    const Action &a = acts[i];
    if (a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap)
      compute(a.work);
    if (a.kind == ActionKind::Overlap)
      compute(a.work2);
    if (a.kind == ActionKind::Send) {
      auto it =
          outbox.find({int(a.payload), a.work.copy, a.work.stage, a.work.mb});
      if (it != outbox.end()) {
        msgs -= it->second;
        outbox.erase(it);
      }
    }
    note();
  }
}

/// The few largest of `all`, largest first.
std::vector<std::pair<std::string, int64_t>>
largest(std::vector<std::pair<std::string, int64_t>> all, size_t n) {
  std::stable_sort(all.begin(), all.end(),
                   [](auto &a, auto &b) { return a.second > b.second; });
  if (all.size() > n)
    all.resize(n);
  return all;
}

} // namespace

Expected<MemoryPlan> planRankMemory(const Program &prog, Backend &be,
                                    Transport &tr, const ExecutorOptions &o,
                                    const MemoryPlanOptions &po) {
  auto rp = rankProgram(prog, tr);
  if (!rp)
    return rp.status();
  std::shared_ptr<const Program> own = *rp;
  NoTokens tokens;
  NoOptimizer opt;
  Executor::Impl im(own ? *own : prog, be, tr, tokens, opt, o);
  if (Status s = im.initStages(); !s)
    return s;
  if (Status s = im.initExpertParallel(); !s)
    return s;
  if (Status s = im.initTensorParallel(); !s)
    return s;
  MemoryPlan out;
  std::vector<std::pair<std::string, int64_t>> byParam;
  for (size_t i = 0; i < im.prog.params.size(); ++i) {
    const Param &p = im.prog.params[i];
    if (p.copy >= im.prog.schedule.placement.numCopies ||
        p.stage >= im.numStages)
      return Status::error("parameter '" + p.name + "' has no stage");
    if (im.rankOf(p.copy, p.stage) != im.prank)
      continue;
    im.params[int32_t(i)] = {}; // no buffers: the owners and plans only
    int64_t bytes = im.localElems(int32_t(i)) * 4;
    out.params += bytes;
    byParam.push_back({p.name, bytes});
  }
  out.grads = out.params;
  if (Status s = im.initZero(); !s)
    return s;
  for (auto &[i, ps] : im.params)
    if (im.ownsState(i))
      out.optimizer += im.localElems(i) * po.optimizerBytesPerElement;
  im.planDirectGrads();
  im.planBuffers();
  Replay r{im, out};
  r.run(im.prog.schedule.programs[size_t(im.prank)], o.recvLookahead);
  // Each stage's share: its functions' workspace and one microbatch's stash.
  std::map<std::pair<int, int>, int64_t> perStage;
  for (auto &[key, m] : r.fns) {
    auto [c, s, which] = key;
    perStage[{c, s}] += m.kept - m.moved + m.stashBytes();
  }
  std::vector<std::pair<std::string, int64_t>> stages;
  for (auto &[cs, n] : perStage)
    stages.push_back(
        {"stage " + std::to_string(cs.second) +
             (cs.first ? " (copy " + std::to_string(cs.first) + ")" : ""),
         n});
  out.largestParams = largest(std::move(byParam), 3);
  out.largestStages = largest(std::move(stages), 3);
  return out;
}

} // namespace pipeforge::rt
