//===- Passes.td - pp dialect passes -----------------------*- tablegen -*-===//
#ifndef PIPEFORGE_PP_PASSES
#define PIPEFORGE_PP_PASSES

include "mlir/Pass/PassBase.td"

def PPPartition : Pass<"pp-partition", "::mlir::ModuleOp"> {
  let summary = "Cut func.func @model into balanced pipeline stages (pp.pipeline)";
  let description = [{
    Groups the ops of `@model` by their `nn.layer` attribute (the ops of a
    layer must be contiguous), costs each layer as the F + B + W FLOPs of its
    ops (`CostOpInterface`; ops without one are free) and cuts the chain of
    layers into `stages` contiguous stages that minimise the largest stage
    cost (optimal; see `pipeforge/Partition/Partition.h`), or as `layout`
    says. `placement` sets the ranks: `linear` (ranks = stages),
    `interleaved` (needs `ranks`; stage k on rank k mod ranks), `v` (ranks =
    stages / 2) or `dual` (ranks = stages, two copies of the same cut).

    Each stage's `@forward` takes the activations live across the cut before
    it (in definition order; they are exactly the previous stage's results),
    then the data arguments it uses (`nn.role` "tokens"/"targets"), then the
    parameters it uses, keeping their argument attributes; it returns the
    values live across the next cut, or `@model`'s results on the last stage.
    The pipeline gets `pp.imbalance` (max / mean stage cost) and each stage
    `pp.layers` (its `nn.layer` ids) and `pp.cost` (F + B + W FLOPs, i64).

    ```sh
    pipeforge-opt --pp-partition="stages=4 placement=linear" model.mlir
    pipeforge-opt --pp-partition="stages=4 layout=3,4,4,3" model.mlir
    ```
  }];
  let dependentDialects = ["::pipeforge::pp::PPDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"stages", "stages", "int", /*default=*/"0",
           "Pipeline stages per model copy (v: 2 x ranks)">,
    Option<"placement", "placement", "std::string", /*default=*/"\"linear\"",
           "linear | interleaved | v | dual">,
    Option<"ranks", "ranks", "int", /*default=*/"0",
           "Ranks: required for interleaved, derived (and checked) otherwise">,
    ListOption<"layout", "layout", "int",
               "Comma-separated layers per stage, e.g. 3,4,4,3, one per "
               "stage (default: balance by cost)",
               "::llvm::cl::value_desc(\"n,n,...\")">,
    Option<"keepModel", "keep-model", "bool", /*default=*/"false",
           "Keep @model; the pipeline is then named @model_pipeline">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark with the cut, stage costs and imbalance">
  ];
}

def PPSplitBackward : Pass<"pp-split-backward", "::mlir::ModuleOp"> {
  let summary = "Differentiate each stage's @forward into B, W and BW functions";
  let description = [{
    For every `pp.stage`, builds the reverse-mode backward of `@forward` from
    the ops' `BackwardOpInterface` rules and splits it: `@backward_input` (B,
    the gradients of the activation arguments), `@backward_weight` (W, one
    gradient per parameter, in parameter order; nothing B returns depends on
    it) and `@backward` (BW, both fused). `@forward` additionally returns the
    tensors the backward reads (`pp.stash`), B returns the tensors W reads
    that only B computes (`pp.wstash`). Every argument and result carries a
    `pp.role`; docs/split-backward.md describes the convention. A module
    without a pipeline whose `func.func @model` is the whole model is split
    as one stage (functions `@model`, `@backward_input`, ... at module level).
  }];
  let dependentDialects = ["::pipeforge::nn::NNDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::arith::ArithDialect"];
}

