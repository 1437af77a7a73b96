//===- ExecutorParams.cpp - ZeRO-3: parameters gathered per stage ---------===//
//
// ExecutorOptions::zeroStage 3 (docs/optimizer.md, "ZeRO-3"). ZeRO-2 shards
// the optimizer state and the gradients; ZeRO-3 the values too. A tensor's
// values live on its owner (the rank that updates it: ZeRO-1's data-
// parallel owner, on DualPipe's and Chimera's pair the side that updates
// it); every other rank holding the tensor (its data-parallel replicas, the
// other model copy) keeps no buffer for it between the stage's RESHARD and
// its next UNSHARD, actions the compiler placed in the schedule
// (sched::insertParamGathers, checked by sched::verify).
//
// The owners serve: at the start of a step each owner posts one message of
// each of its tensors to each other holder (the values are fixed until the
// optimizer step, after every send has completed). UNSHARD allocates the
// buffers and posts their receipts; the stage's next compute waits for
// them; RESHARD frees them. No rank waits on another rank's place in its
// schedule, so the gathers add no dependency the schedule's verifier would
// have to prove deadlock-free, on any schedule. The values that arrive are
// the owner's bits: training is bitwise that of ZeRO-2 (and of no sharding).
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include "pipeforge/rt/RankGrid.h"

