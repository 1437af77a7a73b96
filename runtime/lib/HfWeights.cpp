//===- HfWeights.cpp - Hugging Face checkpoints in and out ----------------===//
//
// See HfWeights.h and docs/huggingface.md.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/HfWeights.h"

#include "pipeforge/rt/Executor.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <numeric>
#include <set>

namespace pipeforge::rt {

using Json = nlohmann::json;

WeightSource::~WeightSource() = default;

std::vector<int64_t> wholeParamShape(const Param &p, int T) {
  std::vector<int64_t> s = p.type.shape;
  if (p.tpDim >= 0 && T > 1)
    s[size_t(p.tpDim)] *= T;
  return s;
}

namespace {

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// A tensor's 2-D view: rows are every dimension but the last; a 1-D
/// tensor (or a scalar) is one column.
std::pair<int64_t, int64_t> view2d(const std::vector<int64_t> &shape) {
  if (shape.size() < 2) {
    int64_t n = shape.empty() ? 1 : shape[0];
    return {n, 1};
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d)
    rows *= shape[d];
  return {rows, shape.back()};
}

/// The view of a piece's Hugging Face tensor.
std::pair<int64_t, int64_t> hfView(const HfPiece &p) {
  if (p.transposed && p.hfShape.size() == 2)
    return {p.hfShape[1], p.hfShape[0]};
  return view2d(p.hfShape);
}

/// Row `k` of a piece (0-based within it) in the Hugging Face view.
int64_t hfRowOf(const HfPiece &p, int64_t k) {
  if (!p.ropeInterleaved)
    return p.hfRow + k;
  int64_t half = p.rows / 2;
  return p.hfRow + (k < half ? 2 * k : 2 * (k - half) + 1);
}

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i)
    o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

int64_t intKey(const Json &c, const char *key, int64_t fallback) {
  auto it = c.find(key);
  return it != c.end() && it->is_number_integer() ? it->get<int64_t>()
                                                  : fallback;
}

const char *architectureOf(const std::string &type) {
  if (type == "gpt2")
    return "GPT2LMHeadModel";
  if (type == "llama")
    return "LlamaForCausalLM";
  if (type == "mixtral")
    return "MixtralForCausalLM";
  if (type == "qwen2_moe")
    return "Qwen2MoeForCausalLM";
  if (type == "deepseek_v2")
    return "DeepseekV2ForCausalLM";
  if (type == "deepseek_v3")
    return "DeepseekV3ForCausalLM";
  return nullptr;
}

} // namespace

//===----------------------------------------------------------------------===//
// The mapping
//===----------------------------------------------------------------------===//

Expected<HfLayout> HfLayout::fromConfig(const std::string &configJson) {
  Json c = Json::parse(configJson, nullptr, /*allow_exceptions=*/false);
  if (!c.is_object())
    return Status::error("the model's config is not a JSON object");
  HfLayout l;
  l.config = configJson;
  auto mt = c.find("model_type");
  l.type = mt != c.end() && mt->is_string() ? mt->get<std::string>() : "";
  if (!architectureOf(l.type))
    return Status::error("model_type '" + l.type +
                         "' has no Hugging Face mapping (gpt2, llama, "
                         "mixtral, qwen2_moe, deepseek_v2, deepseek_v3)");
  bool gpt = l.type == "gpt2";
  l.prefix = gpt ? "transformer." : "model.";
  auto tie = c.find("tie_word_embeddings");
  // Hugging Face's defaults: GPT-2 ties, the others (as PipeForge imports
  // them) do not unless asked.
  l.tied = tie != c.end() && tie->is_boolean() ? tie->get<bool>() : gpt;
  l.heads = intKey(c, "num_attention_heads", 0);
  l.dn = intKey(c, "qk_nope_head_dim", 0);
  l.dr = intKey(c, "qk_rope_head_dim", 0);
  l.dv = intKey(c, "v_head_dim", 0);
  l.kvRank = intKey(c, "kv_lora_rank", 0);
  return l;
}

