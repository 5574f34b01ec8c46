//===- FA3Ops.cpp - fa3 tensor-level (L0) operations -------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::fa3;

/// Largest head dimension any fa3 lowering supports (FA3's limit as well).
static constexpr int64_t kMaxHeadDim = 256;

/// Prints a dimension the way tensor types do: `?` when dynamic.
static std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? ", " : "") + dimStr(d);
  return s + "]";
}

/// Two dims of operands may disagree only when one of them is dynamic.
static bool compatibleDims(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

namespace {
/// The types of one attention signature, checked once for the forward and
/// the backward alike.
struct AttentionTypes {
  RankedTensorType q, k, v;
};
} // namespace

/// Checks that `value` is a ranked tensor of `rank`, naming `what` and its
/// layout otherwise.
static FailureOr<RankedTensorType> getRankedOperand(Operation *op, Value value,
                                                    StringRef what,
                                                    int64_t rank,
                                                    StringRef layout) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type)
    return op->emitOpError() << "expects " << what << " to be a ranked tensor "
                             << layout << ", got " << value.getType();
  if (type.getRank() != rank)
    return op->emitOpError() << "expects " << what << " to have rank " << rank
                             << " " << layout << ", got rank "
                             << type.getRank();
  return type;
}

static LogicalResult verifyElementType(Operation *op, Type elementType,
                                       bool allowFP8) {
  if (isa<Float8E4M3FNType>(elementType)) {
    if (allowFP8)
      return success();
    return op->emitOpError() << "has no FP8 form: f8E4M3FN inputs are "
                                "supported by the forward (fa3.attention) only";
  }
  if (!elementType.isF32() && !elementType.isF16() && !elementType.isBF16())
    return op->emitOpError()
           << "expects element type f32, f16, bf16"
           << (allowFP8 ? " or f8E4M3FN" : "") << ", got " << elementType;
  return success();
}

namespace {
/// How the queries and keys of an attention are laid out.
enum class QKVLayout {
  /// [B, Sq, Hq, D] / [B, Sk, Hkv, D] (fa3.attention, fa3.attention_grad).
  Dense,
  /// [Tq, Hq, D] / [Tk, Hkv, D], sequences packed (fa3.attention_varlen).
  Packed,
  /// [B, Sq, Hq, D] / a [B, S_cache, Hkv, D] cache (fa3.attention_kvcache).
  Cache,
  /// [B, Sq, Hq, D] / a [num_pages, page_size, Hkv, D] cache.
  PagedCache,
};
} // namespace

