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
#include <chrono>
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

/// A precedence edge: E_v >= E_u + lag + T_v.
struct Edge {
  int u, v;
  double lag;
};

/// The passes of the problem, 3 * S * m of them numbered by stage,
/// microbatch and kind (F, B, W), each on its stage's rank.
struct Passes {
  Passes(const Placement &pl, const CostModel &c, int microbatches,
         int ranks)
      : pl(pl), c(c), S(pl.numStages), m(microbatches), p(ranks),
        N(3 * S * m), ps(N) {
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < m; ++j)
        for (WorkKind k : {WorkKind::F, WorkKind::B, WorkKind::W})
          ps[id(k, s, j)] = {k, s, j, pl.rank(0, s), c.timeOf(k, s)};
  }
  int id(WorkKind k, int s, int j) const {
    return (s * m + j) * 3 + (k == WorkKind::F ? 0 : k == WorkKind::B ? 1 : 2);
  }
  int id(const Work &w) const { return id(w.kind, w.stage, w.mb); }
  /// The message time between stages a and b (0 on one rank).
  double comm(int a, int b) const {
    return pl.rank(0, a) == pl.rank(0, b) ? 0.0 : c.tcomm;
  }
  /// Precedence edges (u -> v, lag = comm): each pass's input (the
  /// dependency rule, Deps.h; a B's saved F is implied by its input), then
  /// the microbatch order (R1).
  std::vector<Edge> edges() const;

  const Placement &pl;
  const CostModel &c;
  int S, m, p, N;
  std::vector<Pass> ps;
};

std::vector<Edge> Passes::edges() const {
  std::vector<Edge> edges;
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < m; ++j) {
      for (WorkKind k : {WorkKind::F, WorkKind::B, WorkKind::W}) {
        const Work v(k, s, j);
        if (std::optional<Work> u = nominalProducer(v, S))
          edges.push_back({id(*u), id(k, s, j), comm(u->stage, s)});
      }
      if (j + 1 < m)
        for (WorkKind k : {WorkKind::F, WorkKind::B, WorkKind::W})
          edges.push_back({id(k, s, j), id(k, s, j + 1), 0});
    }
  return edges;
}

/// The transitive closure of the edges: before(u, v) when a chain of edges
/// leads from u to v.
class Reachability {
public:
  Reachability(int N, const std::vector<Edge> &edges);
  bool before(int u, int v) const {
    return (reach[(size_t)u * words + v / 64] >> (v % 64)) & 1;
  }

private:
  int words;
  std::vector<uint64_t> reach; // reach[u] ∋ v: u < v
};

Reachability::Reachability(int N, const std::vector<Edge> &edges)
    : words((N + 63) / 64), reach((size_t)N * words, 0) {
  // A topological sweep: successors before their predecessors.
  std::vector<std::vector<int>> succ(N);
  std::vector<int> indeg(N, 0);
  for (const Edge &e : edges) {
    succ[e.u].push_back(e.v);
    ++indeg[e.v];
  }
  std::vector<int> topo;
  for (int i = 0; i < N; ++i)
    if (!indeg[i])
      topo.push_back(i);
  for (size_t h = 0; h < topo.size(); ++h)
    for (int v : succ[topo[h]])
      if (--indeg[v] == 0)
        topo.push_back(v);
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
}

/// The ILP: columns E (N), C, then one O per pair of passes on a rank that
/// no edge orders; rows in compressed form, the matrix built once at the
/// end (appending rows one by one to a CoinPackedMatrix copies it each
/// time: quadratic).
struct IlpModel {
  int orderCol(size_t k) const { return colC + 1 + int(k); }
  void addRow(const CoinPackedVector &v, double lo, double hi);
  CoinPackedMatrix matrix() const {
    return CoinPackedMatrix(false, nCols, int(rowLb.size()),
                            CoinBigIndex(elems.size()), elems.data(),
                            inds.data(), starts.data(), lens.data());
  }

  std::vector<std::pair<int, int>> pairs; ///< O columns: (u, w), u < w
  int colC = 0, nCols = 0;
  std::vector<double> colLb, colUb, obj;
  std::vector<double> firstStart; ///< per rank: its first pass's start (R3)
  std::vector<double> rowLb, rowUb, elems;
  std::vector<int> inds, lens;
  std::vector<CoinBigIndex> starts;
};

