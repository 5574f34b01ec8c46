//===- CPUExecutable.h - Compile and run fa3 functions on the CPU -*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_JIT_CPUEXECUTABLE_H
#define FA3_JIT_CPUEXECUTABLE_H

#include "fa3/Runtime/HostTensor.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm::orc {
class LLJIT;
} // namespace llvm::orc

namespace mlir {
class ModuleOp;
template <typename OpTy>
class OwningOpRef;
} // namespace mlir

namespace fa3 {

/// One tensor argument or result of a compiled function: its element type and
/// shape, with std::nullopt for a dynamic dim.
struct TensorSignature {
  runtime::ElementType elementType;
  std::vector<std::optional<int64_t>> shape;
  std::string describe() const; ///< "tensor<2x?x8x64xf16>"
};

/// A rule between dims of two arguments that the compiled code relies on
/// (e.g. query and key share the batch size), checked before each run.
struct DimEquality {
  unsigned argA, dimA, argB, dimB;
  std::string why;
  /// The rule is dim A == dim B + offset (e.g. B + 1 sequence offsets).
  int64_t offset = 0;
};

struct CPUCompileOptions {
  /// Query/key tile overrides (0: the cost model's choice).
  int64_t blockM = 0, blockN = 0;
  /// Tile as the Hopper pipeline does and run its grid serially
  /// (fa3-cpu-pipeline{grid=true}).
  bool grid = false;
  /// LLVM optimization level for the JIT.
  unsigned optLevel = 3;
  /// Look the object code up in (and store it into) the kernel cache
  /// (runtime::KernelCache::getGlobal(), i.e. FA3_CACHE_DIR), so that a
  /// later process skips the pipeline and LLVM's code generation.
  bool useCache = true;
};

/// A function of an fa3 module compiled for the host CPU with
/// `fa3-cpu-pipeline` and MLIR's ExecutionEngine. Arguments and results are
/// tensors; dynamic dims take their sizes from the inputs.
///
/// The engine's object code is what runs: it is stored in the kernel cache,
/// keyed by the module's text, the options, the host CPU and the fa3 build,
/// and loaded into an ORC JIT of its own, so a cache hit in another process
/// runs exactly the code a miss compiled.
class CPUExecutable {
public:
  ~CPUExecutable();

  /// Compiles `function` of `module`; errors name what is unsupported.
  static llvm::Expected<std::unique_ptr<CPUExecutable>>
  compile(mlir::OwningOpRef<mlir::ModuleOp> module, llvm::StringRef function,
          const CPUCompileOptions &options = {});

  const std::vector<TensorSignature> &getArguments() const { return args; }
  const std::vector<TensorSignature> &getResults() const { return results; }

  /// Checks `inputs` against the signature (count, rank, static dims, element
  /// type, and the dim equalities of the attention ops), without running.
  llvm::Error checkInputs(const std::vector<runtime::HostTensor> &inputs) const;

  /// Runs the function. Inputs must match the argument element types exactly
  /// (see runtime::convert).
  llvm::Expected<std::vector<runtime::HostTensor>>
  run(const std::vector<runtime::HostTensor> &inputs) const;

  /// Whether the object code came from the kernel cache.
  bool isCacheHit() const { return cacheHit; }

private:
  CPUExecutable() = default;

  std::string name;
  std::vector<TensorSignature> args, results;
  std::vector<DimEquality> equalities;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  /// The packed-arguments wrapper of the function's C interface.
  void (*entry)(void **) = nullptr;
  bool cacheHit = false;
};

} // namespace fa3

#endif // FA3_JIT_CPUEXECUTABLE_H
