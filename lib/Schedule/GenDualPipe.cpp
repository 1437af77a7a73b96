//===- GenDualPipe.cpp - DualPipe and DualPipeV ---------------------------===//
//
// The eight-step per-rank programs of DeepSeek's DualPipe (two model copies,
// bidirectional) and DualPipeV (one V-shaped copy of 2N stages), following
// the reference implementation (deepseek-ai/DualPipe, dualpipe.py and
// dualpipev.py) step by step. "Phase 0" of a rank is the direction whose
// microbatches reach it first, "phase 1" the other one. With h the rank's
// distance from the nearer end and H half the pipeline:
//
//   1  F0                                   x 2(H-h-1)
//   2  F0 F1                                x h+1
//   3  B1 (input only) W F1                 x H-h-1
//   4  [F0 & BW1] [F1 & BW0]                x steps4  (first pair special)
//   5  BW1 [F1 & BW0]                       x H-h-1
//   6  B1 B0: first h+1 full, last h+1 input only (W queued)   x h+1
//   7  W B0 (input only, W queued)          x H-h-1
//   8  W                                    x h+1
//
// W work is a FIFO; it is empty at the end.
//
//===----------------------------------------------------------------------===//

#include "GenUtil.h"

#include <algorithm>
#include <deque>

namespace pipeforge::sched::detail {

namespace {

/// What one rank runs in each phase, and the loop counts that differ
/// between DualPipe and DualPipeV.
struct DualRankSpec {
  int stage[2]; ///< stage of phase 0 / phase 1
  int copy[2];  ///< model copy of phase 0 / phase 1
  int h, H;     ///< steps use h and H as in the table above
  int steps4;   ///< count of step 4
  bool serialFirstPair; ///< run step 4's first [F0 & B1] as F0 then BW1
};

void emitDualRank(const DualRankSpec &spec, std::vector<Action> &prog) {
  int nextF[2] = {0, 0}, nextB[2] = {0, 0};
  std::deque<Work> wQueue;

  auto work = [&](WorkKind k, int phase, int mb) {
    return makeWork(k, spec.stage[phase], mb, spec.copy[phase]);
  };
  auto takeF = [&](int phase) {
    return work(WorkKind::F, phase, nextF[phase]++);
  };
  /// The next backward of `phase`: full (BW) or input only (B, W queued).
  auto takeB = [&](int phase, bool inputOnly) {
    int mb = nextB[phase]++;
    if (inputOnly)
      wQueue.push_back(work(WorkKind::W, phase, mb));
    return work(inputOnly ? WorkKind::B : WorkKind::BW, phase, mb);
  };
  auto compute = [&](Work w) { prog.push_back(Action::compute(w)); };
  auto popW = [&]() {
    compute(wQueue.front());
    wQueue.pop_front();
  };
  auto overlap = [&](int fPhase, int bPhase) {
    Work f = takeF(fPhase);
    Work b = takeB(bPhase, /*inputOnly=*/false);
    prog.push_back(Action::overlap(f, b));
  };

  const int h = spec.h, H = spec.H;
  // Step 1: nF0.
  for (int i = 0; i < 2 * (H - h - 1); ++i)
    compute(takeF(0));
  // Step 2: nF0F1.
  for (int i = 0; i < h + 1; ++i) {
    compute(takeF(0));
    compute(takeF(1));
  }
  // Step 3: nB1W1F1, zero-bubble style (the W runs right away).
  for (int i = 0; i < H - h - 1; ++i) {
    compute(takeB(1, /*inputOnly=*/true));
    popW();
    compute(takeF(1));
  }
  // Step 4 (main): n x [F0 & B1] [F1 & B0].
  for (int i = 0; i < spec.steps4; ++i) {
    if (i == 0 && spec.serialFirstPair) {
      compute(takeF(0));
      compute(takeB(1, /*inputOnly=*/false));
    } else {
      overlap(0, 1);
    }
    overlap(1, 0);
  }
  // Step 5: nB1 [F1 & B0].
  for (int i = 0; i < H - h - 1; ++i) {
    compute(takeB(1, /*inputOnly=*/false));
    overlap(1, 0);
  }
  // Step 6: nB1B0; of these 2(h+1) backwards the last h+1 are input only.
  int count6 = 0;
  for (int i = 0; i < h + 1; ++i) {
    compute(takeB(1, /*inputOnly=*/count6++ >= h + 1));
    compute(takeB(0, /*inputOnly=*/count6++ >= h + 1));
  }
  // Step 7: nWB0.
  for (int i = 0; i < H - h - 1; ++i) {
    popW();
    compute(takeB(0, /*inputOnly=*/true));
  }
  // Step 8: nW. This drains the queue exactly: step 6 queued h+1 W, step 7
  // popped and queued H-h-1 each.
  while (!wQueue.empty())
    popW();
}

} // namespace

/// opts.microbatches is the total C; each copy gets C/2. Rank r holds copy 0
/// stage r and copy 1 stage N-1-r; in the first half of the ranks phase 0
/// is copy 0, in the second half copy 1.
Schedule genDualPipe(const GenOptions &opts) {
  const int n = opts.ranks, c2 = opts.microbatches / 2;
  Schedule s = makeSchedule("dualpipe", Placement::dual(n), c2);
  const int half = n / 2;
  for (int r = 0; r < n; ++r) {
    DualRankSpec spec;
    const bool secondHalf = r >= half;
    spec.stage[0] = secondHalf ? n - 1 - r : r;
    spec.copy[0] = secondHalf ? 1 : 0;
    spec.stage[1] = secondHalf ? r : n - 1 - r;
    spec.copy[1] = secondHalf ? 0 : 1;
    spec.h = std::min(r, n - 1 - r);
    spec.H = half;
    spec.steps4 = c2 - n + spec.h + 1;
    spec.serialFirstPair = r == half - 1 || r == half;
    reserveProgram(s.programs[r], 4 * size_t(c2));
    emitDualRank(spec, s.programs[r]);
  }
  return s;
}

/// One copy of 2N stages on Placement::vShape: phase 0 is stage r, phase 1
/// stage 2N-1-r. Same loops with h = r, H = N and C2 - N -> C - 2N.
Schedule genDualPipeV(const GenOptions &opts) {
  const int n = opts.ranks, c = opts.microbatches;
  Schedule s = makeSchedule("dualpipev", Placement::vShape(n), c);
  for (int r = 0; r < n; ++r) {
    DualRankSpec spec;
    spec.stage[0] = r;
    spec.stage[1] = 2 * n - 1 - r;
    spec.copy[0] = spec.copy[1] = 0;
    spec.h = r;
    spec.H = n;
    spec.steps4 = c - 2 * n + r + 1;
    spec.serialFirstPair = r == n - 1;
    reserveProgram(s.programs[r], 8 * size_t(c));
    emitDualRank(spec, s.programs[r]);
  }
  return s;
}

} // namespace pipeforge::sched::detail
