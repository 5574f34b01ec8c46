//===- FA3ScheduleOps.cpp - fa3 schedule structure ops --------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::fa3;

LogicalResult MmaTurnOp::verify() {
  Block &body = getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError() << "yields " << yield.getValues().getTypes()
                         << " but returns " << getResultTypes();
  bool hasMma = false;
  for (Operation &op : body.without_terminator()) {
    if (isa<QKOp, PVOp>(op)) {
      hasMma = true;
      continue;
    }
    // The tiles an MMA of the turn reads, and their coordinates.
    if (isa<LoadTileOp, LoadPagedTileOp>(op) ||
        isa<arith::ArithDialect>(op.getDialect()))
      continue;
    return op.emitOpError()
           << "is not an MMA, a tile load or index arithmetic; a pingpong "
              "turn holds only those";
  }
  if (!hasMma)
    return emitOpError() << "holds no fa3.qk or fa3.pv";
  return success();
}

LogicalResult WarpSpecializeOp::verify() {
  auto producerYield = cast<YieldOp>(getProducer().front().getTerminator());
  if (!producerYield.getValues().empty())
    return emitOpError() << "the producer region returns nothing; it yields "
                         << producerYield.getValues().size() << " values";
  auto consumerYield = cast<YieldOp>(getConsumers().front().getTerminator());
  if (consumerYield.getValues().getTypes() != getResultTypes())
    return emitOpError() << "the consumers yield "
                         << consumerYield.getValues().getTypes()
                         << " but the op returns " << getResultTypes();
  int64_t producerRegs = getProducerRegsAttr().getInt(),
          consumerRegs = getConsumerRegsAttr().getInt();
  if (producerRegs <= 0 || consumerRegs <= 0)
    return emitOpError() << "needs positive producer_regs and consumer_regs, "
                            "got "
                         << producerRegs << " and " << consumerRegs;
  WalkResult result = getProducer().walk([&](Operation *op) {
    if (isa<RingFillOp, YieldOp, scf::ForOp, scf::IfOp, scf::YieldOp>(op) ||
        isa<arith::ArithDialect>(op->getDialect()) || isa<tensor::DimOp>(op))
      return WalkResult::advance();
    op->emitOpError() << "is not a ring fill, a loop, a branch or index "
                         "arithmetic; the producer region holds only those";
    return WalkResult::interrupt();
  });
  return failure(result.wasInterrupted());
}

LogicalResult RingFillOp::verify() {
  auto ws = (*this)->getParentOfType<WarpSpecializeOp>();
  if (!ws || !ws.getProducer().isAncestor((*this)->getParentRegion()))
    return emitOpError() << "must be in the producer region of an "
                            "fa3.warp_specialize";
  auto tile = dyn_cast<RankedTensorType>(getTile());
  auto source = cast<RankedTensorType>(getSource().getType());
  if (source.getRank() == 3) {
    // Statistics [B, H, S]: a [rows] f32 tile.
    if (!tile || tile.getRank() != 1 || !tile.hasStaticShape() ||
        !tile.getElementType().isF32() || !source.getElementType().isF32())
      return emitOpError() << "a statistics fill (source " << source
                           << ") takes a static [rows] f32 tile, got "
                           << getTile();
    if (getPageTable() || getPackedHeads())
      return emitOpError() << "a statistics fill has no page table and no "
                              "packed heads";
    return success();
  }
  if (!tile || tile.getRank() != 2 || !tile.hasStaticShape() ||
      tile.getElementType() != source.getElementType() ||
      tile.getDimSize(1) != source.getDimSize(3))
    return emitOpError() << "tile " << getTile()
                         << " must be a static [rows, " << source.getDimSize(3)
                         << "] tensor of " << source.getElementType();
  if (getPageTable() && !getUse())
    return emitOpError() << "a page table is for key and value fills, which "
                            "have a 'use'; the query tile is not paged";
  if (std::optional<uint64_t> packed = getPackedHeads()) {
    auto g = static_cast<int64_t>(*packed);
    if (getUse())
      return emitOpError() << "packed_heads is for the query tile's fill, "
                              "which has no 'use'";
    if (g < 1 || tile.getDimSize(0) % g != 0)
      return emitOpError() << "packed_heads must divide the tile's "
                           << tile.getDimSize(0) << " rows, got " << g;
  }
  return success();
}
