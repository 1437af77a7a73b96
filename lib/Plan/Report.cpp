//===- Report.cpp - The planner's table and JSON --------------------------===//

#include "pipeforge/Plan/Planner.h"
#include "TextFormat.h"

#include <nlohmann/json.hpp>

#include <cmath>

using namespace pipeforge;
using namespace pipeforge::plan;
using json = nlohmann::ordered_json;

using text::fmt;
using text::gib;
using text::msText;

namespace {
/// The model's size: tied copies counted once.
double totalParams(const ModelCosts &m) {
  double p = 0;
  for (const LayerCost &l : m.layers)
    p += l.params;
  return p - m.tiedParams;
}

std::string splitText(const std::vector<int> &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "," : "") + std::to_string(s[i]);
  return out;
}

/// "2,1x126,2": runs of equal stage sizes folded.
std::string runsText(const std::vector<int> &s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j < s.size() && s[j] == s[i])
      ++j;
    out += (i ? "," : "") + std::to_string(s[i]);
    if (j - i > 1)
      out += "x" + std::to_string(j - i);
    i = j;
  }
  return out;
}


/// The "time:" and "split:" lines of a setup (the recommendation and
/// --explain); `timeSuffix` ends the first.
std::string timeLines(const Candidate &c, const std::string &timeSuffix) {
  std::string out =
      "  time: pipeline " + msText(c.pipelineTime * 1e3) +
      " ms + data-parallel all-reduce " + msText(c.dpTime * 1e3) + " ms" +
      (c.dualReduceTime > 0
           ? " + copy grad sum " + msText(c.dualReduceTime * 1e3) + " ms"
           : "") +
      "; T_comm " + msText(c.commTime * 1e3) + " ms per cross-stage edge (" +
      (c.pp == 1 ? "no pipeline"
                 : (c.ppInterNode ? "inter-node" : "intra-node")) +
      ")" + timeSuffix + "\n";
  if (c.gradOverlap != GradOverlap::Off && c.dpReduceTime > 0)
    out += "  grad all-reduce: " + msText(c.dpReduceTime * 1e3) +
           " ms on the busiest rank, " +
           (c.gradOverlap == GradOverlap::Layer ? "per layer" : "per stage") +
           " as the last microbatches' W/BW finish: " +
           msText((c.dpReduceTime - c.dpTime) * 1e3) +
           " ms hidden, exposed tail " + msText(c.dpTime * 1e3) +
           " ms (rank " + std::to_string(c.dpTailRank) + ": " +
           msText(c.dpOverlapWindow * 1e3) +
           " ms of compute after its first gradients are final)\n";
  if (c.zero == 3)
    out += std::string("  ZeRO-3: ") +
           (c.zeroGatherStage
                ? "per stage and step an all-gather before its first F "
                  "(held to its last B) and a reduce-scatter after that: "
                : "per layer and microbatch an all-gather before F, "
                  "another before B and a reduce-scatter after it: ") +
           msText(c.zeroCommTime * 1e3) + " ms a step, " +
           msText(c.zeroExposedTime * 1e3) +
           " ms of it beyond the compute it overlaps (in DP comm)\n";
  out += "  split: compute " + msText(c.computeTime * 1e3) +
         " ms + recompute " + msText(c.recomputeTime * 1e3) + " ms + TP comm " +
         msText(c.tpCommTime * 1e3) + " ms + " +
         (c.ep > 1 ? "EP comm " + msText(c.epCommTime * 1e3) + " ms + " : "") +
         "bubble " + msText(c.bubbleTime * 1e3) + " ms + PP comm " +
         msText(c.ppCommTime * 1e3) + " ms + DP comm " +
         msText(c.dpCommTime * 1e3) + " ms" +
         (c.offload ? " + offload copies " + msText(c.offloadCopyTime * 1e3) +
                          " ms"
                    : "") +
         "\n";
  if (c.offload)
    out += fmt("  activation offload (--offload-activations auto): peak "
               "activations %.3g GiB instead of %.3g GiB, at most %.3g GiB "
               "of stashes in host memory per GPU; %d stashes leave and "
               "return on the most exposed rank: copies %s ms, %s ms of "
               "them beyond the compute they run under\n",
               gib(c.activationBytes), gib(c.activationBytesNoOffload),
               gib(c.offloadHostBytes), c.offloadStashes,
               msText(c.offloadCopyTotal * 1e3).c_str(),
               msText(c.offloadCopyTime * 1e3).c_str());
  return out;
}

