// RUN: fa3-opt %s --convert-fa3-kernel-to-nvvm | FileCheck %s

// The Hopper kernel level's own ops, one pattern each, to inline PTX. PTX
// numbers the outputs first: with N/2 = 4 accumulators, the tied inputs are
// $4-$7, so A and B follow at $8 and the scale-d flag is the last operand.

// CHECK-LABEL: llvm.func @wgmma_ss
// CHECK: %[[S:.+]] = llvm.inline_asm has_side_effects "{\0A.reg .pred p;\0Asetp.ne.b32 p, $10, 0;\0Awgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {$0, $1, $2, $3}, $8, $9, p, 1, 1, 0, 1;\0A}\0A", "=f,=f,=f,=f,0,1,2,3,l,l,r" %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6
// CHECK: %[[R0:.+]] = llvm.extractvalue %[[S]][0]
// CHECK: %[[R3:.+]] = llvm.extractvalue %[[S]][3]
// CHECK: llvm.fadd %[[R0]], %[[R3]]
llvm.func @wgmma_ss(%a0: f32, %a1: f32, %a2: f32, %a3: f32, %da: i64, %db: i64, %scale: i32) -> f32 {
  %r:4 = fa3.wgmma acc(%a0, %a1, %a2, %a3) desc_a %da desc_b %db scale_d %scale {element_type = bf16, trans_b} : f32, f32, f32, f32
  %x = llvm.fadd %r#0, %r#3 : f32
  llvm.return %x : f32
}

