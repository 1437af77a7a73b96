//===- Executor.h - Interprets a rank's schedule each step ------*- C++ -*-===//
//
// Each training step the executor walks this pipeline rank's action list
// (Program::schedule.programs[rank]):
//
//   F      binds args by role (Activation from a received or locally handed
//          off bundle, Tokens/Targets from the data source for the global
//          microbatch, Param), runs the kernels, keeps Stash results per
//          (copy, stage, mb), hands Activation results to the next stage
//          (locally, or to the following Send), records the Loss.
//   B      GradIn = the received gradient, or on the loss stage the seed
//          1 / microbatches (the step loss is the mean over microbatches);
//          keeps WStash; GradOut goes to the previous stage.
//   W      adds ParamGrad into the parameter's gradient accumulator; frees the
//          stash of (copy, stage, mb).
//   BW     B then W fused (the stage's backward function, or B then W).
//   FB     Overlap: F then the backward member, one trace event; when both
//          members' functions have components (and fuseOverlap), the two
//          run interleaved so each one's all-to-alls are in flight while
//          the other computes (same bits as F then B).
//   Send / Recv  point-to-point; receives are posted `recvLookahead`
//          actions ahead and waited for only by the compute that needs them.
//   GradReduce   DualPipe: pairwise sum of the two copies' gradients.
//
// Then: data-parallel gradient allreduce (sum, divided by dp), the global
// gradient norm, and the optimizer step.
//
// Determinism (see docs/runtime.md): with dp = 1 and a schedule whose W (or
// BW) of each stage runs in microbatch order, every run is bitwise equal to
// the single-process reference; DualPipe (two partial sums added) and dp > 1
// (a different summation order) agree within float rounding.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_EXECUTOR_H
#define PIPEFORGE_RT_EXECUTOR_H

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/Checkpoint.h"
#include "pipeforge/rt/Optimizer.h"
#include "pipeforge/rt/Program.h"
#include "pipeforge/rt/Transport.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pipeforge::rt {

//===----------------------------------------------------------------------===//
// Data and optimizer seams (replaced by Data.h / Optimizer.h when they land)
//===----------------------------------------------------------------------===//

/// Produces the tokens and targets of one microbatch: `batch` x `seq`
/// int32 each, for `globalMb` (0..microbatches-1) of `step` on replica
/// `dpIndex`.
class TokenSource {
public:
  virtual ~TokenSource() = default;
  virtual Status fill(int64_t step, int dpIndex, int64_t globalMb,
                      int64_t batch, int64_t seq, int32_t *tokens,
                      int32_t *targets) = 0;
  /// With ExecutorOptions::docMask: each token's document start within its
  /// row of fill()'s tokens (Data.h, DataSource::documentStarts), a pure
  /// function of the same arguments. This default has no documents.
  virtual Status documents(int64_t step, int dpIndex, int64_t globalMb,
                           int64_t batch, int64_t seq, int32_t *docStart) {
    return Status::error("this data source has no document boundaries");
  }
};

/// A deterministic learnable stream: each sequence follows
/// x[t+1] = (a x[t] + c) mod vocab from a hashed start; targets are the next
/// tokens.
std::unique_ptr<TokenSource> createPatternTokens(uint64_t seed, int64_t vocab);

/// One parameter as the optimizer sees it: host pointers, or the backend's
/// for a deviceResident() optimizer.
struct ParamSlot {
  int32_t index = 0; ///< into Program::params
  const Param *param = nullptr;
  float *value = nullptr;
  const float *grad = nullptr;
  int64_t n = 0;
};

class StepOptimizer {
public:
  virtual ~StepOptimizer() = default;
  /// Updates every local parameter. `gradNorm` is the global L2 norm of the
  /// gradient (each logical parameter counted once). `step` counts from 1.
  virtual Status update(const std::vector<ParamSlot> &params, double gradNorm,
                        int64_t step) = 0;

