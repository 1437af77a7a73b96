// RUN: pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=2" --pp-insert-comm --pp-insert-param-gathers=prefetch=1 --pp-verify-schedule | FileCheck %s
// RUN: pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=2" --pp-insert-comm --pp-insert-param-gathers=prefetch=0 --pp-verify-schedule | FileCheck %s --check-prefix=P0
// RUN: echo "" | pipeforge-opt --pp-schedule="kind=zbv ranks=2 microbatches=2" --pp-insert-comm --pp-insert-param-gathers --pp-verify-schedule | FileCheck %s --check-prefix=ZBV
// RUN: pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=2" --pp-insert-comm --pp-insert-param-gathers | pipeforge-opt --pp-verify-schedule | FileCheck %s --check-prefix=ROUND
// RUN: not pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=2" --pp-insert-param-gathers --pp-insert-param-gathers 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=2" --pp-insert-param-gathers=prefetch=65 2>&1 | FileCheck %s --check-prefix=RANGE

// One UNSHARD per stage a rank computes, one compute action before its
// first use (at the program start when there is none before), one RESHARD
// right after its last; the messages are untouched.
// CHECK-LABEL: pp.schedule "1f1b" ranks 2 stages 2 microbatches 2 placement [0, 1] {
// CHECK-NEXT:    pp.rank_program 0 {
// CHECK-NEXT:      pp.unshard stage 0
// CHECK-NEXT:      pp.compute F stage 0 mb 0
// CHECK-NEXT:      pp.send F stage 0 mb 0 to 1
// CHECK-NEXT:      pp.compute F stage 0 mb 1
// CHECK-NEXT:      pp.send F stage 0 mb 1 to 1
// CHECK-NEXT:      pp.recv BW stage 1 mb 0 from 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 0
// CHECK-NEXT:      pp.recv BW stage 1 mb 1 from 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 1
// CHECK-NEXT:      pp.reshard stage 0
// CHECK-NEXT:    }
// CHECK-NEXT:    pp.rank_program 1 {
// CHECK-NEXT:      pp.unshard stage 1
// CHECK-NEXT:      pp.recv F stage 0 mb 0 from 0
// CHECK-NEXT:      pp.compute F stage 1 mb 0
// CHECK:           pp.compute BW stage 1 mb 1
// CHECK-NEXT:      pp.reshard stage 1
// CHECK-NEXT:      pp.send BW stage 1 mb 1 to 0
// CHECK-NEXT:    }

// Prefetch 0: right before the first compute (after the receive it needs).
// P0:        pp.rank_program 1 {
// P0-NEXT:     pp.recv F stage 0 mb 0 from 0
// P0-NEXT:     pp.unshard stage 1
// P0-NEXT:     pp.compute F stage 1 mb 0

// ZB-V: two stages per rank; stage 3's gather runs one compute ahead.
// ZBV:       pp.rank_program 0 {
// ZBV-NEXT:    pp.unshard stage 0
// ZBV-NEXT:    pp.compute F stage 0 mb 0
// ZBV:         pp.unshard stage 3
// ZBV:         pp.compute F stage 3 mb 0
// ZBV:         pp.reshard stage 3
// ZBV:         pp.reshard stage 0
// ZBV-NEXT:  }

// The ops print and parse back.
// ROUND: pp.unshard stage 0
// ROUND: pp.reshard stage 0

// TWICE: error: cannot insert parameter gathers: the schedule already gathers its parameters (UNSHARD/RESHARD)
// RANGE: error: cannot insert parameter gathers: parameter prefetch 65 is outside [0, 64]
pp.pipeline @m stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
}
