// RUN: pipeforge-opt %s --pp-partition="stages=1 keep-model=true" -verify-diagnostics

// expected-error @+1 {{keep-model names the pipeline '@model_pipeline', but that symbol already exists}}
func.func @model(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = nn.gelu %x {nn.layer = 0 : i64} : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

func.func private @model_pipeline()
