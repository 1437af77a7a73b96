//===- GeneratorsTest.cpp - Tests of the handcrafted schedule generators --===//

#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Verify.h"

#include "GenTestUtil.h"

#include <gtest/gtest.h>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testutil;

namespace {

Schedule gen(ScheduleKind k, int p, int m, int v = 2) {
  GenOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.chunksPerRank = v;
  Expected<Schedule> s = generate(k, o);
  EXPECT_TRUE(s.isOk()) << s.message();
  return s.isOk() ? s.take() : Schedule();
}

/// Number of compute actions of `rank` before its first backward.
int forwardsBeforeFirstBackward(const Schedule &s, int rank) {
  int n = 0;
  for (const Action &a : s.programs[rank]) {
    if (a.kind != ActionKind::Compute || a.work.kind != WorkKind::F)
      break;
    ++n;
  }
  return n;
}

TEST(Generators, SweepStructure) {
  size_t n = 0;
  for (const GenCase &c : sweepCases()) {
    Expected<Schedule> s = generate(c.kind, c.opts);
    ASSERT_TRUE(s.isOk()) << c.label() << ": " << s.message();
    EXPECT_FALSE(s->hasComm) << c.label();
    EXPECT_EQ(s->name, scheduleKindName(c.kind)) << c.label();
    std::string problem = checkComputeStructure(*s);
    ASSERT_EQ(problem, "") << c.label();
    for (const auto &prog : s->programs)
      for (const Action &a : prog)
        ASSERT_FALSE(a.isComm()) << c.label();
    Status v = verify(*s);
    ASSERT_TRUE(v.isOk()) << c.label() << ": " << v.message();
    ++n;
  }
  EXPECT_GT(n, 1500u);
}

TEST(Generators, Placements) {
  Schedule s = gen(ScheduleKind::DualPipe, 4, 16);
  EXPECT_EQ(s.numMicrobatches, 8);
  EXPECT_EQ(s.placement.numCopies, 2);
  EXPECT_EQ(s.placement.rank(1, 0), 3);
  s = gen(ScheduleKind::DualPipeV, 4, 8);
  EXPECT_EQ(s.numMicrobatches, 8);
  EXPECT_EQ(s.placement.numStages, 8);
  EXPECT_EQ(s.placement.rank(0, 7), 0);
  s = gen(ScheduleKind::ZBV, 4, 8);
  EXPECT_EQ(s.placement.numStages, 8);
  s = gen(ScheduleKind::Interleaved, 4, 8, 3);
  EXPECT_EQ(s.placement.numStages, 12);
  EXPECT_EQ(s.placement.rank(0, 9), 1);
}

TEST(Generators, OneFOneBWarmup) {
  const int p = 5, m = 12;
  Schedule s = gen(ScheduleKind::OneFOneB, p, m);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(forwardsBeforeFirstBackward(s, r), p - r);
    for (const Action &a : s.programs[r])
      EXPECT_NE(a.work.kind, WorkKind::B);
  }
  EXPECT_EQ(programText(s, p - 1).substr(0, 23), "F4.0 BW4.0 F4.1 BW4.1 F");
}

TEST(Generators, GPipeAllForwardsFirst) {
  Schedule s = gen(ScheduleKind::GPipe, 3, 4);
  EXPECT_EQ(programText(s, 1), "F1.0 F1.1 F1.2 F1.3 BW1.0 BW1.1 BW1.2 BW1.3");
}

TEST(Generators, ZBH1Exact) {
  Schedule s = gen(ScheduleKind::ZBH1, 4, 6);
  // Rank 0 runs W right away; the last rank delays W by p-1 iterations.
  EXPECT_EQ(programText(s, 0), "F0.0 F0.1 F0.2 F0.3 B0.0 W0.0 F0.4 B0.1 W0.1 "
                               "F0.5 B0.2 W0.2 B0.3 W0.3 B0.4 W0.4 B0.5 W0.5");
  EXPECT_EQ(programText(s, 3), "F3.0 B3.0 F3.1 B3.1 F3.2 B3.2 F3.3 B3.3 W3.0 "
                               "F3.4 B3.4 W3.1 F3.5 B3.5 W3.2 W3.3 W3.4 W3.5");
}

TEST(Generators, ZBH2Warmup) {
  const int p = 4;
  Schedule s = gen(ScheduleKind::ZBH2, p, 2 * p);
  for (int r = 0; r < p; ++r)
    EXPECT_EQ(forwardsBeforeFirstBackward(s, r), 2 * (p - r - 1) + 1);
}

