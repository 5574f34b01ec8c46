// ptxas assembles the backward kernels for sm_90a with no injected
// warpgroup waits (C7517/C7519/C7520: a wgmma accumulator or A fragment
// touched between fence and wait) and keeps the producer/consumer register
// split (C7508: setmaxnreg ignored, which the kernel's .minnctapersm 1
// prevents). With 240 registers a consumer thread, d64, d128 and d256 do
// not spill; the softcap's derivative spills a few words at d128.
// REQUIRES: ptxas

// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d64_causal --emit=ptx > %t.d64.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d64.ptx -o %t.d64.cubin 2>&1 | FileCheck %s --check-prefixes=CHECK,NOSPILL
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d128 --emit=ptx > %t.d128.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d128.ptx -o %t.d128.cubin 2>&1 | FileCheck %s --check-prefixes=CHECK,NOSPILL
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d256_causal --emit=ptx > %t.d256.ptx
// RUN: %ptxas -arch=sm_90a -v %t.d256.ptx -o %t.d256.cubin 2>&1 | FileCheck %s --check-prefixes=CHECK,NOSPILL
// RUN: fa3-run %S/Inputs/backward.mlir --function=bwd_d128_window_softcap --emit=ptx > %t.cap.ptx
// RUN: %ptxas -arch=sm_90a -v %t.cap.ptx -o %t.cap.cubin 2>&1 | FileCheck %s

// CHECK-NOT: {{C7508|C7517|C7519|C7520|error}}
// CHECK: Compiling entry function 'fa3_bwd_{{[a-z0-9_]+}}_s{{[0-9a-f]+}}' for 'sm_90a'
// NOSPILL: Function properties for fa3_bwd_{{[a-z0-9_]+}}_s{{[0-9a-f]+$}}
// NOSPILL-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
