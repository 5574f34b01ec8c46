// RUN: split-file %s %t
// RUN: fa3-opt %t/kernel.mlir --convert-fa3-tile-to-hopper --convert-fa3-kernel-to-nvvm | FileCheck %s
// RUN: fa3-opt %t/persistent.mlir --convert-fa3-tile-to-hopper | FileCheck %s --check-prefix=PERSIST --implicit-check-not=sreg.ctaid.y --implicit-check-not=sreg.ctaid.z
// RUN: fa3-opt %t/overlap.mlir --convert-fa3-tile-to-hopper --convert-fa3-kernel-to-nvvm | FileCheck %s --check-prefix=OVERLAP
// RUN: fa3-opt %t/errors.mlir --convert-fa3-tile-to-hopper --split-input-file -verify-diagnostics
// Where the turns start and end is fa3-pingpong's fa3.pingpong_turns on the
// key loop; without it the kernel is not built.
// RUN: sed -e 's/fa3.pingpong_turns = "across_tiles", //' %t/overlap.mlir \
// RUN:   | not fa3-opt --convert-fa3-tile-to-hopper 2>&1 | FileCheck %s --check-prefix=NO-TURNS
// NO-TURNS: error: 'scf.for' op holds pingpong turns but no fa3.pingpong_turns = "per_tile" or "across_tiles" (fa3-pingpong sets it)

//--- kernel.mlir

