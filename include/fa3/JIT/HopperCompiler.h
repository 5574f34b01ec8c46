//===- HopperCompiler.h - Compile fa3 attention for sm_90a -------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_JIT_HOPPERCOMPILER_H
#define FA3_JIT_HOPPERCOMPILER_H

#include "fa3/Runtime/AttentionLauncher.h"

#include "llvm/Support/Error.h"

#include <string>
#include <utility>
#include <vector>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace fa3 {

struct HopperCompileOptions {
  /// Tile overrides (0: the cost model's choice).
  int64_t blockM = 0, blockN = 0;
  /// Keep each stage's IR in HopperKernel::stages.
  bool keepStages = false;
};

/// A compiled forward kernel: its PTX and what the runtime needs to launch it.
struct HopperKernel {
  runtime::AttentionKernelInfo info;
  std::string ptx;
  /// (stage name, IR) when HopperCompileOptions::keepStages is set.
  std::vector<std::pair<std::string, std::string>> stages;
};

/// Compiles `function` of `module` with fa3-hopper-pipeline (format=isa).
/// The function's body must be one fa3.attention on its three arguments
/// (four with dropout's rng) whose (O, LSE) it returns: the runtime, not
/// compiled host code, launches the kernel. `module` is not modified.
llvm::Expected<HopperKernel>
compileHopperAttention(mlir::ModuleOp module, llvm::StringRef function,
                       const HopperCompileOptions &options = {});

} // namespace fa3

#endif // FA3_JIT_HOPPERCOMPILER_H
