// RUN: pipeforge-opt %s | pipeforge-opt | FileCheck %s
// RUN: pipeforge-opt %s -mlir-print-op-generic | pipeforge-opt | FileCheck %s
// RUN: pipeforge-opt %s --pp-split-backward | FileCheck %s --check-prefix=BWD

// Multi-head Latent Attention's core (docs/model-ir.md): 4 heads, no-RoPE
// key part 16, one RoPE key of 8 shared by the heads, value heads of 16.

// CHECK-LABEL: func.func @model
func.func @model(%q: tensor<2x8x96xf32>, %knope: tensor<2x8x64xf32>,
                 %krope: tensor<2x8x8xf32>, %v: tensor<2x8x64xf32>)
    -> tensor<2x8x64xf32> {
  // CHECK: nn.concat_heads %{{.*}}, %{{.*}} {broadcast, num_heads = 4 : i64} : (tensor<2x8x64xf32>, tensor<2x8x8xf32>) -> tensor<2x8x96xf32>
  %k = nn.concat_heads %knope, %krope {num_heads = 4 : i64, broadcast}
      : (tensor<2x8x64xf32>, tensor<2x8x8xf32>) -> tensor<2x8x96xf32>
  // CHECK: nn.attention {{.*}} {num_heads = 4 : i64, num_kv_heads = 4 : i64, rope_dim = 8 : i64, rotary} : (tensor<2x8x96xf32>, tensor<2x8x96xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %o = nn.attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 4 : i64, rotary, rope_dim = 8 : i64}
      : (tensor<2x8x96xf32>, tensor<2x8x96xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %o : tensor<2x8x64xf32>
}

// Per-head (not broadcast) concatenation, and v narrower than q and k.
// CHECK-LABEL: func.func @per_head
func.func @per_head(%a: tensor<16x8xf32>, %b: tensor<16x4xf32>,
                    %q: tensor<1x4x16xf32>, %k: tensor<1x4x8xf32>,
                    %v: tensor<1x4x4xf32>)
    -> (tensor<16x12xf32>, tensor<1x4x8xf32>) {
  // CHECK: nn.concat_heads {{.*}} {num_heads = 2 : i64} : (tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<16x12xf32>
  %c = nn.concat_heads %a, %b {num_heads = 2 : i64}
      : (tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<16x12xf32>
  // CHECK: nn.attention {{.*}} -> tensor<1x4x8xf32>
  %o = nn.attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64}
      : (tensor<1x4x16xf32>, tensor<1x4x8xf32>, tensor<1x4x4xf32>) -> tensor<1x4x8xf32>
  return %c, %o : tensor<16x12xf32>, tensor<1x4x8xf32>
}

// The gradient ops print and parse back.
// CHECK-LABEL: func.func @grads
func.func @grads(%dy: tensor<2x8x96xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x8xf32>) {
  // CHECK: nn.concat_heads_bwd %{{.*}} {broadcast, lhs_head_dim = 16 : i64, num_heads = 4 : i64} : (tensor<2x8x96xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x8xf32>)
  %a, %b = nn.concat_heads_bwd %dy {num_heads = 4 : i64, lhs_head_dim = 16 : i64, broadcast}
      : (tensor<2x8x96xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x8xf32>)
  return %a, %b : tensor<2x8x64xf32>, tensor<2x8x8xf32>
}

// B of the MLA core: attention_bwd keeps rope_dim and gives dv the value
// width; concat_heads_bwd splits dk into the heads' part and the shared
// RoPE key's (summed over the heads).
// BWD-LABEL: func.func @backward_input
// BWD: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = nn.attention_bwd {{.*}} {num_heads = 4 : i64, num_kv_heads = 4 : i64, rope_dim = 8 : i64, rotary} : (tensor<2x8x96xf32>, tensor<2x8x96xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x96xf32>, tensor<2x8x96xf32>, tensor<2x8x64xf32>)
// BWD: nn.concat_heads_bwd %[[DK]] {broadcast, lhs_head_dim = 16 : i64, num_heads = 4 : i64} : (tensor<2x8x96xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x8xf32>)
