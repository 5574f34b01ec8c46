//===- WarpSpecialize.cpp - Producer and consumer warpgroups --------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// FlashAttention-3's warp specialization on the tile level: a grid tile's
// loads are issued by a producer region into rings that the consumers' tile
// ops read in fill order (the pass description in Passes.td shows the form).
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3WARPSPECIALIZE
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// Clones into `b` the ops of `loop`'s body that `load`'s coordinates are
/// computed from, with the loop's induction variable at `iv`, and the fill
/// of the tile `load` reads (through its page table, if paged), as ring use
/// `use`.
static void cloneFill(OpBuilder &b, scf::ForOp loop, KeyValueTileLoad load,
                      Value iv, Value use) {
  Block &body = *loop.getBody();
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> worklist = {load.batch, load.row, load.head};
  while (!worklist.empty()) {
    Operation *def = worklist.pop_back_val().getDefiningOp();
    if (!def || def->getBlock() != &body || !slice.insert(def))
      continue;
    llvm::append_range(worklist, def->getOperands());
  }
  SmallVector<Operation *> ops(slice.begin(), slice.end());
  llvm::sort(ops, [](Operation *x, Operation *y) {
    return x->isBeforeInBlock(y);
  });
  IRMapping mapping;
  mapping.map(loop.getInductionVar(), iv);
  for (Operation *op : ops)
    b.clone(*op, mapping);
  RingFillOp::create(
      b, load.op->getLoc(), load.source, mapping.lookupOrDefault(load.batch),
      mapping.lookupOrDefault(load.row), mapping.lookupOrDefault(load.head),
      load.pageTable, use, TypeAttr::get(load.result.getType()), IntegerAttr());
}

