//===- MpiTransport.cpp - OpenMPI transport -------------------------------===//
//
// World rank = dpIndex * P + pipelineRank. Two split communicators: the
// pipeline of this replica (point-to-point, grad norm) and the data-parallel
// group of this pipeline rank (gradient allreduce).
//
// Every wait is a test loop with a watchdog: when a peer stops answering for
// timeout() seconds the job is aborted with a message naming the request.
// (A peer that dies is normally caught earlier by mpirun, which kills the
// job when a process exits without MPI_Finalize.)
//
// Non-blocking all-to-all (allToAllStart / wait): MPI_Ialltoall of the
// counts, then, once they arrived, MPI_Ialltoallv of the data. Open MPI 4.1
// has no asynchronous progress of its own ("OMPI progress: no" in
// ompi_info), so a request only advances inside an MPI call. When
// MPI_Init_thread grants MPI_THREAD_MULTIPLE (Open MPI 4.1 does; checked with
// MPI_Query_thread, also when someone else initialised MPI) a progress thread
// tests the in-flight all-to-alls (and posts the data phase when the counts
// arrive) every ~50 us while any is in flight, and sleeps on a condition
// variable otherwise; all-to-all state is under one mutex, point-to-point
// requests stay on the main thread. Without MPI_THREAD_MULTIPLE (or with
// PIPEFORGE_MPI_PROGRESS_THREAD=0) there is no thread: asyncProgress() is
// false and the executor calls progress() between kernels.
//
// Allreduce is gather-to-root, sum in rank order, broadcast: slower than
// MPI_Allreduce for large groups, but every rank gets the same bits and the
// result does not depend on the MPI algorithm chosen.
//
// Non-blocking allreduce (allreduceStart, the overlapped gradient
// reduction) rides the all-to-all machinery: a reduce-scatter as
// MPI_Ialltoallv (member k gets the k-th of `size` near-equal chunks from
// everyone), the chunk summed in member order (the bits of the blocking
// allreduce: member 0's value, plus member 1's, ...), then an
// MPI_Iallgatherv of the sums on the data communicator, posted in start
// order like an all-to-all's data phase.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/MpiTransport.h"
#include "pipeforge/rt/RankGrid.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace pipeforge::rt {

bool launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
         std::getenv("PMIX_RANK");
}

namespace {

class MpiTransport final : public Transport {
public:
  MpiTransport(int *argc, char ***argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    int provided = MPI_THREAD_SINGLE;
    if (!inited)
      MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    else
      MPI_Query_thread(&provided);
    const char *pt = std::getenv("PIPEFORGE_MPI_PROGRESS_THREAD");
    threadOk =
        provided == MPI_THREAD_MULTIPLE && !(pt && std::strcmp(pt, "0") == 0);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    void *ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    tagUb = flag ? *static_cast<int *>(ub) : 32767;
  }
  ~MpiTransport() override {
    if (progThread.joinable()) {
      {
        std::lock_guard<std::mutex> g(mu);
        stopThread = true;
      }
      cv.notify_all();
      progThread.join();
    }
    for (auto &[id, r] : reqs)
      MPI_Cancel(&r.req);
    if (pipe != MPI_COMM_NULL)
      MPI_Comm_free(&pipe);
    if (dp != MPI_COMM_NULL)
      MPI_Comm_free(&dp);
    if (ep != MPI_COMM_NULL)
      MPI_Comm_free(&ep);
    if (tp != MPI_COMM_NULL)
      MPI_Comm_free(&tp);
    for (MPI_Comm *c :
         {&pipeData, &dpData, &epData, &tpData, &worldData, &paramComm})
      if (*c != MPI_COMM_NULL)
        MPI_Comm_free(c);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
      MPI_Finalize();
  }
  const char *name() const override { return "mpi"; }

