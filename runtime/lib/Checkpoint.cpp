//===- Checkpoint.cpp - Per-rank training checkpoints ---------------------===//
//
// See Checkpoint.h and docs/runtime-data.md for the file layout.
//
//===----------------------------------------------------------------------===//
#include "pipeforge/rt/Checkpoint.h"

#include "pipeforge/Support/Numeric.h"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace fs = std::filesystem;

namespace pipeforge::rt {

namespace {

constexpr char kCkptMagic[8] = {'P', 'F', 'C', 'K', 'P', 'T', 0, 0};
constexpr const char *kManifestName = "manifest.txt";
constexpr const char *kManifestHeader = "pipeforge-checkpoint";
/// Caps that keep a corrupt header from asking for absurd allocations.
constexpr uint64_t kMaxNameLen = 4096;
constexpr uint64_t kMaxRank = 16;

class Writer {
public:
  std::vector<uint8_t> b;
  void u8(uint8_t v) { b.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i)
      b.push_back(uint8_t(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i)
      b.push_back(uint8_t(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void f64(double v) {
    uint64_t x;
    std::memcpy(&x, &v, 8);
    u64(x);
  }
  void str(const std::string &s) {
    u32(uint32_t(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
  void bytes(const std::vector<uint8_t> &v) {
    u64(v.size());
    b.insert(b.end(), v.begin(), v.end());
  }
  void floats(const std::vector<float> &v) {
    u64(v.size());
    for (float f : v) {
      uint32_t x;
      std::memcpy(&x, &f, 4);
      u32(x);
    }
  }
};

/// Bounds-checked reader: the first failure sticks and names what was read.
class Reader {
public:
  Reader(const uint8_t *p, size_t n) : p(p), n(n) {}
  bool ok() const { return err.empty(); }
  const std::string &error() const { return err; }
  size_t offset() const { return pos; }

  bool need(uint64_t k, const char *what) {
    if (!ok())
      return false;
    if (k > n - pos) {
      err = std::string("truncated while reading ") + what + " at offset " +
            std::to_string(pos);
      return false;
    }
    return true;
  }
  uint64_t le(int k, const char *what) {
    if (!need(uint64_t(k), what))
      return 0;
    uint64_t v = 0;
    for (int i = 0; i < k; ++i)
      v |= uint64_t(p[pos + i]) << (8 * i);
    pos += size_t(k);
    return v;
  }
  uint8_t u8(const char *w) { return uint8_t(le(1, w)); }
  uint32_t u32(const char *w) { return uint32_t(le(4, w)); }
  uint64_t u64(const char *w) { return le(8, w); }
  int64_t i64(const char *w) { return int64_t(le(8, w)); }
  double f64(const char *w) {
    uint64_t x = le(8, w);
    double d;
    std::memcpy(&d, &x, 8);
    return d;
  }
  std::string str(const char *w) {
    uint32_t len = u32(w);
    if (!ok())
      return {};
    if (len > kMaxNameLen) {
      fail(std::string(w) + " length " + std::to_string(len) +
           " is implausible");
      return {};
    }
    if (!need(len, w))
      return {};
    std::string s(reinterpret_cast<const char *>(p + pos), len);
    pos += len;
    return s;
  }
  std::vector<uint8_t> bytes(const char *w) {
    uint64_t len = u64(w);
    if (!need(len, w))
      return {};
    std::vector<uint8_t> v(p + pos, p + pos + len);
    pos += size_t(len);
    return v;
  }
  std::vector<float> floats(const char *w) {
    uint64_t len = u64(w);
    if (!ok())
      return {};
    if (len > (n - pos) / 4) {
      fail(std::string("truncated while reading ") + w + " (" +
           std::to_string(len) + " floats) at offset " + std::to_string(pos));
      return {};
    }
    std::vector<float> v(static_cast<size_t>(len));
    for (uint64_t i = 0; i < len; ++i) {
      uint32_t x = uint32_t(p[pos]) | uint32_t(p[pos + 1]) << 8 |
                   uint32_t(p[pos + 2]) << 16 | uint32_t(p[pos + 3]) << 24;
      std::memcpy(&v[size_t(i)], &x, 4);
      pos += 4;
    }
    return v;
  }
  void fail(std::string m) {
    if (ok())
      err = std::move(m);
  }

private:
  const uint8_t *p;
  size_t n;
  size_t pos = 0;
  std::string err;
};

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "x" : "") + std::to_string(s[i]);
  return r + "]";
}

Expected<uint64_t> numElements(const std::vector<int64_t> &shape,
                               const std::string &name) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 1)
      return Status::error("parameter '" + name + "' has shape " +
                           shapeStr(shape) + " with a non-positive dimension");
    if (n > (uint64_t(1) << 40) / uint64_t(d))
      return Status::error("parameter '" + name + "' shape " + shapeStr(shape) +
                           " is implausibly large");
    n *= uint64_t(d);
  }
  return n;
}

/// The first value of `v` a checkpoint may not hold, as "element I is X"
/// (empty when every one is fine): NaN and infinities everywhere; in a
/// parameter also a magnitude whose square overflows float (no trained
/// weight gets there: it would turn every norm and product it enters into
/// infinity); in a second moment (a mean of squares) a negative value.
enum class ValueRule { Parameter, Moment, SecondMoment };
std::string badValue(const std::vector<float> &v, ValueRule rule) {
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = v[i];
    const char *why = nullptr;
    if (std::isnan(x))
      why = "";
    else if (std::isinf(x))
      why = "";
    else if (rule == ValueRule::Parameter &&
             double(x) * double(x) > double(std::numeric_limits<float>::max()))
      why = " (its square overflows float)";
    else if (rule == ValueRule::SecondMoment && x < 0)
      why = " (a mean of squares is never negative)";
    if (!why)
      continue;
    char buf[96];
    std::snprintf(buf, sizeof buf, "element %zu is %g%s", i, double(x), why);
    return buf;
  }
  return "";
}

Status writeAtomically(const fs::path &path, const std::vector<uint8_t> &b) {
  Status st = writeFileAtomically(path.string(), b);
  if (!st)
    return Status::error("checkpoint: " + st.message());
  return st;
}

Expected<std::vector<uint8_t>> readAll(const fs::path &path) {
  auto b = readFileBytes(path.string());
  if (!b)
    return Status::error("checkpoint: " + b.message());
  return b;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, v);
  return buf;
}

} // namespace

