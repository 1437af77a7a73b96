//===- CsvFuzzer.cpp - PyTorch schedule CSV import ------------------------===//
//
// What pipeforge-sched --import-csv does: runScheduleJob with the CSV text
// (importCsv, then the verifier and the simulator on what it accepts), and
// the text grid, the format that once ran out of memory on overflowing
// times.
//
// An input whose first line starts with "COSTS" gives the cost model the
// rest is timed with, as numbers in the order tf tb tw tbw tfb tcomm ta2a
// moe-layers overlap-comm (any may be missing; strtod's syntax, so 1e308,
// inf and nan reach the job): costs whose sums overflow must be refused
// (docs/reliability.md), and whatever the job accepts must have finite
// times.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Job.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

using namespace pipeforge;

namespace {
/// Reads the "COSTS ..." line into the job; returns the rest of the text.
std::string takeCosts(const std::string &text, sched::ScheduleJob &job) {
  if (text.compare(0, 5, "COSTS") != 0)
    return text;
  size_t nl = text.find('\n');
  std::string line = text.substr(5, nl == std::string::npos ? nl : nl - 5);
  double *fields[] = {&job.tf,   &job.tb,    &job.tw,
                      &job.tbw,  &job.tfb,   &job.tcomm,
                      &job.ta2a};
  const char *p = line.c_str();
  for (double *f : fields) {
    char *end = nullptr;
    double v = std::strtod(p, &end);
    if (end == p)
      break;
    *f = v;
    p = end;
  }
  char *end = nullptr;
  long layers = std::strtol(p, &end, 10);
  if (end != p) {
    // Up to 64 MoE layers a stage: a replay keeps every layer's
    // all-to-alls (about 160 bytes a layer and action), and 64 KiB of CSV
    // at the library's bound (kMaxMoELayerSteps) is past the harness's
    // 2 GiB; the bound itself is unit-tested (SimulatorTest).
    job.moeLayers = int(std::max(-1000L, std::min(layers, 64L)));
    p = end;
    long overlap = std::strtol(p, &end, 10);
    if (end != p)
      job.overlapComm = overlap != 0;
  }
  return nl == std::string::npos ? std::string() : text.substr(nl + 1);
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  sched::ScheduleJob job;
  std::string text = takeCosts(
      std::string(reinterpret_cast<const char *>(data), size), job);
  job.csvText = std::make_shared<const std::string>(std::move(text));
  auto r = sched::runScheduleJob(job);
  if (!r)
    return 0;
  if (!std::isfinite(r->sim.makespan) || !(r->sim.makespan >= 0))
    fuzz::invariantBroken("an accepted job has a makespan of " +
                          std::to_string(r->sim.makespan));
  (void)sched::exportCsv(r->schedule);
  (void)sched::renderScheduleJob(*r, "text");
  return 0;
}
