//===- TileGradKernelMatch.cpp - The tile-level backward, matched ---------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// convert-fa3-tile-to-hopper reads the backward's kernel function (what
// fa3-tile{grid=true} made of an outlined fa3.attention_grad, or of an
// fa3.attention_varlen_grad: its offsets are arguments 6 and 7, seqused_k
// argument 8): its three
// #gpu.block grids, the dQ accumulator they share, and from the tile ops the
// kernels' spec: the element type and heads from the arguments, block_m
// and block_n from the Q and K tiles of the key-block grid, causal and the
// window from its fa3.mask, the softcap from fa3.softcap, the scale from
// the dQ conversion's fa3.scale_cast, dropout from fa3.dropout,
// `deterministic` from fa3.accumulate_tile's `ordered` and the producer
// warpgroup from fa3-warp-specialize's fa3.warp_specialize. Any other form
// is a diagnostic, and so is any op of the first and third grids or of the
// producer region that the kernels do not compute or issue. The key-block
// grid's index arithmetic (the CTA's coordinates, the query blocks of its
// steps, which steps mask, where each load is: the producer's fills, or
// the consumers' loads without a producer) is replayed into the main
// kernel (replayGradKeyGrid).
//
//===----------------------------------------------------------------------===//

#include "HopperCodegen.h"
#include "TileKernel.h"

#include "fa3/Dialect/FA3/Utils/GridMapping.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

bool mlir::fa3::detail::isTileGradKernel(func::FuncOp func) {
  bool found = false;
  func.walk([&](AccumulateTileOp) { found = true; });
  return found;
}

/// The single op of type OpTy in `root`, or null (none, or several).
template <typename OpTy>
static OpTy singleOp(Operation *root) {
  OpTy found;
  bool several = false;
  root->walk([&](OpTy op) {
    several |= static_cast<bool>(found);
    found = op;
  });
  return several ? OpTy() : found;
}

/// The function argument `v` reads (a packed batch's through its [1, T, H,
/// D] view), or null.
static Value argumentOf(Value v) {
  if (auto view = v.getDefiningOp<tensor::ExpandShapeOp>())
    v = view.getSrc();
  return isa<BlockArgument>(v) ? v : Value();
}

/// The first grid is what `_pre` computes, Δ = rowsum(dO ∘ O) less dLSE's
/// statistics where there are some, and the third what `_post` does, dQ =
/// scale · the f32 accumulator (HopperGradPrePostKernels.cpp): any other op
/// there is a diagnostic, not a computation no kernel does.
static LogicalResult checkPrePostGrids(func::FuncOp func,
                                       MutableArrayRef<scf::ForallOp> grids) {
  auto isLoadOf = [&](Value tile, unsigned arg) {
    auto load = tile.getDefiningOp<LoadTileOp>();
    return load && argumentOf(load.getSource()) == func.getArgument(arg);
  };
  // The one op of a grid's in_parallel.
  auto singleStore = [](scf::ForallOp grid) -> Operation * {
    auto ops = grid.getTerminator().getYieldingOps();
    return llvm::hasSingleElement(ops) ? &*ops.begin() : nullptr;
  };
  for (Operation &op : grids[0].getBody()->without_terminator()) {
    auto dot = dyn_cast<RowDotOp>(op);
    bool delta =
        dot &&
        ((isLoadOf(dot.getLhs(), 0) && isLoadOf(dot.getRhs(), 4)) ||
         (isLoadOf(dot.getLhs(), 4) && isLoadOf(dot.getRhs(), 0))) &&
        (!dot.getMinus() || dot.getMinus().getDefiningOp<LoadStatsOp>());
    if (!delta && !isa<LoadTileOp, LoadStatsOp>(op) &&
        !isKernelScalar(&op, func))
      return op.emitOpError()
             << "is not part of what the backward's `_pre` kernel computes "
                "in the first grid: Δ = fa3.row_dot of the dO and O tiles "
                "(minus dLSE's fa3.load_stats), stored by one "
                "fa3.parallel_store_stats";
  }
  auto stats = dyn_cast_or_null<ParallelStoreStatsOp>(singleStore(grids[0]));
  if (!stats || !stats.getTile().getDefiningOp<RowDotOp>())
    return grids[0].emitOpError()
           << "expected one fa3.parallel_store_stats of Δ's fa3.row_dot";
  for (Operation &op : grids[2].getBody()->without_terminator()) {
    auto load = dyn_cast<LoadTileOp>(op);
    auto acc = load
                   ? load.getSource().getDefiningOp<bufferization::ToTensorOp>()
                   : bufferization::ToTensorOp();
    auto scaleCast = dyn_cast<ScaleCastOp>(op);
    bool conversion =
        (acc && acc.getBuffer().getDefiningOp<memref::AllocOp>()) ||
        (scaleCast && scaleCast.getAcc().getDefiningOp<LoadTileOp>());
    if (!conversion && !isKernelScalar(&op, func))
      return op.emitOpError()
             << "is not part of what the backward's `_post` kernel computes "
                "in the third grid: dQ = fa3.scale_cast of the f32 "
                "accumulator's fa3.load_tile, stored by one "
                "fa3.parallel_store_tile";
  }
  auto dq = dyn_cast_or_null<ParallelStoreTileOp>(singleStore(grids[2]));
  if (!dq || !dq.getTile().getDefiningOp<ScaleCastOp>())
    return grids[2].emitOpError()
           << "expected one fa3.parallel_store_tile of dQ's fa3.scale_cast";
  return success();
}

FailureOr<HopperAttentionGradSpec>
mlir::fa3::detail::matchTileGradKernel(func::FuncOp func) {
  auto schedule = func->getAttrOfType<ScheduleAttr>(kScheduleAttrName);
  if (!schedule)
    return func.emitOpError() << "has no #fa3.schedule";
  auto grids = llvm::to_vector(func.getBody().front().getOps<scf::ForallOp>());
  if (grids.size() != 3 || !llvm::all_of(grids, isBlockGrid))
    return func.emitOpError()
           << "is not the backward's grid form: expected three scf.foralls "
              "mapped to #gpu.block (fa3-tile{grid=true} of "
              "fa3.attention_grad), got "
           << grids.size();
  // (dO, Q, K, V, O, LSE[, dLSE][, rng]), or packed: (dO, Q, K, V, O, LSE,
  // cu_seqlens_q, cu_seqlens_k[, seqused_k][, dLSE]).
  if (func.getNumArguments() < 6)
    return func.emitOpError() << "expected the backward's arguments (dO, Q, "
                                 "K, V, O, LSE, ...), got "
                              << func.getNumArguments();
  auto isOffsets = [&](unsigned i) {
    if (i >= func.getNumArguments())
      return false;
    auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
    return type && type.getRank() == 1 && type.getElementType().isInteger(32);
  };
  if (failed(checkPrePostGrids(func, grids)))
    return failure();
  HopperAttentionGradSpec spec;
  spec.varlen = isOffsets(6) && isOffsets(7);
  spec.sequsedK = spec.varlen && isOffsets(8);
  // [B, S, H, D], or packed [T, H, D].
  auto q = cast<RankedTensorType>(func.getArgument(1).getType());
  auto k = cast<RankedTensorType>(func.getArgument(2).getType());
  auto v = cast<RankedTensorType>(func.getArgument(3).getType());
  auto heads = [](RankedTensorType t) { return t.getDimSize(t.getRank() - 2); };
  auto dim = [](RankedTensorType t) { return t.getShape().back(); };
  Type elt = q.getElementType();
  if (!elt.isBF16() && !elt.isF16())
    return func.emitOpError()
           << "the Hopper backward takes f16 and bf16, got " << elt;
  spec.bf16 = elt.isBF16();
  spec.headDim = dim(q);
  if (dim(v) != spec.headDim)
    return func.emitOpError() << "the Hopper backward needs the value head "
                                 "dim to equal the query head dim, got "
                              << dim(v) << " vs " << spec.headDim;
  spec.numQHeads = heads(q);
  spec.numKVHeads = heads(k);

  // The dQ accumulator: one zero-filled buffer, added to in the key-block
  // grid only.
  scf::ForallOp keyGrid = grids[1];
  auto add = singleOp<AccumulateTileOp>(func);
  if (!add || !keyGrid->isProperAncestor(add))
    return func.emitOpError() << "expected one fa3.accumulate_tile (dQ), in "
                                 "the second (key-block) grid";
  auto alloc = add.getDest().getDefiningOp<memref::AllocOp>();
  bool zeroFilled =
      alloc && llvm::any_of(alloc->getUsers(), [](Operation *u) {
        auto fill = dyn_cast<linalg::FillOp>(u);
        return fill && matchPattern(fill.value(), m_AnyZeroFloat());
      });
  if (!zeroFilled)
    return add.emitOpError() << "adds into a buffer that is not a zero-filled "
                                "memref.alloc (the dQ accumulator)";
  spec.deterministic = add.getOrdered();

  // The tiles: K's rows are block_n, Q's block_m.
  int64_t blockM = 0, blockN = 0;
  // A packed batch's tiles read the [1, T, H, D] views of the arguments
  // (argumentOf).
  keyGrid.walk([&](LoadTileOp load) {
    auto rows = load.getResult().getType().getDimSize(0);
    if (argumentOf(load.getSource()) == func.getArgument(2))
      blockN = rows;
    else if (argumentOf(load.getSource()) == func.getArgument(1))
      blockM = rows;
  });
  if (!blockM || !blockN)
    return keyGrid.emitOpError() << "has no Q and K tile loads";
  spec.blockM = blockM;
  spec.blockN = blockN;
  spec.stages = schedule.getStages();

  MaskOp mask = singleOp<MaskOp>(keyGrid);
  if (!mask)
    return keyGrid.emitOpError() << "expected one fa3.mask in the key grid";
  spec.causal = mask.getCausal();
  std::tie(spec.windowLeft, spec.windowRight) =
      resolveWindow(mask.getCausal(), mask.getWindow());
  if (auto softcap = singleOp<SoftcapOp>(keyGrid))
    spec.softcap = softcap.getSoftcap().convertToFloat();
  // Dropout: one fa3.dropout each on P and dP (the kernel regenerates one
  // mask for both), with the same probability.
  SmallVector<DropoutOp> drops;
  keyGrid.walk([&](DropoutOp drop) { drops.push_back(drop); });
  if (!drops.empty()) {
    if (drops.size() != 2 || drops[0].getP() != drops[1].getP())
      return drops.front().emitOpError()
             << "the Hopper backward applies one dropout mask to P and dP: "
                "expected two fa3.dropout with the same probability in the "
                "key grid, got "
             << drops.size();
    spec.dropout = drops.front().getP().convertToFloat();
  }
  // dQ = scale · accumulator: the third grid's conversion.
  ScaleCastOp dqCast = singleOp<ScaleCastOp>(grids[2]);
  if (!dqCast)
    return grids[2].emitOpError() << "expected the dQ conversion "
                                     "(fa3.scale_cast) in the third grid";
  spec.scale = dqCast.getScale().convertToFloat();

  if (failed(checkHopperGradSpec(func, schedule, spec)))
    return failure();
  // A producer warpgroup is fa3-warp-specialize's split of the key grid,
  // with the schedule's register split.
  auto split = singleOp<WarpSpecializeOp>(keyGrid);
  if (spec.hasProducer() != static_cast<bool>(split) ||
      (split &&
       (split.getProducerRegsAttr().getInt() != spec.producerRegs ||
        split.getConsumerRegsAttr().getInt() != spec.consumerRegs)))
    return keyGrid.emitOpError()
           << "the schedule's producer_regs = " << spec.producerRegs
           << " needs the key grid split by fa3-warp-specialize with that "
              "register split (and none without a producer)";
  // fa3-outline-hopper-kernels named the function after the L0 op's spec,
  // and the launch calls the kernels by that name.
  if (spec.kernelName() != func.getSymName())
    return func.emitOpError() << "reads as the backward " << spec.kernelName()
                              << ", not the kernel its launch names";
  return spec;
}

