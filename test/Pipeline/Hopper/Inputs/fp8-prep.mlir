// FP8 preparation ops (fa3-cast-fp8's fa3.hadamard and fa3.quantize) for the
// Hopper PTX and ptxas tests.
func.func @hadamard_d128(%x: tensor<?x?x8x128xbf16>) -> tensor<?x?x8x128xf32> {
  %y = fa3.hadamard %x {seed = 0 : i64} : tensor<?x?x8x128xbf16> -> tensor<?x?x8x128xf32>
  return %y : tensor<?x?x8x128xf32>
}
func.func @hadamard_d256(%x: tensor<?x?x2x256xf32>) -> tensor<?x?x2x256xbf16> {
  %y = fa3.hadamard %x {seed = -9 : i64} : tensor<?x?x2x256xf32> -> tensor<?x?x2x256xbf16>
  return %y : tensor<?x?x2x256xbf16>
}
func.func @quantize_f32(%x: tensor<?x?x8x128xf32>) -> (tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>) {
  %r, %d = fa3.quantize %x : tensor<?x?x8x128xf32> -> tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>
  return %r, %d : tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>
}
func.func @fp8_attr(%q: tensor<?x?x4x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
  %o, %l = fa3.attention %q, %k, %v {causal, fp8 = #fa3.fp8<hadamard = true, seed = 7>} : (tensor<?x?x4x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>)
  return %o, %l : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
}
func.func @quantize_hadamard_d256(%x: tensor<?x?x8x256xbf16>) -> (tensor<?x?x8x256xf8E4M3FN>, tensor<?x2xf32>) {
  %r, %d = fa3.quantize %x {hadamard_seed = 5 : i64} : tensor<?x?x8x256xbf16> -> tensor<?x?x8x256xf8E4M3FN>, tensor<?x2xf32>
  return %r, %d : tensor<?x?x8x256xf8E4M3FN>, tensor<?x2xf32>
}
