// Pingpong on a persistent grid: the two consumer warpgroups' turns run on
// across their tiles. Consumer 0 takes the first turn once, before its tile
// loop (an arrive on its own named barrier 1), and the last turn once,
// after it; inside the loop there are only the turns of the key loop, so
// one warpgroup's epilogue and next Q Kᵀ overlap the other's last GEMMs
// instead of both meeting at every tile's end and start.

// RUN: fa3-opt %s --fa3-hopper-kernel-pipeline --mlir-print-ir-after=convert-fa3-tile-to-hopper -o /dev/null 2>&1 | FileCheck %s
// The FP8 forward keeps per-tile turns (they run on across tiles only for
// 16-bit kernels: the FP8 d128 causal forward lost 6% with them on the
// H100): inside the tile loop consumer 0 arrives first and takes consumer
// 1's last turn before its epilogue; nothing wraps the loop.
// RUN: fa3-opt %S/Inputs/fp8.mlir --fa3-hopper-kernel-pipeline --mlir-print-ir-after=convert-fa3-tile-to-hopper -o /dev/null 2>&1 | FileCheck %s --check-prefix=FP8

// CHECK: nvvm.setmaxregister  increase 240
// CHECK-NEXT: %[[WG:.+]] = arith.subi %{{.+}}, %c1_i32 : i32
// CHECK-NEXT: %[[FIRST:.+]] = arith.cmpi eq, %[[WG]], %c0_i32 : i32
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: fa3.named_barrier %c1_i32 {arrive, threads = 256 : i64}
// CHECK-NEXT: }
// CHECK: scf.while
// CHECK-NOT: fa3.named_barrier %c1_i32
// CHECK: fa3.named_barrier %{{.+}} {threads = 256 : i64}
// CHECK-NOT: fa3.named_barrier %c1_i32
// CHECK: fa3.named_barrier %{{.+}} {arrive, threads = 256 : i64}
// CHECK-NOT: fa3.named_barrier %c1_i32
// CHECK: fa3.tma_store_tile
// CHECK-NOT: fa3.named_barrier %c1_i32
// CHECK: scf.yield %{{.+}}, %{{.+}} : i32, i32
// CHECK-NEXT: }
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: fa3.named_barrier %c1_i32 {threads = 256 : i64}
// CHECK-NEXT: }
func.func @attn(%q: tensor<?x?x4x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = true, cluster = 1>} : (tensor<?x?x4x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>)
  return %o, %lse : tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>
}

// FP8-LABEL: llvm.func @fa3_fwd_e4m3_d128_h8x2_m128n128s2_ov_ws24x240_pp_persistent_causal
// FP8: nvvm.setmaxregister  increase 240
// FP8-NEXT: %[[WG:.+]] = arith.subi %{{.+}}, %c1_i32 : i32
// FP8-NOT: fa3.named_barrier %c1_i32
// FP8: scf.while
// FP8: %[[FIRST:.+]] = arith.cmpi eq, %[[WG]], %c0_i32 : i32
// FP8-NEXT: scf.if %[[FIRST]] {
// FP8-NEXT: fa3.named_barrier %c1_i32 {arrive, threads = 256 : i64}
// FP8-NEXT: }
// FP8: scf.if %[[FIRST]] {
// FP8-NEXT: fa3.named_barrier %{{.+}} {threads = 256 : i64}
// FP8-NEXT: }
// FP8: fa3.tma_store_tile
// FP8: scf.yield %{{.+}}, %{{.+}} : i32, i32
// FP8-NEXT: }
// FP8-NOT: fa3.named_barrier
// FP8: llvm.return

