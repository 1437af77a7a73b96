//===- MlpProgram.cpp - A hand-built residual MLP as a pipeline program ---===//
//
// See MlpProgram.h.
//
//===----------------------------------------------------------------------===//

#include "MlpProgram.h"

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"

#include <algorithm>
#include <string>

using namespace pipeforge;
using namespace pipeforge::rt;

namespace {

const int64_t V = 16, S = 4, Bt = 2, H = 8;

TensorType f32(std::vector<int64_t> s) { return {DType::F32, std::move(s)}; }
TensorType i32(std::vector<int64_t> s) { return {DType::I32, std::move(s)}; }

struct FB {
  Function fn;
  int32_t val(TensorType t) {
    fn.values.push_back(std::move(t));
    return int32_t(fn.values.size() - 1);
  }
  int32_t arg(ArgRole r, int32_t idx, TensorType t) {
    int32_t v = val(std::move(t));
    fn.args.push_back({r, idx, v});
    return v;
  }
  std::vector<int32_t> k(const std::string &op, std::vector<int32_t> in,
                         std::vector<TensorType> outs,
                         std::map<std::string, AttrValue> attrs = {}) {
    Kernel kn;
    kn.op = op;
    kn.inputs = std::move(in);
    kn.attrs = std::move(attrs);
    std::vector<int32_t> r;
    for (auto &t : outs)
      r.push_back(val(t));
    kn.outputs = r;
    fn.kernels.push_back(std::move(kn));
    return r;
  }
  void res(ResultRole r, int32_t idx, int32_t v) {
    fn.results.push_back({r, idx, v});
  }
  Function done() {
    for (size_t v = 0; v < fn.values.size(); ++v) {
      fn.buffer.push_back(int32_t(v));
      fn.bufferBytes.push_back(fn.values[v].numBytes());
    }
    return fn;
  }
};

struct Names {
  std::vector<Param> &params;
  std::string suffix;
  int copy;
  int32_t add(const std::string &n, TensorType t, const std::string &init,
              int stage) {
    Param p;
    p.name = n + suffix;
    p.type = std::move(t);
    p.init = init;
    p.copy = copy;
    p.stage = stage;
    params.push_back(p);
    return int32_t(params.size() - 1);
  }
};

/// One stage's four functions.
Stage buildStage(Names &nm, int copy, int s, int numStages) {
  bool first = s == 0, last = s == numStages - 1;
  TensorType act = f32({Bt, S, H});
  std::string pre = "l" + std::to_string(s) + ".";
  int32_t pWte = -1, pWpe = -1, pG = -1, pBeta = -1, pOut = -1;
  if (first) {
    pWte = nm.add("wte", f32({V, H}), "normal:0.5", s);
    pWpe = nm.add("wpe", f32({S, H}), "normal:0.1", s);
  }
  int32_t pW = nm.add(pre + "w", f32({H, H}), "normal:0.3", s);
  int32_t pB = nm.add(pre + "b", f32({H}), "normal:0.05", s);
  if (last) {
    pG = nm.add("ln.g", f32({H}), "ones", s);
    pBeta = nm.add("ln.b", f32({H}), "zeros", s);
    pOut = nm.add("head", f32({V, H}), "normal:0.3", s);
  }
  Stage st;
  st.copy = copy;
  st.index = s;
  std::map<std::string, AttrValue> ceAttrs, lnAttrs{{"epsilon", 1e-5}},
      biasAttrs{{"has_bias", true}};
  // ---- F
  FB f;
  int32_t x, tok = -1, tgt = -1;
  if (first) {
    tok = f.arg(ArgRole::Tokens, 0, i32({Bt, S}));
    int32_t wte = f.arg(ArgRole::Param, pWte, f32({V, H}));
    int32_t wpe = f.arg(ArgRole::Param, pWpe, f32({S, H}));
    x = f.k("embedding", {tok, wte, wpe}, {act})[0];
  } else {
    x = f.arg(ArgRole::Activation, 0, act);
  }
  int32_t w = f.arg(ArgRole::Param, pW, f32({H, H}));
  int32_t b = f.arg(ArgRole::Param, pB, f32({H}));
  int32_t h = f.k("linear", {x, w, b}, {act})[0];
  int32_t g = f.k("gelu", {h}, {act})[0];
  int32_t y = f.k("add", {x, g}, {act})[0];
  int nstash = 0;
  f.res(ResultRole::Stash, nstash++, x); // 0
  f.res(ResultRole::Stash, nstash++, h); // 1
  if (first)
    f.res(ResultRole::Stash, nstash++, tok); // 2
  if (!last) {
    f.res(ResultRole::Activation, 0, y);
  } else {
    tgt = f.arg(ArgRole::Targets, 0, i32({Bt, S}));
    int32_t gm = f.arg(ArgRole::Param, pG, f32({H}));
    int32_t be = f.arg(ArgRole::Param, pBeta, f32({H}));
    int32_t wo = f.arg(ArgRole::Param, pOut, f32({V, H}));
    int32_t n = f.k("layernorm", {y, gm, be}, {act}, lnAttrs)[0];
    int32_t lg = f.k("linear", {n, wo, -1}, {f32({Bt, S, V})})[0];
    int32_t loss = f.k("cross_entropy", {lg, tgt}, {f32({})})[0];
    f.res(ResultRole::Loss, 0, loss);
    f.res(ResultRole::Stash, nstash++, y);   // 2
    f.res(ResultRole::Stash, nstash++, n);   // 3
    f.res(ResultRole::Stash, nstash++, lg);  // 4
    f.res(ResultRole::Stash, nstash++, tgt); // 5
  }
  st.numStash = nstash;
  st.forward = f.done();

  // ---- B and BW share the input-gradient part; W and BW the weight part.
  auto backward = [&](bool withB, bool withW) {
    FB fb;
    std::map<std::string, int32_t> v; // what W reads
    if (withB) {
      int32_t w_ = fb.arg(ArgRole::Param, pW, f32({H, H}));
      int32_t h_ = fb.arg(ArgRole::Stash, 1, act);
      int32_t dy;
      if (last) {
        int32_t gm = fb.arg(ArgRole::Param, pG, f32({H}));
        int32_t wo = fb.arg(ArgRole::Param, pOut, f32({V, H}));
        int32_t y_ = fb.arg(ArgRole::Stash, 2, act);
        int32_t lg = fb.arg(ArgRole::Stash, 4, f32({Bt, S, V}));
        int32_t tg = fb.arg(ArgRole::Stash, 5, i32({Bt, S}));
        int32_t seed = fb.arg(ArgRole::GradIn, 0, f32({}));
        int32_t dlg =
            fb.k("cross_entropy_bwd", {lg, tg, seed}, {f32({Bt, S, V})})[0];
        int32_t dn = fb.k("linear_bwd_input", {dlg, wo}, {act})[0];
        dy = fb.k("layernorm_bwd_input", {y_, gm, dn}, {act}, lnAttrs)[0];
        v["dlg"] = dlg;
        v["dn"] = dn;
      } else {
        dy = fb.arg(ArgRole::GradIn, 0, act);
      }
      int32_t dh = fb.k("gelu_bwd", {h_, dy}, {act})[0];
      int32_t dx1 = fb.k("linear_bwd_input", {dh, w_}, {act})[0];
      int32_t dx = fb.k("add", {dy, dx1}, {act})[0];
      v["dh"] = dh;
      v["dx"] = dx;
      if (!first)
        fb.res(ResultRole::GradOut, 0, dx);
    }
    if (withB && !withW) {
      int nw = 0;
      fb.res(ResultRole::WStash, nw++, v["dh"]);
      if (first)
        fb.res(ResultRole::WStash, nw++, v["dx"]);
      if (last) {
        fb.res(ResultRole::WStash, nw++, v["dlg"]);
        fb.res(ResultRole::WStash, nw++, v["dn"]);
      }
      st.numWStash = nw;
    }
    if (withW) {
      int32_t x_ = fb.arg(ArgRole::Stash, 0, act);
      int nw = 0;
      auto get = [&](const char *name, TensorType t) {
        if (withB)
          return v[name];
        return fb.arg(ArgRole::WStash, nw++, std::move(t));
      };
      int32_t dh = get("dh", act);
      int32_t dx = first ? get("dx", act) : -1;
      int32_t dlg = last ? get("dlg", f32({Bt, S, V})) : -1;
      int32_t dn = last ? get("dn", act) : -1;
      auto gw = fb.k("linear_bwd_weight", {x_, dh}, {f32({H, H}), f32({H})},
                     biasAttrs);
      fb.res(ResultRole::ParamGrad, pW, gw[0]);
      fb.res(ResultRole::ParamGrad, pB, gw[1]);
      if (first) {
        int32_t tk = fb.arg(ArgRole::Stash, 2, i32({Bt, S}));
        auto ge =
            fb.k("embedding_bwd_weight", {tk, dx}, {f32({V, H}), f32({S, H})},
                 {{"vocab", int64_t(V)}, {"max_positions", int64_t(S)}});
        fb.res(ResultRole::ParamGrad, pWte, ge[0]);
        fb.res(ResultRole::ParamGrad, pWpe, ge[1]);
      }
      if (last) {
        int32_t y_ = withB ? -1 : fb.arg(ArgRole::Stash, 2, act);
        if (withB)
          for (auto &a : fb.fn.args)
            if (a.role == ArgRole::Stash && a.index == 2)
              y_ = a.value;
        int32_t n_ = fb.arg(ArgRole::Stash, 3, act);
        auto go = fb.k("linear_bwd_weight", {n_, dlg}, {f32({V, H})});
        auto gl = fb.k("layernorm_bwd_weight", {y_, dn}, {f32({H}), f32({H})},
                       lnAttrs);
        fb.res(ResultRole::ParamGrad, pOut, go[0]);
        fb.res(ResultRole::ParamGrad, pG, gl[0]);
        fb.res(ResultRole::ParamGrad, pBeta, gl[1]);
      }
    }
    return fb.done();
  };
  st.backwardInput = backward(true, false);
  st.backwardWeight = backward(false, true);
  st.backward = backward(true, true);
  return st;
}

} // namespace

