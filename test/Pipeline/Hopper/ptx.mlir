// The sm_90a kernels' PTX has the Hopper machinery: TMA loads completing on
// mbarriers, wgmma with both operands in shared memory for S = Q Kᵀ,
// register-A wgmma (P in registers, V transposed) for O += P V, and ex2.
// The default schedules are warp-specialized: consumer warpgroups
// (setmaxnreg.inc) and a producer warpgroup (setmaxnreg.dec, the TMA
// loads); with two consumers they pingpong on named
// barriers 1 and 2 (bar.sync / bar.arrive with a run-time id).
// No GPU or ptxas needed; ptxas.mlir assembles the same PTX.

// RUN: fa3-run %S/Inputs/kernels.mlir --function=d64_full --emit=ptx | FileCheck %s --check-prefixes=COMMON,D64
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d64_causal --emit=ptx | FileCheck %s --check-prefixes=COMMON,D64
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d128_full --emit=ptx | FileCheck %s --check-prefixes=COMMON,D128
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d128_causal --emit=ptx | FileCheck %s --check-prefixes=COMMON,D128
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d256_full --emit=ptx | FileCheck %s --check-prefixes=COMMON,D256
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d256_causal --emit=ptx | FileCheck %s --check-prefixes=COMMON,D256

// Global stores: O goes through TMA (one store per 64-column atom), so the
// only st.global are the LSE's, one per thread row.
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d128_causal --emit=ptx | FileCheck %s --check-prefix=STORES
// STORES-COUNT-2: cp.async.bulk.tensor.4d.global.shared::cta
// STORES-NOT: cp.async.bulk.tensor.4d.global.shared::cta
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d128_causal --emit=ptx | grep -c st.global | FileCheck %s --check-prefix=STG
// STG: {{^}}2{{$}}

// Three consumer warpgroups (d64) do not pingpong.
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d64_full --emit=ptx | FileCheck %s --check-prefix=NOPP
// NOPP-NOT: bar.arrive

// RUN: fa3-run %S/Inputs/kernels.mlir --function=d256_window --emit=ptx | FileCheck %s --check-prefix=WINDOW
// WINDOW: .visible .entry fa3_fwd_f16_d256_h8x2_m128n80s2_ov_ws24x240_pp_winf_64_s{{[0-9a-f]+}}(
// WINDOW: wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16

// COMMON: .target sm_90a
// COMMON: .extern .shared .align 1024 .b8 fa3_dynamic_smem[];
// The four tensor maps (Q, K, V, O) arrive by value, 64-byte aligned
// (__grid_constant__).
// COMMON: .visible .entry fa3_fwd_bf16_d
// COMMON-NEXT: .param .align 64 .b8 {{.*}}_param_0[128],
// COMMON-NEXT: .param .align 64 .b8 {{.*}}_param_1[128],
// COMMON-NEXT: .param .align 64 .b8 {{.*}}_param_2[128],
// COMMON-NEXT: .param .align 64 .b8 {{.*}}_param_3[128],
// D64: .reqntid 512, 1, 1
// D128: .maxntid 384, 1, 1
// D256: .maxntid 384, 1, 1
// COMMON: mbarrier.init.shared.b64
// D64: setmaxnreg.inc.sync.aligned.u32 160;
// D128: setmaxnreg.inc.sync.aligned.u32 240;
// D256: setmaxnreg.inc.sync.aligned.u32 240;
// COMMON: mbarrier.try_wait.parity
// The consumer's steps, in whatever order the blocks are laid out:
// Consumer 0 takes the first turn.
// D128-DAG: bar.arrive %r{{[0-9]+}}, %r{{[0-9]+}};
// D256-DAG: bar.arrive %r{{[0-9]+}}, %r{{[0-9]+}};
// D128-DAG: bar.sync %r{{[0-9]+}}, %r{{[0-9]+}};
// D256-DAG: bar.sync %r{{[0-9]+}}, %r{{[0-9]+}};
// S = Q Kᵀ: descriptors for A and B.
// D64-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// D128-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// D256-DAG: wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){39}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// COMMON-DAG: wgmma.commit_group.sync.aligned
// COMMON-DAG: wgmma.wait_group.sync.aligned 0
// COMMON-DAG: shfl.sync.bfly.b32
// COMMON-DAG: ex2.approx.ftz.f32
// COMMON-DAG: cvt.rn.bf16x2.f32
// O += P V: A from four 32-bit registers, B transposed (last immediate 1).
// D64-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){31}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// D128-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// D256-DAG: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){127}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// COMMON-DAG: mbarrier.arrive.shared.b64
// COMMON-DAG: lg2.approx.f32
// O through shared memory: the proxy fence, the warpgroup's named barrier,
// then a TMA store per 64-column atom, waited for until read. LSE: one
// 4-byte store per row.
// COMMON-DAG: fence.proxy.async.shared::cta;
// COMMON-DAG: cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%rd{{[0-9]+}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}], [%rd{{[0-9]+}}];
// COMMON-DAG: cp.async.bulk.commit_group;
// COMMON-DAG: cp.async.bulk.wait_group.read 0;
// COMMON-DAG: st.global.b32
// The producer: one thread issues Q, then K and V for every key block,
// waiting on the slot's "empty" mbarrier before reusing it. (Where LLVM
// places the producer's blocks relative to the consumers' varies.)
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d64_causal --emit=ptx | FileCheck %s --check-prefix=PRODUCER
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d128_full --emit=ptx | FileCheck %s --check-prefix=PRODUCER
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d256_causal --emit=ptx | FileCheck %s --check-prefix=PRODUCER
// PRODUCER: setmaxnreg.dec.sync.aligned.u32
// PRODUCER: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes
// PRODUCER: mbarrier.try_wait.parity
// PRODUCER: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes

