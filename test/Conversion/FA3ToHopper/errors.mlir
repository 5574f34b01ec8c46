// RUN: fa3-opt %s --fa3-select-schedule=target=sm_90a --convert-fa3-to-hopper --split-input-file -verify-diagnostics

// What the Hopper backend does not support is a diagnostic naming it.
func.func @f32(%q: tensor<1x?x4x64xf32>, %k: tensor<1x?x4x64xf32>, %v: tensor<1x?x4x64xf32>) -> (tensor<1x?x4x64xf32>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{the Hopper backend supports f16, bf16 and f8E4M3FN (f32 runs with fa3-cpu-pipeline), got 'f32'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>, tensor<1x?x4x64xf32>) -> (tensor<1x?x4x64xf32>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x64xf32>, tensor<1x4x?xf32>
}

// -----

func.func @dv_differs(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x64xbf16>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{the Hopper backend needs the value head dim to equal the query head dim, got 64 vs 128}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x64xbf16>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @d96(%q: tensor<1x?x4x96xf16>, %k: tensor<1x?x4x96xf16>, %v: tensor<1x?x4x96xf16>) -> (tensor<1x?x4x96xf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{the Hopper backend supports head dims 64, 128, 192 and 256 (whole 128-byte swizzle atoms), got 96}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x4x96xf16>, tensor<1x?x4x96xf16>, tensor<1x?x4x96xf16>) -> (tensor<1x?x4x96xf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x96xf16>, tensor<1x4x?xf32>
}

// -----

func.func @too_much_smem(%q: tensor<1x?x4x256xbf16>, %k: tensor<1x?x4x256xbf16>, %v: tensor<1x?x4x256xbf16>) -> (tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{the schedule needs 295992 bytes of shared memory (Q tile, 2 K and V stages), more than the 232448 a Hopper CTA has}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 112, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} : (tensor<1x?x4x256xbf16>, tensor<1x?x4x256xbf16>, tensor<1x?x4x256xbf16>) -> (tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>
}

// -----

// The backward has its own limits, also named.
func.func @grad_d192(%do: tensor<1x?x4x192xbf16>, %q: tensor<1x?x4x192xbf16>, %k: tensor<1x?x4x192xbf16>, %v: tensor<1x?x4x192xbf16>, %o: tensor<1x?x4x192xbf16>, %lse: tensor<1x4x?xf32>) -> (tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>) {
  // expected-error @+1 {{the Hopper backward supports head dims 64, 128 and 256 (the CPU pipeline takes any), got 192}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse : (tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>, tensor<1x4x?xf32>) -> (tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>)
  return %dq, %dk, %dv : tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>, tensor<1x?x4x192xbf16>
}

// -----

func.func @grad_block_m(%do: tensor<1x?x4x64xbf16>, %q: tensor<1x?x4x64xbf16>, %k: tensor<1x?x4x64xbf16>, %v: tensor<1x?x4x64xbf16>, %o: tensor<1x?x4x64xbf16>, %lse: tensor<1x4x?xf32>) -> (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>) {
  // expected-error @+1 {{the Hopper backward steps over 64 query rows (one wgmma N of the Sᵀ tile); block_m must be 64, got 128}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>) -> (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>)
  return %dq, %dk, %dv : tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>
}

// -----

func.func @hadamard_rows_too_short(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'fa3.hadamard' op the Hopper kernel transforms rows of 32 to 256 elements (one warp per row), got 16}}
  %y = fa3.hadamard %x {seed = 0 : i64} : tensor<4x16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
