//===- TileGrad.cpp - Tile fa3.attention_grad ---------------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// FlashAttention-2's backward at the tile level. Every key block owns its dK
// and dV accumulators and walks the query blocks that can see it (over every
// query head of its GQA group, so dK/dV are summed without atomics); dQ
// accumulates in an f32 tensor across key blocks. Memory beyond the inputs
// and outputs is O(N): Δ [B, Hq, Sq] and the dQ accumulator [B, Sq, Hq, D].
// The packed variable-length backward (fa3.attention_varlen_grad) runs the
// same nests with each sequence's rows as offsets and limits.
//
//===----------------------------------------------------------------------===//

#include "TileGrad.h"
#include "IndexMath.h"
#include "PackedSequences.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace mlir::fa3;
using mlir::fa3::detail::IndexMath;

/// tensor.empty of `type`, with its dynamic dims taken from `dims` (the
/// run-time sizes of each dimension).
static Value emptyTensor(OpBuilder &b, Location loc, RankedTensorType type,
                         ArrayRef<Value> dims) {
  SmallVector<Value> dynamic;
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (type.isDynamicDim(i))
      dynamic.push_back(dims[i]);
  return tensor::EmptyOp::create(b, loc, type.getShape(),
                                 type.getElementType(), dynamic);
}

static Value zeroTile(OpBuilder &b, Location loc, ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(shape, b.getF32Type());
  return arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(type, b.getF32FloatAttr(0.0f)));
}

/// Nested loops over [0, ub_i) carrying `iters`; `body` gets the induction
/// variables and the current iteration values and returns the next ones.
static ValueRange
buildLoopNest(OpBuilder &b, Location loc, ArrayRef<Value> upperBounds,
              ValueRange iters,
              function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange,
                                              ValueRange)>
                  body) {
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
  SmallVector<Value> ivs;
  std::function<ValueRange(OpBuilder &, unsigned, ValueRange)> nest =
      [&](OpBuilder &b, unsigned depth, ValueRange current) -> ValueRange {
    auto loop = scf::ForOp::create(
        b, loc, c0, upperBounds[depth], c1, current,
        [&](OpBuilder &b, Location loc, Value iv, ValueRange args) {
          ivs.push_back(iv);
          SmallVector<Value> next;
          if (depth + 1 == upperBounds.size())
            next = body(b, loc, ivs, args);
          else
            llvm::append_range(next, nest(b, depth + 1, args));
          ivs.pop_back();
          scf::YieldOp::create(b, loc, next);
        });
    return loop.getResults();
  };
  return nest(b, 0, iters);
}

namespace {
/// Where one batch entry's rows are in the (4-D) tensors of a backward:
/// queries `[qBegin, qBegin + qLen)` and keys `[kBegin, kBegin + kLen)` of
/// batch `tensorBatch`; null begins are 0 and null ends the tensors' ends
/// (a packed batch bounds each sequence's loads and stores by them).
struct GradSequence {
  Value tensorBatch;
  Value qBegin, qEnd, qLen, numQBlocks;
  Value kBegin, kEnd, kLen, numKBlocks;
};

/// What the three loop nests of a backward need, in the 4-D form.
struct GradTiling {
  Value gradOutput, query, key, value, output, lse, gradLse;
  Value numBatches;
  /// The extents of dim 1 of the query and key tensors (for the inits).
  Value seqQ, seqK;
  /// The rows of batch entry `b`, built inside each batch loop.
  std::function<GradSequence(OpBuilder &, Location, Value)> bounds;
  /// Start dQ/dK/dV from zeros: rows outside every sequence of a packed
  /// batch are written by no tile.
  bool zeroInit = false;
  ScheduleAttr schedule;
  UnitAttr causal;
  DenseI64ArrayAttr window;
  float scale = 1.0f, softcap = 0.0f;
  int64_t left = -1, right = -1;
  /// Dropout (null: off): the forward's probability and Philox (seed,
  /// offset), whose mask the backward regenerates.
  FloatAttr dropout;
  Value rng;
  /// Δ, once phase 1 built it.
  Value delta;
};
} // namespace

/// `begin + start`, or `start` without a begin.
static Value rowOf(IndexMath &m, Value begin, Value start) {
  return begin ? m.add(begin, start) : start;
}

