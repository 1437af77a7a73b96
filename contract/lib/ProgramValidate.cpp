//===- ProgramValidate.cpp - Semantic checks of a Program -----------------===//
//
// Everything the executor relies on, checked once at load time (and by the
// compiler before it writes): settings, placement, params, stage records,
// each function's SSA form, roles, buffers, the wiring between functions and
// stages, and the schedule (sched::verify). The first error wins; messages
// name the stage, function, and the index at fault. A valid program's
// kernels then get their op kind (Kernel::kind), resolved here once: the
// arity and types checked here are what the backends rely on.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/OpShapes.h"
#include "pipeforge/rt/Program.h"

#include "pipeforge/Schedule/Verify.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace pipeforge::rt {

namespace {

constexpr FunctionKind kAllKinds[] = {
    FunctionKind::Forward, FunctionKind::BackwardInput,
    FunctionKind::BackwardWeight, FunctionKind::Backward};

std::string str(const TensorType &t) {
  std::string s = dtypeName(t.dtype);
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(t.shape[i]);
  return s + "]";
}

bool sameType(const TensorType &a, const TensorType &b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

/// Shape dims positive and the element count sane (< 2^40).
bool goodShape(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0 || d > (int64_t(1) << 40) || n > (int64_t(1) << 40) / d)
      return false;
    n *= d;
  }
  return true;
}

bool argAllowed(FunctionKind k, ArgRole r) {
  switch (k) {
  case FunctionKind::Forward:
    return r == ArgRole::Activation || r == ArgRole::Tokens ||
           r == ArgRole::Targets || r == ArgRole::Param;
  case FunctionKind::BackwardInput:
  case FunctionKind::Backward:
    return r == ArgRole::Param || r == ArgRole::Stash || r == ArgRole::GradIn ||
           r == ArgRole::Targets;
  case FunctionKind::BackwardWeight:
    return r == ArgRole::Param || r == ArgRole::Stash || r == ArgRole::WStash;
  }
  return false;
}

bool resultAllowed(FunctionKind k, ResultRole r) {
  switch (k) {
  case FunctionKind::Forward:
    return r == ResultRole::Activation || r == ResultRole::Loss ||
           r == ResultRole::Stash;
  case FunctionKind::BackwardInput:
    return r == ResultRole::GradOut || r == ResultRole::WStash;
  case FunctionKind::BackwardWeight:
    return r == ResultRole::ParamGrad;
  case FunctionKind::Backward:
    return r == ResultRole::GradOut || r == ResultRole::ParamGrad;
  }
  return false;
}

class FunctionCheck;

class Validator {
public:
  explicit Validator(const Program &p) : p(p) {}
  Status run();

private:
  Status settings();
  Status placement();
  Status params();
  Status stages();
  Status function(const Stage &s, FunctionKind k);
  Status wiring(const Stage &s);
  Status chain();

  std::string where(const Stage &s) const {
    return "stage " + std::to_string(s.index) + " (copy " +
           std::to_string(s.copy) + ")";
  }
  std::string where(const Stage &s, FunctionKind k) const {
    return where(s) + " " + functionKindName(k);
  }
  std::string paramName(int32_t i) const {
    return "param " + std::to_string(i) + " (" + p.params[i].name + ")";
  }
  bool isLast(const Stage &s) const {
    return s.index == p.schedule.placement.numStages - 1;
  }

  const Program &p;
  friend class FunctionCheck;
};

Status Validator::settings() {
  const ModelInfo &m = p.model;
  if (m.vocab <= 0)
    return Status::error("model.vocab must be positive (is " +
                         std::to_string(m.vocab) + ")");
  if (m.seqLen <= 0)
    return Status::error("model.seq_len must be positive (is " +
                         std::to_string(m.seqLen) + ")");
  if (m.microbatchSize <= 0)
    return Status::error("model.microbatch_size must be positive (is " +
                         std::to_string(m.microbatchSize) + ")");
  if (!m.hfConfig.empty()) {
    auto c = nlohmann::json::parse(m.hfConfig, nullptr,
                                   /*allow_exceptions=*/false);
    if (!c.is_object())
      return Status::error("model.hf_config is not a JSON object");
  }
  const TrainingInfo &t = p.training;
  if (t.pipelineRanks < 1)
    return Status::error("training.pipeline_ranks must be at least 1 (is " +
                         std::to_string(t.pipelineRanks) + ")");
  if (t.dataParallel < 1)
    return Status::error("training.data_parallel must be at least 1 (is " +
                         std::to_string(t.dataParallel) + ")");
  if (t.expertParallel < 1)
    return Status::error("training.expert_parallel must be at least 1 (is " +
                         std::to_string(t.expertParallel) + ")");
  if (t.tensorParallel < 1)
    return Status::error("training.tensor_parallel must be at least 1 (is " +
                         std::to_string(t.tensorParallel) + ")");
  if (t.microbatches < 1)
    return Status::error("training.microbatches must be at least 1 (is " +
                         std::to_string(t.microbatches) + ")");
  return Status::ok();
}