/// The parts of the step split, named.
std::vector<std::pair<const char *, double>> splitParts(const Candidate &c) {
  return {{"compute", c.computeTime},
          {"recomputation", c.recomputeTime},
          {"tensor-parallel communication", c.tpCommTime},
          {"expert all-to-alls", c.epCommTime},
          {"the bubble", c.bubbleTime},
          {"pipeline communication", c.ppCommTime},
          {"data-parallel communication", c.dpCommTime},
          {"exposed offload copies", c.offloadCopyTime}};
}

/// "the bubble -3.2 ms, data-parallel communication +0.4 ms": where `best`
/// gains (-) and loses (+) against `c`, parts that differ by 1 us or more.
std::string diffText(const Candidate &c, const Candidate &best) {
  std::string out;
  const auto mine = splitParts(c), theirs = splitParts(best);
  for (size_t i = 0; i < mine.size(); ++i) {
    const double d = theirs[i].second - mine[i].second;
    if (std::fabs(d) < 1e-6)
      continue;
    out += std::string(out.empty() ? "" : ", ") + mine[i].first + " " +
           (d > 0 ? "+" : "-") + msText(std::fabs(d) * 1e3) + " ms";
  }
  return out;
}

/// ", most of it in the bubble (+3.2 ms)": the part of the step split in
/// which `next` loses the most time to `best` ("" when it loses none).
std::string losesOn(const Candidate &best, const Candidate &next) {
  const auto mine = splitParts(best), theirs = splitParts(next);
  size_t worst = 0;
  for (size_t i = 0; i < mine.size(); ++i)
    if (theirs[i].second - mine[i].second >
        theirs[worst].second - mine[worst].second)
      worst = i;
  const double loss = theirs[worst].second - mine[worst].second;
  if (loss <= 0)
    return "";
  return fmt(", most of it in %s (+%s ms)", mine[worst].first,
             msText(loss * 1e3).c_str());
}

std::string tokensText(double t) {
  if (t >= 1e6)
    return fmt("%.2fM", t / 1e6);
  if (t >= 1e3)
    return fmt("%.1fk", t / 1e3);
  return fmt("%.0f", t);
}

/// "tp=2, recompute selective, ZeRO-1, " for what differs from the plain
/// setup (so that setups without them read as before).
std::string extrasText(const Candidate &c) {
  std::string out;
  if (c.tp > 1)
    out += fmt(" tp=%d", c.tp);
  if (c.ep > 1)
    out += fmt(" ep=%d", c.ep);
  if (c.recompute != Recompute::None)
    out += fmt(", recompute %s", recomputeName(c.recompute));
  if (!c.recomputeStages.empty())
    out += " on stage" +
           std::string(c.recomputeStages.size() > 1 ? "s " : " ") +
           splitText(c.recomputeStages);
  if (c.zero)
    out += fmt(", ZeRO-%d", c.zero);
  if (c.offload)
    out += ", activation offload";
  return out;
}

std::string setupText(const Candidate &c) {
  return fmt(
      "%s%s, pp=%d dp=%d%s, microbatch %d x %d%s, %s", c.schedule.c_str(),
      c.kind == sched::ScheduleKind::Interleaved
          ? fmt(" v=%d", c.chunks).c_str()
          : "",
      c.pp, c.dp, extrasText(c).c_str(), c.microbatchSize, c.microbatches,
      c.kind == sched::ScheduleKind::DualPipe ? " (both directions)" : "",
      layoutName(c.layout));
}

