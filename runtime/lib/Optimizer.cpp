//===- Optimizer.cpp - AdamW with clipping and post-validation ------------===//
//
// See Optimizer.h and docs/optimizer.md. The step and its rollback compute
// the update term lr * m'/(sqrt(v')+eps) with the same expression over the
// same stored m and v, so the rollback of theta only suffers the rounding of
// the two stores, never a different update.
//
//===----------------------------------------------------------------------===//
#include "pipeforge/rt/Optimizer.h"
#include "pipeforge/rt/AdamWMath.h"
#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/Executor.h"

#include "pipeforge/Support/Numeric.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace pipeforge::rt {

/// The host AdamW loop over one tensor and the gradient's sum of squares,
/// also built for AVX-512 and AVX2 and picked by the CPU at load time (16 or
/// 8 lanes instead of SSE2's 4): the same bits (elementwise, or the same
/// fixed order of double sums; sqrt and division correctly rounded at every
/// width; this file is compiled with -ffp-contract=off, runtime/CMakeLists.txt).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    defined(__linux__)
#define PF_OPT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PF_OPT_CLONES
#endif
PF_OPT_CLONES
void adamwHost(const AdamWCoeffs &c, long long n, float *theta, float *m,
               float *v, const float *grad, bool undo) {
  adamwTensor(c, n, theta, m, v, grad, undo);
}
PF_OPT_CLONES double sumSquaresHost(const float *x, long long n) {
  return sumSquaresTensor(x, n);
}

namespace {
template <typename T>
void adamwHost(const AdamWCoeffsT<T> &c, long long n, T *theta, T *m, T *v,
               const T *grad, bool undo) {
  adamwTensor(c, n, theta, m, v, grad, undo);
}
} // namespace

Status checkConfig(const AdamWConfig &c) {
  auto bad = [](const std::string &what) {
    return Status::error("AdamW config: " + what);
  };
  if (!(c.lr >= 0) || !std::isfinite(c.lr))
    return bad("lr must be finite and >= 0, got " + std::to_string(c.lr));
  if (!(c.beta1 >= 0 && c.beta1 < 1))
    return bad("beta1 must be in [0, 1), got " + std::to_string(c.beta1));
  if (!(c.beta2 >= 0 && c.beta2 < 1))
    return bad("beta2 must be in [0, 1), got " + std::to_string(c.beta2));
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    return bad("eps must be finite and > 0");
  if (!(c.weightDecay >= 0) || !std::isfinite(c.weightDecay))
    return bad("weightDecay must be finite and >= 0");
  if (!(c.lr * c.weightDecay < 1))
    return bad("lr * weightDecay must be < 1 (the rollback divides by "
               "1 - lr * weightDecay)");
  if (std::isnan(c.maxGradNorm))
    return bad("maxGradNorm is NaN");
  // Rollback divides by beta1 / beta2.
  if (c.beta1 == 0 || c.beta2 == 0)
    return bad("beta1 and beta2 must be > 0 (the rollback divides by them)");
  return Status::ok();
}

const char *toString(StepOutcome o) {
  switch (o) {
  case StepOutcome::Applied:
    return "applied";
  case StepOutcome::Clipped:
    return "clipped";
  case StepOutcome::Skipped:
    return "skipped";
  }
  return "?";
}

template <typename T> AdamWT<T>::AdamWT(AdamWConfig c) : cfg(c) {}

template <typename T> Status AdamWT<T>::useBackend(Backend &be) {
  if (!std::is_same_v<T, float>)
    return Status::error("AdamW: only the float optimizer runs on a backend");
  if (!params.empty())
    return Status::error("AdamW: useBackend after parameters were registered");
  dev = &be;
  return Status::ok();
}

template <typename T>
std::shared_ptr<void> AdamWT<T>::devAlloc(size_t elems) {
  Backend *be = dev;
  void *p = be->alloc(int64_t(elems * sizeof(T))); // zero-filled
  if (!p)
    return nullptr;
  return std::shared_ptr<void>(p, [be](void *q) { be->free(q); });
}

template <typename T>
std::vector<T> AdamWT<T>::hostCopy(const Param &p, int which) const {
  if (!dev)
    return which == 0 ? p.m : p.v;
  std::vector<T> out(p.size);
  const void *src = which == 0 ? p.devM.get() : p.devV.get();
  dev->copyToHost(out.data(), src, int64_t(p.size * sizeof(T)));
  return out;
}

