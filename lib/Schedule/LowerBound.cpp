//===- LowerBound.cpp - A proven lower bound for automatic schedules ------===//
//
// For every rank r (any order, any valid schedule under the memory limit L):
//   span_r = last end - first start >= busy_r + idle_r, and idle_r is at
//   least the idle time inside either of two windows:
//   - head: from the rank's first start to its first B. Only F can run
//     there (B needs a returned gradient, W needs its B). The first B, of
//     stage s, waits for its own F plus the round trip
//     down(s) = sum over stages k > s of T_F(k) + T_B(k) + 2 comm(k-1, k);
//     at most kmax = floor(L / min M_B) forwards fit in memory before any B,
//     so idle >= min_s (T_F(s) + down(s)) - kmax * max T_F.
//   - tail: from the end of the rank's last F (stage s, microbatch j) to the
//     start of B(s, j) >= down(s). Only B and W of other microbatches can
//     run there, and each needs activations held at that moment: at most
//     (L - M_B(s)) * max((T_B + T_W) / M_B, T_W / M_W) of work.
//   - one microbatch's chain: span_r >= T_F(s) + down(s) + T_B(s) + T_W(s).
//   - through a later stage k > s (on any rank): the first pass of stage k
//     is some F(k, j'), which starts >= start F(s, j') + fwd(s, k) >= the
//     rank's first start + fwd(s, k), fwd(s, k) = sum over i in [s, k) of
//     T_F(i) + comm(i, i+1). All m F and m B of stage k run after it, one at
//     a time, so the last of them, a B(k, j), ends >= that + m (T_F(k) +
//     T_B(k)); then B(s, j) ends >= that + bwd(k, s), bwd = sum over i in
//     [s, k) of T_B(i) + comm(i, i+1), and W(s, j) follows: span_r >=
//     fwd(s, k) + m (T_F(k) + T_B(k)) + bwd(k, s) + T_W(s). (With uniform
//     costs and k the last stage this is the fill, the last stage's F/B
//     stream and the drain; it is tight for 1.5B m=24 at 2p M_B.)
// The Zero Bubble cost bound is the max over ranks; the makespan bound adds
// the earliest start of the rank (the F chain from stage 0 to its first
// stage).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/AutoScheduler.h"

#include <algorithm>
#include <cmath>

namespace pipeforge::sched {

LowerBound autoLowerBound(const AutoOptions &opts) {
  LowerBound lb;
  if (opts.ranks < 1 || opts.microbatches < 1)
    return lb;
  const CostModel &c = opts.cost;
  Placement pl = opts.vShape ? Placement::vShape(opts.ranks)
                             : Placement::linear(opts.ranks);
  int S = pl.numStages, m = opts.microbatches;
  auto comm = [&](int a, int b) {
    return pl.rank(0, a) == pl.rank(0, b) ? 0.0 : c.tcomm;
  };
  std::vector<double> down(S, 0), est(S, 0);
  for (int s = S - 2; s >= 0; --s)
    down[s] = down[s + 1] + c.timeOf(WorkKind::F, s + 1) +
              c.timeOf(WorkKind::B, s + 1) + 2 * comm(s, s + 1);
  for (int s = 1; s < S; ++s)
    est[s] = est[s - 1] + c.timeOf(WorkKind::F, s - 1) + comm(s - 1, s);

  for (int r = 0; r < opts.ranks; ++r) {
    std::vector<int> st;
    for (int s = 0; s < S; ++s)
      if (pl.rank(0, s) == r)
        st.push_back(s);
    double busy = 0, maxTf = 0, minMb = 1e300, fillRate = 0;
    double head = 1e300, chain = 0;
    for (int s : st) {
      double tf = c.timeOf(WorkKind::F, s), tb = c.timeOf(WorkKind::B, s),
             tw = c.timeOf(WorkKind::W, s);
      double mb = c.memDelta(WorkKind::F, s), mw = -c.memDelta(WorkKind::W, s);
      busy += m * (tf + tb + tw);
      maxTf = std::max(maxTf, tf);
      minMb = std::min(minMb, mb);
      head = std::min(head, tf + down[s]);
      chain = std::max(chain, tf + down[s] + tb + tw);
      double fwd = 0, bwd = 0;
      for (int k = s + 1; k < S; ++k) {
        fwd += c.timeOf(WorkKind::F, k - 1) + comm(k - 1, k);
        bwd += c.timeOf(WorkKind::B, k - 1) + comm(k - 1, k);
        double stream =
            m * (c.timeOf(WorkKind::F, k) + c.timeOf(WorkKind::B, k));
        chain = std::max(chain, fwd + stream + bwd + tw);
      }
      double rate = mb > 0 ? (tb + tw) / mb : 1e300;
      if (tw > 0)
        rate = std::max(rate, mw > 0 ? tw / mw : 1e300);
      fillRate = std::max(fillRate, rate);
    }
    double kmax = (double)m * st.size();
    if (opts.memLimit >= 0 && minMb > 0)
      kmax = std::min(kmax, std::floor(opts.memLimit / minMb + 1e-9));
    double headIdle = std::max(0.0, head - kmax * maxTf);
    double tailIdle = 1e300;
    for (int s : st) {
      double fill;
      if (opts.memLimit < 0 || fillRate >= 1e299)
        fill = 1e300;
      else
        fill = std::max(0.0, opts.memLimit - c.memDelta(WorkKind::F, s)) *
               fillRate;
      tailIdle = std::min(tailIdle, std::max(0.0, down[s] - fill));
    }
    double span = std::max({busy + std::max(headIdle, tailIdle), chain});
    lb.zbCost = std::max(lb.zbCost, span);
    lb.makespan = std::max(lb.makespan, est[st.front()] + span);
  }
  return lb;
}

} // namespace pipeforge::sched
