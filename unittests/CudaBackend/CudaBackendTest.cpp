//===- CudaBackendTest.cpp - Every CUDA kernel against the CPU reference --===//
//
// Each nn op (forward and gradient ops, as a pipeforge program calls them)
// runs on the CPU backend and on the CUDA backend through the same Backend
// interface with the same random inputs; the results must agree within
// |gpu - cpu| <= atol + rtol * max|cpu| per tensor (fp32: rtol 1e-4,
// bf16 GEMMs: rtol 2e-2). Index errors must give the CPU's message, and the
// CUDA AdamW kernel must match the CPU optimizer.
//
// Without a GPU every test is skipped (GTEST_SKIP), never failed.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/CudaBackend.h"
#include "pipeforge/rt/Optimizer.h"
#include "pipeforge/rt/ThreadTransport.h"

#include "cuda/GemmCtx.h"
#include "cuda/RowKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

using namespace pipeforge::rt;

namespace {

bool haveGpu() {
  static const int n = cudaDeviceCount();
  return n > 0;
}

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    if (!haveGpu())                                                            \
      GTEST_SKIP() << "no CUDA device";                                        \
  } while (0)

TensorType f32(std::vector<int64_t> s) { return {DType::F32, std::move(s)}; }
TensorType i32(std::vector<int64_t> s) { return {DType::I32, std::move(s)}; }

/// One kernel call: operand types and host values (ints stored as floats'
/// bit patterns are avoided: int operands keep their own vector).
struct Case {
  Kernel k;
  std::vector<TensorType> in, out;
  std::vector<std::vector<float>> fin;   ///< float operands (empty for ints)
  std::vector<std::vector<int32_t>> iin; ///< int operands (empty for floats)
  std::vector<bool> absentOut;           ///< results the call leaves null
  /// A moe kernel's load-balancing bias (KernelCall::moeBias; empty: none)
  /// and whether the call counts the load (KernelCall::moeLoad, returned as
  /// one more result).
  std::vector<float> bias;
  bool load = false;
};

Case makeCase(const std::string &op, std::vector<TensorType> in,
              std::vector<TensorType> out, uint32_t seed, int32_t intLimit) {
  Case c;
  c.k.op = op;
  c.k.kind = lookupOpKind(op); // what validateProgram resolves
  c.in = std::move(in);
  c.out = std::move(out);
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  for (const TensorType &t : c.in) {
    std::vector<float> f;
    std::vector<int32_t> i;
    if (t.dtype == DType::I32)
      for (int64_t e = 0; e < t.numElements(); ++e)
        i.push_back(int32_t(g() % uint32_t(intLimit)));
    else
      for (int64_t e = 0; e < t.numElements(); ++e)
        f.push_back(nd(g));
    c.fin.push_back(std::move(f));
    c.iin.push_back(std::move(i));
  }
  c.absentOut.assign(c.out.size(), false);
  return c;
}

/// Runs `c` on `be`; the results as host vectors, or the error.
Expected<std::vector<std::vector<float>>> runOn(Backend &be, const Case &c) {
  KernelCall call;
  call.kernel = &c.k;
  std::vector<void *> bufs;
  for (size_t i = 0; i < c.in.size(); ++i) {
    int64_t bytes = std::max<int64_t>(c.in[i].numBytes(), 4);
    void *p = be.alloc(bytes);
    const void *src = c.in[i].dtype == DType::I32
                          ? static_cast<const void *>(c.iin[i].data())
                          : static_cast<const void *>(c.fin[i].data());
    be.copyFromHost(p, src, c.in[i].numBytes());
    bufs.push_back(p);
    call.in.push_back(p);
    call.inTypes.push_back(&c.in[i]);
  }
  for (size_t i = 0; i < c.out.size(); ++i) {
    void *p = c.absentOut[i]
                  ? nullptr
                  : be.alloc(std::max<int64_t>(c.out[i].numBytes(), 4));
    if (p) {
      // Garbage in the outputs: every kernel must overwrite them.
      std::vector<float> junk(size_t(c.out[i].numElements()), 7.5f);
      be.copyFromHost(p, junk.data(), c.out[i].numBytes());
      bufs.push_back(p);
    }
    call.out.push_back(p);
    call.outTypes.push_back(&c.out[i]);
  }
  std::vector<float> load(c.bias.size(), 0.0f);
  if (!c.bias.empty())
    call.moeBias = c.bias.data();
  if (c.load)
    call.moeLoad = load.data();
  Status s = be.run(call);
  if (s)
    s = be.takeAsyncError();
  std::vector<std::vector<float>> r;
  if (s)
    for (size_t i = 0; i < c.out.size(); ++i) {
      std::vector<float> h(size_t(c.out[i].numElements()));
      if (call.out[i])
        be.copyToHost(h.data(), call.out[i], c.out[i].numBytes());
      r.push_back(std::move(h));
    }
  if (s && c.load)
    r.push_back(load);
  for (void *p : bufs)
    be.free(p);
  if (!s)
    return s;
  return r;
}

