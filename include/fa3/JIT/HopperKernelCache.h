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
/// key covers the fa3 version and build, the function's IR, the tile
/// options and the arch. An entry holds the PTX and the kernel's manifest,
/// neither of which depends on the CUDA driver (its JIT assembles the PTX
/// each time a module is loaded), so a PTX-only compile and a compile for a
/// GPU share an entry. With FA3_DUMP_IR=1 each stage's IR and the PTX are
/// kept next to the entry. `hit` says which way it went.
llvm::Expected<HopperKernel>
getOrCompileHopperAttention(mlir::ModuleOp module, llvm::StringRef function,
                            const HopperCompileOptions &options, bool &hit);

} // namespace fa3

#endif // FA3_JIT_HOPPERKERNELCACHE_H
