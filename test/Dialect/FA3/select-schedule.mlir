// RUN: fa3-opt %s --fa3-select-schedule | FileCheck %s --check-prefix=CPU
// RUN: fa3-opt %s --fa3-select-schedule=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: fa3-opt %s --fa3-select-schedule=target=sm_90a | FileCheck %s --check-prefix=SM90
// RUN: fa3-opt %s --fa3-select-schedule="target=sm_90a block-m=64 block-n=32" | FileCheck %s --check-prefix=OVERRIDE
// RUN: fa3-opt %s --fa3-select-schedule="block-n=128" | FileCheck %s --check-prefix=CPU-N128
// RUN: fa3-opt %s --fa3-select-schedule="target=sm_90a block-m=128" | FileCheck %s --check-prefix=M128
// RUN: not fa3-opt %s --fa3-select-schedule=target=sm_80 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: not fa3-opt %s --fa3-select-schedule=block-m=60 2>&1 | FileCheck %s --check-prefix=ERR-BLOCK
// RUN: not fa3-opt %s --fa3-select-schedule="target=sm_90a block-m=96" 2>&1 | FileCheck %s --check-prefix=ERR-SM90

// ERR: error: fa3-select-schedule: unknown target 'sm_80' (expected 'cpu' or 'sm_90a')
// ERR-SM90: error: fa3-select-schedule: on sm_90a block-m must be a multiple of 64 (64 query rows per consumer warpgroup), got 96
// ERR-BLOCK: error: fa3-select-schedule: block sizes must be non-negative multiples of 8, got 60

// CPU-LABEL: func.func @d64
// CPU: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>
// SM90-LABEL: func.func @d64
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>
// OVERRIDE-LABEL: func.func @d64
// OVERRIDE: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 32, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false,
// Two consumer warpgroups pingpong and overlap at every head dim (three,
// d64's 192-row tile, do not: there the overlap measured slower).
// M128-LABEL: func.func @d64
// M128: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true,
// CPU-N128-LABEL: func.func @d64
// CPU-N128: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 1,
func.func @d64(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// CPU-LABEL: func.func @d128
// CPU: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 64,
// SM90-LABEL: func.func @d128
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>
// M128-LABEL: func.func @d128
// M128: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true,
// OVERRIDE-LABEL: func.func @d128
// OVERRIDE: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 32, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false,
func.func @d128(%q: tensor<1x?x16x128xbf16>, %k: tensor<1x?x16x128xbf16>, %v: tensor<1x?x16x128xbf16>) -> (tensor<1x?x16x128xbf16>, tensor<1x16x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x16x128xbf16>, tensor<1x?x16x128xbf16>, tensor<1x?x16x128xbf16>) -> (tensor<1x?x16x128xbf16>, tensor<1x16x?xf32>)
  return %o, %lse : tensor<1x?x16x128xbf16>, tensor<1x16x?xf32>
}

// CPU-LABEL: func.func @d256
// CPU: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 64,
// SM90-LABEL: func.func @d256
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 80, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>
func.func @d256(%q: tensor<1x?x4x256xf16>, %k: tensor<1x?x4x256xf16>, %v: tensor<1x?x4x256xf16>) -> (tensor<1x?x4x256xf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<1x?x4x256xf16>, tensor<1x?x4x256xf16>, tensor<1x?x4x256xf16>) -> (tensor<1x?x4x256xf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x256xf16>, tensor<1x4x?xf32>
}

