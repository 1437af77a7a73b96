//===- ProgramLowering.cpp - Schedule-level IR to a runtime Program -------===//
//
// See ProgramLowering.h. The translation registration is in
// ProgramTranslation.cpp.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Target/Program/ProgramLowering.h"
#include "pipeforge/Target/Program/Prepare.h"

#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Support/AttrNames.h"
#include "pipeforge/Support/Numeric.h"

#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <map>
#include <queue>

using namespace mlir;

namespace pipeforge::target {

void assignBuffers(rt::Function &f, const std::vector<int32_t> &def,
                   const std::vector<int32_t> &lastUse) {
  const size_t n = f.values.size();
  f.buffer.assign(n, -1);
  f.bufferBytes.clear();
  std::vector<int32_t> order(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = int32_t(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return def[a] < def[b]; });
  // Live buffers by the position of their last use; free ones by size.
  using Live = std::pair<int32_t, int32_t>; // (lastUse, buffer)
  std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live;
  std::map<int64_t, std::vector<int32_t>> freeBySize;
  for (int32_t v : order) {
    while (!live.empty() && live.top().first < def[v]) {
      int32_t b = live.top().second;
      live.pop();
      freeBySize[f.bufferBytes[b]].push_back(b);
    }
    int64_t bytes = f.values[v].numBytes();
    auto it = freeBySize.find(bytes);
    int32_t b;
    if (it != freeBySize.end() && !it->second.empty()) {
      b = it->second.back();
      it->second.pop_back();
    } else {
      b = int32_t(f.bufferBytes.size());
      f.bufferBytes.push_back(bytes);
    }
    f.buffer[v] = b;
    live.push({lastUse[v], b});
  }
}

namespace {

StringRef strAttr(func::FuncOp f, unsigned i, StringRef name, bool result) {
  StringAttr a = result ? f.getResultAttrOfType<StringAttr>(i, name)
                        : f.getArgAttrOfType<StringAttr>(i, name);
  return a ? a.getValue() : StringRef();
}
std::optional<int64_t> intAttr(func::FuncOp f, unsigned i, StringRef name,
                               bool result) {
  IntegerAttr a = result ? f.getResultAttrOfType<IntegerAttr>(i, name)
                         : f.getArgAttrOfType<IntegerAttr>(i, name);
  if (!a)
    return std::nullopt;
  return a.getInt();
}

/// What the lowering of one stage needs to know about its @forward.
struct ForwardInfo {
  func::FuncOp fn;
  llvm::DenseMap<unsigned, int32_t> actInOrdinal;  // arg index -> k
  llvm::DenseMap<unsigned, int32_t> actOutOrdinal; // result index -> k
  llvm::DenseMap<unsigned, int32_t> paramOfArg;    // arg index -> global
};

class Lowering {
public:
  Lowering(ModuleOp m, const LowerOptions &o) : module(m), opts(o) {
    // Component ranges exist iff pp-split-components tagged the ops.
    components = hasComponentTags(m);
  }
  FailureOr<rt::Program> run();

private:
  LogicalResult collectParams(pp::StageOp st, int copy, ForwardInfo &fi);
  LogicalResult lowerFunction(func::FuncOp fn, rt::FunctionKind kind,
                              const ForwardInfo &fi, bool firstStage,
                              bool lastStage, rt::Function &out);
  FailureOr<rt::TensorType> convertType(Type t, Operation *where) {
    return lowerTensorType(t, where);
  }

  LogicalResult checkExpertParallel(pp::PipelineOp pipeline);
  LogicalResult checkMoEBiases(pp::PipelineOp pipeline);
  LogicalResult setTensorParallel(pp::PipelineOp pipeline);
  void markExpertShards(pp::PipelineOp pipeline);

