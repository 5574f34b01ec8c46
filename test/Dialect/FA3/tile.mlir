// RUN: split-file %s %t
// RUN: fa3-opt %t/tile.mlir --fa3-select-schedule --fa3-tile | FileCheck %s
// RUN: fa3-opt %t/grad.mlir --fa3-select-schedule --fa3-tile | FileCheck %s --check-prefix=GRAD
// RUN: fa3-opt %t/grad_lse.mlir --fa3-select-schedule --fa3-tile | FileCheck %s --check-prefix=GRAD-LSE
// RUN: fa3-opt %t/grid.mlir --fa3-select-schedule=target=sm_90a --fa3-tile=grid=true | FileCheck %s --check-prefix=GRID
// RUN: fa3-opt %t/grid.mlir --fa3-select-schedule=target=sm_90a --fa3-tile=grid=true --fa3-fuse-softmax | FileCheck %s --check-prefix=GRID-FUSED
// RUN: fa3-opt %t/grad_grid.mlir --fa3-select-schedule=target=sm_90a --fa3-tile=grid=true --canonicalize --cse | FileCheck %s --check-prefix=GRAD-GRID
// RUN: not fa3-opt %t/unscheduled.mlir --fa3-tile 2>&1 | FileCheck %s --check-prefix=NOSCHED
// RUN: fa3-opt %t/packed.mlir --fa3-select-schedule=target=sm_90a --fa3-tile=grid=true | FileCheck %s --check-prefix=PACKED
// RUN: fa3-opt %t/packed.mlir --fa3-select-schedule --fa3-tile | FileCheck %s --check-prefix=PACKED-CPU

//--- tile.mlir

// Loops over batch, query head and ceildiv(Sq, block_m) query blocks; each
// iteration handles one 64-row query tile against the keys of its GQA group.
// CHECK-LABEL: func.func @causal_gqa
// CHECK-SAME: (%[[Q:.+]]: tensor<2x?x8x64xf16>, %[[K:.+]]: tensor<2x?x2x64xf16>, %[[V:.+]]: tensor<2x?x2x64xf16>)
// CHECK-DAG: %[[C0:.+]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.+]] = arith.constant 1 : index
// CHECK: %[[B:.+]] = tensor.dim %[[Q]], %{{.+}} : tensor<2x?x8x64xf16>
// CHECK: %[[SQ:.+]] = tensor.dim %[[Q]], %{{.+}} : tensor<2x?x8x64xf16>
// CHECK: %[[C64:.+]] = arith.constant 64 : index
// CHECK: %[[NQB:.+]] = arith.ceildivui %[[SQ]], %[[C64]] : index
// CHECK: %[[O0:.+]] = tensor.empty(%[[SQ]]) : tensor<2x?x8x64xf16>
// CHECK: %[[L0:.+]] = tensor.empty(%[[SQ]]) : tensor<2x8x?xf32>
// CHECK: %[[RES:.+]]:2 = scf.for %[[BI:.+]] = %[[C0]] to %[[B]] step %[[C1]] iter_args(%[[BO:.+]] = %[[O0]], %[[BL:.+]] = %[[L0]]) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
// CHECK: %[[C8:.+]] = arith.constant 8 : index
// CHECK: scf.for %[[H:.+]] = %[[C0]] to %[[C8]] step %[[C1]] iter_args(%[[HO:.+]] = %[[BO]], %[[HL:.+]] = %[[BL]])
// CHECK: scf.for %[[QB:.+]] = %[[C0]] to %[[NQB]] step %[[C1]] iter_args(%[[O:.+]] = %[[HO]], %[[L:.+]] = %[[HL]])
// CHECK: %[[GROUP:.+]] = arith.constant 4 : index
// CHECK: %[[HKV:.+]] = arith.divui %[[H]], %[[GROUP]] : index
// CHECK: %[[Q0:.+]] = arith.muli %[[QB]], %{{.+}} : index
// CHECK: %[[QT:.+]] = fa3.load_tile %[[Q]][%[[BI]], %[[Q0]], %[[H]]] : tensor<2x?x8x64xf16> -> tensor<64x64xf16>
// CHECK: %[[OT:.+]], %[[LT:.+]] = fa3.attention_block %[[QT]], %[[K]], %[[V]], %[[BI]], %[[HKV]], %[[Q0]], %[[SQ]] {causal, scale = 1.250000e-01 : f32, schedule = #fa3.schedule<block_m = 64, block_n = 64, {{.+}}>} : tensor<64x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16> -> tensor<64x64xf16>, tensor<64xf32>
// CHECK: %[[O1:.+]] = fa3.store_tile %[[OT]] into %[[O]][%[[BI]], %[[Q0]], %[[H]]] : tensor<64x64xf16> into tensor<2x?x8x64xf16>
// CHECK: %[[L1:.+]] = fa3.store_stats %[[LT]] into %[[L]][%[[BI]], %[[H]], %[[Q0]]] : tensor<64xf32> into tensor<2x8x?xf32>
// CHECK: scf.yield %[[O1]], %[[L1]] : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
// CHECK: return %[[RES]]#0, %[[RES]]#1
func.func @causal_gqa(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// Nothing of size Sq x Sk exists after tiling, even with both static; the
// scale resolves to 1/sqrt(128) and the window and softcap move to the block.
// CHECK-LABEL: func.func @static_1000
// CHECK-NOT: 1000x1000
// CHECK: %[[NQB:.+]] = arith.ceildivui %{{.+}}, %{{.+}} : index
// CHECK-NOT: 1000x1000
// CHECK: %[[ONE:.+]] = arith.constant 1 : index
// CHECK: arith.divui %{{.+}}, %[[ONE]] : index
// CHECK-NOT: 1000x1000
// CHECK: fa3.load_tile {{.+}} : tensor<1x1000x4x128xf32> -> tensor<64x128xf32>
// CHECK-NOT: 1000x1000
// CHECK: fa3.attention_block
// CHECK-SAME: scale = 0.0883883461 : f32
// CHECK-SAME: softcap = 2.000000e+01 : f32, window = array<i64: 100, 100>
// CHECK-SAME: -> tensor<64x128xf32>, tensor<64xf32>
// CHECK-NOT: 1000x1000
// CHECK: return
func.func @static_1000(%q: tensor<1x1000x4x128xf32>, %k: tensor<1x1000x4x128xf32>, %v: tensor<1x1000x4x128xf32>) -> (tensor<1x1000x4x128xf32>, tensor<1x4x1000xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: 100, 100>, softcap = 20.0 : f32} : (tensor<1x1000x4x128xf32>, tensor<1x1000x4x128xf32>, tensor<1x1000x4x128xf32>) -> (tensor<1x1000x4x128xf32>, tensor<1x4x1000xf32>)
  return %o, %lse : tensor<1x1000x4x128xf32>, tensor<1x4x1000xf32>
}

