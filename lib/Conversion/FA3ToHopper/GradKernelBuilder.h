//===- GradKernelBuilder.h - The backward's kernel builder ------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// GradKernelBuilder writes the backward's three kernels (see
// HopperAttentionGradSpec and HopperGradKernelBuilder.cpp): `_pre` and
// `_post` in HopperGradPrePostKernels.cpp, the main kernel in
// HopperGradKernelBuilder.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_CONVERSION_FA3TOHOPPER_GRADKERNELBUILDER_H
#define FA3_LIB_CONVERSION_FA3TOHOPPER_GRADKERNELBUILDER_H

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Dialect/FA3/Utils/Philox.h"

#include "HopperCodegen.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <functional>

namespace mlir::fa3::detail {

/// Where the main kernel keeps its tiles in shared memory: byte offsets from
/// the 1024-byte aligned base. K and V (block_n rows each), the ring of
/// `stages` Q and dO tiles (block_m rows each), `dsBuffers` dSᵀ tiles (and
/// as many Pᵀ tiles where the warpgroups split the query columns), the
/// ring's LSE₂ and Δ (4·block_m bytes each a stage), the dQ staging tiles
/// (one a warpgroup, where dQ goes through shared memory) and the
/// mbarriers (K/V, then the ring's full and empty ones).
struct GradSmemLayout {
  int64_t rowBytes; // one row of a K, V, Q or dO tile: D 16-bit values
  int64_t dsTileBytes;
  int64_t k, v, q, dO, dS, p, stats, dQ, barriers, end;

  GradSmemLayout(const HopperAttentionGradSpec &s, int64_t dsBuffers,
                 bool dQStaging) {
    rowBytes = 2 * s.headDim;
    dsTileBytes = s.blockN * s.blockM * 2;
    k = 0;
    v = s.blockN * rowBytes;
    q = 2 * s.blockN * rowBytes;
    dO = q + s.stages * s.blockM * rowBytes;
    dS = dO + s.stages * s.blockM * rowBytes;
    p = dS + dsBuffers * dsTileBytes;
    stats = p + (s.splitQueryColumns() ? dsBuffers * dsTileBytes : 0);
    dQ = stats + s.stages * 8 * s.blockM;
    barriers = dQ + (dQStaging ? HopperAttentionGradSpec::kNumWarpgroups *
                                     HopperAttentionGradSpec::kDQTileBytes
                               : 0);
    end = barriers + 8 * (1 + 2 * s.stages);
  }
  /// The dynamic shared memory the kernel asks for: the layout and the
  /// alignment of its base.
  int64_t bytes() const { return end + 1024; }
};

/// Writes the kernels of one HopperAttentionGradSpec into a GPU module, the
/// main kernel's key grid replayed from the tile level by `keyGrid`.
class GradKernelBuilder : public HopperCodegen {
public:
  GradKernelBuilder(OpBuilder &b, Location loc,
                    const HopperAttentionGradSpec &spec,
                    GradKeyGridReplay &keyGrid)
      : HopperCodegen(b, loc, spec.bf16), s(spec), keyGrid(keyGrid) {}

  void buildPreprocess(gpu::GPUModuleOp module);
  void buildMain(gpu::GPUModuleOp module);
  void buildPostprocess(gpu::GPUModuleOp module);

private:
  LLVM::LLVMFuncOp createKernel(gpu::GPUModuleOp module, StringRef name,
                                ArrayRef<Type> params, int64_t threads);
  /// Two packed 16-bit values at `ptr` widened to f32.
  std::pair<Value, Value> loadPair(Value ptr);
  Value warpSum(Value v) {
    for (int64_t lane : {16, 8, 4, 2, 1})
      v = fadd(v, shflXor(v, lane));
    return v;
  }
  void storeF32(Value ptr, Value v) {
    LLVM::StoreOp::create(b, loc, v, ptr, /*alignment=*/4);
  }
  Value elemPtr(Value base, Type type, Value index) {
    return LLVM::GEPOp::create(b, loc, globalPtr, type, base,
                               ValueRange{index});
  }

