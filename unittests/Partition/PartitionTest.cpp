//===- PartitionTest.cpp - Optimal contiguous cuts against brute force ----===//
//
// Small cases (up to 10 layers, 5 stages) are checked against every possible
// cut, including the tie-breaking order of Partition.h; larger ones against
// an independent optimality test (greedy feasibility of the bound and
// infeasibility of the next smaller candidate bound).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Partition/Partition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <tuple>

using namespace pipeforge::partition;

namespace {

/// Every cut of n layers into k non-empty stages, as sizes.
void allCuts(int n, int k, std::vector<int> &prefix,
             std::vector<std::vector<int>> &out) {
  if (k == 0) {
    if (n == 0)
      out.push_back(prefix);
    return;
  }
  for (int size = 1; size <= n - (k - 1); ++size) {
    prefix.push_back(size);
    allCuts(n - size, k - 1, prefix, out);
    prefix.pop_back();
  }
}

struct Key {
  double max, squares;
  std::vector<int> sizes;
  bool operator<(const Key &o) const {
    return std::tie(max, squares, sizes) < std::tie(o.max, o.squares, o.sizes);
  }
};

Key keyOf(const std::vector<double> &costs, const std::vector<int> &sizes) {
  std::vector<double> stage;
  int begin = 0;
  for (int size : sizes) {
    stage.push_back(rangeCost(costs, begin, begin + size));
    begin += size;
  }
  Key key{0, 0, sizes};
  for (double c : stage)
    key.max = std::max(key.max, c);
  for (int s = static_cast<int>(stage.size()) - 1; s >= 0; --s)
    key.squares = stage[s] * stage[s] + key.squares;
  return key;
}

Key bruteForce(const std::vector<double> &costs, int k) {
  std::vector<std::vector<int>> cuts;
  std::vector<int> prefix;
  allCuts(static_cast<int>(costs.size()), k, prefix, cuts);
  Key best{std::numeric_limits<double>::infinity(), 0, {}};
  for (const auto &cut : cuts)
    best = std::min(best, keyOf(costs, cut));
  return best;
}

/// Whether the layers fit in at most k stages of cost <= bound (greedy).
bool fits(const std::vector<double> &costs, int k, double bound) {
  int stages = 1;
  double sum = 0;
  for (double c : costs) {
    if (c > bound)
      return false;
    if (sum + c > bound) {
      ++stages;
      sum = 0;
    }
    sum += c;
  }
  return stages <= k;
}

void expectConsistent(const std::vector<double> &costs, const StageCut &cut) {
  int total = 0;
  double maxCost = 0;
  for (int s = 0; s < cut.numStages(); ++s) {
    EXPECT_GE(cut.sizes[s], 1);
    EXPECT_EQ(cut.firstLayer(s), total);
    EXPECT_EQ(cut.stageCosts[s], rangeCost(costs, total, total + cut.sizes[s]));
    total += cut.sizes[s];
    maxCost = std::max(maxCost, cut.stageCosts[s]);
  }
  EXPECT_EQ(total, static_cast<int>(costs.size()));
  EXPECT_EQ(cut.maxCost, maxCost);
}

} // namespace

TEST(PartitionTest, RandomSmallIntegerCostsMatchBruteForceExactly) {
  // Integer costs (with zeros and many ties) make every sum exact, so the
  // whole tie-breaking order must match.
  std::mt19937 rng(1234);
  int checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    int n = 1 + rng() % 10;
    int k = 1 + rng() % std::min(n, 5);
    int hi = trial % 3 == 0 ? 2 : 9;
    std::vector<double> costs;
    for (int i = 0; i < n; ++i)
      costs.push_back(static_cast<double>(rng() % (hi + 1)));
    auto cut = partitionBalanced(costs, k);
    ASSERT_TRUE(cut) << cut.message();
    Key want = bruteForce(costs, k);
    ASSERT_EQ(cut->sizes, want.sizes) << "trial " << trial;
    EXPECT_EQ(cut->maxCost, want.max);
    expectConsistent(costs, *cut);
    ++checked;
  }
  EXPECT_EQ(checked, 3000);
}

