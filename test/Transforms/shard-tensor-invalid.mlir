// RUN: not pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=8" -o /dev/null 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: not pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=4" -o /dev/null 2>&1 | FileCheck %s --check-prefix=KV
// RUN: not pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=16 sequence-parallel=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SEQ
// RUN: not pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=0" -o /dev/null 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=1 sequence-parallel=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SP1
// RUN: not pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=2" --nn-shard-tensor="tp=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics --nn-shard-tensor="tp=2" -o /dev/null

// HEADS: tp-block.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op number of attention heads (4) is not divisible by tp = 8
// KV: error: 'nn.attention' op number of KV heads (2) is not divisible by tp = 4 (grouped-query attention splits whole KV heads; use a tp that divides it)
// SEQ: error: 'nn.embedding' op sequence length (sequence parallelism) (8) is not divisible by tp = 16
// ZERO: error: nn-shard-tensor: tp must be >= 1, got 0
// SP1: error: nn-shard-tensor: sequence-parallel needs tp >= 2
// TWICE: error: 'func.func' op is already tensor-parallel (nn.tensor_parallel)

// A vocabulary tp does not divide.
func.func @vocab(%tok: tensor<2x8xi32>, %wte: tensor<33x16xf32>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{'nn.embedding' op vocabulary size (33) is not divisible by tp = 2}}
  %0 = nn.embedding %tok, %wte {nn.layer = 0 : i64}
      : (tensor<2x8xi32>, tensor<33x16xf32>) -> tensor<2x8x16xf32>
  return %0 : tensor<2x8x16xf32>
}

// -----

// A feature count tp does not divide (column-parallel rows).
func.func @rows(%x: tensor<2x8x16xf32>, %w: tensor<15x16xf32>) -> tensor<2x8x15xf32> {
  // expected-error @+1 {{'nn.linear' op dimension 0 of parameter #1 (15) is not divisible by tp = 2}}
  %h = nn.linear %x, %w {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<15x16xf32>) -> tensor<2x8x15xf32>
  %a = nn.gelu %h {nn.layer = 1 : i64} : tensor<2x8x15xf32>
  return %a : tensor<2x8x15xf32>
}

// -----

// A split activation reaching an op that cannot take one.
func.func @escape(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>) -> tensor<2x8x16xf32> {
  %h = nn.linear %x, %w {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %a = nn.gelu %h {nn.layer = 1 : i64} : tensor<2x8x16xf32>
  // expected-error @+1 {{'func.return' op cannot be split over tp = 2: it reads a feature-split operand}}
  return %a : tensor<2x8x16xf32>
}

// -----

// Weights must be function arguments.
func.func @const(%x: tensor<2x8x16xf32>, %w0: tensor<16x16xf32>) -> tensor<2x8x16xf32> {
  %w = nn.gelu %w0 : tensor<16x16xf32>
  // expected-error @+1 {{'nn.linear' op needs its weights as function arguments to split them over tp = 2}}
  %h = nn.linear %x, %w {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %a = nn.gelu %h {nn.layer = 1 : i64} : tensor<2x8x16xf32>
  %y = nn.linear %a, %w0 {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// A dropout between a column-parallel and a row-parallel linear sees a
// feature shard: its mask could not match the unsharded model's.
func.func @dropsplit(%x: tensor<2x8x16xf32>, %w1: tensor<32x16xf32>, %w2: tensor<16x32xf32>) -> tensor<2x8x16xf32> {
  %h = nn.linear %x, %w1 {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  %a = nn.gelu %h {nn.layer = 1 : i64} : tensor<2x8x32xf32>
  // expected-error @+1 {{'nn.dropout' op on a feature-split activation is not supported under tensor parallelism (its mask would not match the unsharded model's)}}
  %d = nn.dropout %a {nn.layer = 1 : i64, rate = 0.1 : f32, site = 0 : i64} : tensor<2x8x32xf32>
  %o = nn.linear %d, %w2 {nn.layer = 1 : i64} : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
  return %o : tensor<2x8x16xf32>
}

// -----

// nn.concat_heads joins per-head values that column-parallel linears split.
func.func @concatWhole(%a: tensor<2x8x16xf32>, %b: tensor<2x8x4xf32>) -> tensor<2x8x24xf32> {
  // expected-error @+1 {{'nn.concat_heads' op expects per-head values from a column-parallel linear, got a replicated operand}}
  %k = nn.concat_heads %a, %b {broadcast, num_heads = 2 : i64, nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<2x8x4xf32>) -> tensor<2x8x24xf32>
  return %k : tensor<2x8x24xf32>
}

// -----

// Its shared head must be whole on every rank.
func.func @concatSplitShared(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %w2: tensor<4x16xf32>) -> tensor<2x8x24xf32> {
  %a = nn.linear %x, %w {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %h = nn.linear %x, %w2 {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<4x16xf32>) -> tensor<2x8x4xf32>
  %g = nn.gelu %h {nn.layer = 1 : i64} : tensor<2x8x4xf32>
  // expected-error @+1 {{'nn.concat_heads' op expects a whole shared head, got a feature-split operand}}
  %k = nn.concat_heads %a, %g {broadcast, num_heads = 2 : i64, nn.layer = 1 : i64}
      : (tensor<2x8x16xf32>, tensor<2x8x4xf32>) -> tensor<2x8x24xf32>
  return %k : tensor<2x8x24xf32>
}

// -----

// Its heads must divide by tp.
func.func @concatHeads(%x: tensor<2x8x16xf32>, %w: tensor<18x16xf32>, %w2: tensor<4x16xf32>) -> tensor<2x8x30xf32> {
  %a = nn.linear %x, %w {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<18x16xf32>) -> tensor<2x8x18xf32>
  %b = nn.linear %x, %w2 {nn.layer = 1 : i64} : (tensor<2x8x16xf32>, tensor<4x16xf32>) -> tensor<2x8x4xf32>
  // expected-error @+1 {{'nn.concat_heads' op num_heads (3) is not divisible by tp = 2}}
  %k = nn.concat_heads %a, %b {broadcast, num_heads = 3 : i64, nn.layer = 1 : i64}
      : (tensor<2x8x18xf32>, tensor<2x8x4xf32>) -> tensor<2x8x30xf32>
  return %k : tensor<2x8x30xf32>
}
