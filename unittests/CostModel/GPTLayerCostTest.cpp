//===- GPTLayerCostTest.cpp - the cost model reproduces the paper's table -===//
//
// Imports GPT layers of several shapes and checks that the nn cost model,
// summed over one transformer layer, gives exactly the Zero Bubble paper's
// per-layer numbers (docs/background.md): F = sbh(24h + 4s),
// B = sbh(24h + 8s),
// W = 24sbh^2, M_B = sb(34h + 5as) at 2 bytes per element, M_W = 32sbh.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace pipeforge;

namespace {
struct LayerCost {
  double f = 0, b = 0, w = 0;
  int64_t stash = 0, weightStash = 0, params = 0;
};

struct Shape {
  int64_t s, b, h, a;
};

class GPTLayerCost : public ::testing::TestWithParam<Shape> {
protected:
  GPTLayerCost() { ctx.loadDialect<nn::NNDialect, func::FuncDialect>(); }

  import::ModelConfig gpt(const Shape &shape, double dropout) {
    import::ModelConfig c;
  c.kind = import::ModelKind::GPT2;
  c.numLayers = 3;
  c.hidden = shape.h;
  c.numHeads = c.numKvHeads = shape.a;
  c.intermediate = 4 * shape.h;
  c.vocab = 256;
  c.maxPositions = c.seqLen = shape.s;
  c.batch = shape.b;
  c.attnDropout = c.residDropout = dropout;
  return c;
}

/// The cost of every op tagged `nn.layer = layer`.
LayerCost
layerCost(ModuleOp module, int64_t layer, unsigned bpe = 2) {
  LayerCost total;
  module.walk([&](nn::CostOpInterface op) {
    auto tag = op->getAttrOfType<IntegerAttr>("nn.layer");
    if (!tag || tag.getInt() != layer)
      return;
    total.f += op.getForwardFlops();
    total.b += op.getBackwardInputFlops();
    total.w += op.getBackwardWeightFlops();
    total.stash += op.getStashBytes(bpe);
    total.weightStash += op.getWeightStashBytes(bpe);
    total.params += op.getParamBytes(bpe);
  });
  return total;
}

MLIRContext ctx;
}; // namespace
} // namespace

TEST_P(GPTLayerCost, MatchesZeroBubbleTable) {
  Shape p = GetParam();
  auto module = import::buildModel(gpt(p, 0.1), &ctx, UnknownLoc::get(&ctx));
  ASSERT_TRUE(succeeded(verify(*module)));
  double s = p.s, b = p.b, h = p.h;
  for (int64_t layer = 1; layer <= 3; ++layer) {
    LayerCost c = layerCost(*module, layer);
    EXPECT_EQ(c.f, s * b * h * (24 * h + 4 * s)) << "layer " << layer;
    EXPECT_EQ(c.b, s * b * h * (24 * h + 8 * s)) << "layer " << layer;
    EXPECT_EQ(c.w, 24 * s * b * h * h) << "layer " << layer;
    EXPECT_EQ(c.stash, p.s * p.b * (34 * p.h + 5 * p.a * p.s))
        << "layer " << layer;
    EXPECT_EQ(c.weightStash, 32 * p.s * p.b * p.h) << "layer " << layer;
    // 12h^2 weights + 13h biases and norm parameters, 2 bytes each.
    EXPECT_EQ(c.params, 2 * (12 * p.h * p.h + 13 * p.h)) << "layer " << layer;
  }
}

TEST_P(GPTLayerCost, WithoutDropoutDropsTheMasks) {
  Shape p = GetParam();
  auto module = import::buildModel(gpt(p, 0.0), &ctx, UnknownLoc::get(&ctx));
  LayerCost c = layerCost(*module, 1);
  // No residual masks (2sbh), no attention mask (as^2b) nor dropout output
  // (2as^2b).
  EXPECT_EQ(c.stash, p.s * p.b * (32 * p.h + 2 * p.a * p.s));
  EXPECT_EQ(c.weightStash, 32 * p.s * p.b * p.h);
}

TEST_P(GPTLayerCost, ScalesWithBytesPerElement) {
  Shape p = GetParam();
  auto module = import::buildModel(gpt(p, 0.1), &ctx, UnknownLoc::get(&ctx));
  LayerCost c = layerCost(*module, 1, /*bpe=*/4);
  // Activations double, the 1-byte masks (2sbh + as^2b) do not.
  int64_t masks = 2 * p.s * p.b * p.h + p.a * p.s * p.s * p.b;
  EXPECT_EQ(c.stash,
            2 * (p.s * p.b * (34 * p.h + 5 * p.a * p.s) - masks) + masks);
  EXPECT_EQ(c.weightStash, 64 * p.s * p.b * p.h);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GPTLayerCost,
    ::testing::Values(Shape{16, 2, 64, 4}, Shape{64, 1, 128, 8},
                      Shape{1024, 1, 2304, 24}, // Zero Bubble 1.5B
                      Shape{1024, 1, 6144, 48}, // Zero Bubble 28.3B
                      Shape{7, 3, 48, 6}));

TEST(CostModel, LlamaSharesTheNormOutputAcrossProjections) {
  MLIRContext ctx;
  ctx.loadDialect<nn::NNDialect, func::FuncDialect>();
  import::ModelConfig c;
  c.kind = import::ModelKind::Llama;
  c.numLayers = 1;
  c.hidden = 64;
  c.numHeads = 4;
  c.numKvHeads = 2;
  c.intermediate = 172;
  c.vocab = 256;
  c.maxPositions = c.seqLen = 16;
  c.batch = 2;
  auto module = import::buildModel(c, &ctx, UnknownLoc::get(&ctx));
  ASSERT_TRUE(succeeded(verify(*module)));
  int64_t t = 32, h = 64, kv = 32, f = 172, a = 4, s = 16, b = 2;
  int64_t stash = 0, params = 0;
  double fwd = 0;
  module->walk([&](nn::CostOpInterface op) {
    if (op->getAttrOfType<IntegerAttr>("nn.layer").getInt() != 1)
      return;
    stash += op.getStashBytes(1);
    params += op.getParamBytes(1);
    fwd += op.getForwardFlops();
  });
  // rmsnorm x2 (input), q/k/v (shared input, once), attention (q, k, v,
  // softmax), o_proj input, gate/up (shared input, once), silu input, mul
  // (silu out, up out), down input.
  EXPECT_EQ(stash, /*norm*/ t * h + /*qkv*/ t * h +
                       /*attention*/ (t * h + 2 * t * kv + a * s * s * b) +
                       /*o_proj*/ t * h + /*norm*/ t * h + /*gate, up*/ t * h +
                       /*silu*/ t * f + /*mul*/ 2 * t * f + /*down*/ t * f);
  EXPECT_EQ(params, 2 * h + h * h * 2 + 2 * kv * h + 3 * h * f);
  EXPECT_EQ(fwd, 2.0 * t * (2 * h * h + 2 * h * kv + 3 * h * f) +
                     4.0 * b * s * s * h);
}
