//===- GradMmaOrder.cpp - A backward step's MMAs in FA3's order -----------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// fa3-tile writes a backward step in the order of its math (Sᵀ, Pᵀ, dV,
// dPᵀ, dSᵀ, dK, dQ). This pass moves the step's MMAs to where
// FlashAttention-3 issues them on Hopper, so that each one runs while the
// step's elementwise math does; the pass description in Passes.td has the
// order.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3GRADMMAORDER
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// `v` before fa3.dropout, if a dropout made it.
static Value beforeDropout(Value v) {
  if (auto drop = v.getDefiningOp<DropoutOp>())
    return drop.getProbs();
  return v;
}

/// Whether `op` may move to just before `point` (same block): every
/// operand defined in the block is defined before `point` and no use in
/// the block comes before it.
static bool canMoveBefore(Operation *op, Operation *point) {
  Block *block = point->getBlock();
  for (Value operand : op->getOperands()) {
    Operation *def = operand.getDefiningOp();
    if (def && def->getBlock() == block &&
        (def == point || !def->isBeforeInBlock(point)))
      return false;
  }
  for (Operation *user : op->getUsers()) {
    Operation *inBlock = block->findAncestorOpInBlock(*user);
    if (inBlock && inBlock->isBeforeInBlock(point))
      return false;
  }
  return true;
}

/// Orders the step of `grad`'s block (see the pass description).
static LogicalResult orderStep(SoftmaxGradOp grad) {
  Block *block = grad->getBlock();
  auto fail = [&](const Twine &what) {
    return grad.emitOpError()
           << "is not in a backward step fa3-grad-mma-order can order: "
           << what;
  };
  // dPᵀ's product and Sᵀ's: the block's other fa3.qk.
  auto dpProduct = beforeDropout(grad.getGradProbs()).getDefiningOp<QKOp>();
  auto products = llvm::to_vector(block->getOps<QKOp>());
  if (!dpProduct || dpProduct->getBlock() != block || products.size() != 2)
    return fail("expected two fa3.qk in its block, one of them its dP");
  QKOp sProduct = products[0] == dpProduct ? products[1] : products[0];
  // dS as the MMAs read it: after softcap's derivative, if there is one.
  Value ds = grad.getResult();
  if (ds.hasOneUse())
    if (auto capped = dyn_cast<SoftcapGradOp>(*ds.getUsers().begin()))
      ds = capped.getResult();
  // dQ = dS K (fa3.pv), dK += dSᵀ Q and dV += Pᵀ dO (fa3.mma_tn).
  PVOp dqProduct;
  MmaTNOp dkProduct, dvProduct;
  for (Operation &op : *block) {
    if (auto pv = dyn_cast<PVOp>(op); pv && pv.getProbs() == ds)
      dqProduct = pv;
    if (auto mma = dyn_cast<MmaTNOp>(op)) {
      if (mma.getLhs() == ds)
        dkProduct = mma;
      else if (beforeDropout(mma.getLhs()) == grad.getProbs())
        dvProduct = mma;
    }
  }
  if (!dqProduct || !dkProduct || !dvProduct)
    return fail("expected the fa3.pv of dQ and the fa3.mma_tn of dK and dV "
                "in its block");

  // dPᵀ right after Sᵀ.
  Operation *afterS = sProduct->getNextNode();
  if (afterS != dpProduct.getOperation()) {
    if (!canMoveBefore(dpProduct, afterS))
      return fail("dP's fa3.qk reads a value computed after Sᵀ's");
    dpProduct->moveBefore(afterS);
  }
  // dV, then dQ, then dK.
  if (!canMoveBefore(dvProduct, dqProduct))
    return fail("dV's fa3.mma_tn cannot move before dQ's fa3.pv");
  dvProduct->moveBefore(dqProduct);
  Operation *afterDQ = dqProduct->getNextNode();
  if (afterDQ != dkProduct.getOperation()) {
    if (!canMoveBefore(dkProduct, afterDQ))
      return fail("dK's fa3.mma_tn cannot move after dQ's fa3.pv");
    dkProduct->moveBefore(afterDQ);
  }
  return success();
}

namespace {
struct FA3GradMmaOrderPass
    : public fa3::impl::FA3GradMmaOrderBase<FA3GradMmaOrderPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<SoftmaxGradOp> steps;
    getOperation()->walk([&](SoftmaxGradOp grad) { steps.push_back(grad); });
    for (SoftmaxGradOp grad : steps)
      if (failed(orderStep(grad)))
        return signalPassFailure();
  }
};
} // namespace
