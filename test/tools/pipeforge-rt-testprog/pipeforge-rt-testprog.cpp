//===- pipeforge-rt-testprog.cpp - Hand-built programs for runtime tests --===//
//
// Writes a small residual MLP as a pipeline program, with its four
// functions per stage written by hand following the role conventions of
// docs/split-backward.md:
//   stage 0:        tokens -> embedding(+positions) -> block
//   stages 1..S-2:  block
//   stage S-1:      block -> layernorm -> linear (LM head) -> cross_entropy
//   block(x) = x + gelu(linear(x))
//
//   pipeforge-rt-testprog --add-components IN.pfp -o OUT.pfp  (see
//       addComponents: components for the fused-overlap executor tests)
//   pipeforge-rt-testprog --schedule 1f1b|zb-h1|...|none --ranks R
//       [--stages S] [--microbatches M] [--dp D] -o prog.pfp
//   pipeforge-rt-testprog --patch IN.pfp -o OUT.pfp POINTER=JSON...
//       (see patchMain: edits the JSON body of a program file without
//       validating it, for tests of what the validator refuses)
//
// `none` puts every stage on one rank (sched::generateNone: per microbatch
// F of all stages, then BW in reverse), the single-process reference for
// any stage count.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/rt/Program.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

[[noreturn]] void die(const std::string &m) {
  std::fprintf(stderr, "pipeforge-rt-testprog: %s\n", m.c_str());
  std::exit(1);
}

} // namespace

/// Components for a compiled program (tests of the fused-overlap executor
/// until pipeforge-compile --pp-fuse-overlap writes them): layers at the moe
/// kernels. Forward: layer i's mlp = [the kernel before its moe, moe, the
/// residual add], attn = the kernels before; backward: mlp from the
/// moe_bwd_input (and moe_bwd_weight) through the next two kernels, attn
/// the rest. Leading / trailing kernels join the first / last component.
void addComponents(Function &fn, bool forward) {
  std::vector<int32_t> moes;
  for (size_t k = 0; k < fn.kernels.size(); ++k)
    if (fn.kernels[k].op == (forward ? "moe" : "moe_bwd_input"))
      moes.push_back(int32_t(k));
  const int32_t nk = int32_t(fn.kernels.size());
  fn.components.clear();
  if (nk == 0)
    return;
  if (moes.empty()) {
    fn.components.push_back({"attn", 0, 0, nk});
    return;
  }
  const int32_t L = int32_t(moes.size());
  int32_t at = 0;
  for (int32_t i = 0; i < L; ++i) {
    int32_t m = moes[size_t(i)];
    int32_t nextM = i + 1 < L ? moes[size_t(i) + 1] : nk;
    int32_t layer = forward ? i : L - 1 - i;
    if (forward) {
      int32_t b = std::max(at, m - 1), e = std::min(nextM, m + 2);
      if (b > at)
        fn.components.push_back({"attn", layer, at, b});
      fn.components.push_back({"mlp", layer, at > b ? at : b, e});
      at = e;
    } else {
      int32_t e = m + 1;
      if (e < nk && fn.kernels[size_t(e)].op == "moe_bwd_weight")
        ++e;
      e = std::min(nextM, e + 2);
      fn.components.push_back({"mlp", layer, at, e});
      if (nextM > e)
        fn.components.push_back({"attn", layer, e, nextM});
      at = nextM;
    }
  }
  if (at < nk)
    fn.components.back().end = nk;
}

int addComponentsMain(const std::string &in, const std::string &out) {
  auto p = readProgram(in);
  if (!p)
    die(p.status().message());
  for (Stage &st : p->stages) {
    addComponents(st.forward, true);
    addComponents(st.backwardInput, false);
    addComponents(st.backward, false);
  }
  if (Status s = writeProgram(*p, out); !s)
    die(s.message());
  return 0;
}

/// Writes a copy of program file `in` with edits to its JSON body (header
/// and checksum recomputed, nothing validated): each edit is
/// `POINTER=JSON`, an RFC 6901 JSON pointer into the body (docs/
/// program-format.md) and the JSON value to put there, e.g.
///   /stages/1/forward/kernels/3/op="linear"
///   /stages/1/forward/kernels/3/inputs=[12,7]
/// The way for tests to build programs that pipeforge-compile never writes
/// (what the validator must refuse) without patching bytes.
int patchMain(const std::string &in, const std::string &out,
              const std::vector<std::string> &edits) {
  std::ifstream is(in, std::ios::binary);
  std::stringstream ss;
  ss << is.rdbuf();
  std::string bytes = ss.str();
  if (!is || bytes.size() < kProgramHeaderSize ||
      bytes.compare(0, 8, std::string(kProgramMagic, 8)) != 0)
    die("'" + in + "' is not a program file");
  nlohmann::json body = nlohmann::json::parse(
      bytes.substr(kProgramHeaderSize), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded())
    die("'" + in + "': the body is not valid JSON");
  for (const std::string &e : edits) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || e.empty() || e[0] != '/')
      die("edit '" + e + "' is not POINTER=JSON");
    nlohmann::json v = nlohmann::json::parse(e.substr(eq + 1), nullptr, false);
    if (v.is_discarded())
      die("edit '" + e + "': the value is not valid JSON");
    try {
      body[nlohmann::json::json_pointer(e.substr(0, eq))] = std::move(v);
    } catch (const nlohmann::json::exception &x) {
      die("edit '" + e + "': " + x.what());
    }
  }
  std::string text = body.dump(1) + "\n";
  std::string file = bytes.substr(0, 16); // magic, version, flags
  auto putU64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i)
      file.push_back(char((v >> (8 * i)) & 0xff));
  };
  putU64(text.size());
  putU64(programChecksum(text));
  file += text;
  std::ofstream os(out, std::ios::binary | std::ios::trunc);
  os.write(file.data(), std::streamsize(file.size()));
  if (!os)
    die("cannot write '" + out + "'");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && std::string(argv[1]) == "--add-components" &&
      std::string(argv[3]) == "-o")
    return addComponentsMain(argv[2], argv[4]);
  if (argc >= 5 && std::string(argv[1]) == "--patch" &&
      std::string(argv[3]) == "-o")
    return patchMain(argv[2], argv[4],
                     std::vector<std::string>(argv + 5, argv + argc));
  std::string kind = "1f1b", out;
  int ranks = 2, stages = -1, mb = 4, dp = 1;
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc)
        die("option " + o + " needs a value");
      return argv[++i];
    };
    if (o == "--schedule")
      kind = val();
    else if (o == "--ranks")
      ranks = std::atoi(val().c_str());
    else if (o == "--stages")
      stages = std::atoi(val().c_str());
    else if (o == "--microbatches")
      mb = std::atoi(val().c_str());
    else if (o == "--dp")
      dp = std::atoi(val().c_str());
    else if (o == "-o")
      out = val();
    else
      die("unknown option '" + o + "'");
  }
  if (out.empty())
    die("no -o");
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
    die(g.message());
  sc = g.take();
  if (Status s = sched::insertComm(sc); !s)
    die(s.message());
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
    die("invalid program: " + s.message());
  if (Status s = writeProgram(p, out); !s)
    die(s.message());
  return 0;
}
