// RUN: fa3-opt %s --fa3-hopper-kernel-pipeline --mlir-print-ir-after=convert-fa3-tile-to-hopper -o /dev/null 2>&1 | FileCheck %s --check-prefix=KERNEL
// RUN: fa3-run %s --function=decode_d128 --emit=ptx | FileCheck %s --check-prefix=PTX
// RUN: fa3-run %s --function=decode_d128 --emit=ptx > %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}

// PackGQA on Hopper: the 4 query heads of each key/value head are the rows
// of one query tile. Q is loaded and O stored through the [B, S, Hkv, 4, D]
// view of their tensor maps (fa3.tma_*_tile {packed_heads = 4}: the group
// coordinate is the key/value head, h / 4), K and V one head's rows as
// always; the kernel is named after its packing.
// KERNEL-LABEL: llvm.func @fa3_fwd_bf16_d128_h16x4_{{.+}}_pg4_causal
// KERNEL: %[[H:.+]] = nvvm.read.ptx.sreg.ctaid.y : i32
// KERNEL: fa3.tma_load_tile %arg0[%{{.+}}, %{{.+}}, %{{.+}}] to {{.+}} {cols = 128 : i64, element_bytes = 2 : i64, packed_heads = 4 : i64, rows = 128 : i64}
// KERNEL: fa3.tma_load_tile %arg1[%{{.+}}, %[[H]], %{{.+}}] to {{.+}} {cols = 128 : i64, element_bytes = 2 : i64, rows = 128 : i64}
// A consumer warpgroup's 64 rows are 16 queries: its O box starts 16
// queries further per warpgroup, and each LSE entry goes to query r / 4 of
// head 4 · hkv + r % 4.
// KERNEL: arith.muli %{{.+}}, %c16_i32 : i32
// KERNEL: fa3.tma_store_tile %arg3[%{{.+}}, %{{.+}}, %{{.+}}] from {{.+}} {atom_stride = 16384 : i64, cols = 128 : i64, element_bytes = 2 : i64, packed_heads = 4 : i64, rows = 64 : i64}
// KERNEL: arith.divui %{{.+}}, %c4_i32 : i32
// KERNEL: arith.remui %{{.+}}, %c4_i32 : i32
func.func @decode_d128(%q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, pack_gqa} : (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>)
  return %o, %lse : tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>
}

// In the PTX, 5-D tensor copies for Q (two 128-byte atoms of D = 128) and the
// O store, 4-D ones for K and V.
// PTX: .entry fa3_fwd_bf16_d128_h16x4_{{.+}}_pg4_causal
// PTX-COUNT-2: cp.async.bulk.tensor.5d.shared::cta.global.tile.mbarrier::complete_tx::bytes
// PTX: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes
// PTX: cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group

// ptxas assembles it without spilling.
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
