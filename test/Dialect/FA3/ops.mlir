// RUN: fa3-opt %s | fa3-opt | FileCheck %s
// RUN: fa3-opt %s --mlir-print-op-generic | fa3-opt | FileCheck %s
// RUN: fa3-opt %s --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

//===----------------------------------------------------------------------===//
// Tensor level
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @attention_causal_gqa
// CHECK-SAME: (%[[Q:.+]]: tensor<2x?x8x64xf16>, %[[K:.+]]: tensor<2x?x2x64xf16>, %[[V:.+]]: tensor<2x?x2x64xf16>)
// CHECK: %[[O:.+]], %[[LSE:.+]] = fa3.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 1.250000e-01 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
// CHECK: return %[[O]], %[[LSE]]
// GENERIC-LABEL: "func.func"
// GENERIC: %{{.+}}:2 = "fa3.attention"(%{{.+}}, %{{.+}}, %{{.+}}) <{causal, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>, scale = 1.250000e-01 : f32}> : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
func.func @attention_causal_gqa(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// The scale is optional (1/sqrt(D) when absent); everything may be dynamic
// except the head counts and head dims.
// CHECK-LABEL: func.func @attention_defaults
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} : (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>)
func.func @attention_defaults(%q: tensor<?x?x4x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>
}

// CHECK-LABEL: func.func @attention_window_softcap
// CHECK: fa3.attention
// CHECK-SAME: softcap = 3.000000e+01 : f32
// CHECK-SAME: window = array<i64: 128, 0>
// CHECK-SAME: (tensor<1x256x16x64xbf16>, tensor<1x512x16x64xbf16>, tensor<1x512x16x64xbf16>) -> (tensor<1x256x16x64xbf16>, tensor<1x16x256xf32>)
func.func @attention_window_softcap(%q: tensor<1x256x16x64xbf16>, %k: tensor<1x512x16x64xbf16>, %v: tensor<1x512x16x64xbf16>) -> (tensor<1x256x16x64xbf16>, tensor<1x16x256xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: 128, 0>, softcap = 30.0 : f32} : (tensor<1x256x16x64xbf16>, tensor<1x512x16x64xbf16>, tensor<1x512x16x64xbf16>) -> (tensor<1x256x16x64xbf16>, tensor<1x16x256xf32>)
  return %o, %lse : tensor<1x256x16x64xbf16>, tensor<1x16x256xf32>
}

// A one-sided window: unbounded on the left, 64 keys to the right.
// CHECK-LABEL: func.func @attention_window_right
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {window = array<i64: -1, 64>}
func.func @attention_window_right(%q: tensor<1x?x2x32xf32>, %k: tensor<1x?x2x32xf32>, %v: tensor<1x?x2x32xf32>) -> (tensor<1x?x2x32xf32>, tensor<1x2x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: -1, 64>} : (tensor<1x?x2x32xf32>, tensor<1x?x2x32xf32>, tensor<1x?x2x32xf32>) -> (tensor<1x?x2x32xf32>, tensor<1x2x?xf32>)
  return %o, %lse : tensor<1x?x2x32xf32>, tensor<1x2x?xf32>
}

// CHECK-LABEL: func.func @attention_schedule
// CHECK: fa3.attention
// CHECK-SAME: schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>
func.func @attention_schedule(%q: tensor<4x?x32x128xf16>, %k: tensor<4x?x8x128xf16>, %v: tensor<4x?x8x128xf16>) -> (tensor<4x?x32x128xf16>, tensor<4x32x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} : (tensor<4x?x32x128xf16>, tensor<4x?x8x128xf16>, tensor<4x?x8x128xf16>) -> (tensor<4x?x32x128xf16>, tensor<4x32x?xf32>)
  return %o, %lse : tensor<4x?x32x128xf16>, tensor<4x32x?xf32>
}

