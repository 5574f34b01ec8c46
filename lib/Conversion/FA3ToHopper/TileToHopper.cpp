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
// Register fragments: each consumer warpgroup owns 64 rows of the query
// tile; a thread holds two of them (lane / 4 and lane / 4 + 8 of its warp's
// 16). An f32 [R, C] tile is C / 2 registers a thread (the wgmma
// accumulator layout), a [R] statistics tile 2. A running row sum stays per
// thread (a quarter of its row) until fa3.finalize reduces it.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Transforms/Passes.h"
#include "fa3/Dialect/FA3/Utils/GridMapping.h"
#include "fa3/Dialect/FA3/Utils/Philox.h"

#include "HopperCodegen.h"
#include "TileKernel.h"

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

/// The named barriers of pingpong: consumer warpgroup w waits on
/// kPingpongBarrier + w (0 is __syncthreads').
static constexpr int64_t kPingpongBarrier = 1;
/// The named barrier of consumer warpgroup w's O epilogue (its 128 threads'
/// shared-memory writes before the TMA store): kEpilogueBarrier + w.
static constexpr int64_t kEpilogueBarrier = 3;

//===----------------------------------------------------------------------===//
// Emitting the kernel
//===----------------------------------------------------------------------===//

namespace {

class TileKernelEmitter : public HopperCodegen {
public:
  TileKernelEmitter(OpBuilder &b, TileKernel &kernel,
                    const HopperAttentionSpec &spec)
      : HopperCodegen(b, kernel.func.getLoc(), spec.bf16, spec.fp8), k(kernel),
        s(spec) {}

  LLVM::LLVMFuncOp emit(gpu::GPUModuleOp module);

private:
  /// One consumer warpgroup `wg` (0-based among the consumers): its 64
  /// query rows' key loop and the epilogue, for the current tile.
  void emitConsumer(Value wg);
  /// Pingpong: a consumer's wgmmas of one turn are issued between
  /// takeTurn() and passTurn(), so the two warpgroups' GEMMs alternate.
  /// Both named barriers count 256 threads: 128 waiting plus 128 arriving.
  void takeTurn();
  void passTurn();
  /// fa3.qk reading the key tile of ring use `use`: S = Q Kᵀ, both from
  /// shared memory; `waitFull` unless the tile is known to have landed.
  SmallVector<Value> issueQK(Value use, bool waitFull);
  /// One fa3.online_softmax step of this thread's two rows: P, the new
  /// max m and sum l, and the correction alpha of the old statistics.
  struct SoftmaxStep {
    SmallVector<Value> p;
    Value m[2], l[2], alpha[2];
  };
  /// fa3.online_softmax `op` on the (masked) S fragment `sv`, from the
  /// rows' running max `mOld` and sum `lOld`.
  SoftmaxStep onlineSoftmax(OnlineSoftmaxOp op, ArrayRef<Value> sv,
                            ArrayRef<Value> mOld, ArrayRef<Value> lOld);
  /// P as the A operand of fa3.pv: the S accumulator, pairwise converted,
  /// is the A fragment of m64nDk16 (k-chunk k holds S registers 8k ..
  /// 8k+7), so P never goes through shared memory.
  ///
  /// FP8 (e4m3 V, fa3.pv's probs_scale s): the e4m3 A fragment of k-chunk
  /// c (32 keys): register i holds 4 keys of row r (i even) or r + 8 (i
  /// odd), keys 4t..4t+3 (i < 2) or 16+4t..16+4t+3. The S registers 16c ..
  /// 16c+15 hold keys {2t, 2t+1} + 8j instead; V' stores its keys permuted
  /// to match (the layout kernel), so the bytes are taken in register
  /// order (P · s already, see onlineSoftmax).
  SmallVector<Value> packProbs(ArrayRef<Value> p);
  /// fa3.pv reading the value tile of ring use `use`: O += P V (`packed`
  /// from packProbs), V read MN-major from shared memory.
  SmallVector<Value> issuePV(ArrayRef<Value> packed, SmallVector<Value> o,
                             Value use, bool waitFull);
  /// Once the wgmma reading ring use `use` completed: release its key
  /// (`value` false) or value slot. With a producer warpgroup that is all;
  /// otherwise warp 0 refills the slot with key block iteration `it` +
  /// stages (`it` is the plain loop's iteration, `load` the IR's load of
  /// the tile).
  void releaseSlot(bool value, Value use, Value it, KeyValueTileLoad load);
  /// fa3.softcap on the S fragment.
  SmallVector<Value> softcapFragment(SoftcapOp softcap,
                                     SmallVector<Value> sAcc);
  /// fa3.rescale on the O fragment `o` by each row's correction `alpha`
  /// (`lazy`: most corrections are 1; see the definition).
  SmallVector<Value> rescaleFragment(SmallVector<Value> o,
                                     ArrayRef<Value> alpha, bool lazy);
  /// The masking scf.if around fa3.mask on the S fragment, for the key
  /// block whose IR induction variable is `iv`.
  SmallVector<Value> maskScores(scf::IfOp maskIf, MaskOp mask,
                                SmallVector<Value> sAcc, Value iv);
  /// fa3.dropout on the P fragment of the key block at `iv`.
  SmallVector<Value> dropoutFragment(DropoutOp drop, SmallVector<Value> p,
                                     Value iv);
  /// Pingpong's turns, where fa3-pingpong placed them: running on across a
  /// persistent CTA's tiles, or restarting at every tile
  /// (s.pingpongPerTile), consumer 0 waiting for consumer 1's last turn
  /// before its epilogue. Where `isFirst` (consumer 0): its arrive on its
  /// own pingpong barrier, the turn that goes first (`arrive`), or its
  /// closing wait, which takes consumer 1's last turn so that every barrier
  /// phase completes.
  void firstConsumerTurn(Value isFirst, bool arrive);
  /// The key loop's range, from the IR: iteration `it` (0-based) of a tile
  /// is key block blockLo + it and uses ring slot (ringBase + it) % stages.
  Value keyBlockOf(Value it) { return add(blockLo, it); }
  /// `op` (isKernelScalar) in i32 with `operands`.
  Value emitScalar(Operation *op, ArrayRef<Value> operands);
  /// The i32 value of kernel-level index `v` (defined outside the key loop).
  Value scalar(Value v) { return scalars.lookup(v); }
  /// Index `v` of the key loop's body for the iteration with induction
  /// variable `iv`: its defining ops replayed from the IR, memoized in
  /// `local` (one map per emitted iteration).
  Value replay(Value v, Value iv, DenseMap<Value, Value> &local);
  /// The K/V ring's mbarriers, one of each kind per stage. K and V have
  /// their own "empty" barriers: a K slot is released as soon as the QKᵀ
  /// reading it completed, so the producer loads the key tile of block
  /// i + stages while block i's softmax and PV still run (a slot shared by
  /// K and V would free K only after PV, leaving the load too little time
  /// before its QKᵀ; FA3 keeps two pipelines for the same reason).
  /// The kernel's mbarrier rings (fa3.ring_* ops, in this order in shared
  /// memory): Q full per Q tile, the K/V ring's four, and (persistent) Q
  /// empty per Q tile.
  enum Ring {
    kQueryFull,
    kKeyFull,
    kValueFull,
    kKeyEmpty,
    kValueEmpty,
    kQueryEmpty
  };
  /// Thread 0: the TMA load of the IR's key or value tile `load` as ring use
  /// `use`, at the load's coordinates with the key loop's induction
  /// variable at `iv`.
  void issueTile(KeyValueTileLoad load, Value use, Value iv);
  /// fa3.load_tile of Q: the TMA load of the Q tile of Q use `use` at
  /// (batch, row, head), completing on its full barrier.
  void loadQueryTile(Value use, Value batch, Value row, Value head);
  /// The producer region's ops in `block` (emitProducerBlock in the .cpp
  /// says how), with the IR values of `scope` already emitted.
  void emitProducerBlock(Block &block, DenseMap<Value, Value> &scope);
  /// fa3.finalize and the two parallel stores of consumer warpgroup `wg`,
  /// from `results` (the key structure's m, l and O fragments, in that
  /// order) and its Q tile `qBuffer` (where O is staged for the TMA store),
  /// at the consumer thread's rowInTile and colInBlock.
  void emitFinalizeAndStores(ArrayRef<Value> results, Value wg, Value qBuffer);
  /// fa3.parallel_store_tile of O (`inv`: each row's 1 / l): through
  /// shared memory and a TMA store.
  void emitOutputEpilogue(ArrayRef<Value> results, Value inv[2], Value wg,
                          Value qBuffer);
  /// The same for a split's f32 partial O: direct global stores.
  void storePartialOutput(ArrayRef<Value> results, Value inv[2]);
  /// A packed batch's O rows [wgRow, end) of consumer warpgroup `wg`, from
  /// the O tile at `oTile` (staged for the TMA store) to global memory.
  void copyOutputRows(Value oTile, Value wg, Value wgRow, Value end);
  /// fa3.parallel_store_stats of the rows' LSE.
  void emitLseStore(Value lse[2]);
  /// The same for the IR coordinates `rowIR`, `headIR`, `batchIR` of a key
  /// (`value` false) or value tile, replayed with `local`.
  void issueTileAt(bool value, Value use, Value rowIR, Value headIR,
                   Value batchIR, Value iv, DenseMap<Value, Value> &local);

