//===- ExecutorImpl.h - The executor's state, shared by its files -*- C++
//-*-===//
//
// Private to runtime/lib: Executor::Impl and the buffers it owns. The
// executor is split by concern:
//   Executor.cpp        the action interpreter (F, B, W, BW, FB, messages)
//   GradSync.cpp        after the actions: data- and expert-parallel gradient
//                       reduction, the gradient norm, the optimizer protocol
//   ExecutorWeights.cpp weights files, the gather, the replica check
//   ExecutorTrace.cpp   the merged Chrome trace
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_LIB_EXECUTORIMPL_H
#define PIPEFORGE_RT_LIB_EXECUTORIMPL_H

#include "pipeforge/rt/Executor.h"
#include "pipeforge/rt/MoEParallel.h"
#include "pipeforge/Schedule/Offload.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace pipeforge::rt {

using sched::Action;
using sched::ActionKind;
using sched::Payload;
using sched::Work;
using sched::WorkKind;

namespace exec {

inline double nowS() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// An owned device buffer.
/// What a backend buffer holds, for the memory report's accounting.
enum class MemClass : uint8_t {
  Parameters,
  Gradients,
  Stash,     ///< F's stash and B's W-stash slots kept for later work
  Messages,  ///< activations and gradients in flight between stages
  Workspace, ///< the functions' value buffers (pp.buffers), kept across steps
  Data,      ///< tokens, targets, the loss seed
};
constexpr int kMemClasses = 6;

/// The bytes of backend buffers alive per class, and their peaks: every
/// Buf of an executor adds itself here. Atomic: a rank's buffers may be
/// released by a transport's thread.
struct MemLedger {
  std::array<std::atomic<int64_t>, kMemClasses> live{}, peak{};
  std::atomic<int64_t> total{0}, totalPeak{0};
  static void raise(std::atomic<int64_t> &p, int64_t v) {
    int64_t old = p.load();
    while (v > old && !p.compare_exchange_weak(old, v)) {
    }
  }
  void add(MemClass c, int64_t n) {
    raise(peak[size_t(c)], live[size_t(c)] += n);
    raise(totalPeak, total += n);
  }
  void sub(MemClass c, int64_t n) {
    live[size_t(c)] -= n;
    total -= n;
  }
};

struct Buf {
  Backend *be = nullptr;
  void *p = nullptr;
  int64_t bytes = 0;
  MemLedger *ledger = nullptr;
  MemClass cls = MemClass::Workspace;
  /// `clear` false: the contents are undefined (Backend::allocUninit), for
  /// a buffer written whole before it is read.
  Buf(Backend &b, int64_t n, MemLedger *l = nullptr,
      MemClass c = MemClass::Workspace, bool clear = true)
      : be(&b), p(clear ? b.alloc(n) : b.allocUninit(n)), bytes(n), ledger(l),
        cls(c) {
    if (ledger)
      ledger->add(cls, bytes);
  }
  /// Moves the buffer's bytes to another class of the ledger (a function's
  /// workspace buffer handed over as a stash).
  void reclassify(MemClass c) {
    if (ledger) {
      ledger->sub(cls, bytes);
      ledger->add(c, bytes);
    }
    cls = c;
  }
  ~Buf() {
    if (ledger)
      ledger->sub(cls, bytes);
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
  /// >= 0: a counter event ("ph":"C") with this value in bytes at `ts`.
  int64_t counter = -1;
};

} // namespace exec

using exec::Buf;
using exec::BufP;
using exec::FnPlan;
using exec::MemClass;
using exec::MemLedger;
using exec::Key;
using exec::nowS;
using exec::TraceEvent;

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
  /// Traces: how far apart the ranks' epochs may be (alignClocks), s.
  double clockSync = -1;
  Status alignClocks();

