//===- MoEParallel.cpp - nn.moe with experts split over ranks -------------===//
//
// See MoEParallel.h. Mirrors runtime/backends/cpu/KernelsMoE.cpp (routing, gates,
// capacity, router gradients) with the expert rows exchanged by all-to-all.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/MoEParallel.h"

#include "KernelOperands.h"

#include "cpu/Blas.h"
#include "cpu/Kernels.h"
#include "cpu/MoERouting.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace pipeforge::rt {

using cpu::detail::gemm;

bool isMoEOp(OpKind kind) {
  return kind == OpKind::MoE || kind == OpKind::MoEBwdInput ||
         kind == OpKind::MoEBwdWeight;
}

bool isMoEExpertOperand(OpKind kind, size_t numInputs, size_t j) {
  size_t tail = kind == OpKind::MoE ? 2 : 3;
  return isMoEOp(kind) && numInputs >= tail && j >= 2 &&
         j < numInputs + 2 - tail;
}

std::vector<std::vector<int32_t>>
moeDispatchOrder(const std::vector<int32_t> &topIdx,
                 const std::vector<char> &kept, int El, int ranks) {
  std::vector<std::vector<int32_t>> order(static_cast<size_t>(ranks));
  // Counting sort by expert, stable in assignment order.
  int E = El * ranks;
  std::vector<std::vector<int32_t>> byExpert(static_cast<size_t>(E));
  for (size_t a = 0; a < topIdx.size(); ++a)
    if (kept[a])
      byExpert[static_cast<size_t>(topIdx[a])].push_back(int32_t(a));
  for (int e = 0; e < E; ++e)
    for (int32_t a : byExpert[static_cast<size_t>(e)])
      order[static_cast<size_t>(e / El)].push_back(a);
  return order;
}

std::vector<std::pair<int32_t, int32_t>>
moeReceiveLayout(const std::vector<std::vector<int32_t>> &localExpertOfRow,
                 int El, std::vector<int64_t> &expertStart) {
  std::vector<std::pair<int32_t, int32_t>> rows;
  expertStart.assign(static_cast<size_t>(El) + 1, 0);
  for (int el = 0; el < El; ++el) {
    for (size_t s = 0; s < localExpertOfRow.size(); ++s)
      for (size_t i = 0; i < localExpertOfRow[s].size(); ++i)
        if (localExpertOfRow[s][i] == el)
          rows.push_back({int32_t(s), int32_t(i)});
    expertStart[static_cast<size_t>(el) + 1] = int64_t(rows.size());
  }
  return rows;
}

namespace {

/// One EP moe evaluation (forward state, both sides).
struct EpMoE {
  int64_t N = 0, H = 0, F = 0, E = 0, El = 0, K = 1, cap = 0;
  int ranks = 1, me = 0;
  bool gelu = false, gated = false;
  cpu::Activation activation() const {
    return gelu ? cpu::Activation::Gelu : cpu::Activation::Silu;
  }
  cpu::MoEShape route; ///< the routing fields (experts, topK, scoring, ...)
  const float *x = nullptr, *router = nullptr, *w1 = nullptr, *w2 = nullptr,
              *w3 = nullptr;
  const float *bias = nullptr; ///< [E] load-balancing bias (choice only)
  float *load = nullptr;       ///< [E] the step's load (forward), or null
  Transport *tr = nullptr;
  // Source side.
  std::vector<float> probs, gates;
  std::vector<int32_t> topIdx;
  std::vector<char> kept;
  std::vector<std::vector<int32_t>> sendOrder;
  std::vector<float> eoutA; ///< [N*K, H] expert output per kept assignment
  // Receiver side.
  std::vector<std::vector<int32_t>> recvExpert; ///< per source, per row
  std::vector<std::pair<int32_t, int32_t>> rows;
  std::vector<int64_t> expertStart;
  std::vector<std::vector<int32_t>> rowIndex; ///< [source][pos] -> row
  std::vector<float> xe, pre, pre3, act, eout;
  /// The all-to-all in flight between phases (its receive buffer).
  std::vector<std::vector<float>> inflight;

  int64_t R() const { return int64_t(rows.size()); }

