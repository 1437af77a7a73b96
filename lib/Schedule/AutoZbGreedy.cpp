//===- AutoZbGreedy.cpp - The Zero Bubble repo's own greedy heuristic -----===//
//
// A port of the heuristic that produced every published ZB-1p / ZB-2p
// number (sail-sg/zero-bubble-pipeline-parallelism,
// megatron/core/pipeline_parallel/auto_schedule.py, Graph.manual_order, as
// driven by initial_solution over its three binary choices). Linear
// placement only (stage s on rank s). Times and memory deltas come from the
// CostModel per stage; T_comm is paid on every cross-stage F and B edge.
//
// The greedy places passes one by one, keeping for each stage its end time
// e, its memory m and the accumulated bubble (waiting before a pass, not
// counted before the stage's first F). Microbatch 0: one F per stage, then
// as many extra warm-up F per stage as memory allows and as fit before the
// first B comes back (with allow_bubble_before_first_b: as long as the F
// ends by then), trimmed so each stage warms up strictly less than the one
// before, then B of microbatch 0 on every stage. Microbatch i > 0: each
// stage wants one F (prioritize_b may skip it when the next stage is
// >= 2 F behind and the F would delay its B); a stage does F only if every
// later stage does; before an F or a B, W passes are put when memory
// requires, when a W fits in the wait for the input, and when the wait is
// a smaller bubble than the largest accumulated one (or, with
// no_bubble_greedy, also when it is not); stage 0 flushes W before its last
// Bs. Remaining W are flushed at the end.
//
// Comparisons are made with a small tolerance so that decimal costs (ms)
// behave as the original's exact integer costs (us) do.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/AutoScheduler.h"

#include <algorithm>
#include <cmath>

namespace pipeforge::sched::detail {

namespace {
constexpr double kTol = 1e-9;

class ZbGreedy {
public:
  ZbGreedy(const AutoOptions &o)
      : c(o.cost), S(o.ranks), n(o.microbatches), comm(o.cost.tcomm) {
    maxMem = o.memLimit >= 0 ? o.memLimit
                             : c.memDelta(WorkKind::F, 0) * n * 3;
  }

  bool run(bool allowBubbleBeforeFirstB, bool prioritizeB,
           bool noBubbleGreedy);

  std::vector<std::vector<Work>> orders;
  double bestTime = 0;

private:
  // a <= b, a < b, a >= b with exact-arithmetic intent.
  static bool le(double a, double b) { return a <= b + kTol * (1 + std::fabs(b)); }
  static bool lt(double a, double b) { return !le(b, a); }
  static bool ge(double a, double b) { return le(b, a); }
  static bool gt(double a, double b) { return !le(a, b); }

  double cost(int k, int s) const { return c.timeOf(WorkKind(kinds[k]), s); }
  double mem(int k, int s) const { return c.memDelta(WorkKind(kinds[k]), s); }
  double &T(int k, int s, int j) { return t[(k * S + s) * n + j]; }
  double maxBubble() const {
    double mb = 0;
    for (double b : stageBubble)
      mb = std::max(mb, b);
    return mb;
  }
  bool put(int s, int k);
  // W before the input of an F / B (of stage `s`) arrives at `ready`.
  void fillBefore(int s, double ready, bool noBubbleGreedy);