// The register-A form: four A registers at $8-$11, B at $12, scale-d $13;
// 16-bit B is read MN-major (the last 1), e4m3 takes no transpose flags.
// CHECK-LABEL: llvm.func @wgmma_rs
// CHECK: llvm.inline_asm has_side_effects "{\0A.reg .pred p;\0Asetp.ne.b32 p, $13, 0;\0Awgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {$0, $1, $2, $3}, {$8, $9, $10, $11}, $12, p, 1, 1, 1;\0A}\0A", "=f,=f,=f,=f,0,1,2,3,r,r,r,r,l,r"
// CHECK: llvm.inline_asm has_side_effects "{\0A.reg .pred p;\0Asetp.ne.b32 p, $13, 0;\0Awgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {$0, $1, $2, $3}, {$8, $9, $10, $11}, $12, p, 1, 1;\0A}\0A"
llvm.func @wgmma_rs(%a0: f32, %a1: f32, %a2: f32, %a3: f32, %r0: i32, %r1: i32, %r2: i32, %r3: i32, %db: i64, %scale: i32) -> f32 {
  %r:4 = fa3.wgmma acc(%a0, %a1, %a2, %a3) a(%r0, %r1, %r2, %r3) desc_b %db scale_d %scale {element_type = f16, trans_b} : f32, f32, f32, f32
  %e:4 = fa3.wgmma acc(%r#0, %r#1, %r#2, %r#3) a(%r0, %r1, %r2, %r3) desc_b %db scale_d %scale {element_type = f8E4M3FN} : f32, f32, f32, f32
  llvm.return %e#0 : f32
}

// CHECK-LABEL: llvm.func @named_barriers
// CHECK: %[[T:.+]] = llvm.mlir.constant(256 : i32) : i32
// CHECK: llvm.inline_asm has_side_effects "bar.sync $0, $1;", "r,r" %arg0, %[[T]]
// CHECK: %[[T2:.+]] = llvm.mlir.constant(128 : i32) : i32
// CHECK: llvm.inline_asm has_side_effects "bar.arrive $0, $1;", "r,r" %arg0, %[[T2]]
// CHECK-NOT: fa3.
llvm.func @named_barriers(%id: i32) {
  fa3.named_barrier %id {threads = 256 : i64}
  fa3.named_barrier %id {threads = 128 : i64, arrive}
  llvm.return
}

// The mbarrier rings: use %u is slot %u mod 2 (an i64 barrier each from the
// ring's first), and the wait is for the parity of phase %u div 2. With
// `previous` the parity flips (the slot's previous use) and the first two
// uses do not wait.
// CHECK-LABEL: llvm.func @rings
// CHECK-SAME: (%[[BARS:.+]]: !llvm.ptr<3>, %[[USE:.+]]: i32)
// CHECK: %[[TWO:.+]] = arith.constant 2 : i32
// CHECK-NEXT: %[[SLOT:.+]] = arith.remui %[[USE]], %[[TWO]] : i32
// CHECK: %[[GEN:.+]] = arith.divui %[[USE]], %{{.+}} : i32
// CHECK-NEXT: %[[PARITY:.+]] = arith.andi %[[GEN]], %{{.+}} : i32
// CHECK-NEXT: %[[IDX:.+]] = arith.extui %[[SLOT]] : i32 to i64
// CHECK-NEXT: %[[BAR:.+]] = llvm.getelementptr %[[BARS]][%[[IDX]]] : (!llvm.ptr<3>, i64) -> !llvm.ptr<3>, i64
// CHECK-NEXT: %[[TICKS:.+]] = arith.constant 10000000 : i32
// CHECK-NEXT: nvvm.mbarrier.try_wait.parity %[[BAR]], %[[PARITY]], %[[TICKS]]
// CHECK: %[[PSLOT:.+]] = arith.remui %[[USE]], %{{.+}} : i32
// CHECK: %[[PPAR:.+]] = arith.andi
// CHECK: %[[REUSED:.+]] = arith.cmpi uge, %[[USE]], %{{.+}} : i32
// CHECK-NEXT: scf.if %[[REUSED]] {
// CHECK: %[[FLIP:.+]] = arith.xori %[[PPAR]], %{{.+}} : i32
// CHECK-NEXT: %[[PIDX:.+]] = arith.extui %[[PSLOT]] : i32 to i64
// CHECK-NEXT: %[[PBAR:.+]] = llvm.getelementptr %[[BARS]][%[[PIDX]]]
// CHECK: nvvm.mbarrier.try_wait.parity %[[PBAR]], %[[FLIP]]
// CHECK: }
// CHECK: %[[ASLOT:.+]] = arith.remui %[[USE]]
// CHECK-NEXT: %[[AIDX:.+]] = arith.extui %[[ASLOT]] : i32 to i64
// CHECK-NEXT: %[[ABAR:.+]] = llvm.getelementptr %[[BARS]][%[[AIDX]]]
// CHECK-NEXT: nvvm.mbarrier.arrive %[[ABAR]] : !llvm.ptr<3>
// CHECK: %[[RSLOT:.+]] = arith.remui %[[USE]]
// CHECK-NEXT: %[[RIDX:.+]] = arith.extui %[[RSLOT]] : i32 to i64
// CHECK-NEXT: %[[RBAR:.+]] = llvm.getelementptr %[[BARS]][%[[RIDX]]]
// CHECK: nvvm.mbarrier.arrive.expect_tx %[[RBAR]]
// CHECK-NOT: fa3.
llvm.func @rings(%bars: !llvm.ptr<3>, %use: i32) {
  fa3.ring_wait %bars[%use] {stages = 2 : i64}
  fa3.ring_wait %bars[%use] {stages = 2 : i64, previous}
  fa3.ring_arrive %bars[%use] {stages = 2 : i64}
  %bar = fa3.ring_barrier %bars[%use] {stages = 2 : i64}
  %bytes = llvm.mlir.constant(16384 : i32) : i32
  nvvm.mbarrier.arrive.expect_tx %bar, %bytes : !llvm.ptr<3>, i32
  llvm.return
}

// A 128 x 128 bf16 tile is two 128-byte atoms of 64 columns: one
// expect_tx of its 32768 bytes, then atom 0 at the offset (box column 0)
// and atom 1 at offset + 128 rows * 128 bytes (box column 64).
// CHECK-LABEL: llvm.func @tma_load_tile
// CHECK-SAME: (%[[MAP:.+]]: !llvm.ptr, %[[SMEM:.+]]: !llvm.ptr<3>, %[[BAR:.+]]: !llvm.ptr<3>, %[[OFF:.+]]: i32, %[[ROW:.+]]: i32, %[[H:.+]]: i32, %[[B:.+]]: i32)
// CHECK: %[[BYTES:.+]] = arith.constant 32768 : i32
// CHECK-NEXT: nvvm.mbarrier.arrive.expect_tx %[[BAR]], %[[BYTES]]
// CHECK-NEXT: %[[Z:.+]] = arith.constant 0 : i32
// CHECK-NEXT: %[[A0:.+]] = arith.addi %[[OFF]], %[[Z]] : i32
// CHECK-NEXT: %[[D0:.+]] = llvm.getelementptr %[[SMEM]][%[[A0]]] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// CHECK-NEXT: %[[C0:.+]] = arith.constant 0 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[D0]], %[[MAP]], %[[BAR]], box[%[[C0]], %[[ROW]], %[[H]], %[[B]]] {isCTAOnly = true}
// CHECK-NEXT: %[[S1:.+]] = arith.constant 16384 : i32
// CHECK-NEXT: %[[A1:.+]] = arith.addi %[[OFF]], %[[S1]] : i32
// CHECK-NEXT: %[[D1:.+]] = llvm.getelementptr %[[SMEM]][%[[A1]]]
// CHECK-NEXT: %[[C64:.+]] = arith.constant 64 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[D1]], %[[MAP]], %[[BAR]], box[%[[C64]], %[[ROW]], %[[H]], %[[B]]] {isCTAOnly = true}
// CHECK-NOT: fa3.
llvm.func @tma_load_tile(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %off: i32, %row: i32, %h: i32, %b: i32) {
  fa3.tma_load_tile %map[%row, %h, %b] to %smem[%off], %bar {rows = 128 : i64, cols = 128 : i64, element_bytes = 2 : i64}
  llvm.return
}

// e4m3 at D = 64: one 64-byte atom (the 64-byte swizzle), box column 0.
// Transposed (V' of the FP8 forward, [B, H, D, S]): atoms of 128 keys by
// the D rows, atom a at offset + a · D · 128 with box (row + 128 a, 0, h, b).
// CHECK-LABEL: llvm.func @tma_load_tile_e4m3
// CHECK-SAME: (%[[MAP:.+]]: !llvm.ptr, %[[SMEM:.+]]: !llvm.ptr<3>, %[[BAR:.+]]: !llvm.ptr<3>, %[[OFF:.+]]: i32, %[[ROW:.+]]: i32, %[[H:.+]]: i32, %[[B:.+]]: i32)
// CHECK: arith.constant 8192 : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %[[MAP]], %[[BAR]], box[%{{.+}}, %[[ROW]], %[[H]], %[[B]]]
// CHECK-NOT: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: arith.constant 32768 : i32
// CHECK: %[[C0:.+]] = arith.constant 0 : i32
// CHECK-NEXT: %[[A0:.+]] = arith.addi %[[OFF]], %[[C0]] : i32
// CHECK-NEXT: %[[D0:.+]] = llvm.getelementptr %[[SMEM]][%[[A0]]]
// CHECK-NEXT: %[[K0:.+]] = arith.constant 0 : i32
// CHECK-NEXT: %[[P0:.+]] = arith.addi %[[ROW]], %[[K0]] : i32
// CHECK-NEXT: %[[Z0:.+]] = arith.constant 0 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[D0]], %[[MAP]], %[[BAR]], box[%[[P0]], %[[Z0]], %[[H]], %[[B]]]
// CHECK-NEXT: %[[S1:.+]] = arith.constant 16384 : i32
// CHECK-NEXT: %[[A1:.+]] = arith.addi %[[OFF]], %[[S1]] : i32
// CHECK-NEXT: %[[D1:.+]] = llvm.getelementptr %[[SMEM]][%[[A1]]]
// CHECK-NEXT: %[[K1:.+]] = arith.constant 128 : i32
// CHECK-NEXT: %[[P1:.+]] = arith.addi %[[ROW]], %[[K1]] : i32
// CHECK-NEXT: %[[Z1:.+]] = arith.constant 0 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[D1]], %[[MAP]], %[[BAR]], box[%[[P1]], %[[Z1]], %[[H]], %[[B]]]
llvm.func @tma_load_tile_e4m3(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %off: i32, %row: i32, %h: i32, %b: i32) {
  fa3.tma_load_tile %map[%row, %h, %b] to %smem[%off], %bar {rows = 128 : i64, cols = 64 : i64, element_bytes = 1 : i64}
  fa3.tma_load_tile %map[%row, %h, %b] to %smem[%off], %bar {rows = 256 : i64, cols = 128 : i64, element_bytes = 1 : i64, transposed}
  llvm.return
}

// Transposed with 192 keys (block_n = 192): not whole 128-key atoms, so
// three 64-key atoms (the 64-byte swizzle), atom a at offset + a · D · 64
// with box (row + 64 a, 0, h, b).
// CHECK-LABEL: llvm.func @tma_load_tile_e4m3_192
// CHECK-SAME: (%[[MAP:.+]]: !llvm.ptr, %[[SMEM:.+]]: !llvm.ptr<3>, %[[BAR:.+]]: !llvm.ptr<3>, %[[OFF:.+]]: i32, %[[ROW:.+]]: i32, %[[H:.+]]: i32, %[[B:.+]]: i32)
// CHECK: arith.constant 24576 : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %[[MAP]], %[[BAR]], box[%{{.+}}, %{{.+}}, %[[H]], %[[B]]]
// CHECK-NEXT: %[[S1:.+]] = arith.constant 8192 : i32
// CHECK-NEXT: %[[A1:.+]] = arith.addi %[[OFF]], %[[S1]] : i32
// CHECK-NEXT: %[[D1:.+]] = llvm.getelementptr %[[SMEM]][%[[A1]]]
// CHECK-NEXT: %[[K1:.+]] = arith.constant 64 : i32
// CHECK-NEXT: %[[P1:.+]] = arith.addi %[[ROW]], %[[K1]] : i32
// CHECK-NEXT: %[[Z1:.+]] = arith.constant 0 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[D1]], %[[MAP]], %[[BAR]], box[%[[P1]], %[[Z1]], %[[H]], %[[B]]]
// CHECK-NEXT: %[[S2:.+]] = arith.constant 16384 : i32
// CHECK-NEXT: %[[A2:.+]] = arith.addi %[[OFF]], %[[S2]] : i32
// CHECK-NEXT: %[[D2:.+]] = llvm.getelementptr %[[SMEM]][%[[A2]]]
// CHECK-NEXT: %[[K2:.+]] = arith.constant 128 : i32
// CHECK-NEXT: %[[P2:.+]] = arith.addi %[[ROW]], %[[K2]] : i32
// CHECK-NEXT: %[[Z2:.+]] = arith.constant 0 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[D2]], %[[MAP]], %[[BAR]], box[%[[P2]], %[[Z2]], %[[H]], %[[B]]]
// CHECK-NOT: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: llvm.return
llvm.func @tma_load_tile_e4m3_192(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %off: i32, %row: i32, %h: i32, %b: i32) {
  fa3.tma_load_tile %map[%row, %h, %b] to %smem[%off], %bar {rows = 192 : i64, cols = 128 : i64, element_bytes = 1 : i64, transposed}
  llvm.return
}

// With atom_rows = 136 (the FP8 forward's V' with 8 rows of ones after each
// atom's 128): the atoms at offset + a · 136 · 64; the tile still expects
// its 24576 loaded bytes.
// CHECK-LABEL: llvm.func @tma_load_tile_e4m3_atom_rows
// CHECK-SAME: (%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr<3>, %{{.+}}: !llvm.ptr<3>, %[[OFF:.+]]: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32)
// CHECK: arith.constant 24576 : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK-NEXT: %[[S1:.+]] = arith.constant 8704 : i32
// CHECK-NEXT: arith.addi %[[OFF]], %[[S1]] : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK-NEXT: %[[S2:.+]] = arith.constant 17408 : i32
// CHECK-NEXT: arith.addi %[[OFF]], %[[S2]] : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK-NOT: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: llvm.return
llvm.func @tma_load_tile_e4m3_atom_rows(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %off: i32, %row: i32, %h: i32, %b: i32) {
  fa3.tma_load_tile %map[%row, %h, %b] to %smem[%off], %bar {rows = 192 : i64, cols = 128 : i64, element_bytes = 1 : i64, transposed, atom_rows = 136 : i64}
  llvm.return
}

// Packed heads (PackGQA): the box coordinates of the [B, S, H / G, G, D]
// view, (column, 0, group, row, batch), for the load and the store alike.
// CHECK-LABEL: llvm.func @tma_tiles_packed
// CHECK-SAME: (%[[MAP:.+]]: !llvm.ptr, %[[SMEM:.+]]: !llvm.ptr<3>, %[[BAR:.+]]: !llvm.ptr<3>, %[[OFF:.+]]: i32, %[[ROW:.+]]: i32, %[[G:.+]]: i32, %[[B:.+]]: i32)
// CHECK: nvvm.mbarrier.arrive.expect_tx %[[BAR]]
// CHECK: llvm.getelementptr %[[SMEM]]
// CHECK-NEXT: %[[C0:.+]] = arith.constant 0 : i32
// CHECK-NEXT: %[[Z:.+]] = arith.constant 0 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %[[MAP]], %[[BAR]], box[%[[C0]], %[[Z]], %[[G]], %[[ROW]], %[[B]]] {isCTAOnly = true}
// CHECK: llvm.getelementptr %[[SMEM]]
// CHECK-NEXT: %[[SC0:.+]] = arith.constant 0 : i32
// CHECK-NEXT: %[[SZ:.+]] = arith.constant 0 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.global.shared.cta %[[MAP]], %{{.+}}, box[%[[SC0]], %[[SZ]], %[[G]], %[[ROW]], %[[B]]]
// CHECK-NOT: fa3.
llvm.func @tma_tiles_packed(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %off: i32, %row: i32, %g: i32, %b: i32) {
  fa3.tma_load_tile %map[%row, %g, %b] to %smem[%off], %bar {rows = 128 : i64, cols = 64 : i64, element_bytes = 2 : i64, packed_heads = 4 : i64}
  fa3.tma_store_tile %map[%row, %g, %b] from %smem[%off] {rows = 64 : i64, cols = 64 : i64, element_bytes = 2 : i64, atom_stride = 16384 : i64, packed_heads = 4 : i64}
  llvm.return
}

// A paged K tile: one expect_tx of all 32768 bytes, then a loop over its
// chunks of %chunk rows (scf.for in i32). Chunk c: position %pos + c, table
// slot (pos + c) / %ps, slot in its page (pos + c) % %ps; the entry is read
// at the slot clamped to the table and replaced by -1 past it (a page
// outside the tensor, which TMA fills with zeros); each atom's box goes to
// row c of the atom (c * 128 bytes) with coordinates (column, slot in the
// page, head, page).
// CHECK-LABEL: llvm.func @tma_load_paged_tile
// CHECK-SAME: (%[[MAP:.+]]: !llvm.ptr, %[[SMEM:.+]]: !llvm.ptr<3>, %[[BAR:.+]]: !llvm.ptr<3>, %[[OFF:.+]]: i32, %[[POS:.+]]: i32, %[[H:.+]]: i32, %[[B:.+]]: i32, %[[PT:.+]]: !llvm.ptr<1>, %[[W:.+]]: i32, %[[PS:.+]]: i32, %[[CHUNK:.+]]: i32)
// CHECK: %[[BYTES:.+]] = arith.constant 32768 : i32
// CHECK-NEXT: nvvm.mbarrier.arrive.expect_tx %[[BAR]], %[[BYTES]]
// CHECK: %[[ROW:.+]] = llvm.getelementptr %[[PT]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: scf.for %[[C:.+]] = %{{.+}} to %{{.+}} step %[[CHUNK]] : i32 {
// CHECK-NEXT: %[[P:.+]] = arith.addi %[[POS]], %[[C]] : i32
// CHECK-NEXT: %[[SLOT:.+]] = arith.divui %[[P]], %[[PS]] : i32
// CHECK-NEXT: %[[IN:.+]] = arith.remui %[[P]], %[[PS]] : i32
// CHECK-NEXT: %[[OK:.+]] = arith.cmpi ult, %[[SLOT]], %[[W]] : i32
// CHECK: %[[READ:.+]] = arith.minui %[[SLOT]], %{{.+}} : i32
// CHECK-NEXT: %[[AT:.+]] = llvm.getelementptr %[[ROW]][%[[READ]]]
// CHECK-NEXT: %[[E:.+]] = llvm.load %[[AT]] {alignment = 4 : i64} : !llvm.ptr<1> -> i32
// CHECK-NEXT: %[[NONE:.+]] = arith.constant -1 : i32
// CHECK-NEXT: %[[PAGE:.+]] = arith.select %[[OK]], %[[E]], %[[NONE]] : i32
// CHECK: %[[COFF:.+]] = arith.addi %[[OFF]], %{{.+}} : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %[[MAP]], %[[BAR]], box[%{{.+}}, %[[IN]], %[[H]], %[[PAGE]]] {isCTAOnly = true}
// CHECK: %[[S1:.+]] = arith.constant 16384 : i32
// CHECK-NEXT: arith.addi %[[COFF]], %[[S1]] : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %[[MAP]], %[[BAR]], box[%{{.+}}, %[[IN]], %[[H]], %[[PAGE]]] {isCTAOnly = true}
// CHECK-NEXT: }
// CHECK-NOT: fa3.
llvm.func @tma_load_paged_tile(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %off: i32, %pos: i32, %h: i32, %b: i32, %pt: !llvm.ptr<1>, %w: i32, %ps: i32, %chunk: i32) {
  fa3.tma_load_paged_tile %map[%pos, %h, %b] pages %pt[%w, %ps, %chunk] to %smem[%off], %bar {rows = 128 : i64, cols = 128 : i64, element_bytes = 2 : i64}
  llvm.return
}

// A warpgroup's 64 rows of a 128-row d128 O tile: two atoms, the second
// one atom_stride (128 rows * 128 bytes) further, box column 64.
// CHECK-LABEL: llvm.func @tma_store_tile
// CHECK-SAME: (%[[MAP:.+]]: !llvm.ptr, %[[SMEM:.+]]: !llvm.ptr<3>, %[[OFF:.+]]: i32, %[[ROW:.+]]: i32, %[[H:.+]]: i32, %[[B:.+]]: i32)
// CHECK: %[[A0:.+]] = arith.addi %[[OFF]], %{{.+}} : i32
// CHECK-NEXT: %[[S0:.+]] = llvm.getelementptr %[[SMEM]][%[[A0]]]
// CHECK-NEXT: %[[C0:.+]] = arith.constant 0 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.global.shared.cta %[[MAP]], %[[S0]], box[%[[C0]], %[[ROW]], %[[H]], %[[B]]]
// CHECK-NEXT: %[[STRIDE:.+]] = arith.constant 16384 : i32
// CHECK-NEXT: %[[A1:.+]] = arith.addi %[[OFF]], %[[STRIDE]] : i32
// CHECK-NEXT: %[[S1:.+]] = llvm.getelementptr %[[SMEM]][%[[A1]]]
// CHECK-NEXT: %[[C64:.+]] = arith.constant 64 : i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.global.shared.cta %[[MAP]], %[[S1]], box[%[[C64]], %[[ROW]], %[[H]], %[[B]]]
// CHECK-NOT: fa3.
llvm.func @tma_store_tile(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %off: i32, %row: i32, %h: i32, %b: i32) {
  fa3.tma_store_tile %map[%row, %h, %b] from %smem[%off] {rows = 64 : i64, cols = 128 : i64, element_bytes = 2 : i64, atom_stride = 16384 : i64}
  llvm.return
}
