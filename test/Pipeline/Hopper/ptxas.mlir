// ptxas assembles every kernel of Inputs/kernels.mlir for sm_90a without
// spilling. Needs CUDA's ptxas (lit feature `ptxas`); where CUDA is absent
// the test is UNSUPPORTED, and ptx.mlir still checks the PTX text.
// REQUIRES: ptxas

// RUN: fa3-run %S/Inputs/kernels.mlir --function=d64_full --emit=ptx > %t.d64f.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d64f.ptx -o %t.d64f.cubin 2>&1 | FileCheck %s
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d64_causal --emit=ptx > %t.d64c.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d64c.ptx -o %t.d64c.cubin 2>&1 | FileCheck %s
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d128_full --emit=ptx > %t.d128f.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d128f.ptx -o %t.d128f.cubin 2>&1 | FileCheck %s
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d128_causal --emit=ptx > %t.d128c.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d128c.ptx -o %t.d128c.cubin 2>&1 | FileCheck %s
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d256_full --emit=ptx > %t.d256f.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d256f.ptx -o %t.d256f.cubin 2>&1 | FileCheck %s
// RUN: fa3-run %S/Inputs/kernels.mlir --function=d256_causal --emit=ptx > %t.d256c.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d256c.ptx -o %t.d256c.cubin 2>&1 | FileCheck %s

// No injected warpgroup.arrive/wait serializing the wgmmas (C7517, C7519,
// C7520): the A fragments of P are written before wgmma.fence. No ignored
// setmaxnreg (C7508).
// CHECK-NOT: {{C7508|C7517|C7519|C7520|error}}
// CHECK: Compiling entry function 'fa3_fwd_bf16_d
// CHECK: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// Lazy rescaling's branch around the accumulator's rescale (16-bit and FP8).
// RUN: fa3-run %S/Inputs/lazy-rescale.mlir --function=lr_d128 --emit=ptx > %t.lr.ptx
// RUN: %ptxas -arch=sm_90a -v %t.lr.ptx -o %t.lr.cubin 2>&1 | FileCheck %s
// RUN: fa3-run %S/Inputs/lazy-rescale.mlir --function=lr_fp8 --emit=ptx > %t.lrfp8.ptx
// RUN: %ptxas -arch=sm_90a -v %t.lrfp8.ptx -o %t.lrfp8.cubin 2>&1 | FileCheck %s --check-prefix=FP8

// The FP8 kernels too (no spills at d128 and d256; d64's 192 x 192 tile
// spills 20 bytes at 160 registers a consumer thread, and still measured
// 2-4% faster than its 128-key blocks without spills, SelectSchedule.cpp:
// FP8D64 pins that amount so that more shows here).
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d128_causal --emit=ptx > %t.fp8d128.ptx
// RUN: %ptxas -arch=sm_90a -v %t.fp8d128.ptx -o %t.fp8d128.cubin 2>&1 | FileCheck %s --check-prefix=FP8
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d256 --emit=ptx > %t.fp8d256.ptx
// RUN: %ptxas -arch=sm_90a -v %t.fp8d256.ptx -o %t.fp8d256.cubin 2>&1 | FileCheck %s --check-prefix=FP8
// RUN: fa3-run %S/Inputs/fp8.mlir --function=fp8_d64_causal --emit=ptx > %t.fp8d64.ptx
// RUN: %ptxas -arch=sm_90a -v %t.fp8d64.ptx -o %t.fp8d64.cubin 2>&1 | FileCheck %s --check-prefix=FP8D64
// FP8-NOT: {{C7508|C7517|C7519|C7520|error}}
// FP8: Function properties for fa3_fwd_e4m3_{{[a-z0-9_]+}}_s{{[0-9a-f]+$}}
// FP8-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// FP8D64-NOT: {{C7508|C7517|C7519|C7520|error}}
// FP8D64: Function properties for fa3_fwd_e4m3_d64_{{[a-z0-9_]+}}_s{{[0-9a-f]+$}}
// FP8D64-NEXT: 24 bytes stack frame, 20 bytes spill stores, 20 bytes spill loads

// The FP8 preparation kernels (fa3.hadamard, fa3.quantize).
// RUN: fa3-run %S/Inputs/fp8-prep.mlir --function=hadamard_d128 --emit=ptx > %t.had128.ptx
// RUN: %ptxas -arch=sm_90a -v %t.had128.ptx -o %t.had128.cubin 2>&1 | FileCheck %s --check-prefix=PREP
// RUN: fa3-run %S/Inputs/fp8-prep.mlir --function=hadamard_d256 --emit=ptx > %t.had256.ptx
// RUN: %ptxas -arch=sm_90a -v %t.had256.ptx -o %t.had256.cubin 2>&1 | FileCheck %s --check-prefix=PREP
// RUN: fa3-run %S/Inputs/fp8-prep.mlir --function=quantize_f32 --emit=ptx > %t.quant.ptx
// RUN: %ptxas -arch=sm_90a -v %t.quant.ptx -o %t.quant.cubin 2>&1 | FileCheck %s --check-prefix=PREP
// RUN: fa3-run %S/Inputs/fp8-prep.mlir --function=quantize_hadamard_d256 --emit=ptx > %t.quanth.ptx
// RUN: %ptxas -arch=sm_90a -v %t.quanth.ptx -o %t.quanth.cubin 2>&1 | FileCheck %s --check-prefix=PREP
// PREP-NOT: {{warning|error}}
// PREP: Function properties for fa3_{{hadamard|quantize}}_
// PREP-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
