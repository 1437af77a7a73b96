//===- AutoHeuristic.cpp - The automatic scheduler's heuristic ------------===//
//
// List scheduling on the cost model. Time advances event by event; a rank
// that is free picks, among the passes whose inputs have arrived:
//   B  (always allowed: it frees memory) -- first, or after an F when B is
//      not prioritised (strict 1F-1B alternation);
//   F  if the memory limit allows it (for a V's first chunk, room for the
//      second chunk's F of some microbatch is kept) and the rank has fewer
//      than `cap` microbatches in flight (the warm-up depth);
//   W  when nothing else can run and either the gap to the next known
//      arrival is >= T_W, or memory blocks an F, or (policy) always / when
//      the gap is small but nonzero.
// F, B, W of a stage run in microbatch order. A grid of the choices (cap
// formula, B priority, W policy, V chunk preference) is run, handcrafted
// ZB-H1 / ZB-H2 / ZB-V join as seeds when they fit the memory limit, so do
// the eight variants of the Zero Bubble repo's own greedy (AutoZbGreedy.cpp,
// linear only: the published ZB-1p / ZB-2p), and
// the best by simulated Zero Bubble cost is improved by a local search that
// moves single passes on a rank and keeps strict improvements, for at most
// `searchMoves` moves (a deterministic work budget; the wall-clock limit is
// only a ceiling, reported when it fires).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Verify.h"

#include "Deps.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace pipeforge::sched {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;

struct Params {
  double capA = 1; ///< cap = ceil(capA * downstream stages) + capB
  int capB = 0;
  bool capUnlimited = false;
  bool bPriority = true;
  int wPolicy = 0; ///< 0: gap >= T_W; 1: always when idle; 2: also small gaps
  bool preferLaterF = true; ///< V: run the second chunk's F first
};

Work mk(WorkKind k, int s, int j) {
  Work w;
  w.kind = k;
  w.stage = s;
  w.mb = j;
  return w;
}

class ListScheduler {
public:
  ListScheduler(const AutoOptions &o, const Placement &pl)
      : o(o), c(o.cost), pl(pl), p(o.ranks), m(o.microbatches),
        S(pl.numStages) {
    stagesOf.resize(p);
    for (int s = 0; s < S; ++s)
      stagesOf[pl.rank(0, s)].push_back(s);
  }

  /// Empty result when the choices deadlock under the memory limit.
  std::vector<std::vector<Work>> run(const Params &P);

private:
  double comm(int from, int to) const {
    return pl.rank(0, from) == pl.rank(0, to) ? 0 : c.tcomm;
  }
  double readyF(int s) const {
    int j = nf[s];
    if (j >= m)
      return kInf;
    if (s == 0)
      return 0;
    double e = eF[s - 1][j];
    return std::isnan(e) ? kInf : e + comm(s - 1, s);
  }
  double readyB(int s) const {
    int j = nb[s];
    if (j >= nf[s])
      return kInf;
    if (s == S - 1)
      return eF[s][j];
    double e = eB[s + 1][j];
    return std::isnan(e) ? kInf : e + comm(s + 1, s);
  }
  bool memAllowsF(int r, int s) const {
    if (o.memLimit < 0)
      return true;
    double need = mem[r] + c.memDelta(WorkKind::F, s);
    // A V's first chunk keeps room for the second chunk's F.
    for (int s2 : stagesOf[r])
      if (s2 > s)
        need += c.memDelta(WorkKind::F, s2);
    return need <= o.memLimit + kEps;
  }

  const AutoOptions &o;
  const CostModel &c;
  const Placement &pl;
  int p, m, S;
  std::vector<std::vector<int>> stagesOf;
  std::vector<int> nf, nb, nw;
  std::vector<std::vector<double>> eF, eB;
  std::vector<double> now, mem;
};

