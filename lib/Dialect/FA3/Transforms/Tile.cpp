//===- Tile.cpp - Split fa3.attention into query tiles -----------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "IndexMath.h"
#include "PackedSequences.h"
#include "TileGrad.h"

#include "fa3/Dialect/FA3/Utils/E4M3.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"

#include <functional>
#include <limits>

#define DEBUG_TYPE "fa3-tile"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3TILE
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

using mlir::fa3::detail::IndexMath;
using mlir::fa3::detail::indexAt;

namespace {
/// Where one batch entry's queries and keys are, as the tile loops see them.
/// Queries of entry `b` are rows `[qBegin, qBegin + qLen)` of the (4-D)
/// query tensor at batch `tensorBatch`; `qEnd` (null: the tensor's end)
/// bounds the loads and stores of a packed batch. The key fields are passed
/// to fa3.attention_block as they are (null: absent).
struct SequenceBounds {
  Value tensorBatch, qBegin, qEnd, qLen, numQBlocks;
  Value keyStart, keyLen;
};

/// What the tile loops of one forward attention need, in its 4-D form.
struct TiledForward {
  Value query, key, value, pageTable;
  RankedTensorType outType, lseType;
  Value outInit, lseInit;
  /// Batch entries to iterate over.
  Value numBatches;
  /// The bounds of entry `b`, built inside the batch loop.
  std::function<SequenceBounds(OpBuilder &, Location, Value)> bounds;
  /// Index constants 0 and 1 for the loop bounds.
  Value c0, c1;
  /// Split-KV: partial attentions per split of the key blocks, stored at
  /// batch `split · tensorBatches + b` of outInit/lseInit (f32 O), with
  /// `tensorBatches` the query tensor's batch (1 for a packed batch).
  int64_t numSplits = 1;
  Value tensorBatches;
  /// PackGQA: each query tile holds the `packedHeads` query heads of one
  /// key/value head for block_m / packedHeads queries; the head loop runs
  /// over the key/value heads.
  int64_t packedHeads = 1;
  ScheduleAttr schedule;
  UnitAttr causal;
  FloatAttr scale, softcap, probsScale;
  DenseI64ArrayAttr window;
  /// Dropout (null: off): the probability and the Philox (seed, offset).
  FloatAttr dropout;
  Value rng;
  /// FP8 (null: 16-bit or f32): the f32 [B, Hkv] descales of Q, K and V.
  Value qDescale, kDescale, vDescale;
};
} // namespace

/// FP8: the descale scalars of (batch, kvHead) that fa3.attention_block
/// takes, `q_descale · k_descale` and `v_descale`; nulls otherwise.
static std::pair<Value, Value> blockDescales(OpBuilder &b, Location loc,
                                             const TiledForward &t, Value batch,
                                             Value kvHead) {
  if (!t.qDescale)
    return {};
  auto at = [&](Value descale) {
    return tensor::ExtractOp::create(b, loc, descale, ValueRange{batch, kvHead})
        .getResult();
  };
  Value qk = arith::MulFOp::create(b, loc, at(t.qDescale), at(t.kDescale));
  return {qk, at(t.vDescale)};
}

/// The dropout stream of query head `head` of batch `batch` (fa3.dropout):
/// `batch · Hq + head`, or null without dropout.
static Value dropoutStream(OpBuilder &b, Location loc, const TiledForward &t,
                           Value batch, Value head) {
  if (!t.rng)
    return Value();
  int64_t numQHeads = cast<RankedTensorType>(t.query.getType()).getDimSize(2);
  IndexMath m{b, loc};
  return m.add(m.mul(batch, m.cst(numQHeads)), head);
}

