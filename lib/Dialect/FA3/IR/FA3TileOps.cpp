//===- FA3TileOps.cpp - fa3 tile-level (L1) operation verifiers --------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The ODS constraints already fix ranks and static shapes; these verifiers
// check that the tiles of one op agree with each other.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa3;

static int64_t rows(Value v) {
  return cast<RankedTensorType>(v.getType()).getDimSize(0);
}
static int64_t cols(Value v) {
  return cast<RankedTensorType>(v.getType()).getDimSize(1);
}
static Type elementType(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

static LogicalResult verifyWindowAttr(Operation *op,
                                      std::optional<ArrayRef<int64_t>> window) {
  if (!window)
    return success();
  if (window->size() != 2 || (*window)[0] < -1 || (*window)[1] < -1)
    return op->emitOpError()
           << "window must be (left, right) with bounds >= -1";
  return success();
}

static LogicalResult verifyPositive(Operation *op, StringRef name, float v) {
  if (!(std::isfinite(v) && v > 0))
    return op->emitOpError() << name << " must be positive and finite, got "
                             << v;
  return success();
}

/// A tile moved to or from a [B, S, H, D] tensor has D columns and its
/// element type.
static LogicalResult verifyTileOfBSHD(Operation *op, Value tile, Value tensor) {
  auto t = cast<RankedTensorType>(tensor.getType());
  if (t.isDynamicDim(3) || cols(tile) != t.getDimSize(3))
    return op->emitOpError() << "tile has " << cols(tile)
                             << " columns but the tensor's head dim is "
                             << t.getDimSize(3);
  if (elementType(tile) != t.getElementType())
    return op->emitOpError() << "tile element type " << elementType(tile)
                             << " differs from the tensor's "
                             << t.getElementType();
  return success();
}

static LogicalResult verifyStatsTensor(Operation *op, Value tensor) {
  if (!elementType(tensor).isF32())
    return op->emitOpError() << "expects an f32 statistics tensor, got "
                             << tensor.getType();
  return success();
}

/// `packed_heads = G` (PackGQA) must pack at least one head and at most one
/// query's heads per tile row.
static LogicalResult verifyPackedHeads(Operation *op,
                                       std::optional<uint64_t> packed,
                                       int64_t tileRows) {
  if (!packed)
    return success();
  auto g = static_cast<int64_t>(*packed);
  if (g < 1 || g > tileRows)
    return op->emitOpError() << "packed_heads must lie in [1, " << tileRows
                             << "] (the tile's rows), got " << g;
  return success();
}

LogicalResult LoadTileOp::verify() {
  if (failed(verifyPackedHeads(*this, getPackedHeads(), rows(getResult()))))
    return failure();
  return verifyTileOfBSHD(*this, getResult(), getSource());
}

KeyValueTileLoad KeyValueTileLoad::of(Value tile) {
  KeyValueTileLoad load;
  if (auto plain = tile.getDefiningOp<LoadTileOp>()) {
    load.op = plain;
    load.source = plain.getSource();
    load.batch = plain.getBatch();
    load.row = plain.getRow();
    load.head = plain.getHead();
  } else if (auto paged = tile.getDefiningOp<LoadPagedTileOp>()) {
    load.op = paged;
    load.source = paged.getCache();
    load.pageTable = paged.getPageTable();
    load.batch = paged.getBatch();
    load.row = paged.getRow();
    load.head = paged.getHead();
  }
  if (load.op)
    load.result = tile;
  return load;
}

LogicalResult LoadPagedTileOp::verify() {
  return verifyTileOfBSHD(*this, getResult(), getCache());
}

LogicalResult StoreTileOp::verify() {
  if (failed(verifyPackedHeads(*this, getPackedHeads(), rows(getTile()))))
    return failure();
  return verifyTileOfBSHD(*this, getTile(), getDest());
}

LogicalResult LoadStatsOp::verify() {
  return verifyStatsTensor(*this, getSource());
}

LogicalResult StoreStatsOp::verify() {
  auto tile = cast<RankedTensorType>(getTile().getType());
  if (failed(verifyPackedHeads(*this, getPackedHeads(), tile.getDimSize(0))))
    return failure();
  return verifyStatsTensor(*this, getDest());
}

/// The scf.forall whose in_parallel region holds a parallel store, or null
/// when it is anywhere else (scf.forall's verifier checks that the store
/// writes into one of its shared outputs).
static Operation *iteratingForall(Operation *op) {
  Operation *parent = op->getParentOp();
  if (!isa_and_nonnull<scf::InParallelOp>(parent) ||
      !isa_and_nonnull<scf::ForallOp>(parent->getParentOp()))
    return nullptr;
  return parent->getParentOp();
}

static LogicalResult verifyInForall(Operation *op) {
  if (!iteratingForall(op))
    return op->emitOpError()
           << "must be in the scf.forall.in_parallel region of an scf.forall";
  return success();
}

LogicalResult ParallelStoreTileOp::verify() {
  if (failed(verifyPackedHeads(*this, getPackedHeads(), rows(getTile()))) ||
      failed(verifyTileOfBSHD(*this, getTile(), getDest())))
    return failure();
  return verifyInForall(*this);
}

MutableOperandRange ParallelStoreTileOp::getUpdatedDestinations() {
  return getDestMutable();
}

Operation *ParallelStoreTileOp::getIteratingParent() {
  return iteratingForall(*this);
}

LogicalResult AccumulateTileOp::verify() {
  auto dest = cast<MemRefType>(getDest().getType());
  if (dest.isDynamicDim(3) || cols(getTile()) != dest.getDimSize(3))
    return emitOpError() << "tile has " << cols(getTile())
                         << " columns but the buffer's head dim is "
                         << dest.getDimSize(3);
  return success();
}

LogicalResult ParallelStoreStatsOp::verify() {
  auto tile = cast<RankedTensorType>(getTile().getType());
  if (failed(verifyPackedHeads(*this, getPackedHeads(), tile.getDimSize(0))) ||
      failed(verifyStatsTensor(*this, getDest())))
    return failure();
  return verifyInForall(*this);
}

MutableOperandRange ParallelStoreStatsOp::getUpdatedDestinations() {
  return getDestMutable();
}

Operation *ParallelStoreStatsOp::getIteratingParent() {
  return iteratingForall(*this);
}

LogicalResult AttentionBlockOp::verify() {
  auto k = cast<RankedTensorType>(getKey().getType());
  auto v = cast<RankedTensorType>(getValue().getType());
  Type elt = elementType(getQueryTile());
  if (k.getElementType() != elt || v.getElementType() != elt)
    return emitOpError() << "query tile, key and value must share one "
                            "element type, got "
                         << elt << ", " << k.getElementType() << " and "
                         << v.getElementType();
  if (k.isDynamicDim(3) || k.getDimSize(3) != cols(getQueryTile()))
    return emitOpError() << "query tile has " << cols(getQueryTile())
                         << " columns but the key head dim is "
                         << k.getDimSize(3);
  if (static_cast<bool>(getSplitBegin()) != static_cast<bool>(getSplitEnd()))
    return emitOpError() << "takes a split as [begin, end): both or neither";
  // FP8: the descales of the block's quantized tiles, and P's e4m3 rounding.
  bool fp8 = isa<Float8E4M3FNType>(elt);
  if (fp8 && !getQkDescale())
    return emitOpError() << "has e4m3 tiles: it needs descale(%qk, %v)";
  if (!fp8 && getQkDescale())
    return emitOpError() << "takes descale(%qk, %v) for e4m3 tiles only, got "
                         << elt;
  if (fp8 && !getProbsScale())
    return emitOpError() << "has e4m3 tiles: it needs probs_scale (P is "
                            "rounded to e4m3 before it multiplies V)";
  if (fp8 && (getSplitBegin() || getRng() || getPackedHeads()))
    return emitOpError() << "has e4m3 tiles, which take no split, dropout or "
                            "packed_heads";
  // A split's partial output stays in f32 until fa3.combine_splits; FP8's
  // is bf16.
  Type outElt = getSplitBegin() ? Float32Type::get(getContext())
                : fp8           ? BFloat16Type::get(getContext())
                                : elt;
  if (rows(getOutput()) != rows(getQueryTile()) ||
      v.isDynamicDim(3) || cols(getOutput()) != v.getDimSize(3) ||
      elementType(getOutput()) != outElt)
    return emitOpError() << "expects an output tile of type "
                         << RankedTensorType::get(
                                {rows(getQueryTile()), v.getDimSize(3)}, outElt)
                         << ", got " << getOutput().getType();
  if (cast<RankedTensorType>(getLse().getType()).getDimSize(0) !=
      rows(getQueryTile()))
    return emitOpError() << "expects an lse tile of " << rows(getQueryTile())
                         << " rows, got " << getLse().getType();
  if (failed(verifyPackedHeads(*this, getPackedHeads(),
                               rows(getQueryTile()))))
    return failure();
  if (isPaged() && (!getKeyLen() || getKeyStart()))
    return emitOpError() << "reads a paged cache: it needs key_len (the "
                            "cache length) and takes no key_start";
  if (getSchedule().getBlockM() != rows(getQueryTile()))
    return emitOpError() << "schedule block_m " << getSchedule().getBlockM()
                         << " differs from the query tile's "
                         << rows(getQueryTile()) << " rows";
  if (failed(verifyPositive(*this, "scale", getScale().convertToFloat())))
    return failure();
  if (auto softcap = getSoftcap())
    if (softcap->convertToFloat() < 0)
      return emitOpError() << "softcap must be non-negative";
  if (static_cast<bool>(getRng()) != static_cast<bool>(getDropoutStream()))
    return emitOpError() << "takes dropout as (rng, stream): both or neither";
  std::optional<float> dropout;
  if (auto p = getDropout())
    dropout = p->convertToFloat();
  if (failed(verifyDropout(*this, dropout, getRng())))
    return failure();
  return verifyWindowAttr(*this, getWindow());
}

LogicalResult DropoutOp::verify() {
  return verifyDropout(*this, getP().convertToFloat(), getRng());
}

LogicalResult QKOp::verify() {
  if (elementType(getQuery()) != elementType(getKey()))
    return emitOpError() << "query and key tiles differ in element type: "
                         << elementType(getQuery()) << " vs "
                         << elementType(getKey());
  if (cols(getQuery()) != cols(getKey()))
    return emitOpError() << "query tile has " << cols(getQuery())
                         << " columns but key tile has " << cols(getKey());
  if (rows(getScores()) != rows(getQuery()) ||
      cols(getScores()) != rows(getKey()))
    return emitOpError() << "expects scores of " << rows(getQuery()) << "x"
                         << rows(getKey()) << ", got "
                         << getScores().getType();
  return success();
}

LogicalResult SoftcapOp::verify() {
  if (failed(verifyPositive(*this, "scale", getScale().convertToFloat())))
    return failure();
  return verifyPositive(*this, "softcap", getSoftcap().convertToFloat());
}

LogicalResult MaskOp::verify() {
  if (failed(verifyPackedHeads(*this, getPackedHeads(), rows(getScores()))))
    return failure();
  return verifyWindowAttr(*this, getWindow());
}

LogicalResult OnlineSoftmaxOp::verify() {
  int64_t statRows =
      cast<RankedTensorType>(getRowMax().getType()).getDimSize(0);
  if (statRows != rows(getScores()))
    return emitOpError() << "scores have " << rows(getScores())
                         << " rows but the row statistics have " << statRows;
  if (std::optional<int64_t> threshold = getRescaleThreshold())
    if (*threshold < 1 || *threshold > 8)
      return emitOpError() << "rescale_threshold must be in [1, 8], got "
                           << *threshold;
  return verifyPositive(*this, "exp2_scale", getExp2Scale().convertToFloat());
}

LogicalResult RescaleOp::verify() {
  int64_t n = cast<RankedTensorType>(getCorrection().getType()).getDimSize(0);
  if (n != rows(getAcc()))
    return emitOpError() << "accumulator has " << rows(getAcc())
                         << " rows but the correction has " << n;
  return success();
}

LogicalResult PVOp::verify() {
  if (isa<Float8E4M3FNType>(elementType(getValue())) && !getProbsScale())
    return emitOpError() << "an e4m3 value tile needs probs_scale (P is "
                            "rounded to e4m3 before it multiplies V)";
  if (cols(getProbs()) != rows(getValue()))
    return emitOpError() << "probabilities have " << cols(getProbs())
                         << " columns but the value tile has "
                         << rows(getValue()) << " rows";
  if (rows(getAcc()) != rows(getProbs()) || cols(getAcc()) != cols(getValue()))
    return emitOpError() << "expects an accumulator of " << rows(getProbs())
                         << "x" << cols(getValue()) << ", got "
                         << getAcc().getType();
  return success();
}

LogicalResult FinalizeOp::verify() {
  auto acc = cast<RankedTensorType>(getAcc().getType());
  auto out = cast<RankedTensorType>(getOutput().getType());
  if (acc.getShape() != out.getShape())
    return emitOpError() << "output tile shape differs from the accumulator's: "
                         << out << " vs " << acc;
  int64_t n = cast<RankedTensorType>(getRowMax().getType()).getDimSize(0);
  if (n != acc.getDimSize(0))
    return emitOpError() << "accumulator has " << acc.getDimSize(0)
                         << " rows but the row statistics have " << n;
  if (static_cast<bool>(getQkDescale()) != static_cast<bool>(getVDescale()))
    return emitOpError() << "takes descale(%qk, %v): both or neither";
  return verifyPositive(*this, "scale", getScale().convertToFloat());
}

//===----------------------------------------------------------------------===//
// Backward steps
//===----------------------------------------------------------------------===//

/// The row statistics `stats` must have one entry per row of `tile`.
static LogicalResult verifyRowStats(Operation *op, Value tile, Value stats,
                                    StringRef what) {
  int64_t n = cast<RankedTensorType>(stats.getType()).getDimSize(0);
  if (n != rows(tile))
    return op->emitOpError() << "tile has " << rows(tile) << " rows but "
                             << what << " has " << n << " entries";
  return success();
}

LogicalResult RowDotOp::verify() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  auto rhs = cast<RankedTensorType>(getRhs().getType());
  if (lhs != rhs)
    return emitOpError() << "expects two tiles of one type, got " << lhs
                         << " and " << rhs;
  if (getMinus() &&
      failed(verifyRowStats(*this, getLhs(), getMinus(), "minus")))
    return failure();
  return verifyRowStats(*this, getLhs(), getResult(), "the result");
}

