//===- DeviceMemory.cpp - --device-memory: the ZeRO level and the limit ---===//
//
// pipeforge-compile --device-memory B: a per-rank budget for everything the
// schedule decides, the model state (parameters, gradients, AdamW state at
// the ZeRO level, sched::modelStateAtPeak, the formula pipeforge-run's
// --memory-report measures) plus the activations. The stages are cut on a
// copy of the module as the pipeline will cut them, which gives each
// rank's parameters and each stage's stash. Then, for the level given
// (--zero) or for 0, 1, 2, 3 in order, the budget less the fullest rank's
// state must hold the activations the schedule needs at least (auto: one
// microbatch on its fullest rank, sched::minFeasibleMemLimit; a handcrafted
// schedule: its simulated peak; with --mem-limit: that limit); the first
// level that fits is taken, and what it leaves becomes the activation limit
// the auto scheduler runs under and pp-verify-schedule checks. Activations
// are costed at 4 bytes per element, as pipeforge-run stores them.
// docs/compile.md, "Device memory".
//
//===----------------------------------------------------------------------===//

#include "PlanDetail.h"

#include "pipeforge/Dialect/NN/IR/NNOps.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/StageCostModel.h"
#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/MemoryLimit.h"
#include "pipeforge/Schedule/ModelState.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"

#include <algorithm>
#include <cstdio>
#include <set>

using namespace mlir;

