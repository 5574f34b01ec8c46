//===- E4M3.h - e4m3 (f8E4M3FN) arithmetic for CPU lowerings -*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// LLVM has no 8-bit float type, so the CPU lowerings cannot use arith.extf
// or arith.truncf on f8E4M3FN; these helpers build the conversions from
// integer and f32 arithmetic instead, bit-exact with the GPU's
// cvt.rn.satfinite.e4m3x2.f32 and its decoding.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_UTILS_E4M3_H
#define FA3_DIALECT_FA3_UTILS_E4M3_H

#include "mlir/IR/Builders.h"

#include <cmath>

namespace mlir::fa3 {

/// e4m3's largest finite magnitude.
inline constexpr float kE4M3Max = 448.0f;
/// The smallest descale fa3.quantize produces (an all-zero group).
inline constexpr float kMinDescale = 1e-12f;
/// The FP8 kernel multiplies P by this before its e4m3 cast (FlashAttention-3
/// uses 2^8), so that small probabilities keep mantissa bits; the epilogue
/// divides it out again.
inline constexpr float kFP8ProbsScale = 256.0f;
/// That scale under lazy rescaling with threshold τ (fa3-lazy-rescale): P
/// reaches 2^τ, so P · 2^(8 - τ) stays within 2^8 (e4m3 saturates at 448).
inline float fp8ProbsScale(int64_t rescaleThreshold) {
  return std::ldexp(kFP8ProbsScale, -static_cast<int>(rescaleThreshold));
}

/// The f32 value of an f8E4M3FN scalar (its bits decoded; NaN for 0x7f/0xff).
Value decodeE4M3(OpBuilder &b, Location loc, Value f8);

/// An f32 scalar converted to f8E4M3FN: round to nearest even, saturating at
/// ±448 (infinities too), NaN to NaN.
Value encodeE4M3(OpBuilder &b, Location loc, Value f32);

/// An f32 scalar rounded to the nearest e4m3 value (as encodeE4M3), in f32.
Value roundToE4M3(OpBuilder &b, Location loc, Value f32);

} // namespace mlir::fa3

#endif // FA3_DIALECT_FA3_UTILS_E4M3_H