  /// Post-validation (docs/runtime.md), part 1: step now with this rank's
  /// partial gradient statistics (local squared norm over copy-0 params,
  /// finiteness over every local gradient). Default: unsupported.
  virtual Status optimisticUpdate(const std::vector<ParamSlot> &params,
                                  const GradInfo &partial, int64_t step) {
    (void)params, (void)partial, (void)step;
    return Status::error("this optimizer has no post-validation mode");
  }
  /// Part 2: the global statistics arrived; accept, roll back and redo with
  /// the global clip scale, or roll back and skip.
  virtual Expected<ValidateResult> validateUpdate(const GradInfo &global) {
    (void)global;
    return Status::error("this optimizer has no post-validation mode");
  }
  /// Bytes of optimizer state this rank holds (memory report).
  virtual int64_t stateBytes() const { return 0; }
  /// True when the optimizer works on the backend's buffers (the slots
  /// then carry device pointers, and the executor neither uploads values
  /// nor downloads gradients for it); false: host slots.
  virtual bool deviceResident() const { return false; }
};

/// Plain SGD: w -= lr * g.
std::unique_ptr<StepOptimizer> createSgd(float lr);

/// The deterministic parameter initialisation: "normal:<std>", "zeros",
/// "ones", "uniform:<a>"; seeded with (seed, name without "@copy1").
Status initParamValues(const Param &p, uint64_t seed, float *out);
/// `name` without a trailing "@copyN".
std::string baseParamName(const std::string &name);

//===----------------------------------------------------------------------===//
// Weights files (for tests comparing runs)
//===----------------------------------------------------------------------===//

using NamedTensors = std::vector<std::pair<std::string, std::vector<float>>>;
Status writeWeights(const std::string &path, const NamedTensors &w);
Expected<NamedTensors> readWeights(const std::string &path);
/// Compares by name. Reports max abs / rel difference into `report`; true
/// when every element satisfies |a-b| <= atol + rtol |b|.
bool compareWeights(const NamedTensors &a, const NamedTensors &b, double rtol,
                    double atol, std::string &report, bool &bitwise);

//===----------------------------------------------------------------------===//
// The executor
//===----------------------------------------------------------------------===//

enum class OptimizerSync : uint8_t {
  Sync,          ///< all-reduce the gradient statistics, then step
  PostValidation ///< optimistic step, then validate (Zero Bubble)
};

class WeightSource; // HfWeights.h

