//===- ModelConfig.cpp - HF-style model configuration ---------------------===//

#include "pipeforge/Import/ModelConfig.h"
#include "pipeforge/Support/Numeric.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringExtras.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>

using namespace pipeforge::import;
using json = nlohmann::json;

/// A number as a config would spell it (0.1, 1.5, 1e-05).
static std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

/// Config limits beyond kMaxDimension (docs/reliability.md).
static constexpr int64_t kMaxLayers = 1 << 14;
static constexpr int64_t kMaxExperts = 1 << 12;
static constexpr double kMaxNormEpsilon = 1.0;
static constexpr double kMaxInitStd = 10.0;
static constexpr double kMaxRopeTheta = 1e12;

namespace {
/// Reads typed keys from the config object; the first error wins and names
/// the key. A key may have aliases (GPT-2 and Llama spell them differently).
class KeyReader {
public:
  explicit KeyReader(const json &obj) : obj(obj) {}

  /// The first present alias, or null.
  const json *find(llvm::ArrayRef<const char *> names, std::string &found) {
    for (const char *n : names) {
      auto it = obj.find(n);
      if (it != obj.end()) {
        found = n;
        return &*it;
      }
    }
    found = names.front();
    return nullptr;
  }

  /// A positive integer; `fallback` < 0 means required. JSON null counts as
  /// absent (HF writes `"n_inner": null`).
  int64_t positiveInt(llvm::ArrayRef<const char *> names, int64_t fallback = -1,
                      int64_t max = pipeforge::kMaxDimension) {
    std::string key;
    const json *v = find(names, key);
    if (!v || v->is_null()) {
      if (fallback < 0)
        fail("missing required key '" + key + "'" + aliasNote(names));
      return fallback;
    }
    if (!v->is_number_integer()) {
      fail("key '" + key + "' must be a positive integer, got " + describe(*v));
      return 0;
    }
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail("key '" + key + "' must be an integer in [1, " +
           std::to_string(max) + "], got " + describe(*v));
      return 0;
    }
    int64_t x = v->get<int64_t>();
    if (x <= 0) {
      fail("key '" + key + "' must be a positive integer, got " +
           std::to_string(x));
      return 0;
    }
    if (x > max) {
      // 0, not x: the caller derives defaults from the value (GPT-2's
      // n_inner = 4 n_embd) before the errors are reported.
      fail("key '" + key + "' must be an integer in [1, " +
           std::to_string(max) + "], got " + std::to_string(x));
      return 0;
    }
    return x;
  }

  double number(llvm::ArrayRef<const char *> names, double fallback) {
    std::string key;
    const json *v = find(names, key);
    if (!v || v->is_null())
      return fallback;
    if (!v->is_number()) {
      fail("key '" + key + "' must be a number, got " + describe(*v));
      return fallback;
    }
    return v->get<double>();
  }

  /// A rate in [0, 1).
  double rate(llvm::ArrayRef<const char *> names, double fallback) {
    double p = number(names, fallback);
    if (!(p >= 0.0 && p < 1.0)) {
      std::string key;
      find(names, key);
      fail("key '" + key + "' must be in [0, 1), got " + num(p));
    }
    return p;
  }

  /// A number in (0, max]: finite, and representable as f32 in the IR.
  double positiveNumber(llvm::ArrayRef<const char *> names, double fallback,
                        double max) {
    double x = number(names, fallback);
    if (!(x > 0.0)) {
      std::string key;
      find(names, key);
      fail("key '" + key + "' must be > 0, got " + num(x));
    } else if (!(x <= max)) {
      std::string key;
      find(names, key);
      fail("key '" + key + "' must be in (0, " + num(max) + "], got " + num(x));
    } else if (x < double(std::numeric_limits<float>::min())) {
      // The IR keeps these as f32: a smaller value would become 0 there.
      std::string key;
      find(names, key);
      fail("key '" + key + "' must be at least the smallest normal float (" +
           num(double(std::numeric_limits<float>::min())) + "), got " + num(x));
    }
    return x;
  }

