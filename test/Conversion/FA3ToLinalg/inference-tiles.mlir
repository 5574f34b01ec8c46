// RUN: fa3-opt %s --convert-fa3-to-linalg --canonicalize | FileCheck %s

// The CPU lowering of the tile forms the inference ops use: a row limit
// (the end of one packed sequence) and a load through a page table.

// The limit bounds the rows like the tensor's end does, clamped into
// [0, dim] so that a bad limit never reads outside the tensor.
// CHECK-LABEL: func.func @limit
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<1x?x4x64xbf16>, %[[ROW:[^:]+]]: index, %[[END:[^:]+]]: index)
// CHECK: %[[DIM:.+]] = tensor.dim %[[Q]], %c1
// CHECK: %[[E0:.+]] = arith.minsi %[[END]], %[[DIM]] : index
// CHECK: %[[E:.+]] = arith.maxsi %[[E0]], %c0 : index
// CHECK: %[[LEFT:.+]] = arith.subi %[[E]], %[[ROW]] : index
// CHECK: %[[UP:.+]] = arith.minsi %[[LEFT]], %c64 : index
// CHECK: %[[N:.+]] = arith.maxsi %[[UP]], %c0 : index
// CHECK: %[[START:.+]] = arith.minsi %[[ROW]], %[[E]] : index
// CHECK: %[[SLICE:.+]] = tensor.extract_slice %[[Q]][0, %[[START]], 0, 0] [1, %[[N]], 1, 64]
// CHECK: tensor.insert_slice %[[SLICE]] into %{{.+}}[0, 0] [%[[N]], 64] [1, 1]
func.func @limit(%q: tensor<1x?x4x64xbf16>, %row: index, %end: index) -> tensor<64x64xbf16> {
  %c0 = arith.constant 0 : index
  %t = fa3.load_tile %q[%c0, %row, %c0] limit %end : tensor<1x?x4x64xbf16> -> tensor<64x64xbf16>
  return %t : tensor<64x64xbf16>
}

// One row per key inside the limit: key j = row + i is slot j % 16 of page
// page_table[b, j / 16], read only when that table entry exists, with the
// entry clamped into [0, num_pages).
// CHECK-LABEL: func.func @paged
// CHECK-SAME: (%[[KC:[^:]+]]: tensor<?x16x2x64xbf16>, %[[PT:[^:]+]]: tensor<?x?xi32>, %[[B:[^:]+]]: index, %[[ROW:[^:]+]]: index, %[[H:[^:]+]]: index, %[[LEN:[^:]+]]: index)
// CHECK-DAG: %[[PAGES:.+]] = tensor.dim %[[KC]], %c0
// CHECK-DAG: %[[WIDTH:.+]] = tensor.dim %[[PT]], %c1
// CHECK: %[[ZEROS:.+]] = linalg.fill {{.+}} -> tensor<64x64xbf16>
// CHECK: scf.for %[[I:[^ ]+]] = %c0 to %{{.+}} step %c1 iter_args(%[[TILE:.+]] = %[[ZEROS]])
// CHECK: %[[J:.+]] = arith.addi %[[ROW]], %[[I]] : index
// CHECK: %[[SLOT:.+]] = arith.divui %[[J]], %c16 : index
// CHECK: %[[INTABLE:.+]] = arith.cmpi slt, %[[SLOT]], %[[WIDTH]] : index
// CHECK: scf.if
// CHECK: %[[ENTRY:.+]] = tensor.extract %[[PT]][%[[B]], %[[SLOT]]] : tensor<?x?xi32>
// CHECK: %[[P0:.+]] = arith.index_cast %[[ENTRY]] : i32 to index
// CHECK: %[[P1:.+]] = arith.maxsi %[[P0]], %c0 : index
// CHECK: %[[P:.+]] = arith.minsi %[[P1]], %{{.+}} : index
// CHECK: %[[OFF:.+]] = arith.remui %[[J]], %c16 : index
// CHECK: %[[R:.+]] = tensor.extract_slice %[[KC]][%[[P]], %[[OFF]], %[[H]], 0] [1, 1, 1, 64]
// CHECK: tensor.insert_slice %[[R]] into %[[TILE]][%[[I]], 0] [1, 64] [1, 1]
func.func @paged(%kc: tensor<?x16x2x64xbf16>, %pt: tensor<?x?xi32>, %b: index, %row: index, %h: index, %len: index) -> tensor<64x64xbf16> {
  %t = fa3.load_paged_tile %kc[%pt, %b, %row, %h] limit %len : tensor<?x16x2x64xbf16>, tensor<?x?xi32> -> tensor<64x64xbf16>
  return %t : tensor<64x64xbf16>
}

