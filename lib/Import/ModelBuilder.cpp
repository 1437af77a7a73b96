//===- ModelBuilder.cpp - nn IR for a model configuration -----------------===//

#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Support/AttrNames.h"

#include "pipeforge/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include <cstdio>

using namespace mlir;
using namespace pipeforge::import;
namespace nn = pipeforge::nn;

namespace {
/// MLA's q_a_layernorm and kv_a_layernorm (mlaAttention).
constexpr double kMLANormEps = 1e-6;

class ModelBuilder {
public:
  ModelBuilder(const ModelConfig &c, MLIRContext *ctx, Location loc)
      : c(c), b(ctx), loc(loc), f32(b.getF32Type()) {}

  OwningOpRef<ModuleOp> build();

private:
  // Types.
  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, f32);
  }
  RankedTensorType act(int64_t features) {
    return tensor({c.batch, c.seqLen, features});
  }

  // Function arguments.
  Value argument(Type type, NamedAttrList attrs) {
    argAttrs.push_back(attrs.getDictionary(b.getContext()));
    return entry->addArgument(type, loc);
  }
  Value param(const std::string &name, ArrayRef<int64_t> shape,
              const std::string &init, const std::string &tiedTo = "") {
    NamedAttrList attrs;
    attrs.append(pipeforge::attrs::kNNRole, b.getStringAttr("param"));
    attrs.append(pipeforge::attrs::kNNName, b.getStringAttr(name));
    attrs.append(pipeforge::attrs::kNNInit, b.getStringAttr(init));
    if (!tiedTo.empty())
      attrs.append(pipeforge::attrs::kNNTied, b.getStringAttr(tiedTo));
    return argument(tensor(shape), attrs);
  }
  static std::string normal(double std) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "normal:%.6g", std);
    return buf;
  }

  /// Tags an op with the current layer.
  template <typename OpTy> OpTy tag(OpTy op) {
    op->setAttr(pipeforge::attrs::kNNLayer, b.getI64IntegerAttr(layer));
    return op;
  }

  Value linear(Value x, const std::string &name, int64_t in, int64_t out,
               bool bias, const std::string &init,
               const std::string &tiedTo = "") {
    Value w = param(name + ".weight", {out, in}, init, tiedTo);
    Value bv = bias ? param(name + ".bias", {out}, "zeros") : Value();
    auto outType =
        cast<RankedTensorType>(x.getType()).clone({c.batch, c.seqLen, out});
    return tag(nn::LinearOp::create(b, loc, outType, x, w, bv,
                                    /*partial=*/false))
        .getResult();
  }
  Value layerNorm(Value x, const std::string &name) {
    Value g = param(name + ".weight", {c.hidden}, "ones");
    Value beta = param(name + ".bias", {c.hidden}, "zeros");
    return tag(nn::LayerNormOp::create(b, loc, x.getType(), x, g, beta,
                                       b.getF32FloatAttr(c.normEpsilon)))
        .getResult();
  }
  Value rmsNorm(Value x, const std::string &name) {
    return rmsNorm(x, name, c.hidden);
  }
  Value rmsNorm(Value x, const std::string &name, int64_t dim) {
    return rmsNorm(x, name, dim, c.normEpsilon);
  }
  Value rmsNorm(Value x, const std::string &name, int64_t dim, double eps) {
    Value g = param(name + ".weight", {dim}, "ones");
    return tag(nn::RMSNormOp::create(b, loc, x.getType(), x, g,
                                     b.getF32FloatAttr(eps)))
        .getResult();
  }
  /// nn.dropout at `rate` (none at 0), with the next site number.
  Value dropout(Value x, double rate) {
    if (rate <= 0.0)
      return x;
    return tag(nn::DropoutOp::create(b, loc, x, b.getF32FloatAttr(rate),
                                     b.getI64IntegerAttr(nextSite++)))
        .getResult();
  }
  /// The residual add, after the branch's dropout (resid_pdrop).
  Value residual(Value x, Value y) {
    return tag(nn::AddOp::create(b, loc, x, dropout(y, c.residDropout)))
        .getResult();
  }
  Value attention(Value q, Value k, Value v, bool rotary) {
    FloatAttr dropout =
        c.attnDropout > 0.0 ? b.getF32FloatAttr(c.attnDropout) : FloatAttr();
    IntegerAttr site =
        c.attnDropout > 0.0 ? b.getI64IntegerAttr(nextSite++) : IntegerAttr();
    FloatAttr theta = rotary ? b.getF32FloatAttr(c.ropeTheta) : FloatAttr();
    return tag(nn::AttentionOp::create(b, loc, q.getType(), q, k, v,
                                       b.getI64IntegerAttr(c.numHeads),
                                       b.getI64IntegerAttr(c.numKvHeads),
                                       rotary ? b.getUnitAttr() : UnitAttr(),
                                       theta, dropout, site))
        .getResult();
  }

  Value gptBlock(Value x, int64_t i);
  Value denseMlp(Value x, const std::string &p, int64_t ffn);
  Value moeMlp(Value x, const std::string &m);
  Value moe(Value x, Value router, Value w1, Value w2, Value w3, int64_t topK,
            StringRef scoring, bool norm, double scale, int64_t groups,
            int64_t topkGroup, StringRef bias = {});
  Value llamaBlock(Value x, int64_t i);
  Value deepseekBlock(Value x, int64_t i);
  Value mlaAttention(Value x, const std::string &p);

  const ModelConfig &c;
  OpBuilder b;
  Location loc;
  Type f32;
  Block *entry = nullptr;
  SmallVector<DictionaryAttr> argAttrs;
  int64_t layer = 0;
  int64_t nextSite = 0; ///< dropout sites, numbered in model order
};
} // namespace

