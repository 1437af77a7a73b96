//===- VerifyTest.cpp - Tests for the schedule verifier -------------------===//
//
// One test per distinct error path, plus valid schedules with and without
// messages.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Verify.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Offload.h"

#include "HandSchedules.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testing;

namespace {

#define EXPECT_VERIFY_ERROR(sched, text)                                       \
  do {                                                                         \
    Status st_ = verify(sched);                                                \
    ASSERT_FALSE(st_.isOk()) << "expected: " << (text);                        \
    EXPECT_NE(st_.message().find(text), std::string::npos) << st_.message();   \
  } while (0)

Schedule withComm(Schedule s) {
  insertCommByTime(s);
  return s;
}

/// Send right after the producer, receive right before the consumer: a
/// classic rendezvous deadlock for 1F1B.
Schedule naiveComm(Schedule s) {
  int p = s.numRanks();
  std::vector<std::vector<Action>> out(p);
  int last = s.placement.numStages - 1;
  for (int r = 0; r < p; ++r)
    for (const Action &a : s.programs[r]) {
      const Work &w = a.work;
      if (w.kind == WorkKind::F && w.stage > 0 &&
          s.placement.rank(0, w.stage - 1) != r) {
        Work prod = w;
        prod.stage -= 1;
        out[r].push_back(Action::recv(Payload::Activation, prod, r - 1));
      }
      if (w.kind == WorkKind::BW && w.stage < last) {
        Work prod = w;
        prod.stage += 1;
        out[r].push_back(Action::recv(Payload::Gradient, prod, r + 1));
      }
      out[r].push_back(a);
      if (w.kind == WorkKind::F && w.stage < last)
        out[r].push_back(Action::send(Payload::Activation, w, r + 1));
      if (w.kind == WorkKind::BW && w.stage > 0)
        out[r].push_back(Action::send(Payload::Gradient, w, r - 1));
    }
  s.programs = out;
  s.hasComm = true;
  return s;
}

TEST(VerifyTest, HandSchedulesAreValid) {
  for (int p : {1, 2, 4, 5})
    for (int m : {1, 4, 10}) {
      std::vector<Schedule> all = {handGPipe(p, m), hand1F1B(p, m),
                                   handZB(p, m, 1)};
      if (m >= 2 * p)
        all.push_back(handZB(p, m, 2));
      for (const Schedule &s : all) {
        Status st = verify(s);
        EXPECT_TRUE(st.isOk()) << s.name << " p=" << p << " m=" << m << "\n"
                               << st.message();
        Status stc = verify(withComm(s));
        EXPECT_TRUE(stc.isOk()) << s.name << "+comm p=" << p << " m=" << m
                                << "\n"
                                << stc.message();
      }
    }
  EXPECT_TRUE(verify(handVOverlap()).isOk()) << verify(handVOverlap()).message();
  EXPECT_TRUE(verify(withComm(handVOverlap())).isOk());
}

TEST(VerifyTest, GeneratedSchedulesAreValid) {
  const ScheduleKind kinds[] = {
      ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
      ScheduleKind::ZBH1,  ScheduleKind::ZBH2,     ScheduleKind::ZBV,
      ScheduleKind::DualPipe, ScheduleKind::DualPipeV, ScheduleKind::Chimera};
  for (ScheduleKind k : kinds)
    for (int p : {2, 4, 6}) {
      int lo = minMicrobatches(k, p);
      for (int m : {lo, lo + 2, 2 * lo + 4}) {
        GenOptions opts;
        opts.ranks = p;
        opts.microbatches = m;
        Expected<Schedule> g = generate(k, opts);
        if (!g)
          continue; // e.g. a count the kind does not accept
        Status st = verify(*g);
        EXPECT_TRUE(st.isOk()) << scheduleKindName(k) << " p=" << p
                               << " m=" << m << "\n" << st.message();
        Schedule c = *g;
        ASSERT_TRUE(insertComm(c).isOk()) << scheduleKindName(k);
        Status stc = verify(c);
        EXPECT_TRUE(stc.isOk()) << scheduleKindName(k) << "+comm p=" << p
                                << " m=" << m << "\n" << stc.message();
      }
    }
}

// --- frame ---------------------------------------------------------------

TEST(VerifyTest, ShapeErrors) {
  Schedule s = handGPipe(2, 1);
  s.placement.numRanks = 0;
  EXPECT_VERIFY_ERROR(s, "schedule has no ranks");
  s = handGPipe(2, 1);
  s.programs.pop_back();
  EXPECT_VERIFY_ERROR(s, "schedule has 1 programs for 2 ranks");
  s = handGPipe(2, 1);
  s.placement.numCopies = 2;
  EXPECT_VERIFY_ERROR(s, "placement is malformed");
  s = handGPipe(2, 1);
  s.placement.rankOf[0].pop_back();
  EXPECT_VERIFY_ERROR(s, "rankOf[0] has 1 entries for 2 stages");
  s = handGPipe(2, 1);
  s.placement.rankOf[0][1] = 7;
  EXPECT_VERIFY_ERROR(s, "stage 1 of copy 0 is on rank 7, out of range");
}

// --- single actions ------------------------------------------------------

TEST(VerifyTest, WorkOutOfRange) {
  Schedule s = handGPipe(2, 2);
  s.programs[1][1].work.mb = 2;
  EXPECT_VERIFY_ERROR(s, "rank 1, step 1: F1.2 is out of range");
}

TEST(VerifyTest, WorkOnWrongRank) {
  Schedule s = handGPipe(2, 2);
  s.programs[0][0].work.stage = 1;
  EXPECT_VERIFY_ERROR(s, "rank 0, step 0: F1.0 runs on the wrong rank");
}

TEST(VerifyTest, BadOverlapPair) {
  Schedule s = handVOverlap();
  std::swap(s.programs[0][3].work, s.programs[0][3].work2);
  EXPECT_VERIFY_ERROR(s, "an overlapped pair must be an F with a B or BW");
}

TEST(VerifyTest, MessageWithoutHasComm) {
  Schedule s = withComm(handGPipe(2, 1));
  s.hasComm = false;
  EXPECT_VERIFY_ERROR(s, "message action in a schedule without hasComm");
}

TEST(VerifyTest, PeerOutOfRange) {
  Schedule s = withComm(handGPipe(2, 1));
  s.programs[0][1].peer = 2;
  EXPECT_VERIFY_ERROR(s, "rank 0, step 1: peer rank 2 is out of range");
  s.programs[0][1].peer = -1;
  EXPECT_VERIFY_ERROR(s, "peer rank -1 is out of range");
}

TEST(VerifyTest, MessageToSelf) {
  Schedule s = withComm(handGPipe(2, 1));
  s.programs[1][0].peer = 1;
  EXPECT_VERIFY_ERROR(s, "rank 1, step 0: a message to this rank itself");
  Schedule g = withComm(handGPipe(2, 1));
  g.programs[0].push_back(Action::gradReduce(0));
  EXPECT_VERIFY_ERROR(g, "a message to this rank itself");
}

TEST(VerifyTest, PayloadKindMismatch) {
  Schedule s = withComm(handGPipe(2, 1));
  s.programs[0][1].payload = Payload::Gradient; // names F0.0
  EXPECT_VERIFY_ERROR(s, "a grad message must name its producer");
}

TEST(VerifyTest, MessageOutOfRange) {
  Schedule s = withComm(handGPipe(2, 1));
  s.programs[0][1].work.mb = 9;
  EXPECT_VERIFY_ERROR(s, "message F0.9 is out of range");
}

TEST(VerifyTest, MessageWithoutConsumer) {
  Schedule s = withComm(handGPipe(2, 1));
  // An activation of the last stage has no consumer.
  s.programs[1].push_back(
      Action::send(Payload::Activation, wk(WorkKind::F, 1, 0), 0));
  EXPECT_VERIFY_ERROR(s, "has no consumer stage 2");
}

// --- exactly once ----------------------------------------------------------

TEST(VerifyTest, DuplicateWork) {
  Schedule s = handGPipe(2, 2);
  s.programs[0].push_back(cF(0, 1));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 4: F0.1 runs twice; first at rank 0, "
                         "step 1");
}

