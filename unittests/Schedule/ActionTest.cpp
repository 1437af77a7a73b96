//===- ActionTest.cpp - The compact Work / Action representation ----------===//
//
// A schedule of millions of actions keeps one Action per action resident:
// Work packs stage, copy and kind into one word, the fused pairs' component
// orders live once per schedule. These tests pin the packing's range, the
// order table and the readers' refusal of what does not fit.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Export.h"

#include <gtest/gtest.h>

#include <string>

using namespace pipeforge::sched;

namespace {

TEST(Action, WorkPacksTheWholeStageRange) {
  static_assert(sizeof(Work) == 8 && sizeof(Action) == 24);
  for (int32_t stage : {0, 1, 4095, kMaxStages - 1})
    for (int32_t copy : {0, 1})
      for (WorkKind k : {WorkKind::F, WorkKind::B, WorkKind::W, WorkKind::BW}) {
        Work w(k, stage, /*mb=*/(1 << 24) - 1, copy);
        EXPECT_EQ(w.stage, stage);
        EXPECT_EQ(w.copy, copy);
        EXPECT_EQ(w.kind, k);
        EXPECT_EQ(w.mb, (1 << 24) - 1);
      }
  // Negative values (malformed input the verifiers report) survive too.
  Work neg(WorkKind::F, -1, -7, -1);
  EXPECT_EQ(neg.stage, -1);
  EXPECT_EQ(neg.copy, -1);
  EXPECT_EQ(neg.mb, -7);
  EXPECT_TRUE(Work::fits(kMaxStages - 1, 1));
  EXPECT_TRUE(Work::fits(-kMaxStages, -4));
  EXPECT_FALSE(Work::fits(kMaxStages, 0));
  EXPECT_FALSE(Work::fits(0, 4));
  EXPECT_FALSE(Work::fits(0, -5));
}

TEST(Action, PairOrdersAreKeptOncePerSchedule) {
  Schedule s;
  PairComponentOrder a = {{PairComponentStep::F, PairComponentStep::Attn, 0},
                          {PairComponentStep::B, PairComponentStep::Mlp, 1}};
  PairComponentOrder b = {{PairComponentStep::B, PairComponentStep::Mlp, 1}};
  Action x = Action::overlap(Work(WorkKind::F, 0, 1), Work(WorkKind::B, 0, 0));
  Action y = x, z = x, none = x;
  ASSERT_TRUE(s.setPairOrder(x, a));
  ASSERT_TRUE(s.setPairOrder(y, b));
  ASSERT_TRUE(s.setPairOrder(z, a));
  ASSERT_TRUE(s.setPairOrder(none, {}));
  EXPECT_EQ(s.pairOrders.size(), 2u);
  EXPECT_EQ(x.pairOrder, z.pairOrder);
  ASSERT_NE(s.pairOrderOf(x), nullptr);
  EXPECT_EQ(*s.pairOrderOf(x), a);
  EXPECT_EQ(*s.pairOrderOf(y), b);
  EXPECT_EQ(s.pairOrderOf(none), nullptr);
  // Not an Overlap, or an index past the table: none.
  Action c = Action::compute(Work(WorkKind::F, 0, 0));
  c.pairOrder = 1;
  EXPECT_EQ(s.pairOrderOf(c), nullptr);
  Action stale = x;
  stale.pairOrder = 3;
  EXPECT_EQ(s.pairOrderOf(stale), nullptr);
  // The order does not take part in equality.
  EXPECT_TRUE(x == y);
}

TEST(Action, PairOrderTableIsBounded) {
  Schedule s;
  Action x = Action::overlap(Work(WorkKind::F, 0, 1), Work(WorkKind::B, 0, 0));
  // 65,535 distinct orders (set directly: setPairOrder searches linearly).
  for (int i = 0; i < 0xffff; ++i)
    s.pairOrders.push_back(
        {{PairComponentStep::F, PairComponentStep::Attn, int16_t(i)},
         {PairComponentStep::B, PairComponentStep::Mlp, int16_t(i / 7)}});
  ASSERT_TRUE(s.setPairOrder(
      x, {{PairComponentStep::F, PairComponentStep::Attn, 0x7ffe},
          {PairComponentStep::B, PairComponentStep::Mlp, 0x7ffe / 7}}));
  EXPECT_EQ(x.pairOrder, 0x7fff);
  Status st = s.setPairOrder(
      x, {{PairComponentStep::W, PairComponentStep::Mlp, 0}});
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("65535"), std::string::npos) << st.message();
  // An order already in the table is still found.
  EXPECT_TRUE(s.setPairOrder(
      x, {{PairComponentStep::F, PairComponentStep::Attn, 5},
          {PairComponentStep::B, PairComponentStep::Mlp, 0}}));
  EXPECT_EQ(x.pairOrder, 6);
}

std::string oneAction(const std::string &work) {
  return R"({"format": "pipeforge.schedule", "version": 1, "name": "x",
    "ranks": 1, "stages": 1, "copies": 1, "microbatches": 1,
    "has_comm": false, "placement": [[0]],
    "programs": [{"rank": 0, "actions": [)" +
         work + "]}]}";
}

TEST(Action, JsonReaderRefusesWhatDoesNotPack) {
  auto ok = importJson(oneAction(R"({"op": "F", "stage": 0, "mb": 0})"));
  ASSERT_TRUE(ok) << ok.message();
  for (const char *bad :
       {R"({"op": "F", "stage": 33554432, "mb": 0})",
        R"({"op": "F", "stage": -33554433, "mb": 0})",
        R"({"op": "F", "stage": 0, "mb": 0, "copy": 4})",
        R"({"op": "F", "stage": 0, "mb": 0, "copy": 300})"}) {
    auto r = importJson(oneAction(bad));
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.message().find("out of range"), std::string::npos)
        << r.message();
    EXPECT_NE(r.message().find("programs[0].actions[0]"), std::string::npos)
        << r.message();
  }
  std::string many = oneAction(R"({"op": "F", "stage": 0, "mb": 0})");
  many.replace(many.find("\"stages\": 1"), 11, "\"stages\": 33554433");
  auto r = importJson(many);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("stages"), std::string::npos) << r.message();
}

} // namespace
