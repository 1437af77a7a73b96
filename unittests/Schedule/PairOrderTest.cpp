//===- PairOrderTest.cpp - Fused pair list scheduling and order search ----===//

#include "pipeforge/Schedule/PairOrder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

using namespace pipeforge::sched;

namespace {

CostModel moe(double tf, double tb, double tw, double a2a, int layers,
              double attnShare = 0.5) {
  CostModel c;
  c.tf = tf;
  c.tb = tb;
  c.tw = tw;
  c.tA2A = a2a;
  c.moeLayersPerStage = layers;
  c.attnShare = attnShare;
  c.overlapComm = true;
  return c;
}

/// Position of `s` in `o`.
size_t at(const std::vector<PairStep> &o, PairStep s) {
  return std::find(o.begin(), o.end(), s) - o.begin();
}

void expectChains(const std::vector<PairStep> &o) {
  ASSERT_EQ(o.size(), static_cast<size_t>(kNumPairSteps));
  std::set<PairStep> seen(o.begin(), o.end());
  EXPECT_EQ(seen.size(), o.size());
  using P = PairStep;
  EXPECT_LT(at(o, P::AttnF), at(o, P::DispF));
  EXPECT_LT(at(o, P::DispF), at(o, P::MlpF));
  EXPECT_LT(at(o, P::MlpF), at(o, P::CombF));
  EXPECT_LT(at(o, P::CombB), at(o, P::MlpB));
  EXPECT_LT(at(o, P::MlpB), at(o, P::DispB));
  EXPECT_LT(at(o, P::DispB), at(o, P::AttnB));
  EXPECT_LT(at(o, P::MlpB), at(o, P::MlpW));
  EXPECT_LT(at(o, P::AttnB), at(o, P::AttnW));
  EXPECT_TRUE(isValidPairOrder(o));
}

TEST(PairOrder, Enumeration) {
  auto all = allPairOrders();
  // 4 places for mlp(W) in the backward chain x C(10, 4) interleavings.
  EXPECT_EQ(all.size(), 840u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(std::set<std::vector<PairStep>>(all.begin(), all.end()).size(),
            all.size());
  for (const auto &o : all)
    expectChains(o);
  EXPECT_NE(std::find(all.begin(), all.end(), deepSeekPairOrder()),
            all.end());
  EXPECT_EQ(pairOrderToString(deepSeekPairOrder()),
            "combine:B,attn:F,mlp:B,dispatch:F,dispatch:B,mlp:W,mlp:F,attn:B,"
            "attn:W,combine:F");
}

TEST(PairOrder, InvalidOrders) {
  using P = PairStep;
  std::vector<PairStep> o = deepSeekPairOrder();
  std::swap(o[0], o[2]); // mlp(B) before combine(B)
  EXPECT_FALSE(isValidPairOrder(o));
  EXPECT_TRUE(std::isnan(fusedPairTime(moe(1, 1, 1, 1, 1), 0, 0, true, o)));
  EXPECT_FALSE(isValidPairOrder({P::AttnF, P::DispF}));
  o = deepSeekPairOrder();
  o.back() = P::AttnF; // AttnF twice, no CombF
  EXPECT_FALSE(isValidPairOrder(o));
}

// The hand case: tf = tb = tw = 2, attention a quarter of each, one MoE
// layer, all-to-all 1.5, F & BW. Parts: attn(F) .5, mlp(F) 1.5, attn(B) .5,
// mlp(B) 1.5, attn(W) .5, mlp(W) 1.5.
//
// DeepSeek's order: combine(B) comm [0, 1.5]; attn(F) [0, .5]; mlp(B)
// [1.5, 3] (idle 1); dispatch(F) comm [1.5, 3]; dispatch(B) comm [3, 4.5];
// mlp(W) [3, 4.5]; mlp(F) [4.5, 6]; attn(B) [6, 6.5]; attn(W) [6.5, 7];
// combine(F) comm [6, 7.5]: exposed after the last compute, 7.5 in all.
//
// Best: combine(B), attn(F), dispatch(F), mlp(B), dispatch(B), mlp(F),
// combine(F), attn(B), mlp(W), attn(W): comm combine(B) [0, 1.5],
// dispatch(F) [1.5, 3], dispatch(B) [3, 4.5], combine(F) [4.5, 6]; compute
// attn(F) [0, .5], idle, mlp(B) [1.5, 3], mlp(F) [3, 4.5], attn(B)
// [4.5, 5], mlp(W) [5, 6.5], attn(W) [6.5, 7]: combine(F) hidden, 7 in
// all, optimal (only attn(F) can run before the first all-to-all ends).
TEST(PairOrder, HandCaseHidesCombineF) {
  CostModel c = moe(2, 2, 2, 1.5, 1, 0.25);
  PairBreakdown ds;
  EXPECT_DOUBLE_EQ(fusedPairTime(c, 0, 0, true, deepSeekPairOrder(), &ds),
                   7.5);
  EXPECT_DOUBLE_EQ(ds.busy, 6);
  EXPECT_DOUBLE_EQ(ds.exposed, 1.5);
  // combine(F) (member 0, which 1) is the last comm and ends after compute.
  const PairSegment *combF = nullptr;
  for (const PairSegment &s : ds.segments)
    if (!s.exposed && s.member == 0 && s.which == 1)
      combF = &s;
  ASSERT_TRUE(combF);
  EXPECT_DOUBLE_EQ(combF->start, 6);
  EXPECT_DOUBLE_EQ(combF->end, 7.5);

  double t = 0;
  std::vector<PairStep> best = searchPairOrder(c, 0, 0, true, &t);
  expectChains(best);
  EXPECT_DOUBLE_EQ(t, 7);
  using P = PairStep;
  EXPECT_EQ(best, (std::vector<PairStep>{P::CombB, P::AttnF, P::DispF,
                                         P::MlpB, P::DispB, P::MlpF,
                                         P::CombF, P::AttnB, P::MlpW,
                                         P::AttnW}));
  PairBreakdown bd;
  EXPECT_DOUBLE_EQ(fusedPairTime(c, 0, 0, true, best, &bd), 7);
  EXPECT_DOUBLE_EQ(bd.busy, 6);
  EXPECT_DOUBLE_EQ(bd.exposed, 1); // waiting for combine(B) only
  EXPECT_DOUBLE_EQ(bd.commBusy, 6);
  combF = nullptr;
  for (const PairSegment &s : bd.segments)
    if (!s.exposed && s.member == 0 && s.which == 1)
      combF = &s;
  ASSERT_TRUE(combF);
  EXPECT_DOUBLE_EQ(combF->start, 4.5);
  EXPECT_DOUBLE_EQ(combF->end, 6);
  // Issued in program order it is as fast (each all-to-all is placed right
  // after what it needs).
  EXPECT_DOUBLE_EQ(fusedPairTime(c, 0, 0, true, best, nullptr, true), 7);
  // Unfused: F 2 + 2 x 1.5, BW 4 + 2 x 1.5.
  EXPECT_DOUBLE_EQ(serialPairTime(c, 0, 0, true), 12);
}

TEST(PairOrder, TiesKeepDeepSeek) {
  // No all-to-all time, or all-to-alls that the default already hides.
  for (double a2a : {0.0, 0.25, 0.5}) {
    CostModel c = moe(2, 2, 2, a2a, 2);
    double t = 0;
    EXPECT_EQ(searchPairOrder(c, 0, 0, true, &t), deepSeekPairOrder());
    EXPECT_DOUBLE_EQ(t, 6);
  }
  // Comm-bound: 4 all-to-alls of 2 take 8 whatever the order.
  CostModel c = moe(2, 2, 2, 2, 1);
  EXPECT_EQ(searchPairOrder(c, 0, 0, false), deepSeekPairOrder());
}

TEST(PairOrder, NeverSlowerThanDeepSeek) {
  int better = 0;
  for (double tf : {1.0, 2.0, 3.0})
    for (double tb : {1.0, 2.5})
      for (double tw : {0.5, 2.0})
        for (double sh : {0.25, 0.5, 0.75})
          for (double a2a : {0.0, 0.5, 1.0, 2.0})
            for (int layers : {0, 1, 2})
              for (bool full : {false, true}) {
                CostModel c = moe(tf, tb, tw, a2a, layers, sh);
                double t = 0;
                auto o = searchPairOrder(c, 0, 0, full, &t);
                expectChains(o);
                double ds =
                    fusedPairTime(c, 0, 0, full, deepSeekPairOrder());
                EXPECT_LE(t, ds);
                EXPECT_DOUBLE_EQ(t, fusedPairTime(c, 0, 0, full, o));
                // The fused pair never takes longer than its members'
                // compute plus every all-to-all, nor less than either
                // resource's total.
                PairBreakdown bd;
                fusedPairTime(c, 0, 0, full, o, &bd);
                EXPECT_LE(t, serialPairTime(c, 0, 0, full) + 1e-12);
                EXPECT_GE(t + 1e-12, std::max(bd.busy, bd.commBusy));
                if (t < ds)
                  ++better;
              }
  EXPECT_GT(better, 0);
}

TEST(PairOrder, UnevenLayersAndStages) {
  // F on a 2-layer MoE stage, B on a dense stage: the backward's extra
  // layer step is empty.
  CostModel c = moe(2, 2, 2, 1, 0);
  c.moeLayersStage = {2, 0};
  double t = 0;
  auto o = searchPairOrder(c, 0, 1, false, &t);
  expectChains(o);
  EXPECT_LE(t, fusedPairTime(c, 0, 1, false, deepSeekPairOrder()));
  PairBreakdown bd;
  fusedPairTime(c, 0, 1, false, o, &bd);
  EXPECT_DOUBLE_EQ(bd.busy, 4);
  EXPECT_DOUBLE_EQ(bd.commBusy, 4); // F's 2 layers x 2 all-to-alls
}

} // namespace
