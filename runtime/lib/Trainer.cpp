//===- Trainer.cpp - One rank's training run ------------------------------===//
//
// See Trainer.h. The data source and the optimizer are adapted to the
// executor's seams (TokenSource, StepOptimizer) here; checkpoints use
// Checkpoint.h with the program's checksum as its fingerprint.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Trainer.h"

#include "pipeforge/rt/HfWeights.h"

#include "pipeforge/rt/Checkpoint.h"
#include "pipeforge/rt/Data.h"
#include "pipeforge/rt/Optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <unistd.h>

namespace pipeforge::rt {

std::string checkpointDirOf(const std::string &dir, int worldRank) {
  std::string d = dir;
  for (size_t at; (at = d.find("{rank}")) != std::string::npos;)
    d.replace(at, 6, std::to_string(worldRank));
  return d;
}

std::string checkpointSubdir(const std::string &dir, int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "/step-%08lld", (long long)step);
  return dir + b;
}

int64_t latestCheckpoint(const std::string &dir) {
  int64_t best = -1;
  DIR *d = opendir(dir.c_str());
  if (!d)
    return -1;
  while (dirent *e = readdir(d)) {
    const char *n = e->d_name;
    if (std::strncmp(n, "step-", 5) != 0)
      continue;
    char *end = nullptr;
    long long k = std::strtoll(n + 5, &end, 10);
    if (end == n + 5 || *end || k < 0)
      continue;
    if (access((dir + "/" + n + "/manifest.txt").c_str(), R_OK) == 0)
      best = std::max<int64_t>(best, k);
  }
  closedir(d);
  return best;
}

namespace {

/// Data.h's DataSource as the executor's TokenSource; replica d reads
/// global microbatches d*M .. d*M+M-1. Documents (--doc-mask) end after
/// the token `eos`, or are the source's own when eos < 0.
class DataAdapter final : public TokenSource {
public:
  DataAdapter(const DataSource &d, int64_t m, int64_t eos)
      : d(d), m(m), eos(eos) {}
  Status fill(int64_t step, int dp, int64_t g, int64_t b, int64_t s,
              int32_t *tok, int32_t *tgt) override {
    return d.batch(int64_t(dp) * m + g, step, b, s, tok, tgt);
  }
  Status documents(int64_t step, int dp, int64_t g, int64_t b, int64_t s,
                   int32_t *docStart) override {
    if (eos < 0)
      return d.documentStarts(int64_t(dp) * m + g, step, b, s, docStart);
    std::vector<int32_t> tok(size_t(b * s)), tgt(size_t(b * s));
    if (Status st = fill(step, dp, g, b, s, tok.data(), tgt.data()); !st)
      return st;
    documentStartsFromEos(tok.data(), b, s, int32_t(eos), docStart);
    return Status::ok();
  }

private:
  const DataSource &d;
  int64_t m, eos;
};

/// Optimizer.h's AdamW behind the executor's seam.
class AdamWAdapter final : public StepOptimizer {
public:
  AdamWAdapter(AdamWConfig c, bool decayAll) : opt(c), decayAll(decayAll) {}
  /// Registers the parameters whose state this rank holds (in
  /// optimizerParams() order, the order of the slots the executor passes:
  /// all local ones, or under ZeRO-1 this replica's share), before a
  /// resume. Sized by what this rank holds: an expert-parallel parameter is
  /// a 1/E slice of the program's tensor.
  /// On a device backend the optimizer lives there (AdamWT::useBackend):
  /// its moments are allocated on the device and it steps the executor's
  /// device buffers, so no parameter or gradient crosses to the host.
  Status registerParams(Executor &ex, const Program &p, Backend &be) {
    if (registered)
      return Status::ok();
    const bool device = !be.hostVisible() && be.runsOptimizer();
    if (device)
      if (Status s = opt.useBackend(be); !s)
        return s;
    for (int32_t i : ex.optimizerParams())
      if (Status s = opt.addParam(
              p.params[size_t(i)].name,
              device ? ex.paramDevice(i) : ex.paramData(i),
              device ? ex.gradDevice(i) : ex.gradData(i),
              size_t(ex.paramElems(i)), decays(ex.paramShape(i)));
          !s)
        return s;
    registered = true;
    return Status::ok();
  }
  bool deviceResident() const override { return opt.onBackend(); }
  // The slots are not read: the parameters were registered by
  // registerParams (Trainer::create), on the host or the device.
  Status update(const std::vector<ParamSlot> &, double norm,
                int64_t) override {
    if (Status s = checkRegistered(); !s)
      return s;
    GradInfo g;
    g.normSq = norm * norm;
    g.allFinite = std::isfinite(norm);
    opt.step(g);
    return opt.takeBackendError();
  }
  Status optimisticUpdate(const std::vector<ParamSlot> &,
                          const GradInfo &partial, int64_t) override {
    if (Status s = checkRegistered(); !s)
      return s;
    if (Status s = opt.optimisticStep(partial); !s)
      return s;
    return opt.takeBackendError();
  }
  Expected<ValidateResult> validateUpdate(const GradInfo &global) override {
    auto r = opt.validate(global);
    if (Status s = opt.takeBackendError(); !s)
      return s;
    return r;
  }
  AdamW &get() { return opt; }
  int64_t stateBytes() const override { return opt.stateBytes(); }

private:
  Status checkRegistered() const {
    return registered ? Status::ok()
                      : Status::error("internal error: AdamW stepped before "
                                      "its parameters were registered");
  }
  bool decays(const std::vector<int64_t> &shape) const {
    return decayAll || decaysByDefault(shape);
  }
  AdamWT<float> opt;
  bool decayAll = false;
  bool registered = false;
};

} // namespace