// FP8 takes the 16-bit kernel structure (producer warpgroup, pingpong, the
// intra-warpgroup overlap above d = 64) on 128-key blocks (V' atoms); at
// d128, non-causal on a plain grid, on 192-key blocks with every 8th
// exponential on the FMA pipe (poly_exp2 = 8; the 128-key kernels keep 0).
// SM90-LABEL: func.func @fp8_d128
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 192, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1, poly_exp2 = 8>
func.func @fp8_d128(%q: tensor<1x?x4x128xf8E4M3FN>, %k: tensor<1x?x4x128xf8E4M3FN>, %v: tensor<1x?x4x128xf8E4M3FN>, %qd: tensor<1x4xf32>, %kd: tensor<1x4xf32>, %vd: tensor<1x4xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd : (tensor<1x?x4x128xf8E4M3FN>, tensor<1x?x4x128xf8E4M3FN>, tensor<1x?x4x128xf8E4M3FN>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// Causal d128: 128-key blocks, on a persistent grid (eager rescaling).
// SM90-LABEL: func.func @fp8_d128_causal
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, {{.+}}persistent = true, cluster = 1>}
func.func @fp8_d128_causal(%q: tensor<1x?x4x128xf8E4M3FN>, %k: tensor<1x?x4x128xf8E4M3FN>, %v: tensor<1x?x4x128xf8E4M3FN>, %qd: tensor<1x4xf32>, %kd: tensor<1x4xf32>, %vd: tensor<1x4xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {causal} : (tensor<1x?x4x128xf8E4M3FN>, tensor<1x?x4x128xf8E4M3FN>, tensor<1x?x4x128xf8E4M3FN>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>) -> (tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x128xbf16>, tensor<1x4x?xf32>
}

// FP8 on a persistent grid where that measured faster: d64 at any length,
// causal d128, non-causal d128 up to 1024 keys (static here: 512). d64
// takes 192-key blocks (FlashAttention-3's 192 x 160 in whole 64-key V'
// atoms) without poly_exp2.
// SM90-LABEL: func.func @fp8_d64_persistent
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 192, block_n = 192, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>
func.func @fp8_d64_persistent(%q: tensor<1x?x4x64xf8E4M3FN>, %k: tensor<1x?x4x64xf8E4M3FN>, %v: tensor<1x?x4x64xf8E4M3FN>, %qd: tensor<1x4xf32>, %kd: tensor<1x4xf32>, %vd: tensor<1x4xf32>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd : (tensor<1x?x4x64xf8E4M3FN>, tensor<1x?x4x64xf8E4M3FN>, tensor<1x?x4x64xf8E4M3FN>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>) -> (tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x64xbf16>, tensor<1x4x?xf32>
}
// SM90-LABEL: func.func @fp8_d128_short
// SM90: fa3.attention {{.+}}block_n = 128, {{.+}}persistent = true
func.func @fp8_d128_short(%q: tensor<1x512x4x128xf8E4M3FN>, %k: tensor<1x512x4x128xf8E4M3FN>, %v: tensor<1x512x4x128xf8E4M3FN>, %qd: tensor<1x4xf32>, %kd: tensor<1x4xf32>, %vd: tensor<1x4xf32>) -> (tensor<1x512x4x128xbf16>, tensor<1x4x512xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd : (tensor<1x512x4x128xf8E4M3FN>, tensor<1x512x4x128xf8E4M3FN>, tensor<1x512x4x128xf8E4M3FN>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>) -> (tensor<1x512x4x128xbf16>, tensor<1x4x512xf32>)
  return %o, %lse : tensor<1x512x4x128xbf16>, tensor<1x4x512xf32>
}
// d256 on a plain grid with lazy rescaling (tau = 8), which measured +2-3%
// there (causal or not) and lost at d128.
// SM90-LABEL: func.func @fp8_d256_long
// SM90: fa3.attention {{.+}}persistent = false, cluster = 1, rescale_threshold = 8>
func.func @fp8_d256_long(%q: tensor<1x?x4x256xf8E4M3FN>, %k: tensor<1x?x4x256xf8E4M3FN>, %v: tensor<1x?x4x256xf8E4M3FN>, %qd: tensor<1x4xf32>, %kd: tensor<1x4xf32>, %vd: tensor<1x4xf32>) -> (tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {causal} : (tensor<1x?x4x256xf8E4M3FN>, tensor<1x?x4x256xf8E4M3FN>, tensor<1x?x4x256xf8E4M3FN>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>) -> (tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>
}

// SM90-LABEL: func.func @fp8_d256_noncausal
// SM90: fa3.attention {{.+}}persistent = false, cluster = 1, rescale_threshold = 8>
func.func @fp8_d256_noncausal(%q: tensor<1x?x4x256xf8E4M3FN>, %k: tensor<1x?x4x256xf8E4M3FN>, %v: tensor<1x?x4x256xf8E4M3FN>, %qd: tensor<1x4xf32>, %kd: tensor<1x4xf32>, %vd: tensor<1x4xf32>) -> (tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd : (tensor<1x?x4x256xf8E4M3FN>, tensor<1x?x4x256xf8E4M3FN>, tensor<1x?x4x256xf8E4M3FN>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>) -> (tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x256xbf16>, tensor<1x4x?xf32>
}

// Head dims between the table's rows take the next row up: d = 96 gets the
// d <= 128 schedule.
// SM90-LABEL: func.func @d96
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128,
func.func @d96(%q: tensor<1x?x4x96xf16>, %k: tensor<1x?x4x96xf16>, %v: tensor<1x?x4x96xf16>) -> (tensor<1x?x4x96xf16>, tensor<1x4x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x4x96xf16>, tensor<1x?x4x96xf16>, tensor<1x?x4x96xf16>) -> (tensor<1x?x4x96xf16>, tensor<1x4x?xf32>)
  return %o, %lse : tensor<1x?x4x96xf16>, tensor<1x4x?xf32>
}

// A schedule already in the IR (hand-written or autotuned) wins over the
// cost model and over the block-m/block-n overrides.
// CPU-LABEL: func.func @keep_existing
// CPU: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 32, block_n = 16, stages = 3, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>
// SM90-LABEL: func.func @keep_existing
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 32, block_n = 16, stages = 3,
// OVERRIDE-LABEL: func.func @keep_existing
// OVERRIDE: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 32, block_n = 16, stages = 3,
func.func @keep_existing(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 32, block_n = 16, stages = 3, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}

// The backward gets its own schedule: on the CPU the forward's 64 x 64; on
// Hopper 64 query rows per step (128 at d64) against 128 key rows per CTA
// (64 at d256), with a producer warpgroup (24/240 registers).
// CPU-LABEL: func.func @grad_scheduled
// CPU: fa3.attention_grad {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1
// SM90-LABEL: func.func @grad_scheduled
// SM90: fa3.attention_grad {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false
func.func @grad_scheduled(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>
}

// With a softcap, d64 keeps 64-row steps: tanh's derivative per Sᵀ element
// would not fit the registers of 128-row steps.
// SM90-LABEL: func.func @grad_softcap_d64
// SM90: fa3.attention_grad {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2
func.func @grad_softcap_d64(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {softcap = 30.0 : f32} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>
}

// Dropout's keep mask likewise keeps d64 at 64-row steps.
// SM90-LABEL: func.func @grad_dropout_d64
// SM90: fa3.attention_grad {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2
func.func @grad_dropout_d64(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>, %rng: tensor<2xi64>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse rng(%rng) {dropout = 0.1 : f32} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>, tensor<2xi64>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>
}

// A forward with dropout keeps warp specialization and pingpong but not
// the intra-warpgroup overlap (its rotated key loop has no fa3.dropout).
// SM90-LABEL: func.func @dropout_d128
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = false,
func.func @dropout_d128(%q: tensor<2x?x8x128xbf16>, %k: tensor<2x?x2x128xbf16>, %v: tensor<2x?x2x128xbf16>, %rng: tensor<2xi64>) -> (tensor<2x?x8x128xbf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {dropout = 0.1 : f32} : (tensor<2x?x8x128xbf16>, tensor<2x?x2x128xbf16>, tensor<2x?x2x128xbf16>, tensor<2xi64>) -> (tensor<2x?x8x128xbf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x128xbf16>, tensor<2x8x?xf32>
}

// SM90-LABEL: func.func @grad_d256
// SM90: fa3.attention_grad {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false
func.func @grad_d256(%do: tensor<2x?x8x256xbf16>, %q: tensor<2x?x8x256xbf16>, %k: tensor<2x?x2x256xbf16>, %v: tensor<2x?x2x256xbf16>, %o: tensor<2x?x8x256xbf16>, %lse: tensor<2x8x?xf32>) -> (tensor<2x?x8x256xbf16>, tensor<2x?x2x256xbf16>, tensor<2x?x2x256xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse : (tensor<2x?x8x256xbf16>, tensor<2x?x8x256xbf16>, tensor<2x?x2x256xbf16>, tensor<2x?x2x256xbf16>, tensor<2x?x8x256xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x256xbf16>, tensor<2x?x2x256xbf16>, tensor<2x?x2x256xbf16>)
  return %dq, %dk, %dv : tensor<2x?x8x256xbf16>, tensor<2x?x2x256xbf16>, tensor<2x?x2x256xbf16>
}

// A static query length picks the Hopper forward's query tile (d <= 64):
// the fewest computed rows over each tile's measured rate (64: 1.0 over at
// most 1k keys, 2k causal, then 0.85; 128: 0.85, or from 256 query rows on a
// persistent grid over at most 1024 keys (causal 512) 1.04 (causal 1.06);
// 192: 1), so S = 197 and S = 49 take 64-row tiles (256 and 64 rows), S =
// 512 persistent 128-row tiles (512 rows at 1.04), S = 8192 keeps 192 (43
// tiles of 192 beat 128 tiles of 64 at 0.85), and so does causal S = 4096
// (4224 rows against 4096 / 0.85). The key length sets the 64-row rate:
// 512 queries over 8192 keys take 192 rows (576 against 512 / 0.85 for
// 64 and 128 rows), 64
// queries over 4096 keys 64 rows (the padding of 192 costs more).
// SM90-LABEL: func.func @vit_197
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>
func.func @vit_197(%q: tensor<128x197x12x64xbf16>, %k: tensor<128x197x12x64xbf16>, %v: tensor<128x197x12x64xbf16>) -> (tensor<128x197x12x64xbf16>, tensor<128x12x197xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<128x197x12x64xbf16>, tensor<128x197x12x64xbf16>, tensor<128x197x12x64xbf16>) -> (tensor<128x197x12x64xbf16>, tensor<128x12x197xf32>)
  return %o, %lse : tensor<128x197x12x64xbf16>, tensor<128x12x197xf32>
}

// SM90-LABEL: func.func @vit_49
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>
func.func @vit_49(%q: tensor<128x49x12x64xbf16>, %k: tensor<128x49x12x64xbf16>, %v: tensor<128x49x12x64xbf16>) -> (tensor<128x49x12x64xbf16>, tensor<128x12x49xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<128x49x12x64xbf16>, tensor<128x49x12x64xbf16>, tensor<128x49x12x64xbf16>) -> (tensor<128x49x12x64xbf16>, tensor<128x12x49xf32>)
  return %o, %lse : tensor<128x49x12x64xbf16>, tensor<128x12x49xf32>
}

// SM90-LABEL: func.func @d64_512
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>
func.func @d64_512(%q: tensor<32x512x32x64xbf16>, %k: tensor<32x512x32x64xbf16>, %v: tensor<32x512x32x64xbf16>) -> (tensor<32x512x32x64xbf16>, tensor<32x32x512xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<32x512x32x64xbf16>, tensor<32x512x32x64xbf16>, tensor<32x512x32x64xbf16>) -> (tensor<32x512x32x64xbf16>, tensor<32x32x512xf32>)
  return %o, %lse : tensor<32x512x32x64xbf16>, tensor<32x32x512xf32>
}

// SM90-LABEL: func.func @d64_short_queries_long_keys
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3,
func.func @d64_short_queries_long_keys(%q: tensor<8x512x32x64xbf16>, %k: tensor<8x8192x32x64xbf16>, %v: tensor<8x8192x32x64xbf16>) -> (tensor<8x512x32x64xbf16>, tensor<8x32x512xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<8x512x32x64xbf16>, tensor<8x8192x32x64xbf16>, tensor<8x8192x32x64xbf16>) -> (tensor<8x512x32x64xbf16>, tensor<8x32x512xf32>)
  return %o, %lse : tensor<8x512x32x64xbf16>, tensor<8x32x512xf32>
}

// SM90-LABEL: func.func @d64_decode_like
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1,
func.func @d64_decode_like(%q: tensor<8x64x32x64xbf16>, %k: tensor<8x4096x32x64xbf16>, %v: tensor<8x4096x32x64xbf16>) -> (tensor<8x64x32x64xbf16>, tensor<8x32x64xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<8x64x32x64xbf16>, tensor<8x4096x32x64xbf16>, tensor<8x4096x32x64xbf16>) -> (tensor<8x64x32x64xbf16>, tensor<8x32x64xf32>)
  return %o, %lse : tensor<8x64x32x64xbf16>, tensor<8x32x64xf32>
}

