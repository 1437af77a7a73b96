// RUN: pipeforge-opt %s --pp-component-ranges --pp-assign-buffers -verify-diagnostics | FileCheck %s

// The warnings of the component ranges (the lowering emits the same ones
// when it computes them itself): a function with an op that carries no
// pp.component / pp.layer, or whose layers go the wrong way (ascending in
// @forward, descending in the backward functions), gets no ranges: an
// empty pp.component_ranges.
pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // CHECK-LABEL: func.func @forward(
    // CHECK-SAME:    %arg0: tensor<4xf32> {pp.buffer = 0 : i64}
    // CHECK-SAME:    attributes {pp.buffers = array<i64: 16, 16, 16>, pp.component_ranges = [{begin = 0 : i64, end = 1 : i64, kind = "attn", layer = 0 : i64}, {begin = 1 : i64, end = 3 : i64, kind = "mlp", layer = 0 : i64}, {begin = 3 : i64, end = 4 : i64, kind = "attn", layer = 1 : i64}]}
    // CHECK-NEXT:    pp.buffer = array<i64: 1>
    // CHECK-NEXT:    pp.buffer = array<i64: 2>
    // CHECK-NEXT:    pp.buffer = array<i64: 1>
    // CHECK-NEXT:    pp.buffer = array<i64: 2>
    func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
      %a = nn.add %x, %x {pp.component = "attn", pp.layer = 0 : i64} : tensor<4xf32>
      %b = nn.add %a, %a {pp.component = "dispatch", pp.layer = 0 : i64} : tensor<4xf32>
      %c = nn.add %b, %b {pp.component = "mlp", pp.layer = 0 : i64} : tensor<4xf32>
      %d = nn.add %c, %c {pp.component = "attn", pp.layer = 1 : i64} : tensor<4xf32>
      return %d : tensor<4xf32>
    }
    // CHECK-LABEL: func.func @backward_input(
    // CHECK-SAME:    pp.component_ranges = []
    // expected-warning @below {{1 of 2 kernels carry no pp.component / pp.layer (--pp-split-components): @backward_input of this stage gets no components}}
    func.func @backward_input(%x: tensor<4xf32>) -> tensor<4xf32> {
      %a = nn.add %x, %x {pp.component = "attn", pp.layer = 1 : i64} : tensor<4xf32>
      %b = nn.add %a, %a : tensor<4xf32>
      return %b : tensor<4xf32>
    }
    // CHECK-LABEL: func.func @backward_weight(
    // CHECK-SAME:    pp.component_ranges = []
    // expected-warning @below {{kernel 1 (add) of layer 1 follows layer 0: @backward_weight of this stage gets no components}}
    func.func @backward_weight(%x: tensor<4xf32>) -> tensor<4xf32> {
      %a = nn.add %x, %x {pp.component = "mlp", pp.layer = 0 : i64} : tensor<4xf32>
      %b = nn.add %a, %a {pp.component = "mlp", pp.layer = 1 : i64} : tensor<4xf32>
      return %b : tensor<4xf32>
    }
    // CHECK-LABEL: func.func @backward(
    // CHECK-SAME:    pp.component_ranges = [{begin = 0 : i64, end = 1 : i64, kind = "mlp", layer = 1 : i64}, {begin = 1 : i64, end = 2 : i64, kind = "mlp", layer = 0 : i64}]
    func.func @backward(%x: tensor<4xf32>) -> tensor<4xf32> {
      %a = nn.add %x, %x {pp.component = "combine", pp.layer = 1 : i64} : tensor<4xf32>
      %b = nn.add %a, %a {pp.component = "mlp", pp.layer = 0 : i64} : tensor<4xf32>
      return %b : tensor<4xf32>
    }
  }
}