struct Trainer::Impl {
  const Program &prog;
  Transport &tr;
  TrainerOptions o;
  uint64_t dataFp = 0;
  uint64_t progFp = 0;
  /// The fingerprint of checkpoints written before the ZeRO level left it
  /// (" zero1" in the recipe): still resumed.
  uint64_t legacyZeroFp = 0;
  std::unique_ptr<DataSource> ds;
  std::unique_ptr<TokenSource> tokens;
  std::unique_ptr<StepOptimizer> opt;
  AdamWAdapter *adam = nullptr;
  std::unique_ptr<Executor> ex;
  std::vector<ParamRef> refs;
  /// ZeRO-3: every tensor gathered (collective) and `refs` pointed at the
  /// buffers, for a checkpoint, a dump or a resume; released again.
  Status gatherParams() {
    if (Status s = ex->gatherParams(); !s)
      return s;
    std::vector<int32_t> local = ex->localParams();
    for (size_t k = 0; k < local.size() && k < refs.size(); ++k)
      refs[k].data = ex->paramData(local[k]);
    return Status::ok();
  }
  void releaseParams() {
    ex->releaseParams();
    std::vector<int32_t> local = ex->localParams();
    for (size_t k = 0; k < local.size() && k < refs.size(); ++k)
      refs[k].data = ex->paramData(local[k]);
  }

  Impl(const Program &p, Transport &t, const TrainerOptions &o)
      : prog(p), tr(t), o(o) {}
  Status initData();
  /// `ck`'s AdamW state made this rank's: the moments of each tensor the
  /// optimizer holds, by name, from this rank's file or another rank's of
  /// the same checkpoint (`dirOf(r)`: rank r's step folder). A name not
  /// saved under itself is looked up by its base name (DualPipe's copies:
  /// with the pair sharded only the updating side saved it, under its own
  /// copy's name; unsharded, both sides saved the same moments). Without a
  /// difference in the tensors held, nothing is read.
  Status reshardOptimizerState(RankCheckpoint &ck, uint32_t worldSize,
                               const std::function<std::string(int)> &dirOf);
  /// --doc-mask and --eos: consistent, and the data has documents.
  Status checkDocuments();
  Status initOptimizer();
};

