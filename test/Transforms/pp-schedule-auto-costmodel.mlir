// --pp-schedule kind=auto on a pipeline whose stages have bodies: per-stage
// M_B / M_W from the stash bytes of each @forward's nn ops (2 bytes per
// element) and per-stage times from their FLOPs; the memory limit in bytes
// or in M_B units (one microbatch's stash over all stages / ranks).
//
// Stage 0 stashes 1408 B per microbatch (F 8192 FLOPs), stage 1 384 B
// (F 1024 FLOPs), so one M_B is (1408 + 384) / 2 = 896 B.

// A limit below one microbatch's stage-0 stash is refused.
// RUN: not pipeforge-opt %s --pp-schedule="kind=auto microbatches=4 mem-limit=1000B time-limit=0" 2>&1 | FileCheck %s --check-prefix=LOW
// LOW: error: cannot build schedule 'auto': memory limit '1000B' (1000 B) is impossible: one microbatch's activations on rank 0 (stage 0) need 1408 B (1.38 KiB) (the stash of its forward ops at 2 bytes per element), so no schedule fits

// Exactly one microbatch's stash: rank 0 runs F B W one microbatch at a time.
// RUN: pipeforge-opt %s --pp-schedule="kind=auto microbatches=4 mem-limit=1408B time-limit=0" | FileCheck %s --check-prefix=ONE
// ONE:      pp.rank_program 0 {
// ONE-NEXT:   pp.compute F stage 0 mb 0
// ONE-NEXT:   pp.compute B stage 0 mb 0
// ONE-NEXT:   pp.compute W stage 0 mb 0
// ONE-NEXT:   pp.compute F stage 0 mb 1

// 2 M_B = 1792 B is one microbatch of stage 0 too (uniform stages would hold
// two): the memory deltas are per stage.
// RUN: pipeforge-opt %s --pp-schedule="kind=auto microbatches=4 mem-limit=2 time-limit=0" | FileCheck %s --check-prefix=ONE

// Room for two: the warm-up keeps two forwards in flight on rank 0.
// RUN: pipeforge-opt %s --pp-schedule="kind=auto microbatches=4 mem-limit=3000B time-limit=0" | FileCheck %s --check-prefix=TWO
// TWO:      pp.rank_program 0 {
// TWO-NEXT:   pp.compute F stage 0 mb 0
// TWO-NEXT:   pp.compute F stage 0 mb 1
// TWO-NEXT:   pp.compute B stage 0 mb 0

// Binary suffixes; the schedule passes the verifier under the same byte
// limit, and fails it under a smaller one, with the units spelled out.
// RUN: pipeforge-opt %s --pp-schedule="kind=auto microbatches=4 mem-limit=2.9KiB time-limit=0" | pipeforge-opt --pp-verify-schedule="mem-limit=2.9KiB" | FileCheck %s --check-prefix=TWO
// RUN: pipeforge-opt %s --pp-schedule="kind=auto microbatches=4 mem-limit=3000B time-limit=0" | not pipeforge-opt --pp-verify-schedule="mem-limit=2000B" 2>&1 | FileCheck %s --check-prefix=VERIFY
// VERIFY: error: invalid schedule: rank 0, step 1: activation memory 3.142857 exceeds the limit 2.232143
// VERIFY: note: memory in units of M_B = 896 B (one microbatch's stash over all stages / ranks); mem-limit '2000B' = 2000 B

// bytes-per-element scales the stash: at 4 bytes stage 0 needs 2816 B.
// RUN: not pipeforge-opt %s --pp-schedule="kind=auto microbatches=4 mem-limit=2KB bytes-per-element=4 time-limit=0" 2>&1 | FileCheck %s --check-prefix=BPE
// BPE: need 2816 B (2.75 KiB) (the stash of its forward ops at 4 bytes per element)

// A unit it does not know.
// RUN: not pipeforge-opt %s --pp-schedule="kind=auto microbatches=4 mem-limit=3Gb" 2>&1 | FileCheck %s --check-prefix=UNIT
// UNIT: error: mem-limit: memory limit '3Gb' has an unknown unit 'Gb'; expected a number of M_B (e.g. 3.5), <k>p for k x ranks M_B (e.g. 2p), or bytes with a suffix B, KB, MB, GB, KiB, MiB or GiB (e.g. 12GB, 512MiB, 1e9B)

// Without bodies a byte limit has nothing to be converted with.
// RUN: not pipeforge-opt %S/Inputs/linear2.mlir --pp-schedule="kind=auto microbatches=4 mem-limit=1GB" 2>&1 | FileCheck %s --check-prefix=NOBODY
// RUN: echo "module {}" | not pipeforge-opt --pp-schedule="kind=auto ranks=2 microbatches=4 mem-limit=1GB" 2>&1 | FileCheck %s --check-prefix=NOBODY
// NOBODY: error: mem-limit: memory limit 1000000000 B (953.67 MiB) is in bytes, but the size of M_B in bytes is unknown: no stage bodies to cost it (run --pp-partition first); give the limit in M_B units or <k>p

pp.pipeline @uneven stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<2x4x8xf32>, %w1: tensor<32x8xf32> {nn.role = "param"}, %w2: tensor<8x32xf32> {nn.role = "param"}) -> tensor<2x4x8xf32> {
      %x1 = nn.gelu %x : tensor<2x4x8xf32>
      %a = nn.linear %x1, %w1 : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
      %g = nn.gelu %a : tensor<2x4x32xf32>
      %p = nn.linear %g, %w2 : (tensor<2x4x32xf32>, tensor<8x32xf32>) -> tensor<2x4x8xf32>
      %y = nn.gelu %p : tensor<2x4x8xf32>
      return %y : tensor<2x4x8xf32>
    }
  }
  pp.stage 1 rank 1 chunk 0 {
    func.func @forward(%x: tensor<2x4x8xf32>, %w1: tensor<8x8xf32> {nn.role = "param"}) -> tensor<2x4x8xf32> {
      %x1 = nn.gelu %x : tensor<2x4x8xf32>
      %a = nn.linear %x1, %w1 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
      %y = nn.gelu %a : tensor<2x4x8xf32>
      return %y : tensor<2x4x8xf32>
    }
  }
}

