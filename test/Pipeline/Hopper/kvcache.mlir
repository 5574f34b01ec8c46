// RUN: split-file %s %t
// RUN: fa3-opt %t/decode.mlir --fa3-select-schedule=target=sm_90a --fa3-outline-hopper-kernels --fa3-tile=grid=true --fa3-fuse-softmax | FileCheck %s --check-prefix=TILE
// RUN: fa3-opt %t/decode.mlir --fa3-hopper-kernel-pipeline --mlir-print-ir-after=convert-fa3-tile-to-hopper -o /dev/null 2>&1 | FileCheck %s --check-prefix=KERNEL
// RUN: fa3-run %t/decode.mlir --function=decode --emit=ptx > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: fa3-opt %t/paged.mlir --fa3-select-schedule=target=sm_90a --fa3-outline-hopper-kernels --fa3-tile=grid=true --fa3-fuse-softmax --fa3-warp-specialize | FileCheck %s --check-prefix=PAGED-WS
// RUN: fa3-opt %t/paged.mlir --fa3-hopper-kernel-pipeline --mlir-print-ir-after=convert-fa3-tile-to-hopper -o /dev/null 2>&1 | FileCheck %s --check-prefix=PAGED-KERNEL
// RUN: fa3-run %t/paged.mlir --function=paged --emit=ptx > %t.paged.ptx
// RUN: FileCheck %s --check-prefix=PAGED-PTX < %t.paged.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.paged.ptx -o %t.paged.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: fa3-opt %t/split.mlir --fa3-select-schedule=target=sm_90a --fa3-outline-hopper-kernels --fa3-tile=grid=true | FileCheck %s --check-prefix=SPLIT-TILE
// RUN: fa3-opt %t/split.mlir --fa3-hopper-kernel-pipeline --mlir-print-ir-after=convert-fa3-tile-to-hopper -o /dev/null 2>&1 | FileCheck %s --check-prefix=SPLIT-KERNEL
// RUN: fa3-run %t/split.mlir --function=split --emit=ptx > %t.split.ptx
// RUN: FileCheck %s --check-prefix=SPLIT-PTX < %t.split.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.split.ptx -o %t.split.cubin 2>&1 | FileCheck %s --check-prefix=SPLIT-PTXAS %}

//--- decode.mlir

// fa3.attention_kvcache on Hopper (a contiguous cache, one split). The
// outlined kernel function takes cache_seqlens after the caches; the grid
// reads batch b's length (clamped to [0, the cache's rows]) and the tile
// level bounds the key loop and the mask by it. The key and value loads
// keep the length as their row limit.
// TILE-LABEL: func.func @fa3_fwd_bf16_d128_h32x8_{{.+}}_pg4_kvc_causal
// TILE-SAME: (%[[Q:.+]]: tensor<?x?x32x128xbf16>, %[[KC:.+]]: tensor<?x?x8x128xbf16>, %[[VC:.+]]: tensor<?x?x8x128xbf16>, %[[LENS:.+]]: tensor<?xi32>)
// TILE: %[[ROWS:.+]] = tensor.dim %[[KC]], %c1
// TILE: scf.forall (%{{.+}}, %{{.+}}, %[[B:.+]]) in
// TILE: %[[L:.+]] = tensor.extract %[[LENS]][%[[B]]] : tensor<?xi32>
// TILE: %[[L1:.+]] = arith.index_cast %[[L]] : i32 to index
// TILE: %[[L2:.+]] = arith.maxsi %[[L1]], %{{.+}} : index
// TILE: %[[LEN:.+]] = arith.minsi %[[L2]], %[[ROWS]] : index
// TILE: fa3.load_tile %[[KC]][%[[B]], %{{.+}}, %{{.+}}] limit %[[LEN]]
// TILE: fa3.mask {{.+}}, %[[LEN]] {causal, packed_heads = 4 : i64}
func.func @decode(%q: tensor<?x?x32x128xbf16>, %kc: tensor<?x?x8x128xbf16>, %vc: tensor<?x?x8x128xbf16>, %lens: tensor<?xi32>) -> (tensor<?x?x32x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens {causal, pack_gqa} : (tensor<?x?x32x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?xi32>) -> (tensor<?x?x32x128xbf16>, tensor<?x32x?xf32>)
  return %o, %lse : tensor<?x?x32x128xbf16>, tensor<?x32x?xf32>
}

// The kernel takes cache_seqlens as a tenth parameter (global, noalias)
// and loads batch b's length from it.
// KERNEL-LABEL: llvm.func @fa3_fwd_bf16_d128_h32x8_{{.+}}_pg4_kvc_causal
// KERNEL-SAME: %{{.+}}: !llvm.ptr<1>, %[[LENS:.+]]: !llvm.ptr<1> {llvm.noalias})
// KERNEL: %[[B:.+]] = nvvm.read.ptx.sreg.ctaid.z : i32
// KERNEL: %[[AT:.+]] = llvm.getelementptr %[[LENS]][%[[B]]] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
// KERNEL: llvm.load %[[AT]] {alignment = 4 : i64} : !llvm.ptr<1> -> i32

