//===- pipeforge-run.cpp - Runs a compiled pipeline program ---------------===//
//
//   mpirun -np N pipeforge-run prog.pfp --steps K [--lr X] [--trace t.json]
//          [--dump-weights FILE] [--optimizer adamw|sgd] [--data synthetic|
//          pattern|FILE] [--comm-timeout S]
//   pipeforge-run --compare-weights A B [--rtol R] [--atol A]
//
// Rank 0 prints one line per step: "step K loss X tokens/s Y bubble Z".
// The world size must be the program's pipeline ranks x data parallel.
//
// Test hooks: PIPEFORGE_TEST_DIE_AT_STEP=K PIPEFORGE_TEST_DIE_RANK=R make
// world rank R exit(1) at the start of step K (1-based), to test that the
// other ranks end with a message instead of hanging.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Data.h"
#include "pipeforge/rt/Executor.h"
#include "pipeforge/rt/Optimizer.h"
#include "pipeforge/rt/Program.h"
#ifdef PIPEFORGE_HAVE_MPI
#include "pipeforge/rt/MpiTransport.h"
#endif

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

using namespace pipeforge::rt;

namespace {

[[noreturn]] void usage(const char *msg) {
  if (msg)
    std::fprintf(stderr, "pipeforge-run: %s\n", msg);
  std::fprintf(
      stderr,
      "usage: [mpirun -np N] pipeforge-run PROGRAM.pfp [--steps K] [--lr X]\n"
      "         [--optimizer adamw|sgd] [--max-grad-norm X]\n"
      "         [--data synthetic|pattern|TOKENFILE] [--trace FILE]\n"
      "         [--dump-weights FILE] [--comm-timeout SECONDS]\n"
      "         [--recv-lookahead N] [--quiet]\n"
      "       pipeforge-run --compare-weights A B [--rtol R] [--atol A]\n");
  std::exit(2);
}

/// Data.h's DataSource as the executor's TokenSource; replica d reads
/// global microbatches d*M .. d*M+M-1.
class DataAdapter final : public TokenSource {
public:
  DataAdapter(const DataSource &d, int64_t m) : d(d), m(m) {}
  Status fill(int64_t step, int dp, int64_t g, int64_t b, int64_t s,
              int32_t *tok, int32_t *tgt) override {
    return d.batch(int64_t(dp) * m + g, step, b, s, tok, tgt);
  }

private:
  const DataSource &d;
  int64_t m;
};

/// Optimizer.h's AdamW behind the executor's seam.
class AdamWAdapter final : public StepOptimizer {
public:
  explicit AdamWAdapter(AdamWConfig c) : opt(c) {}
  Status update(const std::vector<ParamSlot> &ps, double norm,
                int64_t) override {
    if (!registered) {
      for (const ParamSlot &p : ps)
        if (Status s = opt.addParam(p.param->name, p.value,
                                    const_cast<float *>(p.grad), size_t(p.n));
            !s)
          return s;
      registered = true;
    }
    GradInfo g;
    g.normSq = norm * norm;
    g.allFinite = std::isfinite(norm);
    opt.step(g);
    return Status::ok();
  }

private:
  AdamWT<float> opt;
  bool registered = false;
};

int compareMain(int argc, char **argv) {
  std::string a, b;
  double rtol = 0, atol = 0;
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    if (o == "--compare-weights" && i + 2 < argc) {
      a = argv[++i];
      b = argv[++i];
    } else if (o == "--rtol" && i + 1 < argc) {
      rtol = std::atof(argv[++i]);
    } else if (o == "--atol" && i + 1 < argc) {
      atol = std::atof(argv[++i]);
    } else {
      usage(("unknown option '" + o + "'").c_str());
    }
  }
  auto wa = readWeights(a), wb = readWeights(b);
  if (!wa || !wb) {
    std::fprintf(stderr, "pipeforge-run: %s\n",
                 (!wa ? wa : wb).message().c_str());
    return 1;
  }
  std::string report;
  bool bitwise = false;
  bool ok = compareWeights(*wa, *wb, rtol, atol, report, bitwise);
  std::printf("%s: %s (rtol %g atol %g)\n", ok ? "MATCH" : "MISMATCH",
              report.c_str(), rtol, atol);
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--compare-weights")
      return compareMain(argc, argv);

