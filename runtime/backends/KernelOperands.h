//===- KernelOperands.h - Reading a KernelCall's operands and shapes ----===//
//
// What every backend needs before it can run one kernel of a Function: its
// adapter by op kind (OpTable), the attributes by name, the operands with
// the optional-operand convention (an absent optional operand is a null
// pointer or simply missing), and the shapes of the ops whose kernels take
// a shape struct (runtime/backends/cpu/Kernels.h) derived from the operand
// types and attributes. Shared by the CPU and the CUDA backends, so both
// read a program exactly alike and give the same messages for the same bad
// kernel.
//
// The program validator has checked every kernel against the op registry
// (rt/OpShapes.h) before the first step: the op is known (Kernel::kind),
// every required operand and result is there, with the types the kernel
// reads and writes. The adapters rely on it and check none of it again.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_LIB_KERNELOPERANDS_H
#define PIPEFORGE_RT_LIB_KERNELOPERANDS_H

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/OpShapes.h"

#include "cpu/Kernels.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace pipeforge::rt::ops {

/// "kernel '<op>': <msg>".
Status opError(const Kernel &k, const std::string &msg);

/// Attribute accessors; a UnitAttr arrives as `true` or is absent. With
/// `dflt`: the value of an absent attribute (the attributes the runtime
/// sets itself, vocab_start, head_start, seq_start, which no op declares).
int64_t attrInt(const Kernel &k, const char *name, int64_t dflt);
double attrFloat(const Kernel &k, const char *name, double dflt);
bool attrBool(const Kernel &k, const char *name);
std::string attrStr(const Kernel &k, const char *name, const char *dflt);

/// The value the op of `k` declares for its attribute `name` when a kernel
/// lacks it (OpSpec::attrs: the ODS default, false for a UnitAttr), or null
/// (a required attribute, which a validated kernel has).
inline const AttrValue *declaredValue(const Kernel &k, const char *name) {
  if (k.kind == OpKind::Unknown)
    return nullptr;
  const OpAttrSpec *a = opSpec(k.kind).attr(name);
  return a && a->value ? &*a->value : nullptr;
}
/// Attribute accessors for the attributes the op declares: an absent one
/// takes the declared value, so no default is written twice.
inline int64_t attrInt(const Kernel &k, const char *name) {
  const AttrValue *d = declaredValue(k, name);
  const int64_t *v = d ? std::get_if<int64_t>(d) : nullptr;
  return attrInt(k, name, v ? *v : 0);
}
inline double attrFloat(const Kernel &k, const char *name) {
  const AttrValue *d = declaredValue(k, name);
  const double *v = d ? std::get_if<double>(d) : nullptr;
  return attrFloat(k, name, v ? *v : 0.0);
}
inline std::string attrStr(const Kernel &k, const char *name) {
  const AttrValue *d = declaredValue(k, name);
  const std::string *v = d ? std::get_if<std::string>(d) : nullptr;
  return attrStr(k, name, v ? v->c_str() : "");
}
/// A flag the op declares: present (its value), else the declared value
/// (nn.moe's norm_topk_prob: true; a UnitAttr: false).
inline bool attrFlag(const Kernel &k, const char *name) {
  if (k.attrs.count(name))
    return attrBool(k, name);
  const AttrValue *d = declaredValue(k, name);
  const bool *v = d ? std::get_if<bool>(d) : nullptr;
  return v && *v;
}

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

/// A backend's adapters, one per op kind it runs: every op of the registry
/// but the collectives, which the executor runs itself (OpSpec::collective).
template <typename Fn> class OpTable {
public:
  Fn &operator[](OpKind kind) { return fns[size_t(kind)]; }
  /// The adapter of `kind`, or null (an op this backend does not run, or
  /// OpKind::Unknown: a kernel of a program that was not validated).
  const Fn *find(OpKind kind) const {
    return kind != OpKind::Unknown && fns[size_t(kind)] ? &fns[size_t(kind)]
                                                        : nullptr;
  }
  /// The mnemonics of the ops with an adapter, sorted (OpKind order).
  std::vector<std::string> names() const {
    std::vector<std::string> r;
    for (size_t i = 0; i < kNumOpKinds; ++i)
      if (fns[i])
        r.push_back(opName(OpKind(i)));
    return r;
  }

private:
  std::array<Fn, kNumOpKinds> fns{};
};

/// The error of a kernel that `table` has no adapter for.
template <typename Fn>
Status unknownOp(const Kernel &k, const OpTable<Fn> &table,
                 const char *backend) {
  if (k.kind == OpKind::Unknown && lookupOpKind(k.op) != OpKind::Unknown)
    return opError(k, "op not resolved: validateProgram resolves the ops "
                      "of a program");
  std::string known;
  for (const std::string &n : table.names())
    known += (known.empty() ? "" : " ") + n;
  return opError(k, std::string("unknown op for the ") + backend +
                        " backend (known: " + known + ")");
}

} // namespace pipeforge::rt::ops

#endif // PIPEFORGE_RT_LIB_KERNELOPERANDS_H
