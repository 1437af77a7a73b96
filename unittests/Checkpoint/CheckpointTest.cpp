//===- CheckpointTest.cpp - Save, validate, resume bit for bit ------------===//

#include "pipeforge/rt/Checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace pipeforge::rt;
namespace fs = std::filesystem;

namespace {

std::string freshDir(const std::string &name) {
  fs::path p = fs::path(::testing::TempDir()) / ("pf_ckpt_" + name);
  fs::remove_all(p);
  return p.string();
}

/// A toy training run on one "rank": a table W[16x8] and a bias b[8] fit to
/// a function of the synthetic language's next tokens, with AdamW in
/// post-validation mode, clipping, an RNG that perturbs the gradients, a
/// foreign gradient contribution that forces rollbacks, and a NaN on
/// "another rank" at step 6.
struct ToyRun {
  static constexpr int kRows = 16, kCols = 8;
  uint32_t rank;
  std::vector<float> W, b, gW, gb;
  AdamW opt;
  std::mt19937 rng;
  SyntheticLanguage data;

  static AdamWConfig cfg() {
    AdamWConfig c;
    c.lr = 0.05;
    c.weightDecay = 0.01;
    c.maxGradNorm = 1.5;
    return c;
  }
  explicit ToyRun(uint32_t rank, unsigned initSeed)
      : rank(rank), W(kRows * kCols), b(kCols), gW(W.size()), gb(b.size()),
        opt(cfg()), rng(1234 + rank) {
    std::mt19937 init(initSeed);
    std::normal_distribution<float> nd(0.f, 0.5f);
    for (float &x : W)
      x = nd(init);
    for (float &x : b)
      x = nd(init);
    EXPECT_TRUE(opt.addParam("W", W.data(), gW.data(), W.size()));
    EXPECT_TRUE(opt.addParam("b", b.data(), gb.data(), b.size()));
  }
  std::vector<ParamRef> refs() {
    return {{"W", {kRows, kCols}, W.data()}, {"b", {kCols}, b.data()}};
  }

  void trainStep(int64_t step) {
    std::fill(gW.begin(), gW.end(), 0.f);
    std::fill(gb.begin(), gb.end(), 0.f);
    const int bs = 2, s = 16;
    std::vector<int32_t> tok(bs * s), tgt(bs * s);
    for (int64_t mb = 0; mb < 2; ++mb) {
      ASSERT_TRUE(
          data.batch(2 * rank + mb, step, bs, s, tok.data(), tgt.data()));
      for (int i = 0; i < bs * s; ++i) {
        int row = tok[i] % kRows;
        for (int j = 0; j < kCols; ++j) {
          float y = float((tgt[i] * (j + 1)) % 7) / 7.f;
          float d = W[row * kCols + j] + b[j] - y;
          gW[row * kCols + j] += 2 * d / (bs * s);
          gb[j] += 2 * d / (bs * s);
        }
      }
    }
    std::uniform_real_distribution<float> noise(-1e-3f, 1e-3f);
    for (float &g : gW)
      g += noise(rng);
    GradInfo local = opt.localGradInfo();
    ASSERT_TRUE(opt.optimisticStep(local));
    GradInfo other{(step % 3 == 0) ? 4.0 : 0.01, step != 6};
    ASSERT_TRUE(opt.validate(GradInfo::combine(local, other)));
    opt.setLearningRate(0.05 / (1.0 + 0.1 * double(step + 1)));
  }