std::vector<std::vector<Work>> ListScheduler::run(const Params &P) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  nf.assign(S, 0);
  nb.assign(S, 0);
  nw.assign(S, 0);
  eF.assign(S, std::vector<double>(m, nan));
  eB.assign(S, std::vector<double>(m, nan));
  now.assign(p, 0);
  mem.assign(p, 0);
  std::vector<int> inflight(p, 0), remaining(p, 0), cap(p, 1 << 30);
  std::vector<char> lastWasF(p, 0);
  std::vector<std::vector<Work>> orders(p);
  for (int r = 0; r < p; ++r) {
    remaining[r] = 3 * m * (int)stagesOf[r].size();
    int down = S - stagesOf[r].front();
    if (!P.capUnlimited)
      cap[r] = std::max(1, (int)std::ceil(P.capA * down - 1e-9) + P.capB);
  }
  auto emit = [&](int r, WorkKind k, int s, double start) {
    int j = k == WorkKind::F ? nf[s]++ : k == WorkKind::B ? nb[s]++ : nw[s]++;
    double end = start + c.timeOf(k, s);
    if (k == WorkKind::F) {
      eF[s][j] = end;
      ++inflight[r];
    } else if (k == WorkKind::B) {
      eB[s][j] = end;
      --inflight[r];
    }
    mem[r] += c.memDelta(k, s);
    now[r] = end;
    --remaining[r];
    lastWasF[r] = k == WorkKind::F;
    orders[r].push_back(mk(k, s, j));
  };

  // Tries to start something on rank r at time t; returns the next time at
  // which something known becomes ready (kInf if none) when it waits.
  auto act = [&](int r, double t, double &nextKnown) -> bool {
    nextKnown = kInf;
    int bStage = -1, fStage = -1, wStage = -1;
    double bReady = kInf;
    bool fMemBlocked = false;
    for (int s : stagesOf[r]) {
      double rb = readyB(s);
      if (rb <= t + kEps) {
        if (bStage < 0 || rb < bReady - kEps ||
            (std::fabs(rb - bReady) <= kEps && s > bStage))
          bStage = s, bReady = rb;
      } else {
        nextKnown = std::min(nextKnown, rb);
      }
      double rf = readyF(s);
      if (rf <= t + kEps) {
        if (!memAllowsF(r, s)) {
          fMemBlocked = true;
        } else if (inflight[r] < cap[r]) {
          if (fStage < 0 || (P.preferLaterF ? s > fStage : s < fStage))
            fStage = s;
        }
      } else if (rf < kInf && memAllowsF(r, s) && inflight[r] < cap[r]) {
        nextKnown = std::min(nextKnown, rf);
      }
      if (nw[s] < nb[s] &&
          (wStage < 0 || eB[s][nw[s]] < eB[wStage][nw[wStage]]))
        wStage = s;
    }
    if (bStage >= 0 && (P.bPriority || fStage < 0 || lastWasF[r])) {
      emit(r, WorkKind::B, bStage, t);
      return true;
    }
    if (fStage >= 0) {
      emit(r, WorkKind::F, fStage, t);
      return true;
    }
    if (bStage >= 0) {
      emit(r, WorkKind::B, bStage, t);
      return true;
    }
    if (wStage >= 0) {
      double gap = nextKnown - t;
      double tw = c.timeOf(WorkKind::W, wStage);
      bool doW = fMemBlocked || gap >= tw - kEps || P.wPolicy == 1 ||
                 (P.wPolicy == 2 && gap > 0.5 * tw);
      if (doW) {
        emit(r, WorkKind::W, wStage, t);
        return true;
      }
    }
    return false;
  };

  while (true) {
    double t = kInf;
    for (int r = 0; r < p; ++r)
      if (remaining[r] > 0)
        t = std::min(t, now[r]);
    if (t == kInf)
      break;
    bool progress = false;
    double next = kInf;
    for (int r = 0; r < p; ++r) {
      if (remaining[r] == 0)
        continue;
      if (now[r] > t + kEps) {
        next = std::min(next, now[r]);
        continue;
      }
      double nk;
      if (act(r, t, nk))
        progress = true;
      else
        next = std::min(next, nk);
    }
    if (progress)
      continue;
    if (next == kInf)
      return {}; // deadlock under these choices
    for (int r = 0; r < p; ++r)
      if (remaining[r] > 0 && now[r] <= t + kEps)
        now[r] = next;
  }
  return orders;
}

