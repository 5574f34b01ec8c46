//===- FA3Attrs.h - fa3 attribute declarations -------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3ATTRS_H
#define FA3_DIALECT_FA3_IR_FA3ATTRS_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/DeviceMappingInterface.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#define GET_ATTRDEF_CLASSES
#include "fa3/Dialect/FA3/IR/FA3Attrs.h.inc"

#endif // FA3_DIALECT_FA3_IR_FA3ATTRS_H
