//===- GenPipeline.cpp - GPipe, 1F1B and interleaved 1F1B -----------------===//
//
// The classic schedules. All three use the full backward BW (B and W fused).
//
//===----------------------------------------------------------------------===//

#include "GenUtil.h"

#include <algorithm>

namespace pipeforge::sched::detail {

/// All forwards in microbatch order, then all full backwards in the same
/// order.
Schedule genGPipe(const GenOptions &opts) {
  const int p = opts.ranks, m = opts.microbatches;
  Schedule s = makeSchedule("gpipe", Placement::linear(p), m);
  for (int r = 0; r < p; ++r) {
    std::vector<Action> &prog = s.programs[r];
    reserveProgram(prog, 2 * m);
    for (int j = 0; j < m; ++j)
      prog.push_back(Action::compute(makeWork(WorkKind::F, r, j)));
    for (int j = 0; j < m; ++j)
      prog.push_back(Action::compute(makeWork(WorkKind::BW, r, j)));
  }
  return s;
}

/// Rank r: p-r-1 warm-up forwards, then one forward and one full backward
/// alternately, then the remaining backwards.
Schedule genOneFOneB(const GenOptions &opts) {
  const int p = opts.ranks, m = opts.microbatches;
  Schedule s = makeSchedule("1f1b", Placement::linear(p), m);
  for (int r = 0; r < p; ++r) {
    std::vector<Action> &prog = s.programs[r];
    reserveProgram(prog, 2 * m);
    const int warmup = std::min(p - r - 1, m);
    for (int j = 0; j < warmup; ++j)
      prog.push_back(Action::compute(makeWork(WorkKind::F, r, j)));
    for (int i = 0; i < m; ++i) {
      if (warmup + i < m)
        prog.push_back(Action::compute(makeWork(WorkKind::F, r, warmup + i)));
      prog.push_back(Action::compute(makeWork(WorkKind::BW, r, i)));
    }
  }
  return s;
}

/// Megatron-LM's interleaved 1F1B (virtual pipeline). Rank r holds the v
/// chunks r, r+p, ..., r+(v-1)p. The k-th forward of a rank runs chunk
/// (k mod pv) / p on microbatch (k / pv) p + k mod p, i.e. groups of p
/// microbatches sweep the chunks in turn; the k-th backward walks the chunks
/// in reverse. Warm-up: 2(p-r-1) + (v-1)p forwards, or all of them when
/// m == p (as Megatron does). Megatron's rule needs m % p == 0; PyTorch's
/// (InterleavedRule::PyTorch) replaces p by m / max(1, m / p) in both, and
/// its warm-up is also the formula at m == p (generate() checks the rule).
Schedule genInterleaved(const GenOptions &opts) {
  const int p = opts.ranks, m = opts.microbatches, v = opts.chunksPerRank;
  Schedule s = makeSchedule("interleaved", Placement::interleaved(p, v), m);
  const long total = long(m) * v;
  // Microbatches go through the chunks in groups of g: Megatron's p, or
  // PyTorch's m / R with R = max(1, m / p) rounds (generate() checked that
  // g divides m). The k-th forward (and the k-th backward) of a rank is
  // microbatch mbOf(k) of chunk chunkOf(k).
  const bool pytorch = effectiveInterleavedRule(opts.interleavedRule, p, m) ==
                       InterleavedRule::PyTorch;
  const long g = pytorch ? m / std::max(1, m / p) : p;
  auto mbOf = [&](long k) { return int((k / (g * v)) * g + k % g); };
  auto chunkOf = [&](long k, bool forward) {
    int c = int((k % (g * v)) / g);
    return forward ? c : v - 1 - c;
  };
  for (int r = 0; r < p; ++r) {
    std::vector<Action> &prog = s.programs[r];
    reserveProgram(prog, 2 * total);
    auto fwd = [&](long k) {
      prog.push_back(Action::compute(
          makeWork(WorkKind::F, chunkOf(k, true) * p + r, mbOf(k))));
    };
    auto bwd = [&](long k) {
      prog.push_back(Action::compute(
          makeWork(WorkKind::BW, chunkOf(k, false) * p + r, mbOf(k))));
    };
    // Megatron runs every forward first at m = p; PyTorch does not.
    long warmup = !pytorch && m == p
                      ? total
                      : std::min(total, long(p - r - 1) * 2 + long(v - 1) * g);
    for (long k = 0; k < warmup; ++k)
      fwd(k);
    const long steady = total - warmup;
    for (long i = 0; i < steady; ++i) {
      fwd(warmup + i);
      bwd(i);
    }
    for (long i = steady; i < total; ++i)
      bwd(i);
  }
  return s;
}

} // namespace pipeforge::sched::detail
