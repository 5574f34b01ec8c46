//===- Passes.td - fa3 transformation passes ---------------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_TRANSFORMS_PASSES_TD
#define FA3_DIALECT_FA3_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def FA3RaiseAttention : Pass<"fa3-raise-attention", "::mlir::func::FuncOp"> {
  let summary = "Raise softmax(Q Kᵀ · scale [+ causal mask]) V in linalg to fa3.attention";
  let description = [{
    Finds attention in linalg on tensors as torch-mlir's FX importer emits
    it (`torch_mlir.fx.export_and_import(..., output_type=
    "linalg-on-tensors")`) for `F.scaled_dot_product_attention` and for
    `softmax(q @ k.transpose(-1, -2) * s, -1) @ v` written out, and
    replaces it with `fa3.attention` between `linalg.transpose`s from
    torch's [B, H, S, D] to fa3's [B, S, H, D] and back.

    The match starts at each `linalg.batch_matmul` whose left operand is a
    row-normalized tensor and checks the whole chain: P = E / rowsum(E)
    (optionally torch's safe-softmax select of 0 for rows whose scores are
    all -inf, which fa3 also gives 0), E = exp(S - rowmax(S)) with both
    reductions over the key dim, S = expand(batch_matmul(Q, transpose(K)))
    with constant scale factors on Q, K or S (their product becomes
    `scale`), optionally plus the causal mask torch-mlir builds from index
    comparisons (key <= query). torch's causal mask is aligned top-left:
    for Sq = Sk it is fa3's `causal`, for Sq > Sk fa3's window (-1, Sq - Sk);
    for Sq < Sk it hides keys no fa3 mask does and is not raised.

    GQA (`enable_gqa=True`: K and V broadcast from Hkv heads, head h reading
    kv head h / G) raises to an fa3.attention on the Hkv-head tensors.

    A bf16/f16 export computes in f32 on inputs extended from the 16-bit
    type (`arith.extf`) and truncates O back to it. With `narrow` (the
    default) the raised attention runs in the 16-bit type on the tensors
    before the extension, which is what the Hopper kernels take. The inputs
    are the same values and fa3's 16-bit attention accumulates in f32, but
    it rounds P to the 16-bit type for the P·V product (on the CPU as on
    Hopper, as FlashAttention does) besides rounding O once, so O moves by
    up to about 2^-8 · max|V| (bf16). `narrow=false` keeps the f32
    attention of the extended values (exactly the export's arithmetic).

    What is not attention is left alone with a remark naming the step that
    differed, e.g. a softmax over the query dim, an additive mask from an
    input, or P·Vᵀ (a V transposed in its last two dims). Static shapes.

    ```mlir
    %17 = linalg.batch_matmul ins(%c, %d : tensor<8x17x16xf32>, tensor<8x16x23xf32>) ...
    ... softmax as linalg.generic ops ...
    %39 = linalg.batch_matmul ins(%p, %v : tensor<8x17x23xf32>, tensor<8x23x16xf32>) ...
    %o = tensor.expand_shape %39 ... into tensor<2x4x17x16xf32>
    // becomes
    %o, %lse = fa3.attention %q2, %k2, %v2 {scale = 2.500000e-01 : f32}
        : (tensor<2x17x4x16xf32>, tensor<2x23x4x16xf32>, tensor<2x23x4x16xf32>)
        -> (tensor<2x17x4x16xf32>, tensor<2x4x17xf32>)
    %transposed = linalg.transpose ins(%o ...) permutation = [0, 2, 1, 3]
    ```
  }];
  let options = [
    Option<"narrow", "narrow", "bool", /*default=*/"true",
           "Raise the attention of a bf16/f16 export in that type (false: "
           "an f32 attention of the extended inputs)">,
  ];
  let dependentDialects = ["::mlir::fa3::FA3Dialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def FA3OutlineAttention : Pass<"fa3-outline-attention", "::mlir::ModuleOp"> {
  let summary = "Move each fa3.attention into a function of its own, called from where it was";
  let description = [{
    Replaces every `fa3.attention` inside a function `@f` with a `func.call`
    of a new function `@f_attention_N` (N counts the attentions of
    `@f` in order) whose body is that op alone on its arguments, returning
    its results. That is the form fa3's kernel entry points compile (the C
    API's `fa3_compile_attention`, `fa3.compile_mlir`, `fa3-run
    --device=cuda`): after `fa3-raise-attention`, it separates the attention
    of another compiler's graph from the layout changes and projections
    around it, so the attention can run through the Hopper pipeline while
    the rest of the module runs wherever it runs. The module computes what
    it did: the CPU pipeline lowers the calls and the outlined functions
    alike. The new functions are public, so each is an entry point of its own
    (the C API and `fa3-run --function` look them up by name).

    ```mlir
    func.func @sdpa(...) {
      ...
      %o, %lse = fa3.attention %q, %k, %v {scale = 0.25 : f32} : (...) -> (...)
      ...
    }
    // becomes
    func.func @sdpa(...) {
      ...
      %0:2 = call @sdpa_attention_0(%q, %k, %v) : (...) -> (...)
      ...
    }
    func.func @sdpa_attention_0(%q: ..., %k: ..., %v: ...) -> (...) {
      %o, %lse = fa3.attention %q, %k, %v {scale = 0.25 : f32} : (...) -> (...)
      return %o, %lse : ...
    }
    ```

    A name already taken gets a numeric suffix (the symbol table's
    uniquing).
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def FA3CastFP8 : Pass<"fa3-cast-fp8"> {
  let summary = "Rewrite bf16 attentions marked #fa3.fp8 into FP8 attentions";
  let description = [{
    The first step of the FP8 lowering. Each bf16 `fa3.attention` carrying
    `fp8 = #fa3.fp8<hadamard = ..., seed = ...>` (or, with `all`, every bf16
    `fa3.attention`) becomes:

    1. with `hadamard`, `fa3.hadamard` of Q and of K with the same seed (f32
       results, so that only the e4m3 cast rounds);
    2. `fa3.quantize` of Q, K and V with one descale per (batch, key/value
       head), FlashAttention-3's `q_descale`/`k_descale`/`v_descale`;
       a quantization of a Hadamard transform (f32, no other use) is then
       folded into one `fa3.quantize {hadamard_seed}` (also in chains
       written by hand), whose kernels transform rows in registers;
    3. the FP8 form of `fa3.attention` on the e4m3 tensors and the descales,
       with the same causal/window/softcap attributes and the same softmax
       scale (the Hadamard transform keeps D). Its bf16 output and f32 LSE
       replace the original results. A `#fa3.schedule` of the bf16 op is
       dropped: FP8 tiles differ, `fa3-select-schedule` picks them.

    `fa3-tile` then keeps the e4m3 tiles, with the descales on the softmax
    (`q_descale · k_descale`) and the finalize (`v_descale`) and P rounded
    to e4m3 after · 2^8, for the CPU and Hopper alike.
    `convert-fa3-tile-to-hopper` arranges V K-major for the e4m3 wgmma (a
    layout kernel writing V' before the attention kernel: see
    docs/Design.md §9 for that choice and its cost).

    ```mlir
    %o, %lse = fa3.attention %q, %k, %v {causal, fp8 = #fa3.fp8<hadamard = true>}
        : (tensor<?x?x8x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
        -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
    // becomes
    %q8, %qd = fa3.quantize %q {hadamard_seed = 0 : i64} : tensor<?x?x8x128xbf16> -> tensor<?x?x8x128xf8E4M3FN>, tensor<?x2xf32>
    %k8, %kd = fa3.quantize %k {hadamard_seed = 0 : i64} : ...
    %v8, %vd = fa3.quantize %v : ...
    %o, %lse = fa3.attention %q8, %k8, %v8, %qd, %kd, %vd {causal} : ...
    ```
  }];
  let options = [
    Option<"all", "all", "bool", /*default=*/"false",
           "Also cast every bf16 fa3.attention without an fp8 attribute">,
    Option<"hadamard", "hadamard", "bool", /*default=*/"false",
           "With `all`: use the Hadamard transform for those ops">,
    Option<"seed", "seed", "int64_t", /*default=*/"0",
           "With `all`: the Hadamard seed for those ops">,
  ];
  let dependentDialects = ["::mlir::fa3::FA3Dialect",
                           "::mlir::tensor::TensorDialect"];
}

