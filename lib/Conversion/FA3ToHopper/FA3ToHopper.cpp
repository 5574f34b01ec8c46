//===- FA3ToHopper.cpp - Generate sm_90a kernels for fa3.attention -----------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinOps.h"

#define DEBUG_TYPE "convert-fa3-to-hopper"

namespace mlir::fa3 {
#define GEN_PASS_DEF_CONVERTFA3TOHOPPER
#include "fa3/Conversion/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// Largest dynamic shared memory a Hopper CTA can opt into (227 KiB).
static constexpr int64_t kMaxSharedMemory = 232448;

FailureOr<HopperAttentionSpec> HopperAttentionSpec::fromOp(AttentionOp op) {
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto k = cast<RankedTensorType>(op.getKey().getType());
  auto v = cast<RankedTensorType>(op.getValue().getType());
  HopperAttentionSpec spec;
  Type elt = q.getElementType();
  if (!elt.isBF16() && !elt.isF16())
    return op.emitOpError() << "the Hopper backend supports f16 and bf16 "
                               "(f32 runs with fa3-cpu-pipeline), got "
                            << elt;
  spec.bf16 = elt.isBF16();
  spec.headDim = q.getDimSize(3);
  if (v.getDimSize(3) != spec.headDim)
    return op.emitOpError() << "the Hopper backend needs the value head dim "
                               "to equal the query head dim, got "
                            << v.getDimSize(3) << " vs " << spec.headDim;
  if (spec.headDim % 64 != 0)
    return op.emitOpError()
           << "the Hopper backend supports head dims 64, 128, 192 and 256 "
              "(whole 128-byte swizzle atoms), got "
           << spec.headDim;
  spec.numQHeads = q.getDimSize(2);
  spec.numKVHeads = k.getDimSize(2);
  spec.causal = op.getCausal();
  std::tie(spec.windowLeft, spec.windowRight) = op.getWindowBounds();
  spec.scale = op.getEffectiveScale();
  spec.softcap = op.getEffectiveSoftcap();

  ScheduleAttr schedule = op.getScheduleAttr();
  if (!schedule)
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule{target=sm_90a}";
  spec.blockM = schedule.getBlockM();
  spec.blockN = schedule.getBlockN();
  spec.stages = schedule.getStages();
  spec.intraWarpgroupOverlap = schedule.getIntraWgOverlap();
  if (spec.blockM % 64 != 0 || spec.blockM > 256)
    return op.emitOpError() << "block_m must be 64, 128, 192 or 256 on "
                               "Hopper (64 rows per warpgroup), got "
                            << spec.blockM;
  if (spec.blockN % 16 != 0 || spec.blockN > 256)
    return op.emitOpError() << "block_n must be a multiple of 16 up to 256 "
                               "on Hopper (the wgmma N and K steps), got "
                            << spec.blockN;
  if (spec.sharedMemoryBytes() > kMaxSharedMemory)
    return op.emitOpError()
           << "the schedule needs " << spec.sharedMemoryBytes()
           << " bytes of shared memory (Q tile, " << spec.stages
           << " K and V stages), more than the 232448 a Hopper CTA has";
  return spec;
}

namespace {
struct ConvertFA3ToHopperPass
    : public fa3::impl::ConvertFA3ToHopperBase<ConvertFA3ToHopperPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    OpBuilder builder(ctx);
    gpu::GPUModuleOp kernels;
    bool failedAny = false;
    module.walk([&](AttentionOp op) {
      FailureOr<HopperAttentionSpec> spec = HopperAttentionSpec::fromOp(op);
      if (failed(spec)) {
        failedAny = true;
        return;
      }
      if (!kernels) {
        builder.setInsertionPointToEnd(module.getBody());
        auto target = NVVM::NVVMTargetAttr::get(
            ctx, /*optLevel=*/3, "nvptx64-nvidia-cuda", chip, "+ptx86");
        kernels = gpu::GPUModuleOp::create(builder, module.getLoc(),
                                           "fa3_kernels",
                                           builder.getArrayAttr({target}));
        module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                        builder.getUnitAttr());
      }
      std::string name = spec->kernelName();
      if (!kernels.lookupSymbol(name))
        buildHopperAttentionKernel(builder, kernels, *spec);
      // The host side stays at L0; the runtime launches the kernel with
      // this metadata (grid: ceildiv(Sq, block_m) x Hq x B).
      op->setAttr("fa3.kernel",
                  SymbolRefAttr::get(kernels.getSymNameAttr(),
                                     {FlatSymbolRefAttr::get(ctx, name)}));
      op->setAttr("fa3.launch",
                  builder.getDictionaryAttr({
                      builder.getNamedAttr(
                          "threads",
                          builder.getI64IntegerAttr(spec->numThreads())),
                      builder.getNamedAttr(
                          "shared_memory",
                          builder.getI64IntegerAttr(spec->sharedMemoryBytes())),
                      builder.getNamedAttr(
                          "block_m", builder.getI64IntegerAttr(spec->blockM)),
                      builder.getNamedAttr(
                          "block_n", builder.getI64IntegerAttr(spec->blockN)),
                  }));
    });
    if (failedAny)
      signalPassFailure();
  }
};
} // namespace
