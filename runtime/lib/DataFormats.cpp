//===- DataFormats.cpp - Megatron-LM, NumPy and nanoGPT token arrays ------===//
//
// See Data.h (TokenArray, parseMegatronIndex, openDataFile) and
// docs/runtime-data.md, "Megatron-LM, nanoGPT and NumPy token arrays".
//
// Every reader validates all sizes before any pointer arithmetic, with
// 64-bit counts checked against the file size first (a header can claim
// 2^64 sequences), and scans every token once: the vocabulary check and
// the fingerprint. Errors name the file and what is wrong, never abort.
//
//===----------------------------------------------------------------------===//
#include "DataDetail.h"
#include "pipeforge/rt/Data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// The loads below are native: the files are little-endian, as the hosts.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "DataFormats.cpp reads little-endian files with native loads"
#endif

namespace pipeforge::rt {

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

size_t tokenDTypeBytes(TokenDType t) {
  switch (t) {
  case TokenDType::U8:
  case TokenDType::I8:
    return 1;
  case TokenDType::I16:
  case TokenDType::U16:
    return 2;
  case TokenDType::I32:
  case TokenDType::U32:
    return 4;
  case TokenDType::I64:
  case TokenDType::U64:
    return 8;
  }
  return 1;
}

const char *tokenDTypeName(TokenDType t) {
  switch (t) {
  case TokenDType::U8:
    return "uint8";
  case TokenDType::I8:
    return "int8";
  case TokenDType::I16:
    return "int16";
  case TokenDType::U16:
    return "uint16";
  case TokenDType::I32:
    return "int32";
  case TokenDType::U32:
    return "uint32";
  case TokenDType::I64:
    return "int64";
  case TokenDType::U64:
    return "uint64";
  }
  return "?";
}

namespace {

/// Little-endian loads from possibly unaligned bytes.
template <typename T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string str(uint64_t v) { return std::to_string(v); }

/// Calls f with a value of the C++ type of `t` (its type selects the
/// instantiation).
template <typename F> auto withType(TokenDType t, F &&f) {
  switch (t) {
  case TokenDType::U8:
    return f(uint8_t());
  case TokenDType::I8:
    return f(int8_t());
  case TokenDType::I16:
    return f(int16_t());
  case TokenDType::U16:
    return f(uint16_t());
  case TokenDType::I32:
    return f(int32_t());
  case TokenDType::U32:
    return f(uint32_t());
  case TokenDType::I64:
    return f(int64_t());
  case TokenDType::U64:
    break;
  }
  return f(uint64_t());
}

/// The first token outside [0, limit), or n when all are inside; `maxOut`
/// receives the largest token (0 when n == 0). A vectorisable min/max pass
/// first, the search only when something is out of range.
template <typename T>
uint64_t scanTokens(const uint8_t *p, uint64_t n, uint64_t limit,
                    uint64_t &maxOut) {
  constexpr uint64_t kChunk = 1 << 16;
  T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::min();
  for (uint64_t i0 = 0; i0 < n; i0 += kChunk) {
    uint64_t e = std::min(n, i0 + kChunk);
    T clo = lo, chi = hi;
    for (uint64_t i = i0; i < e; ++i) {
      T v = load<T>(p + i * sizeof(T));
      clo = v < clo ? v : clo;
      chi = v > chi ? v : chi;
    }
    lo = clo, hi = chi;
  }
  maxOut = n && hi > T(0) ? uint64_t(hi) : 0;
  bool negative = n && lo < T(0);
  if (!negative && uint64_t(maxOut) < limit)
    return n;
  for (uint64_t i = 0; i < n; ++i) {
    T v = load<T>(p + i * sizeof(T));
    if (v < T(0) || uint64_t(v) >= limit)
      return i;
  }
  return n;
}

/// A fast 64-bit hash of bytes (8 at a time; the fingerprint of mapped
/// token arrays, where FNV-1a's byte loop would dominate the open).
uint64_t hashBytes(const uint8_t *p, uint64_t n, uint64_t h) {
  constexpr uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xff51afd7ed558ccdull;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    h ^= load<uint64_t>(p + i) * k1;
    h = ((h << 31) | (h >> 33)) * k2;
  }
  uint64_t tail = 0;
  for (uint64_t k = 0; i + k < n; ++k)
    tail |= uint64_t(p[i + k]) << (8 * k);
  h ^= (tail ^ n) * k1;
  h ^= h >> 33;
  h *= k2;
  return h ^ (h >> 29);
}

constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr size_t kMegatronHeader = 34;
constexpr uint8_t kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

} // namespace