std::string rankCheckpointFileName(uint32_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05u.pfckpt", rank);
  return buf;
}

//===----------------------------------------------------------------------===//
// Encoding
//===----------------------------------------------------------------------===//

Expected<std::vector<uint8_t>> encodeRankCheckpoint(const RankCheckpoint &c) {
  if (c.numRanks == 0 || c.rank >= c.numRanks)
    return Status::error("checkpoint: rank " + std::to_string(c.rank) +
                         " out of range for " + std::to_string(c.numRanks) +
                         " ranks");
  Writer w;
  w.b.insert(w.b.end(), kCkptMagic, kCkptMagic + 8);
  w.u32(kCheckpointVersion);
  w.u32(c.rank);
  w.u32(c.numRanks);
  w.u32(0); // reserved
  w.u64(c.step);
  w.u64(c.programFingerprint);
  w.u32(uint32_t(c.params.size()));
  for (const CheckpointTensor &t : c.params) {
    auto n = numElements(t.shape, t.name);
    if (!n)
      return Status::error("checkpoint: " + n.message());
    if (*n != t.data.size())
      return Status::error("checkpoint: parameter '" + t.name + "' shape " +
                           shapeStr(t.shape) + " but " +
                           std::to_string(t.data.size()) + " elements");
    if (t.shape.size() > kMaxRank)
      return Status::error("checkpoint: parameter '" + t.name +
                           "' has too many dimensions");
    w.str(t.name);
    w.u32(uint32_t(t.shape.size()));
    for (int64_t d : t.shape)
      w.i64(d);
    w.floats(t.data);
  }
  w.u8(c.hasOptimizer ? 1 : 0);
  if (c.hasOptimizer) {
    const AdamWState<float> &o = c.optimizer;
    if (o.m.size() != o.names.size() || o.v.size() != o.names.size())
      return Status::error("checkpoint: inconsistent optimizer state");
    w.i64(o.step);
    w.f64(o.lr);
    w.u32(uint32_t(o.names.size()));
    for (size_t i = 0; i < o.names.size(); ++i) {
      w.str(o.names[i]);
      w.floats(o.m[i]);
      w.floats(o.v[i]);
    }
  }
  w.bytes(c.data.serialize());
  w.bytes(c.rngState);
  w.u64(fnv1a64(w.b.data(), w.b.size()));
  return std::move(w.b);
}

