//===- FP8PrepLauncher.cpp - Launch the FP8 preparation kernels ----------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/FP8PrepLauncher.h"

#include <algorithm>

using namespace fa3::runtime;

static llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument,
                                 message.str().c_str());
}

static int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The grid dimension limit of x (2^31 - 1) and of y and z (65535).
static constexpr int64_t kMaxGridX = INT32_MAX, kMaxGridYZ = 65535;

llvm::Error fa3::runtime::launchHadamard(const CudaKernel &kernel,
                                         const AttentionKernelInfo &info,
                                         DevicePtr input, DevicePtr output,
                                         int64_t rows, CudaStream stream) {
  if (info.kind != AttentionKernelInfo::Kind::Hadamard)
    return error("kernel " + info.name + " is not a Hadamard kernel");
  if (rows < 0)
    return error("fa3.hadamard: negative row count " + llvm::Twine(rows));
  if (rows == 0)
    return llvm::Error::success();
  // One warp per row, 8 rows per CTA (HopperHadamardSpec::kRowsPerBlock).
  int64_t blocks = ceilDiv(rows, 8);
  if (blocks > kMaxGridX)
    return error("fa3.hadamard: " + llvm::Twine(rows) +
                 " rows exceed one launch's grid");
  void *params[] = {&input, &output, &rows};
  return kernel.launch(Dim3{unsigned(blocks), 1, 1},
                       Dim3{unsigned(info.threads), 1, 1}, 0, stream, params);
}

int64_t fa3::runtime::quantizeWorkspaceBytes(const AttentionKernelInfo &info,
                                             int64_t batch) {
  return std::max<int64_t>(batch * info.numKVHeads, 1) * 4;
}

llvm::Expected<QuantizeKernels>
fa3::runtime::getQuantizeKernels(const CudaModule &module,
                                 const AttentionKernelInfo &info) {
  if (info.kind != AttentionKernelInfo::Kind::Quantize)
    return error("kernel " + info.name + " is not a quantization kernel");
  auto amax = module.getFunction(info.name + "_amax");
  if (!amax)
    return amax.takeError();
  auto cast = module.getFunction(info.name + "_cast");
  if (!cast)
    return cast.takeError();
  return QuantizeKernels{*amax, *cast};
}

llvm::Error fa3::runtime::launchQuantize(const QuantizeKernels &kernels,
                                         const AttentionKernelInfo &info,
                                         const QuantizeDeviceArgs &args,
                                         CudaStream stream) {
  if (info.kind != AttentionKernelInfo::Kind::Quantize)
    return error("kernel " + info.name + " is not a quantization kernel");
  if (args.batch < 0 || args.seq < 0)
    return error("fa3.quantize: negative batch or sequence length");
  if (args.seq > INT32_MAX)
    return error("fa3.quantize: the sequence length must fit in 32 bits");
  int64_t groups = info.numKVHeads, slots = args.batch * groups;
  if (slots == 0)
    return llvm::Error::success();
  if (args.batch > kMaxGridYZ || groups > kMaxGridYZ)
    return error("fa3.quantize: batch " + llvm::Twine(args.batch) +
                 " or groups " + llvm::Twine(groups) +
                 " exceed the grid's 65535");
  if (llvm::Error err = memsetAsync32(args.workspace, 0, size_t(slots), stream))
    return err;
  DevicePtr input = args.input, amax = args.workspace;
  int64_t perBatch = args.seq * info.numQHeads * info.headDim;
  int64_t count = args.batch * perBatch;
  Dim3 block{unsigned(info.threads), 1, 1};
  if (args.seq > 0) {
    int32_t seq = int32_t(args.seq);
    void *params[] = {&input, &amax, &seq};
    Dim3 grid{unsigned(ceilDiv(args.seq, info.blockM)), unsigned(groups),
              unsigned(args.batch)};
    if (llvm::Error err = kernels.amax.launch(grid, block, 0, stream, params))
      return err;
  }
  // An empty sequence still writes its descales (of an all-zero group).
  // Without the transform a thread casts 4 elements; with it a warp casts a
  // row (HopperQuantizeSpec).
  DevicePtr output = args.output, descale = args.descale;
  int64_t units = info.hadamard ? args.batch * args.seq * info.numQHeads
                                : count,
          unitsPerBatch = info.hadamard ? args.seq * info.numQHeads : perBatch;
  int64_t blocks = info.hadamard
                       ? std::max(ceilDiv(units, info.threads / 32),
                                  ceilDiv(slots, info.threads))
                       : ceilDiv(std::max(count / 4, slots), info.threads);
  if (blocks > kMaxGridX)
    return error("fa3.quantize: " + llvm::Twine(count) +
                 " elements exceed one launch's grid");
  void *params[] = {&input,  &amax,          &output, &descale,
                    &units,  &unitsPerBatch, &slots};
  return kernels.cast.launch(Dim3{unsigned(blocks), 1, 1}, block, 0, stream,
                             params);
}
