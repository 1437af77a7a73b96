//===- Passes.td - nn dialect passes -----------------------*- tablegen -*-===//
#ifndef PIPEFORGE_NN_PASSES
#define PIPEFORGE_NN_PASSES

include "mlir/Pass/PassBase.td"

def NNCostReport : Pass<"nn-cost-report", "::mlir::ModuleOp"> {
  let summary = "Print the cost model per layer, per stage and in total";
  let description = [{
    Sums the `CostOpInterface` of every nn op: FLOPs of F, B and W, the
    activation bytes F stashes, the part W keeps after B, and parameter
    bytes. For each function outside a `pp.pipeline` it prints one row per
    `nn.layer` and the total; for each `pp.pipeline`, one row per `pp.stage`
    (its `@forward`) and the total. The IR is unchanged.

    ```sh
    pipeforge-import examples/gpt-tiny.json | pipeforge-opt --nn-cost-report -o /dev/null
    ```

    docs/cost-model.md explains the accounting.
  }];
  let options = [
    Option<"bytesPerElement", "bytes-per-element", "unsigned",
           /*default=*/"2",
           "Bytes per stored activation and parameter element (2: fp16/bf16)">
  ];
}

#endif // PIPEFORGE_NN_PASSES