/// The dimension of `grid` whose induction variable (`iv`) or upper bound
/// (`!iv`) `v` is.
static std::optional<unsigned> gridDimOf(Value v, scf::ForallOp grid,
                                         bool iv) {
  for (auto [i, bound] : llvm::enumerate(grid.getMixedUpperBound()))
    if (iv ? grid.getInductionVars()[i] == v
           : llvm::dyn_cast_if_present<Value>(bound) == v)
      return i;
  return std::nullopt;
}

/// Sq or Sk: dim 1 of Q, dO or O (arguments 0, 1, 4), or of K or V (2, 3).
static std::optional<bool> isKeyLength(Value v, func::FuncOp func) {
  auto dim = v.getDefiningOp<tensor::DimOp>();
  if (!dim || dim.getConstantIndex() != 1)
    return std::nullopt;
  auto arg = dyn_cast<BlockArgument>(dim.getSource());
  if (!arg || arg.getOwner() != &func.getBody().front() ||
      arg.getArgNumber() > 4)
    return std::nullopt;
  return arg.getArgNumber() == 2 || arg.getArgNumber() == 3;
}

/// The first value `v` is computed from that the kernel cannot replay (see
/// matchGradKeyGrid), or null. `leaves` are values the kernel has (the
/// loops' induction variables).
static Value unreplayable(Value v, func::FuncOp func, scf::ForallOp grid,
                          bool packed, ArrayRef<Value> leaves,
                          DenseSet<Value> &seen) {
  // A packed grid's extents are not its launch's (z is B + 1 there: the
  // last CTAs zero the rows past the last sequence).
  if (!seen.insert(v).second || gridDimOf(v, grid, /*iv=*/true) ||
      (!packed && gridDimOf(v, grid, /*iv=*/false)) || isKeyLength(v, func) ||
      llvm::is_contained(leaves, v))
    return {};
  Operation *def = v.getDefiningOp();
  // A packed batch's offsets and lengths: cu_seqlens_q[i], cu_seqlens_k[i],
  // seqused_k[i] (arguments 6 to 8), as indices.
  if (def && isLengthRead(def, func) &&
      cast<BlockArgument>(cast<tensor::ExtractOp>(def).getTensor())
                  .getArgNumber() -
              6 <
          3)
    return unreplayable(cast<tensor::ExtractOp>(def).getIndices()[0], func,
                        grid, packed, leaves, seen);
  if (def && isa<arith::IndexCastOp>(def) && isScalarOp(def))
    return unreplayable(def->getOperand(0), func, grid, packed, leaves, seen);
  if (!def || !isScalarOp(def) ||
      !(v.getType().isIndex() || v.getType().isInteger(1)))
    return v;
  for (Value operand : def->getOperands())
    if (Value bad = unreplayable(operand, func, grid, packed, leaves, seen))
      return bad;
  return {};
}

/// `iv` times `factor` (`v` = arith.muli(iv, factor)).
static bool isScaledInductionVar(Value v, scf::ForallOp, Value iv,
                                 int64_t factor) {
  auto mul = v.getDefiningOp<arith::MulIOp>();
  return mul && mul.getLhs() == iv &&
         getConstantIntValue(mul.getRhs()) == factor;
}

/// `loop`'s induction variable times `factor` (`v` = arith.muli(iv,
/// factor)).
static bool isScaledInductionVar(Value v, scf::ForOp loop, int64_t factor) {
  auto mul = v.getDefiningOp<arith::MulIOp>();
  return mul && mul.getLhs() == loop.getInductionVar() &&
         getConstantIntValue(mul.getRhs()) == factor;
}

/// Q's row of query block qb (`loop`'s induction variable): qb · block_m,
/// or in a packed batch the sequence's first row plus that.
static bool isQueryRow(Value row, scf::ForOp loop, int64_t blockM) {
  if (auto sum = row.getDefiningOp<arith::AddIOp>())
    row = sum.getRhs();
  return isScaledInductionVar(row, loop, blockM);
}

/// The stores of dK and dV at the end of the key grid `grid` (see
/// matchGradKeyGrid): each `fa3.parallel_store_tile` of the grid's
/// `in_parallel` stores an `fa3.scale_cast` (through fa3-warp-specialize's
/// consumers' `fa3.yield` where there is one) of a result of the head loop,
/// which passes the query loop's carried value of the same number
/// through, into the grid output that `func` returns as dK (result 1) or
/// dV (result 2); dK's scale is `softmaxScale`, dV's 1.
static FailureOr<std::array<GradKeyGradient, 2>>
matchKeyGradients(func::FuncOp func, scf::ForallOp grid, scf::ForOp headLoop,
                  scf::ForOp queryLoop, float softmaxScale) {
  auto returned = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  // Which function result (1: dK, 2: dV) a grid output becomes.
  auto resultOf = [&](Value v) -> std::optional<unsigned> {
    if (v.hasOneUse())
      if (auto view = dyn_cast<tensor::CollapseShapeOp>(*v.getUsers().begin()))
        v = view.getResult();
    for (OpOperand &use : v.getUses())
      if (use.getOwner() == returned)
        return use.getOperandNumber();
    return std::nullopt;
  };
  // The head loop passes the query loop's carried values through.
  auto yield = cast<scf::YieldOp>(headLoop.getBody()->getTerminator());
  for (auto [i, arg] : llvm::enumerate(headLoop.getRegionIterArgs()))
    if (queryLoop->getParentOp() != headLoop ||
        yield.getOperand(i) != queryLoop.getResult(i) ||
        queryLoop.getInitArgs()[i] != arg ||
        !splatValue(headLoop.getInitArgs()[i]) ||
        *splatValue(headLoop.getInitArgs()[i]) != 0.0f)
      return headLoop.emitOpError()
             << "expected the loop over the group's query heads to carry the "
                "query loop's dK and dV accumulators from zero";
  std::array<std::optional<GradKeyGradient>, 2> found;
  for (Operation &op : grid.getTerminator().getYieldingOps()) {
    auto store = dyn_cast<ParallelStoreTileOp>(op);
    auto out =
        store ? dyn_cast<BlockArgument>(store.getDest()) : BlockArgument();
    std::optional<unsigned> result =
        out && out.getOwner() == grid.getBody()
            ? resultOf(grid.getTiedOpResult(grid.getTiedOpOperand(out)))
            : std::nullopt;
    if (!result || *result == 0)
      return op.emitOpError()
             << "is not a store of the key grid's dK or dV tile into the "
                "output the kernel returns as dK or dV";
    // Through fa3-warp-specialize's split: the consumers' yield.
    Value tile = store.getTile();
    if (auto split = tile.getDefiningOp<WarpSpecializeOp>())
      tile = split.getConsumers().front().getTerminator()->getOperand(
          cast<OpResult>(tile).getResultNumber());
    StringRef name = *result == 1 ? "dK" : "dV";
    if (found[*result - 1])
      return store.emitOpError() << "is a second store into " << name;
    auto scaleCast = tile.getDefiningOp<ScaleCastOp>();
    auto acc = scaleCast ? dyn_cast<OpResult>(scaleCast.getAcc()) : OpResult();
    if (!acc || acc.getOwner() != headLoop.getOperation())
      return store.emitOpError()
             << "stores something other than an fa3.scale_cast of an "
                "accumulator the step loops carry into "
             << name;
    // The kernel is named and launched by the softmax scale (dQ's
    // conversion's): dK takes it, dV none.
    float scale = scaleCast.getScale().convertToFloat();
    float expected = *result == 1 ? softmaxScale : 1.0f;
    if (scale != expected)
      return scaleCast.emitOpError()
             << "scales " << name << " by " << scale << ", expected "
             << expected
             << (*result == 1 ? " (the softmax scale, dQ's conversion's)" : "");
    found[*result - 1] = GradKeyGradient{acc.getResultNumber(), scale};
  }
  if (!found[0] || !found[1])
    return grid.emitOpError() << "does not store both dK and dV";
  return std::array<GradKeyGradient, 2>{*found[0], *found[1]};
}

