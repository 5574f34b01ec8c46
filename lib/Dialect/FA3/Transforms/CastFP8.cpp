//===- CastFP8.cpp - Rewrite #fa3.fp8 attentions into their FP8 form ----===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

#define DEBUG_TYPE "fa3-cast-fp8"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3CASTFP8
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// `type` with element type `element`.
static RankedTensorType withElement(Type type, Type element) {
  return cast<RankedTensorType>(type).clone(element);
}

/// Replaces the bf16 attention `op` by quantize (after a Hadamard transform
/// of Q and K when asked) and the FP8 attention.
static void castToFP8(AttentionOp op, bool hadamard, int64_t seed,
                      RewriterBase &rewriter) {
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  Type f32 = rewriter.getF32Type();
  Type f8 = rewriter.getType<Float8E4M3FNType>();
  auto kType = cast<RankedTensorType>(op.getKey().getType());
  auto qType = cast<RankedTensorType>(op.getQuery().getType());
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  if (hadamard) {
    // f32 results: the e4m3 cast is then the only rounding of Q and K.
    IntegerAttr seedAttr = rewriter.getI64IntegerAttr(seed);
    q = HadamardOp::create(rewriter, loc, withElement(q.getType(), f32), q,
                           seedAttr);
    k = HadamardOp::create(rewriter, loc, withElement(k.getType(), f32), k,
                           seedAttr);
  }
  // One descale per (batch, key/value head) for all three, as in FA3.
  auto descaleType =
      RankedTensorType::get({qType.getDimSize(0), kType.getDimSize(2)}, f32);
  SmallVector<Value> quantized, descales;
  for (Value x : {q, k, v}) {
    auto quantize = QuantizeOp::create(
        rewriter, loc, withElement(x.getType(), f8), descaleType, x,
        /*hadamard_seed=*/IntegerAttr());
    quantized.push_back(quantize.getResult());
    descales.push_back(quantize.getDescale());
  }
  // The schedule of the bf16 op does not carry over: select-schedule picks
  // the FP8 tiles.
  auto fp8 = AttentionOp::create(
      rewriter, loc, op.getOutput().getType(), op.getLse().getType(),
      quantized[0], quantized[1], quantized[2], descales, /*rng=*/Value(),
      op.getCausalAttr(), op.getScaleAttr(), op.getWindowAttr(),
      op.getSoftcapAttr(), /*schedule=*/ScheduleAttr(), /*fp8=*/FP8Attr(),
      /*pack_gqa=*/UnitAttr(), /*dropout=*/FloatAttr());
  rewriter.replaceOp(op, fp8.getResults());
}

namespace {
struct FA3CastFP8Pass : public fa3::impl::FA3CastFP8Base<FA3CastFP8Pass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<AttentionOp> ops;
    getOperation()->walk([&](AttentionOp op) {
      if (op.getFp8Attr() || (all && !op.isFP8() &&
                              cast<RankedTensorType>(op.getQuery().getType())
                                  .getElementType()
                                  .isBF16()))
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (AttentionOp op : ops) {
      FP8Attr attr = op.getFp8Attr();
      bool transform = attr ? attr.getHadamard() : bool(hadamard);
      int64_t d = cast<RankedTensorType>(op.getQuery().getType()).getDimSize(3);
      // The verifier checks this for ops with the attribute, not for `all`.
      if (transform && !llvm::isPowerOf2_64(d)) {
        op.emitOpError() << "cannot use the Hadamard transform "
                            "(fa3-cast-fp8 hadamard=true): head dim "
                         << d << " is not a power of two";
        signalPassFailure();
        continue;
      }
      castToFP8(op, transform, attr ? attr.getSeed() : int64_t(seed), rewriter);
    }
    // quantize(hadamard(x)) -> quantize(x) {hadamard_seed}, here and in
    // chains written by hand: no f32 copy of Q and K on either backend.
    RewritePatternSet patterns(&getContext());
    QuantizeOp::getCanonicalizationPatterns(patterns, &getContext());
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};
} // namespace