double zbCostOf(const SimResult &s) {
  double z = 0;
  for (const RankStats &r : s.ranks)
    z = std::max(z, r.lastEnd - r.firstStart);
  return z;
}

struct Cand {
  std::vector<std::vector<Work>> orders;
  double zb = kInf, sum = kInf, mk = kInf;
  /// Zero Bubble cost, then the sum of all ranks' spans (lets the local
  /// search cross plateaus of the max), then the makespan.
  bool better(const Cand &o) const {
    if (zb < o.zb - 1e-9)
      return true;
    if (zb > o.zb + 1e-9)
      return false;
    if (sum < o.sum - 1e-9)
      return true;
    if (sum > o.sum + 1e-9)
      return false;
    return mk < o.mk - 1e-9;
  }
};

bool evaluate(Cand &cd, const Placement &pl, int m, const CostModel &cost) {
  double sum = 0, mk = 0;
  double zb = detail::replayZbCost(cd.orders, pl, m, cost, &sum, &mk);
  if (zb < 0)
    return false;
  cd.zb = zb;
  cd.sum = sum;
  cd.mk = mk;
  return true;
}

std::vector<std::vector<Work>> ordersOf(const Schedule &s) {
  std::vector<std::vector<Work>> o(s.numRanks());
  for (int r = 0; r < s.numRanks(); ++r)
    for (const Action &a : s.programs[r])
      if (a.kind == ActionKind::Compute)
        o[r].push_back(a.work);
  return o;
}

/// Moves one pass of a rank by up to `reach` positions and keeps strict
/// improvements that fit memory (first improvement; the scan goes on from
/// the move after an improvement, cyclically over ranks and passes, and
/// stops after a full round without one: a local optimum). Every move tried
/// counts against `opts.searchMoves`; the wall-clock `deadline` is only a
/// ceiling and is noted in `res` when it stops the search first.
void localSearch(Cand &best, const AutoOptions &opts, const Placement &pl,
                 const detail::Deadline &deadline, AutoResult &res) {
  const int reach = 6;
  int64_t budget = std::max<int64_t>(0, opts.searchMoves);
  if (opts.searchTimeLimit == 0)
    budget = 0;
  int64_t moves = 0;
  res.searchMovesUsed = 0;
  res.searchConverged = false;
  // Position of the scan: (rank, pass, offset); `sinceImproved` counts the
  // positions visited since the last improvement.
  int64_t positions = 0;
  for (int r = 0; r < opts.ranks; ++r)
    positions += int64_t(best.orders[r].size()) * (2 * reach);
  int64_t sinceImproved = 0;
  int r = 0, a = 0, di = 0;
  auto advance = [&]() {
    if (++di == 2 * reach) {
      di = 0;
      if (++a >= (int)best.orders[r].size()) {
        a = 0;
        r = (r + 1) % opts.ranks;
      }
    }
  };
  for (; sinceImproved < positions; advance(), ++sinceImproved) {
    auto &ord = best.orders[r];
    int n = (int)ord.size();
    if (a >= n)
      continue;
    int d = di < reach ? di - reach : di - reach + 1; // -reach..-1, 1..reach
    int b = a + d;
    if (b < 0 || b >= n)
      continue;
    // Keep F, B, W of a stage in microbatch order (the ILP's R1).
    bool sameKind = false;
    for (int k = std::min(a, b); k <= std::max(a, b) && !sameKind; ++k)
      if (k != a && ord[k].kind == ord[a].kind &&
          ord[k].stage == ord[a].stage)
        sameKind = true;
    if (sameKind)
      continue;
    if (moves >= budget) {
      res.searchMovesUsed = moves;
      return;
    }
    if (deadline.passed()) {
      res.searchMovesUsed = moves;
      detail::noteCutShort(res, "local search");
      return;
    }
    ++moves;
    auto move = [&](int from, int to) {
      if (from < to)
        std::rotate(ord.begin() + from, ord.begin() + from + 1,
                    ord.begin() + to + 1);
      else
        std::rotate(ord.begin() + to, ord.begin() + from,
                    ord.begin() + from + 1);
    };
    move(a, b);
    Cand c2;
    bool ok = (opts.memLimit < 0 ||
               detail::ordersFitMemory({ord}, opts.cost, opts.memLimit));
    if (ok) {
      c2.orders.swap(best.orders);
      ok = evaluate(c2, pl, opts.microbatches, opts.cost);
      c2.orders.swap(best.orders);
    }
    if (ok && c2.better(best)) {
      best.zb = c2.zb;
      best.sum = c2.sum;
      best.mk = c2.mk;
      sinceImproved = -1; // a full round from here
    } else {
      move(b, a);
    }
  }
  res.searchMovesUsed = moves;
  res.searchConverged = true;
}
} // namespace

