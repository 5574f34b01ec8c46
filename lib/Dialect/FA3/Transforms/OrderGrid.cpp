//===- OrderGrid.cpp - Longest-first tile order for causal grids ----------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//
//
// A causal query tile t does t + 1 key blocks' work. The GPU starts CTAs in
// linear block-id order, so with the query tile as the fastest grid dimension
// the last head's heaviest tile starts last and runs alone at the end. This
// pass renumbers the grid's tiles (a bijection, the launch is unchanged) so
// that heavy tiles start first, in groups of heads whose K/V fit the L2.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Dialect/FA3/Utils/GridMapping.h"

#include "IndexMath.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3ORDERGRID
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// The L2 budget for the K and V of one head group, by key length.
/// FlashAttention-3's LPT scheduler takes 32 MiB of the H100/H200's 50 MB.
/// fa3 took it everywhere, and its causal 512 forward (d128, B = 32, H = 16)
/// then read 343 MB from DRAM for 268 MB of Q, K, V and O (ncu on an H100:
/// 83% of DRAM peak, L2 hit rate 33%; cuDNN moved 260 MB;
/// docs/Performance.md): with 128 heads a group, a head's last query tile
/// comes ~3 waves after its first, and in between Q and O stream through the
/// L2 beside 32 MiB of K/V. With 8 MiB (32 heads x 4 tiles at 512 keys,
/// d128) a head's tiles run together and share its K/V in the L2: DRAM reads
/// 285 -> 206 MB, causal 512 +5% (d64), +23% (d128), +22% (d256), 1k +3-4%.
/// Short key loops are memory-bound, so that pays there; from 2k keys on the
/// kernels are compute-bound and the smaller groups' coarser longest-first
/// balance cost 2-5% at 4k (d128, d256), so longer key loops keep 32 MiB.
static constexpr int64_t kL2BudgetShortKeys = 8 << 20,
                         kL2BudgetLongKeys = 32 << 20;
static constexpr int64_t kShortKeysMax = 1024;

namespace {
/// The 3-D grid forall of a causal forward kernel and its induction
/// variables' roles, found from the query tile's load.
struct CausalGrid {
  scf::ForallOp forall;
  unsigned tileDim, headDim, batchDim;
};
} // namespace

/// Whether `forall` holds a causal fa3.mask.
static bool isCausal(scf::ForallOp forall) {
  bool causal = false;
  forall.walk([&](MaskOp mask) { causal |= mask.getCausal(); });
  return causal;
}

/// The (last) fa3.load_tile of `source` in `forall` (in its body, or in
/// fa3-warp-specialize's consumers region), or null.
static LoadTileOp tileLoadOf(scf::ForallOp forall, Value source) {
  LoadTileOp found;
  forall.walk([&](LoadTileOp load) {
    if (load.getSource() == source)
      found = load;
  });
  return found;
}

/// The dimension of `forall` whose induction variable `v` is.
static std::optional<unsigned> ivIndex(scf::ForallOp forall, Value v) {
  for (auto [i, iv] : llvm::enumerate(forall.getInductionVars()))
    if (iv == v)
      return i;
  return std::nullopt;
}

static std::optional<CausalGrid> matchCausalGrid(func::FuncOp func) {
  if (func.getNumArguments() < 3)
    return std::nullopt;
  for (auto forall : func.getBody().front().getOps<scf::ForallOp>()) {
    if (!isBlockGrid(forall))
      continue;
    if (!isCausal(forall))
      return std::nullopt;
    // The query tile's load names the head and batch induction variables;
    // the third is the query tile.
    LoadTileOp queryLoad = tileLoadOf(forall, func.getArgument(0));
    if (!queryLoad)
      return std::nullopt;
    std::optional<unsigned> head = ivIndex(forall, queryLoad.getHead()),
                            batch = ivIndex(forall, queryLoad.getBatch());
    if (!head || !batch || *head == *batch)
      return std::nullopt;
    return CausalGrid{forall, 3 - *head - *batch, *head, *batch};
  }
  return std::nullopt;
}

/// The Q and dO bytes a causal backward chunk of (K/V head, batch) pairs
/// may take in the L2: FlashAttention-3's 32 MiB.
static constexpr int64_t kGradL2ChunkBytes = 32 << 20;

namespace {
/// The key-block grid of a causal GQA backward (fa3-tile{grid=true} of a
/// dense fa3.attention_grad: the forall holding fa3.accumulate_tile) and
/// its induction variables' roles, from the K tile's load (row = key block
/// · block_n, head, batch).
struct CausalGradGrid {
  scf::ForallOp forall;
  unsigned keyBlockDim, headDim, batchDim;
};
} // namespace