TEST(VerifyTest, MissingForward) {
  Schedule s = handGPipe(2, 2);
  s.programs[1].erase(s.programs[1].begin());
  EXPECT_VERIFY_ERROR(s, "rank 1, step 3: missing F1.0");
}

TEST(VerifyTest, BothBWAndB) {
  Schedule s = handGPipe(2, 2);
  s.programs[1].push_back(cB(1, 0));
  EXPECT_VERIFY_ERROR(s, "BW1.0 and B1.0 (step 4) both run");
}

TEST(VerifyTest, BothBWAndW) {
  Schedule s = handGPipe(2, 2);
  s.programs[1].push_back(cW(1, 0));
  EXPECT_VERIFY_ERROR(s, "BW1.0 and W1.0 (step 4) both run");
}

TEST(VerifyTest, MissingBackward) {
  Schedule s = handGPipe(2, 2);
  s.programs[0].pop_back();
  EXPECT_VERIFY_ERROR(s, "rank 0, step 3: missing B0.1 (or BW0.1)");
}

TEST(VerifyTest, MissingWeightGrad) {
  Schedule s = handZB(2, 2, 1);
  s.programs[0].pop_back();
  EXPECT_VERIFY_ERROR(s, "missing W0.1 after B0.1");
}

// --- dependencies inside a rank --------------------------------------------

