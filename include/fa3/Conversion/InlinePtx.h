//===- InlinePtx.h - Inline PTX statements in the LLVM dialect --*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The one way fa3's Hopper lowerings write an instruction MLIR has no op
// for: a side-effecting llvm.inline_asm (so LLVM neither drops nor moves it
// across other side effects).
//
//===----------------------------------------------------------------------===//

#ifndef FA3_CONVERSION_INLINEPTX_H
#define FA3_CONVERSION_INLINEPTX_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir::fa3 {

/// A side-effecting inline PTX statement with `result` (null: none).
inline LLVM::InlineAsmOp inlinePtx(OpBuilder &b, Location loc, Type result,
                                   ValueRange operands, StringRef ptx,
                                   StringRef constraints) {
  return LLVM::InlineAsmOp::create(
      b, loc, result, operands, b.getStringAttr(ptx),
      b.getStringAttr(constraints), /*has_side_effects=*/b.getUnitAttr(),
      /*is_align_stack=*/UnitAttr(), LLVM::TailCallKindAttr(),
      LLVM::AsmDialectAttr(), ArrayAttr());
}

} // namespace mlir::fa3

#endif // FA3_CONVERSION_INLINEPTX_H
