// RUN: pipeforge-opt %s --pp-split-backward -split-input-file -verify-diagnostics

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      // expected-error @+1 {{'arith.addf' op has no backward rule (BackwardOpInterface); --pp-split-backward cannot differentiate it}}
      %y = arith.addf %x, %x : tensor<4x8xf32>
      %z = nn.gelu %y : tensor<4x8xf32>
      return %z : tensor<4x8xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>,
                       %w: tensor<8x8xf32> {nn.role = "param"}) -> tensor<4x8xf32> {
      %t = nn.gelu %w : tensor<8x8xf32>
      // expected-error @+1 {{'nn.linear' op operand #1 is a parameter and must be an argument of @forward with nn.role = "param"}}
      %y = nn.linear %x, %t : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // expected-error @+1 {{argument #1 has unknown nn.role "weights" (expected "param", "tokens" or "targets")}}
    func.func @forward(%x: tensor<4x8xf32>,
                       %w: tensor<8x8xf32> {nn.role = "weights"}) -> tensor<4x8xf32> {
      %y = nn.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-error @+1 {{already has @backward_input; --pp-split-backward runs once}}
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %y = nn.gelu %x : tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
    func.func @backward_input(%dy: tensor<4x8xf32>) -> tensor<4x8xf32> {
      return %dy : tensor<4x8xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-error @+1 {{has no func.func @forward to differentiate}}
  pp.stage 0 rank 0 chunk 0 {
    func.func @fwd(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      return %x : tensor<4x8xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // expected-error @+1 {{argument #0 has no gradient and a zero gradient of type 'tensor<?x8xf32>' cannot be built (needs a static shape)}}
    func.func @forward(%unused: tensor<?x8xf32>, %x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %y = nn.gelu %x : tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
  }
}

// -----

// expected-error @+1 {{expects a body of one block to differentiate}}
func.func private @model(%x: tensor<4x8xf32>) -> tensor<4x8xf32>

// -----

func.func @model(%tok: tensor<2x4xi32>,
                 %table: tensor<?x8xf32> {nn.role = "param"}) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'nn.embedding' op needs a static vocabulary size to build its weight gradient}}
  %h = nn.embedding %tok, %table : (tensor<2x4xi32>, tensor<?x8xf32>) -> tensor<2x4x8xf32>
  return %h : tensor<2x4x8xf32>
}