  /// Phase 1 of the forward: router, top-k, capacity, and the dispatch
  /// all-to-all posted (into `inflight`).
  Expected<RequestId> routeAndDispatch() {
    // Router: scores, top-k and gates as the local kernel (MoERouting.h).
    probs.assign(static_cast<size_t>(N * E), 0.f);
    gemm(false, true, N, E, H, 1.f, x, H, router, H, 0.f, probs.data(), E);
    topIdx.assign(static_cast<size_t>(N * K), 0);
    gates.assign(static_cast<size_t>(N * K), 0.f);
    for (int64_t t = 0; t < N; ++t) {
      cpu::moeScoreToken(route, probs.data() + t * E);
      cpu::moeSelectToken(route, probs.data() + t * E, bias,
                          topIdx.data() + t * K, gates.data() + t * K);
    }
    // This rank's tokens' choices (the step's load sums them over ranks).
    for (size_t a = 0; load && a < topIdx.size(); ++a)
      load[topIdx[a]] += 1.0f;
    // Capacity: per expert, in assignment order (as the local kernel).
    std::vector<int64_t> count(static_cast<size_t>(E), 0);
    kept.assign(static_cast<size_t>(N * K), 0);
    for (int64_t a = 0; a < N * K; ++a) {
      int64_t e = topIdx[static_cast<size_t>(a)];
      if (cap == 0 || count[static_cast<size_t>(e)] < cap) {
        kept[static_cast<size_t>(a)] = 1;
        ++count[static_cast<size_t>(e)];
      }
    }
    // Dispatch: [local expert, x row] per assignment.
    sendOrder = moeDispatchOrder(topIdx, kept, int(El), ranks);
    std::vector<std::vector<float>> send(static_cast<size_t>(ranks)), recv;
    for (int d = 0; d < ranks; ++d)
      for (int32_t a : sendOrder[static_cast<size_t>(d)]) {
        auto &b = send[static_cast<size_t>(d)];
        b.push_back(float(topIdx[static_cast<size_t>(a)] - d * El));
        const float *src = x + (a / K) * H;
        b.insert(b.end(), src, src + H);
      }
    return tr->allToAllStart(send, inflight, Group::Expert);
  }

  /// Phase 2 (the dispatch arrived in `inflight`): local experts, and the
  /// combine all-to-all posted.
  Expected<RequestId> expertsAndCombine() {
    std::vector<std::vector<float>> recv = std::move(inflight);
    inflight.clear();
    recvExpert.assign(static_cast<size_t>(ranks), {});
    for (int s = 0; s < ranks; ++s) {
      const auto &b = recv[static_cast<size_t>(s)];
      if (b.size() % static_cast<size_t>(H + 1))
        return Status::error("moe dispatch: bad message size");
      for (size_t i = 0; i < b.size(); i += static_cast<size_t>(H + 1)) {
        int32_t el = int32_t(b[i]);
        if (el < 0 || el >= El)
          return Status::error("moe dispatch: bad expert id");
        recvExpert[static_cast<size_t>(s)].push_back(el);
      }
    }
    rows = moeReceiveLayout(recvExpert, int(El), expertStart);
    rowIndex.assign(static_cast<size_t>(ranks), {});
    for (int s = 0; s < ranks; ++s)
      rowIndex[static_cast<size_t>(s)].assign(
          recvExpert[static_cast<size_t>(s)].size(), -1);
    const int64_t Rn = R();
    xe.assign(static_cast<size_t>(Rn * H), 0.f);
    for (int64_t r = 0; r < Rn; ++r) {
      auto [s, i] = rows[static_cast<size_t>(r)];
      rowIndex[static_cast<size_t>(s)][static_cast<size_t>(i)] = int32_t(r);
      const float *src = recv[static_cast<size_t>(s)].data() +
                         static_cast<size_t>(i) * static_cast<size_t>(H + 1) +
                         1;
      std::copy(src, src + H, xe.data() + r * H);
    }
    // Local experts.
    pre.assign(static_cast<size_t>(Rn * F), 0.f);
    act.assign(static_cast<size_t>(Rn * F), 0.f);
    pre3.assign(gated ? static_cast<size_t>(Rn * F) : 0, 0.f);
    eout.assign(static_cast<size_t>(Rn * H), 0.f);
    for (int64_t e = 0; e < El; ++e) {
      int64_t r0 = expertStart[static_cast<size_t>(e)],
              n = expertStart[static_cast<size_t>(e) + 1] - r0;
      gemm(false, true, n, F, H, 1.f, xe.data() + r0 * H, H, w1 + e * F * H, H,
           0.f, pre.data() + r0 * F, F);
      if (gated)
        gemm(false, true, n, F, H, 1.f, xe.data() + r0 * H, H, w3 + e * F * H,
             H, 0.f, pre3.data() + r0 * F, F);
      cpu::expertAct(activation(), n * F, pre.data() + r0 * F,
                     gated ? pre3.data() + r0 * F : nullptr,
                     act.data() + r0 * F);
      gemm(false, true, n, H, F, 1.f, act.data() + r0 * F, F, w2 + e * H * F, F,
           0.f, eout.data() + r0 * H, H);
    }
    // Combine: outputs back to their sources.
    std::vector<std::vector<float>> back(static_cast<size_t>(ranks));
    backToSources(eout, back);
    return tr->allToAllStart(back, inflight, Group::Expert);
  }

