//===- ThreadTransport.cpp - Several ranks as threads of one process ------===//
//
// pipeforge-run --local-ranks N: N ranks in one process, one thread each,
// each with its own backend (on a GPU: its own streams on the shared
// device). This is how one machine with one GPU runs a pipeline: NCCL
// refuses two ranks on one device, so messages here are device copies.
//
// Point-to-point: a send is matched to the receive with the same (source,
// destination, tag). The sender marks its data with an event of its backend
// (Backend::recordEvent) instead of waiting for it. The receiving thread
// queues the copy on its backend's communication stream, after that event
// and after its own event taken when the receive was posted (the
// destination's allocation; not its later compute), and gets a completion
// event: the receive's wait() makes the receiver's compute stream
// wait for it (no host block), the send's wait() returns once it has
// happened (then the sender may free its buffer). So on a GPU a transfer
// overlaps with both ranks' compute; on CPU backends events are null and
// the copy is immediate. The copy is queued whenever the receiver calls
// into the transport (irecv, test, wait, progress).
//
// Collectives meet at a rendezvous per group instance: every member
// deposits a pointer, all read each other's data once everyone arrived, and
// nobody leaves (or touches its buffer) before everyone is done reading.
// Sums run in group-rank order, so every member gets the same bits and the
// results equal the MPI transport's (gather to root, sum in rank order).
//
// Every wait has the watchdog of Transport::timeout().
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/ThreadTransport.h"

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/RankGrid.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

namespace pipeforge::rt {
namespace {

using Clock = std::chrono::steady_clock;

struct Hub {
  explicit Hub(int n) : n(n) {}
  const int n;
  RankGrid grid{0, 0, 0}; ///< set up by setupGrid
  std::mutex mu;
  std::condition_variable cv;

  // Point-to-point.
  struct Msg {
    int src, dst;
    int64_t tag, n;
    const float *sbuf = nullptr;
    float *rbuf = nullptr;
    bool sendPosted = false, recvPosted = false, done = false;
    void *ready = nullptr;    ///< sender's event: the data is produced
    void *dstReady = nullptr; ///< receiver's event: its buffer is allocated
    void *copied = nullptr;   ///< receiver's event: the copy has finished
    int released = 0;         ///< sides whose request completed
  };
  std::map<int64_t, Msg> msgs; ///< by request id (send and recv share one)
  std::map<std::tuple<int, int, int64_t>, std::vector<int64_t>> unmatched;
  int64_t nextId = 1;

  // Collectives: one rendezvous per (group kind, group instance).
  struct Meet {
    int arrived = 0, left = 0;
    uint64_t gen = 0;
    std::vector<const void *> slots;
  };
  std::map<std::pair<int, int>, Meet> meets;
};

class ThreadTransport final : public Transport {
public:
  ThreadTransport(std::shared_ptr<Hub> hub, int rank)
      : hub(std::move(hub)), rank(rank) {}
  const char *name() const override { return "threads"; }

  Status setup(int p, int dp) override { return setupGrid(p, dp, 1); }
  Status setupGrid(int p, int dp, int ep) override {
    return setupTensorGrid(p, dp, ep, 1);
  }
  Status setupTensorGrid(int p, int dp, int ep, int tp) override {
    RankGrid g{p, ep, dp, tp, rankDataFastest};
    if (!g.valid() || g.size() != hub->n)
      return Status::error("the program needs " + g.describe() +
                           ", but --local-ranks is " + std::to_string(hub->n));
    std::lock_guard<std::mutex> lock(hub->mu);
    hub->grid = g;
    return Status::ok();
  }
  bool deviceBuffers() const override { return true; }
  void attachBackend(Backend &b) override { be = &b; }

  int worldRank() const override { return rank; }
  int worldSize() const override { return hub->n; }
  int pipelineRank() const override { return coord().pipeline; }
  int pipelineSize() const override { return hub->grid.P; }
  int dpIndex() const override { return coord().replica; }
  int dpSize() const override { return hub->grid.D; }
  int epIndex() const override { return coord().expert; }
  int epSize() const override { return hub->grid.E; }
  int tpIndex() const override { return coord().tensor; }
  int tpSize() const override { return hub->grid.T; }