namespace detail {

Schedule ordersToSchedule(const std::vector<std::vector<Work>> &orders,
                          const Placement &pl, int m) {
  Schedule s;
  s.name = "auto";
  s.placement = pl;
  s.numMicrobatches = m;
  s.programs.resize(pl.numRanks);
  for (size_t r = 0; r < orders.size(); ++r)
    for (const Work &w : orders[r])
      s.programs[r].push_back(Action::compute(w));
  return s;
}

void noteCutShort(AutoResult &r, const std::string &part) {
  r.timeLimitHit = true;
  if (r.cutShort.find(part) == std::string::npos)
    r.cutShort += (r.cutShort.empty() ? "" : ", ") + part;
}

double replayZbCost(const std::vector<std::vector<Work>> &orders,
                    const Placement &pl, int m, const CostModel &cost,
                    double *sumSpans, double *makespan) {
  const int p = (int)orders.size(), S = pl.numStages;
  // End times per (stage, microbatch); < 0: not run yet.
  std::vector<double> eF((size_t)S * m, -1), eB((size_t)S * m, -1);
  std::vector<size_t> pc(p, 0);
  std::vector<double> now(p, 0), first(p, -1);
  size_t total = 0, done = 0;
  for (const auto &o : orders)
    total += o.size();
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto &ord = orders[r];
      while (pc[r] < ord.size()) {
        const Work &w = ord[pc[r]];
        const int s = w.stage, j = w.mb;
        if (s < 0 || s >= S || j < 0 || j >= m)
          return -1;
        if (w.kind == WorkKind::BW)
          return -1;
        // Its predecessors (the dependency rule, Deps.h) have run; a
        // remote one's output arrives tcomm after its end.
        double ready = 0;
        auto waitFor = [&](const Work &d, detail::DepRole) {
          const std::vector<double> &ends = d.kind == WorkKind::F ? eF : eB;
          double e = ends[(size_t)d.stage * m + d.mb];
          if (e < 0)
            return false;
          ready =
              std::max(ready, pl.rank(0, d.stage) == r ? e : e + cost.tcomm);
          return true;
        };
        if (!detail::forEachPredecessor(w, S, waitFor))
          break;
        double start = std::max(now[r], ready);
        double end = start + cost.timeOf(w.kind, s);
        if (first[r] < 0)
          first[r] = start;
        now[r] = end;
        if (w.kind == WorkKind::F)
          eF[(size_t)s * m + j] = end;
        else if (w.kind == WorkKind::B)
          eB[(size_t)s * m + j] = end;
        ++pc[r];
        ++done;
        progress = true;
      }
    }
  }
  if (done != total)
    return -1;
  double zb = 0, sum = 0, mk = 0;
  for (int r = 0; r < p; ++r) {
    if (orders[r].empty())
      continue;
    zb = std::max(zb, now[r] - first[r]);
    sum += now[r] - first[r];
    mk = std::max(mk, now[r]);
  }
  if (sumSpans)
    *sumSpans = sum;
  if (makespan)
    *makespan = mk;
  return zb;
}

