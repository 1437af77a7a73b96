//===- OptimizerTest.cpp - AdamW, clipping, post-validation, rollback -----===//
//
// AdamW against a naive double reference; the in-place rollback restores
// parameters, moments and t up to rounding (float and double); post-
// validation with a needed clip equals synchronous clipping; a NaN gradient
// is rolled back and equals a run that skipped the step; state round trips.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/Optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace pipeforge::rt;

namespace {

/// The textbook AdamW (PyTorch's torch.optim.AdamW) in double.
struct NaiveAdamW {
  AdamWConfig c;
  std::vector<double> theta, m, v;
  int t = 0;
  void step(const std::vector<double> &g, double scale) {
    ++t;
    for (size_t i = 0; i < theta.size(); ++i) {
      double gi = g[i] * scale;
      theta[i] *= 1 - c.lr * c.weightDecay;
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * gi;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * gi * gi;
      double mh = m[i] / (1 - std::pow(c.beta1, t));
      double vh = v[i] / (1 - std::pow(c.beta2, t));
      theta[i] -= c.lr * mh / (std::sqrt(vh) + c.eps);
    }
  }
};

AdamWConfig testConfig() {
  AdamWConfig c;
  c.lr = 1e-2;
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.eps = 1e-8;
  c.weightDecay = 0.1;
  return c;
}

/// A model: a few named tensors with their gradients.
template <typename T> struct Model {
  std::vector<std::vector<T>> data, grad;
  explicit Model(std::vector<size_t> sizes, unsigned seed = 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    for (size_t n : sizes) {
      data.emplace_back(n);
      grad.emplace_back(n, T(0));
      for (T &x : data.back())
        x = T(nd(rng));
    }
  }
  void registerWith(AdamWT<T> &opt, const std::string &prefix = "p") {
    for (size_t i = 0; i < data.size(); ++i)
      ASSERT_TRUE(opt.addParam(prefix + std::to_string(i), data[i].data(),
                               grad[i].data(), data[i].size()));
  }
  /// Deterministic pseudo-gradients for step `k`, of magnitude `mag`.
  void fillGrads(int k, double mag, unsigned salt = 0) {
    std::mt19937 rng(1000u + unsigned(k) * 7919u + salt);
    std::normal_distribution<double> nd(0.0, mag);
    for (auto &g : grad)
      for (T &x : g)
        x = T(nd(rng));
  }
};

template <typename T>
double maxAbsDiff(const std::vector<T> &a, const std::vector<T> &b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}
template <typename T> double maxAbs(const std::vector<T> &a) {
  double d = 0;
  for (T x : a)
    d = std::max(d, std::fabs(double(x)));
  return d;
}

template <typename T>
bool bitsEqual(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T> constexpr double tol() {
  return std::is_same<T, float>::value ? 2e-6 : 1e-14;
}

//===----------------------------------------------------------------------===//
// AdamW vs the naive reference
//===----------------------------------------------------------------------===//

template <typename T> void checkAgainstNaive(double maxNorm) {
  AdamWConfig c = testConfig();
  c.maxGradNorm = maxNorm;
  Model<T> mdl({7, 33});
  AdamWT<T> opt(c);
  mdl.registerWith(opt);
  std::vector<NaiveAdamW> ref(2);
  for (size_t p = 0; p < 2; ++p) {
    ref[p].c = c;
    ref[p].theta.assign(mdl.data[p].begin(), mdl.data[p].end());
    ref[p].m.assign(mdl.data[p].size(), 0);
    ref[p].v.assign(mdl.data[p].size(), 0);
  }
  for (int k = 0; k < 25; ++k) {
    mdl.fillGrads(k, 0.5 + 0.1 * k);
    GradInfo info = opt.localGradInfo();
    double ns = 0;
    for (auto &g : mdl.grad)
      for (T x : g)
        ns += double(x) * double(x);
    EXPECT_NEAR(info.normSq, ns, 1e-9 * ns);
    double scale = 1;
    if (maxNorm > 0)
      scale = std::min(1.0, maxNorm / (std::sqrt(ns) + 1e-6));
    StepOutcome o = opt.step(info);
    EXPECT_EQ(o, scale < 1 ? StepOutcome::Clipped : StepOutcome::Applied);
    for (size_t p = 0; p < 2; ++p)
      ref[p].step(std::vector<double>(mdl.grad[p].begin(), mdl.grad[p].end()),
                  scale);
  }
  EXPECT_EQ(opt.stepCount(), 25);
  double t = std::is_same<T, float>::value ? 1e-4 : 1e-10;
  for (size_t p = 0; p < 2; ++p) {
    for (size_t i = 0; i < mdl.data[p].size(); ++i) {
      EXPECT_NEAR(double(mdl.data[p][i]), ref[p].theta[i], t) << p << "," << i;
      EXPECT_NEAR(double(opt.moment1(p)[i]), ref[p].m[i], t);
      EXPECT_NEAR(double(opt.moment2(p)[i]), ref[p].v[i], t);
    }
  }
}

TEST(AdamW, MatchesNaiveReferenceFloat) { checkAgainstNaive<float>(0); }
TEST(AdamW, MatchesNaiveReferenceDouble) { checkAgainstNaive<double>(0); }
TEST(AdamW, ClippedMatchesNaiveReferenceFloat) {
  checkAgainstNaive<float>(1.0);
}
TEST(AdamW, ClippedMatchesNaiveReferenceDouble) {
  checkAgainstNaive<double>(1.0);
}

TEST(AdamW, ClipScaleFormula) {
  AdamWConfig c;
  c.maxGradNorm = 2.0;
  AdamW opt(c);
  EXPECT_EQ(opt.clipScale(1.0), 1.0);
  EXPECT_NEAR(opt.clipScale(16.0), 2.0 / (4.0 + 1e-6), 1e-15);
  c.maxGradNorm = 0;
  AdamW off(c);
  EXPECT_EQ(off.clipScale(1e30), 1.0);
}

TEST(AdamW, NonFiniteGlobalSkipsSynchronously) {
  Model<float> mdl({10});
  AdamW opt(testConfig());
  mdl.registerWith(opt);
  mdl.fillGrads(0, 1.0);
  mdl.grad[0][3] = std::numeric_limits<float>::quiet_NaN();
  GradInfo info = opt.localGradInfo();
  EXPECT_FALSE(info.allFinite);
  auto before = mdl.data[0];
  EXPECT_EQ(opt.step(info), StepOutcome::Skipped);
  EXPECT_TRUE(bitsEqual(before, mdl.data[0]));
  EXPECT_EQ(opt.stepCount(), 0);
  mdl.grad[0][3] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(opt.localGradInfo().allFinite);
}

TEST(AdamW, Errors) {
  float d[4] = {}, g[4] = {};
  AdamW opt(testConfig());
  EXPECT_TRUE(opt.addParam("w", d, g, 4));
  Status dup = opt.addParam("w", d, g, 4);
  EXPECT_FALSE(dup);
  EXPECT_NE(dup.message().find("duplicate"), std::string::npos);
  EXPECT_FALSE(opt.addParam("", d, g, 4));
  EXPECT_FALSE(opt.addParam("n", nullptr, g, 4));
  EXPECT_FALSE(opt.validate(GradInfo{}));
  EXPECT_FALSE(opt.rollbackLastStep());
  ASSERT_TRUE(opt.optimisticStep(GradInfo{}));
  EXPECT_FALSE(opt.optimisticStep(GradInfo{}));
  EXPECT_FALSE(opt.exportState());
  EXPECT_FALSE(opt.addParam("x", d, g, 4));
  EXPECT_TRUE(opt.validate(GradInfo{}));
  EXPECT_TRUE(opt.exportState());

  AdamWConfig c = testConfig();
  EXPECT_TRUE(checkConfig(c));
  c.beta1 = 1.0;
  EXPECT_FALSE(checkConfig(c));
  c = testConfig();
  c.lr = 2;
  c.weightDecay = 0.5;
  EXPECT_FALSE(checkConfig(c));
  c = testConfig();
  c.eps = 0;
  EXPECT_FALSE(checkConfig(c));
}

//===----------------------------------------------------------------------===//
// Rollback
//===----------------------------------------------------------------------===//

template <typename T> void checkRollback(double maxNorm) {
  AdamWConfig c = testConfig();
  c.maxGradNorm = maxNorm;
  Model<T> mdl({64, 5});
  AdamWT<T> opt(c);
  mdl.registerWith(opt);
  for (int k = 0; k < 6; ++k) {
    mdl.fillGrads(k, 1.0);
    opt.step(opt.localGradInfo());
  }
  auto data = mdl.data;
  std::vector<std::vector<T>> m{opt.moment1(0), opt.moment1(1)};
  std::vector<std::vector<T>> v{opt.moment2(0), opt.moment2(1)};
  int64_t t = opt.stepCount();
  mdl.fillGrads(99, 3.0);
  StepOutcome o = opt.step(opt.localGradInfo());
  EXPECT_EQ(o, maxNorm > 0 ? StepOutcome::Clipped : StepOutcome::Applied);
  EXPECT_GT(maxAbsDiff(data[0], mdl.data[0]), 1e-3);
  ASSERT_TRUE(opt.rollbackLastStep());
  EXPECT_EQ(opt.stepCount(), t);
  for (size_t p = 0; p < 2; ++p) {
    // Within a few units of rounding of the magnitudes involved.
    EXPECT_LE(maxAbsDiff(data[p], mdl.data[p]),
              tol<T>() * (1 + maxAbs(data[p])));
    EXPECT_LE(maxAbsDiff(m[p], opt.moment1(p)), tol<T>() * (1 + maxAbs(m[p])));
    EXPECT_LE(maxAbsDiff(v[p], opt.moment2(p)), tol<T>() * (1 + maxAbs(v[p])));
  }
  // Nothing more to roll back.
  EXPECT_FALSE(opt.rollbackLastStep());
}

TEST(Rollback, RestoresStateFloat) { checkRollback<float>(0); }
TEST(Rollback, RestoresStateDouble) { checkRollback<double>(0); }
TEST(Rollback, RestoresClippedStepFloat) { checkRollback<float>(0.5); }
TEST(Rollback, RestoresClippedStepDouble) { checkRollback<double>(0.5); }

TEST(Rollback, FirstStepFromZeroMoments) {
  Model<double> mdl({16});
  AdamWT<double> opt(testConfig());
  mdl.registerWith(opt);
  auto data = mdl.data;
  mdl.fillGrads(1, 1.0);
  opt.step(opt.localGradInfo());
  ASSERT_TRUE(opt.rollbackLastStep());
  EXPECT_EQ(opt.stepCount(), 0);
  EXPECT_LE(maxAbsDiff(data[0], mdl.data[0]), 1e-14);
  EXPECT_EQ(maxAbs(opt.moment1(0)), 0.0);
  EXPECT_LE(maxAbs(opt.moment2(0)), 1e-18);
}

//===----------------------------------------------------------------------===//
// Post-validation
//===----------------------------------------------------------------------===//

TEST(PostValidation, AcceptsWhenPartialIsGlobal) {
  // One stage: the partial info is the global info, the optimistic step is
  // the synchronous step, bit for bit, and is accepted.
  AdamWConfig c = testConfig();
  c.maxGradNorm = 1.0;
  Model<float> a({50}), b({50});
  AdamW oa(c), ob(c);
  a.registerWith(oa);
  b.registerWith(ob);
  for (int k = 0; k < 10; ++k) {
    a.fillGrads(k, 0.05 * (k + 1));
    b.fillGrads(k, 0.05 * (k + 1));
    GradInfo info = oa.localGradInfo();
    ASSERT_TRUE(oa.optimisticStep(info));
    auto r = oa.validate(info);
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->rolledBack);
    EXPECT_FALSE(r->redone);
    EXPECT_EQ(r->outcome, ob.step(ob.localGradInfo()));
    EXPECT_TRUE(bitsEqual(a.data[0], b.data[0]));
  }
}

/// Two pipeline stages, each with its own optimizer over half the model.
/// Stage 0 steps optimistically with only its own statistics; stage 1 sees
/// both (partial = global). Compared against the synchronous run.
template <typename T> void checkPostValidationClip(bool snapshot) {
  AdamWConfig c = testConfig();
  c.maxGradNorm = 1.0;
  c.snapshotGrads = snapshot;
  Model<T> s0({40}, 1), s1({30}, 2), r0({40}, 1), r1({30}, 2);
  AdamWT<T> o0(c), o1(c), q0(c), q1(c);
  s0.registerWith(o0, "s0_");
  s1.registerWith(o1, "s1_");
  r0.registerWith(q0, "s0_");
  r1.registerWith(q1, "s1_");
  int rollbacks = 0, clipsSeen = 0;
  for (int k = 0; k < 20; ++k) {
    // Magnitudes around the threshold so that some steps clip on the global
    // norm although stage 0's own norm does not.
    double mag = 0.08 + 0.02 * (k % 5);
    for (auto *m : {&s0, &r0})
      m->fillGrads(k, mag, 0);
    for (auto *m : {&s1, &r1})
      m->fillGrads(k, mag, 1);
    GradInfo g0 = o0.localGradInfo();
    GradInfo global = GradInfo::combine(g0, o1.localGradInfo());
    ASSERT_TRUE(o0.optimisticStep(g0));
    ASSERT_TRUE(o1.optimisticStep(global));
    if (snapshot) { // the caller may clear its gradients now
      for (auto &g : s0.grad)
        std::fill(g.begin(), g.end(), T(0));
    }
    auto v0 = o0.validate(global);
    auto v1 = o1.validate(global);
    ASSERT_TRUE(v0 && v1);
    EXPECT_FALSE(v1->rolledBack);
    rollbacks += v0->rolledBack;
    // Synchronous reference.
    GradInfo rg = GradInfo::combine(q0.localGradInfo(), q1.localGradInfo());
    StepOutcome o = q0.step(rg);
    q1.step(rg);
    EXPECT_EQ(v0->outcome, o);
    EXPECT_EQ(v0->rolledBack,
              o0.clipScale(g0.normSq) != o0.clipScale(global.normSq));
    clipsSeen += o == StepOutcome::Clipped;
    // Stage 1 had the global info: bitwise the same as synchronous.
    EXPECT_TRUE(bitsEqual(s1.data[0], r1.data[0]));
  }
  EXPECT_GT(rollbacks, 3);
  EXPECT_GT(clipsSeen, 3);
  EXPECT_LT(clipsSeen, 20);
  EXPECT_EQ(o0.stepCount(), q0.stepCount());
  double t = std::is_same<T, float>::value ? 2e-5 : 1e-12;
  EXPECT_LE(maxAbsDiff(s0.data[0], r0.data[0]), t);
  EXPECT_LE(maxAbsDiff(o0.moment1(0), q0.moment1(0)), t);
  EXPECT_LE(maxAbsDiff(o0.moment2(0), q0.moment2(0)), t);
}

TEST(PostValidation, NeededClipEqualsSynchronousFloat) {
  checkPostValidationClip<float>(false);
}
TEST(PostValidation, NeededClipEqualsSynchronousDouble) {
  checkPostValidationClip<double>(false);
}
TEST(PostValidation, NeededClipWithGradSnapshotFloat) {
  checkPostValidationClip<float>(true);
}

/// A NaN appears on another stage at step `bad`: this stage stepped
/// optimistically, rolls back, and ends where a run that skipped the step
/// ends.
template <typename T> void checkNaNRollback() {
  AdamWConfig c = testConfig();
  Model<T> a({64}), b({64});
  AdamWT<T> oa(c), ob(c);
  a.registerWith(oa);
  b.registerWith(ob);
  const int bad = 4;
  for (int k = 0; k < 10; ++k) {
    a.fillGrads(k, 1.0);
    b.fillGrads(k, 1.0);
    GradInfo local = oa.localGradInfo();
    ASSERT_TRUE(oa.optimisticStep(local));
    GradInfo global = local;
    if (k == bad)
      global = GradInfo::combine(local, GradInfo{std::nan(""), false});
    auto r = oa.validate(global);
    ASSERT_TRUE(r);
    if (k == bad) {
      EXPECT_TRUE(r->rolledBack);
      EXPECT_EQ(r->outcome, StepOutcome::Skipped);
    } else {
      EXPECT_FALSE(r->rolledBack);
      ob.step(ob.localGradInfo());
    }
  }
  EXPECT_EQ(oa.stepCount(), 9);
  EXPECT_EQ(oa.stepCount(), ob.stepCount());
  double t = std::is_same<T, float>::value ? 1e-5 : 1e-13;
  EXPECT_LE(maxAbsDiff(a.data[0], b.data[0]), t);
  EXPECT_LE(maxAbsDiff(oa.moment1(0), ob.moment1(0)), t);
  EXPECT_LE(maxAbsDiff(oa.moment2(0), ob.moment2(0)), t);
}

TEST(PostValidation, NaNElsewhereRolledBackEqualsSkipFloat) {
  checkNaNRollback<float>();
}
TEST(PostValidation, NaNElsewhereRolledBackEqualsSkipDouble) {
  checkNaNRollback<double>();
}

TEST(PostValidation, LocalNaNNeverSteps) {
  // The stage that sees the NaN itself does not step, so nothing has to be
  // rolled back and the run is bitwise the one that skipped.
  AdamWConfig c = testConfig();
  Model<float> a({32}), b({32});
  AdamW oa(c), ob(c);
  a.registerWith(oa);
  b.registerWith(ob);
  for (int k = 0; k < 8; ++k) {
    a.fillGrads(k, 1.0);
    b.fillGrads(k, 1.0);
    if (k == 3)
      a.grad[0][5] = std::numeric_limits<float>::quiet_NaN();
    GradInfo local = oa.localGradInfo();
    ASSERT_TRUE(oa.optimisticStep(local));
    auto r = oa.validate(local);
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->rolledBack);
    if (k == 3) {
      EXPECT_EQ(r->outcome, StepOutcome::Skipped);
    } else {
      ob.step(ob.localGradInfo());
    }
    for (float x : oa.moment1(0))
      ASSERT_TRUE(std::isfinite(x));
  }
  EXPECT_TRUE(bitsEqual(a.data[0], b.data[0]));
  EXPECT_TRUE(bitsEqual(oa.moment2(0), ob.moment2(0)));
  EXPECT_EQ(oa.stepCount(), 7);
}

