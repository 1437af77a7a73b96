//===- LocalTransport.cpp - Single-process transport ----------------------===//
//
// --ranks 1: collectives are identities; a message to oneself goes through a
// mailbox matched by tag (the schedule never needs one, but it works).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Transport.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace pipeforge::rt {

int64_t messageTag(const MessageId &m, int numStages, int numMicrobatches) {
  int64_t t = ((int64_t(m.copy) * 3 + int64_t(m.payload)) * numStages +
               m.stage) *
                  numMicrobatches +
              m.mb;
  return t;
}

namespace {

class LocalTransport final : public Transport {
public:
  const char *name() const override { return "local"; }
  Status setup(int p, int dp) override {
    if (p != 1 || dp != 1)
      return Status::error(
          "the program needs " + std::to_string(p) + " pipeline ranks x " +
          std::to_string(dp) +
          " data-parallel replicas, but this is a single process; run it "
          "with mpirun -np " +
          std::to_string(p * dp));
    return Status::ok();
  }
  int worldRank() const override { return 0; }
  int worldSize() const override { return 1; }
  int pipelineRank() const override { return 0; }
  int pipelineSize() const override { return 1; }
  int dpIndex() const override { return 0; }
  int dpSize() const override { return 1; }

  struct Req {
    bool send;
    int64_t tag;
    const float *sbuf;
    float *rbuf;
    int64_t n;
    bool done = false;
  };
  std::map<RequestId, Req> reqs;
  RequestId next = 1;

  void match() {
    for (auto &[id, r] : reqs) {
      if (r.done || r.send)
        continue;
      for (auto &[id2, s] : reqs)
        if (s.send && !s.done && s.tag == r.tag && s.n == r.n) {
          std::memcpy(r.rbuf, s.sbuf, size_t(r.n) * 4);
          r.done = s.done = true;
          break;
        }
    }
  }
  Expected<RequestId> isend(int peer, int64_t tag, const float *buf,
                            int64_t n) override {
    if (peer != 0)
      return Status::error("local transport: no peer " + std::to_string(peer));
    reqs[next] = Req{true, tag, buf, nullptr, n};
    match();
    return next++;
  }
  Expected<RequestId> irecv(int peer, int64_t tag, float *buf,
                            int64_t n) override {
    if (peer != 0)
      return Status::error("local transport: no peer " + std::to_string(peer));
    reqs[next] = Req{false, tag, nullptr, buf, n};
    match();
    return next++;
  }
  Status wait(RequestId r) override {
    match();
    auto it = reqs.find(r);
    if (it == reqs.end())
      return Status::ok();
    if (!it->second.done)
      return Status::error("local transport: message with tag " +
                           std::to_string(it->second.tag) +
                           " can never complete (deadlock)");
    // A completed send stays until its receive matched; keep it simple.
    reqs.erase(it);
    return Status::ok();
  }
  bool test(RequestId r) override {
    match();
    auto it = reqs.find(r);
    if (it == reqs.end())
      return true;
    if (!it->second.done)
      return false;
    reqs.erase(it);
    return true;
  }
  void progress() override { match(); }
  Status allreduce(float *, int64_t, Group, ReduceOp) override {
    return Status::ok();
  }
  Status pairwiseSum(int peer, float *buf, int64_t n) override {
    if (peer != 0)
      return Status::error("local transport: no peer " + std::to_string(peer));
    for (int64_t i = 0; i < n; ++i)
      buf[i] = buf[i] + buf[i];
    return Status::ok();
  }
  Status barrier(Group) override { return Status::ok(); }
  Expected<std::vector<std::string>>
  gatherStrings(const std::string &mine) override {
    return std::vector<std::string>{mine};
  }
  [[noreturn]] void abort(const std::string &msg, int code) override {
    std::fprintf(stderr, "pipeforge-run: %s\n", msg.c_str());
    std::fflush(stderr);
    std::_Exit(code ? code : 1);
  }
};

} // namespace

std::unique_ptr<Transport> createLocalTransport() {
  return std::make_unique<LocalTransport>();
}

} // namespace pipeforge::rt
