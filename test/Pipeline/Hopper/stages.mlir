// RUN: fa3-opt %s --fa3-hopper-kernel-pipeline --mlir-print-ir-after-all -o /dev/null 2>&1 | FileCheck %s

// Every stage of the 16-bit Hopper forward is visible in the IR: one
// attention with every schedule idea on (causal GQA 4:2, D = 128, a producer
// warpgroup, pingpong, intra-warpgroup overlap, a persistent grid), and what
// each pass of fa3-hopper-kernel-pipeline leaves after it.

// The schedule given stays; the tensor-level kernel function is outlined
// into the kernel module, named after its spec.
// CHECK-LABEL: IR Dump After FA3SelectSchedule
// CHECK: fa3.attention {{.*}}persistent = true
// CHECK-LABEL: IR Dump After FA3OutlineHopperKernels
// CHECK: fa3.kernel = @fa3_kernels::@[[$K:fa3_fwd_bf16_d128_h4x2_m128n128s2_ov_ws24x240_pp_persistent_causal_s[0-9a-f]+]]
// CHECK: gpu.module @fa3_kernels
// CHECK: func.func @[[$K]](
// CHECK: fa3.attention

// The tile level: the grid forall over (query tile, head, batch), one
// query tile's block attention, then its key loop and online softmax.
// CHECK-LABEL: IR Dump After FA3Tile
// CHECK: scf.forall
// CHECK: fa3.load_tile
// CHECK: fa3.attention_block
// CHECK: fa3.parallel_store_tile
// CHECK: {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
// CHECK-LABEL: IR Dump After FA3FuseSoftmax
// CHECK: scf.for
// CHECK: fa3.qk
// CHECK: fa3.online_softmax
// CHECK: fa3.pv
// CHECK: fa3.finalize

// The schedule's ideas, one pass each.
// CHECK-LABEL: IR Dump After FA3WarpSpecialize
// CHECK: fa3.warp_specialize
// CHECK: fa3.ring_fill
// CHECK: } consumers {
// CHECK-LABEL: IR Dump After FA3IntraWarpgroupOverlap
// CHECK: {fa3.intra_wg_overlap,
// CHECK-LABEL: IR Dump After FA3Pingpong
// CHECK: fa3.mma_turn
// CHECK-LABEL: IR Dump After FA3OrderGrid
// CHECK: %[[BUDGET:.+]] = arith.select %{{.+}}, %{{.+}}, %{{.+}} : index
// CHECK: arith.divui %[[BUDGET]],
// CHECK: scf.forall
// CHECK-LABEL: IR Dump After FA3PersistentGrid
// CHECK: {mapping = [#fa3.persistent_block<x>, #fa3.persistent_block<y>, #fa3.persistent_block<z>]}

// The Hopper kernel level: an LLVM kernel function with the kernel ops
// (the mbarrier rings and their TMA tile loads in the producer, fa3.wgmma
// and fa3.named_barrier in the consumers, the O tile's TMA store), then
// each of those as NVVM ops or inline PTX.
// CHECK-LABEL: IR Dump After ConvertFA3TileToHopper
// CHECK: llvm.func @[[$K]](
// CHECK-SAME: nvvm.kernel
// CHECK: fa3.ring_barrier
// CHECK: nvvm.setmaxregister  decrease
// CHECK: fa3.ring_wait %{{.+}} {previous,
// CHECK: fa3.tma_load_tile
// CHECK: nvvm.setmaxregister  increase
// CHECK: fa3.ring_wait
// CHECK: fa3.named_barrier
// CHECK: fa3.wgmma
// CHECK: fa3.ring_arrive
// CHECK: fa3.tma_store_tile
// CHECK-LABEL: IR Dump After ConvertFA3KernelToNVVM
// CHECK-NOT: fa3.{{wgmma|ring_|tma_}}
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK-LABEL: IR Dump After ReconcileUnrealizedCastsPass
// CHECK-NOT: {{scf\.|fa3\.(wgmma|named_barrier|ring_|tma_)|cf\.}}
// CHECK: llvm.return
func.func @attn(%q: tensor<?x?x4x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = true, cluster = 1>} : (tensor<?x?x4x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>
}
