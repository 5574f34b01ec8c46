//===- Tile.cpp - Split fa3.attention into query tiles -----------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "TileGrad.h"

#include "mlir/IR/PatternMatch.h"

#define DEBUG_TYPE "fa3-tile"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3TILE
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// Builds the loops over (batch, query head, query block) and replaces `op`
/// with their results.
static LogicalResult tileAttention(AttentionOp op, RewriterBase &rewriter) {
  ScheduleAttr schedule = op.getScheduleAttr();
  if (!schedule)
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule first";

  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  auto qType = cast<RankedTensorType>(op.getQuery().getType());
  auto kType = cast<RankedTensorType>(op.getKey().getType());
  auto vType = cast<RankedTensorType>(op.getValue().getType());
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  auto lseType = cast<RankedTensorType>(op.getLse().getType());
  int64_t numQHeads = qType.getDimSize(2);
  int64_t groupSize = numQHeads / kType.getDimSize(2);
  int64_t blockM = schedule.getBlockM();

  auto cst = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  Value c0 = cst(0), c1 = cst(1);
  Value batch = tensor::DimOp::create(rewriter, loc, op.getQuery(), 0);
  Value seqQ = tensor::DimOp::create(rewriter, loc, op.getQuery(), 1);
  Value numQBlocks =
      arith::CeilDivUIOp::create(rewriter, loc, seqQ, cst(blockM));

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

  auto qTileType = RankedTensorType::get({blockM, qType.getDimSize(3)},
                                         qType.getElementType());
  auto oTileType = RankedTensorType::get({blockM, vType.getDimSize(3)},
                                         vType.getElementType());
  auto lseTileType = RankedTensorType::get({blockM}, rewriter.getF32Type());
  FloatAttr scale = rewriter.getF32FloatAttr(op.getEffectiveScale());
  FloatAttr softcap =
      op.getEffectiveSoftcap() > 0 ? op.getSoftcapAttr() : FloatAttr();
  UnitAttr causal = op.getCausal() ? rewriter.getUnitAttr() : UnitAttr();

  auto batchLoop = scf::ForOp::create(
      rewriter, loc, c0, batch, c1, ValueRange{outInit, lseInit},
      [&](OpBuilder &b, Location loc, Value bIdx, ValueRange batchIters) {
        auto headLoop = scf::ForOp::create(
            b, loc, c0, cst(numQHeads), c1, batchIters,
            [&](OpBuilder &b, Location loc, Value head, ValueRange headIters) {
              Value kvHead = arith::DivUIOp::create(
                  b, loc, head, arith::ConstantIndexOp::create(b, loc, groupSize));
              auto blockLoop = scf::ForOp::create(
                  b, loc, c0, numQBlocks, c1, headIters,
                  [&](OpBuilder &b, Location loc, Value qBlock,
                      ValueRange iters) {
                    Value qStart = arith::MulIOp::create(
                        b, loc, qBlock,
                        arith::ConstantIndexOp::create(b, loc, blockM));
                    Value qTile = LoadTileOp::create(b, loc, qTileType,
                                                     op.getQuery(), bIdx,
                                                     qStart, head);
                    auto block = AttentionBlockOp::create(
                        b, loc, oTileType, lseTileType, qTile, op.getKey(),
                        op.getValue(), bIdx, kvHead, qStart, seqQ, causal,
                        scale, op.getWindowAttr(), softcap, schedule);
                    Value out = StoreTileOp::create(b, loc, outType,
                                                    block.getOutput(), iters[0],
                                                    bIdx, qStart, head);
                    Value lse = StoreStatsOp::create(b, loc, lseType,
                                                     block.getLse(), iters[1],
                                                     bIdx, head, qStart);
                    scf::YieldOp::create(b, loc, ValueRange{out, lse});
                  });
              scf::YieldOp::create(b, loc, blockLoop.getResults());
            });
        scf::YieldOp::create(b, loc, headLoop.getResults());
      });
  rewriter.replaceOp(op, batchLoop.getResults());
  return success();
}

namespace {
struct FA3TilePass : public fa3::impl::FA3TileBase<FA3TilePass> {
  using Base::Base;

  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<AttentionOp> ops;
    SmallVector<AttentionGradOp> gradOps;
    bool failedAny = false;
    getOperation()->walk([&](Operation *op) {
      if (auto attention = dyn_cast<AttentionOp>(op))
        ops.push_back(attention);
      else if (auto grad = dyn_cast<AttentionGradOp>(op))
        gradOps.push_back(grad);
    });
    for (AttentionOp op : ops) {
      if (op.isFP8()) {
        op.emitOpError() << "FP8 (f8E4M3FN) attention runs on Hopper only in "
                            "this version (convert-fa3-to-hopper); the CPU "
                            "pipeline has no e4m3 lowering yet";
        failedAny = true;
        continue;
      }
      if (failed(tileAttention(op, rewriter)))
        failedAny = true;
    }
    for (AttentionGradOp op : gradOps)
      if (failed(tileAttentionGrad(op, rewriter)))
        failedAny = true;
    if (failedAny)
      signalPassFailure();
  }
};
} // namespace
