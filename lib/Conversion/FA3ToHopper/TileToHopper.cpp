//===- TileToHopper.cpp - Tile-level kernel functions to sm_90a -----------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Converts a kernel function at the tile level (what fa3-tile{grid=true} and
// fa3-fuse-softmax make of an outlined fa3.attention) into an LLVM/NVVM
// kernel, from the parts TileKernelMatch.cpp found (TileKernel.h). A
// backward's function (three grids sharing a dQ accumulator) instead gives
// the spec its grids read as (TileGradKernelMatch.cpp), from which the
// backward kernel builder (HopperGradKernelBuilder.cpp) writes its three
// kernels; the rest of this comment is the forward's. What the
// kernel computes comes from the IR: the grid from the
// scf.forall and its #gpu.block mapping, the tile shapes from the tile ops,
// the key range from the key loop's bounds, the TMA coordinates from the
// fa3.load_tile indices, which key blocks are masked from the scf.if around
// fa3.mask and what it hides from the mask's operands, the scales from
// fa3.softcap, fa3.online_softmax and fa3.finalize, the store coordinates
// from the parallel stores. All index arithmetic of the IR is emitted as is
// (in i32); nothing of it is recomputed here. The consumers' key loop is
// emitted op by op in IR order, plain or as fa3-intra-wg-overlap rotated
// it, with each wgmma result waited for right before its first use;
// fa3-pingpong's fa3.mma_turn ops become named-barrier turns and
// fa3-warp-specialize's producer region the producer warpgroup's TMA loads.
// How the kernel computes the rest comes from the function's
// #fa3.schedule: the K/V ring depth; the persistent tile loop comes from
// fa3-persistent-grid's #fa3.persistent_block mapping of the grid.
// e4m3 tiles (an FP8 kernel) take the descales the IR reads, e4m3 wgmma
// and V through V' (the layout kernel's transposed copy).
//
// The emitter's methods live by concern (TileKernelEmitter.h); this file
// has the kernel's skeleton, the IR's scalar code, the producer's loads and
// the pass.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Dialect/FA3/Utils/GridMapping.h"

#include "TileKernelEmitter.h"

#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <limits>

namespace mlir::fa3 {
#define GEN_PASS_DEF_CONVERTFA3TILETOHOPPER
#include "fa3/Conversion/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

Value TileKernelEmitter::emitScalar(Operation *op, ArrayRef<Value> operands) {
  // Indices are i32 here: an i32 length cast to an index stays as it is.
  if (isa<arith::IndexCastOp>(op))
    return operands[0];
  if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
    // cache_seqlens[b], cu_seqlens_q[b], q_descale[b, h], ...: one load from
    // the kernel's pointer parameter (the static inner dims of a 2-D
    // argument linearize the index).
    auto arg = cast<BlockArgument>(extract.getTensor());
    auto type = cast<RankedTensorType>(arg.getType());
    Value index = operands[0];
    for (int64_t d = 1; d < type.getRank(); ++d)
      index = add(mul(index, ci(type.getDimSize(d))), operands[d]);
    Type elt = type.getElementType();
    Value ptr = LLVM::GEPOp::create(
        b, loc, globalPtr, elt, extractedArguments.lookup(arg.getArgNumber()),
        ValueRange{index});
    return LLVM::LoadOp::create(b, loc, elt, ptr, /*alignment=*/4);
  }
  if (auto dim = dyn_cast<tensor::DimOp>(op)) {
    // Dim 1 of Q is Sq, of K and V Sk (of a paged cache its page size, of
    // the page table its width); dim 0 is the batch (the tile level reads
    // no page count). A packed batch's dim 0 of Q is Tq, of K and V Tk, of
    // cu_seqlens B + 1 and of seqused_k B.
    auto arg = cast<BlockArgument>(dim.getSource());
    int64_t index = *dim.getConstantIndex();
    if (s.varlen) {
      if (index != 0)
        return ci(cast<RankedTensorType>(arg.getType()).getDimSize(index));
      switch (arg.getArgNumber()) {
      case 0:
        return seqQ;
      case 1:
      case 2:
        return seqK;
      case 3:
      case 4:
        return add(batch, ci(1));
      default:
        return batch;
      }
    }
    if (index == 0)
      return batch;
    if (index == 1) {
      if (arg.getArgNumber() == 0)
        return seqQ;
      if (s.paged)
        return arg.getArgNumber() == 4 ? tableWidth : pageSize;
      return seqK;
    }
    return ci(cast<RankedTensorType>(arg.getType()).getDimSize(index));
  }
  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    int64_t value = cast<IntegerAttr>(constant.getValue()).getInt();
    return constant.getType().isIndex()
               ? ci(value)
               : arith::ConstantIntOp::create(b, loc, i1, value).getResult();
  }
  return cloneIndexOpAsI32(b, loc, op, operands);
}

