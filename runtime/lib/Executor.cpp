//===- Executor.cpp - Interprets a rank's schedule each step --------------===//
//
// The action interpreter; the rest of the executor is in GradSync.cpp,
// ExecutorWeights.cpp and ExecutorTrace.cpp (ExecutorImpl.h).
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include "pipeforge/rt/Data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

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
  tok = std::make_shared<Buf>(be, b * s * 4);
  tgt = std::make_shared<Buf>(be, b * s * 4);
  be.copyFromHost(tok->p, ht.data(), b * s * 4);
  be.copyFromHost(tgt->p, hg.data(), b * s * 4);
  tokens[{c, mb}] = {tok, tgt};
  return Status::ok();
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

/// Runs function `which` (0 F, 1 B, 2 W, 3 BW) of `st` for microbatch mb.
Status Executor::Impl::runFunction(const Stage &st, int which, int c, int mb,
                                   const std::vector<BufP> *stashIn,
                                   const std::vector<BufP> *wstashIn,
                                   float *gradIn, std::vector<BufP> *stashOut,
                                   std::vector<BufP> *wstashOut, BufP *actOut,
                                   BufP *gradOut) {
  FnRun r;
  r.st = &st;
  r.which = which;
  r.c = c;
  r.mb = mb;
  r.stashIn = stashIn;
  r.wstashIn = wstashIn;
  r.gradIn = gradIn;
  r.stashOut = stashOut;
  r.wstashOut = wstashOut;
  r.actOut = actOut;
  r.gradOut = gradOut;
  if (Status s = fnBegin(r); !s)
    return s;
  // Kernels, back to back (a moe kernel's phases too).
  while (!r.done()) {
    bool posted = false;
    if (Status s = fnStep(r, posted); !s)
      return s;
  }
  return fnResults(r);
}

Status Executor::Impl::fnError(const FnRun &r, const std::string &m) {
  const char *fnName[4] = {"F", "B", "W", "BW"};
  return stageError(r.c, r.st->index,
                    std::string(fnName[r.which]) + " mb " +
                        std::to_string(r.mb) + ": " + m);
}

Status Executor::Impl::fnBegin(FnRun &r) {
  const Stage &st = *r.st;
  const Function *fns[4] = {&st.forward, &st.backwardInput, &st.backwardWeight,
                            &st.backward};
  r.fn = fns[r.which];
  r.plan = &plans[{st.copy, st.index}][r.which];
  const Function &fn = *r.fn;
  const int c = r.c, mb = r.mb;
  auto &ptr = r.ptr;
  ptr.assign(fn.values.size(), nullptr);
  if (r.label.empty()) {
    const char *fnName[4] = {"F", "B", "W", "BW"};
    r.label = std::string(fnName[r.which]) + std::to_string(st.index) + "." +
              std::to_string(mb) + (c ? "c" + std::to_string(c) : "");
  }
  auto err = [&](const std::string &m) { return fnError(r, m); };
  BufP &tok = r.tok, &tgt = r.tgt, &actIn = r.actIn;
  const std::vector<BufP> *stashIn = r.stashIn, *wstashIn = r.wstashIn;
  float *gradIn = r.gradIn;
  for (const ArgBinding &a : fn.args) {
    if (a.value < 0 || size_t(a.value) >= ptr.size())
      return err("bad argument value id");
    switch (a.role) {
    case ArgRole::Activation: {
      if (!actIn) {
        auto res = takeInbox(Payload::Activation, c, st.index, mb);
        if (!res)
          return res.status();
        actIn = *res;
      }
      auto &off = actOffsets[{c, st.index - 1}];
      if (st.index == 0 || size_t(a.index) >= off.size())
        return err("activation argument #" + std::to_string(a.index) +
                   " has no producer");
      ptr[size_t(a.value)] =
          static_cast<char *>(actIn->p) + off[size_t(a.index)];
      break;
    }
    case ArgRole::Tokens:
    case ArgRole::Targets:
      if (Status s = dataFor(c, mb, tok, tgt); !s)
        return s;
      ptr[size_t(a.value)] = (a.role == ArgRole::Tokens ? tok : tgt)->p;
      break;
    case ArgRole::Param: {
      auto it = params.find(a.index);
      if (it == params.end())
        return err("parameter #" + std::to_string(a.index) +
                   " is not on this rank");
      ptr[size_t(a.value)] = it->second.value->p;
      break;
    }
    case ArgRole::Stash:
    case ArgRole::WStash: {
      auto *v = a.role == ArgRole::Stash ? stashIn : wstashIn;
      if (!v || size_t(a.index) >= v->size() || !(*v)[size_t(a.index)])
        return err(std::string(a.role == ArgRole::Stash ? "stash" : "w-stash") +
                   " slot " + std::to_string(a.index) + " is missing");
      ptr[size_t(a.value)] = (*v)[size_t(a.index)]->p;
      break;
    }
    case ArgRole::GradIn:
      if (!gradIn)
        return err("no incoming gradient");
      ptr[size_t(a.value)] =
          st.index == numStages - 1
              ? static_cast<void *>(gradIn)
              : static_cast<void *>(
                    reinterpret_cast<char *>(gradIn) +
                    actOffsets[{c, st.index}].at(size_t(a.index)));
      break;
    }
  }
  r.next = 0;
  return Status::ok();
}