  /// On a backend that is not host-visible, with a host optimizer, the
  /// host copies are the master parameters (fp32) the optimizer and
  /// checkpoints work on: values are uploaded at the start of every step,
  /// gradients downloaded at its end. With the optimizer on the device
  /// (optOnDevice) the device buffers are the master copies and the host
  /// ones mirrors that Executor::pullValues refreshes.
  struct ParamState {
    BufP value, grad;
    std::vector<float> hostValue, hostGrad;
    /// The gradient buffer holds this step's gradient so far: some kernel
    /// or accumulateParamGrad wrote it, or clearUnwrittenGrad cleared it.
    /// False from step()'s start (the buffer holds a previous step's
    /// bits): the first write overwrites (a kernel without its addTo bit,
    /// a copy instead of accumulate), later ones add.
    bool gradWritten = false;
  };
  /// A gradient nothing wrote this step cleared (it is zero), before
  /// anything reads it or adds to it other than the step's gradient
  /// writers: the overlapped reduction's buckets, DualPipe's GRADREDUCE,
  /// the reductions after the step (reduceStepGrads). No-op for a written
  /// or a released (ZeRO-2) gradient.
  void clearUnwrittenGrad(ParamState &ps) {
    if (ps.gradWritten || !ps.grad)
      return;
    be.fillZero(ps.grad->p, ps.grad->bytes);
    ps.gradWritten = true;
  }
  void clearUnwrittenGrads() {
    for (auto &[i, ps] : params)
      clearUnwrittenGrad(ps);
  }
  float *hostValue(ParamState &ps) {
    return be.hostVisible() ? ps.value->f() : ps.hostValue.data();
  }
  float *hostGrad(ParamState &ps) {
    return be.hostVisible() ? ps.grad->f() : ps.hostGrad.data();
  }
  bool optOnDevice() const { return !be.hostVisible() && opt.deviceResident(); }
  /// A parameter's current values into host memory `out` / from `in`,
  /// wherever the master copy is (communication staging).
  void loadValues(ParamState &ps, float *out, int64_t n) {
    if (optOnDevice())
      be.copyToHost(out, ps.value->p, n * 4);
    else
      std::copy_n(hostValue(ps), n, out);
  }
  void storeValues(ParamState &ps, const float *in, int64_t n) {
    if (optOnDevice())
      be.copyFromHost(ps.value->p, in, n * 4);
    else
      std::copy_n(in, n, hostValue(ps));
  }
  /// Host <-> device bytes at the start of the current step, and those of
  /// the last finished step (memory report).
  Backend::Transfers stepStartTransfers, lastStepTransfers;
  /// The stash level of the last counter event in the trace.
  int64_t tracedStash = -1;
  /// Every backend buffer this executor allocates, by class.
  MemLedger ledger;
  BufP newBuf(int64_t bytes, MemClass c, bool clear = true) {
    return std::make_shared<Buf>(be, bytes, &ledger, c, clear);
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
  /// Under expert parallelism, the moe kernels whose expert weights are not
  /// sharded (one-expert layers): they run whole, without all-to-all.
  std::set<const Kernel *> localMoE;
  /// Tensor parallelism: group size and index. With T > 1 `prog` is this
  /// rank's specialisation (specializeForTensorRank), owned here.
  int T = 1, tpi = 0;
  std::shared_ptr<const Program> ownedProg;
  /// Elements of parameter i held here (its slice for expert params).
  int64_t localElems(int32_t i) const {
    int64_t n = prog.params[size_t(i)].type.numElements();
    return expertParams.count(i) ? n / E : n;
  }
  std::map<int32_t, ParamState> params; ///< local params by global index
  /// ZeRO-1 (ExecutorOptions::zeroStage): the data-parallel index that holds
  /// each local parameter's optimizer state and updates it; empty without
  /// sharding (every rank updates every local parameter).
  std::map<int32_t, int> stateOwner;
  /// ZeRO over DualPipe's pair (two model copies): rank r and its
  /// GRADREDUCE peer hold the same stages, one copy each. Each parameter
  /// (by base name) is updated on one side of the pair (Mine / Theirs);
  /// tied ones on both (Both). Empty without two copies or ZeRO.
  enum class PairOwner : uint8_t { Both, Mine, Theirs };
  std::map<int32_t, PairOwner> pairOwner;
  int pairPeer = -1;
  /// A parameter's copy-0 twin (its own index in copy 0): the slot its
  /// squares take in the gradient norm when this side updates it.
  std::map<int32_t, int32_t> copy0Twin;
  /// Whether this side of the pair updates parameter i (always without
  /// pair sharding).
  bool sideUpdates(int32_t i) const {
    auto it = pairOwner.find(i);
    return it == pairOwner.end() || it->second != PairOwner::Theirs;
  }
  /// Where parameter i's squares go in the gradient norm (its copy-0
  /// twin's slot with the pair sharded, else its own) and whether this
  /// rank's enter it: copy 0, or, with the pair sharded, the side that
  /// updates it (tied copies count 0 in either case).
  int32_t normSlot(int32_t i) const {
    auto it = copy0Twin.find(i);
    return it == copy0Twin.end() ? i : it->second;
  }
  bool normCopy(int32_t i) const {
    auto it = pairOwner.find(i);
    if (it != pairOwner.end() && it->second != PairOwner::Both)
      return it->second == PairOwner::Mine;
    return prog.params[size_t(i)].copy == 0;
  }
  bool ownsState(int32_t i) const {
    if (!sideUpdates(i))
      return false;
    auto it = stateOwner.find(i);
    return it == stateOwner.end() || it->second == tr.dpIndex();
  }
  void assignStateOwners();
  Status assignPairOwners();
  /// ZeRO-2 (zeroStage 2): the gradient buffer of a parameter whose update
  /// another rank owns is freed once its gradient has left for that rank
  /// (GradOverlap's buckets, reduceGradsToOwners, DualPipe's GRADREDUCE for
  /// what the other side updates), and made again, zeroed, when the next
  /// step starts. The owners' buffers never move (the optimizer holds
  /// their addresses).
  void releaseGrad(int32_t i) {
    if (opts.zeroStage < 2 || ownsState(i))
      return;
    ParamState &ps = params.at(i);
    ps.grad.reset();
    std::vector<float>().swap(ps.hostGrad);
  }
  Status restoreGrads();
  /// ZeRO-3 (zeroStage 3, ExecutorParams.cpp; docs/optimizer.md "ZeRO-3"):
  /// each tensor's values live only on the rank that updates it (its
  /// owner: ownsState); the other holders' buffers exist from the stage's
  /// UNSHARD to its RESHARD. Owners serve their values, fixed during the
  /// step, at its start (no rank waits on another's place in its schedule);
  /// UNSHARD posts the receipt, the stage's next compute waits for it.
  /// Tied tensors stay resident (ZeRO-1's exchange).
  std::set<int32_t> zero3Params;           ///< local tensors ZeRO-3 shards
  std::map<int32_t, int> paramOwnerWorld;  ///< not owned: the owner's world rank
  std::map<int32_t, std::vector<int>> paramHolders; ///< owned: who gathers it
  std::map<int32_t, int64_t> paramTag;     ///< its messages' tag
  /// The not-owned tensors of each (copy, stage), ascending: what its
  /// UNSHARD gathers and its RESHARD frees (built once, planParamService).
  std::map<std::pair<int, int>, std::vector<int32_t>> gatheredOf;
  struct ParamFetch {
    RequestId req = 0;
    int32_t param = -1;
  };
  std::map<std::pair<int, int>, std::vector<ParamFetch>> fetching;
  std::vector<RequestId> serving;
  std::map<int32_t, std::vector<float>> serveStaging; ///< device optimizer
  /// The most parameter bytes held during a step (the memory report).
  int64_t paramStepPeak = 0;
  bool zero3Sharded(int32_t i) const { return zero3Params.count(i) > 0; }
  Status planParamService();
  Status serveParams();
  /// `inStep`: a step's UNSHARD (its bytes count in paramStepPeak).
  Status unshard(const Action &a, bool inStep = true);
  Status awaitParams(int copy, int stage);
  Status awaitParams(const Action &a);
  Status reshard(const Action &a);
  Status finishServing();
  void releaseValue(int32_t i);
  Status allocValue(int32_t i);
  /// Out of the step (checkpoints, weight dumps, a resume; collective):
  /// every holder gathers every sharded tensor, and drops them again.
  Status gatherAllParams();
  void releaseAllParams();
  /// After the update: the values of the parameters the other side updated,
  /// from the peer (pairwise sum with -0.0: x + -0.0 == x for every x).
  Status exchangePairValues();
  /// Tied parameters (Param::tiedTo): (the target, the tied copy) by global
  /// index, in program order.
  std::vector<std::pair<int32_t, int32_t>> ties;
  /// `fileOf` (optional): a world rank's checkpoint file, named in the
  /// message (a resume's check of the restored state).
  Status checkReplicas(const std::function<std::string(int)> *fileOf = nullptr);
  std::map<std::pair<int, int>, std::array<FnPlan, 4>> plans;
  /// Bytes of the activation bundle F(copy, stage) sends, and each
  /// activation's offset in it.
  std::map<std::pair<int, int>, std::vector<int64_t>> actOffsets;
  std::map<std::pair<int, int>, int64_t> actBytes;

  // Per-step state.
  std::map<Key, std::vector<BufP>> stash, wstash;
  /// Activation offload (ExecutorOptions::offloadActivations,
  /// ExecutorOffload.cpp): the microbatches whose F-stash leaves the device,
  /// and per action index the keys whose reload starts before it.
  sched::OffloadPlan offloadPlan;
  /// The program's schedule holds OFFLOAD/RELOAD (pipeforge-compile
  /// --offload-activations): they start the copies, and offloadPlan is the
  /// plan they state (sched::offloadPlanOf); else F and the plan's
  /// reloadBefore start them.
  bool offloadByActions = false;
  /// A stash away from the device: per slot its host copy (null: the slot
  /// stayed, `kept`), the device buffers still being copied out, and the
  /// events of the copies out and back.
  struct Offloaded {
    std::vector<void *> host;
    std::vector<int64_t> bytes;
    std::vector<BufP> kept, leaving;
    void *outEv = nullptr, *inEv = nullptr;
    bool back = false; ///< the reload was queued (the slots are in `stash`)
  };
  std::map<Key, Offloaded> offloaded;
  int64_t hostStash = 0, hostStashPeak = 0, offloadsThisStep = 0,
          offloadsLastStep = 0;
  Status planOffload();
  Status startOffload(const Key &k);
  Status reload(const Key &k);
  /// Before a B (or BW) of `k`: its stash on the device, the compute
  /// stream ordered after the copy back.
  Status ensureResident(const Key &k);
  /// After action `i`: frees the device buffers of the stashes the plan
  /// sends away there (waiting for their copies out), and the host buffers
  /// of those whose copy back has finished. `all`: every copy (the step's
  /// end, i ignored).
  void pollOffloads(bool all, size_t i = 0);
  void releaseHost(Offloaded &o);
  /// Measured memory: the peak of the stash bytes held between actions, and
  /// one microbatch's stash bytes per (copy, stage): F's, and B's W-stash.
  int64_t stashPeak = 0;
  std::map<std::pair<int, int>, int64_t> mbFStash, mbWStash;
  /// One microbatch's stash bytes per (copy, stage): F's plus the largest
  /// W-stash of a separate B.
  std::map<std::pair<int, int>, int64_t> microbatchStash() const {
    std::map<std::pair<int, int>, int64_t> m = mbFStash;
    for (auto &[cs, w] : mbWStash)
      m[cs] += w;
    return m;
  }
  /// Per stage: which of F's stash slots its W function reads.
  std::map<const Stage *, std::vector<bool>> wReads;
  const std::vector<bool> &stashForW(const Stage &st) {
    auto [it, fresh] = wReads.try_emplace(&st);
    if (fresh)
      for (const ArgBinding &a : st.backwardWeight.args)
        if (a.role == ArgRole::Stash) {
          if (it->second.size() <= size_t(a.index))
            it->second.resize(size_t(a.index) + 1, false);
          it->second[size_t(a.index)] = true;
        }
    return it->second;
  }
  /// Records the bytes held now (after every F, B and W).
  void noteStash();
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
  /// With opts.docMask: the document starts of (c, mb) this step (host).
  std::map<std::pair<int, int>, std::vector<int32_t>> docs;
  BufP seed;
  double lossSum = 0;
  int lossCount = 0;
  double busy = 0;
  /// With --trace on a host backend: the step's seconds in each op kind's
  /// kernels (Backend::run; the step event's args.ops_us).
  std::array<double, kNumOpKinds> opSeconds{};
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
  /// The microbatch's index among all of a step's microbatches, as the
  /// single-process run numbers them (the data position, the dropout key):
  /// replica d, EP rank e of E, copy c, microbatch mb.
  int64_t globalMicrobatch(int c, int mb) const {
    return (int64_t(tr.dpIndex()) * E + epi) * totalMb + int64_t(c) * mPerCopy +
           mb;
  }

  /// Parameter gradients written straight into place (Backend::canAddTo;
  /// planDirectGrads, ExecutorFunction.cpp): per function with at least one.
  struct DirectGrads {
    std::vector<int32_t> param; ///< per value: the parameter, or -1
    std::vector<bool> result;   ///< per result: already added by its kernel
  };
  std::map<const Function *, DirectGrads> directGrads;
  void planDirectGrads();
  bool runsOnBackend(const Kernel &k) const;

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
    /// The stage's last gradient function of the step, with the gradient
    /// reduction overlapped: each parameter gradient is accumulated (and
    /// handed to the reduction) as soon as its kernel ran; `taken` marks
    /// those results for fnResults.
    bool earlyGrads = false;
    std::vector<bool> taken;
    /// The function's gradients written straight into place (null: none).
    const DirectGrads *direct = nullptr;
    bool done() const { return next >= fn->kernels.size(); }
  };
  Status fnBegin(FnRun &r);
  Status fnPrepare(FnRun &r); ///< binds r.call for kernel r.next
  Status fnResults(FnRun &r);
  /// A stash slot for a function result (fnResults).
  BufP stashResult(FnRun &run, int32_t value, const void *src, int64_t bytes);
  /// The outgoing activation (role Activation) or gradient (GradOut) bundle
  /// of `run`, laid out as stage `layoutStage`'s activations.
  BufP newMessage(const FnRun &run, ResultRole role, int c, int layoutStage);
  /// Result `k` of r's function (a ParamGrad) added to its gradient.
  Status accumulateParamGrad(FnRun &r, size_t k);
  Status fnError(const FnRun &r, const std::string &m);
  /// Runs one step of r: a kernel, or the next phase of its moe kernel;
  /// `posted`: an all-to-all of r is in flight after the step.
  Status fnStep(FnRun &r, bool &posted);
  /// r.call with every operand copied to host memory (r.hostCall).
  const KernelCall &stageToHost(FnRun &r);
  Status runTensorParallelDevice(const KernelCall &c);
  Status runTensorParallel(FnRun &r);
  void recordMoE(const FnRun &r, MoEPhased &m, const std::string &name);
  Status doOverlap(const Action &a, bool &fusedRun);

