// RUN: split-file %s %t
// RUN: fa3-opt %t/ops.mlir | fa3-opt | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: fa3-opt %t/ops.mlir --fa3-select-schedule --fa3-tile --canonicalize | FileCheck %s --check-prefix=TILE
// RUN: fa3-opt %t/ops.mlir --fa3-select-schedule --fa3-tile --fa3-fuse-softmax --canonicalize | FileCheck %s --check-prefix=FUSED
// RUN: not fa3-opt %t/ops.mlir --fa3-select-schedule --fa3-tile=grid=true 2>&1 | FileCheck %s --check-prefix=GRID
// RUN: fa3-opt %t/pack.mlir --fa3-select-schedule --fa3-tile --fa3-fuse-softmax --canonicalize --cse | FileCheck %s --check-prefix=PACK
// RUN: fa3-opt %t/grad.mlir --fa3-select-schedule --fa3-tile --canonicalize --cse | FileCheck %s --check-prefix=VGRAD

// The inference ops through fa3-tile and fa3-fuse-softmax: packed sequences
// become row offsets and limits of the tile ops, cache lengths the key_len
// of each block, a page table paged key loads.

//--- ops.mlir

// ROUNDTRIP-LABEL: func.func @varlen
// ROUNDTRIP: fa3.attention_varlen %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {causal}
// ROUNDTRIP-LABEL: func.func @paged
// ROUNDTRIP: fa3.attention_kvcache %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {window = array<i64: 32, -1>}
// ROUNDTRIP-LABEL: func.func @append
// ROUNDTRIP: fa3.kvcache_append

// Sequence b: queries from cu_seqlens_q[b], ceildiv(its length, 64) query
// blocks, loads and stores bounded by cu_seqlens_q[b + 1]; the block reads
// keys from cu_seqlens_k[b], seqused_k[b] of them.
// TILE-LABEL: func.func @varlen
// TILE-SAME: (%[[Q:[^:]+]]: tensor<?x4x64xbf16>, %[[K:[^:]+]]: tensor<?x2x64xbf16>, %[[V:[^:]+]]: tensor<?x2x64xbf16>, %[[CUQ:[^:]+]]: tensor<?xi32>, %[[CUK:[^:]+]]: tensor<?xi32>, %[[USED:[^:]+]]: tensor<?xi32>)
// TILE-DAG: %[[Q4:.+]] = tensor.expand_shape %[[Q]] {{\[}}[0, 1], [2], [3]] {{.+}} into tensor<1x?x4x64xbf16>
// TILE-DAG: %[[K4:.+]] = tensor.expand_shape %[[K]] {{.+}} into tensor<1x?x2x64xbf16>
// TILE-DAG: %[[ZERO_O:.+]] = linalg.fill {{.+}} -> tensor<1x?x4x64xbf16>
// TILE-DAG: %[[NEGINF_L:.+]] = linalg.fill {{.+}} -> tensor<1x4x?xf32>
// TILE: scf.for %[[SEQ:[^ ]+]] = {{.+}} iter_args({{.+}} = %[[ZERO_O]], {{.+}} = %[[NEGINF_L]])
// TILE: %[[Q0I:.+]] = tensor.extract %[[CUQ]][%[[SEQ]]] : tensor<?xi32>
// TILE: %[[Q0:.+]] = arith.maxsi
// TILE: %[[Q1I:.+]] = tensor.extract %[[CUQ]][{{.+}}] : tensor<?xi32>
// TILE: %[[QEND:.+]] = arith.maxsi %{{.+}}, %[[Q0]] : index
// TILE: %[[QLEN:.+]] = arith.subi %[[QEND]], %[[Q0]] : index
// TILE: tensor.extract %[[CUK]][%[[SEQ]]] : tensor<?xi32>
// TILE: %[[K0:.+]] = arith.maxsi
// TILE: %[[NQB:.+]] = arith.ceildivui %[[QLEN]], %{{.+}} : index
// TILE: tensor.extract %[[USED]][%[[SEQ]]] : tensor<?xi32>
// TILE: %[[KLEN:.+]] = arith.maxsi
// TILE: scf.for
// TILE: scf.for %{{.+}} = %{{.+}} to %[[NQB]]
// TILE: %[[ROW:.+]] = arith.addi %[[Q0]], %[[QS:.+]] : index
// TILE: %[[QT:.+]] = fa3.load_tile %[[Q4]][%{{.+}}, %[[ROW]], %{{.+}}] limit %[[QEND]] : tensor<1x?x4x64xbf16> -> tensor<64x64xbf16>
// TILE: fa3.attention_block %[[QT]], %[[K4]], %{{.+}}, %{{.+}}, %{{.+}}, %[[QS]], %[[QLEN]] key_start %[[K0]] key_len %[[KLEN]] {causal,
// TILE: fa3.store_tile {{.+}}[%{{.+}}, %[[ROW]], %{{.+}}] limit %[[QEND]] : tensor<64x64xbf16> into tensor<1x?x4x64xbf16>
// TILE: fa3.store_stats {{.+}}[%{{.+}}, %{{.+}}, %[[ROW]]] limit %[[QEND]] : tensor<64xf32> into tensor<1x4x?xf32>
// TILE: tensor.collapse_shape {{.+}} into tensor<?x4x64xbf16>
// TILE: tensor.collapse_shape {{.+}} into tensor<4x?xf32>

