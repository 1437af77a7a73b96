//===- TokenizerBPE.cpp - Hugging Face tokenizer.json, byte-level BPE -----===//
//
// The encode path of the `tokenizers` library for byte-level BPE files
// (GPT-2, Llama 3, DeepSeek-V3, Qwen2 shapes), step by step as it runs
// there:
//   1. added tokens: leftmost-longest matches of the tokens that are not
//      normalized; the text between goes through the normalizer (NFC or
//      none), then the normalized tokens are matched in it (single_word,
//      lstrip, rstrip as tokenizers applies them); each match is one id,
//      the text between goes on alone;
//   2. the pre-tokenizers in order (Split: pattern matches and the text
//      between; ByteLevel, last: an optional prefix space, the GPT-2
//      pattern when use_regex), each splitting the pieces of the one
//      before (TokenizerPattern.cpp runs the patterns);
//   3. the BPE model on each piece's bytes (a byte is the character
//      bytes_to_unicode maps it to): ignore_merges' whole-piece lookup, then
//      merges lowest rank first, leftmost first among equal ranks (a heap
//      of (rank, position), stale entries skipped as tokenizers' Word
//      does), pieces cached;
//   4. the post-processor's template (TemplateProcessing, Roberta, Bert).
// decode maps the ids back through the ByteLevel decoder.
//
//===----------------------------------------------------------------------===//

#include "TokenizerDetail.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>

namespace pipeforge::rt::tok {

Expected<std::unique_ptr<Tokenizer>>
loadHfTokenizer(std::string_view json, const std::string &name,
                std::string_view configJson);

namespace {

using nlohmann::json;

//===----------------------------------------------------------------------===//
// Byte-level alphabet (GPT-2's bytes_to_unicode)
//===----------------------------------------------------------------------===//

struct ByteLevelMap {
  char32_t byteToChar[256];
  std::unordered_map<char32_t, uint8_t> charToByte;
  ByteLevelMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                       (b >= 0xAE && b <= 0xFF);
      byteToChar[b] = printable ? char32_t(b) : char32_t(256 + n++);
      charToByte[byteToChar[b]] = uint8_t(b);
    }
  }
  /// The bytes a byte-level token string stands for; false when one of
  /// its characters is not in the alphabet.
  bool toBytes(const std::string &token, std::string &out) const {
    out.clear();
    const unsigned char *u =
        reinterpret_cast<const unsigned char *>(token.data());
    for (size_t i = 0; i < token.size();) {
      auto it = charToByte.find(decodeUtf8(u, i));
      if (it == charToByte.end())
        return false;
      out += char(it->second);
    }
    return true;
  }
};

const ByteLevelMap &byteLevel() {
  static const ByteLevelMap m;
  return m;
}

//===----------------------------------------------------------------------===//
// Hash tables
//===----------------------------------------------------------------------===//

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

uint64_t hashBytes(std::string_view s) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return mix64(h ^ tail) | 1; // never 0 (the empty slot)
}

/// (left id, right id) -> (rank, merged id); open addressing.
class MergeMap {
public:
  void
  build(const std::vector<std::pair<uint64_t, std::pair<uint32_t, uint32_t>>>
            &entries) {
    size_t cap = 16;
    while (cap < entries.size() * 2 + 16)
      cap <<= 1;
    keys.assign(cap, kEmpty);
    vals.assign(cap, {0, 0});
    mask = cap - 1;
    for (const auto &e : entries) {
      size_t i = mix64(e.first) & mask;
      while (keys[i] != kEmpty && keys[i] != e.first)
        i = (i + 1) & mask;
      keys[i] = e.first; // a pair listed twice: the later rank wins
      vals[i] = e.second;
    }
  }
  const std::pair<uint32_t, uint32_t> *find(uint32_t a, uint32_t b) const {
    uint64_t k = (uint64_t(a) << 32) | b;
    size_t i = mix64(k) & mask;
    for (;;) {
      if (keys[i] == k)
        return &vals[i];
      if (keys[i] == kEmpty)
        return nullptr;
      i = (i + 1) & mask;
    }
  }

private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  std::vector<uint64_t> keys;
  std::vector<std::pair<uint32_t, uint32_t>> vals;
  size_t mask = 0;
};

