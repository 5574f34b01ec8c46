//===- FA3Ops.h - fa3 operation declarations ---------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3OPS_H
#define FA3_DIALECT_FA3_IR_FA3OPS_H

#include "fa3/Dialect/FA3/IR/FA3Attrs.h"
#include "fa3/Dialect/FA3/IR/FA3Dialect.h"
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
} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_IR_FA3OPS_H
