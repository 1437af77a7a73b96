//===- ProgramTest.cpp - Program file round trip, corruption, validation --===//

#include "pipeforge/rt/Program.h"

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>

using namespace pipeforge;
using namespace pipeforge::rt;

namespace {

/// Builds a Function value by value.
struct Fn {
  Function f;
  int32_t value(TensorType t) {
    f.values.push_back(std::move(t));
    return int32_t(f.values.size() - 1);
  }
  int32_t arg(ArgRole r, int32_t idx, TensorType t) {
    int32_t v = value(std::move(t));
    f.args.push_back({r, idx, v});
    return v;
  }
  int32_t kernel(const std::string &op, std::vector<int32_t> in, TensorType out,
                 std::map<std::string, AttrValue> attrs = {}) {
    int32_t v = value(std::move(out));
    f.kernels.push_back({op, std::move(attrs), std::move(in), {v}});
    return v;
  }
  void result(ResultRole r, int32_t idx, int32_t v) {
    f.results.push_back({r, idx, v});
  }
  /// One buffer per value.
  Function done() {
    f.buffer.clear();
    f.bufferBytes.clear();
    for (size_t v = 0; v < f.values.size(); ++v) {
      f.buffer.push_back(int32_t(v));
      f.bufferBytes.push_back(f.values[v].numBytes());
    }
    return f;
  }
};

TensorType f32(std::vector<int64_t> s) { return {DType::F32, std::move(s)}; }
TensorType i32(std::vector<int64_t> s) { return {DType::I32, std::move(s)}; }

/// Two stages (embedding | linear + cross entropy), 1F1B on 2 ranks, 4
/// microbatches, messages included.
Program makeProgram() {
  Program p;
  p.model = {"toy", 8, 4, 2};
  p.training.schedule = "1f1b";
  p.training.pipelineRanks = 2;
  p.training.microbatches = 4;
  p.training.seed = 42;
  p.params.push_back({"wte", f32({8, 3}), "normal:0.02", 0, 0});
  p.params.push_back({"head", f32({8, 3}), "zeros", 0, 1});

  TensorType tok = i32({2, 4}), h = f32({2, 4, 3}), logits = f32({2, 4, 8}),
             scalar = f32({});
  Stage s0;
  s0.copy = 0, s0.index = 0, s0.rank = 0, s0.chunk = 0;
  s0.numStash = 1, s0.numWStash = 1;
  {
    Fn F;
    int32_t t = F.arg(ArgRole::Tokens, 0, tok);
    int32_t w = F.arg(ArgRole::Param, 0, f32({8, 3}));
    int32_t y = F.kernel("embedding", {t, w, -1}, h,
                         {{"scale", 1.5}, {"has_positions", false}});
    F.result(ResultRole::Activation, 0, y);
    F.result(ResultRole::Stash, 0, t);
    s0.forward = F.done();
    Fn B;
    B.arg(ArgRole::Stash, 0, tok);
    int32_t dy = B.arg(ArgRole::GradIn, 0, h);
    B.result(ResultRole::WStash, 0, dy);
    s0.backwardInput = B.done();
    Fn W;
    int32_t wt = W.arg(ArgRole::Stash, 0, tok);
    int32_t wdy = W.arg(ArgRole::WStash, 0, h);
    int32_t dw = W.kernel("embedding_bwd_weight", {wt, wdy}, f32({8, 3}),
                          {{"vocab", int64_t(8)}});
    W.result(ResultRole::ParamGrad, 0, dw);
    s0.backwardWeight = W.done();
    Fn BW;
    int32_t bt = BW.arg(ArgRole::Stash, 0, tok);
    int32_t bdy = BW.arg(ArgRole::GradIn, 0, h);
    int32_t bdw = BW.kernel("embedding_bwd_weight", {bt, bdy}, f32({8, 3}),
                            {{"vocab", int64_t(8)}});
    BW.result(ResultRole::ParamGrad, 0, bdw);
    s0.backward = BW.done();
  }
  Stage s1;
  s1.copy = 0, s1.index = 1, s1.rank = 1, s1.chunk = 0;
  s1.numStash = 2, s1.numWStash = 1;
  {
    Fn F;
    int32_t x = F.arg(ArgRole::Activation, 0, h);
    int32_t w = F.arg(ArgRole::Param, 1, f32({8, 3}));
    int32_t tg = F.arg(ArgRole::Targets, 0, tok);
    int32_t lg = F.kernel("linear", {x, w, -1}, logits, {{"has_bias", false}});
    int32_t loss = F.kernel("cross_entropy", {lg, tg}, scalar,
                            {{"reduction", std::string("mean")}});
    F.result(ResultRole::Loss, 0, loss);
    F.result(ResultRole::Stash, 0, x);
    F.result(ResultRole::Stash, 1, lg);
    s1.forward = F.done();
    Fn B;
    int32_t bw = B.arg(ArgRole::Param, 1, f32({8, 3}));
    int32_t blg = B.arg(ArgRole::Stash, 1, logits);
    int32_t btg = B.arg(ArgRole::Targets, 0, tok);
    int32_t seed = B.arg(ArgRole::GradIn, 0, scalar);
    int32_t dlg = B.kernel("cross_entropy_bwd", {blg, btg, seed}, logits);
    int32_t dx = B.kernel("linear_bwd_input", {dlg, bw}, h);
    B.result(ResultRole::GradOut, 0, dx);
    B.result(ResultRole::WStash, 0, dlg);
    s1.backwardInput = B.done();
    Fn W;
    int32_t wx = W.arg(ArgRole::Stash, 0, h);
    int32_t wd = W.arg(ArgRole::WStash, 0, logits);
    int32_t dw = W.kernel("linear_bwd_weight", {wx, wd}, f32({8, 3}));
    W.result(ResultRole::ParamGrad, 1, dw);
    s1.backwardWeight = W.done();
    Fn BW;
    int32_t cw = BW.arg(ArgRole::Param, 1, f32({8, 3}));
    int32_t cx = BW.arg(ArgRole::Stash, 0, h);
    int32_t clg = BW.arg(ArgRole::Stash, 1, logits);
    int32_t ctg = BW.arg(ArgRole::Targets, 0, tok);
    int32_t cs = BW.arg(ArgRole::GradIn, 0, scalar);
    int32_t cdl = BW.kernel("cross_entropy_bwd", {clg, ctg, cs}, logits);
    int32_t cdx = BW.kernel("linear_bwd_input", {cdl, cw}, h);
    int32_t cdw = BW.kernel("linear_bwd_weight", {cx, cdl}, f32({8, 3}));
    BW.result(ResultRole::GradOut, 0, cdx);
    BW.result(ResultRole::ParamGrad, 1, cdw);
    s1.backward = BW.done();
  }
  p.stages = {s0, s1};
  auto s = sched::generate(sched::ScheduleKind::OneFOneB, {2, 4, 2});
  EXPECT_TRUE(s.isOk()) << s.message();
  p.schedule = s.take();
  EXPECT_TRUE(sched::insertComm(p.schedule).isOk());
  return p;
}

void setU32(std::string &b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    b[at + i] = char((v >> (8 * i)) & 0xff);
}
void setU64(std::string &b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    b[at + i] = char((v >> (8 * i)) & 0xff);
}
/// Replaces the body and fixes the header's length and checksum.
std::string withBody(const std::string &file, const std::string &body) {
  std::string out = file.substr(0, kProgramHeaderSize) + body;
  setU64(out, 16, body.size());
  setU64(out, 24, programChecksum(body));
  return out;
}
std::string bodyOf(const std::string &file) {
  return file.substr(kProgramHeaderSize);
}

std::string parseError(const std::string &bytes) {
  auto r = parseProgram(bytes);
  return r.isOk() ? std::string("<ok>") : r.message();
}

/// The error of validateProgram(p), which the loader must report too.
std::string semanticError(Program p) {
  Status st = validateProgram(p);
  std::string v = st.isOk() ? "<ok>" : st.message();
  EXPECT_EQ(parseError(serializeProgram(p)), v);
  return v;
}

#define EXPECT_CONTAINS(hay, needle)                                           \
  EXPECT_NE(std::string(hay).find(needle), std::string::npos)                  \
      << "expected \"" << (needle) << "\" in: " << (hay)

//===----------------------------------------------------------------------===//
// Round trip
//===----------------------------------------------------------------------===//

TEST(Program, Valid) {
  Program p = makeProgram();
  Status st = validateProgram(p);
  EXPECT_TRUE(st.isOk()) << st.message();
}

// The validator resolves every kernel's mnemonic to its op kind, once: the
// runtime dispatches on Kernel::kind.
TEST(Program, ValidateResolvesOpKinds) {
  Program p = makeProgram();
  EXPECT_EQ(p.stages[1].forward.kernels[1].kind, OpKind::Unknown);
  ASSERT_TRUE(validateProgram(p).isOk());
  int n = 0;
  for (const Stage &s : p.stages)
    for (FunctionKind k :
         {FunctionKind::Forward, FunctionKind::BackwardInput,
          FunctionKind::BackwardWeight, FunctionKind::Backward})
      for (const Kernel &kn : stageFunction(s, k).kernels) {
        EXPECT_NE(kn.kind, OpKind::Unknown) << kn.op;
        EXPECT_STREQ(opName(kn.kind), kn.op.c_str());
        ++n;
      }
  EXPECT_GT(n, 0);
  EXPECT_EQ(p.stages[1].forward.kernels[1].kind, OpKind::CrossEntropy);
}

TEST(Program, RoundTrip) {
  Program p = makeProgram();
  std::string bytes = serializeProgram(p);
  ASSERT_EQ(bytes.substr(0, 8), std::string("PFPROG\0\0", 8));
  auto q = parseProgram(bytes);
  ASSERT_TRUE(q.isOk()) << q.message();
  EXPECT_EQ(serializeProgram(*q), bytes);
  EXPECT_EQ(q->model.name, "toy");
  EXPECT_EQ(q->training.seed, 42u);
  ASSERT_EQ(q->params.size(), 2u);
  EXPECT_EQ(q->params[1].name, "head");
  EXPECT_EQ(q->params[1].init, "zeros");
  EXPECT_EQ(q->params[1].stage, 1);
  ASSERT_EQ(q->stages.size(), 2u);
  const Kernel &emb = q->stages[0].forward.kernels[0];
  EXPECT_EQ(emb.op, "embedding");
  EXPECT_EQ(emb.kind, OpKind::Embedding); // resolved on load
  EXPECT_EQ(emb.inputs, (std::vector<int32_t>{0, 1, -1}));
  ASSERT_TRUE(std::holds_alternative<double>(emb.attrs.at("scale")));
  EXPECT_EQ(std::get<double>(emb.attrs.at("scale")), 1.5);
  ASSERT_TRUE(std::holds_alternative<bool>(emb.attrs.at("has_positions")));
  const Kernel &ce = q->stages[1].forward.kernels[1];
  EXPECT_EQ(std::get<std::string>(ce.attrs.at("reduction")), "mean");
  const Kernel &ew = q->stages[0].backwardWeight.kernels[0];
  ASSERT_TRUE(std::holds_alternative<int64_t>(ew.attrs.at("vocab")));
  EXPECT_EQ(q->stages[1].backwardInput.args[3].role, ArgRole::GradIn);
  EXPECT_EQ(q->stages[1].backwardInput.results[1].role, ResultRole::WStash);
  EXPECT_EQ(q->schedule.programs, p.schedule.programs);
  EXPECT_EQ(q->schedule.placement.rankOf, p.schedule.placement.rankOf);
  EXPECT_TRUE(q->schedule.hasComm);
}

TEST(Program, DoubleAttrsExact) {
  Program p = makeProgram();
  p.stages[0].forward.kernels[0].attrs["eps"] = 1e-5;
  p.stages[0].forward.kernels[0].attrs["one"] = 1.0;
  p.stages[0].forward.kernels[0].attrs["neg"] = int64_t(-7);
  auto q = parseProgram(serializeProgram(p));
  ASSERT_TRUE(q.isOk()) << q.message();
  const auto &a = q->stages[0].forward.kernels[0].attrs;
  EXPECT_EQ(std::get<double>(a.at("eps")), 1e-5);
  EXPECT_EQ(std::get<double>(a.at("one")), 1.0);
  EXPECT_EQ(std::get<int64_t>(a.at("neg")), -7);
}

TEST(Program, WriteRead) {
  Program p = makeProgram();
  std::string path = ::testing::TempDir() + "/prog-test.pfp";
  ASSERT_TRUE(writeProgram(p, path).isOk());
  auto q = readProgram(path);
  ASSERT_TRUE(q.isOk()) << q.message();
  EXPECT_EQ(serializeProgram(*q), serializeProgram(p));
  std::remove(path.c_str());
  auto missing = readProgram(path);
  ASSERT_FALSE(missing.isOk());
  EXPECT_CONTAINS(missing.message(), "cannot open program file");
}

TEST(Program, ReadErrorNamesFile) {
  std::string path = ::testing::TempDir() + "/prog-bad.pfp";
  {
    std::ofstream os(path, std::ios::binary);
    os << "garbage that is not a program";
  }
  auto q = readProgram(path);
  ASSERT_FALSE(q.isOk());
  EXPECT_EQ(q.message(), path + ": not a PipeForge program file (bad magic)");
  std::remove(path.c_str());
}

TEST(Program, Dump) {
  std::string d = dumpProgram(makeProgram());
  EXPECT_CONTAINS(d, "program toy (format version 1)");
  EXPECT_CONTAINS(d, "training: schedule 1f1b, pipeline_ranks 2");
  EXPECT_CONTAINS(d, "#1 head : f32[8x3] zeros -> stage 1 (copy 0)");
  EXPECT_CONTAINS(d, "stage 1 (copy 0) on rank 1 chunk 0: num_stash 2, "
                     "num_wstash 1");
  EXPECT_CONTAINS(d, "arg %1 = param 0 (wte) : f32[8x3] b1");
  EXPECT_CONTAINS(d, "%2 = embedding(%0, %1, _) {has_positions=false, "
                     "scale=1.5} : f32[2x4x3] b2");
  EXPECT_CONTAINS(d, "result wstash 0 = %4");
  EXPECT_CONTAINS(d, "schedule 1f1b: 2 ranks, 2 stages x 1 copy, 4 "
                     "microbatches per copy, with messages");
  EXPECT_CONTAINS(d, "SEND act F0.0 ->r1");
}

/// Stage 1 split into components (--pp-split-components): forward
/// [linear | cross_entropy] as layers 0 and 1; its fused backward
/// [cross_entropy_bwd | linear_bwd_input, linear_bwd_weight] in reverse.
Program withComponents() {
  Program p = makeProgram();
  p.stages[1].forward.components = {{"attn", 0, 0, 1}, {"mlp", 1, 1, 2}};
  p.stages[1].backward.components = {{"mlp", 1, 0, 1}, {"attn", 0, 1, 3}};
  return p;
}

TEST(Program, ComponentsRoundTrip) {
  // Absent when empty: programs without components are unchanged.
  EXPECT_EQ(bodyOf(serializeProgram(makeProgram())).find("\"components\""),
            std::string::npos);
  Program p = withComponents();
  EXPECT_TRUE(validateProgram(p).isOk()) << validateProgram(p).message();
  std::string bytes = serializeProgram(p);
  EXPECT_CONTAINS(bodyOf(bytes), "\"components\": [");
  auto q = parseProgram(bytes);
  ASSERT_TRUE(q.isOk()) << q.message();
  EXPECT_EQ(serializeProgram(*q), bytes);
  const auto &fc = q->stages[1].forward.components;
  ASSERT_EQ(fc.size(), 2u);
  EXPECT_EQ(fc[1].kind, "mlp");
  EXPECT_EQ(fc[1].layer, 1);
  EXPECT_EQ(fc[1].begin, 1);
  EXPECT_EQ(fc[1].end, 2);
  const auto &bc = q->stages[1].backward.components;
  ASSERT_EQ(bc.size(), 2u);
  EXPECT_EQ(bc[1].kind, "attn");
  EXPECT_EQ(bc[1].end, 3);
  EXPECT_TRUE(q->stages[1].backwardInput.components.empty());
  EXPECT_TRUE(q->stages[0].forward.components.empty());
  std::string d = dumpProgram(*q);
  EXPECT_CONTAINS(d, "    component mlp layer 1: kernels [1, 2)\n");
  EXPECT_CONTAINS(d, "    component attn layer 0: kernels [1, 3)\n");
}

TEST(Program, ExpertShardedRoundTrip) {
  // Absent when false: programs without expert parallelism are unchanged.
  EXPECT_EQ(bodyOf(serializeProgram(makeProgram())).find("expert_sharded"),
            std::string::npos);
  Program p = makeProgram();
  p.training.expertParallel = 2;
  p.params[1].expertSharded = true; // head: 8 rows split over 2 ranks
  ASSERT_TRUE(validateProgram(p).isOk()) << validateProgram(p).message();
  std::string bytes = serializeProgram(p);
  EXPECT_CONTAINS(bodyOf(bytes), "\"expert_sharded\": true");
  auto q = parseProgram(bytes);
  ASSERT_TRUE(q.isOk()) << q.message();
  EXPECT_FALSE(q->params[0].expertSharded);
  EXPECT_TRUE(q->params[1].expertSharded);
  EXPECT_EQ(serializeProgram(*q), bytes);
  EXPECT_CONTAINS(dumpProgram(*q), "(copy 0), expert-sharded\n");
}

TEST(Program, TiedRoundTrip) {
  EXPECT_EQ(bodyOf(serializeProgram(makeProgram())).find("tied_to"),
            std::string::npos);
  Program p = makeProgram();
  p.params[1].tiedTo = "wte"; // head [8x3] is a copy of wte [8x3]
  ASSERT_TRUE(validateProgram(p).isOk()) << validateProgram(p).message();
  std::string bytes = serializeProgram(p);
  EXPECT_CONTAINS(bodyOf(bytes), "\"tied_to\": \"wte\"");
  auto q = parseProgram(bytes);
  ASSERT_TRUE(q.isOk()) << q.message();
  EXPECT_EQ(q->params[0].tiedTo, "");
  EXPECT_EQ(q->params[1].tiedTo, "wte");
  EXPECT_EQ(serializeProgram(*q), bytes);
  EXPECT_CONTAINS(dumpProgram(*q), "(copy 0), tied to wte\n");
}

TEST(ProgramValidate, Tied) {
  Program p = makeProgram();
  p.params[1].tiedTo = "nope";
  EXPECT_EQ(semanticError(p),
            "param 1 'head': tied_to 'nope' is not a parameter");
  p.params[1].tiedTo = "head";
  EXPECT_EQ(semanticError(p), "param 1 'head': tied_to 'head' is itself "
                              "tied (ties are one level deep)");
  p.params[1].tiedTo = "wte";
  p.params[0].tiedTo = "head";
  EXPECT_EQ(semanticError(p), "param 0 'wte': tied_to 'head' is itself "
                              "tied (ties are one level deep)");
  p = makeProgram();
  p.params[1].tiedTo = "wte";
  p.params[1].type = f32({3, 8});
  EXPECT_EQ(semanticError(p), "param 1 'head': tied_to 'wte' differs in "
                              "model copy, shape or split (f32[8x3] vs "
                              "f32[3x8])");
}

TEST(ProgramValidate, ExpertSharded) {
  Program p = makeProgram();
  p.params[1].expertSharded = true;
  EXPECT_EQ(semanticError(p), "param 1 (head): expert-sharded, but "
                              "training.expert_parallel is 1");
  p.training.expertParallel = 3;
  EXPECT_EQ(semanticError(p), "param 1 (head): expert-sharded f32[8x3]: 8 "
                              "experts do not split over 3 ranks");
}

TEST(ProgramValidate, Components) {
  Program p = withComponents();
  p.stages[1].forward.components[1].begin = 2;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: component 1 (mlp layer 1, kernels [2, "
            "2)): starts at kernel 2 but the previous component ends at 1 "
            "(components must tile the kernels in order)");
  p = withComponents();
  p.stages[1].forward.components.pop_back();
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) forward: components cover "
                              "kernels [0, 1) of 2");
  p = withComponents();
  p.stages[1].forward.components[1].end = 3;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: component 1 (mlp layer 1, kernels [1, "
            "3)): empty or past the last kernel (2 kernels)");
  p = withComponents();
  p.stages[1].forward.components[0].kind = "combine";
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: component 0 (combine layer 0, kernels "
            "[0, 1)): unknown kind \"combine\" (attn, mlp)");
  p = withComponents();
  p.stages[1].forward.components[1].layer = -1;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: component 1 (mlp layer -1, kernels [1, "
            "2)): negative layer");
  p = withComponents();
  std::swap(p.stages[1].forward.components[0].layer,
            p.stages[1].forward.components[1].layer);
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: component 1 (mlp layer 0, kernels [1, "
            "2)): layer 0 after 1 (layers must be non-decreasing in forward)");
  p = withComponents();
  std::swap(p.stages[1].backward.components[0].layer,
            p.stages[1].backward.components[1].layer);
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) backward: component 1 (attn layer 1, kernels "
            "[1, 3)): layer 1 after 0 (layers must be non-increasing in a "
            "backward function)");
  // The reader checks the fields' types like everywhere else.
  std::string bytes = serializeProgram(withComponents());
  std::string body = bodyOf(bytes);
  size_t at = body.find("\"layer\": 0", body.find("\"components\""));
  ASSERT_NE(at, std::string::npos);
  body.replace(at, 10, "\"layer\": \"0\"");
  EXPECT_EQ(parseError(withBody(bytes, body)),
            "program body: stages[1].forward.components[0].layer: expected an "
            "integer");
}

//===----------------------------------------------------------------------===//
// Header and body corruption
//===----------------------------------------------------------------------===//

TEST(ProgramFile, Empty) { EXPECT_EQ(parseError(""), "empty program file"); }

TEST(ProgramFile, BadMagic) {
  std::string b = serializeProgram(makeProgram());
  b[2] = 'X';
  EXPECT_EQ(parseError(b), "not a PipeForge program file (bad magic)");
  EXPECT_EQ(parseError("{\"format\": 1}"),
            "not a PipeForge program file (bad magic)");
  EXPECT_EQ(parseError("PF?"), "not a PipeForge program file (bad magic)");
}

TEST(ProgramFile, NewerVersion) {
  std::string b = serializeProgram(makeProgram());
  setU32(b, 8, 2);
  EXPECT_EQ(parseError(b), "program version 2 is newer than this runtime (1)");
  setU32(b, 8, 0);
  EXPECT_EQ(parseError(b), "program version 0 is invalid");
}

TEST(ProgramFile, Flags) {
  std::string b = serializeProgram(makeProgram());
  setU32(b, 12, 4);
  EXPECT_EQ(parseError(b), "unsupported header flags 0x4");
}

TEST(ProgramFile, TruncatedHeader) {
  std::string b = serializeProgram(makeProgram());
  for (size_t n : {3, 8, 12, 20, 31})
    EXPECT_EQ(parseError(b.substr(0, n)),
              "truncated program file: " + std::to_string(n) +
                  " bytes, the header alone is 32")
        << n;
}

TEST(ProgramFile, TruncatedBody) {
  std::string b = serializeProgram(makeProgram());
  size_t body = b.size() - 32;
  for (size_t keep : {size_t(0), size_t(1), body / 2, body - 1}) {
    EXPECT_EQ(parseError(b.substr(0, 32 + keep)),
              "truncated program file: the header announces a " +
                  std::to_string(body) + "-byte body but only " +
                  std::to_string(keep) + " bytes follow")
        << keep;
  }
}

TEST(ProgramFile, TrailingBytes) {
  std::string b = serializeProgram(makeProgram());
  size_t body = b.size() - 32;
  EXPECT_EQ(parseError(b + "x"),
            "length mismatch: the header announces a " + std::to_string(body) +
                "-byte body but " + std::to_string(body + 1) + " bytes follow");
}

TEST(ProgramFile, FlippedByte) {
  std::string b = serializeProgram(makeProgram());
  for (size_t at : {size_t(32), size_t(40), b.size() / 2, b.size() - 2}) {
    std::string c = b;
    c[at] ^= 0x01;
    EXPECT_CONTAINS(parseError(c), "checksum mismatch: the header says 0x");
    EXPECT_CONTAINS(parseError(c), "(the file is corrupt)");
  }
  // A flipped checksum byte is detected the same way.
  std::string c = b;
  c[26] ^= 0x40;
  EXPECT_CONTAINS(parseError(c), "checksum mismatch");
}

TEST(ProgramFile, InvalidJson) {
  std::string b = serializeProgram(makeProgram());
  EXPECT_CONTAINS(parseError(withBody(b, "{\"format\": ")),
                  "program body is not valid JSON: ");
  EXPECT_EQ(parseError(withBody(b, "[1, 2]")),
            "program body: body: expected a JSON object");
}

TEST(ProgramFile, BodyFields) {
  std::string b = serializeProgram(makeProgram());
  std::string body = bodyOf(b);
  auto replace = [&](const std::string &from, const std::string &to) {
    std::string s = body;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
      s.replace(at, from.size(), to);
    return parseError(withBody(b, s));
  };
  EXPECT_EQ(replace("\"pipeforge.program\"", "\"x\""),
            "program body: body.format: expected \"pipeforge.program\"");
  EXPECT_EQ(replace("\"vocab\": 8", "\"vocab\": \"8\""),
            "program body: model.vocab: expected an integer");
  EXPECT_EQ(replace("\"seq_len\"", "\"seqlen\""),
            "program body: model: missing \"seq_len\"");
  EXPECT_EQ(replace("\"dtype\": \"f32\"", "\"dtype\": \"f16\""),
            "program body: params[0].dtype: unknown dtype \"f16\" (f32, i32)");
  EXPECT_EQ(replace("\"role\": \"tokens\"", "\"role\": \"token\""),
            "program body: stages[0].forward.args[0].role: unknown argument "
            "role \"token\"");
  EXPECT_EQ(replace("\"op\": \"embedding\"", "\"op\": 3"),
            "program body: stages[0].forward.kernels[0].op: expected a string");
  EXPECT_EQ(replace("\"seed\": 42", "\"seed\": -1"),
            "program body: training.seed: expected a non-negative integer");
  EXPECT_EQ(replace("\"chunk\": 0", "\"chunk\": 99999999999"),
            "program body: stages[0].chunk: integer 99999999999 out of range "
            "[-2147483648, 2147483647]");
  EXPECT_CONTAINS(
      replace("\"format\": \"pipeforge.schedule\"", "\"format\": \"nope\""),
      "program body: schedule: json: \"format\" is not");
}

//===----------------------------------------------------------------------===//
// Semantic checks
//===----------------------------------------------------------------------===//

TEST(ProgramValidate, Settings) {
  Program p = makeProgram();
  p.model.seqLen = 0;
  EXPECT_EQ(semanticError(p), "model.seq_len must be positive (is 0)");
  p = makeProgram();
  p.training.dataParallel = 0;
  EXPECT_EQ(semanticError(p),
            "training.data_parallel must be at least 1 (is 0)");
  p = makeProgram();
  p.training.pipelineRanks = 4;
  EXPECT_EQ(semanticError(p),
            "training.pipeline_ranks is 4 but the schedule has 2 ranks");
  p = makeProgram();
  p.training.microbatches = 8;
  EXPECT_EQ(semanticError(p), "training.microbatches is 8 but the schedule "
                              "runs 4 per copy x 1 copies");
}

TEST(ProgramValidate, Params) {
  Program p = makeProgram();
  p.params[1].type.shape = {8, 0};
  EXPECT_EQ(semanticError(p), "param 1 (head): shape f32[8x0] must have "
                              "positive dimensions");
  p = makeProgram();
  p.params[1].name = "wte";
  EXPECT_EQ(semanticError(p), "param 1 (wte): name already used by param 0");
  p = makeProgram();
  p.params[0].init = "uniform";
  EXPECT_EQ(semanticError(p), "param 0 (wte): unknown init \"uniform\" "
                              "(normal:<std>, zeros, ones)");
  p = makeProgram();
  p.params[0].init = "normal:x";
  EXPECT_CONTAINS(semanticError(p), "unknown init \"normal:x\"");
  p = makeProgram();
  p.params[0].stage = 2;
  EXPECT_EQ(semanticError(p),
            "param 0 (wte): owner stage 2 (copy 0) does not exist");
}

TEST(ProgramValidate, StageRecords) {
  Program p = makeProgram();
  p.stages[1].rank = 0;
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0): rank is 0 but the schedule "
                              "places it on rank 1");
  p = makeProgram();
  p.stages[1].chunk = 1;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0): chunk is 1 but it is chunk 0 of rank 1");
  p = makeProgram();
  p.stages.pop_back();
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) has no stage record");
  p = makeProgram();
  p.stages[1].index = 0;
  EXPECT_EQ(semanticError(p), "stages[1]: stage 0 (copy 0) appears twice");
  p = makeProgram();
  p.stages[1].copy = 1;
  EXPECT_CONTAINS(semanticError(p),
                  "stages[1]: stage 1 (copy 1) is not in the schedule's "
                  "placement");
}