def PPRecompute : Pass<"pp-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation recomputation: full or selective, per stage";
  let description = [{
    After `--pp-split-backward`. `policy=full` (the default): `@forward`
    stashes only its non-parameter inputs (the received activations, tokens,
    targets); `@backward_input` and `@backward` recompute the forward values
    they read from them (the forward ops those values depend on are cloned
    at the top). `policy=selective` (Korthikanti et al. 2022): only the
    cheap, memory-heavy values are recomputed: a stashed output of a norm,
    an activation function or a dropout whose inputs are stashed anyway (a
    linear's input that is a layernorm's or a GELU's output), so F keeps
    the rest. Either way the values `@backward_weight` reads become W-stash
    results of `@backward_input`, so W computes nothing twice. `stages`
    restricts the pass to those stage indices (default: all). The stage
    gets `pp.recompute = "full"` or `"selective"` and, for selective,
    `pp.recompute_flops` (the cloned ops' forward FLOPs): the stage cost
    model charges B (and BW) the recomputed FLOPs and counts the new stash.
    The recomputed values are the stashed ones bit for bit; training is
    unchanged (docs/split-backward.md, "Recomputation").
  }];
  let options = [
    Option<"policy", "policy", "std::string", "\"full\"",
           "full | selective">,
    ListOption<"stages", "stages", "int64_t",
               "Stage indices to recompute (default: every stage)">
  ];
  let dependentDialects = ["::pipeforge::nn::NNDialect"];
}

/// The cost model options shared by the passes that replay a schedule.
/// Memory is in units of M_B: one microbatch's activations on a rank's share
/// of a p-way split (a stage of an S-stage model copy is p/S of it).
defvar PP_CostOptions = [
  Option<"tf", "tf", "double", "1.0", "Time of a forward F">,
  Option<"tb", "tb", "double", "1.0", "Time of an input-gradient backward B">,
  Option<"tw", "tw", "double", "1.0", "Time of a weight-gradient backward W">,
  Option<"tfb", "tfb", "double", "-1.0",
         "Time of an overlapped F&B pair (< 0: the sum of its members)">,
  Option<"tcomm", "tcomm", "double", "0.0", "Time on every cross-rank edge">,
  Option<"memW", "mem-w", "double", "0.5", "M_W / M_B">
];

def PPSchedule : Pass<"pp-schedule", "::mlir::ModuleOp"> {
  let summary = "Generate a pipeline schedule (pp.schedule) for each pp.pipeline";
  let description = [{
    For every `pp.pipeline` in the module, appends a `pp.schedule` with one
    ordered compute program per rank, produced by the named generator. The
    pipeline's placement must suit the kind (`zbv`, `dualpipev`, `v-half`
    and `v-min` need `v`, `dualpipe` and `chimera` need `dual`, `interleaved` needs `interleaved`, the
    others `linear`). A module without a pipeline gets one schedule built
    from `ranks` (and `chunks` for interleaved) alone, which is handy for
    studying schedules:

    ```sh
    pipeforge-opt --pp-schedule="kind=zb-h1 ranks=4 microbatches=8" empty.mlir
    ```

    Impossible requests (DualPipe with an odd rank count, ZB-H2 with
    m < 2p, ...) are errors that name the rule.

    `kind=auto` runs the automatic scheduler (docs/auto-scheduler.md) under
    `mem-limit`, on the pipeline's placement (`linear` or `v`). Without a
    pipeline, `placement=any` (the default) does what `pipeforge-sched
    --schedule auto` does: the search on both placements and every
    single-copy handcrafted order, the fastest under the limit wins;
    `placement=linear` or `v` searches one. `tf`/`tb`/`tw` are the times
    of one rank's share of the model (a `v` stage takes half of them). An
    impossible limit is an error. The limit is a number of
    M_B, `<k>p` (k x ranks M_B) or bytes (`12GB`, `512MiB`, `1e9B`). When the
    pipeline's stages have bodies (`@forward`, from --pp-partition), the
    costs come from the nn cost model instead of `tf`/`tb`/`tw`/`mem-w`:
    per-stage M_B = the stash bytes of the stage's forward ops
    (`bytes-per-element`), M_W their weight-stash bytes, and per-stage F/B/W
    times = FLOPs / `flops-per-time` (0: normalised so the mean stage's F
    takes 1), plus, with `tp-bytes-per-time`, each stage's tensor-parallel
    collective bytes in F and B over that bandwidth; M_B as a unit is then one microbatch's stash over all stages
    divided by the ranks (linear: the mean stage's). Without bodies the
    costs are uniform and a byte limit is an error.
  }];
  let dependentDialects = ["::pipeforge::pp::PPDialect"];
  let options = !listconcat(PP_CostOptions, [
    Option<"kind", "kind", "std::string", /*default=*/"\"1f1b\"",
           "gpipe | 1f1b | interleaved | zb-h1 | zb-h2 | zbv | dualpipe | "
           "dualpipev | chimera | v-half | v-min | auto (the automatic scheduler, under "
           "mem-limit) | "
           "none (one rank, the single-process reference)">,
    Option<"microbatches", "microbatches", "int", /*default=*/"0",
           "Microbatches per step (DualPipe, Chimera: the total over both "
           "directions); "
           "0 = the smallest the kind accepts">,
    Option<"ranks", "ranks", "int", /*default=*/"0",
           "Pipeline ranks when the module has no pp.pipeline">,
    Option<"chunks", "chunks", "int", /*default=*/"2",
           "Model chunks per rank for interleaved 1F1B without a pp.pipeline">,
    Option<"memLimit", "mem-limit", "std::string", /*default=*/"\"\"",
           "kind=auto: per-rank activation limit: M_B units, <k>p (k x ranks) "
           "or bytes (12GB, 512MiB, 1e9B; needs stage bodies); "
           "empty = unlimited">,
    Option<"bytesPerElement", "bytes-per-element", "unsigned",
           /*default=*/"2",
           "kind=auto with stage bodies: bytes of one activation element">,
    Option<"flopsPerTime", "flops-per-time", "double", /*default=*/"0.0",
           "kind=auto with stage bodies: FLOPs per time unit (0 = the mean "
           "stage's F takes 1)">,
    Option<"tpBytesPerTime", "tp-bytes-per-time", "double", /*default=*/"0.0",
           "kind=auto with stage bodies: tensor-parallel bytes per time unit "
           "(needs flops-per-time; 0 = collectives are free)">,
    Option<"autoPlacement", "placement", "std::string", /*default=*/"\"any\"",
           "kind=auto without a pp.pipeline: any (the search on linear and "
           "v and every single-copy handcrafted order; the fastest wins), "
           "linear or v">,
    Option<"timeLimit", "time-limit", "double", /*default=*/"10.0",
           "kind=auto: ILP time limit in seconds (0 = heuristic only)">,
    Option<"gap", "gap", "double", /*default=*/"0.0001",
           "kind=auto: ILP relative gap target">
  ]);
}

def PPInsertComm : Pass<"pp-insert-comm", "::mlir::ModuleOp"> {
  let summary = "Insert matched send/recv for every cross-rank dependency";
  let description = [{
    Adds `pp.send` on the producing rank and `pp.recv` on the consuming rank
    for every activation (F → next stage) and gradient (B/BW → previous
    stage) that crosses ranks, none for same-rank hand-offs, and DualPipe's
    `pp.grad_reduce`. The order is deadlock-free under rendezvous semantics:
    every rank meets its messages in the order of one global total order.
    The messages are placed by a replay on the cost options: give the costs
    the schedule will run with and the messages do not stretch it.
  }];
  let options = PP_CostOptions;
}

def PPInsertParamGathers : Pass<"pp-insert-param-gathers", "::mlir::ModuleOp"> {
  let summary = "ZeRO-3: gather each stage's parameters before its first compute, release them after its last";
  let description = [{
    For every `pp.schedule`, inserts on every rank one `pp.unshard` per
    (stage, copy) the rank computes, `prefetch` compute actions
    (`pp.compute` or `pp.overlap`) before the first that uses the stage (at
    the start of the program when there are fewer), and one `pp.reshard`
    right after the last (sched::insertParamGathers). The other actions are
    kept as they are (messages, split receives, fused pairs), so the pass
    runs after `--pp-insert-comm`. The owners of a stage's parameters serve
    them all step, so a gather waits on no other rank's schedule position:
    the messages' deadlock-freedom is unchanged. A schedule that already
    gathers, or a `prefetch` outside [0, 64], is an error.
    `pipeforge-compile --zero 3 --param-prefetch N` runs it
    (docs/compile.md).
  }];
  let dependentDialects = ["::pipeforge::pp::PPDialect"];
  let options = [
    Option<"prefetch", "prefetch", "int", /*default=*/"1",
           "Compute actions an UNSHARD runs ahead of its stage's first use">
  ];
}

def PPInsertOffload : Pass<"pp-insert-offload", "::mlir::ModuleOp"> {
  let summary = "Activation offload: move F-stashes to host memory between their F and their B";
  let description = [{
    For every `pp.schedule`, chooses on every rank the stashes that leave
    the device as `pipeforge-run --offload-activations` does
    (sched::planOffload: an F with at least 2 compute actions between it
    and its B or BW under `mode=auto`, 1 under `mode=all`) and
    writes the plan as actions (sched::insertOffload): `pp.offload` right
    after the F's compute action (the copy out runs under the next compute
    action, at whose end the device memory is freed) and `pp.reload` right
    before the compute action before the B (the copy back runs under it).
    The other actions are kept as they are (messages, split receives,
    gathers, fused pairs), so the pass runs after `--pp-insert-comm`. The
    copies wait on no other rank: the messages' deadlock-freedom is
    unchanged. A schedule that already offloads, or a mode other than auto
    or all, is an error. `pipeforge-compile --offload-activations auto|all`
    runs it (docs/compile.md).
  }];
  let dependentDialects = ["::pipeforge::pp::PPDialect"];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"auto\"",
           "Which stashes leave: auto (a gap of 2 compute actions to hide "
           "the copies) or all (a gap of 1)">
  ];
}

