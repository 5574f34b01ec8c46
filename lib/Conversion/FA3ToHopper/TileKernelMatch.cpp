//===- TileKernelMatch.cpp - Matching the tile-level forward kernel -------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Finds the parts of a tile-level kernel function (TileKernel.h) and checks
// that convert-fa3-tile-to-hopper builds that form: every op of the grid
// body, the key loop and the producer region is one the emitter knows, and
// the schedule agrees with the IR (warp specialization, rotation, the
// persistent mapping). Anything else is a diagnostic on the op.
//
//===----------------------------------------------------------------------===//

#include "TileKernel.h"

#include "HopperCodegen.h"

#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Dialect/FA3/Utils/E4M3.h"
#include "fa3/Dialect/FA3/Utils/GridMapping.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

bool fa3::detail::isScalarOp(Operation *op) {
  if (auto constant = dyn_cast<arith::ConstantOp>(op))
    return isa<IntegerAttr>(constant.getValue()) &&
           (constant.getType().isIndex() || constant.getType().isInteger(1));
  // A length read from an i32 tensor becomes an index.
  if (auto cast = dyn_cast<arith::IndexCastOp>(op))
    return cast.getIn().getType().isInteger(32) && cast.getType().isIndex();
  if (!isa<arith::ArithDialect>(op->getDialect()) || op->getNumRegions() ||
      op->getNumResults() != 1)
    return false;
  // f32: the product of an FP8 kernel's descales.
  auto scalarType = [](Type t) {
    return t.isIndex() || t.isInteger(1) || t.isF32();
  };
  return llvm::all_of(op->getOperandTypes(), scalarType) &&
         llvm::all_of(op->getResultTypes(), scalarType);
}

/// The tensor a `tensor.extract` of an argument of `func` reads (null for
/// any other op).
static RankedTensorType extractedArgument(Operation *op, func::FuncOp func) {
  auto extract = dyn_cast<tensor::ExtractOp>(op);
  if (!extract)
    return {};
  auto arg = dyn_cast<BlockArgument>(extract.getTensor());
  if (!arg || arg.getOwner() != &func.getBody().front())
    return {};
  return cast<RankedTensorType>(arg.getType());
}

bool fa3::detail::isLengthRead(Operation *op, func::FuncOp func) {
  RankedTensorType type = extractedArgument(op, func);
  return type && type.getRank() == 1 && type.getElementType().isInteger(32);
}

bool fa3::detail::isDescaleRead(Operation *op, func::FuncOp func) {
  RankedTensorType type = extractedArgument(op, func);
  return type && type.getRank() == 2 && type.getElementType().isF32() &&
         !ShapedType::isDynamic(type.getDimSize(1));
}

bool fa3::detail::isKernelScalar(Operation *op, func::FuncOp func) {
  return isScalarOp(op) || isArgumentDim(op, func) || isLengthRead(op, func) ||
         isDescaleRead(op, func);
}

bool fa3::detail::isArgumentDim(Operation *op, func::FuncOp func) {
  auto dim = dyn_cast<tensor::DimOp>(op);
  if (!dim || !dim.getConstantIndex())
    return false;
  auto arg = dyn_cast<BlockArgument>(dim.getSource());
  return arg && arg.getOwner() == &func.getBody().front();
}

std::optional<float> fa3::detail::splatValue(Value v) {
  DenseElementsAttr dense;
  if (!matchPattern(v, m_Constant(&dense)) || !dense.isSplat() ||
      !isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToFloat();
}

/// `v`, or what the fa3.mma_turn that returns it yields for it: the matchers
/// read the dataflow through fa3-pingpong's turns.
static Value throughTurns(Value v) {
  if (auto turn = v.getDefiningOp<MmaTurnOp>()) {
    auto yield = cast<YieldOp>(turn.getBody().front().getTerminator());
    return throughTurns(yield.getValues()[cast<OpResult>(v).getResultNumber()]);
  }
  return v;
}

/// The ops of `block` but its terminator, with each fa3.mma_turn replaced by
/// its body's ops.
static SmallVector<Operation *> opsThroughTurns(Block &block) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator()) {
    if (auto turn = dyn_cast<MmaTurnOp>(op))
      llvm::append_range(ops, opsThroughTurns(turn.getBody().front()));
    else
      ops.push_back(&op);
  }
  return ops;
}

/// The matchers' diagnostic: `at` is not `structure` (e.g. "the key loop")
/// in the form convert-fa3-tile-to-hopper implements, because of `what`.
static LogicalResult notImplemented(Operation *at, StringRef structure,
                                    const Twine &what) {
  at->emitOpError() << "is not " << structure
                    << " convert-fa3-tile-to-hopper implements: " << what;
  return failure();
}

/// A key or value tile load of the key loop: whole tiles of K or V (a
/// KV cache's row limit, its length, is no load bound on Hopper: TMA reads
/// whole tiles and fa3.mask hides the keys past the length), paged exactly
/// when the kernel's cache is.
template <typename FailFn>
static LogicalResult checkKeyValueLoad(KeyValueTileLoad load,
                                       TileKernel &kernel, FailFn fail) {
  func::FuncOp func = kernel.func;
  if (load.source != kernel.key && load.source != kernel.value)
    return fail(load.op, "it must load key or value tiles");
  if (auto plain = dyn_cast<LoadTileOp>(load.op)) {
    if (plain.getLimit() && !kernel.kvCache && !kernel.varlen)
      return fail(load.op, "a key row limit is a KV cache's length or a "
                           "packed sequence's end");
    if (plain.getPackedHeads())
      return fail(load.op, "it must load whole key or value tiles of one "
                           "head");
  }
  if (static_cast<bool>(load.pageTable) != kernel.paged ||
      (load.pageTable && load.pageTable != func.getArgument(4)))
    return fail(load.op, kernel.paged
                             ? "a paged cache's tiles are read through the "
                               "kernel's page table (its fifth argument)"
                             : "only a paged KV cache kernel reads through a "
                               "page table");
  return success();
}

