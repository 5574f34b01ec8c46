// RUN: fa3-opt %s --convert-fa3-to-linalg | FileCheck %s

// fa3.dropout on the CPU: one linalg.generic whose entries each run the
// Philox4x32-10 call of their 2x4 group (10 rounds of two 32x32->64-bit
// products), pick their word by (row / 8) % 2 and (col / 8) % 2 and its
// 16-bit half by col % 2, and keep the probability times 1 / (1 - p) when
// that half is >= floor(p · 2^16). p = 0.25: threshold 2^14 = 16384, scale
// 4/3 = 1.33333337 in f32.

// CHECK-LABEL: func.func @dropout
// CHECK-SAME: (%[[P:.+]]: tensor<64x32xf32>, %[[RNG:.+]]: tensor<2xi64>, %[[S:.+]]: index, %[[Q0:.+]]: index, %[[K0:.+]]: index)
// CHECK-DAG: %[[SEED:.+]] = tensor.extract %[[RNG]][%{{.+}}] : tensor<2xi64>
// CHECK-DAG: %[[KLO:.+]] = arith.trunci %[[SEED]] : i64 to i32
// CHECK-DAG: %[[THRESHOLD:.+]] = arith.constant 16384 : i32
// CHECK: linalg.generic {{.+}} ins(%[[P]] : tensor<64x32xf32>)
// CHECK: ^bb0(%[[X:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[I:.+]] = linalg.index 0 : index
// CHECK: arith.addi %[[Q0]], %[[I]] : index
// CHECK-COUNT-20: arith.mului_extended
// CHECK-NOT: arith.mului_extended
// CHECK: %[[KEEP:.+]] = arith.cmpi uge, %[[WORD:.+]], %[[THRESHOLD]] : i32
// CHECK: %[[SCALED:.+]] = arith.mulf %[[X]], %{{.+}} : f32
// CHECK: %[[R:.+]] = arith.select %[[KEEP]], %[[SCALED]], %{{.+}} : f32
// CHECK: linalg.yield %[[R]] : f32
func.func @dropout(%p: tensor<64x32xf32>, %rng: tensor<2xi64>, %s: index, %q0: index, %k0: index) -> tensor<64x32xf32> {
  %d = fa3.dropout %p, %rng, %s, %q0, %k0 {p = 0.25 : f32} : tensor<64x32xf32>, tensor<2xi64>
  return %d : tensor<64x32xf32>
}