  Status setup(int p, int d) override { return setupGrid(p, d, 1); }
  Status setupGrid(int p, int d, int e) override {
    return setupTensorGrid(p, d, e, 1);
  }
  /// The ranks as a RankGrid (world rank = ((replica * E + expert) * P +
  /// pipeline) * T + tensor); one communicator per group the grid defines.
  Status setupTensorGrid(int p, int d, int e, int t) override {
    RankGrid grid{p, e, d, t, rankDataFastest};
    if (!grid.valid() || grid.size() != wsize)
      return Status::error("the program needs " + grid.describe() +
                           ", but MPI started " + std::to_string(wsize) +
                           " (use mpirun -np " + std::to_string(grid.size()) +
                           ")");
    P = p;
    D = d;
    E = e;
    T = t;
    RankCoord c = grid.coordOf(wrank);
    prank = c.pipeline;
    epi = c.expert;
    dpi = c.replica;
    tpi = c.tensor;
    auto split = [&](GroupPosition g, MPI_Comm *out) {
      MPI_Comm_split(MPI_COMM_WORLD, g.instance, g.index, out);
    };
    split(grid.pipelineGroup(c), &pipe);
    split(grid.dataParallelGroup(c), &dp);
    split(grid.expertGroup(c), &ep);
    split(grid.tensorGroup(c), &tp);
    // Duplicates for the data phase of non-blocking all-to-alls.
    MPI_Comm_dup(pipe, &pipeData);
    MPI_Comm_dup(dp, &dpData);
    MPI_Comm_dup(ep, &epData);
    MPI_Comm_dup(tp, &tpData);
    MPI_Comm_dup(MPI_COMM_WORLD, &worldData);
    MPI_Comm_dup(MPI_COMM_WORLD, &paramComm);
    // Every rank's host, for messages that name a peer (a lost node).
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    // Test hook: every rank on a host of its own (the placement checks
    // below without a second machine).
    if (std::getenv("PIPEFORGE_TEST_HOST_PER_RANK"))
      std::snprintf(name + std::min(len, MPI_MAX_PROCESSOR_NAME - 16), 16,
                    "-r%d", wrank);
    std::vector<char> all(size_t(wsize) * MPI_MAX_PROCESSOR_NAME, 0);
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                  MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    hosts.clear();
    for (int r = 0; r < wsize; ++r)
      hosts.emplace_back(all.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME);
    // A tensor-parallel group should share a node (its all-reduces run in
    // every layer): say so once when one does not.
    if (t > 1 && wrank == 0)
      for (int r = 0; r < wsize; r += t)
        for (int k = 1; k < t; ++k)
          if (hosts[size_t(r + k)] != hosts[size_t(r)]) {
            std::fprintf(stderr,
                         "pipeforge-run: warning: the tensor-parallel group "
                         "of world ranks %d..%d spans hosts %s and %s: its "
                         "all-reduces cross the network (docs/multi-node.md: "
                         "place consecutive ranks on one node)\n",
                         r, r + t - 1, hosts[size_t(r)].c_str(),
                         hosts[size_t(r + k)].c_str());
            std::fflush(stderr);
            r = wsize; // once
            break;
          }
    // World ranks of this pipeline's ranks.
    pipeWorld.resize(size_t(p));
    for (int q = 0; q < p; ++q) {
      RankCoord o = c;
      o.pipeline = q;
      pipeWorld[size_t(q)] = grid.worldRank(o);
    }
    return Status::ok();
  }
  int epIndex() const override { return epi; }
  int epSize() const override { return E; }
  int tpIndex() const override { return tpi; }
  int tpSize() const override { return T; }
  bool asyncProgress() const override { return threadOk; }
  Expected<RequestId> allToAllStart(const std::vector<std::vector<float>> &send,
                                    std::vector<std::vector<float>> &recv,
                                    Group g) override {
    MPI_Comm c = comm(g);
    int size = 0;
    MPI_Comm_size(c, &size);
    if (int(send.size()) != size)
      return Status::error("allToAllStart: " + std::to_string(send.size()) +
                           " send buffers for a group of " +
                           std::to_string(size));
    auto a = std::make_unique<A2A>();
    const size_t gs = static_cast<size_t>(size);
    a->comm = c;
    a->dataComm = dataComm(g);
    a->size = size;
    a->recv = &recv;
    a->sc.resize(gs);
    a->rc.resize(gs);
    a->sd.resize(gs);
    a->rd.resize(gs);
    int st = 0;
    for (int k = 0; k < size; ++k) {
      a->sc[size_t(k)] = int(send[size_t(k)].size());
      a->sd[size_t(k)] = st;
      st += a->sc[size_t(k)];
    }
    a->sb.resize(size_t(st) + 1);
    for (int k = 0; k < size; ++k)
      std::copy(send[size_t(k)].begin(), send[size_t(k)].end(),
                a->sb.begin() + a->sd[size_t(k)]);
    return startColl(std::move(a), [&](A2A &x) {
      MPI_Ialltoall(x.sc.data(), 1, MPI_INT, x.rc.data(), 1, MPI_INT, c,
                    &x.req);
    });
  }
  Expected<RequestId> allreduceStart(float *buf, int64_t n,
                                     Group g) override {
    MPI_Comm c = comm(g);
    int size = 0, rank = 0;
    MPI_Comm_size(c, &size);
    MPI_Comm_rank(c, &rank);
    if (size == 1 || n <= 0)
      return RequestId(0);
    if (n > int64_t(std::numeric_limits<int>::max()))
      return Status::error("allreduceStart: " + std::to_string(n) +
                           " floats in one bucket (at most 2^31 - 1)");
    auto a = std::make_unique<A2A>();
    const size_t gs = static_cast<size_t>(size);
    a->reduce = true;
    a->buf = buf;
    a->comm = c;
    a->dataComm = dataComm(g);
    a->size = size;
    a->rank = rank;
    a->sc.resize(gs);
    a->sd.resize(gs);
    a->rc.assign(gs, 0);
    a->rd.resize(gs);
    int64_t at = 0;
    for (int k = 0; k < size; ++k) {
      a->sc[size_t(k)] = int(n / size + (k < n % size ? 1 : 0));
      a->sd[size_t(k)] = int(at);
      at += a->sc[size_t(k)];
    }
    const int mine = a->sc[size_t(rank)];
    for (int k = 0; k < size; ++k) {
      a->rc[size_t(k)] = mine;
      a->rd[size_t(k)] = k * mine;
    }
    a->rb.resize(gs * size_t(mine) + 1);
    return startColl(std::move(a), [&](A2A &x) {
      MPI_Ialltoallv(buf, x.sc.data(), x.sd.data(), MPI_FLOAT, x.rb.data(),
                     x.rc.data(), x.rd.data(), MPI_FLOAT, c, &x.req);
    });
  }
  /// Blocking: allToAllStart + wait (one ordered sequence of all-to-alls).
  Status allToAll(const std::vector<std::vector<float>> &send,
                  std::vector<std::vector<float>> &recv, Group g) override {
    auto h = allToAllStart(send, recv, g);
    if (!h)
      return h.status();
    return wait(*h);
  }
  int worldRank() const override { return wrank; }
  int worldSize() const override { return wsize; }
  int pipelineRank() const override { return prank; }
  int pipelineSize() const override { return P; }
  int dpIndex() const override { return dpi; }
  int dpSize() const override { return D; }

