//===- GenTestUtil.h - Shared helpers for the generator tests ---*- C++ -*-===//
//
// The sweep of valid generator requests, a structural checker for compute
// programs and a tiny rendezvous executor for programs with messages.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_UNITTESTS_SCHEDULE_GENTESTUTIL_H
#define PIPEFORGE_UNITTESTS_SCHEDULE_GENTESTUTIL_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Generators.h"

#include <array>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace pipeforge::sched::testutil {

struct GenCase {
  ScheduleKind kind;
  GenOptions opts;
  std::string label() const {
    return std::string(scheduleKindName(kind)) + " p=" +
           std::to_string(opts.ranks) + " m=" +
           std::to_string(opts.microbatches) +
           (kind == ScheduleKind::Interleaved
                ? " v=" + std::to_string(opts.chunksPerRank)
                : "");
  }
};

/// Every valid request with 2..maxRanks ranks and minMicrobatches..4*ranks
/// microbatches (interleaved with v = 2 and 3).
inline std::vector<GenCase> sweepCases(int maxRanks = 16) {
  const ScheduleKind kinds[] = {
      ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
      ScheduleKind::ZBH1,  ScheduleKind::ZBH2,     ScheduleKind::ZBV,
      ScheduleKind::DualPipe, ScheduleKind::DualPipeV, ScheduleKind::Chimera};
  std::vector<GenCase> out;
  for (ScheduleKind k : kinds) {
    for (int p = 2; p <= maxRanks; ++p) {
      if ((k == ScheduleKind::DualPipe || k == ScheduleKind::Chimera) && p % 2)
        continue;
      for (int v : {2, 3}) {
        if (v == 3 && k != ScheduleKind::Interleaved)
          continue;
        for (int m = minMicrobatches(k, p, v); m <= 4 * p; ++m) {
          if (k == ScheduleKind::Interleaved && m % p)
            continue;
          if (k == ScheduleKind::DualPipe && m % 2)
            continue;
          if (k == ScheduleKind::Chimera && m % p)
            continue;
          GenCase c{k, GenOptions{}};
          c.opts.ranks = p;
          c.opts.microbatches = m;
          c.opts.chunksPerRank = v;
          out.push_back(c);
        }
      }
    }
  }
  return out;
}

/// Checks that every (copy, stage, mb) has F once and either BW once or B
/// and W once each, on the rank the placement says, and that per stage the
/// F, the backwards (B or BW) and the W run in microbatch order. Returns ""
/// or the first problem.
inline std::string checkComputeStructure(const Schedule &s) {
  const Placement &pl = s.placement;
  const int m = s.numMicrobatches;
  if (int(s.programs.size()) != pl.numRanks)
    return "program count != ranks";
  // counts[copy][stage][mb] = {F, B, W, BW}
  std::vector<std::vector<std::vector<std::array<int, 4>>>> counts(
      pl.numCopies,
      std::vector<std::vector<std::array<int, 4>>>(
          pl.numStages, std::vector<std::array<int, 4>>(m, {0, 0, 0, 0})));
  // last mb seen per (copy, stage, kind class): F, backward, W
  std::map<std::tuple<int, int, int>, int> lastMb;
  for (int r = 0; r < pl.numRanks; ++r) {
    for (const Action &a : s.programs[r]) {
      if (a.isComm())
        continue;
      std::vector<Work> ws{a.work};
      if (a.kind == ActionKind::Overlap) {
        if (a.work.kind != WorkKind::F)
          return "overlap whose first member is not F: " + toString(a);
        ws.push_back(a.work2);
      }
      for (const Work &w : ws) {
        if (w.copy < 0 || w.copy >= pl.numCopies || w.stage < 0 ||
            w.stage >= pl.numStages || w.mb < 0 || w.mb >= m)
          return "out of range: " + toString(w);
        if (pl.rank(w.copy, w.stage) != r)
          return toString(w) + " on wrong rank " + std::to_string(r);
        counts[w.copy][w.stage][w.mb][int(w.kind)]++;
        int cls = w.kind == WorkKind::F ? 0 : w.kind == WorkKind::W ? 2 : 1;
        auto key = std::make_tuple(int(w.copy), int(w.stage), cls);
        auto it = lastMb.find(key);
        if (it != lastMb.end() && it->second >= w.mb)
          return "stage out of microbatch order at " + toString(w);
        lastMb[key] = w.mb;
      }
    }
  }
  for (int c = 0; c < pl.numCopies; ++c)
    for (int st = 0; st < pl.numStages; ++st)
      for (int j = 0; j < m; ++j) {
        const auto &n = counts[c][st][j];
        bool fused = n[3] == 1 && n[1] == 0 && n[2] == 0;
        bool split = n[3] == 0 && n[1] == 1 && n[2] == 1;
        if (n[0] != 1 || !(fused || split))
          return "wrong counts for copy " + std::to_string(c) + " stage " +
                 std::to_string(st) + " mb " + std::to_string(j) + ": F" +
                 std::to_string(n[0]) + " B" + std::to_string(n[1]) + " W" +
                 std::to_string(n[2]) + " BW" + std::to_string(n[3]);
      }
  return "";
}

/// The program of one rank as space-separated toString()s.
inline std::string programText(const Schedule &s, int rank) {
  std::string out;
  for (const Action &a : s.programs[rank]) {
    if (!out.empty())
      out += ' ';
    out += toString(a);
  }
  return out;
}

} // namespace pipeforge::sched::testutil

#endif
