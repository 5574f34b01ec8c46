// ptxas assembles the dropout kernels for sm_90a with no injected warpgroup
// waits (C7517/C7519/C7520). The Philox words cost registers: the forward's
// consumers and the d128 backward spill a few words (the d64 backward takes
// 64-row steps with dropout, fa3-select-schedule).
// REQUIRES: ptxas

// RUN: fa3-run %S/Inputs/dropout.mlir --function=fwd_d128_causal --emit=ptx > %t.fwd.ptx
// RUN: %ptxas -arch=sm_90a -v %t.fwd.ptx -o %t.fwd.cubin 2>&1 | FileCheck %s --check-prefix=FWD
// RUN: fa3-run %S/Inputs/dropout.mlir --function=fwd_d64 --emit=ptx > %t.fwd64.ptx
// RUN: %ptxas -arch=sm_90a -v %t.fwd64.ptx -o %t.fwd64.cubin 2>&1 | FileCheck %s --check-prefix=FWD
// RUN: fa3-run %S/Inputs/dropout.mlir --function=bwd_d128_causal --emit=ptx > %t.bwd.ptx
// RUN: %ptxas -arch=sm_90a -v %t.bwd.ptx -o %t.bwd.cubin 2>&1 | FileCheck %s --check-prefix=BWD
// RUN: fa3-run %S/Inputs/dropout.mlir --function=bwd_d256_det --emit=ptx > %t.det.ptx
// RUN: %ptxas -arch=sm_90a -v %t.det.ptx -o %t.det.cubin 2>&1 | FileCheck %s --check-prefix=BWD

// FWD-NOT: {{C7508|C7517|C7519|C7520|error}}
// FWD: Compiling entry function 'fa3_fwd_{{[a-z0-9_]+}}_drop{{[0-9a-f]+}}_s{{[0-9a-f]+}}' for 'sm_90a'
// BWD-NOT: {{C7508|C7517|C7519|C7520|error}}
// BWD: Compiling entry function 'fa3_bwd_{{[a-z0-9_]+}}_drop{{[0-9a-f]+}}_s{{[0-9a-f]+}}' for 'sm_90a'
