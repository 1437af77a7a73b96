//===- ProgramDump.cpp - Readable listing of a Program --------------------===//

#include "pipeforge/rt/Program.h"

#include <sstream>

namespace pipeforge::rt {

namespace {

std::string typeStr(const TensorType &t) {
  std::string s = dtypeName(t.dtype);
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(t.shape[i]);
  return s + "]";
}

std::string attrStr(const AttrValue &v) {
  if (auto *i = std::get_if<int64_t>(&v))
    return std::to_string(*i);
  if (auto *d = std::get_if<double>(&v)) {
    std::ostringstream os;
    os << *d;
    return os.str();
  }
  if (auto *s = std::get_if<std::string>(&v))
    return "\"" + *s + "\"";
  return std::get<bool>(v) ? "true" : "false";
}

std::string valueRef(int32_t v) {
  return v < 0 ? "_" : "%" + std::to_string(v);
}

void dumpFunction(std::ostringstream &os, const Program &p, const Function &f,
                  FunctionKind k) {
  int64_t total = 0;
  for (int64_t b : f.bufferBytes)
    total += b;
  os << "  " << functionKindName(k) << ": " << f.values.size() << " values, "
     << f.kernels.size() << " kernels, " << f.bufferBytes.size() << " buffers ("
     << total << " bytes)\n";
  auto buf = [&](int32_t v) -> std::string {
    if (v < 0 || size_t(v) >= f.buffer.size())
      return "";
    return " b" + std::to_string(f.buffer[v]);
  };
  auto ty = [&](int32_t v) -> std::string {
    if (v < 0 || size_t(v) >= f.values.size())
      return "?";
    return typeStr(f.values[v]);
  };
  for (const ComponentRange &c : f.components)
    os << "    component " << c.kind << " layer " << c.layer << ": kernels ["
       << c.begin << ", " << c.end << ")\n";
  for (const ArgBinding &a : f.args) {
    os << "    arg " << valueRef(a.value) << " = " << argRoleName(a.role) << " "
       << a.index;
    if (a.role == ArgRole::Param && a.index >= 0 &&
        size_t(a.index) < p.params.size())
      os << " (" << p.params[a.index].name << ")";
    os << " : " << ty(a.value) << buf(a.value) << "\n";
  }
  for (const Kernel &kn : f.kernels) {
    os << "    ";
    for (size_t i = 0; i < kn.outputs.size(); ++i)
      os << (i ? ", " : "") << valueRef(kn.outputs[i]);
    if (!kn.outputs.empty())
      os << " = ";
    os << kn.op << "(";
    for (size_t i = 0; i < kn.inputs.size(); ++i)
      os << (i ? ", " : "") << valueRef(kn.inputs[i]);
    os << ")";
    if (!kn.attrs.empty()) {
      os << " {";
      bool first = true;
      for (const auto &[n, v] : kn.attrs) {
        os << (first ? "" : ", ") << n << "=" << attrStr(v);
        first = false;
      }
      os << "}";
    }
    os << " :";
    for (size_t i = 0; i < kn.outputs.size(); ++i)
      os << (i ? ", " : " ") << ty(kn.outputs[i]) << buf(kn.outputs[i]);
    os << "\n";
  }
  for (const ResultBinding &r : f.results) {
    os << "    result " << resultRoleName(r.role) << " " << r.index << " = "
       << valueRef(r.value);
    if (r.role == ResultRole::ParamGrad && r.index >= 0 &&
        size_t(r.index) < p.params.size())
      os << " (" << p.params[r.index].name << ")";
    os << "\n";
  }
}

} // namespace

std::string dumpProgram(const Program &p) {
  std::ostringstream os;
  os << "program " << (p.model.name.empty() ? "<unnamed>" : p.model.name)
     << " (format version " << Program::kVersion << ")\n";
  os << "model: vocab " << p.model.vocab << ", seq_len " << p.model.seqLen
     << ", microbatch_size " << p.model.microbatchSize << "\n";
  os << "training: schedule " << p.training.schedule << ", pipeline_ranks "
     << p.training.pipelineRanks << ", data_parallel "
     << p.training.dataParallel
     << (p.training.expertParallel != 1
             ? ", expert_parallel " + std::to_string(p.training.expertParallel)
             : std::string())
     << (p.training.tensorParallel != 1
             ? ", tensor_parallel " + std::to_string(p.training.tensorParallel)
             : std::string())
     << ", microbatches " << p.training.microbatches << ", seed "
     << p.training.seed << "\n";
  int64_t numel = 0;
  for (const Param &pr : p.params)
    numel += pr.type.numElements();
  os << "params: " << p.params.size() << " (" << numel << " elements)\n";
  for (size_t i = 0; i < p.params.size(); ++i) {
    const Param &pr = p.params[i];
    os << "  #" << i << " " << pr.name << " : " << typeStr(pr.type) << " "
       << pr.init << " -> stage " << pr.stage << " (copy " << pr.copy << ")"
       << (pr.expertSharded ? ", expert-sharded" : "")
       << (pr.tpDim >= 0 ? ", tp-split dim " + std::to_string(pr.tpDim) : "")
       << (pr.tpReduceGrad ? ", tp-reduce-grad" : "")
       << (pr.tiedTo.empty() ? "" : ", tied to " + pr.tiedTo) << "\n";
  }
  os << "stages: " << p.stages.size() << "\n";
  for (const Stage &s : p.stages) {
    os << "stage " << s.index << " (copy " << s.copy << ") on rank " << s.rank
       << " chunk " << s.chunk << ": num_stash " << s.numStash
       << ", num_wstash " << s.numWStash << "\n";
    for (FunctionKind k :
         {FunctionKind::Forward, FunctionKind::BackwardInput,
          FunctionKind::BackwardWeight, FunctionKind::Backward})
      dumpFunction(os, p, stageFunction(s, k), k);
  }
  const sched::Schedule &sc = p.schedule;
  os << "schedule " << sc.name << ": " << sc.numRanks() << " ranks, "
     << sc.placement.numStages << " stages x " << sc.placement.numCopies
     << (sc.placement.numCopies == 1 ? " copy, " : " copies, ")
     << sc.numMicrobatches << " microbatches per copy"
     << (sc.hasComm ? ", with messages" : "") << "\n";
  for (size_t r = 0; r < sc.programs.size(); ++r) {
    os << "rank " << r << " (" << sc.programs[r].size() << " actions):";
    for (const sched::Action &a : sc.programs[r])
      os << "\n  " << sched::toString(a);
    os << "\n";
  }
  return os.str();
}

} // namespace pipeforge::rt