/// Piece bytes -> ids, for pieces under 256 bytes (tokenizers' cache
/// bound); cleared when full.
class PieceCache {
public:
  const uint32_t *find(std::string_view key, uint64_t h, uint32_t &n) const {
    if (table.empty())
      return nullptr;
    size_t i = h & (table.size() - 1);
    for (;;) {
      const Entry &e = table[i];
      if (e.hash == 0)
        return nullptr;
      if (e.hash == h && e.keyLen == key.size() &&
          std::memcmp(keys.data() + e.keyOff, key.data(), key.size()) == 0) {
        n = e.idsLen;
        return ids.data() + e.idsOff;
      }
      i = (i + 1) & (table.size() - 1);
    }
  }
  void insert(std::string_view key, uint64_t h, const uint32_t *v, size_t n) {
    if (count * 2 >= table.size()) {
      if (table.size() >= kMaxEntries) {
        table.assign(table.size(), Entry());
        keys.clear();
        ids.clear();
        count = 0;
      } else {
        rehash(table.empty() ? 4096 : table.size() * 2);
      }
    }
    size_t i = h & (table.size() - 1);
    while (table[i].hash != 0)
      i = (i + 1) & (table.size() - 1);
    table[i] = Entry{h, uint32_t(keys.size()), uint32_t(key.size()),
                     uint32_t(ids.size()), uint32_t(n)};
    keys.append(key.data(), key.size());
    ids.insert(ids.end(), v, v + n);
    ++count;
  }

private:
  static constexpr size_t kMaxEntries = size_t(1) << 20;
  struct Entry {
    uint64_t hash = 0;
    uint32_t keyOff = 0, keyLen = 0, idsOff = 0, idsLen = 0;
  };
  void rehash(size_t cap) {
    std::vector<Entry> old = std::move(table);
    table.assign(cap, Entry());
    for (const Entry &e : old) {
      if (e.hash == 0)
        continue;
      size_t i = e.hash & (cap - 1);
      while (table[i].hash != 0)
        i = (i + 1) & (cap - 1);
      table[i] = e;
    }
  }
  std::vector<Entry> table;
  std::string keys;
  std::vector<uint32_t> ids;
  size_t count = 0;
};

//===----------------------------------------------------------------------===//
// Added tokens
//===----------------------------------------------------------------------===//

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool singleWord = false, lstrip = false, rstrip = false;
  bool normalized = true, special = false;
};

/// A byte trie over a set of added tokens: leftmost-longest matching (the
/// Aho-Corasick MatchKind::LeftmostLongest tokenizers builds).
class AddedSet {
public:
  void add(const std::string &content, uint32_t token) {
    if (content.empty())
      return;
    if (nodes.empty())
      nodes.emplace_back();
    uint32_t n = 0;
    for (unsigned char c : content) {
      uint32_t child = childOf(n, c);
      if (child == 0) {
        child = uint32_t(nodes.size());
        nodes.emplace_back();
        nodes[n].edges.push_back({c, child});
      }
      n = child;
    }
    nodes[n].token = int32_t(token);
    first[(unsigned char)content[0]] = true;
  }
  bool empty() const { return nodes.empty(); }
  /// The longest token starting at text[i]: its index, length in `len`.
  int32_t longestAt(std::string_view text, size_t i, size_t &len) const {
    if (!first[(unsigned char)text[i]])
      return -1;
    int32_t best = -1;
    uint32_t n = 0;
    for (size_t j = i; j < text.size(); ++j) {
      n = childOf(n, (unsigned char)text[j]);
      if (n == 0)
        break;
      if (nodes[n].token >= 0) {
        best = nodes[n].token;
        len = j + 1 - i;
      }
    }
    return best;
  }

private:
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> edges;
    int32_t token = -1;
  };
  uint32_t childOf(uint32_t n, unsigned char c) const {
    for (const auto &e : nodes[n].edges)
      if (e.first == c)
        return e.second;
    return 0;
  }
  std::vector<Node> nodes;
  bool first[256] = {};
};

/// A segment of the text: an added token (token >= 0) or text to
/// pre-tokenize.
struct Segment {
  size_t begin, end;
  int32_t token;
};

/// The previous character of s before byte i (valid UTF-8), and its start.
char32_t prevChar(std::string_view s, size_t i, size_t &start) {
  size_t j = i - 1;
  while (j > 0 && (s[j] & 0xC0) == 0x80)
    --j;
  start = j;
  size_t k = j;
  return decodeUtf8(reinterpret_cast<const unsigned char *>(s.data()), k);
}

/// Rust regex's \w, as tokenizers' single_word tests it (Alphabetic,
/// marks, decimal digits, connector punctuation, joiners), from the
/// general categories: letters, marks, Nd, Nl, Pc, U+200C, U+200D.
bool isWordChar(char32_t c) {
  uint8_t cat = charInfo(c) & kCategoryMask;
  return cat == Lu || cat == Ll || cat == Lt || cat == Lm || cat == Lo ||
         cat == Mn || cat == Mc || cat == Me || cat == Nd || cat == Nl ||
         cat == Pc || c == 0x200C || c == 0x200D;
}
bool isSpaceChar(char32_t c) { return charInfo(c) & kWhiteSpace; }

//===----------------------------------------------------------------------===//
// The tokenizer
//===----------------------------------------------------------------------===//

struct PreStep {
  enum Kind { Split, ByteLevel } kind = Split;
  Pattern pattern;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool addPrefixSpace = false, useRegex = true;
};

constexpr uint32_t kNoId = UINT32_MAX;

