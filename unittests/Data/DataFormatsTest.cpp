//===- DataFormatsTest.cpp - Megatron-LM, NumPy and raw token arrays ------===//
//
// The readers of runtime/lib/DataFormats.cpp: valid files in every format
// give the batches of a PFTOK file of the same tokens (one window rule),
// and every malformed input is an error naming the file and the fault.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Data.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace pipeforge::rt;

namespace {

std::string tmpPath(const std::string &name) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/')
    dir += '/';
  return dir + "pf_fmt_" + name;
}

void writeBytes(const std::string &path, const std::vector<uint8_t> &b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
}

template <typename T> void put(std::vector<uint8_t> &b, T v) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  b.insert(b.end(), raw, raw + sizeof(T));
}
template <typename T> void poke(std::vector<uint8_t> &b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

/// A Megatron-LM dataset as IndexedDatasetBuilder writes it: `docs` is a
/// list of documents, each a list of sequences.
struct Megatron {
  std::vector<uint8_t> idx, bin;
};
template <typename T>
Megatron megatron(const std::vector<std::vector<std::vector<T>>> &docs,
                  uint8_t code, bool modes = false) {
  Megatron m;
  std::vector<int32_t> lens;
  std::vector<int64_t> ptrs, docIdx = {0};
  for (const auto &d : docs) {
    for (const auto &seq : d) {
      ptrs.push_back(int64_t(m.bin.size()));
      lens.push_back(int32_t(seq.size()));
      for (T t : seq)
        put<T>(m.bin, t);
    }
    docIdx.push_back(int64_t(lens.size()));
  }
  const char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  m.idx.assign(magic, magic + 9);
  put<uint64_t>(m.idx, 1);
  m.idx.push_back(code);
  put<uint64_t>(m.idx, lens.size());
  put<uint64_t>(m.idx, docIdx.size());
  for (int32_t l : lens)
    put<int32_t>(m.idx, l);
  for (int64_t p : ptrs)
    put<int64_t>(m.idx, p);
  for (int64_t d : docIdx)
    put<int64_t>(m.idx, d);
  if (modes)
    m.idx.insert(m.idx.end(), lens.size(), 0);
  return m;
}

/// np.save of a 1-D array (version 1.0, header padded to 64 bytes).
template <typename T>
std::vector<uint8_t> npy(const std::vector<T> &v, const std::string &descr,
                         const std::string &shape = "") {
  std::string h =
      "{'descr': '" + descr + "', 'fortran_order': False, " + "'shape': " +
      (shape.empty() ? "(" + std::to_string(v.size()) + ",)" : shape) + ", }";
  while ((10 + h.size() + 1) % 64)
    h += ' ';
  h += '\n';
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  put<uint16_t>(b, uint16_t(h.size()));
  b.insert(b.end(), h.begin(), h.end());
  for (T t : v)
    put<T>(b, t);
  return b;
}

std::vector<uint8_t> rawU16(const std::vector<uint16_t> &v) {
  std::vector<uint8_t> b;
  for (uint16_t t : v)
    put<uint16_t>(b, t);
  return b;
}

/// Tokens whose value is not their position: windows are identifiable.
std::vector<uint16_t> tokens(size_t n, uint32_t vocab = 50257) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = uint16_t((i * 2654435761u + 17) % vocab);
  return t;
}

struct Batch {
  std::vector<int32_t> tok, tgt;
  bool operator==(const Batch &o) const { return tok == o.tok && tgt == o.tgt; }
};
Batch get(const DataSource &src, int64_t mb, int64_t step, int64_t b,
          int64_t s) {
  Batch r{std::vector<int32_t>(b * s), std::vector<int32_t>(b * s)};
  Status st = src.batch(mb, step, b, s, r.tok.data(), r.tgt.data());
  EXPECT_TRUE(st) << st.message();
  return r;
}

/// Splits `t` into documents of 1-3 sequences of varying lengths.
std::vector<std::vector<std::vector<uint16_t>>>
split(const std::vector<uint16_t> &t) {
  std::vector<std::vector<std::vector<uint16_t>>> docs;
  size_t i = 0, k = 0;
  while (i < t.size()) {
    docs.emplace_back();
    for (size_t s = 0; s < 1 + k % 3 && i < t.size(); ++s, ++k) {
      size_t len = std::min(t.size() - i, 5 + (k * 7) % 23);
      docs.back().emplace_back(t.begin() + long(i), t.begin() + long(i + len));
      i += len;
    }
  }
  return docs;
}