  /// A non-negative integer (a count that may be 0), `fallback` when
  /// absent or null.
  int64_t count(const char *name, int64_t fallback,
                int64_t max = pipeforge::kMaxDimension) {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null())
      return fallback;
    if (!it->is_number_integer() || it->get<double>() < 0 ||
        it->get<double>() > double(max)) {
      fail(std::string("key '") + name + "' must be an integer in [0, " +
           std::to_string(max) + "], got " + describe(*it));
      return fallback;
    }
    return it->get<int64_t>();
  }

  /// A string, `fallback` when absent or null.
  std::string text(const char *name, const std::string &fallback) {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null())
      return fallback;
    if (!it->is_string()) {
      fail(std::string("key '") + name + "' must be a string, got " +
           describe(*it));
      return fallback;
    }
    return it->get<std::string>();
  }

  bool boolean(const char *name, bool fallback) {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null())
      return fallback;
    if (!it->is_boolean()) {
      fail(std::string("key '") + name + "' must be a boolean, got " +
           describe(*it));
      return fallback;
    }
    return it->get<bool>();
  }

  /// Records the first error.
  void fail(const std::string &msg) {
    if (error.empty())
      error = msg;
  }

  std::string error;

private:
  static std::string describe(const json &v) {
    std::string d = v.dump();
    if (d.size() > 40)
      d = d.substr(0, 37) + "...";
    return std::string(v.type_name()) + " " + d;
  }
  static std::string aliasNote(llvm::ArrayRef<const char *> names) {
    if (names.size() < 2)
      return "";
    std::string s = " (or";
    for (const char *n : names.drop_front())
      s += std::string(" '") + n + "'";
    return s + ")";
  }

  const json &obj;
};
} // namespace

bool ModelConfig::moeLayer(int64_t i) const {
  if (!isMoE() || i < firstDense)
    return false;
  if (isDeepSeek()) // HF: layer_idx % moe_layer_freq == 0
    return i % layerFreq == 0;
  if ((i + 1) % sparseStep != 0)
    return false;
  for (int64_t l : mlpOnlyLayers)
    if (l == i)
      return false;
  return true;
}

/// The MoE keys of Qwen2-MoE and DeepSeek-V2/V3 (read for every MoE model
/// type; a Mixtral config has none of them and keeps Mixtral's routing).
/// The rotary base: `rope_theta`, or (transformers 5 writes it there) the
/// `rope_theta` of `rope_parameters`. A rope_type other than "default" in
/// either `rope_parameters` or `rope_scaling` (YaRN, Llama 3's, linear,
/// dynamic) changes the frequencies, which PipeForge does not model: an
/// error rather than a silently different model.
static double readRopeTheta(KeyReader &r, const json &root) {
  for (const char *key : {"rope_parameters", "rope_scaling"}) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null())
      continue;
    std::string type;
    if (it->is_object()) {
      for (const char *t : {"rope_type", "type"})
        if (it->contains(t) && (*it)[t].is_string())
          type = (*it)[t].get<std::string>();
      if (type.empty() || type == "default")
        continue;
    }
    r.fail(std::string("key '") + key + "': rope type '" +
           (type.empty() ? it->dump() : type) +
           "' is not supported (only the default rotary frequencies)");
  }
  auto params = root.find("rope_parameters");
  if (params != root.end() && params->is_object() &&
      params->contains("rope_theta") && !root.contains("rope_theta")) {
    KeyReader inner(*params);
    double theta = inner.positiveNumber({"rope_theta"}, 10000.0, kMaxRopeTheta);
    if (!inner.error.empty())
      r.fail("rope_parameters: " + inner.error);
    return theta;
  }
  return r.positiveNumber({"rope_theta"}, 10000.0, kMaxRopeTheta);
}

