//===- NNDialect.td - The nn dialect -----------------------*- tablegen -*-===//
#ifndef PIPEFORGE_NN_DIALECT
#define PIPEFORGE_NN_DIALECT

include "mlir/IR/OpBase.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let cppNamespace = "::pipeforge::nn";
  let summary = "Model-level neural-network ops on ranked tensors";
  let description = [{
    The `nn` dialect describes a model as a sequence of layers on ranked
    tensors. Parameters are explicit operands, so a stage cut is a cut of
    the operand lists. Every op checks its shapes in its verifier.
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
  // `nn.init` on a parameter argument must be an initialiser the runtime
  // knows (the same check as the program validator's).
  let hasRegionArgAttrVerify = 1;
}

class NN_Op<string mnemonic, list<Trait> traits = []>
    : Op<NN_Dialect, mnemonic, traits>;

def NN_FloatTensor : RankedTensorOf<[AnyFloat]>;
def NN_IntTensor : RankedTensorOf<[AnySignlessInteger]>;

#endif // PIPEFORGE_NN_DIALECT
