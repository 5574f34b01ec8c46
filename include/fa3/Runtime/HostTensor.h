//===- HostTensor.h - Dense host arrays and .npy files -----------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The runtime's view of an array in host memory, independent of MLIR: the
// launch path and the Python bindings use it without linking the compiler.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_RUNTIME_HOSTTENSOR_H
#define FA3_RUNTIME_HOSTTENSOR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fa3::runtime {

/// Element types an fa3 function can take or return.
enum class ElementType { F32, F16, BF16, F64, F8E4M3, I32, I64 };

/// Bytes of one element.
size_t elementSize(ElementType type);
/// "f32", "f16", "bf16", "f64" or "f8E4M3FN", as MLIR spells them.
llvm::StringRef elementTypeName(ElementType type);
/// The inverse of elementTypeName; nullopt for another name.
std::optional<ElementType> parseElementType(llvm::StringRef name);

/// A dense, row-major array owned in host memory.
struct HostTensor {
  ElementType elementType = ElementType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  HostTensor() = default;
  HostTensor(ElementType type, std::vector<int64_t> shape);

  int64_t numElements() const;
  /// "[2, 17, 8, 64] f16"
  std::string describe() const;
};

/// Reads a NumPy .npy file (format 1.x, 2.x or 3.x, little-endian, C order)
/// of dtype float32, float16 or float64.
llvm::Expected<HostTensor> readNpy(llvm::StringRef path);

/// Writes `tensor` as a .npy file (format 1.0). bf16 is written as float32,
/// NumPy having no bf16 dtype.
llvm::Error writeNpy(llvm::StringRef path, const HostTensor &tensor);

/// Converts between element types with round-to-nearest-even; f32 -> bf16
/// is how fa3-run feeds a float32 .npy to a bf16 argument.
HostTensor convert(const HostTensor &tensor, ElementType to);

/// Scalar conversions used by `convert`.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);

} // namespace fa3::runtime

#endif // FA3_RUNTIME_HOSTTENSOR_H