  static constexpr WorkKind kinds[3] = {WorkKind::F, WorkKind::B, WorkKind::W};
  const CostModel &c;
  int S, n;
  double comm, maxMem;
  std::vector<int> f, b, w;
  std::vector<double> m, e, t, stageBubble;
  bool ok = true;
};

bool ZbGreedy::put(int s, int k) {
  int i = k == 0 ? f[s] : k == 1 ? b[s] : w[s];
  double md = mem(k, s), cs = cost(k, s);
  if (i >= n || gt(m[s] + md, maxMem)) {
    ok = false; // the original asserts here
    return false;
  }
  double tmp = e[s] + cs, noBubble = tmp;
  if (s > 0 && k == 0)
    tmp = std::max(tmp, T(0, s - 1, i) + comm + cs);
  if (s < S - 1 && k == 1)
    tmp = std::max(tmp, T(1, s + 1, i) + comm + cs);
  if (f[s] > 0)
    stageBubble[s] += tmp - noBubble;
  e[s] = tmp;
  T(k, s, i) = tmp;
  m[s] += md;
  (k == 0 ? f[s] : k == 1 ? b[s] : w[s]) += 1;
  Work wk;
  wk.kind = kinds[k];
  wk.stage = s;
  wk.mb = i;
  orders[s].push_back(wk);
  return true;
}

void ZbGreedy::fillBefore(int s, double ready, bool noBubbleGreedy) {
  while (ok && w[s] < b[s] && le(e[s] + cost(2, s), ready))
    put(s, 2);
  if (ok && w[s] < b[s] && lt(e[s], ready)) {
    if (le(ready - e[s], maxBubble() - stageBubble[s])) {
      if (noBubbleGreedy)
        put(s, 2);
    } else {
      put(s, 2);
    }
  }
}

bool ZbGreedy::run(bool allowBubbleBeforeFirstB, bool prioritizeB,
                   bool noBubbleGreedy) {
  f.assign(S, 0);
  b.assign(S, 0);
  w.assign(S, 0);
  m.assign(S, 0);
  e.assign(S, 0);
  stageBubble.assign(S, 0);
  t.assign((size_t)3 * S * n, 0);
  orders.assign(S, {});
  ok = true;

  for (int i = 0; i < n && ok; ++i) {
    std::vector<int> fReq(S, 0);
    if (i == 0) {
      for (int j = 0; j < S && ok; ++j)
        put(j, 0);
      double lastT = 0;
      for (int j = S - 1; j >= 0 && ok; --j) {
        if (j == S - 1) {
          lastT = T(0, j, i) + cost(1, j);
          continue;
        }
        double mm = m[j], cc = e[j];
        while (f[j] + fReq[j] < n && le(mm + mem(0, j), maxMem)) {
          if (allowBubbleBeforeFirstB) {
            if (gt(cc + cost(0, j), lastT + comm))
              break;
          } else if (ge(cc, lastT + comm)) {
            break;
          }
          mm += mem(0, j);
          cc += cost(0, j);
          ++fReq[j];
        }
        lastT = std::max(cc, lastT + comm) + cost(1, j);
      }
      for (int j = 1; j < S; ++j)
        while (fReq[j] > 0 && fReq[j] >= fReq[j - 1] && f[j] + fReq[j] < n)
          --fReq[j];
      for (int j = 0; j < S && ok; ++j)
        for (int q = 0; q < fReq[j] && ok; ++q)
          put(j, 0);
      for (int j = S - 1; j >= 0 && ok; --j)
        put(j, 1);
      continue;
    }
    for (int j = 0; j < S; ++j) {
      if (f[j] >= n)
        continue;
      if (j + 1 < S && f[j] >= f[j + 1] + 2 && prioritizeB) {
        double nextPlusFw = e[j + 1] + cost(0, j + 1) + cost(1, j + 1) + comm;
        if (ge(e[j], nextPlusFw))
          continue;
        double wCost = 0, memWithW = m[j] + mem(0, j);
        int wCnt = 0;
        while (gt(memWithW, maxMem) && w[j] + wCnt < b[j]) {
          wCost += cost(2, j);
          memWithW += mem(2, j);
          ++wCnt;
        }
        if (le(e[j] + cost(0, j) + wCost, nextPlusFw)) {
          fReq[j] = 1;
          continue;
        }
        if (le(nextPlusFw - e[j], maxBubble() - stageBubble[j]))
          continue;
      }
      fReq[j] = 1;
    }
    for (int j = S - 2; j >= 0; --j)
      fReq[j] = std::min(fReq[j], fReq[j + 1]);
    for (int j = 0; j < S && ok; ++j) {
      if (!fReq[j])
        continue;
      while (ok && gt(m[j] + mem(0, j), maxMem)) {
        if (w[j] >= b[j])
          return false; // "Cannot fit memory"
        put(j, 2);
      }
      if (j > 0)
        fillBefore(j, T(0, j - 1, f[j]) + comm, noBubbleGreedy);
      if (ok)
        put(j, 0);
    }
    for (int j = S - 1; j >= 0 && ok; --j) {
      if (b[j] != i)
        return false; // the original asserts here
      while (ok && gt(m[j] + mem(1, j), maxMem)) {
        if (w[j] >= b[j])
          return false;
        put(j, 2);
      }
      if (j + 1 < S)
        fillBefore(j, T(1, j + 1, i) + comm, noBubbleGreedy);
      if (j == 0 && f[j] == n)
        while (ok && w[j] < b[j])
          put(j, 2);
      if (ok)
        put(j, 1);
    }
  }
  for (int s = 0; s < S && ok; ++s)
    while (ok && w[s] < n)
      put(s, 2);
  if (!ok)
    return false;
  bestTime = 0;
  for (int s = 0; s < S; ++s)
    bestTime = std::max(bestTime, T(2, s, n - 1) - T(0, s, 0) + cost(0, s));
  return true;
}
} // namespace

std::vector<std::vector<Work>> zbGreedyOrders(const AutoOptions &opts,
                                              bool allowBubbleBeforeFirstB,
                                              bool prioritizeB,
                                              bool noBubbleGreedy,
                                              double *zbCost) {
  if (opts.vShape || opts.ranks < 1 || opts.microbatches < 1)
    return {};
  ZbGreedy g(opts);
  if (!g.run(allowBubbleBeforeFirstB, prioritizeB, noBubbleGreedy))
    return {};
  if (zbCost)
    *zbCost = g.bestTime;
  return std::move(g.orders);
}

} // namespace pipeforge::sched::detail