Expected<RankCheckpoint> decodeRankCheckpoint(const std::vector<uint8_t> &b,
                                              const std::string &name) {
  auto bad = [&](const std::string &m) {
    return Status::error("checkpoint '" + name + "': " + m);
  };
  if (b.size() < 8 + 8)
    return bad("truncated (" + std::to_string(b.size()) + " bytes)");
  if (std::memcmp(b.data(), kCkptMagic, 8) != 0)
    return bad("bad magic (not a PipeForge rank checkpoint)");
  size_t body = b.size() - 8;
  uint64_t stored = 0;
  for (int i = 0; i < 8; ++i)
    stored |= uint64_t(b[body + i]) << (8 * i);
  // Check the version before the checksum so that a file of another
  // version gets the more useful message.
  Reader r(b.data(), body);
  r.le(8, "magic");
  uint32_t version = r.u32("version");
  if (r.ok() && version != kCheckpointVersion)
    return bad("unsupported version " + std::to_string(version) +
               " (this reader knows " + std::to_string(kCheckpointVersion) +
               ")");
  if (stored != fnv1a64(b.data(), body))
    return bad("checksum mismatch (file corrupt or truncated)");

  RankCheckpoint c;
  c.rank = r.u32("rank");
  c.numRanks = r.u32("rank count");
  r.u32("reserved");
  c.step = r.u64("step");
  if (r.ok() && c.step > uint64_t(kMaxSteps))
    return bad("step " + std::to_string(c.step) + " out of range [0, " +
               std::to_string(kMaxSteps) + "]");
  c.programFingerprint = r.u64("program fingerprint");
  uint32_t np = r.u32("parameter count");
  for (uint32_t i = 0; i < np && r.ok(); ++i) {
    CheckpointTensor t;
    t.name = r.str("parameter name");
    uint32_t rank = r.u32("parameter rank");
    if (rank > kMaxRank) {
      r.fail("parameter '" + t.name + "' has " + std::to_string(rank) +
             " dimensions");
      break;
    }
    for (uint32_t k = 0; k < rank; ++k)
      t.shape.push_back(r.i64("dimension"));
    t.data = r.floats("parameter data");
    if (!r.ok())
      break;
    auto n = numElements(t.shape, t.name);
    if (!n)
      return bad(n.message());
    if (*n != t.data.size())
      return bad("parameter '" + t.name + "' shape " + shapeStr(t.shape) +
                 " but " + std::to_string(t.data.size()) + " elements");
    // Every loaded value finite and plausible: a NaN, an infinity or an
    // absurd magnitude in a file whose checksum matches would otherwise
    // train on silently (docs/reliability.md).
    if (std::string v = badValue(t.data, ValueRule::Parameter); !v.empty())
      return bad("parameter '" + t.name + "' of rank " +
                 std::to_string(c.rank) + ": " + v +
                 "; a checkpoint holds only finite, plausible values");
    c.params.push_back(std::move(t));
  }
  c.hasOptimizer = r.u8("optimizer flag") != 0;
  if (c.hasOptimizer && r.ok()) {
    c.optimizer.step = r.i64("optimizer step");
    c.optimizer.lr = r.f64("learning rate");
    if (r.ok() && (c.optimizer.step < 0 || c.optimizer.step > kMaxSteps))
      return bad("optimizer step " + std::to_string(c.optimizer.step) +
                 " out of range [0, " + std::to_string(kMaxSteps) + "]");
    if (r.ok() && !(std::isfinite(c.optimizer.lr) && c.optimizer.lr >= 0))
      return bad("learning rate " + std::to_string(c.optimizer.lr) +
                 " is not a finite number >= 0");
    uint32_t no = r.u32("optimizer parameter count");
    for (uint32_t i = 0; i < no && r.ok(); ++i) {
      c.optimizer.names.push_back(r.str("optimizer parameter name"));
      c.optimizer.m.push_back(r.floats("first moment"));
      c.optimizer.v.push_back(r.floats("second moment"));
      if (!r.ok())
        break;
      for (auto [what, v, rule] :
           {std::make_tuple("first moment", &c.optimizer.m.back(),
                            ValueRule::Moment),
            std::make_tuple("second moment", &c.optimizer.v.back(),
                            ValueRule::SecondMoment)})
        if (std::string e = badValue(*v, rule); !e.empty())
          return bad(std::string("AdamW ") + what + " of '" +
                     c.optimizer.names.back() + "' of rank " +
                     std::to_string(c.rank) + ": " + e +
                     "; a checkpoint holds only finite, plausible values");
    }
  }
  std::vector<uint8_t> pos = r.bytes("data position");
  c.rngState = r.bytes("rng state");
  if (!r.ok())
    return bad(r.error());
  if (r.offset() != body)
    return bad(std::to_string(body - r.offset()) +
               " unexpected bytes before the checksum");
  if (c.numRanks == 0 || c.rank >= c.numRanks)
    return bad("rank " + std::to_string(c.rank) + " out of range for " +
               std::to_string(c.numRanks) + " ranks");
  auto dp = DataPosition::parse(pos);
  if (!dp)
    return bad(dp.message());
  c.data = *dp;
  return c;
}