static void readMoEKeys(KeyReader &r, const json &root, ModelConfig &c) {
  bool qwen = c.kind == ModelKind::Qwen2MoE;
  if (qwen) {
    c.numExperts = r.positiveInt({"num_experts"}, -1, kMaxExperts);
    c.topK = r.positiveInt({"num_experts_per_tok"});
  } else {
    c.numExperts = r.positiveInt({"num_local_experts", "n_routed_experts"}, -1,
                                 kMaxExperts);
    c.topK = r.positiveInt({"num_experts_per_tok"});
  }
  c.expertFfn = r.positiveInt({"moe_intermediate_size"}, c.intermediate);
  // Qwen2-MoE's default is false, Mixtral's routing renormalises.
  c.normTopkProb = r.boolean("norm_topk_prob", !qwen);
  c.routedScaling = r.positiveNumber({"routed_scaling_factor"}, 1.0, 1e30);
  c.nGroup = r.positiveInt({"n_group"}, 1, 64);
  c.topkGroup = r.positiveInt({"topk_group"}, 1, 64);
  auto it = root.find("scoring_func");
  if (it != root.end() && !it->is_null()) {
    if (!it->is_string() || (it->get<std::string>() != "softmax" &&
                             it->get<std::string>() != "sigmoid"))
      r.fail("key 'scoring_func' must be \"softmax\" or \"sigmoid\", got " +
             it->dump());
    else
      c.scoring = it->get<std::string>();
  }
  // Layers: the first k dense (DeepSeek), every sparse_step-th MoE and the
  // listed ones dense (Qwen2-MoE).
  auto nonNegative = [&](const char *key) -> int64_t {
    auto v = root.find(key);
    if (v == root.end() || v->is_null())
      return 0;
    if (!v->is_number_integer() || v->get<int64_t>() < 0) {
      r.fail(std::string("key '") + key +
             "' must be a non-negative integer, got " + v->dump());
      return 0;
    }
    return v->get<int64_t>();
  };
  c.firstDense = nonNegative("first_k_dense_replace");
  c.sparseStep = r.positiveInt({"decoder_sparse_step"}, 1, kMaxLayers);
  if (auto v = root.find("mlp_only_layers");
      v != root.end() && !v->is_null()) {
    if (!v->is_array())
      r.fail("key 'mlp_only_layers' must be a list of layer indices");
    else
      for (const json &l : *v) {
        if (!l.is_number_integer() || l.get<int64_t>() < 0) {
          r.fail("key 'mlp_only_layers' must be a list of layer indices, "
                 "got " + l.dump());
          break;
        }
        c.mlpOnlyLayers.push_back(l.get<int64_t>());
      }
  }
  // Shared experts: DeepSeek's n_shared_experts plain MLPs of the expert
  // width (one MLP of n times that width), Qwen2-MoE's one gated MLP.
  if (qwen) {
    c.sharedFfn = nonNegative("shared_expert_intermediate_size");
    c.sharedGate = c.sharedFfn > 0;
    c.qkvBias = true;
  } else {
    c.sharedFfn = nonNegative("n_shared_experts") * c.expertFfn;
  }
}