  Expected<RequestId> isend(int peer, int64_t tag, const float *buf,
                            int64_t n) override {
    if (peer < 0 || peer >= hub->grid.P)
      return Status::error("threads transport: no pipeline rank " +
                           std::to_string(peer));
    return post(/*send=*/true, worldOf(peer), tag, buf, nullptr, n);
  }
  Expected<RequestId> irecv(int peer, int64_t tag, float *buf,
                            int64_t n) override {
    if (peer < 0 || peer >= hub->grid.P)
      return Status::error("threads transport: no pipeline rank " +
                           std::to_string(peer));
    return post(/*send=*/false, worldOf(peer), tag, nullptr, buf, n);
  }
  // ZeRO-3's parameter service: tags below every pipeline message's (which
  // are >= 0), so the two never match.
  Expected<RequestId> isendWorld(int worldPeer, int64_t tag, const float *buf,
                                 int64_t n) override {
    if (worldPeer < 0 || worldPeer >= hub->n || worldPeer == rank)
      return Status::error("threads transport: no other world rank " +
                           std::to_string(worldPeer));
    return post(/*send=*/true, worldPeer, -1 - tag, buf, nullptr, n);
  }
  Expected<RequestId> irecvWorld(int worldPeer, int64_t tag, float *buf,
                                 int64_t n) override {
    if (worldPeer < 0 || worldPeer >= hub->n || worldPeer == rank)
      return Status::error("threads transport: no other world rank " +
                           std::to_string(worldPeer));
    return post(/*send=*/false, worldPeer, -1 - tag, nullptr, buf, n);
  }
  Status wait(RequestId r) override {
    std::unique_lock<std::mutex> lk(hub->mu);
    auto deadline = Clock::now() + timeoutDuration();
    for (;;) {
      if (Status s = deliver(); !s)
        return s;
      auto it = hub->msgs.find(msgOf(r));
      if (it == hub->msgs.end())
        return Status::ok();
      if (complete(r, it->second)) {
        release(r);
        return Status::ok();
      }
      if (timeoutS > 0 && Clock::now() >= deadline) {
        const Hub::Msg &m = it->second;
        return Status::error("threads transport: rank " + std::to_string(rank) +
                             " waited " + timeoutText() + " s for a message " +
                             (m.src == rank ? "to" : "from") + " rank " +
                             std::to_string(m.src == rank ? m.dst : m.src) +
                             " (tag " + std::to_string(m.tag) + ", " +
                             std::to_string(m.n) +
                             " floats): the peer never answered");
      }
      // Matched, copy in flight on the device: nobody will notify, poll.
      if (it->second.done)
        hub->cv.wait_for(lk, std::chrono::microseconds(50));
      else
        hub->cv.wait_for(lk, std::chrono::milliseconds(20));
    }
  }
  bool test(RequestId r) override {
    std::lock_guard<std::mutex> g(hub->mu);
    (void)deliver();
    auto it = hub->msgs.find(msgOf(r));
    if (it == hub->msgs.end())
      return true;
    if (!complete(r, it->second))
      return false;
    release(r);
    return true;
  }
  void progress() override {
    std::lock_guard<std::mutex> g(hub->mu);
    (void)deliver();
  }

