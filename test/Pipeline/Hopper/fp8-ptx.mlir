// The FP8 (e4m3) forward through the tile level: the V' layout kernel, the
// 16-bit forward's structure (producer warpgroup, pingpong, the
// intra-warpgroup overlap above d = 64), e4m3 wgmma with K-major operands
// for both GEMMs (no transpose flags), P scaled and packed to e4m3 in
// registers, O staged in a bf16 tile of its own for the TMA store, and the
// three descale pointers after the dense forward's parameters.

// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_causal --emit=ptx | FileCheck %s --check-prefixes=CHECK,D128
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d256 --emit=ptx | FileCheck %s --check-prefixes=CHECK,D256
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d64_causal --emit=ptx | FileCheck %s --check-prefix=D64
// The output is bf16, stored through shared memory by TMA.
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_causal --emit=ptx | FileCheck %s --check-prefix=STORE
// The descales are read once per tile (d256: at the kernel's entry; d128
// causal and d64 are persistent, see below).
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d256 --emit=ptx | FileCheck %s --check-prefix=DESCALE
// DESCALE-COUNT-3: ld.global.nc.b32
// DESCALE: setmaxnreg.inc.sync.aligned.u32 240;
// STORE: cvt.rn.bf16x2.f32
// STORE: cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group
// At D = 64 the e4m3 rows are 64 bytes (64-byte swizzle): 3 consumer
// warpgroups and a producer, no pingpong, no overlap, a persistent grid
// (the cost model's FP8 choice at d64 and for causal d128); d64 with
// 192-key blocks, S = Q Kᵀ m64n192k32.
// D64: .visible .entry fa3_fwd_e4m3_d64_h8x2_m192n192s2_ws32x160_persistent_causal_s{{[0-9a-f]+}}(
// D64: setmaxnreg.inc.sync.aligned.u32 160;
// D64-DAG: wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){95}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1;
// D64-DAG: wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){35}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
// D64: .visible .entry fa3_fwd_e4m3_d64_h8x2_m192n192s2_ws32x160_persistent_causal_s{{[0-9a-f]+}}_vt(

// 192-key blocks (block_n = 192, FA3's larger e4m3 key blocks): S = Q Kᵀ is
// m64n192k32, and V' comes in three 64-key atoms (the 64-byte swizzle),
// P V'ᵀ in six k32 steps of m64n136k32 with P from registers.
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_n192 --emit=ptx | FileCheck %s --check-prefix=N192
// N192: .visible .entry fa3_fwd_e4m3_d128_h8x2_m128n192s2_ov_ws24x240_pp_s{{[0-9a-f]+}}(
// N192: wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){95}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1;
// N192-COUNT-6: wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){67}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
// N192: .visible .entry fa3_fwd_e4m3_d128_h8x2_m128n192s2_ov_ws24x240_pp_s{{[0-9a-f]+}}_vt(

// The tile level (fa3-tile): the blocks keep their e4m3 tiles and take the
// descales of their (batch, kv head), q_descale · k_descale and v_descale.
// RUN: fa3-opt %S/Inputs/fp8.mlir --fa3-select-schedule --fa3-tile | FileCheck %s --check-prefix=TILE
// TILE-LABEL: func.func @fp8_d128_causal
// TILE: %[[QT:.+]] = fa3.load_tile %{{.+}} : tensor<?x?x8x128xf8E4M3FN> -> tensor<64x128xf8E4M3FN>
// TILE-DAG: %[[KD:.+]] = tensor.extract %arg4[%{{.+}}, %[[HKV:.+]]] : tensor<?x2xf32>
// TILE-DAG: %[[QD:.+]] = tensor.extract %arg3[%{{.+}}, %[[HKV]]] : tensor<?x2xf32>
// TILE: %[[QK:.+]] = arith.mulf %[[QD]], %[[KD]] : f32
// TILE: %[[VD:.+]] = tensor.extract %arg5[%{{.+}}, %[[HKV]]] : tensor<?x2xf32>
// TILE: fa3.attention_block %[[QT]], {{.+}} descale(%[[QK]], %[[VD]]) {causal, probs_scale = 2.560000e+02 : f32
// TILE-SAME: : tensor<64x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN> -> tensor<64x128xbf16>, tensor<64xf32>

// The kernel: Q, K, V', O tensor maps, LSE, Sq, Sk, B, the tile counter,
// then q, k and v descales.
// CHECK: .visible .entry fa3_fwd_e4m3_d{{128|256}}_h{{[0-9x]+}}_m128n128s2_ov_ws24x240_pp{{.*}}_s{{[0-9a-f]+}}(
// CHECK-NEXT: .param .align 64 .b8 {{.*}}_param_0[128],
// CHECK-NEXT: .param .align 64 .b8 {{.*}}_param_1[128],
// CHECK-NEXT: .param .align 64 .b8 {{.*}}_param_2[128],
// CHECK-NEXT: .param .align 64 .b8 {{.*}}_param_3[128],
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_4,
// CHECK-NEXT: .param .u32 {{.*}}_param_5,
// CHECK-NEXT: .param .u32 {{.*}}_param_6,
// CHECK-NEXT: .param .u32 {{.*}}_param_7,
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_8,
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_9,
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_10,
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_11
// CHECK-NEXT: )
// The consumers take their registers.
// CHECK: setmaxnreg.inc.sync.aligned.u32 240;
// S = Q Kᵀ: m64n128k32, both operands from shared memory, K-major.
// CHECK: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1;
// CHECK: ex2.approx.ftz.f32
// P · 2^8 to e4m3, four per register.
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// O += P V'ᵀ: A from registers, B (V') K-major. Below D = 256 B has 8 rows
// of e4m3 1.0 after V's D rows (N = D + 8), so the wgmma also sums each
// row of P; at D = 256 (N would be 264) the softmax sums P itself.
// D128: wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){67}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
// D256: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){127}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
// The layout kernel follows the attention kernel in the module. Its
// transpose reads 4-byte words of the swizzled shared tile (never single
// bytes: those had 4-way bank conflicts) and transposes 4 x 4 bytes in
// registers with byte permutes.
// CHECK: .visible .entry fa3_fwd_e4m3_d{{128|256}}_{{.*}}_vt(
// CHECK-NOT: ld.shared.{{[bu]}}8
// CHECK: bar.sync 0;
// CHECK-NOT: ld.shared.{{[bu]}}8
// CHECK: ld.shared.b32
// CHECK-NOT: ld.shared.{{[bu]}}8
// CHECK: prmt.b32
// CHECK-NOT: ld.shared.{{[bu]}}8
// CHECK: st.global.b32
// CHECK-NOT: ld.shared.{{[bu]}}8
// CHECK: ret;
