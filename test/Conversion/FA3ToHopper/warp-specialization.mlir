// RUN: fa3-opt %s --split-input-file --pass-pipeline="builtin.module(fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-fuse-softmax,fa3-warp-specialize,fa3-intra-wg-overlap,fa3-pingpong),convert-fa3-tile-to-hopper,convert-fa3-kernel-to-nvvm))" | FileCheck %s

// The kernel structure follows the schedule's producer_regs/consumer_regs
// and pingpong fields; each form below is what one schedule builds.

// Without a producer (producer_regs = consumer_regs = 0): 256 threads, no
// register split; warp 0 of the consumers refills the K/V ring after each
// block (it waits on the slot's "empty" mbarrier inside the key loop).
// CHECK-LABEL: llvm.func @fa3_fwd_bf16_d128_h4x4_m128n128s2_s
// CHECK-SAME: nvvm.maxntid = array<i32: 256, 1, 1>
// CHECK-NOT: nvvm.setmaxregister
// CHECK-NOT: bar.arrive
// CHECK: scf.for
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.mbarrier.arrive
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: llvm.return
func.func @plain(%q: tensor<?x?x4x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>
}

// -----

// Warp specialization: a fourth warpgroup of 128 threads. Warpgroup 0
// shrinks to 24 registers and one of its threads loads Q, then walks the key
// blocks, waiting for a slot to be released before reloading it; the
// consumers grow to 240 registers, load nothing (they only release slots)
// and store O by TMA.
// CHECK-LABEL: llvm.func @fa3_fwd_bf16_d64_h4x4_m192n128s2_ws32x160_s
// CHECK-SAME: nvvm.reqntid = array<i32: 512, 1, 1>
// CHECK: nvvm.barrier0
// CHECK: scf.if
// CHECK-NEXT: nvvm.setmaxregister  decrease 32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: scf.for
// CHECK: scf.if
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: } else {
// CHECK-NEXT: nvvm.setmaxregister  increase 160
// CHECK-NOT: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: scf.for
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.mbarrier.arrive
// CHECK-NOT: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: nvvm.cp.async.bulk.tensor.global.shared.cta %arg3
// CHECK-NOT: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: llvm.return
func.func @ws(%q: tensor<?x?x4x64xbf16>, %k: tensor<?x?x4x64xbf16>, %v: tensor<?x?x4x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
}

// -----

// Pingpong: consumer 0 arrives on its own named barrier (1) first; in each
// key block a consumer waits on barrier 1 + its index before its QKᵀ
// wgmmas and arrives on the other's after committing them; consumer 0 ends
// with one more wait, which takes consumer 1's last arrive.
// CHECK-LABEL: llvm.func @fa3_fwd_bf16_d128_h4x4_m128n128s2_ws24x240_pp_s
// CHECK-SAME: nvvm.maxntid = array<i32: 384, 1, 1>
// CHECK: nvvm.setmaxregister  decrease 24
// CHECK: nvvm.setmaxregister  increase 240
// CHECK: scf.if
// CHECK-NEXT: %[[THREADS:.+]] = llvm.mlir.constant(256 : i32) : i32
// CHECK-NEXT: llvm.inline_asm has_side_effects "bar.arrive $0, $1;", "r,r" %c1_i32, %[[THREADS]] : (i32, i32) -> ()
// CHECK: scf.for
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: llvm.inline_asm has_side_effects "bar.sync $0, $1;", "r,r"
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: llvm.inline_asm has_side_effects "bar.arrive $0, $1;", "r,r"
// CHECK: scf.yield
// CHECK: scf.if
// CHECK: llvm.inline_asm has_side_effects "bar.sync $0, $1;", "r,r"
// CHECK: llvm.return
func.func @pingpong(%q: tensor<?x?x4x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>
}

// -----

// Pingpong with intra-warpgroup overlap: one turn covers block j+1's QKᵀ
// and block j's PV (the take before the first, the pass after the second).
// CHECK-LABEL: llvm.func @fa3_fwd_bf16_d128_h4x4_m128n128s2_ov_ws24x240_pp_s
// CHECK: %[[KEMPTY:.+]] = llvm.getelementptr %{{.+}}[163880] :
// CHECK-NEXT: %[[VEMPTY:.+]] = llvm.getelementptr %{{.+}}[163896] :
// CHECK: nvvm.setmaxregister  increase 240
// The first block's QKᵀ, peeled, is a turn of its own.
// CHECK: "bar.sync $0, $1;"
// CHECK: "bar.arrive $0, $1;"
// CHECK: scf.for
// CHECK: llvm.inline_asm has_side_effects "bar.sync $0, $1;", "r,r"
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: bar.
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: llvm.inline_asm has_side_effects "bar.arrive $0, $1;", "r,r"
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// Block j+1's key slot goes back to the producer as soon as its QKᵀ
// completed (its K-empty mbarrier: 163840 bytes of Q, K and V tiles, then
// the rings Q full, K full and V full for 2 stages, so the K-empty ring at
// 163880, slot use mod 2), before block j's PV completes; block j's value
// slot after (the V-empty ring at 163896).
// CHECK-NEXT: %[[TWO:.+]] = arith.constant 2 : i32
// CHECK-NEXT: %[[KSLOT:.+]] = arith.remui %{{.+}}, %[[TWO]] : i32
// CHECK-NEXT: %[[KIDX:.+]] = arith.extui %[[KSLOT]] : i32 to i64
// CHECK-NEXT: %[[KPTR:.+]] = llvm.getelementptr %[[KEMPTY]][%[[KIDX]]] : (!llvm.ptr<3>, i64) -> !llvm.ptr<3>, i64
// CHECK-NEXT: nvvm.mbarrier.arrive %[[KPTR]] : !llvm.ptr<3>
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NEXT: %[[TWO2:.+]] = arith.constant 2 : i32
// CHECK-NEXT: %[[VSLOT:.+]] = arith.remui %{{.+}}, %[[TWO2]] : i32
// CHECK-NEXT: %[[VIDX:.+]] = arith.extui %[[VSLOT]] : i32 to i64
// CHECK-NEXT: %[[VPTR:.+]] = llvm.getelementptr %[[VEMPTY]][%[[VIDX]]] : (!llvm.ptr<3>, i64) -> !llvm.ptr<3>, i64
// CHECK-NEXT: nvvm.mbarrier.arrive %[[VPTR]] : !llvm.ptr<3>
func.func @pingpong_overlap(%q: tensor<?x?x4x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} : (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>
}