// SM90-LABEL: func.func @long_8192
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3, producer_regs = 32, consumer_regs = 160,
func.func @long_8192(%q: tensor<1x8192x4x64xbf16>, %k: tensor<1x8192x4x64xbf16>, %v: tensor<1x8192x4x64xbf16>) -> (tensor<1x8192x4x64xbf16>, tensor<1x4x8192xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x8192x4x64xbf16>, tensor<1x8192x4x64xbf16>, tensor<1x8192x4x64xbf16>) -> (tensor<1x8192x4x64xbf16>, tensor<1x4x8192xf32>)
  return %o, %lse : tensor<1x8192x4x64xbf16>, tensor<1x4x8192xf32>
}

// d128 has one tile (128 x 128) whatever the length. A static key length
// of at most 1024 keys (causal: 512) also puts it on a persistent grid;
// longer key loops, d256 (one Q tile in shared memory) and the CPU never
// are.
// SM90-LABEL: func.func @d128_short
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = true, cluster = 1>
// CPU-LABEL: func.func @d128_short
// CPU: fa3.attention {{.+}}persistent = false
func.func @d128_short(%q: tensor<8x49x4x128xbf16>, %k: tensor<8x49x4x128xbf16>, %v: tensor<8x49x4x128xbf16>) -> (tensor<8x49x4x128xbf16>, tensor<8x4x49xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<8x49x4x128xbf16>, tensor<8x49x4x128xbf16>, tensor<8x49x4x128xbf16>) -> (tensor<8x49x4x128xbf16>, tensor<8x4x49xf32>)
  return %o, %lse : tensor<8x49x4x128xbf16>, tensor<8x4x49xf32>
}

