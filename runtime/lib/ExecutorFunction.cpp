//===- ExecutorFunction.cpp - Runs one stage function for a microbatch ----===//
//
// The inner interpreter: binds a program function's arguments (received
// activations, tokens, parameters, stashes, the incoming gradient) to
// buffers, runs its kernels in order on the backend (an expert-parallel moe
// kernel as phases around its all-to-alls, staged through the host on
// device backends), and hands its results to the caller (the outgoing
// activation or gradient, the stashes B and W read later). A function can
// also be stepped one kernel at a time (fnBegin / fnStep / fnResults), which
// is how ExecutorOverlap.cpp interleaves an F and a B.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include "pipeforge/rt/OpShapes.h"

#include "cpu/DropoutRng.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace pipeforge::rt {

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
  r.earlyGrads = earlyGradRun(r);
  // Kernels, back to back (a moe kernel's phases too); with the gradient
  // reduction overlapped, each kernel's parameter gradients go at once.
  while (!r.done()) {
    bool posted = false;
    size_t k = r.next;
    if (Status s = fnStep(r, posted); !s)
      return s;
    if (r.earlyGrads && r.next > k)
      if (Status s = takeEarlyGrads(r, k); !s)
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
  auto dg = directGrads.find(r.fn);
  r.direct = dg == directGrads.end() ? nullptr : &dg->second;
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
      if (!it->second.value)
        return err("parameter '" + prog.params[size_t(a.index)].name +
                   "' is not gathered (ZeRO-3: no UNSHARD before its use)");
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
    // Not cleared: every kernel writes the whole of each output it defines
    // (Backend::run), and a value is read only after its definition.
    if (!plan.bufs[b])
      plan.bufs[b] =
          std::make_unique<Buf>(be, std::max<int64_t>(bytes, 4), &ledger,
                                MemClass::Workspace, /*clear=*/false);
    return ptr[size_t(v)] = plan.bufs[b]->p;
  };
  const Kernel &k = fn.kernels[r.next];
  KernelCall &call = r.call;
  call.kernel = &k;
  call.rngKey =
      dropout::stepKey(prog.training.seed, stepNo, globalMicrobatch(r.c, r.mb));
  call.in.clear();
  call.inTypes.clear();
  call.out.clear();
  call.outTypes.clear();
  call.addTo = 0;
  call.docStart = nullptr;
  call.docTokens = 0;
  if (opts.docMask &&
      (k.kind == OpKind::Attention || k.kind == OpKind::AttentionBwd)) {
    auto d = docsFor(r.c, r.mb);
    if (!d)
      return err(d.message());
    call.docStart = (*d)->data();
    call.docTokens = int64_t((*d)->size());
  }
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
    // A new definition: (re)bind to the value's own buffer, or a gradient
    // the kernel adds straight to its parameter's (planDirectGrads).
    if (v >= 0)
      ptr[size_t(v)] = nullptr;
    if (v >= 0 && r.direct && r.direct->param[size_t(v)] >= 0) {
      // The step's first write of the gradient overwrites it (the kernel
      // without its addTo bit: on the CPU it clears the output itself and
      // adds, the bits of the cleared buffer), later ones add.
      ParamState &ps = params.at(r.direct->param[size_t(v)]);
      if (ps.gradWritten)
        call.addTo |= 1u << call.out.size();
      ps.gradWritten = true;
      ptr[size_t(v)] = ps.grad->p;
      call.out.push_back(ptr[size_t(v)]);
    } else {
      call.out.push_back(v >= 0 ? valuePtr(v) : nullptr);
    }
    call.outTypes.push_back(v >= 0 ? &fn.values[size_t(v)] : nullptr);
  }
  bindMoEBias(call, r.which);
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
  // Values bound to a parameter the program marks expert-sharded.
  std::set<int32_t> sharded;
  for (const ArgBinding &a : r.fn->args)
    if (a.role == ArgRole::Param && expertParams.count(a.index))
      sharded.insert(a.value);
  for (size_t i = 0; i < c.in.size(); ++i) {
    int64_t bytes = c.in[i] && c.inTypes[i] ? c.inTypes[i]->numBytes() : 0;
    // An expert weight is this rank's slice (its type is the whole tensor):
    // copy the slice; the staged buffer keeps the type's size.
    int64_t copyBytes = bytes;
    if (E > 1 && sharded.count(c.kernel->inputs[i]))
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

/// A tensor-parallel kernel, blocking on the group's collectives: the
/// collectives in place on the backend's memory where the transport reduces
/// there (NCCL), else on host memory (staged from a device backend); the
/// vocabulary-parallel loss always on the host.
Status Executor::Impl::runTensorParallel(FnRun &r) {
  double t0 = nowS();
  Status s = Status::ok();
  const OpKind kind = r.call.kernel->kind;
  const bool loss = kind == OpKind::VocabParallelCrossEntropy ||
                    kind == OpKind::VocabParallelCrossEntropyBwd;
  if (!be.hostVisible() && tr.deviceCollectives() && !loss) {
    s = runTensorParallelDevice(r.call);
  } else {
    const KernelCall *call = &r.call;
    if (!be.hostVisible())
      call = &stageToHost(r);
    s = runTensorParallelKernel(*call, tr);
  }
  if (opts.trace)
    record(r.label + " " + r.call.kernel->op, 1, t0, nowS(), "\"tp\":1");
  if (r.hostCall) {
    for (size_t i = 0; s && i < r.call.out.size(); ++i)
      if (r.call.out[i])
        be.copyFromHost(r.call.out[i], r.hostCall->out[i].data(),
                        int64_t(r.hostCall->out[i].size()));
    r.hostCall.reset();
  }
  return s;
}

/// The collectives nn.tp_* on device memory (Transport::*Device). A
/// gather or scatter along an inner dimension moves each member's blocks
/// between the tensor's layout and the collective's member-major one with
/// device copies through a scratch buffer.
Status Executor::Impl::runTensorParallelDevice(const KernelCall &c) {
  const Kernel &k = *c.kernel;
  const int T = tr.tpSize();
  auto err = [&](const std::string &m) {
    return Status::error("kernel '" + k.op + "': " + m);
  };
  const float *x = static_cast<const float *>(c.in[0]);
  float *y = static_cast<float *>(c.out[0]);
  const int64_t n = c.inTypes[0]->numElements();
  if (k.kind == OpKind::TPCopy || k.kind == OpKind::TPAllReduce) {
    if (y != x)
      be.copy(y, x, n * 4);
    return k.kind == OpKind::TPCopy ? Status::ok()
                                    : tr.allreduceDevice(y, n, Group::Tensor);
  }
  if (k.kind != OpKind::TPAllGather && k.kind != OpKind::TPReduceScatter)
    return err("not a tensor-parallel collective");
  auto l = tpSlices(c, T);
  if (!l)
    return l.status();
  // Member-major scratch on the device, permuted by device copies.
  BufP tmp =
      newBuf(std::max<int64_t>(T * l->part, 1) * 4, MemClass::Messages);
  float *mm = tmp->f();
  const int64_t bytes = l->shard * 4;
  if (k.kind == OpKind::TPAllGather) {
    if (Status s = tr.allGatherDevice(x, mm, l->part, Group::Tensor); !s)
      return s;
    for (int r = 0; r < T; ++r)
      for (int64_t o = 0; o < l->outer; ++o)
        be.copy(y + l->inWhole(r, o), mm + l->inMembers(r, o), bytes);
    return Status::ok();
  }
  for (int r = 0; r < T; ++r)
    for (int64_t o = 0; o < l->outer; ++o)
      be.copy(mm + l->inMembers(r, o), x + l->inWhole(r, o), bytes);
  return tr.reduceScatterDevice(mm, y, l->part, Group::Tensor);
}

Status Executor::Impl::fnStep(FnRun &r, bool &posted) {
  posted = false;
  // --trace on a host backend (its kernels are synchronous): the step's
  // time per op kind (a phased moe's without its all-to-all waits).
  const bool timed = opts.trace && be.hostVisible();
  const double t0 = timed ? nowS() : 0;
  if (r.moe) {
    if (Status s = r.moe->next(); !s)
      return fnError(r, s.message());
  } else {
    if (Status s = fnPrepare(r); !s)
      return s;
    const Kernel &k = *r.call.kernel;
    if (T > 1 && opSpec(k.kind).collective) {
      if (Status s = runTensorParallel(r); !s)
        return fnError(r, s.message());
      ++r.next;
      return Status::ok();
    }
    if (runsOnBackend(k)) {
      const double t1 = timed ? nowS() : 0;
      if (Status s = be.run(r.call); !s)
        return fnError(r, s.message());
      if (timed)
        opSeconds[size_t(k.kind)] += nowS() - t1;
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
  if (timed) {
    double waits = 0;
    for (const MoEPhased::CommTiming &t : r.moe->timings)
      waits += t.waitEnd - t.waitStart;
    opSeconds[size_t(r.call.kernel->kind)] +=
        std::max(0.0, nowS() - t0 - waits);
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

Status Executor::Impl::fnResults(FnRun &run) {
  const Function &fn = *run.fn;
  const Stage &st = *run.st;
  const int c = run.c;
  auto &ptr = run.ptr;
  auto err = [&](const std::string &m) { return fnError(run, m); };
  BufP *actOut = run.actOut, *gradOut = run.gradOut;
  std::vector<BufP> *stashOut = run.stashOut, *wstashOut = run.wstashOut;
  // Results (gradients the overlapped reduction took early: already added).
  for (size_t k = 0; k < fn.results.size(); ++k) {
    if (k < run.taken.size() && run.taken[k])
      continue;
    const ResultBinding &r = fn.results[k];
    if (r.value < 0 || size_t(r.value) >= ptr.size() || !ptr[size_t(r.value)])
      return err("result value " + std::to_string(r.value) + " is undefined");
    void *src = ptr[size_t(r.value)];
    int64_t bytes = fn.values[size_t(r.value)].numBytes();
    switch (r.role) {
    case ResultRole::Activation: {
      auto &off = actOffsets[{c, st.index}];
      if (!*actOut)
        *actOut = newMessage(run, ResultRole::Activation, c, st.index);
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
        *gradOut = newMessage(run, ResultRole::GradOut, c, st.index - 1);
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
      (*v)[size_t(r.index)] = stashResult(run, r.value, src, bytes);
      break;
    }
    case ResultRole::ParamGrad:
      if (Status s = accumulateParamGrad(run, k); !s)
        return s;
      break;
    }
  }
  return Status::ok();
}

/// Whether the backend runs `k` (Backend::run): all but the moe kernels
/// expert parallelism splits (MoEPhased runs those, and overwrites its
/// outputs: canAddTo does not apply to them).
bool Executor::Impl::runsOnBackend(const Kernel &k) const {
  return !(E > 1 && isMoEOp(k.kind)) || localMoE.count(&k);
}

void Executor::Impl::planDirectGrads() {
  // A ParamGrad result goes straight into its parameter's gradient when the
  // backend's kernel can add to it (Backend::canAddTo) and nothing else
  // could tell the difference: the value is defined once, by that kernel,
  // read by no kernel, bound to no argument and to no other result; its
  // parameter is local and whole (not an expert slice) and the function
  // has no other result for it (two would add in kernel order, not result
  // order). The step's first write runs without the addTo bit (step() does
  // not clear the gradients: ParamState::gradWritten, fnPrepare); the
  // overlapped reduction (GradOverlap.cpp) reads the gradient after the
  // kernel, as after accumulateParamGrad.
  directGrads.clear();
  for (const Stage &st : prog.stages)
    for (const Function *fn : {&st.forward, &st.backwardInput,
                               &st.backwardWeight, &st.backward}) {
      const size_t nv = fn->values.size();
      std::vector<int> defs(nv, 0), uses(nv, 0);
      std::vector<std::pair<int, size_t>> def(nv, {-1, 0});
      for (size_t k = 0; k < fn->kernels.size(); ++k) {
        const Kernel &kn = fn->kernels[k];
        for (int32_t v : kn.inputs)
          if (v >= 0 && size_t(v) < nv)
            ++uses[size_t(v)];
        for (size_t i = 0; i < kn.outputs.size(); ++i) {
          int32_t v = kn.outputs[i];
          if (v >= 0 && size_t(v) < nv)
            ++defs[size_t(v)], def[size_t(v)] = {int(k), i};
        }
      }
      for (const ArgBinding &a : fn->args)
        if (a.value >= 0 && size_t(a.value) < nv)
          ++uses[size_t(a.value)];
      std::map<int32_t, int> perParam;
      for (const ResultBinding &r : fn->results) {
        if (r.value >= 0 && size_t(r.value) < nv)
          ++uses[size_t(r.value)];
        if (r.role == ResultRole::ParamGrad)
          ++perParam[r.index];
      }
      DirectGrads d;
      d.param.assign(nv, -1);
      d.result.assign(fn->results.size(), false);
      bool any = false;
      for (size_t k = 0; k < fn->results.size(); ++k) {
        const ResultBinding &r = fn->results[k];
        if (r.role != ResultRole::ParamGrad || r.value < 0 ||
            size_t(r.value) >= nv || perParam[r.index] != 1)
          continue;
        const size_t v = size_t(r.value);
        // uses: the result itself only.
        if (defs[v] != 1 || uses[v] != 1 || def[v].second >= 32 ||
            !params.count(r.index) ||
            localElems(r.index) !=
                prog.params[size_t(r.index)].type.numElements() ||
            prog.params[size_t(r.index)].type.numBytes() !=
                fn->values[v].numBytes() ||
            !runsOnBackend(fn->kernels[size_t(def[v].first)]) ||
            !be.canAddTo(fn->kernels[size_t(def[v].first)], def[v].second))
          continue;
        d.param[v] = r.index;
        d.result[k] = true;
        any = true;
      }
      if (any)
        directGrads[fn] = std::move(d);
    }
}

BufP Executor::Impl::stashResult(FnRun &run, int32_t value, const void *src,
                                 int64_t bytes) {
  // The value's workspace buffer itself when it holds just this value: the
  // stash takes it and the function allocates a fresh one on its next run
  // (no copy). Else (a parameter or an argument, a buffer shared with a
  // larger value, or one already handed over by another result) a copy.
  const FnPlan &plan = *run.plan;
  size_t b =
      plan.perValue ? size_t(value) : size_t(run.fn->buffer[size_t(value)]);
  const int64_t want = std::max<int64_t>(bytes, 4);
  std::unique_ptr<Buf> &ws = run.plan->bufs[b];
  if (ws && ws->p == src && ws->bytes == want) {
    ws->reclassify(MemClass::Stash);
    return BufP(std::move(ws));
  }
  BufP out = newBuf(want, MemClass::Stash, /*clear=*/false);
  be.copy(out->p, src, bytes);
  return out;
}

BufP Executor::Impl::newMessage(const FnRun &run, ResultRole role, int c,
                                int layoutStage) {
  // The function's results of `role` fill their slots (copies of the
  // values); the slots' 64-byte padding and any slot without a result are
  // cleared, so that a message never carries undefined bytes.
  const std::vector<int64_t> &off = actOffsets[{c, layoutStage}];
  const int64_t total = actBytes[{c, layoutStage}];
  BufP m = newBuf(std::max<int64_t>(total, 4), MemClass::Messages,
                  /*clear=*/false);
  std::vector<int64_t> written(off.size(), 0);
  for (const ResultBinding &r : run.fn->results)
    if (r.role == role && r.index >= 0 && size_t(r.index) < off.size() &&
        r.value >= 0 && size_t(r.value) < run.fn->values.size())
      written[size_t(r.index)] = run.fn->values[size_t(r.value)].numBytes();
  char *p = static_cast<char *>(m->p);
  for (size_t i = 0; i < off.size(); ++i) {
    int64_t end = i + 1 < off.size() ? off[i + 1] : total;
    int64_t from = std::min(off[i] + written[i], end);
    if (end > from)
      be.fillZero(p + from, end - from);
  }
  if (off.empty() || total < 4)
    be.fillZero(p, std::max<int64_t>(total, 4));
  return m;
}

Status Executor::Impl::accumulateParamGrad(FnRun &run, size_t k) {
  const ResultBinding &r = run.fn->results[k];
  auto err = [&](const std::string &m) { return fnError(run, m); };
  if (r.value < 0 || size_t(r.value) >= run.ptr.size() ||
      !run.ptr[size_t(r.value)])
    return err("result value " + std::to_string(r.value) + " is undefined");
  const void *src = run.ptr[size_t(r.value)];
  auto it = params.find(r.index);
  if (it == params.end())
    return err("gradient of parameter #" + std::to_string(r.index) +
               " which is not on this rank");
  if (prog.params[size_t(r.index)].type.numBytes() !=
      run.fn->values[size_t(r.value)].numBytes())
    return err("gradient size of parameter '" +
               prog.params[size_t(r.index)].name + "' differs");
  // Expert params: the kernel wrote this rank's slice first. A gradient
  // written straight into place is there already. The step's first write
  // copies (step() does not clear the gradients): the bits of 0 + x but
  // for a -0.0, which stays -0.0 (the gradient kernels form their sums
  // from +0.0; the norm squares it, AdamW's moments and the reductions'
  // sums are the same with either zero).
  if (!run.direct || !run.direct->result[k]) {
    ParamState &ps = it->second;
    if (ps.gradWritten)
      be.accumulate(ps.grad->f(), static_cast<const float *>(src),
                    localElems(r.index));
    else
      be.copy(ps.grad->p, src, localElems(r.index) * 4);
    ps.gradWritten = true;
  }
  if (nanPending && run.st->index == numStages - 1 &&
      int64_t(tr.dpIndex()) * totalMb + int64_t(run.c) * mPerCopy + run.mb ==
          opts.injectNanMb) {
    float nan = std::nanf("");
    be.copyFromHost(it->second.grad->p, &nan, 4);
    nanPending = false;
  }
  return Status::ok();
}

} // namespace pipeforge::rt
