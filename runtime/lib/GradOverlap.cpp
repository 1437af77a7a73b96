//===- GradOverlap.cpp - Data-parallel gradient reduction during the step -===//
//
// ExecutorOptions::overlapGradReduce (docs/runtime.md, "Overlapped gradient
// reduction"). A stage's gradients are final after its last gradient work
// of the step (the last W or BW of any microbatch; DualPipe: the
// GradReduce that adds the other copy's). From that action on, each
// parameter's gradient is handed to a bucket; inside the last W/BW
// function itself kernel by kernel, as each kernel produces gradients, so
// the reduction of the stage's last layers runs while its first layers'
// weight gradients are still computed (PyTorch DDP's and Megatron's
// --overlap-grad-reduce bucketing). A bucket is posted with the
// transport's non-blocking allreduce once it holds gradBucketBytes, and at
// the end of the action; the step's end waits for all buckets, unpacks
// them and reduces the parameters no bucket took (GradSync.cpp).
//
// The sums are those of the reduction after the step bit for bit: every
// element is summed over the replicas in member order whatever bucket it is
// in, and the division by dp comes after. The posting order depends only
// on the program, so every replica posts the same buckets in the same
// order (the collective ordering the transports need).
//
// ZeRO-1: a bucket is an all-to-all to the parameters' owners instead
// (each owner sums its parameters' gradients in member order: the bits of
// reduceGradsToOwners). ZeRO-2: once packed, the gradients of parameters
// another replica owns are released (until the next step).
//
// Not overlapped (reduced after the step as before): tied parameters
// (their two copies are summed first) and sequence-parallel partial
// gradients (summed over the tensor group first).
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include <algorithm>
#include <cstdio>

