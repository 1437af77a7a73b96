//===- Action.cpp - The action model of a pipeline schedule ---------------===//

#include "pipeforge/Schedule/Action.h"

namespace pipeforge::sched {

Status Schedule::setPairOrder(Action &a, PairComponentOrder order) {
  if (order.empty()) {
    a.pairOrder = 0;
    return Status::ok();
  }
  // Distinct orders are few (one per kind of pair and stage): a linear
  // search keeps the table free of any index structure.
  for (size_t i = 0; i < pairOrders.size(); ++i)
    if (pairOrders[i] == order) {
      a.pairOrder = uint16_t(i + 1);
      return Status::ok();
    }
  if (pairOrders.size() >= 0xffff)
    return Status::error("more than 65535 distinct fused-pair component "
                         "orders in one schedule");
  pairOrders.push_back(std::move(order));
  a.pairOrder = uint16_t(pairOrders.size());
  return Status::ok();
}

Placement Placement::linear(int ranks) { return interleaved(ranks, 1); }

Placement Placement::interleaved(int ranks, int chunksPerRank) {
  Placement p;
  p.numRanks = ranks;
  p.numStages = ranks * chunksPerRank;
  p.numCopies = 1;
  p.rankOf.assign(1, std::vector<int32_t>(p.numStages));
  for (int s = 0; s < p.numStages; ++s)
    p.rankOf[0][s] = s % ranks;
  return p;
}

Placement Placement::vShape(int ranks) {
  Placement p;
  p.numRanks = ranks;
  p.numStages = 2 * ranks;
  p.numCopies = 1;
  p.rankOf.assign(1, std::vector<int32_t>(p.numStages));
  for (int s = 0; s < p.numStages; ++s)
    p.rankOf[0][s] = s < ranks ? s : 2 * ranks - 1 - s;
  return p;
}

Placement Placement::dual(int ranks) {
  Placement p;
  p.numRanks = ranks;
  p.numStages = ranks;
  p.numCopies = 2;
  p.rankOf.assign(2, std::vector<int32_t>(ranks));
  for (int s = 0; s < ranks; ++s) {
    p.rankOf[0][s] = s;
    p.rankOf[1][s] = ranks - 1 - s;
  }
  return p;
}

namespace {
struct KindName {
  ScheduleKind kind;
  const char *name;
};
constexpr KindName kKindNames[] = {
    {ScheduleKind::GPipe, "gpipe"},         {ScheduleKind::OneFOneB, "1f1b"},
    {ScheduleKind::Interleaved, "interleaved"}, {ScheduleKind::ZBH1, "zb-h1"},
    {ScheduleKind::ZBH2, "zb-h2"},          {ScheduleKind::ZBV, "zbv"},
    {ScheduleKind::DualPipe, "dualpipe"},   {ScheduleKind::DualPipeV, "dualpipev"},
    {ScheduleKind::Chimera, "chimera"},
    {ScheduleKind::VHalf, "v-half"},        {ScheduleKind::VMin, "v-min"},
    {ScheduleKind::Auto, "auto"},
};
} // namespace

const char *scheduleKindName(ScheduleKind k) {
  for (const KindName &kn : kKindNames)
    if (kn.kind == k)
      return kn.name;
  return "?";
}

std::optional<ScheduleKind> parseScheduleKind(const std::string &name) {
  for (const KindName &kn : kKindNames)
    if (name == kn.name)
      return kn.kind;
  return std::nullopt;
}

std::string scheduleKindNames() {
  std::string out;
  for (const KindName &kn : kKindNames) {
    if (!out.empty())
      out += ' ';
    out += kn.name;
  }
  return out;
}

const char *workKindName(WorkKind k) {
  switch (k) {
  case WorkKind::F:
    return "F";
  case WorkKind::B:
    return "B";
  case WorkKind::W:
    return "W";
  case WorkKind::BW:
    return "BW";
  }
  return "?";
}

std::optional<WorkKind> parseWorkKind(const std::string &s) {
  if (s == "F")
    return WorkKind::F;
  if (s == "B")
    return WorkKind::B;
  if (s == "W")
    return WorkKind::W;
  if (s == "BW")
    return WorkKind::BW;
  return std::nullopt;
}

const char *payloadName(Payload p) {
  switch (p) {
  case Payload::Activation:
    return "act";
  case Payload::Gradient:
    return "grad";
  case Payload::WeightGrad:
    return "wgrad";
  }
  return "?";
}

std::string toString(const Work &w) {
  std::string s = workKindName(w.kind);
  s += std::to_string(w.stage) + "." + std::to_string(w.mb);
  if (w.copy != 0)
    s += "@" + std::to_string(w.copy);
  return s;
}

std::string toString(const Action &a) {
  switch (a.kind) {
  case ActionKind::Compute:
    return toString(a.work);
  case ActionKind::Overlap:
    return toString(a.work) + "+" + toString(a.work2);
  case ActionKind::Send:
    return std::string("SEND ") + payloadName(a.payload) + " " +
           toString(a.work) + " ->r" + std::to_string(a.peer);
  case ActionKind::Recv:
    return std::string("RECV ") + payloadName(a.payload) + " " +
           toString(a.work) + " <-r" + std::to_string(a.peer);
  case ActionKind::GradReduce:
    return "GRADREDUCE <->r" + std::to_string(a.peer);
  case ActionKind::Unshard:
  case ActionKind::Reshard: {
    std::string s = a.kind == ActionKind::Unshard ? "UNSHARD " : "RESHARD ";
    s += std::to_string(a.work.stage);
    if (a.work.copy != 0)
      s += "@" + std::to_string(a.work.copy);
    return s;
  }
  case ActionKind::Offload:
    return "OFFLOAD " + toString(a.work);
  case ActionKind::Reload:
    return "RELOAD " + toString(a.work);
  }
  return "?";
}

void spliceActions(std::vector<Action> &acts,
                   const std::map<size_t, std::vector<Action>> &before,
                   const std::map<size_t, std::vector<Action>> &after) {
  size_t added = 0;
  for (const auto &[i, v] : before)
    added += v.size();
  for (const auto &[i, v] : after)
    added += v.size();
  std::vector<Action> out;
  out.reserve(acts.size() + added);
  for (size_t i = 0; i < acts.size(); ++i) {
    if (auto it = before.find(i); it != before.end())
      out.insert(out.end(), it->second.begin(), it->second.end());
    out.push_back(acts[i]);
    if (auto it = after.find(i); it != after.end())
      out.insert(out.end(), it->second.begin(), it->second.end());
  }
  acts = std::move(out);
}

} // namespace pipeforge::sched