  int foldTag(int64_t tag) const {
    int64_t range = int64_t(tagUb) - 16;
    return int(tag % range);
  }

  Expected<RequestId> isend(int peer, int64_t tag, const float *buf,
                            int64_t n) override {
    if (Status s = checkPeer(peer); !s)
      return s;
    Req r{true, peer, tag};
    MPI_Isend(buf, int(n), MPI_FLOAT, peer, foldTag(tag), pipe, &r.req);
    reqs[next] = r;
    return next++;
  }
  Expected<RequestId> irecv(int peer, int64_t tag, float *buf,
                            int64_t n) override {
    if (Status s = checkPeer(peer); !s)
      return s;
    Req r{false, peer, tag};
    MPI_Irecv(buf, int(n), MPI_FLOAT, peer, foldTag(tag), pipe, &r.req);
    reqs[next] = r;
    return next++;
  }
  Expected<RequestId> isendWorld(int worldPeer, int64_t tag, const float *buf,
                                 int64_t n) override {
    return postWorld(true, worldPeer, tag, const_cast<float *>(buf), n);
  }
  Expected<RequestId> irecvWorld(int worldPeer, int64_t tag, float *buf,
                                 int64_t n) override {
    return postWorld(false, worldPeer, tag, buf, n);
  }
  Status wait(RequestId id) override {
    if (isColl(id))
      return waitColl(id);
    auto it = reqs.find(id);
    if (it == reqs.end())
      return Status::ok();
    Req r = it->second;
    auto what = [&] {
      if (r.world)
        return std::string(r.send ? "parameters served to"
                                  : "parameters gathered from") +
               " world rank " + std::to_string(r.peer) +
               (size_t(r.peer) < hosts.size() ? " on " + hosts[size_t(r.peer)]
                                              : "") +
               " (tag " + std::to_string(r.tag) + ")";
      return std::string(r.send ? "send to" : "receive from") +
             " pipeline rank " + std::to_string(r.peer) + peerWhere(r.peer) +
             " (tag " + std::to_string(r.tag) + ")";
    };
    if (Status s = waitReq(it->second.req, what); !s)
      return s;
    reqs.erase(id);
    return Status::ok();
  }
  bool test(RequestId id) override {
    if (isColl(id)) {
      std::lock_guard<std::mutex> lk(mu);
      auto it = colls.find(id);
      if (it == colls.end())
        return true;
      pump();
      return it->second->phase == 2;
    }
    auto it = reqs.find(id);
    if (it == reqs.end())
      return true;
    int done = 0;
    MPI_Test(&it->second.req, &done, MPI_STATUS_IGNORE);
    if (done)
      reqs.erase(it);
    return done;
  }
  void progress() override {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG,
               pipe == MPI_COMM_NULL ? MPI_COMM_WORLD : pipe, &flag,
               MPI_STATUS_IGNORE);
    for (auto &[id, r] : reqs) {
      int done = 0;
      MPI_Test(&r.req, &done, MPI_STATUS_IGNORE);
      if (done)
        r.req = MPI_REQUEST_NULL; // completed: a later wait returns at once
    }
    if (!threadOk) {
      std::lock_guard<std::mutex> lk(mu);
      pump();
    }
  }

