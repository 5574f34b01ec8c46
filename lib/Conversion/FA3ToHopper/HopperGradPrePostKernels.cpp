//===- HopperGradPrePostKernels.cpp - The backward's _pre and _post -------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The backward's two small kernels around the main one (see
// HopperGradKernelBuilder.cpp): `_pre`, one warp per query row, writes
// Δ = rowsum(dO ∘ O), LSE·log2(e) and zeroes the f32 dQ accumulator's row;
// `_post`, a CTA per 64-row block, writes dQ = scale · accumulator in the
// storage type.
//
//===----------------------------------------------------------------------===//

#include "GradKernelBuilder.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

//===----------------------------------------------------------------------===//
// Preprocessing: Δ, LSE₂ and the zeroed accumulator
//===----------------------------------------------------------------------===//

void GradKernelBuilder::buildPreprocess(gpu::GPUModuleOp module) {
  // (dO, O, LSE, dLSE or null, dQ accumulator, LSE₂, Δ, Sq[, cu_seqlens_q]).
  SmallVector<Type> params = {globalPtr, globalPtr, globalPtr, globalPtr,
                              globalPtr, globalPtr, globalPtr, i32};
  if (s.varlen)
    params.push_back(globalPtr);
  auto fn = createKernel(module, s.preprocessKernelName(), params,
                         HopperAttentionGradSpec::kPreThreads);
  OpBuilder::InsertionGuard guard(b);
  Block *entry = &fn.getBody().front();
  b.setInsertionPointToStart(entry);
  Value dOPtr = entry->getArgument(0), oPtr = entry->getArgument(1);
  Value lsePtr = entry->getArgument(2), gradLsePtr = entry->getArgument(3);
  Value accPtr = entry->getArgument(4), lse2Ptr = entry->getArgument(5);
  Value deltaPtr = entry->getArgument(6), seqQ = entry->getArgument(7);
  Value hasGradLse =
      cmp(arith::CmpIPredicate::ne,
          LLVM::PtrToIntOp::create(b, loc, b.getI64Type(), gradLsePtr), cl(0));

  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value warp = divu(tid, ci(32)), lane = remu(tid, ci(32));
  const int64_t rowsPerCta = HopperAttentionGradSpec::kPreThreads / 32;
  Value row =
      add(mul(NVVM::BlockIdXOp::create(b, loc, i32), ci(rowsPerCta)), warp);
  Value head = NVVM::BlockIdYOp::create(b, loc, i32);
  Value batch = NVVM::BlockIdZOp::create(b, loc, i32);
  auto zeroAccRow = [&](Value rowElem) {
    for (int64_t t = 0; t < s.headDim / 32; ++t) {
      Value idx = add(rowElem, zext64(add(lane, ci(32 * t))));
      storeF32(elemPtr(accPtr, f32, idx), cf(0));
    }
  };

  // Where row `row` of this CTA's sequence lives: the sequence's length and
  // padded length, and the row's index into the [*, Hq, D] rows of dO and O,
  // into the LSE and into the padded statistics and accumulator (for the
  // dense backward emitted where they are used). Dense: batch `batch` of Sq
  // rows.
  Value length = seqQ, lenPad, varlenRowIndex, varlenLseIdx, varlenStatIdx;
  if (!s.varlen) {
    lenPad = mul(divu(add(seqQ, ci(s.blockM - 1)), ci(s.blockM)), ci(s.blockM));
  } else {
    Value cuQ = entry->getArgument(8);
    Value numSeqs = NVVM::GridDimZOp::create(b, loc, i32);
    Value start = loadI32(cuQ, batch);
    length = sub(loadI32(cuQ, add(batch, ci(1))), start);
    Value token = add(start, row);
    varlenRowIndex = add(mul(sext64(token), cl(s.numQHeads)), sext64(head));
    varlenLseIdx = add(mul(sext64(head), sext64(seqQ)), sext64(token));
    Value seqOffset = paddedStatOffset(start, batch);
    varlenStatIdx =
        varlenStatRow(head, paddedStatRows(seqQ, numSeqs), seqOffset, row);
  }
  auto rowIndexOf = [&] {
    if (s.varlen)
      return varlenRowIndex;
    return add(mul(add(mul(sext64(batch), sext64(seqQ)), sext64(row)),
                   cl(s.numQHeads)),
               sext64(head));
  };
  auto lseIndexOf = [&] {
    if (s.varlen)
      return varlenLseIdx;
    return add(mul(add(mul(sext64(batch), cl(s.numQHeads)), sext64(head)),
                   sext64(seqQ)),
               sext64(row));
  };
  auto statIndexOf = [&] {
    if (s.varlen)
      return varlenStatIdx;
    return denseStatRow(batch, head, lenPad, row);
  };
  Value inside = cmp(arith::CmpIPredicate::slt, row, length);
  if (s.varlen)
    lenPad =
        mul(divu(add(length, ci(s.blockM - 1)), ci(s.blockM)), ci(s.blockM));
  float inf = std::numeric_limits<float>::infinity();

  // Rows past the length (up to the padded length) get Δ = 0 and LSE₂ =
  // +inf.
  auto rowValues = scf::IfOp::create(b, loc, TypeRange{f32, f32}, inside,
                                     /*addElseBlock=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(rowValues.thenBlock());
    Value rowElem = mul(rowIndexOf(), cl(s.headDim));
    Value dot = cf(0);
    for (int64_t t = 0; t < s.headDim / 64; ++t) {
      Value col = add(mul(lane, ci(2)), ci(64 * t));
      Value idx = add(rowElem, zext64(col));
      auto [d0, d1] = loadPair(elemPtr(dOPtr, elt, idx));
      auto [o0, o1] = loadPair(elemPtr(oPtr, elt, idx));
      dot = fadd(dot, fadd(fmul(d0, o0), fmul(d1, o1)));
    }
    Value lseIdx = lseIndexOf();
    Value lse = LLVM::LoadOp::create(b, loc, f32, elemPtr(lsePtr, f32, lseIdx),
                                     /*alignment=*/4);
    Value empty =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, lse, cf(-inf));
    Value lse2 = select(empty, cf(inf), fmul(lse, cf(float(M_LOG2E))));
    // With the LSE's gradient the backward runs with Δ − dLSE (dS = P ∘ (dP
    // − Δ + dLSE), since ∂LSE/∂S = P).
    Value delta = warpSum(dot);
    auto withGradLse = scf::IfOp::create(b, loc, TypeRange{f32}, hasGradLse,
                                         /*addElseBlock=*/true);
    {
      OpBuilder::InsertionGuard g2(b);
      b.setInsertionPointToStart(withGradLse.thenBlock());
      Value gradLse = LLVM::LoadOp::create(
          b, loc, f32, elemPtr(gradLsePtr, f32, lseIdx), /*alignment=*/4);
      scf::YieldOp::create(b, loc, ValueRange{fsub(delta, gradLse)});
      b.setInsertionPointToStart(withGradLse.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{delta});
    }
    scf::YieldOp::create(b, loc, ValueRange{withGradLse.getResult(0), lse2});
    b.setInsertionPointToStart(rowValues.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{cf(0), cf(inf)});
  }
  Value inPad = cmp(arith::CmpIPredicate::slt, row, lenPad);
  Value lane0 = cmp(arith::CmpIPredicate::eq, lane, ci(0));
  scf::IfOp::create(b, loc, inPad, [&](OpBuilder &, Location) {
    Value statIdx = statIndexOf();
    // The accumulator's row of the same index (its blocks hold the rows in
    // fragment order, but a block is zero once all its rows are).
    zeroAccRow(mul(statIdx, cl(s.headDim)));
    scf::IfOp::create(b, loc, lane0, [&](OpBuilder &, Location) {
      storeF32(elemPtr(deltaPtr, f32, statIdx), rowValues.getResult(0));
      storeF32(elemPtr(lse2Ptr, f32, statIdx), rowValues.getResult(1));
      scf::YieldOp::create(b, loc);
    });
    scf::YieldOp::create(b, loc);
  });
  b.setInsertionPointToEnd(entry);
  LLVM::ReturnOp::create(b, loc, ValueRange());
}

