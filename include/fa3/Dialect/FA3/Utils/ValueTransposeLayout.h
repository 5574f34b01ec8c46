//===- ValueTransposeLayout.h - Layout of an FP8 kernel's V' ----*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// An FP8 forward reads V through V' [B, Hkv, D, keys] (e4m3 wgmma takes B
// K-major only), written by the V layout kernel before the attention
// kernel. The compiler (fa3.tma_load_tile {transposed}, the P V'ᵀ
// descriptors, the layout kernel) and the runtime (the V' tensor map, its
// padding, the layout kernel's launch) must agree on these rules, so they
// live here, free of MLIR, once.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_UTILS_VALUETRANSPOSELAYOUT_H
#define FA3_DIALECT_FA3_UTILS_VALUETRANSPOSELAYOUT_H

#include <cstdint>
#include <numeric>

namespace mlir::fa3 {

/// Bytes of one swizzle atom's row of a transposed tile (positions minor)
/// whose positions take `positionBytes` bytes: 128 (the 128-byte swizzle)
/// where they are whole 128-byte atoms, else 64 (the 64-byte swizzle).
constexpr int64_t transposedAtomBytes(int64_t positionBytes) {
  return positionBytes % 128 == 0 ? 128 : 64;
}

/// Keys per swizzle atom (and TMA box) of an FP8 kernel's V' tiles of
/// `blockN` keys (one byte a key): 128 where block_n is whole 128-key
/// atoms, else 64 (block_n = 64 or 192).
constexpr int64_t valueTransposeAtomKeys(int64_t blockN) {
  return transposedAtomBytes(blockN);
}

/// Keys of V' per (batch, head): Sk rounded up to whole key blocks and whole
/// 128-key layout-kernel tiles, so that every box the kernel loads lies
/// inside V' and the layout kernel writes whole tiles.
constexpr int64_t valueTransposePaddedKeys(int64_t blockN, int64_t seqK) {
  int64_t unit = std::lcm<int64_t>(blockN, 128);
  return (seqK + unit - 1) / unit * unit;
}

/// The bytes a key row of V takes in the V layout kernel's shared tile: D,
/// but at least 128 so that each row's 4-byte words can be XOR-swizzled
/// over all 32 banks. The layout kernel's launch allocates 128 rows of it.
constexpr int64_t valueTransposeRowBytes(int64_t headDim) {
  return headDim < 128 ? 128 : headDim;
}

} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_UTILS_VALUETRANSPOSELAYOUT_H
