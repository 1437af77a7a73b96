//===- GenControllable.cpp - V-Half and V-Min -----------------------------===//
//
// The V schedules of "Pipeline Parallelism with Controllable Memory" (Qi et
// al., NeurIPS 2024), built as the paper builds them: one building block
// (the F and B passes of one microbatch on every rank, at fixed offsets in
// a period of 6 slots, one slot per pass) repeated once per microbatch,
// every W then put in the first free slot after its B, and the warm-up and
// the cool-down squeezed without raising the peak memory. The offsets and
// the squeezing follow the authors' greedy reordering (zbv_greedy.py of
// sail-sg/zero-bubble-pipeline-parallelism), so the per-rank orders are
// theirs.
//
// Placement::vShape: rank r holds chunk 0 = stage r and chunk 1 = stage
// 2p-1-r. Pass types, per rank (the authors' order):
//   0 F of chunk 0    1 F of chunk 1    2 B of chunk 1    3 B of chunk 0
//   4 W of chunk 1    5 W of chunk 0    (4 is every W while they are merged)
// Building block, slot of each type on rank i (p ranks):
//   V-Min  (g = 2 if 3 | p else 0)  i, 2p-1-i, 2p+g+i, 4p+g-1-i
//   V-Half (g = 3 if 2 | p else 0)  2i, 3p-2-i, 3p+g+2i-1, 6p+g-2-i
// A chunk's activation lives from its F to its W: in a period of 6 slots a
// rank starts two (one per chunk), so the block's lifespans set the peak,
// about a third (V-Min) or a half (V-Half) of 1F1B's.
//
//===----------------------------------------------------------------------===//

#include "GenUtil.h"

#include <algorithm>
#include <array>
#include <tuple>