def FA3SelectSchedule : Pass<"fa3-select-schedule"> {
  let summary = "Attach a #fa3.schedule to every attention op without one";
  let description = [{
    Chooses tile sizes and the kernel structure per head dim, element type
    and target with a fixed cost model for `fa3.attention`,
    `fa3.attention_grad`, `fa3.attention_varlen` and `fa3.attention_kvcache`
    (the last two with the choice for dynamic lengths: their per-sequence
    lengths are data), and leaves any schedule already in
    the IR alone (so a hand-written or autotuned schedule wins).

    Hopper (`target=sm_90a`) follows FlashAttention-3's bf16/f16 forward
    choices, which balance three limits per CTA: the O accumulator in
    registers (`block_m · Dv` f32 spread over the consumer warpgroups, at
    most ~240 registers a thread), shared memory (Q tile plus `stages` K and
    V tiles, at most 227 KiB) and wgmma efficiency (N a multiple of 16,
    larger is better):

    | head dim | block_m × block_n | consumer wgs | note |
    | --- | --- | --- | --- |
    | ≤ 64 | 192 × 128 | 3 | small tiles of Q·Kᵀ: more rows per K load |
    | ≤ 128 | 128 × 128 | 2 | causal and non-causal alike |
    | ≤ 256 | 128 × 80 | 2 | the O accumulator leaves room for 80 columns of S |

    All use 2 TMA stages and no cluster. With two or three consumer
    warpgroups the kernel is warp-specialized as in FlashAttention-3: a
    producer warpgroup issues the TMA loads and the register file is split
    with `setmaxnreg` (24/240 for two consumers, 32/160 for three: what
    64 Ki registers allow); two consumers also pingpong and use
    intra-warpgroup overlap (block i+1's QKᵀ in flight with block i's PV,
    its softmax overlapping that PV): with K and V slots released
    separately it measured +7-14% at d128 and d256 on the H200 and +3-4%
    for d64's causal 128-row tile on the H100; three consumers (d64's
    192-row tile) keep it off, where it measured -1-2% (and 0% to -14%
    with the consumers' full 160 registers; docs/Performance.md).
    One consumer (a `block-m=64` override) and four run without a producer.
    FP8 (e4m3) attentions take the same structure on 128-key blocks (V'
    atoms) for causal d128, d128 over at most 1024 keys (where that
    measured faster on the H100, docs/Performance.md) and d256; d <= 64
    (on its persistent grid) takes 192-key blocks (FlashAttention-3's
    192 x 160 rounded to whole 64-key V' atoms; +2% to +4% at 1k-16k on
    the H100), and so does non-causal d128 on a plain grid (V' in 64-key
    atoms; +2% to +4% at 8k on the H100), the latter with every
    8th exponential of P on the FMA pipe, `poly_exp2 = 8` (+4% at 8k on
    the H100; it lost 1-2% on the 128-key kernels), and d256 lazy
    rescaling with `rescale_threshold = 8` (+2% to +3% sustained at 8k on
    the H100, causal or not; it lost at d128).

    Static sequence lengths in the IR refine the choice (the runtime writes
    each launch's length bucket's schedule into the attention it compiles,
    which is the same model). A warp-specialized forward runs on a
    persistent grid (one CTA per SM takes tiles from a counter as it
    finishes them and overlaps each tile's Q load and O epilogue with its
    neighbours' work) over at most 4096 keys at d ≤ 64, at d ≤ 128 over at
    most 1024 keys non-causal and 4096 causal (H100, Sq = Sk: d64's 192-row
    tile +28% / +11% / +5% / +3% at 512 / 1k / 2k / 4k non-causal; d128
    causal +13% / +8% / +3% at 1k / 2k / 4k, non-causal -1% to -3% from 2k
    on; d256 loses at every length; longer key loops were not measured).
    At d ≤ 64 the query tile minimizes `ceil(Sq / block_m) · block_m /
    rate(block_m)` over 64, 128 and 192 rows, with measured rates per
    computed row relative to the 192-row tile: on a persistent grid 64
    rows 0.85 and, from 256 query rows on, 128 rows 0.82 (causal, with
    the overlap, 1.03: causal d64 over 256-4096 queries takes 128 rows);
    on a plain grid 64 rows 1.0 over at most 1k keys (2k causal), else
    0.85, and 128 rows 0.85.
    Overriding `block-m` on sm_90a recomputes the warpgroups, the register
    split and overlap for the new row count.

    The CPU (`target=cpu`) uses 64 × 64 tiles: the working set of one tile
    step (Q, K, V tiles, S and the accumulator, at most ~200 KiB for d = 256
    in f32) stays within L2.

    Example (`target=cpu`):

    ```mlir
    %o, %lse = fa3.attention %q, %k, %v : (...) -> (...)
    // becomes
    %o, %lse = fa3.attention %q, %k, %v {schedule = #fa3.schedule<block_m = 64,
        block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0,
        consumer_regs = 0, pingpong = false, intra_wg_overlap = false,
        persistent = false, cluster = 1>} : (...) -> (...)
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "Target to choose for: `cpu` or `sm_90a`">,
    Option<"blockM", "block-m", "int64_t", /*default=*/"0",
           "Override the cost model's block_m (0: keep its choice)">,
    Option<"blockN", "block-n", "int64_t", /*default=*/"0",
           "Override the cost model's block_n (0: keep its choice)">,
  ];
  let dependentDialects = ["::mlir::fa3::FA3Dialect"];
}

def FA3Tile : Pass<"fa3-tile"> {
  let summary = "Split fa3.attention and fa3.attention_grad into tile loops";
  let description = [{
    Rewrites each scheduled `fa3.attention` into loops over batch, query
    head and blocks of `block_m` query rows. Each iteration loads its query
    tile (`fa3.load_tile`), computes it with one `fa3.attention_block` against
    the keys and values of the matching key/value head (GQA: query head `h`
    reads head `h / (Hq / Hkv)`), and stores the output tile and its LSE
    (`fa3.store_tile`, `fa3.store_stats`). The query-block count is
    `ceildiv(Sq, block_m)` computed at run time, so dynamic sequence lengths
    need no recompilation. Nothing of size Sq × Sk exists after this pass.
    The scale is resolved (1/sqrt(D) when absent) on the block op.

    ```mlir
    %r:2 = scf.for %b = %c0 to %B step %c1 iter_args(%o = %o0, %l = %l0) {
      scf.for %h ... scf.for %qb ... {
        %qt = fa3.load_tile %q[%b, %q0, %h] : tensor<2x?x8x64xf16> -> tensor<64x64xf16>
        %ot, %lt = fa3.attention_block %qt, %k, %v, %b, %hkv, %q0, %sq {...}
        %o1 = fa3.store_tile %ot into %o[%b, %q0, %h] : ...
        %l1 = fa3.store_stats %lt into %l[%b, %h, %q0] : ...
    ```

    Each `fa3.attention_grad` becomes FlashAttention-2's backward in three
    loop nests, with O(N) extra memory (an f32 `Δ [B, Hq, Sq]` and an f32 dQ
    accumulator `[B, Sq, Hq, D]`):

    1. per query tile: `Δ = rowsum(dO ∘ O)` (`fa3.row_dot`) and a zeroed dQ
       accumulator tile;
    2. per key tile of `block_n` rows (batch, key/value head, key block): the
       dK and dV accumulators live across a loop over the query heads of the
       GQA group and the query blocks that can see the key tile (causal and
       window bounds skip the others; boundary blocks are masked as in the
       forward). Each step recomputes `P` from `S = Q Kᵀ` and the forward's
       LSE (`fa3.recompute_probs`), then `dV += Pᵀ dO` (`fa3.mma_tn`),
       `dP = dO Vᵀ` (`fa3.qk`), `dS = P ∘ (dP − Δ)` (`fa3.softmax_grad`,
       `fa3.softcap_grad` with a softcap), `dK += dSᵀ Q` and
       `dQ_acc += dS K` (`fa3.pv`), the last read and written back to the
       accumulator tensor. dK (times the scale) and dV are converted and
       stored once per key tile, so the GQA sum needs no atomics;
    3. per query tile: `dQ = scale · dQ_acc` (`fa3.scale_cast`).

    An FP8 `fa3.attention` (f8E4M3FN inputs with descales) keeps its e4m3
    tiles: each block reads the descales of its batch and key/value head
    (`tensor.extract`) and takes `descale(q_descale · k_descale,
    v_descale)` and `probs_scale = 256` (P is rounded as the Hopper kernel
    rounds it: e4m3 of `P · 2^8`, divided by 2^8 again; the row sums use P
    before that rounding); the output is bf16.

    With `grid=true` (what `fa3-hopper-pipeline` runs) the forward's three
    loops are one `scf.forall` over (query block, query head, batch; with
    `pack_gqa`, key/value head) mapped
    to `#gpu.block<x>`, `<y>` and `<z>`: the grid of the kernel, one CTA per
    query tile. Its iterations contribute their tiles with
    `fa3.parallel_store_tile` / `fa3.parallel_store_stats`.
    `fa3.attention_grad` (dense) becomes its three phases as three such
    foralls, the grids of the Hopper backward's three kernels: Δ per
    (query block, query head, batch); dK and dV per (key block, key/value
    head, batch), stored with parallel stores; dQ per (query block, query
    head, batch). The dQ accumulator is a zero-filled f32 buffer
    (`memref.alloc` + `linalg.fill`) to which each step of a key block adds
    its partial `dS K` with `fa3.accumulate_tile` (`ordered` with
    `deterministic`): the key blocks of one query tile run in parallel and
    add to the same rows, which the value semantics of a forall's shared
    outputs cannot express. The third forall reads it through
    `bufferization.to_tensor`. `fa3.attention_varlen_grad` takes the same
    grids with z over the sequences and x over `ceildiv(T, block)` blocks:
    each iteration reads its sequence's offsets (`tensor.extract` of
    `cu_seqlens_q`/`_k`, and `seqused_k`) and moves its rows with the
    sequence's end as the `limit`; the gradients start zero-filled, so rows
    outside every sequence are 0.

    The inference ops take the same loops, with their lengths read from
    data inside the batch loop:
    * `fa3.attention_varlen`: the packed `[T, H, D]` tensors are viewed as
      `[1, T, H, D]` (`tensor.expand_shape`); sequence `b` runs
      `ceildiv(Sq_b, block_m)` query blocks whose loads and stores start at
      row `cu_seqlens_q[b]` and carry `limit cu_seqlens_q[b + 1]`, and whose
      blocks read `key_start cu_seqlens_k[b] key_len Sk_b`. The output
      starts zero-filled and the LSE at -inf, so rows outside every
      sequence are defined.
    * `fa3.attention_kvcache`: batch `b`'s blocks read `key_len
      cache_seqlens[b]` keys (clamped to [0, the cache's rows], or to the
      max_pages · page_size keys a page table addresses), through `pages
      %page_table` when paged.
    * `fa3.kvcache_append`: a loop over (batch, new row) inserting one
      `[1, 1, H, D]` row per step at position `cache_seqlens[b] + i` (in
      its page when paged); a row whose position falls outside the cache or
      its page table is dropped.
    With `grid=true`, `fa3.attention_kvcache` (contiguous or paged) takes
    the forward's grid, each iteration reading its batch's length
    (`tensor.extract` of `cache_seqlens`) into the block's `key_len`; with
    `num_splits = N > 1` the grid's z runs over N·B (split s of batch b at
    z = s·B + b, f32 partials stored at batch z) and `fa3.combine_splits`
    merges the partials after the forall. `fa3.attention_varlen` takes it
    too: z runs over the sequences, x over `ceildiv(T_q, block_m)` query
    blocks (as many as the longest sequence can have; a runtime may launch
    fewer, down to the longest sequence's, since a block past its
    sequence's end stores nothing), and each iteration's query load and
    both parallel stores start at row `cu_seqlens_q[b] + x · block_m` with
    `limit cu_seqlens_q[b + 1]`; the forall's outputs are the filled
    inits. The other inference ops have no `grid=true` form yet (an error
    says so).
  }];
  let options = [
    Option<"grid", "grid", "bool", /*default=*/"false",
           "Tile into scf.foralls mapped to GPU blocks (the Hopper kernels' "
           "grids)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
}

def FA3FuseSoftmax : Pass<"fa3-fuse-softmax"> {
  let summary = "Expand fa3.attention_block into an online-softmax loop";
  let description = [{
    Replaces each `fa3.attention_block` with a loop over the key blocks the
    query tile can see. The loop carries the f32 output accumulator, the
    running row max `m` and the running row sum `l`; each step loads a K and
    a V tile, computes `S = Q Kᵀ` (`fa3.qk`), soft-caps it when asked, masks
    it only when the block crosses the end of the keys, the causal diagonal
    or a window edge (`scf.if` around `fa3.mask`), and folds the block in
    with `fa3.online_softmax` (exp2 with `scale · log2(e)` folded into one
    multiply), `fa3.rescale` and `fa3.pv`. `fa3.finalize` divides by `l` and
    forms `LSE = scale · m + log(l)`.

    The loop bounds skip key blocks that are entirely masked for every row
    of the tile (causal: blocks right of the last row's diagonal; window:
    blocks outside the union of the rows' windows). A tile none of whose
    rows sees a key runs no iteration and finalizes to `O = 0`,
    `LSE = -inf`.

    A block with `key_len` sees that many keys instead of the key tensor's
    rows; with `key_start` its key `j` is row `key_start + j`, and its key
    loads carry `limit key_start + key_len` (one sequence of a packed
    batch). With `pages` the key and value tiles are `fa3.load_paged_tile`
    reads through the page table. Masks and loop bounds stay in the
    sequence's own coordinates.

    The loop keeps the block's schedule as its `fa3.schedule` attribute, for
    the passes that restructure it as the schedule asks
    (`fa3-intra-wg-overlap`).
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
}

def FA3WarpSpecialize : Pass<"fa3-warp-specialize"> {
  let summary = "Split a Hopper grid's tile into a producer warpgroup and consumers";
  let description = [{
    FlashAttention-3's warp specialization on the tile level. For each
    key loop of `fa3-fuse-softmax` whose `fa3.schedule` sets
    `producer_regs`/`consumer_regs`, directly in a grid `scf.forall`'s body
    (`fa3-tile{grid=true}`), the query tile's load, the key loop and
    `fa3.finalize` move into the consumers region of an
    `fa3.warp_specialize`, and its producer region gets the loads the
    consumers read, as `fa3.ring_fill` ops in the order the producer fills
    the rings: the query tile, the key tile of the first block, then per
    block i the key tile of block i + 1 ahead of the value tile of block i
    (the order the consumers read them once `fa3-intra-wg-overlap` rotated
    the loop, so no key load waits behind a value slot a PV still reads).
    Each fill has the coordinates of the consumers' load, its index
    arithmetic cloned with the block's index, and its number among the
    ring's fills (`use`):

    ```mlir
    %o, %lse = fa3.warp_specialize -> (...) producer {
      fa3.ring_fill %q[%b, %q0, %h] : ... -> tensor<128x64xbf16>
      %n = arith.maxsi (%hi - %lo), %c0
      scf.if (%n > 0) { ... fa3.ring_fill %k[%b, %lo * 64, %hkv] use %c0 ... }
      scf.for %i = %c0 to %n step %c1 {
        %i1 = arith.addi %i, %c1 : index
        scf.if (%i1 < %n) { ... fa3.ring_fill %k[...] use %i1 ... }   // block lo + i + 1
        ... fa3.ring_fill %v[...] use %i ...                          // block lo + i
      }
      fa3.yield
    } consumers {
      %qt = fa3.load_tile %q[%b, %q0, %h] : ...
      ... the key loop and fa3.finalize, unchanged ...
      fa3.yield %ot, %lt : ...
    } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
    ```

    It runs in `fa3-hopper-pipeline` after `fa3-fuse-softmax` and before
    `fa3-intra-wg-overlap`, which then rotates the consumers' loop. A key
    or value tile of a paged cache (`fa3.load_paged_tile`) is filled through
    its page table (`fa3.ring_fill ... pages %table`). Key and value tiles
    are filled whole whatever their row limit (fa3.mask hides the keys past
    it). A query tile with a row limit (a packed variable-length sequence's
    end) is filled whole only where the forall's stores drop the rows past
    that limit (the same row and limit), so the rows the whole tile reads
    in their place affect nothing stored. Other loads the producer cannot
    issue as whole tiles (a query row limit the stores do not share, packed
    key/value heads) are an error.

    The backward: in a Hopper kernel function whose `fa3.schedule` has
    `producer_regs`, the key-block grid of `fa3-tile{grid=true}` (the one
    that adds into the dQ accumulator) is split the same way. The producer
    fills K and V once (no `use`), then, in the consumers' loop order, for
    each step (query head `g` of the group, query block `qb` of the visible
    range [lo, hi)) the step's Q, dO, LSE and Δ tiles as ring use
    `g · (hi − lo) + (qb − lo)` (the statistics as 1-D fills of their
    `[B, H, S]` tensors), at the coordinates of the consumers' loads. The
    consumers region holds the tile ops (the K/V loads, the step loops and
    dK/dV's conversions) and returns dK and dV to the forall's stores; the
    index arithmetic stays in the grid's body, which both regions read.
    `convert-fa3-tile-to-hopper` builds the backward's producer warpgroup
    from this split and rejects a schedule with `producer_regs` whose grid
    was not split.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::fa3::FA3Dialect",
                           "::mlir::scf::SCFDialect"];
}

def FA3IntraWarpgroupOverlap : Pass<"fa3-intra-wg-overlap"> {
  let summary = "Rotate the key loop so block j+1's QKᵀ and softmax overlap block j's PV";
  let description = [{
    Software-pipelines each key loop of `fa3-fuse-softmax` whose
    `fa3.schedule` (the attribute that pass leaves on the loop) has
    `intra_wg_overlap = true` by one stage, FlashAttention-3's
    intra-warpgroup overlap. The loop body splits into two stages:

    * stage B: `fa3.pv` and what its value tile is computed from (the V
      load and its index arithmetic);
    * stage A: everything else: the K load, `fa3.qk`, the mask, the
      softmax and the `fa3.rescale` of the accumulator.

    The rotated loop runs stage A of block j + 1 beside stage B of block j,
    with stage B placed right after stage A's `fa3.qk`, so on Hopper the two
    MMAs are issued back to back and block j + 1's softmax runs while block
    j's PV computes. Stage A of the first block is peeled before the loop
    and stage B of the last after it, under one `scf.if` on a non-empty key
    range, so no MMA sits under a branch of its own:

    ```mlir
    %r:3 = scf.if %nonempty -> (...) {
      ... stage A of block lo (K load, qk, mask, softmax, rescale of O0) ...
      %l:4 = scf.for %j = %lo to %hi_1 step %c1
          iter_args(%p = ..., %m = ..., %l = ..., %o = ...) {
        %j1 = arith.addi %j, %c1 : index
        ... K load and fa3.qk of block j1 ...
        ... V load of block j; %o1 = fa3.pv %p, %v, %o ...
        ... mask and fa3.online_softmax of block j1; %o2 = fa3.rescale %o1 ...
        scf.yield %p1, %m1, %l1, %o2
      } {fa3.intra_wg_overlap, fa3.schedule = ...}
      ... stage B of block hi - 1: %o = fa3.pv %l#0, %v, %l#3 ...
      scf.yield %o, %l#1, %l#2
    } else {
      scf.yield %o0, %m0, %l0
    }
    ```

    The loop carries P (the probabilities of the block whose PV is still
    to come), the carried statistics and the rescaled accumulator. The
    arithmetic is that of the unrotated loop, op for op (O_j = α_j O_{j-1} +
    P_j V_j either way), so the CPU pipeline gives the same bits with and
    without the rotation. A rotated loop is marked `fa3.intra_wg_overlap`
    and not rotated again. A loop the schedule asks to rotate but that is
    not of this form (no single `fa3.pv`, a value tile that depends on the
    carried values, a step other than 1) is an error.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
}

def FA3LazyRescale : Pass<"fa3-lazy-rescale"> {
  let summary = "Keep a row's softmax max until a key block raises it by more than 2^τ";
  let description = [{
    Lazy rescaling of the online softmax (FlashAttention-4's conditional
    rescaling): for each key loop whose `fa3.schedule` has
    `rescale_threshold = τ > 0`, sets `rescale_threshold = τ` on its
    `fa3.online_softmax`. A row then keeps its running max m unless a block
    raises `c · m` by more than τ, and its correction is exactly 1 while it
    does: on Hopper a warp whose rows all kept their max skips the
    accumulator's rescale (one multiply per accumulator element and key
    block, on the path from the softmax to the P V wgmma). The result is
    the same function of the kept max (O / l, and the LSE from m and l);
    P is at most 2^τ instead of 1.

    FP8: P enters the e4m3 P V as P · s (`fa3.pv`'s `probs_scale`, 2^8),
    and e4m3 saturates at 448, so the pass lowers s to 2^(8 − τ): P · s
    stays within 2^8.

    ```mlir
    // rescale_threshold = 8 in the loop's schedule:
    %p, %m1, %l1, %alpha = fa3.online_softmax %s, %m0, %l0
        {exp2_scale = 0.180336878 : f32, rescale_threshold = 8 : i64} : ...
    ```

    It runs after `fa3-fuse-softmax` (on the one key loop, before
    `fa3-intra-wg-overlap` copies the softmax into a prologue) in both
    pipelines, so the CPU computes the kept maxima the GPU does.
  }];
  let dependentDialects = ["::mlir::fa3::FA3Dialect"];
}

def FA3Pingpong : Pass<"fa3-pingpong"> {
  let summary = "Group the key loop's MMAs into the turns two consumer warpgroups take";
  let description = [{
    FlashAttention-3's pingpong schedule on the tile level: for each key
    loop whose `fa3.schedule` has `pingpong = true`, wraps the MMAs one
    consumer warpgroup issues per turn into `fa3.mma_turn`. On Hopper the
    two consumers take turns through named barriers, so one warpgroup's
    softmax runs while the other's GEMMs do:

    * plain key loop: the turn is the `fa3.qk` (the PV runs outside turns,
      as in FlashAttention-3 without intra-warpgroup overlap);
    * key loop rotated by `fa3-intra-wg-overlap`: one turn spans block
      j + 1's `fa3.qk` through block j's `fa3.pv` (with the V load between);
      in the prologue and epilogue around it each MMA is a turn of its own.

    ```mlir
    %s, %o1 = fa3.mma_turn -> (tensor<128x64xf32>, tensor<128x64xf32>) {
      %s = fa3.qk %qt, %kt : ...
      %vt = fa3.load_tile %v[%b, %row, %h] : ...
      %o1 = fa3.pv %p, %vt, %o : ...
      fa3.yield %s, %o1 : tensor<128x64xf32>, tensor<128x64xf32>
    }
    ```

    Each such key loop also gets `fa3.pingpong_turns`, where its turns
    start and end on Hopper: `"across_tiles"` for 16-bit tiles (on a
    persistent grid consumer 0 takes the first turn once, before its tile
    loop, and consumer 1's last turn once, after it, so one warpgroup's
    epilogue and next QKᵀ overlap the other's last GEMMs), `"per_tile"` for
    e4m3 tiles (consumer 0 goes first at every tile and takes consumer 1's
    last turn before its epilogue). Measured on the H100
    (docs/Performance.md, 2026-12-07): turns across tiles gained the bf16
    causal forwards 1-3% at 512-4k and cost the FP8 d128 causal forward 6%
    at 8k.

    ```mlir
    scf.for ... {
      ...
    } {fa3.pingpong_turns = "across_tiles", fa3.schedule = #fa3.schedule<...>}
    ```

    A turn computes what its body computes (the CPU lowering inlines it);
    it runs after `fa3-intra-wg-overlap` in `fa3-hopper-pipeline`. Loops that
    already hold turns are left alone; ops other than tile loads and index
    arithmetic between a rotated loop's QKᵀ and PV are an error.
  }];
  let dependentDialects = ["::mlir::fa3::FA3Dialect"];
}

def FA3GradMmaOrder : Pass<"fa3-grad-mma-order"> {
  let summary = "Move a backward step's MMAs to where FlashAttention-3 issues them";
  let description = [{
    `fa3-tile` writes each step of the backward's key loop (one key block
    against one query block) in the order of its math: Sᵀ = `fa3.qk`, Pᵀ =
    `fa3.recompute_probs`, dV += Pᵀ dO (`fa3.mma_tn`), dPᵀ = `fa3.qk`, dSᵀ
    = `fa3.softmax_grad`, dK += dSᵀ Q (`fa3.mma_tn`), dQ = dS K (`fa3.pv`,
    added by `fa3.accumulate_tile`). On Hopper every MMA is issued
    asynchronously and waited for at its first use, so the order of the ops
    is the kernel's overlap. This pass moves them into FlashAttention-3's
    backward order (`hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp`):

    * dPᵀ's `fa3.qk` right after Sᵀ's: both are issued back to back, and
      Pᵀ's exponentials run while dPᵀ's wgmmas do;
    * dV's `fa3.mma_tn` after dSᵀ (and softcap's derivative), right before
      dQ's `fa3.pv`: it runs while dSᵀ is stored to shared memory for dQ;
    * dK's `fa3.mma_tn` right after dQ's `fa3.pv`, before the
      `fa3.accumulate_tile`: it runs while dQ is added to the accumulator.

    ```mlir
    %s = fa3.qk %q, %k : ...
    %dp = fa3.qk %do, %v : ...
    ... mask, %p = fa3.recompute_probs, [fa3.dropout], %ds = fa3.softmax_grad ...
    %dv1 = fa3.mma_tn %p, %do, %dv : ...
    %dq = fa3.pv %ds, %k, %zero : ...
    %dk1 = fa3.mma_tn %ds, %q, %dk : ...
    fa3.accumulate_tile %dq into %acc[...] : ...
    ```

    Only SSA order changes, so the CPU pipeline, which runs the pass too,
    computes the same numbers with and without it; `convert-fa3-tile-to-hopper`
    emits the step op by op and needs this order. A step is the block of an
    `fa3.softmax_grad`; one without two `fa3.qk` (dPᵀ's among them), dQ's
    `fa3.pv` and the two `fa3.mma_tn`, or whose ops cannot move there, is
    an error. A step already in this order is left as it is.
  }];
}

def FA3OrderGrid : Pass<"fa3-order-grid", "::mlir::func::FuncOp"> {
  let summary = "Launch a causal grid's longest tiles first, in L2-sized head groups (forward) or pair chunks (GQA backward)";
  let description = [{
    Renumbers the tiles of a causal forward grid (the 3-D `scf.forall`
    over query tile, head and batch that `fa3-tile{grid=true}` makes and
    that maps to `#gpu.block<x/y/z>`) so that the order in which the GPU
    starts CTAs is longest-processing-time first. A causal query tile `t`
    visits `t + 1` key blocks' worth of work; in the launch order the grid
    has (query tile fastest) the heaviest tile of the last head starts last
    and runs alone while the other SMs idle. After this pass the block
    with linear id `L = x + X · (y + Y · z)` (the order CTAs are started)
    takes:

        group   = L / (G · T)          (T query tiles, G heads a group)
        g       = min(G, B · Hq − group · G)
        r       = L − group · G · T
        tile    = T − 1 − r / g        (longest first within the group)
        head·batch = group · G + r % g

    The heads are taken in groups of `G = max(1, budget / (Sk · 2 · D · 2
    bytes)) · (Hq / Hkv)`, the budget 8 MiB of the L2 up to 1024 keys and
    32 MiB (FlashAttention-3's budget for its LPT scheduler) beyond. Short
    key loops are memory-bound: with 8 MiB a group is about one wave of
    tiles (32 heads of 4 tiles at 512 keys, d128), so a head's query tiles
    run together and share its K/V in the L2 while Q and O stream past
    (with 32 MiB a causal 512 forward read 28% more from DRAM than its
    tensors hold). Longer key loops are compute-bound, and there the larger
    groups balance the SMs better. The map is a bijection of the same grid:
    the launch is unchanged. Non-causal grids (every tile the same work)
    are left as they are.

    A causal GQA backward (the kernel function of `fa3.attention_grad`,
    recognized by its `fa3.accumulate_tile`) has its key-block grid
    renumbered instead: key block 0 of a (K/V head, batch) pair sees every
    query row and the last the fewest, so with `X` key blocks, `P = Hkv ·
    B` pairs and chunks of `C = min(max(32 MiB / (Sq · 2 · 2 bytes · D ·
    Hq / Hkv), 1), P)` pairs (a chunk's Q and dO fit the L2):

        chunk = L / (C · X),   first = chunk · C,   c = min(C, P − first)
        r     = L − first · X
        key block = r / c,     K/V head · batch = first + r % c

    (measured on an H100: −17% of the main kernel at the Llama shape, GQA
    32:8, 4k). With one query head a K/V head the grid's own order balanced
    better (−6% to +2% at 2k–8k), and the grid is left as it is; so are the
    Δ and dQ grids and a packed batch's.

    It runs on the tile-level kernel functions of the Hopper pipeline,
    after `fa3-fuse-softmax`; the rewritten forall stays the form
    `convert-fa3-tile-to-hopper` reads (its body's index arithmetic is
    emitted as is).
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def FA3SerializeGrid : Pass<"fa3-serialize-grid"> {
  let summary = "Run a tile-level grid as serial loops, so the CPU checks the GPU's tiling";
  let description = [{
    Rewrites each grid `scf.forall` whose `scf.forall.in_parallel` holds
    only `fa3.parallel_store_tile` / `fa3.parallel_store_stats` (what
    `fa3-tile{grid=true}` makes, mapped to `#gpu.block` or
    `#fa3.persistent_block`) into a nest of `scf.for` loops over the same
    bounds that carries the shared outputs: each parallel store becomes the
    `fa3.store_tile` / `fa3.store_stats` of the same tile at the same
    coordinates and limit into the carried tensor. The iterations write
    disjoint rows, so the order changes nothing; the result is the forall's.

    `fa3-cpu-pipeline{grid=true}` runs `fa3-tile{grid=true}` and then this
    pass, so the CPU executes the tiling the Hopper kernels are built from
    (the grid's bounds, each CTA's sequence rows, row limits, split ranges
    and the merge) and its numbers are checked against float64 without a
    GPU.

    ```mlir
    %r:2 = scf.forall (%x, %h, %b) in (%n, 8, %B) shared_outs(%o = %o0, %l = %l0) {
      ...
      scf.forall.in_parallel {
        fa3.parallel_store_tile %ot into %o[%b, %q0, %h] : ...
        fa3.parallel_store_stats %lt into %l[%b, %h, %q0] : ...
      }
    }
    // becomes
    %r:2 = scf.for %x = %c0 to %n step %c1 iter_args(%o = %o0, %l = %l0) {
      %s:2 = scf.for %h = ... {
        %t:2 = scf.for %b = ... {
          ...
          %o1 = fa3.store_tile %ot into %o[%b, %q0, %h] : ...
          %l1 = fa3.store_stats %lt into %l[%b, %h, %q0] : ...
          scf.yield %o1, %l1 : ...
        } ...
      } ...
    }
    ```
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect"];
}

def FA3PersistentGrid : Pass<"fa3-persistent-grid", "::mlir::func::FuncOp"> {
  let summary = "Walk a kernel's tiles with one persistent CTA per SM";
  let description = [{
    FlashAttention-3's persistent tile scheduler on the tile level: for each
    grid `scf.forall` (the 3-D grid over query tile, head and batch that
    `fa3-tile{grid=true}` maps to `#gpu.block<x/y/z>`) whose key loop's
    `fa3.schedule` has `persistent = true`, maps the grid to
    `#fa3.persistent_block<x/y/z>`:

    ```mlir
    scf.forall (%t, %h, %b) in (%tiles, 4, %batch) shared_outs(...) {
      ...
    } {mapping = [#fa3.persistent_block<x>, #fa3.persistent_block<y>,
                  #fa3.persistent_block<z>]}
    ```

    The forall computes the same tiles; what changes is who runs them.
    min(tiles, multiprocessors) CTAs are launched and take the tiles in
    linear order (x fastest, the order `fa3-order-grid` chose): CTA c takes
    tile c first, then gridDim.x + atomicAdd(counter, 1), the counter being
    zero at launch, so a CTA that finishes early takes the next tile (a
    fixed order lost 9–22% of the makespan on causal grids in a model,
    `bench/model_tile_schedule.py`). On Hopper the producer warpgroup loads
    the next tile's Q (into
    the second of two Q tiles where they fit) and its first K/V blocks
    while the consumers finish the current tile, and the K/V ring's slots
    and phases run on across tiles. A persistent grid needs that producer:
    a `persistent` schedule without `fa3.warp_specialize` in the grid is an
    error.

    It runs after `fa3-order-grid` in `fa3-hopper-pipeline` (which reads
    `#gpu.block` grids); `convert-fa3-tile-to-hopper` builds the tile loop
    from the mapping and rejects a schedule that disagrees with it.
  }];
}

#endif // FA3_DIALECT_FA3_TRANSFORMS_PASSES_TD
