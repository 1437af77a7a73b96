//===- Passes.td - pp dialect passes -----------------------*- tablegen -*-===//
#ifndef PIPEFORGE_PP_PASSES
#define PIPEFORGE_PP_PASSES

include "mlir/Pass/PassBase.td"

def PPSchedule : Pass<"pp-schedule", "::mlir::ModuleOp"> {
  let summary = "Generate a pipeline schedule (pp.schedule) for each pp.pipeline";
  let description = [{
    For every `pp.pipeline` in the module, appends a `pp.schedule` with one
    ordered compute program per rank, produced by the named generator. The
    pipeline's placement must suit the kind (`zbv` and `dualpipev` need
    `v`, `dualpipe` needs `dual`, `interleaved` needs `interleaved`, the
    others `linear`). A module without a pipeline gets one schedule built
    from `ranks` (and `chunks` for interleaved) alone, which is handy for
    studying schedules:

    ```sh
    pipeforge-opt --pp-schedule="kind=zb-h1 ranks=4 microbatches=8" empty.mlir
    ```

    Impossible requests (DualPipe with an odd rank count, ZB-H2 with
    m < 2p, ...) are errors that name the rule.
  }];
  let dependentDialects = ["::pipeforge::pp::PPDialect"];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"1f1b\"",
           "gpipe | 1f1b | interleaved | zb-h1 | zb-h2 | zbv | dualpipe | dualpipev">,
    Option<"microbatches", "microbatches", "int", /*default=*/"0",
           "Microbatches per step (DualPipe: the total over both directions); "
           "0 = the smallest the kind accepts">,
    Option<"ranks", "ranks", "int", /*default=*/"0",
           "Pipeline ranks when the module has no pp.pipeline">,
    Option<"chunks", "chunks", "int", /*default=*/"2",
           "Model chunks per rank for interleaved 1F1B without a pp.pipeline">
  ];
}

def PPInsertComm : Pass<"pp-insert-comm", "::mlir::ModuleOp"> {
  let summary = "Insert matched send/recv for every cross-rank dependency";
  let description = [{
    Adds `pp.send` on the producing rank and `pp.recv` on the consuming rank
    for every activation (F → next stage) and gradient (B/BW → previous
    stage) that crosses ranks, none for same-rank hand-offs, and DualPipe's
    `pp.grad_reduce`. The order is deadlock-free under rendezvous semantics:
    every rank meets its messages in the order of one global total order.
  }];
}

def PPVerifySchedule : Pass<"pp-verify-schedule", "::mlir::ModuleOp"> {
  let summary = "Check a pp.schedule: completeness, dependencies, messages, deadlock, memory";
  let description = [{
    Each F, B and W exactly once per (stage, microbatch) (or a BW in place of
    B and W); every dependency respected; sends and receives matched per
    channel in FIFO order; no deadlock (proved by executing the programs);
    and, with `mem-limit`, peak activation memory per rank (in units of one
    stage's M_B) within the limit. The error names the rank and the step and
    shows that rank's program around it.
  }];
  let options = [
    Option<"memLimit", "mem-limit", "double", /*default=*/"0",
           "Per-rank activation limit in M_B units (0 = none)">,
    Option<"memW", "mem-w", "double", /*default=*/"0.5",
           "M_W / M_B: the share of F's activation that B keeps for W">
  ];
}

def PPSimulate : Pass<"pp-simulate", "::mlir::ModuleOp"> {
  let summary = "Replay each pp.schedule on a cost model and report";
  let description = [{
    Prints, per schedule, the makespan, the bubble rate (overall and the
    Zero Bubble paper's) and per-rank busy time and peak activation memory,
    and optionally writes a Chrome/Perfetto trace and an SVG timeline.
  }];
  let options = [
    Option<"tf", "tf", "double", "1.0", "Time of a forward F">,
    Option<"tb", "tb", "double", "1.0", "Time of an input-gradient backward B">,
    Option<"tw", "tw", "double", "1.0", "Time of a weight-gradient backward W">,
    Option<"tfb", "tfb", "double", "-1.0",
           "Time of an overlapped F&B pair (< 0: the sum of its members)">,
    Option<"tcomm", "tcomm", "double", "0.0", "Time on every cross-rank edge">,
    Option<"memW", "mem-w", "double", "0.5", "M_W / M_B">,
    Option<"trace", "trace", "std::string", "\"\"",
           "Write a Chrome/Perfetto trace JSON to this path">,
    Option<"svg", "svg", "std::string", "\"\"",
           "Write an SVG timeline to this path">,
    Option<"grid", "grid", "bool", "false", "Also print the text grid">
  ];
}

#endif // PIPEFORGE_PP_PASSES
