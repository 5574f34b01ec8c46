// RUN: fa3-opt %s --fa3-select-schedule=target=sm_90a --convert-fa3-to-hopper -split-input-file -verify-diagnostics
// RUN: not fa3-opt %s --fa3-hopper-pipeline -split-input-file 2>&1 | FileCheck %s

// The inference ops without Hopper kernels: the backend says so instead of
// leaving them in the IR (the CPU pipeline runs them).

// CHECK: error: 'fa3.attention_varlen' op has no Hopper kernel yet; the CPU pipeline (fa3-cpu-pipeline) runs it
func.func @varlen(%q: tensor<?x4x64xbf16>, %k: tensor<?x2x64xbf16>, %v: tensor<?x2x64xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op has no Hopper kernel yet; the CPU pipeline (fa3-cpu-pipeline) runs it}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {causal}
      : (tensor<?x4x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>)
  return %o, %lse : tensor<?x4x64xbf16>, tensor<4x?xf32>
}

// -----

// CHECK: error: 'fa3.kvcache_append' op has no Hopper kernel yet
func.func @append(%kc: tensor<?x?x2x64xf16>, %vc: tensor<?x?x2x64xf16>, %k: tensor<?x?x2x64xf16>, %v: tensor<?x?x2x64xf16>, %lens: tensor<?xi32>) -> (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.kvcache_append' op has no Hopper kernel yet}}
  %a, %b = fa3.kvcache_append %kc, %vc, %k, %v, %lens
      : (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?xi32>) -> (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>)
  return %a, %b : tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>
}
