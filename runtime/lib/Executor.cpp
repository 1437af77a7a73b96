//===- Executor.cpp - Interprets a rank's schedule each step --------------===//

#include "pipeforge/rt/Executor.h"
#include "pipeforge/rt/Data.h"
#include "pipeforge/rt/MoEParallel.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

namespace pipeforge::rt {

using sched::Action;
using sched::ActionKind;
using sched::Payload;
using sched::Work;
using sched::WorkKind;

namespace {

double nowS() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// An owned device buffer.
struct Buf {
  Backend *be = nullptr;
  void *p = nullptr;
  int64_t bytes = 0;
  Buf(Backend &b, int64_t n) : be(&b), p(b.alloc(n)), bytes(n) {}
  ~Buf() {
    if (p)
      be->free(p);
  }
  Buf(const Buf &) = delete;
  Buf &operator=(const Buf &) = delete;
  float *f() { return static_cast<float *>(p); }
};
using BufP = std::shared_ptr<Buf>;

using Key = std::tuple<int, int, int>; // copy, stage, mb

/// How a function's values map to memory.
struct FnPlan {
  bool perValue = false;                  ///< ignore the buffer assignment
  std::vector<std::unique_ptr<Buf>> bufs; ///< workspace, lazily allocated
};

struct TraceEvent {
  std::string name;
  int tid;          ///< 0 compute, 1 comm
  double ts, dur;   ///< seconds since the run's epoch
  std::string args; ///< JSON members for "args" (benchmarks/runtime_vs_sim.py)
  const char *cat = nullptr; ///< null: by tid (compute, comm, step)
};

uint64_t splitmix(uint64_t &x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t hashStr(const std::string &s, uint64_t h) {
  return fnv1a64(s.data(), s.size(), h);
}

class PatternTokens final : public TokenSource {
public:
  PatternTokens(uint64_t seed, int64_t vocab) : seed(seed), vocab(vocab) {}
  Status fill(int64_t step, int dpIndex, int64_t g, int64_t batch, int64_t seq,
              int32_t *tok, int32_t *tgt) override {
    if (vocab < 2)
      return Status::error("pattern data needs a vocabulary of at least 2");
    for (int64_t b = 0; b < batch; ++b) {
      uint64_t x = seed ^ (uint64_t(step) * 1000003ull) ^
                   (uint64_t(dpIndex) << 40) ^ (uint64_t(g) << 20) ^
                   uint64_t(b);
      int64_t cur = int64_t(splitmix(x) % uint64_t(vocab));
      int64_t mult = 1 + 2 * ((step + g + b) % 2); // two interleaved rules
      for (int64_t t = 0; t < seq; ++t) {
        int64_t nxt = (cur * mult + 1) % vocab;
        tok[b * seq + t] = int32_t(cur);
        tgt[b * seq + t] = int32_t(nxt);
        cur = nxt;
      }
    }
    return Status::ok();
  }

private:
  uint64_t seed;
  int64_t vocab;
};

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

std::unique_ptr<TokenSource> createPatternTokens(uint64_t seed, int64_t vocab) {
  return std::make_unique<PatternTokens>(seed, vocab);
}
std::unique_ptr<StepOptimizer> createSgd(float lr) {
  return std::make_unique<Sgd>(lr);
}

std::string baseParamName(const std::string &name) {
  size_t at = name.rfind("@copy");
  if (at == std::string::npos)
    return name;
  for (size_t i = at + 5; i < name.size(); ++i)
    if (!isdigit((unsigned char)name[i]))
      return name;
  return name.substr(0, at);
}

Status initParamValues(const Param &p, uint64_t seed, float *out) {
  int64_t n = p.type.numElements();
  const std::string &init = p.init;
  uint64_t base = hashStr(baseParamName(p.name), kFnv1aOffset ^ seed);
  auto uniform01 = [&](int64_t i, int k) {
    uint64_t x = base + uint64_t(i) * 2 + uint64_t(k);
    return (double(splitmix(x) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  };
  if (init == "zeros" || init.empty()) {
    std::fill(out, out + n, 0.0f);
  } else if (init == "ones") {
    std::fill(out, out + n, 1.0f);
  } else if (init.rfind("normal:", 0) == 0 || init.rfind("uniform:", 0) == 0) {
    bool normal = init[0] == 'n';
    char *end = nullptr;
    const char *num = init.c_str() + (normal ? 7 : 8);
    double a = std::strtod(num, &end);
    if (end == num || *end)
      return Status::error("parameter '" + p.name + "': bad init '" + init +
                           "'");
    for (int64_t i = 0; i < n; ++i) {
      double u1 = uniform01(i, 0), u2 = uniform01(i, 1);
      out[i] = normal ? float(a * std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(6.283185307179586 * u2))
                      : float(a * (2 * u1 - 1));
    }
  } else {
    return Status::error("parameter '" + p.name + "': unknown init '" + init +
                         "' (expected normal:<std>, uniform:<a>, zeros, ones)");
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Weights files: "PFWEIGHTS1\n" then per tensor "<name> <n>\n" + n floats.
//===----------------------------------------------------------------------===//

Status writeWeights(const std::string &path, const NamedTensors &w) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return Status::error("cannot write '" + path + "'");
  std::fputs("PFWEIGHTS1\n", f);
  for (auto &[name, v] : w) {
    std::fprintf(f, "%s %zu\n", name.c_str(), v.size());
    std::fwrite(v.data(), 4, v.size(), f);
  }
  bool ok = std::fclose(f) == 0;
  return ok ? Status::ok() : Status::error("error writing '" + path + "'");
}

Expected<NamedTensors> readWeights(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return Status::error("cannot open weights file '" + path + "'");
  char line[4096];
  NamedTensors out;
  if (!std::fgets(line, sizeof line, f) ||
      std::string(line) != "PFWEIGHTS1\n") {
    std::fclose(f);
    return Status::error("'" + path + "' is not a weights file");
  }
  while (std::fgets(line, sizeof line, f)) {
    char name[4000];
    size_t n = 0;
    if (std::sscanf(line, "%3999s %zu", name, &n) != 2 || n > (1ull << 34)) {
      std::fclose(f);
      return Status::error("'" + path + "': bad tensor header");
    }
    std::vector<float> v(n);
    if (std::fread(v.data(), 4, n, f) != n) {
      std::fclose(f);
      return Status::error("'" + path + "': truncated tensor '" +
                           std::string(name) + "'");
    }
    out.emplace_back(name, std::move(v));
  }
  std::fclose(f);
  return out;
}

bool compareWeights(const NamedTensors &a, const NamedTensors &b, double rtol,
                    double atol, std::string &report, bool &bitwise) {
  std::map<std::string, const std::vector<float> *> bm;
  for (auto &[n, v] : b)
    bm[n] = &v;
  bool ok = a.size() == b.size();
  bitwise = ok;
  double maxAbs = 0, maxRel = 0;
  std::string worst, problems;
  for (auto &[n, v] : a) {
    auto it = bm.find(n);
    if (it == bm.end() || it->second->size() != v.size()) {
      problems += " missing-or-resized:" + n;
      ok = bitwise = false;
      continue;
    }
    const std::vector<float> &w = *it->second;
    if (std::memcmp(v.data(), w.data(), v.size() * 4) != 0)
      bitwise = false;
    for (size_t i = 0; i < v.size(); ++i) {
      double d = std::fabs(double(v[i]) - double(w[i]));
      double r = d / std::max(1e-30, std::fabs(double(w[i])));
      if (!(d <= atol + rtol * std::fabs(double(w[i]))))
        ok = false;
      if (d > maxAbs || std::isnan(d)) {
        maxAbs = d;
        worst = n + "[" + std::to_string(i) + "]";
      }
      maxRel = std::max(maxRel, d > 0 ? r : 0.0);
    }
  }
  if (a.size() != b.size())
    problems += " tensor-count " + std::to_string(a.size()) + " vs " +
                std::to_string(b.size());
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%zu tensors: %s; max abs diff %.3g (%s), max rel diff %.3g%s",
                a.size(), bitwise ? "bitwise equal" : "not bitwise equal",
                maxAbs, worst.empty() ? "-" : worst.c_str(), maxRel,
                problems.c_str());
  report = buf;
  return ok;
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

struct Executor::Impl {
  const Program &prog;
  Backend &be;
  Transport &tr;
  TokenSource &data;
  StepOptimizer &opt;
  ExecutorOptions opts;
  int prank = 0, numStages = 1, mPerCopy = 1, totalMb = 1;
  int64_t stepNo = 0;
  double epoch = 0;

  /// On a backend that is not host-visible the host copies are the master
  /// parameters (fp32) the optimizer and checkpoints work on: values are
  /// uploaded at the start of every step, gradients downloaded at its end.
  struct ParamState {
    BufP value, grad;
    std::vector<float> hostValue, hostGrad;
  };
  float *hostValue(ParamState &ps) {
    return be.hostVisible() ? ps.value->f() : ps.hostValue.data();
  }
  float *hostGrad(ParamState &ps) {
    return be.hostVisible() ? ps.grad->f() : ps.hostGrad.data();
  }
  /// Messages go through host memory: the backend's buffers are device
  /// memory and the transport takes host memory.
  bool stageMessages() const {
    return !be.hostVisible() && !tr.deviceBuffers();
  }
  /// Expert parallelism (docs/runtime.md): group size and index; the moe
  /// expert params (w1/w2/w3) of which this rank holds a 1/E slice.
  int E = 1, epi = 0;
  std::set<int32_t> expertParams;
  /// Elements of parameter i held here (its slice for expert params).
  int64_t localElems(int32_t i) const {
    int64_t n = prog.params[size_t(i)].type.numElements();
    return expertParams.count(i) ? n / E : n;
  }
  std::map<int32_t, ParamState> params; ///< local params by global index
  Status checkReplicas();
  std::map<std::pair<int, int>, std::array<FnPlan, 4>> plans;
  /// Bytes of the activation bundle F(copy, stage) sends, and each
  /// activation's offset in it.
  std::map<std::pair<int, int>, std::vector<int64_t>> actOffsets;
  std::map<std::pair<int, int>, int64_t> actBytes;

  // Per-step state.
  std::map<Key, std::vector<BufP>> stash, wstash;
  using HostStage = std::shared_ptr<std::vector<float>>;
  struct Inbox {
    BufP buf;
    RequestId req = 0; ///< pending receive, 0: ready
    double posted = 0;
    std::string label;
    HostStage stage; ///< stageMessages(): the receive lands here first
  };
  std::map<std::tuple<int, int, int, int>, Inbox>
      inbox; ///< (payload, c, s, mb)
  std::map<std::tuple<int, int, int, int>, BufP> outbox; ///< producer identity
  struct PendingSend {
    RequestId req;
    BufP buf;
    double posted;
    std::string label;
    HostStage stage; ///< stageMessages(): what the transport sends from
  };
  std::vector<PendingSend> sends;
  std::map<std::pair<int, int>, std::pair<BufP, BufP>> tokens; ///< (c, mb)
  BufP seed;
  double lossSum = 0;
  int lossCount = 0;
  double busy = 0;
  double waited = 0;    ///< seconds blocked in receive waits (trace args)
  double a2aWaited = 0; ///< seconds blocked in all-to-all waits (trace args)
  std::vector<TraceEvent> events;
  std::set<size_t> posted; ///< action indices whose Recv is posted
  bool nanPending = false; ///< --inject-nan armed for this step

  Impl(const Program &p, Backend &b, Transport &t, TokenSource &d,
       StepOptimizer &o, ExecutorOptions op)
      : prog(p), be(b), tr(t), data(d), opt(o), opts(op) {}

  const Stage &stageOf(int c, int s) {
    return *prog.findStage(c, s); // validated in init()
  }
  int rankOf(int c, int s) const { return prog.schedule.placement.rank(c, s); }

  /// One invocation of a stage function, run kernel by kernel (a moe
  /// kernel under expert parallelism phase by phase) so that an Overlap
  /// pair can interleave two of them.
  struct FnRun {
    const Stage *st = nullptr;
    int which = 0, c = 0, mb = 0;
    const Function *fn = nullptr;
    FnPlan *plan = nullptr;
    const std::vector<BufP> *stashIn = nullptr, *wstashIn = nullptr;
    float *gradIn = nullptr;
    std::vector<BufP> *stashOut = nullptr, *wstashOut = nullptr;
    BufP *actOut = nullptr, *gradOut = nullptr;
    std::vector<void *> ptr;
    BufP tok, tgt, actIn;
    KernelCall call;
    size_t next = 0;                ///< next kernel
    std::unique_ptr<MoEPhased> moe; ///< the moe kernel in flight
    /// On a device backend: the moe kernel's operands staged in host memory
    /// (the expert-parallel moe works on host buffers, as the transports'
    /// all-to-alls do); the results go back to the device when it is done.
    struct HostCall {
      KernelCall call;
      std::vector<std::vector<char>> in, out;
    };
    std::unique_ptr<HostCall> hostCall;
    std::string label; ///< "F0.3" (trace)
    bool done() const { return next >= fn->kernels.size(); }
  };
  Status fnBegin(FnRun &r);
  Status fnPrepare(FnRun &r); ///< binds r.call for kernel r.next
  Status fnResults(FnRun &r);
  Status fnError(const FnRun &r, const std::string &m);
  /// Runs one step of r: a kernel, or the next phase of its moe kernel;
  /// `posted`: an all-to-all of r is in flight after the step.
  Status fnStep(FnRun &r, bool &posted);
  /// r.call with every operand copied to host memory (r.hostCall).
  const KernelCall &stageToHost(FnRun &r);
  void recordMoE(const FnRun &r, MoEPhased &m, const std::string &name);
  Status doOverlap(const Action &a, bool &fusedRun);

  Status init();
  Status runFunction(const Stage &st, int which, int c, int mb,
                     const std::vector<BufP> *stashIn,
                     const std::vector<BufP> *wstashIn, float *gradInPtr,
                     std::vector<BufP> *stashOut, std::vector<BufP> *wstashOut,
                     BufP *actOut, BufP *gradOut);
  Status compute(const Work &w);
  Status doF(const Work &w);
  Status finishF(const Work &w, std::vector<BufP> &st_out, BufP act);
  Status doB(const Work &w, bool fused);
  Expected<BufP> gradInFor(const Work &w);
  Status finishB(const Work &w, bool fused, std::vector<BufP> &ws, BufP gout);
  Status doW(const Work &w);
  Status recv(const Action &a, size_t idx);
  Status send(const Action &a);
  Status gradReduce(const Action &a);
  Expected<BufP> takeInbox(Payload p, int c, int s, int mb);
  Status dataFor(int c, int mb, BufP &tok, BufP &tgt);
  void record(const std::string &name, int tid, double t0, double t1,
              std::string args = "", const char *cat = nullptr) {
    if (opts.trace)
      events.push_back({name, tid, t0 - epoch, t1 - t0, std::move(args), cat});
  }
  void pollSends() {
    tr.progress();
    for (size_t i = 0; i < sends.size();) {
      if (tr.test(sends[i].req)) {
        record(sends[i].label, 1, sends[i].posted, nowS());
        sends.erase(sends.begin() + long(i));
      } else {
        ++i;
      }
    }
  }
  Expected<StepStats> step();
};

static Status stageError(int c, int s, const std::string &m) {
  return Status::error("stage " + std::to_string(s) + " of copy " +
                       std::to_string(c) + ": " + m);
}

Status Executor::Impl::init() {
  tr.attachBackend(be);
  const sched::Schedule &sc = prog.schedule;
  if (sc.programs.size() != size_t(sc.numRanks()) || sc.numRanks() < 1)
    return Status::error("program has no per-rank schedule");
  if (!sc.hasComm && sc.numRanks() > 1)
    return Status::error("the schedule has no send/recv actions (compile "
                         "it with communication inserted)");
  prank = tr.pipelineRank();
  numStages = sc.placement.numStages;
  mPerCopy = sc.numMicrobatches;
  totalMb = prog.training.microbatches > 0 ? prog.training.microbatches
                                           : mPerCopy * sc.placement.numCopies;
  if (mPerCopy < 1 || numStages < 1)
    return Status::error("schedule has no microbatches or stages");
  for (int c = 0; c < sc.placement.numCopies; ++c)
    for (int s = 0; s < numStages; ++s) {
      const Stage *st = prog.findStage(c, s);
      if (!st)
        return stageError(c, s, "missing from the program");
      if (st->rank != sc.placement.rank(c, s))
        return stageError(c, s, "rank disagrees with the schedule placement");
      // Activation bundle layout.
      std::vector<int64_t> off;
      int64_t total = 0;
      std::vector<std::pair<int32_t, int32_t>> acts;
      for (const ResultBinding &r : st->forward.results)
        if (r.role == ResultRole::Activation)
          acts.push_back({r.index, r.value});
      std::sort(acts.begin(), acts.end());
      for (auto &[idx, v] : acts) {
        if (idx != int32_t(off.size()))
          return stageError(c, s, "activation results are not numbered 0..n-1");
        off.push_back(total);
        total += (st->forward.values[size_t(v)].numBytes() + 63) / 64 * 64;
      }
      actOffsets[{c, s}] = off;
      actBytes[{c, s}] = total;
    }
  // Expert parallelism: find the moe expert operands (w1, w2, w3).
  E = prog.training.expertParallel;
  epi = tr.epIndex();
  if (E != tr.epSize())
    return Status::error("the program has expert_parallel " +
                         std::to_string(E) + " but the transport's group has " +
                         std::to_string(tr.epSize()) + " ranks");
  if (E > 1) {
    for (const Stage &st : prog.stages)
      for (FunctionKind fk :
           {FunctionKind::Forward, FunctionKind::BackwardInput,
            FunctionKind::BackwardWeight, FunctionKind::Backward}) {
        const Function &fn = stageFunction(st, fk);
        std::map<int32_t, int32_t> paramOf; // value -> param index
        for (const ArgBinding &a : fn.args)
          if (a.role == ArgRole::Param)
            paramOf[a.value] = a.index;
        for (const Kernel &k : fn.kernels) {
          if (!isMoEOp(k.op))
            continue;
          for (size_t j = 0; j < k.inputs.size(); ++j) {
            if (!isMoEExpertOperand(k.op, k.inputs.size(), j))
              continue;
            auto it = paramOf.find(k.inputs[j]);
            if (it == paramOf.end())
              return stageError(st.copy, st.index,
                                "expert parallelism: operand " +
                                    std::to_string(j) + " of '" + k.op +
                                    "' is not a parameter");
            const Param &p = prog.params[size_t(it->second)];
            if (p.type.shape.empty() || p.type.shape[0] % E)
              return Status::error("expert parameter '" + p.name +
                                   "' does not split over " +
                                   std::to_string(E) + " ranks");
            expertParams.insert(it->second);
          }
        }
      }
  }
  // Local parameters.
  for (size_t i = 0; i < prog.params.size(); ++i) {
    const Param &p = prog.params[i];
    if (p.copy >= sc.placement.numCopies || p.stage >= numStages)
      return Status::error("parameter '" + p.name + "' has no stage");
    if (rankOf(p.copy, p.stage) != prank)
      continue;
    ParamState ps;
    int64_t nLocal = localElems(int32_t(i));
    ps.value = std::make_shared<Buf>(be, nLocal * 4);
    ps.grad = std::make_shared<Buf>(be, nLocal * 4);
    if (!ps.value->p || !ps.grad->p)
      return Status::error("out of memory for parameter '" + p.name + "'");
    std::vector<float> host(static_cast<size_t>(p.type.numElements()));
    if (Status s = initParamValues(p, prog.training.seed, host.data()); !s)
      return s;
    // An expert param: initialised whole (as the reference), then sliced.
    int64_t off = expertParams.count(int32_t(i)) ? int64_t(epi) * nLocal : 0;
    be.copyFromHost(ps.value->p, host.data() + off, nLocal * 4);
    if (!be.hostVisible()) {
      ps.hostValue.assign(host.begin() + off, host.begin() + off + nLocal);
      ps.hostGrad.assign(size_t(nLocal), 0.0f);
    }
    params[int32_t(i)] = ps;
  }
  // Buffer plans: per-value when the assignment is missing or lets a kernel
  // write a buffer it also reads.
  for (const Stage &st : prog.stages) {
    const Function *fns[4] = {&st.forward, &st.backwardInput,
                              &st.backwardWeight, &st.backward};
    auto &pl = plans[{st.copy, st.index}];
    for (int k = 0; k < 4; ++k) {
      const Function &fn = *fns[k];
      bool ok = fn.buffer.size() == fn.values.size();
      for (size_t v = 0; ok && v < fn.values.size(); ++v)
        ok = fn.buffer[v] >= 0 &&
             size_t(fn.buffer[v]) < fn.bufferBytes.size() &&
             fn.bufferBytes[size_t(fn.buffer[v])] >= fn.values[v].numBytes();
      for (const Kernel &kn : fn.kernels) {
        if (!ok)
          break;
        std::set<int32_t> ins;
        for (int32_t v : kn.inputs)
          if (v >= 0)
            ins.insert(fn.buffer[size_t(v)]);
        std::set<int32_t> outs;
        for (int32_t v : kn.outputs)
          if (v >= 0 && (ins.count(fn.buffer[size_t(v)]) ||
                         !outs.insert(fn.buffer[size_t(v)]).second))
            ok = false;
      }
      pl[k].perValue = !ok;
      pl[k].bufs.resize(ok ? fn.bufferBytes.size() : fn.values.size());
    }
  }
  seed = std::make_shared<Buf>(be, 4);
  float sv = 1.0f / float(totalMb);
  be.copyFromHost(seed->p, &sv, 4);
  epoch = nowS();
  return Status::ok();
}

Status Executor::Impl::dataFor(int c, int mb, BufP &tok, BufP &tgt) {
  auto it = tokens.find({c, mb});
  if (it != tokens.end()) {
    tok = it->second.first;
    tgt = it->second.second;
    return Status::ok();
  }
  int64_t b = prog.model.microbatchSize, s = prog.model.seqLen;
  std::vector<int32_t> ht(static_cast<size_t>(b * s)),
      hg(static_cast<size_t>(b * s));
  // An EP rank reads its own microbatches: index offset by epi x totalMb.
  int64_t g = int64_t(mb) + int64_t(c) * mPerCopy + int64_t(epi) * totalMb;
  if (Status st =
          data.fill(stepNo, tr.dpIndex(), g, b, s, ht.data(), hg.data());
      !st)
    return st;
  tok = std::make_shared<Buf>(be, b * s * 4);
  tgt = std::make_shared<Buf>(be, b * s * 4);
  be.copyFromHost(tok->p, ht.data(), b * s * 4);
  be.copyFromHost(tgt->p, hg.data(), b * s * 4);
  tokens[{c, mb}] = {tok, tgt};
  return Status::ok();
}

Expected<BufP> Executor::Impl::takeInbox(Payload p, int c, int s, int mb) {
  auto key = std::make_tuple(int(p), c, s, mb);
  auto it = inbox.find(key);
  if (it == inbox.end())
    return Status::error(
        std::string("no ") +
        (p == Payload::Activation ? "activation" : "gradient") + " for stage " +
        std::to_string(s) + " mb " + std::to_string(mb) + " copy " +
        std::to_string(c) + " (schedule lacks a Recv?)");
  Inbox in = it->second;
  inbox.erase(it);
  if (in.req) {
    double w0 = nowS();
    if (Status st = tr.wait(in.req); !st)
      return st;
    if (in.stage)
      be.copyFromHost(in.buf->p, in.stage->data(),
                      int64_t(in.stage->size()) * 4);
    double w1 = nowS();
    waited += w1 - w0;
    record(in.label, 1, in.posted, w1);
  }
  return in.buf;
}

/// Runs function `which` (0 F, 1 B, 2 W, 3 BW) of `st` for microbatch mb.
Status Executor::Impl::runFunction(const Stage &st, int which, int c, int mb,
                                   const std::vector<BufP> *stashIn,
                                   const std::vector<BufP> *wstashIn,
                                   float *gradIn, std::vector<BufP> *stashOut,
                                   std::vector<BufP> *wstashOut, BufP *actOut,
                                   BufP *gradOut) {
  FnRun r;
  r.st = &st;
  r.which = which;
  r.c = c;
  r.mb = mb;
  r.stashIn = stashIn;
  r.wstashIn = wstashIn;
  r.gradIn = gradIn;
  r.stashOut = stashOut;
  r.wstashOut = wstashOut;
  r.actOut = actOut;
  r.gradOut = gradOut;
  if (Status s = fnBegin(r); !s)
    return s;
  // Kernels, back to back (a moe kernel's phases too).
  while (!r.done()) {
    bool posted = false;
    if (Status s = fnStep(r, posted); !s)
      return s;
  }
  return fnResults(r);
}

Status Executor::Impl::fnError(const FnRun &r, const std::string &m) {
  const char *fnName[4] = {"F", "B", "W", "BW"};
  return stageError(r.c, r.st->index,
                    std::string(fnName[r.which]) + " mb " +
                        std::to_string(r.mb) + ": " + m);
}

Status Executor::Impl::fnBegin(FnRun &r) {
  const Stage &st = *r.st;
  const Function *fns[4] = {&st.forward, &st.backwardInput, &st.backwardWeight,
                            &st.backward};
  r.fn = fns[r.which];
  r.plan = &plans[{st.copy, st.index}][r.which];
  const Function &fn = *r.fn;
  const int c = r.c, mb = r.mb;
  auto &ptr = r.ptr;
  ptr.assign(fn.values.size(), nullptr);
  if (r.label.empty()) {
    const char *fnName[4] = {"F", "B", "W", "BW"};
    r.label = std::string(fnName[r.which]) + std::to_string(st.index) + "." +
              std::to_string(mb) + (c ? "c" + std::to_string(c) : "");
  }
  auto err = [&](const std::string &m) { return fnError(r, m); };
  BufP &tok = r.tok, &tgt = r.tgt, &actIn = r.actIn;
  const std::vector<BufP> *stashIn = r.stashIn, *wstashIn = r.wstashIn;
  float *gradIn = r.gradIn;
  for (const ArgBinding &a : fn.args) {
    if (a.value < 0 || size_t(a.value) >= ptr.size())
      return err("bad argument value id");
    switch (a.role) {
    case ArgRole::Activation: {
      if (!actIn) {
        auto res = takeInbox(Payload::Activation, c, st.index, mb);
        if (!res)
          return res.status();
        actIn = *res;
      }
      auto &off = actOffsets[{c, st.index - 1}];
      if (st.index == 0 || size_t(a.index) >= off.size())
        return err("activation argument #" + std::to_string(a.index) +
                   " has no producer");
      ptr[size_t(a.value)] =
          static_cast<char *>(actIn->p) + off[size_t(a.index)];
      break;
    }
    case ArgRole::Tokens:
    case ArgRole::Targets:
      if (Status s = dataFor(c, mb, tok, tgt); !s)
        return s;
      ptr[size_t(a.value)] = (a.role == ArgRole::Tokens ? tok : tgt)->p;
      break;
    case ArgRole::Param: {
      auto it = params.find(a.index);
      if (it == params.end())
        return err("parameter #" + std::to_string(a.index) +
                   " is not on this rank");
      ptr[size_t(a.value)] = it->second.value->p;
      break;
    }
    case ArgRole::Stash:
    case ArgRole::WStash: {
      auto *v = a.role == ArgRole::Stash ? stashIn : wstashIn;
      if (!v || size_t(a.index) >= v->size() || !(*v)[size_t(a.index)])
        return err(std::string(a.role == ArgRole::Stash ? "stash" : "w-stash") +
                   " slot " + std::to_string(a.index) + " is missing");
      ptr[size_t(a.value)] = (*v)[size_t(a.index)]->p;
      break;
    }
    case ArgRole::GradIn:
      if (!gradIn)
        return err("no incoming gradient");
      ptr[size_t(a.value)] =
          st.index == numStages - 1
              ? static_cast<void *>(gradIn)
              : static_cast<void *>(
                    reinterpret_cast<char *>(gradIn) +
                    actOffsets[{c, st.index}].at(size_t(a.index)));
      break;
    }
  }
  r.next = 0;
  return Status::ok();
}

Status Executor::Impl::fnPrepare(FnRun &r) {
  const Function &fn = *r.fn;
  FnPlan &plan = *r.plan;
  auto &ptr = r.ptr;
  auto err = [&](const std::string &m) { return fnError(r, m); };
  auto valuePtr = [&](int32_t v) -> void * {
    if (ptr[size_t(v)])
      return ptr[size_t(v)];
    size_t b = plan.perValue ? size_t(v) : size_t(fn.buffer[size_t(v)]);
    int64_t bytes =
        plan.perValue ? fn.values[size_t(v)].numBytes() : fn.bufferBytes[b];
    if (!plan.bufs[b])
      plan.bufs[b] = std::make_unique<Buf>(be, std::max<int64_t>(bytes, 4));
    return ptr[size_t(v)] = plan.bufs[b]->p;
  };
  const Kernel &k = fn.kernels[r.next];
  KernelCall &call = r.call;
  call.kernel = &k;
  call.in.clear();
  call.inTypes.clear();
  call.out.clear();
  call.outTypes.clear();
  for (int32_t v : k.inputs) {
    if (v >= int32_t(ptr.size()))
      return err("bad value id in kernel '" + k.op + "'");
    if (v >= 0 && !ptr[size_t(v)])
      return err("kernel '" + k.op + "' reads value " + std::to_string(v) +
                 " before it is defined");
    call.in.push_back(v >= 0 ? ptr[size_t(v)] : nullptr);
    call.inTypes.push_back(v >= 0 ? &fn.values[size_t(v)] : nullptr);
  }
  for (int32_t v : k.outputs) {
    if (v >= int32_t(ptr.size()))
      return err("bad value id in kernel '" + k.op + "'");
    // A new definition: (re)bind to the value's own buffer.
    if (v >= 0)
      ptr[size_t(v)] = nullptr;
    call.out.push_back(v >= 0 ? valuePtr(v) : nullptr);
    call.outTypes.push_back(v >= 0 ? &fn.values[size_t(v)] : nullptr);
  }
  return Status::ok();
}

void Executor::Impl::recordMoE(const FnRun &r, MoEPhased &m,
                               const std::string &name) {
  for (const MoEPhased::CommTiming &t : m.timings) {
    a2aWaited += t.waitEnd - t.waitStart;
    if (opts.trace) {
      char wa[64];
      std::snprintf(wa, sizeof wa, "\"wait_us\":%.3f,\"a2a\":1",
                    (t.waitEnd - t.waitStart) * 1e6);
      record(name + " " + t.what, 1, t.posted, t.waitEnd, wa);
    }
  }
  m.timings.clear();
}

const KernelCall &Executor::Impl::stageToHost(FnRun &r) {
  auto h = std::make_unique<FnRun::HostCall>();
  h->call = r.call;
  const KernelCall &c = r.call;
  h->in.reserve(c.in.size());
  h->out.reserve(c.out.size());
  for (size_t i = 0; i < c.in.size(); ++i) {
    int64_t bytes = c.in[i] && c.inTypes[i] ? c.inTypes[i]->numBytes() : 0;
    // An expert weight is this rank's slice (its type is the whole tensor):
    // copy the slice; the staged buffer keeps the type's size.
    int64_t copyBytes = bytes;
    if (E > 1 && isMoEExpertOperand(c.kernel->op, c.in.size(), i))
      copyBytes = bytes / E;
    h->in.emplace_back(static_cast<size_t>(bytes));
    if (copyBytes)
      be.copyToHost(h->in.back().data(), c.in[i], copyBytes);
    h->call.in[i] = c.in[i] ? h->in.back().data() : nullptr;
  }
  for (size_t i = 0; i < c.out.size(); ++i) {
    int64_t bytes = c.out[i] && c.outTypes[i] ? c.outTypes[i]->numBytes() : 0;
    h->out.emplace_back(static_cast<size_t>(bytes));
    h->call.out[i] = c.out[i] ? h->out.back().data() : nullptr;
  }
  r.hostCall = std::move(h);
  return r.hostCall->call;
}

Status Executor::Impl::fnStep(FnRun &r, bool &posted) {
  posted = false;
  if (r.moe) {
    if (Status s = r.moe->next(); !s)
      return fnError(r, s.message());
  } else {
    if (Status s = fnPrepare(r); !s)
      return s;
    const Kernel &k = *r.call.kernel;
    if (!(E > 1 && isMoEOp(k.op))) {
      if (Status s = be.run(r.call); !s)
        return fnError(r, s.message());
      ++r.next;
      return Status::ok();
    }
    const KernelCall *call = &r.call;
    if (!be.hostVisible())
      call = &stageToHost(r);
    auto m = MoEPhased::begin(*call, tr);
    if (!m)
      return fnError(r, m.status().message());
    r.moe = std::move(*m);
  }
  recordMoE(r, *r.moe, r.label + " " + r.call.kernel->op);
  if (r.moe->done()) {
    r.moe.reset();
    if (r.hostCall) { // results back to the device
      for (size_t i = 0; i < r.call.out.size(); ++i)
        if (r.call.out[i])
          be.copyFromHost(r.call.out[i], r.hostCall->out[i].data(),
                          int64_t(r.hostCall->out[i].size()));
      r.hostCall.reset();
    }
    ++r.next;
  } else {
    posted = true;
  }
  return Status::ok();
}

Status Executor::Impl::fnResults(FnRun &r) {
  const Function &fn = *r.fn;
  const Stage &st = *r.st;
  const int c = r.c, mb = r.mb;
  auto &ptr = r.ptr;
  auto err = [&](const std::string &m) { return fnError(r, m); };
  BufP *actOut = r.actOut, *gradOut = r.gradOut;
  std::vector<BufP> *stashOut = r.stashOut, *wstashOut = r.wstashOut;
  // Results.
  for (const ResultBinding &r : fn.results) {
    if (r.value < 0 || size_t(r.value) >= ptr.size() || !ptr[size_t(r.value)])
      return err("result value " + std::to_string(r.value) + " is undefined");
    void *src = ptr[size_t(r.value)];
    int64_t bytes = fn.values[size_t(r.value)].numBytes();
    switch (r.role) {
    case ResultRole::Activation: {
      auto &off = actOffsets[{c, st.index}];
      if (!*actOut)
        *actOut = std::make_shared<Buf>(
            be, std::max<int64_t>(actBytes[{c, st.index}], 4));
      be.copy(static_cast<char *>((*actOut)->p) + off.at(size_t(r.index)), src,
              bytes);
      break;
    }
    case ResultRole::GradOut: {
      if (st.index == 0)
        return err("gradient result on the first stage");
      auto &off = actOffsets[{c, st.index - 1}];
      if (size_t(r.index) >= off.size())
        return err("gradient result #" + std::to_string(r.index) +
                   " has no activation");
      if (!*gradOut)
        *gradOut = std::make_shared<Buf>(
            be, std::max<int64_t>(actBytes[{c, st.index - 1}], 4));
      be.copy(static_cast<char *>((*gradOut)->p) + off[size_t(r.index)], src,
              bytes);
      break;
    }
    case ResultRole::Loss: {
      float l = 0;
      be.copyToHost(&l, src, 4);
      lossSum += l;
      ++lossCount;
      break;
    }
    case ResultRole::Stash:
    case ResultRole::WStash: {
      auto *v = r.role == ResultRole::Stash ? stashOut : wstashOut;
      if (!v)
        return err("unexpected stash result");
      if (v->size() <= size_t(r.index))
        v->resize(size_t(r.index) + 1);
      auto b = std::make_shared<Buf>(be, std::max<int64_t>(bytes, 4));
      be.copy(b->p, src, bytes);
      (*v)[size_t(r.index)] = b;
      break;
    }
    case ResultRole::ParamGrad: {
      auto it = params.find(r.index);
      if (it == params.end())
        return err("gradient of parameter #" + std::to_string(r.index) +
                   " which is not on this rank");
      if (prog.params[size_t(r.index)].type.numBytes() != bytes)
        return err("gradient size of parameter '" +
                   prog.params[size_t(r.index)].name + "' differs");
      // Expert params: the kernel wrote this rank's slice first.
      be.accumulate(it->second.grad->f(), static_cast<const float *>(src),
                    localElems(r.index));
      if (nanPending && st.index == numStages - 1 &&
          int64_t(tr.dpIndex()) * totalMb + int64_t(c) * mPerCopy + mb ==
              opts.injectNanMb) {
        float nan = std::nanf("");
        be.copyFromHost(it->second.grad->p, &nan, 4);
        nanPending = false;
      }
      break;
    }
    }
  }
  return Status::ok();
}

Status Executor::Impl::doF(const Work &w) {
  const Stage &st = stageOf(w.copy, w.stage);
  std::vector<BufP> st_out;
  BufP act, none;
  if (Status s = runFunction(st, 0, w.copy, w.mb, nullptr, nullptr, nullptr,
                             &st_out, nullptr, &act, &none);
      !s)
    return s;
  return finishF(w, st_out, act);
}

Status Executor::Impl::finishF(const Work &w, std::vector<BufP> &st_out,
                               BufP act) {
  stash[{w.copy, w.stage, w.mb}] = std::move(st_out);
  if (w.stage + 1 < numStages) {
    if (!act)
      return stageError(w.copy, w.stage, "F returned no activation");
    if (rankOf(w.copy, w.stage + 1) == prank)
      inbox[{int(Payload::Activation), w.copy, w.stage + 1, w.mb}] =
          Inbox{act, 0, 0, ""};
    else
      outbox[{int(Payload::Activation), w.copy, w.stage, w.mb}] = act;
  }
  return Status::ok();
}

Expected<BufP> Executor::Impl::gradInFor(const Work &w) {
  if (w.stage == numStages - 1)
    return seed;
  return takeInbox(Payload::Gradient, w.copy, w.stage, w.mb);
}

Status Executor::Impl::doB(const Work &w, bool fused) {
  const Stage &st = stageOf(w.copy, w.stage);
  Key key{w.copy, w.stage, w.mb};
  auto g = gradInFor(w);
  if (!g)
    return g.status();
  BufP gin = *g;
  BufP act, gout;
  std::vector<BufP> ws;
  bool useFusedFn = fused && !st.backward.empty();
  if (Status s = runFunction(st, useFusedFn ? 3 : 1, w.copy, w.mb, &stash[key],
                             nullptr, gin->f(), nullptr, &ws, &act, &gout);
      !s)
    return s;
  return finishB(w, fused, ws, gout);
}

Status Executor::Impl::finishB(const Work &w, bool fused, std::vector<BufP> &ws,
                               BufP gout) {
  const Stage &st = stageOf(w.copy, w.stage);
  Key key{w.copy, w.stage, w.mb};
  bool useFusedFn = fused && !st.backward.empty();
  wstash[key] = std::move(ws);
  if (w.stage > 0) {
    if (!gout)
      return stageError(w.copy, w.stage, "backward returned no gradient");
    if (rankOf(w.copy, w.stage - 1) == prank)
      inbox[{int(Payload::Gradient), w.copy, w.stage - 1, w.mb}] =
          Inbox{gout, 0, 0, ""};
    else
      outbox[{int(Payload::Gradient), w.copy, w.stage, w.mb}] = gout;
  }
  if (fused) {
    if (!useFusedFn)
      return doW(w);
    stash.erase(key);
    wstash.erase(key);
  }
  return Status::ok();
}

Status Executor::Impl::doW(const Work &w) {
  const Stage &st = stageOf(w.copy, w.stage);
  Key key{w.copy, w.stage, w.mb};
  if (!st.backwardWeight.empty()) {
    BufP none;
    if (Status s = runFunction(st, 2, w.copy, w.mb, &stash[key], &wstash[key],
                               nullptr, nullptr, nullptr, &none, &none);
        !s)
      return s;
  }
  stash.erase(key);
  wstash.erase(key);
  return Status::ok();
}

/// An Overlap action. When both members' functions carry components
/// (pipeforge-compile --pp-fuse-overlap) and fusion is on, F and the
/// backward member run interleaved on this thread: each runs until it has
/// posted an all-to-all (a moe kernel's dispatch or combine, forward or
/// backward), then the other runs, so one member's all-to-all is in flight
/// while the other computes; the backward member starts (DeepSeek's order
/// begins with combine(B), attn(F), mlp(B), dispatch(F), ...). Between
/// steps the executor calls progress() when the transport has no progress
/// thread. The switch
/// points depend only on the program, never on timing, so every rank of an
/// EP group posts its all-to-alls in the same order (MPI collective order).
/// Each member runs its own kernels in its own order on its own buffers and
/// their results are taken after both finished, F first: the same bits as F
/// then B. Otherwise: F then B.
Status Executor::Impl::doOverlap(const Action &a, bool &fusedRun) {
  fusedRun = false;
  const Work *wf = a.work.kind == WorkKind::F    ? &a.work
                   : a.work2.kind == WorkKind::F ? &a.work2
                                                 : nullptr;
  const Work *wb = wf == &a.work ? &a.work2 : &a.work;
  bool ok = opts.fuseOverlap && wf &&
            (wb->kind == WorkKind::B || wb->kind == WorkKind::BW);
  for (const Work *w : {&a.work, &a.work2})
    if (w->copy < 0 || w->copy >= prog.schedule.placement.numCopies ||
        w->stage < 0 || w->stage >= numStages ||
        rankOf(w->copy, w->stage) != prank)
      ok = false; // compute() reports it
  int bWhich = 1;
  if (ok) {
    const Stage &sf = stageOf(wf->copy, wf->stage);
    const Stage &sb = stageOf(wb->copy, wb->stage);
    bWhich = wb->kind == WorkKind::BW && !sb.backward.empty() ? 3 : 1;
    ok = !sf.forward.components.empty() &&
         !stageFunction(sb, bWhich == 3 ? FunctionKind::Backward
                                        : FunctionKind::BackwardInput)
              .components.empty();
  }
  if (!ok) {
    if (Status s = compute(a.work); !s)
      return s;
    return compute(a.work2);
  }
  fusedRun = true;
  const Stage &sf = stageOf(wf->copy, wf->stage);
  const Stage &sb = stageOf(wb->copy, wb->stage);
  Key kb{wb->copy, wb->stage, wb->mb};
  std::vector<BufP> fStash, bWs;
  BufP fAct, fNone, bAct, bGout;
  FnRun rf, rb;
  rf.st = &sf;
  rf.which = 0;
  rf.c = wf->copy;
  rf.mb = wf->mb;
  rf.stashOut = &fStash;
  rf.actOut = &fAct;
  rf.gradOut = &fNone;
  rf.label = sched::toString(*wf);
  if (Status s = fnBegin(rf); !s)
    return s;
  auto g = gradInFor(*wb);
  if (!g)
    return g.status();
  BufP gin = *g;
  rb.st = &sb;
  rb.which = bWhich;
  rb.c = wb->copy;
  rb.mb = wb->mb;
  rb.stashIn = &stash[kb];
  rb.gradIn = gin->f();
  rb.wstashOut = &bWs;
  rb.actOut = &bAct;
  rb.gradOut = &bGout;
  rb.label = sched::toString(*wb);
  if (Status s = fnBegin(rb); !s)
    return s;
  // One trace event per contiguous run of one member's component.
  auto compOf = [](const FnRun &r) {
    const auto &cs = r.fn->components;
    for (size_t i = 0; i < cs.size(); ++i)
      if (int32_t(r.next) >= cs[i].begin && int32_t(r.next) < cs[i].end)
        return int(i);
    return -1;
  };
  const FnRun *segR = nullptr;
  int segC = -1;
  double segT0 = 0;
  auto closeSeg = [&](double t) {
    if (!segR || !opts.trace)
      return;
    std::string n = segR->label;
    if (segC >= 0) {
      const ComponentRange &cr = segR->fn->components[size_t(segC)];
      n += " " + cr.kind + " L" + std::to_string(cr.layer);
    }
    record(n, 0, segT0, t, "\"component\":1", "component");
  };
  bool poll = !tr.asyncProgress();
  // One step of r (trace segment bookkeeping, polling).
  auto stepOnce = [&](FnRun &r, bool &posted) -> Status {
    int ci = compOf(r);
    if (&r != segR || ci != segC) {
      double t = nowS();
      closeSeg(t);
      segR = &r;
      segC = ci;
      segT0 = t;
    }
    if (Status s = fnStep(r, posted); !s)
      return s;
    if (poll)
      tr.progress();
    return Status::ok();
  };
  if (!a.pairOrder.empty()) {
    // The compiled order (Action::pairOrder, from the pp.component ops of
    // the fused pp.overlap). A step (member, kind, layer) runs that
    // member's kernels up to the end of the component's kernel range in
    // the member's function (a member's kernels always run in its own
    // order: whatever of it comes before the range runs first). A step
    // ends early when the member has posted the last all-to-all of the
    // component's last (moe) kernel: that all-to-all stays in flight across
    // the component boundary (the IR's pp.comm_start ... pp.comm_wait) and
    // is waited for when the member runs next. Other all-to-alls inside a
    // component are waited for within it. W steps: the runtime's BW
    // function has no separate W ranges (W is inside the B components), so
    // they are no-ops after their B. Steps naming a range the function
    // lacks are skipped. Whatever is left runs at the end, F first. The
    // switch points depend only on the program.
    auto rangeOf =
        [](const FnRun &r,
           const sched::PairComponentStep &p) -> const ComponentRange * {
      const char *k = p.kind == sched::PairComponentStep::Attn ? "attn" : "mlp";
      for (const ComponentRange &cr : r.fn->components)
        if (cr.kind == k && cr.layer == p.layer)
          return &cr;
      return nullptr;
    };
    for (const sched::PairComponentStep &p : a.pairOrder) {
      if (p.member == sched::PairComponentStep::W)
        continue;
      FnRun &r = p.member == sched::PairComponentStep::F ? rf : rb;
      const ComponentRange *cr = rangeOf(r, p);
      if (!cr)
        continue;
      size_t end = size_t(std::max<int32_t>(cr->end, 0));
      while (!r.done() && r.next < end) {
        bool inRange = r.next >= size_t(std::max<int32_t>(cr->begin, 0));
        bool posted = false;
        if (Status s = stepOnce(r, posted); !s)
          return s;
        if (posted && inRange && r.next + 1 == end && r.moe &&
            r.moe->phasesLeft() == 1)
          break;
      }
    }
    for (FnRun *r : {&rf, &rb})
      while (!r->done()) {
        bool posted = false;
        if (Status s = stepOnce(*r, posted); !s)
          return s;
      }
  } else {
    // Without expert parallelism nothing is posted: F then B.
    FnRun *cur = E > 1 ? &rb : &rf, *oth = E > 1 ? &rf : &rb;
    while (!rf.done() || !rb.done()) {
      if (cur->done())
        std::swap(cur, oth);
      bool posted = false;
      if (Status s = stepOnce(*cur, posted); !s)
        return s;
      if (posted && !oth->done())
        std::swap(cur, oth);
    }
  }
  closeSeg(nowS());
  if (Status s = fnResults(rf); !s)
    return s;
  if (Status s = finishF(*wf, fStash, fAct); !s)
    return s;
  if (Status s = fnResults(rb); !s)
    return s;
  return finishB(*wb, wb->kind == WorkKind::BW, bWs, bGout);
}

Status Executor::Impl::compute(const Work &w) {
  if (w.copy < 0 || w.copy >= prog.schedule.placement.numCopies ||
      w.stage < 0 || w.stage >= numStages || rankOf(w.copy, w.stage) != prank)
    return Status::error("action " + sched::toString(w) +
                         " is not for a stage of pipeline rank " +
                         std::to_string(prank));
  switch (w.kind) {
  case WorkKind::F:
    return doF(w);
  case WorkKind::B:
    return doB(w, false);
  case WorkKind::W:
    return doW(w);
  case WorkKind::BW:
    return doB(w, true);
  }
  return Status::ok();
}

Status Executor::Impl::recv(const Action &a, size_t idx) {
  if (!posted.insert(idx).second)
    return Status::ok();
  const Work &w = a.work;
  bool act = a.payload == Payload::Activation;
  if (!act && a.payload != Payload::Gradient)
    return Status::error("unsupported receive payload");
  int consumer = act ? w.stage + 1 : w.stage - 1;
  int layoutStage = act ? w.stage : w.stage - 1;
  if (consumer < 0 || consumer >= numStages)
    return Status::error("receive " + sched::toString(a) + " has no consumer");
  auto b = std::make_shared<Buf>(
      be, std::max<int64_t>(actBytes[{w.copy, layoutStage}], 4));
  MessageId id{a.payload, w.stage, w.mb, w.copy};
  int64_t n = actBytes[{w.copy, layoutStage}] / 4;
  HostStage stage;
  if (stageMessages())
    stage = std::make_shared<std::vector<float>>(size_t(n));
  auto r = tr.irecv(a.peer, messageTag(id, numStages, mPerCopy),
                    stage ? stage->data() : b->f(), n);
  if (!r)
    return r.status();
  inbox[{int(a.payload), w.copy, consumer, w.mb}] =
      Inbox{b, *r, nowS(), sched::toString(a), stage};
  return Status::ok();
}

Status Executor::Impl::send(const Action &a) {
  const Work &w = a.work;
  auto key = std::make_tuple(int(a.payload), int(w.copy), w.stage, w.mb);
  auto it = outbox.find(key);
  if (it == outbox.end())
    return Status::error("send " + sched::toString(a) +
                         " before its producer ran");
  BufP b = it->second;
  outbox.erase(it);
  int layoutStage = a.payload == Payload::Activation ? w.stage : w.stage - 1;
  MessageId id{a.payload, w.stage, w.mb, w.copy};
  int64_t n = actBytes[{w.copy, layoutStage}] / 4;
  HostStage stage;
  if (stageMessages()) {
    stage = std::make_shared<std::vector<float>>(size_t(n));
    be.copyToHost(stage->data(), b->p, n * 4);
  }
  auto r = tr.isend(a.peer, messageTag(id, numStages, mPerCopy),
                    stage ? stage->data() : b->f(), n);
  if (!r)
    return r.status();
  sends.push_back({*r, b, nowS(), sched::toString(a), stage});
  return Status::ok();
}

Status Executor::Impl::gradReduce(const Action &a) {
  // Canonical order: by base name; both peers hold the same logical params.
  std::vector<std::pair<std::string, int32_t>> order;
  for (auto &[i, ps] : params)
    order.push_back({baseParamName(prog.params[size_t(i)].name), i});
  std::sort(order.begin(), order.end());
  int64_t n = 0;
  for (auto &[name, i] : order)
    n += localElems(i);
  float cnt = float(n);
  if (Status s = tr.pairwiseSum(a.peer, &cnt, 1); !s)
    return s;
  if (cnt != 2.0f * float(n))
    return Status::error("GRADREDUCE with pipeline rank " +
                         std::to_string(a.peer) +
                         ": the two ranks hold different parameter sets");
  std::vector<float> host(static_cast<size_t>(n));
  int64_t off = 0;
  for (auto &[name, i] : order) {
    int64_t k = localElems(i);
    be.copyToHost(host.data() + off, params[i].grad->p, k * 4);
    off += k;
  }
  if (Status s = tr.pairwiseSum(a.peer, host.data(), n); !s)
    return s;
  off = 0;
  for (auto &[name, i] : order) {
    int64_t k = localElems(i);
    be.copyFromHost(params[i].grad->p, host.data() + off, k * 4);
    off += k;
  }
  return Status::ok();
}

Expected<StepStats> Executor::Impl::step() {
  if (Status s = tr.barrier(Group::Pipeline); !s)
    return s;
  double t0 = nowS();
  for (auto &[i, ps] : params) {
    be.fillZero(ps.grad->p, ps.grad->bytes);
    if (!be.hostVisible())
      be.copyFromHost(ps.value->p, ps.hostValue.data(), ps.value->bytes);
  }
  stash.clear();
  wstash.clear();
  inbox.clear();
  outbox.clear();
  tokens.clear();
  posted.clear();
  lossSum = 0;
  lossCount = 0;
  busy = 0;
  nanPending = opts.injectNanStep == stepNo + 1;
  const std::vector<Action> &acts = prog.schedule.programs[size_t(prank)];
  size_t nextPost = 0;
  for (size_t i = 0; i < acts.size(); ++i) {
    // Pre-post the receives of the next few actions.
    size_t horizon =
        std::min(acts.size(), i + 1 + size_t(std::max(0, opts.recvLookahead)));
    for (; nextPost < horizon; ++nextPost)
      if (acts[nextPost].kind == ActionKind::Recv)
        if (Status s = recv(acts[nextPost], nextPost); !s)
          return Status::errorAt(prank, long(nextPost), s.message());
    const Action &a = acts[i];
    waited = 0;
    a2aWaited = 0;
    bool fusedRun = false;
    double a0 = nowS();
    Status s = Status::ok();
    switch (a.kind) {
    case ActionKind::Compute:
      s = compute(a.work);
      break;
    case ActionKind::Overlap:
      s = doOverlap(a, fusedRun);
      break;
    case ActionKind::Send:
      s = send(a);
      break;
    case ActionKind::Recv:
      s = recv(a, i);
      break;
    case ActionKind::GradReduce:
      s = gradReduce(a);
      break;
    }
    if (!s)
      return Status::errorAt(prank, long(i),
                             "pipeline rank " + std::to_string(prank) +
                                 " action " + std::to_string(i) + " (" +
                                 sched::toString(a) + "): " + s.message());
    bool isCompute =
        a.kind == ActionKind::Compute || a.kind == ActionKind::Overlap;
    if (isCompute && opts.syncDeviceCompute && !be.hostVisible())
      be.synchronize(); // device time, not launch time
    double a1 = nowS();
    if (isCompute) {
      busy += a1 - a0 - waited; // blocked receive waits are bubble, not work
      char wa[96];
      if (E > 1)
        std::snprintf(wa, sizeof wa, "\"wait_us\":%.3f,\"a2a_wait_us\":%.3f%s",
                      waited * 1e6, a2aWaited * 1e6,
                      fusedRun ? ",\"fused\":1" : "");
      else
        std::snprintf(wa, sizeof wa, "\"wait_us\":%.3f", waited * 1e6);
      record(sched::toString(a), 0, a0, a1, wa);
    } else if (a.kind == ActionKind::GradReduce) {
      record(sched::toString(a), 1, a0, a1);
    }
    pollSends();
  }
  double loopEnd = nowS();
  for (PendingSend &ps : sends) {
    if (Status s = tr.wait(ps.req); !s)
      return s;
    record(ps.label, 1, ps.posted, nowS());
  }
  sends.clear();
  // A kernel's asynchronous error (device backends) fails the step here.
  if (Status s = be.takeAsyncError(); !s)
    return s;
  if (opts.trace) {
    // One event per step on tid 2: the schedule part (barrier exit to the
    // last send's completion); drain = waiting for sends after the last action.
    double t1 = nowS();
    char sa[96];
    std::snprintf(sa, sizeof sa, "\"actions\":%zu,\"drain_us\":%.3f",
                  acts.size(), (t1 - loopEnd) * 1e6);
    record("step " + std::to_string(stepNo + 1), 2, t0, t1, sa);
  }
  if (!inbox.empty() || !outbox.empty())
    return Status::error("pipeline rank " + std::to_string(prank) +
                         ": step ended with " + std::to_string(inbox.size()) +
                         " unconsumed and " + std::to_string(outbox.size()) +
                         " unsent messages (schedule incomplete)");
  double span = nowS() - t0;

  // Data parallel: sum, then divide by dp.
  int D = tr.dpSize();
  if (D > 1) {
    int64_t n = 0;
    for (auto &[i, ps] : params)
      n += ps.grad->bytes / 4;
    std::vector<float> host(static_cast<size_t>(n));
    int64_t off = 0;
    for (auto &[i, ps] : params) {
      be.copyToHost(host.data() + off, ps.grad->p, ps.grad->bytes);
      off += ps.grad->bytes / 4;
    }
    if (Status s = tr.allreduce(host.data(), n, Group::DataParallel); !s)
      return s;
    off = 0;
    float inv = 1.0f / float(D);
    for (auto &[i, ps] : params) {
      be.copyFromHost(ps.grad->p, host.data() + off, ps.grad->bytes);
      be.scale(ps.grad->f(), inv, ps.grad->bytes / 4);
      off += ps.grad->bytes / 4;
    }
  }
  // Expert parallel: the replicated (non-expert) grads are summed over the
  // EP group (gather, sum in rank order, broadcast); every grad is divided
  // by E: each EP rank seeded its loss with 1 / microbatches of its own.
  if (E > 1) {
    int64_t n = 0;
    for (auto &[i, ps] : params)
      if (!expertParams.count(i))
        n += ps.grad->bytes / 4;
    std::vector<float> host(static_cast<size_t>(n));
    int64_t off = 0;
    for (auto &[i, ps] : params)
      if (!expertParams.count(i)) {
        be.copyToHost(host.data() + off, ps.grad->p, ps.grad->bytes);
        off += ps.grad->bytes / 4;
      }
    if (Status s = tr.allreduce(host.data(), n, Group::Expert); !s)
      return s;
    off = 0;
    float inv = 1.0f / float(E);
    for (auto &[i, ps] : params) {
      if (!expertParams.count(i)) {
        be.copyFromHost(ps.grad->p, host.data() + off, ps.grad->bytes);
        off += ps.grad->bytes / 4;
      }
      be.scale(ps.grad->f(), inv, ps.grad->bytes / 4);
    }
  }
  // Gradient norm (copy-0 params only), loss, busy time. `allSq` covers the
  // other local gradients (DualPipe copy 1): post-validation's finite flag.
  // The norm is the same number on any rank layout: each parameter's sum of
  // squares is computed on its own, the pipeline allreduce adds it to zeros
  // from the ranks that do not own it (exact), and the total is summed in
  // global parameter order, as the single-process reference does.
  std::vector<float> paramSq(prog.params.size(), 0.0f);
  double sq = 0, allSq = 0;
  std::vector<ParamSlot> slots;
  for (auto &[i, ps] : params) {
    const Param &p = prog.params[size_t(i)];
    int64_t n = localElems(i);
    if (!be.hostVisible())
      be.copyToHost(ps.hostGrad.data(), ps.grad->p, n * 4);
    const float *g = hostGrad(ps);
    if (p.copy == 0) {
      double psq = 0;
      for (int64_t k = 0; k < n; ++k)
        psq += double(g[k]) * g[k];
      paramSq[size_t(i)] = float(psq);
      sq += psq;
    } else if (opts.optimizerSync == OptimizerSync::PostValidation)
      for (int64_t k = 0; k < n; ++k)
        allSq += double(g[k]) * g[k];
    slots.push_back({i, &p, hostValue(ps), hostGrad(ps), n});
  }
  int64_t thisStep = stepNo + 1;
  bool skip = opts.skipStep == thisStep;
  bool pv = opts.optimizerSync == OptimizerSync::PostValidation && !skip;
  if (E > 1) {
    // An expert param's squares: the sum of its slices over the EP group.
    // Reduced before the optimistic step, together with the other local
    // gradients' squares (the finite flag), so that every EP rank of this
    // pipeline rank sees the same partial statistics and takes the same
    // optimistic step and the same validate() decision: the replicated
    // (non-expert) parameters stay bitwise equal across the group (a
    // rollback is exact only up to rounding).
    std::vector<float> ex(paramSq.size() + 1, 0.0f);
    for (int32_t i : expertParams)
      ex[size_t(i)] = paramSq[size_t(i)];
    ex.back() = float(allSq);
    if (Status s = tr.allreduce(ex.data(), int64_t(ex.size()), Group::Expert);
        !s)
      return s;
    for (int32_t i : expertParams)
      paramSq[size_t(i)] = ex[size_t(i)];
    allSq = ex.back();
    sq = 0;
    for (auto &[i, ps] : params)
      if (prog.params[size_t(i)].copy == 0)
        sq += paramSq[size_t(i)];
  }
  // Post-validation: step at once with this rank's partial statistics; the
  // global ones are reduced right after and validate() checks the step.
  if (pv) {
    GradInfo partial{sq, std::isfinite(sq) && std::isfinite(allSq)};
    if (Status s = opt.optimisticUpdate(slots, partial, thisStep); !s)
      return s;
  }
  if (Status s = tr.allreduce(paramSq.data(), int64_t(paramSq.size()),
                              Group::Pipeline);
      !s)
    return s;
  double globalSq = 0;
  for (float v : paramSq)
    globalSq += v;
  float red[3] = {float(globalSq), float(lossSum), float(busy)};
  if (Status s = tr.allreduce(red + 1, 2, Group::Pipeline); !s)
    return s;
  float spanMax = float(span);
  if (Status s = tr.allreduce(&spanMax, 1, Group::Pipeline, ReduceOp::Max); !s)
    return s;
  float lossAll = red[1];
  if (Status s = tr.allreduce(&lossAll, 1, Group::DataParallel); !s)
    return s;
  if (E > 1)
    if (Status s = tr.allreduce(&lossAll, 1, Group::Expert); !s)
      return s;
  ++stepNo;
  double gradNorm = std::sqrt(globalSq);
  std::string outcome = "applied";
  if (skip) {
    outcome = "skipped";
  } else if (pv) {
    GradInfo global{gradNorm * gradNorm, std::isfinite(gradNorm)};
    auto r = opt.validateUpdate(global);
    if (!r)
      return r.status();
    outcome = r->outcome != StepOutcome::Skipped
                  ? (r->rolledBack ? "redone" : "accepted")
                  : (r->rolledBack ? "rolled-back" : "not-stepped");
  } else if (Status s = opt.update(slots, gradNorm, stepNo); !s) {
    return s;
  }
  StepStats st;
  st.step = stepNo;
  st.loss = double(lossAll) / double(totalMb) / double(D) / double(E);
  st.gradNorm = gradNorm;
  st.optimizer = outcome;
  int P = tr.pipelineSize();
  st.bubble = spanMax > 0 ? 1.0 - double(red[2]) / (double(P) * spanMax) : 0;
  float total = float(nowS() - t0);
  if (Status s = tr.allreduce(&total, 1, Group::World, ReduceOp::Max); !s)
    return s;
  st.seconds = total;
  st.tokens =
      int64_t(totalMb) * prog.model.microbatchSize * prog.model.seqLen * D * E;
  return st;
}

Executor::Executor(std::unique_ptr<Impl> i) : impl(std::move(i)) {}
Executor::~Executor() = default;

Expected<std::unique_ptr<Executor>> Executor::create(const Program &prog,
                                                     Backend &be, Transport &tr,
                                                     TokenSource &data,
                                                     StepOptimizer &opt,
                                                     const ExecutorOptions &o) {
  if (tr.pipelineSize() != prog.schedule.numRanks())
    return Status::error("transport has " + std::to_string(tr.pipelineSize()) +
                         " pipeline ranks, the program " +
                         std::to_string(prog.schedule.numRanks()));
  auto impl = std::make_unique<Impl>(prog, be, tr, data, opt, o);
  if (Status s = impl->init(); !s)
    return s;
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

Expected<StepStats> Executor::step() { return impl->step(); }
int64_t Executor::stepsDone() const { return impl->stepNo; }
void Executor::setStepsDone(int64_t s) { impl->stepNo = s; }

std::vector<int32_t> Executor::localParams() const {
  std::vector<int32_t> r;
  for (auto &[i, ps] : impl->params)
    r.push_back(i);
  return r;
}
std::vector<int64_t> Executor::paramShape(int32_t i) const {
  if (!impl->params.count(i))
    return {};
  std::vector<int64_t> shape = impl->prog.params[size_t(i)].type.shape;
  if (impl->expertParams.count(i))
    shape[0] /= impl->E;
  return shape;
}
int64_t Executor::paramElems(int32_t i) const {
  return impl->params.count(i) ? impl->localElems(i) : 0;
}
float *Executor::paramData(int32_t i) {
  auto it = impl->params.find(i);
  return it == impl->params.end() ? nullptr : impl->hostValue(it->second);
}
float *Executor::gradData(int32_t i) {
  auto it = impl->params.find(i);
  return it == impl->params.end() ? nullptr : impl->hostGrad(it->second);
}

/// Serialises (name, floats) pairs as text-free bytes for gathering.
static std::string packTensors(const NamedTensors &t) {
  std::string s;
  for (auto &[n, v] : t) {
    uint64_t ln = n.size(), lv = v.size();
    s.append(reinterpret_cast<const char *>(&ln), 8);
    s += n;
    s.append(reinterpret_cast<const char *>(&lv), 8);
    s.append(reinterpret_cast<const char *>(v.data()), v.size() * 4);
  }
  return s;
}
static NamedTensors unpackTensors(const std::string &s) {
  NamedTensors t;
  size_t p = 0;
  while (p + 8 <= s.size()) {
    uint64_t ln, lv;
    std::memcpy(&ln, s.data() + p, 8);
    p += 8;
    std::string n = s.substr(p, ln);
    p += ln;
    std::memcpy(&lv, s.data() + p, 8);
    p += 8;
    std::vector<float> v(lv);
    std::memcpy(v.data(), s.data() + p, lv * 4);
    p += lv * 4;
    t.emplace_back(std::move(n), std::move(v));
  }
  return t;
}

/// Data-parallel and expert-parallel replicas of a parameter (or of an
/// expert slice) must hold the same bits after every step: each world rank
/// sends a hash per held tensor, world rank 0 compares them (collective).
Status Executor::Impl::checkReplicas() {
  std::string mine;
  for (auto &[i, ps] : params) {
    int32_t slice = expertParams.count(i) ? epi : -1;
    uint64_t h = fnv1a64(hostValue(ps), size_t(localElems(i)) * sizeof(float));
    mine.append(reinterpret_cast<const char *>(&i), 4);
    mine.append(reinterpret_cast<const char *>(&slice), 4);
    mine.append(reinterpret_cast<const char *>(&h), 8);
  }
  auto all = tr.gatherStrings(mine);
  if (!all)
    return all.status();
  std::map<std::pair<int32_t, int32_t>, std::pair<uint64_t, size_t>> first;
  // World rank 0 finds the first mismatch and tells every rank, so each
  // reports the same message: {found, param, slice + 1, rank a, rank b}
  // (small integers, exact in float) under a max-allreduce.
  float found[5] = {0, 0, 0, 0, 0};
  for (size_t r = 0; r < all->size() && found[0] == 0; ++r)
    for (size_t o = 0; o + 16 <= (*all)[r].size(); o += 16) {
      int32_t i, slice;
      uint64_t h;
      std::memcpy(&i, (*all)[r].data() + o, 4);
      std::memcpy(&slice, (*all)[r].data() + o + 4, 4);
      std::memcpy(&h, (*all)[r].data() + o + 8, 8);
      auto [it, fresh] =
          first.emplace(std::make_pair(i, slice), std::make_pair(h, r));
      if (!fresh && it->second.first != h) {
        found[0] = 1;
        found[1] = float(i);
        found[2] = float(slice + 1);
        found[3] = float(it->second.second);
        found[4] = float(r);
        break;
      }
    }
  if (Status s = tr.allreduce(found, 5, Group::World, ReduceOp::Max); !s)
    return s;
  if (found[0] != 0) {
    int slice = int(found[2]) - 1;
    return Status::error(
        "replicas diverged: parameter '" + prog.params[size_t(found[1])].name +
        "'" +
        (slice >= 0 ? " (expert slice " + std::to_string(slice) + ")" : "") +
        " differs between world ranks " + std::to_string(int(found[3])) +
        " and " + std::to_string(int(found[4])));
  }
  return Status::ok();
}

Expected<NamedTensors> Executor::gatherWeights() {
  NamedTensors mine;
  // Expert params: every EP rank sends its slice; the gather arrives in
  // world rank order, i.e. in EP index order for a pipeline rank, so
  // concatenating same-named slices rebuilds the full tensor.
  if (impl->tr.dpIndex() == 0)
    for (auto &[i, ps] : impl->params) {
      const Param &p = impl->prog.params[size_t(i)];
      bool expert = impl->expertParams.count(i) > 0;
      if (p.copy != 0 || (!expert && impl->epi != 0))
        continue;
      int64_t n = impl->localElems(i);
      std::vector<float> v(static_cast<size_t>(n));
      std::memcpy(v.data(), impl->hostValue(ps), size_t(n) * 4);
      mine.emplace_back(p.name, std::move(v));
    }
  if (Status s = impl->checkReplicas(); !s)
    return s;
  auto all = impl->tr.gatherStrings(packTensors(mine));
  if (!all)
    return all.status();
  NamedTensors out;
  std::map<std::string, size_t> at;
  for (const std::string &s : *all)
    for (auto &t : unpackTensors(s)) {
      auto [it, fresh] = at.emplace(t.first, out.size());
      if (fresh)
        out.push_back(std::move(t));
      else
        out[it->second].second.insert(out[it->second].second.end(),
                                      t.second.begin(), t.second.end());
    }
  // Program order.
  std::map<std::string, size_t> pos;
  for (size_t i = 0; i < impl->prog.params.size(); ++i)
    pos.emplace(impl->prog.params[i].name, i);
  std::sort(out.begin(), out.end(),
            [&](auto &a, auto &b) { return pos[a.first] < pos[b.first]; });
  return out;
}

Status Executor::writeTrace(const std::string &path) {
  std::string js;
  int wr = impl->tr.worldRank();
  char buf[640];
  // The rank's epoch on the host's steady clock, to align ranks' timelines.
  std::snprintf(buf, sizeof buf,
                "{\"name\":\"clock\",\"ph\":\"M\",\"pid\":%d,"
                "\"args\":{\"epoch_us\":%.3f}},\n",
                wr, impl->epoch * 1e6);
  js += buf;
  for (const TraceEvent &e : impl->events) {
    const char *cats[3] = {"compute", "comm", "step"};
    std::snprintf(buf, sizeof buf,
                  "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,"
                  "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f%s%s%s},\n",
                  e.name.c_str(), e.cat ? e.cat : cats[e.tid < 3 ? e.tid : 1],
                  wr, e.tid, e.ts * 1e6, e.dur * 1e6,
                  e.args.empty() ? "" : ",\"args\":{", e.args.c_str(),
                  e.args.empty() ? "" : "}");
    js += buf;
  }
  auto all = impl->tr.gatherStrings(js);
  if (!all)
    return all.status();
  if (wr != 0)
    return Status::ok();
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f)
    return Status::error("cannot write trace '" + path + "'");
  std::fputs("{\"traceEvents\":[\n", f);
  for (size_t r = 0; r < all->size(); ++r) {
    std::fprintf(f,
                 "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%zu,"
                 "\"args\":{\"name\":\"rank %zu\"}},\n"
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":0,"
                 "\"args\":{\"name\":\"compute\"}},\n"
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":1,"
                 "\"args\":{\"name\":\"comm\"}},\n",
                 r, r, r, r);
    std::fputs((*all)[r].c_str(), f);
  }
  std::fputs(
      "{\"name\":\"end\",\"ph\":\"i\",\"pid\":0,\"ts\":0,\"s\":\"g\"}\n]}\n",
      f);
  return std::fclose(f) == 0 ? Status::ok()
                             : Status::error("error writing '" + path + "'");
}

} // namespace pipeforge::rt
