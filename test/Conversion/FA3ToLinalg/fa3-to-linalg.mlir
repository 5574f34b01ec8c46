// RUN: split-file %s %t
// RUN: fa3-opt %t/tiles.mlir --convert-fa3-to-linalg | FileCheck %s
// RUN: fa3-opt %t/tiles.mlir --convert-fa3-to-linalg | FileCheck %s --check-prefix=NOFA3
// RUN: not fa3-opt %t/untiled.mlir --convert-fa3-to-linalg 2>&1 | FileCheck %s --check-prefix=UNTILED

//--- tiles.mlir

// Every tile op is lowered.
// NOFA3-NOT: fa3.

// CHECK-DAG: #[[$MAP_QK_Q:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[$MAP_QK_K:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[$MAP_ACC:.+]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[$MAP_PV_V:.+]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-DAG: #[[$MAP_ID2:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$MAP_ROW:.+]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG: #[[$MAP_ID1:.+]] = affine_map<(d0) -> (d0)>

// A load keeps the rows inside the sequence, clamp(S - row, 0, R) of them,
// and zero-fills the rest of the tile.
// CHECK-LABEL: func.func @load_tile
// CHECK-SAME: (%[[Q:.+]]: tensor<2x?x8x64xf16>, %[[B:.+]]: index, %[[ROW:.+]]: index, %[[H:.+]]: index)
// CHECK: %[[S:.+]] = tensor.dim %[[Q]], %{{.+}} : tensor<2x?x8x64xf16>
// CHECK: %[[LEFT:.+]] = arith.subi %[[S]], %[[ROW]] : index
// CHECK: %[[UP:.+]] = arith.minsi %[[LEFT]], %{{.+}} : index
// CHECK: %[[N:.+]] = arith.maxsi %[[UP]], %{{.+}} : index
// CHECK: %[[START:.+]] = arith.minsi %[[ROW]], %[[S]] : index
// CHECK: %[[SLICE:.+]] = tensor.extract_slice %[[Q]][%[[B]], %[[START]], %[[H]], 0] [1, %[[N]], 1, 64] [1, 1, 1, 1] : tensor<2x?x8x64xf16> to tensor<?x64xf16>
// CHECK: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f16
// CHECK: %[[FILL:.+]] = linalg.fill ins(%[[ZERO]] : f16) outs(%{{.+}} : tensor<32x64xf16>) -> tensor<32x64xf16>
// CHECK: %[[TILE:.+]] = tensor.insert_slice %[[SLICE]] into %[[FILL]][0, 0] [%[[N]], 64] [1, 1] : tensor<?x64xf16> into tensor<32x64xf16>
// CHECK: return %[[TILE]]
func.func @load_tile(%q: tensor<2x?x8x64xf16>, %b: index, %row: index, %h: index) -> tensor<32x64xf16> {
  %t = fa3.load_tile %q[%b, %row, %h] : tensor<2x?x8x64xf16> -> tensor<32x64xf16>
  return %t : tensor<32x64xf16>
}

// A store writes only the rows inside the sequence.
// CHECK-LABEL: func.func @store_tile
// CHECK-SAME: (%[[T:.+]]: tensor<32x64xf16>, %[[O:.+]]: tensor<2x?x8x64xf16>, %[[B:.+]]: index, %[[ROW:.+]]: index, %[[H:.+]]: index)
// CHECK: %[[N:.+]] = arith.maxsi
// CHECK: %[[START:.+]] = arith.minsi %[[ROW]], %{{.+}} : index
// CHECK: %[[PART:.+]] = tensor.extract_slice %[[T]][0, 0] [%[[N]], 64] [1, 1] : tensor<32x64xf16> to tensor<?x64xf16>
// CHECK: %[[R:.+]] = tensor.insert_slice %[[PART]] into %[[O]][%[[B]], %[[START]], %[[H]], 0] [1, %[[N]], 1, 64] [1, 1, 1, 1] : tensor<?x64xf16> into tensor<2x?x8x64xf16>
// CHECK: return %[[R]]
func.func @store_tile(%t: tensor<32x64xf16>, %o: tensor<2x?x8x64xf16>, %b: index, %row: index, %h: index) -> tensor<2x?x8x64xf16> {
  %o1 = fa3.store_tile %t into %o[%b, %row, %h] : tensor<32x64xf16> into tensor<2x?x8x64xf16>
  return %o1 : tensor<2x?x8x64xf16>
}