std::unique_ptr<Backend> gpu(GemmPrecision p = GemmPrecision::FP32) {
  CudaBackendOptions o;
  o.precision = p;
  auto b = createCudaBackend(o);
  EXPECT_TRUE(b.isOk()) << b.message();
  return b ? b.take() : nullptr;
}

/// Runs on both backends and compares every result.
void expectMatch(const Case &c, double rtol = 1e-4, double atol = 1e-6,
                 GemmPrecision p = GemmPrecision::FP32) {
  auto cpu = createCpuBackend();
  auto cu = gpu(p);
  ASSERT_TRUE(cu);
  auto want = runOn(*cpu, c);
  ASSERT_TRUE(want.isOk()) << want.message();
  auto got = runOn(*cu, c);
  ASSERT_TRUE(got.isOk()) << c.k.op << ": " << got.message();
  for (size_t i = 0; i < want->size(); ++i) {
    if (i < c.absentOut.size() && c.absentOut[i])
      continue;
    const auto &w = (*want)[i], &g = (*got)[i];
    double scale = 0;
    for (float v : w)
      scale = std::max(scale, double(std::fabs(v)));
    double tol = atol + rtol * scale;
    size_t bad = 0;
    double worst = 0;
    for (size_t e = 0; e < w.size(); ++e) {
      double d = std::fabs(double(w[e]) - double(g[e]));
      if (!(d <= tol))
        ++bad;
      worst = std::max(worst, d);
    }
    EXPECT_EQ(bad, 0u) << c.k.op << " result #" << i << ": " << bad << " of "
                       << w.size() << " elements off, worst |diff| " << worst
                       << " > " << tol;
  }
}

// Shapes: batch 2, seq 8, hidden 16 (the tiny GPT's proportions).
const std::vector<int64_t> kX = {2, 8, 16};

TEST(CudaBackend, KnowsTheCpuBackendsOps) {
  // No GPU needed: the op table is static.
  EXPECT_EQ(cudaBackendOps(), cpuBackendOps());
}

TEST(CudaBackend, NoDeviceIsAClearError) {
  if (haveGpu())
    GTEST_SKIP() << "a GPU is present";
  auto b = createCudaBackend({});
  ASSERT_FALSE(b.isOk());
  EXPECT_NE(b.message().find("no CUDA device"), std::string::npos)
      << b.message();
}

TEST(CudaBackend, Linear) {
  REQUIRE_GPU();
  expectMatch(makeCase("linear", {f32(kX), f32({24, 16}), f32({24})},
                       {f32({2, 8, 24})}, 1, 0));
  expectMatch(
      makeCase("linear", {f32(kX), f32({24, 16})}, {f32({2, 8, 24})}, 2, 0));
  expectMatch(makeCase("linear_bwd_input", {f32({2, 8, 24}), f32({24, 16})},
                       {f32(kX)}, 3, 0));
  expectMatch(makeCase("linear_bwd_weight", {f32(kX), f32({2, 8, 24})},
                       {f32({24, 16}), f32({24})}, 4, 0));
}