/// What a load of the key grid (an fa3.load_tile or fa3.load_stats) reads:
/// K, V, Q or dO by the function argument of its tile, the LSE by its
/// argument, Δ (the first grid's result) otherwise.
static std::optional<GradLoad> gradLoadOf(Operation *load, func::FuncOp func) {
  if (auto stats = dyn_cast<LoadStatsOp>(load))
    return argumentOf(stats.getSource()) == func.getArgument(5)
               ? GradLoad::LSE
               : GradLoad::Delta;
  auto tile = dyn_cast<LoadTileOp>(load);
  if (!tile)
    return std::nullopt;
  Value arg = argumentOf(tile.getSource());
  for (auto [index, what] :
       {std::pair<unsigned, GradLoad>{0, GradLoad::GradOutput},
        {1, GradLoad::Query},
        {2, GradLoad::Key},
        {3, GradLoad::Value}})
    if (arg == func.getArgument(index))
      return what;
  return std::nullopt;
}

/// The (batch, row, head) of a load site: an fa3.ring_fill, fa3.load_tile
/// or fa3.load_stats.
static std::array<Value, 3> siteCoordinates(Operation *site) {
  if (auto fill = dyn_cast<RingFillOp>(site))
    return {fill.getBatch(), fill.getRow(), fill.getHead()};
  if (auto tile = dyn_cast<LoadTileOp>(site))
    return {tile.getBatch(), tile.getRow(), tile.getHead()};
  auto stats = cast<LoadStatsOp>(site);
  return {stats.getBatch(), stats.getRow(), stats.getHead()};
}

/// Whether `a` (computed in the producer region) is `b` (in the consumers')
/// computed again: the same pure ops over the same values, `same` pairing
/// the two regions' step loops' induction variables. (No memo of compared
/// ops: one producer constant may stand for several consumer constants of
/// the same value.)
static bool recomputes(Value a, Value b, DenseMap<Value, Value> &same) {
  if (a == b)
    return true;
  if (auto iv = same.find(a); iv != same.end())
    return iv->second == b;
  Operation *opA = a.getDefiningOp(), *opB = b.getDefiningOp();
  if (!opA || !opB || opA->getName() != opB->getName() ||
      opA->getAttrDictionary() != opB->getAttrDictionary() ||
      opA->getNumOperands() != opB->getNumOperands() ||
      opA->getNumRegions() != 0 || !isPure(opA) ||
      cast<OpResult>(a).getResultNumber() !=
          cast<OpResult>(b).getResultNumber())
    return false;
  for (auto [x, y] : llvm::zip(opA->getOperands(), opB->getOperands()))
    if (!recomputes(x, y, same))
      return false;
  return true;
}

