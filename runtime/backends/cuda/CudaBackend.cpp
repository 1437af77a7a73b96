//===- CudaBackend.cpp - The CUDA backend ---------------------------------===//
//
// One adapter per op kind, the CPU backend's set (CpuBackend.cpp),
// over the kernel families of runtime/backends/cuda: GEMMs through cuBLAS
// (GemmCtx.cu), norms, activations, embedding, loss and AdamW
// (RowKernels.cu), attention (AttentionKernels.cu) and MoE
// (MoEKernels.cu). Operands and shapes are read by the same code as on the
// CPU (runtime/backends/KernelOperands.h), so a bad kernel gets the same
// message; the validator has checked operands and types against the op
// registry (rt/OpShapes.h) before, so the adapters do not check them again.
//
// Every call is queued on the backend's compute stream (a non-blocking
// stream on its device); receives of the --local-ranks transport run on a
// second, communication stream (copyOnCommStream), ordered by events, so
// they overlap with compute. Buffers come from the device's stream-ordered
// memory pool, so allocation and release never synchronize the device.
// Only copyToHost / copyFromHost / synchronize / takeAsyncError wait.
// Errors of the void-returning helpers (copy, accumulate, ...) and index
// errors that kernels record in the device error word surface in
// takeAsyncError(), which the executor calls after every step.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/CudaBackend.h"

#include "cuda/AttentionKernels.h"
#include "cuda/GemmCtx.h"
#include "cuda/MoEKernels.h"
#include "cuda/RowKernels.h"
#include "KernelOperands.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>

namespace pipeforge::rt {
namespace {

using namespace cpu;
using namespace ops;
using cuda::cudaStatus;

class CudaBackend final : public Backend {
public:
  ~CudaBackend() override;
  static Expected<std::unique_ptr<Backend>> create(const CudaBackendOptions &o);