Value ModelBuilder::gptBlock(Value x, int64_t i) {
  std::string p = "h." + std::to_string(i) + ".";
  int64_t h = c.hidden;
  std::string init = normal(c.initStd);
  // GPT-2 scales the residual projections by 1/sqrt(2L).
  std::string projInit = normal(c.initStd / std::sqrt(2.0 * c.numLayers));
  Value n1 = layerNorm(x, p + "ln_1");
  Value q = linear(n1, p + "attn.q", h, h, true, init);
  Value k = linear(n1, p + "attn.k", h, h, true, init);
  Value v = linear(n1, p + "attn.v", h, h, true, init);
  Value a = attention(q, k, v, /*rotary=*/false);
  Value o = linear(a, p + "attn.c_proj", h, h, true, projInit);
  Value r1 = residual(x, o);
  Value n2 = layerNorm(r1, p + "ln_2");
  Value fc = linear(n2, p + "mlp.c_fc", h, c.intermediate, true, init);
  Value g = tag(nn::GeluOp::create(b, loc, fc)).getResult();
  Value proj = linear(g, p + "mlp.c_proj", c.intermediate, h, true, projInit);
  return residual(r1, proj);
}

/// The SwiGLU MLP: down(silu(gate x) * up x).
Value ModelBuilder::denseMlp(Value x, const std::string &p, int64_t ffn) {
  int64_t h = c.hidden;
  std::string init = normal(c.initStd);
  Value gate = linear(x, p + "gate_proj", h, ffn, false, init);
  Value up = linear(x, p + "up_proj", h, ffn, false, init);
  Value act = tag(nn::SiluOp::create(b, loc, gate)).getResult();
  Value prod = tag(nn::MulOp::create(b, loc, act, up)).getResult();
  return linear(prod, p + "down_proj", ffn, h, false, init);
}

