//===- CpuBackendTest.cpp - CPU backend dispatch --------------------------===//

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/Executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace pipeforge::rt;

TEST(CpuBackend, KnowsEveryForwardAndGradientOp) {
  auto ops = cpuBackendOps();
  for (const char *op :
       {"linear", "layernorm", "rmsnorm", "gelu", "silu", "add", "mul",
        "embedding", "attention", "moe", "cross_entropy", "linear_bwd_input",
        "linear_bwd_weight", "layernorm_bwd_input", "layernorm_bwd_weight",
        "rmsnorm_bwd_input", "rmsnorm_bwd_weight", "gelu_bwd", "silu_bwd",
        "attention_bwd", "moe_bwd_input", "moe_bwd_weight",
        "embedding_bwd_weight", "cross_entropy_bwd"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
}

/// A large block freed is handed out again for the same size (no new
/// pages to fault in), still cleared by alloc(); small blocks and other
/// sizes come from the C library. (Off under AddressSanitizer.)
TEST(CpuBackend, LargeBlocksAreReusedAndCleared) {
  auto be = createCpuBackend();
  const int64_t big = int64_t(8) << 20;
  auto *a = static_cast<unsigned char *>(be->alloc(big));
  ASSERT_NE(a, nullptr);
  std::memset(a, 0xab, size_t(big));
  be->free(a);
  auto *b = static_cast<unsigned char *>(be->alloc(big));
  ASSERT_NE(b, nullptr);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(a, b);
#endif
  EXPECT_TRUE(std::all_of(b, b + big, [](unsigned char c) { return c == 0; }));
  void *c = be->allocUninit(big + 64); // another size: a fresh block
  EXPECT_NE(c, static_cast<void *>(b));
  be->free(b);
  be->free(c);
  be->free(nullptr);
}

TEST(CpuBackend, UnknownOpIsAnError) {
  auto be = createCpuBackend();
  Kernel k;
  k.op = "frobnicate";
  KernelCall c;
  c.kernel = &k;
  Status s = be->run(c);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("frobnicate"), std::string::npos);
}

// The backend dispatches on Kernel::kind, which validateProgram resolves:
// a kernel that names an op but was never validated is refused, not looked
// up by name again.
TEST(CpuBackend, UnresolvedKernelIsAnError) {
  auto be = createCpuBackend();
  Kernel k;
  k.op = "gelu";
  KernelCall c;
  c.kernel = &k;
  Status s = be->run(c);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("not resolved"), std::string::npos) << s.message();
}

TEST(CpuBackend, LinearBwdWeightOverwritesNotAccumulates) {
  auto be = createCpuBackend();
  Kernel k;
  k.op = "linear_bwd_weight";
  k.kind = OpKind::LinearBwdWeight;
  k.attrs["has_bias"] = true;
  TensorType x{DType::F32, {2, 3}}, dy{DType::F32, {2, 1}},
      dw{DType::F32, {1, 3}}, db{DType::F32, {1}};
  float xv[6] = {1, 2, 3, 4, 5, 6}, dyv[2] = {1, 2}, dwv[3] = {9, 9, 9},
        dbv[1] = {9};
  KernelCall c{&k, {xv, dyv}, {&x, &dy}, {dwv, dbv}, {&dw, &db}};
  ASSERT_TRUE(be->run(c).isOk());
  EXPECT_FLOAT_EQ(dwv[0], 9); // 1*1 + 2*4
  EXPECT_FLOAT_EQ(dwv[2], 15);
  EXPECT_FLOAT_EQ(dbv[0], 3);
}

