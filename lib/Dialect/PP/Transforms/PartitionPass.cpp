//===- PartitionPass.cpp - --pp-partition ---------------------------------===//
//
// A thin adapter between `func.func @model` and the plain C++ partitioner
// (pipeforge/Partition/Partition.h): the ops' layers and each layer's cost
// from the cost analysis (nn/Analysis/CostSum.h), cut, then build one
// `pp.stage` per stage whose `@forward` clones the stage's ops.
//
// Values crossing a cut: a value defined in stage d and used last in stage u
// is live across the cuts d+1 .. u, so the stages in between pass it through.
// Stage s takes the values live across cut s and returns those live across
// cut s+1, both in definition order, so the results of stage s are exactly
// the leading arguments of stage s+1.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Partition/Partition.h"
#include "pipeforge/Support/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPPARTITION
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

namespace {

/// One `nn.layer` group of @model: contiguous top-level ops.
struct Layer {
  int64_t id = 0;
  SmallVector<Operation *> ops;
  double cost = 0; ///< F + B + W FLOPs
};

/// Where every stage of the pipeline runs.
struct Plan {
  PlacementKind kind = PlacementKind::linear;
  int64_t ranks = 0;

  int64_t numCopies() const { return kind == PlacementKind::dual ? 2 : 1; }
  /// (rank, chunk) of stage `s` of copy `copy`, as PipelineOp's verifier
  /// expects them.
  std::pair<int64_t, int64_t> place(int64_t copy, int64_t s) const {
    switch (kind) {
    case PlacementKind::linear:
    case PlacementKind::interleaved:
      return {s % ranks, s / ranks};
    case PlacementKind::v:
      return s < ranks ? std::make_pair(s, int64_t(0))
                       : std::make_pair(2 * ranks - 1 - s, int64_t(1));
    case PlacementKind::dual:
      return copy == 0 ? std::make_pair(s, int64_t(0))
                       : std::make_pair(ranks - 1 - s, int64_t(1));
    }
    return {0, 0};
  }
};

} // namespace

/// The layers of @model in body order: the cost analysis's grouping by
/// `nn.layer` (nn/Analysis/CostSum.h), each with its top-level ops and its
/// F + B + W FLOPs. A cut falls between top-level ops, so every one must be
/// in a layer and the ops of a layer must be contiguous.
static FailureOr<SmallVector<Layer>> collectLayers(func::FuncOp model) {
  Block &body = model.getBody().front();
  SmallVector<Layer> layers;
  llvm::DenseMap<int64_t, Operation *> lastOpOfLayer;
  for (Operation &op : body.without_terminator()) {
    std::optional<int64_t> layer = nn::layerOf(&op);
    if (!layer)
      return op.emitOpError("has no integer 'nn.layer' attribute; "
                            "--pp-partition needs every op of @model in a "
                            "layer");
    int64_t id = *layer;
    if (id < 0 || id > INT32_MAX)
      return op.emitOpError("has 'nn.layer' = ")
             << id << "; layer ids must be in [0, " << INT32_MAX << "]";
    if (layers.empty() || layers.back().id != id) {
      if (Operation *prev = lastOpOfLayer.lookup(id)) {
        InFlightDiagnostic diag =
            op.emitOpError("is in layer ")
            << id << ", which ended earlier; the ops of a layer must be "
            << "contiguous";
        diag.attachNote(prev->getLoc()) << "layer " << id << " ended here";
        return diag;
      }
      layers.push_back(Layer{id, {}, 0});
    }
    layers.back().ops.push_back(&op);
    lastOpOfLayer[id] = &op;
  }
  if (layers.empty())
    return emitError(body.getParentOp()->getLoc(),
                     "'@model' has no ops to partition");
  // FLOPs have no element size.
  nn::CostsByLayer costs = nn::sumCostsByLayer(model, /*bytesPerElement=*/1);
  for (Layer &layer : layers)
    layer.cost = costs.layers[*costs.index.position(layer.id)].flops();
  return layers;
}