def PPSplitComponents : Pass<"pp-split-components", "::mlir::ModuleOp"> {
  let summary = "Tag each stage body op with its layer component (attn, dispatch, mlp, combine)";
  let description = [{
    For every `pp.stage`, tags the ops of `@forward` and, when
    `--pp-split-backward` ran, of `@backward_input`, `@backward_weight` and
    `@backward` with `pp.component` ("attn", "mlp" or "combine") and
    `pp.layer` (the index of the op's `nn.layer` among the stage's layers).
    In a layer, the ops up to the residual add after `nn.attention` are
    `attn` (in an MoE layer, every op before the `nn.moe`: the pre-MoE norm
    feeds the router); an `nn.moe` (and its gradient ops) is `mlp` and
    additionally carries `pp.span = ["dispatch", "mlp", "combine"]`
    (routing + token exchange, experts, exchange back + weighted sum); ops
    after it are `combine`; the rest `mlp`. A gradient op gets the
    component of the forward op whose parameter it reads (or whose
    parameter gradient it returns), else that of the op before it in its
    layer, else of the next one. Ops without `nn.layer` (gradient sums,
    zero constants) take the tags of the op before them (at the start of a
    body: the first tagged op), so every op of every function is tagged and
    each function is a sequence of runs per (layer, component). Errors: a
    stage without `@forward`, a backward op of a layer `@forward` lacks.
    Warnings: a `@forward` without `nn.layer`, a module without
    `pp.stage`. Numerics are unchanged (attributes only). Each stage gets
    `pp.components`: per layer, its components in forward order, e.g.
    `[["attn", "dispatch", "mlp", "combine"], ["attn", "mlp"]]`.
  }];
}

