//===- Transport.h - Communication between ranks ----------------*- C++ -*-===//
//
// What the executor needs from the network. Ranks form a grid: tensor x
// pipeline x expert x data parallel, world rank = ((dpIndex * E + epIndex)
// * P + pipelineRank) * T + tpIndex (RankGrid.h; E = T = 1 without expert
// and tensor parallelism). Point-to-point peers are pipeline ranks within
// this rank's (data-parallel, expert, tensor) slot.
//
// Point-to-point messages are non-blocking: isend/irecv return a request,
// wait() completes it (with a watchdog: a peer that never answers ends the
// job with a message instead of hanging), progress() lets outstanding
// requests advance between compute actions.
//
// Implementations: LocalTransport (one process, --ranks 1; self-messages
// through a mailbox) and MpiTransport (runtime/transports/mpi, OpenMPI).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_TRANSPORT_H
#define PIPEFORGE_RT_TRANSPORT_H

#include "pipeforge/rt/Program.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

class Backend;

/// Collective groups.
enum class Group : uint8_t {
  DataParallel, ///< the replicas of this pipeline rank (size dp)
  Pipeline,     ///< the pipeline ranks of this replica (size P)
  World,        ///< everyone
  Expert,       ///< the expert-parallel group of this rank (size E): same
                ///< pipeline rank and data-parallel index
  Tensor        ///< the tensor-parallel group of this rank (size T): same
                ///< pipeline rank, expert index and replica
};

enum class ReduceOp : uint8_t { Sum, Max };

using RequestId = int64_t;

/// The identity of one point-to-point message: payload of the work item's
/// (stage, mb, copy) (see sched::Action::send).
struct MessageId {
  sched::Payload payload = sched::Payload::Activation;
  int32_t stage = 0, mb = 0;
  int32_t copy = 0;
};

/// A tag unique among the messages of one step: (copy, payload, stage, mb);
/// a transport folds it into its tag range.
/// `numStages` per copy, `numMicrobatches` per copy.
int64_t messageTag(const MessageId &m, int numStages, int numMicrobatches);

class Transport {
public:
  virtual ~Transport() = default;
  virtual const char *name() const = 0;

  /// Arranges the ranks as `pipelineRanks` x `dataParallel`; an error (with
  /// the numbers) when the world size does not match.
  virtual Status setup(int pipelineRanks, int dataParallel) = 0;

  /// Whether isend/irecv take the backend's buffers (device memory) as they
  /// are. When false and the backend is not host-visible, the executor
  /// stages each message through host memory. Collectives (allreduce,
  /// pairwiseSum, allToAll) always take host memory.
  virtual bool deviceBuffers() const { return false; }
  /// The backend whose buffers this rank passes to isend/irecv (called once,
  /// before the first message): a device transport orders its transfers
  /// after the work queued on the backend's compute stream.
  virtual void attachBackend(Backend &be) { (void)be; }
  /// The same with an expert-parallel group of `expertParallel` ranks
  /// (world = P x E x D). Default: only E = 1.
  virtual Status setupGrid(int pipelineRanks, int dataParallel,
                           int expertParallel) {
    if (expertParallel == 1)
      return setup(pipelineRanks, dataParallel);
    return Status::error(std::string("the ") + name() +
                         " transport has no expert parallelism (--ep " +
                         std::to_string(expertParallel) + ")");
  }

  /// The same with a tensor-parallel group of `tensorParallel` ranks
  /// (world = T x P x E x D, RankGrid.h). Default: only T = 1.
  virtual Status setupTensorGrid(int pipelineRanks, int dataParallel,
                                 int expertParallel, int tensorParallel) {
    if (tensorParallel == 1)
      return setupGrid(pipelineRanks, dataParallel, expertParallel);
    return Status::error(std::string("the ") + name() +
                         " transport has no tensor parallelism (--tp " +
                         std::to_string(tensorParallel) + ")");
  }

  /// The rank layout (RankGrid.h): false pp-fastest (the default), true
  /// dp-fastest. Call before setup*.
  virtual void setRankLayout(bool dataFastest) {
    rankDataFastest = dataFastest;
  }
  bool rankLayoutDataFastest() const { return rankDataFastest; }

  virtual int worldRank() const = 0;
  virtual int worldSize() const = 0;
  virtual int pipelineRank() const = 0;
  virtual int pipelineSize() const = 0;
  virtual int dpIndex() const = 0;
  virtual int dpSize() const = 0;
  /// This rank's index in its expert-parallel group, and the group's size.
  virtual int epIndex() const { return 0; }
  virtual int epSize() const { return 1; }
  /// This rank's index in its tensor-parallel group, and the group's size.
  virtual int tpIndex() const { return 0; }
  virtual int tpSize() const { return 1; }