TEST(VerifyTest, DependencyOrderOnOneRank) {
  Schedule s = handZB(2, 2, 1);
  auto &p = s.programs[0];
  // rank 0: F0.0 F0.1 B0.0 W0.0 B0.1 W0.1 -> put W0.0 before B0.0.
  std::swap(p[2], p[3]);
  EXPECT_VERIFY_ERROR(s, "rank 0, step 2: dependency order: W0.0 needs B0.0 "
                         "(rank 0, step 3), which runs later on this rank");
  // The error prints the program with the marker.
  Status st = verify(s);
  EXPECT_NE(st.message().find("  -> 2: W0.0"), std::string::npos);
  EXPECT_NE(st.message().find("     3: B0.0"), std::string::npos);
}

TEST(VerifyTest, OverlapDependsOnItself) {
  Schedule s = handVOverlap();
  // rank 0: ... F3.0, F3.1+BW3.0 ... -> make it F3.0+BW3.0.
  s.programs[0][2] = cF(3, 1);
  s.programs[0][3] = Action::overlap(wk(WorkKind::F, 3, 0),
                                     wk(WorkKind::BW, 3, 0));
  EXPECT_VERIFY_ERROR(s, "depends on itself: BW3.0 needs F3.0");
}

TEST(VerifyTest, MissingMessage) {
  Schedule s = withComm(handGPipe(2, 1));
  // Drop both ends of the activation message.
  s.programs[0].erase(s.programs[0].begin() + 1);
  s.programs[1].erase(s.programs[1].begin());
  EXPECT_VERIFY_ERROR(s, "rank 1, step 0: missing message: F1.0 needs F0.0 "
                         "(rank 0, step 0) but this rank never receives it");
}

TEST(VerifyTest, ReceivedTooLate) {
  Schedule s = withComm(handGPipe(2, 1));
  std::swap(s.programs[1][0], s.programs[1][1]); // F1.0 before its RECV
  EXPECT_VERIFY_ERROR(s, "F1.0 needs F0.0, received only at step 1");
}

// --- messages --------------------------------------------------------------

TEST(VerifyTest, MessageNamesAbsentWork) {
  Schedule s = withComm(handZB(2, 1, 1));
  // rank 1 sends grad B1.0; call it BW1.0, which does not run.
  for (Action &a : s.programs[1])
    if (a.kind == ActionKind::Send)
      a.work.kind = WorkKind::BW;
  EXPECT_VERIFY_ERROR(s, "message names BW1.0, which no rank runs (it runs "
                         "B1.0)");
}

TEST(VerifyTest, SendFromWrongRank) {
  Schedule s = handGPipe(3, 1);
  insertCommByTime(s);
  // rank 1 "sends" F0.0 (produced on rank 0) to rank 2.
  s.programs[1].push_back(
      Action::send(Payload::Activation, wk(WorkKind::F, 0, 0), 2));
  EXPECT_VERIFY_ERROR(s, "is not produced on the sending rank 1");
}

TEST(VerifyTest, MessageToWrongConsumer) {
  Schedule s = handGPipe(3, 1);
  insertCommByTime(s);
  for (Action &a : s.programs[0])
    if (a.kind == ActionKind::Send)
      a.peer = 2;
  EXPECT_VERIFY_ERROR(s, "its consumer stage 1 lives on rank 1, not rank 2");
}

TEST(VerifyTest, SendBeforeProducing) {
  Schedule s = withComm(handGPipe(2, 1));
  std::swap(s.programs[0][0], s.programs[0][1]);
  EXPECT_VERIFY_ERROR(s, "rank 0, step 0: sends F0.0 (rank 0, step 1) before "
                         "producing it");
}

TEST(VerifyTest, SentTwice) {
  Schedule s = withComm(handGPipe(2, 1));
  s.programs[0].insert(s.programs[0].begin() + 2, s.programs[0][1]);
  EXPECT_VERIFY_ERROR(s, "rank 0, step 2: sent twice; first at rank 0, step 1");
}