//===----------------------------------------------------------------------===//
// FileBytes
//===----------------------------------------------------------------------===//

Expected<std::shared_ptr<const FileBytes>>
FileBytes::map(const std::string &path) {
  // O_NONBLOCK: a FIFO must not block the open (it is refused below).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return Status::error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::error("cannot stat '" + path + "'");
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Status::error("'" + path + "' is a directory, not a file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("'" + path + "' is not a regular file");
  }
  std::shared_ptr<FileBytes> f(new FileBytes());
  f->len = uint64_t(st.st_size);
  if (f->len > 0) {
    void *p = ::mmap(nullptr, size_t(f->len), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return Status::error("cannot map '" + path + "': " + std::strerror(e));
    }
    f->ptr = static_cast<const uint8_t *>(p);
    f->mapped = true;
  }
  ::close(fd); // the mapping stays valid
  return std::shared_ptr<const FileBytes>(std::move(f));
}

std::shared_ptr<const FileBytes> FileBytes::hold(std::vector<uint8_t> bytes) {
  std::shared_ptr<FileBytes> f(new FileBytes());
  f->owned = std::move(bytes);
  f->ptr = f->owned.data();
  f->len = f->owned.size();
  return f;
}

FileBytes::~FileBytes() {
  if (mapped)
    ::munmap(const_cast<uint8_t *>(ptr), size_t(len));
}

//===----------------------------------------------------------------------===//
// Megatron-LM index
//===----------------------------------------------------------------------===//

int32_t MegatronIndex::length(uint64_t i) const {
  return load<int32_t>(lengths + 4 * i);
}
int64_t MegatronIndex::pointer(uint64_t i) const {
  return load<int64_t>(pointers + 8 * i);
}
int64_t MegatronIndex::documentIndex(uint64_t k) const {
  return load<int64_t>(documents + 8 * k);
}
uint64_t MegatronIndex::documentStart(uint64_t k) const {
  uint64_t seq = uint64_t(documentIndex(k));
  return seq < sequenceCount ? uint64_t(pointer(seq)) / tokenDTypeBytes(dtype)
                             : tokenCount;
}

