// RUN: pipeforge-opt %s | pipeforge-opt | FileCheck %s
// RUN: pipeforge-opt %s -mlir-print-op-generic | pipeforge-opt | FileCheck %s

// CHECK-LABEL: func.func @block
func.func @block(%x: tensor<8x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>,
                 %w: tensor<64x32xf32>, %bias: tensor<64xf32>,
                 %head: tensor<10x64xf32>, %t: tensor<8xi32>) -> tensor<f32> {
  // CHECK: nn.layernorm %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %n = nn.layernorm %x, %g, %b : (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  // CHECK: nn.layernorm {{.*}} {epsilon = 9.99999997E-7 : f32}
  %n2 = nn.layernorm %n, %g, %b {epsilon = 1.0e-6 : f32} : (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  // CHECK: nn.add %{{.*}}, %{{.*}} : tensor<8x32xf32>
  %r = nn.add %n, %n2 : tensor<8x32xf32>
  // CHECK: nn.linear %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %h = nn.linear %r, %w, %bias : (tensor<8x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  // CHECK: nn.gelu %{{.*}} : tensor<8x64xf32>
  %a = nn.gelu %h : tensor<8x64xf32>
  // CHECK: nn.linear %{{.*}}, %{{.*}} : (tensor<8x64xf32>, tensor<10x64xf32>) -> tensor<8x10xf32>
  %l = nn.linear %a, %head : (tensor<8x64xf32>, tensor<10x64xf32>) -> tensor<8x10xf32>
  // CHECK: nn.cross_entropy %{{.*}}, %{{.*}} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  %loss = nn.cross_entropy %l, %t : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// Batched (rank-3) inputs and dynamic extents are accepted.
// CHECK-LABEL: func.func @batched
func.func @batched(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>, %y: tensor<?x32xf32>) -> (tensor<2x4x16xf32>, tensor<?x16xf32>) {
  // CHECK: nn.linear {{.*}} -> tensor<2x4x16xf32>
  %0 = nn.linear %x, %w : (tensor<2x4x32xf32>, tensor<16x32xf32>) -> tensor<2x4x16xf32>
  // CHECK: nn.linear {{.*}} -> tensor<?x16xf32>
  %1 = nn.linear %y, %w : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  return %0, %1 : tensor<2x4x16xf32>, tensor<?x16xf32>
}
