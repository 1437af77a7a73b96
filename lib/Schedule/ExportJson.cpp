//===- ExportJson.cpp - JSON form of a schedule (docs/schedule-json.md) ---===//

#include "pipeforge/Schedule/ExportJson.h"
#include "pipeforge/Schedule/JsonWriter.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace pipeforge::sched {

using Json = nlohmann::ordered_json;

namespace {
constexpr const char *kFormat = "pipeforge.schedule";
constexpr int kVersion = 1;

void writeWork(JsonWriter &w, const char *opKey, const Work &work,
               bool copies) {
  w.key(opKey);
  w.plainString(workKindName(work.kind));
  w.field("stage", work.stage);
  w.field("mb", work.mb);
  if (copies) {
    w.field("copy", int32_t(work.copy));
  }
}

void writeAction(JsonWriter &w, const Schedule &s, const Action &a,
                 bool copies) {
  w.beginObject();
  switch (a.kind) {
  case ActionKind::Compute:
    writeWork(w, "op", a.work, copies);
    break;
  case ActionKind::Overlap:
    w.key("op");
    w.plainString("FB");
    w.key("members");
    w.beginArray();
    for (const Work *m : {&a.work, &a.work2}) {
      w.beginObject();
      writeWork(w, "op", *m, copies);
      w.endObject();
    }
    w.endArray();
    if (const PairComponentOrder *order = s.pairOrderOf(a)) {
      w.key("order");
      w.beginArray();
      for (const PairComponentStep &p : *order) {
        w.beginArray();
        w.plainString(p.member == PairComponentStep::F   ? "F"
                      : p.member == PairComponentStep::B ? "B"
                                                         : "W");
        w.plainString(p.kind == PairComponentStep::Attn ? "attn" : "mlp");
        w.value(int32_t(p.layer));
        w.endArray();
      }
      w.endArray();
    }
    break;
  case ActionKind::Send:
  case ActionKind::Recv:
    w.key("op");
    w.plainString(a.kind == ActionKind::Send ? "SEND" : "RECV");
    w.key("payload");
    w.plainString(payloadName(a.payload));
    writeWork(w, "producer", a.work, copies);
    w.field("peer", a.peer);
    break;
  case ActionKind::GradReduce:
    w.key("op");
    w.plainString("GRADREDUCE");
    w.field("peer", a.peer);
    break;
  case ActionKind::Unshard:
  case ActionKind::Reshard:
    w.key("op");
    w.plainString(a.kind == ActionKind::Unshard ? "UNSHARD" : "RESHARD");
    w.field("stage", a.work.stage);
    if (copies)
      w.field("copy", int32_t(a.work.copy));
    break;
  case ActionKind::Offload:
  case ActionKind::Reload:
    w.key("op");
    w.plainString(a.kind == ActionKind::Offload ? "OFFLOAD" : "RELOAD");
    writeWork(w, "stash", a.work, copies);
    break;
  }
  w.endObject();
}

void writeNumbers(JsonWriter &w, const char *key,
                  const std::vector<RankStats> &ranks,
                  double RankStats::*field) {
  w.key(key);
  w.beginArray();
  for (const RankStats &st : ranks)
    w.value(st.*field);
  w.endArray();
}
} // namespace