bool ordersFitMemory(const std::vector<std::vector<Work>> &orders,
                     const CostModel &cost, double limit) {
  for (const auto &ord : orders) {
    double mem = 0;
    for (const Work &w : ord) {
      mem += cost.memDelta(w.kind, w.stage);
      if (mem > limit + kEps)
        return false;
    }
  }
  return true;
}

Expected<AutoResult> autoHeuristic(const AutoOptions &opts,
                                   const Deadline &deadline) {
  AutoResult res;
  Placement pl = opts.vShape ? Placement::vShape(opts.ranks)
                             : Placement::linear(opts.ranks);
  int m = opts.microbatches;
  Cand best;
  auto consider = [&](std::vector<std::vector<Work>> orders) {
    if (orders.empty())
      return;
    if (opts.memLimit >= 0 &&
        !ordersFitMemory(orders, opts.cost, opts.memLimit))
      return;
    Cand c;
    c.orders = std::move(orders);
    if (evaluate(c, pl, m, opts.cost) && c.better(best))
      best = std::move(c);
  };

  // Handcrafted seeds.
  std::vector<ScheduleKind> seeds;
  if (opts.vShape)
    seeds = {ScheduleKind::ZBV};
  else
    seeds = {ScheduleKind::ZBH1, ScheduleKind::ZBH2};
  for (ScheduleKind k : seeds) {
    GenOptions g;
    g.ranks = opts.ranks;
    g.microbatches = m;
    auto s = generate(k, g);
    if (s)
      consider(ordersOf(*s));
  }

  // The Zero Bubble repo's own greedy (the published ZB-1p / ZB-2p), all
  // eight settings of its binary choices (AutoZbGreedy.cpp).
  if (!opts.vShape)
    for (int ab = 0; ab < 2; ++ab)
      for (int pb = 0; pb < 2; ++pb)
        for (int nb = 0; nb < 2; ++nb)
          consider(detail::zbGreedyOrders(opts, ab, pb, nb));

  // The grid of heuristic choices.
  ListScheduler ls(opts, pl);
  std::vector<Params> grid;
  const double capAs[] = {1, 1.5, 1.75, 2, 2.25, 2.5, 3};
  for (int unl = 0; unl < 2; ++unl)
    for (double a : capAs)
      for (int b = -2; b <= 2; ++b) {
        if (unl && (a != 1 || b != 0))
          continue;
        for (int bp = 0; bp < 2; ++bp)
          for (int wp = 0; wp < 3; ++wp)
            for (int lf = 0; lf < (opts.vShape ? 2 : 1); ++lf) {
              Params P;
              P.capUnlimited = unl;
              P.capA = a;
              P.capB = b;
              P.bPriority = bp;
              P.wPolicy = wp;
              P.preferLaterF = lf == 0;
              grid.push_back(P);
            }
      }
  bool debug = std::getenv("PF_AUTO_DEBUG") != nullptr;
  for (const Params &P : grid) {
    // The ceiling: stop the grid once some schedule is known.
    if (!best.orders.empty() && deadline.passed()) {
      noteCutShort(res, "heuristic grid");
      break;
    }
    auto ord = ls.run(P);
    if (debug) {
      Cand c;
      c.orders = ord;
      bool fits =
          !ord.empty() &&
          (opts.memLimit < 0 || ordersFitMemory(ord, opts.cost, opts.memLimit));
      bool ok = fits && evaluate(c, pl, m, opts.cost);
      std::fprintf(stderr, "cap %s%.1f%+d bP %d wP %d lf %d: %s %.3f\n",
                   P.capUnlimited ? "inf " : "", P.capA, P.capB, P.bPriority,
                   P.wPolicy, P.preferLaterF,
                   ok ? "ok" : (fits ? "sim-fail" : "no-fit"), c.zb);
    }
    consider(std::move(ord));
  }
  if (best.orders.empty())
    return Status::error("the heuristic found no schedule within the memory "
                         "limit " +
                         std::to_string(opts.memLimit));

  auto debugTime = [&](const char *what) {
    if (debug)
      std::fprintf(stderr, "auto: %s done, zb %.4f, %.3f s left\n", what,
                   best.zb, deadline.left());
  };
  debugTime("grid");
  Deadline searchDeadline = deadline;
  if (opts.searchTimeLimit > 0)
    searchDeadline = deadline.earliest(Deadline::in(opts.searchTimeLimit));
  localSearch(best, opts, pl, searchDeadline, res);
  debugTime("local search");

  res.schedule = ordersToSchedule(best.orders, pl, m);
  auto sim = simulate(res.schedule, opts.cost);
  if (!sim)
    return Status::error("internal error: " + sim.message());
  res.sim = sim.take();
  res.makespan = res.sim.makespan;
  res.zbCost = zbCostOf(res.sim);
  res.heuristicZbCost = res.zbCost;
  res.method = "heuristic";
  return res;
}

} // namespace detail

