// The backward's three sm_90a kernels (Inputs/backward.mlir): the
// preprocessing (Δ, LSE₂, zeroed dQ accumulator), the main kernel and the
// dQ conversion. No GPU or ptxas needed; backward-ptxas.mlir assembles them.

// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d128 --emit=ptx | FileCheck %s --check-prefixes=COMMON,OWNROWS,D128
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d64_causal --emit=ptx | FileCheck %s --check-prefixes=COMMON,OWNROWS,D64
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d256_causal --emit=ptx | FileCheck %s --check-prefixes=COMMON,D256
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d256_causal --emit=ptx | FileCheck %s --check-prefix=D256ST
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d256_causal --emit=ptx | FileCheck %s --check-prefix=LOADS
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d128 --emit=ptx | FileCheck %s --check-prefix=LOADS
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d128_mha_causal --emit=ptx | FileCheck %s --check-prefix=MHA
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d128 --emit=ptx | FileCheck %s --check-prefix=EPI
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d64_causal --emit=ptx | FileCheck %s --check-prefix=EPI
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d256_causal --emit=ptx | FileCheck %s --check-prefix=EPI

// COMMON: .target sm_90a
// COMMON: .visible .entry fa3_bwd_{{b?f16}}_d{{[0-9]+}}_h{{[0-9x]+}}_m{{64|128}}n{{64|128}}s2{{.*}}_pre(
// (dO, O, LSE, dLSE, dQ accumulator, LSE₂, Δ, Sq): dLSE may be null.
// COMMON: .param .u64 .ptr .global .align 1 {{.*}}_pre_param_6,
// COMMON-NEXT: .param .u32 {{.*}}_pre_param_7
// COMMON: ld.param.b64 [[DLSE:%rd[0-9]+]], [{{.*}}_pre_param_3];
// COMMON: setp.eq.b64 [[NULL:%p[0-9]+]], [[DLSE]], 0;
// COMMON: shfl.sync.bfly.b32
// Δ = rowsum(dO ∘ O), minus dLSE where the LSE has a gradient.
// COMMON: @[[NULL]] bra
// COMMON: ld.global.b32 [[G:%r[0-9]+]],
// COMMON-NEXT: sub.rn.f32 %r{{[0-9]+}}, %r{{[0-9]+}}, [[G]];
// The main kernel: four tensor maps by value (Q, K, V, dO).
// COMMON: .visible .entry fa3_bwd_{{[a-z0-9_]+}}_s{{[0-9a-f]+}}(
// COMMON-NEXT: .param .align 64 .b8 {{.*}}_param_0[128],
// COMMON-NEXT: .param .align 64 .b8 {{.*}}_param_1[128],
// COMMON-NEXT: .param .align 64 .b8 {{.*}}_param_2[128],
// COMMON-NEXT: .param .align 64 .b8 {{.*}}_param_3[128],
// A producer warpgroup and two consumer warpgroups. The producer
// (warpgroup 0) gives up registers to the consumers; its first thread loads
// K and V once, then each step's Q/dO tiles and their LSE₂/Δ rows (1-D bulk
// copies) as soon as the consumers released the slot's previous use.
// COMMON: .maxntid 384, 1, 1
// Causal GQA grids run longest first: a CTA's (key block, key/value head,
// batch) come from its linear index in dispatch order, key block-major
// within chunks of (head, batch) pairs whose Q and dO fit 32 MB: 32 MB /
// (4 query heads · D · 4 bytes) / Sq pairs. The non-causal D128 kernel and
// a causal MHA one (MHA below) keep the grid's own indices.
// D64: mov.u32 %r{{[0-9]+}}, %nctaid.x;
// D64: div.u32 %r{{[0-9]+}}, 32768, %r{{[0-9]+}};
// D256: mov.u32 %r{{[0-9]+}}, %nctaid.x;
// D256: div.u32 %r{{[0-9]+}}, 8192, %r{{[0-9]+}};
// D128-NOT: nctaid
// MHA: .visible .entry fa3_bwd_bf16_d128_h4x4_m64n128s2_ws24x240_causal_s{{[0-9a-f]+}}(
// MHA-NOT: nctaid
// MHA: setmaxnreg.dec.sync.aligned.u32 24;
// COMMON: setmaxnreg.dec.sync.aligned.u32 24;
// COMMON: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes
// COMMON: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// COMMON: mbarrier.try_wait.parity.shared.b64
// COMMON: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes
// The consumers load nothing: they wait for the ring's full barriers and
// release each slot with one arrival a thread.
// COMMON: setmaxnreg.inc.sync.aligned.u32 240;
// LOADS: setmaxnreg.inc.sync.aligned.u32 240;
// LOADS-NOT: cp.async.bulk.tensor.4d.shared::cta.global
// LOADS-NOT: cp.async.bulk.shared::cluster.global
// LOADS: mbarrier.arrive.shared.b64
// LOADS-NOT: cp.async.bulk.tensor.4d.shared::cta.global
// LOADS-NOT: cp.async.bulk.shared::cluster.global
// LOADS: .visible .entry fa3_bwd_{{[a-z0-9_]+}}_post(
// D256ST: setmaxnreg.inc.sync.aligned.u32 240;
// dK and dV leave through shared memory: the consumers write their
// fragments row-major there (4-byte shared stores) and then store 16-byte
// pieces of rows; no 4-byte global store is left in the main kernel.
// EPI: setmaxnreg.inc.sync.aligned.u32 240;
// EPI-NOT: st.global.b32
// EPI: ld.shared.v4.b32
// EPI: st.global.v4.b32
// EPI-NOT: st.global.b32
// EPI: .visible .entry fa3_bwd_{{[a-z0-9_]+}}_post(
// Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, both K-major, as two commit groups: Pᵀ's exp2
// runs after the first wait (Sᵀ done) while dPᵀ's wgmmas do, dSᵀ after the
// second. A warpgroup with its own 64 key rows (D64, D128) takes all the
// step's query columns (m64n64; m64n128 at D64, whose steps are 128 query
// rows); at D256 the two share the key rows and take 32 query columns each
// (m64n32).
// D128: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){31}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// D64: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// D256ST: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {{{(%[rf][0-9]+, ){15}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// OWNROWS: wgmma.commit_group.sync.aligned;
// D256ST: wgmma.commit_group.sync.aligned;
// D128: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){31}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// D64: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// D256ST: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {{{(%[rf][0-9]+, ){15}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 0;
// OWNROWS: wgmma.commit_group.sync.aligned;
// OWNROWS-NEXT: wgmma.wait_group.sync.aligned 1;
// D256ST: wgmma.commit_group.sync.aligned;
// D256ST-NEXT: wgmma.wait_group.sync.aligned 1;
// COMMON: ex2.approx.ftz.f32
// COMMON: wgmma.wait_group.sync.aligned 0;
// (At D256 the Sᵀ/dPᵀ wgmmas above are laid out after the rest of the step:
// the D256ST run checks them.)
// dSᵀ (at D256 also Pᵀ) goes to shared memory: one of two buffers by step
// parity, so no barrier comes before the stores; one after them (at D <=
// 128 the issuer first waits for the last step's dQ bulk reduce to have
// read its staging tile). With its own key rows a warpgroup issues dV +=
// Pᵀ dO (register A, B transposed) before the stores; at D256 it reads
// Pᵀ's tile after the barrier (A from shared memory, K-major).
// D64: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){31}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// D128: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// OWNROWS: wgmma.commit_group.sync.aligned;
// COMMON-NOT: bar.sync
// COMMON: st.shared.b32
// COMMON-NOT: bar.sync
// COMMON: fence.proxy.async.shared::cta;
// COMMON-NOT: bar.sync
// D64: cp.async.bulk.wait_group.read 0;
// D128: cp.async.bulk.wait_group.read 0;
// D256-NOT: cp.async.bulk.wait_group
// COMMON: bar.sync
// D256: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 1;
// D256: wgmma.commit_group.sync.aligned;
// dQ = dS K with A and B both MN-major, then dK += dSᵀ Q (A from registers,
// at D256 from dSᵀ's tile), and
// dQ added to the f32 accumulator while dK's wgmmas run (wait for all
// groups but the last).
// COMMON: wgmma.mma_async.sync.aligned.m64n64k16.f32.{{b?f16}}.{{b?f16}} {{{(%[rf][0-9]+, ){31}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 1, 1;
// COMMON: wgmma.commit_group.sync.aligned;
// D64: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){31}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// D128: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// D256: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{(%[rf][0-9]+, ){63}%[rf][0-9]+}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, p, 1, 1, 0, 1;
// COMMON: wgmma.commit_group.sync.aligned;
// COMMON-NEXT: wgmma.wait_group.sync.aligned 1;
// D <= 128: each warpgroup's 64 × 64 partial goes to its staging tile in
// fragment-slot order (16 bytes a thread and 8-column block), then, after a
// warpgroup barrier, its first thread adds the 16 KB tile to the
// accumulator's block with one bulk reduce; the CTA waits for the last ones
// before it exits. D = 256 has no room for the staging tiles: each thread
// adds each of its 16-byte slots with one red.global.add.v4.f32 (a warp's
// cover 512 contiguous bytes: whole sectors).
// Only the issuer's warp waits at the warpgroup barrier; the other three
// arrive.
// D64: st.shared.v4.b32
// D64: fence.proxy.async.shared::cta;
// D64: bar.sync
// D64: bar.arrive
// D64: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd{{[0-9]+}}], [%r{{[0-9]+}}], %r{{[0-9]+}};
// D64: cp.async.bulk.commit_group;
// D64: cp.async.bulk.wait_group 0;
// D128: st.shared.v4.b32
// D128: fence.proxy.async.shared::cta;
// D128: bar.sync
// D128: bar.arrive
// D128: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd{{[0-9]+}}], [%r{{[0-9]+}}], %r{{[0-9]+}};
// D128: cp.async.bulk.commit_group;
// D128: cp.async.bulk.wait_group 0;
// D256-NOT: cp.reduce.async.bulk
// D256: red.global.add.v4.f32 [%rd{{[0-9]+}}], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}};
// D256-NOT: red.global.add.v2.f32
// The postprocessing (dQ accumulator, dQ, Sq) takes a 64-row block through
// a shared tile (64 rows of 2·D + 16 bytes): every fragment slot of the
// thread is loaded first (16 bytes per 8-column block: 8 loads at D = 64,
// 16 at D = 128, 32 at D = 256), scaled, rounded and stored row-major; after
// the CTA barrier each thread writes 16-byte pieces of dQ rows.
// COMMON: .visible .entry fa3_bwd_{{[a-z0-9_]+}}_post(
// COMMON: .param .u32 {{.*}}_post_param_2
// COMMON-NEXT: )
// COMMON: .shared .align 16 .b8 fa3_bwd_{{[a-z0-9_]+}}_post_tile[{{9216|17408|33792}}];
// D64-COUNT-8: ld.global.v4.b32
// D128-COUNT-16: ld.global.v4.b32
// D256-COUNT-32: ld.global.v4.b32
// COMMON-NOT: st.global
// COMMON: cvt.rn.{{b?f16}}x2.f32
// COMMON: st.shared.b32
// COMMON-NOT: st.global
// COMMON: bar.sync 0;
// COMMON: ld.shared.v4.b32
// COMMON: st.global.v4.b32
