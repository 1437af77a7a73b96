//===- AttentionMoEMathTest.cpp - CUDA attention / MoE plans on the CPU ---===//
//
// Runs the CUDA attention and MoE plans (AttentionPlan.h, MoEPlan.h) on the
// host: an executor whose steps loop over the grid calling the same
// per-thread functions as the kernels (AttentionMath.h, MoEMath.h; warp
// reductions emulated lane by lane) and whose GEMMs are plain loops. The
// results are compared with cpu::attentionF/B and cpu::moeF/B/W at 1e-5
// relative to the largest reference value. The workspace is filled with NaN
// and followed by guard bytes, so a read before a write or a layout that
// overruns attentionWorkspaceBytes / moeWorkspaceBytes shows up; outputs
// start as NaN, so an output that is not overwritten shows up too.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cuda/AttentionPlan.h"
#include "cuda/MoEPlan.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include "Close.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

using namespace pipeforge::rt;
using namespace pipeforge::rt::cuda;
using VecF = std::vector<float>;
using VecI = std::vector<int32_t>;

namespace {

const bool kBlasSingleThread = (openblas_set_num_threads(1), true);

constexpr double kRelTol = 1e-5;
constexpr int kLanes = 32; ///< the kernels' warp size
const float kNaN = std::numeric_limits<float>::quiet_NaN();

VecF randomVec(size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  VecF v(n);
  for (float &x : v)
    x = d(gen);
  return v;
}

void expectClose(const VecF &got, const VecF &ref, const std::string &what) {
  cudatest::expectClose(got, ref, what, kRelTol);
}

/// Device-like scratch: NaN-filled, followed by guard bytes.
class Scratch {
public:
  explicit Scratch(size_t bytes)
      : bytes(bytes), buf((bytes + kGuard) / sizeof(float), kNaN) {
    std::memset(reinterpret_cast<char *>(buf.data()) + bytes, 0x5a, kGuard);
  }
  void *data() { return buf.data(); }
  bool guardIntact() const {
    const unsigned char *g =
        reinterpret_cast<const unsigned char *>(buf.data()) + bytes;
    return std::all_of(g, g + kGuard,
                       [](unsigned char c) { return c == 0x5a; });
  }

private:
  static constexpr size_t kGuard = 256;
  size_t bytes;
  VecF buf;
};

/// The plans' GEMM: row-major, strided batch, double accumulation.
Status hostGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc, int batch,
                int64_t strideA, int64_t strideB, int64_t strideC) {
  for (int bi = 0; bi < batch; ++bi) {
    const float *a = A + bi * strideA, *b = B + bi * strideB;
    float *c = C + bi * strideC;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          float av = transA ? a[p * lda + i] : a[i * lda + p];
          float bv = transB ? b[j * ldb + p] : b[p * ldb + j];
          sum += double(av) * double(bv);
        }
        float r = alpha * float(sum);
        c[i * ldc + j] = beta == 0.f ? r : r + beta * c[i * ldc + j];
      }
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// AttentionPlan.h's executor on the host.
struct HostAttentionExec {
  Status gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
              float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc, int batch,
              int64_t strideA, int64_t strideB, int64_t strideC) {
    return hostGemm(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C,
                    ldc, batch, strideA, strideB, strideC);
  }
  Status toHeads(const HeadLayout &l, const float *src, float *dst) {
    for (long long i = 0; i < headLayoutThreads(l); ++i)
      toHeadsElement(l, i, src, dst);
    return Status::ok();
  }
  Status fromHeads(const HeadLayout &l, const float *src, float *dst) {
    for (long long i = 0; i < headLayoutThreads(l); ++i)
      fromHeadsElement(l, i, src, dst);
    return Status::ok();
  }
  /// One emulated warp per row: each phase runs for every lane before the
  /// partials are combined.
  Status causalSoftmax(const ScoreRows &s, float *probs) {
    for (long long r = 0; r < s.rows; ++r) {
      float *row = probs + r * s.seq;
      long long lo, i;
      scoreRow(s, r, lo, i);
      float m = -INFINITY, sum = 0.f;
      for (int lane = 0; lane < kLanes; ++lane)
        m = std::max(m, causalRowMaxPart(row, lo, i, lane, kLanes));
      for (int lane = 0; lane < kLanes; ++lane)
        sum += causalRowExpPart(row, lo, i, m, lane, kLanes);
      for (int lane = 0; lane < kLanes; ++lane)
        causalRowScalePart(row, lo, i, s.seq, sum, lane, kLanes);
    }
    return Status::ok();
  }
  Status copyInts(int32_t *dst, const int32_t *src, long long n) {
    std::copy(src, src + n, dst);
    return Status::ok();
  }
  Status scoreDropout(const ScoreDropout &d, const float *in, float *out,
                      long long n) {
    for (long long i = 0; i < n; ++i)
      scoreDropoutElement(d, i, in, out);
    return Status::ok();
  }
  Status causalSoftmaxGrad(const ScoreRows &s, const float *probs,
                           float *ds) {
    for (long long r = 0; r < s.rows; ++r) {
      const float *p = probs + r * s.seq;
      float *d = ds + r * s.seq;
      long long lo, i;
      scoreRow(s, r, lo, i);
      float dot = 0.f;
      for (int lane = 0; lane < kLanes; ++lane)
        dot += causalRowDotPart(p, d, lo, i, lane, kLanes);
      for (int lane = 0; lane < kLanes; ++lane)
        causalRowGradPart(p, d, lo, i, s.seq, dot, lane, kLanes);
    }
    return Status::ok();
  }
};

