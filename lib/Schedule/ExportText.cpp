//===- ExportText.cpp - Compact text grid of a simulated schedule ---------===//

#include "pipeforge/Schedule/Export.h"

#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
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

/// One rank's row of chunkIndex, by value: the loops that format millions
/// of labels keep it in registers (a table reached through memory would be
/// reloaded after every byte they store).
struct RankChunks {
  const int *at;
  size_t n;
  int32_t stages;
};

/// The chunk number of w on its rank, -1 for none.
int chunkOf(const Work &w, RankChunks ck) {
  size_t at = size_t(w.copy) * size_t(ck.stages) + size_t(w.stage);
  if (w.copy >= 0 && w.stage >= 0 && w.stage < ck.stages && at < ck.n)
    return ck.at[at];
  return -1;
}

/// "F3" or "F3.1" (microbatch 3 of the rank's chunk 1) at p; returns the
/// end. At most 2 + 11 + 1 + 11 bytes.
char *putCell(char *p, const Work &w, RankChunks ck) {
  for (const char *k = workKindName(w.kind); *k; ++k)
    *p++ = *k;
  p = putInt(p, w.mb);
  if (int c = chunkOf(w, ck); c >= 0) {
    *p++ = '.';
    p = putInt(p, c);
  }
  return p;
}

/// A compute action's label ("F3.1", or "F3.1+B2.0" for an overlapped
/// pair) at p; returns the end.
char *putLabel(char *p, const Action &a, RankChunks ck) {
  p = putCell(p, a.work, ck);
  if (a.kind == ActionKind::Overlap) {
    *p++ = '+';
    p = putCell(p, a.work2, ck);
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

/// A byte buffer that is neither zero-filled nor copied when it grows
/// (malloc and realloc: a big block grows by remapping its pages). The grid
/// keeps a few of them of millions of bytes.
class Bytes {
public:
  Bytes() = default;
  Bytes(const Bytes &) = delete;
  Bytes &operator=(const Bytes &) = delete;
  ~Bytes() { std::free(data); }
  /// Room for n more bytes past the end, which it returns; throws
  /// std::bad_alloc without it.
  char *room(size_t n) {
    if (size + n > cap) {
      size_t want = std::max(size + n, cap + cap / 2 + 4096);
      void *p = std::realloc(data, want);
      if (!p)
        throw std::bad_alloc();
      data = static_cast<char *>(p);
      cap = want;
    }
    return data + size;
  }
  /// Bytes allocated past the end.
  size_t spare() const { return cap - size; }
  void setEnd(char *p) { size = size_t(p - data); }
  const char *begin() const { return data; }
  size_t length() const { return size; }
  void clear() {
    std::free(data);
    data = nullptr;
    size = cap = 0;
  }

private:
  char *data = nullptr;
  size_t size = 0, cap = 0;
};

/// One rank's row of the grid before the columns are aligned: a code per
/// column (kIdle ".", kBusy "-": the action of the column before still
/// runs, else the length of the label of the action starting there) and
/// the labels of the starting actions, in column order.
struct GridRow {
  static constexpr uint8_t kIdle = 0, kBusy = 1;
  Bytes codes, labels;
};

/// Room for one cell's label: two Works of at most 2 + 11 + 1 + 11 bytes
/// and the '+' between them.
constexpr size_t kMaxLabel = 64;
constexpr char kSpaces[kMaxLabel + 1] =
    "                                                                ";
static_assert(sizeof(kSpaces) == kMaxLabel + 1 && kSpaces[kMaxLabel - 1] == ' ',
              "kSpaces holds kMaxLabel spaces");
} // namespace

namespace {
/// The text grid of one simulated schedule, in phases: each rank's
/// intervals found, the column's time (the slot) chosen, each rank's row
/// built (a code per column and its labels), the columns' widths measured,
/// and the lines written in blocks of columns.
class GridWriter {
public:
  GridWriter(const Schedule &s, const SimResult &sim, size_t blockColumns)
      : s(s), sim(sim), p(s.numRanks()),
        blockCols(std::max<size_t>(1, blockColumns)),
        // Threads only where the grid is big enough to pay for them (one
        // rank, or a block of columns, each).
        parallel(sim.intervals.size() >= (size_t(1) << 16)) {}

  void write(std::ostream &os) {
    indexRanks();
    chooseUnit();
    buildRows();
    measureColumns();
    writeHeader(os);
    locateLabels();
    writeBlocks(os);
  }

private:
  /// Each rank's intervals (SimResult keeps them rank after rank).
  void indexRanks();
  std::pair<const Interval *, const Interval *> inRank(int r) const {
    return {sim.intervals.data() + first[r],
            sim.intervals.data() + first[r + 1]};
  }
  /// The slot: the shortest compute action, coarser where the makespan
  /// would need more than kMaxGridColumns of them.
  void chooseUnit();
  /// The ranks' rows, one rank per thread (rows are independent; millions
  /// of cells per row): a byte per column and each label formatted once.
  void buildRows();
  void buildRow(size_t r);
  /// Per-column widths: an overlapped pair widens only its own column.
  void measureColumns();
  void writeHeader(std::ostream &os) const;
  /// Where each block's labels start in its row's labels.
  void locateLabels();
  /// Block k of rank r's line into `out`.
  void formatBlock(int r, size_t k, Bytes &out) const;
  /// The blocks in output order, a core's worth at a time.
  void writeBlocks(std::ostream &os);

  static size_t cellLen(uint8_t code) {
    return code == GridRow::kIdle || code == GridRow::kBusy ? 1 : code;
  }
  static uint8_t codeAt(const GridRow &row, size_t c) {
    return c < row.codes.length()
               ? static_cast<uint8_t>(row.codes.begin()[c])
               : GridRow::kIdle;
  }

  const Schedule &s;
  const SimResult &sim;
  const int p;
  const size_t blockCols;
  const bool parallel;
  std::vector<size_t> first; ///< rank r's intervals: [first[r], first[r+1])
  double unit = 0;
  std::vector<std::vector<int>> chunks; ///< chunkIndex(s)
  std::vector<GridRow> rows;
  size_t cols = 0;
  std::vector<uint8_t> width;
  std::string rankHdr; ///< the widest rank's name
  size_t blocksPerRow = 1;
  std::vector<std::vector<size_t>> labelAt;
};

void GridWriter::indexRanks() {
  first.assign(size_t(p) + 1, sim.intervals.size());
  for (int r = p - 1; r >= 0; --r)
    first[r] = size_t(
        std::partition_point(sim.intervals.begin(),
                             sim.intervals.begin() + first[r + 1],
                             [&](const Interval &iv) { return iv.rank < r; }) -
        sim.intervals.begin());
}

void GridWriter::chooseUnit() {
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
          s.programs[iv.rank][iv.actionIndex].isCompute())
        u = d;
      if (std::isfinite(iv.end))
        e = std::max(e, iv.end);
    }
    rankUnit[r] = u;
    rankEnd[r] = e;
  }, parallel);
  double makespan = 0;
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
}

