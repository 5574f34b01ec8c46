// `poly_exp2 = N` moves every N-th exponential of a consumer thread's
// probabilities from MUFU.EX2 to the FMA pipe: x clamped to -125, rounded by
// adding 1.5 * 2^23 (0f4B400000), the fraction's degree-2 polynomial in two
// fmas, the integer part shifted into the exponent bits. The d128 FP8 kernel
// with 192-key blocks emits its softmax twice (the overlap's rotated loop
// and its first block), 96 probabilities and 2 corrections each: 196
// ex2.approx without the option, 196 - 2 x 12 with N = 8.
// REQUIRES: ptxas

// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_n192_pe8 --emit=ptx > %t.ptx
// RUN: FileCheck %s < %t.ptx
// RUN: grep -c ex2.approx.ftz.f32 %t.ptx | FileCheck %s --check-prefix=EX2
// RUN: grep -c 0f4B400000 %t.ptx | FileCheck %s --check-prefix=POLY
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_n192 --emit=ptx | grep -c ex2.approx.ftz.f32 | FileCheck %s --check-prefix=EX2-OFF
// RUN: %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CHECK: .visible .entry fa3_fwd_e4m3_d128_h8x2_m128n192s2_ov_ws24x240_pp_pe8_s{{[0-9a-f]+}}(
// CHECK: max.NaN.f32 [[C:%r[0-9]+]], %r{{[0-9]+}}, 0fC2FA0000;
// CHECK-NEXT: add.rn.f32 [[T:%r[0-9]+]], [[C]], 0f4B400000;
// CHECK-NEXT: add.rn.f32 [[N:%r[0-9]+]], [[T]], 0fCB400000;
// CHECK-NEXT: sub.rn.f32 [[F:%r[0-9]+]], [[C]], [[N]];
// CHECK-NEXT: fma.rn.f32 [[P1:%r[0-9]+]], [[F]], 0f3E7424EA, 0f3F341446;
// CHECK-NEXT: fma.rn.f32 [[P:%r[0-9]+]], [[P1]], [[F]], 0f3F800E81;
// CHECK-NEXT: shl.b32 [[E:%r[0-9]+]], [[T]], 23;
// CHECK-NEXT: add.s32 %r{{[0-9]+}}, [[E]], [[P]];

// EX2: 172
// POLY: 24
// EX2-OFF: 196

// PTXAS: Compiling entry function 'fa3_fwd_e4m3_d128_h8x2_m128n192s2_ov_ws24x240_pp_pe8_s{{[0-9a-f]+}}'
// PTXAS-NEXT: Function properties
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
