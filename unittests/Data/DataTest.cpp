//===- DataTest.cpp - Synthetic language, token files, data position ------===//

#include "pipeforge/rt/Data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace pipeforge::rt;

namespace {

std::string tmpPath(const std::string &name) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/')
    dir += '/';
  return dir + "pf_data_" + name;
}

std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

struct Batch {
  std::vector<int32_t> tok, tgt;
};
Batch get(const DataSource &src, int64_t mb, int64_t step, int64_t b,
          int64_t s) {
  Batch r{std::vector<int32_t>(b * s), std::vector<int32_t>(b * s)};
  Status st = src.batch(mb, step, b, s, r.tok.data(), r.tgt.data());
  EXPECT_TRUE(st) << st.message();
  return r;
}

//===----------------------------------------------------------------------===//
// Synthetic language
//===----------------------------------------------------------------------===//

TEST(SyntheticLanguage, Deterministic) {
  SyntheticLanguage a, b;
  Batch x = get(a, 3, 7, 4, 64), y = get(b, 3, 7, 4, 64);
  EXPECT_EQ(x.tok, y.tok);
  EXPECT_EQ(x.tgt, y.tgt);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  // Another step, microbatch, or seed: other data.
  EXPECT_NE(get(a, 3, 8, 4, 64).tok, x.tok);
  EXPECT_NE(get(a, 4, 7, 4, 64).tok, x.tok);
  SyntheticLanguage c(42);
  EXPECT_NE(get(c, 3, 7, 4, 64).tok, x.tok);
  EXPECT_NE(c.fingerprint(), a.fingerprint());
}

TEST(SyntheticLanguage, RowsIndependentOfBatchSize) {
  // A row depends on (step, microbatch, row) only, so any split of the
  // same microbatch (and any rank layout) sees the same tokens.
  SyntheticLanguage lang;
  Batch big = get(lang, 5, 2, 6, 32), small = get(lang, 5, 2, 2, 32);
  EXPECT_TRUE(std::equal(small.tok.begin(), small.tok.end(), big.tok.begin()));
  // And a row's first s tokens do not depend on s.
  Batch longer = get(lang, 5, 2, 1, 48);
  EXPECT_TRUE(
      std::equal(big.tok.begin(), big.tok.begin() + 32, longer.tok.begin()));
}

TEST(SyntheticLanguage, TargetsAreNextTokens) {
  SyntheticLanguage lang;
  const int b = 3, s = 40;
  Batch x = get(lang, 0, 0, b, s);
  for (int r = 0; r < b; ++r)
    for (int i = 0; i + 1 < s; ++i)
      EXPECT_EQ(x.tgt[r * s + i], x.tok[r * s + i + 1]);
  for (int32_t t : x.tok) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 256);
  }
}

TEST(SyntheticLanguage, ReadableText) {
  SyntheticLanguage lang;
  std::string text = lang.sampleText(0, 400);
  for (char c : text)
    EXPECT_TRUE(c == '\n' || (c >= ' ' && c < 127)) << int(c);
  // Every kind of sentence shows up in a long enough sample.
  std::string more = lang.sampleText(1, 4000);
  EXPECT_NE(more.find("the "), std::string::npos);
  EXPECT_NE(more.find("copy "), std::string::npos);
  EXPECT_NE(more.find(" = "), std::string::npos);
  EXPECT_NE(more.find("4 5 6"), std::string::npos);
}

TEST(SyntheticLanguage, BadArguments) {
  SyntheticLanguage lang;
  int32_t t[4], g[4];
  EXPECT_FALSE(lang.batch(0, 0, 0, 4, t, g));
  EXPECT_FALSE(lang.batch(0, 0, 1, 0, t, g));
  EXPECT_FALSE(lang.batch(-1, 0, 1, 4, t, g));
  EXPECT_FALSE(lang.batch(0, 0, 1, 4, nullptr, g));
}

