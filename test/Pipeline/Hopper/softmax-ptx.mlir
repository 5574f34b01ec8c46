// REQUIRES: fa3-run
// RUN: fa3-run %S/Inputs/softmax.mlir --function=lr_d128 --emit=ptx | FileCheck %s
// RUN: fa3-run %S/Inputs/softmax.mlir --function=lr_fp8 --emit=ptx | FileCheck %s --check-prefix=FP8
// RUN: fa3-run %S/Inputs/softmax.mlir --function=em_d64 --emit=ptx | FileCheck %s --check-prefix=EM

// Lazy rescaling (fa3-lazy-rescale) in the kernel: the name says τ; each
// row keeps its max where c · (m' − m) <= τ, with a correction of exactly
// 1 (selected, not computed), and the accumulator's rescale sits behind a
// branch that a thread takes only when one of its two rows moved its max.
// CHECK: .entry fa3_fwd_bf16_d128_h16x16_m128n128s2_ov_ws24x240_pp_lr8_causal_
// CHECK: setp.le.f32 {{.*}}, 0f41000000;
// CHECK: selp.f32 {{.*}}, 0f3F800000,
// CHECK: setp.eq.f32 [[P0:%p[0-9]+]], {{%r[0-9]+}}, 0f3F800000;
// CHECK-NEXT: setp.eq.f32 [[P1:%p[0-9]+]], {{%r[0-9]+}}, 0f3F800000;
// CHECK-NEXT: and.pred [[BOTH:%p[0-9]+]], [[P1]], [[P0]];
// CHECK-NEXT: @[[BOTH]] bra
// CHECK-NEXT: mul.rn.f32

// FP8 with τ = 4: P · 2^(8 − 4) enters the e4m3 wgmma, so the softmax's exp2
// adds log2 2^4 = 4 to its exponent (0f40800000) and the LSE subtracts ln 16.
// FP8: .entry fa3_fwd_e4m3_d128_h16x16_m128n128s2_ov_ws24x240_pp_lr4_
// FP8: setp.le.f32 {{.*}}, 0f40800000;
// FP8: add.rn.f32 {{.*}}, 0f40800000;
// FP8: setp.eq.f32 [[Q0:%p[0-9]+]], {{%r[0-9]+}}, 0f3F800000;
// FP8-NEXT: setp.eq.f32 [[Q1:%p[0-9]+]], {{%r[0-9]+}}, 0f3F800000;
// FP8-NEXT: and.pred [[QBOTH:%p[0-9]+]], [[Q1]], [[Q0]];
// FP8-NEXT: @[[QBOTH]] bra
// FP8-NEXT: mul.rn.f32

// exp2_emulation = 4: of every 16 exponentials of P a thread computes, 4
// are FlashAttention-4's polynomial (clamp at -127, floor by an add rounding
// down against 1.5 · 2^23, three fmas for 2^f, the floor shifted into the
// exponent bits) and the other 12 MUFU.EX2: at block_n = 128 a thread's 64
// exponentials are 16 polynomials and 48 ex2 (plus the two corrections).
// EM: .entry fa3_fwd_bf16_d64_h16x16_m128n128s2_ws24x240_pp_em4_causal_
// EM: max.NaN.f32 [[X:%r[0-9]+]], {{%r[0-9]+}}, 0fC2FE0000;
// EM-NEXT: mov.b32 [[MAGIC:%r[0-9]+]], 0f4B400000;
// EM-NEXT: add.rm.f32 [[R:%r[0-9]+]], [[X]], [[MAGIC]];
// EM-NEXT: add.rn.f32 [[J:%r[0-9]+]], [[R]], 0fCB400000;
// EM-NEXT: sub.rn.f32 [[F:%r[0-9]+]], [[X]], [[J]];
// EM-NEXT: fma.rn.f32 [[P1:%r[0-9]+]], [[F]], 0f3D9DD45C, 0f3E691C4C;
// EM-NEXT: fma.rn.f32 [[P2:%r[0-9]+]], [[P1]], [[F]], 0f3F31F325;
// EM-NEXT: fma.rn.f32 [[P3:%r[0-9]+]], [[P2]], [[F]], 0f3F800000;
// EM-NEXT: shl.b32 [[E:%r[0-9]+]], [[R]], 23;
// EM-NEXT: add.s32 {{%r[0-9]+}}, [[E]], [[P3]];
// EM-COUNT-15: add.rm.f32
// EM-NOT: add.rm.f32
