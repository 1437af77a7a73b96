//===- MockCudaNccl.cpp - Host-only CUDA and NCCL over MPI ----------------===//
//
// Implements the stand-ins include/cuda_runtime.h and include/nccl.h on the
// host, so that runtime/transports/nccl/NcclTransport.cpp runs under mpirun without
// a GPU, and checks the rules the transport's protocol relies on. A broken
// rule ends the job (MPI_Abort) with "mock cuda/nccl: rank R: <what>".
//
// The model:
// - Device memory is host memory. Allocations are never reused: freed memory
//   stays known (and poisoned), so a transfer or copy on freed memory, or
//   past the end of an allocation, is reported. cudaMallocAsync memory
//   starts as garbage (0xff bytes: NaN as floats).
// - A stream is an in-order queue of steps. Steps run, as far as they can,
//   whenever the host calls into the mock (any CUDA or NCCL call), except
//   that a copy to the host completes only when the host waits for it: when
//   it synchronizes or queries the copy's stream, or queries an event
//   recorded after the copy. A host buffer read without that is stale.
//   Events and cudaStreamWaitEvent order steps across streams.
// - NCCL point-to-point is matched by order, as in NCCL: the k-th ncclRecv
//   from a peer on a communicator gets the k-th ncclSend to it (one MPI tag
//   per communicator, on a duplicate of MPI_COMM_WORLD; a receive probes the
//   next message, which must have its size: else an order violation). Sends
//   are synchronous (MPI_Issend): a send completes only once its receive has
//   been posted, the strictest timing NCCL allows. ncclAllReduce reduces at
//   rank 0 in rank order.
// - Every NCCL call that queues work (in a group: ncclGroupEnd), init and
//   finalize return ncclInProgress and stay in progress for two
//   ncclCommGetAsyncError polls; the work reaches the stream only then, as
//   with a non-blocking NCCL communicator. An init completes once all
//   members joined (in any order), a finalize once the communicator's work
//   is done.
//
// Further checks: non-blocking communicators only; no call on a communicator
// that is still in progress, finalized, destroyed or aborted; no work queued
// on (or query of) a stream that an NCCL call has not reached yet; one
// stream per communicator and per group; no zero-size point-to-point (the
// transport sends only a header for those) and no zero-size cudaMallocAsync;
// no double or foreign free; no use of a destroyed stream or event; never a
// cudaStreamSynchronize of a communication stream or of a stream waiting for
// one (the host would block on a peer). cudaMalloc and cudaFree synchronize
// the device (as on a GPU); a host blocked for 10 s there or in
// cudaStreamSynchronize is a deadlock.
//
//===----------------------------------------------------------------------===//

#include "MockCudaNccl.h"

#include "cuda_runtime.h"
#include "nccl.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr double kDeadlockSeconds = 10;
constexpr int kBusyPolls = 3; ///< a call is done at the third poll
constexpr int kIdsPerRank = 256;
constexpr int kTagsPerComm = 8; ///< +0/+1 join, +2 p2p, +5/+6 collectives
constexpr unsigned kIdMagic = 0x6d6f636b;

MPI_Comm mockComm = MPI_COMM_NULL;
int myRank = -1;
mock::Stats counters;

