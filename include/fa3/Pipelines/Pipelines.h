//===- Pipelines.h - fa3 named pass pipelines --------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_PIPELINES_PIPELINES_H
#define FA3_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassOptions.h"

namespace mlir {
class OpPassManager;

namespace fa3 {

struct CPUPipelineOptions : public PassPipelineOptions<CPUPipelineOptions> {
  PassOptions::Option<int64_t> blockM{
      *this, "block-m",
      llvm::cl::desc("Query rows per tile (0: the cost model's choice)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> blockN{
      *this, "block-n",
      llvm::cl::desc("Key rows per tile (0: the cost model's choice)"),
      llvm::cl::init(0)};
};

/// fa3.attention on tensors -> LLVM dialect for the host CPU: schedule,
/// tile, online softmax, linalg, bufferization, loops, LLVM.
void buildFA3CPUPipeline(OpPassManager &pm, const CPUPipelineOptions &options);

/// The first half of the CPU pipeline, up to linalg on tensors; the tests
/// and docs use it to show the tile level lowered for the CPU.
void buildFA3ToLinalgPipeline(OpPassManager &pm,
                              const CPUPipelineOptions &options);

/// Registers `fa3-cpu-pipeline` with the pass registry.
void registerFA3Pipelines();

} // namespace fa3
} // namespace mlir

#endif // FA3_PIPELINES_PIPELINES_H
