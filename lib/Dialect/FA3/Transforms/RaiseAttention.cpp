//===- RaiseAttention.cpp - Raise linalg attention to fa3.attention ---------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Finds softmax(Q Kᵀ · scale [+ causal mask]) V in linalg on tensors, in the
// form torch-mlir's FX importer emits for F.scaled_dot_product_attention and
// for the same formula written out, and replaces it with fa3.attention plus
// the layout changes between torch's [B, H, S, D] and fa3's [B, S, H, D].
//
// The match walks back from the P·V batch_matmul and checks every step of
// the chain exactly (operand roles, indexing maps, reduction dims, body
// ops); anything else is left alone, with a remark saying which step
// differed when the chain looked like attention up to that point.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3RAISEATTENTION
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

namespace {

/// Why a candidate was not raised (empty: it was).
struct Miss {
  std::string reason;
  explicit operator bool() const { return !reason.empty(); }
};

/// What the match found.
struct Attention {
  Value q, k, v;          ///< [B, H, S, D] (torch's layout)
  /// K already in fa3's [B, S, H, D] (torch-mlir composed the head split's
  /// transpose with Kᵀ's into one [0, 2, 3, 1]); `k` is then null.
  Value kBSHD;
  double scale = 1.0;     ///< the product of every constant S was scaled by
  bool topLeftCausal = false;
  Operation *root = nullptr; ///< the expand_shape giving O [B, H, Sq, Dv]
};

/// The 4-D value a [[0, 1], [2], [3]] collapse_shape (torch-mlir's bmm
/// batching) was taken of, or null.
static Value uncollapseBatch(Value v) {
  auto collapse = v.getDefiningOp<tensor::CollapseShapeOp>();
  if (!collapse || collapse.getSrcType().getRank() != 4)
    return {};
  SmallVector<ReassociationIndices> groups =
      collapse.getReassociationIndices();
  if (groups.size() != 3 || groups[0] != ReassociationIndices{0, 1} ||
      groups[1] != ReassociationIndices{2} ||
      groups[2] != ReassociationIndices{3})
    return {};
  return collapse.getSrc();
}

/// The [B, Hkv, S, D] input of torch-mlir's GQA broadcast (enable_gqa=True,
/// repeat_interleave over heads: [B, Hkv, S, D] to [B, Hkv, G, S, D]), or
/// null.
static Value headRepeatSource(Value v) {
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g.getNumDpsInputs() != 1 || g.getNumLoops() != 5)
    return {};
  MLIRContext *ctx = g.getContext();
  auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
  SmallVector<AffineMap> maps = g.getIndexingMapsArray();
  Block &body = g.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (maps[0] != AffineMap::get(5, 0, {d(0), d(1), d(3), d(4)}, ctx) ||
      !maps[1].isIdentity() || body.getOperations().size() != 1 ||
      yield.getOperand(0) != body.getArgument(0))
    return {};
  return g.getDpsInputs()[0];
}

/// The expanded heads [B, Hkv·G, S, D] collapsed from that broadcast, with
/// head h = kv head h / G (as in fa3): returns the [B, Hkv, S, D] source,
/// or `v` itself.
static Value peelHeadRepeat(Value v) {
  auto collapse = v.getDefiningOp<tensor::CollapseShapeOp>();
  if (!collapse || collapse.getReassociationIndices() !=
                       SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}, {4}})
    return v;
  Value source = headRepeatSource(collapse.getSrc());
  return source ? source : v;
}

/// V of a GQA attention batched for the P·V bmm straight from the
/// broadcast ([[0, 1, 2], [3], [4]]): its [B, Hkv, S, D] source, or null.
static Value uncollapseBatchedHeadRepeat(Value v) {
  auto collapse = v.getDefiningOp<tensor::CollapseShapeOp>();
  if (!collapse || collapse.getReassociationIndices() !=
                       SmallVector<ReassociationIndices>{{0, 1, 2}, {3}, {4}})
    return {};
  return headRepeatSource(collapse.getSrc());
}

/// A batch_matmul into a zero-filled accumulator, with plain maps.
static linalg::BatchMatmulOp asPlainBatchMatmul(Value v) {
  auto mm = v.getDefiningOp<linalg::BatchMatmulOp>();
  if (!mm || mm.hasUserDefinedMaps())
    return {};
  auto fill = mm.getDpsInits()[0].getDefiningOp<linalg::FillOp>();
  if (!fill || !matchPattern(fill.getInputs()[0], m_AnyZeroFloat()))
    return {};
  return mm;
}

