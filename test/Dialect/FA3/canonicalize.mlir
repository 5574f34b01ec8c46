// RUN: fa3-opt %s --canonicalize --split-input-file | FileCheck %s

// A window of (-1, -1) bounds nothing.
// CHECK-LABEL: func.func @drop_unbounded_window
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} : (
// CHECK-NOT: window
func.func @drop_unbounded_window(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: -1, -1>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// -----

// causal already implies right = 0; (-1, 0) restates it.
// CHECK-LABEL: func.func @drop_causal_window
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {causal} : (
// CHECK-NOT: window
func.func @drop_causal_window(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, window = array<i64: -1, 0>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// -----

// causal with (-1, -1) is causal too.
// CHECK-LABEL: func.func @drop_causal_unbounded_window
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {causal} : (
func.func @drop_causal_unbounded_window(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, window = array<i64: -1, -1>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// -----

// A softcap of 0 is off.
// CHECK-LABEL: func.func @drop_zero_softcap
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {scale = 1.250000e-01 : f32} : (
// CHECK-NOT: softcap
func.func @drop_zero_softcap(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {scale = 0.125 : f32, softcap = 0.0 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// -----

// Both at once.
// CHECK-LABEL: func.func @drop_both
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} : (
func.func @drop_both(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: -1, -1>, softcap = 0.0 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// -----

// Windows and softcaps that change the result stay.
// CHECK-LABEL: func.func @keep_meaningful
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {causal, softcap = 3.000000e+01 : f32, window = array<i64: 128, 0>} : (
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {window = array<i64: -1, 0>} : (
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {window = array<i64: 64, -1>} : (
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {causal, window = array<i64: 32, -1>} : (
func.func @keep_meaningful(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x?x8x64xf16>, tensor<2x?x8x64xf16>, tensor<2x?x8x64xf16>) {
  %o0, %lse0 = fa3.attention %q, %k, %v {causal, window = array<i64: 128, 0>, softcap = 30.0 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  // Without causal, right = 0 is a real bound.
  %o1, %lse1 = fa3.attention %q, %k, %v {window = array<i64: -1, 0>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  %o2, %lse2 = fa3.attention %q, %k, %v {window = array<i64: 64, -1>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  %o3, %lse3 = fa3.attention %q, %k, %v {causal, window = array<i64: 32, -1>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o0, %o1, %o2, %o3 : tensor<2x?x8x64xf16>, tensor<2x?x8x64xf16>, tensor<2x?x8x64xf16>, tensor<2x?x8x64xf16>
}

// -----

// The backward gets the same clean-up.
// CHECK-LABEL: func.func @grad_drop
// CHECK: fa3.attention_grad %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {causal} : (
func.func @grad_drop(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, window = array<i64: -1, 0>, softcap = 0.0 : f32} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>
}

// -----

// fa3.attention is Pure: an unused one folds away.
// CHECK-LABEL: func.func @dead_attention
// CHECK-NOT: fa3.attention
// CHECK: return
func.func @dead_attention(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}
