//===- CommInsertionTest.cpp - Tests of send/recv insertion ---------------===//
//
// A small rendezvous executor proves every generated schedule runs to the
// end without deadlock once messages are inserted: a Send and its Recv
// complete together, only when both ranks are at them; a compute action
// never waits, so its inputs must already be local (produced on the rank or
// received).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Verify.h"

#include "GenTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testutil;

namespace {

/// (payload, copy, stage, mb) of a message.
using MsgId = std::tuple<int, int, int, int>;

MsgId msgId(const Action &a) {
  return {int(a.payload), a.work.copy, a.work.stage, a.work.mb};
}

/// Runs the programs under rendezvous semantics. Returns "" or the problem.
std::string runRendezvous(const Schedule &s, size_t *numMessages = nullptr) {
  const int n = s.numRanks();
  const int last = s.placement.numStages - 1;
  std::vector<size_t> pc(n, 0);
  // done[rank]: works completed locally; have[rank]: messages received.
  std::vector<std::set<std::tuple<int, int, int, int>>> done(n);
  std::vector<std::set<MsgId>> have(n);
  size_t msgs = 0;

  auto key = [](const Work &w, int kindClass) {
    return std::make_tuple(kindClass, int(w.copy), int(w.stage), int(w.mb));
  };
  // Input available on rank r? kindClass 0 = F output, 1 = B output.
  auto available = [&](int r, int cls, const Work &producer) {
    if (s.placement.rank(producer.copy, producer.stage) == r)
      return done[r].count(key(producer, cls)) > 0;
    return have[r].count({cls == 0 ? int(Payload::Activation)
                                   : int(Payload::Gradient),
                          producer.copy, producer.stage, producer.mb}) > 0;
  };
  auto inputsReady = [&](int r, const Work &w) -> bool {
    Work p = w;
    switch (w.kind) {
    case WorkKind::F:
      if (w.stage == 0)
        return true;
      p.stage = w.stage - 1;
      return available(r, 0, p);
    case WorkKind::B:
    case WorkKind::BW:
      if (!done[r].count(key(w, 0)))
        return false;
      if (w.stage == last)
        return true;
      p.stage = w.stage + 1;
      return available(r, 1, p);
    case WorkKind::W:
      return done[r].count(key(w, 1)) > 0;
    }
    return false;
  };
  auto finish = [&](int r, const Work &w) {
    if (w.kind == WorkKind::F)
      done[r].insert(key(w, 0));
    else if (w.kind != WorkKind::W)
      done[r].insert(key(w, 1));
  };

  std::vector<int> work;
  for (int r = 0; r < n; ++r)
    work.push_back(r);
  std::string err;
  auto advance = [&](int r) {
    // Run r until it is at a message whose peer is not ready, or done.
    while (pc[r] < s.programs[r].size()) {
      const Action &a = s.programs[r][pc[r]];
      if (a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap) {
        if (!inputsReady(r, a.work) ||
            (a.kind == ActionKind::Overlap && !inputsReady(r, a.work2))) {
          err = "rank " + std::to_string(r) + " step " +
                std::to_string(pc[r]) + " " + toString(a) +
                " runs without its input";
          return;
        }
        finish(r, a.work);
        if (a.kind == ActionKind::Overlap)
          finish(r, a.work2);
        ++pc[r];
        continue;
      }
      const int q = a.peer;
      if (q < 0 || q >= n || q == r) {
        err = "bad peer in " + toString(a);
        return;
      }
      if (a.kind == ActionKind::Send &&
          !done[r].count(key(a.work, a.payload == Payload::Activation ? 0 : 1))) {
        err = "send before its producer: " + toString(a);
        return;
      }
      if (pc[q] >= s.programs[q].size())
        return; // blocked; the peer finished (reported at the end)
      const Action &b = s.programs[q][pc[q]];
      bool match = false;
      if (a.kind == ActionKind::GradReduce)
        match = b.kind == ActionKind::GradReduce && b.peer == r;
      else
        match = b.peer == r &&
                ((a.kind == ActionKind::Send && b.kind == ActionKind::Recv) ||
                 (a.kind == ActionKind::Recv && b.kind == ActionKind::Send)) &&
                msgId(a) == msgId(b);
      if (!match)
        return; // blocked until the peer comes here
      if (a.kind == ActionKind::Send)
        have[q].insert(msgId(a));
      else if (a.kind == ActionKind::Recv)
        have[r].insert(msgId(a));
      ++msgs;
      ++pc[r];
      ++pc[q];
      work.push_back(q);
    }
  };
  while (!work.empty() && err.empty()) {
    int r = work.back();
    work.pop_back();
    advance(r);
  }
  if (!err.empty())
    return err;
  for (int r = 0; r < n; ++r)
    if (pc[r] != s.programs[r].size())
      return "deadlock: rank " + std::to_string(r) + " stuck at step " +
             std::to_string(pc[r]) + " " + toString(s.programs[r][pc[r]]);
  if (numMessages)
    *numMessages = msgs;
  return "";
}

/// Cross-rank edges the schedule needs (F -> F(s+1), B -> B(s-1)).
size_t expectedMessages(const Schedule &s) {
  const Placement &pl = s.placement;
  size_t n = 0;
  for (int c = 0; c < pl.numCopies; ++c)
    for (int st = 0; st + 1 < pl.numStages; ++st)
      if (pl.rank(c, st) != pl.rank(c, st + 1))
        n += 2 * size_t(s.numMicrobatches);
  return n;
}

TEST(CommInsertion, SweepNoDeadlock) {
  for (const GenCase &c : sweepCases()) {
    Expected<Schedule> s = generate(c.kind, c.opts);
    ASSERT_TRUE(s.isOk()) << c.label();
    Status st = insertComm(*s);
    ASSERT_TRUE(st.isOk()) << c.label() << ": " << st.message();
    EXPECT_TRUE(s->hasComm);
    ASSERT_EQ(checkComputeStructure(*s), "") << c.label();
    size_t msgs = 0, sends = 0, reduces = 0;
    for (int r = 0; r < s->numRanks(); ++r)
      for (const Action &a : s->programs[r]) {
        if (a.kind == ActionKind::Send) {
          ++sends;
          int src = s->placement.rank(a.work.copy, a.work.stage);
          int dstStage = a.payload == Payload::Activation ? a.work.stage + 1
                                                          : a.work.stage - 1;
          int dst = s->placement.rank(a.work.copy, dstStage);
          ASSERT_EQ(src, r) << c.label();
          ASSERT_EQ(dst, a.peer) << c.label();
          ASSERT_NE(src, dst) << c.label() << " same-rank message";
        }
        if (a.kind == ActionKind::GradReduce) {
          ++reduces;
          ASSERT_EQ(a.peer, s->numRanks() - 1 - r);
        }
      }
    EXPECT_EQ(sends, expectedMessages(*s)) << c.label();
    EXPECT_EQ(reduces,
              s->placement.numCopies == 2 ? size_t(s->numRanks()) : 0u)
        << c.label();
    std::string problem = runRendezvous(*s, &msgs);
    ASSERT_EQ(problem, "") << c.label();
    Status v = verify(*s);
    ASSERT_TRUE(v.isOk()) << c.label() << ": " << v.message();
    EXPECT_EQ(msgs, sends + reduces / 2) << c.label();
  }
}

TEST(CommInsertion, SameRankHandOffsHaveNoMessage) {
  // V bottom: stage N-1 -> N is on rank N-1 for ZB-V and DualPipeV.
  for (ScheduleKind k : {ScheduleKind::ZBV, ScheduleKind::DualPipeV}) {
    GenOptions o;
    o.ranks = 4;
    o.microbatches = 8;
    Expected<Schedule> s = generate(k, o);
    ASSERT_TRUE(s.isOk());
    ASSERT_TRUE(insertComm(*s).isOk());
    for (int r = 0; r < 4; ++r)
      for (const Action &a : s->programs[r])
        if (a.kind == ActionKind::Send || a.kind == ActionKind::Recv) {
          EXPECT_NE(a.peer, r);
          bool bottom = (a.payload == Payload::Activation && a.work.stage == 3) ||
                        (a.payload == Payload::Gradient && a.work.stage == 4);
          EXPECT_FALSE(bottom) << toString(a);
        }
  }
  // Interleaved with one rank per... p = 2, v = 2: stage 1 -> 2 crosses
  // ranks 1 -> 0; none is local, every edge has a message.
  GenOptions o;
  o.ranks = 2;
  o.microbatches = 4;
  Expected<Schedule> s = generate(ScheduleKind::Interleaved, o);
  ASSERT_TRUE(s.isOk());
  ASSERT_TRUE(insertComm(*s).isOk());
  EXPECT_EQ(runRendezvous(*s), "");
}

TEST(CommInsertion, SingleRankHasNoMessages) {
  GenOptions o;
  o.ranks = 1;
  o.microbatches = 4;
  for (ScheduleKind k : {ScheduleKind::OneFOneB, ScheduleKind::ZBV,
                         ScheduleKind::DualPipeV}) {
    Expected<Schedule> s = generate(k, o);
    ASSERT_TRUE(s.isOk());
    size_t before = s->programs[0].size();
    ASSERT_TRUE(insertComm(*s).isOk());
    EXPECT_EQ(s->programs[0].size(), before);
  }
}

TEST(CommInsertion, OverlapInputsBeforeOutputsAfter) {
  GenOptions o;
  o.ranks = 4;
  o.microbatches = 16;
  Expected<Schedule> s = generate(ScheduleKind::DualPipe, o);
  ASSERT_TRUE(s.isOk());
  ASSERT_TRUE(insertComm(*s).isOk());
  for (int r = 0; r < 4; ++r) {
    const auto &prog = s->programs[r];
    for (size_t i = 0; i < prog.size(); ++i) {
      if (prog[i].kind != ActionKind::Overlap)
        continue;
      for (const Work &w : {prog[i].work, prog[i].work2}) {
        // Its outgoing message (if any) comes after the pair.
        for (size_t j = 0; j < i; ++j)
          if (prog[j].kind == ActionKind::Send && prog[j].work == w)
            ADD_FAILURE() << "send before pair " << toString(prog[i]);
      }
    }
  }
  // GradReduce is last, peers r and N-1-r.
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(toString(s->programs[r].back()),
              "GRADREDUCE <->r" + std::to_string(3 - r));
}

TEST(CommInsertion, StripAndReinsert) {
  GenOptions o;
  o.ranks = 4;
  o.microbatches = 8;
  Expected<Schedule> s = generate(ScheduleKind::ZBH1, o);
  ASSERT_TRUE(s.isOk());
  Schedule orig = *s;
  ASSERT_TRUE(insertComm(*s).isOk());
  Schedule withComm = *s;
  EXPECT_FALSE(insertComm(*s).isOk()); // already has messages
  stripComm(*s);
  EXPECT_FALSE(s->hasComm);
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(programText(*s, r), programText(orig, r));
  ASSERT_TRUE(insertComm(*s).isOk());
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(programText(*s, r), programText(withComm, r)); // deterministic
}

TEST(CommInsertion, ExecutorDetectsDeadlock) {
  // Sanity check of the test's executor: rank 1 waiting for a gradient
  // before it has forwarded anything blocks the whole pipeline.
  GenOptions o;
  o.ranks = 3;
  o.microbatches = 4;
  Expected<Schedule> s = generate(ScheduleKind::OneFOneB, o);
  ASSERT_TRUE(s.isOk());
  ASSERT_TRUE(insertComm(*s).isOk());
  auto &prog = s->programs[1];
  auto it = std::find_if(prog.begin(), prog.end(), [](const Action &a) {
    return a.kind == ActionKind::Recv && a.payload == Payload::Gradient;
  });
  ASSERT_NE(it, prog.end());
  Action recv = *it;
  prog.erase(it);
  prog.insert(prog.begin(), recv);
  EXPECT_NE(runRendezvous(*s).find("deadlock"), std::string::npos);
}

TEST(CommInsertion, RejectsBadPrograms) {
  GenOptions o;
  o.ranks = 3;
  o.microbatches = 4;
  Expected<Schedule> s = generate(ScheduleKind::OneFOneB, o);
  ASSERT_TRUE(s.isOk());

  Schedule cyc = *s; // rank 1 runs its first backward before any forward
  std::swap(cyc.programs[1][0], cyc.programs[1].back());
  Status st = insertComm(cyc);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("cannot run"), std::string::npos) << st.message();