static bool isIdentity(AffineMap map) { return map.isIdentity(); }

/// (d0, d1, d2, d3) -> (d0, d1, d2, 0) or -> (d0, d1, d2): a per-row value.
static bool isRowMap(AffineMap map) {
  if (map.getNumDims() != 4)
    return false;
  MLIRContext *ctx = map.getContext();
  auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
  auto zero = getAffineConstantExpr(0, ctx);
  return map == AffineMap::get(4, 0, {d(0), d(1), d(2), zero}, ctx) ||
         map == AffineMap::get(4, 0, {d(0), d(1), d(2)}, ctx);
}

/// The single non-yield op of a generic's body, if the body is just that
/// op and its yield of it.
static Operation *singleBodyOp(linalg::GenericOp g) {
  Block &body = g.getRegion().front();
  if (body.getOperations().size() != 2)
    return nullptr;
  return &body.front();
}

static bool allParallel(linalg::GenericOp g) {
  return llvm::all_of(g.getIteratorTypesArray(), [](utils::IteratorType t) {
    return t == utils::IteratorType::parallel;
  });
}

/// A float constant, possibly narrowed in the body (torch-mlir computes
/// `scale=` factors as `arith.truncf` of an f64 constant): its value in the
/// narrowed type.
static std::optional<double> matchFloatConstant(Value v) {
  FloatAttr c;
  if (matchPattern(v, m_Constant(&c)))
    return c.getValueAsDouble();
  auto trunc = v.getDefiningOp<arith::TruncFOp>();
  if (!trunc || !matchPattern(trunc.getIn(), m_Constant(&c)))
    return std::nullopt;
  APFloat value = c.getValue();
  bool lost;
  value.convert(cast<FloatType>(trunc.getType()).getFloatSemantics(),
                APFloat::rmNearestTiesToEven, &lost);
  return value.convertToDouble();
}

/// An elementwise generic `x op c` (identity maps, one input) with a float
/// constant c: returns x and c.
template <typename OpTy>
static std::optional<std::pair<Value, double>> matchScalarOp(Value v) {
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g.getNumDpsInputs() != 1 || !allParallel(g) ||
      !llvm::all_of(g.getIndexingMapsArray(), isIdentity))
    return std::nullopt;
  Block &body = g.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  auto op = yield.getOperand(0).getDefiningOp<OpTy>();
  // The body is the op and at most a truncf of its constant.
  if (!op || body.getOperations().size() > 3)
    return std::nullopt;
  Value arg = body.getArgument(0);
  if (op->getOperand(0) != arg && op->getOperand(1) != arg)
    return std::nullopt;
  Value other = op->getOperand(0) == arg ? op->getOperand(1) : op->getOperand(0);
  std::optional<double> c = matchFloatConstant(other);
  if (!c)
    return std::nullopt;
  return std::make_pair(g.getDpsInputs()[0], *c);
}

/// Peels elementwise multiplications by constants, accumulating them.
static Value peelScales(Value v, double &scale) {
  while (auto m = matchScalarOp<arith::MulFOp>(v)) {
    scale *= m->second;
    v = m->first;
  }
  return v;
}

/// A generic computing `f(a, b)` elementwise where `a` is [B, H, Sq, Sk]
/// (identity map) and `b` one value per row (isRowMap).
template <typename OpTy>
static std::optional<std::pair<Value, Value>> matchRowOp(Value v) {
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g.getNumDpsInputs() != 2 || !allParallel(g))
    return std::nullopt;
  SmallVector<AffineMap> maps = g.getIndexingMapsArray();
  if (!isIdentity(maps[0]) || !isRowMap(maps[1]) || !isIdentity(maps[2]))
    return std::nullopt;
  auto op = dyn_cast_or_null<OpTy>(singleBodyOp(g));
  Block &body = g.getRegion().front();
  if (!op || op->getOperand(0) != body.getArgument(0) ||
      op->getOperand(1) != body.getArgument(1))
    return std::nullopt;
  return std::make_pair(g.getDpsInputs()[0], g.getDpsInputs()[1]);
}

