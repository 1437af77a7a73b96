//===- PairOrder.cpp - Component order of a fused F&B pair ----------------===//

#include "pipeforge/Schedule/PairOrder.h"

#include <algorithm>
#include <cmath>

namespace pipeforge::sched {

const char *pairStepName(PairStep s) {
  switch (s) {
  case PairStep::AttnF:
    return "attn:F";
  case PairStep::DispF:
    return "dispatch:F";
  case PairStep::MlpF:
    return "mlp:F";
  case PairStep::CombF:
    return "combine:F";
  case PairStep::CombB:
    return "combine:B";
  case PairStep::MlpB:
    return "mlp:B";
  case PairStep::DispB:
    return "dispatch:B";
  case PairStep::AttnB:
    return "attn:B";
  case PairStep::MlpW:
    return "mlp:W";
  case PairStep::AttnW:
    return "attn:W";
  }
  return "?";
}

std::string pairOrderToString(const std::vector<PairStep> &order) {
  std::string out;
  for (PairStep s : order) {
    if (!out.empty())
      out += ',';
    out += pairStepName(s);
  }
  return out;
}

const std::vector<PairStep> &deepSeekPairOrder() {
  static const std::vector<PairStep> order = {
      PairStep::CombB, PairStep::AttnF, PairStep::MlpB,  PairStep::DispF,
      PairStep::DispB, PairStep::MlpW,  PairStep::MlpF,  PairStep::AttnB,
      PairStep::AttnW, PairStep::CombF};
  return order;
}

namespace {
/// The step that must come before `s` in a layer step (its predecessor in
/// its member's chain, or the B part of a W part), or -1.
int predecessor(PairStep s) {
  switch (s) {
  case PairStep::DispF:
    return (int)PairStep::AttnF;
  case PairStep::MlpF:
    return (int)PairStep::DispF;
  case PairStep::CombF:
    return (int)PairStep::MlpF;
  case PairStep::MlpB:
    return (int)PairStep::CombB;
  case PairStep::DispB:
    return (int)PairStep::MlpB;
  case PairStep::AttnB:
    return (int)PairStep::DispB;
  case PairStep::MlpW:
    return (int)PairStep::MlpB;
  case PairStep::AttnW:
    return (int)PairStep::AttnB;
  default:
    return -1;
  }
}

void enumerate(std::vector<PairStep> &cur, bool (&used)[kNumPairSteps],
               std::vector<std::vector<PairStep>> &out) {
  if (cur.size() == kNumPairSteps) {
    out.push_back(cur);
    return;
  }
  for (int s = 0; s < kNumPairSteps; ++s) {
    int p = predecessor(static_cast<PairStep>(s));
    if (used[s] || (p >= 0 && !used[p]))
      continue;
    used[s] = true;
    cur.push_back(static_cast<PairStep>(s));
    enumerate(cur, used, out);
    cur.pop_back();
    used[s] = false;
  }
}
} // namespace

bool isValidPairOrder(const std::vector<PairStep> &order) {
  if (order.size() != kNumPairSteps)
    return false;
  bool used[kNumPairSteps] = {};
  for (PairStep s : order) {
    int i = static_cast<int>(s);
    if (i < 0 || i >= kNumPairSteps || used[i])
      return false;
    int p = predecessor(s);
    if (p >= 0 && !used[p])
      return false;
    used[i] = true;
  }
  return true;
}

std::vector<std::vector<PairStep>> allPairOrders() {
  static const std::vector<std::vector<PairStep>> all = [] {
    std::vector<std::vector<PairStep>> out;
    std::vector<PairStep> cur;
    bool used[kNumPairSteps] = {};
    enumerate(cur, used, out);
    return out;
  }();
  return all;
}

WorkParts splitWork(const CostModel &cost, const Work &w, double scale) {
  WorkParts p;
  int L = cost.moeLayers(w.stage);
  p.layers = std::max(1, L);
  p.a2a = (L > 0 && w.kind != WorkKind::W) ? cost.a2aTime(w.stage) : 0;
  double sh = std::min(1.0, std::max(0.0, cost.attnShare));
  double c = cost.timeOf(w.kind, w.stage) * scale, cw = 0;
  if (w.kind == WorkKind::BW) {
    double tb = cost.timeOf(WorkKind::B, w.stage);
    double tw = cost.timeOf(WorkKind::W, w.stage);
    double frac = tb + tw > 0 ? tb / (tb + tw) : 1;
    cw = c * (1 - frac);
    c = c * frac;
  }
  p.attn = c * sh / p.layers;
  p.mlp = c * (1 - sh) / p.layers;
  p.attnW = cw * sh / p.layers;
  p.mlpW = cw * (1 - sh) / p.layers;
  return p;
}

std::vector<PairComp> fusedPairComponents(const CostModel &cost,
                                          const Work &fw, const Work &bw,
                                          const std::vector<PairStep> &order,
                                          double scale) {
  std::vector<PairComp> cs;
  WorkParts pf = splitWork(cost, fw, scale);
  WorkParts pb = splitWork(cost, bw, scale);
  int n = std::max(pf.layers, pb.layers);
  int lastF = -1, lastB = -1;
  for (int l = 0; l < n; ++l) {
    bool hf = l < pf.layers, hb = l < pb.layers;
    auto f = [&](double v) { return hf ? v : 0.0; };
    auto b = [&](double v) { return hb ? v : 0.0; };
    int at[kNumPairSteps];
    std::fill(std::begin(at), std::end(at), -1);
    for (PairStep s : order) {
      PairComp c;
      c.layer = l;
      c.member = 1;
      int dep = -1;
      switch (s) {
      case PairStep::CombB:
        c.dur = b(pb.a2a), c.comm = true, c.which = 1, dep = lastB;
        break;
      case PairStep::MlpB:
        c.dur = b(pb.mlp), c.comm = false, dep = at[(int)PairStep::CombB];
        break;
      case PairStep::DispB:
        c.dur = b(pb.a2a), c.comm = true, dep = at[(int)PairStep::MlpB];
        break;
      case PairStep::AttnB:
        c.dur = b(pb.attn), c.comm = false, dep = at[(int)PairStep::DispB];
        break;
      // W parts wait for the gradient they need (the all-to-all before
      // their B part), as B does.
      case PairStep::MlpW:
        c.dur = b(pb.mlpW), c.comm = false, dep = at[(int)PairStep::CombB];
        break;
      case PairStep::AttnW:
        c.dur = b(pb.attnW), c.comm = false, dep = at[(int)PairStep::DispB];
        break;
      case PairStep::AttnF:
        c.dur = f(pf.attn), c.comm = false, c.member = 0, dep = lastF;
        break;
      case PairStep::DispF:
        c.dur = f(pf.a2a), c.comm = true, c.member = 0,
        dep = at[(int)PairStep::AttnF];
        break;
      case PairStep::MlpF:
        c.dur = f(pf.mlp), c.comm = false, c.member = 0,
        dep = at[(int)PairStep::DispF];
        break;
      case PairStep::CombF:
        c.dur = f(pf.a2a), c.comm = true, c.which = 1, c.member = 0,
        dep = at[(int)PairStep::MlpF];
        break;
      }
      c.dep1 = dep;
      cs.push_back(c);
      at[(int)s] = static_cast<int>(cs.size()) - 1;
    }
    lastF = at[(int)PairStep::CombF];
    lastB = at[(int)PairStep::AttnB];
  }
  return cs;
}

namespace {
/// F then the backward, every component after the one before it.
std::vector<PairComp> serialComponents(const CostModel &cost, const Work &fw,
                                       const Work &bw, double scale) {
  std::vector<PairComp> cs;
  int prev = -1;
  auto chain = [&](double dur, bool comm, int which, int member, int layer) {
    PairComp c;
    c.dur = dur;
    c.comm = comm;
    c.dep1 = prev;
    c.which = static_cast<uint8_t>(which);
    c.member = static_cast<uint8_t>(member);
    c.layer = layer;
    cs.push_back(c);
    prev = static_cast<int>(cs.size()) - 1;
  };
  const Work *ws[2] = {&fw, &bw};
  for (int m = 0; m < 2; ++m) {
    const Work &w = *ws[m];
    WorkParts p = splitWork(cost, w, scale);
    for (int l = 0; l < p.layers; ++l) {
      if (w.kind == WorkKind::F) {
        chain(p.attn, false, 0, m, l);
        chain(p.a2a, true, 0, m, l);
        chain(p.mlp, false, 0, m, l);
        chain(p.a2a, true, 1, m, l);
      } else {
        chain(p.a2a, true, 1, m, l);
        chain(p.mlp, false, 0, m, l);
        chain(p.mlpW, false, 0, m, l);
        chain(p.a2a, true, 0, m, l);
        chain(p.attn, false, 0, m, l);
        chain(p.attnW, false, 0, m, l);
      }
    }
  }
  return cs;
}

double pairScale(const CostModel &cost, const Work &fw, const Work &bw) {
  if (cost.tfb < 0)
    return 1;
  double sum = cost.timeOf(fw.kind, fw.stage) + cost.timeOf(bw.kind, bw.stage);
  return sum > 0 ? cost.tfb / sum : 0;
}
} // namespace

double listSchedulePair(const std::vector<PairComp> &cs, double start,
                        double &commFree, bool queueComm, PairBreakdown *out,
                        bool issueInOrder) {
  std::vector<double> endOf(cs.size(), start);
  double computeFree = start, end = start;
  double busy = 0, exposed = 0, commBusy = 0;
  auto seg = [&](double a, double b, bool exp, const PairComp *c) {
    if (!out)
      return;
    PairSegment s{a, b, c ? c->dur : b - a, exp};
    if (c) {
      s.which = c->which;
      s.member = c->member;
      s.layer = c->layer;
    }
    out->segments.push_back(s);
  };
  for (size_t k = 0; k < cs.size(); ++k) {
    const PairComp &c = cs[k];
    double ready = start;
    if (c.dep1 >= 0)
      ready = std::max(ready, endOf[c.dep1]);
    if (c.dep2 >= 0)
      ready = std::max(ready, endOf[c.dep2]);
    if (c.dur <= 0) {
      endOf[k] = ready; // an empty component passes its dependency on
      continue;
    }
    if (c.comm) {
      double st = queueComm ? std::max(ready, commFree) : ready;
      if (issueInOrder)
        st = std::max(st, computeFree); // issued after the compute before it
      endOf[k] = st + c.dur;
      if (queueComm)
        commFree = std::max(commFree, endOf[k]);
      commBusy += c.dur;
      seg(endOf[k] - c.dur, endOf[k], false, &c);
    } else {
      double s0 = std::max(ready, computeFree);
      if (s0 > computeFree) {
        // Compute idles only waiting for an all-to-all.
        exposed += s0 - computeFree;
        seg(computeFree, s0, true, nullptr);
      }
      endOf[k] = s0 + c.dur;
      computeFree = endOf[k];
      busy += c.dur;
    }
    end = std::max(end, endOf[k]);
  }
  if (end > computeFree) {
    exposed += end - computeFree;
    seg(computeFree, end, true, nullptr);
  }
  if (out) {
    out->end = end;
    out->busy = busy;
    out->exposed = exposed;
    out->commBusy = commBusy;
  }
  return end;
}

static Work pairMember(WorkKind k, int stage) {
  Work w;
  w.kind = k;
  w.stage = stage;
  return w;
}

double fusedPairTime(const CostModel &cost, int fStage, int bStage,
                     bool bIsFull, const std::vector<PairStep> &order,
                     PairBreakdown *out, bool issueInOrder) {
  if (!isValidPairOrder(order))
    return std::nan("");
  Work fw = pairMember(WorkKind::F, fStage);
  Work bw = pairMember(bIsFull ? WorkKind::BW : WorkKind::B, bStage);
  auto cs = fusedPairComponents(cost, fw, bw, order, pairScale(cost, fw, bw));
  double commFree = 0;
  return listSchedulePair(cs, 0, commFree, /*queueComm=*/true, out,
                          issueInOrder);
}

double serialPairTime(const CostModel &cost, int fStage, int bStage,
                      bool bIsFull) {
  Work fw = pairMember(WorkKind::F, fStage);
  Work bw = pairMember(bIsFull ? WorkKind::BW : WorkKind::B, bStage);
  double commFree = 0;
  auto cs = serialComponents(cost, fw, bw, pairScale(cost, fw, bw));
  return listSchedulePair(cs, 0, commFree, /*queueComm=*/false);
}

std::vector<PairStep> searchPairOrder(const CostModel &cost, int fStage,
                                      int bStage, bool bIsFull,
                                      double *time) {
  const auto &all = allPairOrders();
  auto tol = [](double t) { return 1e-9 * std::max(1.0, std::fabs(t)); };
  std::vector<double> t(all.size());
  double dsT = fusedPairTime(cost, fStage, bStage, bIsFull,
                             deepSeekPairOrder());
  double minT = dsT;
  for (size_t i = 0; i < all.size(); ++i) {
    t[i] = fusedPairTime(cost, fStage, bStage, bIsFull, all[i]);
    minT = std::min(minT, t[i]);
  }
  if (minT >= dsT - tol(dsT)) {
    if (time)
      *time = dsT;
    return deepSeekPairOrder();
  }
  // Among the fastest: the one also fastest when every all-to-all is
  // issued at its place in the program, then the lexicographically first.
  size_t best = all.size();
  double bestIn = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (t[i] > minT + tol(minT))
      continue;
    double in = fusedPairTime(cost, fStage, bStage, bIsFull, all[i], nullptr,
                              /*issueInOrder=*/true);
    if (best == all.size() || in < bestIn - tol(bestIn)) {
      best = i;
      bestIn = in;
    }
  }
  if (time)
    *time = t[best];
  return all[best];
}

} // namespace pipeforge::sched
