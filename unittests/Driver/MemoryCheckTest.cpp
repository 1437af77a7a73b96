//===- MemoryCheckTest.cpp - pipeforge-run's memory check, pure parts -----===//
//
// The readers of /proc/meminfo, /proc/self/cgroup and the cgroup files
// from given text, --max-memory's syntax, the gathered entry's round trip
// and the report's verdict per pool (MemoryCheck.h).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/MemoryCheck.h"

#include <gtest/gtest.h>

using namespace pipeforge::rt;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kGiB = int64_t(1) << 30;

TEST(MemoryCheck, MemAvailable) {
  const char *info = "MemTotal:       24731396 kB\n"
                     "MemFree:         1000000 kB\n"
                     "MemAvailable:   21161896 kB\n"
                     "Buffers:           12345 kB\n";
  EXPECT_EQ(parseMemAvailable(info), int64_t(21161896) * 1024);
  EXPECT_EQ(parseMemAvailable("MemTotal: 5 kB\n"), std::nullopt);
  EXPECT_EQ(parseMemAvailable("MemAvailable: x kB\n"), std::nullopt);
  EXPECT_EQ(parseMemAvailable(""), std::nullopt);
}

TEST(MemoryCheck, CgroupLimit) {
  EXPECT_EQ(parseCgroupLimit("max\n"), std::nullopt);                 // v2
  EXPECT_EQ(parseCgroupLimit("9223372036854771712\n"), std::nullopt); // v1
  EXPECT_EQ(parseCgroupLimit("1073741824\n"), kGiB);
  EXPECT_EQ(parseCgroupLimit(""), std::nullopt); // no such file
  EXPECT_EQ(parseCgroupLimit("12 GB"), std::nullopt);
}

TEST(MemoryCheck, ProcCgroup) {
  CgroupPaths v2 = parseProcCgroup("0::/user.slice/job-7\n");
  EXPECT_EQ(v2.v2, "/user.slice/job-7");
  EXPECT_EQ(v2.v1, "");
  CgroupPaths v1 = parseProcCgroup("9:name=systemd:/\n8:pids:/\n"
                                   "4:memory:/process_api/d03\n3:cpuset:/\n"
                                   "0::/\n");
  EXPECT_EQ(v1.v1, "/process_api/d03");
  EXPECT_EQ(v1.v2, "/");
  EXPECT_EQ(parseProcCgroup("5:cpu,memory:/a/b\n").v1, "/a/b");
  EXPECT_EQ(parseProcCgroup("garbage\n").v1, "");
}

TEST(MemoryCheck, CgroupHeadroom) {
  // v2: the limit less the usage, the inactive file cache counted free.
  EXPECT_EQ(cgroupHeadroom("1073741824\n", std::to_string(600 * kMiB),
                           "anon 1\ninactive_file " +
                               std::to_string(100 * kMiB) + "\nactive_file 3\n",
                           true),
            kGiB - 500 * kMiB);
  // v1 reads total_inactive_file.
  EXPECT_EQ(cgroupHeadroom("2147483648", std::to_string(kGiB),
                           "cache 5\ninactive_file 7\ntotal_inactive_file " +
                               std::to_string(kGiB / 2) + "\n",
                           false),
            2 * kGiB - kGiB / 2);
  // Over the limit: none left. No limit: nothing to say.
  EXPECT_EQ(cgroupHeadroom("100", "200", "", true), 0);
  EXPECT_EQ(cgroupHeadroom("max", "200", "", true), std::nullopt);
}

TEST(MemoryCheck, MaxMemoryOption) {
  std::string why;
  auto a = parseMemoryCap("auto", why);
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->off);
  EXPECT_EQ(a->bytes, -1);
  auto off = parseMemoryCap("off", why);
  ASSERT_TRUE(off);
  EXPECT_TRUE(off->off);
  EXPECT_EQ(parseMemoryCap("512MiB", why)->bytes, 512 * kMiB);
  EXPECT_EQ(parseMemoryCap("2GB", why)->bytes, int64_t(2000000000));
  EXPECT_EQ(parseMemoryCap("1e9B", why)->bytes, int64_t(1000000000));
  for (const char *bad : {"12", "2p", "-1GB", "0B", "lots", ""}) {
    why.clear();
    EXPECT_FALSE(parseMemoryCap(bad, why)) << bad;
    EXPECT_NE(why.find("--max-memory must be"), std::string::npos) << bad;
  }
}

