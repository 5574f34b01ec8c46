// RUN: fa3-opt %s --split-input-file --fa3-lazy-rescale | FileCheck %s
// RUN: fa3-opt %s --split-input-file --fa3-lazy-rescale --convert-fa3-to-linalg | FileCheck %s --check-prefix=CPU

// The key loop fa3-fuse-softmax makes, marked with a schedule that asks for
// lazy rescaling with τ = 8: its softmax gets the threshold; the 16-bit
// fa3.pv is left as it is.
#lazy = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1, rescale_threshold = 8>

// CHECK-LABEL: func.func @keep_max
// CHECK: scf.for
// CHECK:   %[[P:.+]], %[[M1:.+]], %[[L1:.+]], %[[A:.+]] = fa3.online_softmax %{{.+}}, %{{.+}}, %{{.+}} {exp2_scale = 0.180336878 : f32, rescale_threshold = 8 : i64}
// CHECK:   %[[O:.+]] = fa3.rescale %{{.+}}, %[[A]]
// CHECK:   fa3.pv %[[P]], %{{.+}}, %[[O]] : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
// CHECK: } {fa3.schedule = #fa3.schedule<{{.*}}rescale_threshold = 8>}

// The CPU lowering keeps the old max where c · (m' − m) <= 8 and makes the
// correction exactly 1 there.
// CPU-LABEL: func.func @keep_max
// CPU: %[[STEP:.+]]:4 = linalg.generic
// CPU:   %[[GROWTH:.+]] = arith.mulf %{{.+}}, %{{.+}} : f32
// CPU:   %[[KEEP:.+]] = arith.cmpf ole, %[[GROWTH]], %{{.+}} : f32
// CPU:   %[[KEPT:.+]] = arith.select %[[KEEP]], %{{.+}}, %{{.+}} : f32
// CPU:   %[[ALPHA:.+]] = math.exp2
// CPU:   %[[ONE:.+]] = arith.select %[[KEEP]], %{{.+}}, %[[ALPHA]] : f32
// CPU:   linalg.yield %{{.+}}, %[[ONE]], %{{.+}}, %[[KEPT]] : f32, f32, f32, f32
func.func @keep_max(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %v: tensor<1x?x1x64xbf16>,
                    %n: index) -> (tensor<64x64xbf16>, tensor<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %l0 = arith.constant dense<1.000000e+00> : tensor<64xf32>
  %r:3 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0, %l = %l0) -> (tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>) {
    %row = arith.muli %kb, %c64 : index
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %vt = fa3.load_tile %v[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %l {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
    %acc1 = fa3.rescale %acc, %alpha : tensor<64x64xf32>, tensor<64xf32>
    %acc2 = fa3.pv %p, %vt, %acc1 : tensor<64x64xf32>, tensor<64x64xbf16>, tensor<64x64xf32>
    scf.yield %acc2, %m1, %l1 : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>
  } {fa3.schedule = #lazy}
  %o, %lse = fa3.finalize %r#0, %r#1, %r#2 {scale = 1.250000e-01 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
  return %o, %lse : tensor<64x64xbf16>, tensor<64xf32>
}

// -----

// FP8 with τ = 3: P reaches 2^3, so its e4m3 scale drops from 2^8 to 2^5.
// A loop without the field is left alone.
#lazy3 = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1, rescale_threshold = 3>
#eager = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>

// CHECK-LABEL: func.func @fp8
// CHECK: fa3.online_softmax %{{.+}} descale %{{.+}} {exp2_scale = 0.127517432 : f32, rescale_threshold = 3 : i64}
// CHECK: fa3.pv %{{.+}}, %{{.+}}, %{{.+}} {probs_scale = 3.200000e+01 : f32}
// CHECK: } {fa3.schedule = #fa3.schedule<{{.*}}rescale_threshold = 3>}
// CHECK: fa3.online_softmax %{{.+}} descale %{{.+}} {exp2_scale = 0.127517432 : f32} :
// CHECK: fa3.pv %{{.+}}, %{{.+}}, %{{.+}} {probs_scale = 2.560000e+02 : f32}
func.func @fp8(%q: tensor<64x128xf8E4M3FN>, %k: tensor<1x?x1x128xf8E4M3FN>, %v: tensor<1x?x1x128xf8E4M3FN>,
               %qk: f32, %n: index) -> (tensor<64x128xf32>, tensor<64x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %acc0 = arith.constant dense<0.000000e+00> : tensor<64x128xf32>
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %l0 = arith.constant dense<1.000000e+00> : tensor<64xf32>
  %r:3 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0, %l = %l0) -> (tensor<64x128xf32>, tensor<64xf32>, tensor<64xf32>) {
    %row = arith.muli %kb, %c128 : index
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x128xf8E4M3FN> -> tensor<128x128xf8E4M3FN>
    %vt = fa3.load_tile %v[%c0, %row, %c0] : tensor<1x?x1x128xf8E4M3FN> -> tensor<128x128xf8E4M3FN>
    %s = fa3.qk %q, %kt : tensor<64x128xf8E4M3FN>, tensor<128x128xf8E4M3FN> -> tensor<64x128xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %l descale %qk {exp2_scale = 0.127517432 : f32} : tensor<64x128xf32>, tensor<64xf32>
    %acc1 = fa3.rescale %acc, %alpha : tensor<64x128xf32>, tensor<64xf32>
    %acc2 = fa3.pv %p, %vt, %acc1 {probs_scale = 2.560000e+02 : f32} : tensor<64x128xf32>, tensor<128x128xf8E4M3FN>, tensor<64x128xf32>
    scf.yield %acc2, %m1, %l1 : tensor<64x128xf32>, tensor<64xf32>, tensor<64xf32>
  } {fa3.schedule = #lazy3}
  %r2:3 = scf.for %kb = %c0 to %n step %c1 iter_args(%acc = %acc0, %m = %m0, %l = %l0) -> (tensor<64x128xf32>, tensor<64xf32>, tensor<64xf32>) {
    %row = arith.muli %kb, %c128 : index
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x128xf8E4M3FN> -> tensor<128x128xf8E4M3FN>
    %vt = fa3.load_tile %v[%c0, %row, %c0] : tensor<1x?x1x128xf8E4M3FN> -> tensor<128x128xf8E4M3FN>
    %s = fa3.qk %q, %kt : tensor<64x128xf8E4M3FN>, tensor<128x128xf8E4M3FN> -> tensor<64x128xf32>
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m, %l descale %qk {exp2_scale = 0.127517432 : f32} : tensor<64x128xf32>, tensor<64xf32>
    %acc1 = fa3.rescale %acc, %alpha : tensor<64x128xf32>, tensor<64xf32>
    %acc2 = fa3.pv %p, %vt, %acc1 {probs_scale = 2.560000e+02 : f32} : tensor<64x128xf32>, tensor<128x128xf8E4M3FN>, tensor<64x128xf32>
    scf.yield %acc2, %m1, %l1 : tensor<64x128xf32>, tensor<64xf32>, tensor<64xf32>
  } {fa3.schedule = #eager}
  return %r#0, %r2#0 : tensor<64x128xf32>, tensor<64x128xf32>
}
