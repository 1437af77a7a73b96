//===- HandSchedules.h - Hand-built schedules for the tests -----*- C++ -*-===//
//
// Small schedules built directly from the definitions in docs/background.md,
// so the simulator, verifier and exporters can be tested without the
// generators, plus a message inserter that orders messages by simulated
// time (one global order, hence deadlock-free under rendezvous).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_UNITTESTS_SCHEDULE_HANDSCHEDULES_H
#define PIPEFORGE_UNITTESTS_SCHEDULE_HANDSCHEDULES_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Simulator.h"

#include <algorithm>
#include <tuple>

namespace pipeforge::sched::testing {

inline Work wk(WorkKind k, int stage, int mb, int copy = 0) {
  Work w;
  w.kind = k;
  w.stage = stage;
  w.mb = mb;
  w.copy = static_cast<int8_t>(copy);
  return w;
}
inline Action cF(int s, int j, int c = 0) {
  return Action::compute(wk(WorkKind::F, s, j, c));
}
inline Action cB(int s, int j, int c = 0) {
  return Action::compute(wk(WorkKind::B, s, j, c));
}
inline Action cW(int s, int j, int c = 0) {
  return Action::compute(wk(WorkKind::W, s, j, c));
}
inline Action cBW(int s, int j, int c = 0) {
  return Action::compute(wk(WorkKind::BW, s, j, c));
}

inline Schedule emptyLinear(const char *name, int p, int m) {
  Schedule s;
  s.name = name;
  s.placement = Placement::linear(p);
  s.numMicrobatches = m;
  s.programs.resize(p);
  return s;
}

/// GPipe: all F, then all BW in reverse microbatch order... kept simple:
/// in microbatch order.
inline Schedule handGPipe(int p, int m) {
  Schedule s = emptyLinear("gpipe", p, m);
  for (int r = 0; r < p; ++r) {
    for (int j = 0; j < m; ++j)
      s.programs[r].push_back(cF(r, j));
    for (int j = 0; j < m; ++j)
      s.programs[r].push_back(cBW(r, j));
  }
  return s;
}

/// 1F1B with fused backward: p-r-1 warm-up F, then F/BW pairs, then drain.
inline Schedule hand1F1B(int p, int m) {
  Schedule s = emptyLinear("1f1b", p, m);
  for (int r = 0; r < p; ++r) {
    int warm = std::min(p - r - 1, m);
    auto &prog = s.programs[r];
    for (int j = 0; j < warm; ++j)
      prog.push_back(cF(r, j));
    for (int i = 0; i + warm < m; ++i) {
      prog.push_back(cF(r, warm + i));
      prog.push_back(cBW(r, i));
    }
    for (int j = m - warm; j < m; ++j)
      prog.push_back(cBW(r, j));
  }
  return s;
}

/// ZB-H1 (c = 1) / ZB-H2 (c = 2), the docs/background.md pseudo code.
inline Schedule handZB(int p, int m, int c) {
  Schedule s = emptyLinear(c == 1 ? "zb-h1" : "zb-h2", p, m);
  for (int r = 0; r < p; ++r) {
    auto &prog = s.programs[r];
    int warm = std::min((p - r - 1) * c, m);
    int nf = 0, nw = 0;
    for (; nf < warm; ++nf)
      prog.push_back(cF(r, nf));
    for (int i = 0; i < m; ++i) {
      if (warm + i < m)
        prog.push_back(cF(r, nf++));
      prog.push_back(cB(r, i));
      if (warm + i >= (p - 1) * c)
        prog.push_back(cW(r, nw++));
    }
    while (nw < m)
      prog.push_back(cW(r, nw++));
  }
  return s;
}

/// A 2-rank V (4 stages; rank 0 holds 0 and 3) with one overlapped pair.
inline Schedule handVOverlap() {
  Schedule s;
  s.name = "v-overlap";
  s.placement = Placement::vShape(2);
  s.numMicrobatches = 2;
  s.programs.resize(2);
  s.programs[0] = {cF(0, 0), cF(0, 1), cF(3, 0),
                   Action::overlap(wk(WorkKind::F, 3, 1), wk(WorkKind::BW, 3, 0)),
                   cBW(3, 1), cBW(0, 0), cBW(0, 1)};
  s.programs[1] = {cF(1, 0), cF(2, 0), cF(1, 1), cF(2, 1),
                   cBW(2, 0), cBW(1, 0), cBW(2, 1), cBW(1, 1)};
  return s;
}

/// Adds a Send after each cross-rank producer and a Recv before its
/// consumer, every rank meeting its messages in one global order (by the
/// simulated producer end time), so the result is rendezvous-safe.
inline void insertCommByTime(Schedule &s, const CostModel &cost = {}) {
  Expected<SimResult> sim = simulate(s, cost);
  if (!sim)
    return;
  int p = s.numRanks();
  // (time, class, global order, action): class 0 = message, 1 = compute.
  using Ev = std::tuple<double, int, long, Action>;
  std::vector<std::vector<Ev>> evs(p);
  long order = 0;
  std::vector<std::tuple<double, long, int, int, Action, Action>> msgs;
  for (const Interval &iv : sim->intervals) {
    const Action &a = s.programs[iv.rank][iv.actionIndex];
    evs[iv.rank].push_back(Ev{iv.start, 1, order++, a});
    auto produce = [&](const Work &w) {
      int last = s.placement.numStages - 1;
      if (w.kind == WorkKind::F && w.stage < last) {
        int dst = s.placement.rank(w.copy, w.stage + 1);
        if (dst != iv.rank)
          msgs.emplace_back(iv.end, order++, iv.rank, dst,
                            Action::send(Payload::Activation, w, dst),
                            Action::recv(Payload::Activation, w, iv.rank));
      }
      if ((w.kind == WorkKind::B || w.kind == WorkKind::BW) && w.stage > 0) {
        int dst = s.placement.rank(w.copy, w.stage - 1);
        if (dst != iv.rank)
          msgs.emplace_back(iv.end, order++, iv.rank, dst,
                            Action::send(Payload::Gradient, w, dst),
                            Action::recv(Payload::Gradient, w, iv.rank));
      }
    };
    produce(a.work);
    if (a.kind == ActionKind::Overlap)
      produce(a.work2);
  }
  std::sort(msgs.begin(), msgs.end(), [](const auto &x, const auto &y) {
    return std::tie(std::get<0>(x), std::get<1>(x)) <
           std::tie(std::get<0>(y), std::get<1>(y));
  });
  long g = 0;
  for (auto &m : msgs) {
    double t = std::get<0>(m);
    evs[std::get<2>(m)].push_back(Ev{t, 0, g, std::get<4>(m)});
    evs[std::get<3>(m)].push_back(Ev{t, 0, g, std::get<5>(m)});
    ++g;
  }
  for (int r = 0; r < p; ++r) {
    auto &v = evs[r];
    std::stable_sort(v.begin(), v.end(), [](const Ev &x, const Ev &y) {
      if (std::get<0>(x) != std::get<0>(y))
        return std::get<0>(x) < std::get<0>(y);
      if (std::get<1>(x) != std::get<1>(y))
        return std::get<1>(x) < std::get<1>(y);
      return std::get<2>(x) < std::get<2>(y);
    });
    s.programs[r].clear();
    for (const Ev &e : v)
      s.programs[r].push_back(std::get<3>(e));
  }
  s.hasComm = true;
}

/// Generated ZB-V on 2 ranks with m microbatches and its messages: at a
/// few thousand microbatches big enough for the passes' threads
/// (detail::parallelWorth), at 150,000 for the simulator's prefaulted
/// intervals.
inline Schedule generatedZbv(int m) {
  GenOptions opts;
  opts.ranks = 2;
  opts.microbatches = m;
  Expected<Schedule> g = generate(ScheduleKind::ZBV, opts);
  if (!g)
    return Schedule();
  Schedule s = g.take();
  if (!insertComm(s).isOk())
    return Schedule();
  return s;
}

} // namespace pipeforge::sched::testing

#endif