/// Verifies Q/K/V and the attributes; returns the checked types.
static FailureOr<AttentionTypes>
verifyQKV(Operation *op, Value query, Value key, Value value,
          std::optional<float> scale, std::optional<ArrayRef<int64_t>> window,
          std::optional<float> softcap, bool causal, bool allowFP8 = false,
          QKVLayout layout = QKVLayout::Dense) {
  bool packed = layout == QKVLayout::Packed;
  int64_t rank = packed ? 3 : 4;
  StringRef kLayout = packed                            ? "[Tk, Hkv, D]"
                      : layout == QKVLayout::Cache      ? "[B, S_cache, Hkv, D]"
                      : layout == QKVLayout::PagedCache ? "[num_pages, page_size, Hkv, D]"
                                                        : "[B, Sk, Hkv, D]";
  StringRef vLayout = packed                            ? "[Tk, Hkv, Dv]"
                      : layout == QKVLayout::Cache      ? "[B, S_cache, Hkv, Dv]"
                      : layout == QKVLayout::PagedCache ? "[num_pages, page_size, Hkv, Dv]"
                                                        : "[B, Sk, Hkv, Dv]";
  auto q = getRankedOperand(op, query, "query", rank,
                            packed ? "[Tq, Hq, D]" : "[B, Sq, Hq, D]");
  auto k = getRankedOperand(op, key, "key", rank, kLayout);
  auto v = getRankedOperand(op, value, "value", rank, vLayout);
  if (failed(q) || failed(k) || failed(v))
    return failure();
  AttentionTypes t{*q, *k, *v};
  // The head count and head dim are the last two dims in every layout.
  int64_t headAxis = rank - 2, dimAxis = rank - 1;

  if (t.k.getElementType() != t.q.getElementType() ||
      t.v.getElementType() != t.q.getElementType())
    return op->emitOpError()
           << "expects query, key and value to share one element type, got "
           << t.q.getElementType() << ", " << t.k.getElementType() << " and "
           << t.v.getElementType();
  if (failed(verifyElementType(op, t.q.getElementType(), allowFP8)))
    return failure();

  ArrayRef<int64_t> qs = t.q.getShape(), ks = t.k.getShape(),
                    vs = t.v.getShape();
  if (layout == QKVLayout::Dense || layout == QKVLayout::Cache) {
    if (!compatibleDims(qs[0], ks[0]) || !compatibleDims(qs[0], vs[0]))
      return op->emitOpError()
             << "batch mismatch: query has " << dimStr(qs[0]) << ", key has "
             << dimStr(ks[0]) << ", value has " << dimStr(vs[0]);
  }
  if (layout == QKVLayout::PagedCache) {
    if (!compatibleDims(ks[0], vs[0]) || !compatibleDims(ks[1], vs[1]))
      return op->emitOpError()
             << "key and value caches differ in pages: key has "
             << dimStr(ks[0]) << " pages of " << dimStr(ks[1])
             << ", value has " << dimStr(vs[0]) << " pages of "
             << dimStr(vs[1]);
  } else {
    int64_t seqAxis = packed ? 0 : 1;
    if (!compatibleDims(ks[seqAxis], vs[seqAxis]))
      return op->emitOpError()
             << "key and value sequence lengths differ: "
             << dimStr(ks[seqAxis]) << " vs " << dimStr(vs[seqAxis]);
  }
  for (auto [name, type] :
       {std::pair<StringRef, RankedTensorType>{"query", t.q},
        {"key", t.k},
        {"value", t.v}}) {
    if (type.isDynamicDim(headAxis) || type.isDynamicDim(dimAxis))
      return op->emitOpError()
             << "expects static head count and head dim in " << name
             << ", got shape " << shapeStr(type.getShape());
  }
  int64_t hq = qs[headAxis], hkv = ks[headAxis];
  if (hkv != vs[headAxis])
    return op->emitOpError() << "key has " << hkv << " heads but value has "
                             << vs[headAxis];
  if (hkv <= 0 || hq <= 0 || hq % hkv != 0)
    return op->emitOpError()
           << "query heads (" << hq
           << ") must be a positive multiple of key/value heads (" << hkv
           << ")";
  if (qs[dimAxis] != ks[dimAxis])
    return op->emitOpError() << "head dim mismatch: query has " << qs[dimAxis]
                             << ", key has " << ks[dimAxis];
  for (auto [name, d] :
       {std::pair<StringRef, int64_t>{"query/key", qs[dimAxis]},
        {"value", vs[dimAxis]}}) {
    if (d <= 0 || d > kMaxHeadDim || d % 8 != 0)
      return op->emitOpError()
             << name << " head dim must be a multiple of 8 in [8, "
             << kMaxHeadDim << "], got " << d;
  }

  if (scale && !(std::isfinite(*scale) && *scale > 0))
    return op->emitOpError() << "scale must be positive and finite, got "
                             << *scale;
  if (softcap && !(std::isfinite(*softcap) && *softcap >= 0))
    return op->emitOpError() << "softcap must be non-negative and finite, got "
                             << *softcap;
  if (window) {
    if (window->size() != 2)
      return op->emitOpError() << "window must have 2 entries (left, right), "
                                  "got "
                               << window->size();
    if ((*window)[0] < -1 || (*window)[1] < -1)
      return op->emitOpError() << "window bounds must be >= -1 (-1 = "
                                  "unbounded), got ("
                               << (*window)[0] << ", " << (*window)[1] << ")";
    if (causal && (*window)[1] > 0)
      return op->emitOpError()
             << "a causal op sees no key to the right of the diagonal; window "
                "right bound must be -1 or 0, got "
             << (*window)[1];
  }
  return t;
}

/// Checks a result (or gradient) type against the shape it must have.
static LogicalResult verifyResultType(Operation *op, Type actual, StringRef what,
                                      ArrayRef<int64_t> expectedShape,
                                      Type expectedElement) {
  auto type = dyn_cast<RankedTensorType>(actual);
  if (!type || type.getShape() != expectedShape ||
      type.getElementType() != expectedElement)
    return op->emitOpError()
           << "expects " << what << " of shape " << shapeStr(expectedShape)
           << " and element type " << expectedElement << ", got " << actual;
  return success();
}

static std::optional<float> toFloat(std::optional<APFloat> f) {
  if (!f)
    return std::nullopt;
  return f->convertToFloat();
}

