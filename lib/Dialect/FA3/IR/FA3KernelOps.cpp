//===- FA3KernelOps.cpp - fa3 Hopper kernel-level operation verifiers -----===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The ops of FA3KernelOps.td: the instruction forms MLIR lacks (wgmma with
// a register A, named barriers) and the mbarrier rings of the kernel's
// shared-memory buffers.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Ops.h"

using namespace mlir;
using namespace mlir::fa3;

int64_t WgmmaOp::getK() {
  return isa<Float8E4M3FNType>(getElementType()) ? 32 : 16;
}

LogicalResult WgmmaOp::verify() {
  Type elt = getElementType();
  bool fp8 = isa<Float8E4M3FNType>(elt);
  if (!fp8 && !elt.isBF16() && !elt.isF16())
    return emitOpError() << "element_type must be bf16, f16 or f8E4M3FN, got "
                         << elt;
  int64_t n = getN();
  if (n < 8 || n > 256 || n % 8 != 0)
    return emitOpError() << "takes N / 2 accumulators for an N that is a "
                            "multiple of 8 in [8, 256], got "
                         << getAccumulators().size();
  if (getResults().size() != getAccumulators().size())
    return emitOpError() << "returns one result per accumulator, got "
                         << getResults().size() << " for "
                         << getAccumulators().size();
  bool registers = !getARegisters().empty();
  if (registers == static_cast<bool>(getADescriptor()))
    return emitOpError() << "takes A either as four registers or as a "
                            "shared-memory descriptor, not "
                         << (registers ? "both" : "neither");
  if (registers && getARegisters().size() != 4)
    return emitOpError() << "takes A as 4 registers, got "
                         << getARegisters().size();
  if (fp8 && (getTransA() || getTransB()))
    return emitOpError() << "e4m3 operands are K-major: no trans_a/trans_b";
  if (registers && getTransA())
    return emitOpError() << "a register A has no trans_a";
  if (registers && !fp8 && !getTransB())
    return emitOpError() << "with a register A, a 16-bit B is read MN-major: "
                            "trans_b must be set";
  return success();
}

LogicalResult NamedBarrierOp::verify() {
  int64_t threads = getThreads();
  if (threads <= 0 || threads % 32 != 0 || threads > 1024)
    return emitOpError() << "threads must be a multiple of 32 in [32, 1024], "
                            "got "
                         << threads;
  return success();
}

/// The ring ops' common check: a ring has at least one slot (use u takes slot
/// u mod stages).
static LogicalResult verifyRing(Operation *op, int64_t stages) {
  if (stages < 1)
    return op->emitOpError() << "a ring needs at least one slot: stages must "
                                "be positive, got "
                             << stages;
  return success();
}

LogicalResult RingWaitOp::verify() { return verifyRing(*this, getStages()); }
LogicalResult RingArriveOp::verify() { return verifyRing(*this, getStages()); }
LogicalResult RingBarrierOp::verify() { return verifyRing(*this, getStages()); }

/// The TMA tile ops' common checks: whole 128-byte atoms of 1- or 2-byte
/// elements (or, where `allow64ByteRows`, one 64-byte atom), and box rows
/// within TMA's 256.
static LogicalResult verifyTmaTile(Operation *op, int64_t rows, int64_t cols,
                                   int64_t elementBytes,
                                   std::optional<uint64_t> packedHeads,
                                   bool allow64ByteRows = false) {
  if (packedHeads) {
    auto g = static_cast<int64_t>(*packedHeads);
    if (g < 1 || g > 256 || rows % g != 0)
      return op->emitOpError()
             << "packed_heads must be in [1, 256] and divide the " << rows
             << " rows (a box of rows / packed_heads positions), got " << g;
  }
  if (elementBytes != 1 && elementBytes != 2)
    return op->emitOpError()
           << "element_bytes must be 1 (e4m3) or 2 (bf16/f16), got "
           << elementBytes;
  if (rows < 1 || rows > 256)
    return op->emitOpError()
           << "rows must be in [1, 256] (a TMA box dimension), got " << rows;
  int64_t atomCols = 128 / elementBytes;
  if (allow64ByteRows && cols * elementBytes == 64)
    return success();
  if (cols < 1 || cols % atomCols != 0)
    return op->emitOpError()
           << "cols must be a positive multiple of the " << atomCols
           << " columns of a 128-byte swizzle atom, got " << cols;
  return success();
}

LogicalResult TmaLoadTileOp::verify() {
  auto rows = static_cast<int64_t>(getRows());
  auto cols = static_cast<int64_t>(getCols());
  auto elementBytes = static_cast<int64_t>(getElementBytes());
  if (!getTransposed()) {
    if (getAtomRows())
      return emitOpError() << "atom_rows places the atoms of a transposed "
                              "tile; this tile is not transposed";
    return verifyTmaTile(*this, rows, cols, elementBytes, getPackedHeads(),
                         /*allow64ByteRows=*/true);
  }
  if (std::optional<uint64_t> atomRows = getAtomRows();
      atomRows && (static_cast<int64_t>(*atomRows) < cols || *atomRows % 8))
    return emitOpError() << "atom_rows must be a multiple of 8 of at least "
                            "cols = "
                         << cols << ", got " << *atomRows;
  // Transposed: boxes of 128 (or 64) bytes of positions by `cols` rows.
  if (getPackedHeads())
    return emitOpError() << "a transposed tile takes no packed_heads";
  if (elementBytes != 1 && elementBytes != 2)
    return emitOpError() << "element_bytes must be 1 (e4m3) or 2 (bf16/f16), "
                            "got "
                         << elementBytes;
  if (rows < 1 || rows > 256 || (rows * elementBytes) % 64 != 0 || cols < 1 ||
      cols > 256)
    return emitOpError() << "a transposed tile is whole 64-byte atoms of "
                         << 64 / elementBytes
                         << " positions (128-byte atoms where they pair up) "
                            "by at most 256 rows (TMA box dimensions), got "
                            "rows = "
                         << rows << ", cols = " << cols;
  return success();
}

LogicalResult TmaLoadPagedTileOp::verify() {
  return verifyTmaTile(*this, static_cast<int64_t>(getRows()),
                       static_cast<int64_t>(getCols()),
                       static_cast<int64_t>(getElementBytes()),
                       /*packedHeads=*/std::nullopt);
}

LogicalResult TmaStoreTileOp::verify() {
  int64_t rows = static_cast<int64_t>(getRows());
  if (failed(verifyTmaTile(*this, rows, static_cast<int64_t>(getCols()),
                           static_cast<int64_t>(getElementBytes()),
                           getPackedHeads())))
    return failure();
  int64_t stride = static_cast<int64_t>(getAtomStride());
  if (stride < rows * 128 || stride % 1024 != 0)
    return emitOpError() << "atom_stride must hold the atom's " << rows * 128
                         << " bytes and keep the swizzle's 1024-byte "
                            "alignment, got "
                         << stride;
  return success();
}