  /// Non-blocking point-to-point within the replica; `peer` is a pipeline
  /// rank. The buffer must stay alive and untouched until wait() returns.
  virtual Expected<RequestId> isend(int peer, int64_t tag, const float *buf,
                                    int64_t n) = 0;
  virtual Expected<RequestId> irecv(int peer, int64_t tag, float *buf,
                                    int64_t n) = 0;
  /// ZeRO-3's parameter service (docs/optimizer.md, "ZeRO-3"): non-blocking
  /// point-to-point between any two world ranks, in a tag space of its own
  /// (it never matches a pipeline message). Completed by wait()/test() as
  /// isend/irecv. Default: unavailable (an error naming the transport).
  virtual Expected<RequestId> isendWorld(int worldPeer, int64_t tag,
                                         const float *buf, int64_t n) {
    (void)worldPeer, (void)tag, (void)buf, (void)n;
    return Status::error(std::string("the ") + name() +
                         " transport has no parameter service (ZeRO-3)");
  }
  virtual Expected<RequestId> irecvWorld(int worldPeer, int64_t tag,
                                         float *buf, int64_t n) {
    return isendWorld(worldPeer, tag, buf, n);
  }
  /// Whether isendWorld/irecvWorld take the backend's buffers as they are
  /// (else the executor stages them through host memory).
  virtual bool worldDeviceBuffers() const { return deviceBuffers(); }
  /// Blocks until the request completes (watchdog: an error after the
  /// timeout naming the request).
  virtual Status wait(RequestId r) = 0;
  /// True when the request has completed (then it is released).
  virtual bool test(RequestId r) = 0;
  /// Lets outstanding requests advance (call between compute actions).
  virtual void progress() = 0;

  /// In-place allreduce over a group (fixed order per implementation).
  virtual Status allreduce(float *buf, int64_t n, Group g,
                           ReduceOp op = ReduceOp::Sum) = 0;
  /// Non-blocking in-place sum over group `g` (the overlapped gradient
  /// reduction): posted now, complete when wait(handle) returns, with the
  /// bits of allreduce(buf, n, g). `buf` must stay alive and untouched until
  /// then. Every member of the group starts its allreduces and all-to-alls
  /// in the same order (MPI collective ordering). Default: the blocking
  /// allreduce, handle 0 (wait(0) returns at once).
  virtual Expected<RequestId> allreduceStart(float *buf, int64_t n, Group g) {
    if (Status s = allreduce(buf, n, g); !s)
      return s;
    return RequestId(0);
  }
  /// Collectives on the backend's device memory, ordered after the work
  /// queued on the backend's compute stream, which waits for the result:
  /// gradients and tensor-parallel activations need not cross to the host.
  /// Only where deviceCollectives(); the executor stages through the host
  /// collectives elsewhere.
  ///   allreduceDevice: in-place sum over the data-parallel, expert or
  ///     tensor group;
  ///   allGatherDevice: every member's `n` floats into `out` (size n x the
  ///     group, member-major), tensor group;
  ///   reduceScatterDevice: `in` holds one block of `n` floats per member
  ///     (member-major); `out` (n) gets this member's block summed over the
  ///     group, tensor group.
  /// NCCL implements them on the GPU. The defaults serve a backend whose
  /// "device" memory the host can address (cpu-device: the driver's
  /// --device-collectives passes Backend::hostAddress to
  /// setHostAddressableDevice): the host collectives run in place on it, so
  /// the executor's device path runs without a GPU, with the bits of the
  /// staged path (allreduce and the all-to-all sum in member order).
  virtual bool deviceCollectives() const { return bool(hostAddress); }
  using HostAddress = std::function<float *(const float *)>;
  void setHostAddressableDevice(HostAddress toHost) {
    hostAddress = std::move(toHost);
  }
  virtual Status allreduceDevice(float *buf, int64_t n, Group g);
  /// allreduceStart on device memory: ordered after the work queued on the
  /// compute stream; wait(handle) orders the compute stream after the sum.
  /// Default (host-addressable device memory): allreduceStart in place.
  virtual Expected<RequestId> allreduceDeviceStart(float *buf, int64_t n,
                                                   Group g);
  virtual Status allGatherDevice(const float *in, float *out, int64_t n,
                                 Group g);
  virtual Status reduceScatterDevice(const float *in, float *out, int64_t n,
                                     Group g);
  /// The same two on host memory, through allToAll (the reduce-scatter
  /// sums in member order): the staged path and the defaults above.
  Status allGatherHost(const float *in, float *out, int64_t n, Group g);
  Status reduceScatterHost(const float *in, float *out, int64_t n, Group g);
  /// In-place buf = buf + peer's buf (pipeline peer), both sides get the
  /// same bits (DualPipe GradReduce).
  virtual Status pairwiseSum(int peer, float *buf, int64_t n) = 0;
  /// All-to-all with variable sizes over group `g` (blocking, with the
  /// watchdog): send[k] goes to group rank k, recv[k] is what group rank k
  /// sent to this rank (sized by the transport). `send` has one entry per
  /// group rank. Default: a group of one (recv = send).
  virtual Status allToAll(const std::vector<std::vector<float>> &send,
                          std::vector<std::vector<float>> &recv, Group g) {
    (void)g;
    if (send.size() != 1)
      return Status::error("allToAll: the group has one rank");
    recv = send;
    return Status::ok();
  }
  /// Non-blocking all-to-all (same data movement as allToAll): posts the
  /// exchange and returns a handle; `recv` (which must stay alive) is filled
  /// when wait(handle) returns. The send data is copied at the call. Every
  /// rank of the group must start its all-to-alls in the same order (MPI
  /// collective ordering). Default: the blocking allToAll, handle 0 (wait(0)
  /// returns at once).
  virtual Expected<RequestId>
  allToAllStart(const std::vector<std::vector<float>> &send,
                std::vector<std::vector<float>> &recv, Group g) {
    if (Status s = allToAll(send, recv, g); !s)
      return s;
    return RequestId(0);
  }
  /// Whether all-to-alls started with allToAllStart advance without calls
  /// into the transport (a progress thread); otherwise the caller should
  /// call progress() between compute kernels.
  virtual bool asyncProgress() const { return false; }
  virtual Status barrier(Group g) = 0;
  /// Gathers one string per world rank on world rank 0 (empty elsewhere).
  virtual Expected<std::vector<std::string>>
  gatherStrings(const std::string &mine) = 0;
  /// Ends the whole job with a message and a non-zero exit.
  [[noreturn]] virtual void abort(const std::string &msg, int code = 1) = 0;

