//===- InitAllDialects.h - Dialects fa3 tools and plugins load ----*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_INITALLDIALECTS_H
#define FA3_INITALLDIALECTS_H

namespace mlir {
class DialectRegistry;

namespace fa3 {
/// Registers the fa3 dialect, the upstream dialects its pipelines produce and
/// the interface models (bufferization, deallocation, LLVM conversion) they
/// need, so that fa3-opt, fa3-run and embedders load the same set.
void registerAllDialects(DialectRegistry &registry);
} // namespace fa3
} // namespace mlir

#endif // FA3_INITALLDIALECTS_H
