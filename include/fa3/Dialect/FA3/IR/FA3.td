//===- FA3.td - fa3 dialect umbrella -----------------------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3_TD
#define FA3_DIALECT_FA3_IR_FA3_TD

include "fa3/Dialect/FA3/IR/FA3Dialect.td"
include "fa3/Dialect/FA3/IR/FA3Attrs.td"
include "fa3/Dialect/FA3/IR/FA3Ops.td"
include "fa3/Dialect/FA3/IR/FA3TileOps.td"
include "fa3/Dialect/FA3/IR/FA3KernelOps.td"
include "fa3/Dialect/FA3/IR/FA3ScheduleOps.td"

#endif // FA3_DIALECT_FA3_IR_FA3_TD
