//===- HopperKernelCache.h - Compile-or-fetch Hopper kernels -----*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_JIT_HOPPERKERNELCACHE_H
#define FA3_JIT_HOPPERKERNELCACHE_H

#include "fa3/JIT/HopperCompiler.h"

namespace fa3 {

/// The kernel of `function`, from runtime::KernelCache::getGlobal() when an
/// entry exists, else compiled with compileHopperAttention and stored. The
/// key covers the fa3 version, the function's IR, the tile options, the arch
/// and `driverVersion` (the driver's JIT turns the PTX into SASS, so it
/// stands for the ptxas version). With FA3_DUMP_IR=1 each stage's IR and the
/// PTX are kept next to the entry. `hit` says which way it went.
llvm::Expected<HopperKernel>
getOrCompileHopperAttention(mlir::ModuleOp module, llvm::StringRef function,
                            const HopperCompileOptions &options,
                            int driverVersion, bool &hit);

} // namespace fa3

#endif // FA3_JIT_HOPPERKERNELCACHE_H
