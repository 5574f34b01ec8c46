// The FP8 forward below D = 256 sums P's rows on the tensor core: each V'
// atom in shared memory has 8 rows of e4m3 1.0 (0x38) after its D rows,
// written once by every thread before the kernel's first barrier and fenced
// for the async proxy; the TMA loads place the atoms D + 8 rows apart; the
// PV wgmma is m64n(D+8)k32, and its last 8 columns, rescaled with O, are l.
// The softmax keeps no sum of its own.
// REQUIRES: ptxas

// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_n192 --emit=ptx > %t.ptx
// RUN: FileCheck %s < %t.ptx
// RUN: %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_causal --emit=ptx | FileCheck %s --check-prefix=N128

// CHECK: .visible .entry fa3_fwd_e4m3_d128_h8x2_m128n192s2_ov_ws24x240_pp_s{{[0-9a-f]+}}(
// The ones: 2 stages x 3 atoms of 64 keys x 8 rows x 64 bytes, in 16-byte
// stores from offV + 128 rows x 64 bytes on, then the fence and barrier 0.
// CHECK: st.shared.v4.b32 [%rd{{[0-9]+}}+73728], {943208504, 943208504, 943208504, 943208504};
// CHECK: fence.proxy.async.shared::cta;
// CHECK-NEXT: bar.sync 0;
// PV: six k32 steps of m64n136k32 (68 accumulators), P from registers.
// CHECK-COUNT-6: wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){67}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
// The producer's V' loads: atoms 136 x 64 = 8704 bytes apart.
// CHECK: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%rd{{[0-9]+}}+65536]
// CHECK: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%rd{{[0-9]+}}+74240]
// CHECK: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%rd{{[0-9]+}}+82944]
// CHECK: .visible .entry {{.*}}_vt(

// PTXAS: Compiling entry function 'fa3_fwd_e4m3_d128_h8x2_m128n192s2_ov_ws24x240_pp_s{{[0-9a-f]+}}'
// PTXAS-NEXT: Function properties
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// 128-key atoms (block_n = 128): the ones start 128 rows x 128 bytes in,
// the atoms 136 x 128 = 17408 bytes apart (a multiple of the 128-byte
// swizzle's 1024).
// N128: st.shared.v4.b32 [%rd{{[0-9]+}}+{{[0-9]+}}], {943208504, 943208504, 943208504, 943208504};
// N128: fence.proxy.async.shared::cta;
// N128: wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3
