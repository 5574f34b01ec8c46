//===- Passes.td - fa3 conversion passes -------------------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_CONVERSION_PASSES_TD
#define FA3_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertFA3ToLinalg : Pass<"convert-fa3-to-linalg"> {
  let summary = "Lower the fa3 tile level to linalg, tensor, arith and math";
  let description = [{
    The CPU lowering of the tile level. Tile loads become a zero-filled tile
    with the in-range rows inserted (`tensor.extract_slice` of a run-time
    row count, then `tensor.insert_slice`); tile stores insert only the rows
    inside the sequence. `fa3.qk` and `fa3.pv` become `linalg.generic`
    contractions that accumulate in f32 (`fa3.pv` rounds P to the element
    type of V first, as the GPU does); the softmax steps become elementwise
    and row-reduction `linalg.generic`s using `math.exp2`, `math.log` and
    `math.tanh`. Everything stays on tensors, so one-shot bufferization
    follows.

    Tensor-level ops (`fa3.attention`, `fa3.attention_block`) must already be
    tiled: the pass reports them as illegal.

    ```mlir
    %s = fa3.qk %q, %k : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    // becomes
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
    %s = linalg.generic {indexing_maps = [(i, j, k) -> (i, k), (i, j, k) -> (j, k),
                                          (i, j, k) -> (i, j)], ...}
        ins(%q, %k : ...) outs(%z : tensor<64x64xf32>) { ... arith.extf ... }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
}

def ConvertFA3ToHopper : Pass<"convert-fa3-to-hopper", "::mlir::ModuleOp"> {
  let summary = "Generate sm_90a kernels for fa3.hadamard and fa3.quantize from L0";
  let description = [{
    The Hopper kernels that do not go through the tile level yet. Each is
    emitted into `gpu.module @fa3_kernels` (targeting
    `#nvvm.target<chip = "sm_90a", features = "+ptx86">`) and its host op is
    annotated with `fa3.kernel` (the kernel symbol) and `fa3.launch`
    (threads, dynamic shared memory, tile sizes); the host side stays at the
    tensor level. Ops that already carry `fa3.kernel` (the forwards
    `fa3-outline-hopper-kernels` took) are skipped; an `fa3.attention`
    without one is an error (it is built by `convert-fa3-tile-to-hopper`),
    and so is an `fa3.attention_grad` or `fa3.attention_varlen_grad`
    without one: their kernels come from their tile-level grids
    (`convert-fa3-tile-to-hopper`) as well.
    Schedule fields no kernel implements (`persistent` for the backward,
    `cluster` > 1, a
    `consumer_wgs` other than `block_m` / 64, a register split that
    `setmaxnreg` cannot make) are errors.

    The backward's three kernels (which `convert-fa3-tile-to-hopper` emits
    for `fa3.attention_grad` and `fa3.attention_varlen_grad` from their
    grids), named after its spec:
    `<name>_pre` (one warp per query row: Δ = rowsum(dO ∘ O), the LSE in
    base 2, a zeroed row of the f32 dQ accumulator), `<name>` (one CTA per key
    block of `block_n` rows, two warpgroups: K/V loaded once, Q/dO tiles of
    `block_m` = 64 rows and their LSE/Δ on an mbarrier ring over every query
    head of the GQA group and every visible query block; Sᵀ = K Qᵀ and
    dPᵀ = V dOᵀ as shared-memory wgmma, dV += Pᵀ dO and dK += dSᵀ Q as
    register-A wgmma, dSᵀ through swizzled shared memory into dQ = dS K with
    both operands MN-major; at D <= 128 each warpgroup's 64 x 64 dQ partial
    goes through a shared-memory staging tile to one
    `cp.reduce.async.bulk` add per step, at D = 256 it is added from
    registers with `red.global.add.v4.f32`) and `<name>_post` (dQ = scale ·
    accumulator, a CTA per 64-row block). The accumulator has the
    statistics' padded rows, each 64-row block one tile in wgmma fragment
    order (see `buildHopperAttentionGradKernels`).
    The runtime launches them in order with a workspace it sizes
    (`attentionGradWorkspaceBytes`).

    The ops `fa3-cast-fp8` inserts before an FP8 attention get kernels too:
    `fa3.hadamard` one warp per row of 32 to 256 elements (`fa3_hadamard_*`;
    butterflies in registers and through `shfl.bfly`), `fa3.quantize` a pair
    (`<name>_amax`: per-group amax by atomic max of the float bits over CTAs
    of row chunks, `block_m` rows each; `<name>_cast`: correctly rounded
    descales and `cvt.rn.satfinite.e4m3x2`). The runtime launches them
    (`FP8PrepLauncher.h`).

    ```mlir
    %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, schedule = #fa3.schedule<...>} : ...
    // becomes
    %dq, %dk, %dv = fa3.attention_grad ... {causal, fa3.kernel = @fa3_kernels::@fa3_bwd_bf16_d128_...,
        fa3.launch = {block_m = 64, block_n = 128, shared_memory = ..., threads = 256}, ...} : ...
    gpu.module @fa3_kernels [#nvvm.target<chip = "sm_90a", features = "+ptx86", O = 3>] {
      llvm.func @fa3_bwd_bf16_d128_..._pre(...) attributes {nvvm.kernel, ...} { ... }
      llvm.func @fa3_bwd_bf16_d128_...(%tq: !llvm.ptr {llvm.byval = !llvm.array<16 x i64>, nvvm.grid_constant}, ...)
          attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>} { ... }
      llvm.func @fa3_bwd_bf16_d128_..._post(...) attributes {nvvm.kernel, ...} { ... }
    }
    ```
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90a\"",
           "The GPU to generate for (only sm_90a)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::scf::SCFDialect"];
}

