//===- FuseSoftmax.cpp - Online softmax over key blocks ----------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "IndexMath.h"

#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <limits>

#define DEBUG_TYPE "fa3-fuse-softmax"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3FUSESOFTMAX
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

using mlir::fa3::detail::IndexMath;

static Value splat(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                   float value) {
  auto type = RankedTensorType::get(shape, b.getF32Type());
  return arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(type, b.getF32FloatAttr(value)));
}

static void fuseSoftmax(AttentionBlockOp op, RewriterBase &rewriter) {
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  IndexMath m{rewriter, loc};

  ScheduleAttr schedule = op.getSchedule();
  int64_t blockM = schedule.getBlockM(), blockN = schedule.getBlockN();
  auto kType = cast<RankedTensorType>(op.getKey().getType());
  auto vType = cast<RankedTensorType>(op.getValue().getType());
  int64_t headDimV = vType.getDimSize(3);
  float scale = op.getScale().convertToFloat();
  int64_t left, right;
  std::tie(left, right) = resolveWindow(op.getCausal(), op.getWindow());

  Value qStart = op.getQStart(), seqQ = op.getQLen();
  // The sequence's keys: rows [keyStart, keyStart + seqK) of the key tensor,
  // or positions [0, seqK) of a paged cache.
  Value keyStart = op.getKeyStart();
  Value seqK = op.getKeyLen()
                   ? op.getKeyLen()
                   : tensor::DimOp::create(rewriter, loc, op.getKey(), 1)
                         .getResult();
  Value keyEnd;
  if (op.getKeyLen() && !op.isPaged())
    keyEnd = keyStart ? m.add(keyStart, seqK) : seqK;
  // Query row r sees key columns [r + off - left, r + off + right].
  Value off = m.sub(seqK, seqQ);
  // The tile's queries: block_m of them, or with G packed heads per query
  // (PackGQA) ceildiv(block_m, G).
  int64_t packed = op.getPackedHeads().value_or(1);
  int64_t queriesPerTile = (blockM + packed - 1) / packed;
  Value qLast =
      m.sub(m.min(m.add(qStart, m.cst(queriesPerTile)), seqQ), m.cst(1));

  // Key range any row of the tile sees, widened to whole key blocks.
  Value kLo = m.cst(0), kHi = seqK;
  if (right >= 0)
    kHi = m.min(seqK, m.add(m.add(qLast, off), m.cst(right + 1)));
  if (left >= 0)
    kLo = m.max(m.cst(0), m.sub(m.add(qStart, off), m.cst(left)));
  Value blockLo = arith::FloorDivSIOp::create(rewriter, loc, kLo, m.cst(blockN));
  Value blockHi = arith::CeilDivSIOp::create(rewriter, loc, kHi, m.cst(blockN));
  // One split of a split-KV attention: its key blocks only. An empty
  // intersection runs no iteration (O = 0, LSE = -inf: weight 0 in the merge).
  if (op.getSplitBegin()) {
    blockLo = m.max(blockLo, op.getSplitBegin());
    blockHi = m.max(blockLo, m.min(blockHi, op.getSplitEnd()));
  }

  Value acc0 = splat(rewriter, loc, {blockM, headDimV}, 0.0f);
  Value max0 = splat(rewriter, loc, {blockM},
                     -std::numeric_limits<float>::infinity());
  Value sum0 = splat(rewriter, loc, {blockM}, 0.0f);

  auto kTileType = RankedTensorType::get({blockN, kType.getDimSize(3)},
                                         kType.getElementType());
  auto vTileType =
      RankedTensorType::get({blockN, headDimV}, vType.getElementType());
  auto sType = RankedTensorType::get({blockM, blockN}, rewriter.getF32Type());
  auto rowType = RankedTensorType::get({blockM}, rewriter.getF32Type());
  auto accType =
      RankedTensorType::get({blockM, headDimV}, rewriter.getF32Type());
  float exp2Scale = scale * static_cast<float>(M_LOG2E);

  auto loop = scf::ForOp::create(
      rewriter, loc, blockLo, blockHi, m.cst(1),
      ValueRange{acc0, max0, sum0},
      [&](OpBuilder &b, Location loc, Value kBlock, ValueRange iters) {
        IndexMath m{b, loc};
        Value kStart = m.mul(kBlock, m.cst(blockN));
        auto loadKeys = [&](RankedTensorType type, Value source) -> Value {
          if (op.isPaged())
            return LoadPagedTileOp::create(b, loc, type, source,
                                           op.getPageTable(), op.getBatch(),
                                           kStart, op.getKvHead(), seqK);
          Value row = keyStart ? m.add(keyStart, kStart) : kStart;
          return LoadTileOp::create(b, loc, type, source, op.getBatch(), row,
                                    op.getKvHead(), keyEnd);
        };
        Value kTile = loadKeys(kTileType, op.getKey());
        Value vTile = loadKeys(vTileType, op.getValue());
        Value scores =
            QKOp::create(b, loc, sType, op.getQueryTile(), kTile);
        if (auto softcap = op.getSoftcap())
          scores = SoftcapOp::create(b, loc, sType, scores, op.getQkDescale(),
                                     op.getScaleAttr(), op.getSoftcapAttr());

        // Only blocks that cross the end of the keys, the diagonal or a
        // window edge pay for the mask.
        Value needsMask = m.blockNeedsMask(qStart, qLast, kStart, blockN,
                                           seqK, off, left, right);
        auto masked = scf::IfOp::create(
            b, loc, needsMask,
            [&](OpBuilder &b, Location loc) {
              Value s = MaskOp::create(b, loc, sType, scores, qStart, kStart,
                                       seqQ, seqK, op.getCausalAttr(),
                                       op.getWindowAttr(),
                                       op.getPackedHeadsAttr());
              scf::YieldOp::create(b, loc, s);
            },
            [&](OpBuilder &b, Location loc) {
              scf::YieldOp::create(b, loc, scores);
            });

        // FP8: S is raw products of quantized values, scaled by
        // q_descale · k_descale in the softmax.
        auto softmax = OnlineSoftmaxOp::create(
            b, loc, sType, rowType, rowType, rowType, masked.getResult(0),
            iters[1], iters[2], op.getQkDescale(), b.getF32FloatAttr(exp2Scale),
            /*rescale_threshold=*/IntegerAttr());
        Value acc = RescaleOp::create(b, loc, accType, iters[0],
                                      softmax.getCorrection());
        // Dropout acts on what multiplies V only: the row sum (and with it
        // the LSE) is that of the undropped probabilities.
        Value probs = softmax.getProbs();
        if (op.getRng())
          probs = DropoutOp::create(b, loc, sType, probs, op.getRng(),
                                    op.getDropoutStream(), qStart, kStart,
                                    op.getDropoutAttr());
        acc = PVOp::create(b, loc, accType, probs, vTile, acc,
                           op.getProbsScaleAttr());
        Value newMax = softmax.getNewMax(), newSum = softmax.getNewSum();
        scf::YieldOp::create(b, loc, ValueRange{acc, newMax, newSum});
      });

  loop->setAttr(kKeyLoopScheduleAttrName, schedule);

  auto finalize = FinalizeOp::create(
      rewriter, loc, op.getOutput().getType(), op.getLse().getType(),
      loop.getResult(0), loop.getResult(1), loop.getResult(2),
      op.getQkDescale(), op.getVDescale(), op.getScaleAttr());
  rewriter.replaceOp(op, finalize.getResults());
}

SmallVector<std::pair<scf::ForOp, ScheduleAttr>>
mlir::fa3::getScheduledKeyLoops(Operation *root) {
  SmallVector<std::pair<scf::ForOp, ScheduleAttr>> loops;
  root->walk([&](scf::ForOp loop) {
    if (auto schedule =
            loop->getAttrOfType<ScheduleAttr>(kKeyLoopScheduleAttrName))
      loops.emplace_back(loop, schedule);
  });
  return loops;
}

namespace {
struct FA3FuseSoftmaxPass
    : public fa3::impl::FA3FuseSoftmaxBase<FA3FuseSoftmaxPass> {
  using Base::Base;

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<AttentionBlockOp> ops;
    getOperation()->walk([&](AttentionBlockOp op) { ops.push_back(op); });
    for (AttentionBlockOp op : ops)
      fuseSoftmax(op, rewriter);
  }
};
} // namespace