  /// ExecutorInit.cpp: everything before the first step, in phases.
  Status init();
  Status initStages();
  Status initExpertParallel();
  Status initTensorParallel();
  Status initParams();
  Status initZero();
  void planBuffers();
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
  /// GRADREDUCE with the pair sharded (ZeRO): each side ends with the sum
  /// of the tensors it updates (`order`: the canonical order).
  Status gradReduceToUpdaters(
      const Action &a,
      const std::vector<std::pair<std::string, int32_t>> &order);
  Expected<BufP> takeInbox(Payload p, int c, int s, int mb);
  Status dataFor(int c, int mb, BufP &tok, BufP &tgt);
  /// The document starts of (c, mb) at this step (--doc-mask), host memory.
  Expected<const std::vector<int32_t> *> docsFor(int c, int mb);
  void record(const std::string &name, int tid, double t0, double t1,
              std::string args = "", const char *cat = nullptr) {
    if (opts.trace)
      events.push_back({name, tid, t0 - epoch, t1 - t0, std::move(args), cat});
  }
  void pollSends() {
    tr.progress();
    pollBuckets();
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
  /// GradSync.cpp: everything after the step's actions (t0: the step's start,
  /// span: its actions' wall time), in the phases below.
  Expected<StepStats> finishStep(double t0, double span);
  /// The gradient norm's parts: each parameter's sum of squares in its
  /// norm slot, the sum of those this rank counts, that of the other local
  /// gradients (the finite flag), and the optimizer's slots.
  struct GradNorms {
    std::vector<float> paramSq;
    double sq = 0, allSq = 0;
    std::vector<ParamSlot> slots;
  };
  /// The step's totals over the pipeline group.
  struct StepTotals {
    double globalSq = 0;
    float lossAll = 0, busy = 0, spanMax = 0;
  };
  Status reduceStepGrads();
  Status localGradSquares(GradNorms &n);
  Status sumGroupSquares(GradNorms &n);
  Expected<StepTotals> reduceStepTotals(GradNorms &n, double span);
  Expected<std::string> applyUpdate(const GradNorms &n, double gradNorm,
                                    bool skip, bool pv);
  Status shareUpdatedParams();
  Expected<StepStats> stepStats(double t0, const StepTotals &t,
                                double gradNorm, const std::string &outcome);
  /// Sums the `chosen` gradients over group `g` and divides every local
  /// gradient by `size`.
  Status averageGrads(Group g, int size,
                      const std::function<bool(int32_t)> &chosen);
  /// Tensor parallelism: the gradients of the tp_reduce_grad parameters
  /// summed over the group (each rank's covers its share of the tokens).
  Status sumTensorParallelGrads();
  /// ZeRO-1: each gradient summed over the data-parallel group into the
  /// rank that owns its optimizer state, and divided by dp there (the other
  /// ranks' copies are left as they are and not read).
  Status reduceGradsToOwners();
  /// ZeRO-1: `recv[k]` (replica k's gradients of the `chosen` parameters
  /// owned here, in parameter order) summed in replica order into those
  /// gradients and divided by dp.
  Status sumOwnedGrads(std::vector<std::vector<float>> &recv,
                       const std::function<bool(int32_t)> &chosen);
  /// Tied parameters, each pair with a local copy or an exchange with the
  /// pipeline rank holding the other: `grads`, both gradients become their
  /// sum (before the step); else the copy takes the target's values (after a
  /// post-validation step, whose rollback is exact only to rounding).
  Status exchangeTied(bool grads);
  /// ZeRO-1: every owner's updated parameters sent to its replicas.
  Status gatherOwnedParams();
  // Overlapped data-parallel gradient reduction (GradOverlap.cpp,
  // ExecutorOptions::overlapGradReduce).
  struct GradBucket {
    std::vector<int32_t> params;
    std::vector<float> host; ///< packed gradients (host collectives)
    BufP dev;                ///< packed gradients (device collectives)
    RequestId req = 0;
    double posted = 0, done = -1;
    /// ZeRO-1: an all-to-all to the owners; what the replicas sent here
    /// (the transport fills it at wait(): it must not move).
    bool toOwners = false;
    std::unique_ptr<std::vector<std::vector<float>>> owned;
  };
  bool overlapOn = false;
  /// Per (copy, stage) of this rank: the action after which its gradients
  /// are final, and whether they may be taken kernel by kernel inside it.
  std::map<std::pair<int, int>, std::pair<size_t, bool>> gradFinal;
  /// Per function: its ParamGrad results (indices) by defining kernel.
  std::map<const Function *, std::vector<std::vector<size_t>>> gradByKernel;
  std::set<int32_t> overlapParams; ///< the parameters it may reduce
  std::vector<GradBucket> buckets; ///< this step's, in posting order
  std::set<int32_t> reducedEarly;  ///< handed to a bucket this step
  std::vector<int32_t> pendingParams;
  int64_t pendingBytes = 0;
  size_t curAction = 0;
  void planGradOverlap();
  void beginGradOverlap();
  bool earlyGradRun(const FnRun &r) const;
  Status takeEarlyGrads(FnRun &r, size_t kernel);
  Status gradReady(int32_t i);
  Status postBucket();
  Status gradsAfterAction(size_t i);
  void pollBuckets();
  Status finishGradOverlap();
  Status sumSliceSquares(Group g, const std::function<bool(int32_t)> &sliced,
                         std::vector<float> &paramSq, double &allSq,
                         double &sq);

  /// nn.moe's load-balancing biases (ExecutorMoEBias.cpp), every one of the
  /// model on every rank, by name: the bias and this step's load [experts].
  struct MoEBias {
    std::vector<float> bias, load;
    double speed = -1; ///< bias_update_speed (-1: no forward kernel seen)
  };
  std::map<std::string, MoEBias> moeBiases;
  Status initMoEBiases();
  /// opts.initialWeights: this rank's `nLocal` values of parameter `i`
  /// (`source`: the name its values come from, a tied copy's target).
  Status loadInitialValues(const Param &p, const std::string &source,
                           int32_t i, int64_t nLocal, float *out);
  /// The call's bias (and, F of a moe kernel, its load), or none.
  void bindMoEBias(KernelCall &call, int which);
  /// After the step: loads summed over the world, every bias updated.
  Status updateMoEBiases();
  /// Every rank holds the same bits of every bias.
  Status checkMoEBiasReplicas();
  /// Executor::checkRestoredState's bias part: every bias can still move by
  /// its bias_update_speed, and every rank holds the same (collective).
  Status checkRestoredBiases(const std::function<std::string(int)> &fileOf);
};

/// "stage S (copy C): message" (ExecutorInit.cpp).
Status stageError(int c, int s, const std::string &m);

// Tensor parallelism (TensorParallel.cpp).
/// `prog` with the kernels of TP rank `tpIndex`: `vocab_start` on the
/// vocabulary-parallel ops; a partial linear's bias and the embedding's
/// positions only on rank 0.
Program specializeForTensorRank(const Program &prog, int tpIndex);

/// The program this rank runs: null when it is `prog` itself, this rank's
/// specialisation under tensor parallelism; an error when the transport's
/// pipeline ranks are not the schedule's (Executor::create, planRankMemory).
Expected<std::shared_ptr<const Program>> rankProgram(const Program &prog,
                                                     Transport &tr);
/// TP rank `tpIndex`'s slice (of T) of split parameter p, from the whole
/// tensor's values.
void sliceTensorParallel(const Param &p, int T, int tpIndex, const float *whole,
                         float *out);
/// One TP kernel on host memory.
Status runTensorParallelKernel(const KernelCall &c, Transport &tr);
/// The layout of nn.tp_all_gather / nn.tp_reduce_scatter: the whole tensor
/// (the gather's result, the scatter's input) is `outer` rows of T member
/// slices of `shard` floats; the collectives take it member-major (member
/// r's `part` = outer x shard floats: its slice of every row).
struct TPSlices {
  int T = 1;
  int64_t outer = 1, shard = 0, part = 0;
  int64_t inWhole(int r, int64_t o) const { return (o * T + r) * shard; }
  int64_t inMembers(int r, int64_t o) const { return r * part + o * shard; }
};
/// The layout of kernel `c` (a gather or a scatter) over T ranks; errors
/// name the kernel.
Expected<TPSlices> tpSlices(const KernelCall &c, int T);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_LIB_EXECUTORIMPL_H
