//===- TokenizerDetail.h - What the Tokenizer*.cpp files share --*- C++ -*-===//
//
// Private to runtime/lib: the Unicode tables, UTF-8 decoding, and the
// pre-tokenizer pattern scanner (TokenizerPattern.cpp); the tokenizer.json
// reader (TokenizerBPE.cpp) and the SentencePiece adapter
// (TokenizerSentencePiece.cpp) behind loadTokenizer (Tokenizer.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_LIB_TOKENIZERDETAIL_H
#define PIPEFORGE_RT_LIB_TOKENIZERDETAIL_H

#include "pipeforge/rt/Tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipeforge::rt::tok {

//===----------------------------------------------------------------------===//
// Unicode
//===----------------------------------------------------------------------===//

/// General category indices (the order of scripts/gen-unicode-tables.py).
enum Category : uint8_t {
  Cn,
  Lu,
  Ll,
  Lt,
  Lm,
  Lo,
  Mn,
  Mc,
  Me,
  Nd,
  Nl,
  No,
  Pc,
  Pd,
  Ps,
  Pe,
  Pi,
  Pf,
  Po,
  Sm,
  Sc,
  Sk,
  So,
  Zs,
  Zl,
  Zp,
  Cc,
  Cf,
  Cs,
  Co,
  kNumCategories
};
/// charInfo's flag: white space (Oniguruma's \s, Rust's is_whitespace).
constexpr uint8_t kWhiteSpace = 0x80;
constexpr uint8_t kCategoryMask = 0x1f;

/// The category of `cp` | kWhiteSpace; Cn beyond U+10FFFF.
uint8_t charInfo(char32_t cp);
/// The Unicode version of the tables.
const char *unicodeVersion();

/// The offset of the first invalid UTF-8 sequence of `s` (overlong forms,
/// surrogates and code points above U+10FFFF are invalid), or npos.
size_t findInvalidUtf8(std::string_view s);
/// Decodes the (valid) UTF-8 character at s[i]; advances i.
inline char32_t decodeUtf8(const unsigned char *s, size_t &i) {
  unsigned char c = s[i];
  if (c < 0x80) {
    ++i;
    return c;
  }
  if (c < 0xE0) {
    char32_t cp = (char32_t(c & 0x1f) << 6) | (s[i + 1] & 0x3f);
    i += 2;
    return cp;
  }
  if (c < 0xF0) {
    char32_t cp = (char32_t(c & 0x0f) << 12) |
                  (char32_t(s[i + 1] & 0x3f) << 6) | (s[i + 2] & 0x3f);
    i += 3;
    return cp;
  }
  char32_t cp = (char32_t(c & 0x07) << 18) | (char32_t(s[i + 1] & 0x3f) << 12) |
                (char32_t(s[i + 2] & 0x3f) << 6) | (s[i + 3] & 0x3f);
  i += 4;
  return cp;
}
void appendUtf8(std::string &out, char32_t cp);
/// The NFC form of valid UTF-8 `s` (Unicode's canonical decomposition,
/// ordering and composition) into `out`; false, `out` untouched, when `s`
/// is already in NFC.
bool toNfc(std::string_view s, std::string &out);

//===----------------------------------------------------------------------===//
// Decoded text: what the scanner reads
//===----------------------------------------------------------------------===//

/// Characters of a UTF-8 text with their info and byte offsets: char i is
/// cp[i], its bytes are [off[i], off[i+1]) of `bytes`.
struct CharView {
  const char *bytes = nullptr;
  const char32_t *cp = nullptr;
  const uint8_t *info = nullptr;
  const size_t *off = nullptr;
};

/// Owns a decoded text (or a window of one).
struct DecodedText {
  std::vector<char32_t> cp;
  std::vector<uint8_t> info;
  std::vector<size_t> off; // size() == cp.size() + 1
  /// Decodes s[begin, end) (valid UTF-8) after what is already held;
  /// offsets are relative to s.
  void append(std::string_view s, size_t begin, size_t end);
  /// Drops the first n characters.
  void dropFront(size_t n);
  void clear() {
    cp.clear();
    info.clear();
    off.clear();
  }
  size_t size() const { return cp.size(); }
  CharView view(const char *bytes) const {
    return CharView{bytes, cp.data(), info.data(), off.data()};
  }
};

//===----------------------------------------------------------------------===//
// The pre-tokenizer scanner
//===----------------------------------------------------------------------===//
//
// A pattern is an alternation of sequences of quantified atoms, tried in
// order at each position (leftmost-first, greedy with backtracking), the
// subset of Oniguruma's syntax the tokenizer.json files of the byte-level
// BPE families use:
//   atoms        a literal character, '.', a class [...] / [^...] of
//                characters, ranges, \p{X} / \P{X} (general categories),
//                \s \S \d \D \w \W and escapes (\r \n \t \f \v \uHHHH
//                \x{H...} \xHH \<punct>); a group (?i:lit|lit...) or
//                (?:lit|lit...) of literal alternatives (optional with ?)
//   quantifiers  ? * + {m} {m,} {m,n}, greedy
//   lookahead    (?!X) or (?=X) of one atom at the end of an alternative
// Anything else is an error that names the construct.

