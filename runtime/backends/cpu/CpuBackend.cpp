//===- CpuBackend.cpp - The CPU reference backend -------------------------===//
//
// One adapter per op kind of the registry (rt/OpShapes.h; the collectives
// aside, which the executor runs) over runtime/backends/cpu/Kernels.h
// (float). The validator has checked every kernel's operands and types
// against the registry: the adapters read them without checking again.
// The gradient ops (docs/split-backward.md) receive forward values, not a saved
// struct: each adapter recomputes what the kernel's Saved struct needs (the
// statistics of a norm, the softmax of attention, the routing of a MoE, the
// logsumexp of the loss) by running the forward kernel into scratch memory.
// The recomputation is deterministic, so the bits equal a fused F+B.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Backend.h"

#include "KernelOperands.h"
#include "cpu/Blas.h"
#include "cpu/Kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

namespace pipeforge::rt {
namespace {

using namespace cpu;
using namespace ops;
using Ops = Operands;

/// Debug builds: a kernel's operand or result holds exactly the `n`
/// elements the kernel reads or writes (an absent optional one: `t` null
/// and `optional`). The program validator's rules (rt/OpShapes.h)
/// guarantee it for every program it accepts; a failure is a gap in them.
inline void assertElems(const TensorType *t, int64_t n, bool optional = false) {
  assert(((optional && !t) || (t && t->numElements() == n)) &&
         "kernel buffer size does not match the kernel's shape");
  (void)t, (void)n, (void)optional;
}
/// q [batch, seq, heads x d], k and v [batch, seq, kvHeads x d].
inline void assertAttention(const AttentionShape &s, const Operands &o) {
  int64_t rowsQ = s.batch * s.seq;
  assertElems(o.t(0), rowsQ * s.heads * s.headDim);
  assertElems(o.t(1), rowsQ * s.kvHeads * s.headDim);
  assertElems(o.t(2), rowsQ * s.kvHeads * s.valueDim());
  (void)rowsQ;
}
/// router [E, H], w1 (w3) [E, F, H], w2 [E, H, F].
inline void assertMoE(const MoEShape &s, const Operands &o) {
  assertElems(o.t(1), s.experts * s.hidden);
  assertElems(o.t(2), s.experts * s.ffn * s.hidden);
  assertElems(o.t(3), s.experts * s.hidden * s.ffn);
}

class CpuBackend final : public Backend {
public:
  CpuBackend();
  const char *name() const override { return "cpu"; }
  bool hostVisible() const override { return true; }
  ~CpuBackend() override {
    for (auto &[n, p] : cached)
      std::free(p);
  }
  void *alloc(int64_t bytes) override {
    size_t n = roundedBytes(bytes);
    void *p = allocBlock(n);
    if (p)
      std::memset(p, 0, n);
    return p;
  }
  void *allocUninit(int64_t bytes) override {
    return allocBlock(roundedBytes(bytes));
  }
  void free(void *p) override;
  void copyToHost(void *d, const void *s, int64_t b) override {
    if (b > 0 && d != s)
      std::memcpy(d, s, size_t(b));
  }
  void copyFromHost(void *d, const void *s, int64_t b) override {
    copyToHost(d, s, b);
  }
  void copy(void *d, const void *s, int64_t b) override {
    if (b > 0 && d != s)
      std::memmove(d, s, size_t(b));
  }
  void fillZero(void *p, int64_t b) override {
    if (b > 0)
      std::memset(p, 0, size_t(b));
  }
  void accumulate(float *d, const float *s, int64_t n) override {
    for (int64_t i = 0; i < n; ++i)
      d[i] += s[i];
  }
  void scale(float *x, float a, int64_t n) override {
    for (int64_t i = 0; i < n; ++i)
      x[i] *= a;
  }
  Status run(const KernelCall &call) override {
    const Kernel &k = *call.kernel;
    const Fn *fn = table.find(k.kind);
    if (!fn)
      return unknownOp(k, table, "cpu");
    return (*fn)(k, Ops{call});
  }

