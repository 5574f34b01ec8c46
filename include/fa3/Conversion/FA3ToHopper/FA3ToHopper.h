//===- FA3ToHopper.h - fa3 attention to Hopper kernels -----------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_CONVERSION_FA3TOHOPPER_FA3TOHOPPER_H
#define FA3_CONVERSION_FA3TOHOPPER_FA3TOHOPPER_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace mlir {
class OpBuilder;
namespace gpu {
class GPUModuleOp;
} // namespace gpu

namespace fa3 {
class AttentionOp;

/// Everything the Hopper forward kernel is specialized on. Sequence lengths
/// and the batch are run-time values; the rest is compiled in.
struct HopperAttentionSpec {
  bool bf16 = true; ///< bf16, else f16
  int64_t headDim = 128;
  int64_t numQHeads = 1, numKVHeads = 1;
  bool causal = false;
  int64_t windowLeft = -1, windowRight = -1; ///< causal folds into right = 0
  float scale = 1.0f;
  float softcap = 0.0f;
  int64_t blockM = 128, blockN = 128, stages = 2;
  /// Issue block i+1's QKᵀ before block i's PV and overlap its softmax
  /// with that PV (the schedule's `intra_wg_overlap`); needs registers for
  /// two S tiles.
  bool intraWarpgroupOverlap = false;

  /// Reads the spec of a scheduled fa3.attention; emits a diagnostic naming
  /// what the Hopper backend does not support and fails otherwise.
  static FailureOr<HopperAttentionSpec> fromOp(AttentionOp op);

  /// A kernel name unique to the spec, e.g. fa3_fwd_bf16_d128_h8x2_m128n128_causal.
  std::string kernelName() const;
  int64_t numConsumerWarpgroups() const { return blockM / 64; }
  int64_t numThreads() const { return numConsumerWarpgroups() * 128; }
  /// Dynamic shared memory: Q, `stages` K and V tiles, mbarriers, and 1 KiB
  /// of slack to align the tiles to the 128-byte swizzle's 1 KiB period.
  int64_t sharedMemoryBytes() const;
};

/// Emits the forward kernel for `spec` into `module` as an `llvm.func` with
/// `nvvm.kernel`. Its parameters, in order: the CUtensorMaps of Q, K and V
/// (128 bytes each, passed by value as __grid_constant__), the O and LSE
/// pointers, and Sq and Sk as i32. Grid: (ceildiv(Sq, blockM), Hq, B);
/// block: numThreads(); dynamic shared memory: sharedMemoryBytes().
LLVM::LLVMFuncOp buildHopperAttentionKernel(OpBuilder &builder,
                                            gpu::GPUModuleOp module,
                                            const HopperAttentionSpec &spec);

} // namespace fa3
} // namespace mlir

#endif // FA3_CONVERSION_FA3TOHOPPER_FA3TOHOPPER_H