LogicalResult RecomputeProbsOp::verify() {
  if (failed(verifyRowStats(*this, getScores(), getLse(), "the lse")))
    return failure();
  return verifyPositive(*this, "exp2_scale", getExp2Scale().convertToFloat());
}

LogicalResult SoftmaxGradOp::verify() {
  return verifyRowStats(*this, getProbs(), getDelta(), "delta");
}

LogicalResult SoftcapGradOp::verify() {
  if (failed(verifyPositive(*this, "scale", getScale().convertToFloat())))
    return failure();
  return verifyPositive(*this, "softcap", getSoftcap().convertToFloat());
}

LogicalResult MmaTNOp::verify() {
  if (rows(getLhs()) != rows(getRhs()))
    return emitOpError() << "lhs has " << rows(getLhs())
                         << " rows but rhs has " << rows(getRhs())
                         << " (the contracted dimension)";
  if (rows(getAcc()) != cols(getLhs()) || cols(getAcc()) != cols(getRhs()))
    return emitOpError() << "expects an accumulator of " << cols(getLhs())
                         << "x" << cols(getRhs()) << ", got "
                         << getAcc().getType();
  return success();
}

LogicalResult ScaleCastOp::verify() {
  auto acc = cast<RankedTensorType>(getAcc().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (acc.getShape() != out.getShape())
    return emitOpError() << "result shape differs from the accumulator's: "
                         << out << " vs " << acc;
  if (!std::isfinite(getScale().convertToFloat()))
    return emitOpError() << "scale must be finite";
  return success();
}
