// RUN: pipeforge-opt %s --pp-split-backward --pp-split-components | FileCheck %s
// RUN: pipeforge-opt %s --pp-split-backward --pp-split-components | pipeforge-opt | FileCheck %s

// Stage 0 holds two transformer layers (nn.layer 1 and 2), each attention +
// MoE; stage 1 the head. --pp-split-components tags every op of every stage
// function with pp.component and pp.layer (the index among the stage's
// layers, so nn.layer 1 -> pp.layer 0), gradient accumulations (no nn.layer)
// included.
pp.pipeline @moe stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<2x4x8xf32>,
        %n1: tensor<8xf32> {nn.role = "param", nn.name = "l1.attn_norm"},
        %q1: tensor<8x8xf32> {nn.role = "param", nn.name = "l1.q"},
        %k1: tensor<4x8xf32> {nn.role = "param", nn.name = "l1.kv"},
        %m1: tensor<8xf32> {nn.role = "param", nn.name = "l1.moe_norm"},
        %r1: tensor<4x8xf32> {nn.role = "param", nn.name = "l1.router"},
        %a1: tensor<4x16x8xf32> {nn.role = "param", nn.name = "l1.w1"},
        %b1: tensor<4x8x16xf32> {nn.role = "param", nn.name = "l1.w2"},
        %c1: tensor<4x16x8xf32> {nn.role = "param", nn.name = "l1.w3"},
        %n2: tensor<8xf32> {nn.role = "param", nn.name = "l2.attn_norm"},
        %q2: tensor<8x8xf32> {nn.role = "param", nn.name = "l2.q"},
        %k2: tensor<4x8xf32> {nn.role = "param", nn.name = "l2.kv"},
        %m2: tensor<8xf32> {nn.role = "param", nn.name = "l2.moe_norm"},
        %r2: tensor<4x8xf32> {nn.role = "param", nn.name = "l2.router"},
        %a2: tensor<4x16x8xf32> {nn.role = "param", nn.name = "l2.w1"},
        %b2: tensor<4x8x16xf32> {nn.role = "param", nn.name = "l2.w2"},
        %c2: tensor<4x16x8xf32> {nn.role = "param", nn.name = "l2.w3"})
        -> tensor<2x4x8xf32> {
      %h1 = nn.rmsnorm %x, %n1 {nn.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
      %qa = nn.linear %h1, %q1 {nn.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
      %ka = nn.linear %h1, %k1 {nn.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
      %oa = nn.attention %qa, %ka, %ka {nn.layer = 1 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64}
          : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x8xf32>
      %ra = nn.add %x, %oa {nn.layer = 1 : i64} : tensor<2x4x8xf32>
      %ma = nn.rmsnorm %ra, %m1 {nn.layer = 1 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
      %ya = nn.moe %ma, %r1, %a1, %b1, %c1 {nn.layer = 1 : i64, top_k = 2 : i64, activation = "silu"}
          : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<2x4x8xf32>
      %sa = nn.add %ra, %ya {nn.layer = 1 : i64} : tensor<2x4x8xf32>
      %h2 = nn.rmsnorm %sa, %n2 {nn.layer = 2 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
      %qb = nn.linear %h2, %q2 {nn.layer = 2 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
      %kb = nn.linear %h2, %k2 {nn.layer = 2 : i64} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
      %ob = nn.attention %qb, %kb, %kb {nn.layer = 2 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64}
          : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x8xf32>
      %rb = nn.add %sa, %ob {nn.layer = 2 : i64} : tensor<2x4x8xf32>
      %mb = nn.rmsnorm %rb, %m2 {nn.layer = 2 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
      %yb = nn.moe %mb, %r2, %a2, %b2, %c2 {nn.layer = 2 : i64, top_k = 2 : i64, activation = "silu"}
          : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<2x4x8xf32>
      %sb = nn.add %rb, %yb {nn.layer = 2 : i64} : tensor<2x4x8xf32>
      return %sb : tensor<2x4x8xf32>
    }
  }
  pp.stage 1 rank 1 chunk 0 {
    func.func @forward(%a: tensor<2x4x8xf32>,
                       %t: tensor<2x4xi32> {nn.role = "targets"},
                       %w: tensor<16x8xf32> {nn.role = "param", nn.name = "lm_head"})
        -> tensor<f32> {
      %l = nn.linear %a, %w {nn.layer = 3 : i64} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
      %loss = nn.cross_entropy %l, %t {nn.layer = 3 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
      return %loss : tensor<f32>
    }
  }
}

// Per layer, its components in forward order.
// CHECK-LABEL: pp.stage 0 rank 0 chunk 0 attributes {pp.components = {{\[}}["attn", "dispatch", "mlp", "combine"], ["attn", "dispatch", "mlp", "combine"]]}

// F: attn up to and including the pre-MoE norm (it feeds the router, which
// runs before the dispatch), the nn.moe is mlp and spans the all-to-alls,
// the residual add after it is combine.
// CHECK:       func.func @forward(
// CHECK-NEXT:    nn.rmsnorm {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.linear {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.linear {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.attention {{.*}}pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.add {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.rmsnorm {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.moe {{.*}}pp.component = "mlp", pp.layer = 0 : i64, pp.span = ["dispatch", "mlp", "combine"]
// CHECK-NEXT:    nn.add {{.*}}{nn.layer = 1 : i64, pp.component = "combine", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.rmsnorm {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.linear {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.linear {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.attention {{.*}}pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.add {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.rmsnorm {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.moe {{.*}}pp.component = "mlp", pp.layer = 1 : i64, pp.span = ["dispatch", "mlp", "combine"]
// CHECK-NEXT:    nn.add {{.*}}{nn.layer = 2 : i64, pp.component = "combine", pp.layer = 1 : i64}
// CHECK-NEXT:    return

// B, layers in reverse: a gradient op gets the component of the forward op
// whose parameter it reads; the others (attention_bwd, the gradient sums
// without nn.layer) that of the op before them.
// CHECK:       func.func @backward_input(
// CHECK-NEXT:    nn.moe_bwd_input {{.*}}pp.component = "mlp", pp.layer = 1 : i64, pp.span = ["dispatch", "mlp", "combine"]
// CHECK-NEXT:    nn.rmsnorm_bwd_input {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.add {{.*}}{pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.attention_bwd {{.*}}pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.add {{.*}}{pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.linear_bwd_input {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.linear_bwd_input {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.add {{.*}}{pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.rmsnorm_bwd_input {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.add {{.*}}{pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.moe_bwd_input {{.*}}pp.component = "mlp", pp.layer = 0 : i64, pp.span = ["dispatch", "mlp", "combine"]
// CHECK-NEXT:    nn.rmsnorm_bwd_input {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.add {{.*}}{pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.attention_bwd {{.*}}pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.add {{.*}}{pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.linear_bwd_input {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.linear_bwd_input {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.add {{.*}}{pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.rmsnorm_bwd_input {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.add {{.*}}{pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    return

// W: every weight gradient with the component of its parameter.
// CHECK:       func.func @backward_weight(
// CHECK-NEXT:    nn.moe_bwd_weight {{.*}}pp.component = "mlp", pp.layer = 1 : i64, pp.span = ["dispatch", "mlp", "combine"]
// CHECK-NEXT:    nn.rmsnorm_bwd_weight {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.linear_bwd_weight {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.linear_bwd_weight {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.rmsnorm_bwd_weight {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.moe_bwd_weight {{.*}}pp.component = "mlp", pp.layer = 0 : i64, pp.span = ["dispatch", "mlp", "combine"]
// CHECK-NEXT:    nn.rmsnorm_bwd_weight {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.linear_bwd_weight {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.linear_bwd_weight {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.rmsnorm_bwd_weight {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    return

// BW (fused): B and W interleaved, still one run per (layer, component).
// CHECK:       func.func @backward(
// CHECK-NEXT:    nn.moe_bwd_input {{.*}}pp.component = "mlp", pp.layer = 1 : i64
// CHECK-NEXT:    nn.moe_bwd_weight {{.*}}pp.component = "mlp", pp.layer = 1 : i64
// CHECK-NEXT:    nn.rmsnorm_bwd_input {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NOT:     pp.layer = 0
// CHECK:         nn.rmsnorm_bwd_weight {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK:         nn.rmsnorm_bwd_weight {{.*}}{nn.layer = 2 : i64, pp.component = "attn", pp.layer = 1 : i64}
// CHECK-NEXT:    nn.moe_bwd_input {{.*}}pp.component = "mlp", pp.layer = 0 : i64
// CHECK-NEXT:    nn.moe_bwd_weight {{.*}}pp.component = "mlp", pp.layer = 0 : i64
// CHECK-NEXT:    nn.rmsnorm_bwd_input {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NOT:     "mlp"
// CHECK:         nn.rmsnorm_bwd_weight {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK:         nn.rmsnorm_bwd_weight {{.*}}{nn.layer = 1 : i64, pp.component = "attn", pp.layer = 0 : i64}
// CHECK-NEXT:    return

// The head is one layer with one component.
// CHECK-LABEL: pp.stage 1 rank 1 chunk 0 attributes {pp.components = {{\[}}["mlp"]]}
// CHECK:         nn.linear {{.*}}{nn.layer = 3 : i64, pp.component = "mlp", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.cross_entropy {{.*}}{nn.layer = 3 : i64, pp.component = "mlp", pp.layer = 0 : i64}
// CHECK:         func.func @backward_input(
// CHECK-NEXT:    nn.cross_entropy_bwd {{.*}}{nn.layer = 3 : i64, pp.component = "mlp", pp.layer = 0 : i64}
// CHECK-NEXT:    nn.linear_bwd_input {{.*}}{nn.layer = 3 : i64, pp.component = "mlp", pp.layer = 0 : i64}
