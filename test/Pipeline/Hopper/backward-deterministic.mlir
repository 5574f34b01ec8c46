// RUN: fa3-run %s --function=bwd_d64 --emit=ptx > %t.d64.ptx
// RUN: FileCheck %s --check-prefixes=PTX,D64,NOWS < %t.d64.ptx
// RUN: fa3-run %s --function=bwd_d128_window --emit=ptx | FileCheck %s --check-prefixes=PTX,DISJOINT,WS
// RUN: fa3-run %s --function=bwd_d64_128rows --emit=ptx | FileCheck %s --check-prefixes=PTX,DISJOINT,WS
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.d64.ptx -o %t.d64.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}

// The deterministic backward (`deterministic` on fa3.attention_grad): the
// main kernel takes the dQ turn counters as a twelfth parameter; before a
// step's dQ adds, thread 0 spins on its (head, query block) counter with
// acquire loads until the key block's turn comes, and after them passes the
// turn on (a GPU-scope fence and a relaxed add). The consumers meet at a
// CTA barrier after the spin: bar.sync 0 without a producer warpgroup (the
// d64 case's schedule has none), named barrier 4 of the 256 consumer threads
// with one (the producer takes no part).
// PTX: .entry fa3_bwd_bf16_{{.+}}_det
// PTX: _param_11
// WS: setmaxnreg.inc.sync.aligned.u32 240;
// WS-NOT: bar.sync 0;
// PTX: ld.acquire.gpu.global.u32
// NOWS: bar.sync 0;
// WS-NOT: bar.sync 0;
// WS: mov.b32 [[ID:%r[0-9]+]], 4;
// WS: bar.sync [[ID]], %r{{[0-9]+}};
// Each warpgroup's bulk reduce of its dQ tile completes (wait_group 0, not
// .read) before the turn passes on. At D = 64 with 64-row steps both
// warpgroups add to the same dQ elements: warpgroup 0's bulk reduce, a CTA
// barrier, warpgroup 1's, a barrier. At D = 128 they add disjoint columns,
// and at D = 64 with 128-row steps (the default) disjoint rows, with no
// barrier between.
// D64: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// D64: cp.async.bulk.wait_group 0;
// D64: bar.sync 0;
// D64: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// D64: cp.async.bulk.wait_group 0;
// D64: bar.sync 0;
// DISJOINT: cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
// DISJOINT: cp.async.bulk.wait_group 0;
// DISJOINT-NOT: bar.sync 0;
// DISJOINT: wgmma.wait_group.sync.aligned 0;
// NOWS: bar.sync 0;
// WS: bar.sync %r{{[0-9]+}}, %r{{[0-9]+}};
// PTX: fence.acq_rel.gpu;
// PTX-NEXT: red.relaxed.gpu.global.add.u32

// PTXAS: Function properties for fa3_bwd_bf16_d64{{.+}}_det_{{.+}}
// PTXAS-NOT: _pre
// PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @bwd_d64(%do: tensor<?x?x8x64xbf16>, %q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>, %o: tensor<?x?x8x64xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, deterministic, schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>
}

func.func @bwd_d128_window(%do: tensor<?x?x8x128xbf16>, %q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>, %o: tensor<?x?x8x128xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, window = array<i64: 100, 0>, deterministic} : (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>
}

func.func @bwd_d64_128rows(%do: tensor<?x?x8x64xbf16>, %q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>, %o: tensor<?x?x8x64xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, deterministic} : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>
}
