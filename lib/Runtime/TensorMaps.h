//===- TensorMaps.h - TMA descriptors of attention tensors ------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Private to FA3Runtime: what the forward and backward launchers share.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_RUNTIME_TENSORMAPS_H
#define FA3_LIB_RUNTIME_TENSORMAPS_H

#include "fa3/Runtime/CudaDriver.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace fa3::runtime {

/// The TMA descriptor of a contiguous [B, S, H, D] tensor, loading boxes of
/// one 128-byte swizzle atom of head-dim elements (64 16-bit or 128 e4m3
/// values) by `rows` sequence rows. e4m3 is described as UINT8: TMA only
/// moves bytes. With `group` = G > 1 (PackGQA) the tensor is viewed as
/// [B, S, H / G, G, D] and a box holds the G heads of one group at rows / G
/// positions: `rows` tile rows of (position, head) pairs. Served from a
/// small per-thread cache of recent descriptors (TensorMaps.cpp).
llvm::Expected<TensorMap> bshdTensorMap(DevicePtr base, bool bf16,
                                        int64_t batch, int64_t seq,
                                        int64_t heads, int64_t dim,
                                        int64_t rows, llvm::StringRef what,
                                        bool fp8 = false, int64_t group = 1);

/// `bytes` rounded up to a multiple of `alignment`.
inline int64_t alignUp(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

/// The largest grid y and z dimensions.
inline constexpr int64_t kMaxGridYZ = 65535;

} // namespace fa3::runtime

#endif // FA3_LIB_RUNTIME_TENSORMAPS_H