/// A loop over the batch entries carrying `iters`; `body` gets the entry's
/// rows and returns the next iteration values.
static ValueRange forEachBatch(
    OpBuilder &b, Location loc, const GradTiling &t, ValueRange iters,
    function_ref<SmallVector<Value>(OpBuilder &, Location,
                                    const GradSequence &, ValueRange)>
        body) {
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
  auto loop = scf::ForOp::create(
      b, loc, c0, t.numBatches, c1, iters,
      [&](OpBuilder &b, Location loc, Value entry, ValueRange args) {
        GradSequence seq = t.bounds(b, loc, entry);
        scf::YieldOp::create(b, loc, body(b, loc, seq, args));
      });
  return loop.getResults();
}

/// `init` filled with zeros when `zero`.
static Value maybeZero(OpBuilder &b, Location loc, Value init, bool zero) {
  if (!zero)
    return init;
  Type elt = cast<RankedTensorType>(init.getType()).getElementType();
  Value v = arith::ConstantOp::create(b, loc, elt, b.getZeroAttr(elt));
  return linalg::FillOp::create(b, loc, v, init).getResult(0);
}

namespace {
/// The tile shapes of a backward, and how its three phases build one
/// iteration each (shared by the serial loops and the grid).
struct GradPhases {
  GradPhases(const GradTiling &t, OpBuilder &b) : t(t) {
    auto qType = cast<RankedTensorType>(t.query.getType());
    auto kType = cast<RankedTensorType>(t.key.getType());
    auto vType = cast<RankedTensorType>(t.value.getType());
    numQHeads = qType.getDimSize(2);
    numKVHeads = kType.getDimSize(2);
    groupSize = numQHeads / numKVHeads;
    headDim = qType.getDimSize(3);
    headDimV = vType.getDimSize(3);
    blockM = t.schedule.getBlockM();
    blockN = t.schedule.getBlockN();
    f32 = b.getF32Type();
    elt = qType.getElementType();
    rowType = RankedTensorType::get({blockM}, f32);
    sType = tile(blockM, blockN, f32);
    scaleAttr = b.getF32FloatAttr(t.scale);
    softcapAttr = b.getF32FloatAttr(t.softcap);
  }
  RankedTensorType tile(int64_t rows, int64_t cols, Type type) const {
    return RankedTensorType::get({rows, cols}, type);
  }

  /// Phase 1 at query rows [row, row + block_m) of `head`: Δ = rowsum(dO ∘
  /// O), or Δ − dLSE when the LSE has a gradient.
  Value delta(OpBuilder &b, Location loc, const GradSequence &seq, Value head,
              Value row) const {
    auto oTileType = tile(blockM, headDimV, elt);
    Value dO = LoadTileOp::create(b, loc, oTileType, t.gradOutput,
                                  seq.tensorBatch, row, head, seq.qEnd);
    Value o = LoadTileOp::create(b, loc, oTileType, t.output, seq.tensorBatch,
                                 row, head, seq.qEnd);
    Value gradLse;
    if (t.gradLse)
      gradLse = LoadStatsOp::create(b, loc, rowType, t.gradLse, seq.tensorBatch,
                                    head, row, seq.qEnd);
    return RowDotOp::create(b, loc, rowType, dO, o, gradLse);
  }

  /// How a step adds dQ = dS K into the accumulator: it gets dS, the key
  /// tile, the step's query row and head and the carried values (the
  /// serial form carries the accumulator tensor) and returns the next.
  using AddDQ = function_ref<SmallVector<Value>(
      OpBuilder &, Location, Value ds, Value kTile, Value qRow, Value head,
      ValueRange carried)>;

  /// Phase 2 for key block `kBlock` of `kvHead`: dK and dV (converted, and
  /// dK scaled) over the query heads of the group and the query blocks that
  /// see the block, with `carried` threaded through `addDQ`; returns (dK
  /// tile, dV tile, the block's first key row, the carried values).
  std::tuple<Value, Value, Value, SmallVector<Value>>
  keyBlock(OpBuilder &b, Location loc, const GradSequence &seq, Value kvHead,
           Value kBlock, ValueRange carried, AddDQ addDQ) const;