Value TileKernelEmitter::replay(Value v, Value iv,
                                DenseMap<Value, Value> &local) {
  if (v == k.keys.loop.getInductionVar())
    return iv;
  if (Value known = scalars.lookup(v))
    return known;
  if (Value known = local.lookup(v))
    return known;
  Operation *def = v.getDefiningOp();
  SmallVector<Value> operands;
  for (Value operand : def->getOperands())
    if (isScalarType(operand.getType()))
      operands.push_back(replay(operand, iv, local));
  Value result = emitScalar(def, operands);
  local[v] = result;
  return result;
}

void TileKernelEmitter::issueTile(KeyValueTileLoad load, Value use, Value iv) {
  DenseMap<Value, Value> local;
  issueTileAt(load.source == k.value, use, load.row, load.head, load.batch, iv,
              local);
}

void TileKernelEmitter::issueTileAt(bool value, Value use, Value rowIR,
                                    Value headIR, Value batchIR, Value iv,
                                    DenseMap<Value, Value> &local) {
  int64_t bytes = value ? valueTileBytes() : tileBytes(s.blockN);
  Value stage = ringSlotOf(use);
  Value bar = ringBarrier(value ? kValueFull : kKeyFull, use);
  Value row = replay(rowIR, iv, local);
  Value head = replay(headIR, iv, local);
  Value batch = replay(batchIR, iv, local);
  Value tile = add(ci(value ? offV : offK), mul(stage, ci(bytes)));
  if (s.paged) {
    // `row` is the position in the batch's sequence, read through the
    // page table.
    TmaLoadPagedTileOp::create(b, loc, value ? tmaV : tmaK, row, head, batch,
                               pageTablePtr, tableWidth, pageSize, chunkRows,
                               smem, tile, bar, s.blockN, s.headDim,
                               /*element_bytes=*/2);
    return;
  }
  // FP8 reads V through V' [B, Hkv, D, Sk] (keys innermost; the layout
  // kernel writes it), as the D rows of the tile's keys (in atoms of
  // valueTileRows() rows: the rows of ones follow, fillRowSumRows).
  bool transposed = value && s.fp8;
  TmaLoadTileOp::create(b, loc, value ? tmaV : tmaK, row, head, batch, smem,
                        tile, bar, s.blockN, s.headDim, s.elementBytes(),
                        /*packed_heads=*/IntegerAttr(), transposed,
                        /*atom_rows=*/transposed && s.rowSumByMma()
                            ? b.getI64IntegerAttr(s.valueTileRows())
                            : IntegerAttr());
}

/// fa3.load_tile of Q into the Q tile of Q use `use`, at the given
/// coordinates.
void TileKernelEmitter::loadQueryTile(Value use, Value batch, Value row,
                                      Value head) {
  Value buffer = queryBufferOf(use);
  Value bar = ringBarrier(kQueryFull, use);
  Value tile = mul(buffer, ci(tileBytes(s.blockM)));
  TmaLoadTileOp::create(b, loc, tmaQ, row, tmaHead(head), batch, smem, tile,
                        bar, s.blockM, s.headDim, s.elementBytes(),
                        packedHeadsAttr(), /*transposed=*/false,
                        /*atom_rows=*/IntegerAttr());
}