Status Validator::placement() {
  const sched::Schedule &s = p.schedule;
  const sched::Placement &pl = s.placement;
  if (pl.numRanks < 1)
    return Status::error("schedule: no ranks");
  if (s.programs.size() != size_t(pl.numRanks))
    return Status::error("schedule: " + std::to_string(s.programs.size()) +
                         " rank programs for " + std::to_string(pl.numRanks) +
                         " ranks");
  if (pl.numStages < 1 || pl.numCopies < 1 || pl.numCopies > 2 ||
      pl.rankOf.size() != size_t(pl.numCopies))
    return Status::error("schedule: malformed placement (" +
                         std::to_string(pl.numCopies) + " copies, " +
                         std::to_string(pl.numStages) + " stages)");
  for (size_t c = 0; c < pl.rankOf.size(); ++c) {
    if (pl.rankOf[c].size() != size_t(pl.numStages))
      return Status::error("schedule: placement of copy " + std::to_string(c) +
                           " has " + std::to_string(pl.rankOf[c].size()) +
                           " entries for " + std::to_string(pl.numStages) +
                           " stages");
    for (size_t st = 0; st < pl.rankOf[c].size(); ++st)
      if (pl.rankOf[c][st] < 0 || pl.rankOf[c][st] >= pl.numRanks)
        return Status::error(
            "schedule: placement puts stage " + std::to_string(st) + " (copy " +
            std::to_string(c) + ") on rank " +
            std::to_string(pl.rankOf[c][st]) + ", out of range");
  }
  if (p.training.pipelineRanks != pl.numRanks)
    return Status::error("training.pipeline_ranks is " +
                         std::to_string(p.training.pipelineRanks) +
                         " but the schedule has " +
                         std::to_string(pl.numRanks) + " ranks");
  if (int64_t(s.numMicrobatches) * pl.numCopies != p.training.microbatches)
    return Status::error(
        "training.microbatches is " + std::to_string(p.training.microbatches) +
        " but the schedule runs " + std::to_string(s.numMicrobatches) +
        " per copy x " + std::to_string(pl.numCopies) + " copies");
  return Status::ok();
}

Status Validator::params() {
  const sched::Placement &pl = p.schedule.placement;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const Param &pr = p.params[i];
    std::string w = "param " + std::to_string(i);
    if (pr.name.empty())
      return Status::error(w + ": empty name");
    w += " (" + pr.name + ")";
    auto [it, fresh] = seen.emplace(pr.name, i);
    if (!fresh)
      return Status::error(w + ": name already used by param " +
                           std::to_string(it->second));
    if (pr.type.dtype != DType::F32)
      return Status::error(w + ": parameters are f32");
    if (pr.type.shape.empty() || !goodShape(pr.type.shape))
      return Status::error(w + ": shape " + str(pr.type) +
                           " must have positive dimensions");
    if (!isValidInitSpec(pr.init))
      return Status::error(w + ": unknown init \"" + pr.init + "\" (" +
                           kInitSpecForms + ")");
    if (pr.copy < 0 || pr.copy >= pl.numCopies || pr.stage < 0 ||
        pr.stage >= pl.numStages)
      return Status::error(w + ": owner stage " + std::to_string(pr.stage) +
                           " (copy " + std::to_string(pr.copy) +
                           ") does not exist");
    if (pr.expertSharded) {
      int E = p.training.expertParallel;
      if (E <= 1)
        return Status::error(w + ": expert-sharded, but training." +
                             "expert_parallel is " + std::to_string(E));
      if (pr.type.shape[0] % E != 0)
        return Status::error(w + ": expert-sharded " + str(pr.type) + ": " +
                             std::to_string(pr.type.shape[0]) +
                             " experts do not split over " + std::to_string(E) +
                             " ranks");
    }
    int T = p.training.tensorParallel;
    if (pr.tpDim != -1 &&
        (pr.tpDim < 0 || size_t(pr.tpDim) >= pr.type.shape.size()))
      return Status::error(w + ": tp_dim " + std::to_string(pr.tpDim) +
                           " is not a dimension of " + str(pr.type));
    if ((pr.tpDim >= 0 || pr.tpReduceGrad) && T <= 1)
      return Status::error(w + ": tensor-parallel, but training." +
                           "tensor_parallel is " + std::to_string(T));
    if (pr.tpDim >= 0 && pr.tpReduceGrad)
      return Status::error(w + ": split (tp_dim) and tp_reduce_grad: only a "
                               "replicated parameter's gradient is summed");
    if (pr.tpDim >= 0 && pr.expertSharded)
      return Status::error(w + ": both expert-sharded and split over the "
                               "tensor-parallel group");
  }
  // Ties: to an untied parameter of the same copy, shape and split.
  for (size_t i = 0; i < p.params.size(); ++i) {
    const Param &pr = p.params[i];
    if (pr.tiedTo.empty())
      continue;
    std::string w = "param " + std::to_string(i) + " '" + pr.name + "'";
    auto it = seen.find(pr.tiedTo);
    if (it == seen.end())
      return Status::error(w + ": tied_to '" + pr.tiedTo +
                           "' is not a parameter");
    const Param &t = p.params[it->second];
    if (&t == &pr || !t.tiedTo.empty())
      return Status::error(w + ": tied_to '" + pr.tiedTo +
                           "' is itself tied (ties are one level deep)");
    if (t.copy != pr.copy || t.type.shape != pr.type.shape ||
        t.tpDim != pr.tpDim || t.expertSharded || pr.expertSharded)
      return Status::error(w + ": tied_to '" + pr.tiedTo +
                           "' differs in model copy, shape or split (" +
                           str(t.type) + " vs " + str(pr.type) + ")");
  }
  return Status::ok();
}

