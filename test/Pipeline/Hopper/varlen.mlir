// RUN: split-file %s %t
// RUN: fa3-opt %t/varlen.mlir --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-fuse-softmax,fa3-warp-specialize,canonicalize,cse)))" | FileCheck %s --check-prefix=WS
// RUN: fa3-opt %t/varlen.mlir --fa3-hopper-kernel-pipeline --mlir-print-ir-after=convert-fa3-tile-to-hopper -o /dev/null 2>&1 | FileCheck %s --check-prefix=KERNEL
// RUN: fa3-opt %t/varlen.mlir --fa3-hopper-pipeline | FileCheck %s --check-prefix=LAUNCH
// RUN: fa3-run %t/varlen.mlir --function=varlen --emit=ptx > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: fa3-run %t/used.mlir --function=used --emit=ptx --block-m=64 > %t.used.ptx
// RUN: FileCheck %s --check-prefix=USED-PTX < %t.used.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.used.ptx -o %t.used.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: fa3-opt %t/packed.mlir --fa3-hopper-kernel-pipeline --mlir-print-ir-after=convert-fa3-tile-to-hopper -o /dev/null 2>&1 | FileCheck %s --check-prefix=PACKED
// RUN: fa3-run %t/packed.mlir --function=packed --emit=ptx > %t.packed.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.packed.ptx -o %t.packed.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}

//--- varlen.mlir

// fa3.attention_varlen on Hopper. The kernel function takes the packed
// [T, H, D] tensors and the offsets; fa3-tile{grid=true} views Q, K and V
// as [1, T, H, D], fills the outputs (O = 0, LSE = -inf: the launch's
// fills), and runs x over ceildiv(T_q, 128) query blocks, y over the heads
// and z over the B = dim(cu_seqlens_q) - 1 sequences. Each CTA's query
// tile and both stores start at row cu_seqlens_q[b] + x * 128 and end at
// cu_seqlens_q[b + 1]; its key tiles start at cu_seqlens_k[b].
// fa3-warp-specialize fills the query tile whole (the stores drop the rows
// past the sequence's end) and keeps the consumers' limits.
// WS-LABEL: func.func @fa3_fwd_bf16_d128_h32x8_{{.+}}_varlen_causal
// WS-SAME: (%[[Q:.+]]: tensor<?x32x128xbf16>, %[[K:.+]]: tensor<?x8x128xbf16>, %{{.+}}: tensor<?x8x128xbf16>, %[[CUQ:.+]]: tensor<?xi32>, %[[CUK:.+]]: tensor<?xi32>)
// WS: %[[TQ:.+]] = tensor.dim %[[Q]], %c0
// WS: %[[QV:.+]] = tensor.expand_shape %[[Q]] {{.+}} into tensor<1x?x32x128xbf16>
// WS: %[[KV:.+]] = tensor.expand_shape %[[K]] {{.+}} into tensor<1x?x8x128xbf16>
// WS: %[[O0:.+]] = linalg.fill ins(%{{.+}} : bf16)
// WS: %[[L0:.+]] = linalg.fill ins(%{{.+}} : f32)
// WS: %[[N:.+]] = tensor.dim %[[CUQ]], %c0
// WS: %[[B:.+]] = arith.subi %[[N]], %c1
// WS: %[[X:.+]] = arith.ceildivui %[[TQ]], %c128
// WS: scf.forall (%[[BX:.+]], %[[H:.+]], %[[S:.+]]) in (%[[X]], 32, %[[B]]) shared_outs(%{{.+}} = %[[O0]], %{{.+}} = %[[L0]])
// WS: %[[QSTART:.+]] = arith.muli %[[BX]], %c128
// WS: tensor.extract %[[CUQ]][%[[S]]]
// WS: %[[CK:.+]] = tensor.extract %[[CUK]][%[[S]]]
// WS: %[[CKI:.+]] = arith.index_cast %[[CK]]
// WS: %[[KSTART:.+]] = arith.maxsi %[[CKI]], %c0
// WS: %[[ROW:.+]] = arith.addi %{{.+}}, %[[QSTART]]
// WS: fa3.warp_specialize
// WS: fa3.ring_fill %[[QV]][%c0, %[[ROW]], %[[H]]] : tensor<1x?x32x128xbf16> -> tensor<128x128xbf16>
// WS: fa3.ring_fill %[[KV]][%c0, %[[KSTART]], %{{.+}}] use %c0
// WS: consumers
// WS: fa3.load_tile %[[QV]][%c0, %[[ROW]], %[[H]]] limit %[[END:.+]] :
// WS: fa3.load_tile %[[KV]][%c0, %{{.+}}, %{{.+}}] limit %{{.+}} :
// WS: fa3.parallel_store_tile %{{.+}} into %{{.+}}[%c0, %[[ROW]], %[[H]]] limit %[[END]]
// WS: fa3.parallel_store_stats %{{.+}} into %{{.+}}[%c0, %[[H]], %[[ROW]]] limit %[[END]]
// WS: tensor.collapse_shape {{.+}} into tensor<?x32x128xbf16>
// WS: tensor.collapse_shape {{.+}} into tensor<32x?xf32>
func.func @varlen(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>, %v: tensor<?x8x128xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x32x128xbf16>, tensor<32x?xf32>) {
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {causal}
      : (tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x32x128xbf16>, tensor<32x?xf32>)
  return %o, %lse : tensor<?x32x128xbf16>, tensor<32x?xf32>
}

