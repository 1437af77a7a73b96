// RUN: pipeforge-opt %s | pipeforge-opt | FileCheck %s
// RUN: pipeforge-opt %s -mlir-print-op-generic | pipeforge-opt | FileCheck %s

// nn.moe's routing options (DeepSeek-V2/V3) print and parse back; the
// defaults are elided.

// CHECK-LABEL: func.func @deepseek_v3
// CHECK: nn.moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {activation = "silu", n_group = 4 : i64, routed_scaling_factor = 2.500000e+00 : f32, scoring = "sigmoid", top_k = 3 : i64, topk_group = 2 : i64}
func.func @deepseek_v3(%x: tensor<2x4x16xf32>, %r: tensor<8x16xf32>, %w1: tensor<8x32x16xf32>, %w2: tensor<8x16x32xf32>, %w3: tensor<8x32x16xf32>) -> tensor<2x4x16xf32> {
  %0 = nn.moe %x, %r, %w1, %w2, %w3 {top_k = 3 : i64, activation = "silu", scoring = "sigmoid", norm_topk_prob = true, routed_scaling_factor = 2.5 : f32, n_group = 4 : i64, topk_group = 2 : i64}
      : (tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<8x32x16xf32>, tensor<8x16x32xf32>, tensor<8x32x16xf32>) -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// CHECK-LABEL: func.func @deepseek_v2_grads
// CHECK: nn.moe_bwd_input {{.*}}{n_group = 2 : i64, norm_topk_prob = false, top_k = 2 : i64}
// CHECK: nn.moe_bwd_weight {{.*}}routed_scaling_factor = 1.600000e+01 : f32
func.func @deepseek_v2_grads(%x: tensor<8x16xf32>, %r: tensor<4x16xf32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>, %dy: tensor<8x16xf32>) {
  %dx = "nn.moe_bwd_input"(%x, %r, %w1, %w2, %dy) {top_k = 2 : i64, norm_topk_prob = false, n_group = 2 : i64, topk_group = 1 : i64}
      : (tensor<8x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %dr, %d1, %d2 = "nn.moe_bwd_weight"(%x, %r, %w1, %w2, %dy) {top_k = 2 : i64, routed_scaling_factor = 16.0 : f32}
      : (tensor<8x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<8x16xf32>) -> (tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>)
  return
}