// CHECK-LABEL: func.func @load_stats
// CHECK-SAME: (%[[LSE:.+]]: tensor<2x8x?xf32>, %[[B:.+]]: index, %[[H:.+]]: index, %[[ROW:.+]]: index)
// CHECK: %[[S:.+]] = tensor.dim %[[LSE]], %{{.+}} : tensor<2x8x?xf32>
// CHECK: %[[N:.+]] = arith.maxsi
// CHECK: %[[START:.+]] = arith.minsi %[[ROW]], %[[S]] : index
// CHECK: %[[SLICE:.+]] = tensor.extract_slice %[[LSE]][%[[B]], %[[H]], %[[START]]] [1, 1, %[[N]]] [1, 1, 1] : tensor<2x8x?xf32> to tensor<?xf32>
// CHECK: %[[FILL:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<32xf32>) -> tensor<32xf32>
// CHECK: tensor.insert_slice %[[SLICE]] into %[[FILL]][0] [%[[N]]] [1] : tensor<?xf32> into tensor<32xf32>
func.func @load_stats(%lse: tensor<2x8x?xf32>, %b: index, %h: index, %row: index) -> tensor<32xf32> {
  %l = fa3.load_stats %lse[%b, %h, %row] : tensor<2x8x?xf32> -> tensor<32xf32>
  return %l : tensor<32xf32>
}

// CHECK-LABEL: func.func @store_stats
// CHECK-SAME: (%[[L:.+]]: tensor<32xf32>, %[[LSE:.+]]: tensor<2x8x?xf32>, %[[B:.+]]: index, %[[H:.+]]: index, %[[ROW:.+]]: index)
// CHECK: %[[N:.+]] = arith.maxsi
// CHECK: %[[START:.+]] = arith.minsi %[[ROW]], %{{.+}} : index
// CHECK: %[[PART:.+]] = tensor.extract_slice %[[L]][0] [%[[N]]] [1] : tensor<32xf32> to tensor<?xf32>
// CHECK: tensor.insert_slice %[[PART]] into %[[LSE]][%[[B]], %[[H]], %[[START]]] [1, 1, %[[N]]] [1, 1, 1] : tensor<?xf32> into tensor<2x8x?xf32>
func.func @store_stats(%l: tensor<32xf32>, %lse: tensor<2x8x?xf32>, %b: index, %h: index, %row: index) -> tensor<2x8x?xf32> {
  %r = fa3.store_stats %l into %lse[%b, %h, %row] : tensor<32xf32> into tensor<2x8x?xf32>
  return %r : tensor<2x8x?xf32>
}

// S[i, j] = sum_d Q[i, d] K[j, d], widened to f32 before the multiply.
// CHECK-LABEL: func.func @qk
// CHECK-SAME: (%[[Q:.+]]: tensor<32x64xf16>, %[[K:.+]]: tensor<16x64xf16>)
// CHECK: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[INIT:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.+}} : tensor<32x16xf32>) -> tensor<32x16xf32>
// CHECK: %[[S:.+]] = linalg.generic {indexing_maps = [#[[$MAP_QK_Q]], #[[$MAP_QK_K]], #[[$MAP_ACC]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[Q]], %[[K]] : tensor<32x64xf16>, tensor<16x64xf16>) outs(%[[INIT]] : tensor<32x16xf32>)
// CHECK: ^bb0(%[[QE:.+]]: f16, %[[KE:.+]]: f16, %[[OUT:.+]]: f32):
// CHECK-DAG: %[[KW:.+]] = arith.extf %[[KE]] : f16 to f32
// CHECK-DAG: %[[QW:.+]] = arith.extf %[[QE]] : f16 to f32
// CHECK: %[[PROD:.+]] = arith.mulf %[[QW]], %[[KW]] : f32
// CHECK: %[[SUM:.+]] = arith.addf %[[OUT]], %[[PROD]] : f32
// CHECK: linalg.yield %[[SUM]] : f32
// CHECK: return %[[S]]
func.func @qk(%q: tensor<32x64xf16>, %k: tensor<16x64xf16>) -> tensor<32x16xf32> {
  %s = fa3.qk %q, %k : tensor<32x64xf16>, tensor<16x64xf16> -> tensor<32x16xf32>
  return %s : tensor<32x16xf32>
}

