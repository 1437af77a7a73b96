//===- ModelConfig.h - HF-style model configuration -------------*- C++ -*-===//
//
// The shape of a GPT-2, Llama or Mixtral model as read from a Hugging
// Face-style config.json, validated: every size positive, heads dividing the
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

enum class ModelKind { GPT2, Llama, Mixtral };

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

  int64_t headDim() const { return hidden / numHeads; }
};

/// Parses and validates `text` (the contents of a config.json). `seqLen` 0
/// means the model's maximum positions. Errors name the offending key.
llvm::Expected<ModelConfig> parseModelConfig(llvm::StringRef text,
                                             int64_t seqLen, int64_t batch);

} // namespace pipeforge::import

#endif