Status Trainer::Impl::initData() {
  std::string spec = o.data;
  if (spec == "auto")
    spec = prog.model.vocab >= 256 ? "synthetic" : "pattern";
  if (spec == "pattern") {
    tokens = createPatternTokens(prog.training.seed, prog.model.vocab);
    std::string id = "pattern " + std::to_string(prog.training.seed) + " " +
                     std::to_string(prog.model.vocab);
    dataFp = fnv1a64(id.data(), id.size());
    return Status::ok();
  }
  if (spec == "synthetic") {
    ds = std::make_unique<SyntheticLanguage>();
  } else {
    // A PFTOK file, a Megatron-LM dataset, a .npy or a raw uint16 .bin;
    // tokens checked against the model's vocabulary.
    DataFileOptions fo;
    fo.seed = prog.training.seed;
    fo.vocab = prog.model.vocab;
    fo.seqLen = prog.model.seqLen;
    auto tf = openDataFile(spec, fo);
    if (!tf)
      return tf.status();
    ds = tf.take();
  }
  if (ds->vocabSize() > prog.model.vocab)
    return Status::error("data '" + ds->describe() + "' has vocabulary " +
                         std::to_string(ds->vocabSize()) + ", the model " +
                         std::to_string(prog.model.vocab));
  // EP rank e of replica d reads (d * E + e) * M + ... (the executor adds
  // e * M).
  tokens = std::make_unique<DataAdapter>(
      *ds, prog.training.microbatches * int64_t(prog.training.expertParallel),
      o.eos);
  dataFp = ds->fingerprint();
  return Status::ok();
}

Status Trainer::Impl::checkDocuments() {
  if (!o.executor.docMask)
    return o.eos < 0 ? Status::ok()
                     : Status::error("--eos marks documents for --doc-mask");
  if (o.eos >= prog.model.vocab)
    return Status::error("--eos " + std::to_string(o.eos) +
                         " is not below the model's vocabulary " +
                         std::to_string(prog.model.vocab));
  // The first microbatch's, so that data without documents fails here.
  std::vector<int32_t> d(size_t(prog.model.microbatchSize * prog.model.seqLen));
  if (Status s = tokens->documents(0, 0, 0, prog.model.microbatchSize,
                                   prog.model.seqLen, d.data());
      !s)
    return Status::error("--doc-mask: " + s.message());
  return Status::ok();
}

Status Trainer::Impl::initOptimizer() {
  if (o.optimizer == "sgd") {
    if (o.executor.optimizerSync == OptimizerSync::PostValidation)
      return Status::error(
          "--optimizer-sync post-validation needs --optimizer adamw");
    if (!o.lrSchedule.isConstant() || o.weightDecay != 0)
      return Status::error("a learning-rate schedule and weight decay need "
                           "--optimizer adamw");
    if (o.executor.zeroStage != 0)
      return Status::error("--zero shards optimizer state; SGD has none "
                           "(use --optimizer adamw)");
    opt = createSgd(float(o.lr));
    return Status::ok();
  }
  if (o.optimizer != "adamw")
    return Status::error("--optimizer must be adamw or sgd (got '" +
                         o.optimizer + "')");
  AdamWConfig c;
  c.lr = o.lr;
  c.maxGradNorm = o.maxGradNorm;
  c.weightDecay = o.weightDecay;
  if (Status s = checkConfig(c); !s)
    return s;
  if (Status s = checkLrSchedule(o.lrSchedule, o.lr); !s)
    return Status::error("learning-rate schedule: " + s.message());
  auto a = std::make_unique<AdamWAdapter>(c, o.decayAll);
  adam = a.get();
  opt = std::move(a);
  return Status::ok();
}

Trainer::Trainer(std::unique_ptr<Impl> i) : impl(std::move(i)) {}
Trainer::~Trainer() = default;

