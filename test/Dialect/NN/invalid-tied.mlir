// RUN: pipeforge-opt %s -split-input-file -verify-diagnostics
// nn.tied on a parameter names the parameter it is a copy of (the LM head
// of tied embeddings names the token embedding, docs/model-ir.md): a
// non-empty string other than the parameter's own name. That the target
// exists with the same shape is checked by the lowering (it may live in
// another stage's function after partitioning).

// expected-error @+1 {{'func.func' op argument #1: 'nn.tied' must name a parameter, got 3 : i64}}
func.func @model(%e: tensor<8x4xf32> {nn.role = "param", nn.name = "wte"},
                 %h: tensor<8x4xf32> {nn.role = "param", nn.name = "lm_head.weight", nn.tied = 3}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op argument #1: 'nn.tied' must name a parameter, got ""}}
func.func @model(%e: tensor<8x4xf32> {nn.role = "param", nn.name = "wte"},
                 %h: tensor<8x4xf32> {nn.role = "param", nn.name = "lm_head.weight", nn.tied = ""}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op argument #0: parameter 'wte' is tied to itself}}
func.func @model(%e: tensor<8x4xf32> {nn.role = "param", nn.name = "wte", nn.tied = "wte"}) {
  return
}
