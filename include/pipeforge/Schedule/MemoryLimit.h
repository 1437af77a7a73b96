//===- MemoryLimit.h - Parsing per-rank activation limits ------*- C++ -*-===//
//
// One syntax for every `--mem-limit` / `mem-limit=` (pipeforge-sched,
// --pp-schedule, --pp-verify-schedule):
//
//   3.5        a number of M_B (one microbatch's activations on a rank's share
//              of the model; the historical form, kept for compatibility)
//   2p         k x ranks M_B (here 2 x ranks)
//   12GB 1e9B  bytes, with a decimal (B, KB, MB, GB: powers of 1000) or a
//   512MiB     binary (KiB, MiB, GiB: powers of 1024) suffix; case-sensitive
//              except that "b" is not accepted for bytes (it reads as bits).
//
// A byte limit is converted to M_B units with the size of M_B in bytes,
// which the caller knows (pipeforge-sched: M_B = s b (34h + 5as) per layer,
// docs/background.md; the passes: the stash bytes of each stage's @forward).
// Plain C++, no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_MEMORYLIMIT_H
#define PIPEFORGE_SCHEDULE_MEMORYLIMIT_H

#include "pipeforge/Schedule/Action.h"

#include <string>

namespace pipeforge::sched {

struct MemoryLimit {
  enum class Unit {
    MB,      ///< `value` M_B
    PerRank, ///< `value` x ranks M_B ("<k>p")
    Bytes,   ///< `value` bytes
  };
  Unit unit = Unit::MB;
  double value = 0;

  bool isBytes() const { return unit == Unit::Bytes; }
};

/// Parses "3.5", "2p", "12GB", "512MiB", "1e9B" (leading/trailing blanks
/// and one blank between number and suffix are allowed). Errors name the
/// accepted forms. Negative and non-finite values are errors.
Expected<MemoryLimit> parseMemoryLimit(const std::string &text);

/// The limit in M_B units. `bytesPerMB` is the size of one M_B in bytes
/// (<= 0: unknown; then a byte limit is an error whose message ends with
/// `whyNoBytes`, e.g. "give --hidden, --heads and --seq").
Expected<double> resolveMemoryLimit(const MemoryLimit &limit, int ranks,
                                    double bytesPerMB,
                                    const std::string &whyNoBytes = "");

/// Formats a byte count for messages: "512 B", "1.5 KiB", "12.0 GiB" ...
std::string formatBytes(double bytes);

/// The activation memory of one transformer layer for one microbatch, with
/// 2-byte activations: M_B = s b (34h + 5as) bytes (docs/background.md).
inline double activationBytesPerLayer(double hidden, double heads, double seq,
                                      double microbatchSize) {
  return seq * microbatchSize * (34 * hidden + 5 * heads * seq);
}

} // namespace pipeforge::sched

#endif
