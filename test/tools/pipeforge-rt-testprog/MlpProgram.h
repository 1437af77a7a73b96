//===- MlpProgram.h - A hand-built residual MLP as a pipeline program -----===//
//
// A small residual MLP whose four functions per stage are written by hand
// following the role conventions of docs/split-backward.md, independent of
// the compiler (the runtime's tests use it to check the executor on its
// own):
//   stage 0:        tokens -> embedding(+positions) -> block
//   stages 1..S-2:  block
//   stage S-1:      block -> layernorm -> linear (LM head) -> cross_entropy
//   block(x) = x + gelu(linear(x))
// Vocabulary 16, sequence 4, 2 sequences per microbatch, hidden 8.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_TEST_MLPPROGRAM_H
#define PIPEFORGE_TEST_MLPPROGRAM_H

#include "pipeforge/rt/Program.h"

#include <string>

namespace pipeforge::testing {

/// The MLP under schedule `kind` (a schedule name, or "none": every stage on
/// one rank, sched::generateNone, the single-process reference for any
/// stage count) on `ranks` ranks with `stages` stages (< 0: the schedule's
/// own; none: 2), `mb` microbatches and `dp` data-parallel replicas. The
/// program is validated.
sched::Expected<rt::Program> buildMlpProgram(const std::string &kind, int ranks,
                                             int stages, int mb, int dp);

} // namespace pipeforge::testing

#endif // PIPEFORGE_TEST_MLPPROGRAM_H
