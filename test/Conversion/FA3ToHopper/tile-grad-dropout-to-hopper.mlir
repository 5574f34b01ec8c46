// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize),convert-fa3-tile-to-hopper))" | FileCheck %s
// RUN: fa3-opt %s --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a},fa3-outline-hopper-kernels,gpu.module(func.func(fa3-tile{grid=true},fa3-grad-mma-order,fa3-warp-specialize)))" \
// RUN:   | sed -e '0,/{p = 2.500000e-01 : f32}/s//{p = 5.000000e-01 : f32}/' \
// RUN:   | not fa3-opt --pass-pipeline="builtin.module(gpu.module(convert-fa3-tile-to-hopper))" 2>&1 | FileCheck %s --check-prefix=MISMATCH

// A backward with dropout from its grids: the key grid's two fa3.dropout
// (on P and on dP, one regenerated mask) give the spec its probability, and
// the launch passes the Philox seed and offset.
// CHECK: fa3.attention_grad {{.+}}fa3.kernel = @fa3_kernels::@[[NAME:fa3_bwd_bf16_d64_h4x4_m64n128s2_ws24x240_drop[0-9a-f]+_s[0-9a-f]+]], fa3.launch = {block_m = 64 : i64, block_n = 128 : i64, dropout = 1 : i64,
// CHECK-DAG: llvm.func @[[NAME]]_pre(
// CHECK-DAG: llvm.func @[[NAME]](
// CHECK-DAG: llvm.func @[[NAME]]_post(

// The kernel has one mask for P and dP: grids whose two dropouts disagree
// are not a backward it builds.
// MISMATCH: error: 'fa3.dropout' op the Hopper backward applies one dropout mask to P and dP: expected two fa3.dropout with the same probability in the key grid, got 2
func.func @grad_dropout(%do: tensor<?x?x4x64xbf16>, %q: tensor<?x?x4x64xbf16>, %k: tensor<?x?x4x64xbf16>, %v: tensor<?x?x4x64xbf16>, %o: tensor<?x?x4x64xbf16>, %lse: tensor<?x4x?xf32>, %rng: tensor<2xi64>) -> (tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse rng(%rng) {dropout = 0.25 : f32} : (tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x4x?xf32>, tensor<2xi64>) -> (tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>)
  return %dq, %dk, %dv : tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x4x64xbf16>
}