namespace pipeforge::pipelines::detail {

namespace {
/// One way of cutting the model: its placement, each rank's parameters
/// (elements, every copy it holds) and each stage's stash, and the least
/// activation memory per rank its schedule needs (M_B units).
struct Layout {
  sched::Placement placement;
  pp::StageCosts costs;
  std::vector<double> rankParams;
  double minActivationMB = 0;
};

sched::Placement placementOf(const sched::StageLayout &l, int chunks) {
  if (l.placement == "interleaved")
    return sched::Placement::interleaved(l.ranks, chunks);
  if (l.placement == "v")
    return sched::Placement::vShape(l.ranks);
  if (l.placement == "dual")
    return sched::Placement::dual(l.ranks);
  return sched::Placement::linear(l.ranks);
}

/// The expert weights of the nn.moe layers with more than one expert in
/// `fn`: --ep splits them over its group (as the lowering marks them).
std::set<unsigned> expertArgs(func::FuncOp fn) {
  std::set<unsigned> out;
  fn.walk([&](nn::MoEOp moe) {
    auto router = dyn_cast<RankedTensorType>(moe.getRouter().getType());
    if (!router || router.getRank() < 1 || router.getDimSize(0) == 1)
      return;
    for (Value w : {moe.getW1(), moe.getW2(), moe.getW3()})
      if (auto arg = dyn_cast_or_null<BlockArgument>(w);
          arg && arg.getOwner()->getParentOp() == fn.getOperation())
        out.insert(arg.getArgNumber());
  });
  return out;
}

/// Each rank's parameters in `p` (elements of its ep share).
std::vector<double> rankParams(pp::PipelineOp p, const sched::Placement &pl,
                               int ep) {
  std::vector<double> out(size_t(pl.numRanks), 0.0);
  for (auto st : p.getBody().getOps<pp::StageOp>()) {
    auto fwd = dyn_cast_or_null<func::FuncOp>(
        SymbolTable::lookupSymbolIn(st, "forward"));
    int copy = int(st.getCopy()), stage = int(st.getIndex());
    if (!fwd || copy >= pl.numCopies || stage >= pl.numStages)
      continue;
    std::set<unsigned> experts = expertArgs(fwd);
    double n = 0;
    for (unsigned i = 0; i < fwd.getNumArguments(); ++i) {
      auto ty = dyn_cast<ShapedType>(fwd.getArgument(i).getType());
      if (pp::getArgRole(fwd, i) != pp::Role::param || !ty ||
          !ty.hasStaticShape())
        continue;
      n += double(ty.getNumElements()) / (experts.count(i) ? ep : 1);
    }
    out[size_t(pl.rank(copy, stage))] += n;
  }
  return out;
}

/// The least activation memory per rank (M_B) the schedule runs under:
/// auto, one microbatch on its fullest rank; a handcrafted schedule, its
/// simulated peak on the stage costs.
Expected<double> minActivationMB(const CompileOptions &o, const Layout &l) {
  const bool v = l.placement.numStages == 2 * l.placement.numRanks &&
                 l.placement.numCopies == 1;
  // Memory only: pp-schedule's uniform times, the stages' stash.
  sched::CostModel cost = pp::stageCostModel(l.costs, 0, 1, 1, 1, 0,
                                             v ? 0.5 : 1.0, v ? 0.25 : 0.5);
  if (o.schedule == "auto") {
    sched::AutoOptions a;
    a.ranks = l.placement.numRanks;
    a.microbatches = o.microbatches;
    a.vShape = v;
    a.cost = cost;
    return sched::minFeasibleMemLimit(a);
  }
  Expected<sched::Schedule> s =
      o.schedule == "none"
          ? sched::generateNone(l.placement.numStages, o.microbatches)
          : sched::generate(*sched::parseScheduleKind(o.schedule),
                            sched::GenOptions{o.ranks, o.microbatches,
                                              o.chunks});
  if (!s)
    return s.status();
  auto sim = sched::simulate(*s, cost);
  if (!sim)
    return sim.status();
  double peak = 0;
  for (const sched::RankStats &r : sim->ranks)
    peak = std::max(peak, r.peakMemory);
  return peak;
}

/// The model cut as the pipeline will cut it for `placement` (the
/// schedule's, or auto's linear / v), on a copy of `module`. std::nullopt
/// when it cannot be cut (the pipeline reports why).
Expected<std::optional<Layout>> measure(ModuleOp module,
                                        const CompileOptions &o,
                                        const std::string &placement) {
  auto sl = sched::stageLayoutFor(o.schedule, o.ranks, o.chunks,
                                  placement == "v");
  if (!sl)
    return sl.status();
  if (sl->stages > countLayers(module))
    return std::optional<Layout>();
  OwningOpRef<ModuleOp> copy = module.clone();
  PassManager pm(module.getContext());
  addStagePasses(pm, o, sl->stages, sl->placement);
  ScopedDiagnosticHandler quiet(module.getContext(),
                                [](Diagnostic &) { return success(); });
  if (failed(pm.run(*copy)))
    return std::optional<Layout>();
  for (auto p : copy->getOps<pp::PipelineOp>()) {
    auto c = pp::collectStageCosts(p, activationBytesPerElement(o));
    if (failed(c) || !*c || (*c)->bytesPerMB() <= 0)
      continue;
    Layout l;
    l.placement = placementOf(*sl, o.chunks);
    l.costs = **c;
    l.rankParams = rankParams(p, l.placement, o.ep);
    auto need = minActivationMB(o, l);
    if (!need)
      return need.status();
    l.minActivationMB = *need;
    return std::optional<Layout>(std::move(l));
  }
  return std::optional<Layout>();
}

/// The model state of the fullest rank over `layouts` at ZeRO `zero`.
struct Fullest {
  int rank = 0;
  sched::ModelStateBytes bytes;
};

Fullest fullestRank(const std::vector<Layout> &layouts, int zero, int dp) {
  Fullest f;
  for (const Layout &l : layouts)
    for (size_t r = 0; r < l.rankParams.size(); ++r) {
      const double n = l.rankParams[r];
      // pipeforge-run gathers a stage from its first compute to its last:
      // at the peak every stage of the rank is gathered.
      sched::ModelStateBytes b = sched::modelStateAtPeak(
          n, zero, sched::zeroShards(dp, l.placement.numCopies), n);
      if (b.total() > f.bytes.total()) {
        f.rank = int(r);
        f.bytes = b;
      }
    }
  return f;
}

/// "3.36 MiB", "602.00 KiB", "512 B".
std::string bytes(double b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

/// The note for the chosen level: the state of the fullest rank and the
/// activations' share.
std::string describeFit(const CompileOptions &o, int zero, bool chosen,
                        const Fullest &f, const std::string &activations) {
  return "--device-memory " + o.deviceMemory + ": ZeRO-" +
         std::to_string(zero) + (chosen ? " (the lowest level that fits)" : "") +
         "; model state " + bytes(f.bytes.total()) +
         " on the fullest rank (rank " + std::to_string(f.rank) +
         ": parameters " + bytes(f.bytes.params) + ", gradients " +
         bytes(f.bytes.grads) + ", AdamW state " + bytes(f.bytes.optimizer) +
         "), activations " + activations + "; run it with pipeforge-run --zero " +
         std::to_string(zero);
}
} // namespace

Status fitDeviceMemory(ModuleOp module, CompileOptions &o, std::string &note) {
  if (o.deviceMemory.empty())
    return Status::ok();
  const double budget = sched::parseMemoryLimit(o.deviceMemory)->value;
  // auto --placement any: the search's two placements, each on its own.
  std::vector<std::string> names = {o.placement == "v" ? "v" : "linear"};
  if (o.schedule == "auto" && o.placement == "any")
    names.push_back("v");
  std::vector<Layout> layouts;
  std::vector<std::string> placements;
  for (const std::string &pl : names) {
    auto l = measure(module, o, pl);
    if (!l)
      return Status::error("--device-memory: " + l.message());
    if (*l) {
      layouts.push_back(std::move(**l));
      placements.push_back(pl);
    }
  }
  if (layouts.empty())
    return Status::ok(); // the model cannot be cut: the pipeline says why
  // The activations each layout needs at least, in bytes (M_B's bytes
  // differ a little between the cuts), or --mem-limit's.
  std::optional<sched::MemoryLimit> user;
  if (!o.memLimit.empty())
    user = *sched::parseMemoryLimit(o.memLimit);
  auto needOf = [&](const Layout &l) {
    const double perMB = l.costs.bytesPerMB();
    if (!user)
      return l.minActivationMB * perMB;
    return user->isBytes()
               ? user->value
               : *sched::resolveMemoryLimit(*user, o.ranks, perMB) * perMB;
  };
  const bool choose = o.zero < 0;
  std::vector<int> levels = choose ? std::vector<int>{0, 1, 2, 3}
                                   : std::vector<int>{o.zero};
  std::string states;
  double need = needOf(layouts.front());
  for (int zero : levels) {
    // The layouts that fit at this level; the fullest rank of them.
    Fullest f;
    double room = budget, fitNeed = 0;
    std::vector<size_t> fit;
    double leastState = -1;
    std::string activationsOnly;
    for (size_t i = 0; i < layouts.size(); ++i) {
      Fullest li = fullestRank({layouts[i]}, zero, o.dp);
      if (leastState < 0 || li.bytes.total() < leastState) {
        leastState = li.bytes.total();
        need = needOf(layouts[i]);
      }
      if (budget - li.bytes.total() < needOf(layouts[i]))
        continue;
      fit.push_back(i);
      if (li.bytes.total() > f.bytes.total())
        f = li;
      room = std::min(room, budget - li.bytes.total());
      fitNeed = std::max(fitNeed, needOf(layouts[i]));
    }
    if (fit.empty()) {
      states += (states.empty() ? "" : ", ") + std::string("ZeRO-") +
                std::to_string(zero) + " " + bytes(leastState);
      continue;
    }
    if (fit.size() < layouts.size()) {
      o.placement = placements[fit.front()]; // the search on that one only
      activationsOnly = " on the " + o.placement +
                        " placement (the other leaves too little)";
    }
    const double perMB = layouts[fit.front()].costs.bytesPerMB();
    char mb[32];
    std::snprintf(mb, sizeof mb, "%.2f", room / perMB);
    std::string activations =
        user ? "under --mem-limit " + o.memLimit + " (" + bytes(fitNeed) + ")"
             : "up to " + bytes(room) + " (" + mb + " M_B of " +
                   bytes(perMB) + ")" + activationsOnly;
    if (!user) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%.0fB", std::floor(room));
      o.memLimit = buf; // what the state leaves: auto's limit, verified
    }
    o.zero = zero;
    note = describeFit(o, zero, choose, f, activations);
    return Status::ok();
  }
  std::string why = user ? "--mem-limit " + o.memLimit
                    : o.schedule == "auto"
                        ? "one microbatch on the fullest rank"
                        : o.schedule + "'s peak";
  return Status::error(
      "--device-memory " + o.deviceMemory + " fits no " +
      (choose ? "ZeRO level" : "schedule at --zero " + std::to_string(levels[0])) +
      ": the fullest rank's model state is " + states +
      ", and the activations need at least " + bytes(need) +
      " beside it (" + why + ")");
}

} // namespace pipeforge::pipelines::detail