double minFeasibleMemLimit(const AutoOptions &opts) {
  Placement pl = opts.vShape ? Placement::vShape(opts.ranks)
                             : Placement::linear(opts.ranks);
  std::vector<double> need(opts.ranks, 0);
  for (int s = 0; s < pl.numStages; ++s)
    need[pl.rank(0, s)] += opts.cost.memDelta(WorkKind::F, s);
  return *std::max_element(need.begin(), need.end());
}

Expected<AutoResult> autoSchedule(const AutoOptions &opts) {
  if (opts.ranks < 1)
    return Status::error("auto schedule: ranks must be >= 1");
  if (opts.microbatches < 1)
    return Status::error("auto schedule: microbatches must be >= 1");
  // The handcrafted generators' bounds (Generators.h).
  const int64_t stages = int64_t(opts.ranks) * (opts.vShape ? 2 : 1);
  if (opts.ranks > kMaxRanks)
    return Status::error("auto schedule: " + std::to_string(opts.ranks) +
                         " ranks exceeds the limit of " +
                         std::to_string(kMaxRanks));
  if (opts.microbatches > kMaxMicrobatches ||
      3 * stages * opts.microbatches > kMaxComputeActions)
    return Status::error(
        "auto schedule: request too large: " + std::to_string(opts.ranks) +
        " ranks x " + std::to_string(opts.microbatches) +
        " microbatches exceeds " + std::to_string(kMaxComputeActions) +
        " actions");
  if (Status st = checkCosts(opts.cost, stages, 3 * stages * opts.microbatches);
      !st)
    return Status::error("auto schedule: " + st.message());
  double need = minFeasibleMemLimit(opts);
  if (opts.memLimit >= 0 && opts.memLimit + kEps < need) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "memory limit %g is impossible: one microbatch's "
                  "activations need %g on a rank%s, so no schedule fits",
                  opts.memLimit, need,
                  opts.vShape ? " (both chunks of the V)" : "");
    return Status::error(buf);
  }
  // The wall-clock ceiling of the whole call; the work budgets decide.
  detail::Deadline deadline = detail::Deadline::in(opts.timeLimit);
  auto h = detail::autoHeuristic(opts, deadline);
  if (!h)
    return h.status();
  AutoResult res = h.take();
  res.bound = autoLowerBound(opts);
  double lb = res.bound.zbCost;
  // A schedule at the proven bound is optimal: nothing for the ILP to do.
  if (opts.useIlp && res.zbCost <= lb * (1 + 1e-12) + 1e-12)
    res.note = "ILP skipped: the heuristic's schedule reaches the proven "
               "lower bound, so it is optimal";
  else if (opts.useIlp)
    res = detail::autoIlp(opts, std::move(res), deadline);
  res.gap = res.zbCost > 0 ? std::max(0.0, (res.zbCost - lb) / res.zbCost) : 0;
  VerifyOptions vo;
  vo.cost = opts.cost;
  if (opts.memLimit >= 0)
    vo.memLimit = opts.memLimit;
  if (Status st = verify(res.schedule, vo); !st)
    return Status::error("internal error: the automatic schedule fails "
                         "verification: " +
                         st.message());
  return res;
}

} // namespace pipeforge::sched