TEST(PartitionTest, RandomSmallRealCostsReachTheBruteForceOptimum) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> dist(0.0, 10.0);
  for (int trial = 0; trial < 3000; ++trial) {
    int n = 1 + rng() % 10;
    int k = 1 + rng() % std::min(n, 5);
    std::vector<double> costs;
    for (int i = 0; i < n; ++i)
      costs.push_back(dist(rng));
    auto cut = partitionBalanced(costs, k);
    ASSERT_TRUE(cut) << cut.message();
    Key want = bruteForce(costs, k);
    EXPECT_EQ(cut->maxCost, want.max) << "trial " << trial;
    // Within the optimal bound, no cut is more even (up to rounding).
    Key got = keyOf(costs, cut->sizes);
    EXPECT_LE(got.squares, want.squares * (1 + 1e-12));
    expectConsistent(costs, *cut);
  }
}

TEST(PartitionTest, LargerCasesAreOptimalByGreedyFeasibility) {
  // Integer costs keep every sum exact whatever the summation order.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dist(1, 1000);
  for (int trial = 0; trial < 200; ++trial) {
    int n = 10 + rng() % 90;
    int k = 1 + rng() % std::min(n, 32);
    std::vector<double> costs;
    for (int i = 0; i < n; ++i)
      costs.push_back(dist(rng));
    auto cut = partitionBalanced(costs, k);
    ASSERT_TRUE(cut) << cut.message();
    expectConsistent(costs, *cut);
    EXPECT_TRUE(fits(costs, k, cut->maxCost));
    // The largest candidate bound below the optimum must not fit.
    double below = -1;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j <= n; ++j) {
        double c = rangeCost(costs, i, j);
        if (c < cut->maxCost)
          below = std::max(below, c);
      }
    if (below >= 0) {
      EXPECT_FALSE(fits(costs, k, below)) << "trial " << trial;
    }
  }
}

TEST(PartitionTest, UniformLayersSplitEvenlyEarliestFirst) {
  std::vector<double> costs(14, 1.0);
  auto cut = partitionBalanced(costs, 4);
  ASSERT_TRUE(cut);
  // Max 4 forces 4,4,4,2 or a spread; the most even is two 4s and two 3s,
  // and the earliest such cut is 3,3,4,4.
  EXPECT_EQ(cut->sizes, (std::vector<int>{3, 3, 4, 4}));
  EXPECT_EQ(cut->maxCost, 4.0);
  EXPECT_EQ(cut->minCost, 3.0);
  EXPECT_DOUBLE_EQ(cut->meanCost, 3.5);
  EXPECT_DOUBLE_EQ(cut->imbalance, 4.0 / 3.5);
}

TEST(PartitionTest, OneStageAndOneLayerPerStage) {
  std::vector<double> costs{1, 2, 3};
  auto one = partitionBalanced(costs, 1);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->sizes, (std::vector<int>{3}));
  EXPECT_DOUBLE_EQ(one->imbalance, 1.0);
  auto each = partitionBalanced(costs, 3);
  ASSERT_TRUE(each);
  EXPECT_EQ(each->sizes, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(each->stageCosts, (std::vector<double>{1, 2, 3}));
  EXPECT_DOUBLE_EQ(each->imbalance, 1.5);
}

TEST(PartitionTest, HeavyLayerGetsItsOwnStage) {
  // A light embedding, uniform blocks, a heavy head (the GPT shape).
  std::vector<double> costs{0.1, 1, 1, 1, 1, 1, 1, 4};
  auto cut = partitionBalanced(costs, 3);
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->maxCost, 4.0);
  EXPECT_EQ(cut->sizes.back(), 1);
  EXPECT_EQ(cut->stageOf(7), 2);
  EXPECT_EQ(cut->stageOf(0), 0);
  EXPECT_EQ(cut->stageOf(8), -1);
  EXPECT_EQ(cut->stageOf(-1), -1);
}