Expected<MegatronIndex> parseMegatronIndex(const uint8_t *idx, size_t size,
                                           uint64_t binBytes,
                                           const std::string &idxName,
                                           const std::string &binName) {
  auto bad = [&](const std::string &msg) {
    return Status::error("megatron index '" + idxName + "': " + msg);
  };
  if (size < 9 || std::memcmp(idx, kMegatronMagic, 9) != 0)
    return bad(size < 9 ? "truncated: " + str(size) +
                              " bytes, not a Megatron-LM index (the magic "
                              "\"MMIDIDX\" needs 9)"
                        : "bad magic (not a Megatron-LM MMIDIDX index)");
  if (size < kMegatronHeader)
    return bad("truncated: " + str(size) + " bytes, the header needs " +
               str(kMegatronHeader));
  uint64_t version = load<uint64_t>(idx + 9);
  if (version != 1)
    return bad("unsupported version " + str(version) +
               " (this reader knows 1)");
  MegatronIndex ix;
  uint8_t code = idx[17];
  switch (code) {
  case 1:
    ix.dtype = TokenDType::U8;
    break;
  case 2:
    ix.dtype = TokenDType::I8;
    break;
  case 3:
    ix.dtype = TokenDType::I16;
    break;
  case 4:
    ix.dtype = TokenDType::I32;
    break;
  case 5:
    ix.dtype = TokenDType::I64;
    break;
  case 8:
    ix.dtype = TokenDType::U16;
    break;
  default:
    return bad("unsupported dtype code " + str(code) +
               (code == 6   ? " (float64)"
                : code == 7 ? " (float32)"
                            : "") +
               ": token ids need an integer dtype (1 uint8, 2 int8, 3 int16, "
               "4 int32, 5 int64, 8 uint16)");
  }
  ix.sequenceCount = load<uint64_t>(idx + 18);
  ix.documentIndexCount = load<uint64_t>(idx + 26);
  uint64_t S = ix.sequenceCount, D = ix.documentIndexCount;
  uint64_t body = size - kMegatronHeader;
  // 12 bytes per sequence and 8 per document index, checked before any
  // product can overflow.
  if (S > body / 12 || D > (body - 12 * S) / 8)
    return bad("truncated: the header says " + str(S) + " sequences and " +
               str(D) + " document indices (" + str(kMegatronHeader) +
               " + 12 * " + str(S) + " + 8 * " + str(D) +
               " bytes), the file has " + str(size));
  uint64_t need = kMegatronHeader + 12 * S + 8 * D;
  if (size == need + S && S > 0)
    ix.hasModes = true; // multimodal: one int8 mode per sequence
  else if (size != need)
    return bad(
        "size mismatch: the header says " + str(S) + " sequences and " +
        str(D) + " document indices (" + str(need) + " bytes" +
        (S ? ", or " + str(need + S) + " with sequence modes" : std::string()) +
        "), the file has " + str(size) + " (trailing data)");
  ix.lengths = idx + kMegatronHeader;
  ix.pointers = ix.lengths + 4 * S;
  ix.documents = ix.pointers + 8 * S;
  uint64_t w = tokenDTypeBytes(ix.dtype);

  // Sequences: back to back from byte 0 to the end of the .bin.
  uint64_t end = 0; // the byte after the previous sequence
  for (uint64_t i = 0; i < S; ++i) {
    int32_t len = ix.length(i);
    int64_t ptr = ix.pointer(i);
    std::string seq = "sequence " + str(i);
    if (len < 0)
      return bad(seq + " has a negative length " + std::to_string(len));
    if (ptr < 0 || uint64_t(ptr) > binBytes)
      return bad(seq + " starts at byte " + std::to_string(ptr) +
                 ", past the end of '" + binName + "' (" + str(binBytes) +
                 " bytes; truncated .bin, or the index of another dataset)");
    uint64_t p = uint64_t(ptr), bytes = uint64_t(len) * w;
    if (p < end)
      return bad(seq + " starts at byte " + str(p) + ", inside sequence " +
                 str(i - 1) + " (bytes " + str(uint64_t(ix.pointer(i - 1))) +
                 ".." + str(end) + "): the pointers overlap");
    if (p > end)
      return bad(
          seq + " starts at byte " + str(p) + ", " + str(p - end) +
          " bytes after " +
          (i ? "the end of sequence " + str(i - 1) + " (byte " + str(end) + ")"
             : std::string("the start of the .bin")) +
          ": a gap (this reader takes the back-to-back layout "
          "IndexedDatasetBuilder writes)");
    if (bytes > binBytes - p)
      return bad(seq + " (" + str(uint64_t(len)) + " tokens at byte " + str(p) +
                 ") runs past the end of '" + binName + "' (" + str(binBytes) +
                 " bytes): truncated .bin");
    end = p + bytes;
  }
  if (end != binBytes)
    return bad("'" + binName + "' has " + str(binBytes) +
               " bytes, the sequences end at byte " + str(end) +
               " (trailing data: the .bin of another index?)");
  ix.tokenCount = end / w;

  // Documents: 0 = d[0] <= d[1] <= ... <= d[D-1] = S.
  if (D == 0)
    return bad("no document indices (at least [0, ..., " + str(S) +
               "] expected)");
  if (ix.documentIndex(0) != 0)
    return bad("document index 0 is " + std::to_string(ix.documentIndex(0)) +
               ", expected 0");
  for (uint64_t k = 1; k < D; ++k) {
    int64_t prev = ix.documentIndex(k - 1), cur = ix.documentIndex(k);
    if (cur < prev || uint64_t(cur) > S)
      return bad("document index " + str(k) + " is " + std::to_string(cur) +
                 (cur < prev
                      ? ", below the one before (" + std::to_string(prev) + ")"
                      : ", past the sequence count " + str(S)));
  }
  if (uint64_t(ix.documentIndex(D - 1)) != S)
    return bad("the last document index is " +
               std::to_string(ix.documentIndex(D - 1)) +
               ", the sequence count " + str(S) +
               " (sequences outside every document)");
  return ix;
}

