// RUN: pipeforge-opt %s --pp-split-backward -split-input-file | FileCheck %s
// RUN: pipeforge-opt %examples/pipeline-dual.mlir --pp-split-backward | FileCheck %s --check-prefix=DUAL

// Unused inputs get zero gradients (B for activations, W for parameters); a
// parameter read as a plain operand gets its gradient from B through the
// W-stash; an output that is an input passes the gradient through.
pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>, %unused: tensor<2xf32>,
                       %shift: tensor<4x8xf32> {nn.role = "param", nn.name = "shift"},
                       %dead: tensor<3xf32> {nn.role = "param", nn.name = "dead"})
        -> (tensor<4x8xf32>, tensor<4x8xf32>) {
      %y = nn.add %x, %shift : tensor<4x8xf32>
      return %y, %x : tensor<4x8xf32>, tensor<4x8xf32>
    }
  }
}
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    -> (tensor<4x8xf32> {pp.role = "act_out"}, tensor<4x8xf32> {pp.role = "act_out"}) {
// CHECK:         return %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>
// CHECK-LABEL: func.func @backward_input(
// CHECK-SAME:    %[[G0:[^:]*]]: tensor<4x8xf32> {pp.result = 0 : i64, pp.role = "grad_in"},
// CHECK-SAME:    %[[G1:[^:]*]]: tensor<4x8xf32> {pp.result = 1 : i64, pp.role = "grad_in"})
// CHECK-SAME:    -> (tensor<4x8xf32> {pp.arg = 0 : i64, pp.role = "grad_out"},
// CHECK-SAME:        tensor<2xf32> {pp.arg = 1 : i64, pp.role = "grad_out"},
// CHECK-SAME:        tensor<4x8xf32> {pp.role = "wstash", pp.wstash = 0 : i64})
// CHECK:         %[[DX:.*]] = nn.add %[[G1]], %[[G0]]
// CHECK:         %[[Z:.*]] = arith.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK:         return %[[DX]], %[[Z]], %[[G0]]
// CHECK-LABEL: func.func @backward_weight(
// CHECK-SAME:    %[[WS:[^:]*]]: tensor<4x8xf32> {pp.role = "wstash", pp.wstash = 0 : i64})
// CHECK-SAME:    -> (tensor<4x8xf32> {nn.name = "shift", pp.arg = 2 : i64, pp.role = "param_grad"},
// CHECK-SAME:        tensor<3xf32> {nn.name = "dead", pp.arg = 3 : i64, pp.role = "param_grad"})
// CHECK:         %[[ZW:.*]] = arith.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK:         return %[[WS]], %[[ZW]]

// -----

// Only the last stage's scalar result is a loss; a stage whose output is
// unused downstream still gets its full backward.
pp.pipeline @p stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<f32>) -> tensor<f32> {
      %y = nn.gelu %x : tensor<f32>
      return %y : tensor<f32>
    }
  }
  pp.stage 1 rank 1 chunk 0 {
    func.func @forward(%x: tensor<f32>) -> tensor<f32> {
      %y = nn.silu %x : tensor<f32>
      return %y : tensor<f32>
    }
  }
}
// CHECK-LABEL: pp.stage 0
// CHECK:       func.func @forward({{.*}}) -> (tensor<f32> {pp.role = "act_out"}
// CHECK:       func.func @backward_input({{.*}}pp.role = "grad_in"})
// CHECK-NOT:   func.func @backward_weight(%
// CHECK:       func.func @backward_weight() {
// CHECK-NEXT:    return
// CHECK-LABEL: pp.stage 1
// CHECK:       func.func @forward({{.*}}) -> (tensor<f32> {pp.role = "loss"}
// CHECK:       func.func @backward_input({{.*}}pp.role = "loss_seed"})

// DUAL-COUNT-4: func.func @backward_input(
// DUAL-NOT:     pp.role = "loss"
