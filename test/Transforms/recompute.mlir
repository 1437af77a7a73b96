// --pp-recompute after --pp-split-backward: @forward stashes its inputs
// only, B and BW recompute the rest, W reads B's recomputed values as
// W-stash.
// RUN: pipeforge-opt %S/Inputs/partition-mlp.mlir --pp-partition="stages=2" --pp-split-backward --pp-recompute | FileCheck %s
// RUN: not pipeforge-opt %S/Inputs/partition-mlp.mlir --pp-partition="stages=2" --pp-recompute -o /dev/null 2>&1 | FileCheck %s --check-prefix=ERR

// CHECK-LABEL: pp.stage 0 rank 0 chunk 0 attributes {{{.*}}pp.recompute = "full"}
// Only the tokens are stashed (slot 0).
// CHECK: func.func @forward(%[[TOK:arg0]]: tensor<2x4xi32>
// CHECK-SAME: -> (tensor<2x4x8xf32> {pp.role = "act_out"}, tensor<2x4xi32> {pp.role = "stash", pp.stash = 0 : i64})
// CHECK: return %{{.*}}, %[[TOK]] : tensor<2x4x8xf32>, tensor<2x4xi32>
// B recomputes the embedding, fc and gelu from the stashed tokens and the
// parameters (wte added as an argument), then differentiates.
// CHECK: func.func @backward_input(
// CHECK-SAME: %[[T:arg[0-9]+]]: tensor<2x4xi32> {pp.role = "stash", pp.stash = 0 : i64}
// CHECK-SAME: %[[WTE:arg[0-9]+]]: tensor<16x8xf32> {nn.name = "wte", pp.arg = 1 : i64, pp.role = "param"}
// CHECK-SAME: {pp.role = "wstash", pp.wstash = 3 : i64}, tensor<2x4x32xf32> {pp.role = "wstash", pp.wstash = 4 : i64})
// CHECK-NEXT: %[[E:.*]] = nn.embedding %[[T]], %[[WTE]]
// CHECK-NEXT: %[[FC:.*]] = nn.linear %[[E]]
// CHECK-NEXT: %[[G:.*]] = nn.gelu %[[FC]]
// CHECK-NEXT: nn.linear_bwd_input
// CHECK: return {{.*}}, %[[E]], %[[G]] :
// W takes them as W-stash and recomputes nothing.
// CHECK: func.func @backward_weight(%{{.*}}: tensor<2x4xi32> {pp.role = "stash", pp.stash = 0 : i64}
// CHECK-SAME: {pp.role = "wstash", pp.wstash = 3 : i64}
// CHECK-SAME: {pp.role = "wstash", pp.wstash = 4 : i64}
// CHECK-NOT: nn.linear %
// CHECK-NOT: nn.gelu %
// CHECK: nn.embedding_bwd_weight
// BW recomputes once.
// CHECK: func.func @backward(
// CHECK-NEXT: nn.embedding
// CHECK-NEXT: nn.linear
// CHECK-NEXT: nn.gelu
// The loss stage stashes its received activation and the targets.
// CHECK-LABEL: pp.stage 1 rank 1 chunk 0 attributes {{{.*}}pp.recompute = "full"}
// CHECK: return %{{.*}}, %arg0, %arg1 : tensor<f32>, tensor<2x4x8xf32>, tensor<2x4xi32>

// ERR: error: pp-recompute: the stage has no @forward and @backward_input (run --pp-split-backward first)
