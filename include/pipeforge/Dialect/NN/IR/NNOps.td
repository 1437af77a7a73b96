//===- NNOps.td - nn dialect ops ---------------------------*- tablegen -*-===//
#ifndef PIPEFORGE_NN_OPS
#define PIPEFORGE_NN_OPS

include "pipeforge/Dialect/NN/IR/NNDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def NN_LinearOp : NN_Op<"linear", [Pure]> {
  let summary = "y = x W^T (+ b)";
  let description = [{
    A fully connected layer. `input` is `[..., in]`, `weight` is `[out, in]`,
    the optional `bias` is `[out]`; the result is `[..., out]`.

    ```mlir
    %y = nn.linear %x, %w, %b
        : (tensor<64x768xf32>, tensor<3072x768xf32>, tensor<3072xf32>)
        -> tensor<64x3072xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                       Optional<NN_FloatTensor>:$bias);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_LayerNormOp : NN_Op<"layernorm", [Pure]> {
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
    : NN_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = desc;
  let arguments = (ins NN_FloatTensor:$input);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def NN_GeluOp : NN_ElementwiseUnaryOp<"gelu",
    "GELU activation (tanh approximation)">;

def NN_AddOp : NN_Op<"add", [Pure, SameOperandsAndResultType, Commutative]> {
  let summary = "Elementwise sum (residual connection)";
  let arguments = (ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def NN_CrossEntropyOp : NN_Op<"cross_entropy", [Pure]> {
  let summary = "Mean cross-entropy of logits against integer targets";
  let description = [{
    `logits` is `[tokens, vocab]`, `targets` is `[tokens]` of integers; the
    result is the scalar mean loss.

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

#endif // PIPEFORGE_NN_OPS