  TileKernel &k;
  const HopperAttentionSpec &s;
  DenseMap<Value, Value> scalars;

  Value tmaQ, tmaK, tmaV, tmaO, lsePtr, seqQ, seqK, batch;
  /// A split-KV kernel's f32 partial O (in the O tensor map's place).
  Value partialOutPtr;
  /// The arguments the IR reads with tensor.extract, by number: a KV
  /// cache's cache_seqlens (argument 3), a packed batch's cu_seqlens_q,
  /// cu_seqlens_k and seqused_k (3, 4, 5), an FP8 kernel's f32 [B, Hkv]
  /// descales (3, 4, 5); global pointers.
  DenseMap<unsigned, Value> extractedArguments;
  /// A packed batch's kernel: O as a plain pointer, for the rows of a
  /// warpgroup that ends past its sequence (the TMA store writes whole
  /// 64-row boxes).
  Value outPtr;
  /// A paged cache's kernel: the page table (global i32 [B, tableWidth]),
  /// the page size and the rows of each TMA box (gcd(page size, blockN)).
  Value pageTablePtr, tableWidth, pageSize, chunkRows;
  /// Persistent: the launch's tile counter (global i32, zero at launch) and
  /// the tile the producer is loading.
  Value tileCounter, currentTile;
  /// Dropout: the Philox key and offset words, loaded at the kernel's entry
  /// from its last parameter (the (seed, offset) i64 [2]).
  DropoutGenerator dropoutGen;
  /// This thread's index in the CTA, lane in its warp, warp in its
  /// warpgroup, and whether it is thread 0 (the producer's issuing thread).
  Value tid, lane, warp, isThread0;
  /// The consumer thread being emitted (emitConsumer): its two rows in the
  /// tile (rowInTile and rowInTile + 8) and the first of its column pairs
  /// in each 8-column block of a fragment.
  Value rowInTile, colInBlock;
  /// The consumer warpgroup being emitted, the other one (pingpong's
  /// turns) and the address of its 64 rows of the Q tile.
  Value consumerWg, otherConsumerWg, qWarpgroupAddr;
  /// The current tile's key loop: its first key block and how many.
  Value blockLo, numBlocks;
  /// Which use of the Q tiles and of the K/V ring the current tile makes:
  /// its number among this CTA's tiles, and the ring iterations before it.
  Value qUse, ringBase;
  /// Shared memory: the Q tiles, the K ring, the V ring, the O tile
  /// (separateOutputTile()), then the mbarriers: Q full per Q tile, the
  /// ring's, and (persistent) Q empty per Q tile.
  int64_t offK = 0, offV = 0, offO = 0, offBar = 0;
  /// The slots of ring `ring`: the Q tiles or the K/V stages.
  int64_t ringStages(Ring ring) const {
    return ring == kQueryFull || ring == kQueryEmpty ? s.queryBuffers()
                                                     : s.stages;
  }
  /// The first mbarrier of each ring, at the kernel's entry.
  SmallVector<Value> ringFirstBarrier;
  void placeRings() {
    int64_t offset = offBar;
    for (int ring = kQueryFull; ring <= kQueryEmpty; ++ring) {
      ringFirstBarrier.push_back(smemAt(ci(offset)));
      offset += 8 * ringStages(static_cast<Ring>(ring));
    }
  }
  Value firstBarrierOf(Ring ring) { return ringFirstBarrier[ring]; }
  /// Waits for use `use` of ring `ring` (fa3.ring_wait): with `previous`,
  /// for the release of the slot's previous use.
  void ringWait(Ring ring, Value use, bool previous = false) {
    RingWaitOp::create(b, loc, firstBarrierOf(ring), use, ringStages(ring),
                       previous);
  }
  void ringArrive(Ring ring, Value use) {
    RingArriveOp::create(b, loc, firstBarrierOf(ring), use, ringStages(ring));
  }
  Value ringBarrier(Ring ring, Value use) {
    return RingBarrierOp::create(b, loc, smemPtr, firstBarrierOf(ring), use,
                                 ringStages(ring));
  }
  /// The Q tile of Q use `use` (the tile's place among this CTA's tiles).
  Value queryBufferOf(Value use) { return remu(use, ci(s.queryBuffers())); }
  /// The K/V ring slot of ring use `use` (its key blocks counted across
  /// this CTA's tiles).
  Value ringSlotOf(Value use) { return remu(use, ci(s.stages)); }
  /// Persistent: the index of the tile Q tile `buffer` holds (or the end
  /// index), an i32 slot after the mbarriers.
  Value tileSlot(Value buffer) {
    int64_t barriers = 2 * s.queryBuffers() + 4 * s.stages;
    return smemAt(add(ci(offBar + 8 * barriers), mul(buffer, ci(4))));
  }
  /// Bytes of a Q, K or V tile of `rows` rows (V' of FP8: D rows of
  /// `rows` keys, the same bytes).
  int64_t tileBytes(int64_t rows) const {
    return rows * s.elementBytes() * s.headDim;
  }
  /// Bytes of an O tile of `rows` rows: O is 16-bit (bf16 for FP8).
  int64_t outputTileBytes(int64_t rows) const { return rows * 2 * s.headDim; }
  /// Bytes of a swizzle atom's row in the Q and K tiles: 128, or 64 for
  /// e4m3 at D = 64 (the 64-byte swizzle).
  int64_t rowAtom() const {
    return std::min<int64_t>(kAtomBytes, s.headDim * s.elementBytes());
  }
  /// The operand types of the IR's scalar code: indices, i1, the i32
  /// lengths of a KV cache and an FP8 kernel's f32 descales.
  static bool isScalarType(Type t) {
    return t.isIndex() || t.isInteger(1) || t.isInteger(32) || t.isF32();
  }
  /// PackGQA: query tile row `r` is query r / G of head r % G (relative to
  /// the tile's first query and head); unpacked, query r of one head.
  Value queryOfRow(Value r) {
    return s.packedHeads > 1 ? divu(r, ci(s.packedHeads)) : r;
  }
  Value headOfRow(Value r) { return remu(r, ci(s.packedHeads)); }
  /// The head coordinate of a Q or O tile op for the tile's first query
  /// head `head`: packed, its key/value head (the [B, S, H / G, G, D]
  /// view's group).
  Value tmaHead(Value head) {
    return s.packedHeads > 1 ? divu(head, ci(s.packedHeads)) : head;
  }
  IntegerAttr packedHeadsAttr() {
    return s.packedHeads > 1 ? b.getI64IntegerAttr(s.packedHeads)
                             : IntegerAttr();
  }
  /// A K-major wgmma descriptor of a Q or K tile at `addr`: 8-row groups
  /// of one atom row each.
  Value qkDescriptor(Value addr) {
    return descriptor(addr, 16, 8 * rowAtom(), rowAtom());
  }
};

} // namespace

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
  int64_t bytes = tileBytes(s.blockN);
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
  // kernel writes it), as the D rows of the tile's keys.
  TmaLoadTileOp::create(b, loc, value ? tmaV : tmaK, row, head, batch, smem,
                        tile, bar, s.blockN, s.headDim, s.elementBytes(),
                        /*packed_heads=*/IntegerAttr(),
                        /*transposed=*/value && s.fp8);
}