TEST(VerifyTest, FifoMismatch) {
  Schedule s = withComm(handGPipe(2, 2));
  // rank 1 receives F0.0 then F0.1; swap the two receives.
  std::vector<size_t> recvs;
  for (size_t i = 0; i < s.programs[1].size(); ++i)
    if (s.programs[1][i].kind == ActionKind::Recv)
      recvs.push_back(i);
  ASSERT_GE(recvs.size(), 2u);
  std::swap(s.programs[1][recvs[0]].work, s.programs[1][recvs[1]].work);
  // Keep dependency order valid: F1.0 now follows both receives.
  Status st = verify(s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("FIFO mismatch on channel r0->r1: receive #0 is "
                              "RECV act F0.1 <-r0 but send #0 is SEND act "
                              "F0.0 ->r1"),
            std::string::npos)
      << st.message();
}

TEST(VerifyTest, UnmatchedSendAndReceiveOnChannel) {
  // A send of an activation or gradient without its receive is caught
  // earlier as a missing message (its consumer needs it); a weight-grad
  // message has no consumer, so only the channel pairing sees it.
  Schedule s = withComm(handGPipe(2, 1));
  s.programs[0].push_back(
      Action::send(Payload::WeightGrad, wk(WorkKind::F, 0, 0), 1));
  EXPECT_VERIFY_ERROR(s, "unmatched send: rank 1 has no receive for it");
  Schedule t = withComm(handGPipe(2, 1));
  t.programs[1].push_back(
      Action::recv(Payload::WeightGrad, wk(WorkKind::F, 0, 0), 0));
  EXPECT_VERIFY_ERROR(t, "unmatched receive: rank 0 has no send for it");
}

// --- execution -------------------------------------------------------------

TEST(VerifyTest, RendezvousDeadlock) {
  Schedule s = naiveComm(hand1F1B(4, 8));
  // The simulator (non-blocking sends) runs it ...
  EXPECT_TRUE(simulate(s, CostModel()).isOk());
  // ... but under rendezvous it deadlocks.
  Status st = verify(s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find(": deadlock: SEND"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("blocks until rank"), std::string::npos);
  EXPECT_NE(st.message().find("  -> "), std::string::npos);
  EXPECT_NE(st.message().find("blocked ranks:"), std::string::npos);
}

TEST(VerifyTest, ComputeOnlyDeadlock) {
  Schedule s = emptyLinear("dl", 2, 2);
  s.programs[0] = {cF(0, 0), cBW(0, 0), cF(0, 1), cBW(0, 1)};
  s.programs[1] = {cF(1, 1), cF(1, 0), cBW(1, 0), cBW(1, 1)};
  EXPECT_VERIFY_ERROR(s, "rank 0, step 1: deadlock: BW0.0 waits for BW1.0 "
                         "(rank 1, step 2); rank 1 is blocked at step 0: F1.1");
}

TEST(VerifyTest, GradReduceDeadlock) {
  Schedule s = withComm(handGPipe(2, 1));
  s.programs[0].push_back(Action::gradReduce(1));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 4: deadlock: GRADREDUCE <->r1 blocks "
                         "until rank 1 reaches its matching GRADREDUCE; rank "
                         "1 has finished its program");
  s.programs[1].push_back(Action::gradReduce(0));
  EXPECT_TRUE(verify(s).isOk()) << verify(s).message();
}

TEST(VerifyTest, MemoryLimit) {
  VerifyOptions opts;
  opts.memLimit = 4;
  EXPECT_TRUE(verify(handZB(4, 8, 1), opts).isOk());
  Status st = verify(handZB(4, 8, 2), opts);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("rank 0, step 4: activation memory 5.000000 "
                              "exceeds the limit 4.000000"),
            std::string::npos)
      << st.message();
  opts.memLimit = 7;
  EXPECT_TRUE(verify(handZB(4, 8, 2), opts).isOk());
  // The overlapped pair counts F's allocation before the backward frees.
  opts.memLimit = 3.5;
  Status v = verify(handVOverlap(), opts);
  ASSERT_FALSE(v.isOk());
  EXPECT_NE(v.message().find("rank 0, step 3"), std::string::npos)
      << v.message();
}

// --- big schedules: the per-rank checks run the ranks in parallel ---------

/// ZB-V on 2 ranks with messages: 20 actions per microbatch, so 8,000
/// microbatches are 160,000 actions, past the size where the verifier and
/// insertComm check the ranks on threads (Parallel.h).
Schedule bigZbv() {
  Schedule s = generatedZbv(8000);
  EXPECT_EQ(s.numRanks(), 2);
  return s;
}