// The largest head dim, in f32 (the reference precision).
// CHECK-LABEL: func.func @attention_f32_d256
// CHECK: fa3.attention {{.+}} : (tensor<1x?x1x256xf32>, tensor<1x?x1x256xf32>, tensor<1x?x1x256xf32>) -> (tensor<1x?x1x256xf32>, tensor<1x1x?xf32>)
func.func @attention_f32_d256(%q: tensor<1x?x1x256xf32>, %k: tensor<1x?x1x256xf32>, %v: tensor<1x?x1x256xf32>) -> (tensor<1x?x1x256xf32>, tensor<1x1x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {scale = 0.0625 : f32} : (tensor<1x?x1x256xf32>, tensor<1x?x1x256xf32>, tensor<1x?x1x256xf32>) -> (tensor<1x?x1x256xf32>, tensor<1x1x?xf32>)
  return %o, %lse : tensor<1x?x1x256xf32>, tensor<1x1x?xf32>
}

// The value head dim may differ from the query/key one (as in MLA).
// CHECK-LABEL: func.func @attention_dv_ne_d
// CHECK: fa3.attention {{.+}} : (tensor<2x?x4x192xbf16>, tensor<2x?x4x192xbf16>, tensor<2x?x4x128xbf16>) -> (tensor<2x?x4x128xbf16>, tensor<2x4x?xf32>)
func.func @attention_dv_ne_d(%q: tensor<2x?x4x192xbf16>, %k: tensor<2x?x4x192xbf16>, %v: tensor<2x?x4x128xbf16>) -> (tensor<2x?x4x128xbf16>, tensor<2x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<2x?x4x192xbf16>, tensor<2x?x4x192xbf16>, tensor<2x?x4x128xbf16>) -> (tensor<2x?x4x128xbf16>, tensor<2x4x?xf32>)
  return %o, %lse : tensor<2x?x4x128xbf16>, tensor<2x4x?xf32>
}

// CHECK-LABEL: func.func @attention_grad
// CHECK-SAME: (%[[DO:.+]]: tensor<2x?x8x64xbf16>, %[[Q:.+]]: tensor<2x?x8x64xbf16>, %[[K:.+]]: tensor<2x?x2x64xbf16>, %[[V:.+]]: tensor<2x?x2x64xbf16>, %[[O:.+]]: tensor<2x?x8x64xbf16>, %[[LSE:.+]]: tensor<2x8x?xf32>)
// CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = fa3.attention_grad %[[DO]], %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]] {causal} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
// CHECK: return %[[DQ]], %[[DK]], %[[DV]]
func.func @attention_grad(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>
}

// A schedule attribute on its own, outside any op, with every option set.
// CHECK-LABEL: func.func @schedule_attr
// CHECK: fa3.schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = true, persistent = true, cluster = 2>
func.func @schedule_attr() attributes {fa3.schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = true, persistent = true, cluster = 2>} {
  return
}

//===----------------------------------------------------------------------===//
// Tile level
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @tile_io
// CHECK-SAME: (%[[Q:.+]]: tensor<2x?x8x64xf16>, %[[O:.+]]: tensor<2x?x8x64xf16>, %[[LSE:.+]]: tensor<2x8x?xf32>, %[[B:.+]]: index, %[[ROW:.+]]: index, %[[H:.+]]: index)
// CHECK: %[[T:.+]] = fa3.load_tile %[[Q]][%[[B]], %[[ROW]], %[[H]]] : tensor<2x?x8x64xf16> -> tensor<128x64xf16>
// CHECK: %[[O1:.+]] = fa3.store_tile %[[T]] into %[[O]][%[[B]], %[[ROW]], %[[H]]] : tensor<128x64xf16> into tensor<2x?x8x64xf16>
// CHECK: %[[L:.+]] = fa3.load_stats %[[LSE]][%[[B]], %[[H]], %[[ROW]]] : tensor<2x8x?xf32> -> tensor<128xf32>
// CHECK: %[[LSE1:.+]] = fa3.store_stats %[[L]] into %[[LSE]][%[[B]], %[[H]], %[[ROW]]] : tensor<128xf32> into tensor<2x8x?xf32>
// CHECK: return %[[O1]], %[[LSE1]]
func.func @tile_io(%q: tensor<2x?x8x64xf16>, %o: tensor<2x?x8x64xf16>, %lse: tensor<2x8x?xf32>, %b: index, %row: index, %h: index) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %t = fa3.load_tile %q[%b, %row, %h] : tensor<2x?x8x64xf16> -> tensor<128x64xf16>
  %o1 = fa3.store_tile %t into %o[%b, %row, %h] : tensor<128x64xf16> into tensor<2x?x8x64xf16>
  %l = fa3.load_stats %lse[%b, %h, %row] : tensor<2x8x?xf32> -> tensor<128xf32>
  %lse1 = fa3.store_stats %l into %lse[%b, %h, %row] : tensor<128xf32> into tensor<2x8x?xf32>
  return %o1, %lse1 : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// CHECK-LABEL: func.func @attention_block
