// RUN: fa3-opt %s -split-input-file --fa3-cast-fp8 | FileCheck %s
// RUN: fa3-opt %s -split-input-file --fa3-cast-fp8="all=true hadamard=true seed=9" | FileCheck %s --check-prefix=ALL
// RUN: fa3-opt %s -split-input-file --fa3-cpu-pipeline | FileCheck %s --check-prefix=LOWERED

// With Hadamard: Q and K are quantized after the transform with the
// attribute's seed (fa3.hadamard folded into fa3.quantize), all three per
// (batch, kv head), and the FP8 attention keeps the masking attributes but
// not the bf16 schedule.
// CHECK-LABEL: func.func @hadamard
// CHECK-SAME: (%[[Q:.+]]: tensor<?x?x8x128xbf16>, %[[K:.+]]: tensor<?x?x2x128xbf16>, %[[V:.+]]: tensor<?x?x2x128xbf16>)
// CHECK-NOT: fa3.hadamard
// CHECK: %[[Q8:.+]], %[[QD:.+]] = fa3.quantize %[[Q]] {hadamard_seed = 42 : i64} : tensor<?x?x8x128xbf16> -> tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>
// CHECK: %[[K8:.+]], %[[KD:.+]] = fa3.quantize %[[K]] {hadamard_seed = 42 : i64} : tensor<?x?x2x128xbf16> -> tensor<?x?x2x128xf8E4M3FN>, tensor<?x2xf32>
// CHECK: %[[V8:.+]], %[[VD:.+]] = fa3.quantize %[[V]] : tensor<?x?x2x128xbf16> -> tensor<?x?x2x128xf8E4M3FN>, tensor<?x2xf32>
// CHECK: %[[O:.+]], %[[LSE:.+]] = fa3.attention %[[Q8]], %[[K8]], %[[V8]], %[[QD]], %[[KD]], %[[VD]] {causal, scale = 1.250000e-01 : f32, window = array<i64: 256, 0>}
// CHECK-SAME: -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
// CHECK: return %[[O]], %[[LSE]]
// ALL-LABEL: func.func @hadamard
// ALL: fa3.quantize %{{.+}} {hadamard_seed = 42 : i64}
// LOWERED-LABEL: llvm.func @hadamard
// LOWERED-NOT: fa3.
func.func @hadamard(%q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, scale = 0.125 : f32, window = array<i64: 256, 0>, fp8 = #fa3.fp8<hadamard = true, seed = 42>, schedule = #fa3.schedule<block_m = 128, block_n = 80, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>
}

// -----

// Without Hadamard the inputs go straight to fa3.quantize; an attention
// without the attribute is left alone unless `all` is set.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: fa3.hadamard
// CHECK: fa3.quantize %{{.+}} : tensor<2x?x4x64xbf16> -> tensor<2x?x4x64xf8E4M3FN>, tensor<2x4xf32>
// CHECK: fa3.quantize
// CHECK: fa3.quantize
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} :
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} : (tensor<2x?x4x64xbf16>
// ALL-LABEL: func.func @plain
// ALL-NOT: hadamard_seed
// ALL: fa3.quantize
// ALL: fa3.quantize %{{.+}} {hadamard_seed = 9 : i64} : tensor<2x?x4x64xbf16>
// ALL: fa3.quantize %{{.+}} {hadamard_seed = 9 : i64} : tensor<2x?x4x64xbf16>
func.func @plain(%q: tensor<2x?x4x64xbf16>) -> (tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>) {
  %o, %lse = fa3.attention %q, %q, %q {fp8 = #fa3.fp8<hadamard = false>} : (tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>) -> (tensor<2x?x4x64xbf16>, tensor<2x4x?xf32>)
  %o2, %lse2 = fa3.attention %q, %q, %q : (tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>) -> (tensor<2x?x4x64xbf16>, tensor<2x4x?xf32>)
  return %o, %o2 : tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>
}

// -----

// A chain written by hand folds too, unless the transform is rounded
// (bf16 result) or used elsewhere.
// CHECK-LABEL: func.func @chains
// CHECK: fa3.quantize %arg0 {hadamard_seed = 3 : i64} : tensor<1x?x2x64xbf16>
// CHECK: %[[ROUNDED:.+]] = fa3.hadamard %arg0 {seed = 4 : i64} : tensor<1x?x2x64xbf16> -> tensor<1x?x2x64xbf16>
// CHECK: fa3.quantize %[[ROUNDED]] : tensor<1x?x2x64xbf16>
// CHECK: %[[SHARED:.+]] = fa3.hadamard %arg0 {seed = 5 : i64} : tensor<1x?x2x64xbf16> -> tensor<1x?x2x64xf32>
// CHECK: fa3.quantize %[[SHARED]] : tensor<1x?x2x64xf32>
// CHECK: return {{.+}}, %[[SHARED]]
func.func @chains(%x: tensor<1x?x2x64xbf16>) -> (tensor<1x?x2x64xf8E4M3FN>, tensor<1x?x2x64xf8E4M3FN>, tensor<1x?x2x64xf8E4M3FN>, tensor<1x?x2x64xf32>) {
  %h = fa3.hadamard %x {seed = 3 : i64} : tensor<1x?x2x64xbf16> -> tensor<1x?x2x64xf32>
  %a, %ad = fa3.quantize %h : tensor<1x?x2x64xf32> -> tensor<1x?x2x64xf8E4M3FN>, tensor<1x1xf32>
  %r = fa3.hadamard %x {seed = 4 : i64} : tensor<1x?x2x64xbf16> -> tensor<1x?x2x64xbf16>
  %b, %bd = fa3.quantize %r : tensor<1x?x2x64xbf16> -> tensor<1x?x2x64xf8E4M3FN>, tensor<1x1xf32>
  %s = fa3.hadamard %x {seed = 5 : i64} : tensor<1x?x2x64xbf16> -> tensor<1x?x2x64xf32>
  %c, %cd = fa3.quantize %s : tensor<1x?x2x64xf32> -> tensor<1x?x2x64xf8E4M3FN>, tensor<1x1xf32>
  return %a, %b, %c, %s : tensor<1x?x2x64xf8E4M3FN>, tensor<1x?x2x64xf8E4M3FN>, tensor<1x?x2x64xf8E4M3FN>, tensor<1x?x2x64xf32>
}