/// nn.moe with the routing attributes; the defaults stay unset (elided).
Value ModelBuilder::moe(Value x, Value router, Value w1, Value w2, Value w3,
                        int64_t topK, StringRef scoring, bool norm,
                        double scale, int64_t groups, int64_t topkGroup,
                        StringRef bias) {
  return tag(nn::MoEOp::create(
                 b, loc, x.getType(), x, router, w1, w2, w3,
                 b.getI64IntegerAttr(topK), FloatAttr(),
                 b.getStringAttr("silu"),
                 scoring == "softmax" ? StringAttr() : b.getStringAttr(scoring),
                 norm ? BoolAttr() : b.getBoolAttr(false),
                 scale == 1.0 ? FloatAttr() : b.getF32FloatAttr(scale),
                 groups == 1 ? IntegerAttr() : b.getI64IntegerAttr(groups),
                 topkGroup == 1 ? IntegerAttr()
                                : b.getI64IntegerAttr(topkGroup),
                 bias.empty() ? StringAttr() : b.getStringAttr(bias),
                 bias.empty() || c.biasUpdateSpeed == 0.001
                     ? FloatAttr()
                     : b.getF32FloatAttr(c.biasUpdateSpeed)))
      .getResult();
}

/// An MoE MLP (prefix m): the routed experts (stacked [E, ...] weights),
/// plus the shared experts: DeepSeek's plain SwiGLU MLP added to the routed
/// output, or Qwen2-MoE's gated one, sigmoid(W_g x) * shared(x), which is
/// exactly a one-expert nn.moe with sigmoid scoring and raw weights.
Value ModelBuilder::moeMlp(Value x, const std::string &m) {
  int64_t e = c.numExperts, h = c.hidden, ffn = c.expertFfn;
  std::string init = normal(c.initStd);
  // HF's expert names: Mixtral's w1/w2/w3, the others' gate/down/up_proj.
  bool hfProj = c.kind != ModelKind::Mixtral;
  Value router = param(m + "gate.weight", {e, h}, init);
  Value w1 = param(m + (hfProj ? "experts.gate_proj" : "experts.w1"),
                   {e, ffn, h}, init);
  Value w2 = param(m + (hfProj ? "experts.down_proj" : "experts.w2"),
                   {e, h, ffn}, init);
  Value w3 = param(m + (hfProj ? "experts.up_proj" : "experts.w3"),
                   {e, ffn, h}, init);
  Value y = moe(x, router, w1, w2, w3, c.topK, c.scoring, c.normTopkProb,
                c.routedScaling, c.nGroup, c.topkGroup,
                c.routingBias ? m + "gate.e_score_correction_bias" : "");
  if (c.sharedFfn == 0)
    return y;
  Value shared;
  if (c.sharedGate) {
    std::string s = m + "shared_expert.";
    int64_t f = c.sharedFfn;
    Value gate = param(m + "shared_expert_gate.weight", {1, h}, init);
    Value g1 = param(s + "gate_proj.weight", {1, f, h}, init);
    Value g2 = param(s + "down_proj.weight", {1, h, f}, init);
    Value g3 = param(s + "up_proj.weight", {1, f, h}, init);
    shared = moe(x, gate, g1, g2, g3, 1, "sigmoid", false, 1.0, 1, 1);
  } else {
    shared = denseMlp(x, m + "shared_experts.", c.sharedFfn);
  }
  return tag(nn::AddOp::create(b, loc, y, shared)).getResult();
}

Value ModelBuilder::llamaBlock(Value x, int64_t i) {
  std::string p = "layers." + std::to_string(i) + ".";
  int64_t h = c.hidden, kvw = c.numKvHeads * c.headDim();
  std::string init = normal(c.initStd);
  Value n1 = rmsNorm(x, p + "input_layernorm");
  Value q = linear(n1, p + "self_attn.q_proj", h, h, c.qkvBias, init);
  Value k = linear(n1, p + "self_attn.k_proj", h, kvw, c.qkvBias, init);
  Value v = linear(n1, p + "self_attn.v_proj", h, kvw, c.qkvBias, init);
  Value a = attention(q, k, v, /*rotary=*/true);
  Value o = linear(a, p + "self_attn.o_proj", h, h, false, init);
  Value r1 = residual(x, o);
  Value n2 = rmsNorm(r1, p + "post_attention_layernorm");
  Value mlp = c.moeLayer(i) ? moeMlp(n2, p + (c.kind == ModelKind::Mixtral
                                                   ? "block_sparse_moe."
                                                   : "mlp."))
                            : denseMlp(n2, p + "mlp.", c.intermediate);
  return residual(r1, mlp);
}

