// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: tensor<f32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'nn.rmsnorm' op expects input of rank >= 1}}
  %0 = nn.rmsnorm %x, %g : (tensor<f32>, tensor<4xf32>) -> tensor<f32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<5xf32>) {
  // expected-error @+1 {{'nn.rmsnorm' op expects gamma of shape [4], got [5]}}
  %0 = nn.rmsnorm %x, %g : (tensor<2x4xf32>, tensor<5xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'nn.rmsnorm' op expects the result type to equal the input type}}
  %0 = nn.rmsnorm %x, %g : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'nn.rmsnorm' op expects epsilon > 0}}
  %0 = nn.rmsnorm %x, %g {epsilon = -1.0 : f32} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<4xf16>) {
  // expected-error @+1 {{'nn.rmsnorm' op expects all float operands and the result to have element type 'f32'}}
  %0 = nn.rmsnorm %x, %g : (tensor<2x4xf32>, tensor<4xf16>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%t: tensor<8xi32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{'nn.embedding' op expects tokens of rank 2 ([batch, seq]), got rank 1}}
  %0 = nn.embedding %t, %w : (tensor<8xi32>, tensor<16x4xf32>) -> tensor<1x8x4xf32>
  return
}

// -----

func.func @f(%t: tensor<2x8xi32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'nn.embedding' op expects a table of rank 2 ([vocab, hidden]), got rank 1}}
  %0 = nn.embedding %t, %w : (tensor<2x8xi32>, tensor<16xf32>) -> tensor<2x8x4xf32>
  return
}

// -----

func.func @f(%t: tensor<2x8xi32>, %w: tensor<16x4xf32>, %p: tensor<8x5xf32>) {
  // expected-error @+1 {{'nn.embedding' op expects positions of shape [max_positions, 4], got [8, 5]}}
  %0 = nn.embedding %t, %w, %p : (tensor<2x8xi32>, tensor<16x4xf32>, tensor<8x5xf32>) -> tensor<2x8x4xf32>
  return
}

// -----

func.func @f(%t: tensor<2x8xi32>, %w: tensor<16x4xf32>, %p: tensor<6x4xf32>) {
  // expected-error @+1 {{'nn.embedding' op has 6 positions for sequences of length 8}}
  %0 = nn.embedding %t, %w, %p : (tensor<2x8xi32>, tensor<16x4xf32>, tensor<6x4xf32>) -> tensor<2x8x4xf32>
  return
}

// -----

func.func @f(%t: tensor<2x8xi32>, %w: tensor<16x4xf32>, %p: tensor<8x4xf16>) {
  // expected-error @+1 {{'nn.embedding' op expects positions and table of one element type}}
  %0 = nn.embedding %t, %w, %p : (tensor<2x8xi32>, tensor<16x4xf32>, tensor<8x4xf16>) -> tensor<2x8x4xf32>
  return
}

// -----

func.func @f(%t: tensor<2x8xi32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{'nn.embedding' op result shape [2, 8, 5] does not match expected [2, 8, 4]}}
  %0 = nn.embedding %t, %w : (tensor<2x8xi32>, tensor<16x4xf32>) -> tensor<2x8x5xf32>
  return
}

// -----

func.func @f(%t: tensor<2x8xi32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{'nn.embedding' op expects the result element type to match the table}}
  %0 = nn.embedding %t, %w : (tensor<2x8xi32>, tensor<16x4xf32>) -> tensor<2x8x4xf16>
  return
}

// -----

func.func @f(%q: tensor<2x8xf32>, %k: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.attention' op expects q of rank 3 ([batch, seq, heads x head_dim]), got rank 2}}
  %0 = nn.attention %q, %k, %k {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x12xf32>, %k: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.attention' op num_heads 3 is not a multiple of num_kv_heads 2}}
  %0 = nn.attention %q, %k, %k {num_heads = 3 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x12xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x12xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x?xf32>, %k: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.attention' op expects a static feature dimension on q}}
  %0 = nn.attention %q, %k, %k {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x?xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x?xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x10xf32>, %k: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.attention' op q features 10 are not divisible by num_heads 4}}
  %0 = nn.attention %q, %k, %k {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x10xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x10xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x6xf32>, %k: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'nn.attention' op rotary embedding needs an even head dimension, got 3}}
  %0 = nn.attention %q, %k, %k {num_heads = 2 : i64, num_kv_heads = 2 : i64, rotary} : (tensor<2x4x6xf32>, tensor<2x4x6xf32>, tensor<2x4x6xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'nn.attention' op expects k of shape [2, 4, 4] (1 kv heads of dimension 4), got [2, 4, 8]}}
  %0 = nn.attention %q, %k, %v {num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x4xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>, %v: tensor<2x3x8xf32>) {
  // expected-error @+1 {{'nn.attention' op expects v of shape [2, 4, 1 x dv] (1 kv heads of value dimension dv > 0), got [2, 3, 8]}}
  %0 = nn.attention %q, %k, %v {num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x3x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.attention' op expects the result shape [2, 4, 8] (heads x the value head dimension) and the element type of q}}
  %0 = nn.attention %q, %q, %q {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.attention' op expects dropout in [0, 1), got 1}}
  %0 = nn.attention %q, %q, %q {num_heads = 2 : i64, num_kv_heads = 2 : i64, dropout = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf16>) {
  // expected-error @+1 {{'nn.attention' op expects all float operands and the result to have element type 'f32'}}
  %0 = nn.attention %q, %k, %k {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf16>, tensor<2x4x8xf16>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.attention' op attribute 'num_heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = nn.attention %q, %q, %q {num_heads = 0 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<f32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects input of rank >= 1}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64} : (tensor<f32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<f32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x9xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects router of shape [experts, 8], got [4, 9]}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64} : (tensor<6x8xf32>, tensor<4x9xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<3x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects w1 of shape [4, ffn, 8], got [3, 16, 8]}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<3x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'nn.moe' op expects w2 of shape [4, 8, 16], got [4, 16, 8]}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>, %w3: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects w3 of the shape of w1 [4, 16, 8], got [4, 8, 16]}}
  %0 = nn.moe %x, %r, %w1, %w2, %w3 {top_k = 2 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op top_k 5 exceeds the 4 experts}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 5 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects capacity_factor >= 0}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, capacity_factor = -1.0 : f32} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op activation must be "gelu" or "silu", got "relu"}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, activation = "relu"} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects the result type to equal the input type}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64} : (tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<8x6xf32>
  return
}

// -----

func.func @f(%x: tensor<6x8xf32>, %r: tensor<4x8xf16>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'nn.moe' op expects all float operands and the result to have element type 'f32'}}
  %0 = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64} : (tensor<6x8xf32>, tensor<4x8xf16>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.dropout' op expects rate in [0, 1), got 1.5}}
  %0 = nn.dropout %x {rate = 1.5 : f32, site = 0 : i64} : tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.dropout' op attribute 'site' failed to satisfy constraint}}
  %0 = nn.dropout %x {rate = 0.1 : f32, site = -1 : i64} : tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.dropout' op requires attribute 'site'}}
  %0 = nn.dropout %x {rate = 0.1 : f32} : tensor<2x4x8xf32>
  return
}