/// Checks `stages`, `placement` and `ranks` against the placement rules of
/// pp.pipeline and derives the rank count.
static FailureOr<Plan> resolvePlan(Location loc, int64_t stages,
                                   StringRef placement, int64_t ranks) {
  std::optional<PlacementKind> kind = symbolizePlacementKind(placement);
  if (!kind)
    return emitError(loc, "unknown placement '")
           << placement << "'; expected linear, interleaved, v or dual";
  if (stages < 1)
    return emitError(loc, "--pp-partition needs stages >= 1, got ") << stages;
  if (ranks < 0)
    return emitError(loc, "--pp-partition needs ranks >= 1, got ") << ranks;
  Plan plan;
  plan.kind = *kind;
  int64_t derived = 0;
  switch (*kind) {
  case PlacementKind::linear:
    derived = stages;
    break;
  case PlacementKind::interleaved:
    if (ranks == 0)
      return emitError(loc, "placement 'interleaved' needs ranks (stage k "
                            "runs on rank k mod ranks)");
    if (stages % ranks != 0)
      return emitError(loc, "placement 'interleaved' needs stages to be a "
                            "multiple of ranks, got ")
             << stages << " stages on " << ranks << " ranks";
    derived = ranks;
    break;
  case PlacementKind::v:
    if (stages % 2 != 0)
      return emitError(loc, "placement 'v' needs an even number of stages "
                            "(2 x ranks), got ")
             << stages;
    derived = stages / 2;
    break;
  case PlacementKind::dual:
    if (stages % 2 != 0)
      return emitError(loc, "placement 'dual' needs an even number of stages "
                            "(one per rank, an even rank count), got ")
             << stages;
    derived = stages;
    break;
  }
  if (ranks != 0 && ranks != derived)
    return emitError(loc, "ranks=")
           << ranks << " does not match placement '" << placement << "' with "
           << stages << " stages, which needs " << derived << " ranks";
  plan.ranks = derived;
  return plan;
}

namespace {

/// Builds the stage bodies of one cut of @model.
class StageBuilder {
public:
  StageBuilder(func::FuncOp model, ArrayRef<Layer> layers,
               const partition::StageCut &cut)
      : model(model), body(model.getBody().front()), cut(cut) {
    int64_t k = cut.numStages();
    for (auto [i, layer] : llvm::enumerate(layers))
      for (Operation *op : layer.ops)
        stageOfOp[op] = cut.stageOf(static_cast<int>(i));
    stageOps.resize(k);
    for (Operation &op : body.without_terminator())
      stageOps[stageOfOp[&op]].push_back(&op);
    computeLiveSets();
    computeArgUses();
  }

  /// Builds `func.func @forward` of stage `s` at `b`'s insertion point.
  FailureOr<func::FuncOp> buildForward(OpBuilder &b, int64_t s);

private:
  int64_t numStages() const { return cut.numStages(); }
  /// The stage of the top-level op holding `user`; the return counts as a
  /// use by the last stage.
  int64_t useStage(Operation *user) {
    Operation *top = body.findAncestorOpInBlock(*user);
    if (!top || top == body.getTerminator())
      return numStages() - 1;
    return stageOfOp.lookup(top);
  }
  void computeLiveSets();
  void computeArgUses();

  func::FuncOp model;
  Block &body;
  const partition::StageCut &cut;
  llvm::DenseMap<Operation *, int64_t> stageOfOp;
  SmallVector<SmallVector<Operation *>> stageOps;
  /// live[c]: values crossing cut c (between stage c-1 and c), c in 1..k-1.
  SmallVector<SmallVector<Value>> live;
  /// argUsed[s][i]: stage s uses argument i of @model.
  SmallVector<llvm::BitVector> argUsed;
};

} // namespace

void StageBuilder::computeLiveSets() {
  int64_t k = numStages();
  live.assign(k + 1, {});
  for (Operation &op : body.without_terminator()) {
    int64_t def = stageOfOp[&op];
    for (Value v : op.getResults()) {
      int64_t last = def;
      for (Operation *user : v.getUsers())
        last = std::max(last, useStage(user));
      for (int64_t c = def + 1; c <= last; ++c)
        live[c].push_back(v);
    }
  }
}

void StageBuilder::computeArgUses() {
  int64_t k = numStages();
  argUsed.assign(k, llvm::BitVector(body.getNumArguments()));
  for (BlockArgument arg : body.getArguments())
    for (Operation *user : arg.getUsers())
      argUsed[useStage(user)].set(arg.getArgNumber());
}

