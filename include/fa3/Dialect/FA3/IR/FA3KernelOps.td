//===- FA3KernelOps.td - fa3 Hopper kernel-level operations -*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The Hopper kernel level sits between the tile level and NVVM: the kernel
// builders (convert-fa3-tile-to-hopper, convert-fa3-to-hopper) emit LLVM and
// NVVM ops where MLIR has the instruction, and these ops where it does not
// (wgmma with an A operand in registers and accumulators tied in place;
// named barriers at a chosen id). convert-fa3-kernel-to-nvvm lowers each to
// inline PTX, one pattern per op.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3KERNELOPS_TD
#define FA3_DIALECT_FA3_IR_FA3KERNELOPS_TD

include "fa3/Dialect/FA3/IR/FA3Dialect.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/CommonTypeConstraints.td"

def FA3_WgmmaOp : FA3_Op<"wgmma", [AttrSizedOperandSegments]> {
  let summary = "One warpgroup MMA, m64nNkK, accumulating in place in f32";
  let description = [{
    `wgmma.mma_async.sync.aligned.m64nNkK.f32.T.T` of one warpgroup:
    `accumulators` (N / 2 f32 registers per thread, the m64nN f32 fragment)
    `+= A · B` when `scale_d` is non-zero, `= A · B` when it is zero. B is a
    64-bit shared-memory matrix descriptor; A is either one too
    (`a_descriptor`, SS) or four 32-bit registers of packed elements
    (`a_registers`, RS: two bf16/f16 or four e4m3 each). K is 16 for
    bf16/f16 and 32 for e4m3; `trans_a`/`trans_b` read the shared operands
    MN-major (16-bit only; the RS form's B is always MN-major for 16-bit
    types and K-major for e4m3). The results are the new accumulators: the
    lowering ties each to its input register, so the fragment stays in
    place across a K loop. Asynchronous like the instruction: the caller
    fences and waits (`nvvm.wgmma.*`) around it.

    ```mlir
    %d:32 = fa3.wgmma %acc[...], desc_a %da, desc_b %db, scale_d %one
        {element_type = bf16, trans_a = false, trans_b = true} : ...
    ```
  }];
  let arguments = (ins Variadic<F32>:$accumulators,
                       Variadic<I32>:$a_registers,
                       Optional<I64>:$a_descriptor,
                       I64:$b_descriptor,
                       I32:$scale_d,
                       TypeAttr:$element_type,
                       UnitAttr:$trans_a,
                       UnitAttr:$trans_b);
  let results = (outs Variadic<F32>:$results);
  let assemblyFormat = [{
    `acc` `(` $accumulators `)` (`a` `(` $a_registers^ `)`)?
    (`desc_a` $a_descriptor^)? `desc_b` $b_descriptor `scale_d` $scale_d
    attr-dict `:` type($results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The K of one instruction: 16 for bf16/f16, 32 for e4m3.
    int64_t getK();
    /// The N of the instruction: twice the accumulators per thread.
    int64_t getN() { return 2 * getAccumulators().size(); }
  }];
}

def FA3_NamedBarrierOp : FA3_Op<"named_barrier"> {
  let summary = "bar.sync (or bar.arrive) on a named barrier of the CTA";
  let description = [{
    Synchronizes `threads` threads of the CTA (a multiple of 32) on named
    barrier `id` (0-15, a run-time value so that two warpgroups can take
    turns): `bar.sync`, or with `arrive` `bar.arrive`, which signals without
    waiting. Warp specialization and pingpong order warpgroups with these;
    MLIR's `nvvm.barrier` takes only the aligned, all-threads form.

    ```mlir
    fa3.named_barrier %id {threads = 256 : i64}
    fa3.named_barrier %id {threads = 256 : i64, arrive}
    ```
  }];
  let arguments = (ins I32:$id, I64Attr:$threads, UnitAttr:$arrive);
  let assemblyFormat = "$id attr-dict";
  let hasVerifier = 1;
}

#endif // FA3_DIALECT_FA3_IR_FA3KERNELOPS_TD