static Value indexConstant(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// The key blocks [begin, end) of split `split` of a sequence with `keyLen`
/// keys: blocks [s·n, (s+1)·n) of its ceildiv(keyLen, block_n), with n =
/// ceildiv(blocks, splits), both clamped to the blocks (a split past them
/// is empty: O = 0, LSE = -inf, weight 0 in the merge).
static std::pair<Value, Value> splitRange(OpBuilder &b, Location loc,
                                          const TiledForward &t, Value keyLen,
                                          Value split) {
  IndexMath m{b, loc};
  Value blocks = m.ceilDiv(keyLen, t.schedule.getBlockN());
  Value perSplit = m.ceilDiv(blocks, t.numSplits);
  Value begin = m.min(m.mul(split, perSplit), blocks);
  Value end = m.min(m.add(begin, perSplit), blocks);
  return {begin, end};
}

/// Builds the serial loops over (batch entry, query head, query block) of
/// `t` with `inits` as the (O, LSE) destinations and returns their results.
/// With a `split` index, the blocks are that split's partial attentions
/// over its range of key blocks, stored at batch `split · B + b`.
static ValueRange buildBatchLoops(OpBuilder &builder, Location loc,
                                  const TiledForward &t, ValueRange inits,
                                  Value split) {
  auto qType = cast<RankedTensorType>(t.query.getType());
  auto kType = cast<RankedTensorType>(t.key.getType());
  int64_t numQHeads = qType.getDimSize(2);
  int64_t groupSize = numQHeads / kType.getDimSize(2);
  int64_t blockM = t.schedule.getBlockM();
  // Packed, a tile is the group's heads of block_m / G queries, one tile
  // row per (query, head); the loop below runs over key/value heads.
  int64_t packed = t.packedHeads;
  int64_t queriesPerTile = blockM / packed;
  int64_t headLoopCount = numQHeads / packed;
  IntegerAttr packedAttr =
      packed > 1 ? builder.getI64IntegerAttr(packed) : IntegerAttr();
  auto qTileType = RankedTensorType::get({blockM, qType.getDimSize(3)},
                                         qType.getElementType());
  // The output tile has the output tensor's element type: f32 for a split.
  auto oTileType = RankedTensorType::get({blockM, t.outType.getDimSize(3)},
                                         t.outType.getElementType());
  auto lseTileType = RankedTensorType::get({blockM}, builder.getF32Type());
  Value c0 = t.c0, c1 = t.c1;

  auto batchLoop = scf::ForOp::create(
      builder, loc, c0, t.numBatches, c1, inits,
      [&](OpBuilder &b, Location loc, Value entry, ValueRange batchIters) {
        SequenceBounds seq = t.bounds(b, loc, entry);
        Value storeBatch = seq.tensorBatch, splitBegin, splitEnd;
        if (split) {
          std::tie(splitBegin, splitEnd) =
              splitRange(b, loc, t, seq.keyLen, split);
          IndexMath m{b, loc};
          storeBatch = m.add(m.mul(split, t.tensorBatches), seq.tensorBatch);
        }
        auto headLoop = scf::ForOp::create(
            b, loc, c0, indexConstant(b, loc, headLoopCount), c1, batchIters,
            [&](OpBuilder &b, Location loc, Value headIv,
                ValueRange headIters) {
              auto blockLoop = scf::ForOp::create(
                  b, loc, c0, seq.numQBlocks, c1, headIters,
                  [&](OpBuilder &b, Location loc, Value qBlock,
                      ValueRange iters) {
                    // Unpacked: query head `headIv`; packed: the first
                    // query head of key/value head `headIv`.
                    Value head = headIv, kvHead = headIv;
                    if (packed > 1)
                      head = arith::MulIOp::create(
                          b, loc, headIv, indexConstant(b, loc, packed));
                    else
                      kvHead = arith::DivUIOp::create(
                          b, loc, headIv, indexConstant(b, loc, groupSize));
                    Value qStart = arith::MulIOp::create(
                        b, loc, qBlock, indexConstant(b, loc, queriesPerTile));
                    Value row = seq.qBegin ? arith::AddIOp::create(
                                                 b, loc, seq.qBegin, qStart)
                                           : qStart;
                    Value qTile = LoadTileOp::create(
                        b, loc, qTileType, t.query, seq.tensorBatch, row, head,
                        seq.qEnd, packedAttr);
                    auto [qkDescale, vDescale] =
                        blockDescales(b, loc, t, seq.tensorBatch, kvHead);
                    auto block = AttentionBlockOp::create(
                        b, loc, oTileType, lseTileType, qTile, t.key, t.value,
                        seq.tensorBatch, kvHead, qStart, seq.qLen, seq.keyStart,
                        seq.keyLen, t.pageTable, splitBegin, splitEnd, t.rng,
                        dropoutStream(b, loc, t, seq.tensorBatch, head),
                        qkDescale, vDescale, t.causal, t.scale, t.window,
                        t.softcap, t.schedule, t.probsScale, packedAttr,
                        t.dropout);
                    Value out = StoreTileOp::create(
                        b, loc, t.outType, block.getOutput(), iters[0],
                        storeBatch, row, head, seq.qEnd, packedAttr);
                    Value lse = StoreStatsOp::create(
                        b, loc, t.lseType, block.getLse(), iters[1],
                        storeBatch, head, row, seq.qEnd, packedAttr);
                    scf::YieldOp::create(b, loc, ValueRange{out, lse});
                  });
              scf::YieldOp::create(b, loc, blockLoop.getResults());
            });
        scf::YieldOp::create(b, loc, headLoop.getResults());
      });
  return batchLoop.getResults();
}

/// The tile loops of `t`: the batch loops, inside a loop over the splits
/// when `t.numSplits` > 1.
static ValueRange buildTileLoops(RewriterBase &rewriter, Location loc,
                                 const TiledForward &t) {
  SmallVector<Value, 2> inits = {t.outInit, t.lseInit};
  if (t.numSplits <= 1)
    return buildBatchLoops(rewriter, loc, t, inits, Value());
  auto splitLoop = scf::ForOp::create(
      rewriter, loc, t.c0, indexConstant(rewriter, loc, t.numSplits), t.c1,
      inits, [&](OpBuilder &b, Location loc, Value split, ValueRange iters) {
        scf::YieldOp::create(b, loc,
                             buildBatchLoops(b, loc, t, iters, split));
      });
  return splitLoop.getResults();
}

/// The tile loops of `t` as one scf.forall mapped to GPU blocks (query
/// block -> x, query head -> y, batch -> z; packed, y runs over the
/// key/value heads), each iteration one CTA's query tile contributing its
/// output and LSE rows through the parallel stores; returns (O, LSE). The
/// bounds of batch entry b (`t.bounds`) give the query length and, for a KV
/// cache, the key length; `numQBlocks` query blocks cover every entry's
/// queries (one query length for all). With N = `t.numSplits` > 1, z runs
/// over N·B (split s of batch b at z = s·B + b): each CTA attends to split
/// s's key blocks and stores its f32 partials at batch z, which
/// fa3.combine_splits merges after the forall.
static ValueRange buildGrid(RewriterBase &rewriter, Location loc,
                            const TiledForward &t, Value numQBlocks) {
  auto qType = cast<RankedTensorType>(t.query.getType());
  auto kType = cast<RankedTensorType>(t.key.getType());
  auto vType = cast<RankedTensorType>(t.value.getType());
  int64_t numQHeads = qType.getDimSize(2);
  int64_t groupSize = numQHeads / kType.getDimSize(2);
  int64_t blockM = t.schedule.getBlockM();
  int64_t packed = t.packedHeads;
  int64_t queriesPerTile = blockM / packed;
  auto qTileType = RankedTensorType::get({blockM, qType.getDimSize(3)},
                                         qType.getElementType());
  // The output tile has the output tensor's element type: f32 for a split.
  auto oTileType = RankedTensorType::get({blockM, vType.getDimSize(3)},
                                         t.outType.getElementType());
  auto lseTileType = RankedTensorType::get({blockM}, rewriter.getF32Type());
  MLIRContext *ctx = rewriter.getContext();
  Value gridBatches = t.numBatches;
  if (t.numSplits > 1)
    gridBatches = arith::MulIOp::create(
        rewriter, loc, t.numBatches, indexConstant(rewriter, loc, t.numSplits));
  auto mapping = rewriter.getArrayAttr(
      {gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimX),
       gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimY),
       gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimZ)});
  SmallVector<OpFoldResult> bounds = {
      numQBlocks, rewriter.getIndexAttr(numQHeads / packed), gridBatches};
  auto forall = scf::ForallOp::create(
      rewriter, loc, bounds, ValueRange{t.outInit, t.lseInit}, mapping);
  OpBuilder::InsertionGuard guard(rewriter);
  scf::InParallelOp inParallel = forall.getTerminator();
  rewriter.setInsertionPoint(inParallel);
  ValueRange ivs = forall.getInductionVars();
  Value qBlock = ivs[0], head = ivs[1], bIdx = ivs[2], kvHead;
  // Split-KV: z = s·B + b.
  Value gridZ = bIdx, storeBatch, split;
  if (t.numSplits > 1) {
    split = arith::DivUIOp::create(rewriter, loc, bIdx, t.numBatches);
    bIdx = arith::RemUIOp::create(rewriter, loc, bIdx, t.numBatches);
  }
  IntegerAttr packedAttr;
  if (packed > 1) {
    // Key/value head `ivs[1]`; the tile's first query head.
    kvHead = head;
    head = arith::MulIOp::create(rewriter, loc, kvHead,
                                 indexConstant(rewriter, loc, packed));
    packedAttr = rewriter.getI64IntegerAttr(packed);
  } else {
    kvHead = arith::DivUIOp::create(rewriter, loc, head,
                                    indexConstant(rewriter, loc, groupSize));
  }
  Value qStart = arith::MulIOp::create(
      rewriter, loc, qBlock, indexConstant(rewriter, loc, queriesPerTile));
  SequenceBounds seq = t.bounds(rewriter, loc, bIdx);
  Value splitBegin, splitEnd;
  if (split) {
    std::tie(splitBegin, splitEnd) =
        splitRange(rewriter, loc, t, seq.keyLen, split);
    // Split s of entry b: batch s·B + b of the partials, z itself; of a
    // packed batch (tensor batch 0 of 1), batch s.
    IndexMath m{rewriter, loc};
    storeBatch = seq.tensorBatch == bIdx
                     ? gridZ
                     : m.add(m.mul(split, t.tensorBatches), seq.tensorBatch);
  } else {
    storeBatch = seq.tensorBatch;
  }
  // A packed batch's tile starts at its sequence's first row and ends at
  // its last: the query block past a sequence's end (the grid covers the
  // longest) loads rows of the next one and stores nothing.
  Value row =
      seq.qBegin
          ? arith::AddIOp::create(rewriter, loc, seq.qBegin, qStart).getResult()
          : qStart;
  Value qTile =
      LoadTileOp::create(rewriter, loc, qTileType, t.query, seq.tensorBatch,
                         row, head, seq.qEnd, packedAttr);
  auto [qkDescale, vDescale] =
      blockDescales(rewriter, loc, t, seq.tensorBatch, kvHead);
  auto block = AttentionBlockOp::create(
      rewriter, loc, oTileType, lseTileType, qTile, t.key, t.value,
      seq.tensorBatch, kvHead, qStart, seq.qLen, seq.keyStart, seq.keyLen,
      t.pageTable, splitBegin, splitEnd, t.rng,
      dropoutStream(rewriter, loc, t, seq.tensorBatch, head), qkDescale,
      vDescale, t.causal, t.scale, t.window, t.softcap, t.schedule,
      t.probsScale, packedAttr, t.dropout);
  rewriter.setInsertionPointToStart(inParallel.getBody());
  ValueRange shared = forall.getRegionIterArgs();
  ParallelStoreTileOp::create(rewriter, loc, block.getOutput(), shared[0],
                              storeBatch, row, head, seq.qEnd, packedAttr);
  ParallelStoreStatsOp::create(rewriter, loc, block.getLse(), shared[1],
                               storeBatch, head, row, seq.qEnd, packedAttr);
  return forall.getResults();
}

