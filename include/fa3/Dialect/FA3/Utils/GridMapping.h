//===- GridMapping.h - The tile-level grid forall -------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The grid form fa3-tile{grid=true} makes, which fa3-order-grid rewrites and
// convert-fa3-tile-to-hopper lowers: a 3-D scf.forall mapped to
// #gpu.block<x/y/z>, or (after fa3-persistent-grid) to
// #fa3.persistent_block<x/y/z>.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_UTILS_GRIDMAPPING_H
#define FA3_DIALECT_FA3_UTILS_GRIDMAPPING_H

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::fa3 {

/// Whether `forall` is 3-D with each dimension mapped to one of
/// #gpu.block<x>, <y>, <z>.
bool isBlockGrid(scf::ForallOp forall);

/// Whether `forall` is 3-D with each dimension mapped to one of
/// #fa3.persistent_block<x>, <y>, <z>.
bool isPersistentGrid(scf::ForallOp forall);

/// The grid dimension (0 for x, 1 for y, 2 for z) that `mapping`, a
/// #gpu.block or #fa3.persistent_block of x, y or z, names.
int64_t gridDimensionOf(Attribute mapping);

} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_UTILS_GRIDMAPPING_H
