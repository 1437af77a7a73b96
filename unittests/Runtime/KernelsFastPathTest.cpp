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

#ifdef PF_CPU_AVX512_ROWS
/// The AVX-512 rows' exp (Kernels.h, PF_CPU_AVX512_ROWS) is pfExpFast bit
/// for bit: a sweep of the float bit patterns, the range where it is
/// computed densely, and the special values.
TEST(RowLanes, VectorExpIsPfExpFast) {
  if (!detail::avx512Rows())
    GTEST_SKIP() << "no AVX-512";
  VecF x;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 65521) {
    uint32_t u = uint32_t(b);
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (float f = -90.f; f <= 90.f; f += 0.000731f)
    x.push_back(f);
  for (float f : {0.f, -0.f, INFINITY, -INFINITY, NAN, -NAN, 88.7228394f,
                  -87.3365479f, 88.72284f, -87.33655f, 1e-30f, -1e-30f})
    x.push_back(f);
  VecF got(x.size()), want(x.size());
  detail::expFastAvx512(x.data(), Index(x.size()), got.data());
  for (size_t i = 0; i < x.size(); ++i)
    want[i] = pmath::pfExpFast(x[i]);
  expectSameBits(got, want, "exp");
}
#endif

/// The softmax rows' fused helpers (the AVX-512 ones where the CPU has it,
/// and the plain loops) against the plain computations: the numerators in
/// place with the sum of the first n, the sum with the next row's max, the
/// loss's gradient rows; rows with -inf and underflowing entries.
TEST(RowLanes, FusedRowsEqualThePlainLoops) {
  for (Index n : {1, 2, 7, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257, 1000}) {
    VecF x = randomVec(size_t(n), unsigned(n) + 7, -30.f, 30.f);
    VecF next = randomVec(size_t(n), unsigned(n) + 8, -30.f, 30.f);
    if (n > 3) {
      x[1] = -INFINITY;
      x[2] = -200.f; // exp underflows to 0
      next[3] = 1e30f;
    }
    float m = x[0], mn = next[0];
    for (Index j = 1; j < n; ++j) {
      m = x[size_t(j)] > m ? x[size_t(j)] : m;
      mn = next[size_t(j)] > mn ? next[size_t(j)] : mn;
    }
    EXPECT_TRUE(sameBits(rowLaneMax(x.data(), n), m)) << n;
    EXPECT_TRUE(sameBits(rowLaneMax<float>(x.data(), n), m)) << n;
    VecF e(x.size());
    for (size_t j = 0; j < e.size(); ++j)
      e[j] = pmath::softmaxExp(x[j], m);
    const float sum = rowLaneSum(e.data(), n);
    EXPECT_TRUE(sameBits(rowExpSum(x.data(), n, m), sum)) << n;
    EXPECT_TRUE(sameBits(rowExpSum<float>(x.data(), n, m), sum)) << n;
    for (int plain = 0; plain < 2; ++plain) {
      float gotMax = 0;
      const float got =
          plain ? rowExpSumNextMax<float>(x.data(), n, m, next.data(), gotMax)
                : rowExpSumNextMax(x.data(), n, m, next.data(), gotMax);
      EXPECT_TRUE(sameBits(got, sum)) << n;
      EXPECT_TRUE(sameBits(gotMax, mn)) << n;
      // In place over `padded` >= n entries; the sum over the first n.
      for (Index pad : {n, n + 1, n + 15, (n + 15) / 16 * 16}) {
        VecF row = x, wantRow = x;
        row.resize(size_t(pad), 5.f);
        wantRow.resize(size_t(pad), 5.f);
        for (size_t j = 0; j < wantRow.size(); ++j)
          wantRow[j] = pmath::softmaxExp(wantRow[j], m);
        const float s = plain ? rowSoftmaxExp<float>(row.data(), n, pad, m)
                              : rowSoftmaxExp(row.data(), n, pad, m);
        EXPECT_TRUE(sameBits(s, sum)) << n << " " << pad;
        expectSameBits(row, wantRow, "numerators");
      }
      VecF d(x.size()), wantD(x.size());
      const float lse = m + 0.75f, scale = 0.37f;
      for (size_t j = 0; j < x.size(); ++j)
        wantD[j] = pmath::pfExpFast(x[j] - lse) * scale;
      if (plain)
        rowExpScaled<float>(x.data(), n, lse, scale, d.data());
      else
        rowExpScaled(x.data(), n, lse, scale, d.data());
      expectSameBits(d, wantD, "gradient row");
    }
  }
}

