// RUN: fa3-opt %s --fa3-select-schedule=target=sm_90a --convert-fa3-to-hopper -split-input-file -verify-diagnostics
// RUN: not fa3-opt %s --fa3-hopper-pipeline -split-input-file 2>&1 | FileCheck %s

// The inference ops and forms without Hopper kernels: the backend says so
// instead of leaving them in the IR (the CPU pipeline runs them).

// CHECK: error: 'fa3.attention_varlen' op num_splits = 2: the Hopper varlen forward has no split-KV form; use num_splits = 1
func.func @varlen_splits(%q: tensor<?x4x64xbf16>, %k: tensor<?x2x64xbf16>, %v: tensor<?x2x64xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op num_splits = 2: the Hopper varlen forward has no split-KV form; use num_splits = 1}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {num_splits = 2 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>)
  return %o, %lse : tensor<?x4x64xbf16>, tensor<4x?xf32>
}

// -----

// CHECK: error: 'fa3.attention_varlen' op persistent = true: the Hopper varlen forward runs one CTA per (query block, head, sequence)
func.func @varlen_persistent(%q: tensor<?x4x64xbf16>, %k: tensor<?x2x64xbf16>, %v: tensor<?x2x64xbf16>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op persistent = true: the Hopper varlen forward runs one CTA per (query block, head, sequence)}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = true, cluster = 1>}
      : (tensor<?x4x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>)
  return %o, %lse : tensor<?x4x64xbf16>, tensor<4x?xf32>
}

// -----

// The varlen backward has the dense backward's head dims.
// CHECK: error: 'fa3.attention_varlen_grad' op the Hopper backward supports head dims 64, 128 and 256 (the CPU pipeline takes any), got 96
func.func @varlen_grad(%do: tensor<?x4x96xbf16>, %q: tensor<?x4x96xbf16>, %k: tensor<?x2x96xbf16>, %v: tensor<?x2x96xbf16>, %o: tensor<?x4x96xbf16>, %lse: tensor<4x?xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x96xbf16>, tensor<?x2x96xbf16>, tensor<?x2x96xbf16>) {
  // expected-error @+1 {{'fa3.attention_varlen_grad' op the Hopper backward supports head dims 64, 128 and 256 (the CPU pipeline takes any), got 96}}
  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk
      : (tensor<?x4x96xbf16>, tensor<?x4x96xbf16>, tensor<?x2x96xbf16>, tensor<?x2x96xbf16>, tensor<?x4x96xbf16>, tensor<4x?xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x96xbf16>, tensor<?x2x96xbf16>, tensor<?x2x96xbf16>)
  return %dq, %dk, %dv : tensor<?x4x96xbf16>, tensor<?x2x96xbf16>, tensor<?x2x96xbf16>
}

// -----

// CHECK: error: 'fa3.kvcache_append' op has no Hopper kernel yet
func.func @append(%kc: tensor<?x?x2x64xf16>, %vc: tensor<?x?x2x64xf16>, %k: tensor<?x?x2x64xf16>, %v: tensor<?x?x2x64xf16>, %lens: tensor<?xi32>) -> (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.kvcache_append' op has no Hopper kernel yet}}
  %a, %b = fa3.kvcache_append %kc, %vc, %k, %v, %lens
      : (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>, tensor<?xi32>) -> (tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>)
  return %a, %b : tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>
}
