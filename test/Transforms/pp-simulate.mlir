// RUN: pipeforge-opt %s --pp-schedule="kind=zb-h1 microbatches=4" --pp-insert-comm --pp-simulate="tf=1 tb=1 tw=1 grid=true trace=%t.json svg=%t.svg" -o /dev/null | FileCheck %s
// RUN: FileCheck %s --input-file=%t.svg --check-prefix=SVG
// RUN: FileCheck %s --input-file=%t.json --check-prefix=TRACE

// ZB-H1 on 3 ranks: bubble (p-1)(T_F + T_B - T_W) = 2 per rank; peak
// activation p M_B = 3 on rank 0.
// CHECK: schedule zb-h1: ranks 3, stages 3, microbatches 4
// CHECK-NEXT: makespan 14.0000  bubble_rate 0.1429  zb_bubble_rate 0.1429
// CHECK-NEXT: rank 0: busy 12.0000  idle 2.0000  peak_activation 3.0000 M_B
// CHECK-NEXT: rank 1: busy 12.0000  idle 2.0000  peak_activation 2.5000 M_B
// CHECK-NEXT: rank 2: busy 12.0000  idle 2.0000  peak_activation 2.0000 M_B
// CHECK: r0 | F0 F1 F2 .  .  B0 W0 F3 B1 W1 B2 W2 B3 W3
// CHECK: r2 | .  .  F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3

// SVG: <svg
// SVG: </svg>
// TRACE: "traceEvents"
pp.pipeline @m stages 3 ranks 3 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
  pp.stage 2 rank 2 chunk 0 {}
}