void IlpModel::addRow(const CoinPackedVector &v, double lo, double hi) {
  starts.push_back(CoinBigIndex(elems.size()));
  lens.push_back(v.getNumElements());
  for (int k = 0; k < v.getNumElements(); ++k) {
    inds.push_back(v.getIndices()[k]);
    elems.push_back(v.getElements()[k]);
  }
  rowLb.push_back(lo);
  rowUb.push_back(hi);
}

const double kInf = COIN_DBL_MAX;

/// The columns and their bounds: E_x in [T_x, H], C in [0, H] (the
/// objective), the O pairs binary, each rank's first pass fixed at its
/// earliest end (R3).
IlpModel ilpColumns(const Passes &P, const Reachability &R, double H) {
  IlpModel mod;
  const int N = P.N;
  for (int u = 0; u < N; ++u)
    for (int v = u + 1; v < N; ++v)
      if (P.ps[u].rank == P.ps[v].rank && !R.before(u, v) && !R.before(v, u))
        mod.pairs.push_back({u, v});
  mod.colC = N;
  mod.nCols = N + 1 + (int)mod.pairs.size();
  mod.colLb.assign(mod.nCols, 0);
  mod.colUb.assign(mod.nCols, H);
  mod.obj.assign(mod.nCols, 0);
  for (int x = 0; x < N; ++x)
    mod.colLb[x] = P.ps[x].t;
  mod.colUb[mod.colC] = H;
  mod.obj[mod.colC] = 1;
  for (size_t k = 0; k < mod.pairs.size(); ++k)
    mod.colUb[mod.orderCol(k)] = 1;
  // R3: each rank's first pass at its earliest time.
  std::vector<double> est(P.S, 0);
  for (int s = 1; s < P.S; ++s)
    est[s] = est[s - 1] + P.c.timeOf(WorkKind::F, s - 1) + P.comm(s - 1, s);
  mod.firstStart.assign(P.p, 0);
  for (int r = 0; r < P.p; ++r) {
    int s0 = -1;
    for (int s = 0; s < P.S; ++s)
      if (P.pl.rank(0, s) == r) {
        s0 = s;
        break;
      }
    int x = P.id(WorkKind::F, s0, 0);
    mod.firstStart[r] = est[s0];
    mod.colLb[x] = mod.colUb[x] = est[s0] + P.ps[x].t;
  }
  return mod;
}

/// E_v >= E_u + lag + T_v per edge; C >= E(W(s, m-1)) - start_r per stage.
void addPrecedenceRows(IlpModel &mod, const Passes &P,
                       const std::vector<Edge> &edges) {
  for (const Edge &e : edges) {
    CoinPackedVector v;
    v.insert(e.v, 1);
    v.insert(e.u, -1);
    mod.addRow(v, e.lag + P.ps[e.v].t, kInf);
  }
  for (int s = 0; s < P.S; ++s) {
    int x = P.id(WorkKind::W, s, P.m - 1);
    CoinPackedVector v;
    v.insert(mod.colC, 1);
    v.insert(x, -1);
    mod.addRow(v, -mod.firstStart[P.ps[x].rank], kInf);
  }
}

/// The big-M disjunction of every O pair: one of the two runs first.
void addDisjunctionRows(IlpModel &mod, const Passes &P, double M) {
  for (size_t k = 0; k < mod.pairs.size(); ++k) {
    auto [u, w] = mod.pairs[k];
    int o = mod.orderCol(k); // o = 1: u before w
    // E_w - E_u - M o >= T_w - M
    CoinPackedVector a;
    a.insert(w, 1);
    a.insert(u, -1);
    a.insert(o, -M);
    mod.addRow(a, P.ps[w].t - M, kInf);
    // E_u - E_w + M o >= T_u
    CoinPackedVector b;
    b.insert(u, 1);
    b.insert(w, -1);
    b.insert(o, M);
    mod.addRow(b, P.ps[u].t, kInf);
  }
}

