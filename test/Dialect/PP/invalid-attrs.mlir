// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics

// The pp dialect's attribute verifier: pp.role is one of the pp::Role names
// (PPAttrs.td), an argument role on arguments and a result role on results;
// the preparation annotations (--pp-assign-buffers, --pp-component-ranges)
// have their fixed form.

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // expected-error @+1 {{'func.func' op argument 0: unknown pp.role 'activation' (expected one of: act_in, data, tokens, targets, param, grad_in, loss_seed, stash, wstash)}}
    func.func @forward(%x: tensor<4xf32> {pp.role = "activation"}) -> tensor<4xf32> {
      return %x : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // expected-error @+1 {{'func.func' op argument 0: pp.role 'act_out' is not an argument role (expected one of: act_in, data, tokens, targets, param, grad_in, loss_seed, stash, wstash)}}
    func.func @forward(%x: tensor<4xf32> {pp.role = "act_out"}) -> tensor<4xf32> {
      return %x : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // expected-error @+1 {{'func.func' op result 0: pp.role 'grad_in' is not a result role (expected one of: stash, wstash, act_out, loss, grad_out, param_grad)}}
    func.func @forward(%x: tensor<4xf32> {pp.role = "act_in"}) -> (tensor<4xf32> {pp.role = "grad_in"}) {
      return %x : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // expected-error @+1 {{'func.func' op argument 0: pp.role must be a string, got 3 : i64}}
    func.func @forward(%x: tensor<4xf32> {pp.role = 3 : i64}) -> tensor<4xf32> {
      return %x : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
      // expected-error @+1 {{'nn.add' op pp.role belongs on a function's arguments and results, not on an op}}
      %a = nn.add %x, %x {pp.role = "act_in"} : tensor<4xf32>
      return %a : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4xf32> {pp.buffer = 0 : i64}) -> tensor<4xf32>
        attributes {pp.buffers = array<i64: 16, 16>} {
      // expected-error @+1 {{'nn.add' op has no pp.buffer, but its function has pp.buffers (rerun --pp-assign-buffers)}}
      %a = nn.add %x, %x : tensor<4xf32>
      return %a : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4xf32> {pp.buffer = 0 : i64}) -> tensor<4xf32>
        attributes {pp.buffers = array<i64: 16, 16>} {
      // expected-error @+1 {{'nn.add' op result: pp.buffer 2 out of range (the function has 2 buffers)}}
      %a = nn.add %x, %x {pp.buffer = array<i64: 2>} : tensor<4xf32>
      return %a : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
      // expected-error @+1 {{'nn.add' op pp.buffer must be an array<i64> with one buffer per result (1), got 1 : i64}}
      %a = nn.add %x, %x {pp.buffer = 1 : i64} : tensor<4xf32>
      return %a : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // expected-error @+1 {{'func.func' op pp.component_ranges[0]: kind 'dispatch' (expected attn or mlp)}}
    func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32>
        attributes {pp.component_ranges = [{begin = 0 : i64, end = 1 : i64, kind = "dispatch", layer = 0 : i64}]} {
      %a = nn.add %x, %x : tensor<4xf32>
      return %a : tensor<4xf32>
    }
  }
}

// -----

pp.pipeline @p stages 1 ranks 1 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    // expected-error @+1 {{'func.func' op pp.component_ranges[1]: layer 0, kernels [0, 1) (ranges are ordered, disjoint, non-empty and within the 1 ops of the body)}}
    func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32>
        attributes {pp.component_ranges = [{begin = 0 : i64, end = 1 : i64, kind = "attn", layer = 0 : i64}, {begin = 0 : i64, end = 1 : i64, kind = "mlp", layer = 0 : i64}]} {
      %a = nn.add %x, %x : tensor<4xf32>
      return %a : tensor<4xf32>
    }
  }
}
