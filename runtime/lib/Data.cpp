//===- Data.cpp - Synthetic language, token files, data position ----------===//
//
// See Data.h and docs/runtime-data.md.
//
//===----------------------------------------------------------------------===//
#include "pipeforge/rt/Data.h"
#include "DataDetail.h"
#include "pipeforge/rt/Executor.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace pipeforge::rt {

DataSource::~DataSource() = default;

Status DataSource::documentStarts(int64_t, int64_t, int64_t, int64_t,
                                  int32_t *) const {
  return Status::error(describe() +
                       " has no document boundaries (an end-of-document "
                       "token marks them: --eos ID)");
}

void documentStartsFromEos(const int32_t *tokens, int64_t b, int64_t s,
                           int32_t eos, int32_t *docStart) {
  for (int64_t r = 0; r < b; ++r) {
    int32_t start = 0;
    for (int64_t i = 0; i < s; ++i) {
      if (i > 0 && tokens[r * s + i - 1] == eos)
        start = int32_t(i);
      docStart[r * s + i] = start;
    }
  }
}

Status detail::checkBatchArgs(int64_t mb, int64_t step, int64_t b, int64_t s,
                              const int32_t *tokens, const int32_t *targets) {
  if (b < 1 || s < 1)
    return Status::error("data: batch shape must be at least 1x1, got " +
                         std::to_string(b) + "x" + std::to_string(s));
  if (mb < 0 || step < 0)
    return Status::error("data: negative step or microbatch index");
  if (!tokens || !targets)
    return Status::error("data: null token or target buffer");
  return Status::ok();
}

namespace {
using detail::checkBatchArgs;

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The key of one sample: a hash of everything that identifies it.
uint64_t sampleKey(uint64_t seed, int64_t step, int64_t mb, int64_t row) {
  uint64_t h = splitmix(seed ^ 0x7066646174617631ull); // "pfdatav1"
  h = splitmix(h ^ uint64_t(step));
  h = splitmix(h ^ uint64_t(mb));
  return splitmix(h ^ uint64_t(row));
}

/// Counter-based generator: the same key always gives the same stream.
struct Rng {
  uint64_t state;
  uint64_t next() { return splitmix(state++); }
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }
};

const char *const kNouns[] = {"cat",  "dog",   "bird", "fish",
                              "king", "queen", "tree", "ship"};
const char *const kVerbs[] = {"sees",  "likes",  "eats",
                              "finds", "chases", "helps"};
const char *const kAdjs[] = {"big", "small", "red", "old", "happy", "green"};
template <size_t N> const char *pick(Rng &r, const char *const (&a)[N]) {
  return a[r.below(N)];
}

/// Appends one sentence of the language to `out`.
void sentence(Rng &r, std::string &out) {
  uint32_t kind = r.below(10);
  if (kind < 4) { // grammar: the [adj] noun verb the noun.
    out += "the ";
    if (r.below(2)) {
      out += pick(r, kAdjs);
      out += ' ';
    }
    out += pick(r, kNouns);
    out += ' ';
    out += pick(r, kVerbs);
    out += " the ";
    out += pick(r, kNouns);
  } else if (kind < 6) { // repetition: w w w.
    uint32_t which = r.below(3);
    const char *w = which == 0   ? pick(r, kNouns)
                    : which == 1 ? pick(r, kVerbs)
                                 : pick(r, kAdjs);
    uint32_t k = 2 + r.below(3);
    for (uint32_t i = 0; i < k; ++i) {
      if (i)
        out += ' ';
      out += w;
    }
  } else if (kind < 8) { // counting: 3 4 5 6.
    uint32_t start = r.below(10), len = 3 + r.below(5);
    for (uint32_t i = 0; i < len; ++i) {
      if (i)
        out += ' ';
      out += char('0' + (start + i) % 10);
    }
  } else { // copying: copy xqz = xqz.
    uint32_t len = 3 + r.below(3);
    std::string w;
    for (uint32_t i = 0; i < len; ++i)
      w += char('a' + r.below(26));
    out += "copy " + w + " = " + w;
  }
  out += r.below(4) ? ". " : ".\n";
}

} // namespace

//===----------------------------------------------------------------------===//
// SyntheticLanguage
//===----------------------------------------------------------------------===//

void SyntheticLanguage::generate(uint64_t key, size_t n, int32_t *out) const {
  Rng r{key};
  // Start somewhere inside the first sentence so that positions vary.
  size_t skip = r.below(16);
  std::string text;
  text.reserve(skip + n + 64);
  while (text.size() < skip + n)
    sentence(r, text);
  for (size_t i = 0; i < n; ++i)
    out[i] = int32_t(static_cast<unsigned char>(text[skip + i]));
}

