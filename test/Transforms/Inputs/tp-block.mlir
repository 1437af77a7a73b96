// One GPT block with its embedding and loss, for the tensor-parallel tests.
func.func @model(%tok: tensor<2x8xi32> {nn.role = "tokens"},
                 %tgt: tensor<2x8xi32> {nn.role = "targets"},
                 %wte: tensor<32x16xf32> {nn.role = "param", nn.name = "wte", nn.init = "normal:0.02"},
                 %wpe: tensor<8x16xf32> {nn.role = "param", nn.name = "wpe", nn.init = "normal:0.02"},
                 %g1: tensor<16xf32> {nn.role = "param", nn.name = "ln1.g", nn.init = "ones"},
                 %b1: tensor<16xf32> {nn.role = "param", nn.name = "ln1.b", nn.init = "zeros"},
                 %wq: tensor<16x16xf32> {nn.role = "param", nn.name = "q.w", nn.init = "normal:0.02"},
                 %bq: tensor<16xf32> {nn.role = "param", nn.name = "q.b", nn.init = "zeros"},
                 %wk: tensor<8x16xf32> {nn.role = "param", nn.name = "k.w", nn.init = "normal:0.02"},
                 %wv: tensor<8x16xf32> {nn.role = "param", nn.name = "v.w", nn.init = "normal:0.02"},
                 %wo: tensor<16x16xf32> {nn.role = "param", nn.name = "o.w", nn.init = "normal:0.02"},
                 %bo: tensor<16xf32> {nn.role = "param", nn.name = "o.b", nn.init = "zeros"},
                 %g2: tensor<16xf32> {nn.role = "param", nn.name = "ln2.g", nn.init = "ones"},
                 %b2: tensor<16xf32> {nn.role = "param", nn.name = "ln2.b", nn.init = "zeros"},
                 %w1: tensor<32x16xf32> {nn.role = "param", nn.name = "fc1.w", nn.init = "normal:0.02"},
                 %w2: tensor<16x32xf32> {nn.role = "param", nn.name = "fc2.w", nn.init = "normal:0.02"},
                 %head: tensor<32x16xf32> {nn.role = "param", nn.name = "head", nn.init = "normal:0.02"})
    -> tensor<f32> {
  %0 = nn.embedding %tok, %wte, %wpe {nn.layer = 0 : i64}
      : (tensor<2x8xi32>, tensor<32x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  %1 = nn.layernorm %0, %g1, %b1 {nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %q = nn.linear %1, %wq, %bq {nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %k = nn.linear %1, %wk {nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x8xf32>
  %v = nn.linear %1, %wv {nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x8xf32>
  %a = nn.attention %q, %k, %v {nn.layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64}
      : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
  %o = nn.linear %a, %wo, %bo {nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %r1 = nn.add %0, %o {nn.layer = 1 : i64} : tensor<2x8x16xf32>
  %2 = nn.layernorm %r1, %g2, %b2 {nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %h = nn.linear %2, %w1 {nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  %act = nn.gelu %h {nn.layer = 1 : i64} : tensor<2x8x32xf32>
  %m = nn.linear %act, %w2 {nn.layer = 1 : i64}
      : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
  %r2 = nn.add %r1, %m {nn.layer = 1 : i64} : tensor<2x8x16xf32>
  %logits = nn.linear %r2, %head {nn.layer = 2 : i64}
      : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  %loss = nn.cross_entropy %logits, %tgt {nn.layer = 2 : i64}
      : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
