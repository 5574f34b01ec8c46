//===- Passes.h - fa3 transformation passes ----------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_TRANSFORMS_PASSES_H
#define FA3_DIALECT_FA3_TRANSFORMS_PASSES_H

#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace mlir::fa3 {

#define GEN_PASS_DECL
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"

/// The schedule the cost model of `fa3-select-schedule` picks for an
/// attention of head dim `headDim` and element type `elementType` on
/// `target` ("cpu" or "sm_90a"); failure for an unknown target.
/// `seqLenQ` (the query length, ShapedType::kDynamic when unknown) lets the
/// Hopper forward pick a shorter query tile for short sequences (see
/// selectHopperForwardBlockM).
FailureOr<ScheduleAttr> selectSchedule(MLIRContext *context, StringRef target,
                                       int64_t headDim, Type elementType,
                                       bool causal,
                                       int64_t seqLenQ = ShapedType::kDynamic);

/// The query rows of one Hopper forward CTA for head dim `headDim` and
/// query length `seqLenQ` (ShapedType::kDynamic or <= 0: unknown, giving the
/// long-sequence tile). At d <= 64 (bf16/f16): among 64, 128 and 192 rows,
/// the one that minimizes ceil(Sq / block_m) · block_m / rate(block_m,
/// Sq, causal), the rows computed (padding included) over the measured
/// throughput per row of that tile (docs/Performance.md, "Query tiles by
/// sequence length"); ties go to the larger tile. Other head dims and FP8
/// keep their long-sequence tile (192 at d <= 64, else 128).
/// The runtime calls it per launch to pick among compiled length variants.
int64_t selectHopperForwardBlockM(int64_t headDim, bool fp8, bool causal,
                                  int64_t seqLenQ);

/// The schedule of an fa3.attention_grad: `block_n` key rows own a CTA's dK
/// and dV accumulators and `block_m` query rows are one step of its loop.
FailureOr<ScheduleAttr> selectGradSchedule(MLIRContext *context,
                                           StringRef target, int64_t headDim);

#define GEN_PASS_REGISTRATION
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"

} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_TRANSFORMS_PASSES_H
