//===- PPAttrs.td - pp dialect enums -----------------------*- tablegen -*-===//
#ifndef PIPEFORGE_PP_ATTRS
#define PIPEFORGE_PP_ATTRS

include "mlir/IR/EnumAttr.td"

def PP_WorkKind : I32EnumAttr<"WorkKind",
    "kind of compute work: F, B (input grad), W (weight grad), BW (full backward)", [
      I32EnumAttrCase<"F", 0>,
      I32EnumAttrCase<"B", 1>,
      I32EnumAttrCase<"W", 2>,
      I32EnumAttrCase<"BW", 3>
    ]> {
  let cppNamespace = "::pipeforge::pp";
}

def PP_PlacementKind : I32EnumAttr<"PlacementKind",
    "how stages map to ranks", [
      I32EnumAttrCase<"linear", 0>,
      I32EnumAttrCase<"interleaved", 1>,
      I32EnumAttrCase<"v", 2>,
      I32EnumAttrCase<"dual", 3>
    ]> {
  let cppNamespace = "::pipeforge::pp";
}

def PP_ComponentKind : I32EnumAttr<"ComponentKind",
    "one component of a transformer layer: attention, the all-to-all token "
    "dispatch, the (expert) MLP, the all-to-all combine", [
      I32EnumAttrCase<"attn", 0>,
      I32EnumAttrCase<"dispatch", 1>,
      I32EnumAttrCase<"mlp", 2>,
      I32EnumAttrCase<"combine", 3>
    ]> {
  let cppNamespace = "::pipeforge::pp";
}

// The role of a stage function's argument or result (`pp.role`, set by
// pp-split-backward, read by the program lowering; docs/split-backward.md).
// Stored in the IR as the case's name, `{pp.role = "act_in"}`; the pp
// dialect's attribute verifier rejects an unknown name, and an argument role
// on a result or the reverse (isArgumentRole / isResultRole, PPOps.h).
def PP_Role : I32EnumAttr<"Role",
    "role of a stage function argument or result", [
      // Argument roles.
      I32EnumAttrCase<"act_in", 0>,    // activation from the previous stage
      I32EnumAttrCase<"data", 1>,      // tokens or targets (nn.role tells)
      I32EnumAttrCase<"tokens", 2>,
      I32EnumAttrCase<"targets", 3>,
      I32EnumAttrCase<"param", 4>,
      I32EnumAttrCase<"grad_in", 5>,   // gradient of an act_out (pp.result)
      I32EnumAttrCase<"loss_seed", 6>, // the loss gradient (last stage)
      // Both.
      I32EnumAttrCase<"stash", 7>,     // forward -> backward (pp.stash)
      I32EnumAttrCase<"wstash", 8>,    // B -> W (pp.wstash)
      // Result roles.
      I32EnumAttrCase<"act_out", 9>,
      I32EnumAttrCase<"loss", 10>,
      I32EnumAttrCase<"grad_out", 11>, // gradient of an act_in (pp.arg)
      I32EnumAttrCase<"param_grad", 12> // gradient of a param (pp.arg)
    ]> {
  let cppNamespace = "::pipeforge::pp";
  let genSpecializedAttr = 0;
}

#endif // PIPEFORGE_PP_ATTRS