/// The LSE shape [B, Hq, Sq] of a query type.
static SmallVector<int64_t, 3> lseShape(RankedTensorType q) {
  return {q.getDimSize(0), q.getDimSize(2), q.getDimSize(1)};
}

/// The output shape [B, Sq, Hq, Dv].
static SmallVector<int64_t, 4> outputShape(RankedTensorType q,
                                           RankedTensorType v) {
  return {q.getDimSize(0), q.getDimSize(1), q.getDimSize(2), v.getDimSize(3)};
}

//===----------------------------------------------------------------------===//
// Shared accessors
//===----------------------------------------------------------------------===//

LogicalResult mlir::fa3::verifyDropout(Operation *op, std::optional<float> p,
                                       Value rng) {
  if (p.has_value() != static_cast<bool>(rng))
    return op->emitOpError()
           << (p ? "with dropout needs an rng operand (the Philox seed and "
                   "offset, tensor<2xi64>)"
                 : "takes an rng operand only with a dropout probability");
  if (!p)
    return success();
  if (!(*p >= 0.0f && *p < 1.0f))
    return op->emitOpError() << "dropout must be in [0, 1), got " << *p;
  auto type = dyn_cast<RankedTensorType>(rng.getType());
  if (!type || type.getRank() != 1 || type.getDimSize(0) != 2 ||
      !type.getElementType().isInteger(64))
    return op->emitOpError()
           << "expects rng as tensor<2xi64> (the Philox seed and offset), got "
           << rng.getType();
  return success();
}

DropoutConstants DropoutConstants::of(float p) {
  // In double: p · 2^16 is exact, and 1 / (1 - p) rounds once to f32.
  double exact = std::floor(static_cast<double>(p) * 65536.0);
  DropoutConstants c;
  c.threshold = static_cast<uint32_t>(std::min(exact, 65535.0));
  c.scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
  return c;
}

template <typename OpTy>
static float effectiveScale(OpTy op) {
  if (auto scale = op.getScale())
    return scale->convertToFloat();
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  int64_t headDim = q.getShape().back();
  return 1.0f / std::sqrt(static_cast<float>(headDim));
}

std::pair<int64_t, int64_t>
mlir::fa3::resolveWindow(bool causal, std::optional<ArrayRef<int64_t>> window) {
  int64_t left = -1, right = -1;
  if (window) {
    left = (*window)[0];
    right = (*window)[1];
  }
  if (causal)
    right = 0;
  return {left, right};
}

template <typename OpTy>
static std::pair<int64_t, int64_t> windowBounds(OpTy op) {
  return resolveWindow(op.getCausal(), op.getWindow());
}