template <typename T>
void expectError(const Expected<T> &r, const std::string &name,
                 const std::string &needle) {
  ASSERT_FALSE(r) << "accepted; expected '" << needle << "'";
  EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
  EXPECT_NE(r.message().find(name), std::string::npos) << r.message();
}

//===----------------------------------------------------------------------===//
// Valid files: the batches of a PFTOK file of the same tokens
//===----------------------------------------------------------------------===//

TEST(TokenArray, EveryFormatGivesTheTokenFilesBatches) {
  auto toks = tokens(1000);
  std::vector<uint32_t> wide(toks.begin(), toks.end());
  auto tf = TokenFile::fromBytes(*encodeTokenFile(wide, 50257), "ref", 11);
  ASSERT_TRUE(tf) << tf.message();
  DataFileOptions o;
  o.seed = 11;
  o.vocab = 50257;

  std::vector<std::unique_ptr<DataSource>> all;
  auto keep = [&](auto r) {
    ASSERT_TRUE(r) << r.message();
    EXPECT_EQ((*r)->size(), 1000u);
    for (size_t i = 0; i < toks.size(); ++i)
      ASSERT_EQ((*r)->token(i), toks[i]);
    all.push_back(r.take());
  };
  auto m16 = megatron(split(toks), 8);
  keep(TokenArray::megatronFromBytes(m16.idx, m16.bin, "m16", o));
  std::vector<std::vector<std::vector<int32_t>>> docs32;
  for (const auto &d : split(toks)) {
    docs32.emplace_back();
    for (const auto &s : d)
      docs32.back().emplace_back(s.begin(), s.end());
  }
  auto m32 = megatron(docs32, 4, /*modes=*/true);
  keep(TokenArray::megatronFromBytes(m32.idx, m32.bin, "m32", o));
  keep(TokenArray::npyFromBytes(npy(toks, "<u2"), "a.npy", o));
  keep(TokenArray::npyFromBytes(
      npy(std::vector<int32_t>(toks.begin(), toks.end()), "<i4"), "b.npy", o));
  keep(TokenArray::npyFromBytes(
      npy(std::vector<uint32_t>(toks.begin(), toks.end()), "<u4"), "c.npy", o));
  keep(TokenArray::npyFromBytes(
      npy(std::vector<int64_t>(toks.begin(), toks.end()), "<i8"), "d.npy", o));
  keep(TokenArray::rawU16FromBytes(rawU16(toks), "e.bin", o));
  ASSERT_EQ(all.size(), 7u);
  for (const auto &src : all) {
    EXPECT_EQ(src->vocabSize(), 50257);
    for (int64_t step : {0, 1, 7})
      for (int64_t mb : {0, 3})
        EXPECT_TRUE(get(*src, mb, step, 4, 32) == get(**tf, mb, step, 4, 32))
            << src->describe();
    // Row r does not depend on b; the last window is reachable.
    Batch three = get(*src, 2, 5, 3, 32);
    EXPECT_EQ(get(*src, 2, 5, 1, 32).tok,
              std::vector<int32_t>(three.tok.begin(), three.tok.begin() + 32));
    Batch whole = get(*src, 0, 0, 1, 999);
    EXPECT_EQ(whole.tok[0], toks[0]);
    EXPECT_EQ(whole.tgt[998], toks[999]);
    std::vector<int32_t> t(1000), g(1000);
    Status st = src->batch(0, 0, 1, 1000, t.data(), g.data());
    ASSERT_FALSE(st);
    EXPECT_NE(st.message().find("needs 1001"), std::string::npos)
        << st.message();
    EXPECT_FALSE(src->batch(-1, 0, 1, 4, t.data(), g.data()));
    EXPECT_FALSE(src->batch(0, 0, 0, 4, t.data(), g.data()));
    EXPECT_FALSE(src->batch(0, 0, 1, 4, nullptr, g.data()));
  }
  // The Megatron index: documents and where they start.
  const MegatronIndex *ix = static_cast<TokenArray &>(*all[0]).megatronIndex();
  ASSERT_NE(ix, nullptr);
  auto docs = split(toks);
  EXPECT_EQ(ix->documentIndexCount, docs.size() + 1);
  uint64_t at = 0;
  for (size_t k = 0; k < docs.size(); ++k) {
    EXPECT_EQ(ix->documentStart(k), at);
    for (const auto &s : docs[k])
      at += s.size();
  }
  EXPECT_TRUE(static_cast<TokenArray &>(*all[1]).megatronIndex()->hasModes);
  EXPECT_EQ(static_cast<TokenArray &>(*all[2]).megatronIndex(), nullptr);
  EXPECT_NE(all[0]->describe().find("documents"), std::string::npos);
}

