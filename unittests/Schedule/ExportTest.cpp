//===- ExportTest.cpp - Tests for the schedule export formats -------------===//

#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/ParamGathers.h"
#include "pipeforge/Schedule/Verify.h"

#include "HandSchedules.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testing;
using Json = nlohmann::json;

namespace {

SimResult sim(const Schedule &s, CostModel cost = {}) {
  Expected<SimResult> r = simulate(s, cost);
  EXPECT_TRUE(r) << r.message();
  return r ? *r : SimResult();
}

Schedule gen(ScheduleKind k, int p, int m) {
  GenOptions o;
  o.ranks = p;
  o.microbatches = m;
  Expected<Schedule> s = generate(k, o);
  EXPECT_TRUE(s) << s.message();
  return s ? *s : Schedule();
}

size_t count(const std::string &hay, const std::string &needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos;
       pos = hay.find(needle, pos + 1))
    ++n;
  return n;
}

void expectSamePrograms(const Schedule &a, const Schedule &b) {
  ASSERT_EQ(a.programs.size(), b.programs.size());
  for (size_t r = 0; r < a.programs.size(); ++r) {
    ASSERT_EQ(a.programs[r].size(), b.programs[r].size()) << "rank " << r;
    for (size_t i = 0; i < a.programs[r].size(); ++i)
      EXPECT_TRUE(a.programs[r][i] == b.programs[r][i])
          << "rank " << r << " step " << i << ": "
          << toString(a.programs[r][i]) << " vs "
          << toString(b.programs[r][i]);
  }
}

// --- text grid --------------------------------------------------------------

TEST(ExportTest, TextGridZBH1) {
  std::string g = exportTextGrid(handZB(2, 3, 1), sim(handZB(2, 3, 1)));
  EXPECT_EQ(g, "zb-h1: 2 ranks, 3 microbatches, slot 1, makespan 10, bubble "
               "0.1\n"
               "r0 | F0 F1 .  B0 W0 F2 B1 W1 B2 W2\n"
               "r1 | .  F0 B0 F1 B1 W0 F2 B2 W1 W2\n");
}

TEST(ExportTest, TextGridLongActionsAndChunks) {
  CostModel cost;
  cost.tb = 2; // BW = 3 slots
  std::string g = exportTextGrid(handVOverlap(), sim(handVOverlap(), cost));
  // Rank 0 holds stages 0 and 3: chunk suffixes .0 and .1; the pair spans
  // F (1) + BW (3) = 4 slots.
  EXPECT_NE(g.find("r0 | F0.0 F1.0 .    F0.1 .    F1.1+BW0.1 - - - BW1.1"),
            std::string::npos)
      << g;
  EXPECT_NE(g.find("r1 | .    F0.0 F0.1 F1.0 F1.1 .          . . . BW0.1"),
            std::string::npos)
      << g;
}

TEST(ExportTest, TextGridIsTheSameInBlocksOfAnySize) {
  // The lines go out in blocks of columns; a block takes over its
  // predecessor's padding and starts at its own labels. Cut small grids
  // (idle and busy cells, chunks, overlapped pairs, uneven rows) into blocks
  // of every small size: the output must not change.
  CostModel slow;
  slow.tb = 2; // BW = 3 slots: "-" cells
  std::vector<std::pair<Schedule, CostModel>> cases = {
      {handVOverlap(), slow},
      {handZB(3, 6, 1), CostModel()},
      {gen(ScheduleKind::DualPipeV, 4, 10), slow},
      {gen(ScheduleKind::Interleaved, 3, 6), CostModel()}};
  for (auto &[s, cost] : cases) {
    SimResult r = sim(s, cost);
    std::string whole = exportTextGrid(s, r);
    ASSERT_GT(whole.size(), 60u);
    for (size_t block : {1, 2, 3, 5, 7, 64}) {
      std::ostringstream os;
      detail::exportTextGrid(s, r, os, block);
      ASSERT_EQ(os.str(), whole) << s.name << ", blocks of " << block;
    }
  }
}