void TileKernelEmitter::emitFinalizeAndStores(ArrayRef<Value> results, Value wg,
                                              Value qBuffer) {
  // fa3.finalize: O / l and LSE = scale · m + ln(l). FP8 (descales): the
  // max is in raw units (scale · qk_descale) and O is v_descale · O / l;
  // P, its row sum l and with them O are kept times fa3.pv's probs_scale s
  // (the softmax's exp2 adds log2 s), so O / l needs no correction and the
  // LSE subtracts ln s.
  Value lseScale = cf(k.finalize.getScale().convertToFloat());
  Value outScale = cf(1.0f);
  float lnOffset = 0.0f;
  if (Value qkDescale = k.finalize.getQkDescale()) {
    lseScale = fmul(lseScale, scalar(qkDescale));
    outScale = scalar(k.finalize.getVDescale());
    lnOffset = std::log(k.keys.pv.getProbsScaleAttr().getValueAsDouble());
  }
  Value inv[2], lse[2];
  for (int64_t row = 0; row < 2; ++row)
    std::tie(inv[row], lse[row]) = finalizeRow(
        results[row], results[2 + row], [&] { return outScale; },
        [&] { return lseScale; }, lnOffset);

  if (s.numSplits > 1) {
    storePartialOutput(results, inv);
    // Persistent with one Q tile: the consumers are done with it.
    if (s.persistent && !s.separateOutputTile())
      ringArrive(kQueryEmpty, qUse);
  } else {
    emitOutputEpilogue(results, inv, wg, qBuffer);
  }
  emitLseStore(lse);
}

void TileKernelEmitter::storePartialOutput(ArrayRef<Value> results,
                                           Value inv[2]) {
  // A split's f32 partial O, straight from the fragment: each thread's
  // pairs of columns as 8-byte stores (a quad's 4 lanes write 32
  // contiguous bytes of a row), rows past Sq dropped. The partials are
  // read once, by the combine kernel.
  ParallelStoreTileOp storeO = k.storeOutput;
  auto oType = cast<RankedTensorType>(storeO.getDest().getType());
  int64_t heads = oType.getDimSize(2);
  Value batchOf = scalar(storeO.getBatch());
  for (int64_t row = 0; row < 2; ++row) {
    Value inTile = add(rowInTile, ci(8 * row));
    Value query = add(scalar(storeO.getRow()), queryOfRow(inTile));
    Value head = scalar(storeO.getHead());
    if (s.packedHeads > 1)
      head = add(head, headOfRow(inTile));
    scf::IfOp::create(
        b, loc, cmp(arith::CmpIPredicate::slt, query, seqQ),
        [&](OpBuilder &, Location) {
          Value rowIndex =
              add(mul(add(mul(sext64(batchOf), sext64(seqQ)), sext64(query)),
                      cl(heads)),
                  sext64(head));
          Value rowElem = mul(rowIndex, cl(s.headDim));
          for (int64_t j = 0; j < s.headDim / 8; ++j) {
            int64_t r = 4 * j + 2 * row;
            auto v2f32 = VectorType::get({2}, f32);
            Value pair = LLVM::UndefOp::create(b, loc, v2f32);
            pair = LLVM::InsertElementOp::create(
                b, loc, pair, fmul(results[4 + r], inv[row]), ci(0));
            pair = LLVM::InsertElementOp::create(
                b, loc, pair, fmul(results[4 + r + 1], inv[row]), ci(1));
            Value col = add(ci(8 * j), colInBlock);
            Value ptr =
                LLVM::GEPOp::create(b, loc, globalPtr, f32, partialOutPtr,
                                    ValueRange{add(rowElem, zext64(col))});
            LLVM::StoreOp::create(b, loc, pair, ptr, /*alignment=*/8);
          }
          scf::YieldOp::create(b, loc);
        });
  }
}

