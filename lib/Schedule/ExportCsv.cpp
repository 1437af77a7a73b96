//===- ExportCsv.cpp - PyTorch torch.distributed.pipelining CSV -----------===//
//
// PyTorch's schedule CSV: one row per rank, one action per cell,
// <stage><kind><mb>. Its kinds differ from ours: PyTorch "I" is our B (input
// gradient), PyTorch "B" is our BW (full backward). The translation happens
// here and nowhere else. A RECV cell carries the receiving stage (PyTorch's
// _get_comms), so our Recv of F(s) is "<s+1>RECV_F" and of B(s) "<s-1>RECV_B".
// ZeRO-3's gathers are PyTorch's FSDP actions "<s>UNSHARD" and "<s>RESHARD"
// (s the global stage, as for compute cells), written with the messages.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/ParamGathers.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <string_view>
#include <ostream>
#include <sstream>

namespace pipeforge::sched {

namespace {
const char *csvKind(WorkKind k) {
  switch (k) {
  case WorkKind::F:
    return "F";
  case WorkKind::B:
    return "I";
  case WorkKind::W:
    return "W";
  case WorkKind::BW:
    return "B";
  }
  return "?";
}

/// Appends <stage><kind><mb>.
void cell(std::string &out, int32_t globalStage, const char *kind,
          int32_t mb) {
  char tmp[16];
  auto r = std::to_chars(tmp, tmp + sizeof tmp, globalStage);
  out.append(tmp, r.ptr);
  out += kind;
  r = std::to_chars(tmp, tmp + sizeof tmp, mb);
  out.append(tmp, r.ptr);
}
} // namespace

Status pytorchCsvSupported(const Schedule &s) {
  if (s.placement.numCopies <= 1)
    return Status::ok();
  return Status::error(
      "PyTorch's runtime cannot hold " +
      (s.name.empty() ? std::string("this schedule") : s.name) +
      ": it holds two copies of each stage, and PyTorch's "
      "_PipelineScheduleRuntime maps each stage index to one rank and "
      "sends every microbatch through stages 0..n-1; "
      "a second copy of a stage on another rank, fed from the other end, "
      "and the reduction of the two copies' gradients have no PyTorch "
      "action (write PipeForge's CSV, or a one-copy schedule such as "
      "dualpipev)");
}

namespace {
/// The stage a message cell names: the sender's for SEND_*, the stage the
/// data comes from for RECV_* (PyTorch's convention).
int32_t messageCellStage(int32_t numStages, const Action &a) {
  bool act = a.payload == Payload::Activation;
  bool send = a.kind == ActionKind::Send;
  return a.work.copy * numStages + a.work.stage +
         (send ? 0 : (act ? 1 : -1));
}

/// Writes the cell of a compute, an overlapped pair or (withComm) a
/// message or a parameter gather (UNSHARD, RESHARD) after `sep()`, as both
/// dialects spell them; nothing for a W-gradient message or a GRADREDUCE.
/// Returns whether it wrote one.
template <typename Sep>
bool actionCell(int32_t numStages, const Action &a, bool withComm,
                std::string &out, Sep &&sep) {
  auto g = [&](const Work &w) { return w.copy * numStages + w.stage; };
  switch (a.kind) {
  case ActionKind::Compute:
    sep();
    cell(out, g(a.work), csvKind(a.work.kind), a.work.mb);
    return true;
  case ActionKind::Overlap:
    sep();
    out += '(';
    cell(out, g(a.work), csvKind(a.work.kind), a.work.mb);
    out += ';';
    cell(out, g(a.work2), csvKind(a.work2.kind), a.work2.mb);
    out += ")OVERLAP_F_B";
    return true;
  case ActionKind::Send:
  case ActionKind::Recv: {
    if (!withComm || a.payload == Payload::WeightGrad)
      return false;
    bool act = a.payload == Payload::Activation;
    const char *k = a.kind == ActionKind::Send
                        ? (act ? "SEND_F" : "SEND_B")
                        : (act ? "RECV_F" : "RECV_B");
    sep();
    cell(out, messageCellStage(numStages, a), k, a.work.mb);
    return true;
  }
  case ActionKind::GradReduce:
    return false;
  case ActionKind::Unshard:
  case ActionKind::Reshard: {
    if (!withComm)
      return false;
    sep();
    char tmp[16];
    auto r = std::to_chars(tmp, tmp + sizeof tmp, g(a.work));
    out.append(tmp, r.ptr);
    out += a.kind == ActionKind::Unshard ? "UNSHARD" : "RESHARD";
    return true;
  }
  case ActionKind::Offload:
  case ActionKind::Reload:
    return false; // PyTorch's runtime has no offload action
  }
  return false;
}

/// PyTorch's `compute_comms` row for a rank's program (CsvOptions::
/// pytorchStrict): the rules of PyTorch 2.15's own lowering
/// (_add_unshard_reshard with every stage of the rank resident, unless the
/// schedule places its own gathers (ZeRO-3), _add_reduce_grad,
/// _add_wait_send), applied to PipeForge's order of compute and messages.
void pytorchCommsRow(const Schedule &s, const std::vector<Action> &prog,
                     std::string &out) {
  int32_t ns = s.placement.numStages;
  auto g = [&](const Work &w) { return w.copy * ns + w.stage; };
  bool first = true;
  auto sep = [&] {
    if (!first)
      out += ',';
    first = false;
  };
  auto named = [&](int32_t stage, const char *kind) {
    sep();
    out += std::to_string(stage);
    out += kind;
  };
  // The rank's stages in the order they first compute.
  std::vector<int32_t> stages;
  auto noteStage = [&](int32_t st) {
    if (std::find(stages.begin(), stages.end(), st) == stages.end())
      stages.push_back(st);
  };
  for (const Action &a : prog)
    if (a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap) {
      noteStage(g(a.work));
      if (a.kind == ActionKind::Overlap)
        noteStage(g(a.work2));
    }
  // ZeRO-3: the schedule's own UNSHARD/RESHARD, where they stand.
  const bool ownGathers = hasParamGathers(s);
  if (!ownGathers)
    for (int32_t st : stages)
      named(st, "UNSHARD");
  // Sends not yet waited for, in the order they were posted; the forward
  // ones are found by (stage, mb) when their local backward runs.
  struct Pending {
    int32_t stage, mb;
    bool forward, waited;
  };
  std::vector<Pending> pending;
  std::map<std::pair<int32_t, int32_t>, size_t> pendingForward;
  std::map<int32_t, int64_t> reduceCount; // W and B (our BW) per stage
  auto afterWork = [&](const Work &w) {
    int32_t st = g(w);
    if (w.kind == WorkKind::B || w.kind == WorkKind::BW) {
      auto it = pendingForward.find({st, w.mb});
      if (it != pendingForward.end()) {
        pending[it->second].waited = true;
        sep();
        cell(out, st, "WAIT_SEND_F", w.mb);
        pendingForward.erase(it);
      }
    }
    if ((w.kind == WorkKind::W || w.kind == WorkKind::BW) &&
        ++reduceCount[st] == s.numMicrobatches) {
      named(st, "REDUCE_GRAD");
      named(st, "WAIT_REDUCE_GRAD");
    }
  };
  for (const Action &a : prog) {
    // GRADREDUCE (two copies) is refused by pytorchCsvSupported.
    if (!actionCell(ns, a, /*withComm=*/true, out, sep))
      continue;
    if (a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap) {
      afterWork(a.work);
      if (a.kind == ActionKind::Overlap)
        afterWork(a.work2);
    } else if (a.kind == ActionKind::Send) {
      bool act = a.payload == Payload::Activation;
      int32_t st = messageCellStage(ns, a);
      if (act)
        pendingForward[{st, a.work.mb}] = pending.size();
      pending.push_back({st, a.work.mb, act, false});
    }
  }
  if (!ownGathers)
    for (int32_t st : stages)
      named(st, "RESHARD");
  for (const Pending &p : pending)
    if (!p.waited) {
      sep();
      cell(out, p.stage, p.forward ? "WAIT_SEND_F" : "WAIT_SEND_B", p.mb);
    }
}
} // namespace

void exportCsv(const Schedule &s, std::ostream &os, const CsvOptions &opts) {
  int32_t ns = s.placement.numStages;
  // Rows are written in pieces of about 1 MiB, as they are formed.
  std::string out;
  out.reserve(1u << 20 | 4096);
  auto spill = [&] {
    if (out.size() >= (1u << 20)) {
      os.write(out.data(), std::streamsize(out.size()));
      out.clear();
    }
  };
  if (opts.pytorchStrict && !pytorchCsvSupported(s).isOk())
    return;
  // PyTorch's compute_comms form where the schedule has its messages.
  bool pytorchComms = opts.pytorchStrict && opts.withComm && s.hasComm;
  for (const std::vector<Action> &prog : s.programs) {
    if (pytorchComms) {
      pytorchCommsRow(s, prog, out);
      out += '\n';
      spill();
      continue;
    }
    bool first = true;
    auto sep = [&] {
      if (!first)
        out += ',';
      first = false;
    };
    for (const Action &a : prog) {
      actionCell(ns, a, opts.withComm, out, sep);
      if (a.kind == ActionKind::GradReduce && opts.withComm &&
          !opts.pytorchStrict) {
        sep();
        out += "GRADREDUCE_r" + std::to_string(a.peer);
      }
      spill();
    }
    out += '\n';
  }
  os.write(out.data(), std::streamsize(out.size()));
}

std::string exportCsv(const Schedule &s, const CsvOptions &opts) {
  std::ostringstream os;
  exportCsv(s, os, opts);
  return os.str();
}

namespace {
/// PyTorch's action kinds in a cell: F I W B, SEND_F RECV_F SEND_B RECV_B.
enum class PtKind : uint8_t { F, I, W, B, SendF, RecvF, SendB, RecvB };

const char *ptKindName(PtKind k) {
  static const char *kNames[] = {"F",      "I",      "W",      "B",
                                 "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
  return kNames[static_cast<int>(k)];
}

/// One parsed cell before stages are resolved against a placement: 32
/// bytes (a CSV of millions of cells is held whole until the placement is
/// known).
struct RawCell {
  enum Kind : uint8_t {
    Work,
    Pair,
    Send,
    Recv,
    GradReduce,
    Unshard,
    Reshard
  } kind = Work;
  PtKind ptKind = PtKind::F;
  PtKind ptKind2 = PtKind::F; ///< Pair: the backward member
  int32_t stage = 0, mb = 0;
  int32_t stage2 = 0, mb2 = 0;
  int32_t peer = -1;
  uint32_t row = 0, col = 0;
};
static_assert(sizeof(RawCell) <= 32, "one RawCell per cell is resident");

struct CsvError {
  std::string msg;
};

[[noreturn]] void fail(size_t row, size_t col, std::string_view text,
                       const std::string &why) {
  throw CsvError{"csv row " + std::to_string(row) + ", column " +
                 std::to_string(col) + ": \"" + std::string(text) +
                 "\": " + why};
}

bool parseInt(std::string_view s, size_t &pos, int32_t &out) {
  size_t start = pos;
  long long v = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
    v = v * 10 + (s[pos] - '0');
    if (v > 1000000000)
      return false;
    ++pos;
  }
  out = static_cast<int32_t>(v);
  return pos > start;
}

/// The kinds a PyTorch `compute_comms` dump may hold that have no
/// counterpart in a PipeForge schedule, skipped on import (and counted):
/// FSDP's gradient reduction, and the waits for a posted send
/// (a PipeForge send completes on its own; the receive carries the
/// dependency, so dropping the wait drops no order).
enum class Skipped : uint8_t { None, Fsdp, Wait };

Skipped skippedKind(std::string_view name) {
  if (name == "REDUCE_GRAD" || name == "WAIT_REDUCE_GRAD")
    return Skipped::Fsdp;
  if (name == "WAIT_SEND_F" || name == "WAIT_SEND_B")
    return Skipped::Wait;
  return Skipped::None;
}

constexpr const char *kKnownKinds =
    "F, I, W, B, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD; skipped: "
    "REDUCE_GRAD, WAIT_REDUCE_GRAD, WAIT_SEND_F, WAIT_SEND_B";

/// The kind's name of a cell <stage><NAME><mb>: the letters and
/// underscores after the stage's digits (the whole name, so that
/// "WAIT_SEND_F" is not read as "W" followed by garbage).
std::string_view kindName(std::string_view text, size_t pos) {
  size_t end = pos;
  while (end < text.size() &&
         (std::isalpha(static_cast<unsigned char>(text[end])) ||
          text[end] == '_'))
    ++end;
  return text.substr(pos, end - pos);
}

/// <stage><kind><mb>
void parseSimple(std::string_view text, size_t row, size_t col, PtKind &kind,
                 int32_t &stage, int32_t &mb) {
  size_t pos = 0;
  if (!parseInt(text, pos, stage))
    fail(row, col, text, "expected <stage><kind><microbatch>, e.g. 0F3");
  std::string_view name = kindName(text, pos);
  bool known = false;
  for (PtKind k : {PtKind::F, PtKind::I, PtKind::W, PtKind::B, PtKind::SendF,
                   PtKind::RecvF, PtKind::SendB, PtKind::RecvB})
    if (name == ptKindName(k)) {
      kind = k;
      known = true;
      break;
    }
  if (!known) {
    if (name.empty())
      fail(row, col, text,
           "expected a kind after the stage (" + std::string(kKnownKinds) +
               ")");
    if (skippedKind(name) != Skipped::None)
      fail(row, col, text,
           std::string(name) +
               " has no PipeForge counterpart and is skipped, but only as a "
               "cell of its own: <stage>" +
               std::string(name) + " or <stage>" + std::string(name) +
               "<microbatch>");
    fail(row, col, text,
         "unknown kind '" + std::string(name) + "' (known: " + kKnownKinds +
             ")");
  }
  pos += name.size();
  if (!parseInt(text, pos, mb))
    fail(row, col, text,
         "missing microbatch index after " + std::string(name));
  if (pos != text.size())
    fail(row, col, text, "trailing characters");
}

/// PyTorch's actions without a PipeForge counterpart (skippedKind):
/// <stage><NAME>, or <stage><NAME><mb>.
Skipped skippedCell(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
    ++pos;
  if (pos == 0)
    return Skipped::None;
  std::string_view name = kindName(text, pos);
  Skipped k = skippedKind(name);
  if (k == Skipped::None)
    return k;
  for (pos += name.size(); pos < text.size(); ++pos)
    if (!std::isdigit(static_cast<unsigned char>(text[pos])))
      return Skipped::None;
  return k;
}

/// ZeRO-3's <stage>UNSHARD / <stage>RESHARD (PyTorch's FSDP actions; a
/// microbatch after them, which PyTorch never writes, is read and
/// ignored). False when `text` is neither.
bool parseGather(std::string_view text, size_t row, size_t col, RawCell &c) {
  size_t pos = 0;
  if (!parseInt(text, pos, c.stage))
    return false;
  std::string_view name = kindName(text, pos);
  if (name != "UNSHARD" && name != "RESHARD")
    return false;
  c.kind = name == "UNSHARD" ? RawCell::Unshard : RawCell::Reshard;
  pos += name.size();
  int32_t mb = 0;
  if (pos < text.size() && (!parseInt(text, pos, mb) || pos != text.size()))
    fail(row, col, text,
         "expected <stage>" + std::string(name) + " or <stage>" +
             std::string(name) + "<microbatch>");
  return true;
}

RawCell parseCell(std::string_view text, size_t row, size_t col) {
  RawCell c;
  c.row = uint32_t(row);
  c.col = uint32_t(col);
  if (parseGather(text, row, col, c))
    return c;
  static constexpr std::string_view kGr = "GRADREDUCE_r";
  if (text.substr(0, kGr.size()) == kGr) {
    size_t pos = kGr.size();
    if (!parseInt(text, pos, c.peer) || pos != text.size())
      fail(row, col, text, "expected GRADREDUCE_r<peer rank>");
    c.kind = RawCell::GradReduce;
    return c;
  }
  if (!text.empty() && text[0] == '(') {
    static constexpr std::string_view kSuffix = ")OVERLAP_F_B";
    size_t semi = text.find(';');
    if (text.size() < kSuffix.size() ||
        text.substr(text.size() - kSuffix.size()) != kSuffix ||
        semi == std::string_view::npos)
      fail(row, col, text, "expected (<F cell>;<B or I cell>)OVERLAP_F_B");
    std::string_view a = text.substr(1, semi - 1);
    std::string_view b =
        text.substr(semi + 1, text.size() - kSuffix.size() - semi - 1);
    parseSimple(a, row, col, c.ptKind, c.stage, c.mb);
    parseSimple(b, row, col, c.ptKind2, c.stage2, c.mb2);
    if (c.ptKind != PtKind::F ||
        (c.ptKind2 != PtKind::B && c.ptKind2 != PtKind::I))
      fail(row, col, text,
           "an overlapped pair must be an F then a B or I, in that order");
    c.kind = RawCell::Pair;
    return c;
  }
  parseSimple(text, row, col, c.ptKind, c.stage, c.mb);
  if (c.ptKind == PtKind::SendF || c.ptKind == PtKind::SendB)
    c.kind = RawCell::Send;
  else if (c.ptKind == PtKind::RecvF || c.ptKind == PtKind::RecvB)
    c.kind = RawCell::Recv;
  return c;
}

/// The cell without surrounding spaces and double quotes.
std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  std::string_view t = s.substr(b, e - b);
  if (t.size() >= 2 && t.front() == '"' && t.back() == '"')
    t = t.substr(1, t.size() - 2);
  return t;
}

WorkKind ourKind(PtKind pt) {
  switch (pt) {
  case PtKind::F:
    return WorkKind::F;
  case PtKind::I:
    return WorkKind::B;
  case PtKind::W:
    return WorkKind::W;
  default:
    return WorkKind::BW; // PyTorch "B": full backward
  }
}
} // namespace