  bool canAddTo(const Kernel &k, size_t out) const override {
    // linear_bwd_weight's dW (one GEMM with beta = 1). Not its bias: the
    // column sums would add to the old value row by row, not once. The
    // embedding's table and positions: each row's sum added once.
    // The MoE's router and expert weights: GEMMs with beta = 1 over each
    // expert's rows, as linear_bwd_weight's.
    return (out == 0 && k.kind == OpKind::LinearBwdWeight) ||
           (out <= 1 && k.kind == OpKind::EmbeddingBwdWeight) ||
           (out <= 3 && k.kind == OpKind::MoEBwdWeight);
  }

  void timeGemms(bool on) override { detail::gemmClock().on = on; }
  GemmTime gemmTime() const override {
    const detail::GemmClock &c = detail::gemmClock();
    return {c.seconds, c.flops};
  }

  std::vector<std::string> ops() const { return table.names(); }

private:
  /// Large blocks freed are kept for the next request of the same size (a
  /// step allocates the same buffers every microbatch): the C library
  /// returns blocks over its mmap threshold (at most 32 MiB: a medium
  /// model's logits) to the kernel on free, and each new one page-faults
  /// in again (about 1% of a medium Llama step). Bounded by kCacheBytes;
  /// off under AddressSanitizer, whose use-after-free checks it would hide.
  static constexpr size_t kCacheMin = size_t(4) << 20;
  static constexpr size_t kCacheBytes = size_t(1) << 30;
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kCacheOn = false;
#else
  static constexpr bool kCacheOn = true;
#endif
  void *allocBlock(size_t n);
  std::multimap<size_t, void *> cached;        ///< free blocks by size
  std::unordered_map<void *, size_t> bigSizes; ///< live large blocks
  size_t cachedBytes = 0;
  std::mutex cacheMutex;

  /// At least one byte, a multiple of the 64-byte alignment.
  static size_t roundedBytes(int64_t bytes) {
    size_t n = size_t(bytes > 0 ? bytes : 1);
    return (n + 63) / 64 * 64;
  }
  using Fn = std::function<Status(const Kernel &, const Ops &)>;
  OpTable<Fn> table; ///< by Kernel::kind
  Workspace<float> ws;
  /// The MoE kernels' routing and expert buffers, kept across calls (moeF
  /// writes them whole: no clearing, no reallocation per call).
  MoESaved<float> moeSaved;
  std::vector<float> scratch;
  /// Attention's probabilities (and rotated q, k) of the call running: one
  /// struct reused by every attention kernel of the rank, so its buffers
  /// (batch x heads x seq^2 floats) are not allocated and cleared per call.
  AttentionSaved<float> attnSaved;