void TileKernelEmitter::emitOutputEpilogue(ArrayRef<Value> results,
                                           Value inv[2], Value wg,
                                           Value qBuffer) {
  // Through shared memory and a TMA store: each thread writes its packed O
  // pairs into this warpgroup's 64 rows of the O tile where the kernel has
  // one (separateOutputTile), else of the Q tile (dead once the
  // warpgroup's last QKᵀ completed; the other warpgroups' QKᵀs read only
  // their own rows), in the 128-byte swizzle the Q load wrote (16-byte
  // chunk c of row r at c ^ (r % 8)), then one thread stores the 64 rows
  // per swizzle atom. TMA drops the rows past Sq, and a warp's 32 stores
  // hit 32 distinct banks. Stored directly from the fragment, each warp
  // store covered 8 rows with 16 bytes each: half of every 32-byte sector
  // (ncu, d128 causal 1k: 16.1 of 32 bytes).
  ParallelStoreTileOp storeO = k.storeOutput;
  bool ownTile = s.separateOutputTile();
  Value oTile = ownTile ? ci(offO) : mul(qBuffer, ci(tileBytes(s.blockM)));
  if (ownTile) {
    // The O tile of this CTA's previous tile: its TMA store must have read
    // this warpgroup's rows before they are written again.
    Value wgLeader = cmp(arith::CmpIPredicate::eq, remu(tid, ci(128)), ci(0));
    scf::IfOp::create(b, loc, wgLeader, [&](OpBuilder &, Location) {
      NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, 0, b.getUnitAttr());
      scf::YieldOp::create(b, loc);
    });
    namedBarrierSync(add(wg, ci(kEpilogueBarrier)), 128);
  }
  Value chunkSwizzle = divu(lane, ci(4));
  for (int64_t row = 0; row < 2; ++row) {
    Value rowOffset = mul(add(rowInTile, ci(8 * row)), ci(kAtomBytes));
    for (int64_t j = 0; j < s.headDim / 8; ++j) {
      int64_t r = 4 * j + 2 * row;
      Value packed = pack(fmul(results[4 + r], inv[row]),
                          fmul(results[4 + r + 1], inv[row]));
      int64_t atom = j / (kAtomCols / 8), chunk = j % (kAtomCols / 8);
      Value byte =
          add(add(add(oTile, ci(atom * s.blockM * kAtomBytes)), rowOffset),
              add(mul(xori(ci(chunk), chunkSwizzle), ci(16)),
                  mul(colInBlock, ci(2))));
      LLVM::StoreOp::create(b, loc, packed, smemAt(byte), /*alignment=*/4);
    }
  }
  fenceProxyAsyncShared();
  namedBarrierSync(add(wg, ci(kEpilogueBarrier)), 128);
  // The warpgroup's first query (64 rows: 64 / G queries packed).
  Value wgRow = add(scalar(storeO.getRow()), mul(wg, ci(64 / s.packedHeads)));
  auto tmaStore = [&] {
    // This warpgroup's 64 rows of each atom of the O tile.
    TmaStoreTileOp::create(
        b, loc, tmaO, wgRow, tmaHead(scalar(storeO.getHead())),
        scalar(storeO.getBatch()), smem,
        add(oTile, mul(wg, ci(64 * kAtomBytes))),
        /*rows=*/64, s.headDim, /*element_bytes=*/2,
        /*atom_stride=*/s.blockM * kAtomBytes, packedHeadsAttr());
    NVVM::CpAsyncBulkCommitGroupOp::create(b, loc);
    // The Q tile is reused (the next load into it, or the CTA's exit)
    // only after the TMA engine has read it. An O tile of its own is
    // waited for before its next write (above) and at the end.
    if (!ownTile)
      NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, 0, b.getUnitAttr());
  };
  if (!s.varlen) {
    Value storer =
        andi(cmp(arith::CmpIPredicate::eq, remu(tid, ci(128)), ci(0)),
             cmp(arith::CmpIPredicate::slt, wgRow, seqQ));
    scf::IfOp::create(b, loc, storer, [&](OpBuilder &, Location) {
      tmaStore();
      scf::YieldOp::create(b, loc);
    });
  } else {
    // A packed sequence's rows end at the store's limit, which a 64-row TMA
    // box cannot stop at: a warpgroup whose rows all lie inside the
    // sequence stores them with TMA, the one that crosses its end copies
    // the rows inside from the O tile (16 bytes a thread per step).
    Value end = minsi(scalar(storeO.getLimit()), seqQ);
    scf::IfOp::create(
        b, loc,
        cmp(arith::CmpIPredicate::sle, add(wgRow, ci(64 / s.packedHeads)), end),
        [&](OpBuilder &, Location) {
          Value leader =
              cmp(arith::CmpIPredicate::eq, remu(tid, ci(128)), ci(0));
          scf::IfOp::create(b, loc, leader, [&](OpBuilder &, Location) {
            tmaStore();
            scf::YieldOp::create(b, loc);
          });
          scf::YieldOp::create(b, loc);
        },
        [&](OpBuilder &, Location) {
          copyOutputRows(oTile, wg, wgRow, end);
          scf::YieldOp::create(b, loc);
        });
  }
  // Persistent with O staged in the Q tile: this warpgroup is done with
  // the Q tile (its QKᵀs completed, its O rows read by the TMA store), so
  // the producer may load the next tile's Q into it.
  if (s.persistent && !ownTile)
    ringArrive(kQueryEmpty, qUse);
}

void TileKernelEmitter::copyOutputRows(Value oTile, Value wg, Value wgRow,
                                       Value end) {
  // Chunk c of the warpgroup's 64 rows (D / 8 chunks of 16 bytes a row,
  // 128 threads a step) is row c / (D / 8), column chunk c % (D / 8): in the
  // O tile at its atom's row, with the 128-byte swizzle the stores above
  // wrote (16-byte chunk j of row r at j ^ (r % 8)). Packed (PackGQA), row
  // r is query r / G of head r % G from the warpgroup's first.
  ParallelStoreTileOp storeO = k.storeOutput;
  int64_t heads =
      cast<RankedTensorType>(storeO.getDest().getType()).getDimSize(2);
  int64_t chunksPerRow = s.headDim / 8, chunksPerAtom = kAtomBytes / 16;
  Value thread = remu(tid, ci(128));
  Value batchOf = scalar(storeO.getBatch()), head = scalar(storeO.getHead());
  auto v4i32 = VectorType::get({4}, i32);
  for (int64_t step = 0; step < 64 * chunksPerRow / 128; ++step) {
    Value chunk = add(thread, ci(128 * step));
    Value r = divu(chunk, ci(chunksPerRow));
    Value col = remu(chunk, ci(chunksPerRow));
    Value query = add(wgRow, queryOfRow(r));
    Value rowHead = s.packedHeads > 1 ? add(head, headOfRow(r)) : head;
    scf::IfOp::create(
        b, loc, cmp(arith::CmpIPredicate::slt, query, end),
        [&](OpBuilder &, Location) {
          Value atom = divu(col, ci(chunksPerAtom));
          Value inAtom = remu(col, ci(chunksPerAtom));
          Value byte = add(add(add(oTile, mul(atom, ci(s.blockM * kAtomBytes))),
                               mul(add(mul(wg, ci(64)), r), ci(kAtomBytes))),
                           mul(xori(inAtom, remu(r, ci(8))), ci(16)));
          Value data = LLVM::LoadOp::create(b, loc, v4i32, smemAt(byte),
                                            /*alignment=*/16);
          // O[batch, query, head, 8 · col] of [B, Sq, H, D], in bytes.
          Value rowIndex =
              add(mul(add(mul(sext64(batchOf), sext64(seqQ)), sext64(query)),
                      cl(heads)),
                  sext64(rowHead));
          Value offset =
              mul(add(mul(rowIndex, cl(s.headDim)), zext64(mul(col, ci(8)))),
                  cl(2));
          Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, b.getI8Type(),
                                          outPtr, ValueRange{offset});
          LLVM::StoreOp::create(b, loc, data, ptr, /*alignment=*/16);
          scf::YieldOp::create(b, loc);
        });
  }
}

