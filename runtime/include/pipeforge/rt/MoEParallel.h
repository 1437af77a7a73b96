//===- MoEParallel.h - nn.moe with experts split over ranks -----*- C++ -*-===//
//
// Expert parallelism (docs/runtime.md, "Expert parallelism"): the E ranks of
// an expert-parallel group each hold experts [e*El, (e+1)*El) (El = experts /
// E) of every moe layer; router, norms and attention are replicated. A moe
// kernel routes its own tokens locally (router, top-k, capacity: exactly as
// the single-process kernel), sends each kept (token, expert) assignment's
// row to the expert's owner (all-to-all), runs the local experts on what it
// received and sends the outputs back (all-to-all), then combines with the
// gates in (token, rank) order. The gradient kernels repeat the forward and
// exchange the row gradients the same way.
//
// Deterministic order: a source sends its assignments to rank d sorted by
// (expert, assignment index t*K + r); a receiver lays its rows out by (local
// expert, source rank, position in the source's list).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_MOEPARALLEL_H
#define PIPEFORGE_RT_MOEPARALLEL_H

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/Transport.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipeforge::rt {

/// OpKind::MoE, MoEBwdInput, MoEBwdWeight.
bool isMoEOp(OpKind kind);
/// Whether input `j` of a moe kernel of `kind` with `numInputs` inputs is
/// an expert weight (w1, w2, w3: inputs 2 .. after the router weight and x,
/// up to the trailing dy of the gradient kernels), i.e. sliced over the
/// group.
bool isMoEExpertOperand(OpKind kind, size_t numInputs, size_t j);

/// Runs one moe kernel over the expert-parallel group of `tr` (collective
/// over Group::Expert: every rank of the group must call it with the same
/// op). The expert operands (w1, w2, w3) point at this rank's slice
/// [El, ...] while their types keep the full [experts, ...] shape; the
/// expert gradient results are written to the first El experts' worth of
/// their buffers. Host-visible memory only.
Status runMoEParallel(const KernelCall &call, Transport &tr);

/// One moe kernel run in phases so that other work can run while its
/// all-to-alls are in flight: begin() routes and posts the dispatch; each
/// next() waits for the all-to-all in flight, computes, and posts the next
/// one (the last phase posts nothing). moe: 3 phases (dispatch, combine),
/// moe_bwd_input: 5 (dispatch and combine of the recomputed forward, dy rows
/// to the owners, dx rows back), moe_bwd_weight: 4. runMoEParallel runs the
/// phases back to back; a phased run computes the same bits. The call's
/// buffers must stay valid and untouched until done(). Collective over
/// Group::Expert: every rank of the group must post its all-to-alls in the
/// same order.
class MoEPhased {
public:
  static Expected<std::unique_ptr<MoEPhased>> begin(const KernelCall &call,
                                                    Transport &tr);
  ~MoEPhased();
  bool done() const;
  /// Phases still to run (0 when done).
  int phasesLeft() const;
  /// The next phase (waits for the all-to-all in flight first).
  Status next();
  /// What is in flight ("dispatch", "combine", ...), or null.
  const char *inFlight() const;
  /// One completed all-to-all: post time, wait entered, wait returned
  /// (steady clock seconds); appended by next().
  struct CommTiming {
    const char *what;
    double posted, waitStart, waitEnd;
  };
  std::vector<CommTiming> timings;

  struct State;

private:
  MoEPhased();
  std::unique_ptr<State> st;
};

/// The dispatch bookkeeping (exposed for tests). `topIdx` [N*K] expert per
/// assignment, `kept` [N*K] (capacity), `expertsPerRank` El, `ranks` E.
/// sendOrder[d]: the assignments sent to rank d, by (expert, assignment).
std::vector<std::vector<int32_t>>
moeDispatchOrder(const std::vector<int32_t> &topIdx,
                 const std::vector<char> &kept, int expertsPerRank, int ranks);

/// Receiver layout: given, per source rank, the local expert id of each
/// received row (in arrival order), the rows as (source, position) pairs
/// ordered by (local expert, source, position); `expertStart` [El + 1].
std::vector<std::pair<int32_t, int32_t>>
moeReceiveLayout(const std::vector<std::vector<int32_t>> &localExpertOfRow,
                 int expertsPerRank, std::vector<int64_t> &expertStart);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_MOEPARALLEL_H
