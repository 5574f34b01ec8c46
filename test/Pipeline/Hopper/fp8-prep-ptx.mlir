// The Hopper kernels of fa3-cast-fp8's ops.

// An attention marked #fa3.fp8 goes through the whole FP8 chain: Q and K
// through quantization kernels that apply the Hadamard transform in
// registers (no f32 copy), V through the plain pair, then the FP8 attention.
// RUN: fa3-opt %S/Inputs/fp8-prep.mlir --fa3-hopper-kernel-pipeline | FileCheck %s --check-prefix=CHAIN
// CHAIN-LABEL: func.func @fp8_attr
// CHAIN-NOT: fa3.hadamard
// CHAIN: fa3.quantize %{{.+}} {fa3.kernel = @fa3_kernels::@fa3_quantize_bf16_h4g2_d64_hadamard_s7, fa3.launch = {block_m = 128
// CHAIN: fa3.quantize %{{.+}} {fa3.kernel = @fa3_kernels::@fa3_quantize_bf16_h2g2_d64_hadamard_s7, fa3.launch = {block_m = 256
// CHAIN: fa3.quantize %{{.+}} {fa3.kernel = @fa3_kernels::@fa3_quantize_bf16_h2g2_d64, fa3.launch
// CHAIN: fa3.attention {{.+}}fa3.kernel = @fa3_kernels::@fa3_fwd_e4m3_d64_h4x2_m192n192s2_ws32x160_persistent_causal
// CHAIN: llvm.func @fa3_quantize_bf16_h4g2_d64_hadamard_s7_amax(
// CHAIN: llvm.func @fa3_quantize_bf16_h4g2_d64_hadamard_s7_cast(

// The fused quantization at d256: 8 elements a lane, 5 shuffle butterflies
// of 8 values in each kernel plus the amax reduction, two 4-byte stores.
// RUN: fa3-run %S/Inputs/fp8-prep.mlir --function=quantize_hadamard_d256 --emit=ptx | FileCheck %s --check-prefix=FUSED
// FUSED: .visible .entry fa3_quantize_bf16_h8g2_d256_hadamard_s5_amax(
// FUSED-COUNT-45: shfl.sync.bfly.b32
// FUSED: atom.global.max.u32
// FUSED: .visible .entry fa3_quantize_bf16_h8g2_d256_hadamard_s5_cast(
// FUSED-COUNT-40: shfl.sync.bfly.b32
// FUSED: cvt.rn.satfinite.e4m3x2.f32
// FUSED-COUNT-2: st.global.b32

// Hadamard: one warp per row, 4 elements a lane at d128 (2 butterflies in
// registers, 5 through shuffles), f32 out.
// RUN: fa3-run %S/Inputs/fp8-prep.mlir --function=hadamard_d128 --emit=ptx | FileCheck %s --check-prefix=HAD
// HAD: .visible .entry fa3_hadamard_bf16_f32_d128_s0(
// HAD-COUNT-4: ld.global.b16
// HAD-COUNT-20: shfl.sync.bfly.b32
// HAD-COUNT-4: st.global.b32

// Quantize: atomic max of the amax bits, then correctly rounded descales
// and the saturating e4m3 conversion.
// RUN: fa3-run %S/Inputs/fp8-prep.mlir --function=quantize_f32 --emit=ptx | FileCheck %s --check-prefix=QUANT
// QUANT: .visible .entry fa3_quantize_f32_h8g2_d128_amax(
// QUANT: max.NaN.f32
// QUANT: atom.global.max.u32
// QUANT: .visible .entry fa3_quantize_f32_h8g2_d128_cast(
// QUANT: div.rn.f32 {{.+}}, 0f43E00000;
// QUANT: max.NaN.f32 {{.+}}, 0f2B8CBCCC;
// QUANT: rcp.rn.f32
// QUANT: cvt.rn.satfinite.e4m3x2.f32
// QUANT: cvt.rn.satfinite.e4m3x2.f32
// QUANT: st.global.b32