  Status allreduce(float *buf, int64_t n, Group g, ReduceOp op) override {
    MPI_Comm c = comm(g);
    int size = 0, rank = 0;
    MPI_Comm_size(c, &size);
    MPI_Comm_rank(c, &rank);
    if (size == 1 || n == 0)
      return Status::ok();
    // The gather as point-to-point messages to the group's rank 0 (on the
    // group's data communicator, which carries no other point-to-point
    // traffic), so a watchdog names the member whose part never came.
    std::vector<float> all(rank == 0 ? size_t(n) * size : 0);
    MPI_Comm dc = dataComm(g);
    MPI_Request r;
    if (rank == 0) {
      std::vector<MPI_Request> parts(size_t(size), MPI_REQUEST_NULL);
      for (int k = 1; k < size; ++k)
        MPI_Irecv(all.data() + size_t(k) * n, int(n), MPI_FLOAT, k, kGatherTag,
                  dc, &parts[size_t(k)]);
      for (int k = 1; k < size; ++k)
        if (Status s = waitReq(
                parts[size_t(k)],
                [&] { return "allreduce: the part of " + memberWhere(c, k); });
            !s)
          return s;
    } else {
      MPI_Isend(buf, int(n), MPI_FLOAT, 0, kGatherTag, dc, &r);
      if (Status s = waitReq(
              r, [&] { return "allreduce: sending to " + memberWhere(c, 0); });
          !s)
        return s;
    }
    if (rank == 0)
      for (int k = 1; k < size; ++k) {
        const float *src = all.data() + size_t(k) * n;
        for (int64_t i = 0; i < n; ++i)
          buf[i] =
              op == ReduceOp::Sum ? buf[i] + src[i] : std::max(buf[i], src[i]);
      }
    MPI_Ibcast(buf, int(n), MPI_FLOAT, 0, c, &r);
    return waitReq(
        r, [&] { return "allreduce: the sum from " + memberWhere(c, 0); });
  }
  Status pairwiseSum(int peer, float *buf, int64_t n) override {
    if (Status s = checkPeer(peer); !s)
      return s;
    if (peer == prank) {
      for (int64_t i = 0; i < n; ++i)
        buf[i] = buf[i] + buf[i];
      return Status::ok();
    }
    std::vector<float> other(static_cast<size_t>(n));
    MPI_Request r[2];
    int tag = tagUb - 1;
    MPI_Irecv(other.data(), int(n), MPI_FLOAT, peer, tag, pipe, &r[0]);
    MPI_Isend(buf, int(n), MPI_FLOAT, peer, tag, pipe, &r[1]);
    std::string what =
        "gradient exchange with pipeline rank " + std::to_string(peer);
    if (Status s = waitReq(r[0], what); !s)
      return s;
    if (Status s = waitReq(r[1], what); !s)
      return s;
    // a + b == b + a bitwise: both sides get the same result.
    for (int64_t i = 0; i < n; ++i)
      buf[i] = buf[i] + other[i];
    return Status::ok();
  }
  /// A one-float allreduce rather than MPI_Ibarrier: its watchdog names the
  /// member that never arrived (a lost host), where a barrier's cannot.
  Status barrier(Group g) override {
    float x = 0;
    return allreduce(&x, 1, g, ReduceOp::Sum);
  }
  Expected<std::vector<std::string>>
  gatherStrings(const std::string &mine) override {
    int len = int(mine.size());
    std::vector<int> lens(wrank == 0 ? wsize : 0), displs;
    MPI_Request r;
    MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD,
                &r);
    if (Status s = waitReq(r, "gather"); !s)
      return s;
    std::string all;
    if (wrank == 0) {
      int total = 0;
      for (int l : lens) {
        displs.push_back(total);
        total += l;
      }
      all.resize(size_t(total));
    }
    MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(),
                 displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD, &r);
    if (Status s = waitReq(r, "gather"); !s)
      return s;
    std::vector<std::string> out;
    if (wrank == 0)
      for (int k = 0; k < wsize; ++k)
        out.push_back(all.substr(size_t(displs[k]), size_t(lens[k])));
    return out;
  }
  [[noreturn]] void abort(const std::string &msg, int code) override {
    std::fprintf(stderr, "pipeforge-run: rank %d: %s\n", wrank, msg.c_str());
    std::fflush(stderr);
    // A plain non-zero exit, not MPI_Abort: mpirun ends a job whose process
    // exits without MPI_Finalize (killing the other ranks), and it does so
    // also when a node is lost, whereas Open MPI 4.1's mpirun can hang in
    // MPI_Abort's kill path waiting for the lost node's daemon
    // (docs/multi-node.md; test/Runtime/multi-host.test takes a host's link
    // down).
    std::_Exit(code ? code : 1);
  }

