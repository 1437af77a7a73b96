//===- NcclTransport.cpp - NCCL transport, bootstrapped by MPI ------------===//
//
// An internal MpiTransport does MPI init, the T x P x E x D grid of
// RankGrid.h (and its error messages), barrier, gatherStrings and the
// Pipeline / World allreduces (a few scalars per step) and the tensor
// group's host collectives (the vocabulary-parallel loss's per-token
// statistics). Everything else moves device memory with NCCL.
//
// Communicators (setupTensorGrid): for every ordered pair (src, dst) of
// pipeline ranks of this (replica, expert, tensor) slot a two-rank
// communicator for the directed channel
// src -> dst (src is its rank 0) with its own non-blocking stream, and one
// over the data-parallel group (D > 1) and one over the expert group
// (E > 1) and one over the tensor group (T > 1). Unique ids travel over MPI (an all-to-all of the channel ids in
// the pipeline group; a broadcast in each group). All communicators are
// non-blocking (config.blocking = 0): every init is started, in the same
// order on every rank, then all are polled against the watchdog; a
// one-float warm-up message on every channel and a one-float allreduce on
// every group then connect them.
//
// Matching by tag. NCCL pairs a channel's ncclSend and ncclRecv by order;
// the executor pairs messages by tag and may post receives in another order
// than its peer sends. So isend(peer, tag, buf, n) first sends a 16-byte
// header {tag, n} over MPI (one MPI tag, on a communicator of its own), then
// queues ncclSend on the channel's stream behind an event of the compute
// stream. A peer's headers arrive in send order, which is the order of
// ncclSend on that channel; progress() and every wait drain them in arrival
// order and queue one ncclRecv per header on the channel peer -> me: into
// the buffer of the oldest matching irecv(peer, tag) if one is posted, else
// into a staging buffer (stream-ordered pool) that a later irecv copies from
// on the same stream. So per channel ncclRecv order == ncclSend order
// whatever the receiver's posting order. A request completes with an event
// after its transfer; a completed receive makes the compute stream wait on
// it.
//
// allreduceDevice: the DataParallel / Expert / Tensor sum in place on the
// backend's buffer (the executor's gradient path and nn.tp_all_reduce; no
// host copy); allGatherDevice / reduceScatterDevice: ncclAllGather /
// ncclReduceScatter over the tensor group (nn.tp_all_gather,
// nn.tp_reduce_scatter). Otherwise collectives
// take host memory: DataParallel / Expert allreduce is an
// ncclAllReduce on a device copy (every member gets the same bits; not the
// bits of the MPI transport's rank-order sum); pairwiseSum exchanges the two
// buffers over the channels (internal tag -1) and adds on the host
// (a + b == b + a bitwise); allToAll / allToAllStart over the expert group:
// MPI_Ialltoall of the counts, then, in start order, grouped
// ncclSend/ncclRecv on device copies. asyncProgress() is false.
//
// Liveness. The host never blocks on a stream that waits on NCCL: host <->
// device copies and staging allocations run on a private stream that never
// waits on a communication stream, memory comes from the stream-ordered pool
// (no cudaMalloc / cudaFree device synchronization), and every wait is a
// poll that keeps draining headers (so peers' sends to this rank complete)
// and checks ncclCommGetAsyncError. Non-blocking NCCL calls may return
// ncclInProgress; each is polled until it reached its stream before the
// next call on that communicator. Past timeout() seconds the communicators
// are aborted and the wait returns an error naming the request.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/NcclTransport.h"

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/MpiTransport.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <thread>

namespace pipeforge::rt {
namespace {

using Clock = std::chrono::steady_clock;

/// Returns the Status of `expr` from the enclosing function when it fails.
#define PF_TRY(expr)                                                           \
  do {                                                                         \
    if (Status s_ = (expr); !s_)                                               \
      return s_;                                                               \
  } while (0)

constexpr int kHeaderTag = 7;    ///< MPI tag of message headers
constexpr int64_t kPairTag = -1; ///< pairwiseSum's messages
constexpr size_t kF = sizeof(float);

Status cudaCheck(cudaError_t e, const char *call) {
  if (e == cudaSuccess)
    return Status::ok();
  cudaGetLastError(); // clear a non-sticky error
  return Status::error(std::string("nccl transport: ") + call + ": " +
                       cudaGetErrorString(e));
}

Status ncclCheck(ncclResult_t r, const std::string &call, ncclComm_t c,
                 const std::string &where) {
  if (r == ncclSuccess || r == ncclInProgress)
    return Status::ok();
  std::string m =
      "nccl transport: " + call + " (" + where + "): " + ncclGetErrorString(r);
  if (const char *last = ncclGetLastError(c); last && *last)
    m += std::string(": ") + last;
  return Status::error(m);
}

std::string tagText(int64_t tag) {
  return tag == kPairTag ? std::string("pairwise gradient sum")
                         : "tag " + std::to_string(tag);
}

std::string sizeError(int peer, int64_t tag, int64_t sent, int64_t want) {
  return "nccl transport: message from pipeline rank " + std::to_string(peer) +
         " (" + tagText(tag) + ") has " + std::to_string(sent) +
         " floats sent but " + std::to_string(want) + " expected";
}

/// One communicator with the stream its operations are queued on.
struct Comm {
  ncclComm_t c = nullptr;
  cudaStream_t s = nullptr;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  std::string what;
};

class NcclTransport final : public Transport {
public:
  explicit NcclTransport(std::unique_ptr<Transport> m) : mpi(std::move(m)) {}
  ~NcclTransport() override;
  const char *name() const override { return "nccl"; }

  Status setup(int p, int d) override { return setupTensorGrid(p, d, 1, 1); }
  void setRankLayout(bool dataFastest) override {
    Transport::setRankLayout(dataFastest);
    inner().setRankLayout(dataFastest);
  }
  Status setupGrid(int p, int d, int e) override {
    return setupTensorGrid(p, d, e, 1);
  }
  Status setupTensorGrid(int p, int d, int e, int t) override;
  bool deviceBuffers() const override { return true; }
  void attachBackend(Backend &b) override;