void TileKernelEmitter::emitLseStore(Value lse[2]) {
  // fa3.parallel_store_stats: LSE entries past Sq are dropped.
  ParallelStoreStatsOp storeL = k.storeLse;
  auto lType = cast<RankedTensorType>(storeL.getDest().getType());
  int64_t lHeads = lType.getDimSize(1);
  Value lBatch = scalar(storeL.getBatch());
  Value lHeadBase = scalar(storeL.getHead());
  // A packed sequence's entries end at its end.
  Value end = storeL.getLimit() ? minsi(scalar(storeL.getLimit()), seqQ) : seqQ;
  for (int64_t row = 0; row < 2; ++row) {
    Value inTile = add(rowInTile, ci(8 * row));
    Value lRow = add(scalar(storeL.getRow()), queryOfRow(inTile));
    Value lHead =
        s.packedHeads > 1 ? add(lHeadBase, headOfRow(inTile)) : lHeadBase;
    // LSE[b, h, row] at (b * Hq + h) * Sq + row, from one lane per row.
    Value lane0 = cmp(arith::CmpIPredicate::eq, remu(lane, ci(4)), ci(0));
    scf::IfOp::create(
        b, loc, andi(lane0, cmp(arith::CmpIPredicate::slt, lRow, end)),
        [&](OpBuilder &, Location) {
          Value idx =
              add(mul(add(mul(sext64(lBatch), cl(lHeads)), sext64(lHead)),
                      sext64(seqQ)),
                  sext64(lRow));
          Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, f32, lsePtr,
                                          ValueRange{idx});
          LLVM::StoreOp::create(b, loc, lse[row], ptr, /*alignment=*/4);
          scf::YieldOp::create(b, loc);
        });
  }
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
                        packedHeadsAttr(), /*transposed=*/false);
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
  offO = offV + s.stages * tileBytes(s.blockN);
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

/// fa3.softcap on the S fragment.
SmallVector<Value> TileKernelEmitter::softcapFragment(SoftcapOp softcap,
                                                      SmallVector<Value> sAcc) {
  float scale = softcap.getScale().convertToFloat();
  float cap = softcap.getSoftcap().convertToFloat();
  Value in = cf(scale / cap), out = cf(cap / scale);
  // FP8: raw scores, the scale times the descale on both sides.
  if (Value descale = softcap.getDescale()) {
    in = fmul(in, scalar(descale));
    out = arith::DivFOp::create(b, loc, out, scalar(descale));
  }
  for (Value &v : sAcc)
    v = fmul(ptxUnary("tanh.approx.f32 $0, $1;", fmul(v, in)), out);
  return sAcc;
}

/// fa3.rescale: O times each row's correction. Under lazy rescaling
/// (`lazy`) most corrections are exactly 1, and a thread whose two rows
/// both kept their max branches around the multiplies; a warp skips them
/// when all its threads do (nO multiplies on the path from the softmax to
/// the P V wgmma).
SmallVector<Value> TileKernelEmitter::rescaleFragment(SmallVector<Value> o,
                                                      ArrayRef<Value> alpha,
                                                      bool lazy) {
  int64_t nO = s.headDim / 2;
  auto scaled = [&] {
    SmallVector<Value> acc = o;
    for (int64_t r = 0; r < nO; ++r)
      acc[r] = fmul(acc[r], alpha[(r % 4) / 2]);
    return acc;
  };
  if (!lazy)
    return scaled();
  auto moved = [&](int64_t row) {
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, alpha[row],
                                 cf(1.0f));
  };
  auto branch = scf::IfOp::create(b, loc, SmallVector<Type>(nO, f32),
                                  ori(moved(0), moved(1)),
                                  /*addElseBlock=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(branch.thenBlock());
  scf::YieldOp::create(b, loc, scaled());
  b.setInsertionPointToStart(branch.elseBlock());
  scf::YieldOp::create(b, loc, o);
  return SmallVector<Value>(branch.getResults());
}

/// The masking scf.if around fa3.mask, for the key block whose IR
/// induction variable is `iv`: everything the mask reads is replayed
/// before its branch.
SmallVector<Value> TileKernelEmitter::maskScores(scf::IfOp maskIf, MaskOp mask,
                                                 SmallVector<Value> sAcc,
                                                 Value iv) {
  DenseMap<Value, Value> local;
  Value needMask = replay(maskIf.getCondition(), iv, local);
  Value qStart = replay(mask.getQStart(), iv, local);
  Value kStart = replay(mask.getKStart(), iv, local);
  Value qLen = replay(mask.getQLen(), iv, local);
  Value kLen = replay(mask.getKLen(), iv, local);
  Value offset = sub(kLen, qLen);
  auto [left, right] = resolveWindow(mask.getCausal(), mask.getWindow());
  Value rows[2] = {add(qStart, queryOfRow(rowInTile)),
                   add(qStart, queryOfRow(add(rowInTile, ci(8))))};
  return maskFragment(sAcc, needMask, [&](int64_t r) {
    Value col = add(add(kStart, ci((r / 4) * 8 + r % 2)), colInBlock);
    return keyHidden(rows[(r % 4) / 2], col, kLen, offset, left, right);
  });
}

/// fa3.dropout on the P fragment. This thread's S registers 8f .. 8f + 7
/// are rows {r, r + 8} × key columns {c, c + 1, c + 8, c + 9} of one
/// Philox group (r = rowInTile, c = colInBlock + 16f): register 8f + 4·ch
/// + 2·rh + e (row half rh, column half ch, column parity e) takes half e
/// of word 2·rh + ch. One call for eight registers.
SmallVector<Value> TileKernelEmitter::dropoutFragment(DropoutOp drop,
                                                      SmallVector<Value> p,
                                                      Value iv) {
  int64_t nS = s.blockN / 2;
  DenseMap<Value, Value> local;
  Value qStart = replay(drop.getQStart(), iv, local);
  Value kStart = replay(drop.getKStart(), iv, local);
  Value stream = replay(drop.getStream(), iv, local);
  DropoutConstants constants =
      DropoutConstants::of(drop.getP().convertToFloat());
  Value threshold = ci(static_cast<int32_t>(constants.threshold)),
        scale = cf(constants.scale);
  Value row = add(qStart, rowInTile);
  for (int64_t f = 0; f < nS / 8; ++f) {
    Value col = add(add(kStart, colInBlock), ci(16 * f));
    std::array<Value, 4> words =
        buildDropoutGroupWords(b, loc, dropoutGen, row, col, stream);
    for (int64_t w = 0; w < 4; ++w)
      for (int64_t e = 0; e < 2; ++e) {
        int64_t reg = 8 * f + 4 * (w % 2) + 2 * (w / 2) + e;
        Value keep = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::uge,
            dropoutHalf(b, loc, words[w], /*high=*/e == 1), threshold);
        p[reg] = select(keep, fmul(p[reg], scale), cf(0));
      }
  }
  return p;
}

/// One consumer warpgroup `wg` (0-based among the consumers): its 64 query
/// rows' key loop, emitted from the IR op by op, and the epilogue.
void TileKernelEmitter::takeTurn() {
  if (s.pingpong)
    namedBarrierSync(add(consumerWg, ci(kPingpongBarrier)), 256);
}

void TileKernelEmitter::passTurn() {
  if (s.pingpong)
    namedBarrierArrive(add(otherConsumerWg, ci(kPingpongBarrier)), 256);
}