TEST(ExportTest, TextGridOfMillionsOfCellsIsAlignedAndInProgramOrder) {
  // Over 512k columns a row: the rows are built one rank per core and the
  // lines written in blocks of columns formatted side by side. Every column
  // must start where its predecessor's widest cell and a space end, in
  // both lines (a block takes over the padding its predecessor leaves),
  // and a line's labels must be its rank's compute actions in program
  // order (a block starts at its own labels), overlapped pairs included.
  Schedule s = gen(ScheduleKind::DualPipeV, 2, 300000);
  ASSERT_TRUE(insertComm(s).isOk());
  CostModel cost;
  cost.tb = 1.3;
  cost.tw = 0.7;
  cost.tcomm = 0.05;
  Expected<SimResult> r = simulate(s, cost, {SimIntervals::Compute});
  ASSERT_TRUE(r) << r.message();
  std::string g = exportTextGrid(s, *r);
  ASSERT_FALSE(g.empty());
  EXPECT_EQ(g.back(), '\n');
  std::istringstream in(g);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)); // the title
  std::vector<size_t> starts[2], lengths[2];
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(std::getline(in, line));
    const std::string head = "r" + std::to_string(rank) + " |";
    ASSERT_EQ(line.compare(0, head.size(), head), 0) << rank;
    // The labels this rank must show, in program order (V placement: the
    // rank's lower stage is its chunk 0).
    auto label = [](const Work &w) {
      return workKindName(w.kind) + std::to_string(w.mb) + "." +
             std::to_string(w.stage < 2 ? 0 : 1);
    };
    std::vector<std::string> want;
    for (const Action &a : s.programs[rank])
      if (!a.isComm())
        want.push_back(a.kind == ActionKind::Overlap
                           ? label(a.work) + "+" + label(a.work2)
                           : label(a.work));
    size_t next = 0;
    for (size_t pos = head.size(); pos < line.size();) {
      ASSERT_EQ(line[pos], ' ') << rank << " at " << pos;
      size_t b = line.find_first_not_of(' ', pos);
      ASSERT_NE(b, std::string::npos) << "trailing spaces, rank " << rank;
      size_t e = std::min(line.find(' ', b), line.size());
      starts[rank].push_back(b);
      lengths[rank].push_back(e - b);
      std::string cell = line.substr(b, e - b);
      if (cell != "." && cell != "-") {
        ASSERT_LT(next, want.size()) << rank;
        ASSERT_EQ(cell, want[next]) << "rank " << rank << ", label " << next;
        ++next;
      }
      pos = e;
    }
    EXPECT_EQ(next, want.size()) << rank;
  }
  EXPECT_FALSE(std::getline(in, line));
  ASSERT_GT(starts[0].size(), size_t(1) << 19);
  ASSERT_EQ(starts[0].size(), starts[1].size());
  size_t at = std::string("r0 | ").size();
  for (size_t c = 0; c < starts[0].size(); ++c) {
    ASSERT_EQ(starts[0][c], at) << "column " << c;
    ASSERT_EQ(starts[1][c], at) << "column " << c;
    at += std::max(lengths[0][c], lengths[1][c]) + 1;
  }
}

// --- JSON -------------------------------------------------------------------

TEST(ExportTest, JsonFieldsAndSummary) {
  Schedule s = handVOverlap();
  insertCommByTime(s);
  CostModel cost;
  cost.memB = 2;
  SimResult r = sim(s, cost);
  Json j = Json::parse(exportJson(s, &r, cost));
  EXPECT_EQ(j["format"], "pipeforge.schedule");
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["stages"], 4);
  EXPECT_EQ(j["has_comm"], true);
  const Json &a0 = j["programs"][0]["actions"];
  EXPECT_EQ(a0[0]["op"], "F");
  EXPECT_EQ(a0[0]["stage"], 0);
  EXPECT_EQ(a0[0]["mb"], 0);
  EXPECT_FALSE(a0[0].contains("copy")); // one copy only
  bool sawPair = false, sawSend = false;
  for (const Json &a : a0) {
    if (a["op"] == "FB") {
      sawPair = true;
      EXPECT_EQ(a["members"][0]["op"], "F");
      EXPECT_EQ(a["members"][1]["op"], "BW");
    }
    if (a["op"] == "SEND" && a["payload"] == "act") {
      sawSend = true;
      EXPECT_EQ(a["payload"], "act");
      EXPECT_EQ(a["producer"], "F");
      EXPECT_EQ(a["peer"], 1);
    }
  }
  EXPECT_TRUE(sawPair && sawSend);
  const Json &sum = j["summary"];
  EXPECT_DOUBLE_EQ(sum["makespan"].get<double>(), r.makespan);
  EXPECT_DOUBLE_EQ(sum["bubble_rate"].get<double>(), r.bubbleRate);
  EXPECT_DOUBLE_EQ(sum["zb_bubble_rate"].get<double>(), r.zbBubbleRate);
  ASSERT_EQ(sum["peak_activation"].size(), 2u);
  // In the simulator's unit, as the text output prints it: rank 0 holds 4
  // microbatches of memB = 2.
  EXPECT_DOUBLE_EQ(sum["peak_activation"][0].get<double>(), 8);
  EXPECT_DOUBLE_EQ(sum["peak_activation"][0].get<double>(),
                   r.ranks[0].peakMemory);
  EXPECT_FALSE(Json::parse(exportJson(s)).contains("summary"));
}