/// The masking attributes every tiled forward passes to its blocks.
template <typename OpTy>
static void setMaskAttrs(TiledForward &t, OpTy op, RewriterBase &rewriter) {
  t.schedule = op.getScheduleAttr();
  t.scale = rewriter.getF32FloatAttr(op.getEffectiveScale());
  t.softcap = op.getEffectiveSoftcap() > 0 ? op.getSoftcapAttr() : FloatAttr();
  t.causal = op.getCausal() ? rewriter.getUnitAttr() : UnitAttr();
  t.window = op.getWindowAttr();
}

/// An empty tensor of `type` whose dynamic dims are those of `source`'s dims
/// `sourceDims` (one per dynamic dim of `type`, in order).
static Value emptyWithDims(OpBuilder &b, Location loc, RankedTensorType type,
                           Value source, ArrayRef<int64_t> sourceDims) {
  SmallVector<Value> dynamic;
  for (int64_t i = 0, j = 0; i < type.getRank(); ++i)
    if (type.isDynamicDim(i))
      dynamic.push_back(tensor::DimOp::create(b, loc, source, sourceDims[j++]));
  return tensor::EmptyOp::create(b, loc, type.getShape(),
                                 type.getElementType(), dynamic);
}

/// `init` filled with `value` (rows no tile writes stay defined).
static Value fill(OpBuilder &b, Location loc, Value init, float value) {
  Type elt = cast<RankedTensorType>(init.getType()).getElementType();
  Value v = arith::ConstantOp::create(b, loc, elt, b.getFloatAttr(elt, value));
  return linalg::FillOp::create(b, loc, v, init).getResult(0);
}