struct AttentionCase {
  cpu::Index batch, seq, heads, kvHeads, headDim;
  bool rotary;
  double ropeTheta;
  double dropout = 0.0;     ///< probabilities' dropout rate
  cpu::Index headStart = 0; ///< a tensor-parallel rank's first head
  cpu::Index vHeadDim = 0;  ///< MLA: value heads of their own width
  cpu::Index ropeDim = 0;   ///< MLA: rotate the trailing ropeDim only
  /// --doc-mask: a document starts every `docEvery + b` tokens of sequence
  /// b (0: one document per sequence).
  cpu::Index docEvery = 0;
};

void PrintTo(const AttentionCase &c, std::ostream *os) {
  *os << "batch " << c.batch << " seq " << c.seq << " heads " << c.heads
      << " kvHeads " << c.kvHeads << " headDim " << c.headDim
      << (c.rotary ? " rotary" : "");
  if (c.dropout > 0)
    *os << " dropout " << c.dropout << " headStart " << c.headStart;
  if (c.vHeadDim || c.ropeDim)
    *os << " vHeadDim " << c.vHeadDim << " ropeDim " << c.ropeDim;
  if (c.docEvery)
    *os << " documents every " << c.docEvery << " + b";
}

class AttentionPlanTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionPlanTest, MatchesCpuReference) {
  (void)kBlasSingleThread;
  const AttentionCase &c = GetParam();
  cpu::AttentionShape s;
  s.batch = c.batch;
  s.seq = c.seq;
  s.heads = c.heads;
  s.kvHeads = c.kvHeads;
  s.headDim = c.headDim;
  s.rotary = c.rotary;
  s.ropeTheta = c.ropeTheta;
  s.dropout = c.dropout;
  s.dropoutKey = dropout::siteKey(dropout::stepKey(5, 2, 3), 1);
  s.headStart = c.headStart;
  s.vHeadDim = c.vHeadDim;
  s.ropeDim = c.ropeDim;
  std::vector<int32_t> doc(size_t(s.batch * s.seq));
  if (c.docEvery) {
    for (cpu::Index b = 0; b < s.batch; ++b)
      for (cpu::Index i = 0; i < s.seq; ++i)
        doc[size_t(b * s.seq + i)] = int32_t(i - i % (c.docEvery + b));
    s.docStart = doc.data();
  }
  ASSERT_TRUE(cpu::isValid(s));
  const size_t tokens = size_t(s.batch * s.seq);
  const size_t nq = tokens * size_t(s.heads * s.headDim);
  const size_t nkv = tokens * size_t(s.kvHeads * s.headDim);
  const size_t nv = tokens * size_t(s.kvHeads * s.valueDim());
  const size_t no = tokens * size_t(s.heads * s.valueDim());
  VecF q = randomVec(nq, 1), k = randomVec(nkv, 2), v = randomVec(nv, 3),
       dy = randomVec(no, 4);

