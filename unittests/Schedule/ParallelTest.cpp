//===- ParallelTest.cpp - The schedule library's threading helpers --------===//

#include "Parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace pipeforge::sched;
using namespace pipeforge::sched::detail;

namespace {

TEST(ParallelTest, ForEachParallelRunsEveryItemOnce) {
  for (bool parallel : {false, true}) {
    std::vector<int> hits(1000, 0);
    forEachParallel(hits.size(), [&](size_t i) { ++hits[i]; }, parallel);
    for (size_t i = 0; i < hits.size(); ++i)
      ASSERT_EQ(hits[i], 1) << i << (parallel ? " parallel" : "");
  }
}

TEST(ParallelTest, AnExceptionReachesTheCallerAfterEveryThreadStopped) {
  // An item that throws (std::bad_alloc in a pass over millions of
  // actions) must not end the process from a worker thread: the first
  // exception reaches the caller, the items not yet started are skipped,
  // and no thread is left running.
  for (bool parallel : {false, true}) {
    std::vector<std::atomic<int>> hits(400);
    bool caught = false;
    try {
      forEachParallel(hits.size(), [&](size_t i) {
        ++hits[i];
        if (i == 7)
          throw std::bad_alloc();
        if (i > 7)
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      }, parallel);
    } catch (const std::bad_alloc &) {
      caught = true;
    }
    EXPECT_TRUE(caught) << (parallel ? "parallel" : "in order");
    size_t ran = 0;
    for (auto &h : hits)
      ran += h.load();
    EXPECT_EQ(hits[7].load(), 1);
    EXPECT_LT(ran, hits.size()) << "items after the failure were skipped";
  }
}

TEST(ParallelTest, FirstFailureIsTheLowestIndexes) {
  for (bool parallel : {false, true}) {
    Status st = firstFailure(64, parallel, [](size_t i) {
      return i == 40 || i == 9 ? Status::error("item " + std::to_string(i))
                               : Status::ok();
    });
    ASSERT_FALSE(st.isOk());
    EXPECT_EQ(st.message(), "item 9");
  }
}

TEST(ParallelTest, PrefaultLeavesTheContentsToTheWriter) {
  // The helper maps pages in while this thread writes them; whatever the
  // interleaving, every byte is the writer's. Two ranges written side by
  // side, as the simulator writes its ranks' intervals; one slice of each
  // is written before the helper starts.
  constexpr size_t kBytes = Prefault::kMinBytes; // 64 MB in two halves
  std::unique_ptr<unsigned char[]> buf(new unsigned char[kBytes]);
  unsigned char *half[2] = {buf.get(), buf.get() + kBytes / 2};
  auto value = [](size_t k, int h) {
    return static_cast<unsigned char>((k * 131 + h * 7) % 251);
  };
  for (int h = 0; h < 2; ++h)
    for (size_t k = 0; k < 4096; ++k)
      half[h][k] = value(k, h);
  {
    Prefault pf({{half[0], kBytes / 2}, {half[1], kBytes / 2}});
    for (size_t k = 4096; k < kBytes / 2; ++k)
      for (int h = 0; h < 2; ++h)
        half[h][k] = value(k, h);
  }
  for (int h = 0; h < 2; ++h)
    for (size_t k = 0; k < kBytes / 2; ++k)
      ASSERT_EQ(half[h][k], value(k, h)) << "half " << h << ", byte " << k;
}

#if defined(__linux__)
TEST(ParallelTest, PrefaultStopsWhenDestroyedEarly) {
  // Destroyed early (a replay that ended early): the helper stops before
  // its next 1 MB slice instead of mapping its ranges in. With 256
  // ranges of 2 MB, one round over them is 256 MB: the helper must look at
  // the stop flag between slices, not between rounds.
  constexpr size_t kRanges = 256, kRange = size_t(2) << 20;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  std::unique_ptr<unsigned char[]> buf(
      new unsigned char[kRanges * kRange + page]);
  unsigned char *base = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(buf.get()) + page - 1) / page * page);
  std::vector<std::pair<void *, size_t>> ranges;
  for (size_t k = 0; k < kRanges; ++k)
    ranges.emplace_back(base + k * kRange, kRange);
  {
    Prefault pf(ranges);
    // Let it start (a full round takes far longer than this).
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<unsigned char> resident(kRanges * kRange / page);
  ASSERT_EQ(mincore(base, kRanges * kRange, resident.data()), 0);
  size_t pages = 0;
  for (unsigned char r : resident)
    pages += r & 1;
  EXPECT_LT(pages * page, size_t(128) << 20)
      << "the helper mapped " << pages * page / (1 << 20) << " MB in";
}
#endif

} // namespace
