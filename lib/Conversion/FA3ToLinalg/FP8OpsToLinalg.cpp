//===- FP8OpsToLinalg.cpp - fa3.hadamard and fa3.quantize to linalg -----===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The CPU lowering of the tensor-level ops fa3-cast-fp8 inserts. Both stay
// on tensors (linalg.generic), so the CPU pipeline's bufferization applies.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToLinalg/FA3ToLinalg.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Utils/E4M3.h"

#include "mlir/Transforms/DialectConversion.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa3;

static constexpr utils::IteratorType kPar = utils::IteratorType::parallel;
static constexpr utils::IteratorType kRed = utils::IteratorType::reduction;

/// The dynamic sizes of `value` (a ranked tensor), in order.
static SmallVector<Value> dynamicSizes(OpBuilder &b, Location loc,
                                       Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<Value> sizes;
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (type.isDynamicDim(i))
      sizes.push_back(tensor::DimOp::create(b, loc, value, i));
  return sizes;
}

/// An empty tensor shaped like `like` (whose dynamic sizes it takes) with
/// element type `element`.
static Value emptyShapedLike(OpBuilder &b, Location loc, Value like,
                             Type element) {
  auto type = cast<RankedTensorType>(like.getType());
  return tensor::EmptyOp::create(b, loc, type.getShape(), element,
                                 dynamicSizes(b, loc, like));
}

static Value toF32(OpBuilder &b, Location loc, Value v) {
  return v.getType().isF32() ? v
                             : arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}

