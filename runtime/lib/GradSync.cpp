//===- GradSync.cpp - After a step's actions: reduce, norm, update --------===//
//
// Tensor parallel: the partial gradients of replicated parameters summed
// over the group. Data parallel: every gradient summed over the replicas
// and divided by dp. Expert parallel: the replicated (non-expert)
// gradients summed over the group, every gradient divided by E. Then the
// global gradient norm (each
// logical parameter counted once, in global parameter order), the loss, the
// bubble, and the optimizer step (sync, or post-validation). ZeRO-1: the
// data-parallel sum goes to the rank that owns each parameter's optimizer
// state, which alone updates it; the updated values are then gathered.
// ZeRO-2: the other replicas then release that gradient's buffer until the
// next step.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include <algorithm>
#include <cmath>

namespace pipeforge::rt {

Status Executor::Impl::averageGrads(
    Group g, int size, const std::function<bool(int32_t)> &chosen) {
  // Sum the chosen gradients over the group in one message (the transport's
  // allreduce: gather, rank-order sum, broadcast: the same bits on every
  // rank), then divide every local gradient by the group size.
  int64_t n = 0;
  for (auto &[i, ps] : params)
    if (chosen(i))
      n += ps.grad->bytes / 4;
  // The packed buffer: device memory where the transport sums on the device
  // (NCCL: no host copy), else host memory.
  const bool onDevice = !be.hostVisible() && tr.deviceCollectives();
  BufP flat;
  std::vector<float> host;
  if (onDevice)
    flat = newBuf(std::max<int64_t>(n, 1) * 4, MemClass::Messages);
  else
    host.resize(size_t(n));
  float *packed = onDevice ? flat->f() : host.data();
  auto move = [&](bool pack) {
    int64_t at = 0;
    for (auto &[i, ps] : params)
      if (chosen(i)) {
        float *slot = packed + at;
        if (onDevice)
          pack ? be.copy(slot, ps.grad->p, ps.grad->bytes)
               : be.copy(ps.grad->p, slot, ps.grad->bytes);
        else if (pack)
          be.copyToHost(slot, ps.grad->p, ps.grad->bytes);
        else
          be.copyFromHost(ps.grad->p, slot, ps.grad->bytes);
        at += ps.grad->bytes / 4;
      }
  };
  if (n > 0) { // every member of the group has the same parameters
    move(/*pack=*/true);
    if (Status s = onDevice ? tr.allreduceDevice(packed, n, g)
                            : tr.allreduce(packed, n, g);
        !s)
      return s;
    move(/*pack=*/false);
  }
  float inv = 1.0f / float(size);
  for (auto &[i, ps] : params)
    if (ps.grad) // ZeRO-2: a released gradient is another rank's
      be.scale(ps.grad->f(), inv, ps.grad->bytes / 4);
  return Status::ok();
}

Status Executor::Impl::reduceGradsToOwners() {
  // send[k]: this rank's gradients of the parameters replica k owns, in
  // parameter order (those the overlapped reduction did not take); recv[k]:
  // replica k's gradients of the ones owned here.
  // With the pair sharded, only what this side updates.
  auto chosen = [&](int32_t i) {
    return !reducedEarly.count(i) && sideUpdates(i);
  };
  int D = tr.dpSize();
  std::vector<std::vector<float>> send(static_cast<size_t>(D)), recv;
  for (auto &[i, ps] : params) {
    if (!chosen(i))
      continue;
    std::vector<float> &v = send[size_t(stateOwner.at(i))];
    size_t at = v.size();
    v.resize(at + size_t(localElems(i)));
    be.copyToHost(v.data() + at, ps.grad->p, ps.grad->bytes);
    releaseGrad(i);
  }
  if (Status s = tr.allToAll(send, recv, Group::DataParallel); !s)
    return s;
  return sumOwnedGrads(recv, chosen);
}

Status Executor::Impl::sumOwnedGrads(
    std::vector<std::vector<float>> &recv,
    const std::function<bool(int32_t)> &chosen) {
  // The sum runs in replica order from replica 0, as the transport's
  // allreduce does: the same bits as averageGrads.
  int64_t mine = 0;
  for (auto &[i, ps] : params)
    if (chosen(i) && ownsState(i))
      mine += localElems(i);
  for (size_t k = 0; k < recv.size(); ++k)
    if (int64_t(recv[k].size()) != mine)
      return Status::error(
          "ZeRO-1 gradient reduction: replica " + std::to_string(k) + " sent " +
          std::to_string(recv[k].size()) +
          " gradient elements, this rank owns " + std::to_string(mine));
  if (recv.empty())
    return Status::ok();
  std::vector<float> &sum = recv[0];
  for (size_t k = 1; k < recv.size(); ++k)
    for (size_t e = 0; e < sum.size(); ++e)
      sum[e] = sum[e] + recv[k][e];
  int64_t off = 0;
  float inv = 1.0f / float(tr.dpSize());
  for (auto &[i, ps] : params)
    if (chosen(i) && ownsState(i)) {
      be.copyFromHost(ps.grad->p, sum.data() + off, ps.grad->bytes);
      be.scale(ps.grad->f(), inv, ps.grad->bytes / 4);
      off += ps.grad->bytes / 4;
    }
  return Status::ok();
}

Status Executor::Impl::gatherOwnedParams() {
  // Every replica sends its updated parameters (in parameter order) to all;
  // each parameter is then taken from its owner's message.
  // With the pair sharded: the parameters this side updates (the peer
  // sends the others, exchangePairValues).
  int D = tr.dpSize();
  std::vector<float> owned;
  for (auto &[i, ps] : params)
    if (ownsState(i) && !zero3Sharded(i)) { // ZeRO-3: served per step
      size_t at = owned.size();
      owned.resize(at + size_t(localElems(i)));
      loadValues(ps, owned.data() + at, localElems(i));
    }
  std::vector<std::vector<float>> send(static_cast<size_t>(D), owned), recv;
  if (Status s = tr.allToAll(send, recv, Group::DataParallel); !s)
    return s;
  std::vector<size_t> at(recv.size(), 0);
  for (auto &[i, ps] : params) {
    if (!sideUpdates(i) || zero3Sharded(i))
      continue;
    size_t k = size_t(stateOwner.at(i)), n = size_t(localElems(i));
    if (k >= recv.size() || at[k] + n > recv[k].size())
      return Status::error("ZeRO-1 parameter gather: replica " +
                           std::to_string(k) + " sent too few values for '" +
                           prog.params[size_t(i)].name + "'");
    if (k != size_t(tr.dpIndex()))
      storeValues(ps, recv[k].data() + at[k], int64_t(n));
    at[k] += n;
  }
  return Status::ok();
}

Status Executor::Impl::exchangePairValues() {
  // In GRADREDUCE's order (by base name): the side that updated a tensor
  // sends its values, the other -0.0, the identity of IEEE addition
  // (x + -0.0 == x, -0.0 included), so both end with the updater's bits.
  std::vector<std::pair<std::string, int32_t>> order;
  for (auto &[i, who] : pairOwner)
    if (who != PairOwner::Both && !zero3Sharded(i)) // ZeRO-3: served
      order.push_back({baseParamName(prog.params[size_t(i)].name), i});
  std::sort(order.begin(), order.end());
  int64_t n = 0;
  for (auto &[name, i] : order)
    n += localElems(i);
  std::vector<float> buf(static_cast<size_t>(n), -0.0f);
  int64_t off = 0;
  for (auto &[name, i] : order) {
    if (pairOwner.at(i) == PairOwner::Mine)
      loadValues(params.at(i), buf.data() + off, localElems(i));
    off += localElems(i);
  }
  if (Status s = tr.pairwiseSum(pairPeer, buf.data(), n); !s)
    return s;
  off = 0;
  for (auto &[name, i] : order) {
    if (pairOwner.at(i) == PairOwner::Theirs)
      storeValues(params.at(i), buf.data() + off, localElems(i));
    off += localElems(i);
  }
  return Status::ok();
}

Status Executor::Impl::exchangeTied(bool grads) {
  // Program order on every rank, one blocking exchange per pair that spans
  // two pipeline ranks: the same order everywhere, so no cycle can form.
  // Gradients: both become their sum (a + b == b + a bitwise, so both
  // copies get the same bits, also when one rank holds both). Values: the
  // copy takes the target's (its holder adds zeros: x + 0 == x).
  for (auto [target, copy] : ties) {
    auto t = params.find(target), c = params.find(copy);
    if (t == params.end() && c == params.end())
      continue;
    int64_t n = localElems(t != params.end() ? target : copy);
    auto load = [&](ParamState &ps, float *out) {
      if (grads)
        be.copyToHost(out, ps.grad->p, n * 4);
      else
        loadValues(ps, out, n);
    };
    auto store = [&](ParamState &ps, const float *in) {
      if (grads)
        be.copyFromHost(ps.grad->p, in, n * 4);
      else
        storeValues(ps, in, n);
    };
    std::vector<float> mine(static_cast<size_t>(n), 0.0f);
    if (t != params.end() && c != params.end()) {
      load(t->second, mine.data());
      if (grads) {
        std::vector<float> other(static_cast<size_t>(n));
        load(c->second, other.data());
        for (int64_t k = 0; k < n; ++k)
          mine[size_t(k)] = mine[size_t(k)] + other[size_t(k)];
        store(t->second, mine.data());
      }
      store(c->second, mine.data());
      continue;
    }
    const bool holdsTarget = t != params.end();
    const Param &other = prog.params[size_t(holdsTarget ? copy : target)];
    ParamState &ps = holdsTarget ? t->second : c->second;
    if (grads || holdsTarget)
      load(ps, mine.data());
    if (Status s =
            tr.pairwiseSum(rankOf(other.copy, other.stage), mine.data(), n);
        !s)
      return Status::error(
          "tied parameters '" + prog.params[size_t(copy)].name + "' and '" +
          prog.params[size_t(target)].name + "': " + s.message());
    store(ps, mine.data());
  }
  return Status::ok();
}

Status Executor::Impl::sumTensorParallelGrads() {
  int64_t n = 0;
  for (auto &[i, ps] : params)
    if (prog.params[size_t(i)].tpReduceGrad)
      n += ps.grad->bytes / 4;
  if (n == 0)
    return Status::ok();
  std::vector<float> host(static_cast<size_t>(n));
  int64_t off = 0;
  for (auto &[i, ps] : params)
    if (prog.params[size_t(i)].tpReduceGrad) {
      be.copyToHost(host.data() + off, ps.grad->p, ps.grad->bytes);
      off += ps.grad->bytes / 4;
    }
  if (Status s = tr.allreduce(host.data(), n, Group::Tensor); !s)
    return s;
  off = 0;
  for (auto &[i, ps] : params)
    if (prog.params[size_t(i)].tpReduceGrad) {
      be.copyFromHost(ps.grad->p, host.data() + off, ps.grad->bytes);
      off += ps.grad->bytes / 4;
    }
  return Status::ok();
}

/// The squares of the parameters a group splits (`sliced`) summed over the
/// group, with the squares of the other local gradients (`allSq`, the
/// finite flag); `sq` recomputed over the parameters whose squares this
/// rank counts (normCopy: copy 0, or the pair's updating side).
Status Executor::Impl::sumSliceSquares(
    Group g, const std::function<bool(int32_t)> &sliced,
    std::vector<float> &paramSq, double &allSq, double &sq) {
  std::vector<float> part(paramSq.size() + 1, 0.0f);
  for (auto &[i, ps] : params)
    if (sliced(i))
      part[size_t(normSlot(i))] = paramSq[size_t(normSlot(i))];
  part.back() = float(allSq);
  if (Status s = tr.allreduce(part.data(), int64_t(part.size()), g); !s)
    return s;
  for (auto &[i, ps] : params)
    if (sliced(i))
      paramSq[size_t(normSlot(i))] = part[size_t(normSlot(i))];
  allSq = part.back();
  sq = 0;
  for (auto &[i, ps] : params)
    if (normCopy(i))
      sq += paramSq[size_t(normSlot(i))];
  return Status::ok();
}

Expected<StepStats> Executor::Impl::finishStep(double t0, double span) {
  if (Status s = reduceStepGrads(); !s)
    return s;
  GradNorms n;
  if (Status s = localGradSquares(n); !s)
    return s;
  if (Status s = sumGroupSquares(n); !s)
    return s;
  const int64_t thisStep = stepNo + 1;
  const bool skip = opts.skipStep == thisStep;
  const bool pv = opts.optimizerSync == OptimizerSync::PostValidation && !skip;
  // Post-validation: step at once with this rank's partial statistics; the
  // global ones are reduced right after and validate() checks the step.
  if (pv) {
    GradInfo partial{n.sq, std::isfinite(n.sq) && std::isfinite(n.allSq)};
    if (Status s = opt.optimisticUpdate(n.slots, partial, thisStep); !s)
      return s;
  }
  auto t = reduceStepTotals(n, span);
  if (!t)
    return t.status();
  ++stepNo;
  const double gradNorm = std::sqrt(t->globalSq);
  auto outcome = applyUpdate(n, gradNorm, skip, pv);
  if (!outcome)
    return outcome.status();
  if (Status s = shareUpdatedParams(); !s)
    return s;
  return stepStats(t0, *t, gradNorm, *outcome);
}

/// The gradients every rank's optimizer step reads: the moe biases updated
/// from this step's loads, the tensor-parallel partial sums, the tied pairs,
/// the data-parallel and expert-parallel averages.
Status Executor::Impl::reduceStepGrads() {
  clearUnwrittenGrads(); // the gradients nothing wrote this step: zeros
  // nn.moe's load-balancing biases from this step's loads.
  if (Status s = updateMoEBiases(); !s)
    return s;
  // Tensor parallel: the replicated parameters whose gradients are partial
  // (sequence parallelism) summed over the group.
  if (T > 1)
    if (Status s = sumTensorParallelGrads(); !s)
      return s;
  // Tied parameters: both copies' gradients become their sum.
  if (!ties.empty())
    if (Status s = exchangeTied(/*grads=*/true); !s)
      return s;
  // Data parallel: every gradient summed over the replicas, divided by dp:
  // the buckets the overlapped reduction posted during the step, then the
  // rest. ZeRO-1: only into the rank that owns each parameter's optimizer
  // state.
  int D = tr.dpSize();
  const bool zero = !stateOwner.empty();
  if (Status s = finishGradOverlap(); !s)
    return s;
  if (D > 1)
    if (Status s = zero ? reduceGradsToOwners()
                        : averageGrads(Group::DataParallel, D,
                                       [&](int32_t i) {
                                         return !reducedEarly.count(i);
                                       });
        !s)
      return s;
  // Expert parallel: the replicated (non-expert) grads are summed over the
  // EP group; every grad is divided by E: each EP rank seeded its loss with
  // 1 / microbatches of its own. An expert's gradient lives on one rank.
  if (E > 1)
    if (Status s = averageGrads(Group::Expert, E,
                                [&](int32_t i) {
                                  return !expertParams.count(i) &&
                                         params.at(i).grad;
                                });
        !s)
      return s;
  return Status::ok();
}

/// The sum of squares of each local gradient this rank counts in the norm
/// (paramSq, sq), of the others (allSq: post-validation's finite flag), and
/// the optimizer's slots.
Status Executor::Impl::localGradSquares(GradNorms &n) {
  // Gradient norm (copy-0 params only), loss, busy time. `allSq` covers the
  // other local gradients (DualPipe copy 1): post-validation's finite flag.
  // The norm is the same number on any rank layout: each parameter's sum of
  // squares is computed on its own, the pipeline allreduce adds it to zeros
  // from the ranks that do not own it (exact), and the total is summed in
  // global parameter order, as the single-process reference does.
  //
  // A gradient's sum of squares is a fixed-order double sum over its
  // elements (AdamWMath.h sumSquaresTensor), on the device when the
  // optimizer is there (Backend::sumSquares: the same bits on cpu-device),
  // else on the host copy the host optimizer reads.
  const bool onDevice = optOnDevice();
  n.paramSq.assign(prog.params.size(), 0.0f);
  for (auto &[i, ps] : params) {
    if (!ownsState(i))
      continue; // ZeRO-1: its owner's sum; it counts 0 here
    const Param &p = prog.params[size_t(i)];
    int64_t elems = localElems(i);
    // A tied copy: its target. Two model copies: copy 0 (its twin in
    // copy 1 has the same gradient), or, with the pair sharded, the side
    // that updates it, in its copy-0 twin's slot.
    bool counted = p.tiedTo.empty() && normCopy(i);
    int32_t slot = normSlot(i);
    bool finiteOnly = !counted &&
                      opts.optimizerSync == OptimizerSync::PostValidation;
    if (!onDevice && !be.hostVisible())
      be.copyToHost(ps.hostGrad.data(), ps.grad->p, elems * 4);
    double psq = 0;
    if (counted || finiteOnly) {
      if (onDevice) {
        if (Status s = be.sumSquares(ps.grad->f(), elems, &psq); !s)
          return s;
      } else {
        psq = sumSquaresHost(hostGrad(ps), elems);
      }
    }
    if (counted) {
      // As the float the global sum adds (and sumSliceSquares re-sums):
      // the partial statistics do not depend on how the squares arrived.
      n.paramSq[size_t(slot)] = float(psq);
      n.sq += double(n.paramSq[size_t(slot)]);
    } else if (finiteOnly) {
      n.allSq += psq;
    }
    if (onDevice)
      n.slots.push_back({i, &p, ps.value->f(), ps.grad->f(), elems});
    else
      n.slots.push_back({i, &p, hostValue(ps), hostGrad(ps), elems});
  }
  return Status::ok();
}

/// The squares of the gradients split over a group (expert slices, tensor
/// shards, ZeRO's owners) summed over it, before the optimistic step.
Status Executor::Impl::sumGroupSquares(GradNorms &n) {
  if (E > 1) {
    // An expert param's squares: the sum of its slices over the EP group.
    // Reduced before the optimistic step, together with the other local
    // gradients' squares (the finite flag), so that every EP rank of this
    // pipeline rank sees the same partial statistics and takes the same
    // optimistic step and the same validate() decision: the replicated
    // (non-expert) parameters stay bitwise equal across the group (a
    // rollback is exact only up to rounding).
    if (Status s = sumSliceSquares(
            Group::Expert, [&](int32_t i) { return expertParams.count(i) > 0; },
            n.paramSq, n.allSq, n.sq);
        !s)
      return s;
  }
  if (T > 1) {
    // A split param's squares: the sum of its shards over the TP group (the
    // replicated ones are equal on every rank of the group: counted once).
    // Reduced before the optimistic step, with the finite flag, as for
    // expert parallelism.
    if (Status s = sumSliceSquares(
            Group::Tensor,
            [&](int32_t i) { return prog.params[size_t(i)].tpDim >= 0; },
            n.paramSq, n.allSq, n.sq);
        !s)
      return s;
  }
  if (!stateOwner.empty()) {
    // ZeRO-1: each parameter's squares come from its owner (exact: the
    // others add zeros), so the statistics equal those without sharding.
    if (Status s = sumSliceSquares(
            Group::DataParallel, [](int32_t) { return true; }, n.paramSq,
            n.allSq, n.sq);
        !s)
      return s;
  }
  return Status::ok();
}

/// The step's totals over the pipeline (and the loss over the replicas):
/// the squared norm, the loss, busy time and the longest span.
Expected<Executor::Impl::StepTotals>
Executor::Impl::reduceStepTotals(GradNorms &n, double span) {
  if (Status s = tr.allreduce(n.paramSq.data(), int64_t(n.paramSq.size()),
                              Group::Pipeline);
      !s)
    return s;
  StepTotals t;
  for (float v : n.paramSq)
    t.globalSq += v;
  float red[3] = {float(t.globalSq), float(lossSum), float(busy)};
  if (Status s = tr.allreduce(red + 1, 2, Group::Pipeline); !s)
    return s;
  t.busy = red[2];
  t.spanMax = float(span);
  if (Status s = tr.allreduce(&t.spanMax, 1, Group::Pipeline, ReduceOp::Max);
      !s)
    return s;
  t.lossAll = red[1];
  if (Status s = tr.allreduce(&t.lossAll, 1, Group::DataParallel); !s)
    return s;
  if (E > 1)
    if (Status s = tr.allreduce(&t.lossAll, 1, Group::Expert); !s)
      return s;
  return t;
}

/// The optimizer step (or its skip, or post-validation's verdict on the
/// optimistic one): the outcome's name.
Expected<std::string> Executor::Impl::applyUpdate(const GradNorms &n,
                                                  double gradNorm, bool skip,
                                                  bool pv) {
  std::string outcome = "applied";
  if (skip) {
    outcome = "skipped";
  } else if (pv) {
    GradInfo global{gradNorm * gradNorm, std::isfinite(gradNorm)};
    auto r = opt.validateUpdate(global);
    if (!r)
      return r.status();
    outcome = r->outcome != StepOutcome::Skipped
                  ? (r->rolledBack ? "redone" : "accepted")
                  : (r->rolledBack ? "rolled-back" : "not-stepped");
  } else if (Status s = opt.update(n.slots, gradNorm, stepNo); !s) {
    return s;
  }
  return outcome;
}

/// The updated values to every rank that holds a copy: ZeRO's owners to
/// their replicas, the other side of a sharded pair, tied copies.
Status Executor::Impl::shareUpdatedParams() {
  // ZeRO-1: the owners' new values to every replica (after a rollback or a
  // skip too: then they are the old ones).
  if (!stateOwner.empty())
    if (Status s = gatherOwnedParams(); !s)
      return s;
  // ZeRO over the model copies: the other side's updated tensors.
  if (!pairOwner.empty())
    if (Status s = exchangePairValues(); !s)
      return s;
  // Post-validation: the two copies of a tied tensor may sit on ranks whose
  // optimistic steps differed (partial norms), and a rollback is exact only
  // to rounding: the copy takes the target's values again.
  if (!ties.empty() && opts.optimizerSync == OptimizerSync::PostValidation)
    if (Status s = exchangeTied(/*grads=*/false); !s)
      return s;
  return Status::ok();
}

/// The step's statistics (and its transfers between host and device).
Expected<StepStats> Executor::Impl::stepStats(double t0, const StepTotals &t,
                                              double gradNorm,
                                              const std::string &outcome) {
  Backend::Transfers now = be.transfers();
  lastStepTransfers = {now.toDevice - stepStartTransfers.toDevice,
                       now.toHost - stepStartTransfers.toHost};
  const int D = tr.dpSize();
  StepStats st;
  st.step = stepNo;
  st.loss = double(t.lossAll) / double(totalMb) / double(D) / double(E);
  st.gradNorm = gradNorm;
  st.optimizer = outcome;
  int P = tr.pipelineSize();
  st.bubble =
      t.spanMax > 0 ? 1.0 - double(t.busy) / (double(P) * t.spanMax) : 0;
  float total = float(nowS() - t0);
  if (Status s = tr.allreduce(&total, 1, Group::World, ReduceOp::Max); !s)
    return s;
  st.seconds = total;
  st.tokens =
      int64_t(totalMb) * prog.model.microbatchSize * prog.model.seqLen * D * E;
  return st;
}

} // namespace pipeforge::rt
