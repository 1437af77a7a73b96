//===- RowMathTest.cpp - The CUDA row kernels' math on the CPU ------------===//
//
// Composes the per-element functions of RowMath.h with plain loops over
// whole tensors, in the order RowKernels.cu uses them, and compares with
// the CPU reference kernels (runtime/backends/cpu) and the CPU AdamW optimizer.
//
// A row reduction runs in one of two orders:
//   Sequential  the CPU's order. The results must equal the reference
//               bitwise: this checks that RowMath.h is the reference's math.
//   Block       the kernels' fixed-order block reduction (256 strided
//               partial sums, then a halving tree). Within kRelTol of the
//               largest reference magnitude: only the rounding of the sums
//               differs.
// Reductions over tokens (dgamma, dbeta, dtable, dpos) run in token order
// in the kernels as in the reference, so they are compared bitwise.
//
//===----------------------------------------------------------------------===//

#include "cuda/RowMath.h"
#include "cpu/Kernels.h"
#include "pipeforge/rt/Optimizer.h"

#include <gtest/gtest.h>

#include "Close.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace pipeforge::rt;
using namespace pipeforge::rt::cuda;
using VecF = std::vector<float>;
using VecI = std::vector<int32_t>;

namespace {

constexpr double kRelTol = 1e-6;
constexpr int kThreads = 256;      ///< RowKernels.cu's block size
constexpr long long kBuckets = 32; ///< RowKernels.cu's kEmbedBuckets

enum class Order { Sequential, Block };
const Order kOrders[] = {Order::Sequential, Order::Block};

VecF randomVec(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  VecF v(n);
  for (float &x : v)
    x = d(gen);
  return v;
}

VecI randomTokens(size_t n, unsigned seed, int limit) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, limit - 1);
  VecI v(n);
  for (int32_t &x : v)
    x = d(gen);
  return v;
}

using cudatest::sameBits;

void expectBitwise(const VecF &got, const VecF &ref, const std::string &what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_TRUE(sameBits(got[i], ref[i]))
        << what << " [" << i << "]: " << got[i] << " vs " << ref[i];
}

void expectClose(const VecF &got, const VecF &ref, const std::string &what) {
  cudatest::expectClose(got, ref, what, kRelTol);
}

void expectMatch(Order o, const VecF &got, const VecF &ref,
                 const std::string &what) {
  if (o == Order::Sequential)
    expectBitwise(got, ref, what + " (seq)");
  else
    expectClose(got, ref, what + " (block)");
}

/// sum_{i < n} f(i) in order o. Block: blockSum of RowKernels.cu, where
/// thread k sums i = k, k + 256, ... from T(0) and a tree adds k + s into
/// k for s = 128, ..., 1.
template <typename T, typename F> T rowSum(long long n, Order o, F f) {
  if (o == Order::Sequential) {
    T s = T(0);
    for (long long i = 0; i < n; ++i)
      s += f(i);
    return s;
  }
  std::vector<T> part(kThreads, T(0));
  for (int k = 0; k < kThreads; ++k)
    for (long long i = k; i < n; i += kThreads)
      part[k] += f(i);
  for (int s = kThreads / 2; s > 0; s /= 2)
    for (int k = 0; k < s; ++k)
      part[k] += part[k + s];
  return part[0];
}

/// A row max: `x > m ? x : m` from row[0] (exact in any order).
float rowMax(const float *row, long long n, Order o) {
  if (o == Order::Sequential) {
    float m = row[0];
    for (long long j = 1; j < n; ++j)
      m = row[j] > m ? row[j] : m;
    return m;
  }
  std::vector<float> part(kThreads, row[0]);
  for (int k = 0; k < kThreads; ++k)
    for (long long j = k; j < n; j += kThreads)
      part[k] = row[j] > part[k] ? row[j] : part[k];
  for (int s = kThreads / 2; s > 0; s /= 2)
    for (int k = 0; k < s; ++k)
      part[k] = part[k + s] > part[k] ? part[k + s] : part[k];
  return part[0];
}