  int worldRank() const override { return mpi->worldRank(); }
  int worldSize() const override { return mpi->worldSize(); }
  int pipelineRank() const override { return prank; }
  int pipelineSize() const override { return P; }
  int dpIndex() const override { return dpi; }
  int dpSize() const override { return D; }
  int epIndex() const override { return epi; }
  int epSize() const override { return E; }
  int tpIndex() const override { return tpi; }
  int tpSize() const override { return T; }

  Expected<RequestId> isend(int peer, int64_t tag, const float *buf,
                            int64_t n) override {
    return post(true, peer, tag, const_cast<float *>(buf), n, compute(), false);
  }
  Expected<RequestId> irecv(int peer, int64_t tag, float *buf,
                            int64_t n) override {
    return post(false, peer, tag, buf, n, compute(), false);
  }
  // ZeRO-3's parameter service: host memory over the internal MPI transport
  // (the executor stages it), its requests in an id space of their own.
  bool worldDeviceBuffers() const override { return false; }
  Expected<RequestId> isendWorld(int worldPeer, int64_t tag, const float *buf,
                                 int64_t n) override {
    return worldRequest(inner().isendWorld(worldPeer, tag, buf, n));
  }
  Expected<RequestId> irecvWorld(int worldPeer, int64_t tag, float *buf,
                                 int64_t n) override {
    return worldRequest(inner().irecvWorld(worldPeer, tag, buf, n));
  }
  Status wait(RequestId id) override;
  bool test(RequestId id) override;
  void progress() override { drain(); }

  Status allreduce(float *buf, int64_t n, Group g, ReduceOp op) override;
  bool deviceCollectives() const override { return true; }
  Status allreduceDevice(float *buf, int64_t n, Group g) override;
  Expected<RequestId> allreduceDeviceStart(float *buf, int64_t n,
                                           Group g) override;
  template <typename Call>
  Status deviceCollective(Group g, const char *what, Call call, int64_t n);
  Status allGatherDevice(const float *in, float *out, int64_t n,
                         Group g) override;
  Status reduceScatterDevice(const float *in, float *out, int64_t n,
                             Group g) override;
  Status pairwiseSum(int peer, float *buf, int64_t n) override;
  Status allToAll(const std::vector<std::vector<float>> &send,
                  std::vector<std::vector<float>> &recv, Group g) override {
    auto h = allToAllStart(send, recv, g);
    return h ? wait(*h) : h.status();
  }
  Expected<RequestId> allToAllStart(const std::vector<std::vector<float>> &send,
                                    std::vector<std::vector<float>> &recv,
                                    Group g) override;
  Status barrier(Group g) override { return inner().barrier(g); }
  Expected<std::vector<std::string>>
  gatherStrings(const std::string &mine) override {
    return inner().gatherStrings(mine);
  }
  [[noreturn]] void abort(const std::string &msg, int code) override {
    std::fprintf(stderr, "pipeforge-run: rank %d: %s\n", worldRank(),
                 msg.c_str());
    std::fflush(stderr);
    abortComms(msg);
    // As the MPI transport: a plain non-zero exit (mpirun ends the rest),
    // not MPI_Abort, which can hang on a lost node (docs/multi-node.md).
    std::_Exit(code ? code : 1);
  }

private:
  /// One point-to-point request.
  struct Req {
    bool send = false, internal = false; ///< internal: pairwiseSum's
    int peer = 0;
    int64_t tag = 0, n = 0;
    float *buf = nullptr;
    cudaEvent_t ready = nullptr; ///< the point the transfer must follow
    cudaEvent_t done = nullptr;  ///< after the transfer (null: not queued)
    int64_t hdr[2] = {0, 0};
    MPI_Request hdrReq = MPI_REQUEST_NULL;
    std::string error;
  };
  /// A message that arrived before its irecv: in a staging buffer.
  struct Staged {
    float *buf;
    int64_t n;
  };
  /// One expert all-to-all: phase 0 counts in flight, 1 data in flight.
  struct A2A {
    int phase = 0;
    std::vector<int> sc, rc;
    std::vector<int64_t> sd, rd;
    int64_t st = 0, rt = 0;
    std::vector<float> sb;
    std::vector<std::vector<float>> *recv = nullptr;
    MPI_Request req = MPI_REQUEST_NULL;
    float *dev = nullptr; ///< send data, then receive data
    cudaEvent_t done = nullptr;
  };

  // Declared first: destroyed last (it finalizes MPI).
  std::unique_ptr<Transport> mpi;
  Backend *be = nullptr;
  int P = 1, D = 1, E = 1, T = 1, prank = 0, dpi = 0, epi = 0, tpi = 0,
      dev = -1;
  bool ready = false, pumping = false;
  Status fatal = Status::ok(); ///< the first error: every later call fails
  MPI_Comm pipeComm = MPI_COMM_NULL, dpComm = MPI_COMM_NULL,
           epComm = MPI_COMM_NULL, tpComm = MPI_COMM_NULL;
  std::vector<Comm> sendCh, recvCh; ///< by pipeline peer: me->p, p->me
  Comm dpC, epC, tpC;
  cudaStream_t hostStream = nullptr; ///< host copies; never waits on NCCL
  float *warm = nullptr;
  std::map<RequestId, Req> reqs;
  std::map<RequestId, std::unique_ptr<A2A>> colls;
  std::map<std::pair<int, int64_t>, std::deque<RequestId>> waiting;
  std::map<std::pair<int, int64_t>, std::deque<Staged>> staged;
  std::vector<cudaEvent_t> freeEvents;
  RequestId next = 1;
  /// The parameter service's requests: ours (from kWorldIds up) -> the
  /// internal transport's.
  static constexpr RequestId kWorldIds = RequestId(1) << 56;
  std::map<RequestId, RequestId> worldReqs;
  RequestId nextWorld = kWorldIds;
  Expected<RequestId> worldRequest(Expected<RequestId> r) {
    if (!r)
      return r;
    worldReqs[nextWorld] = *r;
    return nextWorld++;
  }