  float *tmp(int64_t n) {
    if ((int64_t)scratch.size() < n)
      scratch.resize(size_t(n));
    return scratch.data();
  }
  Status checkTargets(const Kernel &k, const int32_t *t, int64_t n,
                      int64_t limit, const char *what) {
    Index bad = firstInvalidIndex(t, n, limit);
    if (bad >= 0)
      return opError(k, std::string(what) + " #" + std::to_string(bad) + " = " +
                            std::to_string(t[bad]) + " is outside [0, " +
                            std::to_string(limit) + ")");
    return Status::ok();
  }
};

CpuBackend::CpuBackend() {
  // One BLAS thread per rank: OpenBLAS and oneDNN split products
  // differently for different thread counts, which changes float results,
  // and a pipelined run must add up exactly like its single-process
  // reference. (One MPI rank per core is the intended layout anyway.)
  // PIPEFORGE_BLAS_THREADS overrides it.
  int threads = 1;
  if (const char *env = std::getenv("PIPEFORGE_BLAS_THREADS"))
    threads = std::max(1, std::atoi(env));
  openblas_set_num_threads(threads);
  cpu::detail::gemmThreads().store(threads);

  //===--- forward ops ---===//
  // A zero constant: fills its result (whatever its shape).
  table[OpKind::Zeros] = [this](const Kernel &k, const Ops &o) -> Status {
    fillZero(o.o(0), o.ot(0)->numBytes());
    return Status::ok();
  };
  table[OpKind::Linear] = [this](const Kernel &k, const Ops &o) -> Status {
    LinearShape sh = linearShape(o);
    assertElems(o.t(0), sh.tokens * sh.in);
    assertElems(o.t(1), sh.out * sh.in);
    assertElems(o.f(2) ? o.t(2) : nullptr, sh.out, true);
    assertElems(o.ot(0), sh.tokens * sh.out);
    LinearParams<float> p{o.f(1), o.f(2)};
    LinearSaved<float> sv;
    linearF(sh, p, o.f(0), o.o(0), sv);
    return Status::ok();
  };
  table[OpKind::LayerNorm] = [this](const Kernel &k, const Ops &o) -> Status {
    NormShape sh = normShape(k, o);
    assertElems(o.t(1), sh.hidden);
    assertElems(o.t(2), sh.hidden);
    assertElems(o.ot(0), numel(o.t(0)));
    NormSaved<float> sv;
    layerNormF(sh, NormParams<float>{o.f(1), o.f(2)}, o.f(0), o.o(0), sv);
    return Status::ok();
  };
  table[OpKind::RMSNorm] = [this](const Kernel &k, const Ops &o) -> Status {
    NormShape sh = normShape(k, o);
    assertElems(o.t(1), sh.hidden);
    assertElems(o.ot(0), numel(o.t(0)));
    NormSaved<float> sv;
    rmsNormF(sh, NormParams<float>{o.f(1), nullptr}, o.f(0), o.o(0), sv);
    return Status::ok();
  };
  table[OpKind::Gelu] = [this](const Kernel &k, const Ops &o) -> Status {
    assertElems(o.ot(0), numel(o.t(0)));
    ActivationSaved<float> sv;
    geluF(numel(o.t(0)), o.f(0), o.o(0), sv);
    return Status::ok();
  };
  table[OpKind::Silu] = [this](const Kernel &k, const Ops &o) -> Status {
    assertElems(o.ot(0), numel(o.t(0)));
    ActivationSaved<float> sv;
    siluF(numel(o.t(0)), o.f(0), o.o(0), sv);
    return Status::ok();
  };
  table[OpKind::Add] = [this](const Kernel &k, const Ops &o) -> Status {
    assertElems(o.t(1), numel(o.t(0)));
    assertElems(o.ot(0), numel(o.t(0)));
    addF(numel(o.t(0)), o.f(0), o.f(1), o.o(0));
    return Status::ok();
  };
  table[OpKind::Dropout] = [this](const Kernel &k, const Ops &o) -> Status {
    DropoutShape sh;
    if (Status s = dropoutShape(k, o, sh); !s)
      return s;
    assertElems(o.ot(0), numel(o.t(0)));
    dropoutF(sh, o.f(0), o.o(0));
    return Status::ok();
  };
  table[OpKind::Mul] = [this](const Kernel &k, const Ops &o) -> Status {
    assertElems(o.t(1), numel(o.t(0)));
    assertElems(o.ot(0), numel(o.t(0)));
    MulSaved<float> sv;
    mulF(numel(o.t(0)), o.f(0), o.f(1), o.o(0), sv);
    return Status::ok();
  };
  table[OpKind::Embedding] = [this](const Kernel &k, const Ops &o) -> Status {
    EmbeddingShape sh = embeddingShape(k, o);
    assertElems(o.t(1), sh.vocab * sh.hidden);
    assert((!o.f(2) || numel(o.t(2)) >= sh.seq * sh.hidden) &&
           "fewer positions than the sequence length");
    assertElems(o.ot(0), sh.batch * sh.seq * sh.hidden);
    EmbeddingParams<float> p{o.f(1), o.f(2)};
    if (Status s = checkTargets(k, o.i32(0), numel(o.t(0)),
                                sh.vocab * sh.vocabShards, "token");
        !s)
      return s;
    EmbeddingSaved sv;
    embeddingF(sh, p, o.i32(0), o.o(0), sv);
    return Status::ok();
  };
  table[OpKind::Attention] = [this](const Kernel &k, const Ops &o) -> Status {
    AttentionShape sh;
    if (Status s = attentionShape(k, o, sh); !s)
      return s;
    assertAttention(sh, o);
    assertElems(o.ot(0), sh.batch * sh.seq * sh.heads * sh.valueDim());
    AttentionSaved<float> &sv = attnSaved;
    attentionF(sh, o.f(0), o.f(1), o.f(2), o.o(0), sv);
    return Status::ok();
  };
  table[OpKind::ConcatHeads] = [this](const Kernel &k, const Ops &o) -> Status {
    ConcatHeadsShape sh;
    if (Status s = concatHeadsShape(k, o, false, sh); !s)
      return s;
    assertElems(o.t(0), sh.rows * sh.heads * sh.lhsDim);
    assertElems(o.t(1), sh.rows * sh.rhsHeads() * sh.rhsDim);
    assertElems(o.ot(0), sh.rows * sh.heads * (sh.lhsDim + sh.rhsDim));
    concatHeadsF(sh, o.f(0), o.f(1), o.o(0));
    return Status::ok();
  };
  table[OpKind::MoE] = [this](const Kernel &k, const Ops &o) -> Status {
    MoEShape sh;
    MoEParams<float> p;
    if (Status s = moeForwardOperands(k, o, sh, p); !s)
      return s;
    assertMoE(sh, o);
    assertElems(o.ot(0), numel(o.t(0)));
    MoESaved<float> &sv = moeSaved;
    moeF(sh, p, o.f(0), o.o(0), sv);
    moeCountLoad(o.c, sv.topIdx.data(), int64_t(sv.topIdx.size()));
    return Status::ok();
  };
  table[OpKind::CrossEntropy] = [this](const Kernel &k,
                                       const Ops &o) -> Status {
    CrossEntropyShape sh = crossEntropyShape(o);
    assertElems(o.t(1), sh.tokens);
    assertElems(o.ot(0), 1);
    if (Status s = checkTargets(k, o.i32(1), sh.tokens, sh.vocab, "target"); !s)
      return s;
    CrossEntropySaved<float> sv;
    *o.o(0) = crossEntropyF(sh, o.f(0), o.i32(1), sv);
    return Status::ok();
  };

  //===--- gradient ops ---===//
  table[OpKind::LinearBwdInput] = [this](const Kernel &k,
                                         const Ops &o) -> Status {
    // (dy, W) -> dx
    LinearShape sh = linearBwdInputShape(o);
    assertElems(o.t(0), sh.tokens * sh.out);
    assertElems(o.t(1), sh.out * sh.in);
    assertElems(o.ot(0), sh.tokens * sh.in);
    LinearSaved<float> sv;
    sv.weight = o.f(1);
    linearB(sh, sv, o.f(0), o.o(0));
    return Status::ok();
  };
  table[OpKind::LinearBwdWeight] = [this](const Kernel &k,
                                          const Ops &o) -> Status {
    // (x, dy) -> dW, [db]
    LinearShape sh = linearBwdWeightShape(o);
    assertElems(o.t(0), sh.tokens * sh.in);
    assertElems(o.t(1), sh.tokens * sh.out);
    assertElems(o.ot(0), sh.out * sh.in);
    assertElems(o.o(1) ? o.ot(1) : nullptr, sh.out, true);
    LinearGrads<float> g{o.o(0), o.o(1)};
    // Added to (addTo): the GEMM's beta = 1 adds dy^T x to the gradient so
    // far, which is what the executor's accumulate of a cleared buffer gave
    // (the same bits while K = tokens fits one OpenBLAS K block). Else the
    // GEMM writes it (beta = 0): the same bits as adding to zeros, without
    // a pass to clear it (a step's first write of a parameter's gradient).
    g.overwriteWeight = !o.c.addsTo(0);
    if (g.dbias)
      std::memset(g.dbias, 0, size_t(sh.out) * 4);
    LinearSaved<float> sv;
    sv.x = o.f(0);
    linearW(sh, sv, o.f(1), g);
    return Status::ok();
  };
  auto normBwdInput = [this](bool layer) {
    return [this, layer](const Kernel &k, const Ops &o) -> Status {
      // (x, gamma, dy) -> dx
      NormShape sh = normShape(k, o);
      assertElems(o.t(1), sh.hidden);
      assertElems(o.t(2), numel(o.t(0)));
      assertElems(o.ot(0), numel(o.t(0)));
      NormSaved<float> sv;
      normStats(sh, layer, o.f(0), o.f(1), sv);
      if (layer)
        layerNormB(sh, sv, o.f(2), o.o(0));
      else
        rmsNormB(sh, sv, o.f(2), o.o(0));
      return Status::ok();
    };
  };
  auto normBwdWeight = [this](bool layer) {
    return [this, layer](const Kernel &k, const Ops &o) -> Status {
      // (x, dy) -> dgamma [, dbeta]
      NormShape sh = normShape(k, o);
      assertElems(o.t(1), numel(o.t(0)));
      assertElems(o.ot(0), sh.hidden);
      assertElems(layer ? o.ot(1) : nullptr, sh.hidden, !layer);
      NormSaved<float> sv;
      NormGrads<float> g{o.o(0), layer ? o.o(1) : nullptr};
      std::memset(g.dgamma, 0, size_t(sh.hidden) * 4);
      if (g.dbeta)
        std::memset(g.dbeta, 0, size_t(sh.hidden) * 4);
      normStats(sh, layer, o.f(0),
                /*gamma=*/static_cast<const float *>(nullptr),
                sv); // W reads x and the statistics only
      if (layer)
        layerNormW(sh, sv, o.f(1), g);
      else
        rmsNormW(sh, sv, o.f(1), g);
      return Status::ok();
    };
  };
  table[OpKind::LayerNormBwdInput] = normBwdInput(true);
  table[OpKind::RMSNormBwdInput] = normBwdInput(false);
  table[OpKind::LayerNormBwdWeight] = normBwdWeight(true);
  table[OpKind::RMSNormBwdWeight] = normBwdWeight(false);
  auto actBwd = [this](bool gelu) {
    return [this, gelu](const Kernel &k, const Ops &o) -> Status {
      // (x, dy) -> dx
      assertElems(o.t(1), numel(o.t(0)));
      assertElems(o.ot(0), numel(o.t(0)));
      ActivationSaved<float> sv;
      sv.x = o.f(0);
      if (gelu)
        geluB(numel(o.t(0)), sv, o.f(1), o.o(0));
      else
        siluB(numel(o.t(0)), sv, o.f(1), o.o(0));
      return Status::ok();
    };
  };
  table[OpKind::GeluBwd] = actBwd(true);
  table[OpKind::SiluBwd] = actBwd(false);
  table[OpKind::EmbeddingBwdWeight] = [this](const Kernel &k,
                                             const Ops &o) -> Status {
    // (tokens, dy) -> dtable [, dpos]
    EmbeddingShape sh = embeddingBwdShape(k, o);
    assertElems(o.t(1), sh.batch * sh.seq * sh.hidden);
    assertElems(o.ot(0), sh.vocab * sh.hidden);
    EmbeddingGrads<float> g{o.o(0), o.o(1)};
    // Added to (addTo, canAddTo): the rows' sums go straight into the
    // parameter's gradient, each added once, as the accumulate would.
    if (!o.c.addsTo(0))
      std::memset(g.dtable, 0, size_t(numel(o.ot(0))) * 4);
    assert((!g.dpos || numel(o.ot(1)) >= sh.seq * sh.hidden) &&
           "positions gradient smaller than seq x hidden");
    if (g.dpos && !o.c.addsTo(1))
      std::memset(g.dpos, 0, size_t(numel(o.ot(1))) * 4);
    if (Status s = checkTargets(k, o.i32(0), numel(o.t(0)),
                                sh.vocab * sh.vocabShards, "token");
        !s)
      return s;
    EmbeddingSaved sv;
    sv.tokens = o.i32(0);
    embeddingW(sh, sv, o.f(1), g);
    return Status::ok();
  };
  table[OpKind::AttentionBwd] = [this](const Kernel &k,
                                       const Ops &o) -> Status {
    // (q, k, v, dy) -> dq, dk, dv
    AttentionShape sh;
    if (Status s = attentionShape(k, o, sh); !s)
      return s;
    assertAttention(sh, o);
    const int64_t outElems = sh.batch * sh.seq * sh.heads * sh.valueDim();
    assertElems(o.t(3), outElems);
    for (size_t i = 0; i < 3; ++i)
      assertElems(o.ot(i), numel(o.t(i)));
    AttentionSaved<float> &sv = attnSaved;
    attentionF(sh, o.f(0), o.f(1), o.f(2), static_cast<float *>(nullptr),
               sv); // no output: P (and its dropout) only
    attentionB(sh, sv, o.f(3), o.o(0), o.o(1), o.o(2), ws);
    return Status::ok();
  };
  table[OpKind::ConcatHeadsBwd] = [this](const Kernel &k,
                                         const Ops &o) -> Status {
    // dy -> dlhs, drhs
    ConcatHeadsShape sh;
    if (Status s = concatHeadsShape(k, o, true, sh); !s)
      return s;
    assertElems(o.t(0), sh.rows * sh.heads * (sh.lhsDim + sh.rhsDim));
    assertElems(o.ot(0), sh.rows * sh.heads * sh.lhsDim);
    assertElems(o.ot(1), sh.rows * sh.rhsHeads() * sh.rhsDim);
    concatHeadsB(sh, o.f(0), o.o(0), o.o(1));
    return Status::ok();
  };
  auto moeBwd = [this](bool weight) {
    return [this, weight](const Kernel &k, const Ops &o) -> Status {
      MoEShape sh;
      MoEParams<float> p;
      const float *dy;
      if (Status s = moeGradOperands(k, o, weight, sh, p, dy); !s)
        return s;
      assertMoE(sh, o);
      assertElems(o.t(o.nin() - 1), numel(o.t(0)));
      if (!weight)
        assertElems(o.ot(0), numel(o.t(0)));
      for (size_t i = 0; weight && i < 4; ++i) // dparam has the param's size
        assertElems(o.o(i) ? o.ot(i) : nullptr, numel(o.t(i + 1)), i == 3);
      MoESaved<float> &sv = moeSaved;
      moeF(sh, p, o.f(0), tmp(numel(o.t(0))), sv);
      if (!weight) {
        moeB(sh, sv, dy, o.o(0), ws);
        return Status::ok();
      }
      MoEGrads<float> g{o.o(0), o.o(1), o.o(2), p.w3 ? o.o(3) : nullptr};
      // moeW's GEMMs add (beta = 1): to the parameters' gradients
      // themselves where the executor passes them (addTo), else to zeros.
      for (int i = 0; i < 4; ++i)
        if (o.o(i) && !o.c.addsTo(size_t(i)))
          std::memset(o.o(i), 0, size_t(numel(o.ot(i))) * 4);
      moeW(sh, sv, dy, g, ws);
      return Status::ok();
    };
  };
  table[OpKind::MoEBwdInput] = moeBwd(false);
  table[OpKind::MoEBwdWeight] = moeBwd(true);
  table[OpKind::CrossEntropyBwd] = [this](const Kernel &k,
                                          const Ops &o) -> Status {
    // (logits, targets, dloss) -> dlogits
    CrossEntropyShape sh = crossEntropyShape(o);
    assertElems(o.t(1), sh.tokens);
    assertElems(o.t(2), 1);
    assertElems(o.ot(0), numel(o.t(0)));
    if (Status s = checkTargets(k, o.i32(1), sh.tokens, sh.vocab, "target"); !s)
      return s;
    CrossEntropySaved<float> sv;
    crossEntropyF(sh, o.f(0), o.i32(1), sv);
    crossEntropyB(sh, sv, *o.f(2), o.o(0));
    return Status::ok();
  };
}

} // namespace

void *CpuBackend::allocBlock(size_t n) {
  if (!kCacheOn || n < kCacheMin)
    return std::aligned_alloc(64, n);
  std::lock_guard<std::mutex> lock(cacheMutex);
  void *p = nullptr;
  if (auto it = cached.find(n); it != cached.end()) {
    p = it->second;
    cached.erase(it);
    cachedBytes -= n;
  } else {
    p = std::aligned_alloc(64, n);
  }
  if (p)
    bigSizes[p] = n;
  return p;
}

void CpuBackend::free(void *p) {
  if (!p)
    return;
  if (kCacheOn) {
    std::lock_guard<std::mutex> lock(cacheMutex);
    if (auto it = bigSizes.find(p); it != bigSizes.end()) {
      size_t n = it->second;
      bigSizes.erase(it);
      if (cachedBytes + n <= kCacheBytes) {
        cached.emplace(n, p);
        cachedBytes += n;
        return;
      }
    }
  }
  std::free(p);
}

std::unique_ptr<Backend> createCpuBackend() {
  return std::make_unique<CpuBackend>();
}

std::vector<std::string> cpuBackendOps() { return CpuBackend().ops(); }

} // namespace pipeforge::rt