std::string SyntheticLanguage::sampleText(uint64_t key, size_t n) const {
  std::vector<int32_t> toks(n);
  generate(splitmix(seed ^ key), n, toks.data());
  return std::string(toks.begin(), toks.end());
}

Status SyntheticLanguage::batch(int64_t mb, int64_t step, int64_t b, int64_t s,
                                int32_t *tokens, int32_t *targets) const {
  if (Status st = checkBatchArgs(mb, step, b, s, tokens, targets); !st)
    return st;
  std::vector<int32_t> w(size_t(s) + 1);
  for (int64_t row = 0; row < b; ++row) {
    generate(sampleKey(seed, step, mb, row), w.size(), w.data());
    std::memcpy(tokens + row * s, w.data(), size_t(s) * sizeof(int32_t));
    std::memcpy(targets + row * s, w.data() + 1, size_t(s) * sizeof(int32_t));
  }
  return Status::ok();
}

uint64_t SyntheticLanguage::fingerprint() const {
  const char tag[] = "pipeforge-synthetic-v1";
  uint64_t h = fnv1a64(tag, sizeof(tag));
  return fnv1a64(&seed, sizeof(seed), h);
}

std::string SyntheticLanguage::describe() const {
  return "synthetic language (seed " + std::to_string(seed) + ", vocab 256)";
}

uint64_t windowStart(uint64_t seed, int64_t step, int64_t mb, int64_t row,
                     uint64_t windows) {
  return windows ? sampleKey(seed, step, mb, row) % windows : 0;
}

//===----------------------------------------------------------------------===//
// Token files
//===----------------------------------------------------------------------===//

namespace {

constexpr char kTokMagic[8] = {'P', 'F', 'T', 'O', 'K', 0, 0, 0};
constexpr size_t kTokHeader = 32;

void putU32(std::vector<uint8_t> &b, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    b.push_back(uint8_t(v >> (8 * i)));
}
void putU64(std::vector<uint8_t> &b, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    b.push_back(uint8_t(v >> (8 * i)));
}
uint64_t getLE(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= uint64_t(p[i]) << (8 * i);
  return v;
}

/// Writes `bytes` to the open stream `f` and closes it; false on any error
/// (a full device, an I/O error at close).
bool writeAndClose(std::ofstream &f, const std::vector<uint8_t> &bytes) {
  if (!f)
    return false;
  f.write(reinterpret_cast<const char *>(bytes.data()),
          std::streamsize(bytes.size()));
  f.close();
  return !f.fail();
}
} // namespace

Status writeFileAtomically(const std::string &path,
                           const std::vector<uint8_t> &bytes,
                           const std::string &tmpSuffix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::symlink_status(path, ec);
  if (fs::is_directory(st))
    return Status::error("cannot write '" + path + "': is a directory");
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A device, a FIFO, a socket or a symbolic link: write through it; a
    // rename would replace the node itself (pipeforge-tokenize -o /dev/full
    // once turned the device into a regular file).
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f)
      return Status::error("cannot open '" + path + "' for writing");
    if (!writeAndClose(f, bytes))
      return Status::error("cannot write '" + path +
                           "' (device full or I/O error)");
    return Status::ok();
  }
  std::string tmp = path + tmpSuffix;
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f)
    return Status::error("cannot create '" + tmp + "'");
  if (!writeAndClose(f, bytes)) {
    std::remove(tmp.c_str());
    return Status::error("cannot write '" + tmp + "' (disk full or I/O error)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error("cannot rename '" + tmp + "' to '" + path + "'");
  }
  return Status::ok();
}

Expected<std::vector<uint8_t>> readFileBytes(const std::string &path) {
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return Status::error("cannot open '" + path + "'");
  if (std::filesystem::is_directory(st))
    return Status::error("'" + path + "' is a directory, not a file");
  if (!std::filesystem::is_regular_file(st))
    return Status::error("'" + path + "' is not a regular file");
  try {
    std::ifstream f(path, std::ios::binary);
    if (!f)
      return Status::error("cannot open '" + path + "'");
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                               std::istreambuf_iterator<char>());
    if (f.bad())
      return Status::error("cannot read '" + path + "'");
    return bytes;
  } catch (const std::exception &e) {
    return Status::error("cannot read '" + path + "': " + e.what());
  }
}

