//===- RunOptionsTest.cpp - pipeforge-run's table of flags ----------------===//
//
// parseRunOptions and printRunUsage (runtime/lib/driver/RunOptions.h): the
// values each kind of flag takes, the messages of a bad flag, the checks of
// flags against each other, and the usage text the table prints.
//
//===----------------------------------------------------------------------===//

#include "RunOptions.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

using namespace pipeforge::rt;
using namespace pipeforge::rt::driver;

namespace {

/// Parses `args` (after the program name) with no PIPEFORGE_INJECT_NAN.
std::optional<std::string> parse(std::vector<std::string> args, RunOptions &o,
                                 bool embedded = false) {
  unsetenv("PIPEFORGE_INJECT_NAN");
  args.insert(args.begin(), "pipeforge-run");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return parseRunOptions(int(argv.size()), argv.data(), embedded, o);
}

/// The error of `args`, or "" when they parse.
std::string error(std::vector<std::string> args) {
  RunOptions o;
  auto e = parse(std::move(args), o);
  return e ? *e : "";
}

TEST(RunOptions, Defaults) {
  RunOptions o;
  ASSERT_FALSE(parse({"p.pfp"}, o));
  EXPECT_EQ(o.progPath, "p.pfp");
  EXPECT_EQ(o.steps, 10);
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.optimizer, "adamw");
  EXPECT_EQ(o.backend, "cpu");
  EXPECT_EQ(o.transport, "");
  EXPECT_EQ(o.localRanks, -1);
  EXPECT_EQ(o.commTimeout, 120);
  EXPECT_EQ(o.recvLookahead, 8);
  EXPECT_EQ(o.gradBucketMb, 25);
  // --decay-steps defaults to --steps.
  EXPECT_EQ(o.lrSchedule.decaySteps, 10);
  EXPECT_FALSE(o.help);
}

TEST(RunOptions, EveryKindOfFlag) {
  RunOptions o;
  // clang-format off
  ASSERT_FALSE(parse({"--steps", "7", "p.pfp", "--lr", "0.5", "--clip", "2",
                      "--backend", "cpu-device", "--device-collectives",
                      "--lr-schedule", "cosine", "--warmup-steps", "2",
                      "--inject-nan", "3:1", "--checkpoint-dir", "ck",
                      "--save-every", "2", "--resume", "--quiet"},
                     o));
  // clang-format on
  EXPECT_EQ(o.steps, 7);
  EXPECT_EQ(o.lr, 0.5);
  EXPECT_EQ(o.maxGradNorm, 2);
  EXPECT_EQ(o.backend, "cpu-device");
  EXPECT_TRUE(o.deviceCollectives);
  EXPECT_EQ(o.lrSchedule.kind, LrSchedule::Kind::Cosine);
  EXPECT_EQ(o.lrSchedule.warmupSteps, 2);
  EXPECT_EQ(o.lrSchedule.decaySteps, 7);
  EXPECT_EQ(o.nanStep, 3);
  EXPECT_EQ(o.nanMb, 1);
  EXPECT_EQ(o.checkpointDir, "ck");
  EXPECT_EQ(o.saveEvery, 2);
  EXPECT_TRUE(o.resume);
  EXPECT_TRUE(o.quiet);
}

TEST(RunOptions, BadFlagsNameTheFlag) {
  EXPECT_EQ(error({"p.pfp", "--bogus"}), "unknown option '--bogus'");
  EXPECT_EQ(error({"p.pfp", "--steps"}), "option --steps needs a value");
  EXPECT_EQ(error({"p.pfp", "--steps", "1e30"}),
            "--steps must be an integer in [0, 1099511627776], got '1e30'");
  EXPECT_EQ(error({"p.pfp", "--comm-timeout", "nan"}),
            "--comm-timeout must be a finite number in [0, 1e+06], got 'nan'");
  EXPECT_EQ(error({"p.pfp", "--backend", "gpu"}),
            "--backend must be cpu, cpu-device or cuda");
  EXPECT_EQ(error({"p.pfp", "--optimizer", "lion"}),
            "--optimizer must be adamw or sgd");
  EXPECT_EQ(error({"p.pfp", "--lr-schedule", "step"}),
            "--lr-schedule: unknown learning-rate schedule 'step' (expected "
            "constant, linear or cosine)");
  EXPECT_EQ(error({"p.pfp", "--inject-nan", "3"}),
            "--inject-nan / PIPEFORGE_INJECT_NAN needs STEP:MB (STEP >= 1, "
            "MB >= 0)");
  EXPECT_EQ(error({"p.pfp", "q.pfp"}), "more than one program file");
  EXPECT_EQ(error({"--steps", "1"}), "no program file");
}

