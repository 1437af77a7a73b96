//===- ExportJson.cpp - JSON form of a schedule (docs/schedule-json.md) ---===//

#include "pipeforge/Schedule/Export.h"

#include <nlohmann/json.hpp>

namespace pipeforge::sched {

using Json = nlohmann::ordered_json;

namespace {
constexpr const char *kFormat = "pipeforge.schedule";
constexpr int kVersion = 1;

void putWork(Json &j, const Work &w, bool copies) {
  j["stage"] = w.stage;
  j["mb"] = w.mb;
  if (copies)
    j["copy"] = w.copy;
}

Json workJson(const Work &w, bool copies) {
  Json j;
  j["op"] = workKindName(w.kind);
  putWork(j, w, copies);
  return j;
}

Json actionJson(const Action &a, bool copies) {
  switch (a.kind) {
  case ActionKind::Compute:
    return workJson(a.work, copies);
  case ActionKind::Overlap: {
    Json j;
    j["op"] = "FB";
    j["members"] = Json::array({workJson(a.work, copies),
                                workJson(a.work2, copies)});
    if (!a.pairOrder.empty()) {
      Json o = Json::array();
      for (const PairComponentStep &p : a.pairOrder)
        o.push_back(Json::array(
            {p.member == PairComponentStep::F   ? "F"
             : p.member == PairComponentStep::B ? "B"
                                                : "W",
             p.kind == PairComponentStep::Attn ? "attn" : "mlp",
             int(p.layer)}));
      j["order"] = std::move(o);
    }
    return j;
  }
  case ActionKind::Send:
  case ActionKind::Recv: {
    Json j;
    j["op"] = a.kind == ActionKind::Send ? "SEND" : "RECV";
    j["payload"] = payloadName(a.payload);
    j["producer"] = workKindName(a.work.kind);
    putWork(j, a.work, copies);
    j["peer"] = a.peer;
    return j;
  }
  case ActionKind::GradReduce: {
    Json j;
    j["op"] = "GRADREDUCE";
    j["peer"] = a.peer;
    return j;
  }
  }
  return Json();
}
} // namespace

std::string exportJson(const Schedule &s, const SimResult *sim,
                       const CostModel &cost, int indent) {
  bool copies = s.placement.numCopies > 1;
  Json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["name"] = s.name;
  j["ranks"] = s.numRanks();
  j["stages"] = s.placement.numStages;
  j["copies"] = s.placement.numCopies;
  j["microbatches"] = s.numMicrobatches;
  j["has_comm"] = s.hasComm;
  j["placement"] = s.placement.rankOf;
  Json programs = Json::array();
  for (size_t r = 0; r < s.programs.size(); ++r) {
    Json actions = Json::array();
    for (const Action &a : s.programs[r])
      actions.push_back(actionJson(a, copies));
    Json prog;
    prog["rank"] = r;
    prog["actions"] = std::move(actions);
    programs.push_back(std::move(prog));
  }
  j["programs"] = std::move(programs);
  if (sim) {
    Json sum;
    sum["makespan"] = sim->makespan;
    sum["bubble_rate"] = sim->bubbleRate;
    sum["zb_bubble_rate"] = sim->zbBubbleRate;
    // The simulator's own unit, as the text output prints it: M_B, the
    // activations of one microbatch on a rank's 1/p share of the model (a
    // stage of an S-stage copy allocates p/S of it).
    Json peak = Json::array(), busy = Json::array(), exposed = Json::array();
    for (const RankStats &st : sim->ranks) {
      peak.push_back(st.peakMemory);
      busy.push_back(st.busy);
      exposed.push_back(st.exposedComm);
    }
    sum["peak_activation"] = std::move(peak);
    sum["busy"] = std::move(busy);
    sum["exposed_comm"] = std::move(exposed);
    if (!sim->commIntervals.empty()) { // communication model in use
      Json p2p = Json::array(), a2a = Json::array();
      for (const RankStats &st : sim->ranks) {
        p2p.push_back(st.exposedP2P);
        a2a.push_back(st.exposedA2A);
      }
      sum["exposed_p2p"] = std::move(p2p);
      sum["exposed_a2a"] = std::move(a2a);
    }
    j["summary"] = std::move(sum);
  }
  return j.dump(indent) + "\n";
}

namespace {
struct ParseError {
  std::string msg;
};

const Json &field(const Json &j, const char *key, const std::string &where) {
  if (!j.is_object() || !j.contains(key))
    throw ParseError{where + ": missing \"" + key + "\""};
  return j.at(key);
}

int32_t intField(const Json &j, const char *key, const std::string &where) {
  const Json &v = field(j, key, where);
  if (!v.is_number_integer())
    throw ParseError{where + ": \"" + key + "\" must be an integer"};
  return v.get<int32_t>();
}

std::string strField(const Json &j, const char *key, const std::string &where) {
  const Json &v = field(j, key, where);
  if (!v.is_string())
    throw ParseError{where + ": \"" + key + "\" must be a string"};
  return v.get<std::string>();
}

Work parseWork(const Json &j, const std::string &where, const char *opKey) {
  Work w;
  std::string op = strField(j, opKey, where);
  std::optional<WorkKind> k = parseWorkKind(op);
  if (!k)
    throw ParseError{where + ": unknown work kind \"" + op + "\""};
  w.kind = *k;
  w.stage = intField(j, "stage", where);
  w.mb = intField(j, "mb", where);
  w.copy = static_cast<int8_t>(j.contains("copy") ? intField(j, "copy", where)
                                                  : 0);
  return w;
}

Action parseAction(const Json &j, const std::string &where) {
  std::string op = strField(j, "op", where);
  if (op == "FB") {
    const Json &m = field(j, "members", where);
    if (!m.is_array() || m.size() != 2)
      throw ParseError{where + ": \"members\" must hold two works"};
    Action a = Action::overlap(parseWork(m[0], where + ".members[0]", "op"),
                               parseWork(m[1], where + ".members[1]", "op"));
    if (j.contains("order")) {
      const Json &o = j.at("order");
      if (!o.is_array())
        throw ParseError{where + ": \"order\" must be an array"};
      for (size_t i = 0; i < o.size(); ++i) {
        const Json &e = o[i];
        std::string at = where + ".order[" + std::to_string(i) + "]";
        if (!e.is_array() || e.size() != 3 || !e[0].is_string() ||
            !e[1].is_string() || !e[2].is_number_integer())
          throw ParseError{at + ": expected [\"F\"|\"B\"|\"W\", "
                                "\"attn\"|\"mlp\", layer]"};
        std::string mem = e[0].get<std::string>(), k = e[1].get<std::string>();
        int64_t layer = e[2].get<int64_t>();
        PairComponentStep p;
        if (mem == "F")
          p.member = PairComponentStep::F;
        else if (mem == "B")
          p.member = PairComponentStep::B;
        else if (mem == "W")
          p.member = PairComponentStep::W;
        else
          throw ParseError{at + ": unknown member \"" + mem + "\""};
        if (k == "attn")
          p.kind = PairComponentStep::Attn;
        else if (k == "mlp")
          p.kind = PairComponentStep::Mlp;
        else
          throw ParseError{at + ": unknown component \"" + k + "\""};
        if (layer < 0 || layer > 32767)
          throw ParseError{at + ": layer out of range"};
        p.layer = int16_t(layer);
        a.pairOrder.push_back(p);
      }
    }
    return a;
  }
  if (op == "SEND" || op == "RECV") {
    std::string pay = strField(j, "payload", where);
    Payload p;
    if (pay == "act")
      p = Payload::Activation;
    else if (pay == "grad")
      p = Payload::Gradient;
    else if (pay == "wgrad")
      p = Payload::WeightGrad;
    else
      throw ParseError{where + ": unknown payload \"" + pay + "\""};
    Work w = parseWork(j, where, "producer");
    int32_t peer = intField(j, "peer", where);
    return op == "SEND" ? Action::send(p, w, peer) : Action::recv(p, w, peer);
  }
  if (op == "GRADREDUCE")
    return Action::gradReduce(intField(j, "peer", where));
  if (parseWorkKind(op))
    return Action::compute(parseWork(j, where, "op"));
  throw ParseError{where + ": unknown op \"" + op + "\""};
}
} // namespace

Expected<Schedule> importJson(const std::string &text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return Status::error("json: not valid JSON");
  try {
    if (strField(j, "format", "json") != kFormat)
      throw ParseError{std::string("json: \"format\" is not \"") + kFormat +
                       "\""};
    if (intField(j, "version", "json") != kVersion)
      throw ParseError{"json: unsupported version"};
    Schedule s;
    s.name = j.contains("name") ? strField(j, "name", "json") : "";
    s.placement.numRanks = intField(j, "ranks", "json");
    s.placement.numStages = intField(j, "stages", "json");
    s.placement.numCopies = intField(j, "copies", "json");
    s.numMicrobatches = intField(j, "microbatches", "json");
    const Json &hc = field(j, "has_comm", "json");
    if (!hc.is_boolean())
      throw ParseError{"json: \"has_comm\" must be a boolean"};
    s.hasComm = hc.get<bool>();
    const Json &pl = field(j, "placement", "json");
    try {
      s.placement.rankOf = pl.get<std::vector<std::vector<int32_t>>>();
    } catch (const nlohmann::json::exception &) {
      throw ParseError{"json: \"placement\" must be a list of rank lists"};
    }
    const Json &progs = field(j, "programs", "json");
    if (!progs.is_array())
      throw ParseError{"json: \"programs\" must be a list"};
    s.programs.resize(progs.size());
    for (size_t r = 0; r < progs.size(); ++r) {
      std::string where = "json: programs[" + std::to_string(r) + "]";
      const Json &acts = field(progs[r], "actions", where);
      if (!acts.is_array())
        throw ParseError{where + ": \"actions\" must be a list"};
      for (size_t i = 0; i < acts.size(); ++i)
        s.programs[r].push_back(parseAction(
            acts[i], where + ".actions[" + std::to_string(i) + "]"));
    }
    return s;
  } catch (const ParseError &e) {
    return Status::error(e.msg);
  }
}

} // namespace pipeforge::sched