Expected<std::vector<uint8_t>>
encodeTokenFile(const std::vector<uint32_t> &tokens, uint64_t vocab,
                uint32_t width) {
  if (vocab < 1 || vocab > 0x7fffffffull)
    return Status::error("token file: vocab must be in [1, 2^31 - 1], got " +
                         std::to_string(vocab));
  if (width == 0)
    width = vocab <= 65536 ? 2 : 4;
  if (width != 2 && width != 4)
    return Status::error("token file: width must be 2 or 4, got " +
                         std::to_string(width));
  if (width == 2 && vocab > 65536)
    return Status::error("token file: vocab " + std::to_string(vocab) +
                         " does not fit 2-byte tokens");
  std::vector<uint8_t> b;
  b.reserve(kTokHeader + tokens.size() * width + 8);
  b.insert(b.end(), kTokMagic, kTokMagic + 8);
  putU32(b, kTokenFileVersion);
  putU32(b, width);
  putU64(b, tokens.size());
  putU64(b, vocab);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab)
      return Status::error("token file: token " + std::to_string(tokens[i]) +
                           " at index " + std::to_string(i) + " >= vocab " +
                           std::to_string(vocab));
    for (uint32_t k = 0; k < width; ++k)
      b.push_back(uint8_t(tokens[i] >> (8 * k)));
  }
  putU64(b, fnv1a64(b.data(), b.size()));
  return b;
}

Status writeTokenFile(const std::string &path,
                      const std::vector<uint32_t> &tokens, uint64_t vocab,
                      uint32_t width) {
  auto img = encodeTokenFile(tokens, vocab, width);
  if (!img)
    return img.status();
  return writeFileAtomically(path, *img);
}

Status tokenizeTextFile(const std::string &textPath,
                        const std::string &tokenPath, uint32_t width,
                        uint64_t *count) {
  auto text = readFileBytes(textPath);
  if (!text)
    return text.status();
  std::vector<uint32_t> toks(text->begin(), text->end());
  if (count)
    *count = toks.size();
  return writeTokenFile(tokenPath, toks, 256, width);
}

Expected<std::unique_ptr<TokenFile>>
TokenFile::fromBytes(std::vector<uint8_t> bytes, const std::string &name,
                     uint64_t seed) {
  auto bad = [&](const std::string &msg) {
    return Status::error("token file '" + name + "': " + msg);
  };
  if (bytes.size() < kTokHeader + 8)
    return bad("truncated: " + std::to_string(bytes.size()) +
               " bytes, a header and checksum need 40");
  if (std::memcmp(bytes.data(), kTokMagic, 8) != 0)
    return bad("bad magic (not a PFTOK token file)");
  uint32_t version = uint32_t(getLE(bytes.data() + 8, 4));
  if (version != kTokenFileVersion)
    return bad("unsupported version " + std::to_string(version) +
               " (this reader knows " + std::to_string(kTokenFileVersion) +
               ")");
  uint32_t width = uint32_t(getLE(bytes.data() + 12, 4));
  if (width != 2 && width != 4)
    return bad("token width must be 2 or 4, got " + std::to_string(width));
  uint64_t count = getLE(bytes.data() + 16, 8);
  uint64_t vocab = getLE(bytes.data() + 24, 8);
  if (vocab < 1 || vocab > 0x7fffffffull)
    return bad("vocab " + std::to_string(vocab) + " out of [1, 2^31 - 1]");
  uint64_t avail = (bytes.size() - kTokHeader - 8) / width;
  if (count > avail || bytes.size() != kTokHeader + count * width + 8)
    return bad("size mismatch: header says " + std::to_string(count) +
               " tokens of " + std::to_string(width) + " bytes (" +
               std::to_string(kTokHeader + 8) + " + " + std::to_string(count) +
               " * " + std::to_string(width) + " bytes), the file has " +
               std::to_string(bytes.size()) +
               " bytes (truncated or trailing data)");
  size_t body = bytes.size() - 8;
  uint64_t stored = getLE(bytes.data() + body, 8);
  uint64_t actual = fnv1a64(bytes.data(), body);
  if (stored != actual)
    return bad("checksum mismatch (file corrupt)");
  std::unique_ptr<TokenFile> tf(new TokenFile());
  tf->name = name;
  tf->count = count;
  tf->vocab = vocab;
  tf->tokWidth = width;
  tf->sum = stored;
  tf->seed = seed;
  tf->bytes = std::move(bytes);
  for (uint64_t i = 0; i < count; ++i)
    if (tf->token(i) >= vocab)
      return bad("token " + std::to_string(tf->token(i)) + " at index " +
                 std::to_string(i) + " >= vocab " + std::to_string(vocab));
  return tf;
}

