//===- FA3KernelToNVVM.cpp - fa3 Hopper kernel ops to inline PTX
//-------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// One pattern per op of the Hopper kernel level (FA3KernelOps.td): wgmma and
// named barriers become the inline PTX of their instruction, the mbarrier
// ring ops NVVM's mbarrier ops on the slot and phase of their use.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/InlinePtx.h"
#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"
#include "mlir/Rewrite/PatternApplicator.h"

#include <string>

namespace mlir::fa3 {
#define GEN_PASS_DEF_CONVERTFA3KERNELTONVVM
#include "fa3/Conversion/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

namespace {

/// fa3.wgmma -> `wgmma.mma_async` in inline PTX: the N/2 accumulators are
/// outputs $0.. tied to the first N/2 inputs (register allocation keeps
/// the fragment in place), then A (descriptor or 4 registers), B's
/// descriptor and the scale-d flag, tested into a predicate.
struct WgmmaLowering : OpRewritePattern<WgmmaOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(WgmmaOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    Location loc = op.getLoc();
    int64_t n = op.getAccumulators().size();
    bool fp8 = isa<Float8E4M3FNType>(op.getElementType());
    std::string t = fp8                               ? "e4m3"
                    : op.getElementType().isBF16() ? "bf16"
                                                     : "f16";
    bool registers = !op.getARegisters().empty();
    // Operand numbers after the tied accumulators.
    int64_t first = 2 * n;
    std::string operandsPtx, constraints;
    SmallVector<Value> operands(op.getAccumulators());
    if (registers) {
      operandsPtx = "{$" + std::to_string(first) + ", $" +
                    std::to_string(first + 1) + ", $" +
                    std::to_string(first + 2) + ", $" +
                    std::to_string(first + 3) + "}, $" +
                    std::to_string(first + 4) +
                    (fp8 ? ", p, 1, 1" : ", p, 1, 1, 1");
      constraints = "r,r,r,r,l,r";
      llvm::append_range(operands, op.getARegisters());
    } else {
      operandsPtx = "$" + std::to_string(first) + ", $" +
                    std::to_string(first + 1) + ", p, 1, 1";
      if (!fp8)
        operandsPtx += std::string(", ") + (op.getTransA() ? "1" : "0") +
                       ", " + (op.getTransB() ? "1" : "0");
      constraints = "l,l,r";
      operands.push_back(op.getADescriptor());
    }
    operands.push_back(op.getBDescriptor());
    operands.push_back(op.getScaleD());
    // PTX numbers the n outputs first, then the inputs: scale-d is last.
    int64_t scaleD = n + operands.size() - 1;

    std::string ptx = "{\n.reg .pred p;\nsetp.ne.b32 p, $" +
                      std::to_string(scaleD) +
                      ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                      std::to_string(op.getN()) + "k" +
                      std::to_string(op.getK()) + ".f32." + t + "." + t + " {";
    std::string allConstraints;
    for (int64_t i = 0; i < n; ++i) {
      ptx += (i ? ", $" : "$") + std::to_string(i);
      allConstraints += "=f,";
    }
    ptx += "}, " + operandsPtx + ";\n}\n";
    for (int64_t i = 0; i < n; ++i)
      allConstraints += std::to_string(i) + ",";
    allConstraints += constraints;

    auto structType = LLVM::LLVMStructType::getLiteral(
        rewriter.getContext(), SmallVector<Type>(n, rewriter.getF32Type()));
    auto asmOp = inlinePtx(rewriter, loc, structType, operands, ptx,
                           allConstraints);
    SmallVector<Value> results;
    for (int64_t i = 0; i < n; ++i)
      results.push_back(
          LLVM::ExtractValueOp::create(rewriter, loc, asmOp.getResult(0), i));
    rewriter.replaceOp(op, results);
    return success();
  }
};

/// fa3.named_barrier -> `bar.sync id, threads;` or `bar.arrive`.
struct NamedBarrierLowering : OpRewritePattern<NamedBarrierOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(NamedBarrierOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    Location loc = op.getLoc();
    Value threads = LLVM::ConstantOp::create(
        rewriter, loc, rewriter.getI32Type(),
        rewriter.getI32IntegerAttr(static_cast<int32_t>(op.getThreads())));
    inlinePtx(rewriter, loc, Type(), ValueRange{op.getId(), threads},
              op.getArrive() ? "bar.arrive $0, $1;" : "bar.sync $0, $1;",
              "r,r");
    rewriter.eraseOp(op);
    return success();
  }
};

/// An i32 constant.
static Value constI32(OpBuilder &b, Location loc, int64_t value) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), value);
}

