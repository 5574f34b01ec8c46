// RUN: fa3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of the Hopper kernel level ops (FA3KernelOps.td).

llvm.func @odd_n(%a: f32, %da: i64, %db: i64, %s: i32) {
  // expected-error @+1 {{'fa3.wgmma' op takes N / 2 accumulators for an N that is a multiple of 8 in [8, 256], got 1}}
  %r = fa3.wgmma acc(%a) desc_a %da desc_b %db scale_d %s {element_type = bf16} : f32
  llvm.return
}

// -----

llvm.func @both_a(%a0: f32, %a1: f32, %a2: f32, %a3: f32, %r: i32, %da: i64, %db: i64, %s: i32) {
  // expected-error @+1 {{'fa3.wgmma' op takes A either as four registers or as a shared-memory descriptor, not both}}
  %o:4 = fa3.wgmma acc(%a0, %a1, %a2, %a3) a(%r, %r, %r, %r) desc_a %da desc_b %db scale_d %s {element_type = bf16, trans_b} : f32, f32, f32, f32
  llvm.return
}

// -----

llvm.func @fp8_transposed(%a0: f32, %a1: f32, %a2: f32, %a3: f32, %da: i64, %db: i64, %s: i32) {
  // expected-error @+1 {{'fa3.wgmma' op e4m3 operands are K-major: no trans_a/trans_b}}
  %o:4 = fa3.wgmma acc(%a0, %a1, %a2, %a3) desc_a %da desc_b %db scale_d %s {element_type = f8E4M3FN, trans_b} : f32, f32, f32, f32
  llvm.return
}

// -----

llvm.func @rs_needs_mn_major_b(%a0: f32, %a1: f32, %a2: f32, %a3: f32, %r: i32, %db: i64, %s: i32) {
  // expected-error @+1 {{'fa3.wgmma' op with a register A, a 16-bit B is read MN-major: trans_b must be set}}
  %o:4 = fa3.wgmma acc(%a0, %a1, %a2, %a3) a(%r, %r, %r, %r) desc_b %db scale_d %s {element_type = bf16} : f32, f32, f32, f32
  llvm.return
}

// -----

llvm.func @f32_operands(%a0: f32, %a1: f32, %a2: f32, %a3: f32, %da: i64, %db: i64, %s: i32) {
  // expected-error @+1 {{'fa3.wgmma' op element_type must be bf16, f16 or f8E4M3FN, got 'f32'}}
  %o:4 = fa3.wgmma acc(%a0, %a1, %a2, %a3) desc_a %da desc_b %db scale_d %s {element_type = f32} : f32, f32, f32, f32
  llvm.return
}

// -----

llvm.func @barrier_threads(%id: i32) {
  // expected-error @+1 {{'fa3.named_barrier' op threads must be a multiple of 32 in [32, 1024], got 100}}
  fa3.named_barrier %id {threads = 100 : i64}
  llvm.return
}

// -----

llvm.func @ring_without_slots(%bars: !llvm.ptr<3>, %use: i32) {
  // expected-error @+1 {{'fa3.ring_wait' op a ring needs at least one slot: stages must be positive, got 0}}
  fa3.ring_wait %bars[%use] {stages = 0 : i64}
  llvm.return
}

// -----

llvm.func @ring_in_global_memory(%bars: !llvm.ptr<1>, %use: i32) {
  // expected-error @+1 {{'fa3.ring_arrive' op operand #0 must be LLVM pointer in address space 3}}
  "fa3.ring_arrive"(%bars, %use) {stages = 2 : i64} : (!llvm.ptr<1>, i32) -> ()
  llvm.return
}

// -----

llvm.func @tma_tile_not_whole_atoms(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_tile' op cols must be a positive multiple of the 64 columns of a 128-byte swizzle atom, got 96}}
  fa3.tma_load_tile %map[%i, %i, %i] to %smem[%i], %bar {rows = 128 : i64, cols = 96 : i64, element_bytes = 2 : i64}
  llvm.return
}

// -----

