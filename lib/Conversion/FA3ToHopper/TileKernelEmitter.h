//===- TileKernelEmitter.h - The tile-level forward's emitter ---*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The state and steps of convert-fa3-tile-to-hopper's forward kernel: one
// TileKernelEmitter writes one kernel from a matched TileKernel. Its
// methods live by concern: TileToHopper.cpp (the kernel's skeleton, the
// IR's scalar code, the producer's TMA loads, the pass),
// TileKernelConsumer.cpp (a consumer warpgroup's key loop) and
// TileKernelEpilogue.cpp (fa3.finalize and the O and LSE stores).
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_CONVERSION_FA3TOHOPPER_TILEKERNELEMITTER_H
#define FA3_LIB_CONVERSION_FA3TOHOPPER_TILEKERNELEMITTER_H

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Utils/Philox.h"

#include "HopperCodegen.h"
#include "TileKernel.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace mlir::fa3::detail {

/// The named barriers of pingpong: consumer warpgroup w waits on
/// kPingpongBarrier + w (0 is __syncthreads').
constexpr int64_t kPingpongBarrier = 1;
/// The named barrier of consumer warpgroup w's O epilogue (its 128 threads'
/// shared-memory writes before the TMA store): kEpilogueBarrier + w.
constexpr int64_t kEpilogueBarrier = 3;

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
  /// rowSumByMma: every thread writes its share of the rows of e4m3 1.0
  /// after the D rows of each V' atom of each ring slot (TMA never writes
  /// them), then fences them for the async proxy that wgmma reads through;
  /// the kernel's first barrier orders them before any wgmma.
  void fillRowSumRows();
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
  /// Bytes of a V tile (V' of FP8: valueTileRows() rows of each atom).
  int64_t valueTileBytes() const {
    return s.blockN * s.elementBytes() * s.valueTileRows();
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

} // namespace mlir::fa3::detail

#endif // FA3_LIB_CONVERSION_FA3TOHOPPER_TILEKERNELEMITTER_H
