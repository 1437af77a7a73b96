// A complete model in the nn dialect, small enough to read: a token
// embedding, two residual MLP blocks (layernorm, linear, gelu, linear, add)
// and a head with the loss. It has what pipeforge-import writes and the
// compiler needs (docs/model-ir.md): every op's `nn.layer` (the unit
// --pp-partition cuts at: 0 the embedding, 1 and 2 the blocks, 3 the head),
// the arguments' `nn.role` (tokens, targets, param) with each parameter's
// `nn.name` and `nn.init`, and @model's `nn.vocab_size` and `nn.seq_len`.
// Microbatches of 2 sequences of 8 tokens from a 64-token vocabulary:
//
//   pipeforge-compile examples/two-layer-mlp.mlir --schedule 1f1b --ranks 2 \
//       --microbatches 2 -o mlp.pfp
//   pipeforge-run mlp.pfp --local-ranks 2 --steps 1
func.func @model(
    %tokens: tensor<2x8xi32> {nn.role = "tokens"},
    %targets: tensor<2x8xi32> {nn.role = "targets"},
    %wte: tensor<64x32xf32> {nn.role = "param", nn.name = "wte", nn.init = "normal:0.02"},
    %ln1_g: tensor<32xf32> {nn.role = "param", nn.name = "h.0.ln.weight", nn.init = "ones"},
    %ln1_b: tensor<32xf32> {nn.role = "param", nn.name = "h.0.ln.bias", nn.init = "zeros"},
    %w1a: tensor<128x32xf32> {nn.role = "param", nn.name = "h.0.fc.weight", nn.init = "normal:0.02"},
    %b1a: tensor<128xf32> {nn.role = "param", nn.name = "h.0.fc.bias", nn.init = "zeros"},
    %w1b: tensor<32x128xf32> {nn.role = "param", nn.name = "h.0.proj.weight", nn.init = "normal:0.02"},
    %b1b: tensor<32xf32> {nn.role = "param", nn.name = "h.0.proj.bias", nn.init = "zeros"},
    %ln2_g: tensor<32xf32> {nn.role = "param", nn.name = "h.1.ln.weight", nn.init = "ones"},
    %ln2_b: tensor<32xf32> {nn.role = "param", nn.name = "h.1.ln.bias", nn.init = "zeros"},
    %w2a: tensor<128x32xf32> {nn.role = "param", nn.name = "h.1.fc.weight", nn.init = "normal:0.02"},
    %b2a: tensor<128xf32> {nn.role = "param", nn.name = "h.1.fc.bias", nn.init = "zeros"},
    %w2b: tensor<32x128xf32> {nn.role = "param", nn.name = "h.1.proj.weight", nn.init = "normal:0.02"},
    %b2b: tensor<32xf32> {nn.role = "param", nn.name = "h.1.proj.bias", nn.init = "zeros"},
    %lnf_g: tensor<32xf32> {nn.role = "param", nn.name = "ln_f.weight", nn.init = "ones"},
    %lnf_b: tensor<32xf32> {nn.role = "param", nn.name = "ln_f.bias", nn.init = "zeros"},
    %head: tensor<64x32xf32> {nn.role = "param", nn.name = "lm_head.weight", nn.init = "normal:0.02"})
    -> tensor<f32> attributes {nn.model_name = "two-layer-mlp", nn.seq_len = 8 : i64, nn.vocab_size = 64 : i64} {
  %x = nn.embedding %tokens, %wte {nn.layer = 0 : i64}
      : (tensor<2x8xi32>, tensor<64x32xf32>) -> tensor<2x8x32xf32>
  // Block 1.
  %n1 = nn.layernorm %x, %ln1_g, %ln1_b {epsilon = 1.0e-05 : f32, nn.layer = 1 : i64}
      : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %h1 = nn.linear %n1, %w1a, %b1a {nn.layer = 1 : i64}
      : (tensor<2x8x32xf32>, tensor<128x32xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
  %a1 = nn.gelu %h1 {nn.layer = 1 : i64} : tensor<2x8x128xf32>
  %o1 = nn.linear %a1, %w1b, %b1b {nn.layer = 1 : i64}
      : (tensor<2x8x128xf32>, tensor<32x128xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %r1 = nn.add %x, %o1 {nn.layer = 1 : i64} : tensor<2x8x32xf32>
  // Block 2.
  %n2 = nn.layernorm %r1, %ln2_g, %ln2_b {epsilon = 1.0e-05 : f32, nn.layer = 2 : i64}
      : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %h2 = nn.linear %n2, %w2a, %b2a {nn.layer = 2 : i64}
      : (tensor<2x8x32xf32>, tensor<128x32xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
  %a2 = nn.gelu %h2 {nn.layer = 2 : i64} : tensor<2x8x128xf32>
  %o2 = nn.linear %a2, %w2b, %b2b {nn.layer = 2 : i64}
      : (tensor<2x8x128xf32>, tensor<32x128xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %r2 = nn.add %r1, %o2 {nn.layer = 2 : i64} : tensor<2x8x32xf32>
  // Head and loss.
  %nf = nn.layernorm %r2, %lnf_g, %lnf_b {epsilon = 1.0e-05 : f32, nn.layer = 3 : i64}
      : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %logits = nn.linear %nf, %head {nn.layer = 3 : i64}
      : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %loss = nn.cross_entropy %logits, %targets {nn.layer = 3 : i64}
      : (tensor<2x8x64xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