Status Validator::stages() {
  const sched::Placement &pl = p.schedule.placement;
  // Rank-local chunk: position of (copy, stage) among the rank's stages in
  // (copy, stage) order.
  std::vector<std::map<std::pair<int, int>, int>> onRank(pl.numRanks);
  for (int c = 0; c < pl.numCopies; ++c)
    for (int st = 0; st < pl.numStages; ++st)
      onRank[pl.rankOf[c][st]][{c, st}] = 0;
  for (auto &m : onRank) {
    int k = 0;
    for (auto &kv : m)
      kv.second = k++;
  }
  std::set<std::pair<int, int>> seen;
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const Stage &s = p.stages[i];
    if (s.copy < 0 || s.copy >= pl.numCopies || s.index < 0 ||
        s.index >= pl.numStages)
      return Status::error("stages[" + std::to_string(i) + "]: " + where(s) +
                           " is not in the schedule's placement (" +
                           std::to_string(pl.numCopies) + " copies, " +
                           std::to_string(pl.numStages) + " stages)");
    if (!seen.insert({s.copy, s.index}).second)
      return Status::error("stages[" + std::to_string(i) + "]: " + where(s) +
                           " appears twice");
    int32_t rank = pl.rank(s.copy, s.index);
    if (s.rank != rank)
      return Status::error(where(s) + ": rank is " + std::to_string(s.rank) +
                           " but the schedule places it on rank " +
                           std::to_string(rank));
    int chunk = onRank[rank][{s.copy, s.index}];
    if (s.chunk != chunk)
      return Status::error(where(s) + ": chunk is " + std::to_string(s.chunk) +
                           " but it is chunk " + std::to_string(chunk) +
                           " of rank " + std::to_string(rank));
    if (s.numStash < 0 || s.numWStash < 0)
      return Status::error(where(s) + ": negative stash count");
  }
  for (int c = 0; c < pl.numCopies; ++c)
    for (int st = 0; st < pl.numStages; ++st)
      if (!seen.count({c, st}))
        return Status::error("stage " + std::to_string(st) + " (copy " +
                             std::to_string(c) + ") has no stage record");
  for (const Stage &s : p.stages) {
    for (FunctionKind k : kAllKinds)
      if (Status st = function(s, k); !st)
        return st;
    if (Status st = wiring(s); !st)
      return st;
  }
  return chain();
}

