//===- Compare.cpp - Schedules side by side at one setup ------------------===//
//
// `pipeforge-plan --compare`: one setup under DualPipe, DualPipeV, 1F1B and
// ZB-V (docs/planner.md, "Comparing schedules").
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/Compare.h"
#include "TextFormat.h"

#include <algorithm>
#include <cmath>

using namespace pipeforge;
using namespace pipeforge::plan;
using sched::ScheduleKind;

using text::fmt;
using text::gib;
using text::msText;

namespace {
/// 1.61B, 870M: a parameter count.
std::string paramsText(double p) {
  return p >= 1e9 ? fmt("%.3gB", p / 1e9) : fmt("%.3gM", p / 1e6);
}


} // namespace

std::vector<ScheduleKind> plan::comparedSchedules() {
  return {ScheduleKind::DualPipe, ScheduleKind::DualPipeV,
          ScheduleKind::OneFOneB, ScheduleKind::ZBV};
}

double plan::gpuHoursPerMillionTokens(const Candidate &c,
                                      const Cluster &cluster,
                                      const ModelCosts &model,
                                      const PlanOptions &opts) {
  const double tokens = double(opts.globalBatch) * double(model.seqLen);
  if (tokens <= 0)
    return 0;
  return double(cluster.gpus) * c.stepTime / 3600.0 / (tokens / 1e6);
}

Comparison plan::compareSchedules(const ModelCosts &model,
                                  const Cluster &cluster,
                                  const PlanOptions &opts,
                                  const Candidate &base, const std::string &why,
                                  std::vector<ScheduleKind> kinds) {
  Comparison cmp;
  cmp.base = base;
  cmp.why = why;
  cmp.gpus = cluster.gpus;
  cmp.tokensPerStep = opts.globalBatch * model.seqLen;
  for (const LayerCost &l : model.layers) {
    cmp.modelParams += l.params;
    cmp.expertParams += std::min(l.expertParams, l.params);
  }
  cmp.modelParams -= model.tiedParams;
  if (kinds.empty())
    kinds = comparedSchedules();
  for (ScheduleKind k : kinds) {
    ScheduleRow row;
    row.kind = k;
    SetupOptions s;
    s.tp = base.tp;
    s.ep = base.ep;
    s.zero = base.zero;
    s.recompute = base.recompute;
    if (k == base.kind)
      s.recomputeStages = base.recomputeStages;
    PlanOptions o = opts;
    if (base.kind == ScheduleKind::Interleaved)
      o.chunksPerRank = base.chunks;
    auto c = evaluate(model, cluster, o, k, base.pp, base.microbatchSize,
                      base.layout, s);
    if (c) {
      row.ok = true;
      row.setup = std::move(*c);
    } else {
      row.error = c.message();
    }
    cmp.rows.push_back(std::move(row));
  }
  return cmp;
}