/// Cross-entropy in bits per token of an add-alpha smoothed n-gram model
/// (context `order` previous tokens) fit on one set of batches, measured
/// on another.
double ngramBits(const DataSource &src, int order) {
  const int b = 8, s = 128;
  std::map<std::vector<int32_t>, std::map<int32_t, double>> counts;
  auto ctxOf = [&](const Batch &x, int r, int i) {
    std::vector<int32_t> c;
    for (int k = order; k >= 1; --k)
      c.push_back(i - k + 1 >= 0 ? x.tok[r * s + i - k + 1] : -1);
    return c;
  };
  for (int step = 0; step < 60; ++step) {
    Batch x = get(src, 0, step, b, s);
    for (int r = 0; r < b; ++r)
      for (int i = 0; i < s; ++i)
        counts[ctxOf(x, r, i)][x.tgt[r * s + i]] += 1;
  }
  const double alpha = 0.01;
  double bits = 0;
  long n = 0;
  for (int step = 1000; step < 1010; ++step) {
    Batch x = get(src, 1, step, b, s);
    for (int r = 0; r < b; ++r)
      for (int i = 0; i < s; ++i) {
        auto &row = counts[ctxOf(x, r, i)];
        double total = 0;
        for (auto &kv : row)
          total += kv.second;
        double c = row.count(x.tgt[r * s + i]) ? row[x.tgt[r * s + i]] : 0;
        double p = (c + alpha) / (total + alpha * 256);
        bits -= std::log2(p);
        ++n;
      }
  }
  return bits / double(n);
}

TEST(SyntheticLanguage, LowEntropyStructure) {
  SyntheticLanguage lang;
  double uniform = 8.0;
  double bigram = ngramBits(lang, 1);
  double fourgram = ngramBits(lang, 3);
  // A bigram model already beats uniform by a wide margin, and longer
  // contexts keep helping: there is structure a small model can learn.
  EXPECT_LT(bigram, uniform - 4.0) << bigram;
  EXPECT_LT(fourgram, bigram - 0.5) << fourgram << " vs " << bigram;
}

//===----------------------------------------------------------------------===//
// Token files
//===----------------------------------------------------------------------===//

std::vector<uint32_t> someTokens(size_t n, uint32_t vocab) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = uint32_t((i * 2654435761u) % vocab);
  return t;
}

TEST(TokenFile, RoundTripWidth2And4) {
  for (uint32_t width : {2u, 4u}) {
    uint32_t vocab = width == 2 ? 50257 : 100000;
    auto toks = someTokens(1000, vocab);
    std::string path = tmpPath("rt" + std::to_string(width) + ".pftok");
    ASSERT_TRUE(writeTokenFile(path, toks, vocab, width));
    auto tf = TokenFile::open(path, 7);
    ASSERT_TRUE(tf) << tf.message();
    EXPECT_EQ((*tf)->size(), 1000u);
    EXPECT_EQ((*tf)->width(), width);
    EXPECT_EQ((*tf)->vocabSize(), int64_t(vocab));
    for (size_t i = 0; i < toks.size(); ++i)
      ASSERT_EQ((*tf)->token(i), toks[i]);
    EXPECT_EQ(readBytes(path).size(), 40 + 1000 * width);
    std::remove(path.c_str());
  }
  // Width 0 picks 2 bytes for small vocabs, 4 for large.
  auto img = encodeTokenFile({1, 2, 3}, 256);
  ASSERT_TRUE(img);
  EXPECT_EQ(img->size(), 40u + 6u);
  EXPECT_EQ(std::string(img->begin(), img->begin() + 5), "PFTOK");
  img = encodeTokenFile({1, 2, 3}, 70000);
  ASSERT_TRUE(img);
  EXPECT_EQ(img->size(), 40u + 12u);
}

TEST(TokenFile, WindowsAreContiguousAndDeterministic) {
  std::vector<uint32_t> toks(500);
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = uint32_t(i % 1000); // token == position: windows are visible
  std::vector<uint32_t> pos(toks);
  auto img = encodeTokenFile(pos, 1000);
  ASSERT_TRUE(img);
  auto tf = TokenFile::fromBytes(*img, "mem", 3);
  ASSERT_TRUE(tf) << tf.message();
  const int b = 4, s = 16;
  Batch x = get(**tf, 2, 9, b, s), y = get(**tf, 2, 9, b, s);
  EXPECT_EQ(x.tok, y.tok);
  for (int r = 0; r < b; ++r) {
    int32_t start = x.tok[r * s];
    EXPECT_LE(start + s, 499);
    for (int i = 0; i < s; ++i) {
      EXPECT_EQ(x.tok[r * s + i], start + i);
      EXPECT_EQ(x.tgt[r * s + i], start + i + 1);
    }
  }
  EXPECT_NE(get(**tf, 2, 10, b, s).tok, x.tok);
  // The last window is reachable: s = N - 1 has exactly one window.
  Batch all = get(**tf, 0, 0, 1, 499);
  EXPECT_EQ(all.tok[0], 0);
  EXPECT_EQ(all.tgt[498], 499);
  std::vector<int32_t> t(500), g(500);
  Status st = (*tf)->batch(0, 0, 1, 500, t.data(), g.data());
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("needs 501"), std::string::npos) << st.message();
  // Another seed, other windows, other fingerprint.
  auto tf2 = TokenFile::fromBytes(*img, "mem", 4);
  ASSERT_TRUE(tf2);
  EXPECT_NE(get(**tf2, 2, 9, b, s).tok, x.tok);
  EXPECT_NE((*tf2)->fingerprint(), (*tf)->fingerprint());
}

