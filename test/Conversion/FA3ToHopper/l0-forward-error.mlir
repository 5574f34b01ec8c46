// RUN: fa3-opt %s --fa3-select-schedule=target=sm_90a --convert-fa3-to-hopper -verify-diagnostics

// convert-fa3-to-hopper builds the backward and the FP8 preparation from
// L0; a forward (16-bit or FP8) must come through the tile level.
func.func @bf16_forward(%q: tensor<?x?x4x64xbf16>, %k: tensor<?x?x4x64xbf16>, %v: tensor<?x?x4x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
  // expected-error @+1 {{the forward is built from the tile level: run fa3-outline-hopper-kernels, fa3-tile{grid=true}, fa3-fuse-softmax and convert-fa3-tile-to-hopper first (as fa3-hopper-pipeline does)}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
}