def FA3OutlineHopperKernels
    : Pass<"fa3-outline-hopper-kernels", "::mlir::ModuleOp"> {
  let summary = "Give each 16-bit attention and backward a tensor-level kernel function in @fa3_kernels";
  let description = [{
    The first step of the Hopper forward's lowering. For each scheduled
    f16/bf16 `fa3.attention` (and each `fa3.attention_kvcache`: its
    function takes `cache_seqlens` after the caches and, paged, the page
    table after that; with `num_splits = N > 1` the launch says
    `num_splits = N`; and each `fa3.attention_varlen`: its function takes
    the packed `[T, H, D]` tensors, `cu_seqlens_q`, `cu_seqlens_k` and
    `seqused_k` when present, on dynamic token and sequence counts, and its
    launch says `varlen = 1`, and `seqused = 1` with `seqused_k`; split-KV
    and a persistent schedule are rejected for it), checks the
    schedule as `convert-fa3-to-hopper`
    does (the same diagnostics), creates in `gpu.module @fa3_kernels` a
    function named after the kernel's spec that holds the attention on
    dynamic batch and sequence lengths, with the schedule as its
    `fa3.schedule` attribute, and annotates the host op with `fa3.kernel`
    and `fa3.launch` (threads, dynamic shared memory, tile sizes), the
    metadata the runtime launches it with. The host side stays at the tensor
    level. Attentions of one spec share one function.

    `fa3-hopper-pipeline` then runs `fa3-tile{grid=true}` and
    `fa3-fuse-softmax` on the function (the passes and tile ops of the CPU
    pipeline), `fa3-order-grid` (longest-first tiles for causal grids) and
    `convert-fa3-tile-to-hopper` turns it into the kernel. An FP8 attention
    (f8E4M3FN inputs with descales) takes the same road with e4m3 tiles;
    its kernel comes with a layout kernel `<name>_vt` writing V'. An
    `fa3.attention_grad` gets a function `@name(do, q, k, v, o, lse[,
    dlse][, rng]) -> (dq, dk, dv)` and the backward's launch flags
    (`deterministic`, `dropout`), an `fa3.attention_varlen_grad`
    `@name(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k[, seqused_k][,
    dlse])` on dynamic token and sequence counts (launch: `varlen`,
    `seqused`); `fa3-tile{grid=true}` makes each the backward's three
    grids.

    ```mlir
    %o, %lse = fa3.attention %q, %k, %v {causal, schedule = #fa3.schedule<...>} : (tensor<2x?x8x64xbf16>, ...) -> ...
    // becomes
    %o, %lse = fa3.attention %q, %k, %v {causal, fa3.kernel = @fa3_kernels::@fa3_fwd_bf16_d64_..., fa3.launch = {...}, ...}
    gpu.module @fa3_kernels [#nvvm.target<...>] {
      func.func @fa3_fwd_bf16_d64_...(%q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>)
          -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) attributes {fa3.schedule = #fa3.schedule<...>} {
        %o, %lse = fa3.attention %q, %k, %v {causal, schedule = #fa3.schedule<...>} : ...
        return %o, %lse : ...
      }
    }
    ```
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90a\"",
           "The GPU of the kernel module (only sm_90a)">,
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::NVVM::NVVMDialect"];
}

def ConvertFA3TileToHopper
    : Pass<"convert-fa3-tile-to-hopper", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Turn tile-level kernel functions into sm_90a kernels";
  let description = [{
    A backward's function (`fa3-tile{grid=true}` of an outlined
    `fa3.attention_grad` or `fa3.attention_varlen_grad`: three `#gpu.block`
    grids sharing the dQ accumulator of `fa3.accumulate_tile`; a packed
    one takes `cu_seqlens_q`, `cu_seqlens_k` and `seqused_k` as its
    arguments 6 to 8) is read for its spec: the element
    type and heads from the arguments, `block_m` and `block_n` from the Q
    and K tiles of the key-block grid, `causal` and the window from its
    `fa3.mask`, the softcap from `fa3.softcap`, the scale from the dQ
    conversion's `fa3.scale_cast`, dropout from `fa3.dropout` and
    `deterministic` from `ordered`, with the checks of
    `convert-fa3-to-hopper`; a function that reads as another spec than its
    name (the kernel the launch calls) is an error. It becomes the
    backward's three kernels, `<name>_pre`, `<name>` and `<name>_post` (see
    `convert-fa3-to-hopper` for what they do); their code is still the
    backward kernel builder's, not yet emitted op by op from the grids,
    except what the main kernel reads from the key-block grid's index
    arithmetic, replayed in i32 (the grid's induction variables as the block
    ids, its extents as the grid dims, Sq and Sk as the kernel's, a packed
    batch's `cu_seqlens`/`seqused_k` reads as loads from its parameters):
    its (key block, K/V head, batch), the K tile load's coordinates (so
    `fa3-order-grid`'s renumbering), a packed batch's sequence (its first
    query and key rows, the `fa3.mask`'s query and key lengths), the
    bounds of the query-block loop (the
    rows that see the key block) and the condition of the scf.if around
    `fa3.mask` (which steps mask). Anything else in that arithmetic, or
    steps not in the form of a loop over the group's query heads around a
    loop over query blocks, is a diagnostic.

    The forward:
    Converts each function with an `fa3.schedule` in the kernel module (made
    by `fa3-outline-hopper-kernels`, then `fa3-tile{grid=true}` and
    `fa3-fuse-softmax`) into an `llvm.func` kernel of the same name with the
    ABI of the forward kernel: the CUtensorMaps of Q, K and V by value
    (`__grid_constant__`), the O and LSE pointers, Sq, Sk and the batch
    size as i32, the tile counter and, for a KV cache's function (a fourth
    argument, i32 `cache_seqlens`), the lengths' pointer: its
    `tensor.extract` is an i32 load, and the key and value loads' row limit
    (the length) bounds nothing on Hopper: TMA reads whole tiles of the
    cache and `fa3.mask` hides the keys past the length (P = 0 there, so
    those cache rows must hold finite values). A paged cache's function (a
    fifth argument, the i32 page table) adds the table's pointer, its width,
    the page size and the chunk rows (gcd(page size, block_n), set by the
    runtime) as parameters; `tensor.dim` of the table's dim 1 and of the
    cache's dim 1 read the width and the page size, and its key and value
    tiles (`fa3.load_paged_tile`) are `fa3.tma_load_paged_tile` loads.
    A split-KV function (`fa3-tile{grid=true}` of `num_splits = N`: the
    forall stores f32 partials of N·B batches, which `fa3.combine_splits`
    merges after it) becomes two kernels: the forall's, whose O parameter
    is a plain pointer to the f32 partial O (stored from the fragment), and
    `<name>_combine`, one warp per (query, head) row, which weighs the N
    partial rows by exp(lse_s - max) into O and the LSE.
    A packed variable-length batch's function (`fa3.attention_varlen`: Q,
    K, V `[T, H, D]` viewed as `[1, T, H, D]`, i32 `cu_seqlens_q`,
    `cu_seqlens_k` and optionally `seqused_k`) adds the offsets' pointers,
    O as a plain pointer and the `seqused_k` pointer as parameters;
    `tensor.dim` of the packed tensors' dim 0 reads T_q or T_k, of the
    offsets' B + 1. Its forall's outputs must be the fills O = 0 and LSE =
    -inf, which the launch does (the kernel writes the rows inside the
    sequences only), and its query load and both stores must share the
    sequence's row and end (`limit`): the query tile reads whole tiles
    (rows of the next sequence past the end, which no store keeps), a CTA
    whose tile starts at or past its sequence's end exits at once (the
    runtime may launch x up to the longest sequence's query blocks only),
    a consumer warpgroup whose 64 rows end inside the sequence stores them
    with TMA, and the one that crosses the end copies its rows inside from
    the staged O tile with 16-byte stores through the O pointer; the LSE
    rows past the end are not stored.
    An FP8 function (e4m3 Q, K, V and three f32 `[B, Hkv]` descales) adds
    the descales' pointers after the tile counter (their `tensor.extract`
    is an f32 load, their product an f32 `arith.mulf`), loads its V tiles
    from V' (`fa3.tma_load_tile {transposed}`: the third tensor map
    describes the layout kernel's V' `[B, Hkv, D, keys]`), runs both GEMMs
    as e4m3 wgmma (k32, K-major), packs P · 2^8 (`fa3.pv`'s probs_scale) to
    e4m3 in registers, and stages its bf16 O in a tile of its own; the
    module gains the layout kernel `<name>_vt`.

    What the kernel computes is read from the IR:
    * the grid: the `scf.forall`'s induction variables are the block ids of
      its `#gpu.block` mapping, or, mapped to `#fa3.persistent_block`, the
      coordinates of tile t = x + X (y + Y z) in a loop over the tiles the
      CTA takes: t = `blockIdx.x` first, then `gridDim.x` + an atomic
      increment of the tile counter (the kernel's last parameter, zero at
      launch), while t < X·Y·Z (the forall's bounds, read at run time; the
      runtime launches min(tiles, SMs) CTAs). The producer hands each t to
      the consumers in an i32 slot beside the Q tile it loads, and the end
      index past the last one;
    * the index arithmetic of the function, the forall body and the key loop
      is emitted as is in i32 (`tensor.dim` of Q/K dim 1 is Sq/Sk); the key
      loop's bounds give the key blocks a CTA visits;
    * `fa3.load_tile` of Q: a TMA load (128-byte swizzled atoms of 64
      columns) on an mbarrier, at the op's coordinates; of K and V in the key
      loop: reads of a `stages`-deep ring, which the producer region's fills
      load (or, without a producer warpgroup, the consumers' warp 0, which
      replays the loads' coordinate arithmetic for block i + stages); each
      slot has its own full and empty mbarriers for K and for V, so a K slot
      is refilled once its QKᵀ completed, before the PV that reads the V of
      the same block; a Q load with `packed_heads = G` (PackGQA) is
      `fa3.tma_load_tile {packed_heads = G}` at the key/value head (the
      runtime's [B, S, Hkv, G, D] view of Q and O), and the mask, the O
      store and the LSE store read tile row r as query r / G of head r % G;
    * `fa3.qk`: shared-memory wgmma; `fa3.softcap`: `tanh.approx`; the
      `scf.if` around `fa3.mask`: the mask applied on the accumulator
      fragment only where its condition holds, with the mask's operands
      (q_start, k_start, the lengths) and attributes; `fa3.online_softmax`:
      quad shuffles and `ex2.approx` with its `exp2_scale`; `fa3.rescale`;
      `fa3.pv`: register-A wgmma (P, packed to 16 bits, never leaves the
      registers); `fa3.finalize`: the normalization and LSE with its
      `scale`; `fa3.parallel_store_tile`/`_stats`: masked global stores of
      the rows inside Sq at the ops' coordinates;
    * the key loop, plain or rotated by `fa3-intra-wg-overlap` (an `scf.if`
      on a non-empty range around the first block's stage A, the rotated
      loop and the last block's stage B), is emitted op by op in IR order:
      the consumers read the K and V tiles in the order the producer fills
      the ring (the n-th key tile is ring use n), a wgmma result is waited
      for (`wgmma.wait_group` with the groups committed after it still in
      flight) right before its first use, and the ring slot a wgmma read is
      released right after that wait. So the rotated loop keeps block j's
      PV in flight during block j + 1's softmax with no schedule flag: the
      IR's order says it.

    * `fa3.warp_specialize` (`fa3-warp-specialize`): a producer warpgroup
      (`setmaxnreg.dec` to `producer_regs`) whose thread 0 runs the
      producer region, each `fa3.ring_fill` a TMA load into its ring slot
      (`use` mod `stages`, after a wait on the slot's empty barrier once it
      was used), and consumer warpgroups (`setmaxnreg.inc`) running the
      consumers region; without it the consumers' warp 0 refills the ring.

    How it computes comes from the `#fa3.schedule`: the ring depth
    (`stages`), `producer_regs`/`consumer_regs` (which must match the
    `fa3.warp_specialize`), `pingpong` (`fa3-pingpong`'s `fa3.mma_turn`
    ops, each emitted as: wait for its first MMA's tile, `bar.sync` on this
    consumer's named barrier, the wgmmas, `bar.arrive` on the other's; the
    schedule's flag must match whether the kernel has turns) and
    `persistent` (both roles walk the same tiles; the K/V ring's position
    and the Q barriers' phases carry across tiles; where two Q tiles fit in
    shared memory (d <= 128) tile n uses Q tile n % 2, so the producer
    loads tile n + 1's Q while tile n computes, else one Q tile is reloaded
    once the consumers arrive on its Q-empty mbarrier after their key
    loop, during this tile's epilogue). `intra_wg_overlap` must match the
    key loop's form and needs a producer warpgroup. Each
    consumer warpgroup owns 64 rows of the query tile. A function of another
    form (other ops, other dataflow in the key loop) is an error naming the
    op.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::scf::SCFDialect"];
}

def ConvertFA3KernelToNVVM : Pass<"convert-fa3-kernel-to-nvvm"> {
  let summary = "Lower fa3's Hopper kernel ops to NVVM and inline PTX in the LLVM dialect";
  let description = [{
    The last step of the Hopper kernel level: the kernel builders emit LLVM
    and NVVM ops plus the fa3 ops for instructions MLIR has no form for
    (`fa3.wgmma`: an MMA with an A operand in registers and accumulators
    kept in place; `fa3.named_barrier`: `bar.sync`/`bar.arrive` at a chosen
    id and thread count) and for the mbarrier rings of the kernel's
    shared-memory buffers (`fa3.ring_wait`, `fa3.ring_arrive`,
    `fa3.ring_barrier`: a barrier named by its ring and use number) and
    their TMA traffic (`fa3.tma_load_tile`, `fa3.tma_store_tile`: a tile in
    128-byte swizzle atoms; `fa3.tma_load_paged_tile`: a key or value tile
    of a paged cache in boxes that stay in one page). This
    pass rewrites each, one pattern per op, and fails on any it leaves: the
    instructions become their inline PTX, the ring ops NVVM's mbarrier ops
    on slot `use mod stages` for the phase parity `(use div stages) mod 2`,
    a tile load the barrier's `expect_tx` and one TMA copy per atom, a paged
    tile load the `expect_tx` and an `scf.for` over its chunks (the page
    read from the table, one TMA copy per atom), a tile store one TMA copy
    per atom.

    ```mlir
    fa3.named_barrier %id {threads = 256 : i64}
    // becomes
    %t = llvm.mlir.constant(256 : i32) : i32
    llvm.inline_asm has_side_effects "bar.sync $0, $1;", "r,r" %id, %t : (i32, i32) -> ()

    fa3.ring_wait %key_full[%use] {stages = 2 : i64}
    // becomes
    %slot = arith.remui %use, %c2 : i32
    %parity = arith.andi (arith.divui %use, %c2), %c1 : i32
    %bar = llvm.getelementptr %key_full[%slot * 8] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
    nvvm.mbarrier.try_wait.parity %bar, %parity, %ticks : !llvm.ptr<3>, i32, i32
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
}

#endif // FA3_CONVERSION_PASSES_TD