/// The kernel's operand and result types against its op's rules
/// (OpShapes.h): the kernels trust them for every size they read or write.
/// Value ids are in range (checked before).
Status kernelTypes(const Kernel &kn, const Function &f,
                   const std::string &kname) {
  const OpSpec *spec = lookupOpSpec(kn.op);
  if (!spec)
    return Status::error(kname + ": unknown op (known: " + opNameList() + ")");
  auto types = [&](const std::vector<int32_t> &ids) {
    std::vector<const TensorType *> t;
    for (int32_t v : ids)
      t.push_back(v < 0 ? nullptr : &f.values[size_t(v)]);
    return t;
  };
  OpShapeResult r =
      checkKernelTypes(*spec, types(kn.inputs), types(kn.outputs), kn.attrs);
  if (r)
    return Status::ok();
  std::string at;
  if (r.operand >= 0)
    at = " input " + std::to_string(r.operand) + " (value " +
         std::to_string(kn.inputs[size_t(r.operand)]) + ")";
  else if (r.result >= 0)
    at = " output " + std::to_string(r.result) + " (value " +
         std::to_string(kn.outputs[size_t(r.result)]) + ")";
  return Status::error(kname + at + ": " + r.error);
}

/// Validator::function's checks of one function, in order: value shapes,
/// arguments, kernels, results, every value defined, buffers, components.
/// The first error wins; every message starts with the function's place.
class FunctionCheck {
public:
  FunctionCheck(const Validator &vd, const Stage &s, FunctionKind k)
      : vd(vd), p(vd.p), s(s), k(k), f(stageFunction(s, k)), w(vd.where(s, k)),
        nv(int32_t(f.values.size())), def(nv, -1), lastUse(nv, -1) {}

  Status run() {
    for (Status (FunctionCheck::*phase)() :
         {&FunctionCheck::shapes, &FunctionCheck::args, &FunctionCheck::kernels,
          &FunctionCheck::results, &FunctionCheck::allDefined,
          &FunctionCheck::buffers, &FunctionCheck::components})
      if (Status st = (this->*phase)(); !st)
        return st;
    return Status::ok();
  }

private:
  Status err(const std::string &m) const { return Status::error(w + ": " + m); }
  static std::string vname(int32_t v) { return "value " + std::to_string(v); }

  /// `one(i)` for i in [0, n), up to the first error.
  Status each(size_t n, Status (FunctionCheck::*one)(size_t)) {
    for (size_t i = 0; i < n; ++i)
      if (Status st = (this->*one)(i); !st)
        return st;
    return Status::ok();
  }
  Status args() { return each(f.args.size(), &FunctionCheck::arg); }
  Status kernels() { return each(f.kernels.size(), &FunctionCheck::kernel); }
  Status results() { return each(f.results.size(), &FunctionCheck::result); }

  Status shapes();
  Status arg(size_t i);
  Status kernel(size_t ki);
  Status result(size_t i);
  Status allDefined();
  Status buffers();
  Status components();

  /// Value `v` is defined at `pos` (0: the arguments, k + 1: kernel k) by
  /// `by`: once, and in range.
  Status define(int32_t v, int32_t pos, const std::string &by);
  /// A param argument or a param_grad result (`what`) of param `index`
  /// whose value is `t`: the param exists, is this stage's, and has t's
  /// type.
  Status param(const std::string &what, int32_t index,
               const TensorType &t) const;
  /// A stash or wstash slot `index` (`what`) among `count`.
  Status slot(const std::string &what, int32_t index, int32_t count,
              bool wstash) const;

  const Validator &vd;
  const Program &p;
  const Stage &s;
  const FunctionKind k;
  const Function &f;
  const std::string w;
  const int32_t nv;
  std::vector<int32_t> def;     ///< position: 0 = args, k+1 = kernel k
  std::vector<int32_t> lastUse; ///< the last position that reads it
  std::set<std::pair<int, int>> argSeen, resSeen;
};

Status FunctionCheck::shapes() {
  for (int32_t v = 0; v < nv; ++v)
    if (!goodShape(f.values[v].shape))
      return err("value " + std::to_string(v) + " has shape " +
                 str(f.values[v]) + " (dimensions must be positive)");
  return Status::ok();
}

Status FunctionCheck::define(int32_t v, int32_t pos, const std::string &by) {
  if (v < 0 || v >= nv)
    return err(by + " defines " + vname(v) + ", out of range (" +
               std::to_string(nv) + " values)");
  if (def[v] >= 0)
    return err(by + " defines " + vname(v) + " again");
  def[v] = pos;
  lastUse[v] = pos;
  return Status::ok();
}

Status FunctionCheck::param(const std::string &what, int32_t index,
                            const TensorType &t) const {
  if (index < 0 || index >= int32_t(p.params.size()))
    return err(what + ": param index out of range (" +
               std::to_string(p.params.size()) + " params)");
  const Param &pr = p.params[index];
  if (pr.copy != s.copy || pr.stage != s.index)
    return err(what + ": " + vd.paramName(index) + " belongs to stage " +
               std::to_string(pr.stage) + " (copy " + std::to_string(pr.copy) +
               ")");
  if (!sameType(t, pr.type))
    return err(what + ": value is " + str(t) + " but " + vd.paramName(index) +
               " is " + str(pr.type));
  return Status::ok();
}