class HfBpeTokenizer final : public Tokenizer {
public:
  Status load(std::string_view text, const std::string &file,
              std::string_view configText);

  Status encode(std::string_view text,
                std::vector<uint32_t> &out) const override;
  Expected<std::string> decode(const std::vector<uint32_t> &ids) const override;
  Expected<std::vector<std::string>>
  pieces(std::string_view text) const override;
  uint64_t vocabSize() const override { return vocab; }
  std::optional<uint32_t> tokenId(const std::string &token) const override {
    auto a = addedIds.find(token);
    if (a != addedIds.end())
      return a->second;
    auto v = vocabIds.find(token);
    if (v != vocabIds.end())
      return v->second;
    return std::nullopt;
  }
  std::optional<uint32_t> defaultEos() const override { return eos; }
  std::string describe() const override { return description; }

private:
  Status error(const std::string &msg) const {
    return Status::error("tokenizer '" + file + "': " + msg);
  }
  Status parseNormalizer(const json &j);
  Status parsePreTokenizer(const json &j);
  Status parseModel(const json &j);
  Status parseAddedTokens(const json &j);
  Status parsePostProcessor(const json &j);
  void findEos(std::string_view configText);

  template <typename F>
  void forEachSegment(std::string_view text, F &&segment) const;
  void findMatches(std::string_view text, size_t b0, size_t b1,
                   const AddedSet &set, std::vector<Segment> &out) const;
  template <typename Sink>
  void runSteps(size_t step, std::string_view piece, Sink &sink) const;
  void bpe(std::string_view piece, std::vector<uint32_t> &out) const;
  void mergeWord(std::string_view piece, std::vector<uint32_t> &out) const;

  std::string file, description;
  uint64_t vocab = 0;
  std::optional<uint32_t> eos;

  std::vector<AddedToken> added;
  std::unordered_map<std::string, uint32_t> addedIds;
  AddedSet plainSet, normalizedSet;
  bool nfc = false; // the NFC normalizer

  std::vector<PreStep> steps;
  Pattern gpt2;

  std::unordered_map<std::string, uint32_t> vocabIds;   // token text -> id
  std::unordered_map<std::string, uint32_t> vocabBytes; // ignore_merges
  uint32_t byteToId[256];
  std::vector<uint32_t> byteFallback[256]; // <0xXX> ids, when enabled
  MergeMap merges;
  size_t numMerges = 0;
  bool ignoreMerges = false, fuseUnk = false, useByteFallback = false;
  uint32_t unkId = kNoId;

  std::vector<uint32_t> prefixIds, suffixIds;
  bool byteLevelDecoder = false;
  std::string decoderType;
  std::vector<std::string> idBytes;
  std::vector<bool> idKnown;