// FUSED-LABEL: func.func @varlen
// FUSED: %[[K4:.+]] = tensor.expand_shape %arg1
// FUSED: %[[V4:.+]] = tensor.expand_shape %arg2
// The key loop stops at the sequence's own keys; loads start at its first
// key row and stop at key_start + key_len.
// FUSED: tensor.extract %arg4[
// FUSED: %[[KSTART:.+]] = arith.maxsi
// FUSED: tensor.extract %arg5[
// FUSED: %[[KLEN:.+]] = arith.maxsi
// FUSED: %[[KEND:.+]] = arith.addi %[[KSTART]], %[[KLEN]] : index
// FUSED: scf.for %[[KB:[^ ]+]] = {{.+}} -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>)
// FUSED: %[[K0:.+]] = arith.muli %[[KB]], %{{.+}} : index
// FUSED: %[[KROW:.+]] = arith.addi %[[KSTART]], %[[K0]] : index
// FUSED: fa3.load_tile %[[K4]][%{{.+}}, %[[KROW]], %{{.+}}] limit %[[KEND]]
// FUSED: fa3.load_tile %[[V4]][%{{.+}}, %{{.+}}, %{{.+}}] limit %[[KEND]]
// The mask is in the sequence's coordinates: row/column offsets within it,
// its own lengths.
// FUSED: fa3.mask %{{.+}}, %{{.+}}, %[[K0]], %{{.+}}, %[[KLEN]] {causal}
func.func @varlen(%q: tensor<?x4x64xbf16>, %k: tensor<?x2x64xbf16>, %v: tensor<?x2x64xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>, %used: tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>) {
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk, %used {causal}
      : (tensor<?x4x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>)
  return %o, %lse : tensor<?x4x64xbf16>, tensor<4x?xf32>
}

// Batch b's block reads cache_seqlens[b] keys through the page table,
// clamped to the max_pages * page_size keys the table addresses.
// TILE-LABEL: func.func @paged
// TILE-SAME: (%[[Q:[^:]+]]: tensor<?x?x8x64xf16>, %[[KC:[^:]+]]: tensor<?x16x2x64xf16>, %[[VC:[^:]+]]: tensor<?x16x2x64xf16>, %[[LENS:[^:]+]]: tensor<?xi32>, %[[PT:[^:]+]]: tensor<?x?xi32>)
// TILE: %[[W:.+]] = tensor.dim %[[PT]], %c1
// TILE: %[[ROWS:.+]] = arith.muli %[[W]], %c16 : index
// TILE: scf.for %[[B:[^ ]+]] = {{.+}}
// TILE: tensor.extract %[[LENS]][%[[B]]] : tensor<?xi32>
// TILE: arith.maxsi
// TILE: %[[LEN:.+]] = arith.minsi %{{.+}}, %[[ROWS]] : index
// TILE: fa3.load_tile %[[Q]][%[[B]], %{{.+}}, %{{.+}}] : tensor<?x?x8x64xf16>
// TILE: fa3.attention_block %{{.+}}, %[[KC]], %[[VC]], %[[B]], %{{.+}}, %{{.+}}, %{{.+}} key_len %[[LEN]] pages %[[PT]] {scale
// TILE-SAME: window = array<i64: 32, -1>
// TILE-SAME: : tensor<64x64xf16>, tensor<?x16x2x64xf16>, tensor<?x16x2x64xf16>, tensor<?x?xi32> -> tensor<64x64xf16>, tensor<64xf32>