/// PackGQA for `t`: the query heads of one key/value head share a tile
/// (t.query and t.key already in their 4-D form).
static LogicalResult setPackedHeads(TiledForward &t, Operation *op) {
  auto qType = cast<RankedTensorType>(t.query.getType());
  auto kType = cast<RankedTensorType>(t.key.getType());
  t.packedHeads = qType.getDimSize(2) / kType.getDimSize(2);
  if (t.packedHeads > t.schedule.getBlockM())
    return op->emitOpError()
           << "pack_gqa puts " << t.packedHeads
           << " query heads in each query of a tile, more than its block_m = "
           << t.schedule.getBlockM() << " rows";
  return success();
}

/// Builds the loops over (batch, query head, query block) and replaces `op`
/// with their results. An FP8 attention keeps its e4m3 tiles: its blocks
/// take the descales of their (batch, key/value head) and round P to e4m3
/// after multiplying by 2^8 (probs_scale), as the Hopper kernel does.
/// With `grid`, the three loops are one scf.forall mapped to GPU blocks
/// (query block -> x, head -> y, batch -> z).
static LogicalResult tileAttention(AttentionOp op, RewriterBase &rewriter,
                                   bool grid = false) {
  ScheduleAttr schedule = op.getScheduleAttr();
  if (!schedule)
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule first";

  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  auto lseType = cast<RankedTensorType>(op.getLse().getType());
  int64_t blockM = schedule.getBlockM();

  TiledForward t;
  t.schedule = schedule;
  t.query = op.getQuery();
  t.key = op.getKey();
  if (op.getPackGqa() && failed(setPackedHeads(t, op)))
    return failure();
  // PackGQA: a tile holds block_m / G queries of the G heads of one
  // key/value head.
  int64_t queriesPerTile = blockM / t.packedHeads;
  t.c0 = indexConstant(rewriter, loc, 0);
  t.c1 = indexConstant(rewriter, loc, 1);
  Value batch = tensor::DimOp::create(rewriter, loc, op.getQuery(), 0);
  Value seqQ = tensor::DimOp::create(rewriter, loc, op.getQuery(), 1);
  Value numQBlocks = arith::CeilDivUIOp::create(
      rewriter, loc, seqQ, indexConstant(rewriter, loc, queriesPerTile));

  // Destinations for the tiles: [B, Sq, Hq, Dv] and [B, Hq, Sq].
  SmallVector<Value> outDynamic, lseDynamic;
  if (outType.isDynamicDim(0))
    outDynamic.push_back(batch);
  if (outType.isDynamicDim(1))
    outDynamic.push_back(seqQ);
  if (lseType.isDynamicDim(0))
    lseDynamic.push_back(batch);
  if (lseType.isDynamicDim(2))
    lseDynamic.push_back(seqQ);
  Value outInit = tensor::EmptyOp::create(rewriter, loc, outType.getShape(),
                                          outType.getElementType(), outDynamic);
  Value lseInit = tensor::EmptyOp::create(rewriter, loc, lseType.getShape(),
                                          lseType.getElementType(), lseDynamic);

  setMaskAttrs(t, op, rewriter);
  if (op.getEffectiveDropout() > 0) {
    t.dropout = op.getDropoutAttr();
    t.rng = op.getRng();
  }
  if (op.isFP8()) {
    t.probsScale = rewriter.getF32FloatAttr(kFP8ProbsScale);
    t.qDescale = op.getDescales()[0];
    t.kDescale = op.getDescales()[1];
    t.vDescale = op.getDescales()[2];
  }
  t.value = op.getValue();
  t.outType = outType;
  t.lseType = lseType;
  t.outInit = outInit;
  t.lseInit = lseInit;
  t.numBatches = batch;
  t.bounds = [&](OpBuilder &, Location, Value entry) {
    SequenceBounds seq;
    seq.tensorBatch = entry;
    seq.qLen = seqQ;
    seq.numQBlocks = numQBlocks;
    return seq;
  };

  if (!grid) {
    rewriter.replaceOp(op, buildTileLoops(rewriter, loc, t));
    return success();
  }

  rewriter.replaceOp(op, buildGrid(rewriter, loc, t, numQBlocks));
  return success();
}

