//===- OutlineHopperKernels.cpp - Forward kernels as tensor-level functions
//===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The first step of the Hopper forward's progressive lowering: each
// fa3.attention (16-bit or e4m3) gets a tensor-level kernel function in
// @fa3_kernels, which fa3-tile{grid=true} and fa3-fuse-softmax then take to the
// tile level and convert-fa3-tile-to-hopper to an LLVM/NVVM kernel. The host op
// stays at L0, annotated with the kernel it launches.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3OUTLINEHOPPERKERNELS
#include "fa3/Conversion/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// `type` with its dims `dims` dynamic.
static RankedTensorType withDynamicDims(Type type, ArrayRef<unsigned> dims) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  for (unsigned d : dims)
    shape[d] = ShapedType::kDynamic;
  return RankedTensorType::get(shape, tensor.getElementType());
}

/// `type` with its batch and sequence dims (0 and 1 of BSHD, 0 and 2 of the
/// LSE's BHS) dynamic: one kernel serves every batch and length.
static RankedTensorType dynamicBatchAndLength(Type type, unsigned seqDim) {
  return withDynamicDims(type, {0, seqDim});
}

/// Creates `@name(q, k, v) -> (o, lse)` in `kernels` (a KV cache's:
/// `@name(q, k_cache, v_cache, cache_seqlens[, page_table])`, a packed
/// batch's `@name(q, k, v, cu_seqlens_q, cu_seqlens_k[, seqused_k])`, a
/// backward's `@name(do, q, k, v, o, lse[, dlse][, rng]) -> (dq, dk, dv)`,
/// a packed backward's `@name(do, q, k, v, o, lse, cu_seqlens_q,
/// cu_seqlens_k[, seqused_k][, dlse])`):
/// `attention` on dynamic batch and lengths, with the schedule also kept on
/// the function (the tile level's ops do not carry it).
static void outlineKernel(Operation *attention, ScheduleAttr schedule,
                          gpu::GPUModuleOp kernels, StringRef name) {
  OpBuilder builder(attention->getContext());
  builder.setInsertionPointToEnd(kernels.getBody());
  Location loc = attention->getLoc();
  // Q, K and V (or the caches) are [B, S, H, D] (a paged cache's [pages,
  // page_size, H, D]: one kernel serves every page size); cache_seqlens [B]
  // and the page table [B, max_pages] are dynamic already.
  SmallVector<Type> inputs, results;
  if (isa<AttentionVarlenOp>(attention)) {
    // A packed batch: Q, K, V and O [T, H, D], the LSE [H, T] and the i32
    // offsets and lengths, with their token and sequence counts dynamic.
    for (Type type : attention->getOperandTypes())
      inputs.push_back(withDynamicDims(type, {0}));
    results = {withDynamicDims(attention->getResult(0).getType(), {0}),
               withDynamicDims(attention->getResult(1).getType(), {1})};
  } else if (isa<AttentionVarlenGradOp>(attention)) {
    // The packed backward: [T, H, D] tensors, the LSE (and dLSE) [H, T],
    // the i32 offsets (and seqused_k) [B + 1] / [B], on dynamic token and
    // sequence counts.
    for (Type type : attention->getOperandTypes()) {
      auto tensor = cast<RankedTensorType>(type);
      bool stats = tensor.getRank() == 2;
      inputs.push_back(withDynamicDims(type, {stats ? 1u : 0u}));
    }
    for (Type type : attention->getResultTypes())
      results.push_back(withDynamicDims(type, {0}));
  } else if (isa<AttentionGradOp>(attention)) {
    // The backward: dO, Q, K, V, O [B, S, H, D], the LSE (and dLSE) [B, H,
    // S], the Philox (seed, offset) as is; dQ, dK, dV like Q, K, V.
    for (Type type : attention->getOperandTypes()) {
      int64_t rank = cast<RankedTensorType>(type).getRank();
      inputs.push_back(rank == 4   ? dynamicBatchAndLength(type, 1)
                       : rank == 3 ? dynamicBatchAndLength(type, 2)
                                   : type);
    }
    for (Type type : attention->getResultTypes())
      results.push_back(dynamicBatchAndLength(type, 1));
  } else {
    // FP8's [B, Hkv] descales get a dynamic batch too.
    for (Type type : attention->getOperandTypes()) {
      int64_t rank = cast<RankedTensorType>(type).getRank();
      inputs.push_back(rank == 4 ? dynamicBatchAndLength(type, 1)
                       : rank == 2 && isa<AttentionOp>(attention)
                           ? withDynamicDims(type, {0})
                           : type);
    }
    results = {dynamicBatchAndLength(attention->getResult(0).getType(), 1),
               dynamicBatchAndLength(attention->getResult(1).getType(), 2)};
  }
  auto func = func::FuncOp::create(builder, loc, name,
                                   builder.getFunctionType(inputs, results));
  func->setAttr(kScheduleAttrName, schedule);
  Block *entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  OperationState state(loc, attention->getName());
  state.addOperands(entry->getArguments());
  state.addTypes(results);
  for (NamedAttribute attr : attention->getAttrs())
    if (!attr.getName().strref().starts_with("fa3."))
      state.addAttribute(attr.getName(), attr.getValue());
  Operation *kernelOp = builder.create(state);
  func::ReturnOp::create(builder, loc, kernelOp->getResults());
}