private:
  /// ZeRO-3's parameter service: one side of a message between world ranks
  /// on paramComm.
  Expected<RequestId> postWorld(bool send, int worldPeer, int64_t tag,
                                float *buf, int64_t n) {
    if (worldPeer < 0 || worldPeer >= wsize || worldPeer == wrank)
      return Status::error("mpi transport: no other world rank " +
                           std::to_string(worldPeer));
    Req r{send, worldPeer, tag, MPI_REQUEST_NULL, true};
    if (send)
      MPI_Isend(buf, int(n), MPI_FLOAT, worldPeer, foldTag(tag), paramComm,
                &r.req);
    else
      MPI_Irecv(buf, int(n), MPI_FLOAT, worldPeer, foldTag(tag), paramComm,
                &r.req);
    reqs[next] = r;
    return next++;
  }
  struct Req {
    bool send;
    int peer; ///< a pipeline rank, or with `world` a world rank
    int64_t tag;
    MPI_Request req = MPI_REQUEST_NULL;
    bool world = false; ///< ZeRO-3's parameter service (paramComm)
  };
  int wrank = 0, wsize = 1, P = 1, D = 1, E = 1, T = 1, prank = 0, dpi = 0,
      epi = 0, tpi = 0, tagUb = 32767;
  std::vector<std::string> hosts; ///< by world rank
  std::vector<int> pipeWorld;     ///< world rank of each pipeline rank
  /// The tag of allreduce's gather messages (on the data communicators).
  static constexpr int kGatherTag = 30001;
  /// "world rank W on HOST" for rank `k` of communicator `c`.
  std::string memberWhere(MPI_Comm c, int k) const {
    MPI_Group grp, world;
    MPI_Comm_group(c, &grp);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int w = -1;
    MPI_Group_translate_ranks(grp, 1, &k, world, &w);
    MPI_Group_free(&grp);
    MPI_Group_free(&world);
    return "world rank " + std::to_string(w) +
           (w >= 0 && size_t(w) < hosts.size() ? " on " + hosts[size_t(w)]
                                               : "");
  }
  /// " (world rank W on HOST)" for pipeline rank `peer` of this replica.
  std::string peerWhere(int peer) const {
    if (peer < 0 || size_t(peer) >= pipeWorld.size())
      return "";
    int w = pipeWorld[size_t(peer)];
    return " (world rank " + std::to_string(w) +
           (size_t(w) < hosts.size() ? " on " + hosts[size_t(w)] : "") + ")";
  }
  MPI_Comm pipe = MPI_COMM_NULL, dp = MPI_COMM_NULL, ep = MPI_COMM_NULL,
           tp = MPI_COMM_NULL;
  MPI_Comm pipeData = MPI_COMM_NULL, dpData = MPI_COMM_NULL,
           epData = MPI_COMM_NULL, tpData = MPI_COMM_NULL,
           worldData = MPI_COMM_NULL;
  /// ZeRO-3's parameter service: world ranks, its own tags.
  MPI_Comm paramComm = MPI_COMM_NULL;
  MPI_Comm dataComm(Group g) const {
    switch (g) {
    case Group::DataParallel:
      return dpData;
    case Group::Pipeline:
      return pipeData;
    case Group::Expert:
      return epData;
    case Group::Tensor:
      return tpData;
    case Group::World:
      break;
    }
    return worldData;
  }
  std::map<RequestId, Req> reqs;
  RequestId next = 1;

  /// One non-blocking all-to-all: phase 0 counts in flight, 1 data in
  /// flight, 2 done. With `reduce`, an allreduceStart: phase 0 the
  /// reduce-scatter, 1 the all-gather into `buf`.
  struct A2A {
    MPI_Comm comm = MPI_COMM_NULL, dataComm = MPI_COMM_NULL;
    int size = 0, phase = 0, rank = 0;
    bool reduce = false;
    float *buf = nullptr;
    std::vector<int> sc, rc, sd, rd;
    std::vector<float> sb, rb;
    std::vector<std::vector<float>> *recv = nullptr;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  std::map<RequestId, std::unique_ptr<A2A>> colls; ///< under `mu`
  std::mutex mu;
  std::condition_variable cv;
  std::thread progThread;
  bool stopThread = false, threadOk = false;

  /// Posts `a`'s first phase (`post`, on the group's communicator, in
  /// program order under the lock) and hands it to the progress thread.
  template <typename Post>
  RequestId startColl(std::unique_ptr<A2A> a, Post post) {
    RequestId id;
    {
      std::lock_guard<std::mutex> lk(mu);
      post(*a);
      id = next++;
      colls[id] = std::move(a);
      if (threadOk && !progThread.joinable())
        progThread = std::thread([this] { progressLoop(); });
    }
    cv.notify_all();
    return id;
  }
  bool reduceColl(RequestId id) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = colls.find(id);
    return it != colls.end() && it->second->reduce;
  }
  bool isColl(RequestId id) {
    std::lock_guard<std::mutex> lk(mu);
    return colls.count(id) > 0;
  }
  /// Advances every in-flight all-to-all (caller holds `mu`); true when all
  /// are done. The data phases are posted in start order (an all-to-all
  /// whose counts arrived waits for every earlier one to post its data), on
  /// a duplicate of the group's communicator, so every rank issues the same
  /// collective sequence on each communicator whichever thread posts and
  /// whenever the counts arrive.
  bool pump() {
    bool all = true, earlierCounting = false;
    for (auto &[id, a] : colls) {
      if (a->phase == 0 && earlierCounting) {
        all = false;
        continue;
      }
      if (!advance(*a, earlierCounting))
        all = false;
    }
    return all;
  }
  bool advance(A2A &a, bool &counting) {
    if (a.phase == 0 && a.reduce) {
      int done = 0;
      MPI_Test(&a.req, &done, MPI_STATUS_IGNORE);
      if (!done) {
        counting = true;
        return false;
      }
      // This member's chunk summed in member order, in place in `buf`,
      // then every member's sums gathered into `buf`.
      const size_t m = size_t(a.sc[size_t(a.rank)]);
      float *out = a.buf + a.sd[size_t(a.rank)];
      std::copy_n(a.rb.data(), m, out);
      for (int k = 1; k < a.size; ++k) {
        const float *src = a.rb.data() + size_t(k) * m;
        for (size_t e = 0; e < m; ++e)
          out[e] = out[e] + src[e];
      }
      MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, a.buf, a.sc.data(),
                      a.sd.data(), MPI_FLOAT, a.dataComm, &a.req);
      a.phase = 1;
    }
    if (a.phase == 0) {
      int done = 0;
      MPI_Test(&a.req, &done, MPI_STATUS_IGNORE);
      if (!done) {
        counting = true;
        return false;
      }
      int rt = 0;
      for (int k = 0; k < a.size; ++k) {
        a.rd[size_t(k)] = rt;
        rt += a.rc[size_t(k)];
      }
      a.rb.resize(size_t(rt) + 1);
      MPI_Ialltoallv(a.sb.data(), a.sc.data(), a.sd.data(), MPI_FLOAT,
                     a.rb.data(), a.rc.data(), a.rd.data(), MPI_FLOAT,
                     a.dataComm, &a.req);
      a.phase = 1;
    }
    if (a.phase == 1) {
      int done = 0;
      MPI_Test(&a.req, &done, MPI_STATUS_IGNORE);
      if (!done)
        return false;
      a.phase = 2;
    }
    return true;
  }
  void progressLoop() {
    std::unique_lock<std::mutex> lk(mu);
    while (!stopThread) {
      if (pump()) {
        cv.wait(lk);
        continue;
      }
      lk.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lk.lock();
    }
  }
  /// wait() for an all-to-all: test loop with the watchdog, then unpack.
  Status waitColl(RequestId id) {
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    for (long spin = 0;; ++spin) {
      {
        std::lock_guard<std::mutex> lk(mu);
        auto it = colls.find(id);
        if (it == colls.end())
          return Status::ok();
        A2A &a = *it->second;
        pump();
        if (a.phase == 2 && a.reduce) {
          colls.erase(it);
          return Status::ok();
        }
        if (a.phase == 2) {
          auto &recv = *a.recv;
          recv.assign(size_t(a.size), {});
          for (int k = 0; k < a.size; ++k)
            recv[size_t(k)].assign(a.rb.begin() + a.rd[size_t(k)],
                                   a.rb.begin() + a.rd[size_t(k)] +
                                       a.rc[size_t(k)]);
          colls.erase(it);
          return Status::ok();
        }
      }
      if (spin > 200)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if ((spin & 255) == 0 && timeoutS > 0 &&
          std::chrono::duration<double>(Clock::now() - start).count() >
              timeoutS)
        return Status::error("timed out after " + std::to_string(timeoutS) +
                             " s waiting for " +
                             (reduceColl(id) ? "a gradient allreduce"
                                             : "an all-to-all") +
                             ": a peer has died or hangs");
    }
  }

  MPI_Comm comm(Group g) const {
    switch (g) {
    case Group::DataParallel:
      return dp;
    case Group::Pipeline:
      return pipe;
    case Group::Expert:
      return ep;
    case Group::Tensor:
      return tp;
    case Group::World:
      break;
    }
    return MPI_COMM_WORLD;
  }
  Status checkPeer(int peer) const {
    if (pipe == MPI_COMM_NULL)
      return Status::error("mpi transport: setup() not called");
    if (peer < 0 || peer >= P)
      return Status::error("mpi transport: no pipeline rank " +
                           std::to_string(peer));
    return Status::ok();
  }
  /// Test loop with a watchdog: spins briefly, then sleeps in short naps so
  /// oversubscribed ranks leave the core to the one computing.
  Status waitReq(MPI_Request &r, const std::string &what) {
    return waitReq(r, [&] { return what; });
  }
  /// The same with the request's description built only when the watchdog
  /// fires (host names, group translations: not on every wait).
  Status waitReq(MPI_Request &r, const std::function<std::string()> &what) {
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    for (long spin = 0;; ++spin) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (done)
        return Status::ok();
      if (spin > 200)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if ((spin & 255) == 0 && timeoutS > 0 &&
          std::chrono::duration<double>(Clock::now() - start).count() >
              timeoutS)
        return Status::error("timed out after " + std::to_string(timeoutS) +
                             " s waiting for " + what() +
                             ": a peer has died or hangs");
    }
  }
};

} // namespace

std::unique_ptr<Transport> createMpiTransport(int *argc, char ***argv) {
  return std::make_unique<MpiTransport>(argc, argv);
}

} // namespace pipeforge::rt