  // Scratch (encode is not re-entrant: one thread per tokenizer).
  mutable std::vector<DecodedText> windows;
  mutable PieceCache cache;
  struct Symbol {
    uint32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  struct Merge {
    uint32_t rank, pos, newId;
  };
  mutable std::vector<Symbol> symbols;
  mutable std::vector<Merge> heap;
  mutable std::vector<Segment> segments, segments2;
  mutable std::string normalizedText;
};

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

const char *typeOf(const json &j) {
  if (!j.is_object())
    return nullptr;
  auto t = j.find("type");
  if (t == j.end() || !t->is_string())
    return nullptr;
  return t->get_ref<const std::string &>().c_str();
}

bool getBool(const json &j, const char *key, bool dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return dflt;
  return it->is_boolean() ? it->get<bool>() : dflt;
}

Status HfBpeTokenizer::parseNormalizer(const json &j) {
  if (j.is_null())
    return Status::ok();
  const char *t = typeOf(j);
  if (!t)
    return error("'normalizer' has no type");
  if (std::strcmp(t, "Sequence") == 0) {
    auto n = j.find("normalizers");
    if (n == j.end() || !n->is_array())
      return error("normalizer Sequence without 'normalizers'");
    for (const json &x : *n) {
      Status st = parseNormalizer(x);
      if (!st)
        return st;
    }
    return Status::ok();
  }
  if (std::strcmp(t, "NFC") == 0) {
    nfc = true;
    return Status::ok();
  }
  return error("normalizer '" + std::string(t) +
               "' is not supported (NFC is, or none)");
}

Status HfBpeTokenizer::parsePreTokenizer(const json &j) {
  if (j.is_null())
    return error("no pre_tokenizer: not a byte-level BPE tokenizer (only "
                 "ByteLevel pre-tokenized BPE is supported)");
  const char *t = typeOf(j);
  if (!t)
    return error("'pre_tokenizer' has no type");
  std::string type = t;
  if (type == "Sequence") {
    auto p = j.find("pretokenizers");
    if (p == j.end() || !p->is_array())
      return error("pre-tokenizer Sequence without 'pretokenizers'");
    for (const json &x : *p) {
      Status st = parsePreTokenizer(x);
      if (!st)
        return st;
    }
    return Status::ok();
  }
  if (!steps.empty() && steps.back().kind == PreStep::ByteLevel)
    return error("pre-tokenizer '" + type +
                 "' after ByteLevel is not supported (ByteLevel must come "
                 "last)");
  PreStep step;
  if (type == "ByteLevel") {
    step.kind = PreStep::ByteLevel;
    step.addPrefixSpace = getBool(j, "add_prefix_space", true);
    step.useRegex = getBool(j, "use_regex", true);
  } else if (type == "Split") {
    auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object())
      return error("Split pre-tokenizer without a pattern");
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      const std::string &src = (*pat)["Regex"].get_ref<const std::string &>();
      auto p = Pattern::compile(src);
      if (!p)
        return error("Split pre-tokenizer pattern \"" + src +
                     "\": " + p.message());
      step.pattern = p.take();
    } else if (pat->contains("String") && (*pat)["String"].is_string()) {
      step.pattern = Pattern::literal((*pat)["String"].get<std::string>());
    } else {
      return error(
          "Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    std::string behavior = j.value("behavior", std::string("Isolated"));
    if (behavior == "Isolated")
      step.behavior = SplitBehavior::Isolated;
    else if (behavior == "Removed")
      step.behavior = SplitBehavior::Removed;
    else
      return error("Split behavior '" + behavior +
                   "' is not supported (Isolated and Removed are)");
    step.invert = getBool(j, "invert", false);
  } else if (type == "Digits") {
    // Digits(individual_digits) is Split(\p{N} or \p{N}+, Isolated):
    // tokenizers tests char::is_numeric, the N categories.
    bool individual = getBool(j, "individual_digits", false);
    step.pattern = Pattern::compile(individual ? "\\p{N}" : "\\p{N}+").take();
  } else {
    return error("pre-tokenizer '" + type +
                 "' is not supported (ByteLevel, Split, Digits and Sequence "
                 "are)");
  }
  steps.push_back(std::move(step));
  return Status::ok();
}

Status HfBpeTokenizer::parseModel(const json &m) {
  if (!m.is_object())
    return error("'model' is missing");
  const char *t = typeOf(m);
  if (t && std::strcmp(t, "BPE") != 0)
    return error("model type '" + std::string(t) +
                 "' is not supported (BPE is; for a SentencePiece model pass "
                 "its tokenizer.model)");
  auto v = m.find("vocab");
  auto mg = m.find("merges");
  if (v == m.end() || !v->is_object())
    return error("model has no 'vocab' object");
  if (mg == m.end() || !mg->is_array())
    return error("model has no 'merges' list");
  if (m.contains("dropout") && m["dropout"].is_number() &&
      m["dropout"].get<double>() > 0)
    return error("BPE dropout makes encoding random; it is not supported");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    if (it != m.end() && !it->is_null() &&
        !(it->is_string() && it->get_ref<const std::string &>().empty()))
      return error(std::string("BPE '") + key +
                   "' is not supported in a byte-level tokenizer");
  }
  ignoreMerges = getBool(m, "ignore_merges", false);
  fuseUnk = getBool(m, "fuse_unk", false);
  useByteFallback = getBool(m, "byte_fallback", false);

