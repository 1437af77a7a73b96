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
#include <thread>
#include <vector>

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
/// must touch only item i's state.
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
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++)
      fn(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();
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

} // namespace pipeforge::sched::detail

#endif
