//===- StreamedExportTest.cpp - Streamed JSON/CSV equal the documents -----===//
//
// exportJson and exportCsv write as they go (no document of the programs).
// Their text must stay byte-identical to what the earlier implementation
// printed: an nlohmann::ordered_json document built whole and dumped. That
// document builder is kept here as the reference.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/JsonWriter.h"
#include "pipeforge/Schedule/Offload.h"
#include "pipeforge/Schedule/ParamGathers.h"

#include "HandSchedules.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testing;
using OJson = nlohmann::ordered_json;

namespace {

OJson refWork(const Work &w, bool copies, const char *opKey = "op") {
  OJson j;
  j[opKey] = workKindName(w.kind);
  j["stage"] = int32_t(w.stage);
  j["mb"] = w.mb;
  if (copies)
    j["copy"] = int32_t(w.copy);
  return j;
}

OJson refAction(const Schedule &s, const Action &a, bool copies) {
  OJson j;
  switch (a.kind) {
  case ActionKind::Compute:
    return refWork(a.work, copies);
  case ActionKind::Overlap:
    j["op"] = "FB";
    j["members"] =
        OJson::array({refWork(a.work, copies), refWork(a.work2, copies)});
    if (const PairComponentOrder *order = s.pairOrderOf(a)) {
      OJson o = OJson::array();
      for (const PairComponentStep &p : *order)
        o.push_back(OJson::array({p.member == PairComponentStep::F   ? "F"
                                  : p.member == PairComponentStep::B ? "B"
                                                                     : "W",
                                  p.kind == PairComponentStep::Attn ? "attn"
                                                                    : "mlp",
                                  int(p.layer)}));
      j["order"] = std::move(o);
    }
    return j;
  case ActionKind::Send:
  case ActionKind::Recv: {
    j["op"] = a.kind == ActionKind::Send ? "SEND" : "RECV";
    j["payload"] = payloadName(a.payload);
    OJson w = refWork(a.work, copies, "producer");
    for (auto &[k, v] : w.items())
      j[k] = v;
    j["peer"] = a.peer;
    return j;
  }
  case ActionKind::GradReduce:
    j["op"] = "GRADREDUCE";
    j["peer"] = a.peer;
    return j;
  case ActionKind::Unshard:
  case ActionKind::Reshard:
    j["op"] = a.kind == ActionKind::Unshard ? "UNSHARD" : "RESHARD";
    j["stage"] = int32_t(a.work.stage);
    if (copies)
      j["copy"] = int32_t(a.work.copy);
    return j;
  case ActionKind::Offload:
  case ActionKind::Reload: {
    j["op"] = a.kind == ActionKind::Offload ? "OFFLOAD" : "RELOAD";
    OJson w = refWork(a.work, copies, "stash");
    for (auto &[k, v] : w.items())
      j[k] = v;
    return j;
  }
  }
  return j;
}

/// The document exportJson printed before it streamed.
std::string refJson(const Schedule &s, const SimResult *sim, int indent) {
  bool copies = s.placement.numCopies > 1;
  OJson j;
  j["format"] = "pipeforge.schedule";
  j["version"] = 1;
  j["name"] = s.name;
  j["ranks"] = s.numRanks();
  j["stages"] = s.placement.numStages;
  j["copies"] = s.placement.numCopies;
  j["microbatches"] = s.numMicrobatches;
  j["has_comm"] = s.hasComm;
  j["placement"] = s.placement.rankOf;
  OJson programs = OJson::array();
  for (size_t r = 0; r < s.programs.size(); ++r) {
    OJson actions = OJson::array();
    for (const Action &a : s.programs[r])
      actions.push_back(refAction(s, a, copies));
    OJson prog;
    prog["rank"] = r;
    prog["actions"] = std::move(actions);
    programs.push_back(std::move(prog));
  }
  j["programs"] = std::move(programs);
  if (sim) {
    OJson sum;
    sum["makespan"] = sim->makespan;
    sum["bubble_rate"] = sim->bubbleRate;
    sum["zb_bubble_rate"] = sim->zbBubbleRate;
    OJson peak = OJson::array(), busy = OJson::array(),
          exposed = OJson::array();
    for (const RankStats &st : sim->ranks) {
      peak.push_back(st.peakMemory);
      busy.push_back(st.busy);
      exposed.push_back(st.exposedComm);
    }
    sum["peak_activation"] = std::move(peak);
    sum["busy"] = std::move(busy);
    sum["exposed_comm"] = std::move(exposed);
    if (!sim->commIntervals.empty()) {
      OJson p2p = OJson::array(), a2a = OJson::array();
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

std::vector<Schedule> schedules() {
  std::vector<Schedule> all = {handZB(3, 6, 1), handVOverlap(),
                               handGPipe(2, 3), hand1F1B(3, 5)};
  Schedule ordered = handVOverlap();
  for (auto &prog : ordered.programs)
    for (Action &a : prog)
      if (a.kind == ActionKind::Overlap) {
        EXPECT_TRUE(ordered.setPairOrder(
            a, {{PairComponentStep::F, PairComponentStep::Attn, 0},
                {PairComponentStep::B, PairComponentStep::Mlp, 1},
                {PairComponentStep::W, PairComponentStep::Attn, 2}}));
      }
  all.push_back(ordered);
  for (ScheduleKind k : {ScheduleKind::ZBV, ScheduleKind::DualPipe,
                         ScheduleKind::Interleaved, ScheduleKind::Chimera}) {
    GenOptions o;
    o.ranks = 4;
    o.microbatches = 8;
    Expected<Schedule> s = generate(k, o);
    EXPECT_TRUE(s) << s.message();
    if (!s)
      continue;
    all.push_back(*s);
    Schedule withComm = *s;
    Status st = insertComm(withComm);
    EXPECT_TRUE(st) << st.message();
    all.push_back(withComm);
    // ZeRO-3's gathers (UNSHARD / RESHARD, with the copy under DualPipe).
    st = insertParamGathers(withComm, 1);
    EXPECT_TRUE(st) << st.message();
    all.push_back(withComm);
    // Activation offload's copies (OFFLOAD / RELOAD F, with the copy under
    // DualPipe) beside them.
    st = insertOffload(withComm, kOffloadGapAll);
    EXPECT_TRUE(st) << st.message();
    all.push_back(withComm);
  }
  return all;
}

TEST(StreamedExportTest, JsonEqualsTheDocument) {
  for (const Schedule &s : schedules()) {
    CostModel cost;
    cost.tcomm = 0.25;
    Expected<SimResult> sim = simulate(s, cost);
    ASSERT_TRUE(sim) << s.name << ": " << sim.message();
    for (int indent : {2, -1, 0, 4}) {
      EXPECT_EQ(exportJson(s, nullptr, {}, indent), refJson(s, nullptr, indent))
          << s.name << " indent " << indent;
      EXPECT_EQ(exportJson(s, &*sim, cost, indent),
                refJson(s, &*sim, indent))
          << s.name << " indent " << indent;
    }
  }
}

TEST(StreamedExportTest, JsonSummaryMembersAppend) {
  Schedule s = handGPipe(2, 2);
  Expected<SimResult> sim = simulate(s, CostModel());
  ASSERT_TRUE(sim);
  std::ostringstream os;
  exportJson(s, os, &*sim, 2, [](JsonWriter &w) {
    w.key("note");
    w.value(std::string("a \"quoted\" name\n"));
    w.key("empty");
    w.beginObject();
    w.endObject();
    w.key("list");
    w.beginArray();
    w.endArray();
    w.key("x");
    w.value(0.1);
  });
  OJson doc = OJson::parse(refJson(s, &*sim, 2));
  doc["summary"]["note"] = "a \"quoted\" name\n";
  doc["summary"]["empty"] = OJson::object();
  doc["summary"]["list"] = OJson::array();
  doc["summary"]["x"] = 0.1;
  EXPECT_EQ(os.str(), doc.dump(2) + "\n");
}

/// The CSV rows exportCsv formed before it streamed: cells joined by ','.
std::string refCsv(const Schedule &s) {
  static const char *kinds[] = {"F", "I", "W", "B"};
  int32_t ns = s.placement.numStages;
  auto cell = [&](int32_t stage, const std::string &k, int32_t mb) {
    return std::to_string(stage) + k + std::to_string(mb);
  };
  auto g = [&](const Work &w) { return w.copy * ns + w.stage; };
  std::string out;
  for (const std::vector<Action> &prog : s.programs) {
    std::vector<std::string> cells;
    for (const Action &a : prog) {
      const char *k = kinds[int(a.work.kind)];
      if (a.kind == ActionKind::Compute)
        cells.push_back(cell(g(a.work), k, a.work.mb));
      else if (a.kind == ActionKind::Overlap)
        cells.push_back("(" + cell(g(a.work), k, a.work.mb) + ";" +
                        cell(g(a.work2), kinds[int(a.work2.kind)],
                             a.work2.mb) +
                        ")OVERLAP_F_B");
      else if (a.kind == ActionKind::GradReduce)
        cells.push_back("GRADREDUCE_r" + std::to_string(a.peer));
      else if (a.isParamGather())
        cells.push_back(std::to_string(g(a.work)) +
                        (a.kind == ActionKind::Unshard ? "UNSHARD"
                                                       : "RESHARD"));
      else if (a.isStashCopy())
        continue; // no CSV cell (PyTorch has no offload action)
      else if (a.payload != Payload::WeightGrad) {
        bool act = a.payload == Payload::Activation;
        bool send = a.kind == ActionKind::Send;
        cells.push_back(cell(g(a.work) + (send ? 0 : (act ? 1 : -1)),
                             std::string(send ? "SEND_" : "RECV_") +
                                 (act ? "F" : "B"),
                             a.work.mb));
      }
    }
    for (size_t i = 0; i < cells.size(); ++i)
      out += (i ? "," : "") + cells[i];
    out += "\n";
  }
  return out;
}

TEST(StreamedExportTest, CsvEqualsTheJoinedRows) {
  for (const Schedule &s : schedules()) {
    std::ostringstream os;
    exportCsv(s, os);
    EXPECT_EQ(os.str(), refCsv(s)) << s.name;
    EXPECT_EQ(exportCsv(s), refCsv(s)) << s.name;
  }
}

} // namespace
