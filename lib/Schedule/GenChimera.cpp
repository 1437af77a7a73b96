//===- GenChimera.cpp - Chimera (bidirectional pipelines, SC'21) ----------===//
//
// Li and Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks
// with Bidirectional Pipelines" (SC'21). Two model copies of D stages on D
// ranks (Placement::dual): the "down" pipeline (copy 0) has stage s on rank
// s, the "up" pipeline (copy 1) stage s on rank D-1-s. The backward is the
// full BW (no B/W split, no overlapped pairs). The two copies' weight
// gradients are summed at the end (GradReduce, inserted with the messages).
//
// Basic unit (N = D microbatches in all, D/2 per direction). The paper's
// figure is a table of unit-width cells, F and BW one cell each. Microbatch
// k (0 <= k < D/2) of either direction runs
//
//   F  of its stage s at cell          s + 2k
//   BW of its stage s at cell   2D - 1 - s + 2k
//
// on the rank that holds the stage: forwards enter every other cell, the
// last stage turns a microbatch around at once, and the backwards follow
// the forwards' pattern back up. No two cells of one rank coincide (a
// rank's F and BW cells of one direction, and its two directions' F cells
// or BW cells, differ in parity; an F of one direction and a BW of the
// other would need k >= D/2), so a rank's program is its cells in time
// order; the same holds across concatenated units. Each rank
// runs 2D cells in a 3D-2 cell unit: D-2 idle cells, i.e. D/2 - 1 bubbles
// of one F + one BW, against 1F1B's D - 1 (the paper's bubble ratio
// (D-2) / (2N+D-2)). For D = 4, rank 0 runs
//
//   F0.0 F0.1 F3.0@1 BW3.0@1 F3.1@1 BW3.1@1 BW0.0 BW0.1
//
// More microbatches (N = kD): direct concatenation (the paper's section
// 3.5, figure 5a) of k basic units, unit u taking microbatches u D/2 ..
// (u+1) D/2 - 1 of each direction and starting 2D cells after unit u-1:
// the next unit's forwards fill the cells the previous unit's backwards
// leave idle, so with F = BW there are no bubbles between units. Neither
// forward doubling nor backward halving (the paper's other two N > D
// variants) is implemented.
//
// Cross-checked (for D = 2..10, one to three units) against a
// re-derivation of the block construction of a public Chimera reference
// implementation (a forward block and a backward block per unit, each
// block merged into the idle cells of the one before from its half on;
// plain forward blocks, without its forward doubling): the same per-rank
// orders.
//
//===----------------------------------------------------------------------===//

#include "GenUtil.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace pipeforge::sched::detail {

/// opts.microbatches is the total N (N/2 per copy), a multiple of the even
/// rank count D (generate() checked both).
Schedule genChimera(const GenOptions &opts) {
  const int d = opts.ranks, n = opts.microbatches;
  const int half = d / 2, units = n / d;
  Schedule s = makeSchedule("chimera", Placement::dual(d), n / 2);
  for (int r = 0; r < d; ++r) {
    // (cell, work) of every F and BW this rank runs.
    std::vector<std::pair<int64_t, Work>> cells;
    cells.reserve(2 * size_t(n));
    for (int copy = 0; copy < 2; ++copy) {
      const int stage = copy == 0 ? r : d - 1 - r;
      for (int u = 0; u < units; ++u) {
        const int64_t base = 2 * int64_t(d) * u;
        for (int k = 0; k < half; ++k) {
          const int mb = u * half + k;
          cells.push_back({base + stage + 2 * k,
                           makeWork(WorkKind::F, stage, mb, copy)});
          cells.push_back({base + 2 * d - 1 - stage + 2 * k,
                           makeWork(WorkKind::BW, stage, mb, copy)});
        }
      }
    }
    std::sort(cells.begin(), cells.end(),
              [](const auto &a, const auto &b) { return a.first < b.first; });
    std::vector<Action> &prog = s.programs[r];
    reserveProgram(prog, cells.size());
    for (const auto &c : cells)
      prog.push_back(Action::compute(c.second));
  }
  return s;
}

} // namespace pipeforge::sched::detail
