//===- FA3Ops.td - fa3 tensor-level (L0) operations ---------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3OPS_TD
#define FA3_DIALECT_FA3_IR_FA3OPS_TD

include "fa3/Dialect/FA3/IR/FA3Dialect.td"
include "fa3/Dialect/FA3/IR/FA3Attrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/CommonTypeConstraints.td"

// The masking and scaling attributes shared by the forward and the backward.
defvar FA3_AttentionAttrs = (ins
    UnitAttr:$causal,
    OptionalAttr<F32Attr>:$scale,
    OptionalAttr<DenseI64ArrayAttr>:$window,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<FA3_ScheduleAttr>:$schedule);

class FA3_AttentionOpBase<string mnemonic, list<Trait> traits = []>
    : FA3_Op<mnemonic, !listconcat(traits, [Pure])> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
  code attentionMaskDecls = [{
    /// The softmax scale: the `scale` attribute, or 1/sqrt(D) when absent.
    float getEffectiveScale();
    /// The (left, right) window; -1 means unbounded on that side. A causal
    /// op has right = 0 whatever its `window` says.
    std::pair<int64_t, int64_t> getWindowBounds();
    /// The softcap, 0 when off.
    float getEffectiveSoftcap() {
      return getSoftcap() ? getSoftcap()->convertToFloat() : 0.0f;
    }
  }];
  code attentionExtraDecls = !strconcat([{
    /// Whether the inputs are f8E4M3FN (with descale operands).
    bool isFP8();
  }], attentionMaskDecls);
  code dropoutDecls = [{
    /// The dropout probability, 0 when off.
    float getEffectiveDropout() {
      return getDropout() ? getDropout()->convertToFloat() : 0.0f;
    }
  }];
}

// Attention dropout, FlashAttention-2's `dropout_p`: the probability and the
// Philox generator's (seed, offset), a runtime operand so that a new mask
// per training step needs no recompilation.
defvar FA3_DropoutOperand = (ins Optional<TensorOf<[I64]>>:$rng);
defvar FA3_DropoutAttr = (ins OptionalAttr<F32Attr>:$dropout);