/// A reduction over the last of four dims of `x` into one value per row,
/// whose body combines with `OpTy`; for the max, torch-mlir's argmax-style
/// generic (max and its index). Returns x and the dim it reduces.
template <typename OpTy>
static std::optional<std::pair<Value, int64_t>> matchRowReduction(Value v) {
  if (auto expand = v.getDefiningOp<tensor::ExpandShapeOp>())
    v = expand.getSrc();
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g.getNumDpsInputs() != 1)
    return std::nullopt;
  SmallVector<utils::IteratorType> iters = g.getIteratorTypesArray();
  if (iters.size() != 4)
    return std::nullopt;
  int64_t reduced = -1;
  for (auto [i, t] : llvm::enumerate(iters))
    if (t == utils::IteratorType::reduction) {
      if (reduced >= 0)
        return std::nullopt;
      reduced = i;
    }
  if (reduced < 0 || !isIdentity(g.getIndexingMapsArray()[0]))
    return std::nullopt;
  // The first result is the reduction combining input and accumulator.
  auto yield = cast<linalg::YieldOp>(g.getRegion().front().getTerminator());
  auto op = yield.getOperand(0).getDefiningOp<OpTy>();
  Block &body = g.getRegion().front();
  if (!op || !llvm::is_contained(op->getOperands(), body.getArgument(0)) ||
      !llvm::is_contained(op->getOperands(), body.getArgument(1)))
    return std::nullopt;
  return std::make_pair(g.getDpsInputs()[0], reduced);
}

/// torch-mlir's causal mask for F.scaled_dot_product_attention(is_causal):
/// S + select(key - query <= 0 [and true], 0, -inf) with the [Sq, Sk] mask
/// broadcast over (B, H). Returns the unmasked S if `v` is that sum.
static Value peelCausalMask(Value v, bool &causal) {
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g.getNumDpsInputs() != 2 || !allParallel(g))
    return v;
  auto add = dyn_cast_or_null<arith::AddFOp>(singleBodyOp(g));
  SmallVector<AffineMap> maps = g.getIndexingMapsArray();
  MLIRContext *ctx = g.getContext();
  AffineMap mask2d = AffineMap::get(
      4, 0, {getAffineDimExpr(2, ctx), getAffineDimExpr(3, ctx)}, ctx);
  if (!add || !isIdentity(maps[0]) || maps[1] != mask2d)
    return v;
  // select(cond, 0, -inf) over [Sq, Sk].
  auto sel = g.getDpsInputs()[1].getDefiningOp<linalg::GenericOp>();
  if (!sel || sel.getNumDpsInputs() != 3)
    return v;
  auto select = dyn_cast_or_null<arith::SelectOp>(singleBodyOp(sel));
  DenseFPElementsAttr zero, negInf;
  if (!select ||
      !matchPattern(sel.getDpsInputs()[1], m_Constant(&zero)) ||
      !matchPattern(sel.getDpsInputs()[2], m_Constant(&negInf)) ||
      !zero.isSplat() || !zero.getSplatValue<APFloat>().isZero() ||
      !negInf.isSplat() || !negInf.getSplatValue<APFloat>().isInfinity() ||
      !negInf.getSplatValue<APFloat>().isNegative())
    return v;
  // cond = (key - query <= 0), possibly and'ed with an all-true constant.
  Value cond = sel.getDpsInputs()[0];
  if (auto andG = cond.getDefiningOp<linalg::GenericOp>()) {
    if (isa_and_nonnull<arith::AndIOp>(singleBodyOp(andG)) &&
        andG.getNumDpsInputs() == 2) {
      DenseIntElementsAttr allTrue;
      if (!matchPattern(andG.getDpsInputs()[1], m_Constant(&allTrue)) ||
          !allTrue.isSplat() || !allTrue.getSplatValue<APInt>().isOne())
        return v;
      cond = andG.getDpsInputs()[0];
    }
  }
  auto cmpG = cond.getDefiningOp<linalg::GenericOp>();
  auto cmp = cmpG ? dyn_cast_or_null<arith::CmpIOp>(singleBodyOp(cmpG))
                  : arith::CmpIOp();
  if (!cmp || cmpG.getNumDpsInputs() != 1 ||
      cmp.getPredicate() != arith::CmpIPredicate::sle ||
      cmp.getLhs() != cmpG.getRegion().front().getArgument(0) ||
      !matchPattern(cmp.getRhs(), m_Zero()))
    return v;
  auto subG = cmpG.getDpsInputs()[0].getDefiningOp<linalg::GenericOp>();
  auto sub = subG ? dyn_cast_or_null<arith::SubIOp>(singleBodyOp(subG))
                  : arith::SubIOp();
  if (!sub || subG.getNumDpsInputs() != 2)
    return v;
  // The two operands: iota over the key axis broadcast along rows
  // ((d0, d1) -> (0, d1)) minus iota over the query axis ((d0, d1) -> (d0, 0)).
  auto isIotaOf = [](Value x) {
    if (auto e = x.getDefiningOp<tensor::ExpandShapeOp>())
      x = e.getSrc();
    auto iota = x.getDefiningOp<linalg::GenericOp>();
    if (!iota || iota.getNumDpsInputs() != 0)
      return false;
    Block &body = iota.getRegion().front();
    auto yield = cast<linalg::YieldOp>(body.getTerminator());
    auto cast = yield.getOperand(0).getDefiningOp<arith::IndexCastOp>();
    auto index = cast ? cast.getIn().getDefiningOp<linalg::IndexOp>()
                      : linalg::IndexOp();
    return index && index.getDim() == 0;
  };
  SmallVector<AffineMap> subMaps = subG.getIndexingMapsArray();
  auto c0 = getAffineConstantExpr(0, ctx);
  AffineMap keys = AffineMap::get(2, 0, {c0, getAffineDimExpr(1, ctx)}, ctx);
  AffineMap queries =
      AffineMap::get(2, 0, {getAffineDimExpr(0, ctx), c0}, ctx);
  if (subMaps[0] != keys || subMaps[1] != queries ||
      !isIotaOf(subG.getDpsInputs()[0]) || !isIotaOf(subG.getDpsInputs()[1]))
    return v;
  causal = true;
  return g.getDpsInputs()[0];
}

