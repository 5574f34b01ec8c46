// The FP8 (e4m3) forward: the V' layout kernel, e4m3 wgmma with K-major
// operands for both GEMMs (no transpose flags), P scaled and packed to e4m3
// in registers, and the three descale pointers among the parameters.

// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_causal --emit=ptx | FileCheck %s --check-prefixes=CHECK,D128
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d256 --emit=ptx | FileCheck %s --check-prefixes=CHECK,D256
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d64_causal --emit=ptx | FileCheck %s --check-prefix=D64
// At D = 64 the e4m3 rows are 64 bytes: 64-byte swizzle, 3 warpgroups.
// D64: .visible .entry fa3_fwd_e4m3_d64_h8x2_m192n128s2_causal_s{{[0-9a-f]+}}(
// D64: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1;
// D64: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){31}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
// The CPU form (fa3-tile): e4m3 decoded from its bits, times the descale of
// the (batch, kv head), then the f32 attention and a bf16 output.
// RUN: fa3-opt %S/Inputs/fp8.mlir --fa3-select-schedule --fa3-tile | FileCheck %s --check-prefix=CPU
// CPU-LABEL: func.func @fp8_d128_causal
// CPU: linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>) outs(%{{.+}} : tensor<?x?x8x128xf32>)
// CPU: arith.bitcast %{{.+}} : f8E4M3FN to i8
// CPU: fa3.attention_block
// CPU: arith.truncf %{{.+}} : f32 to bf16

// CHECK: .visible .entry fa3_fwd_e4m3_d{{128|256}}_{{.*}}_vt(
// CHECK: .visible .entry fa3_fwd_e4m3_d{{128|256}}_h{{[0-9x]+}}_m128n128s2{{.*}}_s{{[0-9a-f]+}}(
// CHECK-NEXT: .param .align 64 .b8 {{.*}}_param_0[128],
// CHECK-NEXT: .param .align 64 .b8 {{.*}}_param_1[128],
// CHECK-NEXT: .param .align 64 .b8 {{.*}}_param_2[128],
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_3,
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_4,
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_5,
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_6,
// CHECK-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_7,
// CHECK-NEXT: .param .u32 {{.*}}_param_8,
// S = Q Kᵀ: m64n128k32, both operands from shared memory, K-major.
// CHECK: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1;
// CHECK: ex2.approx.ftz.f32
// P · 2^8 to e4m3, four per register.
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// O += P V'ᵀ: A from registers, B (V') K-major.
// D128: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
// D256: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {{{(%[rf][0-9]+, ){127}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1;
// The output is bf16.
// CHECK: cvt.rn.bf16x2.f32
