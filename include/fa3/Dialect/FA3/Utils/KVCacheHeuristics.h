//===- KVCacheHeuristics.h - Launch-time choices of KV-cache attention -*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The launch-time choices of fa3.attention_kvcache: num_splits (a decode
// step has too few query tiles to fill the GPU, so its key loop is split
// into partial attentions that fa3.combine_splits merges) and pack_gqa (the
// query heads of one KV head share a tile when the queries alone would leave
// it mostly empty). Both follow FlashAttention-3's heuristics
// (hopper/heuristics.h); docs/Design.md section 10 states them.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_UTILS_KVCACHEHEURISTICS_H
#define FA3_DIALECT_FA3_UTILS_KVCACHEHEURISTICS_H

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

/// Whether to pack the `groupSize` query heads of each KV head into the rows
/// of one `blockM`-row tile for `seqLenQ` queries: when the unpacked tiles'
/// useful fraction, seqLenQ / roundup(seqLenQ, blockM), is below 90% of the
/// packed tiles', seqLenQ·G / roundup(seqLenQ·G, blockM).
bool shouldPackGQA(int64_t seqLenQ, int64_t groupSize, int64_t blockM);

} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_UTILS_KVCACHEHEURISTICS_H