/// The float loss against the plain computation: per row the running max,
/// the exps' sum in the lanes, lse = m + log(sum), the mean in double; the
/// gradient exp(l - lse) * dloss / tokens less the scale at the target.
TEST(CrossEntropyFloat, EqualsThePlainComputation) {
  for (Index V : {5, 16, 37, 1000}) {
    const Index T = 7;
    VecF logits = randomVec(size_t(T * V), unsigned(V), -8.f, 8.f);
    std::vector<int32_t> targets(static_cast<size_t>(T));
    for (Index t = 0; t < T; ++t)
      targets[size_t(t)] = int32_t((t * 7 + 3) % V);
    CrossEntropySaved<float> sv;
    const float loss =
        crossEntropyF<float>({T, V}, logits.data(), targets.data(), sv);
    double total = 0;
    VecF lse(static_cast<size_t>(T));
    for (Index t = 0; t < T; ++t) {
      const float *row = logits.data() + t * V;
      float m = row[0];
      for (Index j = 1; j < V; ++j)
        m = row[j] > m ? row[j] : m;
      float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (Index j = 0; j < V; ++j)
        lane[j % 8] += pmath::softmaxExp(row[j], m);
      const float sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                        ((lane[4] + lane[5]) + (lane[6] + lane[7]));
      lse[size_t(t)] = m + pmath::pfLog(sum);
      total += double(lse[size_t(t)] - row[targets[size_t(t)]]);
    }
    expectSameBits(sv.lse, lse, "lse");
    EXPECT_TRUE(sameBits(loss, float(total / double(T)))) << V;
    VecF d(logits.size()), want(logits.size());
    crossEntropyB<float>({T, V}, sv, 1.5f, d.data());
    const float scale = 1.5f / float(T);
    for (Index t = 0; t < T; ++t) {
      for (Index j = 0; j < V; ++j)
        want[size_t(t * V + j)] =
            pmath::pfExpFast(logits[size_t(t * V + j)] - lse[size_t(t)]) *
            scale;
      want[size_t(t * V + targets[size_t(t)])] -= scale;
    }
    expectSameBits(d, want, "dlogits");
  }
}

/// The float attention's probabilities against the plain softmax: scores
/// of small integers (q, k integers, scale 1/4: every product and sum is
/// exact whatever the GEMM's order), rows of every length up to S = 50
/// (not a multiple of 16), with and without document starts.
TEST(AttentionFloat, ProbabilitiesEqualThePlainSoftmax) {
  AttentionShape s;
  s.batch = 2;
  s.seq = 50;
  s.heads = 2;
  s.kvHeads = 1;
  s.headDim = 16;
  const Index S = s.seq, D = s.headDim, tokens = s.batch * S;
  std::vector<int32_t> docStart(static_cast<size_t>(tokens));
  for (Index b = 0; b < s.batch; ++b)
    for (Index i = 0; i < S; ++i)
      docStart[size_t(b * S + i)] = int32_t(i < 13 ? 0 : (i < 31 ? 13 : 31));
  auto ints = [](size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> d(-3, 3);
    VecF v(n);
    for (float &x : v)
      x = float(d(gen));
    return v;
  };
  VecF q = ints(size_t(tokens * s.heads * D), 61);
  VecF k = ints(size_t(tokens * D), 62);
  VecF v = randomVec(size_t(tokens * D), 63);
  for (bool docs : {false, true}) {
    s.docStart = docs ? docStart.data() : nullptr;
    AttentionSaved<float> sv;
    VecF out(size_t(tokens * s.heads * D));
    attentionF<float>(s, q.data(), k.data(), v.data(), out.data(), sv);
    VecF want(sv.probs.size(), 0.f);
    for (Index b = 0; b < s.batch; ++b)
      for (Index h = 0; h < s.heads; ++h)
        for (Index i = 0; i < S; ++i) {
          const Index lo = s.rowStart(b, i), n = i + 1 - lo;
          VecF row(static_cast<size_t>(n));
          for (Index j = lo; j <= i; ++j) {
            float dot = 0;
            for (Index c = 0; c < D; ++c)
              dot += q[size_t((b * S + i) * s.heads * D + h * D + c)] *
                     k[size_t((b * S + j) * D + c)];
            row[size_t(j - lo)] = 0.25f * dot;
          }
          float m = row[0];
          for (float x : row)
            m = x > m ? x : m;
          for (float &x : row)
            x = pmath::softmaxExp(x, m);
          const float inv = 1.f / rowLaneSum<float>(row.data(), n);
          float *P = want.data() + ((b * s.heads + h) * S + i) * S;
          for (Index j = lo; j <= i; ++j)
            P[j] = row[size_t(j - lo)] * inv;
        }
    expectSameBits(sv.probs, want, docs ? "probs (documents)" : "probs");
  }
}

/// attentionB's softmax backward (softmaxGradRows: rows side by side)
/// against one row at a time, with and without document starts, S not a
/// multiple of the rows it runs together.
TEST(AttentionFloat, SoftmaxGradRowsEqualOneRowAtATime) {
  for (Index S : {1, 5, 8, 9, 29, 64}) {
    for (bool docs : {false, true}) {
      auto lo = [&](Index i) {
        return docs ? (i < 3 ? Index(0) : (i < 11 ? Index(3) : Index(11)))
                    : Index(0);
      };
      VecF P = randomVec(size_t(S * S), unsigned(S), 0.f, 1.f);
      VecF dS = randomVec(size_t(S * S), unsigned(S) + 1, -2.f, 2.f);
      VecF want = dS;
      for (Index i = 0; i < S; ++i) {
        const float *p = P.data() + i * S;
        float *d = want.data() + i * S;
        float dot = 0;
        for (Index j = lo(i); j <= i; ++j)
          dot += p[j] * d[j];
        for (Index j = lo(i); j <= i; ++j)
          d[j] = pmath::softmaxGrad(p[j], d[j], dot);
        for (Index j = 0; j < lo(i); ++j)
          d[j] = 0.f;
        for (Index j = i + 1; j < S; ++j)
          d[j] = 0.f;
      }
      softmaxGradRows(S, P.data(), dS.data(), lo);
      expectSameBits(dS, want, "dS");
    }
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