Status FunctionCheck::slot(const std::string &what, int32_t index,
                           int32_t count, bool wstash) const {
  if (index < 0 || index >= count)
    return err(what +
               (wstash ? ": wstash slot out of range (num_wstash "
                       : ": stash slot out of range (num_stash ") +
               std::to_string(count) + ")");
  return Status::ok();
}

/// Argument i: its role allowed here, bound once, and what its role asks.
Status FunctionCheck::arg(size_t i) {
  const ArgBinding &a = f.args[i];
  std::string an = "argument " + std::to_string(i) + " (" +
                   argRoleName(a.role) + " " + std::to_string(a.index) + ")";
  if (!argAllowed(k, a.role))
    return err(an + ": role " + argRoleName(a.role) + " is not allowed in " +
               functionKindName(k));
  if (!argSeen.insert({int(a.role), a.index}).second)
    return err(an + ": bound twice");
  if (Status st = define(a.value, 0, an); !st)
    return st;
  const TensorType &t = f.values[a.value];
  switch (a.role) {
  case ArgRole::Param:
    return param(an, a.index, t);
  case ArgRole::Stash:
    return slot(an, a.index, s.numStash, false);
  case ArgRole::WStash:
    return slot(an, a.index, s.numWStash, true);
  case ArgRole::Tokens:
  case ArgRole::Targets: {
    if (a.role == ArgRole::Tokens && s.index != 0)
      return err(an + ": only stage 0 takes tokens");
    if (a.role == ArgRole::Targets && !vd.isLast(s))
      return err(an + ": only the last stage takes targets");
    if (a.index != 0)
      return err(an + ": index must be 0");
    std::vector<int64_t> want = {p.model.microbatchSize, p.model.seqLen};
    if (t.dtype != DType::I32 || t.shape != want)
      return err(an + ": value is " + str(t) + ", expected i32[" +
                 std::to_string(want[0]) + "x" + std::to_string(want[1]) + "]");
    break;
  }
  case ArgRole::Activation:
    if (s.index == 0)
      return err(an + ": stage 0 has no activation input");
    if (a.index < 0)
      return err(an + ": negative index");
    break;
  case ArgRole::GradIn:
    if (a.index < 0)
      return err(an + ": negative index");
    if (vd.isLast(s) &&
        (a.index != 0 || t.numElements() != 1 || t.dtype != DType::F32))
      return err(an +
                 ": on the last stage grad_in is the scalar loss seed "
                 "(index 0, one f32 element), got " +
                 str(t));
    break;
  }
  return Status::ok();
}

/// Kernel ki: an op name, finite attributes, inputs defined before, outputs
/// defined once, and the types its op's rules take.
Status FunctionCheck::kernel(size_t ki) {
  const Kernel &kn = f.kernels[ki];
  std::string kname = "kernel " + std::to_string(ki);
  if (kn.op.empty())
    return err(kname + ": empty op name");
  kname += " (" + kn.op + ")";
  for (const auto &[name, v] : kn.attrs) {
    if (name.empty())
      return err(kname + ": attribute with an empty name");
    if (auto *d = std::get_if<double>(&v); d && !std::isfinite(*d))
      return err(kname + ": attribute " + name + " is not finite");
  }
  int32_t pos = int32_t(ki) + 1;
  for (size_t ii = 0; ii < kn.inputs.size(); ++ii) {
    int32_t v = kn.inputs[ii];
    if (v == -1)
      continue;
    if (v < 0 || v >= nv)
      return err(kname + " input " + std::to_string(ii) + " reads " + vname(v) +
                 ", out of range (" + std::to_string(nv) + " values)");
    if (def[v] < 0)
      return err("kernel " + std::to_string(ki) + " reads " + vname(v) +
                 " before it is defined");
    lastUse[v] = pos;
  }
  for (size_t oi = 0; oi < kn.outputs.size(); ++oi) {
    int32_t v = kn.outputs[oi];
    if (v == -1)
      continue;
    if (Status st = define(v, pos, kname + " output " + std::to_string(oi));
        !st)
      return st;
  }
  if (Status st = kernelTypes(kn, f, kname); !st)
    return err(st.message());
  return Status::ok();
}