// The kernel takes cu_seqlens_q, cu_seqlens_k (global, noalias) and O as
// a plain pointer after the dense forward's nine parameters. A CTA whose
// query block starts at or past its sequence's end exits before anything
// else (every thread alike); a warpgroup whose 64 rows end inside the
// sequence stores them with TMA, the one that crosses its end copies the
// rows inside through the O pointer.
// KERNEL-LABEL: llvm.func @fa3_fwd_bf16_d128_h32x8_{{.+}}_varlen_causal
// KERNEL-SAME: %{{.+}}: !llvm.ptr<1>, %[[CUQ:.+]]: !llvm.ptr<1> {llvm.noalias}, %[[CUK:.+]]: !llvm.ptr<1> {llvm.noalias}, %[[OUT:.+]]: !llvm.ptr<1>)
// KERNEL: %[[Z:.+]] = nvvm.read.ptx.sreg.ctaid.z : i32
// KERNEL: llvm.getelementptr %[[CUQ]][%[[Z]]]
// KERNEL: llvm.getelementptr %[[CUK]][%[[Z]]]
// KERNEL: scf.if %{{.+}} {
// KERNEL-NEXT: nvvm.read.ptx.sreg.tid.x
// KERNEL: fa3.tma_store_tile
// KERNEL: } else {
// KERNEL: llvm.load %{{.+}} {alignment = 16 : i64} : !llvm.ptr<3> -> vector<4xi32>
// KERNEL: %[[AT:.+]] = llvm.getelementptr %[[OUT]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i8
// KERNEL: llvm.store %{{.+}}, %[[AT]] {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<1>

// The launch metadata says what the runtime must do: launch x up to the
// longest sequence's query blocks, fill O and the LSE, pass the offsets.
// LAUNCH: fa3.launch = {block_m = 128 : i64, block_n = 128 : i64, shared_memory = {{[0-9]+}} : i64, threads = 384 : i64, varlen = 1 : i64}

// PTX: .entry fa3_fwd_bf16_d128_h32x8_{{.+}}_varlen_causal
// PTX: .param .u64 .ptr .global .align 1 fa3_fwd_{{.+}}_param_11
// PTX: ld.shared.v4.b32
// PTX: st.global.v4.b32

// PTXAS: 0 bytes spill stores, 0 bytes spill loads

//--- used.mlir

// With seqused_k, the kernel takes its pointer thirteenth (here on one
// consumer warpgroup and no producer: block_m = 64).
// USED-PTX: .entry fa3_fwd_f16_d64_h8x2_m64n128s2_varlen_used_s3e000000
// USED-PTX: .param .u64 .ptr .global .align 1 fa3_fwd_{{.+}}_param_12
func.func @used(%q: tensor<?x8x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>, %used: tensor<?xi32>) -> (tensor<?x8x64xf16>, tensor<8x?xf32>) {
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk, %used
      : (tensor<?x8x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x8x64xf16>, tensor<8x?xf32>)
  return %o, %lse : tensor<?x8x64xf16>, tensor<8x?xf32>
}

//--- packed.mlir

// PackGQA: a tile holds 128 / 4 = 32 queries of the 4 query heads of one
// key/value head, so the grid's y runs over the 8 key/value heads, the
// query tile loads packed heads at the sequence's row, and a warpgroup's
// 64 rows (16 queries) are stored by TMA when its 16 queries lie inside the
// sequence, else copied row by row (query r / 4, head r % 4).
// PACKED-LABEL: llvm.func @fa3_fwd_bf16_d128_h32x8_{{.+}}_pg4_varlen_causal
// PACKED: fa3.tma_load_tile %{{.+}} {cols = 128 : i64, element_bytes = 2 : i64, packed_heads = 4 : i64, rows = 128 : i64}
// PACKED: arith.addi %{{.+}}, %c16_i32 : i32
// PACKED: fa3.tma_store_tile {{.+}} packed_heads = 4 : i64
// PACKED: } else {
// PACKED: llvm.store %{{.+}}, %{{.+}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<1>
func.func @packed(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>, %v: tensor<?x8x128xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x32x128xbf16>, tensor<32x?xf32>) {
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {causal, pack_gqa}
      : (tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x32x128xbf16>, tensor<32x?xf32>)
  return %o, %lse : tensor<?x32x128xbf16>, tensor<32x?xf32>
}
