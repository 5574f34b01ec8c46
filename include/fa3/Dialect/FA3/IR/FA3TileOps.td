//===- FA3TileOps.td - fa3 tile-level (L1) operations -------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The tile level sits between fa3.attention and a target. Its tiles are
// static-shaped tensors: a CPU lowering turns them into linalg, the Hopper
// lowering into TMA loads, wgmma and register-fragment softmax.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3TILEOPS_TD
#define FA3_DIALECT_FA3_IR_FA3TILEOPS_TD

include "fa3/Dialect/FA3/IR/FA3Dialect.td"
include "fa3/Dialect/FA3/IR/FA3Attrs.td"
include "mlir/Interfaces/ParallelCombiningOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/CommonTypeConstraints.td"

def FA3_Tile2D : TypeConstraint<
    And<[HasStaticShapePred, HasAnyRankOfPred<[2]>, IsTensorTypePred,
         SubstLeaves<"$_self", "::llvm::cast<::mlir::ShapedType>($_self).getElementType()",
                     AnyTypeOf<[F16, BF16, F32, F8E4M3FN]>.predicate>]>,
    "statically shaped 2-D tensor of f16, bf16, f32 or f8E4M3FN",
    "::mlir::RankedTensorType">;
def FA3_Tile1D : TypeConstraint<
    And<[HasStaticShapePred, HasAnyRankOfPred<[1]>, IsTensorTypePred,
         SubstLeaves<"$_self", "::llvm::cast<::mlir::ShapedType>($_self).getElementType()",
                     F32.predicate>]>,
    "statically shaped 1-D tensor of f32", "::mlir::RankedTensorType">;
def FA3_F32Tile2D : TypeConstraint<
    And<[FA3_Tile2D.predicate,
         SubstLeaves<"$_self", "::llvm::cast<::mlir::ShapedType>($_self).getElementType()",
                     F32.predicate>]>,
    "statically shaped 2-D tensor of f32", "::mlir::RankedTensorType">;
def FA3_BSHDTensor : TypeConstraint<
    And<[IsTensorTypePred, HasAnyRankOfPred<[4]>]>,
    "4-D [batch, seq, heads, dim] tensor", "::mlir::RankedTensorType">;
def FA3_PageTableTensor : Type<
    And<[IsTensorTypePred, HasAnyRankOfPred<[2]>,
         SubstLeaves<"$_self", "::llvm::cast<::mlir::ShapedType>($_self).getElementType()",
                     I32.predicate>]>,
    "2-D [batch, pages] tensor of i32", "::mlir::RankedTensorType">;
def FA3_BHSTensor : TypeConstraint<
    And<[IsTensorTypePred, HasAnyRankOfPred<[3]>]>,
    "3-D [batch, heads, seq] tensor", "::mlir::RankedTensorType">;

