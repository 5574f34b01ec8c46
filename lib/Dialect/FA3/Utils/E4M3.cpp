//===- E4M3.cpp - e4m3 (f8E4M3FN) arithmetic for the CPU lowerings ------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Utils/E4M3.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <limits>

using namespace mlir;

namespace {
/// Scalar integer/float arithmetic at one insertion point.
struct Arith {
  OpBuilder &b;
  Location loc;

  Value c(int32_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
  }
  Value f(float v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value shr(Value x, int32_t n) {
    return arith::ShRUIOp::create(b, loc, x, c(n));
  }
  Value shl(Value x, int32_t n) {
    return arith::ShLIOp::create(b, loc, x, c(n));
  }
  Value band(Value x, int32_t m) {
    return arith::AndIOp::create(b, loc, x, c(m));
  }
  Value bor(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value icmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y);
  }
  Value select(Value cond, Value x, Value y) {
    return arith::SelectOp::create(b, loc, cond, x, y);
  }
};
} // namespace

/// f32 value of the e4m3 bits in the low byte of `u` (i32).
static Value decodeBits(Arith &a, Value u) {
  OpBuilder &b = a.b;
  Location loc = a.loc;
  Type f32 = b.getF32Type();
  Value sign = a.band(a.shr(u, 7), 1);
  Value exponent = a.band(a.shr(u, 3), 15);
  Value mantissa = a.band(u, 7);
  // Normal: (-1)^s (1 + m/8) 2^(e-7), i.e. f32 bits s | (e + 120) << 23 | m
  // << 20.
  Value bits =
      a.bor(a.shl(sign, 31),
            a.bor(a.shl(a.add(exponent, a.c(120)), 23), a.shl(mantissa, 20)));
  Value normal = arith::BitcastOp::create(b, loc, f32, bits);
  // Subnormal (e = 0): (-1)^s m 2^-9.
  Value magnitude = arith::MulFOp::create(
      b, loc, arith::UIToFPOp::create(b, loc, f32, mantissa), a.f(1.0f / 512));
  Value negative = a.icmp(arith::CmpIPredicate::eq, sign, a.c(1));
  Value subnormal =
      a.select(negative, arith::NegFOp::create(b, loc, magnitude), magnitude);
  Value isSub = a.icmp(arith::CmpIPredicate::eq, exponent, a.c(0));
  Value value = a.select(isSub, subnormal, normal);
  Value isNan = arith::AndIOp::create(
      b, loc, a.icmp(arith::CmpIPredicate::eq, exponent, a.c(15)),
      a.icmp(arith::CmpIPredicate::eq, mantissa, a.c(7)));
  return a.select(isNan, a.f(std::numeric_limits<float>::quiet_NaN()), value);
}

/// The e4m3 bits of `x` (f32) in the low byte of an i32.
static Value encodeBits(Arith &a, Value x) {
  OpBuilder &b = a.b;
  Location loc = a.loc;
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  Value bits = arith::BitcastOp::create(b, loc, i32, x);
  Value sign = a.band(a.shr(bits, 31), 1);
  Value absBits = a.band(bits, 0x7fffffff);
  Value magnitude = arith::BitcastOp::create(b, loc, f32, absBits);

  // Normal results: keep 3 of the 23 mantissa bits, rounding the 20 dropped
  // ones to nearest even (a carry may bump the exponent), then rebias the
  // exponent from 127 to 7. Past 448 (0x43e00000) saturate to 0x7e.
  Value lsb = a.band(a.shr(absBits, 20), 1);
  Value rounded =
      a.band(a.add(absBits, a.add(a.c(0x7ffff), lsb)), int32_t(0xfff00000u));
  Value normal = a.bor(
      a.shl(arith::SubIOp::create(b, loc, a.shr(rounded, 23), a.c(120)), 3),
      a.band(a.shr(rounded, 20), 7));
  normal = a.select(a.icmp(arith::CmpIPredicate::ugt, rounded, a.c(0x43e00000)),
                    a.c(0x7e), normal);
  // Below 2^-6 the result is a multiple of 2^-9: round |x| · 2^9 to an
  // integer (nearest even, by adding and removing 2^23), 0 .. 8; 8 is the
  // code of 2^-6 itself.
  Value scaled = arith::MulFOp::create(b, loc, magnitude, a.f(512.0f));
  Value integral = arith::SubFOp::create(
      b, loc, arith::AddFOp::create(b, loc, scaled, a.f(8388608.0f)),
      a.f(8388608.0f));
  Value subnormal = arith::FPToUIOp::create(b, loc, i32, integral);
  Value small = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT,
                                      magnitude, a.f(1.0f / 64));
  Value code = a.select(small, subnormal, normal);
  Value isNan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, x, x);
  code = a.select(isNan, a.c(0x7f), code);
  return a.bor(code, a.shl(sign, 7));
}

Value mlir::fa3::decodeE4M3(OpBuilder &b, Location loc, Value f8) {
  Arith a{b, loc};
  Value byte = arith::BitcastOp::create(b, loc, b.getI8Type(), f8);
  return decodeBits(a, arith::ExtUIOp::create(b, loc, b.getI32Type(), byte));
}

Value mlir::fa3::encodeE4M3(OpBuilder &b, Location loc, Value f32) {
  Arith a{b, loc};
  Value byte =
      arith::TruncIOp::create(b, loc, b.getI8Type(), encodeBits(a, f32));
  return arith::BitcastOp::create(b, loc, b.getType<Float8E4M3FNType>(), byte);
}

Value mlir::fa3::roundToE4M3(OpBuilder &b, Location loc, Value f32) {
  Arith a{b, loc};
  return decodeBits(a, encodeBits(a, f32));
}
