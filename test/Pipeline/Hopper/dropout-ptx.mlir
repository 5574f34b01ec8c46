// Attention dropout on Hopper (Inputs/dropout.mlir): the forward kernel and
// the backward's main kernel take the Philox (seed, offset) pointer as their
// last parameter, read the seed (64 bits) and the offset's low word from it
// once, and run Philox4x32-10 (its multipliers 0xD2511F53 = -766435501 and
// 0xCD9E8D57 = -845247145 as signed 32-bit immediates) on the S / Sᵀ
// fragments. The forward keeps its pingpong but not the intra-warpgroup
// overlap (no `_ov` in its name: fa3-select-schedule turns it off). No GPU
// or ptxas needed; dropout-ptxas.mlir assembles them.

// RUN: fa3-run %S/Inputs/dropout.mlir --function=fwd_d128_causal --emit=ptx | FileCheck %s --check-prefixes=PHILOX,FWD
// RUN: fa3-run %S/Inputs/dropout.mlir --function=fwd_d64 --emit=ptx | FileCheck %s --check-prefixes=PHILOX,FWD64
// RUN: fa3-run %S/Inputs/dropout.mlir --function=bwd_d128_causal --emit=ptx | FileCheck %s --check-prefixes=PHILOX,BWD
// RUN: fa3-run %S/Inputs/dropout.mlir --function=bwd_d256_det --emit=ptx | FileCheck %s --check-prefixes=PHILOX,DET
// RUN: not fa3-run %S/Inputs/dropout.mlir --function=fwd_overlap --emit=ptx 2>&1 | FileCheck %s --check-prefix=OVERLAP

// OVERLAP: 'fa3.dropout' op is not the rotated key loop convert-fa3-tile-to-hopper implements: dropout is built in the plain key loop only (intra_wg_overlap = false)

// FWD: .visible .entry [[K:fa3_fwd_bf16_d128_h16x4_m128n128s2_ws24x240_pp_causal_drop3dcccccd_s3db504f3]](
// FWD: .param .u64 .ptr .global .align 1 [[K]]_param_8,
// FWD-NEXT: .param .u64 .ptr .global .align 1 [[K]]_param_9
// FWD-NEXT: )
// FWD: ld.param.b64 %rd[[RNG:[0-9]+]], {{\[}}[[K]]_param_9{{\]}};
// FWD-DAG: ld.global.nc.b32 %rd{{[0-9]+}}, [%rd[[RNG]]+8];
// FWD-DAG: ld.global.nc.b64 %rd{{[0-9]+}}, [%rd[[RNG]]];

// FWD64: .visible .entry [[K:fa3_fwd_f16_d64_h8x8_m192n128s2_ws32x160_drop3f000000_s3e000000]](
// FWD64: [[K]]_param_9
// FWD64-NEXT: )

// The backward's main kernel (after its _pre companion): 11 parameters and
// the rng; a deterministic one has the dQ turn counters before it.
// BWD: .visible .entry [[K:fa3_bwd_bf16_d128_h16x4_m64n128s2_ws24x240_causal_drop3dcccccd_s3db504f3]](
// BWD: .param .u32 [[K]]_param_10,
// BWD-NEXT: .param .u64 .ptr .global .align 1 [[K]]_param_11
// BWD-NEXT: )
// BWD: ld.param.b64 %rd[[RNG:[0-9]+]], {{\[}}[[K]]_param_11{{\]}};

// DET: .visible .entry [[K:fa3_bwd_bf16_d256_h4x4_m64n64s2_ws24x240_det_drop3e800000_s3d800000]](
// DET: .param .u64 .ptr .global .align 1 [[K]]_param_11,
// DET-NEXT: .param .u64 .ptr .global .align 1 [[K]]_param_12
// DET-NEXT: )
// DET: ld.param.b64 %rd[[RNG:[0-9]+]], {{\[}}[[K]]_param_12{{\]}};

// PHILOX-DAG: mul.wide.u32 %rd{{[0-9]+}}, %r{{[0-9]+}}, -766435501;
// PHILOX-DAG: mul.wide.u32 %rd{{[0-9]+}}, %r{{[0-9]+}}, -845247145;