float AttentionOp::getEffectiveScale() { return effectiveScale(*this); }
float AttentionVarlenOp::getEffectiveScale() { return effectiveScale(*this); }
std::pair<int64_t, int64_t> AttentionVarlenOp::getWindowBounds() {
  return windowBounds(*this);
}
float AttentionVarlenGradOp::getEffectiveScale() {
  return effectiveScale(*this);
}
std::pair<int64_t, int64_t> AttentionVarlenGradOp::getWindowBounds() {
  return windowBounds(*this);
}
float AttentionKVCacheOp::getEffectiveScale() { return effectiveScale(*this); }
std::pair<int64_t, int64_t> AttentionKVCacheOp::getWindowBounds() {
  return windowBounds(*this);
}
std::pair<int64_t, int64_t> AttentionOp::getWindowBounds() {
  return windowBounds(*this);
}
float AttentionGradOp::getEffectiveScale() { return effectiveScale(*this); }
std::pair<int64_t, int64_t> AttentionGradOp::getWindowBounds() {
  return windowBounds(*this);
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

bool AttentionOp::isFP8() {
  return isa<Float8E4M3FNType>(
      cast<ShapedType>(getQuery().getType()).getElementType());
}

LogicalResult AttentionOp::verify() {
  auto t = verifyQKV(*this, getQuery(), getKey(), getValue(),
                     toFloat(getScale()), getWindow(), toFloat(getSoftcap()),
                     getCausal(), /*allowFP8=*/true);
  if (failed(t))
    return failure();
  bool fp8 = isFP8();
  if (fp8 != !getDescales().empty() ||
      (fp8 && getDescales().size() != 3))
    return emitOpError()
           << (fp8 ? "with f8E4M3FN inputs expects 3 descale operands "
                     "(q_descale, k_descale, v_descale), got "
                   : "takes descale operands only with f8E4M3FN inputs, got ")
           << getDescales().size();
  if (fp8) {
    SmallVector<int64_t, 2> descaleShape = {t->q.getDimSize(0),
                                            t->k.getDimSize(2)};
    static constexpr StringLiteral names[] = {"q_descale", "k_descale",
                                              "v_descale"};
    for (auto [name, value] : llvm::zip_equal(names, getDescales())) {
      auto type = dyn_cast<RankedTensorType>(value.getType());
      if (!type || type.getRank() != 2 || !type.getElementType().isF32() ||
          !compatibleDims(type.getDimSize(0), descaleShape[0]) ||
          type.getDimSize(1) != descaleShape[1])
        return emitOpError()
               << "expects " << name << " of shape " << shapeStr(descaleShape)
               << " ([B, Hkv]) and element type f32, got " << value.getType();
    }
  }
  if (FP8Attr cast = getFp8Attr()) {
    if (fp8)
      return emitOpError() << "has f8E4M3FN inputs already; the 'fp8' "
                              "attribute asks for bf16 inputs to be quantized";
    if (!t->q.getElementType().isBF16())
      return emitOpError() << "with 'fp8' needs bf16 inputs (the FP8 form "
                              "writes a bf16 output), got "
                           << t->q.getElementType();
    int64_t d = t->q.getDimSize(3);
    if (cast.getHadamard() && !llvm::isPowerOf2_64(d))
      return emitOpError() << "with 'fp8' and hadamard = true needs a "
                              "power-of-two head dim, got "
                           << d;
  }
  if (getPackGqa() && (fp8 || getFp8Attr()))
    return emitOpError() << "pack_gqa is not implemented for FP8 attentions "
                            "(f8E4M3FN inputs or the 'fp8' attribute)";
  if (failed(verifyDropout(*this, toFloat(getDropout()), getRng())))
    return failure();
  if (getDropout() && (fp8 || getFp8Attr() || getPackGqa()))
    return emitOpError() << "dropout is not implemented with "
                         << (getPackGqa() ? "pack_gqa" : "FP8")
                         << " (its mask is defined per query head and row)";
  Type outElement = fp8 ? Type(BFloat16Type::get(getContext()))
                        : t->q.getElementType();
  if (failed(verifyResultType(*this, getOutput().getType(), "output",
                              outputShape(t->q, t->v), outElement)))
    return failure();
  return verifyResultType(*this, getLse().getType(), "lse",
                          lseShape(t->q), Float32Type::get(getContext()));
}

//===----------------------------------------------------------------------===//
// AttentionGradOp
//===----------------------------------------------------------------------===//

/// The operands and results every backward shares, given the shapes of O
/// and of the LSE in its layout: dO and O shaped like O, the LSE (and dLSE,
/// if any) f32, and dQ/dK/dV typed like Q/K/V.
template <typename OpTy>
static LogicalResult verifyGradTypes(OpTy op, const AttentionTypes &t,
                                     ArrayRef<int64_t> outShape,
                                     ArrayRef<int64_t> lseShape) {
  Type elt = t.q.getElementType();
  Type f32 = Float32Type::get(op.getContext());
  if (failed(verifyResultType(op, op.getGradOutput().getType(), "grad_output",
                              outShape, elt)) ||
      failed(verifyResultType(op, op.getOutput().getType(), "output", outShape,
                              elt)) ||
      failed(verifyResultType(op, op.getLse().getType(), "lse", lseShape, f32)))
    return failure();
  if (Value gradLse = op.getGradLse())
    if (failed(verifyResultType(op, gradLse.getType(), "grad_lse", lseShape,
                                f32)))
      return failure();
  if (failed(verifyResultType(op, op.getGradQuery().getType(), "grad_query",
                              t.q.getShape(), elt)) ||
      failed(verifyResultType(op, op.getGradKey().getType(), "grad_key",
                              t.k.getShape(), elt)) ||
      failed(verifyResultType(op, op.getGradValue().getType(), "grad_value",
                              t.v.getShape(), elt)))
    return failure();
  // A backward recomputes P from the LSE: it has no running max to keep.
  if (ScheduleAttr schedule = op.getScheduleAttr();
      schedule && schedule.getRescaleThreshold() != 0)
    return op.emitOpError()
           << "has rescale_threshold = " << schedule.getRescaleThreshold()
           << " in its schedule; a backward recomputes P from the LSE and "
              "has no online softmax to rescale lazily (must be 0)";
  return success();
}

LogicalResult AttentionGradOp::verify() {
  auto t = verifyQKV(*this, getQuery(), getKey(), getValue(),
                     toFloat(getScale()), getWindow(), toFloat(getSoftcap()),
                     getCausal());
  if (failed(t) ||
      failed(verifyDropout(*this, toFloat(getDropout()), getRng())))
    return failure();
  return verifyGradTypes(*this, *t, outputShape(t->q, t->v), lseShape(t->q));
}

//===----------------------------------------------------------------------===//
// Variable-length and KV-cache attention
//===----------------------------------------------------------------------===//

/// Checks an i32 index operand of rank 1 or 2 (sequence offsets, lengths,
/// page tables) against the shape it must have; `layout` names it.
static LogicalResult verifyIndexOperand(Operation *op, Value value,
                                        StringRef what,
                                        ArrayRef<int64_t> expectedShape,
                                        StringRef layout) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  bool ok = type && type.getElementType().isInteger(32) &&
            type.getRank() == static_cast<int64_t>(expectedShape.size());
  for (int64_t i = 0; ok && i < type.getRank(); ++i)
    ok = compatibleDims(type.getDimSize(i), expectedShape[i]);
  if (!ok)
    return op->emitOpError()
           << "expects " << what << " as an i32 tensor " << layout << " "
           << shapeStr(expectedShape) << ", got " << value.getType();
  return success();
}