//===----------------------------------------------------------------------===//
// Norms: RowKernels.cu's rowStats and the three norm kernels.
//===----------------------------------------------------------------------===//

struct Stats {
  float mean, rstd;
};

/// A norm's row sum in order o. Sequential: the CPU kernels' order
/// (cpu::normLaneSum: four interleaved partial sums), which the per-element
/// functions must reproduce bit for bit.
template <typename F> double normSum(long long n, Order o, F f) {
  if (o == Order::Sequential)
    return cpu::normLaneSum(n, f);
  return rowSum<double>(n, o, f);
}

Stats rowStats(const float *xr, long long H, double eps, bool layer, Order o) {
  if (layer) {
    double mean = normSum(H, o, [&](long long i) { return xr[i]; }) / double(H);
    double var = normSum(H, o,
                         [&](long long i) {
                           return normSquaredDeviation(xr[i], mean);
                         }) /
                 double(H);
    return {float(mean), normRstd(var, eps)};
  }
  double ms =
      normSum(H, o, [&](long long i) { return normSquare(xr[i]); }) / double(H);
  return {0.0f, normRstd(ms, eps)};
}

VecF normForward(const cpu::NormShape &s, bool layer, const VecF &x,
                 const VecF &gamma, const VecF &beta, Order o) {
  const long long H = s.hidden;
  VecF y(x.size());
  for (long long r = 0; r < s.tokens; ++r) {
    const float *xr = x.data() + r * H;
    Stats st = rowStats(xr, H, s.eps, layer, o);
    for (long long i = 0; i < H; ++i)
      y[r * H + i] =
          layer ? layerNormValue(xr[i], st.mean, st.rstd, gamma[i], beta[i])
                : rmsNormValue(xr[i], st.rstd, gamma[i]);
  }
  return y;
}

VecF normBwdInput(const cpu::NormShape &s, bool layer, const VecF &x,
                  const VecF &gamma, const VecF &dy, Order o) {
  const long long H = s.hidden;
  VecF dx(x.size());
  for (long long r = 0; r < s.tokens; ++r) {
    const float *xr = x.data() + r * H, *dyr = dy.data() + r * H;
    Stats st = rowStats(xr, H, s.eps, layer, o);
    auto term = [&](long long i) {
      return normBwdTerm(dyr[i], gamma[i], xr[i], st.mean, st.rstd);
    };
    float mg = 0.0f;
    if (layer)
      mg = normBwdMean(
          normSum(H, o, [&](long long i) { return double(term(i).g); }), H);
    float mgx = normBwdMean(
        normSum(H, o, [&](long long i) { return normBwdGX(term(i)); }), H);
    for (long long i = 0; i < H; ++i)
      dx[r * H + i] = normBwdDx(term(i), st.rstd, mg, mgx);
  }
  return dx;
}

/// normStatsKernel, then normWeightKernel: per column, tokens in order.
void normBwdWeight(const cpu::NormShape &s, bool layer, const VecF &x,
                   const VecF &dy, Order o, VecF &dgamma, VecF &dbeta) {
  const long long H = s.hidden;
  std::vector<Stats> st(s.tokens);
  for (long long r = 0; r < s.tokens; ++r)
    st[r] = rowStats(x.data() + r * H, H, s.eps, layer, o);
  dgamma.assign(H, 0.0f);
  dbeta.assign(layer ? H : 0, 0.0f);
  for (long long j = 0; j < H; ++j) {
    float g = 0.0f, b = 0.0f;
    for (long long t = 0; t < s.tokens; ++t) {
      float d = dy[t * H + j];
      g += normGammaTerm(d, x[t * H + j], st[t].mean, st[t].rstd);
      b += d;
    }
    dgamma[j] = g;
    if (layer)
      dbeta[j] = b;
  }
}