TEST(RunOptions, FlagsAgainstEachOther) {
  EXPECT_EQ(error({"p.pfp", "--zero", "1", "--optimizer", "sgd"}),
            "--zero 1 shards optimizer state: it needs --optimizer adamw");
  EXPECT_EQ(error({"p.pfp", "--resume"}),
            "--save-every and --resume need --checkpoint-dir");
  EXPECT_EQ(error({"p.pfp", "--precision", "bf16"}),
            "--precision bf16 needs --backend cuda");
  EXPECT_EQ(error({"p.pfp", "--local-ranks", "2", "--transport", "mpi"}),
            "--local-ranks runs every rank in this process; it takes no "
            "--transport");
  EXPECT_EQ(error({"p.pfp", "--transport", "nccl"}),
            "--transport nccl needs --backend cuda");
  EXPECT_EQ(error({"p.pfp", "--lr-schedule", "cosine", "--warmup-steps", "20",
                   "--steps", "10"}),
            "--lr-schedule: a cosine schedule needs more decay steps (10) "
            "than warm-up steps (20) (--warmup-steps, --decay-steps, "
            "--min-lr)");
}

TEST(RunOptions, HelpStopsTheParse) {
  RunOptions o;
  EXPECT_FALSE(parse({"--help", "--bogus"}, o));
  EXPECT_TRUE(o.help);
}

TEST(RunOptions, EmbeddedProgram) {
  RunOptions o;
  ASSERT_FALSE(parse({"--steps", "2"}, o, /*embedded=*/true));
  EXPECT_EQ(o.progPath, "pipeforge-run"); // argv[0]
  EXPECT_EQ(parse({"p.pfp"}, o, true).value_or(""),
            "unexpected argument 'p.pfp': this executable carries its "
            "program");
}

TEST(RunOptions, MaxMemory) {
  RunOptions o;
  ASSERT_FALSE(parse({"p.pfp"}, o));
  EXPECT_EQ(o.maxMemory, -1); // auto: what the host (device) has
  EXPECT_FALSE(o.maxMemoryOff);
  RunOptions cap;
  ASSERT_FALSE(
      parse({"p.pfp", "--max-memory", "512MiB", "--memory-plan"}, cap));
  EXPECT_EQ(cap.maxMemory, int64_t(512) << 20);
  EXPECT_TRUE(cap.memoryPlan);
  RunOptions off;
  ASSERT_FALSE(parse({"p.pfp", "--max-memory=off"}, off));
  EXPECT_TRUE(off.maxMemoryOff);
  EXPECT_NE(error({"p.pfp", "--max-memory", "12"})
                .find("--max-memory must be auto, off or a size in bytes"),
            std::string::npos);
}

TEST(RunOptions, UsageText) {
  char *buf = nullptr;
  size_t size = 0;
  std::FILE *f = open_memstream(&buf, &size);
  printRunUsage(f);
  std::fclose(f);
  std::string text(buf, size);
  std::free(buf);
  EXPECT_EQ(
      text,
      "usage: [mpirun -np N] pipeforge-run PROGRAM.pfp [--steps K] [--lr X]\n"
      "         [--optimizer adamw|sgd] [--max-grad-norm X] [--zero 0|1|2|3]\n"
      "         [--weight-decay X [--decay-all]]\n"
      "         [--lr-schedule constant|linear|cosine] [--warmup-steps N]\n"
      "         [--decay-steps N] [--min-lr X]\n"
      "         [--data synthetic|pattern|FILE|PREFIX] [--trace FILE]\n"
      "         [--doc-mask [--eos ID]]\n"
      "         [--dump-weights FILE] [--comm-timeout SECONDS]\n"
      "         [--init-from HF_MODEL_DIR] [--save-hf DIR]\n"
      "         [--recv-lookahead N] [--quiet] [--no-fuse] [--memory-report]\n"
      "         [--max-memory auto|off|BYTES] [--memory-plan]\n"
      "         [--print-placement] [--rank-layout pp-fastest|dp-fastest]\n"
      "         [--checkpoint-dir DIR [--save-every K] [--resume]]\n"
      "         [--optimizer-sync sync|post-validation] [--clip X]\n"
      "         [--skip-step K] [--inject-nan STEP:MB]\n"
      "         [--backend cpu|cpu-device|cuda] [--precision fp32|bf16]\n"
      "         [--device K] [--local-ranks N] [--transport mpi|nccl]\n"
      "         [--async-compute] [--device-collectives]\n"
      "         [--overlap-grad-reduce on|off] [--grad-bucket-mb X]\n"
      "         [--offload-activations off|auto|all]\n"
      "       pipeforge-run --compare-weights A B [--rtol R] [--atol A]\n"
      "  (an executable from pipeforge-compile --emit exe takes the same\n"
      "  options without PROGRAM.pfp)\n");
}

} // namespace
