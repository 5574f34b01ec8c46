// RUN: split-file %s %t
// RUN: fa3-opt %t/causal.mlir --pass-pipeline='builtin.module(gpu.module(func.func(fa3-order-grid)))' | FileCheck %s
// RUN: fa3-opt %t/full.mlir --pass-pipeline='builtin.module(gpu.module(func.func(fa3-order-grid)))' | FileCheck %s --check-prefix=FULL

//--- causal.mlir

// What fa3-outline-hopper-kernels, fa3-tile{grid=true}, fa3-fuse-softmax
// and canonicalize make of a causal GQA attention (Hq = 4, Hkv = 2, D = 64,
// block_m = 128, block_n = 64).
// The head group at the function level: max(1, (L2 budget / 256 bytes a
// key) / max(Sk, 1)) K/V heads, the budget 8 MiB up to 1024 keys and 32 MiB
// beyond, times Hq / Hkv = 2 query heads each, at most B * Hq.
// CHECK: %[[SK:.+]] = tensor.dim %arg1, %{{.+}} : tensor<?x?x2x64xbf16>
// CHECK: %[[SK1:.+]] = arith.maxui %[[SK]], %{{.+}} : index
// CHECK-DAG: %[[SHORT:.+]] = arith.constant 32768 : index
// CHECK-DAG: %[[LONG:.+]] = arith.constant 131072 : index
// CHECK-DAG: %[[C1024:.+]] = arith.constant 1024 : index
// CHECK: %[[ISLONG:.+]] = arith.cmpi sgt, %[[SK1]], %[[C1024]] : index
// CHECK: %[[C:.+]] = arith.select %[[ISLONG]], %[[LONG]], %[[SHORT]] : index
// CHECK: %[[KV:.+]] = arith.divui %[[C]], %[[SK1]] : index
// CHECK: %[[KV1:.+]] = arith.maxui %[[KV]], %{{.+}} : index
// CHECK: %[[BH:.+]] = arith.muli %[[C4:.+]], %[[B:.+]] : index
// CHECK: %[[G0:.+]] = arith.muli %[[KV1]], %{{.+}} : index
// CHECK: %[[G:.+]] = arith.minui %[[G0]], %[[BH]] : index
// CHECK: scf.forall (%[[X:.+]], %[[Y:.+]], %[[Z:.+]]) in (%[[T:.+]], 4, %[[B]])
// The linear block id in launch order, x + X * (y + 4 * z) ...
// CHECK: %[[ZY:.+]] = arith.muli %[[C4]], %[[Z]] : index
// CHECK: %[[YZ:.+]] = arith.addi %[[Y]], %[[ZY]] : index
// CHECK: %[[XYZ:.+]] = arith.muli %[[T]], %[[YZ]] : index
// CHECK: %[[L:.+]] = arith.addi %[[X]], %[[XYZ]] : index
// ... its head group and its place in the group ...
// CHECK: %[[GT:.+]] = arith.muli %[[G]], %[[T]] : index
// CHECK: %[[GRP:.+]] = arith.divui %[[L]], %[[GT]] : index
// CHECK: %[[FH:.+]] = arith.muli %[[GRP]], %[[G]] : index
// CHECK: %[[BASE:.+]] = arith.muli %[[GRP]], %[[GT]] : index
// CHECK: %[[R:.+]] = arith.subi %[[L]], %[[BASE]] : index
// CHECK: %[[LEFT:.+]] = arith.subi %[[BH]], %[[FH]] : index
// CHECK: %[[GH:.+]] = arith.minui %[[G]], %[[LEFT]] : index
// ... the query tile, last first ...
// CHECK: %[[RT:.+]] = arith.divui %[[R]], %[[GH]] : index
// CHECK: %[[TM1:.+]] = arith.subi %[[T]], %{{.+}} : index
// CHECK: %[[TILE:.+]] = arith.subi %[[TM1]], %[[RT]] : index
// ... and the head and batch.
// CHECK: %[[RH:.+]] = arith.remui %[[R]], %[[GH]] : index
// CHECK: %[[HB:.+]] = arith.addi %[[FH]], %[[RH]] : index
// CHECK: %[[HEAD:.+]] = arith.remui %[[HB]], %[[C4]] : index
// CHECK: %[[BATCH:.+]] = arith.divui %[[HB]], %[[C4]] : index
// Every former use of the induction variables takes the renumbered tile.
// CHECK: arith.divui %[[HEAD]], %{{.+}} : index
// CHECK: %[[ROW:.+]] = arith.muli %[[TILE]], %{{.+}} : index
// CHECK: fa3.load_tile %arg0[%[[BATCH]], %[[ROW]], %[[HEAD]]]
// CHECK-NOT: %[[X]]
// CHECK-NOT: %[[Y]]
// CHECK-NOT: %[[Z]]
// CHECK: fa3.finalize
// CHECK: fa3.parallel_store_tile %{{.+}} into %{{.+}}[%[[BATCH]], %{{.+}}, %[[HEAD]]]
  gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
    func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_pp_causal_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} {
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

//--- full.mlir

// Non-causal: every tile does the same work, the grid keeps its order.
// FULL: scf.forall (%[[X:.+]], %[[Y:.+]], %[[Z:.+]]) in
// FULL-NEXT: arith.divui %[[Y]], %{{.+}} : index
// FULL-NEXT: arith.muli %[[X]], %{{.+}} : index
// FULL-NEXT: fa3.load_tile %arg0[%[[Z]], %{{.+}}, %[[Y]]]
// FULL-NOT: arith.minui
  gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
    func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_pp_s3e000000(%arg0: tensor<?x?x4x64xbf16>, %arg1: tensor<?x?x2x64xbf16>, %arg2: tensor<?x?x2x64xbf16>) -> (tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} {
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
        %8:3 = scf.for %arg8 = %c0 to %7 step %c1 iter_args(%arg9 = %cst_1, %arg10 = %cst_0, %arg11 = %cst) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
          %9 = arith.muli %arg8, %c64 : index
          %10 = fa3.load_tile %arg1[%arg5, %9, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %11 = fa3.load_tile %arg2[%arg5, %9, %4] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
          %12 = fa3.qk %6, %10 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
          %13 = arith.addi %9, %c64 : index
          %14 = arith.cmpi sgt, %13, %dim_3 : index
          %15 = scf.if %14 -> (tensor<128x64xf32>) {
            %18 = fa3.mask %12, %5, %9, %dim_2, %dim_3 : tensor<128x64xf32>
            scf.yield %18 : tensor<128x64xf32>
          } else {
            scf.yield %12 : tensor<128x64xf32>
          }
          %probs, %new_max, %new_sum, %correction = fa3.online_softmax %15, %arg10, %arg11 {exp2_scale = 0.180336878 : f32} : tensor<128x64xf32>, tensor<128xf32>
          %16 = fa3.rescale %arg9, %correction : tensor<128x64xf32>, tensor<128xf32>
          %17 = fa3.pv %probs, %11, %16 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
          scf.yield %17, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
        }
        %output, %lse = fa3.finalize %8#0, %8#1, %8#2 {scale = 1.250000e-01 : f32} : tensor<128x64xf32>, tensor<128xf32> -> tensor<128x64xbf16>
        scf.forall.in_parallel {
          fa3.parallel_store_tile %output into %arg6[%arg5, %5, %arg4] : tensor<128x64xbf16> into tensor<?x?x4x64xbf16>
          fa3.parallel_store_stats %lse into %arg7[%arg5, %arg4, %5] : tensor<128xf32> into tensor<?x4x?xf32>
        }
      } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
      return %3#0, %3#1 : tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>
    }
  }
