// RUN: pipeforge-opt %s --pp-split-backward | FileCheck %s

// Standalone mode (no pp.pipeline: @model is the one stage) on a model with
// every nn op: tied embedding / LM head weights, a residual, GQA attention
// whose k is also its v, a gated MoE and a SwiGLU-like product.

func.func @model(%tok: tensor<2x8xi32> {nn.role = "tokens"},
                 %tgt: tensor<2x8xi32> {nn.role = "targets"},
                 %wte: tensor<32x16xf32> {nn.role = "param", nn.name = "wte"},
                 %wpe: tensor<8x16xf32> {nn.role = "param", nn.name = "wpe"},
                 %g1: tensor<16xf32> {nn.role = "param", nn.name = "ln.weight"},
                 %b1: tensor<16xf32> {nn.role = "param", nn.name = "ln.bias"},
                 %wq: tensor<16x16xf32> {nn.role = "param", nn.name = "q"},
                 %wk: tensor<8x16xf32> {nn.role = "param", nn.name = "k"},
                 %g2: tensor<16xf32> {nn.role = "param", nn.name = "rms.weight"},
                 %r: tensor<4x16xf32> {nn.role = "param", nn.name = "router"},
                 %e1: tensor<4x32x16xf32> {nn.role = "param", nn.name = "w1"},
                 %e2: tensor<4x16x32xf32> {nn.role = "param", nn.name = "w2"},
                 %e3: tensor<4x32x16xf32> {nn.role = "param", nn.name = "w3"},
                 %wg: tensor<16x16xf32> {nn.role = "param", nn.name = "gate"})
    -> tensor<f32> {
  %h = nn.embedding %tok, %wte, %wpe : (tensor<2x8xi32>, tensor<32x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  %n = nn.layernorm %h, %g1, %b1 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %q = nn.linear %n, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %k = nn.linear %n, %wk : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x8xf32>
  %o = nn.attention %q, %k, %k {num_heads = 2 : i64, num_kv_heads = 1 : i64, rotary}
      : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
  %r1 = nn.add %h, %o : tensor<2x8x16xf32>
  %m = nn.rmsnorm %r1, %g2 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %y = nn.moe %m, %r, %e1, %e2, %e3 {top_k = 2 : i64, activation = "silu"}
      : (tensor<2x8x16xf32>, tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<4x32x16xf32>) -> tensor<2x8x16xf32>
  %gl = nn.linear %y, %wg : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %s = nn.silu %gl : tensor<2x8x16xf32>
  %p = nn.mul %s, %y : tensor<2x8x16xf32>
  %logits = nn.linear %p, %wte : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  %loss = nn.cross_entropy %logits, %tgt : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// The stash is returned by @model after the loss.
// CHECK-LABEL: func.func @model(
// CHECK-SAME:    -> (tensor<f32> {pp.role = "loss"}, {{.*}}pp.role = "stash", pp.stash = 0 : i64}

// B: the rule of every op, gradients of multiply used values summed.
// CHECK-LABEL: func.func @backward_input(
// CHECK-SAME:    %[[SEED:[^:]*]]: tensor<f32> {pp.result = 0 : i64, pp.role = "loss_seed"})
// CHECK:         %[[DLOG:.*]] = nn.cross_entropy_bwd %{{.*}}, %{{.*}}, %[[SEED]]
// CHECK:         %[[DP:.*]] = nn.linear_bwd_input %[[DLOG]], %{{.*}} : (tensor<2x8x32xf32>, tensor<32x16xf32>)
// CHECK:         %[[DS:.*]] = nn.mul %[[DP]], %[[Y:.*]] : tensor<2x8x16xf32>
// CHECK:         %[[DY1:.*]] = nn.mul %[[DP]], %{{.*}} : tensor<2x8x16xf32>
// CHECK:         %[[DGL:.*]] = nn.silu_bwd %{{.*}}, %[[DS]]
// CHECK:         %[[DY2:.*]] = nn.linear_bwd_input %[[DGL]]
// CHECK:         %[[DY:.*]] = nn.add %[[DY1]], %[[DY2]]
// CHECK:         %[[DM:.*]] = nn.moe_bwd_input %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[DY]] {activation = "silu", top_k = 2 : i64}
// CHECK:         %[[DR1:.*]] = nn.rmsnorm_bwd_input %{{.*}}, %{{.*}}, %[[DM]]
// CHECK:         %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = nn.attention_bwd {{.*}}, %[[DR1]] {num_heads = 2 : i64, num_kv_heads = 1 : i64, rotary}
// CHECK:         %[[DKV:.*]] = nn.add %[[DK]], %[[DV]] : tensor<2x8x8xf32>
// CHECK:         %[[DN1:.*]] = nn.linear_bwd_input %[[DKV]]
// CHECK:         %[[DN2:.*]] = nn.linear_bwd_input %[[DQ]]
// CHECK:         %[[DN:.*]] = nn.add %[[DN1]], %[[DN2]]
// CHECK:         %[[DH1:.*]] = nn.layernorm_bwd_input %{{.*}}, %{{.*}}, %[[DN]]
// CHECK:         %[[DH:.*]] = nn.add %[[DR1]], %[[DH1]]
// No activation argument: B returns only the W-stash (the embedding's
// result gradient included).
// CHECK:         return %[[DLOG]], %[[DGL]], %[[DY]], %[[DM]], %[[DKV]], %[[DQ]], %[[DN]], %[[DH]] :
// CHECK-NOT:     _bwd_weight
// CHECK-LABEL: func.func @backward_weight(
// CHECK-SAME:    -> (tensor<32x16xf32> {nn.name = "wte", pp.arg = 2 : i64, pp.role = "param_grad"},
// CHECK-SAME:        tensor<8x16xf32> {nn.name = "wpe", pp.arg = 3 : i64, pp.role = "param_grad"},
// CHECK:         %[[DHEAD:.*]] = nn.linear_bwd_weight
// CHECK:         nn.moe_bwd_weight {{.*}} {activation = "silu", top_k = 2 : i64} : {{.*}} -> (tensor<4x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<4x32x16xf32>)
// CHECK:         nn.rmsnorm_bwd_weight
// CHECK:         nn.layernorm_bwd_weight
// CHECK:         %[[DTAB:.*]], %[[DPOS:.*]] = nn.embedding_bwd_weight {{.*}} {max_positions = 8 : i64, vocab = 32 : i64}
// The tied weight: LM head and embedding gradients summed in W.
// CHECK:         %[[DWTE:.*]] = nn.add %[[DHEAD]], %[[DTAB]] : tensor<32x16xf32>
// CHECK:         return %[[DWTE]], %[[DPOS]],
// CHECK-LABEL: func.func @backward(
// CHECK:         nn.embedding_bwd_weight
// CHECK:         return
