//===- Optimizer.h - AdamW with clipping and post-validation ----*- C++ -*-===//
//
// AdamW (decoupled weight decay, bias correction) over registered parameter
// tensors, with global gradient-norm clipping and Zero Bubble's
// post-validation (docs/optimizer.md).
//
// No MPI in here: the caller reduces the gradient statistics (squared norm,
// all-finite flag) across ranks and passes the numbers in.
//
// Two ways to step:
//
//   Synchronous      info = all-reduce(opt.localGradInfo());
//                    opt.step(info);
//
//   Post-validation  partial = received ⊕ opt.localGradInfo();
//                    opt.optimisticStep(partial);   // steps now
//                    ... next iteration's warm-up: the global info arrives
//                    opt.validate(global);          // accept, or roll back
//                                                   // in place and redo /
//                                                   // skip
//
// The rollback is the exact algebraic inverse of the step (docs/background.md):
//   m' = m/(1-b1^t), v' = v/(1-b2^t),
//   theta = (theta + lr m'/(sqrt(v')+eps)) / (1 - lr wd),
//   m = (m - (1-b1) g)/b1,  v = (v - (1-b2) g^2)/b2,  t = t-1
// so it restores parameters and moments up to floating-point rounding.
//
// A step over a non-finite gradient is skipped: t does not advance and
// nothing changes. A stage whose own gradients are non-finite never steps
// optimistically (the partial info already says so), because a NaN that
// entered m or v cannot be rolled back.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_OPTIMIZER_H
#define PIPEFORGE_RT_OPTIMIZER_H

#include "pipeforge/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

using pipeforge::Expected;
using pipeforge::Status;

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0; ///< decoupled: theta *= (1 - lr * weightDecay)
  /// Global gradient-norm clipping threshold; <= 0 disables clipping.
  double maxGradNorm = 0.0;
  /// Post-validation: copy the gradients at optimisticStep() so that the
  /// caller may zero / overwrite its gradient buffers before validate().
  /// When false, the gradient buffers must stay unchanged until validate().
  bool snapshotGrads = true;
};

/// Checks ranges: lr >= 0, 0 <= beta < 1, eps > 0, weightDecay >= 0,
/// lr * weightDecay < 1 (the rollback divides by 1 - lr wd).
Status checkConfig(const AdamWConfig &cfg);

/// The default weight-decay rule (docs/optimizer.md): matrices and
/// embeddings (rank >= 2) decay; biases and norm weights (rank 1) do not.
inline bool decaysByDefault(const std::vector<int64_t> &shape) {
  return shape.size() >= 2;
}

/// A learning-rate schedule (docs/optimizer.md, "Learning-rate schedule"),
/// a pure function of the step so that a resumed run continues bitwise.
/// Step k (1-based) with i = k - 1, W = warmupSteps, T = decaySteps:
///   i < W:        lr * (i + 1) / W                        (linear warm-up)
///   W <= i < T:   p = (i - W) / (T - W);
///                 cosine: minLr + (lr - minLr) (1 + cos(pi p)) / 2
///                 linear: minLr + (lr - minLr) (1 - p)
///                 constant: lr
///   i >= T:       minLr (constant: lr)
/// This is PyTorch's LambdaLR with that factor, stepped after each
/// optimizer step.
struct LrSchedule {
  enum class Kind : uint8_t { Constant, Linear, Cosine };
  Kind kind = Kind::Constant;
  int64_t warmupSteps = 0;
  int64_t decaySteps = 0; ///< T, counted from step 1 (warm-up included)
  double minLr = 0;

  double at(double lr, int64_t step) const;
  bool isConstant() const { return kind == Kind::Constant && warmupSteps == 0; }
};
/// "constant", "linear", "cosine".
Expected<LrSchedule::Kind> parseLrScheduleKind(const std::string &name);
const char *toString(LrSchedule::Kind k);
/// Errors: negative steps, minLr outside [0, lr], a decaying schedule whose
/// decay ends before its warm-up does.
Status checkLrSchedule(const LrSchedule &s, double lr);

/// Gradient statistics; reduce across ranks with combine().
struct GradInfo {
  double normSq = 0.0;   ///< sum of squared gradient elements
  bool allFinite = true; ///< no NaN / Inf anywhere
  static GradInfo combine(const GradInfo &a, const GradInfo &b) {
    return {a.normSq + b.normSq, a.allFinite && b.allFinite};
  }
};

/// What happened to one step.
enum class StepOutcome : uint8_t {
  Applied, ///< stepped with the raw gradients
  Clipped, ///< stepped with gradients scaled by clipScale < 1
  Skipped  ///< non-finite gradients: nothing changed, t did not advance
};
const char *toString(StepOutcome o);

/// What validate() did.
struct ValidateResult {
  StepOutcome outcome = StepOutcome::Applied; ///< the step as finally taken
  bool rolledBack = false; ///< the optimistic step was undone
  bool redone = false;     ///< a step with the correct scale was taken again
  double clipScale = 1.0;  ///< the scale finally applied (1 when not clipped)
};

/// Optimizer state for checkpoints (names in registration order).
template <typename T> struct AdamWState {
  int64_t step = 0; ///< t: the number of steps taken (skips not counted)
  double lr = 0.0;  ///< the current learning rate
  std::vector<std::string> names;
  std::vector<std::vector<T>> m, v;
};

class Backend;

