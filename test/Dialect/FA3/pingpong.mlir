// RUN: fa3-opt %s --split-input-file --fa3-pingpong --verify-diagnostics | FileCheck %s
// RUN: fa3-opt %s --split-input-file --fa3-pingpong --convert-fa3-to-linalg --verify-diagnostics | FileCheck %s --check-prefix=CPU

// A plain key loop of a pingpong schedule: the turn is the QKᵀ (the PV of
// one warpgroup runs beside the other's QKᵀ, as in FlashAttention-3
// without intra-warpgroup overlap); the K load stays outside it.
#pingpong = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>

// CHECK-LABEL: func.func @plain
// CHECK: scf.for
// CHECK: %[[KT:.+]] = fa3.load_tile
// CHECK: %[[VT:.+]] = fa3.load_tile
// CHECK: %[[S:.+]] = fa3.mma_turn -> (tensor<128x64xf32>) {
// CHECK-NEXT: %[[S0:.+]] = fa3.qk %{{.+}}, %[[KT]]
// CHECK-NEXT: fa3.yield %[[S0]] : tensor<128x64xf32>
// CHECK-NEXT: }
// CHECK: fa3.online_softmax %[[S]],
// CHECK-NOT: fa3.mma_turn
// CHECK: fa3.pv %{{.+}}, %[[VT]],
// 16-bit turns run on across a persistent CTA's tiles.
// CHECK: } {fa3.pingpong_turns = "across_tiles", fa3.schedule = #fa3.schedule<
// On the CPU a turn is its body, inline.
// CPU-LABEL: func.func @plain
// CPU-NOT: fa3.mma_turn
// CPU-NOT: fa3.qk
// CPU: linalg.generic
// CPU-NOT: fa3.mma_turn
// CPU-LABEL: func.func @rotated
func.func @plain(%q: tensor<128x64xbf16>, %k: tensor<1x?x1x64xbf16>, %v: tensor<1x?x1x64xbf16>, %n: index) -> tensor<128x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<128xf32>
  %r:3 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0, %l = %m0) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
    %row = arith.muli %kb, %c64 : index
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %vt = fa3.load_tile %v[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %l {exp2_scale = 1.0 : f32} : tensor<128x64xf32>, tensor<128xf32>
    %acc1 = fa3.rescale %acc, %alpha : tensor<128x64xf32>, tensor<128xf32>
    %acc2 = fa3.pv %p, %vt, %acc1 : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
    scf.yield %acc2, %m1, %l1 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
  } {fa3.schedule = #pingpong}
  return %r#0 : tensor<128x64xf32>
}

// -----

