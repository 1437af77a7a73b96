//===- Parallel.h - Per-rank work on the machine's cores ------------------===//
//
// The library's passes over a schedule (message insertion, the verifier's
// static checks, the text grid) mostly look at one rank's program at a time,
// and at millions of actions those passes are the command's wall time. These
// helpers spread such loops over the cores when the schedule is big enough
// for threads to pay (Parallel::worth), and keep the sequential loop's
// result: a check that stops at its first error reports the error of the
// lowest index that failed, as the loop in order would.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_LIB_SCHEDULE_PARALLEL_H
#define PIPEFORGE_LIB_SCHEDULE_PARALLEL_H

#include "pipeforge/Schedule/Action.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace pipeforge::sched::detail {

/// Frees a container's memory now (clear() keeps the capacity).
template <typename C> void release(C &c) { C().swap(c); }

/// Whether a pass over `s` is worth threads: below about 64k actions a
/// thread's start costs more than it saves (the automatic scheduler runs
/// thousands of small candidates through these passes).
inline bool parallelWorth(const Schedule &s) {
  size_t n = 0;
  for (const std::vector<Action> &prog : s.programs)
    n += prog.size();
  return s.programs.size() > 1 && n >= (size_t(1) << 16);
}

/// Runs fn(i) for i in [0, n) on up to min(n, cores) threads (the calling
/// thread is one of them), or in order on this thread when !parallel. fn
/// must touch only item i's state. An exception from fn (std::bad_alloc)
/// stops the items not yet started and reaches the caller once every
/// thread has stopped (the first one thrown).
template <class Fn> void forEachParallel(size_t n, Fn fn, bool parallel = true) {
  size_t threads =
      parallel ? std::min<size_t>(
                     n, std::max<unsigned>(1, std::thread::hardware_concurrency()))
               : 1;
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i)
      fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr failed;
  std::atomic_flag failing = ATOMIC_FLAG_INIT;
  auto work = [&] {
    try {
      for (size_t i = next++; i < n; i = next++)
        fn(i);
    } catch (...) {
      next = n;
      if (!failing.test_and_set())
        failed = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error &) {
      break; // no more threads: the ones running take the rest
    }
  }
  work();
  for (std::thread &t : pool)
    t.join();
  if (failed)
    std::rethrow_exception(failed);
}

/// check(i) -> Status for i in [0, n), in parallel when asked; the error of
/// the lowest i that failed, as a loop in order that stops at its first
/// error would report. check(i) must touch only item i's state.
template <class Check>
Status firstFailure(size_t n, bool parallel, Check check) {
  if (!parallel) {
    for (size_t i = 0; i < n; ++i)
      if (Status st = check(i); !st)
        return st;
    return Status::ok();
  }
  std::vector<Status> result(n, Status::ok());
  forEachParallel(n, [&](size_t i) { result[i] = check(i); });
  for (Status &st : result)
    if (!st)
      return std::move(st);
  return Status::ok();
}

/// Maps fresh memory in on another core while this thread goes on writing
/// it. A sequential phase over millions of actions (the simulator's
/// replay) writes hundreds of megabytes of fresh pages; clearing and
/// mapping them is kernel time on the phase's critical path (about a third
/// of the replay on these VMs) while the other core idles. The helper asks
/// the kernel to map the ranges' pages writable (Linux's
/// MADV_POPULATE_WRITE), which never changes their contents: the writer
/// needs no synchronisation with it, and a page it reaches first it simply
/// faults in itself. The ranges are mapped a slice of each in turn, as a
/// writer that fills them side by side (one per rank) uses them. The
/// destructor waits for the helper; the ranges must stay allocated until
/// then. Elsewhere than Linux, or below kMinBytes, or on one core, it does
/// nothing.
class Prefault {
public:
  static constexpr size_t kMinBytes = size_t(64) << 20;

  explicit Prefault(std::vector<std::pair<void *, size_t>> ranges) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    size_t total = 0;
    for (const auto &r : ranges)
      total += r.second;
    if (total < kMinBytes || std::thread::hardware_concurrency() < 2)
      return;
    try {
      helper = std::thread(&Prefault::populate, this, std::move(ranges));
    } catch (const std::system_error &) {
      // No thread to spare: the writer maps its pages itself.
    }
#else
    (void)ranges;
#endif
  }
  Prefault(const Prefault &) = delete;
  Prefault &operator=(const Prefault &) = delete;
  /// Stops the helper before its next slice (1 MB) and waits for it.
  ~Prefault() {
    stop = true;
    if (helper.joinable())
      helper.join();
  }

private:
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  void populate(std::vector<std::pair<void *, size_t>> ranges) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    constexpr uintptr_t kSlice = uintptr_t(1) << 20;
    // Whole pages inside each range (a partial edge page is the writer's).
    std::vector<std::pair<uintptr_t, uintptr_t>> left; // [begin, end)
    for (const auto &[p, n] : ranges) {
      uintptr_t b = (uintptr_t(p) + page - 1) / page * page;
      uintptr_t e = (uintptr_t(p) + n) / page * page;
      if (b < e)
        left.emplace_back(b, e);
    }
    for (bool more = true; more;) {
      more = false;
      for (auto &[b, e] : left) {
        if (stop.load(std::memory_order_relaxed))
          return;
        if (b >= e)
          continue;
        uintptr_t n = std::min(kSlice, e - b);
        if (madvise(reinterpret_cast<void *>(b), n, MADV_POPULATE_WRITE))
          return; // an older kernel (before 5.14): the writer faults
        b += n;
        more |= b < e;
      }
    }
  }
#endif

  std::atomic<bool> stop{false};
  std::thread helper;
};

} // namespace pipeforge::sched::detail

#endif