[[noreturn]] void fail(const std::string &what) {
  std::fprintf(stderr, "mock cuda/nccl: rank %d: %s\n", myRank, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

/// One unit of stream work: run() is called until it returns true.
struct Step {
  std::function<bool()> run;
  /// A cudaStreamWaitEvent step: waits until `waitsFor` completed `until`.
  MockStream *waitsFor = nullptr;
  uint64_t until = 0;
};

} // namespace

struct MockStream {
  std::deque<Step> steps;
  uint64_t queued = 0, completed = 0;
  bool destroyed = false;
  ncclComm *comm = nullptr; ///< the communicator whose work runs here
  int notArrived = 0;       ///< NCCL calls on it still in progress
  std::vector<std::shared_ptr<bool>> holds;
};

struct MockEvent {
  MockStream *stream = nullptr; ///< null: never recorded
  uint64_t at = 0;              ///< done when stream->completed >= at
  bool destroyed = false;
};

enum class CommState {
  Joining,
  Ready,
  Finalizing,
  Finalized,
  Destroyed,
  Aborted
};

struct ncclComm {
  std::string name;
  int nranks = 0, rank = 0, creator = 0, tag = 0;
  std::vector<int> members; ///< mock-communicator rank of each rank
  CommState state = CommState::Joining;
  std::function<bool()> join;
  int busy = kBusyPolls;      ///< polls until the last call is done
  std::vector<Step> arriving; ///< work of that call, not yet on the stream
  MockStream *stream = nullptr;
  long outstanding = 0; ///< queued steps not done
};

namespace {

// Nothing is ever deleted: a stale handle stays recognizable.
std::vector<std::unique_ptr<MockStream>> streams;
std::vector<std::unique_ptr<MockEvent>> events;
std::vector<std::unique_ptr<ncclComm>> comms;
/// State of aborted transfers, which MPI may still be using.
std::vector<std::shared_ptr<void>> graveyard;

struct Allocation {
  size_t bytes = 0;
  bool freeQueued = false, freed = false;
};
std::map<uintptr_t, Allocation> allocations;

//===----------------------------------------------------------------------===//
// Streams
//===----------------------------------------------------------------------===//

void advanceJoins();

/// The stream the host is waiting for (a copy to the host on it may
/// complete); &allStreams: all of them.
const MockStream *observed = nullptr;
const MockStream allStreams{};

bool pumping = false;
void pumpAll() {
  if (pumping)
    return;
  pumping = true;
  advanceJoins();
  for (bool moved = true; moved;) {
    moved = false;
    for (auto &s : streams)
      while (!s->steps.empty() && s->steps.front().run()) {
        s->steps.pop_front();
        ++s->completed;
        moved = true;
      }
  }
  pumping = false;
}

MockStream *useStream(cudaStream_t s, const std::string &call) {
  if (!s)
    fail(call + " on the legacy default stream: the transport uses streams "
                "of its own");
  if (s->destroyed)
    fail(call + " on a destroyed stream");
  if (s->notArrived)
    fail(call + " on the stream of " + s->comm->name +
         " while an NCCL call on it is in progress (not on the stream yet): "
         "poll ncclCommGetAsyncError until the call is done first");
  return s;
}

void enqueue(MockStream *s, Step step) {
  s->steps.push_back(std::move(step));
  ++s->queued;
  pumpAll();
}

/// Pumps while the host waits for stream `s` (&allStreams: the device).
void observe(const MockStream *s) {
  observed = s;
  pumpAll();
  observed = nullptr;
}

/// Waits for `s` until `done()`; past kDeadlockSeconds the host is
/// deadlocked.
template <typename F>
void blockUntil(const MockStream *s, F done, const std::string &what) {
  auto start = std::chrono::steady_clock::now();
  while (observe(s), !done())
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count() > kDeadlockSeconds)
      fail("the host blocked " + std::to_string(int(kDeadlockSeconds)) +
           " s in " + what + " (a deadlock)");
}

/// What a device-wide synchronization (cudaMalloc, cudaFree) waits for.
void deviceSynchronize(const std::string &call) {
  blockUntil(
      &allStreams,
      [] {
        for (auto &s : streams)
          if (!s->steps.empty())
            return false;
        return true;
      },
      call + ", which waits for all device work");
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

void *allocate(size_t bytes) {
  void *p = std::malloc(bytes);
  if (!p)
    fail("out of host memory");
  std::memset(p, 0xff, bytes);
  allocations[uintptr_t(p)].bytes = bytes;
  return p;
}

/// Checks `bytes` at `p` used by `what`: inside a device allocation they must
/// fit and must not be freed (other memory is the test's own).
void checkRange(const void *p, size_t bytes, const std::string &what) {
  if (bytes == 0)
    return;
  auto a = uintptr_t(p);
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin())
    return;
  --it;
  uintptr_t end = it->first + it->second.bytes;
  if (a >= end)
    return;
  if (it->second.freed)
    fail(what + " on freed device memory");
  if (a + bytes > end)
    fail(what + " of " + std::to_string(bytes) +
         " bytes overruns a device allocation of " +
         std::to_string(it->second.bytes) + " bytes by " +
         std::to_string(a + bytes - end));
}

Allocation &toFree(void *p, const std::string &call) {
  auto it = allocations.find(uintptr_t(p));
  if (it == allocations.end())
    fail(call + " of memory not from cudaMalloc / cudaMallocAsync");
  if (it->second.freeQueued)
    fail(call + ": double free");
  it->second.freeQueued = true;
  return it->second;
}

void release(void *p, Allocation &a) {
  std::memset(p, 0xfe, a.bytes);
  a.freed = true;
}

//===----------------------------------------------------------------------===//
// Transfers over MPI
//===----------------------------------------------------------------------===//

/// One side of one message on a communicator's tag, matched in order.
struct Transfer {
  bool send = false;
  int peer = 0, tag = 0; ///< mock-communicator rank
  char *buf = nullptr;
  size_t count = 0;
  std::string what;
  std::vector<float> copy; ///< what a send sends
  MPI_Request req = MPI_REQUEST_NULL;
  bool posted = false;

  bool poll() {
    if (!posted) {
      checkRange(buf, count * sizeof(float), what);
      if (send) {
        copy.resize(count);
        std::memcpy(copy.data(), buf, count * sizeof(float));
        MPI_Issend(copy.data(), int(count), MPI_FLOAT, peer, tag, mockComm,
                   &req);
      } else {
        int found = 0;
        MPI_Message msg;
        MPI_Status st;
        MPI_Improbe(peer, tag, mockComm, &found, &msg, &st);
        if (!found)
          return false;
        int got = 0;
        MPI_Get_count(&st, MPI_FLOAT, &got);
        if (size_t(got) != count)
          fail(what + " of " + std::to_string(count) + " floats met a " +
               "message of " + std::to_string(got) +
               " floats: the sends and receives of the communicator are "
               "not in the same order");
        MPI_Imrecv(buf, int(count), MPI_FLOAT, &msg, &req);
      }
      posted = true;
    }
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done)
      checkRange(buf, count * sizeof(float), what);
    return done != 0;
  }
};