TEST(PostValidation, KeepsLearningRateOfPendingStep) {
  // A learning-rate change between optimisticStep and validate does not
  // affect the redo of the pending step.
  AdamWConfig c = testConfig();
  c.maxGradNorm = 0.1;
  Model<double> a({20}), b({20});
  AdamWT<double> oa(c), ob(c);
  a.registerWith(oa);
  b.registerWith(ob);
  a.fillGrads(0, 1.0);
  b.fillGrads(0, 1.0);
  GradInfo global = oa.localGradInfo();
  ASSERT_TRUE(oa.optimisticStep(GradInfo{0.0, true})); // no clip seen yet
  oa.setLearningRate(0.5);
  auto r = oa.validate(global);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->rolledBack && r->redone);
  ob.step(global);
  EXPECT_LE(maxAbsDiff(a.data[0], b.data[0]), 1e-13);
}

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

TEST(AdamWState, ExportImportContinuesBitwise) {
  AdamWConfig c = testConfig();
  c.maxGradNorm = 2.0;
  Model<float> a({30, 3});
  AdamW oa(c);
  a.registerWith(oa);
  for (int k = 0; k < 5; ++k) {
    a.fillGrads(k, 1.0);
    oa.step(oa.localGradInfo());
  }
  auto st = oa.exportState();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->step, 5);
  Model<float> b = a;
  AdamW ob(c);
  b.registerWith(ob);
  ASSERT_TRUE(ob.importState(*st));
  for (int k = 5; k < 10; ++k) {
    a.fillGrads(k, 1.0);
    b.fillGrads(k, 1.0);
    oa.step(oa.localGradInfo());
    ob.step(ob.localGradInfo());
  }
  EXPECT_TRUE(bitsEqual(a.data[0], b.data[0]));
  EXPECT_TRUE(bitsEqual(a.data[1], b.data[1]));
  EXPECT_TRUE(bitsEqual(oa.moment2(1), ob.moment2(1)));

  AdamWState<float> wrong = *st;
  wrong.names[1] = "zzz";
  Status s = ob.importState(wrong);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("zzz"), std::string::npos);
  wrong = *st;
  wrong.m[0].pop_back();
  EXPECT_FALSE(ob.importState(wrong));
  wrong = *st;
  wrong.names.pop_back();
  EXPECT_FALSE(ob.importState(wrong));
}

} // namespace