static Value f32Cst(OpBuilder &b, Location loc, float v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

namespace {
/// x · diag(s) · H / sqrt(D) as log2(D) butterfly passes: pass h pairs
/// element i with i ^ h and writes the sum to the lower index, the
/// difference (lower − upper) to the upper one. Each pass is one parallel
/// linalg.generic reading its partner with tensor.extract.
struct HadamardLowering : OpConversionPattern<HadamardOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(HadamardOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Value input = adaptor.getInput();
    auto type = cast<RankedTensorType>(input.getType());
    int64_t rank = type.getRank(), d = type.getShape().back();
    Type f32 = rewriter.getF32Type();
    auto identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
    SmallVector<utils::IteratorType> parallel(rank, kPar);

    // Pass 0: the signs, with 1/sqrt(D) folded in.
    SmallVector<float> signs;
    for (int64_t i = 0; i < d; ++i)
      signs.push_back(HadamardOp::getSign(op.getSeed(), i) /
                      std::sqrt(float(d)));
    auto signType = RankedTensorType::get({d}, f32);
    Value signTensor = arith::ConstantOp::create(
        rewriter, loc, DenseElementsAttr::get(signType, ArrayRef(signs)));
    auto lastDim = AffineMap::get(rank, 0, getAffineDimExpr(rank - 1, ctx));
    Value y = linalg::GenericOp::create(
                  rewriter, loc, TypeRange{type.clone(f32)},
                  ValueRange{input, signTensor},
                  ValueRange{emptyShapedLike(rewriter, loc, input, f32)},
                  ArrayRef<AffineMap>{identity, lastDim, identity}, parallel,
                  [&](OpBuilder &b, Location loc, ValueRange args) {
                    linalg::YieldOp::create(
                        b, loc,
                        ValueRange{arith::MulFOp::create(
                            b, loc, toF32(b, loc, args[0]), args[1])});
                  })
                  .getResult(0);

    for (int64_t h = 1; h < d; h *= 2) {
      Value prev = y;
      y = linalg::GenericOp::create(
              rewriter, loc, TypeRange{prev.getType()}, ValueRange{prev},
              ValueRange{emptyShapedLike(rewriter, loc, prev, f32)},
              ArrayRef<AffineMap>{identity, identity}, parallel,
              [&](OpBuilder &b, Location loc, ValueRange args) {
                SmallVector<Value> indices;
                for (int64_t i = 0; i < rank; ++i)
                  indices.push_back(linalg::IndexOp::create(b, loc, i));
                Value hCst = arith::ConstantIndexOp::create(b, loc, h);
                Value upper = arith::CmpIOp::create(
                    b, loc, arith::CmpIPredicate::ne,
                    arith::AndIOp::create(b, loc, indices.back(), hCst),
                    arith::ConstantIndexOp::create(b, loc, 0));
                indices.back() =
                    arith::XOrIOp::create(b, loc, indices.back(), hCst);
                Value partner =
                    tensor::ExtractOp::create(b, loc, prev, indices);
                Value sum = arith::AddFOp::create(b, loc, args[0], partner);
                Value diff = arith::SubFOp::create(b, loc, partner, args[0]);
                linalg::YieldOp::create(b, loc,
                                        ValueRange{arith::SelectOp::create(
                                            b, loc, upper, diff, sum)});
              })
              .getResult(0);
    }

    auto resultType = cast<RankedTensorType>(op.getType());
    Type resultElt = resultType.getElementType();
    if (!resultElt.isF32())
      y = linalg::GenericOp::create(
              rewriter, loc, TypeRange{type.clone(resultElt)}, ValueRange{y},
              ValueRange{emptyShapedLike(rewriter, loc, y, resultElt)},
              ArrayRef<AffineMap>{identity, identity}, parallel,
              [&](OpBuilder &b, Location loc, ValueRange args) {
                linalg::YieldOp::create(b, loc,
                                        ValueRange{arith::TruncFOp::create(
                                            b, loc, resultElt, args[0])});
              })
              .getResult(0);
    if (y.getType() != resultType)
      y = tensor::CastOp::create(rewriter, loc, resultType, y);
    rewriter.replaceOp(op, y);
    return success();
  }
};

/// amax per (batch, group) as a reduction over [B, S, G, H/G, D] (the input
/// with its head dim split), the descale and its reciprocal per group, then
/// the elementwise scaled e4m3 cast. With `hadamard_seed`, the input is
/// first transformed by an fa3.hadamard (f32) that this conversion lowers
/// too.
struct QuantizeLowering : OpConversionPattern<QuantizeOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(QuantizeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Value input = adaptor.getInput();
    if (std::optional<int64_t> seed = op.getHadamardSeed()) {
      // The fused form: transform first (in f32; its own lowering applies).
      auto type = cast<RankedTensorType>(input.getType());
      input = HadamardOp::create(rewriter, loc,
                                 type.clone(rewriter.getF32Type()), input,
                                 rewriter.getI64IntegerAttr(*seed));
    }
    auto type = cast<RankedTensorType>(input.getType());
    auto descaleType = cast<RankedTensorType>(op.getDescale().getType());
    Type f32 = rewriter.getF32Type();
    int64_t heads = type.getDimSize(2), groups = descaleType.getDimSize(1);
    int64_t perGroup = heads / groups;

    // [B, S, H, D] -> [B, S, G, H/G, D].
    SmallVector<OpFoldResult> expandedSizes;
    for (int64_t i = 0; i < 2; ++i)
      expandedSizes.push_back(
          type.isDynamicDim(i)
              ? OpFoldResult(
                    tensor::DimOp::create(rewriter, loc, input, i).getResult())
              : OpFoldResult(rewriter.getIndexAttr(type.getDimSize(i))));
    expandedSizes.push_back(rewriter.getIndexAttr(groups));
    expandedSizes.push_back(rewriter.getIndexAttr(perGroup));
    expandedSizes.push_back(rewriter.getIndexAttr(type.getDimSize(3)));
    auto expandedType =
        RankedTensorType::get({type.getDimSize(0), type.getDimSize(1), groups,
                               perGroup, type.getDimSize(3)},
                              type.getElementType());
    Value expanded = tensor::ExpandShapeOp::create(
        rewriter, loc, expandedType, input,
        ArrayRef<ReassociationIndices>{{0}, {1}, {2, 3}, {4}}, expandedSizes);

    // amax[b, g] over s, r, d.
    SmallVector<Value> batch;
    if (type.isDynamicDim(0))
      batch.push_back(tensor::DimOp::create(rewriter, loc, input, 0));
    auto groupType = RankedTensorType::get({type.getDimSize(0), groups}, f32);
    Value zero = f32Cst(rewriter, loc, 0.0f);
    Value amaxInit = linalg::FillOp::create(
                         rewriter, loc, zero,
                         ValueRange{tensor::EmptyOp::create(
                             rewriter, loc, groupType.getShape(), f32, batch)})
                         .getResult(0);
    auto id5 = AffineMap::getMultiDimIdentityMap(5, ctx);
    auto bg = AffineMap::get(
        5, 0, {getAffineDimExpr(0, ctx), getAffineDimExpr(2, ctx)}, ctx);
    Value amax =
        linalg::GenericOp::create(
            rewriter, loc, TypeRange{groupType}, ValueRange{expanded},
            ValueRange{amaxInit}, ArrayRef<AffineMap>{id5, bg},
            ArrayRef<utils::IteratorType>{kPar, kRed, kPar, kRed, kRed},
            [&](OpBuilder &b, Location loc, ValueRange args) {
              Value magnitude =
                  math::AbsFOp::create(b, loc, toF32(b, loc, args[0]));
              linalg::YieldOp::create(b, loc,
                                      ValueRange{arith::MaximumFOp::create(
                                          b, loc, args[1], magnitude)});
            })
            .getResult(0);

    // descale = max(amax / 448, 1e-12) and scale = 1 / descale, each
    // correctly rounded as the GPU kernels compute them.
    auto id2 = AffineMap::getMultiDimIdentityMap(2, ctx);
    auto perGroupValues = linalg::GenericOp::create(
        rewriter, loc, TypeRange{groupType, groupType}, ValueRange{amax},
        ValueRange{tensor::EmptyOp::create(rewriter, loc, groupType.getShape(),
                                           f32, batch),
                   tensor::EmptyOp::create(rewriter, loc, groupType.getShape(),
                                           f32, batch)},
        ArrayRef<AffineMap>{id2, id2, id2},
        ArrayRef<utils::IteratorType>{kPar, kPar},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          Value descale = arith::MaximumFOp::create(
              b, loc,
              arith::DivFOp::create(b, loc, args[0], f32Cst(b, loc, kE4M3Max)),
              f32Cst(b, loc, kMinDescale));
          Value scale =
              arith::DivFOp::create(b, loc, f32Cst(b, loc, 1.0f), descale);
          linalg::YieldOp::create(b, loc, ValueRange{descale, scale});
        });

    auto id4 = AffineMap::getMultiDimIdentityMap(4, ctx);
    auto perHead = AffineMap::get(
        4, 0,
        {getAffineDimExpr(0, ctx), getAffineDimExpr(2, ctx).floorDiv(perGroup)},
        ctx);
    Type f8 = rewriter.getType<Float8E4M3FNType>();
    Value result = linalg::GenericOp::create(
                       rewriter, loc, TypeRange{type.clone(f8)},
                       ValueRange{input, perGroupValues.getResult(1)},
                       ValueRange{emptyShapedLike(rewriter, loc, input, f8)},
                       ArrayRef<AffineMap>{id4, perHead, id4},
                       SmallVector<utils::IteratorType>(4, kPar),
                       [&](OpBuilder &b, Location loc, ValueRange args) {
                         Value scaled = arith::MulFOp::create(
                             b, loc, toF32(b, loc, args[0]), args[1]);
                         linalg::YieldOp::create(
                             b, loc, ValueRange{encodeE4M3(b, loc, scaled)});
                       })
                       .getResult(0);

    Value descale = perGroupValues.getResult(0);
    auto resultType = cast<RankedTensorType>(op.getResult().getType());
    if (result.getType() != resultType)
      result = tensor::CastOp::create(rewriter, loc, resultType, result);
    if (descale.getType() != descaleType)
      descale = tensor::CastOp::create(rewriter, loc, descaleType, descale);
    rewriter.replaceOp(op, ValueRange{result, descale});
    return success();
  }
};
} // namespace

void mlir::fa3::populateFP8OpsToLinalgPatterns(RewritePatternSet &patterns) {
  patterns.add<HadamardLowering, QuantizeLowering>(patterns.getContext());
}
