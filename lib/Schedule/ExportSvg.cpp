//===- ExportSvg.cpp - SVG timeline of a simulated schedule ---------------===//

#include "pipeforge/Schedule/Export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace pipeforge::sched {

namespace {
constexpr double kLeft = 64, kTop = 44, kLane = 24, kGap = 8;

const char *colourOf(const Action &a) {
  if (a.kind == ActionKind::Overlap)
    return "#b07aa1"; // FB purple
  switch (a.work.kind) {
  case WorkKind::F:
    return "#4e79a7"; // blue
  case WorkKind::B:
    return "#59a14f"; // green
  case WorkKind::W:
    return "#edc948"; // yellow
  case WorkKind::BW:
    return "#f28e2b"; // orange
  }
  return "#999999";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string esc(const std::string &s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}

/// A round tick step giving about `target` ticks over `span`.
double tickStep(double span, int target) {
  double raw = span / std::max(1, target);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw)
      return m * mag;
  return 10 * mag;
}
} // namespace

namespace {
/// The SVG of one simulated schedule, in phases: the layout (lanes, scale),
/// the header and legend, the lanes, the intervals (compute, message
/// marks, waits), the comm resource's intervals, the message arrows and
/// the time axis.
class SvgWriter {
public:
  SvgWriter(const Schedule &s, const SimResult &sim, const SvgOptions &opts);
  std::string write() {
    writeHeader();
    writeLanes();
    writeIntervals();
    writeCommIntervals();
    writeArrows();
    writeAxis();
    o += "</svg>\n";
    return std::move(o);
  }

private:
  double laneY(int r) const { return kTop + r * kStride; }
  void writeHeader();
  void writeLanes();
  /// Compute and comm intervals; per channel the send and recv points.
  void writeIntervals();
  void writeCompute(const Interval &iv, const Action &a, double x, double w,
                    double y);
  void writeMessage(const Interval &iv, const Action &a, double x, double w,
                    double y);
  /// Comm resource: all-to-alls and transfers (upper part of the comm
  /// lane), exposed waits (lower part, red).
  void writeCommIntervals();
  /// Message arrows, FIFO per channel.
  void writeArrows();
  void writeAxis();

  const Schedule &s;
  const SimResult &sim;
  const SvgOptions &opts;
  const int p;
  // With the communication model (all-to-alls, comm resource) the comm
  // lane is taller: occupancy above, exposed waits below.
  const bool commModel;
  const double kCommLane, kStride;
  double span, px, plotW, width, axisY, height;
  /// Per rank: the number of each (copy, stage) it holds; a second chunk
  /// or copy on a rank is drawn lighter.
  std::vector<std::map<std::pair<int, int>, int>> chunk;
  std::string o;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> sends,
      recvs; // (x, y)
  // Per channel: x where each message arrives (with overlapComm a Recv is
  // posted early; the arrow ends when the transfer does).
  std::map<std::pair<int, int>, std::vector<double>> arrivals;
  std::map<std::pair<int, size_t>, double> transferEnd;
};

SvgWriter::SvgWriter(const Schedule &s, const SimResult &sim,
                     const SvgOptions &opts)
    : s(s), sim(sim), opts(opts), p(s.numRanks()),
      commModel(!sim.commIntervals.empty()),
      kCommLane(commModel ? 16 : 8), kStride(kLane + kCommLane + kGap) {
  span = sim.makespan > 0 ? sim.makespan : 1;
  px = opts.pxPerUnit > 0 ? opts.pxPerUnit : 1600.0 / span;
  plotW = span * px;
  width = kLeft + plotW + 24;
  axisY = kTop + p * kStride + 4;
  height = axisY + 56;
  chunk.resize(p);
  for (int c = 0; c < static_cast<int>(s.placement.rankOf.size()); ++c)
    for (int st = 0; st < static_cast<int>(s.placement.rankOf[c].size()); ++st)
      if (int r = s.placement.rankOf[c][st]; r >= 0 && r < p)
        chunk[r].emplace(std::make_pair(c, st), 0);
  for (auto &m : chunk) {
    int k = 0;
    for (auto &kv : m)
      kv.second = k++;
  }
}

void SvgWriter::writeHeader() {
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) +
       "\" height=\"" + num(height) + "\" font-family=\"sans-serif\" "
       "font-size=\"10\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(kLeft) + "\" y=\"16\" font-size=\"13\">" +
       esc(s.name.empty() ? "schedule" : s.name) + ": " + std::to_string(p) +
       " ranks, " + std::to_string(s.numMicrobatches) +
       " microbatches, makespan " + num(sim.makespan) + ", bubble " +
       num(100 * sim.bubbleRate) + "%</text>\n";
  // Legend.
  const std::pair<const char *, const char *> legend[] = {
      {"#4e79a7", "F"},   {"#59a14f", "B (input grad)"},
      {"#edc948", "W"},   {"#f28e2b", "BW (full backward)"},
      {"#b07aa1", "F&B overlapped"}, {"#e15759", "recv wait"}};
  std::vector<std::pair<const char *, const char *>> items(
      std::begin(legend), std::end(legend));
  if (commModel) {
    items.back().second = "exposed comm";
    items.push_back({"#76b7b2", "all-to-all"});
    items.push_back({"#9c755f", "P2P transfer"});
  }
  double lx = kLeft;
  for (const auto &[col, text] : items) {
    o += "<rect x=\"" + num(lx) + "\" y=\"24\" width=\"10\" height=\"10\" "
         "fill=\"" + col + "\"/><text x=\"" + num(lx + 13) +
         "\" y=\"33\">" + esc(text) + "</text>\n";
    lx += 24 + 6.5 * std::string(text).size();
  }
}

