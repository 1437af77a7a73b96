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
// The phases: the options (RunOptions.cpp, one table of flags), then per
// rank the program, the backend, the memory check (the planned bytes
// against the host's or device's, before anything is allocated:
// MemoryCheck.h), the trainer and its run (runRank); the
// transport: --local-ranks threads, NCCL, MPI, or a world of one.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/RunDriver.h"

#include "RunOptions.h"

#include "pipeforge/rt/Executor.h"
#include "pipeforge/rt/MemoryCheck.h"
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

#include "pipeforge/Support/FlagTable.h"
#include "pipeforge/Support/Numeric.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

using namespace pipeforge::rt;
using pipeforge::rt::driver::RunOptions;

namespace {

/// This machine's host name (messages, --print-placement).
std::string hostName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

/// Prints the usage and exits: 2 after an error message, 0 for --help.
[[noreturn]] void usage(const char *msg) {
  pipeforge::flags::exitWithUsage(
      "pipeforge-run", msg ? std::optional<std::string>(msg) : std::nullopt,
      driver::runUsage());
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

/// The program from its file, or the one the executable carries.
Expected<Program> loadProgram(const RunOptions &o,
                              const std::string *embedded) {
  auto prog = embedded ? parseProgram(*embedded) : readProgram(o.progPath);
  if (!prog) {
    // Name the host: on a cluster the file must exist on every node.
    // (readProgram's messages name the file.)
    return Status::error((embedded ? "the embedded program: " : "") +
                         prog.message() + " (on host " + hostName() + ")");
  }
  return prog;
}

/// --inject-nan names a step and a microbatch this run has.
Status checkInjectNan(const RunOptions &o, const Program &p) {
  if (o.nanStep <= 0)
    return Status::ok();
  const std::string what = "--inject-nan " + std::to_string(o.nanStep) + ":" +
                           std::to_string(o.nanMb) + ": ";
  int64_t mbs = int64_t(p.training.microbatches) * p.training.dataParallel *
                std::max(1, p.training.expertParallel);
  if (o.nanMb >= mbs)
    return Status::error(what + "microbatch out of range (this program runs " +
                         std::to_string(mbs) + " per step over all replicas)");
  if (o.nanStep > o.steps)
    return Status::error(what + "step after the last (--steps " +
                         std::to_string(o.steps) + ")");
  return Status::ok();
}

/// The GPU of this rank: --device, else (one process per rank with --backend
/// cuda) NCCL's choice or the node-local rank round robin; -1: none.
int chooseDevice(const RunOptions &o) {
  int device = int(o.device);
#ifdef PIPEFORGE_HAVE_CUDA
  if (device < 0 && o.localRanks < 0 && o.backend == "cuda") {
#ifdef PIPEFORGE_HAVE_NCCL
    if (o.transport == "nccl")
      device = ncclLocalDevice();
#endif
    // One GPU per process, round robin over the node's devices
    // (several processes may share one: host-staged messages).
    if (const char *lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
      if (device < 0)
        device = std::atoi(lr) % std::max(1, cudaDeviceCount());
  }
#endif
  return device;
}

/// This rank's backend; with --device-collectives the transport reduces in
/// its memory.
Expected<std::unique_ptr<Backend>> makeBackend(const RunOptions &o,
                                               Transport &tr) {
  auto be = createBackend(o.backend, o.precision, std::max(chooseDevice(o), 0));
  if (!be)
    return be;
  // cpu-device's memory is host memory behind the device interface: the
  // transport may reduce on it in place, as NCCL does on a GPU.
  if (o.deviceCollectives)
    tr.setHostAddressableDevice([b = be->get()](const float *p) {
      return static_cast<float *>(b->hostAddress(p));
    });
  return be;
}

/// The trainer's and the executor's options from the command line.
TrainerOptions trainerOptions(const RunOptions &o, int worldRank) {
  TrainerOptions to;
  to.steps = o.steps;
  to.optimizer = o.optimizer;
  to.lr = o.lr;
  to.maxGradNorm = o.maxGradNorm;
  to.weightDecay = o.weightDecay;
  to.decayAll = o.decayAll;
  to.lrSchedule = o.lrSchedule;
  to.data = o.data;
  to.eos = o.eos;
  to.checkpointDir = o.checkpointDir;
  to.saveEvery = o.saveEvery;
  to.tracePath = o.tracePath;
  to.dumpWeightsPath = o.dumpPath;
  to.initFrom = o.initFrom;
  to.saveHfDir = o.saveHf;
  ExecutorOptions &eo = to.executor;
  eo.trace = !o.tracePath.empty();
  eo.recvLookahead = int(o.recvLookahead);
  eo.optimizerSync = o.optimizerSync == "post-validation"
                         ? OptimizerSync::PostValidation
                         : OptimizerSync::Sync;
  eo.skipStep = o.skipStep;
  eo.injectNanStep = o.nanStep;
  eo.injectNanMb = o.nanMb;
  eo.fuseOverlap = !o.noFuse;
  eo.docMask = o.docMask;
  eo.zeroStage = int(o.zero);
  eo.overlapGradReduce = o.overlapGradReduce == "on";
  eo.offloadActivations =
      o.offloadActivations == "all"    ? ExecutorOptions::Offload::All
      : o.offloadActivations == "auto" ? ExecutorOptions::Offload::Auto
                                       : ExecutorOptions::Offload::Off;
  eo.gradBucketBytes = int64_t(o.gradBucketMb * double(1 << 20));
  // Test hook: PIPEFORGE_TEST_STALL_AT_STEP=K with PIPEFORGE_TEST_DIE_RANK=R
  // makes world rank R stop answering at step K (a lost node).
  if (const char *st = std::getenv("PIPEFORGE_TEST_STALL_AT_STEP"))
    if (const char *r = std::getenv("PIPEFORGE_TEST_DIE_RANK");
        r && std::atoi(r) == worldRank)
      eo.stallStep = std::atoll(st);
  eo.syncDeviceCompute = !o.asyncCompute;
  return to;
}

/// The planned bytes against what this host (device) has, before anything
/// is allocated (collective; MemoryCheck.h): an error on every rank when
/// the ranks of a host plan more (--max-memory caps it or turns it off).
Status checkMemory(const RunOptions &o, const Program &p, Backend &be,
                   Transport &tr) {
  MemoryCheckOptions mo;
  mo.cap.off = o.maxMemoryOff;
  mo.cap.bytes = o.maxMemory;
  mo.print = o.memoryPlan;
  // AdamW's m and v, and post-validation's gradient snapshot.
  int64_t perElement = 8;
  if (o.optimizer != "adamw")
    perElement = 0;
  else if (o.optimizerSync == "post-validation")
    perElement = 12;
  mo.plan.optimizerBytesPerElement = perElement;
  return checkPlannedMemory(
      p, be, tr, trainerOptions(o, tr.worldRank()).executor, mo, hostName());
}

/// --print-placement: every rank's host and grid position, printed by rank 0
/// (collective).
Status printPlacement(Transport &tr) {
  std::string mine = "rank " + std::to_string(tr.worldRank()) + ": " +
                     hostName() + " (pipeline " +
                     std::to_string(tr.pipelineRank()) + ", replica " +
                     std::to_string(tr.dpIndex()) + ", expert " +
                     std::to_string(tr.epIndex()) + ", tensor " +
                     std::to_string(tr.tpIndex()) + ")";
  auto all = tr.gatherStrings(mine);
  if (!all)
    return all.status();
  if (tr.worldRank() == 0) {
    for (const std::string &l : *all)
      std::printf("placement: %s\n", l.c_str());
    std::fflush(stdout);
  }
  return Status::ok();
}

/// --resume: continues from the latest checkpoint; rank 0 says which.
Status resumeTraining(Trainer &trainer, const RunOptions &o, bool root) {
  auto k = trainer.resume();
  if (!k)
    return k.status();
  if (root && !o.quiet) {
    // Rank 0's folder.
    std::string shown = checkpointDirOf(o.checkpointDir, 0);
    std::printf("resumed from %s (step %lld)\n",
                checkpointSubdir(shown, *k).c_str(), (long long)*k);
  }
  return Status::ok();
}

/// The steps: rank 0 prints one line per step (unless --quiet). The test
/// hook PIPEFORGE_TEST_DIE_AT_STEP / PIPEFORGE_TEST_DIE_RANK runs first.
Status train(Trainer &trainer, const RunOptions &o, Transport &tr) {
  const bool root = tr.worldRank() == 0;
  const char *dieStep = std::getenv("PIPEFORGE_TEST_DIE_AT_STEP");
  const char *dieRank = std::getenv("PIPEFORGE_TEST_DIE_RANK");
  auto before = [&](int64_t k) {
    if (dieStep && dieRank && std::atoll(dieStep) == k &&
        std::atoi(dieRank) == tr.worldRank()) {
      std::fprintf(stderr,
                   "pipeforge-run: rank %d: test hook: dying at step "
                   "%lld\n",
                   tr.worldRank(), (long long)k);
      std::fflush(stderr);
      _exit(1);
    }
  };
  auto after = [&](const StepStats &st) {
    if (root && !o.quiet) {
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
  return trainer.run(before, after);
}

/// --memory-report: the measured activation memory per rank, printed by
/// rank 0 (collective).
Status reportMemory(Trainer &trainer, bool root) {
  auto rep = trainer.executor().memoryReport();
  if (!rep)
    return rep.status();
  if (root) {
    std::printf("%s", rep->c_str());
    std::fflush(stdout);
  }
  return Status::ok();
}

/// The trainer's run: resume, the steps, the reports, finish.
Status runTrainer(Trainer &trainer, const RunOptions &o, Transport &tr) {
  const bool root = tr.worldRank() == 0;
  if (o.printPlacement)
    if (Status s = printPlacement(tr); !s)
      return s;
  if (o.resume)
    if (Status s = resumeTraining(trainer, o, root); !s)
      return s;
  if (Status s = train(trainer, o, tr); !s)
    return s;
  if (o.memoryReport)
    if (Status s = reportMemory(trainer, root); !s)
      return s;
  return trainer.finish();
}

/// One rank, from its program to the end: once per process, or once per
/// thread with --local-ranks. An error ends every rank.
int runRank(const RunOptions &o, const std::string *embedded, Transport &tr) {
  tr.setTimeout(o.commTimeout);
  auto fail = [&](const std::string &m) -> int {
    if (tr.worldSize() > 1)
      tr.abort(m, 1);
    std::fprintf(stderr, "pipeforge-run: %s\n", m.c_str());
    return 1;
  };
  auto prog = loadProgram(o, embedded);
  if (!prog)
    return fail(prog.message());
  const Program &p = *prog;
  if (Status s = checkInjectNan(o, p); !s)
    return fail(s.message());
  tr.setRankLayout(o.rankLayout == "dp-fastest");
  if (Status s = tr.setupTensorGrid(
          p.training.pipelineRanks, p.training.dataParallel,
          p.training.expertParallel, p.training.tensorParallel);
      !s)
    return fail(s.message());
  auto be = makeBackend(o, tr);
  if (!be)
    return fail(be.message());
  if (Status s = checkMemory(o, p, **be, tr); !s)
    return fail(s.message());
  // The trainer outlives a failure's abort (it may hold messages in
  // flight).
  auto trainer =
      Trainer::create(p, **be, tr, trainerOptions(o, tr.worldRank()));
  if (!trainer)
    return fail(trainer.message());
  if (Status s = runTrainer(**trainer, o, tr); !s)
    return fail(s.message());
  return 0;
}

/// --local-ranks N: every rank a thread of this process; the largest exit
/// code.
int runLocalRanks(const RunOptions &o, const std::string *embedded) {
  const int n = int(o.localRanks);
  auto trs = createThreadTransports(n);
  std::vector<int> rc(size_t(n), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back(
        [&, r] { rc[size_t(r)] = runRank(o, embedded, *trs[size_t(r)]); });
  for (std::thread &t : threads)
    t.join();
  return *std::max_element(rc.begin(), rc.end());
}

/// The transport of a rank per process: --transport nccl, MPI (under
/// mpirun or --transport mpi), else a world of one. Null when NCCL does
/// not start (it has said why).
std::unique_ptr<Transport> createTransport(const RunOptions &o, int &argc,
                                           char **&argv) {
  std::unique_ptr<Transport> tr;
  if (o.transport == "nccl") {
#ifdef PIPEFORGE_HAVE_NCCL
    return createNcclTransport(&argc, &argv);
#else
    usage("--transport nccl: this build has no NCCL (CUDA not found at "
          "configure time)");
#endif
  }
#ifdef PIPEFORGE_HAVE_MPI
  if (launchedByMpirun() || o.transport == "mpi")
    tr = createMpiTransport(&argc, &argv);
#endif
  if (!tr)
    tr = createLocalTransport();
  return tr;
}

} // namespace

int pipeforge::rt::runDriver(int argc, char **argv,
                             const std::string *embedded) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--compare-weights")
      return compareMain(argc, argv);
  RunOptions o;
  if (auto err = driver::parseRunOptions(argc, argv, embedded != nullptr, o))
    usage(err->c_str());
  if (o.help)
    usage(nullptr);
  if (o.localRanks > 0)
    return runLocalRanks(o, embedded);
  std::unique_ptr<Transport> tr = createTransport(o, argc, argv);
  if (!tr)
    return 1;
  return runRank(o, embedded, *tr);
}

extern "C" int pipeforge_rt_main_embedded(int argc, char **argv,
                                          const char *data, uint64_t size) {
  std::string program(data, size_t(size));
  return pipeforge::rt::runDriver(argc, argv, &program);
}
