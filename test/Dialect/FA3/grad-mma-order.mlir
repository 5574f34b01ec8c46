// RUN: fa3-opt %s --split-input-file --fa3-grad-mma-order --verify-diagnostics | FileCheck %s
// RUN: fa3-opt %s --split-input-file --fa3-grad-mma-order --fa3-grad-mma-order --verify-diagnostics | FileCheck %s

// A backward step as fa3-tile writes it (Sᵀ, Pᵀ, dV, dPᵀ, dSᵀ, dK, dQ)
// goes into FlashAttention-3's order: dPᵀ's product right after Sᵀ's, dV
// after dSᵀ, then dQ, then dK before dQ is added. Running the pass twice
// changes nothing (second RUN line). fa3-cpu-pipeline runs the pass too,
// so the float64 backward tests check that the order computes the same.

// CHECK-LABEL: func.func @step
// CHECK: %[[S:.+]] = fa3.qk %[[Q:[^,]+]], %[[K:[^ ]+]] :
// CHECK-NEXT: %[[DP:.+]] = fa3.qk %[[DO:[^,]+]], %{{[^ ]+}} :
// CHECK-NEXT: %[[P:.+]] = fa3.recompute_probs %[[S]],
// CHECK-NEXT: %[[DS:.+]] = fa3.softmax_grad %[[P]], %[[DP]],
// CHECK: %[[DV:.+]] = fa3.mma_tn %[[P]], %[[DO]],
// CHECK-NEXT: %[[DQ:.+]] = fa3.pv %[[DS]], %[[K]],
// CHECK-NEXT: %[[DK:.+]] = fa3.mma_tn %[[DS]], %[[Q]],
// CHECK-NEXT: fa3.accumulate_tile %[[DQ]]
// CHECK-NEXT: scf.yield %[[DK]], %[[DV]]
func.func @step(%qs: tensor<1x?x4x64xbf16>, %dos: tensor<1x?x4x64xbf16>, %k: tensor<64x64xbf16>, %v: tensor<64x64xbf16>, %lse: tensor<1x4x?xf32>, %delta: tensor<1x4x?xf32>, %dq: memref<1x?x4x64xf32>, %n: index) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %r:2 = scf.for %qb = %c0 to %n step %c1 iter_args(%dk0 = %zero, %dv0 = %zero) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
    %row = arith.muli %qb, %c64 : index
    %q = fa3.load_tile %qs[%c0, %row, %c0] : tensor<1x?x4x64xbf16> -> tensor<64x64xbf16>
    %do = fa3.load_tile %dos[%c0, %row, %c0] : tensor<1x?x4x64xbf16> -> tensor<64x64xbf16>
    %l = fa3.load_stats %lse[%c0, %c0, %row] : tensor<1x4x?xf32> -> tensor<64xf32>
    %d = fa3.load_stats %delta[%c0, %c0, %row] : tensor<1x4x?xf32> -> tensor<64xf32>
    %s = fa3.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %p = fa3.recompute_probs %s, %l {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %dv = fa3.mma_tn %p, %do, %dv0 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    %dp = fa3.qk %do, %v : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %ds = fa3.softmax_grad %p, %dp, %d : tensor<64x64xf32>, tensor<64xf32>
    %dk = fa3.mma_tn %ds, %q, %dk0 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    %dqt = fa3.pv %ds, %k, %zero : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    fa3.accumulate_tile %dqt into %dq[%c0, %row, %c0] : tensor<64x64xf32> into memref<1x?x4x64xf32>
    scf.yield %dk, %dv : tensor<64x64xf32>, tensor<64x64xf32>
  }
  return %r#0, %r#1 : tensor<64x64xf32>, tensor<64x64xf32>
}

// -----

// With a softcap and dropout: dPᵀ's product moves above the softcap, its
// dropout stays after Pᵀ's, and dV (reading Pᵀ ∘ Z) and dK (reading dSᵀ
// through softcap's derivative) go around dQ.

