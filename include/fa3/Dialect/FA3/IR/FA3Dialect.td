//===- FA3Dialect.td - The fa3 attention dialect -----------*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3DIALECT_TD
#define FA3_DIALECT_FA3_IR_FA3DIALECT_TD

include "mlir/IR/OpBase.td"

def FA3_Dialect : Dialect {
  let name = "fa3";
  let cppNamespace = "::mlir::fa3";
  let summary = "Attention at the tensor level and at the tile level";
  let description = [{
    The `fa3` dialect represents scaled-dot-product attention in two levels:

    * **L0**, `fa3.attention` / `fa3.attention_grad`: whole-tensor attention
      in FlashAttention's layout (Q `[B, Sq, Hq, D]`, K `[B, Sk, Hkv, D]`,
      V `[B, Sk, Hkv, Dv]`, O `[B, Sq, Hq, Dv]`, LSE `[B, Hq, Sq]`).
    * **L1**, the tile level: loads and stores of row tiles
      (`fa3.load_tile`, `fa3.store_tile`, `fa3.load_stats`,
      `fa3.store_stats`), one query block's attention (`fa3.attention_block`)
      and the steps of the online softmax (`fa3.qk`, `fa3.softcap`,
      `fa3.mask`, `fa3.online_softmax`, `fa3.rescale`, `fa3.pv`,
      `fa3.finalize`). Tiles have static shapes; rows past the end of a
      sequence read as zero and are never written, which is what TMA does on
      Hopper. The CPU lowering starts from this level; the Hopper lowering
      (convert-fa3-to-hopper) still reads L0 and builds each kernel whole.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasCanonicalizer = 0;
}

class FA3_Op<string mnemonic, list<Trait> traits = []>
    : Op<FA3_Dialect, mnemonic, traits>;

#endif // FA3_DIALECT_FA3_IR_FA3DIALECT_TD
