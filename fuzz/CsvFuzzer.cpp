//===- CsvFuzzer.cpp - PyTorch schedule CSV import ------------------------===//
//
// What pipeforge-sched --import-csv does: runScheduleJob with the CSV text
// (importCsv, then the verifier and the simulator on what it accepts).
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Job.h"

using namespace pipeforge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  sched::ScheduleJob job;
  job.csvText = std::make_shared<const std::string>(
      reinterpret_cast<const char *>(data), size);
  auto r = sched::runScheduleJob(job);
  if (r)
    (void)sched::exportCsv(r->schedule);
  return 0;
}
