//===- KernelsOpTable.cpp - Names of the kernels for dispatch -------------===//

#include "Kernels.h"

namespace pipeforge {
namespace rt {
namespace cpu {

const std::vector<OpInfo> &allOps() {
  static const std::vector<OpInfo> ops = {
      // kind, name, hasB, hasW, needsWorkspace
      {OpKind::Linear, "linear", true, true, false},
      {OpKind::LayerNorm, "layernorm", true, true, false},
      {OpKind::RMSNorm, "rmsnorm", true, true, false},
      {OpKind::Gelu, "gelu", true, false, false},
      {OpKind::Silu, "silu", true, false, false},
      {OpKind::Add, "add", true, false, false},
      {OpKind::Mul, "mul", true, false, false},
      {OpKind::Embedding, "embedding", false, true, false},
      {OpKind::Attention, "attention", true, false, true},
      {OpKind::ConcatHeads, "concat_heads", true, false, false},
      {OpKind::MoE, "moe", true, true, true},
      {OpKind::CrossEntropy, "cross_entropy", true, false, false},
  };
  return ops;
}

const OpInfo *lookupOp(std::string_view name) {
  for (const OpInfo &op : allOps())
    if (name == op.name)
      return &op;
  return nullptr;
}

const OpInfo &opInfo(OpKind kind) { return allOps()[size_t(kind)]; }

} // namespace cpu
} // namespace rt
} // namespace pipeforge