TEST(TokenArray, VocabularyWithoutALimitIsTheLargestTokenPlusOne) {
  auto r = TokenArray::npyFromBytes(npy(std::vector<uint8_t>{3, 9, 4}, "|u1"),
                                    "u1.npy");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ((*r)->vocabSize(), 10);
  EXPECT_EQ((*r)->dtype(), TokenDType::U8);
  // Fortran order is the same layout for 1-D; a 1-D shape may say 3L.
  auto b = npy(std::vector<uint16_t>{1, 2, 3}, "<u2", "(3L,)");
  std::string text(b.begin(), b.end());
  size_t f = text.find("False");
  std::memcpy(b.data() + f, "True ", 5);
  auto r2 = TokenArray::npyFromBytes(b, "f.npy");
  ASSERT_TRUE(r2) << r2.message();
  EXPECT_EQ((*r2)->size(), 3u);
}

TEST(TokenArray, FingerprintIdentifiesContentsAndSeed) {
  auto toks = tokens(200);
  DataFileOptions o;
  o.seed = 1;
  auto a = TokenArray::rawU16FromBytes(rawU16(toks), "a.bin", o);
  auto a2 = TokenArray::rawU16FromBytes(rawU16(toks), "a2.bin", o);
  toks[150] ^= 1;
  auto b = TokenArray::rawU16FromBytes(rawU16(toks), "b.bin", o);
  o.seed = 2;
  auto c = TokenArray::rawU16FromBytes(rawU16(tokens(200)), "c.bin", o);
  ASSERT_TRUE(a && a2 && b && c);
  EXPECT_EQ((*a)->fingerprint(), (*a2)->fingerprint());
  EXPECT_NE((*a)->fingerprint(), (*b)->fingerprint());
  EXPECT_NE((*a)->fingerprint(), (*c)->fingerprint());
  EXPECT_NE(get(**a, 0, 0, 4, 16).tok, get(**c, 0, 0, 4, 16).tok);
  // The same tokens with other document boundaries: another dataset.
  auto t = tokens(200);
  auto m1 = megatron<uint16_t>({{t}}, 8);
  auto m2 = megatron<uint16_t>(
      {{{t.begin(), t.begin() + 100}}, {{t.begin() + 100, t.end()}}}, 8);
  auto x = TokenArray::megatronFromBytes(m1.idx, m1.bin, "x");
  auto y = TokenArray::megatronFromBytes(m2.idx, m2.bin, "y");
  ASSERT_TRUE(x && y);
  EXPECT_NE((*x)->fingerprint(), (*y)->fingerprint());
}

//===----------------------------------------------------------------------===//
// Tokens against the vocabulary, and length
//===----------------------------------------------------------------------===//