TEST(ProgramValidate, UndefinedValue) {
  Program p = makeProgram();
  // backward_input of stage 1: kernel 1 reads value 17.
  p.stages[1].backwardInput.kernels[1].inputs[0] = 17;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) backward_input: kernel 1 (linear_bwd_input) "
            "input 0 reads value 17, out of range (6 values)");
  p = makeProgram();
  // Read a value that a later kernel defines.
  p.stages[1].backwardInput.kernels[0].inputs[0] = 5;
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) backward_input: kernel 0 "
                              "reads value 5 before it is defined");
}

TEST(ProgramValidate, DefinedTwiceOrNever) {
  Program p = makeProgram();
  p.stages[1].forward.kernels[1].outputs[0] = 3;
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) forward: kernel 1 "
                              "(cross_entropy) output 0 defines value 3 again");
  p = makeProgram();
  p.stages[0].forward.values.push_back(f32({2}));
  p.stages[0].forward.buffer.push_back(0);
  EXPECT_EQ(semanticError(p),
            "stage 0 (copy 0) forward: value 3 is never defined");
  p = makeProgram();
  p.stages[0].forward.results[0].value = 9;
  EXPECT_EQ(semanticError(p),
            "stage 0 (copy 0) forward: result 0 "
            "(activation 0): value 9 out of range (3 values)");
}

