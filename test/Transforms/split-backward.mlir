// RUN: pipeforge-opt %s --pp-split-backward | FileCheck %s
// RUN: pipeforge-opt %s --pp-split-backward | FileCheck %s --check-prefix=NOW
// RUN: pipeforge-opt %s --pp-split-backward | pipeforge-opt | FileCheck %s --check-prefix=ROUNDTRIP

// A two-layer MLP cut in two stages: stage 0 is linear + gelu, stage 1 the
// head linear and the loss.
pp.pipeline @mlp stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>,
                       %w1: tensor<16x8xf32> {nn.role = "param", nn.name = "fc1.weight"},
                       %b1: tensor<16xf32> {nn.role = "param", nn.name = "fc1.bias"})
        -> tensor<4x16xf32> {
      %h = nn.linear %x, %w1, %b1 {nn.layer = 1 : i64}
          : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
      %a = nn.gelu %h {nn.layer = 1 : i64} : tensor<4x16xf32>
      return %a : tensor<4x16xf32>
    }
  }
  pp.stage 1 rank 1 chunk 0 {
    func.func @forward(%a: tensor<4x16xf32>,
                       %t: tensor<4xi32> {nn.role = "targets"},
                       %w2: tensor<10x16xf32> {nn.role = "param", nn.name = "fc2.weight"})
        -> tensor<f32> {
      %l = nn.linear %a, %w2 {nn.layer = 2 : i64}
          : (tensor<4x16xf32>, tensor<10x16xf32>) -> tensor<4x10xf32>
      %loss = nn.cross_entropy %l, %t {nn.layer = 2 : i64}
          : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<f32>
      return %loss : tensor<f32>
    }
  }
}

// Stage 0. @forward also returns x (for W) and h (for B's gelu_bwd).
// CHECK-LABEL: pp.stage 0
// CHECK:       func.func @forward(%[[X:.*]]: tensor<4x8xf32> {pp.role = "act_in"}
// CHECK-SAME:    -> (tensor<4x16xf32> {pp.role = "act_out"},
// CHECK-SAME:        tensor<4x8xf32> {pp.role = "stash", pp.stash = 0 : i64},
// CHECK-SAME:        tensor<4x16xf32> {pp.role = "stash", pp.stash = 1 : i64})
// CHECK:         %[[H:.*]] = nn.linear
// CHECK:         %[[A:.*]] = nn.gelu %[[H]]
// CHECK:         return %[[A]], %[[X]], %[[H]]

// B reads the weight as a parameter, h from the stash and the incoming
// gradient; it returns dx and, for W, the gradient of h.
// CHECK:       func.func @backward_input(
// CHECK-SAME:    %[[W1:[^:]*]]: tensor<16x8xf32> {nn.name = "fc1.weight", pp.arg = 1 : i64, pp.role = "param"},
// CHECK-SAME:    %[[SH:[^:]*]]: tensor<4x16xf32> {pp.role = "stash", pp.stash = 1 : i64},
// CHECK-SAME:    %[[DA:[^:]*]]: tensor<4x16xf32> {pp.result = 0 : i64, pp.role = "grad_in"})
// CHECK-SAME:    -> (tensor<4x8xf32> {pp.arg = 0 : i64, pp.role = "grad_out"},
// CHECK-SAME:        tensor<4x16xf32> {pp.role = "wstash", pp.wstash = 0 : i64})
// CHECK:         %[[DH:.*]] = nn.gelu_bwd %[[SH]], %[[DA]] {nn.layer = 1 : i64}
// CHECK:         %[[DX:.*]] = nn.linear_bwd_input %[[DH]], %[[W1]]
// CHECK:         return %[[DX]], %[[DH]]

// W: x from the stash and dh from B; one gradient per parameter.
// CHECK:       func.func @backward_weight(
// CHECK-SAME:    %[[SX:[^:]*]]: tensor<4x8xf32> {pp.role = "stash", pp.stash = 0 : i64},
// CHECK-SAME:    %[[WDH:[^:]*]]: tensor<4x16xf32> {pp.role = "wstash", pp.wstash = 0 : i64})
// CHECK-SAME:    -> (tensor<16x8xf32> {nn.name = "fc1.weight", pp.arg = 1 : i64, pp.role = "param_grad"},
// CHECK-SAME:        tensor<16xf32> {nn.name = "fc1.bias", pp.arg = 2 : i64, pp.role = "param_grad"})
// CHECK:         %[[DW:.*]], %[[DB:.*]] = nn.linear_bwd_weight %[[SX]], %[[WDH]] {has_bias, nn.layer = 1 : i64}
// CHECK:         return %[[DW]], %[[DB]]