// O[i, j] += round_bf16(P[i, k]) V[k, j], accumulating into the given tile.
// CHECK-LABEL: func.func @pv
// CHECK-SAME: (%[[P:.+]]: tensor<32x16xf32>, %[[V:.+]]: tensor<16x64xbf16>, %[[ACC_IN:.+]]: tensor<32x64xf32>)
// CHECK: %[[R:.+]] = linalg.generic {indexing_maps = [#[[$MAP_QK_Q]], #[[$MAP_PV_V]], #[[$MAP_ACC]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[P]], %[[V]] : tensor<32x16xf32>, tensor<16x64xbf16>) outs(%[[ACC_IN]] : tensor<32x64xf32>)
// CHECK: ^bb0(%[[PE:.+]]: f32, %[[VE:.+]]: bf16, %[[OUT:.+]]: f32):
// CHECK: %[[PR:.+]] = arith.truncf %[[PE]] : f32 to bf16
// CHECK: %[[PW:.+]] = arith.extf %[[PR]] : bf16 to f32
// CHECK: %[[VW:.+]] = arith.extf %[[VE]] : bf16 to f32
// CHECK: %[[PROD:.+]] = arith.mulf %[[PW]], %[[VW]] : f32
// CHECK: arith.addf %[[OUT]], %[[PROD]] : f32
// CHECK: return %[[R]]
func.func @pv(%p: tensor<32x16xf32>, %v: tensor<16x64xbf16>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %r = fa3.pv %p, %v, %acc : tensor<32x16xf32>, tensor<16x64xbf16>, tensor<32x64xf32>
  return %r : tensor<32x64xf32>
}

// With f32 values there is nothing to round.
// CHECK-LABEL: func.func @pv_f32
// CHECK: linalg.generic {indexing_maps = [#[[$MAP_QK_Q]], #[[$MAP_PV_V]], #[[$MAP_ACC]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-NOT: arith.truncf
// CHECK-NOT: arith.extf
// CHECK: linalg.yield
func.func @pv_f32(%p: tensor<32x16xf32>, %v: tensor<16x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %r = fa3.pv %p, %v, %acc : tensor<32x16xf32>, tensor<16x64xf32>, tensor<32x64xf32>
  return %r : tensor<32x64xf32>
}

// (softcap / scale) tanh(s scale / softcap) with 0.125 / 30 and 30 / 0.125.
// CHECK-LABEL: func.func @softcap
// CHECK: linalg.generic {indexing_maps = [#[[$MAP_ID2]], #[[$MAP_ID2]]], iterator_types = ["parallel", "parallel"]}
// CHECK: ^bb0(%[[IN:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[INV:.+]] = arith.constant 0.00416666688 : f32
// CHECK: %[[X:.+]] = arith.mulf %[[IN]], %[[INV]] : f32
// CHECK: %[[T:.+]] = math.tanh %[[X]] : f32
// CHECK: %[[CAP:.+]] = arith.constant 2.400000e+02 : f32
// CHECK: %[[Y:.+]] = arith.mulf %[[T]], %[[CAP]] : f32
// CHECK: linalg.yield %[[Y]] : f32
func.func @softcap(%s: tensor<32x16xf32>) -> tensor<32x16xf32> {
  %c = fa3.softcap %s {scale = 1.250000e-01 : f32, softcap = 3.000000e+01 : f32} : tensor<32x16xf32>
  return %c : tensor<32x16xf32>
}

