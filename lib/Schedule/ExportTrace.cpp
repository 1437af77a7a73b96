//===- ExportTrace.cpp - Chrome / Perfetto trace of a simulated schedule --===//
//
// Trace-event JSON (the "JSON Object Format"): pid = rank, tid 0 = compute,
// tid 1 = comm; "X" complete events, "M" metadata names, and flow events
// "s" (at the producer) / "f" (at the consumer, "bp":"e") for messages.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Export.h"

#include "Deps.h"

#include <nlohmann/json.hpp>

#include <map>

namespace pipeforge::sched {

using Json = nlohmann::ordered_json;

namespace {
constexpr int kComputeTid = 0, kCommTid = 1;

Json meta(const char *what, int pid, int tid, const std::string &name) {
  Json j;
  j["name"] = what;
  j["ph"] = "M";
  j["pid"] = pid;
  j["tid"] = tid;
  j["args"] = Json{{"name", name}};
  return j;
}

Json flow(const char *ph, uint64_t id, const std::string &name, int pid,
          int tid, double ts) {
  Json j;
  j["name"] = name;
  j["cat"] = "message";
  j["ph"] = ph;
  j["id"] = id;
  j["pid"] = pid;
  j["tid"] = tid;
  j["ts"] = ts;
  if (ph[0] == 'f')
    j["bp"] = "e";
  return j;
}
} // namespace

std::string exportTrace(const Schedule &s, const SimResult &sim,
                        const TraceOptions &opts) {
  double k = opts.usPerUnit;
  Json events = Json::array();
  for (int r = 0; r < s.numRanks(); ++r) {
    events.push_back(meta("process_name", r, 0, "rank " + std::to_string(r)));
    Json sort = meta("process_sort_index", r, 0, "");
    sort["args"] = Json{{"sort_index", r}};
    events.push_back(sort);
    events.push_back(meta("thread_name", r, kComputeTid, "compute"));
    events.push_back(meta("thread_name", r, kCommTid, "comm"));
  }
  // FIFO per channel: send times, matched with receive ends below.
  std::map<std::pair<int, int>, std::vector<std::pair<double, std::string>>>
      sends;
  std::map<std::pair<int, int>, size_t> recvSeen;
  // Compute-only: producer end per work, for dependency flows.
  detail::WorkIndex idx(s);
  std::vector<double> endOf(idx.size(), -1);
  std::vector<int> rankOf(idx.size(), -1);
  for (const Interval &iv : sim.intervals) {
    const Action &a = s.programs[iv.rank][iv.actionIndex];
    if (a.kind == ActionKind::Send)
      sends[{iv.rank, a.peer}].push_back({iv.start * k, toString(a.work)});
    if (a.isCompute())
      for (const Work *w : detail::membersOf(a)) {
        if (idx.inRange(*w)) {
          endOf[idx.id(*w)] = iv.end;
          rankOf[idx.id(*w)] = iv.rank;
        }
      }
  }
  uint64_t flowId = 0;
  for (const Interval &iv : sim.intervals) {
    const Action &a = s.programs[iv.rank][iv.actionIndex];
    Json e;
    e["name"] = toString(a);
    e["cat"] = a.isComm()          ? "comm"
               : a.isParamGather() ? "gather"
               : a.isStashCopy()   ? "offload"
                                   : "compute";
    e["ph"] = "X";
    e["ts"] = iv.start * k;
    e["dur"] = (iv.end - iv.start) * k;
    e["pid"] = iv.rank;
    e["tid"] = a.isCompute() ? kComputeTid : kCommTid;
    Json args;
    if (a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap) {
      args["kind"] = a.kind == ActionKind::Overlap ? "FB"
                                                   : workKindName(a.work.kind);
      args["stage"] = a.work.stage;
      args["mb"] = a.work.mb;
      if (s.placement.numCopies > 1)
        args["copy"] = a.work.copy;
    } else if (a.isStashCopy()) {
      args["stash"] = toString(a.work);
    } else if (a.isParamGather()) {
      args["stage"] = a.work.stage;
      if (s.placement.numCopies > 1)
        args["copy"] = a.work.copy;
    } else if (a.kind != ActionKind::GradReduce) {
      args["payload"] = payloadName(a.payload);
    }
    if (a.isComm())
      args["peer"] = a.peer;
    e["args"] = std::move(args);
    events.push_back(std::move(e));

    if (a.kind == ActionKind::Recv) {
      auto &q = sends[{a.peer, iv.rank}];
      size_t &n = recvSeen[{a.peer, iv.rank}];
      if (n < q.size()) {
        ++flowId;
        events.push_back(flow("s", flowId, q[n].second, a.peer, kCommTid,
                              q[n].first));
        events.push_back(
            flow("f", flowId, q[n].second, iv.rank, kCommTid, iv.end * k));
      }
      ++n;
    }
    if (!s.hasComm && a.isCompute()) {
      for (const Work *w : detail::membersOf(a)) {
        std::optional<Work> nominal =
            detail::nominalProducer(*w, s.placement.numStages);
        if (!nominal || !idx.inRange(*nominal))
          continue;
        Work prod = *nominal;
        if (rankOf[idx.id(prod)] < 0 && prod.kind == WorkKind::B)
          prod.kind = WorkKind::BW;
        int src = rankOf[idx.id(prod)];
        if (src < 0 || src == iv.rank)
          continue;
        ++flowId;
        double t = endOf[idx.id(prod)] * k;
        events.push_back(
            flow("s", flowId, toString(prod), src, kComputeTid, t - 1e-3));
        events.push_back(flow("f", flowId, toString(prod), iv.rank,
                              kComputeTid, iv.start * k));
      }
    }
  }
  // Communication model: all-to-alls, P2P transfers and ZeRO-3's
  // parameter gathers on the comm thread, exposed waits on the compute
  // thread (nested in the action).
  for (const CommInterval &ci : sim.commIntervals) {
    bool exposed = ci.kind == CommInterval::ExposedA2A ||
                   ci.kind == CommInterval::ExposedP2P;
    Json e;
    std::string name;
    switch (ci.kind) {
    case CommInterval::A2A:
      name = std::string("a2a ") + (ci.which ? "combine" : "dispatch") +
             (ci.member ? " B" : " F") + " L" + std::to_string(ci.layer);
      break;
    case CommInterval::P2P:
      name = "p2p " + toString(s.programs[ci.rank][ci.actionIndex]);
      break;
    case CommInterval::ExposedA2A:
      name = "exposed a2a";
      break;
    case CommInterval::ExposedP2P:
      name = "exposed p2p";
      break;
    case CommInterval::Gather:
      name = "gather " + toString(s.programs[ci.rank][ci.actionIndex]);
      break;
    case CommInterval::Copy:
      name = "copy " + toString(s.programs[ci.rank][ci.actionIndex]);
      break;
    }
    e["name"] = name;
    e["cat"] = exposed ? "exposed" : "comm";
    e["ph"] = "X";
    e["ts"] = ci.start * k;
    e["dur"] = (ci.end - ci.start) * k;
    e["pid"] = ci.rank;
    e["tid"] = exposed ? kComputeTid : kCommTid;
    if (exposed)
      e["cname"] = "terrible";
    events.push_back(std::move(e));
  }
  Json root;
  root["traceEvents"] = std::move(events);
  root["displayTimeUnit"] = "ms";
  root["otherData"] = Json{{"schedule", s.name},
                           {"makespan", sim.makespan},
                           {"bubble_rate", sim.bubbleRate},
                           {"zb_bubble_rate", sim.zbBubbleRate}};
  if (!sim.commIntervals.empty()) {
    root["otherData"]["exposed_a2a"] = sim.exposedA2A;
    root["otherData"]["exposed_p2p"] = sim.exposedP2P;
    root["otherData"]["exposed_comm"] = sim.exposedComm;
  }
  return root.dump() + "\n";
}

} // namespace pipeforge::sched
