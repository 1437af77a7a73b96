//===- ModelConfig.h - HF-style model configuration -------------*- C++ -*-===//
//
// The shape of a GPT-2, Llama, Mixtral, Qwen2-MoE or DeepSeek-V2/V3 model as
// read from a Hugging Face-style config.json, validated: every size positive,
// heads dividing the hidden size, kv heads dividing the heads, the sequence within the
// positions, top_k within the experts.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_IMPORT_MODELCONFIG_H
#define PIPEFORGE_IMPORT_MODELCONFIG_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipeforge::import {

enum class ModelKind {
  GPT2,
  Llama,
  Mixtral,
  Qwen2MoE,
  DeepSeekV2,
  DeepSeekV3
};

/// Multi-head Latent Attention (DeepSeek-V2 / V3, docs/import.md): low-rank
/// q and kv projections, per-head q/k of qkNope + qkRope dimensions (the
/// RoPE part decoupled: one RoPE key shared by every head), values of
/// vHeadDim.
struct MLAConfig {
  int64_t qLoraRank = 0; ///< 0: `q_lora_rank` null, q = W_q x
  int64_t kvLoraRank = 0;
  int64_t qkNopeHeadDim = 0;
  int64_t qkRopeHeadDim = 0;
  int64_t vHeadDim = 0;
  int64_t qkHeadDim() const { return qkNopeHeadDim + qkRopeHeadDim; }
};

struct ModelConfig {
  ModelKind kind = ModelKind::GPT2;
  int64_t numLayers = 0;
  int64_t hidden = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t intermediate = 0; // MLP (or per-expert) width
  int64_t vocab = 0;
  int64_t maxPositions = 0;
  int64_t numExperts = 0; // MoE models only (DeepSeek: 0 when dense)
  int64_t topK = 0;       // MoE models only

  // MoE layers (docs/import.md, "MoE models"): the routing of nn.moe, the
  // shared experts and which layers are dense.
  int64_t expertFfn = 0;        // moe_intermediate_size (else intermediate)
  std::string scoring = "softmax"; // scoring_func
  bool normTopkProb = true;     // norm_topk_prob
  double routedScaling = 1.0;   // routed_scaling_factor
  int64_t nGroup = 1, topkGroup = 1;
  // topk_method noaux_tc (DeepSeek-V3): nn.moe's load-balancing bias.
  bool routingBias = false;
  double biasUpdateSpeed = 0.001; // bias_update_speed (PipeForge's key)
  int64_t sharedFfn = 0;        // shared experts' width; 0: none
  bool sharedGate = false;      // Qwen2-MoE: sigmoid(W x) * shared(x)
  int64_t firstDense = 0;       // first_k_dense_replace
  int64_t sparseStep = 1;       // decoder_sparse_step (Qwen2-MoE)
  int64_t layerFreq = 1;        // moe_layer_freq (DeepSeek)
  std::vector<int64_t> mlpOnlyLayers; // mlp_only_layers (Qwen2-MoE)
  bool qkvBias = false;         // Qwen2: q, k, v projections with bias

  bool isMoE() const {
    return kind == ModelKind::Mixtral || kind == ModelKind::Qwen2MoE ||
           (isDeepSeek() && numExperts > 0);
  }
  /// Whether decoder layer i (0-based) has an MoE MLP (else a dense one).
  bool moeLayer(int64_t i) const;
  double ropeTheta = 10000.0;
  double normEpsilon = 1e-5;
  double initStd = 0.02;       // initializer_range
  double attnDropout = 0.0;    // attention probabilities
  double residDropout = 0.0;   // each block's two residual branches
  double embdDropout = 0.0;    // the embedding's output (GPT-2's embd_pdrop)
  bool tiedEmbeddings = false; // as configured; the importer unties them

  /// Recorded on @model (nn.model_name); the tools use the config file's
  /// stem.
  std::string name;

  // Run shape (command line).
  int64_t seqLen = 0;
  int64_t batch = 1;

  // DeepSeek-V2 / V3 only (their MoE keys are the fields above).
  MLAConfig mla;

  int64_t headDim() const { return hidden / numHeads; }
  bool isDeepSeek() const {
    return kind == ModelKind::DeepSeekV2 || kind == ModelKind::DeepSeekV3;
  }
};

/// Parses and validates `text` (the contents of a config.json). `seqLen` 0
/// means the model's maximum positions. Errors name the offending key.
llvm::Expected<ModelConfig> parseModelConfig(llvm::StringRef text,
                                             int64_t seqLen, int64_t batch);

} // namespace pipeforge::import

#endif
