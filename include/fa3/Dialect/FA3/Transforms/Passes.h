//===- Passes.h - fa3 transformation passes ----------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_TRANSFORMS_PASSES_H
#define FA3_DIALECT_FA3_TRANSFORMS_PASSES_H

#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace mlir::fa3 {

#define GEN_PASS_DECL
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"

/// The attribute fa3-fuse-softmax leaves on each key loop it makes: the
/// attention block's #fa3.schedule, for the passes that restructure the loop
/// as the schedule asks (fa3-intra-wg-overlap).
inline constexpr llvm::StringLiteral kKeyLoopScheduleAttrName = "fa3.schedule";
/// The #fa3.schedule on a Hopper kernel function (fa3-outline-hopper-kernels
/// sets it; the Conversion's kScheduleAttrName is the same attribute).
inline constexpr llvm::StringLiteral kKernelScheduleAttrName = "fa3.schedule";
/// The key loops under `root` that carry a schedule (kKeyLoopScheduleAttrName),
/// with it, in walk order: what the schedule passes restructure.
SmallVector<std::pair<scf::ForOp, ScheduleAttr>>
getScheduledKeyLoops(Operation *root);

/// The unit attribute fa3-intra-wg-overlap puts on a key loop it rotated.
inline constexpr llvm::StringLiteral kOverlappedKeyLoopAttrName =
    "fa3.intra_wg_overlap";

/// The attribute fa3-pingpong puts on each key loop it gives turns: where
/// the two consumer warpgroups' turns start and end on Hopper, either
/// kPingpongTurnsPerTile or kPingpongTurnsAcrossTiles (the pass description
/// says which loop takes which).
inline constexpr llvm::StringLiteral kPingpongTurnsAttrName =
    "fa3.pingpong_turns";
/// Consumer 0 takes the first turn at the start of every tile and consumer
/// 1's last turn before its epilogue.
inline constexpr llvm::StringLiteral kPingpongTurnsPerTile = "per_tile";
/// The turns run on across a persistent CTA's tiles: consumer 0 takes the
/// first turn once before its tile loop and the last once after it.
inline constexpr llvm::StringLiteral kPingpongTurnsAcrossTiles = "across_tiles";

/// The schedule the cost model of `fa3-select-schedule` picks for an
/// attention of head dim `headDim` and element type `elementType` on
/// `target` ("cpu" or "sm_90a"); failure for an unknown target.
/// `seqLenQ` and `seqLenK` (the query and key lengths,
/// ShapedType::kDynamic when unknown) let the Hopper forward pick a shorter
/// query tile for short queries and a persistent grid for short key loops
/// (the length buckets of the runtime, which compiles one kernel per
/// distinct schedule; the pass description has the model).
FailureOr<ScheduleAttr> selectSchedule(MLIRContext *context, StringRef target,
                                       int64_t headDim, Type elementType,
                                       bool causal,
                                       int64_t seqLenQ = ShapedType::kDynamic,
                                       int64_t seqLenK = ShapedType::kDynamic);

/// The schedule of an fa3.attention_grad: `block_n` key rows own a CTA's dK
/// and dV accumulators and `block_m` query rows are one step of its loop.
/// `elementwiseState`: the Hopper kernel holds more per Sᵀ element (tanh's
/// derivative with a softcap, the keep mask with dropout), which takes the
/// registers of 128-row steps at D = 64.
FailureOr<ScheduleAttr> selectGradSchedule(MLIRContext *context,
                                           StringRef target, int64_t headDim,
                                           bool elementwiseState = false);

#define GEN_PASS_REGISTRATION
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"

} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_TRANSFORMS_PASSES_H
