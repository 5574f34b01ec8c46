// RUN: fa3-opt %s --fa3-hopper-kernel-pipeline --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=HOPPER
// RUN: fa3-opt %s --fa3-cpu-pipeline --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=CPU

// The 16-bit Hopper forward goes through the tile level; each schedule idea
// is a pass of its own there, in this order, before the conversion to a
// kernel (warp specialization first: the overlap and the pingpong turns
// restructure the consumers' key loop it leaves; the persistent mapping
// last, after fa3-order-grid renumbered the #gpu.block grid's tiles).
// HOPPER: fa3-select-schedule{{.*}}target=sm_90a
// HOPPER: fa3-outline-hopper-kernels
// HOPPER: gpu.module(
// HOPPER-NEXT: func.func(
// HOPPER-NEXT: fa3-tile{grid=true},
// HOPPER-NEXT: fa3-fuse-softmax,
// HOPPER-NEXT: fa3-grad-mma-order,
// HOPPER-NEXT: fa3-lazy-rescale,
// HOPPER-NEXT: fa3-warp-specialize,
// HOPPER-NEXT: fa3-intra-wg-overlap,
// HOPPER-NEXT: fa3-pingpong,
// HOPPER-NEXT: fa3-order-grid,
// HOPPER-NEXT: fa3-persistent-grid
// HOPPER-NEXT: ),
// HOPPER-NEXT: convert-fa3-tile-to-hopper
// HOPPER: convert-fa3-to-hopper
// HOPPER: convert-fa3-kernel-to-nvvm

// The CPU runs fa3-grad-mma-order, fa3-lazy-rescale and fa3-intra-wg-overlap
// too: the reordered backward step, the kept maxima and the rotated key loop
// compute what the GPU's do, so the CPU tests check the loops the GPU runs.
// CPU: fa3-select-schedule{{.*}}target=cpu
// CPU-NEXT: fa3-tile{grid=false},
// CPU-NEXT: fa3-fuse-softmax,
// CPU-NEXT: fa3-grad-mma-order,
// CPU-NEXT: fa3-lazy-rescale,
// CPU-NEXT: fa3-intra-wg-overlap,
// CPU-NEXT: convert-fa3-to-linalg
module {}