TEST(TokenArray, TokensPastTheVocabularyNameFileAndOffset) {
  auto toks = tokens(100, 1000);
  toks[37] = 1000;
  DataFileOptions o;
  o.vocab = 1000;
  expectError(TokenArray::rawU16FromBytes(rawU16(toks), "v.bin", o), "v.bin",
              "token 1000 at index 37 (byte offset 74) >= the model's "
              "vocabulary 1000");
  auto n = npy(toks, "<u2");
  expectError(TokenArray::npyFromBytes(n, "v.npy", o), "v.npy",
              "token 1000 at index 37 (byte offset " +
                  std::to_string(n.size() - 200 + 74) + ")");
  auto m = megatron<uint16_t>(
      {{{toks.begin(), toks.begin() + 30}}, {{toks.begin() + 30, toks.end()}}},
      8);
  expectError(TokenArray::megatronFromBytes(m.idx, m.bin, "mv", o), "mv.bin",
              "token 1000 at index 37 (byte offset 74, sequence 1)");
  std::vector<int32_t> neg(toks.begin(), toks.end());
  neg[5] = -3;
  expectError(TokenArray::npyFromBytes(npy(neg, "<i4"), "n.npy", o), "n.npy",
              "token -3 at index 5 (byte offset ");
  expectError(TokenArray::npyFromBytes(npy(neg, "<i4"), "n.npy", o), "n.npy",
              "is negative");
  // int64 tokens past int32 are refused even without a vocabulary.
  std::vector<int64_t> huge = {1, int64_t(1) << 40};
  expectError(TokenArray::npyFromBytes(npy(huge, "<i8"), "h.npy"), "h.npy",
              "token 1099511627776 at index 1");
  std::vector<uint64_t> uhuge = {1, ~uint64_t(0)};
  expectError(TokenArray::npyFromBytes(npy(uhuge, "<u8"), "u.npy"), "u.npy",
              "at index 1");
}

TEST(TokenArray, TooShortForOneWindowIsRefusedAtOpen) {
  DataFileOptions o;
  o.seqLen = 32;
  expectError(TokenArray::rawU16FromBytes(rawU16(tokens(32)), "s.bin", o),
              "s.bin",
              "32 tokens, too short for one window of sequence "
              "length 32 (33 tokens)");
  ASSERT_TRUE(TokenArray::rawU16FromBytes(rawU16(tokens(33)), "s.bin", o));
  auto empty = megatron<uint16_t>({}, 8);
  expectError(TokenArray::megatronFromBytes(empty.idx, empty.bin, "e", o),
              "e.bin", "0 tokens, too short");
  // Without seqLen the empty dataset opens; batch() refuses.
  auto e = TokenArray::megatronFromBytes(empty.idx, empty.bin, "e");
  ASSERT_TRUE(e) << e.message();
  std::vector<int32_t> t(4), g(4);
  EXPECT_FALSE((*e)->batch(0, 0, 1, 4, t.data(), g.data()));
}

//===----------------------------------------------------------------------===//
// Malformed Megatron-LM datasets
//===----------------------------------------------------------------------===//

