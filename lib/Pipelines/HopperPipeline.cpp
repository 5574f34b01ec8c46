//===- HopperPipeline.cpp - fa3-hopper-pipeline ------------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Pipelines/Pipelines.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::fa3;

void mlir::fa3::buildFA3HopperKernelPipeline(
    OpPassManager &pm, const HopperPipelineOptions &options) {
  // Attentions marked #fa3.fp8 become quantize + FP8 attention first.
  pm.addPass(createFA3CastFP8());
  FA3SelectScheduleOptions schedule;
  schedule.target = "sm_90a";
  schedule.blockM = options.blockM;
  schedule.blockN = options.blockN;
  pm.addPass(createFA3SelectSchedule(schedule));
  // Each attention (forward, FP8 forward, backward, packed or not): a kernel
  // function at the tensor level, taken to the tile level by the CPU
  // pipeline's passes (the grid form), then to its kernels.
  FA3OutlineHopperKernelsOptions outline;
  outline.chip = options.chip;
  pm.addPass(createFA3OutlineHopperKernels(outline));
  OpPassManager &tiled = pm.nest<gpu::GPUModuleOp>();
  OpPassManager &kernelFunctions = tiled.nest<func::FuncOp>();
  FA3TileOptions tile;
  tile.grid = true;
  kernelFunctions.addPass(createFA3Tile(tile));
  kernelFunctions.addPass(createFA3FuseSoftmax());
  // The backward step's MMAs where FA3 issues them (the kernel emits the
  // step op by op, in this order).
  kernelFunctions.addPass(createFA3GradMmaOrder());
  // The schedule's ideas, each a pass on the tile level: rescale_threshold
  // (kept row maxima), producer_regs (a producer region filling the K/V
  // rings, the tile ops in the consumers region), intra_wg_overlap (the key
  // loop rotated by one stage) and pingpong (each consumer turn's MMAs).
  kernelFunctions.addPass(createFA3LazyRescale());
  kernelFunctions.addPass(createFA3WarpSpecialize());
  kernelFunctions.addPass(createFA3IntraWarpgroupOverlap());
  kernelFunctions.addPass(createFA3Pingpong());
  kernelFunctions.addPass(createFA3OrderGrid());
  // persistent (min(tiles, SMs) CTAs walking the ordered tiles).
  kernelFunctions.addPass(createFA3PersistentGrid());
  tiled.addPass(createConvertFA3TileToHopper());
  // The FP8 preparation kernels (fa3.hadamard, fa3.quantize) from L0.
  ConvertFA3ToHopperOptions hopper;
  hopper.chip = options.chip;
  pm.addPass(createConvertFA3ToHopper(hopper));

  // The kernels are built from arith, scf, llvm and nvvm ops.
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  // The Hopper kernel level's own ops (fa3.wgmma, fa3.named_barrier) to PTX.
  kernels.addPass(createConvertFA3KernelToNVVM());
  kernels.addPass(createSCFToControlFlowPass());
  kernels.addPass(createConvertNVVMToLLVMPass());
  kernels.addPass(createArithToLLVMConversionPass());
  // convert-cf-to-llvm is anchored on builtin.module; the host side has no
  // cf ops, so running it on the whole module only touches the kernels.
  pm.addPass(createConvertControlFlowToLLVMPass());
  OpPassManager &cleanup = pm.nest<gpu::GPUModuleOp>();
  cleanup.addPass(createCanonicalizerPass());
  cleanup.addPass(createCSEPass());
  cleanup.addPass(createReconcileUnrealizedCastsPass());
}

void mlir::fa3::buildFA3HopperPipeline(OpPassManager &pm,
                                       const HopperPipelineOptions &options) {
  buildFA3HopperKernelPipeline(pm, options);
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = options.format;
  if (!options.toolkitPath.empty())
    binary.toolkitPath = options.toolkitPath;
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

void mlir::fa3::registerFA3HopperPipelines() {
  PassPipelineRegistration<HopperPipelineOptions>(
      "fa3-hopper-pipeline",
      "Compile fa3.attention to sm_90a kernels (TMA + wgmma) and serialize "
      "them: format=isa gives PTX, format=bin a cubin (needs ptxas)",
      buildFA3HopperPipeline);
  PassPipelineRegistration<HopperPipelineOptions>(
      "fa3-hopper-kernel-pipeline",
      "fa3-hopper-pipeline without the serialization: the kernels in the "
      "LLVM/NVVM dialect",
      buildFA3HopperKernelPipeline);
}
