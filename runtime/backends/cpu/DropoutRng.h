//===- DropoutRng.h - The counter-based dropout mask ------------*- C++ -*-===//
//
// Dropout masks are a pure function of a key, never stored (docs/runtime.md,
// "Dropout"): the executor derives one key per (seed, step, global
// microbatch), a kernel mixes in the dropout site (nn.dropout's `site`), then
// each row of the whole (unsharded) tensor, then the element's index in the
// row. Forward, backward and a recomputing backward therefore draw the same
// bits on any schedule, rank layout, tensor-parallel shard or backend, and so
// does the single-process run. The mixer is SplitMix64's finalizer (Steele et
// al. 2014), applied to distinct odd-constant multiples of each counter.
//
// Header-only and free of the C++ library beyond <stdint.h>, so CUDA kernels
// include it too.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RUNTIME_CPU_DROPOUTRNG_H
#define PIPEFORGE_RUNTIME_CPU_DROPOUTRNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define PF_DROPOUT_HD __host__ __device__
#else
#define PF_DROPOUT_HD
#endif

namespace pipeforge {
namespace rt {
namespace dropout {

/// SplitMix64's output function: a bijection of 64-bit words whose output
/// bits each depend on every input bit.
PF_DROPOUT_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The key of one microbatch of one step (the executor's; the
/// single-process run numbers microbatches as the pipelined one does).
PF_DROPOUT_HD inline uint64_t stepKey(uint64_t seed, int64_t step,
                                      int64_t globalMicrobatch) {
  uint64_t k = mix64(seed + 0x9e3779b97f4a7c15ull);
  k = mix64(k ^ (uint64_t(step) * 0xd6e8feb86659fd93ull));
  return mix64(k ^ (uint64_t(globalMicrobatch) * 0xa0761d6478bd642full));
}

/// The key of dropout site `site` in that microbatch.
PF_DROPOUT_HD inline uint64_t siteKey(uint64_t stepKey, int64_t site) {
  return mix64(stepKey ^ (uint64_t(site) * 0xe7037ed1a0b428dbull +
                          0x632be59bd9b4e019ull));
}

/// The key of one row of the whole tensor, named by two counters: (sequence,
/// position) for an activation, ((sequence << 32) | head, query) for the
/// attention probabilities.
PF_DROPOUT_HD inline uint64_t rowKey(uint64_t siteKey, uint64_t a, uint64_t b) {
  return mix64(siteKey ^ mix64(a * 0x8ebc6af09c88c6e3ull + b));
}

/// Elements whose 32-bit draw is below the threshold are dropped:
/// P(drop) = threshold / 2^32 (rate rounded down to a multiple of 2^-32).
PF_DROPOUT_HD inline uint32_t threshold(double rate) {
  if (!(rate > 0.0))
    return 0;
  double t = rate * 4294967296.0;
  return t >= 4294967295.0 ? 4294967295u : uint32_t(t);
}

/// Whether element `j` of the row is kept.
PF_DROPOUT_HD inline bool keep(uint64_t rowKey, uint64_t j, uint32_t thr) {
  return uint32_t(mix64(rowKey + (j + 1) * 0x9e3779b97f4a7c15ull) >> 32) >= thr;
}

} // namespace dropout
} // namespace rt
} // namespace pipeforge

#endif // PIPEFORGE_RUNTIME_CPU_DROPOUTRNG_H