Transfer transfer(bool send, ncclComm *c, int peer, int tag, void *buf,
                  size_t count, const char *call) {
  Transfer t;
  t.send = send;
  t.peer = c->members[size_t(peer)];
  t.tag = c->tag + tag;
  t.buf = static_cast<char *>(buf);
  t.count = count;
  t.what = std::string(call) + (send ? " to" : " from") + " rank " +
           std::to_string(peer) + " on " + c->name;
  return t;
}

bool pollAll(std::vector<Transfer> &ts) {
  bool all = true;
  for (Transfer &t : ts)
    all &= t.poll();
  return all;
}

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

void advanceJoins() {
  for (auto &c : comms)
    if (c->state == CommState::Joining && c->join())
      c->state = CommState::Ready;
}

const char *stateText(CommState s) {
  switch (s) {
  case CommState::Joining:
    return "initializing";
  case CommState::Ready:
    return "ready";
  case CommState::Finalizing:
    return "finalizing";
  case CommState::Finalized:
    return "finalized";
  case CommState::Destroyed:
    return "destroyed";
  case CommState::Aborted:
    return "aborted";
  }
  return "?";
}

ncclComm *live(ncclComm_t c, const std::string &call) {
  if (!c)
    fail(call + " on a null communicator");
  if (c->state == CommState::Destroyed || c->state == CommState::Aborted)
    fail(call + " on " + c->name + ", which is " + stateText(c->state));
  return c;
}

