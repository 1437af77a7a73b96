//===- Partition.cpp - Optimal contiguous cuts of a layer chain -----------===//
//
// Two dynamic programs over suffixes: state (s, i) = "stages s..k-1 hold
// layers i..L-1". The first finds the smallest achievable maximum stage cost
// M*; the second, restricted to stages of cost <= M*, minimises the sum of
// squared stage costs and, scanning the end of the current stage upwards
// with a strict comparison, keeps the earliest cut among exact ties.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Partition/Partition.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

namespace pipeforge::partition {

int StageCut::firstLayer(int stage) const {
  int first = 0;
  for (int s = 0; s < stage && s < numStages(); ++s)
    first += sizes[s];
  return first;
}

int StageCut::stageOf(int layer) const {
  if (layer < 0)
    return -1;
  int end = 0;
  for (int s = 0; s < numStages(); ++s) {
    end += sizes[s];
    if (layer < end)
      return s;
  }
  return -1;
}

double rangeCost(const std::vector<double> &costs, int begin, int end) {
  double sum = 0;
  for (int i = end - 1; i >= begin; --i)
    sum += costs[i];
  return sum;
}

static Status checkCosts(const std::vector<double> &costs) {
  if (costs.empty())
    return Status::error("the model has no layers to partition");
  for (size_t i = 0; i < costs.size(); ++i)
    if (!std::isfinite(costs[i]) || costs[i] < 0)
      return Status::error("layer " + std::to_string(i) + " has cost " +
                           std::to_string(costs[i]) +
                           "; costs must be finite and non-negative");
  return Status::ok();
}

/// Fills the cost fields of `cut` from its sizes.
static StageCut measure(const std::vector<double> &costs,
                        std::vector<int> sizes) {
  StageCut cut;
  cut.sizes = std::move(sizes);
  int begin = 0;
  double total = 0;
  for (int size : cut.sizes) {
    double c = rangeCost(costs, begin, begin + size);
    cut.stageCosts.push_back(c);
    total += c;
    begin += size;
  }
  cut.maxCost = *std::max_element(cut.stageCosts.begin(), cut.stageCosts.end());
  cut.minCost = *std::min_element(cut.stageCosts.begin(), cut.stageCosts.end());
  cut.meanCost = total / cut.numStages();
  cut.imbalance = cut.meanCost > 0 ? cut.maxCost / cut.meanCost : 1.0;
  return cut;
}

Expected<StageCut> partitionBalanced(const std::vector<double> &costs,
                                     int numStages) {
  if (numStages < 1)
    return Status::error("the number of stages must be at least 1, got " +
                         std::to_string(numStages));
  if (Status st = checkCosts(costs); !st)
    return st;
  const int n = static_cast<int>(costs.size()), k = numStages;
  if (k > n)
    return Status::error("cannot cut " + std::to_string(n) + " layer" +
                         (n == 1 ? "" : "s") + " into " + std::to_string(k) +
                         " stages: every stage needs at least one layer");

  const double inf = std::numeric_limits<double>::infinity();
  // Stage s may start at layer i only if s <= i and the k - s stages from
  // s on can each get a layer: i <= n - (k - s). Stage s starting at i ends
  // at j in (i, n - (k - s - 1)].
  auto idx = [n](int s, int i) { return static_cast<size_t>(s) * (n + 1) + i; };

  // range[i][j] = rangeCost(costs, i, j), built right to left as it sums.
  std::vector<double> range(static_cast<size_t>(n + 1) * (n + 1), 0.0);
  for (int j = 1; j <= n; ++j) {
    double sum = 0;
    for (int i = j - 1; i >= 0; --i)
      range[idx(i, j)] = sum += costs[i];
  }

  // Pass 1: best[s][i] = the smallest maximum stage cost of stages s..k-1
  // over layers i..n-1.
  std::vector<double> best(static_cast<size_t>(k + 1) * (n + 1), inf);
  best[idx(k, n)] = 0;
  for (int s = k - 1; s >= 0; --s) {
    for (int i = s; i <= n - (k - s); ++i) {
      double b = inf;
      for (int j = i + 1; j <= n - (k - s - 1); ++j)
        b = std::min(b, std::max(range[idx(i, j)], best[idx(s + 1, j)]));
      best[idx(s, i)] = b;
    }
  }
  const double bound = best[idx(0, 0)];

  // Pass 2: squares[s][i] = the smallest sum of squared stage costs of
  // stages s..k-1 over layers i..n-1 with every stage cost <= bound;
  // next[s][i] = the end of stage s in the earliest such cut.
  std::vector<double> squares(best.size(), inf);
  std::vector<int> next(best.size(), -1);
  squares[idx(k, n)] = 0;
  for (int s = k - 1; s >= 0; --s) {
    for (int i = s; i <= n - (k - s); ++i) {
      for (int j = i + 1; j <= n - (k - s - 1); ++j) {
        double c = range[idx(i, j)];
        if (c > bound)
          break; // costs are non-negative: longer stages only cost more
        double rest = squares[idx(s + 1, j)];
        if (rest == inf)
          continue;
        double v = c * c + rest;
        if (v < squares[idx(s, i)]) {
          squares[idx(s, i)] = v;
          next[idx(s, i)] = j;
        }
      }
    }
  }

  std::vector<int> sizes;
  for (int s = 0, i = 0; s < k; ++s) {
    int j = next[idx(s, i)];
    if (j <= i) // unreachable: the optimum of pass 1 is feasible in pass 2
      return Status::error("internal error: no cut within the optimal bound");
    sizes.push_back(j - i);
    i = j;
  }
  return measure(costs, std::move(sizes));
}

Expected<StageCut> partitionWithLayout(const std::vector<double> &costs,
                                       const std::vector<int> &layout) {
  if (Status st = checkCosts(costs); !st)
    return st;
  if (layout.empty())
    return Status::error("the layout names no stages");
  long total = 0;
  for (size_t s = 0; s < layout.size(); ++s) {
    if (layout[s] < 1)
      return Status::error("layout gives stage " + std::to_string(s) + " " +
                           std::to_string(layout[s]) +
                           " layers; every stage needs at least one");
    total += layout[s];
  }
  if (total != static_cast<long>(costs.size()))
    return Status::error("layout covers " + std::to_string(total) +
                         " layers but the model has " +
                         std::to_string(costs.size()));
  return measure(costs, layout);
}

Expected<StageCut> partition(const std::vector<double> &costs, int numStages,
                             const std::vector<int> &layout) {
  if (layout.empty())
    return partitionBalanced(costs, numStages);
  if (static_cast<long>(layout.size()) != numStages)
    return Status::error("layout has " + std::to_string(layout.size()) +
                         " stages but " + std::to_string(numStages) +
                         " were requested");
  return partitionWithLayout(costs, layout);
}

Expected<std::vector<int>> parseLayout(const std::string &text) {
  std::vector<int> out;
  size_t pos = 0;
  while (true) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (item.empty() || item.size() > 9 ||
        !std::all_of(item.begin(), item.end(),
                     [](unsigned char c) { return std::isdigit(c); }))
      return Status::error("bad layout '" + text +
                           "': expected layer counts such as 3,4,4,3");
    out.push_back(std::stoi(item));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

} // namespace pipeforge::partition
