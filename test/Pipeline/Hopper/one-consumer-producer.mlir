// RUN: fa3-run %s --function=attn --emit=ptx > %t.ptx
// RUN: FileCheck %s < %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}

// A forward with one consumer warpgroup and a producer (256 threads,
// block_m = 64, FlashAttention-3's 56/256 split): the kernel says
// .minnctapersm 1, without which ptxas cannot tell the register count at
// entry and ignores every setmaxnreg (C7508).
// CHECK: .reqntid 256, 1, 1
// CHECK-NEXT: .minnctapersm 1
// CHECK: setmaxnreg.dec.sync.aligned.u32 56
// CHECK: setmaxnreg.inc.sync.aligned.u32 256
// PTXAS-NOT: C7508
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: C7508
func.func @attn(%q: tensor<?x?x32x64xbf16>, %k: tensor<?x?x32x64xbf16>, %v: tensor<?x?x32x64xbf16>) -> (tensor<?x?x32x64xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 56, consumer_regs = 256, pingpong = false, intra_wg_overlap = false, persistent = true, cluster = 1>} : (tensor<?x?x32x64xbf16>, tensor<?x?x32x64xbf16>, tensor<?x?x32x64xbf16>) -> (tensor<?x?x32x64xbf16>, tensor<?x32x?xf32>)
  return %o, %lse : tensor<?x?x32x64xbf16>, tensor<?x32x?xf32>
}
