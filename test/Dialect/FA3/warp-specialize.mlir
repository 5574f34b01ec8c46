// RUN: split-file %s %t
// RUN: fa3-opt %t/pass.mlir --split-input-file --pass-pipeline="builtin.module(gpu.module(func.func(fa3-warp-specialize)))" | FileCheck %s
// RUN: fa3-opt %t/cpu.mlir --convert-fa3-to-linalg | FileCheck %s --check-prefix=CPU
// RUN: fa3-opt %t/grad.mlir --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-warp-specialize,canonicalize,cse)))" | FileCheck %s --check-prefix=GRAD
// RUN: fa3-opt %t/errors.mlir --pass-pipeline="builtin.module(gpu.module(func.func(fa3-warp-specialize)))" -verify-diagnostics

//--- pass.mlir

// A Hopper kernel function after fa3-tile{grid=true} and fa3-fuse-softmax
// (canonicalized): causal GQA (Hq = 4, Hkv = 2, D = 64) with a producer
// warpgroup in its schedule (producer_regs = 24, consumer_regs = 240).
// The grid's index arithmetic stays in the forall body; the query load,
// the key loop and fa3.finalize move into the consumers region, unchanged,
// and the op returns finalize's O and LSE to the parallel stores.
// CHECK-LABEL: func.func @fa3_fwd_bf16_d64_h4x2_m128n64s2_ws24x240_causal_s3e000000
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<?x?x4x64xbf16>, %[[K:[^:]+]]: tensor<?x?x2x64xbf16>, %[[V:[^:]+]]: tensor<?x?x2x64xbf16>)
// CHECK: scf.forall (%[[QB:.+]], %[[H:.+]], %[[B:.+]]) in
// CHECK: %[[HKV:.+]] = arith.divui %[[H]], %c2 : index
// CHECK: %[[Q0:.+]] = arith.muli %[[QB]], %c128 : index
// CHECK: %[[HI:.+]] = arith.ceildivsi %{{.+}}, %c64 : index
// CHECK: %[[WS:.+]]:2 = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>) producer {
// The producer: the query tile, then the key tile of block 0 if the tile
// sees any key block ...
// CHECK-NEXT: fa3.ring_fill %[[Q]][%[[B]], %[[Q0]], %[[H]]] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
// CHECK: %[[SPAN:.+]] = arith.subi %[[HI]], %c0 : index
// CHECK: %[[N:.+]] = arith.maxsi %[[SPAN]], %[[C0:.+]] : index
// CHECK: %[[ANY:.+]] = arith.cmpi sgt, %[[N]], %[[C0]] : index
// CHECK: scf.if %[[ANY]] {
// CHECK: %[[FIRST:.+]] = arith.addi %c0, %[[C0]] : index
// CHECK: %[[ROW0:.+]] = arith.muli %[[FIRST]], %{{.+}} : index
// CHECK: fa3.ring_fill %[[K]][%[[B]], %[[ROW0]], %[[HKV]]] use %[[C0]] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
// CHECK: }
// ... then per block i the key tile of block i + 1 (use i + 1) ahead of
// the value tile of block i (use i), their rows the key loop's kb * 64.
// CHECK: scf.for %[[I:.+]] = %[[C0]] to %[[N]] step %{{.+}} {
// CHECK: %[[I1:.+]] = arith.addi %[[I]], %{{.+}} : index
// CHECK: %[[HAS:.+]] = arith.cmpi slt, %[[I1]], %[[N]] : index
// CHECK: scf.if %[[HAS]] {
// CHECK: %[[KB1:.+]] = arith.addi %c0, %[[I1]] : index
// CHECK: %[[KROW:.+]] = arith.muli %[[KB1]], %{{.+}} : index
// CHECK: fa3.ring_fill %[[K]][%[[B]], %[[KROW]], %[[HKV]]] use %[[I1]] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
// CHECK: }
// CHECK: %[[KB:.+]] = arith.addi %c0, %[[I]] : index
// CHECK: %[[VROW:.+]] = arith.muli %[[KB]], %{{.+}} : index
// CHECK: fa3.ring_fill %[[V]][%[[B]], %[[VROW]], %[[HKV]]] use %[[I]] : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
// CHECK: }
// CHECK: fa3.yield
// CHECK-NEXT: } consumers {
// CHECK-NEXT: %[[QT:.+]] = fa3.load_tile %[[Q]][%[[B]], %[[Q0]], %[[H]]]
// CHECK: scf.for
// CHECK: fa3.load_tile %[[K]]
// CHECK: fa3.qk %[[QT]],
// CHECK: } {fa3.schedule =
// CHECK: %[[O:.+]], %[[L:.+]] = fa3.finalize
// CHECK-NEXT: fa3.yield %[[O]], %[[L]] : tensor<128x64xbf16>, tensor<128xf32>
// CHECK-NEXT: } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
// CHECK: fa3.parallel_store_tile %[[WS]]#0
// CHECK: fa3.parallel_store_stats %[[WS]]#1
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
        %28 = fa3.pv %probs, %18, %27 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
        scf.yield %28, %new_max, %new_sum : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
      } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>}
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