  // Reference.
  VecF outRef(no), dqRef(nq), dkRef(nkv), dvRef(nv);
  cpu::AttentionSaved<float> saved;
  cpu::attentionF(s, q.data(), k.data(), v.data(), outRef.data(), saved);
  cpu::Workspace<float> cws;
  cpu::attentionB(s, saved, dy.data(), dqRef.data(), dkRef.data(), dvRef.data(),
                  cws);

  AttentionBuffers sizing;
  const size_t bytes = carveAttention(s, nullptr, sizing);
  HostAttentionExec x;
  {
    Scratch ws(bytes);
    AttentionBuffers b;
    carveAttention(s, ws.data(), b);
    VecF out(no, kNaN);
    ASSERT_TRUE(attentionForwardPlan(x, s, q.data(), k.data(), v.data(),
                                     out.data(), b));
    EXPECT_TRUE(ws.guardIntact());
    expectClose(out, outRef, "out");
  }
  {
    Scratch ws(bytes);
    AttentionBuffers b;
    carveAttention(s, ws.data(), b);
    VecF dq(nq, kNaN), dk(nkv, kNaN), dv(nv, kNaN);
    ASSERT_TRUE(attentionBackwardPlan(x, s, q.data(), k.data(), v.data(),
                                      dy.data(), dq.data(), dk.data(),
                                      dv.data(), b));
    EXPECT_TRUE(ws.guardIntact());
    expectClose(dq, dqRef, "dq");
    expectClose(dk, dkRef, "dk");
    expectClose(dv, dvRef, "dv");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionPlanTest,
    ::testing::Values(
        AttentionCase{1, 1, 1, 1, 2, true, 10000.0},    // single token
        AttentionCase{2, 5, 4, 2, 8, true, 10000.0},    // GQA group 2, rotary
        AttentionCase{1, 7, 3, 3, 4, false, 10000.0},   // MHA, odd seq
        AttentionCase{2, 40, 4, 1, 6, true, 500.0},     // seq > warp, MQA
        AttentionCase{3, 33, 8, 2, 16, false, 10000.0}, // group 4, seq 33
        // Dropout of the probabilities: the same mask as the CPU kernel.
        AttentionCase{2, 5, 4, 2, 8, true, 10000.0, 0.2, 0},
        AttentionCase{2, 40, 4, 1, 6, true, 500.0, 0.1, 4},
        // MLA: q/k heads of 24 rotating their last 8, value heads of 16.
        AttentionCase{2, 9, 4, 4, 24, true, 10000.0, 0.0, 0, 16, 8},
        AttentionCase{1, 37, 2, 1, 10, true, 500.0, 0.1, 2, 6, 4},
        AttentionCase{2, 5, 4, 2, 6, false, 10000.0, 0.0, 0, 12, 0},
        // Documents (--doc-mask): keys and rotary positions per document.
        AttentionCase{2, 40, 4, 2, 8, true, 10000.0, 0.0, 0, 0, 0, 11},
        AttentionCase{3, 33, 4, 1, 6, false, 500.0, 0.2, 0, 0, 0, 5},
        AttentionCase{2, 37, 4, 4, 24, true, 10000.0, 0.1, 0, 16, 8, 9}));

/// nn.concat_heads's per-thread bodies against cpu::concatHeadsF/B.
TEST(AttentionMath, ConcatHeadsMatchesCpu) {
  for (bool broadcast : {false, true}) {
    cpu::ConcatHeadsShape s;
    s.rows = 7;
    s.heads = 4;
    s.lhsDim = 5;
    s.rhsDim = 3;
    s.broadcast = broadcast;
    const size_t nout = size_t(s.rows * s.heads * (s.lhsDim + s.rhsDim));
    const size_t nl = size_t(s.rows * s.heads * s.lhsDim);
    const size_t nr = size_t(s.rows * s.rhsHeads() * s.rhsDim);
    VecF a = randomVec(nl, 5), b = randomVec(nr, 6), dy = randomVec(nout, 7);
    VecF outRef(nout), daRef(nl), dbRef(nr);
    cpu::concatHeadsF(s, a.data(), b.data(), outRef.data());
    cpu::concatHeadsB(s, dy.data(), daRef.data(), dbRef.data());
    ConcatHeadsLayout l{s.rows, s.heads, s.lhsDim, s.rhsDim, s.broadcast};
    VecF out(nout, kNaN), da(nl, kNaN), db(nr, kNaN);
    for (long long i = 0; i < (long long)nout; ++i)
      concatHeadsElement(l, i, a.data(), b.data(), out.data());
    for (long long i = 0; i < (long long)nout; ++i)
      concatHeadsGradElement(l, i, dy.data(), da.data(), db.data());
    if (broadcast)
      for (long long i = 0; i < (long long)nr; ++i)
        concatHeadsSharedGradElement(l, i, dy.data(), db.data());
    // Copies and the same order of additions: bitwise.
    EXPECT_EQ(0, std::memcmp(out.data(), outRef.data(), nout * 4));
    EXPECT_EQ(0, std::memcmp(da.data(), daRef.data(), nl * 4));
    EXPECT_EQ(0, std::memcmp(db.data(), dbRef.data(), nr * 4));
  }
}

/// rotaryPair un-rotates what it rotated.
TEST(AttentionMath, RotaryPairTransposeInverts) {
  float x1 = 0.3f, x2 = -1.2f;
  rotaryPair(x1, x2, 17, 3, 16, 10000.f, false);
  rotaryPair(x1, x2, 17, 3, 16, 10000.f, true);
  EXPECT_NEAR(x1, 0.3f, 1e-6);
  EXPECT_NEAR(x2, -1.2f, 1e-6);
}

//===----------------------------------------------------------------------===//
// MoE
//===----------------------------------------------------------------------===//

/// MoEPlan.h's executor on the host.
struct HostMoEExec {
  Status gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
              float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc, int batch,
              int64_t strideA, int64_t strideB, int64_t strideC) {
    return hostGemm(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C,
                    ldc, batch, strideA, strideB, strideC);
  }
  Status route(float *probs, const cpu::MoEShape &s, const float *bias,
               int32_t *topIdx, float *gates) {
    for (long long t = 0; t < s.tokens; ++t)
      moeRouteToken(s, probs + t * s.experts, bias, topIdx + t * s.topK,
                    gates + t * s.topK);
    return Status::ok();
  }
  Status assign(const int32_t *topIdx, long long assignments, long long experts,
                long long rows, int32_t *slotOf, int32_t *rowAssign) {
    for (long long e = 0; e < experts; ++e)
      moeAssignExpert(topIdx, assignments, int32_t(e), rows, slotOf, rowAssign);
    return Status::ok();
  }
  Status gather(long long n, long long hidden, long long topK,
                const int32_t *rowAssign, const float *x, float *xe) {
    for (long long i = 0; i < n; ++i)
      moeGatherElement(i, hidden, topK, rowAssign, x, xe);
    return Status::ok();
  }
  Status act(long long n, Activation a, const float *pre, const float *pre3,
             float *out) {
    for (long long i = 0; i < n; ++i)
      moeActElement(i, a, pre, pre3, out);
    return Status::ok();
  }
  Status combine(long long n, long long hidden, long long topK, long long rows,
                 const int32_t *topIdx, const int32_t *slotOf,
                 const float *gates, const float *eout, float *y) {
    for (long long i = 0; i < n; ++i)
      moeCombineElement(i, hidden, topK, rows, topIdx, slotOf, gates, eout, y);
    return Status::ok();
  }
  /// One emulated warp per assignment.
  Status gateGrad(long long assignments, long long hidden, long long topK,
                  long long rows, const int32_t *topIdx, const int32_t *slotOf,
                  const float *dy, const float *eout, float *dg) {
    for (long long a = 0; a < assignments; ++a) {
      float sum = 0.f;
      for (int lane = 0; lane < kLanes; ++lane)
        sum += moeGateGradPart(a, hidden, topK, rows, topIdx, slotOf, dy, eout,
                               lane, kLanes);
      dg[a] = sum;
    }
    return Status::ok();
  }
  Status routerGrad(const float *probs, const cpu::MoEShape &s,
                    const int32_t *topIdx, const float *gates, const float *dg,
                    float *dlogits) {
    for (long long t = 0; t < s.tokens; ++t)
      moeRouterGradToken(s, probs + t * s.experts, topIdx + t * s.topK,
                         gates + t * s.topK, dg + t * s.topK,
                         dlogits + t * s.experts);
    return Status::ok();
  }
  Status dye(long long n, long long hidden, long long topK,
             const int32_t *rowAssign, const float *gates, const float *dy,
             float *out) {
    for (long long i = 0; i < n; ++i)
      moeDyeElement(i, hidden, topK, rowAssign, gates, dy, out);
    return Status::ok();
  }
  Status expertGrad(long long n, Activation a, const float *pre,
                    const float *pre3, float *dpre, float *dpre3) {
    for (long long i = 0; i < n; ++i)
      moeExpertGradElement(i, a, pre, pre3, dpre, dpre3);
    return Status::ok();
  }
  Status scatter(long long n, long long hidden, long long topK, long long rows,
                 const int32_t *topIdx, const int32_t *slotOf, const float *dxe,
                 float *dx) {
    for (long long i = 0; i < n; ++i)
      moeScatterElement(i, hidden, topK, rows, topIdx, slotOf, dxe, dx);
    return Status::ok();
  }
  Status zero(float *p, long long floats) {
    std::fill(p, p + floats, 0.f);
    return Status::ok();
  }
};

