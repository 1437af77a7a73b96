//===- CostsFromIR.cpp - The planner's model costs from nn IR -------------===//
//
// Reads func @model's per-layer costs (nn/Analysis/CostSum.h) and the shape
// facts tensor parallelism needs into plan::ModelCosts.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/CostsFromIR.h"

#include "pipeforge/Dialect/Dialects.h"
#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Import/ModelLoader.h"
#include "pipeforge/Support/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

#include <numeric>

using namespace llvm;
using namespace pipeforge;

/// Group-limited routing of a moe layer (DeepSeek-V3's n_group and
/// topk_group), when the op carries it.
static void routingGroups(nn::MoEOp moe, plan::LayerCost &lc) {
  auto groups = moe->getAttrOfType<mlir::IntegerAttr>("n_group");
  auto perToken = moe->getAttrOfType<mlir::IntegerAttr>("topk_group");
  // One group (the default) is no limit.
  if (!groups || !perToken || groups.getInt() <= 1)
    return;
  lc.routingGroups = int(groups.getInt());
  lc.groupsPerToken = int(perToken.getInt());
}

/// What tensor parallelism and recomputation need beyond the cost sums: the
/// kind of each layer (embedding, transformer block: one with attention,
/// head: one with the loss), the model's heads, KV heads, hidden size, MLP
/// width and vocabulary, and per block the attention core's FLOPs. An IR that
/// is already tensor-parallel leaves the shape unknown (the planner then only
/// tries t = 1).
static void describeLayers(mlir::func::FuncOp func, const nn::LayerIndex &index,
                           plan::ModelCosts &model, double perSeq,
                           unsigned bytesPerElement) {
  plan::ModelShape shape;
  bool sharded = false;
  func.walk([&](mlir::Operation *op) {
    if (isa<nn::TPCopyOp, nn::TPAllReduceOp, nn::TPAllGatherOp,
            nn::TPReduceScatterOp, nn::VocabParallelCrossEntropyOp>(op))
      sharded = true;
    auto at = index.positionOf(op);
    if (!at)
      return;
    plan::LayerCost &lc = model.layers[*at];
    if (auto a = dyn_cast<nn::AttentionOp>(op)) {
      auto q = cast<mlir::RankedTensorType>(a.getQ().getType());
      if (!q.hasStaticShape())
        return;
      lc.kind = plan::LayerKind::Block;
      shape.heads = a.getNumHeads();
      shape.kvHeads = a.getNumKvHeads();
      shape.hidden = q.getDimSize(2);
      auto cost = cast<nn::CostOpInterface>(op);
      lc.attnCoreFlops += cost.getForwardFlops() * perSeq;
    } else if (auto e = dyn_cast<nn::EmbeddingOp>(op)) {
      if (lc.kind == plan::LayerKind::Other)
        lc.kind = plan::LayerKind::Embedding;
      shape.vocab = e.getTable().getType().getDimSize(0);
    } else if (isa<nn::CrossEntropyOp, nn::VocabParallelCrossEntropyOp>(op)) {
      if (lc.kind == plan::LayerKind::Other)
        lc.kind = plan::LayerKind::Head;
    } else if (isa<nn::GeluOp, nn::SiluOp>(op)) {
      auto t = cast<mlir::RankedTensorType>(op->getResult(0).getType());
      shape.ffn = t.getShape().back();
    } else if (auto moe = dyn_cast<nn::MoEOp>(op)) {
      auto w1 = moe.getW1().getType();
      auto x = cast<mlir::RankedTensorType>(moe.getInput().getType());
      if (!w1.hasStaticShape() || !x.hasStaticShape())
        return;
      shape.ffn = w1.getDimSize(1);
      shape.experts = std::gcd(shape.experts, moe.getNumExperts());
      // The routed experts' weights, sharded by expert parallelism.
      for (mlir::Value w : {moe.getW1(), moe.getW2(), moe.getW3()})
        if (w)
          lc.expertParams += double(
              cast<mlir::RankedTensorType>(w.getType()).getNumElements());
      // Each token's hidden row goes to top_k experts: one all-to-all moves
      // tokens x top_k rows.
      const double hidden = double(x.getShape().back());
      const double tokens = double(x.getNumElements()) / hidden * perSeq;
      lc.routedBytes +=
          tokens * double(moe.getTopK()) * hidden * double(bytesPerElement);
      lc.topK = int(moe.getTopK());
      routingGroups(moe, lc);
    }
  });
  if (sharded)
    shape = {};
  model.shape = shape;
  // The hidden state (seq x hidden) of the embedding's output, a block's
  // input and the head's input: the tensor-parallel all-reduce size.
  if (shape.hidden > 0)
    for (plan::LayerCost &lc : model.layers)
      if (lc.kind != plan::LayerKind::Other)
        lc.hiddenBytes = double(model.seqLen) * double(shape.hidden) *
                         double(bytesPerElement);
}