  /// Phase 3 at query rows [row, row + block_m) of `head`: dQ = scale ·
  /// accumulator, in the storage type.
  Value gradQuery(OpBuilder &b, Location loc, const GradSequence &seq,
                  Value dqAcc, Value head, Value row) const {
    Value acc = LoadTileOp::create(b, loc, tile(blockM, headDim, f32), dqAcc,
                                   seq.tensorBatch, row, head, seq.qEnd);
    return ScaleCastOp::create(b, loc, tile(blockM, headDim, elt), acc,
                               scaleAttr);
  }

  const GradTiling &t;
  int64_t numQHeads, numKVHeads, groupSize, headDim, headDimV, blockM, blockN;
  Type f32, elt;
  RankedTensorType rowType, sType;
  FloatAttr scaleAttr, softcapAttr;
};
} // namespace

std::tuple<Value, Value, Value, SmallVector<Value>>
GradPhases::keyBlock(OpBuilder &b, Location loc, const GradSequence &seq,
                     Value kvHead, Value kBlock, ValueRange carried,
                     AddDQ addDQ) const {
  IndexMath m{b, loc};
  int64_t left = t.left, right = t.right;
  Value seqQ = seq.qLen, seqK = seq.kLen;
  // Row r's diagonal is column r + offset (sequence coordinates).
  Value offset = m.sub(seqK, seqQ);
  Value bIdx = seq.tensorBatch;
  Value kStart = m.mul(kBlock, m.cst(blockN));
  Value kRow = rowOf(m, seq.kBegin, kStart);
  Value kTile = LoadTileOp::create(b, loc, tile(blockN, headDim, elt), t.key,
                                   bIdx, kRow, kvHead, seq.kEnd);
  Value vTile = LoadTileOp::create(b, loc, tile(blockN, headDimV, elt), t.value,
                                   bIdx, kRow, kvHead, seq.kEnd);
  // The query rows that see some key of this block: those whose window
  // [r + offset - left, r + offset + right] meets it.
  Value kLast = m.sub(m.min(m.add(kStart, m.cst(blockN)), seqK), m.cst(1));
  Value rowLo = m.cst(0), rowHi = seqQ;
  if (right >= 0)
    rowLo = m.max(rowLo, m.sub(m.sub(kStart, offset), m.cst(right)));
  if (left >= 0)
    rowHi = m.min(rowHi, m.add(m.sub(kLast, offset), m.cst(left + 1)));
  Value qbLo = m.floorDiv(rowLo, blockM);
  Value qbHi = m.max(qbLo, m.ceilDiv(rowHi, blockM));

  SmallVector<Value> init = {zeroTile(b, loc, {blockN, headDim}),
                             zeroTile(b, loc, {blockN, headDimV})};
  llvm::append_range(init, carried);
  Value c1 = m.cst(1);
  auto groupLoop = scf::ForOp::create(
      b, loc, m.cst(0), m.cst(groupSize), c1, init,
      [&](OpBuilder &b, Location loc, Value g, ValueRange groupIters) {
        IndexMath m{b, loc};
        Value head = m.add(m.mul(kvHead, m.cst(groupSize)), g);
        auto qLoop = scf::ForOp::create(
            b, loc, qbLo, qbHi, m.cst(1), groupIters,
            [&](OpBuilder &b, Location loc, Value qb, ValueRange acc) {
              IndexMath m{b, loc};
              Value qStart = m.mul(qb, m.cst(blockM));
              Value qRow = rowOf(m, seq.qBegin, qStart);
              Value qLast =
                  m.sub(m.min(m.add(qStart, m.cst(blockM)), seqQ), m.cst(1));
              Value q = LoadTileOp::create(b, loc, tile(blockM, headDim, elt),
                                           t.query, bIdx, qRow, head, seq.qEnd);
              Value dO =
                  LoadTileOp::create(b, loc, tile(blockM, headDimV, elt),
                                     t.gradOutput, bIdx, qRow, head, seq.qEnd);
              Value lse = LoadStatsOp::create(b, loc, rowType, t.lse, bIdx,
                                              head, qRow, seq.qEnd);
              Value rowDelta = LoadStatsOp::create(b, loc, rowType, t.delta,
                                                   bIdx, head, qRow, seq.qEnd);

              Value scores = QKOp::create(b, loc, sType, q, kTile);
              if (t.softcap > 0)
                scores = SoftcapOp::create(b, loc, sType, scores,
                                           /*descale=*/Value(), scaleAttr,
                                           softcapAttr);
              Value needsMask = m.blockNeedsMask(qStart, qLast, kStart, blockN,
                                                 seqK, offset, left, right);
              auto masked = scf::IfOp::create(
                  b, loc, needsMask,
                  [&](OpBuilder &b, Location loc) {
                    Value s =
                        MaskOp::create(b, loc, sType, scores, qStart, kStart,
                                       seqQ, seqK, t.causal, t.window,
                                       /*packed_heads=*/IntegerAttr());
                    scf::YieldOp::create(b, loc, s);
                  },
                  [&](OpBuilder &b, Location loc) {
                    scf::YieldOp::create(b, loc, scores);
                  });
              Value p = RecomputeProbsOp::create(
                  b, loc, sType, masked.getResult(0), lse,
                  b.getF32FloatAttr(t.scale * static_cast<float>(M_LOG2E)));
              // With dropout, Z (the forward's mask over 1 - p) scales P
              // where it met V and dP where it comes back: dV += (P ∘ Z)ᵀ
              // dO, dS = P ∘ (Z ∘ dP − Δ).
              Value stream =
                  t.rng ? m.add(m.mul(bIdx, m.cst(numQHeads)), head) : Value();
              auto drop = [&](Value x) -> Value {
                if (!t.rng)
                  return x;
                return DropoutOp::create(b, loc, sType, x, t.rng, stream,
                                         qStart, kStart, t.dropout);
              };
              Value dv = MmaTNOp::create(b, loc, acc[1].getType(), drop(p), dO,
                                         acc[1]);
              Value dp = drop(QKOp::create(b, loc, sType, dO, vTile));
              Value ds = SoftmaxGradOp::create(b, loc, sType, p, dp, rowDelta);
              if (t.softcap > 0)
                ds = SoftcapGradOp::create(b, loc, sType, ds, scores, scaleAttr,
                                           softcapAttr);
              Value dk =
                  MmaTNOp::create(b, loc, acc[0].getType(), ds, q, acc[0]);
              SmallVector<Value> next = {dk, dv};
              llvm::append_range(next, addDQ(b, loc, ds, kTile, qRow, head,
                                             acc.drop_front(2)));
              scf::YieldOp::create(b, loc, next);
            });
        scf::YieldOp::create(b, loc, qLoop.getResults());
      });
  Value dkTile = ScaleCastOp::create(b, loc, tile(blockN, headDim, elt),
                                     groupLoop.getResult(0), scaleAttr);
  Value dvTile =
      ScaleCastOp::create(b, loc, tile(blockN, headDimV, elt),
                          groupLoop.getResult(1), b.getF32FloatAttr(1.0f));
  SmallVector<Value> carriedOut(groupLoop.getResults().drop_front(2));
  return {dkTile, dvTile, kRow, carriedOut};
}

