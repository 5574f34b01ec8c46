//===- Philox.cpp - Philox4x32-10 and fa3.dropout's mask in arith ---------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Utils/Philox.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace {
// Random123's Philox4x32 multipliers and Weyl key increments.
constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kKeyStep0 = 0x9E3779B9u, kKeyStep1 = 0xBB67AE85u;
constexpr int kRounds = 10;
} // namespace

static Value i32Cst(OpBuilder &b, Location loc, uint32_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(),
                                      static_cast<int32_t>(v));
}

std::array<Value, 4> mlir::fa3::buildPhilox4x32x10(OpBuilder &b, Location loc,
                                                   std::array<Value, 4> c,
                                                   std::array<Value, 2> k) {
  Value m0 = i32Cst(b, loc, kMultiplier0), m1 = i32Cst(b, loc, kMultiplier1);
  Value w0 = i32Cst(b, loc, kKeyStep0), w1 = i32Cst(b, loc, kKeyStep1);
  auto xorOf = [&](Value x, Value y, Value z) -> Value {
    return arith::XOrIOp::create(b, loc, arith::XOrIOp::create(b, loc, x, y),
                                 z);
  };
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      k[0] = arith::AddIOp::create(b, loc, k[0], w0);
      k[1] = arith::AddIOp::create(b, loc, k[1], w1);
    }
    // (hi, lo) of the 64-bit products M0 · c0 and M1 · c2.
    auto p0 = arith::MulUIExtendedOp::create(b, loc, m0, c[0]);
    auto p1 = arith::MulUIExtendedOp::create(b, loc, m1, c[2]);
    c = {xorOf(p1.getHigh(), c[1], k[0]), p1.getLow(),
         xorOf(p0.getHigh(), c[3], k[1]), p0.getLow()};
  }
  return c;
}

fa3::DropoutGenerator fa3::DropoutGenerator::fromSeedAndOffset(OpBuilder &b,
                                                               Location loc,
                                                               Value seed,
                                                               Value offset) {
  Type i32 = b.getI32Type();
  Value c32 = arith::ConstantIntOp::create(b, loc, b.getI64Type(), 32);
  DropoutGenerator gen;
  gen.keyLo = arith::TruncIOp::create(b, loc, i32, seed);
  gen.keyHi = arith::TruncIOp::create(
      b, loc, i32, arith::ShRUIOp::create(b, loc, seed, c32));
  gen.offsetLo = arith::TruncIOp::create(b, loc, i32, offset);
  return gen;
}

/// r → (r / 16) · 8 + r % 8: the index of row r's group {r, r + 8}.
static Value rowGroupOf(OpBuilder &b, Location loc, Value r) {
  Value high = arith::ShLIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, r, i32Cst(b, loc, 4)),
      i32Cst(b, loc, 3));
  return arith::OrIOp::create(
      b, loc, high, arith::AndIOp::create(b, loc, r, i32Cst(b, loc, 7)));
}

/// c → (c / 16) · 4 + (c % 8) / 2: the index of column c's group {c, c + 1,
/// c + 8, c + 9} (c rounded down to even).
static Value columnGroupOf(OpBuilder &b, Location loc, Value c) {
  Value high = arith::ShLIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, c, i32Cst(b, loc, 4)),
      i32Cst(b, loc, 2));
  Value low = arith::ShRUIOp::create(
      b, loc, arith::AndIOp::create(b, loc, c, i32Cst(b, loc, 7)),
      i32Cst(b, loc, 1));
  return arith::OrIOp::create(b, loc, high, low);
}

std::array<Value, 4>
mlir::fa3::buildDropoutGroupWords(OpBuilder &b, Location loc,
                                  const DropoutGenerator &gen, Value row,
                                  Value col, Value stream) {
  return buildPhilox4x32x10(b, loc,
                            {columnGroupOf(b, loc, col), rowGroupOf(b, loc, row),
                             stream, gen.offsetLo},
                            {gen.keyLo, gen.keyHi});
}

Value mlir::fa3::dropoutHalf(OpBuilder &b, Location loc, Value word,
                             bool high) {
  if (high)
    return arith::ShRUIOp::create(b, loc, word, i32Cst(b, loc, 16));
  return arith::AndIOp::create(b, loc, word, i32Cst(b, loc, 0xFFFF));
}

Value mlir::fa3::buildDropoutWord(OpBuilder &b, Location loc,
                                  const DropoutGenerator &gen, Value row,
                                  Value col, Value stream) {
  Value c1 = i32Cst(b, loc, 1), c3 = i32Cst(b, loc, 3);
  // (x / 8) % 2: which of its group's two rows (or column pairs) x is in.
  auto halfOf = [&](Value x) -> Value {
    return arith::AndIOp::create(b, loc,
                                 arith::ShRUIOp::create(b, loc, x, c3), c1);
  };
  // The group functions ignore bit 3 (and bit 0 of the column), so the
  // call is the group's whatever entry asks.
  std::array<Value, 4> words =
      buildDropoutGroupWords(b, loc, gen, row, col, stream);
  Value zero = i32Cst(b, loc, 0);
  auto isSet = [&](Value bit) -> Value {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, bit, zero);
  };
  Value rowHigh = isSet(halfOf(row)), colHigh = isSet(halfOf(col));
  Value low = arith::SelectOp::create(b, loc, colHigh, words[1], words[0]);
  Value high = arith::SelectOp::create(b, loc, colHigh, words[3], words[2]);
  Value word = arith::SelectOp::create(b, loc, rowHigh, high, low);
  // Odd columns take the word's high 16 bits.
  Value shift = arith::MulIOp::create(
      b, loc, arith::AndIOp::create(b, loc, col, c1), i32Cst(b, loc, 16));
  return arith::AndIOp::create(b, loc,
                               arith::ShRUIOp::create(b, loc, word, shift),
                               i32Cst(b, loc, 0xFFFF));
}