/// The recompute column: none, sel, full; sel* and ful* on some stages.
std::string recomputeShort(const Candidate &c) {
  if (!c.recomputeStages.empty())
    return c.recompute == Recompute::Selective ? "sel*" : "ful*";
  return c.recompute == Recompute::Selective ? "sel"
                                             : recomputeName(c.recompute);
}

json candidateJson(const Candidate &c) {
  json j;
  j["schedule"] = c.schedule;
  j["pp"] = c.pp;
  j["dp"] = c.dp;
  j["tp"] = c.tp;
  j["ep"] = c.ep;
  j["recompute"] = recomputeName(c.recompute);
  j["recompute_stages"] = c.recomputeStages;
  j["zero"] = c.zero;
  j["microbatch_size"] = c.microbatchSize;
  j["microbatches"] = c.microbatches;
  j["stages"] = c.stages;
  j["chunks_per_rank"] = c.chunks;
  j["layer_split"] = c.layerSplit;
  j["layout"] = layoutName(c.layout);
  j["pp_inter_node"] = c.ppInterNode;
  j["dp_inter_node"] = c.dpInterNode;
  j["ep_inter_node"] = c.epInterNode;
  j["ep_nodes"] = c.epNodes;
  j["ep_node_limit"] = c.epNodeLimit;
  j["second_copy_bytes"] = c.secondCopyBytes;
  j["step_time_s"] = c.stepTime;
  j["pipeline_time_s"] = c.pipelineTime;
  j["dp_allreduce_time_s"] = c.dpTime;
  if (c.gradOverlap != GradOverlap::Off) {
    j["dp_allreduce_total_s"] = c.dpReduceTime;
    j["grad_overlap"] = gradOverlapName(c.gradOverlap);
  }
  j["dual_grad_reduce_time_s"] = c.dualReduceTime;
  if (c.zero == 3) {
    j["zero3_comm_s"] = c.zeroCommTime;
    j["zero3_exposed_s"] = c.zeroExposedTime;
  }
  j["comm_time_per_edge_s"] = c.commTime;
  j["bubble_rate"] = c.bubbleRate;
  j["memory_bytes"] = c.memoryBytes;
  j["model_state_bytes"] = c.paramBytes;
  j["activation_bytes"] = c.activationBytes;
  j["fits"] = c.fits;
  j["tokens_per_s"] = c.tokensPerSecond;
  j["mfu"] = c.mfu;
  j["time_split_s"] = {
      {"compute", c.computeTime}, {"recompute", c.recomputeTime},
      {"tp_comm", c.tpCommTime},  {"ep_comm", c.epCommTime},
      {"bubble", c.bubbleTime},   {"pp_comm", c.ppCommTime},
      {"dp_comm", c.dpCommTime}};
  // Activation offload: only on the setups that use it (so that plans
  // without it read as before).
  if (c.offload) {
    j["offload"] = "auto";
    j["offload_host_bytes"] = c.offloadHostBytes;
    j["offload_stashes"] = c.offloadStashes;
    j["offload_copy_total_s"] = c.offloadCopyTotal;
    j["offload_copy_exposed_s"] = c.offloadCopyTime;
    j["activation_bytes_without_offload"] = c.activationBytesNoOffload;
    j["time_split_s"]["offload_copies"] = c.offloadCopyTime;
  }
  j["memory_split_bytes"] = {{"params", c.weightBytes},
                             {"grads", c.gradBytes},
                             {"optimizer", c.optimizerBytes},
                             {"activations", c.activationBytes}};
  return j;
}
} // namespace