// The key length decides, not the query length.
// SM90-LABEL: func.func @d128_long_queries_short_keys
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, {{.+}}persistent = true
func.func @d128_long_queries_short_keys(%q: tensor<2x8192x4x128xbf16>, %k: tensor<2x512x4x128xbf16>, %v: tensor<2x512x4x128xbf16>) -> (tensor<2x8192x4x128xbf16>, tensor<2x4x8192xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x8192x4x128xbf16>, tensor<2x512x4x128xbf16>, tensor<2x512x4x128xbf16>) -> (tensor<2x8192x4x128xbf16>, tensor<2x4x8192xf32>)
  return %o, %lse : tensor<2x8192x4x128xbf16>, tensor<2x4x8192xf32>
}

// SM90-LABEL: func.func @d128_short_queries_long_keys
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, {{.+}}persistent = false
func.func @d128_short_queries_long_keys(%q: tensor<2x512x4x128xbf16>, %k: tensor<2x8192x4x128xbf16>, %v: tensor<2x8192x4x128xbf16>) -> (tensor<2x512x4x128xbf16>, tensor<2x4x512xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x512x4x128xbf16>, tensor<2x8192x4x128xbf16>, tensor<2x8192x4x128xbf16>) -> (tensor<2x512x4x128xbf16>, tensor<2x4x512xf32>)
  return %o, %lse : tensor<2x512x4x128xbf16>, tensor<2x4x512xf32>
}