// A zero softcap is off and does not reach the block; Dv != D gives output
// tiles of Dv columns; a hand-written block_m is honoured.
// CHECK-LABEL: func.func @dv_ne_d_schedule
// CHECK: %[[C32:.+]] = arith.constant 32 : index
// CHECK: arith.ceildivui %{{.+}}, %[[C32]] : index
// CHECK: fa3.load_tile {{.+}} : tensor<?x?x2x192xbf16> -> tensor<32x192xbf16>
// CHECK: fa3.attention_block
// CHECK-NOT: softcap
// CHECK-SAME: -> tensor<32x128xbf16>, tensor<32xf32>
// CHECK: fa3.store_tile {{.+}} : tensor<32x128xbf16> into tensor<?x?x2x128xbf16>
// CHECK: fa3.store_stats {{.+}} : tensor<32xf32> into tensor<?x2x?xf32>
func.func @dv_ne_d_schedule(%q: tensor<?x?x2x192xbf16>, %k: tensor<?x?x2x192xbf16>, %v: tensor<?x?x2x128xbf16>) -> (tensor<?x?x2x128xbf16>, tensor<?x2x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {softcap = 0.0 : f32, schedule = #fa3.schedule<block_m = 32, block_n = 16, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<?x?x2x192xbf16>, tensor<?x?x2x192xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x2x128xbf16>, tensor<?x2x?xf32>)
  return %o, %lse : tensor<?x?x2x128xbf16>, tensor<?x2x?xf32>
}

//--- grad.mlir

// The backward in three loop nests, every tensor a 64-row tile: Δ and the
// zeroed f32 dQ accumulator per query tile; per key tile (batch, kv head,
// key block) a loop over the 4 query heads of its GQA group and the query
// blocks that can see it, carrying the dK/dV accumulators and the dQ
// accumulator; dQ converted per query tile. No Sq x Sk tensor anywhere.
// GRAD-LABEL: func.func @grad
// GRAD: %[[DQACC0:.+]] = tensor.empty(%{{.+}}) : tensor<2x?x8x64xf32>
// GRAD: scf.for
// GRAD: %[[DO:.+]] = fa3.load_tile %{{.+}} : tensor<2x?x8x64xbf16> -> tensor<64x64xbf16>
// GRAD: %[[O:.+]] = fa3.load_tile %{{.+}} : tensor<2x?x8x64xbf16> -> tensor<64x64xbf16>
// GRAD: fa3.row_dot %[[DO]], %[[O]] : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64xf32>
// GRAD: fa3.store_stats {{.+}} : tensor<64xf32> into tensor<2x8x?xf32>
// GRAD: fa3.store_tile {{.+}} : tensor<64x64xf32> into tensor<2x?x8x64xf32>
// GRAD: %[[KT:.+]] = fa3.load_tile %{{.+}} : tensor<2x?x2x64xbf16> -> tensor<64x64xbf16>
// GRAD: %[[VT:.+]] = fa3.load_tile %{{.+}} : tensor<2x?x2x64xbf16> -> tensor<64x64xbf16>
// GRAD: scf.for %{{.+}} = %{{.+}} to %c4 step %{{.+}} iter_args({{.+}}) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<2x?x8x64xf32>)
// GRAD: scf.for
// GRAD: %[[QT:.+]] = fa3.load_tile {{.+}} -> tensor<64x64xbf16>
// GRAD: %[[DOT:.+]] = fa3.load_tile {{.+}} -> tensor<64x64xbf16>
// GRAD: %[[LSE:.+]] = fa3.load_stats {{.+}} -> tensor<64xf32>
// GRAD: %[[DELTA:.+]] = fa3.load_stats {{.+}} -> tensor<64xf32>
// GRAD: %[[S:.+]] = fa3.qk %[[QT]], %[[KT]] : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
// GRAD: fa3.mask %[[S]], {{.+}} {causal}
// GRAD: %[[P:.+]] = fa3.recompute_probs %{{.+}}, %[[LSE]] {exp2_scale = 0.180336878 : f32}
// GRAD: fa3.mma_tn %[[P]], %[[DOT]], %{{.+}} : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
// GRAD: %[[DP:.+]] = fa3.qk %[[DOT]], %[[VT]]
// GRAD: %[[DS:.+]] = fa3.softmax_grad %[[P]], %[[DP]], %[[DELTA]]
// GRAD: fa3.mma_tn %[[DS]], %[[QT]], %{{.+}}
// GRAD: %[[DQ:.+]] = fa3.load_tile {{.+}} : tensor<2x?x8x64xf32> -> tensor<64x64xf32>
// GRAD: %[[DQ1:.+]] = fa3.pv %[[DS]], %[[KT]], %[[DQ]]
// GRAD: fa3.store_tile %[[DQ1]] into {{.+}} : tensor<64x64xf32> into tensor<2x?x8x64xf32>
// GRAD: fa3.scale_cast %{{.+}} {scale = 1.250000e-01 : f32} : tensor<64x64xf32> -> tensor<64x64xbf16>
// GRAD: fa3.scale_cast %{{.+}} {scale = 1.000000e+00 : f32} : tensor<64x64xf32> -> tensor<64x64xbf16>
// GRAD: fa3.store_tile {{.+}} : tensor<64x64xbf16> into tensor<2x?x2x64xbf16>
// GRAD: fa3.store_tile {{.+}} : tensor<64x64xbf16> into tensor<2x?x2x64xbf16>
// GRAD: fa3.load_tile {{.+}} : tensor<2x?x8x64xf32> -> tensor<64x64xf32>
// GRAD: fa3.scale_cast %{{.+}} {scale = 1.250000e-01 : f32} : tensor<64x64xf32> -> tensor<64x64xbf16>
// GRAD: fa3.store_tile {{.+}} : tensor<64x64xbf16> into tensor<2x?x8x64xbf16>
// GRAD-NOT: tensor<{{[0-9?]+}}x?xf32>
func.func @grad(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>
}

//--- grad_lse.mlir

// With the LSE's gradient, the preprocessing loads dLSE per query tile and
// forms Δ − dLSE; the rest of the backward is unchanged.
// GRAD-LSE-LABEL: func.func @grad_lse(
// GRAD-LSE-SAME: %[[DLSE:[^:]+]]: tensor<2x8x?xf32>)
// GRAD-LSE: %[[DOT:.+]] = fa3.load_tile
// GRAD-LSE: %[[OT:.+]] = fa3.load_tile
// GRAD-LSE: %[[G:.+]] = fa3.load_stats %[[DLSE]][
// GRAD-LSE: %[[D:.+]] = fa3.row_dot %[[DOT]], %[[OT]] minus %[[G]] : tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64xf32> -> tensor<64xf32>
// GRAD-LSE: fa3.store_stats %[[D]]
// GRAD-LSE: fa3.softmax_grad
// GRAD-LSE-NOT: fa3.row_dot
func.func @grad_lse(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>, %dlse: tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse, %dlse {causal} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>
}

//--- unscheduled.mlir

// NOSCHED: error: 'fa3.attention' op has no #fa3.schedule; run fa3-select-schedule first
func.func @unscheduled(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

//--- grid.mlir

// grid=true: one scf.forall over (query block, query head, batch) mapped to
// the GPU grid (x, y, z); each iteration is one CTA's query tile and
// contributes its output and LSE rows through the parallel stores.
// GRID-LABEL: func.func @causal_gqa
// GRID-SAME: (%[[Q:.+]]: tensor<2x?x8x64xbf16>, %[[K:.+]]: tensor<2x?x2x64xbf16>, %[[V:.+]]: tensor<2x?x2x64xbf16>)
// GRID: %[[B:.+]] = tensor.dim %[[Q]], %{{.+}} : tensor<2x?x8x64xbf16>
// GRID: %[[SQ:.+]] = tensor.dim %[[Q]], %{{.+}} : tensor<2x?x8x64xbf16>
// GRID: %[[NQB:.+]] = arith.ceildivui %[[SQ]], %{{.+}} : index
// GRID: %[[O0:.+]] = tensor.empty(%[[SQ]]) : tensor<2x?x8x64xbf16>
// GRID: %[[L0:.+]] = tensor.empty(%[[SQ]]) : tensor<2x8x?xf32>
// GRID: %[[RES:.+]]:2 = scf.forall (%[[QB:.+]], %[[H:.+]], %[[BI:.+]]) in (%[[NQB]], 8, %[[B]]) shared_outs(%[[O:.+]] = %[[O0]], %[[L:.+]] = %[[L0]]) -> (tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) {
// GRID: %[[HKV:.+]] = arith.divui %[[H]], %{{.+}} : index
// GRID: %[[Q0:.+]] = arith.muli %[[QB]], %{{.+}} : index
// GRID: %[[QT:.+]] = fa3.load_tile %[[Q]][%[[BI]], %[[Q0]], %[[H]]] : tensor<2x?x8x64xbf16> -> tensor<192x64xbf16>
// GRID: %[[OT:.+]], %[[LT:.+]] = fa3.attention_block %[[QT]], %[[K]], %[[V]], %[[BI]], %[[HKV]], %[[Q0]], %[[SQ]] {causal
// GRID: scf.forall.in_parallel {
// GRID-NEXT: fa3.parallel_store_tile %[[OT]] into %[[O]][%[[BI]], %[[Q0]], %[[H]]] : tensor<192x64xbf16> into tensor<2x?x8x64xbf16>
// GRID-NEXT: fa3.parallel_store_stats %[[LT]] into %[[L]][%[[BI]], %[[H]], %[[Q0]]] : tensor<192xf32> into tensor<2x8x?xf32>
// GRID-NEXT: }
// GRID-NEXT: } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
// GRID: return %[[RES]]#0, %[[RES]]#1

// fa3-fuse-softmax expands the block inside the forall as it does in loops.
// GRID-FUSED: scf.forall
// GRID-FUSED-NOT: fa3.attention_block
// GRID-FUSED: scf.for
// GRID-FUSED: fa3.qk
// GRID-FUSED: fa3.online_softmax
// GRID-FUSED: fa3.pv
// GRID-FUSED: fa3.finalize
// GRID-FUSED: scf.forall.in_parallel
// GRID-FUSED: fa3.parallel_store_tile
func.func @causal_gqa(%q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>) -> (tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32} : (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) -> (tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>
}

//--- grad_grid.mlir

// grid=true on the backward: three scf.foralls mapped to the GPU grid, one
// per kernel of the Hopper backward. Δ per (query block, query head,
// batch); dK and dV per (key block, key/value head, batch), each key block
// adding its dQ = dS K partials into the f32 accumulator, a zero-filled
// buffer (fa3.accumulate_tile: atomic adds from every key block, `ordered`
// with `deterministic`); dQ = scale · accumulator per query tile after the
// key blocks are done.
// GRAD-GRID-LABEL: func.func @grad_grid
// GRAD-GRID-SAME: (%[[DO:[^:]+]]: tensor<?x?x8x128xbf16>, %[[Q:[^:]+]]: tensor<?x?x8x128xbf16>, %[[K:[^:]+]]: tensor<?x?x2x128xbf16>, %[[V:[^:]+]]: tensor<?x?x2x128xbf16>, %[[O:[^:]+]]: tensor<?x?x8x128xbf16>, %[[LSE:[^:]+]]: tensor<?x8x?xf32>)
// GRAD-GRID-DAG: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// GRAD-GRID-DAG: %[[B:.+]] = tensor.dim %[[Q]], %c0
// GRAD-GRID-DAG: %[[SQ:.+]] = tensor.dim %[[Q]], %c1
// GRAD-GRID-DAG: %[[SK:.+]] = tensor.dim %[[K]], %c1
// GRAD-GRID: %[[ACC:.+]] = memref.alloc(%[[B]], %[[SQ]]) : memref<?x?x8x128xf32>
// GRAD-GRID: linalg.fill ins(%[[ZERO]] : f32) outs(%[[ACC]] : memref<?x?x8x128xf32>)
// GRAD-GRID: %[[NQB:.+]] = arith.ceildivsi %[[SQ]], %c64
// GRAD-GRID: %[[NKB:.+]] = arith.ceildivsi %[[SK]], %c128
// GRAD-GRID: %[[DELTA:.+]] = scf.forall (%[[QB:.+]], %[[H:.+]], %[[BI:.+]]) in (%[[NQB]], 8, %[[B]]) shared_outs(%[[D:.+]] = %{{.+}}) -> (tensor<?x8x?xf32>) {
// GRAD-GRID: %[[ROW:.+]] = arith.muli %[[QB]], %c64
// GRAD-GRID: %[[DOT:.+]] = fa3.load_tile %[[DO]][%[[BI]], %[[ROW]], %[[H]]]
// GRAD-GRID: %[[OT:.+]] = fa3.load_tile %[[O]][%[[BI]], %[[ROW]], %[[H]]]
// GRAD-GRID: %[[RD:.+]] = fa3.row_dot %[[DOT]], %[[OT]]
// GRAD-GRID: scf.forall.in_parallel {
// GRAD-GRID-NEXT: fa3.parallel_store_stats %[[RD]] into %[[D]][%[[BI]], %[[H]], %[[ROW]]]
// GRAD-GRID: } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
// GRAD-GRID: %[[KV:.+]]:2 = scf.forall (%[[KB:.+]], %[[HKV:.+]], %[[BK:.+]]) in (%[[NKB]], 2, %[[B]]) shared_outs(%[[DK:.+]] = %{{.+}}, %[[DV:.+]] = %{{.+}}) -> (tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) {
// GRAD-GRID: %[[K0:.+]] = arith.muli %[[KB]], %c128
// GRAD-GRID: %[[KT:.+]] = fa3.load_tile %[[K]][%[[BK]], %[[K0]], %[[HKV]]] : tensor<?x?x2x128xbf16> -> tensor<128x128xbf16>
// GRAD-GRID: scf.for
// GRAD-GRID: scf.for
// GRAD-GRID: fa3.load_stats %[[DELTA]]
// GRAD-GRID: %[[DS:.+]] = fa3.softmax_grad
// GRAD-GRID: %[[DQ:.+]] = fa3.pv %[[DS]], %[[KT]], %cst{{.*}} : tensor<64x128xf32>, tensor<128x128xbf16>, tensor<64x128xf32>
// GRAD-GRID: fa3.accumulate_tile %[[DQ]] into %[[ACC]][%[[BK]], %{{.+}}, %{{.+}}] {ordered} : tensor<64x128xf32> into memref<?x?x8x128xf32>
// GRAD-GRID: %[[DKT:.+]] = fa3.scale_cast
// GRAD-GRID: %[[DVT:.+]] = fa3.scale_cast
// GRAD-GRID: scf.forall.in_parallel {
// GRAD-GRID-NEXT: fa3.parallel_store_tile %[[DKT]] into %[[DK]][%[[BK]], %[[K0]], %[[HKV]]]
// GRAD-GRID-NEXT: fa3.parallel_store_tile %[[DVT]] into %[[DV]][%[[BK]], %[[K0]], %[[HKV]]]
// GRAD-GRID: } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
// GRAD-GRID: %[[ACCT:.+]] = bufferization.to_tensor %[[ACC]] restrict
// GRAD-GRID: %[[DQR:.+]] = scf.forall (%[[PB:.+]], %[[PH:.+]], %[[PBI:.+]]) in (%[[NQB]], 8, %[[B]])
// GRAD-GRID: %[[PROW:.+]] = arith.muli %[[PB]], %c64
// GRAD-GRID: %[[AT:.+]] = fa3.load_tile %[[ACCT]][%[[PBI]], %[[PROW]], %[[PH]]] : tensor<?x?x8x128xf32> -> tensor<64x128xf32>
// GRAD-GRID: %[[DQT:.+]] = fa3.scale_cast %[[AT]]
// GRAD-GRID: fa3.parallel_store_tile %[[DQT]]
// GRAD-GRID: return %[[DQR]], %[[KV]]#0, %[[KV]]#1
func.func @grad_grid(%do: tensor<?x?x8x128xbf16>, %q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>, %o: tensor<?x?x8x128xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, deterministic} : (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>
}

//--- packed.mlir

// pack_gqa: the grid's y dimension runs over the 2 key/value heads; a tile
// holds block_m / 4 queries of the 4 query heads of its key/value head
// (first query head 4 · hkv), and the load, block and stores say so.
// PACKED-LABEL: func.func @packed
// PACKED-SAME: (%[[Q:.+]]: tensor<2x?x8x64xbf16>, %[[K:.+]]: tensor<2x?x2x64xbf16>, %[[V:.+]]: tensor<2x?x2x64xbf16>)
// PACKED: %[[SQ:.+]] = tensor.dim %[[Q]], %c1{{.*}} : tensor<2x?x8x64xbf16>
// PACKED: %[[NQB:.+]] = arith.ceildivui %[[SQ]], %c48 : index
// PACKED: scf.forall (%[[QB:.+]], %[[HKV:.+]], %[[BI:.+]]) in (%[[NQB]], 2, %{{.+}})
// PACKED: %[[H:.+]] = arith.muli %[[HKV]], %c4 : index
// PACKED: %[[Q0:.+]] = arith.muli %[[QB]], %c48{{.*}} : index
// PACKED: %[[QT:.+]] = fa3.load_tile %[[Q]][%[[BI]], %[[Q0]], %[[H]]] {packed_heads = 4 : i64} : tensor<2x?x8x64xbf16> -> tensor<192x64xbf16>
// PACKED: fa3.attention_block %[[QT]], %[[K]], %[[V]], %[[BI]], %[[HKV]], %[[Q0]], %[[SQ]] {causal, packed_heads = 4 : i64
// PACKED: fa3.parallel_store_tile %{{.+}} into %{{.+}}[%[[BI]], %[[Q0]], %[[H]]] {packed_heads = 4 : i64}
// PACKED: fa3.parallel_store_stats %{{.+}} into %{{.+}}[%[[BI]], %[[H]], %[[Q0]]] {packed_heads = 4 : i64}
// The CPU's serial loops pack alike: 16 queries of 4 heads per 64-row tile,
// the head loop over the key/value heads.
// PACKED-CPU-LABEL: func.func @packed
// PACKED-CPU: arith.ceildivui %{{.+}}, %c16 : index
// PACKED-CPU: scf.for %{{.+}} = %c0 to %c2 step %c1
// PACKED-CPU: fa3.load_tile {{.+}} {packed_heads = 4 : i64} : tensor<2x?x8x64xbf16> -> tensor<64x64xbf16>
func.func @packed(%q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>) -> (tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, pack_gqa, scale = 1.250000e-01 : f32} : (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) -> (tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>
}