// A schedule without a producer warpgroup: nothing changes.
// CHECK-LABEL: func.func @no_producer
// CHECK-NOT: fa3.warp_specialize
gpu.module @fa3_kernels {
  func.func @no_producer(%q: tensor<1x?x1x64xbf16>, %k: tensor<1x?x1x64xbf16>, %n: index) -> tensor<64x64xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %acc0 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
    %r:2 = scf.forall (%x, %y, %z) in (%n, 1, 1) shared_outs(%o = %acc0, %m = %m0) -> (tensor<64x64xf32>, tensor<64xf32>) {
      %qt = fa3.load_tile %q[%c0, %x, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
      %l:2 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %mx = %m0) -> (tensor<64x64xf32>, tensor<64xf32>) {
        %kt = fa3.load_tile %k[%c0, %kb, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
        %s = fa3.qk %qt, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
        %p, %m1, %l1, %alpha = fa3.online_softmax %s, %mx, %mx {exp2_scale = 1.0 : f32} : tensor<64x64xf32>, tensor<64xf32>
        %acc1 = fa3.pv %p, %kt, %acc : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
        scf.yield %acc1, %m1 : tensor<64x64xf32>, tensor<64xf32>
      } {fa3.schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>}
      scf.forall.in_parallel {
        tensor.parallel_insert_slice %l#0 into %o[0, 0] [64, 64] [1, 1] : tensor<64x64xf32> into tensor<64x64xf32>
        tensor.parallel_insert_slice %l#1 into %m[0] [64] [1] : tensor<64xf32> into tensor<64xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    return %r#0 : tensor<64x64xf32>
  }
}

//--- cpu.mlir

// On the CPU the op is its consumers region: the producer's fills are the
// loads the consumers make anyway.
// CPU-LABEL: func.func @cpu
// CPU-NOT: fa3.warp_specialize
// CPU-NOT: fa3.ring_fill
// CPU: linalg.generic
// CPU: return %{{.+}} : tensor<64x64xf32>
func.func @cpu(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %row: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %s = fa3.warp_specialize -> (tensor<64x64xf32>) producer {
    fa3.ring_fill %k[%c0, %row, %c0] use %c0 : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    fa3.yield
  } consumers {
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s0 = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    fa3.yield %s0 : tensor<64x64xf32>
  } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
  return %s : tensor<64x64xf32>
}

//--- errors.mlir

// A packed batch's query tile whose LSE store keeps the rows past the
// sequence's end: the producer's whole-tile fill would put the next
// sequence's rows there, so the limit cannot be dropped.
gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">] {
  func.func @varlen_lse_past_end(%arg0: tensor<?x2x64xbf16>, %arg1: tensor<?x2x64xbf16>, %arg2: tensor<?x2x64xbf16>, %arg3: tensor<?xi32>, %arg4: tensor<?xi32>) -> (tensor<?x2x64xbf16>, tensor<2x?xf32>) attributes {fa3.schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
    %cst = arith.constant dense<0.000000e+00> : tensor<192xf32>
    %cst_0 = arith.constant dense<0xFF800000> : tensor<192xf32>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<192x64xf32>
    %c128 = arith.constant 128 : index
    %c192 = arith.constant 192 : index
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
    %5 = arith.ceildivui %dim, %c192 : index
    %6:2 = scf.forall (%arg5, %arg6, %arg7) in (%5, 2, %4) shared_outs(%arg8 = %1, %arg9 = %3) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>) {
      %7 = arith.muli %arg5, %c192 : index
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
      // expected-error @+1 {{cannot be warp-specialized by fa3-warp-specialize: the producer loads whole tiles; a query row limit needs the forall's stores to drop the rows past it (the same row and limit)}}
      %22 = fa3.load_tile %expanded[%c0, %21, %arg6] limit %13 : tensor<1x?x2x64xbf16> -> tensor<192x64xbf16>
      %23 = arith.ceildivsi %20, %c128 : index
      %24:3 = scf.for %arg10 = %c0 to %23 step %c1 iter_args(%arg11 = %cst_1, %arg12 = %cst_0, %arg13 = %cst) -> (tensor<192x64xf32>, tensor<192xf32>, tensor<192xf32>) {
        %25 = arith.muli %arg10, %c128 : index
        %26 = arith.addi %16, %25 : index
        %27 = fa3.load_tile %expanded_5[%c0, %26, %arg6] limit %19 : tensor<1x?x2x64xbf16> -> tensor<128x64xbf16>
        %28 = fa3.load_tile %expanded_7[%c0, %26, %arg6] limit %19 : tensor<1x?x2x64xbf16> -> tensor<128x64xbf16>
        %29 = fa3.qk %22, %27 : tensor<192x64xbf16>, tensor<128x64xbf16> -> tensor<192x128xf32>
        %30 = arith.addi %25, %c128 : index
        %31 = arith.cmpi sgt, %30, %20 : index
        %32 = scf.if %31 -> (tensor<192x128xf32>) {
          %35 = fa3.mask %29, %7, %25, %14, %20 : tensor<192x128xf32>
          scf.yield %35 : tensor<192x128xf32>
        } else {
          scf.yield %29 : tensor<192x128xf32>
        }
        %probs, %new_max, %new_sum, %correction = fa3.online_softmax %32, %arg12, %arg13 {exp2_scale = 0.180336878 : f32} : tensor<192x128xf32>, tensor<192xf32>
        %33 = fa3.rescale %arg11, %correction : tensor<192x64xf32>, tensor<192xf32>
        %34 = fa3.pv %probs, %28, %33 : tensor<192x128xf32>, tensor<128x64xbf16>, tensor<192x64xf32>
        scf.yield %34, %new_max, %new_sum : tensor<192x64xf32>, tensor<192xf32>, tensor<192xf32>
      } {fa3.schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>}
      %output, %lse = fa3.finalize %24#0, %24#1, %24#2 {scale = 1.250000e-01 : f32} : tensor<192x64xf32>, tensor<192xf32> -> tensor<192x64xbf16>
      scf.forall.in_parallel {
        fa3.parallel_store_tile %output into %arg8[%c0, %21, %arg6] limit %13 : tensor<192x64xbf16> into tensor<1x?x2x64xbf16>
        fa3.parallel_store_stats %lse into %arg9[%c0, %arg6, %21] : tensor<192xf32> into tensor<1x2x?xf32>
      }
    } {mapping = [#gpu.block<x>, #gpu.block<y>, #gpu.block<z>]}
    %collapsed = tensor.collapse_shape %6#0 [[0, 1], [2], [3]] : tensor<1x?x2x64xbf16> into tensor<?x2x64xbf16>
    %collapsed_9 = tensor.collapse_shape %6#1 [[0, 1], [2]] : tensor<1x2x?xf32> into tensor<2x?xf32>
    return %collapsed, %collapsed_9 : tensor<?x2x64xbf16>, tensor<2x?xf32>
  }
}

//--- grad.mlir

// The backward's key grid (fa3-tile{grid=true} of an outlined
// fa3.attention_grad, whose kernel function carries a schedule with
// producer_regs = 24): the producer fills K and V once, then for each step
// (query head g of the group, query block qb) Q, dO, the LSE and Δ as ring
// use g · (qbHi − qbLo) + (qb − qbLo), at the coordinates of the
// consumers' loads; the consumers hold the tile ops and return dK and dV,
// which the forall's stores take. The index arithmetic stays in the grid's
// body.
// GRAD-LABEL: func.func @fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal
// GRAD-SAME: (%[[DO:[^:]+]]: tensor<?x?x8x128xbf16>, %[[Q:[^:]+]]: tensor<?x?x8x128xbf16>, %[[K:[^:]+]]: tensor<?x?x2x128xbf16>, %[[V:[^:]+]]: tensor<?x?x2x128xbf16>, %{{[^:]+}}: tensor<?x?x8x128xbf16>, %[[LSE:[^:]+]]: tensor<?x8x?xf32>)
// GRAD: %[[DELTA:.+]] = scf.forall
// GRAD: scf.forall (%[[KB:.+]], %[[HKV:.+]], %[[B:.+]]) in
// GRAD: %[[K0:.+]] = arith.muli %[[KB]], %c128
// GRAD: %[[LO:.+]] = arith.floordivsi
// GRAD: %[[HI:.+]] = arith.maxsi %[[LO]]
// GRAD: %[[RES:.+]]:2 = fa3.warp_specialize -> (tensor<128x128xbf16>, tensor<128x128xbf16>) producer {
// GRAD-NEXT: fa3.ring_fill %[[K]][%[[B]], %[[K0]], %[[HKV]]] : tensor<?x?x2x128xbf16> -> tensor<128x128xbf16>
// GRAD-NEXT: fa3.ring_fill %[[V]][%[[B]], %[[K0]], %[[HKV]]] : tensor<?x?x2x128xbf16> -> tensor<128x128xbf16>
// GRAD-NEXT: %[[N:.+]] = arith.subi %[[HI]], %[[LO]]
// GRAD-NEXT: scf.for %[[G:.+]] = %c0 to %c4 step %c1 {
// GRAD-NEXT: scf.for %[[QB:.+]] = %[[LO]] to %[[HI]] step %c1 {
// GRAD-DAG: %[[REL:.+]] = arith.subi %[[QB]], %[[LO]]
// GRAD-DAG: %[[GN:.+]] = arith.muli %[[G]], %[[N]]
// GRAD: %[[USE:.+]] = arith.addi %[[GN]], %[[REL]]
// GRAD: %[[H:.+]] = arith.addi %{{.+}}, %[[G]]
// GRAD: %[[ROW:.+]] = arith.muli %[[QB]], %c64
// GRAD-NEXT: fa3.ring_fill %[[Q]][%[[B]], %[[ROW]], %[[H]]] use %[[USE]] : tensor<?x?x8x128xbf16> -> tensor<64x128xbf16>
// GRAD-NEXT: fa3.ring_fill %[[DO]][%[[B]], %[[ROW]], %[[H]]] use %[[USE]] : tensor<?x?x8x128xbf16> -> tensor<64x128xbf16>
// GRAD-NEXT: fa3.ring_fill %[[LSE]][%[[B]], %[[ROW]], %[[H]]] use %[[USE]] : tensor<?x8x?xf32> -> tensor<64xf32>
// GRAD-NEXT: fa3.ring_fill %[[DELTA]][%[[B]], %[[ROW]], %[[H]]] use %[[USE]] : tensor<?x8x?xf32> -> tensor<64xf32>
// GRAD: fa3.yield
// GRAD-NEXT: } consumers {
// GRAD-NEXT: fa3.load_tile %[[K]][%[[B]], %[[K0]], %[[HKV]]]
// GRAD-NEXT: fa3.load_tile %[[V]][%[[B]], %[[K0]], %[[HKV]]]
// GRAD: fa3.accumulate_tile
// GRAD: %[[DK:.+]] = fa3.scale_cast
// GRAD: %[[DV:.+]] = fa3.scale_cast
// GRAD: fa3.yield %[[DK]], %[[DV]]
// GRAD-NEXT: } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
// GRAD: fa3.parallel_store_tile %[[RES]]#0
// GRAD: fa3.parallel_store_tile %[[RES]]#1
func.func @grad(%do: tensor<?x?x8x128xbf16>, %q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>, %o: tensor<?x?x8x128xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal} : (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>
}
