//===- MLALayerCostTest.cpp - Cost of a DeepSeek MLA layer -----------------===//
//
// The cost model summed over one imported DeepSeek layer (MLA + a dense
// SwiGLU MLP) against the per-op rules of docs/cost-model.md written out by
// hand: each linear 2·T·in·out, the attention 2·b·s²·a·(d + dv), stashes
// charged once per value (the projections sharing the norm outputs),
// nn.concat_heads free.
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


class MLALayerCost : public ::testing::TestWithParam<int64_t> {};

TEST_P(MLALayerCost, MatchesTheRulesByHand) {
  MLIRContext ctx;
  ctx.loadDialect<nn::NNDialect, func::FuncDialect>();
  const int64_t qr = GetParam();
  import::ModelConfig c;
  c.kind = import::ModelKind::DeepSeekV3;
  c.numLayers = 1;
  c.hidden = 48;
  c.numHeads = c.numKvHeads = 3;
  c.intermediate = 40;
  c.vocab = 32;
  c.maxPositions = c.seqLen = 8;
  c.batch = 2;
  c.mla.qLoraRank = qr;
  c.mla.kvLoraRank = 12;
  c.mla.qkNopeHeadDim = 10;
  c.mla.qkRopeHeadDim = 4;
  c.mla.vHeadDim = 6;
  auto module = import::buildModel(c, &ctx, UnknownLoc::get(&ctx));
  ASSERT_TRUE(succeeded(verify(*module)));
  const int64_t b = 2, s = 8, t = b * s, h = 48, a = 3, f = 40, r = 12,
                dn = 10, dr = 4, dv = 6, dq = dn + dr;
  int64_t stash = 0, params = 0, concats = 0;
  double fwd = 0, bwd = 0, w = 0;
  module->walk([&](nn::CostOpInterface op) {
    if (op->getAttrOfType<IntegerAttr>("nn.layer").getInt() != 1)
      return;
    concats += isa<nn::ConcatHeadsOp>(op);
    stash += op.getStashBytes(1);
    params += op.getParamBytes(1);
    fwd += op.getForwardFlops();
    bwd += op.getBackwardInputFlops();
    w += op.getBackwardWeightFlops();
  });
  EXPECT_EQ(concats, 1);
  // Projections: q (q_a, q_b or q_proj), kv_a latent and rope, kv_b k_nope
  // and v, o_proj; the MLP's gate, up, down.
  double qProj = qr ? 2.0 * t * (h * qr + qr * a * dq) : 2.0 * t * h * a * dq;
  double linears = qProj + 2.0 * t * (h * r + h * dr + r * a * dn +
                                      r * a * dv + a * dv * h + 3 * h * f);
  double attention = 2.0 * b * s * s * a * (dq + dv);
  EXPECT_EQ(fwd, linears + attention);
  EXPECT_EQ(bwd, linears + 2 * attention);
  EXPECT_EQ(w, linears);
  int64_t qParams = qr ? h * qr + qr + qr * a * dq : h * a * dq;
  EXPECT_EQ(params, /*norms*/ 2 * h + r + qParams +
                        /*kv_a*/ h * (r + dr) + /*kv_b*/ r * a * (dn + dv) +
                        /*o*/ a * dv * h + /*mlp*/ 3 * h * f);
  // Stash: input norm's x, the projections' shared input (once), q's
  // low-rank path, kv_a_layernorm's input, kv_b's shared input (once),
  // attention (q, the per-head keys, v, softmax), o_proj's input, the MLP.
  int64_t qStash = qr ? 2 * t * qr : 0; // q_a_layernorm input, q_b input
  EXPECT_EQ(stash, /*norm*/ t * h + /*projections*/ t * h + qStash +
                       /*kv norm*/ t * r + /*kv_b*/ t * r +
                       /*attention*/ (2 * t * a * dq + t * a * dv +
                                      a * s * s * b) +
                       /*o_proj*/ t * a * dv + /*norm*/ t * h +
                       /*gate, up*/ t * h + /*silu*/ t * f +
                       /*mul*/ 2 * t * f + /*down*/ t * f);
}

INSTANTIATE_TEST_SUITE_P(QLoraRank, MLALayerCost, ::testing::Values(0, 16));

} // namespace