/// KernelCall::addTo: dW added to what the buffer holds (the bias still
/// overwritten: the backend adds only dW, Backend::canAddTo).
TEST(CpuBackend, LinearBwdWeightAddsWhereAsked) {
  auto be = createCpuBackend();
  Kernel k;
  k.op = "linear_bwd_weight";
  k.kind = OpKind::LinearBwdWeight;
  k.attrs["has_bias"] = true;
  EXPECT_TRUE(be->canAddTo(k, 0));
  EXPECT_FALSE(be->canAddTo(k, 1));
  Kernel other = k;
  other.op = "layernorm_bwd_weight";
  other.kind = OpKind::LayerNormBwdWeight;
  EXPECT_FALSE(be->canAddTo(other, 0));
  EXPECT_TRUE(createCpuDeviceBackend()->canAddTo(k, 0));
  TensorType x{DType::F32, {2, 3}}, dy{DType::F32, {2, 1}},
      dw{DType::F32, {1, 3}}, db{DType::F32, {1}};
  float xv[6] = {1, 2, 3, 4, 5, 6}, dyv[2] = {1, 2}, dwv[3] = {9, 9, 9},
        dbv[1] = {9};
  KernelCall c{&k, {xv, dyv}, {&x, &dy}, {dwv, dbv}, {&dw, &db}};
  c.addTo = 1;
  ASSERT_TRUE(be->run(c).isOk());
  EXPECT_FLOAT_EQ(dwv[0], 18); // 9 + 1*1 + 2*4
  EXPECT_FLOAT_EQ(dwv[2], 24);
  EXPECT_FLOAT_EQ(dbv[0], 3);
}

/// Backend::timeGemms / gemmTime (the trace's gemm_us and gemm_gflop):
/// on the CPU the clock counts this thread's GEMMs while on, each product's
/// 2 M N K FLOPs exactly; off, nothing; a device backend's default says it
/// does not time them.
TEST(CpuBackend, GemmClockCountsTheProductsWhileOn) {
  auto be = createCpuBackend();
  Kernel k;
  k.op = "linear_bwd_weight";
  k.kind = OpKind::LinearBwdWeight;
  TensorType x{DType::F32, {2, 3}}, dy{DType::F32, {2, 4}},
      dw{DType::F32, {4, 3}};
  float xv[6] = {1, 2, 3, 4, 5, 6}, dyv[8] = {1, 2, 3, 4, 5, 6, 7, 8},
        dwv[12] = {};
  KernelCall c{&k, {xv, dyv}, {&x, &dy}, {dwv}, {&dw}};
  be->timeGemms(false);
  const Backend::GemmTime t0 = be->gemmTime();
  ASSERT_TRUE(be->run(c).isOk());
  Backend::GemmTime t1 = be->gemmTime();
  EXPECT_EQ(t1.flops, t0.flops); // off: not counted
  EXPECT_EQ(t1.seconds, t0.seconds);
  be->timeGemms(true);
  ASSERT_TRUE(be->run(c).isOk());
  ASSERT_TRUE(be->run(c).isOk());
  t1 = be->gemmTime();
  be->timeGemms(false);
  EXPECT_EQ(t1.flops - t0.flops, 2 * (2.0 * 4 * 3 * 2)); // dW [4, 3], K = 2
  EXPECT_GT(t1.seconds, t0.seconds);
  EXPECT_GE(t0.seconds, 0.0);
  struct Untimed final : Backend {
    const char *name() const override { return "untimed"; }
    bool hostVisible() const override { return false; }
    void *alloc(int64_t) override { return nullptr; }
    void free(void *) override {}
    void copyToHost(void *, const void *, int64_t) override {}
    void copyFromHost(void *, const void *, int64_t) override {}
    void copy(void *, const void *, int64_t) override {}
    void fillZero(void *, int64_t) override {}
    void accumulate(float *, const float *, int64_t) override {}
    void scale(float *, float, int64_t) override {}
    Status run(const KernelCall &) override { return Status::ok(); }
  } untimed;
  untimed.timeGemms(true);
  EXPECT_LT(untimed.gemmTime().seconds, 0.0);
}