namespace {

using pipeforge::rt::LrSchedule;

TEST(LrSchedule, WarmupThenCosineToTheMinimum) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Cosine;
  s.warmupSteps = 4;
  s.decaySteps = 12;
  s.minLr = 0.1;
  EXPECT_DOUBLE_EQ(s.at(1.0, 1), 0.25); // (i + 1) / W
  EXPECT_DOUBLE_EQ(s.at(1.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(s.at(1.0, 5), 1.0);               // p = 0
  EXPECT_NEAR(s.at(1.0, 9), 0.1 + 0.9 * 0.5, 1e-15); // p = 1/2
  EXPECT_DOUBLE_EQ(s.at(1.0, 13), 0.1);              // i >= T
  EXPECT_DOUBLE_EQ(s.at(1.0, 1000), 0.1);
  for (int64_t k = 5; k < 13; ++k) // decays monotonically
    EXPECT_GT(s.at(1.0, k), s.at(1.0, k + 1));
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Linear;
  s.decaySteps = 10;
  EXPECT_DOUBLE_EQ(s.at(2.0, 1), 2.0);
  EXPECT_DOUBLE_EQ(s.at(2.0, 6), 1.0);
  EXPECT_DOUBLE_EQ(s.at(2.0, 11), 0.0);
  LrSchedule c; // constant, with a warm-up
  c.warmupSteps = 2;
  EXPECT_DOUBLE_EQ(c.at(3.0, 1), 1.5);
  EXPECT_DOUBLE_EQ(c.at(3.0, 2), 3.0);
  EXPECT_DOUBLE_EQ(c.at(3.0, 100), 3.0);
  EXPECT_TRUE(LrSchedule{}.isConstant());
  EXPECT_FALSE(c.isConstant());
}

TEST(LrSchedule, BadSchedulesAreErrors) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Cosine;
  s.warmupSteps = 5;
  s.decaySteps = 5;
  EXPECT_FALSE(pipeforge::rt::checkLrSchedule(s, 1.0));
  s.decaySteps = 6;
  EXPECT_TRUE(pipeforge::rt::checkLrSchedule(s, 1.0));
  s.minLr = 2.0;
  EXPECT_FALSE(pipeforge::rt::checkLrSchedule(s, 1.0));
  EXPECT_FALSE(pipeforge::rt::parseLrScheduleKind("exp"));
  EXPECT_TRUE(pipeforge::rt::parseLrScheduleKind("cosine"));
}

TEST(AdamW, WeightDecayOnlyWhereAsked) {
  pipeforge::rt::AdamWConfig c;
  c.lr = 0.1;
  c.weightDecay = 0.5;
  pipeforge::rt::AdamW opt(c);
  std::vector<float> w = {2.f, 2.f}, b = {2.f, 2.f}, gw(2, 0.f), gb(2, 0.f);
  ASSERT_TRUE(opt.addParam("w", w.data(), gw.data(), 2, /*decay=*/true));
  ASSERT_TRUE(opt.addParam("b", b.data(), gb.data(), 2, /*decay=*/false));
  opt.step(opt.localGradInfo()); // zero gradients: only the decay moves w
  EXPECT_FLOAT_EQ(w[0], 2.f * (1.f - 0.1f * 0.5f));
  EXPECT_FLOAT_EQ(b[0], 2.f);
  ASSERT_TRUE(opt.rollbackLastStep());
  EXPECT_FLOAT_EQ(w[0], 2.f);
  EXPECT_FLOAT_EQ(b[0], 2.f);
  EXPECT_TRUE(pipeforge::rt::decaysByDefault({4, 8}));
  EXPECT_FALSE(pipeforge::rt::decaysByDefault({8}));
}

// The optimizer on a backend (the executor's path on device backends):
// on cpu-device (opaque pointers: a host dereference faults) every step,
// post-validation's optimistic step, rollback and redo, a skipped step,
// the gradient statistics and the state export/import have the bits of the
// host optimizer.
TEST(AdamW, OnTheBackendMatchesTheHostBitwise) {
  using pipeforge::rt::AdamW;
  auto be = pipeforge::rt::createCpuDeviceBackend();
  pipeforge::rt::AdamWConfig c;
  c.lr = 0.05;
  c.weightDecay = 0.1;
  c.maxGradNorm = 0.5;
  const size_t sizes[2] = {37, 5};
  AdamW host(c), dev(c);
  ASSERT_TRUE(dev.useBackend(*be));
  std::vector<float> hw[2], hg[2];
  float *dw[2], *dg[2];
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int p = 0; p < 2; ++p) {
    hw[p].resize(sizes[p]);
    hg[p].resize(sizes[p]);
    for (float &x : hw[p])
      x = nd(rng);
    dw[p] = static_cast<float *>(be->alloc(int64_t(sizes[p] * 4)));
    dg[p] = static_cast<float *>(be->alloc(int64_t(sizes[p] * 4)));
    be->copyFromHost(dw[p], hw[p].data(), int64_t(sizes[p] * 4));
    std::string name = "p" + std::to_string(p);
    ASSERT_TRUE(host.addParam(name, hw[p].data(), hg[p].data(), sizes[p],
                              /*decay=*/p == 0));
    ASSERT_TRUE(dev.addParam(name, dw[p], dg[p], sizes[p], p == 0));
  }
  EXPECT_FALSE(dev.useBackend(*be)); // after addParam
  pipeforge::rt::AdamWT<double> d(c);
  EXPECT_FALSE(d.useBackend(*be)); // float only
  auto newGrads = [&](float scale) {
    for (int p = 0; p < 2; ++p) {
      for (float &x : hg[p])
        x = scale * nd(rng);
      be->copyFromHost(dg[p], hg[p].data(), int64_t(sizes[p] * 4));
    }
  };
  auto same = [&](const std::string &what) {
    for (int p = 0; p < 2; ++p) {
      std::vector<float> w(sizes[p]);
      be->copyToHost(w.data(), dw[p], int64_t(sizes[p] * 4));
      EXPECT_EQ(std::memcmp(w.data(), hw[p].data(), sizes[p] * 4), 0)
          << what << ": values of p" << p;
      EXPECT_TRUE(host.moment1(size_t(p)) == dev.moment1(size_t(p))) << what;
      EXPECT_TRUE(host.moment2(size_t(p)) == dev.moment2(size_t(p))) << what;
    }
    EXPECT_EQ(host.stepCount(), dev.stepCount()) << what;
    EXPECT_TRUE(dev.takeBackendError()) << what;
  };
  for (int k = 0; k < 3; ++k) { // synchronous steps, some clipped
    newGrads(k == 1 ? 3.f : 0.1f);
    auto gi = host.localGradInfo(), gd = dev.localGradInfo();
    EXPECT_EQ(gi.normSq, gd.normSq);
    EXPECT_EQ(host.step(gi), dev.step(gd));
    same("step " + std::to_string(k));
  }
  // Post-validation: the optimistic step saw half the squares; the global
  // norm asks for another clip scale: rolled back from the snapshot, redone.
  newGrads(2.f);
  auto part = host.localGradInfo();
  part.normSq *= 0.25;
  ASSERT_TRUE(host.optimisticStep(part));
  ASSERT_TRUE(dev.optimisticStep(part));
  newGrads(5.f); // the live buffers change; the snapshot must be used
  auto full = part;
  full.normSq *= 4;
  auto rh = host.validate(full), rd = dev.validate(full);
  ASSERT_TRUE(rh && rd);
  EXPECT_TRUE(rh->rolledBack && rd->rolledBack && rh->redone && rd->redone);
  same("redone");
  // m, v and the snapshot buffer, which stays allocated for the next step.
  EXPECT_EQ(dev.stateBytes(), int64_t(3 * (37 + 5) * 4));
  // Non-finite global statistics: the optimistic step is undone.
  newGrads(1.f);
  ASSERT_TRUE(host.optimisticStep(host.localGradInfo()));
  ASSERT_TRUE(dev.optimisticStep(dev.localGradInfo()));
  pipeforge::rt::GradInfo bad{1.0, false};
  ASSERT_TRUE(host.validate(bad) && dev.validate(bad));
  same("rolled back");
  // A plain rollback, then the state through export and import.
  newGrads(0.3f);
  host.step(host.localGradInfo());
  dev.step(dev.localGradInfo());
  ASSERT_TRUE(host.rollbackLastStep());
  ASSERT_TRUE(dev.rollbackLastStep());
  same("rollback");
  auto st = dev.exportState();
  ASSERT_TRUE(st);
  AdamW dev2(c);
  ASSERT_TRUE(dev2.useBackend(*be));
  for (int p = 0; p < 2; ++p)
    ASSERT_TRUE(dev2.addParam("p" + std::to_string(p), dw[p], dg[p], sizes[p],
                              p == 0));
  ASSERT_TRUE(dev2.importState(*st));
  for (int p = 0; p < 2; ++p) {
    EXPECT_TRUE(dev2.moment1(size_t(p)) == host.moment1(size_t(p)));
    EXPECT_TRUE(dev2.moment2(size_t(p)) == host.moment2(size_t(p)));
  }
  EXPECT_EQ(dev2.stepCount(), host.stepCount());
  EXPECT_EQ(dev2.stateBytes(), int64_t(2 * (37 + 5) * 4));
  // A non-finite gradient on the device is seen by the device statistics.
  float inf = std::numeric_limits<float>::infinity();
  be->copyFromHost(dg[1], &inf, 4);
  EXPECT_FALSE(std::isfinite(dev.localGradInfo().normSq));
  for (int p = 0; p < 2; ++p) {
    be->free(dw[p]);
    be->free(dg[p]);
  }
}

} // namespace

