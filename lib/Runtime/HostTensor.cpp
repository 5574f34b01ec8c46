//===- HostTensor.cpp - Dense host arrays and .npy files ---------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/HostTensor.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>

using namespace fa3::runtime;
using llvm::createStringError;
using llvm::StringRef;

size_t fa3::runtime::elementSize(ElementType type) {
  switch (type) {
  case ElementType::F32:
  case ElementType::I32:
    return 4;
  case ElementType::F16:
  case ElementType::BF16:
    return 2;
  case ElementType::F64:
  case ElementType::I64:
    return 8;
  case ElementType::F8E4M3:
    return 1;
  }
  return 0;
}

StringRef fa3::runtime::elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::F16:
    return "f16";
  case ElementType::BF16:
    return "bf16";
  case ElementType::F64:
    return "f64";
  case ElementType::F8E4M3:
    return "f8E4M3FN";
  case ElementType::I32:
    return "i32";
  case ElementType::I64:
    return "i64";
  }
  return "?";
}

std::optional<ElementType> fa3::runtime::parseElementType(StringRef name) {
  for (ElementType t :
       {ElementType::F32, ElementType::F16, ElementType::BF16, ElementType::F64,
        ElementType::F8E4M3, ElementType::I32, ElementType::I64})
    if (elementTypeName(t) == name)
      return t;
  return std::nullopt;
}

HostTensor::HostTensor(ElementType type, std::vector<int64_t> shape)
    : elementType(type), shape(std::move(shape)) {
  data.resize(numElements() * elementSize(type));
}

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string HostTensor::describe() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "] " + elementTypeName(elementType).str();
}

//===----------------------------------------------------------------------===//
// Scalar conversions
//===----------------------------------------------------------------------===//

float fa3::runtime::halfToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t fa3::runtime::floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = (x >> 16) & 0x8000;
  float a = std::fabs(f);
  if (std::isnan(f))
    return sign | 0x7e00;
  if (a >= 65520.0f) // Rounds to infinity.
    return sign | 0x7c00;
  if (a < 6.103515625e-05f) {
    // Subnormal: units of 2^-24, rounded to nearest even by rint.
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int e;
  float m = std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
  // 11 significant bits: mantissa in [1024, 2048).
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(m * 2048.0f));
  if (mant == 2048) {
    mant = 1024;
    ++e;
  }
  uint32_t exp = static_cast<uint32_t>(e + 14);
  if (exp >= 31)
    return sign | 0x7c00;
  return sign | static_cast<uint16_t>((exp << 10) | (mant & 0x3ff));
}