  std::vector<uint8_t> rngBytes() const {
    std::ostringstream os;
    os << rng;
    std::string s = os.str();
    return std::vector<uint8_t>(s.begin(), s.end());
  }
  void setRng(const std::vector<uint8_t> &b) {
    std::istringstream is(std::string(b.begin(), b.end()));
    is >> rng;
  }
};

template <typename T>
bool sameBits(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(Checkpoint, ResumeIsBitwiseIdentical) {
  const int64_t k = 5, total = 12;
  const uint32_t ranks = 2;
  // The uninterrupted run.
  std::vector<std::unique_ptr<ToyRun>> ref;
  for (uint32_t r = 0; r < ranks; ++r) {
    ref.push_back(std::make_unique<ToyRun>(r, 10 + r));
    for (int64_t s = 0; s < total; ++s)
      ref[r]->trainStep(s);
  }
  // k steps, save, throw everything away.
  std::string dir = freshDir("resume");
  for (uint32_t r = 0; r < ranks; ++r) {
    ToyRun run(r, 10 + r);
    for (int64_t s = 0; s < k; ++s)
      run.trainStep(s);
    DataPosition pos{uint64_t(k), run.data.fingerprint()};
    auto c = captureCheckpoint(r, ranks, k, run.refs(), &run.opt, pos,
                               run.rngBytes(), 0xabcdef);
    ASSERT_TRUE(c) << c.message();
    ASSERT_TRUE(writeRankCheckpoint(dir, *c));
  }
  auto man = finalizeCheckpoint(dir, ranks);
  ASSERT_TRUE(man) << man.message();
  EXPECT_EQ(man->step, uint64_t(k));
  EXPECT_EQ(man->programFingerprint, 0xabcdefu);
  for (auto &e : fs::directory_iterator(dir))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();

  // Resume from other initial values and finish.
  for (uint32_t r = 0; r < ranks; ++r) {
    ToyRun run(r, 999);
    auto c = loadRankCheckpoint(dir, r);
    ASSERT_TRUE(c) << c.message();
    ASSERT_TRUE(restoreCheckpoint(*c, run.refs(), &run.opt));
    ASSERT_TRUE(c->data.checkSource(run.data));
    run.setRng(c->rngState);
    EXPECT_EQ(run.opt.stepCount(), k); // no skip before step 6
    for (int64_t s = int64_t(c->data.nextStep); s < total; ++s)
      run.trainStep(s);
    EXPECT_TRUE(sameBits(run.W, ref[r]->W)) << "rank " << r;
    EXPECT_TRUE(sameBits(run.b, ref[r]->b)) << "rank " << r;
    EXPECT_TRUE(sameBits(run.opt.moment1(0), ref[r]->opt.moment1(0)));
    EXPECT_TRUE(sameBits(run.opt.moment2(0), ref[r]->opt.moment2(0)));
    EXPECT_TRUE(sameBits(run.opt.moment2(1), ref[r]->opt.moment2(1)));
    EXPECT_EQ(run.opt.stepCount(), ref[r]->opt.stepCount());
  }
  fs::remove_all(dir);
}

RankCheckpoint sample(uint32_t rank = 0, uint32_t ranks = 1) {
  RankCheckpoint c;
  c.rank = rank;
  c.numRanks = ranks;
  c.step = 42;
  c.params.push_back({"w", {2, 3}, {1, 2, 3, 4, 5, 6}});
  c.params.push_back({"b", {3}, {-1, -0.0f, 1e-30f}});
  c.hasOptimizer = true;
  c.optimizer.step = 40;
  c.optimizer.lr = 1e-3;
  c.optimizer.names = {"w", "b"};
  c.optimizer.m = {std::vector<float>(6, 0.5f), std::vector<float>(3, 0.25f)};
  c.optimizer.v = {std::vector<float>(6, 0.1f), std::vector<float>(3, 0.2f)};
  c.data = {42, 7};
  c.rngState = {1, 2, 3};
  return c;
}

TEST(Checkpoint, EncodeDecodeRoundTrip) {
  RankCheckpoint c = sample();
  auto img = encodeRankCheckpoint(c);
  ASSERT_TRUE(img);
  auto d = decodeRankCheckpoint(*img, "mem");
  ASSERT_TRUE(d) << d.message();
  EXPECT_EQ(d->step, 42u);
  ASSERT_EQ(d->params.size(), 2u);
  EXPECT_EQ(d->params[1].name, "b");
  EXPECT_EQ(d->params[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(sameBits(d->params[1].data, c.params[1].data)); // -0, denormal
  EXPECT_EQ(d->optimizer.step, 40);
  EXPECT_EQ(d->optimizer.lr, 1e-3);
  EXPECT_TRUE(sameBits(d->optimizer.v[1], c.optimizer.v[1]));
  EXPECT_EQ(d->data.nextStep, 42u);
  EXPECT_EQ(d->data.fingerprint, 7u);
  EXPECT_EQ(d->rngState, c.rngState);

  RankCheckpoint noOpt = sample();
  noOpt.hasOptimizer = false;
  auto img2 = encodeRankCheckpoint(noOpt);
  ASSERT_TRUE(img2);
  auto d2 = decodeRankCheckpoint(*img2, "mem");
  ASSERT_TRUE(d2);
  EXPECT_FALSE(d2->hasOptimizer);
}

void expectDecodeError(const std::vector<uint8_t> &b, const std::string &what) {
  auto d = decodeRankCheckpoint(b, "x.pfckpt");
  ASSERT_FALSE(d);
  EXPECT_NE(d.message().find(what), std::string::npos) << d.message();
  EXPECT_NE(d.message().find("x.pfckpt"), std::string::npos);
}

void resum(std::vector<uint8_t> &b) {
  uint64_t h = fnv1a64(b.data(), b.size() - 8);
  for (int i = 0; i < 8; ++i)
    b[b.size() - 8 + i] = uint8_t(h >> (8 * i));
}

TEST(Checkpoint, CorruptFilesAreRejected) {
  auto good = *encodeRankCheckpoint(sample());
  auto b = good;
  b[1] = 'X';
  expectDecodeError(b, "magic");
  b = good;
  b[8] = 7;
  expectDecodeError(b, "version 7");
  b = good;
  b[60] ^= 0x10;
  expectDecodeError(b, "checksum");
  b = good;
  b.resize(b.size() / 2);
  expectDecodeError(b, "checksum");
  expectDecodeError({}, "truncated");
  // Structurally bad but correctly summed: a parameter count too large.
  b = good;
  b[40] = 9; // parameter count (offset 8+4+4+4+4+8+8 = 40)
  resum(b);
  expectDecodeError(b, "parameter");
  // A float array longer than the file.
  b = good;
  b[44 + 4 + 1 + 4 + 16] = 0xff; // w's element count (after name, rank, dims)
  resum(b);
  expectDecodeError(b, "truncated while reading parameter data");
  // Bytes left over.
  b = good;
  b.insert(b.end() - 8, 0);
  resum(b);
  expectDecodeError(b, "unexpected bytes");
  // Shape and data disagree on encode.
  RankCheckpoint c = sample();
  c.params[0].shape = {4, 3};
  EXPECT_FALSE(encodeRankCheckpoint(c));
  c = sample();
  c.rank = 3;
  EXPECT_FALSE(encodeRankCheckpoint(c));
}

TEST(Checkpoint, EveryCorruptByteIsHandled) {
  // Flip each byte (and re-sum, so the structure checks are reached): the
  // decoder returns an error or a checkpoint, never crashes or over-reads.
  auto good = *encodeRankCheckpoint(sample(0, 1));
  int errors = 0;
  for (size_t i = 0; i + 8 < good.size(); ++i) {
    for (uint8_t x : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      auto b = good;
      b[i] ^= x;
      resum(b);
      auto d = decodeRankCheckpoint(b, "fuzz");
      errors += !d;
    }
  }
  EXPECT_GT(errors, 50);
}

TEST(Checkpoint, ManifestGuardsTheDirectory) {
  std::string dir = freshDir("manifest");
  // No manifest yet: incomplete.
  ASSERT_TRUE(writeRankCheckpoint(dir, sample(0, 2)));
  auto l = loadRankCheckpoint(dir, 0);
  ASSERT_FALSE(l);
  EXPECT_NE(l.message().find("incomplete"), std::string::npos);
  // A rank missing.
  auto f = finalizeCheckpoint(dir, 2);
  ASSERT_FALSE(f);
  EXPECT_NE(f.message().find("rank-00001.pfckpt"), std::string::npos);
  // Rank 1 at another step.
  RankCheckpoint r1 = sample(1, 2);
  r1.step = 41;
  ASSERT_TRUE(writeRankCheckpoint(dir, r1));
  f = finalizeCheckpoint(dir, 2);
  ASSERT_FALSE(f);
  EXPECT_NE(f.message().find("step"), std::string::npos);
  ASSERT_TRUE(writeRankCheckpoint(dir, sample(1, 2)));
  f = finalizeCheckpoint(dir, 2);
  ASSERT_TRUE(f) << f.message();
  ASSERT_TRUE(loadRankCheckpoint(dir, 1));
  EXPECT_FALSE(loadRankCheckpoint(dir, 2));
  // A rank file replaced after the manifest: refused.
  RankCheckpoint other = sample(1, 2);
  other.params[0].data[0] = 99;
  ASSERT_TRUE(writeRankCheckpoint(dir, other));
  l = loadRankCheckpoint(dir, 1);
  ASSERT_FALSE(l);
  EXPECT_NE(l.message().find("manifest"), std::string::npos) << l.message();
  // A garbled manifest.
  {
    std::ofstream m(fs::path(dir) / "manifest.txt");
    m << "pipeforge-checkpoint 1\nstep x\n";
  }
  l = loadRankCheckpoint(dir, 0);
  ASSERT_FALSE(l);
  EXPECT_NE(l.message().find("manifest.txt:2"), std::string::npos)
      << l.message();
  fs::remove_all(dir);
}

TEST(Checkpoint, ManifestFromRecordsEqualsFinalize) {
  // Two folders (two "nodes"), each with one rank's file: the manifest
  // assembled from the ranks' records, written into both, is the one
  // finalizeCheckpoint writes from one folder that holds both files.
  std::string a = freshDir("node-a"), b = freshDir("node-b"),
              both = freshDir("shared");
  std::string r0, r1, unused;
  ASSERT_TRUE(writeRankCheckpoint(a, sample(0, 2), &r0));
  ASSERT_TRUE(writeRankCheckpoint(b, sample(1, 2), &r1));
  ASSERT_TRUE(writeRankCheckpoint(both, sample(0, 2)));
  ASSERT_TRUE(writeRankCheckpoint(both, sample(1, 2)));
  ASSERT_TRUE(finalizeCheckpoint(both, 2));
  auto m = assembleManifest({r1, r0}, 2); // any order
  ASSERT_TRUE(m) << m.message();
  ASSERT_TRUE(writeManifest(a, *m));
  ASSERT_TRUE(writeManifest(b, *m, ".1.tmp"));
  auto text = [](const std::string &d) {
    std::ifstream f(d + "/manifest.txt");
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(text(a), text(both));
  EXPECT_EQ(text(b), text(both));
  EXPECT_TRUE(loadRankCheckpoint(a, 0));
  EXPECT_TRUE(loadRankCheckpoint(b, 1));
  // Bad record sets.
  EXPECT_FALSE(assembleManifest({r0}, 2));
  EXPECT_FALSE(assembleManifest({r0, r0}, 2));
  RankCheckpoint late = sample(1, 2);
  late.step = 41;
  std::string rl;
  ASSERT_TRUE(writeRankCheckpoint(b, late, &rl));
  auto bad = assembleManifest({r0, rl}, 2);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("step 41"), std::string::npos) << bad.message();
  bad = assembleManifest({r0, "rank 1 rank-00001.pfckpt 12 zz"}, 2);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("malformed"), std::string::npos);
  for (const std::string &d : {a, b, both})
    fs::remove_all(d);
}

TEST(Checkpoint, NumbersAreValidated) {
  // A learning rate of inf or NaN, and step counts beyond kMaxSteps (2^40),
  // are refused on load (INT64_MAX overflowed AdamW's step counter).
  RankCheckpoint c = sample();
  c.optimizer.lr = std::numeric_limits<double>::infinity();
  expectDecodeError(*encodeRankCheckpoint(c), "learning rate inf");
  c = sample();
  c.optimizer.lr = std::nan("");
  expectDecodeError(*encodeRankCheckpoint(c), "learning rate");
  c = sample();
  c.optimizer.step = std::numeric_limits<int64_t>::max();
  expectDecodeError(*encodeRankCheckpoint(c),
                    "optimizer step 9223372036854775807 out of range");
  c = sample();
  c.step = uint64_t(1) << 41;
  c.data.nextStep = c.step;
  expectDecodeError(*encodeRankCheckpoint(c),
                    "step 2199023255552 out of range");
  // The optimizer refuses such state too, whoever hands it over.
  std::vector<float> w(6, 0), g(6, 0);
  AdamW opt;
  ASSERT_TRUE(opt.addParam("w", w.data(), g.data(), 6));
  AdamWState<float> st = *opt.exportState();
  st.step = std::numeric_limits<int64_t>::max();
  EXPECT_FALSE(opt.importState(st));
  st.step = 3;
  st.lr = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(opt.importState(st));
  st.lr = 1e-3;
  EXPECT_TRUE(opt.importState(st));
}

TEST(Checkpoint, ValuesAreFinite) {
  // A checkpoint whose checksum matches but holds NaN, an infinity or an
  // absurd magnitude is refused on load, naming the tensor, the rank and
  // the file (it used to resume and train on silently).
  const float inf = std::numeric_limits<float>::infinity();
  RankCheckpoint c = sample(1, 2);
  c.params[1].data[2] = std::nanf("");
  expectDecodeError(*encodeRankCheckpoint(c),
                    "checkpoint 'x.pfckpt': parameter 'b' of rank 1: element 2 is "
                    "nan; a checkpoint holds only finite, plausible values");
  c = sample();
  c.params[0].data[4] = -inf;
  expectDecodeError(*encodeRankCheckpoint(c),
                    "parameter 'w' of rank 0: element 4 is -inf");
  c = sample();
  c.params[0].data[0] = 3e19f; // its square overflows float
  expectDecodeError(*encodeRankCheckpoint(c),
                    "parameter 'w' of rank 0: element 0 is 3e+19 (its square "
                    "overflows float)");
  c = sample();
  c.optimizer.m[1][0] = inf;
  expectDecodeError(*encodeRankCheckpoint(c),
                    "AdamW first moment of 'b' of rank 0: element 0 is inf");
  c = sample();
  c.optimizer.v[0][5] = -1;
  expectDecodeError(*encodeRankCheckpoint(c),
                    "AdamW second moment of 'w' of rank 0: element 5 is -1 (a "
                    "mean of squares is never negative)");
  // The largest plausible values still load.
  c = sample();
  c.params[0].data[0] = 1e19f;
  c.optimizer.m[0][0] = -3e38f;
  c.optimizer.v[0][0] = 3e38f;
  auto d = decodeRankCheckpoint(*encodeRankCheckpoint(c), "mem");
  EXPECT_TRUE(d) << d.message();
}

TEST(Checkpoint, ManifestIsStrict) {
  std::string dir = freshDir("strict");
  ASSERT_TRUE(writeRankCheckpoint(dir, sample(0, 2)));
  ASSERT_TRUE(writeRankCheckpoint(dir, sample(1, 2)));
  ASSERT_TRUE(finalizeCheckpoint(dir, 2));
  fs::path mp = fs::path(dir) / "manifest.txt";
  std::string good;
  {
    std::ifstream in(mp);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_TRUE(readManifest(dir));
  auto expectBad = [&](const std::string &text, const std::string &what) {
    {
      std::ofstream m(mp, std::ios::trunc);
      m << text;
    }
    auto r = readManifest(dir);
    ASSERT_FALSE(r) << text;
    EXPECT_NE(r.message().find(what), std::string::npos) << r.message();
  };
  size_t lastRank = good.rfind("rank 1 ");
  std::string rank1 = good.substr(lastRank);
  expectBad(good + rank1, "manifest.txt:7: unexpected line"); // duplicate
  expectBad(good + "garbage\n", "manifest.txt:7: unexpected line");
  std::string g2 = good;
  g2.replace(g2.find("step 42"), 7, "step 42x");
  expectBad(g2, "manifest.txt:2");
  g2 = good;
  g2.replace(g2.find("ranks 2"), 7, "ranks 99999999");
  expectBad(g2, "manifest.txt:3");
  g2 = good;
  g2.replace(g2.find("program 0x"), 10, "program 0xzz");
  expectBad(g2, "manifest.txt:4");
  g2 = good;
  g2.replace(g2.find("rank 0 "), 7, "rank  0 ");
  expectBad(g2, "manifest.txt:5");
  fs::remove_all(dir);
}

TEST(Checkpoint, StaleTemporariesAreRemoved) {
  std::string root = freshDir("stale");
  std::string done = root + "/step-00000002", cut = root + "/step-00000003";
  ASSERT_TRUE(writeRankCheckpoint(done, sample(0, 1)));
  ASSERT_TRUE(finalizeCheckpoint(done, 1));
  ASSERT_TRUE(writeRankCheckpoint(cut, sample(0, 1))); // no manifest
  std::ofstream(done + "/rank-00000.pfckpt.tmp") << "partial";
  fs::create_directories(root + "/other");
  ASSERT_TRUE(removeStaleCheckpoints(root));
  EXPECT_FALSE(fs::exists(cut));
  EXPECT_FALSE(fs::exists(done + "/rank-00000.pfckpt.tmp"));
  EXPECT_TRUE(fs::exists(done + "/manifest.txt"));
  EXPECT_TRUE(fs::exists(root + "/other"));
  EXPECT_TRUE(removeStaleCheckpoints(root + "/missing"));
  fs::remove_all(root);
}

TEST(Checkpoint, WritesNeverReplaceNonRegularFiles) {
  // A symbolic link (to a full device, or to a file) is written through,
  // never renamed over; a full device is an error.
  std::string dir = freshDir("links");
  fs::create_directories(dir);
  fs::create_symlink("/dev/full", dir + "/full");
  Status st = writeFileAtomically(dir + "/full", {1, 2, 3});
  EXPECT_FALSE(st);
  EXPECT_TRUE(fs::is_symlink(dir + "/full"));
  std::ofstream(dir + "/target") << "old";
  fs::create_symlink(dir + "/target", dir + "/link");
  ASSERT_TRUE(writeFileAtomically(dir + "/link", {'n', 'e', 'w'}));
  EXPECT_TRUE(fs::is_symlink(dir + "/link"));
  EXPECT_EQ(fs::file_size(dir + "/target"), 3u);
  EXPECT_FALSE(writeFileAtomically(dir, {1}));
  fs::remove_all(dir);
}

TEST(Checkpoint, RestoreChecksNamesAndShapes) {
  RankCheckpoint c = sample();
  std::vector<float> w(6, 0), bb(3, 0);
  std::vector<float> gw(6), gb(3);
  AdamW opt;
  ASSERT_TRUE(opt.addParam("w", w.data(), gw.data(), 6));
  ASSERT_TRUE(opt.addParam("b", bb.data(), gb.data(), 3));

  // Shape mismatch: nothing changes.
  Status st = restoreCheckpoint(
      c, {{"w", {3, 2}, w.data()}, {"b", {3}, bb.data()}}, &opt);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("[2x3]"), std::string::npos) << st.message();
  EXPECT_EQ(w[0], 0.f);
  // Unknown name.
  st = restoreCheckpoint(c, {{"w", {2, 3}, w.data()}, {"q", {3}, bb.data()}},
                         &opt);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("'q'"), std::string::npos);
  // A saved parameter left unclaimed.
  st = restoreCheckpoint(c, {{"w", {2, 3}, w.data()}}, nullptr);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("'b'"), std::string::npos);
  // Optimizer registered in another order: refused, params untouched.
  AdamW swapped;
  ASSERT_TRUE(swapped.addParam("b", bb.data(), gb.data(), 3));
  ASSERT_TRUE(swapped.addParam("w", w.data(), gw.data(), 6));
  st = restoreCheckpoint(c, {{"b", {3}, bb.data()}, {"w", {2, 3}, w.data()}},
                         &swapped);
  EXPECT_FALSE(st);
  EXPECT_EQ(w[0], 0.f);
  // Order of ParamRefs does not matter.
  st = restoreCheckpoint(c, {{"b", {3}, bb.data()}, {"w", {2, 3}, w.data()}},
                         &opt);
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(w[5], 6.f);
  EXPECT_EQ(opt.stepCount(), 40);
  EXPECT_EQ(opt.config().lr, 1e-3);
  EXPECT_EQ(opt.moment1(1)[0], 0.25f);
}

TEST(Checkpoint, CaptureErrors) {
  std::vector<float> w(4);
  EXPECT_FALSE(captureCheckpoint(
      0, 1, 0, {{"w", {4}, w.data()}, {"w", {4}, w.data()}}, nullptr, {}));
  EXPECT_FALSE(captureCheckpoint(0, 1, 0, {{"w", {0}, w.data()}}, nullptr, {}));
  EXPECT_FALSE(captureCheckpoint(0, 1, 0, {{"w", {4}, nullptr}}, nullptr, {}));
  std::vector<float> g(4);
  AdamW opt;
  ASSERT_TRUE(opt.addParam("w", w.data(), g.data(), 4));
  ASSERT_TRUE(opt.optimisticStep(opt.localGradInfo()));
  auto c = captureCheckpoint(0, 1, 0, {{"w", {4}, w.data()}}, &opt, {});
  ASSERT_FALSE(c);
  EXPECT_NE(c.message().find("pending"), std::string::npos);
}

} // namespace
