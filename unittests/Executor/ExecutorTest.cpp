//===- ExecutorTest.cpp - The executor on its own, over in-process transports
//
// The executor without the compiler and without pipeforge-run: the
// hand-built MLP (test/tools/pipeforge-rt-testprog/MlpProgram.h) on the CPU
// backend, one rank over the local transport or several ranks as threads.
// Checks the determinism contract of Executor.h: with dp = 1 and W of each
// stage in microbatch order, a pipelined run is bitwise the single-process
// run, step after step (losses and weights), and bad wiring is an error.
//
//===----------------------------------------------------------------------===//

#include "MlpProgram.h"

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/Executor.h"
#include "pipeforge/rt/ThreadTransport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

using namespace pipeforge;
using namespace pipeforge::rt;

namespace {

constexpr int kSteps = 4;
constexpr int kStages = 4;
constexpr int kMicrobatches = 8;

/// Losses of every step and the final weights (gathered on rank 0).
struct RunResult {
  std::vector<double> losses;
  NamedTensors weights;
  std::string error;
  int added = 0; ///< kernel calls that added to a gradient (AddToSwitch)
};

/// The CPU backend with Backend::canAddTo on or off (off: every parameter
/// gradient through a workspace buffer and accumulate(), as before the
/// executor wrote them straight into place); counts the kernel calls that
/// add to a gradient.
class AddToSwitch final : public Backend {
public:
  AddToSwitch(bool on, int *added) : on(on), added(added) {}
  const char *name() const override { return "cpu"; }
  bool hostVisible() const override { return true; }
  void *alloc(int64_t b) override { return cpu->alloc(b); }
  void *allocUninit(int64_t b) override { return cpu->allocUninit(b); }
  void free(void *p) override { cpu->free(p); }
  void copyToHost(void *d, const void *s, int64_t b) override {
    cpu->copyToHost(d, s, b);
  }
  void copyFromHost(void *d, const void *s, int64_t b) override {
    cpu->copyFromHost(d, s, b);
  }
  void copy(void *d, const void *s, int64_t b) override { cpu->copy(d, s, b); }
  void fillZero(void *p, int64_t b) override { cpu->fillZero(p, b); }
  void accumulate(float *d, const float *s, int64_t n) override {
    cpu->accumulate(d, s, n);
  }
  void scale(float *x, float a, int64_t n) override { cpu->scale(x, a, n); }
  bool canAddTo(const Kernel &k, size_t out) const override {
    return on && cpu->canAddTo(k, out);
  }
  Status run(const KernelCall &c) override {
    if (++calls == failAt)
      return Status::error("test: kernel failure injected");
    if (c.addTo && added)
      ++*added;
    return cpu->run(c);
  }
  int calls = 0;   ///< run() calls so far
  int failAt = -1; ///< the run() call (1-based) that fails

private:
  std::unique_ptr<Backend> cpu = createCpuBackend();
  bool on;
  int *added;
};

/// Called on every rank before and after each step (`step` from 0).
struct StepHooks {
  std::function<void(Executor &, int step)> before, after;
};

Status runRank(const Program &prog, Transport &tr, RunResult &out,
               int addTo = -1, const StepHooks *hooks = nullptr) {
  if (Status s =
          tr.setupGrid(prog.training.pipelineRanks, prog.training.dataParallel,
                       prog.training.expertParallel);
      !s)
    return s;
  std::unique_ptr<Backend> be =
      addTo < 0 ? createCpuBackend()
                : std::make_unique<AddToSwitch>(addTo > 0, &out.added);
  auto data = createPatternTokens(prog.training.seed, prog.model.vocab);
  auto sgd = createSgd(0.05f);
  auto ex = Executor::create(prog, *be, tr, *data, *sgd);
  if (!ex)
    return ex.status();
  for (int s = 0; s < kSteps; ++s) {
    if (hooks && hooks->before)
      hooks->before(**ex, s);
    auto st = (*ex)->step();
    if (!st)
      return st.status();
    out.losses.push_back(st->loss);
    if (hooks && hooks->after)
      hooks->after(**ex, s);
  }
  auto w = (*ex)->gatherWeights();
  if (!w)
    return w.status();
  out.weights = w.take();
  return Status::ok();
}

/// Runs `prog` on its pipeline ranks times its data-parallel replicas
/// (threads when more than one); the result of rank 0. addTo >= 0: on
/// AddToSwitch(addTo > 0).
RunResult run(const Program &prog, int addTo = -1,
              const StepHooks *hooks = nullptr) {
  int ranks = prog.schedule.numRanks() * prog.training.dataParallel;
  std::vector<RunResult> results(static_cast<size_t>(ranks));
  if (ranks == 1) {
    auto tr = createLocalTransport();
    if (Status s = runRank(prog, *tr, results[0], addTo, hooks); !s)
      results[0].error = s.message();
    return results[0];
  }
  auto trs = createThreadTransports(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      if (Status s =
              runRank(prog, *trs[size_t(r)], results[size_t(r)], addTo, hooks);
          !s)
        results[size_t(r)].error = s.message();
    });
  for (auto &t : threads)
    t.join();
  for (const RunResult &r : results)
    if (!r.error.empty())
      return r;
  return results[0];
}