/// Merges the split-KV partials `parts` ([N·b, ...] O and LSE, b =
/// t.tensorBatches) of `t` into `outType` / `lseType`: the partials viewed as
/// [N, b, ...], then fa3.combine_splits.
static CombineSplitsOp combineSplits(RewriterBase &rewriter, Location loc,
                                     const TiledForward &t,
                                     ArrayRef<Value> parts,
                                     RankedTensorType outType,
                                     RankedTensorType lseType) {
  auto splitsFirst = [&](Value part) {
    auto type = cast<RankedTensorType>(part.getType());
    std::optional<int64_t> batches = getConstantIntValue(t.tensorBatches);
    SmallVector<int64_t> shape = {t.numSplits,
                                  batches ? *batches : ShapedType::kDynamic};
    llvm::append_range(shape, type.getShape().drop_front());
    SmallVector<ReassociationIndices> groups = {{0, 1}};
    for (int64_t i = 2; i <= type.getRank(); ++i)
      groups.push_back({i});
    SmallVector<OpFoldResult> sizes = {rewriter.getIndexAttr(t.numSplits),
                                       getAsOpFoldResult(t.tensorBatches)};
    for (int64_t i = 1; i < type.getRank(); ++i)
      sizes.push_back(tensor::getMixedSize(rewriter, loc, part, i));
    return tensor::ExpandShapeOp::create(
        rewriter, loc, RankedTensorType::get(shape, type.getElementType()),
        part, groups, sizes);
  };
  return CombineSplitsOp::create(rewriter, loc, outType, lseType,
                                 splitsFirst(parts[0]), splitsFirst(parts[1]));
}

