//===- ExportText.cpp - Compact text grid of a simulated schedule ---------===//

#include "pipeforge/Schedule/Export.h"

#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

namespace pipeforge::sched {

namespace {
/// Rank-local chunk index of (copy, stage) per rank, -1 if the rank holds
/// only one of them (or not this one): chunkIndex(s)[r][copy * stages +
/// stage], a dense table (a cell of the grid looks it up once).
std::vector<std::vector<int>> chunkIndex(const Schedule &s) {
  const Placement &pl = s.placement;
  size_t stages = pl.numStages > 0 ? size_t(pl.numStages) : 0;
  size_t copies = pl.numCopies > 0 ? size_t(pl.numCopies) : 0;
  std::vector<std::vector<int>> idx(s.numRanks(),
                                    std::vector<int>(copies * stages, -1));
  std::vector<int> held(s.numRanks(), 0);
  // (copy, stage) in increasing order: the order of the chunks' numbers.
  for (size_t c = 0; c < copies && c < pl.rankOf.size(); ++c)
    for (size_t st = 0; st < stages && st < pl.rankOf[c].size(); ++st) {
      int r = pl.rankOf[c][st];
      if (r >= 0 && r < s.numRanks())
        idx[r][c * stages + st] = held[r]++;
    }
  for (int r = 0; r < s.numRanks(); ++r)
    if (held[r] <= 1)
      for (int &k : idx[r])
        k = -1;
  return idx;
}

/// Writes the decimal digits of v at p; returns the end.
char *putInt(char *p, long long v) {
  char tmp[24];
  unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : v;
  int n = 0;
  do {
    tmp[n++] = char('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0)
    *p++ = '-';
  while (n)
    *p++ = tmp[--n];
  return p;
}

/// Decimal digits of v >= 0.
size_t digits(long long v) {
  size_t n = 1;
  for (; v >= 10; v /= 10)
    ++n;
  return n;
}

/// The chunk number of w on its rank, -1 for none.
int chunkOf(const Work &w, const std::vector<int> &chunks, int32_t stages) {
  size_t at = size_t(w.copy) * size_t(stages) + size_t(w.stage);
  if (w.copy >= 0 && w.stage >= 0 && w.stage < stages && at < chunks.size())
    return chunks[at];
  return -1;
}

/// The length putCell writes, without writing it.
size_t cellLen(const Work &w, const std::vector<int> &chunks, int32_t stages) {
  size_t n = (w.kind == WorkKind::BW ? 2 : 1) +
             (w.mb < 0 ? 1 + digits(-(long long)w.mb) : digits(w.mb));
  int c = chunkOf(w, chunks, stages);
  return c >= 0 ? n + 1 + digits(c) : n;
}

/// "F3" or "F3.1" (microbatch 3 of the rank's chunk 1) at p; returns the
/// end. At most 2 + 11 + 1 + 11 bytes.
char *putCell(char *p, const Work &w, const std::vector<int> &chunks,
              int32_t stages) {
  for (const char *k = workKindName(w.kind); *k; ++k)
    *p++ = *k;
  p = putInt(p, w.mb);
  if (int c = chunkOf(w, chunks, stages); c >= 0) {
    *p++ = '.';
    p = putInt(p, c);
  }
  return p;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
} // namespace

using detail::forEachParallel;
using detail::release;

namespace {
/// std::llround(x) without the libm call (twice per cell of the grid, at
/// millions of cells): for 0 <= x < 4.6e18 the truncation is the floor and
/// x minus it is exact, so the halfway test is exact too; anything else
/// goes to std::llround itself.
long long roundHalfAway(double x) {
  if (!(x >= 0 && x < 4.6e18))
    return std::llround(x);
  const long long t = static_cast<long long>(x);
  return t + (x - static_cast<double>(t) >= 0.5 ? 1 : 0);
}
} // namespace

void exportTextGrid(const Schedule &s, const SimResult &sim, std::ostream &os) {
  int p = s.numRanks();
  // Each rank's intervals (SimResult keeps them rank after rank).
  std::vector<size_t> first(size_t(p) + 1, sim.intervals.size());
  for (int r = p - 1; r >= 0; --r)
    first[r] = size_t(
        std::partition_point(sim.intervals.begin(),
                             sim.intervals.begin() + first[r + 1],
                             [&](const Interval &iv) { return iv.rank < r; }) -
        sim.intervals.begin());
  auto inRank = [&](int r) {
    return std::pair(sim.intervals.begin() + first[r],
                     sim.intervals.begin() + first[r + 1]);
  };
  // The shortest compute action (the slot) and the last finite end, one
  // rank per core (a minimum and a maximum: any order gives the same).
  std::vector<double> rankUnit(size_t(p), 0), rankEnd(size_t(p), 0);
  forEachParallel(size_t(p), [&](size_t r) {
    double u = 0, e = 0;
    auto [b, end] = inRank(int(r));
    for (auto it = b; it != end; ++it) {
      const Interval &iv = *it;
      double d = iv.end - iv.start;
      if (d > 0 && (u == 0 || d < u) &&
          !s.programs[iv.rank][iv.actionIndex].isComm())
        u = d;
      if (std::isfinite(iv.end))
        e = std::max(e, iv.end);
    }
    rankUnit[r] = u;
    rankEnd[r] = e;
  });
  double unit = 0, makespan = 0;
  for (int r = 0; r < p; ++r) {
    if (rankUnit[r] > 0 && (unit == 0 || rankUnit[r] < unit))
      unit = rankUnit[r];
    makespan = std::max(makespan, rankEnd[r]);
  }
  if (unit == 0)
    unit = 1;
  // At most kMaxGridColumns columns: a schedule whose shortest action is
  // tiny next to its makespan (--tf 1e-300, or 1e12) is drawn coarser
  // (short actions take one column each) instead of exhausting memory.
  constexpr double kMaxGridColumns = 4096;
  if (!std::isfinite(unit) || makespan / unit > kMaxGridColumns)
    unit = makespan > 0 && std::isfinite(makespan) ? makespan / kMaxGridColumns
                                                   : 1;
  auto chunks = chunkIndex(s);
  // A cell is 4 bytes: the action it starts (its label is formatted when
  // written; simulate() refuses 2^32 actions on a rank), or kIdle ".", or
  // kBusy "-" (the action of the cell before still runs). Millions of
  // actions stay compact.
  constexpr uint32_t kIdle = ~uint32_t(0), kBusy = ~uint32_t(0) - 1;
  std::vector<std::vector<uint32_t>> rows(p);
  // A cell's label into buf (64 bytes); returns its length.
  int32_t stages = s.placement.numStages;
  auto labelOf = [&](int r, uint32_t idx, char *buf) -> size_t {
    const Action &a = s.programs[r][idx];
    char *p = putCell(buf, a.work, chunks[r], stages);
    if (a.kind == ActionKind::Overlap) {
      *p++ = '+';
      p = putCell(p, a.work2, chunks[r], stages);
    }
    return size_t(p - buf);
  };
  auto labelLen = [&](int r, uint32_t idx) -> size_t {
    const Action &a = s.programs[r][idx];
    size_t n = cellLen(a.work, chunks[r], stages);
    if (a.kind == ActionKind::Overlap)
      n += 1 + cellLen(a.work2, chunks[r], stages);
    return n;
  };
  // The ranks' rows and their columns' label widths, one rank per thread
  // (rows are independent; millions of cells per row).
  std::vector<std::vector<uint16_t>> rowWidth(p);
  forEachParallel(size_t(p), [&](size_t r) {
    auto &row = rows[r];
    size_t nextFree = 0;
    auto [b, e] = inRank(int(r));
    for (auto it = b; it != e; ++it) {
      const Interval &iv = *it;
      if (s.programs[r][iv.actionIndex].isComm())
        continue;
      size_t col = std::max(
          nextFree,
          static_cast<size_t>(roundHalfAway(std::max(0.0, iv.start) / unit)));
      size_t span =
          std::max<long long>(1, roundHalfAway((iv.end - iv.start) / unit));
      if (row.size() < col + span)
        row.resize(col + span, kIdle);
      row[col] = iv.actionIndex;
      for (size_t k = 1; k < span; ++k)
        row[col + k] = kBusy;
      nextFree = col + span;
    }
    std::vector<uint16_t> &w = rowWidth[r];
    w.assign(row.size(), 1);
    for (size_t c = 0; c < row.size(); ++c)
      if (row[c] < kBusy)
        w[c] = uint16_t(labelLen(int(r), row[c]));
  });
  // Per-column widths: an overlapped pair widens only its own column.
  size_t cols = 0;
  for (const auto &row : rows)
    cols = std::max(cols, row.size());
  std::vector<uint16_t> width(cols, 1);
  for (int r = 0; r < p; ++r) {
    for (size_t c = 0; c < rowWidth[r].size(); ++c)
      width[c] = std::max(width[c], rowWidth[r][c]);
    release(rowWidth[r]);
  }
  os << (s.name.empty() ? std::string("schedule") : s.name) << ": " << p
     << " ranks, " << s.numMicrobatches << " microbatches, slot " << fmt(unit)
     << ", makespan " << fmt(sim.makespan) << ", bubble "
     << fmt(sim.bubbleRate) << "\n";
  std::string rankHdr = "r" + std::to_string(p - 1);
  // Rank r's line, handed to `out` in pieces of about 64 KiB (a row of a
  // million cells is not built whole when it goes straight to the stream).
  auto writeRow = [&](int r, auto &&out) {
    char buf[64];
    std::string name = "r" + std::to_string(r);
    std::string line = name + std::string(rankHdr.size() - name.size(), ' ') + " |";
    size_t pendingSpaces = 0;
    for (size_t c = 0; c < cols; ++c) {
      uint32_t cell = c < rows[r].size() ? rows[r][c] : kIdle;
      size_t len = 1;
      if (cell == kIdle)
        buf[0] = '.';
      else if (cell == kBusy)
        buf[0] = '-';
      else
        len = labelOf(r, cell, buf);
      line.append(pendingSpaces + 1, ' ');
      line.append(buf, len);
      pendingSpaces = width[c] - len;
      if (line.size() > (1 << 16)) {
        out(line);
        line.clear();
      }
    }
    line += '\n';
    out(line);
    release(rows[r]);
  };
  // Rows in batches of as many as there are threads: the batch's first row
  // goes straight to the stream, the others are formatted meanwhile into
  // strings written after it.
  size_t batch = std::max<size_t>(
      1, std::min<size_t>(size_t(p), std::thread::hardware_concurrency()));
  std::vector<std::string> text(batch);
  // A buffered row's exact size bound (each column: a space and its
  // width), so that it is allocated once.
  size_t lineBound = rankHdr.size() + 3;
  for (uint16_t w : width)
    lineBound += size_t(w) + 1;
  for (int b = 0; b < p; b += int(batch)) {
    size_t n = std::min<size_t>(batch, size_t(p - b));
    forEachParallel(n, [&](size_t k) {
      if (k == 0)
        writeRow(b, [&](const std::string &piece) { os << piece; });
      else {
        text[k].reserve(lineBound);
        writeRow(b + int(k),
                 [&](const std::string &piece) { text[k] += piece; });
      }
    });
    for (size_t k = 1; k < n; ++k) {
      os << text[k];
      release(text[k]);
    }
  }
}

std::string exportTextGrid(const Schedule &s, const SimResult &sim) {
  std::ostringstream os;
  exportTextGrid(s, sim, os);
  return os.str();
}

} // namespace pipeforge::sched