// The split-KV merge: the row max over the splits, the sum of exp(lse_s - max),
// lse = max + log(sum) (-inf when no split saw a key), then
// O = sum_s exp(lse_s - lse) O_s in f32 and one rounding to the output type.
// CHECK-LABEL: func.func @combine
// CHECK: linalg.generic {{.+}} iterator_types = ["reduction", "parallel", "parallel", "parallel"]} ins(%arg1 : tensor<?x?x8x1xf32>)
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.+}} iterator_types = ["reduction", "parallel", "parallel", "parallel"]} ins(%arg1, %{{.+}} : tensor<?x?x8x1xf32>, tensor<?x8x1xf32>)
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "parallel"]}
// CHECK: %[[HAS:.+]] = arith.cmpf ogt
// CHECK: math.log
// CHECK: arith.select %[[HAS]]
// CHECK: %[[ACC:.+]] = linalg.generic {{.+}} iterator_types = ["reduction", "parallel", "parallel", "parallel", "parallel"]} ins(%arg0, %arg1, %{{.+}} : tensor<?x?x1x8x64xf32>, tensor<?x?x8x1xf32>, tensor<?x8x1xf32>) outs(%{{.+}} : tensor<?x1x8x64xf32>)
// CHECK: math.exp
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: linalg.generic {{.+}} ins(%[[ACC]] : tensor<?x1x8x64xf32>) outs(%{{.+}} : tensor<?x1x8x64xbf16>)
// CHECK: arith.truncf
func.func @combine(%p: tensor<?x?x1x8x64xf32>, %l: tensor<?x?x8x1xf32>) -> (tensor<?x1x8x64xbf16>, tensor<?x8x1xf32>) {
  %o, %lse = fa3.combine_splits %p, %l : (tensor<?x?x1x8x64xf32>, tensor<?x?x8x1xf32>) -> (tensor<?x1x8x64xbf16>, tensor<?x8x1xf32>)
  return %o, %lse : tensor<?x1x8x64xbf16>, tensor<?x8x1xf32>
}

// PackGQA: tile rows g, g + 3, g + 6, ... are head h + g of consecutive
// queries: one stride-3 insert per head (22, 21 and 21 rows of a 64-row
// tile), and the mask's row i is query q0 + i / 3.
// CHECK-LABEL: func.func @packed_load
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<1x?x6x64xbf16>, %[[ROW:[^:]+]]: index, %[[H:[^:]+]]: index)
// CHECK: %[[S0:.+]] = tensor.extract_slice %[[Q]][0, %{{.+}}, %[[H]], 0] [1, %[[N0:.+]], 1, 64]
// CHECK: %[[T0:.+]] = tensor.insert_slice %[[S0]] into %{{.+}}[0, 0] [%[[N0]], 64] [3, 1]
// CHECK: %[[H1:.+]] = arith.addi %[[H]], %c1 : index
// CHECK: %[[S1:.+]] = tensor.extract_slice %[[Q]][0, %{{.+}}, %[[H1]], 0] [1, %[[N1:.+]], 1, 64]
// CHECK: %[[T1:.+]] = tensor.insert_slice %[[S1]] into %[[T0]][1, 0] [%[[N1]], 64] [3, 1]
// CHECK: %[[H2:.+]] = arith.addi %[[H]], %c2 : index
// CHECK: tensor.insert_slice %{{.+}} into %[[T1]][2, 0] [%{{.+}}, 64] [3, 1]
func.func @packed_load(%q: tensor<1x?x6x64xbf16>, %row: index, %h: index) -> tensor<64x64xbf16> {
  %c0 = arith.constant 0 : index
  %t = fa3.load_tile %q[%c0, %row, %h] {packed_heads = 3 : i64} : tensor<1x?x6x64xbf16> -> tensor<64x64xbf16>
  return %t : tensor<64x64xbf16>
}

// CHECK-LABEL: func.func @packed_mask
// CHECK: linalg.generic
// CHECK: %[[I:.+]] = linalg.index 0 : index
// CHECK: %[[QI:.+]] = arith.divui %[[I]], %c3 : index
// CHECK: arith.addi %arg1, %[[QI]] : index
func.func @packed_mask(%s: tensor<64x64xf32>, %q0: index, %k0: index, %sq: index, %sk: index) -> tensor<64x64xf32> {
  %m = fa3.mask %s, %q0, %k0, %sq, %sk {causal, packed_heads = 3 : i64} : tensor<64x64xf32>
  return %m : tensor<64x64xf32>
}
