//===- TokenizerTest.cpp - Pre-tokenizer scanner, byte-level BPE ----------===//
//
// The scanner on the patterns of the known families and on constructs it
// refuses; the BPE of small hand-made tokenizer.json files (merges by rank,
// both merge forms, ignore_merges, added tokens and their options, the
// post-processor, EOS, decode); documents to a token file. The comparison
// with the `tokenizers` package itself is test/Runtime/tokenize-vs-hf.test.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

using namespace pipeforge::rt;
using nlohmann::json;
using Pieces = std::vector<std::string>;

namespace {

const char *kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                    "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char *kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

Pieces split(const std::string &pattern, const std::string &text) {
  auto p = splitByPattern(pattern, text);
  EXPECT_TRUE(p) << p.message();
  return p ? *p : Pieces{};
}

std::string tmpPath(const std::string &name) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/')
    dir += '/';
  return dir + "pf_tok_" + name;
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

//===----------------------------------------------------------------------===//
// The scanner
//===----------------------------------------------------------------------===//

TEST(TokenizerPattern, Gpt2) {
  EXPECT_EQ(
      split(kGpt2, "Hello world's 123  end!!  \n"),
      (Pieces{"Hello", " world", "'s", " 123", " ", " end", "!!", "  \n"}));
  // \s+(?!\S) leaves the last space to the word; letters of any script.
  EXPECT_EQ(split(kGpt2, "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(split(kGpt2, "Καλή μέρα 你好"), (Pieces{"Καλή", " μέρα", " 你好"}));
  // Case-sensitive contractions here.
  EXPECT_EQ(split(kGpt2, "IT'S"), (Pieces{"IT", "'", "S"}));
  // Emoji are neither letters nor numbers; U+001C is not white space for
  // Oniguruma (Python's isspace says it is).
  EXPECT_EQ(split(kGpt2, "hi 😀👍🏽\x1c x"),
            (Pieces{"hi", " 😀👍🏽\x1c", " x"}));
}

TEST(TokenizerPattern, Llama3) {
  EXPECT_EQ(
      split(kLlama3, "I'M 1234567 abc\n\n  x"),
      (Pieces{"I", "'M", " ", "123", "456", "7", " abc", "\n\n", " ", " x"}));
  // (?i:'s) also matches the long s, as Oniguruma folds it.
  EXPECT_EQ(split(kLlama3, "it'\xc5\xbf"), (Pieces{"it", "'\xc5\xbf"}));
  EXPECT_EQ(split(kLlama3, "...hello\r\n"), (Pieces{"...", "hello", "\r\n"}));
  EXPECT_EQ(split(kLlama3, " !!\n\nx"), (Pieces{" !!\n\n", "x"}));
}

TEST(TokenizerPattern, DeepSeekV3) {
  // The CJK class, and the first alternative of the third pattern.
  EXPECT_EQ(split("[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f"
                  "\xe3\x82\xa0-\xe3\x83\xbf]+",
                  "ab中文cdカナ"),
            (Pieces{"ab", "中文", "cd", "カナ"}));
  EXPECT_EQ(split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|\\s+",
                  ".com {x}"),
            (Pieces{".com", " ", "{x", "}"}));
}

TEST(TokenizerPattern, LongRunsAcrossWindows) {
  // The scanner decodes 64 KiB at a time: runs crossing a window's end must
  // give the pieces of the whole text.
  std::string spaces(100000, ' ');
  EXPECT_EQ(split(kGpt2, "a" + spaces + "b"),
            (Pieces{"a", std::string(99999, ' '), " b"}));
  std::string letters(200000, 'x');
  EXPECT_EQ(split(kGpt2, " " + letters + "!"), (Pieces{" " + letters, "!"}));
  Pieces digits = split(kLlama3, std::string(70001, '7'));
  ASSERT_EQ(digits.size(), 23334u);
  EXPECT_EQ(digits.back(), "77");
}

TEST(TokenizerPattern, UnsupportedConstructsAreNamed) {
  struct Case {
    const char *pattern, *message;
  } cases[] = {
      {"(?<=a)b", "unsupported group"},
      {"(a)\\1", "unsupported group"},
      {"^a", "anchors"},
      {"a+?", "lazy"},
      {"[a[b]]", "nested"},
      {"\\p{Han}", "\\p{Han}"},
      {"\\bword", "unsupported escape \\b"},
      {"a*", "empty string"},
      {"(?!x)a", "must end its alternative"},
  };
  for (const Case &c : cases) {
    auto p = splitByPattern(c.pattern, "abc");
    ASSERT_FALSE(p) << c.pattern;
    EXPECT_NE(p.message().find(c.message), std::string::npos)
        << c.pattern << ": " << p.message();
  }
}

//===----------------------------------------------------------------------===//
// Hand-made tokenizer.json files
//===----------------------------------------------------------------------===//

/// GPT-2's bytes_to_unicode, as UTF-8 strings.
std::vector<std::string> byteChars() {
  std::vector<std::string> out(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                     (b >= 0xAE && b <= 0xFF);
    unsigned cp = printable ? unsigned(b) : unsigned(256 + n++);
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3f));
    }
    out[b] = s;
  }
  return out;
}

