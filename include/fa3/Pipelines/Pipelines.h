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
  PassOptions::Option<bool> grid{
      *this, "grid",
      llvm::cl::desc("Tile as the Hopper pipeline does (fa3-tile{grid=true}, "
                     "the tile order of fa3-order-grid) and run the grids as "
                     "serial loops (fa3-serialize-grid): the CPU checks the "
                     "GPU's tiling"),
      llvm::cl::init(false)};
};

/// fa3.attention on tensors -> LLVM dialect for the host CPU: schedule,
/// tile, online softmax, linalg, bufferization, loops, LLVM.
void buildFA3CPUPipeline(OpPassManager &pm, const CPUPipelineOptions &options);

/// The first half of the CPU pipeline, up to linalg on tensors; the tests
/// and docs use it to show the tile level lowered for the CPU.
void buildFA3ToLinalgPipeline(OpPassManager &pm,
                              const CPUPipelineOptions &options);

struct HopperPipelineOptions
    : public PassPipelineOptions<HopperPipelineOptions> {
  PassOptions::Option<std::string> chip{
      *this, "chip", llvm::cl::desc("Target GPU (only sm_90a)"),
      llvm::cl::init("sm_90a")};
  PassOptions::Option<std::string> format{
      *this, "format",
      llvm::cl::desc("Serialization: isa (PTX), bin (cubin, needs ptxas), "
                     "fatbin or offloading"),
      llvm::cl::init("isa")};
  PassOptions::Option<std::string> toolkitPath{
      *this, "toolkit", llvm::cl::desc("CUDA toolkit path for ptxas"),
      llvm::cl::init("")};
  PassOptions::Option<int64_t> blockM{
      *this, "block-m",
      llvm::cl::desc("Query rows per CTA (0: the cost model's choice)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> blockN{
      *this, "block-n",
      llvm::cl::desc("Key rows per tile (0: the cost model's choice)"),
      llvm::cl::init(0)};
};

/// fa3.attention -> schedule (sm_90a) -> kernels in gpu.module @fa3_kernels
/// lowered to the LLVM/NVVM dialect, the host side annotated with the kernel
/// and its launch metadata.
void buildFA3HopperKernelPipeline(OpPassManager &pm,
                                  const HopperPipelineOptions &options);
/// buildFA3HopperKernelPipeline followed by gpu-module-to-binary.
void buildFA3HopperPipeline(OpPassManager &pm,
                            const HopperPipelineOptions &options);

/// Registers `fa3-cpu-pipeline` and `fa3-to-linalg-pipeline`.
void registerFA3Pipelines();
/// Registers `fa3-hopper-pipeline` and `fa3-hopper-kernel-pipeline`.
void registerFA3HopperPipelines();

} // namespace fa3
} // namespace mlir

#endif // FA3_PIPELINES_PIPELINES_H
