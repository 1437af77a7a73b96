//===- ExportText.cpp - Compact text grid of a simulated schedule ---------===//

#include "pipeforge/Schedule/Export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>

namespace pipeforge::sched {

namespace {
/// Rank-local chunk index of (copy, stage) per rank, -1 if the rank holds
/// only one.
std::vector<std::map<std::pair<int, int>, int>> chunkIndex(const Schedule &s) {
  std::vector<std::map<std::pair<int, int>, int>> idx(s.numRanks());
  const Placement &pl = s.placement;
  for (int c = 0; c < pl.numCopies && c < static_cast<int>(pl.rankOf.size());
       ++c)
    for (int st = 0; st < static_cast<int>(pl.rankOf[c].size()); ++st) {
      int r = pl.rankOf[c][st];
      if (r >= 0 && r < s.numRanks())
        idx[r].emplace(std::make_pair(c, st), 0);
    }
  for (auto &m : idx) {
    int k = 0;
    for (auto &kv : m)
      kv.second = m.size() > 1 ? k++ : -1;
  }
  return idx;
}

std::string cellOf(const Work &w,
                   const std::map<std::pair<int, int>, int> &ch) {
  std::string out = workKindName(w.kind) + std::to_string(w.mb);
  auto it = ch.find({w.copy, w.stage});
  if (it != ch.end() && it->second >= 0)
    out += "." + std::to_string(it->second);
  return out;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
} // namespace

void exportTextGrid(const Schedule &s, const SimResult &sim, std::ostream &os) {
  int p = s.numRanks();
  double unit = 0;
  for (const Interval &iv : sim.intervals) {
    const Action &a = s.programs[iv.rank][iv.actionIndex];
    double d = iv.end - iv.start;
    if (!a.isComm() && d > 0 && (unit == 0 || d < unit))
      unit = d;
  }
  if (unit == 0)
    unit = 1;
  // At most kMaxGridColumns columns: a schedule whose shortest action is
  // tiny next to its makespan (--tf 1e-300, or 1e12) is drawn coarser
  // (short actions take one column each) instead of exhausting memory.
  constexpr double kMaxGridColumns = 4096;
  double makespan = 0;
  for (const Interval &iv : sim.intervals)
    if (std::isfinite(iv.end))
      makespan = std::max(makespan, iv.end);
  if (!std::isfinite(unit) || makespan / unit > kMaxGridColumns)
    unit = makespan > 0 && std::isfinite(makespan) ? makespan / kMaxGridColumns
                                                   : 1;
  auto chunks = chunkIndex(s);
  // A cell is 8 bytes: the action it starts (its label is formatted when
  // written), or kIdle ".", or kBusy "-" (the action of the cell before
  // still runs). Millions of actions stay compact.
  constexpr uint64_t kIdle = ~uint64_t(0), kBusy = ~uint64_t(0) - 1;
  std::vector<std::vector<uint64_t>> rows(p);
  std::vector<size_t> nextFree(p, 0);
  auto labelOf = [&](int r, uint64_t idx) {
    const Action &a = s.programs[r][idx];
    std::string label = cellOf(a.work, chunks[r]);
    if (a.kind == ActionKind::Overlap)
      label += "+" + cellOf(a.work2, chunks[r]);
    return label;
  };
  for (const Interval &iv : sim.intervals) {
    if (iv.rank < 0 || iv.rank >= p)
      continue;
    const Action &a = s.programs[iv.rank][iv.actionIndex];
    if (a.isComm())
      continue;
    size_t col = std::max(
        nextFree[iv.rank],
        static_cast<size_t>(std::llround(std::max(0.0, iv.start) / unit)));
    size_t span =
        std::max<long long>(1, std::llround((iv.end - iv.start) / unit));
    auto &row = rows[iv.rank];
    if (row.size() < col + span)
      row.resize(col + span, kIdle);
    row[col] = iv.actionIndex;
    for (size_t k = 1; k < span; ++k)
      row[col + k] = kBusy;
    nextFree[iv.rank] = col + span;
  }
  // Per-column widths: an overlapped pair widens only its own column.
  size_t cols = 0;
  for (const auto &row : rows)
    cols = std::max(cols, row.size());
  std::vector<uint16_t> width(cols, 1);
  for (int r = 0; r < p; ++r)
    for (size_t c = 0; c < rows[r].size(); ++c)
      if (rows[r][c] < kBusy)
        width[c] = std::max<size_t>(width[c], labelOf(r, rows[r][c]).size());
  os << (s.name.empty() ? std::string("schedule") : s.name) << ": " << p
     << " ranks, " << s.numMicrobatches << " microbatches, slot " << fmt(unit)
     << ", makespan " << fmt(sim.makespan) << ", bubble "
     << fmt(sim.bubbleRate) << "\n";
  std::string rankHdr = "r" + std::to_string(p - 1);
  std::string line;
  for (int r = 0; r < p; ++r) {
    std::string name = "r" + std::to_string(r);
    line = name + std::string(rankHdr.size() - name.size(), ' ') + " |";
    // Written in pieces: a row of a million cells is not built whole.
    size_t pendingSpaces = 0;
    for (size_t c = 0; c < cols; ++c) {
      uint64_t cell = c < rows[r].size() ? rows[r][c] : kIdle;
      std::string label = cell == kIdle   ? std::string(".")
                          : cell == kBusy ? std::string("-")
                                          : labelOf(r, cell);
      line.append(pendingSpaces + 1, ' ');
      line += label;
      pendingSpaces = width[c] - label.size();
      if (line.size() > (1 << 16)) {
        os << line;
        line.clear();
      }
    }
    os << line << "\n";
  }
}

std::string exportTextGrid(const Schedule &s, const SimResult &sim) {
  std::ostringstream os;
  exportTextGrid(s, sim, os);
  return os.str();
}

} // namespace pipeforge::sched