struct NormCase {
  long long tokens, hidden;
  double eps;
};
// Hidden sizes below, at and above the block size, and not multiples of it.
const NormCase kNormCases[] = {
    {1, 1, 1e-5}, {3, 7, 1e-5}, {5, 256, 1e-5}, {4, 300, 1e-6}, {2, 1000, 1e-5},
};

/// Inputs with an offset, so that the variance pass matters.
struct NormInputs {
  VecF x, gamma, beta, dy;
  NormInputs(const NormCase &c, unsigned seed)
      : x(randomVec(c.tokens * c.hidden, seed, 1.f, 5.f)),
        gamma(randomVec(c.hidden, seed + 1, 0.5f, 1.5f)),
        beta(randomVec(c.hidden, seed + 2, -1.f, 1.f)),
        dy(randomVec(c.tokens * c.hidden, seed + 3, -1.f, 1.f)) {}
};

std::string caseName(const char *op, const NormCase &c) {
  return std::string(op) + " " + std::to_string(c.tokens) + "x" +
         std::to_string(c.hidden);
}

TEST(RowMath, LayerNormMatchesReference) {
  unsigned seed = 100;
  for (const NormCase &c : kNormCases) {
    cpu::NormShape s{c.tokens, c.hidden, c.eps};
    NormInputs in(c, seed += 10);
    VecF ref(in.x.size());
    cpu::NormSaved<float> sv;
    cpu::layerNormF(s, cpu::NormParams<float>{in.gamma.data(), in.beta.data()},
                    in.x.data(), ref.data(), sv);
    for (Order o : kOrders)
      expectMatch(o, normForward(s, true, in.x, in.gamma, in.beta, o), ref,
                  caseName("layernorm", c));
  }
}

TEST(RowMath, RmsNormMatchesReference) {
  unsigned seed = 200;
  for (const NormCase &c : kNormCases) {
    cpu::NormShape s{c.tokens, c.hidden, c.eps};
    NormInputs in(c, seed += 10);
    VecF ref(in.x.size());
    cpu::NormSaved<float> sv;
    cpu::rmsNormF(s, cpu::NormParams<float>{in.gamma.data(), nullptr},
                  in.x.data(), ref.data(), sv);
    for (Order o : kOrders)
      expectMatch(o, normForward(s, false, in.x, in.gamma, {}, o), ref,
                  caseName("rmsnorm", c));
  }
}

/// As CpuBackend's *_bwd_input: F with beta = 0 for the statistics, then B.
TEST(RowMath, NormBackwardInputMatchesReference) {
  unsigned seed = 300;
  for (bool layer : {true, false})
    for (const NormCase &c : kNormCases) {
      cpu::NormShape s{c.tokens, c.hidden, c.eps};
      NormInputs in(c, seed += 10);
      VecF y(in.x.size()), ref(in.x.size()), zeros(c.hidden, 0.0f);
      cpu::NormSaved<float> sv;
      if (layer) {
        cpu::layerNormF(s,
                        cpu::NormParams<float>{in.gamma.data(), zeros.data()},
                        in.x.data(), y.data(), sv);
        cpu::layerNormB(s, sv, in.dy.data(), ref.data());
      } else {
        cpu::rmsNormF(s, cpu::NormParams<float>{in.gamma.data(), nullptr},
                      in.x.data(), y.data(), sv);
        cpu::rmsNormB(s, sv, in.dy.data(), ref.data());
      }
      for (Order o : kOrders)
        expectMatch(o, normBwdInput(s, layer, in.x, in.gamma, in.dy, o), ref,
                    caseName(layer ? "layernorm dx" : "rmsnorm dx", c));
    }
}

