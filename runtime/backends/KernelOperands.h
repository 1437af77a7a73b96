//===- KernelOperands.h - Reading a KernelCall's operands and shapes ----===//
//
// What every backend needs before it can run one kernel of a Function: the
// attributes by name, the operands with the optional-operand convention
// (an absent optional operand is a null pointer or simply missing), and the
// shapes of the ops whose kernels take a shape struct (runtime/backends/cpu/Kernels.h)
// derived from the operand types and attributes. Shared by the CPU and the
// CUDA backends, so both read a program exactly alike and give the same
// messages for the same bad kernel.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_LIB_KERNELOPERANDS_H
#define PIPEFORGE_RT_LIB_KERNELOPERANDS_H

#include "pipeforge/rt/Backend.h"

#include "cpu/Kernels.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace pipeforge::rt::ops {

/// "kernel '<op>': <msg>".
Status opError(const Kernel &k, const std::string &msg);

/// Attribute accessors; a UnitAttr arrives as `true` or is absent.
int64_t attrInt(const Kernel &k, const char *name, int64_t dflt);
double attrFloat(const Kernel &k, const char *name, double dflt);
bool attrBool(const Kernel &k, const char *name);
std::string attrStr(const Kernel &k, const char *name, const char *dflt);

/// Operand access: in(i), out(i) are null when absent.
struct Operands {
  const KernelCall &c;
  const float *f(size_t i) const {
    return i < c.in.size() ? static_cast<const float *>(c.in[i]) : nullptr;
  }
  const int32_t *i32(size_t i) const {
    return i < c.in.size() ? static_cast<const int32_t *>(c.in[i]) : nullptr;
  }
  const TensorType *t(size_t i) const {
    return i < c.inTypes.size() ? c.inTypes[i] : nullptr;
  }
  float *o(size_t i) const {
    return i < c.out.size() ? static_cast<float *>(c.out[i]) : nullptr;
  }
  const TensorType *ot(size_t i) const {
    return i < c.outTypes.size() ? c.outTypes[i] : nullptr;
  }
  size_t nin() const { return c.in.size(); }
};

/// The innermost dimension (1 for a scalar or a missing type).
int64_t lastDim(const TensorType *t);
/// The element count (0 for a missing type).
int64_t numel(const TensorType *t);
/// The leading dimension (0 for a scalar or a missing type).
int64_t firstDim(const TensorType *t);

/// An error naming the first of the first `nin` operands or `nout` results
/// that is absent.
Status need(const Kernel &k, const Operands &o, size_t nin, size_t nout);

/// linear (x, W, [b]); linear_bwd_input (dy, W); linear_bwd_weight (x, dy).
cpu::LinearShape linearShape(const Operands &o);
cpu::LinearShape linearBwdInputShape(const Operands &o);
cpu::LinearShape linearBwdWeightShape(const Operands &o);
/// Norms and their gradient ops: x is operand 0.
cpu::NormShape normShape(const Kernel &k, const Operands &o);
/// embedding (tokens, table, [pos]).
cpu::EmbeddingShape embeddingShape(const Kernel &k, const Operands &o);
/// dropout (x): rate, site (keyed with the call's rngKey) and, from the
/// attribute `seq_start`, the first sequence position of x (sequence
/// parallelism). Errors: x not [batch, seq, features], a rate outside
/// [0, 1).
Status dropoutShape(const Kernel &k, const Operands &o,
                    cpu::DropoutShape &s);
/// embedding_bwd_weight (tokens, dy) -> dtable [, dpos].
cpu::EmbeddingShape embeddingBwdShape(const Kernel &k, const Operands &o);
/// cross_entropy and cross_entropy_bwd: logits are operand 0.
cpu::CrossEntropyShape crossEntropyShape(const Operands &o);
/// attention and attention_bwd: (q, k, v, ...) and the head attributes.
Status attentionShape(const Kernel &k, const Operands &o,
                      cpu::AttentionShape &s);
/// concat_heads (lhs, rhs) and, `bwd`, concat_heads_bwd (dy) with its
/// lhs_head_dim attribute.
Status concatHeadsShape(const Kernel &k, const Operands &o, bool bwd,
                        cpu::ConcatHeadsShape &s);
/// moe and its gradient ops: (x, router, w1, w2, [w3], [dy]).
Status moeShape(const Kernel &k, const Operands &o, cpu::MoEShape &s);
/// The routing attributes of a moe kernel (scoring, norm_topk_prob,
/// routed_scaling_factor, n_group, topk_group; absent: the defaults) into
/// `s`; isValid(s) checks them against the shape.
Status moeRouting(const Kernel &k, cpu::MoEShape &s);
/// A moe kernel names a bias (`bias`) exactly when its call carries one.
Status moeCheckBias(const Kernel &k, const KernelCall &c);
/// Adds n top-k choices to the call's per-expert load (none: no-op).
void moeCountLoad(const KernelCall &c, const int32_t *topIdx, int64_t n);
/// The moe weights, the call's bias and (withDy) the result gradient.
void moeParams(const Operands &o, bool withDy, cpu::MoEParams<float> &p,
               const float *&dy);
/// moe (x, router, w1, w2, [w3]): the shape and the weights.
Status moeForwardOperands(const Kernel &k, const Operands &o, cpu::MoEShape &s,
                          cpu::MoEParams<float> &p);
/// Everything a moe gradient op needs: operands (x, router, w1, w2, [w3],
/// dy) and, for moe_bwd_weight (`weight`), the 3 or 4 parameter-gradient
/// results, the shape, the weights and dy.
Status moeGradOperands(const Kernel &k, const Operands &o, bool weight,
                       cpu::MoEShape &s, cpu::MoEParams<float> &p,
                       const float *&dy);

/// The keys of an op table, sorted, and as one space-separated line (for
/// "unknown op" messages).
template <typename Table> std::vector<std::string> opNames(const Table &t) {
  std::vector<std::string> r;
  for (auto &e : t)
    r.push_back(e.first);
  std::sort(r.begin(), r.end());
  return r;
}
std::string joinNames(const std::vector<std::string> &names);

} // namespace pipeforge::rt::ops

#endif // PIPEFORGE_RT_LIB_KERNELOPERANDS_H