/// Index of the n-th compute action on rank r.
size_t nthCompute(const Schedule &s, int r, size_t n) {
  for (size_t i = 0; i < s.programs[r].size(); ++i)
    if (!s.programs[r][i].isComm() && n-- == 0)
      return i;
  ADD_FAILURE() << "rank " << r << " has too few compute actions";
  return 0;
}

TEST(VerifyTest, BigScheduleErrorsAreTheLowestRanksFirst) {
  Schedule s = bigZbv();
  ASSERT_GT(s.programs[0].size() + s.programs[1].size(), size_t(1) << 16);
  ASSERT_TRUE(verify(s).isOk()) << verify(s).message();

  // Out of range on both ranks, rank 1's much earlier in its program: a
  // loop over the ranks in order reports rank 0's, and so must the threads.
  Schedule both = s;
  size_t late = nthCompute(both, 0, 40000), early = nthCompute(both, 1, 3);
  both.programs[0][late].work.mb = 9000;
  both.programs[1][early].work.mb = 9000;
  Status st = verify(both);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.rank(), 0) << st.message();
  EXPECT_EQ(st.step(), long(late)) << st.message();

  // Only rank 1 wrong: rank 1's error.
  Schedule one = s;
  one.programs[1][early].work.mb = 9000;
  st = verify(one);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.rank(), 1) << st.message();
  EXPECT_NE(st.message().find("is out of range"), std::string::npos)
      << st.message();

  // A work that runs twice (checkOnce), on rank 1 only.
  Schedule twice = s;
  size_t a = nthCompute(twice, 1, 10), b = nthCompute(twice, 1, 20000);
  twice.programs[1][b] = twice.programs[1][a];
  st = verify(twice);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.rank(), 1) << st.message();
  EXPECT_EQ(st.step(), long(b)) << st.message();
  EXPECT_NE(st.message().find("runs twice; first at rank 1, step " +
                              std::to_string(a)),
            std::string::npos)
      << st.message();

  // Two receives swapped deep in the program (the channel check): the
  // first mismatching ordinal on the channel is reported.
  Schedule fifo = s;
  std::vector<size_t> recvs;
  for (size_t i = 0; i < fifo.programs[1].size(); ++i)
    if (fifo.programs[1][i].kind == ActionKind::Recv &&
        fifo.programs[1][i].peer == 0)
      recvs.push_back(i);
  ASSERT_GT(recvs.size(), 12001u);
  std::swap(fifo.programs[1][recvs[12000]], fifo.programs[1][recvs[12001]]);
  st = verify(fifo);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("receive #12000"), std::string::npos)
      << st.message();
}

TEST(CommInsertionTest, BigScheduleErrorsAreTheLowestRanksFirst) {
  GenOptions opts;
  opts.ranks = 2;
  opts.microbatches = 8000;
  Expected<Schedule> g = generate(ScheduleKind::ZBV, opts);
  ASSERT_TRUE(bool(g));
  // Each rank runs one of its own works twice; rank 0's is reported.
  Schedule s = *g;
  for (int r : {1, 0})
    s.programs[r][nthCompute(s, r, 30000)] = s.programs[r][nthCompute(s, r, 7)];
  Status st = insertComm(s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("rank 0 step " +
                              std::to_string(nthCompute(*g, 0, 30000))),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("is scheduled more than once"),
            std::string::npos)
      << st.message();
}

/// A job's use of VerifyOptions::alongsideReplay: a simulation that
/// trusts the static checks, and how often it ran.
struct Alongside {
  int runs = 0;
  std::optional<Expected<SimResult>> sim;
};

Status verifyAlongside(const Schedule &s, Alongside &a) {
  VerifyOptions vo;
  vo.alongsideReplay = [&] {
    ++a.runs;
    SimOptions so;
    so.verified = true;
    a.sim.emplace(simulate(s, vo.cost, so));
  };
  return verify(s, vo);
}