  Transport &inner() {
    mpi->setTimeout(timeout());
    return *mpi;
  }
  cudaStream_t compute() const {
    return be ? static_cast<cudaStream_t>(be->computeStream()) : nullptr;
  }
  Status failed(Status s) {
    if (!s && fatal)
      fatal = s;
    return s;
  }
  Status usable() const {
    if (!fatal)
      return fatal;
    if (!ready)
      return Status::error("nccl transport: setupGrid() not called");
    return Status::ok();
  }
  template <typename F> void forComms(F f) {
    for (Comm &c : sendCh)
      f(c);
    for (Comm &c : recvCh)
      f(c);
    f(dpC);
    f(epC);
    f(tpC);
  }
  /// Aborts every communicator in one group: NCCL raises all the abort
  /// flags before any cleanup waits for the device, so a kernel stuck on a
  /// communicator aborted later cannot keep an earlier abort from returning.
  void abortComms(const std::string &why) {
    ncclGroupStart();
    forComms([](Comm &c) {
      if (c.c)
        ncclCommAbort(c.c);
      c.c = nullptr;
    });
    ncclGroupEnd();
    if (fatal)
      fatal = Status::error(why + " (NCCL communicators aborted)");
  }

  Status newEvent(cudaEvent_t &ev) {
    if (!freeEvents.empty()) {
      ev = freeEvents.back();
      freeEvents.pop_back();
      return Status::ok();
    }
    return cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                     "cudaEventCreateWithFlags");
  }
  void recycle(cudaEvent_t &ev) {
    if (ev)
      freeEvents.push_back(ev);
    ev = nullptr;
  }
  /// Whether an allreduce over the data-parallel or expert group may start
  /// now: the transport is usable and no expert all-to-all is in flight on
  /// that communicator.
  Status collectiveComm(Group g) {
    PF_TRY(usable());
    if (g == Group::Expert && !colls.empty())
      return Status::error("nccl transport: an allreduce over the expert "
                           "group while " +
                           std::to_string(colls.size()) +
                           " all-to-all(s) are in flight on it (wait for them "
                           "first: the ranks' order on the communicator would "
                           "differ)");
    return Status::ok();
  }
  Status record(cudaEvent_t &ev, cudaStream_t s) {
    PF_TRY(newEvent(ev));
    return cudaCheck(cudaEventRecord(ev, s), "cudaEventRecord");
  }
  Status waitOn(cudaStream_t s, cudaEvent_t ev) {
    return cudaCheck(cudaStreamWaitEvent(s, ev, 0), "cudaStreamWaitEvent");
  }
  /// Orders stream `to` after the work queued so far on `from`.
  Status handoff(cudaStream_t from, cudaStream_t to) {
    cudaEvent_t ev = nullptr;
    PF_TRY(record(ev, from));
    Status s = waitOn(to, ev);
    recycle(ev);
    return s;
  }
  Expected<bool> eventDone(cudaEvent_t ev) {
    cudaError_t q = cudaEventQuery(ev);
    if (q == cudaErrorNotReady) {
      // Not an error of the backend's next kernel launch check.
      (void)cudaGetLastError();
      return false;
    }
    PF_TRY(cudaCheck(q, "cudaEventQuery"));
    return true;
  }
  Status commError(Comm &c) {
    if (!c.c)
      return fatal ? Status::error("nccl transport: no communicator for " +
                                   c.what)
                   : fatal;
    ncclResult_t st = ncclSuccess;
    PF_TRY(ncclCheck(ncclCommGetAsyncError(c.c, &st), "ncclCommGetAsyncError",
                     c.c, c.what));
    return ncclCheck(st, "asynchronous error", c.c, c.what);
  }

  /// The watchdog: calls done() (true: finished) until it finishes, fails,
  /// or timeout() seconds pass (then aborts the communicators). With
  /// `pump`, drains headers and advances all-to-alls meanwhile.
  template <typename F>
  Status poll(const std::string &what, F done, bool pump = true) {
    auto start = Clock::now();
    for (long spin = 0;; ++spin) {
      if (pump)
        drain();
      Expected<bool> d = done();
      if (!d)
        return d.status();
      if (*d)
        return Status::ok();
      if (!fatal)
        return fatal;
      if (spin > 200)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if ((spin & 63) == 0 && timeoutS > 0 &&
          std::chrono::duration<double>(Clock::now() - start).count() >
              timeoutS) {
        char t[32];
        std::snprintf(t, sizeof t, "%g", timeoutS);
        std::string m = "nccl transport: timed out after " + std::string(t) +
                        " s waiting for " + what + ": a peer has died or hangs";
        abortComms(m);
        return fatal;
      }
    }
  }
  Status mpiWait(MPI_Request &r, const std::string &what) {
    return poll(
        what,
        [&]() -> Expected<bool> {
          int f = 0;
          MPI_Test(&r, &f, MPI_STATUS_IGNORE);
          return f != 0;
        },
        false);
  }
  /// Waits until no communicator of `cs` has a call in progress.
  Status settle(const std::vector<Comm *> &cs, const std::string &what,
                bool pump = true) {
    return poll(
        what,
        [&]() -> Expected<bool> {
          bool all = true;
          for (Comm *c : cs) {
            ncclResult_t st = ncclSuccess;
            PF_TRY(ncclCheck(ncclCommGetAsyncError(c->c, &st),
                             "ncclCommGetAsyncError", c->c, c->what));
            if (st == ncclInProgress)
              all = false;
            else
              PF_TRY(ncclCheck(st, what, c->c, c->what));
          }
          return all;
        },
        pump);
  }
  /// The result of a call on `c`: polled until it reached the stream.
  Status enqueued(Comm &c, ncclResult_t r, const char *call) {
    if (r != ncclInProgress)
      return ncclCheck(r, call, c.c, c.what);
    return settle({&c}, std::string(call) + " on " + c.what);
  }