  /// Phase 3 (the combine arrived): expert outputs by assignment, and when
  /// `y` is given the gate-weighted sum.
  Status combineFinish(float *y) {
    std::vector<std::vector<float>> got = std::move(inflight);
    inflight.clear();
    eoutA.assign(static_cast<size_t>(N * K * H), 0.f);
    if (Status s = scatterFromOwners(got, eoutA); !s)
      return s;
    if (!y)
      return Status::ok();
    for (int64_t i = 0; i < N * H; ++i)
      y[i] = 0.f;
    for (int64_t a = 0; a < N * K; ++a) {
      if (!kept[static_cast<size_t>(a)])
        continue;
      float g = gates[static_cast<size_t>(a)];
      const float *eo = eoutA.data() + a * H;
      float *yr = y + (a / K) * H;
      for (int64_t j = 0; j < H; ++j)
        yr[j] += g * eo[j];
    }
    return Status::ok();
  }

  /// Receiver rows [R, H] -> per source, in the source's order.
  void backToSources(const std::vector<float> &perRow,
                     std::vector<std::vector<float>> &back) const {
    for (int s = 0; s < ranks; ++s)
      for (int32_t r : rowIndex[static_cast<size_t>(s)])
        back[static_cast<size_t>(s)].insert(
            back[static_cast<size_t>(s)].end(), perRow.begin() + int64_t(r) * H,
            perRow.begin() + (int64_t(r) + 1) * H);
  }
  /// Per owner, rows in sendOrder -> [N*K, H] by assignment.
  Status scatterFromOwners(const std::vector<std::vector<float>> &got,
                           std::vector<float> &byA) const {
    for (int d = 0; d < ranks; ++d) {
      const auto &ord = sendOrder[static_cast<size_t>(d)];
      if (got[static_cast<size_t>(d)].size() !=
          ord.size() * static_cast<size_t>(H))
        return Status::error("moe combine: bad message size");
      for (size_t i = 0; i < ord.size(); ++i)
        std::copy(got[static_cast<size_t>(d)].begin() + int64_t(i) * H,
                  got[static_cast<size_t>(d)].begin() + (int64_t(i) + 1) * H,
                  byA.begin() + int64_t(ord[i]) * H);
    }
    return Status::ok();
  }

  /// dlogits [N, E] (as runtime/backends/cpu routerGrads).
  void routerGrads(const float *dy, std::vector<float> &dlogits) const {
    dlogits.assign(static_cast<size_t>(N * E), 0.f);
    std::vector<float> dg(static_cast<size_t>(K));
    for (int64_t t = 0; t < N; ++t) {
      const float *dyr = dy + t * H;
      for (int64_t r = 0; r < K; ++r) {
        int64_t a = t * K + r;
        float d = 0;
        if (kept[static_cast<size_t>(a)]) {
          const float *eo = eoutA.data() + a * H;
          for (int64_t j = 0; j < H; ++j)
            d += dyr[j] * eo[j];
        }
        dg[static_cast<size_t>(r)] = d;
      }
      cpu::moeRouterGradToken(route, probs.data() + t * E, topIdx.data() + t * K,
                              gates.data() + t * K, dg.data(),
                              dlogits.data() + t * E);
    }
  }