  Value loadI32(Value base, Value index) {
    return LLVM::LoadOp::create(b, loc, i32, elemPtr(base, i32, sext64(index)),
                                /*alignment=*/4);
  }
  /// Varlen: the rows per head of the padded statistics (LSE₂, Δ), P =
  /// floor((Tq + B·blockM) / blockM)·blockM, and where sequence `seq`
  /// (starting at token `start`) begins in them, floor((start + seq·blockM)
  /// / blockM)·blockM: aligned to whole steps, and past the previous
  /// sequence's rows rounded up to whole steps (FA3's padded offsets).
  Value paddedStatRows(Value rowsQ, Value numSeqs) {
    return mul(divu(add(rowsQ, mul(numSeqs, ci(s.blockM))), ci(s.blockM)),
               ci(s.blockM));
  }
  Value paddedStatOffset(Value start, Value seq) {
    return mul(divu(add(start, mul(seq, ci(s.blockM))), ci(s.blockM)),
               ci(s.blockM));
  }
  /// The row of the statistics (and, times D, of the dQ accumulator) that
  /// holds row `row` of a query head. Dense: (batch, head) own `seqPad`
  /// rows each. Varlen: each head owns `statRows` rows, and the sequence's
  /// start at `seqOffset`.
  Value denseStatRow(Value batch, Value head, Value seqPad, Value row) {
    return add(mul(add(mul(sext64(batch), cl(s.numQHeads)), sext64(head)),
                   sext64(seqPad)),
               sext64(row));
  }
  Value varlenStatRow(Value head, Value statRows, Value seqOffset, Value row) {
    return add(add(mul(sext64(head), sext64(statRows)), sext64(seqOffset)),
               sext64(row));
  }

  /// Varlen, the last grid z (B + 1): zeroes the rows of key head `kvHead`
  /// in each of `outputs` (dK and dV, [total_k, Hkv, D]) from token `first`
  /// to `end` in strides of the grid's x dimension (its CTAs stride over
  /// the keys past the last sequence), thread `tid` < D/2 one 32-bit pair.
  void zeroKeyRowsPastSequences(Value first, Value end, Value kvHead, Value tid,
                                ArrayRef<Value> outputs) {
    int64_t pairs = s.headDim / 2;
    Value inRow = cmp(arith::CmpIPredicate::slt, tid, ci(pairs));
    scf::IfOp::create(b, loc, inRow, [&](OpBuilder &, Location) {
      scf::ForOp::create(
          b, loc, first, end, NVVM::GridDimXOp::create(b, loc, i32),
          ValueRange{}, [&](OpBuilder &, Location, Value token, ValueRange) {
            // Element pair `tid` of row (token, kvHead).
            Value pair = add(
                mul(add(mul(sext64(token), cl(s.numKVHeads)), sext64(kvHead)),
                    cl(pairs)),
                zext64(tid));
            for (Value ptr : outputs)
              LLVM::StoreOp::create(b, loc, ci(0), elemPtr(ptr, i32, pair),
                                    /*alignment=*/4);
            scf::YieldOp::create(b, loc);
          });
      scf::YieldOp::create(b, loc);
    });
  }

  /// Adds one warpgroup's 64 × 64 dQ tile `qAcc` (an m64n64 accumulator in
  /// fragment-slot order) to the f32 dQ accumulator at element `tileElem`
  /// of `accPtr` with per-thread reductions: slot `tInWG` of 8-column block
  /// j is 16 contiguous bytes, one v4 reduction, so a warp's cover 512
  /// contiguous bytes in whole 32-byte sectors (two v2 reductions a slot
  /// touch each sector twice, half used: measured 10-17% slower at D =
  /// 256). One address a step, constant offsets from it: per-slot offsets
  /// would be loop invariants held in registers.
  void reduceDQTileToGlobal(ArrayRef<Value> qAcc, Value accPtr, Value tileElem,
                            Value tInWG) {
    Value slot0 =
        elemPtr(accPtr, f32, add(tileElem, zext64(mul(tInWG, ci(4)))));
    for (int64_t j = 0; j < 8; ++j)
      ptxVoid("red.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f",
              {elemPtr(slot0, f32, ci(j * 128 * 4)), qAcc[4 * j],
               qAcc[4 * j + 1], qAcc[4 * j + 2], qAcc[4 * j + 3]});
  }

