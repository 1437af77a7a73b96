//===- HfWeightsTest.cpp - safetensors files and the per-family mapping ---===//

#include "pipeforge/rt/HfWeights.h"

#include "pipeforge/rt/Data.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

using namespace pipeforge::rt;
namespace fs = std::filesystem;

namespace {

/// A safetensors image from a header (as JSON text) and data bytes.
std::vector<uint8_t> image(const std::string &header,
                           const std::vector<uint8_t> &data) {
  std::vector<uint8_t> b(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    b[size_t(i)] = uint8_t(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string errorOf(const std::string &header, size_t dataBytes) {
  auto f = SafetensorsFile::fromBytes(
      image(header, std::vector<uint8_t>(dataBytes)), "x.safetensors");
  return f ? "" : f.message();
}

std::string tempDir(const std::string &name) {
  std::string d = (fs::temp_directory_path() /
                   ("pfhf-" + name + "-" + std::to_string(::getpid())))
                      .string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

} // namespace

TEST(SafetensorsTest, EncodedFilesReadBackBitwise) {
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 1e-30f, -0.0f, 7.0f};
  std::vector<float> b = {42.0f};
  auto bytes = encodeSafetensors({{"z.weight", {2, 3}, a.data()},
                                  {"a.bias", {1}, b.data()}},
                                 {{"format", "pt"}});
  ASSERT_EQ((bytes[0] | bytes[1] << 8) % 8, 0) << "header padded to 8";
  auto f = SafetensorsFile::fromBytes(bytes, "t");
  ASSERT_TRUE(f) << f.message();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  const StTensorInfo *z = (*f)->find("z.weight");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> got(6);
  ASSERT_TRUE((*f)->read(*z, 0, 6, got.data()));
  EXPECT_EQ(std::memcmp(got.data(), a.data(), 24), 0);
  // A part of the tensor, and a range past its end.
  ASSERT_TRUE((*f)->read(*z, 3, 3, got.data()));
  EXPECT_EQ(got[0], 1e-30f);
  EXPECT_FALSE((*f)->read(*z, 4, 3, got.data()));
}

TEST(SafetensorsTest, HalfAndBFloat16ConvertExactly) {
  // F16: 1.0 (0x3c00), -2.5 (0xc100), the smallest subnormal (0x0001),
  // infinity (0x7c00); BF16: 1.0 (0x3f80), -3.0 (0xc040).
  std::vector<uint8_t> data = {0x00, 0x3c, 0x00, 0xc1, 0x01, 0x00,
                               0x00, 0x7c, 0x80, 0x3f, 0x40, 0xc0};
  auto f = SafetensorsFile::fromBytes(
      image(R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})",
            data),
      "t");
  ASSERT_TRUE(f) << f.message();
  float h[4], b[2];
  ASSERT_TRUE((*f)->read(*(*f)->find("h"), 0, 4, h));
  ASSERT_TRUE((*f)->read(*(*f)->find("b"), 0, 2, b));
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.5f);
  EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(h[3]));
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -3.0f);
}

TEST(SafetensorsTest, MalformedHeadersAreErrorsNamingTheProblem) {
  EXPECT_NE(SafetensorsFile::fromBytes({1, 2, 3}, "x").message().find(
                "shorter than the 8-byte header length"),
            std::string::npos);
  std::vector<uint8_t> longHeader = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
  EXPECT_NE(SafetensorsFile::fromBytes(longHeader, "x").message().find(
                "runs past the end of the file"),
            std::string::npos);
  EXPECT_NE(errorOf("[1, 2]", 0).find("not a JSON object"), std::string::npos);
  EXPECT_NE(errorOf(R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                    8)
                .find("tensor 't': dtype 'I64' is not one of F32, F16, BF16"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                    4)
                .find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})",
                    8)
                .find("run past the data"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                    8)
                .find("8 bytes for 3 F32 elements"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    12)
                .find("tensors 'a' and 'b' overlap"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],)"
                    R"("data_offsets":[0,0]}})",
                    0)
                .find("too large"),
            std::string::npos);
}

TEST(SafetensorsTest, ShardedDirectoriesAndTheirIndex) {
  std::string d = tempDir("shards");
  std::vector<float> v(1000, 1.0f);
  std::vector<StTensorOut> ts;
  for (int i = 0; i < 5; ++i)
    ts.push_back({"t" + std::to_string(i), {1000}, v.data()});
  ASSERT_TRUE(writeSafetensorsModel(d, ts, /*maxShardBytes=*/8000));
  EXPECT_TRUE(fs::exists(d + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(d + "/model-00003-of-00003.safetensors"));
  auto m = SafetensorsModel::open(d);
  ASSERT_TRUE(m) << m.message();
  EXPECT_EQ((*m)->names().size(), 5u);
  EXPECT_NE((*m)->find("t4").file, nullptr);
  // An index naming a shard that is not there.
  fs::remove(d + "/model-00002-of-00003.safetensors");
  auto bad = SafetensorsModel::open(d);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("names the shard 'model-00002-of-00003."
                               "safetensors'"),
            std::string::npos)
      << bad.message();
  fs::remove_all(d);
}