  vocabIds.reserve(v->size());
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_number_unsigned() ||
        it.value().get<uint64_t>() >= (uint64_t(1) << 31))
      return error("vocab entry '" + it.key() +
                   "' must have an id in [0, 2^31)");
    uint32_t id = it.value().get<uint32_t>();
    vocabIds[it.key()] = id;
    vocab = std::max<uint64_t>(vocab, uint64_t(id) + 1);
  }
  auto unk = m.find("unk_token");
  if (unk != m.end() && unk->is_string()) {
    auto it = vocabIds.find(unk->get<std::string>());
    if (it == vocabIds.end())
      return error("unk_token '" + unk->get<std::string>() +
                   "' is not in the vocab");
    unkId = it->second;
  }
  const ByteLevelMap &bl = byteLevel();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    appendUtf8(s, bl.byteToChar[b]);
    auto it = vocabIds.find(s);
    byteToId[b] = it == vocabIds.end() ? kNoId : it->second;
    if (useByteFallback) {
      // tokenizers' byte_fallback spells out the missing character's
      // UTF-8 bytes as <0xXX> tokens.
      std::vector<uint32_t> ids;
      for (unsigned char c : s) {
        char code[8];
        std::snprintf(code, sizeof code, "<0x%02X>", c);
        auto f = vocabIds.find(code);
        if (f == vocabIds.end()) {
          ids.clear();
          break;
        }
        ids.push_back(f->second);
      }
      byteFallback[b] = ids;
    }
  }
  if (ignoreMerges) {
    std::string bytes;
    for (const auto &e : vocabIds)
      if (bl.toBytes(e.first, bytes))
        vocabBytes.emplace(bytes, e.second);
  }

  std::vector<std::pair<uint64_t, std::pair<uint32_t, uint32_t>>> entries;
  entries.reserve(mg->size());
  uint32_t rank = 0;
  for (const json &e : *mg) {
    std::string a, b;
    if (e.is_string()) {
      const std::string &s = e.get_ref<const std::string &>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return error("merge " + std::to_string(rank) + " \"" + s +
                     "\" is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() &&
               e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return error("merge " + std::to_string(rank) +
                   " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = vocabIds.find(a), ib = vocabIds.find(b),
         in = vocabIds.find(a + b);
    const std::string *missing = ia == vocabIds.end()   ? &a
                                 : ib == vocabIds.end() ? &b
                                                        : nullptr;
    std::string merged = a + b;
    if (!missing && in == vocabIds.end())
      missing = &merged;
    if (missing)
      return error("merge " + std::to_string(rank) + " (\"" + a + "\", \"" + b +
                   "\"): token \"" + *missing + "\" is not in the vocab");
    entries.push_back(
        {(uint64_t(ia->second) << 32) | ib->second, {rank, in->second}});
    ++rank;
  }
  numMerges = entries.size();
  merges.build(entries);
  return Status::ok();
}

Status HfBpeTokenizer::parseAddedTokens(const json &j) {
  if (j.is_null())
    return Status::ok();
  if (!j.is_array())
    return error("'added_tokens' must be a list");
  for (const json &t : j) {
    if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
        !t["id"].is_number_unsigned() || !t["content"].is_string())
      return error("an added token needs an 'id' and a 'content'");
    AddedToken a;
    a.content = t["content"].get<std::string>();
    uint64_t id = t["id"].get<uint64_t>();
    if (id >= (uint64_t(1) << 31))
      return error("added token '" + a.content + "' has an id >= 2^31");
    if (findInvalidUtf8(a.content) != std::string::npos)
      return error("added token with invalid UTF-8");
    a.id = uint32_t(id);
    a.special = getBool(t, "special", false);
    a.normalized = getBool(t, "normalized", !a.special);
    a.singleWord = getBool(t, "single_word", false);
    a.lstrip = getBool(t, "lstrip", false);
    a.rstrip = getBool(t, "rstrip", false);
    if (a.content.empty())
      continue;
    vocab = std::max<uint64_t>(vocab, id + 1);
    addedIds[a.content] = a.id;
    added.push_back(std::move(a));
  }
  // tokenizers matches the special tokens first, then the others, in
  // file order; a content listed twice keeps its last entry.
  for (size_t i = 0; i < added.size(); ++i) {
    std::string content = added[i].content, norm;
    if (added[i].normalized && nfc && toNfc(content, norm))
      content = norm;
    (added[i].normalized ? normalizedSet : plainSet).add(content, uint32_t(i));
  }
  return Status::ok();
}

Status HfBpeTokenizer::parsePostProcessor(const json &j) {
  if (j.is_null())
    return Status::ok();
  const char *t = typeOf(j);
  if (!t)
    return error("'post_processor' has no type");
  std::string type = t;
  if (type == "ByteLevel")
    return Status::ok(); // offsets only
  if (type == "Sequence") {
    auto p = j.find("processors");
    if (p == j.end() || !p->is_array())
      return error("post-processor Sequence without 'processors'");
    for (const json &x : *p) {
      Status st = parsePostProcessor(x);
      if (!st)
        return st;
    }
    return Status::ok();
  }
  auto pairId = [&](const char *key, uint32_t &id) -> bool {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->size() != 2 ||
        !(*it)[1].is_number_unsigned())
      return false;
    id = (*it)[1].get<uint32_t>();
    return true;
  };
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    uint32_t cls, sep;
    if (!pairId("cls", cls) || !pairId("sep", sep))
      return error(type + " without 'cls' and 'sep'");
    // Applied around what earlier processors produced.
    prefixIds.insert(prefixIds.begin(), cls);
    suffixIds.push_back(sep);
    return Status::ok();
  }
  if (type == "TemplateProcessing") {
    auto single = j.find("single");
    auto special = j.find("special_tokens");
    if (single == j.end() || !single->is_array())
      return error("TemplateProcessing without a 'single' template");
    std::vector<uint32_t> pre, post;
    bool seenSeq = false;
    for (const json &piece : *single) {
      if (piece.contains("Sequence")) {
        if (seenSeq)
          return error("TemplateProcessing 'single' with two sequences");
        seenSeq = true;
        continue;
      }
      if (!piece.contains("SpecialToken") ||
          !piece["SpecialToken"].contains("id"))
        return error("TemplateProcessing piece is neither a Sequence nor a "
                     "SpecialToken");
      std::string name = piece["SpecialToken"]["id"].get<std::string>();
      if (special == j.end() || !special->contains(name) ||
          !(*special)[name].contains("ids") ||
          !(*special)[name]["ids"].is_array())
        return error("TemplateProcessing special token '" + name +
                     "' has no ids");
      for (const json &id : (*special)[name]["ids"]) {
        if (!id.is_number_unsigned())
          return error("TemplateProcessing special token '" + name +
                       "' has a bad id");
        (seenSeq ? post : pre).push_back(id.get<uint32_t>());
      }
    }
    if (!seenSeq)
      return error("TemplateProcessing 'single' without $A");
    prefixIds.insert(prefixIds.begin(), pre.begin(), pre.end());
    suffixIds.insert(suffixIds.end(), post.begin(), post.end());
    return Status::ok();
  }
  return error("post-processor '" + type +
               "' is not supported (TemplateProcessing, ByteLevel, "
               "RobertaProcessing, BertProcessing and Sequence are)");
}

