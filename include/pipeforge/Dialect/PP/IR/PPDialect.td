//===- PPDialect.td - The pp (pipeline) dialect ------------*- tablegen -*-===//
#ifndef PIPEFORGE_PP_DIALECT
#define PIPEFORGE_PP_DIALECT

include "mlir/IR/OpBase.td"

def PP_Dialect : Dialect {
  let name = "pp";
  let cppNamespace = "::pipeforge::pp";
  let summary = "Pipeline stages and per-rank pipeline schedules";
  let description = [{
    Two levels live in `pp`. The *stage level* (`pp.pipeline`, `pp.stage`)
    says which part of the model runs where. The *schedule level*
    (`pp.schedule`, `pp.rank_program` and the actions inside) says, per rank,
    in which order the forward (F), input-gradient backward (B),
    weight-gradient backward (W), fused backward (BW) and overlapped pairs
    run, and which messages move between ranks.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  // The discardable pp.* attributes with a fixed form (`pp.role`, the
  // program preparation's `pp.buffer`, `pp.buffers`, `pp.component_ranges`)
  // are checked wherever they appear; other pp.* names pass.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

class PP_Op<string mnemonic, list<Trait> traits = []>
    : Op<PP_Dialect, mnemonic, traits>;

#endif // PIPEFORGE_PP_DIALECT
