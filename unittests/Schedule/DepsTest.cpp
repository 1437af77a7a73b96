//===- DepsTest.cpp - The dependency rule (lib/Schedule/Deps.h) -----------===//

#include "Deps.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

using namespace pipeforge::sched;
using namespace pipeforge::sched::detail;

namespace {

std::string producerOf(const Work &w, int32_t numStages) {
  std::optional<Work> p = nominalProducer(w, numStages);
  return p ? toString(*p) : "none";
}

std::string predecessorsOf(const Work &w, int32_t numStages) {
  std::string out;
  forEachPredecessor(w, numStages, [&](const Work &p, DepRole role) {
    out += (out.empty() ? "" : " ") + toString(p) +
           (role == DepRole::Saved ? "(saved)" : "(input)");
    return true;
  });
  return out;
}

TEST(DepsTest, TheRule) {
  const int32_t S = 4;
  EXPECT_EQ(producerOf(Work(WorkKind::F, 0, 5), S), "none");
  EXPECT_EQ(producerOf(Work(WorkKind::F, 2, 5), S), "F1.5");
  EXPECT_EQ(producerOf(Work(WorkKind::B, 3, 5), S), "F3.5");
  EXPECT_EQ(producerOf(Work(WorkKind::B, 1, 5), S), "B2.5");
  EXPECT_EQ(producerOf(Work(WorkKind::BW, 1, 5), S), "B2.5");
  EXPECT_EQ(producerOf(Work(WorkKind::W, 2, 5), S), "B2.5");

  EXPECT_EQ(predecessorsOf(Work(WorkKind::F, 0, 0), S), "");
  EXPECT_EQ(predecessorsOf(Work(WorkKind::F, 1, 0), S), "F0.0(input)");
  EXPECT_EQ(predecessorsOf(Work(WorkKind::B, 1, 0), S),
            "F1.0(saved) B2.0(input)");
  EXPECT_EQ(predecessorsOf(Work(WorkKind::BW, 0, 0), S),
            "F0.0(saved) B1.0(input)");
  EXPECT_EQ(predecessorsOf(Work(WorkKind::B, 3, 0), S), "F3.0(input)");
  EXPECT_EQ(predecessorsOf(Work(WorkKind::W, 3, 0), S), "B3.0(input)");
  // One stage: the chain is F0, B0.
  EXPECT_EQ(predecessorsOf(Work(WorkKind::BW, 0, 0), 1), "F0.0(input)");
}

TEST(DepsTest, TheWalkStopsWhereTheCallerSays) {
  std::vector<DepRole> roles;
  bool all = forEachPredecessor(Work(WorkKind::B, 0, 0), 3,
                                [&](const Work &, DepRole role) {
                                  roles.push_back(role);
                                  return false;
                                });
  EXPECT_FALSE(all);
  EXPECT_EQ(roles, std::vector<DepRole>{DepRole::Saved});
}

TEST(DepsTest, TheConsumerIsTheProducersInverse) {
  for (int32_t S : {1, 2, 5})
    for (int32_t copy : {0, 1})
      for (int32_t stage = 0; stage < S; ++stage)
        for (WorkKind k :
             {WorkKind::F, WorkKind::B, WorkKind::W, WorkKind::BW}) {
          const Work w(k, stage, 3, copy);
          SCOPED_TRACE(toString(w) + " of " + std::to_string(S) + " stages");
          if (std::optional<Work> c = nominalConsumer(w, S)) {
            Work out = w;
            if (out.kind == WorkKind::BW)
              out.kind = WorkKind::B;
            EXPECT_EQ(nominalProducer(*c, S), out);
          } else {
            // The chain's last work (stage 0's backward) and W.
            EXPECT_TRUE(k == WorkKind::W || (k != WorkKind::F && stage == 0));
          }
          // Every input but W's (off the chain) names its reader back.
          std::optional<Work> p = nominalProducer(w, S);
          if (p && k != WorkKind::W) {
            Work self = w;
            if (self.kind == WorkKind::BW)
              self.kind = WorkKind::B;
            EXPECT_EQ(nominalConsumer(*p, S), self);
          }
        }
}

TEST(DepsTest, OutputKeysAreMessageKeys) {
  Schedule s;
  s.placement.numCopies = 2;
  s.placement.numStages = 3;
  s.numMicrobatches = 4;
  WorkIndex idx(s);
  std::vector<char> seen(idx.numMessages(), 0);
  for (int32_t copy = 0; copy < 2; ++copy)
    for (int32_t stage = 0; stage < 3; ++stage)
      for (int32_t mb = 0; mb < 4; ++mb)
        for (WorkKind k : {WorkKind::F, WorkKind::B, WorkKind::BW}) {
          const Work w(k, stage, mb, copy);
          size_t key = WorkIndex::outputKey(idx.id(w));
          EXPECT_EQ(key, messageKey(w, idx));
          EXPECT_EQ(key / 2, idx.item(w));
          if (k != WorkKind::BW) // BW's is B's
            ++seen[key];
        }
  for (char n : seen)
    EXPECT_EQ(n, 1);
}

} // namespace