  /// Sends gate * dy of each kept assignment to its owner; on the owner:
  /// dye [R, H] and dpre [2 R F] (second half dpre3 when gated).
  /// Posts gate * dy of each kept assignment to its owner.
  Expected<RequestId> gradDispatch(const float *dy) {
    std::vector<std::vector<float>> send(static_cast<size_t>(ranks));
    for (int d = 0; d < ranks; ++d)
      for (int32_t a : sendOrder[static_cast<size_t>(d)]) {
        const float *src = dy + (a / K) * H;
        float g = gates[static_cast<size_t>(a)];
        for (int64_t j = 0; j < H; ++j)
          send[static_cast<size_t>(d)].push_back(g * src[j]);
      }
    return tr->allToAllStart(send, inflight, Group::Expert);
  }
  /// The gate * dy rows arrived: dye and dpre on the owner.
  Status gradExperts(std::vector<float> &dye, std::vector<float> &dpre) {
    std::vector<std::vector<float>> recv = std::move(inflight);
    inflight.clear();
    const int64_t Rn = R();
    dye.assign(static_cast<size_t>(Rn * H), 0.f);
    for (int s = 0; s < ranks; ++s) {
      if (recv[static_cast<size_t>(s)].size() !=
          rowIndex[static_cast<size_t>(s)].size() * static_cast<size_t>(H))
        return Status::error("moe gradient dispatch: bad message size");
      for (size_t i = 0; i < rowIndex[static_cast<size_t>(s)].size(); ++i)
        std::copy(recv[static_cast<size_t>(s)].begin() + int64_t(i) * H,
                  recv[static_cast<size_t>(s)].begin() + (int64_t(i) + 1) * H,
                  dye.begin() +
                      int64_t(rowIndex[static_cast<size_t>(s)][i]) * H);
    }
    dpre.assign(static_cast<size_t>(2 * Rn * F), 0.f);
    for (int64_t e = 0; e < El; ++e) {
      int64_t r0 = expertStart[static_cast<size_t>(e)],
              n = expertStart[static_cast<size_t>(e) + 1] - r0;
      gemm(false, false, n, F, H, 1.f, dye.data() + r0 * H, H, w2 + e * H * F,
           F, 0.f, dpre.data() + r0 * F, F);
    }
    cpu::expertActGrad(activation(), Rn * F, pre.data(),
                       gated ? pre3.data() : nullptr, dpre.data(),
                       gated ? dpre.data() + Rn * F : nullptr);
    return Status::ok();
  }
};

} // namespace

/// The phases of one moe kernel (see MoEPhased in MoEParallel.h):
///   moe:            route+post dispatch | experts+post combine | sum
///   moe_bwd_input:  route+post dispatch | experts+post combine |
///                   router grads+post dy rows | expert grads, dx rows+post |
///                   dx
///   moe_bwd_weight: route+post dispatch | experts+post combine |
///                   router grads+post dy rows | weight grads
/// The computations and their order per kernel are those of the blocking
/// version (which runs the phases back to back): same bits.
struct MoEPhased::State {
  KernelCall call;
  std::vector<const void *> in;
  std::vector<void *> out;
  std::vector<const TensorType *> inTypes, outTypes;
  Transport *tr = nullptr;
  EpMoE m;
  bool fwd = false, bwdIn = false, bwdW = false;
  int phase = 0, numPhases = 0;
  RequestId req = 0;
  double posted = 0;
  const char *what = "";
  const float *dy = nullptr;
  std::vector<float> dlogits, dye, dpre;