namespace pipeforge::sched::detail {

namespace {

using Lists = std::vector<std::vector<long>>; // [type][mb] -> slot
using Stages = std::vector<Lists>;            // [rank]

constexpr long kPeriod = 6;

/// The slots of one microbatch's F0, F1, B1, B0 on each rank.
std::vector<std::array<long, 4>> buildingBlock(int p, bool vMin) {
  std::vector<std::array<long, 4>> block(p);
  for (long i = 0; i < p; ++i) {
    if (vMin) {
      const long g = p % 3 == 0 ? 2 : 0;
      block[i] = {i, 2L * p - 1 - i, 2L * p + g + i, 4L * p + g - 1 - i};
    } else {
      const long g = p % 2 == 0 ? 3 : 0;
      block[i] = {2 * i, 3L * p - 2 - i, 3L * p + g + 2 * i - 1,
                  6L * p + g - 2 - i};
    }
  }
  return block;
}

long lastSlot(const Lists &s) {
  long bound = -1;
  for (const auto &l : s)
    if (!l.empty())
      bound = std::max(bound, l.back());
  return bound;
}

/// Adds the W passes to a rank's four lists of F and B slots: each empty
/// slot takes a pending W (of chunk 1 first when `split`), the rest follow
/// the last pass. Merged (one list, type 4) or split by chunk (types 4, 5).
void putW(Lists &s, bool split) {
  const long bound = lastSlot(s);
  s.resize(split ? 6 : 5);
  long wCnt[2] = {0, 0};
  size_t ptr[4] = {0, 0, 0, 0};
  long i = 0;
  for (; i <= bound; ++i) {
    int next = -1;
    long nextTime = bound + 1;
    for (int t = 0; t < 4; ++t)
      if (ptr[t] < s[t].size() && s[t][ptr[t]] < nextTime)
        nextTime = s[t][ptr[t]], next = t;
    if (nextTime == i) {
      ++ptr[next];
      if (next >= 2)
        ++wCnt[split ? next - 2 : 0];
    } else {
      for (int w = 0; w < 2; ++w)
        if (wCnt[w]) {
          s[4 + w].push_back(i);
          --wCnt[w];
          break;
        }
    }
  }
  --i;
  for (int w = 0; w < 2; ++w)
    while (wCnt[w] > 0) {
      s[4 + w].push_back(++i);
      --wCnt[w];
    }
}

/// A rank's peak activation count (one unit: a chunk's activations of one
/// microbatch): F allocates, W frees; without W lists each empty slot runs
/// a pending W.
long memOfStage(const Lists &s) {
  static constexpr int kMemory[5] = {1, 1, 0, 0, -1};
  const bool hasW = s.size() > 4;
  const long bound = lastSlot(s);
  long wCnt = 0, cur = 0, res = 0;
  std::vector<size_t> ptr(s.size(), 0);
  for (long i = 0; i <= bound; ++i) {
    int next = -1;
    long nextTime = bound + 1;
    for (size_t t = 0; t < s.size(); ++t)
      if (ptr[t] < s[t].size() && s[t][ptr[t]] < nextTime)
        nextTime = s[t][ptr[t]], next = int(t);
    if (nextTime == i) {
      ++ptr[next];
      cur += kMemory[next];
      if (next == 2 || next == 3)
        ++wCnt;
    } else if (!hasW && wCnt) {
      --cur;
      --wCnt;
    }
    res = std::max(res, cur);
  }
  return res;
}

struct Item {
  long time;
  int stage, type, mb;
  bool operator<(const Item &o) const {
    return std::tie(time, stage, type, mb) <
           std::tie(o.time, o.stage, o.type, o.mb);
  }
};

/// Every pass, in the order the authors' loops take them: by slot, then
/// rank, type and microbatch.
std::vector<Item> inSlotOrder(const Stages &sr) {
  std::vector<Item> items;
  for (size_t st = 0; st < sr.size(); ++st)
    for (size_t t = 0; t < sr[st].size(); ++t)
      for (size_t mb = 0; mb < sr[st][t].size(); ++mb)
        items.push_back({sr[st][t][mb], int(st), int(t), int(mb)});
  std::sort(items.begin(), items.end());
  return items;
}

/// Start times of an as-soon-as-possible run in slot order, one time unit
/// per pass and no communication time (the authors' "squeeze").
Stages squeeze(const Stages &sr) {
  const int S = int(sr.size());
  Stages start(S), end(S);
  for (int st = 0; st < S; ++st) {
    start[st].resize(sr[st].size());
    end[st].resize(sr[st].size());
    for (size_t t = 0; t < sr[st].size(); ++t) {
      start[st][t].assign(sr[st][t].size(), 0);
      end[st][t].assign(sr[st][t].size(), 0);
    }
  }
  std::vector<long> rankEnd(S, 0);
  for (const Item &it : inSlotOrder(sr)) {
    long deps = rankEnd[it.stage];
    if ((it.type == 0 || it.type == 2) && it.stage > 0)
      deps = std::max(deps, end[it.stage - 1][it.type][it.mb]);
    if ((it.type == 1 || it.type == 3) && it.stage + 1 < S)
      deps = std::max(deps, end[it.stage + 1][it.type][it.mb]);
    if (it.type > 0 && it.type < 4)
      deps = std::max(deps, end[it.stage][it.type - 1][it.mb]);
    if (it.mb > 0)
      deps = std::max(deps, end[it.stage][it.type][it.mb - 1]);
    start[it.stage][it.type][it.mb] = deps;
    end[it.stage][it.type][it.mb] = rankEnd[it.stage] = deps + 1;
  }
  return start;
}

/// One reordering pass. With `considerW` the W are placed first and the
/// warm-up and the cool-down are squeezed; without, only the cool-down (the
/// passes after the last microbatch's first F) is. A pass moves to the
/// earliest free slot after its dependencies that keeps its rank's peak
/// at the schedule's.
Stages reorder(Stages sr, bool considerW) {
  const int S = int(sr.size());
  if (considerW)
    for (Lists &s : sr)
      putW(s, /*split=*/false);
  long currentMem = 0;
  for (const Lists &s : sr)
    currentMem = std::max(currentMem, memOfStage(s));
  std::vector<std::vector<char>> occupied(S);
  for (int st = 0; st < S; ++st)
    occupied[st].assign(size_t(lastSlot(sr[st]) + 1), 0);
  const int lastMb = int(sr[0][0].size()) - 1;
  int phase = 0;
  for (const Item &it : inSlotOrder(sr)) {
    long &slot = sr[it.stage][it.type][it.mb];
    if (it.type == 3 && it.stage == 0 && phase == 0)
      phase = 1;
    if (phase == 1 || (phase == 0 && !considerW)) {
      if (phase == 1 && it.type == 0 && it.mb == lastMb)
        phase = 2;
      occupied[it.stage][slot] = 1;
      continue;
    }
    long deps = -1;
    if ((it.type == 0 || it.type == 2) && it.stage > 0)
      deps = std::max(deps, sr[it.stage - 1][it.type][it.mb]);
    if ((it.type == 1 || it.type == 3) && it.stage + 1 < S)
      deps = std::max(deps, sr[it.stage + 1][it.type][it.mb]);
    if (it.type > 0 && it.type < 4)
      deps = std::max(deps, sr[it.stage][it.type - 1][it.mb]);
    if (it.type == 4) { // the it.mb-th B of this rank, either chunk
      std::vector<long> bs = sr[it.stage][2];
      bs.insert(bs.end(), sr[it.stage][3].begin(), sr[it.stage][3].end());
      std::nth_element(bs.begin(), bs.begin() + it.mb, bs.end());
      deps = std::max(deps, bs[size_t(it.mb)]);
    }
    if (it.mb > 0)
      deps = std::max(deps, sr[it.stage][it.type][it.mb - 1]);
    ++deps;
    const long original = it.time;
    bool ok = false;
    for (long t = deps; t < original; ++t) {
      if (occupied[it.stage][t])
        continue;
      slot = t;
      if (memOfStage(sr[it.stage]) <= currentMem) {
        ok = true;
        break;
      }
    }
    if (!ok)
      slot = original;
    occupied[it.stage][slot] = 1;
  }
  if (!considerW)
    for (Lists &s : sr)
      putW(s, /*split=*/false);
  return squeeze(sr);
}

Schedule genControllable(const GenOptions &opts, bool vMin) {
  const int p = opts.ranks, m = opts.microbatches;
  Stages sr(p, Lists(4));
  const auto block = buildingBlock(p, vMin);
  for (int st = 0; st < p; ++st)
    for (int t = 0; t < 4; ++t) {
      sr[st][t].resize(size_t(m));
      for (int mb = 0; mb < m; ++mb)
        sr[st][t][mb] = block[st][t] + kPeriod * mb;
    }
  Stages r1 = reorder(std::move(sr), /*considerW=*/true);
  for (Lists &s : r1)
    s.resize(4);
  Stages r2 = reorder(std::move(r1), /*considerW=*/false);
  for (Lists &s : r2) {
    s.resize(4);
    putW(s, /*split=*/true);
  }

  Schedule s = makeSchedule(vMin ? "v-min" : "v-half", Placement::vShape(p), m);
  for (int r = 0; r < p; ++r) {
    std::vector<std::pair<long, Work>> order;
    order.reserve(6 * size_t(m));
    const int chunk0 = r, chunk1 = 2 * p - 1 - r;
    static constexpr WorkKind kKind[6] = {WorkKind::F, WorkKind::F,
                                          WorkKind::B, WorkKind::B,
                                          WorkKind::W, WorkKind::W};
    const int stageOf[6] = {chunk0, chunk1, chunk1, chunk0, chunk1, chunk0};
    for (int t = 0; t < 6; ++t)
      for (int mb = 0; mb < m; ++mb)
        order.push_back({r2[r][t][mb], makeWork(kKind[t], stageOf[t], mb)});
    std::sort(order.begin(), order.end(),
              [](const auto &a, const auto &b) { return a.first < b.first; });
    std::vector<Action> &prog = s.programs[r];
    reserveProgram(prog, order.size());
    for (const auto &[slot, w] : order)
      prog.push_back(Action::compute(w));
  }
  return s;
}

} // namespace

Schedule genVHalf(const GenOptions &opts) {
  return genControllable(opts, /*vMin=*/false);
}
Schedule genVMin(const GenOptions &opts) {
  return genControllable(opts, /*vMin=*/true);
}

} // namespace pipeforge::sched::detail
