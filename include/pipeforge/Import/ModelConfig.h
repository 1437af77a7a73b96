//===- ModelConfig.h - HF-style model configuration -------------*- C++ -*-===//
//
// The shape of a GPT-2, Llama, Mixtral or DeepSeek-V2/V3 model as read from
// a Hugging Face-style config.json, validated: every size positive, heads dividing the
// hidden size, kv heads dividing the heads, the sequence within the
// positions, top_k within the experts.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_IMPORT_MODELCONFIG_H
#define PIPEFORGE_IMPORT_MODELCONFIG_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace pipeforge::import {

enum class ModelKind { GPT2, Llama, Mixtral, DeepSeekV2, DeepSeekV3 };

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

/// DeepSeekMoE's routing and layout keys as read (the routed experts and
/// top-k are ModelConfig::numExperts / topK). The builder uses the layout
/// (dense first layers, shared experts); see docs/import.md for which
/// routing keys the nn.moe it builds follows.
struct DeepSeekMoEConfig {
  int64_t sharedExperts = 0;   ///< n_shared_experts (0: none)
  int64_t moeIntermediate = 0; ///< moe_intermediate_size
  int64_t firstKDense = 0;     ///< first_k_dense_replace
  int64_t layerFreq = 1;       ///< moe_layer_freq
  int64_t nGroup = 1, topkGroup = 1;
  double routedScaling = 1.0; ///< routed_scaling_factor
  std::string scoringFunc;    ///< "softmax" or "sigmoid"
  std::string topkMethod;     ///< as configured (informational)
  bool normTopkProb = false;
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
  int64_t numExperts = 0; // Mixtral only
  int64_t topK = 0;       // Mixtral only
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

  // DeepSeek-V2 / V3 only.
  MLAConfig mla;
  DeepSeekMoEConfig dsMoE;

  int64_t headDim() const { return hidden / numHeads; }
  bool isDeepSeek() const {
    return kind == ModelKind::DeepSeekV2 || kind == ModelKind::DeepSeekV3;
  }
  /// Whether block `layer` (0-based) of a DeepSeek model is a MoE layer.
  bool isDeepSeekMoELayer(int64_t layer) const {
    return numExperts > 0 && layer >= dsMoE.firstKDense &&
           layer % dsMoE.layerFreq == 0;
  }
};

/// Parses and validates `text` (the contents of a config.json). `seqLen` 0
/// means the model's maximum positions. Errors name the offending key.
llvm::Expected<ModelConfig> parseModelConfig(llvm::StringRef text,
                                             int64_t seqLen, int64_t batch);

} // namespace pipeforge::import

#endif