// PTX: .entry fa3_fwd_bf16_d128_h32x8_{{.+}}_pg4_kvc_causal
// PTX: .param .u64 .ptr .global .align 1 fa3_fwd_{{.+}}_param_9
// PTX: ld.global.nc.b32

// PTXAS: 0 bytes spill stores, 0 bytes spill loads

//--- paged.mlir

// A paged cache: the kernel function takes the page table fifth; the key
// length is clamped to the max_pages * page_size keys the table
// addresses; the producer's key and value fills keep the table (their row
// is the position in the sequence).
// PAGED-WS-LABEL: func.func @fa3_fwd_bf16_d128_h32x8_{{.+}}_pg4_kvc_paged_causal
// PAGED-WS-SAME: (%{{.+}}: tensor<?x?x32x128xbf16>, %[[KC:.+]]: tensor<?x?x8x128xbf16>, %[[VC:.+]]: tensor<?x?x8x128xbf16>, %{{.+}}: tensor<?xi32>, %[[PT:.+]]: tensor<?x?xi32>)
// PAGED-WS: %[[PS:.+]] = tensor.dim %[[KC]], %c1
// PAGED-WS: %[[W:.+]] = tensor.dim %[[PT]], %c1
// PAGED-WS: %[[ROWS:.+]] = arith.muli %[[W]], %[[PS]] : index
// PAGED-WS: %[[LEN:.+]] = arith.minsi %{{.+}}, %[[ROWS]] : index
// PAGED-WS: fa3.warp_specialize
// PAGED-WS: fa3.ring_fill %[[KC]][%{{.+}}, %{{.+}}, %{{.+}}] pages %[[PT]] : tensor<?x?xi32> use
// PAGED-WS: fa3.ring_fill %[[VC]][%{{.+}}, %{{.+}}, %{{.+}}] pages %[[PT]] : tensor<?x?xi32> use
// PAGED-WS: } consumers {
// PAGED-WS: fa3.load_paged_tile %[[KC]][%[[PT]], %{{.+}}, %{{.+}}, %{{.+}}] limit %[[LEN]]
func.func @paged(%q: tensor<?x?x32x128xbf16>, %kc: tensor<?x?x8x128xbf16>, %vc: tensor<?x?x8x128xbf16>, %lens: tensor<?xi32>, %pages: tensor<?x?xi32>) -> (tensor<?x?x32x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens, %pages {causal, pack_gqa} : (tensor<?x?x32x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?xi32>, tensor<?x?xi32>) -> (tensor<?x?x32x128xbf16>, tensor<?x32x?xf32>)
  return %o, %lse : tensor<?x?x32x128xbf16>, tensor<?x32x?xf32>
}

// The kernel takes the page table, its width, the page size and the chunk
// rows after cache_seqlens; the producer's K and V loads go through the
// table (fa3.tma_load_paged_tile), the table's width and the page size are
// what the tile level's tensor.dims of the table and the cache read.
// PAGED-KERNEL-LABEL: llvm.func @fa3_fwd_bf16_d128_h32x8_{{.+}}_pg4_kvc_paged_causal
// PAGED-KERNEL-SAME: %{{.+}}: !llvm.ptr<1> {llvm.noalias}, %[[PT:.+]]: !llvm.ptr<1> {llvm.noalias}, %[[W:.+]]: i32, %[[PS:.+]]: i32, %[[CHUNK:.+]]: i32)
// PAGED-KERNEL: arith.muli %[[W]], %[[PS]] : i32
// PAGED-KERNEL: fa3.tma_load_paged_tile %arg1[%{{.+}}, %{{.+}}, %{{.+}}] pages %[[PT]][%[[W]], %[[PS]], %[[CHUNK]]] to
// PAGED-KERNEL: fa3.tma_load_paged_tile %arg1[%{{.+}}, %{{.+}}, %{{.+}}] pages %[[PT]][%[[W]], %[[PS]], %[[CHUNK]]] to
// PAGED-KERNEL: fa3.tma_load_paged_tile %arg2[%{{.+}}, %{{.+}}, %{{.+}}] pages %[[PT]][%[[W]], %[[PS]], %[[CHUNK]]] to
// PAGED-KERNEL-NOT: fa3.tma_load_tile %arg1
// PAGED-KERNEL-NOT: fa3.tma_load_tile %arg2

// PAGED-PTX: .entry fa3_fwd_bf16_d128_h32x8_{{.+}}_pg4_kvc_paged_causal
// PAGED-PTX: .param .u32 fa3_fwd_{{.+}}_param_13
// PAGED-PTX: ld.global.nc.b32
// PAGED-PTX: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes

//--- split.mlir

