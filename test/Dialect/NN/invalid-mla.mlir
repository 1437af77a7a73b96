// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

// The verifier errors of MLA's attention attributes and nn.concat_heads.

func.func @f(%q: tensor<2x4x24xf32>) {
  // expected-error @+1 {{'nn.attention' op expects rope_dim in [0, 12] (the head dimension), got 16}}
  %0 = nn.attention %q, %q, %q {num_heads = 2 : i64, num_kv_heads = 2 : i64, rotary, rope_dim = 16 : i64} : (tensor<2x4x24xf32>, tensor<2x4x24xf32>, tensor<2x4x24xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x24xf32>) {
  // expected-error @+1 {{'nn.attention' op expects rope_dim in [0, 12] (the head dimension), got -2}}
  %0 = nn.attention %q, %q, %q {num_heads = 2 : i64, num_kv_heads = 2 : i64, rotary, rope_dim = -2 : i64} : (tensor<2x4x24xf32>, tensor<2x4x24xf32>, tensor<2x4x24xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x24xf32>) {
  // expected-error @+1 {{'nn.attention' op rope_dim 4 needs the rotary attribute}}
  %0 = nn.attention %q, %q, %q {num_heads = 2 : i64, num_kv_heads = 2 : i64, rope_dim = 4 : i64} : (tensor<2x4x24xf32>, tensor<2x4x24xf32>, tensor<2x4x24xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x24xf32>) {
  // expected-error @+1 {{'nn.attention' op rotary embedding needs an even rope_dim, got 3}}
  %0 = nn.attention %q, %q, %q {num_heads = 2 : i64, num_kv_heads = 2 : i64, rotary, rope_dim = 3 : i64} : (tensor<2x4x24xf32>, tensor<2x4x24xf32>, tensor<2x4x24xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x24xf32>, %v: tensor<2x4x5xf32>) {
  // expected-error @+1 {{'nn.attention' op expects v of shape [2, 4, 2 x dv] (2 kv heads of value dimension dv > 0), got [2, 4, 5]}}
  %0 = nn.attention %q, %q, %v {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x24xf32>, tensor<2x4x24xf32>, tensor<2x4x5xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x24xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.attention' op expects the result shape [2, 4, 8] (heads x the value head dimension) and the element type of q}}
  %0 = nn.attention %q, %q, %v {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x24xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%a: tensor<2x4x10xf32>, %b: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.concat_heads' op lhs features 10 are not a positive multiple of 4 heads}}
  %0 = nn.concat_heads %a, %b {num_heads = 4 : i64} : (tensor<2x4x10xf32>, tensor<2x4x8xf32>) -> tensor<2x4x18xf32>
  return
}

// -----

func.func @f(%a: tensor<2x4x16xf32>, %b: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'nn.concat_heads' op rhs features 6 are not a positive multiple of 4 heads}}
  %0 = nn.concat_heads %a, %b {num_heads = 4 : i64} : (tensor<2x4x16xf32>, tensor<2x4x6xf32>) -> tensor<2x4x22xf32>
  return
}

// -----

func.func @f(%a: tensor<2x4x16xf32>, %b: tensor<2x3x8xf32>) {
  // expected-error @+1 {{'nn.concat_heads' op expects rhs of leading shape [2, 4] (that of lhs), got [2, 3, 8]}}
  %0 = nn.concat_heads %a, %b {num_heads = 4 : i64, broadcast} : (tensor<2x4x16xf32>, tensor<2x3x8xf32>) -> tensor<2x4x48xf32>
  return
}

// -----

func.func @f(%a: tensor<2x4x16xf32>, %b: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.concat_heads' op result shape [2, 4, 24] does not match expected [2, 4, 48]}}
  %0 = nn.concat_heads %a, %b {num_heads = 4 : i64, broadcast} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%a: tensor<2x4x16xf32>, %b: tensor<2x4x8xf16>) {
  // expected-error @+1 {{'nn.concat_heads' op expects all float operands and the result to have element type 'f32'}}
  %0 = nn.concat_heads %a, %b {num_heads = 4 : i64, broadcast} : (tensor<2x4x16xf32>, tensor<2x4x8xf16>) -> tensor<2x4x48xf32>
  return
}

// -----

func.func @f(%a: tensor<2x4x16xf32>, %b: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'nn.concat_heads' op attribute 'num_heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = nn.concat_heads %a, %b {num_heads = 0 : i64} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x24xf32>) {
  // expected-error @+1 {{'nn.concat_heads_bwd' op expects lhs_head_dim in [1, 5] (below the result's head dimension 6), got 6}}
  %0:2 = nn.concat_heads_bwd %dy {num_heads = 4 : i64, lhs_head_dim = 6 : i64} : (tensor<2x4x24xf32>) -> (tensor<2x4x24xf32>, tensor<2x4x0xf32>)
  return
}

// -----

func.func @f(%dy: tensor<2x4x24xf32>) {
  // expected-error @+1 {{'nn.concat_heads_bwd' op result rhs_grad has shape [2, 4, 8], expected [2, 4, 2]}}
  %0:2 = nn.concat_heads_bwd %dy {num_heads = 4 : i64, lhs_head_dim = 4 : i64, broadcast} : (tensor<2x4x24xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>)
  return
}