/// A call that queues work on `c`.
ncclComm *startCall(ncclComm_t c, const std::string &call) {
  live(c, call);
  if (c->state != CommState::Ready)
    fail(call + " on " + c->name + ", which is " + stateText(c->state));
  if (c->busy > 0)
    fail(call + " on " + c->name +
         " while its previous call (or init) is still in progress: "
         "poll ncclCommGetAsyncError until it is done");
  return c;
}

MockStream *bindStream(ncclComm *c, cudaStream_t s, const std::string &call) {
  MockStream *m = useStream(s, call);
  if (!c->stream) {
    if (m->comm)
      fail(call + ": " + c->name + " on the stream of " + m->comm->name +
           " (the mock models one stream per communicator)");
    c->stream = m;
    m->comm = c;
  } else if (c->stream != m) {
    fail(call + ": " + c->name +
         " used on a second stream (the mock models one stream per "
         "communicator)");
  }
  return m;
}

/// Hands `run` to `c` as the work of a call that is now in progress.
ncclResult_t inProgress(ncclComm *c, std::function<bool()> run) {
  c->arriving.push_back({[c, run = std::move(run)] {
    if (!run())
      return false;
    --c->outstanding;
    return true;
  }});
  ++c->outstanding;
  ++c->stream->notArrived;
  c->busy = kBusyPolls;
  return ncclInProgress;
}

struct P2POp {
  bool send;
  void *buf;
  size_t count;
  int peer;
};

ncclResult_t queueP2P(ncclComm *c, std::vector<P2POp> ops) {
  auto ts = std::make_shared<std::vector<Transfer>>();
  for (const P2POp &o : ops)
    ts->push_back(transfer(o.send, c, o.peer, 2, o.buf, o.count,
                           o.send ? "ncclSend" : "ncclRecv"));
  return inProgress(c, [c, ts] {
    if (c->state == CommState::Aborted) {
      graveyard.push_back(ts);
      return true;
    }
    return pollAll(*ts);
  });
}

int groupDepth = 0;
ncclComm *groupComm = nullptr;
std::vector<P2POp> groupOps;

ncclResult_t p2p(bool send, const void *buf, size_t count, ncclDataType_t type,
                 int peer, ncclComm_t comm, cudaStream_t s) {
  const char *call = send ? "ncclSend" : "ncclRecv";
  ncclComm *c = startCall(comm, call);
  if (type != ncclFloat32)
    fail(std::string(call) + " of a type other than ncclFloat32");
  if (peer < 0 || peer >= c->nranks || peer == c->rank)
    fail(std::string(call) + " with peer " + std::to_string(peer) + " on " +
         c->name);
  if (count == 0)
    fail(std::string(call) + " of 0 floats on " + c->name +
         " (zero-size messages send only the header)");
  if (count > size_t(INT_MAX))
    fail(std::string(call) + " of more than 2^31 floats");
  bindStream(c, s, call);
  ++(send ? counters.ncclSends : counters.ncclRecvs);
  P2POp op{send, const_cast<void *>(buf), count, peer};
  if (groupDepth == 0)
    return queueP2P(c, {op});
  if (groupComm && groupComm != c)
    fail("a group over two communicators (not modelled)");
  groupComm = c;
  groupOps.push_back(op);
  return ncclSuccess;
}

/// One allreduce: members send to rank 0, which reduces in rank order and
/// sends the result back.
struct RootCollective {
  int phase = 0;
  std::vector<float> acc;
  std::vector<std::vector<float>> parts;
  std::vector<Transfer> ts;
};

} // namespace

//===----------------------------------------------------------------------===//
// Test controls
//===----------------------------------------------------------------------===//

void mock::init() {
  MPI_Comm_dup(MPI_COMM_WORLD, &mockComm);
  MPI_Comm_rank(mockComm, &myRank);
  int size = 0, flag = 0;
  void *ub = nullptr;
  MPI_Comm_size(mockComm, &size);
  MPI_Comm_get_attr(mockComm, MPI_TAG_UB, &ub, &flag);
  if (flag && (long(size) * kIdsPerRank + 1) * kTagsPerComm >
                  long(*static_cast<int *>(ub)))
    fail("MPI_TAG_UB too small for the mock's tags");
}

