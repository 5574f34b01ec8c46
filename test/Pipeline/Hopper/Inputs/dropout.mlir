// Attention dropout on Hopper (dropout-ptx.mlir, dropout-ptxas.mlir).

func.func @fwd_d128_causal(%q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>, %rng: tensor<2xi64>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {causal, dropout = 0.1 : f32} : (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<2xi64>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>)
  return %o, %lse : tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>
}

func.func @fwd_d64(%q: tensor<?x?x8x64xf16>, %k: tensor<?x?x8x64xf16>, %v: tensor<?x?x8x64xf16>, %rng: tensor<2xi64>) -> (tensor<?x?x8x64xf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {dropout = 0.5 : f32} : (tensor<?x?x8x64xf16>, tensor<?x?x8x64xf16>, tensor<?x?x8x64xf16>, tensor<2xi64>) -> (tensor<?x?x8x64xf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xf16>, tensor<?x8x?xf32>
}

func.func @bwd_d128_causal(%do: tensor<?x?x16x128xbf16>, %q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>, %o: tensor<?x?x16x128xbf16>, %lse: tensor<?x16x?xf32>, %rng: tensor<2xi64>) -> (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse rng(%rng) {causal, dropout = 0.1 : f32} : (tensor<?x?x16x128xbf16>, tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>, tensor<2xi64>) -> (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>
}

func.func @bwd_d256_det(%do: tensor<?x?x4x256xbf16>, %q: tensor<?x?x4x256xbf16>, %k: tensor<?x?x4x256xbf16>, %v: tensor<?x?x4x256xbf16>, %o: tensor<?x?x4x256xbf16>, %lse: tensor<?x4x?xf32>, %rng: tensor<2xi64>) -> (tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse rng(%rng) {deterministic, dropout = 0.25 : f32} : (tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x4x?xf32>, tensor<2xi64>) -> (tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>)
  return %dq, %dk, %dv : tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>
}

// An explicit schedule with intra_wg_overlap: not built with dropout.
func.func @fwd_overlap(%q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>, %rng: tensor<2xi64>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {dropout = 0.1 : f32, schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} : (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<2xi64>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>)
  return %o, %lse : tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>
}