static llvm::Error configError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// DeepSeek-V2 / V3 (HF DeepseekV2Config / DeepseekV3Config): the MLA and
/// DeepSeekMoE keys, with HF's defaults where a key may be absent.
static void readDeepSeek(KeyReader &r, const json &root, ModelConfig &c) {
  bool v3 = c.kind == ModelKind::DeepSeekV3;
  MLAConfig &m = c.mla;
  m.qLoraRank = r.positiveInt({"q_lora_rank"}, 0); // null: no q compression
  m.kvLoraRank = r.positiveInt({"kv_lora_rank"});
  m.qkNopeHeadDim = r.positiveInt({"qk_nope_head_dim"});
  m.qkRopeHeadDim = r.positiveInt({"qk_rope_head_dim"});
  m.vHeadDim = r.positiveInt({"v_head_dim"});
  // Every head has its own keys and values (num_key_value_heads is not
  // read by MLA).
  c.numKvHeads = c.numHeads;
  c.intermediate = r.positiveInt({"intermediate_size"});
  c.normEpsilon = r.positiveNumber({"rms_norm_eps"}, 1e-6, kMaxNormEpsilon);
  c.ropeTheta = readRopeTheta(r, root);
  c.attnDropout = r.rate({"attention_dropout"}, 0.0);
  c.tiedEmbeddings = r.boolean("tie_word_embeddings", false);
  if (r.boolean("attention_bias", false))
    r.fail("key 'attention_bias': true is not supported (DeepSeek's "
           "projections have no biases)");

  // DeepSeekMoE, into the MoE fields nn.moe consumes (HF's defaults: V3
  // sigmoid scores renormalised, V2 softmax with raw top-k weights).
  c.numExperts = r.count("n_routed_experts", 0, kMaxExperts); // 0: dense
  if (c.numExperts > 0) {
    c.topK = r.positiveInt({"num_experts_per_tok"});
    c.expertFfn = r.positiveInt({"moe_intermediate_size"});
  }
  c.sharedFfn = r.count("n_shared_experts", 0, kMaxExperts) * c.expertFfn;
  c.firstDense = r.count("first_k_dense_replace", 0, kMaxLayers);
  c.layerFreq = r.positiveInt({"moe_layer_freq"}, 1, kMaxLayers);
  c.nGroup = r.positiveInt({"n_group"}, 1, 64);
  c.topkGroup = r.positiveInt({"topk_group"}, 1, 64);
  c.routedScaling = r.positiveNumber({"routed_scaling_factor"}, 1.0, 1e6);
  c.scoring = r.text("scoring_func", v3 ? "sigmoid" : "softmax");
  c.normTopkProb = r.boolean("norm_topk_prob", v3);
  // topk_method: greedy and group_limited_greedy follow from n_group /
  // topk_group and the scoring; noaux_tc (DeepSeek-V3's default) adds the
  // load-balancing bias (nn.moe's `bias`, e_score_correction_bias) with
  // PipeForge's `bias_update_speed` (default 0.001, the paper's gamma).
  std::string method = r.text("topk_method", v3 ? "noaux_tc" : "greedy");
  if (r.error.empty() && method != "greedy" &&
      method != "group_limited_greedy" && method != "noaux_tc")
    r.fail("key 'topk_method': unsupported value '" + method +
           "' (expected greedy, group_limited_greedy or noaux_tc)");
  c.routingBias = method == "noaux_tc" && c.numExperts > 0;
  // Routing as Hugging Face's DeepseekV2 router does it: `greedy` is the
  // top-k of all experts (n_group / topk_group are not looked at), only
  // `group_limited_greedy` limits the choice to groups, and the top-k
  // weights are never renormalised (its router has no norm_topk_prob).
  if (!v3) {
    if (method == "greedy")
      c.nGroup = c.topkGroup = 1;
    c.normTopkProb = false;
  }
  c.biasUpdateSpeed = r.number({"bias_update_speed"}, 0.001);
  if (r.error.empty() &&
      !(c.biasUpdateSpeed >= 0.0 && c.biasUpdateSpeed <= 3.4e38))
    r.fail("key 'bias_update_speed' must be a finite number >= 0, got " +
           num(c.biasUpdateSpeed));
  if (r.error.empty() && c.scoring != "softmax" && c.scoring != "sigmoid")
    r.fail("key 'scoring_func': unsupported value '" + c.scoring +
           "' (expected softmax or sigmoid)");
}

/// The consistency of DeepSeek's keys; "" when consistent.
static std::string checkDeepSeek(const ModelConfig &c) {
  const MLAConfig &m = c.mla;
  if (m.qkRopeHeadDim % 2 != 0)
    return "rotary embeddings need an even 'qk_rope_head_dim', got " +
           std::to_string(m.qkRopeHeadDim);
  return "";
}