void SvgWriter::writeLanes() {
  for (int r = 0; r < p; ++r) {
    double y = laneY(r);
    o += "<text x=\"" + num(kLeft - 8) + "\" y=\"" + num(y + kLane / 2 + 4) +
         "\" text-anchor=\"end\">rank " + std::to_string(r) + "</text>\n";
    o += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(y) + "\" width=\"" +
         num(plotW) + "\" height=\"" + num(kLane) +
         "\" fill=\"#f4f4f4\"/>\n";
  }
}

void SvgWriter::writeIntervals() {
  for (const CommInterval &ci : sim.commIntervals)
    if (ci.kind == CommInterval::P2P)
      transferEnd[{ci.rank, ci.actionIndex}] = kLeft + ci.end * px;
  for (const Interval &iv : sim.intervals) {
    if (iv.rank < 0 || iv.rank >= p)
      continue;
    const Action &a = s.programs[iv.rank][iv.actionIndex];
    double x = kLeft + iv.start * px, w = (iv.end - iv.start) * px;
    double y = laneY(iv.rank);
    if (a.isLocalAux())
      continue; // posted and released on the rank's gather channel
    if (!a.isComm())
      writeCompute(iv, a, x, w, y);
    else
      writeMessage(iv, a, x, w, y);
  }
}

void SvgWriter::writeCompute(const Interval &iv, const Action &a, double x,
                             double w, double y) {
  bool light = chunk[iv.rank][{a.work.copy, a.work.stage}] > 0;
  std::string label = std::to_string(a.work.mb);
  if (a.kind == ActionKind::Overlap)
    label += "|" + std::to_string(a.work2.mb);
  o += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
       "\" height=\"" + num(kLane) + "\" fill=\"" + colourOf(a) + "\"" +
       (light ? " fill-opacity=\"0.6\"" : "") +
       " stroke=\"white\" stroke-width=\"0.5\"><title>" + esc(toString(a)) +
       " [" + num(iv.start) + ", " + num(iv.end) + "]</title></rect>\n";
  if (w >= 6.0 * label.size() + 2)
    o += "<text x=\"" + num(x + w / 2) + "\" y=\"" +
         num(y + kLane / 2 + 3.5) +
         "\" text-anchor=\"middle\" fill=\"white\">" + label + "</text>\n";
}

void SvgWriter::writeMessage(const Interval &iv, const Action &a, double x,
                             double w, double y) {
  double cy = y + kLane + 1;
  if (a.kind == ActionKind::Send) {
    o += "<rect x=\"" + num(x - 0.5) + "\" y=\"" + num(cy) +
         "\" width=\"1\" height=\"" + num(kCommLane - 2) +
         "\" fill=\"#333\"><title>" + esc(toString(a)) + " at " +
         num(iv.start) + "</title></rect>\n";
    sends[{iv.rank, a.peer}].push_back({x, cy + (kCommLane - 2) / 2});
    auto te = transferEnd.find({iv.rank, iv.actionIndex});
    arrivals[{iv.rank, a.peer}].push_back(te != transferEnd.end() ? te->second
                                                                 : x);
    return;
  }
  if (w > 0)
    o += "<rect x=\"" + num(x) + "\" y=\"" + num(commModel ? cy + 9 : cy) +
         "\" width=\"" + num(w) + "\" height=\"" +
         num(commModel ? 5 : kCommLane - 2) + "\" fill=\"#e15759\"><title>" +
         esc(toString(a)) + " waits [" + num(iv.start) + ", " + num(iv.end) +
         "]</title></rect>\n";
  if (a.kind == ActionKind::Recv)
    recvs[{a.peer, iv.rank}].push_back({x + w, cy + (kCommLane - 2) / 2});
}