/// Result i: its role allowed here, bound once, a defined value, and what
/// its role asks. Its value lives to the end.
Status FunctionCheck::result(size_t i) {
  const int32_t end = int32_t(f.kernels.size()) + 1;
  const ResultBinding &r = f.results[i];
  std::string rn = "result " + std::to_string(i) + " (" +
                   resultRoleName(r.role) + " " + std::to_string(r.index) + ")";
  if (!resultAllowed(k, r.role))
    return err(rn + ": role " + resultRoleName(r.role) + " is not allowed in " +
               functionKindName(k));
  if (!resSeen.insert({int(r.role), r.index}).second)
    return err(rn + ": bound twice");
  if (r.value < 0 || r.value >= nv)
    return err(rn + ": " + vname(r.value) + " out of range (" +
               std::to_string(nv) + " values)");
  if (def[r.value] < 0)
    return err(rn + " returns " + vname(r.value) + ", which is never defined");
  lastUse[r.value] = end;
  const TensorType &t = f.values[r.value];
  switch (r.role) {
  case ResultRole::ParamGrad:
    return param(rn, r.index, t);
  case ResultRole::Stash:
    return slot(rn, r.index, s.numStash, false);
  case ResultRole::WStash:
    return slot(rn, r.index, s.numWStash, true);
  case ResultRole::Loss:
    if (!vd.isLast(s))
      return err(rn + ": only the last stage returns the loss");
    if (r.index != 0 || t.numElements() != 1 || t.dtype != DType::F32)
      return err(rn + ": the loss is one f32 element at index 0, got " +
                 str(t));
    break;
  case ResultRole::Activation:
    if (vd.isLast(s))
      return err(rn + ": the last stage sends no activation");
    if (r.index < 0)
      return err(rn + ": negative index");
    break;
  case ResultRole::GradOut:
    if (r.index < 0)
      return err(rn + ": negative index");
    break;
  }
  return Status::ok();
}

Status FunctionCheck::allDefined() {
  for (int32_t v = 0; v < nv; ++v)
    if (def[v] < 0)
      return err(vname(v) + " is never defined");
  // Arguments are bound to storage outside the function (parameters,
  // stash, received messages): their buffers are never reused.
  const int32_t end = int32_t(f.kernels.size()) + 1;
  for (const ArgBinding &a : f.args)
    lastUse[a.value] = end;
  return Status::ok();
}

/// Every value in a buffer it fits; values that share a buffer are never
/// live at once.
Status FunctionCheck::buffers() {
  if (f.buffer.size() != size_t(nv))
    return err("buffer assignment has " + std::to_string(f.buffer.size()) +
               " entries for " + std::to_string(nv) + " values");
  const int32_t nb = int32_t(f.bufferBytes.size());
  for (int32_t b = 0; b < nb; ++b)
    if (f.bufferBytes[b] <= 0)
      return err("buffer " + std::to_string(b) + " has size " +
                 std::to_string(f.bufferBytes[b]));
  std::vector<std::vector<int32_t>> members(nb);
  for (int32_t v = 0; v < nv; ++v) {
    int32_t b = f.buffer[v];
    if (b < 0 || b >= nb)
      return err(vname(v) + " is in buffer " + std::to_string(b) +
                 ", out of range (" + std::to_string(nb) + " buffers)");
    if (f.bufferBytes[b] < f.values[v].numBytes())
      return err(vname(v) + " (" + str(f.values[v]) + ", " +
                 std::to_string(f.values[v].numBytes()) +
                 " bytes) does not fit "
                 "in buffer " +
                 std::to_string(b) + " (" + std::to_string(f.bufferBytes[b]) +
                 " bytes)");
    members[b].push_back(v);
  }
  for (int32_t b = 0; b < nb; ++b) {
    std::vector<int32_t> &m = members[b];
    std::sort(m.begin(), m.end(), [&](int32_t x, int32_t y) {
      return def[x] != def[y] ? def[x] < def[y] : x < y;
    });
    for (size_t i = 1; i < m.size(); ++i)
      if (def[m[i]] <= lastUse[m[i - 1]])
        return err(vname(m[i - 1]) + " and " + vname(m[i]) + " share buffer " +
                   std::to_string(b) + " but are live at the same time");
  }
  return Status::ok();
}

