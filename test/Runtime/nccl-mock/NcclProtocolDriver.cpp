//===- NcclProtocolDriver.cpp - nccl-protocol-test ------------------------===//
//
// Runs runtime/transports/nccl/NcclTransport.cpp, built against the host-only CUDA
// and NCCL of MockCudaNccl.cpp, under mpirun and checks every byte that
// arrives (test/Runtime/nccl-protocol.test):
//
//   nccl-protocol-test p2p [D E]   P = world / (D E) pipeline ranks. Every
//       rank sends every peer 8 tags twice (same tag: first in, first out),
//       of 0, 1..50 and 300000 floats. Half the receives are posted before
//       the sends and wait, in another order than the sends; the other half
//       after all messages arrived (staged, then copied). The first sends
//       and receives sit behind compute-stream work that is held back: none
//       may complete, and each must see that work's result (the send its
//       data, the receive a buffer written before it). Then pairwiseSum,
//       allreduce over every group, the expert all-to-all.
//   nccl-protocol-test collectives  P = 1, D = 2, E = world / 2: a large
//       data-parallel allreduce, an expert max, two all-to-alls in flight
//       with parts of 0..40000 floats, waited in reverse order.
//   nccl-protocol-test size-mismatch-waiting | size-mismatch-staged
//       P = world (2): rank 1 expects 12 floats where rank 0 sends 10, with
//       the receive posted first (waiting) or after the message arrived
//       (staged); prints the error, which must then be sticky.
//   nccl-protocol-test timeout  P = world (2): rank 0 waits for a message
//       that never comes; prints the watchdog's error (1.5 s), which must
//       have aborted every communicator.
//
// Rank 0 prints "nccl-protocol-test MODE P=.. D=.. E=..: passed" when every
// rank's checks passed, else "FAILED" (failed checks on stderr, exit status
// 1). After the transport is gone each rank checks the shutdown: the
// expected communicators were created, then all finalized and destroyed
// (all aborted after an error), no device memory, event or stream step
// left. Calls the mock refuses end the job at once (see MockCudaNccl.cpp).
//
//===----------------------------------------------------------------------===//

#include "MockCudaNccl.h"

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/NcclTransport.h"

#include "cuda_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace pipeforge::rt;

namespace {

int worldRank = 0;
int failures = 0;

void check(bool ok, int line, const std::string &what) {
  if (ok)
    return;
  ++failures;
  std::fprintf(stderr, "nccl-protocol-test: rank %d: line %d: %s\n", worldRank,
               line, what.c_str());
}
#define CHECK(cond, what) check((cond), __LINE__, (what))
#define CHECK_OK(expr)                                                         \
  do {                                                                         \
    Status s_ = (expr);                                                        \
    check(bool(s_), __LINE__, #expr ": " + s_.message());                      \
  } while (0)

RequestId posted(Expected<RequestId> r, int line) {
  check(bool(r), line, "post failed: " + r.message());
  return r ? *r : 0;
}
#define POSTED(expr) posted((expr), __LINE__)

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// A device backend without kernels: buffers are host memory, the compute
/// stream is a mock stream.
class FakeBackend final : public Backend {
public:
  FakeBackend() { cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); }
  ~FakeBackend() override { cudaStreamDestroy(stream); }
  const char *name() const override { return "fake"; }
  bool hostVisible() const override { return false; }
  void *alloc(int64_t bytes) override { return std::calloc(size_t(bytes), 1); }
  void free(void *p) override { std::free(p); }
  void copyToHost(void *dst, const void *src, int64_t bytes) override {
    std::memcpy(dst, src, size_t(bytes));
  }
  void copyFromHost(void *dst, const void *src, int64_t bytes) override {
    std::memcpy(dst, src, size_t(bytes));
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    std::memcpy(dst, src, size_t(bytes));
  }
  void fillZero(void *p, int64_t bytes) override {
    std::memset(p, 0, size_t(bytes));
  }
  void accumulate(float *, const float *, int64_t) override {}
  void scale(float *, float, int64_t) override {}
  Status run(const KernelCall &) override { return Status::ok(); }
  void *computeStream() override { return stream; }
  int device() const override { return 0; }

  cudaStream_t stream = nullptr;
};

/// Queues on the compute stream a copy of `n` floats from `src` (which must
/// stay alive) into `dst`: a kernel that produces `dst`.
void produce(FakeBackend &be, float *dst, const float *src, int64_t n) {
  if (n > 0)
    cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float),
                    cudaMemcpyDeviceToDevice, be.stream);
}