struct MoECase {
  cpu::Index tokens, hidden, ffn, experts, topK, capacity;
  Activation act;
  bool renormalize, gated;
  float routerScale; ///< 0: all-equal probabilities (top-k ties)
  cpu::MoEScoring scoring = cpu::MoEScoring::Softmax;
  cpu::Index groups = 1, topkGroup = 1;
  float scale = 1.f;
  float biasScale = 0.f; ///< > 0: a load-balancing bias of that size
};

void PrintTo(const MoECase &c, std::ostream *os) {
  *os << "tokens " << c.tokens << " hidden " << c.hidden << " ffn " << c.ffn
      << " experts " << c.experts << " topK " << c.topK << " capacity "
      << c.capacity << (c.act == Activation::Gelu ? " gelu" : " silu")
      << (c.renormalize ? " renormalize" : "") << (c.gated ? " gated" : "")
      << " routerScale " << c.routerScale
      << (c.scoring == cpu::MoEScoring::Sigmoid ? " sigmoid" : "") << " groups "
      << c.groups << "/" << c.topkGroup << " scale " << c.scale << " bias "
      << c.biasScale;
}

class MoEPlanTest : public ::testing::TestWithParam<MoECase> {};

TEST_P(MoEPlanTest, MatchesCpuReference) {
  (void)kBlasSingleThread;
  const MoECase &c = GetParam();
  cpu::MoEShape s;
  s.tokens = c.tokens;
  s.hidden = c.hidden;
  s.ffn = c.ffn;
  s.experts = c.experts;
  s.topK = c.topK;
  s.capacity = c.capacity;
  s.act = c.act;
  s.renormalize = c.renormalize;
  s.scoring = c.scoring;
  s.groups = c.groups;
  s.topkGroup = c.topkGroup;
  s.scale = c.scale;
  ASSERT_TRUE(cpu::isValid(s));
  const size_t N = size_t(s.tokens), H = size_t(s.hidden), F = size_t(s.ffn),
               E = size_t(s.experts), K = size_t(s.topK);
  VecF x = randomVec(N * H, 11), dy = randomVec(N * H, 12),
       router = randomVec(E * H, 13, c.routerScale),
       w1 = randomVec(E * F * H, 14, 0.5f), w2 = randomVec(E * H * F, 15, 0.5f),
       w3 = randomVec(E * F * H, 16, 0.5f);
  const float *w3p = c.gated ? w3.data() : nullptr;
  VecF biasV = randomVec(E, 17, c.biasScale);
  const float *bias = c.biasScale > 0 ? biasV.data() : nullptr;

  // Reference: F, B, and W into zeroed gradients.
  cpu::MoEParams<float> p{router.data(), w1.data(), w2.data(), w3p, bias};
  cpu::MoESaved<float> saved;
  VecF yRef(N * H), dxRef(N * H);
  cpu::moeF(s, p, x.data(), yRef.data(), saved);
  if (bias) { // the bias is large enough to change some choice
    cpu::MoEParams<float> plain = p;
    plain.bias = nullptr;
    cpu::MoESaved<float> unbiased;
    VecF y0(N * H);
    cpu::moeF(s, plain, x.data(), y0.data(), unbiased);
    EXPECT_NE(unbiased.topIdx, saved.topIdx);
  }
  cpu::Workspace<float> cws;
  cpu::moeB(s, saved, dy.data(), dxRef.data(), cws);
  VecF drRef(E * H, 0.f), dw1Ref(E * F * H, 0.f), dw2Ref(E * H * F, 0.f),
      dw3Ref(E * F * H, 0.f);
  cpu::moeW(s, saved, dy.data(),
            cpu::MoEGrads<float>{drRef.data(), dw1Ref.data(), dw2Ref.data(),
                                 c.gated ? dw3Ref.data() : nullptr},
            cws);

  MoEBuffers sizing;
  const size_t bytes = carveMoE(s, nullptr, sizing);
  HostMoEExec ex;
  {
    Scratch ws(bytes);
    MoEBuffers b;
    carveMoE(s, ws.data(), b);
    b.bias = bias;
    VecF y(N * H, kNaN);
    ASSERT_TRUE(moeForwardPlan(ex, s, x.data(), router.data(), w1.data(),
                               w2.data(), w3p, y.data(), b));
    EXPECT_TRUE(ws.guardIntact());
    expectClose(y, yRef, "y");

    // Routing and dispatch: the same choices and rows as the CPU kernel
    // (CPU row = expertStart[e] + slot).
    VecF probs(b.probs, b.probs + N * E), gates(b.gates, b.gates + N * K);
    expectClose(probs, saved.probs, "probs");
    expectClose(gates, saved.gates, "gates");
    const long long rows = moeExpertRows(s);
    cpu::Index kept = 0;
    for (size_t a = 0; a < N * K; ++a) {
      ASSERT_EQ(b.topIdx[a], saved.topIdx[a]) << "assignment " << a;
      int32_t e = b.topIdx[a], slot = b.slotOf[a];
      ASSERT_EQ(slot < 0, saved.rowOf[a] < 0) << "assignment " << a;
      if (slot < 0)
        continue;
      ++kept;
      EXPECT_EQ(saved.rowOf[a] - saved.expertStart[e], slot);
      EXPECT_EQ(b.rowAssign[e * rows + slot], int32_t(a));
    }
    EXPECT_EQ(kept, saved.rows());
    for (size_t r = 0; r < E * size_t(rows); ++r) {
      int32_t a = b.rowAssign[r];
      if (a >= 0) {
        EXPECT_EQ(size_t(b.topIdx[a] * rows + b.slotOf[a]), r);
      }
    }
  }
  {
    Scratch ws(bytes);
    MoEBuffers b;
    carveMoE(s, ws.data(), b);
    b.bias = bias;
    VecF dx(N * H, kNaN);
    ASSERT_TRUE(moeBackwardInputPlan(ex, s, x.data(), router.data(), w1.data(),
                                     w2.data(), w3p, dy.data(), dx.data(), b));
    EXPECT_TRUE(ws.guardIntact());
    expectClose(dx, dxRef, "dx");
  }
  {
    Scratch ws(bytes);
    MoEBuffers b;
    carveMoE(s, ws.data(), b);
    b.bias = bias;
    VecF dr(E * H, kNaN), dw1(E * F * H, kNaN), dw2(E * H * F, kNaN),
        dw3(E * F * H, kNaN);
    ASSERT_TRUE(moeBackwardWeightPlan(
        ex, s, x.data(), router.data(), w1.data(), w2.data(), w3p, dy.data(),
        dr.data(), dw1.data(), dw2.data(), c.gated ? dw3.data() : nullptr, b));
    EXPECT_TRUE(ws.guardIntact());
    expectClose(dr, drRef, "drouter");
    expectClose(dw1, dw1Ref, "dw1");
    expectClose(dw2, dw2Ref, "dw2");
    if (c.gated)
      expectClose(dw3, dw3Ref, "dw3");
  }
}