  Status startInit(Comm &c, int n, int rank, const ncclUniqueId &id);
  Status createComms();
  Expected<RequestId> post(bool send, int peer, int64_t tag, float *buf,
                           int64_t n, cudaStream_t after, bool internal);
  Expected<bool> reqDone(Req &r);
  Status finish(RequestId id);
  void drain();
  Status deliver(int p, int64_t tag, int64_t n);
  Status recvInto(Comm &ch, float *buf, int64_t n) {
    if (n == 0)
      return Status::ok();
    return enqueued(ch, ncclRecv(buf, size_t(n), ncclFloat32, 0, ch.c, ch.s),
                    "ncclRecv");
  }
  Status postData(A2A &a);
  Status waitColl(RequestId id);
  /// Device allreduces in flight (allreduceDeviceStart): the event recorded
  /// after the sum on the group's stream, and the group.
  struct DevReduce {
    cudaEvent_t done = nullptr;
    Comm *comm = nullptr;
  };
  std::map<RequestId, DevReduce> devReduces;
  Status waitDevReduce(RequestId id);
  Status syncHost() {
    return cudaCheck(cudaStreamSynchronize(hostStream),
                     "cudaStreamSynchronize");
  }
};

Status NcclTransport::setupTensorGrid(int p, int d, int e, int t) {
  PF_TRY(inner().setupTensorGrid(p, d, e, t));
  P = p, D = d, E = e, T = t;
  prank = mpi->pipelineRank(), dpi = mpi->dpIndex(), epi = mpi->epIndex();
  tpi = mpi->tpIndex();
  // The groups of RankGrid.h: the pipeline of this (replica, expert, tensor)
  // slot; the replicas of this (pipeline rank, expert, tensor) slot; the
  // expert group of this (pipeline rank, replica, tensor) slot. The tensor
  // group's collectives run on host memory over the inner MPI transport.
  MPI_Comm_split(MPI_COMM_WORLD, (dpi * e + epi) * t + tpi, prank, &pipeComm);
  MPI_Comm_split(MPI_COMM_WORLD, prank + p * (epi + e * tpi), dpi, &dpComm);
  MPI_Comm_split(MPI_COMM_WORLD, prank + p * (dpi + d * tpi), epi, &epComm);
  // The tensor group of this (pipeline rank, replica, expert) slot: its
  // device collectives (the executor's nn.tp_* on device buffers) run on an
  // NCCL communicator of their own, its host ones over MPI.
  MPI_Comm_split(MPI_COMM_WORLD, prank + p * (epi + e * dpi), tpi, &tpComm);
  // The watchdog needs non-blocking communicators, and every communicator
  // its own unique id.
  for (const char *v : {"NCCL_COMM_BLOCKING", "NCCL_COMM_ID"})
    if (const char *val = std::getenv(v);
        val && *val &&
        !(std::string(v) == "NCCL_COMM_BLOCKING" && std::string(val) == "0"))
      return failed(Status::error(std::string("nccl transport: ") + v + "=" +
                                  val + " is not supported (unset it)"));
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess || n <= 0) {
    cudaGetLastError();
    return failed(
        Status::error(std::string("nccl transport: no CUDA device: ") +
                      (ce != cudaSuccess ? cudaGetErrorString(ce)
                                         : "cudaGetDeviceCount found none")));
  }
  dev = be && be->device() >= 0 ? be->device() : ncclLocalDevice();
  PF_TRY(failed(cudaCheck(cudaSetDevice(dev), "cudaSetDevice")));
  PF_TRY(failed(
      cudaCheck(cudaStreamCreateWithFlags(&hostStream, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags")));
  PF_TRY(failed(createComms()));
  ready = true;
  return Status::ok();
}

void NcclTransport::attachBackend(Backend &b) {
  be = &b;
  if (b.device() < 0) {
    failed(Status::error(std::string("nccl transport: the ") + b.name() +
                         " backend has no CUDA device (use --backend cuda)"));
  } else if (dev >= 0 && b.device() != dev) {
    failed(Status::error(
        "nccl transport: the backend is on CUDA device " +
        std::to_string(b.device()) + " but the NCCL communicators on device " +
        std::to_string(dev) +
        " (the node-local rank modulo the device count): leave out --device"));
  } else {
    dev = b.device();
    failed(cudaCheck(cudaSetDevice(dev), "cudaSetDevice"));
  }
}

Status NcclTransport::startInit(Comm &c, int n, int rank,
                                const ncclUniqueId &id) {
  PF_TRY(cudaCheck(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags"));
  c.cfg.blocking = 0;
  return ncclCheck(ncclCommInitRankConfig(&c.c, n, id, rank, &c.cfg),
                   "ncclCommInitRankConfig", c.c, c.what);
}

Status NcclTransport::createComms() {
  sendCh.resize(size_t(P));
  recvCh.resize(size_t(P));
  const int idBytes = int(sizeof(ncclUniqueId));
  // Channel i -> j: i makes the id; one all-to-all hands each to its j.
  std::vector<ncclUniqueId> mine(static_cast<size_t>(P)),
      theirs(static_cast<size_t>(P));
  for (int j = 0; j < P; ++j)
    if (j != prank)
      PF_TRY(ncclCheck(ncclGetUniqueId(&mine[size_t(j)]), "ncclGetUniqueId",
                       nullptr, "channel"));
  MPI_Request r;
  MPI_Ialltoall(mine.data(), idBytes, MPI_BYTE, theirs.data(), idBytes,
                MPI_BYTE, pipeComm, &r);
  PF_TRY(mpiWait(r, "the exchange of NCCL ids"));
  auto groupId = [&](MPI_Comm c, int index, ncclUniqueId &id) -> Status {
    if (index == 0)
      PF_TRY(
          ncclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr, "group"));
    MPI_Request q;
    MPI_Ibcast(&id, idBytes, MPI_BYTE, 0, c, &q);
    return mpiWait(q, "the broadcast of an NCCL id");
  };
  ncclUniqueId dpId{}, epId{}, tpId{};
  if (D > 1)
    PF_TRY(groupId(dpComm, dpi, dpId));
  if (E > 1)
    PF_TRY(groupId(epComm, epi, epId));
  if (T > 1)
    PF_TRY(groupId(tpComm, tpi, tpId));

  // Start every init (NCCL runs each in a thread of its own), in the same
  // order on every rank, then poll them all.
  std::vector<Comm *> all, chans;
  for (int i = 0; i < P; ++i)
    for (int j = 0; j < P; ++j) {
      if (i == j || (i != prank && j != prank))
        continue;
      bool src = i == prank;
      Comm &c = src ? sendCh[size_t(j)] : recvCh[size_t(i)];
      c.what = "channel " + std::to_string(i) + " -> " + std::to_string(j);
      PF_TRY(startInit(c, 2, src ? 0 : 1,
                       src ? mine[size_t(j)] : theirs[size_t(i)]));
      all.push_back(&c);
    }
  chans = all;
  dpC.what = "data-parallel group";
  epC.what = "expert group";
  if (D > 1) {
    PF_TRY(startInit(dpC, D, dpi, dpId));
    all.push_back(&dpC);
  }
  if (E > 1) {
    PF_TRY(startInit(epC, E, epi, epId));
    all.push_back(&epC);
  }
  tpC.what = "tensor group";
  if (T > 1) {
    PF_TRY(startInit(tpC, T, tpi, tpId));
    all.push_back(&tpC);
  }
  PF_TRY(settle(all, "NCCL communicator initialization", false));
  if (all.empty())
    return Status::ok();

  // Warm-up: one float over every channel and a one-float allreduce over
  // every group connect them now rather than in the first step.
  PF_TRY(cudaCheck(
      cudaMalloc(reinterpret_cast<void **>(&warm), kF * size_t(P + 4)),
      "cudaMalloc"));
  PF_TRY(cudaCheck(cudaMemset(warm, 0, kF * size_t(P + 4)), "cudaMemset"));
  for (int j = 0; j < P; ++j) {
    if (j == prank)
      continue;
    Comm &s = sendCh[size_t(j)], &q = recvCh[size_t(j)];
    PF_TRY(ncclCheck(ncclSend(warm, 1, ncclFloat32, 1, s.c, s.s), "ncclSend",
                     s.c, s.what));
    PF_TRY(ncclCheck(ncclRecv(warm + 1 + j, 1, ncclFloat32, 0, q.c, q.s),
                     "ncclRecv", q.c, q.what));
  }
  for (int g = 0; g < 3; ++g) // a float of its own for each group
    if (Comm &c = g == 0 ? dpC : g == 1 ? epC : tpC; c.c)
      PF_TRY(ncclCheck(ncclAllReduce(warm + P + 1 + g, warm + P + 1 + g, 1,
                                     ncclFloat32, ncclSum, c.c, c.s),
                       "ncclAllReduce", c.c, c.what));
  PF_TRY(settle(all, "the NCCL warm-up", false));
  return poll(
      "the NCCL warm-up",
      [&]() -> Expected<bool> {
        for (Comm *c : all) {
          PF_TRY(commError(*c));
          cudaError_t q = cudaStreamQuery(c->s);
          if (q == cudaErrorNotReady) {
            (void)cudaGetLastError();
            return false;
          }
          PF_TRY(cudaCheck(q, "cudaStreamQuery"));
        }
        return true;
      },
      false);
}

Expected<RequestId> NcclTransport::post(bool send, int peer, int64_t tag,
                                        float *buf, int64_t n,
                                        cudaStream_t after, bool internal) {
  PF_TRY(usable());
  if (peer < 0 || peer >= P || peer == prank || n < 0)
    return Status::error("nccl transport: bad message to pipeline rank " +
                         std::to_string(peer) + " (" + std::to_string(n) +
                         " floats) from pipeline rank " +
                         std::to_string(prank) + " of " + std::to_string(P));
  RequestId id = next++;
  Req &r = reqs[id];
  r.send = send, r.internal = internal, r.peer = peer, r.tag = tag, r.n = n;
  r.buf = buf;
  Status s = [&]() -> Status {
    PF_TRY(record(r.ready, after));
    if (send) {
      Comm &ch = sendCh[size_t(peer)];
      r.hdr[0] = tag, r.hdr[1] = n;
      MPI_Isend(r.hdr, 2, MPI_INT64_T, peer, kHeaderTag, pipeComm, &r.hdrReq);
      PF_TRY(waitOn(ch.s, r.ready));
      if (n > 0)
        PF_TRY(enqueued(ch,
                        ncclSend(buf, size_t(n), ncclFloat32, 1, ch.c, ch.s),
                        "ncclSend"));
      return record(r.done, ch.s);
    }
    auto st = staged.find({peer, tag});
    if (st == staged.end()) {
      waiting[{peer, tag}].push_back(id);
      return Status::ok();
    }
    Staged m = st->second.front();
    st->second.pop_front();
    if (st->second.empty())
      staged.erase(st);
    Comm &ch = recvCh[size_t(peer)];
    if (m.n != n) {
      if (m.buf)
        cudaFreeAsync(m.buf, ch.s);
      return Status::error(sizeError(peer, tag, m.n, n));
    }
    PF_TRY(waitOn(ch.s, r.ready));
    if (n > 0) {
      PF_TRY(cudaCheck(cudaMemcpyAsync(buf, m.buf, size_t(n) * kF,
                                       cudaMemcpyDeviceToDevice, ch.s),
                       "cudaMemcpyAsync (staged message)"));
      PF_TRY(cudaCheck(cudaFreeAsync(m.buf, ch.s), "cudaFreeAsync"));
    }
    return record(r.done, ch.s);
  }();
  if (!s)
    return failed(s);
  drain(); // a receive's header may be here already
  return id;
}

/// Queues the receive of the next message on channel p -> me.
Status NcclTransport::deliver(int p, int64_t tag, int64_t n) {
  Comm &ch = recvCh[size_t(p)];
  Req *r = nullptr;
  if (auto it = waiting.find({p, tag}); it != waiting.end()) {
    r = &reqs.at(it->second.front());
    it->second.pop_front();
    if (it->second.empty())
      waiting.erase(it);
  }
  if (r && r->n == n) {
    PF_TRY(waitOn(ch.s, r->ready));
    PF_TRY(recvInto(ch, r->buf, n));
    return record(r->done, ch.s);
  }
  // No receive posted yet (or a wrong size): into a staging buffer, so the
  // channel stays in order.
  float *buf = nullptr;
  if (n > 0)
    PF_TRY(cudaCheck(
        cudaMallocAsync(reinterpret_cast<void **>(&buf), size_t(n) * kF, ch.s),
        "cudaMallocAsync (staging)"));
  PF_TRY(recvInto(ch, buf, n));
  if (!r) {
    staged[{p, tag}].push_back({buf, n});
    return Status::ok();
  }
  r->error = sizeError(p, tag, n, r->n);
  if (buf)
    cudaFreeAsync(buf, ch.s);
  return Status::ok();
}

void NcclTransport::drain() {
  if (pumping || !ready || !fatal)
    return;
  pumping = true;
  Status s = Status::ok();
  while (s) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    MPI_Improbe(MPI_ANY_SOURCE, kHeaderTag, pipeComm, &flag, &msg, &st);
    if (!flag)
      break;
    int64_t h[2] = {0, 0};
    MPI_Mrecv(h, 2, MPI_INT64_T, &msg, MPI_STATUS_IGNORE);
    s = deliver(st.MPI_SOURCE, h[0], h[1]);
  }
  // All-to-alls whose counts arrived post their data, in start order.
  for (auto it = colls.begin(); s && it != colls.end(); ++it) {
    A2A &a = *it->second;
    if (a.phase != 0)
      continue;
    int done = 0;
    MPI_Test(&a.req, &done, MPI_STATUS_IGNORE);
    if (!done)
      break;
    s = postData(a);
  }
  pumping = false;
  failed(s);
}

Expected<bool> NcclTransport::reqDone(Req &r) {
  if (!r.error.empty())
    return Status::error(r.error);
  if (r.hdrReq != MPI_REQUEST_NULL) {
    int f = 0;
    MPI_Test(&r.hdrReq, &f, MPI_STATUS_IGNORE);
  }
  PF_TRY(commError(r.send ? sendCh[size_t(r.peer)] : recvCh[size_t(r.peer)]));
  if (!r.done)
    return false;
  auto d = eventDone(r.done);
  if (!d || !*d)
    return d;
  return r.hdrReq == MPI_REQUEST_NULL;
}

/// Releases a completed request; later kernels see a received message.
Status NcclTransport::finish(RequestId id) {
  Req &r = reqs.at(id);
  Status s = Status::ok();
  if (!r.send && !r.internal && compute())
    s = waitOn(compute(), r.done);
  recycle(r.ready);
  recycle(r.done);
  reqs.erase(id);
  return failed(s);
}

Status NcclTransport::wait(RequestId id) {
  if (auto w = worldReqs.find(id); w != worldReqs.end()) {
    RequestId in = w->second;
    worldReqs.erase(w);
    // Headers keep draining meanwhile (peers' sends to this rank complete).
    return failed(poll("a ZeRO-3 parameter message",
                       [&]() -> Expected<bool> { return inner().test(in); }));
  }
  if (colls.count(id))
    return waitColl(id);
  if (devReduces.count(id))
    return waitDevReduce(id);
  auto it = reqs.find(id);
  if (it == reqs.end())
    return Status::ok();
  Req &r = it->second;
  std::string what = std::string(r.send ? "send to" : "receive from") +
                     " pipeline rank " + std::to_string(r.peer) + " (" +
                     tagText(r.tag) + ", " + std::to_string(r.n) + " floats)";
  PF_TRY(failed(poll(what, [&] { return reqDone(r); })));
  return finish(id);
}

bool NcclTransport::test(RequestId id) {
  drain();
  if (auto w = worldReqs.find(id); w != worldReqs.end()) {
    if (!inner().test(w->second))
      return false;
    worldReqs.erase(w);
    return true;
  }
  if (auto d = devReduces.find(id); d != devReduces.end()) {
    auto e = eventDone(d->second.done);
    return e && *e && waitDevReduce(id);
  }
  if (auto c = colls.find(id); c != colls.end()) {
    A2A &a = *c->second;
    if (a.phase != 1)
      return false;
    auto d = eventDone(a.done);
    return d && *d && waitColl(id);
  }
  auto it = reqs.find(id);
  if (it == reqs.end())
    return true;
  auto d = reqDone(it->second); // errors surface in wait()
  return d && *d && finish(id);
}

Status NcclTransport::allreduce(float *buf, int64_t n, Group g, ReduceOp op) {
  if (g == Group::World || g == Group::Pipeline || g == Group::Tensor)
    return inner().allreduce(buf, n, g, op);
  if ((g == Group::DataParallel ? D : E) == 1 || n <= 0)
    return Status::ok();
  PF_TRY(collectiveComm(g));
  Comm &c = g == Group::DataParallel ? dpC : epC;
  size_t bytes = size_t(n) * kF;
  float *d = nullptr;
  PF_TRY(failed(cudaCheck(
      cudaMallocAsync(reinterpret_cast<void **>(&d), bytes, hostStream),
      "cudaMallocAsync")));
  Status s = [&]() -> Status {
    PF_TRY(cudaCheck(
        cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, hostStream),
        "cudaMemcpyAsync (host to device)"));
    PF_TRY(handoff(hostStream, c.s));
    PF_TRY(enqueued(c,
                    ncclAllReduce(d, d, size_t(n), ncclFloat32,
                                  op == ReduceOp::Sum ? ncclSum : ncclMax, c.c,
                                  c.s),
                    "ncclAllReduce"));
    cudaEvent_t ev = nullptr;
    PF_TRY(record(ev, c.s));
    Status w = poll("an allreduce over the " + c.what, [&]() -> Expected<bool> {
      PF_TRY(commError(c));
      return eventDone(ev);
    });
    recycle(ev);
    PF_TRY(w);
    return cudaCheck(
        cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, hostStream),
        "cudaMemcpyAsync (device to host)");
  }();
  // After a failure NCCL may still use `d`: free it behind the
  // communicator's work, not on the host stream.
  cudaFreeAsync(d, s ? hostStream : c.s);
  Status h = syncHost();
  return failed(s ? h : s);
}

Status NcclTransport::allreduceDevice(float *buf, int64_t n, Group g) {
  if (g != Group::DataParallel && g != Group::Expert && g != Group::Tensor)
    return Status::error("nccl transport: a device allreduce runs over the "
                         "data-parallel, expert or tensor group");
  return deviceCollective(g, "allreduce", [&](Comm &c) {
    return ncclAllReduce(buf, buf, size_t(n), ncclFloat32, ncclSum, c.c, c.s);
  }, n);
}

// The overlapped gradient reduction: the sum is queued on the group's
// stream behind the compute work queued so far, and the compute stream goes
// on; wait() makes it wait for the sum (waitDevReduce).
Expected<RequestId> NcclTransport::allreduceDeviceStart(float *buf, int64_t n,
                                                        Group g) {
  if (g != Group::DataParallel && g != Group::Expert)
    return Status::error("nccl transport: an overlapped device allreduce "
                         "runs over the data-parallel or expert group");
  if ((g == Group::DataParallel ? D : E) == 1 || n <= 0)
    return RequestId(0);
  PF_TRY(collectiveComm(g));
  Comm &c = g == Group::DataParallel ? dpC : epC;
  if (compute())
    PF_TRY(failed(handoff(compute(), c.s)));
  PF_TRY(failed(enqueued(
      c, ncclAllReduce(buf, buf, size_t(n), ncclFloat32, ncclSum, c.c, c.s),
      "ncclAllReduce (overlapped)")));
  DevReduce d;
  d.comm = &c;
  PF_TRY(failed(record(d.done, c.s)));
  RequestId id = next++;
  devReduces[id] = d;
  return id;
}

Status NcclTransport::waitDevReduce(RequestId id) {
  DevReduce d = devReduces.at(id);
  Status w = poll("an overlapped gradient allreduce over the " + d.comm->what,
                  [&]() -> Expected<bool> {
                    PF_TRY(commError(*d.comm));
                    return eventDone(d.done);
                  });
  if (w && compute())
    w = waitOn(compute(), d.done);
  recycle(d.done);
  devReduces.erase(id);
  return failed(w);
}

Status NcclTransport::allGatherDevice(const float *in, float *out, int64_t n,
                                      Group g) {
  if (g != Group::Tensor)
    return Status::error("nccl transport: a device all-gather runs over the "
                         "tensor group");
  return deviceCollective(g, "all-gather", [&](Comm &c) {
    return ncclAllGather(in, out, size_t(n), ncclFloat32, c.c, c.s);
  }, n);
}

Status NcclTransport::reduceScatterDevice(const float *in, float *out,
                                          int64_t n, Group g) {
  if (g != Group::Tensor)
    return Status::error("nccl transport: a device reduce-scatter runs over "
                         "the tensor group");
  return deviceCollective(g, "reduce-scatter", [&](Comm &c) {
    return ncclReduceScatter(in, out, size_t(n), ncclFloat32, ncclSum, c.c,
                             c.s);
  }, n);
}

/// One collective on the backend's buffers: after the kernels that wrote
/// them, and the compute stream after it. No staging, no host copy.
template <typename Call>
Status NcclTransport::deviceCollective(Group g, const char *what, Call call,
                                       int64_t n) {
  int size = g == Group::DataParallel ? D : g == Group::Expert ? E : T;
  if (size == 1 || n <= 0)
    return Status::ok();
  PF_TRY(collectiveComm(g));
  Comm &c = g == Group::DataParallel ? dpC : g == Group::Expert ? epC : tpC;
  if (compute())
    PF_TRY(failed(handoff(compute(), c.s)));
  PF_TRY(failed(enqueued(c, call(c),
                         (std::string("nccl ") + what + " (device)").c_str())));
  cudaEvent_t ev = nullptr;
  PF_TRY(failed(record(ev, c.s)));
  Status w = poll(std::string("a device ") + what + " over the " + c.what,
                  [&]() -> Expected<bool> {
                    PF_TRY(commError(c));
                    return eventDone(ev);
                  });
  if (w && compute())
    w = waitOn(compute(), ev);
  recycle(ev);
  return failed(w);
}

Status NcclTransport::pairwiseSum(int peer, float *buf, int64_t n) {
  if (peer == prank && peer >= 0 && peer < P) {
    for (int64_t i = 0; i < n; ++i)
      buf[i] = buf[i] + buf[i];
    return Status::ok();
  }
  PF_TRY(usable());
  size_t bytes = size_t(std::max<int64_t>(n, 0)) * kF;
  float *d = nullptr;
  PF_TRY(failed(cudaCheck(cudaMallocAsync(reinterpret_cast<void **>(&d),
                                          2 * bytes + kF, hostStream),
                          "cudaMallocAsync")));
  std::vector<float> other(bytes / kF);
  Status s = [&]() -> Status {
    if (bytes)
      PF_TRY(cudaCheck(
          cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, hostStream),
          "cudaMemcpyAsync (host to device)"));
    auto sr = post(true, peer, kPairTag, d, n, hostStream, true);
    if (!sr)
      return sr.status();
    auto rr = post(false, peer, kPairTag, d + n, n, hostStream, true);
    if (!rr)
      return rr.status();
    PF_TRY(wait(*rr));
    PF_TRY(wait(*sr));
    if (bytes)
      PF_TRY(cudaCheck(cudaMemcpyAsync(other.data(), d + n, bytes,
                                       cudaMemcpyDeviceToHost, hostStream),
                       "cudaMemcpyAsync (device to host)"));
    return Status::ok();
  }();
  // After a failure a channel may still use `d`: leave it (the job ends).
  if (s)
    cudaFreeAsync(d, hostStream);
  PF_TRY(failed(s ? syncHost() : s));
  // a + b == b + a bitwise: both sides get the same result.
  for (int64_t i = 0; i < n; ++i)
    buf[i] = buf[i] + other[size_t(i)];
  return Status::ok();
}

Expected<RequestId>
NcclTransport::allToAllStart(const std::vector<std::vector<float>> &send,
                             std::vector<std::vector<float>> &recv, Group g) {
  if (g != Group::Expert) { // not used by the executor: blocking, over MPI
    PF_TRY(inner().allToAll(send, recv, g));
    return RequestId(0);
  }
  if (int(send.size()) != E)
    return Status::error("allToAllStart: " + std::to_string(send.size()) +
                         " send buffers for a group of " + std::to_string(E));
  if (E == 1) {
    recv = send;
    return RequestId(0);
  }
  PF_TRY(usable());
  auto a = std::make_unique<A2A>();
  a->recv = &recv;
  a->sc.resize(size_t(E));
  a->rc.resize(size_t(E));
  a->sd.resize(size_t(E));
  a->rd.resize(size_t(E));
  for (size_t k = 0; k < size_t(E); ++k) {
    if (send[k].size() > size_t(INT_MAX))
      return Status::error("allToAllStart: a part of more than 2^31 floats");
    a->sc[k] = int(send[k].size());
    a->sd[k] = a->st;
    a->st += a->sc[k];
    a->sb.insert(a->sb.end(), send[k].begin(), send[k].end());
  }
  MPI_Ialltoall(a->sc.data(), 1, MPI_INT, a->rc.data(), 1, MPI_INT, epComm,
                &a->req);
  RequestId id = next++;
  colls[id] = std::move(a);
  drain();
  return id;
}

/// The counts arrived: queue the grouped sends and receives.
Status NcclTransport::postData(A2A &a) {
  for (size_t k = 0; k < size_t(E); ++k) {
    a.rd[k] = a.rt;
    a.rt += a.rc[k];
  }
  size_t total = size_t(a.st + a.rt) * kF;
  PF_TRY(cudaCheck(cudaMallocAsync(reinterpret_cast<void **>(&a.dev),
                                   total + kF, hostStream),
                   "cudaMallocAsync"));
  if (a.st)
    PF_TRY(cudaCheck(cudaMemcpyAsync(a.dev, a.sb.data(), size_t(a.st) * kF,
                                     cudaMemcpyHostToDevice, hostStream),
                     "cudaMemcpyAsync (host to device)"));
  PF_TRY(handoff(hostStream, epC.s));
  ncclResult_t r = ncclGroupStart();
  for (int k = 0; k < E && r == ncclSuccess; ++k) {
    size_t i = size_t(k);
    if (k == epi)
      continue; // the own part stays on the host
    if (a.sc[i] > 0)
      r = ncclSend(a.dev + a.sd[i], size_t(a.sc[i]), ncclFloat32, k, epC.c,
                   epC.s);
    if (r == ncclSuccess && a.rc[i] > 0)
      r = ncclRecv(a.dev + a.st + a.rd[i], size_t(a.rc[i]), ncclFloat32, k,
                   epC.c, epC.s);
  }
  ncclResult_t e = ncclGroupEnd();
  PF_TRY(ncclCheck(r, "ncclSend/ncclRecv (all-to-all)", epC.c, epC.what));
  PF_TRY(enqueued(epC, e, "ncclGroupEnd (all-to-all)"));
  PF_TRY(record(a.done, epC.s));
  a.phase = 1;
  return Status::ok();
}

Status NcclTransport::waitColl(RequestId id) {
  A2A &a = *colls.at(id);
  PF_TRY(failed(
      poll("an all-to-all over the expert group", [&]() -> Expected<bool> {
        if (a.phase == 0)
          return false; // drain() posts the data
        PF_TRY(commError(epC));
        return eventDone(a.done);
      })));
  std::vector<float> rb(size_t(a.rt));
  Status s = Status::ok();
  if (a.rt)
    s = cudaCheck(cudaMemcpyAsync(rb.data(), a.dev + a.st, size_t(a.rt) * kF,
                                  cudaMemcpyDeviceToHost, hostStream),
                  "cudaMemcpyAsync (device to host)");
  cudaFreeAsync(a.dev, hostStream);
  PF_TRY(failed(s ? syncHost() : s));
  auto &recv = *a.recv;
  recv.assign(size_t(E), {});
  for (size_t k = 0; k < size_t(E); ++k) {
    if (int(k) == epi)
      recv[k].assign(a.sb.begin() + a.sd[k], a.sb.begin() + a.sd[k] + a.sc[k]);
    else
      recv[k].assign(rb.begin() + a.rd[k], rb.begin() + a.rd[k] + a.rc[k]);
  }
  recycle(a.done);
  colls.erase(id);
  return Status::ok();
}

NcclTransport::~NcclTransport() {
  if (dev >= 0)
    cudaSetDevice(dev);
  ready = false; // no more draining
  std::vector<Comm *> live;
  forComms([&](Comm &c) {
    if (c.c)
      live.push_back(&c);
  });
  // A clean finish: finalize (globally quiescent, bounded by the watchdog),
  // then destroy. Anything outstanding or failed: abort.
  bool clean = fatal && reqs.empty() && colls.empty() && staged.empty();
  for (Comm *c : live)
    if (clean) {
      ncclResult_t r = ncclCommFinalize(c->c);
      clean = r == ncclSuccess || r == ncclInProgress;
    }
  if (clean && !live.empty()) {
    double keep = timeoutS;
    timeoutS = keep > 0 ? std::min(keep, 30.0) : 30.0;
    clean = bool(settle(live, "NCCL finalize", false));
    timeoutS = keep;
  }
  if (!clean)
    ncclGroupStart(); // as in abortComms
  for (Comm *c : live)
    if (c->c) {
      clean ? ncclCommDestroy(c->c) : ncclCommAbort(c->c);
      c->c = nullptr;
    }
  if (!clean)
    ncclGroupEnd();
  for (auto &[key, q] : staged)
    for (Staged &m : q)
      if (m.buf)
        cudaFreeAsync(m.buf, recvCh[size_t(key.first)].s);
  for (auto &[id, a] : colls)
    if (a->dev)
      cudaFreeAsync(a->dev, hostStream);
  for (auto &[id, r] : reqs) {
    if (r.hdrReq != MPI_REQUEST_NULL) {
      MPI_Cancel(&r.hdrReq);
      MPI_Request_free(&r.hdrReq);
    }
    recycle(r.ready);
    recycle(r.done);
  }
  for (auto &[id, a] : colls)
    recycle(a->done);
  forComms([](Comm &c) {
    if (c.s)
      cudaStreamDestroy(c.s);
  });
  for (cudaEvent_t ev : freeEvents)
    cudaEventDestroy(ev);
  if (warm)
    cudaFree(warm);
  if (hostStream)
    cudaStreamDestroy(hostStream);
  for (MPI_Comm *c : {&pipeComm, &dpComm, &epComm, &tpComm})
    if (*c != MPI_COMM_NULL)
      MPI_Comm_free(c);
}

} // namespace

std::unique_ptr<Transport> createNcclTransport(int *argc, char ***argv) {
  auto m = createMpiTransport(argc, argv);
  if (!m) {
    std::fprintf(stderr, "pipeforge-run: nccl transport: MPI failed\n");
    return nullptr;
  }
  return std::make_unique<NcclTransport>(std::move(m));
}

int ncclLocalDevice() {
  static int cached = -2; // computed once: MPI_Comm_split_type is collective
  if (cached != -2)
    return cached;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    return cached = -1;
  }
  int inited = 0, fin = 0, local = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) {
    MPI_Comm c;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                        &c);
    MPI_Comm_rank(c, &local);
    MPI_Comm_free(&c);
  }
  return cached = local % n;
}

} // namespace pipeforge::rt

#undef PF_TRY