void HfBpeTokenizer::findEos(std::string_view configText) {
  // 1. tokenizer_config.json's eos_token.
  if (!configText.empty()) {
    json c = json::parse(configText.begin(), configText.end(), nullptr, false);
    if (c.is_object() && c.contains("eos_token")) {
      const json &e = c["eos_token"];
      std::string name;
      if (e.is_string())
        name = e.get<std::string>();
      else if (e.is_object() && e.contains("content") &&
               e["content"].is_string())
        name = e["content"].get<std::string>();
      if (auto id = tokenId(name)) {
        eos = *id;
        return;
      }
    }
  }
  // 2. A token the post-processor puts after the text.
  if (!suffixIds.empty()) {
    eos = suffixIds.back();
    return;
  }
  // 3. The end-of-text tokens of the known families.
  for (const char *name : {"<|endoftext|>", "<|end_of_text|>",
                           "<\xef\xbd\x9c"
                           "end\xe2\x96\x81"
                           "of\xe2\x96\x81"
                           "sentence\xef\xbd\x9c>",
                           "</s>", "<eos>"}) {
    if (auto id = tokenId(name)) {
      eos = *id;
      return;
    }
  }
}

Status HfBpeTokenizer::load(std::string_view text, const std::string &f,
                            std::string_view configText) {
  file = f;
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception &e) {
    return error(std::string("invalid JSON: ") + e.what());
  }
  if (!root.is_object())
    return error("not a tokenizer.json (the top level must be an object)");
  if (!root.contains("model"))
    return error("not a tokenizer.json (no 'model')");
  try {
    Status st = parseNormalizer(root.value("normalizer", json()));
    if (st)
      st = parseModel(root["model"]);
    if (st)
      st = parsePreTokenizer(root.value("pre_tokenizer", json()));
    if (st && (steps.empty() || steps.back().kind != PreStep::ByteLevel))
      st = error("no ByteLevel pre-tokenizer: only byte-level BPE is "
                 "supported");
    if (st)
      st = parseAddedTokens(root.value("added_tokens", json()));
    if (st)
      st = parsePostProcessor(root.value("post_processor", json()));
    if (!st)
      return st;
    const json dec = root.value("decoder", json());
    if (const char *t = typeOf(dec)) {
      decoderType = t;
      byteLevelDecoder = decoderType == "ByteLevel";
    } else {
      decoderType = "none";
    }
  } catch (const json::exception &e) {
    return error(std::string("unexpected JSON structure: ") + e.what());
  }
  auto g = Pattern::compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                            "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
  gpt2 = g.take();
  for (uint32_t id : prefixIds)
    vocab = std::max<uint64_t>(vocab, uint64_t(id) + 1);
  for (uint32_t id : suffixIds)
    vocab = std::max<uint64_t>(vocab, uint64_t(id) + 1);
  if (vocab == 0)
    return error("empty vocab");

  // Decoding: the bytes of every id.
  const ByteLevelMap &bl = byteLevel();
  idBytes.assign(vocab, std::string());
  idKnown.assign(vocab, false);
  std::string bytes;
  auto setId = [&](uint32_t id, const std::string &token) {
    idKnown[id] = true;
    idBytes[id] = bl.toBytes(token, bytes) ? bytes : token;
  };
  for (const auto &e : vocabIds)
    setId(e.second, e.first);
  // tokenizers (0.20 on) decodes a normalized added token from its
  // normalized form.
  for (const AddedToken &a : added) {
    std::string norm;
    setId(a.id,
          a.normalized && nfc && toNfc(a.content, norm) ? norm : a.content);
  }

  findEos(configText);
  windows.resize(steps.size() + 1);
  description = std::string(nfc ? "NFC, " : "") + "byte-level BPE, vocab " +
                std::to_string(vocab) + ", " + std::to_string(numMerges) +
                " merges, " + std::to_string(added.size()) + " added tokens";
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Encoding
//===----------------------------------------------------------------------===//