TEST(ProgramValidate, Roles) {
  Program p = makeProgram();
  p.stages[0].forward.args[0].role = ArgRole::Stash;
  EXPECT_EQ(semanticError(p), "stage 0 (copy 0) forward: argument 0 (stash "
                              "0): role stash is not allowed in forward");
  p = makeProgram();
  p.stages[0].backwardWeight.results[0].role = ResultRole::GradOut;
  EXPECT_EQ(semanticError(p),
            "stage 0 (copy 0) backward_weight: result 0 (grad_out 0): role "
            "grad_out is not allowed in backward_weight");
  p = makeProgram();
  p.stages[1].backwardInput.args[1].index = 2;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) backward_input: argument 1 (stash 2): stash "
            "slot out of range (num_stash 2)");
  p = makeProgram();
  p.stages[1].backwardWeight.args[1].index = 1;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) backward_weight: argument 1 (wstash 1): wstash "
            "slot out of range (num_wstash 1)");
  p = makeProgram();
  p.stages[1].numStash = 3;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: stash slot 2 is never returned");
  p = makeProgram();
  p.stages[0].numWStash = 2;
  EXPECT_EQ(semanticError(p),
            "stage 0 (copy 0) backward_input: wstash slot 1 is never returned");
  p = makeProgram();
  p.stages[1].backward.args[0].index = 0;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) backward: argument 0 (param 0): param 0 (wte) "
            "belongs to stage 0 (copy 0)");
  p = makeProgram();
  p.stages[1].forward.args[1].index = 5;
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) forward: argument 1 (param "
                              "5): param index out of range (2 params)");
  p = makeProgram();
  p.stages[1].forward.args.push_back(p.stages[1].forward.args[1]);
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: argument 3 (param 1): bound twice");
}

