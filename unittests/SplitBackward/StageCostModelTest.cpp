//===- StageCostModelTest.cpp - Per-stage costs of a sharded pipeline -----===//
//
// The stage cost model (the automatic scheduler's and the verifier's costs)
// on a model sharded by --nn-shard-tensor and cut by --pp-partition: each
// stage's tensor-parallel bytes come from its collectives, and with
// tp-bytes-per-time they add to F and B (they block the stage); W does not
// communicate.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/PP/Transforms/StageCostModel.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"
#include "mlir/IR/SymbolTable.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

/// Embedding, one MLP block, LM head and loss: 3 layers.
constexpr const char *kModel = R"mlir(
func.func @model(%tok: tensor<2x8xi32> {nn.role = "tokens"},
                 %tgt: tensor<2x8xi32> {nn.role = "targets"},
                 %wte: tensor<32x16xf32> {nn.role = "param", nn.name = "wte"},
                 %w1: tensor<32x16xf32> {nn.role = "param", nn.name = "w1"},
                 %w2: tensor<16x32xf32> {nn.role = "param", nn.name = "w2"},
                 %head: tensor<32x16xf32> {nn.role = "param", nn.name = "head"})
    -> tensor<f32> {
  %0 = nn.embedding %tok, %wte {nn.layer = 0 : i64}
      : (tensor<2x8xi32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %h = nn.linear %0, %w1 {nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  %a = nn.gelu %h {nn.layer = 1 : i64} : tensor<2x8x32xf32>
  %m = nn.linear %a, %w2 {nn.layer = 1 : i64}
      : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
  %r = nn.add %0, %m {nn.layer = 1 : i64} : tensor<2x8x16xf32>
  %l = nn.linear %r, %head {nn.layer = 2 : i64}
      : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  %loss = nn.cross_entropy %l, %tgt {nn.layer = 2 : i64}
      : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
)mlir";

TEST(StageCostModel, TensorParallelBytesPerStageAndTheirTime) {
  MLIRContext ctx;
  ctx.loadDialect<pipeforge::nn::NNDialect, pipeforge::pp::PPDialect,
                  func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(kModel, &ctx);
  ASSERT_TRUE(module);
  PassManager pm(&ctx);
  pipeforge::nn::NNShardTensorOptions shard;
  shard.tp = 2;
  pm.addPass(pipeforge::nn::createNNShardTensor(shard));
  pipeforge::pp::PPPartitionOptions part;
  part.stages = 3;
  pm.addPass(pipeforge::pp::createPPPartition(part));
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto pipeline = *module->getOps<pipeforge::pp::PipelineOp>().begin();
  auto costs = pipeforge::pp::collectStageCosts(pipeline, 4);
  ASSERT_TRUE(succeeded(costs) && *costs);
  const pipeforge::pp::StageCosts &c = **costs;
  ASSERT_EQ(c.numStages(), 3);
  // A [2, 8, 16] activation: 256 elements x 4 bytes; a ring all-reduce over
  // 2 ranks sends (2 (T-1)/T) x 1024 = 1024 bytes.
  // Stage 0: the embedding's all-reduce, in F.
  EXPECT_DOUBLE_EQ(c.fwdCommBytes[0], 1024);
  EXPECT_DOUBLE_EQ(c.bwdCommBytes[0], 0);
  // Stage 1: the down projection's all-reduce in F, the up projection's
  // tp_copy dual in B.
  EXPECT_DOUBLE_EQ(c.fwdCommBytes[1], 1024);
  EXPECT_DOUBLE_EQ(c.bwdCommBytes[1], 1024);
  // Stage 2: the head's tp_copy dual (B) and the vocabulary-parallel loss:
  // 3 x 16 token statistics in F, 2 x 16 in B (x 4 bytes, x 2 (T-1)/T).
  EXPECT_DOUBLE_EQ(c.fwdCommBytes[2], 3 * 16 * 4);
  EXPECT_DOUBLE_EQ(c.bwdCommBytes[2], 1024 + 2 * 16 * 4);

  // Times: FLOPs at 1e6 per unit; TP bytes at 1e3 per unit add to F and B.
  auto free = pipeforge::pp::stageCostModel(c, 1e6, 1, 1, 1, 0, 1, 0.5);
  auto paid = pipeforge::pp::stageCostModel(c, 1e6, 1, 1, 1, 0, 1, 0.5, 1e3);
  for (int s = 0; s < 3; ++s) {
    EXPECT_DOUBLE_EQ(paid.tfStage[s] - free.tfStage[s],
                     c.fwdCommBytes[s] / 1e3);
    EXPECT_DOUBLE_EQ(paid.tbStage[s] - free.tbStage[s],
                     c.bwdCommBytes[s] / 1e3);
    EXPECT_DOUBLE_EQ(paid.twStage[s], free.twStage[s]);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// The planner's per-layer selective stash (collectLayerCosts'
// selectiveBytes) is what --pp-recompute=policy=selective leaves a stage
// that holds that one layer: the two follow one rule (NNStash.h).
//===----------------------------------------------------------------------===//

namespace {

void expectSelectiveMatchesTheCompiler(const char *config) {
  MLIRContext ctx;
  ctx.loadDialect<pipeforge::nn::NNDialect, pipeforge::pp::PPDialect,
                  func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect>();
  auto cfg = pipeforge::import::parseModelConfig(config, /*seqLen=*/16,
                                                 /*batch=*/2);
  ASSERT_TRUE(bool(cfg)) << llvm::toString(cfg.takeError());
  OwningOpRef<ModuleOp> model =
      pipeforge::import::buildModel(*cfg, &ctx, UnknownLoc::get(&ctx));
  ASSERT_TRUE(model);
  auto func = cast<func::FuncOp>(SymbolTable::lookupSymbolIn(*model, "model"));
  auto layers = pipeforge::nn::collectLayerCosts(func, 2);
  ASSERT_TRUE(bool(layers)) << llvm::toString(layers.takeError());
  const int n = int(layers->ids.size());

  // One layer per stage, with and without selective recomputation.
  auto stageStash = [&](bool selective) {
    OwningOpRef<ModuleOp> m = cast<ModuleOp>((*model)->clone());
    PassManager pm(&ctx);
    pipeforge::pp::PPPartitionOptions part;
    part.stages = n;
    pm.addPass(pipeforge::pp::createPPPartition(part));
    pm.addPass(pipeforge::pp::createPPSplitBackward());
    if (selective) {
      pipeforge::pp::PPRecomputeOptions rc;
      rc.policy = "selective";
      pm.addPass(pipeforge::pp::createPPRecompute(rc));
    }
    std::vector<double> out;
    if (failed(pm.run(*m)))
      return out;
    auto pipeline = *m->getOps<pipeforge::pp::PipelineOp>().begin();
    auto costs = pipeforge::pp::collectStageCosts(pipeline, 2);
    if (succeeded(costs) && *costs)
      out = (**costs).stashBytes;
    return out;
  };
  std::vector<double> plain = stageStash(false), sel = stageStash(true);
  ASSERT_EQ(int(plain.size()), n);
  ASSERT_EQ(int(sel.size()), n);
  double dropped = 0;
  for (int s = 0; s < n; ++s) {
    EXPECT_DOUBLE_EQ(plain[s], double(layers->layers[s].stash)) << "layer " << s;
    // The compiled stash: the cost model's, less what only the cost model
    // keeps, less what selective recomputation drops; plus the integer
    // tokens and targets that the cost model leaves out (2 x 16 x 4 bytes,
    // kept for the embedding's weight gradient and the loss).
    const double ints = (s == 0 || s == n - 1) ? 128 : 0;
    EXPECT_DOUBLE_EQ(sel[s], plain[s] - layers->unkeptBytes[s] -
                                 layers->selectiveBytes[s] + ints)
        << "layer " << s;
    dropped += layers->selectiveBytes[s];
  }
  EXPECT_GT(dropped, 0); // the rule found something to drop
}

} // namespace

TEST(StageCostModel, PlannerSelectiveStashIsTheCompilersLlama) {
  expectSelectiveMatchesTheCompiler(R"({"model_type": "llama",
      "num_hidden_layers": 2, "hidden_size": 16, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 40, "vocab_size": 32,
      "max_position_embeddings": 16})");
}

TEST(StageCostModel, PlannerSelectiveStashIsTheCompilersGpt) {
  expectSelectiveMatchesTheCompiler(R"({"model_type": "gpt2", "n_layer": 2,
      "n_embd": 16, "n_head": 4, "vocab_size": 32, "n_positions": 16,
      "attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1})");
}
