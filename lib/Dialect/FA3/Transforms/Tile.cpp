//===- Tile.cpp - Split fa3.attention into query tiles -----------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "TileGrad.h"

#include "fa3/Dialect/FA3/Utils/E4M3.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"

#include <limits>

#define DEBUG_TYPE "fa3-tile"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3TILE
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// Builds the loops over (batch, query head, query block) and replaces `op`
/// with their results.
/// `probsScale`, when set, asks the fa3.pv steps to round P to e4m3 after
/// multiplying by it (the CPU reference of an FP8 attention).
/// With `grid`, the three loops are one scf.forall mapped to GPU blocks
/// (query block -> x, head -> y, batch -> z).
static LogicalResult tileAttention(AttentionOp op, RewriterBase &rewriter,
                                   FloatAttr probsScale = {},
                                   bool grid = false) {
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

  // One query tile: its load, its attention block and where its results go.
  auto buildTile = [&](OpBuilder &b, Location loc, Value bIdx, Value head,
                       Value qBlock) {
    Value kvHead = arith::DivUIOp::create(
        b, loc, head, arith::ConstantIndexOp::create(b, loc, groupSize));
    Value qStart = arith::MulIOp::create(
        b, loc, qBlock, arith::ConstantIndexOp::create(b, loc, blockM));
    Value qTile = LoadTileOp::create(b, loc, qTileType, op.getQuery(), bIdx,
                                     qStart, head);
    auto block = AttentionBlockOp::create(
        b, loc, oTileType, lseTileType, qTile, op.getKey(), op.getValue(), bIdx,
        kvHead, qStart, seqQ, causal, scale, op.getWindowAttr(), softcap,
        schedule, probsScale);
    return std::make_tuple(block, qStart);
  };

  if (grid) {
    MLIRContext *ctx = rewriter.getContext();
    auto mapping = rewriter.getArrayAttr(
        {gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimX),
         gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimY),
         gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimZ)});
    SmallVector<OpFoldResult> bounds = {
        numQBlocks, rewriter.getIndexAttr(numQHeads), batch};
    auto forall = scf::ForallOp::create(rewriter, loc, bounds,
                                        ValueRange{outInit, lseInit}, mapping);
    {
      OpBuilder::InsertionGuard guard(rewriter);
      scf::InParallelOp inParallel = forall.getTerminator();
      rewriter.setInsertionPoint(inParallel);
      ValueRange ivs = forall.getInductionVars();
      Value qBlock = ivs[0], head = ivs[1], bIdx = ivs[2];
      auto [block, qStart] = buildTile(rewriter, loc, bIdx, head, qBlock);
      rewriter.setInsertionPointToStart(inParallel.getBody());
      ValueRange shared = forall.getRegionIterArgs();
      ParallelStoreTileOp::create(rewriter, loc, block.getOutput(), shared[0],
                                  bIdx, qStart, head);
      ParallelStoreStatsOp::create(rewriter, loc, block.getLse(), shared[1],
                                   bIdx, head, qStart);
    }
    rewriter.replaceOp(op, forall.getResults());
    return success();
  }

  auto batchLoop = scf::ForOp::create(
      rewriter, loc, c0, batch, c1, ValueRange{outInit, lseInit},
      [&](OpBuilder &b, Location loc, Value bIdx, ValueRange batchIters) {
        auto headLoop = scf::ForOp::create(
            b, loc, c0, cst(numQHeads), c1, batchIters,
            [&](OpBuilder &b, Location loc, Value head, ValueRange headIters) {
              auto blockLoop = scf::ForOp::create(
                  b, loc, c0, numQBlocks, c1, headIters,
                  [&](OpBuilder &b, Location loc, Value qBlock,
                      ValueRange iters) {
                    auto [block, qStart] =
                        buildTile(b, loc, bIdx, head, qBlock);
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

/// The CPU form of an FP8 attention: Q, K and V dequantized to f32 with
/// their descales (one per batch and key/value head), the f32 attention of
/// those, and the output rounded to bf16. Returns the f32 attention for
/// fa3-tile to tile; the caller asks its fa3.pv steps to round P to e4m3 as
/// the Hopper kernel does.
static AttentionOp dequantizeFP8(AttentionOp op, RewriterBase &rewriter) {
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  MLIRContext *ctx = rewriter.getContext();
  Type f32 = rewriter.getF32Type();
  auto qType = cast<RankedTensorType>(op.getQuery().getType());
  int64_t group =
      qType.getDimSize(2) /
      cast<RankedTensorType>(op.getKey().getType()).getDimSize(2);
  auto dequantize = [&](Value x, Value descale, int64_t headsPerDescale) {
    auto type = cast<RankedTensorType>(x.getType());
    SmallVector<Value> dynamic;
    for (int64_t i = 0; i < type.getRank(); ++i)
      if (type.isDynamicDim(i))
        dynamic.push_back(tensor::DimOp::create(rewriter, loc, x, i));
    auto outType = RankedTensorType::get(type.getShape(), f32);
    Value init = tensor::EmptyOp::create(rewriter, loc, type.getShape(), f32,
                                         dynamic);
    AffineExpr b = getAffineDimExpr(0, ctx), h = getAffineDimExpr(2, ctx);
    auto identity = AffineMap::getMultiDimIdentityMap(4, ctx);
    auto perHead = AffineMap::get(4, 0, {b, h.floorDiv(headsPerDescale)}, ctx);
    SmallVector<utils::IteratorType> parallel(4, utils::IteratorType::parallel);
    return linalg::GenericOp::create(
               rewriter, loc, outType, ValueRange{x, descale}, init,
               ArrayRef<AffineMap>{identity, perHead, identity}, parallel,
               [&](OpBuilder &b, Location loc, ValueRange args) {
                 Value v = decodeE4M3(b, loc, args[0]);
                 linalg::YieldOp::create(
                     b, loc,
                     ValueRange{arith::MulFOp::create(b, loc, v, args[1])});
               })
        .getResult(0);
  };
  Value q = dequantize(op.getQuery(), op.getDescales()[0], group);
  Value k = dequantize(op.getKey(), op.getDescales()[1], 1);
  Value v = dequantize(op.getValue(), op.getDescales()[2], 1);

  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  auto outF32 = RankedTensorType::get(outType.getShape(), f32);
  auto attention = AttentionOp::create(
      rewriter, loc, outF32, op.getLse().getType(), q, k, v, ValueRange{},
      op.getCausalAttr(), rewriter.getF32FloatAttr(op.getEffectiveScale()),
      op.getWindowAttr(), op.getSoftcapAttr(), op.getScheduleAttr(),
      /*fp8=*/FP8Attr());
  // The bf16 output.
  SmallVector<Value> dynamic;
  for (int64_t i = 0; i < outType.getRank(); ++i)
    if (outType.isDynamicDim(i))
      dynamic.push_back(
          tensor::DimOp::create(rewriter, loc, attention.getOutput(), i));
  Value init = tensor::EmptyOp::create(rewriter, loc, outType.getShape(),
                                       outType.getElementType(), dynamic);
  auto identity = AffineMap::getMultiDimIdentityMap(4, ctx);
  Value out =
      linalg::GenericOp::create(
          rewriter, loc, outType, ValueRange{attention.getOutput()}, init,
          ArrayRef<AffineMap>{identity, identity},
          SmallVector<utils::IteratorType>(4, utils::IteratorType::parallel),
          [&](OpBuilder &b, Location loc, ValueRange args) {
            linalg::YieldOp::create(
                b, loc,
                ValueRange{arith::TruncFOp::create(
                    b, loc, outType.getElementType(), args[0])});
          })
          .getResult(0);
  rewriter.replaceOp(op, ValueRange{out, attention.getLse()});
  return attention;
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
      FloatAttr probsScale;
      if (op.isFP8()) {
        op = dequantizeFP8(op, rewriter);
        probsScale = rewriter.getF32FloatAttr(kFP8ProbsScale);
      }
      // The FP8 reference stays serial: no Hopper kernel reads its tiles.
      if (failed(tileAttention(op, rewriter, probsScale, grid && !probsScale)))
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