  const char *name() const override { return "cuda"; }
  bool hostVisible() const override { return false; }
  int device() const override { return dev; }
  int64_t freeMemory() const override {
    size_t freeB = 0, totalB = 0;
    if (cudaSetDevice(dev) != cudaSuccess ||
        cudaMemGetInfo(&freeB, &totalB) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return int64_t(freeB);
  }
  void *computeStream() override { return ctx.stream; }

  void *alloc(int64_t bytes) override {
    void *p = nullptr;
    size_t n = size_t(std::max<int64_t>(bytes, 1) + 255) / 256 * 256;
    if (!note(
            cudaStatus(cudaMallocAsync(&p, n, ctx.stream), "cudaMallocAsync")))
      return nullptr;
    note(cudaStatus(cudaMemsetAsync(p, 0, n, ctx.stream), "cudaMemsetAsync"));
    return p;
  }
  void free(void *p) override {
    if (p)
      note(cudaStatus(cudaFreeAsync(p, ctx.stream), "cudaFreeAsync"));
  }
  void copyToHost(void *hostDst, const void *src, int64_t bytes) override {
    syncCopy(hostDst, src, bytes, cudaMemcpyDeviceToHost, "device to host");
  }
  void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) override {
    syncCopy(dst, hostSrc, bytes, cudaMemcpyHostToDevice, "host to device");
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    // cudaMemcpyDefault: the direction follows from the pointers.
    if (bytes > 0 && dst != src)
      note(cudaStatus(cudaMemcpyAsync(dst, src, size_t(bytes),
                                      cudaMemcpyDefault, ctx.stream),
                      "cudaMemcpyAsync (device to device)"));
  }
  void fillZero(void *p, int64_t bytes) override {
    if (bytes > 0)
      note(cudaStatus(cudaMemsetAsync(p, 0, size_t(bytes), ctx.stream),
                      "cudaMemsetAsync"));
  }
  void accumulate(float *dst, const float *src, int64_t n) override {
    note(cuda::accumulate(ctx, n, dst, src));
  }
  void scale(float *x, float a, int64_t n) override {
    note(cuda::scale(ctx, n, x, a));
  }
  bool runsOptimizer() const override { return true; }
  Status adamw(const AdamWCoeffs &c, int64_t n, float *theta, float *m,
               float *v, const float *grad, bool undo) override {
    return cuda::adamwStep(ctx, c, n, theta, m, v, grad, undo);
  }
  Status sumSquares(const float *x, int64_t n, double *out) override {
    return cuda::sumSquares(ctx, n, x, out);
  }
  Transfers transfers() const override { return moved; }
  void synchronize() override {
    note(
        cudaStatus(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize"));
  }
  Status takeAsyncError() override;

  void *recordEvent() override { return recordOn(ctx.stream); }
  bool eventDone(void *ev) override {
    if (!ev)
      return true;
    // Called by other ranks' threads too (a sender polling the receiver's
    // copy), so no bookkeeping here: a failed copy counts as done and its
    // error surfaces on the receiver's own stream.
    if (cudaEventQuery(static_cast<cudaEvent_t>(ev)) != cudaErrorNotReady)
      return true;
    (void)cudaGetLastError(); // "not ready" is no error of the next launch
    return false;
  }
  void waitEvent(void *ev) override {
    waitOn(ctx.stream, static_cast<cudaEvent_t>(ev));
  }
  void releaseEvent(void *ev) override {
    if (ev)
      cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  }
  void *allocHost(int64_t bytes) override {
    void *p = nullptr;
    if (!note(cudaStatus(
            cudaMallocHost(&p, size_t(std::max<int64_t>(bytes, 1))),
            "cudaMallocHost")))
      return nullptr;
    return p;
  }
  void freeHost(void *p) override {
    if (p)
      note(cudaStatus(cudaFreeHost(p), "cudaFreeHost"));
  }
  /// Activation offload: on the communication stream, after `after`.
  void *copyHostAsync(void *dst, const void *src, int64_t bytes, bool toHost,
                      void *after) override {
    waitOn(commStream, static_cast<cudaEvent_t>(after));
    if (bytes > 0) {
      (toHost ? moved.toHost : moved.toDevice) += bytes;
      note(cudaStatus(cudaMemcpyAsync(dst, src, size_t(bytes),
                                      toHost ? cudaMemcpyDeviceToHost
                                             : cudaMemcpyHostToDevice,
                                      commStream),
                      "cudaMemcpyAsync (activation offload)"));
    }
    return recordOn(commStream);
  }
  void *copyOnCommStream(void *dst, const void *src, int64_t bytes, void *after,
                         void *dstReady) override {
    waitOn(commStream, static_cast<cudaEvent_t>(dstReady));
    waitOn(commStream, static_cast<cudaEvent_t>(after));
    if (bytes > 0)
      note(cudaStatus(cudaMemcpyAsync(dst, src, size_t(bytes),
                                      cudaMemcpyDefault, commStream),
                      "cudaMemcpyAsync (communication stream)"));
    return recordOn(commStream);
  }

  Status run(const KernelCall &call) override {
    const Kernel &k = *call.kernel;
    const Fn *fn = table.find(k.kind);
    if (!fn)
      return unknownOp(k, table, "cuda");
    if (Status s = (*fn)(k, Operands{call}); !s)
      return s;
    return cuda::launchStatus(k.op.c_str());
  }

  std::vector<std::string> ops() const { return table.names(); }

  CudaBackend(); ///< the op table only (cudaBackendOps)

private:
  using Fn = std::function<Status(const Kernel &, const Operands &)>;
  OpTable<Fn> table; ///< by Kernel::kind
  int dev = 0;
  cuda::GemmCtx ctx;
  void *ws = nullptr; ///< attention / MoE workspace, grown on demand
  size_t wsBytes = 0;
  cudaStream_t commStream = nullptr; ///< receives (copyOnCommStream)
  Status pending = Status::ok();     ///< first error of a void-returning call
  Transfers moved;                   ///< host <-> device bytes (syncCopy)

  /// A new event recorded on `s` (null on failure, kept for
  /// takeAsyncError).
  cudaEvent_t recordOn(cudaStream_t s) {
    cudaEvent_t e = nullptr;
    if (!note(cudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                         "cudaEventCreate")))
      return nullptr;
    if (!note(cudaStatus(cudaEventRecord(e, s), "cudaEventRecord"))) {
      cudaEventDestroy(e);
      return nullptr;
    }
    return e;
  }
  void waitOn(cudaStream_t s, cudaEvent_t e) {
    if (e)
      note(cudaStatus(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent"));
  }

  /// Keeps the first failure for takeAsyncError(); true when `s` is ok.
  /// A failed CUDA call also sets the thread's last error: it is taken here,
  /// so the next kernel's launch check does not report it again.
  bool note(Status s) {
    bool ok = bool(s);
    if (!ok) {
      (void)cudaGetLastError();
      if (pending)
        pending = std::move(s);
    }
    return ok;
  }
  /// A copy ordered on the compute stream that returns once it is done.
  void syncCopy(void *dst, const void *src, int64_t bytes, cudaMemcpyKind kind,
                const char *what) {
    if (bytes <= 0)
      return;
    (kind == cudaMemcpyDeviceToHost ? moved.toHost : moved.toDevice) += bytes;
    note(cudaStatus(cudaMemcpyAsync(dst, src, size_t(bytes), kind, ctx.stream),
                    (std::string("cudaMemcpyAsync (") + what + ")").c_str()));
    note(
        cudaStatus(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize"));
  }
  /// Resets the device error word, ordered on the compute stream (a
  /// cudaMemset on the legacy stream would not be ordered with it).
  Status clearErrorWord() {
    return cudaStatus(cudaMemcpyAsync(ctx.errorWord, cuda::kDeviceErrorClear,
                                      sizeof(cuda::kDeviceErrorClear),
                                      cudaMemcpyHostToDevice, ctx.stream),
                      "cudaMemcpyAsync (error word)");
  }
  /// The workspace, at least `bytes` (stream-ordered, so earlier kernels
  /// still reading the old one are unaffected).
  Expected<void *> workspace(size_t bytes) {
    if (Status s =
            cuda::growScratch(ws, wsBytes, bytes, ctx.stream, "workspace");
        !s)
      return s;
    return ws;
  }
  /// A moe kernel's workspace, followed by its load-balancing bias [E]
  /// (copied from the host `bias`, stream-ordered) and its load [E]
  /// (zeroed) when the call has them.
  struct MoEWorkspace {
    void *ws = nullptr;
    const float *bias = nullptr;
    float *load = nullptr;
  };
  Expected<MoEWorkspace> moeWorkspace(const MoEShape &sh, const float *bias,
                                      const float *load) {
    const size_t base = cuda::moeWorkspaceBytes(sh);
    const size_t vec = (size_t(sh.experts) * 4 + 255) / 256 * 256;
    auto w = workspace(base + (bias ? vec : 0) + (load ? vec : 0));
    if (!w)
      return w.status();
    MoEWorkspace m;
    m.ws = *w;
    char *tail = static_cast<char *>(*w) + base;
    if (bias) {
      float *b = reinterpret_cast<float *>(tail);
      copyFromHost(b, bias, sh.experts * 4);
      m.bias = b;
      tail += vec;
    }
    if (load) {
      m.load = reinterpret_cast<float *>(tail);
      fillZero(m.load, sh.experts * 4);
    }
    return m;
  }
  /// The forward's device load added to the call's host load.
  Status moeLoadToHost(const MoEShape &sh, const MoEWorkspace &w, float *load) {
    if (!load || !w.load)
      return Status::ok();
    std::vector<float> got(size_t(sh.experts));
    copyToHost(got.data(), w.load, sh.experts * 4);
    for (size_t e = 0; e < got.size(); ++e)
      load[e] += got[e];
    return Status::ok();
  }
  void addForwardOps();
  void addGradientOps();
};

Expected<std::unique_ptr<Backend>>
CudaBackend::create(const CudaBackendOptions &o) {
  std::string why;
  int n = cudaDeviceCount(&why);
  if (n == 0)
    return Status::error("--backend cuda: no CUDA device (" + why + ")");
  if (o.device < 0 || o.device >= n)
    return Status::error("--backend cuda: device " + std::to_string(o.device) +
                         " does not exist (this machine has " +
                         std::to_string(n) + ")");
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->dev = o.device;
  b->ctx.precision = o.precision;
  std::string where = " (device " + std::to_string(o.device) + ")";
  if (Status s = cudaStatus(cudaSetDevice(o.device), "cudaSetDevice"); !s)
    return Status::error(s.message() + where);
  if (Status s = cudaStatus(
          cudaStreamCreateWithFlags(&b->ctx.stream, cudaStreamNonBlocking),
          "cudaStreamCreate");
      !s)
    return Status::error(s.message() + where);
  if (Status s = cudaStatus(
          cudaStreamCreateWithFlags(&b->commStream, cudaStreamNonBlocking),
          "cudaStreamCreate (communication)");
      !s)
    return Status::error(s.message() + where);
  // Keep freed pool memory for reuse instead of returning it at every
  // synchronization: the executor allocates per message and per step.
  // And never let an allocation on one stream reuse a block freed on
  // another by waiting for that stream (the pool's default): a compute or
  // host-copy stream would then wait, unseen, on a communication stream
  // (the NCCL transport frees staging buffers on its channel streams).
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, o.device) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    int no = 0;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies,
                            &no);
  }
  if (Status s = cuda::cublasStatus(cublasCreate(&b->ctx.blas), "cublasCreate");
      !s)
    return Status::error(s.message() + where);
  if (Status s = cuda::cublasStatus(cublasSetStream(b->ctx.blas, b->ctx.stream),
                                    "cublasSetStream");
      !s)
    return s;
  // True fp32 products: no TF32 in the fp32 mode.
  if (Status s = cuda::cublasStatus(
          cublasSetMathMode(b->ctx.blas, CUBLAS_DEFAULT_MATH),
          "cublasSetMathMode");
      !s)
    return s;
  if (Status s = cudaStatus(
          cudaMalloc(&b->ctx.errorWord, cuda::kDeviceErrorInts * sizeof(int)),
          "cudaMalloc (error word)");
      !s)
    return Status::error(s.message() + where);
  if (Status s = b->clearErrorWord(); !s)
    return s;
  return std::unique_ptr<Backend>(std::move(b));
}

CudaBackend::~CudaBackend() {
  if (!ctx.stream)
    return; // the op-table-only instance
  cudaSetDevice(dev);
  if (ws)
    cudaFreeAsync(ws, ctx.stream);
  if (ctx.bf16Scratch)
    cudaFreeAsync(ctx.bf16Scratch, ctx.stream);
  cudaStreamSynchronize(ctx.stream);
  if (commStream) {
    cudaStreamSynchronize(commStream);
    cudaStreamDestroy(commStream);
  }
  if (ctx.errorWord)
    cudaFree(ctx.errorWord);
  if (ctx.blas)
    cublasDestroy(ctx.blas);
  cudaStreamDestroy(ctx.stream);
}

Status CudaBackend::takeAsyncError() {
  Status s = std::move(pending);
  pending = Status::ok();
  if (!s)
    return s;
  if (Status e = cudaStatus(cudaStreamSynchronize(ctx.stream),
                            "a queued CUDA kernel failed");
      !e)
    return e;
  int w[cuda::kDeviceErrorInts] = {0, 0, 0, 0};
  if (Status e = cudaStatus(
          cudaMemcpy(w, ctx.errorWord, sizeof(w), cudaMemcpyDeviceToHost),
          "cudaMemcpy (error word)");
      !e)
    return e;
  if (w[0] == cuda::DeviceErrorNone)
    return Status::ok();
  if (Status e = clearErrorWord(); !e)
    return e;
  const char *op = "?", *what = "index";
  switch (w[0]) {
  case cuda::DeviceErrorEmbeddingToken:
    op = "embedding", what = "token";
    break;
  case cuda::DeviceErrorEmbeddingBwdToken:
    op = "embedding_bwd_weight", what = "token";
    break;
  case cuda::DeviceErrorCrossEntropyTarget:
    op = "cross_entropy", what = "target";
    break;
  case cuda::DeviceErrorCrossEntropyBwdTarget:
    op = "cross_entropy_bwd", what = "target";
    break;
  default:
    break;
  }
  // The CPU backend's message for the same input.
  return Status::error(std::string("kernel '") + op + "': " + what + " #" +
                       std::to_string(cuda::deviceErrorElement(w)) + " = " +
                       std::to_string(cuda::deviceErrorValue(w)) +
                       " is outside [0, " + std::to_string(w[1]) + ")");
}

CudaBackend::CudaBackend() {
  addForwardOps();
  addGradientOps();
}

void CudaBackend::addForwardOps() {
  // A zero constant: fills its result (whatever its shape).
  table[OpKind::Zeros] = [this](const Kernel &k, const Operands &o) -> Status {
    fillZero(o.o(0), o.ot(0)->numBytes());
    return Status::ok();
  };
  table[OpKind::Linear] = [this](const Kernel &k, const Operands &o) -> Status {
    // (x, W, [b]) -> y = x W^T (+ b)
    LinearShape sh = linearShape(o);
    float beta = 0.0f;
    if (sh.hasBias) {
      if (Status s = cuda::biasRows(ctx, sh.tokens, sh.out, o.f(2), o.o(0)); !s)
        return s;
      beta = 1.0f;
    }
    return cuda::gemm(ctx, false, true, sh.tokens, sh.out, sh.in, 1.0f, o.f(0),
                      sh.in, o.f(1), sh.in, beta, o.o(0), sh.out);
  };
  table[OpKind::LayerNorm] = [this](const Kernel &k,
                                    const Operands &o) -> Status {
    return cuda::layerNormForward(ctx, normShape(k, o), o.f(0), o.f(1), o.f(2),
                                  o.o(0));
  };
  table[OpKind::RMSNorm] = [this](const Kernel &k,
                                  const Operands &o) -> Status {
    return cuda::rmsNormForward(ctx, normShape(k, o), o.f(0), o.f(1), o.o(0));
  };
  auto act = [this](Activation a) {
    return [this, a](const Kernel &k, const Operands &o) -> Status {
      return cuda::activationForward(ctx, a, numel(o.t(0)), o.f(0), o.o(0));
    };
  };
  table[OpKind::Gelu] = act(Activation::Gelu);
  table[OpKind::Silu] = act(Activation::Silu);
  table[OpKind::Add] = [this](const Kernel &k, const Operands &o) -> Status {
    return cuda::addForward(ctx, numel(o.t(0)), o.f(0), o.f(1), o.o(0));
  };
  table[OpKind::Dropout] = [this](const Kernel &k,
                                  const Operands &o) -> Status {
    DropoutShape sh;
    if (Status s = dropoutShape(k, o, sh); !s)
      return s;
    return cuda::dropoutForward(ctx, sh, o.f(0), o.o(0));
  };
  table[OpKind::Mul] = [this](const Kernel &k, const Operands &o) -> Status {
    return cuda::mulForward(ctx, numel(o.t(0)), o.f(0), o.f(1), o.o(0));
  };
  table[OpKind::Embedding] = [this](const Kernel &k,
                                    const Operands &o) -> Status {
    // (tokens, table, [pos]); bad tokens: takeAsyncError()
    EmbeddingShape sh = embeddingShape(k, o);
    return cuda::embeddingForward(ctx, sh, o.f(1), o.f(2), o.i32(0), o.o(0));
  };
  table[OpKind::Attention] = [this](const Kernel &k,
                                    const Operands &o) -> Status {
    AttentionShape sh;
    if (Status s = attentionShape(k, o, sh); !s)
      return s;
    auto w = workspace(cuda::attentionWorkspaceBytes(sh));
    if (!w)
      return w.status();
    return cuda::attentionForward(ctx, sh, o.f(0), o.f(1), o.f(2), o.o(0), *w);
  };
  table[OpKind::ConcatHeads] = [this](const Kernel &k,
                                      const Operands &o) -> Status {
    ConcatHeadsShape sh;
    if (Status s = concatHeadsShape(k, o, false, sh); !s)
      return s;
    return cuda::concatHeadsForward(ctx, sh, o.f(0), o.f(1), o.o(0));
  };
  table[OpKind::ConcatHeadsBwd] = [this](const Kernel &k,
                                         const Operands &o) -> Status {
    // dy -> dlhs, drhs
    ConcatHeadsShape sh;
    if (Status s = concatHeadsShape(k, o, true, sh); !s)
      return s;
    return cuda::concatHeadsBackward(ctx, sh, o.f(0), o.o(0), o.o(1));
  };
  table[OpKind::MoE] = [this](const Kernel &k, const Operands &o) -> Status {
    MoEShape sh;
    MoEParams<float> p;
    if (Status s = moeForwardOperands(k, o, sh, p); !s)
      return s;
    auto w = moeWorkspace(sh, p.bias, o.c.moeLoad);
    if (!w)
      return w.status();
    if (Status s = cuda::moeForward(ctx, sh, o.f(0), p.router, p.w1, p.w2, p.w3,
                                    o.o(0), w->ws, w->bias, w->load);
        !s)
      return s;
    return moeLoadToHost(sh, *w, o.c.moeLoad);
  };
  table[OpKind::CrossEntropy] = [this](const Kernel &k,
                                       const Operands &o) -> Status {
    // (logits, targets) -> mean loss; bad targets: takeAsyncError()
    return cuda::crossEntropyForward(ctx, crossEntropyShape(o), o.f(0),
                                     o.i32(1), o.o(0));
  };
}

void CudaBackend::addGradientOps() {
  table[OpKind::LinearBwdInput] = [this](const Kernel &k,
                                         const Operands &o) -> Status {
    // (dy, W) -> dx = dy W
    LinearShape sh = linearBwdInputShape(o);
    return cuda::gemm(ctx, false, false, sh.tokens, sh.in, sh.out, 1.0f, o.f(0),
                      sh.out, o.f(1), sh.in, 0.0f, o.o(0), sh.in);
  };
  table[OpKind::LinearBwdWeight] = [this](const Kernel &k,
                                          const Operands &o) -> Status {
    // (x, dy) -> dW = dy^T x, [db = column sums of dy]
    LinearShape sh = linearBwdWeightShape(o);
    if (Status s =
            cuda::gemm(ctx, true, false, sh.out, sh.in, sh.tokens, 1.0f, o.f(1),
                       sh.out, o.f(0), sh.in, 0.0f, o.o(0), sh.in);
        !s)
      return s;
    if (!sh.hasBias)
      return Status::ok();
    return cuda::columnSums(ctx, sh.tokens, sh.out, o.f(1), o.o(1));
  };
  auto normBwdInput = [this](bool layer) {
    return [this, layer](const Kernel &k, const Operands &o) -> Status {
      // (x, gamma, dy) -> dx
      return cuda::normBackwardInput(ctx, normShape(k, o), layer, o.f(0),
                                     o.f(1), o.f(2), o.o(0));
    };
  };
  auto normBwdWeight = [this](bool layer) {
    return [this, layer](const Kernel &k, const Operands &o) -> Status {
      // (x, dy) -> dgamma [, dbeta]
      return cuda::normBackwardWeight(ctx, normShape(k, o), layer, o.f(0),
                                      o.f(1), o.o(0), layer ? o.o(1) : nullptr);
    };
  };
  table[OpKind::LayerNormBwdInput] = normBwdInput(true);
  table[OpKind::RMSNormBwdInput] = normBwdInput(false);
  table[OpKind::LayerNormBwdWeight] = normBwdWeight(true);
  table[OpKind::RMSNormBwdWeight] = normBwdWeight(false);
  auto actBwd = [this](Activation a) {
    return [this, a](const Kernel &k, const Operands &o) -> Status {
      // (x, dy) -> dx
      return cuda::activationBackward(ctx, a, numel(o.t(0)), o.f(0), o.f(1),
                                      o.o(0));
    };
  };
  table[OpKind::GeluBwd] = actBwd(Activation::Gelu);
  table[OpKind::SiluBwd] = actBwd(Activation::Silu);
  table[OpKind::EmbeddingBwdWeight] = [this](const Kernel &k,
                                             const Operands &o) -> Status {
    // (tokens, dy) -> dtable [, dpos]
    EmbeddingShape sh = embeddingBwdShape(k, o);
    // Rows of a larger gradient than the kernel writes are zero, as on the
    // CPU (which clears the whole result first).
    fillZero(o.o(0), numel(o.ot(0)) * 4);
    if (o.o(1))
      fillZero(o.o(1), numel(o.ot(1)) * 4);
    return cuda::embeddingBackwardWeight(ctx, sh, o.i32(0), o.f(1), o.o(0),
                                         o.o(1));
  };
  table[OpKind::AttentionBwd] = [this](const Kernel &k,
                                       const Operands &o) -> Status {
    // (q, k, v, dy) -> dq, dk, dv
    AttentionShape sh;
    if (Status s = attentionShape(k, o, sh); !s)
      return s;
    auto w = workspace(cuda::attentionWorkspaceBytes(sh));
    if (!w)
      return w.status();
    return cuda::attentionBackward(ctx, sh, o.f(0), o.f(1), o.f(2), o.f(3),
                                   o.o(0), o.o(1), o.o(2), *w);
  };
  auto moeBwd = [this](bool weight) {
    return [this, weight](const Kernel &k, const Operands &o) -> Status {
      MoEShape sh;
      MoEParams<float> p;
      const float *dy;
      if (Status s = moeGradOperands(k, o, weight, sh, p, dy); !s)
        return s;
      auto w = moeWorkspace(sh, p.bias, nullptr);
      if (!w)
        return w.status();
      if (!weight)
        return cuda::moeBackwardInput(ctx, sh, o.f(0), p.router, p.w1, p.w2,
                                      p.w3, dy, o.o(0), w->ws, w->bias);
      return cuda::moeBackwardWeight(ctx, sh, o.f(0), p.router, p.w1, p.w2,
                                     p.w3, dy, o.o(0), o.o(1), o.o(2),
                                     p.w3 ? o.o(3) : nullptr, w->ws, w->bias);
    };
  };
  table[OpKind::MoEBwdInput] = moeBwd(false);
  table[OpKind::MoEBwdWeight] = moeBwd(true);
  table[OpKind::CrossEntropyBwd] = [this](const Kernel &k,
                                          const Operands &o) -> Status {
    // (logits, targets, dloss) -> dlogits
    return cuda::crossEntropyBackward(ctx, crossEntropyShape(o), o.f(0),
                                      o.i32(1), o.f(2), o.o(0));
  };
}

} // namespace

int cudaDeviceCount(std::string *why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why)
      *why = cudaGetErrorString(e);
    cudaGetLastError(); // clear it
    return 0;
  }
  if (n == 0 && why)
    *why = "the driver reports no devices";
  return n;
}

Expected<std::unique_ptr<Backend>>
createCudaBackend(const CudaBackendOptions &o) {
  return CudaBackend::create(o);
}

std::vector<std::string> cudaBackendOps() { return CudaBackend().ops(); }

Expected<GemmPrecision> parseGemmPrecision(const std::string &s) {
  if (s == "fp32")
    return GemmPrecision::FP32;
  if (s == "bf16")
    return GemmPrecision::BF16;
  return Status::error("unknown GEMM precision '" + s +
                       "' (expected fp32 or bf16)");
}

} // namespace pipeforge::rt
