//===- CheckpointFuzzer.cpp - rank checkpoint (.pfckpt) decoder -----------===//
//
// What pipeforge-run --resume does with a rank file: decodeRankCheckpoint
// (every value it accepts is finite: checked here),
// then restoreCheckpoint into parameters of the decoded names and shapes
// (must succeed), and with an AdamW over them when the file has optimizer
// state (AdamW::importState: its checks, its errors).
// The input is the file without its 8-byte checksum trailer; the harness
// appends the matching one (fuzz::withChecksum).
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/rt/Checkpoint.h"
#include "pipeforge/rt/Optimizer.h"

#include <cmath>

using namespace pipeforge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  auto c = rt::decodeRankCheckpoint(fuzz::withChecksum(data, size), "fuzz");
  if (!c)
    return 0;
  std::vector<std::vector<float>> storage, grads;
  std::vector<rt::ParamRef> refs;
  // The decoder accepts finite values only (NaN and infinities in a file
  // with a matching checksum once trained on silently).
  auto finite = [](const std::vector<float> &v) {
    for (float x : v)
      if (!std::isfinite(x))
        return false;
    return true;
  };
  for (size_t i = 0; i < c->optimizer.m.size(); ++i)
    if (!finite(c->optimizer.m[i]) ||
        (i < c->optimizer.v.size() && !finite(c->optimizer.v[i])))
      fuzz::invariantBroken("a decoded optimizer moment is not finite");
  for (const rt::CheckpointTensor &t : c->params) {
    if (t.data.size() > fuzz::kMaxInput)
      fuzz::invariantBroken("a tensor larger than its file");
    if (!finite(t.data))
      fuzz::invariantBroken("a decoded parameter is not finite");
    storage.emplace_back(t.data.size());
    grads.emplace_back(t.data.size());
  }
  for (size_t i = 0; i < c->params.size(); ++i)
    refs.push_back({c->params[i].name, c->params[i].shape, storage[i].data()});
  if (rt::Status st = rt::restoreCheckpoint(*c, refs, nullptr); !st)
    fuzz::invariantBroken("a decoded checkpoint does not restore into its own "
                          "parameters: " +
                          st.message());
  if (c->hasOptimizer) {
    rt::AdamW opt;
    for (size_t i = 0; i < refs.size(); ++i)
      if (!opt.addParam(refs[i].name, storage[i].data(), grads[i].data(),
                        storage[i].size()))
        return 0; // e.g. an empty tensor: not a parameter the trainer has
    (void)rt::restoreCheckpoint(*c, refs, &opt);
  }
  return 0;
}
