// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.tp_all_reduce' op attribute 'tp' failed to satisfy constraint: 64-bit signless integer attribute whose minimum value is 2}}
  %0 = nn.tp_all_reduce %x {tp = 1 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.tp_all_gather' op expects dim in [0, 2) for an input of rank 2, got 2}}
  %0 = nn.tp_all_gather %x {tp = 2 : i64, dim = 2 : i64} : (tensor<2x8xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'nn.tp_all_gather' op result result has shape [2, 8], expected [2, 16]}}
  %0 = nn.tp_all_gather %x {tp = 2 : i64, dim = 1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x9xf32>) {
  // expected-error @+1 {{'nn.tp_reduce_scatter' op expects input dimension 1 (9) to be divisible by tp = 2}}
  %0 = nn.tp_reduce_scatter %x {tp = 2 : i64, dim = 1 : i64} : (tensor<2x9xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%l: tensor<2x8x32xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{'nn.vocab_parallel_cross_entropy' op targets [2, 4] do not match the logits' leading shape [2, 8]}}
  %0 = nn.vocab_parallel_cross_entropy %l, %t {tp = 2 : i64} : (tensor<2x8x32xf32>, tensor<2x4xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x8x32xf32>, %t: tensor<2x8xi32>, %g: tensor<1xf32>) {
  // expected-error @+1 {{'nn.vocab_parallel_cross_entropy_bwd' op operand #2 must be 0D tensor of floating-point values, but got 'tensor<1xf32>'}}
  %0 = nn.vocab_parallel_cross_entropy_bwd %l, %t, %g {tp = 2 : i64} : (tensor<2x8x32xf32>, tensor<2x8xi32>, tensor<1xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @f(%t: tensor<2x8xi32>, %w: tensor<32x16xf32>) {
  // expected-error @+1 {{'nn.embedding' op attribute 'vocab_shards' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = nn.embedding %t, %w {vocab_shards = 0 : i64} : (tensor<2x8xi32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  return
}