//===----------------------------------------------------------------------===//
// NumPy .npy
//===----------------------------------------------------------------------===//

namespace {

struct NpyHeader {
  TokenDType dtype = TokenDType::U16;
  uint64_t count = 0;
  uint64_t dataOffset = 0;
};

/// The value of `key` in the header dict: the text after "'key':" up to
/// the next top-level ',' or '}' (a tuple's commas are inside parentheses).
bool npyField(const std::string &h, const std::string &key, std::string &out) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos)
    k = h.find("\"" + key + "\"");
  if (k == std::string::npos)
    return false;
  size_t c = h.find(':', k + key.size() + 2);
  if (c == std::string::npos)
    return false;
  size_t i = c + 1, depth = 0;
  std::string v;
  for (; i < h.size(); ++i) {
    char ch = h[i];
    if (ch == '(')
      ++depth;
    else if (ch == ')' && depth)
      --depth;
    else if ((ch == ',' || ch == '}') && depth == 0)
      break;
    v += ch;
  }
  size_t a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t");
  out = a == std::string::npos ? "" : v.substr(a, b - a + 1);
  return true;
}

Expected<NpyHeader> parseNpy(const uint8_t *p, uint64_t size,
                             const std::string &name) {
  auto bad = [&](const std::string &msg) {
    return Status::error("npy file '" + name + "': " + msg);
  };
  if (size < 10 || std::memcmp(p, kNpyMagic, 6) != 0)
    return bad(size < 10 ? "truncated: " + str(size) +
                               " bytes, the .npy preamble needs 10"
                         : "bad magic (not a NumPy .npy file)");
  uint8_t major = p[6], minor = p[7];
  uint64_t hlen, pre;
  if (major == 1) {
    hlen = load<uint16_t>(p + 8);
    pre = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return bad("truncated: " + str(size) +
                 " bytes, a version 2 preamble needs 12");
    hlen = load<uint32_t>(p + 8);
    pre = 12;
  } else {
    return bad("unsupported .npy version " + str(major) + "." + str(minor) +
               " (this reader knows 1.0, 2.0, 3.0)");
  }
  if (hlen > size - pre)
    return bad("truncated: the header needs " + str(hlen) +
               " bytes after the " + str(pre) +
               "-byte preamble, the file has " + str(size));
  std::string h(reinterpret_cast<const char *>(p + pre), size_t(hlen));
  std::string descr, fortran, shape;
  if (h.find('{') == std::string::npos || !npyField(h, "descr", descr) ||
      !npyField(h, "fortran_order", fortran) || !npyField(h, "shape", shape))
    return bad("the header is not a dict with 'descr', 'fortran_order' and "
               "'shape'");
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"') &&
      descr.back() == descr.front())
    descr = descr.substr(1, descr.size() - 2);
  NpyHeader r;
  static const struct {
    const char *name;
    TokenDType type;
  } kTypes[] = {{"|u1", TokenDType::U8},  {"|i1", TokenDType::I8},
                {"<i2", TokenDType::I16}, {"<u2", TokenDType::U16},
                {"<i4", TokenDType::I32}, {"<u4", TokenDType::U32},
                {"<i8", TokenDType::I64}, {"<u8", TokenDType::U64}};
  bool found = false;
  for (const auto &t : kTypes)
    if (descr == t.name) {
      r.dtype = t.type;
      found = true;
    }
  if (!found)
    return bad("unsupported dtype '" + descr + "'" +
               (descr.size() > 1 && descr[0] == '>' ? " (big-endian)" : "") +
               ": token ids need a little-endian integer dtype (<u2, <i4, "
               "<u4, <i8, <u8, <i2, |u1, |i1)");
  if (fortran != "False" && fortran != "True")
    return bad("fortran_order is '" + fortran + "', not True or False");
  // shape: "(N,)" for 1-D; Fortran order is the same layout then.
  std::string inner = shape;
  if (inner.size() < 2 || inner.front() != '(' || inner.back() != ')')
    return bad("shape '" + shape + "' is not a tuple");
  inner = inner.substr(1, inner.size() - 2);
  size_t comma = inner.find(',');
  std::string dim = inner.substr(0, comma);
  std::string rest = comma == std::string::npos ? "" : inner.substr(comma + 1);
  auto blank = [](const std::string &x) {
    return x.find_first_not_of(" \t") == std::string::npos;
  };
  while (!dim.empty() && (dim.back() == ' ' || dim.back() == 'L'))
    dim.pop_back();
  while (!dim.empty() && dim.front() == ' ')
    dim.erase(dim.begin());
  if (comma == std::string::npos || !blank(rest) || dim.empty() ||
      dim.find_first_not_of("0123456789") != std::string::npos ||
      dim.size() > 19)
    return bad("shape " + shape +
               " is not 1-D (a flat token array, as "
               "np.save(path, np.array(tokens)) writes, is expected)");
  r.count = std::stoull(dim);
  r.dataOffset = pre + hlen;
  uint64_t w = tokenDTypeBytes(r.dtype), avail = size - r.dataOffset;
  bool huge = r.count > std::numeric_limits<uint64_t>::max() / w;
  if (huge || r.count * w != avail)
    return bad(std::string(huge || r.count * w > avail ? "truncated"
                                                       : "trailing data") +
               ": shape (" + str(r.count) + ",) of " + tokenDTypeName(r.dtype) +
               " needs " + (huge ? "over 2^64" : str(r.count * w)) +
               " data bytes after the " + str(r.dataOffset) +
               "-byte header, the file has " + str(avail));
  return r;
}

} // namespace