/// Components (optional): known kinds, tiling the kernel list in order,
/// layers in the stage's order (forward ascending, backward descending).
Status FunctionCheck::components() {
  if (f.components.empty())
    return Status::ok();
  const int32_t nk = int32_t(f.kernels.size());
  const bool fwd = k == FunctionKind::Forward;
  int32_t at = 0;
  for (size_t i = 0; i < f.components.size(); ++i) {
    const ComponentRange &c = f.components[i];
    std::string cn = "component " + std::to_string(i) + " (" + c.kind +
                     " layer " + std::to_string(c.layer) + ", kernels [" +
                     std::to_string(c.begin) + ", " + std::to_string(c.end) +
                     "))";
    if (c.kind != "attn" && c.kind != "mlp")
      return err(cn + ": unknown kind \"" + c.kind + "\" (attn, mlp)");
    if (c.layer < 0)
      return err(cn + ": negative layer");
    if (c.begin != at)
      return err(cn + ": starts at kernel " + std::to_string(c.begin) +
                 " but the previous component ends at " + std::to_string(at) +
                 " (components must tile the kernels in order)");
    if (c.end <= c.begin || c.end > nk)
      return err(cn + ": empty or past the last kernel (" + std::to_string(nk) +
                 " kernels)");
    if (i > 0) {
      int32_t prev = f.components[i - 1].layer;
      if (fwd ? c.layer < prev : c.layer > prev)
        return err(cn + ": layer " + std::to_string(c.layer) + " after " +
                   std::to_string(prev) + " (layers must be " +
                   (fwd ? "non-decreasing in forward"
                        : "non-increasing in a backward function") +
                   ")");
    }
    at = c.end;
  }
  if (at != nk)
    return err("components cover kernels [0, " + std::to_string(at) + ") of " +
               std::to_string(nk));
  return Status::ok();
}

/// SSA form, roles allowed here, indices in range, buffers, kernel types.
Status Validator::function(const Stage &s, FunctionKind k) {
  return FunctionCheck(*this, s, k).run();
}

/// Stash / W-stash / activation-gradient wiring between a stage's functions.
Status Validator::wiring(const Stage &s) {
  auto typeOf = [](const Function &f, int32_t v) -> const TensorType & {
    return f.values[v];
  };
  // Forward's stash results: every slot exactly once.
  std::vector<const TensorType *> stash(s.numStash, nullptr),
      wstash(s.numWStash, nullptr);
  for (const ResultBinding &r : s.forward.results)
    if (r.role == ResultRole::Stash)
      stash[r.index] = &typeOf(s.forward, r.value);
  for (int32_t i = 0; i < s.numStash; ++i)
    if (!stash[i])
      return Status::error(where(s, FunctionKind::Forward) + ": stash slot " +
                           std::to_string(i) + " is never returned");
  for (const ResultBinding &r : s.backwardInput.results)
    if (r.role == ResultRole::WStash)
      wstash[r.index] = &typeOf(s.backwardInput, r.value);
  for (int32_t i = 0; i < s.numWStash; ++i)
    if (!wstash[i])
      return Status::error(where(s, FunctionKind::BackwardInput) +
                           ": wstash slot " + std::to_string(i) +
                           " is never returned");
  // Forward activation results and arguments by index.
  std::map<int32_t, const TensorType *> actOut, actIn;
  for (const ResultBinding &r : s.forward.results)
    if (r.role == ResultRole::Activation)
      actOut[r.index] = &typeOf(s.forward, r.value);
  for (const ArgBinding &a : s.forward.args)
    if (a.role == ArgRole::Activation)
      actIn[a.index] = &typeOf(s.forward, a.value);
  bool hasLoss = false, hasTokens = false;
  for (const ResultBinding &r : s.forward.results)
    hasLoss |= r.role == ResultRole::Loss;
  for (const ArgBinding &a : s.forward.args)
    hasTokens |= a.role == ArgRole::Tokens;
  if (isLast(s) && !hasLoss)
    return Status::error(where(s, FunctionKind::Forward) +
                         ": the last stage must return the loss");
  if (s.index == 0 && !hasTokens)
    return Status::error(where(s, FunctionKind::Forward) +
                         ": stage 0 must take the tokens");
  if (!isLast(s) && actOut.empty())
    return Status::error(where(s, FunctionKind::Forward) +
                         ": returns no activation for the next stage");
  int32_t expect = 0;
  for (auto &[i, t] : actOut)
    if (i != expect++)
      return Status::error(where(s, FunctionKind::Forward) +
                           ": activation results are not numbered 0.." +
                           std::to_string(actOut.size() - 1));
  expect = 0;
  for (auto &[i, t] : actIn)
    if (i != expect++)
      return Status::error(where(s, FunctionKind::Forward) +
                           ": activation arguments are not numbered 0.." +
                           std::to_string(actIn.size() - 1));
  for (FunctionKind k : kAllKinds) {
    if (k == FunctionKind::Forward)
      continue;
    const Function &f = stageFunction(s, k);
    const std::string w = where(s, k);
    for (size_t i = 0; i < f.args.size(); ++i) {
      const ArgBinding &a = f.args[i];
      const TensorType &t = typeOf(f, a.value);
      std::string an = "argument " + std::to_string(i) + " (" +
                       argRoleName(a.role) + " " + std::to_string(a.index) +
                       ")";
      const TensorType *want = nullptr;
      std::string from;
      if (a.role == ArgRole::Stash) {
        want = stash[a.index];
        from = "forward's stash result";
      } else if (a.role == ArgRole::WStash) {
        want = wstash[a.index];
        from = "backward_input's wstash result";
      } else if (a.role == ArgRole::GradIn && !isLast(s)) {
        auto it = actOut.find(a.index);
        if (it == actOut.end())
          return Status::error(w + ": " + an +
                               ": forward has no activation "
                               "result " +
                               std::to_string(a.index));
        want = it->second;
        from = "forward's activation result";
      }
      if (want && !sameType(*want, t))
        return Status::error(w + ": " + an + " is " + str(t) + " but " + from +
                             " is " + str(*want));
    }
    for (size_t i = 0; i < f.results.size(); ++i) {
      const ResultBinding &r = f.results[i];
      if (r.role != ResultRole::GradOut)
        continue;
      std::string rn = "result " + std::to_string(i) + " (grad_out " +
                       std::to_string(r.index) + ")";
      auto it = actIn.find(r.index);
      if (it == actIn.end())
        return Status::error(w + ": " + rn +
                             ": forward has no activation "
                             "argument " +
                             std::to_string(r.index));
      if (!sameType(*it->second, typeOf(f, r.value)))
        return Status::error(w + ": " + rn + " is " + str(typeOf(f, r.value)) +
                             " but the activation argument is " +
                             str(*it->second));
    }
  }
  return Status::ok();
}

