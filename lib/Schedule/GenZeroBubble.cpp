//===- GenZeroBubble.cpp - ZB-H1, ZB-H2 and ZB-V --------------------------===//
//
// The handcrafted Zero Bubble schedules (Qi et al., ICLR 2024). Backwards are
// split: B (input gradient) is on the critical path, W (weight gradient) is
// deferred to fill idle time. F, B and W of one stage each run in
// microbatch order.
//
//===----------------------------------------------------------------------===//

#include "GenUtil.h"

#include <algorithm>

namespace pipeforge::sched::detail {

namespace {

/// ZB-H1 (c = 1) and ZB-H2 (c = 2), rank r of p, m microbatches:
///   warmup = (p - r - 1) c forwards before the first B
///   for i in 0..m-1: [F if warmup + i < m]; B; [W if warmup + i >= (p-1) c]
///   the remaining W
/// Rank r thus delays its W by r c iterations, which lets the B chain reach
/// rank 0 sooner; the deferred W fill the drain.
Schedule genZB(const GenOptions &opts, int c, const char *name) {
  const int p = opts.ranks, m = opts.microbatches;
  Schedule s = makeSchedule(name, Placement::linear(p), m);
  for (int r = 0; r < p; ++r) {
    std::vector<Action> &prog = s.programs[r];
    reserveProgram(prog, 3 * m);
    const long warmup = long(p - r - 1) * c;
    int nextF = 0, nextW = 0;
    auto emit = [&](WorkKind k, int mb) {
      prog.push_back(Action::compute(makeWork(k, r, mb)));
    };
    for (; nextF < std::min<long>(warmup, m); ++nextF)
      emit(WorkKind::F, nextF);
    for (int i = 0; i < m; ++i) {
      if (warmup + i < m)
        emit(WorkKind::F, nextF++);
      emit(WorkKind::B, i);
      if (warmup + i >= long(p - 1) * c)
        emit(WorkKind::W, nextW++);
    }
    while (nextW < m)
      emit(WorkKind::W, nextW++);
  }
  return s;
}

} // namespace

Schedule genZBH1(const GenOptions &opts) { return genZB(opts, 1, "zb-h1"); }
Schedule genZBH2(const GenOptions &opts) { return genZB(opts, 2, "zb-h2"); }

/// ZB-V on Placement::vShape: rank r (0-based) holds chunk 0 = stage r and
/// chunk 1 = stage 2p-1-r. This is the handcrafted order of the Zero Bubble
/// repository (worker i = r+1):
///   warm-up   2(p-r)-1 F0; r x (F1 F0); (p-r) x (F1 B1 W1)
///             -> 2p-i forwards of chunk 0 and i-1 of chunk 1 before the
///                first B
///   steady    while work remains: [F0 if any left] B0 W0 F1 B1 W1
///   cool-down r x (B0 B1); (p-r) x (B0 W0); remaining W1; remaining W0
/// It is written for n = max(m, 2p-1) microbatches and the passes of the
/// padding microbatches (>= m) are then dropped: every dependency links
/// passes of one microbatch, so the subsequence stays executable. With
/// T_F = T_B = T_W it has no bubble and peaks at 2p chunk activations
/// (p M_B in units of a 1F1B stage, which is two V chunks).
Schedule genZBV(const GenOptions &opts) {
  const int p = opts.ranks, m = opts.microbatches;
  const int n = std::max(m, 2 * p - 1);
  Schedule s = makeSchedule("zbv", Placement::vShape(p), m);
  for (int r = 0; r < p; ++r) {
    std::vector<Action> &prog = s.programs[r];
    reserveProgram(prog, 6 * size_t(m));
    const int stage[2] = {r, 2 * p - 1 - r};
    int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
    auto emit = [&](WorkKind k, int chunk, int &counter) {
      int mb = counter++;
      if (mb < m)
        prog.push_back(Action::compute(makeWork(k, stage[chunk], mb)));
    };
    auto F = [&](int c) { emit(WorkKind::F, c, f[c]); };
    auto B = [&](int c) { emit(WorkKind::B, c, b[c]); };
    auto W = [&](int c) { emit(WorkKind::W, c, w[c]); };

    for (int i = 0; i < 2 * (p - r) - 1; ++i)
      F(0);
    for (int i = 0; i < r; ++i) {
      F(1);
      F(0);
    }
    for (int i = 0; i < p - r; ++i) {
      F(1);
      B(1);
      W(1);
    }
    while (f[1] < f[0] || f[0] < n) {
      if (f[0] < n)
        F(0);
      B(0);
      W(0);
      F(1);
      B(1);
      W(1);
    }
    for (int i = 0; i < r; ++i) {
      B(0);
      B(1);
    }
    for (int i = 0; i < p - r; ++i) {
      B(0);
      W(0);
    }
    while (w[1] < b[1])
      W(1);
    while (w[0] < b[0])
      W(0);
  }
  return s;
}

} // namespace pipeforge::sched::detail