TEST(MegatronIndex, MalformedIndexesAreRejected) {
  auto toks = tokens(60);
  const Megatron good =
      megatron<uint16_t>({{{toks.begin(), toks.begin() + 20},
                           {toks.begin() + 20, toks.begin() + 35}},
                          {{toks.begin() + 35, toks.end()}}},
                         8);
  // S = 3 sequences, D = 3 document indices: lengths at 34, pointers at
  // 46, documents at 70, size 94.
  ASSERT_EQ(good.idx.size(), 94u);
  ASSERT_TRUE(TokenArray::megatronFromBytes(good.idx, good.bin, "ok"));
  auto check = [&](std::vector<uint8_t> idx, std::vector<uint8_t> bin,
                   const std::string &needle, const std::string &file = "") {
    SCOPED_TRACE(needle);
    expectError(TokenArray::megatronFromBytes(idx, bin, "ds"),
                file.empty() ? "ds.idx" : file, needle);
  };
  auto idx = good.idx;
  check({}, good.bin, "truncated: 0 bytes");
  check({good.idx.begin(), good.idx.begin() + 20}, good.bin,
        "truncated: 20 bytes, the header needs 34");
  idx[0] = 'X';
  check(idx, good.bin, "bad magic (not a Megatron-LM MMIDIDX index)");
  idx = good.idx;
  poke<uint64_t>(idx, 9, 2);
  check(idx, good.bin, "unsupported version 2");
  idx = good.idx;
  idx[17] = 7;
  check(idx, good.bin, "unsupported dtype code 7 (float32)");
  idx[17] = 6;
  check(idx, good.bin, "unsupported dtype code 6 (float64)");
  idx[17] = 0;
  check(idx, good.bin, "unsupported dtype code 0");
  idx = good.idx;
  poke<uint64_t>(idx, 18, ~uint64_t(0) / 2); // absurd sequence count
  check(idx, good.bin, "truncated: the header says");
  idx = good.idx;
  poke<uint64_t>(idx, 26, uint64_t(1) << 61); // absurd document count
  check(idx, good.bin, "truncated: the header says");
  check({good.idx.begin(), good.idx.end() - 1}, good.bin, "truncated");
  idx = good.idx;
  idx.push_back(0);
  check(idx, good.bin, "trailing data");
  idx = good.idx;
  idx.insert(idx.end(), 3, 0); // modes: accepted
  ASSERT_TRUE(TokenArray::megatronFromBytes(idx, good.bin, "ok"));
  // Lengths and pointers.
  idx = good.idx;
  poke<int32_t>(idx, 34 + 4, -1);
  check(idx, good.bin, "sequence 1 has a negative length -1");
  idx = good.idx;
  poke<int64_t>(idx, 46 + 16, 4000);
  check(idx, good.bin,
        "sequence 2 starts at byte 4000, past the end of 'ds.bin' (120 bytes");
  idx = good.idx;
  poke<int64_t>(idx, 46 + 8, 38);
  check(idx, good.bin,
        "sequence 1 starts at byte 38, inside sequence 0 (bytes 0..40): the "
        "pointers overlap");
  idx = good.idx;
  poke<int64_t>(idx, 46 + 8, 42);
  check(idx, good.bin,
        "sequence 1 starts at byte 42, 2 bytes after the end "
        "of sequence 0 (byte 40): a gap");
  idx = good.idx;
  poke<int64_t>(idx, 46, 2);
  check(idx, good.bin,
        "sequence 0 starts at byte 2, 2 bytes after the start "
        "of the .bin: a gap");
  idx = good.idx;
  poke<int32_t>(idx, 34 + 8, 26); // the last sequence 1 token longer
  check(idx, good.bin,
        "sequence 2 (26 tokens at byte 70) runs past the end "
        "of 'ds.bin' (120 bytes): truncated .bin");
  check(good.idx, {good.bin.begin(), good.bin.end() - 2},
        "runs past the end of 'ds.bin' (118 bytes): truncated .bin");
  auto bin = good.bin;
  bin.push_back(0);
  bin.push_back(0);
  check(good.idx, bin,
        "'ds.bin' has 122 bytes, the sequences end at byte "
        "120 (trailing data");
  // Documents.
  idx = good.idx;
  poke<int64_t>(idx, 70, 1);
  check(idx, good.bin, "document index 0 is 1, expected 0");
  idx = good.idx;
  poke<int64_t>(idx, 78, 4);
  check(idx, good.bin, "document index 1 is 4, past the sequence count 3");
  idx = good.idx;
  poke<int64_t>(idx, 78, 3);
  poke<int64_t>(idx, 86, 2);
  check(idx, good.bin, "document index 2 is 2, below the one before (3)");
  idx = good.idx;
  poke<int64_t>(idx, 86, 2);
  check(idx, good.bin, "the last document index is 2, the sequence count 3");
  // No document indices at all (D = 0, three fewer int64s).
  idx = {good.idx.begin(), good.idx.begin() + 70};
  poke<uint64_t>(idx, 26, 0);
  check(idx, good.bin, "no document indices");
  // Odd pointers of an int32 dataset do not meet the back-to-back layout.
  auto m32 = megatron<int32_t>({{{1, 2, 3}, {4, 5}}}, 4);
  poke<int64_t>(m32.idx, 34 + 8 + 8, 13);
  check(m32.idx, m32.bin, "sequence 1 starts at byte 13, 1 bytes after");
}

TEST(MegatronIndex, EveryTruncationAndByteFlipIsHandled) {
  auto toks = tokens(40);
  Megatron m = megatron<uint16_t>(
      {{{toks.begin(), toks.begin() + 10}}, {{toks.begin() + 10, toks.end()}}},
      8);
  for (size_t n = 0; n < m.idx.size(); ++n)
    EXPECT_FALSE(TokenArray::megatronFromBytes(
        {m.idx.begin(), m.idx.begin() + long(n)}, m.bin, "t"))
        << n;
  // Every bit of every index byte: an error or a valid dataset, never a
  // crash (the sanitizer build checks the reads).
  for (size_t i = 0; i < m.idx.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      auto idx = m.idx;
      idx[i] ^= uint8_t(1 << bit);
      auto r = TokenArray::megatronFromBytes(idx, m.bin, "t");
      if (r) {
        std::vector<int32_t> t(16), g(16);
        (void)(*r)->batch(0, 0, 2, 8, t.data(), g.data());
      }
    }
}