void exportJson(const Schedule &s, std::ostream &os, const SimResult *sim,
                int indent,
                const std::function<void(JsonWriter &)> &moreSummary) {
  bool copies = s.placement.numCopies > 1;
  JsonWriter w(os, indent);
  w.beginObject();
  w.key("format");
  w.plainString(kFormat);
  w.field("version", int32_t(kVersion));
  w.field("name", s.name);
  w.field("ranks", s.numRanks());
  w.field("stages", s.placement.numStages);
  w.field("copies", s.placement.numCopies);
  w.field("microbatches", s.numMicrobatches);
  w.field("has_comm", s.hasComm);
  w.key("placement");
  w.beginArray();
  for (const std::vector<int32_t> &copy : s.placement.rankOf) {
    w.beginArray();
    for (int32_t r : copy)
      w.value(r);
    w.endArray();
  }
  w.endArray();
  w.key("programs");
  w.beginArray();
  for (size_t r = 0; r < s.programs.size(); ++r) {
    w.beginObject();
    w.field("rank", uint64_t(r));
    w.key("actions");
    w.beginArray();
    for (const Action &a : s.programs[r])
      writeAction(w, s, a, copies);
    w.endArray();
    w.endObject();
  }
  w.endArray();
  if (sim) {
    w.key("summary");
    w.beginObject();
    w.field("makespan", sim->makespan);
    w.field("bubble_rate", sim->bubbleRate);
    w.field("zb_bubble_rate", sim->zbBubbleRate);
    // The simulator's own unit, as the text output prints it: M_B, the
    // activations of one microbatch on a rank's 1/p share of the model (a
    // stage of an S-stage copy allocates p/S of it).
    writeNumbers(w, "peak_activation", sim->ranks, &RankStats::peakMemory);
    writeNumbers(w, "busy", sim->ranks, &RankStats::busy);
    writeNumbers(w, "exposed_comm", sim->ranks, &RankStats::exposedComm);
    if (!sim->commIntervals.empty()) { // communication model in use
      writeNumbers(w, "exposed_p2p", sim->ranks, &RankStats::exposedP2P);
      writeNumbers(w, "exposed_a2a", sim->ranks, &RankStats::exposedA2A);
    }
    // ZeRO-3's gathers, where they take time.
    bool gathers = false;
    for (const RankStats &r : sim->ranks)
      gathers |= r.gatherBusy > 0;
    if (gathers) {
      writeNumbers(w, "gather_busy", sim->ranks, &RankStats::gatherBusy);
      writeNumbers(w, "exposed_gather", sim->ranks, &RankStats::exposedGather);
    }
    // Activation offload's copies, where they take time.
    bool copying = false;
    for (const RankStats &r : sim->ranks)
      copying |= r.copyBusy > 0;
    if (copying) {
      writeNumbers(w, "copy_busy", sim->ranks, &RankStats::copyBusy);
      writeNumbers(w, "exposed_copy", sim->ranks, &RankStats::exposedCopy);
    }
    if (moreSummary)
      moreSummary(w);
    w.endObject();
  }
  w.endObject();
  w.flush();
  os << "\n";
}

std::string exportJson(const Schedule &s, const SimResult *sim,
                       const CostModel &, int indent) {
  std::ostringstream os;
  exportJson(s, os, sim, indent);
  return os.str();
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
  int64_t stage = intField(j, "stage", where);
  int64_t copy = j.contains("copy") ? intField(j, "copy", where) : 0;
  if (!Work::fits(stage, copy))
    throw ParseError{where + ": stage " + std::to_string(stage) + " or copy " +
                     std::to_string(copy) + " out of range"};
  w.stage = int32_t(stage);
  w.copy = int32_t(copy);
  w.mb = intField(j, "mb", where);
  return w;
}

Action parseAction(const Json &j, const std::string &where, Schedule &s) {
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
      PairComponentOrder order;
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
        order.push_back(p);
      }
      if (Status st = s.setPairOrder(a, std::move(order)); !st)
        throw ParseError{where + ": " + st.message()};
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
  if (op == "UNSHARD" || op == "RESHARD") {
    int64_t stage = intField(j, "stage", where);
    int64_t copy = j.contains("copy") ? intField(j, "copy", where) : 0;
    if (!Work::fits(stage, copy))
      throw ParseError{where + ": stage " + std::to_string(stage) +
                       " or copy " + std::to_string(copy) + " out of range"};
    return op == "UNSHARD" ? Action::unshard(int32_t(stage), int32_t(copy))
                           : Action::reshard(int32_t(stage), int32_t(copy));
  }
  if (op == "OFFLOAD" || op == "RELOAD") {
    Work f = parseWork(j, where, "stash");
    if (f.kind != WorkKind::F)
      throw ParseError{where + ": \"stash\" must be \"F\" (the forward "
                               "whose stash moves), got \"" +
                       std::string(workKindName(f.kind)) + "\""};
    return op == "OFFLOAD" ? Action::offload(f) : Action::reload(f);
  }
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
    if (s.placement.numStages > kMaxStages)
      throw ParseError{"json: \"stages\" is over " +
                       std::to_string(kMaxStages)};
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
            acts[i], where + ".actions[" + std::to_string(i) + "]", s));
    }
    return s;
  } catch (const ParseError &e) {
    return Status::error(e.msg);
  }
}

} // namespace pipeforge::sched
