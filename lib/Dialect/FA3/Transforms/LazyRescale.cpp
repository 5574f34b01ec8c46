//===- LazyRescale.cpp - Keep a row's softmax max while it grows little ---===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The schedule's rescale_threshold on the tile level: the key loop's
// fa3.online_softmax gets the threshold, and an FP8 loop's fa3.pv a P scale
// lowered by as much (the pass description in Passes.td says why).
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "fa3/Dialect/FA3/Utils/E4M3.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3LAZYRESCALE
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

namespace {
struct FA3LazyRescalePass
    : public fa3::impl::FA3LazyRescaleBase<FA3LazyRescalePass> {
  using Base::Base;

  void runOnOperation() override {
    for (auto [loop, schedule] : getScheduledKeyLoops(getOperation())) {
      int64_t threshold = schedule.getRescaleThreshold();
      if (threshold == 0)
        continue;
      OpBuilder b(loop);
      for (Operation &op : loop.getBody()->without_terminator()) {
        if (auto softmax = dyn_cast<OnlineSoftmaxOp>(op)) {
          if (softmax.getRescaleThresholdAttr())
            continue;
          softmax.setRescaleThresholdAttr(b.getI64IntegerAttr(threshold));
        } else if (auto pv = dyn_cast<PVOp>(op)) {
          // FP8: P · s within 2^8 although P reaches 2^τ.
          if (FloatAttr scale = pv.getProbsScaleAttr();
              scale && scale.getValueAsDouble() == kFP8ProbsScale)
            pv.setProbsScaleAttr(b.getF32FloatAttr(fp8ProbsScale(threshold)));
        }
      }
    }
  }
};
} // namespace
