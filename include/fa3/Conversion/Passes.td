//===- Passes.td - fa3 conversion passes -------------------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_CONVERSION_PASSES_TD
#define FA3_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertFA3ToLinalg : Pass<"convert-fa3-to-linalg"> {
  let summary = "Lower the fa3 tile level to linalg, tensor, arith and math";
  let description = [{
    The CPU lowering of the tile level. Tile loads become a zero-filled tile
    with the in-range rows inserted (`tensor.extract_slice` of a run-time
    row count, then `tensor.insert_slice`); tile stores insert only the rows
    inside the sequence. `fa3.qk` and `fa3.pv` become `linalg.generic`
    contractions that accumulate in f32 (`fa3.pv` rounds P to the element
    type of V first, as the GPU does); the softmax steps become elementwise
    and row-reduction `linalg.generic`s using `math.exp2`, `math.log` and
    `math.tanh`. Everything stays on tensors, so one-shot bufferization
    follows.

    Tensor-level ops (`fa3.attention`, `fa3.attention_block`) must already be
    tiled: the pass reports them as illegal.

    ```mlir
    %s = fa3.qk %q, %k : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    // becomes
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
    %s = linalg.generic {indexing_maps = [(i, j, k) -> (i, k), (i, j, k) -> (j, k),
                                          (i, j, k) -> (i, j)], ...}
        ins(%q, %k : ...) outs(%z : tensor<64x64xf32>) { ... arith.extf ... }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::tensor::TensorDialect"];
}

#endif // FA3_CONVERSION_PASSES_TD
