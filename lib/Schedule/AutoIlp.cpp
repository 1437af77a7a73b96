//===- AutoIlp.cpp - ILP refinement of an automatic schedule (CBC) --------===//
//
// The Zero Bubble paper's appendix-G ILP, with reductions that keep it small:
//   variables  E_x  end time of pass x (F, B, W of every stage/microbatch),
//              O_xy binary "x before y", only for passes x, y on the same
//                   rank that the fixed orders below do not already order,
//              C    the objective;
//   minimise   C >= E(W(s, m-1)) - start_r  for every stage s on rank r
//              (the Zero Bubble cost: the rank's last end minus first start)
//   subject to E_x >= T_x; dependencies E_v >= E_u + comm(u, v) + T_v;
//              per stage and kind, microbatch order (reduction R1):
//              E(k, s, j+1) >= E(k, s, j) + T(k, s);
//              big-M disjunctions for every O pair;
//              memory: at every F, the deltas of the passes on the rank
//              before it (fixed ones as constants, the others through O)
//              plus its own M_B <= M_limit;
//              E_x <= H, the heuristic's makespan (reduction R2; it is also
//              the big M);
//              the first pass of each rank, F(first stage, 0), starts at its
//              earliest time (R3: an ASAP replay of any order starts there
//              too, so the simulated cost never exceeds the ILP's).
// Warm start: the heuristic's solution. CBC's best bound is a bound within
// this model; the analytic bound (LowerBound.cpp) is the unconditional one.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/Verify.h"

#include "Deps.h"

#include "CbcModel.hpp"
#include "CglGomory.hpp"
#include "CglMixedIntegerRounding2.hpp"
#include "CglProbing.hpp"
#include "CoinPackedMatrix.hpp"
#include "CoinPackedVector.hpp"
#include "OsiClpSolverInterface.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

namespace pipeforge::sched::detail {

namespace {
struct Pass {
  WorkKind kind;
  int stage, mb, rank;
  double t;
};
} // namespace

AutoResult autoIlp(const AutoOptions &opts, AutoResult start,
                   const Deadline &deadline) {
  const CostModel &c = opts.cost;
  const Placement &pl = start.schedule.placement;
  int S = pl.numStages, m = opts.microbatches, p = opts.ranks;
  int N = 3 * S * m;
  if (N > opts.ilpMaxPasses) {
    start.note = "ILP skipped: " + std::to_string(N) + " passes > " +
                 std::to_string(opts.ilpMaxPasses);
    return start;
  }
  if (deadline.passed()) {
    noteCutShort(start, "ILP");
    start.note = "ILP skipped: the time limit was reached before it";
    return start;
  }
  auto id = [&](WorkKind k, int s, int j) {
    return (s * m + j) * 3 + (k == WorkKind::F ? 0 : k == WorkKind::B ? 1 : 2);
  };
  std::vector<Pass> ps(N);
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < m; ++j)
      for (WorkKind k : {WorkKind::F, WorkKind::B, WorkKind::W})
        ps[id(k, s, j)] = {k, s, j, pl.rank(0, s), c.timeOf(k, s)};
  auto comm = [&](int a, int b) {
    return pl.rank(0, a) == pl.rank(0, b) ? 0.0 : c.tcomm;
  };