TEST(Generators, InterleavedMegatronOrder) {
  // p = 2, v = 2, m = 4: forwards sweep groups of p microbatches per chunk.
  Schedule s = gen(ScheduleKind::Interleaved, 2, 4, 2);
  // Rank 0 warm-up: 2(p-1) + (v-1)p = 4 forwards.
  EXPECT_EQ(programText(s, 0), "F0.0 F0.1 F2.0 F2.1 F0.2 BW2.0 F0.3 BW2.1 "
                               "F2.2 BW0.0 F2.3 BW0.1 BW2.2 BW2.3 BW0.2 BW0.3");
}

TEST(Generators, ZBVWarmup) {
  // Worker i (1-based) runs 2p-i forwards of chunk 1 and i-1 of chunk 2
  // before its first B (the next pass is the chunk-2 forward feeding it).
  for (int p : {2, 4, 7}) {
    Schedule s = gen(ScheduleKind::ZBV, p, 3 * p);
    for (int r = 0; r < p; ++r) {
      int f0 = 0, f1 = 0;
      const auto &prog = s.programs[r];
      size_t i = 0;
      for (; i < prog.size() && prog[i].work.kind == WorkKind::F; ++i)
        (prog[i].work.stage == r ? f0 : f1)++;
      EXPECT_EQ(f0, 2 * p - (r + 1)) << "p=" << p << " r=" << r;
      EXPECT_EQ(f1, r + 1) << "p=" << p << " r=" << r;
      ASSERT_LT(i, prog.size());
      EXPECT_EQ(toString(prog[i]), "B" + std::to_string(2 * p - 1 - r) + ".0");
    }
  }
}

TEST(Generators, DualPipeVExact) {
  Schedule s = gen(ScheduleKind::DualPipeV, 2, 4);
  EXPECT_EQ(programText(s, 0),
            "F0.0 F0.1 F0.2 F3.0 B3.0 W3.0 F3.1 F0.3+BW3.1 F3.2+BW0.0 "
            "BW3.2 F3.3+BW0.1 BW3.3 B0.2 W0.2 B0.3 W0.3");
  // The last rank runs the first step-4 pair serially.
  EXPECT_EQ(programText(s, 1),
            "F1.0 F2.0 F1.1 F2.1 F1.2 BW2.0 F2.2+BW1.0 F1.3+BW2.1 "
            "F2.3+BW1.1 BW2.2 BW1.2 B2.3 B1.3 W2.3 W1.3");
}

TEST(Generators, DualPipeMiddleRanksAndPhases) {
  const int n = 6, c = 24; // C2 = 12
  Schedule s = gen(ScheduleKind::DualPipe, n, c);
  for (int r = 0; r < n; ++r) {
    const int h = std::min(r, n - 1 - r), half = n / 2;
    const bool second = r >= half;
    const auto &prog = s.programs[r];
    // Phase 0 is the direction reaching this rank first.
    ASSERT_FALSE(prog.empty());
    EXPECT_EQ(prog[0].work.copy, second ? 1 : 0) << r;
    // Step 1 + 2 = 2(H-h-1) + 2(h+1) forwards before the first backward,
    // plus the serial F of step 4 on the middle ranks (no step 3 there).
    const bool middle = r == half - 1 || r == half;
    EXPECT_EQ(forwardsBeforeFirstBackward(s, r),
              2 * (half - h - 1) + 2 * (h + 1) + (middle ? 1 : 0))
        << r;
    // Overlapped pairs: 2 * steps4 + steps5, minus one serial pair in the
    // middle.
    int pairs = 0;
    for (const Action &a : prog)
      pairs += a.kind == ActionKind::Overlap;
    int steps4 = c / 2 - n + h + 1;
    EXPECT_EQ(pairs, 2 * steps4 + (half - h - 1) - (middle ? 1 : 0)) << r;
    // W runs: (H-h-1) in step 3 and h+1 + (H-h-1) deferred ones.
    int ws = 0, bs = 0;
    for (const Action &a : prog) {
      ws += a.kind == ActionKind::Compute && a.work.kind == WorkKind::W;
      bs += a.kind == ActionKind::Compute && a.work.kind == WorkKind::B;
    }
    EXPECT_EQ(ws, 2 * (half - h - 1) + h + 1) << r;
    EXPECT_EQ(bs, ws) << r;
    // The program ends with the h+1 step-8 W.
    for (int k = 0; k < h + 1; ++k)
      EXPECT_EQ(prog[prog.size() - 1 - k].work.kind, WorkKind::W) << r;
  }
  // The middle ranks' first step-4 pair is a plain F, then a full BW, then
  // the usual overlapped [F1 & B0].
  for (int r : {n / 2 - 1, n / 2}) {
    const auto &mid = s.programs[r];
    size_t firstBack = forwardsBeforeFirstBackward(s, r);
    EXPECT_EQ(mid[firstBack - 1].kind, ActionKind::Compute);
    EXPECT_EQ(mid[firstBack].kind, ActionKind::Compute);
    EXPECT_EQ(mid[firstBack].work.kind, WorkKind::BW);
    EXPECT_EQ(mid[firstBack + 1].kind, ActionKind::Overlap);
  }
  // Non-middle ranks start step 4 overlapped (rank 0 has step 3 first).
  const auto &r1 = s.programs[1];
  EXPECT_EQ(r1[forwardsBeforeFirstBackward(s, 1) + 3 * 1].kind,
            ActionKind::Overlap);
}