/// Multi-head Latent Attention (DeepSeek-V2 / V3), with H heads, dn =
/// qk_nope_head_dim, dr = qk_rope_head_dim, dv = v_head_dim:
///   q     = q_b(rmsnorm(q_a x))            [.., H (dn + dr)]  (or q_proj x)
///   c_kv  = kv_a.latent x                  [.., kv_lora_rank]
///   k_pe  = kv_a.rope x                    [.., dr]  one key for all heads
///   kn    = kv_b.k_nope(rmsnorm(c_kv))     [.., H dn]
///   v     = kv_b.v(rmsnorm(c_kv))          [.., H dv]
///   k     = concat_heads(kn, k_pe)         [.., H (dn + dr)]  (broadcast)
///   o     = o_proj(attention(q, k, v))     RoPE on the trailing dr of each
///                                          q / k head, scale 1/sqrt(dn+dr)
/// The two inner norms (q_a_layernorm, kv_a_layernorm) use epsilon 1e-6
/// whatever rms_norm_eps says, as Hugging Face's DeepseekV2/V3Attention
/// builds them (its RMSNorm's default); only the decoder layer's norms and
/// the final norm take rms_norm_eps.
/// HF's kv_a_proj_with_mqa ([kv_lora_rank + dr, hidden]) is the two params
/// kv_a_proj_with_mqa.{latent,rope}.weight (its rows [0, kv_lora_rank) and
/// the rest), and kv_b_proj ([H (dn + dv), kv_lora_rank], per head dn key
/// rows then dv value rows) kv_b_proj.{k_nope,v}.weight: the same products.
Value ModelBuilder::mlaAttention(Value x, const std::string &p) {
  const MLAConfig &m = c.mla;
  int64_t h = c.hidden, heads = c.numHeads, dn = m.qkNopeHeadDim,
          dr = m.qkRopeHeadDim, dv = m.vHeadDim, r = m.kvLoraRank;
  std::string init = normal(c.initStd);
  std::string a = p + "self_attn.";
  Value q;
  if (m.qLoraRank > 0) {
    Value qa = linear(x, a + "q_a_proj", h, m.qLoraRank, false, init);
    Value qn = rmsNorm(qa, a + "q_a_layernorm", m.qLoraRank, kMLANormEps);
    q = linear(qn, a + "q_b_proj", m.qLoraRank, heads * (dn + dr), false,
               init);
  } else {
    q = linear(x, a + "q_proj", h, heads * (dn + dr), false, init);
  }
  Value ckv = linear(x, a + "kv_a_proj_with_mqa.latent", h, r, false, init);
  Value kpe = linear(x, a + "kv_a_proj_with_mqa.rope", h, dr, false, init);
  Value kvn = rmsNorm(ckv, a + "kv_a_layernorm", r, kMLANormEps);
  Value kn = linear(kvn, a + "kv_b_proj.k_nope", r, heads * dn, false, init);
  Value v = linear(kvn, a + "kv_b_proj.v", r, heads * dv, false, init);
  Value k = tag(nn::ConcatHeadsOp::create(b, loc, act(heads * (dn + dr)), kn,
                                          kpe, b.getI64IntegerAttr(heads),
                                          b.getUnitAttr()))
                .getResult();
  FloatAttr dropout =
      c.attnDropout > 0.0 ? b.getF32FloatAttr(c.attnDropout) : FloatAttr();
  IntegerAttr site =
      c.attnDropout > 0.0 ? b.getI64IntegerAttr(nextSite++) : IntegerAttr();
  Value o = tag(nn::AttentionOp::create(
                    b, loc, act(heads * dv), q, k, v,
                    b.getI64IntegerAttr(heads), b.getI64IntegerAttr(heads),
                    b.getUnitAttr(), b.getF32FloatAttr(c.ropeTheta), dropout,
                    site, b.getI64IntegerAttr(dr)))
                .getResult();
  return linear(o, a + "o_proj", heads * dv, h, false, init);
}