float fa3::runtime::bf16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t fa3::runtime::floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f))
    return static_cast<uint16_t>((x >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

/// e4m3 (FN: no infinities, 0x7F/0xFF are NaN, largest finite 448) to f32.
static float e4m3ToFloat(uint8_t code) {
  int sign = code >> 7, exponent = (code >> 3) & 0xF, mantissa = code & 7;
  float magnitude;
  if (exponent == 0xF && mantissa == 7)
    magnitude = std::numeric_limits<float>::quiet_NaN();
  else if (exponent == 0)
    magnitude = std::ldexp(float(mantissa), -9); // subnormal: m * 2^-9
  else
    magnitude = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  return sign ? -magnitude : magnitude;
}

/// f32 to e4m3, round to nearest even, saturating to ±448 (as the
/// `cvt.rn.satfinite` the FP8 kernels use); NaN stays NaN.
static uint8_t floatToE4M3(float x) {
  if (std::isnan(x))
    return 0x7F;
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  if (a >= 448.0f)
    return sign | 0x7E;
  if (a < std::ldexp(1.0f, -6)) {
    // Subnormals step by 2^-9; a result of 8 is the smallest normal, whose
    // code is 8 too.
    return sign | uint8_t(std::nearbyint(std::ldexp(a, 9)));
  }
  int e;
  float m = std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
  int exponent = e - 1;        // a = (2m) * 2^(e-1), 2m in [1, 2)
  int q = int(std::nearbyint((2 * m - 1) * 8));
  if (q == 8) {
    q = 0;
    ++exponent;
  }
  int biased = exponent + 7;
  if (biased > 15 || (biased == 15 && q == 7))
    return sign | 0x7E;
  return sign | uint8_t(biased << 3 | q);
}

static double loadAsDouble(const HostTensor &t, int64_t i) {
  const uint8_t *p = t.data.data() + i * elementSize(t.elementType);
  switch (t.elementType) {
  case ElementType::F32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case ElementType::F64: {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  case ElementType::F16: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return halfToFloat(h);
  }
  case ElementType::BF16: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16ToFloat(h);
  }
  case ElementType::F8E4M3:
    return e4m3ToFloat(*p);
  case ElementType::I32: {
    int32_t i;
    std::memcpy(&i, p, 4);
    return i;
  }
  case ElementType::I64: {
    int64_t i;
    std::memcpy(&i, p, 8);
    return static_cast<double>(i);
  }
  }
  return 0;
}

static void storeFromDouble(HostTensor &t, int64_t i, double v) {
  uint8_t *p = t.data.data() + i * elementSize(t.elementType);
  switch (t.elementType) {
  case ElementType::F32: {
    float f = static_cast<float>(v);
    std::memcpy(p, &f, 4);
    return;
  }
  case ElementType::F64:
    std::memcpy(p, &v, 8);
    return;
  case ElementType::F16: {
    uint16_t h = floatToHalf(static_cast<float>(v));
    std::memcpy(p, &h, 2);
    return;
  }
  case ElementType::BF16: {
    uint16_t h = floatToBf16(static_cast<float>(v));
    std::memcpy(p, &h, 2);
    return;
  }
  case ElementType::F8E4M3:
    *p = floatToE4M3(static_cast<float>(v));
    return;
  case ElementType::I32: {
    auto i = static_cast<int32_t>(std::lround(v));
    std::memcpy(p, &i, 4);
    return;
  }
  case ElementType::I64: {
    auto i = static_cast<int64_t>(std::llround(v));
    std::memcpy(p, &i, 8);
    return;
  }
  }
}

HostTensor fa3::runtime::convert(const HostTensor &tensor, ElementType to) {
  if (tensor.elementType == to)
    return tensor;
  HostTensor result(to, tensor.shape);
  // f64 -> f16/bf16 goes through f32, a double rounding NumPy makes too.
  for (int64_t i = 0, e = tensor.numElements(); i < e; ++i)
    storeFromDouble(result, i, loadAsDouble(tensor, i));
  return result;
}

//===----------------------------------------------------------------------===//
// .npy
//===----------------------------------------------------------------------===//

/// Finds `'key': value` in the header dict and returns the raw value text.
static std::optional<StringRef> headerField(StringRef header, StringRef key) {
  std::string quoted = "'" + key.str() + "'";
  size_t pos = header.find(quoted);
  if (pos == StringRef::npos)
    return std::nullopt;
  StringRef rest = header.drop_front(pos + quoted.size()).ltrim();
  if (!rest.consume_front(":"))
    return std::nullopt;
  return rest.ltrim();
}

llvm::Expected<HostTensor> fa3::runtime::readNpy(StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return createStringError(buffer.getError(), "cannot read '%s': %s",
                             path.str().c_str(),
                             buffer.getError().message().c_str());
  StringRef bytes = (*buffer)->getBuffer();
  auto bad = [&](const std::string &why) {
    return createStringError(std::errc::invalid_argument,
                             "'%s' is not a valid .npy file: %s",
                             path.str().c_str(), why.c_str());
  };
  if (bytes.size() < 10 || !bytes.starts_with("\x93NUMPY"))
    return bad("missing the \\x93NUMPY magic");
  uint8_t major = bytes[6];
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = static_cast<uint8_t>(bytes[8]) |
                (static_cast<uint8_t>(bytes[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      return bad("truncated header");
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i]))
                   << (8 * i);
    headerStart = 12;
  } else {
    return bad("unsupported format version " + std::to_string(major));
  }
  if (bytes.size() < headerStart + headerLen)
    return bad("truncated header");
  StringRef header = bytes.substr(headerStart, headerLen);

  auto descr = headerField(header, "descr");
  auto order = headerField(header, "fortran_order");
  auto shapeText = headerField(header, "shape");
  if (!descr || !order || !shapeText)
    return bad("header lacks descr, fortran_order or shape");
  if (!order->starts_with("False"))
    return bad("Fortran-ordered arrays are not supported; save with "
               "np.ascontiguousarray");
  ElementType type;
  if (descr->starts_with("'<f4'"))
    type = ElementType::F32;
  else if (descr->starts_with("'<f2'"))
    type = ElementType::F16;
  else if (descr->starts_with("'<f8'"))
    type = ElementType::F64;
  else if (descr->starts_with("'<i4'"))
    type = ElementType::I32;
  else if (descr->starts_with("'<i8'"))
    type = ElementType::I64;
  else
    return bad("unsupported dtype " + descr->split(',').first.str() +
               " (expected float32 '<f4', float16 '<f2', float64 '<f8', "
               "int32 '<i4' or int64 '<i8')");

  if (!shapeText->consume_front("("))
    return bad("malformed shape");
  StringRef dims = shapeText->split(')').first;
  std::vector<int64_t> shape;
  llvm::SmallVector<StringRef> parts;
  dims.split(parts, ',', -1, /*KeepEmpty=*/false);
  for (StringRef part : parts) {
    part = part.trim();
    if (part.empty())
      continue;
    int64_t d;
    if (part.getAsInteger(10, d) || d < 0)
      return bad("malformed shape entry '" + part.str() + "'");
    shape.push_back(d);
  }

  HostTensor tensor(type, shape);
  size_t dataStart = headerStart + headerLen;
  if (bytes.size() - dataStart != tensor.data.size())
    return bad("expected " + std::to_string(tensor.data.size()) +
               " data bytes for shape " + tensor.describe() + ", found " +
               std::to_string(bytes.size() - dataStart));
  std::memcpy(tensor.data.data(), bytes.data() + dataStart,
              tensor.data.size());
  return tensor;
}