TEST(VerifyTest, AlongsideReplayRunsOnceTheStaticChecksPass) {
  // Valid, big (beside the replay) and small (after it): the simulation
  // made alongside is the plain one.
  for (Schedule s : {bigZbv(), withComm(handZB(4, 8, 1))}) {
    Alongside a;
    Status st = verifyAlongside(s, a);
    ASSERT_TRUE(st.isOk()) << st.message();
    ASSERT_EQ(a.runs, 1);
    ASSERT_TRUE(a.sim && *a.sim) << (a.sim ? a.sim->message() : "");
    Expected<SimResult> plain = simulate(s, CostModel());
    ASSERT_TRUE(plain.isOk());
    EXPECT_EQ((*a.sim)->makespan, plain->makespan);
    ASSERT_EQ((*a.sim)->intervals.size(), plain->intervals.size());
    for (size_t k = 0; k < plain->intervals.size(); k += 997)
      EXPECT_EQ((*a.sim)->intervals[k].end, plain->intervals[k].end);
  }
  // A static check fails: the simulation, which relies on them, never runs.
  Schedule bad = bigZbv();
  bad.programs[1][nthCompute(bad, 1, 3)].work.mb = 9000;
  Alongside a;
  EXPECT_FALSE(verifyAlongside(bad, a).isOk());
  EXPECT_EQ(a.runs, 0);
  // A rendezvous deadlock the static checks cannot see (the eager
  // simulation runs it): verify() fails either way. A small schedule's
  // simulation waits for the replay and does not run; a big one's ran
  // beside it, and its result is the caller's to drop.
  for (int m : {8, 40000}) {
    Schedule dead = naiveComm(hand1F1B(2, m));
    Alongside d;
    Status st = verifyAlongside(dead, d);
    ASSERT_FALSE(st.isOk());
    EXPECT_NE(st.message().find(": deadlock: SEND"), std::string::npos)
        << st.message();
    EXPECT_EQ(d.runs, m == 8 ? 0 : 1) << m;
  }
}

// --- ZeRO-3's parameter gathers ---------------------------------------------

/// GPipe on 2 ranks, 2 microbatches, each stage gathered before its first
/// compute and released after its last: rank 0 is UNSHARD 0, F0.0, F0.1,
/// BW0.0, BW0.1, RESHARD 0.
Schedule gathered() {
  Schedule s = handGPipe(2, 2);
  for (int r = 0; r < 2; ++r) {
    s.programs[r].insert(s.programs[r].begin(), Action::unshard(r));
    s.programs[r].push_back(Action::reshard(r));
  }
  return s;
}

TEST(VerifyTest, GathersValid) {
  Schedule s = gathered();
  EXPECT_TRUE(verify(s).isOk()) << verify(s).message();
  Schedule c = withComm(handGPipe(2, 2));
  for (int r = 0; r < 2; ++r) {
    c.programs[r].insert(c.programs[r].begin(), Action::unshard(r));
    c.programs[r].push_back(Action::reshard(r));
  }
  EXPECT_TRUE(verify(c).isOk()) << verify(c).message();
}

TEST(VerifyTest, UseBeforeUnshard) {
  Schedule s = gathered();
  std::swap(s.programs[1][0], s.programs[1][1]); // F1.0 before UNSHARD 1
  EXPECT_VERIFY_ERROR(s, "rank 1, step 0: F1.0 (action 0) uses stage 1's "
                         "parameters before its UNSHARD");
}

TEST(VerifyTest, UseAfterReshard) {
  Schedule s = gathered();
  auto &p = s.programs[0];
  std::swap(p[4], p[5]); // RESHARD 0 before BW0.1
  EXPECT_VERIFY_ERROR(s, "rank 0, step 5: BW0.1 (action 5) uses stage 0's "
                         "parameters after its RESHARD (action 4)");
}

TEST(VerifyTest, UnshardOfStageNotComputed) {
  Schedule s = gathered();
  s.programs[0].insert(s.programs[0].begin() + 1, Action::unshard(1));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 1: UNSHARD 1 on rank 0, which "
                         "computes no action of stage 1");
  Schedule r = gathered();
  r.programs[1].push_back(Action::reshard(0));
  EXPECT_VERIFY_ERROR(r, "rank 1, step 6: RESHARD 0 on rank 1, which "
                         "computes no action of stage 0");
  Schedule c = gathered();
  c.programs[1].push_back(Action::reshard(1, 1));
  EXPECT_VERIFY_ERROR(c, "RESHARD 1@1 is out of range (1 copies, 2 stages)");
}

TEST(VerifyTest, DuplicateGathers) {
  Schedule s = gathered();
  s.programs[0].insert(s.programs[0].begin() + 2, Action::unshard(0));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 2: UNSHARD of stage 0 duplicated: "
                         "the first is action 0");
  Schedule r = gathered();
  r.programs[0].push_back(Action::reshard(0));
  EXPECT_VERIFY_ERROR(r, "rank 0, step 6: RESHARD of stage 0 duplicated: "
                         "the first is action 5");
}

TEST(VerifyTest, ReshardBeforeUnshard) {
  Schedule s = gathered();
  s.programs[0].insert(s.programs[0].begin(), Action::reshard(0));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 0: RESHARD 0 releases stage 0's "
                         "parameters before its UNSHARD");
}