// The gradient norm's sum of squares (AdamWMath.h): the blocked,
// prefetching loop and its AVX-512/AVX2 clones (sumSquaresHost) give the
// bits of the plain definition, lane k summing the elements i = k (mod 8)
// in index order, the lanes combined pairwise; a NaN or an infinity makes
// it non-finite.
TEST(SumSquares, BlockedLoopHasThePlainLaneOrderBitwise) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (long long n : {0LL, 1LL, 7LL, 8LL, 63LL, 64LL, 65LL, 1000LL, 4099LL,
                      100003LL}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float &e : x)
      e = nd(rng) * std::exp(nd(rng)); // a wide range of magnitudes
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (long long i = 0; i < n; ++i)
      lane[i % 8] += double(x[size_t(i)]) * double(x[size_t(i)]);
    double want = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                  ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    double host = sumSquaresHost(x.data(), n);
    double tmpl = sumSquaresTensor(x.data(), n);
    EXPECT_EQ(std::memcmp(&host, &want, sizeof want), 0) << n;
    EXPECT_EQ(std::memcmp(&tmpl, &want, sizeof want), 0) << n;
    if (n > 70) {
      x[size_t(n / 2)] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_TRUE(std::isnan(sumSquaresHost(x.data(), n)));
      x[size_t(n / 2)] = std::numeric_limits<float>::infinity();
      EXPECT_FALSE(std::isfinite(sumSquaresHost(x.data(), n)));
    }
  }
}

