//===- FA3ToLinalg.cpp - fa3 tile level to linalg on tensors -----------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToLinalg/FA3ToLinalg.h"
#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Utils/E4M3.h"
#include "fa3/Dialect/FA3/Utils/Philox.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Transforms/DialectConversion.h"

#include <cmath>
#include <limits>

namespace mlir::fa3 {
#define GEN_PASS_DEF_CONVERTFA3TOLINALG
#include "fa3/Conversion/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static Value indexCst(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

static Value f32Cst(OpBuilder &b, Location loc, float v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

static Value negInf(OpBuilder &b, Location loc) {
  return f32Cst(b, loc, -std::numeric_limits<float>::infinity());
}

/// Widens a scalar to f32 (no-op for f32; e4m3, which LLVM has no type
/// for, decoded from its bits).
static Value toF32(OpBuilder &b, Location loc, Value v) {
  if (v.getType().isF32())
    return v;
  if (isa<Float8E4M3FNType>(v.getType()))
    return decodeE4M3(b, loc, v);
  return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}

/// `c` times the optional f32 scalar `factor` (an FP8 descale).
static Value scaled(OpBuilder &b, Location loc, float c, Value factor) {
  Value v = f32Cst(b, loc, c);
  return factor ? arith::MulFOp::create(b, loc, v, factor).getResult() : v;
}

static Value emptyLike(OpBuilder &b, Location loc, Type type) {
  auto t = cast<RankedTensorType>(type);
  return tensor::EmptyOp::create(b, loc, t.getShape(), t.getElementType());
}

/// A tensor of `type` filled with zeros.
static Value zeros(OpBuilder &b, Location loc, Type type) {
  Type elt = cast<RankedTensorType>(type).getElementType();
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(elt));
  return linalg::FillOp::create(b, loc, zero, emptyLike(b, loc, type))
      .getResult(0);
}

/// Rows of a tile of `tileRows` starting at `row` that lie inside a sequence
/// of `seqLen`: clamp(seqLen - row, 0, tileRows). The start is clamped too so
/// that a slice never begins past the end.
static std::pair<Value, Value> rowsInRange(OpBuilder &b, Location loc,
                                           Value seqLen, Value row,
                                           int64_t tileRows) {
  Value n = arith::SubIOp::create(b, loc, seqLen, row);
  n = arith::MinSIOp::create(b, loc, n, indexCst(b, loc, tileRows));
  n = arith::MaxSIOp::create(b, loc, n, indexCst(b, loc, 0));
  Value start = arith::MinSIOp::create(b, loc, row, seqLen);
  return {start, n};
}

/// The end of the rows a tile op may touch along `dim` of `tensor`: the
/// tensor's extent, or with a `limit` the smaller of the two (clamped at 0),
/// so that a bad limit never reaches outside the tensor.
static Value rowEnd(OpBuilder &b, Location loc, Value tensor, int64_t dim,
                    Value limit) {
  Value extent = isa<MemRefType>(tensor.getType())
                     ? memref::DimOp::create(b, loc, tensor, dim).getResult()
                     : tensor::DimOp::create(b, loc, tensor, dim).getResult();
  if (!limit)
    return extent;
  Value end = arith::MinSIOp::create(b, loc, limit, extent);
  return arith::MaxSIOp::create(b, loc, end, indexCst(b, loc, 0));
}

static AffineMap map(MLIRContext *ctx, unsigned dims,
                     ArrayRef<unsigned> results) {
  SmallVector<AffineExpr> exprs;
  for (unsigned r : results)
    exprs.push_back(getAffineDimExpr(r, ctx));
  return AffineMap::get(dims, 0, exprs, ctx);
}

using BodyFn = function_ref<void(OpBuilder &, Location, ValueRange)>;

static linalg::GenericOp generic(OpBuilder &b, Location loc,
                                 TypeRange resultTypes, ValueRange inputs,
                                 ValueRange outputs, ArrayRef<AffineMap> maps,
                                 ArrayRef<utils::IteratorType> iterators,
                                 BodyFn body) {
  return linalg::GenericOp::create(b, loc, resultTypes, inputs, outputs, maps,
                                   iterators, body);
}

constexpr auto kPar = utils::IteratorType::parallel;
constexpr auto kRed = utils::IteratorType::reduction;

/// `x` (f32) rounded to `elt` and widened back: what a kernel that feeds
/// an f32 value to a 16-bit MMA operand computes. f32 stays as it is.
static Value roundThrough(OpBuilder &b, Location loc, Value x, Type elt) {
  if (elt.isF32())
    return x;
  Value narrow = arith::TruncFOp::create(b, loc, elt, x);
  return arith::ExtFOp::create(b, loc, b.getF32Type(), narrow);
}

/// The tile MMAs (fa3.qk, fa3.pv, fa3.mma_tn) on the CPU: acc[i, j] +=
/// lhs' · rhs over k in f32, over iterations (i, j, k) with the operands
/// read through `lhsMap` and `rhsMap`; lhs' is `roundLhs` of the f32 lhs
/// element (what the kernel does to that operand first), or the element
/// itself.
static linalg::GenericOp
contraction(OpBuilder &b, Location loc, Type type, Value lhs, Value rhs,
            Value acc, AffineMap lhsMap, AffineMap rhsMap,
            function_ref<Value(OpBuilder &, Location, Value)> roundLhs = {}) {
  return generic(
      b, loc, type, {lhs, rhs}, acc,
      {lhsMap, rhsMap, map(b.getContext(), 3, {0, 1})}, {kPar, kPar, kRed},
      [&](OpBuilder &b, Location loc, ValueRange args) {
        Value a = toF32(b, loc, args[0]);
        if (roundLhs)
          a = roundLhs(b, loc, a);
        Value prod = arith::MulFOp::create(b, loc, a, toF32(b, loc, args[1]));
        linalg::YieldOp::create(
            b, loc, ValueRange{arith::AddFOp::create(b, loc, args[2], prod)});
      });
}

namespace {

//===----------------------------------------------------------------------===//
// Tile loads and stores
//===----------------------------------------------------------------------===//

/// The rows a tile op moves, per head: with PackGQA (`packed_heads = G`)
/// tile rows g, g + G, g + 2G, ... are head `head + g` of consecutive query
/// rows, a stride-G slice of the tile; without it (G = 1) all rows are one
/// head's.
/// Calls `move(g, start, n)` for each of the G heads with the in-range rows
/// `[start, start + n)` of the sequence that the slice holds.
static void forEachPackedHead(
    OpBuilder &b, Location loc, Value seqLen, Value row, int64_t tileRows,
    int64_t packed, function_ref<void(int64_t, Value, Value)> move) {
  for (int64_t g = 0; g < packed; ++g) {
    int64_t rowsOfHead = (tileRows - g + packed - 1) / packed;
    auto [start, n] = rowsInRange(b, loc, seqLen, row, rowsOfHead);
    move(g, start, n);
  }
}

/// `head + g`.
static Value headPlus(OpBuilder &b, Location loc, Value head, int64_t g) {
  return g ? arith::AddIOp::create(b, loc, head, indexCst(b, loc, g)).getResult()
           : head;
}

struct LoadTileLowering : OpConversionPattern<LoadTileOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(LoadTileOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto tileType = cast<RankedTensorType>(op.getType());
    int64_t rows = tileType.getDimSize(0), cols = tileType.getDimSize(1);
    Value seqLen = rowEnd(rewriter, loc, op.getSource(), 1, op.getLimit());
    // One slice per packed head (one in all without PackGQA), each a
    // stride-G set of tile rows; the tile's other rows stay zero.
    int64_t packed = op.getPackedHeads().value_or(1);
    OpFoldResult one = rewriter.getIndexAttr(1), zero = rewriter.getIndexAttr(0);
    auto sliceType = RankedTensorType::get({ShapedType::kDynamic, cols},
                                           tileType.getElementType());
    Value tile;
    forEachPackedHead(
        rewriter, loc, seqLen, op.getRow(), rows, packed,
        [&](int64_t g, Value start, Value n) {
          Value slice = tensor::ExtractSliceOp::create(
              rewriter, loc, sliceType, op.getSource(),
              {op.getBatch(), start, headPlus(rewriter, loc, op.getHead(), g),
               zero},
              {one, n, one, rewriter.getIndexAttr(cols)}, {one, one, one, one});
          if (!tile)
            tile = zeros(rewriter, loc, tileType);
          tile = tensor::InsertSliceOp::create(
              rewriter, loc, slice, tile, {rewriter.getIndexAttr(g), zero},
              {n, rewriter.getIndexAttr(cols)},
              {rewriter.getIndexAttr(packed), one});
        });
    rewriter.replaceOp(op, tile);
    return success();
  }
};

/// A loop over the tile's in-range rows, each copied from its page when the
/// page index lies inside the table (entries clamped into the cache).
struct LoadPagedTileLowering : OpConversionPattern<LoadPagedTileOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(LoadPagedTileOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto tileType = cast<RankedTensorType>(op.getType());
    int64_t rows = tileType.getDimSize(0), cols = tileType.getDimSize(1);
    Value cache = op.getCache(), table = op.getPageTable();
    Value numPages = tensor::DimOp::create(rewriter, loc, cache, 0);
    Value pageSize = tensor::DimOp::create(rewriter, loc, cache, 1);
    Value tableWidth = tensor::DimOp::create(rewriter, loc, table, 1);
    Value limit = arith::MaxSIOp::create(rewriter, loc, op.getLimit(),
                                         indexCst(rewriter, loc, 0));
    auto [start, n] = rowsInRange(rewriter, loc, limit, op.getRow(), rows);
    (void)start;
    Value c0 = indexCst(rewriter, loc, 0), c1 = indexCst(rewriter, loc, 1);
    auto rowLoop = scf::ForOp::create(
        rewriter, loc, c0, n, c1, ValueRange{zeros(rewriter, loc, tileType)},
        [&](OpBuilder &b, Location loc, Value i, ValueRange iters) {
          Value key = arith::AddIOp::create(b, loc, op.getRow(), i);
          Value slotInTable = arith::DivUIOp::create(b, loc, key, pageSize);
          Value readable = arith::AndIOp::create(
              b, loc,
              arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                    slotInTable, tableWidth),
              arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt,
                                    numPages, c0));
          auto copy = scf::IfOp::create(
              b, loc, readable,
              [&](OpBuilder &b, Location loc) {
                Value entry = tensor::ExtractOp::create(
                    b, loc, table, ValueRange{op.getBatch(), slotInTable});
                Value page =
                    arith::IndexCastOp::create(b, loc, b.getIndexType(), entry);
                page = arith::MaxSIOp::create(b, loc, page, c0);
                page = arith::MinSIOp::create(
                    b, loc, page, arith::SubIOp::create(b, loc, numPages, c1));
                Value slot = arith::RemUIOp::create(b, loc, key, pageSize);
                OpFoldResult one = b.getIndexAttr(1), zero = b.getIndexAttr(0);
                auto rowType =
                    RankedTensorType::get({1, cols}, tileType.getElementType());
                Value row = tensor::ExtractSliceOp::create(
                    b, loc, rowType, cache, {page, slot, op.getHead(), zero},
                    {one, one, one, b.getIndexAttr(cols)}, {one, one, one, one});
                Value tile = tensor::InsertSliceOp::create(
                    b, loc, row, iters[0], {i, zero},
                    {one, b.getIndexAttr(cols)}, {one, one});
                scf::YieldOp::create(b, loc, tile);
              },
              [&](OpBuilder &b, Location loc) {
                scf::YieldOp::create(b, loc, iters[0]);
              });
          scf::YieldOp::create(b, loc, copy.getResults());
        });
    rewriter.replaceOp(op, rowLoop.getResults());
    return success();
  }
};