/// Stage s's activation results match stage s+1's activation arguments.
Status Validator::chain() {
  for (const Stage &s : p.stages) {
    if (isLast(s))
      continue;
    const Stage *next = p.findStage(s.copy, s.index + 1);
    std::vector<const TensorType *> out, in;
    for (const ResultBinding &r : s.forward.results)
      if (r.role == ResultRole::Activation) {
        if (size_t(r.index) >= out.size())
          out.resize(r.index + 1, nullptr);
        out[r.index] = &s.forward.values[r.value];
      }
    for (const ArgBinding &a : next->forward.args)
      if (a.role == ArgRole::Activation) {
        if (size_t(a.index) >= in.size())
          in.resize(a.index + 1, nullptr);
        in[a.index] = &next->forward.values[a.value];
      }
    if (out.size() != in.size())
      return Status::error(where(*next, FunctionKind::Forward) + ": takes " +
                           std::to_string(in.size()) + " activations but " +
                           where(s) + " sends " + std::to_string(out.size()));
    for (size_t i = 0; i < out.size(); ++i)
      if (!sameType(*out[i], *in[i]))
        return Status::error(where(*next, FunctionKind::Forward) +
                             ": activation argument " + std::to_string(i) +
                             " is " + str(*in[i]) + " but " + where(s) +
                             " sends " + str(*out[i]));
  }
  return Status::ok();
}

Status Validator::run() {
  if (Status st = settings(); !st)
    return st;
  if (Status st = placement(); !st)
    return st;
  if (Status st = params(); !st)
    return st;
  if (Status st = stages(); !st)
    return st;
  if (Status st = sched::verify(p.schedule); !st)
    return Status::error("schedule: " + st.message());
  return Status::ok();
}

} // namespace

bool isValidInitSpec(const std::string &spec) {
  if (spec == "zeros" || spec == "ones")
    return true;
  if (spec.rfind("normal:", 0) != 0)
    return false;
  const std::string num = spec.substr(7);
  if (num.empty() || num.size() != std::strlen(num.c_str()))
    return false; // an embedded NUL
  char *end = nullptr;
  double sd = std::strtod(num.c_str(), &end);
  return end && *end == 0 && std::isfinite(sd) && sd >= 0;
}

Status validateProgram(Program &p) {
  if (Status st = Validator(p).run(); !st)
    return st;
  // Every mnemonic names an op now: resolve them, once.
  for (Stage &s : p.stages)
    for (FunctionKind k : kAllKinds)
      for (Kernel &kn : stageFunction(s, k).kernels)
        kn.kind = lookupOpKind(kn.op);
  return Status::ok();
}

} // namespace pipeforge::rt