class Pattern {
public:
  static Expected<Pattern> compile(const std::string &source);
  /// A pattern matching `literal` (Split's "String" patterns).
  static Pattern literal(const std::string &literal);

  /// The end of the match at `pos` of chars [.., end), or `pos` when none
  /// starts there. `touchedEnd` is set when the answer looked at `end`
  /// (it could change if the text went on).
  size_t matchAt(const CharView &v, size_t pos, size_t end,
                 bool &touchedEnd) const;
  const std::string &source() const { return src; }

  struct Class;
  struct Item;
  struct Alt;

private:
  size_t matchItems(const Alt &alt, const CharView &v, size_t item, size_t pos,
                    size_t end, bool &touched) const;
  std::string src;
  std::vector<Class> classes;
  std::vector<Alt> alts;
};

struct Pattern::Class {
  uint64_t ascii[2] = {0, 0};        // final membership of U+0000..U+007F
  uint32_t catMask = 0;              // categories in the class
  std::vector<uint32_t> notCatMasks; // \P{X}: every category not in X
  bool ws = false, notWs = false;    // \s, \S
  bool negated = false;
  std::vector<std::pair<char32_t, char32_t>> ranges;
  void finish(); // fills `ascii`
  bool testSlow(char32_t cp, uint8_t info) const;
  bool test(char32_t cp, uint8_t info) const {
    if (cp < 128)
      return (ascii[cp >> 6] >> (cp & 63)) & 1;
    return testSlow(cp, info);
  }
};

struct Pattern::Item {
  enum Kind : uint8_t { ClassItem, GroupItem } kind = ClassItem;
  uint32_t cls = 0;                 // ClassItem: index into classes
  std::vector<std::u32string> lits; // GroupItem: literal alternatives
  bool caseInsensitive = false;     // GroupItem
  uint32_t min = 1, max = 1;        // quantifier (max UINT32_MAX: none)
};

struct Pattern::Alt {
  std::vector<Item> items;
  enum Look : uint8_t { None, Negative, Positive } look = None;
  uint32_t lookCls = 0;
  /// The ASCII characters a match can start with (a quick reject).
  uint64_t firstAscii[2] = {~uint64_t(0), ~uint64_t(0)};
};

/// How a Split pre-tokenizer keeps the matches (tokenizers'
/// SplitDelimiterBehavior; the families use Isolated).
enum class SplitBehavior { Isolated, Removed };

/// Splits `text` (valid UTF-8) with `p`, calling piece(string_view) for
/// every piece in order: the matches and the text between them (Removed
/// drops the matches, or with `invert` the text between). Decodes in
/// windows of 64 KiB (a document may be one large file) into `win`; a match
/// that reaches a window's end is retried on a longer one, so the pieces
/// are those of the whole text.
template <typename F>
void splitText(const Pattern &p, SplitBehavior behavior, bool invert,
               std::string_view text, DecodedText &win, F &&piece) {
  constexpr size_t kChunk = 64 * 1024;
  win.clear();
  size_t decodedTo = 0;
  auto refill = [&] {
    size_t e =
        decodedTo + kChunk < text.size() ? decodedTo + kChunk : text.size();
    while (e < text.size() && (text[e] & 0xC0) == 0x80)
      ++e;
    win.append(text, decodedTo, e);
    decodedTo = e;
  };
  refill();
  size_t gap = 0, pos = 0;
  auto emit = [&](size_t s, size_t e, bool isMatch) {
    if (s == e)
      return;
    if (behavior == SplitBehavior::Removed && isMatch != invert)
      return;
    piece(text.substr(s, e - s));
  };
  for (;;) {
    size_t n = win.size();
    bool final = decodedTo == text.size();
    if (pos == n) {
      if (final)
        break;
      win.dropFront(pos);
      pos = 0;
      refill();
      continue;
    }
    bool touched = false;
    size_t e = p.matchAt(win.view(text.data()), pos, n, touched);
    if (touched && !final) {
      win.dropFront(pos);
      pos = 0;
      refill();
      continue;
    }
    if (e > pos) {
      size_t ps = win.off[pos], pe = win.off[e];
      emit(gap, ps, false);
      emit(ps, pe, true);
      gap = pe;
      pos = e;
    } else {
      ++pos;
    }
  }
  emit(gap, text.size(), false);
}

} // namespace pipeforge::rt::tok

#endif // PIPEFORGE_RT_LIB_TOKENIZERDETAIL_H