Status Executor::Impl::fnPrepare(FnRun &r) {
  const Function &fn = *r.fn;
  FnPlan &plan = *r.plan;
  auto &ptr = r.ptr;
  auto err = [&](const std::string &m) { return fnError(r, m); };
  auto valuePtr = [&](int32_t v) -> void * {
    if (ptr[size_t(v)])
      return ptr[size_t(v)];
    size_t b = plan.perValue ? size_t(v) : size_t(fn.buffer[size_t(v)]);
    int64_t bytes =
        plan.perValue ? fn.values[size_t(v)].numBytes() : fn.bufferBytes[b];
    if (!plan.bufs[b])
      plan.bufs[b] = std::make_unique<Buf>(be, std::max<int64_t>(bytes, 4));
    return ptr[size_t(v)] = plan.bufs[b]->p;
  };
  const Kernel &k = fn.kernels[r.next];
  KernelCall &call = r.call;
  call.kernel = &k;
  call.in.clear();
  call.inTypes.clear();
  call.out.clear();
  call.outTypes.clear();
  for (int32_t v : k.inputs) {
    if (v >= int32_t(ptr.size()))
      return err("bad value id in kernel '" + k.op + "'");
    if (v >= 0 && !ptr[size_t(v)])
      return err("kernel '" + k.op + "' reads value " + std::to_string(v) +
                 " before it is defined");
    call.in.push_back(v >= 0 ? ptr[size_t(v)] : nullptr);
    call.inTypes.push_back(v >= 0 ? &fn.values[size_t(v)] : nullptr);
  }
  for (int32_t v : k.outputs) {
    if (v >= int32_t(ptr.size()))
      return err("bad value id in kernel '" + k.op + "'");
    // A new definition: (re)bind to the value's own buffer.
    if (v >= 0)
      ptr[size_t(v)] = nullptr;
    call.out.push_back(v >= 0 ? valuePtr(v) : nullptr);
    call.outTypes.push_back(v >= 0 ? &fn.values[size_t(v)] : nullptr);
  }
  return Status::ok();
}

void Executor::Impl::recordMoE(const FnRun &r, MoEPhased &m,
                               const std::string &name) {
  for (const MoEPhased::CommTiming &t : m.timings) {
    a2aWaited += t.waitEnd - t.waitStart;
    if (opts.trace) {
      char wa[64];
      std::snprintf(wa, sizeof wa, "\"wait_us\":%.3f,\"a2a\":1",
                    (t.waitEnd - t.waitStart) * 1e6);
      record(name + " " + t.what, 1, t.posted, t.waitEnd, wa);
    }
  }
  m.timings.clear();
}

const KernelCall &Executor::Impl::stageToHost(FnRun &r) {
  auto h = std::make_unique<FnRun::HostCall>();
  h->call = r.call;
  const KernelCall &c = r.call;
  h->in.reserve(c.in.size());
  h->out.reserve(c.out.size());
  for (size_t i = 0; i < c.in.size(); ++i) {
    int64_t bytes = c.in[i] && c.inTypes[i] ? c.inTypes[i]->numBytes() : 0;
    // An expert weight is this rank's slice (its type is the whole tensor):
    // copy the slice; the staged buffer keeps the type's size.
    int64_t copyBytes = bytes;
    if (E > 1 && isMoEExpertOperand(c.kernel->op, c.in.size(), i))
      copyBytes = bytes / E;
    h->in.emplace_back(static_cast<size_t>(bytes));
    if (copyBytes)
      be.copyToHost(h->in.back().data(), c.in[i], copyBytes);
    h->call.in[i] = c.in[i] ? h->in.back().data() : nullptr;
  }
  for (size_t i = 0; i < c.out.size(); ++i) {
    int64_t bytes = c.out[i] && c.outTypes[i] ? c.outTypes[i]->numBytes() : 0;
    h->out.emplace_back(static_cast<size_t>(bytes));
    h->call.out[i] = c.out[i] ? h->out.back().data() : nullptr;
  }
  r.hostCall = std::move(h);
  return r.hostCall->call;
}