namespace {
/// Whether a line holds cell text (not only spaces and commas).
bool isBlankLine(std::string_view line) {
  bool blank = true;
  for (size_t cs = 0; cs <= line.size() && blank;) {
    size_t comma = line.find(',', cs);
    blank = trim(line.substr(cs, comma == std::string_view::npos
                                     ? std::string_view::npos
                                     : comma - cs))
                .empty();
    if (comma == std::string_view::npos)
      break;
    cs = comma + 1;
  }
  return blank;
}

/// Row `row` (line `lineNo`) parsed into `cells`: the skipped cells counted
/// (in the options' counters and the row's own), the others parsed. A row
/// must hold a compute cell.
void readRow(std::string_view line, size_t row, size_t lineNo,
             const CsvImportOptions &opts, std::vector<RawCell> &cells) {
  size_t skipped = 0;
  // Sized once: a row of millions of cells does not grow by doubling.
  cells.reserve(size_t(std::count(line.begin(), line.end(), ',')) + 1);
  size_t cs = 0, col = 0;
  while (cs <= line.size()) {
    size_t comma = line.find(',', cs);
    std::string_view c = trim(line.substr(
        cs, comma == std::string_view::npos ? std::string_view::npos
                                            : comma - cs));
    Skipped sk = c.empty() ? Skipped::None : skippedCell(c);
    if (sk != Skipped::None) {
      int64_t *count = sk == Skipped::Fsdp ? opts.ignoredFsdpActions
                                           : opts.ignoredWaitActions;
      if (count)
        ++*count;
      ++skipped;
    } else if (!c.empty()) {
      cells.push_back(parseCell(c, row, col));
    }
    ++col;
    if (comma == std::string_view::npos)
      break;
    cs = comma + 1;
  }
  bool computes = false;
  for (const RawCell &c : cells)
    computes |= c.kind == RawCell::Work || c.kind == RawCell::Pair;
  if (!computes)
    throw CsvError{
        "csv row " + std::to_string(row) + " (line " + std::to_string(lineNo) +
        ") holds no compute cell (F, I, W, B " + "or an overlapped pair)" +
        (skipped + cells.size()
             ? ", only " + std::to_string(skipped + cells.size()) +
                   " message, gather, FSDP or wait cell(s)"
             : std::string()) +
        ": a row is a rank, and every rank computes"};
}

/// The rows of the file, each a rank's cells. One rule for lines
/// (docs/schedule-json.md): a line without cell text (nothing, spaces,
/// commas) is blank; blank lines before the first row and after the last
/// are skipped, one between rows is an error (it would be an idle rank).
/// Every other line is a rank's row and must hold a compute cell: a row of
/// only skipped cells (FSDP, waits) or only messages is an error wherever
/// it is.
std::vector<std::vector<RawCell>> readRows(std::string_view all,
                                           const CsvImportOptions &opts) {
  std::vector<std::vector<RawCell>> rows;
  size_t start = 0, lineNo = 0, blankAfterRows = 0;
  while (start < all.size()) {
    size_t nl = all.find('\n', start);
    std::string_view line = all.substr(
        start, nl == std::string_view::npos ? std::string_view::npos
                                            : nl - start);
    start = nl == std::string_view::npos ? all.size() : nl + 1;
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    ++lineNo;
    if (isBlankLine(line)) {
      if (!rows.empty())
        blankAfterRows = blankAfterRows ? blankAfterRows : lineNo;
      continue;
    }
    if (blankAfterRows)
      throw CsvError{"csv: line " + std::to_string(blankAfterRows) +
                     " is blank between rows (one row per rank)"};
    rows.emplace_back();
    readRow(line, rows.size() - 1, lineNo, opts, rows.back());
  }
  if (rows.empty())
    throw CsvError{"csv: no rows"};
  return rows;
}

/// The placement read from where each stage computes: every stage up to
/// the highest on one row; a V-shaped layout whose rows reduce gradients
/// (GRADREDUCE) is DualPipe's.
Placement inferPlacement(const std::vector<std::vector<RawCell>> &rows) {
  const int32_t numRanks = static_cast<int32_t>(rows.size());
  std::map<int32_t, int32_t> home;
  int32_t maxStage = -1;
  for (const auto &row : rows)
    for (const RawCell &c : row) {
      if (c.kind != RawCell::Work && c.kind != RawCell::Pair)
        continue;
      for (int32_t st : {c.stage, c.kind == RawCell::Pair ? c.stage2 : -1}) {
        if (st < 0)
          continue;
        auto [it, fresh] = home.emplace(st, static_cast<int32_t>(c.row));
        if (!fresh && it->second != static_cast<int32_t>(c.row))
          fail(c.row, c.col, std::to_string(st),
               "stage " + std::to_string(st) + " is also computed on row " +
                   std::to_string(it->second));
        maxStage = std::max(maxStage, st);
      }
    }
  if (maxStage < 0)
    throw CsvError{"csv: no compute cells"};
  // Every stage up to the highest must be computed somewhere; check it
  // before sizing the placement by the highest (a cell "500440000I00"
  // alone must not allocate 500 million entries).
  if (size_t(maxStage) + 1 != home.size()) {
    int32_t missing = 0;
    for (const auto &[st, r] : home) {
      if (st != missing)
        break;
      ++missing;
    }
    throw CsvError{"csv: stage " + std::to_string(missing) +
                   " is never computed; pass a placement"};
  }
  Placement pl;
  pl.numRanks = numRanks;
  pl.numStages = maxStage + 1;
  pl.numCopies = 1;
  pl.rankOf.assign(1, std::vector<int32_t>(pl.numStages));
  for (int32_t st = 0; st <= maxStage; ++st) {
    auto it = home.find(st);
    if (it == home.end())
      throw CsvError{"csv: stage " + std::to_string(st) +
                     " is never computed; pass a placement"};
    pl.rankOf[0][st] = it->second;
  }
  // DualPipe (our extension of the format: PyTorch has no two-copy
  // schedule): its export numbers copy 1's stage s as p + s, which reads
  // like a V placement, but its rows reduce the parameter gradients of the
  // two copies (GRADREDUCE). A V-shaped layout with those cells is the dual
  // placement.
  bool gradReduce = false;
  for (const auto &row : rows)
    for (const RawCell &c : row)
      gradReduce |= c.kind == RawCell::GradReduce;
  if (gradReduce && pl.numStages == 2 * numRanks &&
      pl.rankOf[0] == Placement::vShape(numRanks).rankOf[0])
    pl = Placement::dual(numRanks);
  return pl;
}

/// The placement: given (with as many ranks as rows), or inferred.
Placement placementOf(const std::vector<std::vector<RawCell>> &rows,
                      const CsvImportOptions &opts) {
  const int32_t numRanks = static_cast<int32_t>(rows.size());
  Placement pl;
  if (opts.placement) {
    pl = *opts.placement;
    if (pl.numRanks != numRanks)
      throw CsvError{"csv: " + std::to_string(numRanks) +
                     " rows but the placement has " +
                     std::to_string(pl.numRanks) + " ranks"};
  } else {
    pl = inferPlacement(rows);
  }
  if (pl.numStages > kMaxStages)
    throw CsvError{"csv: more than " + std::to_string(kMaxStages) +
                   " stages"};
  return pl;
}

/// The cells as actions, row after row, on a placement: a cell's global
/// stage as (copy, stage), its kind as ours (a gradient message's producer
/// is BW where the file runs a full backward), each checked against the
/// placement.
class CellConverter {
public:
  CellConverter(const Placement &pl,
                const std::vector<std::vector<RawCell>> &rows);
  /// The cells of one row appended to the rank's program of `s`.
  void convertRow(const std::vector<RawCell> &row, Schedule &s);
  /// A complete schedule has one F per (copy, stage, microbatch): the
  /// highest microbatch named needs that many forward cells. Returns the
  /// microbatches.
  int32_t checkMicrobatches() const;

private:
  Work toWork(const RawCell &c, PtKind kind, int32_t stage, int32_t mb);
  void convertMessage(const RawCell &c, int32_t r, Schedule &s);
  void convertGather(const RawCell &c, int32_t r, Schedule &s);
  static std::string cellText(const RawCell &c) {
    return std::to_string(c.stage) + ptKindName(c.ptKind) +
           std::to_string(c.mb);
  }