void expectCorrupt(std::vector<uint8_t> bytes, const std::string &needle) {
  auto tf = TokenFile::fromBytes(std::move(bytes), "bad.pftok");
  ASSERT_FALSE(tf);
  EXPECT_NE(tf.message().find(needle), std::string::npos) << tf.message();
  EXPECT_NE(tf.message().find("bad.pftok"), std::string::npos);
}

void resum(std::vector<uint8_t> &b) {
  uint64_t h = fnv1a64(b.data(), b.size() - 8);
  for (int i = 0; i < 8; ++i)
    b[b.size() - 8 + i] = uint8_t(h >> (8 * i));
}

TEST(TokenFile, CorruptFilesAreRejected) {
  auto good = *encodeTokenFile(someTokens(100, 256), 256, 2);
  ASSERT_TRUE(TokenFile::fromBytes(good, "ok"));

  expectCorrupt({}, "truncated");
  auto b = good;
  b[0] = 'X';
  expectCorrupt(b, "magic");
  b = good;
  b[8] = 2;
  resum(b);
  expectCorrupt(b, "version");
  b = good;
  b[12] = 3;
  resum(b);
  expectCorrupt(b, "width");
  b = good;
  b.resize(b.size() - 10);
  expectCorrupt(b, "size mismatch");
  b = good;
  b.push_back(0);
  expectCorrupt(b, "size mismatch");
  b = good;
  b[16] = 0xff; // absurd count
  b[23] = 0xff;
  expectCorrupt(b, "size mismatch");
  b = good;
  b[40] ^= 1; // a token bit flips
  expectCorrupt(b, "checksum");
  b = good;
  b[33] = 1; // token 256+ with a valid checksum
  resum(b);
  expectCorrupt(b, ">= vocab");
  b = good;
  b[24] = 0; // vocab 0
  b[25] = 0;
  resum(b);
  expectCorrupt(b, "vocab");

  auto missing = TokenFile::open(tmpPath("does-not-exist.pftok"));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("cannot open"), std::string::npos);

  EXPECT_FALSE(encodeTokenFile({300}, 256));
  EXPECT_FALSE(encodeTokenFile({1}, 100000, 2));
  EXPECT_FALSE(encodeTokenFile({1}, 256, 3));
}

TEST(TokenFile, TokenizeText) {
  std::string text = "hello, world\nthe cat sees the dog.\n\xff\x01";
  std::string in = tmpPath("in.txt"), out = tmpPath("out.pftok");
  {
    std::ofstream f(in, std::ios::binary);
    f << text;
  }
  uint64_t n = 0;
  ASSERT_TRUE(tokenizeTextFile(in, out, 2, &n));
  EXPECT_EQ(n, text.size());
  auto tf = TokenFile::open(out);
  ASSERT_TRUE(tf) << tf.message();
  EXPECT_EQ((*tf)->vocabSize(), 256);
  ASSERT_EQ((*tf)->size(), text.size());
  for (size_t i = 0; i < text.size(); ++i)
    EXPECT_EQ((*tf)->token(i), uint32_t(uint8_t(text[i])));
  EXPECT_FALSE(tokenizeTextFile(tmpPath("nope.txt"), out));
  std::remove(in.c_str());
  std::remove(out.c_str());
}

//===----------------------------------------------------------------------===//
// Data position
//===----------------------------------------------------------------------===//

TEST(DataPosition, RoundTripAndSourceCheck) {
  SyntheticLanguage lang;
  DataPosition p{1234, lang.fingerprint()};
  auto bytes = p.serialize();
  EXPECT_EQ(bytes.size(), 24u);
  auto q = DataPosition::parse(bytes);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->nextStep, 1234u);
  EXPECT_EQ(q->fingerprint, lang.fingerprint());
  EXPECT_TRUE(q->checkSource(lang));
  SyntheticLanguage other(99);
  Status st = q->checkSource(other);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("fingerprint"), std::string::npos);

  bytes.pop_back();
  EXPECT_FALSE(DataPosition::parse(bytes));
  bytes = p.serialize();
  bytes[4] = 9;
  EXPECT_FALSE(DataPosition::parse(bytes));
}

} // namespace
