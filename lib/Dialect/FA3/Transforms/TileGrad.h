//===- TileGrad.h - Tiling of fa3.attention_grad ----------------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_DIALECT_FA3_TRANSFORMS_TILEGRAD_H
#define FA3_LIB_DIALECT_FA3_TRANSFORMS_TILEGRAD_H

#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/IR/PatternMatch.h"

namespace mlir::fa3 {

/// Replaces a scheduled fa3.attention_grad with its three tiled phases (see
/// the fa3-tile pass description): Δ and the zeroed dQ accumulator, the loop
/// over key blocks accumulating dK/dV per block and dQ in f32, and dQ's
/// conversion. With `grid`, each phase is an scf.forall mapped to GPU
/// blocks and the dQ accumulator a buffer the key blocks add to
/// (fa3.accumulate_tile): the form the Hopper kernels are built from.
LogicalResult tileAttentionGrad(AttentionGradOp op, RewriterBase &rewriter,
                                bool grid = false);

/// The same for fa3.attention_varlen_grad: each packed sequence's backward,
/// its rows bounded by the sequence offsets; rows outside every sequence get
/// zero gradients.
/// `grid` as for tileAttentionGrad.
LogicalResult tileAttentionVarlenGrad(AttentionVarlenGradOp op,
                                      RewriterBase &rewriter,
                                      bool grid = false);

} // namespace mlir::fa3

#endif // FA3_LIB_DIALECT_FA3_TRANSFORMS_TILEGRAD_H