/// A DeepSeek-V2 / V3 decoder layer (HF DeepseekV2/V3DecoderLayer): MLA,
/// then a dense SwiGLU MLP (the first first_k_dense_replace layers, the
/// layers off moe_layer_freq, and every layer of a model without routed
/// experts) or DeepSeekMoE: the routed experts with DeepSeek's routing
/// (nn.moe's scoring, norm_topk_prob, routed_scaling_factor, n_group /
/// topk_group) plus the shared experts.
Value ModelBuilder::deepseekBlock(Value x, int64_t i) {
  std::string p = "layers." + std::to_string(i) + ".";
  Value n1 = rmsNorm(x, p + "input_layernorm");
  Value r1 = residual(x, mlaAttention(n1, p));
  Value n2 = rmsNorm(r1, p + "post_attention_layernorm");
  Value mlp = c.moeLayer(i) ? moeMlp(n2, p + "mlp.")
                            : denseMlp(n2, p + "mlp.", c.intermediate);
  return residual(r1, mlp);
}

OwningOpRef<ModuleOp> ModelBuilder::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  auto lossType = RankedTensorType::get({}, f32);
  auto func =
      func::FuncOp::create(b, loc, "model", b.getFunctionType({}, {lossType}));
  // The model's facts, recorded once for every later step.
  if (!c.name.empty())
    func->setAttr(pipeforge::attrs::kModelName, b.getStringAttr(c.name));
  func->setAttr(pipeforge::attrs::kVocabSize, b.getI64IntegerAttr(c.vocab));
  func->setAttr(pipeforge::attrs::kSeqLen, b.getI64IntegerAttr(c.seqLen));
  entry = func.addEntryBlock();
  b.setInsertionPointToEnd(entry);

  auto tokType = RankedTensorType::get({c.batch, c.seqLen}, b.getI32Type());
  NamedAttrList tokAttrs, tgtAttrs;
  tokAttrs.append(pipeforge::attrs::kNNRole, b.getStringAttr("tokens"));
  tgtAttrs.append(pipeforge::attrs::kNNRole, b.getStringAttr("targets"));
  Value tokens = argument(tokType, tokAttrs);
  Value targets = argument(tokType, tgtAttrs);

  bool gpt = c.kind == ModelKind::GPT2;
  std::string init = normal(c.initStd);

  // Layer 0: embeddings.
  layer = 0;
  const std::string tableName = gpt ? "wte" : "embed_tokens";
  Value table = param(tableName, {c.vocab, c.hidden}, init);
  Value positions =
      gpt ? param("wpe", {c.maxPositions, c.hidden}, init) : Value();
  Value x = tag(nn::EmbeddingOp::create(b, loc, act(c.hidden), tokens, table,
                                        positions, /*vocab_shards=*/nullptr))
                .getResult();
  x = dropout(x, c.embdDropout);

  // Layers 1 .. L: the blocks.
  for (int64_t i = 0; i < c.numLayers; ++i) {
    layer = i + 1;
    x = gpt ? gptBlock(x, i)
            : c.isDeepSeek() ? deepseekBlock(x, i) : llamaBlock(x, i);
  }

  // Layer L + 1: final norm, LM head, loss. Tied embeddings: the head's
  // weight ([vocab, hidden], as the table) is tied to the table: one logical
  // tensor, kept by the head's stage as a copy (nn.tied).
  layer = c.numLayers + 1;
  x = gpt ? layerNorm(x, "ln_f") : rmsNorm(x, "norm");
  Value logits = linear(x, "lm_head", c.hidden, c.vocab, false, init,
                        c.tiedEmbeddings ? tableName : "");
  Value loss =
      tag(nn::CrossEntropyOp::create(b, loc, lossType, logits, targets))
          .getResult();
  func::ReturnOp::create(b, loc, loss);

  func.setFunctionType(
      b.getFunctionType(entry->getArgumentTypes(), {lossType}));
  for (auto [i, attrs] : llvm::enumerate(argAttrs))
    func.setArgAttrs(i, attrs);
  return module;
}

OwningOpRef<ModuleOp> pipeforge::import::buildModel(const ModelConfig &config,
                                                    MLIRContext *ctx,
                                                    Location loc) {
  return ModelBuilder(config, ctx, loc).build();
}