//===----------------------------------------------------------------------===//
// TokenArray
//===----------------------------------------------------------------------===//

int64_t TokenArray::token(uint64_t i) const {
  return withType(type, [&](auto t) {
    return int64_t(load<decltype(t)>(base + i * sizeof(t)));
  });
}

Expected<std::unique_ptr<TokenArray>>
TokenArray::finish(std::unique_ptr<TokenArray> t, const DataFileOptions &o) {
  t->seed = o.seed;
  const char *what = t->fmt == Format::Megatron ? "megatron dataset"
                     : t->fmt == Format::Npy    ? "npy file"
                                                : "token file";
  auto bad = [&](const std::string &msg) {
    return Status::error(std::string(what) + " '" + t->name + "': " + msg);
  };
  if (o.vocab < 0)
    return bad("negative vocabulary");
  uint64_t limit = o.vocab > 0 ? uint64_t(o.vocab) : uint64_t(INT32_MAX);
  uint64_t maxTok = 0;
  uint64_t badAt = withType(t->type, [&](auto x) {
    return scanTokens<decltype(x)>(t->base, t->count, limit, maxTok);
  });
  if (badAt < t->count) {
    int64_t v = t->token(badAt);
    uint64_t w = tokenDTypeBytes(t->type);
    std::string where = "at index " + str(badAt) + " (byte offset " +
                        str(uint64_t(t->base - t->file->data()) + badAt * w);
    if (t->fmt == Format::Megatron) {
      // The sequence holding it: the last whose pointer is <= its byte.
      uint64_t lo = 0, hi = t->index.sequenceCount;
      while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (uint64_t(t->index.pointer(mid)) <= badAt * w)
          lo = mid;
        else
          hi = mid;
      }
      where += ", sequence " + str(lo);
    }
    where += ")";
    if (v < 0)
      return bad("token " + std::to_string(v) + " " + where + " is negative");
    return bad("token " + std::to_string(v) + " " + where + " >= " +
               (o.vocab > 0 ? "the model's vocabulary " + str(limit)
                            : "2^31 - 1, the largest vocabulary"));
  }
  t->vocab = o.vocab > 0 ? o.vocab : int64_t(maxTok) + 1;
  if (o.seqLen > 0 && t->count < uint64_t(o.seqLen) + 1)
    return bad(str(t->count) + " tokens, too short for one window of " +
               "sequence length " + str(uint64_t(o.seqLen)) + " (" +
               str(uint64_t(o.seqLen) + 1) + " tokens)");
  uint64_t h = hashBytes(t->base, t->count * tokenDTypeBytes(t->type),
                         uint64_t(t->type) + 1);
  if (t->fmt == Format::Megatron)
    h = hashBytes(t->index.documents, 8 * t->index.documentIndexCount, h);
  t->contentHash = h;
  return t;
}