llvm::Expected<plan::ModelCosts> plan::costsFromIR(mlir::ModuleOp module,
                                                   StringRef name,
                                                   unsigned bytesPerElement) {
  auto func = dyn_cast_or_null<mlir::func::FuncOp>(
      mlir::SymbolTable::lookupSymbolIn(module, "model"));
  if (!func || func.isExternal())
    return createStringError("no func.func @model with a body (an nn model "
                             "as pipeforge-import writes it)");
  int64_t batch = 0, seq = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto role = func.getArgAttrOfType<mlir::StringAttr>(i, attrs::kNNRole);
    auto t = dyn_cast<mlir::RankedTensorType>(func.getArgument(i).getType());
    if (role && role.getValue() == "tokens" && t && t.getRank() == 2 &&
        t.hasStaticShape()) {
      batch = t.getDimSize(0);
      seq = t.getDimSize(1);
    }
  }
  if (batch <= 0 || seq <= 0)
    return createStringError("@model has no static [batch, seq] argument "
                             "with nn.role = \"tokens\"");
  auto layers = nn::collectLayerCosts(func, bytesPerElement);
  if (!layers)
    return layers.takeError();
  const double perSeq = 1.0 / static_cast<double>(batch);
  plan::ModelCosts model;
  // The importer's name for the model (its config file's stem) where the IR
  // carries it: a model piped in from pipeforge-import keeps its name.
  auto named = func->getAttrOfType<mlir::StringAttr>(attrs::kModelName);
  model.name =
      named && !named.getValue().empty() ? named.getValue().str() : name.str();
  model.seqLen = seq;
  for (size_t i = 0; i < layers->ids.size(); ++i) {
    const nn::CostSum &c = layers->layers[i];
    plan::LayerCost lc;
    lc.fwdFlops = c.forward * perSeq;
    lc.bwdInputFlops = c.backwardInput * perSeq;
    lc.bwdWeightFlops = c.backwardWeight * perSeq;
    lc.stashBytes = double(c.stash) * perSeq;
    lc.weightStashBytes = double(c.weightStash) * perSeq;
    lc.params = double(c.paramElements); // not per sequence
    lc.outputBytes = layers->crossingBytes[i] * perSeq;
    lc.selectiveBytes = layers->selectiveBytes[i] * perSeq;
    lc.unkeptBytes = layers->unkeptBytes[i] * perSeq;
    model.layers.push_back(lc);
  }
  describeLayers(func, layers->index, model, perSeq, bytesPerElement);
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, attrs::kNNTied))
      if (auto t =
              dyn_cast<mlir::RankedTensorType>(func.getArgument(i).getType());
          t && t.hasStaticShape())
        model.tiedParams += double(t.getNumElements());
  return model;
}

llvm::Expected<plan::ModelCosts>
plan::loadModelCosts(StringRef path, int64_t seqLen, unsigned bytesPerElement) {
  mlir::DialectRegistry registry;
  registerPipeForgeDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  SourceMgr sm;
  mlir::SourceMgrDiagnosticHandler handler(sm, &ctx);
  import::LoadOptions load;
  load.seqLen = import::isConfigPath(path) ? seqLen : 0;
  auto module = import::loadModel(path, &ctx, sm, load);
  if (!module)
    return module.takeError();
  StringRef stem = path == "-" ? StringRef("model") : sys::path::stem(path);
  auto model = costsFromIR(**module, stem, bytesPerElement);
  if (!model)
    return createStringError(path + ": " + toString(model.takeError()));
  if (seqLen > 0 && model->seqLen != seqLen)
    return createStringError("--seq-len " + Twine(seqLen) +
                             " differs from the IR's " + Twine(model->seqLen) +
                             " (an .mlir model fixes it)");
  return model;
}
