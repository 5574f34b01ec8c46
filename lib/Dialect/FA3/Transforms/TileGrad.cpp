//===- TileGrad.cpp - Tile fa3.attention_grad ---------------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// FlashAttention-2's backward at the tile level. Every key block owns its dK
// and dV accumulators and walks the query blocks that can see it (over every
// query head of its GQA group, so dK/dV are summed without atomics); dQ
// accumulates in an f32 tensor across key blocks. Memory beyond the inputs
// and outputs is O(N): Δ [B, Hq, Sq] and the dQ accumulator [B, Sq, Hq, D].
//
//===----------------------------------------------------------------------===//

#include "TileGrad.h"
#include "IndexMath.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <cmath>

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

LogicalResult mlir::fa3::tileAttentionGrad(AttentionGradOp op,
                                           RewriterBase &rewriter) {
  ScheduleAttr schedule = op.getScheduleAttr();
  if (!schedule)
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule first";

  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  IndexMath m{rewriter, loc};
  auto qType = cast<RankedTensorType>(op.getQuery().getType());
  auto kType = cast<RankedTensorType>(op.getKey().getType());
  auto vType = cast<RankedTensorType>(op.getValue().getType());
  auto lseType = cast<RankedTensorType>(op.getLse().getType());
  int64_t numQHeads = qType.getDimSize(2), numKVHeads = kType.getDimSize(2);
  int64_t groupSize = numQHeads / numKVHeads;
  int64_t headDim = qType.getDimSize(3), headDimV = vType.getDimSize(3);
  int64_t blockM = schedule.getBlockM(), blockN = schedule.getBlockN();
  float scale = op.getEffectiveScale();
  float softcap = op.getEffectiveSoftcap();
  auto [left, right] = op.getWindowBounds();
  Type f32 = rewriter.getF32Type();
  Type elt = qType.getElementType();

  Value batch = tensor::DimOp::create(rewriter, loc, op.getQuery(), 0);
  Value seqQ = tensor::DimOp::create(rewriter, loc, op.getQuery(), 1);
  Value seqK = tensor::DimOp::create(rewriter, loc, op.getKey(), 1);
  Value numQBlocks = m.ceilDiv(seqQ, blockM);
  Value numKBlocks = m.ceilDiv(seqK, blockN);

  auto tile = [&](int64_t rows, int64_t cols, Type t) {
    return RankedTensorType::get({rows, cols}, t);
  };
  auto rowType = RankedTensorType::get({blockM}, f32);
  auto sType = tile(blockM, blockN, f32);
  Value dqInit = emptyTensor(rewriter, loc, qType,
                             {batch, seqQ, m.cst(numQHeads), m.cst(headDim)});
  Value dkInit = emptyTensor(rewriter, loc, kType,
                             {batch, seqK, m.cst(numKVHeads), m.cst(headDim)});
  Value dvInit = emptyTensor(rewriter, loc, vType,
                             {batch, seqK, m.cst(numKVHeads), m.cst(headDimV)});
  // The f32 workspace: Δ per query row and the dQ accumulator.
  Value deltaInit =
      emptyTensor(rewriter, loc, lseType, {batch, m.cst(numQHeads), seqQ});
  auto dqAccType = RankedTensorType::get(qType.getShape(), f32);
  Value dqAccInit = emptyTensor(rewriter, loc, dqAccType,
                                {batch, seqQ, m.cst(numQHeads), m.cst(headDim)});

  // Phase 1, per query tile: Δ = rowsum(dO ∘ O) (− dLSE) and a zeroed dQ
  // accumulator.
  ValueRange pre = buildLoopNest(
      rewriter, loc, {batch, m.cst(numQHeads), numQBlocks},
      ValueRange{deltaInit, dqAccInit},
      [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
        IndexMath m{b, loc};
        Value bIdx = ivs[0], head = ivs[1], qStart = m.mul(ivs[2], m.cst(blockM));
        auto oTileType = tile(blockM, headDimV, elt);
        Value dO = LoadTileOp::create(b, loc, oTileType, op.getGradOutput(),
                                      bIdx, qStart, head);
        Value o = LoadTileOp::create(b, loc, oTileType, op.getOutput(), bIdx,
                                     qStart, head);
        // Δ = rowsum(dO ∘ O), or Δ − dLSE when the LSE has a gradient.
        Value gradLse;
        if (op.getGradLse())
          gradLse = LoadStatsOp::create(b, loc, rowType, op.getGradLse(), bIdx,
                                        head, qStart);
        Value rowDot = RowDotOp::create(b, loc, rowType, dO, o, gradLse);
        Value delta = StoreStatsOp::create(b, loc, lseType, rowDot, iters[0],
                                           bIdx, head, qStart);
        Value dqAcc = StoreTileOp::create(
            b, loc, dqAccType, zeroTile(b, loc, {blockM, headDim}), iters[1],
            bIdx, qStart, head);
        return SmallVector<Value>{delta, dqAcc};
      });
  Value delta = pre[0];

  // Phase 2, per key tile: dK and dV over the visible query tiles of every
  // query head in the group; dQ += dS K into the accumulator.
  Value offset = m.sub(seqK, seqQ); // row r's diagonal is column r + offset
  float exp2Scale = scale * static_cast<float>(M_LOG2E);
  FloatAttr scaleAttr = rewriter.getF32FloatAttr(scale);
  FloatAttr softcapAttr = rewriter.getF32FloatAttr(softcap);
  UnitAttr causal = op.getCausal() ? rewriter.getUnitAttr() : UnitAttr();
  ValueRange main = buildLoopNest(
      rewriter, loc, {batch, m.cst(numKVHeads), numKBlocks},
      ValueRange{dkInit, dvInit, pre[1]},
      [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
        IndexMath m{b, loc};
        Value bIdx = ivs[0], kvHead = ivs[1];
        Value kStart = m.mul(ivs[2], m.cst(blockN));
        Value kTile = LoadTileOp::create(b, loc, tile(blockN, headDim, elt),
                                         op.getKey(), bIdx, kStart, kvHead);
        Value vTile = LoadTileOp::create(b, loc, tile(blockN, headDimV, elt),
                                         op.getValue(), bIdx, kStart, kvHead);
        // The query rows that see some key of this block: those whose
        // window [r + offset - left, r + offset + right] meets it.
        Value kLast = m.sub(m.min(m.add(kStart, m.cst(blockN)), seqK), m.cst(1));
        Value rowLo = m.cst(0), rowHi = seqQ;
        if (right >= 0)
          rowLo = m.max(rowLo, m.sub(m.sub(kStart, offset), m.cst(right)));
        if (left >= 0)
          rowHi = m.min(rowHi, m.add(m.sub(kLast, offset), m.cst(left + 1)));
        Value qbLo = m.floorDiv(rowLo, blockM);
        Value qbHi = m.max(qbLo, m.ceilDiv(rowHi, blockM));

        Value c1 = m.cst(1);
        auto groupLoop = scf::ForOp::create(
            b, loc, m.cst(0), m.cst(groupSize), c1,
            ValueRange{zeroTile(b, loc, {blockN, headDim}),
                       zeroTile(b, loc, {blockN, headDimV}), iters[2]},
            [&](OpBuilder &b, Location loc, Value g, ValueRange groupIters) {
              IndexMath m{b, loc};
              Value head = m.add(m.mul(kvHead, m.cst(groupSize)), g);
              auto qLoop = scf::ForOp::create(
                  b, loc, qbLo, qbHi, m.cst(1), groupIters,
                  [&](OpBuilder &b, Location loc, Value qb, ValueRange acc) {
                    IndexMath m{b, loc};
                    Value qStart = m.mul(qb, m.cst(blockM));
                    Value qLast = m.sub(
                        m.min(m.add(qStart, m.cst(blockM)), seqQ), m.cst(1));
                    Value q = LoadTileOp::create(
                        b, loc, tile(blockM, headDim, elt), op.getQuery(), bIdx,
                        qStart, head);
                    Value dO = LoadTileOp::create(
                        b, loc, tile(blockM, headDimV, elt),
                        op.getGradOutput(), bIdx, qStart, head);
                    Value lse = LoadStatsOp::create(b, loc, rowType, op.getLse(),
                                                    bIdx, head, qStart);
                    Value rowDelta = LoadStatsOp::create(b, loc, rowType, delta,
                                                         bIdx, head, qStart);
                    Value dq = LoadTileOp::create(
                        b, loc, tile(blockM, headDim, f32), acc[2], bIdx,
                        qStart, head);

                    Value scores = QKOp::create(b, loc, sType, q, kTile);
                    if (softcap > 0)
                      scores = SoftcapOp::create(b, loc, sType, scores,
                                                 scaleAttr, softcapAttr);
                    Value needsMask = m.blockNeedsMask(
                        qStart, qLast, kStart, blockN, seqK, offset, left, right);
                    auto masked = scf::IfOp::create(
                        b, loc, needsMask,
                        [&](OpBuilder &b, Location loc) {
                          Value s = MaskOp::create(b, loc, sType, scores, qStart,
                                                   kStart, seqQ, seqK, causal,
                                                   op.getWindowAttr());
                          scf::YieldOp::create(b, loc, s);
                        },
                        [&](OpBuilder &b, Location loc) {
                          scf::YieldOp::create(b, loc, scores);
                        });
                    Value p = RecomputeProbsOp::create(
                        b, loc, sType, masked.getResult(0), lse,
                        b.getF32FloatAttr(exp2Scale));
                    Value dv = MmaTNOp::create(b, loc, acc[1].getType(), p, dO,
                                               acc[1]);
                    Value dp = QKOp::create(b, loc, sType, dO, vTile);
                    Value ds =
                        SoftmaxGradOp::create(b, loc, sType, p, dp, rowDelta);
                    if (softcap > 0)
                      ds = SoftcapGradOp::create(b, loc, sType, ds, scores,
                                                 scaleAttr, softcapAttr);
                    Value dk = MmaTNOp::create(b, loc, acc[0].getType(), ds, q,
                                               acc[0]);
                    dq = PVOp::create(b, loc, dq.getType(), ds, kTile, dq,
                                      /*probs_scale=*/FloatAttr());
                    Value dqAcc = StoreTileOp::create(b, loc, dqAccType, dq,
                                                      acc[2], bIdx, qStart, head);
                    scf::YieldOp::create(b, loc, ValueRange{dk, dv, dqAcc});
                  });
              scf::YieldOp::create(b, loc, qLoop.getResults());
            });
        Value dkTile = ScaleCastOp::create(b, loc, tile(blockN, headDim, elt),
                                           groupLoop.getResult(0), scaleAttr);
        Value dvTile =
            ScaleCastOp::create(b, loc, tile(blockN, headDimV, elt),
                                groupLoop.getResult(1), b.getF32FloatAttr(1.0f));
        Value dk = StoreTileOp::create(b, loc, kType, dkTile, iters[0], bIdx,
                                       kStart, kvHead);
        Value dv = StoreTileOp::create(b, loc, vType, dvTile, iters[1], bIdx,
                                       kStart, kvHead);
        return SmallVector<Value>{dk, dv, groupLoop.getResult(2)};
      });

  // Phase 3, per query tile: dQ = scale · accumulator, in the storage type.
  Value dqAcc = main[2];
  ValueRange post = buildLoopNest(
      rewriter, loc, {batch, m.cst(numQHeads), numQBlocks}, ValueRange{dqInit},
      [&](OpBuilder &b, Location loc, ValueRange ivs, ValueRange iters) {
        IndexMath m{b, loc};
        Value bIdx = ivs[0], head = ivs[1], qStart = m.mul(ivs[2], m.cst(blockM));
        Value acc = LoadTileOp::create(b, loc, tile(blockM, headDim, f32),
                                       dqAcc, bIdx, qStart, head);
        Value dq = ScaleCastOp::create(b, loc, tile(blockM, headDim, elt), acc,
                                       scaleAttr);
        return SmallVector<Value>{StoreTileOp::create(b, loc, qType, dq,
                                                      iters[0], bIdx, qStart,
                                                      head)};
      });
  rewriter.replaceOp(op, ValueRange{post[0], main[0], main[1]});
  return success();
}