  // Precedence edges (u -> v, lag = comm) and their transitive closure:
  // each pass's input (the dependency rule, Deps.h; a B's saved F is
  // implied by its input), then the microbatch order (R1).
  struct Edge {
    int u, v;
    double lag;
  };
  std::vector<Edge> edges;
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < m; ++j) {
      for (WorkKind k : {WorkKind::F, WorkKind::B, WorkKind::W}) {
        const Work v(k, s, j);
        if (std::optional<Work> u = nominalProducer(v, S))
          edges.push_back({id(u->kind, u->stage, u->mb), id(k, s, j),
                           comm(u->stage, s)});
      }
      if (j + 1 < m)
        for (WorkKind k : {WorkKind::F, WorkKind::B, WorkKind::W})
          edges.push_back({id(k, s, j), id(k, s, j + 1), 0});
    }
  // Reachability by a topological sweep (passes sorted by a valid order:
  // the heuristic's simulated start times respect every edge).
  std::vector<double> startT(N, 0), endT(N, 0);
  for (const Interval &iv : start.sim.intervals) {
    const Action &a = start.schedule.programs[iv.rank][iv.actionIndex];
    int x = id(a.work.kind, a.work.stage, a.work.mb);
    startT[x] = iv.start;
    endT[x] = iv.end;
  }
  std::vector<int> topo(N);
  for (int i = 0; i < N; ++i)
    topo[i] = i;
  std::vector<std::vector<int>> succ(N);
  std::vector<int> indeg(N, 0);
  for (const Edge &e : edges) {
    succ[e.u].push_back(e.v);
    ++indeg[e.v];
  }
  {
    std::vector<int> q;
    for (int i = 0; i < N; ++i)
      if (!indeg[i])
        q.push_back(i);
    topo.clear();
    for (size_t h = 0; h < q.size(); ++h) {
      topo.push_back(q[h]);
      for (int v : succ[q[h]])
        if (--indeg[v] == 0)
          q.push_back(v);
    }
  }
  int words = (N + 63) / 64;
  std::vector<uint64_t> reach((size_t)N * words, 0); // reach[u] ∋ v: u < v
  for (int k = N - 1; k >= 0; --k) {
    int u = topo[k];
    uint64_t *ru = &reach[(size_t)u * words];
    for (int v : succ[u]) {
      ru[v / 64] |= 1ull << (v % 64);
      const uint64_t *rv = &reach[(size_t)v * words];
      for (int w = 0; w < words; ++w)
        ru[w] |= rv[w];
    }
  }
  auto before = [&](int u, int v) {
    return (reach[(size_t)u * words + v / 64] >> (v % 64)) & 1;
  };

  // Columns: E (N), C, then O pairs.
  std::vector<std::pair<int, int>> pairs;
  for (int u = 0; u < N; ++u)
    for (int v = u + 1; v < N; ++v)
      if (ps[u].rank == ps[v].rank && !before(u, v) && !before(v, u))
        pairs.push_back({u, v});
  int colC = N, nCols = N + 1 + (int)pairs.size();
  double H = start.makespan;
  double M = H;
  std::vector<double> colLb(nCols, 0), colUb(nCols, H), obj(nCols, 0);
  for (int x = 0; x < N; ++x)
    colLb[x] = ps[x].t;
  colUb[colC] = H;
  obj[colC] = 1;
  for (size_t k = 0; k < pairs.size(); ++k)
    colUb[N + 1 + k] = 1;
  // R3: each rank's first pass at its earliest time.
  std::vector<double> est(S, 0);
  for (int s = 1; s < S; ++s)
    est[s] = est[s - 1] + c.timeOf(WorkKind::F, s - 1) + comm(s - 1, s);
  std::vector<double> firstStart(p, 0);
  for (int r = 0; r < p; ++r) {
    int s0 = -1;
    for (int s = 0; s < S; ++s)
      if (pl.rank(0, s) == r) {
        s0 = s;
        break;
      }
    int x = id(WorkKind::F, s0, 0);
    firstStart[r] = est[s0];
    colLb[x] = colUb[x] = est[s0] + ps[x].t;
  }

  // Rows in compressed form, the matrix built once at the end (appending
  // rows one by one to a CoinPackedMatrix copies it each time: quadratic).
  std::vector<double> rowLb, rowUb, elems;
  std::vector<int> inds, lens;
  std::vector<CoinBigIndex> starts;
  auto addRow = [&](const CoinPackedVector &v, double lo, double hi) {
    starts.push_back(CoinBigIndex(elems.size()));
    lens.push_back(v.getNumElements());
    for (int k = 0; k < v.getNumElements(); ++k) {
      inds.push_back(v.getIndices()[k]);
      elems.push_back(v.getElements()[k]);
    }
    rowLb.push_back(lo);
    rowUb.push_back(hi);
  };
  const double inf = COIN_DBL_MAX;
  for (const Edge &e : edges) {
    CoinPackedVector v;
    v.insert(e.v, 1);
    v.insert(e.u, -1);
    addRow(v, e.lag + ps[e.v].t, inf);
  }
  for (int s = 0; s < S; ++s) {
    int x = id(WorkKind::W, s, m - 1);
    CoinPackedVector v;
    v.insert(colC, 1);
    v.insert(x, -1);
    addRow(v, -firstStart[ps[x].rank], inf);
  }
  for (size_t k = 0; k < pairs.size(); ++k) {
    auto [u, w] = pairs[k];
    int o = N + 1 + (int)k; // o = 1: u before w
    // E_w - E_u - M o >= T_w - M
    CoinPackedVector a;
    a.insert(w, 1);
    a.insert(u, -1);
    a.insert(o, -M);
    addRow(a, ps[w].t - M, inf);
    // E_u - E_w + M o >= T_u
    CoinPackedVector b;
    b.insert(u, 1);
    b.insert(w, -1);
    b.insert(o, M);
    addRow(b, ps[u].t, inf);
  }
  if (opts.memLimit >= 0) {
    std::vector<std::vector<std::pair<int, int>>> pairOf(N); // (other, col)
    for (size_t k = 0; k < pairs.size(); ++k) {
      pairOf[pairs[k].first].push_back({pairs[k].second, (int)k});
      pairOf[pairs[k].second].push_back({pairs[k].first, (int)k});
    }
    for (int x = 0; x < N; ++x) {
      if (ps[x].kind != WorkKind::F)
        continue;
      double fixed = c.memDelta(WorkKind::F, ps[x].stage);
      for (int y = 0; y < N; ++y)
        if (y != x && ps[y].rank == ps[x].rank && before(y, x))
          fixed += c.memDelta(ps[y].kind, ps[y].stage);
      CoinPackedVector v;
      for (auto [y, k] : pairOf[x]) {
        double d = c.memDelta(ps[y].kind, ps[y].stage);
        // [y before x] = o if y is the pair's first, else 1 - o.
        if (pairs[k].first == y) {
          v.insert(N + 1 + k, d);
        } else {
          v.insert(N + 1 + k, -d);
          fixed += d;
        }
      }
      addRow(v, -inf, opts.memLimit - fixed + 1e-9);
    }
  }

  CoinPackedMatrix mat(false, nCols, int(rowLb.size()),
                       CoinBigIndex(elems.size()), elems.data(), inds.data(),
                       starts.data(), lens.data());
  const bool debug = std::getenv("PF_AUTO_DEBUG") != nullptr;
  if (debug)
    std::fprintf(stderr, "ilp: %d passes, %zu pairs, %zu rows, %.3f s left\n",
                 N, pairs.size(), rowLb.size(), deadline.left());
  OsiClpSolverInterface solver;
  solver.loadProblem(mat, colLb.data(), colUb.data(), obj.data(),
                     rowLb.data(), rowUb.data());
  for (size_t k = 0; k < pairs.size(); ++k)
    solver.setInteger(N + 1 + (int)k);
  solver.messageHandler()->setLogLevel(0);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.solver()->messageHandler()->setLogLevel(0);
  // The work budget decides (nodes); the seconds are only a ceiling (the
  // whole call's time left, and the older CBC-only limit), on the wall
  // clock.
  model.setMaximumNodes(
      int(std::min<int64_t>(std::max<int64_t>(0, opts.ilpMaxNodes), 1 << 30)));
  double seconds = deadline.left();
  if (opts.ilpTimeLimit >= 0)
    seconds = std::min(seconds, opts.ilpTimeLimit);
  model.setUseElapsedTime(true);
  // Cheaper nodes and root (measured: strong branching and repeated root
  // cut passes cost seconds on the big-M model and rarely pay off).
  model.setNumberStrong(0);
  model.setMaximumCutPassesAtRoot(1);
  model.setMaximumSeconds(std::max(0.01, seconds));
  if (auto *clp = dynamic_cast<OsiClpSolverInterface *>(model.solver()))
    clp->getModelPtr()->setMaximumSeconds(std::max(0.01, seconds));
  model.setAllowableFractionGap(std::max(0.0, opts.ilpGap));
  model.setAllowableGap(1e-7);
  CglProbing probing;
  probing.setUsingObjective(true);
  CglGomory gomory;
  CglMixedIntegerRounding2 mir;
  model.addCutGenerator(&probing, -1, "Probing");
  model.addCutGenerator(&gomory, -1, "Gomory");
  model.addCutGenerator(&mir, -1, "MIR");

  // Warm start from the heuristic.
  std::vector<double> ws(nCols, 0);
  for (int x = 0; x < N; ++x)
    ws[x] = endT[x];
  ws[colC] = start.zbCost;
  for (size_t k = 0; k < pairs.size(); ++k)
    ws[N + 1 + k] = startT[pairs[k].first] < startT[pairs[k].second] ? 1 : 0;
  model.setBestSolution(ws.data(), nCols, start.zbCost, true);

  const auto cbcStart = std::chrono::steady_clock::now();
  model.branchAndBound();
  const double cbcSeconds = std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - cbcStart)
                                .count();
  if (debug)
    std::fprintf(stderr, "ilp: done, %d nodes in %.3f s of %.3f\n",
                 model.getNodeCount(), cbcSeconds, seconds);
  start.ilpRan = true;
  start.ilpBound = model.getBestPossibleObjValue();
  start.ilpOptimal = model.isProvenOptimal();
  start.ilpNodes = model.getNodeCount();
  const double *sol = model.bestSolution();
  double inc = sol ? model.getObjValue() : start.zbCost;
  start.ilpGap = inc > 0 ? std::max(0.0, (inc - start.ilpBound) / inc) : 0;
  // Clp's own limit (the root LP) may stop it without CBC's flag.
  bool outOfTime = model.isSecondsLimitReached() ||
                   (!model.isProvenOptimal() && !model.isNodeLimitReached() &&
                    cbcSeconds >= std::max(0.01, seconds));
  if (outOfTime) {
    start.ilpStatus = "time limit";
    noteCutShort(start, "ILP");
  } else if (model.isNodeLimitReached()) {
    start.ilpStatus = "node limit";
  } else if (model.isProvenOptimal()) {
    start.ilpStatus = start.ilpGap > 1e-9 ? "gap" : "optimal";
  } else if (model.isProvenInfeasible()) {
    start.ilpStatus = "infeasible";
  } else {
    start.ilpStatus = "stopped";
  }
  if (!sol) {
    start.note = "ILP found no solution";
    return start;
  }
  // Per-rank order from the end times (start, then end, then kind order).
  std::vector<std::vector<int>> byRank(p);
  for (int x = 0; x < N; ++x)
    byRank[ps[x].rank].push_back(x);
  std::vector<std::vector<Work>> orders(p);
  for (int r = 0; r < p; ++r) {
    std::vector<int> &xs = byRank[r];
    std::sort(xs.begin(), xs.end(), [&](int a, int b) {
      double sa = sol[a] - ps[a].t, sb = sol[b] - ps[b].t;
      if (std::fabs(sa - sb) > 1e-6)
        return sa < sb;
      if (before(a, b))
        return true;
      if (before(b, a))
        return false;
      return sol[a] < sol[b];
    });
    for (int x : xs) {
      Work w;
      w.kind = ps[x].kind;
      w.stage = ps[x].stage;
      w.mb = ps[x].mb;
      orders[r].push_back(w);
    }
  }
  Schedule s = ordersToSchedule(orders, pl, m);
  VerifyOptions vo;
  vo.cost = c;
  if (opts.memLimit >= 0)
    vo.memLimit = opts.memLimit;
  if (Status st = verify(s, vo); !st) {
    start.note = "ILP solution rejected by the verifier: " + st.message();
    return start;
  }
  auto sim = simulate(s, c);
  if (!sim) {
    start.note = "ILP solution does not simulate: " + sim.message();
    return start;
  }
  double zb = 0;
  for (const RankStats &r : sim->ranks)
    zb = std::max(zb, r.lastEnd - r.firstStart);
  if (zb < start.zbCost - 1e-9) {
    start.schedule = std::move(s);
    start.sim = sim.take();
    start.zbCost = zb;
    start.makespan = start.sim.makespan;
    start.method = "ilp";
  } else {
    start.note = "ILP found nothing better than the heuristic";
  }
  return start;
}

} // namespace pipeforge::sched::detail
