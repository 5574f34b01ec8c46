//===- InitAllPasses.h - Passes and pipelines of fa3 --------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_INITALLPASSES_H
#define FA3_INITALLPASSES_H

namespace mlir::fa3 {
/// Registers fa3's own passes and named pipelines only: what a host that
/// already has MLIR's passes (upstream mlir-opt loading fa3 as a plugin)
/// adds.
void registerFA3OwnPasses();

/// registerFA3OwnPasses() and the upstream passes fa3's pipelines use, for
/// fa3's command-line tools.
void registerAllPasses();
} // namespace mlir::fa3

#endif // FA3_INITALLPASSES_H