constexpr Activation kGelu = Activation::Gelu, kSilu = Activation::Silu;
constexpr cpu::MoEScoring kSoftmax = cpu::MoEScoring::Softmax,
                          kSigmoid = cpu::MoEScoring::Sigmoid;

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoEPlanTest,
    ::testing::Values(
        // tokens hidden ffn E K capacity act renorm gated routerScale
        MoECase{16, 8, 12, 4, 2, 0, kGelu, true, false, 1.f},   // unlimited
        MoECase{16, 8, 12, 4, 2, 3, kSilu, true, true, 1.f},    // drops, SwiGLU
        MoECase{16, 8, 12, 4, 1, 5, kGelu, false, true, 1.f},   // Switch top-1
        MoECase{12, 8, 6, 4, 2, 5, kSilu, true, false, 0.f},    // ties, drops
        MoECase{10, 6, 5, 3, 3, 100, kGelu, false, false, 1.f}, // k = E, C > N
        MoECase{37, 40, 24, 8, 3, 14, kSilu, true, true, 2.f},  // hidden > warp
        MoECase{1, 4, 3, 2, 1, 1, kGelu, true, false, 1.f},     // one token
        // DeepSeek-V3: sigmoid, 4 groups of 2, the best 2, scaled gates.
        MoECase{16, 8, 12, 8, 3, 0, kSilu, true, true, 1.f, kSigmoid, 4, 2,
                2.5f},
        MoECase{16, 8, 12, 8, 2, 5, kSilu, false, false, 1.f, kSigmoid, 2, 1,
                1.f},
        // DeepSeek-V2: softmax group-limited greedy.
        MoECase{12, 8, 6, 6, 2, 0, kGelu, true, true, 1.f, kSoftmax, 3, 2,
                16.f},
        // DeepSeek-V3 with its load-balancing bias (noaux_tc), large enough
        // to change the choice: groups and top-k on the biased scores.
        MoECase{16, 8, 12, 8, 3, 0, kSilu, true, true, 1.f, kSigmoid, 4, 2,
                2.5f, 0.5f},
        MoECase{16, 8, 12, 8, 2, 5, kSilu, false, false, 1.f, kSigmoid, 1, 1,
                1.f, 0.3f}));

