//===- Executor.cpp - Interprets a rank's schedule each step --------------===//
//
// The action interpreter: one step runs the rank's actions in order (F, B,
// W, overlapped pairs, sends, receives, gradient reductions), then the
// gradient sync and the step statistics. The rest of the executor
// (ExecutorImpl.h): one function's kernels in ExecutorFunction.cpp, fused
// F&B pairs in ExecutorOverlap.cpp, set-up in ExecutorInit.cpp, DP/EP
// gradient sync in GradSync.cpp, weights I/O in ExecutorWeights.cpp, the
// trace in ExecutorTrace.cpp.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include "pipeforge/rt/Data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

namespace pipeforge::rt {

Status Executor::Impl::dataFor(int c, int mb, BufP &tok, BufP &tgt) {
  auto it = tokens.find({c, mb});
  if (it != tokens.end()) {
    tok = it->second.first;
    tgt = it->second.second;
    return Status::ok();
  }
  int64_t b = prog.model.microbatchSize, s = prog.model.seqLen;
  std::vector<int32_t> ht(static_cast<size_t>(b * s)),
      hg(static_cast<size_t>(b * s));
  // An EP rank reads its own microbatches: index offset by epi x totalMb.
  int64_t g = int64_t(mb) + int64_t(c) * mPerCopy + int64_t(epi) * totalMb;
  if (Status st =
          data.fill(stepNo, tr.dpIndex(), g, b, s, ht.data(), hg.data());
      !st)
    return st;
  tok = newBuf(b * s * 4, MemClass::Data);
  tgt = newBuf(b * s * 4, MemClass::Data);
  be.copyFromHost(tok->p, ht.data(), b * s * 4);
  be.copyFromHost(tgt->p, hg.data(), b * s * 4);
  tokens[{c, mb}] = {tok, tgt};
  return Status::ok();
}

Expected<const std::vector<int32_t> *> Executor::Impl::docsFor(int c, int mb) {
  auto it = docs.find({c, mb});
  if (it != docs.end())
    return &it->second;
  int64_t b = prog.model.microbatchSize, s = prog.model.seqLen;
  std::vector<int32_t> d(static_cast<size_t>(b * s));
  // The microbatch dataFor reads (the same index).
  int64_t g = int64_t(mb) + int64_t(c) * mPerCopy + int64_t(epi) * totalMb;
  if (Status st = data.documents(stepNo, tr.dpIndex(), g, b, s, d.data()); !st)
    return st;
  return &(docs[{c, mb}] = std::move(d));
}

Expected<BufP> Executor::Impl::takeInbox(Payload p, int c, int s, int mb) {
  auto key = std::make_tuple(int(p), c, s, mb);
  auto it = inbox.find(key);
  if (it == inbox.end())
    return Status::error(
        std::string("no ") +
        (p == Payload::Activation ? "activation" : "gradient") + " for stage " +
        std::to_string(s) + " mb " + std::to_string(mb) + " copy " +
        std::to_string(c) + " (schedule lacks a Recv?)");
  Inbox in = it->second;
  inbox.erase(it);
  if (in.req) {
    double w0 = nowS();
    if (Status st = tr.wait(in.req); !st)
      return st;
    if (in.stage)
      be.copyFromHost(in.buf->p, in.stage->data(),
                      int64_t(in.stage->size()) * 4);
    double w1 = nowS();
    waited += w1 - w0;
    record(in.label, 1, in.posted, w1);
  }
  return in.buf;
}

Status Executor::Impl::doF(const Work &w) {
  const Stage &st = stageOf(w.copy, w.stage);
  std::vector<BufP> st_out;
  BufP act, none;
  if (Status s = runFunction(st, 0, w.copy, w.mb, nullptr, nullptr, nullptr,
                             &st_out, nullptr, &act, &none);
      !s)
    return s;
  return finishF(w, st_out, act);
}

static int64_t bytesOf(const std::vector<BufP> &v) {
  int64_t n = 0;
  for (const BufP &b : v)
    n += b ? b->bytes : 0;
  return n;
}

void Executor::Impl::noteStash() {
  int64_t live = 0;
  for (auto &[k, v] : stash)
    live += bytesOf(v);
  for (auto &[k, v] : wstash)
    live += bytesOf(v);
  for (auto &[k, o] : offloaded) // still being copied to the host
    live += bytesOf(o.leaving);
  stashPeak = std::max(stashPeak, live);
  // The trace's activation level: a counter event at each change.
  if (opts.trace && live != tracedStash) {
    tracedStash = live;
    events.push_back({"activation stash", 0, nowS() - epoch, 0, "", nullptr,
                      live});
  }
}

Status Executor::Impl::finishF(const Work &w, std::vector<BufP> &st_out,
                               BufP act) {
  mbFStash[{w.copy, w.stage}] = bytesOf(st_out);
  Key key{w.copy, w.stage, w.mb};
  stash[key] = std::move(st_out);
  noteStash();
  if (!offloadByActions && offloadPlan.keys.count(key)) // offload: to host
    if (Status s = startOffload(key); !s)
      return s;
  if (w.stage + 1 < numStages) {
    if (!act)
      return stageError(w.copy, w.stage, "F returned no activation");
    if (rankOf(w.copy, w.stage + 1) == prank)
      inbox[{int(Payload::Activation), w.copy, w.stage + 1, w.mb}] =
          Inbox{act, 0, 0, ""};
    else
      outbox[{int(Payload::Activation), w.copy, w.stage, w.mb}] = act;
  }
  return Status::ok();
}

Expected<BufP> Executor::Impl::gradInFor(const Work &w) {
  if (w.stage == numStages - 1)
    return seed;
  return takeInbox(Payload::Gradient, w.copy, w.stage, w.mb);
}

Status Executor::Impl::doB(const Work &w, bool fused) {
  const Stage &st = stageOf(w.copy, w.stage);
  Key key{w.copy, w.stage, w.mb};
  auto g = gradInFor(w);
  if (!g)
    return g.status();
  BufP gin = *g;
  if (Status s = ensureResident(key); !s) // activation offload
    return s;
  BufP act, gout;
  std::vector<BufP> ws;
  bool useFusedFn = fused && !st.backward.empty();
  if (Status s = runFunction(st, useFusedFn ? 3 : 1, w.copy, w.mb, &stash[key],
                             nullptr, gin->f(), nullptr, &ws, &act, &gout);
      !s)
    return s;
  return finishB(w, fused, ws, gout);
}

Status Executor::Impl::finishB(const Work &w, bool fused, std::vector<BufP> &ws,
                               BufP gout) {
  const Stage &st = stageOf(w.copy, w.stage);
  Key key{w.copy, w.stage, w.mb};
  bool useFusedFn = fused && !st.backward.empty();
  int64_t &wmax = mbWStash[{w.copy, w.stage}];
  wmax = std::max(wmax, bytesOf(ws));
  wstash[key] = std::move(ws);
  if (!fused) {
    // B is done with F's stash: keep only the slots W reads (the memory
    // model frees M_B - M_W at B).
    std::vector<BufP> &s = stash[key];
    const std::vector<bool> &keep = stashForW(st);
    for (size_t i = 0; i < s.size(); ++i)
      if (i >= keep.size() || !keep[i])
        s[i].reset();
  }
  noteStash();
  if (w.stage > 0) {
    if (!gout)
      return stageError(w.copy, w.stage, "backward returned no gradient");
    if (rankOf(w.copy, w.stage - 1) == prank)
      inbox[{int(Payload::Gradient), w.copy, w.stage - 1, w.mb}] =
          Inbox{gout, 0, 0, ""};
    else
      outbox[{int(Payload::Gradient), w.copy, w.stage, w.mb}] = gout;
  }
  if (fused) {
    if (!useFusedFn)
      return doW(w);
    stash.erase(key);
    wstash.erase(key);
    noteStash();
  }
  return Status::ok();
}

Status Executor::Impl::doW(const Work &w) {
  const Stage &st = stageOf(w.copy, w.stage);
  Key key{w.copy, w.stage, w.mb};
  if (!st.backwardWeight.empty()) {
    BufP none;
    if (Status s = runFunction(st, 2, w.copy, w.mb, &stash[key], &wstash[key],
                               nullptr, nullptr, nullptr, &none, &none);
        !s)
      return s;
  }
  stash.erase(key);
  wstash.erase(key);
  noteStash();
  return Status::ok();
}

/// An Overlap action. When both members' functions carry components
/// (pipeforge-compile --pp-fuse-overlap) and fusion is on, F and the
/// backward member run interleaved on this thread: each runs until it has
/// posted an all-to-all (a moe kernel's dispatch or combine, forward or
/// backward), then the other runs, so one member's all-to-all is in flight
/// while the other computes; the backward member starts (DeepSeek's order
/// begins with combine(B), attn(F), mlp(B), dispatch(F), ...). Between
/// steps the executor calls progress() when the transport has no progress
/// thread. The switch
/// points depend only on the program, never on timing, so every rank of an
/// EP group posts its all-to-alls in the same order (MPI collective order).
/// Each member runs its own kernels in its own order on its own buffers and
/// their results are taken after both finished, F first: the same bits as F
/// then B. Otherwise: F then B.
Status Executor::Impl::compute(const Work &w) {
  if (w.copy < 0 || w.copy >= prog.schedule.placement.numCopies ||
      w.stage < 0 || w.stage >= numStages || rankOf(w.copy, w.stage) != prank)
    return Status::error("action " + sched::toString(w) +
                         " is not for a stage of pipeline rank " +
                         std::to_string(prank));
  switch (w.kind) {
  case WorkKind::F:
    return doF(w);
  case WorkKind::B:
    return doB(w, false);
  case WorkKind::W:
    return doW(w);
  case WorkKind::BW:
    return doB(w, true);
  }
  return Status::ok();
}

Status Executor::Impl::recv(const Action &a, size_t idx) {
  if (!posted.insert(idx).second)
    return Status::ok();
  const Work &w = a.work;
  bool act = a.payload == Payload::Activation;
  if (!act && a.payload != Payload::Gradient)
    return Status::error("unsupported receive payload");
  int consumer = act ? w.stage + 1 : w.stage - 1;
  int layoutStage = act ? w.stage : w.stage - 1;
  if (consumer < 0 || consumer >= numStages)
    return Status::error("receive " + sched::toString(a) + " has no consumer");
  // Not cleared: the receive (or its host stage's copy) writes all of it.
  auto b = newBuf(std::max<int64_t>(actBytes[{w.copy, layoutStage}], 4),
                  MemClass::Messages, /*clear=*/false);
  MessageId id{a.payload, w.stage, w.mb, w.copy};
  int64_t n = actBytes[{w.copy, layoutStage}] / 4;
  HostStage stage;
  if (stageMessages())
    stage = std::make_shared<std::vector<float>>(size_t(n));
  auto r = tr.irecv(a.peer, messageTag(id, numStages, mPerCopy),
                    stage ? stage->data() : b->f(), n);
  if (!r)
    return r.status();
  inbox[{int(a.payload), w.copy, consumer, w.mb}] =
      Inbox{b, *r, nowS(), sched::toString(a), stage};
  return Status::ok();
}

Status Executor::Impl::send(const Action &a) {
  const Work &w = a.work;
  auto key = std::make_tuple(int(a.payload), int(w.copy), w.stage, w.mb);
  auto it = outbox.find(key);
  if (it == outbox.end())
    return Status::error("send " + sched::toString(a) +
                         " before its producer ran");
  BufP b = it->second;
  outbox.erase(it);
  int layoutStage = a.payload == Payload::Activation ? w.stage : w.stage - 1;
  MessageId id{a.payload, w.stage, w.mb, w.copy};
  int64_t n = actBytes[{w.copy, layoutStage}] / 4;
  HostStage stage;
  if (stageMessages()) {
    stage = std::make_shared<std::vector<float>>(size_t(n));
    be.copyToHost(stage->data(), b->p, n * 4);
  }
  auto r = tr.isend(a.peer, messageTag(id, numStages, mPerCopy),
                    stage ? stage->data() : b->f(), n);
  if (!r)
    return r.status();
  sends.push_back({*r, b, nowS(), sched::toString(a), stage});
  return Status::ok();
}

Status Executor::Impl::gradReduceToUpdaters(
    const Action &a, const std::vector<std::pair<std::string, int32_t>> &order) {
  // In canonical order: what this side sends (the peer updates it, or
  // both do) and what it receives (it updates it, or both do). The peer's
  // send list is this side's receive list.
  std::vector<int32_t> out, in;
  int64_t nOut = 0, nIn = 0;
  for (auto &[name, i] : order) {
    PairOwner who = pairOwner.count(i) ? pairOwner.at(i) : PairOwner::Both;
    if (who != PairOwner::Mine) {
      out.push_back(i);
      nOut += localElems(i);
    }
    if (who != PairOwner::Theirs) {
      in.push_back(i);
      nIn += localElems(i);
    }
  }
  std::vector<float> sendBuf(static_cast<size_t>(nOut)),
      recvBuf(static_cast<size_t>(nIn));
  int64_t off = 0;
  for (int32_t i : out) {
    be.copyToHost(sendBuf.data() + off, params.at(i).grad->p,
                  localElems(i) * 4);
    off += localElems(i);
  }
  const int64_t tag =
      messageTag(MessageId{Payload::WeightGrad, 0, 0, 0}, numStages, mPerCopy);
  auto rr = tr.irecv(a.peer, tag, recvBuf.data(), nIn);
  if (!rr)
    return rr.status();
  auto sr = tr.isend(a.peer, tag, sendBuf.data(), nOut);
  if (!sr)
    return sr.status();
  if (Status s = tr.wait(*rr); !s)
    return s;
  if (Status s = tr.wait(*sr); !s)
    return s;
  off = 0;
  std::vector<float> mine;
  for (int32_t i : in) {
    int64_t k = localElems(i);
    mine.resize(size_t(k));
    be.copyToHost(mine.data(), params.at(i).grad->p, k * 4);
    for (int64_t e = 0; e < k; ++e)
      mine[size_t(e)] = mine[size_t(e)] + recvBuf[size_t(off + e)];
    be.copyFromHost(params.at(i).grad->p, mine.data(), k * 4);
    off += k;
  }
  // ZeRO-2: what the other side updates has left for it.
  for (int32_t i : out)
    if (!sideUpdates(i))
      releaseGrad(i);
  return Status::ok();
}

Status Executor::Impl::gradReduce(const Action &a) {
  // Every local gradient is read (and a tensor's gradient may be written
  // by one copy only): those nothing wrote are zeros.
  clearUnwrittenGrads();
  // Canonical order: by base name; both peers hold the same logical params.
  std::vector<std::pair<std::string, int32_t>> order;
  for (auto &[i, ps] : params)
    order.push_back({baseParamName(prog.params[size_t(i)].name), i});
  std::sort(order.begin(), order.end());
  int64_t n = 0;
  for (auto &[name, i] : order)
    n += localElems(i);
  float cnt = float(n);
  if (Status s = tr.pairwiseSum(a.peer, &cnt, 1); !s)
    return s;
  if (cnt != 2.0f * float(n))
    return Status::error("GRADREDUCE with pipeline rank " +
                         std::to_string(a.peer) +
                         ": the two ranks hold different parameter sets");
  // ZeRO over the pair: a reduce-scatter. Each side sends the gradients of
  // the tensors the other updates and adds those of its own (tied ones go
  // both ways): half the traffic of the sum, the same bits (a + b == b + a).
  if (!pairOwner.empty() && (be.hostVisible() || !tr.deviceBuffers()))
    return gradReduceToUpdaters(a, order);
  std::vector<float> host(static_cast<size_t>(n));
  int64_t off = 0;
  for (auto &[name, i] : order) {
    int64_t k = localElems(i);
    be.copyToHost(host.data() + off, params[i].grad->p, k * 4);
    off += k;
  }
  if (Status s = tr.pairwiseSum(a.peer, host.data(), n); !s)
    return s;
  off = 0;
  for (auto &[name, i] : order) {
    int64_t k = localElems(i);
    be.copyFromHost(params[i].grad->p, host.data() + off, k * 4);
    off += k;
  }
  // ZeRO-2 over the pair: the gradients of what the other side updates are
  // final and the peer holds the same sum.
  for (auto &[name, i] : order)
    if (!sideUpdates(i))
      releaseGrad(i);
  return Status::ok();
}

Expected<StepStats> Executor::Impl::step() {
  if (Status s = tr.barrier(Group::Pipeline); !s)
    return s;
  if (opts.stallStep == stepNo + 1) {
    std::fprintf(stderr, "pipeforge-run: rank %d: test hook: stalling at "
                         "step %lld\n",
                 tr.worldRank(), (long long)opts.stallStep);
    std::fflush(stderr);
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  double t0 = nowS();
  stepStartTransfers = be.transfers();
  if (opts.trace)
    be.timeGemms(true);
  const Backend::GemmTime gemm0 = be.gemmTime();
  opSeconds.fill(0);
  if (Status s = restoreGrads(); !s)
    return s;
  // The gradients are not cleared: each one's first write of the step
  // overwrites it, and those nothing writes are cleared before they are
  // read (clearUnwrittenGrads). A failed step's leftovers are overwritten
  // too.
  for (auto &[i, ps] : params) {
    ps.gradWritten = false;
    if (!be.hostVisible() && !optOnDevice() && ps.value) // ZeRO-3: held
      be.copyFromHost(ps.value->p, ps.hostValue.data(), ps.value->bytes);
  }
  // ZeRO-3: the owners serve this step's values.
  if (opts.zeroStage == 3)
    if (Status s = serveParams(); !s)
      return s;
  if (!offloaded.empty()) // left by a failed step
    pollOffloads(/*all=*/true);
  stash.clear();
  wstash.clear();
  noteStash(); // the trace's level back to 0
  inbox.clear();
  outbox.clear();
  tokens.clear();
  docs.clear();
  posted.clear();
  lossSum = 0;
  lossCount = 0;
  busy = 0;
  beginGradOverlap();
  nanPending = opts.injectNanStep == stepNo + 1;
  const std::vector<Action> &acts = prog.schedule.programs[size_t(prank)];
  size_t nextPost = 0;
  for (size_t i = 0; i < acts.size(); ++i) {
    // Pre-post the receives of the next few actions.
    size_t horizon =
        std::min(acts.size(), i + 1 + size_t(std::max(0, opts.recvLookahead)));
    for (; nextPost < horizon; ++nextPost)
      if (acts[nextPost].kind == ActionKind::Recv)
        if (Status s = recv(acts[nextPost], nextPost); !s)
          return Status::errorAt(prank, long(nextPost), s.message());
    const Action &a = acts[i];
    curAction = i;
    // Activation offload: the stashes of the next compute action's B come
    // back under this one.
    if (auto r = offloadPlan.reloadBefore.find(i);
        r != offloadPlan.reloadBefore.end())
      for (const sched::StashKey &k : r->second)
        if (Status s = reload(Key(k)); !s)
          return Status::errorAt(prank, long(i), s.message());
    waited = 0;
    a2aWaited = 0;
    bool fusedRun = false;
    double a0 = nowS();
    Status s = Status::ok();
    switch (a.kind) {
    case ActionKind::Compute:
      s = awaitParams(a);
      if (s)
        s = compute(a.work);
      break;
    case ActionKind::Overlap:
      s = awaitParams(a);
      if (s)
        s = doOverlap(a, fusedRun);
      break;
    case ActionKind::Unshard:
      if (opts.zeroStage == 3) // else every parameter is resident
        s = unshard(a);
      break;
    case ActionKind::Reshard:
      if (opts.zeroStage == 3)
        s = reshard(a);
      break;
    case ActionKind::Offload: // activation offload (ExecutorOffload.cpp)
      if (offloadByActions)   // else a host-memory backend: nothing to do
        s = startOffload(Key(a.work.copy, a.work.stage, a.work.mb));
      break;
    case ActionKind::Reload:
      if (offloadByActions)
        s = reload(Key(a.work.copy, a.work.stage, a.work.mb));
      break;
    case ActionKind::Send:
      s = send(a);
      break;
    case ActionKind::Recv:
      s = recv(a, i);
      break;
    case ActionKind::GradReduce:
      s = gradReduce(a);
      break;
    }
    if (s)
      s = gradsAfterAction(i);
    if (!s)
      return Status::errorAt(prank, long(i),
                             "pipeline rank " + std::to_string(prank) +
                                 " action " + std::to_string(i) + " (" +
                                 sched::toString(a) + "): " + s.message());
    bool isCompute =
        a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap;
    if (isCompute && opts.syncDeviceCompute && !be.hostVisible())
      be.synchronize(); // device time, not launch time
    double a1 = nowS();
    if (isCompute) {
      busy += a1 - a0 - waited; // blocked receive waits are bubble, not work
      char wa[96];
      if (E > 1)
        std::snprintf(wa, sizeof wa, "\"wait_us\":%.3f,\"a2a_wait_us\":%.3f%s",
                      waited * 1e6, a2aWaited * 1e6,
                      fusedRun ? ",\"fused\":1" : "");
      else
        std::snprintf(wa, sizeof wa, "\"wait_us\":%.3f", waited * 1e6);
      record(sched::toString(a), 0, a0, a1, wa);
    } else if (a.kind == ActionKind::GradReduce) {
      record(sched::toString(a), 1, a0, a1);
    }
    pollSends();
    if (!offloaded.empty())
      pollOffloads(/*all=*/false, i);
  }
  double loopEnd = nowS();
  if (Status s = finishServing(); !s)
    return s;
  for (PendingSend &ps : sends) {
    if (Status s = tr.wait(ps.req); !s)
      return s;
    record(ps.label, 1, ps.posted, nowS());
  }
  sends.clear();
  pollOffloads(/*all=*/true);
  // A kernel's asynchronous error (device backends) fails the step here.
  if (Status s = be.takeAsyncError(); !s)
    return s;
  if (opts.trace) {
    // One event per step on tid 2: the schedule part (barrier exit to the
    // last send's completion); drain = waiting for sends after the last action.
    double t1 = nowS();
    char buf[128];
    std::snprintf(buf, sizeof buf, "\"actions\":%zu,\"drain_us\":%.3f",
                  acts.size(), (t1 - loopEnd) * 1e6);
    std::string sa = buf;
    // The step's GEMMs on this rank (a CPU backend times them).
    const Backend::GemmTime gemm1 = be.gemmTime();
    if (gemm1.seconds >= 0) {
      std::snprintf(buf, sizeof buf, ",\"gemm_us\":%.3f,\"gemm_gflop\":%.6f",
                    (gemm1.seconds - gemm0.seconds) * 1e6,
                    (gemm1.flops - gemm0.flops) * 1e-9);
      sa += buf;
    }
    // Its kernels' time per op kind (host backends).
    std::string ops;
    for (size_t k = 0; k < kNumOpKinds; ++k)
      if (opSeconds[k] > 0) {
        std::snprintf(buf, sizeof buf, "%s\"%s\":%.3f", ops.empty() ? "" : ",",
                      opName(OpKind(k)), opSeconds[k] * 1e6);
        ops += buf;
      }
    if (!ops.empty())
      sa += ",\"ops_us\":{" + ops + "}";
    record("step " + std::to_string(stepNo + 1), 2, t0, t1, sa);
  }
  if (!inbox.empty() || !outbox.empty())
    return Status::error("pipeline rank " + std::to_string(prank) +
                         ": step ended with " + std::to_string(inbox.size()) +
                         " unconsumed and " + std::to_string(outbox.size()) +
                         " unsent messages (schedule incomplete)");
  double span = nowS() - t0;

  return finishStep(t0, span);
}

Expected<std::shared_ptr<const Program>> rankProgram(const Program &prog,
                                                     Transport &tr) {
  if (tr.pipelineSize() != prog.schedule.numRanks())
    return Status::error("transport has " + std::to_string(tr.pipelineSize()) +
                         " pipeline ranks, the program " +
                         std::to_string(prog.schedule.numRanks()));
  if (prog.training.tensorParallel <= 1)
    return std::shared_ptr<const Program>();
  return std::make_shared<const Program>(
      specializeForTensorRank(prog, tr.tpIndex()));
}

Executor::Executor(std::unique_ptr<Impl> i) : impl(std::move(i)) {}
Executor::~Executor() = default;

Expected<std::unique_ptr<Executor>> Executor::create(const Program &prog,
                                                     Backend &be, Transport &tr,
                                                     TokenSource &data,
                                                     StepOptimizer &opt,
                                                     const ExecutorOptions &o) {
  // Tensor parallelism: this rank's kernels (TensorParallel.cpp).
  auto rp = rankProgram(prog, tr);
  if (!rp)
    return rp.status();
  std::shared_ptr<const Program> own = *rp;
  auto impl = std::make_unique<Impl>(own ? *own : prog, be, tr, data, opt, o);
  impl->ownedProg = std::move(own);
  if (Status s = impl->init(); !s)
    return s;
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

Expected<StepStats> Executor::step() { return impl->step(); }
int64_t Executor::stepsDone() const { return impl->stepNo; }
int64_t Executor::peakStashBytes() const { return impl->stashPeak; }
std::map<std::pair<int, int>, int64_t>
Executor::microbatchStashBytes() const {
  return impl->microbatchStash();
}

Expected<std::string> Executor::memoryReport() {
  // "peak params grads optimizer mb_bytes..." per rank, gathered in world
  // rank order.
  int64_t paramBytes = 0, gradBytes = 0;
  for (auto &[i, ps] : impl->params) {
    paramBytes += ps.value ? ps.value->bytes : 0; // ZeRO-3: owned only
    gradBytes += ps.grad ? ps.grad->bytes : 0; // ZeRO-2: the share only
  }
  std::string mine = std::to_string(impl->stashPeak) + " " +
                     std::to_string(paramBytes) + " " +
                     std::to_string(gradBytes) + " " +
                     std::to_string(impl->opt.stateBytes()) + " " +
                     std::to_string(impl->stateOwner.empty() &&
                                            impl->pairOwner.empty()
                                        ? -1
                                        : int64_t(optimizerParams().size())) +
                     " " + std::to_string(impl->params.size()) + " " +
                     std::to_string(impl->be.hostVisible() ? -1 : 1) + " " +
                     std::to_string(impl->lastStepTransfers.toDevice) + " " +
                     std::to_string(impl->lastStepTransfers.toHost) + " " +
                     std::to_string(impl->optOnDevice() ? 1 : 0) + " " +
                     std::to_string(impl->stepNo) + " " +
                     std::to_string(impl->ledger.totalPeak.load()) + " " +
                     std::to_string(impl->ledger.peak[size_t(MemClass::Messages)].load()) +
                     " " +
                     std::to_string(impl->ledger.peak[size_t(MemClass::Workspace)].load()) +
                     " " +
                     std::to_string(impl->ledger.peak[size_t(MemClass::Data)].load()) +
                     " " + std::to_string(impl->opts.zeroStage) + " " +
                     std::to_string(impl->ledger.peak[size_t(MemClass::Gradients)].load()) +
                     " " + std::to_string(impl->offloadsLastStep) + " " +
                     std::to_string(impl->hostStashPeak) + " " +
                     std::to_string(impl->paramStepPeak);
  for (auto &[cs, bytes] : impl->mbFStash) {
    auto w = impl->mbWStash.find(cs);
    mine += " " + std::to_string(cs.first) + ":" + std::to_string(cs.second) +
            ":" + std::to_string(bytes) + ":" +
            std::to_string(w == impl->mbWStash.end() ? 0 : w->second);
  }
  auto all = impl->tr.gatherStrings(mine);
  if (!all)
    return all.status();
  std::string out;
  for (size_t r = 0; r < all->size(); ++r) {
    std::istringstream in((*all)[r]);
    long long peak = 0, pb = 0, gb = 0, ob = 0, owned = -1, held = 0;
    long long device = -1, toDev = 0, toHost = 0, optDev = 0, steps = 0;
    long long total = 0, msgs = 0, work = 0, dataB = 0, zero = 0, gpeak = 0;
    long long offloads = 0, hostPeak = 0, ppeak = 0;
    in >> peak >> pb >> gb >> ob >> owned >> held >> device >> toDev >>
        toHost >> optDev >> steps >> total >> msgs >> work >> dataB >> zero >>
        gpeak >> offloads >> hostPeak >> ppeak;
    std::string item, stages;
    long long unit = 0;  // F's stash of the rank's largest stage: M_B
    long long wmax = 0;  // its largest W-stash
    while (in >> item) {
      int copy = 0, stage = 0;
      long long bytes = 0, wbytes = 0;
      if (std::sscanf(item.c_str(), "%d:%d:%lld:%lld", &copy, &stage, &bytes,
                      &wbytes) != 4)
        continue;
      stages += (stages.empty() ? "" : ", ") + std::string("stage ") +
                std::to_string(stage) +
                (copy ? " (copy " + std::to_string(copy) + ")" : "") + " " +
                std::to_string(bytes) + " bytes" +
                (wbytes ? " + W-stash " + std::to_string(wbytes) : "");
      unit = std::max(unit, bytes);
      wmax = std::max(wmax, wbytes);
    }
    // In M_B only where F's stash is what the rank holds (not when a
    // recomputing stage keeps its inputs and B's W-stash dwarfs them).
    char ratio[64] = "";
    if (unit > 0 && unit >= wmax)
      std::snprintf(ratio, sizeof ratio, " = %.2f M_B",
                    double(peak) / double(unit));
    out += "rank " + std::to_string(r) + ": parameters " + std::to_string(pb) +
           // ZeRO-3: the tensors held between steps, and the step's peak
           (zero >= 3 ? " bytes (peak " + std::to_string(ppeak) + ")" : " bytes") +
           ", gradients " + std::to_string(gb) +
           // ZeRO-2: the share held between steps, and the step's peak
           (zero >= 2 ? " bytes (peak " + std::to_string(gpeak) + ")" : " bytes") +
           ", optimizer state " + std::to_string(ob) + " bytes" +
           (owned >= 0 ? " (ZeRO-" + std::to_string(std::max(zero, 1LL)) +
                             ": " + std::to_string(owned) + " of " +
                             std::to_string(held) + " tensors)"
                       : "") +
           "\n";
    out += "rank " + std::to_string(r) + ": peak stash " +
           std::to_string(peak) + " bytes" + ratio +
           (stages.empty() ? "" : " (one microbatch: " + stages + ")") + "\n";
    if (offloads > 0)
      out += "rank " + std::to_string(r) + ": activation offload: " +
             std::to_string(offloads) +
             " microbatch stashes per step to host memory, host peak " +
             std::to_string(hostPeak) + " bytes\n";
    // Every backend buffer the executor allocated: the peak of their sum,
    // and the peaks of the classes the lines above do not show.
    out += "rank " + std::to_string(r) + ": buffers peak " +
           std::to_string(total) + " bytes + optimizer state " +
           std::to_string(ob) + " = " + std::to_string(total + ob) +
           " bytes (peaks: messages " + std::to_string(msgs) +
           ", workspace " + std::to_string(work) + ", tokens " +
           std::to_string(dataB) + ")\n";
    // Device backends: what the last step copied between host and device
    // (tokens, the loss, staged messages; with the optimizer on the host,
    // every parameter and gradient too).
    if (device > 0 && steps > 0)
      out += "rank " + std::to_string(r) + ": step " + std::to_string(steps) +
             " copied " + std::to_string(toDev) + " bytes to the device, " +
             std::to_string(toHost) + " bytes to the host (optimizer on the " +
             (optDev ? "device" : "host") + ")\n";
  }
  return out;
}
void Executor::setStepsDone(int64_t s) { impl->stepNo = s; }

std::vector<int32_t> Executor::localParams() const {
  std::vector<int32_t> r;
  for (auto &[i, ps] : impl->params)
    r.push_back(i);
  return r;
}
std::vector<int32_t> Executor::optimizerParams() const {
  std::vector<int32_t> r;
  for (auto &[i, ps] : impl->params)
    if (impl->ownsState(i))
      r.push_back(i);
  return r;
}
std::vector<int64_t> Executor::paramShape(int32_t i) const {
  if (!impl->params.count(i))
    return {};
  std::vector<int64_t> shape = impl->prog.params[size_t(i)].type.shape;
  if (impl->expertParams.count(i))
    shape[0] /= impl->E;
  return shape;
}
int64_t Executor::paramElems(int32_t i) const {
  return impl->params.count(i) ? impl->localElems(i) : 0;
}
float *Executor::paramData(int32_t i) {
  auto it = impl->params.find(i);
  if (it == impl->params.end() ||
      (!it->second.value && it->second.hostValue.empty()))
    return nullptr; // ZeRO-3: not gathered
  return impl->hostValue(it->second);
}
float *Executor::gradData(int32_t i) {
  auto it = impl->params.find(i);
  return it == impl->params.end() || !it->second.grad
             ? nullptr
             : impl->hostGrad(it->second);
}
float *Executor::paramDevice(int32_t i) {
  auto it = impl->params.find(i);
  return it == impl->params.end() || !it->second.value
             ? nullptr
             : it->second.value->f();
}
float *Executor::gradDevice(int32_t i) {
  auto it = impl->params.find(i);
  return it == impl->params.end() || !it->second.grad
             ? nullptr
             : it->second.grad->f();
}
Status Executor::pullValues() {
  if (!impl->optOnDevice())
    return Status::ok();
  for (auto &[i, ps] : impl->params)
    if (ps.value)
      impl->be.copyToHost(ps.hostValue.data(), ps.value->p, ps.value->bytes);
  return impl->be.takeAsyncError();
}
Status Executor::pushValues() {
  if (!impl->optOnDevice())
    return Status::ok();
  for (auto &[i, ps] : impl->params)
    if (ps.value)
      impl->be.copyFromHost(ps.value->p, ps.hostValue.data(), ps.value->bytes);
  return impl->be.takeAsyncError();
}
Status Executor::gatherParams() { return impl->gatherAllParams(); }
void Executor::releaseParams() { impl->releaseAllParams(); }
Status Executor::backendError() { return impl->be.takeAsyncError(); }

} // namespace pipeforge::rt