/// The empty (or, for a packed batch, zero-filled) dQ, dK and dV in the
/// 4-D form.
static SmallVector<Value> gradientInits(OpBuilder &b, Location loc,
                                        const GradTiling &t,
                                        const GradPhases &g, Value batch) {
  IndexMath m{b, loc};
  auto init = [&](Value like, Value rows, int64_t heads, int64_t dim) {
    auto type = cast<RankedTensorType>(like.getType());
    return maybeZero(
        b, loc,
        emptyTensor(b, loc, type, {batch, rows, m.cst(heads), m.cst(dim)}),
        t.zeroInit);
  };
  return {init(t.query, t.seqQ, g.numQHeads, g.headDim),
          init(t.key, t.seqK, g.numKVHeads, g.headDim),
          init(t.value, t.seqK, g.numKVHeads, g.headDimV)};
}

/// FlashAttention-2's backward over `t`'s tensors as serial loops; returns
/// (dQ, dK, dV) in the 4-D form.
static SmallVector<Value> tileGrad(GradTiling &t, RewriterBase &rewriter,
                                   Location loc) {
  IndexMath m{rewriter, loc};
  GradPhases g(t, rewriter);
  Value batch = tensor::DimOp::create(rewriter, loc, t.query, 0);
  SmallVector<Value> inits = gradientInits(rewriter, loc, t, g, batch);
  // The f32 workspace: Δ per query row and the dQ accumulator.
  auto lseType = cast<RankedTensorType>(t.lse.getType());
  Value deltaInit =
      emptyTensor(rewriter, loc, lseType, {batch, m.cst(g.numQHeads), t.seqQ});
  auto dqAccType = RankedTensorType::get(
      cast<RankedTensorType>(t.query.getType()).getShape(), g.f32);
  Value dqAccInit =
      emptyTensor(rewriter, loc, dqAccType,
                  {batch, t.seqQ, m.cst(g.numQHeads), m.cst(g.headDim)});

  // Phase 1, per query tile: Δ and a zeroed dQ accumulator tile.
  ValueRange pre = forEachBatch(
      rewriter, loc, t, ValueRange{deltaInit, dqAccInit},
      [&](OpBuilder &b, Location loc, const GradSequence &seq,
          ValueRange batchIters) {
        IndexMath m{b, loc};
        return llvm::to_vector(buildLoopNest(
            b, loc, {m.cst(g.numQHeads), seq.numQBlocks}, batchIters,
            [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
              IndexMath m{b, loc};
              Value head = ivs[0];
              Value row = rowOf(m, seq.qBegin, m.mul(ivs[1], m.cst(g.blockM)));
              Value delta = StoreStatsOp::create(
                  b, loc, lseType, g.delta(b, loc, seq, head, row), iters[0],
                  seq.tensorBatch, head, row, seq.qEnd);
              Value dqAcc = StoreTileOp::create(
                  b, loc, dqAccType, zeroTile(b, loc, {g.blockM, g.headDim}),
                  iters[1], seq.tensorBatch, row, head, seq.qEnd);
              return SmallVector<Value>{delta, dqAcc};
            }));
      });
  t.delta = pre[0];

  // Phase 2, per key tile: dK and dV over the visible query tiles of every
  // query head in the group; dQ += dS K into the accumulator tensor, which
  // the loops carry.
  ValueRange main = forEachBatch(
      rewriter, loc, t, ValueRange{inits[1], inits[2], pre[1]},
      [&](OpBuilder &b, Location loc, const GradSequence &seq,
          ValueRange batchIters) {
        IndexMath m{b, loc};
        return llvm::to_vector(buildLoopNest(
            b, loc, {m.cst(g.numKVHeads), seq.numKBlocks}, batchIters,
            [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
              auto addDQ = [&](OpBuilder &b, Location loc, Value ds,
                               Value kTile, Value qRow, Value head,
                               ValueRange carried) -> SmallVector<Value> {
                Value dq = LoadTileOp::create(
                    b, loc, g.tile(g.blockM, g.headDim, g.f32), carried[0],
                    seq.tensorBatch, qRow, head, seq.qEnd);
                dq = PVOp::create(b, loc, dq.getType(), ds, kTile, dq,
                                  /*probs_scale=*/FloatAttr());
                return {StoreTileOp::create(b, loc, dqAccType, dq, carried[0],
                                            seq.tensorBatch, qRow, head,
                                            seq.qEnd)};
              };
              auto [dkTile, dvTile, kRow, carried] =
                  g.keyBlock(b, loc, seq, ivs[0], ivs[1], iters[2], addDQ);
              Value dk = StoreTileOp::create(b, loc, iters[0].getType(), dkTile,
                                             iters[0], seq.tensorBatch, kRow,
                                             ivs[0], seq.kEnd);
              Value dv = StoreTileOp::create(b, loc, iters[1].getType(), dvTile,
                                             iters[1], seq.tensorBatch, kRow,
                                             ivs[0], seq.kEnd);
              return SmallVector<Value>{dk, dv, carried[0]};
            }));
      });

  // Phase 3, per query tile: dQ = scale · accumulator, in the storage type.
  Value dqAcc = main[2];
  ValueRange post = forEachBatch(
      rewriter, loc, t, ValueRange{inits[0]},
      [&](OpBuilder &b, Location loc, const GradSequence &seq,
          ValueRange batchIters) {
        IndexMath m{b, loc};
        return llvm::to_vector(buildLoopNest(
            b, loc, {m.cst(g.numQHeads), seq.numQBlocks}, batchIters,
            [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
              IndexMath m{b, loc};
              Value head = ivs[0];
              Value row = rowOf(m, seq.qBegin, m.mul(ivs[1], m.cst(g.blockM)));
              return SmallVector<Value>{StoreTileOp::create(
                  b, loc, iters[0].getType(),
                  g.gradQuery(b, loc, seq, dqAcc, head, row), iters[0],
                  seq.tensorBatch, row, head, seq.qEnd)};
            }));
      });
  return {post[0], main[0], main[1]};
}