/// fa3.attention_varlen: the packed [T, H, D] tensors are viewed as
/// [1, T, H, D]; sequence b's tiles use batch 0, rows offset by
/// cu_seqlens_q[b] and bounded by cu_seqlens_q[b + 1]. With `grid`, one
/// CTA per (query block, head, sequence), the query blocks running to
/// ceildiv(T, block_m): as many as the longest sequence can have.
static LogicalResult tileAttentionVarlen(AttentionVarlenOp op,
                                         RewriterBase &rewriter,
                                         bool grid = false) {
  if (!op.getScheduleAttr())
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule first";
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  auto lseType = cast<RankedTensorType>(op.getLse().getType());
  auto out4D = RankedTensorType::get(
      {1, outType.getDimSize(0), outType.getDimSize(1), outType.getDimSize(2)},
      outType.getElementType());
  auto lse3D = RankedTensorType::get(
      {1, lseType.getDimSize(0), lseType.getDimSize(1)},
      lseType.getElementType());

  TiledForward t;
  t.c0 = indexConstant(rewriter, loc, 0);
  t.c1 = indexConstant(rewriter, loc, 1);
  setMaskAttrs(t, op, rewriter);
  t.query = fa3::detail::asBatchOfOne(rewriter, loc, op.getQuery());
  t.key = fa3::detail::asBatchOfOne(rewriter, loc, op.getKey());
  t.value = fa3::detail::asBatchOfOne(rewriter, loc, op.getValue());
  t.numSplits = op.getNumSplits().value_or(1);
  t.tensorBatches = indexConstant(rewriter, loc, 1);
  if (op.getPackGqa()) {
    if (failed(setPackedHeads(t, op)))
      return failure();
  }
  if (t.numSplits > 1) {
    // One [1, T, ...] slab of f32 partials per split, merged below.
    auto f32 = rewriter.getF32Type();
    out4D = RankedTensorType::get(
        {t.numSplits, out4D.getDimSize(1), out4D.getDimSize(2),
         out4D.getDimSize(3)},
        f32);
    lse3D = RankedTensorType::get(
        {t.numSplits, lse3D.getDimSize(1), lse3D.getDimSize(2)}, f32);
  }
  t.outType = out4D;
  t.lseType = lse3D;
  // Rows outside every sequence (past cu_seqlens_q[B]) read as no keys seen,
  // in the output or in every split's partials.
  t.outInit = fill(rewriter, loc,
                   emptyWithDims(rewriter, loc, out4D, op.getQuery(), {0}),
                   0.0f);
  t.lseInit = fill(rewriter, loc,
                   emptyWithDims(rewriter, loc, lse3D, op.getQuery(), {0}),
                   -std::numeric_limits<float>::infinity());
  Value numOffsets =
      tensor::DimOp::create(rewriter, loc, op.getCuSeqlensQ(), 0);
  t.numBatches = arith::SubIOp::create(rewriter, loc, numOffsets,
                                       indexConstant(rewriter, loc, 1));
  int64_t blockM = t.schedule.getBlockM();
  Value cuQ = op.getCuSeqlensQ(), cuK = op.getCuSeqlensK(),
        used = op.getSequsedK();
  t.bounds = [&, blockM](OpBuilder &b, Location loc, Value entry) {
    fa3::detail::SequenceRows queries = fa3::detail::sequenceRows(b, loc, cuQ, entry);
    fa3::detail::SequenceRows keys = fa3::detail::sequenceRows(b, loc, cuK, entry);
    SequenceBounds seq;
    seq.tensorBatch = indexConstant(b, loc, 0);
    seq.qBegin = queries.begin;
    seq.qEnd = queries.end;
    seq.qLen = queries.length;
    seq.numQBlocks = arith::CeilDivUIOp::create(
        b, loc, seq.qLen, indexConstant(b, loc, blockM / t.packedHeads));
    seq.keyStart = keys.begin;
    seq.keyLen = used ? indexAt(b, loc, used, entry) : keys.length;
    return seq;
  };
  SmallVector<Value> results;
  if (grid) {
    Value totalQ = tensor::DimOp::create(rewriter, loc, op.getQuery(), 0);
    Value numQBlocks = arith::CeilDivUIOp::create(
        rewriter, loc, totalQ,
        indexConstant(rewriter, loc, blockM / t.packedHeads));
    results = llvm::to_vector(buildGrid(rewriter, loc, t, numQBlocks));
  } else {
    results = llvm::to_vector(buildTileLoops(rewriter, loc, t));
  }
  if (t.numSplits > 1) {
    auto f32 = rewriter.getF32Type();
    auto combined = combineSplits(
        rewriter, loc, t, results,
        RankedTensorType::get({1, outType.getDimSize(0), outType.getDimSize(1),
                               outType.getDimSize(2)},
                              outType.getElementType()),
        RankedTensorType::get({1, lseType.getDimSize(0), lseType.getDimSize(1)},
                              f32));
    results = {combined.getOutput(), combined.getLse()};
  }
  Value out = fa3::detail::unpack(rewriter, loc, results[0], outType);
  Value lse = fa3::detail::unpack(rewriter, loc, results[1], lseType);
  rewriter.replaceOp(op, ValueRange{out, lse});
  return success();
}

