//===- fa3-plugin.cpp - fa3 as a plugin of upstream mlir-opt ---------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//   mlir-opt --load-dialect-plugin=libFA3Plugin.so attn.mlir
//   mlir-opt --load-dialect-plugin=libFA3Plugin.so \
//            --load-pass-plugin=libFA3Plugin.so attn.mlir \
//            --pass-pipeline='builtin.module(fa3-cpu-pipeline)'
//
// (mlir-opt builds its --<pass> flags before it loads plugins, so plugin
// passes are named in --pass-pipeline.)
//
// The plugin holds fa3's code only; MLIR and LLVM come from the libMLIR.so
// and libLLVM.so that mlir-opt links, so that types, TypeIDs and the pass
// registry are the process's single copy.
//
//===----------------------------------------------------------------------===//

#include "fa3/InitAllDialects.h"
#include "fa3/InitAllPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Support/Compiler.h"

/// The set fa3-opt loads. mlir-opt has registered most of it already;
/// inserting a dialect or an extension a second time is a no-op when it is
/// the same one, which it is with one copy of MLIR in the process.
extern "C" LLVM_ATTRIBUTE_WEAK mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "FA3", FA3_VERSION,
          [](mlir::DialectRegistry *registry) {
            mlir::fa3::registerAllDialects(*registry);
          }};
}

/// fa3's own passes and pipelines: mlir-opt has registered every upstream
/// pass they are built from already (registering a named pipeline twice
/// aborts MLIR builds with assertions).
extern "C" LLVM_ATTRIBUTE_WEAK mlir::PassPluginLibraryInfo
mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "FA3", FA3_VERSION,
          []() { mlir::fa3::registerFA3OwnPasses(); }};
}