/// An scf.forall over (x, y, z) = `bounds` mapped to #gpu.block<x/y/z>, with
/// `shared` as its shared outputs; `body` builds an iteration before the
/// in_parallel region, given the induction variables, and returns the
/// contributions that `store` puts into the region (one per shared output,
/// in order).
static scf::ForallOp
buildGradGrid(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> bounds,
              ValueRange shared,
              function_ref<void(OpBuilder &, ValueRange ivs, ValueRange outs,
                                SmallVectorImpl<std::function<void()>> &)>
                  body) {
  MLIRContext *ctx = b.getContext();
  auto mapping = b.getArrayAttr(
      {gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimX),
       gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimY),
       gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimZ)});
  auto forall = scf::ForallOp::create(b, loc, bounds, shared, mapping);
  OpBuilder::InsertionGuard guard(b);
  scf::InParallelOp inParallel = forall.getTerminator();
  b.setInsertionPoint(inParallel);
  SmallVector<std::function<void()>> stores;
  body(b, forall.getInductionVars(), forall.getRegionIterArgs(), stores);
  b.setInsertionPointToStart(inParallel.getBody());
  for (auto &store : stores)
    store();
  return forall;
}

/// The backward as the grid the Hopper kernels are built from (see the
/// fa3-tile description): three scf.foralls, their iterations contributing
/// tiles with parallel stores, and the dQ accumulator a buffer
/// (memref.alloc, zero-filled) that the key blocks add to with
/// fa3.accumulate_tile. Each iteration takes its batch entry's rows from
/// `t.bounds` (a packed batch: its sequence's offsets, read inside the
/// iteration; the grid's x covers the longest sequence a tensor can hold,
/// and an iteration past its sequence's end stores nothing). Returns (dQ,
/// dK, dV) in the 4-D form.
static SmallVector<Value> tileGradGrid(GradTiling &t, RewriterBase &rewriter,
                                       Location loc, bool deterministic) {
  IndexMath m{rewriter, loc};
  GradPhases g(t, rewriter);
  // The tensors' batch dim (1 for a packed batch) and the grid's z.
  Value tensorBatch = tensor::DimOp::create(rewriter, loc, t.query, 0);
  Value gridZ = t.numBatches;
  SmallVector<Value> inits = gradientInits(rewriter, loc, t, g, tensorBatch);
  auto lseType = cast<RankedTensorType>(t.lse.getType());
  Value deltaInit = emptyTensor(rewriter, loc, lseType,
                                {tensorBatch, m.cst(g.numQHeads), t.seqQ});
  auto qType = cast<RankedTensorType>(t.query.getType());
  auto accType = MemRefType::get(qType.getShape(), g.f32);
  SmallVector<Value> accSizes = {tensorBatch, t.seqQ}, accDynamic;
  for (auto [i, size] : llvm::enumerate(accSizes))
    if (accType.isDynamicDim(i))
      accDynamic.push_back(size);
  Value acc = memref::AllocOp::create(rewriter, loc, accType, accDynamic);
  linalg::FillOp::create(rewriter, loc,
                         ValueRange{arith::ConstantOp::create(
                             rewriter, loc, rewriter.getF32FloatAttr(0.0f))},
                         ValueRange{acc});
  Value numQBlocks = m.ceilDiv(t.seqQ, g.blockM);
  Value numKBlocks = m.ceilDiv(t.seqK, g.blockN);

  // Phase 1: (query block, query head, batch entry).
  auto pre = buildGradGrid(
      rewriter, loc, {numQBlocks, rewriter.getIndexAttr(g.numQHeads), gridZ},
      deltaInit,
      [&](OpBuilder &b, ValueRange ivs, ValueRange outs,
          SmallVectorImpl<std::function<void()>> &stores) {
        IndexMath m{b, loc};
        GradSequence seq = t.bounds(b, loc, ivs[2]);
        Value row = rowOf(m, seq.qBegin, m.mul(ivs[0], m.cst(g.blockM)));
        Value delta = g.delta(b, loc, seq, ivs[1], row);
        Value dest = outs[0], batch = seq.tensorBatch, head = ivs[1],
              end = seq.qEnd;
        stores.push_back([&b, loc, delta, dest, batch, head, row, end] {
          ParallelStoreStatsOp::create(b, loc, delta, dest, batch, head, row,
                                       end, IntegerAttr());
        });
      });
  t.delta = pre.getResult(0);

  // Phase 2: (key block, key/value head, batch entry).
  auto main = buildGradGrid(
      rewriter, loc, {numKBlocks, rewriter.getIndexAttr(g.numKVHeads), gridZ},
      ValueRange{inits[1], inits[2]},
      [&](OpBuilder &b, ValueRange ivs, ValueRange outs,
          SmallVectorImpl<std::function<void()>> &stores) {
        GradSequence seq = t.bounds(b, loc, ivs[2]);
        auto addDQ = [&](OpBuilder &b, Location loc, Value ds, Value kTile,
                         Value qRow, Value head,
                         ValueRange) -> SmallVector<Value> {
          Value dq =
              PVOp::create(b, loc, g.tile(g.blockM, g.headDim, g.f32), ds,
                           kTile, zeroTile(b, loc, {g.blockM, g.headDim}),
                           /*probs_scale=*/FloatAttr());
          auto add = AccumulateTileOp::create(b, loc, dq, acc, seq.tensorBatch,
                                              qRow, head, seq.qEnd);
          if (deterministic)
            add.setOrdered(true);
          return {};
        };
        auto [dkTile, dvTile, kRow, carried] =
            g.keyBlock(b, loc, seq, ivs[1], ivs[0], ValueRange(), addDQ);
        Value dk = dkTile, dv = dvTile, row = kRow, kvHead = ivs[1];
        Value dkDest = outs[0], dvDest = outs[1], batch = seq.tensorBatch,
              end = seq.kEnd;
        stores.push_back(
            [&b, loc, dk, dv, row, kvHead, dkDest, dvDest, batch, end] {
              ParallelStoreTileOp::create(b, loc, dk, dkDest, batch, row,
                                          kvHead, end, IntegerAttr());
              ParallelStoreTileOp::create(b, loc, dv, dvDest, batch, row,
                                          kvHead, end, IntegerAttr());
            });
      });

  // Phase 3: (query block, query head, batch entry), after every key block
  // added its share.
  Value accTensor = bufferization::ToTensorOp::create(
      rewriter, loc, memref::getTensorTypeFromMemRefType(accType), acc,
      /*restrict=*/true, /*writable=*/false);
  auto post = buildGradGrid(
      rewriter, loc, {numQBlocks, rewriter.getIndexAttr(g.numQHeads), gridZ},
      inits[0],
      [&](OpBuilder &b, ValueRange ivs, ValueRange outs,
          SmallVectorImpl<std::function<void()>> &stores) {
        IndexMath m{b, loc};
        GradSequence seq = t.bounds(b, loc, ivs[2]);
        Value row = rowOf(m, seq.qBegin, m.mul(ivs[0], m.cst(g.blockM)));
        Value dq = g.gradQuery(b, loc, seq, accTensor, ivs[1], row);
        Value dest = outs[0], batch = seq.tensorBatch, head = ivs[1],
              end = seq.qEnd;
        stores.push_back([&b, loc, dq, dest, batch, head, row, end] {
          ParallelStoreTileOp::create(b, loc, dq, dest, batch, row, head, end,
                                      IntegerAttr());
        });
      });
  return {post.getResult(0), main.getResult(0), main.getResult(1)};
}

