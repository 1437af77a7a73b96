//===- Prepare.h - Program preparation: buffers, ranges ------*- C++ -*-===//
//
// The two facts the program lowering derives from a stage function rather
// than translates (docs/program-format.md): its buffer assignment and its
// component ranges. Each is computed here once and either written into the
// IR by a preparation pass (--pp-assign-buffers, --pp-component-ranges; as
// CIRCT prepares a module before ExportVerilog emits it) or, when the IR
// does not carry it, computed by the lowering itself with the same code.
//
// The annotations (checked by the pp dialect's attribute verifier):
//   func.func @f(%a: ... {pp.buffer = 0 : i64}, ...)
//       attributes {pp.buffers = array<i64: 64, 128>,
//                   pp.component_ranges = [{begin = 0 : i64, end = 3 : i64,
//                       kind = "attn", layer = 0 : i64}, ...]}
//     %0 = nn.linear ... {pp.buffer = array<i64: 1>}
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_TARGET_PROGRAM_PREPARE_H
#define PIPEFORGE_TARGET_PROGRAM_PREPARE_H

#include "pipeforge/rt/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <optional>
#include <vector>

namespace pipeforge::target {

/// The four functions of a stage the lowering reads, in rt::FunctionKind
/// order: forward, backward_input, backward_weight, backward.
inline constexpr const char *kStageFunctionNames[] = {
    "forward", "backward_input", "backward_weight", "backward"};
/// The kind of a stage function by its name; nullopt for other names.
std::optional<rt::FunctionKind> stageFunctionKind(llvm::StringRef name);

/// A value's program tensor type: static, f32 or integer (i32), within the
/// program file's limits. Emits the error at `where` otherwise.
mlir::FailureOr<rt::TensorType> lowerTensorType(mlir::Type t,
                                                mlir::Operation *where);
/// The program kernel an op of a stage body becomes: `nn.X` -> "X",
/// `arith.constant` -> "zeros"; other ops keep their name (the lowering
/// rejects them).
std::string kernelName(mlir::Operation &op);

/// A function's buffer assignment. Values are numbered as in the program:
/// the arguments, then each op's results in order.
struct BufferPlan {
  std::vector<int32_t> buffer; ///< per value
  std::vector<int64_t> bytes;  ///< per buffer
};

/// The lowering's assignment (assignBuffers in ProgramLowering.h) over the
/// function's liveness: op k (1-based) defines its results and reads its
/// operands at position k, the return reads at #ops + 1, arguments are
/// defined at 0 and live to the end (bound to storage outside the function).
/// Fails with an error at a value whose type the program cannot hold.
mlir::FailureOr<BufferPlan> computeBufferPlan(mlir::func::FuncOp fn);
/// The plan recorded by --pp-assign-buffers; std::nullopt when `fn` has no
/// pp.buffers. Fails (error at the value) when the annotation does not fit
/// the function: a value without a buffer, a buffer id out of range, a
/// buffer smaller or larger than its value, or two values live at once in
/// one buffer.
mlir::FailureOr<std::optional<BufferPlan>>
readBufferPlan(mlir::func::FuncOp fn);
/// Writes `plan` as pp.buffers / pp.buffer.
void annotateBufferPlan(mlir::func::FuncOp fn, const BufferPlan &plan);

/// Whether any op under `root` carries pp.component (--pp-split-components):
/// then every stage function gets component ranges.
bool hasComponentTags(mlir::Operation *root);
/// Consecutive kernels of one (kind, layer) form a range; "dispatch" and
/// "combine" count as "mlp". A function with an untagged kernel, or whose
/// layers are out of order for its kind (forward: ascending; backward:
/// descending), gets none, with a warning at the function saying why.
std::vector<rt::ComponentRange> computeComponentRanges(mlir::func::FuncOp fn,
                                                       rt::FunctionKind kind);
/// The ranges recorded by --pp-component-ranges; std::nullopt when `fn` has
/// no pp.component_ranges (the verifier checks its form).
std::optional<std::vector<rt::ComponentRange>>
readComponentRanges(mlir::func::FuncOp fn);
/// Writes `ranges` as pp.component_ranges (an empty array: none).
void annotateComponentRanges(mlir::func::FuncOp fn,
                             llvm::ArrayRef<rt::ComponentRange> ranges);

#define GEN_PASS_DECL
#include "pipeforge/Target/Program/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "pipeforge/Target/Program/Passes.h.inc"

} // namespace pipeforge::target

#endif // PIPEFORGE_TARGET_PROGRAM_PREPARE_H
