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

#include <cmath>
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

/// The norms' statistics and input gradient run several rows at once with
/// vector lanes (KernelsNorm.cpp); each row must keep the bits of the
/// one-row loop over normLaneSum (written out here), for any row count
/// and any hidden size (the 4-row and 2-row blocks, the rows left over,
/// the tail of a row that is not a multiple of the lanes).
TEST(NormRows, BlocksKeepTheOneRowBits) {
  for (Index tokens : {1, 2, 3, 5, 7})
    for (Index hidden : {1, 3, 4, 6, 9, 64, 255, 256, 257}) {
      NormShape s{tokens, hidden, 1e-5};
      const Index H = hidden;
      VecF x = randomVec(size_t(tokens * H), 31, -2.f, 3.f);
      VecF gamma = randomVec(size_t(H), 32, 0.5f, 1.5f);
      VecF dy = randomVec(size_t(tokens * H), 33);
      for (bool layer : {true, false}) {
        NormSaved<float> st;
        normStats(s, layer, x.data(), gamma.data(), st);
        VecF dx(x.size());
        if (layer)
          layerNormB(s, st, dy.data(), dx.data());
        else
          rmsNormB(s, st, dy.data(), dx.data());
        for (Index t = 0; t < tokens; ++t) {
          const float *xr = x.data() + t * H, *dyr = dy.data() + t * H;
          float m = 0, r;
          if (layer) {
            double mean =
                normLaneSum(H, [&](Index i) { return double(xr[i]); }) /
                double(H);
            double var = normLaneSum(H, [&](Index i) {
                           double d = xr[i] - mean;
                           return d * d;
                         }) /
                         double(H);
            m = float(mean);
            r = 1.f / std::sqrt(float(var) + float(s.eps));
            ASSERT_TRUE(sameBits(st.mean[size_t(t)], m)) << t << " " << H;
          } else {
            double ss = normLaneSum(
                H, [&](Index i) { return double(xr[i]) * double(xr[i]); });
            r = 1.f / std::sqrt(float(ss / double(H)) + float(s.eps));
          }
          ASSERT_TRUE(sameBits(st.rstd[size_t(t)], r)) << t << " " << H;
          double sg = layer ? normLaneSum(H,
                                          [&](Index i) {
                                            return double(dyr[i] * gamma[i]);
                                          })
                            : 0.0;
          double sgx = normLaneSum(H, [&](Index i) {
            return double((dyr[i] * gamma[i]) * ((xr[i] - m) * r));
          });
          float mg = layer ? float(sg / double(H)) : 0.f;
          float mgx = float(sgx / double(H));
          for (Index i = 0; i < H; ++i) {
            float g = dyr[i] * gamma[i], xhat = (xr[i] - m) * r;
            ASSERT_TRUE(sameBits(dx[size_t(t * H + i)], r * (g - mg - xhat * mgx)))
                << layer << " " << t << " " << H << " " << i;
          }
        }
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

namespace {
/// ulps between two finite floats of the same sign (or both zero).
int64_t ulpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return ia > ib ? int64_t(ia) - ib : int64_t(ib) - ia;
}
} // namespace

/// The softmax's exp (ElementwiseMath.h pfExpFast) against exp in double,
/// rounded to float: at most 2 ulp over every float step of 2^-12 on the
/// range where exp is normal; 1 at 0; 0 below (exp subnormal: an absolute
/// error under 1.2e-38), +inf above, NaN for NaN; increasing.
TEST(ExpFast, WithinTwoUlpOfExp) {
  int64_t worst = 0;
  float worstAt = 0, prev = 0;
  for (double xd = -87.33; xd <= 88.72; xd += 1.0 / 4096) {
    const float x = float(xd);
    const float got = pmath::pfExpFast(x);
    const float want = float(std::exp(double(x)));
    const int64_t d = ulpDistance(got, want);
    if (d > worst)
      worst = d, worstAt = x;
    ASSERT_GE(got, prev) << "not increasing at " << x;
    prev = got;
  }
  EXPECT_LE(worst, 2) << "at " << worstAt;
  EXPECT_EQ(pmath::pfExpFast(0.0f), 1.0f);
  EXPECT_EQ(pmath::pfExpFast(-0.0f), 1.0f);
  for (float x : {-87.5f, -100.0f, -1e30f, -INFINITY})
    EXPECT_EQ(pmath::pfExpFast(x), 0.0f) << x;
  for (float x : {88.8f, 1e30f, INFINITY})
    EXPECT_EQ(pmath::pfExpFast(x), INFINITY) << x;
  EXPECT_TRUE(std::isnan(pmath::pfExpFast(NAN)));
  // The extremes of the normal range stay finite and normal.
  EXPECT_TRUE(std::isfinite(pmath::pfExpFast(88.72f)));
  EXPECT_GE(pmath::pfExpFast(-87.33f), 1.17549435e-38f);
}

/// The softmax rows' reductions: eight interleaved lanes combined pairwise,
/// the exps computed a block at a time (rowExpSum) in the same order as
/// rowLaneSum of the stored exps; the max is the plain running max.
TEST(RowLanes, EightInterleavedLanesCombinedPairwise) {
  for (Index n : {1, 2, 7, 8, 9, 255, 256, 257, 1000}) {
    VecF x = randomVec(size_t(n), unsigned(n), -30.f, 30.f);
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (Index j = 0; j < n; ++j)
      lane[j % 8] += x[size_t(j)];
    const float want =
        ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
        ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    EXPECT_TRUE(sameBits(rowLaneSum(x.data(), n), want)) << n;
    float m = x[0];
    for (Index j = 1; j < n; ++j)
      m = x[size_t(j)] > m ? x[size_t(j)] : m;
    EXPECT_TRUE(sameBits(rowLaneMax(x.data(), n), m)) << n;
    VecF e(x.size());
    for (size_t j = 0; j < e.size(); ++j)
      e[j] = pmath::softmaxExp(x[j], m);
    EXPECT_TRUE(sameBits(rowExpSum(x.data(), n, m), rowLaneSum(e.data(), n)))
        << n;
  }
}

/// The embedding's weight gradient added straight into a gradient that
/// holds earlier microbatches (Backend::canAddTo) against a cleared buffer
/// then accumulated: the same bits, with repeated tokens and positions
/// summed over the batch.
TEST(EmbeddingW, AddedOnceAsTheAccumulateWould) {
  EmbeddingShape s;
  s.batch = 3;
  s.seq = 5;
  s.hidden = 7;
  s.vocab = 4;
  s.learnedPositions = true;
  const std::vector<int32_t> tokens = {2, 0, 2, 2, 1, 3, 3, 0, 2, 1,
                                       0, 0, 2, 3, 2};
  VecF dy = randomVec(size_t(s.batch * s.seq * s.hidden), 41, -3.f, 3.f);
  EmbeddingSaved sv;
  sv.tokens = tokens.data();
  VecF table0 = randomVec(size_t(s.vocab * s.hidden), 42);
  VecF pos0 = randomVec(size_t(s.seq * s.hidden), 43);
  // The accumulate path: a cleared buffer, then added element by element.
  VecF dt(table0.size(), 0.f), dp(pos0.size(), 0.f);
  embeddingW(s, sv, dy.data(), EmbeddingGrads<float>{dt.data(), dp.data()});
  VecF wantT = table0, wantP = pos0;
  for (size_t i = 0; i < dt.size(); ++i)
    wantT[i] += dt[i];
  for (size_t i = 0; i < dp.size(); ++i)
    wantP[i] += dp[i];
  // Straight into place.
  VecF gotT = table0, gotP = pos0;
  embeddingW(s, sv, dy.data(), EmbeddingGrads<float>{gotT.data(), gotP.data()});
  expectSameBits(gotT, wantT, "table");
  expectSameBits(gotP, wantP, "positions");
  // A cleared buffer holds each row's sum in token order.
  for (Index j = 0; j < s.hidden; ++j) {
    float sum = 0.f;
    for (size_t t = 0; t < tokens.size(); ++t)
      if (tokens[t] == 2)
        sum += dy[t * size_t(s.hidden) + size_t(j)];
    EXPECT_TRUE(sameBits(dt[size_t(2 * s.hidden + j)], sum)) << j;
  }
}

/// The MoE experts' elementwise loops (vectorised, cloned) against the
/// scalar expressions they replace, both activations, gated and plain, odd
/// lengths for the loops' remainders.
TEST(MoEExpertLoops, EqualTheScalarExpressions) {
  for (Activation a : {Activation::Silu, Activation::Gelu})
    for (bool gated : {false, true})
      for (Index n : {1, 17, 1001}) {
        VecF pre = randomVec(size_t(n), 51, -6.f, 6.f);
        VecF pre3 = randomVec(size_t(n), 52, -2.f, 2.f);
        VecF dh = randomVec(size_t(n), 53, -1.f, 1.f);
        auto f = [&](float x) {
          return a == Activation::Gelu ? pmath::gelu(x) : pmath::silu(x);
        };
        auto df = [&](float x) {
          return a == Activation::Gelu ? pmath::geluGrad(x)
                                       : pmath::siluGrad(x);
        };
        VecF out(static_cast<size_t>(n)), want(out.size());
        expertAct(a, n, pre.data(), gated ? pre3.data() : nullptr, out.data());
        for (size_t i = 0; i < size_t(n); ++i)
          want[i] = gated ? f(pre[i]) * pre3[i] : f(pre[i]);
        expectSameBits(out, want, "act");
        VecF dpre = dh, dpre3(dh.size()), wantD(dh.size()), want3(dh.size());
        expertActGrad(a, n, pre.data(), gated ? pre3.data() : nullptr,
                      dpre.data(), gated ? dpre3.data() : nullptr);
        for (size_t i = 0; i < size_t(n); ++i) {
          want3[i] = dh[i] * f(pre[i]);
          wantD[i] = gated ? dh[i] * pre3[i] * df(pre[i]) : dh[i] * df(pre[i]);
        }
        expectSameBits(dpre, wantD, "grad");
        if (gated)
          expectSameBits(dpre3, want3, "grad3");
      }
}
