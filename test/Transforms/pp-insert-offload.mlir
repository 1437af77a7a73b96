// RUN: pipeforge-opt %s --pp-schedule="kind=gpipe microbatches=3" --pp-insert-comm --pp-insert-offload=mode=all --pp-verify-schedule | FileCheck %s
// RUN: pipeforge-opt %s --pp-schedule="kind=gpipe microbatches=3" --pp-insert-comm --pp-insert-offload --pp-verify-schedule | FileCheck %s
// RUN: pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=4" --pp-insert-comm --pp-insert-offload=mode=auto --pp-verify-schedule | FileCheck %s --check-prefix=AUTO
// RUN: pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=4" --pp-insert-comm --pp-insert-param-gathers --pp-insert-offload=mode=all --pp-verify-schedule | FileCheck %s --check-prefix=GATHER
// RUN: pipeforge-opt %s --pp-schedule="kind=gpipe microbatches=3" --pp-insert-comm --pp-insert-offload=mode=all | pipeforge-opt --pp-verify-schedule | FileCheck %s --check-prefix=ROUND
// RUN: not pipeforge-opt %s --pp-schedule="kind=gpipe microbatches=3" --pp-insert-offload --pp-insert-offload 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not pipeforge-opt %s --pp-schedule="kind=gpipe microbatches=3" --pp-insert-offload --pp-insert-comm 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not pipeforge-opt %s --pp-schedule="kind=gpipe microbatches=3" --pp-insert-offload=mode=some 2>&1 | FileCheck %s --check-prefix=MODE

// mode=all (a gap of 1): every stash with a compute action between its F
// and its B leaves. OFFLOAD right after the F (the copy
// out runs under the next compute action), RELOAD right before the compute
// action before the B (the copy back runs under it, after its receives);
// the messages are untouched.
// CHECK-LABEL: pp.schedule "gpipe" ranks 2 stages 2 microbatches 3 placement [0, 1] {
// CHECK-NEXT:    pp.rank_program 0 {
// CHECK-NEXT:      pp.compute F stage 0 mb 0
// CHECK-NEXT:      pp.offload F stage 0 mb 0
// CHECK-NEXT:      pp.send F stage 0 mb 0 to 1
// CHECK-NEXT:      pp.compute F stage 0 mb 1
// CHECK-NEXT:      pp.offload F stage 0 mb 1
// CHECK-NEXT:      pp.send F stage 0 mb 1 to 1
// CHECK-NEXT:      pp.reload F stage 0 mb 0
// CHECK-NEXT:      pp.compute F stage 0 mb 2
// CHECK-NEXT:      pp.offload F stage 0 mb 2
// CHECK-NEXT:      pp.send F stage 0 mb 2 to 1
// CHECK-NEXT:      pp.recv BW stage 1 mb 0 from 1
// CHECK-NEXT:      pp.reload F stage 0 mb 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 0
// CHECK-NEXT:      pp.recv BW stage 1 mb 1 from 1
// CHECK-NEXT:      pp.reload F stage 0 mb 2
// CHECK-NEXT:      pp.compute BW stage 0 mb 1
// CHECK-NEXT:      pp.recv BW stage 1 mb 2 from 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 2
// CHECK-NEXT:    }

// mode=auto (the default: a gap of 2) offloads the same on GPipe (2 compute
// actions between each F and its B). On 1F1B over 2 ranks F0.0 has one
// (F0.1): it stays (mode=all moves it); F0.1 and F0.2 leave, F0.3 stays.
// AUTO:      pp.rank_program 0 {
// AUTO-NEXT:   pp.compute F stage 0 mb 0
// AUTO-NEXT:   pp.send F stage 0 mb 0 to 1
// AUTO-NEXT:   pp.compute F stage 0 mb 1
// AUTO-NEXT:   pp.offload F stage 0 mb 1
// AUTO-NEXT:   pp.send F stage 0 mb 1 to 1
// AUTO-NEXT:   pp.recv BW stage 1 mb 0 from 1
// AUTO-NEXT:   pp.compute BW stage 0 mb 0
// AUTO-NEXT:   pp.reload F stage 0 mb 1
// AUTO-NEXT:   pp.compute F stage 0 mb 2
// AUTO-NEXT:   pp.offload F stage 0 mb 2
// AUTO:        pp.compute F stage 0 mb 3
// AUTO-NEXT:   pp.send F stage 0 mb 3 to 1

// With ZeRO-3's gathers: both kinds of action beside the messages (mode=all
// on 1F1B: F0.0 leaves).
// GATHER:      pp.rank_program 0 {
// GATHER-NEXT:   pp.unshard stage 0
// GATHER-NEXT:   pp.compute F stage 0 mb 0
// GATHER-NEXT:   pp.offload F stage 0 mb 0
// GATHER-NEXT:   pp.send F stage 0 mb 0 to 1
// GATHER-NEXT:   pp.reload F stage 0 mb 0
// GATHER-NEXT:   pp.compute F stage 0 mb 1
// GATHER:        pp.reshard stage 0

// The ops print and parse back.
// ROUND: pp.offload F stage 0 mb 0
// ROUND: pp.reload F stage 0 mb 0

// TWICE: error: cannot insert activation offload: the schedule already offloads activations (OFFLOAD/RELOAD)
// ORDER: error: cannot insert messages: rank 0 step 1 (OFFLOAD F0.0): schedule already offloads activations (insert the messages first, then the offload)
// MODE: error: --pp-insert-offload: mode must be auto or all (got 'some')
pp.pipeline @m stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
}