  /// Seconds a wait may block before the watchdog fires (0: forever).
  void setTimeout(double s) { timeoutS = s; }
  double timeout() const { return timeoutS; }

protected:
  double timeoutS = 120.0;
  bool rankDataFastest = false;
  HostAddress hostAddress; ///< device pointer -> host address (emulation)
};

// The device collectives on host-addressable "device" memory (cpu-device):
// the host collectives in place, in the member order they sum in.
inline Status noDeviceCollectives(const char *what) {
  return Status::error(std::string("this transport has no device ") + what);
}

inline Status Transport::allreduceDevice(float *buf, int64_t n, Group g) {
  if (!hostAddress)
    return noDeviceCollectives("allreduce");
  return allreduce(hostAddress(buf), n, g);
}

inline Expected<RequestId> Transport::allreduceDeviceStart(float *buf,
                                                          int64_t n, Group g) {
  if (!hostAddress)
    return noDeviceCollectives("allreduce");
  return allreduceStart(hostAddress(buf), n, g);
}

inline Status Transport::allGatherHost(const float *in, float *out, int64_t n,
                                       Group g) {
  const int T = g == Group::Tensor ? tpSize() : 0;
  if (T < 1)
    return Status::error("an all-gather runs over the tensor group");
  std::vector<std::vector<float>> send(static_cast<size_t>(T),
                                       std::vector<float>(in, in + n)),
      recv;
  if (Status s = allToAll(send, recv, g); !s)
    return s;
  for (int r = 0; r < T; ++r) {
    if (recv.size() != size_t(T) || int64_t(recv[size_t(r)].size()) != n)
      return Status::error("all-gather: member " + std::to_string(r) +
                           " sent the wrong size");
    std::memcpy(out + r * n, recv[size_t(r)].data(), size_t(n) * 4);
  }
  return Status::ok();
}

inline Status Transport::reduceScatterHost(const float *in, float *out,
                                           int64_t n, Group g) {
  const int T = g == Group::Tensor ? tpSize() : 0;
  if (T < 1)
    return Status::error("a reduce-scatter runs over the tensor group");
  std::vector<std::vector<float>> send(static_cast<size_t>(T)), recv;
  for (int r = 0; r < T; ++r)
    send[size_t(r)].assign(in + r * n, in + (r + 1) * n);
  if (Status s = allToAll(send, recv, g); !s)
    return s;
  for (int r = 0; r < T; ++r)
    if (recv.size() != size_t(T) || int64_t(recv[size_t(r)].size()) != n)
      return Status::error("reduce-scatter: member " + std::to_string(r) +
                           " sent the wrong size");
  std::memcpy(out, recv[0].data(), size_t(n) * 4);
  for (int r = 1; r < T; ++r)
    for (int64_t i = 0; i < n; ++i)
      out[i] += recv[size_t(r)][size_t(i)];
  return Status::ok();
}

inline Status Transport::allGatherDevice(const float *in, float *out,
                                         int64_t n, Group g) {
  if (!hostAddress)
    return noDeviceCollectives("all-gather");
  return allGatherHost(hostAddress(in), hostAddress(out), n, g);
}

inline Status Transport::reduceScatterDevice(const float *in, float *out,
                                             int64_t n, Group g) {
  if (!hostAddress)
    return noDeviceCollectives("reduce-scatter");
  return reduceScatterHost(hostAddress(in), hostAddress(out), n, g);
}

/// One process: P = dp = 1.
std::unique_ptr<Transport> createLocalTransport();

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_TRANSPORT_H