/// torch's safe softmax: rows whose scores are all -inf give 0 instead of
/// NaN (select(all(S == -inf), 0, P)). fa3 gives those rows 0 too.
static Value peelSafeSoftmax(Value v, Value &allMaskedOf) {
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g.getNumDpsInputs() != 3 || !allParallel(g))
    return v;
  auto select = dyn_cast_or_null<arith::SelectOp>(singleBodyOp(g));
  DenseFPElementsAttr zero;
  if (!select || !isRowMap(g.getIndexingMapsArray()[0]) ||
      !matchPattern(g.getDpsInputs()[1], m_Constant(&zero)) ||
      !zero.isSplat() || !zero.getSplatValue<APFloat>().isZero())
    return v;
  // all(S == -inf) per row: an and-reduction of (extf S == -inf).
  auto red = matchRowReduction<arith::AndIOp>(g.getDpsInputs()[0]);
  if (!red || red->second != 3)
    return v;
  auto eq = red->first.getDefiningOp<linalg::GenericOp>();
  if (!eq || eq.getNumDpsInputs() != 1)
    return v;
  allMaskedOf = eq.getDpsInputs()[0];
  return g.getDpsInputs()[2];
}

/// Matches attention ending in the P·V batch_matmul `pv`.
static Miss matchAttention(linalg::BatchMatmulOp pv, Attention &out) {
  if (!pv->hasOneUse())
    return Miss{"the P·V product has other uses"};
  auto root = dyn_cast<tensor::ExpandShapeOp>(*pv->getUsers().begin());
  if (!root || root.getResultType().getRank() != 4)
    return Miss{"the P·V product is not expanded back to [B, H, Sq, D]"};
  Value p = uncollapseBatch(pv.getDpsInputs()[0]);
  Value v = uncollapseBatch(pv.getDpsInputs()[1]);
  if (!v)
    v = uncollapseBatchedHeadRepeat(pv.getDpsInputs()[1]);
  if (!p || !v)
    return Miss{"P and V are not [B, H, ...] tensors batched by collapse_shape"};
  Value allMaskedOf;
  p = peelSafeSoftmax(p, allMaskedOf);
  // P = E / rowsum(E).
  auto div = matchRowOp<arith::DivFOp>(p);
  if (!div) {
    // A softmax over another dim divides by a sum broadcast along it.
    auto g = p.getDefiningOp<linalg::GenericOp>();
    if (g && g.getNumDpsInputs() == 2 &&
        isa_and_nonnull<arith::DivFOp>(singleBodyOp(g)))
      if (auto sum = matchRowReduction<arith::AddFOp>(g.getDpsInputs()[1]))
        if (sum->second != 3)
          return Miss{"the softmax normalizes over dim " +
                      std::to_string(sum->second) +
                      ", not the key dim (3): not attention"};
    return Miss{"P is not a row-normalized tensor (E / rowsum(E))"};
  }
  auto sum = matchRowReduction<arith::AddFOp>(div->second);
  if (!sum)
    return Miss{"P's denominator is not a row sum"};
  if (sum->first != div->first)
    return Miss{"P's denominator sums another tensor than its numerator"};
  if (sum->second != 3)
    return Miss{"the softmax normalizes over dim " +
                std::to_string(sum->second) +
                ", not the key dim (3): not attention"};
  // E = exp(S - rowmax(S)).
  auto exp = div->first.getDefiningOp<linalg::GenericOp>();
  if (!exp || exp.getNumDpsInputs() != 1 ||
      !isa_and_nonnull<math::ExpOp>(singleBodyOp(exp)))
    return Miss{"the softmax numerator is not exp(...)"};
  auto shifted = matchRowOp<arith::SubFOp>(exp.getDpsInputs()[0]);
  if (!shifted)
    return Miss{"exp's argument is not S - rowmax(S)"};
  auto max = matchRowReduction<arith::MaximumFOp>(shifted->second);
  if (!max || max->first != shifted->first || max->second != 3)
    return Miss{"the softmax subtracts something other than the row max of "
                "its scores"};
  Value s = shifted->first;
  if (allMaskedOf && allMaskedOf != s)
    return Miss{"the safe-softmax guard tests another tensor than the scores"};
  // S = (Q Kᵀ) · c [+ causal mask], with scale constants anywhere on Q, K, S.
  bool causal = false;
  double scale = 1.0;
  Value unmasked = peelCausalMask(s, causal);
  if (unmasked == s && isa_and_nonnull<linalg::GenericOp>(s.getDefiningOp()) &&
      cast<linalg::GenericOp>(s.getDefiningOp()).getNumDpsInputs() == 2)
    return Miss{"the scores carry a mask fa3 does not model (only a causal "
                "mask built from index comparisons is raised)"};
  s = peelScales(unmasked, scale);
  auto sExpand = s.getDefiningOp<tensor::ExpandShapeOp>();
  auto qk = sExpand ? asPlainBatchMatmul(sExpand.getSrc())
                    : linalg::BatchMatmulOp();
  if (!qk)
    return Miss{"the scores are not a batch_matmul of Q and Kᵀ"};
  Value q = uncollapseBatch(qk.getDpsInputs()[0]);
  Value kt = uncollapseBatch(qk.getDpsInputs()[1]);
  if (!q || !kt)
    return Miss{"Q and Kᵀ are not [B, H, ...] tensors batched by "
                "collapse_shape"};
  q = peelScales(q, scale);
  kt = peelScales(kt, scale);
  auto transpose = kt.getDefiningOp<linalg::TransposeOp>();
  Value k, kBSHD;
  if (transpose && transpose.getPermutation() == ArrayRef<int64_t>{0, 1, 3, 2})
    k = peelHeadRepeat(peelScales(transpose.getInput(), scale));
  else if (transpose &&
           transpose.getPermutation() == ArrayRef<int64_t>{0, 2, 3, 1})
    kBSHD = peelScales(transpose.getInput(), scale);
  else
    return Miss{"K enters Q·Kᵀ without a transpose of its last two dims"};
  v = peelHeadRepeat(v);
  // V's rows must be keys, as K's are: a V that reaches P·V through a
  // transpose of its last two dims indexes the keys by the head dim of the
  // tensor it came from (P·Vᵀ, shape-compatible only because Sk = D).
  if (auto vt = v.getDefiningOp<linalg::TransposeOp>()) {
    ArrayRef<int64_t> perm = vt.getPermutation();
    if (perm.size() == 4 && perm[2] == 3 && perm[3] == 2)
      return Miss{"V enters P·V through a transpose of its last two dims "
                  "(P·Vᵀ): its rows are not keys, not attention"};
  }
  if (!asPlainBatchMatmul(pv.getResult(0)))
    return Miss{"the P·V accumulator is not zero-filled"};
  int64_t kvHeads = k ? cast<RankedTensorType>(k.getType()).getDimSize(1)
                      : cast<RankedTensorType>(kBSHD.getType()).getDimSize(2);
  if (kvHeads != cast<RankedTensorType>(v.getType()).getDimSize(1))
    return Miss{"K and V have different head counts after their GQA "
                "expansion"};
  out = Attention{q, k, v, kBSHD, scale, causal, root};
  return {};
}