// CHECK-SAME: (%[[QT:.+]]: tensor<64x64xf16>, %[[K:.+]]: tensor<2x?x2x64xf16>, %[[V:.+]]: tensor<2x?x2x64xf16>, %[[B:.+]]: index, %[[HKV:.+]]: index, %[[Q0:.+]]: index, %[[SQ:.+]]: index)
// CHECK: %[[OT:.+]], %[[LT:.+]] = fa3.attention_block %[[QT]], %[[K]], %[[V]], %[[B]], %[[HKV]], %[[Q0]], %[[SQ]]
// CHECK-SAME: causal
// CHECK-SAME: scale = 1.250000e-01 : f32
// CHECK-SAME: schedule = #fa3.schedule<block_m = 64, block_n = 64,
// CHECK-SAME: softcap = 5.000000e+01 : f32
// CHECK-SAME: window = array<i64: 256, 0>
// CHECK-SAME: : tensor<64x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16> -> tensor<64x64xf16>, tensor<64xf32>
// CHECK: return %[[OT]], %[[LT]]
func.func @attention_block(%qt: tensor<64x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>, %b: index, %hkv: index, %q0: index, %sq: index) -> (tensor<64x64xf16>, tensor<64xf32>) {
  %o, %lse = fa3.attention_block %qt, %k, %v, %b, %hkv, %q0, %sq {causal, scale = 1.250000e-01 : f32, window = array<i64: 256, 0>, softcap = 50.0 : f32, schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : tensor<64x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16> -> tensor<64x64xf16>, tensor<64xf32>
  return %o, %lse : tensor<64x64xf16>, tensor<64xf32>
}

// One step of the online softmax, in the order fa3-fuse-softmax emits it.
// CHECK-LABEL: func.func @softmax_steps
// CHECK-SAME: (%[[QT:.+]]: tensor<64x128xbf16>, %[[KT:.+]]: tensor<32x128xbf16>, %[[VT:.+]]: tensor<32x64xbf16>, %[[ACC:.+]]: tensor<64x64xf32>, %[[M:.+]]: tensor<64xf32>, %[[L:.+]]: tensor<64xf32>, %[[Q0:.+]]: index, %[[K0:.+]]: index, %[[SQ:.+]]: index, %[[SK:.+]]: index)
// CHECK: %[[S:.+]] = fa3.qk %[[QT]], %[[KT]] : tensor<64x128xbf16>, tensor<32x128xbf16> -> tensor<64x32xf32>
// CHECK: %[[C:.+]] = fa3.softcap %[[S]] {scale = 0.0883883461 : f32, softcap = 3.000000e+01 : f32} : tensor<64x32xf32>
// CHECK: %[[MS:.+]] = fa3.mask %[[C]], %[[Q0]], %[[K0]], %[[SQ]], %[[SK]] {causal, window = array<i64: 512, 0>} : tensor<64x32xf32>
// CHECK: %[[P:.+]], %[[M1:.+]], %[[L1:.+]], %[[ALPHA:.+]] = fa3.online_softmax %[[MS]], %[[M]], %[[L]] {exp2_scale = 0.127517432 : f32} : tensor<64x32xf32>, tensor<64xf32>
// CHECK: %[[A1:.+]] = fa3.rescale %[[ACC]], %[[ALPHA]] : tensor<64x64xf32>, tensor<64xf32>
// CHECK: %[[A2:.+]] = fa3.pv %[[P]], %[[VT]], %[[A1]] : tensor<64x32xf32>, tensor<32x64xbf16>, tensor<64x64xf32>
// CHECK: %[[O:.+]], %[[LSE:.+]] = fa3.finalize %[[A2]], %[[M1]], %[[L1]] {scale = 0.0883883461 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
// CHECK: return %[[O]], %[[LSE]]
func.func @softmax_steps(%qt: tensor<64x128xbf16>, %kt: tensor<32x128xbf16>, %vt: tensor<32x64xbf16>, %acc: tensor<64x64xf32>, %m: tensor<64xf32>, %l: tensor<64xf32>, %q0: index, %k0: index, %sq: index, %sk: index) -> (tensor<64x64xbf16>, tensor<64xf32>) {
  %s = fa3.qk %qt, %kt : tensor<64x128xbf16>, tensor<32x128xbf16> -> tensor<64x32xf32>
  %c = fa3.softcap %s {scale = 0.0883883461 : f32, softcap = 30.0 : f32} : tensor<64x32xf32>
  %ms = fa3.mask %c, %q0, %k0, %sq, %sk {causal, window = array<i64: 512, 0>} : tensor<64x32xf32>
  %p, %m1, %l1, %alpha = fa3.online_softmax %ms, %m, %l {exp2_scale = 0.127517432 : f32} : tensor<64x32xf32>, tensor<64xf32>
  %a1 = fa3.rescale %acc, %alpha : tensor<64x64xf32>, tensor<64xf32>
  %a2 = fa3.pv %p, %vt, %a1 : tensor<64x32xf32>, tensor<32x64xbf16>, tensor<64x64xf32>
  %o, %lse = fa3.finalize %a2, %m1, %l1 {scale = 0.0883883461 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
  return %o, %lse : tensor<64x64xbf16>, tensor<64xf32>
}

// A mask with neither causal nor window hides only the columns past Sk.
// CHECK-LABEL: func.func @mask_tail_only
// CHECK: fa3.mask %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} : tensor<16x16xf32>
func.func @mask_tail_only(%s: tensor<16x16xf32>, %i: index) -> tensor<16x16xf32> {
  %m = fa3.mask %s, %i, %i, %i, %i : tensor<16x16xf32>
  return %m : tensor<16x16xf32>
}

// The FP8 casting ops and attribute round-trip.
// CHECK-LABEL: func.func @fp8_casting
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {causal, fp8 = #fa3.fp8<hadamard = true, seed = 5>}
// CHECK: fa3.hadamard %{{.+}} {seed = -3 : i64} : tensor<?x?x8x128xbf16> -> tensor<?x?x8x128xf32>
// CHECK: fa3.quantize %{{.+}} : tensor<?x?x8x128xf32> -> tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>
// CHECK: fa3.quantize %{{.+}} {hadamard_seed = 7 : i64} : tensor<?x?x8x128xbf16>
// CHECK: fa3.pv %{{.+}}, %{{.+}}, %{{.+}} {probs_scale = 2.560000e+02 : f32}
// GENERIC: sym_name = "fp8_casting"
// GENERIC: "fa3.hadamard"(%{{.+}}) <{seed = -3 : i64}>
// GENERIC: "fa3.quantize"(%{{.+}})
func.func @fp8_casting(%q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x2x128xbf16>, %p: tensor<64x64xf32>, %vt: tensor<64x128xf32>, %acc: tensor<64x128xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>, tensor<64x128xf32>) {
  %o, %lse = fa3.attention %q, %k, %k {causal, fp8 = #fa3.fp8<hadamard = true, seed = 5>} : (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
  %h = fa3.hadamard %q {seed = -3 : i64} : tensor<?x?x8x128xbf16> -> tensor<?x?x8x128xf32>
  %q8, %qd = fa3.quantize %h : tensor<?x?x8x128xf32> -> tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>
  %qf8, %qfd = fa3.quantize %q {hadamard_seed = 7 : i64} : tensor<?x?x8x128xbf16> -> tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>
  %a = fa3.pv %p, %vt, %acc {probs_scale = 256.0 : f32} : tensor<64x64xf32>, tensor<64x128xf32>, tensor<64x128xf32>
  return %o, %q8, %qd, %a : tensor<?x?x8x128xbf16>, tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>, tensor<64x128xf32>
}