/// The producer region of fa3-warp-specialize's split of the key grid is
/// what the main kernel's producer warpgroup issues (buildMain): K's and
/// V's fills at the consumers' K and V loads' coordinates, then, in the
/// consumers' loops over the group's heads and the query blocks, step (g,
/// qb)'s Q, dO, LSE and Δ fills at its loads' coordinates with use g ·
/// (hi − lo) + qb − lo, the step's number. Anything else would be loads
/// the kernel does not issue: a diagnostic.
static LogicalResult checkGradProducer(WarpSpecializeOp split,
                                       scf::ForOp headLoop,
                                       scf::ForOp queryLoop,
                                       GradKeyGrid &grid) {
  auto func = split->getParentOfType<func::FuncOp>();
  auto fail = [&](Operation *at) {
    return at->emitOpError()
           << "is not what the backward kernel's producer warpgroup issues: "
              "K's and V's fa3.ring_fill at the consumers' K and V loads, "
              "then in the loops over the group's heads and query blocks one "
              "fill of Q, dO, LSE and Δ each at the step's loads, use g · "
              "(hi − lo) + qb − lo";
  };
  // The consumers' loads by what they read: K, V (whole grid), and the
  // step's Q, dO, LSE and Δ.
  DenseMap<Value, Operation *> consumerLoad;
  split.getConsumers().walk([&](Operation *op) {
    if (auto load = dyn_cast<LoadTileOp>(op))
      consumerLoad[load.getSource()] = op;
    else if (auto stats = dyn_cast<LoadStatsOp>(op))
      consumerLoad[stats.getSource()] = op;
  });
  DenseMap<Value, Value> same;
  // Each fill is the kernel's load of what its consumer load reads, once.
  auto fillMatches = [&](RingFillOp fill, bool step) {
    Operation *load = consumerLoad.lookup(fill.getSource());
    if (!load || static_cast<bool>(fill.getUse()) != step ||
        (load->getParentOp() == queryLoop.getOperation()) != step ||
        fill.getPageTable() || fill.getPackedHeads() ||
        fill.getTile() != load->getResult(0).getType())
      return false;
    std::optional<GradLoad> what = gradLoadOf(load, func);
    if (!what || grid.loadSites[static_cast<size_t>(*what)])
      return false;
    Operation *&site = grid.loadSites[static_cast<size_t>(*what)];
    for (auto [x, y] : llvm::zip(siteCoordinates(fill), siteCoordinates(load)))
      if (!recomputes(x, y, same))
        return false;
    site = fill;
    return true;
  };
  Block &body = split.getProducer().front();
  SmallVector<RingFillOp> keyFills;
  scf::ForOp heads;
  for (Operation &op : body.without_terminator()) {
    if (auto fill = dyn_cast<RingFillOp>(op)) {
      if (!fillMatches(fill, /*step=*/false))
        return fail(fill);
      keyFills.push_back(fill);
    } else if (auto loop = dyn_cast<scf::ForOp>(op); loop && !heads) {
      heads = loop;
    } else if (!isPure(&op) || op.getNumRegions() != 0) {
      return fail(&op);
    }
  }
  // The step loops: the consumers' bounds, then one Q, dO, LSE and Δ fill.
  auto sameBounds = [&](scf::ForOp a, scf::ForOp b) {
    return a && a.getNumRegionIterArgs() == 0 &&
           recomputes(a.getLowerBound(), b.getLowerBound(), same) &&
           recomputes(a.getUpperBound(), b.getUpperBound(), same) &&
           recomputes(a.getStep(), b.getStep(), same);
  };
  if (keyFills.size() != 2 || !sameBounds(heads, headLoop))
    return fail(heads ? heads.getOperation() : split.getOperation());
  same[heads.getInductionVar()] = headLoop.getInductionVar();
  scf::ForOp queries;
  for (Operation &op : heads.getBody()->without_terminator()) {
    if (auto loop = dyn_cast<scf::ForOp>(op); loop && !queries)
      queries = loop;
    else if (!isPure(&op) || op.getNumRegions() != 0)
      return fail(&op);
  }
  if (!sameBounds(queries, queryLoop))
    return fail(queries ? queries.getOperation() : heads.getOperation());
  same[queries.getInductionVar()] = queryLoop.getInductionVar();
  // use = g · (hi − lo) + (qb − lo), the step's number.
  auto isStepNumber = [&](Value use) {
    auto sum = use.getDefiningOp<arith::AddIOp>();
    auto scaled =
        sum ? sum.getLhs().getDefiningOp<arith::MulIOp>() : arith::MulIOp();
    auto steps = scaled ? scaled.getRhs().getDefiningOp<arith::SubIOp>()
                        : arith::SubIOp();
    auto offset =
        sum ? sum.getRhs().getDefiningOp<arith::SubIOp>() : arith::SubIOp();
    return steps && offset && scaled.getLhs() == heads.getInductionVar() &&
           recomputes(steps.getLhs(), queryLoop.getUpperBound(), same) &&
           recomputes(steps.getRhs(), queryLoop.getLowerBound(), same) &&
           offset.getLhs() == queries.getInductionVar() &&
           recomputes(offset.getRhs(), queryLoop.getLowerBound(), same);
  };
  DenseSet<Value> filled;
  for (Operation &op : queries.getBody()->without_terminator()) {
    auto fill = dyn_cast<RingFillOp>(op);
    if (fill &&
        (!fillMatches(fill, /*step=*/true) || !isStepNumber(fill.getUse()) ||
         !filled.insert(fill.getSource()).second))
      return fail(fill);
    if (!fill && (!isPure(&op) || op.getNumRegions() != 0))
      return fail(&op);
  }
  if (filled.size() != 4)
    return fail(queries);
  grid.loadHeadLoop = heads;
  grid.loadQueryLoop = queries;
  return success();
}

/// Without a producer region the consumers' loads are the backward
/// kernel's: K and V in the key grid, Q, dO, the LSE and Δ in the step,
/// each once (a diagnostic otherwise).
static LogicalResult findConsumerLoads(GradKeyGrid &grid, func::FuncOp func) {
  scf::ForOp queryLoop = grid.queryLoop;
  WalkResult loads = grid.forall.walk([&](Operation *op) {
    if (!isa<LoadTileOp, LoadStatsOp>(op))
      return WalkResult::advance();
    std::optional<GradLoad> what = gradLoadOf(op, func);
    bool step = op->getParentOp() == queryLoop.getOperation();
    bool stepLoad = what && *what != GradLoad::Key && *what != GradLoad::Value;
    if (!what || grid.loadSites[static_cast<size_t>(*what)] ||
        step != stepLoad) {
      op->emitOpError() << "is not one of the backward kernel's loads: K "
                           "and V once in the key grid, Q, dO, the LSE and "
                           "Δ once in the step";
      return WalkResult::interrupt();
    }
    grid.loadSites[static_cast<size_t>(*what)] = op;
    return WalkResult::advance();
  });
  if (loads.wasInterrupted())
    return failure();
  if (llvm::is_contained(grid.loadSites, nullptr))
    return grid.forall.emitOpError()
           << "does not load all of K, V, Q, dO, the LSE and Δ";
  grid.loadHeadLoop = grid.headLoop;
  grid.loadQueryLoop = queryLoop;
  return success();
}

