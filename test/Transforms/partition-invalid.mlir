// RUN: pipeforge-opt %s -split-input-file -allow-unregistered-dialect --pp-partition="stages=2" -verify-diagnostics

// expected-error @+1 {{found no 'func.func @model' to partition}}
module {
  func.func @other() {
    return
  }
}

// -----

// expected-error @+1 {{'@model' has no body to partition}}
func.func private @model(tensor<4xf32>) -> tensor<4xf32>

// -----

func.func @model(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {nn.role = "param"}) -> tensor<4x8xf32> {
  %y = nn.linear %x, %w {nn.layer = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  // expected-error @+1 {{'nn.gelu' op has no integer 'nn.layer' attribute; --pp-partition needs every op of @model in a layer}}
  %z = nn.gelu %y : tensor<4x8xf32>
  return %z : tensor<4x8xf32>
}

// -----

func.func @model(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {nn.role = "param"}) -> tensor<4x8xf32> {
  // expected-note @+1 {{layer 0 ended here}}
  %a = nn.linear %x, %w {nn.layer = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = nn.gelu %a {nn.layer = 1 : i64} : tensor<4x8xf32>
  // expected-error @+1 {{'nn.linear' op is in layer 0, which ended earlier; the ops of a layer must be contiguous}}
  %c = nn.linear %b, %w {nn.layer = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}

// -----

// expected-error @+1 {{cannot partition @model: cannot cut 1 layer into 2 stages: every stage needs at least one layer}}
func.func @model(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = nn.gelu %x {nn.layer = 0 : i64} : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// expected-error @+1 {{'@model' has no ops to partition}}
func.func @model(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  return %x : tensor<4x8xf32>
}

// -----

// expected-error @+1 {{'@model' must have a single block, it has 2}}
func.func @model(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  "test.br"() [^bb1] : () -> ()
^bb1:
  return %x : tensor<4x8xf32>
}

// -----

// A layer id at the edge of int64 (the hash map's reserved keys) is refused.
func.func @model(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {nn.role = "param"}) -> tensor<4x8xf32> {
  // expected-error @+1 {{'nn.linear' op has 'nn.layer' = 9223372036854775807; layer ids must be in [0, 2147483647]}}
  %y = nn.linear %x, %w {nn.layer = 9223372036854775807 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %z = nn.gelu %y {nn.layer = 1 : i64} : tensor<4x8xf32>
  return %z : tensor<4x8xf32>
}

// -----

func.func @model(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {nn.role = "param"}) -> tensor<4x8xf32> {
  // expected-error @+1 {{'nn.linear' op has 'nn.layer' = -1; layer ids must be in [0, 2147483647]}}
  %y = nn.linear %x, %w {nn.layer = -1 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