TEST(ExportTest, JsonDualPipeHasCopiesAndGradReduce) {
  Schedule s = gen(ScheduleKind::DualPipe, 4, 16);
  ASSERT_TRUE(insertComm(s).isOk());
  Json j = Json::parse(exportJson(s));
  EXPECT_EQ(j["copies"], 2);
  bool sawCopy1 = false, sawGr = false;
  for (const Json &p : j["programs"])
    for (const Json &a : p["actions"]) {
      if (a.contains("copy") && a["copy"] == 1)
        sawCopy1 = true;
      if (a["op"] == "GRADREDUCE")
        sawGr = true;
    }
  EXPECT_TRUE(sawCopy1);
  EXPECT_TRUE(sawGr);
}

TEST(ExportTest, JsonRoundTrip) {
  std::vector<Schedule> all = {handZB(3, 6, 1), handVOverlap(),
                               gen(ScheduleKind::DualPipe, 4, 16),
                               gen(ScheduleKind::DualPipeV, 4, 16)};
  for (Schedule s : all) {
    for (bool comm : {false, true}) {
      if (comm) {
        ASSERT_TRUE(insertComm(s).isOk());
      }
      Expected<Schedule> back = importJson(exportJson(s));
      ASSERT_TRUE(back) << back.message();
      EXPECT_EQ(back->name, s.name);
      EXPECT_EQ(back->hasComm, s.hasComm);
      EXPECT_EQ(back->numMicrobatches, s.numMicrobatches);
      EXPECT_EQ(back->placement.rankOf, s.placement.rankOf);
      expectSamePrograms(s, *back);
    }
  }
}