Expected<std::unique_ptr<TokenArray>>
TokenArray::create(Format f, std::shared_ptr<const FileBytes> data,
                   std::shared_ptr<const FileBytes> idx,
                   const std::string &name, const std::string &idxName,
                   const DataFileOptions &o) {
  std::unique_ptr<TokenArray> t(new TokenArray());
  t->fmt = f;
  t->file = std::move(data);
  t->idxFile = std::move(idx);
  t->name = name;
  t->base = t->file->data();
  switch (f) {
  case Format::Megatron: {
    auto ix = parseMegatronIndex(t->idxFile->data(), t->idxFile->size(),
                                 t->file->size(), idxName, name);
    if (!ix)
      return ix.status();
    t->index = *ix;
    t->type = ix->dtype;
    t->count = ix->tokenCount;
    break;
  }
  case Format::Npy: {
    auto h = parseNpy(t->file->data(), t->file->size(), name);
    if (!h)
      return h.status();
    t->type = h->dtype;
    t->base += h->dataOffset;
    t->count = h->count;
    break;
  }
  case Format::RawU16:
    if (t->file->size() % 2)
      return Status::error("token file '" + name +
                           "': " + str(t->file->size()) +
                           " bytes, an odd size: not an array of uint16 "
                           "tokens (nanoGPT's .bin; truncated?)");
    t->type = TokenDType::U16;
    t->count = t->file->size() / 2;
    break;
  }
  return finish(std::move(t), o);
}

Expected<std::unique_ptr<TokenArray>> TokenArray::megatronFromBytes(
    std::vector<uint8_t> idx, std::vector<uint8_t> bin,
    const std::string &prefix, const DataFileOptions &o) {
  return create(Format::Megatron, FileBytes::hold(std::move(bin)),
                FileBytes::hold(std::move(idx)), prefix + ".bin",
                prefix + ".idx", o);
}

Expected<std::unique_ptr<TokenArray>>
TokenArray::openMegatron(const std::string &prefix, const DataFileOptions &o) {
  std::string idxPath = prefix + ".idx", binPath = prefix + ".bin";
  auto idx = FileBytes::map(idxPath);
  if (!idx)
    return Status::error("megatron dataset: " + idx.message());
  auto bin = FileBytes::map(binPath);
  if (!bin)
    return Status::error("megatron dataset: " + bin.message());
  return create(Format::Megatron, *bin, *idx, binPath, idxPath, o);
}

Expected<std::unique_ptr<TokenArray>>
TokenArray::npyFromBytes(std::vector<uint8_t> bytes, const std::string &name,
                         const DataFileOptions &o) {
  return create(Format::Npy, FileBytes::hold(std::move(bytes)), nullptr, name,
                "", o);
}

