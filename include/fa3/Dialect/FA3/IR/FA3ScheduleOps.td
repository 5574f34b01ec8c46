//===- FA3ScheduleOps.td - fa3 schedule structure ops ------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Ops that the schedule passes put into the tile level to say how a kernel
// runs its tile ops, without changing what they compute: the CPU lowering
// inlines them, the Hopper lowering turns them into synchronization.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3SCHEDULEOPS_TD
#define FA3_DIALECT_FA3_IR_FA3SCHEDULEOPS_TD

include "fa3/Dialect/FA3/IR/FA3Dialect.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def FA3_MmaTurnOp : FA3_Op<"mma_turn", [
    SingleBlockImplicitTerminator<"::mlir::fa3::YieldOp">,
    RecursiveMemoryEffects]> {
  let summary = "The MMAs a consumer warpgroup issues in one pingpong turn";
  let description = [{
    Made by `fa3-pingpong`. The body's `fa3.qk`/`fa3.pv` ops (and the tile
    loads and index arithmetic between them) are issued while this consumer
    warpgroup holds the tensor cores: on Hopper it waits for its turn on its
    named barrier once the first MMA's operand tile has landed, issues the
    body's wgmmas, and passes the turn to the other consumer (FlashAttention-3's
    warp-scheduler barriers), so one warpgroup's softmax runs while the
    other's GEMMs do. The op yields the values its body makes that later ops
    read. It computes what its body computes; the CPU lowering inlines it.

    ```mlir
    %s, %o1 = fa3.mma_turn -> (tensor<128x64xf32>, tensor<128x64xf32>) {
      %s = fa3.qk %qt, %kt : ...
      %vt = fa3.load_tile %v[%b, %row, %h] : ...
      %o1 = fa3.pv %p, %vt, %o : ...
      fa3.yield %s, %o1 : tensor<128x64xf32>, tensor<128x64xf32>
    }
    ```
  }];
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "(`->` `(` type($results)^ `)`)? $body attr-dict";
  let hasVerifier = 1;
}

def FA3_YieldOp : FA3_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"MmaTurnOp">]> {
  let summary = "The values an fa3.mma_turn returns";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ValueRange()); }]>];
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // FA3_DIALECT_FA3_IR_FA3SCHEDULEOPS_TD
