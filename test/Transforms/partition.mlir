// RUN: pipeforge-opt %s --pp-partition="stages=2" | FileCheck %s
// RUN: pipeforge-opt %s --pp-partition="stages=2 report=true" -verify-diagnostics -o /dev/null

// A 4-layer model cut linearly into 2 stages. The two blocks cost the same
// and the embedding is free, so the best cut is {0, 1} | {2, 3}.
// Stage 0 takes the tokens and its params and returns the residual stream;
// stage 1 takes the residual first, then the targets, then its params, and
// returns the loss. Argument attributes and nn.layer survive.

// CHECK-LABEL: pp.pipeline @model stages 2 ranks 2 placement linear
// CHECK-SAME:    pp.imbalance = 1.1111
// CHECK:       pp.stage 0 rank 0 chunk 0 attributes {pp.cost = 24576 : i64, pp.layers = array<i64: 0, 1>}
// CHECK-NEXT:    func.func @forward(%[[TOK:.*]]: tensor<2x4xi32> {nn.role = "tokens"}, %[[WTE:.*]]: tensor<16x8xf32> {{{.*}}nn.name = "wte", nn.role = "param"}, %[[W1:.*]]: tensor<32x8xf32> {{{.*}}nn.name = "h.0.fc.weight"{{.*}}}, %[[W2:.*]]: tensor<8x32xf32> {{{.*}}}) -> tensor<2x4x8xf32> {
// CHECK-NEXT:      %[[H0:.*]] = nn.embedding %[[TOK]], %[[WTE]] {nn.layer = 0 : i64}
// CHECK-NEXT:      %[[A:.*]] = nn.linear %[[H0]], %[[W1]] {nn.layer = 1 : i64}
// CHECK-NEXT:      %[[G:.*]] = nn.gelu %[[A]]
// CHECK-NEXT:      %[[P:.*]] = nn.linear %[[G]], %[[W2]]
// CHECK-NEXT:      %[[H1:.*]] = nn.add %[[H0]], %[[P]]
// CHECK-NEXT:      return %[[H1]] : tensor<2x4x8xf32>
// CHECK:       pp.stage 1 rank 1 chunk 0 attributes {pp.cost = 30720 : i64, pp.layers = array<i64: 2, 3>}
// CHECK-NEXT:    func.func @forward(%[[X:.*]]: tensor<2x4x8xf32>, %[[TGT:.*]]: tensor<2x4xi32> {nn.role = "targets"}, %{{.*}}: tensor<32x8xf32> {{{.*}}"h.1.fc.weight"{{.*}}}, %{{.*}}: tensor<8x32xf32> {{{.*}}"h.1.proj.weight"{{.*}}}, %[[HEAD:.*]]: tensor<16x8xf32> {{{.*}}"lm_head.weight"{{.*}}}) -> tensor<f32> {
// CHECK:           nn.add %[[X]], %{{.*}} {nn.layer = 2 : i64}
// CHECK:           %[[LOGITS:.*]] = nn.linear %{{.*}}, %[[HEAD]] {nn.layer = 3 : i64}
// CHECK-NEXT:      %[[LOSS:.*]] = nn.cross_entropy %[[LOGITS]], %[[TGT]]
// CHECK-NEXT:      return %[[LOSS]] : tensor<f32>
// CHECK-NOT:   func.func @model

// expected-remark @below {{partitioned 4 layers into 2 stages (placement linear, 2 ranks): layers per stage [2, 2], stage FLOPs max 3.072e+04 mean 2.765e+04, imbalance 1.1111}}
func.func @model(
    %tokens: tensor<2x4xi32> {nn.role = "tokens"},
    %targets: tensor<2x4xi32> {nn.role = "targets"},
    %wte: tensor<16x8xf32> {nn.role = "param", nn.name = "wte", nn.init = "normal:0.02"},
    %w1: tensor<32x8xf32> {nn.role = "param", nn.name = "h.0.fc.weight", nn.init = "normal:0.02"},
    %w2: tensor<8x32xf32> {nn.role = "param", nn.name = "h.0.proj.weight", nn.init = "normal:0.02"},
    %w3: tensor<32x8xf32> {nn.role = "param", nn.name = "h.1.fc.weight", nn.init = "normal:0.02"},
    %w4: tensor<8x32xf32> {nn.role = "param", nn.name = "h.1.proj.weight", nn.init = "normal:0.02"},
    %head: tensor<16x8xf32> {nn.role = "param", nn.name = "lm_head.weight", nn.init = "normal:0.02"}
  ) -> tensor<f32> {
  %h0 = nn.embedding %tokens, %wte {nn.layer = 0 : i64} : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %a1 = nn.linear %h0, %w1 {nn.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %g1 = nn.gelu %a1 {nn.layer = 1 : i64} : tensor<2x4x32xf32>
  %p1 = nn.linear %g1, %w2 {nn.layer = 1 : i64} : (tensor<2x4x32xf32>, tensor<8x32xf32>) -> tensor<2x4x8xf32>
  %h1 = nn.add %h0, %p1 {nn.layer = 1 : i64} : tensor<2x4x8xf32>
  %a2 = nn.linear %h1, %w3 {nn.layer = 2 : i64} : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %g2 = nn.gelu %a2 {nn.layer = 2 : i64} : tensor<2x4x32xf32>
  %p2 = nn.linear %g2, %w4 {nn.layer = 2 : i64} : (tensor<2x4x32xf32>, tensor<8x32xf32>) -> tensor<2x4x8xf32>
  %h2 = nn.add %h1, %p2 {nn.layer = 2 : i64} : tensor<2x4x8xf32>
  %logits = nn.linear %h2, %head {nn.layer = 3 : i64} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %loss = nn.cross_entropy %logits, %targets {nn.layer = 3 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
