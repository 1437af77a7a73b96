//===- ExportJson.h - A schedule as JSON, and back --------------*- C++ -*-===//
//
// The JSON form of a schedule (schema: docs/schedule-json.md): written as a
// string or streamed, and parsed back. Part of the schedule core that the
// contract holds (contract/CMakeLists.txt): the program file keeps its
// schedule in this form. Export.h declares the other formats and includes
// this header.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_EXPORTJSON_H
#define PIPEFORGE_SCHEDULE_EXPORTJSON_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Simulator.h"

#include <functional>
#include <iosfwd>
#include <string>

namespace pipeforge::sched {

/// The schedule as JSON (docs/schedule-json.md). With `sim`, adds the
/// "summary" (makespan, bubble rates, per-rank peak activation in units of
/// cost.memB, busy time, exposed communication).
std::string exportJson(const Schedule &s, const SimResult *sim = nullptr,
                       const CostModel &cost = {}, int indent = 2);

class JsonWriter;
/// The same text, written to `os` as it is formed (no document is built: a
/// schedule of millions of actions streams). `moreSummary`, when set, adds
/// members at the end of the "summary" object (written only with `sim`).
void exportJson(const Schedule &s, std::ostream &os,
                const SimResult *sim = nullptr, int indent = 2,
                const std::function<void(JsonWriter &)> &moreSummary = {});

/// Parses exportJson's output back (the summary is ignored).
Expected<Schedule> importJson(const std::string &text);

} // namespace pipeforge::sched

#endif // PIPEFORGE_SCHEDULE_EXPORTJSON_H
