// RUN: pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=2" --pp-insert-comm --pp-verify-schedule | FileCheck %s

// Every activation that crosses ranks is sent right after its F and
// received right before the consumer; gradients go back the same way.
// CHECK-LABEL: pp.schedule "1f1b" ranks 2 stages 2 microbatches 2 placement [0, 1] {
// CHECK-NEXT:    pp.rank_program 0 {
// CHECK-NEXT:      pp.compute F stage 0 mb 0
// CHECK-NEXT:      pp.send F stage 0 mb 0 to 1
// CHECK-NEXT:      pp.compute F stage 0 mb 1
// CHECK-NEXT:      pp.send F stage 0 mb 1 to 1
// CHECK-NEXT:      pp.recv BW stage 1 mb 0 from 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 0
// CHECK-NEXT:      pp.recv BW stage 1 mb 1 from 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 1
// CHECK-NEXT:    }
// CHECK-NEXT:    pp.rank_program 1 {
// CHECK-NEXT:      pp.recv F stage 0 mb 0 from 0
// CHECK-NEXT:      pp.compute F stage 1 mb 0
// CHECK:           pp.compute BW stage 1 mb 0
// CHECK-NEXT:      pp.send BW stage 1 mb 0 to 0
pp.pipeline @m stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
}