Expected<std::vector<HfPiece>>
HfLayout::pieces(const std::string &name,
                 const std::vector<int64_t> &shape) const {
  auto [rows, cols] = view2d(shape);
  auto direct = [&](const std::string &hf) {
    return std::vector<HfPiece>{{hf, shape, false, 0, 0, rows, false}};
  };
  bool gpt = type == "gpt2";
  std::string embedding = gpt ? "transformer.wte.weight"
                              : "model.embed_tokens.weight";
  if (name == "lm_head.weight")
    return direct(tied ? embedding : "lm_head.weight");
  if (name == "wte" || name == "wpe" || name == "embed_tokens")
    return direct(prefix + name + ".weight");
  if (gpt) {
    // h.N.attn.{q,k,v}.{weight,bias}: rows of c_attn's output.
    for (int j = 0; j < 3; ++j) {
      std::string part = std::string(".attn.") + "qkv"[j] + ".";
      size_t at = name.find(part);
      if (at == std::string::npos || name.rfind("h.", 0) != 0)
        continue;
      std::string kind = name.substr(at + part.size());
      std::string fused = prefix + name.substr(0, at) + ".attn.c_attn." + kind;
      int64_t h = shape[0];
      if (kind == "weight" && shape.size() == 2)
        return std::vector<HfPiece>{
            {fused, {shape[1], 3 * h}, true, 0, j * h, h, false}};
      if (kind == "bias" && shape.size() == 1)
        return std::vector<HfPiece>{{fused, {3 * h}, false, 0, j * h, h, false}};
    }
    // Conv1D weights: [in, out] there, [out, in] here.
    if (shape.size() == 2 && endsWith(name, ".weight") &&
        (name.find(".attn.c_proj.") != std::string::npos ||
         name.find(".mlp.c_fc.") != std::string::npos ||
         name.find(".mlp.c_proj.") != std::string::npos))
      return std::vector<HfPiece>{{prefix + name,
                                   {shape[1], shape[0]},
                                   true,
                                   0,
                                   0,
                                   shape[0],
                                   false}};
    if (name.rfind("h.", 0) == 0 || name.rfind("ln_f.", 0) == 0)
      return direct(prefix + name);
    return Status::error("parameter '" + name +
                         "' has no tensor in a gpt2 checkpoint");
  }
  // Stacked experts [E, a, b] <- E tensors [a, b].
  for (const char *proj :
       {"w1", "w2", "w3", "gate_proj", "up_proj", "down_proj"}) {
    std::string suffix = std::string(".experts.") + proj;
    if (!endsWith(name, suffix) || shape.size() != 3)
      continue;
    std::string stem = prefix + name.substr(0, name.size() - suffix.size());
    std::vector<HfPiece> out;
    for (int64_t e = 0; e < shape[0]; ++e)
      out.push_back({stem + ".experts." + std::to_string(e) + "." + proj +
                         ".weight",
                     {shape[1], shape[2]},
                     false,
                     e * shape[1],
                     0,
                     shape[1],
                     false});
    return out;
  }
  // Qwen2-MoE's shared expert: one expert of an nn.moe here.
  if (name.find(".shared_expert.") != std::string::npos &&
      shape.size() == 3 && shape[0] == 1)
    return std::vector<HfPiece>{
        {prefix + name, {shape[1], shape[2]}, false, 0, 0, shape[1], false}};
  // Multi-head Latent Attention.
  if (type == "deepseek_v2" || type == "deepseek_v3") {
    auto under = [&](const std::string &suffix, std::string &stem) {
      if (!endsWith(name, suffix))
        return false;
      stem = prefix + name.substr(0, name.size() - suffix.size());
      return true;
    };
    std::string stem;
    int64_t H = heads;
    if (under(".kv_a_proj_with_mqa.latent.weight", stem))
      return std::vector<HfPiece>{{stem + ".kv_a_proj_with_mqa.weight",
                                   {kvRank + dr, cols},
                                   false,
                                   0,
                                   0,
                                   rows,
                                   false}};
    if (under(".kv_a_proj_with_mqa.rope.weight", stem))
      return std::vector<HfPiece>{{stem + ".kv_a_proj_with_mqa.weight",
                                   {kvRank + dr, cols},
                                   false,
                                   0,
                                   kvRank,
                                   rows,
                                   true}};
    bool key = under(".kv_b_proj.k_nope.weight", stem);
    if (key || under(".kv_b_proj.v.weight", stem)) {
      std::vector<HfPiece> out;
      int64_t per = key ? dn : dv;
      for (int64_t h = 0; h < H; ++h)
        out.push_back({stem + ".kv_b_proj.weight",
                       {H * (dn + dv), cols},
                       false,
                       h * per,
                       h * (dn + dv) + (key ? 0 : dn),
                       per,
                       false});
      return out;
    }
    if (endsWith(name, ".self_attn.q_b_proj.weight") ||
        endsWith(name, ".self_attn.q_proj.weight")) {
      std::vector<HfPiece> out;
      for (int64_t h = 0; h < H; ++h) {
        int64_t r0 = h * (dn + dr);
        out.push_back({prefix + name, shape, false, r0, r0, dn, false});
        out.push_back(
            {prefix + name, shape, false, r0 + dn, r0 + dn, dr, true});
      }
      return out;
    }
  }
  if (name.rfind("layers.", 0) == 0 || name == "norm.weight")
    return direct(prefix + name);
  return Status::error("parameter '" + name + "' has no tensor in a " + type +
                       " checkpoint");
}

