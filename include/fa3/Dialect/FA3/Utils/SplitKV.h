//===- SplitKV.h - How many splits a split-KV attention takes --*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The launch-time choice of fa3.attention_kvcache's num_splits: a decode step
// has too few query tiles to fill the GPU, so its key loop is split into
// partial attentions that fa3.combine_splits merges. The rule follows
// FlashAttention-3's heuristic (hopper/heuristics.h); docs/Design.md
// section 10 states it with a worked example.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_UTILS_SPLITKV_H
#define FA3_DIALECT_FA3_UTILS_SPLITKV_H

#include <cstdint>

namespace mlir::fa3 {

/// The number of key splits for `workTiles` independent (batch, head, query
/// tile) units of `keyBlocks` key blocks each on a GPU of `multiprocessors`
/// SMs, at most `maxSplits`:
///   * 1 when the tiles alone fill at least 80% of the SMs, or when there are
///     at most 4 key blocks to split;
///   * else, with the wave efficiency e(s) = w / ceil(w) of w = tiles · s /
///     SMs, the smallest s whose e(s) is within 85% of the best e over
///     s in [1, min(maxSplits, SMs, keyBlocks)], skipping an s that gives
///     each split as many key blocks as s - 1 does (its extra splits would
///     be empty).
int64_t selectNumSplits(int64_t workTiles, int64_t multiprocessors,
                        int64_t keyBlocks, int64_t maxSplits = 128);

} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_UTILS_SPLITKV_H
