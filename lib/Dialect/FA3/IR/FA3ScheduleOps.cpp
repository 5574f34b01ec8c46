//===- FA3ScheduleOps.cpp - fa3 schedule structure ops --------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

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