/// The slot of use `use` of a ring of `stages` slots: use mod stages.
static Value slotOf(OpBuilder &b, Location loc, Value use, int64_t stages) {
  return arith::RemUIOp::create(b, loc, use, constI32(b, loc, stages));
}

/// The parity of use `use`'s phase of its slot barrier: (use div stages)
/// mod 2 (an mbarrier tells its phases apart by parity only).
static Value parityOf(OpBuilder &b, Location loc, Value use, int64_t stages) {
  Value n = constI32(b, loc, stages);
  Value one = constI32(b, loc, 1);
  return arith::AndIOp::create(b, loc, arith::DivUIOp::create(b, loc, use, n),
                               one);
}

/// The barrier of `slot` in the ring at `barriers` (one i64 a barrier).
static Value slotBarrier(OpBuilder &b, Location loc, Value barriers,
                         Value slot) {
  Value index = arith::ExtUIOp::create(b, loc, b.getI64Type(), slot);
  return LLVM::GEPOp::create(b, loc, barriers.getType(), b.getI64Type(),
                             barriers, ValueRange{index});
}

/// The barrier of the slot of `op`'s use in its ring.
template <typename RingOp> static Value useBarrier(OpBuilder &b, RingOp op) {
  Location loc = op.getLoc();
  return slotBarrier(b, loc, op.getBarriers(),
                     slotOf(b, loc, op.getUse(), op.getStages()));
}

/// mbarrier.try_wait.parity in a loop until it succeeds; the suspend-time
/// hint (10 ms, in ns) is what CUTLASS passes.
static void waitForParity(OpBuilder &b, Location loc, Value barrier,
                          Value parity) {
  Value ticks = constI32(b, loc, 0x989680);
  NVVM::MBarrierTryWaitParityOp::create(b, loc, barrier, parity, ticks);
}

/// fa3.ring_wait -> a wait for the phase of the use (or, `previous`, of
/// the slot's previous use, whose parity is the other one; skipped for the
/// first `stages` uses, whose slots start free).
struct RingWaitLowering : OpRewritePattern<RingWaitOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(RingWaitOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    Location loc = op.getLoc();
    int64_t stages = op.getStages();
    Value slot = slotOf(rewriter, loc, op.getUse(), stages);
    Value parity = parityOf(rewriter, loc, op.getUse(), stages);
    if (!op.getPrevious()) {
      waitForParity(rewriter, loc,
                    slotBarrier(rewriter, loc, op.getBarriers(), slot), parity);
      rewriter.eraseOp(op);
      return success();
    }
    Value reused =
        arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::uge,
                              op.getUse(), constI32(rewriter, loc, stages));
    scf::IfOp::create(rewriter, loc, reused, [&](OpBuilder &b, Location loc) {
      Value one = constI32(b, loc, 1);
      waitForParity(b, loc, slotBarrier(b, loc, op.getBarriers(), slot),
                    arith::XOrIOp::create(b, loc, parity, one));
      scf::YieldOp::create(b, loc);
    });
    rewriter.eraseOp(op);
    return success();
  }
};

/// fa3.ring_arrive -> mbarrier.arrive on the use's slot barrier.
struct RingArriveLowering : OpRewritePattern<RingArriveOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(RingArriveOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    NVVM::MBarrierArriveOp::create(rewriter, op.getLoc(), Type(),
                                   useBarrier(rewriter, op), Value(),
                                   NVVM::MemScopeKind::CTA, /*relaxed=*/false);
    rewriter.eraseOp(op);
    return success();
  }
};

/// fa3.ring_barrier -> the address of the use's slot barrier.
struct RingBarrierLowering : OpRewritePattern<RingBarrierOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(RingBarrierOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    rewriter.replaceOp(op, useBarrier(rewriter, op));
    return success();
  }
};

/// The shared address of atom `atom` of a TMA tile at `smem` + `offset`
/// bytes, its atoms `stride` bytes apart.
static Value atomAddress(OpBuilder &b, Location loc, Value smem, Value offset,
                         int64_t atom, int64_t stride) {
  Value bytes =
      arith::AddIOp::create(b, loc, offset, constI32(b, loc, atom * stride));
  return LLVM::GEPOp::create(b, loc, smem.getType(), b.getI8Type(), smem,
                             ValueRange{bytes});
}

/// fa3.tma_load_tile -> mbarrier.arrive.expect_tx of the tile's bytes, then
/// one cp.async.bulk.tensor per 128-byte atom of columns, atom a at byte
/// offset + a · rows · 128 with the box's first column at a · atom_cols.
/// The TMA coordinates of a tile op's box: (column, row, head, batch) in
/// the [B, S, H, D] view, or with packed heads (column, 0, head group, row,
/// batch) in the [B, S, H / G, G, D] one.
static SmallVector<Value> tmaCoordinates(OpBuilder &b, Location loc,
                                         int64_t column, Value row, Value head,
                                         Value batch,
                                         std::optional<uint64_t> packedHeads) {
  if (packedHeads)
    return {constI32(b, loc, column), constI32(b, loc, 0), head, row, batch};
  return {constI32(b, loc, column), row, head, batch};
}

