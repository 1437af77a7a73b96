//===- RunOptions.cpp - pipeforge-run's table of flags --------------------===//
//
// One table (kFlags, a pipeforge::flags table: Support/FlagTable.h) lists
// every flag of pipeforge-run in the order the usage text shows them: the
// name, what it takes, where its value goes and where it stands in the usage
// text. parseRunOptions reads argv through it (a value out of its range or
// not among its words is an error naming the flag, as the flag is read),
// then checks the options that depend on each other; runUsage writes the
// usage text from it.
//
//===----------------------------------------------------------------------===//

#include "RunOptions.h"

#include "pipeforge/rt/MemoryCheck.h"

#include "pipeforge/Support/FlagTable.h"
#include "pipeforge/Support/Numeric.h"

#include <cstdlib>

namespace pipeforge::rt::driver {

namespace {

using O = RunOptions;
using Flag = flags::Flag<O>;
using flags::Place;

/// --inject-nan STEP:MB (and PIPEFORGE_INJECT_NAN).
std::optional<std::string> setInjectNan(RunOptions &o, const std::string &v) {
  long long a = 0, b = 0;
  char tail = 0;
  if (std::sscanf(v.c_str(), "%lld:%lld%c", &a, &b, &tail) != 2 || a < 1 ||
      b < 0 || a > kMaxSteps || b > (1 << 30))
    return std::string("--inject-nan / PIPEFORGE_INJECT_NAN needs STEP:MB "
                       "(STEP >= 1, MB >= 0)");
  o.nanStep = a;
  o.nanMb = b;
  return std::nullopt;
}

std::optional<std::string> setLrSchedule(RunOptions &o, const std::string &v) {
  auto kind = parseLrScheduleKind(v);
  if (!kind)
    return "--lr-schedule: " + kind.message();
  o.lrScheduleKind = *kind;
  return std::nullopt;
}

/// --max-memory auto|off|BYTES (MemoryCheck.h's parseMemoryCap).
std::optional<std::string> setMaxMemory(RunOptions &o, const std::string &v) {
  std::string why;
  auto cap = parseMemoryCap(v, why);
  if (!cap)
    return why;
  o.maxMemoryOff = cap->off;
  o.maxMemory = cap->bytes;
  return std::nullopt;
}

constexpr double kSteps = double(kMaxSteps);

// Every flag, in the order of the usage text.
const Flag kFlags[] = {
    {"--steps", "K", Place::Next, &O::steps, 0, kSteps},
    {"--lr", "X", Place::Next, &O::lr, 0, 1e6},
    {"--optimizer", "adamw|sgd", Place::Line, &O::optimizer, 0, 0, true},
    {"--max-grad-norm", "X", Place::Next, &O::maxGradNorm, 0, 1e30},
    {"--zero", "0|1|2|3", Place::Next, &O::zero, 0, 3},
    {"--weight-decay", "X", Place::Line, &O::weightDecay, 0, 1e6},
    {"--decay-all", nullptr, Place::Inside, &O::decayAll},
    {"--lr-schedule", "constant|linear|cosine", Place::Line, setLrSchedule},
    {"--warmup-steps", "N", Place::Next, &O::warmupSteps, 0, kSteps},
    {"--decay-steps", "N", Place::Line, &O::decaySteps, 1, kSteps},
    {"--min-lr", "X", Place::Next, &O::minLr, 0, 1e6},
    {"--data", "synthetic|pattern|FILE|PREFIX", Place::Line, &O::data},
    {"--trace", "FILE", Place::Next, &O::tracePath},
    {"--doc-mask", nullptr, Place::Line, &O::docMask},
    {"--eos", "ID", Place::Inside, &O::eos, 0, double((int64_t(1) << 31) - 1)},
    {"--dump-weights", "FILE", Place::Line, &O::dumpPath},
    // 0: wait forever.
    {"--comm-timeout", "SECONDS", Place::Next, &O::commTimeout, 0, 1e6},
    {"--init-from", "HF_MODEL_DIR", Place::Line, &O::initFrom},
    {"--save-hf", "DIR", Place::Next, &O::saveHf},
    {"--recv-lookahead", "N", Place::Line, &O::recvLookahead, 0, 1 << 20},
    {"--quiet", nullptr, Place::Next, &O::quiet},
    {"--no-fuse", nullptr, Place::Next, &O::noFuse},
    {"--memory-report", nullptr, Place::Next, &O::memoryReport},
    {"--max-memory", "auto|off|BYTES", Place::Line, setMaxMemory},
    {"--memory-plan", nullptr, Place::Next, &O::memoryPlan},
    {"--print-placement", nullptr, Place::Line, &O::printPlacement},
    {"--rank-layout", "pp-fastest|dp-fastest", Place::Next, &O::rankLayout, 0,
     0, true},
    {"--checkpoint-dir", "DIR", Place::Line, &O::checkpointDir},
    {"--save-every", "K", Place::Inside, &O::saveEvery, 0, kSteps},
    {"--resume", nullptr, Place::Inside, &O::resume},
    {"--optimizer-sync", "sync|post-validation", Place::Line, &O::optimizerSync,
     0, 0, true},
    {"--clip", "X", Place::Next, &O::maxGradNorm, 0, 1e30},
    {"--skip-step", "K", Place::Line, &O::skipStep, 0, kSteps},
    {"--inject-nan", "STEP:MB", Place::Next, setInjectNan},
    {"--backend", "cpu|cpu-device|cuda", Place::Line, &O::backend, 0, 0, true},
    {"--precision", "fp32|bf16", Place::Next, &O::precision, 0, 0, true},
    {"--device", "K", Place::Line, &O::device, 0, 1023},
    {"--local-ranks", "N", Place::Next, &O::localRanks, 1, 4096},
    {"--transport", "mpi|nccl", Place::Next, &O::transport, 0, 0, true},
    {"--async-compute", nullptr, Place::Line, &O::asyncCompute},
    {"--device-collectives", nullptr, Place::Next, &O::deviceCollectives},
    {"--overlap-grad-reduce", "on|off", Place::Line, &O::overlapGradReduce, 0,
     0, true},
    {"--grad-bucket-mb", "X", Place::Next, &O::gradBucketMb, 0, 1 << 20},
    {"--offload-activations", "off|auto|all", Place::Line,
     &O::offloadActivations, 0, 0, true},
    {"-h", nullptr, Place::Hidden, &O::help},
    {"--help", nullptr, Place::Hidden, &O::help},
};

/// An argument that is not a flag: the program file.
std::optional<std::string> readProgramPath(const std::string &arg,
                                           bool embedded, RunOptions &o) {
  if (embedded)
    return "unexpected argument '" + arg +
           "': this executable carries its program";
  if (!o.progPath.empty())
    return "more than one program file";
  o.progPath = arg;
  return std::nullopt;
}

/// The options that depend on each other (each alone is already checked).
std::optional<std::string> checkCombinations(RunOptions &o) {
  o.lrSchedule.kind = o.lrScheduleKind;
  o.lrSchedule.warmupSteps = o.warmupSteps;
  o.lrSchedule.decaySteps = o.decaySteps < 0 ? o.steps : o.decaySteps;
  o.lrSchedule.minLr = o.minLr;
  if (Status s = checkLrSchedule(o.lrSchedule, o.lr); !s)
    return "--lr-schedule: " + s.message() +
           " (--warmup-steps, --decay-steps, --min-lr)";
  if (o.zero != 0 && o.optimizer != "adamw")
    return std::string(
        "--zero " + std::to_string(o.zero) +
        " shards optimizer state: it needs --optimizer adamw");
  if (o.optimizerSync == "post-validation" && o.optimizer != "adamw")
    return std::string(
        "--optimizer-sync post-validation needs --optimizer adamw");
  if ((o.saveEvery != 0 || o.resume) && o.checkpointDir.empty())
    return std::string("--save-every and --resume need --checkpoint-dir");
  if (o.precision != "fp32" && o.backend != "cuda")
    return std::string("--precision bf16 needs --backend cuda");
  if (o.localRanks > 0 && !o.transport.empty())
    return std::string("--local-ranks runs every rank in this process; it "
                       "takes no --transport");
  if (o.deviceCollectives && o.backend != "cpu-device")
    return std::string("--device-collectives needs --backend cpu-device (the "
                       "NCCL transport reduces on the GPU by itself)");
  if (o.transport == "nccl" && o.backend != "cuda")
    return std::string("--transport nccl needs --backend cuda");
  return std::nullopt;
}

} // namespace

std::optional<std::string> parseRunOptions(int argc, char **argv, bool embedded,
                                           RunOptions &out) {
  if (const char *e = std::getenv("PIPEFORGE_INJECT_NAN"))
    if (auto err = setInjectNan(out, e))
      return err;
  auto err = flags::parseFlags(
      kFlags, argc, argv, out,
      [&](const std::string &arg) {
        return readProgramPath(arg, embedded, out);
      },
      &O::help);
  if (err || out.help)
    return err;
  if (embedded)
    out.progPath = argv[0]; // for messages: the executable holds the program
  else if (out.progPath.empty())
    return std::string("no program file");
  return checkCombinations(out);
}

std::string runUsage() {
  return "usage: [mpirun -np N] pipeforge-run PROGRAM.pfp" +
         flags::synopsis(kFlags, "\n         ") +
         "\n"
         "       pipeforge-run --compare-weights A B [--rtol R] [--atol A]\n"
         "  (an executable from pipeforge-compile --emit exe takes the same\n"
         "  options without PROGRAM.pfp)\n";
}

void printRunUsage(std::FILE *to) { std::fputs(runUsage().c_str(), to); }

} // namespace pipeforge::rt::driver