TEST(ProgramValidate, StageEnds) {
  Program p = makeProgram();
  p.stages[0].forward.args[0].role = ArgRole::Targets;
  EXPECT_EQ(semanticError(p), "stage 0 (copy 0) forward: argument 0 (targets "
                              "0): only the last stage takes targets");
  p = makeProgram();
  p.stages[0].forward.values[0].shape = {2, 5};
  p.stages[0].forward.bufferBytes[0] = 40;
  EXPECT_EQ(semanticError(p), "stage 0 (copy 0) forward: argument 0 (tokens "
                              "0): value is i32[2x5], expected i32[2x4]");
  p = makeProgram();
  p.stages[0].forward.results[0].role = ResultRole::Loss;
  EXPECT_EQ(semanticError(p), "stage 0 (copy 0) forward: result 0 (loss 0): "
                              "only the last stage returns the loss");
  p = makeProgram();
  p.stages[1].forward.results.erase(p.stages[1].forward.results.begin());
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) forward: the last stage must "
                              "return the loss");
}

TEST(ProgramValidate, TypeWiring) {
  // Every value here feeds or comes from a kernel, so the kernel's shape
  // rules (OpShapes.h), checked while each function is read, see a changed
  // type before the wiring between functions and stages does.
  Program p = makeProgram();
  // W's wstash arg does not match B's wstash result.
  p.stages[1].backwardWeight.values[1].shape = {2, 4, 7};
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) backward_weight: kernel 0 (linear_bwd_weight) "
            "output 0 (value 2): weight_grad is f32[8x3], expected f32[7x3]");
  p = makeProgram();
  p.stages[1].forward.values[0].shape = {2, 4, 5};
  p.stages[1].forward.bufferBytes[0] = 160;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: kernel 0 (linear) input 1 (value 1): "
            "input features 5 do not match weight [8, 3] ([out, in])");
  // Activation chain between the stages.
  p = makeProgram();
  p.stages[0].forward.values[2].shape = {2, 4, 4};
  p.stages[0].forward.bufferBytes[2] = 128;
  EXPECT_EQ(semanticError(p),
            "stage 0 (copy 0) forward: kernel 0 (embedding) output 0 (value "
            "2): result is f32[2x4x4], expected f32[2x4x3]");
  p = makeProgram();
  p.stages[1].backwardWeight.values[2].shape = {3, 8};
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) backward_weight: kernel 0 (linear_bwd_weight) "
            "output 0 (value 2): weight_grad is f32[3x8], expected f32[8x3]");
  // Where no kernel is involved, the wiring check still speaks: stage 0's
  // B only forwards its gradient.
  p = makeProgram();
  p.stages[0].backwardInput.values[1].shape = {2, 4, 4};
  p.stages[0].backwardInput.bufferBytes[1] = 128;
  EXPECT_EQ(semanticError(p),
            "stage 0 (copy 0) backward_input: argument 1 (grad_in 0) is "
            "f32[2x4x4] but forward's activation result is f32[2x4x3]");
}