  ModuleOp module;
  const LowerOptions &opts;
  bool components = false;
  rt::Program prog;
  llvm::StringMap<int32_t> paramIndex;
  /// Parameters with nn.tied: (the forward function, its argument).
  struct TiedArg {
    func::FuncOp fn;
    unsigned arg;
    int32_t param;
  };
  std::vector<TiedArg> tiedArgs;
  LogicalResult checkTies();
};

/// Each tied parameter names a parameter of its model copy with the same
/// (shard) type that is not tied itself, is split the same way over the
/// tensor-parallel group and not over the expert group.
LogicalResult Lowering::checkTies() {
  auto shapeStr = [](const std::vector<int64_t> &shape) {
    std::string r;
    for (int64_t d : shape)
      r += (r.empty() ? "" : "x") + std::to_string(d);
    return r;
  };
  for (TiedArg &ta : tiedArgs) {
    const rt::Param &p = prog.params[size_t(ta.param)];
    auto err = [&]() {
      return ta.fn.emitError()
             << "parameter '" << p.name << "' (argument " << ta.arg
             << ") is tied to '" << p.tiedTo << "', ";
    };
    auto it = paramIndex.find(p.tiedTo);
    if (it == paramIndex.end())
      return err() << "which is not a parameter of the model";
    const rt::Param &t = prog.params[size_t(it->second)];
    if (!t.tiedTo.empty())
      return err() << "which is itself tied to '" << t.tiedTo << "'";
    if (t.type.shape != p.type.shape)
      return err() << "whose shape " << shapeStr(t.type.shape) << " is not "
                   << shapeStr(p.type.shape);
    if (t.tpDim != p.tpDim || t.expertSharded || p.expertSharded)
      return err() << "which is split differently over the tensor- or "
                      "expert-parallel group";
  }
  return success();
}

LogicalResult Lowering::collectParams(pp::StageOp st, int copy,
                                      ForwardInfo &fi) {
  func::FuncOp f = fi.fn;
  int32_t actIn = 0, actOut = 0;
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    std::optional<pp::Role> role = pp::getArgRole(f, i);
    if (role == pp::Role::act_in) {
      fi.actInOrdinal[i] = actIn++;
      continue;
    }
    if (role != pp::Role::param)
      continue;
    StringRef name = strAttr(f, i, attrs::kNNName, false);
    if (name.empty())
      return f.emitError() << "parameter argument " << i << " has no nn.name";
    StringRef init = strAttr(f, i, attrs::kNNInit, false);
    std::string full = name.str();
    if (copy > 0)
      full += "@copy" + std::to_string(copy);
    auto ty = convertType(f.getArgument(i).getType(), f);
    if (failed(ty))
      return failure();
    auto [it, fresh] =
        paramIndex.try_emplace(full, int32_t(prog.params.size()));
    if (!fresh) {
      const rt::Param &other = prog.params[it->second];
      return f.emitError() << "parameter '" << full << "' is used by stage "
                           << st.getIndex() << " and by stage " << other.stage
                           << " (copy " << other.copy
                           << "): a parameter must belong to one stage";
    }
    rt::Param p;
    p.name = full;
    p.type = *ty;
    p.init = init.empty() ? "zeros" : init.str();
    p.copy = copy;
    p.stage = int32_t(st.getIndex());
    if (auto dim = f.getArgAttrOfType<IntegerAttr>(i, attrs::kTPDim))
      p.tpDim = int32_t(dim.getInt());
    p.tpReduceGrad = static_cast<bool>(f.getArgAttr(i, attrs::kTPReduceGrad));
    StringRef tied = strAttr(f, i, attrs::kNNTied, false);
    if (!tied.empty()) {
      p.tiedTo = tied.str();
      if (copy > 0)
        p.tiedTo += "@copy" + std::to_string(copy);
      tiedArgs.push_back({f, i, int32_t(prog.params.size())});
    }
    prog.params.push_back(std::move(p));
    fi.paramOfArg[i] = it->second;
  }
  for (unsigned r = 0; r < f.getNumResults(); ++r)
    if (pp::getResultRole(f, r) == pp::Role::act_out)
      fi.actOutOrdinal[r] = actOut++;
  return success();
}

/// The lowering of one stage function into `out`: its values numbered in
/// program order (the arguments, then each op's results: the numbering
/// Prepare.h's buffer plans use), then its argument bindings, its kernels,
/// its result bindings and its buffers, each a phase of its own.
class FunctionLowering {
public:
  FunctionLowering(func::FuncOp fn, rt::FunctionKind kind,
                   const ForwardInfo &fi, rt::Function &out)
      : fn(fn), kind(kind), fi(fi), out(out) {}