def FA3_AttentionOp : FA3_AttentionOpBase<"attention",
    [AttrSizedOperandSegments]> {
  let summary = "Scaled dot-product attention with its log-sum-exp";
  let description = [{
    `O = softmax(mask(softcap(scale · Q Kᵀ))) V` per (batch, query head), in
    FlashAttention's layout:

    | operand/result | shape | element type |
    | --- | --- | --- |
    | `query` | `[B, Sq, Hq, D]` | f32, f16 or bf16 |
    | `key` | `[B, Sk, Hkv, D]` | as `query` |
    | `value` | `[B, Sk, Hkv, Dv]` | as `query` |
    | `output` | `[B, Sq, Hq, Dv]` | as `query` |
    | `lse` | `[B, Hq, Sq]` | f32, natural-log log-sum-exp of each row |

    `B`, `Sq` and `Sk` may be dynamic; head counts and head dims are static,
    with `Hq % Hkv == 0` (grouped-query attention: query head `h` reads
    key/value head `h / (Hq / Hkv)`), and `D`, `Dv` multiples of 8 up to 256.

    Attributes:
    * `causal`: query `i` sees keys `j <= i + Sk - Sq` (aligned to the
      bottom-right corner when `Sq != Sk`).
    * `scale`: the softmax scale, 1/sqrt(D) when absent.
    * `window = array<i64: left, right>`: query `i` sees keys in
      `[i + Sk - Sq - left, i + Sk - Sq + right]`; -1 leaves a side unbounded.
    * `softcap`: scores become `softcap · tanh(s / softcap)` before masking
      (0 or absent: off).
    * `schedule`: the `#fa3.schedule` chosen by `fa3-select-schedule`.
    * `pack_gqa` (PackGQA, FlashAttention-3's `pack_gqa`): the `Hq / Hkv`
      query heads that share a key/value head are packed as rows of one
      query tile (`packed_heads` on the tile ops): a tile holds
      `block_m / G` queries of all G heads, the grid runs over key/value
      heads, and each key/value tile is read once for the whole group. For
      few queries per head (decode: Sq = 1) this fills the tile that G
      one-row tiles would mostly waste; the result is the same. On Hopper
      G must divide 64 (the rows of one consumer warpgroup), and FP8
      attentions do not pack.

    A row with no visible key gets `O = 0` and `LSE = -inf`.

    **Dropout** (`dropout = p` with an `rng` operand, FlashAttention-2's
    `dropout_p`): each probability `P[b, h, i, j]` is kept with
    probability `1 − p` and then scaled by `1 / (1 − p)`, or dropped
    (zeroed), before it multiplies V; the LSE is that of the softmax before
    dropout. `rng` is an i64 tensor `[2]` holding the Philox seed and offset;
    the mask is a pure function of them and of `(b, h, i, j)` (see
    `fa3.dropout`), so the backward regenerates it instead of storing it.
    The CPU pipeline builds it; other backends reject it.

    **FP8.** With `f8E4M3FN` query, key and value, three more operands give
    the descale factors, f32 tensors `[B, Hkv]` (per batch and key/value
    head, as FlashAttention-3's `q_descale`, `k_descale`, `v_descale`): the
    attention is that of `query · q_descale`, `key · k_descale` and
    `value · v_descale`. The output is bf16, the LSE f32. The Hopper backend
    compiles it (e4m3 wgmma for both GEMMs, see `convert-fa3-to-hopper`;
    head dims 64, 128 and 256, D = Dv); the CPU pipeline computes the
    attention of the dequantized inputs (`fa3-tile`).

    A bf16 attention with an `fp8 = #fa3.fp8<...>` attribute is one that
    `fa3-cast-fp8` rewrites into that form, quantizing its inputs itself
    (optionally after a Hadamard transform of Q and K).

    ```mlir
    %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {causal}
        : (tensor<?x?x8x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>,
           tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
        -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
    ```

    ```mlir
    %o, %lse = fa3.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32}
        : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>)
        -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
    ```
  }];
  let arguments = !con((ins AnyTensor:$query, AnyTensor:$key, AnyTensor:$value,
                            Variadic<AnyTensor>:$descales),
                       FA3_DropoutOperand,
                       FA3_AttentionAttrs,
                       (ins OptionalAttr<FA3_FP8Attr>:$fp8,
                            UnitAttr:$pack_gqa),
                       FA3_DropoutAttr);
  let results = (outs AnyTensor:$output, AnyTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`,` $descales^)? (`rng` `(` $rng^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = !strconcat(attentionExtraDecls, dropoutDecls);
}

def FA3_AttentionGradOp : FA3_AttentionOpBase<"attention_grad",
    [AttrSizedOperandSegments]> {
  let summary = "Gradients of fa3.attention with respect to Q, K and V";
  let description = [{
    The backward of `fa3.attention` with the same attributes. Operands, in
    order: `grad_output` (dO, shaped like the forward's output), `query`,
    `key`, `value`, `output` (O of the forward), `lse` (its LSE) and,
    optionally, `grad_lse` (dLSE, f32 shaped like `lse`: the gradient that
    reaches the LSE when a caller uses it, e.g. to merge partial attentions
    by their LSE). Results: `grad_query`, `grad_key`, `grad_value`, shaped
    and typed like `query`, `key` and `value`. With GQA,
    `grad_key`/`grad_value` sum over the query heads that share a key/value
    head.

    Since ∂LSE_i/∂S_ij = P_ij, a `grad_lse` adds P ∘ dLSE to the score
    gradient: dS = P ∘ (dP − Δ + dLSE) with Δ = rowsum(dO ∘ O), i.e. the
    backward runs with Δ − dLSE in place of Δ. Rows that see no key (LSE =
    -inf) have P = 0 and take no gradient from it.

    `fa3-tile` lowers it (for the CPU) to FlashAttention-2's backward over
    tiles; `convert-fa3-to-hopper` emits sm_90a kernels for it.

    `deterministic`: the gradients are bit-identical from run to run. The
    CPU backward is sequential and always is; on Hopper, dK and dV
    accumulate in registers, and the key-block CTAs add their dQ partials
    of each (head, query block) in key-block order instead of as they
    finish (FlashAttention-3's deterministic mode), at the cost of waiting
    for their turn.

    `dropout` and `rng`: the forward's, whose mask the backward regenerates
    (FlashAttention-2): with `Z` the mask scaled by `1 / (1 − p)`,
    `dV = (P ∘ Z)ᵀ dO` and `dS = P ∘ (Z ∘ dP − Δ)`, Δ = rowsum(dO ∘ O) of
    the dropped-out O.

    ```mlir
    %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal}
        : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>,
           tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>)
        -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
    // with the LSE's gradient, a seventh operand:
    %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse, %dlse {causal}
        : (..., tensor<2x8x?xf32>, tensor<2x8x?xf32>) -> (...)
    // with dropout:
    %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse rng(%seed)
        {dropout = 1.000000e-01 : f32} : (..., tensor<2xi64>) -> (...)
    ```
  }];
  let arguments = !con((ins AnyTensor:$grad_output, AnyTensor:$query,
                            AnyTensor:$key, AnyTensor:$value,
                            AnyTensor:$output, AnyTensor:$lse,
                            Optional<AnyTensor>:$grad_lse),
                       FA3_DropoutOperand,
                       FA3_AttentionAttrs,
                       (ins UnitAttr:$deterministic),
                       FA3_DropoutAttr);
  let results = (outs AnyTensor:$grad_query, AnyTensor:$grad_key,
                      AnyTensor:$grad_value);
  let assemblyFormat = [{
    $grad_output `,` $query `,` $key `,` $value `,` $output `,` $lse
    (`,` $grad_lse^)? (`rng` `(` $rng^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = !strconcat(attentionExtraDecls, dropoutDecls);
}

def FA3_AttentionVarlenOp : FA3_AttentionOpBase<"attention_varlen"> {
  let summary = "Attention over a packed batch of variable-length sequences";
  let description = [{
    FlashAttention's `flash_attn_varlen_func`: the sequences of a batch are
    packed along one token dimension, without padding. Sequence `b` owns
    query rows `[cu_seqlens_q[b], cu_seqlens_q[b + 1])` and key/value rows
    `[cu_seqlens_k[b], cu_seqlens_k[b + 1])`; with `seqused_k`, only the
    first `seqused_k[b]` of its keys take part (FlashAttention-3's
    `seqused_k`: a sequence's keys may be followed by unused rows). Each
    sequence is an attention of its own, with `fa3.attention`'s attributes.

    | operand/result | shape | element type |
    | --- | --- | --- |
    | `query` | `[Tq, Hq, D]` | f32, f16 or bf16 |
    | `key` | `[Tk, Hkv, D]` | as `query` |
    | `value` | `[Tk, Hkv, Dv]` | as `query` |
    | `cu_seqlens_q`, `cu_seqlens_k` | `[B + 1]` | i32, non-decreasing from 0 |
    | `seqused_k` (optional) | `[B]` | i32 |
    | `output` | `[Tq, Hq, Dv]` | as `query` |
    | `lse` | `[Hq, Tq]` | f32 |

    `causal` and `window` align each sequence at its own bottom-right
    corner: query `i` of sequence `b` sees keys `j <= i + Sk_b - Sq_b`. A
    sequence of length 0 contributes nothing; a query row that sees no key
    gets `O = 0` and `LSE = -inf`. The verifier checks shapes and types; the
    offsets themselves are data (the Python API checks them before a call).

    `num_splits = N` splits each sequence's keys into N ranges of whole key
    blocks, and `pack_gqa` packs the query heads of each key/value head into
    one tile, as in `fa3.attention_kvcache` (split-KV, PackGQA).

    ```mlir
    %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {causal}
        : (tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>,
           tensor<?xi32>, tensor<?xi32>) -> (tensor<?x8x64xbf16>, tensor<8x?xf32>)
    ```
  }];
  let arguments = !con((ins AnyTensor:$query, AnyTensor:$key, AnyTensor:$value,
                            AnyTensor:$cu_seqlens_q, AnyTensor:$cu_seqlens_k,
                            Optional<AnyTensor>:$seqused_k),
                       FA3_AttentionAttrs,
                       (ins OptionalAttr<I64Attr>:$num_splits,
                            UnitAttr:$pack_gqa));
  let results = (outs AnyTensor:$output, AnyTensor:$lse);
  let extraClassDeclaration = attentionMaskDecls;
}

def FA3_AttentionVarlenGradOp : FA3_AttentionOpBase<"attention_varlen_grad",
    [AttrSizedOperandSegments]> {
  let summary = "Gradients of fa3.attention_varlen with respect to Q, K and V";
  let description = [{
    The backward of `fa3.attention_varlen` (FlashAttention's
    `flash_attn_varlen_func` backward) with the same attributes, on the
    packed layout: operands `grad_output` `[Tq, Hq, Dv]`, `query`, `key`,
    `value`, `output`, `lse` `[Hq, Tq]`, `cu_seqlens_q`, `cu_seqlens_k`,
    optionally `seqused_k` (`[B]` i32, as in the forward: only the first
    `seqused_k[b]` keys of sequence b took part, and the others get zero
    gradients) and optionally `grad_lse` (`[Hq, Tq]` f32, the gradient
    reaching the LSE, as in `fa3.attention_grad`); results `grad_query`,
    `grad_key`, `grad_value` shaped like `query`, `key` and `value`. Each
    sequence is the backward of its own attention (`fa3.attention_grad`'s,
    GQA sums included). Rows outside every sequence get zero gradients.
    `deterministic` as for `fa3.attention_grad` (the CPU backward always
    is; the Hopper kernel adds each (head, query block)'s dQ partials in
    key-block order).

    `convert-fa3-to-hopper` emits sm_90a kernels for it: `fa3.attention_grad`'s
    three, reading each sequence's rows at its offsets (grid z runs over the
    sequences).

    ```mlir
    %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk
        seqused_k %used grad_lse %dlse {causal}
        : (tensor<?x8x64xbf16>, tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>,
           tensor<?x8x64xbf16>, tensor<8x?xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>,
           tensor<8x?xf32>)
        -> (tensor<?x8x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16>)
    ```
  }];
  let arguments = !con((ins AnyTensor:$grad_output, AnyTensor:$query,
                            AnyTensor:$key, AnyTensor:$value,
                            AnyTensor:$output, AnyTensor:$lse,
                            AnyTensor:$cu_seqlens_q, AnyTensor:$cu_seqlens_k,
                            Optional<AnyTensor>:$seqused_k,
                            Optional<AnyTensor>:$grad_lse),
                       FA3_AttentionAttrs,
                       (ins UnitAttr:$deterministic));
  let results = (outs AnyTensor:$grad_query, AnyTensor:$grad_key,
                      AnyTensor:$grad_value);
  let assemblyFormat = [{
    $grad_output `,` $query `,` $key `,` $value `,` $output `,` $lse `,`
    $cu_seqlens_q `,` $cu_seqlens_k (`seqused_k` $seqused_k^)?
    (`grad_lse` $grad_lse^)? attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = attentionMaskDecls;
}

def FA3_AttentionKVCacheOp : FA3_AttentionOpBase<"attention_kvcache"> {
  let summary = "Attention of new queries against a (paged) KV cache";
  let description = [{
    FlashAttention's `flash_attn_with_kvcache` after its append: batch `b`
    attends to the first `cache_seqlens[b]` keys of its cache. Without a
    page table the cache is contiguous, `[B, S_cache, Hkv, D]`; with
    `page_table` (i32 `[B, max_pages]`) it is paged, `[num_pages,
    page_size, Hkv, D]`, and key `j` of batch `b` is slot `j % page_size`
    of page `page_table[b, j / page_size]` (any page size, pages in any
    order).

    | operand/result | shape | element type |
    | --- | --- | --- |
    | `query` | `[B, Sq, Hq, D]` | f32, f16 or bf16 |
    | `key_cache` | `[B, S_cache, Hkv, D]` or `[num_pages, page_size, Hkv, D]` | as `query` |
    | `value_cache` | as `key_cache`, head dim `Dv` | as `query` |
    | `cache_seqlens` | `[B]` | i32 |
    | `page_table` (optional) | `[B, max_pages]` | i32 |
    | `output` | `[B, Sq, Hq, Dv]` | as `query` |
    | `lse` | `[B, Hq, Sq]` | f32 |

    The attributes are `fa3.attention`'s; `causal` aligns each batch at the
    bottom-right corner of its own length: query `i` sees keys
    `j <= i + cache_seqlens[b] - Sq`. `fa3.kvcache_append` writes new keys
    and values into the cache first.

    `num_splits = N` (N >= 1; absent: 1) splits each batch's keys into N
    ranges of whole key blocks (split-KV, FlashAttention's `num_splits`):
    `fa3-tile` computes one partial attention per (split, batch, head, query
    block), independent work for N times as many CTAs when the queries
    alone cannot fill the GPU (decode), and merges them with
    `fa3.combine_splits`. The result is the same attention up to rounding.

    `pack_gqa` (PackGQA): the `Hq / Hkv` query heads that share a key/value
    head are packed as rows of one query tile (`packed_heads` on the tile
    ops), so a decode step with one query fills `Hq / Hkv` rows of the tile
    instead of one; the result is the same.

    ```mlir
    %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens, %pages {causal}
        : (tensor<?x1x8x128xbf16>, tensor<?x64x2x128xbf16>, tensor<?x64x2x128xbf16>,
           tensor<?xi32>, tensor<?x?xi32>) -> (tensor<?x1x8x128xbf16>, tensor<?x8x1xf32>)
    ```
  }];
  let arguments = !con((ins AnyTensor:$query, AnyTensor:$key_cache,
                            AnyTensor:$value_cache, AnyTensor:$cache_seqlens,
                            Optional<AnyTensor>:$page_table),
                       FA3_AttentionAttrs,
                       (ins OptionalAttr<I64Attr>:$num_splits,
                            UnitAttr:$pack_gqa));
  let results = (outs AnyTensor:$output, AnyTensor:$lse);
  let extraClassDeclaration = attentionMaskDecls # [{
    bool isPaged() { return static_cast<bool>(getPageTable()); }
  }];
}

def FA3_CombineSplitsOp : FA3_Op<"combine_splits", [Pure]> {
  let summary = "Merge the partial attentions of a split-KV attention";
  let description = [{
    `partial_output [N, B, Sq, Hq, Dv]` (f32) and `partial_lse [N, B, Hq,
    Sq]` hold N attentions of the same queries over disjoint key ranges,
    each normalized over its own keys. With `lse = log Σ_s exp(lse_s)`
    (-inf when every split saw no key) the result is
    `output = Σ_s exp(lse_s − lse) · partial_output_s` in the output's
    element type, and `lse`: exactly the attention over the union of the
    key ranges. A split without keys (`lse_s = -inf`) weighs 0.

    ```mlir
    %o, %lse = fa3.combine_splits %parts, %lses
        : (tensor<4x?x1x8x128xf32>, tensor<4x?x8x1xf32>) -> (tensor<?x1x8x128xbf16>, tensor<?x8x1xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$partial_output,
                       AnyRankedTensor:$partial_lse);
  let results = (outs AnyRankedTensor:$output, AnyRankedTensor:$lse);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FA3_KVCacheAppendOp : FA3_Op<"kvcache_append", [Pure]> {
  let summary = "Write new keys and values into a (paged) KV cache";
  let description = [{
    For each batch `b` and new row `i < S_new`, position `p =
    cache_seqlens[b] + i` of the cache takes `key[b, i]` and `value[b, i]`:
    row `p` of batch `b` in a contiguous cache `[B, S_cache, H, D]`, or slot
    `p % page_size` of page `page_table[b, p / page_size]` in a paged one
    (as in `fa3.attention_kvcache`). `cache_seqlens` holds the lengths
    before the append. Returns the updated caches; after bufferization
    the write is in place when the caches are writable buffers. Positions
    past the cache's capacity are the caller's error (the Python API checks
    them); the lowering drops such rows rather than write outside the cache.

    ```mlir
    %kc1, %vc1 = fa3.kvcache_append %kc, %vc, %k, %v, %lens
        : (tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>,
           tensor<?x?x2x64xbf16>, tensor<?xi32>)
        -> (tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$key_cache, AnyRankedTensor:$value_cache,
                       AnyRankedTensor:$key, AnyRankedTensor:$value,
                       AnyRankedTensor:$cache_seqlens,
                       Optional<AnyRankedTensor>:$page_table);
  let results = (outs AnyRankedTensor:$new_key_cache,
                      AnyRankedTensor:$new_value_cache);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def FA3_HadamardOp : FA3_Op<"hadamard", [Pure]> {
  let summary = "Random-sign Hadamard transform over the last dimension";
  let description = [{
    `result[..., j] = Σ_i input[..., i] · s_i · H[i, j] / sqrt(D)` with
    `H[i, j] = (-1)^popcount(i & j)` the Walsh–Hadamard matrix of order
    `D` (the last dimension, a static power of two) and `s_i = ±1` random
    signs drawn from `seed`: `s_i` is the sign of bit 63 of SplitMix64
    applied to `seed + (i + 1) · 0x9E3779B97F4A7C15` (−1 when set). The
    matrix `diag(s) H / sqrt(D)` is orthogonal, so transforming both Q and
    K with the same seed leaves Q·Kᵀ unchanged (FlashAttention-3's
    incoherent processing). The input is f32, f16 or bf16; the result has
    its shape and element type f32, f16 or bf16 (`fa3-cast-fp8` keeps f32 so
    that only the e4m3 cast rounds). The CPU lowering and the Hopper kernel
    are fast Walsh–Hadamard transforms (log2(D) butterfly passes).

    ```mlir
    %qh = fa3.hadamard %q {seed = 0 : i64} : tensor<?x?x8x128xbf16> -> tensor<?x?x8x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$seed);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// s_i of `seed`: +1 or -1.
    static float getSign(int64_t seed, int64_t i);
  }];
}

def FA3_QuantizeOp : FA3_Op<"quantize", [Pure]> {
  let summary = "Quantize [B, S, H, D] to e4m3 with one descale per head group";
  let description = [{
    FlashAttention-3's FP8 input scaling. The heads are split into `G`
    groups of `H / G` consecutive heads (`G` is the second dimension of the
    `descale` result: the key/value heads for Q, K and V alike). Per batch
    `b` and group `g`, `amax` is the largest magnitude over the group's
    rows and head dims, `descale[b, g] = max(amax / 448, 1e-12)` (448 is
    e4m3's largest finite value) and
    `result = e4m3(input · (1 / descale[b, g]))`, rounded to nearest even
    and saturated at ±448. So `result · descale` approximates the input
    with the full e4m3 range used per group.

    The input is f32, f16 or bf16; the result is f8E4M3FN of the same shape,
    the descale f32 `[B, G]` with `H % G == 0`.

    With `hadamard_seed`, the op quantizes `fa3.hadamard(input, seed)`
    (computed in f32) instead: the canonical form of a quantization fed by a
    Hadamard transform with an f32 result and no other use, into which the
    canonicalizer (and `fa3-cast-fp8`) folds that pair, so that the Hopper
    kernels transform each row in registers rather than write and re-read
    an f32 copy. The last dim must then be a power of two.

    ```mlir
    %q8, %qd = fa3.quantize %q : tensor<?x?x8x128xf32> -> tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       OptionalAttr<I64Attr>:$hadamard_seed);
  let results = (outs AnyRankedTensor:$result, AnyRankedTensor:$descale);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result) `,` type($descale)
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

#endif // FA3_DIALECT_FA3_IR_FA3OPS_TD