// Entry (i, j) is row q0 + i and column k0 + j; the diagonal of a row sits at
// column row + Sk - Sq.
// CHECK-LABEL: func.func @mask_causal_window
// CHECK-SAME: (%[[S:.+]]: tensor<32x16xf32>, %[[Q0:.+]]: index, %[[K0:.+]]: index, %[[SQ:.+]]: index, %[[SK:.+]]: index)
// CHECK: %[[OFF:.+]] = arith.subi %[[SK]], %[[SQ]] : index
// CHECK: linalg.generic {indexing_maps = [#[[$MAP_ID2]], #[[$MAP_ID2]]], iterator_types = ["parallel", "parallel"]} ins(%[[S]] : tensor<32x16xf32>)
// CHECK: ^bb0(%[[IN:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[I:.+]] = linalg.index 0 : index
// CHECK: %[[J:.+]] = linalg.index 1 : index
// CHECK: %[[ROW:.+]] = arith.addi %[[Q0]], %[[I]] : index
// CHECK: %[[COL:.+]] = arith.addi %[[K0]], %[[J]] : index
// CHECK: %[[DIAG:.+]] = arith.addi %[[ROW]], %[[OFF]] : index
// CHECK: %[[TAIL:.+]] = arith.cmpi sge, %[[COL]], %[[SK]] : index
// CHECK: %[[LAST:.+]] = arith.addi %[[DIAG]], %{{.+}} : index
// CHECK: %[[RIGHT:.+]] = arith.cmpi sgt, %[[COL]], %[[LAST]] : index
// CHECK: %[[H1:.+]] = arith.ori %[[TAIL]], %[[RIGHT]] : i1
// CHECK: %[[C8:.+]] = arith.constant 8 : index
// CHECK: %[[FIRST:.+]] = arith.subi %[[DIAG]], %[[C8]] : index
// CHECK: %[[LEFT:.+]] = arith.cmpi slt, %[[COL]], %[[FIRST]] : index
// CHECK: %[[HIDDEN:.+]] = arith.ori %[[H1]], %[[LEFT]] : i1
// CHECK: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// CHECK: %[[R:.+]] = arith.select %[[HIDDEN]], %[[NINF]], %[[IN]] : f32
// CHECK: linalg.yield %[[R]] : f32
func.func @mask_causal_window(%s: tensor<32x16xf32>, %q0: index, %k0: index, %sq: index, %sk: index) -> tensor<32x16xf32> {
  %m = fa3.mask %s, %q0, %k0, %sq, %sk {causal, window = array<i64: 8, 0>} : tensor<32x16xf32>
  return %m : tensor<32x16xf32>
}

// Without causal or window only the columns past Sk are hidden.
// CHECK-LABEL: func.func @mask_tail
// CHECK-SAME: (%[[S:.+]]: tensor<32x16xf32>, %[[Q0:.+]]: index, %[[K0:.+]]: index, %[[SQ:.+]]: index, %[[SK:.+]]: index)
// CHECK: linalg.index 1 : index
// CHECK: %[[COL:.+]] = arith.addi %[[K0]], %{{.+}} : index
// CHECK: %[[TAIL:.+]] = arith.cmpi sge, %[[COL]], %[[SK]] : index
// CHECK-NOT: arith.ori
// CHECK: arith.select %[[TAIL]], %{{.+}}, %{{.+}} : f32
func.func @mask_tail(%s: tensor<32x16xf32>, %q0: index, %k0: index, %sq: index, %sk: index) -> tensor<32x16xf32> {
  %m = fa3.mask %s, %q0, %k0, %sq, %sk : tensor<32x16xf32>
  return %m : tensor<32x16xf32>
}