/// fa3.attention_kvcache: batch b's keys are the first cache_seqlens[b]
/// rows of its cache (or of its pages).
static LogicalResult tileAttentionKVCache(AttentionKVCacheOp op,
                                          RewriterBase &rewriter,
                                          bool grid = false) {
  if (!op.getScheduleAttr())
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule first";
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  TiledForward t;
  t.c0 = indexConstant(rewriter, loc, 0);
  t.c1 = indexConstant(rewriter, loc, 1);
  setMaskAttrs(t, op, rewriter);
  t.query = op.getQuery();
  t.key = op.getKeyCache();
  t.value = op.getValueCache();
  t.pageTable = op.getPageTable();
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  auto lseType = cast<RankedTensorType>(op.getLse().getType());
  t.numSplits = op.getNumSplits().value_or(1);
  t.numBatches = tensor::DimOp::create(rewriter, loc, t.query, 0);
  t.tensorBatches = t.numBatches;
  if (t.numSplits > 1) {
    // The splits' partial results, [N·B, ...] (f32 O), merged below.
    auto f32 = rewriter.getF32Type();
    t.outType = RankedTensorType::get(
        {ShapedType::kDynamic, outType.getDimSize(1), outType.getDimSize(2),
         outType.getDimSize(3)},
        f32);
    t.lseType = RankedTensorType::get(
        {ShapedType::kDynamic, lseType.getDimSize(1), lseType.getDimSize(2)},
        f32);
    IndexMath m{rewriter, loc};
    Value rows = m.mul(t.numBatches, m.cst(t.numSplits));
    Value seqQ = tensor::DimOp::create(rewriter, loc, t.query, 1);
    t.outInit = tensor::EmptyOp::create(
        rewriter, loc, t.outType.getShape(), f32,
        t.outType.isDynamicDim(1) ? ValueRange{rows, seqQ} : ValueRange{rows});
    t.lseInit = tensor::EmptyOp::create(
        rewriter, loc, t.lseType.getShape(), f32,
        t.lseType.isDynamicDim(2) ? ValueRange{rows, seqQ} : ValueRange{rows});
  } else {
    t.outType = outType;
    t.lseType = lseType;
    t.outInit = emptyWithDims(rewriter, loc, t.outType, t.query, {0, 1});
    t.lseInit = emptyWithDims(rewriter, loc, t.lseType, t.query, {0, 1});
  }
  if (op.getPackGqa()) {
    if (failed(setPackedHeads(t, op)))
      return failure();
  }
  Value seqQ = tensor::DimOp::create(rewriter, loc, t.query, 1);
  Value numQBlocks = arith::CeilDivUIOp::create(
      rewriter, loc, seqQ,
      indexConstant(rewriter, loc, t.schedule.getBlockM() / t.packedHeads));
  Value lengths = op.getCacheSeqlens();
  // Batch b's keys: min(cache_seqlens[b], the cache's rows), so a length
  // past the cache reads no row outside it; paged, the rows its page table
  // addresses (max_pages · page_size), so no key reads past the table.
  Value cacheRows = tensor::DimOp::create(rewriter, loc, t.key, 1);
  if (op.isPaged())
    cacheRows = arith::MulIOp::create(
        rewriter, loc,
        tensor::DimOp::create(rewriter, loc, op.getPageTable(), 1), cacheRows);
  t.bounds = [&](OpBuilder &b, Location loc, Value entry) {
    SequenceBounds seq;
    seq.tensorBatch = entry;
    seq.qLen = seqQ;
    seq.numQBlocks = numQBlocks;
    seq.keyLen = indexAt(b, loc, lengths, entry);
    seq.keyLen = arith::MinSIOp::create(b, loc, seq.keyLen, cacheRows);
    return seq;
  };
  // The grid (GPU) form: one CTA per (query block, head, batch) of a
  // contiguous or paged cache, and per split with num_splits > 1.
  ValueRange results = grid ? buildGrid(rewriter, loc, t, numQBlocks)
                            : buildTileLoops(rewriter, loc, t);
  if (t.numSplits <= 1) {
    rewriter.replaceOp(op, results);
    return success();
  }
  rewriter.replaceOp(op, combineSplits(rewriter, loc, t, llvm::to_vector(results),
                                       outType, lseType)
                            .getResults());
  return success();
}