/// An elementwise linalg.generic of one input whose body is a single `OpTy`
/// of that input: the casts torch-mlir puts around a 16-bit SDPA.
template <typename OpTy>
static OpTy elementwiseCast(linalg::GenericOp g) {
  if (!g || g.getNumDpsInputs() != 1 || g.getNumDpsInits() != 1 ||
      !allParallel(g) ||
      !llvm::all_of(g.getIndexingMapsArray(),
                    [](AffineMap m) { return m.isIdentity(); }))
    return {};
  auto cast = dyn_cast_or_null<OpTy>(singleBodyOp(g));
  if (!cast || cast->getOperand(0) != g.getRegion().front().getArgument(0))
    return {};
  return cast;
}

/// The bf16/f16 tensor that the f32 tensor `x` extends (arith.extf), if any.
static Value extendedFrom16Bit(Value x) {
  auto g = x.getDefiningOp<linalg::GenericOp>();
  auto ext = elementwiseCast<arith::ExtFOp>(g);
  if (!ext || !ext.getResult().getType().isF32())
    return {};
  Type from = ext.getIn().getType();
  if (!from.isBF16() && !from.isF16())
    return {};
  return g.getDpsInputs()[0];
}

/// The only use of the f32 tensor `o` when it truncates `o` to `to`.
static linalg::GenericOp truncatedTo(Value o, Type to) {
  if (!o.hasOneUse())
    return {};
  auto g = dyn_cast<linalg::GenericOp>(*o.getUsers().begin());
  auto trunc = elementwiseCast<arith::TruncFOp>(g);
  if (!trunc || trunc.getResult().getType() != to || g.getDpsInputs()[0] != o)
    return {};
  return g;
}