namespace pipeforge::rt {

using sched::Action;
using sched::ActionKind;

Status Executor::Impl::planParamService() {
  bool gathers = false;
  for (const std::vector<Action> &acts : prog.schedule.programs)
    for (const Action &a : acts)
      gathers = gathers || a.isParamGather();
  if (!gathers)
    return Status::error(
        "ZeRO-3 (--zero 3) needs a program whose schedule gathers the "
        "parameters (UNSHARD/RESHARD): compile it with pipeforge-compile "
        "--zero 3");
  // Tied tensors stay resident (ZeRO-1's exchange). An expert-parallel
  // slice or a tensor-parallel shard is a tensor of its own: its holders
  // share this rank's expert and tensor index.
  std::set<int32_t> tiedSet;
  for (auto [target, copy] : ties) {
    tiedSet.insert(target);
    tiedSet.insert(copy);
  }
  // A tensor's messages carry its copy-0 index, the same on every holder.
  std::map<std::string, int32_t> inCopy0;
  std::map<std::string, std::vector<int32_t>> copiesOf;
  for (size_t k = 0; k < prog.params.size(); ++k) {
    std::string base = baseParamName(prog.params[k].name);
    if (prog.params[k].copy == 0)
      inCopy0[base] = int32_t(k);
    copiesOf[base].push_back(int32_t(k));
  }
  for (auto &[i, ps] : params) {
    const Param &p = prog.params[size_t(i)];
    if (tiedSet.count(i) || !p.tiedTo.empty())
      continue;
    auto c0 = inCopy0.find(baseParamName(p.name));
    paramTag[i] = c0 == inCopy0.end() ? i : c0->second;
    zero3Params.insert(i);
  }
  // Who owns what: every owner marks its tensors (world rank + 1, exact in
  // float) in a table by (tag, expert index, tensor index), summed over the
  // world.
  const size_t slices = size_t(E) * size_t(T),
               mySlice = size_t(epi) * size_t(T) + size_t(tpi);
  auto slot = [&](int32_t i) {
    return size_t(paramTag.at(i)) * slices + mySlice;
  };
  std::vector<float> owner(prog.params.size() * slices, 0.0f);
  const int me = tr.worldRank();
  for (int32_t i : zero3Params)
    if (ownsState(i))
      owner[slot(i)] = float(me + 1);
  if (Status s = tr.allreduce(owner.data(), int64_t(owner.size()),
                              Group::World);
      !s)
    return s;
  const RankGrid grid{tr.pipelineSize(), E, tr.dpSize(), T,
                      tr.rankLayoutDataFastest()};
  for (int32_t i : zero3Params) {
    const Param &p = prog.params[size_t(i)];
    int o = int(owner[slot(i)]) - 1;
    if (o < 0 || o >= tr.worldSize())
      return Status::error("ZeRO-3: no rank owns parameter '" + p.name + "'");
    if (!ownsState(i)) {
      if (o == me)
        return Status::error("ZeRO-3: parameter '" + p.name +
                             "' is owned twice");
      paramOwnerWorld[i] = o;
      continue;
    }
    // Every other rank holding a copy of it: its model copies' pipeline
    // ranks, in every replica.
    std::set<int> holders;
    for (int32_t k : copiesOf.at(baseParamName(p.name))) {
      const Param &q = prog.params[size_t(k)];
      RankCoord c;
      c.pipeline = rankOf(q.copy, q.stage);
      c.expert = epi;
      c.tensor = tpi;
      for (c.replica = 0; c.replica < tr.dpSize(); ++c.replica)
        if (int w = grid.worldRank(c); w != me)
          holders.insert(w);
    }
    paramHolders[i].assign(holders.begin(), holders.end());
  }
  // Each stage's gathered tensors, so that UNSHARD and RESHARD touch only
  // those (in index order, the order the receipts are posted in).
  gatheredOf.clear();
  for (auto &[i, o] : paramOwnerWorld) {
    const Param &p = prog.params[size_t(i)];
    gatheredOf[{p.copy, p.stage}].push_back(i);
    releaseValue(i);
  }
  paramStepPeak = ledger.live[size_t(MemClass::Parameters)].load();
  return Status::ok();
}

void Executor::Impl::releaseValue(int32_t i) {
  ParamState &ps = params.at(i);
  ps.value.reset();
  std::vector<float>().swap(ps.hostValue);
}

Status Executor::Impl::allocValue(int32_t i) {
  ParamState &ps = params.at(i);
  if (ps.value)
    return Status::ok();
  int64_t n = localElems(i);
  ps.value = newBuf(n * 4, MemClass::Parameters, /*clear=*/false);
  if (!ps.value->p)
    return Status::error("out of memory gathering parameter '" +
                         prog.params[size_t(i)].name + "' (" +
                         std::to_string(n * 4) + " bytes)");
  return Status::ok();
}

Status Executor::Impl::serveParams() {
  // Messages go straight from (and into) the backend's buffers where the
  // transport takes them; else from the host master copy (a host
  // optimizer's), or a host copy of the device one.
  const bool direct = be.hostVisible() || tr.worldDeviceBuffers();
  for (auto &[i, holders] : paramHolders) {
    ParamState &ps = params.at(i);
    int64_t n = localElems(i);
    const float *src = ps.value->f();
    if (!direct) {
      if (optOnDevice()) {
        std::vector<float> &h = serveStaging[i];
        h.resize(size_t(n));
        be.copyToHost(h.data(), ps.value->p, n * 4);
        src = h.data();
      } else {
        src = ps.hostValue.data();
      }
    }
    for (int h : holders) {
      auto r = tr.isendWorld(h, paramTag.at(i), src, n);
      if (!r)
        return r.status();
      serving.push_back(*r);
    }
  }
  return Status::ok();
}

Status Executor::Impl::unshard(const Action &a, bool inStep) {
  const bool direct = be.hostVisible() || tr.worldDeviceBuffers();
  auto &pending = fetching[{a.work.copy, a.work.stage}];
  auto stage = gatheredOf.find({a.work.copy, a.work.stage});
  const std::vector<int32_t> none;
  for (int32_t i : stage == gatheredOf.end() ? none : stage->second) {
    const Param &p = prog.params[size_t(i)];
    const int o = paramOwnerWorld.at(i);
    if (params.at(i).value)
      return Status::error("parameter '" + p.name + "' is gathered twice");
    if (Status s = allocValue(i); !s)
      return s;
    ParamState &ps = params.at(i);
    int64_t n = localElems(i);
    float *dst = ps.value->f();
    if (!direct) {
      ps.hostValue.resize(size_t(n));
      dst = ps.hostValue.data();
    }
    auto r = tr.irecvWorld(o, paramTag.at(i), dst, n);
    if (!r)
      return r.status();
    pending.push_back({*r, i});
  }
  if (inStep)
    paramStepPeak = std::max(
        paramStepPeak, ledger.live[size_t(MemClass::Parameters)].load());
  return Status::ok();
}

Status Executor::Impl::awaitParams(int copy, int stage) {
  auto it = fetching.find({copy, stage});
  if (it == fetching.end())
    return Status::ok();
  const bool direct = be.hostVisible() || tr.worldDeviceBuffers();
  double w0 = nowS();
  for (const ParamFetch &f : it->second) {
    if (Status s = tr.wait(f.req); !s)
      return Status::error("gathering parameter '" +
                           prog.params[size_t(f.param)].name +
                           "': " + s.message());
    if (!direct) {
      ParamState &ps = params.at(f.param);
      be.copyFromHost(ps.value->p, ps.hostValue.data(), ps.value->bytes);
    }
  }
  waited += nowS() - w0; // a gather not hidden by prefetch is bubble
  fetching.erase(it);
  return Status::ok();
}

Status Executor::Impl::awaitParams(const Action &a) {
  if (fetching.empty())
    return Status::ok();
  if (Status s = awaitParams(a.work.copy, a.work.stage); !s)
    return s;
  if (a.kind == ActionKind::Overlap)
    return awaitParams(a.work2.copy, a.work2.stage);
  return Status::ok();
}

Status Executor::Impl::reshard(const Action &a) {
  if (Status s = awaitParams(a.work.copy, a.work.stage); !s)
    return s;
  if (auto stage = gatheredOf.find({a.work.copy, a.work.stage});
      stage != gatheredOf.end())
    for (int32_t i : stage->second)
      releaseValue(i);
  return Status::ok();
}

Status Executor::Impl::finishServing() {
  // A gather with no compute after it (none in a verified schedule).
  while (!fetching.empty()) {
    auto [copy, stage] = fetching.begin()->first;
    if (Status s = awaitParams(copy, stage); !s)
      return s;
  }
  for (RequestId r : serving)
    if (Status s = tr.wait(r); !s)
      return Status::error("serving parameters: " + s.message());
  serving.clear();
  serveStaging.clear();
  return Status::ok();
}

Status Executor::Impl::gatherAllParams() {
  if (opts.zeroStage != 3 || zero3Params.empty())
    return Status::ok();
  if (Status s = serveParams(); !s)
    return s;
  // Every holder needs every value here: each rank's checkpoint file holds
  // all of its tensors (any ZeRO level resumes from it), and the weight
  // dump compares the replicas' copies.
  for (auto &[stage, tensors] : gatheredOf) {
    bool missing = false;
    for (int32_t i : tensors)
      missing = missing || !params.at(i).value;
    if (!missing)
      continue;
    if (Status s = unshard(Action::unshard(stage.second, stage.first),
                           /*inStep=*/false);
        !s)
      return s;
  }
  if (Status s = finishServing(); !s)
    return s;
  // Host-side readers (checkpoints, dumps) read the host copy on a device
  // backend.
  if (!be.hostVisible())
    for (auto &[i, o] : paramOwnerWorld) {
      ParamState &ps = params.at(i);
      ps.hostValue.resize(size_t(localElems(i)));
      be.copyToHost(ps.hostValue.data(), ps.value->p, ps.value->bytes);
    }
  return be.takeAsyncError();
}

void Executor::Impl::releaseAllParams() {
  if (opts.zeroStage != 3)
    return;
  for (auto &[i, o] : paramOwnerWorld)
    releaseValue(i);
}

} // namespace pipeforge::rt