std::string plan::launchCommands(const Candidate &c, const ModelCosts &m,
                                 const Cluster &cl, const PlanOptions &opts) {
  const std::string model = opts.modelPath.empty() ? "MODEL" : opts.modelPath;
  std::string compile =
      "pipeforge-compile " + model + " --schedule " +
      sched::scheduleKindName(c.kind) + " --ranks " + std::to_string(c.pp) +
      (c.dp / c.ep > 1 ? " --dp " + std::to_string(c.dp / c.ep) : "") +
      (c.ep > 1 ? " --ep " + std::to_string(c.ep) : "") +
      (c.tp > 1 ? " --tp " + std::to_string(c.tp) : "") +
      (c.kind == sched::ScheduleKind::Interleaved
           ? " --chunks " + std::to_string(c.chunks)
           : "") +
      " --microbatches " + std::to_string(c.microbatches) +
      " --microbatch-size " + std::to_string(c.microbatchSize) + " --seq-len " +
      std::to_string(m.seqLen) +
      (c.recompute == Recompute::Full        ? " --recompute=full"
       : c.recompute == Recompute::Selective ? " --recompute=selective"
                                             : "") +
      (c.recomputeStages.empty()
           ? ""
           : " --recompute-stages " + splitText(c.recomputeStages)) +
      (c.zero == 3 ? " --zero 3" : "") + " -o model.pfp";
  // Open MPI's slot filling keeps consecutive world ranks on a node. With
  // the default rank layout (pp-fastest) they are a TP group, then the
  // pipeline ranks of a replica: pp-in-node; with dp-fastest, a TP group,
  // then the replicas of a pipeline rank: dp-in-node (RankGrid.h).
  const int world = c.pp * c.dp * c.tp;
  std::string run =
      "mpirun --hostfile HOSTS --map-by slot -np " + std::to_string(world) +
      " pipeforge-run model.pfp" +
      (c.layout == Layout::DataInNode ? " --rank-layout dp-fastest" : "") +
      (c.zero >= 1 ? " --zero " + std::to_string(c.zero) : "") +
      (c.offload ? " --offload-activations auto" : "");
  (void)cl;
  // The runtime numbers ranks pp-fastest or dp-fastest only.
  if (c.layout == Layout::ExpertInNode)
    run += "\n          (ep-in-node: the runtime has no rank layout that "
           "packs an expert group into a node; this runs pp-in-node)";
  if (c.zero == 3)
    run += "\n          (ZeRO-3: pipeforge-run gathers a stage's weights "
           "whole, from its first compute to its last, so its peak holds the "
           "stage's; the per-layer gathers priced here are FSDP's)";
  return "  launch: " + compile + "\n          " + run + "\n";
}

