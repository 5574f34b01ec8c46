// RUN: fa3-opt %s | fa3-opt | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: fa3-opt %s --fa3-select-schedule --fa3-tile | FileCheck %s --check-prefix=TILE
// RUN: fa3-opt %s --fa3-select-schedule --fa3-tile --fa3-fuse-softmax | FileCheck %s --check-prefix=FUSED

// Attention dropout: the forward and backward take the Philox (seed, offset)
// as an rng operand; fa3-tile hands it to each query tile with the tile's
// stream (batch · Hq + query head), fa3-fuse-softmax drops the probabilities
// of each key block between the online softmax (whose row sum, and so the
// LSE, is that of the undropped P) and P V.

// ROUNDTRIP-LABEL: func.func @forward
// ROUNDTRIP: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} rng(%{{.+}}) {causal, dropout = 1.000000e-01 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>, tensor<2xi64>)

// TILE-LABEL: func.func @forward
// TILE-SAME: %[[RNG:[^:]+]]: tensor<2xi64>)
// TILE: scf.for %[[B:[^ ]+]] =
// TILE: scf.for %[[H:[^ ]+]] =
// TILE: %[[BH:.+]] = arith.muli %[[B]], %[[C8:.+]] : index
// TILE: %[[STREAM:.+]] = arith.addi %[[BH]], %[[H]] : index
// TILE: fa3.attention_block {{.+}} dropout(%[[RNG]], %[[STREAM]]) {causal, dropout = 1.000000e-01 : f32, {{.+}}} : tensor<64x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>, tensor<2xi64> -> tensor<64x64xf16>, tensor<64xf32>

// FUSED-LABEL: func.func @forward
// FUSED-SAME: %[[RNG:[^:]+]]: tensor<2xi64>)
// FUSED-DAG: %[[Q0:.+]] = arith.muli %{{.+}}, %c64{{.*}} : index
// FUSED-DAG: %[[STREAM:.+]] = arith.addi %{{.+}}, %{{.+}} : index
// FUSED: scf.for %[[KB:.+]] = {{.+}} iter_args
// FUSED: %[[K0:.+]] = arith.muli %[[KB]], %{{.+}} : index
// FUSED: %[[P:.+]], %{{.+}}, %[[L1:.+]], %[[ALPHA:.+]] = fa3.online_softmax
// FUSED: %[[ACC:.+]] = fa3.rescale %{{.+}}, %[[ALPHA]]
// FUSED: %[[PD:.+]] = fa3.dropout %[[P]], %[[RNG]], %[[STREAM]], %[[Q0]], %[[K0]] {p = 1.000000e-01 : f32} : tensor<64x64xf32>, tensor<2xi64>
// FUSED: fa3.pv %[[PD]], %{{.+}}, %[[ACC]]
// FUSED: scf.yield %{{.+}}, %{{.+}}, %[[L1]]
// FUSED: fa3.finalize
func.func @forward(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>, %rng: tensor<2xi64>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {causal, dropout = 0.1 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>, tensor<2xi64>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// The backward regenerates the mask of each (query tile, key tile) pair:
// it scales P where P meets dO (dV += (P ∘ Z)ᵀ dO) and dP = dO Vᵀ before
// the softmax gradient, which multiplies by the undropped P.
// ROUNDTRIP-LABEL: func.func @backward
// ROUNDTRIP: fa3.attention_grad %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} rng(%{{.+}}) {dropout = 2.500000e-01 : f32} : ({{.+}}, tensor<1x4x?xf32>, tensor<2xi64>)

// TILE-LABEL: func.func @backward
// TILE-SAME: %[[RNG:[^:]+]]: tensor<2xi64>)
// TILE: %[[S:.+]] = fa3.qk
// TILE: %[[P:.+]] = fa3.recompute_probs
// TILE: %[[PD:.+]] = fa3.dropout %[[P]], %[[RNG]], %[[STREAM:[^,]+]], %[[Q0:[^,]+]], %[[K0:[^ ]+]] {p = 2.500000e-01 : f32}
// TILE: %[[DV:.+]] = fa3.mma_tn %[[PD]],
// TILE: %[[DP:.+]] = fa3.qk
// TILE: %[[DPD:.+]] = fa3.dropout %[[DP]], %[[RNG]], %[[STREAM]], %[[Q0]], %[[K0]] {p = 2.500000e-01 : f32}
// TILE: fa3.softmax_grad %[[P]], %[[DPD]],
func.func @backward(%do: tensor<1x?x4x64xf32>, %q: tensor<1x?x4x64xf32>, %k: tensor<1x?x4x64xf32>, %v: tensor<1x?x4x64xf32>, %o: tensor<1x?x4x64xf32>, %lse: tensor<1x4x?xf32>, %dlse: tensor<1x4x?xf32>, %rng: tensor<2xi64>) -> (tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse, %dlse rng(%rng) {dropout = 0.25 : f32} : (tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>, tensor<1x4x?xf32>, tensor<1x4x?xf32>, tensor<2xi64>) -> (tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>)
  return %dq, %dk, %dv : tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>
}

// ROUNDTRIP-LABEL: func.func @tile_op
// ROUNDTRIP: fa3.dropout %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {p = 5.000000e-01 : f32} : tensor<64x32xf32>, tensor<2xi64>
func.func @tile_op(%p: tensor<64x32xf32>, %rng: tensor<2xi64>, %s: index, %q0: index, %k0: index) -> tensor<64x32xf32> {
  %d = fa3.dropout %p, %rng, %s, %q0, %k0 {p = 0.5 : f32} : tensor<64x32xf32>, tensor<2xi64>
  return %d : tensor<64x32xf32>
}