namespace {
/// dW of linear_bwd_weight (x [tokens, in], dy [tokens, out]) on `be`:
/// added to `grad` (addTo) or, as the executor did before, into a cleared
/// buffer that is then accumulated into `grad`.
void linearDW(Backend &be, int64_t tokens, int64_t in, int64_t out,
              const std::vector<float> &x, const std::vector<float> &dy,
              std::vector<float> &grad, bool addTo) {
  Kernel k;
  k.op = "linear_bwd_weight";
  k.kind = OpKind::LinearBwdWeight;
  TensorType xt{DType::F32, {tokens, in}}, dyt{DType::F32, {tokens, out}},
      dwt{DType::F32, {out, in}};
  std::vector<float> tmp(grad.size(), 7.0f);
  KernelCall c{&k,
               {x.data(), dy.data()},
               {&xt, &dyt},
               {addTo ? grad.data() : tmp.data()},
               {&dwt}};
  c.addTo = addTo ? 1 : 0;
  ASSERT_TRUE(be.run(c).isOk());
  if (!addTo)
    be.accumulate(grad.data(), tmp.data(), int64_t(grad.size()));
}
} // namespace

/// Straight into the gradient (the executor's planDirectGrads) against the
/// cleared buffer + accumulate it replaces: the same bits while the GEMM's
/// K (the microbatch's tokens) fits one OpenBLAS K block (the peer
/// benchmark's 256 tokens; 384 on this OpenBLAS), else within a few ulps
/// of the gradient's size (the blocks' partial sums add to the old value
/// one after another).
TEST(CpuBackend, LinearBwdWeightAddToEqualsAccumulate) {
  auto be = createCpuBackend();
  for (int64_t tokens : {1, 9, 256, 1024}) {
    const int64_t in = 96, out = 80;
    std::vector<float> x(size_t(tokens * in)), dy(size_t(tokens * out)),
        g0(size_t(out * in));
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float((i * 37) % 101) / 50.0f - 1.0f;
    for (size_t i = 0; i < dy.size(); ++i)
      dy[i] = float((i * 53) % 97) / 48.0f - 1.0f;
    for (size_t i = 0; i < g0.size(); ++i)
      g0[i] = float((i * 29) % 89) / 8.0f - 5.0f;
    // Two microbatches on a cleared gradient, then one on a filled one.
    for (bool fromZero : {true, false}) {
      std::vector<float> direct = fromZero ? std::vector<float>(g0.size(), 0.f)
                                           : g0;
      std::vector<float> plain = direct;
      for (int mb = 0; mb < 2; ++mb) {
        linearDW(*be, tokens, in, out, x, dy, direct, true);
        linearDW(*be, tokens, in, out, x, dy, plain, false);
      }
      for (size_t i = 0; i < plain.size(); ++i) {
        if (tokens <= 256)
          ASSERT_EQ(0, std::memcmp(&direct[i], &plain[i], 4))
              << tokens << " [" << i << "]: " << direct[i] << " vs "
              << plain[i];
        else
          ASSERT_NEAR(direct[i], plain[i], 1e-5 * float(tokens))
              << tokens << " [" << i << "]";
      }
    }
  }
}

TEST(Weights, CompareReportsBitwise) {
  NamedTensors a{{"w", {1.0f, 2.0f}}}, b{{"w", {1.0f, 2.0f + 1e-6f}}};
  std::string r;
  bool bit = false;
  EXPECT_TRUE(compareWeights(a, a, 0, 0, r, bit));
  EXPECT_TRUE(bit);
  EXPECT_FALSE(compareWeights(a, b, 0, 0, r, bit));
  EXPECT_TRUE(compareWeights(a, b, 1e-5, 0, r, bit));
  EXPECT_FALSE(bit);
}

TEST(ParamInit, CopiesInitialiseIdentically) {
  Param p0{"l0.w", {DType::F32, {4}}, "normal:0.5", 0, 0};
  Param p1 = p0;
  p1.name = "l0.w@copy1";
  float a[4], b[4];
  ASSERT_TRUE(initParamValues(p0, 7, a).isOk());
  ASSERT_TRUE(initParamValues(p1, 7, b).isOk());
  EXPECT_EQ(0, std::memcmp(a, b, sizeof a));
  p0.init = "bogus";
  EXPECT_FALSE(initParamValues(p0, 7, a).isOk());
}

