// REQUIRES: fa3-plugin
//
// fa3 in upstream mlir-opt (%mlir_opt, the LLVM install's, not fa3-opt),
// loaded from libFA3Plugin.so.

// Without the plugin upstream mlir-opt knows no fa3.
// RUN: not %mlir_opt %s 2>&1 | FileCheck %s --check-prefix=NO-PLUGIN
// NO-PLUGIN: error: Dialect `fa3' not found for custom op 'fa3.attention'

// The dialect plugin parses and prints fa3.attention, the printed form (custom
// and generic) parses again, and it is what fa3-opt prints.
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin | %mlir_opt --load-dialect-plugin=%fa3_plugin | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin --mlir-print-op-generic | %mlir_opt --load-dialect-plugin=%fa3_plugin | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin -o %t.plugin.mlir
// RUN: fa3-opt %s -o %t.fa3.mlir
// RUN: diff %t.plugin.mlir %t.fa3.mlir
// ROUNDTRIP-LABEL: func.func @causal_gqa
// ROUNDTRIP-SAME: (%[[Q:.+]]: tensor<2x?x8x64xf16>, %[[K:.+]]: tensor<2x?x2x64xf16>, %[[V:.+]]: tensor<2x?x2x64xf16>)
// ROUNDTRIP: %[[O:.+]], %[[LSE:.+]] = fa3.attention %[[Q]], %[[K]], %[[V]] {causal}
// ROUNDTRIP-SAME: -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
// ROUNDTRIP: return %[[O]], %[[LSE]]

// The pass plugin registers fa3's passes and pipelines. mlir-opt makes its
// --<pass> flags before it loads plugins, so theirs are reached through
// --pass-pipeline only.
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin --load-pass-plugin=%fa3_plugin --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a})" | FileCheck %s --check-prefix=SM90
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin --load-pass-plugin=%fa3_plugin --pass-pipeline="builtin.module(fa3-select-schedule{target=sm_90a})" -o %t.sm90.plugin.mlir
// RUN: fa3-opt %s --fa3-select-schedule=target=sm_90a -o %t.sm90.fa3.mlir
// RUN: diff %t.sm90.plugin.mlir %t.sm90.fa3.mlir
// RUN: not %mlir_opt %s --load-dialect-plugin=%fa3_plugin --load-pass-plugin=%fa3_plugin --fa3-cpu-pipeline 2>&1 | FileCheck %s --check-prefix=NO-FLAG
// SM90-LABEL: func.func @causal_gqa
// SM90: fa3.attention {{.+}}schedule = #fa3.schedule<block_m = 192, block_n = 128, stages = 2, consumer_wgs = 3,
// NO-FLAG: Unknown command line argument '--fa3-cpu-pipeline'

// The CPU pipeline down to the LLVM dialect, the same as fa3-opt's.
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin --load-pass-plugin=%fa3_plugin --pass-pipeline="builtin.module(fa3-cpu-pipeline)" | FileCheck %s --check-prefix=CPU
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin --load-pass-plugin=%fa3_plugin --pass-pipeline="builtin.module(fa3-cpu-pipeline)" -o %t.cpu.plugin.mlir
// RUN: fa3-opt %s --fa3-cpu-pipeline -o %t.cpu.fa3.mlir
// RUN: diff %t.cpu.plugin.mlir %t.cpu.fa3.mlir
// CPU-NOT: fa3.
// CPU-LABEL: llvm.func @causal_gqa
// CPU: llvm.call @malloc
// CPU: llvm.intr.exp2({{.+}}) : (f32) -> f32
// CPU: llvm.intr.log({{.+}}) : (f32) -> f32
// CPU: llvm.call @free
// CPU: llvm.return
// CPU-NOT: unrealized_conversion_cast

// The pass plugin alone suffices for IR without fa3 ops.
// RUN: echo 'func.func @empty() { return }' | %mlir_opt --load-pass-plugin=%fa3_plugin --pass-pipeline="builtin.module(fa3-cpu-pipeline)" | FileCheck %s --check-prefix=PASSES-ONLY
// PASSES-ONLY: llvm.func @empty()

// The Hopper pipeline, serialized to PTX by the NVVM target the dialect
// plugin attaches.
// RUN: %mlir_opt %s --load-dialect-plugin=%fa3_plugin --load-pass-plugin=%fa3_plugin --pass-pipeline="builtin.module(fa3-hopper-pipeline{format=isa})" | FileCheck %s --check-prefix=HOPPER
// HOPPER: fa3.kernel = @fa3_kernels::@fa3_fwd_f16_d64
// HOPPER: gpu.binary @fa3_kernels
// HOPPER-SAME: chip = "sm_90a"
// HOPPER-SAME: .target sm_90a
// HOPPER-SAME: wgmma.mma_async

func.func @causal_gqa(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return %o, %lse : tensor<2x?x8x64xf16>, tensor<2x8x?xf32>
}
