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
include "fa3/Dialect/FA3/IR/FA3TileOps.td"
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

def FA3_WarpSpecializeOp : FA3_Op<"warp_specialize", [
    RecursiveMemoryEffects]> {
  let summary = "A producer warpgroup filling the tile rings, consumers computing";
  let description = [{
    Made by `fa3-warp-specialize` in a grid's `scf.forall` body:
    FlashAttention-3's warp specialization. The `producer` region is what
    one producer warpgroup (with `setmaxnreg` lowered to `producer_regs`)
    runs: `fa3.ring_fill` ops issuing the loads of the query tile and of the
    key and value tiles, in the order it fills their rings. The `consumers`
    region is what the consumer warpgroups (raised to `consumer_regs`) run:
    the tile ops, whose `fa3.load_tile` of K and V read those rings in the
    order they were filled (the n-th key tile a consumer loads is the n-th
    one the producer filled), and whose results the op returns.

    ```mlir
    %o, %lse = fa3.warp_specialize -> (tensor<128x64xbf16>, tensor<128xf32>)
        producer {
      fa3.ring_fill %q[%b, %q0, %h] : tensor<?x?x4x64xbf16> -> tensor<128x64xbf16>
      scf.for %i = %c0 to %n step %c1 {
        ...
        fa3.ring_fill %v[%b, %row, %hkv] use %i : tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>
      }
      fa3.yield
    } consumers {
      %qt = fa3.load_tile %q[%b, %q0, %h] : ...
      ... the key loop, fa3.finalize ...
      fa3.yield %ot, %lt : tensor<128x64xbf16>, tensor<128xf32>
    } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
    ```

    The CPU lowering runs the consumers region (the loads it reads are the
    tiles the producer would fill).
  }];
  let arguments = (ins I64Attr:$producer_regs, I64Attr:$consumer_regs);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$producer, SizedRegion<1>:$consumers);
  let assemblyFormat = [{
    (`->` `(` type($results)^ `)`)? `producer` $producer `consumers` $consumers
    attr-dict
  }];
  let hasVerifier = 1;
}

def FA3_RingSource : TypeConstraint<
    Or<[FA3_BSHDTensor.predicate, FA3_BHSTensor.predicate]>,
    "4-D [batch, seq, heads, dim] or 3-D [batch, heads, seq] tensor",
    "::mlir::RankedTensorType">;

def FA3_RingFillOp : FA3_Op<"ring_fill", [MemoryEffects<[MemWrite]>,
                                           AttrSizedOperandSegments]> {
  let summary = "The producer's load of one tile into the next slot of its ring";
  let description = [{
    Loads the `tile`-shaped block of `source` at `[batch, row, head]` (the
    coordinates of the consumers' `fa3.load_tile` it feeds) into the ring of
    its source. `use` is the tile's number among the ring's fills of this
    query tile (key and value tiles: the slot is `use mod stages`, and a
    slot is refilled once the consumers released its previous use); a query
    tile has no `use` (the kernel keeps its query tiles per CTA). A query
    tile of packed heads (PackGQA) keeps its load's `packed_heads`. A key or
    value tile of a paged cache (`fa3.load_paged_tile`) keeps its
    `page_table`: `source` is then `[num_pages, page_size, H, D]` and `row`
    the position in batch `batch`'s sequence. A statistics tile (the
    backward's LSE and Δ, `fa3.load_stats` in the consumers) has an f32
    `[B, H, S]` source and a 1-D tile of `source[batch, head, row + i]`.
    Only in the producer region of an `fa3.warp_specialize`.

    ```mlir
    fa3.ring_fill %kc[%b, %k0, %h] pages %pt : tensor<?x?xi32> use %i
        : tensor<?x?x8x128xbf16> -> tensor<128x128xbf16>
    ```
  }];
  let arguments = (ins FA3_RingSource:$source, Index:$batch, Index:$row,
                       Index:$head, Optional<FA3_PageTableTensor>:$page_table,
                       Optional<Index>:$use, TypeAttr:$tile,
                       OptionalAttr<I64Attr>:$packed_heads);
  let assemblyFormat = [{
    $source `[` $batch `,` $row `,` $head `]`
    (`pages` $page_table^ `:` type($page_table))? (`use` $use^)? attr-dict `:`
    type($source) `->` $tile
  }];
  let hasVerifier = 1;
}

def FA3_YieldOp : FA3_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["MmaTurnOp", "WarpSpecializeOp"]>]> {
  let summary = "The values an fa3.mma_turn or fa3.warp_specialize region returns";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ValueRange()); }]>];
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // FA3_DIALECT_FA3_IR_FA3SCHEDULEOPS_TD
