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

// Store operands defined above the grid (here the tiles, the batch index and
// the limit) are used as they are: none is dropped.
// CHECK-LABEL: func.func @operands_above_the_grid
// CHECK-SAME: (%[[T:[^:]+]]: tensor<64x32xf32>, %[[S:[^:]+]]: tensor<64xf32>, %{{[^:]+}}: tensor<1x?x2x32xf32>, %{{[^:]+}}: tensor<1x2x?xf32>, %[[END:[^:]+]]: index,
// CHECK: scf.for %[[X:.+]] = %c0 to
// CHECK: scf.for %[[H:.+]] = %c0 to %c2
// CHECK: %[[ROW:.+]] = arith.muli %[[X]], %c64
// CHECK: fa3.store_tile %[[T]] into %{{.+}}[%c0, %[[ROW]], %[[H]]] limit %[[END]] :
// CHECK: fa3.store_stats %[[S]] into %{{.+}}[%c0, %[[H]], %[[ROW]]] limit %[[END]] :
func.func @operands_above_the_grid(%t: tensor<64x32xf32>, %s: tensor<64xf32>, %o: tensor<1x?x2x32xf32>, %l: tensor<1x2x?xf32>, %end: index, %n: index) -> (tensor<1x?x2x32xf32>, tensor<1x2x?xf32>) {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %r:2 = scf.forall (%x, %h) in (%n, 2) shared_outs(%ao = %o, %al = %l) -> (tensor<1x?x2x32xf32>, tensor<1x2x?xf32>) {
    %row = arith.muli %x, %c64 : index
    scf.forall.in_parallel {
      fa3.parallel_store_tile %t into %ao[%c0, %row, %h] limit %end : tensor<64x32xf32> into tensor<1x?x2x32xf32>
      fa3.parallel_store_stats %s into %al[%c0, %h, %row] limit %end : tensor<64xf32> into tensor<1x2x?xf32>
    }
  }
  return %r#0, %r#1 : tensor<1x?x2x32xf32>, tensor<1x2x?xf32>
}
