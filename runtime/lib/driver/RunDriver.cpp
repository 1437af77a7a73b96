//===- RunDriver.cpp - pipeforge-run: options, backend, transport, train --===//
//
// The driver of pipeforge-run and of the executables that
// `pipeforge-compile --emit exe` writes (they carry their program and call
// pipeforge_rt_main_embedded; the program argument is then absent):
//
//   mpirun -np N pipeforge-run prog.pfp --steps K [--lr X] [--trace t.json]
//          [--dump-weights FILE] [--optimizer adamw|sgd] [--data synthetic|
//          pattern|FILE] [--comm-timeout S]
//          [--checkpoint-dir D [--save-every K] [--resume]]
//          [--init-from HF_DIR] [--save-hf DIR]   (docs/huggingface.md)
//          [--optimizer-sync sync|post-validation] [--clip X]
//   pipeforge-run --compare-weights A B [--rtol R] [--atol A]
//
// Checkpoints: D/step-NNNNNNNN/ (Checkpoint.h) after every K-th step;
// --resume continues from the latest complete one, bitwise.
//
// Rank 0 prints one line per step: "step K loss X tokens/s Y bubble Z".
// The world size must be the program's pipeline ranks x data parallel.
//
// Test hooks: PIPEFORGE_TEST_DIE_AT_STEP=K PIPEFORGE_TEST_DIE_RANK=R make
// world rank R exit(1) at the start of step K (1-based), to test that the
// other ranks end with a message instead of hanging. --inject-nan STEP:MB
// (or PIPEFORGE_INJECT_NAN=STEP:MB) poisons the gradient of global
// microbatch MB at step STEP; --skip-step K skips step K's update.
// PIPEFORGE_TEST_PERTURB_RANK=R changes one weight on world rank R before
// --dump-weights (whose replica check must then fail).
// PIPEFORGE_TEST_STALL_AT_STEP=K (with PIPEFORGE_TEST_DIE_RANK=R) makes rank
// R stop answering at step K without exiting, as on a lost node.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/RunDriver.h"

#include "pipeforge/rt/Executor.h"
#include "pipeforge/rt/Program.h"
#include "pipeforge/rt/ThreadTransport.h"
#include "pipeforge/rt/Trainer.h"
#ifdef PIPEFORGE_HAVE_MPI
#include "pipeforge/rt/MpiTransport.h"
#endif
#ifdef PIPEFORGE_HAVE_CUDA
#include "pipeforge/rt/CudaBackend.h"
#endif
#ifdef PIPEFORGE_HAVE_NCCL
#include "pipeforge/rt/NcclTransport.h"
#endif

#include "pipeforge/Support/Numeric.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>
#include <thread>
#include <unistd.h>

using namespace pipeforge::rt;