std::string plan::formatCompare(const Comparison &cmp, const ModelCosts &model,
                                const Cluster &cluster,
                                const PlanOptions &opts) {
  const Candidate &b = cmp.base;
  std::string out = fmt(
      "compare: schedules at pp=%d dp=%d%s%s%s%s, microbatch %d, %s "
      "(%s); %lld tokens per step\n",
      b.pp, b.dp, b.tp > 1 ? fmt(" tp=%d", b.tp).c_str() : "",
      b.ep > 1 ? fmt(" ep=%d", b.ep).c_str() : "",
      b.recompute != Recompute::None
          ? fmt(", recompute %s", recomputeName(b.recompute)).c_str()
          : "",
      b.zero ? (", ZeRO-" + std::to_string(b.zero)).c_str() : "",
      b.microbatchSize, layoutName(b.layout),
      cmp.why.c_str(),
      (long long)cmp.tokensPerStep);
  out += fmt("  %-10s %10s %8s %10s %10s %8s %5s %11s %12s\n", "schedule",
             "step_ms", "bubble", "bubble_ms", "a2a_ms", "mem_GiB", "fits",
             "GPU-h/Mtok", "1F1B_loses");
  const ScheduleRow *oneF = nullptr;
  for (const ScheduleRow &r : cmp.rows)
    if (r.ok && r.kind == ScheduleKind::OneFOneB)
      oneF = &r;
  const double oneFHours =
      oneF ? gpuHoursPerMillionTokens(oneF->setup, cluster, model, opts) : 0;
  for (const ScheduleRow &r : cmp.rows) {
    const char *name = sched::scheduleKindName(r.kind);
    if (!r.ok) {
      out += fmt("  %-10s cannot be formed: %s\n", name, r.error.c_str());
      continue;
    }
    const Candidate &c = r.setup;
    const double hours = gpuHoursPerMillionTokens(c, cluster, model, opts);
    // GPU-hours per trillion tokens that 1F1B spends beyond this schedule.
    std::string loses =
        oneF ? fmt("%.0f", (oneFHours - hours) * 1e6) : std::string("-");
    out += fmt("  %-10s %10s %7.2f%% %10s %10s %8.2f %5s %11.4f %12s\n", name,
               msText(c.stepTime * 1e3).c_str(), c.bubbleRate * 100,
               msText(c.bubbleTime * 1e3).c_str(),
               msText(c.epCommTime * 1e3).c_str(), gib(c.memoryBytes),
               c.fits ? "yes" : "no", hours, loses.c_str());
  }
  if (oneF)
    out += "  (1F1B_loses: the GPU-hours per trillion tokens 1F1B spends "
           "beyond each schedule; a2a_ms: expert all-to-all time left "
           "exposed)\n";
  // DualPipe's second parameter copy.
  for (const ScheduleRow &r : cmp.rows) {
    if (!r.ok || r.kind != ScheduleKind::DualPipe ||
        r.setup.secondCopyBytes <= 0)
      continue;
    const Candidate &c = r.setup;
    const double share = c.secondCopyParams / cmp.modelParams;
    const std::string zeroText =
        c.zero == 3 ? "their gradients and optimizer state, all three ZeRO-3 "
                      "sharded"
        : c.zero    ? "their gradients and ZeRO-" + std::to_string(c.zero) +
                       " optimizer state"
                    : std::string("their gradients and optimizer state");
    out += fmt("  dualpipe's second parameter copy: %.2f GiB per GPU (%s "
               "parameters of one stage, with %s), %.1f%% of the %.3g usable "
               "GiB; %.3g%% of the model's %s parameters\n",
               gib(c.secondCopyBytes), paramsText(c.secondCopyParams).c_str(),
               zeroText.c_str(), 100 * c.secondCopyBytes /
               cluster.usableBytes(),
               gib(cluster.usableBytes()), 100 * share,
               paramsText(cmp.modelParams).c_str());
    if (cmp.expertParams > 0 && c.ep > 1)
      out += fmt("    a stage's copy is 1/(p t) of the dense weights and "
                 "1/(p t e) = 1/%d of the routed experts (%.3g%% of the "
                 "model), so the copy is %.3g%% of the model against 1/(p t) "
                 "= %.3g%% for a dense model\n",
                 c.pp * c.tp * c.ep, 100 * cmp.expertParams / cmp.modelParams,
                 100 * share, 100.0 / (c.pp * c.tp));
    if (c.zero == 3) {
      // The copy's state over the pair and the replicas (MemoryModel).
      const int dE = c.dp / c.ep;
      const int nDense = opts.zeroDenseOverAll || c.ep == 1 ? c.dp : dE;
      out += fmt("    ZeRO-3 shards the copy over the pair and the "
                 "data-parallel group: the dense parameters over 2 x %d "
                 "ranks",
                 nDense);
      if (c.ep > 1)
        out += fmt(", the expert shards over 2 x %d (their replicas, d / e)",
                   dE);
      out += fmt(": %.3g bytes per parameter of the stage, against %.3g "
                 "unsharded\n",
                 c.secondCopyBytes / c.secondCopyParams,
                 opts.stateBytesPerParam);
    }
  }
  return out;
}

std::string plan::formatPlanOutput(const PlanResult &result,
                                   const ModelCosts &model,
                                   const Cluster &cluster, const PlanOptions &opts,
                             const Explanation *explained,
                             const std::string &fitLine,
                             const std::string &format, bool compare) {
  if (format == "json")
    return formatJson(result, model, cluster, opts, explained);
  std::string out = fitLine + formatTable(result, model, cluster, opts);
  if (explained)
    out += "\n" + formatExplain(*explained, result, cluster);
  if (compare) {
    auto cmp = compareSchedules(
        model, cluster, opts,
        explained ? explained->setup : result.ranked.front(),
        explained ? "the explained setup" : "the recommendation");
    out += "\n" + formatCompare(cmp, model, cluster, opts);
  }
  return out;
}
