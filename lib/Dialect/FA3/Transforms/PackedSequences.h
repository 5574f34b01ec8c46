//===- PackedSequences.h - Packed variable-length batches at the tile level -*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// What the forward (Tile.cpp) and backward (TileGrad.cpp) tilings of
// fa3.attention_varlen[_grad] share: the packed [T, ...] tensors viewed as
// one batch entry [1, T, ...] and back, and one sequence's rows read from
// its i32 offsets.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_DIALECT_FA3_TRANSFORMS_PACKEDSEQUENCES_H
#define FA3_LIB_DIALECT_FA3_TRANSFORMS_PACKEDSEQUENCES_H

#include "IndexMath.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::fa3::detail {

/// `packed` ([T, ...] or [H, T]) as [1, T, ...] / [1, H, T]: a batch of one.
inline Value asBatchOfOne(OpBuilder &b, Location loc, Value packed) {
  auto type = cast<RankedTensorType>(packed.getType());
  SmallVector<int64_t> shape = {1};
  llvm::append_range(shape, type.getShape());
  SmallVector<ReassociationIndices> groups = {{0, 1}};
  for (int64_t i = 2; i <= type.getRank(); ++i)
    groups.push_back({i});
  return tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), packed,
      groups);
}

/// The inverse of asBatchOfOne: `batchOfOne` collapsed to `packedType`.
inline Value unpack(OpBuilder &b, Location loc, Value batchOfOne,
                    RankedTensorType packedType) {
  SmallVector<ReassociationIndices> groups = {{0, 1}};
  for (int64_t i = 2; i <= packedType.getRank(); ++i)
    groups.push_back({i});
  return tensor::CollapseShapeOp::create(b, loc, packedType, batchOfOne,
                                         groups);
}

/// An i32 entry of a 1-D or 2-D index tensor (offsets, lengths, page
/// tables) as a non-negative index: a negative entry reads as 0.
inline Value indexAt(OpBuilder &b, Location loc, Value tensor,
                     ValueRange indices) {
  Value v = tensor::ExtractOp::create(b, loc, tensor, indices);
  Value i = arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
  return arith::MaxSIOp::create(b, loc, i,
                                arith::ConstantIndexOp::create(b, loc, 0));
}

/// The rows `[begin, end)` of sequence `entry` of a packed batch with
/// offsets `cu` (i32 [B + 1]); an end before its begin reads as empty.
struct SequenceRows {
  Value begin, end, length;
};
inline SequenceRows sequenceRows(OpBuilder &b, Location loc, Value cu,
                                 Value entry) {
  IndexMath m{b, loc};
  SequenceRows rows;
  rows.begin = indexAt(b, loc, cu, entry);
  rows.end = m.max(indexAt(b, loc, cu, m.add(entry, m.cst(1))), rows.begin);
  rows.length = m.sub(rows.end, rows.begin);
  return rows;
}

} // namespace mlir::fa3::detail

#endif // FA3_LIB_DIALECT_FA3_TRANSFORMS_PACKEDSEQUENCES_H