// BW: B and W fused, reading the stash and the incoming gradient.
// CHECK:       func.func @backward(
// CHECK-SAME:    %[[BW1:[^:]*]]: tensor<16x8xf32> {{.*}}pp.role = "param"
// CHECK-SAME:    %[[BX:[^:]*]]: tensor<4x8xf32> {pp.role = "stash", pp.stash = 0 : i64},
// CHECK-SAME:    %[[BH:[^:]*]]: tensor<4x16xf32> {pp.role = "stash", pp.stash = 1 : i64},
// CHECK-SAME:    %[[BDA:[^:]*]]: tensor<4x16xf32> {pp.result = 0 : i64, pp.role = "grad_in"})
// CHECK-SAME:    -> (tensor<4x8xf32> {pp.arg = 0 : i64, pp.role = "grad_out"},
// CHECK-SAME:        tensor<16x8xf32> {{.*}}"param_grad"}, tensor<16xf32> {{.*}}"param_grad"})
// CHECK:         %[[BDH:.*]] = nn.gelu_bwd %[[BH]], %[[BDA]]
// CHECK:         %[[BDX:.*]] = nn.linear_bwd_input %[[BDH]], %[[BW1]]
// CHECK:         %[[BDW:.*]], %[[BDB:.*]] = nn.linear_bwd_weight %[[BX]], %[[BDH]]
// CHECK:         return %[[BDX]], %[[BDW]], %[[BDB]]

// Stage 1 (the loss stage): the loss gradient is a scalar seed; the head
// weight is a parameter of B, not stash; dlogits goes to W.
// CHECK-LABEL: pp.stage 1
// CHECK:       func.func @forward(%{{.*}}: tensor<4x16xf32> {pp.role = "act_in"}, %{{.*}}: tensor<4xi32> {nn.role = "targets", pp.role = "data"}, %{{.*}}: tensor<10x16xf32> {nn.name = "fc2.weight", nn.role = "param", pp.role = "param"})
// CHECK-SAME:    -> (tensor<f32> {pp.role = "loss"}, tensor<4x16xf32> {pp.role = "stash", pp.stash = 0 : i64}, tensor<4xi32> {pp.role = "stash", pp.stash = 1 : i64}, tensor<4x10xf32> {pp.role = "stash", pp.stash = 2 : i64})
// CHECK:       func.func @backward_input(%[[HW:[^:]*]]: tensor<10x16xf32> {nn.name = "fc2.weight", pp.arg = 2 : i64, pp.role = "param"}, %[[T:[^:]*]]: tensor<4xi32> {pp.role = "stash", pp.stash = 1 : i64}, %[[L:[^:]*]]: tensor<4x10xf32> {pp.role = "stash", pp.stash = 2 : i64}, %[[SEED:[^:]*]]: tensor<f32> {pp.result = 0 : i64, pp.role = "loss_seed"})
// CHECK-SAME:    -> (tensor<4x16xf32> {pp.arg = 0 : i64, pp.role = "grad_out"}, tensor<4x10xf32> {pp.role = "wstash", pp.wstash = 0 : i64})
// CHECK:         %[[DL:.*]] = nn.cross_entropy_bwd %[[L]], %[[T]], %[[SEED]]
// CHECK:         %[[DA2:.*]] = nn.linear_bwd_input %[[DL]], %[[HW]]
// CHECK:         return %[[DA2]], %[[DL]]
// CHECK:       func.func @backward_weight(%[[A2:[^:]*]]: tensor<4x16xf32> {pp.role = "stash", pp.stash = 0 : i64}, %[[WDL:[^:]*]]: tensor<4x10xf32> {pp.role = "wstash", pp.wstash = 0 : i64})
// CHECK-SAME:    -> (tensor<10x16xf32> {nn.name = "fc2.weight", pp.arg = 2 : i64, pp.role = "param_grad"})
// CHECK:         %[[DW2:.*]] = nn.linear_bwd_weight %[[A2]], %[[WDL]]
// CHECK:         return %[[DW2]]
// CHECK:       func.func @backward(

// W never feeds B: B holds no weight-gradient op, and W holds nothing but
// weight-gradient ops (and returns only their results).
// NOW-LABEL:   func.func @backward_input
// NOW-NOT:     _bwd_weight
// NOW:         return
// NOW-LABEL:   func.func @backward_weight
// NOW-NOT:     nn.{{(linear_bwd_input|gelu_bwd|cross_entropy_bwd)}}
// NOW:         nn.linear_bwd_weight
// NOW-NEXT:    return
// NOW-LABEL:   func.func @backward_input
// NOW-NOT:     _bwd_weight
// NOW:         return
// NOW-LABEL:   func.func @backward_weight
// NOW-NEXT:    nn.linear_bwd_weight
// NOW-NEXT:    return

// ROUNDTRIP-COUNT-2: func.func @backward_weight
