//===- FA3CAPI.cpp - C API of fa3's attention JIT ----------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3-c/FA3.h"

#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/InitAllDialects.h"
#include "fa3/JIT/HopperKernelCache.h"
#include "fa3/Runtime/AttentionLauncher.h"
#include "fa3/Runtime/CudaDriver.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <chrono>
#include <cstdlib>
#include <optional>
#include <cstring>
#include <memory>

using namespace fa3;

struct fa3_kernel {
  HopperKernel kernel;
  runtime::CudaModule module;
  /// The forward's kernel, or the backward's three.
  std::unique_ptr<runtime::CudaKernel> function;
  std::unique_ptr<runtime::AttentionGradKernels> gradKernels;
  /// FP8 forwards: the V' layout kernel.
  std::unique_ptr<runtime::CudaKernel> valueTranspose;
  double compileMs = 0;
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

extern "C" int64_t fa3_select_forward_block_m(int64_t head_dim, int fp8,
                                              int causal, int64_t seq_q) {
  return mlir::fa3::selectHopperForwardBlockM(head_dim, fp8 != 0, causal != 0,
                                              seq_q);
}

/// Compiles (or fetches) the kernel(s) of `function` and loads them on
/// device 0; `backward` says which kind of function `api` accepts.
static fa3_kernel *compileKernel(const char *api, std::optional<bool> backward,
                                 bool load, const char *mlirSource,
                                 const char *function, int64_t blockM,
                                 int64_t blockN, int *cacheHit, char **error) {
  auto start = std::chrono::steady_clock::now();
  if (!mlirSource || !function) {
    setError(error, std::string(api) +
                        ": mlir_source and function must not be NULL");
    return nullptr;
  }
  // Without a driver (PTX only), the cache key records driver 0.
  auto driverVersion = runtime::cudaDriverVersion();
  if (!driverVersion) {
    if (load) {
      setError(error, driverVersion.takeError());
      return nullptr;
    }
    llvm::consumeError(driverVersion.takeError());
    driverVersion = 0;
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
    setError(error, std::string(api) + ": cannot parse the MLIR source:\n" +
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
  // fa3.hadamard and fa3.quantize compile (fa3_compile_ptx shows their
  // PTX) but have no launch entry point here: they run in HopperProgram's
  // chains (fa3-run --device=cuda).
  if (load && kernel->info.kind != runtime::AttentionKernelInfo::Kind::Attention) {
    setError(error, std::string(api) + ": '" + function +
                        "' is an fa3.hadamard or fa3.quantize function; the C "
                        "API launches attention kernels only (fa3_compile_ptx "
                        "gives its PTX; fa3-run --device=cuda runs it)");
    return nullptr;
  }
  if (backward && kernel->info.backward != *backward) {
    setError(error, std::string(api) + ": '" + function + "' is " +
                        (*backward ? "a forward (fa3.attention) function; "
                                    "compile it with fa3_compile_attention"
                                  : "a backward (fa3.attention_grad) "
                                    "function; compile it with "
                                    "fa3_compile_attention_grad"));
    return nullptr;
  }
  if (cacheHit)
    *cacheHit = hit;
  auto result = std::make_unique<fa3_kernel>();
  if (!load) {
    result->kernel = std::move(*kernel);
    result->compileMs = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    return result.release();
  }
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
  if (kernel->info.backward) {
    auto kernels = runtime::getAttentionGradKernels(*cudaModule, kernel->info);
    if (!kernels) {
      setError(error, kernels.takeError());
      return nullptr;
    }
    result->gradKernels =
        std::make_unique<runtime::AttentionGradKernels>(std::move(*kernels));
  } else {
    auto cudaFunction = cudaModule->getFunction(kernel->info.name);
    if (!cudaFunction) {
      setError(error, cudaFunction.takeError());
      return nullptr;
    }
    result->function =
        std::make_unique<runtime::CudaKernel>(std::move(*cudaFunction));
    if (kernel->info.fp8) {
      auto transpose = cudaModule->getFunction(kernel->info.name + "_vt");
      if (!transpose) {
        setError(error, transpose.takeError());
        return nullptr;
      }
      result->valueTranspose =
          std::make_unique<runtime::CudaKernel>(std::move(*transpose));
    }
  }
  result->kernel = std::move(*kernel);
  result->module = std::move(*cudaModule);
  result->compileMs = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
  return result.release();
}

extern "C" fa3_kernel *fa3_compile_attention(const char *mlirSource,
                                             const char *function,
                                             int64_t blockM, int64_t blockN,
                                             int *cacheHit, char **error) {
  return compileKernel("fa3_compile_attention", /*backward=*/false,
                       /*load=*/true, mlirSource, function, blockM, blockN,
                       cacheHit, error);
}

extern "C" fa3_kernel *fa3_compile_attention_grad(const char *mlirSource,
                                                  const char *function,
                                                  int64_t blockM,
                                                  int64_t blockN, int *cacheHit,
                                                  char **error) {
  return compileKernel("fa3_compile_attention_grad", /*backward=*/true,
                       /*load=*/true, mlirSource, function, blockM, blockN,
                       cacheHit, error);
}

extern "C" fa3_kernel *fa3_compile_ptx(const char *mlirSource,
                                       const char *function, int64_t blockM,
                                       int64_t blockN, int *cacheHit,
                                       char **error) {
  return compileKernel("fa3_compile_ptx", std::nullopt, /*load=*/false,
                       mlirSource, function, blockM, blockN, cacheHit, error);
}

extern "C" double fa3_kernel_compile_ms(const fa3_kernel *kernel) {
  return kernel ? kernel->compileMs : 0;
}

extern "C" int fa3_launch_attention(const fa3_kernel *kernel, uint64_t q,
                                    uint64_t k, uint64_t v, uint64_t out,
                                    uint64_t lse, int64_t batch, int64_t seqQ,
                                    int64_t seqK, void *stream, char **error) {
  if (!kernel || !kernel->function) {
    setError(error, kernel ? (kernel->kernel.info.backward
                                  ? "fa3_launch_attention: the kernel is a "
                                    "backward; launch it with "
                                    "fa3_launch_attention_grad"
                                  : "fa3_launch_attention: the kernel was "
                                    "compiled to PTX only (fa3_compile_ptx)")
                           : "fa3_launch_attention: kernel is NULL");
    return 1;
  }
  if (batch < 0 || seqQ < 0 || seqK < 0) {
    setError(error, "fa3_launch_attention: negative batch or sequence length");
    return 1;
  }
  if (kernel->kernel.info.fp8) {
    setError(error, "fa3_launch_attention: the kernel is an FP8 forward; "
                    "launch it with fa3_launch_attention_fp8");
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

extern "C" int64_t fa3_attention_workspace_size(const fa3_kernel *kernel,
                                                int64_t batch, int64_t seqQ,
                                                int64_t seqK) {
  if (!kernel || kernel->kernel.info.backward || batch < 0 || seqQ < 0 ||
      seqK < 0)
    return -1;
  return runtime::attentionForwardWorkspaceBytes(kernel->kernel.info, batch,
                                                 seqK);
}

extern "C" int fa3_launch_attention_fp8(
    const fa3_kernel *kernel, uint64_t q, uint64_t k, uint64_t v, uint64_t out,
    uint64_t lse, uint64_t qDescale, uint64_t kDescale, uint64_t vDescale,
    uint64_t workspace, int64_t batch, int64_t seqQ, int64_t seqK,
    void *stream, char **error) {
  if (!kernel || !kernel->valueTranspose) {
    setError(error, kernel ? "fa3_launch_attention_fp8: not a loaded FP8 "
                             "forward kernel"
                           : "fa3_launch_attention_fp8: kernel is NULL");
    return 1;
  }
  if (batch < 0 || seqQ < 0 || seqK < 0) {
    setError(error,
             "fa3_launch_attention_fp8: negative batch or sequence length");
    return 1;
  }
  runtime::AttentionDeviceArgs args{q,        k,        v,        out,
                                    lse,      batch,    seqQ,     seqK,
                                    qDescale, kDescale, vDescale, workspace};
  if (llvm::Error err = runtime::launchAttentionForwardFP8(
          *kernel->valueTranspose, *kernel->function, kernel->kernel.info,
          args, static_cast<runtime::CudaStream>(stream))) {
    setError(error, std::move(err));
    return 1;
  }
  return 0;
}

extern "C" int64_t fa3_attention_grad_workspace_size(const fa3_kernel *kernel,
                                                     int64_t batch,
                                                     int64_t seqQ,
                                                     int64_t seqK) {
  if (!kernel || !kernel->gradKernels || batch < 0 || seqQ < 0 || seqK < 0)
    return -1;
  return runtime::attentionGradWorkspaceBytes(kernel->kernel.info, batch, seqQ,
                                              seqK);
}

extern "C" int fa3_launch_attention_grad(
    const fa3_kernel *kernel, uint64_t gradOut, uint64_t q, uint64_t k,
    uint64_t v, uint64_t out, uint64_t lse, uint64_t gradQ, uint64_t gradK,
    uint64_t gradV, uint64_t workspace, int64_t batch, int64_t seqQ,
    int64_t seqK, void *stream, char **error) {
  if (!kernel || !kernel->gradKernels) {
    setError(error, kernel ? (kernel->kernel.info.backward
                                  ? "fa3_launch_attention_grad: the kernel was "
                                    "compiled to PTX only (fa3_compile_ptx)"
                                  : "fa3_launch_attention_grad: the kernel is "
                                    "a forward; launch it with "
                                    "fa3_launch_attention")
                           : "fa3_launch_attention_grad: kernel is NULL");
    return 1;
  }
  if (batch < 0 || seqQ < 0 || seqK < 0) {
    setError(error,
             "fa3_launch_attention_grad: negative batch or sequence length");
    return 1;
  }
  runtime::AttentionGradDeviceArgs args;
  args.gradOut = gradOut;
  args.q = q;
  args.k = k;
  args.v = v;
  args.out = out;
  args.lse = lse;
  args.gradQ = gradQ;
  args.gradK = gradK;
  args.gradV = gradV;
  args.workspace = workspace;
  args.batch = batch;
  args.seqQ = seqQ;
  args.seqK = seqK;
  if (llvm::Error err = runtime::launchAttentionBackward(
          *kernel->gradKernels, kernel->kernel.info, args,
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