// The input is what fa3-outline-hopper-kernels, fa3-tile{grid=true},
// fa3-fuse-softmax, fa3-warp-specialize and canonicalize make of a causal
// GQA attention (Hq = 4, Hkv = 2, D = 64) scheduled with block_m = 128,
// block_n = 64 and a producer warpgroup: the producer region's ring fills
// become the producer warpgroup's TMA loads, the consumers region the
// consumer warpgroups' code. The kernel keeps the function's name and takes
// the forward kernel's ABI.
// CHECK-LABEL: llvm.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_s3e000000
// CHECK-SAME: (%{{.+}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<16 x i64>, nvvm.grid_constant}, %{{.+}}, %{{.+}}, %{{.+}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<16 x i64>, nvvm.grid_constant}, %{{.+}}: !llvm.ptr<1> {llvm.noalias}, %[[SQ:.+]]: i32, %[[SK:.+]]: i32, %{{.+}}: i32, %{{.+}}: !llvm.ptr<1>)
// CHECK-SAME: nvvm.kernel, nvvm.reqntid = array<i32: 384, 1, 1>
// The forall's induction variables are the block ids of its mapping, and
// its index arithmetic is emitted in i32: the GQA head h / 2, the query
// tile's first row, Sk - Sq and the key loop's upper bound.
// CHECK: %[[QB:.+]] = nvvm.read.ptx.sreg.ctaid.x : i32
// CHECK: %[[H:.+]] = nvvm.read.ptx.sreg.ctaid.y : i32
// CHECK: %[[B:.+]] = nvvm.read.ptx.sreg.ctaid.z : i32
// CHECK: %[[HKV:.+]] = arith.divui %[[H]], %c2_i32 : i32
// CHECK: %[[Q0:.+]] = arith.muli %[[QB]], %c128_i32 : i32
// CHECK: arith.subi %[[SK]], %[[SQ]] : i32
// CHECK: arith.minsi %[[SK]], %{{.+}} : i32
// The producer warpgroup loads Q at the ring fill's coordinates, then the
// key tile of block 0 and, per iteration it, the key tile of block it + 1
// ahead of the value tile of block it (each after a wait on its slot's
// empty barrier), replaying the fills' row = block * 64.
// CHECK: nvvm.setmaxregister  decrease 24
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %arg0, %{{.+}}, box[%{{[^,]+}}, %[[Q0]], %[[H]], %[[B]]]
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %arg1, %{{.+}}, box[%{{[^,]+}}, %c0_i32, %[[HKV]], %[[B]]]
// CHECK: scf.for %[[IT:.+]] = %c0_i32 to %[[NB:.+]] step %c1_i32  : i32 {
// CHECK: %[[NEXT:.+]] = arith.addi %[[IT]], %c1_i32 : i32
// CHECK: arith.cmpi slt, %[[NEXT]], %[[NB]] : i32
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: %[[KROW:.+]] = arith.muli %[[NEXT]], %c64_i32 : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %arg1, %{{.+}}, box[%{{[^,]+}}, %[[KROW]], %[[HKV]], %[[B]]]
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: %[[VROW:.+]] = arith.muli %[[IT]], %c64_i32 : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.+}}, %arg2, %{{.+}}, box[%{{[^,]+}}, %[[VROW]], %[[HKV]], %[[B]]]
// The consumers: fa3.qk as 4 shared-memory wgmmas (k16 over D = 64) and,
// once they completed, the release of the key slot; the mask under the
// IR's boundary condition, the softmax's exp2 and quad reductions, fa3.pv
// as 4 register-A wgmmas (k16 over block_n = 64), then the release of the
// value slot.
// CHECK: nvvm.setmaxregister  increase 240
// CHECK: scf.for
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, $64, $65, p, 1, 1, 0, 0;
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NOT: wgmma.mma_async
// CHECK: nvvm.mbarrier.arrive
// CHECK: arith.cmpi sgt
// CHECK: %{{.+}}:32 = scf.if
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: nvvm.shfl.sync bfly
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.mbarrier.arrive
// CHECK: scf.yield
// fa3.finalize and the parallel stores. O: a thread's 2 x 8 packed pairs
// into its warpgroup's rows of the Q tile, the proxy fence and the
// warpgroup's named barrier (3 + its index, 128 threads), then one thread
// whose 64 rows start inside Sq stores them with TMA at the store's
// coordinates (row = the tile's first row + 64 per warpgroup) and waits
// until the tile was read. LSE: entries inside Sq, directly.
// CHECK: lg2.approx.f32
// CHECK-COUNT-16: llvm.store %{{.+}}, %{{.+}} {alignment = 4 : i64} : i32, !llvm.ptr<3>
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: %[[BAR:.+]] = arith.addi %{{.+}}, %c3_i32 : i32
// CHECK-NEXT: %[[N:.+]] = llvm.mlir.constant(128 : i32) : i32
// CHECK-NEXT: llvm.inline_asm has_side_effects "bar.sync $0, $1;", "r,r" %[[BAR]], %[[N]]
// CHECK-NEXT: %[[WGROWS:.+]] = arith.muli %{{.+}}, %c64_i32 : i32
// CHECK-NEXT: %[[WGROW:.+]] = arith.addi %[[Q0]], %[[WGROWS]] : i32
// CHECK-NEXT: arith.cmpi slt, %[[WGROW]], %[[SQ]] : i32
// CHECK: scf.if
// CHECK: nvvm.cp.async.bulk.tensor.global.shared.cta %arg3, %{{.+}}, box[%{{[^,]+}}, %[[WGROW]], %[[H]], %[[B]]]
// CHECK-NEXT: nvvm.cp.async.bulk.commit.group
// CHECK-NEXT: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK-NOT: llvm.store %{{.+}} : i32, !llvm.ptr<1>
// CHECK: arith.cmpi slt, %{{.+}}, %[[SQ]] : i32
// CHECK: llvm.store %{{.+}}, %{{.+}} {alignment = 4 : i64} : f32, !llvm.ptr<1>
// CHECK-NOT: func.func
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %c63 = arith.constant 63 : index
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %6 = arith.subi %dim_3, %dim_2 : index
      %7 = arith.addi %5, %c128 : index
      %8 = arith.minsi %7, %dim_2 : index
      %9 = arith.subi %8, %c1 : index
      %10 = arith.addi %9, %6 : index
      %11 = arith.addi %10, %c1 : index
      %12 = arith.minsi %dim_3, %11 : index
      %13 = arith.ceildivsi %12, %c64 : index
      %14:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %15 = arith.maxsi %13, %c0 : index
        %16 = arith.cmpi sgt, %15, %c0 : index
        scf.if %16 {
          fa3.ring_fill %arg1[%arg5, %c0, %4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        scf.for %arg8 = %c0 to %15 step %c1 {
          %17 = arith.addi %arg8, %c1 : index
          %18 = arith.cmpi slt, %17, %15 : index
          scf.if %18 {
            %20 = arith.muli %17, %c64 : index
            fa3.ring_fill %arg1[%arg5, %20, %4] use %17 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          }
          %19 = arith.muli %arg8, %c64 : index
          fa3.ring_fill %arg2[%arg5, %19, %4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        fa3.yield
      } consumers {
        %15 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %16:3 = scf.for %arg8 = %c0 to %13 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %17 = arith.muli %arg8, %c64 : index
          %18 = fa3.load_tile %arg1[%arg5, %17, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %19 = fa3.load_tile %arg2[%arg5, %17, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %20 = fa3.qk %15, %18 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
          %21 = arith.addi %17, %c64 : index
          %22 = arith.cmpi sgt, %21, %dim_3 : index
          %23 = arith.addi %5, %6 : index
          %24 = arith.addi %17, %c63 : index
          %25 = arith.cmpi sgt, %24, %23 : index
          %26 = arith.ori %22, %25 : i1
          %27 = scf.if %26 -> (tensor<128x64xf32>) {
            %30 = fa3.mask %20, %5, %17, %dim_2, %dim_3 {causal} : tensor<128x64xf32>
            scf.yield %30 : tensor<128x64xf32>
          } else {
            scf.yield %20 : tensor<128x64xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %27, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %28 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
          %29 = fa3.pv %probs, %19, %28 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
          scf.yield %29, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>}
        %output, %lse = fa3.finalize %16#0, %16#1, %16#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %14#0 into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %14#1 into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

//--- persistent.mlir

// The same kernel with persistent = true, its grid mapped to
// #fa3.persistent_block by fa3-persistent-grid: the grid is min(tiles, SMs)
// CTAs that take tiles dynamically from the tile counter (the kernel's last
// parameter, zero at launch). The producer thread starts at blockIdx.x and
// takes gridDim.x + atomicAdd(counter, 1) next, while t < tiles (tiles =
// X * 4 * B, X = ceil(Sq/128)), decoding t = x + X * (y + 4 * z); it writes t
// into the i32 slot of the Q tile it loads, before the Q load's arrive. Past
// the last tile it writes the end index into the next Q tile's slot and
// arrives on its full barrier without a load. The consumers wait for each
// Q tile, read its slot and stop at the end index. Both carry the number of
// Q tiles used so far (the Q barriers' parity) and the ring's position, so
// the K/V ring continues across tiles. No CTA reads blockIdx.y or z.
// PERSIST-LABEL: llvm.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_persistent_s3e000000
// PERSIST-SAME: %[[SQ:[^:]+]]: i32, %{{[^:]+}}: i32, %[[BATCH:[^:]+]]: i32, %[[COUNTER:[^:]+]]: !llvm.ptr<1>)
// PERSIST: %[[X:.+]] = arith.select %{{.+}}, %c0_i32, %{{.+}} : i32
// Two Q tiles (16 KiB each) fit beside two stages of K and V (32 KiB), and
// so does an O tile of its own (16 KiB at 65536). The mbarrier rings follow
// the tiles at 81920, each at its first barrier: Q full (one per Q tile), K
// full, V full, K empty, V empty (one per stage) and Q empty (one per Q
// tile, one arrival per consumer thread); the tile slots at 81920 + 8 * 12.
// PERSIST: %[[QFULL:.+]] = llvm.getelementptr %[[SMEM:.+]][81920] :
// PERSIST-NEXT: %[[KFULL:.+]] = llvm.getelementptr %[[SMEM]][81936] :
// PERSIST-NEXT: %[[VFULL:.+]] = llvm.getelementptr %[[SMEM]][81952] :
// PERSIST-NEXT: %[[KEMPTY:.+]] = llvm.getelementptr %[[SMEM]][81968] :
// PERSIST-NEXT: %[[VEMPTY:.+]] = llvm.getelementptr %[[SMEM]][81984] :
// PERSIST-NEXT: %[[QEMPTY:.+]] = llvm.getelementptr %[[SMEM]][82000] :
// PERSIST: %[[B0:.+]] = fa3.ring_barrier %[[QFULL]][%c0_i32] {stages = 2 : i64}
// PERSIST-NEXT: nvvm.mbarrier.init %[[B0]], %c1_i32
// PERSIST: %[[B1:.+]] = fa3.ring_barrier %[[QEMPTY]][%c1_i32] {stages = 2 : i64}
// PERSIST-NEXT: nvvm.mbarrier.init %[[B1]], %c256_i32
// PERSIST-NEXT: nvvm.fence.mbarrier.init
// PERSIST: nvvm.setmaxregister  decrease 24
// PERSIST: %[[XY:.+]] = arith.muli %[[X]], %c4_i32 : i32
// PERSIST: %[[TILES:.+]] = arith.muli %[[XY]], %[[BATCH]] : i32
// PERSIST: %[[FIRST:.+]] = nvvm.read.ptx.sreg.ctaid.x : i32
// PERSIST: %[[PLOOP:.+]]:3 = scf.while (%[[PT:.+]] = %[[FIRST]], %{{.+}} = %c0_i32, %{{.+}} = %c0_i32) : (i32, i32, i32) -> (i32, i32, i32) {
// PERSIST-NEXT: %[[MORE:.+]] = arith.cmpi ult, %[[PT]], %[[TILES]] : i32
// PERSIST-NEXT: scf.condition(%[[MORE]])
// PERSIST: ^bb0(%[[T:[^:]+]]: i32, %[[QUSE:[^:]+]]: i32, %[[RING:[^:]+]]: i32):
// PERSIST-NEXT: %[[TAKEN:.+]] = llvm.atomicrmw add %[[COUNTER]], %c1_i32 monotonic : !llvm.ptr<1>, i32
// PERSIST-NEXT: %[[CTAS:.+]] = nvvm.read.ptx.sreg.nctaid.x : i32
// PERSIST-NEXT: %[[NEXTT:.+]] = arith.addi %[[TAKEN]], %[[CTAS]] : i32
// PERSIST-NEXT: %[[YZ:.+]] = arith.divui %[[T]], %[[X]] : i32
// PERSIST-NEXT: %[[QB:.+]] = arith.remui %[[T]], %[[X]] : i32
// PERSIST-NEXT: %[[H:.+]] = arith.remui %[[YZ]], %c4_i32 : i32
// PERSIST-NEXT: %[[B:.+]] = arith.divui %[[YZ]], %c4_i32 : i32
// PERSIST: %[[Q0:.+]] = arith.muli %[[QB]], %c128_i32 : i32
// PERSIST: %[[NB:.+]] = arith.maxsi %{{.+}}, %c0_i32 : i32
// The producer's Q: tile n is Q use n, in Q tile n % 2; before reusing one
// it waits until the consumers released its previous use, then writes the
// tile index into that Q tile's slot and loads Q, completing on Q use n's
// full barrier.
// PERSIST: fa3.ring_wait %[[QEMPTY]][%[[QUSE]]] {previous, stages = 2 : i64}
// PERSIST-NEXT: %[[QBUF:.+]] = arith.remui %[[QUSE]], %c2_i32 : i32
// PERSIST-NEXT: %[[SLOTOFF:.+]] = arith.muli %[[QBUF]], %c4_i32 : i32
// PERSIST-NEXT: %[[SLOTADDR:.+]] = arith.addi %[[SLOTOFF]], %c82016_i32 : i32
// PERSIST-NEXT: %[[SLOT:.+]] = llvm.getelementptr %[[SMEM]][%[[SLOTADDR]]]
// PERSIST-NEXT: llvm.store %[[T]], %[[SLOT]] {alignment = 4 : i64} : i32, !llvm.ptr<3>
// PERSIST: %[[QBAR:.+]] = fa3.ring_barrier %[[QFULL]][%[[QUSE]]] {stages = 2 : i64}
// PERSIST: fa3.tma_load_tile %arg0[%[[Q0]], %[[H]], %[[B]]] to %[[SMEM]][%{{.+}}], %[[QBAR]] {cols = 64 : i64, element_bytes = 2 : i64, rows = 128 : i64}
// Ring use u = ring position + block: the producer waits for the release
// of the slot's previous use, then fills use u.
// PERSIST: scf.for %[[IT:.+]] = %c0_i32 to %{{.+}} step %c1_i32  : i32 {
// PERSIST: %[[USE:.+]] = arith.addi %[[RING]], %[[IT]] : i32
// PERSIST: fa3.ring_wait %[[VEMPTY]][%[[USE]]] {previous, stages = 2 : i64}
// PERSIST: fa3.ring_barrier %[[VFULL]][%[[USE]]] {stages = 2 : i64}
// PERSIST: %[[NEXTQ:.+]] = arith.addi %[[QUSE]], %c1_i32 : i32
// PERSIST: %[[NEXTR:.+]] = arith.addi %[[RING]], %[[NB]] : i32
// PERSIST: scf.yield %[[NEXTT]], %[[NEXTQ]], %[[NEXTR]] : i32, i32, i32
// The end index into the next Q tile's slot, then a plain arrive on that
// Q use's full barrier.
// PERSIST: fa3.ring_wait %[[QEMPTY]][%[[PLOOP]]#1] {previous, stages = 2 : i64}
// PERSIST: llvm.store %[[PLOOP]]#0, %{{.+}} {alignment = 4 : i64} : i32, !llvm.ptr<3>
// PERSIST-NEXT: fa3.ring_arrive %[[QFULL]][%[[PLOOP]]#1] {stages = 2 : i64}
// The consumers: per Q use, the full barrier's wait, the slot's tile index
// and the test against the tile count; each consumer releases its Q tile
// right after the key loop. O goes through the O tile: its storing thread
// first waits until the previous tile's store has read it, the warpgroup
// syncs, writes, fences and syncs again, and the store is not waited for;
// after the last tile the storing thread waits before the CTA exits.
// PERSIST: nvvm.setmaxregister  increase 240
// PERSIST: scf.while (%[[CQUSE:.+]] = %c0_i32, %[[CRING:.+]] = %c0_i32) : (i32, i32) -> (i32, i32, i32) {
// PERSIST-NEXT: fa3.ring_wait %[[QFULL]][%[[CQUSE]]] {stages = 2 : i64}
// PERSIST: %[[CT:.+]] = llvm.load %{{.+}} {alignment = 4 : i64} : !llvm.ptr<3> -> i32
// PERSIST-NEXT: %[[CMORE:.+]] = arith.cmpi ult, %[[CT]], %{{.+}} : i32
// PERSIST-NEXT: scf.condition(%[[CMORE]]) %[[CT]], %[[CQUSE]], %[[CRING]] : i32, i32, i32
// PERSIST: ^bb0(%{{.+}}: i32, %[[BQUSE:[^:]+]]: i32, %[[BRING:[^:]+]]: i32):
// PERSIST: scf.for
// PERSIST: fa3.ring_wait %[[KFULL]][%{{.+}}] {stages = 2 : i64}
// PERSIST: fa3.ring_arrive %[[KEMPTY]][%{{.+}}] {stages = 2 : i64}
// PERSIST: fa3.ring_wait %[[VFULL]][%{{.+}}] {stages = 2 : i64}
// PERSIST: fa3.ring_arrive %[[VEMPTY]][%{{.+}}] {stages = 2 : i64}
// PERSIST: }
// PERSIST-NEXT: fa3.ring_arrive %[[QEMPTY]][%[[BQUSE]]] {stages = 2 : i64}
// PERSIST: lg2.approx.f32
// PERSIST: scf.if
// PERSIST-NEXT: nvvm.cp.async.bulk.wait_group 0 {read}
// PERSIST-NEXT: }
// PERSIST: fa3.named_barrier %{{.+}} {threads = 128 : i64}
// PERSIST: llvm.store %{{.+}} : i32, !llvm.ptr<3>
// PERSIST: nvvm.fence.proxy
// PERSIST: fa3.named_barrier %{{.+}} {threads = 128 : i64}
// PERSIST: fa3.tma_store_tile %arg3[%{{.+}}] from %[[SMEM]][%{{.+}}] {atom_stride = 16384 : i64, cols = 64 : i64, element_bytes = 2 : i64, rows = 64 : i64}
// PERSIST-NEXT: nvvm.cp.async.bulk.commit.group
// PERSIST-NEXT: }
// PERSIST: llvm.store %{{.+}} : f32, !llvm.ptr<1>
// PERSIST: scf.yield %{{.+}}, %{{.+}} : i32, i32
// PERSIST: }
// PERSIST: scf.if
// PERSIST-NEXT: nvvm.cp.async.bulk.wait_group 0 {read}
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_persistent_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} {
    %c63 = arith.constant 63 : index
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %6 = arith.subi %dim_3, %dim_2 : index
      %7 = arith.addi %5, %c128 : index
      %8 = arith.minsi %7, %dim_2 : index
      %9 = arith.subi %8, %c1 : index
      %10 = arith.addi %9, %6 : index
      %11 = arith.addi %10, %c1 : index
      %12 = arith.minsi %dim_3, %11 : index
      %13 = arith.ceildivsi %12, %c64 : index
      %14:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %15 = arith.maxsi %13, %c0 : index
        %16 = arith.cmpi sgt, %15, %c0 : index
        scf.if %16 {
          fa3.ring_fill %arg1[%arg5, %c0, %4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        scf.for %arg8 = %c0 to %15 step %c1 {
          %17 = arith.addi %arg8, %c1 : index
          %18 = arith.cmpi slt, %17, %15 : index
          scf.if %18 {
            %20 = arith.muli %17, %c64 : index
            fa3.ring_fill %arg1[%arg5, %20, %4] use %17 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          }
          %19 = arith.muli %arg8, %c64 : index
          fa3.ring_fill %arg2[%arg5, %19, %4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        fa3.yield
      } consumers {
        %15 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %16:3 = scf.for %arg8 = %c0 to %13 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %17 = arith.muli %arg8, %c64 : index
          %18 = fa3.load_tile %arg1[%arg5, %17, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %19 = fa3.load_tile %arg2[%arg5, %17, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %20 = fa3.qk %15, %18 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
          %21 = arith.addi %17, %c64 : index
          %22 = arith.cmpi sgt, %21, %dim_3 : index
          %23 = arith.addi %5, %6 : index
          %24 = arith.addi %17, %c63 : index
          %25 = arith.cmpi sgt, %24, %23 : index
          %26 = arith.ori %22, %25 : i1
          %27 = scf.if %26 -> (tensor<128x64xf32>) {
            %30 = fa3.mask %20, %5, %17, %dim_2, %dim_3 {causal} : tensor<128x64xf32>
            scf.yield %30 : tensor<128x64xf32>
          } else {
            scf.yield %20 : tensor<128x64xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %27, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %28 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
          %29 = fa3.pv %probs, %19, %28 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
          scf.yield %29, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>}
        %output, %lse = fa3.finalize %16#0, %16#1, %16#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %14#0 into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %14#1 into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#fa3.persistent_block<x>, #fa3.persistent_block<y>, #fa3.persistent_block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

//--- overlap.mlir

// The key loop as fa3-intra-wg-overlap rotates it and fa3-pingpong groups
// its MMAs into turns (canonicalized): the emitter follows the IR op by op,
// each fa3.mma_turn a wait for its first MMA's tile, then bar.sync, the
// MMAs and bar.arrive. The prologue's QKᵀ of block 0 is one turn (bar.sync on the own barrier, bar.arrive on the
// other's), its result waited for (wait_group 0) before the softmax, then
// the K slot released. In the rotated loop one turn covers block j + 1's
// QKᵀ (4 shared-memory wgmmas) and block j's PV (4 register-A wgmmas, after
// the wait for V); the softmax waits for the QKᵀ only (wait_group 1: the PV
// stays in flight) and releases K, the rescale waits for the PV
// (wait_group 0) and releases V. The loop carries P packed (16 registers),
// the max and sum (4) and O (32). The epilogue's PV of the last block is a
// turn of its own.
// OVERLAP-LABEL: llvm.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ov_ws24x240_pp_s3e000000
// OVERLAP: nvvm.setmaxregister  increase 240
// OVERLAP: scf.if %{{.+}} -> (f32
// OVERLAP: nvvm.mbarrier.try_wait.parity
// OVERLAP: bar.sync
// OVERLAP-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, $64, $65, p, 1, 1, 0, 0;
// OVERLAP: nvvm.wgmma.commit.group.sync.aligned
// OVERLAP: bar.arrive
// OVERLAP-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// OVERLAP: nvvm.mbarrier.arrive
// OVERLAP-NOT: wgmma.mma_async
// OVERLAP: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// OVERLAP: llvm.fptrunc %{{.+}} : vector<2xf32> to vector<2xbf16>
// OVERLAP: scf.for %{{.+}} = %c0_i32 to %{{.+}} step %c1_i32 iter_args({{.+}}) -> (i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)  : i32 {
// OVERLAP: nvvm.mbarrier.try_wait.parity
// OVERLAP: bar.sync
// OVERLAP-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, $64, $65, p, 1, 1, 0, 0;
// OVERLAP: nvvm.wgmma.commit.group.sync.aligned
// OVERLAP-NOT: bar.
// OVERLAP: nvvm.mbarrier.try_wait.parity
// OVERLAP-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// OVERLAP: nvvm.wgmma.commit.group.sync.aligned
// OVERLAP: bar.arrive
// OVERLAP-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// OVERLAP: nvvm.mbarrier.arrive
// OVERLAP: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// OVERLAP: nvvm.wgmma.wait.group.sync.aligned 0
// OVERLAP: nvvm.mbarrier.arrive
// OVERLAP: arith.mulf
// OVERLAP: scf.yield
// OVERLAP: nvvm.mbarrier.try_wait.parity
// OVERLAP: bar.sync
// OVERLAP-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// OVERLAP: nvvm.wgmma.commit.group.sync.aligned
// OVERLAP: bar.arrive
// OVERLAP-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// OVERLAP: nvvm.mbarrier.arrive
// OVERLAP: scf.yield
// OVERLAP: } else {
// OVERLAP: lg2.approx.f32
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ov_ws24x240_pp_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %6 = arith.ceildivsi %dim_3, %c64 : index
      %7:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %8 = arith.maxsi %6, %c0 : index
        %9 = arith.cmpi sgt, %8, %c0 : index
        scf.if %9 {
          fa3.ring_fill %arg1[%arg5, %c0, %4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        scf.for %arg8 = %c0 to %8 step %c1 {
          %10 = arith.addi %arg8, %c1 : index
          %11 = arith.cmpi slt, %10, %8 : index
          scf.if %11 {
            %13 = arith.muli %10, %c64 : index
            fa3.ring_fill %arg1[%arg5, %13, %4] use %10 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          }
          %12 = arith.muli %arg8, %c64 : index
          fa3.ring_fill %arg2[%arg5, %12, %4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        fa3.yield
      } consumers {
        %8 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %9 = arith.cmpi sgt, %6, %c0 : index
        %10:3 = scf.if %9 -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %11 = fa3.load_tile %arg1[%arg5, %c0, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %12 = fa3.mma_turn -> (tensor<128x64xf32>) {
            %21 = fa3.qk %8, %11 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
            fa3.yield %21 : tensor<128x64xf32>
          }
          %13 = arith.cmpi slt, %dim_3, %c64 : index
          %14 = scf.if %13 -> (tensor<128x64xf32>) {
            %21 = fa3.mask %12, %5, %c0, %dim_2, %dim_3 : tensor<128x64xf32>
            scf.yield %21 : tensor<128x64xf32>
          } else {
            scf.yield %12 : tensor<128x64xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %14, %cst_0, %cst {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %15 = fa3.rescale %cst_1, %correction : tensor<128x64xf32>, tensor<128xf32>
          %16 = arith.subi %6, %c1 : index
          %17:4 = scf.for %arg8 = %c0 to %16 step %c1 iter_args(%arg9 = %probs, %arg10 = %new_max, %arg11 = %new_sum, %arg12 = %15) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>) {
            %21 = arith.addi %arg8, %c1 : index
            %22 = arith.muli %21, %c64 : index
            %23 = fa3.load_tile %arg1[%arg5, %22, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
            %24:2 = fa3.mma_turn -> (tensor<128x64xf32>, tensor<128x64xf32>) {
              %29 = fa3.qk %8, %23 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
              %30 = arith.muli %arg8, %c64 : index
              %31 = fa3.load_tile %arg2[%arg5, %30, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
              %32 = fa3.pv %arg9, %31, %arg12 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
              fa3.yield %29, %32 : tensor<128x64xf32>, tensor<128x64xf32>
            }
            %25 = arith.addi %22, %c64 : index
            %26 = arith.cmpi sgt, %25, %dim_3 : index
            %27 = scf.if %26 -> (tensor<128x64xf32>) {
              %29 = fa3.mask %24#0, %5, %22, %dim_2, %dim_3 : tensor<128x64xf32>
              scf.yield %29 : tensor<128x64xf32>
            } else {
              scf.yield %24#0 : tensor<128x64xf32>
            }
            %probs_4, %new_max_5, %new_sum_6, %correction_7 = fa3.online_softmax %27, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
            %28 = fa3.rescale %24#1, %correction_7 : tensor<128x64xf32>, tensor<128xf32>
            scf.yield %probs_4, %new_max_5, %new_sum_6, %28 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>
          } {fa3.intra_wg_overlap, fa3.pingpong_turns = "across_tiles", fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>}
          %18 = arith.muli %16, %c64 : index
          %19 = fa3.load_tile %arg2[%arg5, %18, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %20 = fa3.mma_turn -> (tensor<128x64xf32>) {
            %21 = fa3.pv %17#0, %19, %17#3 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
            fa3.yield %21 : tensor<128x64xf32>
          }
          scf.yield %20, %17#1, %17#2 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } else {
          scf.yield %cst_1, %cst_0, %cst : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        }
        %output, %lse = fa3.finalize %10#0, %10#1, %10#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %7#0 into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %7#1 into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

//--- errors.mlir

// The L0 attention itself: fa3-tile{grid=true} and fa3-fuse-softmax have
// not run.
gpu.module @fa3_kernels {
  func.func @l0(%q: tensor<?x?x4x64xbf16>, %k: tensor<?x?x4x64xbf16>, %v: tensor<?x?x4x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    // expected-error @+1 {{is not a tile-level forward kernel convert-fa3-tile-to-hopper implements: its body must be one scf.forall (fa3-tile{grid=true}), index arithmetic and splat constants}}
    %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>)
    return %o, %lse : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// The accumulator is not rescaled before O += P V.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %c63 = arith.constant 63 : index
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %6 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %7 = arith.subi %dim_3, %dim_2 : index
      %8 = arith.addi %5, %c128 : index
      %9 = arith.minsi %8, %dim_2 : index
      %10 = arith.subi %9, %c1 : index
      %11 = arith.addi %10, %7 : index
      %12 = arith.addi %11, %c1 : index
      %13 = arith.minsi %dim_3, %12 : index
      %14 = arith.ceildivsi %13, %c64 : index
      %15:3 = scf.for %arg8 = %c0 to %14 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
        %16 = arith.muli %arg8, %c64 : index
        %17 = fa3.load_tile %arg1[%arg5, %16, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %18 = fa3.load_tile %arg2[%arg5, %16, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %19 = fa3.qk %6, %17 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
        %20 = arith.addi %16, %c64 : index
        %21 = arith.cmpi sgt, %20, %dim_3 : index
        %22 = arith.addi %5, %7 : index
        %23 = arith.addi %16, %c63 : index
        %24 = arith.cmpi sgt, %23, %22 : index
        %25 = arith.ori %21, %24 : i1
        %26 = scf.if %25 -> (tensor<128x64xf32>) {
          %29 = fa3.mask %19, %5, %16, %dim_2, %dim_3 {causal} : tensor<128x64xf32>
          scf.yield %29 : tensor<128x64xf32>
        } else {
          scf.yield %19 : tensor<128x64xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %26, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
        %27 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
        // expected-error @+1 {{is not the key loop convert-fa3-tile-to-hopper implements: O += P V must take the softmax's (dropped-out) P, the value tile and the rescaled accumulator (FP8: probs_scale = 256, the kernel's P scaling; else none)}}
        %28 = fa3.pv %probs, %18, %arg9 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
        scf.yield %28, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      }
      %output, %lse = fa3.finalize %15#0, %15#1, %15#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %lse into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// Tiles of another schedule than the function's.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  // expected-error @+1 {{tile shapes 128x64 do not match the schedule's block_m = 128, block_n = 128}}
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %c63 = arith.constant 63 : index
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %6 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %7 = arith.subi %dim_3, %dim_2 : index
      %8 = arith.addi %5, %c128 : index
      %9 = arith.minsi %8, %dim_2 : index
      %10 = arith.subi %9, %c1 : index
      %11 = arith.addi %10, %7 : index
      %12 = arith.addi %11, %c1 : index
      %13 = arith.minsi %dim_3, %12 : index
      %14 = arith.ceildivsi %13, %c64 : index
      %15:3 = scf.for %arg8 = %c0 to %14 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
        %16 = arith.muli %arg8, %c64 : index
        %17 = fa3.load_tile %arg1[%arg5, %16, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %18 = fa3.load_tile %arg2[%arg5, %16, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %19 = fa3.qk %6, %17 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
        %20 = arith.addi %16, %c64 : index
        %21 = arith.cmpi sgt, %20, %dim_3 : index
        %22 = arith.addi %5, %7 : index
        %23 = arith.addi %16, %c63 : index
        %24 = arith.cmpi sgt, %23, %22 : index
        %25 = arith.ori %21, %24 : i1
        %26 = scf.if %25 -> (tensor<128x64xf32>) {
          %29 = fa3.mask %19, %5, %16, %dim_2, %dim_3 {causal} : tensor<128x64xf32>
          scf.yield %29 : tensor<128x64xf32>
        } else {
          scf.yield %19 : tensor<128x64xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %26, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
        %27 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
        %28 = fa3.pv %probs, %18, %27 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
        scf.yield %28, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      }
      %output, %lse = fa3.finalize %15#0, %15#1, %15#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %lse into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// The schedule asks for intra-warpgroup overlap, but fa3-intra-wg-overlap
// has not rotated the key loop.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  // expected-error @+1 {{has intra_wg_overlap = true in its schedule but a plain key loop: run fa3-intra-wg-overlap first}}
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>} {
    %c63 = arith.constant 63 : index
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %6 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %7 = arith.subi %dim_3, %dim_2 : index
      %8 = arith.addi %5, %c128 : index
      %9 = arith.minsi %8, %dim_2 : index
      %10 = arith.subi %9, %c1 : index
      %11 = arith.addi %10, %7 : index
      %12 = arith.addi %11, %c1 : index
      %13 = arith.minsi %dim_3, %12 : index
      %14 = arith.ceildivsi %13, %c64 : index
      %15:3 = scf.for %arg8 = %c0 to %14 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
        %16 = arith.muli %arg8, %c64 : index
        %17 = fa3.load_tile %arg1[%arg5, %16, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %18 = fa3.load_tile %arg2[%arg5, %16, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %19 = fa3.qk %6, %17 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
        %20 = arith.addi %16, %c64 : index
        %21 = arith.cmpi sgt, %20, %dim_3 : index
        %22 = arith.addi %5, %7 : index
        %23 = arith.addi %16, %c63 : index
        %24 = arith.cmpi sgt, %23, %22 : index
        %25 = arith.ori %21, %24 : i1
        %26 = scf.if %25 -> (tensor<128x64xf32>) {
          %29 = fa3.mask %19, %5, %16, %dim_2, %dim_3 {causal} : tensor<128x64xf32>
          scf.yield %29 : tensor<128x64xf32>
        } else {
          scf.yield %19 : tensor<128x64xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %26, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
        %27 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
        %28 = fa3.pv %probs, %18, %27 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
        scf.yield %28, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      }
      %output, %lse = fa3.finalize %15#0, %15#1, %15#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %lse into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// A rotated key loop without a producer warpgroup.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  // expected-error @+1 {{intra_wg_overlap needs a producer warpgroup (producer_regs > 0) on the Hopper forward}}
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ov_ws24x240_pp_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %6 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %7 = arith.ceildivsi %dim_3, %c64 : index
      %8 = arith.cmpi sgt, %7, %c0 : index
      %9:3 = scf.if %8 -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
        %10 = fa3.load_tile %arg1[%arg5, %c0, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %11 = fa3.qk %6, %10 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
        %12 = arith.cmpi slt, %dim_3, %c64 : index
        %13 = scf.if %12 -> (tensor<128x64xf32>) {
          %20 = fa3.mask %11, %5, %c0, %dim_2, %dim_3 : tensor<128x64xf32>
          scf.yield %20 : tensor<128x64xf32>
        } else {
          scf.yield %11 : tensor<128x64xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %13, %cst_0, %cst {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
        %14 = fa3.rescale %cst_1, %correction : tensor<128x64xf32>, tensor<128xf32>
        %15 = arith.subi %7, %c1 : index
        %16:4 = scf.for %arg8 = %c0 to %15 step %c1 iter_args(%arg9 = %probs, %arg10 = %new_max, %arg11 = %new_sum, %arg12 = %14) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>) {
          %20 = arith.addi %arg8, %c1 : index
          %21 = arith.muli %20, %c64 : index
          %22 = fa3.load_tile %arg1[%arg5, %21, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %23 = fa3.qk %6, %22 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
          %24 = arith.muli %arg8, %c64 : index
          %25 = fa3.load_tile %arg2[%arg5, %24, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %26 = fa3.pv %arg9, %25, %arg12 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
          %27 = arith.addi %21, %c64 : index
          %28 = arith.cmpi sgt, %27, %dim_3 : index
          %29 = scf.if %28 -> (tensor<128x64xf32>) {
            %31 = fa3.mask %23, %5, %21, %dim_2, %dim_3 : tensor<128x64xf32>
            scf.yield %31 : tensor<128x64xf32>
          } else {
            scf.yield %23 : tensor<128x64xf32>
          }
          %probs_4, %new_max_5, %new_sum_6, %correction_7 = fa3.online_softmax %29, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %30 = fa3.rescale %26, %correction_7 : tensor<128x64xf32>, tensor<128xf32>
          scf.yield %probs_4, %new_max_5, %new_sum_6, %30 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>
        } {fa3.intra_wg_overlap, fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>}
        %17 = arith.muli %15, %c64 : index
        %18 = fa3.load_tile %arg2[%arg5, %17, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %19 = fa3.pv %16#0, %18, %16#3 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
        scf.yield %19, %16#1, %16#2 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      } else {
        scf.yield %cst_1, %cst_0, %cst : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      }
      %output, %lse = fa3.finalize %9#0, %9#1, %9#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %lse into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// A rotated key loop the schedule does not describe.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  // expected-error @+1 {{has a rotated key loop but its schedule has intra_wg_overlap = false}}
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ov_ws24x240_pp_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %6 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %7 = arith.ceildivsi %dim_3, %c64 : index
      %8 = arith.cmpi sgt, %7, %c0 : index
      %9:3 = scf.if %8 -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
        %10 = fa3.load_tile %arg1[%arg5, %c0, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %11 = fa3.qk %6, %10 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
        %12 = arith.cmpi slt, %dim_3, %c64 : index
        %13 = scf.if %12 -> (tensor<128x64xf32>) {
          %20 = fa3.mask %11, %5, %c0, %dim_2, %dim_3 : tensor<128x64xf32>
          scf.yield %20 : tensor<128x64xf32>
        } else {
          scf.yield %11 : tensor<128x64xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %13, %cst_0, %cst {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
        %14 = fa3.rescale %cst_1, %correction : tensor<128x64xf32>, tensor<128xf32>
        %15 = arith.subi %7, %c1 : index
        %16:4 = scf.for %arg8 = %c0 to %15 step %c1 iter_args(%arg9 = %probs, %arg10 = %new_max, %arg11 = %new_sum, %arg12 = %14) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>) {
          %20 = arith.addi %arg8, %c1 : index
          %21 = arith.muli %20, %c64 : index
          %22 = fa3.load_tile %arg1[%arg5, %21, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %23 = fa3.qk %6, %22 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
          %24 = arith.muli %arg8, %c64 : index
          %25 = fa3.load_tile %arg2[%arg5, %24, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %26 = fa3.pv %arg9, %25, %arg12 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
          %27 = arith.addi %21, %c64 : index
          %28 = arith.cmpi sgt, %27, %dim_3 : index
          %29 = scf.if %28 -> (tensor<128x64xf32>) {
            %31 = fa3.mask %23, %5, %21, %dim_2, %dim_3 : tensor<128x64xf32>
            scf.yield %31 : tensor<128x64xf32>
          } else {
            scf.yield %23 : tensor<128x64xf32>
          }
          %probs_4, %new_max_5, %new_sum_6, %correction_7 = fa3.online_softmax %29, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %30 = fa3.rescale %26, %correction_7 : tensor<128x64xf32>, tensor<128xf32>
          scf.yield %probs_4, %new_max_5, %new_sum_6, %30 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>
        } {fa3.intra_wg_overlap, fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>}
        %17 = arith.muli %15, %c64 : index
        %18 = fa3.load_tile %arg2[%arg5, %17, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %19 = fa3.pv %16#0, %18, %16#3 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
        scf.yield %19, %16#1, %16#2 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      } else {
        scf.yield %cst_1, %cst_0, %cst : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      }
      %output, %lse = fa3.finalize %9#0, %9#1, %9#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %lse into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// Pingpong turns the schedule does not describe.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  // expected-error @+1 {{has pingpong turns (fa3.mma_turn) but its schedule has pingpong = false}}
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ov_ws24x240_pp_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %6 = arith.ceildivsi %dim_3, %c64 : index
      %7:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %8 = arith.maxsi %6, %c0 : index
        %9 = arith.cmpi sgt, %8, %c0 : index
        scf.if %9 {
          fa3.ring_fill %arg1[%arg5, %c0, %4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        scf.for %arg8 = %c0 to %8 step %c1 {
          %10 = arith.addi %arg8, %c1 : index
          %11 = arith.cmpi slt, %10, %8 : index
          scf.if %11 {
            %13 = arith.muli %10, %c64 : index
            fa3.ring_fill %arg1[%arg5, %13, %4] use %10 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          }
          %12 = arith.muli %arg8, %c64 : index
          fa3.ring_fill %arg2[%arg5, %12, %4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        fa3.yield
      } consumers {
        %8 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %9 = arith.cmpi sgt, %6, %c0 : index
        %10:3 = scf.if %9 -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %11 = fa3.load_tile %arg1[%arg5, %c0, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %12 = fa3.mma_turn -> (tensor<128x64xf32>) {
            %21 = fa3.qk %8, %11 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
            fa3.yield %21 : tensor<128x64xf32>
          }
          %13 = arith.cmpi slt, %dim_3, %c64 : index
          %14 = scf.if %13 -> (tensor<128x64xf32>) {
            %21 = fa3.mask %12, %5, %c0, %dim_2, %dim_3 : tensor<128x64xf32>
            scf.yield %21 : tensor<128x64xf32>
          } else {
            scf.yield %12 : tensor<128x64xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %14, %cst_0, %cst {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %15 = fa3.rescale %cst_1, %correction : tensor<128x64xf32>, tensor<128xf32>
          %16 = arith.subi %6, %c1 : index
          %17:4 = scf.for %arg8 = %c0 to %16 step %c1 iter_args(%arg9 = %probs, %arg10 = %new_max, %arg11 = %new_sum, %arg12 = %15) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>) {
            %21 = arith.addi %arg8, %c1 : index
            %22 = arith.muli %21, %c64 : index
            %23 = fa3.load_tile %arg1[%arg5, %22, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
            %24:2 = fa3.mma_turn -> (tensor<128x64xf32>, tensor<128x64xf32>) {
              %29 = fa3.qk %8, %23 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
              %30 = arith.muli %arg8, %c64 : index
              %31 = fa3.load_tile %arg2[%arg5, %30, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
              %32 = fa3.pv %arg9, %31, %arg12 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
              fa3.yield %29, %32 : tensor<128x64xf32>, tensor<128x64xf32>
            }
            %25 = arith.addi %22, %c64 : index
            %26 = arith.cmpi sgt, %25, %dim_3 : index
            %27 = scf.if %26 -> (tensor<128x64xf32>) {
              %29 = fa3.mask %24#0, %5, %22, %dim_2, %dim_3 : tensor<128x64xf32>
              scf.yield %29 : tensor<128x64xf32>
            } else {
              scf.yield %24#0 : tensor<128x64xf32>
            }
            %probs_4, %new_max_5, %new_sum_6, %correction_7 = fa3.online_softmax %27, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
            %28 = fa3.rescale %24#1, %correction_7 : tensor<128x64xf32>, tensor<128xf32>
            scf.yield %probs_4, %new_max_5, %new_sum_6, %28 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>
          } {fa3.intra_wg_overlap, fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>}
          %18 = arith.muli %16, %c64 : index
          %19 = fa3.load_tile %arg2[%arg5, %18, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %20 = fa3.mma_turn -> (tensor<128x64xf32>) {
            %21 = fa3.pv %17#0, %19, %17#3 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
            fa3.yield %21 : tensor<128x64xf32>
          }
          scf.yield %20, %17#1, %17#2 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } else {
          scf.yield %cst_1, %cst_0, %cst : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        }
        %output, %lse = fa3.finalize %10#0, %10#1, %10#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %7#0 into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %7#1 into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// A pingpong schedule whose key loop fa3-pingpong has not grouped into turns.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  // expected-error @+1 {{has pingpong = true in its schedule but no fa3.mma_turn: run fa3-pingpong first}}
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ov_ws24x240_pp_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %6 = arith.ceildivsi %dim_3, %c64 : index
      %7:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %8 = arith.maxsi %6, %c0 : index
        %9 = arith.cmpi sgt, %8, %c0 : index
        scf.if %9 {
          fa3.ring_fill %arg1[%arg5, %c0, %4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        scf.for %arg8 = %c0 to %8 step %c1 {
          %10 = arith.addi %arg8, %c1 : index
          %11 = arith.cmpi slt, %10, %8 : index
          scf.if %11 {
            %13 = arith.muli %10, %c64 : index
            fa3.ring_fill %arg1[%arg5, %13, %4] use %10 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          }
          %12 = arith.muli %arg8, %c64 : index
          fa3.ring_fill %arg2[%arg5, %12, %4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        fa3.yield
      } consumers {
        %8 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %9 = arith.cmpi sgt, %6, %c0 : index
        %10:3 = scf.if %9 -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %11 = fa3.load_tile %arg1[%arg5, %c0, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %12 = fa3.qk %8, %11 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
          %13 = arith.cmpi slt, %dim_3, %c64 : index
          %14 = scf.if %13 -> (tensor<128x64xf32>) {
            %21 = fa3.mask %12, %5, %c0, %dim_2, %dim_3 : tensor<128x64xf32>
            scf.yield %21 : tensor<128x64xf32>
          } else {
            scf.yield %12 : tensor<128x64xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %14, %cst_0, %cst {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %15 = fa3.rescale %cst_1, %correction : tensor<128x64xf32>, tensor<128xf32>
          %16 = arith.subi %6, %c1 : index
          %17:4 = scf.for %arg8 = %c0 to %16 step %c1 iter_args(%arg9 = %probs, %arg10 = %new_max, %arg11 = %new_sum, %arg12 = %15) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>) {
            %21 = arith.addi %arg8, %c1 : index
            %22 = arith.muli %21, %c64 : index
            %23 = fa3.load_tile %arg1[%arg5, %22, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
            %24 = fa3.qk %8, %23 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
            %25 = arith.muli %arg8, %c64 : index
            %26 = fa3.load_tile %arg2[%arg5, %25, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
            %27 = fa3.pv %arg9, %26, %arg12 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
            %28 = arith.addi %22, %c64 : index
            %29 = arith.cmpi sgt, %28, %dim_3 : index
            %30 = scf.if %29 -> (tensor<128x64xf32>) {
              %32 = fa3.mask %24, %5, %22, %dim_2, %dim_3 : tensor<128x64xf32>
              scf.yield %32 : tensor<128x64xf32>
            } else {
              scf.yield %24 : tensor<128x64xf32>
            }
            %probs_4, %new_max_5, %new_sum_6, %correction_7 = fa3.online_softmax %30, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
            %31 = fa3.rescale %27, %correction_7 : tensor<128x64xf32>, tensor<128xf32>
            scf.yield %probs_4, %new_max_5, %new_sum_6, %31 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x64xf32>
          } {fa3.intra_wg_overlap, fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>}
          %18 = arith.muli %16, %c64 : index
          %19 = fa3.load_tile %arg2[%arg5, %18, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %20 = fa3.pv %17#0, %19, %17#3 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
          scf.yield %20, %17#1, %17#2 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } else {
          scf.yield %cst_1, %cst_0, %cst : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        }
        %output, %lse = fa3.finalize %10#0, %10#1, %10#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %7#0 into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %7#1 into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// A producer warpgroup in the schedule, but fa3-warp-specialize has not split the tile.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  // expected-error @+1 {{has producer_regs = 24 in its schedule but no fa3.warp_specialize: run fa3-warp-specialize first}}
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %c63 = arith.constant 63 : index
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %6 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %7 = arith.subi %dim_3, %dim_2 : index
      %8 = arith.addi %5, %c128 : index
      %9 = arith.minsi %8, %dim_2 : index
      %10 = arith.subi %9, %c1 : index
      %11 = arith.addi %10, %7 : index
      %12 = arith.addi %11, %c1 : index
      %13 = arith.minsi %dim_3, %12 : index
      %14 = arith.ceildivsi %13, %c64 : index
      %15:3 = scf.for %arg8 = %c0 to %14 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
        %16 = arith.muli %arg8, %c64 : index
        %17 = fa3.load_tile %arg1[%arg5, %16, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %18 = fa3.load_tile %arg2[%arg5, %16, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        %19 = fa3.qk %6, %17 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
        %20 = arith.addi %16, %c64 : index
        %21 = arith.cmpi sgt, %20, %dim_3 : index
        %22 = arith.addi %5, %7 : index
        %23 = arith.addi %16, %c63 : index
        %24 = arith.cmpi sgt, %23, %22 : index
        %25 = arith.ori %21, %24 : i1
        %26 = scf.if %25 -> (tensor<128x64xf32>) {
          %29 = fa3.mask %19, %5, %16, %dim_2, %dim_3 {causal} : tensor<128x64xf32>
          scf.yield %29 : tensor<128x64xf32>
        } else {
          scf.yield %19 : tensor<128x64xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %26, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
        %27 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
        %28 = fa3.pv %probs, %18, %27 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
        scf.yield %28, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      }
      %output, %lse = fa3.finalize %15#0, %15#1, %15#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %lse into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// A persistent schedule, but fa3-persistent-grid has not mapped the grid.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_persistent_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} {
    %c63 = arith.constant 63 : index
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c64 = arith.constant 64 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x4x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x4x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x4x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x4x?xf32>
    // expected-error @+1 {{has persistent = true in its schedule but is mapped to #gpu.block: run fa3-persistent-grid first}}
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 4, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) {
      %4 = arith.divui %arg4, %c2 : index
      %5 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %6 = arith.subi %dim_3, %dim_2 : index
      %7 = arith.addi %5, %c128 : index
      %8 = arith.minsi %7, %dim_2 : index
      %9 = arith.subi %8, %c1 : index
      %10 = arith.addi %9, %6 : index
      %11 = arith.addi %10, %c1 : index
      %12 = arith.minsi %dim_3, %11 : index
      %13 = arith.ceildivsi %12, %c64 : index
      %14:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %15 = arith.maxsi %13, %c0 : index
        %16 = arith.cmpi sgt, %15, %c0 : index
        scf.if %16 {
          fa3.ring_fill %arg1[%arg5, %c0, %4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        scf.for %arg8 = %c0 to %15 step %c1 {
          %17 = arith.addi %arg8, %c1 : index
          %18 = arith.cmpi slt, %17, %15 : index
          scf.if %18 {
            %20 = arith.muli %17, %c64 : index
            fa3.ring_fill %arg1[%arg5, %20, %4] use %17 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          }
          %19 = arith.muli %arg8, %c64 : index
          fa3.ring_fill %arg2[%arg5, %19, %4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
        }
        fa3.yield
      } consumers {
        %15 = fa3.load_tile %arg0[%arg5, %5, %arg4] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
        %16:3 = scf.for %arg8 = %c0 to %13 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %17 = arith.muli %arg8, %c64 : index
          %18 = fa3.load_tile %arg1[%arg5, %17, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %19 = fa3.load_tile %arg2[%arg5, %17, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %20 = fa3.qk %15, %18 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
          %21 = arith.addi %17, %c64 : index
          %22 = arith.cmpi sgt, %21, %dim_3 : index
          %23 = arith.addi %5, %6 : index
          %24 = arith.addi %17, %c63 : index
          %25 = arith.cmpi sgt, %24, %23 : index
          %26 = arith.ori %22, %25 : i1
          %27 = scf.if %26 -> (tensor<128x64xf32>) {
            %30 = fa3.mask %20, %5, %17, %dim_2, %dim_3 {causal} : tensor<128x64xf32>
            scf.yield %30 : tensor<128x64xf32>
          } else {
            scf.yield %20 : tensor<128x64xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %27, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %28 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
          %29 = fa3.pv %probs, %19, %28 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
          scf.yield %29, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>}
        %output, %lse = fa3.finalize %16#0, %16#1, %16#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %14#0 into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
        fa3.parallel_store_stats %14#1 into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
  }
}

// -----

// A packed batch's LSE stored without its sequence's end: the query tile
// reads whole tiles (rows of the next sequence past the end), so every
// store must drop the rows past it.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @varlen_lse_past_end(%arg0: tensor<?x2x64xbf16>, %arg1: tensor<?x2x64xbf16>, %arg2: tensor<?x2x64xbf16>, %arg3: tensor<?xi32>, %arg4: tensor<?xi32>) -> (tensor<?x2x64xbf16>, tensor<2x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<64xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<64xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c128 = arith.constant 128 : index
    %c64 = arith.constant 64 : index
    %cst_2 = arith.constant 0xFF800000 : f32
    %cst_3 = arith.constant 0.000000e+00 : bf16
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x2x64xbf16>
    %expanded = tensor.expand_shape %arg0 [[0, 1], [2], [3]] output_shape [1, %dim, 2, 64] : tensor<?x2x64xbf16> into tensor<1x?x2x64xbf16>
    %dim_4 = tensor.dim %arg1, %c0 : tensor<?x2x64xbf16>
    %expanded_5 = tensor.expand_shape %arg1 [[0, 1], [2], [3]] output_shape [1, %dim_4, 2, 64] : tensor<?x2x64xbf16> into tensor<1x?x2x64xbf16>
    %dim_6 = tensor.dim %arg2, %c0 : tensor<?x2x64xbf16>
    %expanded_7 = tensor.expand_shape %arg2 [[0, 1], [2], [3]] output_shape [1, %dim_6, 2, 64] : tensor<?x2x64xbf16> into tensor<1x?x2x64xbf16>
    %0 = tensor.empty(%dim) : tensor<1x?x2x64xbf16>
    %1 = linalg.fill ins(%cst_3 : bf16) outs(%0 : tensor<1x?x2x64xbf16>) -> tensor<1x?x2x64xbf16>
    %2 = tensor.empty(%dim) : tensor<1x2x?xf32>
    %3 = linalg.fill ins(%cst_2 : f32) outs(%2 : tensor<1x2x?xf32>) -> tensor<1x2x?xf32>
    %dim_8 = tensor.dim %arg3, %c0 : tensor<?xi32>
    %4 = arith.subi %dim_8, %c1 : index
    %5 = arith.ceildivui %dim, %c64 : index
    %6:2 = scf.forall (%arg5, %arg6, %arg7) in (%5, 2, %4) shared_outs(%arg8 = %1, %arg9 = %3) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>) {
      %7 = arith.muli %arg5, %c64 : index
      %extracted = tensor.extract %arg3[%arg7] : tensor<?xi32>
      %8 = arith.index_cast %extracted : i32 to index
      %9 = arith.maxsi %8, %c0 : index
      %10 = arith.addi %arg7, %c1 : index
      %extracted_10 = tensor.extract %arg3[%10] : tensor<?xi32>
      %11 = arith.index_cast %extracted_10 : i32 to index
      %12 = arith.maxsi %11, %c0 : index
      %13 = arith.maxsi %12, %9 : index
      %14 = arith.subi %13, %9 : index
      %extracted_11 = tensor.extract %arg4[%arg7] : tensor<?xi32>
      %15 = arith.index_cast %extracted_11 : i32 to index
      %16 = arith.maxsi %15, %c0 : index
      %extracted_12 = tensor.extract %arg4[%10] : tensor<?xi32>
      %17 = arith.index_cast %extracted_12 : i32 to index
      %18 = arith.maxsi %17, %c0 : index
      %19 = arith.maxsi %18, %16 : index
      %20 = arith.subi %19, %16 : index
      %21 = arith.addi %9, %7 : index
      %22 = fa3.load_tile %expanded[%c0, %21, %arg6] limit %13 : tensor<1x?x2x64xbf16> -> tensor<64x64xbf16>
      %23 = arith.ceildivsi %20, %c128 : index
      %24:3 = scf.for %arg10 = %c0 to %23 step %c1 iter_args(%arg11 = %cst_1, %arg12 = %cst_0, %arg13 = %cst) -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>) {
        %25 = arith.muli %arg10, %c128 : index
        %26 = arith.addi %16, %25 : index
        %27 = fa3.load_tile %expanded_5[%c0, %26, %arg6] limit %19 : tensor<1x?x2x64xbf16> -> tensor<128x64xbf16>
        %28 = fa3.load_tile %expanded_7[%c0, %26, %arg6] limit %19 : tensor<1x?x2x64xbf16> -> tensor<128x64xbf16>
        %29 = fa3.qk %22, %27 : tensor<64x64xbf16>, tensor<128x64xbf16> -> tensor<64x128xf32>
        %30 = arith.addi %25, %c128 : index
        %31 = arith.cmpi sgt, %30, %20 : index
        %32 = scf.if %31 -> (tensor<64x128xf32>) {
          %35 = fa3.mask %29, %7, %25, %14, %20 : tensor<64x128xf32>
          scf.yield %35 : tensor<64x128xf32>
        } else {
          scf.yield %29 : tensor<64x128xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %32, %arg12, %arg13 {exp2_scale = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32>
        %33 = fa3.rescale %arg11, %correction : tensor<64x64xf32>, tensor<64xf32>
        %34 = fa3.pv %probs, %28, %33 : tensor<64x128xf32>, tensor<128x64xbf16>, tensor<64x64xf32>
        scf.yield %34, %new_max, %new_sum : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>
      } {fa3.schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>}
      %output, %lse = fa3.finalize %24#0, %24#1, %24#2 {scale = 1.250000e-01 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg8[%c0, %21, %arg6] limit %13 : tensor<64x64xbf16> into tensor<1x?x2x64xbf16>
        // expected-error @+1 {{is not a tile-level forward kernel convert-fa3-tile-to-hopper implements: a store's row and limit must be the query tile's (a packed sequence's rows)}}
        fa3.parallel_store_stats %lse into %arg9[%c0, %arg6, %21] : tensor<64xf32> into tensor<1x2x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    %collapsed = tensor.collapse_shape %6#0 [[0, 1], [2], [3]] : tensor<1x?x2x64xbf16> into tensor<?x2x64xbf16>
    %collapsed_9 = tensor.collapse_shape %6#1 [[0, 1], [2]] : tensor<1x2x?xf32> into tensor<2x?xf32>
    return %collapsed, %collapsed_9 : tensor<?x2x64xbf16>, tensor<2x?xf32>
  }
}

// -----

// A packed batch's O starting from anything but 0: the launch fills O with
// 0 and the LSE with -inf, nothing else.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @varlen_filled_with_one(%arg0: tensor<?x2x64xbf16>, %arg1: tensor<?x2x64xbf16>, %arg2: tensor<?x2x64xbf16>, %arg3: tensor<?xi32>, %arg4: tensor<?xi32>) -> (tensor<?x2x64xbf16>, tensor<2x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<64xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<64xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c128 = arith.constant 128 : index
    %c64 = arith.constant 64 : index
    %cst_2 = arith.constant 0xFF800000 : f32
    %cst_3 = arith.constant 1.000000e+00 : bf16
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x2x64xbf16>
    %expanded = tensor.expand_shape %arg0 [[0, 1], [2], [3]] output_shape [1, %dim, 2, 64] : tensor<?x2x64xbf16> into tensor<1x?x2x64xbf16>
    %dim_4 = tensor.dim %arg1, %c0 : tensor<?x2x64xbf16>
    %expanded_5 = tensor.expand_shape %arg1 [[0, 1], [2], [3]] output_shape [1, %dim_4, 2, 64] : tensor<?x2x64xbf16> into tensor<1x?x2x64xbf16>
    %dim_6 = tensor.dim %arg2, %c0 : tensor<?x2x64xbf16>
    %expanded_7 = tensor.expand_shape %arg2 [[0, 1], [2], [3]] output_shape [1, %dim_6, 2, 64] : tensor<?x2x64xbf16> into tensor<1x?x2x64xbf16>
    %0 = tensor.empty(%dim) : tensor<1x?x2x64xbf16>
    %1 = linalg.fill ins(%cst_3 : bf16) outs(%0 : tensor<1x?x2x64xbf16>) -> tensor<1x?x2x64xbf16>
    %2 = tensor.empty(%dim) : tensor<1x2x?xf32>
    %3 = linalg.fill ins(%cst_2 : f32) outs(%2 : tensor<1x2x?xf32>) -> tensor<1x2x?xf32>
    %dim_8 = tensor.dim %arg3, %c0 : tensor<?xi32>
    %4 = arith.subi %dim_8, %c1 : index
    %5 = arith.ceildivui %dim, %c64 : index
    // expected-error @+1 {{is not a tile-level forward kernel convert-fa3-tile-to-hopper implements: a packed batch's forall must start from O filled with 0 and the LSE with -inf (the launch fills them)}}
    %6:2 = scf.forall (%arg5, %arg6, %arg7) in (%5, 2, %4) shared_outs(%arg8 = %1, %arg9 = %3) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>) {
      %7 = arith.muli %arg5, %c64 : index
      %extracted = tensor.extract %arg3[%arg7] : tensor<?xi32>
      %8 = arith.index_cast %extracted : i32 to index
      %9 = arith.maxsi %8, %c0 : index
      %10 = arith.addi %arg7, %c1 : index
      %extracted_10 = tensor.extract %arg3[%10] : tensor<?xi32>
      %11 = arith.index_cast %extracted_10 : i32 to index
      %12 = arith.maxsi %11, %c0 : index
      %13 = arith.maxsi %12, %9 : index
      %14 = arith.subi %13, %9 : index
      %extracted_11 = tensor.extract %arg4[%arg7] : tensor<?xi32>
      %15 = arith.index_cast %extracted_11 : i32 to index
      %16 = arith.maxsi %15, %c0 : index
      %extracted_12 = tensor.extract %arg4[%10] : tensor<?xi32>
      %17 = arith.index_cast %extracted_12 : i32 to index
      %18 = arith.maxsi %17, %c0 : index
      %19 = arith.maxsi %18, %16 : index
      %20 = arith.subi %19, %16 : index
      %21 = arith.addi %9, %7 : index
      %22 = fa3.load_tile %expanded[%c0, %21, %arg6] limit %13 : tensor<1x?x2x64xbf16> -> tensor<64x64xbf16>
      %23 = arith.ceildivsi %20, %c128 : index
      %24:3 = scf.for %arg10 = %c0 to %23 step %c1 iter_args(%arg11 = %cst_1, %arg12 = %cst_0, %arg13 = %cst) -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>) {
        %25 = arith.muli %arg10, %c128 : index
        %26 = arith.addi %16, %25 : index
        %27 = fa3.load_tile %expanded_5[%c0, %26, %arg6] limit %19 : tensor<1x?x2x64xbf16> -> tensor<128x64xbf16>
        %28 = fa3.load_tile %expanded_7[%c0, %26, %arg6] limit %19 : tensor<1x?x2x64xbf16> -> tensor<128x64xbf16>
        %29 = fa3.qk %22, %27 : tensor<64x64xbf16>, tensor<128x64xbf16> -> tensor<64x128xf32>
        %30 = arith.addi %25, %c128 : index
        %31 = arith.cmpi sgt, %30, %20 : index
        %32 = scf.if %31 -> (tensor<64x128xf32>) {
          %35 = fa3.mask %29, %7, %25, %14, %20 : tensor<64x128xf32>
          scf.yield %35 : tensor<64x128xf32>
        } else {
          scf.yield %29 : tensor<64x128xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %32, %arg12, %arg13 {exp2_scale = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32>
        %33 = fa3.rescale %arg11, %correction : tensor<64x64xf32>, tensor<64xf32>
        %34 = fa3.pv %probs, %28, %33 : tensor<64x128xf32>, tensor<128x64xbf16>, tensor<64x64xf32>
        scf.yield %34, %new_max, %new_sum : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>
      } {fa3.schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>}
      %output, %lse = fa3.finalize %24#0, %24#1, %24#2 {scale = 1.250000e-01 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg8[%c0, %21, %arg6] limit %13 : tensor<64x64xbf16> into tensor<1x?x2x64xbf16>
        fa3.parallel_store_stats %lse into %arg9[%c0, %arg6, %21] limit %13 : tensor<64xf32> into tensor<1x2x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    %collapsed = tensor.collapse_shape %6#0 [[0, 1], [2], [3]] : tensor<1x?x2x64xbf16> into tensor<?x2x64xbf16>
    %collapsed_9 = tensor.collapse_shape %6#1 [[0, 1], [2]] : tensor<1x2x?xf32> into tensor<2x?xf32>
    return %collapsed, %collapsed_9 : tensor<?x2x64xbf16>, tensor<2x?xf32>
  }
}