TEST(PartitionTest, AllZeroCosts) {
  std::vector<double> costs(5, 0.0);
  auto cut = partitionBalanced(costs, 2);
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->sizes, (std::vector<int>{1, 4}));
  EXPECT_EQ(cut->maxCost, 0.0);
  EXPECT_DOUBLE_EQ(cut->imbalance, 1.0);
}

TEST(PartitionTest, Errors) {
  std::vector<double> costs{1, 2, 3};
  auto tooMany = partitionBalanced(costs, 4);
  ASSERT_FALSE(tooMany);
  EXPECT_EQ(tooMany.message(), "cannot cut 3 layers into 4 stages: every "
                               "stage needs at least one layer");
  auto zero = partitionBalanced(costs, 0);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.message(), "the number of stages must be at least 1, got 0");
  auto none = partitionBalanced({}, 1);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.message(), "the model has no layers to partition");
  auto negative = partitionBalanced({1, -1}, 1);
  ASSERT_FALSE(negative);
  EXPECT_NE(negative.message().find("layer 1 has cost"), std::string::npos);
  auto nan = partitionBalanced({std::nan(""), 1}, 1);
  ASSERT_FALSE(nan);
  EXPECT_NE(nan.message().find("finite and non-negative"), std::string::npos);
  auto inf = partitionWithLayout({1, HUGE_VAL}, {1, 1});
  EXPECT_FALSE(inf);
}

TEST(PartitionTest, ExplicitLayout) {
  std::vector<double> costs(14, 1.0);
  costs[0] = 0.5;
  auto cut = partitionWithLayout(costs, {3, 4, 4, 3});
  ASSERT_TRUE(cut) << cut.message();
  EXPECT_EQ(cut->sizes, (std::vector<int>{3, 4, 4, 3}));
  EXPECT_EQ(cut->stageCosts, (std::vector<double>{2.5, 4, 4, 3}));
  EXPECT_EQ(cut->firstLayer(2), 7);
  EXPECT_DOUBLE_EQ(cut->imbalance, 4.0 / (13.5 / 4));

  auto viaPartition = partition(costs, 4, {3, 4, 4, 3});
  ASSERT_TRUE(viaPartition);
  EXPECT_EQ(viaPartition->sizes, cut->sizes);
  auto balanced = partition(costs, 4);
  ASSERT_TRUE(balanced);
  EXPECT_EQ(balanced->maxCost, 4.0);
}

TEST(PartitionTest, ExplicitLayoutErrors) {
  std::vector<double> costs(14, 1.0);
  auto shortSum = partitionWithLayout(costs, {3, 4, 4, 2});
  ASSERT_FALSE(shortSum);
  EXPECT_EQ(shortSum.message(), "layout covers 13 layers but the model has 14");
  auto empty = partitionWithLayout(costs, {7, 0, 7});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.message(),
            "layout gives stage 1 0 layers; every stage needs at least one");
  auto negative = partitionWithLayout(costs, {15, -1});
  EXPECT_FALSE(negative);
  auto none = partitionWithLayout(costs, {});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.message(), "the layout names no stages");
  auto mismatch = partition(costs, 3, {7, 7});
  ASSERT_FALSE(mismatch);
  EXPECT_EQ(mismatch.message(), "layout has 2 stages but 3 were requested");
}

TEST(PartitionTest, ParseLayout) {
  auto ok = parseLayout("3,4, 4 ,3");
  ASSERT_TRUE(ok) << ok.message();
  EXPECT_EQ(*ok, (std::vector<int>{3, 4, 4, 3}));
  auto single = parseLayout("12");
  ASSERT_TRUE(single);
  EXPECT_EQ(*single, (std::vector<int>{12}));
  for (const char *bad :
       {"", "3,,4", "3,4,", "a,b", "-1,2", "1.5", "9999999999"})
    EXPECT_FALSE(parseLayout(bad)) << bad;
}