/// A byte-level BPE: ids 0..255 are the bytes, then `extra` tokens in
/// order; `merges` as [a, b] lists.
json makeTokenizer(
    const std::vector<std::string> &extra,
    const std::vector<std::pair<std::string, std::string>> &merges) {
  auto chars = byteChars();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b)
    vocab[chars[b]] = b;
  for (size_t i = 0; i < extra.size(); ++i)
    vocab[extra[i]] = 256 + i;
  json m = json::array();
  for (const auto &p : merges)
    m.push_back(json::array({p.first, p.second}));
  json j;
  j["version"] = "1.0";
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = json::array();
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", m},
                {"ignore_merges", false}};
  return j;
}

std::unique_ptr<Tokenizer> load(const json &j, const std::string &config = "") {
  auto t = tokenizerFromJson(j.dump(), "test.json", config);
  EXPECT_TRUE(t) << t.message();
  return t ? t.take() : nullptr;
}

std::vector<uint32_t> encode(const Tokenizer &t, const std::string &text) {
  std::vector<uint32_t> ids;
  Status st = t.encode(text, ids);
  EXPECT_TRUE(st) << st.message();
  return ids;
}

using Ids = std::vector<uint32_t>;

TEST(TokenizerBPE, MergesByRank) {
  // 256 "ab", 257 "bc", 258 "abc".
  auto t = load(makeTokenizer({"ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}}));
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "abc"), (Ids{256, 'c'}));
  // The lower rank wins wherever it is.
  auto u = load(makeTokenizer({"ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}}));
  ASSERT_TRUE(u);
  EXPECT_EQ(encode(*u, "abc"), (Ids{'a', 257}));
  // Equal ranks: leftmost first ("aaa" -> "aa" "a").
  auto v = load(makeTokenizer({"aa"}, {{"a", "a"}}));
  ASSERT_TRUE(v);
  EXPECT_EQ(encode(*v, "aaaaa"), (Ids{256, 256, 'a'}));
  // A merge of merges.
  auto w = load(makeTokenizer({"ab", "abc"}, {{"a", "b"}, {"ab", "c"}}));
  ASSERT_TRUE(w);
  EXPECT_EQ(encode(*w, "abcab"), (Ids{257, 256}));
  EXPECT_EQ(t->vocabSize(), 259u);
}

TEST(TokenizerBPE, MergesAsStringsAndBytes) {
  // The "a b" string form; a space is the byte-level character U+0120.
  json j = makeTokenizer({"\xc4\xa0w", "\xc4\xa0wo"}, {});
  j["model"]["merges"] = {"\xc4\xa0 w", "\xc4\xa0w o"};
  auto t = load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "a wo"), (Ids{'a', 257}));
  // Bytes beyond ASCII: "é" is two bytes, each its own token.
  EXPECT_EQ(encode(*t, "é"), (Ids{0xC3, 0xA9}));
  auto d = t->decode({'a', 257, 0xC3, 0xA9});
  ASSERT_TRUE(d) << d.message();
  EXPECT_EQ(*d, "a woé");
}

TEST(TokenizerBPE, IgnoreMerges) {
  // "xyz" is in the vocab but no merge builds it.
  json j = makeTokenizer({"xyz"}, {});
  auto t = load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "xyz"), (Ids{'x', 'y', 'z'}));
  j["model"]["ignore_merges"] = true;
  auto u = load(j);
  ASSERT_TRUE(u);
  // The whole piece "xyz" is one token; " xyz" is not in the vocab.
  EXPECT_EQ(encode(*u, "xyz xyz"), (Ids{256, ' ', 'x', 'y', 'z'}));
}

