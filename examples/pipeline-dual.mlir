// Stage level: two copies of a 2-stage model on 2 ranks (DualPipe's "dual"
// placement): rank r holds stage r of copy 0 and stage 1-r of copy 1.
pp.pipeline @tiny stages 2 ranks 2 placement dual {
  pp.stage 0 rank 0 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
      %y = nn.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
  }
  pp.stage 1 rank 1 chunk 0 {
    func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
      %y = nn.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      %z = nn.gelu %y : tensor<4x8xf32>
      return %z : tensor<4x8xf32>
    }
  }
  pp.stage 0 copy 1 rank 1 chunk 1 {
    func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
      %y = nn.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
  }
  pp.stage 1 copy 1 rank 0 chunk 1 {
    func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
      %y = nn.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
      %z = nn.gelu %y : tensor<4x8xf32>
      return %z : tensor<4x8xf32>
    }
  }
}
