//===- CPUPipeline.cpp - fa3-cpu-pipeline -----------------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Pipelines/Pipelines.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::fa3;

void mlir::fa3::buildFA3ToLinalgPipeline(OpPassManager &pm,
                                         const CPUPipelineOptions &options) {
  // Attentions marked #fa3.fp8 become quantize + FP8 attention first.
  pm.addPass(createFA3CastFP8());
  FA3SelectScheduleOptions schedule;
  schedule.target = "cpu";
  schedule.blockM = options.blockM;
  schedule.blockN = options.blockN;
  pm.addPass(createFA3SelectSchedule(schedule));
  FA3TileOptions tile;
  tile.grid = options.grid;
  pm.addPass(createFA3Tile(tile));
  pm.addPass(createFA3FuseSoftmax());
  // The backward steps in the order Hopper issues their MMAs (SSA order
  // only: the float64 tests check it computes the same).
  pm.addPass(createFA3GradMmaOrder());
  if (options.grid) {
    // The Hopper grids' tile order too (fa3-order-grid renumbers causal
    // grids): the serial loops then visit every renumbered tile, so a
    // renumbering that missed or repeated one fails the float64 check.
    pm.addNestedPass<func::FuncOp>(createFA3OrderGrid());
    pm.addPass(createFA3SerializeGrid());
  }
  // A schedule's rescale_threshold keeps row maxima here as on Hopper.
  pm.addPass(createFA3LazyRescale());
  // A schedule with intra_wg_overlap rotates the key loop here as on Hopper
  // (the same arithmetic, so the CPU checks the rotated loop's numbers).
  pm.addPass(createFA3IntraWarpgroupOverlap());
  pm.addPass(createConvertFA3ToLinalg());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void mlir::fa3::buildFA3CPUPipeline(OpPassManager &pm,
                                    const CPUPipelineOptions &options) {
  buildFA3ToLinalgPipeline(pm, options);

  // Functions keep plain (identity-layout) memrefs at their boundary so that
  // fa3-run and C callers see dense arrays.
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  // The softmax state carried by the key loop is rebuilt each step.
  bufferize.allowReturnAllocsFromLoops = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  // Tiles are allocated per loop iteration; free them there too.
  bufferization::buildBufferDeallocationPipeline(pm);
  // A result that may alias an argument (a KV cache updated in place) is
  // returned as a bufferization.clone: a new buffer the caller owns.
  pm.addPass(createConvertBufferizationToMemRefPass());

  pm.addPass(createConvertLinalgToLoopsPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createCanonicalizerPass());

  // bf16 <-> f32 conversions become integer code: not every host has them.
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void mlir::fa3::registerFA3Pipelines() {
  PassPipelineRegistration<CPUPipelineOptions>(
      "fa3-cpu-pipeline",
      "Lower fa3.attention to the LLVM dialect for the host CPU (schedule, "
      "tile, online softmax, linalg, bufferize, loops, LLVM)",
      buildFA3CPUPipeline);
  PassPipelineRegistration<CPUPipelineOptions>(
      "fa3-to-linalg-pipeline",
      "Lower fa3.attention to linalg on tensors (the first half of "
      "fa3-cpu-pipeline)",
      buildFA3ToLinalgPipeline);
}