void HfBpeTokenizer::findMatches(std::string_view text, size_t b0, size_t b1,
                                 const AddedSet &set,
                                 std::vector<Segment> &out) const {
  std::string_view s = text.substr(0, b1);
  size_t startOffset = b0, i = b0;
  while (i < b1) {
    size_t len = 0;
    int32_t idx = set.longestAt(s, i, len);
    if (idx < 0) {
      ++i;
      continue;
    }
    const AddedToken &t = added[idx];
    size_t start = i, stop = i + len;
    i = stop; // matches never overlap, even a discarded one
    if (t.singleWord) {
      size_t ps;
      bool startOk = start == b0 || !isWordChar(prevChar(s, start, ps));
      size_t k = stop;
      bool stopOk = stop == b1 ||
                    !isWordChar(decodeUtf8(
                        reinterpret_cast<const unsigned char *>(s.data()), k));
      if (!startOk || !stopOk)
        continue;
    }
    if (t.lstrip) {
      size_t ns = start;
      while (ns > b0) {
        size_t ps;
        if (!isSpaceChar(prevChar(s, ns, ps)))
          break;
        ns = ps;
      }
      start = std::max(ns, startOffset);
    }
    if (t.rstrip) {
      while (stop < b1) {
        size_t k = stop;
        if (!isSpaceChar(decodeUtf8(
                reinterpret_cast<const unsigned char *>(s.data()), k)))
          break;
        stop = k;
      }
    }
    start = std::max(start, startOffset);
    if (startOffset < start)
      out.push_back({startOffset, start, -1});
    out.push_back({start, stop, int32_t(t.id)});
    startOffset = stop;
    i = std::max(i, stop);
  }
  if (startOffset < b1)
    out.push_back({startOffset, b1, -1});
}

template <typename F>
void HfBpeTokenizer::forEachSegment(std::string_view text, F &&segment) const {
  // 1. The tokens that are not normalized, on the text.
  segments2.clear();
  if (plainSet.empty())
    segments2.push_back({0, text.size(), -1});
  else
    findMatches(text, 0, text.size(), plainSet, segments2);
  for (const Segment &s : segments2) {
    if (s.token >= 0) {
      segment(text.substr(s.begin, s.end - s.begin), s.token);
      continue;
    }
    // 2. The normalizer on the text between, then the normalized tokens.
    std::string_view sv = text.substr(s.begin, s.end - s.begin);
    if (nfc && toNfc(sv, normalizedText))
      sv = normalizedText;
    if (normalizedSet.empty()) {
      segment(sv, -1);
      continue;
    }
    segments.clear();
    findMatches(sv, 0, sv.size(), normalizedSet, segments);
    for (const Segment &t : segments)
      segment(sv.substr(t.begin, t.end - t.begin), t.token);
  }
}

template <typename Sink>
void HfBpeTokenizer::runSteps(size_t k, std::string_view piece,
                              Sink &sink) const {
  if (piece.empty())
    return;
  const PreStep &st = steps[k];
  if (st.kind == PreStep::Split) {
    splitText(st.pattern, st.behavior, st.invert, piece, windows[k],
              [&](std::string_view p) { runSteps(k + 1, p, sink); });
    return;
  }
  // ByteLevel (the last step).
  if (st.addPrefixSpace && piece[0] != ' ') {
    std::string withSpace;
    withSpace.reserve(piece.size() + 1);
    withSpace += ' ';
    withSpace.append(piece.data(), piece.size());
    if (st.useRegex)
      splitText(gpt2, SplitBehavior::Isolated, false, withSpace, windows[k],
                sink);
    else
      sink(std::string_view(withSpace));
    return;
  }
  if (st.useRegex)
    splitText(gpt2, SplitBehavior::Isolated, false, piece, windows[k], sink);
  else
    sink(piece);
}