/// fa3.pv's probs_scale: a power of two up to 2^8 in an FP8 kernel (P · s
/// is what its e4m3 wgmma reads; specOf checks s against the softmax's
/// rescale_threshold), none otherwise.
static bool probsScaleFits(PVOp pv, const TileKernel &kernel) {
  FloatAttr scale = pv.getProbsScaleAttr();
  if (!kernel.fp8)
    return !scale;
  if (!scale)
    return false;
  int exponent;
  double mantissa = std::frexp(scale.getValueAsDouble(), &exponent);
  return mantissa == 0.5 && exponent >= 1 && exponent <= 9;
}

static FailureOr<KeyLoop> matchKeyLoop(scf::ForOp loop, TileKernel &kernel) {
  KeyLoop keys;
  keys.loop = loop;
  auto fail = [](Operation *at, const Twine &what) {
    return notImplemented(at, "the key loop", what);
  };
  if (getConstantIntValue(loop.getStep()) != 1)
    return fail(loop, "its step must be 1");
  if (loop.getNumRegionIterArgs() != 3)
    return fail(loop, "it must carry the accumulator, the max and the sum");
  Block &body = *loop.getBody();
  func::FuncOp func = kernel.func;
  Value k = kernel.key;
  for (Operation *opInBody : opsThroughTurns(body)) {
    Operation &op = *opInBody;
    if (isKernelScalar(&op, func))
      continue;
    if (isa<LoadTileOp, LoadPagedTileOp>(op)) {
      KeyValueTileLoad load = KeyValueTileLoad::of(op.getResult(0));
      if (failed(checkKeyValueLoad(load, kernel, fail)))
        return failure();
      KeyValueTileLoad &slot = load.source == k ? keys.keyLoad : keys.valueLoad;
      if (slot)
        return fail(load.op, "it must load one key and one value tile");
      slot = load;
    } else if (auto qk = dyn_cast<QKOp>(op)) {
      if (keys.qk || qk.getQuery() != kernel.queryLoad.getResult() ||
          !keys.keyLoad || qk.getKey() != keys.keyLoad.result)
        return fail(qk, "S must be the query tile times the key tile");
      keys.qk = qk;
    } else if (auto softcap = dyn_cast<SoftcapOp>(op)) {
      if (keys.softcap || !keys.qk ||
          throughTurns(softcap.getScores()) != keys.qk)
        return fail(softcap, "the softcap must take S");
      keys.softcap = softcap;
    } else if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
      Value scores = keys.softcap ? keys.softcap.getResult() : keys.qk;
      // scf.if %boundary { fa3.mask S } else { S }
      auto thenYield = cast<scf::YieldOp>(ifOp.thenBlock()->getTerminator());
      MaskOp mask = thenYield.getNumOperands() == 1
                        ? thenYield.getOperand(0).getDefiningOp<MaskOp>()
                        : MaskOp();
      if (keys.maskIf || ifOp.getNumResults() != 1 || !ifOp.elseBlock() ||
          !mask || throughTurns(mask.getScores()) != scores ||
          throughTurns(ifOp.elseYield().getOperand(0)) != scores)
        return fail(ifOp, "the only branch must mask S on boundary blocks");
      for (Operation &inner : ifOp.thenBlock()->without_terminator())
        if (&inner != mask.getOperation() && !isScalarOp(&inner))
          return fail(&inner, "the mask branch may only compute indices");
      keys.maskIf = ifOp;
      keys.mask = mask;
    } else if (auto softmax = dyn_cast<OnlineSoftmaxOp>(op)) {
      Value scores = keys.maskIf    ? keys.maskIf.getResult(0)
                     : keys.softcap ? keys.softcap.getResult()
                                    : Value(keys.qk);
      if (keys.softmax || !scores ||
          throughTurns(softmax.getScores()) != scores ||
          softmax.getRowMax() != loop.getRegionIterArg(1) ||
          softmax.getRowSum() != loop.getRegionIterArg(2))
        return fail(softmax, "the softmax must take the (masked) S and the "
                             "carried max and sum");
      keys.softmax = softmax;
    } else if (auto rescale = dyn_cast<RescaleOp>(op)) {
      if (keys.rescale || !keys.softmax ||
          rescale.getAcc() != loop.getRegionIterArg(0) ||
          rescale.getCorrection() != keys.softmax.getCorrection())
        return fail(rescale, "the rescale must take the carried accumulator "
                             "and the softmax's correction");
      keys.rescale = rescale;
    } else if (auto dropout = dyn_cast<DropoutOp>(op)) {
      if (keys.dropout || !keys.softmax || !kernel.dropout ||
          dropout.getProbs() != keys.softmax.getProbs() ||
          dropout.getRng() != kernel.func.getArgument(3))
        return fail(dropout, "dropout must take the softmax's P and the "
                             "kernel's rng argument");
      keys.dropout = dropout;
    } else if (auto pv = dyn_cast<PVOp>(op)) {
      Value probs = keys.dropout   ? keys.dropout.getResult()
                    : keys.softmax ? keys.softmax.getProbs()
                                   : Value();
      if (keys.pv || !keys.rescale || !keys.valueLoad || !probs ||
          pv.getProbs() != probs || pv.getValue() != keys.valueLoad.result ||
          pv.getAcc() != keys.rescale.getResult() ||
          !probsScaleFits(pv, kernel))
        return fail(pv, "O += P V must take the softmax's (dropped-out) P, "
                        "the value tile and the rescaled accumulator (FP8: "
                        "probs_scale = 256, the kernel's P scaling; else "
                        "none)");
      keys.pv = pv;
    } else {
      return fail(&op, "unexpected op '" + op.getName().getStringRef() + "'");
    }
  }
  if (!keys.pv)
    return fail(loop, "it has no fa3.pv");
  auto yield = cast<scf::YieldOp>(body.getTerminator());
  if (throughTurns(yield.getOperand(0)) != keys.pv.getResult() ||
      yield.getOperand(1) != keys.softmax.getNewMax() ||
      yield.getOperand(2) != keys.softmax.getNewSum())
    return fail(yield, "it must yield O, the new max and the new sum");
  std::optional<float> acc = splatValue(loop.getInitArgs()[0]),
                       max = splatValue(loop.getInitArgs()[1]),
                       sum = splatValue(loop.getInitArgs()[2]);
  if (!acc || !max || !sum)
    return fail(loop, "its accumulator, max and sum must start from splat "
                      "constants");
  keys.lo = loop.getLowerBound();
  keys.hi = loop.getUpperBound();
  return keys;
}

