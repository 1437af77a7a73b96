//===- FuzzCommon.h - What every PipeForge fuzz target shares -------------===//
//
// The size bound (a larger input returns at once, so a timeout is a real
// hang, not a big input), the checksum fix-up for the checksummed binary
// formats (the fuzzer mutates the fields, the harness appends a matching
// FNV-1a trailer so mutations get past the checksum), and the oracle
// failure: an invariant the library promises broke (abort, so libFuzzer
// keeps the input).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_FUZZ_FUZZCOMMON_H
#define PIPEFORGE_FUZZ_FUZZCOMMON_H

#include "pipeforge/Support/Hash.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace pipeforge::fuzz {

/// Inputs above this many bytes are skipped.
constexpr size_t kMaxInput = 64 * 1024;

/// `data` followed by its FNV-1a 64 (little endian): the image a writer
/// that checksums its whole prefix produces.
inline std::vector<uint8_t> withChecksum(const uint8_t *data, size_t size) {
  std::vector<uint8_t> b(data, data + size);
  uint64_t h = fnv1a64(data, size);
  for (int i = 0; i < 8; ++i)
    b.push_back(uint8_t(h >> (8 * i)));
  return b;
}

[[noreturn]] inline void invariantBroken(const std::string &what) {
  std::fprintf(stderr, "fuzz: invariant broken: %s\n", what.c_str());
  std::abort();
}

} // namespace pipeforge::fuzz

#endif