/// Checks the two offset operands of a packed batch, i32 [B + 1] each;
/// returns B + 1 (dynamic when unknown).
static FailureOr<int64_t> verifyOffsets(Operation *op, Value cuSeqlensQ,
                                        Value cuSeqlensK) {
  auto cuQ = dyn_cast<RankedTensorType>(cuSeqlensQ.getType());
  int64_t numOffsets = cuQ && cuQ.getRank() == 1 ? cuQ.getDimSize(0)
                                                 : ShapedType::kDynamic;
  if (failed(verifyIndexOperand(op, cuSeqlensQ, "cu_seqlens_q", {numOffsets},
                                "[B + 1]")) ||
      failed(verifyIndexOperand(op, cuSeqlensK, "cu_seqlens_k", {numOffsets},
                                "[B + 1] (as cu_seqlens_q)")))
    return failure();
  if (numOffsets == 0)
    return op->emitOpError()
           << "expects cu_seqlens_q of B + 1 >= 1 entries, got 0";
  return numOffsets;
}

/// The optional `seqused_k` of a packed batch with `numOffsets` entries in
/// cu_seqlens_q: i32 [B].
static LogicalResult verifySequsedK(Operation *op, Value used,
                                    int64_t numOffsets) {
  if (!used)
    return success();
  int64_t batch =
      ShapedType::isDynamic(numOffsets) ? numOffsets : numOffsets - 1;
  return verifyIndexOperand(op, used, "seqused_k", {batch},
                            "[B] (one fewer than cu_seqlens_q)");
}

/// What the packed-batch forward and backward share: packed Q/K/V with the
/// attributes, the offsets and the optional seqused_k.
template <typename PackedOp>
static FailureOr<AttentionTypes> verifyPackedBatch(PackedOp op) {
  auto t = verifyQKV(op, op.getQuery(), op.getKey(), op.getValue(),
                     toFloat(op.getScale()), op.getWindow(),
                     toFloat(op.getSoftcap()), op.getCausal(),
                     /*allowFP8=*/false, QKVLayout::Packed);
  if (failed(t))
    return failure();
  FailureOr<int64_t> numOffsets =
      verifyOffsets(op, op.getCuSeqlensQ(), op.getCuSeqlensK());
  if (failed(numOffsets) ||
      failed(verifySequsedK(op, op.getSequsedK(), *numOffsets)))
    return failure();
  return t;
}

LogicalResult AttentionVarlenOp::verify() {
  FailureOr<AttentionTypes> t = verifyPackedBatch(*this);
  if (failed(t))
    return failure();
  if (auto splits = getNumSplits(); splits && *splits < 1)
    return emitOpError() << "num_splits must be at least 1, got " << *splits;
  Type elt = t->q.getElementType();
  SmallVector<int64_t, 3> outShape = {t->q.getDimSize(0), t->q.getDimSize(1),
                                      t->v.getDimSize(2)};
  if (failed(verifyResultType(*this, getOutput().getType(), "output",
                              outShape, elt)))
    return failure();
  return verifyResultType(*this, getLse().getType(), "lse",
                          {t->q.getDimSize(1), t->q.getDimSize(0)},
                          Float32Type::get(getContext()));
}