TEST(CudaBackend, LinearBf16) {
  REQUIRE_GPU();
  // bf16 inputs (8 significant bits), fp32 accumulation.
  expectMatch(makeCase("linear", {f32(kX), f32({24, 16}), f32({24})},
                       {f32({2, 8, 24})}, 5, 0),
              2e-2, 1e-3, GemmPrecision::BF16);
  expectMatch(makeCase("linear_bwd_weight", {f32(kX), f32({2, 8, 24})},
                       {f32({24, 16}), f32({24})}, 6, 0),
              2e-2, 1e-3, GemmPrecision::BF16);
}

TEST(CudaBackend, Norms) {
  REQUIRE_GPU();
  for (const char *op : {"layernorm", "rmsnorm"}) {
    bool layer = std::string(op) == "layernorm";
    std::vector<TensorType> in = {f32(kX), f32({16})};
    if (layer)
      in.push_back(f32({16}));
    Case f = makeCase(op, in, {f32(kX)}, 7, 0);
    f.k.attrs["epsilon"] = 1e-5;
    expectMatch(f);
    Case b = makeCase(std::string(op) + "_bwd_input",
                      {f32(kX), f32({16}), f32(kX)}, {f32(kX)}, 8, 0);
    expectMatch(b);
    std::vector<TensorType> out = {f32({16})};
    if (layer)
      out.push_back(f32({16}));
    expectMatch(makeCase(std::string(op) + "_bwd_weight", {f32(kX), f32(kX)},
                         out, 9, 0));
  }
}

TEST(CudaBackend, Elementwise) {
  REQUIRE_GPU();
  for (const char *op : {"gelu", "silu"}) {
    expectMatch(makeCase(op, {f32(kX)}, {f32(kX)}, 10, 0));
    expectMatch(makeCase(std::string(op) + "_bwd", {f32(kX), f32(kX)},
                         {f32(kX)}, 11, 0));
  }
  expectMatch(makeCase("add", {f32(kX), f32(kX)}, {f32(kX)}, 12, 0), 0, 0);
  expectMatch(makeCase("mul", {f32(kX), f32(kX)}, {f32(kX)}, 13, 0), 0, 0);
}

TEST(CudaBackend, Embedding) {
  REQUIRE_GPU();
  expectMatch(makeCase("embedding", {i32({2, 8}), f32({32, 16}), f32({8, 16})},
                       {f32(kX)}, 14, 32),
              0, 0);
  Case w = makeCase("embedding_bwd_weight", {i32({2, 8}), f32(kX)},
                    {f32({32, 16}), f32({8, 16})}, 15, 32);
  w.k.attrs["vocab"] = int64_t(32);
  expectMatch(w, 1e-6, 1e-7);
}

TEST(CudaBackend, BadTokenGivesTheCpuMessage) {
  REQUIRE_GPU();
  Case c =
      makeCase("embedding", {i32({2, 8}), f32({32, 16})}, {f32(kX)}, 16, 32);
  c.iin[0][5] = 99;
  auto cpu = createCpuBackend();
  auto cu = gpu();
  ASSERT_TRUE(cu);
  auto want = runOn(*cpu, c), got = runOn(*cu, c);
  ASSERT_FALSE(want.isOk());
  ASSERT_FALSE(got.isOk());
  EXPECT_EQ(got.message(), want.message());
  // The backend is usable again afterwards.
  c.iin[0][5] = 3;
  EXPECT_TRUE(runOn(*cu, c).isOk());
}

TEST(CudaBackend, SeveralBadTokensNameTheFirst) {
  REQUIRE_GPU();
  // 2 x 512 tokens: many blocks report; the message names the lowest index.
  Case c = makeCase("embedding", {i32({2, 512}), f32({32, 16})},
                    {f32({2, 512, 16})}, 23, 32);
  for (int i : {900, 41, 300, 1000})
    c.iin[0][size_t(i)] = 32 + i;
  auto cpu = createCpuBackend();
  auto cu = gpu();
  ASSERT_TRUE(cu);
  auto want = runOn(*cpu, c), got = runOn(*cu, c);
  ASSERT_FALSE(want.isOk());
  ASSERT_FALSE(got.isOk());
  EXPECT_EQ(got.message(), want.message());
}