/// The producer region of fa3.warp_specialize, op by op: its loops and
/// branches, each fa3.ring_fill a TMA load into its ring. Index arithmetic
/// is replayed where a fill, branch or loop reads it; `scope` maps the IR
/// values already emitted where this block's code goes (the enclosing loops'
/// induction variables and what the enclosing blocks replayed before it), so
/// each is computed once.
void TileKernelEmitter::emitProducerBlock(Block &block,
                                          DenseMap<Value, Value> &scope) {
  for (Operation &op : block) {
    if (auto fillOp = dyn_cast<RingFillOp>(op)) {
      if (!fillOp.getUse()) {
        // The query tile. Persistent: a Q tile is reloaded once every
        // consumer thread is done with its previous use. With two Q
        // tiles that use belongs to the tile before last, so this
        // tile's Q loads while the consumers still compute the last
        // one.
        if (s.persistent) {
          ringWait(kQueryEmpty, qUse, /*previous=*/true);
          LLVM::StoreOp::create(b, loc, currentTile,
                                tileSlot(queryBufferOf(qUse)), 4);
        }
        loadQueryTile(qUse, replay(fillOp.getBatch(), Value(), scope),
                      replay(fillOp.getRow(), Value(), scope),
                      replay(fillOp.getHead(), Value(), scope));
        continue;
      }
      // Ring use u = ringBase + use goes into slot u % stages once
      // the consumers have released that slot's previous use
      // (u - stages).
      bool value = fillOp.getSource() == k.value;
      Value use = add(ringBase, replay(fillOp.getUse(), Value(), scope));
      ringWait(value ? kValueEmpty : kKeyEmpty, use, /*previous=*/true);
      issueTileAt(value, use, fillOp.getRow(), fillOp.getHead(),
                  fillOp.getBatch(), Value(), scope);
    } else if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
      Value cond = replay(ifOp.getCondition(), Value(), scope);
      scf::IfOp::create(b, loc, cond, [&](OpBuilder &, Location) {
        DenseMap<Value, Value> inner = scope;
        emitProducerBlock(*ifOp.thenBlock(), inner);
        scf::YieldOp::create(b, loc);
      });
    } else if (auto forOp = dyn_cast<scf::ForOp>(op)) {
      Value lb = replay(forOp.getLowerBound(), Value(), scope);
      Value ub = replay(forOp.getUpperBound(), Value(), scope);
      Value step = replay(forOp.getStep(), Value(), scope);
      scf::ForOp::create(b, loc, lb, ub, step, ValueRange(),
                         [&](OpBuilder &, Location, Value i, ValueRange) {
                           DenseMap<Value, Value> inner = scope;
                           inner[forOp.getInductionVar()] = i;
                           emitProducerBlock(*forOp.getBody(), inner);
                           scf::YieldOp::create(b, loc);
                         });
    }
  }
}

void TileKernelEmitter::firstConsumerTurn(Value isFirst, bool arrive) {
  scf::IfOp::create(b, loc, isFirst, [&](OpBuilder &, Location) {
    if (arrive)
      namedBarrierArrive(ci(kPingpongBarrier), 256);
    else
      namedBarrierSync(ci(kPingpongBarrier), 256);
    scf::YieldOp::create(b, loc);
  });
}

void TileKernelEmitter::fillRowSumRows() {
  // Every byte is the same (0x38 = e4m3 1.0), so the atoms' swizzle does
  // not matter: the rows are whole 16-byte chunks.
  const int64_t vAtom = valueTransposeAtomKeys(s.blockN);
  const int64_t atoms = s.blockN / vAtom;
  const int64_t chunksPerAtom = s.kRowSumRows * vAtom / 16;
  const int64_t chunks = s.stages * atoms * chunksPerAtom;
  auto v4i32 = VectorType::get({4}, i32);
  Value ones = LLVM::ConstantOp::create(
      b, loc, v4i32, DenseElementsAttr::get(v4i32, int32_t(0x38383838)));
  scf::ForOp::create(
      b, loc, tid, ci(chunks), ci(s.numThreads()), ValueRange(),
      [&](OpBuilder &, Location, Value chunk, ValueRange) {
        Value atom = divu(chunk, ci(chunksPerAtom));
        Value byte = add(add(ci(offV + s.headDim * vAtom),
                             mul(atom, ci(s.valueTileRows() * vAtom))),
                         mul(remu(chunk, ci(chunksPerAtom)), ci(16)));
        LLVM::StoreOp::create(b, loc, ones, smemAt(byte), /*alignment=*/16);
        scf::YieldOp::create(b, loc);
      });
  fenceProxyAsyncShared();
}