//===----------------------------------------------------------------------===//
// Postprocessing: dQ = scale · accumulator
//===----------------------------------------------------------------------===//

void GradKernelBuilder::buildPostprocess(gpu::GPUModuleOp module) {
  // (dQ accumulator, dQ, Sq[, cu_seqlens_q]); a CTA per 64-row block of
  // (batch or sequence, head), a thread per wgmma fragment slot.
  SmallVector<Type> params = {globalPtr, globalPtr, i32};
  if (s.varlen)
    params.push_back(globalPtr);
  auto fn = createKernel(module, s.postprocessKernelName(), params,
                         HopperAttentionGradSpec::kPostThreads);
  OpBuilder::InsertionGuard guard(b);
  Block *entry = &fn.getBody().front();
  b.setInsertionPointToStart(entry);
  Value accPtr = entry->getArgument(0), dqPtr = entry->getArgument(1);
  Value seqQ = entry->getArgument(2);
  const int64_t d = s.headDim;
  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value blk = NVVM::BlockIdXOp::create(b, loc, i32);
  Value head = NVVM::BlockIdYOp::create(b, loc, i32);
  Value batch = NVVM::BlockIdZOp::create(b, loc, i32);

  // The block's sequence: its length, its first token, and the statistics
  // row of its first row (the accumulator's rows are the statistics').
  Value length = seqQ, token0, statRow0;
  Value blockRow = mul(blk, ci(64));
  if (!s.varlen) {
    Value seqPad =
        mul(divu(add(seqQ, ci(s.blockM - 1)), ci(s.blockM)), ci(s.blockM));
    token0 = mul(sext64(batch), sext64(seqQ));
    statRow0 = denseStatRow(batch, head, seqPad, blockRow);
  } else {
    // Grid z = B + 1: the last z writes dQ = 0 to the rows past the last
    // sequence, which no sequence's rows cover, striding over their element
    // pairs with every CTA of its x.
    Value cuQ = entry->getArgument(3);
    Value numSeqs = sub(NVVM::GridDimZOp::create(b, loc, i32), ci(1));
    auto tail =
        scf::IfOp::create(b, loc, cmp(arith::CmpIPredicate::eq, batch, numSeqs),
                          /*withElseRegion=*/true);
    b.setInsertionPointToStart(tail.thenBlock());
    Value first = sext64(loadI32(cuQ, numSeqs));
    Value pairs = mul(sub(sext64(seqQ), first), cl(d / 2));
    Value stride = mul(zext64(NVVM::GridDimXOp::create(b, loc, i32)),
                       cl(HopperAttentionGradSpec::kPostThreads));
    scf::ForOp::create(
        b, loc,
        add(mul(zext64(blk), cl(HopperAttentionGradSpec::kPostThreads)),
            zext64(tid)),
        pairs, stride, ValueRange{},
        [&](OpBuilder &, Location, Value pair, ValueRange) {
          Value row =
              add(first, arith::DivUIOp::create(b, loc, pair, cl(d / 2)));
          Value index =
              add(mul(add(mul(row, cl(s.numQHeads)), sext64(head)), cl(d / 2)),
                  arith::RemUIOp::create(b, loc, pair, cl(d / 2)));
          LLVM::StoreOp::create(b, loc, ci(0), elemPtr(dqPtr, i32, index),
                                /*alignment=*/4);
          scf::YieldOp::create(b, loc);
        });
    b.setInsertionPointToStart(tail.elseBlock());
    Value start = loadI32(cuQ, batch);
    length = sub(loadI32(cuQ, add(batch, ci(1))), start);
    token0 = sext64(start);
    Value seqOffset = paddedStatOffset(start, batch);
    statRow0 =
        varlenStatRow(head, paddedStatRows(seqQ, numSeqs), seqOffset, blockRow);
  }

  // The block's 64 × D tile goes through shared memory, as FA3's dQ
  // conversion does: each thread first loads all of its fragment slots (16
  // bytes a thread and 8-column block, a warp's 512 contiguous bytes; every
  // load before any store, so they are in flight together), scales and
  // rounds them and stores them row-major; after a barrier it writes whole
  // 16-byte pieces of rows to dQ, a warp 512 contiguous bytes (two rows at
  // D = 128). Storing each slot's two 4-byte pairs straight to dQ wrote 16
  // of every 32 bytes of a sector and, as the slots' loads could not pass
  // the stores before them, kept one load a thread in flight. Rows are
  // padded by 16 bytes, so the 8 rows of one slot store fall in distinct
  // banks.
  const int64_t rowBytes = 2 * d + 16, piecesPerRow = 2 * d / 16;
  std::string tileName = s.postprocessKernelName() + "_tile";
  {
    OpBuilder::InsertionGuard moduleGuard(b);
    b.setInsertionPointToEnd(module.getBody());
    LLVM::GlobalOp::create(
        b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 64 * rowBytes),
        /*isConstant=*/false, LLVM::Linkage::Internal, tileName, Attribute(),
        /*alignment=*/16, /*addrSpace=*/3);
  }
  Value tile = LLVM::AddressOfOp::create(b, loc, smemPtr, tileName);
  auto tileAt = [&](Value byte) {
    return LLVM::GEPOp::create(b, loc, smemPtr, b.getI8Type(), tile,
                               ValueRange{byte});
  };
  // The CTA takes this branch as a whole (blockRow is the CTA's), so the
  // barrier inside is uniform.
  Value active = cmp(arith::CmpIPredicate::slt, blockRow, length);
  scf::IfOp::create(b, loc, active, [&](OpBuilder &, Location) {
    // Slot `tid` of each 8-column block j of each 64-column chunk holds
    // rows r and r + 8 of the block, columns c and c + 1 (the wgmma
    // accumulator fragment).
    Value warp = divu(tid, ci(32)), lane = remu(tid, ci(32));
    Value r = add(mul(warp, ci(16)), divu(lane, ci(4)));
    Value c = mul(remu(lane, ci(4)), ci(2));
    Value block = mul(statRow0, cl(d));
    SmallVector<Value> slots;
    for (int64_t chunk = 0; chunk < d / 64; ++chunk)
      for (int64_t j = 0; j < 8; ++j) {
        Value slot = add(block, cl(chunk * 64 * 64 + j * 128 * 4));
        slots.push_back(LLVM::LoadOp::create(
            b, loc, VectorType::get({4}, f32),
            elemPtr(accPtr, f32, add(slot, mul(zext64(tid), cl(4)))),
            /*alignment=*/16));
      }
    for (int64_t chunk = 0; chunk < d / 64; ++chunk)
      for (int64_t j = 0; j < 8; ++j) {
        Value v = slots[chunk * 8 + j];
        Value col = add(c, ci(chunk * 64 + 8 * j));
        for (int64_t half = 0; half < 2; ++half) {
          Value x = LLVM::ExtractElementOp::create(b, loc, v, ci(2 * half));
          Value y = LLVM::ExtractElementOp::create(b, loc, v, ci(2 * half + 1));
          Value byte =
              add(mul(add(r, ci(8 * half)), ci(rowBytes)), mul(col, ci(2)));
          LLVM::StoreOp::create(
              b, loc, pack(fmul(x, cf(s.scale)), fmul(y, cf(s.scale))),
              tileAt(byte), /*alignment=*/4);
        }
      }
    NVVM::Barrier0Op::create(b, loc);
    // Piece p of the tile: row p / piecesPerRow, bytes 16 · (p %
    // piecesPerRow) on; rows past the sequence are not written.
    for (int64_t i = 0;
         i < 64 * piecesPerRow / HopperAttentionGradSpec::kPostThreads; ++i) {
      Value p = add(tid, ci(i * HopperAttentionGradSpec::kPostThreads));
      Value row = divu(p, ci(piecesPerRow));
      Value piece = remu(p, ci(piecesPerRow));
      Value v = LLVM::LoadOp::create(
          b, loc, VectorType::get({4}, i32),
          tileAt(add(mul(row, ci(rowBytes)), mul(piece, ci(16)))),
          /*alignment=*/16);
      Value seqRow = add(blockRow, row);
      Value inside = cmp(arith::CmpIPredicate::slt, seqRow, length);
      scf::IfOp::create(b, loc, inside, [&](OpBuilder &, Location) {
        Value index =
            add(mul(add(mul(add(token0, sext64(seqRow)), cl(s.numQHeads)),
                        sext64(head)),
                    cl(d)),
                zext64(mul(piece, ci(8))));
        LLVM::StoreOp::create(b, loc, v, elemPtr(dqPtr, elt, index),
                              /*alignment=*/16);
        scf::YieldOp::create(b, loc);
      });
    }
    scf::YieldOp::create(b, loc);
  });
  b.setInsertionPointToEnd(entry);
  LLVM::ReturnOp::create(b, loc, ValueRange());
}
