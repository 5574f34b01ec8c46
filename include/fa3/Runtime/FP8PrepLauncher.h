//===- FP8PrepLauncher.h - Launch the FP8 preparation kernels -*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The host side of the kernels convert-fa3-to-hopper emits for the ops
// fa3-cast-fp8 inserts before an FP8 attention (see
// HopperHadamardSpec/HopperQuantizeSpec for the kernels themselves).
//
//===----------------------------------------------------------------------===//

#ifndef FA3_RUNTIME_FP8PREPLAUNCHER_H
#define FA3_RUNTIME_FP8PREPLAUNCHER_H

#include "fa3/Runtime/AttentionLauncher.h"

namespace fa3::runtime {

/// fa3.hadamard over `rows` rows of info.headDim contiguous elements.
llvm::Error launchHadamard(const CudaKernel &kernel,
                           const AttentionKernelInfo &info, DevicePtr input,
                           DevicePtr output, int64_t rows, CudaStream stream);

/// Device-resident operands of fa3.quantize: input [B, S, H, D], the e4m3
/// output of the same shape, the descales f32 [B, G] and a workspace of
/// quantizeWorkspaceBytes() (the per-group amax, zeroed by the launch).
struct QuantizeDeviceArgs {
  DevicePtr input = 0, output = 0, descale = 0, workspace = 0;
  int64_t batch = 0, seq = 0;
};

int64_t quantizeWorkspaceBytes(const AttentionKernelInfo &info, int64_t batch);

/// The `_amax` and `_cast` kernels of a compiled fa3.quantize.
struct QuantizeKernels {
  CudaKernel amax, cast;
};
llvm::Expected<QuantizeKernels>
getQuantizeKernels(const CudaModule &module, const AttentionKernelInfo &info);

/// Zeroes the amax workspace, then launches `_amax` and `_cast` on `stream`.
llvm::Error launchQuantize(const QuantizeKernels &kernels,
                           const AttentionKernelInfo &info,
                           const QuantizeDeviceArgs &args, CudaStream stream);

} // namespace fa3::runtime

#endif // FA3_RUNTIME_FP8PREPLAUNCHER_H
