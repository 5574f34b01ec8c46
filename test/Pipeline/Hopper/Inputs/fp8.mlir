// FP8 (e4m3) forwards for the Hopper PTX tests.
func.func @fp8_d128_causal(%q: tensor<?x?x8x128xf8E4M3FN>, %k: tensor<?x?x2x128xf8E4M3FN>, %v: tensor<?x?x2x128xf8E4M3FN>, %qd: tensor<?x2xf32>, %kd: tensor<?x2xf32>, %vd: tensor<?x2xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {causal} : (tensor<?x?x8x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>
}

func.func @fp8_d256(%q: tensor<?x?x4x256xf8E4M3FN>, %k: tensor<?x?x4x256xf8E4M3FN>, %v: tensor<?x?x4x256xf8E4M3FN>, %qd: tensor<?x4xf32>, %kd: tensor<?x4xf32>, %vd: tensor<?x4xf32>) -> (tensor<?x?x4x256xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd : (tensor<?x?x4x256xf8E4M3FN>, tensor<?x?x4x256xf8E4M3FN>, tensor<?x?x4x256xf8E4M3FN>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> (tensor<?x?x4x256xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x256xbf16>, tensor<?x4x?xf32>
}

func.func @fp8_d64_causal(%q: tensor<?x?x8x64xf8E4M3FN>, %k: tensor<?x?x2x64xf8E4M3FN>, %v: tensor<?x?x2x64xf8E4M3FN>, %qd: tensor<?x2xf32>, %kd: tensor<?x2xf32>, %vd: tensor<?x2xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {causal} : (tensor<?x?x8x64xf8E4M3FN>, tensor<?x?x2x64xf8E4M3FN>, tensor<?x?x2x64xf8E4M3FN>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>
}
func.func @fp8_d128_n192(%q: tensor<?x?x8x128xf8E4M3FN>, %k: tensor<?x?x2x128xf8E4M3FN>, %v: tensor<?x?x2x128xf8E4M3FN>, %qd: tensor<?x2xf32>, %kd: tensor<?x2xf32>, %vd: tensor<?x2xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {schedule = #fa3.schedule<block_m = 128, block_n = 192, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} : (tensor<?x?x8x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>
}

// poly_exp2 = 8: every 8th exponential of P on the FMA pipe (poly-exp2.mlir).
func.func @fp8_d128_n192_pe8(%q: tensor<?x?x8x128xf8E4M3FN>, %k: tensor<?x?x2x128xf8E4M3FN>, %v: tensor<?x?x2x128xf8E4M3FN>, %qd: tensor<?x2xf32>, %kd: tensor<?x2xf32>, %vd: tensor<?x2xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {schedule = #fa3.schedule<block_m = 128, block_n = 192, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1, poly_exp2 = 8>} : (tensor<?x?x8x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>
}
