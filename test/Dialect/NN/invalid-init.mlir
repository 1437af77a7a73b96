// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics
// A parameter's nn.init must be an initialiser the runtime knows
// (normal:<std> with a finite std >= 0, zeros, ones): the same check as the
// program validator's, so a bad one is reported at the argument, not as an
// internal error after lowering (found by the pass-pipeline fuzz target).

// expected-error @+1 {{'func.func' op argument #0: 'nn.init' must be one of normal:<std>, zeros, ones, got "normal:0.0\FF"}}
func.func @model(%w: tensor<4x4xf32> {nn.role = "param", nn.init = "normal:0.0\FF"}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op argument #1: 'nn.init' must be one of normal:<std>, zeros, ones, got "normal:-1"}}
func.func @model(%a: tensor<4xf32> {nn.init = "zeros"}, %w: tensor<4x4xf32> {nn.init = "normal:-1"}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op argument #0: 'nn.init' must be one of normal:<std>, zeros, ones, got 3 : i64}}
func.func @model(%w: tensor<4x4xf32> {nn.init = 3}) {
  return
}

// -----

// Accepted forms.
func.func @model(%a: tensor<4xf32> {nn.init = "zeros"}, %b: tensor<4xf32> {nn.init = "ones"},
                 %w: tensor<4x4xf32> {nn.init = "normal:0.02"}) {
  return
}
