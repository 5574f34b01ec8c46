//===- FA3Ops.h - fa3 operation declarations ---------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3OPS_H
#define FA3_DIALECT_FA3_IR_FA3OPS_H

#include "fa3/Dialect/FA3/IR/FA3Attrs.h"
#include "fa3/Dialect/FA3/IR/FA3Dialect.h"
#include "fa3/Dialect/FA3/Utils/ValueTransposeLayout.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/LLVMIR/LLVMTypes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/ParallelCombiningOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "fa3/Dialect/FA3/IR/FA3.h.inc"

namespace mlir::fa3 {
/// The (left, right) key window of a query row, relative to its diagonal,
/// from an op's `causal` and `window` attributes: -1 is unbounded, and
/// causal makes right = 0. Every lowering reads masks through this.
std::pair<int64_t, int64_t>
resolveWindow(bool causal, std::optional<ArrayRef<int64_t>> window);

/// Checks an attention's dropout: the probability `p` (absent: off) is in
/// [0, 1), and `rng` (the Philox seed and offset, an i64 tensor [2]) is
/// present exactly when `p` is.
LogicalResult verifyDropout(Operation *op, std::optional<float> p, Value rng);

/// What fa3.dropout compares and multiplies for probability `p`: an entry
/// is kept when its 16-bit Philox value is >= `threshold` (min(floor(p ·
/// 2^16), 2^16 - 1)) and then scaled by `scale` (1 / (1 - p) rounded to
/// f32). Every backend derives both from `p` through this.
struct DropoutConstants {
  uint32_t threshold;
  float scale;
  static DropoutConstants of(float p);
};

/// The load of a key or value tile in a key loop: fa3.load_tile, or
/// fa3.load_paged_tile with its page table (`row` then the position in the
/// sequence). The schedule passes and the Hopper lowering read K/V loads
/// through this, so a paged cache takes the same paths as a contiguous one.
struct KeyValueTileLoad {
  Operation *op = nullptr;
  Value source, pageTable, batch, row, head, result;
  /// The load that defines `tile`, or a null one.
  static KeyValueTileLoad of(Value tile);
  explicit operator bool() const { return op != nullptr; }
};
} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_IR_FA3OPS_H