/// The one `mbarrier.arrive.expect_tx` of a TMA tile load: `bytes` are
/// expected on `barrier` from this thread's copies.
static void expectTileBytes(OpBuilder &b, Location loc, Value barrier,
                            int64_t bytes) {
  NVVM::MBarrierArriveExpectTxOp::create(
      b, loc, Type(), barrier, constI32(b, loc, bytes), NVVM::MemScopeKind::CTA,
      /*relaxed=*/false, Value());
}

/// One TMA copy of a box at `coords` of `map` into shared `dst`, completing
/// on `barrier`.
static void loadBox(OpBuilder &b, Location loc, Value dst, Value map,
                    ValueRange coords, Value barrier) {
  NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
      b, loc, dst, map, coords, barrier, ValueRange(), Value(), Value(),
      NVVM::TMALoadMode::TILE, /*isCTAOnly=*/true, NVVM::CTAGroupKindAttr(),
      Value());
}

struct TmaLoadTileLowering : OpRewritePattern<TmaLoadTileOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TmaLoadTileOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    Location loc = op.getLoc();
    expectTileBytes(rewriter, loc, op.getBarrier(), op.getBytes());
    if (op.getTransposed()) {
      // Atom a: the `cols` rows of positions row + a · atom_cols on, in
      // atom_rows rows of shared memory.
      int64_t atomBytes = op.getTransposedAtomRows() * op.getAtomBytes();
      int64_t atoms = static_cast<int64_t>(op.getRows()) / op.getAtomCols();
      for (int64_t atom = 0; atom < atoms; ++atom) {
        Value dst = atomAddress(rewriter, loc, op.getSmem(), op.getOffset(),
                                atom, atomBytes);
        Value position = arith::AddIOp::create(
            rewriter, loc, op.getRow(),
            constI32(rewriter, loc, atom * op.getAtomCols()));
        loadBox(
            rewriter, loc, dst, op.getTensorMap(),
            {position, constI32(rewriter, loc, 0), op.getHead(), op.getBatch()},
            op.getBarrier());
      }
      rewriter.eraseOp(op);
      return success();
    }
    int64_t atomBytes = static_cast<int64_t>(op.getRows()) * op.getAtomBytes();
    int64_t atoms = static_cast<int64_t>(op.getCols()) / op.getAtomCols();
    for (int64_t atom = 0; atom < atoms; ++atom) {
      Value dst = atomAddress(rewriter, loc, op.getSmem(), op.getOffset(), atom,
                              atomBytes);
      loadBox(rewriter, loc, dst, op.getTensorMap(),
              tmaCoordinates(rewriter, loc, atom * op.getAtomCols(),
                             op.getRow(), op.getHead(), op.getBatch(),
                             op.getPackedHeads()),
              op.getBarrier());
    }
    rewriter.eraseOp(op);
    return success();
  }
};