LogicalResult AttentionVarlenGradOp::verify() {
  FailureOr<AttentionTypes> t = verifyPackedBatch(*this);
  if (failed(t))
    return failure();
  // Packed: O [Tq, Hq, Dv], LSE [Hq, Tq].
  return verifyGradTypes(
      *this, *t, {t->q.getDimSize(0), t->q.getDimSize(1), t->v.getDimSize(2)},
      {t->q.getDimSize(1), t->q.getDimSize(0)});
}

LogicalResult AttentionKVCacheOp::verify() {
  auto t = verifyQKV(*this, getQuery(), getKeyCache(), getValueCache(),
                     toFloat(getScale()), getWindow(), toFloat(getSoftcap()),
                     getCausal(), /*allowFP8=*/false,
                     isPaged() ? QKVLayout::PagedCache : QKVLayout::Cache);
  if (failed(t))
    return failure();
  int64_t batch = t->q.getDimSize(0);
  if (auto splits = getNumSplits(); splits && *splits < 1)
    return emitOpError() << "num_splits must be at least 1, got " << *splits;
  if (failed(verifyIndexOperand(*this, getCacheSeqlens(), "cache_seqlens",
                                {batch}, "[B]")))
    return failure();
  if (Value pages = getPageTable())
    if (failed(verifyIndexOperand(*this, pages, "page_table",
                                  {batch, ShapedType::kDynamic},
                                  "[B, max_pages]")))
      return failure();
  if (failed(verifyResultType(*this, getOutput().getType(), "output",
                              outputShape(t->q, t->v),
                              t->q.getElementType())))
    return failure();
  return verifyResultType(*this, getLse().getType(), "lse", lseShape(t->q),
                          Float32Type::get(getContext()));
}

LogicalResult CombineSplitsOp::verify() {
  auto parts = getRankedOperand(*this, getPartialOutput(), "partial_output", 5,
                                "[N, B, Sq, Hq, Dv]");
  auto lses =
      getRankedOperand(*this, getPartialLse(), "partial_lse", 4, "[N, B, Hq, Sq]");
  if (failed(parts) || failed(lses))
    return failure();
  if (!parts->getElementType().isF32() || !lses->getElementType().isF32())
    return emitOpError() << "expects f32 partial results, got "
                         << parts->getElementType() << " and "
                         << lses->getElementType();
  ArrayRef<int64_t> p = parts->getShape(), l = lses->getShape();
  if (!compatibleDims(p[0], l[0]) || !compatibleDims(p[1], l[1]) ||
      !compatibleDims(p[2], l[3]) || !compatibleDims(p[3], l[2]))
    return emitOpError() << "partial_output " << shapeStr(p)
                         << " ([N, B, Sq, Hq, Dv]) and partial_lse "
                         << shapeStr(l) << " ([N, B, Hq, Sq]) disagree";
  auto out = cast<RankedTensorType>(getOutput().getType());
  if (failed(verifyElementType(*this, out.getElementType(), false)) ||
      failed(verifyResultType(*this, out, "output", {p[1], p[2], p[3], p[4]},
                              out.getElementType())))
    return failure();
  return verifyResultType(*this, getLse().getType(), "lse",
                          {p[1], p[3], p[2]}, Float32Type::get(getContext()));
}