std::string HfLayout::exportConfig() const {
  Json c = Json::parse(config, nullptr, false);
  c["architectures"] = {architectureOf(type)};
  c["dtype"] = "float32";
  c["tie_word_embeddings"] = tied;
  return c.dump(2) + "\n";
}

//===----------------------------------------------------------------------===//
// In
//===----------------------------------------------------------------------===//

namespace {

/// The names a checkpoint may hold that are not weights: buffers older
/// transformers versions saved (GPT-2's causal mask, rotary frequencies).
bool isIgnoredBuffer(const std::string &t) {
  return endsWith(t, ".attn.masked_bias") || endsWith(t, ".rotary_emb.inv_freq") ||
         (endsWith(t, ".attn.bias") && t.rfind("transformer.h.", 0) == 0);
}

/// The biases (nn.moe's load-balancing state) a program's kernels name.
std::map<std::string, int64_t> biasesOf(const Program &prog) {
  std::map<std::string, int64_t> out;
  for (const Stage &st : prog.stages)
    for (const Function *fn :
         {&st.forward, &st.backwardInput, &st.backwardWeight, &st.backward})
      for (const Kernel &k : fn->kernels) {
        auto it = k.attrs.find("bias");
        if (it == k.attrs.end() || k.inputs.size() < 2)
          continue;
        const std::string *n = std::get_if<std::string>(&it->second);
        int32_t rv = k.inputs[1];
        if (!n || n->empty() || rv < 0 || size_t(rv) >= fn->values.size() ||
            fn->values[size_t(rv)].shape.empty())
          continue;
        out[*n] = fn->values[size_t(rv)].shape[0];
      }
  return out;
}

/// Every PipeForge tensor of the program by base name with its whole shape:
/// copy 0's parameters (tensor-parallel shards widened back), then the
/// biases.
std::vector<std::pair<std::string, std::vector<int64_t>>>
wholeShapes(const Program &prog) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  int T = prog.training.tensorParallel;
  for (const Param &p : prog.params) {
    if (p.copy != 0)
      continue;
    out.emplace_back(baseParamName(p.name), wholeParamShape(p, T));
  }
  for (auto &[n, e] : biasesOf(prog))
    out.emplace_back(n, std::vector<int64_t>{e});
  return out;
}

} // namespace

Expected<std::unique_ptr<HfWeightSource>>
HfWeightSource::open(const std::string &dir, const Program &prog) {
  if (prog.model.hfConfig.empty())
    return Status::error("--init-from: the program's model was not imported "
                         "from a Hugging Face config (compile it from a "
                         "config.json or a model directory)");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return Status::error("--init-from '" + dir +
                         "': not a directory (a Hugging Face model directory "
                         "holds config.json and model.safetensors)");
  auto cfgBytes = readFileBytes(dir + "/config.json");
  if (!cfgBytes)
    return Status::error("--init-from '" + dir + "': " + cfgBytes.message());
  Json theirs = Json::parse(cfgBytes->begin(), cfgBytes->end(), nullptr, false);
  Json ours = Json::parse(prog.model.hfConfig, nullptr, false);
  if (!theirs.is_object())
    return Status::error("'" + dir + "/config.json' is not a JSON object");
  // The shape-defining keys must agree (a different model would otherwise
  // fail later with a less telling shape error, or not at all).
  for (const char *k :
       {"model_type", "vocab_size", "hidden_size", "n_embd",
        "num_hidden_layers", "n_layer", "num_attention_heads", "n_head",
        "num_key_value_heads", "intermediate_size", "moe_intermediate_size",
        "n_routed_experts", "num_local_experts", "num_experts",
        "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
        "v_head_dim", "tie_word_embeddings"}) {
    bool a = ours.contains(k), b = theirs.contains(k);
    if (a && b && ours[k] != theirs[k])
      return Status::error("'" + dir + "/config.json': " + k + " is " +
                           theirs[k].dump() + ", the program's model has " +
                           ours[k].dump());
  }
  std::unique_ptr<HfWeightSource> src(new HfWeightSource);
  auto layout = HfLayout::fromConfig(prog.model.hfConfig);
  if (!layout)
    return layout.status();
  src->layout = std::make_unique<HfLayout>(layout.take());
  auto model = SafetensorsModel::open(dir);
  if (!model)
    return model.status();
  src->model = model.take();
  // Every expected tensor present with its shape; nothing else there.
  std::map<std::string, std::vector<int64_t>> expected;
  for (auto &[name, shape] : wholeShapes(prog)) {
    auto ps = src->layout->pieces(name, shape);
    if (!ps)
      return ps.status();
    for (const HfPiece &p : *ps) {
      auto [it, fresh] = expected.emplace(p.tensor, p.hfShape);
      if (!fresh && it->second != p.hfShape)
        return Status::error("internal: tensor '" + p.tensor +
                             "' mapped with two shapes");
    }
    src->byName[name] = ps.take();
  }
  for (auto &[t, shape] : expected) {
    auto f = src->model->find(t);
    if (!f.file)
      return Status::error("'" + dir + "': missing tensor '" + t + "' " +
                           shapeStr(shape));
    if (f.info->shape != shape)
      return Status::error("'" + f.file->path() + "': tensor '" + t +
                           "' has shape " + shapeStr(f.info->shape) +
                           ", the model needs " + shapeStr(shape));
  }
  for (const std::string &t : src->model->names())
    if (!expected.count(t) && !isIgnoredBuffer(t) &&
        !(t == "lm_head.weight" && src->layout->tiedEmbeddings()))
      return Status::error("'" + src->model->find(t).file->path() +
                           "': unexpected tensor '" + t +
                           "' (the model has no such parameter)");
  return src;
}