Status Executor::Impl::fnStep(FnRun &r, bool &posted) {
  posted = false;
  if (r.moe) {
    if (Status s = r.moe->next(); !s)
      return fnError(r, s.message());
  } else {
    if (Status s = fnPrepare(r); !s)
      return s;
    const Kernel &k = *r.call.kernel;
    if (!(E > 1 && isMoEOp(k.op))) {
      if (Status s = be.run(r.call); !s)
        return fnError(r, s.message());
      ++r.next;
      return Status::ok();
    }
    const KernelCall *call = &r.call;
    if (!be.hostVisible())
      call = &stageToHost(r);
    auto m = MoEPhased::begin(*call, tr);
    if (!m)
      return fnError(r, m.status().message());
    r.moe = std::move(*m);
  }
  recordMoE(r, *r.moe, r.label + " " + r.call.kernel->op);
  if (r.moe->done()) {
    r.moe.reset();
    if (r.hostCall) { // results back to the device
      for (size_t i = 0; i < r.call.out.size(); ++i)
        if (r.call.out[i])
          be.copyFromHost(r.call.out[i], r.hostCall->out[i].data(),
                          int64_t(r.hostCall->out[i].size()));
      r.hostCall.reset();
    }
    ++r.next;
  } else {
    posted = true;
  }
  return Status::ok();
}

