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

#include "mlir/Dialect/Linalg/IR/Linalg.h"
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

/// FlashAttention-2's backward over `t`'s tensors; returns (dQ, dK, dV) in
/// the 4-D form.
static SmallVector<Value> tileGrad(const GradTiling &t, RewriterBase &rewriter,
                                   Location loc) {
  IndexMath m{rewriter, loc};
  auto qType = cast<RankedTensorType>(t.query.getType());
  auto kType = cast<RankedTensorType>(t.key.getType());
  auto vType = cast<RankedTensorType>(t.value.getType());
  auto lseType = cast<RankedTensorType>(t.lse.getType());
  int64_t numQHeads = qType.getDimSize(2), numKVHeads = kType.getDimSize(2);
  int64_t groupSize = numQHeads / numKVHeads;
  int64_t headDim = qType.getDimSize(3), headDimV = vType.getDimSize(3);
  int64_t blockM = t.schedule.getBlockM(), blockN = t.schedule.getBlockN();
  int64_t left = t.left, right = t.right;
  float scale = t.scale, softcap = t.softcap;
  Type f32 = rewriter.getF32Type();
  Type elt = qType.getElementType();
  Value batch = tensor::DimOp::create(rewriter, loc, t.query, 0);

  auto tile = [&](int64_t rows, int64_t cols, Type type) {
    return RankedTensorType::get({rows, cols}, type);
  };
  auto rowType = RankedTensorType::get({blockM}, f32);
  auto sType = tile(blockM, blockN, f32);
  Value dqInit = maybeZero(
      rewriter, loc,
      emptyTensor(rewriter, loc, qType,
                  {batch, t.seqQ, m.cst(numQHeads), m.cst(headDim)}),
      t.zeroInit);
  Value dkInit = maybeZero(
      rewriter, loc,
      emptyTensor(rewriter, loc, kType,
                  {batch, t.seqK, m.cst(numKVHeads), m.cst(headDim)}),
      t.zeroInit);
  Value dvInit = maybeZero(
      rewriter, loc,
      emptyTensor(rewriter, loc, vType,
                  {batch, t.seqK, m.cst(numKVHeads), m.cst(headDimV)}),
      t.zeroInit);
  // The f32 workspace: Δ per query row and the dQ accumulator.
  Value deltaInit =
      emptyTensor(rewriter, loc, lseType, {batch, m.cst(numQHeads), t.seqQ});
  auto dqAccType = RankedTensorType::get(qType.getShape(), f32);
  Value dqAccInit = emptyTensor(
      rewriter, loc, dqAccType,
      {batch, t.seqQ, m.cst(numQHeads), m.cst(headDim)});

  // Phase 1, per query tile: Δ = rowsum(dO ∘ O) (− dLSE) and a zeroed dQ
  // accumulator.
  ValueRange pre = forEachBatch(
      rewriter, loc, t, ValueRange{deltaInit, dqAccInit},
      [&](OpBuilder &b, Location loc, const GradSequence &seq,
          ValueRange batchIters) {
        IndexMath m{b, loc};
        return llvm::to_vector(buildLoopNest(
            b, loc, {m.cst(numQHeads), seq.numQBlocks}, batchIters,
            [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
              IndexMath m{b, loc};
              Value bIdx = seq.tensorBatch, head = ivs[0];
              Value row = rowOf(m, seq.qBegin, m.mul(ivs[1], m.cst(blockM)));
              auto oTileType = tile(blockM, headDimV, elt);
              Value dO = LoadTileOp::create(b, loc, oTileType, t.gradOutput,
                                            bIdx, row, head, seq.qEnd);
              Value o = LoadTileOp::create(b, loc, oTileType, t.output, bIdx,
                                           row, head, seq.qEnd);
              // Δ = rowsum(dO ∘ O), or Δ − dLSE when the LSE has a gradient.
              Value gradLse;
              if (t.gradLse)
                gradLse = LoadStatsOp::create(b, loc, rowType, t.gradLse, bIdx,
                                              head, row, seq.qEnd);
              Value rowDot = RowDotOp::create(b, loc, rowType, dO, o, gradLse);
              Value delta =
                  StoreStatsOp::create(b, loc, lseType, rowDot, iters[0], bIdx,
                                       head, row, seq.qEnd);
              Value dqAcc = StoreTileOp::create(
                  b, loc, dqAccType, zeroTile(b, loc, {blockM, headDim}),
                  iters[1], bIdx, row, head, seq.qEnd);
              return SmallVector<Value>{delta, dqAcc};
            }));
      });
  Value delta = pre[0];

  // Phase 2, per key tile: dK and dV over the visible query tiles of every
  // query head in the group; dQ += dS K into the accumulator.
  float exp2Scale = scale * static_cast<float>(M_LOG2E);
  FloatAttr scaleAttr = rewriter.getF32FloatAttr(scale);
  FloatAttr softcapAttr = rewriter.getF32FloatAttr(softcap);
  ValueRange main = forEachBatch(
      rewriter, loc, t, ValueRange{dkInit, dvInit, pre[1]},
      [&](OpBuilder &b, Location loc, const GradSequence &seq,
          ValueRange batchIters) {
        IndexMath m{b, loc};
        Value seqQ = seq.qLen, seqK = seq.kLen;
        // Row r's diagonal is column r + offset (sequence coordinates).
        Value offset = m.sub(seqK, seqQ);
        return llvm::to_vector(buildLoopNest(
            b, loc, {m.cst(numKVHeads), seq.numKBlocks}, batchIters,
            [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
              IndexMath m{b, loc};
              Value bIdx = seq.tensorBatch, kvHead = ivs[0];
              Value kStart = m.mul(ivs[1], m.cst(blockN));
              Value kRow = rowOf(m, seq.kBegin, kStart);
              Value kTile =
                  LoadTileOp::create(b, loc, tile(blockN, headDim, elt), t.key,
                                     bIdx, kRow, kvHead, seq.kEnd);
              Value vTile =
                  LoadTileOp::create(b, loc, tile(blockN, headDimV, elt),
                                     t.value, bIdx, kRow, kvHead, seq.kEnd);
              // The query rows that see some key of this block: those whose
              // window [r + offset - left, r + offset + right] meets it.
              Value kLast =
                  m.sub(m.min(m.add(kStart, m.cst(blockN)), seqK), m.cst(1));
              Value rowLo = m.cst(0), rowHi = seqQ;
              if (right >= 0)
                rowLo =
                    m.max(rowLo, m.sub(m.sub(kStart, offset), m.cst(right)));
              if (left >= 0)
                rowHi = m.min(rowHi,
                              m.add(m.sub(kLast, offset), m.cst(left + 1)));
              Value qbLo = m.floorDiv(rowLo, blockM);
              Value qbHi = m.max(qbLo, m.ceilDiv(rowHi, blockM));

              Value c1 = m.cst(1);
              auto groupLoop = scf::ForOp::create(
                  b, loc, m.cst(0), m.cst(groupSize), c1,
                  ValueRange{zeroTile(b, loc, {blockN, headDim}),
                             zeroTile(b, loc, {blockN, headDimV}), iters[2]},
                  [&](OpBuilder &b, Location loc, Value g,
                      ValueRange groupIters) {
                    IndexMath m{b, loc};
                    Value head = m.add(m.mul(kvHead, m.cst(groupSize)), g);
                    auto qLoop = scf::ForOp::create(
                        b, loc, qbLo, qbHi, m.cst(1), groupIters,
                        [&](OpBuilder &b, Location loc, Value qb,
                            ValueRange acc) {
                          IndexMath m{b, loc};
                          Value qStart = m.mul(qb, m.cst(blockM));
                          Value qRow = rowOf(m, seq.qBegin, qStart);
                          Value qLast = m.sub(
                              m.min(m.add(qStart, m.cst(blockM)), seqQ),
                              m.cst(1));
                          Value q = LoadTileOp::create(
                              b, loc, tile(blockM, headDim, elt), t.query,
                              bIdx, qRow, head, seq.qEnd);
                          Value dO = LoadTileOp::create(
                              b, loc, tile(blockM, headDimV, elt),
                              t.gradOutput, bIdx, qRow, head, seq.qEnd);
                          Value lse =
                              LoadStatsOp::create(b, loc, rowType, t.lse, bIdx,
                                                  head, qRow, seq.qEnd);
                          Value rowDelta =
                              LoadStatsOp::create(b, loc, rowType, delta, bIdx,
                                                  head, qRow, seq.qEnd);
                          Value dq = LoadTileOp::create(
                              b, loc, tile(blockM, headDim, f32), acc[2], bIdx,
                              qRow, head, seq.qEnd);

                          Value scores = QKOp::create(b, loc, sType, q, kTile);
                          if (softcap > 0)
                            scores = SoftcapOp::create(b, loc, sType, scores,
                                                       /*descale=*/Value(),
                                                       scaleAttr, softcapAttr);
                          Value needsMask =
                              m.blockNeedsMask(qStart, qLast, kStart, blockN,
                                               seqK, offset, left, right);
                          auto masked = scf::IfOp::create(
                              b, loc, needsMask,
                              [&](OpBuilder &b, Location loc) {
                                Value s = MaskOp::create(
                                    b, loc, sType, scores, qStart, kStart, seqQ,
                                    seqK, t.causal, t.window,
                                    /*packed_heads=*/IntegerAttr());
                                scf::YieldOp::create(b, loc, s);
                              },
                              [&](OpBuilder &b, Location loc) {
                                scf::YieldOp::create(b, loc, scores);
                              });
                          Value p = RecomputeProbsOp::create(
                              b, loc, sType, masked.getResult(0), lse,
                              b.getF32FloatAttr(exp2Scale));
                          // With dropout, Z (the forward's mask over
                          // 1 - p) scales P where it met V and dP where it
                          // comes back: dV += (P ∘ Z)ᵀ dO, dS = P ∘ (Z ∘ dP
                          // − Δ).
                          Value stream =
                              t.rng ? m.add(m.mul(bIdx, m.cst(numQHeads)), head)
                                    : Value();
                          auto drop = [&](Value x) -> Value {
                            if (!t.rng)
                              return x;
                            return DropoutOp::create(b, loc, sType, x, t.rng,
                                                     stream, qStart, kStart,
                                                     t.dropout);
                          };
                          Value dv = MmaTNOp::create(b, loc, acc[1].getType(),
                                                     drop(p), dO, acc[1]);
                          Value dp =
                              drop(QKOp::create(b, loc, sType, dO, vTile));
                          Value ds = SoftmaxGradOp::create(b, loc, sType, p, dp,
                                                           rowDelta);
                          if (softcap > 0)
                            ds = SoftcapGradOp::create(b, loc, sType, ds,
                                                       scores, scaleAttr,
                                                       softcapAttr);
                          Value dk = MmaTNOp::create(b, loc, acc[0].getType(),
                                                     ds, q, acc[0]);
                          dq = PVOp::create(b, loc, dq.getType(), ds, kTile, dq,
                                            /*probs_scale=*/FloatAttr());
                          Value dqAcc =
                              StoreTileOp::create(b, loc, dqAccType, dq, acc[2],
                                                  bIdx, qRow, head, seq.qEnd);
                          scf::YieldOp::create(b, loc,
                                               ValueRange{dk, dv, dqAcc});
                        });
                    scf::YieldOp::create(b, loc, qLoop.getResults());
                  });
              Value dkTile =
                  ScaleCastOp::create(b, loc, tile(blockN, headDim, elt),
                                      groupLoop.getResult(0), scaleAttr);
              Value dvTile = ScaleCastOp::create(
                  b, loc, tile(blockN, headDimV, elt), groupLoop.getResult(1),
                  b.getF32FloatAttr(1.0f));
              Value dk = StoreTileOp::create(b, loc, kType, dkTile, iters[0],
                                             bIdx, kRow, kvHead, seq.kEnd);
              Value dv = StoreTileOp::create(b, loc, vType, dvTile, iters[1],
                                             bIdx, kRow, kvHead, seq.kEnd);
              return SmallVector<Value>{dk, dv, groupLoop.getResult(2)};
            }));
      });

  // Phase 3, per query tile: dQ = scale · accumulator, in the storage type.
  Value dqAcc = main[2];
  ValueRange post = forEachBatch(
      rewriter, loc, t, ValueRange{dqInit},
      [&](OpBuilder &b, Location loc, const GradSequence &seq,
          ValueRange batchIters) {
        IndexMath m{b, loc};
        return llvm::to_vector(buildLoopNest(
            b, loc, {m.cst(numQHeads), seq.numQBlocks}, batchIters,
            [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
              IndexMath m{b, loc};
              Value bIdx = seq.tensorBatch, head = ivs[0];
              Value row = rowOf(m, seq.qBegin, m.mul(ivs[1], m.cst(blockM)));
              Value acc =
                  LoadTileOp::create(b, loc, tile(blockM, headDim, f32), dqAcc,
                                     bIdx, row, head, seq.qEnd);
              Value dq = ScaleCastOp::create(
                  b, loc, tile(blockM, headDim, elt), acc, scaleAttr);
              return SmallVector<Value>{StoreTileOp::create(
                  b, loc, qType, dq, iters[0], bIdx, row, head, seq.qEnd)};
            }));
      });
  return {post[0], main[0], main[1]};
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
                                           RewriterBase &rewriter) {
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
  rewriter.replaceOp(op, tileGrad(t, rewriter, loc));
  return success();
}

LogicalResult mlir::fa3::tileAttentionVarlenGrad(AttentionVarlenGradOp op,
                                                 RewriterBase &rewriter) {
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
  SmallVector<Value> grads = tileGrad(t, rewriter, loc);
  SmallVector<Value> results;
  for (auto [grad, type] : llvm::zip_equal(grads, op->getResultTypes()))
    results.push_back(
        fa3::detail::unpack(rewriter, loc, grad, cast<RankedTensorType>(type)));
  rewriter.replaceOp(op, results);
  return success();
}
