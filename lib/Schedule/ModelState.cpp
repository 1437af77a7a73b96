//===- ModelState.cpp - Model state bytes per rank under ZeRO -------------===//

#include "pipeforge/Schedule/ModelState.h"

#include <algorithm>

namespace pipeforge::sched {

ModelStateBytes modelStateHeld(double params, int zero, int shards,
                               StateBytesPerParam per) {
  const double n = std::max(1, shards);
  ModelStateBytes b;
  b.optimizer = per.optimizer * params / (zero >= 1 ? n : 1);
  b.grads = per.grads * params / (zero >= 2 ? n : 1);
  b.params = per.weights * params / (zero >= 3 ? n : 1);
  return b;
}

ModelStateBytes modelStateAtPeak(double params, int zero, int shards,
                                 double gatheredAtPeak,
                                 StateBytesPerParam per) {
  const double n = std::max(1, shards);
  ModelStateBytes b = modelStateHeld(params, zero, shards, per);
  b.grads = per.grads * params;
  if (zero >= 3) {
    // The owned shard, and the part of each gathered stage others own.
    const double gathered = std::clamp(gatheredAtPeak, 0.0, params);
    b.params = per.weights * (params / n + gathered * (n - 1) / n);
  }
  return b;
}

} // namespace pipeforge::sched