/// Group-limited sigmoid routing by hand: 8 experts in 4 groups of 2, the
/// best 2 groups by the sum of their two scores, the top-3 of those.
TEST(MoEMath, GroupLimitedSigmoidByHand) {
  cpu::MoEShape s;
  s.tokens = 1;
  s.hidden = 1;
  s.ffn = 1;
  s.experts = 8;
  s.topK = 3;
  s.scoring = cpu::MoEScoring::Sigmoid;
  s.groups = 4;
  s.topkGroup = 2;
  s.scale = 2.f;
  ASSERT_TRUE(cpu::isValid(s));
  // Expert 6 has the largest score, but group 3 (experts 6, 7) sums less
  // than groups 0 and 1.
  float logits[8] = {1.f, 1.f, 0.5f, 2.f, -3.f, -3.f, 3.f, -5.f};
  float probs[8], gates[3];
  std::copy(logits, logits + 8, probs);
  int32_t top[3];
  moeRouteToken(s, probs, nullptr, top, gates);
  auto sig = [](float x) { return 1.f / (1.f + std::exp(-x)); };
  for (int e = 0; e < 8; ++e)
    EXPECT_FLOAT_EQ(probs[e], sig(logits[e]));
  // Groups: 0: s(1)+s(1) = 1.462, 1: s(.5)+s(2) = 1.503, 2: 0.095,
  // 3: s(3)+s(-5) = 0.959. Best two: 1, 0. Top-3 of experts 0..3: 3, 0, 1.
  EXPECT_EQ(top[0], 3);
  EXPECT_EQ(top[1], 0);
  EXPECT_EQ(top[2], 1);
  float sum = sig(2.f) + 2 * sig(1.f);
  EXPECT_FLOAT_EQ(gates[0], 2.f * sig(2.f) / sum);
  EXPECT_FLOAT_EQ(gates[1], 2.f * sig(1.f) / sum);
  EXPECT_FLOAT_EQ(gates[2], 2.f * sig(1.f) / sum);

  // Softmax groups (DeepSeek-V2) score the max: groups 3 (expert 6) and 1
  // (expert 3); the top-3 of experts 2, 3, 6, 7 are 6, 3, 2.
  s.scoring = cpu::MoEScoring::Softmax;
  std::copy(logits, logits + 8, probs);
  moeRouteToken(s, probs, nullptr, top, gates);
  EXPECT_EQ(top[0], 6);
  EXPECT_EQ(top[1], 3);
  EXPECT_EQ(top[2], 2);
  float z = 0;
  for (float l : logits)
    z += std::exp(l);
  EXPECT_FLOAT_EQ(probs[6], std::exp(3.f) / z);
  float topSum = probs[6] + probs[3] + probs[2];
  EXPECT_FLOAT_EQ(gates[0], 2.f * probs[6] / topSum);
  EXPECT_FLOAT_EQ(gates[2], 2.f * probs[2] / topSum);
}