static std::optional<CausalGradGrid> matchCausalGradGrid(func::FuncOp func) {
  AccumulateTileOp accumulate;
  func.walk([&](AccumulateTileOp op) { accumulate = op; });
  if (!accumulate || func.getNumArguments() < 6)
    return std::nullopt;
  auto forall = accumulate->getParentOfType<scf::ForallOp>();
  if (!forall || !isBlockGrid(forall) || forall.getRank() != 3)
    return std::nullopt;
  // Dense [B, S, H, D] Q and K with static heads and D; GQA only: with one
  // query head a K/V head the grid's own order balanced better (causal MHA
  // 2k-8k: -6% to +2%, docs/Performance.md).
  auto q = dyn_cast<RankedTensorType>(func.getArgument(1).getType());
  auto k = dyn_cast<RankedTensorType>(func.getArgument(2).getType());
  if (!q || !k || q.getRank() != 4 || k.getRank() != 4 ||
      q.isDynamicDim(2) || q.isDynamicDim(3) || k.isDynamicDim(2) ||
      q.getDimSize(2) <= k.getDimSize(2))
    return std::nullopt;
  if (!isCausal(forall))
    return std::nullopt;
  LoadTileOp keyLoad = tileLoadOf(forall, func.getArgument(2));
  if (!keyLoad)
    return std::nullopt;
  auto rowTimes = keyLoad.getRow().getDefiningOp<arith::MulIOp>();
  int64_t blockN = keyLoad.getResult().getType().getDimSize(0);
  if (!rowTimes || getConstantIntValue(rowTimes.getRhs()) != blockN)
    return std::nullopt;
  std::optional<unsigned> keyBlock = ivIndex(forall, rowTimes.getLhs()),
                          head = ivIndex(forall, keyLoad.getHead()),
                          batch = ivIndex(forall, keyLoad.getBatch());
  if (!keyBlock || !head || !batch || *keyBlock == *head ||
      *keyBlock == *batch || *head == *batch)
    return std::nullopt;
  return CausalGradGrid{forall, *keyBlock, *head, *batch};
}

/// The linear block id L = x + X · (y + Y · z) of `forall`'s iteration (the
/// order the GPU starts CTAs in), at the builder's insertion point in its
/// body; `extents` are its upper bounds.
static Value linearBlockId(fa3::detail::IndexMath &m, scf::ForallOp forall,
                           ArrayRef<Value> extents) {
  Value ivByBlock[3], extentByBlock[3];
  ArrayAttr mapping = *forall.getMapping();
  for (auto [i, dim] : llvm::enumerate(mapping)) {
    auto block =
        static_cast<int64_t>(cast<gpu::GPUBlockMappingAttr>(dim).getBlock());
    ivByBlock[block] = forall.getInductionVars()[i];
    extentByBlock[block] = extents[i];
  }
  Value zy = m.mul(extentByBlock[1], ivByBlock[2]);
  Value xyz = m.mul(extentByBlock[0], m.add(ivByBlock[1], zy));
  return m.add(ivByBlock[0], xyz);
}

/// Replaces every use of `forall`'s induction variables in its body by
/// `replacement` (by dimension), except those of the ops inserted before
/// `oldFirst` (the renumbering itself).
static void renumber(scf::ForallOp forall, Operation *oldFirst,
                     ArrayRef<Value> replacement) {
  Block *body = forall.getBody();
  auto isRenumbering = [&](Operation *user) {
    return user->getBlock() == body && user->isBeforeInBlock(oldFirst);
  };
  for (auto [iv, to] : llvm::zip(forall.getInductionVars(), replacement))
    iv.replaceUsesWithIf(
        to, [&](OpOperand &use) { return !isRenumbering(use.getOwner()); });
}

/// The causal GQA backward's key grid in longest-first order: key block 0
/// of a (K/V head, batch) pair sees every query row, the last block the
/// fewest, so the linear block id L walks chunks of pairs key block-major:
///
///     C     = min(max(budget / (Sq · rowBytes), 1), P)   (P = Hkv · B pairs)
///     chunk = L / (C · X),  first = chunk · C,  c = min(C, P − first)
///     r     = L − first · X
///     key block = r / c,  pair = first + r % c  (head = pair % Hkv)
///
/// A chunk's pairs' Q and dO (rowBytes = 2 · 2 · D · Hq / Hkv a query row)
/// take at most the budget of the L2 (FlashAttention-3's 32 MiB). Measured
/// on an H100 (docs/Performance.md): -17% of the main kernel's time at the
/// Llama shape (GQA 32:8, 4k, causal).
static void orderCausalGradGrid(func::FuncOp func, const CausalGradGrid &grid) {
  scf::ForallOp forall = grid.forall;
  Location loc = forall.getLoc();
  OpBuilder b(forall);
  auto q = cast<RankedTensorType>(func.getArgument(1).getType());
  auto k = cast<RankedTensorType>(func.getArgument(2).getType());
  SmallVector<Value> extents;
  for (OpFoldResult ub : forall.getMixedUpperBound())
    extents.push_back(getValueOrCreateConstantIndexOp(b, loc, ub));
  fa3::detail::IndexMath m{b, loc};
  int64_t elementBytes = q.getElementTypeBitWidth() / 8;
  int64_t rowBytes = 2 * elementBytes * q.getDimSize(3) *
                     (q.getDimSize(2) / k.getDimSize(2));
  Value seqQ = tensor::DimOp::create(b, loc, func.getArgument(1), 1);
  Value keyBlocks = extents[grid.keyBlockDim];
  Value heads = extents[grid.headDim];
  Value pairs = m.mul(heads, extents[grid.batchDim]);
  Value chunkPairs = m.minU(
      m.maxU(m.divU(m.cst(kGradL2ChunkBytes / rowBytes),
                    m.maxU(seqQ, m.cst(1))),
             m.cst(1)),
      pairs);

  Block *body = forall.getBody();
  Operation *oldFirst = &body->front();
  b.setInsertionPointToStart(body);
  Value linear = linearBlockId(m, forall, extents);
  Value chunk = m.divU(linear, m.mul(chunkPairs, keyBlocks));
  Value firstPair = m.mul(chunk, chunkPairs);
  Value pairsHere = m.minU(chunkPairs, m.sub(pairs, firstPair));
  Value inChunk = m.sub(linear, m.mul(firstPair, keyBlocks));
  Value pair = m.add(firstPair, m.remU(inChunk, pairsHere));
  Value replacement[3];
  replacement[grid.keyBlockDim] = m.divU(inChunk, pairsHere);
  replacement[grid.headDim] = m.remU(pair, heads);
  replacement[grid.batchDim] = m.divU(pair, heads);
  renumber(forall, oldFirst, replacement);
}

