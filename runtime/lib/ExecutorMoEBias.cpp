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

#include <cstdio>
#include <cstring>
#include <iterator>

namespace pipeforge::rt {

Status Executor::Impl::initMoEBiases() {
  // Every stage of every copy: the biases and their sizes (the router's
  // rows), in name order on every rank.
  for (const Stage &st : prog.stages)
    for (const Function *fn :
         {&st.forward, &st.backwardInput, &st.backwardWeight, &st.backward})
      for (const Kernel &k : fn->kernels) {
        if (!isMoEOp(k.kind) || !k.attrs.count("bias"))
          continue;
        std::string name = ops::attrStr(k, "bias");
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
        if (k.kind != OpKind::MoE)
          continue;
        double speed = ops::attrFloat(k, "bias_update_speed");
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
  if (moeBiases.empty() || !isMoEOp(k.kind))
    return;
  auto it = moeBiases.find(ops::attrStr(k, "bias"));
  if (it == moeBiases.end())
    return;
  call.moeBias = it->second.bias.data();
  // Only F counts (a recomputing B or W routes again, counted once).
  if (which == 0 && k.kind == OpKind::MoE)
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

Status Executor::Impl::checkRestoredBiases(
    const std::function<std::string(int)> &fileOf) {
  if (moeBiases.empty())
    return Status::ok();
  const int me = tr.worldRank();
  auto fmt = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  // A bias the update can no longer move: past speed x 2^24 or so, b +
  // speed rounds back to b in float, and the load balancing of its layer
  // stops. A trained bias is far below (it moves by at most the speed per
  // step from where it started); this is an absurd value, refused here.
  for (auto &[name, b] : moeBiases) {
    const float step = float(b.speed);
    if (!(step > 0))
      continue; // a bias that never moves may hold any finite value
    for (size_t e = 0; e < b.bias.size(); ++e) {
      const float v = b.bias[e];
      const float up = v + step, down = v - step;
      if (up != v && down != v)
        continue;
      return Status::error(
          "the load-balancing bias '" + name + "' of world rank " +
          std::to_string(me) + " ('" + fileOf(me) + "'): element " +
          std::to_string(e) + " is " + fmt(v) +
          ", so large that its update of " + fmt(b.speed) +
          " (bias_update_speed) no longer changes it in float");
    }
  }
  if (tr.worldSize() < 2)
    return Status::ok();
  // Every rank holds every bias, the same: rank 0 compares each rank's
  // with its own and tells every rank the first difference, so each
  // reports the same message: {found, bias, element, rank, the two values'
  // bits as 16-bit halves} (small integers, exact in float) under a
  // max-allreduce.
  std::string mine;
  for (auto &[name, b] : moeBiases)
    mine.append(reinterpret_cast<const char *>(b.bias.data()),
                b.bias.size() * sizeof(float));
  auto all = tr.gatherStrings(mine);
  if (!all)
    return all.status();
  float found[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  auto bitsOf = [](const char *p) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return u;
  };
  for (size_t r = 1; r < all->size() && found[0] == 0; ++r) {
    const std::string &ref = (*all)[0], &other = (*all)[r];
    if (other.size() != ref.size()) {
      found[0] = 1;
      found[3] = float(r);
      found[2] = -1; // a different layout: no element to name
      break;
    }
    size_t at = 0, index = 0;
    for (auto &[name, b] : moeBiases) {
      for (size_t e = 0; e < b.bias.size() && found[0] == 0; ++e, at += 4)
        if (std::memcmp(ref.data() + at, other.data() + at, 4) != 0) {
          uint32_t x = bitsOf(ref.data() + at), y = bitsOf(other.data() + at);
          found[0] = 1;
          found[1] = float(index);
          found[2] = float(e);
          found[3] = float(r);
          found[4] = float(x >> 16);
          found[5] = float(x & 0xffff);
          found[6] = float(y >> 16);
          found[7] = float(y & 0xffff);
        }
      if (found[0] != 0)
        break;
      ++index;
    }
  }
  if (Status s = tr.allreduce(found, 8, Group::World, ReduceOp::Max); !s)
    return s;
  if (found[0] == 0)
    return Status::ok();
  const int r = int(found[3]);
  if (found[2] < 0)
    return Status::error("world rank " + std::to_string(r) + " ('" +
                         fileOf(r) +
                         "') holds other load-balancing biases than world "
                         "rank 0 ('" +
                         fileOf(0) + "')");
  auto valueOf = [](float hi, float lo) {
    uint32_t u = uint32_t(hi) << 16 | uint32_t(lo);
    float v;
    std::memcpy(&v, &u, 4);
    return double(v);
  };
  auto it = moeBiases.begin();
  std::advance(it, size_t(found[1]));
  return Status::error(
      "the load-balancing bias '" + it->first +
      "' is replicated (every rank holds the same), but element " +
      std::to_string(size_t(found[2])) + " is " +
      fmt(valueOf(found[4], found[5])) + " on world rank 0 ('" + fileOf(0) +
      "') and " + fmt(valueOf(found[6], found[7])) + " on world rank " +
      std::to_string(r) + " ('" + fileOf(r) + "')");
}

Status Executor::checkRestoredState(
    const std::function<std::string(int)> &fileOf) {
  if (Status s = impl->checkRestoredBiases(fileOf); !s)
    return s;
  return impl->checkReplicas(&fileOf);
}

std::vector<ParamRef> Executor::stateRefs() {
  std::vector<ParamRef> refs;
  for (auto &[name, b] : impl->moeBiases)
    refs.push_back({name, {int64_t(b.bias.size())}, b.bias.data()});
  return refs;
}

} // namespace pipeforge::rt