LLVM::LLVMFuncOp TileKernelEmitter::emit(gpu::GPUModuleOp module) {
  MLIRContext *ctx = b.getContext();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  declareDynamicSmem(module);

  // Q/K/V/O tensor maps (O in boxes of 64 rows: one consumer warpgroup's),
  // LSE, Sq, Sk, B, the tile counter (persistent kernels; zero at launch)
  // and, for a KV cache, cache_seqlens (Sk is then the cache's rows).
  // A paged cache's kernel adds the page table, its width, the page size
  // and the chunk rows.
  SmallVector<Type> params = {genericPtr, genericPtr, genericPtr,
                              genericPtr, globalPtr,  i32,
                              i32,        i32,        globalPtr};
  // Split-KV: the f32 partial O is stored through a plain pointer.
  bool split = s.numSplits > 1;
  if (split)
    params[3] = globalPtr;
  if (s.kvCache)
    params.push_back(globalPtr);
  // A paged cache: the page table, its width, the page size, the chunk rows.
  if (s.paged)
    params.append({globalPtr, i32, i32, i32});
  // A packed batch: cu_seqlens_q, cu_seqlens_k, O as a plain pointer and
  // seqused_k.
  if (s.varlen)
    params.append({globalPtr, globalPtr, globalPtr});
  if (s.sequsedK)
    params.push_back(globalPtr);
  // FP8: the q, k and v descales, f32 [B, Hkv].
  if (s.fp8)
    params.append({globalPtr, globalPtr, globalPtr});
  // Dropout: the Philox (seed, offset), i64 [2].
  if (s.dropout > 0)
    params.push_back(globalPtr);
  auto fnType =
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), params);
  auto fn = LLVM::LLVMFuncOp::create(b, loc, k.func.getSymName(), fnType);
  fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  // The exact block size (.reqntid) instead of a bound (.maxntid) changes
  // how ptxas allocates registers around setmaxnreg. At 512 threads (three
  // consumer warpgroups and the producer) it then allocates the consumers'
  // code within their 160 registers instead of the 128 a thread has at
  // entry (the d64 192 x 128 tile with intra-warpgroup overlap spilled 24
  // bytes under .maxntid, none under .reqntid). At d <= 64 the 384-thread
  // 128 x 128 kernel ran 7% faster with it (H100, 2026-12-07: 427 against
  // 399 TFLOP/s causal at 4k, two alternating rounds). So did the FP8 d128
  // kernel on a plain grid (non-causal 8k, sustained, H100, 2026-12-07:
  // 817-823 -> 839-845 TFLOP/s in four alternating rounds), where the
  // persistent causal d128 kernel lost 5% (805 -> 766) and FP8 d256 did
  // not gain (1107 either way; with lazy rescaling 1138 / 1144 -> 1124 /
  // 1123). Elsewhere the bound stays: bf16 d128 measured the same either
  // way, and at d256 .reqntid made ptxas spill 8 bytes (the varlen kernel
  // with a softcap and a window). The launcher always launches
  // s.numThreads() threads.
  bool exactBlock = s.numThreads() == 512 || s.headDim <= 64 ||
                    (s.fp8 && !s.persistent && s.headDim <= 128);
  fn->setAttr(exactBlock ? NVVM::NVVMDialect::getReqntidAttrName()
                         : NVVM::NVVMDialect::getMaxntidAttrName(),
              b.getDenseI32ArrayAttr({int32_t(s.numThreads()), 1, 1}));
  // setmaxnreg needs the register count at entry, which ptxas derives from
  // the threads and the CTAs per SM: with one consumer warpgroup and the
  // producer (256 threads) it cannot without .minnctapersm and ignores
  // every setmaxnreg (C7508), as the backward's builder found at 384.
  if (s.warpSpecialized() && s.numConsumerWarpgroups() == 1)
    fn->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                b.getI32IntegerAttr(1));
  passTensorMapsByValue(fn, split ? 3 : 4);
  fn.setArgAttr(4, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
  if (split)
    fn.setArgAttr(3, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());

  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  tmaQ = entry->getArgument(0);
  tmaK = entry->getArgument(1);
  tmaV = entry->getArgument(2);
  (split ? partialOutPtr : tmaO) = entry->getArgument(3);
  lsePtr = entry->getArgument(4);
  seqQ = entry->getArgument(5);
  seqK = entry->getArgument(6);
  batch = entry->getArgument(7);
  tileCounter = entry->getArgument(8);
  if (s.kvCache) {
    extractedArguments[3] = entry->getArgument(9);
    fn.setArgAttr(9, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
  }
  if (s.varlen) {
    // O's pointer aliases the O tensor map's memory: no noalias on it.
    for (unsigned i : {9u, 10u})
      fn.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(),
                    b.getUnitAttr());
    extractedArguments[3] = entry->getArgument(9);
    extractedArguments[4] = entry->getArgument(10);
    outPtr = entry->getArgument(11);
    if (s.sequsedK) {
      fn.setArgAttr(12, LLVM::LLVMDialect::getNoAliasAttrName(),
                    b.getUnitAttr());
      extractedArguments[5] = entry->getArgument(12);
    }
  }
  if (s.paged) {
    pageTablePtr = entry->getArgument(10);
    fn.setArgAttr(10, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
    tableWidth = entry->getArgument(11);
    pageSize = entry->getArgument(12);
    chunkRows = entry->getArgument(13);
  }
  if (s.fp8)
    for (unsigned i : {9u, 10u, 11u}) {
      fn.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(),
                    b.getUnitAttr());
      extractedArguments[i - 6] = entry->getArgument(i);
    }
  if (s.dropout > 0) {
    // Read once per CTA, when the kernel runs: a captured launch can have
    // its seed and offset updated in place.
    unsigned rngIndex = fn.getNumArguments() - 1;
    fn.setArgAttr(rngIndex, LLVM::LLVMDialect::getNoAliasAttrName(),
                  b.getUnitAttr());
    dropoutGen = loadDropoutGenerator(entry->getArgument(rngIndex));
  }

  // Kernel-level index arithmetic, in IR order: the function body's and
  // the forall body's (the key loop's is replayed per iteration).
  auto emitKernelScalars = [&](Block &block) {
    for (Operation &op : block.without_terminator()) {
      if (!isKernelScalar(&op, k.func))
        continue;
      SmallVector<Value> operands;
      for (Value operand : op.getOperands())
        if (isScalarType(operand.getType()))
          operands.push_back(scalar(operand));
      scalars[op.getResult(0)] = emitScalar(&op, operands);
    }
  };
  emitKernelScalars(k.func.getBody().front());

  // The grid: the forall's iteration (x, y, z), by the #gpu.block<x/y/z>
  // its dimensions map to, is the block with linear index x + X * (y + Y *
  // z) in the extents X, Y, Z of those dimensions.
  SmallVector<int64_t> blockDims;
  Value extentOf[3];
  ArrayAttr mapping = *k.grid.getMapping();
  SmallVector<OpFoldResult> upperBounds = k.grid.getMixedUpperBound();
  for (auto [dim, ub] : llvm::zip(mapping, upperBounds)) {
    int64_t d = gridDimensionOf(dim);
    blockDims.push_back(d);
    std::optional<int64_t> constant = getConstantIntValue(ub);
    extentOf[d] = constant ? ci(*constant) : scalar(cast<Value>(ub));
  }
  // The forall body's index arithmetic and the key loop's range for the
  // block at `coords` (x, y, z).
  auto enterBlock = [&](ArrayRef<Value> coords) {
    for (auto [iv, d] : llvm::zip(k.grid.getInductionVars(), blockDims))
      scalars[iv] = coords[d];
    emitKernelScalars(*k.grid.getBody());
    blockLo = scalar(k.keys.lo);
    numBlocks = maxsi(sub(scalar(k.keys.hi), blockLo), ci(0));
  };
  if (!s.persistent)
    enterBlock({NVVM::BlockIdXOp::create(b, loc, i32),
                NVVM::BlockIdYOp::create(b, loc, i32),
                NVVM::BlockIdZOp::create(b, loc, i32)});
  // A packed batch: the grid's query blocks cover the longest sequence, and
  // a block at or past its own sequence's end stores nothing (its stores'
  // limit). Its CTA exits at once, every thread alike.
  scf::IfOp active;
  if (s.varlen) {
    DenseMap<Value, Value> local;
    Value row = replay(k.queryLoad.getRow(), Value(), local);
    Value end = replay(k.queryLoad.getLimit(), Value(), local);
    active = scf::IfOp::create(
        b, loc, cmp(arith::CmpIPredicate::slt, row, end),
        [&](OpBuilder &, Location) { scf::YieldOp::create(b, loc); });
    b.setInsertionPoint(active.thenBlock()->getTerminator());
  }
  qUse = ci(0);
  ringBase = ci(0);
  // Persistent: the tiles are dealt out dynamically, in the linear order
  // below X * Y * Z (fa3-order-grid's). The producer thread takes tile
  // blockIdx.x first and then gridDim.x + atomicAdd(counter, 1) (fetched
  // at the start of each tile, so the atomic's latency hides behind it),
  // and writes each tile's index into the slot of the Q tile it loads
  // before the Q load's arrive (which releases it to the consumers'
  // acquiring wait); past the last tile it writes the end index into the
  // next Q tile's slot and arrives without a load. The consumers wait for
  // each Q tile, read its slot and stop at the end index. A CTA that
  // finishes early takes the next tile, as the GPU's own dispatch does for
  // a grid of one CTA per tile; a fixed order lost 9-22% of the makespan
  // on causal grids (bench/model_tile_schedule.py).
  Value numTiles;
  auto enterTile = [&](Value t) {
    Value yz = divu(t, extentOf[0]);
    enterBlock(
        {remu(t, extentOf[0]), remu(yz, extentOf[1]), divu(yz, extentOf[1])});
  };
  auto forEachProducedTile = [&](llvm::function_ref<void()> body) {
    if (!s.persistent)
      return body();
    numTiles = mul(mul(extentOf[0], extentOf[1]), extentOf[2]);
    Value first = NVVM::BlockIdXOp::create(b, loc, i32);
    auto loop = scf::WhileOp::create(
        b, loc, TypeRange{i32, i32, i32}, ValueRange{first, ci(0), ci(0)},
        [&](OpBuilder &, Location, ValueRange args) {
          scf::ConditionOp::create(
              b, loc, cmp(arith::CmpIPredicate::ult, args[0], numTiles), args);
        },
        [&](OpBuilder &, Location, ValueRange args) {
          currentTile = args[0];
          qUse = args[1];
          ringBase = args[2];
          Value taken = LLVM::AtomicRMWOp::create(
              b, loc, LLVM::AtomicBinOp::add, tileCounter, ci(1),
              LLVM::AtomicOrdering::monotonic);
          Value next = add(taken, NVVM::GridDimXOp::create(b, loc, i32));
          enterTile(currentTile);
          body();
          scf::YieldOp::create(
              b, loc,
              ValueRange{next, add(qUse, ci(1)), add(ringBase, numBlocks)});
        });
    // The end: the next Q tile's slot says so, once the consumers released
    // that Q tile.
    Value endUse = loop.getResult(1);
    ringWait(kQueryEmpty, endUse, /*previous=*/true);
    LLVM::StoreOp::create(b, loc, loop.getResult(0),
                          tileSlot(queryBufferOf(endUse)), 4);
    ringArrive(kQueryFull, endUse);
  };
  auto forEachConsumedTile = [&](llvm::function_ref<void()> body) {
    if (!s.persistent)
      return body();
    numTiles = mul(mul(extentOf[0], extentOf[1]), extentOf[2]);
    scf::WhileOp::create(
        b, loc, TypeRange{i32, i32, i32}, ValueRange{ci(0), ci(0)},
        [&](OpBuilder &, Location, ValueRange args) {
          ringWait(kQueryFull, args[0]);
          Value t = LLVM::LoadOp::create(b, loc, i32,
                                         tileSlot(queryBufferOf(args[0])), 4);
          scf::ConditionOp::create(b, loc,
                                   cmp(arith::CmpIPredicate::ult, t, numTiles),
                                   ValueRange{t, args[0], args[1]});
        },
        [&](OpBuilder &, Location, ValueRange args) {
          qUse = args[1];
          ringBase = args[2];
          enterTile(args[0]);
          body();
          scf::YieldOp::create(
              b, loc, ValueRange{add(qUse, ci(1)), add(ringBase, numBlocks)});
        });
  };

  tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value wg = divu(tid, ci(128));
  warp = divu(remu(tid, ci(128)), ci(32));
  lane = remu(tid, ci(32));

  setAlignedDynamicSmem();
  offK = s.queryBuffers() * tileBytes(s.blockM);
  offV = offK + s.stages * tileBytes(s.blockN);
  // The O tile's TMA store (128-byte swizzle) needs 1024-byte alignment,
  // which FP8's 136-row V' atoms of 64 keys (8704 bytes) can break.
  offO = llvm::alignTo(offV + s.stages * valueTileBytes(), 1024);
  offBar = offO + (s.separateOutputTile() ? outputTileBytes(s.blockM) : 0);
  placeRings();

  isThread0 = cmp(arith::CmpIPredicate::eq, tid, ci(0));
  scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
    for (int64_t q = 0; q < s.queryBuffers(); ++q)
      barrierInit(ringBarrier(kQueryFull, ci(q)), 1);
    for (int64_t st = 0; st < s.stages; ++st) {
      barrierInit(ringBarrier(kKeyFull, ci(st)), 1);
      barrierInit(ringBarrier(kValueFull, ci(st)), 1);
      barrierInit(ringBarrier(kKeyEmpty, ci(st)), s.numConsumerThreads());
      barrierInit(ringBarrier(kValueEmpty, ci(st)), s.numConsumerThreads());
    }
    if (s.persistent)
      for (int64_t q = 0; q < s.queryBuffers(); ++q)
        barrierInit(ringBarrier(kQueryEmpty, ci(q)), s.numConsumerThreads());
    NVVM::FenceMbarrierInitOp::create(b, loc);
    scf::YieldOp::create(b, loc);
  });
  if (s.rowSumByMma())
    fillRowSumRows();
  NVVM::Barrier0Op::create(b, loc);

  // Pingpong's turns run on across the consumers' tiles: consumer 0 goes
  // first once (an arrive on its own barrier that its first turn
  // completes), and after the last tile it takes consumer 1's last turn, so
  // both named barriers end with every phase complete. Between tiles
  // nothing else couples the two warpgroups (each stores its own O rows
  // behind a barrier of its own, and the Q tiles and the tile index are
  // released by both), so on a persistent grid one warpgroup's epilogue
  // and next Q Kᵀ overlap the other's last GEMMs instead of both waiting
  // at every tile's end and start.
  // Unless the turns restart at every tile (pingpongPerTile).
  auto pingpongTurns = [&](Value wg, llvm::function_ref<void()> tiles) {
    Value first = s.pingpong && !s.pingpongPerTile
                      ? cmp(arith::CmpIPredicate::eq, wg, ci(0))
                      : Value();
    if (first)
      firstConsumerTurn(first, /*arrive=*/true);
    tiles();
    if (first)
      firstConsumerTurn(first, /*arrive=*/false);
  };

  // The last tile's O store reads the O tile of its own until it is done;
  // shared memory must outlive that.
  auto waitForOutputStore = [&] {
    if (!s.separateOutputTile())
      return;
    Value leader = cmp(arith::CmpIPredicate::eq, remu(tid, ci(128)), ci(0));
    scf::IfOp::create(b, loc, leader, [&](OpBuilder &, Location) {
      NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, 0, b.getUnitAttr());
      scf::YieldOp::create(b, loc);
    });
  };
  if (!s.warpSpecialized()) {
    // Prologue: Q, then the first `stages` key blocks; the consumers refill
    // the ring themselves (see `release`).
    scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
      LoadTileOp query = k.queryLoad;
      loadQueryTile(ci(0), scalar(query.getBatch()), scalar(query.getRow()),
                    scalar(query.getHead()));
      for (int64_t st = 0; st < s.stages; ++st) {
        Value has = cmp(arith::CmpIPredicate::slt, ci(st), numBlocks);
        scf::IfOp::create(b, loc, has, [&](OpBuilder &, Location) {
          issueTile(k.keys.keyLoad, ci(st), keyBlockOf(ci(st)));
          issueTile(k.keys.valueLoad, ci(st), keyBlockOf(ci(st)));
          scf::YieldOp::create(b, loc);
        });
      }
      scf::YieldOp::create(b, loc);
    });
    pingpongTurns(wg, [&] { emitConsumer(wg); });
    waitForOutputStore();
  } else {
    // Warp specialization: warpgroup 0 produces, the others consume. Each
    // side resizes its register file first (setmaxnreg is warpgroup-wide).
    Value isProducer = cmp(arith::CmpIPredicate::eq, wg, ci(0));
    scf::IfOp::create(
        b, loc, isProducer,
        [&](OpBuilder &, Location) {
          NVVM::SetMaxRegisterOp::create(b, loc, s.producerRegs,
                                         NVVM::SetMaxRegisterAction::decrease);
          scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
            forEachProducedTile([&] {
              DenseMap<Value, Value> bound;
              emitProducerBlock(k.warpSpecialize.getProducer().front(), bound);
            });
            scf::YieldOp::create(b, loc);
          });
          scf::YieldOp::create(b, loc);
        },
        [&](OpBuilder &, Location) {
          NVVM::SetMaxRegisterOp::create(b, loc, s.consumerRegs,
                                         NVVM::SetMaxRegisterAction::increase);
          Value consumer = sub(wg, ci(1));
          pingpongTurns(consumer, [&] {
            forEachConsumedTile([&] { emitConsumer(consumer); });
          });
          waitForOutputStore();
          scf::YieldOp::create(b, loc);
        });
  }
  if (active)
    b.setInsertionPointAfter(active);
  LLVM::ReturnOp::create(b, loc, ValueRange());
  return fn;
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {
struct ConvertFA3TileToHopperPass
    : public fa3::impl::ConvertFA3TileToHopperBase<ConvertFA3TileToHopperPass> {
  using Base::Base;

  void runOnOperation() override {
    gpu::GPUModuleOp module = getOperation();
    OpBuilder builder(&getContext());
    SmallVector<func::FuncOp> kernels;
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(kScheduleAttrName))
        kernels.push_back(func);
    for (func::FuncOp func : kernels) {
      // The backward: its three kernels from the spec its grids read as
      // (the kernels take the function's name, so it goes first).
      if (isTileGradKernel(func)) {
        FailureOr<HopperAttentionGradSpec> spec = matchTileGradKernel(func);
        if (failed(spec))
          return signalPassFailure();
        FailureOr<GradKeyGrid> keyGrid = matchGradKeyGrid(func);
        if (failed(keyGrid))
          return signalPassFailure();
        // The function stays until its key grid's coordinates are emitted,
        // under another name.
        func.setSymName((func.getSymName() + ".tile").str());
        buildHopperAttentionGradKernels(builder, module, *spec,
                                        *replayGradKeyGrid(*keyGrid));
        func.erase();
        // The main kernel's replayed floordiv/ceildiv in the add/div/select
        // form arith-to-llvm converts (only there: the patterns fold too,
        // and the module's other kernel functions are still to be matched).
        RewritePatternSet patterns(&getContext());
        arith::populateCeilFloorDivExpandOpsPatterns(patterns);
        auto main = module.lookupSymbol<LLVM::LLVMFuncOp>(spec->kernelName());
        if (failed(applyPatternsGreedily(main, std::move(patterns))))
          return signalPassFailure();
        continue;
      }
      FailureOr<TileKernel> kernel = matchTileKernel(func);
      if (failed(kernel))
        return signalPassFailure();
      FailureOr<HopperAttentionSpec> spec = specOf(*kernel);
      if (failed(spec))
        return signalPassFailure();
      LLVM::LLVMFuncOp fn =
          TileKernelEmitter(builder, *kernel, *spec).emit(module);
      // FP8: the V layout kernel runs first (V' for the transposed loads).
      if (spec->fp8)
        buildValueTransposeKernel(builder, module, *spec,
                                  (func.getSymName() + "_vt").str());
      // Split-KV: fa3.combine_splits is the second kernel.
      if (kernel->combine)
        buildCombineSplitsKernel(builder, module, *spec,
                                 (func.getSymName() + "_combine").str());
      func.erase();
      // The IR's ceildiv/floordiv in the add/div/select form arith-to-llvm
      // converts.
      RewritePatternSet patterns(&getContext());
      arith::populateCeilFloorDivExpandOpsPatterns(patterns);
      if (failed(applyPatternsGreedily(fn, std::move(patterns))))
        return signalPassFailure();
    }
  }
};
} // namespace
