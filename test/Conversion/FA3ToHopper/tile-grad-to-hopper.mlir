// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize),convert-fa3-tile-to-hopper))" | FileCheck %s
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true})))" | FileCheck %s --check-prefix=TILE
// RUN: not fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true}),convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=NO-WS
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/fa3.accumulate_tile \(.*\) {ordered}/fa3.accumulate_tile \1/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=RENAMED
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize,fa3-order-grid),convert-fa3-tile-to-hopper))" | FileCheck %s --check-prefix=ORDERED
// RUN: not fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-warp-specialize),convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=MMA-ORDER
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/\(fa3.load_tile %arg2\[%arg8, \)%13/\1%dim_2/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=KEY-ROW
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/\(fa3.load_tile %arg2\[\)%arg8/\1%dim_4/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=KEY-BATCH
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/\(fa3.load_tile %arg1\[%arg8, \)%32/\1%20/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=STEPS
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/\(fa3.scale_cast %26#0 {scale = \)0.0883883461/\10.5/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=DK-SCALE
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/\(fa3.parallel_store_tile %23#1 into \)%arg10/\1%arg9/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=DK-TWICE
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/\(fa3.scale_cast \)%26#1/\1%cst_19/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=DV-STORED
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/fa3.row_dot %13, %14/fa3.row_dot %13, %13/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=PRE-DELTA
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/%14 = fa3.scale_cast %13 {scale = 0.0883883461/%z = arith.constant dense<1.0> : tensor<64x128xf32>\n        %14 = fa3.scale_cast %z {scale = 0.0883883461/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=POST-OP
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/\(fa3.ring_fill %arg1\[%arg8, %30, %29\] use \)%27/\1%25/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=PRODUCER-USE
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e '/fa3.ring_fill %8\[/d' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=PRODUCER-FILLS
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/fa3.ring_fill %arg2\[%arg8, %13, %arg7\]/fa3.ring_fill %arg2[%arg8, %12, %arg7]/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=PRODUCER-KEYS
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e 's/fa3.ring_fill %arg2\[/fa3.ring_fill %arg3[/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=PRODUCER-TWICE

// The Hopper backward from the tile level: fa3-outline-hopper-kernels gives
// the fa3.attention_grad a kernel function, fa3-tile{grid=true} makes it
// three #gpu.block grids sharing the dQ accumulator, and
// convert-fa3-tile-to-hopper reads the spec off the grids (tiles, mask,
// softcap, scale, dropout, deterministic) and emits the backward's three
// kernels under the name the launch calls.
// TILE: func.func @[[NAME:fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal_det_cap[0-9a-f]+_s[0-9a-f]+]](
// TILE: memref.alloc
// TILE: mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]
// TILE: fa3.accumulate_tile {{.+}} {ordered}
// TILE-COUNT-2: mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]

// CHECK: fa3.attention_grad {{.+}}fa3.kernel = @fa3_kernels::@[[NAME:fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal_det_cap[0-9a-f]+_s[0-9a-f]+]], fa3.launch = {block_m = 64 : i64, block_n = 128 : i64, deterministic = 1 : i64,
// CHECK: gpu.module @fa3_kernels
// CHECK-NOT: func.func
// CHECK-DAG: llvm.func @[[NAME]]_pre(
// CHECK-DAG: llvm.func @[[NAME]](
// CHECK-DAG: llvm.func @[[NAME]]_post(
// CHECK-NOT: func.func

// The schedule's producer warpgroup (producer_regs = 24) is built only from
// fa3-warp-specialize's split of the key grid.
// NO-WS: error: 'scf.forall' op the schedule's producer_regs = 24 needs the key grid split by fa3-warp-specialize with that register split (and none without a producer)

// Without `ordered`, the grids read as the non-deterministic backward, which
// is not the kernel the launch names.
// RENAMED: error: 'func.func' op reads as the backward fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal_cap{{[0-9a-f]+}}_s{{[0-9a-f]+}}, not the kernel its launch names
// The main kernel's key block, K/V head and batch are the key grid's, as
// the IR numbers them: fa3-order-grid's longest-first renumbering (this is
// causal GQA) replayed in i32 on the block ids, its extents the grid dims.
// ORDERED: fa3.kernel = @fa3_kernels::@[[NAME:[a-z0-9_]+]],
// ORDERED: llvm.func @[[NAME]](
// ORDERED-DAG: %[[X:.+]] = nvvm.read.ptx.sreg.ctaid.x : i32
// ORDERED-DAG: nvvm.read.ptx.sreg.nctaid.x : i32
// ORDERED: %[[L:.+]] = arith.addi %[[X]], %{{.+}} : i32
// ORDERED: nvvm.read.ptx.sreg.nctaid.z : i32
// ORDERED: arith.divui %[[L]], %{{.+}} : i32
// ORDERED: llvm.func @[[NAME]]_post(

// The kernel emits the step op by op in fa3-grad-mma-order's order; fa3-tile's
// own order (dV's fa3.mma_tn before dPᵀ's fa3.qk) is not one it builds.
// MMA-ORDER: error: 'fa3.qk' op is in a backward step whose MMAs are not where the Hopper kernel issues them: expected dPᵀ's fa3.qk right after Sᵀ's, then fa3.softmax_grad, dV's fa3.mma_tn, dQ's fa3.pv, dK's fa3.mma_tn and the fa3.accumulate_tile (fa3-grad-mma-order's order)

// Key grid coordinates the kernel does not compute: a K tile row that is
// not key block · block_n, a batch read from anything but the grid.
// KEY-ROW: error: 'fa3.load_tile' op is not at row key block · block_n (the backward's key grid)
// The steps the kernel's loop walks must be the key grid's: query head g
// of the group and query block qb, Q's tile at row qb · block_m.
// STEPS: error: 'scf.forall' op expected the backward's steps: a loop over the 4 query heads of the group around a loop over query blocks whose Q tile is at row query block · block_m of head K/V head · group + g
// KEY-BATCH: error: 'fa3.load_tile' op has a coordinate, step bound or mask test computed from 'tensor.dim': the backward kernel computes them from the grid's ids and extents, the loops' induction variables, Sq, Sk and index arithmetic only
// The epilogue stores what the key grid stores: dK and dV, each an
// fa3.scale_cast (dK's by the softmax scale the kernel is named by, dV's by
// 1) of an accumulator the step loops carry.
// DK-SCALE: error: 'fa3.scale_cast' op scales dK by 5.000000e-01, expected 8.838835e-02 (the softmax scale, dQ's conversion's)
// DK-TWICE: error: 'fa3.parallel_store_tile' op is a second store into dK
// DV-STORED: error: 'fa3.parallel_store_tile' op stores something other than an fa3.scale_cast of an accumulator the step loops carry into dV
// The first and third grids are what `_pre` and `_post` compute, and
// nothing else: Δ = rowsum(dO ∘ O) and dQ = scale · accumulator.
// PRE-DELTA: error: 'fa3.row_dot' op is not part of what the backward's `_pre` kernel computes in the first grid: Δ = fa3.row_dot of the dO and O tiles (minus dLSE's fa3.load_stats), stored by one fa3.parallel_store_stats
// POST-OP: error: 'arith.constant' op is not part of what the backward's `_post` kernel computes in the third grid: dQ = fa3.scale_cast of the f32 accumulator's fa3.load_tile, stored by one fa3.parallel_store_tile
// fa3-warp-specialize's producer region is what the kernel's producer
// warpgroup issues: a Q fill whose use is not the step's number, a step
// without its Δ fill, K filled at another row than the consumers read.
// PRODUCER-USE: error: 'fa3.ring_fill' op is not what the backward kernel's producer warpgroup issues: K's and V's fa3.ring_fill at the consumers' K and V loads, then in the loops over the group's heads and query blocks one fill of Q, dO, LSE and Δ each at the step's loads, use g · (hi − lo) + qb − lo
// PRODUCER-FILLS: error: 'scf.for' op is not what the backward kernel's producer warpgroup issues: K's and V's fa3.ring_fill at the consumers' K and V loads, then in the loops over the group's heads and query blocks one fill of Q, dO, LSE and Δ each at the step's loads, use g · (hi − lo) + qb − lo
// PRODUCER-KEYS: error: 'fa3.ring_fill' op is not what the backward kernel's producer warpgroup issues: K's and V's fa3.ring_fill at the consumers' K and V loads, then in the loops over the group's heads and query blocks one fill of Q, dO, LSE and Δ each at the step's loads, use g · (hi − lo) + qb − lo
// V filled twice and K never: each of the kernel's loads has one site.
// PRODUCER-TWICE: error: 'fa3.ring_fill' op is not what the backward kernel's producer warpgroup issues: K's and V's fa3.ring_fill at the consumers' K and V loads, then in the loops over the group's heads and query blocks one fill of Q, dO, LSE and Δ each at the step's loads, use g · (hi − lo) + qb − lo
func.func @grad(%do: tensor<?x?x8x128xbf16>, %q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>, %o: tensor<?x?x8x128xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, deterministic, softcap = 30.0 : f32} : (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>
}
