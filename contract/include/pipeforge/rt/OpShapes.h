//===- OpShapes.h - Operands and shape rules of every kernel op -*- C++ -*-===//
//
// One description of each op a program's kernels may name (the nn dialect's
// forward and gradient ops, by mnemonic, plus `zeros`): its operands and
// results by name, with their element types and which ones are optional,
// and a shape function that derives the result types and the scratch the
// kernel needs from the operand types and the attributes, or says which
// operand is at fault.
//
// Both sides use it, so a rule is written once:
//   - the program validator (ProgramValidate.cpp) checks every kernel of
//     every function against it before the first step: a program that
//     validates never hands a kernel a buffer of the wrong size;
//   - the nn dialect's verifiers (lib/Dialect/NN/IR/NNOps.cpp) run the same
//     shape functions on MLIR types, with kDynamicDim for a dynamic extent;
//     the messages are theirs ("'nn.linear' op " + message).
//
// Plain C++: the runtime never links MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_RT_OPSHAPES_H
#define PIPEFORGE_RT_OPSHAPES_H

#include "pipeforge/rt/Program.h"

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

/// The operand types of one op instance, by slot of its spec (null: an
/// absent optional operand), and its attributes (absent ones take the ODS
/// defaults).
struct OpShapeInput {
  std::vector<const TensorType *> operands;
  const AttrMap &attrs;
};

struct OpSpec {
  const char *name; ///< the mnemonic without "nn.": "linear", "moe_bwd_input"
  std::vector<OpOperandSpec> operands;
  std::vector<OpOperandSpec> results;
  /// Checks the operands and attributes and fills `results` and
  /// `workspaceElements`. Called with every required operand present and of
  /// its dtype (inferOpShapes checks that first). Null for `zeros`, whose
  /// results take the types the program gives them (dtype checked).
  OpShapeResult (*infer)(const OpShapeInput &);
};

/// Every op, sorted by name.
const std::vector<OpSpec> &allOpSpecs();
/// The op of that mnemonic, or null.
const OpSpec *lookupOpSpec(std::string_view name);

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