void mock::pump() { observe(&allStreams); }

void mock::hold(cudaStream_t s) {
  MockStream *m = useStream(s, "mock::hold");
  auto open = std::make_shared<bool>(false);
  m->holds.push_back(open);
  enqueue(m, {[open] { return *open; }});
}

void mock::release(cudaStream_t s) {
  for (auto &open : s->holds)
    *open = true;
  s->holds.clear();
  pumpAll();
}

mock::Stats mock::stats() {
  Stats s = counters;
  for (auto &m : streams) {
    s.streamsLive += !m->destroyed;
    s.stepsQueued += long(m->steps.size());
  }
  for (auto &e : events)
    s.eventsLive += !e->destroyed;
  for (auto &[p, a] : allocations)
    s.allocationsLive += !a.freed;
  return s;
}

//===----------------------------------------------------------------------===//
// CUDA runtime
//===----------------------------------------------------------------------===//

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorNoDevice:
    return "no CUDA-capable device is detected";
  case cudaErrorNotReady:
    return "device not ready";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() { return cudaSuccess; }

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0)
    fail("cudaSetDevice(" + std::to_string(device) + ") on one device");
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
  if (!(flags & cudaStreamNonBlocking))
    fail("a blocking stream (it would synchronize with the legacy stream)");
  streams.push_back(std::make_unique<MockStream>());
  *stream = streams.back().get();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  // Queued work still runs (as on a GPU); the handle is dead.
  useStream(stream, "cudaStreamDestroy")->destroyed = true;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  MockStream *m = useStream(stream, "cudaStreamQuery");
  observe(m);
  return m->steps.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  MockStream *m = useStream(stream, "cudaStreamSynchronize");
  if (m->comm)
    fail("cudaStreamSynchronize of the stream of " + m->comm->name +
         ": the host would block on a peer");
  for (const Step &s : m->steps)
    if (s.waitsFor && s.waitsFor->comm && s.waitsFor->completed < s.until)
      fail("cudaStreamSynchronize of a stream that waits for the stream of " +
           s.waitsFor->comm->name + ": the host would block on a peer");
  blockUntil(
      m, [m] { return m->steps.empty(); }, "cudaStreamSynchronize");
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned) {
  MockStream *m = useStream(stream, "cudaStreamWaitEvent");
  if (!event || event->destroyed)
    fail("cudaStreamWaitEvent on a destroyed event");
  if (!event->stream)
    return cudaSuccess; // never recorded: nothing to wait for
  MockStream *from = event->stream;
  uint64_t until = event->at;
  enqueue(m, {[from, until] { return from->completed >= until; }, from, until});
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned) {
  events.push_back(std::make_unique<MockEvent>());
  *event = events.back().get();
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  MockStream *m = useStream(stream, "cudaEventRecord");
  if (!event || event->destroyed)
    fail("cudaEventRecord of a destroyed event");
  event->stream = m;
  event->at = m->queued;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event || event->destroyed)
    fail("cudaEventQuery of a destroyed event");
  observe(event->stream);
  return !event->stream || event->stream->completed >= event->at
             ? cudaSuccess
             : cudaErrorNotReady;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event || event->destroyed)
    fail("cudaEventDestroy of a destroyed event");
  event->destroyed = true;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  deviceSynchronize("cudaMalloc");
  *devPtr = allocate(size);
  return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
  if (!devPtr)
    return cudaSuccess;
  Allocation &a = toFree(devPtr, "cudaFree");
  deviceSynchronize("cudaFree");
  release(devPtr, a);
  return cudaSuccess;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  checkRange(devPtr, count, "cudaMemset");
  std::memset(devPtr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream) {
  useStream(stream, "cudaMallocAsync");
  if (size == 0)
    fail("cudaMallocAsync of 0 bytes");
  *devPtr = allocate(size);
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream) {
  MockStream *m = useStream(stream, "cudaFreeAsync");
  if (!devPtr)
    return cudaSuccess;
  Allocation *a = &toFree(devPtr, "cudaFreeAsync");
  enqueue(m, {[devPtr, a] {
            release(devPtr, *a);
            return true;
          }});
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  MockStream *m = useStream(stream, "cudaMemcpyAsync");
  counters.deviceCopies += kind == cudaMemcpyDeviceToDevice;
  bool toHost = kind == cudaMemcpyDeviceToHost;
  enqueue(m, {[=] {
            if (toHost && observed != m && observed != &allStreams)
              return false;
            checkRange(dst, count, "cudaMemcpyAsync (destination)");
            checkRange(src, count, "cudaMemcpyAsync (source)");
            std::memcpy(dst, src, count);
            return true;
          }});
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// NCCL
//===----------------------------------------------------------------------===//

namespace {
struct IdFields {
  unsigned magic;
  int creator, index;
};
} // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  static int made = 0;
  if (mockComm == MPI_COMM_NULL)
    fail("mock::init() was not called");
  if (made == kIdsPerRank)
    fail("more than " + std::to_string(kIdsPerRank) + " NCCL ids on a rank");
  IdFields f{kIdMagic, myRank, made++};
  std::memset(uniqueId, 0, sizeof *uniqueId);
  std::memcpy(uniqueId->internal, &f, sizeof f);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                    ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  if (!config || config->size != sizeof(ncclConfig_t) ||
      config->magic != 0xcafebeef)
    fail("ncclCommInitRankConfig: a config not from NCCL_CONFIG_INITIALIZER");
  if (config->blocking != 0)
    fail("ncclCommInitRankConfig: a blocking communicator (config.blocking "
         "must be 0, else NCCL calls may block the host)");
  IdFields f;
  std::memcpy(&f, commId.internal, sizeof f);
  if (f.magic != kIdMagic)
    fail("ncclCommInitRankConfig: an id not from ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    fail("ncclCommInitRankConfig: rank " + std::to_string(rank) + " of " +
         std::to_string(nranks));
  comms.push_back(std::make_unique<ncclComm>());
  ncclComm *c = comms.back().get();
  c->nranks = nranks;
  c->rank = rank;
  c->creator = f.creator;
  c->tag = 1 + (f.creator * kIdsPerRank + f.index) * kTagsPerComm;
  c->name = "communicator " + std::to_string(f.creator) + "." +
            std::to_string(f.index) + " (rank " + std::to_string(rank) +
            " of " + std::to_string(nranks) + ")";
  c->members.assign(size_t(nranks), -1);
  // Join: every member sends {rank, mock rank, nranks} to the id's creator,
  // which answers with the member list.
  struct Join {
    int phase = 0;
    std::array<int, 3> mine{};
    std::vector<std::array<int, 3>> in;
    std::vector<MPI_Request> reqs;
  };
  auto j = std::make_shared<Join>();
  c->join = [c, j]() -> bool {
    bool creator = c->creator == myRank;
    if (j->phase == 0) {
      j->phase = 1;
      if (creator) {
        c->members[size_t(c->rank)] = myRank;
        j->in.resize(size_t(c->nranks - 1));
        j->reqs.resize(j->in.size());
        for (size_t k = 0; k < j->in.size(); ++k)
          MPI_Irecv(j->in[k].data(), 3, MPI_INT, MPI_ANY_SOURCE, c->tag,
                    mockComm, &j->reqs[k]);
      } else {
        j->mine = {c->rank, myRank, c->nranks};
        j->reqs.resize(2);
        MPI_Isend(j->mine.data(), 3, MPI_INT, c->creator, c->tag, mockComm,
                  &j->reqs[0]);
        MPI_Irecv(c->members.data(), c->nranks, MPI_INT, c->creator, c->tag + 1,
                  mockComm, &j->reqs[1]);
      }
    }
    int done = 0;
    MPI_Testall(int(j->reqs.size()), j->reqs.data(), &done,
                MPI_STATUSES_IGNORE);
    if (!done)
      return false;
    if (!creator || j->phase == 2)
      return true;
    for (const auto &m : j->in) {
      if (m[2] != c->nranks || m[0] < 0 || m[0] >= c->nranks ||
          c->members[size_t(m[0])] != -1)
        fail("the members of " + c->name + " disagree: rank " +
             std::to_string(m[0]) + " of " + std::to_string(m[2]) +
             " joined from process " + std::to_string(m[1]));
      c->members[size_t(m[0])] = m[1];
    }
    j->reqs.clear();
    for (int r = 0; r < c->nranks; ++r)
      if (r != c->rank) {
        j->reqs.emplace_back();
        MPI_Isend(c->members.data(), c->nranks, MPI_INT, c->members[size_t(r)],
                  c->tag + 1, mockComm, &j->reqs.back());
      }
    j->phase = 2;
    return false;
  };
  ++counters.commsCreated;
  *comm = c;
  pumpAll();
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  ncclComm *c = live(comm, "ncclCommGetAsyncError");
  pumpAll();
  bool waiting = c->state == CommState::Joining ||
                 (c->state == CommState::Finalizing &&
                  (c->outstanding > 0 || !c->arriving.empty()));
  if (!waiting && c->busy > 0 && --c->busy == 0) {
    if (c->state == CommState::Finalizing)
      c->state = CommState::Finalized;
    std::vector<Step> work = std::move(c->arriving);
    c->arriving.clear();
    for (Step &s : work) {
      --c->stream->notArrived;
      enqueue(c->stream, std::move(s));
    }
  }
  *asyncError = c->busy > 0 ? ncclInProgress : ncclSuccess;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "mock NCCL error";
  }
}

