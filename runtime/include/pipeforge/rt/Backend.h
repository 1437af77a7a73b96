//===- Backend.h - Compute backend interface --------------------*- C++ -*-===//
//
// What the executor needs from a device: buffers, copies, a few elementwise
// helpers for gradient accumulation, and running one Kernel of a Function.
// The executor never knows the concrete backend (CPU here; CUDA later).
//
// Buffers are opaque device pointers. On a host-visible backend (CPU) they
// are plain host memory and the executor may read them directly.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_BACKEND_H
#define PIPEFORGE_RT_BACKEND_H

#include "pipeforge/rt/AdamWMath.h"
#include "pipeforge/rt/Program.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

/// The operands of one kernel call: device pointers with their types, in the
/// order of Kernel::inputs / Kernel::outputs (null: absent optional operand
/// or result).
struct KernelCall {
  const Kernel *kernel = nullptr;
  std::vector<const void *> in;
  std::vector<const TensorType *> inTypes;
  std::vector<void *> out;
  std::vector<const TensorType *> outTypes;
  /// The dropout key of the microbatch this call belongs to
  /// (dropout::stepKey of the seed, the step and the global microbatch,
  /// DropoutRng.h); kernels with dropout mix in their site.
  uint64_t rngKey = 0;
  /// A moe kernel that names a load-balancing bias (nn.moe's `bias`,
  /// docs/runtime.md "MoE load balancing"): the bias [experts] in host
  /// memory, added to the scores for the top-k choice only. Null otherwise.
  const float *moeBias = nullptr;
  /// The forward moe kernel of a training step with a bias: the per-expert
  /// load [experts] (host floats) to which the kernel adds its top-k
  /// choices (one per token and k; integers, exact below 2^24).
  float *moeLoad = nullptr;
  /// With --doc-mask, an attention kernel's document starts: per token of
  /// the microbatch [batch * seq] (host memory), the position in its
  /// sequence where its document starts (cpu::AttentionShape::docStart).
  /// Null otherwise.
  const int32_t *docStart = nullptr;
  int64_t docTokens = 0; ///< the entries of docStart
  /// Bit i set: out[i] already holds a value (a parameter's gradient so
  /// far) and the kernel adds its result to it instead of overwriting it.
  /// Set only where Backend::canAddTo says the backend does so.
  uint32_t addTo = 0;
  bool addsTo(size_t i) const { return i < 32 && (addTo >> i & 1u); }
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual const char *name() const = 0;
  /// True when device pointers are host pointers (CPU).
  virtual bool hostVisible() const = 0;

  /// A zero-filled buffer of `bytes` bytes (null on failure).
  virtual void *alloc(int64_t bytes) = 0;
  /// A buffer of `bytes` bytes whose contents are undefined, for a caller
  /// that writes every byte it later reads (a copy's destination, a
  /// receive, a kernel's outputs). Default: alloc (zero-filled).
  virtual void *allocUninit(int64_t bytes) { return alloc(bytes); }
  virtual void free(void *p) = 0;

