//===- FA3CPUCAPI.cpp - C API of fa3's CPU JIT -------------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Compile an fa3 function with fa3-cpu-pipeline into the ExecutionEngine and
// run it on host buffers: what the Python package's numpy path calls.
//
//===----------------------------------------------------------------------===//

#include "fa3-c/FA3.h"

#include "fa3/InitAllDialects.h"
#include "fa3/JIT/CPUExecutable.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

using namespace fa3;
using fa3::runtime::ElementType;
using fa3::runtime::HostTensor;

struct fa3_cpu_function {
  // The executable refers to its context's module; keep both alive.
  std::unique_ptr<mlir::MLIRContext> context;
  std::unique_ptr<CPUExecutable> executable;
  double compileMs = 0;
};

static void setError(char **error, const std::string &message) {
  if (!error)
    return;
  *error = static_cast<char *>(std::malloc(message.size() + 1));
  std::memcpy(*error, message.c_str(), message.size() + 1);
}

static bool toElementType(int dtype, ElementType &out) {
  switch (dtype) {
  case FA3_DTYPE_F32:
    out = ElementType::F32;
    return true;
  case FA3_DTYPE_F16:
    out = ElementType::F16;
    return true;
  case FA3_DTYPE_BF16:
    out = ElementType::BF16;
    return true;
  case FA3_DTYPE_I32:
    out = ElementType::I32;
    return true;
  case FA3_DTYPE_I64:
    out = ElementType::I64;
    return true;
  default:
    return false;
  }
}

static int fromElementType(ElementType type) {
  switch (type) {
  case ElementType::F16:
    return FA3_DTYPE_F16;
  case ElementType::BF16:
    return FA3_DTYPE_BF16;
  case ElementType::I32:
    return FA3_DTYPE_I32;
  case ElementType::I64:
    return FA3_DTYPE_I64;
  default:
    return FA3_DTYPE_F32;
  }
}

extern "C" fa3_cpu_function *fa3_cpu_compile(const char *mlirSource,
                                             const char *function,
                                             int64_t blockM, int64_t blockN,
                                             char **error) {
  if (!mlirSource || !function) {
    setError(error, "fa3_cpu_compile: mlir_source and function must not be "
                    "NULL");
    return nullptr;
  }
  auto start = std::chrono::steady_clock::now();
  auto result = std::make_unique<fa3_cpu_function>();
  mlir::DialectRegistry registry;
  mlir::fa3::registerAllDialects(registry);
  result->context = std::make_unique<mlir::MLIRContext>(registry);
  std::string diagnostics;
  {
    mlir::ScopedDiagnosticHandler handler(
        result->context.get(), [&](mlir::Diagnostic &diag) {
          llvm::raw_string_ostream os(diagnostics);
          os << diag.getLocation() << ": " << diag << "\n";
          return mlir::success();
        });
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(mlirSource,
                                                result->context.get());
    if (!module) {
      setError(error, "fa3_cpu_compile: cannot parse the MLIR source:\n" +
                          diagnostics);
      return nullptr;
    }
    CPUCompileOptions options;
    options.blockM = blockM;
    options.blockN = blockN;
    auto exe = CPUExecutable::compile(std::move(module), function, options);
    if (!exe) {
      setError(error, llvm::toString(exe.takeError()) +
                          (diagnostics.empty() ? "" : "\n" + diagnostics));
      return nullptr;
    }
    result->executable = std::move(*exe);
  }
  result->compileMs = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
  return result.release();
}

extern "C" int fa3_cpu_num_inputs(const fa3_cpu_function *fn) {
  return fn ? int(fn->executable->getArguments().size()) : -1;
}

extern "C" int fa3_cpu_num_results(const fa3_cpu_function *fn) {
  return fn ? int(fn->executable->getResults().size()) : -1;
}

extern "C" double fa3_cpu_compile_ms(const fa3_cpu_function *fn) {
  return fn ? fn->compileMs : 0;
}

extern "C" int fa3_cpu_cache_hit(const fa3_cpu_function *fn) {
  return fn && fn->executable->isCacheHit() ? 1 : 0;
}

extern "C" int fa3_cpu_run(const fa3_cpu_function *fn,
                           const fa3_tensor *inputs, int numInputs,
                           fa3_tensor *outputs, int numOutputs,
                           char **error) {
  if (!fn || (!inputs && numInputs) || (!outputs && numOutputs)) {
    setError(error, "fa3_cpu_run: NULL function, inputs or outputs");
    return 1;
  }
  if (numOutputs != fa3_cpu_num_results(fn)) {
    setError(error, "fa3_cpu_run: the function returns " +
                        std::to_string(fa3_cpu_num_results(fn)) +
                        " results, got room for " + std::to_string(numOutputs));
    return 1;
  }
  std::vector<HostTensor> hostInputs;
  for (int i = 0; i < numInputs; ++i) {
    const fa3_tensor &t = inputs[i];
    ElementType type;
    if (!toElementType(t.dtype, type) || t.rank < 0 ||
        t.rank > FA3_MAX_RANK) {
      setError(error, "fa3_cpu_run: input #" + std::to_string(i) +
                          " has an unknown dtype or rank");
      return 1;
    }
    HostTensor host(type, std::vector<int64_t>(t.shape, t.shape + t.rank));
    if (!host.data.empty()) {
      if (!t.data) {
        setError(error, "fa3_cpu_run: input #" + std::to_string(i) +
                            " has no data");
        return 1;
      }
      std::memcpy(host.data.data(), t.data, host.data.size());
    }
    hostInputs.push_back(std::move(host));
  }
  auto results = fn->executable->run(hostInputs);
  if (!results) {
    setError(error, llvm::toString(results.takeError()));
    return 1;
  }
  for (int i = 0; i < numOutputs; ++i) {
    HostTensor &r = (*results)[i];
    fa3_tensor &out = outputs[i];
    out.dtype = fromElementType(r.elementType);
    out.rank = int(r.shape.size());
    for (int d = 0; d < out.rank && d < FA3_MAX_RANK; ++d)
      out.shape[d] = r.shape[d];
    out.data = std::malloc(std::max<size_t>(r.data.size(), 1));
    std::memcpy(out.data, r.data.data(), r.data.size());
  }
  return 0;
}

extern "C" void fa3_free_tensor_data(fa3_tensor *tensor) {
  if (tensor) {
    std::free(tensor->data);
    tensor->data = nullptr;
  }
}

extern "C" void fa3_cpu_destroy(fa3_cpu_function *fn) { delete fn; }
