// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

// nn.moe's load-balancing bias (one case per verifier error).

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects a non-empty bias state name}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, scoring = "sigmoid", bias = ""} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op has a bias_update_speed but no bias}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, bias_update_speed = 0.01 : f32} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects a finite bias_update_speed >= 0}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, bias = "b", bias_update_speed = -0.001 : f32} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects a finite bias_update_speed >= 0}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, bias = "b", bias_update_speed = 0x7F800000 : f32} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>, %dy: tensor<6x8xf32>) {
  // expected-error @+1 {{'nn.moe_bwd_input' op expects a non-empty bias state name}}
  %0 = "nn.moe_bwd_input"(%x, %r, %w1, %w2, %dy) {top_k = 2 : i64, bias = ""} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op attribute 'bias' failed to satisfy constraint: string attribute}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, bias = 3 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}