TEST(VerifyTest, MissingReshard) {
  Schedule s = gathered();
  s.programs[1].pop_back();
  EXPECT_VERIFY_ERROR(s, "rank 1, step 5: no RESHARD of stage 1 after its "
                         "last compute (action 4)");
}

// One rank with gathers makes them required on every rank.
TEST(VerifyTest, GathersOnEveryRank) {
  Schedule s = gathered();
  s.programs[1].erase(s.programs[1].begin());
  s.programs[1].pop_back();
  EXPECT_VERIFY_ERROR(s, "rank 1, step 0: F1.0 (action 0) uses stage 1's "
                         "parameters before its UNSHARD");
}

// An overlapped pair uses both members' stages.
TEST(VerifyTest, PairUsesBothStages) {
  Schedule s = handVOverlap();
  s.programs[0] = {Action::unshard(0), cF(0, 0), cF(0, 1), Action::unshard(3),
                   cF(3, 0),
                   Action::overlap(wk(WorkKind::F, 3, 1), wk(WorkKind::BW, 3, 0)),
                   Action::reshard(3), cBW(3, 1), cBW(0, 0), cBW(0, 1),
                   Action::reshard(0)};
  s.programs[1].insert(s.programs[1].begin(), {Action::unshard(1),
                                               Action::unshard(2)});
  s.programs[1].push_back(Action::reshard(2));
  s.programs[1].push_back(Action::reshard(1));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 7: BW3.1 (action 7) uses stage 3's "
                         "parameters after its RESHARD (action 6)");
}

// --- Activation offload's OFFLOAD / RELOAD ----------------------------------

/// GPipe on 2 ranks, 2 microbatches, every stash offloaded (gap 1): rank 0
/// is F0.0, OFFLOAD F0.0, RELOAD F0.0, F0.1, OFFLOAD F0.1, RELOAD F0.1,
/// BW0.0, BW0.1.
Schedule offloaded() {
  Schedule s = handGPipe(2, 2);
  Status st = insertOffload(s, kOffloadGapAll);
  EXPECT_TRUE(st) << st.message();
  return s;
}

TEST(VerifyTest, OffloadValid) {
  Schedule s = offloaded();
  ASSERT_EQ(s.programs[0].size(), 8u);
  EXPECT_EQ(toString(s.programs[0][1]), "OFFLOAD F0.0");
  EXPECT_EQ(toString(s.programs[0][2]), "RELOAD F0.0");
  EXPECT_TRUE(verify(s).isOk()) << verify(s).message();
  Schedule c = withComm(handGPipe(2, 2));
  ASSERT_TRUE(insertOffload(c, kOffloadGapAll));
  EXPECT_TRUE(verify(c).isOk()) << verify(c).message();
  // Messages are inserted first: insertComm refuses a schedule that
  // offloads, insertOffload one that does already.
  Schedule again = s;
  EXPECT_FALSE(insertOffload(again, kOffloadGapAll));
  EXPECT_NE(insertComm(again).message().find("already offloads"),
            std::string::npos);
  EXPECT_EQ(toString(Action::reload(wk(WorkKind::F, 3, 1, 1))),
            "RELOAD F3.1@1");
}

// The actions insertOffload places state planOffload's plan: the same
// stashes leave and come back under the same compute actions, on every
// schedule family.
TEST(VerifyTest, OffloadActionsStateThePlan) {
  for (ScheduleKind k :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
        ScheduleKind::ZBH1, ScheduleKind::ZBV, ScheduleKind::DualPipe,
        ScheduleKind::DualPipeV, ScheduleKind::Chimera, ScheduleKind::VHalf})
    for (int gap : {kOffloadGapAll, kOffloadGapAuto}) {
      GenOptions o;
      o.ranks = 4;
      o.microbatches = 8;
      Expected<Schedule> g = generate(k, o);
      ASSERT_TRUE(g) << g.status().message();
      Schedule s = *g;
      ASSERT_TRUE(insertComm(s));
      Schedule off = s;
      ASSERT_TRUE(insertOffload(off, gap));
      EXPECT_TRUE(verify(off).isOk()) << verify(off).message();
      for (size_t r = 0; r < s.programs.size(); ++r) {
        OffloadPlan want = planOffload(s.programs[r], gap);
        OffloadPlan got = offloadPlanOf(off.programs[r]);
        EXPECT_EQ(want.keys, got.keys);
        // Compare by compute ordinal (the action indices differ).
        auto ordinals = [](const std::vector<Action> &p,
                           const std::map<size_t, std::vector<StashKey>> &m) {
          std::map<size_t, std::set<StashKey>> out;
          size_t c = 0;
          for (size_t i = 0; i < p.size(); ++i) {
            if (auto it = m.find(i); it != m.end())
              out[c].insert(it->second.begin(), it->second.end());
            c += p[i].isCompute();
          }
          return out;
        };
        EXPECT_EQ(ordinals(s.programs[r], want.awayAfter),
                  ordinals(off.programs[r], got.awayAfter));
        EXPECT_EQ(ordinals(s.programs[r], want.reloadBefore),
                  ordinals(off.programs[r], got.reloadBefore));
      }
    }
}