RankMemory rankOf(int rank, const std::string &pool, int64_t params,
                  int64_t available) {
  RankMemory r;
  r.rank = rank;
  r.pool = pool;
  r.plan.params = r.plan.grads = params;
  r.plan.optimizer = 2 * params;
  r.plan.stash = 100;
  r.plan.workspace = 50;
  r.plan.buffersPeak = 2 * params + 150;
  r.plan.largestParams = {{"h.0.mlp.c_fc.weight", params / 2}};
  r.plan.largestStages = {{"stage 1 (copy 1)", 150}};
  r.available = {available, "MemAvailable"};
  return r;
}

TEST(MemoryCheck, EntryRoundTrip) {
  RankMemory r = rankOf(3, "node7 device 1", 1000, 123456);
  r.device = true;
  r.zero = 1;
  r.dp = 2;
  r.copies = 2;
  auto back = decodeRankMemory(encodeRankMemory(r));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->pool, "node7 device 1");
  EXPECT_TRUE(back->device);
  EXPECT_EQ(back->zero, 1);
  EXPECT_EQ(back->dp, 2);
  EXPECT_EQ(back->copies, 2);
  EXPECT_EQ(back->available.bytes, 123456);
  EXPECT_EQ(back->available.source, "MemAvailable");
  EXPECT_EQ(back->plan.total(), r.plan.total());
  EXPECT_EQ(back->plan.stash, 100);
  EXPECT_EQ(back->plan.largestParams, r.plan.largestParams);
  EXPECT_EQ(back->plan.largestStages, r.plan.largestStages);
  EXPECT_FALSE(decodeRankMemory("1\tnode"));
}

TEST(MemoryCheck, ReportSumsTheRanksOfAHost) {
  // Each rank alone fits in 5000 bytes; the two of host a together do not.
  // Host b's one rank fits and is not shown.
  std::vector<RankMemory> ranks = {rankOf(0, "a", 1000, 5000),
                                   rankOf(1, "a", 1000, 5000),
                                   rankOf(2, "b", 1000, 5000)};
  for (RankMemory &r : ranks)
    r.dp = 2;
  bool fits = true;
  std::string rep = memoryCheckReport(ranks, false, fits);
  EXPECT_FALSE(fits);
  EXPECT_NE(rep.find("memory check: a: ranks 0, 1 plan 8300 B (8.11 KiB), more "
                     "than the 5000 B (4.88 KiB) available (MemAvailable)"),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("memory check: rank 1 plans 4150 B (4.05 KiB): "
                     "parameters 1000, gradients 1000, optimizer state 2000, "
                     "activation stash 100, workspace 50"),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("parameter 'h.0.mlp.c_fc.weight' 500 B"),
            std::string::npos);
  EXPECT_NE(rep.find("--zero 1 shards the optimizer state over the 2 ranks"),
            std::string::npos);
  EXPECT_NE(rep.find("--recompute"), std::string::npos);
  EXPECT_NE(rep.find("ranks 0, 1 share this memory"), std::string::npos);
  EXPECT_EQ(rep.find("rank 2"), std::string::npos);
  // Printed on request, the fitting host too; unknown memory is not checked.
  ranks[0].available.bytes = ranks[1].available.bytes = -1;
  rep = memoryCheckReport(ranks, true, fits);
  EXPECT_TRUE(fits);
  EXPECT_NE(rep.find("memory check: a: ranks 0, 1 plan 8300 B (8.11 KiB) (not "
                     "checked)"),
            std::string::npos)
      << rep;
  EXPECT_NE(rep.find("memory check: b: rank 2 plans 4150 B (4.05 KiB), within "
                     "the 5000 B (4.88 KiB) available"),
            std::string::npos)
      << rep;
}

} // namespace