//===----------------------------------------------------------------------===//
// Malformed .npy and raw files
//===----------------------------------------------------------------------===//

TEST(TokenArray, MalformedNpyFilesAreRejected) {
  auto good = npy(tokens(50), "<u2");
  ASSERT_TRUE(TokenArray::npyFromBytes(good, "ok.npy"));
  auto check = [&](std::vector<uint8_t> b, const std::string &needle) {
    SCOPED_TRACE(needle);
    expectError(TokenArray::npyFromBytes(std::move(b), "x.npy"), "x.npy",
                needle);
  };
  check({}, "truncated: 0 bytes");
  auto b = good;
  b[1] = 'n';
  check(b, "bad magic (not a NumPy .npy file)");
  b = good;
  b[6] = 9;
  check(b, "unsupported .npy version 9.0");
  b = good;
  poke<uint16_t>(b, 8, 60000);
  check(b, "truncated: the header needs 60000 bytes");
  check({good.begin(), good.begin() + 40}, "truncated: the header needs");
  check(npy(std::vector<float>{1, 2}, "<f4"), "unsupported dtype '<f4'");
  check(npy(std::vector<uint16_t>{1, 2}, ">u2"),
        "unsupported dtype '>u2' (big-endian");
  check(npy(std::vector<uint16_t>{1, 2, 3, 4}, "<u2", "(2, 2)"),
        "shape (2, 2) is not 1-D");
  check(npy(std::vector<uint16_t>{1}, "<u2", "()"), "shape () is not 1-D");
  check(npy(std::vector<uint16_t>{1, 2}, "<u2", "(-2,)"), "is not 1-D");
  check(npy(std::vector<uint16_t>{1, 2}, "<u2", "(99999999999999999999,)"),
        "is not 1-D");
  check({good.begin(), good.end() - 1}, "truncated: shape (50,) of uint16");
  b = good;
  b.push_back(0);
  b.push_back(0);
  check(b, "trailing data: shape (50,) of uint16 needs 100 data bytes");
  check(npy(std::vector<uint16_t>{1, 2}, "<u2", "(7,)"),
        "truncated: shape (7,) of uint16 needs 14 data bytes after the "
        "128-byte header, the file has 4");
  check(npy(std::vector<uint16_t>{1, 2}, "<u2", "(9999999999999999999,)"),
        "truncated: shape (9999999999999999999,) of uint16 needs over 2^64");
  std::string h = "{'descr': '<u2', 'shape': (2,), }";
  std::vector<uint8_t> nofo = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  put<uint16_t>(nofo, uint16_t(h.size()));
  nofo.insert(nofo.end(), h.begin(), h.end());
  nofo.insert(nofo.end(), 4, 0);
  check(nofo, "not a dict with 'descr', 'fortran_order' and 'shape'");
  // Version 2.0: a 4-byte header length.
  std::vector<uint8_t> v2 = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0};
  std::string h2 = "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }";
  put<uint32_t>(v2, uint32_t(h2.size()));
  v2.insert(v2.end(), h2.begin(), h2.end());
  put<uint16_t>(v2, 7);
  put<uint16_t>(v2, 8);
  auto r = TokenArray::npyFromBytes(v2, "v2.npy");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ((*r)->token(1), 8);
  // Every truncation of a valid file is an error.
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(
        TokenArray::npyFromBytes({good.begin(), good.begin() + long(n)}, "t"))
        << n;
}

TEST(TokenArray, RawU16FilesOfOddSizeAreRejected) {
  auto b = rawU16(tokens(10));
  b.pop_back();
  expectError(TokenArray::rawU16FromBytes(b, "odd.bin"), "odd.bin",
              "19 bytes, an odd size");
}

//===----------------------------------------------------------------------===//
// Document boundaries (--doc-mask)
//===----------------------------------------------------------------------===//

