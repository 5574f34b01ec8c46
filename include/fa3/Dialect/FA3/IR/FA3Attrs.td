//===- FA3Attrs.td - fa3 attributes ------------------------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3ATTRS_TD
#define FA3_DIALECT_FA3_IR_FA3ATTRS_TD

include "fa3/Dialect/FA3/IR/FA3Dialect.td"
include "mlir/Dialect/GPU/IR/GPUDeviceMappingAttr.td"
include "mlir/IR/AttrTypeBase.td"

class FA3_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<FA3_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def FA3_ScheduleAttr : FA3_Attr<"Schedule", "schedule"> {
  let summary = "Tile sizes and the other choices of one attention kernel";
  let description = [{
    Everything FlashAttention-3 chooses per head dimension and element type,
    as one attribute, so that a schedule can be selected by a cost model
    (`fa3-select-schedule`), overridden by hand in the IR, or tuned.

    * `block_m`, `block_n`: query rows and key rows of one tile.
    * `stages`: depth of the K/V load ring (TMA stages on Hopper).
    * `consumer_wgs`: consumer warpgroups (each owns 64 query rows).
    * `producer_regs`, `consumer_regs`: `setmaxnreg` split between the
      producer warpgroup and the consumers (0 = no warp specialization).
    * `pingpong`: the two consumer warpgroups alternate softmax and GEMMs.
    * `intra_wg_overlap`: issue the next QKᵀ before this tile's softmax.
    * `persistent`: a persistent grid, min(tiles, SMs) CTAs looping over
      the tiles in the grid's order (longest first when causal, from
      `fa3-order-grid`); `fa3-persistent-grid` maps the grid to
      `#fa3.persistent_block`.
    * `cluster`: CTAs per cluster sharing K/V by TMA multicast (1 = off).
    * `rescale_threshold` (τ, 0 to 8, default 0; omitted when 0): lazy
      rescaling of the online softmax (`fa3-lazy-rescale`). A row keeps its
      running max until a key block raises `c · max` by more than τ, so
      most blocks skip the accumulator's rescale; P is then at most 2^τ
      (FP8 lowers P's e4m3 scale by 2^τ to keep P · scale within 2^8).
    * `poly_exp2` (N, 0 to 16, default 0; omitted when 0): every N-th
      exponential of a consumer thread's probabilities is computed on the
      FMA pipe (a degree-2 polynomial of the fraction, the integer part
      added to the exponent bits; relative error < 1.8e-3) instead of by
      MUFU.EX2, whose pipe the FP8 softmax saturates (FlashAttention-4's
      split of the exponentials between the two pipes). FP8 only: there P
      is rounded to e4m3 (2^-4 relative) right after.

    What each backend builds, and rejects with a diagnostic otherwise (a
    schedule never describes a kernel that is not built):

    | field | Hopper forward | Hopper backward |
    | --- | --- | --- |
    | `block_m`, `block_n`, `stages` | yes | `block_m` 64 (128 at D = 64), `block_n` 64/128 |
    | `consumer_wgs` | must be `block_m` / 64 | must be 2 |
    | `producer_regs`, `consumer_regs` | yes (warp specialization) | yes (a producer warpgroup loads K, V and the Q/dO ring) |
    | `pingpong` | with a producer and 2 consumers | must be false |
    | `intra_wg_overlap` | with a producer | must be false |
    | `persistent` | with a producer | must be false |
    | `cluster` | must be 1 | must be 1 |
    | `rescale_threshold` | yes (16-bit and FP8) | must be 0 (P comes from the LSE) |
    | `poly_exp2` | FP8 only | must be 0 |

    The CPU lowering uses `block_m`, `block_n`, `intra_wg_overlap` (the
    key loop rotated by `fa3-intra-wg-overlap`, with the same arithmetic, so
    the CPU checks the rotated loop bit for bit) and `rescale_threshold`
    (the same kept maxima); the other fields describe GPU kernels and do
    not change what the CPU computes.

    ```mlir
    #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2,
                  producer_regs = 24, consumer_regs = 240, pingpong = true,
                  intra_wg_overlap = true, persistent = false, cluster = 1>
    ```
  }];
  let parameters = (ins
    "int64_t":$block_m,
    "int64_t":$block_n,
    "int64_t":$stages,
    "int64_t":$consumer_wgs,
    "int64_t":$producer_regs,
    "int64_t":$consumer_regs,
    "bool":$pingpong,
    "bool":$intra_wg_overlap,
    "bool":$persistent,
    "int64_t":$cluster,
    DefaultValuedParameter<"int64_t", "0">:$rescale_threshold,
    DefaultValuedParameter<"int64_t", "0">:$poly_exp2);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def FA3_FP8Attr : FA3_Attr<"FP8", "fp8"> {
  let summary = "Run an attention in FP8: quantize its inputs to e4m3 first";
  let description = [{
    On a bf16 `fa3.attention`, asks `fa3-cast-fp8` to compute it with
    e4m3 inputs: Q, K and V are quantized per (batch, key/value head) with
    `fa3.quantize` and the attention runs in its FP8 form (bf16 output).

    * `hadamard`: incoherent processing (FlashAttention-3 §3.3): Q and K are
      first multiplied by the same random-sign Hadamard matrix
      (`fa3.hadamard`), which leaves Q·Kᵀ unchanged and spreads outliers
      over the head dim before the cast.
    * `seed`: picks the random signs of that matrix (see `fa3.hadamard`).

    ```mlir
    #fa3.fp8<hadamard = true, seed = 0>
    ```
  }];
  let parameters = (ins "bool":$hadamard,
                        DefaultValuedParameter<"int64_t", "0">:$seed);
  let assemblyFormat = "`<` struct(params) `>`";
}

def FA3_PersistentBlockMappingAttr
    : FA3_Attr<"PersistentBlockMapping", "persistent_block",
               [DeclareAttrInterfaceMethods<DeviceMappingAttrInterface>]> {
  let summary = "A grid dimension walked by a persistent set of CTAs";
  let description = [{
    An `scf.forall` mapping like `#gpu.block<x/y/z>`, for a grid whose
    iterations (tiles) are not one CTA each: `fa3-persistent-grid` maps a
    kernel's grid to it when the schedule says `persistent`. The tiles, in
    linear order with `x` fastest (the order `fa3-order-grid` chose), are
    taken by min(tiles, multiprocessors) CTAs, launched as a 1-D grid: CTA c
    takes tile c first, then the next one in that order that no CTA has
    taken (an atomic counter, zero at launch), so a CTA that finishes early
    takes the next tile as the GPU's dispatch of a one-CTA-per-tile grid
    would. Every tile is taken exactly once, so the forall's semantics are
    unchanged. A CTA's producer loads the next tile's Q and K/V while its
    consumers still finish the current one.

    ```mlir
    scf.forall (%t, %h, %b) in (%tiles, 8, %batch) ... {
      ...
    } {mapping = [#fa3.persistent_block<x>, #fa3.persistent_block<y>,
                  #fa3.persistent_block<z>]}
    ```
  }];
  let parameters = (ins EnumParameter<MappingIdEnum>:$block);
  let assemblyFormat = "`<` params `>`";
  let genVerifyDecl = 1;
}

#endif // FA3_DIALECT_FA3_IR_FA3ATTRS_TD
