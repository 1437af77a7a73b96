//===- ExecutorOffload.cpp - Activation offload to host memory ------------===//
//
// ExecutorOptions::offloadActivations (docs/runtime.md, "Activation
// offload"), PipeOffload's idea (Wan et al., ICML 2025) for this runtime: a
// microbatch's F-stash (what its B reads) is useless to the device between
// its F and its B, which in a pipeline schedule can be many actions apart
// (1F1B's first stage holds p microbatches). So, on a device backend:
//
//   after F(k):      each stash buffer is copied to host memory
//                    (Backend::allocHost: page-locked on CUDA) off the
//                    compute stream (CUDA's communication stream; a helper
//                    thread on cpu-device), ordered after F's kernels; the
//                    device buffer is freed after the next compute action
//                    (the host waits for the copy there if it has not
//                    finished), so the copy overlaps with that action and
//                    the peak is a function of the program;
//   before the compute action that precedes B(k): fresh device buffers,
//                    the copies back queued, so they run under that action;
//   at B(k):         the compute stream waits for them (no host wait on
//                    CUDA), and B reads the stash as if it had never left.
//
// Which microbatches, and when they leave and return: sched::planOffload
// (Schedule/Offload.h), from the program only; the simulator replays the
// same plan. A program compiled with --offload-activations carries the
// plan as OFFLOAD/RELOAD actions (pp-insert-offload): OFFLOAD starts the
// copy out, RELOAD the copy back, and the device memory leaves at the end
// of the first compute action after the OFFLOAD (sched::offloadPlanOf),
// the same places, so the same copies and the same peaks. Such a program
// refuses pipeforge-run --offload-activations (the plan is the
// program's), and on a host-memory backend its actions do nothing.
// The copies are exact, so losses and weights are bitwise those without
// offload; the memory report shows the device stash peak fall and the host
// bytes it took.
//
//===----------------------------------------------------------------------===//

#include "ExecutorImpl.h"

#include <thread>

