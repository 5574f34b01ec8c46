//===- GridMapping.cpp - The tile-level grid forall -----------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Utils/GridMapping.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;

bool mlir::fa3::isBlockGrid(scf::ForallOp forall) {
  std::optional<ArrayAttr> mapping = forall.getMapping();
  return forall.getRank() == 3 && mapping && mapping->size() == 3 &&
         llvm::all_of(*mapping, [](Attribute a) {
           auto block = dyn_cast<gpu::GPUBlockMappingAttr>(a);
           return block && block.getBlock() <= gpu::MappingId::DimZ;
         });
}
