// RUN: pipeforge-opt %s | pipeforge-opt | FileCheck %s
// RUN: pipeforge-opt %s -mlir-print-op-generic | pipeforge-opt | FileCheck %s

// nn.moe's load-balancing bias state (DeepSeek-V3's noaux_tc) prints and
// parses back, on the op and on its gradient ops.

// CHECK-LABEL: func.func @noaux_tc
// CHECK: nn.moe {{.*}}{activation = "silu", bias = "layers.1.mlp.gate.e_score_correction_bias", bias_update_speed = 2.000000e-03 : f32, n_group = 4 : i64, scoring = "sigmoid", top_k = 2 : i64, topk_group = 2 : i64}
// CHECK: nn.moe {{.*}}{bias = "b2", scoring = "sigmoid", top_k = 2 : i64}
func.func @noaux_tc(%x: tensor<2x4x16xf32>, %r: tensor<8x16xf32>, %w1: tensor<8x32x16xf32>, %w2: tensor<8x16x32xf32>, %w3: tensor<8x32x16xf32>) -> tensor<2x4x16xf32> {
  %0 = nn.moe %x, %r, %w1, %w2, %w3 {top_k = 2 : i64, activation = "silu", scoring = "sigmoid", n_group = 4 : i64, topk_group = 2 : i64, bias = "layers.1.mlp.gate.e_score_correction_bias", bias_update_speed = 0.002 : f32}
      : (tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<8x32x16xf32>, tensor<8x16x32xf32>, tensor<8x32x16xf32>) -> tensor<2x4x16xf32>
  %1 = nn.moe %0, %r, %w1, %w2 {top_k = 2 : i64, scoring = "sigmoid", bias = "b2"}
      : (tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<8x32x16xf32>, tensor<8x16x32xf32>) -> tensor<2x4x16xf32>
  return %1 : tensor<2x4x16xf32>
}

// CHECK-LABEL: func.func @grads
// CHECK: nn.moe_bwd_input {{.*}}{bias = "b", scoring = "sigmoid", top_k = 2 : i64}
// CHECK: nn.moe_bwd_weight {{.*}}{bias = "b", scoring = "sigmoid", top_k = 2 : i64}
func.func @grads(%x: tensor<8x16xf32>, %r: tensor<4x16xf32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>, %dy: tensor<8x16xf32>) {
  %dx = "nn.moe_bwd_input"(%x, %r, %w1, %w2, %dy) {top_k = 2 : i64, scoring = "sigmoid", bias = "b"}
      : (tensor<8x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %dr, %d1, %d2 = "nn.moe_bwd_weight"(%x, %r, %w1, %w2, %dy) {top_k = 2 : i64, scoring = "sigmoid", bias = "b"}
      : (tensor<8x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<8x16xf32>) -> (tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>)
  return
}
