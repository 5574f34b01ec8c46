//===- KVCacheHeuristics.cpp - Launch-time choices of KV-cache attention ----===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Utils/KVCacheHeuristics.h"

#include <algorithm>
#include <cmath>
#include <vector>

int64_t mlir::fa3::selectNumSplits(int64_t workTiles, int64_t multiprocessors,
                                   int64_t keyBlocks, int64_t maxSplits) {
  if (workTiles <= 0 || multiprocessors <= 0 || keyBlocks <= 0)
    return 1;
  // Enough tiles to (nearly) fill the GPU: splitting only adds the merge.
  if (workTiles * 10 >= multiprocessors * 8 || keyBlocks <= 4)
    return 1;
  int64_t limit = std::min({maxSplits, multiprocessors, keyBlocks});
  auto blocksPerSplit = [&](int64_t s) { return (keyBlocks + s - 1) / s; };
  auto eligible = [&](int64_t s) {
    return s == 1 || blocksPerSplit(s) != blocksPerSplit(s - 1);
  };
  std::vector<double> efficiency(limit + 1, 0.0);
  double best = 0.0;
  for (int64_t s = 1; s <= limit; ++s) {
    if (!eligible(s))
      continue;
    double waves = double(workTiles * s) / double(multiprocessors);
    efficiency[s] = waves / std::ceil(waves);
    best = std::max(best, efficiency[s]);
  }
  for (int64_t s = 1; s <= limit; ++s)
    if (eligible(s) && efficiency[s] >= 0.85 * best)
      return s;
  return 1;
}

bool mlir::fa3::shouldPackGQA(int64_t seqLenQ, int64_t groupSize,
                              int64_t blockM) {
  if (seqLenQ <= 0 || groupSize <= 1 || blockM <= 0)
    return false;
  auto usefulFraction = [&](int64_t rows) {
    int64_t padded = (rows + blockM - 1) / blockM * blockM;
    return double(rows) / double(padded);
  };
  return usefulFraction(seqLenQ) < 0.9 * usefulFraction(seqLenQ * groupSize);
}
