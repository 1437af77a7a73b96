// RUN: pipeforge-opt %s --pp-partition="stages=3" | FileCheck %s

// A value crossing two cuts (the embedding feeds the head directly) is
// passed through the stage in between: stage 1 takes it and returns it.

// CHECK-LABEL: pp.pipeline @model stages 3 ranks 3 placement linear
// CHECK:       pp.stage 0 rank 0 chunk 0
// CHECK:         func.func @forward(%{{.*}}: tensor<2x4xi32> {nn.role = "tokens"}, %{{.*}}: tensor<16x8xf32> {{{.*}}}) -> tensor<2x4x8xf32>
// CHECK:       pp.stage 1 rank 1 chunk 0 {{.*}}pp.layers = array<i64: 1>
// CHECK-NEXT:    func.func @forward(%[[E:.*]]: tensor<2x4x8xf32>, %{{.*}}: tensor<8x8xf32> {{{.*}}}) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-NEXT:      %[[Y:.*]] = nn.linear %[[E]]
// CHECK-NEXT:      return %[[E]], %[[Y]] : tensor<2x4x8xf32>, tensor<2x4x8xf32>
// CHECK:       pp.stage 2 rank 2 chunk 0 {{.*}}pp.layers = array<i64: 2>
// CHECK-NEXT:    func.func @forward(%[[E2:.*]]: tensor<2x4x8xf32>, %[[Y2:.*]]: tensor<2x4x8xf32>, %{{.*}}: tensor<2x4xi32> {nn.role = "targets"}, %{{.*}}: tensor<16x8xf32> {{{.*}}}) -> tensor<f32>
// CHECK-NEXT:      nn.add %[[E2]], %[[Y2]]

func.func @model(
    %tokens: tensor<2x4xi32> {nn.role = "tokens"},
    %targets: tensor<2x4xi32> {nn.role = "targets"},
    %wte: tensor<16x8xf32> {nn.role = "param", nn.name = "wte", nn.init = "normal:0.02"},
    %w: tensor<8x8xf32> {nn.role = "param", nn.name = "h.0.weight", nn.init = "normal:0.02"},
    %head: tensor<16x8xf32> {nn.role = "param", nn.name = "lm_head.weight", nn.init = "zeros"}
  ) -> tensor<f32> {
  %e = nn.embedding %tokens, %wte {nn.layer = 0 : i64} : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %y = nn.linear %e, %w {nn.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %r = nn.add %e, %y {nn.layer = 2 : i64} : tensor<2x4x8xf32>
  %logits = nn.linear %r, %head {nn.layer = 2 : i64} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %loss = nn.cross_entropy %logits, %targets {nn.layer = 2 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
