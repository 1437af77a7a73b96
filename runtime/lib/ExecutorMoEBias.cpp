//===- ExecutorMoEBias.cpp - nn.moe's load-balancing bias state -----------===//
//
// DeepSeek-V3's auxiliary-loss-free load balancing (docs/runtime.md, "MoE
// load balancing"): every moe kernel that names a bias (`bias`) routes with
// it (the choice only); the forward kernels of a step add their top-k
// choices to the bias's load; after the step the loads are summed over all
// ranks and every rank updates every bias the same way:
//
//   b_e += bias_update_speed * sign(mean_e' load_e' - load_e)
//
// Every rank keeps every bias of the model (a few floats per layer), so the
// update needs one world all-reduce of the concatenated loads, whatever the
// pipeline, data-, expert- and tensor-parallel layout: a layer's load is the
// sum over the ranks that ran it (each tensor-parallel rank of a group
// counts the same tokens: the loads of that layer are all multiplied by T,
// which the sign does not see). The counts are integers in float: exact
// below 2^24 choices per layer and step.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include "pipeforge/rt/HfWeights.h"

#include "KernelOperands.h"

namespace pipeforge::rt {

Status Executor::Impl::initMoEBiases() {
  // Every stage of every copy: the biases and their sizes (the router's
  // rows), in name order on every rank.
  for (const Stage &st : prog.stages)
    for (const Function *fn :
         {&st.forward, &st.backwardInput, &st.backwardWeight, &st.backward})
      for (const Kernel &k : fn->kernels) {
        if (!isMoEOp(k.op) || !k.attrs.count("bias"))
          continue;
        std::string name = ops::attrStr(k, "bias", "");
        int32_t rv = k.inputs.size() > 1 ? k.inputs[1] : -1;
        if (name.empty() || rv < 0 || size_t(rv) >= fn->values.size() ||
            fn->values[size_t(rv)].shape.size() != 2)
          return stageError(st.copy, st.index,
                            "kernel '" + k.op + "' has a bad bias or router");
        int64_t experts = fn->values[size_t(rv)].shape[0];
        auto [it, fresh] = moeBiases.try_emplace(name);
        MoEBias &b = it->second;
        if (fresh) {
          b.bias.assign(size_t(experts), 0.0f);
          b.load.assign(size_t(experts), 0.0f);
        } else if (int64_t(b.bias.size()) != experts) {
          return stageError(st.copy, st.index,
                            "the bias '" + name + "' has " +
                                std::to_string(b.bias.size()) +
                                " experts in one kernel and " +
                                std::to_string(experts) + " in another");
        }
        if (k.op != "moe")
          continue;
        double speed = ops::attrFloat(k, "bias_update_speed", 0.001);
        if (b.speed >= 0 && b.speed != speed)
          return stageError(st.copy, st.index,
                            "the bias '" + name +
                                "' has two bias_update_speed values");
        b.speed = speed;
      }
  for (auto &[name, b] : moeBiases) {
    if (b.speed < 0)
      return Status::error("the bias '" + name + "' has no forward moe kernel");
    // --init-from: the checkpoint's bias (Hugging Face's
    // gate.e_score_correction_bias), the same on every rank.
    if (opts.initialWeights && opts.initialWeights->hasBias(name))
      if (Status s = opts.initialWeights->fill(
              name, {int64_t(b.bias.size())}, 0, int64_t(b.bias.size()),
              b.bias.data());
          !s)
        return s;
  }
  return Status::ok();
}

void Executor::Impl::bindMoEBias(KernelCall &call, int which) {
  call.moeBias = nullptr;
  call.moeLoad = nullptr;
  const Kernel &k = *call.kernel;
  if (moeBiases.empty() || !isMoEOp(k.op))
    return;
  auto it = moeBiases.find(ops::attrStr(k, "bias", ""));
  if (it == moeBiases.end())
    return;
  call.moeBias = it->second.bias.data();
  // Only F counts (a recomputing B or W routes again, counted once).
  if (which == 0 && k.op == "moe")
    call.moeLoad = it->second.load.data();
}

Status Executor::Impl::updateMoEBiases() {
  if (moeBiases.empty())
    return Status::ok();
  std::vector<float> all;
  for (auto &[name, b] : moeBiases)
    all.insert(all.end(), b.load.begin(), b.load.end());
  if (tr.worldSize() > 1)
    if (Status s = tr.allreduce(all.data(), int64_t(all.size()), Group::World);
        !s)
      return s;
  size_t at = 0;
  for (auto &[name, b] : moeBiases) {
    const size_t n = b.bias.size();
    double total = 0;
    for (size_t e = 0; e < n; ++e)
      total += double(all[at + e]);
    const double mean = total / double(n);
    const float step = float(b.speed);
    for (size_t e = 0; e < n; ++e) {
      double d = mean - double(all[at + e]);
      b.bias[e] += d > 0 ? step : d < 0 ? -step : 0.0f;
      b.load[e] = 0.0f;
    }
    at += n;
  }
  return Status::ok();
}

Status Executor::Impl::checkMoEBiasReplicas() {
  if (moeBiases.empty() || tr.worldSize() < 2)
    return Status::ok();
  std::vector<float> hi, lo;
  for (auto &[name, b] : moeBiases)
    for (float v : b.bias) {
      hi.push_back(v);
      lo.push_back(-v);
    }
  if (Status s = tr.allreduce(hi.data(), int64_t(hi.size()), Group::World,
                              ReduceOp::Max);
      !s)
    return s;
  if (Status s = tr.allreduce(lo.data(), int64_t(lo.size()), Group::World,
                              ReduceOp::Max);
      !s)
    return s;
  size_t at = 0;
  for (auto &[name, b] : moeBiases)
    for (float v : b.bias) {
      if (hi[at] != v || -lo[at] != v)
        return Status::error("the load-balancing bias '" + name +
                             "' differs between ranks");
      ++at;
    }
  return Status::ok();
}

std::vector<ParamRef> Executor::stateRefs() {
  std::vector<ParamRef> refs;
  for (auto &[name, b] : impl->moeBiases)
    refs.push_back({name, {int64_t(b.bias.size())}, b.bias.data()});
  return refs;
}

} // namespace pipeforge::rt
