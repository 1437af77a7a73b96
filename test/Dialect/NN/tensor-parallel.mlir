// The tensor-parallel collectives round-trip, with their shapes and costs.
// RUN: pipeforge-opt %s | pipeforge-opt | FileCheck %s
// RUN: pipeforge-opt %s --nn-cost-report=bytes-per-element=4 -o /dev/null | FileCheck %s --check-prefix=COST

// CHECK-LABEL: func.func @collectives
// CHECK: nn.tp_copy %{{.*}} {nn.layer = 1 : i64, tp = 2 : i64} : tensor<2x8x16xf32>
// CHECK: nn.tp_all_reduce %{{.*}} {nn.layer = 1 : i64, tp = 2 : i64} : tensor<2x8x16xf32>
// CHECK: nn.tp_all_gather %{{.*}} {dim = 1 : i64, nn.layer = 1 : i64, tp = 2 : i64} : (tensor<2x4x16xf32>) -> tensor<2x8x16xf32>
// CHECK: nn.tp_reduce_scatter %{{.*}} {dim = 1 : i64, nn.layer = 1 : i64, tp = 2 : i64} : (tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
// CHECK: nn.vocab_parallel_cross_entropy %{{.*}}, %{{.*}} {nn.layer = 1 : i64, tp = 2 : i64}
// CHECK: nn.vocab_parallel_cross_entropy_bwd
// CHECK: nn.linear %{{.*}}, %{{.*}}, %{{.*}} {nn.layer = 1 : i64, partial}
// CHECK: nn.embedding %{{.*}}, %{{.*}} {nn.layer = 1 : i64, vocab_shards = 2 : i64}
func.func @collectives(%x: tensor<2x8x16xf32>, %s: tensor<2x4x16xf32>,
                       %logits: tensor<2x8x32xf32>, %t: tensor<2x8xi32>,
                       %g: tensor<f32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>,
                       %table: tensor<32x16xf32>)
    -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x4x16xf32>,
        tensor<f32>, tensor<2x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  %0 = nn.tp_copy %x {nn.layer = 1 : i64, tp = 2 : i64} : tensor<2x8x16xf32>
  %1 = nn.tp_all_reduce %x {nn.layer = 1 : i64, tp = 2 : i64} : tensor<2x8x16xf32>
  %2 = nn.tp_all_gather %s {nn.layer = 1 : i64, tp = 2 : i64, dim = 1 : i64}
      : (tensor<2x4x16xf32>) -> tensor<2x8x16xf32>
  %3 = nn.tp_reduce_scatter %x {nn.layer = 1 : i64, tp = 2 : i64, dim = 1 : i64}
      : (tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %4 = nn.vocab_parallel_cross_entropy %logits, %t {nn.layer = 1 : i64, tp = 2 : i64}
      : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
  %5 = nn.vocab_parallel_cross_entropy_bwd %logits, %t, %g {tp = 2 : i64}
      : (tensor<2x8x32xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x32xf32>
  %6 = nn.linear %x, %w, %b {nn.layer = 1 : i64, partial}
      : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %7 = nn.embedding %t, %table {nn.layer = 1 : i64, vocab_shards = 2 : i64}
      : (tensor<2x8xi32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<2x8x16xf32>, tensor<2x8x16xf32>,
      tensor<2x8x16xf32>, tensor<2x4x16xf32>, tensor<f32>, tensor<2x8x32xf32>,
      tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// Ring volumes per rank at 4 bytes per element, t = 2 (256 elements per
// [2, 8, 16] tensor, 16 tokens): tp_copy sends 2 (t-1)/t 256 x 4 = 1024 in
// B; tp_all_reduce 1024 in F; the all-gather and the reduce-scatter of the
// whole [2, 8, 16] tensor (t-1)/t 256 x 4 = 512 in F and in B; the loss
// 2 (t-1)/t 3 x 16 x 4 = 192 in F and 128 in B: 2240 in F, 2176 in B.
// COST: tp_F_bytes     tp_B_bytes
// COST: layer 1
// COST-SAME: 2240           2176
