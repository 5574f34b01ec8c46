//===- IntraWarpgroupOverlap.cpp - Rotate the key loop by one stage -------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// FlashAttention-3's intra-warpgroup overlap as a loop transformation on the
// tile level: the key loop is software-pipelined by one stage, so that block
// j + 1's QKᵀ and softmax run beside block j's PV. The pass description
// (Passes.td) shows the rotated form.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3INTRAWARPGROUPOVERLAP
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

namespace {

/// The key loop split into its two stages.
struct LoopStages {
  scf::ForOp loop;
  PVOp pv;
  /// The iter_arg the PV's result is yielded to (the accumulator).
  unsigned accIndex = 0;
  /// Body ops in body order; an op computing an index both stages use is in
  /// both (it is cloned once per stage).
  llvm::SetVector<Operation *> stageA, stageB;
};

} // namespace

/// The ops of `body` that `roots` are computed from (in `body`, including
/// the values that ops nested in their regions read).
static llvm::SetVector<Operation *> sliceInBody(Block &body,
                                                ArrayRef<Value> roots) {
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> worklist(roots.begin(), roots.end());
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != &body || !slice.insert(def))
      continue;
    def->walk([&](Operation *nested) {
      llvm::append_range(worklist, nested->getOperands());
    });
  }
  return slice;
}

/// Whether `op` (in the loop body) reads one of the loop's iter_args,
/// itself or through the body ops it is computed from.
static bool readsIterArgs(Operation *op, scf::ForOp loop) {
  llvm::SetVector<Operation *> slice =
      sliceInBody(*loop.getBody(), SmallVector<Value>(op->getResults()));
  for (Operation *inSlice : slice) {
    WalkResult result = inSlice->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        if (auto arg = dyn_cast<BlockArgument>(operand))
          if (arg.getOwner() == loop.getBody() && arg.getArgNumber() > 0)
            return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return true;
  }
  return false;
}