template <typename T> int64_t AdamWT<T>::stateBytes() const {
  int64_t n = 0;
  for (const Param &p : params)
    n += int64_t(p.size * sizeof(T)) *
         ((dev ? p.devSnap != nullptr : !p.gradSnapshot.empty()) ? 3 : 2);
  return n;
}

template <typename T>
Status AdamWT<T>::addParam(std::string name, T *data, T *grad, size_t size,
                           bool decay) {
  if (pending.active)
    return Status::error("AdamW: addParam('" + name +
                         "') while a step is pending validation");
  if (name.empty())
    return Status::error("AdamW: parameter with an empty name");
  if (!data || !grad)
    return Status::error("AdamW: parameter '" + name +
                         "' has a null data or grad pointer");
  for (const Param &p : params)
    if (p.name == name)
      return Status::error("AdamW: duplicate parameter '" + name + "'");
  Param p;
  p.name = std::move(name);
  p.data = data;
  p.grad = grad;
  p.size = size;
  p.decay = decay;
  if (dev) {
    p.devM = devAlloc(size);
    p.devV = devAlloc(size);
    if (!p.devM || !p.devV)
      return Status::error("AdamW: cannot allocate the moments of '" + p.name +
                           "' on backend '" + dev->name() + "'");
  } else {
    p.m.assign(size, T(0));
    p.v.assign(size, T(0));
  }
  params.push_back(std::move(p));
  last.valid = false;
  return Status::ok();
}

template <typename T> GradInfo AdamWT<T>::localGradInfo() const {
  GradInfo info;
  for (const Param &p : params) {
    double sum = 0.0;
    if constexpr (std::is_same_v<T, float>)
      if (dev) {
        // A non-finite element makes the sum non-finite (checked below).
        if (Status st = dev->sumSquares(p.grad, int64_t(p.size), &sum); !st)
          sum = std::numeric_limits<double>::quiet_NaN();
        info.normSq += sum;
        continue;
      }
    // The executor's sum (AdamWMath.h); a non-finite element makes it
    // non-finite (the squares of finite floats cannot overflow a double).
    if constexpr (std::is_same_v<T, float>)
      sum = sumSquaresHost(p.grad, (long long)p.size);
    else
      sum = sumSquaresTensor(p.grad, (long long)p.size);
    info.normSq += sum;
    info.allFinite = info.allFinite && std::isfinite(sum);
  }
  if (!std::isfinite(info.normSq))
    info.allFinite = false;
  return info;
}

