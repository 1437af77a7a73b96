// RUN: pipeforge-opt %s --pp-split-components -split-input-file -verify-diagnostics

// A stage must have its @forward: the layers come from it.
pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-error @+1 {{'pp.stage' op has no @forward to split into components}}
  pp.stage 0 rank 0 chunk 0 {
    func.func @backward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      return %x : tensor<4x8xf32>
    }
  }
}

// -----

// A backward op of a layer that @forward does not have.
pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %y = nn.gelu %x {nn.layer = 1 : i64} : tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
    func.func @backward_input(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) -> tensor<4x8xf32> {
      // expected-error @+1 {{'nn.gelu_bwd' op belongs to layer 2 (nn.layer) but @forward of its stage has no op of that layer}}
      %dx = nn.gelu_bwd %x, %dy {nn.layer = 2 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      return %dx : tensor<4x8xf32>
    }
  }
}

// -----

// Without nn.layer there are no layers to split: a warning, nothing tagged.
pp.pipeline @p stages 1 ranks 1 placement linear {
  // expected-warning @+1 {{no op of @forward has nn.layer: nothing to split into components}}
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %y = nn.gelu %x : tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
  }
}

// -----

// Module-level bodies (no pp.stage) are not split: a warning.
// expected-warning @+1 {{no pp.stage to split into components (run --pp-partition and --pp-split-backward first)}}
module {
  func.func @model(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %y = nn.gelu %x {nn.layer = 1 : i64} : tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}