template <typename T> class AdamWT {
public:
  explicit AdamWT(AdamWConfig cfg = {});

  /// The optimizer on a backend (float only; before any addParam): the
  /// registered data and grad pointers are then that backend's memory, the
  /// moments (and the post-validation gradient snapshot) are allocated
  /// there, and every step, rollback and norm runs as backend calls
  /// (Backend::adamw, sumSquares) with the bits of the host loops. State
  /// leaves the device only through exportState and moment1/moment2.
  /// Errors: T is not float, parameters already registered.
  Status useBackend(Backend &be);
  bool onBackend() const { return dev != nullptr; }
  /// The first error a backend call reported since the last call (step()
  /// and the rollback have no Status of their own); ok on the host.
  Status takeBackendError() {
    Status s = devError;
    devError = Status::ok();
    return s;
  }
  /// Bytes of state: m and v (and a gradient snapshot when held).
  int64_t stateBytes() const;

  /// Registers a parameter tensor. `data` and `grad` are not owned and must
  /// outlive the optimizer. `decay`: whether the weight decay applies to it
  /// (see decaysByDefault). Errors: empty/duplicate name, null pointers,
  /// called while a step is pending validation.
  Status addParam(std::string name, T *data, T *grad, size_t size,
                  bool decay = true);
  bool paramDecays(size_t i) const { return params[i].decay; }

  size_t numParams() const { return params.size(); }
  const std::string &paramName(size_t i) const { return params[i].name; }
  size_t paramSize(size_t i) const { return params[i].size; }
  /// t: the number of steps taken (skipped steps do not count).
  int64_t stepCount() const { return t; }
  const AdamWConfig &config() const { return cfg; }
  /// Learning-rate schedules: takes effect at the next step (a pending step
  /// keeps the lr it was taken with, also when it is redone).
  void setLearningRate(double lr) { cfg.lr = lr; }
  /// Copies of the moments (from the backend when onBackend()).
  std::vector<T> moment1(size_t i) const { return hostCopy(params[i], 0); }
  std::vector<T> moment2(size_t i) const { return hostCopy(params[i], 1); }

  /// Squared norm and finiteness of this rank's registered gradients.
  GradInfo localGradInfo() const;
  /// The clipping scale for a global squared norm:
  /// min(1, maxGradNorm / (sqrt(normSq) + 1e-6)); 1 when clipping is off.
  double clipScale(double globalNormSq) const;

  /// Synchronous step with the global statistics.
  StepOutcome step(const GradInfo &global);

  /// Post-validation, part 1: steps now with the (partial) statistics seen
  /// so far. Non-finite partial info: no step (still pending). Errors: a
  /// step is already pending.
  Status optimisticStep(const GradInfo &partial);
  bool hasPending() const { return pending.active; }
  /// Post-validation, part 2: accepts the optimistic step when it used the
  /// right scale; else rolls it back in place and redoes it with the global
  /// clipping scale, or leaves it undone when the global gradients are not
  /// finite. Errors: nothing pending.
  Expected<ValidateResult> validate(const GradInfo &global);

  /// Undoes the most recent step in place (docs/background.md formulas),
  /// using the gradients and lr it was taken with. Exposed for tests and
  /// tools; the gradients must be those of that step (snapshot or unchanged
  /// buffers).
  /// Errors: no step to undo.
  Status rollbackLastStep();

  /// Checkpoint state. Errors: a step is pending validation.
  Expected<AdamWState<T>> exportState() const;
  /// Errors: names / sizes differ from the registered parameters, negative
  /// step, a step pending.
  Status importState(const AdamWState<T> &s);

private:
  struct Param {
    std::string name;
    T *data = nullptr;
    T *grad = nullptr;
    size_t size = 0;
    bool decay = true; ///< weight decay applies
    std::vector<T> m, v;
    std::vector<T> gradSnapshot; ///< post-validation, snapshotGrads only
    /// On a backend: m, v and the snapshot in its memory (freed with the
    /// last copy of the handle).
    std::shared_ptr<void> devM, devV, devSnap;
  };
  /// The last step taken, for rollback.
  struct LastStep {
    bool valid = false;
    bool fromSnapshot = false;
    double scale = 1.0;
    double lr = 0.0;
  };
  struct Pending {
    bool active = false;
    bool stepped = false; ///< false: the optimistic step was skipped
    double scale = 1.0;
    double lr = 0.0;
  };

  void applyStep(double scale, double lr, bool fromSnapshot);
  /// One step (or its inverse) over every parameter, on the host or the
  /// backend, with step t's coefficients.
  void stepAll(double scale, double lr, bool fromSnapshot, bool undo);
  const T *gradOf(const Param &p, bool fromSnapshot) const {
    if (fromSnapshot)
      return dev ? static_cast<const T *>(p.devSnap.get())
                 : p.gradSnapshot.data();
    return p.grad;
  }
  std::vector<T> hostCopy(const Param &p, int which) const;
  std::shared_ptr<void> devAlloc(size_t elems);
  void note(Status s) {
    if (!s && devError)
      devError = s;
  }

  AdamWConfig cfg;
  std::vector<Param> params;
  Backend *dev = nullptr;
  Status devError = Status::ok();
  int64_t t = 0;
  LastStep last;
  Pending pending;
};

extern template class AdamWT<float>;
extern template class AdamWT<double>;
using AdamW = AdamWT<float>;

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_OPTIMIZER_H
