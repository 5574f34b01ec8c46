//===- FA3CAPI.cpp - C API of fa3's attention JIT ----------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3-c/FA3.h"

#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Dialect/FA3/Utils/KVCacheHeuristics.h"
#include "fa3/InitAllDialects.h"
#include "fa3/JIT/HopperKernelCache.h"
#include "fa3/Runtime/AttentionLauncher.h"
#include "fa3/Runtime/CudaDriver.h"
#include "fa3/Runtime/FP8PrepLauncher.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

using namespace fa3;

struct fa3_kernel {
  HopperKernel kernel;
  /// The device the kernel is loaded on (none for PTX only); launches run
  /// in its context.
  std::optional<runtime::CudaDevice> device;
  runtime::CudaModule module;
  /// The forward's kernel, or the backward's three.
  std::unique_ptr<runtime::CudaKernel> function;
  std::unique_ptr<runtime::AttentionGradKernels> gradKernels;
  /// FP8 forwards: the V' layout kernel.
  std::unique_ptr<runtime::CudaKernel> valueTranspose;
  /// Split-KV forwards: the kernel that merges the partial attentions.
  std::unique_ptr<runtime::CudaKernel> combine;
  /// fa3.quantize functions: the amax and cast kernels.
  std::unique_ptr<runtime::QuantizeKernels> quantizeKernels;
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

/// Runs `launch` (returning llvm::Error) in the context of the kernel's
/// device, restoring the caller's: 0, or 1 with `*error` set.
template <typename Launch>
static int launchOnDevice(const fa3_kernel &kernel, char **error,
                          Launch &&launch) {
  auto scope = runtime::ScopedCudaContext::enter(*kernel.device);
  if (!scope) {
    setError(error, scope.takeError());
    return 1;
  }
  if (llvm::Error err = launch()) {
    setError(error, std::move(err));
    return 1;
  }
  return 0;
}

extern "C" const char *fa3_version(void) { return FA3_VERSION; }

extern "C" int64_t fa3_select_num_splits(int64_t work_tiles,
                                         int64_t multiprocessors,
                                         int64_t key_blocks,
                                         int64_t max_splits) {
  return mlir::fa3::selectNumSplits(work_tiles, multiprocessors, key_blocks,
                                    max_splits);
}

extern "C" int fa3_should_pack_gqa(int64_t seq_q, int64_t group_size,
                                   int64_t block_m) {
  return mlir::fa3::shouldPackGQA(seq_q, group_size, block_m) ? 1 : 0;
}

extern "C" void fa3_select_forward_schedule(int64_t head_dim, int fp8,
                                            int causal, int64_t seq_q,
                                            int64_t seq_k, fa3_schedule *out) {
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  context.loadDialect<mlir::fa3::FA3Dialect>();
  mlir::Type element = fp8 ? mlir::Type(mlir::Float8E4M3FNType::get(&context))
                           : mlir::Type(mlir::BFloat16Type::get(&context));
  mlir::fa3::ScheduleAttr chosen = *mlir::fa3::selectSchedule(
      &context, "sm_90a", head_dim, element, causal != 0,
      seq_q > 0 ? seq_q : mlir::ShapedType::kDynamic,
      seq_k > 0 ? seq_k : mlir::ShapedType::kDynamic);
  *out = fa3_schedule{chosen.getBlockM(),          chosen.getBlockN(),
                      chosen.getStages(),          chosen.getConsumerWgs(),
                      chosen.getProducerRegs(),    chosen.getConsumerRegs(),
                      chosen.getPingpong(),        chosen.getIntraWgOverlap(),
                      chosen.getPersistent(),      chosen.getCluster(),
                      chosen.getRescaleThreshold(), chosen.getPolyExp2()};
}

/// The kind of function an entry point compiles.
enum class Accepts { Forward, Backward, Quantize, Any };

/// Compiles (or fetches) the kernel(s) of `function` and loads them on the
/// device of the calling thread's current CUDA context (device 0 when there
/// is none) unless `accepts` is Any (PTX only).
static fa3_kernel *compileKernel(const char *api, Accepts accepts,
                                 const char *mlirSource,
                                 const char *function, int64_t blockM,
                                 int64_t blockN, int *cacheHit, char **error) {
  auto start = std::chrono::steady_clock::now();
  bool load = accepts != Accepts::Any;
  if (!mlirSource || !function) {
    setError(error, std::string(api) +
                        ": mlir_source and function must not be NULL");
    return nullptr;
  }
  // A kernel to load needs the driver: fail before compiling anything.
  if (load) {
    if (auto driverVersion = runtime::cudaDriverVersion(); !driverVersion) {
      setError(error, driverVersion.takeError());
      return nullptr;
    }
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
  auto kernel = getOrCompileHopperAttention(*module, function, options, hit);
  if (!kernel) {
    setError(error, kernel.takeError());
    return nullptr;
  }
  using Kind = runtime::AttentionKernelInfo::Kind;
  const runtime::AttentionKernelInfo &info = kernel->info;
  // What the function is, and the entry point that compiles it.
  const char *found = info.kind == Kind::Hadamard ? "an fa3.hadamard function"
                      : info.kind == Kind::Quantize
                          ? "an fa3.quantize function; compile it with "
                            "fa3_compile_quantize"
                      : info.backward ? "a backward (fa3.attention_grad or "
                                        "fa3.attention_varlen_grad) function; "
                                        "compile it with "
                                        "fa3_compile_attention_grad"
                                      : "a forward (fa3.attention) function; "
                                        "compile it with fa3_compile_attention";
  bool matches =
      accepts == Accepts::Any ||
      (accepts == Accepts::Quantize && info.kind == Kind::Quantize) ||
      (info.kind == Kind::Attention &&
       info.backward == (accepts == Accepts::Backward) &&
       accepts != Accepts::Quantize);
  if (!matches) {
    // fa3.hadamard alone has no launch entry point: fa3_compile_quantize
    // takes the quantization with the transform folded in (hadamard_seed).
    setError(error, std::string(api) + ": '" + function + "' is " + found +
                        (info.kind == Kind::Hadamard
                             ? " (fa3_compile_ptx gives its PTX; fa3-run "
                               "--device=cuda runs it)"
                             : ""));
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
  auto device = runtime::CudaDevice::getCurrent();
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
  if (info.kind == Kind::Quantize) {
    auto kernels = runtime::getQuantizeKernels(*cudaModule, info);
    if (!kernels) {
      setError(error, kernels.takeError());
      return nullptr;
    }
    result->quantizeKernels =
        std::make_unique<runtime::QuantizeKernels>(std::move(*kernels));
  } else if (kernel->info.backward) {
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
    if (kernel->info.numSplits > 1) {
      auto combine = cudaModule->getFunction(
          runtime::attentionCombineKernelName(kernel->info));
      if (!combine) {
        setError(error, combine.takeError());
        return nullptr;
      }
      result->combine =
          std::make_unique<runtime::CudaKernel>(std::move(*combine));
    }
  }
  // Kernels above 48 KiB of shared memory opt in once, at load.
  for (const runtime::CudaKernel *function :
       {result->function.get(),
        result->gradKernels ? &result->gradKernels->main : nullptr})
    if (function)
      if (llvm::Error err = function->setMaxDynamicSharedMemory(
              unsigned(kernel->info.sharedMemory))) {
        setError(error, std::move(err));
        return nullptr;
      }
  result->kernel = std::move(*kernel);
  result->device = *device;
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
  return compileKernel("fa3_compile_attention", Accepts::Forward, mlirSource,
                       function, blockM, blockN, cacheHit, error);
}

extern "C" fa3_kernel *fa3_compile_attention_grad(const char *mlirSource,
                                                  const char *function,
                                                  int64_t blockM,
                                                  int64_t blockN, int *cacheHit,
                                                  char **error) {
  return compileKernel("fa3_compile_attention_grad", Accepts::Backward,
                       mlirSource, function, blockM, blockN, cacheHit, error);
}

extern "C" fa3_kernel *fa3_compile_ptx(const char *mlirSource,
                                       const char *function, int64_t blockM,
                                       int64_t blockN, int *cacheHit,
                                       char **error) {
  return compileKernel("fa3_compile_ptx", Accepts::Any, mlirSource, function,
                       blockM, blockN, cacheHit, error);
}

extern "C" fa3_kernel *fa3_compile_quantize(const char *mlirSource,
                                            const char *function,
                                            int *cacheHit, char **error) {
  return compileKernel("fa3_compile_quantize", Accepts::Quantize, mlirSource,
                       function, 0, 0, cacheHit, error);
}

extern "C" int64_t fa3_quantize_workspace_size(const fa3_kernel *kernel,
                                               int64_t batch) {
  if (!kernel || !kernel->quantizeKernels || batch < 0)
    return -1;
  return runtime::quantizeWorkspaceBytes(kernel->kernel.info, batch);
}

extern "C" int fa3_launch_quantize(const fa3_kernel *kernel, uint64_t input,
                                   uint64_t output, uint64_t descale,
                                   uint64_t workspace, int64_t batch,
                                   int64_t seq, void *stream, char **error) {
  if (!kernel || !kernel->quantizeKernels) {
    setError(error, kernel ? "fa3_launch_quantize: not a loaded fa3.quantize "
                             "kernel (fa3_compile_quantize)"
                           : "fa3_launch_quantize: kernel is NULL");
    return 1;
  }
  runtime::QuantizeDeviceArgs args;
  args.input = input;
  args.output = output;
  args.descale = descale;
  args.workspace = workspace;
  args.batch = batch;
  args.seq = seq;
  return launchOnDevice(*kernel, error, [&] {
    return runtime::launchQuantize(*kernel->quantizeKernels,
                                   kernel->kernel.info, args,
                                   static_cast<runtime::CudaStream>(stream));
  });
}

extern "C" double fa3_kernel_compile_ms(const fa3_kernel *kernel) {
  return kernel ? kernel->compileMs : 0;
}

/// The forward launch of fa3_launch_attention and the KV-cache entry points
/// (`args` with cache_seqlens, the page table and the split-KV workspace as
/// each has them), named `entry` in errors. A split-KV kernel launches with
/// its merge.
static int launchForward(const fa3_kernel *kernel, const char *entry,
                         runtime::AttentionDeviceArgs args, void *stream,
                         char **error);

/// The entry point that launches a forward kernel like `info`'s.
static const char *forwardEntryFor(const runtime::AttentionKernelInfo &info) {
  if (info.varlen)
    return "fa3_launch_attention_varlen";
  if (info.fp8)
    return "fa3_launch_attention_fp8";
  bool splits = info.numSplits > 1;
  if (info.paged)
    return splits ? "fa3_launch_attention_paged_kvcache_splits"
                  : "fa3_launch_attention_paged_kvcache";
  if (info.kvCache)
    return splits ? "fa3_launch_attention_kvcache_splits"
                  : "fa3_launch_attention_kvcache";
  return "fa3_launch_attention";
}

/// The entry point that launches a backward kernel like `info`'s.
static const char *backwardEntryFor(const runtime::AttentionKernelInfo &info) {
  return info.varlen ? "fa3_launch_attention_varlen_grad"
                     : "fa3_launch_attention_grad";
}

/// Whether `entry` (a KV-cache entry point, split-KV or not as `splits`
/// says) launches `kernel`; if not, sets `*error` naming the one that does.
/// NULL and PTX-only kernels pass (launchForward reports them).
static bool entryLaunches(const fa3_kernel *kernel, const char *entry,
                          bool paged, bool splits, char **error) {
  if (!kernel || !kernel->function)
    return true;
  const runtime::AttentionKernelInfo &info = kernel->kernel.info;
  std::string name = entry;
  if (!info.kvCache) {
    setError(error, name +
                        ": the kernel is not an fa3.attention_kvcache "
                        "forward; launch it with " +
                        forwardEntryFor(info));
    return false;
  }
  if (info.paged != paged) {
    setError(error, name +
                        (info.paged ? ": the kernel reads a paged KV "
                                      "cache; launch it with "
                                    : ": the kernel does not read a paged "
                                      "KV cache; launch it with ") +
                        forwardEntryFor(info));
    return false;
  }
  if ((info.numSplits > 1) != splits) {
    setError(error, name +
                        (splits ? ": the kernel attends in one split "
                                  "(num_splits = 1); launch it with "
                                : ": the kernel splits the keys (num_splits "
                                  "= " +
                                      std::to_string(info.numSplits) +
                                      "); launch it with ") +
                        forwardEntryFor(info) +
                        (splits ? ""
                                : " and a workspace of "
                                  "fa3_attention_workspace_size bytes"));
    return false;
  }
  return true;
}

/// The device pointers a KV-cache entry takes besides the tensors: the
/// lengths always, the page table when paged (`pageTable` set), the
/// partials' workspace when split (`workspace` set; a launch without rows
/// needs none). False with `*error` naming the entry and the NULL one.
static bool kvCachePointersSet(const fa3_kernel *kernel, const char *entry,
                               uint64_t cacheSeqlens,
                               std::optional<uint64_t> pageTable,
                               std::optional<uint64_t> workspace, int64_t batch,
                               int64_t seqQ, char **error) {
  if (!kernel || !kernel->function)
    return true; // launchForward names the missing kernel.
  if (!cacheSeqlens) {
    setError(error, std::string(entry) + ": cache_seqlens is NULL");
    return false;
  }
  if (pageTable && !*pageTable) {
    setError(error, std::string(entry) + ": page_table is NULL");
    return false;
  }
  if (workspace && !*workspace && batch > 0 && seqQ > 0) {
    setError(error, std::string(entry) +
                        ": workspace is NULL (the partial attentions need "
                        "fa3_attention_workspace_size bytes)");
    return false;
  }
  return true;
}

/// The device arguments of a paged KV-cache launch. The key count is the
/// page table's (page_size * table_width): the launch derives and checks it.
static runtime::AttentionDeviceArgs
pagedKVCacheArgs(uint64_t q, uint64_t kCache, uint64_t vCache, uint64_t out,
                 uint64_t lse, uint64_t cacheSeqlens, uint64_t pageTable,
                 int64_t batch, int64_t seqQ, int64_t numPages,
                 int64_t pageSize, int64_t tableWidth) {
  auto args = runtime::AttentionDeviceArgs::forward(q, kCache, vCache, out, lse,
                                                    batch, seqQ, /*seqK=*/0);
  args.cacheSeqlens = cacheSeqlens;
  args.pageTable = pageTable;
  args.numPages = numPages;
  args.pageSize = pageSize;
  args.pageTableWidth = tableWidth;
  return args;
}

extern "C" int fa3_launch_attention_kvcache(
    const fa3_kernel *kernel, uint64_t q, uint64_t k_cache, uint64_t v_cache,
    uint64_t out, uint64_t lse, uint64_t cache_seqlens, int64_t batch,
    int64_t seq_q, int64_t cache_rows, void *stream, char **error) {
  if (kernel && kernel->function && !kernel->kernel.info.kvCache) {
    setError(error, std::string("fa3_launch_attention_kvcache: the kernel is "
                                "not an fa3.attention_kvcache forward; launch "
                                "it with ") +
                        forwardEntryFor(kernel->kernel.info));
    return 1;
  }
  if (kernel && kernel->function && kernel->kernel.info.paged) {
    setError(error, std::string("fa3_launch_attention_kvcache: the kernel "
                                "reads a paged KV cache; launch it with ") +
                        forwardEntryFor(kernel->kernel.info));
    return 1;
  }
  if (!entryLaunches(kernel, "fa3_launch_attention_kvcache", /*paged=*/false,
                     /*splits=*/false, error))
    return 1;
  if (!kvCachePointersSet(kernel, "fa3_launch_attention_kvcache", cache_seqlens,
                          std::nullopt, std::nullopt, batch, seq_q, error))
    return 1;
  auto args = runtime::AttentionDeviceArgs::forward(
      q, k_cache, v_cache, out, lse, batch, seq_q, cache_rows);
  args.cacheSeqlens = cache_seqlens;
  return launchForward(kernel, "fa3_launch_attention_kvcache", args, stream,
                       error);
}

extern "C" int fa3_launch_attention_paged_kvcache(
    const fa3_kernel *kernel, uint64_t q, uint64_t k_cache, uint64_t v_cache,
    uint64_t out, uint64_t lse, uint64_t cache_seqlens, uint64_t page_table,
    int64_t batch, int64_t seq_q, int64_t num_pages, int64_t page_size,
    int64_t table_width, void *stream, char **error) {
  if (kernel && kernel->function && !kernel->kernel.info.paged) {
    setError(error, std::string("fa3_launch_attention_paged_kvcache: the "
                                "kernel does not read a paged KV cache; "
                                "launch it with ") +
                        forwardEntryFor(kernel->kernel.info));
    return 1;
  }
  if (!entryLaunches(kernel, "fa3_launch_attention_paged_kvcache",
                     /*paged=*/true, /*splits=*/false, error))
    return 1;
  if (!kvCachePointersSet(kernel, "fa3_launch_attention_paged_kvcache",
                          cache_seqlens, page_table, std::nullopt, batch, seq_q,
                          error))
    return 1;
  auto args =
      pagedKVCacheArgs(q, k_cache, v_cache, out, lse, cache_seqlens, page_table,
                       batch, seq_q, num_pages, page_size, table_width);
  return launchForward(kernel, "fa3_launch_attention_paged_kvcache", args,
                       stream, error);
}

extern "C" int fa3_launch_attention_kvcache_splits(
    const fa3_kernel *kernel, uint64_t q, uint64_t k_cache, uint64_t v_cache,
    uint64_t out, uint64_t lse, uint64_t cache_seqlens, uint64_t workspace,
    int64_t batch, int64_t seq_q, int64_t cache_rows, void *stream,
    char **error) {
  const char *entry = "fa3_launch_attention_kvcache_splits";
  if (!entryLaunches(kernel, entry, /*paged=*/false, /*splits=*/true, error))
    return 1;
  if (!kvCachePointersSet(kernel, entry, cache_seqlens, std::nullopt, workspace,
                          batch, seq_q, error))
    return 1;
  auto args = runtime::AttentionDeviceArgs::forward(
      q, k_cache, v_cache, out, lse, batch, seq_q, cache_rows);
  args.cacheSeqlens = cache_seqlens;
  args.workspace = workspace;
  return launchForward(kernel, entry, args, stream, error);
}

extern "C" int fa3_launch_attention_paged_kvcache_splits(
    const fa3_kernel *kernel, uint64_t q, uint64_t k_cache, uint64_t v_cache,
    uint64_t out, uint64_t lse, uint64_t cache_seqlens, uint64_t page_table,
    uint64_t workspace, int64_t batch, int64_t seq_q, int64_t num_pages,
    int64_t page_size, int64_t table_width, void *stream, char **error) {
  const char *entry = "fa3_launch_attention_paged_kvcache_splits";
  if (!entryLaunches(kernel, entry, /*paged=*/true, /*splits=*/true, error))
    return 1;
  if (!kvCachePointersSet(kernel, entry, cache_seqlens, page_table, workspace,
                          batch, seq_q, error))
    return 1;
  auto args =
      pagedKVCacheArgs(q, k_cache, v_cache, out, lse, cache_seqlens, page_table,
                       batch, seq_q, num_pages, page_size, table_width);
  args.workspace = workspace;
  return launchForward(kernel, entry, args, stream, error);
}

/// Whether a launch's rng matches the kernel: `entry` (the called entry
/// point) must be `dropoutEntry` with an rng exactly when the kernel has
/// dropout, else `plainEntry` without. Sets `*error` and returns true on a
/// mismatch.
static bool dropoutMismatch(const fa3_kernel *kernel, const char *entry,
                            uint64_t rng, const char *dropoutEntry,
                            const char *plainEntry, char **error) {
  if (!kernel || kernel->kernel.info.dropout == static_cast<bool>(rng))
    return false;
  setError(error, std::string(entry) +
                      (kernel->kernel.info.dropout
                           ? ": the kernel has dropout; launch it with " +
                                 std::string(dropoutEntry) +
                                 " and its Philox (seed, offset) rng"
                           : ": the kernel has no dropout; launch it with " +
                                 std::string(plainEntry) + " (rng NULL)"));
  return true;
}

/// fa3_launch_attention and fa3_launch_attention_dropout (`entry`), with
/// the Philox (seed, offset) pointer `rng` of the latter.
static int launchDenseForward(const fa3_kernel *kernel, const char *entry,
                              uint64_t q, uint64_t k, uint64_t v, uint64_t out,
                              uint64_t lse, uint64_t rng, int64_t batch,
                              int64_t seqQ, int64_t seqK, void *stream,
                              char **error) {
  if (kernel && kernel->function && kernel->kernel.info.kvCache) {
    setError(error, std::string(entry) +
                        ": the kernel attends to a KV cache; launch it with " +
                        forwardEntryFor(kernel->kernel.info));
    return 1;
  }
  if (kernel && kernel->kernel.info.varlen && !kernel->kernel.info.backward) {
    setError(error, std::string(entry) +
                        ": the kernel attends to packed variable-length "
                        "sequences (fa3.attention_varlen); launch it with "
                        "fa3_launch_attention_varlen");
    return 1;
  }
  if (kernel && !kernel->kernel.info.backward &&
      dropoutMismatch(kernel, entry, rng, "fa3_launch_attention_dropout",
                      "fa3_launch_attention", error))
    return 1;
  runtime::AttentionDeviceArgs args = runtime::AttentionDeviceArgs::forward(
      q, k, v, out, lse, batch, seqQ, seqK);
  args.rng = rng;
  return launchForward(kernel, entry, args, stream, error);
}

extern "C" int fa3_launch_attention(const fa3_kernel *kernel, uint64_t q,
                                    uint64_t k, uint64_t v, uint64_t out,
                                    uint64_t lse, int64_t batch, int64_t seqQ,
                                    int64_t seqK, void *stream, char **error) {
  return launchDenseForward(kernel, "fa3_launch_attention", q, k, v, out, lse,
                            /*rng=*/0, batch, seqQ, seqK, stream, error);
}

extern "C" int fa3_launch_attention_dropout(const fa3_kernel *kernel,
                                            uint64_t q, uint64_t k, uint64_t v,
                                            uint64_t out, uint64_t lse,
                                            uint64_t rng, int64_t batch,
                                            int64_t seqQ, int64_t seqK,
                                            void *stream, char **error) {
  return launchDenseForward(kernel, "fa3_launch_attention_dropout", q, k, v,
                            out, lse, rng, batch, seqQ, seqK, stream, error);
}

/// The checks both varlen launch entries make of the sequence operands:
/// seqused_k exactly when the kernel was compiled with it (`op` names the
/// op to compile otherwise), and both offsets set. Empty: they pass.
static std::string checkVarlenOffsets(const runtime::AttentionKernelInfo &info,
                                      const char *op, uint64_t cuSeqlensQ,
                                      uint64_t cuSeqlensK, uint64_t sequsedK) {
  if (info.sequsedK && !sequsedK)
    return "seqused_k is NULL, but the kernel was compiled with it";
  if (!info.sequsedK && sequsedK)
    return std::string("the kernel was compiled without seqused_k; pass 0 "
                       "for it (or compile an ") +
           op + " that takes it)";
  if (!cuSeqlensQ || !cuSeqlensK)
    return std::string(!cuSeqlensQ ? "cu_seqlens_q" : "cu_seqlens_k") +
           " is NULL";
  return {};
}

extern "C" int fa3_launch_attention_varlen(
    const fa3_kernel *kernel, uint64_t q, uint64_t k, uint64_t v, uint64_t out,
    uint64_t lse, uint64_t cu_seqlens_q, uint64_t cu_seqlens_k,
    uint64_t seqused_k, int64_t batch, int64_t total_q, int64_t total_k,
    int64_t max_seqlen_q, void *stream, char **error) {
  std::string name = "fa3_launch_attention_varlen";
  auto fail = [&](const std::string &message) {
    setError(error, name + ": " + message);
    return 1;
  };
  if (!kernel)
    return fail("kernel is NULL");
  // What the kernel is decides before whether it was loaded, so that a
  // PTX-only compile (no GPU) already reports a wrong entry or seqused_k.
  const runtime::AttentionKernelInfo &info = kernel->kernel.info;
  using Kind = runtime::AttentionKernelInfo::Kind;
  if (info.kind != Kind::Attention)
    return fail("the kernel is not an attention (fa3.attention_varlen) "
                "forward");
  if (info.backward)
    return fail(std::string("the kernel is a backward; launch it with ") +
                backwardEntryFor(info));
  if (!info.varlen)
    return fail(std::string("the kernel is not an fa3.attention_varlen "
                            "forward; launch it with ") +
                forwardEntryFor(info));
  std::string offsets = checkVarlenOffsets(
      info, "fa3.attention_varlen", cu_seqlens_q, cu_seqlens_k, seqused_k);
  if (!offsets.empty())
    return fail(offsets);
  if (batch < 0 || total_q < 0 || total_k < 0 || max_seqlen_q < 0)
    return fail("negative batch, total_q, total_k or max_seqlen_q");
  if (total_q > 0 && (!q || !out || !lse))
    return fail(std::string(!q ? "q" : !out ? "out" : "lse") + " is NULL");
  if (total_k > 0 && (!k || !v))
    return fail(std::string(!k ? "k" : "v") + " is NULL");
  if (!kernel->function)
    return fail("the kernel was compiled to PTX only (fa3_compile_ptx)");
  auto args = runtime::AttentionDeviceArgs::forward(q, k, v, out, lse, batch,
                                                    total_q, total_k);
  args.cuSeqlensQ = cu_seqlens_q;
  args.cuSeqlensK = cu_seqlens_k;
  args.sequsedK = seqused_k;
  args.maxSeqlenQ = max_seqlen_q;
  return launchOnDevice(*kernel, error, [&] {
    return runtime::launchAttentionVarlen(
        *kernel->function, info, args,
        static_cast<runtime::CudaStream>(stream));
  });
}

static int launchForward(const fa3_kernel *kernel, const char *entry,
                         runtime::AttentionDeviceArgs args, void *stream,
                         char **error) {
  std::string name = entry;
  if (!kernel || !kernel->function) {
    setError(error,
             name + (kernel ? (kernel->kernel.info.backward
                                   ? std::string(": the kernel is a backward; "
                                                 "launch it with ") +
                                         backwardEntryFor(kernel->kernel.info)
                                   : std::string(": the kernel was compiled to "
                                                 "PTX only (fa3_compile_ptx)"))
                            : std::string(": kernel is NULL")));
    return 1;
  }
  if (args.batch < 0 || args.seqQ < 0 || args.seqK < 0) {
    setError(error, (name + ": negative batch or sequence length").c_str());
    return 1;
  }
  if (kernel->kernel.info.fp8) {
    setError(error, (name + ": the kernel is an FP8 forward; launch it with "
                            "fa3_launch_attention_fp8")
                        .c_str());
    return 1;
  }
  args.multiprocessors = kernel->device->getMultiprocessorCount();
  return launchOnDevice(*kernel, error, [&] {
    auto cudaStream = static_cast<runtime::CudaStream>(stream);
    if (kernel->combine)
      return runtime::launchAttentionSplitKV(
          *kernel->function, *kernel->combine, kernel->kernel.info, args,
          cudaStream);
    return runtime::launchAttentionForward(
        *kernel->function, kernel->kernel.info, args, cudaStream);
  });
}

extern "C" int64_t fa3_attention_workspace_size(const fa3_kernel *kernel,
                                                int64_t batch, int64_t seqQ,
                                                int64_t seqK) {
  if (!kernel || kernel->kernel.info.backward || batch < 0 || seqQ < 0 ||
      seqK < 0)
    return -1;
  return runtime::attentionForwardWorkspaceBytes(kernel->kernel.info, batch,
                                                 seqQ, seqK);
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
  auto args = runtime::AttentionDeviceArgs::forward(q, k, v, out, lse, batch,
                                                    seqQ, seqK);
  args.qDescale = qDescale;
  args.kDescale = kDescale;
  args.vDescale = vDescale;
  args.workspace = workspace;
  args.multiprocessors = kernel->device->getMultiprocessorCount();
  return launchOnDevice(*kernel, error, [&] {
    return runtime::launchAttentionForwardFP8(
        *kernel->valueTranspose, *kernel->function, kernel->kernel.info, args,
        static_cast<runtime::CudaStream>(stream));
  });
}

extern "C" int64_t fa3_attention_grad_workspace_size(const fa3_kernel *kernel,
                                                     int64_t batch,
                                                     int64_t seqQ,
                                                     int64_t seqK) {
  // A PTX-only backward answers too: the size is a function of the kernel's
  // info (a caller sizes buffers before any kernel is loaded, e.g. XLA).
  if (!kernel || !kernel->kernel.info.backward || batch < 0 || seqQ < 0 ||
      seqK < 0)
    return -1;
  return runtime::attentionGradWorkspaceBytes(kernel->kernel.info, batch, seqQ,
                                              seqK);
}

/// fa3_launch_attention_grad and fa3_launch_attention_grad_dropout
/// (`entry`), with the forward's Philox (seed, offset) pointer `rng` of the
/// latter.
static int launchDenseBackward(const fa3_kernel *kernel, const char *entry,
                               uint64_t gradOut, uint64_t q, uint64_t k,
                               uint64_t v, uint64_t out, uint64_t lse,
                               uint64_t gradLse, uint64_t rng, uint64_t gradQ,
                               uint64_t gradK, uint64_t gradV,
                               uint64_t workspace, int64_t batch, int64_t seqQ,
                               int64_t seqK, void *stream, char **error) {
  // What the kernel is decides before whether it was loaded, as in
  // fa3_launch_attention_varlen_grad.
  if (kernel && kernel->kernel.info.backward && kernel->kernel.info.varlen) {
    setError(error, std::string(entry) +
                        ": the kernel is an fa3.attention_varlen_grad "
                        "backward; launch it with "
                        "fa3_launch_attention_varlen_grad");
    return 1;
  }
  if (kernel && kernel->kernel.info.backward &&
      dropoutMismatch(kernel, entry, rng, "fa3_launch_attention_grad_dropout",
                      "fa3_launch_attention_grad", error))
    return 1;
  if (!kernel || !kernel->gradKernels) {
    using Kind = runtime::AttentionKernelInfo::Kind;
    std::string why =
        !kernel ? "kernel is NULL"
        : kernel->kernel.info.kind != Kind::Attention
            ? "the kernel is not an attention backward"
        : kernel->kernel.info.backward
            ? "the kernel was compiled to PTX only (fa3_compile_ptx)"
            : std::string("the kernel is a forward; launch it with ") +
                  forwardEntryFor(kernel->kernel.info);
    setError(error, std::string(entry) + ": " + why);
    return 1;
  }
  if (batch < 0 || seqQ < 0 || seqK < 0) {
    setError(error, std::string(entry) + ": negative batch or sequence length");
    return 1;
  }
  runtime::AttentionGradDeviceArgs args;
  args.gradOut = gradOut;
  args.q = q;
  args.k = k;
  args.v = v;
  args.out = out;
  args.lse = lse;
  args.gradLse = gradLse;
  args.gradQ = gradQ;
  args.gradK = gradK;
  args.gradV = gradV;
  args.workspace = workspace;
  args.batch = batch;
  args.seqQ = seqQ;
  args.seqK = seqK;
  args.rng = rng;
  return launchOnDevice(*kernel, error, [&] {
    return runtime::launchAttentionBackward(
        *kernel->gradKernels, kernel->kernel.info, args,
        static_cast<runtime::CudaStream>(stream));
  });
}

extern "C" int fa3_launch_attention_grad(
    const fa3_kernel *kernel, uint64_t gradOut, uint64_t q, uint64_t k,
    uint64_t v, uint64_t out, uint64_t lse, uint64_t gradLse, uint64_t gradQ,
    uint64_t gradK, uint64_t gradV, uint64_t workspace, int64_t batch,
    int64_t seqQ, int64_t seqK, void *stream, char **error) {
  return launchDenseBackward(kernel, "fa3_launch_attention_grad", gradOut, q, k,
                             v, out, lse, gradLse, /*rng=*/0, gradQ, gradK,
                             gradV, workspace, batch, seqQ, seqK, stream,
                             error);
}

extern "C" int fa3_launch_attention_grad_dropout(
    const fa3_kernel *kernel, uint64_t gradOut, uint64_t q, uint64_t k,
    uint64_t v, uint64_t out, uint64_t lse, uint64_t gradLse, uint64_t rng,
    uint64_t gradQ, uint64_t gradK, uint64_t gradV, uint64_t workspace,
    int64_t batch, int64_t seqQ, int64_t seqK, void *stream, char **error) {
  return launchDenseBackward(kernel, "fa3_launch_attention_grad_dropout",
                             gradOut, q, k, v, out, lse, gradLse, rng, gradQ,
                             gradK, gradV, workspace, batch, seqQ, seqK, stream,
                             error);
}

extern "C" int fa3_launch_attention_varlen_grad(
    const fa3_kernel *kernel, uint64_t grad_out, uint64_t q, uint64_t k,
    uint64_t v, uint64_t out, uint64_t lse, uint64_t grad_lse,
    uint64_t cu_seqlens_q, uint64_t cu_seqlens_k, uint64_t seqused_k,
    uint64_t grad_q, uint64_t grad_k, uint64_t grad_v, uint64_t workspace,
    int64_t batch, int64_t total_q, int64_t total_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, void *stream, char **error) {
  std::string name = "fa3_launch_attention_varlen_grad";
  auto fail = [&](const std::string &message) {
    setError(error, name + ": " + message);
    return 1;
  };
  if (!kernel)
    return fail("kernel is NULL");
  // What the kernel is decides before whether it was loaded, so that a
  // PTX-only compile (no GPU) already reports a wrong entry or seqused_k.
  const runtime::AttentionKernelInfo &info = kernel->kernel.info;
  using Kind = runtime::AttentionKernelInfo::Kind;
  if (info.kind != Kind::Attention)
    return fail("the kernel is not an attention (fa3.attention_varlen_grad) "
                "backward");
  if (!info.backward)
    return fail(std::string("the kernel is a forward; launch it with ") +
                forwardEntryFor(info));
  if (!info.varlen)
    return fail("the kernel is a dense backward (fa3.attention_grad); launch "
                "it with fa3_launch_attention_grad");
  std::string offsets = checkVarlenOffsets(
      info, "fa3.attention_varlen_grad", cu_seqlens_q, cu_seqlens_k, seqused_k);
  if (!offsets.empty())
    return fail(offsets);
  if (batch < 0 || total_q < 0 || total_k < 0 || max_seqlen_q < 0 ||
      max_seqlen_k < 0)
    return fail("negative batch, total_q, total_k, max_seqlen_q or "
                "max_seqlen_k");
  // The rows each side's kernels touch (with no queries, the main kernel
  // reads K in Q's place and only zeroes dK and dV).
  for (auto [rows, pointer, what] :
       {std::tuple<int64_t, uint64_t, const char *>{total_q, grad_out,
                                                    "grad_out"},
        {total_q, q, "q"},
        {total_q, out, "out"},
        {total_q, lse, "lse"},
        {total_q, grad_q, "grad_q"},
        {total_k, k, "k"},
        {total_k, v, "v"},
        {total_k, grad_k, "grad_k"},
        {total_k, grad_v, "grad_v"}})
    if (rows > 0 && !pointer)
      return fail(std::string(what) + " is NULL");
  if ((total_q > 0 || total_k > 0) && !workspace)
    return fail("workspace is NULL (the backward needs "
                "fa3_attention_grad_workspace_size bytes)");
  if (!kernel->gradKernels)
    return fail("the kernel was compiled to PTX only (fa3_compile_ptx)");
  runtime::AttentionGradDeviceArgs args;
  args.gradOut = grad_out;
  args.q = q;
  args.k = k;
  args.v = v;
  args.out = out;
  args.lse = lse;
  args.gradLse = grad_lse;
  args.gradQ = grad_q;
  args.gradK = grad_k;
  args.gradV = grad_v;
  args.workspace = workspace;
  args.batch = batch;
  args.seqQ = total_q;
  args.seqK = total_k;
  args.cuSeqlensQ = cu_seqlens_q;
  args.cuSeqlensK = cu_seqlens_k;
  args.sequsedK = seqused_k;
  args.maxSeqlenQ = max_seqlen_q;
  args.maxSeqlenK = max_seqlen_k;
  return launchOnDevice(*kernel, error, [&] {
    return runtime::launchAttentionVarlenBackward(
        *kernel->gradKernels, info, args,
        static_cast<runtime::CudaStream>(stream));
  });
}

extern "C" const char *fa3_kernel_name(const fa3_kernel *kernel) {
  return kernel ? kernel->kernel.info.name.c_str() : "";
}

extern "C" int fa3_kernel_device(const fa3_kernel *kernel) {
  return kernel && kernel->device ? kernel->device->getOrdinal() : -1;
}

extern "C" const char *fa3_kernel_ptx(const fa3_kernel *kernel) {
  return kernel ? kernel->kernel.ptx.c_str() : "";
}

extern "C" void fa3_destroy_kernel(fa3_kernel *kernel) { delete kernel; }

extern "C" void fa3_free_string(char *string) { std::free(string); }