  /// Every argument a value and a binding (its role in the program).
  LogicalResult lowerArgs(bool firstStage, bool lastStage);
  /// One kernel per op of the body.
  LogicalResult lowerKernels();
  /// Every returned value's binding.
  LogicalResult lowerResults();
  /// Buffers: recorded by --pp-assign-buffers (checked to fit), else
  /// computed as that pass does.
  LogicalResult lowerBuffers();

private:
  FailureOr<int32_t> newValue(Value v, Operation *where) {
    auto ty = lowerTensorType(v.getType(), where);
    if (failed(ty))
      return failure();
    int32_t id = int32_t(out.values.size());
    out.values.push_back(*ty);
    ids[v] = id;
    return id;
  }
  /// The number of a value already numbered, or -2.
  int32_t use(Value v) const {
    auto it = ids.find(v);
    return it == ids.end() ? -2 : it->second;
  }
  /// The global parameter of @forward's argument `argIdx`, or -1.
  int32_t forwardParam(std::optional<int64_t> argIdx) const {
    if (!argIdx)
      return -1;
    auto it = fi.paramOfArg.find(unsigned(*argIdx));
    return it == fi.paramOfArg.end() ? -1 : it->second;
  }
  LogicalResult lowerKernel(Operation &op);
  /// The op's inherent attributes into `k` (its segment sizes into opSeg
  /// and resSeg).
  LogicalResult kernelAttrs(Operation &op, rt::Kernel &k,
                            DenseI32ArrayAttr &opSeg,
                            DenseI32ArrayAttr &resSeg);
  /// `vals` numbered into `dst` (a segment of size 0: -1): defined here
  /// (`isDef`, results) or used (operands).
  LogicalResult addOperands(Operation &op, ValueRange vals,
                            DenseI32ArrayAttr seg, std::vector<int32_t> &dst,
                            bool isDef);

  func::FuncOp fn;
  rt::FunctionKind kind;
  const ForwardInfo &fi;
  rt::Function &out;
  llvm::DenseMap<Value, int32_t> ids;
};

LogicalResult FunctionLowering::lowerArgs(bool firstStage, bool lastStage) {
  for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
    std::optional<pp::Role> role = pp::getArgRole(fn, i);
    auto id = newValue(fn.getArgument(i), fn);
    if (failed(id))
      return failure();
    rt::ArgBinding a{rt::ArgRole::Activation, 0, *id};
    if (role == pp::Role::act_in && kind == rt::FunctionKind::Forward) {
      a.role = rt::ArgRole::Activation;
      a.index = fi.actInOrdinal.lookup(i);
    } else if (role == pp::Role::data || role == pp::Role::tokens ||
               role == pp::Role::targets) {
      StringRef nnRole = strAttr(fn, i, attrs::kNNRole, false);
      if (nnRole == "tokens" || (nnRole.empty() && firstStage && !lastStage))
        a.role = rt::ArgRole::Tokens;
      else if (nnRole == "targets" ||
               (nnRole.empty() && lastStage && !firstStage))
        a.role = rt::ArgRole::Targets;
      else
        return fn.emitError() << "argument " << i
                              << ": cannot tell tokens from targets (set "
                                 "nn.role)";
    } else if (role == pp::Role::param) {
      a.role = rt::ArgRole::Param;
      a.index = kind == rt::FunctionKind::Forward
                    ? forwardParam(i)
                    : forwardParam(intAttr(fn, i, attrs::kPPArg, false));
      if (a.index < 0)
        return fn.emitError()
               << "argument " << i << ": parameter not found in @forward";
    } else if (role == pp::Role::stash) {
      a.role = rt::ArgRole::Stash;
      a.index = int32_t(intAttr(fn, i, attrs::kPPStash, false).value_or(-1));
    } else if (role == pp::Role::wstash) {
      a.role = rt::ArgRole::WStash;
      a.index = int32_t(intAttr(fn, i, attrs::kPPWStash, false).value_or(-1));
    } else if (role == pp::Role::grad_in) {
      a.role = rt::ArgRole::GradIn;
      auto r = intAttr(fn, i, attrs::kPPResult, false);
      auto it =
          r ? fi.actOutOrdinal.find(unsigned(*r)) : fi.actOutOrdinal.end();
      if (it == fi.actOutOrdinal.end())
        return fn.emitError() << "argument " << i
                              << ": grad_in of a result that is not an "
                                 "activation";
      a.index = it->second;
    } else if (role == pp::Role::loss_seed) {
      a.role = rt::ArgRole::GradIn;
      a.index = 0;
    } else {
      return fn.emitError() << "argument " << i << ": unexpected pp.role '"
                            << strAttr(fn, i, attrs::kPPRole, false) << "' in @"
                            << fn.getSymName();
    }
    out.args.push_back(a);
  }
  return success();
}