TEST(TokenizerBPE, AddedTokensBeforePreTokenization) {
  json j = makeTokenizer({}, {});
  j["added_tokens"] = {{{"id", 300},
                        {"content", "<|endoftext|>"},
                        {"special", true},
                        {"normalized", false}},
                       {{"id", 301},
                        {"content", "<mask>"},
                        {"special", true},
                        {"lstrip", true},
                        {"rstrip", true},
                        {"normalized", false}},
                       {{"id", 302},
                        {"content", "ony"},
                        {"single_word", true},
                        {"normalized", true}},
                       {{"id", 303},
                        {"content", "<|end"},
                        {"special", true},
                        {"normalized", false}}};
  auto t = load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->vocabSize(), 304u);
  // Leftmost-longest: <|endoftext|> over <|end.
  EXPECT_EQ(encode(*t, "a<|endoftext|>b<|end"), (Ids{'a', 300, 'b', 303}));
  // lstrip / rstrip take the spaces around <mask>.
  auto p = t->pieces("x  <mask>  y");
  ASSERT_TRUE(p) << p.message();
  EXPECT_EQ(*p, (Pieces{"x", "  <mask>  ", "y"}));
  // single_word: "ony" alone, not inside "phony".
  p = t->pieces("phony ony");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (Pieces{"phony", " ", "ony"}));
  // The text between added tokens is pre-tokenized on its own: the space
  // before <|endoftext|> is not merged with the word after it.
  p = t->pieces("a <|endoftext|> b");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (Pieces{"a", " ", "<|endoftext|>", " b"}));
  auto d = t->decode({'a', 300, 'b'});
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "a<|endoftext|>b");
}

TEST(TokenizerBPE, SplitSequenceAndPrefixSpace) {
  json j = makeTokenizer({}, {});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "\\p{N}{1,3}"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", true},
                           {"use_regex", false}}}}};
  auto t = load(j);
  ASSERT_TRUE(t);
  auto p = t->pieces("ab12345 c");
  ASSERT_TRUE(p) << p.message();
  // Each piece gets the prefix space (ByteLevel runs on each) unless it
  // starts with one.
  EXPECT_EQ(*p, (Pieces{" ab", " 123", " 45", " c"}));
}

TEST(TokenizerBPE, NfcNormalizer) {
  // Qwen2's normalizer: the text between added tokens goes through NFC
  // before the pre-tokenizer; normalized added tokens match their NFC form.
  json j = makeTokenizer({}, {});
  j["normalizer"] = {{"type", "NFC"}};
  j["added_tokens"] = {{{"id", 300},
                        {"content", "cafe\u0301!"},
                        {"special", false},
                        {"normalized", true}}};
  auto t = load(j);
  ASSERT_TRUE(t);
  struct Case {
    const char *in, *out;
  } cases[] = {
      {"e\u0301", "\u00e9"},               // composed
      {"A\u030a \u212b", "\u00c5 \u00c5"}, // the Angstrom sign too
      {"\u2126", "\u03a9"},                // a singleton
      {"\uf900", "\u8c48"},                // a CJK compatibility ideograph
      {"\u0958", "\u0915\u093c"},          // excluded from composition
      {"a\u0301\u0323", "\u1ea1\u0301"},   // reordered, then composed
      {"\u1100\u1161\u11a8", "\uac01"},    // Hangul jamo
      {"\uac00\u11a8", "\uac01"},
      {"o\u0308\u0304", "\u022b"}, // composed twice
      {"\u0301a", "\u0301a"},      // a leading mark stays
      {"x\u0301", "x\u0301"},      // nothing to compose with
  };
  for (const Case &c : cases) {
    auto p = t->pieces(c.in);
    ASSERT_TRUE(p) << p.message();
    std::string joined;
    for (const std::string &s : *p)
      joined += s;
    EXPECT_EQ(joined, c.out) << c.in;
  }
  EXPECT_EQ(encode(*t, "caf\u00e9!"), (Ids{300}));
  EXPECT_EQ(encode(*t, "cafe\u0301!"), (Ids{300}));
}