  std::string progPath, tracePath, dumpPath, dataSpec = "auto",
                                             optName = "adamw";
  int64_t steps = 10;
  double lr = 1e-3, maxNorm = 0, timeout = 120;
  int lookahead = 8;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc)
        usage(("option " + o + " needs a value").c_str());
      return argv[++i];
    };
    auto num = [&]() {
      std::string v = val();
      char *end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end)
        usage(("option " + o + ": '" + v + "' is not a number").c_str());
      return d;
    };
    if (o == "--steps")
      steps = int64_t(num());
    else if (o == "--lr")
      lr = num();
    else if (o == "--max-grad-norm")
      maxNorm = num();
    else if (o == "--optimizer")
      optName = val();
    else if (o == "--data")
      dataSpec = val();
    else if (o == "--trace")
      tracePath = val();
    else if (o == "--dump-weights")
      dumpPath = val();
    else if (o == "--comm-timeout")
      timeout = num();
    else if (o == "--recv-lookahead")
      lookahead = int(num());
    else if (o == "--quiet")
      quiet = true;
    else if (o == "--checkpoint-dir" || o == "--save-every" ||
             o == "--resume")
      usage("checkpoints are not wired into pipeforge-run yet");
    else if (o == "-h" || o == "--help")
      usage(nullptr);
    else if (!o.empty() && o[0] == '-')
      usage(("unknown option '" + o + "'").c_str());
    else if (progPath.empty())
      progPath = o;
    else
      usage("more than one program file");
  }
  if (progPath.empty())
    usage("no program file");
  if (steps < 0)
    usage("--steps must be >= 0");
  if (optName != "adamw" && optName != "sgd")
    usage("--optimizer must be adamw or sgd");

  std::unique_ptr<Transport> tr;
#ifdef PIPEFORGE_HAVE_MPI
  if (launchedByMpirun())
    tr = createMpiTransport(&argc, &argv);
#endif
  if (!tr)
    tr = createLocalTransport();
  tr->setTimeout(timeout);
  auto fail = [&](const std::string &m) -> int {
    if (tr->worldSize() > 1)
      tr->abort(m, 1);
    std::fprintf(stderr, "pipeforge-run: %s\n", m.c_str());
    return 1;
  };

  auto prog = readProgram(progPath);
  if (!prog)
    return fail(progPath + ": " + prog.message());
  const Program &p = *prog;
  if (Status s = tr->setup(p.training.pipelineRanks, p.training.dataParallel);
      !s)
    return fail(s.message());
  if (p.schedule.numRanks() != p.training.pipelineRanks)
    return fail("the schedule has " + std::to_string(p.schedule.numRanks()) +
                " ranks but the program says " +
                std::to_string(p.training.pipelineRanks));

  // Data.
  std::unique_ptr<DataSource> ds;
  std::unique_ptr<TokenSource> tokens;
  int64_t totalMb = p.training.microbatches;
  if (dataSpec == "auto")
    dataSpec = p.model.vocab >= 256 ? "synthetic" : "pattern";
  if (dataSpec == "pattern") {
    tokens = createPatternTokens(p.training.seed, p.model.vocab);
  } else {
    if (dataSpec == "synthetic") {
      ds = std::make_unique<SyntheticLanguage>();
    } else {
      auto tf = TokenFile::open(dataSpec, p.training.seed);
      if (!tf)
        return fail(tf.message());
      ds = tf.take();
    }
    if (ds->vocabSize() > p.model.vocab)
      return fail("data '" + ds->describe() + "' has vocabulary " +
                  std::to_string(ds->vocabSize()) + ", the model " +
                  std::to_string(p.model.vocab));
    tokens = std::make_unique<DataAdapter>(*ds, totalMb);
  }

  // Optimizer.
  std::unique_ptr<StepOptimizer> opt;
  if (optName == "sgd") {
    opt = createSgd(float(lr));
  } else {
    AdamWConfig c;
    c.lr = lr;
    c.maxGradNorm = maxNorm;
    if (Status s = checkConfig(c); !s)
      return fail(s.message());
    opt = std::make_unique<AdamWAdapter>(c);
  }

  auto be = createCpuBackend();
  ExecutorOptions eo;
  eo.trace = !tracePath.empty();
  eo.recvLookahead = lookahead;
  auto ex = Executor::create(p, *be, *tr, *tokens, *opt, eo);
  if (!ex)
    return fail(ex.message());

  const char *dieStep = std::getenv("PIPEFORGE_TEST_DIE_AT_STEP");
  const char *dieRank = std::getenv("PIPEFORGE_TEST_DIE_RANK");
  bool root = tr->worldRank() == 0;
  for (int64_t k = 1; k <= steps; ++k) {
    if (dieStep && dieRank && std::atoll(dieStep) == k &&
        std::atoi(dieRank) == tr->worldRank()) {
      std::fprintf(stderr, "pipeforge-run: rank %d: test hook: dying at step "
                           "%lld\n", tr->worldRank(), (long long)k);
      std::fflush(stderr);
      _exit(1);
    }
    auto st = (*ex)->step();
    if (!st)
      return fail("step " + std::to_string(k) + ": " + st.message());
    if (root && !quiet)
      std::printf("step %lld loss %.6f tokens/s %.0f bubble %.3f\n",
                  (long long)st->step, st->loss,
                  st->seconds > 0 ? double(st->tokens) / st->seconds : 0.0,
                  st->bubble);
    std::fflush(stdout);
  }
  if (!tracePath.empty())
    if (Status s = (*ex)->writeTrace(tracePath); !s)
      return fail(s.message());
  if (!dumpPath.empty()) {
    auto w = (*ex)->gatherWeights();
    if (!w)
      return fail(w.message());
    if (root)
      if (Status s = writeWeights(dumpPath, *w); !s)
        return fail(s.message());
  }
  return 0;
}
