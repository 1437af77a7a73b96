// RUN: pipeforge-opt %s | pipeforge-opt | FileCheck %s

// CHECK-LABEL: pp.pipeline @v2 stages 4 ranks 2 placement v {
// CHECK: pp.stage 0 rank 0 chunk 0 {
// CHECK: pp.stage 1 rank 1 chunk 0 {
// CHECK: pp.stage 2 rank 1 chunk 1 {
// CHECK: pp.stage 3 rank 0 chunk 1 {
pp.pipeline @v2 stages 4 ranks 2 placement v {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
  pp.stage 2 rank 1 chunk 1 {}
  pp.stage 3 rank 0 chunk 1 {}
}

// CHECK-LABEL: pp.pipeline @inter stages 4 ranks 2 placement interleaved {
// CHECK: pp.stage 2 rank 0 chunk 1 {
pp.pipeline @inter stages 4 ranks 2 placement interleaved {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
  pp.stage 2 rank 0 chunk 1 {}
  pp.stage 3 rank 1 chunk 1 {}
}

// CHECK-LABEL: pp.pipeline @dual stages 2 ranks 2 placement dual {
// CHECK: pp.stage 0 copy 1 rank 1 chunk 1 {
pp.pipeline @dual stages 2 ranks 2 placement dual {
  pp.stage 0 rank 0 chunk 0 {}
  pp.stage 1 rank 1 chunk 0 {}
  pp.stage 0 copy 1 rank 1 chunk 1 {}
  pp.stage 1 copy 1 rank 0 chunk 1 {}
}
