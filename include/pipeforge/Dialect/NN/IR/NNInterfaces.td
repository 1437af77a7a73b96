//===- NNInterfaces.td - cost model and backward rules -----*- tablegen -*-===//
#ifndef PIPEFORGE_NN_INTERFACES
#define PIPEFORGE_NN_INTERFACES

include "mlir/IR/OpBase.td"

def NN_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::pipeforge::nn";
  let description = [{
    The cost model of one model-level op: FLOPs of its forward (F),
    input-gradient backward (B) and weight-gradient backward (W), the
    activation memory F stashes for the backward, the part of it that W
    still needs after B, and the bytes of its parameters.

    Activation bytes follow Megatron-LM's accounting (Korthikanti et al.,
    2022), the one the Zero Bubble paper uses: `bytesPerElement` for stored
    activations (2 in mixed precision), 1 byte per element of a dropout
    mask. Summed over a GPT layer this gives M_B = sb(34h + 5as) and
    M_W = 32sbh (see docs/cost-model.md).
  }];
  let methods = [
    InterfaceMethod<"FLOPs of the forward pass", "double", "getForwardFlops">,
    InterfaceMethod<"FLOPs of the input-gradient backward (B)", "double",
                    "getBackwardInputFlops">,
    InterfaceMethod<"FLOPs of the weight-gradient backward (W)", "double",
                    "getBackwardWeightFlops">,
    InterfaceMethod<"Activation bytes F stashes for the backward (freed by "
                    "B and W together)", "int64_t", "getStashBytes",
                    (ins "unsigned":$bytesPerElement)>,
    InterfaceMethod<"Of the stash, the bytes W still needs after B",
                    "int64_t", "getWeightStashBytes",
                    (ins "unsigned":$bytesPerElement)>,
    InterfaceMethod<"Parameter bytes", "int64_t", "getParamBytes",
                    (ins "unsigned":$bytesPerElement)>
  ];
}

def NN_BackwardOpInterface : OpInterface<"BackwardOpInterface"> {
  let cppNamespace = "::pipeforge::nn";
  let description = [{
    Reverse-mode rules of one op, split into B (gradients of the
    non-parameter operands) and W (gradients of the parameter operands).
    `fwd` maps a value of the forward function to its copy in the function
    being built (the split pass stashes it on demand); `resultGrads` are the
    gradients of the op's results (null when a result is unused).
  }];
  let methods = [
    InterfaceMethod<"Indices of the operands that are parameters",
                    "::llvm::SmallVector<unsigned>", "getParamOperandIndices">,
    InterfaceMethod<[{
        Builds the input-gradient (B) computation. Appends one value per
        operand to `operandGrads` (null for parameter operands and for
        operands with no gradient, such as integer tokens).
      }], "::mlir::LogicalResult", "buildBackwardInput",
      (ins "::mlir::OpBuilder &":$b,
           "::llvm::function_ref<::mlir::Value(::mlir::Value)>":$fwd,
           "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
    InterfaceMethod<[{
        Builds the weight-gradient (W) computation. Appends one value per
        parameter operand, in the order of getParamOperandIndices().
      }], "::mlir::LogicalResult", "buildBackwardWeight",
      (ins "::mlir::OpBuilder &":$b,
           "::llvm::function_ref<::mlir::Value(::mlir::Value)>":$fwd,
           "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$paramGrads)>
  ];
}

def NN_CommOpInterface : OpInterface<"CommOpInterface"> {
  let cppNamespace = "::pipeforge::nn";
  let description = [{
    An op that communicates over the tensor-parallel group: the bytes each
    rank sends in its forward (F) and in its input-gradient backward (B)
    (W never communicates), at `bytesPerElement` per element, with the
    ring algorithms' volumes: an all-reduce of n elements over t ranks
    sends 2 (t-1)/t n, an all-gather or reduce-scatter whose whole tensor
    has n elements sends (t-1)/t n. The cost report, the stage cost model
    and the planner read these.
  }];
  let methods = [
    InterfaceMethod<"Bytes sent per rank in the forward", "int64_t",
                    "getForwardCommBytes", (ins "unsigned":$bytesPerElement)>,
    InterfaceMethod<"Bytes sent per rank in the input-gradient backward (B)",
                    "int64_t", "getBackwardCommBytes",
                    (ins "unsigned":$bytesPerElement)>,
    InterfaceMethod<"The tensor-parallel group size", "int64_t",
                    "getGroupSize">
  ];
}

#endif // PIPEFORGE_NN_INTERFACES