bool HfWeightSource::hasBias(const std::string &name) const {
  return byName.count(name) > 0;
}

Status HfWeightSource::fill(const std::string &name,
                            const std::vector<int64_t> &shape, int64_t row0,
                            int64_t row1, float *out) const {
  auto it = byName.find(name);
  if (it == byName.end())
    return Status::error("--init-from: no Hugging Face tensor for '" + name +
                         "'");
  auto [rows, cols] = view2d(shape);
  int64_t inner = shape.empty() ? 1 : rows / shape[0];
  int64_t lo = row0 * inner, hi = row1 * inner; // view rows wanted
  std::vector<float> run;
  // Every value read must be finite: a NaN or an infinity in a checkpoint
  // would train to NaN from the first step; the error names the file, the
  // tensor and the element (in the stored tensor's order).
  auto finite = [&](const HfPiece &p, const std::string &file,
                    const float *v, int64_t n, auto elementOf) -> Status {
    for (int64_t k = 0; k < n; ++k)
      if (!std::isfinite(v[k]))
        return Status::error(
            "'" + file + "': tensor '" + p.tensor + "' holds " +
            (std::isnan(v[k]) ? "NaN" : "an infinity") + " at element " +
            std::to_string(elementOf(k)) +
            ": --init-from needs finite weights");
    return Status::ok();
  };
  for (const HfPiece &p : it->second) {
    auto f = model->find(p.tensor);
    int64_t a = std::max(lo, p.pfRow), b = std::min(hi, p.pfRow + p.rows);
    if (a >= b)
      continue;
    auto [hfRows, hfCols] = hfView(p);
    if (hfCols != cols)
      return Status::error("'" + f.file->path() + "': tensor '" + p.tensor +
                           "' does not fit parameter '" + name + "'");
    if (!p.transposed) {
      for (int64_t r = a; r < b; ++r) {
        int64_t first = hfRowOf(p, r - p.pfRow) * cols;
        float *row = out + (r - lo) * cols;
        if (Status s = f.file->read(*f.info, first, cols, row); !s)
          return s;
        if (Status s = finite(p, f.file->path(), row, cols,
                              [&](int64_t k) { return first + k; });
            !s)
          return s;
      }
      continue;
    }
    // Stored [cols, hfRows]: each stored row holds one element of every
    // view row; read the contiguous run the piece needs, then scatter.
    int64_t h0 = hfRowOf(p, a - p.pfRow), n = b - a;
    run.resize(size_t(n));
    for (int64_t c = 0; c < cols; ++c) {
      if (Status s = f.file->read(*f.info, c * hfRows + h0, n, run.data()); !s)
        return s;
      if (Status s = finite(p, f.file->path(), run.data(), n,
                            [&](int64_t k) { return c * hfRows + h0 + k; });
          !s)
        return s;
      for (int64_t r = 0; r < n; ++r)
        out[(a - lo + r) * cols + c] = run[size_t(r)];
    }
  }
  for (const HfPiece &p : it->second) {
    auto f = model->find(p.tensor);
    f.file->release(*f.info);
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Out
//===----------------------------------------------------------------------===//

Expected<std::vector<std::pair<StTensorOut, std::vector<float>>>>
toHfTensors(const HfLayout &layout, const Program &prog,
            const WholeTensors &whole) {
  std::map<std::string, const Param *> params;
  for (const Param &p : prog.params)
    if (p.copy == 0)
      params[baseParamName(p.name)] = &p;
  struct Out {
    std::vector<int64_t> shape;
    std::vector<float> data;
    int64_t covered = 0, viewRows = 0;
  };
  std::map<std::string, Out> outs;
  for (auto &[name, values] : whole) {
    auto pit = params.find(name);
    if (pit != params.end() && !pit->second->tiedTo.empty())
      continue; // the tied copy: the target is written
    std::vector<int64_t> shape;
    if (pit != params.end()) {
      shape = wholeParamShape(*pit->second, prog.training.tensorParallel);
    } else {
      shape = {int64_t(values.size())}; // a bias
    }
    auto [rows, cols] = view2d(shape);
    if (rows * cols != int64_t(values.size()))
      return Status::error("tensor '" + name + "' holds " +
                           std::to_string(values.size()) + " values, not " +
                           shapeStr(shape));
    auto ps = layout.pieces(name, shape);
    if (!ps)
      return ps.status();
    for (const HfPiece &p : *ps) {
      Out &o = outs[p.tensor];
      if (o.data.empty()) {
        o.shape = p.hfShape;
        int64_t n = 1;
        for (int64_t d : p.hfShape)
          n *= d;
        o.data.assign(size_t(n), 0.0f);
        o.viewRows = hfView(p).first;
      }
      int64_t hfRows = hfView(p).first;
      for (int64_t k = 0; k < p.rows; ++k) {
        int64_t hr = hfRowOf(p, k);
        const float *src = values.data() + (p.pfRow + k) * cols;
        if (!p.transposed)
          std::memcpy(o.data.data() + hr * cols, src, size_t(cols) * 4);
        else
          for (int64_t c = 0; c < cols; ++c)
            o.data[size_t(c * hfRows + hr)] = src[c];
      }
      o.covered += p.rows;
    }
  }
  std::vector<std::pair<StTensorOut, std::vector<float>>> result;
  for (auto &[name, o] : outs) {
    // Every row written once (the pieces of a tensor do not overlap).
    if (o.covered != o.viewRows)
      return Status::error("internal: Hugging Face tensor '" + name +
                           "' has " + std::to_string(o.covered) + " of " +
                           std::to_string(o.viewRows) + " rows mapped");
    result.push_back({StTensorOut{name, o.shape, nullptr}, std::move(o.data)});
  }
  for (auto &[t, d] : result)
    t.data = d.data();
  return result;
}

Status copyHfCompanionFiles(const std::string &from, const std::string &to) {
  namespace fs = std::filesystem;
  for (const char *name :
       {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
        "special_tokens_map.json", "generation_config.json"}) {
    std::error_code ec;
    fs::path src = fs::path(from) / name;
    if (!fs::is_regular_file(src, ec))
      continue;
    fs::copy_file(src, fs::path(to) / name,
                  fs::copy_options::overwrite_existing, ec);
    if (ec)
      return Status::error("cannot copy '" + src.string() + "' to '" + to +
                           "': " + ec.message());
  }
  return Status::ok();
}

Status writeHfModel(const std::string &dir, const Program &prog,
                    const WholeTensors &whole, uint64_t maxShardBytes) {
  if (prog.model.hfConfig.empty())
    return Status::error("the program's model was not imported from a "
                         "Hugging Face config: there is no config.json to "
                         "write (compile it from a config.json)");
  auto layout = HfLayout::fromConfig(prog.model.hfConfig);
  if (!layout)
    return layout.status();
  auto tensors = toHfTensors(*layout, prog, whole);
  if (!tensors)
    return tensors.status();
  std::vector<StTensorOut> outs;
  for (auto &[t, d] : *tensors)
    outs.push_back(t);
  if (Status s = writeSafetensorsModel(dir, outs, maxShardBytes); !s)
    return s;
  std::string cfg = layout->exportConfig();
  return writeFileAtomically(dir + "/config.json",
                             std::vector<uint8_t>(cfg.begin(), cfg.end()));
}

} // namespace pipeforge::rt
