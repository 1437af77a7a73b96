// --pp-recompute="policy=selective" (Korthikanti et al. 2022): only a cheap
// op's stashed output whose inputs F stashes anyway is recomputed (here the
// GELU output the second linear reads, from the fc output GELU's backward
// keeps); F keeps everything else. B recomputes it first and hands it to W
// as W-stash; BW recomputes it once.
// RUN: pipeforge-opt %S/Inputs/partition-mlp.mlir --pp-partition="stages=2" --pp-split-backward --pp-recompute="policy=selective" | FileCheck %s
// `stages` restricts the pass to those stages:
// RUN: pipeforge-opt %S/Inputs/partition-mlp.mlir --pp-partition="stages=2" --pp-split-backward --pp-recompute="policy=selective stages=1" | FileCheck %s --check-prefix=ONLY1
// RUN: not pipeforge-opt %S/Inputs/partition-mlp.mlir --pp-partition="stages=2" --pp-split-backward --pp-recompute="policy=some" -o /dev/null 2>&1 | FileCheck %s --check-prefix=ERR

// CHECK-LABEL: pp.stage 0 rank 0 chunk 0 attributes {{{.*}}pp.recompute = "selective", pp.recompute_flops = 0.000000e+00 : f64}
// F stashes the tokens, the embedding output and the fc output, not the
// GELU output (%2).
// CHECK: func.func @forward(
// CHECK-SAME: -> (tensor<2x4x8xf32> {pp.role = "act_out"}, tensor<2x4xi32> {pp.role = "stash", pp.stash = 0 : i64}, tensor<2x4x8xf32> {pp.role = "stash", pp.stash = 1 : i64}, tensor<2x4x32xf32> {pp.role = "stash", pp.stash = 2 : i64})
// CHECK: %[[FC:.*]] = nn.linear %{{.*}}, %arg2
// CHECK-NEXT: nn.gelu %[[FC]]
// CHECK: return %{{.*}}, %arg0, %0, %[[FC]] :
// B recomputes the GELU from the stashed fc output, then differentiates.
// CHECK: func.func @backward_input(
// CHECK-SAME: %[[S2:arg[0-9]+]]: tensor<2x4x32xf32> {pp.role = "stash", pp.stash = 2 : i64}
// CHECK-NEXT: %[[G:.*]] = nn.gelu %[[S2]]
// CHECK-NEXT: nn.linear_bwd_input
// CHECK: return {{.*}}, %[[G]] :
// W reads it as W-stash and recomputes nothing.
// CHECK: func.func @backward_weight(
// CHECK-NOT: nn.gelu %
// CHECK: nn.linear_bwd_weight
// CHECK: func.func @backward(
// CHECK-NEXT: nn.gelu
// CHECK-LABEL: pp.stage 1 rank 1 chunk 0 attributes {{{.*}}pp.recompute = "selective"

// ONLY1: pp.stage 0 rank 0 chunk 0 attributes {pp.cost = {{[0-9]+}} : i64, pp.layers = array<i64: 0, 1>} {
// ONLY1: pp.stage 1 rank 1 chunk 0 attributes {{{.*}}pp.recompute = "selective"

// ERR: error: pp-recompute: policy must be full or selective, got 'some'