Status Executor::Impl::fnResults(FnRun &r) {
  const Function &fn = *r.fn;
  const Stage &st = *r.st;
  const int c = r.c, mb = r.mb;
  auto &ptr = r.ptr;
  auto err = [&](const std::string &m) { return fnError(r, m); };
  BufP *actOut = r.actOut, *gradOut = r.gradOut;
  std::vector<BufP> *stashOut = r.stashOut, *wstashOut = r.wstashOut;
  // Results.
  for (const ResultBinding &r : fn.results) {
    if (r.value < 0 || size_t(r.value) >= ptr.size() || !ptr[size_t(r.value)])
      return err("result value " + std::to_string(r.value) + " is undefined");
    void *src = ptr[size_t(r.value)];
    int64_t bytes = fn.values[size_t(r.value)].numBytes();
    switch (r.role) {
    case ResultRole::Activation: {
      auto &off = actOffsets[{c, st.index}];
      if (!*actOut)
        *actOut = std::make_shared<Buf>(
            be, std::max<int64_t>(actBytes[{c, st.index}], 4));
      be.copy(static_cast<char *>((*actOut)->p) + off.at(size_t(r.index)), src,
              bytes);
      break;
    }
    case ResultRole::GradOut: {
      if (st.index == 0)
        return err("gradient result on the first stage");
      auto &off = actOffsets[{c, st.index - 1}];
      if (size_t(r.index) >= off.size())
        return err("gradient result #" + std::to_string(r.index) +
                   " has no activation");
      if (!*gradOut)
        *gradOut = std::make_shared<Buf>(
            be, std::max<int64_t>(actBytes[{c, st.index - 1}], 4));
      be.copy(static_cast<char *>((*gradOut)->p) + off[size_t(r.index)], src,
              bytes);
      break;
    }
    case ResultRole::Loss: {
      float l = 0;
      be.copyToHost(&l, src, 4);
      lossSum += l;
      ++lossCount;
      break;
    }
    case ResultRole::Stash:
    case ResultRole::WStash: {
      auto *v = r.role == ResultRole::Stash ? stashOut : wstashOut;
      if (!v)
        return err("unexpected stash result");
      if (v->size() <= size_t(r.index))
        v->resize(size_t(r.index) + 1);
      auto b = std::make_shared<Buf>(be, std::max<int64_t>(bytes, 4));
      be.copy(b->p, src, bytes);
      (*v)[size_t(r.index)] = b;
      break;
    }
    case ResultRole::ParamGrad: {
      auto it = params.find(r.index);
      if (it == params.end())
        return err("gradient of parameter #" + std::to_string(r.index) +
                   " which is not on this rank");
      if (prog.params[size_t(r.index)].type.numBytes() != bytes)
        return err("gradient size of parameter '" +
                   prog.params[size_t(r.index)].name + "' differs");
      // Expert params: the kernel wrote this rank's slice first.
      be.accumulate(it->second.grad->f(), static_cast<const float *>(src),
                    localElems(r.index));
      if (nanPending && st.index == numStages - 1 &&
          int64_t(tr.dpIndex()) * totalMb + int64_t(c) * mPerCopy + mb ==
              opts.injectNanMb) {
        float nan = std::nanf("");
        be.copyFromHost(it->second.grad->p, &nan, 4);
        nanPending = false;
      }
      break;
    }
    }
  }
  return Status::ok();
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

Status Executor::Impl::finishF(const Work &w, std::vector<BufP> &st_out,
                               BufP act) {
  stash[{w.copy, w.stage, w.mb}] = std::move(st_out);
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
  wstash[key] = std::move(ws);
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
  auto b = std::make_shared<Buf>(
      be, std::max<int64_t>(actBytes[{w.copy, layoutStage}], 4));
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

Status Executor::Impl::gradReduce(const Action &a) {
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
  return Status::ok();
}

Expected<StepStats> Executor::Impl::step() {
  if (Status s = tr.barrier(Group::Pipeline); !s)
    return s;
  double t0 = nowS();
  for (auto &[i, ps] : params) {
    be.fillZero(ps.grad->p, ps.grad->bytes);
    if (!be.hostVisible())
      be.copyFromHost(ps.value->p, ps.hostValue.data(), ps.value->bytes);
  }
  stash.clear();
  wstash.clear();
  inbox.clear();
  outbox.clear();
  tokens.clear();
  posted.clear();
  lossSum = 0;
  lossCount = 0;
  busy = 0;
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
    waited = 0;
    a2aWaited = 0;
    bool fusedRun = false;
    double a0 = nowS();
    Status s = Status::ok();
    switch (a.kind) {
    case ActionKind::Compute:
      s = compute(a.work);
      break;
    case ActionKind::Overlap:
      s = doOverlap(a, fusedRun);
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
  }
  double loopEnd = nowS();
  for (PendingSend &ps : sends) {
    if (Status s = tr.wait(ps.req); !s)
      return s;
    record(ps.label, 1, ps.posted, nowS());
  }
  sends.clear();
  // A kernel's asynchronous error (device backends) fails the step here.
  if (Status s = be.takeAsyncError(); !s)
    return s;
  if (opts.trace) {
    // One event per step on tid 2: the schedule part (barrier exit to the
    // last send's completion); drain = waiting for sends after the last action.
    double t1 = nowS();
    char sa[96];
    std::snprintf(sa, sizeof sa, "\"actions\":%zu,\"drain_us\":%.3f",
                  acts.size(), (t1 - loopEnd) * 1e6);
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

Executor::Executor(std::unique_ptr<Impl> i) : impl(std::move(i)) {}
Executor::~Executor() = default;

Expected<std::unique_ptr<Executor>> Executor::create(const Program &prog,
                                                     Backend &be, Transport &tr,
                                                     TokenSource &data,
                                                     StepOptimizer &opt,
                                                     const ExecutorOptions &o) {
  if (tr.pipelineSize() != prog.schedule.numRanks())
    return Status::error("transport has " + std::to_string(tr.pipelineSize()) +
                         " pipeline ranks, the program " +
                         std::to_string(prog.schedule.numRanks()));
  auto impl = std::make_unique<Impl>(prog, be, tr, data, opt, o);
  if (Status s = impl->init(); !s)
    return s;
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

Expected<StepStats> Executor::step() { return impl->step(); }
int64_t Executor::stepsDone() const { return impl->stepNo; }
void Executor::setStepsDone(int64_t s) { impl->stepNo = s; }

std::vector<int32_t> Executor::localParams() const {
  std::vector<int32_t> r;
  for (auto &[i, ps] : impl->params)
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
  return it == impl->params.end() ? nullptr : impl->hostValue(it->second);
}
float *Executor::gradData(int32_t i) {
  auto it = impl->params.find(i);
  return it == impl->params.end() ? nullptr : impl->hostGrad(it->second);
}

} // namespace pipeforge::rt