namespace {
/// One moe forward (8 tokens, hidden 4, 4 experts of ffn 3, top-2, sigmoid
/// scores) on `be` with an optional bias and load; the output.
std::vector<float> runMoE(Backend &be, const float *bias, float *load,
                          Status *status = nullptr, bool namesBias = true) {
  Kernel k;
  k.op = "moe";
  k.kind = OpKind::MoE;
  k.attrs["top_k"] = int64_t(2);
  k.attrs["scoring"] = std::string("sigmoid");
  if (namesBias)
    k.attrs["bias"] = std::string("layers.0.mlp.gate.e_score_correction_bias");
  TensorType x{DType::F32, {8, 4}}, r{DType::F32, {4, 4}},
      w1{DType::F32, {4, 3, 4}}, w2{DType::F32, {4, 4, 3}};
  std::vector<std::vector<float>> host;
  for (const TensorType *t : {&x, &r, &w1, &w2}) {
    std::vector<float> v(size_t(t->numElements()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = float((i * 7 + host.size() * 3) % 11) / 11.0f - 0.45f;
    host.push_back(std::move(v));
  }
  std::vector<void *> bufs;
  KernelCall c;
  c.kernel = &k;
  for (size_t i = 0; i < host.size(); ++i) {
    void *p = be.alloc(int64_t(host[i].size()) * 4);
    be.copyFromHost(p, host[i].data(), int64_t(host[i].size()) * 4);
    bufs.push_back(p);
    c.in.push_back(p);
  }
  c.inTypes = {&x, &r, &w1, &w2};
  void *y = be.alloc(x.numBytes());
  bufs.push_back(y);
  c.out = {y};
  c.outTypes = {&x};
  c.moeBias = bias;
  c.moeLoad = load;
  Status s = be.run(c);
  if (status)
    *status = s;
  std::vector<float> out(size_t(x.numElements()));
  be.copyToHost(out.data(), y, x.numBytes());
  for (void *p : bufs)
    be.free(p);
  return out;
}
} // namespace

/// nn.moe's load-balancing bias: it changes the choice (so the output), the
/// load counts every top-k choice, and the cpu-device backend (opaque
/// buffers, host bias and load) gives the same bits.
TEST(CpuBackend, MoELoadBalancingBias) {
  auto cpu = createCpuBackend(), dev = createCpuDeviceBackend();
  const float zero[4] = {0, 0, 0, 0}, bias[4] = {0.5f, -0.5f, 0.25f, -0.25f};
  float load0[4] = {0, 0, 0, 0}, load1[4] = {0, 0, 0, 0},
        load2[4] = {0, 0, 0, 0};
  std::vector<float> plain = runMoE(*cpu, zero, load0);
  std::vector<float> biased = runMoE(*cpu, bias, load1);
  std::vector<float> onDev = runMoE(*dev, bias, load2);
  EXPECT_NE(plain, biased);
  EXPECT_EQ(biased, onDev);
  float sum = 0;
  for (int e = 0; e < 4; ++e) {
    sum += load1[e];
    EXPECT_EQ(load1[e], load2[e]) << e;
    EXPECT_EQ(load1[e], std::floor(load1[e])) << e;
  }
  EXPECT_EQ(sum, 16.0f); // 8 tokens x top-2
  // The bias pulls towards experts 0 and 2.
  EXPECT_GT(load1[0] + load1[2], load0[0] + load0[2]);
  // A kernel naming a bias needs one, and one without must not get one.
  Status s = Status::ok();
  runMoE(*cpu, nullptr, nullptr, &s);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("names the bias "
                             "'layers.0.mlp.gate.e_score_correction_bias' but "
                             "the call has none"),
            std::string::npos)
      << s.message();
  runMoE(*cpu, bias, nullptr, &s, /*namesBias=*/false);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("was given a bias but names none"),
            std::string::npos)
      << s.message();
}