FailureOr<GradKeyGrid> mlir::fa3::detail::matchGradKeyGrid(func::FuncOp func) {
  auto grids = llvm::to_vector(func.getBody().front().getOps<scf::ForallOp>());
  if (grids.size() != 3 || grids[1].getRank() != 3)
    return func.emitOpError() << "expected the backward's three grids";
  GradKeyGrid grid{grids[1], {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  // The grid's own induction variables by the block dim they map to.
  Value ivByBlock[3];
  ArrayAttr mapping = *grid.forall.getMapping();
  for (auto [i, dim] : llvm::enumerate(mapping))
    ivByBlock[static_cast<int64_t>(
        cast<gpu::GPUBlockMappingAttr>(dim).getBlock())] =
        grid.forall.getInductionVars()[i];
  // The K and Q tiles' loads (a packed batch's read the [1, T, H, D] views
  // of the arguments).
  LoadTileOp keyLoad, queryLoad;
  grid.forall.walk([&](LoadTileOp load) {
    if (argumentOf(load.getSource()) == func.getArgument(2))
      keyLoad = load;
    if (argumentOf(load.getSource()) == func.getArgument(1))
      queryLoad = load;
  });
  if (!keyLoad)
    return grid.forall.emitOpError() << "has no K tile load";
  bool packed = keyLoad.getSource() != func.getArgument(2);
  if (packed) {
    // Packed: K is read at the sequence's offset, by the grid's own (key
    // block, head, sequence).
    grid.keyBlock = ivByBlock[0];
    grid.head = ivByBlock[1];
    grid.batch = ivByBlock[2];
  } else {
    auto row = keyLoad.getRow().getDefiningOp<arith::MulIOp>();
    if (!row || getConstantIntValue(row.getRhs()) !=
                    keyLoad.getResult().getType().getDimSize(0))
      return keyLoad.emitOpError()
             << "is not at row key block · block_n (the backward's key grid)";
    grid.keyBlock = row.getLhs();
    grid.head = keyLoad.getHead();
    grid.batch = keyLoad.getBatch();
  }

  // The steps: query head g of the group, query block qb; Q's tile at row
  // qb · block_m of head K/V head · group + g.
  auto queryLoop =
      queryLoad ? queryLoad->getParentOfType<scf::ForOp>() : scf::ForOp();
  auto headLoop =
      queryLoop ? queryLoop->getParentOfType<scf::ForOp>() : scf::ForOp();
  int64_t blockM =
      queryLoad ? queryLoad.getResult().getType().getDimSize(0) : 0;
  auto headSum = queryLoad ? queryLoad.getHead().getDefiningOp<arith::AddIOp>()
                           : arith::AddIOp();
  auto q = cast<RankedTensorType>(func.getArgument(1).getType());
  auto k = cast<RankedTensorType>(func.getArgument(2).getType());
  int64_t group =
      q.getDimSize(q.getRank() - 2) / k.getDimSize(k.getRank() - 2);
  if (!headLoop || getConstantIntValue(queryLoop.getStep()) != 1 ||
      getConstantIntValue(headLoop.getLowerBound()) != 0 ||
      getConstantIntValue(headLoop.getUpperBound()) != group ||
      getConstantIntValue(headLoop.getStep()) != 1 ||
      !isQueryRow(queryLoad.getRow(), queryLoop, blockM) || !headSum ||
      headSum.getRhs() != headLoop.getInductionVar() ||
      !headSum.getLhs().getDefiningOp<arith::MulIOp>() ||
      headSum.getLhs().getDefiningOp<arith::MulIOp>().getLhs() != grid.head ||
      getConstantIntValue(
          headSum.getLhs().getDefiningOp<arith::MulIOp>().getRhs()) != group)
    return grid.forall.emitOpError()
           << "expected the backward's steps: a loop over the " << group
           << " query heads of the group around a loop over query blocks "
              "whose Q tile is at row query block · block_m of head K/V head "
              "· group + g";
  grid.headLoop = headLoop;
  grid.queryLoop = queryLoop;
  if (failed(checkGradStep(*queryLoop.getBody(), func)))
    return failure();
  ScaleCastOp dqCast = singleOp<ScaleCastOp>(grids[2]);
  if (!dqCast)
    return grids[2].emitOpError()
           << "expected the dQ conversion (fa3.scale_cast) in the third grid";
  auto keyGradients = matchKeyGradients(func, grid.forall, headLoop, queryLoop,
                                        dqCast.getScale().convertToFloat());
  if (failed(keyGradients))
    return failure();
  grid.keyGradients = *keyGradients;
  MaskOp mask;
  grid.forall.walk([&](MaskOp op) { mask = op; });
  grid.mask = mask;
  grid.maskIf = mask ? dyn_cast<scf::IfOp>(mask->getParentOp()) : scf::IfOp();
  if (!grid.maskIf)
    return grid.forall.emitOpError()
           << "expected its fa3.mask inside the scf.if of the blocks it masks";
  // Packed: the tiles' rows are the sequence's first row plus the block's.
  SmallVector<Value> replayed;
  if (packed) {
    auto queryRow = queryLoad.getRow().getDefiningOp<arith::AddIOp>();
    auto keyRow = keyLoad.getRow().getDefiningOp<arith::AddIOp>();
    if (!queryRow || !keyRow ||
        !isScaledInductionVar(keyRow.getRhs(), grid.forall, ivByBlock[0],
                              keyLoad.getResult().getType().getDimSize(0)))
      return grid.forall.emitOpError()
             << "expected a packed batch's Q and K tiles at the sequence's "
                "first row plus the block's";
    grid.queryRow0 = queryRow.getLhs();
    grid.keyRow0 = keyRow.getLhs();
    replayed = {grid.queryRow0, grid.keyRow0, mask.getQLen(), mask.getKLen()};
  }

  DenseSet<Value> seen;
  Value loopIVs[] = {headLoop.getInductionVar(), queryLoop.getInductionVar()};
  replayed.append({grid.keyBlock, grid.head, grid.batch,
                   queryLoop.getLowerBound(), queryLoop.getUpperBound(),
                   grid.maskIf.getCondition()});
  for (Value value : replayed)
    if (Value bad =
            unreplayable(value, func, grid.forall, packed, loopIVs, seen)) {
      Operation *def = bad.getDefiningOp();
      return keyLoad.emitOpError()
             << "has a coordinate, step bound or mask test computed from "
             << (def ? "'" + def->getName().getStringRef().str() + "'"
                     : std::string("a block argument"))
             << ": the backward kernel computes them from the grid's ids and "
                "extents, the loops' induction variables, Sq, Sk and index "
                "arithmetic only";
    }
  // The producer's fills, compared with the consumers' loads (checked
  // above to be replayable).
  if (auto split = singleOp<WarpSpecializeOp>(grid.forall)) {
    if (failed(checkGradProducer(split, headLoop, queryLoop, grid)))
      return failure();
  } else if (failed(findConsumerLoads(grid, func))) {
    return failure();
  }
  // The kernel issues its loads at their sites' coordinates.
  Value stepIVs[] = {grid.loadHeadLoop.getInductionVar(),
                     grid.loadQueryLoop.getInductionVar()};
  for (Operation *site : grid.loadSites) {
    DenseSet<Value> seenHere;
    for (Value coordinate : siteCoordinates(site))
      if (unreplayable(coordinate, func, grid.forall, packed, stepIVs,
                       seenHere))
        return site->emitOpError()
               << "is at coordinates the backward kernel cannot compute: "
                  "they must come from the grid's ids and extents, the "
                  "step loops' induction variables, Sq, Sk and index "
                  "arithmetic";
  }
  return grid;
}

GradStepTile mlir::fa3::detail::gradStepTileOf(Value tile, func::FuncOp func) {
  auto load = tile.getDefiningOp<LoadTileOp>();
  if (!load)
    return GradStepTile::Other;
  Value source = load.getSource();
  if (auto view = source.getDefiningOp<tensor::ExpandShapeOp>())
    source = view.getSrc();
  if (source == func.getArgument(1))
    return GradStepTile::Query;
  if (source == func.getArgument(0))
    return GradStepTile::GradOutput;
  return GradStepTile::Other;
}

LogicalResult mlir::fa3::detail::checkGradStep(Block &step, func::FuncOp func) {
  // The MMAs and the softmax gradient in the order the kernel issues them.
  enum Kind { SProduct, DPProduct, Grad, DVProduct, DQProduct, DKProduct, Add };
  SmallVector<Kind> order;
  SmallVector<Operation *> mmas;
  Operation *previous = nullptr;
  bool dpAfterS = false;
  for (Operation &op : step) {
    if (isKernelScalar(&op, func) ||
        (op.getNumResults() == 1 && splatValue(op.getResult(0))))
      continue;
    auto maskIf = dyn_cast<scf::IfOp>(op);
    bool isMask = maskIf && maskIf.getNumResults() == 1 &&
                  !maskIf.thenBlock()->getOps<MaskOp>().empty();
    if (auto qk = dyn_cast<QKOp>(op)) {
      bool s = gradStepTileOf(qk.getQuery(), func) == GradStepTile::Query;
      // dPᵀ's product comes right after Sᵀ's: nothing but index
      // arithmetic between them.
      dpAfterS |= !s && previous && isa<QKOp>(previous);
      order.push_back(s ? SProduct : DPProduct);
    } else if (auto mma = dyn_cast<MmaTNOp>(op)) {
      order.push_back(gradStepTileOf(mma.getRhs(), func) ==
                              GradStepTile::GradOutput
                          ? DVProduct
                          : DKProduct);
    } else if (isa<PVOp>(op)) {
      order.push_back(DQProduct);
    } else if (isa<AccumulateTileOp>(op)) {
      order.push_back(Add);
    } else if (auto grad = dyn_cast<SoftmaxGradOp>(op)) {
      order.push_back(Grad);
      // Softcap's derivative is applied in the same pass over dSᵀ.
      bool capped = !step.getOps<SoftcapGradOp>().empty();
      if (capped && (!grad.getResult().hasOneUse() ||
                     !isa<SoftcapGradOp>(*grad.getResult().getUsers().begin())))
        return grad.emitOpError()
               << "is not the one fa3.softcap_grad's operand: the Hopper "
                  "backward applies softcap's derivative to dSᵀ as it "
                  "computes it";
    } else if (!isa<LoadTileOp, LoadStatsOp, SoftcapOp, RecomputeProbsOp,
                    DropoutOp, SoftcapGradOp, scf::YieldOp>(op) &&
               !isMask) {
      return op.emitOpError()
             << "is not an op the Hopper backward's step emits (tile loads "
                "and statistics, fa3.qk, fa3.softcap, the masked scf.if, "
                "fa3.recompute_probs, fa3.dropout, fa3.softmax_grad, "
                "fa3.softcap_grad, fa3.mma_tn, fa3.pv, fa3.accumulate_tile "
                "and index arithmetic)";
    } else {
      previous = &op;
      continue;
    }
    mmas.push_back(&op);
    previous = &op;
  }
  const Kind expected[] = {SProduct,  DPProduct, Grad, DVProduct,
                           DQProduct, DKProduct, Add};
  if (!llvm::equal(order, expected) || !dpAfterS)
    return (mmas.empty() ? step.getParentOp() : mmas.front())->emitOpError()
           << "is in a backward step whose MMAs are not where the Hopper "
              "kernel issues them: expected dPᵀ's fa3.qk right after Sᵀ's, "
              "then fa3.softmax_grad, dV's fa3.mma_tn, dQ's fa3.pv, dK's "
              "fa3.mma_tn and the fa3.accumulate_tile (fa3-grad-mma-order's "
              "order)";
  // The kernel carries dK, then dV.
  auto yield = cast<scf::YieldOp>(step.getTerminator());
  auto carried = [&](unsigned i) {
    auto mma = yield.getNumOperands() == 2
                   ? yield.getOperand(i).getDefiningOp<MmaTNOp>()
                   : MmaTNOp();
    return mma ? gradStepTileOf(mma.getRhs(), func) : GradStepTile::Other;
  };
  if (carried(0) != GradStepTile::Query ||
      carried(1) != GradStepTile::GradOutput)
    return yield.emitOpError()
           << "expected the backward step to carry dK, then dV";
  return success();
}

namespace {
/// GradKeyGridReplay by replaying the key grid's IR: the grid's induction
/// variables are the block ids, its extents the grid dims, Sq and Sk the
/// kernel's; every other value the same arith op in i32. Values of the
/// kernel's entry are emitted once; those of a step (reading the loops'
/// induction variables) at each call.
class TileGradKeyGridReplay : public GradKeyGridReplay {
public:
  explicit TileGradKeyGridReplay(const GradKeyGrid &grid) : grid(grid) {}

  std::array<Value, 3> coordinates(OpBuilder &b, std::array<Value, 3> blockIds,
                                   Value seqQ, Value seqK,
                                   ArrayRef<Value> lengthPointers) override {
    this->blockIds = blockIds;
    this->seqQ = seqQ;
    this->seqK = seqK;
    this->lengthPointers.assign(lengthPointers.begin(), lengthPointers.end());
    return {replay(b, grid.keyBlock, entry), replay(b, grid.head, entry),
            replay(b, grid.batch, entry)};
  }

  std::tuple<Value, Value, Value, Value> sequence(OpBuilder &b) override {
    return {replay(b, grid.queryRow0, entry), replay(b, grid.keyRow0, entry),
            replay(b, grid.mask.getQLen(), entry),
            replay(b, grid.mask.getKLen(), entry)};
  }

  std::pair<Value, Value> queryBlocks(OpBuilder &b) override {
    return {replay(b, grid.queryLoop.getLowerBound(), entry),
            replay(b, grid.queryLoop.getUpperBound(), entry)};
  }

  Block &stepBody() override { return *grid.queryLoop.getBody(); }
  std::array<GradKeyGradient, 2> keyGradients() override {
    return grid.keyGradients;
  }

  Value needsMask(OpBuilder &b, Value g, Value qb) override {
    DenseMap<Value, Value> step = entry;
    step[grid.headLoop.getInductionVar()] = g;
    step[grid.queryLoop.getInductionVar()] = qb;
    return replay(b, grid.maskIf.getCondition(), step);
  }

  std::array<Value, 3> loadCoordinates(OpBuilder &b, GradLoad what, Value g,
                                       Value qb) override {
    // What is replayed here stays here (it may be inside a branch or a
    // loop): a copy of the entry's values, with the step loops' induction
    // variables where the site is a step's.
    DenseMap<Value, Value> scope = entry;
    if (g) {
      scope[grid.loadHeadLoop.getInductionVar()] = g;
      scope[grid.loadQueryLoop.getInductionVar()] = qb;
    }
    auto [batch, row, head] =
        siteCoordinates(grid.loadSites[static_cast<size_t>(what)]);
    return {replay(b, batch, scope), replay(b, row, scope),
            replay(b, head, scope)};
  }

private:
  Value replay(OpBuilder &b, Value v, DenseMap<Value, Value> &emitted);

  GradKeyGrid grid;
  std::array<Value, 3> blockIds;
  Value seqQ, seqK;
  /// A packed backward's cu_seqlens_q, cu_seqlens_k[, seqused_k].
  SmallVector<Value> lengthPointers;
  /// The values emitted at the kernel's entry.
  DenseMap<Value, Value> entry;
};
} // namespace

Value TileGradKeyGridReplay::replay(OpBuilder &b, Value v,
                                    DenseMap<Value, Value> &emitted) {
  if (Value known = emitted.lookup(v))
    return known;
  scf::ForallOp forall = grid.forall;
  Location loc = forall.getLoc();
  Type i32 = b.getI32Type();
  auto blockOf = [&](unsigned dim) {
    ArrayAttr mapping = *forall.getMapping();
    return static_cast<int64_t>(
        cast<gpu::GPUBlockMappingAttr>(mapping[dim]).getBlock());
  };
  Value result;
  if (auto dim = gridDimOf(v, forall, /*iv=*/true)) {
    result = blockIds[blockOf(*dim)];
  } else if (auto extract = v.getDefiningOp<tensor::ExtractOp>()) {
    // A packed batch's offsets and lengths: one load from the parameter.
    unsigned arg = cast<BlockArgument>(extract.getTensor()).getArgNumber();
    Type ptrType = lengthPointers[arg - 6].getType();
    Value at = LLVM::GEPOp::create(
        b, loc, ptrType, i32, lengthPointers[arg - 6],
        ValueRange{replay(b, extract.getIndices()[0], emitted)});
    result = LLVM::LoadOp::create(b, loc, i32, at, /*alignment=*/4);
  } else if (auto indexCast = v.getDefiningOp<arith::IndexCastOp>()) {
    // Indices are i32 here: an i32 length cast to an index stays as it is.
    result = replay(b, indexCast.getIn(), emitted);
  } else if (auto dim = gridDimOf(v, forall, /*iv=*/false)) {
    switch (blockOf(*dim)) {
    case 0:
      result = NVVM::GridDimXOp::create(b, loc, i32);
      break;
    case 1:
      result = NVVM::GridDimYOp::create(b, loc, i32);
      break;
    default:
      result = NVVM::GridDimZOp::create(b, loc, i32);
    }
  } else if (std::optional<bool> key = isKeyLength(
                 v, forall->getParentOfType<func::FuncOp>())) {
    result = *key ? seqK : seqQ;
  } else if (auto constant = v.getDefiningOp<arith::ConstantOp>()) {
    result = arith::ConstantIntOp::create(
        b, loc, constant.getType().isIndex() ? i32 : b.getI1Type(),
        cast<IntegerAttr>(constant.getValue()).getInt());
  } else {
    // Index arithmetic (matchGradKeyGrid checked it): the same op in i32.
    Operation *def = v.getDefiningOp();
    SmallVector<Value> operands;
    for (Value operand : def->getOperands())
      operands.push_back(replay(b, operand, emitted));
    result = cloneIndexOpAsI32(b, loc, def, operands);
  }
  emitted[v] = result;
  return result;
}

std::unique_ptr<GradKeyGridReplay>
mlir::fa3::detail::replayGradKeyGrid(const GradKeyGrid &grid) {
  return std::make_unique<TileGradKeyGridReplay>(grid);
}
