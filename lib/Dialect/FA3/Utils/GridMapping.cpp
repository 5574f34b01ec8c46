//===- GridMapping.cpp - The tile-level grid forall -----------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Utils/GridMapping.h"

#include "fa3/Dialect/FA3/IR/FA3Attrs.h"

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

bool mlir::fa3::isPersistentGrid(scf::ForallOp forall) {
  std::optional<ArrayAttr> mapping = forall.getMapping();
  return forall.getRank() == 3 && mapping && mapping->size() == 3 &&
         llvm::all_of(*mapping, [](Attribute a) {
           auto block = dyn_cast<PersistentBlockMappingAttr>(a);
           return block && block.getBlock() <= gpu::MappingId::DimZ;
         });
}

int64_t mlir::fa3::gridDimensionOf(Attribute mapping) {
  if (auto block = dyn_cast<gpu::GPUBlockMappingAttr>(mapping))
    return static_cast<int64_t>(block.getBlock());
  return static_cast<int64_t>(
      cast<PersistentBlockMappingAttr>(mapping).getBlock());
}