static LogicalResult specialize(scf::ForallOp grid, scf::ForOp loop,
                                ScheduleAttr schedule) {
  auto fail = [&](Operation *at, const Twine &why) {
    at->emitOpError() << "cannot be warp-specialized by fa3-warp-specialize: "
                      << why;
    return failure();
  };
  // The consumers' tile ops: the query load, the key loop, fa3.finalize.
  auto qks = llvm::to_vector(loop.getBody()->getOps<QKOp>());
  auto pvs = llvm::to_vector(loop.getBody()->getOps<PVOp>());
  if (qks.size() != 1 || pvs.size() != 1)
    return fail(loop, "its key loop must hold one fa3.qk and one fa3.pv");
  auto queryLoad = qks.front().getQuery().getDefiningOp<LoadTileOp>();
  auto keyLoad = KeyValueTileLoad::of(qks.front().getKey());
  auto valueLoad = KeyValueTileLoad::of(pvs.front().getValue());
  if (!queryLoad || !keyLoad || !valueLoad ||
      queryLoad->getBlock() != grid.getBody() ||
      keyLoad.op->getBlock() != loop.getBody() ||
      valueLoad.op->getBlock() != loop.getBody())
    return fail(loop, "the query tile must be loaded in the grid's body and "
                      "the key and value tiles in the key loop (fa3.load_tile "
                      "or fa3.load_paged_tile)");
  // The query fill keeps packed heads (PackGQA); key and value tiles are
  // one head's rows. A key/value tile's row limit (a KV cache's length, a
  // packed sequence's end) is no bound of the fill: the producer loads
  // whole tiles and the consumers' fa3.mask hides the keys past it. Nor is
  // a query tile's (a packed sequence's end) where the forall's stores drop
  // the rows past it: those rows' results, computed from the rows the whole
  // tile reads in its place, are never stored.
  if (Value limit = queryLoad.getLimit()) {
    bool storesDropRows = true;
    for (Operation &op : grid.getTerminator().getYieldingOps()) {
      if (auto store = dyn_cast<ParallelStoreTileOp>(op))
        storesDropRows &=
            store.getLimit() == limit && store.getRow() == queryLoad.getRow();
      else if (auto store = dyn_cast<ParallelStoreStatsOp>(op))
        storesDropRows &=
            store.getLimit() == limit && store.getRow() == queryLoad.getRow();
      else
        storesDropRows = false;
    }
    if (!storesDropRows)
      return fail(queryLoad, "the producer loads whole tiles; a query row "
                             "limit needs the forall's stores to drop the "
                             "rows past it (the same row and limit)");
  }
  for (KeyValueTileLoad load : {keyLoad, valueLoad})
    if (auto plain = dyn_cast<LoadTileOp>(load.op);
        plain && plain.getPackedHeads())
      return fail(plain, "the producer loads whole tiles; packed key/value "
                         "heads have no ring fill");
  if (getConstantIntValue(loop.getStep()) != 1)
    return fail(loop, "its key loop's step must be 1");
  if (loop->use_empty() ||
      !llvm::all_of(loop->getUsers(), llvm::IsaPred<FinalizeOp>))
    return fail(loop, "only fa3.finalize may read the key loop's results");
  auto finalize = cast<FinalizeOp>(*loop->getUsers().begin());
  if (finalize->getBlock() != grid.getBody())
    return fail(loop, "fa3.finalize must take the key loop's results");

  Location loc = loop.getLoc();
  OpBuilder b(grid.getTerminator());
  auto ws = WarpSpecializeOp::create(
      b, loc, finalize->getResultTypes(),
      b.getI64IntegerAttr(schedule.getProducerRegs()),
      b.getI64IntegerAttr(schedule.getConsumerRegs()));

  // Consumers: the tile ops, moved as they are.
  Block *consumers = new Block();
  ws.getConsumers().push_back(consumers);
  for (Operation *op : {queryLoad.getOperation(), loop.getOperation(),
                        finalize.getOperation()})
    op->moveBefore(consumers, consumers->end());
  b.setInsertionPointToEnd(consumers);
  YieldOp::create(b, loc, finalize->getResults());
  for (auto [from, to] : llvm::zip(finalize->getResults(), ws.getResults()))
    from.replaceUsesWithIf(to, [&](OpOperand &use) {
      return !ws->isProperAncestor(use.getOwner());
    });

  // Producer: Q, K of the first block, then K of block i + 1 ahead of V of
  // block i.
  Block *producer = new Block();
  ws.getProducer().push_back(producer);
  b.setInsertionPointToEnd(producer);
  RingFillOp::create(b, loc, queryLoad.getSource(), queryLoad.getBatch(),
                     queryLoad.getRow(), queryLoad.getHead(),
                     /*page_table=*/Value(), /*use=*/Value(),
                     TypeAttr::get(queryLoad.getType()),
                     queryLoad.getPackedHeadsAttr());
  Value lo = loop.getLowerBound(), hi = loop.getUpperBound();
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
  Value n = arith::MaxSIOp::create(
      b, loc, arith::SubIOp::create(b, loc, hi, lo), c0);
  Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, n, c0);
  scf::IfOp::create(b, loc, any, [&](OpBuilder &b, Location loc) {
    cloneFill(b, loop, keyLoad, arith::AddIOp::create(b, loc, lo, c0), c0);
    scf::YieldOp::create(b, loc);
  });
  scf::ForOp::create(
      b, loc, c0, n, c1, ValueRange(),
      [&](OpBuilder &b, Location loc, Value i, ValueRange) {
        Value next = arith::AddIOp::create(b, loc, i, c1);
        Value has =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, next, n);
        scf::IfOp::create(b, loc, has, [&](OpBuilder &b, Location loc) {
          cloneFill(b, loop, keyLoad, arith::AddIOp::create(b, loc, lo, next),
                    next);
          scf::YieldOp::create(b, loc);
        });
        cloneFill(b, loop, valueLoad, arith::AddIOp::create(b, loc, lo, i), i);
        scf::YieldOp::create(b, loc);
      });
  YieldOp::create(b, loc, ValueRange());
  return success();
}

namespace {
struct FA3WarpSpecializePass
    : public fa3::impl::FA3WarpSpecializeBase<FA3WarpSpecializePass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<std::tuple<scf::ForallOp, scf::ForOp, ScheduleAttr>> work;
    for (auto [loop, schedule] : getScheduledKeyLoops(getOperation()))
      if (auto grid = dyn_cast<scf::ForallOp>(loop->getParentOp());
          grid && schedule.getProducerRegs() > 0)
        work.emplace_back(grid, loop, schedule);
    for (auto [grid, loop, schedule] : work)
      if (failed(specialize(grid, loop, schedule)))
        return signalPassFailure();
  }
};
} // namespace