template <typename T> double AdamWT<T>::clipScale(double globalNormSq) const {
  if (!(cfg.maxGradNorm > 0))
    return 1.0;
  double norm = std::sqrt(globalNormSq);
  double coef = cfg.maxGradNorm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

template <typename T>
void AdamWT<T>::stepAll(double scale, double lr, bool fromSnapshot, bool undo) {
  for (Param &p : params) {
    AdamWCoeffsT<T> c =
        adamwCoeffsT<T>(cfg.beta1, cfg.beta2, cfg.eps, cfg.weightDecay, t, lr,
                        scale, p.decay);
    const T *grad = gradOf(p, fromSnapshot);
    if constexpr (std::is_same_v<T, float>)
      if (dev) {
        note(dev->adamw(c, int64_t(p.size), p.data,
                        static_cast<float *>(p.devM.get()),
                        static_cast<float *>(p.devV.get()), grad, undo));
        continue;
      }
    adamwHost(c, (long long)p.size, p.data, p.m.data(), p.v.data(), grad,
              undo);
  }
}

template <typename T>
void AdamWT<T>::applyStep(double scale, double lr, bool fromSnapshot) {
  // importState bounds t by kMaxSteps; never wrap even so.
  if (t < std::numeric_limits<int64_t>::max())
    ++t;
  stepAll(scale, lr, fromSnapshot, /*undo=*/false);
  last.valid = true;
  last.fromSnapshot = fromSnapshot;
  last.scale = scale;
  last.lr = lr;
}

template <typename T> Status AdamWT<T>::rollbackLastStep() {
  if (!last.valid || t <= 0)
    return Status::error("AdamW: no step to roll back");
  // The step's coefficients (t before the decrement, its lr and scale):
  // theta = (theta + lr m'/(sqrt(v')+eps)) / (1 - lr wd), then m and v.
  stepAll(last.scale, last.lr, last.fromSnapshot, /*undo=*/true);
  --t;
  last.valid = false;
  return Status::ok();
}

template <typename T> StepOutcome AdamWT<T>::step(const GradInfo &global) {
  if (!global.allFinite || !std::isfinite(global.normSq))
    return StepOutcome::Skipped;
  double scale = clipScale(global.normSq);
  applyStep(scale, cfg.lr, /*fromSnapshot=*/false);
  return scale < 1.0 ? StepOutcome::Clipped : StepOutcome::Applied;
}

template <typename T>
Status AdamWT<T>::optimisticStep(const GradInfo &partial) {
  if (pending.active)
    return Status::error("AdamW: optimisticStep while the previous step is "
                         "still pending validation");
  pending = Pending();
  pending.active = true;
  pending.lr = cfg.lr;
  if (cfg.snapshotGrads)
    for (Param &p : params) {
      if (!dev) {
        p.gradSnapshot.assign(p.grad, p.grad + p.size);
        continue;
      }
      if (!p.devSnap && !(p.devSnap = devAlloc(p.size)))
        return Status::error("AdamW: cannot allocate the gradient snapshot "
                             "of '" + p.name + "'");
      dev->copy(p.devSnap.get(), p.grad, int64_t(p.size * sizeof(T)));
    }
  if (!partial.allFinite || !std::isfinite(partial.normSq)) {
    pending.stepped = false; // a NaN in m or v could not be rolled back
    return Status::ok();
  }
  pending.stepped = true;
  pending.scale = clipScale(partial.normSq);
  applyStep(pending.scale, pending.lr, cfg.snapshotGrads);
  return Status::ok();
}

template <typename T>
Expected<ValidateResult> AdamWT<T>::validate(const GradInfo &global) {
  if (!pending.active)
    return Status::error("AdamW: validate without a pending optimistic step");
  ValidateResult r;
  bool finite = global.allFinite && std::isfinite(global.normSq);
  double want = finite ? clipScale(global.normSq) : 1.0;
  bool fromSnap = cfg.snapshotGrads;
  if (!finite) {
    if (pending.stepped) {
      Status st = rollbackLastStep();
      if (!st)
        return st;
      r.rolledBack = true;
    }
    r.outcome = StepOutcome::Skipped;
    r.clipScale = 1.0;
  } else if (pending.stepped && pending.scale == want) {
    r.outcome = want < 1.0 ? StepOutcome::Clipped : StepOutcome::Applied;
    r.clipScale = want;
  } else {
    if (pending.stepped) {
      Status st = rollbackLastStep();
      if (!st)
        return st;
      r.rolledBack = true;
    }
    applyStep(want, pending.lr, fromSnap);
    r.redone = true;
    r.outcome = want < 1.0 ? StepOutcome::Clipped : StepOutcome::Applied;
    r.clipScale = want;
  }
  pending = Pending();
  for (Param &p : params) {
    p.gradSnapshot.clear();
    p.gradSnapshot.shrink_to_fit();
    // (A device snapshot buffer is kept for the next step.)
  }
  // The snapshot is gone; the step can no longer be rolled back from it.
  if (fromSnap)
    last.valid = false;
  return r;
}

template <typename T> Expected<AdamWState<T>> AdamWT<T>::exportState() const {
  if (pending.active)
    return Status::error(
        "AdamW: cannot export state while a step is pending validation");
  AdamWState<T> s;
  s.step = t;
  s.lr = cfg.lr;
  for (size_t i = 0; i < params.size(); ++i) {
    s.names.push_back(params[i].name);
    s.m.push_back(moment1(i));
    s.v.push_back(moment2(i));
  }
  return s;
}

template <typename T> Status AdamWT<T>::importState(const AdamWState<T> &s) {
  if (pending.active)
    return Status::error(
        "AdamW: cannot import state while a step is pending validation");
  if (s.step < 0 || s.step > kMaxSteps)
    return Status::error("AdamW state: step count " + std::to_string(s.step) +
                         " out of range [0, " + std::to_string(kMaxSteps) +
                         "]");
  if (!(std::isfinite(s.lr) && s.lr >= 0))
    return Status::error("AdamW state: learning rate " + std::to_string(s.lr) +
                         " is not a finite number >= 0");
  if (s.names.size() != params.size() || s.m.size() != params.size() ||
      s.v.size() != params.size())
    return Status::error("AdamW state: " + std::to_string(s.names.size()) +
                         " parameters, the optimizer has " +
                         std::to_string(params.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    const Param &p = params[i];
    if (s.names[i] != p.name)
      return Status::error("AdamW state: parameter " + std::to_string(i) +
                           " is '" + s.names[i] + "', expected '" + p.name +
                           "'");
    if (s.m[i].size() != p.size || s.v[i].size() != p.size)
      return Status::error(
          "AdamW state: parameter '" + p.name + "' has " +
          std::to_string(s.m[i].size()) + "/" + std::to_string(s.v[i].size()) +
          " moment elements, expected " + std::to_string(p.size));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    Param &p = params[i];
    if (dev) {
      dev->copyFromHost(p.devM.get(), s.m[i].data(),
                        int64_t(p.size * sizeof(T)));
      dev->copyFromHost(p.devV.get(), s.v[i].data(),
                        int64_t(p.size * sizeof(T)));
    } else {
      p.m = s.m[i];
      p.v = s.v[i];
    }
  }
  t = s.step;
  cfg.lr = s.lr;
  last.valid = false;
  return Status::ok();
}

double LrSchedule::at(double lr, int64_t step) const {
  const double i = double(step - 1);
  const double W = double(warmupSteps), T = double(decaySteps);
  if (i < W)
    return lr * (i + 1) / W;
  if (kind == Kind::Constant)
    return lr;
  if (i >= T)
    return minLr;
  double p = (i - W) / (T - W);
  double f = kind == Kind::Cosine ? 0.5 * (1.0 + std::cos(M_PI * p)) : 1.0 - p;
  return minLr + (lr - minLr) * f;
}

Expected<LrSchedule::Kind> parseLrScheduleKind(const std::string &name) {
  if (name == "constant")
    return LrSchedule::Kind::Constant;
  if (name == "linear")
    return LrSchedule::Kind::Linear;
  if (name == "cosine")
    return LrSchedule::Kind::Cosine;
  return Status::error("unknown learning-rate schedule '" + name +
                       "' (expected constant, linear or cosine)");
}

const char *toString(LrSchedule::Kind k) {
  switch (k) {
  case LrSchedule::Kind::Constant:
    return "constant";
  case LrSchedule::Kind::Linear:
    return "linear";
  case LrSchedule::Kind::Cosine:
    return "cosine";
  }
  return "?";
}

Status checkLrSchedule(const LrSchedule &s, double lr) {
  if (s.warmupSteps < 0 || s.decaySteps < 0)
    return Status::error("warm-up and decay steps must be >= 0");
  if (!(s.minLr >= 0) || !(s.minLr <= lr))
    return Status::error("the minimum learning rate must be in [0, lr]");
  if (s.kind != LrSchedule::Kind::Constant && s.decaySteps <= s.warmupSteps)
    return Status::error(
        std::string("a ") + toString(s.kind) +
        " schedule needs more decay steps (" + std::to_string(s.decaySteps) +
        ") than warm-up steps (" + std::to_string(s.warmupSteps) + ")");
  return Status::ok();
}

template class AdamWT<float>;
template class AdamWT<double>;

//===--- Plain SGD (Executor.h's StepOptimizer seam) ----------------------===//

namespace {
class Sgd final : public StepOptimizer {
public:
  explicit Sgd(float lr) : lr(lr) {}
  Status update(const std::vector<ParamSlot> &ps, double, int64_t) override {
    for (const ParamSlot &p : ps)
      for (int64_t i = 0; i < p.n; ++i)
        p.value[i] -= lr * p.grad[i];
    return Status::ok();
  }

private:
  float lr;
};

} // namespace

std::unique_ptr<StepOptimizer> createSgd(float lr) {
  return std::make_unique<Sgd>(lr);
}

} // namespace pipeforge::rt