static llvm::Expected<ModelConfig> parseConfig(llvm::StringRef text,
                                               int64_t seqLen, int64_t batch) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception &e) {
    // parse_error, and out_of_range for a number like 1e999.
    return configError(llvm::Twine("invalid JSON: ") + e.what());
  }
  if (!root.is_object())
    return configError("the config must be a JSON object");

  auto typeIt = root.find("model_type");
  if (typeIt == root.end())
    return configError("missing required key 'model_type' "
                       "(gpt2, llama, mixtral, qwen2_moe, deepseek_v2 or "
                       "deepseek_v3)");
  if (!typeIt->is_string())
    return configError("key 'model_type' must be a string");
  std::string type = typeIt->get<std::string>();

  ModelConfig c;
  if (type == "gpt2")
    c.kind = ModelKind::GPT2;
  else if (type == "llama")
    c.kind = ModelKind::Llama;
  else if (type == "mixtral")
    c.kind = ModelKind::Mixtral;
  else if (type == "qwen2_moe")
    c.kind = ModelKind::Qwen2MoE;
  else if (type == "deepseek_v2")
    c.kind = ModelKind::DeepSeekV2;
  else if (type == "deepseek_v3")
    c.kind = ModelKind::DeepSeekV3;
  else
    return configError("key 'model_type': unsupported model type '" + type +
                       "' (expected gpt2, llama, mixtral, qwen2_moe, "
                       "deepseek_v2 or deepseek_v3)");

  KeyReader r(root);
  c.numLayers = r.positiveInt({"n_layer", "num_hidden_layers"}, -1, kMaxLayers);
  c.hidden = r.positiveInt({"n_embd", "hidden_size"});
  c.numHeads = r.positiveInt({"n_head", "num_attention_heads"});
  c.vocab = r.positiveInt({"vocab_size"});
  c.maxPositions = r.positiveInt({"n_positions", "max_position_embeddings"});
  c.initStd = r.positiveNumber({"initializer_range"}, 0.02, kMaxInitStd);
  if (c.kind == ModelKind::GPT2) {
    c.numKvHeads = c.numHeads;
    c.intermediate = r.positiveInt({"n_inner", "intermediate_size"},
                                   c.hidden > 0 ? 4 * c.hidden : 1);
    c.normEpsilon =
        r.positiveNumber({"layer_norm_epsilon"}, 1e-5, kMaxNormEpsilon);
    // GPT2Config's defaults.
    c.attnDropout = r.rate({"attn_pdrop"}, 0.1);
    c.residDropout = r.rate({"resid_pdrop"}, 0.1);
    c.embdDropout = r.rate({"embd_pdrop"}, 0.1);
    c.tiedEmbeddings = r.boolean("tie_word_embeddings", true);
  } else if (c.isDeepSeek()) {
    readDeepSeek(r, root, c);
  } else {
    c.numKvHeads =
        r.positiveInt({"num_key_value_heads"}, c.numHeads > 0 ? c.numHeads : 1);
    c.intermediate = r.positiveInt({"intermediate_size", "n_inner"});
    c.normEpsilon = r.positiveNumber({"rms_norm_eps"}, 1e-6, kMaxNormEpsilon);
    c.ropeTheta = readRopeTheta(r, root);
    c.attnDropout = r.rate({"attention_dropout", "attn_pdrop"}, 0.0);
    c.residDropout = r.rate({"resid_pdrop"}, 0.0);
    c.embdDropout = r.rate({"embd_pdrop"}, 0.0);
    c.tiedEmbeddings = r.boolean("tie_word_embeddings", false);
    if (c.isMoE())
      readMoEKeys(r, root, c);
  }
  if (!r.error.empty())
    return configError(r.error);

  // Consistency.
  const char *hiddenKey = c.kind == ModelKind::GPT2 ? "n_embd" : "hidden_size";
  const char *headsKey =
      c.kind == ModelKind::GPT2 ? "n_head" : "num_attention_heads";
  const char *posKey =
      c.kind == ModelKind::GPT2 ? "n_positions" : "max_position_embeddings";
  if (c.isDeepSeek()) {
    if (std::string e = checkDeepSeek(c); !e.empty())
      return configError(e);
  } else if (c.hidden % c.numHeads != 0)
    return configError(llvm::Twine("key '") + hiddenKey + "' (" +
                       llvm::Twine(c.hidden) + ") is not divisible by '" +
                       headsKey + "' (" + llvm::Twine(c.numHeads) + ")");
  if (c.numHeads % c.numKvHeads != 0)
    return configError(llvm::Twine("key 'num_key_value_heads' (") +
                       llvm::Twine(c.numKvHeads) +
                       ") does not divide 'num_attention_heads' (" +
                       llvm::Twine(c.numHeads) + ")");
  if (c.kind != ModelKind::GPT2 && !c.isDeepSeek() && c.headDim() % 2 != 0)
    return configError(llvm::Twine("rotary embeddings need an even head "
                                   "dimension: 'hidden_size' / "
                                   "'num_attention_heads' is ") +
                       llvm::Twine(c.headDim()));
  const char *expertsKey = c.kind == ModelKind::Qwen2MoE ? "num_experts"
                           : c.isDeepSeek()               ? "n_routed_experts"
                                                          : "num_local_experts";
  if (c.isMoE() && c.topK > c.numExperts)
    return configError(llvm::Twine("key 'num_experts_per_tok' (") +
                       llvm::Twine(c.topK) + ") exceeds '" + expertsKey +
                       "' (" + llvm::Twine(c.numExperts) + ")");
  if (c.isMoE() && c.numExperts % c.nGroup != 0)
    return configError(llvm::Twine("key 'n_group' (") + llvm::Twine(c.nGroup) +
                       ") does not divide '" + expertsKey + "' (" +
                       llvm::Twine(c.numExperts) + ")");
  if (c.isMoE() && c.topkGroup > c.nGroup)
    return configError(llvm::Twine("key 'topk_group' (") +
                       llvm::Twine(c.topkGroup) + ") exceeds 'n_group' (" +
                       llvm::Twine(c.nGroup) + ")");
  if (c.isMoE() && c.topkGroup * (c.numExperts / c.nGroup) < c.topK)
    return configError(llvm::Twine("key 'num_experts_per_tok' (") +
                       llvm::Twine(c.topK) + ") exceeds the " +
                       llvm::Twine(c.topkGroup * (c.numExperts / c.nGroup)) +
                       " experts of the 'topk_group' best groups");

  if (seqLen < 0 || seqLen > pipeforge::kMaxDimension)
    return configError("--seq-len must be an integer in [1, " +
                       llvm::Twine(pipeforge::kMaxDimension) + "], got " +
                       llvm::Twine(seqLen));
  if (batch <= 0 || batch > pipeforge::kMaxDimension)
    return configError("--microbatch-size must be an integer in [1, " +
                       llvm::Twine(pipeforge::kMaxDimension) + "], got " +
                       llvm::Twine(batch));
  c.seqLen = seqLen ? seqLen : c.maxPositions;
  c.batch = batch;
  if (c.seqLen > c.maxPositions)
    return configError(llvm::Twine("--seq-len ") + llvm::Twine(c.seqLen) +
                       " exceeds key '" + posKey + "' (" +
                       llvm::Twine(c.maxPositions) + ")");

  // The largest tensors the model has (parameters, activations, the
  // attention scores a kernel forms), each within kMaxTensorBytes: checked
  // products, so that no later size computation overflows.
  const char *vocabKey = "vocab_size";
  const char *ffnKey =
      c.kind == ModelKind::GPT2 ? "n_inner" : "intermediate_size";
  struct Big {
    const char *what;
    std::string keys;
    std::vector<int64_t> shape;
  };
  std::vector<Big> bigs = {
      {"the embedding table",
       std::string(vocabKey) + " x " + hiddenKey,
       {c.vocab, c.hidden}},
      {"an MLP weight",
       std::string(hiddenKey) + " x " + ffnKey,
       {c.hidden, c.intermediate}},
      {"the logits",
       std::string("microbatch size x sequence length x ") + vocabKey,
       {c.batch, c.seqLen, c.vocab}},
      {"an MLP activation",
       std::string("microbatch size x sequence length x ") + ffnKey,
       {c.batch, c.seqLen, c.intermediate}},
      {"the attention scores",
       std::string("microbatch size x ") + headsKey +
           " x sequence length x sequence length",
       {c.batch, c.numHeads, c.seqLen, c.seqLen}},
  };
  if (c.kind == ModelKind::GPT2)
    bigs.push_back({"the position table",
                    std::string(posKey) + " x " + hiddenKey,
                    {c.maxPositions, c.hidden}});
  if (c.isMoE())
    bigs.push_back(
        {"an expert weight",
         std::string(expertsKey) + " x " + hiddenKey + " x " +
             (c.expertFfn != c.intermediate || c.isDeepSeek()
                  ? "moe_intermediate_size"
                  : ffnKey),
         {c.numExperts, c.hidden, c.expertFfn}});
  if (c.isDeepSeek()) {
    bigs.push_back({"the queries",
                    std::string("num_attention_heads x (qk_nope_head_dim + "
                                "qk_rope_head_dim) x ") +
                        hiddenKey,
                    {c.numHeads, c.mla.qkHeadDim(),
                     std::max<int64_t>(c.hidden, c.mla.qLoraRank)}});
    bigs.push_back({"the keys and values",
                    "num_attention_heads x (qk_nope_head_dim + v_head_dim) x "
                    "kv_lora_rank",
                    {c.numHeads, c.mla.qkNopeHeadDim + c.mla.vHeadDim,
                     c.mla.kvLoraRank}});
  }
  for (const Big &t : bigs) {
    std::string why = pipeforge::checkTensorShape(t.shape, 4);
    if (!why.empty())
      return configError(llvm::Twine(t.what) + " (" + t.keys + "): " + why);
  }
  return c;
}

llvm::Expected<ModelConfig>
pipeforge::import::parseModelConfig(llvm::StringRef text, int64_t seqLen,
                                    int64_t batch) {
  // Every key is type-checked before it is read; this is the last line of
  // defence: no JSON exception leaves the importer.
  try {
    return parseConfig(text, seqLen, batch);
  } catch (const json::exception &e) {
    return configError(llvm::Twine("invalid config: ") + e.what());
  }
}