  /// The same through shared memory: the tile to warpgroup `wg`'s staging
  /// buffer (at byte `stagingOffset` of the shared memory based at
  /// `smemBase`) in the same order (consecutive threads, consecutive 16
  /// bytes: no bank conflicts), then one bulk reduce-add of it by the
  /// warpgroup's first thread (`isIssuer`). Only the issuer's warp waits
  /// for the tile; the other three arrive and go on to dK's wgmmas and the
  /// next step (definition).
  void reduceDQTileViaSharedMemory(ArrayRef<Value> qAcc, Value accPtr,
                                   Value tileElem, Value tInWG, Value wg,
                                   Value isIssuer, Value smemBase,
                                   int64_t stagingOffset);

  /// Sᵀ or dPᵀ of one step: a committed wgmma chain (definition).
  SmallVector<Value> transposedProductChain(Value slab, Value cols,
                                            SmallVector<Value> acc);
  /// Dropout's keep factors of one step's Pᵀ fragment and Pᵀ ∘ Z
  /// (definition).
  std::pair<SmallVector<Value>, SmallVector<Value>>
  applyDropout(const DropoutGenerator &dropoutGen, float dropoutP,
               ArrayRef<Value> p, Value batch, Value head, Value qStart,
               Value qCol0, Value keyRow0, Value colInBlock, int64_t qCols);

  /// A barrier of the main kernel's consumer threads: a named barrier with
  /// a producer warpgroup, else the CTA's.
  void consumerBarrier() {
    if (s.hasProducer())
      namedBarrier(kConsumerBarrier, s.numConsumerThreads());
    else
      NVVM::Barrier0Op::create(b, loc);
  }

  /// One step's LSE₂ or Δ pair from the ring slot's statistics
  /// (definition).
  std::pair<Value, Value> loadStatPair(Value statsPtr, Value statCol,
                                       int64_t byteOffset, int64_t j);
  /// Pᵀ of one step's masked Sᵀ fragment (fa3.recompute_probs; definition).
  SmallVector<Value> recomputeProbs(ArrayRef<Value> masked, float exp2Scale,
                                    Value statsPtr, Value statCol);
  /// dSᵀ of one step (fa3.softmax_grad; definition).
  SmallVector<Value> softmaxGrad(ArrayRef<Value> p, ArrayRef<Value> dpAcc,
                                 ArrayRef<Value> keepScale,
                                 ArrayRef<Value> capped, float capFactor,
                                 Value statsPtr, Value statCol);

  /// A Pᵀ or dSᵀ tile's A fragments `frag` (one per 16 query columns) to
  /// shared memory at `tileAddr`: row = key, 64 query columns a 128-byte
  /// swizzled row, the K-major layout of A for dV += Pᵀ dO and dK += dSᵀ Q
  /// and the MN-major one of dS for dQ (definition).
  void storeTransposedTile(ArrayRef<SmallVector<Value>> frag, Value tileAddr,
                           Value slab, Value rowInSlab, Value qCol0,
                           Value lane);

  /// One consumer warpgroup's share of a step's dQ = dS K: head-dim columns
  /// [n0, n0 + nWidth) over key rows [k0, k0 + kRows), for the step's
  /// query rows [64·qBlock, 64·qBlock + 64) (`splitRows`: the warpgroups
  /// split a 128-row step's query rows; else qBlock is 0). `disjoint`: the
  /// two warpgroups' shares do not overlap.
  struct DQShare {
    Value n0;
    int64_t nWidth;
    Value k0;
    int64_t kRows;
    Value qBlock;
    bool splitRows, disjoint;
  };
  /// Chunk `chunk` (64 head-dim columns) of `share`'s dQ = dS K, dS read
  /// from the tile at `dsAddr`: a committed wgmma group (definition).
  SmallVector<Value> issueDQChunk(const DQShare &share, Value dsAddr,
                                  Value smemBase, int64_t offK, int64_t chunk);
  /// Adds the completed chunk `qAcc` to the f32 accumulator `accPtr` at
  /// row `accRow` (definition).
  void addDQChunk(ArrayRef<Value> qAcc, const DQShare &share, int64_t chunk,
                  Value accPtr, Value accRow, Value wg, Value tInWG,
                  Value isIssuer, Value smemBase, int64_t stagingOffset);
  int64_t numDQChunks(const DQShare &share) const { return share.nWidth / 64; }

