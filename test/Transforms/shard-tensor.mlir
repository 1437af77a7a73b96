// --nn-shard-tensor on one GPT block (Inputs/tp-block.mlir): every
// rewritten op, with and without sequence parallelism, and through the
// backward split (the collectives' duals land in B, W has none).
// RUN: pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=2" | FileCheck %s
// RUN: pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=2 sequence-parallel=true" | FileCheck %s --check-prefix=SP
// RUN: pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=1" | FileCheck %s --check-prefix=ONE
// RUN: pipeforge-opt %S/Inputs/tp-block.mlir --nn-shard-tensor="tp=2" --pp-partition="stages=1" --pp-split-backward | FileCheck %s --check-prefix=BW

// Split parameters take their shard's type and nn.tp_dim; the rest stay.
// CHECK-LABEL: func.func @model
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x16xf32> {{[^}]*}}nn.tp_dim = 0 : i64}
// CHECK-SAME: %[[WPE:[a-z0-9]+]]: tensor<8x16xf32> {nn.init = "normal:0.02", nn.name = "wpe", nn.role = "param"}
// CHECK-SAME: %{{.*}}: tensor<8x16xf32> {{[^}]*}}"q.w"{{[^}]*}}nn.tp_dim = 0
// CHECK-SAME: %{{.*}}: tensor<8xf32> {{[^}]*}}"q.b"{{[^}]*}}nn.tp_dim = 0
// CHECK-SAME: %{{.*}}: tensor<4x16xf32> {{[^}]*}}"k.w"{{[^}]*}}nn.tp_dim = 0
// CHECK-SAME: %{{.*}}: tensor<16x8xf32> {{[^}]*}}"o.w"{{[^}]*}}nn.tp_dim = 1
// CHECK-SAME: %{{.*}}: tensor<16xf32> {nn.init = "zeros", nn.name = "o.b", nn.role = "param"}
// CHECK-SAME: %{{.*}}: tensor<16x16xf32> {{[^}]*}}"fc1.w"{{[^}]*}}nn.tp_dim = 0
// CHECK-SAME: %{{.*}}: tensor<16x16xf32> {{[^}]*}}"fc2.w"{{[^}]*}}nn.tp_dim = 1
// CHECK-SAME: %{{.*}}: tensor<16x16xf32> {{[^}]*}}"head"{{[^}]*}}nn.tp_dim = 0
// CHECK-SAME: attributes {nn.tensor_parallel = 2 : i64}
// Vocabulary-parallel embedding, completed by an all-reduce.
// CHECK: %[[E:.*]] = nn.embedding %{{.*}}, %[[WTE]], %[[WPE]] {nn.layer = 0 : i64, vocab_shards = 2 : i64}
// CHECK-NEXT: %[[X:.*]] = nn.tp_all_reduce %[[E]] {nn.layer = 0 : i64, tp = 2 : i64} : tensor<2x8x16xf32>
// CHECK-NEXT: %[[LN:.*]] = nn.layernorm %[[X]]
// One tp_copy feeds q, k and v (column-parallel).
// CHECK-NEXT: %[[C:.*]] = nn.tp_copy %[[LN]] {nn.layer = 1 : i64, tp = 2 : i64}
// CHECK-NEXT: nn.linear %[[C]], {{.*}} -> tensor<2x8x8xf32>
// CHECK-NEXT: nn.linear %[[C]], {{.*}} -> tensor<2x8x4xf32>
// CHECK-NEXT: nn.linear %[[C]], {{.*}} -> tensor<2x8x4xf32>
// Half the heads, half the KV heads.
// CHECK-NEXT: nn.attention {{.*}}num_heads = 2 : i64, num_kv_heads = 1 : i64{{.*}} -> tensor<2x8x8xf32>
// Row-parallel output projection: a partial sum, all-reduced.
// CHECK-NEXT: %[[P:.*]] = nn.linear {{.*}} {nn.layer = 1 : i64, partial} : (tensor<2x8x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
// CHECK-NEXT: %[[R:.*]] = nn.tp_all_reduce %[[P]]
// CHECK-NEXT: nn.add %[[X]], %[[R]]
// CHECK: nn.tp_copy
// CHECK-NEXT: nn.linear {{.*}} -> tensor<2x8x16xf32>
// CHECK-NEXT: nn.gelu {{.*}} : tensor<2x8x16xf32>
// CHECK-NEXT: nn.linear {{.*}}partial
// CHECK-NEXT: nn.tp_all_reduce
// CHECK-NEXT: nn.add
// The LM head is column- (vocabulary-) parallel; the loss too.
// CHECK-NEXT: nn.tp_copy
// CHECK-NEXT: %[[L:.*]] = nn.linear {{.*}} -> tensor<2x8x16xf32>
// CHECK-NEXT: nn.vocab_parallel_cross_entropy %[[L]], %{{.*}} {nn.layer = 2 : i64, tp = 2 : i64}
// CHECK-NOT: nn.cross_entropy

// Sequence parallelism: reduce-scatter / all-gather along the sequence,
// norms on [2, 4, 16] shards with their gradients summed over the group.
// SP-LABEL: func.func @model
// SP-SAME: "ln1.g", nn.role = "param", nn.tp_reduce_grad}
// SP-SAME: attributes {nn.sequence_parallel, nn.tensor_parallel = 2 : i64}
// SP: %[[E:.*]] = nn.embedding {{.*}}vocab_shards = 2
// SP-NEXT: %[[X:.*]] = nn.tp_reduce_scatter %[[E]] {dim = 1 : i64, nn.layer = 0 : i64, tp = 2 : i64} : (tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
// SP-NEXT: nn.layernorm %[[X]], {{.*}} -> tensor<2x4x16xf32>
// SP-NEXT: nn.tp_all_gather {{.*}}dim = 1 : i64{{.*}} : (tensor<2x4x16xf32>) -> tensor<2x8x16xf32>
// SP: nn.linear {{.*}}partial
// SP-NEXT: nn.tp_reduce_scatter
// SP-NEXT: nn.add {{.*}} : tensor<2x4x16xf32>
// SP: nn.tp_all_gather {{.*}}nn.layer = 2
// SP-NEXT: nn.linear {{.*}} -> tensor<2x8x16xf32>
// SP-NEXT: nn.vocab_parallel_cross_entropy

// tp = 1 leaves the model as it is.
// ONE-NOT: nn.tp_
// ONE-NOT: vocab_shards

// B holds the duals (the tp_copy's all-reduce, the vocabulary-parallel
// loss's backward); W never communicates.
// BW-LABEL: func.func @backward_input
// BW: nn.vocab_parallel_cross_entropy_bwd {{.*}}tp = 2
// BW: nn.tp_all_reduce
// BW-LABEL: func.func @backward_weight
// BW-NOT: nn.tp_
// BW: nn.embedding_bwd_weight {{.*}}vocab = 16 : i64, vocab_shards = 2 : i64
// BW-NOT: nn.tp_
// BW: return