struct StoreTileLowering : OpConversionPattern<StoreTileOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(StoreTileOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto tileType = cast<RankedTensorType>(op.getTile().getType());
    int64_t rows = tileType.getDimSize(0), cols = tileType.getDimSize(1);
    Value seqLen = rowEnd(rewriter, loc, op.getDest(), 1, op.getLimit());
    // One stride-G slice of the tile per packed head (one without PackGQA).
    int64_t packed = op.getPackedHeads().value_or(1);
    OpFoldResult one = rewriter.getIndexAttr(1), zero = rewriter.getIndexAttr(0);
    auto partType = RankedTensorType::get({ShapedType::kDynamic, cols},
                                          tileType.getElementType());
    Value result = op.getDest();
    forEachPackedHead(
        rewriter, loc, seqLen, op.getRow(), rows, packed,
        [&](int64_t g, Value start, Value n) {
          Value part = tensor::ExtractSliceOp::create(
              rewriter, loc, partType, op.getTile(),
              {rewriter.getIndexAttr(g), zero},
              {n, rewriter.getIndexAttr(cols)},
              {rewriter.getIndexAttr(packed), one});
          result = tensor::InsertSliceOp::create(
              rewriter, loc, part, result,
              {op.getBatch(), start, headPlus(rewriter, loc, op.getHead(), g),
               zero},
              {one, n, one, rewriter.getIndexAttr(cols)},
              {one, one, one, one});
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// dest[batch, row + i, head, :] += tile[i, :] on the buffer: the in-range
/// rows of the tile as a buffer, added into the buffer's rows by a
/// linalg.generic (serial on the CPU, so `ordered` holds as is).
struct AccumulateTileLowering : OpConversionPattern<AccumulateTileOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(AccumulateTileOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto tileType = cast<RankedTensorType>(op.getTile().getType());
    int64_t rows = tileType.getDimSize(0), cols = tileType.getDimSize(1);
    Value seqLen = rowEnd(rewriter, loc, op.getDest(), 1, op.getLimit());
    auto [start, n] = rowsInRange(rewriter, loc, seqLen, op.getRow(), rows);
    OpFoldResult one = rewriter.getIndexAttr(1),
                 zero = rewriter.getIndexAttr(0);
    OpFoldResult width = rewriter.getIndexAttr(cols);
    Value part = tensor::ExtractSliceOp::create(
        rewriter, loc,
        RankedTensorType::get({ShapedType::kDynamic, cols},
                              tileType.getElementType()),
        op.getTile(), {zero, zero}, {n, width}, {one, one});
    auto destType = cast<MemRefType>(op.getDest().getType());
    SmallVector<OpFoldResult> offsets = {op.getBatch(), start, op.getHead(),
                                         zero};
    SmallVector<OpFoldResult> sizes = {one, n, one, width};
    SmallVector<OpFoldResult> strides = {one, one, one, one};
    auto rowsType =
        cast<MemRefType>(memref::SubViewOp::inferRankReducedResultType(
            {ShapedType::kDynamic, cols}, destType, offsets, sizes, strides));
    Value dest = memref::SubViewOp::create(
        rewriter, loc, rowsType, op.getDest(), offsets, sizes, strides);
    Value partBuffer = bufferization::ToBufferOp::create(
        rewriter, loc,
        MemRefType::get({ShapedType::kDynamic, cols},
                        tileType.getElementType()),
        part, /*readOnly=*/true);
    MLIRContext *ctx = rewriter.getContext();
    generic(rewriter, loc, TypeRange(), partBuffer, dest,
            {map(ctx, 2, {0, 1}), map(ctx, 2, {0, 1})}, {kPar, kPar},
            [](OpBuilder &b, Location loc, ValueRange args) {
              linalg::YieldOp::create(
                  b, loc,
                  ValueRange{arith::AddFOp::create(b, loc, args[1], args[0])});
            });
    rewriter.eraseOp(op);
    return success();
  }
};

struct LoadStatsLowering : OpConversionPattern<LoadStatsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(LoadStatsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto tileType = cast<RankedTensorType>(op.getType());
    Value seqLen = rowEnd(rewriter, loc, op.getSource(), 2, op.getLimit());
    auto [start, n] = rowsInRange(rewriter, loc, seqLen, op.getRow(),
                                  tileType.getDimSize(0));
    OpFoldResult one = rewriter.getIndexAttr(1), zero = rewriter.getIndexAttr(0);
    auto sliceType = RankedTensorType::get({ShapedType::kDynamic},
                                           tileType.getElementType());
    Value slice = tensor::ExtractSliceOp::create(
        rewriter, loc, sliceType, op.getSource(),
        {op.getBatch(), op.getHead(), start}, {one, one, n}, {one, one, one});
    Value tile = tensor::InsertSliceOp::create(
        rewriter, loc, slice, zeros(rewriter, loc, tileType), {zero}, {n},
        {one});
    rewriter.replaceOp(op, tile);
    return success();
  }
};

struct StoreStatsLowering : OpConversionPattern<StoreStatsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(StoreStatsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto tileType = cast<RankedTensorType>(op.getTile().getType());
    Value seqLen = rowEnd(rewriter, loc, op.getDest(), 2, op.getLimit());
    // One stride-G slice of the tile per packed head (one without PackGQA).
    int64_t packed = op.getPackedHeads().value_or(1);
    OpFoldResult one = rewriter.getIndexAttr(1);
    auto partType = RankedTensorType::get({ShapedType::kDynamic},
                                          tileType.getElementType());
    Value result = op.getDest();
    forEachPackedHead(
        rewriter, loc, seqLen, op.getRow(), tileType.getDimSize(0), packed,
        [&](int64_t g, Value start, Value n) {
          Value part = tensor::ExtractSliceOp::create(
              rewriter, loc, partType, op.getTile(),
              {rewriter.getIndexAttr(g)}, {n},
              {rewriter.getIndexAttr(packed)});
          result = tensor::InsertSliceOp::create(
              rewriter, loc, part, result,
              {op.getBatch(), headPlus(rewriter, loc, op.getHead(), g), start},
              {one, one, n}, {one, one, one});
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

struct QKLowering : OpConversionPattern<QKOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(QKOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    // (i, j, d): S[i, j] += Q[i, d] * K[j, d].
    auto result = contraction(rewriter, loc, op.getType(), op.getQuery(),
                              op.getKey(), zeros(rewriter, loc, op.getType()),
                              map(ctx, 3, {0, 2}), map(ctx, 3, {1, 2}));
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

struct PVLowering : OpConversionPattern<PVOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(PVOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Type valueElt =
        cast<RankedTensorType>(op.getValue().getType()).getElementType();
    std::optional<float> probsScale;
    if (FloatAttr attr = op.getProbsScaleAttr())
      probsScale = attr.getValueAsDouble();
    // (i, j, k): O[i, j] += round(P[i, k]) * V[k, j], P rounded to V's type.
    auto roundProbs = [&](OpBuilder &b, Location loc, Value p) {
      if (!probsScale)
        return roundThrough(b, loc, p, valueElt);
      // The FP8 kernel's P: e4m3 of P · s, then / s (exact: s = 2^8).
      p = roundToE4M3(
          b, loc,
          arith::MulFOp::create(b, loc, p, f32Cst(b, loc, *probsScale)));
      return arith::MulFOp::create(b, loc, p,
                                   f32Cst(b, loc, 1.0f / *probsScale))
          .getResult();
    };
    auto result = contraction(rewriter, loc, op.getType(), op.getProbs(),
                              op.getValue(), op.getAcc(), map(ctx, 3, {0, 2}),
                              map(ctx, 3, {2, 1}), roundProbs);
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Elementwise and row steps
//===----------------------------------------------------------------------===//

struct SoftcapLowering : OpConversionPattern<SoftcapOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(SoftcapOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    float scale = op.getScale().convertToFloat();
    float cap = op.getSoftcap().convertToFloat();
    // With a descale d the scale is scale · d on both sides.
    Value d = op.getDescale();
    auto id = map(ctx, 2, {0, 1});
    auto result = generic(
        rewriter, loc, op.getType(), op.getScores(),
        emptyLike(rewriter, loc, op.getType()), {id, id}, {kPar, kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          Value in = scaled(b, loc, scale / cap, d);
          Value x = arith::MulFOp::create(b, loc, args[0], in);
          Value t = math::TanhOp::create(b, loc, x);
          Value out = f32Cst(b, loc, cap / scale);
          if (d)
            out = arith::DivFOp::create(b, loc, out, d);
          linalg::YieldOp::create(
              b, loc, ValueRange{arith::MulFOp::create(b, loc, t, out)});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

struct MaskLowering : OpConversionPattern<MaskOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(MaskOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    int64_t left, right;
    std::tie(left, right) = resolveWindow(op.getCausal(), op.getWindow());
    Value offset =
        arith::SubIOp::create(rewriter, loc, op.getKLen(), op.getQLen());
    auto id = map(ctx, 2, {0, 1});
    auto result = generic(
        rewriter, loc, op.getType(), op.getScores(),
        emptyLike(rewriter, loc, op.getType()), {id, id}, {kPar, kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) -> Value {
            return arith::CmpIOp::create(b, loc, p, x, y);
          };
          Value i = linalg::IndexOp::create(b, loc, 0);
          Value j = linalg::IndexOp::create(b, loc, 1);
          // PackGQA: G consecutive rows are the G heads of one query.
          if (int64_t packed = op.getPackedHeads().value_or(1); packed > 1)
            i = arith::DivUIOp::create(b, loc, i, indexCst(b, loc, packed));
          Value row = arith::AddIOp::create(b, loc, op.getQStart(), i);
          Value col = arith::AddIOp::create(b, loc, op.getKStart(), j);
          // The diagonal of row r sits at column r + Sk - Sq.
          Value diag = arith::AddIOp::create(b, loc, row, offset);
          Value hidden = cmp(arith::CmpIPredicate::sge, col, op.getKLen());
          if (right >= 0) {
            Value last = arith::AddIOp::create(b, loc, diag,
                                               indexCst(b, loc, right));
            hidden = arith::OrIOp::create(
                b, loc, hidden, cmp(arith::CmpIPredicate::sgt, col, last));
          }
          if (left >= 0) {
            Value first = arith::SubIOp::create(b, loc, diag,
                                                indexCst(b, loc, left));
            hidden = arith::OrIOp::create(
                b, loc, hidden, cmp(arith::CmpIPredicate::slt, col, first));
          }
          linalg::YieldOp::create(
              b, loc,
              ValueRange{arith::SelectOp::create(b, loc, hidden, negInf(b, loc),
                                                 args[0])});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

/// Each entry computes its own Philox call (the CPU has no thread that
/// holds a whole 2×4 group); the bits are those of any other backend.
struct DropoutLowering : OpConversionPattern<DropoutOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(DropoutOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    DropoutConstants constants =
        DropoutConstants::of(op.getP().convertToFloat());
    Type i32 = rewriter.getI32Type();
    auto seedAt = [&](int64_t i) -> Value {
      return tensor::ExtractOp::create(rewriter, loc, op.getRng(),
                                       ValueRange{indexCst(rewriter, loc, i)});
    };
    DropoutGenerator gen = DropoutGenerator::fromSeedAndOffset(
        rewriter, loc, seedAt(0), seedAt(1));
    auto toI32 = [&](OpBuilder &b, Value index) -> Value {
      return arith::IndexCastUIOp::create(b, loc, i32, index);
    };
    Value stream = toI32(rewriter, op.getStream());
    Value threshold = arith::ConstantIntOp::create(
        rewriter, loc, i32, static_cast<int32_t>(constants.threshold));
    auto id = map(ctx, 2, {0, 1});
    auto result = generic(
        rewriter, loc, op.getType(), op.getProbs(),
        emptyLike(rewriter, loc, op.getType()), {id, id}, {kPar, kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          Value row = arith::AddIOp::create(b, loc, op.getQStart(),
                                            linalg::IndexOp::create(b, loc, 0));
          Value col = arith::AddIOp::create(b, loc, op.getKStart(),
                                            linalg::IndexOp::create(b, loc, 1));
          Value word = buildDropoutWord(b, loc, gen, toI32(b, row),
                                        toI32(b, col), stream);
          Value keep = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                             word, threshold);
          Value scaled = arith::MulFOp::create(b, loc, args[0],
                                               f32Cst(b, loc, constants.scale));
          linalg::YieldOp::create(
              b, loc,
              ValueRange{arith::SelectOp::create(b, loc, keep, scaled,
                                                 f32Cst(b, loc, 0.0f))});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

struct OnlineSoftmaxLowering : OpConversionPattern<OnlineSoftmaxOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(OnlineSoftmaxOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    // c = exp2_scale (times the FP8 descale).
    float exp2Scale = op.getExp2Scale().convertToFloat();
    Value descale = op.getDescale();
    Type rowType = op.getRowMax().getType();
    Type tileType = op.getScores().getType();
    AffineMap ij = map(ctx, 2, {0, 1}), i2 = map(ctx, 2, {0}),
              i1 = map(ctx, 1, {0});

    // m' = max(m, max_j s).
    Value newMax =
        generic(rewriter, loc, rowType, op.getScores(), op.getRowMax(),
                {ij, i2}, {kPar, kRed},
                [](OpBuilder &b, Location loc, ValueRange args) {
                  linalg::YieldOp::create(
                      b, loc,
                      ValueRange{arith::MaximumFOp::create(b, loc, args[0],
                                                           args[1])});
                })
            .getResult(0);

    // Per row: the max to keep (m' or, under a rescale_threshold τ, m while
    // c·m' − c·m <= τ), the max to subtract (0 while the row is all -inf,
    // so that exp2(-inf - -inf) never makes a NaN), the correction factor (1
    // exactly for a kept m) and the rescaled running sum.
    std::optional<int64_t> threshold = op.getRescaleThreshold();
    int64_t numOutputs = threshold ? 4 : 3;
    SmallVector<Value> inits;
    for (int64_t i = 0; i < numOutputs; ++i)
      inits.push_back(emptyLike(rewriter, loc, rowType));
    auto rowStep = generic(
        rewriter, loc, SmallVector<Type>(numOutputs, rowType),
        {op.getRowMax(), newMax, op.getRowSum()}, inits,
        SmallVector<AffineMap>(3 + numOutputs, i1), {kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          Value kept = args[1], keep;
          if (threshold) {
            // -inf (nothing seen yet) never keeps: +inf or NaN fail <=.
            Value growth = arith::MulFOp::create(
                b, loc, arith::SubFOp::create(b, loc, args[1], args[0]),
                scaled(b, loc, exp2Scale, descale));
            keep = arith::CmpFOp::create(
                b, loc, arith::CmpFPredicate::OLE, growth,
                f32Cst(b, loc, static_cast<float>(*threshold)));
            kept = arith::SelectOp::create(b, loc, keep, args[0], args[1]);
          }
          Value isEmpty = arith::CmpFOp::create(
              b, loc, arith::CmpFPredicate::OEQ, kept, negInf(b, loc));
          Value base = arith::SelectOp::create(b, loc, isEmpty,
                                               f32Cst(b, loc, 0.0f), kept);
          Value c = scaled(b, loc, exp2Scale, descale);
          Value baseScaled = arith::MulFOp::create(b, loc, base, c);
          Value oldScaled = arith::MulFOp::create(b, loc, args[0], c);
          Value alpha = math::Exp2Op::create(
              b, loc, arith::SubFOp::create(b, loc, oldScaled, baseScaled));
          if (keep)
            alpha = arith::SelectOp::create(b, loc, keep, f32Cst(b, loc, 1.0f),
                                            alpha);
          Value sum = arith::MulFOp::create(b, loc, alpha, args[2]);
          SmallVector<Value> results = {baseScaled, alpha, sum};
          if (keep)
            results.push_back(kept);
          linalg::YieldOp::create(b, loc, results);
        });
    Value baseScaled = rowStep.getResult(0);
    Value correction = rowStep.getResult(1);
    if (threshold)
      newMax = rowStep.getResult(3);

    // p = exp2(c * s - c * m').
    Value probs =
        generic(rewriter, loc, tileType, {op.getScores(), baseScaled},
                emptyLike(rewriter, loc, tileType), {ij, i2, ij}, {kPar, kPar},
                [&](OpBuilder &b, Location loc, ValueRange args) {
                  Value x = arith::MulFOp::create(
                      b, loc, args[0], scaled(b, loc, exp2Scale, descale));
                  linalg::YieldOp::create(
                      b, loc,
                      ValueRange{math::Exp2Op::create(
                          b, loc, arith::SubFOp::create(b, loc, x, args[1]))});
                })
            .getResult(0);

    // l' = correction * l + sum_j p.
    Value newSum =
        generic(rewriter, loc, rowType, probs, rowStep.getResult(2), {ij, i2},
                {kPar, kRed},
                [](OpBuilder &b, Location loc, ValueRange args) {
                  linalg::YieldOp::create(
                      b, loc,
                      ValueRange{arith::AddFOp::create(b, loc, args[1],
                                                       args[0])});
                })
            .getResult(0);

    rewriter.replaceOp(op, {probs, newMax, newSum, correction});
    return success();
  }
};

struct RescaleLowering : OpConversionPattern<RescaleOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RescaleOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    AffineMap ij = map(ctx, 2, {0, 1}), i = map(ctx, 2, {0});
    auto result = generic(
        rewriter, loc, op.getType(), {op.getAcc(), op.getCorrection()},
        emptyLike(rewriter, loc, op.getType()), {ij, i, ij}, {kPar, kPar},
        [](OpBuilder &b, Location loc, ValueRange args) {
          linalg::YieldOp::create(
              b, loc,
              ValueRange{arith::MulFOp::create(b, loc, args[0], args[1])});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

struct FinalizeLowering : OpConversionPattern<FinalizeOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(FinalizeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    // FP8: the max in raw units (scale · qk_descale) and the values
    // quantized (v_descale on the output).
    float scale = op.getScale().convertToFloat();
    Value qkDescale = op.getQkDescale(), vDescale = op.getVDescale();
    Type rowType = op.getRowMax().getType();
    Type outElt =
        cast<RankedTensorType>(op.getOutput().getType()).getElementType();
    AffineMap i1 = map(ctx, 1, {0});

    // A row that saw no key has l = 0: O = 0 and LSE = -inf.
    auto rowStep = generic(
        rewriter, loc, {rowType, rowType}, {op.getRowMax(), op.getRowSum()},
        {emptyLike(rewriter, loc, rowType), emptyLike(rewriter, loc, rowType)},
        {i1, i1, i1, i1}, {kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          Value zero = f32Cst(b, loc, 0.0f);
          Value isEmpty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                                args[1], zero);
          Value inv = arith::DivFOp::create(
              b, loc, vDescale ? vDescale : f32Cst(b, loc, 1.0f), args[1]);
          Value lse = arith::AddFOp::create(
              b, loc,
              arith::MulFOp::create(b, loc, args[0],
                                    scaled(b, loc, scale, qkDescale)),
              math::LogOp::create(b, loc, args[1]));
          linalg::YieldOp::create(
              b, loc,
              ValueRange{arith::SelectOp::create(b, loc, isEmpty, zero, inv),
                         arith::SelectOp::create(b, loc, isEmpty,
                                                 negInf(b, loc), lse)});
        });

    AffineMap ij = map(ctx, 2, {0, 1}), i = map(ctx, 2, {0});
    Value out =
        generic(rewriter, loc, op.getOutput().getType(),
                {op.getAcc(), rowStep.getResult(0)},
                emptyLike(rewriter, loc, op.getOutput().getType()),
                {ij, i, ij}, {kPar, kPar},
                [outElt](OpBuilder &b, Location loc, ValueRange args) {
                  Value v = arith::MulFOp::create(b, loc, args[0], args[1]);
                  if (!outElt.isF32())
                    v = arith::TruncFOp::create(b, loc, outElt, v);
                  linalg::YieldOp::create(b, loc, ValueRange{v});
                })
            .getResult(0);
    rewriter.replaceOp(op, {out, rowStep.getResult(1)});
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Backward steps
//===----------------------------------------------------------------------===//

struct RowDotLowering : OpConversionPattern<RowDotOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RowDotOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    AffineMap ij = map(ctx, 2, {0, 1}), i = map(ctx, 2, {0});
    // The sums start from -minus (Δ - dLSE in the backward) or from 0.
    Value init = zeros(rewriter, loc, op.getType());
    if (Value minus = op.getMinus())
      init = generic(rewriter, loc, op.getType(), {minus}, init,
                     {map(ctx, 1, {0}), map(ctx, 1, {0})}, {kPar},
                     [](OpBuilder &b, Location loc, ValueRange args) {
                       linalg::YieldOp::create(
                           b, loc,
                           ValueRange{arith::NegFOp::create(b, loc, args[0])});
                     })
                 .getResult(0);
    auto result = generic(
        rewriter, loc, op.getType(), {op.getLhs(), op.getRhs()}, init,
        {ij, ij, i}, {kPar, kRed},
        [](OpBuilder &b, Location loc, ValueRange args) {
          Value prod = arith::MulFOp::create(b, loc, toF32(b, loc, args[0]),
                                             toF32(b, loc, args[1]));
          linalg::YieldOp::create(
              b, loc, ValueRange{arith::AddFOp::create(b, loc, args[2], prod)});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

struct RecomputeProbsLowering : OpConversionPattern<RecomputeProbsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RecomputeProbsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    float c = op.getExp2Scale().convertToFloat();
    AffineMap ij = map(ctx, 2, {0, 1}), i = map(ctx, 2, {0});
    auto result = generic(
        rewriter, loc, op.getType(), {op.getScores(), op.getLse()},
        emptyLike(rewriter, loc, op.getType()), {ij, i, ij}, {kPar, kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          // A row with LSE = -inf saw no key: its probabilities are 0, not
          // exp2(x + inf).
          Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                              args[1], negInf(b, loc));
          Value x = arith::SubFOp::create(
              b, loc, arith::MulFOp::create(b, loc, args[0], f32Cst(b, loc, c)),
              arith::MulFOp::create(b, loc, args[1],
                                    f32Cst(b, loc, float(M_LOG2E))));
          Value p = math::Exp2Op::create(b, loc, x);
          linalg::YieldOp::create(
              b, loc,
              ValueRange{arith::SelectOp::create(b, loc, empty,
                                                 f32Cst(b, loc, 0.0f), p)});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

struct SoftmaxGradLowering : OpConversionPattern<SoftmaxGradOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(SoftmaxGradOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    AffineMap ij = map(ctx, 2, {0, 1}), i = map(ctx, 2, {0});
    auto result = generic(
        rewriter, loc, op.getType(),
        {op.getProbs(), op.getGradProbs(), op.getDelta()},
        emptyLike(rewriter, loc, op.getType()), {ij, ij, i, ij}, {kPar, kPar},
        [](OpBuilder &b, Location loc, ValueRange args) {
          Value diff = arith::SubFOp::create(b, loc, args[1], args[2]);
          linalg::YieldOp::create(
              b, loc, ValueRange{arith::MulFOp::create(b, loc, args[0], diff)});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

struct SoftcapGradLowering : OpConversionPattern<SoftcapGradOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(SoftcapGradOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    float k = op.getScale().convertToFloat() / op.getSoftcap().convertToFloat();
    AffineMap ij = map(ctx, 2, {0, 1});
    auto result = generic(
        rewriter, loc, op.getType(), {op.getGrad(), op.getCapped()},
        emptyLike(rewriter, loc, op.getType()), {ij, ij, ij}, {kPar, kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          // tanh = capped · scale / softcap; d tanh = 1 - tanh².
          Value t = arith::MulFOp::create(b, loc, args[1], f32Cst(b, loc, k));
          Value d = arith::SubFOp::create(b, loc, f32Cst(b, loc, 1.0f),
                                          arith::MulFOp::create(b, loc, t, t));
          linalg::YieldOp::create(
              b, loc, ValueRange{arith::MulFOp::create(b, loc, args[0], d)});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

struct MmaTNLowering : OpConversionPattern<MmaTNOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(MmaTNOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Type rhsElt = cast<RankedTensorType>(op.getRhs().getType()).getElementType();
    // (i, j, k): acc[i, j] += round(lhs[k, i]) * rhs[k, j], lhs rounded to
    // rhs's type.
    auto result =
        contraction(rewriter, loc, op.getType(), op.getLhs(), op.getRhs(),
                    op.getAcc(), map(ctx, 3, {2, 0}), map(ctx, 3, {2, 1}),
                    [&](OpBuilder &b, Location loc, Value a) {
                      return roundThrough(b, loc, a, rhsElt);
                    });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Split-KV merge
//===----------------------------------------------------------------------===//

/// lse = log Σ_s exp(lse_s) (via the max), O = Σ_s exp(lse_s − lse) · O_s,
/// as four linalg.generic ops over [N, B, ...] with N the reduction.
struct CombineSplitsLowering : OpConversionPattern<CombineSplitsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(CombineSplitsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Value parts = op.getPartialOutput(), lses = op.getPartialLse();
    auto outType = cast<RankedTensorType>(op.getOutput().getType());
    auto lseType = cast<RankedTensorType>(op.getLse().getType());
    Type f32 = rewriter.getF32Type();
    // [B, Hq, Sq] and [B, Sq, Hq, Dv] from the partials' sizes.
    auto size = [&](Value v, int64_t d) {
      return tensor::getMixedSize(rewriter, loc, v, d);
    };
    auto empty = [&](ArrayRef<OpFoldResult> sizes) {
      return tensor::EmptyOp::create(rewriter, loc, sizes, f32).getResult();
    };
    SmallVector<OpFoldResult> rowSizes = {size(lses, 1), size(lses, 2),
                                          size(lses, 3)};
    SmallVector<OpFoldResult> outSizes = {size(parts, 1), size(parts, 2),
                                          size(parts, 3), size(parts, 4)};
    auto filled = [&](ArrayRef<OpFoldResult> sizes, float v) {
      return linalg::FillOp::create(rewriter, loc, f32Cst(rewriter, loc, v),
                                    empty(sizes))
          .getResult(0);
    };
    auto rowType = RankedTensorType::get(lseType.getShape(), f32);
    auto accType = RankedTensorType::get(outType.getShape(), f32);
    // (n, b, h, q) -> ...
    AffineMap all4 = AffineMap::getMultiDimIdentityMap(4, ctx);
    AffineMap rows4 = map(ctx, 4, {1, 2, 3});
    SmallVector<utils::IteratorType> red4 = {kRed, kPar, kPar, kPar};
    auto finiteOr0 = [](OpBuilder &b, Location loc, Value x) {
      Value isInf = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, x,
                                          negInf(b, loc));
      return arith::SelectOp::create(b, loc, isInf, f32Cst(b, loc, 0.0f), x)
          .getResult();
    };

    Value rowMax =
        generic(rewriter, loc, rowType, {lses}, filled(rowSizes, -std::numeric_limits<float>::infinity()),
                {all4, rows4}, red4,
                [](OpBuilder &b, Location loc, ValueRange args) {
                  linalg::YieldOp::create(
                      b, loc,
                      ValueRange{arith::MaximumFOp::create(b, loc, args[0],
                                                           args[1])});
                })
            .getResult(0);
    Value rowSum =
        generic(rewriter, loc, rowType, {lses, rowMax}, filled(rowSizes, 0.0f),
                {all4, rows4, rows4}, red4,
                [&](OpBuilder &b, Location loc, ValueRange args) {
                  Value d = arith::SubFOp::create(b, loc, args[0],
                                                  finiteOr0(b, loc, args[1]));
                  Value e = math::ExpOp::create(b, loc, d);
                  linalg::YieldOp::create(
                      b, loc, ValueRange{arith::AddFOp::create(b, loc, args[2], e)});
                })
            .getResult(0);
    AffineMap id3 = AffineMap::getMultiDimIdentityMap(3, ctx);
    Value lse =
        generic(rewriter, loc, rowType, {rowMax, rowSum}, empty(rowSizes),
                {id3, id3, id3}, {kPar, kPar, kPar},
                [&](OpBuilder &b, Location loc, ValueRange args) {
                  Value hasKey = arith::CmpFOp::create(
                      b, loc, arith::CmpFPredicate::OGT, args[1],
                      f32Cst(b, loc, 0.0f));
                  Value l = arith::AddFOp::create(
                      b, loc, finiteOr0(b, loc, args[0]),
                      math::LogOp::create(b, loc, args[1]));
                  linalg::YieldOp::create(
                      b, loc,
                      ValueRange{arith::SelectOp::create(b, loc, hasKey, l,
                                                         negInf(b, loc))});
                })
            .getResult(0);
    // (n, b, q, h, d): O += exp(lse_n − lse) · O_n; a row without keys
    // (lse = -inf) weighs every split 0.
    AffineMap all5 = AffineMap::getMultiDimIdentityMap(5, ctx);
    AffineMap lseN = map(ctx, 5, {0, 1, 3, 2}), lseRow = map(ctx, 5, {1, 3, 2});
    AffineMap out5 = map(ctx, 5, {1, 2, 3, 4});
    Value acc =
        generic(rewriter, loc, accType, {parts, lses, lse},
                filled(outSizes, 0.0f), {all5, lseN, lseRow, out5},
                {kRed, kPar, kPar, kPar, kPar},
                [&](OpBuilder &b, Location loc, ValueRange args) {
                  Value rowIsEmpty = arith::CmpFOp::create(
                      b, loc, arith::CmpFPredicate::OEQ, args[2],
                      negInf(b, loc));
                  Value w = math::ExpOp::create(
                      b, loc,
                      arith::SubFOp::create(b, loc, args[1],
                                            finiteOr0(b, loc, args[2])));
                  w = arith::SelectOp::create(b, loc, rowIsEmpty,
                                              f32Cst(b, loc, 0.0f), w);
                  Value term = arith::MulFOp::create(b, loc, w, args[0]);
                  linalg::YieldOp::create(
                      b, loc, ValueRange{arith::AddFOp::create(b, loc, args[3], term)});
                })
            .getResult(0);
    Value out = acc;
    if (!outType.getElementType().isF32()) {
      Value init = tensor::EmptyOp::create(rewriter, loc, outSizes,
                                           outType.getElementType());
      AffineMap id4 = AffineMap::getMultiDimIdentityMap(4, ctx);
      out = generic(rewriter, loc, outType, {acc}, init, {id4, id4},
                    {kPar, kPar, kPar, kPar},
                    [&](OpBuilder &b, Location loc, ValueRange args) {
                      linalg::YieldOp::create(
                          b, loc,
                          ValueRange{arith::TruncFOp::create(
                              b, loc, outType.getElementType(), args[0])});
                    })
                .getResult(0);
    }
    rewriter.replaceOp(op, {out, lse});
    return success();
  }
};

struct ScaleCastLowering : OpConversionPattern<ScaleCastOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ScaleCastOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    float scale = op.getScale().convertToFloat();
    Type outElt = cast<RankedTensorType>(op.getType()).getElementType();
    AffineMap ij = map(ctx, 2, {0, 1});
    auto result = generic(
        rewriter, loc, op.getType(), op.getAcc(),
        emptyLike(rewriter, loc, op.getType()), {ij, ij}, {kPar, kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          Value v = args[0];
          if (scale != 1.0f)
            v = arith::MulFOp::create(b, loc, v, f32Cst(b, loc, scale));
          if (!outElt.isF32())
            v = arith::TruncFOp::create(b, loc, outElt, v);
          linalg::YieldOp::create(b, loc, ValueRange{v});
        });
    rewriter.replaceOp(op, result.getResults());
    return success();
  }
};

/// Replaces `op` with the ops of `block` (one of its regions') but the
/// fa3.yield ending it, and `op`'s results with what that yield returns.
static void inlineYieldingBlock(Operation *op, Block &block,
                                ConversionPatternRewriter &rewriter) {
  auto yield = cast<YieldOp>(block.getTerminator());
  SmallVector<Value> values = yield.getValues();
  rewriter.eraseOp(yield);
  rewriter.inlineBlockBefore(&block, op);
  rewriter.replaceOp(op, values);
}

/// A pingpong turn only orders a GPU's warpgroups: its body, inline.
struct MmaTurnLowering : OpConversionPattern<MmaTurnOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(MmaTurnOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    inlineYieldingBlock(op, op.getBody().front(), rewriter);
    return success();
  }
};

/// Warp specialization only splits a GPU's warpgroups: the consumers' tile
/// ops load the tiles the producer's ring fills would, so the CPU runs the
/// consumers region and drops the producer's.
struct WarpSpecializeLowering : OpConversionPattern<WarpSpecializeOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(WarpSpecializeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    inlineYieldingBlock(op, op.getConsumers().front(), rewriter);
    return success();
  }
};

struct ConvertFA3ToLinalgPass
    : public fa3::impl::ConvertFA3ToLinalgBase<ConvertFA3ToLinalgPass> {
  using Base::Base;

  void runOnOperation() override {
    ConversionTarget target(getContext());
    target.addIllegalDialect<FA3Dialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    RewritePatternSet patterns(&getContext());
    populateFA3ToLinalgConversionPatterns(patterns);
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::fa3::populateFA3ToLinalgConversionPatterns(
    RewritePatternSet &patterns) {
  patterns.add<LoadTileLowering, LoadPagedTileLowering, StoreTileLowering,
               AccumulateTileLowering, CombineSplitsLowering, LoadStatsLowering,
               StoreStatsLowering, QKLowering, PVLowering, SoftcapLowering,
               MaskLowering, DropoutLowering, OnlineSoftmaxLowering,
               RescaleLowering, FinalizeLowering, RowDotLowering,
               RecomputeProbsLowering, SoftmaxGradLowering, SoftcapGradLowering,
               MmaTNLowering, ScaleCastLowering, MmaTurnLowering,
               WarpSpecializeLowering>(patterns.getContext());
  populateFP8OpsToLinalgPatterns(patterns);
}
