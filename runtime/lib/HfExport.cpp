//===- HfExport.cpp - A checkpoint of any parallel layout, whole ----------===//
//
// pipeforge-export's library half (docs/huggingface.md, "Exporting a
// checkpoint"): the rank files of a checkpoint folder put back together
// into whole tensors, with the program and the rank layout the trainer
// wrote beside them.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Checkpoint.h"
#include "pipeforge/rt/Executor.h"
#include "pipeforge/rt/HfWeights.h"
#include "pipeforge/rt/RankGrid.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>

namespace pipeforge::rt {

using Json = nlohmann::json;

Status writeCheckpointLayout(const std::string &dir, const Program &prog,
                             bool dataFastest) {
  if (Status s = writeProgram(prog, dir + "/program.pfp"); !s)
    return s;
  std::string text = Json{{"rank_layout", dataFastest ? "dp-fastest"
                                                      : "pp-fastest"}}
                         .dump() +
                     "\n";
  return writeFileAtomically(dir + "/layout.json",
                             std::vector<uint8_t>(text.begin(), text.end()));
}

Expected<WholeTensors> readWholeCheckpoint(const std::string &dir,
                                           Program &prog) {
  auto man = readManifest(dir);
  if (!man)
    return man.status();
  auto p = readProgram(dir + "/program.pfp");
  if (!p)
    return Status::error("'" + dir + "': " + p.message() +
                         " (a checkpoint written before pipeforge-export "
                         "existed has no program.pfp)");
  prog = p.take();
  auto lb = readFileBytes(dir + "/layout.json");
  if (!lb)
    return lb.status();
  Json layout = Json::parse(lb->begin(), lb->end(), nullptr, false);
  if (!layout.is_object() || !layout.contains("rank_layout") ||
      !layout["rank_layout"].is_string() ||
      (layout["rank_layout"] != "pp-fastest" &&
       layout["rank_layout"] != "dp-fastest"))
    return Status::error("'" + dir + "/layout.json': expected "
                         "{\"rank_layout\": \"pp-fastest\" | \"dp-fastest\"}");
  RankGrid g;
  g.P = prog.training.pipelineRanks;
  g.E = prog.training.expertParallel;
  g.D = prog.training.dataParallel;
  g.T = prog.training.tensorParallel;
  g.dataFastest = layout["rank_layout"] == "dp-fastest";
  if (!g.valid() || uint32_t(g.size()) != man->numRanks)
    return Status::error("'" + dir + "': the manifest has " +
                         std::to_string(man->numRanks) +
                         " ranks, the program's grid " + g.describe());
  // Whole tensors, allocated as the first slice arrives.
  std::map<std::string, size_t> paramOf;
  for (size_t i = 0; i < prog.params.size(); ++i)
    paramOf[prog.params[i].name] = i;
  std::map<std::string, std::vector<float>> whole;
  std::map<std::string, int64_t> filled;
  for (uint32_t r = 0; r < man->numRanks; ++r) {
    RankCoord c = g.coordOf(int(r));
    if (c.replica != 0)
      continue; // data-parallel replicas hold the same values
    auto ck = loadRankCheckpoint(dir, r);
    if (!ck)
      return ck.status();
    for (const CheckpointTensor &t : ck->params) {
      auto it = paramOf.find(t.name);
      if (it == paramOf.end()) {
        // Model state (a load-balancing bias): the same on every rank.
        if (!whole.count(t.name)) {
          whole[t.name] = t.data;
          filled[t.name] = int64_t(t.data.size());
        }
        continue;
      }
      const Param &pr = prog.params[it->second];
      if (pr.copy != 0)
        continue;
      bool expert = pr.expertSharded && g.E > 1;
      bool split = pr.tpDim >= 0 && g.T > 1;
      if ((!expert && c.expert != 0) || (!split && c.tensor != 0))
        continue; // a replica across that group
      std::vector<int64_t> full = wholeParamShape(pr, g.T);
      int64_t n = 1;
      for (int64_t d : full)
        n *= d;
      std::vector<float> &w = whole[t.name];
      if (w.empty())
        w.assign(size_t(n), 0.0f);
      // The slice's place: expert rows [e E_l, (e+1) E_l) of dimension 0,
      // and shard `tensor` of dimension tpDim; copied as runs of `block`.
      std::vector<int64_t> local = full;
      if (expert)
        local[0] /= g.E;
      if (split)
        local[size_t(pr.tpDim)] /= g.T;
      int64_t ln = 1;
      for (int64_t d : local)
        ln *= d;
      if (int64_t(t.data.size()) != ln)
        return Status::error("'" + dir + "': rank " + std::to_string(r) +
                             " holds " + std::to_string(t.data.size()) +
                             " values of '" + t.name + "', its slice has " +
                             std::to_string(ln));
      int splitDim = split ? pr.tpDim : 0;
      int64_t outer = 1, block = 1;
      for (int d = 0; d < splitDim; ++d)
        outer *= local[size_t(d)];
      for (size_t d = size_t(splitDim); d < local.size(); ++d)
        block *= local[d];
      int64_t expertOff = expert ? int64_t(c.expert) * ln : 0;
      // With both: dimension 0 (experts) is outside the split dimension.
      if (expert && split)
        expertOff = int64_t(c.expert) * (ln * g.T);
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(w.data() + expertOff + (o * (split ? g.T : 1) +
                                            (split ? c.tensor : 0)) *
                                               block,
                    t.data.data() + o * block, size_t(block) * 4);
      filled[t.name] += ln;
    }
  }
  WholeTensors out;
  for (const Param &pr : prog.params) {
    if (pr.copy != 0)
      continue;
    auto it = whole.find(pr.name);
    if (it == whole.end() || filled[pr.name] != int64_t(it->second.size()))
      return Status::error("'" + dir + "': parameter '" + pr.name +
                           "' is not complete in the rank files");
    out.emplace_back(baseParamName(pr.name), std::move(it->second));
    whole.erase(it);
  }
  for (auto &[name, v] : whole)
    if (!paramOf.count(name))
      out.emplace_back(name, std::move(v));
  return out;
}

} // namespace pipeforge::rt