def PPFuseOverlap : Pass<"pp-fuse-overlap", "::mlir::ModuleOp"> {
  let summary = "Expand overlapped F&B pairs into component programs; split receives into post + wait";
  let description = [{
    Every plain `pp.overlap` of every `pp.schedule` gets its component
    program (docs/passes.md): layer steps pairing layer k of the F member
    with layer L-1-k of the backward member, each step in `order` (default
    DeepSeek's: combine(B), attn(F), mlp(B), dispatch(F), dispatch(B),
    mlp(W), mlp(F), attn(B), attn(W), combine(F)). An all-to-all becomes
    `pp.comm_start` at its place in the order and `pp.comm_wait` right
    before the next op of the same member part that needs it. The layer
    lists come from the stages' `pp.components` (--pp-split-components) or,
    without them, `layers` MoE layers. Every `pp.recv` becomes `pp.recv_post`
    (right after the previous wait of its channel, or at the program start)
    and `pp.recv_wait` (sunk past compute to just before its consumer, never
    past another message, so each rank's message order and hence the
    deadlock-freedom proof are unchanged). The result is verified (op
    verifiers and the schedule library's --pp-verify-schedule checks).
    With `search`, each pair's per-layer order is the fastest under the
    simulator's communication model (sched::searchPairOrder with `ta2a`,
    `tf`, `tb`, `tw`, `attn-share`; ties keep DeepSeek's), recorded as
    `pp.order` with `pp.predicted = {default, fused, unfused}` times.
  }];
  let dependentDialects = ["::pipeforge::pp::PPDialect"];
  let options = [
    Option<"order", "order", "std::string", /*default=*/"\"\"",
           "Per-layer order as comp:part list, e.g. combine:B,attn:F,... "
           "(empty: DeepSeek's)">,
    Option<"search", "search", "bool", /*default=*/"false",
           "Pick each pair's per-layer order by the cost model "
           "(exclusive with order)">,
    Option<"ta2a", "ta2a", "double", "0.0",
           "search: time of one dispatch or combine of one layer">,
    Option<"tf", "tf", "double", "1.0", "search: time of a forward F">,
    Option<"tb", "tb", "double", "1.0", "search: time of a backward B">,
    Option<"tw", "tw", "double", "1.0", "search: time of a weight-gradient W">,
    Option<"attnShare", "attn-share", "double", "0.5",
           "search: attention's share of a layer's compute">,
    Option<"layers", "layers", "int", /*default=*/"1",
           "Layers per stage when the stages carry no pp.components">,
    Option<"moe", "moe", "bool", /*default=*/"true",
           "Without pp.components: MoE layers (attn, dispatch, mlp, combine) "
           "or dense (attn, mlp)">,
    Option<"asyncP2P", "async-p2p", "bool", /*default=*/"true",
           "Split pp.recv into pp.recv_post / pp.recv_wait">
  ];
}

def PPVerifySchedule : Pass<"pp-verify-schedule", "::mlir::ModuleOp"> {
  let summary = "Check a pp.schedule: completeness, dependencies, messages, deadlock, memory";
  let description = [{
    Each F, B and W exactly once per (stage, microbatch) (or a BW in place of
    B and W); every dependency respected; sends and receives matched per
    channel in FIFO order; no deadlock (proved by executing the programs);
    and, with `mem-limit`, peak activation memory per rank within the limit:
    a number of M_B or `<k>p` (k x ranks M_B) counts each stage of an
    S-stage copy on p ranks as p/S M_B; a byte limit (`12GB`, `512MiB`,
    `1e9B`) counts each stage's stash bytes from the nn cost model of its
    `@forward` and needs the module's one pp.pipeline to have bodies. The error names the rank and the step and
    shows that rank's program around it.
  }];
  let options = !listconcat(PP_CostOptions, [
    Option<"memLimit", "mem-limit", "std::string", /*default=*/"\"\"",
           "Per-rank activation limit: M_B units, <k>p or bytes (12GB, "
           "512MiB, 1e9B); empty or 0 = none">,
    Option<"bytesPerElement", "bytes-per-element", "unsigned",
           /*default=*/"2", "Byte limits: bytes of one activation element">
  ]);
}

def PPSimulate : Pass<"pp-simulate", "::mlir::ModuleOp"> {
  let summary = "Replay each pp.schedule on a cost model and report";
  let description = [{
    Prints, per schedule, the makespan, the bubble rate (overall and the
    Zero Bubble paper's) and per-rank busy time and peak activation memory,
    and optionally writes a Chrome/Perfetto trace and an SVG timeline.
  }];
  let options = !listconcat(PP_CostOptions, [
    Option<"trace", "trace", "std::string", "\"\"",
           "Write a Chrome/Perfetto trace JSON to this path">,
    Option<"svg", "svg", "std::string", "\"\"",
           "Write an SVG timeline to this path">,
    Option<"grid", "grid", "bool", "false", "Also print the text grid">
  ]);
}

#endif // PIPEFORGE_PP_PASSES