Expected<std::unique_ptr<TokenFile>> TokenFile::open(const std::string &path,
                                                     uint64_t seed) {
  auto bytes = readFileBytes(path);
  if (!bytes)
    return Status::error("token file: " + bytes.message());
  return fromBytes(bytes.take(), path, seed);
}

uint32_t TokenFile::token(uint64_t i) const {
  return uint32_t(getLE(bytes.data() + kTokHeader + i * tokWidth, tokWidth));
}

Status TokenFile::batch(int64_t mb, int64_t step, int64_t b, int64_t s,
                        int32_t *tokens, int32_t *targets) const {
  if (Status st = checkBatchArgs(mb, step, b, s, tokens, targets); !st)
    return st;
  if (uint64_t(s) + 1 > count)
    return Status::error("token file '" + name + "': " + std::to_string(count) +
                         " tokens, a window of sequence length " +
                         std::to_string(s) + " needs " + std::to_string(s + 1));
  uint64_t windows = count - uint64_t(s);
  for (int64_t row = 0; row < b; ++row) {
    uint64_t off = windowStart(seed, step, mb, row, windows);
    for (int64_t i = 0; i < s; ++i) {
      tokens[row * s + i] = int32_t(token(off + uint64_t(i)));
      targets[row * s + i] = int32_t(token(off + uint64_t(i) + 1));
    }
  }
  return Status::ok();
}

uint64_t TokenFile::fingerprint() const {
  const char tag[] = "pipeforge-tokenfile-v1";
  uint64_t h = fnv1a64(tag, sizeof(tag));
  h = fnv1a64(&sum, sizeof(sum), h);
  return fnv1a64(&seed, sizeof(seed), h);
}

std::string TokenFile::describe() const {
  return "token file '" + name + "' (" + std::to_string(count) +
         " tokens, vocab " + std::to_string(vocab) + ", seed " +
         std::to_string(seed) + ")";
}

//===----------------------------------------------------------------------===//
// DataPosition
//===----------------------------------------------------------------------===//

std::vector<uint8_t> DataPosition::serialize() const {
  std::vector<uint8_t> b = {'P', 'F', 'D', 'P'};
  putU32(b, 1);
  putU64(b, nextStep);
  putU64(b, fingerprint);
  return b;
}

Expected<DataPosition> DataPosition::parse(const std::vector<uint8_t> &b) {
  if (b.size() != 24 || std::memcmp(b.data(), "PFDP", 4) != 0)
    return Status::error("data position: malformed record (" +
                         std::to_string(b.size()) + " bytes)");
  uint32_t version = uint32_t(getLE(b.data() + 4, 4));
  if (version != 1)
    return Status::error("data position: unsupported version " +
                         std::to_string(version));
  DataPosition p;
  p.nextStep = getLE(b.data() + 8, 8);
  p.fingerprint = getLE(b.data() + 16, 8);
  return p;
}

Status DataPosition::checkSource(const DataSource &src) const {
  if (src.fingerprint() != fingerprint)
    return Status::error("data position: the checkpoint was taken on other "
                         "data than " +
                         src.describe() + " (fingerprint mismatch)");
  return Status::ok();
}

//===--- The executor's built-in pattern stream (Executor.h) --------------===//

namespace {
class PatternTokens final : public TokenSource {
public:
  PatternTokens(uint64_t seed, int64_t vocab) : seed(seed), vocab(vocab) {}
  Status fill(int64_t step, int dpIndex, int64_t g, int64_t batch, int64_t seq,
              int32_t *tok, int32_t *tgt) override {
    if (vocab < 2)
      return Status::error("pattern data needs a vocabulary of at least 2");
    for (int64_t b = 0; b < batch; ++b) {
      uint64_t x = seed ^ (uint64_t(step) * 1000003ull) ^
                   (uint64_t(dpIndex) << 40) ^ (uint64_t(g) << 20) ^
                   uint64_t(b);
      int64_t cur = int64_t(splitmix(x) % uint64_t(vocab));
      int64_t mult = 1 + 2 * ((step + g + b) % 2); // two interleaved rules
      for (int64_t t = 0; t < seq; ++t) {
        int64_t nxt = (cur * mult + 1) % vocab;
        tok[b * seq + t] = int32_t(cur);
        tgt[b * seq + t] = int32_t(nxt);
        cur = nxt;
      }
    }
    return Status::ok();
  }

private:
  uint64_t seed;
  int64_t vocab;
};

} // namespace

std::unique_ptr<TokenSource> createPatternTokens(uint64_t seed, int64_t vocab) {
  return std::make_unique<PatternTokens>(seed, vocab);
}
} // namespace pipeforge::rt