/// As CpuBackend's *_bwd_weight: F with gamma = 1, beta = 0 for the
/// statistics, then W into zeroed gradients (the op overwrites).
TEST(RowMath, NormBackwardWeightMatchesReference) {
  unsigned seed = 400;
  for (bool layer : {true, false})
    for (const NormCase &c : kNormCases) {
      cpu::NormShape s{c.tokens, c.hidden, c.eps};
      NormInputs in(c, seed += 10);
      VecF y(in.x.size()), ones(c.hidden, 1.0f), zeros(c.hidden, 0.0f);
      VecF refG(c.hidden, 0.0f), refB(c.hidden, 0.0f);
      cpu::NormSaved<float> sv;
      if (layer) {
        cpu::layerNormF(s, cpu::NormParams<float>{ones.data(), zeros.data()},
                        in.x.data(), y.data(), sv);
        cpu::layerNormW(s, sv, in.dy.data(),
                        cpu::NormGrads<float>{refG.data(), refB.data()});
      } else {
        cpu::rmsNormF(s, cpu::NormParams<float>{ones.data(), nullptr},
                      in.x.data(), y.data(), sv);
        cpu::rmsNormW(s, sv, in.dy.data(),
                      cpu::NormGrads<float>{refG.data(), nullptr});
      }
      std::string what = caseName(layer ? "layernorm" : "rmsnorm", c);
      for (Order o : kOrders) {
        VecF dg, db;
        normBwdWeight(s, layer, in.x, in.dy, o, dg, db);
        expectMatch(o, dg, refG, what + " dgamma");
        // dbeta does not depend on the statistics: bitwise in both orders.
        if (layer)
          expectBitwise(db, refB, what + " dbeta");
      }
    }
}

//===----------------------------------------------------------------------===//
// Elementwise: the kernels call ElementwiseMath.h directly.
//===----------------------------------------------------------------------===//

