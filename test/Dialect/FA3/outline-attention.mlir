// RUN: fa3-opt %s --fa3-outline-attention | FileCheck %s
// RUN: fa3-opt %s --fa3-outline-attention --fa3-cpu-pipeline | FileCheck %s --check-prefix=CPU

// Two attentions of one function: one function each, numbered in order; the
// results flow through the calls as they flowed from the ops.
// CHECK-LABEL: func.func @two(
// CHECK-SAME: %[[Q:.+]]: tensor<1x?x4x64xbf16>, %[[K:.+]]: tensor<1x?x2x64xbf16>, %[[V:.+]]: tensor<1x?x2x64xbf16>
// CHECK: %[[A:.+]]:2 = call @two_attention_0(%[[Q]], %[[K]], %[[V]])
// CHECK: %[[B:.+]]:2 = call @two_attention_1(%[[A]]#0, %[[K]], %[[V]])
// CHECK: return %[[B]]#0, %[[A]]#1
// CHECK-NOT: fa3.attention
// CHECK: }
func.func @two(%q: tensor<1x?x4x64xbf16>, %k: tensor<1x?x2x64xbf16>, %v: tensor<1x?x2x64xbf16>)
    -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, scale = 0.125 : f32}
      : (tensor<1x?x4x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>)
  %o2, %lse2 = fa3.attention %o, %k, %v {scale = 0.5 : f32}
      : (tensor<1x?x4x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>)
  return %o2, %lse : tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>
}

// The outlined functions: the op alone, its attributes kept, public.
// CHECK-LABEL: func.func @two_attention_0(
// CHECK-SAME: %[[Q0:[^:]+]]: tensor<1x?x4x64xbf16>, %[[K0:[^:]+]]: tensor<1x?x2x64xbf16>, %[[V0:[^:]+]]: tensor<1x?x2x64xbf16>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>)
// CHECK-NEXT: %[[O0:.+]], %[[L0:.+]] = fa3.attention %[[Q0]], %[[K0]], %[[V0]] {causal, scale = 1.250000e-01 : f32}
// CHECK-NEXT: return %[[O0]], %[[L0]]
// CHECK-LABEL: func.func @two_attention_1(
// CHECK-NEXT: fa3.attention {{.+}} {scale = 5.000000e-01 : f32}

// A name already in use is not reused.
// CHECK-LABEL: func.func @clash(
// CHECK: call @clash_attention_0_0(
// CHECK-LABEL: func.func @clash_attention_0_0(
// CHECK-NEXT: fa3.attention
func.func @clash(%q: tensor<1x8x1x64xf32>, %k: tensor<1x8x1x64xf32>, %v: tensor<1x8x1x64xf32>) -> tensor<1x8x1x64xf32> {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x8x1x64xf32>, tensor<1x8x1x64xf32>, tensor<1x8x1x64xf32>) -> (tensor<1x8x1x64xf32>, tensor<1x1x8xf32>)
  return %o : tensor<1x8x1x64xf32>
}
// CHECK-LABEL: func.func @clash_attention_0(
// CHECK-NEXT: return
func.func @clash_attention_0(%x: tensor<1x8x1x64xf32>) -> tensor<1x8x1x64xf32> {
  return %x : tensor<1x8x1x64xf32>
}

// The calls and the outlined functions lower together.
// CPU-DAG: llvm.func @two(
// CPU-DAG: llvm.func @two_attention_0(
// CPU-DAG: llvm.call @two_attention_0(
// CPU-NOT: fa3.