Program mlp(const std::string &kind, int ranks) {
  auto p = pipeforge::testing::buildMlpProgram(
      kind, ranks, kind == "none" ? kStages : -1, kMicrobatches, 1);
  EXPECT_TRUE(p) << p.message();
  return p ? p.take() : Program{};
}

TEST(Executor, SingleProcessReferenceTrainsAndIsDeterministic) {
  RunResult a = run(mlp("none", 1));
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(a.losses.size(), size_t(kSteps));
  for (double l : a.losses)
    EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(a.losses.back(), a.losses.front()) << "SGD does not train";
  RunResult b = run(mlp("none", 1));
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.losses, b.losses);
  std::string report;
  bool bitwise = false;
  EXPECT_TRUE(compareWeights(a.weights, b.weights, 0, 0, report, bitwise));
  EXPECT_TRUE(bitwise) << report;
}

/// Every schedule whose W runs in microbatch order on each stage equals the
/// reference bit for bit over threads.
class PipelinedEqualsReference : public ::testing::TestWithParam<const char *> {
};

TEST_P(PipelinedEqualsReference, LossesAndWeightsBitwise) {
  RunResult ref = run(mlp("none", 1));
  ASSERT_EQ(ref.error, "");
  RunResult pipe = run(mlp(GetParam(), kStages));
  ASSERT_EQ(pipe.error, "");
  EXPECT_EQ(pipe.losses, ref.losses);
  std::string report;
  bool bitwise = false;
  EXPECT_TRUE(compareWeights(pipe.weights, ref.weights, 0, 0, report, bitwise))
      << report;
  EXPECT_TRUE(bitwise) << report;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelinedEqualsReference,
                         ::testing::Values("gpipe", "1f1b", "zb-h1", "zb-h2"));

/// Parameter gradients written straight into place (Backend::canAddTo)
/// against the workspace buffer + accumulate path: the same losses and
/// weights bit for bit (the MLP's microbatches are far below one BLAS K
/// block), single process and pipelined, split (zb-h1) or fused backward.
TEST(Executor, GradientsStraightIntoPlaceKeepTheBits) {
  for (const char *kind : {"none", "1f1b", "zb-h1"}) {
    Program p = mlp(kind, std::string(kind) == "none" ? 1 : kStages);
    RunResult off = run(p, 0), on = run(p, 1);
    ASSERT_EQ(off.error, "") << kind;
    ASSERT_EQ(on.error, "") << kind;
    EXPECT_EQ(off.added, 0) << kind;
    // Rank 0's stage: one linear_bwd_weight per microbatch and step.
    EXPECT_GE(on.added, kSteps * kMicrobatches) << kind;
    EXPECT_EQ(on.losses, off.losses) << kind;
    std::string report;
    bool bitwise = false;
    EXPECT_TRUE(compareWeights(on.weights, off.weights, 0, 0, report, bitwise))
        << kind << ": " << report;
    EXPECT_TRUE(bitwise) << kind << ": " << report;
  }
}

/// `p` without the ParamGrad results of the parameters named `names` (any
/// model copy): nothing writes their gradients.
Program withoutGradients(Program p, const std::set<std::string> &names) {
  for (Stage &st : p.stages)
    for (Function *fn : {&st.forward, &st.backwardInput, &st.backwardWeight,
                         &st.backward})
      fn->results.erase(
          std::remove_if(fn->results.begin(), fn->results.end(),
                         [&](const ResultBinding &r) {
                           if (r.role != ResultRole::ParamGrad)
                             return false;
                           const std::string &n =
                               p.params[size_t(r.index)].name;
                           return names.count(n.substr(0, n.find('@'))) > 0;
                         }),
          fn->results.end());
  return p;
}