const char *ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclSend(const void *sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p(true, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  return p2p(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (groupDepth == 0)
    fail("ncclGroupEnd without ncclGroupStart");
  if (--groupDepth > 0 || groupOps.empty())
    return ncclSuccess;
  ncclComm *c = groupComm;
  std::vector<P2POp> ops = std::move(groupOps);
  groupOps.clear();
  groupComm = nullptr;
  return queueP2P(c, std::move(ops));
}

namespace {
/// The collectives through rank 0 (ncclAllReduce, ncclAllGather,
/// ncclReduceScatter): every rank sends `sendCount` floats to rank 0, which makes each rank's
/// `recvCount` result with `result(parts, k, out)` (parts in rank order) and
/// sends it back.
ncclResult_t viaRoot(
    const char *call, ncclComm_t comm, cudaStream_t stream, const void *sendbuff,
    size_t sendCount, void *recvbuff, size_t recvCount,
    std::function<void(const std::vector<std::vector<float>> &, int, float *)>
        result) {
  ncclComm *c = startCall(comm, call);
  if (groupDepth > 0)
    fail(std::string(call) + " in a group (not modelled)");
  if (sendCount == 0 || recvCount == 0 || sendCount > size_t(INT_MAX) ||
      recvCount > size_t(INT_MAX))
    fail(std::string(call) + " of " + std::to_string(sendCount) + " -> " +
         std::to_string(recvCount) + " elements");
  bindStream(c, stream, call);
  auto a = std::make_shared<RootCollective>();
  const auto *in = static_cast<const float *>(sendbuff);
  auto *out = static_cast<float *>(recvbuff);
  return inProgress(c, [=]() -> bool {
    if (c->state == CommState::Aborted) {
      graveyard.push_back(a);
      return true;
    }
    if (a->phase == 0) {
      checkRange(in, sendCount * sizeof(float), call);
      checkRange(out, recvCount * sizeof(float), call);
      a->acc.assign(in, in + sendCount);
      if (c->rank != 0) {
        a->ts.push_back(transfer(true, c, 0, 5, a->acc.data(), sendCount, call));
        a->ts.push_back(transfer(false, c, 0, 6, out, recvCount, call));
        a->phase = 2;
      } else {
        a->parts.assign(size_t(c->nranks), std::vector<float>(sendCount));
        a->parts[0] = a->acc;
        for (int k = 1; k < c->nranks; ++k)
          a->ts.push_back(transfer(false, c, k, 5, a->parts[size_t(k)].data(),
                                   sendCount, call));
        a->phase = 1;
      }
    }
    if (!pollAll(a->ts))
      return false;
    if (a->phase == 1) {
      // One result per rank, kept alive until its send completes.
      std::vector<std::vector<float>> res(size_t(c->nranks),
                                          std::vector<float>(recvCount));
      for (int k = 0; k < c->nranks; ++k)
        result(a->parts, k, res[size_t(k)].data());
      std::memcpy(out, res[0].data(), recvCount * sizeof(float));
      a->parts = std::move(res);
      a->ts.clear();
      for (int k = 1; k < c->nranks; ++k)
        a->ts.push_back(
            transfer(true, c, k, 6, a->parts[size_t(k)].data(), recvCount, call));
      a->phase = 2;
      return pollAll(a->ts);
    }
    return true;
  });
}
} // namespace

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (datatype != ncclFloat32)
    fail("ncclAllReduce of type " + std::to_string(int(datatype)));
  // Summed in rank order on rank 0: every rank gets the same bits.
  return viaRoot("ncclAllReduce", comm, stream, sendbuff, count, recvbuff,
                 count,
                 [count, op](const std::vector<std::vector<float>> &parts, int,
                             float *out) {
                   for (size_t i = 0; i < count; ++i) {
                     float v = parts[0][i];
                     for (size_t r = 1; r < parts.size(); ++r)
                       v = op == ncclSum ? v + parts[r][i]
                                         : std::max(v, parts[r][i]);
                     out[i] = v;
                   }
                 });
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (datatype != ncclFloat32)
    fail("ncclAllGather of type " + std::to_string(int(datatype)));
  size_t n = sendcount;
  return viaRoot("ncclAllGather", comm, stream, sendbuff, n, recvbuff,
                 n * size_t(live(comm, "ncclAllGather")->nranks),
                 [n](const std::vector<std::vector<float>> &parts, int,
                     float *out) {
                   for (size_t k = 0; k < parts.size(); ++k)
                     std::memcpy(out + k * n, parts[k].data(),
                                 n * sizeof(float));
                 });
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (datatype != ncclFloat32 || op != ncclSum)
    fail("ncclReduceScatter of type " + std::to_string(int(datatype)));
  size_t n = recvcount;
  return viaRoot("ncclReduceScatter", comm, stream, sendbuff,
                 n * size_t(live(comm, "ncclReduceScatter")->nranks), recvbuff, n,
                 [n](const std::vector<std::vector<float>> &parts, int k,
                     float *out) {
                   for (size_t i = 0; i < n; ++i) {
                     float v = parts[0][size_t(k) * n + i];
                     for (size_t r = 1; r < parts.size(); ++r)
                       v += parts[r][size_t(k) * n + i];
                     out[i] = v;
                   }
                 });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ncclComm *c = startCall(comm, "ncclCommFinalize");
  c->state = CommState::Finalizing;
  c->busy = kBusyPolls;
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ncclComm *c = live(comm, "ncclCommDestroy");
  if (c->state != CommState::Finalized)
    fail("ncclCommDestroy of " + c->name + ", which is " + stateText(c->state) +
         ": a clean shutdown finalizes first (else abort)");
  c->state = CommState::Destroyed;
  ++counters.commsDestroyed;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ncclComm *c = live(comm, "ncclCommAbort");
  if (c->stream)
    c->stream->notArrived -= int(c->arriving.size());
  c->arriving.clear();
  c->busy = 0;
  c->state = CommState::Aborted;
  ++counters.commsAborted;
  pumpAll();
  return ncclSuccess;
}
