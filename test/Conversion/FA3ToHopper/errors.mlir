// RUN: fa3-opt %s --fa3-select-schedule=target=sm_90a --fa3-outline-hopper-kernels --convert-fa3-to-hopper --split-input-file -verify-diagnostics

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
  // expected-error @+1 {{the schedule needs 296008 bytes of shared memory (Q tile, 2 K and V stages), more than the 232448 a Hopper CTA has}}
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
  // expected-error @+1 {{the Hopper backward steps over 64 query rows (128 at D = 64, where Sᵀ, dPᵀ, dK and dV fit the registers); block_m = 192 is not built at D = 64}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>) -> (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>)
  return %dq, %dk, %dv : tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>
}

// -----

func.func @hadamard_rows_too_short(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'fa3.hadamard' op the Hopper kernel transforms rows of 32 to 256 elements (one warp per row), got 16}}
  %y = fa3.hadamard %x {seed = 0 : i64} : tensor<4x16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// Schedule fields no Hopper kernel implements are rejected, never ignored.

// -----

func.func @persistent_without_producer(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{persistent = true needs a producer warpgroup (producer_regs and consumer_regs set): it loads the next tile's Q and K/V while the consumers finish this one, got producer_regs = 0}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @fp8_block_n(%q: tensor<1x?x4x128xf8E4M3FN>, %k: tensor<1x?x4x128xf8E4M3FN>, %v: tensor<1x?x4x128xf8E4M3FN>, %qd: tensor<1x4xf32>, %kd: tensor<1x4xf32>, %vd: tensor<1x4xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{the Hopper FP8 kernel reads V' in atoms of 64 or 128 keys (64 or 128 bytes of e4m3); block_n must be a multiple of 64, got 80}}
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {schedule = #fa3.schedule<block_m = 128, block_n = 80, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xf8E4M3FN>, tensor<1x?x4x128xf8E4M3FN>, tensor<1x?x4x128xf8E4M3FN>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @poly_exp2_bf16(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{poly_exp2 = 4: the Hopper forward kernel computes every exponential with MUFU.EX2 (the polynomial is built for the FP8 forward only); poly_exp2 must be 0}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1, poly_exp2 = 4>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @cluster(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{cluster = 2: the Hopper forward kernel does not use thread block clusters (TMA multicast); cluster must be 1}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 2>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @consumers_mismatch(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{consumer_wgs must be block_m / 64 on Hopper (each consumer warpgroup owns 64 query rows), got consumer_wgs = 1 with block_m = 128}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @half_split(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{producer_regs and consumer_regs turn warp specialization on together (both 0: off), got 24 and 0}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @producer_too_big(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{with 384 threads a warpgroup starts with 168 registers a thread; setmaxnreg needs producer_regs <= 168 <= consumer_regs, got 176 and 240}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 176, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @over_budget(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{producer_regs + consumer_wgs x consumer_regs = 536 registers a thread exceeds the 512 (4 warpgroups x 128) the CTA is launched with, which setmaxnreg shares out}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 168, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @pingpong_without_producer(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{pingpong is implemented for two consumer warpgroups with a producer warpgroup (block_m = 128, producer_regs and consumer_regs set), got block_m = 128, producer_regs = 0}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @overlap_without_producer(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{intra_wg_overlap = true needs a producer warpgroup (producer_regs and consumer_regs set): without one the consumers refill the ring and the overlap lost 10-25% on the H200, got producer_regs = 0}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = true, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

func.func @grad_producer_without_consumer_regs(%do: tensor<1x?x4x128xbf16>, %q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>, %o: tensor<1x?x4x128xbf16>, %lse: tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) {
  // expected-error @+1 {{producer_regs and consumer_regs turn warp specialization on together (both 0: off), got 24 and 0}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>
}

// -----

func.func @grad_registers_over_budget(%do: tensor<1x?x4x128xbf16>, %q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>, %o: tensor<1x?x4x128xbf16>, %lse: tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) {
  // expected-error @+1 {{producer_regs + consumer_wgs x consumer_regs = 536 registers a thread exceeds the 504 (3 warpgroups x 168) the CTA is launched with, which setmaxnreg shares out}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 256, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>
}

// -----

func.func @grad_pingpong(%do: tensor<1x?x4x128xbf16>, %q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>, %o: tensor<1x?x4x128xbf16>, %lse: tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) {
  // expected-error @+1 {{pingpong and intra_wg_overlap are not implemented by the Hopper backward}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>
}

// -----

func.func @grad_persistent(%do: tensor<1x?x4x128xbf16>, %q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>, %o: tensor<1x?x4x128xbf16>, %lse: tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) {
  // expected-error @+1 {{persistent = true: the Hopper backward kernel has no persistent tile scheduler (one CTA per tile)}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>
}

// -----

func.func @grad_consumers(%do: tensor<1x?x4x128xbf16>, %q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>, %o: tensor<1x?x4x128xbf16>, %lse: tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) {
  // expected-error @+1 {{the Hopper backward runs two warpgroups; consumer_wgs must be 2, got 1}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>
}

// -----

func.func @pack_gqa_group_of_three(%q: tensor<1x?x6x64xbf16>, %k: tensor<1x?x2x64xbf16>, %v: tensor<1x?x2x64xbf16>) -> (tensor<1x?x6x64xbf16>, tensor<1x6x?xf32>) {
  // expected-error @+1 {{pack_gqa on Hopper needs Hq / Hkv to divide 64 (each consumer warpgroup's 64 rows hold whole queries), got 6 / 2 = 3}}
  %o, %lse = fa3.attention %q, %k, %v {pack_gqa} : (tensor<1x?x6x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>) -> (tensor<1x?x6x64xbf16>, tensor<1x6x?xf32>)
  return %o, %lse : tensor<1x?x6x64xbf16>, tensor<1x6x?xf32>
}


// -----

// Two consumers at 240 leave the producer 24 of the 3 x 168 the CTA is
// launched with: 32 would leave setmaxnreg.inc waiting forever.
func.func @over_launch_pool(%q: tensor<1x?x4x128xbf16>, %k: tensor<1x?x4x128xbf16>, %v: tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{producer_regs + consumer_wgs x consumer_regs = 512 registers a thread exceeds the 504 (3 warpgroups x 168) the CTA is launched with, which setmaxnreg shares out}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 32, consumer_regs = 240, pingpong = true, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// -----

// At 512 threads ptxas compiles each wgmma within 128 registers a thread
// (setmaxnreg.inc does not raise that there), so an m64n208 accumulator
// (104 f32 registers) cannot be compiled; m64n192 can.
func.func @accumulator_too_wide_at_512_threads(%q: tensor<1x?x4x64xbf16>, %k: tensor<1x?x4x64xbf16>, %v: tensor<1x?x4x64xbf16>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{a 512-thread kernel (three consumer warpgroups and a producer) compiles each wgmma within 128 registers a thread, so its accumulator (max(block_n, head dim) / 2 = 104 f32 registers) must stay within 100: block_n and the head dim at most 200, got block_n = 208, head dim 64}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 192, block_n = 208, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>
}

// -----

// The same for O's accumulator at head dim 256 (128 f32 registers).
func.func @output_accumulator_too_wide_at_512_threads(%q: tensor<1x?x4x256xbf16>, %k: tensor<1x?x4x256xbf16>, %v: tensor<1x?x4x256xbf16>) -> (tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>) {
  // expected-error @+1 {{its accumulator (max(block_n, head dim) / 2 = 128 f32 registers) must stay within 100: block_n and the head dim at most 200, got block_n = 64, head dim 256}}
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 192, block_n = 64, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : (tensor<1x?x4x256xbf16>, tensor<1x?x4x256xbf16>, tensor<1x?x4x256xbf16>) -> (tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>
}