Expected<std::unique_ptr<TokenArray>>
TokenArray::openNpy(const std::string &path, const DataFileOptions &o) {
  auto f = FileBytes::map(path);
  if (!f)
    return Status::error("npy file: " + f.message());
  return create(Format::Npy, *f, nullptr, path, "", o);
}

Expected<std::unique_ptr<TokenArray>>
TokenArray::rawU16FromBytes(std::vector<uint8_t> bytes, const std::string &name,
                            const DataFileOptions &o) {
  return create(Format::RawU16, FileBytes::hold(std::move(bytes)), nullptr,
                name, "", o);
}

Expected<std::unique_ptr<TokenArray>>
TokenArray::openRawU16(const std::string &path, const DataFileOptions &o) {
  auto f = FileBytes::map(path);
  if (!f)
    return Status::error("token file: " + f.message());
  return create(Format::RawU16, *f, nullptr, path, "", o);
}

Status TokenArray::batch(int64_t mb, int64_t step, int64_t b, int64_t s,
                         int32_t *tokens, int32_t *targets) const {
  if (Status st = detail::checkBatchArgs(mb, step, b, s, tokens, targets); !st)
    return st;
  if (uint64_t(s) + 1 > count)
    return Status::error("'" + name + "': " + str(count) +
                         " tokens, a window of sequence length " + str(s) +
                         " needs " + str(uint64_t(s) + 1));
  uint64_t windows = count - uint64_t(s);
  withType(type, [&](auto x) {
    using T = decltype(x);
    for (int64_t row = 0; row < b; ++row) {
      const uint8_t *w =
          base + windowStart(seed, step, mb, row, windows) * sizeof(T);
      int32_t *tok = tokens + row * s, *tgt = targets + row * s;
      int32_t prev = int32_t(load<T>(w));
      for (int64_t i = 0; i < s; ++i) {
        int32_t next = int32_t(load<T>(w + (i + 1) * sizeof(T)));
        tok[i] = prev;
        tgt[i] = next;
        prev = next;
      }
    }
    return 0;
  });
  return Status::ok();
}

Status TokenArray::documentStarts(int64_t mb, int64_t step, int64_t b,
                                  int64_t s, int32_t *docStart) const {
  if (fmt != Format::Megatron)
    return DataSource::documentStarts(mb, step, b, s, docStart);
  if (!docStart)
    return Status::error("data: null document buffer");
  int32_t dummy = 0;
  if (Status st = detail::checkBatchArgs(mb, step, b, s, &dummy, &dummy); !st)
    return st;
  if (uint64_t(s) + 1 > count)
    return Status::error("'" + name + "': " + str(count) +
                         " tokens, a window of sequence length " + str(s) +
                         " needs " + str(uint64_t(s) + 1));
  const uint64_t windows = count - uint64_t(s);
  const uint64_t docs = index.documentIndexCount - 1; // >= 1 here
  for (int64_t row = 0; row < b; ++row) {
    const uint64_t off = windowStart(seed, step, mb, row, windows);
    // k: the last document starting at or before `off` (document 0 starts
    // at 0); then forward through the window.
    uint64_t lo = 0, hi = docs;
    while (hi - lo > 1) {
      uint64_t mid = lo + (hi - lo) / 2;
      if (index.documentStart(mid) <= off)
        lo = mid;
      else
        hi = mid;
    }
    uint64_t k = lo;
    for (int64_t i = 0; i < s; ++i) {
      const uint64_t at = off + uint64_t(i);
      while (k + 1 < docs && index.documentStart(k + 1) <= at)
        ++k;
      const uint64_t start = index.documentStart(k);
      docStart[row * s + i] = start > off ? int32_t(start - off) : 0;
    }
  }
  return Status::ok();
}

uint64_t TokenArray::fingerprint() const {
  const char tag[] = "pipeforge-tokenarray-v1";
  uint64_t h = fnv1a64(tag, sizeof(tag));
  h = fnv1a64(&contentHash, sizeof(contentHash), h);
  h = fnv1a64(&count, sizeof(count), h);
  return fnv1a64(&seed, sizeof(seed), h);
}

