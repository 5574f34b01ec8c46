//===- IndexMath.h - Index arithmetic shared by the fa3 tilings -*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The visibility rules of the masks, as `index` arithmetic on run-time
// sequence lengths, used by the forward (fa3-fuse-softmax) and the backward
// (fa3-tile) tilings alike so that both skip and mask the same blocks; the
// grid renumbering of fa3-order-grid uses its builders too.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_DIALECT_FA3_TRANSFORMS_INDEXMATH_H
#define FA3_LIB_DIALECT_FA3_TRANSFORMS_INDEXMATH_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"

namespace mlir::fa3::detail {

/// Index arithmetic on signed values: the causal offset Sk - Sq and window
/// bounds can be negative.
struct IndexMath {
  OpBuilder &b;
  Location loc;

  Value cst(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value min(Value x, Value y) { return arith::MinSIOp::create(b, loc, x, y); }
  Value max(Value x, Value y) { return arith::MaxSIOp::create(b, loc, x, y); }
  Value floorDiv(Value x, int64_t y) {
    return arith::FloorDivSIOp::create(b, loc, x, cst(y));
  }
  Value ceilDiv(Value x, int64_t y) {
    return arith::CeilDivSIOp::create(b, loc, x, cst(y));
  }
  Value gt(Value x, Value y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, x, y);
  }
  Value lt(Value x, Value y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x, y);
  }
  Value orI(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  // Unsigned forms, for values known non-negative (grid ids and extents).
  Value minU(Value x, Value y) { return arith::MinUIOp::create(b, loc, x, y); }
  Value maxU(Value x, Value y) { return arith::MaxUIOp::create(b, loc, x, y); }
  Value divU(Value x, Value y) { return arith::DivUIOp::create(b, loc, x, y); }
  Value remU(Value x, Value y) { return arith::RemUIOp::create(b, loc, x, y); }

  /// Whether the block of query rows [qStart, qLast] and key columns
  /// [kStart, kStart + blockN) crosses the end of the keys, the diagonal
  /// (shifted by `right`) or the left window edge, i.e. needs fa3.mask.
  /// `offset` is Sk - Sq; `left`/`right` are the resolved window (-1: none).
  Value blockNeedsMask(Value qStart, Value qLast, Value kStart, int64_t blockN,
                       Value seqK, Value offset, int64_t left, int64_t right) {
    Value kEnd = add(kStart, cst(blockN));
    Value needsMask = gt(kEnd, seqK);
    if (right >= 0)
      needsMask = orI(needsMask, gt(sub(kEnd, cst(1)),
                                    add(add(qStart, offset), cst(right))));
    if (left >= 0)
      needsMask =
          orI(needsMask, lt(kStart, sub(add(qLast, offset), cst(left))));
    return needsMask;
  }
};

} // namespace mlir::fa3::detail

#endif // FA3_LIB_DIALECT_FA3_TRANSFORMS_INDEXMATH_H
