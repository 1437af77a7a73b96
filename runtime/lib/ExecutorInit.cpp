//===- ExecutorInit.cpp - Buffers, expert shards and parameters at start --===//
//
// Executor::Impl::init, in named phases: the stages and their activation
// layouts (initStages), the expert-parallel parameters (initExpertParallel:
// the moe kernels' expert operands, sliced over the group), the
// tensor-parallel group (initTensorParallel), the local parameters
// (initParams: initialised whole, then sliced), ZeRO's owners (initZero),
// the per-function buffer plans (planBuffers).
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include "pipeforge/rt/HfWeights.h"

#include <cstring>
#include <set>
#include <tuple>

#include <algorithm>

namespace pipeforge::rt {

Status stageError(int c, int s, const std::string &m) {
  return Status::error("stage " + std::to_string(s) + " of copy " +
                       std::to_string(c) + ": " + m);
}

/// The schedule against the program: every stage placed where the schedule
/// runs it, every kernel resolved; each stage's activation bundle layout.
Status Executor::Impl::initStages() {
  const sched::Schedule &sc = prog.schedule;
  if (sc.programs.size() != size_t(sc.numRanks()) || sc.numRanks() < 1)
    return Status::error("program has no per-rank schedule");
  if (!sc.hasComm && sc.numRanks() > 1)
    return Status::error("the schedule has no send/recv actions (compile "
                         "it with communication inserted)");
  prank = tr.pipelineRank();
  numStages = sc.placement.numStages;
  mPerCopy = sc.numMicrobatches;
  totalMb = prog.training.microbatches > 0 ? prog.training.microbatches
                                           : mPerCopy * sc.placement.numCopies;
  if (mPerCopy < 1 || numStages < 1)
    return Status::error("schedule has no microbatches or stages");
  for (int c = 0; c < sc.placement.numCopies; ++c)
    for (int s = 0; s < numStages; ++s) {
      const Stage *st = prog.findStage(c, s);
      if (!st)
        return stageError(c, s, "missing from the program");
      if (st->rank != sc.placement.rank(c, s))
        return stageError(c, s, "rank disagrees with the schedule placement");
      // Kernels run by their op kind, which validateProgram resolves (the
      // reader validates): a program that was never validated stops here.
      for (FunctionKind fk :
           {FunctionKind::Forward, FunctionKind::BackwardInput,
            FunctionKind::BackwardWeight, FunctionKind::Backward})
        for (const Kernel &k : stageFunction(*st, fk).kernels)
          if (k.kind == OpKind::Unknown)
            return stageError(c, s,
                              "kernel '" + k.op +
                                  "' has no resolved op (validateProgram "
                                  "resolves a program's ops)");
      // Activation bundle layout.
      std::vector<int64_t> off;
      int64_t total = 0;
      std::vector<std::pair<int32_t, int32_t>> acts;
      for (const ResultBinding &r : st->forward.results)
        if (r.role == ResultRole::Activation)
          acts.push_back({r.index, r.value});
      std::sort(acts.begin(), acts.end());
      for (auto &[idx, v] : acts) {
        if (idx != int32_t(off.size()))
          return stageError(c, s, "activation results are not numbered 0..n-1");
        off.push_back(total);
        total += (st->forward.values[size_t(v)].numBytes() + 63) / 64 * 64;
      }
      actOffsets[{c, s}] = off;
      actBytes[{c, s}] = total;
    }
  return Status::ok();
}

/// Expert parallelism: the group against the program's, the expert-sharded
/// parameters (w1, w2, w3 of moe) and the moe kernels that read them (or run
/// whole here).
Status Executor::Impl::initExpertParallel() {
  E = prog.training.expertParallel;
  epi = tr.epIndex();
  if (E != tr.epSize())
    return Status::error("the program has expert_parallel " +
                         std::to_string(E) + " but the transport's group has " +
                         std::to_string(tr.epSize()) + " ranks");
  if (E > 1) {
    // The program marks the sharded parameters (the compiler knows the
    // nn.moe operands); the EP moe kernels read their expert operands as
    // this rank's slice, so each must be bound to such a parameter.
    for (size_t i = 0; i < prog.params.size(); ++i)
      if (prog.params[i].expertSharded)
        expertParams.insert(int32_t(i));
    for (const Stage &st : prog.stages)
      for (FunctionKind fk :
           {FunctionKind::Forward, FunctionKind::BackwardInput,
            FunctionKind::BackwardWeight, FunctionKind::Backward}) {
        const Function &fn = stageFunction(st, fk);
        std::map<int32_t, int32_t> paramOf; // value -> param index
        for (const ArgBinding &a : fn.args)
          if (a.role == ArgRole::Param)
            paramOf[a.value] = a.index;
        for (const Kernel &k : fn.kernels) {
          if (!isMoEOp(k.kind))
            continue;
          // A kernel none of whose expert weights is sharded (a one-expert
          // moe: Qwen2-MoE's gated shared expert) runs whole on this rank.
          bool anySharded = false;
          for (size_t j = 0; j < k.inputs.size(); ++j) {
            auto it = paramOf.find(k.inputs[j]);
            anySharded |= isMoEExpertOperand(k.kind, k.inputs.size(), j) &&
                          it != paramOf.end() && expertParams.count(it->second);
          }
          if (!anySharded) {
            localMoE.insert(&k);
            continue;
          }
          for (size_t j = 0; j < k.inputs.size(); ++j) {
            if (!isMoEExpertOperand(k.kind, k.inputs.size(), j))
              continue;
            auto it = paramOf.find(k.inputs[j]);
            if (it == paramOf.end())
              return stageError(st.copy, st.index,
                                "expert parallelism: operand " +
                                    std::to_string(j) + " of '" + k.op +
                                    "' is not a parameter");
            if (!expertParams.count(it->second))
              return stageError(
                  st.copy, st.index,
                  "expert parallelism: operand " + std::to_string(j) + " of '" +
                      k.op + "' is parameter '" +
                      prog.params[size_t(it->second)].name +
                      "', which the program does not mark expert-sharded "
                      "while the kernel's other expert weights are");
          }
        }
      }
  }
  return Status::ok();
}

/// Tensor parallelism: the group must match the program's.
Status Executor::Impl::initTensorParallel() {
  T = prog.training.tensorParallel;
  tpi = tr.tpIndex();
  if (T != tr.tpSize())
    return Status::error("the program has tensor_parallel " +
                         std::to_string(T) + " but the transport's group has " +
                         std::to_string(tr.tpSize()) + " ranks");
  return Status::ok();
}

/// The tied pairs, and this rank's parameters: allocated, initialised
/// (or loaded) whole and sliced to this rank's share.
Status Executor::Impl::initParams() {
  const sched::Schedule &sc = prog.schedule;
  // Tied parameters: the pairs, and each copy initialised as its target.
  std::map<std::string, int32_t> byName;
  for (size_t i = 0; i < prog.params.size(); ++i)
    byName.emplace(prog.params[i].name, int32_t(i));
  for (size_t i = 0; i < prog.params.size(); ++i)
    if (!prog.params[i].tiedTo.empty())
      ties.push_back({byName.at(prog.params[i].tiedTo), int32_t(i)});
  // Local parameters.
  for (size_t i = 0; i < prog.params.size(); ++i) {
    const Param &p = prog.params[i];
    // The values a parameter starts from: its own, or a tied copy's
    // target's (its name seeds the generator, its init spec applies).
    Param src = p;
    if (!p.tiedTo.empty()) {
      const Param &t = prog.params[size_t(byName.at(p.tiedTo))];
      src.name = t.name;
      src.init = t.init;
    }
    if (p.copy >= sc.placement.numCopies || p.stage >= numStages)
      return Status::error("parameter '" + p.name + "' has no stage");
    if (rankOf(p.copy, p.stage) != prank)
      continue;
    ParamState ps;
    int64_t nLocal = localElems(int32_t(i));
    ps.value = newBuf(nLocal * 4, MemClass::Parameters);
    ps.grad = newBuf(nLocal * 4, MemClass::Gradients);
    if (!ps.value->p || !ps.grad->p)
      return Status::error("out of memory for parameter '" + p.name + "'");
    std::vector<float> host(static_cast<size_t>(p.type.numElements()));
    int64_t off = expertParams.count(int32_t(i)) ? int64_t(epi) * nLocal : 0;
    if (opts.initialWeights) {
      // Only this rank's rows (its experts; its shard when split along
      // dimension 0), read into host at `off`.
      if (Status s = loadInitialValues(p, src.name, int32_t(i), nLocal,
                                       host.data() + off);
          !s)
        return s;
    } else if (p.tpDim >= 0 && T > 1) {
      // A split param: the whole tensor's values (as the reference), then
      // this rank's slice.
      Param whole = src;
      whole.type.shape[size_t(p.tpDim)] *= T;
      std::vector<float> all(static_cast<size_t>(whole.type.numElements()));
      if (Status s = initParamValues(whole, prog.training.seed, all.data()); !s)
        return s;
      sliceTensorParallel(p, T, tpi, all.data(), host.data());
    } else if (Status s = initParamValues(src, prog.training.seed, host.data());
               !s) {
      return s;
    }
    // An expert param: initialised whole (as the reference), then sliced.
    be.copyFromHost(ps.value->p, host.data() + off, nLocal * 4);
    if (!be.hostVisible()) {
      ps.hostValue.assign(host.begin() + off, host.begin() + off + nLocal);
      ps.hostGrad.assign(size_t(nLocal), 0.0f);
    }
    params[int32_t(i)] = ps;
  }
  return Status::ok();
}

/// The ZeRO stage, and with sharding who owns which optimizer state.
Status Executor::Impl::initZero() {
  if (opts.zeroStage < 0 || opts.zeroStage > 3)
    return Status::error("ZeRO stage must be 0, 1, 2 or 3 (got " +
                         std::to_string(opts.zeroStage) + ")");
  if (opts.zeroStage >= 1) {
    if (prog.schedule.placement.numCopies > 1)
      if (Status s = assignPairOwners(); !s)
        return s;
    assignStateOwners();
  }
  return Status::ok();
}

/// Buffer plans: per-value when the assignment is missing or lets a kernel
/// write a buffer it also reads.
void Executor::Impl::planBuffers() {
  for (const Stage &st : prog.stages) {
    const Function *fns[4] = {&st.forward, &st.backwardInput,
                              &st.backwardWeight, &st.backward};
    auto &pl = plans[{st.copy, st.index}];
    for (int k = 0; k < 4; ++k) {
      const Function &fn = *fns[k];
      bool ok = fn.buffer.size() == fn.values.size();
      for (size_t v = 0; ok && v < fn.values.size(); ++v)
        ok = fn.buffer[v] >= 0 &&
             size_t(fn.buffer[v]) < fn.bufferBytes.size() &&
             fn.bufferBytes[size_t(fn.buffer[v])] >= fn.values[v].numBytes();
      for (const Kernel &kn : fn.kernels) {
        if (!ok)
          break;
        std::set<int32_t> ins;
        for (int32_t v : kn.inputs)
          if (v >= 0)
            ins.insert(fn.buffer[size_t(v)]);
        std::set<int32_t> outs;
        for (int32_t v : kn.outputs)
          if (v >= 0 && (ins.count(fn.buffer[size_t(v)]) ||
                         !outs.insert(fn.buffer[size_t(v)]).second))
            ok = false;
      }
      pl[k].perValue = !ok;
      pl[k].bufs.resize(ok ? fn.bufferBytes.size() : fn.values.size());
    }
  }
}

Status Executor::Impl::init() {
  tr.attachBackend(be);
  if (Status s = initStages(); !s)
    return s;
  if (Status s = initExpertParallel(); !s)
    return s;
  if (Status s = initTensorParallel(); !s)
    return s;
  if (Status s = initParams(); !s)
    return s;
  if (Status s = initZero(); !s)
    return s;
  planGradOverlap();
  planDirectGrads();
  if (Status s = planOffload(); !s)
    return s;
  planBuffers();
  if (Status s = initMoEBiases(); !s)
    return s;
  // ZeRO-3: who serves what; the other holders drop their copies.
  if (opts.zeroStage == 3)
    if (Status s = planParamService(); !s)
      return s;
  seed = newBuf(4, MemClass::Data);
  float sv = 1.0f / float(totalMb);
  be.copyFromHost(seed->p, &sv, 4);
  epoch = nowS();
  if (opts.trace)
    return alignClocks();
  return Status::ok();
}

Status Executor::Impl::loadInitialValues(const Param &p,
                                         const std::string &source, int32_t i,
                                         int64_t nLocal, float *out) {
  const WeightSource &w = *opts.initialWeights;
  std::string name = baseParamName(source);
  bool split = p.tpDim >= 0 && T > 1;
  std::vector<int64_t> whole = wholeParamShape(p, T);
  if (whole.empty())
    return w.fill(name, whole, 0, 1, out);
  // The rows of dimension 0 this rank needs: its experts, or its shard.
  int64_t row0 = 0, row1 = whole[0];
  if (expertParams.count(i)) {
    row0 = whole[0] / E * epi;
    row1 = row0 + whole[0] / E;
  } else if (split && p.tpDim == 0) {
    row0 = p.type.shape[0] * tpi;
    row1 = row0 + p.type.shape[0];
  }
  if (!split || p.tpDim == 0)
    return w.fill(name, whole, row0, row1, out);
  // Split along a later dimension: the rows whole, then this rank's slice
  // of each (T slices of `block` values per outer index).
  std::vector<int64_t> rowsShape = whole;
  rowsShape[0] = row1 - row0;
  int64_t n = 1;
  for (int64_t d : rowsShape)
    n *= d;
  std::vector<float> rows(static_cast<size_t>(n));
  if (Status s = w.fill(name, whole, row0, row1, rows.data()); !s)
    return s;
  int64_t outer = 1, block = 1;
  for (int d = 0; d < p.tpDim; ++d)
    outer *= rowsShape[size_t(d)];
  for (size_t d = size_t(p.tpDim); d < rowsShape.size(); ++d)
    block *= rowsShape[d];
  block /= T;
  if (outer * block != nLocal)
    return Status::error("parameter '" + p.name +
                         "': internal: slice size mismatch on load");
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(out + o * block, rows.data() + (o * T + tpi) * block,
                size_t(block) * 4);
  return Status::ok();
}

Status Executor::Impl::alignClocks() {
  // Trace timestamps count from the exit of a world barrier, which every
  // rank leaves at (nearly) the same moment whatever its host's clock: so
  // ranks on different hosts line up. The uncertainty is the spread of the
  // barrier exits: over kRounds barriers, each rank's offset to rank 0
  // (times relative to the first exit, small enough for floats) varies by
  // at most `clockSync` seconds (the max over ranks).
  constexpr int kRounds = 6;
  std::array<double, kRounds> t{};
  for (int k = 0; k < kRounds; ++k) {
    if (Status s = tr.barrier(Group::World); !s)
      return s;
    t[size_t(k)] = nowS();
  }
  std::array<float, kRounds> rank0{};
  if (tr.worldRank() == 0)
    for (int k = 0; k < kRounds; ++k)
      rank0[size_t(k)] = float(t[size_t(k)] - t[0]);
  if (Status s = tr.allreduce(rank0.data(), kRounds, Group::World); !s)
    return s;
  float lo = 0, hi = 0;
  for (int k = 0; k < kRounds; ++k) {
    float off = float(t[size_t(k)] - t[0]) - rank0[size_t(k)];
    lo = std::min(lo, off);
    hi = std::max(hi, off);
  }
  float spread = hi - lo;
  if (Status s = tr.allreduce(&spread, 1, Group::World, ReduceOp::Max); !s)
    return s;
  clockSync = spread;
  epoch = t[0];
  return Status::ok();
}

void Executor::Impl::assignStateOwners() {
  // Whole tensors, largest first onto the least-loaded replica (ties: the
  // lower index), as torch's ZeroRedundancyOptimizer does. Whole tensors
  // keep each parameter's gradient norm and update the same computation as
  // without sharding, so ZeRO-1 changes no bit of the run. Every replica
  // of this pipeline rank holds the same parameters with the same sizes,
  // so all compute the same assignment. With two model copies the pair
  // has split the tensors first (assignPairOwners): the replicas share
  // those this side updates.
  int D = tr.dpSize();
  if (D <= 1)
    return;
  std::vector<std::pair<int64_t, int32_t>> bySize;
  for (auto &[i, ps] : params)
    if (sideUpdates(i))
      bySize.push_back({-localElems(i), i});
  std::sort(bySize.begin(), bySize.end());
  std::vector<int64_t> load(size_t(D), 0);
  for (auto &[neg, i] : bySize) {
    int best = int(std::min_element(load.begin(), load.end()) - load.begin());
    stateOwner[i] = best;
    load[size_t(best)] -= neg;
  }
}

Status Executor::Impl::assignPairOwners() {
  // DualPipe and Chimera: this rank and its GRADREDUCE peer hold the same
  // stages, one model copy each, and after GRADREDUCE the same summed
  // gradients. Each tensor (by base name) is updated by one of the two,
  // largest first onto the side with fewer elements (ties: the lower
  // pipeline rank), so each keeps about half of the optimizer state: a
  // DualPipe rank then holds the state of one copy of its stages, as a
  // 1F1B rank does. Tied tensors stay on both sides (their copies follow
  // the target, exchangeTied).
  for (const Action &a : prog.schedule.programs[size_t(prank)])
    if (a.kind == ActionKind::GradReduce) {
      pairPeer = a.peer;
      break;
    }
  if (pairPeer < 0 || pairPeer == prank)
    return Status::ok();
  std::set<std::string> tied;
  std::map<std::string, int32_t> inCopy0;
  for (size_t k = 0; k < prog.params.size(); ++k) {
    const Param &p = prog.params[k];
    if (!p.tiedTo.empty()) {
      tied.insert(baseParamName(p.name));
      tied.insert(baseParamName(p.tiedTo));
    }
    if (p.copy == 0)
      inCopy0[baseParamName(p.name)] = int32_t(k);
  }
  std::vector<std::tuple<int64_t, std::string, int32_t>> bySize;
  for (auto &[i, ps] : params)
    bySize.push_back({-localElems(i), baseParamName(prog.params[size_t(i)].name), i});
  std::sort(bySize.begin(), bySize.end());
  // Both sides must list the same tensors (GRADREDUCE checks the sizes).
  float count = float(bySize.size());
  if (Status s = tr.pairwiseSum(pairPeer, &count, 1); !s)
    return s;
  if (count != 2.0f * float(bySize.size()))
    return Status::error("ZeRO over the model copies: pipeline ranks " +
                         std::to_string(prank) + " and " +
                         std::to_string(pairPeer) +
                         " hold different parameter sets");
  const int side = prank < pairPeer ? 0 : 1;
  int64_t load[2] = {0, 0};
  for (auto &[neg, name, i] : bySize) {
    auto twin = inCopy0.find(name);
    copy0Twin[i] = twin == inCopy0.end() ? i : twin->second;
    if (tied.count(name)) {
      pairOwner[i] = PairOwner::Both;
      continue;
    }
    int best = load[0] <= load[1] ? 0 : 1;
    pairOwner[i] = best == side ? PairOwner::Mine : PairOwner::Theirs;
    load[best] -= neg;
  }
  return Status::ok();
}

Status Executor::Impl::restoreGrads() {
  for (auto &[i, ps] : params) {
    if (ps.grad)
      continue;
    int64_t n = localElems(i);
    ps.grad = newBuf(n * 4, MemClass::Gradients);
    if (!ps.grad->p)
      return Status::error("out of memory for the gradient of '" +
                           prog.params[size_t(i)].name + "' (" +
                           std::to_string(n * 4) + " bytes)");
    if (!be.hostVisible())
      ps.hostGrad.assign(size_t(n), 0.0f);
  }
  return Status::ok();
}

} // namespace pipeforge::rt