sched::Expected<Program> testing::buildMlpProgram(const std::string &kind,
                                                  int ranks, int stages, int mb,
                                                  int dp) {
  Program p;
  p.model = {"mlp-test", V, S, Bt};
  p.training.dataParallel = dp;
  p.training.seed = 7;
  sched::Schedule sc;
  auto g = [&]() -> sched::Expected<sched::Schedule> {
    if (kind == "none") { // the single-process reference, any stage count
      ranks = 1;
      return sched::generateNone(stages > 0 ? stages : 2, mb);
    }
    auto k = sched::parseScheduleKind(kind);
    if (!k)
      return sched::Status::error("unknown schedule '" + kind + "'");
    sched::GenOptions go;
    go.ranks = ranks;
    go.microbatches = mb;
    return sched::generate(*k, go);
  }();
  if (!g)
    return g.status();
  sc = g.take();
  if (Status s = sched::insertComm(sc); !s)
    return s;
  p.schedule = sc;
  p.training.schedule = sc.name;
  p.training.pipelineRanks = ranks;
  p.training.microbatches = sc.numMicrobatches * sc.placement.numCopies;
  for (int c = 0; c < sc.placement.numCopies; ++c) {
    Names nm{p.params, c ? "@copy" + std::to_string(c) : "", c};
    for (int s = 0; s < sc.placement.numStages; ++s) {
      Stage st = buildStage(nm, c, s, sc.placement.numStages);
      st.rank = sc.placement.rank(c, s);
      int chunk = 0;
      for (int c2 = 0; c2 <= c; ++c2)
        for (int t = 0; t < (c2 < c ? sc.placement.numStages : s); ++t)
          chunk += sc.placement.rank(c2, t) == st.rank;
      st.chunk = chunk;
      p.stages.push_back(std::move(st));
    }
  }
  if (Status s = validateProgram(p); !s)
    return Status::error("invalid program: " + s.message());
  return p;
}
