//===- PPOps.td - pp dialect ops ---------------------------*- tablegen -*-===//
#ifndef PIPEFORGE_PP_OPS
#define PIPEFORGE_PP_OPS

include "pipeforge/Dialect/PP/IR/PPDialect.td"
include "pipeforge/Dialect/PP/IR/PPAttrs.td"

/// A non-negative 32-bit integer attribute (indices, counts, ranks).
def PP_Index : ConfinedAttr<I32Attr, [IntNonNegative]>;
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"

//===----------------------------------------------------------------------===//
// Stage level
//===----------------------------------------------------------------------===//

def PP_PipelineOp : PP_Op<"pipeline", [
    Symbol, NoTerminator, SingleBlock, IsolatedFromAbove,
    NoRegionArguments]> {
  let summary = "A model cut into pipeline stages placed on ranks";
  let description = [{
    Holds one `pp.stage` per (model copy, stage). `placement` says how stages
    map to ranks: `linear` (stage i on rank i), `interleaved` (stage k on
    rank k mod ranks), `v` (2p stages; rank r holds r and 2p-1-r) or `dual`
    (two copies; rank r holds stage r of copy 0 and stage N-1-r of copy 1).
    The verifier checks that every stage is present once and sits on the
    rank its placement names.

    ```mlir
    pp.pipeline @gpt stages 2 ranks 2 placement linear {
      pp.stage 0 rank 0 chunk 0 { func.func @forward(...) ... }
      pp.stage 1 rank 1 chunk 0 { func.func @forward(...) ... }
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, PP_Index:$num_stages,
                       PP_Index:$num_ranks, PP_PlacementKind:$placement);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `stages` $num_stages `ranks` $num_ranks `placement` $placement
    attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// Number of model copies the placement implies (2 for dual).
    int64_t getNumCopies() {
      return getPlacement() == PlacementKind::dual ? 2 : 1;
    }
    /// The rank the placement assigns to stage `stage` of copy `copy`.
    int64_t expectedRank(int64_t copy, int64_t stage);
  }];
}

def PP_StageOp : PP_Op<"stage", [
    HasParent<"PipelineOp">, SymbolTable, NoTerminator, SingleBlock,
    IsolatedFromAbove, NoRegionArguments]> {
  let summary = "One pipeline stage: its bodies and where it runs";
  let description = [{
    Stage `index` of model copy `copy`, placed on `rank` as its `chunk`-th
    chunk. The region holds the stage's bodies as functions: `@forward`, and
    after `--pp-split-backward` also `@backward_input` (B),
    `@backward_weight` (W) and `@backward` (BW).
  }];
  let arguments = (ins PP_Index:$index, PP_Index:$rank, PP_Index:$chunk,
                       DefaultValuedAttr<PP_Index, "0">:$copy);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $index (`copy` $copy^)? `rank` $rank `chunk` $chunk attr-dict-with-keyword
    $body
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Schedule level
//===----------------------------------------------------------------------===//

def PP_ScheduleOp : PP_Op<"schedule", [
    NoTerminator, SingleBlock, IsolatedFromAbove, NoRegionArguments]> {
  let summary = "A pipeline schedule: one ordered program per rank";
  let description = [{
    `kind` names the generator (`1f1b`, `zb-h1`, `dualpipev`, ...).
    `placement` lists the rank of every stage, copy-major (so its length is
    `stages` times the number of model copies: 2 for DualPipe).
    `microbatches` is the count per copy.

    ```mlir
    pp.schedule "1f1b" ranks 2 stages 2 microbatches 2 placement [0, 1] {
      pp.rank_program 0 {
        pp.compute F stage 0 mb 0
        pp.send F stage 0 mb 0 to 1
        ...
      }
      pp.rank_program 1 { ... }
    }
    ```
  }];
  let arguments = (ins StrAttr:$kind, PP_Index:$num_ranks, PP_Index:$num_stages,
                       PP_Index:$num_microbatches,
                       DenseI32ArrayAttr:$placement);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind `ranks` $num_ranks `stages` $num_stages `microbatches`
    $num_microbatches `placement` $placement attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumCopies() {
      return getNumStages() > 0 ? getPlacement().size() / getNumStages() : 0;
    }
    /// Rank of stage `stage` of copy `copy`.
    int32_t rankOf(int64_t copy, int64_t stage) {
      return getPlacement()[copy * getNumStages() + stage];
    }
  }];
}

def PP_RankProgramOp : PP_Op<"rank_program", [
    HasParent<"ScheduleOp">, NoTerminator, SingleBlock, NoRegionArguments]> {
  let summary = "The ordered actions of one rank";
  let arguments = (ins PP_Index:$rank);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$rank attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

defvar PP_WorkArgs = (ins PP_WorkKind:$kind, PP_Index:$stage, PP_Index:$mb,
                         DefaultValuedAttr<PP_Index, "0">:$copy);
defvar PP_WorkFormat = "$kind `stage` $stage `mb` $mb (`copy` $copy^)?";

def PP_ComputeOp : PP_Op<"compute"> {
  let summary = "Run F, B, W or BW of one stage on one microbatch";
  let description = [{
    ```mlir
    pp.compute F stage 0 mb 3            // forward of stage 0, microbatch 3
    pp.compute BW stage 1 mb 0 copy 1    // full backward, DualPipe copy 1
    ```
  }];
  let arguments = PP_WorkArgs;
  let assemblyFormat = PP_WorkFormat # " attr-dict";
  let hasVerifier = 1;
}

def PP_OverlapOp : PP_Op<"overlap", [
    NoTerminator, SingleBlock, NoRegionArguments]> {
  let summary = "An overlapped F&B pair";
  let description = [{
    The forward of one microbatch and the backward (B or BW) of another,
    run as one interleaved unit so that each one's communication hides
    behind the other's compute. Holds exactly two `pp.compute`: the F first,
    then the B or BW.

    ```mlir
    pp.overlap {
      pp.compute F stage 0 mb 4
      pp.compute BW stage 3 mb 0 copy 1
    }
    ```

    After `--pp-fuse-overlap` the two members are followed by the pair's
    component program: `pp.component`, `pp.comm_start` and `pp.comm_wait`
    ops in execution order. `f_layers` / `b_layers` then list, per layer of
    the F member's / backward member's stage, its components (e.g.
    `["attn", "dispatch", "mlp", "combine"]`), and the verifier checks the
    program against them: every component of each member exactly once, in
    dependency order (F in layer order, B in reverse layer order, a W after
    its B), every `pp.comm_start` with a later `pp.comm_wait`.
  }];
  let arguments = (ins OptionalAttr<ArrayAttr>:$f_layers,
                       OptionalAttr<ArrayAttr>:$b_layers);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// True when the pair carries a component program.
    bool isFused() { return getBody().front().getOperations().size() > 2; }
  }];
}

defvar PP_ComponentArgs = (ins PP_WorkKind:$kind, PP_ComponentKind:$component,
                              PP_Index:$layer);
defvar PP_ComponentFormat = "$kind $component `layer` $layer attr-dict";

def PP_ComponentOp : PP_Op<"component", [HasParent<"OverlapOp">]> {
  let summary = "One compute component of a member of a fused F&B pair";
  let description = [{
    Runs component `component` (`attn` or `mlp`) of layer `layer` (an index
    into the stage's layers) of one member of the enclosing `pp.overlap`:
    `F` names the F member, `B` the input-gradient part and `W` the
    weight-gradient part of the backward member (W only when that member is
    a BW). Stage, microbatch and copy are the member's.

    ```mlir
    pp.component F attn layer 0
    pp.component B mlp layer 1
    pp.component W mlp layer 1
    ```
  }];
  let arguments = PP_ComponentArgs;
  let assemblyFormat = PP_ComponentFormat;
  let hasVerifier = 1;
}

def PP_CommStartOp : PP_Op<"comm_start", [HasParent<"OverlapOp">]> {
  let summary = "Start the all-to-all of a dispatch/combine component";
  let description = [{
    Starts (non-blocking) the all-to-all token exchange of component
    `dispatch` or `combine` of layer `layer` of a member (`F` or `B`) of the
    enclosing pair; a later `pp.comm_wait` with the same fields completes
    it. The compute between the two is what hides it.

    ```mlir
    pp.comm_start F dispatch layer 0
    pp.component B mlp layer 1
    pp.comm_wait F dispatch layer 0
    ```
  }];
  let arguments = PP_ComponentArgs;
  let assemblyFormat = PP_ComponentFormat;
  let hasVerifier = 1;
}

def PP_CommWaitOp : PP_Op<"comm_wait", [HasParent<"OverlapOp">]> {
  let summary = "Wait for the all-to-all a pp.comm_start began";
  let arguments = PP_ComponentArgs;
  let assemblyFormat = PP_ComponentFormat;
  let hasVerifier = 1;
}

class PP_MessageOp<string mnemonic, string dir> : PP_Op<mnemonic> {
  let arguments = !con(PP_WorkArgs, (ins PP_Index:$peer));
  let assemblyFormat = PP_WorkFormat # " `" # dir # "` $peer attr-dict";
  let hasVerifier = 1;
}

def PP_SendOp : PP_MessageOp<"send", "to"> {
  let summary = "Send the output of F, B or BW to another rank";
  let description = [{
    The message is named by the work that produced it — its tag: the
    activation of `F stage s mb j` goes to the rank of stage s+1, the
    gradient of `B`/`BW stage s mb j` to the rank of stage s-1.

    ```mlir
    pp.send F stage 0 mb 0 to 1
    ```
  }];
}

def PP_RecvOp : PP_MessageOp<"recv", "from"> {
  let summary = "Receive the output of F, B or BW from another rank";
  let description = [{
    ```mlir
    pp.recv F stage 0 mb 0 from 0
    ```
  }];
}

def PP_RecvPostOp : PP_MessageOp<"recv_post", "from"> {
  let summary = "Post (non-blocking) the receive of a message";
  let description = [{
    The first half of a split `pp.recv` (`--pp-fuse-overlap`): posts the
    receive buffer; the matching `pp.recv_wait` later in the same rank
    program blocks until the data is there. Posts never block.

    ```mlir
    pp.recv_post F stage 0 mb 1 from 0
    pp.compute F stage 1 mb 0
    pp.recv_wait F stage 0 mb 1 from 0
    pp.compute F stage 1 mb 1
    ```
  }];
}

def PP_RecvWaitOp : PP_MessageOp<"recv_wait", "from"> {
  let summary = "Wait for a receive posted by pp.recv_post";
  let description = [{
    Blocks until the message posted by the earlier `pp.recv_post` with the
    same fields has arrived. For the schedule library (verifier, simulator)
    it is the `pp.recv`.
  }];
}

def PP_GradReduceOp : PP_Op<"grad_reduce"> {
  let summary = "Sum the weight gradients of two model copies (DualPipe)";
  let description = [{
    Rank r and rank N-1-r hold the same stage of the two copies; both run
    `pp.grad_reduce` with each other before the optimizer step.

    ```mlir
    pp.grad_reduce with 3
    ```
  }];
  let arguments = (ins PP_Index:$peer);
  let assemblyFormat = "`with` $peer attr-dict";
  let hasVerifier = 1;
}

class PP_ParamGatherOp<string mnemonic> : PP_Op<mnemonic> {
  let arguments = (ins PP_Index:$stage, DefaultValuedAttr<PP_Index, "0">:$copy);
  let assemblyFormat = "`stage` $stage (`copy` $copy^)? attr-dict";
  let hasVerifier = 1;
}

def PP_UnshardOp : PP_ParamGatherOp<"unshard"> {
  let summary = "ZeRO-3: gather the parameters of a stage this rank computes";
  let description = [{
    Posts the receipt of the parameters of stage `stage` (of model copy
    `copy`) that this rank does not own; their owners serve the values they
    hold all step, so a gather waits on no other rank's schedule position.
    The stage's next compute on this rank waits for them. One per (stage,
    copy) the rank computes, before the first compute that uses it
    (`--pp-insert-param-gathers` places it `prefetch` compute actions
    earlier); the stage must be placed on the enclosing rank.

    ```mlir
    pp.unshard stage 3
    pp.unshard stage 0 copy 1
    ```
  }];
}

def PP_ReshardOp : PP_ParamGatherOp<"reshard"> {
  let summary = "ZeRO-3: release the gathered parameters of a stage";
  let description = [{
    Frees the parameters a `pp.unshard` of the same stage and copy gathered;
    right after the stage's last compute on this rank.

    ```mlir
    pp.reshard stage 3
    ```
  }];
}

class PP_StashCopyOp<string mnemonic> : PP_Op<mnemonic> {
  let arguments = (ins PP_Index:$stage, PP_Index:$mb,
                       DefaultValuedAttr<PP_Index, "0">:$copy);
  let assemblyFormat = "`F` `stage` $stage `mb` $mb (`copy` $copy^)? attr-dict";
  let hasVerifier = 1;
}

def PP_OffloadOp : PP_StashCopyOp<"offload"> {
  let summary = "Activation offload: copy the stash of a forward to host memory";
  let description = [{
    Starts the copy of what `F stage S mb M` (of copy `copy`) keeps for its
    backward to host memory, off the compute stream; the device memory is
    freed at the end of the next compute action, which the copy runs
    under. After that F on the same rank, at most once per stash
    (`--pp-insert-offload` places it right after the F); the stage must be
    placed on the enclosing rank.

    ```mlir
    pp.offload F stage 0 mb 3
    pp.offload F stage 1 mb 0 copy 1
    ```
  }];
}

def PP_ReloadOp : PP_StashCopyOp<"reload"> {
  let summary = "Activation offload: bring an offloaded stash back to the device";
  let description = [{
    Allocates the stash of `F stage S mb M` on the device again and starts
    the copy back; the B or BW that reads it waits for the copy. After the
    stash's `pp.offload` and before that B or BW (`--pp-insert-offload`
    places it right before the compute action before it, so the copy runs
    under that action).

    ```mlir
    pp.reload F stage 0 mb 3
    ```
  }];
}

#endif // PIPEFORGE_PP_OPS
