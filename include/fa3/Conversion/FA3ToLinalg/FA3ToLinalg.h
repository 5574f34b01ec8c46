//===- FA3ToLinalg.h - fa3 tile level to linalg ------------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_CONVERSION_FA3TOLINALG_FA3TOLINALG_H
#define FA3_CONVERSION_FA3TOLINALG_FA3TOLINALG_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir {
class RewritePatternSet;

namespace fa3 {
/// Adds the patterns lowering every fa3 tile-level op to linalg, tensor,
/// arith and math on tensors.
void populateFA3ToLinalgConversionPatterns(RewritePatternSet &patterns);
/// Adds the patterns lowering fa3.hadamard and fa3.quantize (the tensor-level
/// ops of fa3-cast-fp8) to linalg on tensors; included in the above.
void populateFP8OpsToLinalgPatterns(RewritePatternSet &patterns);
} // namespace fa3
} // namespace mlir

#endif // FA3_CONVERSION_FA3TOLINALG_FA3TOLINALG_H