  /// What the main kernel's step reads of the kernel around it: this
  /// thread's place (warpgroup, key slab, fragment rows and columns), the
  /// shared tiles' addresses, the CTA's key block and sequence, the steps'
  /// query blocks and the ring (buildMain sets them up).
  struct MainKernel {
    Value base, kSlabAddr, vSlabAddr, dsBase, pBase;
    Value tid, wg, lane, slab, slice, rowInSlab, colInBlock, qCol0;
    Value keyRow[2];
    Value tInWG, isIssuer, isThread0, isConsumer0;
    Value batch, kBlock, seqK, offset, perHead, qbLo, numIters, seqPad;
    Value turnsPtr, accPtr;
    DropoutGenerator dropoutGen;
    DQShare dqShare;
    /// Step `it`'s (query head, first query row).
    std::function<std::pair<Value, Value>(Value)> stepOf;
    /// The statistics' row of (query head, query row).
    std::function<Value(Value, Value)> statIndex;
    /// The ring's full and empty mbarriers of a stage.
    std::function<Value(Value)> barFull, barEmpty;
    /// Loads step `it`'s ring tiles into a stage (no producer warpgroup).
    std::function<void(Value, Value)> issueStep;
  };
  /// Step `it` of a consumer warpgroup's loop, `iters` the carried dK and
  /// dV: the key grid's step ops one by one, then the loop's yield
  /// (HopperGradKernelStep.cpp).
  void emitStep(const MainKernel &k, Value it, ValueRange iters);

  /// Deterministic backward: consumer thread 0 spins until the dQ turn
  /// counter of this step's (batch, head, query block) reaches this key
  /// block's turn, then the consumers meet at a barrier. `counterIndex`
  /// gives the counter's index for the query block `qb`. Returns the
  /// counter's address for passDQTurn (definition).
  Value waitDQTurn(Value turnsPtr, Value kBlock, Value qStart, Value offset,
                   function_ref<Value(Value qb)> counterIndex,
                   Value isConsumer0);
  /// After the step's dQ adds: every consumer thread's adds done (a
  /// barrier), consumer thread 0 makes them visible at GPU scope and
  /// passes the turn to the next key block.
  void passDQTurn(Value turnPtr, Value isConsumer0);

  /// The main kernel's CTA's rows of dK and dV.
  struct KeyBlockRows {
    Value kStart;     ///< the key block's first key
    Value storedKeys; ///< the sequence's keys that dK and dV store
    /// A key's row of the [*, Hkv, D] dK and dV.
    std::function<Value(Value)> rowOfKey;
  };
  /// The main kernel's epilogue: dK and dV as the key grid stores them
  /// (keyGrid.keyGradients(): a scale times carried value c, `acc[c·nAcc,
  /// (c + 1)·nAcc)`, this thread's fragments of its warpgroup's key rows
  /// `keyRow` and head-dim slice `slice`) through shared memory, then out
  /// in 16-byte pieces of rows (definition).
  void storeKeyGradients(ArrayRef<Value> acc, Value dkPtr, Value dvPtr,
                         const KeyBlockRows &rows, ArrayRef<Value> keyRow,
                         Value slice, Value colInBlock, Value ctid,
                         int64_t stagingOffset);

  const HopperAttentionGradSpec &s;
  GradKeyGridReplay &keyGrid;
  /// Named barriers of the main kernel: 1 after the dSᵀ stores, 2 and 3
  /// the dQ staging tiles of consumer warpgroups 0 and 1, 4 the consumers'
  /// CTA-wide barrier where a producer warpgroup does not take part.
  static constexpr int64_t kConsumerBarrier = 4;
};

} // namespace mlir::fa3::detail

#endif // FA3_LIB_CONVERSION_FA3TOHOPPER_GRADKERNELBUILDER_H
