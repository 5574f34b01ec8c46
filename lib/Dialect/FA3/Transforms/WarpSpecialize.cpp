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

#include "mlir/Dialect/Utils/StaticValueUtils.h"
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

//===----------------------------------------------------------------------===//
// The backward's key-block grid
//===----------------------------------------------------------------------===//

namespace {
/// Clones into a producer region the index arithmetic that values of the
/// backward's step loops are computed from: values defined outside
/// `loops` (in the grid's body, which stays where both regions see it, or
/// above) are used as they are, values already mapped (the producer's loop
/// variables) by their mapping; everything else must be index arithmetic
/// or `tensor.dim`.
struct SliceCloner {
  Operation *loops;
  IRMapping mapping;
  Operation *failedOn = nullptr;

  Value operator()(OpBuilder &b, Value v) {
    if (Value mapped = mapping.lookupOrNull(v))
      return mapped;
    Operation *def = v.getDefiningOp();
    if (!def || !loops->isProperAncestor(def))
      return v;
    if (!isa<arith::ArithDialect>(def->getDialect()) &&
        !isa<tensor::DimOp>(def)) {
      failedOn = def;
      return v;
    }
    for (Value operand : def->getOperands())
      (*this)(b, operand);
    Operation *clone = b.clone(*def, mapping);
    return clone->getResult(cast<OpResult>(v).getResultNumber());
  }
};
} // namespace

/// fa3.ring_fill of what `load` (fa3.load_tile or fa3.load_stats) reads, as
/// ring use `use` (null: no ring), its coordinates cloned by `clone`.
static void fillFor(OpBuilder &b, SliceCloner &clone, Operation *load,
                    Value use) {
  Location loc = load->getLoc();
  if (auto tile = dyn_cast<LoadTileOp>(load)) {
    RingFillOp::create(b, loc, tile.getSource(), clone(b, tile.getBatch()),
                       clone(b, tile.getRow()), clone(b, tile.getHead()),
                       /*page_table=*/Value(), use,
                       TypeAttr::get(tile.getType()), IntegerAttr());
    return;
  }
  auto stats = cast<LoadStatsOp>(load);
  RingFillOp::create(b, loc, stats.getSource(), clone(b, stats.getBatch()),
                     clone(b, stats.getRow()), clone(b, stats.getHead()),
                     /*page_table=*/Value(), use,
                     TypeAttr::get(stats.getType()), IntegerAttr());
}

