//===- SerializeGrid.cpp - A tile-level grid as serial loops --------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The tile-level grid of fa3-tile{grid=true} as an scf.for nest, so that the
// CPU pipeline runs (and the CPU tests check) the tiling the Hopper kernels
// are built from. The pass description in Passes.td shows the form.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3SERIALIZEGRID
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// Whether `forall`'s contributions are all fa3's parallel stores.
static bool isTileGrid(scf::ForallOp forall) {
  return !forall.getOutputs().empty() &&
         llvm::all_of(forall.getTerminator().getYieldingOps(),
                      llvm::IsaPred<ParallelStoreTileOp, ParallelStoreStatsOp>);
}

static void serialize(scf::ForallOp forall, RewriterBase &rewriter) {
  Location loc = forall.getLoc();
  rewriter.setInsertionPoint(forall);
  SmallVector<Value> lbs = forall.getLowerBound(rewriter);
  SmallVector<Value> ubs = forall.getUpperBound(rewriter);
  SmallVector<Value> steps = forall.getStep(rewriter);
  unsigned numIvs = forall.getRank();
  scf::LoopNest nest = scf::buildLoopNest(
      rewriter, loc, lbs, ubs, steps, forall.getOutputs(),
      [&](OpBuilder &b, Location loc, ValueRange ivs,
          ValueRange carried) -> scf::ValueVector {
        IRMapping mapping;
        mapping.map(forall.getInductionVars(), ivs);
        mapping.map(forall.getRegionIterArgs(), carried);
        for (Operation &op : forall.getBody()->without_terminator())
          b.clone(op, mapping);
        // Each store writes the tile into the tensor its destination
        // carries now; stores into the same output chain.
        SmallVector<Value> current(carried.begin(), carried.end());
        // A store's operand in the new body; those defined above the grid
        // (constants, sizes, a tile computed once) are used as they are.
        auto remap = [&](Value v) {
          return v ? mapping.lookupOrDefault(v) : Value();
        };
        auto slotOf = [&](Value dest) -> Value & {
          return current[cast<BlockArgument>(dest).getArgNumber() - numIvs];
        };
        for (Operation &op : forall.getTerminator().getYieldingOps()) {
          if (auto store = dyn_cast<ParallelStoreTileOp>(op)) {
            Value &dest = slotOf(store.getDest());
            dest = StoreTileOp::create(
                b, loc, dest.getType(), remap(store.getTile()), dest,
                remap(store.getBatch()), remap(store.getRow()),
                remap(store.getHead()), remap(store.getLimit()),
                store.getPackedHeadsAttr());
          } else {
            auto stats = cast<ParallelStoreStatsOp>(op);
            Value &dest = slotOf(stats.getDest());
            dest = StoreStatsOp::create(
                b, loc, dest.getType(), remap(stats.getTile()), dest,
                remap(stats.getBatch()), remap(stats.getHead()),
                remap(stats.getRow()), remap(stats.getLimit()),
                stats.getPackedHeadsAttr());
          }
        }
        return current;
      });
  rewriter.replaceOp(forall, nest.results);
}

namespace {
struct FA3SerializeGridPass
    : public fa3::impl::FA3SerializeGridBase<FA3SerializeGridPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<scf::ForallOp> grids;
    getOperation()->walk([&](scf::ForallOp forall) {
      if (isTileGrid(forall))
        grids.push_back(forall);
    });
    IRRewriter rewriter(&getContext());
    for (scf::ForallOp forall : grids)
      serialize(forall, rewriter);
  }
};
} // namespace
