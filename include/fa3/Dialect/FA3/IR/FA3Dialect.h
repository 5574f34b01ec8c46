//===- FA3Dialect.h - fa3 dialect declaration --------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3DIALECT_H
#define FA3_DIALECT_FA3_IR_FA3DIALECT_H

#include "mlir/IR/Dialect.h"

#include "fa3/Dialect/FA3/IR/FA3Dialect.h.inc"

#endif // FA3_DIALECT_FA3_IR_FA3DIALECT_H
