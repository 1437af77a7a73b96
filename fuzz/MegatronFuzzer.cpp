//===- MegatronFuzzer.cpp - Megatron-LM index (.idx) reader ---------------===//
//
// What pipeforge-run --data PREFIX does with a Megatron-LM dataset:
// parseMegatronIndex against the .bin's size, then the token array over a
// .bin and a few batches. The input is a 2-byte little-endian .bin size in
// bytes (a hint) followed by the .idx; the index is parsed against that
// size and against the size its own lengths imply (so mutations of the
// fields get past the size check), and a parsed index is opened over a .bin
// of that size.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/rt/Data.h"

#include <cstring>

using namespace pipeforge;

namespace {

/// The .bin size the index's lengths and dtype imply (0 when the header is
/// unreadable or the size is above kMaxInput).
uint64_t impliedBinBytes(const uint8_t *idx, size_t size) {
  if (size < 34)
    return 0;
  uint64_t w;
  switch (idx[17]) {
  case 1:
  case 2:
    w = 1;
    break;
  case 3:
  case 8:
    w = 2;
    break;
  case 4:
    w = 4;
    break;
  default:
    w = 8;
  }
  uint64_t s;
  std::memcpy(&s, idx + 18, 8);
  uint64_t total = 0;
  for (uint64_t i = 0; i < s && 34 + 4 * (i + 1) <= size; ++i) {
    int32_t len;
    std::memcpy(&len, idx + 34 + 4 * i, 4);
    if (len < 0)
      return 0;
    total += uint64_t(len);
    if (total * w > fuzz::kMaxInput)
      return 0;
  }
  return total * w;
}

void exercise(const uint8_t *idx, size_t size, uint64_t binBytes) {
  auto ix = rt::parseMegatronIndex(idx, size, binBytes, "fuzz.idx", "fuzz.bin");
  if (!ix)
    return;
  uint64_t w = rt::tokenDTypeBytes(ix->dtype);
  if (ix->tokenCount * w != binBytes)
    fuzz::invariantBroken("a validated index does not cover its .bin");
  for (uint64_t k = 0; k + 1 < ix->documentIndexCount && k < 64; ++k)
    if (ix->documentStart(k) > ix->documentStart(k + 1) ||
        ix->documentStart(k + 1) > ix->tokenCount)
      fuzz::invariantBroken("document starts out of order");
  // Tokens: position mod 251 (some out of a small vocabulary).
  std::vector<uint8_t> bin(binBytes);
  for (uint64_t i = 0; i < binBytes; ++i)
    bin[i] = i % w == 0 ? uint8_t((i / w) % 251) : 0;
  rt::DataFileOptions o;
  o.seed = 3;
  o.vocab = size % 2 ? 200 : 0;
  auto t = rt::TokenArray::megatronFromBytes(
      std::vector<uint8_t>(idx, idx + size), std::move(bin), "fuzz", o);
  if (!t)
    return;
  rt::TokenArray &a = **t;
  (void)a.describe();
  (void)a.fingerprint();
  for (uint64_t i = 0; i < a.size() && i < 64; ++i)
    if (a.token(i) < 0 || a.token(i) >= a.vocabSize())
      fuzz::invariantBroken("a token of a validated dataset is out of range");
  for (int64_t s : {1, 4}) {
    std::vector<int32_t> tokens(2 * s), targets(2 * s);
    (void)a.batch(/*mb=*/3, /*step=*/7, /*b=*/2, s, tokens.data(),
                  targets.data());
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput || size < 2)
    return 0;
  uint64_t hint = uint64_t(data[0]) | uint64_t(data[1]) << 8;
  const uint8_t *idx = data + 2;
  size_t n = size - 2;
  exercise(idx, n, hint);
  uint64_t implied = impliedBinBytes(idx, n);
  if (implied != hint)
    exercise(idx, n, implied);
  return 0;
}