// SM90-LABEL: func.func @d128_causal_512
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, {{.+}}persistent = true
func.func @d128_causal_512(%q: tensor<2x512x4x128xbf16>, %k: tensor<2x512x4x128xbf16>, %v: tensor<2x512x4x128xbf16>) -> (tensor<2x512x4x128xbf16>, tensor<2x4x512xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<2x512x4x128xbf16>, tensor<2x512x4x128xbf16>, tensor<2x512x4x128xbf16>) -> (tensor<2x512x4x128xbf16>, tensor<2x4x512xf32>)
  return %o, %lse : tensor<2x512x4x128xbf16>, tensor<2x4x512xf32>
}

// SM90-LABEL: func.func @d128_causal_4096
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, {{.+}}persistent = true
func.func @d128_causal_4096(%q: tensor<2x4096x4x128xbf16>, %k: tensor<2x4096x4x128xbf16>, %v: tensor<2x4096x4x128xbf16>) -> (tensor<2x4096x4x128xbf16>, tensor<2x4x4096xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<2x4096x4x128xbf16>, tensor<2x4096x4x128xbf16>, tensor<2x4096x4x128xbf16>) -> (tensor<2x4096x4x128xbf16>, tensor<2x4x4096xf32>)
  return %o, %lse : tensor<2x4096x4x128xbf16>, tensor<2x4x4096xf32>
}