static FailureOr<LoopStages> splitStages(scf::ForOp loop) {
  auto fail = [&](Operation *at, const Twine &why) {
    at->emitOpError() << "cannot be rotated by fa3-intra-wg-overlap: " << why;
    return failure();
  };
  if (getConstantIntValue(loop.getStep()) != 1)
    return fail(loop, "its step must be the constant 1");
  LoopStages stages;
  stages.loop = loop;
  Block &body = *loop.getBody();
  for (auto pv : body.getOps<PVOp>()) {
    if (stages.pv)
      return fail(loop, "its body has more than one fa3.pv");
    stages.pv = pv;
  }
  PVOp pv = stages.pv;
  if (!pv)
    return fail(loop, "its body has no fa3.pv");
  auto yield = cast<scf::YieldOp>(body.getTerminator());
  if (!pv->hasOneUse() || pv->use_begin()->getOwner() != yield)
    return fail(pv, "its result must only be yielded (as the accumulator)");
  stages.accIndex = pv->use_begin()->getOperandNumber();

  stages.stageB = sliceInBody(body, {pv.getValue()});
  for (Operation *op : stages.stageB)
    if (readsIterArgs(op, loop))
      return fail(op, "the value tile must not depend on the loop's carried "
                      "values");
  stages.stageB.insert(pv);

  SmallVector<Value> rootsA = {pv.getProbs(), pv.getAcc()};
  for (auto [i, operand] : llvm::enumerate(yield.getOperands()))
    if (i != stages.accIndex)
      rootsA.push_back(operand);
  stages.stageA = sliceInBody(body, rootsA);
  if (stages.stageA.contains(pv))
    return fail(pv, "stage A (the softmax) must not read the PV's result");

  // Stage B runs on the values stage A carried over, so the accumulator's
  // iter_arg (stage B's result) may only be read in stage A after its
  // fa3.qk, where the rotated loop has stage B's result.
  Value acc = loop.getRegionIterArg(stages.accIndex);
  for (OpOperand &use : acc.getUses()) {
    Operation *user = body.findAncestorOpInBlock(*use.getOwner());
    if (!stages.stageA.contains(user))
      return fail(user, "only the softmax stage may read the accumulator");
  }
  // Sort both stages into body order (the slices were collected backwards).
  auto inBodyOrder = [&](llvm::SetVector<Operation *> &set) {
    SmallVector<Operation *> ops(set.begin(), set.end());
    llvm::sort(ops, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    set = llvm::SetVector<Operation *>(ops.begin(), ops.end());
  };
  inBodyOrder(stages.stageA);
  inBodyOrder(stages.stageB);
  return stages;
}

/// Clones `ops` at `b`'s insertion point with `mapping`.
static void cloneAll(OpBuilder &b, ArrayRef<Operation *> ops,
                     IRMapping &mapping) {
  for (Operation *op : ops)
    b.clone(*op, mapping);
}

static void rotate(LoopStages &stages) {
  scf::ForOp loop = stages.loop;
  Location loc = loop.getLoc();
  Block &body = *loop.getBody();
  auto yield = cast<scf::YieldOp>(body.getTerminator());
  PVOp pv = stages.pv;
  unsigned accIndex = stages.accIndex;
  Value iv = loop.getInductionVar();
  Value lo = loop.getLowerBound(), hi = loop.getUpperBound(),
        step = loop.getStep();
  ValueRange inits = loop.getInitArgs();

  // Stage A up to and including its first fa3.qk, then the rest: stage B
  // goes in between.
  SmallVector<Operation *> headA, tailA;
  bool seenQK = false;
  for (Operation *op : stages.stageA) {
    (seenQK ? tailA : headA).push_back(op);
    seenQK |= isa<QKOp>(op);
  }
  SmallVector<Operation *> stageB(stages.stageB.begin(), stages.stageB.end());
  // The iter_args other than the accumulator (the row max and sum).
  SmallVector<unsigned> carried;
  for (unsigned i = 0, e = loop.getNumRegionIterArgs(); i < e; ++i)
    if (i != accIndex)
      carried.push_back(i);

  OpBuilder b(loop);
  Value nonEmpty =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, lo, hi);
  auto guarded = scf::IfOp::create(b, loc, loop.getResultTypes(), nonEmpty,
                                   /*withElseRegion=*/true);
  b.setInsertionPointToStart(guarded.elseBlock());
  scf::YieldOp::create(b, loc, inits);
  b.setInsertionPointToStart(guarded.thenBlock());

  // Prologue: stage A of block lo, on the initial values.
  IRMapping prologue;
  prologue.map(iv, lo);
  for (auto [arg, init] : llvm::zip(loop.getRegionIterArgs(), inits))
    prologue.map(arg, init);
  cloneAll(b, headA, prologue);
  cloneAll(b, tailA, prologue);

  // The rotated loop over blocks lo .. hi - 2 (stage B's block j; stage A
  // runs on j + 1). It carries P and the rescaled accumulator to stage B,
  // and the other iter_args.
  SmallVector<Value> loopInits = {prologue.lookup(pv.getProbs())};
  for (unsigned i : carried)
    loopInits.push_back(prologue.lookup(yield.getOperand(i)));
  loopInits.push_back(prologue.lookup(pv.getAcc()));
  Value last = arith::SubIOp::create(b, loc, hi, step);
  auto rotated = scf::ForOp::create(b, loc, lo, last, step, loopInits);
  rotated->setDiscardableAttrs(loop->getDiscardableAttrDictionary());
  rotated->setAttr(kOverlappedKeyLoopAttrName, b.getUnitAttr());
  unsigned nCarried = carried.size();
  {
    OpBuilder::InsertionGuard guard(b);
    Block *rotatedBody = rotated.getBody();
    b.setInsertionPointToStart(rotatedBody);
    Value j = rotated.getInductionVar();
    ValueRange args = rotated.getRegionIterArgs();
    Value next = arith::AddIOp::create(b, loc, j, step);
    IRMapping mapA, mapB;
    mapA.map(iv, next);
    for (auto [k, i] : llvm::enumerate(carried))
      mapA.map(loop.getRegionIterArg(i), args[1 + k]);
    mapB.map(iv, j);
    mapB.map(pv.getProbs(), args.front());
    mapB.map(pv.getAcc(), args.back());
    cloneAll(b, headA, mapA);
    cloneAll(b, stageB, mapB);
    mapA.map(loop.getRegionIterArg(accIndex), mapB.lookup(pv.getResult()));
    cloneAll(b, tailA, mapA);
    SmallVector<Value> yields = {mapA.lookup(pv.getProbs())};
    for (unsigned i : carried)
      yields.push_back(mapA.lookup(yield.getOperand(i)));
    yields.push_back(mapA.lookup(pv.getAcc()));
    // scf.for::create with init values gave the body an empty yield.
    if (!rotatedBody->empty() && isa<scf::YieldOp>(rotatedBody->back()))
      rotatedBody->back().erase();
    b.setInsertionPointToEnd(rotatedBody);
    scf::YieldOp::create(b, loc, yields);
  }

  // Epilogue: stage B of block hi - 1.
  IRMapping epilogue;
  epilogue.map(iv, last);
  epilogue.map(pv.getProbs(), rotated.getResult(0));
  epilogue.map(pv.getAcc(), rotated.getResult(1 + nCarried));
  cloneAll(b, stageB, epilogue);
  SmallVector<Value> results(loop.getNumResults());
  results[accIndex] = epilogue.lookup(pv.getResult());
  for (auto [k, i] : llvm::enumerate(carried))
    results[i] = rotated.getResult(1 + k);
  scf::YieldOp::create(b, loc, results);

  loop.replaceAllUsesWith(guarded.getResults());
  loop.erase();
}

namespace {
struct FA3IntraWarpgroupOverlapPass
    : public fa3::impl::FA3IntraWarpgroupOverlapBase<
          FA3IntraWarpgroupOverlapPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    for (auto [loop, schedule] : getScheduledKeyLoops(getOperation()))
      if (schedule.getIntraWgOverlap() &&
          !loop->hasAttr(kOverlappedKeyLoopAttrName))
        loops.push_back(loop);
    for (scf::ForOp loop : loops) {
      FailureOr<LoopStages> stages = splitStages(loop);
      if (failed(stages))
        return signalPassFailure();
      rotate(*stages);
    }
  }
};
} // namespace