std::string plan::formatTable(const PlanResult &r, const ModelCosts &model,
                              const Cluster &cl, const PlanOptions &opts) {
  std::string out;
  out +=
      fmt("model %s: %zu layers, %.1fM params%s, seq %lld; global batch "
          "%lld sequences\n",
          model.name.c_str(), model.layers.size(), totalParams(model) / 1e6,
          model.tiedParams > 0
              ? fmt(" (+ %.1fM in a tied copy)", model.tiedParams / 1e6).c_str()
              : "",
          (long long)model.seqLen, (long long)opts.globalBatch);
  out += fmt("cluster %s: %d GPUs (%d per node), %.6g GiB per GPU "
             "(%.6g reserved), %.6g TFLOP/s x %.2f, %.6g GB/s intra-node, %s, "
             "%.6g GB/s memory\n",
             cl.name.c_str(), cl.gpus, cl.gpusPerNode, cl.memoryGiB,
             cl.reservedGiB, cl.peakTflops, cl.efficiency, cl.intraNodeGBps,
             cl.interNodeGBps > 0
                 ? fmt("%.6g GB/s inter-node", cl.interNodeGBps).c_str()
                 : "one node",
             cl.memoryBytesPerSecond() / 1e9);
  if (cl.allReduceEfficiency != 1 || cl.allToAllEfficiency != 1 ||
      cl.p2pEfficiency != 1)
    out = out.substr(0, out.size() - 1) +
          fmt("; link efficiency: all-reduce %.3g, all-to-all %.3g, p2p "
              "%.3g\n",
              cl.allReduceEfficiency, cl.allToAllEfficiency, cl.p2pEfficiency);
  if (!r.zeroNote.empty())
    out += "note: " + r.zeroNote + "\n";
  out +=
      fmt("evaluated %d setups: %zu fit, %zu over memory; %zu skipped%s\n\n",
          r.evaluated, r.ranked.size(), r.overMemory.size(), r.skipped.size(),
          r.pruned ? fmt("; %d auto runs pruned (cannot reach the top %d)",
                         r.pruned, std::max(2, opts.topN))
                         .c_str()
                   : "");
  // Mixture-of-experts models get an expert-parallel column (ep) and its
  // all-to-all time (ep_ms); dense models' tables are as before.
  const bool moe = model.shape.experts > 0;
  auto epCol = [&](const std::string &text) {
    return moe ? fmt(" %3s", text.c_str()) : std::string();
  };
  auto epMsCol = [&](const std::string &text) {
    return moe ? fmt(" %9s", text.c_str()) : std::string();
  };
  out += fmt("%3s  %-11s %3s %4s %3s%s %-4s %4s %3s %5s %2s  %-10s %-14s %10s "
             "%10s %9s %7s %8s %9s %6s\n",
             "#", "schedule", "pp", "dp", "tp", epCol("ep").c_str(), "rc",
             "zero", "b", "m", "v", "layout", "layers", "step_ms", "pipe_ms",
             "dp_ms", "bubble", "mem_GiB", "tokens/s", "MFU");
  size_t n = std::min<size_t>(r.ranked.size(), std::max(1, opts.topN));
  for (size_t i = 0; i < n; ++i) {
    const Candidate &c = r.ranked[i];
    std::string split = splitText(c.layerSplit);
    if (split.size() > 14)
      split = split.substr(0, 11) + "...";
    out += fmt(
        "%3zu  %-11s %3d %4d %3d%s %-4s %4d %3d %5d %2d  %-10s %-14s "
        "%10s %10s %9s %6.2f%% %8.2f %9s %5.1f%%%s\n",
        i + 1, c.schedule.c_str(), c.pp, c.dp, c.tp,
        epCol(std::to_string(c.ep)).c_str(), recomputeShort(c).c_str(), c.zero,
        c.microbatchSize, c.microbatches, c.chunks, layoutName(c.layout),
        split.c_str(), msText(c.stepTime * 1e3).c_str(),
        msText(c.pipelineTime * 1e3).c_str(),
        msText((c.dpTime + c.dualReduceTime) * 1e3).c_str(), c.bubbleRate * 100,
        gib(c.memoryBytes), tokensText(c.tokensPerSecond).c_str(), c.mfu * 100,
        // Activation offload: marked after the row (no column, so that
        // plans without it read as before).
        c.offload ? "  offload" : "");
  }
  // The same setups' step time and memory split.
  if (n > 0) {
    out += fmt("\n%3s  %10s %10s %9s%s %9s %9s %9s  %9s %9s %9s %9s\n", "#",
               "compute_ms", "recomp_ms", "tp_ms", epMsCol("ep_ms").c_str(),
               "bubble_ms", "pp_ms", "dp_ms", "param_GiB", "grad_GiB",
               "optim_GiB", "act_GiB");
    for (size_t i = 0; i < n; ++i) {
      const Candidate &c = r.ranked[i];
      out +=
          fmt("%3zu  %10s %10s %9s%s %9s %9s %9s  %9.2f %9.2f "
              "%9.2f %9.2f\n",
              i + 1, msText(c.computeTime * 1e3).c_str(),
              msText(c.recomputeTime * 1e3).c_str(),
              msText(c.tpCommTime * 1e3).c_str(),
              epMsCol(msText(c.epCommTime * 1e3)).c_str(),
              msText(c.bubbleTime * 1e3).c_str(),
              msText(c.ppCommTime * 1e3).c_str(),
              msText(c.dpCommTime * 1e3).c_str(), gib(c.weightBytes),
              gib(c.gradBytes), gib(c.optimizerBytes), gib(c.activationBytes));
    }
  }
  if (r.ranked.empty())
    return out;
  const Candidate &best = r.ranked.front();
  out += "\n";
  out +=
      fmt("recommended: %s: step %s ms, bubble %.2f%%, %.3g GiB per GPU "
          "(of %.3g usable), %s tokens/s, MFU %.1f%%\n",
          setupText(best).c_str(), msText(best.stepTime * 1e3).c_str(),
          best.bubbleRate * 100, gib(best.memoryBytes), gib(cl.usableBytes()),
          tokensText(best.tokensPerSecond).c_str(), best.mfu * 100);
  out += timeLines(best, "");
  out +=
      fmt("  memory: %.3g GiB model state + %.3g GiB peak activations "
          "(params %.3g + grads %.3g + optimizer %.3g GiB)\n",
          gib(best.paramBytes), gib(best.activationBytes),
          gib(best.weightBytes), gib(best.gradBytes), gib(best.optimizerBytes));
  // Only where offload is what makes it fit (with --offload auto alone
  // every setup carries it).
  if (best.offload && best.memoryBytes - best.activationBytes +
                              best.activationBytesNoOffload >
                          cl.usableBytes())
    out += fmt("  fits with activation offload: %.3g GiB to host, +%s ms "
               "exposed copies (without offload %.3g GiB per GPU, over the "
               "%.3g usable)\n",
               gib(best.offloadHostBytes),
               msText(best.offloadCopyTime * 1e3).c_str(),
               gib(best.memoryBytes - best.activationBytes +
                   best.activationBytesNoOffload),
               gib(cl.usableBytes()));
  out += launchCommands(best, model, cl, opts);
  // The runner-up (PlanResult::runnerUp): the next setup that differs in
  // more than the ZeRO stage (which changes only memory, so it is usually
  // the same setup again).
  const Candidate *runnerUp =
      r.runnerUp > 0 ? &r.ranked[size_t(r.runnerUp)] : nullptr;
  if (runnerUp) {
    const Candidate &next = *runnerUp;
    out += fmt("  runner-up: %s is %.2f%% slower%s\n", setupText(next).c_str(),
               std::max(0.0, next.stepTime / best.stepTime - 1) * 100,
               losesOn(best, next).c_str());
  }
  // A faster setup that memory rules out, if any.
  const Candidate *faster = nullptr;
  for (const Candidate &c : r.overMemory)
    if (c.stepTime < best.stepTime &&
        (!faster || c.stepTime < faster->stepTime))
      faster = &c;
  if (faster)
    out += fmt("  ruled out by memory: %s would take %.4g ms but needs %.2f "
               "GiB\n",
               setupText(*faster).c_str(), faster->stepTime * 1e3,
               gib(faster->memoryBytes));
  return out;
}