SmallVector<Value> TileKernelEmitter::issueQK(Value use, bool waitFull) {
  int64_t nS = s.blockN / 2;
  Value stage = ringSlotOf(use);
  if (waitFull)
    ringWait(kKeyFull, use);
  Value kTileAddr =
      add(add(smemAddr(smem), ci(offK)), mul(stage, ci(tileBytes(s.blockN))));
  SmallVector<Value> sAcc(nS, cf(0));
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  // One wgmma K step is 32 bytes of an atom row for either type.
  int64_t stepsPerAtom = rowAtom() / 32;
  for (int64_t kk = 0; kk < s.headDim / mmaK(); ++kk) {
    int64_t atom = kk / stepsPerAtom, inAtom = (kk % stepsPerAtom) * 32;
    Value a = qkDescriptor(
        add(qWarpgroupAddr, ci(atom * s.blockM * rowAtom() + inAtom)));
    Value bd =
        qkDescriptor(add(kTileAddr, ci(atom * s.blockN * rowAtom() + inAtom)));
    sAcc = wgmmaSS(sAcc, a, bd, /*accumulate=*/kk > 0);
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  return sAcc;
}

TileKernelEmitter::SoftmaxStep
TileKernelEmitter::onlineSoftmax(OnlineSoftmaxOp op, ArrayRef<Value> sv,
                                 ArrayRef<Value> mOld, ArrayRef<Value> lOld) {
  float negInf = -std::numeric_limits<float>::infinity();
  int64_t nS = s.blockN / 2;
  // FP8: fa3.pv's probs_scale s (a power of two). P enters the e4m3
  // wgmma as P · s; the softmax computes that product in its exp2 (log2 s
  // added to the exponent: no multiply per element), and its row sum, the
  // accumulator and l carry the same factor (emitFinalizeAndStores).
  float probsScale = 1.0f;
  if (FloatAttr attr = k.keys.pv.getProbsScaleAttr())
    probsScale = attr.getValueAsDouble();
  float probsLog2Offset = std::log2(probsScale);
  // Rows 0 and 1 of this thread; a row's values sit in the 4 lanes of a
  // quad. The sum stays per thread until fa3.finalize. The row max and
  // sum reduce as balanced trees (depth log2(block_n / 4) instead of a
  // chain of block_n / 4 dependent ops: this sits between the QKᵀ and
  // PV wgmmas), and c·x − c·m is one fma.
  float exp2Scale = op.getExp2Scale().convertToFloat();
  Value cLog2 = cf(exp2Scale), negCLog2 = cf(-exp2Scale);
  // FP8: raw scores, c = exp2_scale · q_descale · k_descale.
  if (Value descale = op.getDescale()) {
    cLog2 = fmul(cLog2, scalar(descale));
    negCLog2 = fmul(negCLog2, scalar(descale));
  }
  SoftmaxStep step;
  Value negMScaled[2];
  SmallVector<Value> rowValues[2];
  for (int64_t r = 0; r < nS; ++r)
    rowValues[(r % 4) / 2].push_back(sv[r]);
  std::optional<int64_t> threshold = op.getRescaleThreshold();
  for (int64_t row = 0; row < 2; ++row) {
    Value mx = fmax(mOld[row], treeReduce(rowValues[row], /*isMax=*/true));
    step.m[row] = quadReduce(mx, /*isMax=*/true);
    // Lazy rescaling keeps the old max while c·(m' − m) <= τ (never
    // after -inf: +inf and NaN fail <=), with a correction of exactly 1,
    // which the accumulator's rescale tests for.
    Value keep;
    if (threshold) {
      Value growth = fmul(fsub(step.m[row], mOld[row]), cLog2);
      keep = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, growth,
                                   cf(float(*threshold)));
      step.m[row] = select(keep, mOld[row], step.m[row]);
    }
    Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                        step.m[row], cf(negInf));
    negMScaled[row] = fmul(select(empty, cf(0), step.m[row]), negCLog2);
    step.alpha[row] = exp2(fma(mOld[row], cLog2, negMScaled[row]));
    if (keep)
      step.alpha[row] = select(keep, cf(1.0f), step.alpha[row]);
  }
  step.p.resize(nS);
  SmallVector<Value> rowProbs[2];
  Value probsBase[2] = {negMScaled[0], negMScaled[1]};
  if (probsLog2Offset != 0.0f)
    for (Value &base : probsBase)
      base = fadd(base, cf(probsLog2Offset));
  for (int64_t r = 0; r < nS; ++r) {
    int64_t row = (r % 4) / 2;
    step.p[r] = exp2(fma(sv[r], cLog2, probsBase[row]));
    rowProbs[row].push_back(step.p[r]);
  }
  for (int64_t row = 0; row < 2; ++row)
    step.l[row] = fma(lOld[row], step.alpha[row],
                      treeReduce(rowProbs[row], /*isMax=*/false));
  return step;
}

SmallVector<Value> TileKernelEmitter::packProbs(ArrayRef<Value> p) {
  SmallVector<Value> packed;
  if (!s.fp8) {
    for (int64_t kk = 0; kk < s.blockN / 16; ++kk)
      packed.append(packAFragment(p, kk));
    return packed;
  }
  for (int64_t c = 0; c < s.blockN / 32; ++c) {
    int64_t base = 16 * c;
    auto q = [&](int64_t i) { return p[base + i]; };
    packed.append({packE4M3(q(0), q(1), q(4), q(5)),
                   packE4M3(q(2), q(3), q(6), q(7)),
                   packE4M3(q(8), q(9), q(12), q(13)),
                   packE4M3(q(10), q(11), q(14), q(15))});
  }
  return packed;
}

SmallVector<Value> TileKernelEmitter::issuePV(ArrayRef<Value> packed,
                                              SmallVector<Value> o, Value use,
                                              bool waitFull) {
  Value stage = ringSlotOf(use);
  if (waitFull)
    ringWait(kValueFull, use);
  Value vTileAddr =
      add(add(smemAddr(smem), ci(offV)), mul(stage, ci(tileBytes(s.blockN))));
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  for (int64_t kk = 0; kk < s.blockN / mmaK(); ++kk) {
    // 16-bit: V MN-major, 16 keys (rows of 128-byte atoms) a step. FP8:
    // V'ᵀ K-major (D rows of 128-key atoms, or of 64 keys where block_n
    // is not whole 128-key atoms), 32 keys = 32 bytes a step.
    const int64_t vAtom = valueTransposeAtomKeys(s.blockN);
    Value bd = s.fp8
                   ? descriptor(add(vTileAddr,
                                    ci((kk / (vAtom / 32)) * s.headDim * vAtom +
                                       (kk % (vAtom / 32)) * 32)),
                                16, 8 * vAtom, vAtom)
                   : descriptor(add(vTileAddr, ci(kk * 16 * kAtomBytes)),
                                s.blockN * kAtomBytes, 1024);
    o = wgmmaRS(o, ArrayRef<Value>(packed).slice(4 * kk, 4), bd);
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  return o;
}

void TileKernelEmitter::releaseSlot(bool value, Value use, Value it,
                                    KeyValueTileLoad load) {
  Ring empty = value ? kValueEmpty : kKeyEmpty;
  ringArrive(empty, use);
  if (s.warpSpecialized())
    return;
  Value next = add(it, ci(s.stages));
  Value refill = andi(cmp(arith::CmpIPredicate::ult, tid, ci(32)),
                      cmp(arith::CmpIPredicate::slt, next, numBlocks));
  scf::IfOp::create(b, loc, refill, [&](OpBuilder &, Location) {
    ringWait(empty, use);
    scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
      issueTile(load, add(use, ci(s.stages)), keyBlockOf(next));
      scf::YieldOp::create(b, loc);
    });
    scf::YieldOp::create(b, loc);
  });
}