LogicalResult FunctionLowering::lowerKernels() {
  for (Operation &op : fn.getBody().front().without_terminator())
    if (failed(lowerKernel(op)))
      return failure();
  return success();
}

LogicalResult FunctionLowering::lowerKernel(Operation &op) {
  rt::Kernel k;
  StringRef name = op.getName().getStringRef();
  if (name.consume_front("nn.")) {
    k.op = name.str();
  } else if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    if (!matchPattern(c.getResult(), m_AnyZeroFloat()) &&
        !matchPattern(c.getResult(), m_Zero()))
      return op.emitError() << "only zero constants can be lowered to the "
                               "program file";
    k.op = "zeros";
  } else {
    return op.emitError() << "cannot lower '" << op.getName()
                          << "' to the program file (nn ops only)";
  }
  DenseI32ArrayAttr opSeg, resSeg;
  if (failed(kernelAttrs(op, k, opSeg, resSeg)) ||
      failed(addOperands(op, op.getOperands(), opSeg, k.inputs, false)) ||
      failed(addOperands(op, op.getResults(), resSeg, k.outputs, true)))
    return failure();
  out.kernels.push_back(std::move(k));
  return success();
}

LogicalResult FunctionLowering::kernelAttrs(Operation &op, rt::Kernel &k,
                                            DenseI32ArrayAttr &opSeg,
                                            DenseI32ArrayAttr &resSeg) {
  for (NamedAttribute na : op.getAttrDictionary()) {
    StringRef an = na.getName().getValue();
    Attribute v = na.getValue();
    if (an == "operandSegmentSizes" || an == "operand_segment_sizes") {
      opSeg = dyn_cast<DenseI32ArrayAttr>(v);
      continue;
    }
    if (an == "resultSegmentSizes" || an == "result_segment_sizes") {
      resSeg = dyn_cast<DenseI32ArrayAttr>(v);
      continue;
    }
    if (an.contains('.') || (k.op == "zeros" && an == "value"))
      continue; // discardable (nn.layer, nn.dropout, ...) / the constant
    if (auto b = dyn_cast<BoolAttr>(v))
      k.attrs[an.str()] = b.getValue();
    else if (isa<UnitAttr>(v))
      k.attrs[an.str()] = true;
    else if (auto i = dyn_cast<IntegerAttr>(v))
      k.attrs[an.str()] = int64_t(i.getValue().getSExtValue());
    else if (auto f = dyn_cast<FloatAttr>(v))
      k.attrs[an.str()] = f.getValueAsDouble();
    else if (auto s = dyn_cast<StringAttr>(v))
      k.attrs[an.str()] = s.getValue().str();
    else
      return op.emitError() << "cannot lower attribute '" << an << "' (" << v
                            << ") to the program file";
  }
  return success();
}

LogicalResult FunctionLowering::addOperands(Operation &op, ValueRange vals,
                                            DenseI32ArrayAttr seg,
                                            std::vector<int32_t> &dst,
                                            bool isDef) {
  auto one = [&](Value v) -> LogicalResult {
    if (isDef) {
      auto id = newValue(v, &op);
      if (failed(id))
        return failure();
      dst.push_back(*id);
      return success();
    }
    int32_t id = use(v);
    if (id < 0)
      return op.emitError() << "operand defined outside the function";
    dst.push_back(id);
    return success();
  };
  if (!seg) {
    for (Value v : vals)
      if (failed(one(v)))
        return failure();
    return success();
  }
  unsigned at = 0;
  for (int32_t n : seg.asArrayRef()) {
    if (n == 0)
      dst.push_back(-1);
    for (int32_t j = 0; j < n; ++j)
      if (failed(one(vals[at++])))
        return failure();
  }
  return success();
}

