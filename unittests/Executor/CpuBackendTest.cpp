//===- CpuBackendTest.cpp - CPU backend dispatch --------------------------===//

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/Executor.h"

#include <gtest/gtest.h>

#include <algorithm>
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

TEST(CpuBackend, LinearBwdWeightOverwritesNotAccumulates) {
  auto be = createCpuBackend();
  Kernel k;
  k.op = "linear_bwd_weight";
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