void SvgWriter::writeCommIntervals() {
  for (const CommInterval &ci : sim.commIntervals) {
    if (ci.rank < 0 || ci.rank >= p || ci.end <= ci.start)
      continue;
    double x = kLeft + ci.start * px, w = (ci.end - ci.start) * px;
    double cy = laneY(ci.rank) + kLane + 1;
    bool exposed = ci.kind == CommInterval::ExposedA2A ||
                   ci.kind == CommInterval::ExposedP2P;
    const char *what = ci.kind == CommInterval::A2A
                           ? (ci.which ? "combine" : "dispatch")
                       : ci.kind == CommInterval::P2P ? "P2P transfer"
                       : ci.kind == CommInterval::Gather
                           ? "parameter gather"
                       : ci.kind == CommInterval::Copy ? "offload copy"
                       : ci.kind == CommInterval::ExposedA2A
                           ? "exposed all-to-all"
                           : "exposed P2P";
    std::string title = what;
    if (ci.kind == CommInterval::Gather || ci.kind == CommInterval::Copy)
      title = toString(s.programs[ci.rank][ci.actionIndex]);
    if (ci.kind == CommInterval::A2A)
      title += std::string(ci.member ? " (B" : " (F") + ", layer " +
               std::to_string(ci.layer) + ")";
    o += "<rect x=\"" + num(x) + "\" y=\"" +
         num(exposed ? cy + 9 : cy) + "\" width=\"" + num(w) +
         "\" height=\"" + num(exposed ? 5 : 8) + "\" fill=\"" +
         (exposed                           ? "#e15759"
          : ci.kind == CommInterval::A2A    ? "#76b7b2"
          : ci.kind == CommInterval::Gather ? "#b07aa1"
          : ci.kind == CommInterval::Copy   ? "#59a14f"
                                            : "#9c755f") +
         "\" stroke=\"white\" stroke-width=\"0.3\"><title>" + esc(title) +
         " [" + num(ci.start) + ", " + num(ci.end) + "]</title></rect>\n";
  }
}

void SvgWriter::writeArrows() {
  size_t nArrows = 0;
  for (const auto &kv : sends)
    if (auto it = recvs.find(kv.first); it != recvs.end())
      nArrows += std::min(kv.second.size(), it->second.size());
  if (nArrows == 0 || nArrows > opts.maxArrows)
    return;
  o += "<defs><marker id=\"arr\" markerWidth=\"6\" markerHeight=\"6\" "
       "refX=\"5\" refY=\"3\" orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" "
       "fill=\"#555\"/></marker></defs>\n<g stroke=\"#555\" "
       "stroke-width=\"0.6\" stroke-opacity=\"0.7\">\n";
  for (const auto &kv : sends) {
    auto it = recvs.find(kv.first);
    if (it == recvs.end())
      continue;
    size_t n = std::min(kv.second.size(), it->second.size());
    for (size_t k = 0; k < n; ++k)
      o += "<line x1=\"" + num(kv.second[k].first) + "\" y1=\"" +
           num(kv.second[k].second) + "\" x2=\"" +
           num(std::max(it->second[k].first, arrivals[kv.first][k])) +
           "\" y2=\"" + num(it->second[k].second) +
           "\" marker-end=\"url(#arr)\"/>\n";
  }
  o += "</g>\n";
}

void SvgWriter::writeAxis() {
  o += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(axisY) + "\" x2=\"" +
       num(kLeft + plotW) + "\" y2=\"" + num(axisY) +
       "\" stroke=\"black\"/>\n";
  double step = tickStep(span, 10);
  for (double t = 0; t <= span + 1e-9; t += step) {
    double x = kLeft + t * px;
    o += "<line x1=\"" + num(x) + "\" y1=\"" + num(axisY) + "\" x2=\"" +
         num(x) + "\" y2=\"" + num(axisY + 5) + "\" stroke=\"black\"/>";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", t);
    o += "<text x=\"" + num(x) + "\" y=\"" + num(axisY + 17) +
         "\" text-anchor=\"middle\">" + buf + "</text>\n";
  }
  o += "<text x=\"" + num(kLeft + plotW / 2) + "\" y=\"" + num(axisY + 34) +
       "\" text-anchor=\"middle\">time</text>\n";
}
} // namespace

std::string exportSvg(const Schedule &s, const SimResult &sim,
                      const SvgOptions &opts) {
  return SvgWriter(s, sim, opts).write();
}

} // namespace pipeforge::sched