std::string plan::formatExplain(const Explanation &e, const PlanResult &r,
                                const Cluster &cl) {
  const Candidate &c = e.setup;
  std::string out;
  out += fmt("explain: %s: step %.6g ms, bubble %.2f%%, %.3g GiB per GPU "
             "(of %.3g usable%s), %.0f tokens/s, %.4g model TFLOP/s per GPU, "
             "MFU %.1f%%\n",
             setupText(c).c_str(), c.stepTime * 1e3, c.bubbleRate * 100,
             gib(c.memoryBytes), gib(cl.usableBytes()),
             c.fits ? ", fits" : ", over memory", c.tokensPerSecond,
             c.mfu * cl.peakTflops, c.mfu * 100);
  out += timeLines(c, e.otherLayoutStepTime > 0
                          ? "; the other layout: step " +
                                msText(e.otherLayoutStepTime * 1e3) + " ms"
                          : "");
  out += fmt(
      "  memory: %.3g GiB model state + %.3g GiB peak activations "
      "(params %.3g + grads %.3g + optimizer %.3g GiB); layers per stage %s\n",
      gib(c.paramBytes), gib(c.activationBytes), gib(c.weightBytes),
      gib(c.gradBytes), gib(c.optimizerBytes), runsText(c.layerSplit).c_str());
  if (e.rank > 0)
    out += fmt("  rank: %d of %zu setups that fit\n", e.rank, r.ranked.size());
  else if (!e.notSearched.empty())
    out += fmt("  rank: not in the search space: %s; it would rank %d of "
               "%zu%s\n",
               e.notSearched.c_str(), e.wouldRank, r.ranked.size(),
               c.fits ? "" : " by time, but it is over memory");
  else if (!c.fits && r.ranked.empty())
    out += fmt("  rank: not ranked: over memory (%.2f GiB, %.2f GiB "
               "usable); no setup fits\n",
               gib(c.memoryBytes), gib(cl.usableBytes()));
  else if (!c.fits)
    out += fmt("  rank: not ranked: over memory (%.2f GiB, %.2f GiB "
               "usable); by time it would rank %d of %zu\n",
               gib(c.memoryBytes), gib(cl.usableBytes()), e.wouldRank,
               r.ranked.size());
  else
    out += fmt("  rank: not ranked (pruned: cannot reach the top); it "
               "would rank %d of %zu\n",
               e.wouldRank, r.ranked.size());
  if (!r.ranked.empty()) {
    const Candidate &best = r.ranked.front();
    if (e.rank == 1)
      out += "  it is the recommendation\n";
    else
      out +=
          fmt("  recommendation: %s: step %.6g ms, %.3g GiB per GPU, "
              "%s tokens/s, MFU %.1f%%: %.4gx the explained setup's "
              "throughput (step %.2f%% %s)\n",
              setupText(best).c_str(), best.stepTime * 1e3,
              gib(best.memoryBytes), tokensText(best.tokensPerSecond).c_str(),
              best.mfu * 100, c.stepTime / best.stepTime,
              std::abs(1 - best.stepTime / c.stepTime) * 100,
              best.stepTime <= c.stepTime ? "shorter" : "longer");
    if (e.rank != 1)
      if (std::string d = diffText(c, best); !d.empty())
        out += "  the recommendation against it: " + d + "\n";
  }
  return out;
}