TEST(ExportTest, JsonImportErrors) {
  EXPECT_NE(importJson("{").message().find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(importJson("{\"format\":\"x\",\"version\":1}")
                .message()
                .find("\"format\" is not"),
            std::string::npos);
  Json j = Json::parse(exportJson(handGPipe(2, 1)));
  j["programs"][1]["actions"][0]["op"] = "Q";
  EXPECT_NE(importJson(j.dump()).message().find(
                "programs[1].actions[0]: unknown op \"Q\""),
            std::string::npos);
  j = Json::parse(exportJson(handGPipe(2, 1)));
  j["programs"][0]["actions"][1].erase("mb");
  EXPECT_NE(importJson(j.dump()).message().find(
                "programs[0].actions[1]: missing \"mb\""),
            std::string::npos);
}

// --- CSV --------------------------------------------------------------------

TEST(ExportTest, CsvTranslatesKinds) {
  // ZB-H1 has B and W (PyTorch I and W); 1F1B has BW (PyTorch B).
  std::string zb = exportCsv(handZB(2, 2, 1));
  EXPECT_EQ(zb, "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n");
  std::string f1b = exportCsv(hand1F1B(2, 2));
  EXPECT_EQ(f1b, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
}

TEST(ExportTest, CsvComms) {
  Schedule s = handGPipe(2, 1);
  insertCommByTime(s);
  // RECV cells carry the receiving stage, as PyTorch writes them.
  EXPECT_EQ(exportCsv(s), "0F0,0SEND_F0,0RECV_B0,0B0\n"
                          "1RECV_F0,1F0,1B0,1SEND_B0\n");
  CsvOptions computeOnly;
  computeOnly.withComm = false;
  EXPECT_EQ(exportCsv(s, computeOnly), "0F0,0B0\n1F0,1B0\n");
}

TEST(ExportTest, CsvPytorchDialect) {
  // PyTorch's compute_comms row (its _PipelineScheduleRuntime needs every
  // piece): the rank's stages unsharded first, a wait for each forward send
  // after the local backward, REDUCE_GRAD and its wait after the stage's
  // last backward, then RESHARD and the waits of the gradient sends.
  Schedule s = handGPipe(2, 1);
  insertCommByTime(s);
  CsvOptions pt;
  pt.pytorchStrict = true;
  EXPECT_EQ(exportCsv(s, pt),
            "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0,0REDUCE_GRAD,"
            "0WAIT_REDUCE_GRAD,0RESHARD\n"
            "1UNSHARD,1RECV_F0,1F0,1B0,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,"
            "1SEND_B0,1RESHARD,1WAIT_SEND_B0\n");
  // Without messages: PyTorch's compute_only form, the compute cells.
  pt.withComm = false;
  EXPECT_EQ(exportCsv(s, pt), "0F0,0B0\n1F0,1B0\n");
  // Split backward: REDUCE_GRAD follows the last W, not the last I.
  Schedule zb = handZB(2, 2, 1);
  ASSERT_TRUE(insertComm(zb).isOk());
  pt.withComm = true;
  std::string c = exportCsv(zb, pt);
  EXPECT_NE(c.find("0W1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD"),
            std::string::npos)
      << c;
  EXPECT_EQ(c.find("GRADREDUCE"), std::string::npos) << c;
  // PyTorch's form imports as the same schedule (its gradient reductions
  // and waits skipped), with its UNSHARD / RESHARD as ZeRO-3's gathers.
  CsvImportOptions io;
  int64_t fsdp = 0, waits = 0;
  io.ignoredFsdpActions = &fsdp;
  io.ignoredWaitActions = &waits;
  auto back = importCsv(c, io);
  ASSERT_TRUE(back.isOk()) << back.message();
  EXPECT_TRUE(hasParamGathers(*back));
  EXPECT_TRUE(verify(*back).isOk()) << verify(*back).message();
  for (auto &prog : back->programs)
    prog.erase(std::remove_if(prog.begin(), prog.end(),
                              [](const Action &a) { return a.isParamGather(); }),
               prog.end());
  EXPECT_EQ(exportCsv(*back), exportCsv(zb));
  EXPECT_EQ(fsdp, 2 * 2); // REDUCE_GRAD and its wait
  EXPECT_EQ(waits, 2 * 2); // one per send
  // A schedule with its own gathers (ZeRO-3) has them where they stand,
  // in both dialects, and imports back to the same actions.
  Schedule z = handZB(2, 2, 1);
  ASSERT_TRUE(insertComm(z).isOk());
  ASSERT_TRUE(insertParamGathers(z, 0).isOk());
  std::string zc = exportCsv(z, pt);
  EXPECT_EQ(zc.find("0UNSHARD,0F0"), 0u) << zc;
  EXPECT_NE(zc.find("1RECV_F0,1UNSHARD,1F0"), std::string::npos) << zc;
  EXPECT_NE(zc.find("0W1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD"),
            std::string::npos)
      << zc;
  std::string own = exportCsv(z);
  EXPECT_NE(own.find("1RECV_F0,1UNSHARD,1F0"), std::string::npos) << own;
  auto zback = importCsv(own);
  ASSERT_TRUE(zback.isOk()) << zback.message();
  EXPECT_EQ(zback->programs, z.programs);
  CsvOptions computeOnly;
  computeOnly.withComm = false;
  EXPECT_EQ(exportCsv(z, computeOnly).find("UNSHARD"), std::string::npos);
  // Two copies: refused, with the reason; no rows in PyTorch's dialect.
  Schedule dual = gen(ScheduleKind::DualPipe, 4, 16);
  ASSERT_TRUE(insertComm(dual).isOk());
  Status st = pytorchCsvSupported(dual);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("maps each stage index to one rank"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(exportCsv(dual, pt), "");
  EXPECT_TRUE(pytorchCsvSupported(gen(ScheduleKind::DualPipeV, 4, 8)).isOk());
}

TEST(ExportTest, CsvOverlapCell) {
  std::string c = exportCsv(handVOverlap());
  EXPECT_NE(c.find(",(3F1;3B0)OVERLAP_F_B,"), std::string::npos) << c;
}

TEST(ExportTest, CsvRoundTrip) {
  struct Case {
    Schedule s;
    bool needsPlacement;
  };
  std::vector<Case> cases = {
      {handZB(4, 8, 1), false},
      {hand1F1B(3, 5), false},
      {handVOverlap(), false},
      {gen(ScheduleKind::Interleaved, 4, 8), false},
      {gen(ScheduleKind::ZBV, 4, 8), false},
      {gen(ScheduleKind::DualPipeV, 4, 16), false},
      {gen(ScheduleKind::DualPipe, 4, 16), true},
  };
  for (Case &c : cases)
    for (bool comm : {false, true}) {
      Schedule s = c.s;
      if (comm) {
        ASSERT_TRUE(insertComm(s).isOk()) << s.name;
      }
      CsvImportOptions io;
      if (c.needsPlacement)
        io.placement = s.placement;
      Expected<Schedule> back = importCsv(exportCsv(s), io);
      ASSERT_TRUE(back) << s.name << ": " << back.message();
      EXPECT_EQ(back->hasComm, s.hasComm);
      EXPECT_EQ(back->numMicrobatches, s.numMicrobatches) << s.name;
      EXPECT_EQ(back->placement.rankOf, s.placement.rankOf) << s.name;
      expectSamePrograms(s, *back);
      EXPECT_TRUE(verify(*back).isOk()) << s.name;
    }
}

TEST(ExportTest, CsvPyTorchStrictDropsGradReduce) {
  Schedule s = gen(ScheduleKind::DualPipe, 4, 16);
  ASSERT_TRUE(insertComm(s).isOk());
  EXPECT_NE(exportCsv(s).find("GRADREDUCE_r3"), std::string::npos);
  CsvOptions strict;
  strict.pytorchStrict = true;
  EXPECT_EQ(exportCsv(s, strict).find("GRADREDUCE"), std::string::npos);
}

TEST(ExportTest, CsvImportErrorsNameRowAndColumn) {
  auto errOf = [](const std::string &csv, CsvImportOptions o = {}) {
    Expected<Schedule> s = importCsv(csv, o);
    EXPECT_FALSE(s);
    return s.message();
  };
  auto has = [](const std::string &msg, const std::string &part) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  has(errOf("0F0,0X1\n1F0\n"), "csv row 0, column 1: \"0X1\": unknown kind");
  has(errOf("0F0\nF1\n"), "csv row 1, column 0: \"F1\": expected <stage>");
  has(errOf("0F0,0F\n"), "csv row 0, column 1: \"0F\": missing microbatch");
  has(errOf("0F0,0F1x\n"), "column 1: \"0F1x\": trailing characters");
  has(errOf("0F0,(0F1;0F2)OVERLAP_F_B\n"),
      "column 1: \"(0F1;0F2)OVERLAP_F_B\": an overlapped pair must be an F "
      "then a B or I");
  has(errOf("0F0,(0F1,0B0)OVERLAP\n"), "row 0, column 1");
  // FSDP's gradient reductions are skipped (counted), not errors; its
  // UNSHARD / RESHARD are ZeRO-3's gathers; a malformed one is an error.
  {
    int64_t skipped = 0;
    CsvImportOptions o;
    o.ignoredFsdpActions = &skipped;
    auto s = importCsv("0UNSHARD,0F0,0B0,0RESHARD,0REDUCE_GRAD\n", o);
    ASSERT_TRUE(s) << s.message();
    EXPECT_EQ(skipped, 1);
    ASSERT_EQ(s->programs[0].size(), 4u);
    EXPECT_EQ(toString(s->programs[0][0]), "UNSHARD 0");
    EXPECT_EQ(toString(s->programs[0][3]), "RESHARD 0");
  }
  has(errOf("0F0,0UNSHARD1x\n"),
      "column 1: \"0UNSHARD1x\": expected <stage>UNSHARD or "
      "<stage>UNSHARD<microbatch>");
  has(errOf("0F0,0B0,1UNSHARD\n1F0,1B0\n"),
      "\"1UNSHARD\": stage 1 is placed on rank 1: a rank gathers only the "
      "stages it computes");
  has(errOf("0F0,0B0,3RESHARD\n"),
      "\"3RESHARD\": stage 3 is out of range (1 stages)");
  has(errOf("0F0,0REDUCE_GRAD1x\n"),
      "column 1: \"0REDUCE_GRAD1x\": REDUCE_GRAD has no PipeForge "
      "counterpart and is skipped, but only as a cell of its own");
  // The whole kind is read: a wait is not "W" followed by garbage.
  has(errOf("0F0,0WAIT_RECV_F1\n"),
      "column 1: \"0WAIT_RECV_F1\": unknown kind 'WAIT_RECV_F' (known: F, I, "
      "W, B,");
  has(errOf("0F0,0f1\n"), "unknown kind 'f'");
  has(errOf("0F0,(0F1;0WAIT_SEND_F1)OVERLAP_F_B\n"),
      "WAIT_SEND_F has no PipeForge counterpart and is skipped, but only as a "
      "cell of its own");
  has(errOf("0F0,GRADREDUCE_rx\n"), "expected GRADREDUCE_r<peer rank>");
  has(errOf("0F0,1F0\n1F1\n"),
      "csv row 1, column 0: \"1\": stage 1 is also computed on row 0");
  has(errOf("0F0\n2F0\n"), "stage 1 is never computed");
  CsvImportOptions lin;
  lin.placement = Placement::linear(2);
  has(errOf("0F0\n5F0\n", lin), "csv row 1, column 0: \"5F0\": stage 5 is out "
                                "of range (2 stages)");
  has(errOf("1F0\n0F0\n", lin), "stage 1 is placed on rank 1");
  has(errOf("0F0\n", lin), "1 rows but the placement has 2 ranks");
  has(errOf(""), "csv: no rows");
}

TEST(ExportTest, CsvSkipsWaitsAndFsdpActions) {
  // PyTorch's waits for a posted send and FSDP's gradient wait are
  // skipped and counted, with or without a microbatch.
  int64_t fsdp = 0, waits = 0;
  CsvImportOptions o;
  o.ignoredFsdpActions = &fsdp;
  o.ignoredWaitActions = &waits;
  auto s = importCsv("0F0,0SEND_F0,0WAIT_SEND_F0,0RECV_B0,0B0,"
                     "0WAIT_REDUCE_GRAD\n"
                     "1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0,1REDUCE_GRAD\n",
                     o);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(fsdp, 2);
  EXPECT_EQ(waits, 2);
  EXPECT_EQ(s->programs[0].size(), 4u);
  EXPECT_EQ(s->programs[1].size(), 4u);
  EXPECT_TRUE(verify(*s).isOk()) << verify(*s).message();
}

TEST(ExportTest, CsvRowsFollowOneRule) {
  auto errOf = [](const std::string &csv) {
    Expected<Schedule> s = importCsv(csv);
    EXPECT_FALSE(s) << csv;
    return s ? std::string() : s.message();
  };
  auto has = [](const std::string &msg, const std::string &part) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  // A row of only skipped cells is an error wherever it is (it was an idle
  // rank in the middle and dropped at the end).
  has(errOf("0F0,0B0\n1UNSHARD,1RESHARD\n1F0,1B0\n"),
      "csv row 1 (line 2) holds no compute cell (F, I, W, B or an overlapped "
      "pair), only 2 message, gather, FSDP or wait cell(s)");
  has(errOf("0F0,1F0,1B0,0B0\n0UNSHARD\n"), "csv row 1 (line 2) holds no "
                                             "compute cell");
  has(errOf("0UNSHARD\n0F0,1F0,1B0,0B0\n"), "csv row 0 (line 1) holds no "
                                             "compute cell");
  // Messages alone are no compute either.
  has(errOf("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0\n"),
      "csv row 1 (line 2) holds no compute cell");
  // A line of empty cells is blank, like an empty line: skipped at the
  // ends, an error between rows.
  has(errOf("0F0,0B0\n,,\n1F0,1B0\n"), "csv: line 2 is blank between rows");
  auto s = importCsv(",,\n\n0F0,0SEND_F0,0RECV_B0,0B0\n"
                     "1RECV_F0,1F0,1B0,1SEND_B0\n , ,\n\n");
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->numRanks(), 2);
}

TEST(ExportTest, CsvImportsPyTorchText) {
  // As PyTorch writes a 2-stage 1F1B with comms (CRLF line ends, blanks).
  std::string csv = "0F0,0SEND_F0,0RECV_B0,0B0\r\n"
                    "1RECV_F0, 1F0 ,1B0,1SEND_B0,\r\n";
  Expected<Schedule> s = importCsv(csv);
  ASSERT_TRUE(s) << s.message();
  EXPECT_TRUE(s->hasComm);
  EXPECT_EQ(s->programs[1].size(), 4u);
  EXPECT_TRUE(s->programs[1][3] ==
              Action::send(Payload::Gradient, wk(WorkKind::BW, 1, 0), 0));
  EXPECT_TRUE(s->programs[0][2] ==
              Action::recv(Payload::Gradient, wk(WorkKind::BW, 1, 0), 1));
  EXPECT_TRUE(verify(*s).isOk()) << verify(*s).message();
}

// --- SVG --------------------------------------------------------------------

TEST(ExportTest, SvgTimeline) {
  Schedule s = handVOverlap();
  insertCommByTime(s);
  CostModel cost;
  cost.tcomm = 0.2;
  SimResult r = sim(s, cost);
  std::string svg = exportSvg(s, r);
  std::ofstream("/tmp/pipeforge-export-test.svg") << svg;
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find(">rank 0<"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1<"), std::string::npos);
  EXPECT_NE(svg.find("F&amp;B overlapped"), std::string::npos); // legend
  EXPECT_NE(svg.find(">time<"), std::string::npos);             // axis
  // Distinct colours per kind: 4 plain F per rank 0 program (F0.0 F0.1
  // F3.0) + 4 on rank 1 -> 7 F rects plus the legend swatch.
  EXPECT_EQ(count(svg, "fill=\"#4e79a7\""), 7u + 1);
  EXPECT_EQ(count(svg, "fill=\"#b07aa1\""), 1u + 1); // one FB pair
  EXPECT_EQ(count(svg, "fill=\"#f28e2b\""), 7u + 1); // 7 BW
  EXPECT_NE(svg.find(">1|0<"), std::string::npos);   // pair label
  // One arrow per message.
  size_t msgs = 0;
  for (const auto &p : s.programs)
    for (const Action &a : p)
      msgs += a.kind == ActionKind::Send;
  EXPECT_EQ(count(svg, "marker-end="), msgs);
}

TEST(ExportTest, SvgSplitBackwardColours) {
  Schedule s = handZB(2, 2, 1);
  std::string svg = exportSvg(s, sim(s));
  EXPECT_EQ(count(svg, "fill=\"#59a14f\""), 4u + 1); // B
  EXPECT_EQ(count(svg, "fill=\"#edc948\""), 4u + 1); // W
  EXPECT_EQ(count(svg, "marker-end="), 0u);
}

// --- Chrome trace -------------------------------------------------------------

TEST(ExportTest, TraceWithMessages) {
  Schedule s = gen(ScheduleKind::ZBH1, 4, 8);
  ASSERT_TRUE(insertComm(s).isOk());
  CostModel cost;
  cost.tcomm = 0.1;
  SimResult r = sim(s, cost);
  Json t = Json::parse(exportTrace(s, r));
  size_t x = 0, flowS = 0, flowF = 0, threads = 0, recvs = 0;
  for (const Json &e : t["traceEvents"]) {
    std::string ph = e["ph"];
    x += ph == "X";
    flowS += ph == "s";
    flowF += ph == "f";
    if (ph == "M" && e["name"] == "thread_name")
      ++threads;
    if (ph == "X" && e["tid"] == 1 && e["name"].get<std::string>().rfind(
                                          "RECV", 0) == 0)
      ++recvs;
    if (ph == "X" && e["tid"] == 0) {
      EXPECT_TRUE(e["args"].contains("mb"));
    }
  }
  EXPECT_EQ(x, r.intervals.size());
  EXPECT_EQ(threads, 8u); // compute + comm per rank
  EXPECT_EQ(flowS, recvs);
  EXPECT_EQ(flowF, recvs);
  EXPECT_GT(recvs, 0u);
  EXPECT_EQ(t["displayTimeUnit"], "ms");
}

TEST(ExportTest, TraceComputeOnlyFlowsFollowDependencies) {
  Schedule s = handGPipe(3, 2);
  Json t = Json::parse(exportTrace(s, sim(s)));
  size_t flows = 0;
  for (const Json &e : t["traceEvents"])
    flows += e["ph"] == "s";
  // 2 microbatches x (2 activation + 2 gradient edges).
  EXPECT_EQ(flows, 8u);
}

} // namespace
