// REQUIRES: fa3-run
// RUN: fa3-run %S/Inputs/lazy-rescale.mlir --function=lr_d128 --emit=ptx | FileCheck %s
// RUN: fa3-run %S/Inputs/lazy-rescale.mlir --function=lr_fp8 --emit=ptx | FileCheck %s --check-prefix=FP8

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