void GridWriter::buildRows() {
  chunks = chunkIndex(s);
  rows = std::vector<GridRow>(static_cast<size_t>(p));
  forEachParallel(size_t(p), [&](size_t r) { buildRow(r); }, parallel);
}

void GridWriter::buildRow(size_t r) {
  GridRow &row = rows[r];
  auto [b, e] = inRank(int(r));
  const size_t n = size_t(e - b);
  const RankChunks ck{chunks[r].data(), chunks[r].size(),
                      s.placement.numStages};
  const Action *prog = s.programs[r].data();
  const double unit = this->unit;
  // The buffers' ends in locals, spilled back only to grow: the loop
  // stores bytes, and fields in memory would be reloaded after each.
  char *lab = row.labels.room(n * 8 + kMaxLabel);
  char *labLimit = lab + row.labels.spare() - kMaxLabel;
  char *code = row.codes.room(n + 1);
  char *codeLimit = code + row.codes.spare();
  size_t nextFree = 0; // columns so far
  for (auto it = b; it != e; ++it) {
    const Interval &iv = *it;
    const Action &a = prog[iv.actionIndex];
    if (!a.isCompute())
      continue;
    size_t col = std::max(
        nextFree,
        static_cast<size_t>(roundHalfAway(std::max(0.0, iv.start) / unit)));
    size_t span =
        std::max<long long>(1, roundHalfAway((iv.end - iv.start) / unit));
    if (lab > labLimit) {
      row.labels.setEnd(lab);
      lab = row.labels.room(n + kMaxLabel);
      labLimit = lab + row.labels.spare() - kMaxLabel;
    }
    char *labEnd = putLabel(lab, a, ck);
    const size_t need = col + span - nextFree;
    if (size_t(codeLimit - code) < need) {
      row.codes.setEnd(code);
      code = row.codes.room(need + n);
      codeLimit = code + row.codes.spare();
    }
    if (col > nextFree) {
      std::memset(code, GridRow::kIdle, col - nextFree);
      code += col - nextFree;
    }
    *code++ = char(labEnd - lab);
    if (span > 1) {
      std::memset(code, GridRow::kBusy, span - 1);
      code += span - 1;
    }
    lab = labEnd;
    nextFree = col + span;
  }
  row.labels.setEnd(lab);
  row.labels.room(kMaxLabel); // the writer copies kMaxLabel bytes at once
  row.codes.setEnd(code);
}

void GridWriter::measureColumns() {
  for (const GridRow &row : rows)
    cols = std::max(cols, row.codes.length());
  width.assign(cols, 1);
  for (const GridRow &row : rows) {
    const uint8_t *c = reinterpret_cast<const uint8_t *>(row.codes.begin());
    for (size_t k = 0, n = row.codes.length(); k < n; ++k)
      width[k] = std::max(width[k], c[k]);
  }
}