llvm.func @tma_tile_box_too_tall(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_tile' op rows must be in [1, 256] (a TMA box dimension), got 512}}
  fa3.tma_load_tile %map[%i, %i, %i] to %smem[%i], %bar {rows = 512 : i64, cols = 128 : i64, element_bytes = 1 : i64}
  llvm.return
}

// -----

llvm.func @tma_store_atoms_overlap(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_store_tile' op atom_stride must hold the atom's 8192 bytes and keep the swizzle's 1024-byte alignment, got 4096}}
  fa3.tma_store_tile %map[%i, %i, %i] from %smem[%i] {rows = 64 : i64, cols = 128 : i64, element_bytes = 2 : i64, atom_stride = 4096 : i64}
  llvm.return
}

// -----

llvm.func @tma_tile_transposed_packed(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_tile' op a transposed tile takes no packed_heads}}
  fa3.tma_load_tile %map[%i, %i, %i] to %smem[%i], %bar {rows = 128 : i64, cols = 128 : i64, element_bytes = 1 : i64, packed_heads = 2 : i64, transposed}
  llvm.return
}

// -----

llvm.func @tma_tile_atom_rows_short(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_tile' op atom_rows must be a multiple of 8 of at least cols = 128, got 132}}
  fa3.tma_load_tile %map[%i, %i, %i] to %smem[%i], %bar {rows = 128 : i64, cols = 128 : i64, element_bytes = 1 : i64, transposed, atom_rows = 132 : i64}
  llvm.return
}

// -----

llvm.func @tma_tile_atom_rows_not_transposed(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_tile' op atom_rows places the atoms of a transposed tile; this tile is not transposed}}
  fa3.tma_load_tile %map[%i, %i, %i] to %smem[%i], %bar {rows = 128 : i64, cols = 128 : i64, element_bytes = 1 : i64, atom_rows = 136 : i64}
  llvm.return
}

// -----

llvm.func @tma_tile_transposed_partial_atom(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_tile' op a transposed tile is whole 64-byte atoms of 64 positions (128-byte atoms where they pair up) by at most 256 rows (TMA box dimensions), got rows = 96, cols = 128}}
  fa3.tma_load_tile %map[%i, %i, %i] to %smem[%i], %bar {rows = 96 : i64, cols = 128 : i64, element_bytes = 1 : i64, transposed}
  llvm.return
}

// -----

llvm.func @tma_tile_packed_heads_split_a_position(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_tile' op packed_heads must be in [1, 256] and divide the 64 rows (a box of rows / packed_heads positions), got 6}}
  fa3.tma_load_tile %map[%i, %i, %i] to %smem[%i], %bar {rows = 64 : i64, cols = 128 : i64, element_bytes = 2 : i64, packed_heads = 6 : i64}
  llvm.return
}

// -----

llvm.func @tma_paged_tile_not_whole_atoms(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %pt: !llvm.ptr<1>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_paged_tile' op cols must be a positive multiple of the 64 columns of a 128-byte swizzle atom, got 80}}
  fa3.tma_load_paged_tile %map[%i, %i, %i] pages %pt[%i, %i, %i] to %smem[%i], %bar {rows = 128 : i64, cols = 80 : i64, element_bytes = 2 : i64}
  llvm.return
}

// -----

llvm.func @tma_paged_table_in_shared_memory(%map: !llvm.ptr, %smem: !llvm.ptr<3>, %bar: !llvm.ptr<3>, %i: i32) {
  // expected-error @+1 {{'fa3.tma_load_paged_tile' op operand #4 must be LLVM pointer in address space 1}}
  "fa3.tma_load_paged_tile"(%map, %i, %i, %i, %smem, %i, %i, %i, %smem, %i, %bar) {rows = 128 : i64, cols = 128 : i64, element_bytes = 2 : i64} : (!llvm.ptr, i32, i32, i32, !llvm.ptr<3>, i32, i32, i32, !llvm.ptr<3>, i32, !llvm.ptr<3>) -> ()
  llvm.return
}