  virtual void copyToHost(void *hostDst, const void *src, int64_t bytes) = 0;
  virtual void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) = 0;
  /// The host address of this backend's memory at `p`, or null where the
  /// host cannot address it (a GPU). cpu-device: the pointer without its
  /// opaque tag (the transport's emulated device collectives use it).
  virtual void *hostAddress(const void *p) { return nullptr; }
  virtual void copy(void *dst, const void *src, int64_t bytes) = 0;
  virtual void fillZero(void *p, int64_t bytes) = 0;
  /// dst[i] += src[i] for n floats, in index order.
  virtual void accumulate(float *dst, const float *src, int64_t n) = 0;
  /// x[i] *= a.
  virtual void scale(float *x, float a, int64_t n) = 0;

  /// Runs one kernel. Outputs are overwritten (gradient ops' parameter
  /// gradients too: the executor accumulates them), except those marked in
  /// KernelCall::addTo. Unknown op or bad operands: an error naming the op.
  virtual Status run(const KernelCall &call) = 0;

  /// Whether run() adds output `out` of `k` to its buffer when
  /// KernelCall::addTo marks it. The executor then writes that parameter
  /// gradient straight into the parameter's gradient buffer: no workspace
  /// buffer, no clearing, no separate accumulate pass (docs/runtime.md,
  /// "Parameter gradients straight into place"). A backend says yes only
  /// where the sum is formed as before and then added to the old value
  /// once (the bits of overwrite-then-accumulate; CPU linear_bwd_weight:
  /// a GEMM with beta = 1 whose K fits one OpenBLAS block), or close to
  /// that (a GEMM adding block by block). Default: never.
  virtual bool canAddTo(const Kernel & /*k*/, size_t /*out*/) const {
    return false;
  }

  /// Waits until all queued work is done (no-op on CPU).
  virtual void synchronize() {}

  //===--- The optimizer on the backend (docs/optimizer.md) ---===//

  /// Whether adamw and sumSquares run on this backend's memory (the
  /// trainer then keeps AdamW there); the defaults below need host memory.
  virtual bool runsOptimizer() const { return hostVisible(); }

  /// One AdamW step on n floats of this backend's memory: theta, m and v
  /// updated in place from grad with the step's coefficients; `undo`: the
  /// step's exact inverse (post-validation's rollback). Element by element
  /// as pipeforge/rt/AdamWMath.h, so every backend takes the host
  /// optimizer's bits. Default: the host loop (host-visible memory only).
  virtual Status adamw(const AdamWCoeffs &c, int64_t n, float *theta, float *m,
                       float *v, const float *grad, bool undo) {
    if (!hostVisible())
      return Status::error(std::string("backend '") + name() +
                           "' has no on-device AdamW");
    adamwTensor(c, n, theta, m, v, grad, undo);
    return Status::ok();
  }
  /// The sum of the squares of n floats in double (a gradient's norm), in
  /// element order on the CPU. Default: the host loop.
  virtual Status sumSquares(const float *x, int64_t n, double *out) {
    if (!hostVisible())
      return Status::error(std::string("backend '") + name() +
                           "' has no on-device sum of squares");
    *out = sumSquaresTensor(x, n);
    return Status::ok();
  }

  /// Bytes copied between host and device so far (copyToHost and
  /// copyFromHost; zero on a host-visible backend): the memory report's
  /// per-step transfer line.
  struct Transfers {
    int64_t toDevice = 0, toHost = 0;
  };
  virtual Transfers transfers() const { return {}; }

  /// Timing of the GEMMs the calling thread runs (each rank computes on
  /// one): timeGemms(true) starts it, gemmTime() reads the totals so far.
  /// The executor turns it on with --trace and records each step's share
  /// (the step events' gemm_us and gemm_gflop, docs/runtime.md). Seconds
  /// -1: the backend does not time its GEMMs (device backends, whose
  /// products are asynchronous).
  struct GemmTime {
    double seconds = -1, flops = 0;
  };
  virtual void timeGemms(bool /*on*/) {}
  virtual GemmTime gemmTime() const { return {}; }

  //===--- Device backends (docs/runtime-gpu.md) ---===//
  //
  // Ordering: run, copy, fillZero, accumulate and scale are queued in order
  // on the backend's compute stream; copyToHost and copyFromHost return
  // only when the data has arrived (the host buffer may be reused at once).

  /// The native handle of the compute stream (a cudaStream_t on CUDA; null
  /// on a synchronous backend), for a transport that orders its transfers
  /// after the kernels that produce their data.
  virtual void *computeStream() { return nullptr; }
  /// The device ordinal (-1: host memory).
  virtual int device() const { return -1; }
  /// Free device memory in bytes, for pipeforge-run's check of the planned
  /// bytes at start (MemoryCheck.h); -1: the buffers are host memory (or
  /// the device cannot say), and the host's memory is checked instead.
  virtual int64_t freeMemory() const { return -1; }
  /// Events: a marker of the work queued on the compute stream so far.
  /// Null on a synchronous backend (the work is done already); every
  /// function below takes null as "done".
  virtual void *recordEvent() { return nullptr; }
  /// Whether the marked work has finished (never blocks).
  virtual bool eventDone(void * /*ev*/) { return true; }
  /// Makes later compute-stream work wait for the marked work (which may
  /// have been queued by another backend of this process) without blocking
  /// the host.
  virtual void waitEvent(void * /*ev*/) {}
  /// Frees an event (safe while its work is still pending).
  virtual void releaseEvent(void * /*ev*/) {}
  /// Queues a device-to-device copy on the communication stream, after the
  /// work marked by `after` (the producer, possibly on another backend) and
  /// by `dstReady` (this backend's event taken when the destination was
  /// allocated), and returns an event marking its completion. The compute
  /// stream goes on meanwhile: this is how a receive overlaps with compute.
  /// Default: a synchronous copy, null.
  virtual void *copyOnCommStream(void *dst, const void *src, int64_t bytes,
                                 void * /*after*/, void * /*dstReady*/) {
    copy(dst, src, bytes);
    synchronize();
    return nullptr;
  }

  /// Activation offload (docs/runtime.md, "Activation offload"): host
  /// memory for a stash that leaves the device, page-locked where the
  /// backend has such memory (CUDA: cudaMallocHost), so that copies to and
  /// from it run asynchronously. Default: malloc / free.
  virtual void *allocHost(int64_t bytes) {
    return std::malloc(size_t(std::max<int64_t>(bytes, 1)));
  }
  virtual void freeHost(void *p) { std::free(p); }
  /// Queues a copy of `bytes` between this backend's memory and allocHost
  /// memory (`toHost`: device -> host) off the compute stream (CUDA: the
  /// communication stream; cpu-device: a helper thread), after the work
  /// marked by `after`, and returns an event marking its completion
  /// (eventDone, waitEvent, releaseEvent). Counted in transfers(). Default:
  /// a synchronous copyToHost / copyFromHost, null.
  virtual void *copyHostAsync(void *dst, const void *src, int64_t bytes,
                              bool toHost, void * /*after*/) {
    if (toHost)
      copyToHost(dst, src, bytes);
    else
      copyFromHost(dst, src, bytes);
    return nullptr;
  }

  /// An error that a queued kernel reported asynchronously (a token index
  /// out of range in a kernel, a CUDA fault) since the last call; the
  /// executor checks it after every step. Synchronizes.
  virtual Status takeAsyncError() { return Status::ok(); }
};

/// The CPU reference backend (runtime/backends/cpu kernels, float).
std::unique_ptr<Backend> createCpuBackend();

/// The op mnemonics the CPU backend runs (forward and gradient ops).
std::vector<std::string> cpuBackendOps();

/// The CPU kernels behind device-style buffers: every pointer this backend
/// hands out is opaque (an address the host cannot dereference: touching it
/// faults at once), and hostVisible() is false. The executor must then move
/// data only through copyToHost / copyFromHost, exactly as with a GPU, so
/// the device code paths are tested on any machine and match "cpu" bitwise.
std::unique_ptr<Backend> createCpuDeviceBackend();

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_BACKEND_H
