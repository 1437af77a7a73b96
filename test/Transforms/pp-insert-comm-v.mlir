// RUN: pipeforge-opt %s --pp-schedule="kind=zbv microbatches=2" --pp-insert-comm --pp-verify-schedule | FileCheck %s

// The bottom of the V (stage 1 -> 2, both on rank 1) hands off locally:
// no message carries F stage 1 or the gradient of stage 2.
// CHECK-LABEL: pp.schedule "zbv"
// CHECK-NOT: pp.send F stage 1
// CHECK-NOT: pp.send {{B|BW}} stage 2
// CHECK: pp.send F stage 0 mb 0 to 1
// CHECK-NOT: pp.send F stage 1
// CHECK-NOT: pp.send {{B|BW}} stage 2
pp.pipeline @v stages 4 ranks 2 placement v {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
  pp.stage 2 rank 1 chunk 1 {}
  pp.stage 3 rank 0 chunk 1 {}
}