FailureOr<func::FuncOp> StageBuilder::buildForward(OpBuilder &b, int64_t s) {
  int64_t k = numStages();
  Location loc = stageOps[s].front()->getLoc();
  MLIRContext *ctx = model.getContext();

  // Inputs: activations, then data arguments, then parameters.
  SmallVector<Value> inputs(live[s].begin(), live[s].end());
  SmallVector<DictionaryAttr> inputAttrs(inputs.size(),
                                         DictionaryAttr::get(ctx));
  for (bool params : {false, true}) {
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto role = model.getArgAttrOfType<StringAttr>(i, attrs::kNNRole);
      bool isParam = role && role.getValue() == "param";
      if (isParam != params || !argUsed[s].test(i))
        continue;
      inputs.push_back(arg);
      DictionaryAttr attrs = model.getArgAttrDict(i);
      inputAttrs.push_back(attrs ? attrs : DictionaryAttr::get(ctx));
    }
  }

  // Outputs: values crossing the next cut, or @model's results.
  SmallVector<Value> outputs;
  SmallVector<DictionaryAttr> outputAttrs;
  if (s + 1 < k) {
    outputs.assign(live[s + 1].begin(), live[s + 1].end());
    outputAttrs.assign(outputs.size(), DictionaryAttr::get(ctx));
  } else {
    Operation *ret = body.getTerminator();
    outputs.assign(ret->operand_begin(), ret->operand_end());
    for (unsigned i = 0; i < outputs.size(); ++i) {
      DictionaryAttr attrs = model.getResultAttrDict(i);
      outputAttrs.push_back(attrs ? attrs : DictionaryAttr::get(ctx));
    }
  }

  auto type = FunctionType::get(ctx, ValueRange(inputs).getTypes(),
                                ValueRange(outputs).getTypes());
  auto fn = func::FuncOp::create(b, loc, "forward", type);
  fn.setAllArgAttrs(inputAttrs);
  fn.setAllResultAttrs(outputAttrs);

  Block *entry = fn.addEntryBlock();
  IRMapping mapping;
  for (auto [from, to] : llvm::zip_equal(inputs, entry->getArguments()))
    mapping.map(from, to);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(entry);
  for (Operation *op : stageOps[s])
    b.clone(*op, mapping);
  SmallVector<Value> results;
  for (Value v : outputs) {
    Value mapped = mapping.lookupOrNull(v);
    if (!mapped) // unreachable by construction of the live sets
      return emitError(loc, "internal error: stage ")
             << s << " cannot produce a value it must return";
    results.push_back(mapped);
  }
  func::ReturnOp::create(b, loc, results);
  return fn;
}

/// A stage's F + B + W FLOPs as an integer attribute (FLOP counts are whole
/// numbers, and an i64 prints exactly where a large f64 prints in hex).
static IntegerAttr stageCostAttr(OpBuilder &b, double flops) {
  return b.getI64IntegerAttr(static_cast<int64_t>(std::llround(flops)));
}

/// `value` printed with printf's `spec`.
static std::string formatNumber(const char *spec, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), spec, value);
  return buf;
}

/// The `nn.layer` ids of the layers of stage `s`.
static SmallVector<int64_t>
layerIds(ArrayRef<Layer> layers, const partition::StageCut &cut, int64_t s) {
  SmallVector<int64_t> ids;
  int first = cut.firstLayer(s);
  for (int i = first; i < first + cut.sizes[s]; ++i)
    ids.push_back(layers[i].id);
  return ids;
}

namespace {
struct PartitionPass : public pp::impl::PPPartitionBase<PartitionPass> {
  using PPPartitionBase::PPPartitionBase;

  void runOnOperation() override {
    if (failed(partitionModule()))
      signalPassFailure();
  }

  LogicalResult partitionModule();
};
} // namespace

