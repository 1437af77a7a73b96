//===- Program.cpp - Program file: header, JSON body, reader, writer ------===//
//
// File = 32-byte little-endian header + JSON body (docs/program-format.md):
//
//   0  char[8]  magic "PFPROG\0\0"
//   8  u32      version (Program::kVersion)
//  12  u32      flags (0)
//  16  u64      body length in bytes
//  24  u64      FNV-1a 64 checksum of the body
//  32  body     JSON (format "pipeforge.program")
//
// The reader checks the header, then parses the JSON into the structs with a
// path in every error ("stages[2].forward.kernels[5].inputs[1]: ..."), then
// runs validateProgram.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Program.h"
#include "pipeforge/Support/Hash.h"
#include "pipeforge/Support/InputFile.h"

#include "pipeforge/Schedule/ExportJson.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include <sys/stat.h>

namespace pipeforge::rt {

using Json = nlohmann::ordered_json;

namespace {
constexpr const char *kFormat = "pipeforge.program";
} // namespace

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

const char *dtypeName(DType t) { return t == DType::I32 ? "i32" : "f32"; }

const char *argRoleName(ArgRole r) {
  switch (r) {
  case ArgRole::Activation:
    return "activation";
  case ArgRole::Tokens:
    return "tokens";
  case ArgRole::Targets:
    return "targets";
  case ArgRole::Param:
    return "param";
  case ArgRole::Stash:
    return "stash";
  case ArgRole::GradIn:
    return "grad_in";
  case ArgRole::WStash:
    return "wstash";
  }
  return "?";
}

const char *resultRoleName(ResultRole r) {
  switch (r) {
  case ResultRole::Activation:
    return "activation";
  case ResultRole::Loss:
    return "loss";
  case ResultRole::Stash:
    return "stash";
  case ResultRole::GradOut:
    return "grad_out";
  case ResultRole::WStash:
    return "wstash";
  case ResultRole::ParamGrad:
    return "param_grad";
  }
  return "?";
}

const char *functionKindName(FunctionKind k) {
  switch (k) {
  case FunctionKind::Forward:
    return "forward";
  case FunctionKind::BackwardInput:
    return "backward_input";
  case FunctionKind::BackwardWeight:
    return "backward_weight";
  case FunctionKind::Backward:
    return "backward";
  }
  return "?";
}

const Function &stageFunction(const Stage &s, FunctionKind k) {
  switch (k) {
  case FunctionKind::Forward:
    return s.forward;
  case FunctionKind::BackwardInput:
    return s.backwardInput;
  case FunctionKind::BackwardWeight:
    return s.backwardWeight;
  case FunctionKind::Backward:
    return s.backward;
  }
  return s.forward;
}
Function &stageFunction(Stage &s, FunctionKind k) {
  return const_cast<Function &>(
      stageFunction(static_cast<const Stage &>(s), k));
}

uint64_t programChecksum(const std::string &body) {
  return fnv1a64(body.data(), body.size());
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {
constexpr FunctionKind kAllKinds[] = {
    FunctionKind::Forward, FunctionKind::BackwardInput,
    FunctionKind::BackwardWeight, FunctionKind::Backward};

Json typeToJson(const TensorType &t) {
  return Json{{"dtype", dtypeName(t.dtype)}, {"shape", t.shape}};
}

Json attrToJson(const AttrValue &v) {
  if (auto *i = std::get_if<int64_t>(&v))
    return *i;
  if (auto *d = std::get_if<double>(&v))
    return *d; // nlohmann writes doubles with a '.', so they stay doubles
  if (auto *s = std::get_if<std::string>(&v))
    return *s;
  return std::get<bool>(v);
}

Json functionToJson(const Function &f) {
  Json j = Json::object();
  Json vals = Json::array();
  for (const TensorType &t : f.values)
    vals.push_back(typeToJson(t));
  j["values"] = std::move(vals);
  Json args = Json::array();
  for (const ArgBinding &a : f.args)
    args.push_back({{"role", argRoleName(a.role)},
                    {"index", a.index},
                    {"value", a.value}});
  j["args"] = std::move(args);
  Json res = Json::array();
  for (const ResultBinding &r : f.results)
    res.push_back({{"role", resultRoleName(r.role)},
                   {"index", r.index},
                   {"value", r.value}});
  j["results"] = std::move(res);
  Json ks = Json::array();
  for (const Kernel &k : f.kernels) {
    Json kj = Json::object();
    kj["op"] = k.op;
    Json attrs = Json::object();
    for (const auto &[name, v] : k.attrs)
      attrs[name] = attrToJson(v);
    kj["attrs"] = std::move(attrs);
    kj["inputs"] = k.inputs;
    kj["outputs"] = k.outputs;
    ks.push_back(std::move(kj));
  }
  j["kernels"] = std::move(ks);
  j["buffer"] = f.buffer;
  j["buffer_bytes"] = f.bufferBytes;
  if (!f.components.empty()) {
    Json cs = Json::array();
    for (const ComponentRange &c : f.components)
      cs.push_back({{"kind", c.kind},
                    {"layer", c.layer},
                    {"begin", c.begin},
                    {"end", c.end}});
    j["components"] = std::move(cs);
  }
  return j;
}

void putU32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void putU64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t getU32(const std::string &b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}
uint64_t getU64(const std::string &b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}
} // namespace

std::string serializeProgram(const Program &p) {
  Json j = Json::object();
  j["format"] = kFormat;
  j["version"] = Program::kVersion;
  j["model"] = {{"name", p.model.name},
                {"vocab", p.model.vocab},
                {"seq_len", p.model.seqLen},
                {"microbatch_size", p.model.microbatchSize}};
  if (!p.model.hfConfig.empty()) // absent when empty: older files unchanged
    j["model"]["hf_config"] =
        Json::parse(p.model.hfConfig, nullptr, /*allow_exceptions=*/false);
  j["training"] = {{"schedule", p.training.schedule},
                   {"pipeline_ranks", p.training.pipelineRanks},
                   {"data_parallel", p.training.dataParallel},
                   {"microbatches", p.training.microbatches},
                   {"seed", p.training.seed}};
  if (p.training.expertParallel != 1) // absent when 1: E = 1 files unchanged
    j["training"]["expert_parallel"] = p.training.expertParallel;
  if (p.training.tensorParallel != 1) // absent when 1: T = 1 files unchanged
    j["training"]["tensor_parallel"] = p.training.tensorParallel;
  Json params = Json::array();
  for (const Param &pr : p.params) {
    params.push_back({{"name", pr.name},
                      {"dtype", dtypeName(pr.type.dtype)},
                      {"shape", pr.type.shape},
                      {"init", pr.init},
                      {"copy", pr.copy},
                      {"stage", pr.stage}});
    if (pr.expertSharded) // absent when false: E = 1 files unchanged
      params.back()["expert_sharded"] = true;
    if (pr.tpDim >= 0)
      params.back()["tp_dim"] = pr.tpDim;
    if (pr.tpReduceGrad)
      params.back()["tp_reduce_grad"] = true;
    if (!pr.tiedTo.empty())
      params.back()["tied_to"] = pr.tiedTo;
  }
  j["params"] = std::move(params);
  Json stages = Json::array();
  for (const Stage &s : p.stages) {
    Json sj = Json::object();
    sj["copy"] = s.copy;
    sj["stage"] = s.index;
    sj["rank"] = s.rank;
    sj["chunk"] = s.chunk;
    sj["num_stash"] = s.numStash;
    sj["num_wstash"] = s.numWStash;
    for (FunctionKind k : kAllKinds)
      sj[functionKindName(k)] = functionToJson(stageFunction(s, k));
    stages.push_back(std::move(sj));
  }
  j["stages"] = std::move(stages);
  j["schedule"] = Json::parse(sched::exportJson(p.schedule, nullptr, {}, -1));
  std::string body = j.dump(1);
  body.push_back('\n');

  std::string out(kProgramMagic, kProgramMagic + 8);
  putU32(out, Program::kVersion);
  putU32(out, 0);
  putU64(out, body.size());
  putU64(out, programChecksum(body));
  out += body;
  return out;
}

Status writeProgram(const Program &p, const std::string &path) {
  std::string bytes = serializeProgram(p);
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  if (!os)
    return Status::error("cannot open '" + path + "' for writing");
  os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  os.close();
  if (!os)
    return Status::error("error while writing '" + path + "'");
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {
struct ParseError {
  std::string msg;
};

[[noreturn]] void fail(const std::string &path, const std::string &msg) {
  throw ParseError{path + ": " + msg};
}

const Json &field(const Json &j, const char *key, const std::string &path) {
  if (!j.is_object())
    fail(path, "expected an object");
  auto it = j.find(key);
  if (it == j.end())
    fail(path, std::string("missing \"") + key + "\"");
  return *it;
}

std::string sub(const std::string &path, const char *key) {
  return path.empty() ? std::string(key) : path + "." + key;
}
std::string sub(const std::string &path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

int64_t asInt(const Json &v, const std::string &path, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    fail(path, "expected an integer");
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    fail(path, "integer out of range");
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    fail(path, "integer " + std::to_string(x) + " out of range [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}
constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

int32_t i32Field(const Json &j, const char *key, const std::string &path) {
  return static_cast<int32_t>(
      asInt(field(j, key, path), sub(path, key), kI32Min, kI32Max));
}
int64_t i64Field(const Json &j, const char *key, const std::string &path) {
  return asInt(field(j, key, path), sub(path, key), kI64Min, kI64Max);
}
std::string strField(const Json &j, const char *key, const std::string &path) {
  const Json &v = field(j, key, path);
  if (!v.is_string())
    fail(sub(path, key), "expected a string");
  return v.get<std::string>();
}
const Json &arrField(const Json &j, const char *key, const std::string &path) {
  const Json &v = field(j, key, path);
  if (!v.is_array())
    fail(sub(path, key), "expected an array");
  return v;
}

template <typename T>
std::vector<T> intArray(const Json &j, const char *key, const std::string &path,
                        int64_t lo, int64_t hi) {
  const Json &a = arrField(j, key, path);
  std::vector<T> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    out.push_back(static_cast<T>(asInt(a[i], sub(sub(path, key), i), lo, hi)));
  return out;
}

DType parseDType(const Json &j, const char *key, const std::string &path) {
  std::string s = strField(j, key, path);
  if (s == "f32")
    return DType::F32;
  if (s == "i32")
    return DType::I32;
  fail(sub(path, key), "unknown dtype \"" + s + "\" (f32, i32)");
}

/// The size limits of Support/Numeric.h (a non-positive dimension is left
/// to validateProgram, which names the value or parameter).
void checkShapeLimits(const std::vector<int64_t> &shape,
                      const std::string &path) {
  for (int64_t d : shape)
    if (d < 1)
      return;
  std::string why = checkTensorShape(shape, 4);
  if (!why.empty())
    fail(path, why);
}

TensorType parseType(const Json &j, const std::string &path) {
  TensorType t;
  t.dtype = parseDType(j, "dtype", path);
  t.shape = intArray<int64_t>(j, "shape", path, kI64Min, kI64Max);
  checkShapeLimits(t.shape, sub(path, "shape"));
  return t;
}

ArgRole parseArgRole(const std::string &s, const std::string &path) {
  for (ArgRole r :
       {ArgRole::Activation, ArgRole::Tokens, ArgRole::Targets, ArgRole::Param,
        ArgRole::Stash, ArgRole::GradIn, ArgRole::WStash})
    if (s == argRoleName(r))
      return r;
  fail(path, "unknown argument role \"" + s + "\"");
}
ResultRole parseResultRole(const std::string &s, const std::string &path) {
  for (ResultRole r :
       {ResultRole::Activation, ResultRole::Loss, ResultRole::Stash,
        ResultRole::GradOut, ResultRole::WStash, ResultRole::ParamGrad})
    if (s == resultRoleName(r))
      return r;
  fail(path, "unknown result role \"" + s + "\"");
}

AttrValue parseAttr(const Json &v, const std::string &path) {
  if (v.is_boolean())
    return v.get<bool>();
  if (v.is_number_integer())
    return asInt(v, path, kI64Min, kI64Max);
  if (v.is_number_float())
    return v.get<double>();
  if (v.is_string())
    return v.get<std::string>();
  fail(path, "an attribute must be an integer, float, string or boolean");
}

Function parseFunction(const Json &j, const std::string &path) {
  Function f;
  const Json &vals = arrField(j, "values", path);
  f.values.reserve(vals.size());
  for (size_t i = 0; i < vals.size(); ++i)
    f.values.push_back(parseType(vals[i], sub(sub(path, "values"), i)));
  const Json &args = arrField(j, "args", path);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string p = sub(sub(path, "args"), i);
    ArgBinding a;
    a.role = parseArgRole(strField(args[i], "role", p), sub(p, "role"));
    a.index = i32Field(args[i], "index", p);
    a.value = i32Field(args[i], "value", p);
    f.args.push_back(a);
  }
  const Json &res = arrField(j, "results", path);
  for (size_t i = 0; i < res.size(); ++i) {
    std::string p = sub(sub(path, "results"), i);
    ResultBinding r;
    r.role = parseResultRole(strField(res[i], "role", p), sub(p, "role"));
    r.index = i32Field(res[i], "index", p);
    r.value = i32Field(res[i], "value", p);
    f.results.push_back(r);
  }
  const Json &ks = arrField(j, "kernels", path);
  f.kernels.reserve(ks.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    std::string p = sub(sub(path, "kernels"), i);
    Kernel k;
    k.op = strField(ks[i], "op", p);
    if (ks[i].contains("attrs")) {
      const Json &attrs = ks[i]["attrs"];
      if (!attrs.is_object())
        fail(sub(p, "attrs"), "expected an object");
      for (auto it = attrs.begin(); it != attrs.end(); ++it)
        k.attrs[it.key()] =
            parseAttr(it.value(), sub(p, "attrs") + "." + it.key());
    }
    k.inputs = intArray<int32_t>(ks[i], "inputs", p, kI32Min, kI32Max);
    k.outputs = intArray<int32_t>(ks[i], "outputs", p, kI32Min, kI32Max);
    f.kernels.push_back(std::move(k));
  }
  f.buffer = intArray<int32_t>(j, "buffer", path, kI32Min, kI32Max);
  f.bufferBytes = intArray<int64_t>(j, "buffer_bytes", path, kI64Min, kI64Max);
  if (j.contains("components")) {
    const Json &cs = arrField(j, "components", path);
    f.components.reserve(cs.size());
    for (size_t i = 0; i < cs.size(); ++i) {
      std::string p = sub(sub(path, "components"), i);
      ComponentRange c;
      c.kind = strField(cs[i], "kind", p);
      c.layer = i32Field(cs[i], "layer", p);
      c.begin = i32Field(cs[i], "begin", p);
      c.end = i32Field(cs[i], "end", p);
      f.components.push_back(std::move(c));
    }
  }
  return f;
}

Program parseBody(const Json &j) {
  Program p;
  if (!j.is_object())
    fail("body", "expected a JSON object");
  if (strField(j, "format", "body") != kFormat)
    fail("body.format", std::string("expected \"") + kFormat + "\"");
  int64_t v =
      asInt(field(j, "version", "body"), "body.version", kI64Min, kI64Max);
  if (v != Program::kVersion)
    fail("body.version", "is " + std::to_string(v) + ", the header says " +
                             std::to_string(Program::kVersion));
  const Json &m = field(j, "model", "body");
  p.model.name = strField(m, "name", "model");
  p.model.vocab = i64Field(m, "vocab", "model");
  p.model.seqLen = i64Field(m, "seq_len", "model");
  p.model.microbatchSize = i64Field(m, "microbatch_size", "model");
  if (m.contains("hf_config")) {
    if (!m["hf_config"].is_object())
      fail("model.hf_config", "expected a JSON object (a config.json)");
    p.model.hfConfig = m["hf_config"].dump();
  }
  const Json &t = field(j, "training", "body");
  p.training.schedule = strField(t, "schedule", "training");
  p.training.pipelineRanks = i32Field(t, "pipeline_ranks", "training");
  p.training.dataParallel = i32Field(t, "data_parallel", "training");
  p.training.microbatches = i32Field(t, "microbatches", "training");
  if (t.contains("expert_parallel"))
    p.training.expertParallel = i32Field(t, "expert_parallel", "training");
  if (t.contains("tensor_parallel"))
    p.training.tensorParallel = i32Field(t, "tensor_parallel", "training");
  const Json &seed = field(t, "seed", "training");
  if (!seed.is_number_unsigned())
    fail("training.seed", "expected a non-negative integer");
  p.training.seed = seed.get<uint64_t>();

  const Json &params = arrField(j, "params", "");
  for (size_t i = 0; i < params.size(); ++i) {
    std::string path = sub(std::string("params"), i);
    Param pr;
    pr.name = strField(params[i], "name", path);
    pr.type.dtype = parseDType(params[i], "dtype", path);
    pr.type.shape =
        intArray<int64_t>(params[i], "shape", path, kI64Min, kI64Max);
    checkShapeLimits(pr.type.shape, sub(path, "shape"));
    pr.init = strField(params[i], "init", path);
    pr.copy = i32Field(params[i], "copy", path);
    pr.stage = i32Field(params[i], "stage", path);
    if (params[i].contains("expert_sharded")) {
      const Json &e = params[i]["expert_sharded"];
      if (!e.is_boolean())
        fail(path + ".expert_sharded", "expected true or false");
      pr.expertSharded = e.get<bool>();
    }
    if (params[i].contains("tp_dim"))
      pr.tpDim = i32Field(params[i], "tp_dim", path);
    if (params[i].contains("tp_reduce_grad")) {
      const Json &e = params[i]["tp_reduce_grad"];
      if (!e.is_boolean())
        fail(path + ".tp_reduce_grad", "expected true or false");
      pr.tpReduceGrad = e.get<bool>();
    }
    if (params[i].contains("tied_to"))
      pr.tiedTo = strField(params[i], "tied_to", path);
    p.params.push_back(std::move(pr));
  }
  const Json &stages = arrField(j, "stages", "");
  for (size_t i = 0; i < stages.size(); ++i) {
    std::string path = sub(std::string("stages"), i);
    const Json &sj = stages[i];
    Stage s;
    s.copy = i32Field(sj, "copy", path);
    s.index = i32Field(sj, "stage", path);
    s.rank = i32Field(sj, "rank", path);
    s.chunk = i32Field(sj, "chunk", path);
    s.numStash = i32Field(sj, "num_stash", path);
    s.numWStash = i32Field(sj, "num_wstash", path);
    for (FunctionKind k : kAllKinds)
      stageFunction(s, k) = parseFunction(field(sj, functionKindName(k), path),
                                          sub(path, functionKindName(k)));
    p.stages.push_back(std::move(s));
  }
  const Json &sch = field(j, "schedule", "body");
  if (!sch.is_object())
    fail("schedule", "expected an object");
  Expected<sched::Schedule> s = sched::importJson(sch.dump());
  if (!s)
    fail("schedule", s.message());
  p.schedule = s.take();
  return p;
}
} // namespace

namespace {
/// model.vocab is what the data source draws tokens from: it must be the
/// embedding table's row count and the logits' width (after
/// validateProgram, which checks the value ids and resolves Kernel::kind).
Status checkVocab(const Program &p) {
  for (const Stage &st : p.stages)
    for (const Kernel &k : st.forward.kernels) {
      int32_t v = -1;
      int64_t got = 0, shards = 1;
      const char *what = nullptr;
      if (k.kind == OpKind::Embedding && k.inputs.size() >= 2) {
        v = k.inputs[1];
        what = "the embedding table has";
        auto it = k.attrs.find("vocab_shards");
        if (it != k.attrs.end())
          if (const int64_t *n = std::get_if<int64_t>(&it->second))
            shards = std::max<int64_t>(1, *n);
      } else if ((k.kind == OpKind::CrossEntropy ||
                  k.kind == OpKind::VocabParallelCrossEntropy) &&
                 !k.inputs.empty()) {
        v = k.inputs[0];
        what = "the logits have";
        if (k.kind == OpKind::VocabParallelCrossEntropy)
          shards = p.training.tensorParallel;
      }
      if (v < 0 || size_t(v) >= st.forward.values.size())
        continue;
      const std::vector<int64_t> &sh = st.forward.values[size_t(v)].shape;
      if (sh.empty())
        continue;
      // Vocabulary parallelism: each rank holds 1 / shards of the entries.
      got = (k.kind == OpKind::Embedding ? sh.front() : sh.back()) * shards;
      if (got != p.model.vocab)
        return Status::error("program body: model.vocab is " +
                             std::to_string(p.model.vocab) + " but " + what +
                             " " + std::to_string(got) + " entries (stage " +
                             std::to_string(st.index) + ", copy " +
                             std::to_string(st.copy) + ")");
    }
  return Status::ok();
}
} // namespace

Expected<Program> parseProgram(const std::string &bytes) {
  const size_t n = bytes.size();
  if (n < 8) {
    if (n == 0)
      return Status::error("empty program file");
    if (std::memcmp(bytes.data(), kProgramMagic, n) == 0)
      return Status::error("truncated program file: " + std::to_string(n) +
                           " bytes, the header alone is " +
                           std::to_string(kProgramHeaderSize));
    return Status::error("not a PipeForge program file (bad magic)");
  }
  if (std::memcmp(bytes.data(), kProgramMagic, 8) != 0)
    return Status::error("not a PipeForge program file (bad magic)");
  if (n < kProgramHeaderSize)
    return Status::error("truncated program file: " + std::to_string(n) +
                         " bytes, the header alone is " +
                         std::to_string(kProgramHeaderSize));
  uint32_t version = getU32(bytes, 8);
  uint32_t flags = getU32(bytes, 12);
  uint64_t length = getU64(bytes, 16);
  uint64_t checksum = getU64(bytes, 24);
  if (version == 0)
    return Status::error("program version 0 is invalid");
  if (version > Program::kVersion)
    return Status::error("program version " + std::to_string(version) +
                         " is newer than this runtime (" +
                         std::to_string(Program::kVersion) + ")");
  if (version != Program::kVersion)
    return Status::error("program version " + std::to_string(version) +
                         " is not supported (this runtime reads " +
                         std::to_string(Program::kVersion) + ")");
  if (flags != 0)
    return Status::error("unsupported header flags " + hex(flags));
  uint64_t have = n - kProgramHeaderSize;
  if (have < length)
    return Status::error("truncated program file: the header announces a " +
                         std::to_string(length) + "-byte body but only " +
                         std::to_string(have) + " bytes follow");
  if (have > length)
    return Status::error("length mismatch: the header announces a " +
                         std::to_string(length) + "-byte body but " +
                         std::to_string(have) + " bytes follow");
  std::string body = bytes.substr(kProgramHeaderSize);
  uint64_t actual = programChecksum(body);
  if (actual != checksum)
    return Status::error("checksum mismatch: the header says " + hex(checksum) +
                         ", the body hashes to " + hex(actual) +
                         " (the file is corrupt)");
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again with exceptions for the position in the message.
    try {
      Json again = Json::parse(body);
      (void)again;
    } catch (const nlohmann::json::exception &e) {
      return Status::error(std::string("program body is not valid JSON: ") +
                           e.what());
    }
    return Status::error("program body is not valid JSON");
  }
  Program p;
  try {
    p = parseBody(j);
  } catch (const ParseError &e) {
    return Status::error("program body: " + e.msg);
  } catch (const nlohmann::json::exception &e) {
    return Status::error(std::string("program body: ") + e.what());
  }
  if (Status st = validateProgram(p); !st)
    return st;
  if (Status st = checkVocab(p); !st)
    return st;
  return p;
}

Expected<Program> readProgram(const std::string &path) {
  // A regular file only (Support/InputFile.h): a directory, a FIFO or a
  // device is refused by name before it is opened (a FIFO would block).
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::error("cannot open program file '" + path + "'");
  std::string text, error;
  if (!readInputFile(path, text, error, /*allowStdin=*/false))
    return Status::error("program file: " + error);
  Expected<Program> p = parseProgram(text);
  if (!p)
    return Status::error(path + ": " + p.message());
  return p;
}

} // namespace pipeforge::rt
