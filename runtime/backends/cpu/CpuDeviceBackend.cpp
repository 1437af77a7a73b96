//===- CpuDeviceBackend.cpp - CPU kernels behind opaque device pointers ---===//
//
// "cpu-device": the CPU backend with device-style buffers. Every pointer it
// hands out has bit 62 set, which makes it a non-canonical x86-64 (and an
// unmapped AArch64) address: a host dereference faults at once instead of
// silently working. Offsets added to such a pointer stay below bit 62
// (user addresses are < 2^47), so the executor's pointer arithmetic into
// bundles survives and the backend strips the bit before each call.
//
// With hostVisible() false the executor takes the same code paths as with
// a GPU (staged messages, the optimizer's state and step on the device,
// the gradient norm as a device reduction, copies for the tokens and the
// loss), so those paths are tested on every machine, and a run must match
// the "cpu" backend bitwise. It counts the bytes it copies between host and
// "device" (the memory report's transfer line). Activation offload's
// asynchronous copies (copyHostAsync) run on a helper thread, overlapped
// with the kernels of the calling thread; their events are the jobs.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Backend.h"

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace pipeforge::rt {
namespace {

constexpr uintptr_t kOpaqueBit = uintptr_t(1) << 62;

void *hide(void *p) {
  return p ? reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(p) |
                                      kOpaqueBit)
           : nullptr;
}
template <typename T> T *reveal(T *p) {
  return reinterpret_cast<T *>(reinterpret_cast<uintptr_t>(p) & ~kOpaqueBit);
}

class CpuDeviceBackend final : public Backend {
public:
  ~CpuDeviceBackend() override {
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
    }
    work.notify_all();
    if (helper.joinable())
      helper.join();
  }
  const char *name() const override { return "cpu-device"; }
  bool hostVisible() const override { return false; }
  int device() const override { return 0; }

  void *alloc(int64_t bytes) override { return hide(cpu->alloc(bytes)); }
  void *allocUninit(int64_t bytes) override {
    return hide(cpu->allocUninit(bytes));
  }
  void free(void *p) override { cpu->free(reveal(p)); }
  void copyToHost(void *hostDst, const void *src, int64_t bytes) override {
    moved.toHost += bytes;
    cpu->copyToHost(hostDst, reveal(src), bytes);
  }
  void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) override {
    moved.toDevice += bytes;
    cpu->copyFromHost(reveal(dst), hostSrc, bytes);
  }
  Transfers transfers() const override { return moved; }
  void *hostAddress(const void *p) override {
    return const_cast<void *>(reveal(p));
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    cpu->copy(reveal(dst), reveal(src), bytes);
  }
  void fillZero(void *p, int64_t bytes) override {
    cpu->fillZero(reveal(p), bytes);
  }
  void accumulate(float *dst, const float *src, int64_t n) override {
    cpu->accumulate(reveal(dst), reveal(src), n);
  }
  void scale(float *x, float a, int64_t n) override {
    cpu->scale(reveal(x), a, n);
  }
  bool runsOptimizer() const override { return true; }
  Status adamw(const AdamWCoeffs &c, int64_t n, float *theta, float *m,
               float *v, const float *grad, bool undo) override {
    return cpu->adamw(c, n, reveal(theta), reveal(m), reveal(v), reveal(grad),
                      undo);
  }
  Status sumSquares(const float *x, int64_t n, double *out) override {
    return cpu->sumSquares(reveal(x), n, out);
  }
  bool canAddTo(const Kernel &k, size_t out) const override {
    return cpu->canAddTo(k, out);
  }
  Status run(const KernelCall &call) override {
    KernelCall c = call;
    for (const void *&p : c.in)
      p = reveal(p);
    for (void *&p : c.out)
      p = reveal(p);
    return cpu->run(c);
  }

  void *copyHostAsync(void *dst, const void *src, int64_t bytes, bool toHost,
                      void * /*after: the kernels ran already*/) override {
    (toHost ? moved.toHost : moved.toDevice) += bytes;
    auto *j = new Job{reveal(dst), reveal(src), size_t(std::max<int64_t>(bytes, 0))};
    {
      std::lock_guard<std::mutex> l(mu);
      if (!helper.joinable())
        helper = std::thread([this] { copyLoop(); });
      queue.push_back(j);
    }
    work.notify_one();
    return j;
  }
  bool eventDone(void *ev) override {
    if (!ev)
      return true;
    std::lock_guard<std::mutex> l(mu);
    return static_cast<Job *>(ev)->done;
  }
  void waitEvent(void *ev) override {
    if (!ev)
      return;
    std::unique_lock<std::mutex> l(mu);
    finished.wait(l, [&] { return static_cast<Job *>(ev)->done; });
  }
  void releaseEvent(void *ev) override {
    waitEvent(ev);
    delete static_cast<Job *>(ev);
  }

private:
  std::unique_ptr<Backend> cpu = createCpuBackend();
  Transfers moved;

  /// copyHostAsync's jobs, copied in order by one helper thread.
  struct Job {
    void *dst;
    const void *src;
    size_t bytes;
    bool done = false;
  };
  std::mutex mu;
  std::condition_variable work, finished;
  std::deque<Job *> queue;
  bool stop = false;
  std::thread helper;

  void copyLoop() {
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      work.wait(l, [&] { return stop || !queue.empty(); });
      if (queue.empty())
        return;
      Job *j = queue.front();
      queue.pop_front();
      l.unlock();
      if (j->bytes)
        std::memcpy(j->dst, j->src, j->bytes);
      l.lock();
      j->done = true;
      finished.notify_all();
    }
  }
};

} // namespace

std::unique_ptr<Backend> createCpuDeviceBackend() {
  return std::make_unique<CpuDeviceBackend>();
}

} // namespace pipeforge::rt