TEST(TokenizerBPE, TemplateAndEos) {
  json j = makeTokenizer({}, {});
  j["added_tokens"] = {
      {{"id", 300}, {"content", "<s>"}, {"special", true}},
      {{"id", 301}, {"content", "</s>"}, {"special", true}},
      {{"id", 302}, {"content", "<|eot|>"}, {"special", true}}};
  // No template, no config: a known end-of-text name.
  auto t = load(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->defaultEos(), std::optional<uint32_t>(301));
  // tokenizer_config.json's eos_token (a string or an object).
  auto c = load(j, R"({"eos_token": {"content": "<|eot|>"}})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->defaultEos(), std::optional<uint32_t>(302));
  // A template: BOS before, EOS after.
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}},
        {"</s>", {{"id", "</s>"}, {"ids", {301}}, {"tokens", {"</s>"}}}}}}};
  auto u = load(j);
  ASSERT_TRUE(u);
  EXPECT_EQ(encode(*u, "a"), (Ids{300, 'a', 301}));
  EXPECT_EQ(u->defaultEos(), std::optional<uint32_t>(301));
}

TEST(TokenizerBPE, ErrorsNameTheFile) {
  struct Case {
    std::string json, message;
  } cases[] = {
      {"{\"model\": ", "invalid JSON"},
      {"[1, 2]", "the top level must be an object"},
  };
  for (const Case &c : cases) {
    auto t = tokenizerFromJson(c.json, "bad.json");
    ASSERT_FALSE(t);
    EXPECT_NE(t.message().find("tokenizer 'bad.json'"), std::string::npos)
        << t.message();
    EXPECT_NE(t.message().find(c.message), std::string::npos) << t.message();
  }
  auto expectError = [](json j, const std::string &message) {
    auto t = tokenizerFromJson(j.dump(), "bad.json");
    ASSERT_FALSE(t) << message;
    EXPECT_NE(t.message().find("tokenizer 'bad.json'"), std::string::npos)
        << t.message();
    EXPECT_NE(t.message().find(message), std::string::npos) << t.message();
  };
  json j = makeTokenizer({}, {});
  json n = j;
  n["normalizer"] = {{"type", "NFKC"}};
  expectError(n, "normalizer 'NFKC' is not supported (NFC is, or none)");
  json w = j;
  w["pre_tokenizer"] = {{"type", "Whitespace"}};
  expectError(w, "pre-tokenizer 'Whitespace' is not supported");
  json s = j;
  s["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "(?<=x)y"}}},
                           {"behavior", "Isolated"}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  expectError(s, "pattern \"(?<=x)y\": unsupported pattern");
  json m = j;
  m["model"]["type"] = "WordPiece";
  expectError(m, "model type 'WordPiece' is not supported");
  json g = j;
  g["model"]["merges"] = json::array({json::array({"a", "q"})});
  expectError(g, "token \"aq\" is not in the vocab");
  json nb = j;
  nb["pre_tokenizer"] = nullptr;
  expectError(nb, "no pre_tokenizer");
}

TEST(TokenizerBPE, InvalidUtf8) {
  auto t = load(makeTokenizer({}, {}));
  ASSERT_TRUE(t);
  std::vector<uint32_t> ids;
  Status st = t->encode("ok\xff", ids);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("invalid UTF-8 at byte 2"), std::string::npos)
      << st.message();
  st = t->encode("\xed\xa0\x80", ids); // a surrogate
  EXPECT_FALSE(st);
}

//===----------------------------------------------------------------------===//
// Documents to a token file
//===----------------------------------------------------------------------===//