std::string plan::formatJson(const PlanResult &r, const ModelCosts &model,
                             const Cluster &cl, const PlanOptions &opts,
                             const Explanation *explained) {
  json j;
  j["model"] = {{"name", model.name},
                {"layers", model.layers.size()},
                {"params", totalParams(model)},
                {"tied_params", model.tiedParams},
                {"seq_len", model.seqLen}};
  j["cluster"] = {
      {"name", cl.name},
      {"gpus", cl.gpus},
      {"gpus_per_node", cl.gpusPerNode},
      {"memory_gb", cl.memoryGiB},
      {"reserved_memory_gb", cl.reservedGiB},
      {"usable_bytes", cl.usableBytes()},
      {"peak_tflops", cl.peakTflops},
      {"efficiency", cl.efficiency},
      {"intra_node_gb_per_s", cl.intraNodeGBps},
      {"inter_node_gb_per_s", cl.interNodeGBps},
      {"memory_bandwidth_gb_per_s", cl.memoryBytesPerSecond() / 1e9},
      {"all_reduce_efficiency", cl.allReduceEfficiency},
      {"all_to_all_efficiency", cl.allToAllEfficiency},
      {"p2p_efficiency", cl.p2pEfficiency}};
  j["global_batch"] = opts.globalBatch;
  j["evaluated"] = r.evaluated;
  j["fit"] = r.ranked.size();
  j["over_memory"] = r.overMemory.size();
  j["pruned"] = r.pruned;
  if (!r.ranked.empty())
    j["recommendation"] = candidateJson(r.ranked.front());
  json top = json::array();
  size_t n = std::min<size_t>(r.ranked.size(), std::max(1, opts.topN));
  for (size_t i = 0; i < n; ++i)
    top.push_back(candidateJson(r.ranked[i]));
  j["top"] = top;
  if (r.runnerUp > 0)
    j["runner_up"] = candidateJson(r.ranked[size_t(r.runnerUp)]);
  if (explained) {
    json e = candidateJson(explained->setup);
    e["rank"] = explained->rank;
    e["would_rank"] = explained->wouldRank;
    e["ranked"] = r.ranked.size();
    e["not_searched"] = explained->notSearched;
    if (!r.ranked.empty())
      e["recommendation_speedup"] =
          explained->setup.stepTime / r.ranked.front().stepTime;
    j["explain"] = e;
  }
  j["skipped"] = r.skipped;
  if (!r.zeroNote.empty())
    j["zero_note"] = r.zeroNote;
  return j.dump(2) + "\n";
}