// CHECK-LABEL: func.func @softcap_dropout
// CHECK: %[[S:.+]] = fa3.qk
// CHECK-NEXT: %[[DP:.+]] = fa3.qk
// CHECK-NEXT: %[[C:.+]] = fa3.softcap %[[S]]
// CHECK-NEXT: %[[P:.+]] = fa3.recompute_probs %[[C]],
// CHECK-NEXT: %[[PD:.+]] = fa3.dropout %[[P]],
// CHECK-NEXT: %[[DPD:.+]] = fa3.dropout %[[DP]],
// CHECK-NEXT: %[[DS0:.+]] = fa3.softmax_grad %[[P]], %[[DPD]],
// CHECK-NEXT: %[[DS:.+]] = fa3.softcap_grad %[[DS0]], %[[C]]
// CHECK-NEXT: %[[DV:.+]] = fa3.mma_tn %[[PD]],
// CHECK-NEXT: %[[DQ:.+]] = fa3.pv %[[DS]],
// CHECK-NEXT: %[[DK:.+]] = fa3.mma_tn %[[DS]],
// CHECK-NEXT: return %[[DQ]], %[[DK]], %[[DV]]
func.func @softcap_dropout(%q: tensor<64x64xbf16>, %do: tensor<64x64xbf16>, %k: tensor<64x64xbf16>, %v: tensor<64x64xbf16>, %l: tensor<64xf32>, %d: tensor<64xf32>, %rng: tensor<2xi64>, %stream: index, %q0: index, %k0: index, %dk0: tensor<64x64xf32>, %dv0: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = fa3.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %c = fa3.softcap %s {scale = 0.125 : f32, softcap = 30.0 : f32} : tensor<64x64xf32>
  %p = fa3.recompute_probs %c, %l {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
  %pd = fa3.dropout %p, %rng, %stream, %q0, %k0 {p = 0.1 : f32} : tensor<64x64xf32>, tensor<2xi64>
  %dv = fa3.mma_tn %pd, %do, %dv0 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
  %dp = fa3.qk %do, %v : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %dpd = fa3.dropout %dp, %rng, %stream, %q0, %k0 {p = 0.1 : f32} : tensor<64x64xf32>, tensor<2xi64>
  %ds0 = fa3.softmax_grad %p, %dpd, %d : tensor<64x64xf32>, tensor<64xf32>
  %ds = fa3.softcap_grad %ds0, %c {scale = 0.125 : f32, softcap = 30.0 : f32} : tensor<64x64xf32>
  %dk = fa3.mma_tn %ds, %q, %dk0 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
  %dq = fa3.pv %ds, %k, %zero : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
  return %dq, %dk, %dv : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
}

// -----

// dPᵀ's product cannot issue with Sᵀ's when its dO tile is loaded after Sᵀ.
func.func @late_operand(%qs: tensor<1x?x4x64xbf16>, %q: tensor<64x64xbf16>, %k: tensor<64x64xbf16>, %v: tensor<64x64xbf16>, %l: tensor<64xf32>, %d: tensor<64xf32>, %dk0: tensor<64x64xf32>, %dv0: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %c0 = arith.constant 0 : index
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = fa3.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %do = fa3.load_tile %qs[%c0, %c0, %c0] : tensor<1x?x4x64xbf16> -> tensor<64x64xbf16>
  %p = fa3.recompute_probs %s, %l {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
  %dv = fa3.mma_tn %p, %do, %dv0 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
  %dp = fa3.qk %do, %v : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  // expected-error @below {{'fa3.softmax_grad' op is not in a backward step fa3-grad-mma-order can order: dP's fa3.qk reads a value computed after Sᵀ's}}
  %ds = fa3.softmax_grad %p, %dp, %d : tensor<64x64xf32>, tensor<64xf32>
  %dk = fa3.mma_tn %ds, %q, %dk0 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
  %dq = fa3.pv %ds, %k, %zero : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
  return %dq, %dk, %dv : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
}

// -----

// A step without dK's product is not the backward's.
func.func @no_dk(%q: tensor<64x64xbf16>, %do: tensor<64x64xbf16>, %k: tensor<64x64xbf16>, %v: tensor<64x64xbf16>, %l: tensor<64xf32>, %d: tensor<64xf32>, %dv0: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = fa3.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %p = fa3.recompute_probs %s, %l {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
  %dv = fa3.mma_tn %p, %do, %dv0 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
  %dp = fa3.qk %do, %v : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  // expected-error @below {{'fa3.softmax_grad' op is not in a backward step fa3-grad-mma-order can order: expected the fa3.pv of dQ and the fa3.mma_tn of dK and dV in its block}}
  %ds = fa3.softmax_grad %p, %dp, %d : tensor<64x64xf32>, tensor<64xf32>
  %dq = fa3.pv %ds, %k, %zero : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
  return %dq, %dv : tensor<64x64xf32>, tensor<64x64xf32>
}
