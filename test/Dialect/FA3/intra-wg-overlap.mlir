// RUN: fa3-opt %s --split-input-file --fa3-intra-wg-overlap --verify-diagnostics | FileCheck %s

// The key loop fa3-fuse-softmax makes (K and V loads, S = Q Kᵀ, the
// boundary mask, the online softmax, the rescale and O += P V), marked with
// a schedule that asks for intra-warpgroup overlap.
#overlap = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>

// CHECK-LABEL: func.func @rotate
// CHECK-SAME: (%[[Q:.+]]: tensor<64x64xbf16>, %[[K:.+]]: tensor<1x?x1x64xbf16>, %[[V:.+]]: tensor<1x?x1x64xbf16>, %[[LO:.+]]: index, %[[HI:.+]]: index, %[[SK:.+]]: index)
// CHECK-DAG: %[[ACC0:.+]] = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
// CHECK-DAG: %[[M0:.+]] = arith.constant dense<0xFF800000> : tensor<64xf32>
// CHECK-DAG: %[[L0:.+]] = arith.constant dense<1.000000e+00> : tensor<64xf32>
// Everything runs under one test for a non-empty key range.
// CHECK: %[[ANY:.+]] = arith.cmpi slt, %[[LO]], %[[HI]] : index
// CHECK: %[[R:.+]]:3 = scf.if %[[ANY]] -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>) {
// The prologue: stage A (K load, QKᵀ, mask, softmax, rescale) of block lo.
// CHECK:   %[[KROW0:.+]] = arith.muli %[[LO]], %c64 : index
// CHECK:   %[[KT0:.+]] = fa3.load_tile %[[K]][%c0, %[[KROW0]], %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
// CHECK:   %[[S0:.+]] = fa3.qk %[[Q]], %[[KT0]]
// CHECK:   %[[SM0:.+]] = scf.if %{{.+}} -> (tensor<64x64xf32>) {
// CHECK:     fa3.mask %[[S0]], %c0, %[[KROW0]], %c64, %[[SK]]
// CHECK:   %[[P0:.+]], %[[MX0:.+]], %[[SUM0:.+]], %[[A0:.+]] = fa3.online_softmax %[[SM0]], %[[M0]], %[[L0]]
// CHECK:   %[[O0:.+]] = fa3.rescale %[[ACC0]], %[[A0]]
// CHECK-NOT: fa3.pv
// The rotated loop over blocks lo .. hi - 2 carries P, the max, the sum and
// the rescaled O; its body is stage A of block j + 1 with stage B (the V
// load and fa3.pv) of block j right after the QKᵀ.
// CHECK:   %[[LAST:.+]] = arith.subi %[[HI]], %c1 : index
// CHECK:   %[[LOOP:.+]]:4 = scf.for %[[J:.+]] = %[[LO]] to %[[LAST]] step %c1 iter_args(%[[P:.+]] = %[[P0]], %[[M:.+]] = %[[MX0]], %[[L:.+]] = %[[SUM0]], %[[O:.+]] = %[[O0]]) -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) {
// CHECK:     %[[J1:.+]] = arith.addi %[[J]], %c1 : index
// CHECK:     %[[KROW:.+]] = arith.muli %[[J1]], %c64 : index
// CHECK:     %[[KT:.+]] = fa3.load_tile %[[K]][%c0, %[[KROW]], %c0]
// CHECK:     %[[S:.+]] = fa3.qk %[[Q]], %[[KT]]
// CHECK-NEXT: %[[VROW:.+]] = arith.muli %[[J]], %c64 : index
// CHECK-NEXT: %[[VT:.+]] = fa3.load_tile %[[V]][%c0, %[[VROW]], %c0]
// CHECK-NEXT: %[[O1:.+]] = fa3.pv %[[P]], %[[VT]], %[[O]]
// CHECK:     fa3.mask %[[S]], %c0, %[[KROW]], %c64, %[[SK]]
// CHECK:     %[[P1:.+]], %[[M1:.+]], %[[L1:.+]], %[[A1:.+]] = fa3.online_softmax %{{.+}}, %[[M]], %[[L]]
// CHECK:     %[[O2:.+]] = fa3.rescale %[[O1]], %[[A1]]
// CHECK:     scf.yield %[[P1]], %[[M1]], %[[L1]], %[[O2]]
// CHECK:   } {fa3.intra_wg_overlap, fa3.schedule = #fa3.schedule<
// The epilogue: stage B of block hi - 1.
// CHECK:   %[[VROWN:.+]] = arith.muli %[[LAST]], %c64 : index
// CHECK:   %[[VTN:.+]] = fa3.load_tile %[[V]][%c0, %[[VROWN]], %c0]
// CHECK:   %[[ON:.+]] = fa3.pv %[[LOOP]]#0, %[[VTN]], %[[LOOP]]#3
// CHECK:   scf.yield %[[ON]], %[[LOOP]]#1, %[[LOOP]]#2
// CHECK: } else {
// CHECK:   scf.yield %[[ACC0]], %[[M0]], %[[L0]]
// CHECK: }
// CHECK: fa3.finalize %[[R]]#0, %[[R]]#1, %[[R]]#2
// CHECK-NOT: scf.for
func.func @rotate(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %v: tensor<1x?x1x64xbf16>,
                  %lo: index, %hi: index, %sk: index) -> (tensor<64x64xbf16>, tensor<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %l0 = arith.constant dense<1.000000e+00> : tensor<64xf32>
  %r:3 = scf.for %kb = %lo to %hi step %c1 iter_args(%acc = %acc0, %m = %m0, %l = %l0) -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>) {
    %row = arith.muli %kb, %c64 : index
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %vt = fa3.load_tile %v[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %end = arith.addi %row, %c64 : index
    %tail = arith.cmpi sgt, %end, %sk : index
    %sm = scf.if %tail -> (tensor<64x64xf32>) {
      %masked = fa3.mask %s, %c0, %row, %c64, %sk : tensor<64x64xf32>
      scf.yield %masked : tensor<64x64xf32>
    } else {
      scf.yield %s : tensor<64x64xf32>
    }
    %p, %m1, %l1, %alpha = fa3.online_softmax %sm, %m, %l {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %acc1 = fa3.rescale %acc, %alpha : tensor<64x64xf32>, tensor<64xf32>
    %acc2 = fa3.pv %p, %vt, %acc1 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    scf.yield %acc2, %m1, %l1 : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>
  } {fa3.schedule = #overlap}
  %o, %lse = fa3.finalize %r#0, %r#1, %r#2 {scale = 1.250000e-01 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
  return %o, %lse : tensor<64x64xbf16>, tensor<64xf32>
}

// -----

// A loop whose schedule does not ask for the overlap, and a loop already
// rotated, are left alone.
#no_overlap = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>
#overlap = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>

// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: scf.if
// CHECK: scf.for
// CHECK: } {fa3.schedule =
// CHECK: scf.for
// CHECK: } {fa3.intra_wg_overlap, fa3.schedule =
func.func @left_alone(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %n: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %r:2 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0) -> (tensor<64x64xf32>, tensor<64xf32>) {
    %kt = fa3.load_tile %k[%c0, %kb, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %m {exp2_scale = 1.0 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %acc1 = fa3.pv %p, %kt, %acc : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    scf.yield %acc1, %m1 : tensor<64x64xf32>, tensor<64xf32>
  } {fa3.schedule = #no_overlap}
  %r2:2 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %r#0, %m = %r#1) -> (tensor<64x64xf32>, tensor<64xf32>) {
    %kt = fa3.load_tile %k[%c0, %kb, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %m {exp2_scale = 1.0 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %acc1 = fa3.pv %p, %kt, %acc : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    scf.yield %acc1, %m1 : tensor<64x64xf32>, tensor<64xf32>
  } {fa3.intra_wg_overlap, fa3.schedule = #overlap}
  return %r2#0 : tensor<64x64xf32>
}

// -----

#overlap = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>

func.func @step_two(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %n: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  // expected-error @+1 {{cannot be rotated by fa3-intra-wg-overlap: its step must be the constant 1}}
  %r:2 = scf.for %kb = %c0 to %n step %c2 iter_args(%acc = %acc0, %m = %m0) -> (tensor<64x64xf32>, tensor<64xf32>) {
    %kt = fa3.load_tile %k[%c0, %kb, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %m {exp2_scale = 1.0 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %acc1 = fa3.pv %p, %kt, %acc : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    scf.yield %acc1, %m1 : tensor<64x64xf32>, tensor<64xf32>
  } {fa3.schedule = #overlap}
  return %r#0 : tensor<64x64xf32>
}

// -----

#overlap = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>

// The value tile read at a row that the loop carries: stage B would need
// stage A's value of the same block.
func.func @value_reads_carried(%q: tensor<64x64xbf16>, %v: tensor<1x?x1x64xbf16>, %n: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %r:3 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0, %row = %c0) -> (tensor<64x64xf32>, tensor<64xf32>, index) {
    %kt = fa3.load_tile %v[%c0, %kb, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    // expected-error @+1 {{cannot be rotated by fa3-intra-wg-overlap: the value tile must not depend on the loop's carried values}}
    %vt = fa3.load_tile %v[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %m {exp2_scale = 1.0 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %acc1 = fa3.pv %p, %vt, %acc : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    %next = arith.addi %row, %c1 : index
    scf.yield %acc1, %m1, %next : tensor<64x64xf32>, tensor<64xf32>, index
  } {fa3.schedule = #overlap}
  return %r#0 : tensor<64x64xf32>
}

// -----

#overlap = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>

func.func @two_pvs(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %n: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  // expected-error @+1 {{cannot be rotated by fa3-intra-wg-overlap: its body has more than one fa3.pv}}
  %r:2 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0) -> (tensor<64x64xf32>, tensor<64xf32>) {
    %kt = fa3.load_tile %k[%c0, %kb, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %m {exp2_scale = 1.0 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %acc1 = fa3.pv %p, %kt, %acc : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    %acc2 = fa3.pv %p, %kt, %acc1 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    scf.yield %acc2, %m1 : tensor<64x64xf32>, tensor<64xf32>
  } {fa3.schedule = #overlap}
  return %r#0 : tensor<64x64xf32>
}
