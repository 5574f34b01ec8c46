//===- FA3CAPI.cpp - C API of fa3's attention JIT ----------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3-c/FA3.h"

#include "fa3/InitAllDialects.h"
#include "fa3/JIT/HopperKernelCache.h"
#include "fa3/Runtime/AttentionLauncher.h"
#include "fa3/Runtime/CudaDriver.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <cstdlib>
#include <cstring>
#include <memory>

using namespace fa3;

struct fa3_kernel {
  HopperKernel kernel;
  runtime::CudaModule module;
  std::unique_ptr<runtime::CudaKernel> function;
};

static void setError(char **error, const std::string &message) {
  if (!error)
    return;
  *error = static_cast<char *>(std::malloc(message.size() + 1));
  std::memcpy(*error, message.c_str(), message.size() + 1);
}

static void setError(char **error, llvm::Error err) {
  setError(error, llvm::toString(std::move(err)));
}

extern "C" const char *fa3_version(void) { return FA3_VERSION; }

extern "C" fa3_kernel *fa3_compile_attention(const char *mlirSource,
                                             const char *function,
                                             int64_t blockM, int64_t blockN,
                                             int *cacheHit, char **error) {
  if (!mlirSource || !function) {
    setError(error, "fa3_compile_attention: mlir_source and function must "
                    "not be NULL");
    return nullptr;
  }
  auto driverVersion = runtime::cudaDriverVersion();
  if (!driverVersion) {
    setError(error, driverVersion.takeError());
    return nullptr;
  }
  mlir::DialectRegistry registry;
  mlir::fa3::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    os << diag.getLocation() << ": " << diag << "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(mlirSource, &context);
  if (!module) {
    setError(error, "fa3_compile_attention: cannot parse the MLIR source:\n" +
                        diagnostics);
    return nullptr;
  }
  HopperCompileOptions options;
  options.blockM = blockM;
  options.blockN = blockN;
  bool hit = false;
  auto kernel = getOrCompileHopperAttention(*module, function, options,
                                            *driverVersion, hit);
  if (!kernel) {
    setError(error, kernel.takeError());
    return nullptr;
  }
  if (cacheHit)
    *cacheHit = hit;
  auto device = runtime::CudaDevice::get(0);
  if (!device) {
    setError(error, device.takeError());
    return nullptr;
  }
  if (device->getComputeCapabilityMajor() != 9) {
    setError(error, "fa3 kernels need a Hopper GPU (sm_90a); the current "
                    "device is " +
                        device->getName().str() + " (" +
                        device->getSmArch() + ")");
    return nullptr;
  }
  auto cudaModule =
      runtime::CudaModule::load(*device, kernel->ptx, kernel->info.name);
  if (!cudaModule) {
    setError(error, cudaModule.takeError());
    return nullptr;
  }
  auto cudaFunction = cudaModule->getFunction(kernel->info.name);
  if (!cudaFunction) {
    setError(error, cudaFunction.takeError());
    return nullptr;
  }
  auto *result = new fa3_kernel{std::move(*kernel), std::move(*cudaModule),
                                nullptr};
  result->function =
      std::make_unique<runtime::CudaKernel>(std::move(*cudaFunction));
  return result;
}

extern "C" int fa3_launch_attention(const fa3_kernel *kernel, uint64_t q,
                                    uint64_t k, uint64_t v, uint64_t out,
                                    uint64_t lse, int64_t batch, int64_t seqQ,
                                    int64_t seqK, void *stream, char **error) {
  if (!kernel) {
    setError(error, "fa3_launch_attention: kernel is NULL");
    return 1;
  }
  if (batch < 0 || seqQ < 0 || seqK < 0) {
    setError(error, "fa3_launch_attention: negative batch or sequence length");
    return 1;
  }
  runtime::AttentionDeviceArgs args{q, k, v, out, lse, batch, seqQ, seqK};
  if (llvm::Error err = runtime::launchAttentionForward(
          *kernel->function, kernel->kernel.info, args,
          static_cast<runtime::CudaStream>(stream))) {
    setError(error, std::move(err));
    return 1;
  }
  return 0;
}

extern "C" const char *fa3_kernel_name(const fa3_kernel *kernel) {
  return kernel ? kernel->kernel.info.name.c_str() : "";
}

extern "C" const char *fa3_kernel_ptx(const fa3_kernel *kernel) {
  return kernel ? kernel->kernel.ptx.c_str() : "";
}

extern "C" void fa3_destroy_kernel(fa3_kernel *kernel) { delete kernel; }

extern "C" void fa3_free_string(char *string) { std::free(string); }
