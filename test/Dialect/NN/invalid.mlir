// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: tensor<f32>, %w: tensor<4x4xf32>) {
  // expected-error @+1 {{'nn.linear' op expects input of rank >= 1}}
  %0 = nn.linear %x, %w : (tensor<f32>, tensor<4x4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{'nn.linear' op expects weight of rank 2 ([out, in]), got rank 1}}
  %0 = nn.linear %x, %w : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %w: tensor<8x5xf32>) {
  // expected-error @+1 {{'nn.linear' op input features 4 do not match weight [8, 5] ([out, in])}}
  %0 = nn.linear %x, %w : (tensor<2x4xf32>, tensor<8x5xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'nn.linear' op expects bias of shape [8], got [4]}}
  %0 = nn.linear %x, %w, %b : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'nn.linear' op result shape [2, 4] does not match expected [2, 8]}}
  %0 = nn.linear %x, %w : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %w: tensor<8x4xf16>) {
  // expected-error @+1 {{'nn.linear' op expects all float operands and the result to have element type 'f32'}}
  %0 = nn.linear %x, %w : (tensor<2x4xf32>, tensor<8x4xf16>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xi32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'nn.linear' op operand #0 must be ranked tensor of floating-point values}}
  %0 = nn.linear %x, %w : (tensor<2x4xi32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<f32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'nn.layernorm' op expects input of rank >= 1}}
  %0 = nn.layernorm %x, %g, %g : (tensor<f32>, tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<5xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'nn.layernorm' op expects gamma of shape [4], got [5]}}
  %0 = nn.layernorm %x, %g, %b : (tensor<2x4xf32>, tensor<5xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<4xf32>, %b: tensor<4x1xf32>) {
  // expected-error @+1 {{'nn.layernorm' op expects beta of shape [4], got [4, 1]}}
  %0 = nn.layernorm %x, %g, %b : (tensor<2x4xf32>, tensor<4xf32>, tensor<4x1xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'nn.layernorm' op expects the result type to equal the input type}}
  %0 = nn.layernorm %x, %g, %g : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'nn.layernorm' op expects epsilon > 0}}
  %0 = nn.layernorm %x, %g, %g {epsilon = 0.0 : f32} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %g: tensor<4xf16>) {
  // expected-error @+1 {{'nn.layernorm' op expects all float operands and the result to have element type 'f32'}}
  %0 = nn.layernorm %x, %g, %g : (tensor<2x4xf32>, tensor<4xf16>, tensor<4xf16>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{'nn.gelu' op requires the same type for all operands and results}}
  %0 = "nn.gelu"(%x) : (tensor<2x4xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>, %y: tensor<4x2xf32>) {
  // expected-error @+1 {{'nn.add' op requires the same type for all operands and results}}
  %0 = "nn.add"(%x, %y) : (tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%l: tensor<8xf32>, %t: tensor<2xi32>) {
  // expected-error @+1 {{'nn.cross_entropy' op expects logits of rank >= 2 ([..., vocab]), got rank 1}}
  %0 = nn.cross_entropy %l, %t : (tensor<8xf32>, tensor<2xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x8xf32>, %t: tensor<2x1xi32>) {
  // expected-error @+1 {{'nn.cross_entropy' op targets [2, 1] do not match the logits' leading shape [2]}}
  %0 = nn.cross_entropy %l, %t : (tensor<2x8xf32>, tensor<2x1xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x8xf32>, %t: tensor<3xi32>) {
  // expected-error @+1 {{'nn.cross_entropy' op targets [3] do not match the logits' leading shape [2]}}
  %0 = nn.cross_entropy %l, %t : (tensor<2x8xf32>, tensor<3xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x8xf32>, %t: tensor<2xi32>) {
  // expected-error @+1 {{'nn.cross_entropy' op expects the loss element type to match the logits}}
  %0 = nn.cross_entropy %l, %t : (tensor<2x8xf32>, tensor<2xi32>) -> tensor<f16>
  return
}