/// FlashAttention-3's backward producer on the key-block grid of
/// fa3-tile{grid=true}: K and V once, then per step (query head g of the
/// group, query block qb) its Q, dO, LSE and Δ tiles as ring use
/// g · (qbHi − qbLo) + (qb − qbLo). The consumers run the tile ops.
static LogicalResult specializeGrad(scf::ForallOp grid, ScheduleAttr schedule) {
  auto fail = [&](Operation *at, const Twine &why) {
    at->emitOpError() << "cannot be warp-specialized by fa3-warp-specialize: "
                      << why;
    return failure();
  };
  Block *body = grid.getBody();
  auto loops = llvm::to_vector(body->getOps<scf::ForOp>());
  auto kvLoads = llvm::to_vector(body->getOps<LoadTileOp>());
  if (loops.size() != 1 || kvLoads.size() != 2)
    return fail(grid, "the backward's key grid must load K and V and run one "
                      "loop over the query heads of the group");
  scf::ForOp groupLoop = loops.front();
  auto stepLoops = llvm::to_vector(groupLoop.getBody()->getOps<scf::ForOp>());
  if (stepLoops.size() != 1)
    return fail(groupLoop, "the group loop must hold one loop over the "
                           "visible query blocks");
  scf::ForOp stepLoop = stepLoops.front();
  SmallVector<Operation *> stepLoads;
  for (Operation &op : stepLoop.getBody()->without_terminator())
    if (isa<LoadTileOp, LoadStatsOp>(op))
      stepLoads.push_back(&op);
  if (stepLoads.size() != 4)
    return fail(stepLoop, "a step must load Q, dO, the LSE and Δ");
  if (getConstantIntValue(groupLoop.getLowerBound()) != 0 ||
      getConstantIntValue(groupLoop.getStep()) != 1 ||
      getConstantIntValue(stepLoop.getStep()) != 1)
    return fail(groupLoop, "the step loops must count from 0 (heads) and "
                           "step by 1");
  // The consumers: the tile ops (the K/V loads, the loops, the
  // conversions); the index arithmetic stays in the grid's body, where both
  // regions see it and the forall's stores too.
  SmallVector<Operation *> moved;
  for (Operation &op : body->without_terminator())
    if (isa<FA3Dialect>(op.getDialect()) || isa<scf::ForOp>(op))
      moved.push_back(&op);
  SmallVector<Value> results;
  for (Operation &op : grid.getTerminator().getYieldingOps())
    if (auto store = dyn_cast<ParallelStoreTileOp>(op))
      results.push_back(store.getTile());
  if (results.size() != 2 ||
      !llvm::all_of(results, [&](Value v) {
        return llvm::is_contained(moved, v.getDefiningOp());
      }))
    return fail(grid, "its stores must take dK and dV from the tile ops");

  Location loc = grid.getLoc();
  OpBuilder b(grid.getTerminator());
  auto ws = WarpSpecializeOp::create(
      b, loc, TypeRange(results),
      b.getI64IntegerAttr(schedule.getProducerRegs()),
      b.getI64IntegerAttr(schedule.getConsumerRegs()));
  Block *consumers = new Block();
  ws.getConsumers().push_back(consumers);
  for (Operation *op : moved)
    op->moveBefore(consumers, consumers->end());
  b.setInsertionPointToEnd(consumers);
  YieldOp::create(b, loc, results);
  for (auto [from, to] : llvm::zip(results, ws.getResults()))
    from.replaceUsesWithIf(to, [&](OpOperand &use) {
      return !ws->isProperAncestor(use.getOwner());
    });

  Block *producer = new Block();
  ws.getProducer().push_back(producer);
  b.setInsertionPointToEnd(producer);
  SliceCloner clone{groupLoop, {}, nullptr};
  for (LoadTileOp load : kvLoads)
    fillFor(b, clone, load, Value());
  Value lo = clone(b, stepLoop.getLowerBound());
  Value hi = clone(b, stepLoop.getUpperBound());
  Value perHead = arith::SubIOp::create(b, loc, hi, lo);
  scf::ForOp::create(
      b, loc, clone(b, groupLoop.getLowerBound()),
      clone(b, groupLoop.getUpperBound()), clone(b, groupLoop.getStep()),
      ValueRange(), [&](OpBuilder &b, Location loc, Value g, ValueRange) {
        clone.mapping.map(groupLoop.getInductionVar(), g);
        scf::ForOp::create(
            b, loc, lo, hi, clone(b, stepLoop.getStep()), ValueRange(),
            [&](OpBuilder &b, Location loc, Value qb, ValueRange) {
              clone.mapping.map(stepLoop.getInductionVar(), qb);
              Value use = arith::AddIOp::create(
                  b, loc, arith::MulIOp::create(b, loc, g, perHead),
                  arith::SubIOp::create(b, loc, qb, lo));
              for (Operation *load : stepLoads)
                fillFor(b, clone, load, use);
              scf::YieldOp::create(b, loc);
            });
        scf::YieldOp::create(b, loc);
      });
  YieldOp::create(b, loc, ValueRange());
  if (clone.failedOn)
    return fail(clone.failedOn, "a fill's coordinates must be index "
                                "arithmetic of the step loops");
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
    // The backward: its kernel function's schedule (fa3-outline-hopper-
    // kernels), its key-block grid the one that adds into the dQ
    // accumulator.
    auto schedule =
        getOperation()->getAttrOfType<ScheduleAttr>(kKernelScheduleAttrName);
    if (!schedule || schedule.getProducerRegs() <= 0)
      return;
    SmallVector<scf::ForallOp> gradGrids;
    getOperation()->walk([&](AccumulateTileOp add) {
      if (auto grid = add->getParentOfType<scf::ForallOp>();
          grid && !llvm::is_contained(gradGrids, grid) &&
          grid.getBody()->getOps<WarpSpecializeOp>().empty())
        gradGrids.push_back(grid);
    });
    for (scf::ForallOp grid : gradGrids)
      if (failed(specializeGrad(grid, schedule)))
        return signalPassFailure();
  }
};
} // namespace
