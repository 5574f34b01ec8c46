// RUN: fa3-opt %s --fa3-cpu-pipeline | FileCheck %s
// RUN: fa3-opt %s --fa3-cpu-pipeline | FileCheck %s --check-prefix=LOWERED
// RUN: fa3-opt %s --fa3-cpu-pipeline="block-m=16 block-n=32" | FileCheck %s --check-prefix=LOWERED
// RUN: fa3-opt %s --fa3-to-linalg-pipeline | FileCheck %s --check-prefix=LINALG
// RUN: fa3-opt %s --fa3-to-linalg-pipeline="block-m=16 block-n=32" | FileCheck %s --check-prefix=LINALG-16x32
// RUN: not fa3-opt %s --fa3-cpu-pipeline="block-m=12" 2>&1 | FileCheck %s --check-prefix=BAD-BLOCK

// Nothing but the LLVM dialect is left: no fa3, linalg, scf, tensor, memref,
// arith, math or cf op and no unresolved cast.
// LOWERED-NOT: {{[ "](fa3|linalg|scf|tensor|memref|bufferization|arith|math|cf|func)\.}}
// LOWERED-NOT: unrealized_conversion_cast

// BAD-BLOCK: fa3-select-schedule: block sizes must be non-negative multiples of 8, got 12

// Causal GQA in f16 with dynamic batch and sequence lengths: the online
// softmax becomes two exp2 per step (correction and probabilities), the LSE a
// log; tiles are heap buffers freed in the loop.
// CHECK-LABEL: llvm.func @causal_gqa_f16
// CHECK: llvm.call @malloc
// CHECK: llvm.fpext {{.+}} : f16 to f32
// CHECK: llvm.intr.exp2({{.+}}) : (f32) -> f32
// CHECK: llvm.intr.exp2({{.+}}) : (f32) -> f32
// CHECK: llvm.intr.log({{.+}}) : (f32) -> f32
// CHECK: llvm.fptrunc {{.+}} : f32 to f16
// CHECK: llvm.call @free
// CHECK: llvm.return
// LINALG-LABEL: func.func @causal_gqa_f16
// LINALG-NOT: fa3.
// LINALG: scf.for
// LINALG: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "reduction"]
// LINALG-SAME: outs(%{{.+}} : tensor<64x64xf32>)
// LINALG: math.exp2
// LINALG: linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "reduction"]
// LINALG: math.log
// LINALG-NOT: fa3.
// LINALG: return
// LINALG-16x32-LABEL: func.func @causal_gqa_f16
// LINALG-16x32: linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<16x64xf16>, tensor<32x64xf16>) outs(%{{.+}} : tensor<16x32xf32>)
func.func @causal_gqa_f16(%q: tensor<?x?x8x64xf16>, %k: tensor<?x?x2x64xf16>, %v: tensor<?x?x2x64xf16>) -> (tensor<?x?x8x64xf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<?x?x8x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>) -> (tensor<?x?x8x64xf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xf16>, tensor<?x8x?xf32>
}

// bf16 with a softcap and a window, static shapes with Sq != Sk: the softcap
// becomes tanh, and bf16 conversions are expanded to integer code.
// CHECK-LABEL: llvm.func @window_softcap_bf16
// CHECK-NOT: {{fpext|fptrunc}} {{.+}}bf16
// CHECK: llvm.bitcast %{{.+}} : bf16 to i16
// CHECK: llvm.intr.tanh({{.+}}) : (f32) -> f32
// CHECK: llvm.intr.exp2({{.+}}) : (f32) -> f32
// CHECK: llvm.intr.log({{.+}}) : (f32) -> f32
// CHECK: llvm.return
// LINALG-LABEL: func.func @window_softcap_bf16
// LINALG: math.tanh
func.func @window_softcap_bf16(%q: tensor<1x100x4x128xbf16>, %k: tensor<1x200x4x128xbf16>, %v: tensor<1x200x4x128xbf16>) -> (tensor<1x100x4x128xbf16>, tensor<1x4x100xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: 32, 8>, softcap = 50.0 : f32} : (tensor<1x100x4x128xbf16>, tensor<1x200x4x128xbf16>, tensor<1x200x4x128xbf16>) -> (tensor<1x100x4x128xbf16>, tensor<1x4x100xf32>)
  return %o, %lse : tensor<1x100x4x128xbf16>, tensor<1x4x100xf32>
}