namespace pipeforge::rt {

void Executor::Impl::planGradOverlap() {
  overlapOn = opts.overlapGradReduce && tr.dpSize() > 1;
  if (!overlapOn)
    return;
  std::set<int32_t> tied;
  for (auto [target, copy] : ties) {
    tied.insert(target);
    tied.insert(copy);
  }
  for (auto &[i, ps] : params)
    if (!tied.count(i) && !(T > 1 && prog.params[size_t(i)].tpReduceGrad))
      overlapParams.insert(i);
  // The last action writing each stage's gradients.
  const std::vector<Action> &acts = prog.schedule.programs[size_t(prank)];
  std::map<std::pair<int, int>, size_t> last;
  size_t lastReduce = 0;
  bool anyReduce = false;
  auto writes = [&](const Work &w, size_t i) {
    if (w.kind != WorkKind::F)
      last[{w.copy, w.stage}] = i;
  };
  for (size_t i = 0; i < acts.size(); ++i) {
    const Action &a = acts[i];
    if (a.kind == ActionKind::Compute)
      writes(a.work, i);
    else if (a.kind == ActionKind::Overlap)
      writes(a.work2, i);
    else if (a.kind == ActionKind::GradReduce)
      lastReduce = i, anyReduce = true;
  }
  for (auto [cs, i] : last) {
    // After a GradReduce (DualPipe's copy sum) every local gradient is
    // final; kernel by kernel only inside a plain W or BW (B's function
    // must not write parameter gradients).
    const Stage &st = stageOf(cs.first, cs.second);
    bool bWrites = false;
    for (const ResultBinding &r : st.backwardInput.results)
      bWrites |= r.role == ResultRole::ParamGrad;
    if (anyReduce && lastReduce > i)
      gradFinal[cs] = {lastReduce, false};
    else
      gradFinal[cs] = {i, acts[i].kind == ActionKind::Compute && !bWrites};
  }
  // Each function's parameter gradients by the kernel that defines them.
  for (const Stage &st : prog.stages)
    for (const Function *fn : {&st.backwardWeight, &st.backward}) {
      std::vector<int> def(fn->values.size(), -1);
      for (size_t k = 0; k < fn->kernels.size(); ++k)
        for (int32_t v : fn->kernels[k].outputs)
          if (v >= 0 && size_t(v) < def.size())
            def[size_t(v)] = int(k);
      auto &by = gradByKernel[fn];
      by.assign(fn->kernels.size(), {});
      for (size_t r = 0; r < fn->results.size(); ++r) {
        const ResultBinding &b = fn->results[r];
        if (b.role == ResultRole::ParamGrad && b.value >= 0 &&
            size_t(b.value) < def.size() && def[size_t(b.value)] >= 0)
          by[size_t(def[size_t(b.value)])].push_back(r);
      }
    }
}

void Executor::Impl::beginGradOverlap() {
  buckets.clear();
  reducedEarly.clear();
  pendingParams.clear();
  pendingBytes = 0;
}

bool Executor::Impl::earlyGradRun(const FnRun &r) const {
  if (!overlapOn || (r.which != 2 && r.which != 3))
    return false;
  auto it = gradFinal.find({r.c, r.st->index});
  return it != gradFinal.end() && it->second.first == curAction &&
         it->second.second;
}

Status Executor::Impl::takeEarlyGrads(FnRun &r, size_t kernel) {
  auto by = gradByKernel.find(r.fn);
  if (by == gradByKernel.end() || kernel >= by->second.size())
    return Status::ok();
  for (size_t k : by->second[kernel]) {
    if (Status s = accumulateParamGrad(r, k); !s)
      return s;
    if (r.taken.size() < r.fn->results.size())
      r.taken.resize(r.fn->results.size(), false);
    r.taken[k] = true;
    if (Status s = gradReady(r.fn->results[k].index); !s)
      return s;
  }
  return Status::ok();
}

Status Executor::Impl::gradReady(int32_t i) {
  // With the pair sharded, what the other side updates is not reduced here.
  if (!overlapParams.count(i) || !sideUpdates(i) ||
      !reducedEarly.insert(i).second)
    return Status::ok();
  // A gradient nothing wrote this step (no kernel of the stage's functions
  // computes it) travels as zeros.
  clearUnwrittenGrad(params.at(i));
  pendingParams.push_back(i);
  pendingBytes += params.at(i).grad->bytes;
  return pendingBytes >= opts.gradBucketBytes ? postBucket() : Status::ok();
}

Status Executor::Impl::postBucket() {
  if (pendingParams.empty())
    return Status::ok();
  GradBucket b;
  b.params = std::move(pendingParams);
  pendingParams.clear();
  // In parameter order: ZeRO-1's owners read their parts in that order.
  std::sort(b.params.begin(), b.params.end());
  const int64_t n = pendingBytes / 4;
  pendingBytes = 0;
  b.posted = nowS();
  if (!stateOwner.empty()) { // ZeRO-1: to the owners
    std::vector<std::vector<float>> send(size_t(tr.dpSize()));
    for (int32_t i : b.params) {
      std::vector<float> &v = send[size_t(stateOwner.at(i))];
      size_t at = v.size();
      v.resize(at + size_t(localElems(i)));
      be.copyToHost(v.data() + at, params.at(i).grad->p, localElems(i) * 4);
      releaseGrad(i); // ZeRO-2: the owner's alone from here
    }
    b.owned = std::make_unique<std::vector<std::vector<float>>>();
    auto h = tr.allToAllStart(send, *b.owned, Group::DataParallel);
    if (!h)
      return h.status();
    b.req = *h;
    b.toOwners = true;
    buckets.push_back(std::move(b));
    return Status::ok();
  }
  const bool onDevice = !be.hostVisible() && tr.deviceCollectives();
  float *packed = nullptr;
  if (onDevice) {
    b.dev = newBuf(n * 4, MemClass::Messages);
    packed = b.dev->f();
  } else {
    b.host.resize(size_t(n));
    packed = b.host.data();
  }
  int64_t at = 0;
  for (int32_t i : b.params) {
    ParamState &ps = params.at(i);
    if (onDevice)
      be.copy(packed + at, ps.grad->p, ps.grad->bytes);
    else
      be.copyToHost(packed + at, ps.grad->p, ps.grad->bytes);
    at += ps.grad->bytes / 4;
  }
  auto h = onDevice ? tr.allreduceDeviceStart(packed, n, Group::DataParallel)
                    : tr.allreduceStart(packed, n, Group::DataParallel);
  if (!h)
    return h.status();
  b.req = *h;
  if (b.req == 0)
    b.done = nowS();
  buckets.push_back(std::move(b));
  return Status::ok();
}

Status Executor::Impl::gradsAfterAction(size_t i) {
  if (!overlapOn)
    return Status::ok();
  for (auto &[cs, fin] : gradFinal)
    if (fin.first == i)
      for (auto &[p, ps] : params)
        if (prog.params[size_t(p)].copy == cs.first &&
            prog.params[size_t(p)].stage == cs.second)
          if (Status s = gradReady(p); !s)
            return s;
  return postBucket();
}

void Executor::Impl::pollBuckets() {
  for (GradBucket &b : buckets)
    if (b.done < 0 && tr.test(b.req))
      b.done = nowS();
}

Status Executor::Impl::finishGradOverlap() {
  if (Status s = postBucket(); !s) // none is left pending; for safety
    return s;
  for (size_t k = 0; k < buckets.size(); ++k) {
    GradBucket &b = buckets[k];
    if (b.req != 0)
      if (Status s = tr.wait(b.req); !s)
        return Status::error("overlapped gradient reduction (bucket " +
                             std::to_string(k) + "): " + s.message());
    if (b.done < 0)
      b.done = nowS();
    int64_t bytes = 0;
    for (int32_t i : b.params)
      bytes += localElems(i) * 4; // ZeRO-2 may have released the buffer
    if (b.toOwners) {
      std::set<int32_t> in(b.params.begin(), b.params.end());
      if (Status s = sumOwnedGrads(
              *b.owned, [&](int32_t i) { return in.count(i) > 0; });
          !s)
        return s;
    } else {
      // Unpacked; GradSync divides every gradient by dp afterwards.
      int64_t at = 0;
      const float *packed = b.dev ? b.dev->f() : b.host.data();
      for (int32_t i : b.params) {
        ParamState &ps = params.at(i);
        if (b.dev)
          be.copy(ps.grad->p, packed + at, ps.grad->bytes);
        else
          be.copyFromHost(ps.grad->p, packed + at, ps.grad->bytes);
        at += ps.grad->bytes / 4;
      }
    }
    char args[64];
    std::snprintf(args, sizeof args, "\"params\":%zu,\"bytes\":%lld",
                  b.params.size(), (long long)bytes);
    record("grad allreduce " + std::to_string(k), 1, b.posted, b.done, args);
  }
  buckets.clear();
  return Status::ok();
}

} // namespace pipeforge::rt