// The key loop as fa3-intra-wg-overlap rotates it: one turn spans block
// j + 1's QKᵀ through block j's PV (the V load and its row between them);
// the prologue's QKᵀ and the epilogue's PV are a turn each.
// CHECK-LABEL: func.func @rotated
// CHECK: scf.if
// CHECK: %[[K0:.+]] = fa3.load_tile
// CHECK-NEXT: %[[S0:.+]] = fa3.mma_turn -> (tensor<64x64xf32>) {
// CHECK-NEXT: fa3.qk %{{.+}}, %[[K0]]
// CHECK-NEXT: fa3.yield
// CHECK-NEXT: }
// CHECK: scf.for %[[J:.+]] = {{.+}} iter_args(%[[P:[^ ]+]] = {{.+}}, %{{[^ ]+}} = {{.+}}, %{{[^ ]+}} = {{.+}}, %[[O:[^ ]+]] = {{.+}})
// CHECK: %[[KT:.+]] = fa3.load_tile
// CHECK-NEXT: %[[TURN:.+]]:2 = fa3.mma_turn -> (tensor<64x64xf32>, tensor<64x64xf32>) {
// CHECK-NEXT: %[[S:.+]] = fa3.qk %{{.+}}, %[[KT]]
// CHECK-NEXT: %[[VROW:.+]] = arith.muli %[[J]], %c64
// CHECK-NEXT: %[[VT:.+]] = fa3.load_tile %{{.+}}[%c0, %[[VROW]], %c0]
// CHECK-NEXT: %[[O1:.+]] = fa3.pv %[[P]], %[[VT]], %[[O]]
// CHECK-NEXT: fa3.yield %[[S]], %[[O1]] : tensor<64x64xf32>, tensor<64x64xf32>
// CHECK-NEXT: }
// CHECK: fa3.mask %[[TURN]]#0,
// CHECK: fa3.rescale %[[TURN]]#1,
// CHECK: } {fa3.intra_wg_overlap, fa3.pingpong_turns = "across_tiles", fa3.schedule = #fa3.schedule<
// CHECK: %[[VN:.+]] = fa3.load_tile
// CHECK-NEXT: %[[ON:.+]] = fa3.mma_turn -> (tensor<64x64xf32>) {
// CHECK-NEXT: fa3.pv %{{.+}}, %[[VN]],
// CHECK-NEXT: fa3.yield
// CHECK-NEXT: }
// CHECK-NEXT: scf.yield %[[ON]],
func.func @rotated(%arg0: tensor<64x64xbf16>, %arg1: tensor<1x?x1x64xbf16>, %arg2: tensor<1x?x1x64xbf16>, %arg3: index, %arg4: index, %arg5: index) -> (tensor<64x64xbf16>, tensor<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %cst_0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %cst_1 = arith.constant dense<1.000000e+00> : tensor<64xf32>
  %0 = arith.cmpi slt, %arg3, %arg4 : index
  %1:3 = scf.if %0 -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>) {
    %2 = arith.muli %arg3, %c64 : index
    %3 = fa3.load_tile %arg1[%c0, %2, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %4 = fa3.qk %arg0, %3 : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %5 = arith.addi %2, %c64 : index
    %6 = arith.cmpi sgt, %5, %arg5 : index
    %7 = scf.if %6 -> (tensor<64x64xf32>) {
      %14 = fa3.mask %4, %c0, %2, %c64, %arg5 : tensor<64x64xf32>
      scf.yield %14 : tensor<64x64xf32>
    } else {
      scf.yield %4 : tensor<64x64xf32>
    }
    %probs, %new_max, %new_sum, %correction = fa3.online_softmax %7, %cst_0, %cst_1 {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %8 = fa3.rescale %cst, %correction : tensor<64x64xf32>, tensor<64xf32>
    %9 = arith.subi %arg4, %c1 : index
    %10:4 = scf.for %arg6 = %arg3 to %9 step %c1 iter_args(%arg7 = %probs, %arg8 = %new_max, %arg9 = %new_sum, %arg10 = %8) -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) {
      %14 = arith.addi %arg6, %c1 : index
      %15 = arith.muli %14, %c64 : index
      %16 = fa3.load_tile %arg1[%c0, %15, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
      %17 = fa3.qk %arg0, %16 : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
      %18 = arith.muli %arg6, %c64 : index
      %19 = fa3.load_tile %arg2[%c0, %18, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
      %20 = fa3.pv %arg7, %19, %arg10 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
      %21 = arith.addi %15, %c64 : index
      %22 = arith.cmpi sgt, %21, %arg5 : index
      %23 = scf.if %22 -> (tensor<64x64xf32>) {
        %25 = fa3.mask %17, %c0, %15, %c64, %arg5 : tensor<64x64xf32>
        scf.yield %25 : tensor<64x64xf32>
      } else {
        scf.yield %17 : tensor<64x64xf32>
      }
      %probs_2, %new_max_3, %new_sum_4, %correction_5 = fa3.online_softmax %23, %arg8, %arg9 {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
      %24 = fa3.rescale %20, %correction_5 : tensor<64x64xf32>, tensor<64xf32>
      scf.yield %probs_2, %new_max_3, %new_sum_4, %24 : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
    } {fa3.intra_wg_overlap, fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>}
    %11 = arith.muli %9, %c64 : index
    %12 = fa3.load_tile %arg2[%c0, %11, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %13 = fa3.pv %10#0, %12, %10#3 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    scf.yield %13, %10#1, %10#2 : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>
  } else {
    scf.yield %cst, %cst_0, %cst_1 : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>
  }
  %output, %lse = fa3.finalize %1#0, %1#1, %1#2 {scale = 1.250000e-01 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
  return %output, %lse : tensor<64x64xbf16>, tensor<64xf32>
}


// -----

// e4m3 tiles: the same turn, restarting at every tile of the grid.
// CHECK-LABEL: func.func @plain_e4m3
// CHECK: fa3.mma_turn -> (tensor<128x64xf32>) {
// CHECK-NEXT: fa3.qk
// CHECK: } {fa3.pingpong_turns = "per_tile", fa3.schedule = #fa3.schedule<
func.func @plain_e4m3(%q: tensor<128x64xf8E4M3FN>, %k: tensor<1x?x1x64xf8E4M3FN>, %v: tensor<1x?x1x64xf8E4M3FN>, %n: index, %descale: f32) -> tensor<128x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<128xf32>
  %r:3 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0, %l = %m0) -> (tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>) {
    %row = arith.muli %kb, %c64 : index
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xf8E4M3FN> -> tensor<64x64xf8E4M3FN>
    %vt = fa3.load_tile %v[%c0, %row, %c0] : tensor<1x?x1x64xf8E4M3FN> -> tensor<64x64xf8E4M3FN>
    %s = fa3.qk %q, %kt : tensor<128x64xf8E4M3FN>, tensor<64x64xf8E4M3FN> -> tensor<128x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %l descale %descale {exp2_scale = 1.0 : f32} : tensor<128x64xf32>, tensor<128xf32>
    %acc1 = fa3.rescale %acc, %alpha : tensor<128x64xf32>, tensor<128xf32>
    %acc2 = fa3.pv %p, %vt, %acc1 {probs_scale = 2.560000e+02 : f32} : tensor<128x64xf32>, tensor<64x64xf8E4M3FN>, tensor<128x64xf32>
    scf.yield %acc2, %m1, %l1 : tensor<128x64xf32>, tensor<128xf32>, tensor<128xf32>
  } {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>}
  return %r#0 : tensor<128x64xf32>
}

// -----

// A loop that already has its turns is left alone (the pass is idempotent).
#pingpong = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>

// CHECK-LABEL: func.func @already_turned
// CHECK-COUNT-1: fa3.mma_turn
// CHECK-NOT: fa3.mma_turn
func.func @already_turned(%q: tensor<128x64xbf16>, %k: tensor<1x?x1x64xbf16>, %n: index) -> tensor<128x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<128xf32>
  %r:2 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0) -> (tensor<128x64xf32>, tensor<128xf32>) {
    %kt = fa3.load_tile %k[%c0, %kb, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.mma_turn -> (tensor<128x64xf32>) {
      %s0 = fa3.qk %q, %kt : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      fa3.yield %s0 : tensor<128x64xf32>
    }
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %m {exp2_scale = 1.0 : f32} : tensor<128x64xf32>, tensor<128xf32>
    %acc1 = fa3.pv %p, %kt, %acc : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
    scf.yield %acc1, %m1 : tensor<128x64xf32>, tensor<128xf32>
  } {fa3.schedule = #pingpong}
  return %r#0 : tensor<128x64xf32>
}

// -----

// Only loads and index arithmetic may sit between a rotated loop's QKᵀ and
// PV.
#overlap = #fa3.schedule<block_m = 128, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>

func.func @softcap_in_turn(%q: tensor<128x64xbf16>, %k: tensor<1x?x1x64xbf16>, %n: index) -> tensor<128x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<128x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<128xf32>
  %r:2 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0) -> (tensor<128x64xf32>, tensor<128xf32>) {
    %kt = fa3.load_tile %k[%c0, %kb, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    // expected-error @+1 {{sits between the MMAs of one pingpong turn; fa3-pingpong allows only tile loads and index arithmetic there}}
    %sc = fa3.softcap %s {scale = 1.0 : f32, softcap = 30.0 : f32} : tensor<128x64xf32>
    %acc1 = fa3.pv %sc, %kt, %acc : tensor<128x64xf32>, tensor<64x64xbf16>, tensor<128x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %m {exp2_scale = 1.0 : f32} : tensor<128x64xf32>, tensor<128xf32>
    scf.yield %acc1, %m1 : tensor<128x64xf32>, tensor<128xf32>
  } {fa3.intra_wg_overlap, fa3.schedule = #overlap}
  return %r#0 : tensor<128x64xf32>
}
