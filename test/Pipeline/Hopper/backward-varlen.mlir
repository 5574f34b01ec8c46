// The packed (varlen) backward on Hopper: fa3.attention_varlen_grad gets
// the dense backward's three kernels, reading each sequence's rows at its
// offsets. The main kernel's and _post's grid z runs over the sequences
// plus one, whose CTAs zero the dK/dV and dQ rows past the last sequence.

// RUN: split-file %s %t
// RUN: fa3-opt %t/varlen.mlir --fa3-hopper-pipeline | FileCheck %s --check-prefix=LAUNCH
// RUN: fa3-run %t/varlen.mlir --function=varlen_causal --emit=ptx > %t.causal.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.causal.ptx
// RUN: fa3-run %t/varlen.mlir --function=varlen_used_det --emit=ptx > %t.used.ptx
// RUN: FileCheck %s --check-prefix=USED < %t.used.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.causal.ptx -o %t.causal.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.used.ptx -o %t.used.cubin 2>&1 | FileCheck %s --check-prefixes=PTXAS,NOSPILL %}

// The launch says varlen (the runtime passes the offsets and sizes grid z
// as B + 1), seqused when the op has seqused_k, deterministic when it is.
// LAUNCH-LABEL: func.func @varlen_causal
// LAUNCH: fa3.attention_varlen_grad
// LAUNCH-SAME: fa3.kernel = @fa3_kernels::@fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal_varlen_s{{[0-9a-f]+}}
// LAUNCH-SAME: fa3.launch = {block_m = 64 : i64, block_n = 128 : i64, shared_memory = {{[0-9]+}} : i64, threads = 384 : i64, varlen = 1 : i64}
// LAUNCH-LABEL: func.func @varlen_used_det
// LAUNCH: fa3.launch = {block_m = 64 : i64, block_n = 128 : i64, deterministic = 1 : i64, seqused = 1 : i64, shared_memory = {{[0-9]+}} : i64, threads = 384 : i64, varlen = 1 : i64}

// The preprocessing takes cu_seqlens_q after Sq; grid z is the B sequences
// (the accumulator has only their rows).
// PTX: .visible .entry fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal_varlen_s{{[0-9a-f]+}}_pre(
// PTX: .param .u32 {{.*}}_pre_param_7,
// PTX-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_pre_param_8
// PTX-NEXT: )
// The statistics' (and the accumulator's) rows of a sequence start at
// floor((cu_q[b] + b·64) / 64)·64, and there are floor((Tq + B·64) / 64)·64
// of them per head.
// PTX: and.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, -64;
// PTX: mov.u32 %r{{[0-9]+}}, %nctaid.z;
// PTX: and.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, -64;
// The main kernel: the dense parameters, then cu_seqlens_q and cu_seqlens_k.
// PTX: .visible .entry fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal_varlen_s{{[0-9a-f]+}}(
// PTX: .param .u32 {{.*}}_param_10,
// PTX-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_11,
// PTX-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_12
// PTX-NEXT: )
// The last z zeroes dK and dV past cu_seqlens_k[B] (64 threads, one 32-bit
// pair of the 128 columns each), over every key block's x.
// PTX: mov.u32 %r{{[0-9]+}}, %nctaid.z;
// PTX: setp.gt.u32 %p{{[0-9]+}}, %r{{[0-9]+}}, 63;
// PTX: mov.u32 %r{{[0-9]+}}, %nctaid.x;
// PTX: st.global.b32 [%rd{{[0-9]+}}], 0;
// PTX-NEXT: add.s64
// PTX-NEXT: st.global.b32 [%rd{{[0-9]+}}], 0;
// A key block at or past its sequence's end does nothing (the first key
// row is the key grid's: cu_seqlens_k[b] clamped at 0).
// PTX: ld.global.b32 [[K0:%r[0-9]+]], {{\[}}[[CUK:%rd[0-9]+]]{{\]}};
// PTX-NEXT: max.s32 [[K0C:%r[0-9]+]], [[K0]], 0;
// PTX-NEXT: ld.global.b32 [[K1:%r[0-9]+]], {{\[}}[[CUK]]+4{{\]}};
// PTX-NEXT: sub.s32 [[KLEN:%r[0-9]+]], [[K1]], [[K0C]];
// PTX-NEXT: setp.ge.s32 [[PAST:%p[0-9]+]], %r{{[0-9]+}}, [[KLEN]];
// PTX-NEXT: @[[PAST]] bra
// K at the sequence's rows, batch coordinate 0 (the register of column 0).
// PTX: mov.b32 [[ZERO:%r[0-9]+]], 0;
// PTX: cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%rd{{[0-9]+}}], [%rd{{[0-9]+}}, {[[ZERO]], %r{{[0-9]+}}, %r{{[0-9]+}}, [[ZERO]]}]
// PTX: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// dQ's tiles into the accumulator's rows of the sequence's statistics.
// PTX: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// The postprocessing: (accumulator, dQ, Tq, cu_seqlens_q); its last grid z
// zeroes the dQ rows past cu_seqlens_q[B], striding over their pairs.
// PTX: .visible .entry fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal_varlen_s{{[0-9a-f]+}}_post(
// PTX: .param .u32 {{.*}}_post_param_2,
// PTX-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_post_param_3
// PTX-NEXT: )
// PTX: mov.u32 [[NZ:%r[0-9]+]], %nctaid.z;
// PTX: mov.u32 %r{{[0-9]+}}, %nctaid.x;
// PTX: st.global.b32 [%rd{{[0-9]+}}], 0;
// The sequences' blocks: 16-byte fragment slots, 8-column blocks 2 KB apart.
// PTX: ld.global.v4.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[SLOT:%rd[0-9]+]]{{\]}};
// PTX: ld.global.v4.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[SLOT]]+2048{{\]}};