LogicalResult FunctionLowering::lowerResults() {
  Operation *ret = fn.getBody().front().getTerminator();
  for (unsigned r = 0; r < ret->getNumOperands(); ++r) {
    int32_t id = use(ret->getOperand(r));
    if (id < 0)
      return ret->emitError() << "returned value " << r << " is not lowered";
    std::optional<pp::Role> role = pp::getResultRole(fn, r);
    rt::ResultBinding b{rt::ResultRole::Activation, 0, id};
    if (role == pp::Role::act_out) {
      b.role = rt::ResultRole::Activation;
      b.index = fi.actOutOrdinal.lookup(r);
    } else if (role == pp::Role::loss) {
      b.role = rt::ResultRole::Loss;
    } else if (role == pp::Role::stash) {
      b.role = rt::ResultRole::Stash;
      b.index = int32_t(intAttr(fn, r, attrs::kPPStash, true).value_or(-1));
    } else if (role == pp::Role::wstash) {
      b.role = rt::ResultRole::WStash;
      b.index = int32_t(intAttr(fn, r, attrs::kPPWStash, true).value_or(-1));
    } else if (role == pp::Role::grad_out) {
      b.role = rt::ResultRole::GradOut;
      auto a = intAttr(fn, r, attrs::kPPArg, true);
      auto it = a ? fi.actInOrdinal.find(unsigned(*a)) : fi.actInOrdinal.end();
      if (it == fi.actInOrdinal.end())
        return fn.emitError() << "result " << r
                              << ": grad_out of an argument that is not an "
                                 "activation";
      b.index = it->second;
    } else if (role == pp::Role::param_grad) {
      b.role = rt::ResultRole::ParamGrad;
      b.index = forwardParam(intAttr(fn, r, attrs::kPPArg, true));
      if (b.index < 0)
        return fn.emitError()
               << "result " << r << ": param_grad of an unknown parameter";
    } else {
      return fn.emitError() << "result " << r << ": unexpected pp.role '"
                            << strAttr(fn, r, attrs::kPPRole, true) << "' in @"
                            << fn.getSymName();
    }
    out.results.push_back(b);
  }
  return success();
}

LogicalResult FunctionLowering::lowerBuffers() {
  auto recorded = readBufferPlan(fn);
  if (failed(recorded))
    return failure();
  FailureOr<BufferPlan> plan =
      *recorded ? FailureOr<BufferPlan>(std::move(**recorded))
                : computeBufferPlan(fn);
  if (failed(plan))
    return failure();
  out.buffer = std::move(plan->buffer);
  out.bufferBytes = std::move(plan->bytes);
  return success();
}

LogicalResult Lowering::lowerFunction(func::FuncOp fn, rt::FunctionKind kind,
                                      const ForwardInfo &fi, bool firstStage,
                                      bool lastStage, rt::Function &out) {
  FunctionLowering fl(fn, kind, fi, out);
  if (failed(fl.lowerArgs(firstStage, lastStage)) ||
      failed(fl.lowerKernels()))
    return failure();
  // Component ranges: recorded by --pp-component-ranges, else computed as
  // that pass does when the ops carry pp.component.
  if (auto ranges = readComponentRanges(fn))
    out.components = std::move(*ranges);
  else if (components)
    out.components = computeComponentRanges(fn, kind);
  if (failed(fl.lowerResults()) || failed(fl.lowerBuffers()))
    return failure();
  return success();
}

/// The experts of an nn.moe (its router's rows; 0 when unknown).
static int64_t moeExperts(nn::MoEOp moe) {
  auto router = dyn_cast<RankedTensorType>(moe.getRouter().getType());
  return router && router.getRank() >= 1 ? router.getDimSize(0) : 0;
}