TEST(HfLayoutTest, GptConv1DAndFusedQkv) {
  auto l = HfLayout::fromConfig(R"({"model_type":"gpt2"})");
  ASSERT_TRUE(l) << l.message();
  EXPECT_TRUE(l->tiedEmbeddings()) << "GPT-2 ties by default";
  auto k = l->pieces("h.3.attn.k.weight", {8, 8});
  ASSERT_TRUE(k) << k.message();
  ASSERT_EQ(k->size(), 1u);
  EXPECT_EQ((*k)[0].tensor, "transformer.h.3.attn.c_attn.weight");
  EXPECT_EQ((*k)[0].hfShape, (std::vector<int64_t>{8, 24}));
  EXPECT_TRUE((*k)[0].transposed);
  EXPECT_EQ((*k)[0].hfRow, 8);
  auto head = l->pieces("lm_head.weight", {100, 8});
  ASSERT_TRUE(head);
  EXPECT_EQ((*head)[0].tensor, "transformer.wte.weight");
  auto unknown = l->pieces("encoder.weight", {8, 8});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.message(),
            "parameter 'encoder.weight' has no tensor in a gpt2 checkpoint");
  EXPECT_FALSE(HfLayout::fromConfig(R"({"model_type":"bert"})"));
}

TEST(HfLayoutTest, DeepSeekRopeRowsAreDeinterleaved) {
  auto l = HfLayout::fromConfig(
      R"({"model_type":"deepseek_v3","num_attention_heads":2,)"
      R"("qk_nope_head_dim":2,"qk_rope_head_dim":4,"v_head_dim":3,)"
      R"("kv_lora_rank":5})");
  ASSERT_TRUE(l) << l.message();
  // The rope key: rows [5, 9) of kv_a_proj_with_mqa, here in rotate-half
  // order: PipeForge rows 0..3 = Hugging Face rows 5, 7, 6, 8.
  std::vector<float> w(9 * 1);
  for (int i = 0; i < 9; ++i)
    w[size_t(i)] = float(i);
  Program prog;
  prog.model.hfConfig = R"({"model_type":"deepseek_v3","num_attention_heads":2,)"
                        R"("qk_nope_head_dim":2,"qk_rope_head_dim":4,)"
                        R"("v_head_dim":3,"kv_lora_rank":5})";
  for (auto [n, s] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"layers.0.self_attn.kv_a_proj_with_mqa.latent.weight", {5, 1}},
           {"layers.0.self_attn.kv_a_proj_with_mqa.rope.weight", {4, 1}},
           {"layers.0.self_attn.kv_b_proj.k_nope.weight", {4, 5}},
           {"layers.0.self_attn.kv_b_proj.v.weight", {6, 5}},
           {"layers.0.self_attn.q_proj.weight", {12, 1}}}) {
    Param p;
    p.name = n;
    p.type.shape = s;
    prog.params.push_back(p);
  }
  // Export distinct values and look where they land.
  WholeTensors whole;
  std::mt19937 rng(7);
  for (const Param &p : prog.params) {
    std::vector<float> v(size_t(p.type.numElements()));
    for (float &x : v)
      x = float(rng() % 1000);
    whole.emplace_back(p.name, v);
  }
  auto hf = toHfTensors(*l, prog, whole);
  ASSERT_TRUE(hf) << hf.message();
  std::map<std::string, const std::vector<float> *> by;
  for (auto &[t, d] : *hf)
    by[t.name] = &d;
  ASSERT_EQ(by.size(), 3u);
  const std::vector<float> &kva =
      *by.at("model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
  const std::vector<float> &rope = whole[1].second;
  EXPECT_EQ(kva[5], rope[0]);
  EXPECT_EQ(kva[7], rope[1]);
  EXPECT_EQ(kva[6], rope[2]);
  EXPECT_EQ(kva[8], rope[3]);
  // kv_b: per head 2 key rows then 3 value rows.
  const std::vector<float> &kvb =
      *by.at("model.layers.0.self_attn.kv_b_proj.weight");
  // (rows of 5 values: head 0 is rows 0-1 key, 2-4 value; head 1 rows 5-6
  // key, 7-9 value)
  EXPECT_EQ(kvb[2 * 5], whole[3].second[0]) << "head 0's first value row";
  EXPECT_EQ(kvb[5 * 5], whole[2].second[2 * 5]) << "head 1's first key row";
  EXPECT_EQ(kvb[7 * 5 + 4], whole[3].second[3 * 5 + 4])
      << "head 1's first value row";

  // And back: a source over the written directory gives every tensor back.
  std::string d = tempDir("deepseek");
  ASSERT_TRUE(writeHfModel(d, prog, whole));
  auto src = HfWeightSource::open(d, prog);
  ASSERT_TRUE(src) << src.message();
  for (auto &[name, v] : whole) {
    const Param *p = nullptr;
    for (const Param &q : prog.params)
      if (q.name == name)
        p = &q;
    std::vector<float> got(v.size());
    ASSERT_TRUE((*src)->fill(name, p->type.shape, 0, p->type.shape[0],
                             got.data()));
    EXPECT_EQ(got, v) << name;
    // A part of the rows only.
    std::vector<float> part(v.size() / size_t(p->type.shape[0]));
    ASSERT_TRUE((*src)->fill(name, p->type.shape, 1, 2, part.data()));
    EXPECT_TRUE(std::equal(part.begin(), part.end(), v.begin() + long(part.size())))
        << name;
  }
  // A wrong shape in the checkpoint names the file and the tensor.
  prog.params[4].type.shape = {13, 1};
  auto bad = HfWeightSource::open(d, prog);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("tensor 'model.layers.0.self_attn.q_proj."
                               "weight' has shape [12, 1], the model needs "
                               "[13, 1]"),
            std::string::npos)
      << bad.message();
  fs::remove_all(d);
}
