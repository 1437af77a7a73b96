//===- Export.h - Schedule export and import formats ------------*- C++ -*-===//
//
// Human- and tool-readable forms of a schedule:
//   - a compact text grid (one row per rank, one column per time slot),
//   - JSON (schema: docs/schedule-json.md), with import (ExportJson.h),
//   - PyTorch torch.distributed.pipelining CSV, with import,
//   - an SVG timeline,
//   - a Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev).
// The timed forms take a SimResult of the same schedule (see simulate()).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_EXPORT_H
#define PIPEFORGE_SCHEDULE_EXPORT_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/ExportJson.h"
#include "pipeforge/Schedule/Simulator.h"

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>

namespace pipeforge::sched {

//===----------------------------------------------------------------------===//
// Text grid
//===----------------------------------------------------------------------===//

/// One row per rank, one column per time slot (the shortest compute of the
/// simulation). A cell shows kind and microbatch ("F3", "B3", "W3", "BW3",
/// "F3+BW1" for an overlapped pair); where a rank holds several stages the
/// rank-local chunk follows after a dot ("F3.1" is the second chunk). "."
/// is idle; "-" continues a longer action. Messages are not shown.
std::string exportTextGrid(const Schedule &s, const SimResult &sim);
/// The same, written to `os` as it is formed (for schedules of millions of
/// actions: a byte per grid column and the labels, no whole-output string;
/// the lines go out in blocks of 512k columns).
void exportTextGrid(const Schedule &s, const SimResult &sim, std::ostream &os);
namespace detail {
/// exportTextGrid with the lines cut into blocks of `blockColumns` (>= 1)
/// columns: the output is the same for every block size (tests cut small
/// grids into many blocks).
void exportTextGrid(const Schedule &s, const SimResult &sim, std::ostream &os,
                    size_t blockColumns);
} // namespace detail

// JSON: exportJson and importJson, in ExportJson.h (the schedule core).

//===----------------------------------------------------------------------===//
// PyTorch CSV
//===----------------------------------------------------------------------===//

struct CsvOptions {
  /// Write SEND_F / RECV_F / SEND_B / RECV_B cells and ZeRO-3's
  /// `<s>UNSHARD` / `<s>RESHARD` (when the schedule has them); false
  /// writes the compute actions only.
  bool withComm = true;
  /// PyTorch's own dialect (torch.distributed.pipelining, checked against
  /// PyTorch 2.15's _PipelineScheduleRuntime: docs/schedule-library.md):
  /// exactly what its `compute_comms` loader and runtime accept and need,
  /// nothing of PipeForge's. Where the schedule has its messages (and
  /// withComm), each row is a `compute_comms` row: `<s>UNSHARD` for each of
  /// the rank's stages before its first compute, `<s>REDUCE_GRAD` and
  /// `<s>WAIT_REDUCE_GRAD` after the stage's last W or B (PyTorch scales the
  /// gradients by 1/M there and nowhere else), `<s>WAIT_SEND_F<mb>` after
  /// the local backward of the forward sent (PyTorch's _add_wait_send),
  /// then `<s>RESHARD` per stage and the waits of the sends still pending
  /// (every SEND_B) at the row's end; a schedule with its own gathers
  /// (ZeRO-3) has its UNSHARD / RESHARD where they stand instead. Otherwise it is a `compute_only` row
  /// (compute cells; PyTorch's loader adds the rest). A two-copy schedule
  /// (DualPipe, Chimera) has no PyTorch form: check pytorchCsvSupported()
  /// first; exportCsv writes no rows for it in this mode.
  bool pytorchStrict = false;
};

/// Whether PyTorch's runtime can hold `s` (CsvOptions::pytorchStrict): ok
/// for one copy of the stages; an error naming the schedule for two copies
/// (PyTorch maps each stage index to one rank and runs every microbatch
/// through stages 0..n-1, so a second copy of a stage on another rank, fed
/// from the other end, and the reduction of the two copies' gradients
/// cannot be written).
Status pytorchCsvSupported(const Schedule &s);

/// One row per rank, one cell per action: <stage><kind><mb> with kinds F,
/// I (our B), W, B (our BW), SEND_F, RECV_F, SEND_B, RECV_B (the stage of
/// a RECV is the receiving stage, as in PyTorch), overlapped pairs as
/// "(<F cell>;<B or I cell>)OVERLAP_F_B". Stages are global: copy c stage s
/// is written as c * numStages + s. Weight-gradient send/recv are omitted.
/// PipeForge's dialect (the default) adds GRADREDUCE_r<peer> for the
/// gradient reduction of DualPipe's two copies; pytorchStrict writes
/// PyTorch's instead (see CsvOptions).
std::string exportCsv(const Schedule &s, const CsvOptions &opts = {});
/// The same, written to `os` as it is formed.
void exportCsv(const Schedule &s, std::ostream &os,
               const CsvOptions &opts = {});

struct CsvImportOptions {
  /// The placement to read stages against (required for DualPipe's two
  /// copies). Without it, a single copy is assumed: stage k lives on the
  /// row where it is computed, stages = max stage + 1.
  std::optional<Placement> placement;
  std::string name = "csv";
  /// Where to count the FSDP actions of a PyTorch `compute_comms` dump
  /// (REDUCE_GRAD, WAIT_REDUCE_GRAD; UNSHARD and RESHARD are ZeRO-3's gathers
  /// and import as such): they have no
  /// PipeForge equivalent in a pipeline schedule and are skipped. Null: not
  /// counted.
  int64_t *ignoredFsdpActions = nullptr;
  /// Where to count the waits for a posted send (WAIT_SEND_F, WAIT_SEND_B),
  /// skipped too: a PipeForge send completes on its own and the receive
  /// carries the dependency. Null: not counted.
  int64_t *ignoredWaitActions = nullptr;
};

/// Parses a PyTorch schedule CSV into a Schedule. Malformed cells give an
/// error naming the row and column (both 0-based, row = rank). A line with
/// no cell text is blank: skipped before the first row and after the last,
/// an error between rows; every row must hold a compute cell (a row of only
/// skipped cells is an error wherever it is).
Expected<Schedule> importCsv(const std::string &text,
                             const CsvImportOptions &opts = {});

//===----------------------------------------------------------------------===//
// SVG timeline and Chrome trace
//===----------------------------------------------------------------------===//

struct SvgOptions {
  /// Pixels per time unit; 0 picks one that makes the plot ~1600 px wide.
  double pxPerUnit = 0;
  /// Draw an arrow per message (off automatically above this many).
  size_t maxArrows = 4000;
};

/// One lane per rank (colour per kind: F, B, W, BW, FB; microbatch labels),
/// under it a thin comm lane (receive waits in red, sends as ticks), arrows
/// from send to receive, a time axis and a legend. With the communication
/// model (SimResult::commIntervals non-empty) the comm lane is taller: the
/// comm resource's all-to-alls and P2P transfers above, exposed waits in red
/// below; ZeRO-3's parameter gathers that take time are drawn there too.
std::string exportSvg(const Schedule &s, const SimResult &sim,
                      const SvgOptions &opts = {});

struct TraceOptions {
  /// Trace microseconds per time unit (1000: cost units are ms).
  double usPerUnit = 1000;
};

/// Chrome trace-event JSON: one process per rank with a "compute" and a
/// "comm" thread, flow arrows ("ph":"s"/"f") from each Send to its Recv (or,
/// in a compute-only schedule, along each cross-rank dependency). With the
/// communication model, all-to-alls and P2P transfers go on the comm thread
/// and exposed waits ("exposed a2a", "exposed p2p") on the compute thread.
/// UNSHARD / RESHARD are instants on the comm thread (category "gather");
/// a gather that takes time is also a span there ("gather UNSHARD 3").
std::string exportTrace(const Schedule &s, const SimResult &sim,
                        const TraceOptions &opts = {});

} // namespace pipeforge::sched

#endif // PIPEFORGE_SCHEDULE_EXPORT_H