// Row max, then per row the correction exp2(c m - c m'), then the
// probabilities exp2(c s - c m') and the new row sum.
// CHECK-LABEL: func.func @online_softmax
// CHECK-SAME: (%[[S:.+]]: tensor<32x16xf32>, %[[M:.+]]: tensor<32xf32>, %[[L:.+]]: tensor<32xf32>)
// CHECK: %[[MAX:.+]] = linalg.generic {indexing_maps = [#[[$MAP_ID2]], #[[$MAP_ROW]]], iterator_types = ["parallel", "reduction"]} ins(%[[S]] : tensor<32x16xf32>) outs(%[[M]] : tensor<32xf32>)
// CHECK: arith.maximumf
// CHECK: %[[STEP:.+]]:3 = linalg.generic {indexing_maps = [#[[$MAP_ID1]], #[[$MAP_ID1]], #[[$MAP_ID1]], #[[$MAP_ID1]], #[[$MAP_ID1]], #[[$MAP_ID1]]], iterator_types = ["parallel"]} ins(%[[M]], %[[MAX]], %[[L]] : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>)
// CHECK: ^bb0(%[[OLD:[^:]+]]: f32, %[[NEW:[^:]+]]: f32, %[[SUM:[^:]+]]: f32,
// A row that is still all -inf subtracts 0, so exp2 never sees -inf - -inf.
// CHECK: %[[EMPTY:.+]] = arith.cmpf oeq, %[[NEW]], %{{.+}} : f32
// CHECK: %[[BASE:.+]] = arith.select %[[EMPTY]], %{{.+}}, %[[NEW]] : f32
// CHECK: %[[C:.+]] = arith.constant 0.180336878 : f32
// CHECK: %[[BASE_C:.+]] = arith.mulf %[[BASE]], %[[C]] : f32
// CHECK: %[[OLD_C:.+]] = arith.mulf %[[OLD]], %{{.+}} : f32
// CHECK: %[[D:.+]] = arith.subf %[[OLD_C]], %[[BASE_C]] : f32
// CHECK: %[[ALPHA:.+]] = math.exp2 %[[D]] : f32
// CHECK: %[[SCALED:.+]] = arith.mulf %[[ALPHA]], %[[SUM]] : f32
// CHECK: linalg.yield %[[BASE_C]], %[[ALPHA]], %[[SCALED]] : f32, f32, f32
// CHECK: %[[P:.+]] = linalg.generic {indexing_maps = [#[[$MAP_ID2]], #[[$MAP_ROW]], #[[$MAP_ID2]]], iterator_types = ["parallel", "parallel"]} ins(%[[S]], %[[STEP]]#0 : tensor<32x16xf32>, tensor<32xf32>)
// CHECK: ^bb0(%[[SE:[^:]+]]: f32, %[[BE:[^:]+]]: f32,
// CHECK: %[[X:.+]] = arith.mulf %[[SE]], %{{.+}} : f32
// CHECK: %[[Y:.+]] = arith.subf %[[X]], %[[BE]] : f32
// CHECK: %[[E:.+]] = math.exp2 %[[Y]] : f32
// CHECK: linalg.yield %[[E]] : f32
// CHECK: %[[NEWSUM:.+]] = linalg.generic {indexing_maps = [#[[$MAP_ID2]], #[[$MAP_ROW]]], iterator_types = ["parallel", "reduction"]} ins(%[[P]] : tensor<32x16xf32>) outs(%[[STEP]]#2 : tensor<32xf32>)
// CHECK: arith.addf
// CHECK: return %[[P]], %[[MAX]], %[[NEWSUM]], %[[STEP]]#1
func.func @online_softmax(%s: tensor<32x16xf32>, %m: tensor<32xf32>, %l: tensor<32xf32>) -> (tensor<32x16xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) {
  %p, %m1, %l1, %a = fa3.online_softmax %s, %m, %l {exp2_scale = 0.180336878 : f32} : tensor<32x16xf32>, tensor<32xf32>
  return %p, %m1, %l1, %a : tensor<32x16xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
}

