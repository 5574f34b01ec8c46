//===- TileKernelEpilogue.cpp - fa3.finalize and the O and LSE stores -----===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The end of convert-fa3-tile-to-hopper's forward kernel: fa3.finalize
// (O / l and the LSE) and the parallel stores, O through shared memory and
// a TMA store (a packed batch's partial warpgroups by plain copies, a
// split's f32 partials by direct stores), the LSE by plain stores.
//
//===----------------------------------------------------------------------===//

#include "TileKernelEmitter.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

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
        [&] { return lseScale; }, lnOffset,
        /*wholeRowSum=*/s.rowSumByMma());

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
