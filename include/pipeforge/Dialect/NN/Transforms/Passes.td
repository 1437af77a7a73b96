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

def NNShardTensor : Pass<"nn-shard-tensor", "::mlir::ModuleOp"> {
  let summary = "Megatron-style tensor parallelism: shard each layer over tp ranks";
  let description = [{
    Rewrites every model function (a `func.func` with nn ops, outside any
    `pp.pipeline`) into what one rank of a tensor-parallel group of `tp`
    ranks computes, with the group's communication as explicit
    collectives (docs/tensor-parallel.md):

    - a linear whose result feeds attention, an activation, the gating
      product or the loss is column-parallel: its weight's rows (and its
      bias) are split, its input passes an `nn.tp_copy`;
    - a linear whose input is such a split activation is row-parallel: its
      weight's columns are split, it computes a `partial` sum that an
      `nn.tp_all_reduce` completes;
    - `nn.attention` keeps `num_heads / tp` query heads and
      `num_kv_heads / tp` KV heads (both must divide);
    - the token embedding is vocabulary-parallel (`vocab_shards`), the
      loss `nn.vocab_parallel_cross_entropy` on the LM head's vocabulary
      shard;
    - norms, residual adds and nn.moe stay replicated (MoE experts are
      split by expert parallelism, not here).

    With `sequence-parallel`, the replicated activations are split along
    the sequence instead: `nn.tp_all_gather` replaces `nn.tp_copy`,
    `nn.tp_reduce_scatter` replaces `nn.tp_all_reduce`, and the norms'
    (and MoE's) parameters are marked `nn.tp_reduce_grad`.

    Each split parameter argument takes its shard's type and
    `nn.tp_dim`; the function gets `nn.tensor_parallel` (and
    `nn.sequence_parallel`). A head count, vocabulary, feature count or
    sequence length that `tp` does not divide is an error naming the op.
    Run it before `--pp-partition`:

    ```sh
    pipeforge-import examples/llama-tiny.json \
      | pipeforge-opt --nn-shard-tensor="tp=2" --nn-cost-report -o /dev/null
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "Tensor-parallel group size (1: leave the model unchanged)">,
    Option<"sequenceParallel", "sequence-parallel", "bool",
           /*default=*/"false",
           "Split the activations between sharded layers along the sequence">
  ];
}

#endif // PIPEFORGE_NN_PASSES