/// At every F: the memory deltas of the passes before it on its rank (the
/// ordered ones as constants, the others through O) plus its own M_B stay
/// within `memLimit`.
void addMemoryRows(IlpModel &mod, const Passes &P, const Reachability &R,
                   double memLimit) {
  const CostModel &c = P.c;
  const int N = P.N;
  std::vector<std::vector<std::pair<int, int>>> pairOf(N); // (other, col)
  for (size_t k = 0; k < mod.pairs.size(); ++k) {
    pairOf[mod.pairs[k].first].push_back({mod.pairs[k].second, (int)k});
    pairOf[mod.pairs[k].second].push_back({mod.pairs[k].first, (int)k});
  }
  for (int x = 0; x < N; ++x) {
    if (P.ps[x].kind != WorkKind::F)
      continue;
    double fixed = c.memDelta(WorkKind::F, P.ps[x].stage);
    for (int y = 0; y < N; ++y)
      if (y != x && P.ps[y].rank == P.ps[x].rank && R.before(y, x))
        fixed += c.memDelta(P.ps[y].kind, P.ps[y].stage);
    CoinPackedVector v;
    for (auto [y, k] : pairOf[x]) {
      double d = c.memDelta(P.ps[y].kind, P.ps[y].stage);
      // [y before x] = o if y is the pair's first, else 1 - o.
      if (mod.pairs[k].first == y) {
        v.insert(mod.orderCol(k), d);
      } else {
        v.insert(mod.orderCol(k), -d);
        fixed += d;
      }
    }
    mod.addRow(v, -kInf, memLimit - fixed + 1e-9);
  }
}

/// The heuristic's solution as a starting point: its end times, its cost
/// and the order of every pair as its simulation ran them.
std::vector<double> warmStart(const IlpModel &mod, const Passes &P,
                              const AutoResult &start) {
  std::vector<double> startT(P.N, 0), endT(P.N, 0);
  for (const Interval &iv : start.sim.intervals) {
    const Action &a = start.schedule.programs[iv.rank][iv.actionIndex];
    int x = P.id(a.work.kind, a.work.stage, a.work.mb);
    startT[x] = iv.start;
    endT[x] = iv.end;
  }
  std::vector<double> ws(mod.nCols, 0);
  for (int x = 0; x < P.N; ++x)
    ws[x] = endT[x];
  ws[mod.colC] = start.zbCost;
  for (size_t k = 0; k < mod.pairs.size(); ++k)
    ws[mod.orderCol(k)] =
        startT[mod.pairs[k].first] < startT[mod.pairs[k].second] ? 1 : 0;
  return ws;
}

/// What CBC reports after branch and bound.
struct IlpOutcome {
  std::optional<std::vector<double>> solution; ///< every column, if found
  double objective = 0; ///< the solution's (when there is one)
  double bound = 0;
  bool optimal = false, infeasible = false, nodeLimit = false;
  bool outOfTime = false;
  int nodes = 0;
};

/// CBC on the model from the warm start, within the work budget (nodes)
/// and the time left.
IlpOutcome solveIlp(const IlpModel &mod, const std::vector<double> &ws,
                    double wsCost, const AutoOptions &opts,
                    const Deadline &deadline, bool debug) {
  OsiClpSolverInterface solver;
  solver.loadProblem(mod.matrix(), mod.colLb.data(), mod.colUb.data(),
                     mod.obj.data(), mod.rowLb.data(), mod.rowUb.data());
  for (size_t k = 0; k < mod.pairs.size(); ++k)
    solver.setInteger(mod.orderCol(k));
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
  model.setBestSolution(ws.data(), mod.nCols, wsCost, true);

  const auto cbcStart = std::chrono::steady_clock::now();
  model.branchAndBound();
  const double cbcSeconds = std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - cbcStart)
                                .count();
  if (debug)
    std::fprintf(stderr, "ilp: done, %d nodes in %.3f s of %.3f\n",
                 model.getNodeCount(), cbcSeconds, seconds);
  IlpOutcome out;
  out.bound = model.getBestPossibleObjValue();
  out.optimal = model.isProvenOptimal();
  out.infeasible = model.isProvenInfeasible();
  out.nodeLimit = model.isNodeLimitReached();
  out.nodes = model.getNodeCount();
  if (const double *sol = model.bestSolution()) {
    out.solution.emplace(sol, sol + mod.nCols);
    out.objective = model.getObjValue();
  }
  // Clp's own limit (the root LP) may stop it without CBC's flag.
  out.outOfTime = model.isSecondsLimitReached() ||
                  (!out.optimal && !out.nodeLimit &&
                   cbcSeconds >= std::max(0.01, seconds));
  return out;
}

/// The ILP's status, bound, gap and nodes into the result.
void recordOutcome(AutoResult &res, const IlpOutcome &out) {
  res.ilpRan = true;
  res.ilpBound = out.bound;
  res.ilpOptimal = out.optimal;
  res.ilpNodes = out.nodes;
  double inc = out.solution ? out.objective : res.zbCost;
  res.ilpGap = inc > 0 ? std::max(0.0, (inc - res.ilpBound) / inc) : 0;
  if (out.outOfTime) {
    res.ilpStatus = "time limit";
    noteCutShort(res, "ILP");
  } else if (out.nodeLimit) {
    res.ilpStatus = "node limit";
  } else if (out.optimal) {
    res.ilpStatus = res.ilpGap > 1e-9 ? "gap" : "optimal";
  } else if (out.infeasible) {
    res.ilpStatus = "infeasible";
  } else {
    res.ilpStatus = "stopped";
  }
}

