//===- FA3Ops.td - fa3 tensor-level (L0) operations ---------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3OPS_TD
#define FA3_DIALECT_FA3_IR_FA3OPS_TD

include "fa3/Dialect/FA3/IR/FA3Dialect.td"
include "fa3/Dialect/FA3/IR/FA3Attrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/CommonTypeConstraints.td"

// The masking and scaling attributes shared by the forward and the backward.
defvar FA3_AttentionAttrs = (ins
    UnitAttr:$causal,
    OptionalAttr<F32Attr>:$scale,
    OptionalAttr<DenseI64ArrayAttr>:$window,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<FA3_ScheduleAttr>:$schedule);

class FA3_AttentionOpBase<string mnemonic, list<Trait> traits = []>
    : FA3_Op<mnemonic, !listconcat(traits, [Pure])> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
  code attentionExtraDecls = [{
    /// Whether the inputs are f8E4M3FN (with descale operands).
    bool isFP8();
    /// The softmax scale: the `scale` attribute, or 1/sqrt(D) when absent.
    float getEffectiveScale();
    /// The (left, right) window; -1 means unbounded on that side. A causal
    /// op has right = 0 whatever its `window` says.
    std::pair<int64_t, int64_t> getWindowBounds();
    /// The softcap, 0 when off.
    float getEffectiveSoftcap() {
      return getSoftcap() ? getSoftcap()->convertToFloat() : 0.0f;
    }
  }];
}

def FA3_AttentionOp : FA3_AttentionOpBase<"attention"> {
  let summary = "Scaled dot-product attention with its log-sum-exp";
  let description = [{
    `O = softmax(mask(softcap(scale · Q Kᵀ))) V` per (batch, query head), in
    FlashAttention's layout:

    | operand/result | shape | element type |
    | --- | --- | --- |
    | `query` | `[B, Sq, Hq, D]` | f32, f16 or bf16 |
    | `key` | `[B, Sk, Hkv, D]` | as `query` |
    | `value` | `[B, Sk, Hkv, Dv]` | as `query` |
    | `output` | `[B, Sq, Hq, Dv]` | as `query` |
    | `lse` | `[B, Hq, Sq]` | f32, natural-log log-sum-exp of each row |

    `B`, `Sq` and `Sk` may be dynamic; head counts and head dims are static,
    with `Hq % Hkv == 0` (grouped-query attention: query head `h` reads
    key/value head `h / (Hq / Hkv)`), and `D`, `Dv` multiples of 8 up to 256.

    Attributes:
    * `causal`: query `i` sees keys `j <= i + Sk - Sq` (aligned to the
      bottom-right corner when `Sq != Sk`).
    * `scale`: the softmax scale, 1/sqrt(D) when absent.
    * `window = array<i64: left, right>`: query `i` sees keys in
      `[i + Sk - Sq - left, i + Sk - Sq + right]`; -1 leaves a side unbounded.
    * `softcap`: scores become `softcap · tanh(s / softcap)` before masking
      (0 or absent: off).
    * `schedule`: the `#fa3.schedule` chosen by `fa3-select-schedule`.

    A row with no visible key gets `O = 0` and `LSE = -inf`.

    **FP8.** With `f8E4M3FN` query, key and value, three more operands give
    the descale factors, f32 tensors `[B, Hkv]` (per batch and key/value
    head, as FlashAttention-3's `q_descale`, `k_descale`, `v_descale`): the
    attention is that of `query · q_descale`, `key · k_descale` and
    `value · v_descale`. The output is bf16, the LSE f32. The Hopper backend
    compiles it (e4m3 wgmma for both GEMMs, see `convert-fa3-to-hopper`;
    head dims 64, 128 and 256, D = Dv); the CPU pipeline computes the
    attention of the dequantized inputs (`fa3-tile`).

    ```mlir
    %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {causal}
        : (tensor<?x?x8x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>, tensor<?x?x2x128xf8E4M3FN>,
           tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
        -> (tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>)
    ```

    ```mlir
    %o, %lse = fa3.attention %q, %k, %v {causal, scale = 1.250000e-01 : f32}
        : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>)
        -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
    ```
  }];
  let arguments = !con((ins AnyTensor:$query, AnyTensor:$key, AnyTensor:$value,
                            Variadic<AnyTensor>:$descales),
                       FA3_AttentionAttrs);
  let results = (outs AnyTensor:$output, AnyTensor:$lse);
  let extraClassDeclaration = attentionExtraDecls;
}

def FA3_AttentionGradOp : FA3_AttentionOpBase<"attention_grad"> {
  let summary = "Gradients of fa3.attention with respect to Q, K and V";
  let description = [{
    The backward of `fa3.attention` with the same attributes. Operands, in
    order: `grad_output` (dO, shaped like the forward's output), `query`,
    `key`, `value`, `output` (O of the forward) and `lse` (its LSE). Results:
    `grad_query`, `grad_key`, `grad_value`, shaped and typed like `query`,
    `key` and `value`. With GQA, `grad_key`/`grad_value` sum over the query
    heads that share a key/value head.

    `fa3-tile` lowers it (for the CPU) to FlashAttention-2's backward over
    tiles; `convert-fa3-to-hopper` emits sm_90a kernels for it.

    ```mlir
    %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal}
        : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>,
           tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>)
        -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
    ```
  }];
  let arguments = !con((ins AnyTensor:$grad_output, AnyTensor:$query,
                            AnyTensor:$key, AnyTensor:$value,
                            AnyTensor:$output, AnyTensor:$lse),
                       FA3_AttentionAttrs);
  let results = (outs AnyTensor:$grad_query, AnyTensor:$grad_key,
                      AnyTensor:$grad_value);
  let extraClassDeclaration = attentionExtraDecls;
}

#endif // FA3_DIALECT_FA3_IR_FA3OPS_TD
