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

#include <cmath>
#include <memory>
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
    if (c.addTo && added)
      ++*added;
    return cpu->run(c);
  }

private:
  std::unique_ptr<Backend> cpu = createCpuBackend();
  bool on;
  int *added;
};

Status runRank(const Program &prog, Transport &tr, RunResult &out,
               int addTo = -1) {
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
    auto st = (*ex)->step();
    if (!st)
      return st.status();
    out.losses.push_back(st->loss);
  }
  auto w = (*ex)->gatherWeights();
  if (!w)
    return w.status();
  out.weights = w.take();
  return Status::ok();
}

/// Runs `prog` on its pipeline ranks (threads when more than one); the
/// result of rank 0. addTo >= 0: on AddToSwitch(addTo > 0).
RunResult run(const Program &prog, int addTo = -1) {
  int ranks = prog.schedule.numRanks();
  std::vector<RunResult> results(static_cast<size_t>(ranks));
  if (ranks == 1) {
    auto tr = createLocalTransport();
    if (Status s = runRank(prog, *tr, results[0], addTo); !s)
      results[0].error = s.message();
    return results[0];
  }
  auto trs = createThreadTransports(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      if (Status s =
              runRank(prog, *trs[size_t(r)], results[size_t(r)], addTo);
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