struct ExecutorOptions {
  bool trace = false;    ///< record Chrome trace events
  /// The values parameters and load-balancing biases start from instead of
  /// their initialisers (pipeforge-run --init-from: a Hugging Face model
  /// directory, HfWeights.h); each rank reads only the rows it holds.
  /// Null: the program's initialisers. Not owned; read during create().
  const WeightSource *initialWeights = nullptr;
  int recvLookahead = 8; ///< Recv actions posted ahead of the current one
  OptimizerSync optimizerSync = OptimizerSync::Sync;
  /// Test hook: no optimizer update at this step (1-based; 0: none); the
  /// data position still advances.
  int64_t skipStep = 0;
  /// Test hook: at step `injectNanStep` (1-based; 0: none) the gradient of
  /// global microbatch `injectNanMb` (dpIndex * microbatches + copy *
  /// m_per_copy + mb) becomes NaN on the loss stage that computes it (its
  /// first local parameter's gradient gets a NaN).
  int64_t injectNanStep = 0;
  int64_t injectNanMb = 0;
  /// Test hook: at step `stallStep` (1-based; 0: never) this rank stops
  /// after the step's barrier and never answers again, as a rank on a lost
  /// node does (its peers' watchdogs must end the job).
  int64_t stallStep = 0;
  /// Attention within documents (pipeforge-run --doc-mask): every attention
  /// kernel gets its microbatch's document starts from
  /// TokenSource::documents (each rank asks for itself; no messages).
  bool docMask = false;
  /// Run the members of an Overlap action interleaved when the program
  /// has components for them (docs/runtime.md, "Fused overlap");
  /// false (pipeforge-run --no-fuse): F then B as without components.
  bool fuseOverlap = true;
  /// On a device backend (not host-visible), wait for each compute action's
  /// kernels before taking its end time, so the per-step bubble and the
  /// trace show device time. Off: actions are timed by their launch only
  /// (tokens/s stays exact: a step ends with a host copy), and the host
  /// runs ahead of the device.
  bool syncDeviceCompute = true;
  /// 1: ZeRO stage 1 (pipeforge-run --zero 1, docs/optimizer.md): the
  /// optimizer state and the update of each parameter live on one rank of
  /// its data-parallel group (whole tensors, balanced by size); gradients
  /// are reduced to that rank and the updated values gathered from it.
  /// 2: ZeRO stage 2, also the gradients: a gradient's buffer is freed on
  /// the ranks that do not update it once it has left for its owner (the
  /// overlapped reduction's ready point, the reduction after the step, or
  /// DualPipe's GRADREDUCE), and made again at the next step's start.
  /// 0: every data-parallel replica holds all of it.
  int zeroStage = 0;
  /// Overlap the data-parallel gradient reduction with the backward pass
  /// (docs/runtime.md, "Overlapped gradient reduction"): a parameter's
  /// gradient is summed over the replicas as soon as the stage's last
  /// gradient function has produced it, in buckets of at least
  /// `gradBucketBytes` (0: one bucket per kernel's gradients), while the
  /// rank goes on computing. The sums are those of the reduction after the
  /// step, bit for bit. Tied parameters, sequence-parallel partial
  /// gradients and ZeRO-1 keep the reduction after the step. false
  /// (pipeforge-run --overlap-grad-reduce=false): everything after the step.
  bool overlapGradReduce = true;
  int64_t gradBucketBytes = int64_t(25) << 20;
  /// Activation offload (pipeforge-run --offload-activations, docs/runtime.md
  /// "Activation offload"; device backends only): F's stash of a microbatch
  /// leaves device memory for host memory (Backend::allocHost) right after
  /// its F, off the compute stream, and comes back one compute action
  /// before its B. Auto: the microbatches with at least two compute actions
  /// between their F and B (time to hide both copies); All: those with at
  /// least one. The copies are exact: the run is bitwise the same.
  enum class Offload : uint8_t { Off, Auto, All };
  Offload offloadActivations = Offload::Off;
};

struct StepStats {
  int64_t step = 0;
  double loss = 0;    ///< mean over microbatches and replicas
  double seconds = 0; ///< wall time of the step (max over ranks)
  double bubble = 0;  ///< 1 - busy / (P x pipeline span)
  double gradNorm = 0;
  int64_t tokens = 0; ///< tokens processed per step over all replicas
  /// What the optimizer did: "applied", "skipped" (--skip-step), or for
  /// post-validation "accepted", "redone" (rolled back, stepped with the
  /// global clip scale), "rolled-back" (global non-finite: skipped),
  /// "not-stepped" (local non-finite: skipped); sync steps report "applied".
  std::string optimizer = "applied";
};

class Executor {
public:
  static Expected<std::unique_ptr<Executor>>
  create(const Program &prog, Backend &be, Transport &tr, TokenSource &data,
         StepOptimizer &opt, const ExecutorOptions &o = {});
  ~Executor();

  /// One training step (collective over all ranks).
  Expected<StepStats> step();
  int64_t stepsDone() const;
  void setStepsDone(int64_t s);

  /// All logical parameters (copy 0 names), on world rank 0; empty
  /// elsewhere (collective).
  Expected<NamedTensors> gatherWeights();