/// The mask and scale fields of `t` from a backward op.
template <typename OpTy>
static void setMaskFields(GradTiling &t, OpTy op, RewriterBase &rewriter) {
  t.schedule = op.getScheduleAttr();
  t.causal = op.getCausal() ? rewriter.getUnitAttr() : UnitAttr();
  t.window = op.getWindowAttr();
  t.scale = op.getEffectiveScale();
  t.softcap = op.getEffectiveSoftcap();
  std::tie(t.left, t.right) = op.getWindowBounds();
}

LogicalResult mlir::fa3::tileAttentionGrad(AttentionGradOp op,
                                           RewriterBase &rewriter, bool grid) {
  if (!op.getScheduleAttr())
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule first";
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  IndexMath m{rewriter, loc};
  GradTiling t;
  setMaskFields(t, op, rewriter);
  t.gradOutput = op.getGradOutput();
  t.query = op.getQuery();
  t.key = op.getKey();
  t.value = op.getValue();
  t.output = op.getOutput();
  t.lse = op.getLse();
  t.gradLse = op.getGradLse();
  if (op.getEffectiveDropout() > 0) {
    t.dropout = op.getDropoutAttr();
    t.rng = op.getRng();
  }
  t.numBatches = tensor::DimOp::create(rewriter, loc, t.query, 0);
  t.seqQ = tensor::DimOp::create(rewriter, loc, t.query, 1);
  t.seqK = tensor::DimOp::create(rewriter, loc, t.key, 1);
  Value numQBlocks = m.ceilDiv(t.seqQ, t.schedule.getBlockM());
  Value numKBlocks = m.ceilDiv(t.seqK, t.schedule.getBlockN());
  t.bounds = [&](OpBuilder &, Location, Value entry) {
    GradSequence seq;
    seq.tensorBatch = entry;
    seq.qLen = t.seqQ;
    seq.kLen = t.seqK;
    seq.numQBlocks = numQBlocks;
    seq.numKBlocks = numKBlocks;
    return seq;
  };
  if (grid) {
    rewriter.replaceOp(op,
                       tileGradGrid(t, rewriter, loc, op.getDeterministic()));
    return success();
  }
  rewriter.replaceOp(op, tileGrad(t, rewriter, loc));
  return success();
}