namespace {
struct FA3OrderGridPass : public fa3::impl::FA3OrderGridBase<FA3OrderGridPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    // A backward (its dQ accumulation marks it): the key-block grid.
    if (func.walk([](AccumulateTileOp) { return WalkResult::interrupt(); })
            .wasInterrupted()) {
      if (std::optional<CausalGradGrid> grid = matchCausalGradGrid(func))
        orderCausalGradGrid(func, *grid);
      return;
    }
    std::optional<CausalGrid> grid = matchCausalGrid(func);
    if (!grid)
      return;
    scf::ForallOp forall = grid->forall;
    Location loc = forall.getLoc();
    OpBuilder b(forall);

    auto q = cast<RankedTensorType>(func.getArgument(0).getType());
    auto k = cast<RankedTensorType>(func.getArgument(1).getType());
    auto v = cast<RankedTensorType>(func.getArgument(2).getType());
    if (q.isDynamicDim(2) || k.isDynamicDim(2) || k.isDynamicDim(3) ||
        v.isDynamicDim(3))
      return; // the kernels of the Hopper pipeline have static heads and D
    // The grid's extents, at the function level.
    SmallVector<Value> extents;
    for (OpFoldResult ub : forall.getMixedUpperBound())
      extents.push_back(getValueOrCreateConstantIndexOp(b, loc, ub));
    fa3::detail::IndexMath m{b, loc};
    // Heads a group: as many K/V heads as fit the budget of the key length
    // (at least one), each shared by Hq / Hkv query heads, and no more than
    // B · Hq.
    // (budget / bytes a key) / Sk: no product that could overflow the i32
    // the kernel computes indices in.
    Value seqK = tensor::DimOp::create(b, loc, func.getArgument(1), 1);
    int64_t keyBytes = (k.getDimSize(3) + v.getDimSize(3)) * 2;
    Value keys = m.maxU(seqK, m.cst(1));
    Value budgetKeys = arith::SelectOp::create(
        b, loc, m.gt(keys, m.cst(kShortKeysMax)),
        m.cst(kL2BudgetLongKeys / keyBytes),
        m.cst(kL2BudgetShortKeys / keyBytes));
    Value kvHeads = m.maxU(m.divU(budgetKeys, keys), m.cst(1));
    Value tiles = extents[grid->tileDim];
    Value heads = extents[grid->headDim];
    Value headsTimesBatch = m.mul(heads, extents[grid->batchDim]);
    Value groupHeads =
        m.minU(m.mul(kvHeads, m.cst(q.getDimSize(2) / k.getDimSize(2))),
               headsTimesBatch);

    // In the body: the linear block id in launch order, and the tile,
    // head and batch it now stands for.
    Block *body = forall.getBody();
    Operation *oldFirst = &body->front();
    b.setInsertionPointToStart(body);
    Value linear = linearBlockId(m, forall, extents);
    Value groupTiles = m.mul(groupHeads, tiles);
    Value group = m.divU(linear, groupTiles);
    Value firstHead = m.mul(group, groupHeads);
    Value inGroup = m.sub(linear, m.mul(group, groupTiles));
    // The last group may hold fewer heads.
    Value thisGroupHeads =
        m.minU(groupHeads, m.sub(headsTimesBatch, firstHead));
    Value tileInGroup = m.divU(inGroup, thisGroupHeads);
    Value tile = m.sub(m.sub(tiles, m.cst(1)), tileInGroup);
    Value headBatch = m.add(firstHead, m.remU(inGroup, thisGroupHeads));
    Value head = m.remU(headBatch, heads);
    Value batch = m.divU(headBatch, heads);

    Value replacement[3];
    replacement[grid->tileDim] = tile;
    replacement[grid->headDim] = head;
    replacement[grid->batchDim] = batch;
    renumber(forall, oldFirst, replacement);
  }
};
} // namespace
