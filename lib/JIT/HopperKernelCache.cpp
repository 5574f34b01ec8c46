//===- HopperKernelCache.cpp - Compile-or-fetch Hopper kernels ---------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/JIT/HopperKernelCache.h"

#include "fa3/Runtime/KernelCache.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdlib>

using namespace fa3;

llvm::Expected<HopperKernel> fa3::getOrCompileHopperAttention(
    mlir::ModuleOp module, llvm::StringRef function,
    const HopperCompileOptions &options, bool &hit) {
  mlir::Operation *func = module.lookupSymbol(function);
  if (!func)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "no function '%s' in the module",
                                   function.str().c_str());
  std::string text;
  llvm::raw_string_ostream os(text);
  func->print(os);
  const char *dump = std::getenv("FA3_DUMP_IR");
  bool dumpIR = dump && llvm::StringRef(dump) == "1";

  runtime::KernelCache &cache = runtime::KernelCache::getGlobal();
  std::string key = runtime::KernelCache::computeKey(
      {FA3_VERSION, runtime::KernelCache::getBuildId(), "sm_90a", text,
       "block-m=" + std::to_string(options.blockM),
       "block-n=" + std::to_string(options.blockN)});
  if (auto entry = cache.lookup(key)) {
    auto info = runtime::AttentionKernelInfo::fromManifest(entry->manifest);
    if (info) {
      hit = true;
      return HopperKernel{*info, entry->blob, {}};
    }
    llvm::consumeError(info.takeError()); // a stale manifest: recompile
  }
  hit = false;
  HopperCompileOptions compileOptions = options;
  compileOptions.keepStages |= dumpIR;
  auto kernel = compileHopperAttention(module, function, compileOptions);
  if (!kernel)
    return kernel.takeError();
  // A cache that cannot be written costs a recompile next time, nothing more.
  llvm::consumeError(
      cache.put(key, {kernel->ptx, kernel->info.toManifest()}));
  if (dumpIR) {
    for (auto &[name, ir] : kernel->stages)
      llvm::consumeError(cache.putExtra(key, name + ".mlir", ir));
    llvm::consumeError(cache.putExtra(key, "kernel.ptx", kernel->ptx));
  }
  return kernel;
}