class FA3_TileOp<string mnemonic, list<Trait> traits = []>
    : FA3_Op<mnemonic, !listconcat(traits, [Pure])> {
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tile loads and stores
//===----------------------------------------------------------------------===//

def FA3_LoadTileOp : FA3_TileOp<"load_tile"> {
  let summary = "Load rows [row, row + R) of one (batch, head) slice";
  let description = [{
    `result[i, d] = source[batch, row + i, head, d]` for `row + i < end`
    and 0 for the rows past the end, as a TMA load with out-of-bounds zero
    fill does. `end` is `dim(source, 1)`, or `min(limit, dim(source, 1))`
    with a `limit`: the end of one sequence of a packed variable-length
    batch (`fa3.attention_varlen`). The tile's column count equals the
    source's head dim.

    With `packed_heads = G` (PackGQA) the tile holds G heads of each query
    row: tile row `r` is `source[batch, row + r / G, head + r % G, :]`.

    ```mlir
    %t = fa3.load_tile %q[%b, %row, %h] : tensor<2x?x8x64xf16> -> tensor<128x64xf16>
    %u = fa3.load_tile %q[%c0, %row, %h] limit %end : tensor<1x?x8x64xf16> -> tensor<128x64xf16>
    ```
  }];
  let arguments = (ins FA3_BSHDTensor:$source, Index:$batch, Index:$row,
                       Index:$head, Optional<Index>:$limit,
                       OptionalAttr<I64Attr>:$packed_heads);
  let results = (outs FA3_Tile2D:$result);
  let assemblyFormat = [{
    $source `[` $batch `,` $row `,` $head `]` (`limit` $limit^)? attr-dict `:`
    type($source) `->` type($result)
  }];
  let builders = [
    OpBuilder<(ins "Type":$result, "Value":$source, "Value":$batch,
                   "Value":$row, "Value":$head), [{
      build($_builder, $_state, result, source, batch, row, head, Value(),
            IntegerAttr());
    }]>,
    OpBuilder<(ins "Type":$result, "Value":$source, "Value":$batch,
                   "Value":$row, "Value":$head, "Value":$limit), [{
      build($_builder, $_state, result, source, batch, row, head, limit,
            IntegerAttr());
    }]>];
}

def FA3_StoreTileOp : FA3_TileOp<"store_tile",
    [AllTypesMatch<["dest", "result"]>]> {
  let summary = "Store a tile's rows into one (batch, head) slice";
  let description = [{
    Returns `dest` with `dest[batch, row + i, head, :] = tile[i, :]` for the
    rows with `row + i < end`; rows past the end are dropped. `end` is
    `dim(dest, 1)`, or `min(limit, dim(dest, 1))` with a `limit` (as in
    `fa3.load_tile`). With `packed_heads = G`, tile row `r` goes to
    `dest[batch, row + r / G, head + r % G, :]`.

    ```mlir
    %o1 = fa3.store_tile %t into %o[%b, %row, %h] : tensor<128x64xf16> into tensor<2x?x8x64xf16>
    ```
  }];
  let arguments = (ins FA3_Tile2D:$tile, FA3_BSHDTensor:$dest, Index:$batch,
                       Index:$row, Index:$head, Optional<Index>:$limit,
                       OptionalAttr<I64Attr>:$packed_heads);
  let results = (outs FA3_BSHDTensor:$result);
  let assemblyFormat = [{
    $tile `into` $dest `[` $batch `,` $row `,` $head `]` (`limit` $limit^)?
    attr-dict `:` type($tile) `into` type($dest)
  }];
  let builders = [
    OpBuilder<(ins "Type":$result, "Value":$tile, "Value":$dest,
                   "Value":$batch, "Value":$row, "Value":$head), [{
      build($_builder, $_state, result, tile, dest, batch, row, head, Value(),
            IntegerAttr());
    }]>,
    OpBuilder<(ins "Type":$result, "Value":$tile, "Value":$dest,
                   "Value":$batch, "Value":$row, "Value":$head,
                   "Value":$limit), [{
      build($_builder, $_state, result, tile, dest, batch, row, head, limit,
            IntegerAttr());
    }]>];
}

def FA3_LoadStatsOp : FA3_TileOp<"load_stats"> {
  let summary = "Load per-row statistics (LSE, rowsum) of rows [row, row + R)";
  let description = [{
    `result[i] = source[batch, head, row + i]` for rows inside the sequence
    (`row + i < dim(source, 2)`, and `< limit` with a `limit`), 0 past its
    end. Used by the backward to read the forward's LSE.

    ```mlir
    %l = fa3.load_stats %lse[%b, %h, %row] : tensor<2x8x?xf32> -> tensor<128xf32>
    ```
  }];
  let arguments = (ins FA3_BHSTensor:$source, Index:$batch, Index:$head,
                       Index:$row, Optional<Index>:$limit);
  let results = (outs FA3_Tile1D:$result);
  let assemblyFormat = [{
    $source `[` $batch `,` $head `,` $row `]` (`limit` $limit^)? attr-dict `:`
    type($source) `->` type($result)
  }];
  let builders = [
    OpBuilder<(ins "Type":$result, "Value":$source, "Value":$batch,
                   "Value":$head, "Value":$row), [{
      build($_builder, $_state, result, source, batch, head, row, Value());
    }]>];
}

def FA3_StoreStatsOp : FA3_TileOp<"store_stats",
    [AllTypesMatch<["dest", "result"]>]> {
  let summary = "Store per-row statistics into [batch, head, row + i]";
  let description = [{
    Returns `dest` with `dest[batch, head, row + i] = tile[i]` for the rows
    inside the sequence: `row + i < dim(dest, 2)`, and `< limit` with a
    `limit` (as in `fa3.store_tile`). With `packed_heads = G`, entry `r`
    goes to `dest[batch, head + r % G, row + r / G]`.

    ```mlir
    %lse1 = fa3.store_stats %l into %lse[%b, %h, %row] : tensor<128xf32> into tensor<2x8x?xf32>
    ```
  }];
  let arguments = (ins FA3_Tile1D:$tile, FA3_BHSTensor:$dest, Index:$batch,
                       Index:$head, Index:$row, Optional<Index>:$limit,
                       OptionalAttr<I64Attr>:$packed_heads);
  let results = (outs FA3_BHSTensor:$result);
  let assemblyFormat = [{
    $tile `into` $dest `[` $batch `,` $head `,` $row `]` (`limit` $limit^)?
    attr-dict `:` type($tile) `into` type($dest)
  }];
  let builders = [
    OpBuilder<(ins "Type":$result, "Value":$tile, "Value":$dest,
                   "Value":$batch, "Value":$head, "Value":$row), [{
      build($_builder, $_state, result, tile, dest, batch, head, row, Value(),
            IntegerAttr());
    }]>,
    OpBuilder<(ins "Type":$result, "Value":$tile, "Value":$dest,
                   "Value":$batch, "Value":$head, "Value":$row,
                   "Value":$limit), [{
      build($_builder, $_state, result, tile, dest, batch, head, row, limit,
            IntegerAttr());
    }]>];
}

def FA3_ParallelStoreTileOp : FA3_Op<"parallel_store_tile", [
    DeclareOpInterfaceMethods<ParallelCombiningOpInterface>]> {
  let summary = "store_tile as one parallel iteration's contribution";
  let description = [{
    The form of `fa3.store_tile` inside `scf.forall.in_parallel`: the
    iteration's tile goes into rows `[row, row + R)` of `dest`, a shared
    output of the enclosing `scf.forall` (rows past `dim(dest, 1)`, and past
    `limit` when given, are dropped: the end of one sequence of a packed
    variable-length batch). The iterations write disjoint rows, so the
    forall's result is the union of their tiles. `fa3-tile{grid=true}` emits
    it. With `packed_heads = G` (PackGQA), tile row `r` goes to
    `dest[batch, row + r / G, head + r % G, :]`, as with `fa3.store_tile`.

    ```mlir
    scf.forall.in_parallel {
      fa3.parallel_store_tile %ot into %o[%b, %q0, %h] : tensor<128x64xbf16> into tensor<?x?x8x64xbf16>
      fa3.parallel_store_tile %ut into %u[%c0, %r, %h] limit %end : tensor<128x64xbf16> into tensor<1x?x8x64xbf16>
    }
    ```
  }];
  let arguments = (ins FA3_Tile2D:$tile, FA3_BSHDTensor:$dest, Index:$batch,
                       Index:$row, Index:$head, Optional<Index>:$limit,
                       OptionalAttr<I64Attr>:$packed_heads);
  let assemblyFormat = [{
    $tile `into` $dest `[` $batch `,` $row `,` $head `]` (`limit` $limit^)?
    attr-dict `:` type($tile) `into` type($dest)
  }];
  let hasVerifier = 1;
}

def FA3_ParallelStoreStatsOp : FA3_Op<"parallel_store_stats", [
    DeclareOpInterfaceMethods<ParallelCombiningOpInterface>]> {
  let summary = "store_stats as one parallel iteration's contribution";
  let description = [{
    The form of `fa3.store_stats` inside `scf.forall.in_parallel`:
    `dest[batch, head, row + i] = tile[i]` for the rows inside the sequence
    (`row + i < dim(dest, 2)`, and `< limit` with a `limit`), `dest` a
    shared output of the enclosing `scf.forall`. With `packed_heads = G`,
    entry `r` goes to `dest[batch, head + r % G, row + r / G]`.

    ```mlir
    fa3.parallel_store_stats %lt into %l[%b, %h, %q0] : tensor<128xf32> into tensor<?x8x?xf32>
    ```
  }];
  let arguments = (ins FA3_Tile1D:$tile, FA3_BHSTensor:$dest, Index:$batch,
                       Index:$head, Index:$row, Optional<Index>:$limit,
                       OptionalAttr<I64Attr>:$packed_heads);
  let assemblyFormat = [{
    $tile `into` $dest `[` $batch `,` $head `,` $row `]` (`limit` $limit^)?
    attr-dict `:` type($tile) `into` type($dest)
  }];
  let hasVerifier = 1;
}

def FA3_AccumulateTileOp : FA3_Op<"accumulate_tile", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Add an f32 tile into rows of a shared [B, S, H, D] buffer";
  let description = [{
    `dest[batch, row + i, head, :] += tile[i, :]` for the rows with
    `row + i < end` (`end` as in `fa3.store_tile`: `dim(dest, 1)`, or
    `min(limit, dim(dest, 1))`). `dest` is a buffer, not a tensor: the
    iterations of a grid `scf.forall` (`fa3-tile{grid=true}` of
    `fa3.attention_grad`: every key block adds its share of dQ = dS K to the
    query rows it saw) add to the same rows, and their additions are
    atomic, in no particular order, which tensor semantics cannot say. On
    Hopper each is a `cp.reduce.async.bulk ... add.f32` of a shared-memory
    tile (or `red.global.add`).

    `ordered`: the additions into one tile's rows land in the order of the
    grid's key block (the enclosing forall's first induction variable), so
    that the sums are bit-identical from run to run (`deterministic`).

    ```mlir
    fa3.accumulate_tile %dq into %acc[%b, %row, %h] : tensor<64x128xf32> into memref<?x?x8x128xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$tile,
                       Arg<MemRefRankOf<[F32], [4]>, "", [MemRead, MemWrite]>:$dest,
                       Index:$batch, Index:$row, Index:$head,
                       Optional<Index>:$limit, UnitAttr:$ordered);
  let assemblyFormat = [{
    $tile `into` $dest `[` $batch `,` $row `,` $head `]` (`limit` $limit^)?
    attr-dict `:` type($tile) `into` type($dest)
  }];
  let hasVerifier = 1;
}

def FA3_LoadPagedTileOp : FA3_TileOp<"load_paged_tile"> {
  let summary = "Load keys [row, row + R) of one sequence from a paged cache";
  let description = [{
    `cache` is `[num_pages, page_size, H, D]`. With `j = row + i` and
    `P = page_size`, `result[i, d] = cache[page_table[batch, j / P], j % P,
    head, d]` for `j < limit` and 0 for the rows past it. A page table entry
    outside `[0, num_pages)` or a page index past the table's width is the
    caller's error; the CPU lowering clamps both so that it never reads
    outside the tensors.

    ```mlir
    %t = fa3.load_paged_tile %kc[%pt, %b, %k0, %h] limit %len
        : tensor<?x16x2x64xbf16>, tensor<?x?xi32> -> tensor<64x64xbf16>
    ```
  }];
  let arguments = (ins FA3_BSHDTensor:$cache, FA3_PageTableTensor:$page_table,
                       Index:$batch, Index:$row, Index:$head, Index:$limit);
  let results = (outs FA3_Tile2D:$result);
  let assemblyFormat = [{
    $cache `[` $page_table `,` $batch `,` $row `,` $head `]` `limit` $limit
    attr-dict `:` type($cache) `,` type($page_table) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// One query block
//===----------------------------------------------------------------------===//

def FA3_AttentionBlockOp : FA3_TileOp<"attention_block",
    [AttrSizedOperandSegments]> {
  let summary = "Attention of one query tile against all keys of one head";
  let description = [{
    The unit of parallel work produced by `fa3-tile`: the query tile holds
    rows `[q_start, q_start + block_m)` of a sequence of `q_len` rows (rows
    past `q_len` are padding whose results are dropped), and attends to the
    keys and values of `(batch, kv_head)`. Results are the output tile (in
    the element type of `value`) and the natural-log LSE of each row.
    `fa3-fuse-softmax` expands it into a loop over key blocks with an online
    softmax. The attributes are those of `fa3.attention` with the scale
    resolved and the schedule chosen; `probs_scale` (FP8: the e4m3 rounding
    of P) is passed on to its `fa3.pv` steps.

    Where the keys are (all three optional):
    * `key_len`: the sequence has that many keys (default `dim(key, 1)`):
      the valid length of a KV cache, or of one sequence of a packed batch;
    * `key_start`: its key `j` is row `key_start + j` of `key`/`value`
      (default 0; a packed variable-length batch, with `batch` = 0);
    * `pages`: `key`/`value` are a paged cache `[num_pages, page_size, Hkv,
      D]` and key `j` lives in page `page_table[batch, j / page_size]` at
      slot `j % page_size` (needs `key_len`, excludes `key_start`).
    Masks and the causal diagonal are in the sequence's own coordinates:
    query row `r` sees key `j <= r + key_len - q_len`.

    `packed_heads = G` (PackGQA): the query tile holds the G query heads
    of `kv_head` for each of its queries (tile row `r` is query
    `q_start + r / G`), as `fa3.load_tile {packed_heads}` loads it.

    `split [%begin, %end]` makes it one split of a split-KV attention: only
    the key *blocks* (of `block_n` keys) in `[begin, end)` take part, the
    others are left to the other splits. Its output is then f32 (the
    split's normalized partial O) and its LSE that of its keys alone;
    `fa3.combine_splits` merges the splits.

    `dropout(%rng, %stream)` with `dropout = p`: the probabilities of each
    key block pass through `fa3.dropout` (stream `batch · Hq + query head`)
    before they multiply V.

    FP8 (e4m3 query tile, `key` and `value`): `descale(%qk, %v)` are the
    scalars that dequantize the block, `q_descale · k_descale` and
    `v_descale` of its (batch, key/value head): the true scores are `qk ·
    (Q Kᵀ)` and the true values `v · V`. `probs_scale` must then be set
    (the e4m3 rounding of P; `fa3.pv`).

    ```mlir
    %o, %lse = fa3.attention_block %qt, %k, %v, %b, %hkv, %q0, %sq
        {causal, scale = 1.250000e-01 : f32, schedule = #fa3.schedule<...>}
        : tensor<64x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>
        -> tensor<64x64xf16>, tensor<64xf32>
    ```
  }];
  let arguments = (ins FA3_Tile2D:$query_tile, FA3_BSHDTensor:$key,
                       FA3_BSHDTensor:$value, Index:$batch, Index:$kv_head,
                       Index:$q_start, Index:$q_len,
                       Optional<Index>:$key_start, Optional<Index>:$key_len,
                       Optional<FA3_PageTableTensor>:$page_table,
                       Optional<Index>:$split_begin, Optional<Index>:$split_end,
                       Optional<TensorOf<[I64]>>:$rng,
                       Optional<Index>:$dropout_stream,
                       Optional<F32>:$qk_descale, Optional<F32>:$v_descale,
                       UnitAttr:$causal, F32Attr:$scale,
                       OptionalAttr<DenseI64ArrayAttr>:$window,
                       OptionalAttr<F32Attr>:$softcap,
                       FA3_ScheduleAttr:$schedule,
                       OptionalAttr<F32Attr>:$probs_scale,
                       OptionalAttr<I64Attr>:$packed_heads,
                       OptionalAttr<F32Attr>:$dropout);
  let results = (outs FA3_Tile2D:$output, FA3_Tile1D:$lse);
  let assemblyFormat = [{
    $query_tile `,` $key `,` $value `,` $batch `,` $kv_head `,` $q_start `,`
    $q_len (`key_start` $key_start^)? (`key_len` $key_len^)?
    (`pages` $page_table^)? (`split` `[` $split_begin^ `,` $split_end `]`)?
    (`dropout` `(` $rng^ `,` $dropout_stream `)`)?
    (`descale` `(` $qk_descale^ `,` $v_descale `)`)?
    attr-dict `:` type($query_tile) `,` type($key)
    `,` type($value) (`,` type($page_table)^)? (`,` type($rng)^)? `->`
    type($output) `,` type($lse)
  }];
  let extraClassDeclaration = [{
    /// Whether the keys are read through a page table.
    bool isPaged() { return static_cast<bool>(getPageTable()); }
  }];
}

//===----------------------------------------------------------------------===//
// Online-softmax steps
//===----------------------------------------------------------------------===//

def FA3_QKOp : FA3_TileOp<"qk"> {
  let summary = "Raw scores S = Q Kᵀ of a query tile and a key tile, in f32";
  let description = [{
    `scores[i, j] = Σ_d query[i, d] · key[j, d]`, accumulated in f32. On
    Hopper both operands come from shared memory (SS wgmma). Both tiles have
    one element type; e4m3 tiles give the raw products of the quantized
    values (the descales are applied by `fa3.online_softmax` and
    `fa3.finalize`).

    ```mlir
    %s = fa3.qk %qt, %kt : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FA3_Tile2D:$query, FA3_Tile2D:$key);
  let results = (outs FA3_F32Tile2D:$scores);
  let assemblyFormat = [{
    $query `,` $key attr-dict `:` type($query) `,` type($key) `->` type($scores)
  }];
}

def FA3_SoftcapOp : FA3_TileOp<"softcap",
    [AllTypesMatch<["scores", "result"]>]> {
  let summary = "Soft-cap raw scores, keeping them in unscaled units";
  let description = [{
    `result = (softcap / scale) · tanh(scores · scale / softcap)`, so that
    `scale · result = softcap · tanh(scale · scores / softcap)`: the softmax
    that follows keeps folding `scale` into its exp2. With `descale %d`
    (FP8: raw products of quantized values, whose true scores are `d ·
    scores`) the scale is `scale · d` in both places, so the result stays in
    raw units for the softmax that takes the same `d`.

    ```mlir
    %c = fa3.softcap %s {scale = 1.250000e-01 : f32, softcap = 3.000000e+01 : f32} : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$scores, Optional<F32>:$descale,
                       F32Attr:$scale, F32Attr:$softcap);
  let results = (outs FA3_F32Tile2D:$result);
  let assemblyFormat =
      "$scores (`descale` $descale^)? attr-dict `:` type($scores)";
}

def FA3_MaskOp : FA3_TileOp<"mask", [AllTypesMatch<["scores", "result"]>]> {
  let summary = "Set the scores of invisible (row, column) pairs to -inf";
  let description = [{
    Entry `(i, j)` stands for query row `r = q_start + i` and key column
    `c = k_start + j`. It becomes -inf when `c >= k_len`, or when `causal`
    and `c > r + k_len - q_len`, or outside the `window`
    `[r + k_len - q_len - left, r + k_len - q_len + right]`. `fa3-fuse-softmax`
    emits it only on key blocks that cross such a boundary. With
    `packed_heads = G` row `i` is query `r = q_start + i / G` (PackGQA).

    ```mlir
    %m = fa3.mask %s, %q0, %k0, %sq, %sk {causal} : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$scores, Index:$q_start, Index:$k_start,
                       Index:$q_len, Index:$k_len, UnitAttr:$causal,
                       OptionalAttr<DenseI64ArrayAttr>:$window,
                       OptionalAttr<I64Attr>:$packed_heads);
  let results = (outs FA3_F32Tile2D:$result);
  let assemblyFormat = [{
    $scores `,` $q_start `,` $k_start `,` $q_len `,` $k_len attr-dict `:`
    type($scores)
  }];
}

def FA3_OnlineSoftmaxOp : FA3_TileOp<"online_softmax", [
    AllTypesMatch<["scores", "probs"]>,
    AllTypesMatch<["row_max", "row_sum", "new_max", "new_sum", "correction"]>]> {
  let summary = "One step of the online softmax over a block of scores";
  let description = [{
    With `c = exp2_scale` (the softmax scale times log2(e)) and
    `m' = max(row_max, max_j scores[:, j])`:
    * `probs = exp2(c · scores - c · m')`,
    * `correction = exp2(c · row_max - c · m')` (the factor that rescales
      the accumulator and the running sum),
    * `new_sum = correction · row_sum + Σ_j probs`, `new_max = m'`.
    A row whose max is still -inf subtracts 0 instead, so fully masked rows
    give zeros, never NaN.

    With `descale %d` (an f32 scalar, FP8: `q_descale · k_descale`) the
    scores are raw products of quantized values and `c = exp2_scale · d`;
    the max stays in raw units (`fa3.finalize` takes the same `d`).

    With `rescale_threshold = τ` (lazy rescaling, `fa3-lazy-rescale`; 1 to
    8) a row keeps its running max while the block raises it by little:
    where `c · m' - c · row_max <= τ`, `new_max = row_max` and
    `correction = 1` exactly (P is then at most 2^τ); elsewhere, as
    without it. O / l and the LSE are the same functions of the kept max,
    and the accumulator's rescale by 1 can be skipped.

    ```mlir
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m0, %l0
        {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$scores, FA3_Tile1D:$row_max,
                       FA3_Tile1D:$row_sum, Optional<F32>:$descale,
                       F32Attr:$exp2_scale,
                       OptionalAttr<I64Attr>:$rescale_threshold);
  let results = (outs FA3_F32Tile2D:$probs, FA3_Tile1D:$new_max,
                      FA3_Tile1D:$new_sum, FA3_Tile1D:$correction);
  let assemblyFormat = [{
    $scores `,` $row_max `,` $row_sum (`descale` $descale^)? attr-dict `:`
    type($scores) `,` type($row_max)
  }];
}

def FA3_DropoutOp : FA3_TileOp<"dropout",
    [AllTypesMatch<["probs", "result"]>]> {
  let summary = "Drop probabilities by a Philox mask, scaling the kept ones";
  let description = [{
    Attention dropout with probability `p`: entry `(i, j)` stands for query
    row `r = q_start + i` and key column `c = k_start + j` of stream
    `stream` (`batch · Hq + head`), and becomes `probs[i, j] · (1 / (1 −
    p))` (the factor rounded to f32) when kept, 0 when dropped.

    The mask is Random123's Philox4x32-10 counter-based generator, so any
    backend (and the backward, which regenerates it) computes the same bits:
    * key: the seed `rng[0]` as two 32-bit words (low, high);
    * counter: `(c', r', stream, rng[1] mod 2^32)` with `r' = (r / 16) · 8 +
      r % 8` and `c' = (c / 16) · 4 + (c % 8) / 2`: the eight entries `{r, r
      + 8} × {c, c + 1, c + 8, c + 9}` (r % 16 < 8, c % 16 < 8, c even) share
      one Philox call, entry `(r, c)` taking the 16-bit half `c % 2` (low
      half for even columns) of word `2 · ((r / 8) % 2) + (c / 8) % 2`; such
      a 2×4 group sits in one thread of a wgmma accumulator as S (forward),
      and in two neighbouring threads as Sᵀ (backward);
    * kept when that 16-bit value is `>= min(⌊p · 2^16⌋, 2^16 − 1)`: the
      keep probability is 1 − p with p rounded down to a multiple of 2^-16.
    `fa3.reference.dropout_mask` is the same function in NumPy.

    ```mlir
    %pd = fa3.dropout %p, %rng, %stream, %q0, %k0 {p = 1.000000e-01 : f32}
        : tensor<64x64xf32>, tensor<2xi64>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$probs, TensorOf<[I64]>:$rng,
                       Index:$stream, Index:$q_start, Index:$k_start,
                       F32Attr:$p);
  let results = (outs FA3_F32Tile2D:$result);
  let assemblyFormat = [{
    $probs `,` $rng `,` $stream `,` $q_start `,` $k_start attr-dict `:`
    type($probs) `,` type($rng)
  }];
}

def FA3_RescaleOp : FA3_TileOp<"rescale", [AllTypesMatch<["acc", "result"]>]> {
  let summary = "Multiply each accumulator row by its correction factor";
  let description = [{
    `result[i, :] = acc[i, :] · correction[i]`.

    ```mlir
    %a1 = fa3.rescale %a0, %alpha : tensor<64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$acc, FA3_Tile1D:$correction);
  let results = (outs FA3_F32Tile2D:$result);
  let assemblyFormat = [{
    $acc `,` $correction attr-dict `:` type($acc) `,` type($correction)
  }];
}

def FA3_PVOp : FA3_TileOp<"pv", [AllTypesMatch<["acc", "result"]>]> {
  let summary = "Accumulate P V into the output accumulator";
  let description = [{
    `result = acc + round(probs) · value`, where `round` converts the f32
    probabilities to the element type of `value` first, as the Hopper kernel
    does when it packs P into wgmma A-operand registers. With
    `probs_scale = s` (an FP8 attention), `round(P)` is
    instead `e4m3(s · P) / s`, rounded to nearest even and saturated: the
    FP8 kernel's P, scaled by 2^8 before its cast. An e4m3 `value` (the
    quantized values; `fa3.finalize` applies their descale) needs
    `probs_scale`.

    ```mlir
    %a2 = fa3.pv %p, %vt, %a1 : tensor<64x64xf32>, tensor<64x64xf16>, tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$probs, FA3_Tile2D:$value,
                       FA3_F32Tile2D:$acc, OptionalAttr<F32Attr>:$probs_scale);
  let results = (outs FA3_F32Tile2D:$result);
  let assemblyFormat = [{
    $probs `,` $value `,` $acc attr-dict `:` type($probs) `,` type($value) `,`
    type($acc)
  }];
}

def FA3_FinalizeOp : FA3_TileOp<"finalize",
    [AllTypesMatch<["row_max", "row_sum", "lse"]>, AttrSizedOperandSegments]> {
  let summary = "Normalize the accumulator and form the LSE";
  let description = [{
    `output[i, :] = acc[i, :] / row_sum[i]` converted to the result element
    type, and `lse[i] = scale · row_max[i] + log(row_sum[i])`. Rows with
    `row_sum == 0` (no visible key) give `output = 0` and `lse = -inf`.
    With `descale(%qk, %v)` (FP8: the max in raw units, the values
    quantized) `lse[i] = scale · qk · row_max[i] + log(row_sum[i])` and
    `output[i, :] = v · acc[i, :] / row_sum[i]`.

    ```mlir
    %o, %lse = fa3.finalize %acc, %m, %l {scale = 1.250000e-01 : f32}
        : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf16>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$acc, FA3_Tile1D:$row_max,
                       FA3_Tile1D:$row_sum, Optional<F32>:$qk_descale,
                       Optional<F32>:$v_descale, F32Attr:$scale);
  let results = (outs FA3_Tile2D:$output, FA3_Tile1D:$lse);
  let assemblyFormat = [{
    $acc `,` $row_max `,` $row_sum
    (`descale` `(` $qk_descale^ `,` $v_descale `)`)? attr-dict `:`
    type($acc) `,` type($row_max) `->` type($output)
  }];
}

//===----------------------------------------------------------------------===//
// Backward steps
//===----------------------------------------------------------------------===//

def FA3_RowDotOp : FA3_TileOp<"row_dot"> {
  let summary = "Row-wise dot product of two tiles, in f32";
  let description = [{
    `result[i] = Σ_d lhs[i, d] · rhs[i, d] − minus[i]` accumulated in f32
    (`minus` optional). The backward's preprocessing forms
    `Δ = rowsum(dO ∘ O)` with it, the term the softmax gradient subtracts
    from `dP`, and with the LSE's gradient as `minus`, `Δ − dLSE`.

    ```mlir
    %delta = fa3.row_dot %dot, %ot : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64xf32>
    %delta2 = fa3.row_dot %dot, %ot minus %dlse
        : tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64xf32> -> tensor<64xf32>
    ```
  }];
  let arguments = (ins FA3_Tile2D:$lhs, FA3_Tile2D:$rhs,
                       Optional<Type<FA3_Tile1D.predicate, FA3_Tile1D.summary,
                                     "::mlir::RankedTensorType">>:$minus);
  let results = (outs FA3_Tile1D:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`minus` $minus^)? attr-dict `:` type($lhs) `,` type($rhs)
    (`,` type($minus)^)? `->` type($result)
  }];
}

def FA3_RecomputeProbsOp : FA3_TileOp<"recompute_probs",
    [AllTypesMatch<["scores", "probs"]>]> {
  let summary = "Softmax probabilities of a score tile from the forward's LSE";
  let description = [{
    `probs[i, j] = exp2(exp2_scale · scores[i, j] - log2(e) · lse[i])`, i.e.
    `exp(scale · s - lse)` with `exp2_scale = scale · log2(e)`: the
    probabilities of the forward, recomputed from its natural-log LSE
    instead of stored. A row with `lse = -inf` (it saw no key) gives 0, and a
    masked score (-inf) gives 0.

    ```mlir
    %p = fa3.recompute_probs %s, %lse {exp2_scale = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$scores, FA3_Tile1D:$lse,
                       F32Attr:$exp2_scale);
  let results = (outs FA3_F32Tile2D:$probs);
  let assemblyFormat = [{
    $scores `,` $lse attr-dict `:` type($scores) `,` type($lse)
  }];
}

def FA3_SoftmaxGradOp : FA3_TileOp<"softmax_grad",
    [AllTypesMatch<["probs", "grad_probs", "result"]>]> {
  let summary = "Gradient of the scaled scores through the softmax";
  let description = [{
    `result[i, j] = probs[i, j] · (grad_probs[i, j] - delta[i])` with
    `grad_probs = dO Vᵀ` and `delta = rowsum(dO ∘ O)`: the gradient with
    respect to the scaled scores `scale · s`. The scale itself is applied
    once, when dQ and dK leave their f32 accumulators (`fa3.scale_cast`).

    ```mlir
    %ds = fa3.softmax_grad %p, %dp, %delta : tensor<64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$probs, FA3_F32Tile2D:$grad_probs,
                       FA3_Tile1D:$delta);
  let results = (outs FA3_F32Tile2D:$result);
  let assemblyFormat = [{
    $probs `,` $grad_probs `,` $delta attr-dict `:` type($probs) `,` type($delta)
  }];
}

def FA3_SoftcapGradOp : FA3_TileOp<"softcap_grad",
    [AllTypesMatch<["grad", "capped", "result"]>]> {
  let summary = "Chain a score gradient through fa3.softcap";
  let description = [{
    With `capped = fa3.softcap(s)`, i.e. `(softcap / scale) · tanh(t)` for
    `t = s · scale / softcap`, the derivative is `1 - tanh(t)²`:
    `result = grad · (1 - (capped · scale / softcap)²)`.

    ```mlir
    %ds1 = fa3.softcap_grad %ds, %c {scale = 1.250000e-01 : f32, softcap = 3.000000e+01 : f32} : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$grad, FA3_F32Tile2D:$capped,
                       F32Attr:$scale, F32Attr:$softcap);
  let results = (outs FA3_F32Tile2D:$result);
  let assemblyFormat = "$grad `,` $capped attr-dict `:` type($grad)";
}

def FA3_MmaTNOp : FA3_TileOp<"mma_tn", [AllTypesMatch<["acc", "result"]>]> {
  let summary = "Accumulate lhsᵀ · rhs, rounding lhs like a wgmma A operand";
  let description = [{
    `result[i, j] = acc[i, j] + Σ_k round(lhs[k, i]) · rhs[k, j]`, where
    `round` converts the f32 `lhs` to the element type of `rhs` first. The
    backward accumulates `dV += Pᵀ dO` and `dK += dSᵀ Q` with it: on Hopper
    the key-block rows own the accumulators and `Pᵀ`/`dSᵀ` are register-A
    operands.

    ```mlir
    %dv1 = fa3.mma_tn %p, %dot, %dv0 : tensor<64x64xf32>, tensor<64x64xf16>, tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$lhs, FA3_Tile2D:$rhs,
                       FA3_F32Tile2D:$acc);
  let results = (outs FA3_F32Tile2D:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $acc attr-dict `:` type($lhs) `,` type($rhs) `,`
    type($acc)
  }];
}

def FA3_ScaleCastOp : FA3_TileOp<"scale_cast"> {
  let summary = "Scale an f32 accumulator and round it to a storage type";
  let description = [{
    `result[i, j] = round(scale · acc[i, j])` in the result's element type:
    how dQ, dK (scale = the softmax scale) and dV (scale = 1) leave their f32
    accumulators.

    ```mlir
    %dk = fa3.scale_cast %acc {scale = 1.250000e-01 : f32} : tensor<64x64xf32> -> tensor<64x64xbf16>
    ```
  }];
  let arguments = (ins FA3_F32Tile2D:$acc, F32Attr:$scale);
  let results = (outs FA3_Tile2D:$result);
  let assemblyFormat = "$acc attr-dict `:` type($acc) `->` type($result)";
}

#endif // FA3_DIALECT_FA3_IR_FA3TILEOPS_TD