void HfBpeTokenizer::mergeWord(std::string_view piece,
                               std::vector<uint32_t> &out) const {
  // The word's symbols: one per byte (its byte-level character).
  symbols.clear();
  auto add = [&](uint32_t id, uint32_t len) {
    int32_t n = int32_t(symbols.size());
    if (n > 0)
      symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };
  bool unkPending = false;
  uint32_t unkLen = 0;
  for (unsigned char c : piece) {
    uint32_t id = byteToId[c];
    if (id != kNoId) {
      if (unkPending) {
        add(unkId, unkLen);
        unkPending = false;
      }
      add(id, 1);
      continue;
    }
    if (useByteFallback && !byteFallback[c].empty()) {
      for (uint32_t f : byteFallback[c])
        add(f, 1);
      continue;
    }
    if (unkId != kNoId) {
      if (unkPending && fuseUnk) {
        unkLen += 1;
      } else {
        if (unkPending)
          add(unkId, unkLen);
        unkPending = true;
        unkLen = 1;
      }
    }
  }
  if (unkPending)
    add(unkId, unkLen);

  // Merges, lowest rank first, then leftmost (tokenizers' Word::merge_all).
  heap.clear();
  auto cmp = [](const Merge &a, const Merge &b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    if (auto *m = merges.find(symbols[i].id, symbols[i + 1].id))
      heap.push_back({m->first, uint32_t(i), m->second});
  std::make_heap(heap.begin(), heap.end(), cmp);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    Merge top = heap.back();
    heap.pop_back();
    Symbol &cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1)
      continue;
    size_t nextPos = size_t(cur.next);
    Symbol right = symbols[nextPos];
    auto *m = merges.find(cur.id, right.id);
    if (!m || m->second != top.newId)
      continue; // stale
    cur.id = top.newId;
    cur.len += right.len;
    cur.next = right.next;
    symbols[nextPos].len = 0;
    if (right.next >= 0 && size_t(right.next) < symbols.size())
      symbols[right.next].prev = int32_t(top.pos);
    if (cur.prev >= 0) {
      const Symbol &prev = symbols[cur.prev];
      if (auto *pm = merges.find(prev.id, cur.id)) {
        heap.push_back({pm->first, uint32_t(cur.prev), pm->second});
        std::push_heap(heap.begin(), heap.end(), cmp);
      }
    }
    if (cur.next >= 0 && size_t(cur.next) < symbols.size()) {
      const Symbol &next = symbols[cur.next];
      if (auto *nm = merges.find(cur.id, next.id)) {
        heap.push_back({nm->first, top.pos, nm->second});
        std::push_heap(heap.begin(), heap.end(), cmp);
      }
    }
  }
  for (const Symbol &s : symbols)
    if (s.len != 0)
      out.push_back(s.id);
}

void HfBpeTokenizer::bpe(std::string_view piece,
                         std::vector<uint32_t> &out) const {
  if (piece.empty())
    return;
  if (piece.size() == 1 && byteToId[(unsigned char)piece[0]] != kNoId) {
    out.push_back(byteToId[(unsigned char)piece[0]]);
    return;
  }
  bool cacheable = piece.size() < 256;
  uint64_t h = 0;
  if (cacheable) {
    h = hashBytes(piece);
    uint32_t n;
    if (const uint32_t *hit = cache.find(piece, h, n)) {
      out.insert(out.end(), hit, hit + n);
      return;
    }
  }
  size_t start = out.size();
  bool done = false;
  if (ignoreMerges) {
    auto it = vocabBytes.find(std::string(piece));
    if (it != vocabBytes.end()) {
      out.push_back(it->second);
      done = true;
    }
  }
  if (!done)
    mergeWord(piece, out);
  if (cacheable)
    cache.insert(piece, h, out.data() + start, out.size() - start);
}

Status HfBpeTokenizer::encode(std::string_view text,
                              std::vector<uint32_t> &out) const {
  size_t bad = findInvalidUtf8(text);
  if (bad != std::string_view::npos)
    return Status::error("invalid UTF-8 at byte " + std::to_string(bad));
  out.insert(out.end(), prefixIds.begin(), prefixIds.end());
  auto sink = [&](std::string_view piece) { bpe(piece, out); };
  forEachSegment(text, [&](std::string_view seg, int32_t token) {
    if (token >= 0)
      out.push_back(uint32_t(token));
    else
      runSteps(0, seg, sink);
  });
  out.insert(out.end(), suffixIds.begin(), suffixIds.end());
  return Status::ok();
}

Expected<std::vector<std::string>>
HfBpeTokenizer::pieces(std::string_view text) const {
  size_t bad = findInvalidUtf8(text);
  if (bad != std::string_view::npos)
    return Status::error("invalid UTF-8 at byte " + std::to_string(bad));
  std::vector<std::string> out;
  auto sink = [&](std::string_view piece) { out.emplace_back(piece); };
  forEachSegment(text, [&](std::string_view seg, int32_t token) {
    if (token >= 0)
      out.emplace_back(seg);
    else
      runSteps(0, seg, sink);
  });
  return out;
}

Expected<std::string>
HfBpeTokenizer::decode(const std::vector<uint32_t> &ids) const {
  if (!byteLevelDecoder)
    return error("decoder '" + decoderType +
                 "' is not supported (ByteLevel is)");
  std::string out;
  for (uint32_t id : ids) {
    if (id >= vocab)
      return error("id " + std::to_string(id) + " is out of range (vocab " +
                   std::to_string(vocab) + ")");
    if (idKnown[id]) // tokenizers skips ids without a token
      out += idBytes[id];
  }
  return out;
}

} // namespace

Expected<std::unique_ptr<Tokenizer>>
loadHfTokenizer(std::string_view json, const std::string &name,
                std::string_view configJson) {
  auto t = std::make_unique<HfBpeTokenizer>();
  Status st = t->load(json, name, configJson);
  if (!st)
    return st;
  return std::unique_ptr<Tokenizer>(std::move(t));
}

} // namespace pipeforge::rt::tok
