//===- Hash.h - FNV-1a, the project's one byte hash -------------*- C++ -*-===//
//
// 64-bit FNV-1a: program and checkpoint checksums, data fingerprints,
// parameter initialisation seeds, replica checks. Header-only, plain C++ (the
// runtime uses it too).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SUPPORT_HASH_H
#define PIPEFORGE_SUPPORT_HASH_H

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pipeforge {

inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;

/// FNV-1a over `n` bytes, continuing from `h`.
inline uint64_t fnv1a64(const void *data, size_t n, uint64_t h = kFnv1aOffset) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * kFnv1aPrime;
  return h;
}
inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1aOffset) {
  return fnv1a64(s.data(), s.size(), h);
}

} // namespace pipeforge

#endif // PIPEFORGE_SUPPORT_HASH_H