  /// Measured activation memory (docs/runtime.md, "Measured memory"): the
  /// largest number of bytes this rank has held in stashes (F's for B and
  /// W, B's for W) between two actions, over the run; and for each of its
  /// stages (copy, stage), the stash bytes of one microbatch: F's, plus the
  /// largest W-stash a separate B kept for W.
  int64_t peakStashBytes() const;
  std::map<std::pair<int, int>, int64_t> microbatchStashBytes() const;
  /// Lines per world rank on world rank 0 (collective): "rank R:
  /// parameters N bytes, gradients N bytes, optimizer state N bytes" (the
  /// backend's parameter and gradient buffers; StepOptimizer::stateBytes)
  /// and "rank R: peak stash N bytes = X M_B (one microbatch: stage S N
  /// bytes [+ W-stash N], ...)", M_B being F's stash of one microbatch of
  /// the rank's largest stage; "rank R: buffers peak N bytes + optimizer
  /// state N = N bytes (peaks: messages N, workspace N, tokens N)", every
  /// backend buffer of the executor by class (MemLedger); on a device
  /// backend a fourth, "rank R: step
  /// K copied N bytes to the device, N bytes to the host (optimizer on the
  /// device|host)", the last step's host <-> device transfers.
  Expected<std::string> memoryReport();
  /// This rank's parameters by global index, and access for checkpoints.
  std::vector<int32_t> localParams() const;
  /// The local parameters whose optimizer state this rank holds and
  /// updates: localParams(), or under ZeRO-1 its share of them.
  std::vector<int32_t> optimizerParams() const;
  /// The part of parameter `index` this rank holds: the whole tensor, or
  /// for an expert-parallel parameter its slice of shape[0] / E experts.
  /// Optimizer state, gradients and checkpoints are sized by these, never
  /// by Program::params[index].type. Empty / 0 for a parameter not held.
  std::vector<int64_t> paramShape(int32_t index) const;
  int64_t paramElems(int32_t index) const;
  /// Host memory in both cases. On a device backend with a host optimizer
  /// these are the master copies (uploaded at the start of each step,
  /// gradients downloaded at the end of the backward work). With the
  /// optimizer on the device (StepOptimizer::deviceResident) the device
  /// holds the values: paramData is a mirror that pullValues() refreshes
  /// (checkpoints, weight dumps) and pushValues() writes back (a restore).
  float *paramData(int32_t index);
  float *gradData(int32_t index);
  /// The backend's buffers (device memory on a device backend).
  float *paramDevice(int32_t index);
  float *gradDevice(int32_t index);
  /// Device values to the host mirrors, and back (no-ops where the mirror
  /// is the master copy). Errors: the backend's, including an asynchronous
  /// one from the last step's work (the copies would hold garbage).
  Status pullValues();
  Status pushValues();
  /// ZeRO-3 (ExecutorOptions::zeroStage 3): between steps a rank holds only
  /// the tensors it updates; paramData / paramDevice are null for the
  /// others. gatherParams (collective: every rank calls it at the same
  /// point between steps) gathers them all, for a checkpoint, a weight dump
  /// or a resume; releaseParams drops them again. No-ops otherwise.
  Status gatherParams();
  void releaseParams();
  /// Model state that is not a parameter, in host memory, for checkpoints:
  /// nn.moe's load-balancing biases ([experts] each, every one of the model
  /// on every rank, by name; docs/runtime.md "MoE load balancing").
  std::vector<ParamRef> stateRefs();
  /// After a checkpoint is restored into paramData and stateRefs
  /// (Trainer::resume; collective: every rank calls it): each load-balancing
  /// bias can still move by its bias_update_speed (past that magnitude the
  /// update vanishes in float: an absurd value), and every replicated
  /// tensor agrees between the ranks that hold it: the biases on every
  /// rank, a parameter (or its expert or tensor-parallel slice) on its
  /// data-, expert- and tensor-parallel replicas. The message names the
  /// tensor, the world ranks and their files (`fileOf(worldRank)`).
  Status checkRestoredState(const std::function<std::string(int)> &fileOf);
  /// The backend's pending asynchronous error, if any (after host copies
  /// of device state such as AdamW's moments for a checkpoint).
  Status backendError();

  /// Writes the merged Chrome trace on world rank 0 (collective).
  Status writeTrace(const std::string &path);

  struct Impl;

private:
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_EXECUTOR_H