TEST(RowMath, ActivationMatchesReference) {
  const cpu::Index n = 1000;
  VecF x = randomVec(n, 7, -6.f, 6.f), dy = randomVec(n, 8, -1.f, 1.f);
  for (cpu::Activation act : {cpu::Activation::Gelu, cpu::Activation::Silu}) {
    bool gelu = act == cpu::Activation::Gelu;
    VecF refY(n), refDx(n), y(n), dx(n);
    cpu::ActivationSaved<float> sv;
    cpu::activationF(act, n, x.data(), refY.data(), sv);
    cpu::activationB(act, n, sv, dy.data(), refDx.data());
    for (cpu::Index i = 0; i < n; ++i) {
      y[i] = gelu ? math::gelu(x[i]) : math::silu(x[i]);
      dx[i] = dy[i] * (gelu ? math::geluGrad(x[i]) : math::siluGrad(x[i]));
    }
    expectBitwise(y, refY, gelu ? "gelu" : "silu");
    expectBitwise(dx, refDx, gelu ? "gelu dx" : "silu dx");
  }
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

TEST(RowMath, IndexInRange) {
  EXPECT_TRUE(indexInRange(0, 5));
  EXPECT_TRUE(indexInRange(4, 5));
  EXPECT_FALSE(indexInRange(5, 5));
  EXPECT_FALSE(indexInRange(-1, 5));
  EXPECT_FALSE(indexInRange(INT_MIN, 5));
  EXPECT_FALSE(indexInRange(0, 0));
  EXPECT_TRUE(indexInRange(INT_MAX, (long long)INT_MAX + 1));
}

struct EmbedCase {
  cpu::Index batch, seq, hidden, vocab;
};
// Small vocabularies make repeated tokens (the scatter-add order matters),
// vocab < kBuckets and > kBuckets exercise both bucket counts.
const EmbedCase kEmbedCases[] = {
    {1, 1, 1, 1}, {3, 5, 7, 11}, {2, 9, 300, 40}, {4, 16, 33, 100}};

TEST(RowMath, EmbeddingForwardMatchesReference) {
  unsigned seed = 500;
  for (const EmbedCase &c : kEmbedCases)
    for (bool learned : {true, false}) {
      cpu::EmbeddingShape s{c.batch, c.seq, c.hidden, c.vocab, learned};
      const cpu::Index T = c.batch * c.seq, H = c.hidden;
      VecF table = randomVec(c.vocab * H, seed += 10, -1.f, 1.f);
      VecF pos = randomVec((c.seq + 2) * H, seed + 1, -1.f, 1.f);
      VecI tok = randomTokens(T, seed + 2, int(c.vocab));
      const float *p = learned ? pos.data() : nullptr;
      VecF ref(T * H), y(T * H);
      cpu::EmbeddingSaved sv;
      cpu::embeddingF(s, cpu::EmbeddingParams<float>{table.data(), p},
                      tok.data(), ref.data(), sv);
      // embeddingForwardKernel: one thread per element i = t * H + j.
      for (cpu::Index i = 0; i < T * H; ++i) {
        cpu::Index t = i / H, j = i - t * H;
        ASSERT_TRUE(indexInRange(tok[t], c.vocab));
        y[i] = embeddingValue(table.data(), p, tok[t], t % c.seq, j, H);
      }
      expectBitwise(y, ref, "embedding y");
    }
}

/// A vocabulary shard (tensor parallelism): rows [start, start + vocab) of a
/// table of 3 x vocab rows, tokens over the whole vocabulary; forward and the
/// table gradient as the kernels compute them, against cpu::embeddingF/W
/// with vocabStart.
TEST(RowMath, EmbeddingShardMatchesReference) {
  unsigned seed = 700;
  for (const EmbedCase &c : kEmbedCases)
    for (cpu::Index shard = 0; shard < 3; ++shard) {
      const cpu::Index T = c.batch * c.seq, H = c.hidden, V = c.vocab;
      cpu::EmbeddingShape s{c.batch, c.seq, H, V, shard == 0, shard * V, 3};
      VecF table = randomVec(V * H, seed += 10, -1.f, 1.f);
      VecF pos = randomVec((c.seq + 2) * H, seed + 1, -1.f, 1.f);
      VecI tok = randomTokens(T, seed + 2, int(3 * V));
      const float *p = shard == 0 ? pos.data() : nullptr;
      VecF ref(T * H), y(T * H);
      cpu::EmbeddingSaved sv;
      cpu::embeddingF(s, cpu::EmbeddingParams<float>{table.data(), p},
                      tok.data(), ref.data(), sv);
      for (cpu::Index i = 0; i < T * H; ++i) {
        cpu::Index t = i / H, j = i - t * H;
        ASSERT_TRUE(indexInRange(tok[t], 3 * V));
        y[i] = embeddingShardValue(table.data(), p, tok[t], shard * V, V,
                                   t % c.seq, j, H);
      }
      expectBitwise(y, ref, "embedding shard y");

      VecF dy = randomVec(T * H, seed + 3, -1.f, 1.f);
      VecF refTable(V * H, 0.0f), refPos(c.seq * H, 0.0f);
      cpu::embeddingW(s, sv, dy.data(),
                      cpu::EmbeddingGrads<float>{refTable.data(),
                                                 refPos.data()});
      VecF dtable(V * H, 0.0f);
      const long long buckets = std::min<long long>(kBuckets, V);
      for (long long i = 0; i < buckets * H; ++i) {
        long long bucket = i / H, j = i - bucket * H;
        for (cpu::Index t = 0; t < T; ++t) {
          long long local = (long long)tok[t] - shard * V;
          if (local >= 0 && local < V && local % buckets == bucket)
            dtable[local * H + j] += dy[t * H + j];
        }
      }
      expectBitwise(dtable, refTable, "embedding shard dtable");
    }
}

TEST(RowMath, EmbeddingBackwardWeightMatchesReference) {
  unsigned seed = 600;
  for (const EmbedCase &c : kEmbedCases) {
    cpu::EmbeddingShape s{c.batch, c.seq, c.hidden, c.vocab, true};
    const cpu::Index T = c.batch * c.seq, H = c.hidden;
    VecF dy = randomVec(T * H, seed += 10, -1.f, 1.f);
    VecI tok = randomTokens(T, seed + 1, int(c.vocab));
    VecF refTable(c.vocab * H, 0.0f), refPos(c.seq * H, 0.0f);
    cpu::EmbeddingSaved sv;
    sv.tokens = tok.data();
    cpu::embeddingW(s, sv, dy.data(),
                    cpu::EmbeddingGrads<float>{refTable.data(), refPos.data()});

    // embeddingTableGradKernel: dtable zeroed, thread (bucket, j) adds the
    // tokens of its bucket in token order.
    VecF dtable(c.vocab * H, 0.0f);
    const long long buckets = std::min<long long>(kBuckets, c.vocab);
    for (long long i = 0; i < buckets * H; ++i) {
      long long bucket = i / H, j = i - bucket * H;
      for (cpu::Index t = 0; t < T; ++t)
        if (tok[t] % buckets == bucket)
          dtable[tok[t] * H + j] += dy[t * H + j];
    }
    expectBitwise(dtable, refTable, "embedding dtable");

    // embeddingPosGradKernel: thread i = p * H + j sums over the batch.
    VecF dpos(c.seq * H);
    for (cpu::Index i = 0; i < c.seq * H; ++i) {
      float acc = 0.0f;
      for (cpu::Index b = 0; b < c.batch; ++b)
        acc += dy[b * c.seq * H + i];
      dpos[i] = acc;
    }
    expectBitwise(dpos, refPos, "embedding dpos");
  }
}

//===----------------------------------------------------------------------===//
// Cross-entropy: crossEntropyRowKernel + crossEntropyTotalKernel, and
// crossEntropyBwdKernel (which recomputes lse the same way).
//===----------------------------------------------------------------------===//

/// Sequential: the CPU kernel's order (cpu::rowLaneMax, cpu::rowExpSum:
/// eight interleaved lanes).
float rowLse(const float *row, long long V, Order o) {
  if (o == Order::Sequential) {
    const float m = cpu::rowLaneMax(row, V);
    return crossEntropyLse(m, cpu::rowExpSum(row, V, m));
  }
  float m = rowMax(row, V, o);
  float s = rowSum<float>(
      V, o, [&](long long j) { return math::softmaxExp(row[j], m); });
  return crossEntropyLse(m, s);
}

struct CeCase {
  cpu::Index tokens, vocab;
  float scale; ///< logits in [-scale, scale] + an offset per case
};
const CeCase kCeCases[] = {
    {1, 1, 1.f}, {3, 11, 4.f}, {7, 300, 4.f}, {300, 50, 2.f}, {4, 1000, 30.f}};

TEST(RowMath, CrossEntropyMatchesReference) {
  unsigned seed = 700;
  for (const CeCase &c : kCeCases) {
    cpu::CrossEntropyShape s{c.tokens, c.vocab};
    const cpu::Index T = c.tokens, V = c.vocab;
    VecF logits = randomVec(T * V, seed += 10, 10.f - c.scale, 10.f + c.scale);
    VecI tg = randomTokens(T, seed + 1, int(V));
    const float dloss = 0.75f;
    cpu::CrossEntropySaved<float> sv;
    float refLoss = cpu::crossEntropyF(s, logits.data(), tg.data(), sv);
    VecF refD(T * V);
    cpu::crossEntropyB(s, sv, dloss, refD.data());
    std::string what =
        "cross-entropy " + std::to_string(T) + "x" + std::to_string(V);

    for (Order o : kOrders) {
      VecF lse(T), rowLoss(T), d(T * V);
      for (cpu::Index r = 0; r < T; ++r) {
        const float *row = logits.data() + r * V;
        lse[r] = rowLse(row, V, o);
        ASSERT_TRUE(indexInRange(tg[r], V));
        rowLoss[r] = crossEntropyRowLoss(lse[r], row[tg[r]]);
      }
      double total =
          rowSum<double>(T, o, [&](long long r) { return double(rowLoss[r]); });
      VecF loss{crossEntropyMean(total, T)};
      float sc = crossEntropyScale(dloss, T);
      for (cpu::Index r = 0; r < T; ++r)
        for (cpu::Index j = 0; j < V; ++j)
          d[r * V + j] =
              crossEntropyGrad(logits[r * V + j], lse[r], sc, j == tg[r]);
      expectMatch(o, lse, sv.lse, what + " lse");
      expectMatch(o, loss, VecF{refLoss}, what + " loss");
      expectMatch(o, d, refD, what + " dlogits");
    }
  }
  EXPECT_EQ(crossEntropyMean(0.0, 0), 0.0f); // no tokens: loss 0, no NaN
}

//===----------------------------------------------------------------------===//
// AdamW: adamwCoeffs + adamwUpdate per element against AdamW::step.
//===----------------------------------------------------------------------===//

TEST(RowMath, AdamWMatchesOptimizer) {
  const size_t n = 777;
  struct Case {
    double lr, weightDecay, maxGradNorm;
  };
  // Plain, with decay, and clipped (scale < 1, so the scaled path runs).
  const Case cases[] = {{1e-3, 0.0, 0.0}, {3e-3, 0.1, 0.0}, {1e-2, 0.05, 0.5}};
  unsigned seed = 800;
  for (const Case &c : cases) {
    AdamWConfig cfg;
    cfg.lr = c.lr;
    cfg.weightDecay = c.weightDecay;
    cfg.maxGradNorm = c.maxGradNorm;
    VecF refTheta = randomVec(n, seed += 10, -1.f, 1.f), grad(n);
    VecF theta = refTheta, m(n, 0.0f), v(n, 0.0f);
    AdamW opt(cfg);
    ASSERT_TRUE(opt.addParam("w", refTheta.data(), grad.data(), n));
    bool clipped = false;
    for (int step = 0; step < 5; ++step) {
      VecF g = randomVec(n, seed + 1 + step, -2.f, 2.f);
      std::copy(g.begin(), g.end(), grad.begin()); // opt holds grad.data()
      if (step == 3)
        opt.setLearningRate(c.lr * 0.5); // a schedule changes lr
      double lr = opt.config().lr;
      GradInfo info = opt.localGradInfo();
      double clip = opt.clipScale(info.normSq);
      clipped |= clip < 1.0;
      ASSERT_NE(opt.step(info), StepOutcome::Skipped);
      AdamWCoeffs k = adamwCoeffs(cfg.beta1, cfg.beta2, cfg.eps,
                                  cfg.weightDecay, opt.stepCount(), lr, clip);
      for (size_t i = 0; i < n; ++i) // adamwKernel: one thread per element
        adamwUpdate(k, grad[i], theta[i], m[i], v[i]);
      std::string what = "adamw step " + std::to_string(step + 1);
      expectBitwise(theta, refTheta, what + " theta");
      expectBitwise(m, opt.moment1(0), what + " m");
      expectBitwise(v, opt.moment2(0), what + " v");
    }
    EXPECT_EQ(clipped, c.maxGradNorm > 0);
    // The rollback (adamwKernel with undo) against rollbackLastStep: the
    // last step's coefficients, before t goes back.
    double lr = opt.config().lr;
    double clip = opt.clipScale(opt.localGradInfo().normSq);
    AdamWCoeffs k = adamwCoeffs(cfg.beta1, cfg.beta2, cfg.eps, cfg.weightDecay,
                                opt.stepCount(), lr, clip);
    ASSERT_TRUE(opt.rollbackLastStep());
    for (size_t i = 0; i < n; ++i)
      adamwUndo(k, grad[i], theta[i], m[i], v[i]);
    expectBitwise(theta, refTheta, "adamw rollback theta");
    expectBitwise(m, opt.moment1(0), "adamw rollback m");
    expectBitwise(v, opt.moment2(0), "adamw rollback v");
  }
}

} // namespace