Expected<std::unique_ptr<Trainer>> Trainer::create(const Program &prog,
                                                   Backend &be, Transport &tr,
                                                   const TrainerOptions &o) {
  if (o.steps < 0)
    return Status::error("--steps must be >= 0");
  if (o.saveEvery < 0)
    return Status::error("--save-every must be >= 0");
  if (o.saveEvery != 0 && o.checkpointDir.empty())
    return Status::error("--save-every needs --checkpoint-dir");
  if (prog.schedule.numRanks() != prog.training.pipelineRanks)
    return Status::error("the schedule has " +
                         std::to_string(prog.schedule.numRanks()) +
                         " ranks but the program says " +
                         std::to_string(prog.training.pipelineRanks));
  auto impl = std::make_unique<Impl>(prog, tr, o);
  // "{rank}" in the checkpoint folder: this rank's world rank (a folder of
  // its own, as on a node-local disk).
  impl->o.checkpointDir = checkpointDirOf(o.checkpointDir, tr.worldRank());
  if (Status s = impl->initData(); !s)
    return s;
  if (Status s = impl->checkDocuments(); !s)
    return s;
  if (Status s = impl->initOptimizer(); !s)
    return s;
  // --init-from: a Hugging Face checkpoint, checked against the program
  // (headers only) before any rank allocates; read during create().
  std::unique_ptr<HfWeightSource> hf;
  ExecutorOptions eo = o.executor;
  if (!o.initFrom.empty()) {
    auto src = HfWeightSource::open(o.initFrom, prog);
    if (!src)
      return src.status();
    hf = src.take();
    eo.initialWeights = hf.get();
  }
  auto ex = Executor::create(prog, be, tr, *impl->tokens, *impl->opt, eo);
  if (!ex)
    return ex.status();
  impl->ex = ex.take();
  if (impl->adam)
    if (Status s = impl->adam->registerParams(*impl->ex, prog, be); !s)
      return s;
  // Checkpoints: this rank's parameters by name (an expert-parallel one as
  // its slice), the optimizer state, the step, the data position; the
  // fingerprint guards the layout (the program) and the trajectory (the
  // learning rate and its schedule, the weight decay), so that a resumed
  // run is the run that was interrupted.
  {
    // Only what shapes the trajectory: a constant schedule has no decay
    // horizon (--steps may differ between an interrupted run and its
    // resume).
    const LrSchedule &ls = o.lrSchedule;
    const bool decays = ls.kind != LrSchedule::Kind::Constant;
    // The ZeRO level is not part of it: a checkpoint written with any
    // level resumes with any other (Trainer::resume reshards the AdamW
    // state by name).
    auto fingerprint = [&](const char *zero) {
      char recipe[256];
      std::snprintf(
          recipe, sizeof recipe,
          "%016llx lr %.17g %s warmup %lld decay %lld min %.17g "
          "wd %.17g%s%s%s",
          (unsigned long long)programChecksum(serializeProgram(prog)), o.lr,
          toString(ls.kind), (long long)ls.warmupSteps,
          decays ? (long long)ls.decaySteps : 0LL, decays ? ls.minLr : 0.0,
          o.weightDecay, o.decayAll ? " all" : "", zero,
          tr.rankLayoutDataFastest() ? " dp-fastest" : "");
      return fnv1a64(recipe, std::strlen(recipe));
    };
    impl->progFp = fingerprint("");
    impl->legacyZeroFp = fingerprint(" zero1");
  }
  for (int32_t i : impl->ex->localParams())
    impl->refs.push_back({prog.params[size_t(i)].name, impl->ex->paramShape(i),
                          impl->ex->paramData(i)});
  // Model state (the MoE load-balancing biases): saved and restored by name
  // with the parameters.
  for (const ParamRef &r : impl->ex->stateRefs())
    impl->refs.push_back(r);
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Status Trainer::Impl::reshardOptimizerState(
    RankCheckpoint &ck, uint32_t worldSize,
    const std::function<std::string(int)> &dirOf) {
  if (!ck.hasOptimizer)
    return Status::ok(); // resume() reports it
  auto held = adam->get().exportState();
  if (!held)
    return held.status();
  if (held->names == ck.optimizer.names)
    return Status::ok();
  // name -> (m, v), and base name -> name, over the files in rank order
  // from this rank's.
  using Moments = std::pair<const std::vector<float> *,
                            const std::vector<float> *>;
  std::map<std::string, Moments> byName;
  std::map<std::string, std::string> byBase;
  std::vector<RankCheckpoint> others;
  auto index = [&](const RankCheckpoint &c) {
    for (size_t i = 0; i < c.optimizer.names.size(); ++i) {
      const std::string &n = c.optimizer.names[i];
      byName.emplace(n, Moments{&c.optimizer.m[i], &c.optimizer.v[i]});
      byBase.emplace(baseParamName(n), n);
    }
  };
  auto find = [&](const std::string &name) -> const Moments * {
    auto it = byName.find(name);
    if (it == byName.end()) {
      auto b = byBase.find(baseParamName(name));
      if (b != byBase.end())
        it = byName.find(b->second);
    }
    return it == byName.end() ? nullptr : &it->second;
  };
  index(ck);
  bool all = true;
  for (const std::string &n : held->names)
    all = all && find(n);
  if (!all) {
    others.reserve(worldSize);
    for (uint32_t r = 0; r < worldSize; ++r) {
      if (r == ck.rank)
        continue;
      auto c = loadRankCheckpoint(dirOf(int(r)), r);
      if (!c)
        return Status::error(
            "the AdamW state was saved with another ZeRO level; re-sharding "
            "it needs every rank's file: " +
            c.message());
      if (!c->hasOptimizer || c->optimizer.step != ck.optimizer.step)
        return Status::error("rank " + std::to_string(r) +
                             "'s file has another AdamW step count");
      others.push_back(c.take());
    }
    for (const RankCheckpoint &c : others)
      index(c);
  }
  AdamWState<float> st;
  st.step = ck.optimizer.step;
  st.lr = ck.optimizer.lr;
  for (const std::string &n : held->names) {
    const Moments *mv = find(n);
    if (!mv)
      return Status::error("no rank saved the AdamW state of '" + n + "'");
    st.names.push_back(n);
    st.m.push_back(*mv->first);
    st.v.push_back(*mv->second);
  }
  ck.optimizer = std::move(st);
  return Status::ok();
}

Expected<int64_t> Trainer::resume() {
  Impl &m = *impl;
  const std::string &root = m.o.checkpointDir;
  if (root.empty())
    return Status::error("--resume needs --checkpoint-dir");
  // The latest step every rank holds complete (each may see its own
  // folder): the minimum of the ranks' latest. (Exact in float below 2^24.)
  int64_t mine = latestCheckpoint(root);
  float neg = -float(mine);
  if (Status s = m.tr.allreduce(&neg, 1, Group::World, ReduceOp::Max); !s)
    return s;
  int64_t k = int64_t(-neg);
  if (mine < 0)
    return Status::error("--resume: no complete checkpoint "
                         "(step-N/manifest.txt) in '" +
                         root + "'");
  if (k < 0)
    return Status::error("--resume: another rank has no complete checkpoint "
                         "(each rank needs step-N/manifest.txt in its "
                         "--checkpoint-dir)");
  std::string dir = checkpointSubdir(root, k);
  uint32_t wrank = uint32_t(m.tr.worldRank()),
           wsize = uint32_t(m.tr.worldSize());
  auto ck = loadRankCheckpoint(dir, wrank);
  if (!ck)
    return Status::error("--resume: " + ck.message());
  auto bad = [&](const std::string &msg) {
    return Status::error("--resume: checkpoint '" + dir + "' " + msg);
  };
  if (ck->numRanks != wsize)
    return bad("was written by " + std::to_string(ck->numRanks) +
               " ranks; this run has " + std::to_string(wsize));
  if (ck->programFingerprint != m.progFp &&
      ck->programFingerprint != m.legacyZeroFp)
    return bad("was written for a different program or training recipe "
               "(fingerprint " +
               std::to_string(ck->programFingerprint) + ", this run " +
               std::to_string(m.progFp) +
               "): same model, schedule, ranks and microbatches, and the "
               "same --lr, --lr-schedule, --warmup-steps, --decay-steps "
               "(default: --steps), --min-lr, --weight-decay, "
               "--decay-all and --rank-layout needed");
  if (ck->data.fingerprint != m.dataFp)
    return bad("was written with different training data");
  if (ck->data.nextStep != ck->step)
    return bad("has data position " + std::to_string(ck->data.nextStep) +
               " but step " + std::to_string(ck->step));
  if (ck->hasOptimizer != (m.adam != nullptr))
    return bad(std::string(ck->hasOptimizer ? "has" : "has no") +
               " AdamW state but this run uses --optimizer " + m.o.optimizer);
  // The files by world rank, as each rank's folder names them.
  auto fileOf = [&](int r) {
    return checkpointSubdir(checkpointDirOf(root, r), k) + "/" +
           rankCheckpointFileName(uint32_t(r));
  };
  // Written with another ZeRO level (or another side of DualPipe's pair
  // updating a tensor): this rank's AdamW state from the files that hold it.
  if (m.adam)
    if (Status s = m.reshardOptimizerState(*ck, wsize, [&](int r) {
          return checkpointSubdir(checkpointDirOf(root, r), k);
        });
        !s)
      return bad(s.message());
  // ZeRO-3: buffers for every tensor the file holds.
  if (Status s = m.gatherParams(); !s)
    return bad(s.message());
  if (Status s =
          restoreCheckpoint(*ck, m.refs, m.adam ? &m.adam->get() : nullptr);
      !s)
    return bad(s.message());
  // What no single file can show (collective): the biases can still move,
  // and every replicated tensor (the biases everywhere, a parameter on its
  // replicas) is the same on every rank that holds it.
  if (Status s = m.ex->checkRestoredState(fileOf); !s)
    return Status::error("--resume: " + s.message());
  m.releaseParams();
  // The restored values to the device optimizer's copy (and its moments,
  // which restoreCheckpoint copied up): any device error fails the resume.
  if (Status s = m.ex->pushValues(); !s)
    return bad(s.message());
  m.ex->setStepsDone(int64_t(ck->step));
  // What an interrupted save left behind (no rank saves while resuming).
  if (wrank == 0)
    if (Status s = removeStaleCheckpoints(root); !s)
      return Status::error("--resume: " + s.message());
  return int64_t(ck->step);
}

namespace {
/// A string as floats (one byte each, exact) and back, for the transport's
/// all-to-all.
std::vector<float> bytesAsFloats(const std::string &s) {
  return std::vector<float>(s.begin(), s.end());
}
std::string floatsAsBytes(const std::vector<float> &v) {
  std::string s;
  for (float f : v)
    s.push_back(char(int(f)));
  return s;
}
} // namespace

Status Trainer::saveCheckpoint(int64_t k) {
  // Every rank writes its own file and sends its manifest line to every
  // rank; each assembles the same manifest. Rank 0 writes it first; then a
  // rank that does not see it (its folder is on another file system: a
  // node-local disk, or --checkpoint-dir with {rank}) writes its own copy.
  // No rank reads another's file (docs/runtime.md, "Checkpoints").
  Impl &m = *impl;
  uint32_t wrank = uint32_t(m.tr.worldRank()),
           wsize = uint32_t(m.tr.worldSize());
  std::string dir = checkpointSubdir(m.o.checkpointDir, k);
  DataPosition pos;
  pos.nextStep = uint64_t(k);
  pos.fingerprint = m.dataFp;
  // The optimizer on a device: its values to the host, then its moments
  // (exportState); a device error in either must not reach the file.
  if (Status s = m.ex->pullValues(); !s)
    return s;
  // ZeRO-3: every rank's file holds all of its tensors (any ZeRO level
  // resumes from it).
  if (Status s = m.gatherParams(); !s)
    return s;
  auto c =
      captureCheckpoint(wrank, wsize, uint64_t(k), m.refs,
                        m.adam ? &m.adam->get() : nullptr, pos, {}, m.progFp);
  m.releaseParams();
  if (!c)
    return c.status();
  if (Status s = m.ex->backendError(); !s)
    return s;
  std::string record;
  if (Status s = writeRankCheckpoint(dir, *c, &record); !s)
    return s;
  std::vector<std::vector<float>> send(wsize, bytesAsFloats(record)), recv;
  if (Status s = m.tr.allToAll(send, recv, Group::World); !s)
    return s;
  std::vector<std::string> records;
  for (const std::vector<float> &r : recv)
    records.push_back(floatsAsBytes(r));
  auto man = assembleManifest(records, wsize);
  if (!man)
    return man.status();
  // What pipeforge-export needs to rebuild whole tensors from the rank
  // files (the program: the parameters' layout and the model's config; the
  // rank layout), written before the manifest that completes the folder.
  if (wrank == 0)
    if (Status s = writeCheckpointLayout(dir, m.prog,
                                         m.tr.rankLayoutDataFastest());
        !s)
      return s;
  if (wrank == 0)
    if (Status s = writeManifest(dir, *man); !s)
      return s;
  if (Status s = m.tr.barrier(Group::World); !s)
    return s;
  const bool ownCopy = wrank != 0 && !readManifest(dir);
  if (ownCopy)
    if (Status s =
            writeManifest(dir, *man, "." + std::to_string(wrank) + ".tmp");
        !s)
      return s;
  // Every manifest is in place before anyone cleans up (a cleanup removes
  // *.tmp files, such as another rank's manifest being written).
  if (Status s = m.tr.barrier(Group::World); !s)
    return s;
  // Every rank waits in the barrier below: nobody is saving. What an
  // interrupted save left behind, in each folder that a rank finalizes:
  // rank 0's, and a rank's own when it is not rank 0's.
  if (wrank == 0 || ownCopy)
    if (Status s = removeStaleCheckpoints(m.o.checkpointDir); !s)
      return s;
  // Nobody moves on (or exits) before the manifest is in place.
  return m.tr.barrier(Group::World);
}

Status Trainer::run(const std::function<void(int64_t)> &before,
                    const std::function<void(const StepStats &)> &after) {
  Impl &m = *impl;
  for (int64_t k = m.ex->stepsDone() + 1; k <= m.o.steps; ++k) {
    if (before)
      before(k);
    // A pure function of the step: a resumed run continues bitwise.
    if (m.adam)
      m.adam->get().setLearningRate(m.o.lrSchedule.at(m.o.lr, k));
    auto st = m.ex->step();
    if (!st)
      return Status::error("step " + std::to_string(k) + ": " + st.message());
    if (after)
      after(*st);
    if (m.o.saveEvery > 0 && k % m.o.saveEvery == 0)
      if (Status s = saveCheckpoint(k); !s)
        return Status::error("checkpoint after step " + std::to_string(k) +
                             ": " + s.message());
  }
  return Status::ok();
}

Status Trainer::finish() {
  Impl &m = *impl;
  if (!m.o.tracePath.empty())
    if (Status s = m.ex->writeTrace(m.o.tracePath); !s)
      return s;
  if (m.o.dumpWeightsPath.empty() && m.o.saveHfDir.empty())
    return Status::ok();
  // Test hook: one rank's copy of its first parameter drifts, for the
  // replica check of gatherWeights.
  // The optimizer on a device: its values to the host.
  if (Status s = m.ex->pullValues(); !s)
    return s;
  if (Status s = m.gatherParams(); !s) // ZeRO-3
    return s;
  if (const char *pr = std::getenv("PIPEFORGE_TEST_PERTURB_RANK"))
    if (std::atoi(pr) == m.tr.worldRank() && !m.ex->localParams().empty())
      m.ex->paramData(m.ex->localParams()[0])[0] += 1.0f;
  auto w = m.ex->gatherWeights();
  m.releaseParams();
  if (!w)
    return w.status();
  if (m.tr.worldRank() != 0)
    return Status::ok();
  if (!m.o.dumpWeightsPath.empty())
    if (Status s = writeWeights(m.o.dumpWeightsPath, *w); !s)
      return s;
  if (!m.o.saveHfDir.empty()) {
    if (Status s = writeHfModel(m.o.saveHfDir, m.prog, *w); !s)
      return Status::error("--save-hf '" + m.o.saveHfDir + "': " + s.message());
    // The tokenizer of the model the run started from goes with it.
    if (!m.o.initFrom.empty())
      if (Status s = copyHfCompanionFiles(m.o.initFrom, m.o.saveHfDir); !s)
        return Status::error("--save-hf: " + s.message());
  }
  return Status::ok();
}

int64_t Trainer::stepsDone() const { return impl->ex->stepsDone(); }
Executor &Trainer::executor() { return *impl->ex; }

} // namespace pipeforge::rt
