//===- OpShapes.h - The op registry: arity, attributes, rules ---*- C++ -*-===//
//
// The one registry of the ops a program's kernels may name (the nn
// dialect's forward, gradient and tensor-parallel ops, by mnemonic, plus
// `zeros`), one entry per OpKind (rt/OpKind.h): its operands and results by
// name, with their element types and which ones are optional (the arity),
// its attributes with their types and defaults, whether the executor runs
// it itself (the tensor-parallel collectives), and a shape function that
// derives the result types and the scratch the kernel needs from the
// operand types and the attributes, or says which operand is at fault.
//
// Both sides use it, so a rule is written once:
//   - the program validator (ProgramValidate.cpp) checks every kernel of
//     every function against it before the first step and resolves its
//     mnemonic to an OpKind (Kernel::kind): a program that validates never
//     hands a kernel a buffer of the wrong size or the wrong number of
//     operands, so the backends dispatch on the kind and check neither;
//   - the nn dialect's verifiers (lib/Dialect/NN/IR/NNOps.cpp) run the same
//     shape functions on MLIR types, with kDynamicDim for a dynamic extent;
//     the messages are theirs ("'nn.linear' op " + message).
//
// The entries follow the nn dialect's ODS definitions
// (include/pipeforge/Dialect/NN/IR/NNOps.td); NNOpRegistryTest
// (unittests/CostModel) walks the registered nn ops and fails where the two
// disagree: an op on one side only, operand or result counts, optional
// slots, attribute names, defaults.
//
// Plain C++: the runtime never links MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_OPSHAPES_H
#define PIPEFORGE_RT_OPSHAPES_H

#include "pipeforge/rt/OpKind.h"
#include "pipeforge/rt/Program.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipeforge::rt {

/// An extent the compiler does not know yet (a dynamic MLIR dimension). It
/// agrees with every extent; a program never contains one.
inline constexpr int64_t kDynamicDim = -1;

/// The largest element count of one tensor or one kernel's scratch (2^40),
/// the validator's bound for values too: with it no size computed in a
/// kernel overflows int64.
inline constexpr int64_t kMaxElements = int64_t(1) << 40;

using AttrMap = std::map<std::string, AttrValue>;

/// One operand or result of an op.
struct OpOperandSpec {
  const char *name; ///< as in the ODS definition: "input", "weight", ...
  DType dtype;      ///< F32 for every float tensor, I32 for integer ones
  bool optional = false;
};

/// What an op's shape function derives, or the first rule it breaks.
struct OpShapeResult {
  /// Empty when every rule holds.
  std::string error;
  /// The operand or result slot (of the op's spec) the error is about, or -1.
  int operand = -1, result = -1;
  /// One entry per result slot: the type it must have, or none for an
  /// optional result that must be absent.
  std::vector<std::optional<TensorType>> results;
  /// Scratch elements (f32) the CPU kernel allocates beyond its operands
  /// and results: saved statistics, recomputed forward values, attention
  /// probabilities, MoE routing. Bounded by kMaxElements.
  int64_t workspaceElements = 0;

  explicit operator bool() const { return error.empty(); }
};

/// The type of an attribute's value in a program (AttrValue): Int
/// (int64_t), Real (double; an integer is accepted), Flag (bool: an ODS
/// UnitAttr, present or absent, or a BoolAttr), Text (std::string).
enum class AttrType : uint8_t { Int, Real, Flag, Text };

/// One attribute of an op, as its ODS definition declares it.
struct OpAttrSpec {
  /// Required: every instance has it (an ODS attribute without default).
  /// Default: absent means `value` (ODS DefaultValuedAttr; the compiler
  /// always writes it). Optional: may be absent (ODS OptionalAttr or
  /// UnitAttr); absent means `value` where it has one (a UnitAttr: false;
  /// vocab_shards: 1), else nothing (max_positions: no positions).
  enum Use : uint8_t { Required, Default, Optional };

  const char *name; ///< as in the ODS definition: "epsilon", "num_heads"
  AttrType type;
  Use use;
  std::optional<AttrValue> value;
};

struct OpSpec;

/// The operand types of one op instance, by slot of its spec (null: an
/// absent optional operand), and its attributes (absent ones take the ODS
/// defaults). `spec` is set by inferOpShapes for the shape function.
struct OpShapeInput {
  std::vector<const TensorType *> operands;
  const AttrMap &attrs;
  const OpSpec *spec = nullptr;
};

struct OpSpec {
  OpKind kind;
  const char *name; ///< the mnemonic without "nn.": "linear", "moe_bwd_input"
  /// The arity: operands and results by slot, in the ODS order.
  std::vector<OpOperandSpec> operands;
  std::vector<OpOperandSpec> results;
  /// The ODS attributes (inherent attributes; discardable ones such as
  /// nn.layer never reach a program). The runtime adds a few of its own
  /// when it specializes a program for a tensor-parallel rank (vocab_start,
  /// head_start, seq_start: TensorParallel.cpp); they are not declared.
  std::vector<OpAttrSpec> attrs;
  /// Checks the operands and attributes and fills `results` and
  /// `workspaceElements`. Called with every required operand present and of
  /// its dtype (inferOpShapes checks that first). Null for `zeros`, whose
  /// results take the types the program gives them (dtype checked).
  OpShapeResult (*infer)(const OpShapeInput &);
  /// A collective over the tensor-parallel group: the executor runs it
  /// (TensorParallel.cpp), no backend has a kernel for it.
  bool collective = false;

  /// The declared attribute of that name, or null.
  const OpAttrSpec *attr(std::string_view attrName) const;
};

/// Every op, in OpKind order, which is the byte order of the mnemonics.
const std::vector<OpSpec> &allOpSpecs();
/// The entry of an op (not OpKind::Unknown).
const OpSpec &opSpec(OpKind kind);
/// The op of that mnemonic, or null.
const OpSpec *lookupOpSpec(std::string_view name);
/// The mnemonics of every op, space-separated, for "unknown op" messages.
std::string opNameList();

/// Maps the `given` operands (or results) of an instance onto the slots of
/// `slots`: either one per slot, or, when the spec has exactly one optional
/// slot, one fewer with that slot left out (the MLIR convention for a single
/// optional operand). On success `slotOf[s]` is the position of slot s in
/// the given list, or -1; otherwise the message says what was expected.
std::string mapSlots(const std::vector<OpOperandSpec> &slots, size_t given,
                     std::vector<int> &slotOf);

/// Runs the op's rules on operand types by slot: required operands present,
/// element types, then the op's shape function.
OpShapeResult inferOpShapes(const OpSpec &spec, const OpShapeInput &in);

/// The whole check of one kernel as a program has it: operands and results
/// in the kernel's order (null: absent, -1 in the file), attributes; the
/// result types must equal the derived ones exactly. The error's `operand`
/// and `result` are positions in the kernel's lists, not slots.
OpShapeResult checkKernelTypes(const OpSpec &spec,
                               const std::vector<const TensorType *> &inputs,
                               const std::vector<const TensorType *> &outputs,
                               const AttrMap &attrs);

/// "[2, 8, 64]" (with "?" for kDynamicDim), the verifiers' spelling.
std::string shapeString(const std::vector<int64_t> &shape);
/// "f32[2x8x64]", the program listing's spelling.
std::string typeString(const TensorType &t);

} // namespace pipeforge::rt

#endif // PIPEFORGE_RT_OPSHAPES_H