// The step's constants: s = lr / (1 - b1^t) and r = 1 / sqrt(1 - b2^t),
// rounded once from double; the update term equals the textbook
// lr m' / (sqrt(v') + eps) (m' = m / (1 - b1^t), v' = v / (1 - b2^t)) to
// float rounding.
TEST(AdamW, UpdateTermEqualsTheTextbookFormToRounding) {
  for (long long t : {1LL, 2LL, 10LL, 1000LL}) {
    AdamWCoeffs c = adamwCoeffsT<float>(0.9, 0.999, 1e-8, 0.1, t, 3e-4, 1.0);
    EXPECT_EQ(c.stepSize, float(3e-4 / (1.0 - std::pow(0.9, double(t)))));
    EXPECT_EQ(c.rsqrtBc2,
              float(1.0 / std::sqrt(1.0 - std::pow(0.999, double(t)))));
    for (float m : {1e-3f, -0.25f, 4.0f})
      for (float v : {1e-12f, 1e-4f, 2.5f}) {
        double bc1 = 1.0 - std::pow(0.9, double(t));
        double bc2 = 1.0 - std::pow(0.999, double(t));
        double want = 3e-4 * (m / bc1) / (std::sqrt(v / bc2) + 1e-8);
        double got = adamwUpdateTerm(c, m, v);
        EXPECT_NEAR(got, want, 4e-7 * std::fabs(want)) << t << " " << m << " "
                                                       << v;
      }
  }
}