/// [B, H, S, D] <-> [B, S, H, D].
static Value swapHeadsAndSequence(OpBuilder &b, Location loc, Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> shape = {type.getDimSize(0), type.getDimSize(2),
                                type.getDimSize(1), type.getDimSize(3)};
  Value init = tensor::EmptyOp::create(b, loc, shape, type.getElementType());
  return linalg::TransposeOp::create(b, loc, x, init,
                                     ArrayRef<int64_t>{0, 2, 1, 3})
      ->getResult(0);
}

static Miss raise(OpBuilder &b, const Attention &a, bool narrow) {
  auto qType = cast<RankedTensorType>(a.q.getType());
  // K's type in torch's [B, H, S, D] either way.
  RankedTensorType kType;
  if (a.k) {
    kType = cast<RankedTensorType>(a.k.getType());
  } else {
    auto t = cast<RankedTensorType>(a.kBSHD.getType());
    kType = RankedTensorType::get({t.getDimSize(0), t.getDimSize(2),
                                   t.getDimSize(1), t.getDimSize(3)},
                                  t.getElementType());
  }
  auto vType = cast<RankedTensorType>(a.v.getType());
  if (!qType.hasStaticShape() || !kType.hasStaticShape() ||
      !vType.hasStaticShape())
    return Miss{"dynamic shapes are not raised yet"};
  if (!qType.getElementType().isF32() && !qType.getElementType().isF16() &&
      !qType.getElementType().isBF16()) {
    std::string name;
    llvm::raw_string_ostream os(name);
    os << qType.getElementType();
    return Miss{"element type " + name + " is not f32, f16 or bf16"};
  }
  int64_t sq = qType.getDimSize(2), sk = kType.getDimSize(2);
  // torch's is_causal is aligned top-left (key <= query); fa3's causal is
  // aligned bottom-right (key <= query + Sk - Sq). They agree for Sq = Sk;
  // for Sq > Sk top-left is fa3's window (-1, Sq - Sk).
  bool causal = false;
  std::optional<int64_t> right;
  if (a.topLeftCausal) {
    if (sq == sk)
      causal = true;
    else if (sq > sk)
      right = sq - sk;
    else
      return Miss{"a top-left causal mask with Sq < Sk (" + std::to_string(sq) +
                  " < " + std::to_string(sk) +
                  ") hides keys fa3's masks cannot express"};
  }
  // A 16-bit export: Q, K and V extended from one bf16/f16 type and O
  // truncated back to it. The attention then runs in that type on the
  // unextended tensors (the values are the same; fa3's 16-bit attention
  // accumulates in f32 and rounds O once, like the export).
  Value qIn = a.q, kIn = a.k ? a.k : a.kBSHD, vIn = a.v;
  linalg::GenericOp truncation;
  if (narrow) {
    Value q16 = extendedFrom16Bit(qIn), k16 = extendedFrom16Bit(kIn),
          v16 = extendedFrom16Bit(vIn);
    if (q16 && k16 && v16) {
      Type t = cast<RankedTensorType>(q16.getType()).getElementType();
      if (cast<RankedTensorType>(k16.getType()).getElementType() == t &&
          cast<RankedTensorType>(v16.getType()).getElementType() == t &&
          (truncation = truncatedTo(a.root->getResult(0), t))) {
        qIn = q16;
        kIn = k16;
        vIn = v16;
      }
    }
  }
  Type elementType = cast<RankedTensorType>(qIn.getType()).getElementType();
  Location loc = a.root->getLoc();
  b.setInsertionPoint(a.root);
  Value q = swapHeadsAndSequence(b, loc, qIn);
  Value k = a.k ? swapHeadsAndSequence(b, loc, kIn) : kIn;
  Value v = swapHeadsAndSequence(b, loc, vIn);
  auto oType = RankedTensorType::get({qType.getDimSize(0), sq,
                                      qType.getDimSize(1), vType.getDimSize(3)},
                                     elementType);
  auto lseType = RankedTensorType::get(
      {qType.getDimSize(0), qType.getDimSize(1), sq}, b.getF32Type());
  auto attention = AttentionOp::create(
      b, loc, oType, lseType, q, k, v, /*descales=*/ValueRange{},
      /*rng=*/Value(), causal ? b.getUnitAttr() : UnitAttr(),
      b.getF32FloatAttr(static_cast<float>(a.scale)),
      right ? b.getDenseI64ArrayAttr({-1, *right}) : DenseI64ArrayAttr(),
      /*softcap=*/FloatAttr(), /*schedule=*/ScheduleAttr(), /*fp8=*/FP8Attr(),
      /*pack_gqa=*/UnitAttr(), /*dropout=*/FloatAttr());
  Value o = swapHeadsAndSequence(b, loc, attention.getOutput());
  if (truncation)
    truncation->getResult(0).replaceAllUsesWith(o);
  else
    a.root->getResult(0).replaceAllUsesWith(o);
  return {};
}

struct FA3RaiseAttentionPass
    : public fa3::impl::FA3RaiseAttentionBase<FA3RaiseAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<linalg::BatchMatmulOp> candidates;
    getOperation()->walk([&](linalg::BatchMatmulOp mm) {
      // A softmax-shaped producer of the left operand makes it a candidate
      // (and a near miss worth a remark when the match fails).
      Value lhs = uncollapseBatch(mm.getDpsInputs()[0]);
      if (!lhs)
        return;
      Value allMasked;
      auto div =
          peelSafeSoftmax(lhs, allMasked).getDefiningOp<linalg::GenericOp>();
      if (div && div.getNumDpsInputs() == 2 &&
          isa_and_nonnull<arith::DivFOp>(singleBodyOp(div)))
        candidates.push_back(mm);
    });
    OpBuilder b(&getContext());
    for (linalg::BatchMatmulOp mm : candidates) {
      Attention a;
      Miss miss = matchAttention(mm, a);
      if (!miss)
        miss = raise(b, a, narrow);
      if (miss)
        mm->emitRemark() << "fa3-raise-attention: not raised: " << miss.reason;
    }
  }
};

} // namespace
