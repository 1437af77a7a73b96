// RUN: pipeforge-opt %s --pp-schedule="kind=1f1b microbatches=3" | FileCheck %s
// RUN: pipeforge-opt %s --pp-schedule="kind=zb-h1 microbatches=4" | FileCheck %s --check-prefix=ZBH1

// 1F1B on a 2-stage linear pipeline: rank 0 warms up with p - r - 1 = 1
// extra forward, then alternates one F and one full backward (BW); rank 1
// (the last stage) alternates from the start.

// CHECK-LABEL: pp.schedule "1f1b" ranks 2 stages 2 microbatches 3 placement [0, 1] {
// CHECK-NEXT:    pp.rank_program 0 {
// CHECK-NEXT:      pp.compute F stage 0 mb 0
// CHECK-NEXT:      pp.compute F stage 0 mb 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 0
// CHECK-NEXT:      pp.compute F stage 0 mb 2
// CHECK-NEXT:      pp.compute BW stage 0 mb 1
// CHECK-NEXT:      pp.compute BW stage 0 mb 2
// CHECK-NEXT:    }
// CHECK-NEXT:    pp.rank_program 1 {
// CHECK-NEXT:      pp.compute F stage 1 mb 0
// CHECK-NEXT:      pp.compute BW stage 1 mb 0
// CHECK-NEXT:      pp.compute F stage 1 mb 1
// CHECK-NEXT:      pp.compute BW stage 1 mb 1
// CHECK-NEXT:      pp.compute F stage 1 mb 2
// CHECK-NEXT:      pp.compute BW stage 1 mb 2
// CHECK-NEXT:    }

// ZB-H1 splits the backward into B (input gradient, on the critical path)
// and W (weight gradient, free to move): the steady state is 1F-1B-1W.

// ZBH1-LABEL: pp.schedule "zb-h1" ranks 2 stages 2 microbatches 4 placement [0, 1] {
// ZBH1-NEXT:    pp.rank_program 0 {
// ZBH1-NEXT:      pp.compute F stage 0 mb 0
// ZBH1-NEXT:      pp.compute F stage 0 mb 1
// ZBH1-NEXT:      pp.compute B stage 0 mb 0
// ZBH1-NEXT:      pp.compute W stage 0 mb 0
// ZBH1:         pp.rank_program 1 {
// ZBH1-NEXT:      pp.compute F stage 1 mb 0
// ZBH1-NEXT:      pp.compute B stage 1 mb 0
// ZBH1-NEXT:      pp.compute F stage 1 mb 1
// ZBH1-NEXT:      pp.compute B stage 1 mb 1
// ZBH1-NEXT:      pp.compute W stage 1 mb 0
pp.pipeline @m stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
}

