// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

// The routing attributes of nn.moe (one case per verifier error).

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op scoring must be "softmax" or "sigmoid", got "relu"}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, scoring = "relu"} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects a finite routed_scaling_factor > 0}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, routed_scaling_factor = 0.0 : f32} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects 1 <= n_group <= 64, got 0}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, n_group = 0 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects 1 <= topk_group <= n_group (2), got 3}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, n_group = 2 : i64, topk_group = 3 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op n_group 3 does not divide the 4 experts}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, n_group = 3 : i64, topk_group = 1 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op top_k 2 exceeds the 1 experts of the topk_group best groups}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, n_group = 4 : i64, topk_group = 1 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>, %dy: tensor<6x8xf32>) {
  // expected-error @+1 {{'nn.moe_bwd_input' op scoring must be "softmax" or "sigmoid", got "tanh"}}
  %0 = "nn.moe_bwd_input"(%x, %r, %w1, %w2, %dy) {top_k = 2 : i64, scoring = "tanh"} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  return
}