/// step() does not clear the gradients: each one's first write of the step
/// overwrites it and what nothing wrote is cleared before it is read. With
/// every gradient buffer filled with NaN before each step, the run is
/// bitwise the clean one; a parameter whose gradient nothing writes (here
/// the positions table, written with the token table by one kernel, and the
/// last layernorm's shift) has a zero gradient after every step and SGD
/// leaves it as it was. Single process, pipelined, DualPipe's two copies
/// (GRADREDUCE), data parallel with the overlapped reduction.
TEST(Executor, StaleGradientsNeverLeakAndUngradedParamsStay) {
  struct Case {
    const char *kind;
    int ranks, dp;
  };
  const std::set<std::string> ungraded = {"wpe", "ln.b"};
  for (Case c : {Case{"none", 1, 1}, Case{"1f1b", kStages, 1},
                 Case{"zb-h1", kStages, 1}, Case{"dualpipe", kStages, 1},
                 Case{"1f1b", 2, 2}, Case{"zb-h1", 2, 2}}) {
    SCOPED_TRACE(std::string(c.kind) + " ranks " + std::to_string(c.ranks) +
                 " dp " + std::to_string(c.dp));
    auto built = pipeforge::testing::buildMlpProgram(
        c.kind, c.ranks, std::string(c.kind) == "none" ? kStages : -1,
        kMicrobatches, c.dp);
    ASSERT_TRUE(built) << built.message();
    Program p = withoutGradients(built.take(), ungraded);
    auto isUngraded = [&](int32_t i) {
      const std::string &n = p.params[size_t(i)].name;
      return ungraded.count(n.substr(0, n.find('@'))) > 0;
    };
    std::atomic<int> checked{0}, nonZeroGrad{0}, moved{0};
    StepHooks poison;
    // Per executor (a rank's thread): its ungraded values before step 1.
    std::mutex mu;
    std::map<const Executor *, std::map<int32_t, std::vector<float>>> initial;
    poison.before = [&](Executor &ex, int step) {
      for (int32_t i : ex.localParams()) {
        float *g = ex.gradData(i);
        std::fill(g, g + ex.paramElems(i),
                  std::numeric_limits<float>::quiet_NaN());
        if (step == 0 && isUngraded(i)) {
          const float *v = ex.paramData(i);
          std::lock_guard<std::mutex> l(mu);
          initial[&ex][i].assign(v, v + ex.paramElems(i));
        }
      }
    };
    poison.after = [&](Executor &ex, int) {
      for (int32_t i : ex.localParams()) {
        if (!isUngraded(i))
          continue;
        const float *g = ex.gradData(i);
        const float *v = ex.paramData(i);
        std::vector<float> v0;
        {
          std::lock_guard<std::mutex> l(mu);
          v0 = initial[&ex][i];
        }
        for (int64_t e = 0; e < ex.paramElems(i); ++e)
          nonZeroGrad += g[e] != 0.0f;
        moved += v0.size() != size_t(ex.paramElems(i)) ||
                 std::memcmp(v0.data(), v, v0.size() * 4) != 0;
        ++checked;
      }
    };
    RunResult clean = run(p), dirty = run(p, -1, &poison);
    ASSERT_EQ(clean.error, "");
    ASSERT_EQ(dirty.error, "");
    EXPECT_GE(checked.load(), kSteps * 2);
    EXPECT_EQ(nonZeroGrad.load(), 0);
    EXPECT_EQ(moved.load(), 0);
    EXPECT_EQ(dirty.losses, clean.losses);
    for (double l : clean.losses)
      EXPECT_TRUE(std::isfinite(l));
    std::string report;
    bool bitwise = false;
    EXPECT_TRUE(
        compareWeights(dirty.weights, clean.weights, 0, 0, report, bitwise))
        << report;
    EXPECT_TRUE(bitwise) << report;
  }
}

