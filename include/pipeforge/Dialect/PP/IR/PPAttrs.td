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

#endif // PIPEFORGE_PP_ATTRS
