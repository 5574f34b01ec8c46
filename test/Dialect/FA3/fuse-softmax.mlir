// RUN: fa3-opt %s --fa3-select-schedule --fa3-tile --fa3-fuse-softmax | FileCheck %s

// Causal GQA: one loop over the key blocks left of the tile's last diagonal,
// carrying the f32 accumulator, the row max and the row sum.
// CHECK-LABEL: func.func @causal_gqa
// CHECK-SAME: (%[[Q:.+]]: tensor<2x?x8x64xf16>, %[[K:.+]]: tensor<2x?x2x64xf16>, %[[V:.+]]: tensor<2x?x2x64xf16>)
// CHECK: arith.ceildivui %[[SQ:.+]], %{{.+}} : index
// CHECK: %[[HKV:.+]] = arith.divui
// CHECK: %[[Q0:.+]] = arith.muli
// CHECK: %[[QT:.+]] = fa3.load_tile %[[Q]][%[[B:.+]], %[[Q0]], %[[H:.+]]] : tensor<2x?x8x64xf16> -> tensor<64x64xf16>
// CHECK-NOT: fa3.attention_block
// CHECK: %[[SK:.+]] = tensor.dim %[[K]], %{{.+}} : tensor<2x?x2x64xf16>
// CHECK: %[[OFF:.+]] = arith.subi %[[SK]], %[[SQ]] : index
// CHECK: %[[KHI:.+]] = arith.minsi %[[SK]], %{{.+}} : index
// CHECK: %[[LO:.+]] = arith.floordivsi %{{.+}}, %{{.+}} : index
// CHECK: %[[HI:.+]] = arith.ceildivsi %[[KHI]], %{{.+}} : index
// CHECK-DAG: %[[ACC0:.+]] = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
// CHECK-DAG: %[[MAX0:.+]] = arith.constant dense<0xFF800000> : tensor<64xf32>
// CHECK-DAG: %[[SUM0:.+]] = arith.constant dense<0.000000e+00> : tensor<64xf32>
// CHECK: %[[LOOP:.+]]:3 = scf.for %[[KB:.+]] = %[[LO]] to %[[HI]] step %{{.+}} iter_args(%[[ACC:.+]] = %[[ACC0]], %[[M:.+]] = %[[MAX0]], %[[L:.+]] = %[[SUM0]]) -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>) {
// CHECK: %[[K0:.+]] = arith.muli %[[KB]], %{{.+}} : index
// CHECK: %[[KT:.+]] = fa3.load_tile %[[K]][%[[B]], %[[K0]], %[[HKV]]] : tensor<2x?x2x64xf16> -> tensor<64x64xf16>
// CHECK: %[[VT:.+]] = fa3.load_tile %[[V]][%[[B]], %[[K0]], %[[HKV]]] : tensor<2x?x2x64xf16> -> tensor<64x64xf16>
// CHECK: %[[S:.+]] = fa3.qk %[[QT]], %[[KT]] : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
// CHECK-NOT: fa3.softcap
// CHECK: %[[TAIL:.+]] = arith.cmpi sgt, %[[KEND:.+]], %[[SK]] : index
// CHECK: %[[DIAG:.+]] = arith.cmpi sgt
// CHECK: %[[NEED:.+]] = arith.ori %[[TAIL]], %[[DIAG]] : i1
// CHECK: %[[SM:.+]] = scf.if %[[NEED]] -> (tensor<64x64xf32>) {
// CHECK:   %[[MS:.+]] = fa3.mask %[[S]], %[[Q0]], %[[K0]], %[[SQ]], %[[SK]] {causal} : tensor<64x64xf32>
// CHECK:   scf.yield %[[MS]] : tensor<64x64xf32>
// CHECK: } else {
// CHECK:   scf.yield %[[S]] : tensor<64x64xf32>
// CHECK: }
// CHECK: %[[P:.+]], %[[M1:.+]], %[[L1:.+]], %[[ALPHA:.+]] = fa3.online_softmax %[[SM]], %[[M]], %[[L]] {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
// CHECK: %[[ACC1:.+]] = fa3.rescale %[[ACC]], %[[ALPHA]] : tensor<64x64xf32>, tensor<64xf32>
// CHECK: %[[ACC2:.+]] = fa3.pv %[[P]], %[[VT]], %[[ACC1]] : tensor<64x64xf32>, tensor<64x64xf16>, tensor<64x64xf32>
// CHECK: scf.yield %[[ACC2]], %[[M1]], %[[L1]] : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>
// CHECK: }
// CHECK: %[[OT:.+]], %[[LT:.+]] = fa3.finalize %[[LOOP]]#0, %[[LOOP]]#1, %[[LOOP]]#2 {scale = 1.250000e-01 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf16>
// CHECK: fa3.store_tile %[[OT]] into %{{.+}}[%[[B]], %[[Q0]], %[[H]]] : tensor<64x64xf16> into tensor<2x?x8x64xf16>
// CHECK: fa3.store_stats %[[LT]] into %{{.+}}[%[[B]], %[[H]], %[[Q0]]] : tensor<64xf32> into tensor<2x8x?xf32>
func.func @causal_gqa(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// Neither causal nor a window: every key block is visited, and only a block
// that crosses the end of the keys is masked (the tail condition alone).
// CHECK-LABEL: func.func @non_causal
// CHECK-SAME: %[[K:[^:]+]]: tensor<1x?x4x128xbf16>, %{{[^:]+}}: tensor<1x?x4x128xbf16>)
// CHECK: %[[SK:.+]] = tensor.dim %[[K]], %{{.+}} : tensor<1x?x4x128xbf16>
// CHECK: %[[HI:.+]] = arith.ceildivsi %[[SK]], %{{.+}} : index
// CHECK: scf.for %[[KB:.+]] = %{{.+}} to %[[HI]] step %{{.+}} iter_args(%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) -> (tensor<64x128xf32>, tensor<64xf32>, tensor<64xf32>) {
// CHECK: %[[S:.+]] = fa3.qk {{.+}} : tensor<64x128xbf16>, tensor<64x128xbf16> -> tensor<64x64xf32>
// CHECK: %[[KEND:.+]] = arith.addi
// CHECK-NEXT: %[[TAIL:.+]] = arith.cmpi sgt, %[[KEND]], %[[SK]] : index
// CHECK-NEXT: %[[SM:.+]] = scf.if %[[TAIL]] -> (tensor<64x64xf32>) {
// CHECK-NEXT:   fa3.mask %[[S]], %{{.+}}, %{{.+}}, %{{.+}}, %[[SK]] : tensor<64x64xf32>
// CHECK: fa3.online_softmax %[[SM]], {{.+}} {exp2_scale = 0.127517432 : f32}
// CHECK: fa3.pv {{.+}} : tensor<64x64xf32>, tensor<64x128xbf16>, tensor<64x128xf32>
// CHECK: fa3.finalize {{.+}} {scale = 0.0883883461 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xbf16>
func.func @non_causal(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// A two-sided window with a softcap: the loop starts at the first block of
// the tile's window, the cap comes before the mask, and blocks are masked
// when they cross either window edge.
// CHECK-LABEL: func.func @window_softcap
// CHECK: %[[KLO:.+]] = arith.maxsi %{{.+}}, %{{.+}} : index
// CHECK: %[[LO:.+]] = arith.floordivsi %[[KLO]], %{{.+}} : index
// CHECK: scf.for %{{.+}} = %[[LO]] to %{{.+}} step
// CHECK: %[[S:.+]] = fa3.qk
// CHECK: %[[C:.+]] = fa3.softcap %[[S]] {scale = 0.176776692 : f32, softcap = 3.000000e+01 : f32} : tensor<64x64xf32>
// CHECK: %[[TAIL:.+]] = arith.cmpi sgt
// CHECK: %[[RIGHT:.+]] = arith.cmpi sgt
// CHECK: %[[OR1:.+]] = arith.ori %[[TAIL]], %[[RIGHT]] : i1
// CHECK: %[[LEFT:.+]] = arith.cmpi slt
// CHECK: %[[NEED:.+]] = arith.ori %[[OR1]], %[[LEFT]] : i1
// CHECK: scf.if %[[NEED]] -> (tensor<64x64xf32>) {
// CHECK: fa3.mask %[[C]], {{.+}} {window = array<i64: 128, 16>} : tensor<64x64xf32>
// CHECK: fa3.online_softmax {{.+}} {exp2_scale = 0.255034864 : f32}
func.func @window_softcap(%q: tensor<1x?x4x32xf32>, %k: tensor<1x?x4x32xf32>, %v: tensor<1x?x4x32xf32>) -> (tensor<1x?x4x32xf32>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: 128, 16>, softcap = 30.0 : f32} : (tensor<1x?x4x32xf32>, tensor<1x?x4x32xf32>, tensor<1x?x4x32xf32>) -> (tensor<1x?x4x32xf32>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x32xf32>, tensor<1x4x?xf32>
}

// Static Sq = Sk = 1000: still only 64-row tiles, never a 1000x1000 score
// matrix. Dv != D: the accumulator and the V tile have Dv columns.
// CHECK-LABEL: func.func @static_1000
// CHECK-NOT: 1000x1000
// CHECK: scf.for {{.+}} -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>) {
// CHECK-NOT: 1000x1000
// CHECK: fa3.qk {{.+}} : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
// CHECK-NOT: 1000x1000
// CHECK: fa3.pv {{.+}} : tensor<64x64xf32>, tensor<64x64xf16>, tensor<64x64xf32>
// CHECK-NOT: 1000x1000
// CHECK: fa3.finalize {{.+}} -> tensor<64x64xf16>
// CHECK-NOT: 1000x1000
// CHECK: return
func.func @static_1000(%q: tensor<1x1000x2x128xf16>, %k: tensor<1x1000x2x128xf16>, %v: tensor<1x1000x2x64xf16>) -> (tensor<1x1000x2x64xf16>, tensor<1x2x1000xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<1x1000x2x128xf16>, tensor<1x1000x2x128xf16>, tensor<1x1000x2x64xf16>) -> (tensor<1x1000x2x64xf16>, tensor<1x2x1000xf32>)
  return %o, %lse : tensor<1x1000x2x64xf16>, tensor<1x2x1000xf32>
}

// A hand-written schedule sets the tile shapes: 32 query rows, 16 keys.
// CHECK-LABEL: func.func @small_tiles
// CHECK: scf.for {{.+}} -> (tensor<32x64xf32>, tensor<32xf32>, tensor<32xf32>) {
// CHECK: fa3.load_tile {{.+}} -> tensor<16x64xf32>
// CHECK: fa3.qk {{.+}} : tensor<32x64xf32>, tensor<16x64xf32> -> tensor<32x16xf32>
func.func @small_tiles(%q: tensor<1x?x1x64xf32>, %k: tensor<1x?x1x64xf32>, %v: tensor<1x?x1x64xf32>) -> (tensor<1x?x1x64xf32>, tensor<1x1x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, schedule = #fa3.schedule<block_m = 32, block_n = 16, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x1x64xf32>, tensor<1x?x1x64xf32>, tensor<1x?x1x64xf32>) -> (tensor<1x?x1x64xf32>, tensor<1x1x?xf32>)
  return %o, %lse : tensor<1x?x1x64xf32>, tensor<1x1x?xf32>
}

// FP8: the key loop keeps the e4m3 tiles; S is raw products of quantized
// values, so the softcap and the softmax take q_descale · k_descale, P is
// rounded to e4m3 after · 2^8 (probs_scale), and fa3.finalize applies the
// same descale to the LSE and v_descale to O (bf16).
// CHECK-LABEL: func.func @fp8_softcap
// CHECK-SAME: (%[[Q:.+]]: tensor<2x?x4x128xf8E4M3FN>, %[[K:.+]]: tensor<2x?x2x128xf8E4M3FN>, %[[V:.+]]: tensor<2x?x2x128xf8E4M3FN>, %[[QD:.+]]: tensor<2x2xf32>, %[[KD:.+]]: tensor<2x2xf32>, %[[VD:.+]]: tensor<2x2xf32>)
// CHECK: %[[QT:.+]] = fa3.load_tile %[[Q]]{{.+}} -> tensor<64x128xf8E4M3FN>
// CHECK-DAG: %[[KDS:.+]] = tensor.extract %[[KD]]
// CHECK-DAG: %[[QDS:.+]] = tensor.extract %[[QD]]
// CHECK: %[[QK:.+]] = arith.mulf %[[QDS]], %[[KDS]] : f32
// CHECK: %[[VDS:.+]] = tensor.extract %[[VD]]
// CHECK: scf.for
// CHECK: %[[KT:.+]] = fa3.load_tile %[[K]]{{.+}} -> tensor<64x128xf8E4M3FN>
// CHECK: %[[VT:.+]] = fa3.load_tile %[[V]]{{.+}} -> tensor<64x128xf8E4M3FN>
// CHECK: %[[S:.+]] = fa3.qk %[[QT]], %[[KT]] : tensor<64x128xf8E4M3FN>, tensor<64x128xf8E4M3FN> -> tensor<64x64xf32>
// CHECK: fa3.softcap %[[S]] descale %[[QK]] {scale = 0.0883883461 : f32, softcap = 5.000000e+00 : f32}
// CHECK: fa3.online_softmax %{{.+}}, %{{.+}}, %{{.+}} descale %[[QK]] {exp2_scale = 0.127517432 : f32}
// CHECK: fa3.pv %{{.+}}, %[[VT]], %{{.+}} {probs_scale = 2.560000e+02 : f32} : tensor<64x64xf32>, tensor<64x128xf8E4M3FN>, tensor<64x128xf32>
// CHECK: fa3.finalize %{{.+}}, %{{.+}}, %{{.+}} descale(%[[QK]], %[[VDS]]) {scale = 0.0883883461 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xbf16>
func.func @fp8_softcap(%q: tensor<2x?x4x128xf8E4M3FN>, %k: tensor<2x?x2x128xf8E4M3FN>, %v: tensor<2x?x2x128xf8E4M3FN>, %qd: tensor<2x2xf32>, %kd: tensor<2x2xf32>, %vd: tensor<2x2xf32>) -> (tensor<2x?x4x128xbf16>, tensor<2x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {causal, softcap = 5.0 : f32} : (tensor<2x?x4x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> (tensor<2x?x4x128xbf16>, tensor<2x4x?xf32>)
  return %o, %lse : tensor<2x?x4x128xbf16>, tensor<2x4x?xf32>
}