llvm::Error fa3::runtime::writeNpy(StringRef path, const HostTensor &tensor) {
  // NumPy has no bf16 or e4m3 dtype: those are written as float32.
  HostTensor out = tensor.elementType == ElementType::BF16 ||
                           tensor.elementType == ElementType::F8E4M3
                       ? convert(tensor, ElementType::F32)
                       : tensor;
  const char *descr = out.elementType == ElementType::F32   ? "<f4"
                      : out.elementType == ElementType::F16 ? "<f2"
                      : out.elementType == ElementType::I32 ? "<i4"
                      : out.elementType == ElementType::I64 ? "<i8"
                                                            : "<f8";
  std::string shape;
  for (int64_t d : out.shape)
    shape += std::to_string(d) + ", ";
  if (out.shape.size() > 1)
    shape.resize(shape.size() - 2);
  else if (out.shape.size() == 1)
    shape.pop_back(); // "(5,)"
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': (" + shape +
                       "), }";
  // Pad so that the data starts on a 64-byte boundary, newline-terminated.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');

  // Write to a temporary file and rename, so a failure never leaves a
  // truncated .npy behind.
  std::string tmp = (path + ".tmp").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec);
    if (ec)
      return createStringError(ec, "cannot write '%s': %s", tmp.c_str(),
                               ec.message().c_str());
    os << "\x93NUMPY" << char(1) << char(0)
       << char(header.size() & 0xff) << char((header.size() >> 8) & 0xff)
       << header;
    os.write(reinterpret_cast<const char *>(out.data.data()), out.data.size());
    os.close();
    if (os.has_error())
      return createStringError(os.error(), "cannot write '%s': %s",
                               tmp.c_str(), os.error().message().c_str());
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path))
    return createStringError(ec, "cannot rename '%s' to '%s': %s", tmp.c_str(),
                             path.str().c_str(), ec.message().c_str());
  return llvm::Error::success();
}
