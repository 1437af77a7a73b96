//===- FlagTableTest.cpp - The shared table of flags ----------------------===//
//
// pipeforge::flags (Support/FlagTable.h), the parser of pipeforge-run,
// pipeforge-export, pipeforge-tokenize and pipeforge-sched: each kind of
// field, a value after '=', the messages of a bad flag, positional
// arguments, the stop at --help, and the two renderings of the usage text
// (synopsis, option list).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Support/FlagTable.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace pipeforge::flags;

namespace {

struct Opts {
  bool quiet = false, help = false;
  int64_t n = 1;
  int k = 0;
  double x = 0;
  std::string file, mode = "a";
  std::vector<std::string> rest;
  std::string pair;
};

std::optional<std::string> setPair(Opts &o, const std::string &v) {
  if (v.find(':') == std::string::npos)
    return std::string("--pair needs A:B");
  o.pair = v;
  return std::nullopt;
}

const Flag<Opts> kTable[] = {
    {"--n", "N", Place::Next, &Opts::n, 0, 9, false, "how many"},
    {"--x", "X", Place::Next, &Opts::x, 0, 1},
    {"--mode", "a|b|c", Place::Line, &Opts::mode, 0, 0, true,
     "the mode\nof the run"},
    {"--quiet", nullptr, Place::Inside, &Opts::quiet},
    {"--file", "FILE", Place::Line, &Opts::file},
    {"--pair", "A:B", Place::Next, setPair},
    {"--k", "K", Place::Hidden, &Opts::k, -2, 2},
    {"--help", nullptr, Place::Hidden, &Opts::help},
};

std::optional<std::string> parse(std::vector<std::string> args, Opts &o) {
  args.insert(args.begin(), "tool");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return parseFlags(
      kTable, int(argv.size()), argv.data(), o,
      [&](const std::string &a) -> std::optional<std::string> {
        o.rest.push_back(a);
        return std::nullopt;
      },
      &Opts::help);
}

std::string error(std::vector<std::string> args) {
  Opts o;
  return parse(std::move(args), o).value_or("");
}

TEST(FlagTable, EveryKindOfField) {
  Opts o;
  ASSERT_FALSE(parse({"in", "--n", "3", "--x", "0.5", "--mode", "b",
                      "--quiet", "--file", "f", "--pair", "1:2", "--k", "-1",
                      "more"},
                     o));
  EXPECT_EQ(o.n, 3);
  EXPECT_EQ(o.k, -1);
  EXPECT_EQ(o.x, 0.5);
  EXPECT_EQ(o.mode, "b");
  EXPECT_TRUE(o.quiet);
  EXPECT_EQ(o.file, "f");
  EXPECT_EQ(o.pair, "1:2");
  EXPECT_EQ(o.rest, (std::vector<std::string>{"in", "more"}));
}

TEST(FlagTable, BadFlagsNameTheFlag) {
  EXPECT_EQ(error({"--bogus"}), "unknown option '--bogus'");
  EXPECT_EQ(error({"-"}), "unknown option '-'");
  EXPECT_EQ(error({"--n"}), "option --n needs a value");
  EXPECT_EQ(error({"--n", "10"}), "--n must be an integer in [0, 9], got '10'");
  EXPECT_EQ(error({"--x", "2"}),
            "--x must be a finite number in [0, 1], got '2'");
  EXPECT_EQ(error({"--mode", "d"}), "--mode must be a, b or c");
  EXPECT_EQ(error({"--pair", "1"}), "--pair needs A:B");
  EXPECT_EQ(error({"--k", "3"}), "--k must be an integer in [-2, 2], got '3'");
}

TEST(FlagTable, ValueAfterEquals) {
  Opts o;
  ASSERT_FALSE(parse({"--n=3", "--mode=c", "--file=a=b", "--k=-2"}, o));
  EXPECT_EQ(o.n, 3);
  EXPECT_EQ(o.mode, "c");
  EXPECT_EQ(o.file, "a=b");
  EXPECT_EQ(o.k, -2);
  EXPECT_EQ(error({"--n=10"}), "--n must be an integer in [0, 9], got '10'");
  EXPECT_EQ(error({"--n="}), "--n must be an integer in [0, 9], got ''");
  // A switch takes no value; an unknown flag is named whole.
  EXPECT_EQ(error({"--quiet=1"}), "unknown option '--quiet=1'");
  EXPECT_EQ(error({"--bogus=1"}), "unknown option '--bogus=1'");
}

TEST(FlagTable, HelpStopsTheParse) {
  Opts o;
  EXPECT_FALSE(parse({"--help", "--bogus"}, o));
  EXPECT_TRUE(o.help);
}

TEST(FlagTable, Synopsis) {
  EXPECT_EQ(synopsis(kTable, "\n  "), " [--n N] [--x X]\n"
                                      "  [--mode a|b|c [--quiet]]\n"
                                      "  [--file FILE] [--pair A:B]");
}

TEST(FlagTable, OptionList) {
  // The help column: two spaces after the longest "  --flag VALUE".
  EXPECT_EQ(optionList(kTable), "  --n N         how many\n"
                                "  --mode a|b|c  the mode\n"
                                "                of the run\n");
}

} // namespace