/// The balancing bias moves the choice, never the weights: the gates are
/// the unbiased scores of the chosen experts.
TEST(MoEMath, BiasChoosesButDoesNotWeigh) {
  cpu::MoEShape s;
  s.tokens = 1;
  s.hidden = 1;
  s.ffn = 1;
  s.experts = 8;
  s.topK = 2;
  s.scoring = cpu::MoEScoring::Sigmoid;
  float logits[8] = {1.f, 1.f, 0.5f, 2.f, -3.f, -3.f, 3.f, -5.f};
  float bias[8] = {0, 0, 0, 0, 0, 0, 0, 2.f};
  float scores[8], gates[2];
  std::copy(logits, logits + 8, scores);
  cpu::moeScoreToken(s, scores);
  int32_t top[2];
  cpu::moeSelectToken(s, scores, bias, top, gates);
  EXPECT_EQ(top[0], 7); // s(-5) + 2 > s(3)
  EXPECT_EQ(top[1], 6);
  EXPECT_FLOAT_EQ(gates[0], scores[7] / (scores[7] + scores[6]));
  cpu::moeSelectToken(s, scores, static_cast<const float *>(nullptr), top,
                      gates);
  EXPECT_EQ(top[0], 6);
  EXPECT_EQ(top[1], 3);
}