/// The key loop as fa3-intra-wg-overlap rotates it (its pass description
/// shows the form): the dataflow of each stage is that of the plain loop.
static FailureOr<KeyLoop> matchOverlappedKeyLoop(scf::IfOp guard,
                                                 TileKernel &kernel) {
  auto fail = [](Operation *at, const Twine &what) {
    return notImplemented(at, "the rotated key loop", what);
  };
  KeyLoop keys;
  keys.guard = guard;
  func::FuncOp func = kernel.func;
  Value q = kernel.queryLoad.getResult(), k = kernel.key;
  // lo < hi, or hi > lo as canonicalize writes it.
  auto cond = guard.getCondition().getDefiningOp<arith::CmpIOp>();
  bool less = cond && cond.getPredicate() == arith::CmpIPredicate::slt;
  bool greater = cond && cond.getPredicate() == arith::CmpIPredicate::sgt;
  if ((!less && !greater) || guard.getNumResults() != 3 ||
      guard.elseBlock() == nullptr)
    return fail(guard, "it must test lo < hi and return O, the max and the "
                       "sum");
  keys.lo = less ? cond.getLhs() : cond.getRhs();
  keys.hi = less ? cond.getRhs() : cond.getLhs();
  for (Value init : guard.elseYield().getOperands())
    if (!splatValue(init))
      return fail(guard, "an empty key range must return splat constants");

  // The stage ops of one block (the then-block or the loop body), at most
  // one of each, in KeyLoop's fields (`loop`: a loop nested in the block).
  auto collect = [&](Block &block) -> FailureOr<KeyLoop> {
    KeyLoop st;
    auto once = [&](auto &slot, auto op) {
      if (slot)
        return false;
      slot = op;
      return true;
    };
    for (Operation *opInBlock : opsThroughTurns(block)) {
      Operation &op = *opInBlock;
      bool ok = true;
      if (isKernelScalar(&op, func))
        continue;
      if (isa<LoadTileOp, LoadPagedTileOp>(op)) {
        KeyValueTileLoad load = KeyValueTileLoad::of(op.getResult(0));
        if (failed(checkKeyValueLoad(load, kernel, fail)))
          return failure();
        ok = load.source == k ? once(st.keyLoad, load)
                              : once(st.valueLoad, load);
      } else if (auto qk = dyn_cast<QKOp>(op)) {
        ok = qk.getQuery() == q && st.keyLoad &&
             qk.getKey() == st.keyLoad.result && once(st.qk, qk);
      } else if (auto softcap = dyn_cast<SoftcapOp>(op)) {
        ok = st.qk && throughTurns(softcap.getScores()) == st.qk.getResult() &&
             once(st.softcap, softcap);
      } else if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
        auto thenYield = cast<scf::YieldOp>(ifOp.thenBlock()->getTerminator());
        MaskOp mask = thenYield.getNumOperands() == 1
                          ? thenYield.getOperand(0).getDefiningOp<MaskOp>()
                          : MaskOp();
        ok = mask && ifOp.elseBlock() && once(st.maskIf, ifOp);
        st.mask = mask;
      } else if (auto softmax = dyn_cast<OnlineSoftmaxOp>(op)) {
        ok = once(st.softmax, softmax);
      } else if (auto rescale = dyn_cast<RescaleOp>(op)) {
        ok = st.softmax &&
             rescale.getCorrection() == st.softmax.getCorrection() &&
             once(st.rescale, rescale);
      } else if (auto pv = dyn_cast<PVOp>(op)) {
        ok = st.valueLoad && pv.getValue() == st.valueLoad.result &&
             probsScaleFits(pv, kernel) && once(st.pv, pv);
      } else if (auto loop = dyn_cast<scf::ForOp>(op)) {
        ok = once(st.loop, loop);
      } else if (isa<DropoutOp>(op)) {
        return fail(&op, "dropout is built in the plain key loop only "
                         "(intra_wg_overlap = false)");
      } else {
        return fail(&op, "unexpected op '" + op.getName().getStringRef() + "'");
      }
      if (!ok)
        return fail(&op, "it is not where the rotated key loop has it");
    }
    if (st.maskIf) {
      Value scores = st.softcap ? st.softcap.getResult() : st.qk.getResult();
      if (throughTurns(st.mask.getScores()) != scores ||
          throughTurns(st.maskIf.elseYield().getOperand(0)) != scores)
        return fail(st.maskIf, "the only branch must mask S");
    }
    return st;
  };

  FailureOr<KeyLoop> outer = collect(*guard.thenBlock());
  if (failed(outer))
    return failure();
  scf::ForOp loop = outer->loop;
  if (!loop || !loop->hasAttr(kOverlappedKeyLoopAttrName) || !outer->keyLoad ||
      !outer->qk || !outer->softmax || !outer->rescale || !outer->valueLoad ||
      !outer->pv)
    return fail(guard, "it must hold the first block's stage A, the rotated "
                       "loop and the last block's stage B");
  FailureOr<KeyLoop> body = collect(*loop.getBody());
  if (failed(body))
    return failure();
  if (!body->keyLoad || !body->qk || !body->softmax || !body->rescale ||
      !body->valueLoad || !body->pv || body->loop)
    return fail(loop, "its body must hold stage A of block j + 1 and stage B "
                      "of block j");
  if (getConstantIntValue(loop.getStep()) != 1 ||
      loop.getLowerBound() != keys.lo ||
      !matchPattern(loop.getUpperBound(),
                    m_Op<arith::SubIOp>(matchers::m_Val(keys.hi), m_One())))
    return fail(loop, "it must run from lo to hi - 1 in steps of 1");
  // The carried values: P, the max, the sum and the rescaled O.
  auto args = loop.getRegionIterArgs();
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  Value scoresOf = body->maskIf    ? body->maskIf.getResult(0)
                   : body->softcap ? body->softcap.getResult()
                                   : body->qk.getResult();
  if (args.size() != 4 || body->pv.getProbs() != args[0] ||
      body->pv.getAcc() != args[3] ||
      throughTurns(body->softmax.getScores()) != scoresOf ||
      body->softmax.getRowMax() != args[1] ||
      body->softmax.getRowSum() != args[2] ||
      throughTurns(body->rescale.getAcc()) != body->pv.getResult() ||
      yield.getOperand(0) != body->softmax.getProbs() ||
      yield.getOperand(1) != body->softmax.getNewMax() ||
      yield.getOperand(2) != body->softmax.getNewSum() ||
      yield.getOperand(3) != body->rescale.getResult())
    return fail(loop, "it must carry P, the max, the sum and O between the "
                      "stages as fa3-intra-wg-overlap rotates them");
  ValueRange elseInits = guard.elseYield().getOperands();
  Value firstScores = outer->maskIf    ? outer->maskIf.getResult(0)
                      : outer->softcap ? outer->softcap.getResult()
                                       : outer->qk.getResult();
  auto inits = loop.getInitArgs();
  auto thenYield = guard.thenYield();
  if (throughTurns(outer->softmax.getScores()) != firstScores ||
      outer->softmax.getRowMax() != elseInits[1] ||
      outer->softmax.getRowSum() != elseInits[2] ||
      outer->rescale.getAcc() != elseInits[0] ||
      inits[0] != outer->softmax.getProbs() ||
      inits[1] != outer->softmax.getNewMax() ||
      inits[2] != outer->softmax.getNewSum() ||
      inits[3] != outer->rescale.getResult() ||
      outer->pv.getProbs() != loop.getResult(0) ||
      outer->pv.getAcc() != loop.getResult(3) ||
      throughTurns(thenYield.getOperand(0)) != outer->pv.getResult() ||
      thenYield.getOperand(1) != loop.getResult(1) ||
      thenYield.getOperand(2) != loop.getResult(2))
    return fail(guard, "its prologue and epilogue must be the first block's "
                       "stage A and the last block's stage B");
  // The rotated loop's ops stand for the key loop's.
  KeyLoop rotated = *body;
  rotated.loop = loop;
  rotated.guard = guard;
  rotated.lo = keys.lo;
  rotated.hi = keys.hi;
  return rotated;
}