  Status allreduce(float *buf, int64_t n, Group g, ReduceOp op) override {
    std::vector<float> out(static_cast<size_t>(n));
    return meet(
        g, buf,
        [&](const std::vector<const void *> &all) {
          for (int64_t i = 0; i < n; ++i) {
            float acc = static_cast<const float *>(all[0])[i];
            for (size_t k = 1; k < all.size(); ++k) {
              float v = static_cast<const float *>(all[k])[i];
              acc = op == ReduceOp::Sum ? acc + v : std::max(acc, v);
            }
            out[size_t(i)] = acc;
          }
        },
        [&] { std::copy(out.begin(), out.end(), buf); });
  }
  Status pairwiseSum(int peer, float *buf, int64_t n) override {
    if (peer < 0 || peer >= hub->grid.P || peer == pipelineRank())
      return Status::error("threads transport: pairwise sum with pipeline "
                           "rank " +
                           std::to_string(peer));
    std::vector<float> out(static_cast<size_t>(n));
    int lo = std::min(peer, pipelineRank()),
        hi = std::max(peer, pipelineRank());
    int pipeline = hub->grid.pipelineGroup(coord()).instance;
    // A pair's own rendezvous: kind 100 + lo, instance (pipeline, hi).
    return meetAt(
        {100 + lo, pipeline * hub->grid.P + hi}, 2,
        pipelineRank() == lo ? 0 : 1, buf,
        [&](const std::vector<const void *> &all) {
          auto *a = static_cast<const float *>(all[0]);
          auto *b = static_cast<const float *>(all[1]);
          for (int64_t i = 0; i < n; ++i)
            out[size_t(i)] = a[i] + b[i];
        },
        [&] { std::copy(out.begin(), out.end(), buf); });
  }
  Status allToAll(const std::vector<std::vector<float>> &send,
                  std::vector<std::vector<float>> &recv, Group g) override {
    auto [kind, inst, size, index] = groupOf(g);
    (void)kind, (void)inst;
    if (int(send.size()) != size)
      return Status::error("allToAll: " + std::to_string(send.size()) +
                           " parts for a group of " + std::to_string(size));
    std::vector<std::vector<float>> got(static_cast<size_t>(size));
    Status s = meet(
        g, &send,
        [&](const std::vector<const void *> &all) {
          for (int k = 0; k < size; ++k)
            got[size_t(k)] =
                (*static_cast<const std::vector<std::vector<float>> *>(
                    all[size_t(k)]))[size_t(index)];
        },
        [] {});
    if (s)
      recv = std::move(got);
    return s;
  }
  Status barrier(Group g) override {
    return meet(
        g, nullptr, [](const std::vector<const void *> &) {}, [] {});
  }
  Expected<std::vector<std::string>>
  gatherStrings(const std::string &mine) override {
    std::vector<std::string> all;
    Status s = meet(
        Group::World, &mine,
        [&](const std::vector<const void *> &slots) {
          if (rank != 0)
            return;
          for (const void *p : slots)
            all.push_back(*static_cast<const std::string *>(p));
        },
        [] {});
    if (!s)
      return s;
    return all;
  }
  [[noreturn]] void abort(const std::string &msg, int code) override {
    std::fprintf(stderr, "pipeforge-run: rank %d: %s\n", rank, msg.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(code ? code : 1);
  }

private:
  std::shared_ptr<Hub> hub;
  const int rank;
  Backend *be = nullptr;

  /// The watchdog as a duration: capped at 10^6 s (the driver's range for
  /// --comm-timeout) so that no conversion or addition overflows.
  std::chrono::milliseconds timeoutDuration() const {
    double s = timeoutS > 0 && timeoutS < 1e6 ? timeoutS : 1e6;
    return std::chrono::milliseconds(int64_t(s * 1000));
  }
  /// The watchdog in seconds for messages (never a wrapped int).
  std::string timeoutText() const {
    char b[32];
    std::snprintf(b, sizeof b, "%g", timeoutS);
    return b;
  }
  int worldOf(int pipelinePeer) const {
    RankCoord c = coord();
    c.pipeline = pipelinePeer;
    return hub->grid.worldRank(c);
  }

  /// Posts one side of a message; the other side may already be waiting.
  Expected<RequestId> post(bool send, int peer, int64_t tag, const float *sb,
                           float *rb, int64_t n) {
    std::lock_guard<std::mutex> g(hub->mu);
    int src = send ? rank : peer, dst = send ? peer : rank;
    auto &queue = hub->unmatched[{src, dst, tag}];
    // The oldest message of this key still missing this side.
    for (int64_t id : queue) {
      Hub::Msg &m = hub->msgs[id];
      if (send ? m.sendPosted : m.recvPosted)
        continue;
      if (m.n != n)
        return Status::error(
            "threads transport: message " + std::to_string(src) + " -> " +
            std::to_string(dst) + " tag " + std::to_string(tag) + " has " +
            std::to_string(send ? m.n : n) + " floats sent but " +
            std::to_string(send ? n : m.n) + " expected");
      (send ? m.sendPosted : m.recvPosted) = true;
      if (send) {
        m.sbuf = sb;
        m.ready = be ? be->recordEvent() : nullptr;
      } else {
        m.rbuf = rb;
        m.dstReady = be ? be->recordEvent() : nullptr;
      }
      if (Status s = deliver(); !s)
        return s;
      hub->cv.notify_all();
      return sideId(id, send);
    }
    int64_t id = hub->nextId;
    hub->nextId += 2;
    Hub::Msg m{src, dst, tag, n};
    (send ? m.sendPosted : m.recvPosted) = true;
    m.sbuf = sb;
    m.rbuf = rb;
    if (be)
      (send ? m.ready : m.dstReady) = be->recordEvent();
    hub->msgs[id] = m;
    queue.push_back(id);
    if (Status s = deliver(); !s)
      return s;
    return sideId(id, send);
  }
  /// The send side of message `id` (odd) is `id`, the receive side `id + 1`.
  static RequestId sideId(int64_t id, bool send) { return send ? id : id + 1; }
  static int64_t msgOf(RequestId r) { return r % 2 == 1 ? r : r - 1; }

  /// Copies every matched message addressed to this rank (lock held).
  Status deliver() {
    bool any = false;
    for (auto it = hub->unmatched.begin(); it != hub->unmatched.end();) {
      auto &[key, queue] = *it;
      if (std::get<1>(key) != rank) {
        ++it;
        continue;
      }
      while (!queue.empty()) {
        Hub::Msg &m = hub->msgs[queue.front()];
        if (!m.sendPosted || !m.recvPosted)
          break;
        if (be) {
          m.copied = be->copyOnCommStream(m.rbuf, m.sbuf, m.n * 4, m.ready,
                                          m.dstReady);
          be->releaseEvent(m.ready); // the copy's waits hold on to them
          be->releaseEvent(m.dstReady);
          m.ready = m.dstReady = nullptr;
        } else if (m.n > 0) {
          std::memcpy(m.rbuf, m.sbuf, size_t(m.n) * 4);
        }
        m.done = true;
        any = true;
        queue.erase(queue.begin());
      }
      it = queue.empty() ? hub->unmatched.erase(it) : std::next(it);
    }
    if (any)
      hub->cv.notify_all();
    return Status::ok();
  }
  /// Forgets one side of a completed message; the record goes with the
  /// second side.
  void release(RequestId r) {
    auto it = hub->msgs.find(msgOf(r));
    if (it != hub->msgs.end() && ++it->second.released == 2) {
      if (be)
        be->releaseEvent(it->second.copied);
      hub->msgs.erase(it);
    }
  }
  /// Whether this side of a message is complete (lock held). The receive:
  /// the copy is queued, and this rank's compute stream now waits for it.
  /// The send: the copy has finished reading the buffer. Events are
  /// process-wide handles, so each rank queries and frees them with its own
  /// backend (the receiver's may be gone by then: its thread has finished).
  bool complete(RequestId r, Hub::Msg &m) {
    if (!m.done)
      return false;
    if (r % 2 == 0) {
      if (be)
        be->waitEvent(m.copied);
      return true;
    }
    return !be || be->eventDone(m.copied);
  }

  /// (kind, instance, size, index) of this rank's group `g`.
  std::tuple<int, int, int, int> groupOf(Group g) const {
    const RankGrid &grid = hub->grid;
    RankCoord c = coord();
    auto as = [](int kind, GroupPosition pos) {
      return std::make_tuple(kind, pos.instance, pos.size, pos.index);
    };
    switch (g) {
    case Group::Pipeline:
      return as(0, grid.pipelineGroup(c));
    case Group::DataParallel:
      return as(1, grid.dataParallelGroup(c));
    case Group::Expert:
      return as(2, grid.expertGroup(c));
    case Group::Tensor:
      return as(4, grid.tensorGroup(c));
    case Group::World:
      break;
    }
    return {3, 0, hub->n, rank};
  }

  RankCoord coord() const { return hub->grid.coordOf(rank); }

  template <typename Read, typename Write>
  Status meet(Group g, const void *mine, Read read, Write write) {
    auto [kind, inst, size, index] = groupOf(g);
    return meetAt({kind, inst}, size, index, mine, read, write);
  }
  /// Everyone deposits `mine`; once all `size` members arrived each runs
  /// read(all slots); once all have read, each runs write() and leaves.
  template <typename Read, typename Write>
  Status meetAt(std::pair<int, int> key, int size, int index, const void *mine,
                Read read, Write write) {
    std::unique_lock<std::mutex> lk(hub->mu);
    auto deadline = Clock::now() + timeoutDuration();
    auto timedOut = [&](const char *what) {
      return Status::error("threads transport: rank " + std::to_string(rank) +
                           " waited " + timeoutText() + " s in a collective (" +
                           what + "): a peer never arrived");
    };
    Hub::Meet &m = hub->meets[key];
    // A previous round still draining: wait until everyone left it.
    while (m.left != 0) {
      if (timeoutS > 0 && Clock::now() >= deadline)
        return timedOut("previous round");
      hub->cv.wait_for(lk, std::chrono::milliseconds(20));
      (void)deliver();
    }
    if (m.slots.size() != size_t(size))
      m.slots.assign(size_t(size), nullptr);
    m.slots[size_t(index)] = mine;
    uint64_t gen = m.gen;
    if (++m.arrived == size) {
      m.arrived = 0;
      m.left = size;
      ++m.gen;
      hub->cv.notify_all();
    }
    while (m.gen == gen) {
      if (timeoutS > 0 && Clock::now() >= deadline)
        return timedOut("arrival");
      hub->cv.wait_for(lk, std::chrono::milliseconds(20));
      (void)deliver(); // a peer may be waiting for our receive copies
    }
    std::vector<const void *> slots = m.slots;
    lk.unlock();
    read(slots);
    lk.lock();
    // Second phase: nobody writes its buffer before all have read.
    if (--m.left == 0)
      hub->cv.notify_all();
    while (m.left != 0) {
      if (timeoutS > 0 && Clock::now() >= deadline)
        return timedOut("completion");
      hub->cv.wait_for(lk, std::chrono::milliseconds(20));
    }
    lk.unlock();
    write();
    return Status::ok();
  }
};

} // namespace

std::vector<std::unique_ptr<Transport>> createThreadTransports(int n) {
  auto hub = std::make_shared<Hub>(n);
  std::vector<std::unique_ptr<Transport>> r;
  for (int i = 0; i < n; ++i)
    r.push_back(std::make_unique<ThreadTransport>(hub, i));
  return r;
}

} // namespace pipeforge::rt