TEST(VerifyTest, OffloadBeforeItsF) {
  Schedule s = offloaded();
  std::swap(s.programs[0][0], s.programs[0][1]); // OFFLOAD F0.0 first
  EXPECT_VERIFY_ERROR(s, "rank 0, step 0: OFFLOAD F0.0 before F0.0 made the "
                         "stash (action 1)");
}

TEST(VerifyTest, OffloadOnAnotherRank) {
  Schedule s = offloaded();
  s.programs[1].push_back(Action::offload(wk(WorkKind::F, 0, 0)));
  EXPECT_VERIFY_ERROR(s, "rank 1, step 8: OFFLOAD F0.0 on rank 1, which does "
                         "not run F0.0 (rank 0 does)");
}

TEST(VerifyTest, OffloadDuplicated) {
  Schedule s = offloaded();
  s.programs[0].insert(s.programs[0].begin() + 4,
                       Action::offload(wk(WorkKind::F, 0, 0)));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 4: OFFLOAD of the stash of F0.0 "
                         "duplicated: the first is action 1");
}

TEST(VerifyTest, OffloadAfterItsReader) {
  Schedule s = handGPipe(2, 2);
  s.programs[0].push_back(Action::offload(wk(WorkKind::F, 0, 1)));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 4: OFFLOAD F0.1 after the B/BW that "
                         "reads the stash of F0.1 (action 3)");
}

TEST(VerifyTest, ReloadBeforeOffload) {
  Schedule s = offloaded();
  std::swap(s.programs[0][1], s.programs[0][2]);
  EXPECT_VERIFY_ERROR(s, "rank 0, step 1: RELOAD F0.0 before any OFFLOAD of "
                         "the stash of F0.0");
}

TEST(VerifyTest, ReloadDuplicated) {
  Schedule s = offloaded();
  s.programs[0].insert(s.programs[0].begin() + 3,
                       Action::reload(wk(WorkKind::F, 0, 0)));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 3: RELOAD of the stash of F0.0 "
                         "duplicated: the first is action 2");
}

TEST(VerifyTest, ReaderBeforeReload) {
  Schedule s = offloaded();
  auto &p = s.programs[0];
  p.erase(p.begin() + 2);                              // RELOAD F0.0
  p.push_back(Action::reload(wk(WorkKind::F, 0, 0))); // after BW0.0
  EXPECT_VERIFY_ERROR(s, "rank 0, step 5: BW0.0 (action 5) reads the stash "
                         "of F0.0 while it is offloaded (OFFLOAD at action 1, "
                         "no RELOAD before this action)");
  Schedule n = offloaded();
  n.programs[1].erase(n.programs[1].begin() + 2); // no RELOAD F1.0 at all
  EXPECT_VERIFY_ERROR(n, "rank 1, step 5: BW1.0 (action 5) reads the stash of "
                         "F1.0 while it is offloaded");
}

// An overlapped pair's B/BW member reads its stash too.
TEST(VerifyTest, OffloadPairMemberReads) {
  Schedule s = handVOverlap();
  auto &p = s.programs[0];
  // F3.0 offloaded after it, never reloaded before the pair F3.1+BW3.0.
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] == cF(3, 0)) {
      p.insert(p.begin() + long(i) + 1, Action::offload(wk(WorkKind::F, 3, 0)));
      break;
    }
  Status st = verify(s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("BW3.0 (action"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("reads the stash of F3.0 while it is offloaded"),
            std::string::npos)
      << st.message();
}

TEST(VerifyTest, OffloadNamesAnF) {
  Schedule s = offloaded();
  s.programs[0][1] = Action::offload(wk(WorkKind::BW, 0, 0));
  EXPECT_VERIFY_ERROR(s, "rank 0, step 1: OFFLOAD BW0.0 names a BW: a stash "
                         "is named by the F that made it");
  Schedule r = offloaded();
  r.programs[0][1] = Action::offload(wk(WorkKind::F, 0, 5));
  EXPECT_VERIFY_ERROR(r, "rank 0, step 1: OFFLOAD F0.5 is out of range");
}

} // namespace
