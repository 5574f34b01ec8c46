//===- PersistentGrid.cpp - Map a kernel's grid to persistent CTAs ---------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// FlashAttention-3's persistent tile scheduler on the tile level: a kernel
// whose schedule says `persistent` has its grid forall mapped to
// #fa3.persistent_block, which says that min(tiles, SMs) CTAs walk the
// tiles (the pass description in Passes.td says in which order).
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Attrs.h"
#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Dialect/FA3/Utils/GridMapping.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3PERSISTENTGRID
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// Maps `grid`, a #gpu.block grid, to #fa3.persistent_block of the same
/// dimensions. The producer warpgroup is what makes a persistent CTA pay (it
/// loads the next tile while the consumers finish this one), and the Hopper
/// kernel has no persistent form without one.
static LogicalResult makePersistent(scf::ForallOp grid, scf::ForOp keyLoop) {
  bool producer = false;
  grid.walk([&](WarpSpecializeOp) { producer = true; });
  if (!producer)
    return keyLoop.emitOpError()
           << "has persistent = true in its schedule but its grid has no "
              "fa3.warp_specialize: a persistent grid needs a producer "
              "warpgroup (producer_regs and consumer_regs set, then "
              "fa3-warp-specialize)";
  MLIRContext *ctx = grid.getContext();
  SmallVector<Attribute> mapping;
  ArrayAttr blocks = *grid.getMapping();
  for (Attribute dim : blocks)
    mapping.push_back(PersistentBlockMappingAttr::get(
        ctx, cast<gpu::GPUBlockMappingAttr>(dim).getBlock()));
  grid.setMappingAttr(ArrayAttr::get(ctx, mapping));
  return success();
}

namespace {
struct FA3PersistentGridPass
    : public fa3::impl::FA3PersistentGridBase<FA3PersistentGridPass> {
  using Base::Base;

  void runOnOperation() override {
    for (auto [loop, schedule] : getScheduledKeyLoops(getOperation())) {
      if (!schedule.getPersistent())
        continue;
      auto grid = loop->getParentOfType<scf::ForallOp>();
      if (!grid || isPersistentGrid(grid))
        continue;
      if (!isBlockGrid(grid)) {
        loop.emitOpError()
            << "has persistent = true in its schedule but is not inside a "
               "#gpu.block grid forall (fa3-tile{grid=true} makes one)";
        return signalPassFailure();
      }
      if (failed(makePersistent(grid, loop)))
        return signalPassFailure();
    }
  }
};
} // namespace