LogicalResult PartitionPass::partitionModule() {
  ModuleOp module = getOperation();
  const int64_t numStages = stages;
  auto model = dyn_cast_or_null<func::FuncOp>(
      SymbolTable::lookupSymbolIn(module, "model"));
  if (!model)
    return emitError(module.getLoc(),
                     "found no 'func.func @model' to partition");
  if (model.isExternal())
    return emitError(model.getLoc(), "'@model' has no body to partition");
  if (!model.getBody().hasOneBlock())
    return emitError(model.getLoc(),
                     "'@model' must have a single block, it has ")
           << model.getBody().getBlocks().size();

  FailureOr<Plan> plan =
      resolvePlan(model.getLoc(), numStages, placement, ranks);
  if (failed(plan))
    return failure();
  FailureOr<SmallVector<Layer>> layers = collectLayers(model);
  if (failed(layers))
    return failure();

  std::vector<double> costs;
  for (const Layer &layer : *layers)
    costs.push_back(layer.cost);
  std::vector<int> layoutVec(layout.begin(), layout.end());
  auto cut = partition::partition(costs, numStages, layoutVec);
  if (!cut)
    return emitError(model.getLoc(), "cannot partition @model: ")
           << cut.message();

  std::string name = keepModel ? "model_pipeline" : "model";
  if (keepModel && SymbolTable::lookupSymbolIn(module, name))
    return emitError(model.getLoc(), "keep-model names the pipeline '@")
           << name << "', but that symbol already exists";

  OpBuilder b(model);
  auto pipeline = PipelineOp::create(b, model.getLoc(), name, numStages,
                                     plan->ranks, plan->kind);
  pipeline->setAttr(attrs::kPPImbalance, b.getF64FloatAttr(cut->imbalance));
  // The model's facts (the importer's nn.model_name, nn.vocab_size,
  // nn.seq_len) move with the model. Hand-written IR without them: the
  // vocabulary is the embedding table's row count, the sequence length the
  // tokens' second dimension, recorded here once for every later step.
  for (NamedAttribute a : model->getDiscardableAttrs())
    if (a.getName().getValue().starts_with("nn."))
      pipeline->setAttr(a.getName(), a.getValue());
  if (!pipeline->hasAttr(attrs::kVocabSize))
    model.walk([&](nn::EmbeddingOp e) {
      if (auto t = dyn_cast<RankedTensorType>(e->getOperand(1).getType()))
        pipeline->setAttr(attrs::kVocabSize,
                          b.getI64IntegerAttr(t.getDimSize(0)));
      return WalkResult::interrupt();
    });
  if (!pipeline->hasAttr(attrs::kSeqLen))
    for (unsigned i = 0; i < model.getNumArguments(); ++i)
      if (auto r = model.getArgAttrOfType<StringAttr>(i, attrs::kNNRole);
          r && r.getValue() == "tokens")
        if (auto t = dyn_cast<RankedTensorType>(model.getArgument(i).getType());
            t && t.getRank() == 2 && t.hasStaticShape())
          pipeline->setAttr(attrs::kSeqLen,
                            b.getI64IntegerAttr(t.getDimSize(1)));
  b.setInsertionPointToStart(&pipeline.getBody().emplaceBlock());

  StageBuilder builder(model, *layers, *cut);
  SmallVector<func::FuncOp> forwards;
  for (int64_t s = 0; s < numStages; ++s) {
    auto [rank, chunk] = plan->place(0, s);
    auto stage = StageOp::create(b, model.getLoc(), s, rank, chunk);
    stage->setAttr(attrs::kPPLayers,
                   b.getDenseI64ArrayAttr(layerIds(*layers, *cut, s)));
    stage->setAttr(attrs::kPPCost, stageCostAttr(b, cut->stageCosts[s]));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&stage.getBody().emplaceBlock());
    FailureOr<func::FuncOp> fn = builder.buildForward(b, s);
    if (failed(fn))
      return failure();
    forwards.push_back(*fn);
  }
  // DualPipe's second copy runs the same cut in the other direction.
  for (int64_t s = 0; s < numStages && plan->numCopies() == 2; ++s) {
    auto [rank, chunk] = plan->place(1, s);
    auto stage = StageOp::create(b, model.getLoc(), s, rank, chunk, 1);
    stage->setAttr(attrs::kPPLayers,
                   b.getDenseI64ArrayAttr(layerIds(*layers, *cut, s)));
    stage->setAttr(attrs::kPPCost, stageCostAttr(b, cut->stageCosts[s]));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&stage.getBody().emplaceBlock());
    b.clone(*forwards[s]);
  }

  if (report) {
    std::string sizes;
    llvm::raw_string_ostream os(sizes);
    llvm::interleaveComma(cut->sizes, os);
    emitRemark(model.getLoc())
        << "partitioned " << layers->size() << " layers into " << numStages
        << " stages (placement " << stringifyPlacementKind(plan->kind) << ", "
        << plan->ranks << " ranks): layers per stage [" << sizes
        << "], stage FLOPs max " << formatNumber("%.4g", cut->maxCost)
        << " mean " << formatNumber("%.4g", cut->meanCost) << ", imbalance "
        << formatNumber("%.4f", cut->imbalance);
  }

  if (!keepModel)
    model.erase();
  return success();
}
