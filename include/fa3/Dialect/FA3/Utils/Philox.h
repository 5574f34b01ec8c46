//===- Philox.h - Philox4x32-10 and fa3.dropout's mask in arith -*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Random123's counter-based Philox4x32-10 generator built from i32 arith
// ops (arith.mului_extended, xori, addi), so that every backend that lowers
// arith (the CPU through LLVM, a GPU kernel through NVVM) computes the same
// bits for fa3.dropout's mask, and a backward regenerates the forward's.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_UTILS_PHILOX_H
#define FA3_DIALECT_FA3_UTILS_PHILOX_H

#include "mlir/IR/Builders.h"

#include <array>

namespace mlir::fa3 {

/// The four 32-bit words of Philox4x32-10 for `counter` under `key` (i32
/// values; Random123's round function and key schedule, 10 rounds).
std::array<Value, 4> buildPhilox4x32x10(OpBuilder &b, Location loc,
                                        std::array<Value, 4> counter,
                                        std::array<Value, 2> key);

/// The Philox key and counter words of an fa3.dropout generator: the seed
/// split into (low, high) and the offset's low word, from i64 scalars.
struct DropoutGenerator {
  Value keyLo, keyHi, offsetLo;
  static DropoutGenerator fromSeedAndOffset(OpBuilder &b, Location loc,
                                            Value seed, Value offset);
};

/// The four words of the Philox call of the 2×4 group {row, row + 8} ×
/// {c, c + 1, c + 8, c + 9} that holds (`row`, `col`) (i32 values; c is
/// `col` with bits 0 and 3 cleared), in the order rows × column pairs: (row,
/// c..c+1), (row, c+8..c+9), (row + 8, c..c+1), (row + 8, c+8..c+9). Each
/// word's low 16 bits serve the even column of its pair, the high 16 bits
/// the odd one. A forward thread holds such a group (a wgmma accumulator's
/// rows r, r + 8 and column pairs c, c + 1 and c + 8, c + 9).
std::array<Value, 4> buildDropoutGroupWords(OpBuilder &b, Location loc,
                                            const DropoutGenerator &gen,
                                            Value row, Value col, Value stream);

/// The 16-bit half of `word` an even (`high` = false) or odd column takes,
/// as an i32.
Value dropoutHalf(OpBuilder &b, Location loc, Value word, bool high);

/// The 16-bit value (an i32) fa3.dropout compares for entry (`row`, `col`)
/// of `stream`: half `col % 2` of word `2 · ((row / 8) % 2) + (col / 8) % 2`
/// of the Philox call on counter `(c', r', stream, offset)` with `r' = (row
/// / 16) · 8 + row % 8` and `c' = (col / 16) · 4 + (col % 8) / 2`.
Value buildDropoutWord(OpBuilder &b, Location loc, const DropoutGenerator &gen,
                       Value row, Value col, Value stream);

} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_UTILS_PHILOX_H
