//===- Transport.h - Communication between ranks ----------------*- C++ -*-===//
//
// What the executor needs from the network. Ranks form a grid: pipeline x
// data parallel, world rank = dpIndex * P + pipelineRank. Point-to-point
// peers are pipeline ranks within this rank's data-parallel replica.
//
// Point-to-point messages are non-blocking: isend/irecv return a request,
// wait() completes it (with a watchdog: a peer that never answers ends the
// job with a message instead of hanging), progress() lets outstanding
// requests advance between compute actions.
//
// Implementations: LocalTransport (one process, --ranks 1; self-messages
// through a mailbox) and MpiTransport (runtime/lib/mpi, OpenMPI).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_TRANSPORT_H
#define PIPEFORGE_RT_TRANSPORT_H

#include "pipeforge/rt/Program.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

/// Collective groups.
enum class Group : uint8_t {
  DataParallel, ///< the replicas of this pipeline rank (size dp)
  Pipeline,     ///< the pipeline ranks of this replica (size P)
  World         ///< everyone
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

  virtual int worldRank() const = 0;
  virtual int worldSize() const = 0;
  virtual int pipelineRank() const = 0;
  virtual int pipelineSize() const = 0;
  virtual int dpIndex() const = 0;
  virtual int dpSize() const = 0;

  /// Non-blocking point-to-point within the replica; `peer` is a pipeline
  /// rank. The buffer must stay alive and untouched until wait() returns.
  virtual Expected<RequestId> isend(int peer, int64_t tag, const float *buf,
                                    int64_t n) = 0;
  virtual Expected<RequestId> irecv(int peer, int64_t tag, float *buf,
                                    int64_t n) = 0;
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
  /// In-place buf = buf + peer's buf (pipeline peer), both sides get the
  /// same bits (DualPipe GradReduce).
  virtual Status pairwiseSum(int peer, float *buf, int64_t n) = 0;
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
};

/// One process: P = dp = 1.
std::unique_ptr<Transport> createLocalTransport();

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_TRANSPORT_H
