// RUN: fa3-opt %s --fa3-select-schedule --fa3-tile=grid=true --fa3-serialize-grid --canonicalize --cse | FileCheck %s

// The grid fa3-tile{grid=true} makes for a packed batch (x over query
// blocks, y over heads, z over sequences, outputs filled) becomes three
// nested scf.for loops over the same bounds carrying O and the LSE; the
// parallel stores become fa3.store_tile / fa3.store_stats of the same tiles
// at the same rows and limits into the carried tensors.
// CHECK-LABEL: func.func @varlen
// CHECK: %[[O0:.+]] = linalg.fill
// CHECK: %[[L0:.+]] = linalg.fill
// CHECK: %[[B:.+]] = arith.subi
// CHECK: %[[X:.+]] = arith.ceildivui
// CHECK-NOT: scf.forall
// CHECK: scf.for %[[BX:.+]] = %c0 to %[[X]] step %c1 iter_args(%[[OX:.+]] = %[[O0]], %[[LX:.+]] = %[[L0]])
// CHECK: scf.for %[[H:.+]] = %c0 to %c4 step %c1 iter_args(%[[OH:.+]] = %[[OX]], %[[LH:.+]] = %[[LX]])
// CHECK: scf.for %[[S:.+]] = %c0 to %[[B]] step %c1 iter_args(%[[OS:.+]] = %[[OH]], %[[LS:.+]] = %[[LH]])
// CHECK: %[[Q:.+]] = fa3.load_tile %{{.+}}[%c0, %[[ROW:.+]], %[[H]]] limit %[[END:.+]] :
// CHECK: %[[OT:.+]], %[[LT:.+]] = fa3.attention_block %[[Q]]
// CHECK: %[[O1:.+]] = fa3.store_tile %[[OT]] into %[[OS]][%c0, %[[ROW]], %[[H]]] limit %[[END]]
// CHECK: %[[L1:.+]] = fa3.store_stats %[[LT]] into %[[LS]][%c0, %[[H]], %[[ROW]]] limit %[[END]]
// CHECK: scf.yield %[[O1]], %[[L1]]
// CHECK-NOT: scf.forall
func.func @varlen(%q: tensor<?x4x32xf32>, %k: tensor<?x2x32xf32>, %v: tensor<?x2x32xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x32xf32>, tensor<4x?xf32>) {
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {causal}
      : (tensor<?x4x32xf32>, tensor<?x2x32xf32>, tensor<?x2x32xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x32xf32>, tensor<4x?xf32>)
  return %o, %lse : tensor<?x4x32xf32>, tensor<4x?xf32>
}