namespace {

/// This machine's host name (messages, --print-placement).
std::string hostName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

/// Prints the usage and exits: 2 after an error message, 0 for --help.
[[noreturn]] void usage(const char *msg) {
  if (msg)
    std::fprintf(stderr, "pipeforge-run: %s\n", msg);
  std::fprintf(
      msg ? stderr : stdout,
      "usage: [mpirun -np N] pipeforge-run PROGRAM.pfp [--steps K] [--lr X]\n"
      "         [--optimizer adamw|sgd] [--max-grad-norm X] [--zero 0|1]\n"
      "         [--weight-decay X [--decay-all]]\n"
      "         [--lr-schedule constant|linear|cosine] [--warmup-steps N]\n"
      "         [--decay-steps N] [--min-lr X]\n"
      "         [--data synthetic|pattern|FILE|PREFIX] [--trace FILE]\n"
      "         [--doc-mask [--eos ID]]\n"
      "         [--dump-weights FILE] [--comm-timeout SECONDS]\n"
      "         [--init-from HF_MODEL_DIR] [--save-hf DIR]\n"
      "         [--recv-lookahead N] [--quiet] [--no-fuse] [--memory-report]\n"
      "         [--print-placement] [--rank-layout pp-fastest|dp-fastest]\n"
      "         [--checkpoint-dir DIR [--save-every K] [--resume]]\n"
      "         [--optimizer-sync sync|post-validation] [--clip X]\n"
      "         [--skip-step K] [--inject-nan STEP:MB]\n"
      "         [--backend cpu|cpu-device|cuda] [--precision fp32|bf16]\n"
      "         [--device K] [--local-ranks N] [--transport mpi|nccl]\n"
      "         [--async-compute] [--device-collectives]\n"
      "         [--overlap-grad-reduce on|off] [--grad-bucket-mb X]\n"
      "       pipeforge-run --compare-weights A B [--rtol R] [--atol A]\n"
      "  (an executable from pipeforge-compile --emit exe takes the same\n"
      "  options without PROGRAM.pfp)\n");
  std::exit(msg ? 2 : 0);
}

/// The backend by name; "cuda" on `device` with GEMMs in `precision`.
Expected<std::unique_ptr<Backend>> createBackend(const std::string &name,
                                                 const std::string &precision,
                                                 int device) {
  if (name == "cpu")
    return createCpuBackend();
  if (name == "cpu-device")
    return createCpuDeviceBackend();
#ifdef PIPEFORGE_HAVE_CUDA
  CudaBackendOptions o;
  o.device = device;
  auto p = parseGemmPrecision(precision);
  if (!p)
    return p.status();
  o.precision = *p;
  return createCudaBackend(o);
#else
  (void)precision, (void)device;
  return Status::error("--backend cuda: this build has no CUDA backend "
                       "(nvcc was not found at configure time)");
#endif
}

int compareMain(int argc, char **argv) {
  std::string a, b;
  double rtol = 0, atol = 0;
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    if (o == "--compare-weights" && i + 2 < argc) {
      a = argv[++i];
      b = argv[++i];
    } else if ((o == "--rtol" || o == "--atol") && i + 1 < argc) {
      if (auto e = pipeforge::parseNumberOption(o, argv[++i], {0, 1e30},
                                                o == "--rtol" ? rtol : atol))
        usage(e->c_str());
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

int pipeforge::rt::runDriver(int argc, char **argv,
                             const std::string *embedded) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--compare-weights")
      return compareMain(argc, argv);

  std::string progPath, tracePath, dumpPath, initFrom, saveHf, dataSpecOpt = "auto",
                                             optName = "adamw";
  std::string backendName = "cpu", precisionName = "fp32", transportName;
  int localRanks = -1, deviceOpt = -1; // -1: not given
  bool asyncCompute = false;
  bool deviceCollectivesOpt = false;
  int64_t steps = 10;
  double lr = 1e-3, maxNorm = 0, timeout = 120, weightDecay = 0, minLr = 0;
  bool decayAll = false;
  std::string lrScheduleName = "constant";
  int64_t warmupSteps = 0, decaySteps = -1; // -1: --steps
  int lookahead = 8;
  bool quiet = false, resume = false, noFuse = false, memReport = false,
       printPlacement = false;
  int zeroStage = 0;
  bool docMask = false;
  int64_t eos = -1; // --eos: none
  std::string overlapGrad = "on";
  double bucketMb = 25;
  std::string rankLayout = "pp-fastest";
  std::string ckDir, syncMode = "sync";
  int64_t saveEvery = 0, skipStep = 0, nanStep = 0, nanMb = 0;
  auto parseNan = [&](const char *v) {
    long long a = 0, b = 0;
    char tail = 0;
    if (std::sscanf(v, "%lld:%lld%c", &a, &b, &tail) != 2 || a < 1 || b < 0 ||
        a > pipeforge::kMaxSteps || b > (1 << 30))
      usage("--inject-nan / PIPEFORGE_INJECT_NAN needs STEP:MB (STEP >= 1, "
            "MB >= 0)");
    nanStep = a;
    nanMb = b;
  };
  if (const char *e = std::getenv("PIPEFORGE_INJECT_NAN"))
    parseNan(e);
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc)
        usage(("option " + o + " needs a value").c_str());
      return argv[++i];
    };
    // Every numeric option: finite and in its range (Support/Numeric.h).
    auto num = [&](pipeforge::NumberRange r) {
      double d = 0;
      if (auto e = pipeforge::parseNumberOption(o, val(), r, d))
        usage(e->c_str());
      return d;
    };
    auto integer = [&](int64_t lo, int64_t hi) {
      int64_t x = 0;
      if (auto e = pipeforge::parseIntOption(o, val(), lo, hi, x))
        usage(e->c_str());
      return x;
    };
    if (o == "--steps")
      steps = integer(0, pipeforge::kMaxSteps);
    else if (o == "--lr")
      lr = num({0, 1e6});
    else if (o == "--max-grad-norm" || o == "--clip")
      maxNorm = num({0, 1e30});
    else if (o == "--weight-decay")
      weightDecay = num({0, 1e6});
    else if (o == "--decay-all")
      decayAll = true;
    else if (o == "--lr-schedule")
      lrScheduleName = val();
    else if (o == "--warmup-steps")
      warmupSteps = integer(0, pipeforge::kMaxSteps);
    else if (o == "--decay-steps")
      decaySteps = integer(1, pipeforge::kMaxSteps);
    else if (o == "--min-lr")
      minLr = num({0, 1e6});
    else if (o == "--optimizer")
      optName = val();
    else if (o == "--data")
      dataSpecOpt = val();
    else if (o == "--doc-mask")
      docMask = true;
    else if (o == "--eos")
      eos = integer(0, (int64_t(1) << 31) - 1);
    else if (o == "--backend")
      backendName = val();
    else if (o == "--precision")
      precisionName = val();
    else if (o == "--device")
      deviceOpt = int(integer(0, 1023));
    else if (o == "--async-compute")
      asyncCompute = true;
    else if (o == "--local-ranks")
      localRanks = int(integer(1, 4096));
    else if (o == "--transport")
      transportName = val();
    else if (o == "--trace")
      tracePath = val();
    else if (o == "--dump-weights")
      dumpPath = val();
    else if (o == "--init-from")
      initFrom = val();
    else if (o == "--save-hf")
      saveHf = val();
    else if (o == "--comm-timeout")
      timeout = num({0, 1e6}); // 0: wait forever
    else if (o == "--recv-lookahead")
      lookahead = int(integer(0, 1 << 20));
    else if (o == "--memory-report")
      memReport = true;
    else if (o == "--device-collectives")
      deviceCollectivesOpt = true;
    else if (o == "--print-placement")
      printPlacement = true;
    else if (o == "--rank-layout")
      rankLayout = val();
    else if (o == "--zero")
      zeroStage = int(integer(0, 1));
    else if (o == "--overlap-grad-reduce")
      overlapGrad = val();
    else if (o == "--grad-bucket-mb")
      bucketMb = num({0, 1 << 20});
    else if (o == "--quiet")
      quiet = true;
    else if (o == "--no-fuse")
      noFuse = true;
    else if (o == "--checkpoint-dir")
      ckDir = val();
    else if (o == "--save-every")
      saveEvery = integer(0, pipeforge::kMaxSteps);
    else if (o == "--resume")
      resume = true;
    else if (o == "--optimizer-sync")
      syncMode = val();
    else if (o == "--skip-step")
      skipStep = integer(0, pipeforge::kMaxSteps);
    else if (o == "--inject-nan")
      parseNan(val().c_str());
    else if (o == "-h" || o == "--help")
      usage(nullptr);
    else if (!o.empty() && o[0] == '-')
      usage(("unknown option '" + o + "'").c_str());
    else if (progPath.empty() && !embedded)
      progPath = o;
    else if (embedded)
      usage(("unexpected argument '" + o +
             "': this executable carries its program")
                .c_str());
    else
      usage("more than one program file");
  }
  if (embedded)
    progPath = argv[0]; // for messages: the executable holds the program
  else if (progPath.empty())
    usage("no program file");
  if (steps < 0)
    usage("--steps must be >= 0");
  if (optName != "adamw" && optName != "sgd")
    usage("--optimizer must be adamw or sgd");
  auto scheduleKind = parseLrScheduleKind(lrScheduleName);
  if (!scheduleKind)
    usage(("--lr-schedule: " + scheduleKind.message()).c_str());
  LrSchedule lrSchedule;
  lrSchedule.kind = *scheduleKind;
  lrSchedule.warmupSteps = warmupSteps;
  lrSchedule.decaySteps = decaySteps < 0 ? steps : decaySteps;
  lrSchedule.minLr = minLr;
  if (Status s = checkLrSchedule(lrSchedule, lr); !s)
    usage(("--lr-schedule: " + s.message() +
           " (--warmup-steps, --decay-steps, --min-lr)")
              .c_str());
  if (syncMode != "sync" && syncMode != "post-validation")
    usage("--optimizer-sync must be sync or post-validation");
  if (rankLayout != "pp-fastest" && rankLayout != "dp-fastest")
    usage("--rank-layout must be pp-fastest or dp-fastest");
  if (overlapGrad != "on" && overlapGrad != "off")
    usage("--overlap-grad-reduce must be on or off");
  if (zeroStage != 0 && optName != "adamw")
    usage("--zero 1 shards optimizer state: it needs --optimizer adamw");
  if (syncMode == "post-validation" && optName != "adamw")
    usage("--optimizer-sync post-validation needs --optimizer adamw");
  if ((saveEvery != 0 || resume) && ckDir.empty())
    usage("--save-every and --resume need --checkpoint-dir");
  if (saveEvery < 0)
    usage("--save-every must be >= 0");
  if (backendName != "cpu" && backendName != "cpu-device" &&
      backendName != "cuda")
    usage("--backend must be cpu, cpu-device or cuda");
  if (precisionName != "fp32" && precisionName != "bf16")
    usage("--precision must be fp32 or bf16");
  if (precisionName != "fp32" && backendName != "cuda")
    usage("--precision bf16 needs --backend cuda");
  if (localRanks == 0 || localRanks < -1)
    usage("--local-ranks must be >= 1");
  if (!transportName.empty() && transportName != "mpi" &&
      transportName != "nccl")
    usage("--transport must be mpi or nccl");
  if (localRanks > 0 && !transportName.empty())
    usage("--local-ranks runs every rank in this process; it takes no "
          "--transport");
  if (deviceCollectivesOpt && backendName != "cpu-device")
    usage("--device-collectives needs --backend cpu-device (the NCCL "
          "transport reduces on the GPU by itself)");
  if (transportName == "nccl" && backendName != "cuda")
    usage("--transport nccl needs --backend cuda");

  // One rank: everything from here on runs once per process, or once per
  // thread with --local-ranks.
  auto runRank = [&](Transport *tr) -> int {
    tr->setTimeout(timeout);
    auto fail = [&](const std::string &m) -> int {
      if (tr->worldSize() > 1)
        tr->abort(m, 1);
      std::fprintf(stderr, "pipeforge-run: %s\n", m.c_str());
      return 1;
    };

    auto prog = embedded ? parseProgram(*embedded) : readProgram(progPath);
    if (!prog) {
      // Name the host: on a cluster the file must exist on every node.
      // (readProgram's messages name the file.)
      return fail((embedded ? "the embedded program: " : "") + prog.message() +
                  " (on host " + hostName() + ")");
    }
    const Program &p = *prog;
    if (nanStep > 0) {
      int64_t mbs = int64_t(p.training.microbatches) * p.training.dataParallel *
                    std::max(1, p.training.expertParallel);
      if (nanMb >= mbs)
        return fail("--inject-nan " + std::to_string(nanStep) + ":" +
                    std::to_string(nanMb) +
                    ": microbatch out of range (this "
                    "program runs " +
                    std::to_string(mbs) + " per step over all replicas)");
      if (nanStep > steps)
        return fail("--inject-nan " + std::to_string(nanStep) + ":" +
                    std::to_string(nanMb) + ": step after the last (--steps " +
                    std::to_string(steps) + ")");
    }
    tr->setRankLayout(rankLayout == "dp-fastest");
    if (Status s = tr->setupTensorGrid(
            p.training.pipelineRanks, p.training.dataParallel,
            p.training.expertParallel, p.training.tensorParallel);
        !s)
      return fail(s.message());

    int device = deviceOpt;
#ifdef PIPEFORGE_HAVE_CUDA
    if (device < 0 && localRanks < 0 && backendName == "cuda") {
#ifdef PIPEFORGE_HAVE_NCCL
      if (transportName == "nccl")
        device = ncclLocalDevice();
#endif
      // One GPU per process, round robin over the node's devices
      // (several processes may share one: host-staged messages).
      if (const char *lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
        if (device < 0)
          device = std::atoi(lr) % std::max(1, cudaDeviceCount());
    }
#endif
    auto beOr = createBackend(backendName, precisionName, std::max(device, 0));
    if (!beOr)
      return fail(beOr.message());
    std::unique_ptr<Backend> be = beOr.take();
    // cpu-device's memory is host memory behind the device interface: the
    // transport may reduce on it in place, as NCCL does on a GPU.
    if (deviceCollectivesOpt)
      tr->setHostAddressableDevice([b = be.get()](const float *p) {
        return static_cast<float *>(b->hostAddress(p));
      });

    TrainerOptions to;
    to.steps = steps;
    to.optimizer = optName;
    to.lr = lr;
    to.maxGradNorm = maxNorm;
    to.weightDecay = weightDecay;
    to.decayAll = decayAll;
    to.lrSchedule = lrSchedule;
    to.data = dataSpecOpt;
    to.eos = eos;
    to.checkpointDir = ckDir;
    to.saveEvery = saveEvery;
    to.tracePath = tracePath;
    to.dumpWeightsPath = dumpPath;
    to.initFrom = initFrom;
    to.saveHfDir = saveHf;
    ExecutorOptions &eo = to.executor;
    eo.trace = !tracePath.empty();
    eo.recvLookahead = lookahead;
    eo.optimizerSync = syncMode == "post-validation"
                           ? OptimizerSync::PostValidation
                           : OptimizerSync::Sync;
    eo.skipStep = skipStep;
    eo.injectNanStep = nanStep;
    eo.injectNanMb = nanMb;
    eo.fuseOverlap = !noFuse;
    eo.docMask = docMask;
    eo.zeroStage = zeroStage;
    eo.overlapGradReduce = overlapGrad == "on";
    eo.gradBucketBytes = int64_t(bucketMb * double(1 << 20));
    // Test hook: PIPEFORGE_TEST_STALL_AT_STEP=K with PIPEFORGE_TEST_DIE_RANK=R
    // makes world rank R stop answering at step K (a lost node).
    if (const char *st = std::getenv("PIPEFORGE_TEST_STALL_AT_STEP"))
      if (const char *r = std::getenv("PIPEFORGE_TEST_DIE_RANK");
          r && std::atoi(r) == tr->worldRank())
        eo.stallStep = std::atoll(st);
    eo.syncDeviceCompute = !asyncCompute;
    auto trainer = Trainer::create(p, *be, *tr, to);
    if (!trainer)
      return fail(trainer.message());
    bool root = tr->worldRank() == 0;
    if (printPlacement) {
      // Every rank's host and grid position, from rank 0 (collective).
      std::string mine = "rank " + std::to_string(tr->worldRank()) + ": " +
                         hostName() + " (pipeline " +
                         std::to_string(tr->pipelineRank()) + ", replica " +
                         std::to_string(tr->dpIndex()) + ", expert " +
                         std::to_string(tr->epIndex()) + ", tensor " +
                         std::to_string(tr->tpIndex()) + ")";
      auto all = tr->gatherStrings(mine);
      if (!all)
        return fail(all.message());
      if (root) {
        for (const std::string &l : *all)
          std::printf("placement: %s\n", l.c_str());
        std::fflush(stdout);
      }
    }
    if (resume) {
      auto k = (*trainer)->resume();
      if (!k)
        return fail(k.message());
      if (root && !quiet) {
        // Rank 0's folder.
        std::string shown = checkpointDirOf(ckDir, 0);
        std::printf("resumed from %s (step %lld)\n",
                    checkpointSubdir(shown, *k).c_str(), (long long)*k);
      }
    }

    const char *dieStep = std::getenv("PIPEFORGE_TEST_DIE_AT_STEP");
    const char *dieRank = std::getenv("PIPEFORGE_TEST_DIE_RANK");
    auto before = [&](int64_t k) {
      if (dieStep && dieRank && std::atoll(dieStep) == k &&
          std::atoi(dieRank) == tr->worldRank()) {
        std::fprintf(stderr,
                     "pipeforge-run: rank %d: test hook: dying at step "
                     "%lld\n",
                     tr->worldRank(), (long long)k);
        std::fflush(stderr);
        _exit(1);
      }
    };
    auto after = [&](const StepStats &st) {
      if (root && !quiet) {
        std::printf("step %lld loss %.6f tokens/s %.0f bubble %.3f",
                    (long long)st.step, st.loss,
                    st.seconds > 0 ? double(st.tokens) / st.seconds : 0.0,
                    st.bubble);
        if (st.optimizer != "applied")
          std::printf(" optimizer %s", st.optimizer.c_str());
        std::printf("\n");
      }
      std::fflush(stdout);
    };
    if (Status s = (*trainer)->run(before, after); !s)
      return fail(s.message());
    if (memReport) { // measured activation memory per rank (collective)
      auto rep = (*trainer)->executor().memoryReport();
      if (!rep)
        return fail(rep.message());
      if (root) {
        std::printf("%s", rep->c_str());
        std::fflush(stdout);
      }
    }
    if (Status s = (*trainer)->finish(); !s)
      return fail(s.message());
    return 0;
  };

  if (localRanks > 0) {
    auto trs = createThreadTransports(localRanks);
    std::vector<int> rc(size_t(localRanks), 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < localRanks; ++r)
      threads.emplace_back(
          [&, r] { rc[size_t(r)] = runRank(trs[size_t(r)].get()); });
    for (std::thread &t : threads)
      t.join();
    return *std::max_element(rc.begin(), rc.end());
  }
  std::unique_ptr<Transport> tr;
  if (transportName == "nccl") {
#ifdef PIPEFORGE_HAVE_NCCL
    tr = createNcclTransport(&argc, &argv);
    if (!tr)
      return 1;
#else
    usage("--transport nccl: this build has no NCCL (CUDA not found at "
          "configure time)");
#endif
  }
#ifdef PIPEFORGE_HAVE_MPI
  if (!tr && (launchedByMpirun() || transportName == "mpi"))
    tr = createMpiTransport(&argc, &argv);
#endif
  if (!tr)
    tr = createLocalTransport();
  return runRank(tr.get());
}

extern "C" int pipeforge_rt_main_embedded(int argc, char **argv,
                                          const char *data, uint64_t size) {
  std::string program(data, size_t(size));
  return pipeforge::rt::runDriver(argc, argv, &program);
}
