//===- Options.cpp - pipeforge-plan's flags as PlanOptions ----------------===//

#include "pipeforge/Plan/Options.h"

#include "pipeforge/Support/Numeric.h"

#include <algorithm>
#include <cstdio>
#include <optional>

using namespace pipeforge;
using namespace pipeforge::plan;

namespace {
std::string trim(const std::string &s) {
  const char *ws = " \t\n\v\f\r";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos)
    return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

/// The comma-separated words of `text`, trimmed; "" has none. An empty
/// word ("1,,2", "1,", ",1") is kept, so that the callers refuse it
/// (emptyItem).
std::vector<std::string> words(const std::string &text) {
  std::vector<std::string> out;
  if (trim(text).empty())
    return out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos)
      comma = text.size();
    out.push_back(trim(text.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

/// The error for a list flag with an empty item ("--ep 1,2,,4"), or ok.
Status emptyItem(const char *flag, const std::string &text) {
  for (const std::string &w : words(text))
    if (w.empty())
      return Status::error(std::string(flag) + ": empty item in '" + text +
                           "' (items are separated by single commas)");
  return Status::ok();
}

/// Integers >= min separated by commas; nullopt when a word is not one (or
/// there is none, or one is empty).
std::optional<std::vector<int>> parseIntList(const std::string &text,
                                             int min = 1) {
  std::vector<int> out;
  for (const std::string &w : words(text)) {
    std::string t = trim(w);
    if (t.empty() || t.size() > 9 ||
        !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    int v = std::stoi(t);
    if (v < min)
      return std::nullopt;
    out.push_back(v);
  }
  if (out.empty())
    return std::nullopt;
  return out;
}
} // namespace

Expected<PlanOptions> plan::optionsFromFlags(const PlanFlags &f) {
  // Every list: no empty item (it used to be dropped, so "--ep 1,2,,4"
  // passed as "1,2,4").
  for (auto [flag, text] :
       {std::make_pair("--microbatch-sizes", &f.microbatchSizes),
        std::make_pair("--schedules", &f.schedules),
        std::make_pair("--pp", &f.pp), std::make_pair("--tp", &f.tp),
        std::make_pair("--ep", &f.ep),
        std::make_pair("--recompute", &f.recompute),
        std::make_pair("--zero", &f.zero),
        std::make_pair("--offload", &f.offload),
        std::make_pair("--chunks", &f.chunks),
        std::make_pair("--layouts", &f.layouts),
        std::make_pair("--routing-groups", &f.routingGroups)})
    if (Status st = emptyItem(flag, *text); !st)
      return st;
  // Byte counts: finite, positive and plausible (NaN or a negative count
  // once made an all-reduce take 0 ms).
  if (auto e = checkNumberOption("--state-bytes-per-param",
                                 f.stateBytesPerParam,
                                 {0, kMaxStateBytesPerParam, true}))
    return Status::error(*e);
  if (auto e = checkNumberOption("--grad-bytes", f.gradBytesPerParam,
                                 {0, kMaxGradBytesPerParam, true}))
    return Status::error(*e);
  if (auto e = checkIntOption("--bytes-per-element", f.bytesPerElement, 1,
                              kMaxBytesPerElement))
    return Status::error(*e);
  if (auto e = checkIntOption("--top", f.topN, 1, kMaxTopN))
    return Status::error(*e);
  if (auto e = checkIntOption("--global-batch", f.globalBatch, 1,
                              kMaxGlobalBatch))
    return Status::error(*e);
  if (f.format != "table" && f.format != "json")
    return Status::error("--format: expected 'table' or 'json', got '" +
                         f.format + "'");
  if (f.progress != "auto" && f.progress != "always" && f.progress != "never")
    return Status::error("--progress: expected auto, always or never, got '" +
                         f.progress + "'");
  if (f.zeroShard != "replicas" && f.zeroShard != "all")
    return Status::error("--zero-shard: expected replicas or all, got '" +
                         f.zeroShard + "'");
  if (f.compare && f.format == "json")
    return Status::error(
        "--compare prints a table only (not with --format json)");
  if (!f.routingGroups.empty()) {
    auto gs = parseIntList(f.routingGroups);
    if (!gs || gs->size() != 2)
      return Status::error(
          "--routing-groups: expected G,g with 1 <= g <= G, got '" +
          f.routingGroups + "'");
  }
  PlanOptions opts;
  opts.globalBatch = f.globalBatch;
  auto chunkCounts = parseIntList(f.chunks, /*min=*/2);
  if (!chunkCounts)
    return Status::error(
        "--chunks: expected integers >= 2 separated by commas, got '" +
        f.chunks + "'");
  opts.chunkCounts = *chunkCounts;
  // --chunks given for a sweep without interleaved (the one schedule that
  // reads it) would be ignored: refused instead.
  if (f.chunksGiven && !f.schedules.empty()) {
    bool interleaved = false;
    for (const std::string &w : words(f.schedules))
      interleaved |= sched::parseScheduleKind(w) ==
                     std::optional(sched::ScheduleKind::Interleaved);
    if (!interleaved)
      return Status::error("--chunks applies to interleaved only, which "
                           "--schedules '" +
                           f.schedules + "' does not list");
  }
  // An explained interleaved setup without chunks= takes the smallest.
  opts.chunksPerRank =
      *std::min_element(chunkCounts->begin(), chunkCounts->end());
  opts.stateBytesPerParam = f.stateBytesPerParam;
  opts.gradBytesPerParam = f.gradBytesPerParam;
  opts.zeroDenseOverAll = f.zeroShard == "all";
  if (f.float8 != "off" && f.float8 != "linear" && f.float8 != "linear-gather")
    return Status::error("--float8: expected off, linear or linear-gather, "
                         "got '" +
                         f.float8 + "'");
  opts.fp8Linear = f.float8 != "off";
  opts.fp8AllGather = f.float8 == "linear-gather";
  opts.asyncTp = f.asyncTp;
  if (f.zeroGather != "layer" && f.zeroGather != "stage")
    return Status::error("--zero-gather: expected layer or stage, got '" +
                         f.zeroGather + "'");
  opts.zeroGatherStage = f.zeroGather == "stage";
  auto rule = sched::parseInterleavedRule(f.interleavedRule);
  if (!rule)
    return Status::error("--interleaved-rule: expected auto, megatron or "
                         "pytorch, got '" +
                         f.interleavedRule + "'");
  opts.interleavedRule = *rule;
  opts.topN = f.topN;
  if (!parseGradOverlap(f.gradOverlap, opts.gradOverlap))
    return Status::error("--overlap-grad-reduce: expected layer, stage or "
                         "off, got '" +
                         f.gradOverlap + "'");
  opts.modelPath = f.modelPath == "-" ? std::string("MODEL") : f.modelPath;
  auto sizes = parseIntList(f.microbatchSizes);
  if (!sizes)
    return Status::error("--microbatch-sizes: expected positive integers "
                         "separated by commas, got '" +
                         f.microbatchSizes + "'");
  opts.microbatchSizes = *sizes;
  // --tp, --ep and --pp: "" leaves the sweep's default.
  for (auto [flag, text, into] :
       {std::make_tuple("--tp", &f.tp, &opts.tensorDegrees),
        std::make_tuple("--ep", &f.ep, &opts.expertDegrees)}) {
    if (text->empty())
      continue;
    auto list = parseIntList(*text);
    if (!list)
      return Status::error(std::string(flag) +
                           ": expected positive integers separated by commas");
    *into = *list;
  }
  for (const std::string &w : words(f.recompute)) {
    Recompute r;
    if (!parseRecompute(trim(w), r))
      return Status::error("--recompute: unknown policy '" + trim(w) +
                           "' (known: none selective full)");
    opts.recomputePolicies.push_back(r);
  }
  if (!f.zero.empty()) {
    auto zs = parseIntList(f.zero, /*min=*/0);
    if (!zs || std::any_of(zs->begin(), zs->end(), [](int z) { return z > 3; }))
      return Status::error("--zero: expected ZeRO stages 0, 1, 2, 3 "
                           "separated by commas, got '" +
                           f.zero + "'");
    opts.zeroStages = *zs;
  }
  for (const std::string &w : words(f.offload)) {
    if (w != "off" && w != "auto")
      return Status::error("--offload: unknown value '" + w +
                           "' (known: off auto)");
    const bool on = w == "auto";
    if (std::find(opts.offloadModes.begin(), opts.offloadModes.end(), on) ==
        opts.offloadModes.end())
      opts.offloadModes.push_back(on);
  }
  for (const std::string &w : words(f.layouts)) {
    Layout l;
    if (!parseLayout(trim(w), l))
      return Status::error("--layouts: unknown layout '" + trim(w) +
                           "' (known: pp-in-node dp-in-node ep-in-node)");
    opts.layouts.push_back(l);
  }
  if (!f.pp.empty()) {
    auto pps = parseIntList(f.pp);
    if (!pps)
      return Status::error(
          "--pp: expected positive integers separated by commas");
    opts.pipelineDegrees = *pps;
  }
  // The automatic scheduler, heuristic only, under the activation memory
  // the model state leaves free.
  opts.autoScheduler = heuristicAutoScheduler();
  for (const std::string &w : words(f.schedules)) {
    auto k = sched::parseScheduleKind(trim(w));
    if (!k)
      return Status::error("--schedules: unknown schedule '" + trim(w) +
                           "' (known: " + sched::scheduleKindNames() + ")");
    opts.schedules.push_back(*k);
  }
  return opts;
}

Status plan::applyRoutingGroupsFlag(ModelCosts &model,
                                   const std::string &text) {
  if (text.empty())
    return Status::ok();
  auto gs = parseIntList(text);
  if (!gs || gs->size() != 2)
    return Status::error("--routing-groups: expected G,g with 1 <= g <= G, "
                         "got '" + text + "'");
  if (Status st = setRoutingGroups(model, (*gs)[0], (*gs)[1]); !st)
    return Status::error("--routing-groups: " + st.message());
  return Status::ok();
}

ProgressLine::ProgressLine(std::string mode, bool terminal,
                           std::function<void(const std::string &)> write)
    : mode(std::move(mode)), terminal(terminal), write(std::move(write)),
      started(std::chrono::steady_clock::now()) {}

double ProgressLine::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       started)
      .count();
}

std::function<void(const char *, int, int, int)> ProgressLine::callback() {
  if (mode == "never")
    return {};
  return [this](const char *phase, int done, int total, int evaluated) {
    const double now = elapsed();
    if (mode == "auto" && (!terminal || now < 1.0))
      return;
    if (shown && now - lastShown < 0.5)
      return;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "pipeforge-plan: %s %d/%d, %d setups evaluated, %.1f s",
                  phase, done, total, evaluated, now);
    // On a terminal the line is redrawn in place (and cleared to its end,
    // "\x1b[K", as it may be shorter than the last).
    write(std::string(terminal ? "\r" : "") + buf +
          (terminal ? "\x1b[K" : "\n"));
    shown = true;
    lastShown = now;
  };
}

void ProgressLine::finish(int evaluated) {
  if (!shown && mode != "always")
    return;
  char buf[128];
  std::snprintf(buf, sizeof buf, "pipeforge-plan: searched %d setups in %.1f s",
                evaluated, elapsed());
  const bool redraw = terminal && shown;
  write(std::string(redraw ? "\r" : "") + buf + (redraw ? "\x1b[K\n" : "\n"));
}

std::string plan::formatFitLine(double efficiency, double clusterEfficiency,
                                double tokensPerSecond) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "fit: efficiency %.4f (the cluster file has %.4g): the "
                "explained setup is predicted at %.0f tokens/s\n",
                efficiency, clusterEfficiency, tokensPerSecond);
  return buf;
}