TEST(Documents, EosTokenEndsADocument) {
  const int32_t eos = 9;
  std::vector<int32_t> tok = {1, 9, 2, 3, 9, 9, 4, 5, //
                              9, 1, 2, 3, 4, 5, 6, 9};
  std::vector<int32_t> d(tok.size());
  documentStartsFromEos(tok.data(), 2, 8, eos, d.data());
  EXPECT_EQ(d, (std::vector<int32_t>{0, 0, 2, 2, 2, 5, 6, 6, //
                                     0, 1, 1, 1, 1, 1, 1, 1}));
}

TEST(Documents, MegatronDocumentsWithinTheWindows) {
  // Token value == position in the stream (int32), so a row shows where
  // its window starts; documents of 1..3 sequences, one of them empty.
  std::vector<std::vector<std::vector<int32_t>>> docs;
  std::vector<uint64_t> starts;
  int32_t pos = 0;
  for (int d = 0; d < 40; ++d) {
    starts.push_back(uint64_t(pos));
    docs.emplace_back();
    if (d == 7)
      continue; // an empty document (end_document twice)
    for (int q = 0; q < 1 + d % 3; ++q) {
      docs.back().emplace_back();
      for (int t = 0; t < 2 + (d * 5 + q * 3) % 11; ++t)
        docs.back().back().push_back(pos++);
    }
  }
  Megatron m = megatron(docs, 4);
  DataFileOptions o;
  o.seed = 21;
  auto ds = TokenArray::megatronFromBytes(m.idx, m.bin, "docs", o);
  ASSERT_TRUE(ds) << ds.message();
  const int64_t b = 3, s = 24;
  for (int64_t step : {0, 1, 5})
    for (int64_t mb : {0, 2}) {
      Batch x = get(**ds, mb, step, b, s);
      std::vector<int32_t> d(b * s);
      ASSERT_TRUE((*ds)->documentStarts(mb, step, b, s, d.data()));
      for (int64_t r = 0; r < b; ++r) {
        const uint64_t off = uint64_t(x.tok[r * s]);
        for (int64_t i = 0; i < s; ++i) {
          const uint64_t at = off + uint64_t(i);
          uint64_t start = 0;
          for (uint64_t st : starts)
            if (st <= at)
              start = st;
          int32_t want = start > off ? int32_t(start - off) : 0;
          ASSERT_EQ(d[r * s + i], want) << "row " << r << " i " << i;
        }
      }
    }

  // Documents that each end with an EOS token: the index's boundaries are
  // the EOS rule's.
  const int32_t eos = 255;
  std::vector<std::vector<std::vector<uint16_t>>> edocs;
  auto toks = tokens(600, 255);
  size_t at = 0;
  for (int d = 0; at < toks.size(); ++d) {
    size_t len = std::min<size_t>(toks.size() - at, 3 + (d * 7) % 19);
    std::vector<uint16_t> seq(toks.begin() + long(at),
                              toks.begin() + long(at + len));
    seq.push_back(uint16_t(eos));
    edocs.push_back({seq});
    at += len;
  }
  Megatron e = megatron(edocs, 8);
  auto es = TokenArray::megatronFromBytes(e.idx, e.bin, "eos", o);
  ASSERT_TRUE(es) << es.message();
  for (int64_t step : {0, 3, 8}) {
    Batch x = get(**es, 1, step, 4, 32);
    std::vector<int32_t> fromIndex(4 * 32), fromEos(4 * 32);
    ASSERT_TRUE((*es)->documentStarts(1, step, 4, 32, fromIndex.data()));
    documentStartsFromEos(x.tok.data(), 4, 32, eos, fromEos.data());
    EXPECT_EQ(fromIndex, fromEos) << step;
  }

  // Arguments as batch(); the other formats have no documents.
  std::vector<int32_t> d(4);
  EXPECT_FALSE((*ds)->documentStarts(0, 0, 0, 4, d.data()));
  EXPECT_FALSE((*ds)->documentStarts(0, 0, 1, 4, nullptr));
  EXPECT_FALSE((*ds)->documentStarts(0, 0, 1, 100000, d.data()));
  auto raw = TokenArray::rawU16FromBytes(rawU16(tokens(100)), "r.bin");
  ASSERT_TRUE(raw);
  Status st = (*raw)->documentStarts(0, 0, 1, 4, d.data());
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("--eos"), std::string::npos) << st.message();
  EXPECT_FALSE(SyntheticLanguage().documentStarts(0, 0, 1, 4, d.data()));
}