/// Progress until `done()`, at most 60 s: 8 ranks busy-polling on a loaded
/// 2-core machine can take seconds per round, and a real hang is still
/// caught (lit's timeout is 120 s).
template <typename F> bool progressUntil(Transport &t, F done) {
  auto start = Clock::now();
  while (!done()) {
    if (secondsSince(start) > 60)
      return false;
    t.progress();
  }
  return true;
}

//===----------------------------------------------------------------------===//
// p2p
//===----------------------------------------------------------------------===//

constexpr int kTags = 8, kDups = 2;

/// Floats from pipeline rank `src` to `dst` under `tag`: tag 3 is empty,
/// tag 5 is past MPI's eager limit (rendezvous).
int64_t messageSize(int src, int dst, int tag) {
  if (tag == 3)
    return 0;
  if (tag == 5)
    return 300000;
  return 1 + (src * 7 + dst * 3 + tag * 5) % 50;
}

std::vector<float> messageData(int src, int dst, int tag, int dup) {
  std::vector<float> v(size_t(messageSize(src, dst, tag)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = float(src * 10000 + dst * 100 + tag) + float(i % 97) * 0.25f +
           float(dup) * 1e6f;
  return v;
}

/// Whether the receive of (src, tag) is posted before the sends.
bool early(int src, int tag) { return (src + tag) % 2 == 0; }

struct Message {
  int peer, tag, dup;
  std::vector<float> buf; ///< a receive's has a guard float at the end
  RequestId id = 0;
};

/// The float that fills a held receive's buffer before its transfer.
constexpr float kOverwritten = -7;
constexpr float kGuard = -1;

void checkReceived(const Message &m, int me) {
  std::vector<float> want = messageData(m.peer, me, m.tag, m.dup);
  bool good = m.buf.size() == want.size() + 1 && m.buf.back() == kGuard &&
              std::equal(want.begin(), want.end(), m.buf.begin());
  CHECK(good, "message from " + std::to_string(m.peer) + " tag " +
                  std::to_string(m.tag) + " copy " + std::to_string(m.dup) +
                  " has the wrong data");
}

void runP2P(Transport &t, FakeBackend &be, int D, int E, int T) {
  int W = t.worldSize();
  CHECK_OK(t.setupTensorGrid(W / (D * E * T), D, E, T));
  t.attachBackend(be);
  int P = t.pipelineSize(), me = t.pipelineRank();
  mock::Stats base = mock::stats();

  // Early receives, each behind held compute work that overwrites its
  // buffer: the transfer must land after that work.
  std::vector<Message> recvs, sends;
  recvs.reserve(size_t(P * kTags * kDups));
  sends.reserve(size_t(P * kTags * kDups));
  std::vector<float> overwrite(300001, kOverwritten);
  mock::hold(be.stream);
  for (int tag = kTags - 1; tag >= 0; --tag)
    for (int q = P - 1; q >= 0; --q)
      for (int dup = 0; q != me && early(q, tag) && dup < kDups; ++dup) {
        Message &m = recvs.emplace_back(Message{q, tag, dup, {}});
        int64_t n = messageSize(q, me, tag);
        m.buf.assign(size_t(n) + 1, kGuard);
        produce(be, m.buf.data(), overwrite.data(), n);
        m.id = POSTED(t.irecv(q, tag, m.buf.data(), n));
      }
  size_t numEarly = recvs.size();
  // Every early receive is registered before any message is sent.
  CHECK_OK(t.barrier(Group::World));

  // Sends, each of data that held compute work produces.
  std::vector<std::vector<float>> produced;
  produced.reserve(sends.capacity());
  for (int q = 0; q < P; ++q)
    for (int tag = 0; q != me && tag < kTags; ++tag)
      for (int dup = 0; dup < kDups; ++dup) {
        Message &m = sends.emplace_back(Message{q, tag, dup, {}});
        produced.push_back(messageData(me, q, tag, dup));
        m.buf.assign(produced.back().size(),
                     std::numeric_limits<float>::quiet_NaN());
        produce(be, m.buf.data(), produced.back().data(),
                int64_t(produced.back().size()));
        m.id = POSTED(
            t.isend(q, tag, m.buf.data(), int64_t(produced.back().size())));
        t.progress();
      }
  for (int k = 0; k < 100; ++k)
    t.progress();
  int done = 0;
  for (std::vector<Message> *ms : {&sends, &recvs})
    for (Message &m : *ms)
      if (m.id && t.test(m.id)) {
        m.id = 0;
        ++done;
      }
  CHECK(done == 0, std::to_string(done) + " requests completed before the "
                                          "compute-stream work they follow");
  mock::release(be.stream);

  // Late receives: once every header has arrived (one ncclRecv per non-empty
  // message), each finds its message staged and copies it.
  long wantRecvs = 0;
  for (int q = 0; q < P; ++q)
    for (int tag = 0; q != me && tag < kTags; ++tag)
      wantRecvs += kDups * (messageSize(q, me, tag) > 0);
  CHECK(progressUntil(t,
                      [&] {
                        return mock::stats().ncclRecvs - base.ncclRecvs ==
                               wantRecvs;
                      }),
        "not every message arrived");
  long copies = mock::stats().deviceCopies, wantCopies = 0;
  for (int tag = 0; tag < kTags; ++tag)
    for (int q = 0; q < P; ++q)
      for (int dup = 0; q != me && !early(q, tag) && dup < kDups; ++dup) {
        Message &m = recvs.emplace_back(Message{q, tag, dup, {}});
        int64_t n = messageSize(q, me, tag);
        m.buf.assign(size_t(n) + 1, kGuard);
        m.id = POSTED(t.irecv(q, tag, m.buf.data(), n));
        wantCopies += n > 0;
      }
  CHECK(
      mock::stats().deviceCopies - copies == wantCopies,
      "late receives: " + std::to_string(mock::stats().deviceCopies - copies) +
          " staged copies, " + std::to_string(wantCopies) + " expected");

  // Sends complete by test(), receives by wait() in reverse posting order.
  CHECK(progressUntil(t,
                      [&] {
                        bool all = true;
                        for (Message &m : sends)
                          if (m.id && t.test(m.id))
                            m.id = 0;
                          else
                            all &= m.id == 0;
                        return all;
                      }),
        "sends did not complete by test()");
  for (size_t k = recvs.size(); k-- > 0;) {
    if (recvs[k].id)
      CHECK_OK(t.wait(recvs[k].id));
    checkReceived(recvs[k], me);
  }
  CHECK(numEarly > 0 && recvs.size() > numEarly,
        "both early and late receives");
  for (size_t k = 0; k < sends.size(); ++k)
    CHECK(std::equal(produced[k].begin(), produced[k].end(),
                     sends[k].buf.begin()),
          "a send changed its buffer");

  // pairwiseSum with the neighbour (self without one): both sides get
  // mine + theirs.
  int peer = (me ^ 1) < P ? me ^ 1 : me;
  auto pairData = [](int r, size_t i) {
    return float(r + 1) * 0.1f + float(i);
  };
  std::vector<float> g(1000);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = pairData(me, i);
  CHECK_OK(t.pairwiseSum(peer, g.data(), int64_t(g.size())));
  bool good = true;
  for (size_t i = 0; i < g.size(); ++i)
    good &= g[i] == pairData(me, i) + pairData(peer, i);
  CHECK(good, "pairwiseSum with " + std::to_string(peer));
  float one = float(me + 1);
  CHECK_OK(t.pairwiseSum(peer, &one, 1));
  CHECK(one == float(me + 1) + float(peer + 1), "pairwiseSum of one float");
  CHECK_OK(t.pairwiseSum(peer, nullptr, 0));

  // Allreduce over every group; the all-to-all over the expert group.
  float x = float(me);
  CHECK_OK(t.allreduce(&x, 1, Group::Pipeline, ReduceOp::Max));
  CHECK(x == float(P - 1), "pipeline max");
  std::vector<float> y(70000);
  for (size_t i = 0; i < y.size(); ++i)
    y[i] = float(t.dpIndex() + 1) + float(i % 7);
  CHECK_OK(t.allreduce(y.data(), int64_t(y.size()), Group::DataParallel));
  good = true;
  for (size_t i = 0; i < y.size(); ++i)
    good &= y[i] == float(D * (D + 1) / 2) + float(D) * float(i % 7);
  CHECK(good, "data-parallel sum");
  // The executor's gradient path with a device backend: the same sum in
  // place on the backend's memory (host memory stands in for it here).
  CHECK(t.deviceCollectives(), "the transport reduces on the device");
  std::vector<float> yd(70000);
  for (size_t i = 0; i < yd.size(); ++i)
    yd[i] = float(t.dpIndex() + 1) + float(i % 7);
  CHECK_OK(t.allreduceDevice(yd.data(), int64_t(yd.size()), Group::DataParallel));
  CHECK(yd == y, "data-parallel sum on the device");
  // The overlapped gradient reduction: two sums in flight at once (posted
  // behind the compute stream, waited for in order, one polled by test()
  // first), each equal to the blocking one.
  std::vector<float> o1(yd.size()), o2(513);
  for (size_t i = 0; i < o1.size(); ++i)
    o1[i] = float(t.dpIndex() + 1) + float(i % 7);
  for (size_t i = 0; i < o2.size(); ++i)
    o2[i] = float(t.dpIndex() + 1) + float(i % 7);
  auto h1 = t.allreduceDeviceStart(o1.data(), int64_t(o1.size()),
                                   Group::DataParallel);
  auto h2 = t.allreduceDeviceStart(o2.data(), int64_t(o2.size()),
                                   Group::DataParallel);
  CHECK(bool(h1) && bool(h2), "overlapped device allreduces posted");
  while (!t.test(*h2))
    t.progress();
  CHECK_OK(t.wait(*h1));
  CHECK_OK(t.wait(*h2)); // released by test(): returns at once
  CHECK(o1 == y, "overlapped data-parallel sum on the device");
  CHECK(std::equal(o2.begin(), o2.end(), y.begin()),
        "second overlapped sum on the device");
  float z = float(t.epIndex());
  CHECK_OK(t.allreduce(&z, 1, Group::Expert, ReduceOp::Max));
  CHECK(z == float(E - 1), "expert max");
  std::vector<std::vector<float>> parts(static_cast<size_t>(E)), got;
  for (int k = 0; k < E; ++k)
    parts[size_t(k)].assign(size_t(3 + k), float(t.epIndex() * 10 + k));
  CHECK_OK(t.allToAll(parts, got, Group::Expert));
  for (int k = 0; k < E; ++k)
    CHECK(got.size() == size_t(E) &&
              got[size_t(k)] == std::vector<float>(size_t(3 + t.epIndex()),
                                                   float(k * 10 + t.epIndex())),
          "all-to-all part from " + std::to_string(k));
  float w = float(t.worldRank());
  CHECK_OK(t.allreduce(&w, 1, Group::World));
  CHECK(w == float(W * (W - 1) / 2), "world sum");
  // The tensor group (host memory, over MPI): a sum and an all-to-all.
  CHECK(t.tpSize() == T, "tensor group size");
  float v = float(t.tpIndex() + 1);
  CHECK_OK(t.allreduce(&v, 1, Group::Tensor));
  CHECK(v == float(T * (T + 1) / 2), "tensor sum");
  std::vector<std::vector<float>> tparts(static_cast<size_t>(T)), tgot;
  for (int k = 0; k < T; ++k)
    tparts[size_t(k)].assign(2, float(t.tpIndex() * 10 + k));
  CHECK_OK(t.allToAll(tparts, tgot, Group::Tensor));
  for (int k = 0; k < T; ++k)
    CHECK(tgot.size() == size_t(T) &&
              tgot[size_t(k)] ==
                  std::vector<float>(2, float(k * 10 + t.tpIndex())),
          "tensor all-to-all part from " + std::to_string(k));
  // The tensor group's device collectives (the executor's nn.tp_* on a
  // device backend) run on an NCCL communicator of their own.
  if (T > 1) {
    const int64_t n = 1000;
    std::vector<float> ar(n), ag(size_t(n * T)), rs(size_t(n * T)), out(n);
    for (int64_t i = 0; i < n; ++i)
      ar[size_t(i)] = float(t.tpIndex() + 1) * float(i % 5 + 1);
    CHECK_OK(t.allreduceDevice(ar.data(), n, Group::Tensor));
    bool good = true;
    for (int64_t i = 0; i < n; ++i)
      good &= ar[size_t(i)] == float(T * (T + 1) / 2) * float(i % 5 + 1);
    CHECK(good, "tensor sum on the device");
    std::vector<float> mine(size_t(n), float(t.tpIndex() * 100));
    CHECK_OK(t.allGatherDevice(mine.data(), ag.data(), n, Group::Tensor));
    good = true;
    for (int r = 0; r < T; ++r)
      for (int64_t i = 0; i < n; ++i)
        good &= ag[size_t(r * n + i)] == float(r * 100);
    CHECK(good, "tensor all-gather on the device");
    for (int r = 0; r < T; ++r)
      for (int64_t i = 0; i < n; ++i)
        rs[size_t(r * n + i)] = float(r * 1000 + t.tpIndex());
    CHECK_OK(t.reduceScatterDevice(rs.data(), out.data(), n, Group::Tensor));
    good = true;
    for (int64_t i = 0; i < n; ++i)
      good &= out[size_t(i)] ==
              float(T * t.tpIndex() * 1000 + T * (T - 1) / 2);
    CHECK(good, "tensor reduce-scatter on the device");
  }
}

//===----------------------------------------------------------------------===//
// collectives
//===----------------------------------------------------------------------===//

std::vector<float> part(int src, int dst, int which) {
  bool empty = (src * 3 + dst + which) % 4 == 0;
  std::vector<float> v(
      empty ? 0 : size_t(1 + (src * 5 + dst * 11 + which * 7) % 40000));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = float(src * 1000 + dst * 10 + which) + float(i);
  return v;
}

void runCollectives(Transport &t, FakeBackend &be) {
  int E = t.worldSize() / 2;
  CHECK_OK(t.setupGrid(1, 2, E));
  t.attachBackend(be);
  int d = t.dpIndex(), e = t.epIndex();
  std::vector<float> g(100000);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = float(d + 1) * float(i % 13);
  CHECK_OK(t.allreduce(g.data(), int64_t(g.size()), Group::DataParallel));
  bool good = true;
  for (size_t i = 0; i < g.size(); ++i)
    good &= g[i] == 3.f * float(i % 13);
  CHECK(good, "data-parallel sum");
  float m = float(e * 3 + d);
  CHECK_OK(t.allreduce(&m, 1, Group::Expert, ReduceOp::Max));
  CHECK(m == float((E - 1) * 3 + d), "expert max");

  std::vector<std::vector<float>> s1(static_cast<size_t>(E)),
      s2(static_cast<size_t>(E)), r1, r2, r3;
  for (int k = 0; k < E; ++k) {
    s1[size_t(k)] = part(e, k, 1);
    s2[size_t(k)] = part(e, k, 2);
  }
  RequestId h1 = POSTED(t.allToAllStart(s1, r1, Group::Expert));
  RequestId h2 = POSTED(t.allToAllStart(s2, r2, Group::Expert));
  for (int k = 0; k < 100; ++k)
    t.progress();
  CHECK_OK(t.wait(h2));
  CHECK_OK(t.wait(h1));
  for (int k = 0; k < E; ++k) {
    CHECK(r1.size() == size_t(E) && r1[size_t(k)] == part(k, e, 1),
          "all-to-all 1, part from " + std::to_string(k));
    CHECK(r2.size() == size_t(E) && r2[size_t(k)] == part(k, e, 2),
          "all-to-all 2, part from " + std::to_string(k));
  }
  CHECK_OK(t.allToAll(s1, r3, Group::Expert));
  CHECK(r3 == r1, "blocking all-to-all");
}

//===----------------------------------------------------------------------===//
// size-mismatch-*, timeout
//===----------------------------------------------------------------------===//

void runSizeMismatch(Transport &t, FakeBackend &be, bool staged) {
  CHECK_OK(t.setupGrid(t.worldSize(), 1, 1));
  t.attachBackend(be);
  int me = t.pipelineRank();
  long recvs0 = mock::stats().ncclRecvs;
  std::vector<float> b(20, 1.f);
  if (me == 0) {
    POSTED(t.isend(1, 5, b.data(), 10));
    POSTED(t.isend(1, 6, b.data(), 10));
    CHECK_OK(t.barrier(Group::World));
  } else if (me == 1 && !staged) {
    RequestId r = POSTED(t.irecv(0, 5, b.data(), 12));
    CHECK_OK(t.barrier(Group::World));
    Status w = t.wait(r);
    std::printf("size mismatch (waiting): %s\n", w.message().c_str());
    CHECK(!w, "a receive of the wrong size succeeded");
    auto again = t.irecv(0, 7, b.data(), 1);
    CHECK(!again && again.message() == w.message(),
          "the first error is not sticky: " + again.message());
  } else if (me == 1) {
    CHECK_OK(t.barrier(Group::World));
    CHECK(
        progressUntil(t, [&] { return mock::stats().ncclRecvs - recvs0 == 2; }),
        "the messages did not arrive");
    auto r = t.irecv(0, 6, b.data(), 12);
    std::printf("size mismatch (staged): %s\n", r.message().c_str());
    CHECK(!r, "a receive of the wrong size succeeded");
    auto again = t.isend(0, 7, b.data(), 1);
    CHECK(!again && again.message() == r.message(),
          "the first error is not sticky: " + again.message());
  } else {
    CHECK_OK(t.barrier(Group::World));
  }
  std::fflush(stdout);
}

void runTimeout(Transport &t, FakeBackend &be) {
  CHECK_OK(t.setupGrid(t.worldSize(), 1, 1));
  t.attachBackend(be);
  if (t.pipelineRank() != 0)
    return;
  t.setTimeout(1.5);
  std::vector<float> b(4);
  RequestId r = POSTED(t.irecv(1, 999, b.data(), 4));
  auto start = Clock::now();
  Status w = t.wait(r);
  double took = secondsSince(start);
  std::printf("timeout: %s\n", w.message().c_str());
  std::fflush(stdout);
  CHECK(!w, "a receive that never comes completed");
  CHECK(took >= 1.5 && took < 60,
        "the watchdog fired after " + std::to_string(took) + " s, not 1.5 s");
  mock::Stats s = mock::stats();
  CHECK(s.commsAborted == s.commsCreated,
        "the watchdog aborted " + std::to_string(s.commsAborted) + " of " +
            std::to_string(s.commsCreated) + " communicators");
  auto again = t.isend(1, 1, b.data(), 4);
  CHECK(!again && again.message() == w.message(),
        "the watchdog's error is not sticky: " + again.message());
  t.setTimeout(60);
}

} // namespace

int main(int argc, char **argv) {
  FakeBackend be;
  std::unique_ptr<Transport> t = createNcclTransport(&argc, &argv);
  if (!t)
    return 2;
  mock::init();
  worldRank = t->worldRank();
  // The watchdog's own test sets 1.5 s; elsewhere it only guards against
  // hangs, so it is generous for oversubscribed, loaded CI machines.
  t->setTimeout(60);
  std::string mode = argc > 1 ? argv[1] : "";
  int D = argc > 3 ? std::atoi(argv[2]) : 1,
      E = argc > 3 ? std::atoi(argv[3]) : 1,
      T = argc > 4 ? std::atoi(argv[4]) : 1;
  bool clean = true;
  if (mode == "p2p" && D > 0 && E > 0 && T > 0 &&
      t->worldSize() % (D * E * T) == 0) {
    runP2P(*t, be, D, E, T);
  } else if (mode == "collectives" && t->worldSize() % 2 == 0) {
    runCollectives(*t, be);
  } else if ((mode == "size-mismatch-waiting" ||
              mode == "size-mismatch-staged") &&
             t->worldSize() == 2) {
    runSizeMismatch(*t, be, mode == "size-mismatch-staged");
    clean = false;
  } else if (mode == "timeout" && t->worldSize() == 2) {
    runTimeout(*t, be);
    clean = t->pipelineRank() != 0;
  } else {
    std::fprintf(stderr, "usage: mpirun -np N nccl-protocol-test p2p [D E [T]] | "
                         "collectives (N even) | size-mismatch-waiting | "
                         "size-mismatch-staged | timeout (N = 2)\n");
    return 2;
  }
  int P = t->pipelineSize(), Dg = t->dpSize(), Eg = t->epSize(),
      Tg = t->tpSize();

  float total = float(failures);
  CHECK_OK(t->allreduce(&total, 1, Group::World));
  if (worldRank == 0) {
    std::printf("nccl-protocol-test %s P=%d D=%d E=%d%s: %s\n", mode.c_str(),
                P, Dg, Eg,
                Tg > 1 ? (" T=" + std::to_string(Tg)).c_str() : "",
                total == 0 ? "passed" : "FAILED");
    std::fflush(stdout);
  }

  // The shutdown: finalized and destroyed after a clean run, else aborted.
  t.reset();
  mock::pump();
  mock::Stats s = mock::stats();
  int comms = 2 * (P - 1) + (Dg > 1) + (Eg > 1) + (Tg > 1);
  CHECK(s.commsCreated == comms, std::to_string(s.commsCreated) +
                                     " communicators, " +
                                     std::to_string(comms) + " expected");
  if (clean)
    CHECK(s.commsDestroyed == comms && s.commsAborted == 0,
          "clean shutdown: " + std::to_string(s.commsDestroyed) +
              " communicators destroyed, " + std::to_string(s.commsAborted) +
              " aborted");
  else
    CHECK(s.commsAborted == comms && s.commsDestroyed == 0,
          "shutdown after an error: " + std::to_string(s.commsAborted) +
              " communicators aborted, " + std::to_string(s.commsDestroyed) +
              " destroyed");
  CHECK(s.allocationsLive == 0,
        std::to_string(s.allocationsLive) + " device allocations left");
  CHECK(s.eventsLive == 0, std::to_string(s.eventsLive) + " events left");
  CHECK(s.stepsQueued == 0,
        std::to_string(s.stepsQueued) + " stream steps never ran");
  CHECK(s.streamsLive == 1,
        std::to_string(s.streamsLive - 1) + " transport streams left");
  return failures ? 1 : 0;
}