/// The sigmoid router gradient by hand: g_r = c s_r / S, dlogit_e =
/// dw_e s_e (1 - s_e) for the chosen experts, 0 elsewhere.
TEST(MoEMath, SigmoidRouterGradientByHand) {
  cpu::MoEShape s;
  s.experts = 3;
  s.topK = 2;
  s.scoring = cpu::MoEScoring::Sigmoid;
  s.scale = 3.f;
  double scores[3] = {0.2, 0.7, 0.6}, gates[2], dg[2] = {0.5, -1.0}, dl[3];
  int32_t top[2];
  cpu::moeSelectToken(s, scores, static_cast<const double *>(nullptr), top,
                      gates);
  ASSERT_EQ(top[0], 1);
  ASSERT_EQ(top[1], 2);
  cpu::moeRouterGradToken(s, scores, top, gates, dg, dl);
  const double S = 1.3, g1 = 3 * 0.7 / S, g2 = 3 * 0.6 / S,
               dot = 0.5 * g1 - 1.0 * g2;
  EXPECT_DOUBLE_EQ(dl[0], 0.0);
  EXPECT_NEAR(dl[1], (3 * 0.5 - dot) / S * 0.7 * 0.3, 1e-15);
  EXPECT_NEAR(dl[2], (3 * -1.0 - dot) / S * 0.6 * 0.4, 1e-15);
}


/// Top-k without a "taken" array: equal probabilities pick 0, 1, 2, ...
TEST(MoEMath, RouteTokenTiesGoToLowerIndex) {
  float probs[5] = {0.5f, 1.f, 0.5f, 1.f, 0.5f}, gates[4];
  int32_t top[4];
  cpu::MoEShape s;
  s.experts = 5;
  s.topK = 4;
  moeRouteToken(s, probs, nullptr, top, gates);
  EXPECT_EQ(top[0], 1);
  EXPECT_EQ(top[1], 3);
  EXPECT_EQ(top[2], 0);
  EXPECT_EQ(top[3], 2);
  EXPECT_FLOAT_EQ(gates[0] + gates[1] + gates[2] + gates[3], 1.f);
}

/// No tokens: the weight gradients are zeros, not left untouched.
TEST(MoEMath, WeightGradientsOfNoTokensAreZero) {
  cpu::MoEShape s;
  s.tokens = 0;
  s.hidden = 3;
  s.ffn = 2;
  s.experts = 2;
  s.topK = 1;
  VecF w(12, 1.f), dr(6, kNaN), dw1(12, kNaN), dw2(12, kNaN), dw3(12, kNaN);
  MoEBuffers b{};
  HostMoEExec ex;
  ASSERT_TRUE(moeBackwardWeightPlan(ex, s, nullptr, w.data(), w.data(),
                                    w.data(), w.data(), nullptr, dr.data(),
                                    dw1.data(), dw2.data(), dw3.data(), b));
  for (const VecF *g : {&dr, &dw1, &dw2, &dw3})
    for (float v : *g)
      EXPECT_EQ(v, 0.f);
}

} // namespace
