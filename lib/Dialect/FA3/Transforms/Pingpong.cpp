//===- Pingpong.cpp - Group a key loop's MMAs into pingpong turns ---------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// FlashAttention-3's pingpong schedule on the tile level: the MMAs a
// consumer warpgroup issues in one turn become the body of an fa3.mma_turn
// (the pass description in Passes.td says which).
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3PINGPONG
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// Moves the ops `first` .. `last` of one block into a new fa3.mma_turn in
/// their place; the turn returns their values that later ops read.
static LogicalResult wrapInTurn(Operation *first, Operation *last) {
  SmallVector<Operation *> ops;
  for (Operation *op = first;; op = op->getNextNode()) {
    if (!isa<QKOp, PVOp, LoadTileOp, LoadPagedTileOp>(op) &&
        !isa<arith::ArithDialect>(op->getDialect()))
      return op->emitOpError()
             << "sits between the MMAs of one pingpong turn; fa3-pingpong "
                "allows only tile loads and index arithmetic there";
    ops.push_back(op);
    if (op == last)
      break;
  }
  llvm::SmallPtrSet<Operation *, 8> inside(ops.begin(), ops.end());
  SmallVector<Value> escaping;
  for (Operation *op : ops)
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *user) {
            return !inside.contains(
                first->getBlock()->findAncestorOpInBlock(*user));
          }))
        escaping.push_back(result);

  OpBuilder b(first);
  auto turn =
      MmaTurnOp::create(b, first->getLoc(), ValueRange(escaping).getTypes());
  Block *body = new Block();
  turn.getBody().push_back(body);
  for (Operation *op : ops)
    op->moveBefore(body, body->end());
  b.setInsertionPointToEnd(body);
  YieldOp::create(b, first->getLoc(), escaping);
  for (auto [value, result] : llvm::zip(escaping, turn.getResults()))
    value.replaceUsesWithIf(result, [&](OpOperand &use) {
      return !turn->isProperAncestor(use.getOwner());
    });
  return success();
}

/// The turns of one key loop and where they start and end
/// (kPingpongTurnsAttrName); see the pass description.
static LogicalResult addTurns(scf::ForOp loop) {
  Block &body = *loop.getBody();
  auto qks = llvm::to_vector(body.getOps<QKOp>());
  auto pvs = llvm::to_vector(body.getOps<PVOp>());
  if (qks.size() != 1 || pvs.size() != 1)
    return loop.emitOpError() << "is not a key loop fa3-pingpong implements: "
                                 "it must hold one fa3.qk and one fa3.pv";
  // e4m3 kernels restart their turns at every tile: turns across tiles cost
  // the FP8 d128 causal forward 6% on the H100, where they gained the
  // 16-bit causal forwards 1-3% (docs/Performance.md, 2026-12-07).
  bool e4m3 = isa<Float8E4M3FNType>(
      getElementTypeOrSelf(qks.front().getQuery().getType()));
  loop->setAttr(
      kPingpongTurnsAttrName,
      StringAttr::get(loop.getContext(), e4m3 ? kPingpongTurnsPerTile
                                              : kPingpongTurnsAcrossTiles));
  if (!loop->hasAttr(kOverlappedKeyLoopAttrName))
    return wrapInTurn(qks.front(), qks.front());
  if (!qks.front()->isBeforeInBlock(pvs.front()))
    return loop.emitOpError() << "is a rotated key loop whose fa3.pv comes "
                                 "before its fa3.qk";
  if (failed(wrapInTurn(qks.front(), pvs.front())))
    return failure();
  // The rotated loop's prologue and epilogue: each MMA a turn.
  Block *outer = loop->getBlock();
  for (Operation &op : llvm::make_early_inc_range(*outer))
    if (isa<QKOp, PVOp>(op) && failed(wrapInTurn(&op, &op)))
      return failure();
  return success();
}

namespace {
struct FA3PingpongPass
    : public fa3::impl::FA3PingpongBase<FA3PingpongPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    for (auto [loop, schedule] : getScheduledKeyLoops(getOperation()))
      if (schedule.getPingpong() && loop.getBody()->getOps<MmaTurnOp>().empty())
        loops.push_back(loop);
    for (scf::ForOp loop : loops)
      if (failed(addTurns(loop)))
        return signalPassFailure();
  }
};
} // namespace
