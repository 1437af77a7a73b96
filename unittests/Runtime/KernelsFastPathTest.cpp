//===- KernelsFastPathTest.cpp - The CPU kernels' shortcuts keep their bits
//===//
//
// The shortcuts the CPU kernels take for speed (benchmarks/README.md, "peer"):
// the norms' lane-ordered row sums, the statistics-only recomputation of the
// norm gradient ops, attention without its output for B, the bias-first
// linear forward and the cloned GELU loops. Each must give exactly the bits
// of the plain computation it replaces.
//
//===----------------------------------------------------------------------===//

#include "cpu/ElementwiseMath.h"
#include "cpu/Kernels.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace pipeforge::rt::cpu;
namespace pmath = pipeforge::rt::math;
using VecF = std::vector<float>;

namespace {

const bool kOneThread = (openblas_set_num_threads(1), true);

VecF randomVec(size_t n, unsigned seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  VecF v(n);
  for (float &x : v)
    x = d(gen);
  return v;
}

bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

void expectSameBits(const VecF &got, const VecF &want, const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(sameBits(got[i], want[i]))
        << what << " [" << i << "]: " << got[i] << " vs " << want[i];
}

TEST(NormLaneSum, FourInterleavedLanesCombinedPairwise) {
  (void)kOneThread;
  for (Index n = 0; n < 13; ++n) {
    std::vector<double> x(static_cast<size_t>(n));
    for (Index i = 0; i < n; ++i)
      x[size_t(i)] = 1.0 / double(3 + 7 * i) * (i % 2 ? -1e8 : 1.0);
    double lane[4] = {0, 0, 0, 0};
    for (Index i = 0; i < n; ++i)
      lane[i % 4] += x[size_t(i)];
    double want = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    double got = normLaneSum(n, [&](Index i) { return x[size_t(i)]; });
    EXPECT_EQ(got, want) << n;
  }
}

TEST(NormStats, EqualTheForwardsStatistics) {
  for (Index hidden : {1, 3, 8, 255, 256}) {
    NormShape s{5, hidden, 1e-5};
    VecF x = randomVec(size_t(s.tokens * hidden), 11, 1.f, 5.f);
    VecF gamma = randomVec(size_t(hidden), 12, 0.5f, 1.5f);
    VecF beta = randomVec(size_t(hidden), 13);
    VecF y(x.size());
    for (bool layer : {true, false}) {
      NormSaved<float> f, st;
      if (layer)
        layerNormF(s, NormParams<float>{gamma.data(), beta.data()}, x.data(),
                   y.data(), f);
      else
        rmsNormF(s, NormParams<float>{gamma.data(), nullptr}, x.data(),
                 y.data(), f);
      normStats(s, layer, x.data(), gamma.data(), st);
      expectSameBits(st.rstd, f.rstd, "rstd");
      expectSameBits(st.mean, f.mean, "mean");
      EXPECT_EQ(st.x, x.data());
      EXPECT_EQ(st.gamma, gamma.data());
    }
  }
}

TEST(AttentionForB, NoOutputSameProbabilities) {
  for (double rate : {0.0, 0.25}) {
    AttentionShape s;
    s.batch = 2;
    s.seq = 7;
    s.heads = 4;
    s.kvHeads = 2;
    s.headDim = 8;
    s.dropout = rate;
    s.dropoutKey = 99;
    const Index T = s.batch * s.seq;
    VecF q = randomVec(size_t(T * s.heads * s.headDim), 21);
    VecF k = randomVec(size_t(T * s.kvHeads * s.headDim), 22);
    VecF v = randomVec(size_t(T * s.kvHeads * s.headDim), 23);
    VecF out(q.size());
    AttentionSaved<float> full, forB;
    attentionF(s, q.data(), k.data(), v.data(), out.data(), full);
    attentionF(s, q.data(), k.data(), v.data(), static_cast<float *>(nullptr),
               forB);
    expectSameBits(forB.probs, full.probs, "probs");
    expectSameBits(forB.dropped, full.dropped, "dropped");
  }
}

TEST(LinearBiasFirst, SameBitsAsGemmThenBias) {
  // One K block of the BLAS (K = 64): bias + x W^T rounds as x W^T + bias.
  LinearShape s;
  s.tokens = 9;
  s.in = 64;
  s.out = 24;
  s.hasBias = true;
  VecF x = randomVec(size_t(s.tokens * s.in), 31);
  VecF w = randomVec(size_t(s.out * s.in), 32);
  VecF b = randomVec(size_t(s.out), 33);
  VecF y(size_t(s.tokens * s.out)), want(y.size());
  LinearSaved<float> sv;
  linearF(s, LinearParams<float>{w.data(), b.data()}, x.data(), y.data(), sv);
  LinearShape nb = s;
  nb.hasBias = false;
  linearF(nb, LinearParams<float>{w.data(), nullptr}, x.data(), want.data(),
          sv);
  for (Index t = 0; t < s.tokens; ++t)
    for (Index o = 0; o < s.out; ++o)
      want[size_t(t * s.out + o)] += b[size_t(o)];
  expectSameBits(y, want, "linear with bias");
}

TEST(GeluLoops, EqualTheScalarFunctions) {
  // Whatever clone the CPU picks (AVX2 or SSE), each element is the scalar
  // function's value; odd lengths exercise the loops' remainders.
  for (Index n : {1, 7, 33, 1000}) {
    VecF x = randomVec(size_t(n), 41, -9.f, 9.f);
    VecF dy = randomVec(size_t(n), 42);
    VecF y(x.size()), dx(x.size());
    ActivationSaved<float> sv;
    geluF(n, x.data(), y.data(), sv);
    geluB(n, sv, dy.data(), dx.data());
    for (Index i = 0; i < n; ++i) {
      ASSERT_TRUE(sameBits(y[size_t(i)], pmath::gelu(x[size_t(i)]))) << i;
      ASSERT_TRUE(sameBits(dx[size_t(i)],
                           dy[size_t(i)] * pmath::geluGrad(x[size_t(i)])))
          << i;
    }
  }
}

} // namespace
