// A 4-layer nn model for the --pp-partition tests: an embedding (layer 0),
// two MLP blocks with a residual (layers 1, 2) and a head with the loss (3).
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