void TileKernelEmitter::emitConsumer(Value wg) {
  Value qBuffer = queryBufferOf(qUse);
  ringWait(kQueryFull, qUse);

  // This thread's two rows in the tile and the first of its column pairs
  // in each 8-column block.
  rowInTile = add(add(mul(wg, ci(64)), mul(warp, ci(16))), divu(lane, ci(4)));
  colInBlock = mul(remu(lane, ci(4)), ci(2));

  Value qTileAddr = add(smemAddr(smem), mul(qBuffer, ci(tileBytes(s.blockM))));
  qWarpgroupAddr = add(qTileAddr, mul(wg, ci(64 * rowAtom())));

  // The pingpong turns' warpgroups (takeTurn, passTurn).
  consumerWg = wg;
  otherConsumerWg = sub(ci(1), wg);

  //===------------------------------------------------------------------===//
  // The key loop, op by op. Each tile value of the IR has its fragment:
  // f32 registers of S, P, O (C / 2 a thread for [R, C]) and of the row
  // statistics (2 a thread); P also packed as the A operand of fa3.pv; a
  // K/V tile its use number of the ring (tiles are read in the order the
  // producer fills the ring, so the n-th key tile the consumer reads is
  // ring use ringBase + n). wgmma groups complete in commit order: a
  // result is waited for (wgmma.wait_group with the groups committed
  // after it still pending) right before its first use, and the ring
  // slot a group read is released right after that wait.
  //===------------------------------------------------------------------===//
  DenseMap<Value, SmallVector<Value>> regs, packed;
  DenseMap<Value, Value> ringUse;
  // The ring use number of the next key and value tile.
  Value nextUse[2] = {ringBase, ringBase};
  struct Group {
    bool value;
    Value use, it;
    KeyValueTileLoad load;
  };
  SmallVector<Group> groups;
  DenseMap<Value, int64_t> producedBy;
  int64_t completed = 0;
  auto commit = [&](Value result, Value tile, Value it) {
    auto load = KeyValueTileLoad::of(tile);
    producedBy[result] = groups.size();
    groups.push_back({load.source == k.value, ringUse.lookup(tile), it, load});
  };
  auto completeUpTo = [&](int64_t group) {
    if (group < completed)
      return;
    NVVM::WgmmaWaitGroupSyncOp::create(
        b, loc, static_cast<int64_t>(groups.size()) - 1 - group);
    for (; completed <= group; ++completed) {
      Group &g = groups[completed];
      releaseSlot(g.value, g.use, g.it, g.load);
    }
  };
  auto completeAll = [&] {
    completeUpTo(static_cast<int64_t>(groups.size()) - 1);
  };
  // The f32 registers of `v`: a splat constant's, or those an op made
  // (waiting for the wgmma that makes them).
  auto fragment = [&](Value v) -> SmallVector<Value> {
    if (auto found = producedBy.find(v); found != producedBy.end())
      completeUpTo(found->second);
    if (std::optional<float> splat = splatValue(v)) {
      auto type = cast<RankedTensorType>(v.getType());
      return SmallVector<Value>(
          type.getRank() == 1 ? 2 : type.getDimSize(1) / 2, cf(*splat));
    }
    return regs.lookup(v);
  };
  // The registers a loop carries or an scf.if returns for `v`, which is
  // P (packed), a row statistic or O; `flatten` lists them P first, then
  // the statistics, then O, so the kernel's loops carry
  // (P, m, l, O) registers in that order.
  auto isProbs = [](Value v) {
    auto softmax = v.getDefiningOp<OnlineSoftmaxOp>();
    return softmax && softmax.getProbs() == v;
  };
  auto rankOf = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getRank();
  };
  // Order of `values` (indices) for flattening.
  auto carryOrder = [&](ValueRange values) {
    SmallVector<unsigned> order;
    for (int pass = 0; pass < 3; ++pass)
      for (auto [i, v] : llvm::enumerate(values)) {
        int kind = isProbs(v) ? 0 : rankOf(v) == 1 ? 1 : 2;
        if (kind == pass)
          order.push_back(i);
      }
    return order;
  };
  auto packedProbs = [&](Value probs) {
    if (!packed.count(probs))
      packed[probs] = packProbs(regs.lookup(probs));
    return packed.lookup(probs);
  };
  auto flatten = [&](ValueRange values, ArrayRef<unsigned> order) {
    SmallVector<Value> flat;
    for (unsigned i : order)
      flat.append(isProbs(values[i]) ? packedProbs(values[i])
                                     : fragment(values[i]));
    return flat;
  };
  // Maps `targets` (loop iter_args or results) to the registers `flat`
  // holds for `sources` (the values they take) in `order`.
  auto unflatten = [&](ValueRange targets, ValueRange sources,
                       ArrayRef<unsigned> order, ValueRange flat) {
    size_t at = 0;
    for (unsigned i : order) {
      size_t n = isProbs(sources[i]) ? packed.lookup(sources[i]).size()
                                     : fragment(sources[i]).size();
      SmallVector<Value> part(flat.begin() + at, flat.begin() + at + n);
      at += n;
      if (isProbs(sources[i]))
        packed[targets[i]] = part;
      else
        regs[targets[i]] = part;
    }
  };

  // The K/V tiles whose full barrier this code already waited on (the
  // first MMA of a pingpong turn waits before the turn starts).
  DenseSet<Value> landed;
  auto waitFull = [&](Value tile) { return landed.insert(tile).second; };

  // Emits the tile ops of `block`. `iv` is what the IR's key loop
  // induction variable is in this code (null outside the loop), `it` the
  // emitted loop's iteration (for the ring refill).
  std::function<void(Block &, Value, Value)> emitBlock;
  std::function<void(Operation &, Value, Value)> emitOp = [&](Operation &op,
                                                              Value iv,
                                                              Value it) {
    if (isKernelScalar(&op, k.func) ||
        (op.getNumResults() == 1 && splatValue(op.getResult(0))))
      return;
    if (isa<LoadTileOp, LoadPagedTileOp>(op)) {
      auto load = KeyValueTileLoad::of(op.getResult(0));
      bool value = load.source == k.value;
      ringUse[load.result] = nextUse[value];
      nextUse[value] = add(nextUse[value], ci(1));
    } else if (auto qk = dyn_cast<QKOp>(op)) {
      regs[qk.getResult()] =
          issueQK(ringUse.lookup(qk.getKey()), waitFull(qk.getKey()));
      commit(qk.getResult(), qk.getKey(), it);
    } else if (auto softcap = dyn_cast<SoftcapOp>(op)) {
      regs[softcap.getResult()] =
          softcapFragment(softcap, fragment(softcap.getScores()));
    } else if (auto ifOp = dyn_cast<scf::IfOp>(op);
               ifOp && ifOp.getNumResults() == 1) {
      auto mask = cast<scf::YieldOp>(ifOp.thenBlock()->getTerminator())
                      .getOperand(0)
                      .getDefiningOp<MaskOp>();
      regs[ifOp.getResult(0)] =
          maskScores(ifOp, mask, fragment(mask.getScores()), iv);
    } else if (auto softmaxOp = dyn_cast<OnlineSoftmaxOp>(op)) {
      SoftmaxStep step = onlineSoftmax(
          softmaxOp, fragment(softmaxOp.getScores()),
          fragment(softmaxOp.getRowMax()), fragment(softmaxOp.getRowSum()));
      // P carried to a later block's PV (the rotated loop) is
      // packed here, as the loop carries it; P read by a PV of this
      // block is packed there, after the rescale. FP8 packs carried P
      // where the loop yields it (flatten), after this block's wait for
      // the previous PV: its e4m3 packing otherwise overwrote registers
      // that PV's wgmmas were still reading, and ptxas serialized them.
      Value probs = softmaxOp.getProbs();
      regs[probs] = step.p;
      if (!s.fp8 && llvm::any_of(probs.getUsers(), [&](Operation *user) {
            return !isa<PVOp, DropoutOp>(user) ||
                   user->getBlock() != op.getBlock();
          }))
        packed[probs] = packProbs(step.p);
      regs[softmaxOp.getNewMax()] = {step.m[0], step.m[1]};
      regs[softmaxOp.getNewSum()] = {step.l[0], step.l[1]};
      regs[softmaxOp.getCorrection()] = {step.alpha[0], step.alpha[1]};
    } else if (auto drop = dyn_cast<DropoutOp>(op)) {
      regs[drop.getResult()] =
          dropoutFragment(drop, fragment(drop.getProbs()), iv);
    } else if (auto rescale = dyn_cast<RescaleOp>(op)) {
      SmallVector<Value> o = fragment(rescale.getAcc());
      SmallVector<Value> alpha = fragment(rescale.getCorrection());
      regs[rescale.getResult()] =
          rescaleFragment(o, alpha, s.rescaleThreshold > 0);
    } else if (auto pv = dyn_cast<PVOp>(op)) {
      SmallVector<Value> acc = fragment(pv.getAcc());
      if (!packed.count(pv.getProbs()))
        packed[pv.getProbs()] = packProbs(regs.lookup(pv.getProbs()));
      regs[pv.getResult()] =
          issuePV(packed.lookup(pv.getProbs()), acc,
                  ringUse.lookup(pv.getValue()), waitFull(pv.getValue()));
      commit(pv.getResult(), pv.getValue(), it);
    } else if (auto turn = dyn_cast<MmaTurnOp>(op)) {
      // fa3-pingpong's turn: once the first MMA's tile has landed,
      // wait for this warpgroup's turn, issue the body's wgmmas and
      // pass the turn on (no warpgroup holds the turn waiting for
      // TMA).
      Block &body = turn.getBody().front();
      auto ops = body.without_terminator();
      auto firstMma = llvm::find_if(
          ops, [](Operation &inner) { return isa<QKOp, PVOp>(inner); });
      for (Operation &inner : llvm::make_range(ops.begin(), firstMma))
        emitOp(inner, iv, it);
      Value tile = isa<QKOp>(*firstMma) ? cast<QKOp>(*firstMma).getKey()
                                        : cast<PVOp>(*firstMma).getValue();
      ringWait(isa<QKOp>(*firstMma) ? kKeyFull : kValueFull,
               ringUse.lookup(tile));
      landed.insert(tile);
      takeTurn();
      for (Operation &inner : llvm::make_range(firstMma, ops.end()))
        emitOp(inner, iv, it);
      passTurn();
      // The turn's results are its body's values.
      for (auto [result, value] :
           llvm::zip(turn.getResults(),
                     cast<YieldOp>(body.getTerminator()).getValues())) {
        if (auto found = producedBy.find(value); found != producedBy.end()) {
          int64_t group = found->second;
          producedBy[result] = group;
        }
        if (regs.count(value)) {
          SmallVector<Value> values = regs.lookup(value);
          regs[result] = values;
        }
      }
    } else if (auto guard = dyn_cast<scf::IfOp>(op)) {
      // The rotated loop's non-empty test.
      completeAll();
      SmallVector<unsigned> order = carryOrder(guard.thenYield().getOperands());
      ValueRange elseValues = guard.elseYield().getOperands();
      SmallVector<Value> elseFlat = flatten(elseValues, order);
      auto emitted = scf::IfOp::create(
          b, loc, TypeRange(SmallVector<Type>(elseFlat.size(), f32)),
          cmp(arith::CmpIPredicate::sgt, numBlocks, ci(0)),
          /*addElseBlock=*/true);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(emitted.thenBlock());
        emitBlock(*guard.thenBlock(), iv, it);
        b.setInsertionPointToStart(emitted.elseBlock());
        scf::YieldOp::create(b, loc, elseFlat);
      }
      unflatten(guard.getResults(), elseValues, order, emitted.getResults());
    } else if (auto loop = dyn_cast<scf::ForOp>(op)) {
      // The key loop: plain (iterations 0 .. numBlocks) or rotated
      // (0 .. numBlocks - 1 inside the guard); iteration i is the
      // IR's block lo + i.
      completeAll();
      bool isRotated = loop->hasAttr(kOverlappedKeyLoopAttrName);
      ValueRange inits = loop.getInitArgs();
      SmallVector<unsigned> order = carryOrder(
          cast<scf::YieldOp>(loop.getBody()->getTerminator()).getOperands());
      SmallVector<Value> flatInits = flatten(inits, order);
      Value before[2] = {nextUse[0], nextUse[1]};
      Value trip = isRotated ? sub(numBlocks, ci(1)) : numBlocks;
      auto emitted = scf::ForOp::create(
          b, loc, ci(0), trip, ci(1), flatInits,
          [&](OpBuilder &, Location, Value i, ValueRange iters) {
            unflatten(loop.getRegionIterArgs(), inits, order, iters);
            nextUse[0] = add(before[0], i);
            nextUse[1] = add(before[1], i);
            emitBlock(*loop.getBody(), keyBlockOf(i), i);
          });
      nextUse[0] = add(before[0], trip);
      nextUse[1] = add(before[1], trip);
      unflatten(loop.getResults(), inits, order, emitted.getResults());
    } else if (auto yield = dyn_cast<scf::YieldOp>(op)) {
      completeAll();
      scf::YieldOp::create(
          b, loc,
          flatten(yield.getOperands(), carryOrder(yield.getOperands())));
    } else {
      llvm_unreachable("convert-fa3-tile-to-hopper matched the key "
                       "loop's ops");
    }
  };
  emitBlock = [&](Block &block, Value iv, Value it) {
    for (Operation &op : block)
      emitOp(op, iv, it);
  };

  // Turns per tile (pingpongPerTile): consumer 0 goes first.
  Value firstPerTile =
      s.pingpongPerTile ? cmp(arith::CmpIPredicate::eq, wg, ci(0)) : Value();
  if (firstPerTile)
    firstConsumerTurn(firstPerTile, /*arrive=*/true);

  // The key structure (the plain loop, or the rotated loop's guard) is
  // the only op of the forall body the walk needs; its results are
  // (O, m, l).
  Operation *keyStructure =
      k.keys.guard ? k.keys.guard.getOperation() : k.keys.loop.getOperation();
  emitOp(*keyStructure, Value(), Value());
  ValueRange keyResults = k.keys.results();
  SmallVector<Value> results = fragment(keyResults[1]);
  results.append(fragment(keyResults[2]));
  results.append(fragment(keyResults[0]));

  // Persistent with an O tile of its own: this tile's QKᵀ wgmmas have
  // all completed (each was waited for), so the producer may load the
  // next tile's Q into this Q tile.
  if (s.persistent && s.separateOutputTile())
    ringArrive(kQueryEmpty, qUse);

  // Per tile, consumer 0's closing wait comes before its epilogue.
  if (firstPerTile)
    firstConsumerTurn(firstPerTile, /*arrive=*/false);

  emitFinalizeAndStores(results, wg, qBuffer);
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
