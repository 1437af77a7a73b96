//===- RankGridTest.cpp - The one arrangement of ranks --------------------===//

#include "pipeforge/rt/RankGrid.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace pipeforge::rt;

namespace {

/// Every group kind partitions the world: members of one instance have the
/// distinct indices 0..size-1, and they differ only in that group's
/// coordinate.
TEST(RankGrid, GroupsPartitionTheWorld) {
  for (int P : {1, 2, 3, 4})
    for (int E : {1, 2, 4})
      for (int D : {1, 2, 3})
        for (int T : {1, 2, 4})
          for (bool dataFastest : {false, true}) {
            RankGrid g{P, E, D, T, dataFastest};
            using Pick = GroupPosition (RankGrid::*)(const RankCoord &) const;
            for (Pick pick :
                 {&RankGrid::pipelineGroup, &RankGrid::dataParallelGroup,
                  &RankGrid::expertGroup, &RankGrid::tensorGroup}) {
              std::map<int, std::set<int>> members;
              for (int w = 0; w < g.size(); ++w) {
                RankCoord c = g.coordOf(w);
                ASSERT_EQ(g.worldRank(c), w);
                GroupPosition pos = (g.*pick)(c);
                EXPECT_TRUE(members[pos.instance].insert(pos.index).second);
                EXPECT_LT(pos.index, pos.size);
              }
              for (auto &[instance, idx] : members)
                EXPECT_EQ(int(idx.size()), (g.*pick)(g.coordOf(0)).size)
                    << "P=" << P << " E=" << E << " D=" << D << " T=" << T;
            }
          }
}

TEST(RankGrid, LayoutIsPipelineFastestThenExpertThenReplica) {
  RankGrid g{2, 2, 2};
  RankCoord c = g.coordOf(5); // 5 = (1 * 2 + 0) * 2 + 1
  EXPECT_EQ(c.pipeline, 1);
  EXPECT_EQ(c.expert, 0);
  EXPECT_EQ(c.replica, 1);
  EXPECT_EQ(g.describe(), "2 pipeline ranks x 2 expert-parallel ranks x 2 "
                          "data-parallel replicas = 8 processes");
}

/// Tensor fastest: a TP group is consecutive world ranks (one node when
/// the launcher fills a node's slots first); T = 1 is the layout above.
TEST(RankGrid, TensorIsFastest) {
  RankGrid g{2, 2, 2, 2};
  RankCoord c = g.coordOf(11); // 11 = ((1 * 2 + 0) * 2 + 1) * 2 + 1
  EXPECT_EQ(c.tensor, 1);
  EXPECT_EQ(c.pipeline, 1);
  EXPECT_EQ(c.expert, 0);
  EXPECT_EQ(c.replica, 1);
  GroupPosition tp = g.tensorGroup(c);
  EXPECT_EQ(tp.size, 2);
  EXPECT_EQ(tp.index, 1);
  EXPECT_EQ(g.tensorGroup(g.coordOf(10)).instance, tp.instance);
  EXPECT_NE(g.tensorGroup(g.coordOf(12)).instance, tp.instance);
  EXPECT_EQ(g.describe(), "2 tensor-parallel ranks x 2 pipeline ranks x 2 "
                          "expert-parallel ranks x 2 data-parallel replicas = "
                          "16 processes");
}

/// dp-fastest: after the tensor group, the replicas of a pipeline rank.
TEST(RankGrid, DataFastestLayout) {
  RankGrid g{2, 2, 2, 2, true};
  RankCoord c = g.coordOf(11); // 11 = ((1 * 2 + 0) * 2 + 1) * 2 + 1
  EXPECT_EQ(c.tensor, 1);
  EXPECT_EQ(c.replica, 1);
  EXPECT_EQ(c.expert, 0);
  EXPECT_EQ(c.pipeline, 1);
  EXPECT_EQ(g.worldRank(c), 11);
  // World ranks 0, 2 (tensor 0): replicas 0 and 1 of pipeline rank 0.
  EXPECT_EQ(g.coordOf(2).replica, 1);
  EXPECT_EQ(g.coordOf(2).pipeline, 0);
  EXPECT_EQ(g.dataParallelGroup(g.coordOf(0)).instance,
            g.dataParallelGroup(g.coordOf(2)).instance);
}

} // namespace
