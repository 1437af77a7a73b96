//===- HfWeights.h - Hugging Face checkpoints in and out --------*- C++ -*-===//
//
// The one mapping between PipeForge's parameters and the tensors of a
// Hugging Face checkpoint of the same model, per family
// (docs/huggingface.md has the table):
//
//   gpt2         transformer.* ; Conv1D weights stored [in, out]
//                (transposed); c_attn fuses q, k, v by rows of its output
//   llama        model.* ; q/k/v/o, gate/up/down as PipeForge has them
//   mixtral      block_sparse_moe.experts.{e}.w1/w2/w3: PipeForge stacks
//                the experts of a layer into one [E, ...] parameter
//   qwen2_moe    mlp.experts.{e}.*, shared_expert.* ([f, h] in HF,
//                [1, f, h] here: a one-expert nn.moe), shared_expert_gate
//   deepseek_v2  MLA: kv_a_proj_with_mqa is two parameters here (its latent
//   deepseek_v3  rows and its rope rows), kv_b_proj two (per head: dn key
//                rows, then dv value rows), and the rope rows of q and of
//                the rope key are in Hugging Face's interleaved pair order
//                there, rotate-half order here; gate.e_score_correction_bias
//                is the load-balancing bias (runtime state, not a
//                parameter); tied embeddings: lm_head reads the embedding
//
// Every mapping is a list of row runs between 2-D views (a parameter's rows
// are all dimensions but the last; a 1-D tensor is a column): one
// description serves both directions, so an import followed by an export
// gives back the input's bits.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_HFWEIGHTS_H
#define PIPEFORGE_RT_HFWEIGHTS_H

#include "pipeforge/rt/Safetensors.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pipeforge::rt {

/// A run of rows of a PipeForge tensor taken from a Hugging Face tensor.
struct HfPiece {
  std::string tensor;           ///< the Hugging Face name
  std::vector<int64_t> hfShape; ///< its whole shape
  bool transposed = false;      ///< stored [in, out] (GPT-2's Conv1D)
  int64_t pfRow = 0, hfRow = 0, rows = 0; ///< in the two 2-D views
  /// The rows are a rotary block in Hugging Face's interleaved pair order:
  /// row i here is row 2i (i < rows/2) or 2(i - rows/2) + 1 there.
  bool ropeInterleaved = false;
};

/// The layout of one model's Hugging Face checkpoint (from its config).
class HfLayout {
public:
  /// From a config.json's text (Program's ModelInfo::hfConfig). Errors: not
  /// JSON, a model_type PipeForge does not import.
  static Expected<HfLayout> fromConfig(const std::string &configJson);

  const std::string &modelType() const { return type; }
  /// Whether lm_head shares the embedding's tensor (not stored).
  bool tiedEmbeddings() const { return tied; }
  /// The pieces of the PipeForge tensor `name` (a parameter's name without
  /// "@copyN", or a load-balancing bias) of whole shape `shape`, covering
  /// each of its rows once. Errors: a name the family does not have.
  Expected<std::vector<HfPiece>>
  pieces(const std::string &name, const std::vector<int64_t> &shape) const;
  /// The config.json to write beside exported weights: the imported config
  /// with `architectures`, `dtype` float32 and `tie_word_embeddings` set.
  std::string exportConfig() const;

private:
  std::string type, prefix;
  bool tied = false;
  int64_t heads = 0, dn = 0, dr = 0, dv = 0, kvRank = 0;
  std::string config;
};

/// The shape of the whole tensor of which `p` is one tensor-parallel rank's
/// shard (its own shape when it is not split), in a program of `T`
/// tensor-parallel ranks.
std::vector<int64_t> wholeParamShape(const Param &p, int T);

/// A PipeForge tensor by name, whole.
using WholeTensors = std::vector<std::pair<std::string, std::vector<float>>>;

/// Where a run's initial weights come from (pipeforge-run --init-from):
/// the executor asks for each parameter it holds, and only for its rows.
class WeightSource {
public:
  virtual ~WeightSource();
  /// Rows [row0, row1) of dimension 0 of the whole tensor `name` (shape
  /// `shape`), row-major, into `out`.
  virtual Status fill(const std::string &name,
                      const std::vector<int64_t> &shape, int64_t row0,
                      int64_t row1, float *out) const = 0;
  /// Whether the source holds a value for the load-balancing bias `name`.
  virtual bool hasBias(const std::string &name) const = 0;
};

/// A Hugging Face model directory as a WeightSource.
class HfWeightSource final : public WeightSource {
public:
  /// Opens `dir` (config.json, the safetensors) for `prog`: the directory's
  /// config must describe the program's model (same model_type and sizes
  /// as the program's hfConfig), and the checkpoint must hold exactly the
  /// tensors the program's parameters and biases map to, each of the
  /// expected shape: errors name the file and the tensor. Reads headers
  /// only.
  static Expected<std::unique_ptr<HfWeightSource>>
  open(const std::string &dir, const Program &prog);

  Status fill(const std::string &name, const std::vector<int64_t> &shape,
              int64_t row0, int64_t row1, float *out) const override;
  bool hasBias(const std::string &name) const override;

private:
  HfWeightSource() = default;
  std::unique_ptr<SafetensorsModel> model;
  std::unique_ptr<HfLayout> layout;
  std::map<std::string, std::vector<HfPiece>> byName;
};

/// The tensors of `whole` (every parameter of copy 0 by its base name, and
/// the biases) in Hugging Face's names and shapes; tied copies are left
/// out. Errors: a tensor the layout does not know, a Hugging Face tensor
/// not covered exactly once.
Expected<std::vector<std::pair<StTensorOut, std::vector<float>>>>
toHfTensors(const HfLayout &layout, const Program &prog,
            const WholeTensors &whole);

/// Writes a Hugging Face model directory: config.json and the safetensors
/// (sharded above `maxShardBytes`).
Status writeHfModel(const std::string &dir, const Program &prog,
                    const WholeTensors &whole,
                    uint64_t maxShardBytes = uint64_t(5) << 30);

/// Copies the files of a model directory that are not weights and that a
/// user's tools read beside them (the tokenizer: tokenizer.json,
/// tokenizer_config.json, tokenizer.model, special_tokens_map.json; and
/// generation_config.json) from `from` to `to`, those present.
Status copyHfCompanionFiles(const std::string &from, const std::string &to);

//===----------------------------------------------------------------------===//
// Checkpoints of any parallel layout, whole (pipeforge-export)
//===----------------------------------------------------------------------===//

/// Writes <dir>/program.pfp and <dir>/layout.json ({"rank_layout":
/// "pp-fastest" | "dp-fastest"}) beside a checkpoint's rank files (the
/// trainer, world rank 0, before the manifest).
Status writeCheckpointLayout(const std::string &dir, const Program &prog,
                             bool dataFastest);

/// A complete checkpoint folder (every rank's file, the manifest, the
/// program and layout writeCheckpointLayout left) as whole tensors: each
/// parameter of copy 0 by its base name (tensor-parallel shards and
/// expert slices put back together, from data-parallel replica 0), then
/// the load-balancing biases. `prog` receives the checkpoint's program.
Expected<WholeTensors> readWholeCheckpoint(const std::string &dir,
                                           Program &prog);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_HFWEIGHTS_H