LogicalResult mlir::fa3::tileAttentionVarlenGrad(AttentionVarlenGradOp op,
                                                 RewriterBase &rewriter,
                                                 bool grid) {
  if (!op.getScheduleAttr())
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule first";
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  // The packed [T, H, D] / [H, T] tensors as one batch entry.
  auto expand = [&](Value packed) {
    return fa3::detail::asBatchOfOne(rewriter, loc, packed);
  };
  GradTiling t;
  setMaskFields(t, op, rewriter);
  t.gradOutput = expand(op.getGradOutput());
  t.query = expand(op.getQuery());
  t.key = expand(op.getKey());
  t.value = expand(op.getValue());
  t.output = expand(op.getOutput());
  t.lse = expand(op.getLse());
  if (op.getGradLse())
    t.gradLse = expand(op.getGradLse());
  t.zeroInit = true;
  IndexMath m{rewriter, loc};
  t.numBatches = m.sub(
      tensor::DimOp::create(rewriter, loc, op.getCuSeqlensQ(), 0), m.cst(1));
  t.seqQ = tensor::DimOp::create(rewriter, loc, op.getQuery(), 0);
  t.seqK = tensor::DimOp::create(rewriter, loc, op.getKey(), 0);
  int64_t blockM = t.schedule.getBlockM(), blockN = t.schedule.getBlockN();
  Value cuQ = op.getCuSeqlensQ(), cuK = op.getCuSeqlensK(),
        used = op.getSequsedK();
  t.bounds = [&, blockM, blockN](OpBuilder &b, Location loc, Value entry) {
    IndexMath m{b, loc};
    fa3::detail::SequenceRows queries = fa3::detail::sequenceRows(b, loc, cuQ, entry);
    fa3::detail::SequenceRows keys = fa3::detail::sequenceRows(b, loc, cuK, entry);
    GradSequence seq;
    seq.tensorBatch = m.cst(0);
    seq.qBegin = queries.begin;
    seq.qEnd = queries.end;
    seq.qLen = queries.length;
    seq.numQBlocks = m.ceilDiv(seq.qLen, blockM);
    seq.kBegin = keys.begin;
    seq.kEnd = keys.end;
    seq.kLen = keys.length;
    // With seqused_k only the sequence's first keys took part: the others
    // are past its end (zero gradients).
    if (used) {
      seq.kLen = fa3::detail::indexAt(b, loc, used, entry);
      seq.kEnd = m.add(seq.kBegin, seq.kLen);
    }
    seq.numKBlocks = m.ceilDiv(seq.kLen, blockN);
    return seq;
  };
  SmallVector<Value> grads =
      grid ? tileGradGrid(t, rewriter, loc, op.getDeterministic())
           : tileGrad(t, rewriter, loc);
  SmallVector<Value> results;
  for (auto [grad, type] : llvm::zip_equal(grads, op->getResultTypes()))
    results.push_back(
        fa3::detail::unpack(rewriter, loc, grad, cast<RankedTensorType>(type)));
  rewriter.replaceOp(op, results);
  return success();
}
