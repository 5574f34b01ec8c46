//===- InitAllPasses.h - Passes and pipelines of fa3 --------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_INITALLPASSES_H
#define FA3_INITALLPASSES_H

namespace mlir::fa3 {
/// Registers fa3's passes, its named pipelines and the upstream passes those
/// pipelines use, for command-line tools.
void registerAllPasses();
} // namespace mlir::fa3

#endif // FA3_INITALLPASSES_H