/// fa3.kvcache_append as loops over (batch, new row) that insert one
/// [1, 1, H, D] row each into the caches; rows whose position falls outside
/// the cache (or its page table) are dropped.
static void lowerKVCacheAppend(KVCacheAppendOp op, RewriterBase &rewriter) {
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  Value c0 = indexConstant(rewriter, loc, 0),
        c1 = indexConstant(rewriter, loc, 1);
  Value pages = op.getPageTable();
  Value batch = tensor::DimOp::create(rewriter, loc, op.getKey(), 0);
  Value newRows = tensor::DimOp::create(rewriter, loc, op.getKey(), 1);
  Value cacheRows = tensor::DimOp::create(rewriter, loc, op.getKeyCache(), 1);
  Value numPages = tensor::DimOp::create(rewriter, loc, op.getKeyCache(), 0);
  Value tableWidth =
      pages ? tensor::DimOp::create(rewriter, loc, pages, 1).getResult()
            : Value();

  // Inserts row `i` of batch `b` of `fresh` into `cache` at (slot0, slot1).
  auto copyRow = [](OpBuilder &b, Location loc, Value fresh, Value cache,
                    Value bIdx, Value i, Value slot0, Value slot1) {
    auto type = cast<RankedTensorType>(fresh.getType());
    int64_t heads = type.getDimSize(2), dim = type.getDimSize(3);
    OpFoldResult one = b.getIndexAttr(1), zero = b.getIndexAttr(0);
    SmallVector<OpFoldResult> sizes = {one, one, b.getIndexAttr(heads),
                                       b.getIndexAttr(dim)};
    SmallVector<OpFoldResult> strides(4, one);
    auto rowType = RankedTensorType::get({1, 1, heads, dim},
                                         type.getElementType());
    Value row = tensor::ExtractSliceOp::create(
        b, loc, rowType, fresh, {bIdx, i, zero, zero}, sizes, strides);
    return tensor::InsertSliceOp::create(b, loc, row, cache,
                                         {slot0, slot1, zero, zero}, sizes,
                                         strides)
        .getResult();
  };

  auto batchLoop = scf::ForOp::create(
      rewriter, loc, c0, batch, c1,
      ValueRange{op.getKeyCache(), op.getValueCache()},
      [&](OpBuilder &b, Location loc, Value bIdx, ValueRange caches) {
        Value base = indexAt(b, loc, op.getCacheSeqlens(), bIdx);
        auto rowLoop = scf::ForOp::create(
            b, loc, c0, newRows, c1, caches,
            [&](OpBuilder &b, Location loc, Value i, ValueRange iters) {
              IndexMath m{b, loc};
              Value pos = m.add(base, i);
              Value slot0 = bIdx, slot1 = pos, inside;
              if (pages) {
                Value page = arith::DivUIOp::create(b, loc, pos, cacheRows);
                slot1 = arith::RemUIOp::create(b, loc, pos, cacheRows);
                // A page past the table's width reads as page `numPages`,
                // which drops the row.
                auto lookup = scf::IfOp::create(
                    b, loc, m.lt(page, tableWidth),
                    [&](OpBuilder &b, Location loc) {
                      scf::YieldOp::create(
                          b, loc, indexAt(b, loc, pages, ValueRange{bIdx, page}));
                    },
                    [&](OpBuilder &b, Location loc) {
                      scf::YieldOp::create(b, loc, numPages);
                    });
                slot0 = lookup.getResult(0);
                inside = m.lt(slot0, numPages);
              } else {
                inside = m.lt(pos, cacheRows);
              }
              auto write = scf::IfOp::create(
                  b, loc, inside,
                  [&](OpBuilder &b, Location loc) {
                    Value kc = copyRow(b, loc, op.getKey(), iters[0], bIdx, i,
                                       slot0, slot1);
                    Value vc = copyRow(b, loc, op.getValue(), iters[1], bIdx,
                                       i, slot0, slot1);
                    scf::YieldOp::create(b, loc, ValueRange{kc, vc});
                  },
                  [&](OpBuilder &b, Location loc) {
                    scf::YieldOp::create(b, loc, iters);
                  });
              scf::YieldOp::create(b, loc, write.getResults());
            });
        scf::YieldOp::create(b, loc, rowLoop.getResults());
      });
  rewriter.replaceOp(op, batchLoop.getResults());
}

namespace {
struct FA3TilePass : public fa3::impl::FA3TileBase<FA3TilePass> {
  using Base::Base;

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<AttentionOp> ops;
    SmallVector<AttentionGradOp> gradOps;
    SmallVector<Operation *> cacheOps;
    bool failedAny = false;
    getOperation()->walk([&](Operation *op) {
      if (auto attention = dyn_cast<AttentionOp>(op))
        ops.push_back(attention);
      else if (auto grad = dyn_cast<AttentionGradOp>(op))
        gradOps.push_back(grad);
      else if (isa<AttentionVarlenOp, AttentionVarlenGradOp,
                   AttentionKVCacheOp, KVCacheAppendOp>(op))
        cacheOps.push_back(op);
    });
    for (Operation *op : cacheOps) {
      if (grid && isa<KVCacheAppendOp>(op)) {
        op->emitOpError()
            << "has no grid (GPU) tiling yet: fa3-tile{grid=true} "
               "tiles fa3.attention, fa3.attention_grad, "
               "fa3.attention_varlen, fa3.attention_varlen_grad and "
               "fa3.attention_kvcache; the CPU pipeline runs it";
        failedAny = true;
        continue;
      }
      LogicalResult tiled = success();
      if (auto varlen = dyn_cast<AttentionVarlenOp>(op))
        tiled = tileAttentionVarlen(varlen, rewriter, grid);
      else if (auto varlenGrad = dyn_cast<AttentionVarlenGradOp>(op))
        tiled = tileAttentionVarlenGrad(varlenGrad, rewriter, grid);
      else if (auto cache = dyn_cast<AttentionKVCacheOp>(op))
        tiled = tileAttentionKVCache(cache, rewriter, grid);
      else
        lowerKVCacheAppend(cast<KVCacheAppendOp>(op), rewriter);
      if (failed(tiled))
        failedAny = true;
    }
    for (AttentionOp op : ops)
      if (failed(tileAttention(op, rewriter, grid)))
        failedAny = true;
    for (AttentionGradOp op : gradOps)
      if (failed(tileAttentionGrad(op, rewriter, grid)))
        failedAny = true;
    if (failedAny)
      signalPassFailure();
  }
};
} // namespace