LogicalResult KVCacheAppendOp::verify() {
  bool paged = static_cast<bool>(getPageTable());
  StringRef cacheLayout =
      paged ? "[num_pages, page_size, H, D]" : "[B, S_cache, H, D]";
  auto kc = getRankedOperand(*this, getKeyCache(), "key_cache", 4, cacheLayout);
  auto vc =
      getRankedOperand(*this, getValueCache(), "value_cache", 4, cacheLayout);
  auto k = getRankedOperand(*this, getKey(), "key", 4, "[B, S_new, H, D]");
  auto v = getRankedOperand(*this, getValue(), "value", 4, "[B, S_new, H, Dv]");
  if (failed(kc) || failed(vc) || failed(k) || failed(v))
    return failure();
  Type elt = kc->getElementType();
  if (failed(verifyElementType(*this, elt, /*allowFP8=*/false)))
    return failure();
  for (auto [name, type] : {std::pair<StringRef, RankedTensorType>{
                                "value_cache", *vc},
                            {"key", *k},
                            {"value", *v}})
    if (type.getElementType() != elt)
      return emitOpError() << "expects " << name
                           << " to share key_cache's element type " << elt
                           << ", got " << type.getElementType();
  // New rows and cache rows have the same heads and head dim.
  for (auto [name, fresh, cache] :
       {std::tuple<StringRef, RankedTensorType, RankedTensorType>{
            "key", *k, *kc},
        {"value", *v, *vc}})
    for (int64_t axis : {2, 3})
      if (!compatibleDims(fresh.getDimSize(axis), cache.getDimSize(axis)))
        return emitOpError()
               << "expects " << name << " rows shaped like the cache's: "
               << name << " is " << shapeStr(fresh.getShape())
               << ", its cache " << shapeStr(cache.getShape());
  if (!compatibleDims(k->getDimSize(0), v->getDimSize(0)) ||
      !compatibleDims(k->getDimSize(1), v->getDimSize(1)))
    return emitOpError() << "key and value differ in [B, S_new]: "
                         << shapeStr(k->getShape()) << " vs "
                         << shapeStr(v->getShape());
  if (!compatibleDims(kc->getDimSize(0), vc->getDimSize(0)) ||
      !compatibleDims(kc->getDimSize(1), vc->getDimSize(1)))
    return emitOpError() << "key and value caches differ in their first two "
                            "dims: "
                         << shapeStr(kc->getShape()) << " vs "
                         << shapeStr(vc->getShape());
  int64_t batch = k->getDimSize(0);
  if (!paged && !compatibleDims(kc->getDimSize(0), batch))
    return emitOpError() << "batch mismatch: key_cache has "
                         << dimStr(kc->getDimSize(0)) << ", key has "
                         << dimStr(batch);
  if (failed(verifyIndexOperand(*this, getCacheSeqlens(), "cache_seqlens",
                                {batch}, "[B]")))
    return failure();
  if (paged && failed(verifyIndexOperand(*this, getPageTable(), "page_table",
                                         {batch, ShapedType::kDynamic},
                                         "[B, max_pages]")))
    return failure();
  if (getNewKeyCache().getType() != *kc || getNewValueCache().getType() != *vc)
    return emitOpError() << "expects the results typed like the caches, got "
                         << getNewKeyCache().getType() << " and "
                         << getNewValueCache().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Canonicalization
//===----------------------------------------------------------------------===//

namespace {
/// Drops attributes that restate the default: a window that bounds nothing
/// (given causal, right = 0 is implied) and a zero softcap. Later passes then
/// see one spelling per meaning.
template <typename OpTy>
struct DropRedundantMaskAttrs : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;

  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    bool dropWindow = false, dropSoftcap = false;
    if (auto window = op.getWindow()) {
      int64_t left = (*window)[0], right = (*window)[1];
      dropWindow = left == -1 && (right == -1 || (op.getCausal() && right == 0));
    }
    if (auto softcap = op.getSoftcap())
      dropSoftcap = softcap->isZero();
    if (!dropWindow && !dropSoftcap)
      return failure();
    rewriter.modifyOpInPlace(op, [&] {
      if (dropWindow)
        op.removeWindowAttr();
      if (dropSoftcap)
        op.removeSoftcapAttr();
    });
    return success();
  }
};
} // namespace

void AttentionOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<DropRedundantMaskAttrs<AttentionOp>>(context);
}

void AttentionGradOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                  MLIRContext *context) {
  results.add<DropRedundantMaskAttrs<AttentionGradOp>>(context);
}

void AttentionVarlenOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                    MLIRContext *context) {
  results.add<DropRedundantMaskAttrs<AttentionVarlenOp>>(context);
}

void AttentionVarlenGradOp::getCanonicalizationPatterns(
    RewritePatternSet &results, MLIRContext *context) {
  results.add<DropRedundantMaskAttrs<AttentionVarlenGradOp>>(context);
}

void AttentionKVCacheOp::getCanonicalizationPatterns(
    RewritePatternSet &results, MLIRContext *context) {
  results.add<DropRedundantMaskAttrs<AttentionKVCacheOp>>(context);
}

#define GET_OP_CLASSES
#include "fa3/Dialect/FA3/IR/FA3.cpp.inc"

//===----------------------------------------------------------------------===//
// HadamardOp
//===----------------------------------------------------------------------===//