TEST(Generators, Step6SplitsFullAndInputOnly) {
  // DualPipeV, last rank: no steps 3, 5, 7; step 6 is 2N backwards, the
  // first N full.
  const int n = 4, c = 10;
  Schedule s = gen(ScheduleKind::DualPipeV, n, c);
  const auto &prog = s.programs[n - 1];
  // Tail = step 6 (2n backwards) + step 8 (n W).
  ASSERT_GE(prog.size(), size_t(3 * n));
  size_t tail = prog.size() - 3 * n;
  for (int k = 0; k < 2 * n; ++k) {
    const Action &a = prog[tail + k];
    ASSERT_EQ(a.kind, ActionKind::Compute);
    EXPECT_EQ(a.work.kind, k < n ? WorkKind::BW : WorkKind::B) << k;
  }
  // W FIFO: the W come out in the order the B were queued.
  for (int k = 0; k < n; ++k) {
    const Work &b = prog[tail + n + k].work;
    const Work &w = prog[tail + 2 * n + k].work;
    EXPECT_EQ(w.kind, WorkKind::W);
    EXPECT_EQ(w.stage, b.stage);
    EXPECT_EQ(w.mb, b.mb);
  }
}

TEST(Generators, MinMicrobatches) {
  EXPECT_EQ(minMicrobatches(ScheduleKind::ZBH2, 4), 8);
  EXPECT_EQ(minMicrobatches(ScheduleKind::DualPipe, 4), 8);
  EXPECT_EQ(minMicrobatches(ScheduleKind::DualPipeV, 4), 8);
  EXPECT_EQ(minMicrobatches(ScheduleKind::Interleaved, 4, 2), 4);
  EXPECT_EQ(minMicrobatches(ScheduleKind::OneFOneB, 4), 1);
  EXPECT_EQ(minMicrobatches(ScheduleKind::ZBV, 4), 1);
  // Below the minimum is an error, at it is fine. (Interleaved's minimum is
  // the compile path's, p; generate() also takes PyTorch's m < p: one
  // round of m.)
  for (ScheduleKind k : {ScheduleKind::ZBH2, ScheduleKind::DualPipe,
                         ScheduleKind::DualPipeV}) {
    GenOptions o;
    o.ranks = 4;
    o.microbatches = minMicrobatches(k, 4);
    EXPECT_TRUE(generate(k, o).isOk()) << scheduleKindName(k);
    o.microbatches -= (k == ScheduleKind::DualPipe ? 2 : 1);
    EXPECT_FALSE(generate(k, o).isOk()) << scheduleKindName(k);
  }
}

struct BadCase {
  ScheduleKind kind;
  int ranks, mb, v;
  const char *expect;
};