  const Placement &pl;
  int32_t ns, total;
  /// Which (global stage, mb) run a full backward, sorted.
  std::vector<std::pair<int32_t, int32_t>> fullBackward;
  int64_t forwards = 0;
  int32_t maxMb = -1;
};

CellConverter::CellConverter(const Placement &pl,
                             const std::vector<std::vector<RawCell>> &rows)
    : pl(pl), ns(pl.numStages), total(pl.numStages * pl.numCopies) {
  // Counted before the cells are converted, checked after (their errors
  // first).
  for (const auto &row : rows)
    for (const RawCell &c : row) {
      if (c.kind == RawCell::Work && c.ptKind == PtKind::B)
        fullBackward.emplace_back(c.stage, c.mb);
      if (c.kind == RawCell::Pair && c.ptKind2 == PtKind::B)
        fullBackward.emplace_back(c.stage2, c.mb2);
      forwards += (c.kind == RawCell::Work && c.ptKind == PtKind::F) +
                  (c.kind == RawCell::Pair &&
                   (c.ptKind == PtKind::F || c.ptKind2 == PtKind::F));
    }
  std::sort(fullBackward.begin(), fullBackward.end());
}

Work CellConverter::toWork(const RawCell &c, PtKind kind, int32_t stage,
                           int32_t mb) {
  if (stage >= total)
    fail(c.row, c.col,
         std::to_string(stage) + ptKindName(kind) + std::to_string(mb),
         "stage " + std::to_string(stage) + " is out of range (" +
             std::to_string(total) + " stages)");
  Work w;
  w.kind = ourKind(kind);
  w.copy = static_cast<int8_t>(stage / ns);
  w.stage = stage % ns;
  w.mb = mb;
  maxMb = std::max(maxMb, mb);
  return w;
}

void CellConverter::convertRow(const std::vector<RawCell> &row, Schedule &s) {
  if (!row.empty())
    s.programs[row.front().row].reserve(row.size());
  for (const RawCell &c : row) {
    int32_t r = static_cast<int32_t>(c.row);
    switch (c.kind) {
    case RawCell::Work: {
      Work w = toWork(c, c.ptKind, c.stage, c.mb);
      if (pl.rank(w.copy, w.stage) != r)
        fail(c.row, c.col, cellText(c),
             "stage " + std::to_string(c.stage) + " is placed on rank " +
                 std::to_string(pl.rank(w.copy, w.stage)));
      s.programs[r].push_back(Action::compute(w));
      break;
    }
    case RawCell::Pair:
      s.programs[r].push_back(
          Action::overlap(toWork(c, c.ptKind, c.stage, c.mb),
                          toWork(c, c.ptKind2, c.stage2, c.mb2)));
      break;
    case RawCell::Send:
    case RawCell::Recv:
      convertMessage(c, r, s);
      break;
    case RawCell::GradReduce:
      s.programs[r].push_back(Action::gradReduce(c.peer));
      s.hasComm = true;
      break;
    case RawCell::Unshard:
    case RawCell::Reshard:
      convertGather(c, r, s);
      break;
    }
  }
}

void CellConverter::convertMessage(const RawCell &c, int32_t r, Schedule &s) {
  bool act = c.ptKind == PtKind::SendF || c.ptKind == PtKind::RecvF;
  bool send = c.kind == RawCell::Send;
  // The producer's global stage.
  int32_t ps = c.stage - (send ? 0 : (act ? 1 : -1));
  if (ps < 0 || ps >= total)
    fail(c.row, c.col, cellText(c), "has no producer stage");
  Work w = toWork(c, act ? PtKind::F : PtKind::I, ps, c.mb);
  if (!act && std::binary_search(fullBackward.begin(), fullBackward.end(),
                                 std::make_pair(ps, c.mb)))
    w.kind = WorkKind::BW;
  int32_t cs = ps + (act ? 1 : -1);
  if (cs < 0 || cs >= total || cs / ns != ps / ns)
    fail(c.row, c.col, cellText(c), "has no consumer stage");
  int32_t src = pl.rank(w.copy, w.stage);
  int32_t dst = pl.rank(cs / ns, cs % ns);
  Payload p = act ? Payload::Activation : Payload::Gradient;
  s.programs[r].push_back(send ? Action::send(p, w, dst)
                               : Action::recv(p, w, src));
  s.hasComm = true;
}

void CellConverter::convertGather(const RawCell &c, int32_t r, Schedule &s) {
  const char *name = c.kind == RawCell::Unshard ? "UNSHARD" : "RESHARD";
  std::string text = std::to_string(c.stage) + name;
  if (c.stage >= total)
    fail(c.row, c.col, text,
         "stage " + std::to_string(c.stage) + " is out of range (" +
             std::to_string(total) + " stages)");
  int32_t copy = c.stage / ns, stage = c.stage % ns;
  if (pl.rank(copy, stage) != r)
    fail(c.row, c.col, text,
         "stage " + std::to_string(c.stage) + " is placed on rank " +
             std::to_string(pl.rank(copy, stage)) +
             ": a rank gathers only the stages it computes");
  s.programs[r].push_back(c.kind == RawCell::Unshard
                              ? Action::unshard(stage, copy)
                              : Action::reshard(stage, copy));
}

int32_t CellConverter::checkMicrobatches() const {
  // A cell naming microbatch 404004040 in a file of a few cells is not a
  // complete schedule, and must not make the verifier and the simulator
  // size their tables by it.
  if (int64_t(maxMb) + 1 > kMaxMicrobatches ||
      (int64_t(maxMb) + 1) * total > forwards)
    throw CsvError{"csv: microbatch " + std::to_string(maxMb) +
                   " is named, but the file has " + std::to_string(forwards) +
                   " forward cells: a schedule of " +
                   std::to_string(int64_t(maxMb) + 1) +
                   " microbatches over " + std::to_string(total) +
                   " stages has one per stage and "
                   "microbatch"};
  return maxMb + 1;
}
} // namespace

Expected<Schedule> importCsv(const std::string &text,
                             const CsvImportOptions &opts) {
  try {
    std::vector<std::vector<RawCell>> rows = readRows(text, opts);
    Placement pl = placementOf(rows, opts);
    CellConverter convert(pl, rows);
    Schedule s;
    s.name = opts.name;
    s.programs.resize(rows.size());
    for (auto &row : rows) {
      convert.convertRow(row, s);
      // Converted: the row's cells are no longer needed.
      std::vector<RawCell>().swap(row);
    }
    s.numMicrobatches = convert.checkMicrobatches();
    s.placement = pl;
    return s;
  } catch (const CsvError &e) {
    return Status::error(e.msg);
  }
}

} // namespace pipeforge::sched
