// RUN: pipeforge-opt --nn-cost-report %s -o /dev/null | FileCheck %s
// RUN: pipeforge-opt --nn-cost-report=bytes-per-element=4 %s -o /dev/null | FileCheck %s --check-prefix=FP32
// RUN: not pipeforge-opt --nn-cost-report=bytes-per-element=0 %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=ERR

// T = 8 tokens, h = 8, ffn = 16. Layer 1 by hand (2 bytes per element):
//   layernorm  stash x 64 el = 128 B, params 16 el = 32 B
//   linear 1   F = B = W = 2*8*8*16 = 2048; stash 64 el = 128 B;
//              W stash (64 + 128) el = 384 B; params 144 el = 288 B
//   gelu       stash 128 el = 256 B
//   linear 2   F = B = W = 2048; stash 128 el = 256 B; W stash 192 el = 384 B;
//              params 136 el = 272 B
//   dropout    its mask 64 x 1 B = 64 B (a stored-mask implementation's)
// Layer 2: the head, 2*8*8*10 = 1280 FLOPs each; logits stashed by the loss.

// CHECK: nn cost report (2 bytes per element, dropout masks 1 byte)
// CHECK-NEXT: function @model
// CHECK-NEXT: layer F_flops B_flops W_flops stash_bytes W_stash_bytes param_bytes
// CHECK-NEXT: layer 1 4096 4096 4096 832 768 592
// CHECK-NEXT: layer 2 1280 1280 1280 288 288 160
// CHECK-NEXT: total 5376 5376 5376 1120 1056 752

// FP32: layer 1 4096 4096 4096 1600 1536 1184

// CHECK: pipeline @p
// CHECK-NEXT: stage
// CHECK-NEXT: stage 0 r0 4096 4096 4096 832 768 592
// CHECK-NEXT: stage 1 r1 1280 1280 1280 288 288 160
// CHECK-NEXT: total 5376 5376 5376 1120 1056 752

// ERR: error: nn-cost-report: bytes-per-element must be > 0

func.func @model(%x: tensor<2x4x8xf32>, %t: tensor<2x4xi32>,
                 %g: tensor<8xf32>, %b: tensor<8xf32>,
                 %w1: tensor<16x8xf32>, %b1: tensor<16xf32>,
                 %w2: tensor<8x16xf32>, %b2: tensor<8xf32>,
                 %head: tensor<10x8xf32>) -> tensor<f32> {
  %n = nn.layernorm %x, %g, %b {nn.layer = 1 : i64}
      : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h = nn.linear %n, %w1, %b1 {nn.layer = 1 : i64}
      : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %a = nn.gelu %h {nn.layer = 1 : i64} : tensor<2x4x16xf32>
  %o = nn.linear %a, %w2, %b2 {nn.layer = 1 : i64}
      : (tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %od = nn.dropout %o {nn.layer = 1 : i64, rate = 0.1 : f32, site = 0 : i64} : tensor<2x4x8xf32>
  %r = nn.add %x, %od {nn.layer = 1 : i64} : tensor<2x4x8xf32>
  %l = nn.linear %r, %head {nn.layer = 2 : i64}
      : (tensor<2x4x8xf32>, tensor<10x8xf32>) -> tensor<2x4x10xf32>
  %loss = nn.cross_entropy %l, %t {nn.layer = 2 : i64}
      : (tensor<2x4x10xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

pp.pipeline @p stages 2 ranks 2 placement linear {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>,
                       %w1: tensor<16x8xf32>, %b1: tensor<16xf32>,
                       %w2: tensor<8x16xf32>, %b2: tensor<8xf32>) -> tensor<2x4x8xf32> {
      %n = nn.layernorm %x, %g, %b
          : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
      %h = nn.linear %n, %w1, %b1
          : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
      %a = nn.gelu %h : tensor<2x4x16xf32>
      %o = nn.linear %a, %w2, %b2
          : (tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
      %od = nn.dropout %o {rate = 0.1 : f32, site = 0 : i64} : tensor<2x4x8xf32>
      %r = nn.add %x, %od : tensor<2x4x8xf32>
      return %r : tensor<2x4x8xf32>
    }
  }
  pp.stage 1 rank 1 chunk 0 {
    func.func @forward(%r: tensor<2x4x8xf32>, %t: tensor<2x4xi32>,
                       %head: tensor<10x8xf32>) -> tensor<f32> {
      %l = nn.linear %r, %head
          : (tensor<2x4x8xf32>, tensor<10x8xf32>) -> tensor<2x4x10xf32>
      %loss = nn.cross_entropy %l, %t
          : (tensor<2x4x10xf32>, tensor<2x4xi32>) -> tensor<f32>
      return %loss : tensor<f32>
    }
  }
}