//===----------------------------------------------------------------------===//
// Capture / restore
//===----------------------------------------------------------------------===//

Expected<RankCheckpoint>
captureCheckpoint(uint32_t rank, uint32_t numRanks, uint64_t step,
                  const std::vector<ParamRef> &params, const AdamW *opt,
                  const DataPosition &data, std::vector<uint8_t> rngState,
                  uint64_t programFingerprint) {
  RankCheckpoint c;
  c.rank = rank;
  c.numRanks = numRanks;
  c.step = step;
  c.programFingerprint = programFingerprint;
  c.data = data;
  c.rngState = std::move(rngState);
  std::set<std::string> seen;
  for (const ParamRef &p : params) {
    if (!seen.insert(p.name).second)
      return Status::error("checkpoint: duplicate parameter '" + p.name + "'");
    if (!p.data)
      return Status::error("checkpoint: parameter '" + p.name +
                           "' has no data");
    auto n = numElements(p.shape, p.name);
    if (!n)
      return Status::error("checkpoint: " + n.message());
    c.params.push_back(
        {p.name, p.shape, std::vector<float>(p.data, p.data + size_t(*n))});
  }
  if (opt) {
    auto st = opt->exportState();
    if (!st)
      return Status::error("checkpoint: " + st.message());
    c.hasOptimizer = true;
    c.optimizer = st.take();
  }
  return c;
}