/// Every nn.moe layer's experts must split evenly over the EP group. A
/// one-expert nn.moe (Qwen2-MoE's gated shared expert) is a gated dense MLP:
/// it stays whole on every rank of the group, like the router, and needs no
/// all-to-all.
LogicalResult Lowering::checkExpertParallel(pp::PipelineOp pipeline) {
  int ep = opts.training.expertParallel;
  if (ep <= 1)
    return success();
  bool anyMoE = false;
  WalkResult r = pipeline.walk([&](nn::MoEOp moe) {
    // Each copy's @forward holds the layer once.
    auto fn = moe->getParentOfType<func::FuncOp>();
    if (!fn || fn.getSymName() != "forward")
      return WalkResult::advance();
    int64_t experts = moeExperts(moe);
    if (experts == 1)
      return WalkResult::advance();
    anyMoE = true;
    if (experts % ep != 0) {
      moe.emitError() << "--ep " << ep << " does not divide the " << experts
                      << " experts of a moe layer";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (r.wasInterrupted())
    return failure();
  if (!anyMoE)
    return pipeline.emitError()
           << "--ep " << ep << ": the model has no moe layer with more "
              "than one expert";
  return success();
}

/// A load-balancing bias (nn.moe's `bias`) is one layer's state: named by
/// one nn.moe of each model copy (the runtime sums its load over the copies).
LogicalResult Lowering::checkMoEBiases(pp::PipelineOp pipeline) {
  std::map<std::pair<int64_t, std::string>, nn::MoEOp> seen;
  WalkResult r = pipeline.walk([&](nn::MoEOp moe) {
    auto fn = moe->getParentOfType<func::FuncOp>();
    auto stage = moe->getParentOfType<pp::StageOp>();
    std::optional<StringRef> bias = moe.getBias();
    if (!bias || !fn || fn.getSymName() != "forward" || !stage)
      return WalkResult::advance();
    auto [it, fresh] =
        seen.try_emplace({int64_t(stage.getCopy()), bias->str()}, moe);
    if (fresh)
      return WalkResult::advance();
    InFlightDiagnostic d = moe.emitError()
                           << "the load-balancing bias '" << *bias
                           << "' is named by two moe layers";
    d.attachNote(it->second.getLoc()) << "the other layer";
    return WalkResult::interrupt();
  });
  return failure(r.wasInterrupted());
}

/// The tensor-parallel group size: the `tp` of every collective (and the
/// `vocab_shards` of the embedding) that --nn-shard-tensor put in the
/// stages; all must agree.
LogicalResult Lowering::setTensorParallel(pp::PipelineOp pipeline) {
  int64_t tp = 1;
  Operation *first = nullptr;
  WalkResult r = pipeline.walk([&](Operation *op) {
    int64_t t = 1;
    if (auto comm = dyn_cast<nn::CommOpInterface>(op))
      t = comm.getGroupSize();
    else if (auto e = dyn_cast<nn::EmbeddingOp>(op))
      t = int64_t(e.getVocabShards().value_or(1));
    if (t == 1)
      return WalkResult::advance();
    if (tp != 1 && t != tp) {
      op->emitError() << "tensor-parallel group of " << t << " ranks, but "
                      << first->getName() << " has " << tp;
      return WalkResult::interrupt();
    }
    tp = t;
    first = op;
    return WalkResult::advance();
  });
  if (r.wasInterrupted())
    return failure();
  prog.training.tensorParallel = int32_t(tp);
  return success();
}

/// The expert weights (w1, w2, w3) of every nn.moe with more than one
/// expert are split over the EP group: the program says so per parameter,
/// so the runtime never looks at kernels to find them (a moe kernel whose
/// expert weights are all unmarked runs whole on each rank).
void Lowering::markExpertShards(pp::PipelineOp pipeline) {
  pipeline.walk([&](nn::MoEOp moe) {
    auto fn = moe->getParentOfType<func::FuncOp>();
    if (!fn || fn.getSymName() != "forward" || moeExperts(moe) == 1)
      return;
    auto st = fn->getParentOfType<pp::StageOp>();
    std::string suffix =
        st && st.getCopy() > 0 ? "@copy" + std::to_string(st.getCopy()) : "";
    for (Value w : {moe.getW1(), moe.getW2(), moe.getW3()}) {
      auto arg = dyn_cast_or_null<BlockArgument>(w);
      if (!arg || arg.getOwner()->getParentOp() != fn.getOperation())
        continue;
      StringRef name = strAttr(fn, arg.getArgNumber(), attrs::kNNName, false);
      auto it = paramIndex.find((name + suffix).str());
      if (it != paramIndex.end())
        prog.params[it->second].expertSharded = true;
    }
  });
}

FailureOr<rt::Program> Lowering::run() {
  pp::PipelineOp pipeline;
  pp::ScheduleOp schedOp;
  for (Operation &op : module.getBody()->getOperations()) {
    if (auto p = dyn_cast<pp::PipelineOp>(op)) {
      if (pipeline)
        return op.emitError() << "more than one pp.pipeline", failure();
      pipeline = p;
    }
    if (auto s = dyn_cast<pp::ScheduleOp>(op))
      schedOp = s;
  }
  if (!pipeline)
    return module.emitError() << "no pp.pipeline to lower", failure();
  if (!opts.schedule && !schedOp)
    return module.emitError() << "no pp.schedule to lower", failure();

  prog.model = opts.model;
  if (auto n = pipeline->getAttrOfType<StringAttr>(attrs::kModelName))
    prog.model.name = n.getValue().str();
  if (auto c = pipeline->getAttrOfType<StringAttr>(attrs::kHFConfig))
    prog.model.hfConfig = c.getValue().str();
  if (auto v = pipeline->getAttrOfType<IntegerAttr>(attrs::kVocabSize))
    prog.model.vocab = v.getInt();
  prog.training = opts.training;
  if (!opts.schedule && prog.training.schedule.empty())
    prog.training.schedule = schedOp.getKind().str();
  if (failed(checkMoEBiases(pipeline)))
    return failure();
  if (failed(checkExpertParallel(pipeline)))
    return failure();
  if (failed(setTensorParallel(pipeline)))
    return failure();
  prog.schedule =
      opts.schedule ? *opts.schedule : pp::toLibrarySchedule(schedOp);
  prog.training.pipelineRanks = prog.schedule.numRanks();
  prog.training.microbatches =
      prog.schedule.numMicrobatches * prog.schedule.placement.numCopies;

  std::vector<pp::StageOp> stages;
  for (Operation &op : pipeline.getBody().front())
    if (auto st = dyn_cast<pp::StageOp>(op))
      stages.push_back(st);
  std::stable_sort(stages.begin(), stages.end(),
                   [](pp::StageOp a, pp::StageOp b) {
                     return std::make_pair(a.getCopy(), a.getIndex()) <
                            std::make_pair(b.getCopy(), b.getIndex());
                   });
  const int64_t numStages = pipeline.getNumStages();
  std::vector<ForwardInfo> infos(stages.size());
  for (size_t i = 0; i < stages.size(); ++i) {
    pp::StageOp st = stages[i];
    infos[i].fn = st.lookupSymbol<func::FuncOp>("forward");
    for (const char *n : kStageFunctionNames)
      if (!st.lookupSymbol<func::FuncOp>(n))
        return st.emitError() << "stage has no @" << n
                              << " (run --pp-split-backward first)",
               failure();
    if (failed(collectParams(st, int(st.getCopy()), infos[i])))
      return failure();
  }
  if (opts.training.expertParallel > 1)
    markExpertShards(pipeline);
  if (failed(checkTies()))
    return failure();
  for (size_t i = 0; i < stages.size(); ++i) {
    pp::StageOp st = stages[i];
    rt::Stage s;
    s.copy = int32_t(st.getCopy());
    s.index = int32_t(st.getIndex());
    s.rank = int32_t(st.getRank());
    s.chunk = int32_t(st.getChunk());
    bool first = s.index == 0, last = s.index == numStages - 1;
    const rt::FunctionKind kinds[] = {
        rt::FunctionKind::Forward, rt::FunctionKind::BackwardInput,
        rt::FunctionKind::BackwardWeight, rt::FunctionKind::Backward};
    for (int k = 0; k < 4; ++k)
      if (failed(lowerFunction(
              st.lookupSymbol<func::FuncOp>(kStageFunctionNames[k]), kinds[k],
              infos[i], first, last, rt::stageFunction(s, kinds[k]))))
        return failure();
    for (const rt::ResultBinding &r : s.forward.results)
      s.numStash += r.role == rt::ResultRole::Stash;
    for (const rt::ResultBinding &r : s.backwardInput.results)
      s.numWStash += r.role == rt::ResultRole::WStash;
    prog.stages.push_back(std::move(s));
  }
  // Tokens fix the run shape.
  for (const rt::ArgBinding &a : prog.stages.front().forward.args)
    if (a.role == rt::ArgRole::Tokens) {
      const rt::TensorType &t = prog.stages.front().forward.values[a.value];
      if (t.shape.size() == 2) {
        prog.model.microbatchSize = t.shape[0];
        prog.model.seqLen = t.shape[1];
      }
    }
  return prog;
}

} // namespace

FailureOr<rt::Program> lowerToProgram(ModuleOp module,
                                      const LowerOptions &opts) {
  return Lowering(module, opts).run();
}

} // namespace pipeforge::target