std::string TokenArray::describe() const {
  std::string what = fmt == Format::Megatron ? "megatron dataset '"
                     : fmt == Format::Npy    ? "npy file '"
                                             : "token file '";
  std::string docs =
      fmt == Format::Megatron
          ? ", " + str(index.documentIndexCount - 1) + " documents"
          : std::string();
  return what + name + "' (" + str(count) + " " + tokenDTypeName(type) +
         " tokens" + docs + ", vocab " + std::to_string(vocab) + ", seed " +
         str(seed) + ")";
}

//===----------------------------------------------------------------------===//
// openDataFile
//===----------------------------------------------------------------------===//

namespace {
bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool isFile(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}
/// Up to `n` leading bytes of a file ("" when unreadable).
std::string head(const std::string &p, size_t n) {
  std::string out(n, '\0');
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return "";
  ssize_t got = ::read(fd, out.data(), n);
  ::close(fd);
  out.resize(got > 0 ? size_t(got) : 0);
  return out;
}
} // namespace

Expected<std::unique_ptr<DataSource>> openDataFile(const std::string &path,
                                                   const DataFileOptions &o) {
  auto up = [](auto r) -> Expected<std::unique_ptr<DataSource>> {
    if (!r)
      return r.status();
    return std::unique_ptr<DataSource>(r.take());
  };
  if (!exists(path)) {
    // A Megatron prefix.
    bool idx = isFile(path + ".idx"), bin = isFile(path + ".bin");
    if (idx && bin)
      return up(TokenArray::openMegatron(path, o));
    if (idx || bin)
      return Status::error("megatron dataset '" + path + "': '" + path +
                           (idx ? ".idx" : ".bin") + "' exists but '" + path +
                           (idx ? ".bin" : ".idx") + "' does not");
    return Status::error("cannot open '" + path +
                         "' (no such file, nor a Megatron dataset '" + path +
                         ".bin' + '" + path + ".idx')");
  }
  if (!isFile(path)) {
    auto f = FileBytes::map(path); // its message: a directory, a device
    return Status::error(
        "data: " + (f ? "'" + path + "' is not a regular file" : f.message()));
  }
  std::string magic = head(path, 9);
  if (magic.compare(0, 5, "PFTOK") == 0) {
    auto tf = TokenFile::open(path, o.seed);
    if (!tf)
      return tf.status();
    if (o.seqLen > 0 && (*tf)->size() < uint64_t(o.seqLen) + 1)
      return Status::error(
          "token file '" + path + "': " + str((*tf)->size()) +
          " tokens, too short for one window of sequence length " +
          str(uint64_t(o.seqLen)) + " (" + str(uint64_t(o.seqLen) + 1) +
          " tokens)");
    return up(std::move(tf));
  }
  if (magic.size() >= 6 && std::memcmp(magic.data(), kNpyMagic, 6) == 0)
    return up(TokenArray::openNpy(path, o));
  if (magic.size() == 9 && std::memcmp(magic.data(), kMegatronMagic, 9) == 0) {
    if (!endsWith(path, ".idx"))
      return Status::error("megatron index '" + path +
                           "': the name must end in .idx (its tokens are "
                           "PREFIX.bin)");
    return up(TokenArray::openMegatron(path.substr(0, path.size() - 4), o));
  }
  if (endsWith(path, ".idx"))
    return up(TokenArray::openMegatron(path.substr(0, path.size() - 4), o));
  if (endsWith(path, ".bin")) {
    std::string prefix = path.substr(0, path.size() - 4);
    if (isFile(prefix + ".idx"))
      return up(TokenArray::openMegatron(prefix, o));
    return up(TokenArray::openRawU16(path, o));
  }
  return Status::error(
      "data '" + path +
      "': unknown format (pipeforge-run --data reads a PFTOK token file, a "
      "NumPy .npy, a Megatron-LM dataset PREFIX[.bin|.idx], or a raw uint16 "
      ".bin as nanoGPT writes)");
}

} // namespace pipeforge::rt
