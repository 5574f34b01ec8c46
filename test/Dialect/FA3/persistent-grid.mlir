// RUN: split-file %s %t
// RUN: fa3-opt %t/pass.mlir --split-input-file --pass-pipeline="builtin.module(gpu.module(func.func(fa3-persistent-grid)))" | FileCheck %s
// RUN: fa3-opt %t/errors.mlir --split-input-file --pass-pipeline="builtin.module(gpu.module(func.func(fa3-persistent-grid)))" -verify-diagnostics

//--- pass.mlir

// A Hopper kernel function after fa3-tile{grid=true}, fa3-fuse-softmax and
// fa3-warp-specialize (canonicalized), D = 64, Hq = Hkv = 2, its schedule
// persistent: the grid forall over (query tile, head, batch) is mapped to
// #fa3.persistent_block of the same dimensions; nothing else changes (the
// same tiles, the same body, the same parallel stores).
// CHECK-LABEL: func.func @fa3_fwd_bf16_d64_h2x2_m128n128s2_ws24x240_persistent_s3e000000
// CHECK: scf.forall (%[[T:.+]], %[[H:.+]], %[[B:.+]]) in (%{{.+}}, 2, %{{.+}}) shared_outs
// CHECK: fa3.warp_specialize
// CHECK: fa3.parallel_store_tile %{{.+}} into %{{.+}}[%[[B]], %{{.+}}, %[[H]]]
// CHECK: } {mapping = [#fa3.persistent_block<x>, #fa3.persistent_block<y>, #fa3.persistent_block<z>]}
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h2x2_m128n128s2_ws24x240_persistent_s3e000000(%arg0: tensor<?x?x2x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x2x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x2x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x2x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x2x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 2, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>) {
      %4 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %5 = arith.ceildivsi %dim_3, %c128 : index
      %6:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %4, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        %7 = arith.maxsi %5, %c0 : index
        %8 = arith.cmpi sgt, %7, %c0 : index
        scf.if %8 {
          fa3.ring_fill %arg1[%arg5, %c0, %arg4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        }
        scf.for %arg8 = %c0 to %7 step %c1 {
          %9 = arith.addi %arg8, %c1 : index
          %10 = arith.cmpi slt, %9, %7 : index
          scf.if %10 {
            %12 = arith.muli %9, %c128 : index
            fa3.ring_fill %arg1[%arg5, %12, %arg4] use %9 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          }
          %11 = arith.muli %arg8, %c128 : index
          fa3.ring_fill %arg2[%arg5, %11, %arg4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        }
        fa3.yield
      } consumers {
        %7 = fa3.load_tile %arg0[%arg5, %4, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        %8:3 = scf.for %arg8 = %c0 to %5 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %9 = arith.muli %arg8, %c128 : index
          %10 = fa3.load_tile %arg1[%arg5, %9, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          %11 = fa3.load_tile %arg2[%arg5, %9, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          %12 = fa3.qk %7, %10 : tensor<128x64xbf16>, tensor<128x64xbf16> -> tensor<128x128xf32>
          %13 = arith.addi %9, %c128 : index
          %14 = arith.cmpi sgt, %13, %dim_3 : index
          %15 = scf.if %14 -> (tensor<128x128xf32>) {
            %18 = fa3.mask %12, %4, %9, %dim_2, %dim_3 : tensor<128x128xf32>
            scf.yield %18 : tensor<128x128xf32>
          } else {
            scf.yield %12 : tensor<128x128xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %15, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x128xf32>, tensor<128xf32>
          %16 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
          %17 = fa3.pv %probs, %11, %16 : tensor<128x128xf32>, tensor<128x64xbf16>, tensor<128x64xf32>
          scf.yield %17, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>}
        %output, %lse = fa3.finalize %8#0, %8#1, %8#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %6#0 into %arg6[%arg5, %4, %arg4] : tensor<128x64xbf16> into tensor<?x?x2x64xbf16>
        fa3.parallel_store_stats %6#1 into %arg7[%arg5, %arg4, %4] : tensor<128xf32> into tensor<?x2x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>
  }
}

// -----

// The same kernel with persistent = false keeps its #gpu.block grid.
// CHECK-LABEL: func.func @fa3_fwd_bf16_d64_h2x2_m128n128s2_ws24x240_s3e000000
// CHECK: } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h2x2_m128n128s2_ws24x240_s3e000000(%arg0: tensor<?x?x2x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x2x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x2x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x2x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x2x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 2, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>) {
      %4 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %5 = arith.ceildivsi %dim_3, %c128 : index
      %6:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %4, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        %7 = arith.maxsi %5, %c0 : index
        %8 = arith.cmpi sgt, %7, %c0 : index
        scf.if %8 {
          fa3.ring_fill %arg1[%arg5, %c0, %arg4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        }
        scf.for %arg8 = %c0 to %7 step %c1 {
          %9 = arith.addi %arg8, %c1 : index
          %10 = arith.cmpi slt, %9, %7 : index
          scf.if %10 {
            %12 = arith.muli %9, %c128 : index
            fa3.ring_fill %arg1[%arg5, %12, %arg4] use %9 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          }
          %11 = arith.muli %arg8, %c128 : index
          fa3.ring_fill %arg2[%arg5, %11, %arg4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        }
        fa3.yield
      } consumers {
        %7 = fa3.load_tile %arg0[%arg5, %4, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        %8:3 = scf.for %arg8 = %c0 to %5 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %9 = arith.muli %arg8, %c128 : index
          %10 = fa3.load_tile %arg1[%arg5, %9, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          %11 = fa3.load_tile %arg2[%arg5, %9, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          %12 = fa3.qk %7, %10 : tensor<128x64xbf16>, tensor<128x64xbf16> -> tensor<128x128xf32>
          %13 = arith.addi %9, %c128 : index
          %14 = arith.cmpi sgt, %13, %dim_3 : index
          %15 = scf.if %14 -> (tensor<128x128xf32>) {
            %18 = fa3.mask %12, %4, %9, %dim_2, %dim_3 : tensor<128x128xf32>
            scf.yield %18 : tensor<128x128xf32>
          } else {
            scf.yield %12 : tensor<128x128xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %15, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x128xf32>, tensor<128xf32>
          %16 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
          %17 = fa3.pv %probs, %11, %16 : tensor<128x128xf32>, tensor<128x64xbf16>, tensor<128x64xf32>
          scf.yield %17, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>}
        %output, %lse = fa3.finalize %8#0, %8#1, %8#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %6#0 into %arg6[%arg5, %4, %arg4] : tensor<128x64xbf16> into tensor<?x?x2x64xbf16>
        fa3.parallel_store_stats %6#1 into %arg7[%arg5, %arg4, %4] : tensor<128xf32> into tensor<?x2x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>
  }
}
//--- errors.mlir

// persistent = true but no producer warpgroup split the tile: the Hopper
// kernel has no persistent form without one.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h2x2_m128n128s2_ws24x240_persistent_s3e000000(%arg0: tensor<?x?x2x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x2x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x2x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x2x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x2x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 2, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>) {
      %4 = arith.muli %arg3, %c128 : index
      %5 = fa3.load_tile %arg0[%arg5, %4, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %6 = arith.ceildivsi %dim_3, %c128 : index
      // expected-error @+1 {{has persistent = true in its schedule but its grid has no fa3.warp_specialize: a persistent grid needs a producer warpgroup (producer_regs and consumer_regs set, then fa3-warp-specialize)}}
      %7:3 = scf.for %arg8 = %c0 to %6 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
        %8 = arith.muli %arg8, %c128 : index
        %9 = fa3.load_tile %arg1[%arg5, %8, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        %10 = fa3.load_tile %arg2[%arg5, %8, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        %11 = fa3.qk %5, %9 : tensor<128x64xbf16>, tensor<128x64xbf16> -> tensor<128x128xf32>
        %12 = arith.addi %8, %c128 : index
        %13 = arith.cmpi sgt, %12, %dim_3 : index
        %14 = scf.if %13 -> (tensor<128x128xf32>) {
          %17 = fa3.mask %11, %4, %8, %dim_2, %dim_3 : tensor<128x128xf32>
          scf.yield %17 : tensor<128x128xf32>
        } else {
          scf.yield %11 : tensor<128x128xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %14, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x128xf32>, tensor<128xf32>
        %15 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
        %16 = fa3.pv %probs, %10, %15 : tensor<128x128xf32>, tensor<128x64xbf16>, tensor<128x64xf32>
        scf.yield %16, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>}
      %output, %lse = fa3.finalize %7#0, %7#1, %7#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg6[%arg5, %4, %arg4] : tensor<128x64xbf16> into tensor<?x?x2x64xbf16>
        fa3.parallel_store_stats %lse into %arg7[%arg5, %arg4, %4] : tensor<128xf32> into tensor<?x2x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %3#0, %3#1 : tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>
  }
}

// -----

// A persistent schedule on a forall that is not the block grid.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @fa3_fwd_bf16_d64_h2x2_m128n128s2_ws24x240_persistent_s3e000000(%arg0: tensor<?x?x2x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<128xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
    %c128 = arith.constant 128 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x?x2x64xbf16>
    %dim_2 = tensor.dim %arg0, %c1 : tensor<?x?x2x64xbf16>
    %0 = arith.ceildivui %dim_2, %c128 : index
    %1 = tensor.empty(%dim, %dim_2) : tensor<?x?x2x64xbf16>
    %2 = tensor.empty(%dim, %dim_2) : tensor<?x2x?xf32>
    %3:2 = scf.forall (%arg3, %arg4, %arg5) in (%0, 2, %dim) shared_outs(%arg6 = %1, %arg7 = %2) -> (tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>) {
      %4 = arith.muli %arg3, %c128 : index
      %dim_3 = tensor.dim %arg1, %c1 : tensor<?x?x2x64xbf16>
      %5 = arith.ceildivsi %dim_3, %c128 : index
      %6:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
        fa3.ring_fill %arg0[%arg5, %4, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        %7 = arith.maxsi %5, %c0 : index
        %8 = arith.cmpi sgt, %7, %c0 : index
        scf.if %8 {
          fa3.ring_fill %arg1[%arg5, %c0, %arg4] use %c0 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        }
        scf.for %arg8 = %c0 to %7 step %c1 {
          %9 = arith.addi %arg8, %c1 : index
          %10 = arith.cmpi slt, %9, %7 : index
          scf.if %10 {
            %12 = arith.muli %9, %c128 : index
            fa3.ring_fill %arg1[%arg5, %12, %arg4] use %9 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          }
          %11 = arith.muli %arg8, %c128 : index
          fa3.ring_fill %arg2[%arg5, %11, %arg4] use %arg8 : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        }
        fa3.yield
      } consumers {
        %7 = fa3.load_tile %arg0[%arg5, %4, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
        // expected-error @+1 {{has persistent = true in its schedule but is not inside a #gpu.block grid forall (fa3-tile{grid=true} makes one)}}
        %8:3 = scf.for %arg8 = %c0 to %5 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %9 = arith.muli %arg8, %c128 : index
          %10 = fa3.load_tile %arg1[%arg5, %9, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          %11 = fa3.load_tile %arg2[%arg5, %9, %arg4] : tensor<?x?x2x64xbf16> -> tensor<128x64xbf16>
          %12 = fa3.qk %7, %10 : tensor<128x64xbf16>, tensor<128x64xbf16> -> tensor<128x128xf32>
          %13 = arith.addi %9, %c128 : index
          %14 = arith.cmpi sgt, %13, %dim_3 : index
          %15 = scf.if %14 -> (tensor<128x128xf32>) {
            %18 = fa3.mask %12, %4, %9, %dim_2, %dim_3 : tensor<128x128xf32>
            scf.yield %18 : tensor<128x128xf32>
          } else {
            scf.yield %12 : tensor<128x128xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %15, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x128xf32>, tensor<128xf32>
          %16 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
          %17 = fa3.pv %probs, %11, %16 : tensor<128x128xf32>, tensor<128x64xbf16>, tensor<128x64xf32>
          scf.yield %17, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>}
        %output, %lse = fa3.finalize %8#0, %8#1, %8#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        fa3.yield %output, %lse : tensor<128x64xbf16>, tensor<128xf32>
      } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
      scf.forall.in_parallel {
        fa3.parallel_store_tile %6#0 into %arg6[%arg5, %4, %arg4] : tensor<128x64xbf16> into tensor<?x?x2x64xbf16>
        fa3.parallel_store_stats %6#1 into %arg7[%arg5, %arg4, %4] : tensor<128xf32> into tensor<?x2x?xf32>
      }
    } {mapping = [#gpu.thread<x>, #gpu.thread<y>, #gpu.thread<z>]}
    return %3#0, %3#1 : tensor<?x?x2x64xbf16>, tensor<?x2x?xf32>
  }
}