//===----------------------------------------------------------------------===//
// Files on disk: openDataFile
//===----------------------------------------------------------------------===//

TEST(OpenDataFile, PicksTheFormatByContentsAndName) {
  auto toks = tokens(300);
  std::string dir = tmpPath("open");
  ::mkdir(dir.c_str(), 0755);
  Megatron m = megatron(split(toks), 8);
  writeBytes(dir + "/ds.idx", m.idx);
  writeBytes(dir + "/ds.bin", m.bin);
  writeBytes(dir + "/t.npy", npy(toks, "<u2"));
  writeBytes(dir + "/train.bin", rawU16(toks));
  writeBytes(dir + "/t.data", npy(toks, "<u2")); // a .npy by its magic
  std::vector<uint32_t> wide(toks.begin(), toks.end());
  ASSERT_TRUE(writeTokenFile(dir + "/t.pftok", wide, 50257));
  writeBytes(dir + "/only.idx", m.idx);
  writeBytes(dir + "/misnamed.index", m.idx);
  writeBytes(dir + "/t.txt", {'h', 'i'});
  writeBytes(dir + "/empty.bin", {});

  DataFileOptions o;
  o.seed = 5;
  o.vocab = 50257;
  o.seqLen = 16;
  auto ref = openDataFile(dir + "/t.pftok", o);
  ASSERT_TRUE(ref) << ref.message();
  for (std::string p :
       {"ds", "ds.bin", "ds.idx", "t.npy", "train.bin", "t.data"}) {
    auto r = openDataFile(dir + "/" + p, o);
    ASSERT_TRUE(r) << p << ": " << r.message();
    EXPECT_TRUE(get(**r, 1, 2, 3, 16) == get(**ref, 1, 2, 3, 16)) << p;
    auto *ta = dynamic_cast<TokenArray *>(r->get());
    ASSERT_NE(ta, nullptr);
    EXPECT_EQ(ta->format(), p.rfind("ds", 0) == 0 ? TokenArray::Format::Megatron
                            : p == "train.bin"    ? TokenArray::Format::RawU16
                                                  : TokenArray::Format::Npy)
        << p;
  }
  expectError(openDataFile(dir + "/only", o), "only.bin",
              "'" + dir + "/only.idx' exists but '" + dir +
                  "/only.bin' does not");
  expectError(openDataFile(dir + "/only.idx", o), "only.bin", "cannot open");
  expectError(openDataFile(dir + "/misnamed.index", o), "misnamed.index",
              "the name must end in .idx");
  expectError(openDataFile(dir + "/t.txt", o), "t.txt", "unknown format");
  expectError(openDataFile(dir + "/nothing", o), "nothing",
              "no such file, nor a Megatron dataset");
  expectError(openDataFile(dir, o), dir, "is a directory, not a file");
  // A FIFO is refused, without blocking on the open.
  ASSERT_EQ(::mkfifo((dir + "/fifo.bin").c_str(), 0600), 0);
  expectError(openDataFile(dir + "/fifo.bin", o), "fifo.bin",
              "is not a regular file");
  expectError(openDataFile(dir + "/empty.bin", o), "empty.bin",
              "0 tokens, too short for one window");
  // A PFTOK file too short for the window is refused at open too.
  o.seqLen = 300;
  expectError(openDataFile(dir + "/t.pftok", o), "t.pftok",
              "300 tokens, too short for one window of sequence length 300");
  auto f = FileBytes::map(dir + "/empty.bin");
  ASSERT_TRUE(f) << f.message();
  EXPECT_EQ((*f)->size(), 0u);
  for (std::string p :
       {"ds.idx", "ds.bin", "t.npy", "train.bin", "t.data", "t.pftok",
        "only.idx", "misnamed.index", "t.txt", "empty.bin", "fifo.bin"})
    std::remove((dir + "/" + p).c_str());
  ::rmdir(dir.c_str());
}

} // namespace