TEST(ProgramValidate, Buffers) {
  Program p = makeProgram();
  p.stages[1].forward.bufferBytes[3] = 16;
  EXPECT_EQ(semanticError(p),
            "stage 1 (copy 0) forward: value 3 (f32[2x4x8], 256 bytes) does "
            "not fit in buffer 3 (16 bytes)");
  p = makeProgram();
  p.stages[1].forward.buffer[3] = 7;
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) forward: value 3 is in "
                              "buffer 7, out of range (5 buffers)");
  p = makeProgram();
  // logits (3) is still live (stash result) when the loss (4) is defined.
  p.stages[1].forward.buffer[4] = 3;
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) forward: value 3 and value 4 "
                              "share buffer 3 but are live at the same time");
  p = makeProgram();
  p.stages[1].forward.buffer.pop_back();
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) forward: buffer assignment "
                              "has 4 entries for 5 values");
  // An argument's buffer is never reused, even after its last read: the
  // seed (3) of stage 1's backward_input dies at kernel 0, dx (5) is defined
  // by kernel 1.
  p = makeProgram();
  Function &b = p.stages[1].backwardInput;
  b.buffer[5] = 3;
  b.bufferBytes[3] = b.values[5].numBytes();
  EXPECT_EQ(semanticError(p), "stage 1 (copy 0) backward_input: value 3 and "
                              "value 5 share buffer 3 but are live at the "
                              "same time");
  // Reuse of a dead intermediate's buffer is fine: stage 0's forward gets
  // y -> gelu -> z -> gelu -> y2 and y2 (4) reuses y's buffer (y dies when
  // z is computed).
  p = makeProgram();
  Function &f = p.stages[0].forward;
  f.values.push_back(f32({2, 4, 3}));
  f.values.push_back(f32({2, 4, 3}));
  f.kernels.push_back({"gelu", {}, {2}, {3}});
  f.kernels.push_back({"gelu", {}, {3}, {4}});
  f.results[0].value = 4;
  f.buffer = {0, 1, 2, 3, 2};
  f.bufferBytes = {32, 96, 96, 96};
  EXPECT_EQ(semanticError(p), "<ok>");
  f.buffer = {0, 1, 2, 2, 3};
  EXPECT_EQ(semanticError(p), "stage 0 (copy 0) forward: value 2 and value 3 "
                              "share buffer 2 but are live at the same time");
}