namespace pipeforge::rt {

Status Executor::Impl::planOffload() {
  using O = ExecutorOptions::Offload;
  offloadPlan = {};
  offloadByActions = false;
  const std::vector<sched::Action> &program =
      prog.schedule.programs[size_t(prank)];
  if (sched::hasOffloadActions(prog.schedule)) {
    if (opts.offloadActivations != O::Off)
      return Status::error(
          "--offload-activations: this program's schedule places activation "
          "offload itself (OFFLOAD/RELOAD actions: pipeforge-compile "
          "--offload-activations); run it without --offload-activations, or "
          "compile it without offload to choose here");
    if (be.hostVisible()) // the activations are in host memory already
      return Status::ok();
    offloadByActions = true;
    offloadPlan = sched::offloadPlanOf(program);
    return Status::ok();
  }
  if (opts.offloadActivations == O::Off)
    return Status::ok();
  if (be.hostVisible())
    return Status::error(
        "activation offload needs a device backend (--backend cpu-device or "
        "cuda): with --backend " +
        std::string(be.name()) + " the activations are in host memory already");
  // The plan (which stashes, when they leave and come back) is the
  // schedule library's, which the simulator replays too.
  offloadPlan = sched::planOffload(
      program,
      opts.offloadActivations == O::Auto ? sched::kOffloadGapAuto
                                         : sched::kOffloadGapAll);
  return Status::ok();
}

Status Executor::Impl::startOffload(const Key &k) {
  auto it = stash.find(k);
  if (it == stash.end())
    return Status::ok();
  Offloaded o;
  void *after = be.recordEvent(); // F's kernels
  for (BufP &b : it->second) {
    // A buffer shared with something else (or empty) stays: freeing this
    // reference would not free its memory.
    if (!b || b.use_count() > 1 || b->bytes <= 0) {
      o.host.push_back(nullptr);
      o.bytes.push_back(0);
      o.kept.push_back(std::move(b));
      continue;
    }
    void *h = be.allocHost(b->bytes);
    if (!h)
      return Status::error("activation offload: out of host memory (" +
                           std::to_string(b->bytes) + " bytes)");
    void *ev = be.copyHostAsync(h, b->p, b->bytes, /*toHost=*/true, after);
    if (o.outEv) // the copies run in order: the last event covers all
      be.releaseEvent(o.outEv);
    o.outEv = ev;
    hostStash += b->bytes;
    o.host.push_back(h);
    o.bytes.push_back(b->bytes);
    o.kept.emplace_back();
    o.leaving.push_back(std::move(b));
  }
  be.releaseEvent(after);
  stash.erase(it);
  hostStashPeak = std::max(hostStashPeak, hostStash);
  ++offloadsThisStep;
  offloaded[k] = std::move(o);
  return Status::ok();
}

Status Executor::Impl::reload(const Key &k) {
  auto it = offloaded.find(k);
  if (it == offloaded.end() || it->second.back)
    return Status::ok();
  Offloaded &o = it->second;
  std::vector<BufP> slots(o.host.size());
  std::vector<BufP> fresh;
  for (size_t i = 0; i < o.host.size(); ++i) {
    if (!o.host[i]) {
      slots[i] = std::move(o.kept[i]);
      continue;
    }
    slots[i] = newBuf(o.bytes[i], MemClass::Stash, /*clear=*/false);
    if (!slots[i]->p)
      return Status::error("activation offload: out of device memory for a "
                           "stash coming back (" +
                           std::to_string(o.bytes[i]) + " bytes)");
  }
  // After the allocations (stream-ordered on CUDA) and the copy out.
  void *after = be.recordEvent();
  if (o.outEv) {
    be.waitEvent(o.outEv); // cpu-device: the helper thread's copy is done
    be.releaseEvent(o.outEv);
    o.outEv = nullptr;
  }
  o.leaving.clear(); // the copy out is ordered before the copy back
  for (size_t i = 0; i < o.host.size(); ++i) {
    if (!o.host[i])
      continue;
    void *ev = be.copyHostAsync(slots[i]->p, o.host[i], o.bytes[i],
                                /*toHost=*/false, after);
    if (o.inEv)
      be.releaseEvent(o.inEv);
    o.inEv = ev;
  }
  be.releaseEvent(after);
  o.back = true;
  stash[k] = std::move(slots);
  noteStash();
  return Status::ok();
}

Status Executor::Impl::ensureResident(const Key &k) {
  auto it = offloaded.find(k);
  if (it == offloaded.end())
    return Status::ok();
  if (Status s = reload(k); !s) // not prefetched (or the plan missed it)
    return s;
  Offloaded &o = it->second;
  if (o.inEv) {
    be.waitEvent(o.inEv); // CUDA: the compute stream waits, not the host
    // The host copies are freed once the copy back has finished.
  }
  return Status::ok();
}

void Executor::Impl::releaseHost(Offloaded &o) {
  for (size_t i = 0; i < o.host.size(); ++i)
    if (o.host[i]) {
      be.freeHost(o.host[i]);
      hostStash -= o.bytes[i];
      o.host[i] = nullptr;
    }
}

void Executor::Impl::pollOffloads(bool all, size_t i) {
  // Device memory goes where the plan says (the end of the compute action
  // after F), not as soon as the copy is done: the peak then depends on
  // the program only, not on how fast a copy ran, and equals the
  // simulator's.
  auto away = [&](Offloaded &o) {
    if (o.leaving.empty())
      return;
    // The host waits (CUDA: waitEvent would only order a stream).
    while (!be.eventDone(o.outEv))
      std::this_thread::yield();
    o.leaving.clear(); // the device copies are in host memory now
    noteStash();
  };
  if (!all)
    if (auto a = offloadPlan.awayAfter.find(i);
        a != offloadPlan.awayAfter.end())
      for (const sched::StashKey &k : a->second)
        if (auto it = offloaded.find(Key(k)); it != offloaded.end())
          away(it->second);
  for (auto it = offloaded.begin(); it != offloaded.end();) {
    Offloaded &o = it->second;
    if (all)
      away(o);
    if (o.back && (all || be.eventDone(o.inEv))) {
      if (all)
        be.synchronize(); // CUDA: the compute stream's wait included
      be.releaseEvent(o.inEv);
      be.releaseEvent(o.outEv);
      releaseHost(o);
      it = offloaded.erase(it);
      continue;
    }
    ++it;
  }
  if (all) {
    for (auto &[k, o] : offloaded) { // never came back (a failed step)
      be.releaseEvent(o.outEv);
      be.releaseEvent(o.inEv);
      releaseHost(o);
    }
    offloaded.clear();
    offloadsLastStep = offloadsThisStep;
    offloadsThisStep = 0;
  }
}

} // namespace pipeforge::rt