FailureOr<TileKernel> fa3::detail::matchTileKernel(func::FuncOp func) {
  TileKernel kernel;
  kernel.func = func;
  auto fail = [](Operation *at, const Twine &what) {
    return notImplemented(at, "a tile-level forward kernel", what);
  };
  kernel.schedule = func->getAttrOfType<ScheduleAttr>(kScheduleAttrName);
  if (!kernel.schedule)
    return fail(func, "it has no fa3.schedule");
  // A KV cache's kernel takes cache_seqlens (i32 [B]) after the caches,
  // and a paged one's the page table (i32 [B, max_pages]) after those.
  auto i32Argument = [&](unsigned index, int64_t rank) {
    auto type =
        func.getNumArguments() > index
            ? dyn_cast<RankedTensorType>(func.getArgument(index).getType())
            : RankedTensorType();
    return type && type.getRank() == rank &&
           type.getElementType().isInteger(32);
  };
  unsigned numArgs = func.getNumArguments();
  // A packed batch's kernel takes Q, K, V as [T, H, D], then cu_seqlens_q,
  // cu_seqlens_k and optionally seqused_k.
  kernel.varlen =
      numArgs >= 5 && numArgs <= 6 &&
      cast<RankedTensorType>(func.getArgument(0).getType()).getRank() == 3 &&
      i32Argument(3, 1) && i32Argument(4, 1) &&
      (numArgs == 5 || i32Argument(5, 1));
  kernel.sequsedK = kernel.varlen && numArgs == 6;
  kernel.kvCache =
      !kernel.varlen && (numArgs == 4 || numArgs == 5) && i32Argument(3, 1);
  kernel.paged = kernel.kvCache && numArgs == 5 && i32Argument(4, 2);
  // A dense forward with dropout takes the Philox (seed, offset) fourth.
  // FP8: e4m3 Q, K, V and their f32 [B, Hkv] descales.
  auto f32Matrix = [&](unsigned index) {
    auto type = dyn_cast<RankedTensorType>(func.getArgument(index).getType());
    return type && type.getRank() == 2 && type.getElementType().isF32();
  };
  kernel.fp8 = numArgs == 6 && !kernel.varlen &&
               isa<Float8E4M3FNType>(
                   cast<RankedTensorType>(func.getArgument(0).getType())
                       .getElementType()) &&
               f32Matrix(3) && f32Matrix(4) && f32Matrix(5);
  if (!kernel.varlen && !kernel.kvCache && numArgs == 4)
    if (auto rng = dyn_cast<RankedTensorType>(func.getArgument(3).getType()))
      kernel.dropout = rng.getShape() == ArrayRef<int64_t>{2} &&
                       rng.getElementType().isInteger(64);
  if ((numArgs != 3 && !kernel.kvCache && !kernel.varlen && !kernel.dropout &&
       !kernel.fp8) ||
      (kernel.kvCache && numArgs == 5 && !kernel.paged) ||
      func.getNumResults() != 2)
    return fail(func, "it must take Q, K, V (and dropout's i64 [2] rng, or "
                      "FP8's three f32 [B, Hkv] descales; or "
                      "Q, the K and V caches, i32 cache lengths and "
                      "optionally an i32 page table; or packed Q, K, V, i32 "
                      "cu_seqlens_q, cu_seqlens_k and optionally seqused_k) "
                      "and return O and the LSE");
  kernel.query = func.getArgument(0);
  kernel.key = func.getArgument(1);
  kernel.value = func.getArgument(2);
  Block &entry = func.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  // A packed batch: the [1, T, H, D] views of Q, K and V, the filled
  // outputs (O = 0, the LSE = -inf outside every sequence: the launch's
  // fills) and the forall's results collapsed back (checked below).
  SmallVector<linalg::FillOp, 2> fills;
  for (Operation &op : entry.without_terminator()) {
    if (!kernel.varlen)
      break;
    if (auto view = dyn_cast<tensor::ExpandShapeOp>(op)) {
      auto arg = dyn_cast<BlockArgument>(view.getSrc());
      if (!arg || arg.getOwner() != &entry || arg.getArgNumber() > 2)
        continue;
      Value &slot = arg.getArgNumber() == 0   ? kernel.query
                    : arg.getArgNumber() == 1 ? kernel.key
                                              : kernel.value;
      if (slot != arg)
        return fail(view, "a packed batch's Q, K and V are viewed once each");
      slot = view.getResult();
    } else if (auto fill = dyn_cast<linalg::FillOp>(op)) {
      fills.push_back(fill);
    }
  }
  for (Operation &op : entry.without_terminator()) {
    if (isKernelScalar(&op, func) || isa<tensor::EmptyOp>(op) ||
        (op.getNumResults() == 1 && splatValue(op.getResult(0))))
      continue;
    if (kernel.varlen &&
        (llvm::is_contained(fills, dyn_cast<linalg::FillOp>(op)) ||
         isa<tensor::CollapseShapeOp>(op) ||
         (isa<tensor::ExpandShapeOp>(op) &&
          llvm::is_contained({kernel.query, kernel.key, kernel.value},
                             op.getResult(0))) ||
         (isa<arith::ConstantOp>(op) &&
          isa<FloatType>(op.getResult(0).getType()))))
      continue;
    // Split-KV: the partials' [N, B, ...] views and their merge, after the
    // forall (checked below).
    if (kernel.grid && isa<tensor::ExpandShapeOp, tensor::DimOp>(op))
      continue;
    if (auto combine = dyn_cast<CombineSplitsOp>(op);
        combine && kernel.grid && !kernel.combine) {
      kernel.combine = combine;
      continue;
    }
    auto forall = dyn_cast<scf::ForallOp>(op);
    if (!forall || kernel.grid)
      return fail(&op, "its body must be one scf.forall (fa3-tile{grid=true}), "
                       "index arithmetic and splat constants");
    kernel.grid = forall;
  }
  if (!kernel.grid)
    return fail(func, "it has no scf.forall over the grid");
  scf::ForallOp grid = kernel.grid;
  if (!isBlockGrid(grid) && !isPersistentGrid(grid))
    return fail(grid, "the forall must be 3-D and mapped to #gpu.block<x/y/z> "
                      "or #fa3.persistent_block<x/y/z>");
  if (CombineSplitsOp combine = kernel.combine) {
    // The merge of the forall's partials, viewed as [N, B, ...].
    auto viewOf = [&](Value v) {
      auto expand = v.getDefiningOp<tensor::ExpandShapeOp>();
      return expand ? expand.getSrc() : Value();
    };
    if (!kernel.kvCache ||
        viewOf(combine.getPartialOutput()) != grid.getResult(0) ||
        viewOf(combine.getPartialLse()) != grid.getResult(1) ||
        ret.getOperand(0) != combine.getOutput() ||
        ret.getOperand(1) != combine.getLse())
      return fail(combine, "a KV cache's split-KV kernel must merge the "
                           "forall's partials (viewed as [N, B, ...]) and "
                           "return the merge");
  } else if (kernel.varlen) {
    // The forall's results collapsed back to [T, H, D] and [H, T], and its
    // outputs the fills of O = 0 and LSE = -inf, which the launch does.
    auto collapsed = [&](Value v, unsigned i) {
      auto collapse = v.getDefiningOp<tensor::CollapseShapeOp>();
      return collapse && collapse.getSrc() == grid.getResult(i);
    };
    if (!collapsed(ret.getOperand(0), 0) || !collapsed(ret.getOperand(1), 1))
      return fail(ret, "a packed batch's kernel must return the forall's O "
                       "and LSE collapsed to [T, H, D] and [H, T]");
    const double filledWith[2] = {0.0,
                                  -std::numeric_limits<double>::infinity()};
    for (unsigned i = 0; i < 2; ++i) {
      auto fill = grid.getOutputs()[i].getDefiningOp<linalg::FillOp>();
      FloatAttr value;
      if (!fill || !fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() ||
          !matchPattern(fill.getInputs()[0], m_Constant(&value)) ||
          value.getValueAsDouble() != filledWith[i])
        return fail(grid, "a packed batch's forall must start from O filled "
                          "with 0 and the LSE with -inf (the launch fills "
                          "them)");
    }
  } else if (ret.getOperand(0) != grid.getResult(0) ||
             ret.getOperand(1) != grid.getResult(1)) {
    return fail(ret, "it must return the forall's O and LSE");
  }

  // The forall body's ops, with a warp_specialize's consumers region in its
  // place.
  SmallVector<Operation *> tileOps;
  for (Operation &op : grid.getBody()->without_terminator()) {
    auto ws = dyn_cast<WarpSpecializeOp>(op);
    if (!ws) {
      tileOps.push_back(&op);
      continue;
    }
    if (kernel.warpSpecialize)
      return fail(ws, "the forall body has one fa3.warp_specialize");
    kernel.warpSpecialize = ws;
    for (Operation &inner : ws.getConsumers().front().without_terminator())
      tileOps.push_back(&inner);
    // The consumers return what fa3.finalize makes.
    auto yield = cast<YieldOp>(ws.getConsumers().front().getTerminator());
    auto finalize = yield.getValues().size() == 2
                        ? yield.getValues()[0].getDefiningOp<FinalizeOp>()
                        : FinalizeOp();
    if (!finalize || yield.getValues()[1] != finalize.getLse())
      return fail(ws, "its consumers must return fa3.finalize's O and LSE");
  }
  for (Operation *opInBody : tileOps) {
    Operation &op = *opInBody;
    if (isKernelScalar(&op, func) ||
        (op.getNumResults() == 1 && splatValue(op.getResult(0))))
      continue;
    if (auto load = dyn_cast<LoadTileOp>(op)) {
      if (load.getLimit() && !kernel.varlen)
        return fail(load, "a query row limit is a packed sequence's end");
      if (kernel.queryLoad || load.getSource() != kernel.query)
        return fail(load, "the forall body loads one query tile");
      kernel.queryLoad = load;
    } else if (isa<scf::ForOp, scf::IfOp>(op)) {
      if (kernel.keys.loop || !kernel.queryLoad)
        return fail(&op, "the forall body has one key loop, after the "
                         "query tile's load");
      FailureOr<KeyLoop> keys =
          isa<scf::ForOp>(op)
              ? matchKeyLoop(cast<scf::ForOp>(op), kernel)
              : matchOverlappedKeyLoop(cast<scf::IfOp>(op), kernel);
      if (failed(keys))
        return failure();
      kernel.keys = *keys;
    } else if (auto finalize = dyn_cast<FinalizeOp>(op)) {
      if (kernel.finalize || !kernel.keys.loop ||
          finalize.getAcc() != kernel.keys.results()[0] ||
          finalize.getRowMax() != kernel.keys.results()[1] ||
          finalize.getRowSum() != kernel.keys.results()[2])
        return fail(finalize, "fa3.finalize must take the key loop's results");
      kernel.finalize = finalize;
    } else {
      return fail(&op, "unexpected op '" + op.getName().getStringRef() +
                           "' in the forall body");
    }
  }
  if (!kernel.finalize)
    return fail(grid, "its body has no fa3.finalize");
  Value output = kernel.warpSpecialize ? kernel.warpSpecialize.getResult(0)
                                       : kernel.finalize.getOutput();
  Value lse = kernel.warpSpecialize ? kernel.warpSpecialize.getResult(1)
                                    : kernel.finalize.getLse();
  for (Operation &op : grid.getTerminator().getYieldingOps()) {
    if (auto store = dyn_cast<ParallelStoreTileOp>(op)) {
      if (store.getTile() == output &&
          store.getDest() == grid.getRegionIterArgs()[0] && !kernel.storeOutput)
        kernel.storeOutput = store;
      else
        return fail(store, "O must be stored once into the first output");
    } else if (auto store = dyn_cast<ParallelStoreStatsOp>(op)) {
      if (store.getTile() == lse &&
          store.getDest() == grid.getRegionIterArgs()[1] && !kernel.storeLse)
        kernel.storeLse = store;
      else
        return fail(store,
                    "the LSE must be stored once into the second output");
    }
  }
  if (!kernel.storeOutput || !kernel.storeLse)
    return fail(grid, "the forall must store O and the LSE");
  // A packed sequence's rows: the query tile and both stores start at its
  // row and end at its end, so the whole tile's rows past the end (the
  // next sequence's, which TMA loads in their place) are never stored.
  Value limit = kernel.queryLoad.getLimit();
  for (Operation *store :
       {kernel.storeOutput.getOperation(), kernel.storeLse.getOperation()}) {
    auto [row, storeLimit] =
        isa<ParallelStoreTileOp>(store)
            ? std::pair(kernel.storeOutput.getRow(),
                        kernel.storeOutput.getLimit())
            : std::pair(kernel.storeLse.getRow(), kernel.storeLse.getLimit());
    if (storeLimit != limit || (limit && row != kernel.queryLoad.getRow()))
      return fail(store, "a store's row and limit must be the query tile's "
                         "(a packed sequence's rows)");
  }
  if (kernel.varlen && !limit)
    return fail(kernel.queryLoad, "a packed batch's query tile must end at "
                                  "its sequence's end (a row limit)");
  // PackGQA: the query tile's rows are (query, head) pairs, and every op
  // that maps rows to queries or heads must read them alike.
  std::optional<uint64_t> packed = kernel.queryLoad.getPackedHeads();
  auto samePacking = [&](Operation *op, std::optional<uint64_t> other) {
    if (other == packed)
      return success();
    return fail(op, "packed_heads must match the query tile's load (" +
                        (packed ? std::to_string(*packed) : "absent") + ")");
  };
  if (failed(samePacking(kernel.storeOutput,
                         kernel.storeOutput.getPackedHeads())) ||
      failed(samePacking(kernel.storeLse, kernel.storeLse.getPackedHeads())) ||
      (kernel.keys.mask &&
       failed(
           samePacking(kernel.keys.mask, kernel.keys.mask.getPackedHeads()))))
    return failure();
  return kernel;
}