void GridWriter::writeHeader(std::ostream &os) const {
  os << (s.name.empty() ? std::string("schedule") : s.name) << ": " << p
     << " ranks, " << s.numMicrobatches << " microbatches, slot " << fmt(unit)
     << ", makespan " << fmt(sim.makespan) << ", bubble "
     << fmt(sim.bubbleRate) << "\n";
}

// The lines are cut into blocks of columns, formatted as many at a time as
// there are cores, each into its own buffer, and written in order: a few
// megabytes in flight instead of whole rows of a million cells. A block
// starts at its first label (the labels before it, counted from the codes)
// with the padding its column's predecessor leaves.
void GridWriter::locateLabels() {
  rankHdr = "r" + std::to_string(p - 1);
  blocksPerRow = std::max<size_t>(1, (cols + blockCols - 1) / blockCols);
  labelAt.assign(static_cast<size_t>(p), {});
  forEachParallel(size_t(p), [&](size_t r) {
    const GridRow &row = rows[r];
    std::vector<size_t> &at = labelAt[r];
    at.resize(blocksPerRow);
    size_t off = 0;
    for (size_t k = 0; k < blocksPerRow; ++k) {
      at[k] = off;
      size_t end = std::min((k + 1) * blockCols, row.codes.length());
      for (size_t c = k * blockCols; c < end; ++c) {
        uint8_t code = static_cast<uint8_t>(row.codes.begin()[c]);
        off += code > GridRow::kBusy ? code : 0;
      }
    }
  }, parallel);
}

// Each column: a space, the cell, then the spaces that pad it to its
// column's width (written before the next cell: a line has no trailing
// spaces).
void GridWriter::formatBlock(int r, size_t k, Bytes &out) const {
  const GridRow &row = rows[size_t(r)];
  const size_t c0 = k * blockCols, c1 = std::min(cols, c0 + blockCols);
  size_t bound = rankHdr.size() + 4 + 2 * kMaxLabel;
  for (size_t c = c0; c < c1; ++c)
    bound += size_t(width[c]) + 1;
  out.setEnd(const_cast<char *>(out.begin()));
  char *o = out.room(bound);
  if (c0 == 0) {
    std::string name = "r" + std::to_string(r);
    std::string head =
        name + std::string(rankHdr.size() - name.size(), ' ') + " |";
    std::memcpy(o, head.data(), head.size());
    o += head.size();
  }
  const uint8_t *codes = reinterpret_cast<const uint8_t *>(row.codes.begin());
  const uint8_t *widths = width.data();
  const size_t n = row.codes.length();
  const char *label = row.labels.begin() + labelAt[size_t(r)][k];
  size_t pendingSpaces =
      c0 == 0 ? 0 : width[c0 - 1] - cellLen(codeAt(row, c0 - 1));
  for (size_t c = c0; c < c1; ++c) {
    // Fixed-size copies (a label and its padding are under kMaxLabel
    // bytes; `out` and the labels have that much room past their end): no
    // call, no `rep movs` start-up per cell.
    std::memcpy(o, kSpaces, kMaxLabel);
    o += pendingSpaces + 1;
    uint8_t code = c < n ? codes[c] : GridRow::kIdle;
    size_t len = 1;
    if (code == GridRow::kIdle)
      *o = '.';
    else if (code == GridRow::kBusy)
      *o = '-';
    else {
      len = code;
      std::memcpy(o, label, kMaxLabel);
      label += len;
    }
    o += len;
    pendingSpaces = widths[c] - len;
  }
  if (c1 == cols)
    *o++ = '\n';
  out.setEnd(o);
}

void GridWriter::writeBlocks(std::ostream &os) {
  const size_t tasks = size_t(p) * blocksPerRow;
  const size_t batch =
      parallel ? std::max<size_t>(
                     1, std::min<size_t>(tasks,
                                         std::thread::hardware_concurrency()))
               : 1;
  std::vector<Bytes> text(batch);
  for (size_t t = 0; t < tasks; t += batch) {
    size_t n = std::min(batch, tasks - t);
    forEachParallel(n, [&](size_t k) {
      formatBlock(int((t + k) / blocksPerRow), (t + k) % blocksPerRow, text[k]);
    }, parallel);
    for (size_t k = 0; k < n; ++k) {
      os.write(text[k].begin(), std::streamsize(text[k].length()));
      // A row done: its codes and labels are no longer needed.
      if ((t + k) % blocksPerRow == blocksPerRow - 1) {
        rows[(t + k) / blocksPerRow].codes.clear();
        rows[(t + k) / blocksPerRow].labels.clear();
      }
    }
  }
}
} // namespace

void exportTextGrid(const Schedule &s, const SimResult &sim, std::ostream &os) {
  detail::exportTextGrid(s, sim, os, size_t(1) << 19);
}

void detail::exportTextGrid(const Schedule &s, const SimResult &sim,
                            std::ostream &os, size_t blockColumns) {
  GridWriter(s, sim, blockColumns).write(os);
}

std::string exportTextGrid(const Schedule &s, const SimResult &sim) {
  std::ostringstream os;
  exportTextGrid(s, sim, os);
  return os.str();
}

} // namespace pipeforge::sched