// CHECK-LABEL: func.func @rescale
// CHECK-SAME: (%[[ACC_IN:.+]]: tensor<32x64xf32>, %[[CORR:.+]]: tensor<32xf32>)
// CHECK: linalg.generic {indexing_maps = [#[[$MAP_ID2]], #[[$MAP_ROW]], #[[$MAP_ID2]]], iterator_types = ["parallel", "parallel"]} ins(%[[ACC_IN]], %[[CORR]] : tensor<32x64xf32>, tensor<32xf32>)
// CHECK: ^bb0(%[[A:[^:]+]]: f32, %[[C:[^:]+]]: f32,
// CHECK: %[[R:.+]] = arith.mulf %[[A]], %[[C]] : f32
// CHECK: linalg.yield %[[R]] : f32
func.func @rescale(%acc: tensor<32x64xf32>, %a: tensor<32xf32>) -> tensor<32x64xf32> {
  %r = fa3.rescale %acc, %a : tensor<32x64xf32>, tensor<32xf32>
  return %r : tensor<32x64xf32>
}

// 1/l per row (0 for an empty row) and LSE = scale m + log(l) (-inf for an
// empty row), then O = acc / l rounded to f16.
// CHECK-LABEL: func.func @finalize
// CHECK-SAME: (%[[ACC_IN:.+]]: tensor<32x64xf32>, %[[M:.+]]: tensor<32xf32>, %[[L:.+]]: tensor<32xf32>)
// CHECK: %[[ROWS:.+]]:2 = linalg.generic {indexing_maps = [#[[$MAP_ID1]], #[[$MAP_ID1]], #[[$MAP_ID1]], #[[$MAP_ID1]]], iterator_types = ["parallel"]} ins(%[[M]], %[[L]] : tensor<32xf32>, tensor<32xf32>)
// CHECK: ^bb0(%[[ME:[^:]+]]: f32, %[[LE:[^:]+]]: f32,
// CHECK: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[EMPTY:.+]] = arith.cmpf oeq, %[[LE]], %[[ZERO]] : f32
// CHECK: %[[INV:.+]] = arith.divf %{{.+}}, %[[LE]] : f32
// CHECK: %[[LOG:.+]] = math.log %[[LE]] : f32
// CHECK: %[[SCALE:.+]] = arith.constant 1.250000e-01 : f32
// CHECK: %[[MS:.+]] = arith.mulf %[[ME]], %[[SCALE]] : f32
// CHECK: %[[LSE:.+]] = arith.addf %[[MS]], %[[LOG]] : f32
// CHECK: %[[INV_OR_0:.+]] = arith.select %[[EMPTY]], %[[ZERO]], %[[INV]] : f32
// CHECK: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// CHECK: %[[LSE_OR_NINF:.+]] = arith.select %[[EMPTY]], %[[NINF]], %[[LSE]] : f32
// CHECK: linalg.yield %[[INV_OR_0]], %[[LSE_OR_NINF]] : f32, f32
// CHECK: %[[O:.+]] = linalg.generic {indexing_maps = [#[[$MAP_ID2]], #[[$MAP_ROW]], #[[$MAP_ID2]]], iterator_types = ["parallel", "parallel"]} ins(%[[ACC_IN]], %[[ROWS]]#0 : tensor<32x64xf32>, tensor<32xf32>) outs(%{{.+}} : tensor<32x64xf16>)
// CHECK: %[[X:.+]] = arith.mulf
// CHECK: %[[Y:.+]] = arith.truncf %[[X]] : f32 to f16
// CHECK: linalg.yield %[[Y]] : f16
// CHECK: return %[[O]], %[[ROWS]]#1
func.func @finalize(%acc: tensor<32x64xf32>, %m: tensor<32xf32>, %l: tensor<32xf32>) -> (tensor<32x64xf16>, tensor<32xf32>) {
  %o, %lse = fa3.finalize %acc, %m, %l {scale = 1.250000e-01 : f32} : tensor<32x64xf32>, tensor<32xf32> -> tensor<32x64xf16>
  return %o, %lse : tensor<32x64xf16>, tensor<32xf32>
}

//--- untiled.mlir

// Tensor-level ops must be tiled first (fa3-tile, fa3-fuse-softmax).
// UNTILED: error: failed to legalize operation 'fa3.attention' that was explicitly marked illegal
func.func @untiled(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}
