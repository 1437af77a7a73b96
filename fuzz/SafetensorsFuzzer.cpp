//===- SafetensorsFuzzer.cpp - safetensors header and data reader ---------===//
//
// What pipeforge-run --init-from does with each shard of a Hugging Face
// model directory: SafetensorsFile validates the header (its length, the
// JSON, dtypes, shapes, offsets inside the data and not overlapping), then
// every tensor is read as float32. A validated file must never lead to a
// read outside the input.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/rt/Safetensors.h"

#include <vector>

using namespace pipeforge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  auto f = rt::SafetensorsFile::fromBytes(
      std::vector<uint8_t>(data, data + size), "fuzz");
  if (!f)
    return 0;
  std::vector<float> out;
  for (const rt::StTensorInfo &t : (*f)->tensors()) {
    int64_t n = t.numElements();
    if (uint64_t(n) * uint64_t(rt::stDTypeSize(t.dtype)) != t.end - t.begin)
      fuzz::invariantBroken("a validated tensor's bytes do not match its shape");
    if (n > (int64_t(1) << 20))
      continue;
    out.resize(size_t(n));
    if (!(*f)->read(t, 0, n, out.data()))
      fuzz::invariantBroken("reading a validated tensor failed");
    if ((*f)->read(t, n, 1, out.data()))
      fuzz::invariantBroken("a read past a tensor's end succeeded");
  }
  return 0;
}