// With seqused_k it is the main kernel's parameter 13; the turn counters of
// the deterministic form come last.
// USED: .visible .entry fa3_bwd_f16_d64_h4x4_m64n128s2_ws24x240_det_varlen_used_w16_40_cap41f00000_s{{[0-9a-f]+}}(
// USED: .param .u64 .ptr .global .align 1 {{.*}}_param_13,
// USED-NEXT: .param .u64 .ptr .global .align 1 {{.*}}_param_14
// USED-NEXT: )
// USED: ld.param.b64 {{%rd[0-9]+}}, [{{.*}}_param_13];
// USED: ld.acquire.gpu.global.u32
// USED: fence.acq_rel.gpu;

// PTXAS-NOT: {{C7508|C7517|C7519|C7520|error}}
// PTXAS: Compiling entry function 'fa3_bwd_{{[a-z0-9_]+}}_s{{[0-9a-f]+}}' for 'sm_90a'
// NOSPILL: Function properties for fa3_bwd_{{[a-z0-9_]+}}_s{{[0-9a-f]+$}}
// NOSPILL-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

//--- varlen.mlir
func.func @varlen_causal(%do: tensor<?x8x128xbf16>, %q: tensor<?x8x128xbf16>, %k: tensor<?x2x128xbf16>, %v: tensor<?x2x128xbf16>, %o: tensor<?x8x128xbf16>, %lse: tensor<8x?xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x8x128xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk {causal} : (tensor<?x8x128xbf16>, tensor<?x8x128xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16>, tensor<?x8x128xbf16>, tensor<8x?xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x8x128xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16>)
  return %dq, %dk, %dv : tensor<?x8x128xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16>
}

func.func @varlen_used_det(%do: tensor<?x4x64xf16>, %q: tensor<?x4x64xf16>, %k: tensor<?x4x64xf16>, %v: tensor<?x4x64xf16>, %o: tensor<?x4x64xf16>, %lse: tensor<4x?xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>, %used: tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x4x64xf16>) {
  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk seqused_k %used {window = array<i64: 16, 40>, softcap = 30.0 : f32, deterministic} : (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<4x?xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x4x64xf16>)
  return %dq, %dk, %dv : tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x4x64xf16>
}