TEST(ProgramValidate, NonFiniteAttr) {
  Program p = makeProgram();
  p.stages[0].forward.kernels[0].attrs["scale"] = 1.0 / 0.0;
  EXPECT_EQ(validateProgram(p).message(),
            "stage 0 (copy 0) forward: kernel 0 (embedding): attribute scale "
            "is not finite");
}

TEST(ProgramValidate, Schedule) {
  Program p = makeProgram();
  // Drop rank 1's last action: a backward goes missing.
  p.schedule.programs[0].pop_back();
  std::string e = semanticError(p);
  EXPECT_EQ(e.rfind("schedule: ", 0), 0u) << e;
  p = makeProgram();
  p.schedule.placement.rankOf[0][1] = 5;
  EXPECT_EQ(
      semanticError(p),
      "schedule: placement puts stage 1 (copy 0) on rank 5, out of range");
}

} // namespace

//===----------------------------------------------------------------------===//
// Size limits and model facts (docs/reliability.md)
//===----------------------------------------------------------------------===//

TEST(ProgramFile, ShapeLimits) {
  // A dimension above 2^24, or a tensor above 2^40 bytes, is an error
  // naming the field (numElements / numBytes would overflow int64_t).
  Program p = makeProgram();
  p.params[1].type.shape = {int64_t(1) << 25, 3};
  EXPECT_CONTAINS(parseError(serializeProgram(p)),
                  "params[1].shape: shape [33554432x3] has a dimension above "
                  "the limit 16777216");
  p = makeProgram();
  p.stages[0].forward.values[1].shape = {1 << 24, 1 << 24, 1 << 24};
  EXPECT_CONTAINS(parseError(serializeProgram(p)),
                  "has more than 1099511627776 bytes");
  // Never UB, even for a type nobody checked: saturated.
  TensorType t = f32({int64_t(1) << 62, 8});
  EXPECT_EQ(t.numElements(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(t.numBytes(), std::numeric_limits<int64_t>::max());
}

TEST(ProgramFile, VocabMatchesTheEmbedding) {
  Program p = makeProgram();
  p.model.vocab = 9;
  EXPECT_CONTAINS(parseError(serializeProgram(p)),
                  "model.vocab is 9 but the embedding table has 8 entries");
}