/// A step that fails half-way (a kernel error after some gradients were
/// written) leaves the next one correct: retried, it and the steps after
/// it are bitwise those of a run without the failure.
TEST(Executor, AFailedStepLeavesTheNextOneCorrect) {
  Program p = mlp("none", 1);
  RunResult ref = run(p, 1);
  ASSERT_EQ(ref.error, "");
  auto tr = createLocalTransport();
  ASSERT_TRUE(tr->setupGrid(1, 1, 1));
  int added = 0;
  AddToSwitch be(true, &added);
  auto data = createPatternTokens(p.training.seed, p.model.vocab);
  auto sgd = createSgd(0.05f);
  auto ex = Executor::create(p, be, *tr, *data, *sgd);
  ASSERT_TRUE(ex) << ex.message();
  std::vector<double> losses;
  auto st = (*ex)->step();
  ASSERT_TRUE(st) << st.message();
  losses.push_back(st->loss);
  // Three quarters into step 2's kernels: well into the backward passes.
  be.failAt = be.calls + be.calls * 3 / 4;
  auto failed = (*ex)->step();
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.message().find("injected"), std::string::npos)
      << failed.message();
  EXPECT_EQ((*ex)->stepsDone(), 1);
  for (int s = 1; s < kSteps; ++s) {
    st = (*ex)->step();
    ASSERT_TRUE(st) << st.message();
    losses.push_back(st->loss);
  }
  EXPECT_EQ(losses, ref.losses);
  auto w = (*ex)->gatherWeights();
  ASSERT_TRUE(w) << w.message();
  std::string report;
  bool bitwise = false;
  EXPECT_TRUE(compareWeights(*w, ref.weights, 0, 0, report, bitwise))
      << report;
  EXPECT_TRUE(bitwise) << report;
}

TEST(Executor, RankCountMismatchIsAnError) {
  // A 4-rank program on a transport set up for 1 rank: refused at create,
  // not a hang.
  Program p = mlp("1f1b", kStages);
  auto tr = createLocalTransport();
  ASSERT_TRUE(tr->setupGrid(1, 1, 1));
  auto be = createCpuBackend();
  auto data = createPatternTokens(1, p.model.vocab);
  auto sgd = createSgd(0.05f);
  auto ex = Executor::create(p, *be, *tr, *data, *sgd);
  ASSERT_FALSE(ex);
  EXPECT_NE(ex.message().find("pipeline ranks"), std::string::npos)
      << ex.message();
}

// The executor dispatches on Kernel::kind, which validateProgram resolves:
// a program whose kernels were never resolved is refused at create.
TEST(Executor, UnvalidatedProgramIsRefused) {
  Program p = mlp("none", 1);
  ASSERT_FALSE(p.stages.empty());
  ASSERT_FALSE(p.stages[0].forward.kernels.empty());
  p.stages[0].forward.kernels[0].kind = OpKind::Unknown;
  auto tr = createLocalTransport();
  auto be = createCpuBackend();
  auto data = createPatternTokens(p.training.seed, p.model.vocab);
  auto sgd = createSgd(0.05f);
  auto ex = Executor::create(p, *be, *tr, *data, *sgd);
  ASSERT_FALSE(ex);
  EXPECT_NE(ex.message().find("no resolved op"), std::string::npos)
      << ex.message();
}

TEST(Executor, StepCounterAndParameterAccess) {
  Program p = mlp("none", 1);
  auto tr = createLocalTransport();
  auto be = createCpuBackend();
  auto data = createPatternTokens(p.training.seed, p.model.vocab);
  auto sgd = createSgd(0.05f);
  auto ex = Executor::create(p, *be, *tr, *data, *sgd);
  ASSERT_TRUE(ex) << ex.message();
  EXPECT_EQ((*ex)->stepsDone(), 0);
  ASSERT_TRUE((*ex)->step());
  EXPECT_EQ((*ex)->stepsDone(), 1);
  // One rank holds every parameter, whole.
  std::vector<int32_t> local = (*ex)->localParams();
  EXPECT_EQ(local.size(), p.params.size());
  for (int32_t i : local) {
    EXPECT_EQ((*ex)->paramShape(i), p.params[size_t(i)].type.shape);
    EXPECT_EQ((*ex)->paramElems(i), p.params[size_t(i)].type.numElements());
    EXPECT_NE((*ex)->paramData(i), nullptr);
    EXPECT_NE((*ex)->gradData(i), nullptr);
  }
  (*ex)->setStepsDone(41);
  ASSERT_TRUE((*ex)->step());
  EXPECT_EQ((*ex)->stepsDone(), 42);
}

} // namespace
