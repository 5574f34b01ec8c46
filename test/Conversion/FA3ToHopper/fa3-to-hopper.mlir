// RUN: fa3-opt %s --split-input-file --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-fuse-softmax,fa3-warp-specialize,fa3-intra-wg-overlap,fa3-pingpong),convert-fa3-tile-to-hopper,convert-fa3-kernel-to-nvvm))" | FileCheck %s

// The host side stays at L0 with the kernel symbol and its launch metadata;
// the kernel lands in gpu.module @fa3_kernels for sm_90a.
// CHECK-LABEL: func.func @gqa_causal
// CHECK: fa3.attention {{.*}}fa3.kernel = @fa3_kernels::@fa3_fwd_bf16_d128_h8x2_m128n128s2_ov_ws24x240_pp_causal_
// CHECK-SAME: fa3.launch = {block_m = 128 : i64, block_n = 128 : i64, shared_memory = 164936 : i64, threads = 384 : i64}
// CHECK: gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">]
// CHECK: llvm.mlir.global external @fa3_dynamic_smem() {addr_space = 3 : i32, alignment = 1024 : i64}
// CHECK: llvm.func @fa3_fwd_bf16_d128_h8x2_m128n128s2_ov_ws24x240_pp_causal_
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<16 x i64>, nvvm.grid_constant}
// CHECK-SAME: nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>
// CHECK: nvvm.mbarrier.init
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: scf.for
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: llvm.inline_asm has_side_effects {{.*}}wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: nvvm.shfl.sync bfly
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: llvm.fptrunc {{.*}} : vector<2xf32> to vector<2xbf16>
// CHECK: nvvm.mbarrier.arrive
func.func @gqa_causal(%q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>
}