// SM90-LABEL: func.func @d128_causal_8192
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, {{.+}}persistent = false
func.func @d128_causal_8192(%q: tensor<2x8192x4x128xbf16>, %k: tensor<2x8192x4x128xbf16>, %v: tensor<2x8192x4x128xbf16>) -> (tensor<2x8192x4x128xbf16>, tensor<2x4x8192xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<2x8192x4x128xbf16>, tensor<2x8192x4x128xbf16>, tensor<2x8192x4x128xbf16>) -> (tensor<2x8192x4x128xbf16>, tensor<2x4x8192xf32>)
  return %o, %lse : tensor<2x8192x4x128xbf16>, tensor<2x4x8192xf32>
}

// SM90-LABEL: func.func @d256_short
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 80, {{.+}}persistent = false
func.func @d256_short(%q: tensor<2x512x4x256xbf16>, %k: tensor<2x512x4x256xbf16>, %v: tensor<2x512x4x256xbf16>) -> (tensor<2x512x4x256xbf16>, tensor<2x4x512xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x512x4x256xbf16>, tensor<2x512x4x256xbf16>, tensor<2x512x4x256xbf16>) -> (tensor<2x512x4x256xbf16>, tensor<2x4x512xf32>)
  return %o, %lse : tensor<2x512x4x256xbf16>, tensor<2x4x512xf32>
}

// Causal d64 at 2k and 4k keys: the 128-row tile with pingpong and overlap
// on a persistent grid (measured 1.00-1.07x the 192-row tile's TFLOP/s on
// the H100, which was 355 against 339 for 64 rows).
// SM90-LABEL: func.func @causal_2048
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, {{.+}}pingpong = true, intra_wg_overlap = true, persistent = true
func.func @causal_2048(%q: tensor<1x2048x4x64xbf16>, %k: tensor<1x2048x4x64xbf16>, %v: tensor<1x2048x4x64xbf16>) -> (tensor<1x2048x4x64xbf16>, tensor<1x4x2048xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<1x2048x4x64xbf16>, tensor<1x2048x4x64xbf16>, tensor<1x2048x4x64xbf16>) -> (tensor<1x2048x4x64xbf16>, tensor<1x4x2048xf32>)
  return %o, %lse : tensor<1x2048x4x64xbf16>, tensor<1x4x2048xf32>
}

// SM90-LABEL: func.func @causal_4096
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, {{.+}}intra_wg_overlap = true, persistent = true
func.func @causal_4096(%q: tensor<1x4096x4x64xbf16>, %k: tensor<1x4096x4x64xbf16>, %v: tensor<1x4096x4x64xbf16>) -> (tensor<1x4096x4x64xbf16>, tensor<1x4x4096xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<1x4096x4x64xbf16>, tensor<1x4096x4x64xbf16>, tensor<1x4096x4x64xbf16>) -> (tensor<1x4096x4x64xbf16>, tensor<1x4x4096xf32>)
  return %o, %lse : tensor<1x4096x4x64xbf16>, tensor<1x4x4096xf32>
}

// Non-causal S = 4096 keeps 192 (22 tiles: 4224 rows, against 4096 / 0.85).
// SM90-LABEL: func.func @full_4096
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3,
func.func @full_4096(%q: tensor<1x4096x4x64xbf16>, %k: tensor<1x4096x4x64xbf16>, %v: tensor<1x4096x4x64xbf16>) -> (tensor<1x4096x4x64xbf16>, tensor<1x4x4096xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x4096x4x64xbf16>, tensor<1x4096x4x64xbf16>, tensor<1x4096x4x64xbf16>) -> (tensor<1x4096x4x64xbf16>, tensor<1x4x4096xf32>)
  return %o, %lse : tensor<1x4096x4x64xbf16>, tensor<1x4x4096xf32>
}
