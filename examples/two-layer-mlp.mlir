// A two-layer MLP block with a residual, a layernorm and a loss, in the nn
// dialect. Parameters are explicit function arguments.
func.func @model(%x: tensor<16x64xf32>, %targets: tensor<16xi32>,
                 %ln_g: tensor<64xf32>, %ln_b: tensor<64xf32>,
                 %w1: tensor<256x64xf32>, %b1: tensor<256xf32>,
                 %w2: tensor<64x256xf32>, %b2: tensor<64xf32>,
                 %head: tensor<100x64xf32>) -> tensor<f32> {
  %n = nn.layernorm %x, %ln_g, %ln_b {epsilon = 1.0e-05 : f32}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %h = nn.linear %n, %w1, %b1
      : (tensor<16x64xf32>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<16x256xf32>
  %a = nn.gelu %h : tensor<16x256xf32>
  %o = nn.linear %a, %w2, %b2
      : (tensor<16x256xf32>, tensor<64x256xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %r = nn.add %x, %o : tensor<16x64xf32>
  %logits = nn.linear %r, %head
      : (tensor<16x64xf32>, tensor<100x64xf32>) -> tensor<16x100xf32>
  %loss = nn.cross_entropy %logits, %targets
      : (tensor<16x100xf32>, tensor<16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