Status restoreCheckpoint(const RankCheckpoint &c,
                         const std::vector<ParamRef> &params, AdamW *opt) {
  std::map<std::string, const CheckpointTensor *> saved;
  for (const CheckpointTensor &t : c.params)
    saved[t.name] = &t;
  std::set<std::string> claimed;
  for (const ParamRef &p : params) {
    auto it = saved.find(p.name);
    if (it == saved.end())
      return Status::error("checkpoint (rank " + std::to_string(c.rank) +
                           "): no parameter '" + p.name + "' saved");
    if (it->second->shape != p.shape)
      return Status::error("checkpoint (rank " + std::to_string(c.rank) +
                           "): parameter '" + p.name + "' saved with shape " +
                           shapeStr(it->second->shape) + ", expected " +
                           shapeStr(p.shape));
    if (!p.data)
      return Status::error("checkpoint: parameter '" + p.name +
                           "' has no data");
    if (!claimed.insert(p.name).second)
      return Status::error("checkpoint: parameter '" + p.name +
                           "' listed twice");
  }
  for (const CheckpointTensor &t : c.params)
    if (!claimed.count(t.name))
      return Status::error("checkpoint (rank " + std::to_string(c.rank) +
                           "): saved parameter '" + t.name +
                           "' is not in the model");
  if (opt) {
    if (!c.hasOptimizer)
      return Status::error("checkpoint (rank " + std::to_string(c.rank) +
                           "): no optimizer state saved");
    // importState validates before it changes anything.
    if (Status st = opt->importState(c.optimizer); !st)
      return Status::error("checkpoint (rank " + std::to_string(c.rank) +
                           "): " + st.message());
  }
  for (const ParamRef &p : params) {
    const CheckpointTensor &t = *saved[p.name];
    std::memcpy(p.data, t.data.data(), t.data.size() * sizeof(float));
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

Status writeRankCheckpoint(const std::string &dir, const RankCheckpoint &c,
                           std::string *record) {
  auto img = encodeRankCheckpoint(c);
  if (!img)
    return img.status();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status::error("checkpoint: cannot create directory '" + dir +
                         "': " + ec.message());
  if (record) {
    // "rank R FILE BYTES CHECKSUM step S ranks N program FP": the manifest
    // line plus what assembleManifest cross-checks.
    uint64_t sum = 0;
    for (int i = 0; i < 8; ++i)
      sum |= uint64_t((*img)[img->size() - 8 + i]) << (8 * i);
    *record = "rank " + std::to_string(c.rank) + " " +
              rankCheckpointFileName(c.rank) + " " +
              std::to_string(img->size()) + " " + hex64(sum) + " step " +
              std::to_string(c.step) + " ranks " + std::to_string(c.numRanks) +
              " program " + hex64(c.programFingerprint);
  }
  return writeAtomically(fs::path(dir) / rankCheckpointFileName(c.rank), *img);
}

Status writeManifest(const std::string &dir, const CheckpointManifest &m,
                     const std::string &tmpSuffix) {
  std::ostringstream os;
  os << kManifestHeader << " " << kCheckpointVersion << "\n";
  os << "step " << m.step << "\n";
  os << "ranks " << m.numRanks << "\n";
  os << "program " << hex64(m.programFingerprint) << "\n";
  for (const auto &e : m.files)
    os << "rank " << e.rank << " " << e.file << " " << e.bytes << " "
       << hex64(e.checksum) << "\n";
  std::string text = os.str();
  Status st = writeFileAtomically(
      (fs::path(dir) / kManifestName).string(),
      std::vector<uint8_t>(text.begin(), text.end()), tmpSuffix);
  if (!st)
    return Status::error("checkpoint: " + st.message());
  return st;
}

Expected<CheckpointManifest>
assembleManifest(const std::vector<std::string> &records, uint32_t numRanks) {
  if (numRanks == 0 || records.size() != numRanks)
    return Status::error("checkpoint: " + std::to_string(records.size()) +
                         " rank records for " + std::to_string(numRanks) +
                         " ranks");
  CheckpointManifest m;
  m.numRanks = numRanks;
  m.files.resize(numRanks);
  std::vector<bool> seen(numRanks, false);
  bool first = true;
  for (const std::string &rec : records) {
    std::istringstream in(rec);
    std::string kw[5], file, sumHex, fpHex;
    unsigned long long rank = 0, bytes = 0, step = 0, ranks = 0;
    in >> kw[0] >> rank >> file >> bytes >> sumHex >> kw[1] >> step >> kw[2] >>
        ranks >> kw[3] >> fpHex;
    char *end = nullptr;
    uint64_t sum = std::strtoull(sumHex.c_str(), &end, 16);
    bool sumOk = end && *end == 0 && sumHex.size() > 2;
    uint64_t fp = std::strtoull(fpHex.c_str(), &end, 16);
    bool fpOk = end && *end == 0 && fpHex.size() > 2;
    if (!in || kw[0] != "rank" || kw[1] != "step" || kw[2] != "ranks" ||
        kw[3] != "program" || !sumOk || !fpOk || rank >= numRanks ||
        file != rankCheckpointFileName(uint32_t(rank)))
      return Status::error("checkpoint: malformed rank record '" + rec + "'");
    if (ranks != numRanks)
      return Status::error("checkpoint: rank " + std::to_string(rank) +
                           " saved for " + std::to_string(ranks) +
                           " ranks, expected " + std::to_string(numRanks));
    if (seen[rank])
      return Status::error("checkpoint: two records for rank " +
                           std::to_string(rank));
    seen[rank] = true;
    if (first) {
      m.step = step;
      m.programFingerprint = fp;
      first = false;
    } else if (step != m.step || fp != m.programFingerprint) {
      return Status::error("checkpoint: rank " + std::to_string(rank) +
                           " saved step " + std::to_string(step) +
                           " / program " + hex64(fp) + ", another rank step " +
                           std::to_string(m.step) + " / program " +
                           hex64(m.programFingerprint));
    }
    m.files[rank] = {uint32_t(rank), file, bytes, sum};
  }
  return m;
}

Expected<CheckpointManifest> finalizeCheckpoint(const std::string &dir,
                                                uint32_t numRanks) {
  if (numRanks == 0)
    return Status::error("checkpoint: zero ranks");
  CheckpointManifest m;
  m.numRanks = numRanks;
  for (uint32_t r = 0; r < numRanks; ++r) {
    std::string file = rankCheckpointFileName(r);
    fs::path path = fs::path(dir) / file;
    auto bytes = readAll(path);
    if (!bytes)
      return bytes.status();
    auto c = decodeRankCheckpoint(*bytes, path.string());
    if (!c)
      return c.status();
    if (c->rank != r || c->numRanks != numRanks)
      return Status::error("checkpoint '" + path.string() + "': holds rank " +
                           std::to_string(c->rank) + " of " +
                           std::to_string(c->numRanks) + ", expected " +
                           std::to_string(r) + " of " +
                           std::to_string(numRanks));
    if (r == 0) {
      m.step = c->step;
      m.programFingerprint = c->programFingerprint;
    } else if (c->step != m.step ||
               c->programFingerprint != m.programFingerprint) {
      return Status::error(
          "checkpoint '" + path.string() + "': step " +
          std::to_string(c->step) +
          " / program fingerprint differ from rank 0's (step " +
          std::to_string(m.step) + ")");
    }
    uint64_t sum = 0;
    for (int i = 0; i < 8; ++i)
      sum |= uint64_t((*bytes)[bytes->size() - 8 + i]) << (8 * i);
    m.files.push_back({r, file, bytes->size(), sum});
  }
  if (Status st = writeManifest(dir, m); !st)
    return st;
  return m;
}

namespace {
/// `line` split at single spaces; an empty token (two spaces, a leading or
/// trailing space, a tab) makes the line malformed.
bool splitWords(const std::string &line, std::vector<std::string> &out) {
  out.clear();
  size_t start = 0;
  while (true) {
    size_t sp = line.find(' ', start);
    std::string w = line.substr(
        start, sp == std::string::npos ? std::string::npos : sp - start);
    if (w.empty() || w.find_first_of("\t\r") != std::string::npos)
      return false;
    out.push_back(w);
    if (sp == std::string::npos)
      return true;
    start = sp + 1;
  }
}

/// A decimal number in [0, max], all of `w`.
bool decimal(const std::string &w, uint64_t max, uint64_t &out) {
  if (w.empty() || w.size() > 20 ||
      w.find_first_not_of("0123456789") != std::string::npos)
    return false;
  errno = 0;
  unsigned long long v = std::strtoull(w.c_str(), nullptr, 10);
  if (errno == ERANGE || v > max)
    return false;
  out = v;
  return true;
}

/// 0x followed by exactly 16 hex digits, as hex64 writes it.
bool hexWord(const std::string &w, uint64_t &out) {
  if (w.size() != 18 || w.compare(0, 2, "0x") != 0 ||
      w.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos)
    return false;
  out = std::strtoull(w.c_str() + 2, nullptr, 16);
  return true;
}
} // namespace

Expected<CheckpointManifest> readManifest(const std::string &dir) {
  fs::path path = fs::path(dir) / kManifestName;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Status::error("checkpoint '" + dir + "': no " + kManifestName +
                         " (not a checkpoint, or an incomplete one)");
  auto bytes = readAll(path);
  if (!bytes)
    return bytes.status();
  // Strict: exactly the lines finalizeCheckpoint writes, in its order, each
  // with exactly its words; nothing before, between or after them.
  std::vector<std::string> lines;
  {
    std::string text(bytes->begin(), bytes->end());
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      if (nl == std::string::npos)
        nl = text.size();
      lines.push_back(text.substr(start, nl - start));
      start = nl + 1;
    }
  }
  auto bad = [&](size_t line, const std::string &m) {
    return Status::error(path.string() + ":" + std::to_string(line) + ": " + m);
  };
  CheckpointManifest m;
  std::vector<std::string> w;
  auto lineWords = [&](size_t i, size_t n, const char *key) {
    return i < lines.size() && splitWords(lines[i], w) && w.size() == n &&
           w[0] == key;
  };
  uint64_t v = 0;
  if (!lineWords(0, 2, kManifestHeader))
    return bad(1, "not a PipeForge checkpoint manifest");
  if (!decimal(w[1], UINT32_MAX, v) || v != kCheckpointVersion)
    return bad(1, "unsupported version '" + w[1] + "'");
  m.version = uint32_t(v);
  if (!lineWords(1, 2, "step") || !decimal(w[1], uint64_t(kMaxSteps), v))
    return bad(2, "expected 'step N' with N in [0, " +
                      std::to_string(kMaxSteps) + "]");
  m.step = v;
  // A rank count bounds the lines that follow; more than the file has
  // lines is malformed, not an allocation.
  if (!lineWords(2, 2, "ranks") || !decimal(w[1], UINT32_MAX, v) || v == 0 ||
      v > lines.size())
    return bad(3, "expected 'ranks N' with N > 0 and one line per rank");
  m.numRanks = uint32_t(v);
  if (!lineWords(3, 2, "program") || !hexWord(w[1], m.programFingerprint))
    return bad(4, "expected 'program 0x' and 16 hex digits");
  for (uint32_t r = 0; r < m.numRanks; ++r) {
    size_t i = 4 + r;
    CheckpointManifest::Entry e;
    e.rank = r;
    uint64_t rk = 0;
    if (!lineWords(i, 5, "rank") || !decimal(w[1], UINT32_MAX, rk) || rk != r ||
        !decimal(w[3], UINT64_MAX, e.bytes) || !hexWord(w[4], e.checksum))
      return bad(i + 1, "expected 'rank " + std::to_string(r) +
                            " FILE BYTES 0xCHECKSUM'");
    e.file = w[2];
    if (e.file != rankCheckpointFileName(r))
      return bad(i + 1, "unexpected file name '" + e.file + "'");
    m.files.push_back(e);
  }
  if (lines.size() > 4 + size_t(m.numRanks))
    return bad(5 + size_t(m.numRanks),
               "unexpected line after the last rank (a duplicate or a "
               "foreign line)");
  return m;
}

Status removeStaleCheckpoints(const std::string &root) {
  std::error_code ec;
  fs::directory_iterator it(root, ec), end;
  if (ec)
    return Status::ok(); // nothing saved yet
  std::vector<fs::path> interrupted, temporaries;
  for (; it != end; it.increment(ec)) {
    if (ec)
      break;
    const std::string name = it->path().filename().string();
    if (name.size() <= 5 || name.compare(0, 5, "step-") != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos ||
        !it->is_directory(ec) || it->is_symlink(ec))
      continue;
    if (!fs::exists(it->path() / kManifestName, ec)) {
      interrupted.push_back(it->path());
      continue;
    }
    std::error_code ec2;
    for (fs::directory_iterator f(it->path(), ec2); !ec2 && f != end;
         f.increment(ec2))
      if (f->path().extension() == ".tmp" && f->is_regular_file(ec2))
        temporaries.push_back(f->path());
  }
  std::string failed;
  for (const fs::path &p : interrupted) {
    fs::remove_all(p, ec);
    if (ec && failed.empty())
      failed = p.string() + ": " + ec.message();
  }
  for (const fs::path &p : temporaries) {
    fs::remove(p, ec);
    if (ec && failed.empty())
      failed = p.string() + ": " + ec.message();
  }
  if (!failed.empty())
    return Status::error("checkpoint: cannot remove a stale temporary " +
                         failed);
  return Status::ok();
}

Expected<RankCheckpoint> loadRankCheckpoint(const std::string &dir,
                                            uint32_t rank) {
  auto m = readManifest(dir);
  if (!m)
    return m.status();
  if (rank >= m->numRanks)
    return Status::error("checkpoint '" + dir + "' has " +
                         std::to_string(m->numRanks) + " ranks, rank " +
                         std::to_string(rank) + " asked for");
  const auto &e = m->files[rank];
  fs::path path = fs::path(dir) / e.file;
  auto bytes = readAll(path);
  if (!bytes)
    return bytes.status();
  if (bytes->size() != e.bytes)
    return Status::error(
        "checkpoint '" + path.string() + "': " + std::to_string(bytes->size()) +
        " bytes, the manifest says " + std::to_string(e.bytes));
  auto c = decodeRankCheckpoint(*bytes, path.string());
  if (!c)
    return c.status();
  uint64_t sum = 0;
  for (int i = 0; i < 8; ++i)
    sum |= uint64_t((*bytes)[bytes->size() - 8 + i]) << (8 * i);
  if (sum != e.checksum)
    return Status::error("checkpoint '" + path.string() +
                         "': checksum differs from the manifest's (a file "
                         "from another checkpoint?)");
  if (c->rank != rank || c->numRanks != m->numRanks || c->step != m->step ||
      c->programFingerprint != m->programFingerprint)
    return Status::error("checkpoint '" + path.string() +
                         "': rank / step / program do not match the manifest");
  return c;
}

} // namespace pipeforge::rt