TEST(Generators, InvalidRequests) {
  const BadCase cases[] = {
      {ScheduleKind::DualPipe, 3, 12, 2,
       "dualpipe needs an even number of ranks, got 3"},
      {ScheduleKind::DualPipe, 4, 9, 2, "even number of microbatches"},
      {ScheduleKind::DualPipe, 4, 6, 2, "at least 2 * ranks = 8 microbatches"},
      {ScheduleKind::DualPipe, 0, 8, 2, "at least 2 ranks, got 0"},
      {ScheduleKind::DualPipeV, 4, 7, 2, "dualpipev needs at least 2 * ranks"},
      {ScheduleKind::DualPipeV, 0, 8, 2, "at least 1 rank, got 0"},
      {ScheduleKind::ZBH2, 4, 7, 2, "zb-h2 needs at least 2 * ranks = 8"},
      {ScheduleKind::Interleaved, 4, 9, 2, "max(1, m / p) = 2 (PyTorch)"},
      {ScheduleKind::Interleaved, 4, 8, 1, "at least 2 chunks per rank"},
      {ScheduleKind::Interleaved, 1, 8, 2, "at least 2 ranks"},
      {ScheduleKind::OneFOneB, -3, 8, 2, "at least 1 rank, got -3"},
      {ScheduleKind::GPipe, 4, 0, 2, "at least 1 microbatch, got 0"},
      {ScheduleKind::ZBV, 4, -1, 2, "at least 1 microbatch"},
      {ScheduleKind::ZBH1, 1 << 20, 8, 2, "at most"},
      {ScheduleKind::GPipe, 1 << 15, 1 << 20, 2, "too large"},
      {ScheduleKind::Auto, 4, 8, 2, "automatic scheduler"},
  };
  for (const BadCase &c : cases) {
    GenOptions o;
    o.ranks = c.ranks;
    o.microbatches = c.mb;
    o.chunksPerRank = c.v;
    Expected<Schedule> s = generate(c.kind, o);
    ASSERT_FALSE(s.isOk()) << scheduleKindName(c.kind) << " " << c.ranks;
    EXPECT_NE(s.message().find(c.expect), std::string::npos)
        << "got: " << s.message();
  }
}

TEST(Generators, SingleRank) {
  for (ScheduleKind k :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZBH1,
        ScheduleKind::ZBH2, ScheduleKind::ZBV, ScheduleKind::DualPipeV}) {
    Schedule s = gen(k, 1, 4);
    EXPECT_EQ(checkComputeStructure(s), "") << scheduleKindName(k);
  }
}


// Interleaved's two order rules: they agree where p divides m and m > p;
// PyTorch's takes m = 6 on 4 ranks (one round of 6), Megatron's refuses it;
// at m = p Megatron runs every forward first and PyTorch does not.
TEST(Generators, InterleavedRules) {
  auto gen = [](int p, int m, InterleavedRule rule) {
    GenOptions o;
    o.ranks = p;
    o.microbatches = m;
    o.chunksPerRank = 2;
    o.interleavedRule = rule;
    return generate(ScheduleKind::Interleaved, o);
  };
  auto orders = [](const Schedule &s) {
    std::vector<std::string> out;
    for (const auto &prog : s.programs) {
      std::string row;
      for (const Action &a : prog)
        row += toString(a) + " ";
      out.push_back(row);
    }
    return out;
  };
  auto meg = gen(4, 8, InterleavedRule::Megatron);
  auto pt = gen(4, 8, InterleavedRule::PyTorch);
  ASSERT_TRUE(meg && pt);
  EXPECT_EQ(orders(*meg), orders(*pt));
  EXPECT_FALSE(gen(4, 6, InterleavedRule::Megatron));
  auto six = gen(4, 6, InterleavedRule::Auto);
  ASSERT_TRUE(six);
  EXPECT_EQ(orders(*six), orders(*gen(4, 6, InterleavedRule::PyTorch)));
  auto megP = gen(4, 4, InterleavedRule::Megatron);
  auto ptP = gen(4, 4, InterleavedRule::PyTorch);
  ASSERT_TRUE(megP && ptP);
  // Rank 3: Megatron's 8 forwards first; PyTorch's warm-up is (v-1) p = 4
  // forwards, then F and BW alternate.
  EXPECT_EQ(megP->programs[3][7].work.kind, WorkKind::F);
  EXPECT_EQ(megP->programs[3][8].work.kind, WorkKind::BW);
  EXPECT_EQ(ptP->programs[3][4].work.kind, WorkKind::F);
  EXPECT_EQ(ptP->programs[3][5].work.kind, WorkKind::BW);
  EXPECT_EQ(orders(*gen(4, 4, InterleavedRule::Auto)), orders(*megP));
  EXPECT_FALSE(parseInterleavedRule("zigzag"));
  EXPECT_EQ(*parseInterleavedRule("pytorch"), InterleavedRule::PyTorch);
}

} // namespace
