//===- TileKernel.h - The tile-level forward kernel, matched ----*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// convert-fa3-tile-to-hopper reads a kernel function at the tile level in
// two steps: TileKernelMatch.cpp finds its parts (the grid, the query load,
// the key loop plain or rotated, fa3-warp-specialize's split, the stores)
// and derives the kernel's spec from them and the schedule, with a
// diagnostic for any form it does not build; TileKernelEmitter
// (TileKernelEmitter.h) emits the kernel from what was matched.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_CONVERSION_FA3TOHOPPER_TILEKERNEL_H
#define FA3_LIB_CONVERSION_FA3TOHOPPER_TILEKERNEL_H

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <array>
#include <memory>
#include <optional>

namespace mlir::fa3::detail {

/// The key loop fa3-fuse-softmax emits: per key block, load K and V, S = Q Kᵀ,
/// an optional softcap and boundary mask, the online-softmax step, the
/// rescale and O += P V. Or that loop rotated by fa3-intra-wg-overlap: an
/// scf.if on a non-empty key range around stage A of the first block (the
/// prologue), the rotated loop (stage A of block j + 1 and stage B of block
/// j) and stage B of the last block (the epilogue).
struct KeyLoop {
  /// The plain key loop, or the rotated one.
  scf::ForOp loop;
  /// The loads in `loop` (fa3.load_tile, or fa3.load_paged_tile of a paged
  /// cache). In the rotated loop at induction variable j the key load reads
  /// block j + 1 and the value load block j.
  KeyValueTileLoad keyLoad, valueLoad;
  QKOp qk;
  SoftcapOp softcap;
  scf::IfOp maskIf;
  MaskOp mask;
  OnlineSoftmaxOp softmax;
  /// Attention dropout on the softmax's P before P V (plain loop only).
  DropoutOp dropout;
  RescaleOp rescale;
  PVOp pv;
  /// Rotated: the non-empty test.
  scf::IfOp guard;
  /// The key blocks [lo, hi) the tile visits.
  Value lo, hi;
  /// What the key structure returns: O, the row max and the row sum.
  ValueRange results() {
    return guard ? ValueRange(guard.getResults())
                 : ValueRange(loop.getResults());
  }
};

/// The tile-level kernel function: one scf.forall over the grid whose body
/// loads the query tile, runs the key loop and finalizes into the two
/// parallel stores.
struct TileKernel {
  func::FuncOp func;
  ScheduleAttr schedule;
  /// The Q, K and V tensors the tile ops read: the function's first three
  /// arguments, or a packed batch's [1, T, H, D] views of them.
  Value query, key, value;
  scf::ForallOp grid;
  LoadTileOp queryLoad;
  KeyLoop keys;
  FinalizeOp finalize;
  /// fa3-warp-specialize's split (null without a producer warpgroup): the
  /// query load, key loop and finalize are in its consumers region.
  WarpSpecializeOp warpSpecialize;
  ParallelStoreTileOp storeOutput;
  ParallelStoreStatsOp storeLse;
  /// A dense forward with dropout: its fourth argument is the Philox (seed,
  /// offset), i64 [2], which the key loop's fa3.dropout reads.
  bool dropout = false;
  /// An fa3.attention_kvcache kernel: its fourth argument is
  /// cache_seqlens, read with tensor.extract (isLengthRead).
  bool kvCache = false;
  /// Its cache is paged: the fifth argument is the page table, which the
  /// key and value loads (fa3.load_paged_tile) read through.
  bool paged = false;
  /// An fa3.attention_varlen kernel: Q, K and V are packed [T, H, D]
  /// (viewed as [1, T, H, D]), the fourth and fifth arguments are
  /// cu_seqlens_q and cu_seqlens_k, read with tensor.extract, and the
  /// forall's outputs start filled (O with 0, the LSE with -inf: the
  /// launch's fills) and are returned collapsed back to [T, H, D] and
  /// [H, T]. The query load and both stores carry the sequence's end as
  /// their limit.
  bool varlen = false;
  /// A varlen kernel reading seqused_k, its sixth argument.
  bool sequsedK = false;
  /// An FP8 kernel: e4m3 Q, K and V, and f32 [B, Hkv] q/k/v descales as
  /// its fourth to sixth arguments, read with tensor.extract
  /// (isDescaleRead).
  bool fp8 = false;
  /// Split-KV: the forall stores f32 partials, which this op (after the
  /// forall, on their [N, B, ...] views) merges into what the function
  /// returns; null otherwise.
  CombineSplitsOp combine;
};

/// The parts of the tile-level kernel function `func`, or a diagnostic on
/// the first op that is not in the form the Hopper forward builds.
FailureOr<TileKernel> matchTileKernel(func::FuncOp func);

/// The kernel's spec, from the tile shapes and the schedule, with the same
/// checks as the L0 kernel's (fa3-outline-hopper-kernels ran those on the
/// attention; here they guard hand-written tile-level input).
FailureOr<HopperAttentionSpec> specOf(TileKernel &kernel);

/// Whether `func` is a backward's tile-level kernel function (it adds into
/// the dQ accumulator with fa3.accumulate_tile).
bool isTileGradKernel(func::FuncOp func);

/// The spec of the backward whose tile-level kernel function `func` is (its
/// three grids; TileGradKernelMatch.cpp), with the checks of the L0 op's,
/// or a diagnostic on what is not in that form.
FailureOr<HopperAttentionGradSpec> matchTileGradKernel(func::FuncOp func);

/// The backward's key-block grid and the IR values its iterations take as
/// their key block, K/V head and batch (what the main kernel's CTA works
/// on): the grid's induction variables, or what fa3-order-grid renumbered
/// them to. Dense, also the consumers' loops over the group's query heads
/// and over the visible query blocks and the scf.if around fa3.mask.
struct GradKeyGrid {
  scf::ForallOp forall;
  Value keyBlock, head, batch;
  scf::ForOp headLoop, queryLoop;
  scf::IfOp maskIf;
  MaskOp mask;
  /// Packed: the sequence's first query and key rows (the Q and K tiles'
  /// rows less the block offsets).
  Value queryRow0, keyRow0;
  /// What the grid stores into dK and dV (in that order).
  std::array<GradKeyGradient, 2> keyGradients;
  /// Where the kernel's loads of K, V, Q, dO, LSE and Δ (GradLoad's order)
  /// are in the IR: fa3-warp-specialize's fa3.ring_fill ops where the grid
  /// has a producer region, else the consumers' fa3.load_tile and
  /// fa3.load_stats; the step's read the induction variables of
  /// loadHeadLoop and loadQueryLoop.
  std::array<Operation *, 6> loadSites = {};
  scf::ForOp loadHeadLoop, loadQueryLoop;
};

/// The key-block grid of the backward's kernel function `func` (the second
/// of its grids) and its stores of dK and dV (each an fa3.scale_cast of a
/// value the step loops carry, stored by an fa3.parallel_store_tile into
/// the grid's output that the function returns as dK or dV): dense, the K
/// tile's load at (batch, key block · block_n, head), the query loop inside the
/// head loop with the Q tile at (query block · block_m, K/V head · Hq/Hkv + g);
/// packed, the grid's own induction variables (x, y, z). A diagnostic where
/// that form is missing or what the kernel replays reads anything but the
/// grid's induction variables and extents, the loops' induction variables, Sq,
/// Sk and index arithmetic.
FailureOr<GradKeyGrid> matchGradKeyGrid(func::FuncOp func);

/// The replay of `grid`'s index arithmetic in i32 for the backward's main
/// kernel (see GradKeyGridReplay).
std::unique_ptr<GradKeyGridReplay> replayGradKeyGrid(const GradKeyGrid &grid);

/// The tile a value of the backward's step is loaded from: the query or
/// dO tile, by the kernel function's argument its fa3.load_tile reads (a
/// packed batch's through its [1, T, H, D] view), else Other.
enum class GradStepTile { Query, GradOutput, Other };
GradStepTile gradStepTileOf(Value tile, func::FuncOp func);

/// The ops of the backward's step (the query loop's body `step`) are the
/// ones the main kernel emits, in fa3-grad-mma-order's order: Sᵀ's and
/// dPᵀ's fa3.qk back to back, then the elementwise ops, then dV's
/// fa3.mma_tn, dQ's fa3.pv, dK's fa3.mma_tn and the fa3.accumulate_tile;
/// the loop carries dK, then dV. A diagnostic otherwise.
LogicalResult checkGradStep(Block &step, func::FuncOp func);

/// Index (or i1) arithmetic that the kernel emits in i32, and the
/// index_cast of an i32 length to an index.
bool isScalarOp(Operation *op);
/// tensor.dim of a kernel argument at a constant dim.
bool isArgumentDim(Operation *op, func::FuncOp func);
/// tensor.extract of an i32 vector argument (a KV cache's lengths, a packed
/// batch's offsets): a load from the kernel's pointer parameter.
bool isLengthRead(Operation *op, func::FuncOp func);
/// tensor.extract of an f32 [B, Hkv] descale argument (FP8): a load from
/// the kernel's pointer parameter.
bool isDescaleRead(Operation *op, func::FuncOp func);
/// Any of these: what the kernel emits as scalar code (i32 for indices).
bool isKernelScalar(Operation *op, func::FuncOp func);
/// The splat float of an arith.constant dense tensor.
std::optional<float> splatValue(Value v);

} // namespace mlir::fa3::detail

#endif // FA3_LIB_CONVERSION_FA3TOHOPPER_TILEKERNEL_H