// FUSED-LABEL: func.func @paged
// FUSED: arith.maxsi
// FUSED: %[[LEN:.+]] = arith.minsi
// FUSED: scf.for %[[KB:[^ ]+]] = {{.+}} -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>)
// FUSED: %[[K0:.+]] = arith.muli %[[KB]]
// FUSED: fa3.load_paged_tile %arg1[%arg4, %{{.+}}, %[[K0]], %{{.+}}] limit %[[LEN]] : tensor<?x16x2x64xf16>, tensor<?x?xi32> -> tensor<64x64xf16>
// FUSED: fa3.load_paged_tile %arg2[%arg4, %{{.+}}, %[[K0]], %{{.+}}] limit %[[LEN]]
func.func @paged(%q: tensor<?x?x8x64xf16>, %kc: tensor<?x16x2x64xf16>, %vc: tensor<?x16x2x64xf16>, %lens: tensor<?xi32>, %pt: tensor<?x?xi32>) -> (tensor<?x?x8x64xf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens, %pt {window = array<i64: 32, -1>}
      : (tensor<?x?x8x64xf16>, tensor<?x16x2x64xf16>, tensor<?x16x2x64xf16>, tensor<?xi32>, tensor<?x?xi32>) -> (tensor<?x?x8x64xf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xf16>, tensor<?x8x?xf32>
}

// One row at a time: position cache_seqlens[b] + i, at the row itself in a
// contiguous cache; rows past the cache are dropped.
// TILE-LABEL: func.func @append
// TILE-SAME: (%[[KC:[^:]+]]: tensor<?x?x2x64xf16>, %[[VC:[^:]+]]: tensor<?x?x2x64xf16>, %[[K:[^:]+]]: tensor<?x?x2x64xf16>, %[[V:[^:]+]]: tensor<?x?x2x64xf16>, %[[LENS:[^:]+]]: tensor<?xi32>)
// TILE: %[[CAP:.+]] = tensor.dim %[[KC]], %c1
// TILE: scf.for %[[B:[^ ]+]] = {{.+}} iter_args(%{{.+}} = %[[KC]], %{{.+}} = %[[VC]])
// TILE: %[[BASE:.+]] = arith.maxsi
// TILE: scf.for %[[I:[^ ]+]] = {{.+}} iter_args(%[[KI:.+]] = %{{.+}}, %[[VI:.+]] = %{{.+}})
// TILE: %[[POS:.+]] = arith.addi %[[BASE]], %[[I]] : index
// TILE: %[[IN:.+]] = arith.cmpi slt, %[[POS]], %[[CAP]] : index
// TILE: scf.if %[[IN]]
// TILE: %[[ROW:.+]] = tensor.extract_slice %[[K]][%[[B]], %[[I]], 0, 0] [1, 1, 2, 64]
// TILE: tensor.insert_slice %[[ROW]] into %[[KI]][%[[B]], %[[POS]], 0, 0] [1, 1, 2, 64]
func.func @append(%kc: tensor<?x?x2x64xf16>, %vc: tensor<?x?x2x64xf16>, %k: tensor<?x?x2x64xf16>, %v: tensor<?x?x2x64xf16>, %lens: tensor<?xi32>) -> (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>) {
  %a, %b = fa3.kvcache_append %kc, %vc, %k, %v, %lens
      : (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?xi32>) -> (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>)
  return %a, %b : tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>
}

// Split-KV: a loop over 3 splits outside the batch loop; split s of batch b
// takes key blocks [s·n, s·n + n) of its ceildiv(len, 64), n = ceildiv(blocks,
// 3), with f32 partial results at batch s·B + b; fa3.combine_splits merges
// them after the loops.
// TILE-LABEL: func.func @split_kv
// TILE: %[[B:.+]] = tensor.dim %arg0, %c0
// TILE: %[[ROWS:.+]] = arith.muli %[[B]], %c3 : index
// TILE: %[[PARTS:.+]] = tensor.empty(%[[ROWS]], %{{.+}}) : tensor<?x?x4x64xf32>
// TILE: %[[LSES:.+]] = tensor.empty(%[[ROWS]], %{{.+}}) : tensor<?x4x?xf32>
// TILE: %[[LOOPS:.+]]:2 = scf.for %[[S:[^ ]+]] = %c0 to %c3 step %c1 iter_args({{.+}} = %[[PARTS]], {{.+}} = %[[LSES]])
// TILE: scf.for %[[BI:[^ ]+]] = %c0 to %[[B]]
// TILE: %[[LEN0:.+]] = arith.maxsi
// TILE: %[[LEN:.+]] = arith.minsi %[[LEN0]], %{{.+}} : index
// TILE: %[[BLOCKS:.+]] = arith.ceildivsi %[[LEN]], %c64 : index
// TILE: %[[PER:.+]] = arith.ceildivsi %[[BLOCKS]], %c3 : index
// TILE: %[[FIRST0:.+]] = arith.muli %[[S]], %[[PER]] : index
// TILE: %[[FIRST:.+]] = arith.minsi %[[FIRST0]], %[[BLOCKS]] : index
// TILE: %[[LAST0:.+]] = arith.addi %[[FIRST]], %[[PER]] : index
// TILE: %[[LAST:.+]] = arith.minsi %[[LAST0]], %[[BLOCKS]] : index
// TILE: %[[SB0:.+]] = arith.muli %[[S]], %[[B]] : index
// TILE: %[[SB:.+]] = arith.addi %[[SB0]], %[[BI]] : index
// TILE: fa3.attention_block {{.+}} key_len %[[LEN]] split[%[[FIRST]], %[[LAST]]] {causal
// TILE-SAME: -> tensor<64x64xf32>, tensor<64xf32>
// TILE: fa3.store_tile %{{.+}} into %{{.+}}[%[[SB]], %{{.+}}, %{{.+}}] : tensor<64x64xf32> into tensor<?x?x4x64xf32>
// TILE: %[[P5:.+]] = tensor.expand_shape %[[LOOPS]]#0 {{\[}}[0, 1], [2], [3], [4]] output_shape [3, %[[B]], {{.+}}] : tensor<?x?x4x64xf32> into tensor<3x?x?x4x64xf32>
// TILE: %[[O:.+]], %[[L:.+]] = fa3.combine_splits %[[P5]], %{{.+}} : (tensor<3x?x?x4x64xf32>, tensor<3x?x4x?xf32>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>)
// TILE: return %[[O]], %[[L]]

// The split's key loop runs its key blocks only.
// FUSED-LABEL: func.func @split_kv
// FUSED: %[[BLOCKS:.+]] = arith.ceildivsi %{{.+}}, %c64 : index
// FUSED: %[[FIRST:.+]] = arith.minsi %{{.+}}, %[[BLOCKS]] : index
// FUSED: %[[LAST:.+]] = arith.minsi %{{.+}}, %[[BLOCKS]] : index
// FUSED: %[[LO:.+]] = arith.maxsi {{.*}}%[[FIRST]]{{.*}} : index
// FUSED: %[[HI0:.+]] = arith.minsi {{.*}}%[[LAST]]{{.*}} : index
// FUSED: %[[HI:.+]] = arith.maxsi %[[LO]], %[[HI0]] : index
// FUSED: scf.for %{{.+}} = %[[LO]] to %[[HI]] step
// FUSED: fa3.finalize {{.+}} -> tensor<64x64xf32>
func.func @split_kv(%q: tensor<?x?x4x64xbf16>, %kc: tensor<?x?x2x64xbf16>, %vc: tensor<?x?x2x64xbf16>, %lens: tensor<?xi32>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens {causal, num_splits = 3 : i64}
      : (tensor<?x?x4x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?xi32>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
}

// Split-KV on a packed batch: one [1, T, ...] slab of partials per split
// (zero/-inf filled: rows outside every sequence), merged, then unpacked.
// TILE-LABEL: func.func @varlen_split
// TILE: %[[P0:.+]] = linalg.fill {{.+}} -> tensor<2x?x4x64xf32>
// TILE: %[[L0:.+]] = linalg.fill {{.+}} -> tensor<2x4x?xf32>
// TILE: %[[R:.+]]:2 = scf.for %{{.+}} = %c0 to %c2 step %c1 iter_args(%{{.+}} = %[[P0]], %{{.+}} = %[[L0]])
// TILE: fa3.attention_block {{.+}} key_start %{{.+}} key_len %{{.+}} split[%{{.+}}, %{{.+}}]
// TILE: %[[O:.+]], %[[L:.+]] = fa3.combine_splits %{{.+}}, %{{.+}} : (tensor<2x1x?x4x64xf32>, tensor<2x1x4x?xf32>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>)
// TILE: tensor.collapse_shape %[[O]] {{.+}} into tensor<?x4x64xbf16>
// TILE: tensor.collapse_shape %[[L]] {{.+}} into tensor<4x?xf32>
func.func @varlen_split(%q: tensor<?x4x64xbf16>, %k: tensor<?x2x64xbf16>, %v: tensor<?x2x64xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>) {
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {num_splits = 2 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>)
  return %o, %lse : tensor<?x4x64xbf16>, tensor<4x?xf32>
}

// (fa3.attention_varlen and fa3.attention_kvcache, paged or split, have a
// grid form: no error; test/Pipeline/Hopper/varlen.mlir checks it.)
// GRID-NOT: error: 'fa3.attention_varlen'
// GRID-NOT: error: 'fa3.attention_kvcache'
// GRID: error: 'fa3.kvcache_append' op has no grid (GPU) tiling yet: fa3-tile{grid=true} tiles fa3.attention, fa3.attention_grad, fa3.attention_varlen, fa3.attention_varlen_grad and fa3.attention_kvcache; the CPU pipeline runs it
// GRID-NOT: error: 'fa3.attention_kvcache'
// GRID-NOT: error: 'fa3.attention_varlen'

//--- grad.mlir

// The packed backward: fa3.attention_grad's three nests inside a loop over
// the sequences, every query-side load and store bounded by the sequence's
// end (its LSE and Δ too), every key-side one by its keys' end; dK and dV
// start zero-filled (rows outside every sequence are written by no tile).
// VGRAD-LABEL: func.func @varlen_grad
// (CSE shares the zero-filled dK and dV inits.)
// VGRAD: %[[ZKV:.+]] = linalg.fill {{.+}} -> tensor<1x?x2x64xf16>
// VGRAD: scf.for
// VGRAD: fa3.row_dot
// VGRAD: fa3.store_stats {{.+}} limit
// VGRAD: scf.for %[[SEQ:[^ ]+]] = {{.+}} iter_args(%{{.+}} = %[[ZKV]], %{{.+}} = %[[ZKV]], {{.+}}) -> (tensor<1x?x2x64xf16>, tensor<1x?x2x64xf16>, tensor<1x?x4x64xf32>)
// VGRAD: %[[K0I:.+]] = tensor.extract %arg7[%[[SEQ]]] : tensor<?xi32>
// VGRAD: fa3.load_tile %{{.+}}[%c0, %{{.+}}, %{{.+}}] limit %[[KEND:[^ ]+]] : tensor<1x?x2x64xf16> -> tensor<64x64xf16>
// VGRAD: fa3.load_stats %{{.+}} limit %[[QEND:[^ ]+]] : tensor<1x4x?xf32> -> tensor<64xf32>
// VGRAD: fa3.load_stats %{{.+}} limit %[[QEND]] : tensor<1x4x?xf32> -> tensor<64xf32>
// VGRAD: fa3.mask
// VGRAD: fa3.softmax_grad
// VGRAD: fa3.store_tile {{.+}} limit %[[KEND]] : tensor<64x64xf16> into tensor<1x?x2x64xf16>
// VGRAD: fa3.store_tile {{.+}} limit %[[KEND]] : tensor<64x64xf16> into tensor<1x?x2x64xf16>
// VGRAD: fa3.scale_cast
// VGRAD: tensor.collapse_shape {{.+}} into tensor<?x4x64xf16>
// VGRAD: tensor.collapse_shape {{.+}} into tensor<?x2x64xf16>
// VGRAD: tensor.collapse_shape {{.+}} into tensor<?x2x64xf16>
func.func @varlen_grad(%do: tensor<?x4x64xf16>, %q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %o: tensor<?x4x64xf16>, %lse: tensor<4x?xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>) {
  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk {causal}
      : (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?x4x64xf16>, tensor<4x?xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>)
  return %dq, %dk, %dv : tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>
}

// With seqused_k (and the LSE's gradient), a sequence's keys end at
// cu_seqlens_k[b] + seqused_k[b]: the key-side loads and the dK/dV stores
// are bounded there, so the unused keys keep their zero gradients.
// VGRAD-LABEL: func.func @varlen_grad_used
// VGRAD: scf.for %[[SEQ:[^ ]+]] = {{.+}} iter_args(
// VGRAD: %[[KB:.+]] = tensor.extract %arg7[%[[SEQ]]] : tensor<?xi32>
// VGRAD: %[[USED:.+]] = tensor.extract %arg8[%[[SEQ]]] : tensor<?xi32>
// VGRAD: %[[USEDI:.+]] = arith.index_cast %[[USED]] : i32 to index
// VGRAD: %[[USEDC:.+]] = arith.maxsi %[[USEDI]], %c0 : index
// VGRAD: %[[KEND:.+]] = arith.addi %{{.+}}, %[[USEDC]] : index
// VGRAD: fa3.load_tile %{{.+}}[%c0, %{{.+}}, %{{.+}}] limit %[[KEND]] : tensor<1x?x2x64xf16> -> tensor<64x64xf16>
// VGRAD: fa3.store_tile {{.+}} limit %[[KEND]] : tensor<64x64xf16> into tensor<1x?x2x64xf16>
// VGRAD: fa3.store_tile {{.+}} limit %[[KEND]] : tensor<64x64xf16> into tensor<1x?x2x64xf16>
func.func @varlen_grad_used(%do: tensor<?x4x64xf16>, %q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %o: tensor<?x4x64xf16>, %lse: tensor<4x?xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>, %used: tensor<?xi32>, %dlse: tensor<4x?xf32>) -> (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>) {
  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk seqused_k %used grad_lse %dlse
      : (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?x4x64xf16>, tensor<4x?xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<4x?xf32>) -> (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>)
  return %dq, %dk, %dv : tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>
}

//--- pack.mlir

// PackGQA: the head loop runs over the 2 KV heads; each 64-row tile holds
// the 4 query heads of 16 queries (ceildiv(Sq, 16) tiles), loaded, masked
// and stored with packed_heads = 4 from query head 4·hkv.
// PACK-LABEL: func.func @pack
// PACK-DAG: %[[C16:.+]] = arith.constant 16 : index
// PACK-DAG: %[[C4:.+]] = arith.constant 4 : index
// PACK: %[[SQ:.+]] = tensor.dim %arg0, %c1
// PACK: %[[NQB:.+]] = arith.ceildivui %[[SQ]], %[[C16]] : index
// PACK: scf.for %[[HKV:[^ ]+]] = %c0 to %c2 step
// PACK: scf.for %[[QB:[^ ]+]] = %c0 to %[[NQB]] step
// PACK: %[[H0:.+]] = arith.muli %[[HKV]], %[[C4]] : index
// PACK: %[[Q0:.+]] = arith.muli %[[QB]], %[[C16]] : index
// PACK: fa3.load_tile %arg0[%{{.+}}, %[[Q0]], %[[H0]]] {packed_heads = 4 : i64} : tensor<?x?x8x64xbf16> -> tensor<64x64xbf16>
// PACK: fa3.load_paged_tile %arg1[%arg4, %{{.+}}, %{{.+}}, %[[HKV]]]
// PACK: fa3.mask %{{.+}}, %[[Q0]], {{.+}} {causal, packed_heads = 4 : i64}
// PACK: fa3.store_tile {{.+}}[%{{.+}}, %[[Q0]], %[[H0]]] {packed_heads = 4 : i64}
// PACK: fa3.store_stats {{.+}}[%{{.+}}, %[[H0]], %[[Q0]]] {packed_heads = 4 : i64}
func.func @pack(%q: tensor<?x?x8x64xbf16>, %kc: tensor<?x16x2x64xbf16>, %vc: tensor<?x16x2x64xbf16>, %lens: tensor<?xi32>, %pt: tensor<?x?xi32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens, %pt {causal, pack_gqa}
      : (tensor<?x?x8x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?xi32>, tensor<?x?xi32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>
}