  Status err(const std::string &msg) const {
    return Status::error("op '" + call.kernel->op +
                         "' (expert parallel): " + msg);
  }
  static double now() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
  }
  Status post(Expected<RequestId> r, const char *w) {
    if (!r)
      return err(r.status().message());
    req = *r;
    posted = now();
    what = w;
    return Status::ok();
  }
  Status waitPosted(std::vector<MoEPhased::CommTiming> &tm) {
    double w0 = now();
    if (Status s = tr->wait(req); !s)
      return err(s.message());
    tm.push_back({what, posted, w0, now()});
    req = 0;
    return Status::ok();
  }
  Status run(std::vector<MoEPhased::CommTiming> &tm) {
    const int64_t N = m.N, H = m.H, F = m.F, E = m.E;
    if (phase > 0)
      if (Status s = waitPosted(tm); !s)
        return s;
    int ph = phase++;
    switch (ph) {
    case 0:
      return post(m.routeAndDispatch(),
                  fwd ? "dispatch" : "dispatch (recompute)");
    case 1:
      return post(m.expertsAndCombine(),
                  fwd ? "combine" : "combine (recompute)");
    case 2: {
      if (Status s =
              m.combineFinish(fwd ? static_cast<float *>(out[0]) : nullptr);
          !s)
        return err(s.message());
      if (fwd)
        return Status::ok();
      m.routerGrads(dy, dlogits);
      return post(m.gradDispatch(dy), "combine-bwd (dy rows)");
    }
    case 3: {
      if (Status s = m.gradExperts(dye, dpre); !s)
        return err(s.message());
      const int64_t Rn = m.R();
      if (bwdIn) {
        float *dx = static_cast<float *>(out[0]);
        gemm(false, false, N, H, E, 1.f, dlogits.data(), E, m.router, H, 0.f,
             dx, H);
        std::vector<float> dxe(static_cast<size_t>(Rn * H), 0.f);
        for (int64_t e = 0; e < m.El; ++e) {
          int64_t r0 = m.expertStart[static_cast<size_t>(e)],
                  n = m.expertStart[static_cast<size_t>(e) + 1] - r0;
          gemm(false, false, n, H, F, 1.f, dpre.data() + r0 * F, F,
               m.w1 + e * F * H, H, 0.f, dxe.data() + r0 * H, H);
          if (m.gated)
            gemm(false, false, n, H, F, 1.f, dpre.data() + Rn * F + r0 * F, F,
                 m.w3 + e * F * H, H, 1.f, dxe.data() + r0 * H, H);
        }
        std::vector<std::vector<float>> back(static_cast<size_t>(m.ranks));
        m.backToSources(dxe, back);
        return post(tr->allToAllStart(back, m.inflight, Group::Expert),
                    "dispatch-bwd (dx rows)");
      }
      // Weight gradients: router (replicated) and the local experts' slices.
      if (out.size() < 3 || !out[1] || !out[2] ||
          (m.gated && (out.size() < 4 || !out[3])))
        return err("missing gradient results");
      for (size_t i = 0; i < out.size() && i < 4; ++i)
        if (out[i] && outTypes[i])
          std::memset(out[i], 0, static_cast<size_t>(outTypes[i]->numBytes()));
      float *drouter = static_cast<float *>(out[0]);
      float *dw1 = static_cast<float *>(out[1]);
      float *dw2 = static_cast<float *>(out[2]);
      float *dw3 = m.gated ? static_cast<float *>(out[3]) : nullptr;
      for (int64_t e = 0; e < m.El; ++e) {
        int64_t r0 = m.expertStart[static_cast<size_t>(e)],
                n = m.expertStart[static_cast<size_t>(e) + 1] - r0;
        gemm(true, false, H, F, n, 1.f, dye.data() + r0 * H, H,
             m.act.data() + r0 * F, F, 1.f, dw2 + e * H * F, F);
        gemm(true, false, F, H, n, 1.f, dpre.data() + r0 * F, F,
             m.xe.data() + r0 * H, H, 1.f, dw1 + e * F * H, H);
        if (m.gated)
          gemm(true, false, F, H, n, 1.f, dpre.data() + Rn * F + r0 * F, F,
               m.xe.data() + r0 * H, H, 1.f, dw3 + e * F * H, H);
      }
      gemm(true, false, E, H, N, 1.f, dlogits.data(), E, m.x, H, 1.f, drouter,
           H);
      return Status::ok();
    }
    case 4: {
      float *dx = static_cast<float *>(out[0]);
      std::vector<std::vector<float>> got = std::move(m.inflight);
      m.inflight.clear();
      std::vector<float> dxA(static_cast<size_t>(N * m.K * H), 0.f);
      if (Status s = m.scatterFromOwners(got, dxA); !s)
        return err(s.message());
      for (int64_t asg = 0; asg < N * m.K; ++asg) {
        if (!m.kept[static_cast<size_t>(asg)])
          continue;
        const float *src = dxA.data() + asg * H;
        float *dst = dx + (asg / m.K) * H;
        for (int64_t j = 0; j < H; ++j)
          dst[j] += src[j];
      }
      return Status::ok();
    }
    }
    return err("no phase left");
  }
};