float HadamardOp::getSign(int64_t seed, int64_t i) {
  // SplitMix64 (Steele, Lea and Flood 2014): a documented, portable draw, so
  // that every lowering and the Python package agree on the matrix.
  uint64_t z = uint64_t(seed) + uint64_t(i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (z >> 63) ? -1.0f : 1.0f;
}

static bool isFA3FloatType(Type t) {
  return t.isF32() || t.isF16() || t.isBF16();
}

LogicalResult HadamardOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getRank() < 1)
    return emitOpError() << "expects a tensor of rank at least 1";
  if (!isFA3FloatType(in.getElementType()) ||
      !isFA3FloatType(out.getElementType()))
    return emitOpError() << "expects f32, f16 or bf16 elements, got "
                         << in.getElementType() << " -> "
                         << out.getElementType();
  if (out.getRank() != in.getRank() ||
      llvm::any_of(llvm::zip_equal(in.getShape(), out.getShape()),
                   [](auto dims) {
                     return !compatibleDims(std::get<0>(dims),
                                            std::get<1>(dims));
                   }))
    return emitOpError() << "expects the result shaped like the input "
                         << shapeStr(in.getShape()) << ", got "
                         << shapeStr(out.getShape());
  int64_t d = in.getShape().back();
  if (ShapedType::isDynamic(d) || d < 2 || !llvm::isPowerOf2_64(d))
    return emitOpError() << "transforms the last dimension, which must be a "
                            "static power of two >= 2, got "
                         << dimStr(d);
  return success();
}

//===----------------------------------------------------------------------===//
// QuantizeOp
//===----------------------------------------------------------------------===//

LogicalResult QuantizeOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  auto descale = cast<RankedTensorType>(getDescale().getType());
  if (in.getRank() != 4)
    return emitOpError() << "expects the input as [B, S, H, D], got rank "
                         << in.getRank();
  if (!isFA3FloatType(in.getElementType()))
    return emitOpError() << "expects an f32, f16 or bf16 input, got "
                         << in.getElementType();
  if (!isa<Float8E4M3FNType>(out.getElementType()) ||
      out.getRank() != 4 ||
      llvm::any_of(llvm::zip_equal(in.getShape(), out.getShape()),
                   [](auto dims) {
                     return !compatibleDims(std::get<0>(dims),
                                            std::get<1>(dims));
                   }))
    return emitOpError() << "expects the result as f8E4M3FN "
                         << shapeStr(in.getShape()) << ", got " << out;
  if (in.isDynamicDim(2))
    return emitOpError() << "expects a static head count";
  int64_t heads = in.getDimSize(2);
  if (descale.getRank() != 2 || !descale.getElementType().isF32() ||
      !compatibleDims(descale.getDimSize(0), in.getDimSize(0)) ||
      descale.isDynamicDim(1) || descale.getDimSize(1) < 1 ||
      heads % descale.getDimSize(1) != 0)
    return emitOpError() << "expects the descale as f32 [B, G] with G a "
                            "static divisor of the "
                         << heads << " heads (batch " << dimStr(in.getDimSize(0))
                         << "), got " << descale;
  if (getHadamardSeed()) {
    int64_t d = in.getDimSize(3);
    if (ShapedType::isDynamic(d) || d < 2 || !llvm::isPowerOf2_64(d))
      return emitOpError() << "with hadamard_seed transforms the head dim, "
                              "which must be a static power of two >= 2, got "
                           << dimStr(d);
  }
  return success();
}

namespace {
/// quantize(hadamard(x) : f32) -> quantize(x) {hadamard_seed}: the f32
/// transform is exact in registers, so the fused form computes the same
/// values without the intermediate tensor.
struct FoldHadamardIntoQuantize : OpRewritePattern<QuantizeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(QuantizeOp op,
                                PatternRewriter &rewriter) const override {
    auto hadamard = op.getInput().getDefiningOp<HadamardOp>();
    if (!hadamard || op.getHadamardSeed() || !hadamard->hasOneUse() ||
        !cast<RankedTensorType>(hadamard.getType()).getElementType().isF32())
      return failure();
    rewriter.modifyOpInPlace(op, [&] {
      op.getInputMutable().assign(hadamard.getInput());
      op.setHadamardSeedAttr(hadamard.getSeedAttr());
    });
    rewriter.eraseOp(hadamard);
    return success();
  }
};
} // namespace

void QuantizeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                             MLIRContext *context) {
  results.add<FoldHadamardIntoQuantize>(context);
}
