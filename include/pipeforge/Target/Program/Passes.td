//===- Passes.td - program preparation passes --------------*- tablegen -*-===//
#ifndef PIPEFORGE_TARGET_PROGRAM_PASSES
#define PIPEFORGE_TARGET_PROGRAM_PASSES

include "mlir/Pass/PassBase.td"

def PPAssignBuffers : Pass<"pp-assign-buffers", "::mlir::ModuleOp"> {
  let summary = "Record each stage function's buffer assignment in the IR";
  let description = [{
    For the `@forward`, `@backward_input`, `@backward_weight` and `@backward`
    of every `pp.stage`, computes the buffer assignment the program lowering
    writes (docs/program-format.md, "Buffers"): a value takes a free buffer
    of exactly its byte size whose last value died before it is defined,
    else a new one; arguments are never reused. The function gets
    `pp.buffers` (each buffer's byte size), each argument `pp.buffer` (its
    buffer) and each op `pp.buffer` (one buffer per result). The lowering
    (`--pp-to-program`, pipeforge-compile) reads these instead of computing
    them; the program is the same byte for byte. A later pass that changes a
    body must rerun this one: the verifier rejects a function with
    `pp.buffers` whose ops are not all annotated, the lowering an
    assignment that does not fit the values.

    Errors: a value whose type the program cannot hold (not a static f32 or
    integer tensor, or over the size limits), at the op.

    ```sh
    pipeforge-opt --pp-compile="schedule=1f1b ranks=2" --pp-assign-buffers \
        model.mlir
    ```
    ```mlir
    func.func @forward(%arg0: tensor<2x4xi32> {pp.buffer = 0 : i64,
                                               pp.role = "tokens"}, ...)
        attributes {pp.buffers = array<i64: 32, 512, 256, ...>} {
      %0 = nn.embedding(%arg0, %arg1) {pp.buffer = array<i64: 4>} ...
    ```
  }];
  let dependentDialects = ["::pipeforge::pp::PPDialect"];
}

def PPComponentRanges : Pass<"pp-component-ranges", "::mlir::ModuleOp"> {
  let summary = "Record each stage function's component ranges in the IR";
  let description = [{
    When the module's ops carry `pp.component` / `pp.layer`
    (`--pp-split-components`), gives each `@forward`, `@backward_input`,
    `@backward_weight` and `@backward` of every `pp.stage` its component
    ranges over its kernels (the ops of its body, in order), as the program
    lowering computes them: consecutive ops of one (kind, layer) form a
    range `{kind, layer, begin, end}` (kernels [begin, end)); `dispatch` and
    `combine` count as `mlp` (an `nn.moe` kernel runs its own
    all-to-alls). Without tags the pass does nothing (the program then has
    no ranges either).

    Warnings (the function then gets `pp.component_ranges = []`, no
    ranges): an op without `pp.component` / `pp.layer`; a layer out of
    order (ascending in `@forward`, descending in the backward functions).

    ```mlir
    func.func @forward(...) attributes {pp.component_ranges = [
        {begin = 0 : i64, end = 9 : i64, kind = "attn", layer = 0 : i64},
        {begin = 9 : i64, end = 14 : i64, kind = "mlp", layer = 0 : i64} ]
    }
    ```
  }];
  let dependentDialects = ["::pipeforge::pp::PPDialect"];
}

#endif // PIPEFORGE_TARGET_PROGRAM_PASSES