MoEPhased::MoEPhased() : st(std::make_unique<State>()) {}
MoEPhased::~MoEPhased() = default;
bool MoEPhased::done() const { return st->phase >= st->numPhases; }
int MoEPhased::phasesLeft() const {
  return st->phase >= st->numPhases ? 0 : st->numPhases - st->phase;
}
const char *MoEPhased::inFlight() const {
  return st->phase > 0 && !done() ? st->what : nullptr;
}
Status MoEPhased::next() {
  if (done())
    return st->err("no phase left");
  return st->run(timings);
}

Expected<std::unique_ptr<MoEPhased>> MoEPhased::begin(const KernelCall &call,
                                                      Transport &tr) {
  const Kernel &k = *call.kernel;
  std::unique_ptr<MoEPhased> ph(new MoEPhased());
  State &S = *ph->st;
  S.fwd = k.kind == OpKind::MoE;
  S.bwdIn = k.kind == OpKind::MoEBwdInput;
  S.bwdW = k.kind == OpKind::MoEBwdWeight;
  S.call = call;
  S.tr = &tr;
  auto err = [&](const std::string &m) {
    return Status::error("op '" + k.op + "' (expert parallel): " + m);
  };
  if (!S.fwd && !S.bwdIn && !S.bwdW)
    return err("not a moe op");
  // The operands are the validated ones (rt/OpShapes.h): (x, router, w1,
  // w2, [w3], [dy]) with w3 left out or null when absent.
  size_t nin = call.in.size();
  S.in = call.in;
  S.out = call.out;
  S.inTypes = call.inTypes;
  S.outTypes = call.outTypes;
  bool hasW3 = S.fwd ? nin >= 5 : nin >= 6;
  EpMoE &m = S.m;
  m.tr = &tr;
  m.ranks = tr.epSize();
  m.me = tr.epIndex();
  const TensorType *xt = call.inTypes[0], *w1t = call.inTypes[2];
  if (!xt || !w1t || w1t->shape.size() != 3 || xt->shape.empty())
    return err("bad operand shapes");
  m.H = xt->shape.back();
  m.N = m.H ? xt->numElements() / m.H : 0;
  m.E = w1t->shape[0];
  m.F = w1t->shape[1];
  if (m.E % m.ranks)
    return err(std::to_string(m.E) + " experts do not split over " +
               std::to_string(m.ranks) + " ranks");
  m.El = m.E / m.ranks;
  m.K = ops::attrInt(k, "top_k", 1);
  m.cap = cpu::moeCapacity(ops::attrFloat(k, "capacity_factor"), m.N, m.K, m.E);
  std::string a = ops::attrStr(k, "activation");
  if (a != "gelu" && a != "silu")
    return err("unknown activation '" + a + "'");
  m.gelu = a == "gelu";
  if (m.K < 1 || m.K > m.E)
    return err("invalid top_k");
  m.route.tokens = m.N;
  m.route.hidden = m.H;
  m.route.ffn = m.F;
  m.route.experts = m.E;
  m.route.topK = m.K;
  if (Status s = ops::moeRouting(k, m.route); !s)
    return s;
  if (!cpu::isValid(m.route))
    return err("invalid routing");
  if (Status s = ops::moeCheckBias(k, call); !s)
    return s;
  m.bias = call.moeBias;
  m.load = S.fwd ? call.moeLoad : nullptr;
  m.x = static_cast<const float *>(call.in[0]);
  m.router = static_cast<const float *>(call.in[1]);
  m.w1 = static_cast<const float *>(call.in[2]);
  m.w2 = static_cast<const float *>(call.in[3]);
  m.w3 = hasW3 ? static_cast<const float *>(call.in[4]) : nullptr;
  m.gated = m.w3 != nullptr;
  S.dy = S.fwd ? nullptr : static_cast<const float *>(call.in[nin - 1]);
  S.numPhases = S.fwd ? 3 : S.bwdIn ? 5 : 4;
  S.call.in.clear(); // the pointers live in S.in / S.out
  S.call.out.clear();
  if (Status s = ph->next(); !s)
    return s;
  return ph;
}

Status runMoEParallel(const KernelCall &call, Transport &tr) {
  auto ph = MoEPhased::begin(call, tr);
  if (!ph)
    return ph.status();
  while (!(*ph)->done())
    if (Status s = (*ph)->next(); !s)
      return s;
  return Status::ok();
}

} // namespace pipeforge::rt
