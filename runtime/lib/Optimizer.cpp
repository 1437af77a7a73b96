//===- Optimizer.cpp - AdamW with clipping and post-validation ------------===//
//
// See Optimizer.h and docs/optimizer.md. The step and its rollback compute
// the update term lr * m'/(sqrt(v')+eps) with the same expression over the
// same stored m and v, so the rollback of theta only suffers the rounding of
// the two stores, never a different update.
//
//===----------------------------------------------------------------------===//
#include "pipeforge/rt/Optimizer.h"
#include "pipeforge/rt/Executor.h"

#include "pipeforge/Support/Numeric.h"

#include <cmath>
#include <limits>

namespace pipeforge::rt {

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
  p.m.assign(size, T(0));
  p.v.assign(size, T(0));
  params.push_back(std::move(p));
  last.valid = false;
  return Status::ok();
}

template <typename T> GradInfo AdamWT<T>::localGradInfo() const {
  GradInfo info;
  for (const Param &p : params) {
    double sum = 0.0;
    bool finite = true;
    for (size_t i = 0; i < p.size; ++i) {
      double g = static_cast<double>(p.grad[i]);
      if (!std::isfinite(g))
        finite = false;
      sum += g * g;
    }
    info.normSq += sum;
    info.allFinite = info.allFinite && finite;
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
void AdamWT<T>::applyStep(double scale, double lr, bool fromSnapshot) {
  // importState bounds t by kMaxSteps; never wrap even so.
  if (t < std::numeric_limits<int64_t>::max())
    ++t;
  const T b1 = T(cfg.beta1), b2 = T(cfg.beta2);
  const T ob1 = T(1.0 - cfg.beta1), ob2 = T(1.0 - cfg.beta2);
  const T bc1 = T(1.0 - std::pow(cfg.beta1, double(t)));
  const T bc2 = T(1.0 - std::pow(cfg.beta2, double(t)));
  const T lrT = T(lr), epsT = T(cfg.eps);
  const T decay = T(1.0 - lr * cfg.weightDecay);
  const T s = T(scale);
  const bool scaled = scale != 1.0;
  for (Param &p : params) {
    const T *grad = gradOf(p, fromSnapshot);
    T *theta = p.data;
    T *m = p.m.data(), *v = p.v.data();
    const T pd = p.decay ? decay : T(1);
    for (size_t i = 0; i < p.size; ++i) {
      T g = scaled ? T(grad[i] * s) : grad[i];
      m[i] = b1 * m[i] + ob1 * g;
      v[i] = b2 * v[i] + ob2 * (g * g);
      T upd = lrT * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + epsT);
      T x = theta[i] * pd;
      theta[i] = x - upd;
    }
  }
  last.valid = true;
  last.fromSnapshot = fromSnapshot;
  last.scale = scale;
  last.lr = lr;
}

template <typename T> Status AdamWT<T>::rollbackLastStep() {
  if (!last.valid || t <= 0)
    return Status::error("AdamW: no step to roll back");
  const T b1 = T(cfg.beta1), b2 = T(cfg.beta2);
  const T ob1 = T(1.0 - cfg.beta1), ob2 = T(1.0 - cfg.beta2);
  const T bc1 = T(1.0 - std::pow(cfg.beta1, double(t)));
  const T bc2 = T(1.0 - std::pow(cfg.beta2, double(t)));
  const T lrT = T(last.lr), epsT = T(cfg.eps);
  const T decay = T(1.0 - last.lr * cfg.weightDecay);
  const T s = T(last.scale);
  const bool scaled = last.scale != 1.0;
  for (Param &p : params) {
    const T *grad = gradOf(p, last.fromSnapshot);
    T *theta = p.data;
    T *m = p.m.data(), *v = p.v.data();
    const T pd = p.decay ? decay : T(1);
    for (size_t i = 0; i < p.size; ++i) {
      T g = scaled ? T(grad[i] * s) : grad[i];
      // theta = (theta + lr m'/(sqrt(v')+eps)) / (1 - lr wd)
      T upd = lrT * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + epsT);
      theta[i] = (theta[i] + upd) / pd;
      // m = (m - (1-b1) g)/b1,  v = (v - (1-b2) g^2)/b2
      m[i] = (m[i] - ob1 * g) / b1;
      T vi = (v[i] - ob2 * (g * g)) / b2;
      v[i] = vi > T(0) ? vi : T(0); // rounding must not make v negative
    }
  }
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
    for (Param &p : params)
      p.gradSnapshot.assign(p.grad, p.grad + p.size);
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
  for (const Param &p : params) {
    s.names.push_back(p.name);
    s.m.push_back(p.m);
    s.v.push_back(p.v);
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
    params[i].m = s.m[i];
    params[i].v = s.v[i];
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