TEST(TokenizeDocuments, SeparatorEosAndWidth) {
  json j = makeTokenizer({}, {});
  j["added_tokens"] = {
      {{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}}};
  auto t = load(j);
  ASSERT_TRUE(t);
  std::string a = tmpPath("a.txt"), b = tmpPath("b.txt"),
              out = tmpPath("out.pftok");
  writeFile(a, "ab\n--\n\n--\nc<|endoftext|>\n--\n");
  writeFile(b, "d");
  TokenizeOptions opts;
  opts.docSeparator = "\n--\n";
  TokenizeStats stats;
  Status st = tokenizeDocuments(*t, {a, b}, out, opts, &stats);
  ASSERT_TRUE(st) << st.message();
  // "ab", "" (skipped), "c<|endoftext|>" (already ends with the EOS), "d".
  EXPECT_EQ(stats.documents, 3u);
  auto tf = TokenFile::open(out);
  ASSERT_TRUE(tf) << tf.message();
  std::vector<uint32_t> got;
  for (uint64_t i = 0; i < (*tf)->size(); ++i)
    got.push_back((*tf)->token(i));
  EXPECT_EQ(got, (Ids{'a', 'b', 300, 'c', 300, 'd', 300}));
  EXPECT_EQ((*tf)->vocabSize(), 301);
  EXPECT_EQ((*tf)->width(), 2u);

  // --eos none; one document per file.
  opts = TokenizeOptions();
  opts.eos = -1;
  ASSERT_TRUE(tokenizeDocuments(*t, {b}, out, opts));
  tf = TokenFile::open(out);
  ASSERT_TRUE(tf);
  EXPECT_EQ((*tf)->size(), 1u);

  // No EOS known: an error that says what to do.
  auto u = load(makeTokenizer({}, {}));
  ASSERT_TRUE(u);
  st = tokenizeDocuments(*u, {b}, out, TokenizeOptions());
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("--eos"), std::string::npos) << st.message();

  // Invalid UTF-8 names the file and the document.
  writeFile(a, "fine\n--\nbad\xc3(");
  opts = TokenizeOptions();
  opts.docSeparator = "\n--\n";
  st = tokenizeDocuments(*t, {a}, out, opts);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("a.txt', document 2 (at byte 8): invalid UTF-8 "
                              "at byte 3"),
            std::string::npos)
      << st.message();
}

TEST(TokenizeDocuments, LoadTokenizerFiles) {
  // A folder: its tokenizer.json and the tokenizer_config.json beside it.
  std::string dir = tmpPath("dir");
  std::string mk = "mkdir -p '" + dir + "'";
  ASSERT_EQ(std::system(mk.c_str()), 0);
  json j = makeTokenizer({}, {});
  j["added_tokens"] = {{{"id", 300}, {"content", "<|a|>"}, {"special", true}},
                       {{"id", 301}, {"content", "<|b|>"}, {"special", true}}};
  writeFile(dir + "/tokenizer.json", j.dump());
  writeFile(dir + "/tokenizer_config.json", R"({"eos_token": "<|b|>"})");
  auto t = loadTokenizer(dir);
  ASSERT_TRUE(t) << t.message();
  EXPECT_EQ((*t)->defaultEos(), std::optional<uint32_t>(301));

  // A folder whose tokenizer.json is not byte-level BPE and whose
  // tokenizer.model does not load: both reasons.
  std::string both = tmpPath("both");
  mk = "mkdir -p '" + both + "'";
  ASSERT_EQ(std::system(mk.c_str()), 0);
  json w = makeTokenizer({}, {});
  w["model"]["type"] = "WordPiece";
  writeFile(both + "/tokenizer.json", w.dump());
  writeFile(both + "/tokenizer.model", "\x01\x02");
  auto b = loadTokenizer(both);
  ASSERT_FALSE(b);
  EXPECT_NE(b.message().find("model type 'WordPiece' is not supported"),
            std::string::npos)
      << b.message();
  EXPECT_NE(b.message().find("; and tokenizer '" + both + "/tokenizer.model'"),
            std::string::npos)
      << b.message();

  auto missing = loadTokenizer(tmpPath("missing.json"));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("missing.json"), std::string::npos);

  // Not JSON: taken as a SentencePiece model.
  std::string garbage = tmpPath("garbage.model");
  writeFile(garbage, "\x01\x02not a model");
  auto g = loadTokenizer(garbage);
  ASSERT_FALSE(g);
  EXPECT_NE(g.message().find("garbage.model"), std::string::npos);
  if (sentencePieceAvailable())
    EXPECT_NE(g.message().find("not a SentencePiece model"), std::string::npos)
        << g.message();
  else
    EXPECT_NE(g.message().find("no SentencePiece support"), std::string::npos)
        << g.message();
}

} // namespace
