//===- OpKind.h - The ops a program's kernels may name ----------*- C++ -*-===//
//
// One enumerator per op of the registry (rt/OpShapes.h): the nn dialect's
// forward, gradient and tensor-parallel ops by mnemonic, plus `zeros`. The
// program file names ops by mnemonic ("linear", "attention_bwd"); the
// validator resolves each kernel's mnemonic to its OpKind once
// (validateProgram sets Kernel::kind), and the runtime dispatches on the
// kind from then on.
//
// The enumerators are in the byte order of the mnemonics, which is the
// order of the registry's table (allOpSpecs()); OpRegistryTest checks it,
// and NNOpRegistryTest checks the table against the nn dialect's ODS.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_OPKIND_H
#define PIPEFORGE_RT_OPKIND_H

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pipeforge::rt {

enum class OpKind : uint8_t {
  Add,                          ///< add
  Attention,                    ///< attention
  AttentionBwd,                 ///< attention_bwd
  ConcatHeads,                  ///< concat_heads
  ConcatHeadsBwd,               ///< concat_heads_bwd
  CrossEntropy,                 ///< cross_entropy
  CrossEntropyBwd,              ///< cross_entropy_bwd
  Dropout,                      ///< dropout
  Embedding,                    ///< embedding
  EmbeddingBwdWeight,           ///< embedding_bwd_weight
  Gelu,                         ///< gelu
  GeluBwd,                      ///< gelu_bwd
  LayerNorm,                    ///< layernorm
  LayerNormBwdInput,            ///< layernorm_bwd_input
  LayerNormBwdWeight,           ///< layernorm_bwd_weight
  Linear,                       ///< linear
  LinearBwdInput,               ///< linear_bwd_input
  LinearBwdWeight,              ///< linear_bwd_weight
  MoE,                          ///< moe
  MoEBwdInput,                  ///< moe_bwd_input
  MoEBwdWeight,                 ///< moe_bwd_weight
  Mul,                          ///< mul
  RMSNorm,                      ///< rmsnorm
  RMSNormBwdInput,              ///< rmsnorm_bwd_input
  RMSNormBwdWeight,             ///< rmsnorm_bwd_weight
  Silu,                         ///< silu
  SiluBwd,                      ///< silu_bwd
  TPAllGather,                  ///< tp_all_gather
  TPAllReduce,                  ///< tp_all_reduce
  TPCopy,                       ///< tp_copy
  TPReduceScatter,              ///< tp_reduce_scatter
  VocabParallelCrossEntropy,    ///< vocab_parallel_cross_entropy
  VocabParallelCrossEntropyBwd, ///< vocab_parallel_cross_entropy_bwd
  Zeros,                        ///< zeros (an arith.constant 0)
  /// Not an op: a kernel whose mnemonic has not been resolved (a Kernel
  /// before validateProgram) or names no op.
  Unknown
};

/// The number of ops (OpKind::Unknown excluded).
inline constexpr size_t kNumOpKinds = size_t(OpKind::Unknown);

/// The op's mnemonic ("linear"); "?" for OpKind::Unknown.
const char *opName(OpKind kind);
/// The op of that mnemonic, or OpKind::Unknown.
OpKind lookupOpKind(std::string_view mnemonic);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_OPKIND_H