  Schedule dup = *s;
  dup.programs[0].push_back(dup.programs[0][0]);
  st = insertComm(dup);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("more than once"), std::string::npos)
      << st.message();

  Schedule wrong = *s;
  wrong.programs[0][0].work.stage = 2;
  st = insertComm(wrong);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("lives on rank 2"), std::string::npos)
      << st.message();

  Schedule missing = *s;
  missing.programs[0].erase(missing.programs[0].begin());
  st = insertComm(missing);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("never scheduled"), std::string::npos)
      << st.message();

  Schedule range = *s;
  range.programs[2][0].work.mb = 99;
  EXPECT_FALSE(insertComm(range).isOk());
}

// The generators leave room for the messages and insertComm fills the
// program from the back: no copy of the program (the same buffer before
// and after), and the same messages in the same places as a merge into a
// fresh program (a schedule whose programs were copied, so without room).
TEST(CommInsertion, GeneratedProgramsTakeTheirMessagesInPlace) {
  for (const GenCase &c : sweepCases(6)) {
    Expected<Schedule> g = generate(c.kind, c.opts);
    ASSERT_TRUE(bool(g)) << c.label();
    Schedule s = g.take();
    // A copy keeps the actions, not the room: its merge reallocates.
    Schedule copied;
    copied.name = s.name;
    copied.numMicrobatches = s.numMicrobatches;
    copied.placement = s.placement;
    for (const std::vector<Action> &prog : s.programs)
      copied.programs.emplace_back(prog.begin(), prog.end());
    std::vector<const Action *> before;
    for (const std::vector<Action> &prog : s.programs)
      before.push_back(prog.data());
    ASSERT_TRUE(insertComm(s).isOk()) << c.label();
    ASSERT_TRUE(insertComm(copied).isOk()) << c.label();
    for (size_t r = 0; r < s.programs.size(); ++r) {
      EXPECT_EQ(s.programs[r].data(), before[r])
          << c.label() << " rank " << r << " was reallocated";
      EXPECT_TRUE(s.programs[r] == copied.programs[r])
          << c.label() << " rank " << r;
    }
    EXPECT_TRUE(verify(s).isOk()) << c.label();
  }
}

} // namespace

// Issue 43: times large next to an action's length (F 1e16, B 0.5: the
// replay's start + length rounds back to start) tied a producer's end with
// its start, and a correct schedule got a Send before its producer ("sends
// F0.2 before producing it"). Every schedule verifies at such costs.
TEST(CommInsertion, LargeTimesKeepSendsAfterTheirProducers) {
  for (ScheduleKind k : {ScheduleKind::OneFOneB, ScheduleKind::ZBH1,
                         ScheduleKind::ZBV, ScheduleKind::DualPipeV,
                         ScheduleKind::Interleaved}) {
    GenOptions g;
    g.ranks = 2;
    g.microbatches = 4;
    Schedule s = *generate(k, g);
    CostModel c;
    c.tf = 1e16;
    c.tb = 0.5;
    c.tw = 0.25;
    ASSERT_TRUE(insertComm(s, c).isOk()) << scheduleKindName(k);
    VerifyOptions vo;
    vo.cost = c;
    Status st = verify(s, vo);
    EXPECT_TRUE(st.isOk()) << scheduleKindName(k) << ": " << st.message();
  }
}