/// fa3.tma_load_paged_tile -> mbarrier.arrive.expect_tx of the tile's
/// bytes, then a loop over its chunks of chunk_rows rows: the chunk's page
/// from the page table (-1, which TMA reads as zeros, for a slot past the
/// table), and one cp.async.bulk.tensor per atom into the chunk's rows.
struct TmaLoadPagedTileLowering : OpRewritePattern<TmaLoadPagedTileOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TmaLoadPagedTileOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    Location loc = op.getLoc();
    expectTileBytes(rewriter, loc, op.getBarrier(), op.getBytes());
    int64_t rows = static_cast<int64_t>(op.getRows());
    int64_t atoms = static_cast<int64_t>(op.getCols()) / op.getAtomCols();
    Type i32 = rewriter.getI32Type(), i64 = rewriter.getI64Type();
    Value width = op.getTableWidth(), pageSize = op.getPageSize();
    // The batch's row of the table.
    Value tableRow = LLVM::GEPOp::create(
        rewriter, loc, op.getPageTable().getType(), i32, op.getPageTable(),
        ValueRange{arith::MulIOp::create(
            rewriter, loc,
            arith::ExtSIOp::create(rewriter, loc, i64, op.getBatch()),
            arith::ExtSIOp::create(rewriter, loc, i64, width))});
    auto chunks =
        scf::ForOp::create(rewriter, loc, constI32(rewriter, loc, 0),
                           constI32(rewriter, loc, rows), op.getChunkRows());
    rewriter.setInsertionPointToStart(chunks.getBody());
    Value first = chunks.getInductionVar();
    Value position =
        arith::AddIOp::create(rewriter, loc, op.getPosition(), first);
    Value slot = arith::DivUIOp::create(rewriter, loc, position, pageSize);
    Value inPage = arith::RemUIOp::create(rewriter, loc, position, pageSize);
    // The entry is read at a slot clamped into the table (the runtime
    // passes a width of at least 1) and replaced by -1 past it.
    Value inTable = arith::CmpIOp::create(
        rewriter, loc, arith::CmpIPredicate::ult, slot, width);
    Value lastSlot =
        arith::SubIOp::create(rewriter, loc, width, constI32(rewriter, loc, 1));
    Value readSlot = arith::MinUIOp::create(rewriter, loc, slot, lastSlot);
    Value entryPtr = LLVM::GEPOp::create(rewriter, loc, tableRow.getType(), i32,
                                         tableRow, ValueRange{readSlot});
    Value entry =
        LLVM::LoadOp::create(rewriter, loc, i32, entryPtr, /*alignment=*/4);
    Value page = arith::SelectOp::create(rewriter, loc, inTable, entry,
                                         constI32(rewriter, loc, -1));
    // Row `first` of every atom: 128 bytes a row.
    Value chunkOffset = arith::AddIOp::create(
        rewriter, loc, op.getOffset(),
        arith::MulIOp::create(rewriter, loc, first,
                              constI32(rewriter, loc, 128)));
    for (int64_t atom = 0; atom < atoms; ++atom) {
      Value dst = atomAddress(rewriter, loc, op.getSmem(), chunkOffset, atom,
                              rows * 128);
      loadBox(rewriter, loc, dst, op.getTensorMap(),
              tmaCoordinates(rewriter, loc, atom * op.getAtomCols(), inPage,
                             op.getHead(), page,
                             /*packedHeads=*/std::nullopt),
              op.getBarrier());
    }
    rewriter.eraseOp(op);
    return success();
  }
};

/// fa3.tma_store_tile -> one cp.async.bulk.tensor store per 128-byte atom
/// of columns, atom a from byte offset + a · atom_stride with the box's
/// first column at a · atom_cols.
struct TmaStoreTileLowering : OpRewritePattern<TmaStoreTileOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TmaStoreTileOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    Location loc = op.getLoc();
    int64_t stride = static_cast<int64_t>(op.getAtomStride());
    int64_t atoms = static_cast<int64_t>(op.getCols()) / op.getAtomCols();
    for (int64_t atom = 0; atom < atoms; ++atom) {
      Value src = atomAddress(rewriter, loc, op.getSmem(), op.getOffset(), atom,
                              stride);
      NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
          rewriter, loc, op.getTensorMap(), src,
          tmaCoordinates(rewriter, loc, atom * op.getAtomCols(), op.getRow(),
                         op.getHead(), op.getBatch(), op.getPackedHeads()),
          Value(), NVVM::TMAStoreMode::TILE, Value());
    }
    rewriter.eraseOp(op);
    return success();
  }
};

static bool isKernelOp(Operation *op) {
  return isa<WgmmaOp, NamedBarrierOp, RingWaitOp, RingArriveOp, RingBarrierOp,
             TmaLoadTileOp, TmaLoadPagedTileOp, TmaStoreTileOp>(op);
}

struct ConvertFA3KernelToNVVMPass
    : public fa3::impl::ConvertFA3KernelToNVVMBase<ConvertFA3KernelToNVVMPass> {
  using Base::Base;
  void runOnOperation() override {
    // Each op is rewritten where it stands, once, without folding or
    // erasing anything else: the output is the builders' IR with these ops
    // expanded, as if the builders had written the PTX themselves.
    MLIRContext *ctx = &getContext();
    RewritePatternSet set(ctx);
    set.add<WgmmaLowering, NamedBarrierLowering, RingWaitLowering,
            RingArriveLowering, RingBarrierLowering, TmaLoadTileLowering,
            TmaLoadPagedTileLowering, TmaStoreTileLowering>(ctx);
    FrozenRewritePatternSet patterns(std::move(set));
    SmallVector<Operation *> ops;
    getOperation()->walk([&](Operation *op) {
      if (isKernelOp(op))
        ops.push_back(op);
    });
    PatternRewriter rewriter(ctx);
    PatternApplicator applicator(patterns);
    applicator.applyDefaultCostModel();
    for (Operation *op : ops) {
      if (failed(applicator.matchAndRewrite(op, rewriter)))
        return signalPassFailure();
    }
    // Every kernel op must be gone: a leftover is a bug, not a slow path.
    WalkResult leftover = getOperation()->walk([](Operation *op) {
      if (isKernelOp(op)) {
        op->emitOpError() << "was not lowered to NVVM";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (leftover.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
