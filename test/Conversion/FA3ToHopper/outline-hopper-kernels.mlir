// RUN: fa3-opt %s --fa3-select-schedule=target=sm_90a --fa3-outline-hopper-kernels | FileCheck %s

// Each 16-bit forward gets a kernel function in @fa3_kernels, named after
// its spec, on dynamic batch and lengths, with its schedule as an attribute;
// the host ops stay at L0 and name the kernel they launch. The two
// attentions below differ only in their static shapes and share one kernel.
// CHECK-LABEL: func.func @static_and_dynamic
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {causal, fa3.kernel = @fa3_kernels::@[[NAME:fa3_fwd_bf16_d128_h8x2_m128n128s2_ov_ws24x240_pp_causal_s3db504f3]], fa3.launch = {block_m = 128 : i64, block_n = 128 : i64, shared_memory = 164936 : i64, threads = 384 : i64}
// CHECK-SAME: (tensor<2x5000x8x128xbf16>, tensor<2x5000x2x128xbf16>, tensor<2x5000x2x128xbf16>)
// CHECK: fa3.attention %{{.+}}, %{{.+}}, %{{.+}} {causal, fa3.kernel = @fa3_kernels::@[[NAME]],
// CHECK-SAME: (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
// The backward gets a kernel function too (convert-fa3-tile-to-hopper
// makes its three kernels from it), and its launch the backward's flags.
// CHECK: fa3.attention_grad {{.+}} {causal, fa3.kernel = @fa3_kernels::@[[BWD:fa3_bwd_bf16_d128_h8x2_m64n128s2_ws24x240_causal_s3db504f3]], fa3.launch = {block_m = 64 : i64, block_n = 128 : i64, shared_memory = 198696 : i64, threads = 384 : i64}
// CHECK: gpu.module @fa3_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">]
// CHECK-NEXT: func.func @[[NAME]](%[[Q:.+]]: tensor<?x?x8x128xbf16>, %[[K:.+]]: tensor<?x?x2x128xbf16>, %[[V:.+]]: tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
// CHECK-SAME: attributes {fa3.schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>}
// CHECK-NEXT: %[[O:.+]], %[[LSE:.+]] = fa3.attention %[[Q]], %[[K]], %[[V]] {causal, schedule = #fa3.schedule<
// CHECK-NEXT: return %[[O]], %[[LSE]]
// CHECK: func.func @[[BWD]](%[[GDO:.+]]: tensor<?x?x8x128xbf16>, %[[GQ:.+]]: tensor<?x?x8x128xbf16>, %[[GK:.+]]: tensor<?x?x2x128xbf16>, %[[GV:.+]]: tensor<?x?x2x128xbf16>, %[[GO:.+]]: tensor<?x?x8x128xbf16>, %[[GL:.+]]: tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
// CHECK-SAME: attributes {fa3.schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>}
// CHECK-NEXT: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = fa3.attention_grad %[[GDO]], %[[GQ]], %[[GK]], %[[GV]], %[[GO]], %[[GL]] {causal, schedule = #fa3.schedule<
// CHECK-NEXT: return %[[DQ]], %[[DK]], %[[DV]]
// CHECK-NOT: func.func
func.func @static_and_dynamic(%q: tensor<2x5000x8x128xbf16>, %k: tensor<2x5000x2x128xbf16>, %v: tensor<2x5000x2x128xbf16>,
                              %dq: tensor<?x?x8x128xbf16>, %dk: tensor<?x?x2x128xbf16>, %dv: tensor<?x?x2x128xbf16>)
    -> (tensor<2x5000x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<2x5000x8x128xbf16>, tensor<2x5000x2x128xbf16>, tensor<2x5000x2x128xbf16>) -> (tensor<2x5000x8x128xbf16>, tensor<2x8x5000xf32>)
  %o2, %lse2 = fa3.attention %dq, %dk, %dv {causal} : (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
  %gq, %gk, %gv = fa3.attention_grad %o2, %dq, %dk, %dv, %o2, %lse2 {causal} : (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
  return %o, %o2, %gq : tensor<2x5000x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>
}
