//===- TokenFuzzer.cpp - token file (.pftok) reader -----------------------===//
//
// What pipeforge-run --data does: TokenFile::fromBytes, then a few batches.
// The input is the file without its 8-byte checksum trailer; the harness
// appends the matching one (fuzz::withChecksum).
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/rt/Data.h"

using namespace pipeforge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  auto f = rt::TokenFile::fromBytes(fuzz::withChecksum(data, size), "fuzz");
  if (!f)
    return 0;
  rt::TokenFile &t = **f;
  (void)t.describe();
  (void)t.fingerprint();
  for (uint64_t i = 0; i < t.size() && i < 64; ++i)
    if (t.token(i) >= uint64_t(t.vocabSize()))
      fuzz::invariantBroken("a token of a validated file is >= the vocab");
  // Windows of 1 and 4 tokens (the reader must refuse what does not fit).
  for (int64_t s : {1, 4}) {
    std::vector<int32_t> tokens(2 * s), targets(2 * s);
    (void)t.batch(/*mb=*/3, /*step=*/7, /*b=*/2, s, tokens.data(),
                  targets.data());
  }
  return 0;
}