/// Per-rank orders read from the solution's end times (by start, then the
/// precedence, then end).
std::vector<std::vector<Work>> ordersOf(const Passes &P, const Reachability &R,
                                        const std::vector<double> &sol) {
  std::vector<std::vector<int>> byRank(P.p);
  for (int x = 0; x < P.N; ++x)
    byRank[P.ps[x].rank].push_back(x);
  std::vector<std::vector<Work>> orders(P.p);
  for (int r = 0; r < P.p; ++r) {
    std::vector<int> &xs = byRank[r];
    std::sort(xs.begin(), xs.end(), [&](int a, int b) {
      double sa = sol[a] - P.ps[a].t, sb = sol[b] - P.ps[b].t;
      if (std::fabs(sa - sb) > 1e-6)
        return sa < sb;
      if (R.before(a, b))
        return true;
      if (R.before(b, a))
        return false;
      return sol[a] < sol[b];
    });
    for (int x : xs) {
      Work w;
      w.kind = P.ps[x].kind;
      w.stage = P.ps[x].stage;
      w.mb = P.ps[x].mb;
      orders[r].push_back(w);
    }
  }
  return orders;
}

/// The ILP's schedule replaces the heuristic's if the verifier accepts it
/// and its simulated Zero Bubble cost is lower; otherwise a note says why
/// not.
void acceptIfBetter(AutoResult &res, Schedule s, const AutoOptions &opts) {
  const CostModel &c = opts.cost;
  VerifyOptions vo;
  vo.cost = c;
  if (opts.memLimit >= 0)
    vo.memLimit = opts.memLimit;
  if (Status st = verify(s, vo); !st) {
    res.note = "ILP solution rejected by the verifier: " + st.message();
    return;
  }
  auto sim = simulate(s, c);
  if (!sim) {
    res.note = "ILP solution does not simulate: " + sim.message();
    return;
  }
  double zb = 0;
  for (const RankStats &r : sim->ranks)
    zb = std::max(zb, r.lastEnd - r.firstStart);
  if (zb < res.zbCost - 1e-9) {
    res.schedule = std::move(s);
    res.sim = sim.take();
    res.zbCost = zb;
    res.makespan = res.sim.makespan;
    res.method = "ilp";
  } else {
    res.note = "ILP found nothing better than the heuristic";
  }
}
} // namespace

AutoResult autoIlp(const AutoOptions &opts, AutoResult start,
                   const Deadline &deadline) {
  const Placement &pl = start.schedule.placement;
  int N = 3 * pl.numStages * opts.microbatches;
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
  // The model: passes, their precedence and its closure, columns, rows
  // (the heuristic's makespan H bounds every end and is the big M: R2).
  const Passes P(pl, opts.cost, opts.microbatches, opts.ranks);
  const std::vector<Edge> edges = P.edges();
  const Reachability R(P.N, edges);
  const double H = start.makespan;
  IlpModel mod = ilpColumns(P, R, H);
  addPrecedenceRows(mod, P, edges);
  addDisjunctionRows(mod, P, /*M=*/H);
  if (opts.memLimit >= 0)
    addMemoryRows(mod, P, R, opts.memLimit);

  // Solving, from the heuristic's solution.
  const bool debug = std::getenv("PF_AUTO_DEBUG") != nullptr;
  if (debug)
    std::fprintf(stderr, "ilp: %d passes, %zu pairs, %zu rows, %.3f s left\n",
                 N, mod.pairs.size(), mod.rowLb.size(), deadline.left());
  const IlpOutcome out =
      solveIlp(mod, warmStart(mod, P, start), start.zbCost, opts, deadline,
               debug);
  recordOutcome(start, out);
  if (!out.solution) {
    start.note = "ILP found no solution";
    return start;
  }

  // Reading the solution back: per-rank orders, checked and simulated.
  acceptIfBetter(start,
                 ordersToSchedule(ordersOf(P, R, *out.solution), pl,
                                  opts.microbatches),
                 opts);
  return start;
}

} // namespace pipeforge::sched::detail