// Split-KV (num_splits = 4): the grid's z runs over 4·B, split s of batch
// b at z = s·B + b; each CTA attends to its split's key blocks and stores
// f32 partials at batch z; fa3.combine_splits merges them after the forall.
// SPLIT-TILE-LABEL: func.func @fa3_fwd_bf16_d64_h8x2_{{.+}}_kvc_split4
// SPLIT-TILE: %[[B:.+]] = tensor.dim %arg0, %c0
// SPLIT-TILE: %[[PO:.+]] = tensor.empty(%{{.+}}, %{{.+}}) : tensor<?x?x8x64xf32>
// SPLIT-TILE: %[[Z:.+]] = arith.muli %[[B]], %c4
// SPLIT-TILE: %[[PARTS:.+]]:2 = scf.forall (%{{.+}}, %{{.+}}, %[[ZIV:.+]]) in (%{{.+}}, 8, %[[Z]])
// SPLIT-TILE: %[[S:.+]] = arith.divui %[[ZIV]], %[[B]] : index
// SPLIT-TILE: %[[BB:.+]] = arith.remui %[[ZIV]], %[[B]] : index
// SPLIT-TILE: tensor.extract %arg3[%[[BB]]]
// SPLIT-TILE: fa3.attention_block {{.+}} split[%{{.+}}, %{{.+}}] {
// SPLIT-TILE: -> tensor<192x64xf32>, tensor<192xf32>
// SPLIT-TILE: fa3.parallel_store_tile %{{.+}} into %{{.+}}[%[[ZIV]],
// SPLIT-TILE: fa3.parallel_store_stats %{{.+}} into %{{.+}}[%[[ZIV]],
// SPLIT-TILE-DAG: %[[VO:.+]] = tensor.expand_shape %[[PARTS]]#0 {{.+}} into tensor<4x?x?x8x64xf32>
// SPLIT-TILE-DAG: %[[VL:.+]] = tensor.expand_shape %[[PARTS]]#1 {{.+}} into tensor<4x?x8x?xf32>
// SPLIT-TILE: %[[O:.+]], %[[L:.+]] = fa3.combine_splits %[[VO]], %[[VL]]
// SPLIT-TILE: return %[[O]], %[[L]]
func.func @split(%q: tensor<?x?x8x64xbf16>, %kc: tensor<?x?x2x64xbf16>, %vc: tensor<?x?x2x64xbf16>, %lens: tensor<?xi32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens {num_splits = 4 : i64} : (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?xi32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>
}

// Two kernels: the split kernel takes a plain pointer for the f32 partial
// O (in the O tensor map's place: three maps by value) and stores each
// thread's column pairs as 8-byte vectors; the combine kernel (partial O,
// partial LSE, O, LSE, Sq, B) weighs the splits by exp(lse_s - max), with
// max = -inf (no key in any split) weighed against 0 instead.
// SPLIT-KERNEL-LABEL: llvm.func @fa3_fwd_bf16_d64_h8x2_{{.+}}_kvc_split4_{{[a-z0-9]+}}(
// SPLIT-KERNEL-SAME: %arg2: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<16 x i64>, nvvm.grid_constant}, %arg3: !llvm.ptr<1> {llvm.noalias}, %arg4: !llvm.ptr<1> {llvm.noalias}
// SPLIT-KERNEL: llvm.store %{{.+}}, %{{.+}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<1>
// SPLIT-KERNEL-NOT: fa3.tma_store_tile
// SPLIT-KERNEL-LABEL: llvm.func @fa3_fwd_bf16_d64_h8x2_{{.+}}_kvc_split4_{{[a-z0-9]+}}_combine(
// SPLIT-KERNEL-SAME: %{{.+}}: !llvm.ptr<1> {llvm.noalias}, %{{.+}}: !llvm.ptr<1> {llvm.noalias}, %{{.+}}: !llvm.ptr<1> {llvm.noalias}, %{{.+}}: !llvm.ptr<1> {llvm.noalias}, %{{.+}}: i32, %{{.+}}: i32)
// SPLIT-KERNEL-SAME: nvvm.maxntid = array<i32: 128, 1, 1>
// SPLIT-KERNEL: %[[NONE:.+]] = arith.cmpf oeq, %[[MAX:.+]], %{{.+}} : f32
// SPLIT-KERNEL: arith.select %[[NONE]], %{{.+}}, %[[MAX]] : f32
// SPLIT-KERNEL: llvm.load %{{.+}} {alignment = 8 : i64} : !llvm.ptr<1> -> vector<2xf32>
// SPLIT-KERNEL: llvm.call_intrinsic "llvm.nvvm.lg2.approx.f"

// SPLIT-PTX: .entry fa3_fwd_bf16_d64_h8x2_{{.+}}_kvc_split4_{{[a-z0-9]+}}(
// SPLIT-PTX: st.global.v2.b32
// SPLIT-PTX: .entry fa3_fwd_bf16_d64_h8x2_{{.+}}_kvc_split4_{{[a-z0-9]+}}_combine(
// SPLIT-PTX: ld.global.nc.v2.b32

// SPLIT-PTXAS-COUNT-2: 0 bytes spill stores, 0 bytes spill loads