TEST(CudaBackend, EmptyProducts) {
  REQUIRE_GPU();
  // k = 0: zero tokens into the weight gradient, zero inputs into linear.
  expectMatch(makeCase("linear_bwd_weight", {f32({0, 16}), f32({0, 24})},
                       {f32({24, 16}), f32({24})}, 24, 0),
              0, 0);
  expectMatch(makeCase("linear", {f32({4, 0}), f32({24, 0}), f32({24})},
                       {f32({4, 24})}, 25, 0),
              0, 0);
}

/// Two ranks on one GPU through the --local-ranks transport: the receive is
/// a copy on the receiver's communication stream, ordered by events; the
/// sender polls its send (test()) and keeps launching kernels meanwhile.
TEST(CudaBackend, ThreadTransportMovesDeviceData) {
  REQUIRE_GPU();
  auto trs = createThreadTransports(2);
  const int64_t n = 1 << 20;
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    host[size_t(i)] = float(i % 1000) * 0.5f;
  std::string err[2];
  std::vector<float> got(static_cast<size_t>(n));
  auto rank = [&](int r) {
    Transport &t = *trs[size_t(r)];
    auto be = gpu();
    if (!be) {
      err[r] = "no backend";
      return;
    }
    if (Status s = t.setupGrid(2, 1, 1); !s) {
      err[r] = s.message();
      return;
    }
    t.attachBackend(*be);
    void *buf = be->alloc(n * 4);
    Case add = makeCase("add", {f32({n}), f32({n})}, {f32({n})}, 26, 0);
    if (r == 0) {
      be->copyFromHost(buf, host.data(), n * 4);
      auto req = t.isend(1, 7, static_cast<float *>(buf), n);
      if (!req) {
        err[r] = req.message();
        return;
      }
      while (!t.test(*req))
        if (auto k = runOn(*be, add); !k) { // launches while polling
          err[r] = "a kernel after test(): " + k.message();
          return;
        }
      if (auto k = runOn(*be, add); !k)
        err[r] = "a kernel after the send: " + k.message();
    } else {
      auto req = t.irecv(0, 7, static_cast<float *>(buf), n);
      if (!req) {
        err[r] = req.message();
        return;
      }
      if (Status s = t.wait(*req); !s)
        err[r] = s.message();
      be->copyToHost(got.data(), buf, n * 4);
    }
    if (Status s = be->takeAsyncError(); !s && err[r].empty())
      err[r] = s.message();
    be->free(buf);
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
  EXPECT_EQ(0, std::memcmp(got.data(), host.data(), size_t(n) * 4));
}

TEST(CudaBackend, Attention) {
  REQUIRE_GPU();
  for (bool rotary : {false, true}) {
    Case f = makeCase("attention",
                      {f32({2, 8, 32}), f32({2, 8, 16}), f32({2, 8, 16})},
                      {f32({2, 8, 32})}, 17, 0);
    f.k.attrs["num_heads"] = int64_t(4);
    f.k.attrs["num_kv_heads"] = int64_t(2);
    if (rotary)
      f.k.attrs["rotary"] = true;
    expectMatch(f);
    Case b = makeCase(
        "attention_bwd",
        {f32({2, 8, 32}), f32({2, 8, 16}), f32({2, 8, 16}), f32({2, 8, 32})},
        {f32({2, 8, 32}), f32({2, 8, 16}), f32({2, 8, 16})}, 18, 0);
    b.k.attrs = f.k.attrs;
    expectMatch(b);
  }
}

/// MLA's attention core (q/k heads of 24 rotating their last 8, value heads
/// of 16) and nn.concat_heads with a shared head, and per head.
TEST(CudaBackend, MultiHeadLatentAttention) {
  REQUIRE_GPU();
  Case f = makeCase("attention",
                    {f32({2, 40, 96}), f32({2, 40, 96}), f32({2, 40, 64})},
                    {f32({2, 40, 64})}, 23, 0);
  f.k.attrs["num_heads"] = int64_t(4);
  f.k.attrs["num_kv_heads"] = int64_t(4);
  f.k.attrs["rotary"] = true;
  f.k.attrs["rope_dim"] = int64_t(8);
  expectMatch(f);
  Case b = makeCase(
      "attention_bwd",
      {f32({2, 40, 96}), f32({2, 40, 96}), f32({2, 40, 64}), f32({2, 40, 64})},
      {f32({2, 40, 96}), f32({2, 40, 96}), f32({2, 40, 64})}, 24, 0);
  b.k.attrs = f.k.attrs;
  expectMatch(b);
  for (bool broadcast : {false, true}) {
    Case c = makeCase("concat_heads",
                      {f32({2, 40, 64}), f32({2, 40, broadcast ? 8 : 32})},
                      {f32({2, 40, broadcast ? 96 : 96})}, 25, 0);
    c.k.attrs["num_heads"] = int64_t(4);
    if (broadcast)
      c.k.attrs["broadcast"] = true;
    expectMatch(c, 0, 0); // copies: exact
    Case g = makeCase("concat_heads_bwd", {f32({2, 40, 96})},
                      {f32({2, 40, 64}), f32({2, 40, broadcast ? 8 : 32})},
                      26, 0);
    g.k.attrs = c.k.attrs;
    g.k.attrs["lhs_head_dim"] = int64_t(16);
    expectMatch(g, 0, 0); // the same order of additions: exact
  }
}

TEST(CudaBackend, MoE) {
  REQUIRE_GPU();
  for (bool gated : {false, true}) {
    std::vector<TensorType> in = {f32(kX), f32({4, 16}), f32({4, 32, 16}),
                                  f32({4, 16, 32})};
    if (gated)
      in.push_back(f32({4, 32, 16}));
    Case f = makeCase("moe", in, {f32(kX)}, 19, 0);
    f.k.attrs["top_k"] = int64_t(2);
    f.k.attrs["capacity_factor"] = 1.0;
    f.k.attrs["activation"] = std::string(gated ? "silu" : "gelu");
    expectMatch(f);
    std::vector<TensorType> bin = in;
    bin.push_back(f32(kX));
    Case b = makeCase("moe_bwd_input", bin, {f32(kX)}, 19, 0);
    b.k.attrs = f.k.attrs;
    expectMatch(b);
    std::vector<TensorType> wout = {f32({4, 16}), f32({4, 32, 16}),
                                    f32({4, 16, 32})};
    if (gated)
      wout.push_back(f32({4, 32, 16}));
    Case w = makeCase("moe_bwd_weight", bin, wout, 19, 0);
    w.k.attrs = f.k.attrs;
    expectMatch(w);
  }
}

/// DeepSeek routing on the device (cpu/MoERouting.h in the CUDA kernels):
/// sigmoid scores, 4 groups of 2 with the best 2, scaled gates; softmax
/// groups with raw weights (DeepSeek-V2).
TEST(CudaBackend, MoEDeepSeekRouting) {
  REQUIRE_GPU();
  for (bool sigmoid : {true, false}) {
    std::vector<TensorType> in = {f32(kX), f32({8, 16}), f32({8, 32, 16}),
                                  f32({8, 16, 32}), f32({8, 32, 16})};
    Case f = makeCase("moe", in, {f32(kX)}, 23, 0);
    f.k.attrs["top_k"] = int64_t(3);
    f.k.attrs["activation"] = std::string("silu");
    f.k.attrs["scoring"] = std::string(sigmoid ? "sigmoid" : "softmax");
    f.k.attrs["norm_topk_prob"] = sigmoid;
    f.k.attrs["routed_scaling_factor"] = sigmoid ? 2.5 : 16.0;
    f.k.attrs["n_group"] = int64_t(4);
    f.k.attrs["topk_group"] = int64_t(2);
    expectMatch(f);
    std::vector<TensorType> bin = in;
    bin.push_back(f32(kX));
    Case b = makeCase("moe_bwd_input", bin, {f32(kX)}, 23, 0);
    b.k.attrs = f.k.attrs;
    expectMatch(b);
    Case w = makeCase("moe_bwd_weight", bin,
                      {f32({8, 16}), f32({8, 32, 16}), f32({8, 16, 32}),
                       f32({8, 32, 16})},
                      23, 0);
    w.k.attrs = f.k.attrs;
    expectMatch(w);
  }
}

/// DeepSeek-V3's load-balancing bias (noaux_tc): the choice on the biased
/// scores, the forward's load (exact counts) as the CPU's.
TEST(CudaBackend, MoELoadBalancingBias) {
  REQUIRE_GPU();
  std::vector<TensorType> in = {f32(kX), f32({8, 16}), f32({8, 32, 16}),
                                f32({8, 16, 32}), f32({8, 32, 16})};
  Case f = makeCase("moe", in, {f32(kX)}, 29, 0);
  f.k.attrs["top_k"] = int64_t(2);
  f.k.attrs["activation"] = std::string("silu");
  f.k.attrs["scoring"] = std::string("sigmoid");
  f.k.attrs["n_group"] = int64_t(4);
  f.k.attrs["topk_group"] = int64_t(2);
  f.k.attrs["bias"] = std::string("b");
  f.bias = {0.3f, -0.2f, 0.1f, 0.0f, -0.4f, 0.25f, 0.05f, -0.1f};
  f.load = true;
  expectMatch(f, 1e-4, 1e-6);
  std::vector<TensorType> bin = in;
  bin.push_back(f32(kX));
  Case b = makeCase("moe_bwd_input", bin, {f32(kX)}, 29, 0);
  b.k.attrs = f.k.attrs;
  b.bias = f.bias;
  expectMatch(b);
  Case w = makeCase(
      "moe_bwd_weight", bin,
      {f32({8, 16}), f32({8, 32, 16}), f32({8, 16, 32}), f32({8, 32, 16})}, 29,
      0);
  w.k.attrs = f.k.attrs;
  w.bias = f.bias;
  expectMatch(w);
}

TEST(CudaBackend, CrossEntropy) {
  REQUIRE_GPU();
  expectMatch(makeCase("cross_entropy", {f32({2, 8, 32}), i32({2, 8})},
                       {f32({})}, 20, 32),
              1e-6, 1e-7);
  expectMatch(makeCase("cross_entropy_bwd",
                       {f32({2, 8, 32}), i32({2, 8}), f32({})},
                       {f32({2, 8, 32})}, 21, 32),
              1e-5, 1e-8);
}

TEST(CudaBackend, AdamWKernelMatchesTheCpuOptimizer) {
  REQUIRE_GPU();
  const size_t n = 1000;
  std::mt19937 g(22);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> theta(n), grad(n);
  for (size_t i = 0; i < n; ++i)
    theta[i] = nd(g), grad[i] = nd(g);
  AdamWConfig cfg;
  cfg.lr = 1e-2;
  cfg.weightDecay = 0.1;
  std::vector<float> cpuTheta = theta, cpuGrad = grad;
  AdamWT<float> opt(cfg);
  ASSERT_TRUE(opt.addParam("p", cpuTheta.data(), cpuGrad.data(), n).isOk());

  auto be = gpu();
  ASSERT_TRUE(be);
  cuda::GemmCtx ctx;
  ctx.stream = static_cast<cudaStream_t>(be->computeStream());
  float *dTheta = static_cast<float *>(be->alloc(n * 4));
  float *dM = static_cast<float *>(be->alloc(n * 4));
  float *dV = static_cast<float *>(be->alloc(n * 4));
  float *dGrad = static_cast<float *>(be->alloc(n * 4));
  be->copyFromHost(dTheta, theta.data(), n * 4);
  for (int t = 1; t <= 3; ++t) {
    opt.step(opt.localGradInfo());
    be->copyFromHost(dGrad, grad.data(), n * 4);
    cuda::AdamWCoeffs c = cuda::adamwCoeffs(cfg.beta1, cfg.beta2, cfg.eps,
                                            cfg.weightDecay, t, cfg.lr, 1.0);
    ASSERT_TRUE(cuda::adamwStep(ctx, c, n, dTheta, dM, dV, dGrad).isOk());
  }
  std::vector<float> got(n);
  be->copyToHost(got.data(), dTheta, n * 4);
  for (size_t i = 0; i < n; ++i)
    EXPECT_NEAR(got[i], cpuTheta[i], 1e-6f * (1 + std::fabs(cpuTheta[i]))) << i;
  for (float *p : {dTheta, dM, dV, dGrad})
    be->free(p);
}

} // namespace