FailureOr<HopperAttentionSpec> fa3::detail::specOf(TileKernel &kernel) {
  HopperAttentionSpec spec;
  auto qTile = cast<RankedTensorType>(kernel.queryLoad.getType());
  auto kTile = cast<RankedTensorType>(kernel.keys.keyLoad.result.getType());
  auto vTile = cast<RankedTensorType>(kernel.keys.valueLoad.result.getType());
  Type elt = qTile.getElementType();
  spec.fp8 = isa<Float8E4M3FNType>(elt);
  if (!elt.isBF16() && !elt.isF16() && !spec.fp8)
    return kernel.queryLoad.emitOpError()
           << "convert-fa3-tile-to-hopper implements f16, bf16 and f8E4M3FN "
              "tiles, got "
           << elt;
  if (spec.fp8 != kernel.fp8)
    return kernel.queryLoad.emitOpError()
           << "e4m3 tiles come from an FP8 kernel's arguments (e4m3 Q, K, V "
              "and three f32 [B, Hkv] descales)";
  // FP8 writes a bf16 O.
  spec.bf16 = elt.isBF16() || spec.fp8;
  spec.headDim = qTile.getDimSize(1);
  if (spec.headDim % 64 != 0 || vTile.getDimSize(1) != spec.headDim)
    return kernel.queryLoad.emitOpError()
           << "the Hopper forward needs D a multiple of 64 with Dv = D, got "
           << spec.headDim << " and " << vTile.getDimSize(1);
  ScheduleAttr schedule = kernel.schedule;
  spec.blockM = qTile.getDimSize(0);
  spec.blockN = kTile.getDimSize(0);
  if (spec.blockM != schedule.getBlockM() ||
      spec.blockN != schedule.getBlockN())
    return kernel.func.emitOpError()
           << "tile shapes " << spec.blockM << "x" << spec.blockN
           << " do not match the schedule's block_m = " << schedule.getBlockM()
           << ", block_n = " << schedule.getBlockN();
  spec.stages = schedule.getStages();
  spec.producerRegs = schedule.getProducerRegs();
  spec.consumerRegs = schedule.getConsumerRegs();
  spec.pingpong = schedule.getPingpong();
  spec.intraWarpgroupOverlap = schedule.getIntraWgOverlap();
  spec.rescaleThreshold = schedule.getRescaleThreshold();
  spec.polyExp2 = schedule.getPolyExp2();
  spec.persistent = isPersistentGrid(kernel.grid);
  spec.kvCache = kernel.kvCache;
  spec.paged = kernel.paged;
  spec.numQHeads = cast<RankedTensorType>(kernel.query.getType()).getDimSize(2);
  spec.numKVHeads = cast<RankedTensorType>(kernel.key.getType()).getDimSize(2);
  spec.varlen = kernel.varlen;
  spec.sequsedK = kernel.sequsedK;
  if (kernel.dropout != static_cast<bool>(kernel.keys.dropout))
    return kernel.func.emitOpError()
           << (kernel.dropout ? "takes dropout's rng but its key loop has no "
                                "fa3.dropout"
                              : "has an fa3.dropout but no rng argument");
  if (DropoutOp dropout = kernel.keys.dropout)
    spec.dropout = dropout.getP().convertToFloat();
  if (spec.fp8) {
    // The descales scale the softmax and the finalize, and nothing else
    // reads them.
    Value qk = kernel.finalize.getQkDescale();
    if (!qk || kernel.keys.softmax.getDescale() != qk ||
        (kernel.keys.softcap && kernel.keys.softcap.getDescale() != qk))
      return kernel.finalize.emitOpError()
             << "an FP8 kernel's softmax, softcap and finalize must take one "
                "descale (q_descale · k_descale)";
    if ((spec.headDim != 64 && spec.headDim != 128 && spec.headDim != 256) ||
        spec.blockN % 64 != 0)
      return kernel.func.emitOpError()
             << "the Hopper FP8 forward implements D = 64, 128 and 256 with "
                "block_n a multiple of 64 (V' atoms of 64 or 128 keys), got "
                "D = "
             << spec.headDim << ", block_n = " << spec.blockN;
  } else if (kernel.finalize.getQkDescale() ||
             kernel.keys.softmax.getDescale()) {
    return kernel.finalize.emitOpError()
           << "descales belong to e4m3 tiles only";
  }
  if (CombineSplitsOp combine = kernel.combine) {
    auto partial = cast<RankedTensorType>(combine.getPartialOutput().getType());
    auto oTile = cast<RankedTensorType>(kernel.storeOutput.getTile().getType());
    spec.numSplits = partial.getDimSize(0);
    if (ShapedType::isDynamic(spec.numSplits) || spec.numSplits < 2 ||
        !oTile.getElementType().isF32())
      return combine.emitOpError()
             << "convert-fa3-tile-to-hopper merges a static number (>= 2) of "
                "f32 partials, got "
             << partial;
  }
  if (std::optional<uint64_t> packed = kernel.queryLoad.getPackedHeads()) {
    spec.packedHeads = static_cast<int64_t>(*packed);
    if (64 % spec.packedHeads != 0)
      return kernel.queryLoad.emitOpError()
             << "packed_heads = " << spec.packedHeads
             << " must divide 64 on Hopper (each consumer warpgroup's 64 "
                "rows hold whole queries)";
  }
  if (spec.blockM % 64 != 0 || spec.blockM > 256 || spec.blockN % 16 != 0 ||
      spec.blockN > 256 || schedule.getConsumerWgs() != spec.blockM / 64 ||
      (spec.persistent && !spec.warpSpecialized()) ||
      schedule.getCluster() != 1 || (spec.polyExp2 != 0 && !spec.fp8) ||
      (spec.pingpong &&
       (!spec.warpSpecialized() || spec.numConsumerWarpgroups() != 2)))
    return kernel.func.emitOpError()
           << "schedule " << schedule
           << " is not one the Hopper forward implements (see "
              "convert-fa3-to-hopper's checks)";
  // The overlap is fa3-intra-wg-overlap's rotated loop; it needs a producer
  // warpgroup (the consumers' ring refill is written for the plain loop,
  // and the overlap lost 10-25% without a producer on the H200).
  bool rotated = static_cast<bool>(kernel.keys.guard);
  if (spec.intraWarpgroupOverlap != rotated)
    return kernel.func.emitOpError()
           << (rotated ? "has a rotated key loop but its schedule has "
                         "intra_wg_overlap = false"
                       : "has intra_wg_overlap = true in its schedule but a "
                         "plain key loop: run fa3-intra-wg-overlap first");
  // Lazy rescaling is fa3-lazy-rescale's threshold on the softmax.
  int64_t softmaxThreshold = static_cast<int64_t>(
      kernel.keys.softmax.getRescaleThreshold().value_or(0));
  if (softmaxThreshold != spec.rescaleThreshold)
    return kernel.func.emitOpError()
           << "has rescale_threshold = " << spec.rescaleThreshold
           << " in its schedule but its fa3.online_softmax has "
           << softmaxThreshold << ": run fa3-lazy-rescale first";
  // FP8: P reaches 2^τ under a kept max, so P · s stays within 2^8 (e4m3
  // saturates at 448) with s = 2^(8 − τ), fa3-lazy-rescale's choice.
  if (spec.fp8) {
    double scale = kernel.keys.pv.getProbsScaleAttr().getValueAsDouble();
    double expected = fp8ProbsScale(spec.rescaleThreshold);
    if (scale != expected)
      return kernel.func.emitOpError()
             << "has an e4m3 P scale (fa3.pv's probs_scale) of " << scale
             << " with rescale_threshold = " << spec.rescaleThreshold
             << "; the FP8 kernel takes 2^(8 - rescale_threshold) = "
             << expected;
  }
  // The persistent grid is fa3-persistent-grid's mapping.
  if (schedule.getPersistent() != spec.persistent)
    return kernel.grid.emitOpError()
           << (spec.persistent
                   ? "is mapped to #fa3.persistent_block but its schedule has "
                     "persistent = false"
                   : "has persistent = true in its schedule but is mapped to "
                     "#gpu.block: run fa3-persistent-grid first");
  // Warp specialization is fa3-warp-specialize's split.
  if (WarpSpecializeOp ws = kernel.warpSpecialize) {
    int64_t producerRegs = ws.getProducerRegsAttr().getInt(),
            consumerRegs = ws.getConsumerRegsAttr().getInt();
    if (producerRegs != spec.producerRegs || consumerRegs != spec.consumerRegs)
      return ws.emitOpError() << "splits registers " << producerRegs << "/"
                              << consumerRegs << " but the schedule says "
                              << spec.producerRegs << "/" << spec.consumerRegs;
  } else if (spec.warpSpecialized()) {
    return kernel.func.emitOpError()
           << "has producer_regs = " << spec.producerRegs
           << " in its schedule but no fa3.warp_specialize: run "
              "fa3-warp-specialize first";
  }
  // Pingpong is fa3-pingpong's turns.
  bool hasTurns = false;
  kernel.func.walk([&](MmaTurnOp) { hasTurns = true; });
  if (spec.pingpong != hasTurns)
    return kernel.func.emitOpError()
           << (hasTurns ? "has pingpong turns (fa3.mma_turn) but its schedule "
                          "has pingpong = false"
                        : "has pingpong = true in its schedule but no "
                          "fa3.mma_turn: run fa3-pingpong first");
  if (spec.pingpong) {
    auto turns =
        kernel.keys.loop->getAttrOfType<StringAttr>(kPingpongTurnsAttrName);
    if (!turns || (turns.getValue() != kPingpongTurnsPerTile &&
                   turns.getValue() != kPingpongTurnsAcrossTiles))
      return kernel.keys.loop.emitOpError()
             << "holds pingpong turns but no " << kPingpongTurnsAttrName
             << " = \"" << kPingpongTurnsPerTile << "\" or \""
             << kPingpongTurnsAcrossTiles << "\" (fa3-pingpong sets it)";
    spec.pingpongPerTile = turns.getValue() == kPingpongTurnsPerTile;
  }
  if (rotated && !spec.warpSpecialized())
    return kernel.func.emitOpError()
           << "intra_wg_overlap needs a producer warpgroup (producer_regs > "
              "0) on the Hopper forward";
  return spec;
}