/// The launch metadata of a forward kernel `name`, or of the backward's.
static void annotateLaunch(Operation *op, gpu::GPUModuleOp kernels,
                           StringRef name, const HopperAttentionSpec &spec) {
  annotateHopperForwardLaunch(op, kernels, name, spec);
}
static void annotateLaunch(Operation *op, gpu::GPUModuleOp kernels,
                           StringRef, const HopperAttentionGradSpec &spec) {
  annotateHopperGradLaunch(op, kernels, spec);
}

namespace {
struct FA3OutlineHopperKernelsPass
    : public fa3::impl::FA3OutlineHopperKernelsBase<
          FA3OutlineHopperKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    bool failedAny = false;
    // A kernel function per spec (forward, or the backward's, which
    // convert-fa3-tile-to-hopper turns into its three kernels) and the
    // launch metadata of its kind.
    auto outline = [&](Operation *attention, ScheduleAttr schedule,
                       auto spec) {
      if (failed(spec)) {
        failedAny = true;
        return;
      }
      gpu::GPUModuleOp kernels = getOrCreateHopperKernelModule(module, chip);
      std::string name = spec->kernelName();
      if (!kernels.lookupSymbol(name))
        outlineKernel(attention, schedule, kernels, name);
      annotateLaunch(attention, kernels, name, *spec);
    };
    module.walk([&](Operation *op) {
      // Already annotated ops keep their kernel.
      if (op->hasAttr(kKernelAttrName))
        return;
      // The spec runs the backend's checks (and diagnostics) on the L0 op.
      if (auto attention = dyn_cast<AttentionOp>(op))
        outline(attention, attention.getScheduleAttr(),
                HopperAttentionSpec::fromOp(attention));
      else if (auto cache = dyn_cast<AttentionKVCacheOp>(op))
        outline(cache, cache.getScheduleAttr(),
                HopperAttentionSpec::fromOp(cache));
      else if (auto varlen = dyn_cast<AttentionVarlenOp>(op))
        outline(varlen, varlen.getScheduleAttr(),
                HopperAttentionSpec::fromOp(varlen));
      else if (auto grad = dyn_cast<AttentionGradOp>(op))
        outline(grad, grad.getScheduleAttr(),
                HopperAttentionGradSpec::fromOp(grad));
      else if (auto varlenGrad = dyn_cast<AttentionVarlenGradOp>(op))
        outline(varlenGrad, varlenGrad.getScheduleAttr(),
                HopperAttentionGradSpec::fromOp(varlenGrad));
    });
    if (failedAny)
      signalPassFailure();
  }
};
} // namespace
