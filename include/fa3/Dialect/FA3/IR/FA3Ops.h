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
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "fa3/Dialect/FA3/IR/FA3.h.inc"

#endif // FA3_DIALECT_FA3_IR_FA3OPS_H
