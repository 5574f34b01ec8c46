//===- HopperProgram.h - Run fa3 functions on a Hopper GPU -------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// A function whose body is a straight-line sequence of fa3.attention and
// fa3.attention_grad ops (on its arguments and earlier results) runs on the
// GPU as one launch sequence per op: each op is compiled on its own (or
// fetched from the kernel cache), its results stay on the device, and only
// the returned values come back. A training step — forward, then backward
// on the forward's O and LSE — is such a function.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_JIT_HOPPERPROGRAM_H
#define FA3_JIT_HOPPERPROGRAM_H

#include "fa3/JIT/HopperCompiler.h"
#include "fa3/Runtime/CudaDriver.h"
#include "fa3/Runtime/HostTensor.h"

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace fa3 {

class HopperProgram {
public:
  struct Step {
    HopperKernel kernel;
    bool cacheHit = false;
    /// Value numbers: the function's arguments are 0 .. N-1, then each
    /// step's results in order.
    std::vector<unsigned> operands, results;
  };

  /// Plans `function` and compiles (or fetches) every step's kernels.
  /// Fails, naming the op, on anything but fa3.attention/attention_grad.
  static llvm::Expected<HopperProgram>
  compile(mlir::ModuleOp module, llvm::StringRef function,
          const HopperCompileOptions &options);

  const std::vector<runtime::ElementType> &getArgumentTypes() const {
    return argumentTypes;
  }
  size_t getNumResults() const { return returns.size(); }
  const std::vector<Step> &getSteps() const { return steps; }

  /// Uploads `inputs`, runs every step on the default stream and downloads
  /// the returned values. Results are poisoned (NaN bytes) before the
  /// launches. With `benchmarkRuns` > 0, also times that many runs of the
  /// whole sequence (after a warm-up) and stores the median in `medianMs`.
  llvm::Expected<std::vector<runtime::HostTensor>>
  run(const runtime::CudaDevice &device,
      const std::vector<runtime::HostTensor> &inputs,
      unsigned benchmarkRuns = 0, float *medianMs = nullptr) const;

private:
  std::vector<runtime::ElementType> argumentTypes;
  std::vector<Step> steps;
  std::vector<unsigned> returns;
};

} // namespace fa3

#endif // FA3_JIT_HOPPERPROGRAM_H
