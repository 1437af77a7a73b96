//===- NNOps.td - nn dialect ops ---------------------------*- tablegen -*-===//
#ifndef PIPEFORGE_NN_OPS
#define PIPEFORGE_NN_OPS

include "pipeforge/Dialect/NN/IR/NNDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "pipeforge/Dialect/NN/IR/NNInterfaces.td"

/// Traits of every model-level (forward) op: pure, with a cost model
/// (NNCost.cpp) and backward rules (NNBackward.cpp).
defvar NN_CostTraits = [DeclareOpInterfaceMethods<NN_CostOpInterface>];
defvar NN_BackwardTraits = [DeclareOpInterfaceMethods<NN_BackwardOpInterface>];
defvar NN_ModelTraits = !listconcat([Pure], NN_CostTraits, NN_BackwardTraits);

def NN_LinearOp : NN_Op<"linear", NN_ModelTraits> {
  let summary = "y = x W^T (+ b)";
  let description = [{
    A fully connected layer. `input` is `[..., in]`, `weight` is `[out, in]`,
    the optional `bias` is `[out]`; the result is `[..., out]`.

    `partial` (row parallelism, set by --nn-shard-tensor): the result is
    this tensor-parallel rank's partial sum, completed by an
    nn.tp_all_reduce or nn.tp_reduce_scatter; the bias is added by rank 0
    only, so that it is counted once.

    ```mlir
    %y = nn.linear %x, %w, %b
        : (tensor<64x768xf32>, tensor<3072x768xf32>, tensor<3072xf32>)
        -> tensor<64x3072xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                       Optional<NN_FloatTensor>:$bias, UnitAttr:$partial);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_LayerNormOp : NN_Op<"layernorm", NN_ModelTraits> {
  let summary = "Layer normalisation over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last dimension.
    `gamma` and `beta` are `[d]` where `d` is the input's last dimension.

    ```mlir
    %y = nn.layernorm %x, %g, %b {epsilon = 1.0e-05 : f32}
        : (tensor<64x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<64x768xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$gamma,
                       NN_FloatTensor:$beta,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `,` $beta attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

class NN_ElementwiseUnaryOp<string mnemonic, string desc>
    : NN_Op<mnemonic, !listconcat(NN_ModelTraits, [SameOperandsAndResultType])> {
  let summary = desc;
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def NN_GeluOp : NN_ElementwiseUnaryOp<"gelu",
    "GELU activation (tanh approximation)">;

def NN_AddOp : NN_Op<"add", !listconcat(NN_ModelTraits,
                                        [SameOperandsAndResultType, Commutative])> {
  let summary = "Elementwise sum (residual connection)";
  let arguments = (ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def NN_DropoutOp : NN_Op<"dropout", !listconcat(NN_ModelTraits,
                                                [SameOperandsAndResultType])> {
  let summary = "Inverted dropout with a counter-based mask";
  let description = [{
    `y = x * m / (1 - rate)`, where each element's keep bit `m` is drawn
    with probability `1 - rate` from a counter-based generator keyed by the
    run's seed, the step, the global microbatch, `site` and the element's
    position in the whole (unsharded) tensor. The mask is a pure function of
    that key: it is never stored, the backward (`nn.dropout` on the result
    gradient, with the same rate and site: the op is its own derivative)
    and a recomputing backward draw it again, and every schedule, rank
    layout and the single-process run draw the same bits. `site` names the
    dropout within the model (pipeforge-import numbers them; unique per
    model).

    ```mlir
    %y = nn.dropout %x {rate = 1.000000e-01 : f32, site = 3 : i64} : tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, F32Attr:$rate,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$site);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def NN_CrossEntropyOp : NN_Op<"cross_entropy", NN_ModelTraits> {
  let summary = "Mean cross-entropy of logits against integer targets";
  let description = [{
    `logits` is `[..., vocab]`, `targets` has the leading shape `[...]` of
    integers; the result is the scalar mean loss over all tokens.

    ```mlir
    %loss = nn.cross_entropy %logits, %targets
        : (tensor<64x50257xf32>, tensor<64xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IntTensor:$targets);
  let results = (outs 0DTensorOf<[AnyFloat]>:$loss);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_SiluOp : NN_ElementwiseUnaryOp<"silu", "SiLU activation x * sigmoid(x)">;

def NN_MulOp : NN_Op<"mul", !listconcat(NN_ModelTraits,
                                        [SameOperandsAndResultType, Commutative])> {
  let summary = "Elementwise product (SwiGLU gating)";
  let arguments = (ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def NN_RMSNormOp : NN_Op<"rmsnorm", NN_ModelTraits> {
  let summary = "RMS normalisation over the last dimension (Llama)";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * gamma` over the last dimension.

    ```mlir
    %y = nn.rmsnorm %x, %g : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$gamma,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_EmbeddingOp : NN_Op<"embedding", NN_ModelTraits> {
  let summary = "Token embedding, plus learned positions when given";
  let description = [{
    `tokens` is `[batch, seq]` of integers, `table` is `[vocab, hidden]`, the
    optional `positions` is `[max_positions, hidden]` with
    `max_positions >= seq`; the result is `[batch, seq, hidden]`:
    `table[tokens[b, t]] + positions[t]`.

    With `vocab_shards = T > 1` (vocabulary parallelism, set by
    --nn-shard-tensor) `table` is tensor-parallel rank r's rows
    `[r v, (r+1) v)` of the whole table: tokens outside them contribute
    zero, `positions` are added by rank 0 only, and the result is a
    partial sum that an nn.tp_all_reduce (or nn.tp_reduce_scatter)
    completes.

    ```mlir
    %h = nn.embedding %tok, %wte, %wpe
        : (tensor<2x16xi32>, tensor<256x64xf32>, tensor<32x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins NN_IntTensor:$tokens, NN_FloatTensor:$table,
                       Optional<NN_FloatTensor>:$positions,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$vocab_shards);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $tokens `,` $table (`,` $positions^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_AttentionOp : NN_Op<"attention", NN_ModelTraits> {
  let summary = "Causal multi-head attention core (GQA, optional rotary)";
  let description = [{
    `q` is `[batch, seq, heads * d]`; `k` and `v` are
    `[batch, seq, kv_heads * d]` with `heads % kv_heads == 0` (grouped-query
    attention: query head i reads kv head `i / (heads / kv_heads)`); `v` is
    `[batch, seq, kv_heads * dv]`, where the value head dimension `dv` may
    differ from `d` (Multi-head Latent Attention). With `rotary`, q and k
    are rotated (RoPE, base `rope_theta`, pairs `(j, j + r/2)` of the
    rotated part) first: the whole head, or with `rope_dim = r > 0` only the
    trailing `r` dimensions of each head (MLA's decoupled RoPE; the leading
    `d - r` are not rotated). Scores are scaled by `1/sqrt(d)` and causally
    masked within each sequence; `dropout` is the attention-probability
    dropout rate, applied as nn.dropout does (site `dropout_site`, each
    probability's position being (sequence, head, query, key) of the whole
    model). The result is `[batch, seq, heads * dv]`.

    ```mlir
    %o = nn.attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, rotary}
        : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
    %m = nn.attention %q2, %k2, %v2 {num_heads = 4 : i64, num_kv_heads = 4 : i64, rotary, rope_dim = 8 : i64}
        : (tensor<2x16x96xf32>, tensor<2x16x96xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$q, NN_FloatTensor:$k, NN_FloatTensor:$v,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_kv_heads,
                       UnitAttr:$rotary,
                       DefaultValuedAttr<F32Attr, "10000.0">:$rope_theta,
                       DefaultValuedAttr<F32Attr, "0.0">:$dropout,
                       DefaultValuedAttr<I64Attr, "0">:$dropout_site,
                       DefaultValuedAttr<I64Attr, "0">:$rope_dim);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getHeadDim() {
      return getQ().getType().getShape().back() / getNumHeads();
    }
    int64_t getValueHeadDim() {
      return getV().getType().getShape().back() / getNumKvHeads();
    }
  }];
}

def NN_ConcatHeadsOp : NN_Op<"concat_heads", NN_ModelTraits> {
  let summary = "Per-head concatenation over the last dimension (MLA keys)";
  let description = [{
    `lhs` is `[..., heads * a]` and `rhs` is `[..., heads * b]`; the result
    is `[..., heads * (a + b)]` where head h is `[lhs_h | rhs_h]`. With
    `broadcast`, `rhs` is one head `[..., b]` shared by every head: head h
    is `[lhs_h | rhs]` (MLA's keys: each head's own no-RoPE part, then the
    one RoPE key of all heads). Its B splits the result gradient back
    (nn.concat_heads_bwd), summing the shared head's over the heads.

    ```mlir
    %k = nn.concat_heads %k_nope, %k_rope {num_heads = 4 : i64, broadcast}
        : (tensor<2x16x64xf32>, tensor<2x16x8xf32>) -> tensor<2x16x96xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       UnitAttr:$broadcast);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_MoEOp : NN_Op<"moe", NN_ModelTraits> {
  let summary = "Mixture-of-experts MLP: router, top-k, experts";
  let description = [{
    `x` is `[..., hidden]`, `router` is `[experts, hidden]`; each expert e is
    an MLP `w2[e] act(w1[e] x)` (or, with `w3`, the gated SwiGLU form
    `w2[e] (act(w1[e] x) * (w3[e] x))`), `w1`/`w3` `[experts, ffn, hidden]`
    and `w2` `[experts, hidden, ffn]`. Every token goes to its `top_k`
    highest-scoring experts (softmax over the router logits, ties to the
    lower index), weighted by the top-k probabilities renormalised to sum
    to 1. With `capacity_factor > 0`, an expert takes at most
    `ceil(capacity_factor * tokens * top_k / experts)` tokens, in token
    order; the rest of its tokens are dropped.

    Routing options (DeepSeek-V2/V3, Qwen2-MoE; the defaults are the
    routing above):
    - `scoring`: `"softmax"` (default) or `"sigmoid"` scores of the router
      logits (DeepSeek-V3 uses sigmoid).
    - `norm_topk_prob` (default true): the top-k scores are renormalised to
      sum to 1; false keeps the raw scores as the weights.
    - `routed_scaling_factor` (default 1, > 0): multiplies the weights.
    - `n_group`, `topk_group` (default 1, 1): group-limited routing. The
      experts form `n_group` consecutive groups (`n_group` divides the
      experts, at most 64); a group scores the max of its experts' scores
      (softmax, DeepSeek-V2) or the sum of its two largest (sigmoid,
      DeepSeek-V3); only the experts of the `topk_group` best groups may be
      chosen, so `topk_group * experts / n_group >= top_k`.
    The choice is a constant for the gradient: it flows through the chosen
    weights (scaling, renormalisation, then the softmax or sigmoid).

    Auxiliary-loss-free load balancing (DeepSeek-V3's `noaux_tc`): `bias`
    names a per-expert bias state `[experts]` (HF's
    `e_score_correction_bias`, zero at the start) that is added to the
    scores for the choice only (top-k and the group scores); the gates come
    from the unbiased scores. It is model state, not a parameter: no
    gradient, no optimizer, saved in checkpoints. After every training step
    the runtime updates it from the step's load (the tokens routed to each
    expert, over all microbatches and ranks):
    `b_e += bias_update_speed * sign(mean_e load - load_e)`
    (`bias_update_speed`, default 0.001, >= 0; 0 keeps the bias fixed).

    ```mlir
    %y = nn.moe %x, %r, %w1, %w2 {top_k = 2 : i64, activation = "silu"}
        : (tensor<2x16x64xf32>, tensor<4x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>)
        -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$router,
                       NN_FloatTensor:$w1, NN_FloatTensor:$w2,
                       Optional<NN_FloatTensor>:$w3,
                       ConfinedAttr<I64Attr, [IntPositive]>:$top_k,
                       DefaultValuedAttr<F32Attr, "0.0">:$capacity_factor,
                       DefaultValuedAttr<StrAttr, "\"gelu\"">:$activation,
                       DefaultValuedAttr<StrAttr, "\"softmax\"">:$scoring,
                       DefaultValuedAttr<BoolAttr, "true">:$norm_topk_prob,
                       DefaultValuedAttr<F32Attr, "1.0">:$routed_scaling_factor,
                       DefaultValuedAttr<I64Attr, "1">:$n_group,
                       DefaultValuedAttr<I64Attr, "1">:$topk_group,
                       OptionalAttr<StrAttr>:$bias,
                       OptionalAttr<F32Attr>:$bias_update_speed);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $router `,` $w1 `,` $w2 (`,` $w3^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumExperts() { return getRouter().getType().getDimSize(0); }
    int64_t getFfnDim() { return getW1().getType().getDimSize(1); }
  }];
}

//===----------------------------------------------------------------------===//
// Tensor parallelism (--nn-shard-tensor, docs/tensor-parallel.md): the
// collectives over the tensor-parallel group of `tp` ranks that the
// sharding pass inserts, as explicit ops with costs (CommOpInterface). B
// and W split as for any op: the backward of a collective is a collective
// in B; W never communicates.
//===----------------------------------------------------------------------===//

defvar NN_CommTraits = [DeclareOpInterfaceMethods<NN_CommOpInterface>];
defvar NN_CollectiveTraits = !listconcat(NN_ModelTraits, NN_CommTraits);

def NN_TPCopyOp : NN_Op<"tp_copy", !listconcat(NN_CollectiveTraits,
                                               [SameOperandsAndResultType])> {
  let summary = "Identity forward, all-reduce of the gradient (Megatron's f)";
  let description = [{
    Marks a replicated activation that enters column-parallel layers: the
    forward is the identity; the backward (in B) sums the input gradients
    of the `tp` ranks, each of which saw only its shard of the layer.

    ```mlir
    %x1 = nn.tp_copy %x {tp = 2 : i64} : tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$tp);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def NN_TPAllReduceOp : NN_Op<"tp_all_reduce",
    !listconcat(NN_CollectiveTraits, [SameOperandsAndResultType])> {
  let summary = "Sum over the tensor-parallel group (Megatron's g)";
  let description = [{
    Completes the partial sums of a row-parallel layer (and of a
    vocabulary-parallel embedding): every rank gets the sum of the `tp`
    ranks' inputs, in rank order. The backward is the identity.

    ```mlir
    %y = nn.tp_all_reduce %p {tp = 2 : i64} : tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$tp);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def NN_TPAllGatherOp : NN_Op<"tp_all_gather", NN_CollectiveTraits> {
  let summary = "Concatenation of the ranks' shards along `dim`";
  let description = [{
    Sequence parallelism: turns a sequence-sharded activation into the whole
    one before column-parallel layers. The result's `dim` extent is `tp`
    times the input's; rank r's input lands at `[r n, (r+1) n)`. The
    backward is a reduce-scatter along the same dimension.

    ```mlir
    %x = nn.tp_all_gather %s {tp = 2 : i64, dim = 1 : i64}
        : (tensor<2x8x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$tp,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_TPReduceScatterOp : NN_Op<"tp_reduce_scatter", NN_CollectiveTraits> {
  let summary = "Sum over the group, each rank keeping its shard of `dim`";
  let description = [{
    Sequence parallelism: completes a row-parallel layer's partial sums and
    shards the result along the sequence at once. The result's `dim` extent
    is the input's divided by `tp`; rank r keeps `[r n, (r+1) n)`. The
    backward is an all-gather along the same dimension.

    ```mlir
    %s = nn.tp_reduce_scatter %p {tp = 2 : i64, dim = 1 : i64}
        : (tensor<2x16x64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$tp,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_VocabParallelCrossEntropyOp
    : NN_Op<"vocab_parallel_cross_entropy", NN_CollectiveTraits> {
  let summary = "Mean cross-entropy of vocabulary-sharded logits";
  let description = [{
    `logits` is this rank's `[..., vocab / tp]` shard of the LM head's
    output: rank r holds vocabulary entries `[r v, (r+1) v)`. The loss is
    that of nn.cross_entropy on the whole logits, computed without
    gathering them (Megatron-LM): an all-reduce (max) of each token's
    largest logit, then one all-reduce (sum) of each token's sum of
    exponentials and target logit. Every rank gets the same scalar.

    ```mlir
    %loss = nn.vocab_parallel_cross_entropy %logits, %targets {tp = 2 : i64}
        : (tensor<2x16x128xf32>, tensor<2x16xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IntTensor:$targets,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$tp);
  let results = (outs 0DTensorOf<[AnyFloat]>:$loss);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient ops: what --pp-split-backward builds. B ops compute gradients of
// activations, W ops gradients of parameters.
//===----------------------------------------------------------------------===//

class NN_GradOp<string mnemonic, list<Trait> traits = []>
    : NN_Op<mnemonic, !listconcat([Pure], traits)> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  // The shape rules shared with the program validator (rt/OpShapes.h).
  let hasVerifier = 1;
}

def NN_LinearBwdInputOp : NN_GradOp<"linear_bwd_input"> {
  let summary = "B of nn.linear: dx = dy W";
  let arguments = (ins NN_FloatTensor:$result_grad, NN_FloatTensor:$weight);
  let results = (outs NN_FloatTensor:$input_grad);
}

def NN_LinearBwdWeightOp : NN_GradOp<"linear_bwd_weight"> {
  let summary = "W of nn.linear: dW = dy^T x (and db = sum dy with a bias)";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$result_grad,
                       UnitAttr:$has_bias);
  let results = (outs NN_FloatTensor:$weight_grad,
                      Optional<NN_FloatTensor>:$bias_grad);
}

def NN_LayerNormBwdInputOp : NN_GradOp<"layernorm_bwd_input"> {
  let summary = "B of nn.layernorm";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$gamma,
                       NN_FloatTensor:$result_grad,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$input_grad);
}

def NN_LayerNormBwdWeightOp : NN_GradOp<"layernorm_bwd_weight"> {
  let summary = "W of nn.layernorm: dgamma, dbeta";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$result_grad,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$gamma_grad, NN_FloatTensor:$beta_grad);
}

def NN_RMSNormBwdInputOp : NN_GradOp<"rmsnorm_bwd_input"> {
  let summary = "B of nn.rmsnorm";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$gamma,
                       NN_FloatTensor:$result_grad,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$input_grad);
}

def NN_RMSNormBwdWeightOp : NN_GradOp<"rmsnorm_bwd_weight"> {
  let summary = "W of nn.rmsnorm: dgamma";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$result_grad,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$gamma_grad);
}

def NN_GeluBwdOp : NN_GradOp<"gelu_bwd"> {
  let summary = "B of nn.gelu: dx = gelu'(x) dy";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$result_grad);
  let results = (outs NN_FloatTensor:$input_grad);
}

def NN_SiluBwdOp : NN_GradOp<"silu_bwd"> {
  let summary = "B of nn.silu: dx = silu'(x) dy";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$result_grad);
  let results = (outs NN_FloatTensor:$input_grad);
}

def NN_EmbeddingBwdWeightOp : NN_GradOp<"embedding_bwd_weight"> {
  let summary = "W of nn.embedding: scatter-add into the table (and positions)";
  let arguments = (ins NN_IntTensor:$tokens, NN_FloatTensor:$result_grad,
                       I64Attr:$vocab, OptionalAttr<I64Attr>:$max_positions,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$vocab_shards);
  let results = (outs NN_FloatTensor:$table_grad,
                      Optional<NN_FloatTensor>:$positions_grad);
}

def NN_AttentionBwdOp : NN_GradOp<"attention_bwd"> {
  let summary = "B of nn.attention: dq, dk, dv";
  let arguments = (ins NN_FloatTensor:$q, NN_FloatTensor:$k, NN_FloatTensor:$v,
                       NN_FloatTensor:$result_grad,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_kv_heads,
                       UnitAttr:$rotary,
                       DefaultValuedAttr<F32Attr, "10000.0">:$rope_theta,
                       DefaultValuedAttr<F32Attr, "0.0">:$dropout,
                       DefaultValuedAttr<I64Attr, "0">:$dropout_site,
                       DefaultValuedAttr<I64Attr, "0">:$rope_dim);
  let results = (outs NN_FloatTensor:$q_grad, NN_FloatTensor:$k_grad,
                      NN_FloatTensor:$v_grad);
}

def NN_ConcatHeadsBwdOp : NN_GradOp<"concat_heads_bwd"> {
  let summary = "B of nn.concat_heads: the per-head split of the gradient";
  let description = [{
    `result_grad` is `[..., heads * (a + b)]` with `a = lhs_head_dim`; the
    results are `lhs_grad [..., heads * a]` and `rhs_grad [..., heads * b]`,
    or with `broadcast` `rhs_grad [..., b]` summed over the heads.
  }];
  let arguments = (ins NN_FloatTensor:$result_grad,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$lhs_head_dim,
                       UnitAttr:$broadcast);
  let results = (outs NN_FloatTensor:$lhs_grad, NN_FloatTensor:$rhs_grad);
}

def NN_MoEBwdInputOp : NN_GradOp<"moe_bwd_input"> {
  let summary = "B of nn.moe: dx through the experts and the gates";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$router,
                       NN_FloatTensor:$w1, NN_FloatTensor:$w2,
                       Optional<NN_FloatTensor>:$w3,
                       NN_FloatTensor:$result_grad,
                       ConfinedAttr<I64Attr, [IntPositive]>:$top_k,
                       DefaultValuedAttr<F32Attr, "0.0">:$capacity_factor,
                       DefaultValuedAttr<StrAttr, "\"gelu\"">:$activation,
                       DefaultValuedAttr<StrAttr, "\"softmax\"">:$scoring,
                       DefaultValuedAttr<BoolAttr, "true">:$norm_topk_prob,
                       DefaultValuedAttr<F32Attr, "1.0">:$routed_scaling_factor,
                       DefaultValuedAttr<I64Attr, "1">:$n_group,
                       DefaultValuedAttr<I64Attr, "1">:$topk_group,
                       OptionalAttr<StrAttr>:$bias);
  let results = (outs NN_FloatTensor:$input_grad);
}

def NN_MoEBwdWeightOp : NN_GradOp<"moe_bwd_weight"> {
  let summary = "W of nn.moe: router and expert weight gradients";
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$router,
                       NN_FloatTensor:$w1, NN_FloatTensor:$w2,
                       Optional<NN_FloatTensor>:$w3,
                       NN_FloatTensor:$result_grad,
                       ConfinedAttr<I64Attr, [IntPositive]>:$top_k,
                       DefaultValuedAttr<F32Attr, "0.0">:$capacity_factor,
                       DefaultValuedAttr<StrAttr, "\"gelu\"">:$activation,
                       DefaultValuedAttr<StrAttr, "\"softmax\"">:$scoring,
                       DefaultValuedAttr<BoolAttr, "true">:$norm_topk_prob,
                       DefaultValuedAttr<F32Attr, "1.0">:$routed_scaling_factor,
                       DefaultValuedAttr<I64Attr, "1">:$n_group,
                       DefaultValuedAttr<I64Attr, "1">:$topk_group,
                       OptionalAttr<StrAttr>:$bias);
  let results = (outs NN_FloatTensor:$router_grad, NN_FloatTensor:$w1_grad,
                      NN_FloatTensor:$w2_grad, Optional<NN_FloatTensor>:$w3_grad);
}

def NN_CrossEntropyBwdOp : NN_GradOp<"cross_entropy_bwd"> {
  let summary = "B of nn.cross_entropy: dlogits = (softmax - onehot) dloss / tokens";
  let arguments = (ins NN_FloatTensor:$logits, NN_IntTensor:$targets,
                       0DTensorOf<[AnyFloat]>:$loss_grad);
  let results = (outs NN_FloatTensor:$logits_grad);
}

def NN_VocabParallelCrossEntropyBwdOp
    : NN_GradOp<"vocab_parallel_cross_entropy_bwd",
                [DeclareOpInterfaceMethods<NN_CommOpInterface>]> {
  let summary = "B of nn.vocab_parallel_cross_entropy: this rank's dlogits";
  let description = [{
    `(softmax - onehot) dloss / tokens` on this rank's vocabulary shard; the
    softmax's maximum and denominator are all-reduced again (two
    `[tokens]` all-reduces) rather than stashed.
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IntTensor:$targets,
                       0DTensorOf<[AnyFloat]>:$loss_grad,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$tp);
  let results = (outs NN_FloatTensor:$logits_grad);
}

#endif // PIPEFORGE_NN_OPS
