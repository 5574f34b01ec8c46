//===- HopperKernelBuilder.cpp - The sm_90a FP8 forward attention kernel
//----===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// Emits the FP8 (e4m3) forward of one CTA from the L0 op's spec, as an
// LLVM/NVVM-dialect kernel. (The 16-bit forward is built from the tile level
// by convert-fa3-tile-to-hopper; this builder follows until the FP8 forward
// goes through the tile level too.)
//
//   * TMA (cp.async.bulk.tensor) loads of the Q tile once and of K and V'
//     tiles on a ring of `stages` buffers, each completing on an mbarrier
//     with an expected byte count; Q and K are swizzled in shared memory in
//     atoms of 128 (64 at D = 64) bytes, V' (V transposed by the _vt kernel)
//     in one 128-key atom per row.
//   * S = Q Kᵀ with e4m3 wgmma (k32), both operands K-major from shared
//     memory; q/k descales folded into the softmax scale.
//   * The online softmax on the accumulator fragment: each thread holds two
//     rows' worth of columns; row max and row sum reduce across the 4 lanes
//     of a quad with shfl.bfly; exp2 with scale·log2(e) folded.
//   * O += P V with register-A wgmma: P·2⁸ packed to e4m3 in registers is
//     the A fragment of P V'ᵀ (V' stores its keys permuted to match).
//   * An epilogue that normalizes O (with v_descale / 2⁸), forms the LSE and
//     stores both as bf16 / f32, skipping rows past the end of the sequence.
//
// Every consumer warpgroup owns 64 query rows. Without warp specialization
// thread 0 issues the TMA loads; after each key block all consumer threads
// arrive on the stage's "empty" mbarrier and warp 0 waits for it before
// refilling that stage.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"

#include "HopperCodegen.h"

#include "fa3/Dialect/FA3/Utils/E4M3.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

/// The V' layout kernel: key slots per CTA and threads.
static constexpr int64_t kTransposeSlots = 128, kTransposeThreads = 256;
/// The named barriers of pingpong: consumer warpgroup w waits on
/// kPingpongBarrier + w (0 is __syncthreads').
static constexpr int64_t kPingpongBarrier = 1;

/// Dynamic shared memory of the forward with `queryTiles` Q tiles and
/// `outputTiles` (0 or 1) O staging tiles.
static int64_t forwardSharedMemory(const HopperAttentionSpec &spec,
                                   int64_t queryTiles, int64_t outputTiles) {
  int64_t tile = spec.elementBytes() * spec.headDim; // bytes per row
  int64_t barriers =
      8 * (queryTiles * (spec.persistent ? 2 : 1) + 4 * spec.stages);
  // Persistent: the tile index beside each Q tile.
  int64_t tileSlots = spec.persistent ? 4 * queryTiles : 0;
  return (queryTiles + outputTiles) * spec.blockM * tile +
         2 * spec.stages * spec.blockN * tile + barriers + tileSlots + 1024;
}

int64_t HopperAttentionSpec::queryBuffers() const {
  return persistent && forwardSharedMemory(*this, 2, 0) <= kMaxSharedMemory ? 2
                                                                            : 1;
}

bool HopperAttentionSpec::separateOutputTile() const {
  return persistent && !fp8 &&
         forwardSharedMemory(*this, queryBuffers(), 1) <= kMaxSharedMemory;
}

int64_t HopperAttentionSpec::sharedMemoryBytes() const {
  return forwardSharedMemory(*this, queryBuffers(),
                             separateOutputTile() ? 1 : 0);
}

std::string HopperAttentionSpec::kernelName() const {
  std::string name = "fa3_fwd_";
  name += fp8 ? "e4m3" : bf16 ? "bf16" : "f16";
  name += "_d" + std::to_string(headDim);
  name += "_h" + std::to_string(numQHeads) + "x" + std::to_string(numKVHeads);
  name += "_m" + std::to_string(blockM) + "n" + std::to_string(blockN) + "s" +
          std::to_string(stages);
  if (intraWarpgroupOverlap)
    name += "_ov";
  if (warpSpecialized())
    name += "_ws" + std::to_string(producerRegs) + "x" +
            std::to_string(consumerRegs);
  if (pingpong)
    name += "_pp";
  if (persistent)
    name += "_persistent";
  if (packedHeads > 1)
    name += "_pg" + std::to_string(packedHeads);
  if (kvCache)
    name += paged ? "_kvc_paged" : "_kvc";
  if (numSplits > 1)
    name += "_split" + std::to_string(numSplits);
  if (varlen)
    name += sequsedK ? "_varlen_used" : "_varlen";
  if (causal)
    name += "_causal";
  // Symbol names take [A-Za-z0-9_$.] only: an unbounded side is "inf".
  auto bound = [](int64_t b) {
    return b < 0 ? std::string("inf") : std::to_string(b);
  };
  if (windowLeft >= 0 || (!causal && windowRight >= 0))
    name += "_w" + bound(windowLeft) + "_" + bound(windowRight);
  if (softcap > 0)
    name += "_cap";
  if (dropout > 0)
    name += floatBitsSuffix("drop", dropout);
  // The scale is baked in; its bits keep kernels of different scales apart.
  return name + floatBitsSuffix("s", scale);
}

namespace {

/// Builds the forward kernel body.
class KernelBuilder : public HopperCodegen {
public:
  KernelBuilder(OpBuilder &b, Location loc, const HopperAttentionSpec &spec)
      : HopperCodegen(b, loc, spec.bf16 || spec.fp8, spec.fp8), s(spec) {}

  /// The FP8 form's V layout pass: V [B, Sk, Hkv, D] to V' [B, Hkv, D,
  /// roundup(Sk, block_n)], keys permuted within groups of 32 so that the S
  /// accumulator fragment, packed to e4m3, is the A fragment of P V'ᵀ.
  LLVM::LLVMFuncOp buildValueTranspose(gpu::GPUModuleOp module);

  LLVM::LLVMFuncOp build(gpu::GPUModuleOp module);

private:
  void issueKV(Value stage, Value kBlock);

  const HopperAttentionSpec &s;

  // Kernel-wide values.
  Value tmaQ, tmaK, tmaV, batch, head, kvHead;
  int64_t offQ = 0, offK = 0, offV = 0, offBar = 0;
  Value barQ() { return smemAt(ci(offBar)); }
  Value barFull(int64_t kind, Value stage) { // kind 0 = K, 1 = V, 2 = empty
    return smemAt(
        add(ci(offBar + 8 * (1 + kind * s.stages)), mul(stage, ci(8))));
  }
  int64_t tileBytes(int64_t rows) const {
    return rows * s.elementBytes() * s.headDim;
  }
  /// Columns of one 128-byte swizzle atom: 64 16-bit or 128 e4m3 values.
  int64_t atomCols() const { return rowAtom() / s.elementBytes(); }
  /// Bytes of one swizzle atom row of the Q and K tiles: 128, except for
  /// e4m3 at D = 64, whose 64-byte rows use the 64-byte swizzle.
  int64_t rowAtom() const {
    return std::min<int64_t>(kAtomBytes, s.headDim * s.elementBytes());
  }
  /// A K-major wgmma descriptor of a Q or K tile at `addr`: 8-row groups of
  /// one atom row each.
  Value qkDescriptor(Value addr) {
    return descriptor(addr, 16, 8 * rowAtom(), rowAtom());
  }
};

} // namespace

/// Thread 0: load key block `kBlock` of K and V into ring slot `stage`.
void KernelBuilder::issueKV(Value stage, Value kBlock) {
  Value row = mul(kBlock, ci(s.blockN));
  int64_t bytes = tileBytes(s.blockN);
  for (auto [kind, map, base] :
       {std::tuple<int64_t, Value, int64_t>{0, tmaK, offK}, {1, tmaV, offV}}) {
    Value bar = barFull(kind, stage);
    expectTx(bar, bytes);
    Value tile = add(ci(base), mul(stage, ci(bytes)));
    if (kind == 1) {
      // V'ᵀ: D rows of block_n = 128 keys (one atom), keys innermost.
      tmaLoad(smemAt(tile), map, {row, ci(0), kvHead, batch}, bar);
      continue;
    }
    for (int64_t atom = 0; atom < s.headDim / atomCols(); ++atom) {
      Value dst = smemAt(add(tile, ci(atom * s.blockN * rowAtom())));
      tmaLoad(dst, map, {ci(atom * atomCols()), row, kvHead, batch}, bar);
    }
  }
}

LLVM::LLVMFuncOp KernelBuilder::build(gpu::GPUModuleOp module) {
  MLIRContext *ctx = b.getContext();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());

  declareDynamicSmem(module);

  // Q, K, V' tensor maps, O, LSE, the three descale arrays ([B, Hkv] f32),
  // Sq, Sk.
  SmallVector<Type> params = {genericPtr, genericPtr, genericPtr, globalPtr,
                              globalPtr,  globalPtr,  globalPtr,  globalPtr,
                              i32,        i32};
  auto fnType =
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), params);
  auto fn = LLVM::LLVMFuncOp::create(b, loc, s.kernelName(), fnType);
  fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
              b.getDenseI32ArrayAttr({int32_t(s.numThreads()), 1, 1}));
  passTensorMapsByValue(fn, 3);
  for (unsigned i = 3; i < 5; ++i)
    fn.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());

  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  tmaQ = entry->getArgument(0);
  tmaK = entry->getArgument(1);
  tmaV = entry->getArgument(2);
  Value outPtr = entry->getArgument(3), lsePtr = entry->getArgument(4);
  Value seqQ = entry->getArgument(8), seqK = entry->getArgument(9);

  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value qBlock = NVVM::BlockIdXOp::create(b, loc, i32);
  head = NVVM::BlockIdYOp::create(b, loc, i32);
  batch = NVVM::BlockIdZOp::create(b, loc, i32);
  kvHead = divu(head, ci(s.numQHeads / s.numKVHeads));
  Value wg = divu(tid, ci(128));
  Value warp = divu(remu(tid, ci(128)), ci(32));
  Value lane = remu(tid, ci(32));

  // The softmax scale in log2 units, and the factor O gets in the epilogue:
  // q_descale · k_descale fold into the former, v_descale / 2^8 (P is scaled
  // by 2^8 before its e4m3 cast) into the latter.
  Value idx = add(mul(batch, ci(s.numKVHeads)), kvHead);
  auto loadDescale = [&](unsigned arg) -> Value {
    Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, f32,
                                    entry->getArgument(arg), ValueRange{idx});
    return LLVM::LoadOp::create(b, loc, f32, ptr, /*alignment=*/4);
  };
  Value scaleQK = fmul(cf(s.scale), fmul(loadDescale(5), loadDescale(6)));
  Value outScale = fmul(loadDescale(7), cf(1.0f / kFP8ProbsScale));
  Value cLog2 = fmul(scaleQK, cf(static_cast<float>(M_LOG2E)));

  setAlignedDynamicSmem();
  offQ = 0;
  offK = tileBytes(s.blockM);
  offV = offK + s.stages * tileBytes(s.blockN);
  offBar = offV + s.stages * tileBytes(s.blockN);

  Value isThread0 = cmp(arith::CmpIPredicate::eq, tid, ci(0));
  scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
    barrierInit(barQ(), 1);
    for (int64_t st = 0; st < s.stages; ++st) {
      barrierInit(barFull(0, ci(st)), 1);
      barrierInit(barFull(1, ci(st)), 1);
      barrierInit(barFull(2, ci(st)), s.numConsumerThreads());
    }
    NVVM::FenceMbarrierInitOp::create(b, loc);
    scf::YieldOp::create(b, loc);
  });
  NVVM::Barrier0Op::create(b, loc);

  // The key blocks this query tile can see (as in fa3-fuse-softmax).
  Value qStart = mul(qBlock, ci(s.blockM));
  Value offset = sub(seqK, seqQ);
  Value qLast = sub(minsi(add(qStart, ci(s.blockM)), seqQ), ci(1));
  // The spec holds the resolved window (causal already folded into right).
  int64_t left = s.windowLeft, right = s.windowRight;
  Value kLo = ci(0), kHi = seqK;
  if (right >= 0)
    kHi = minsi(seqK, add(add(qLast, offset), ci(right + 1)));
  if (left >= 0)
    kLo = maxsi(ci(0), sub(add(qStart, offset), ci(left)));
  kHi = maxsi(kHi, ci(0));
  Value blockLo = divu(kLo, ci(s.blockN));
  Value blockHi = divu(add(kHi, ci(s.blockN - 1)), ci(s.blockN));
  Value numBlocks = maxsi(sub(blockHi, blockLo), ci(0));

  // One consumer warpgroup `wg` (0-based among the consumers): its 64 query
  // rows' loop over the key blocks and the epilogue.
  auto buildConsumer = [&](Value wg) {
    waitParity(barQ(), ci(0));

    // Fragment coordinates: this thread's two rows in the tile and the first
    // of its column pairs in each 8-column block.
    Value rowInTile =
        add(add(mul(wg, ci(64)), mul(warp, ci(16))), divu(lane, ci(4)));
    Value rowAbs[2] = {add(qStart, rowInTile),
                       add(qStart, add(rowInTile, ci(8)))};
    Value colInBlock = mul(remu(lane, ci(4)), ci(2));

    float negInf = -std::numeric_limits<float>::infinity();
    int64_t nS = s.blockN / 2, nO = s.headDim / 2;

    SmallVector<Value> init = {cf(negInf), cf(negInf), cf(0), cf(0)};
    for (int64_t i = 0; i < nO; ++i)
      init.push_back(cf(0));

    Value qTileAddr = add(smemAddr(smem), ci(offQ));
    Value qWgAddr = add(qTileAddr, mul(wg, ci(64 * rowAtom())));

    // The steps of one key block `it` (0-based from blockLo). Each issues its
    // wgmmas and commits them; the caller decides when to wait, which is what
    // the overlapped schedule changes.
    auto slotOf = [&](Value it) {
      return std::make_pair(remu(it, ci(s.stages)),
                            andi(divu(it, ci(s.stages)), ci(1)));
    };

    // Pingpong: a consumer's wgmmas of one step are issued between
    // takeTurn() (wait on its own named barrier) and passTurn() (arrive on the
    // other consumer's), so the two warpgroups' GEMMs alternate. Both named
    // barriers count 256 threads: 128 waiting plus 128 arriving.
    Value otherWg = sub(ci(1), wg);
    auto takeTurn = [&] {
      if (s.pingpong)
        namedBarrierSync(add(wg, ci(kPingpongBarrier)), 256);
    };
    auto passTurn = [&] {
      if (s.pingpong)
        namedBarrierArrive(add(otherWg, ci(kPingpongBarrier)), 256);
    };
    enum Turn { kNoTurn = 0, kTake = 1, kPass = 2, kWhole = 3 };

    // S = Q Kᵀ for block `it`.
    auto issueQK = [&](Value it, int turn) {
      auto [stage, parity] = slotOf(it);
      waitParity(barFull(0, stage), parity);
      if (turn & kTake)
        takeTurn();
      Value kTileAddr = add(add(smemAddr(smem), ci(offK)),
                            mul(stage, ci(tileBytes(s.blockN))));
      SmallVector<Value> sAcc(nS, cf(0));
      NVVM::WgmmaFenceAlignedOp::create(b, loc);
      // One wgmma K step is 32 bytes of a 128-byte atom row for either type.
      for (int64_t k = 0; k < s.headDim / mmaK(); ++k) {
        int64_t atom = k / 4, inAtom = (k % 4) * 32;
        Value a = qkDescriptor(
            add(qWgAddr, ci(atom * s.blockM * rowAtom() + inAtom)));
        Value bd = qkDescriptor(
            add(kTileAddr, ci(atom * s.blockN * rowAtom() + inAtom)));
        sAcc = wgmmaSS(sAcc, a, bd, /*accumulate=*/k > 0);
      }
      NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
      if (turn & kPass)
        passTurn();
      return sAcc;
    };

    // Softcap, mask (boundary blocks only) and the online-softmax update of
    // the running max and sum; returns P and the correction factors.
    struct SoftmaxStep {
      SmallVector<Value> p;
      Value m[2], l[2], alpha[2];
    };
    auto softmax = [&](SmallVector<Value> sAcc, Value it, const Value *mOld,
                       const Value *lOld) {
      Value kStart = mul(add(blockLo, it), ci(s.blockN));
      if (s.softcap > 0) {
        Value in = cf(s.scale / s.softcap), out = cf(s.softcap / s.scale);
        for (Value &v : sAcc)
          v = fmul(ptxUnary("tanh.approx.f32 $0, $1;", fmul(v, in)), out);
      }
      // Mask only key blocks that cross the end of the keys, the diagonal or
      // a window edge.
      Value needMask = blockNeedsMask(qStart, qLast, kStart, s.blockN, seqK,
                                      offset, left, right);
      SmallVector<Value> sv = maskFragment(sAcc, needMask, [&](int64_t r) {
        Value row = rowAbs[(r % 4) / 2];
        Value col = add(add(kStart, ci((r / 4) * 8 + r % 2)), colInBlock);
        return keyHidden(row, col, seqK, offset, left, right);
      });

      // Rows 0 and 1 of this thread; a row's values sit in the 4 lanes of a
      // quad. The sum stays per thread until the epilogue.
      SoftmaxStep step;
      Value mScaled[2];
      for (int64_t row = 0; row < 2; ++row) {
        Value mx = mOld[row];
        for (int64_t r = 0; r < nS; ++r)
          if ((r % 4) / 2 == row)
            mx = fmax(mx, sv[r]);
        step.m[row] = quadReduce(mx, /*isMax=*/true);
        Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                            step.m[row], cf(negInf));
        mScaled[row] = fmul(select(empty, cf(0), step.m[row]), cLog2);
        step.alpha[row] = exp2(fsub(fmul(mOld[row], cLog2), mScaled[row]));
      }
      step.p.resize(nS);
      Value rowSum[2] = {cf(0), cf(0)};
      for (int64_t r = 0; r < nS; ++r) {
        int64_t row = (r % 4) / 2;
        step.p[r] = exp2(fsub(fmul(sv[r], cLog2), mScaled[row]));
        rowSum[row] = fadd(rowSum[row], step.p[r]);
      }
      for (int64_t row = 0; row < 2; ++row)
        step.l[row] = fadd(fmul(lOld[row], step.alpha[row]), rowSum[row]);
      return step;
    };

    // P as the A operand of O += P V'ᵀ: the e4m3 A fragment of k-chunk c
    // (32 keys): register i holds 4 keys of row r (i even) or r + 8 (i odd),
    // keys 4t..4t+3 (i < 2) or 16+4t..16+4t+3. The S registers 16c ..
    // 16c+15 hold keys {2t, 2t+1} + 8j instead; V' stores its keys permuted
    // to match, so the bytes are taken in register order. P is scaled by
    // 2^8 first.
    auto packP = [&](ArrayRef<Value> p) {
      SmallVector<Value> packed;
      for (int64_t c = 0; c < s.blockN / 32; ++c) {
        int64_t base = 16 * c;
        auto q = [&](int64_t i) {
          return fmul(p[base + i], cf(kFP8ProbsScale));
        };
        packed.append({packE4M3(q(0), q(1), q(4), q(5)),
                       packE4M3(q(2), q(3), q(6), q(7)),
                       packE4M3(q(8), q(9), q(12), q(13)),
                       packE4M3(q(10), q(11), q(14), q(15))});
      }
      return packed;
    };

    // O += P V for block `it`, P packed (packP) in registers; the registers
    // are written before the fence, as wgmma requires.
    auto issuePV = [&](ArrayRef<Value> packed, SmallVector<Value> o, Value it,
                       int turn) {
      auto [stage, parity] = slotOf(it);
      SmallVector<SmallVector<Value>> aFrags;
      for (size_t i = 0; i < packed.size(); i += 4)
        aFrags.push_back(SmallVector<Value>(packed.begin() + i,
                                            packed.begin() + i + 4));
      waitParity(barFull(1, stage), parity);
      if (turn & kTake)
        takeTurn();
      Value vTileAddr = add(add(smemAddr(smem), ci(offV)),
                            mul(stage, ci(tileBytes(s.blockN))));
      NVVM::WgmmaFenceAlignedOp::create(b, loc);
      for (int64_t k = 0; k < s.blockN / mmaK(); ++k) {
        // V'ᵀ K-major (D rows of 128 keys), 32 keys = 32 bytes per step.
        Value bd = descriptor(add(vTileAddr, ci(k * 32)), 16, 1024);
        o = wgmmaRS(o, aFrags[k], bd);
      }
      NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
      if (turn & kPass)
        passTurn();
      return o;
    };

    // After block `it`'s wgmmas completed: release its ring slot. With a
    // producer warpgroup that is all; otherwise warp 0 refills the slot once
    // every thread is done.
    auto release = [&](Value it) {
      auto [stage, parity] = slotOf(it);
      arrive(barFull(2, stage));
      if (s.warpSpecialized())
        return;
      Value next = add(it, ci(s.stages));
      Value refill = andi(cmp(arith::CmpIPredicate::ult, tid, ci(32)),
                          cmp(arith::CmpIPredicate::slt, next, numBlocks));
      scf::IfOp::create(b, loc, refill, [&](OpBuilder &, Location) {
        waitParity(barFull(2, stage), parity);
        scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
          issueKV(stage, add(blockLo, next));
          scf::YieldOp::create(b, loc);
        });
        scf::YieldOp::create(b, loc);
      });
    };
    auto waitGroups = [&](int64_t pending) {
      NVVM::WgmmaWaitGroupSyncOp::create(b, loc, pending);
    };
    auto rescale = [&](SmallVector<Value> &o, const Value *alpha) {
      for (int64_t r = 0; r < nO; ++r)
        o[r] = fmul(o[r], alpha[(r % 4) / 2]);
    };

    // Pingpong: consumer 0 goes first (an arrive on its own barrier that its
    // first takeTurn() completes).
    if (s.pingpong) {
      Value first = cmp(arith::CmpIPredicate::eq, wg, ci(0));
      scf::IfOp::create(b, loc, first, [&](OpBuilder &, Location) {
        namedBarrierArrive(ci(kPingpongBarrier), 256);
        scf::YieldOp::create(b, loc);
      });
    }

    // One block at a time: QKᵀ, wait, softmax, PV, wait (the FP8 schedule
    // has no intra-warpgroup overlap).
    SmallVector<Value> results;
    auto loop = scf::ForOp::create(
        b, loc, ci(0), numBlocks, ci(1), init,
        [&](OpBuilder &, Location, Value it, ValueRange iters) {
          // Pingpong orders the QKᵀ issues; PV runs in the other's turn.
          SmallVector<Value> sAcc = issueQK(it, kWhole);
          waitGroups(0);
          Value mOld[2] = {iters[0], iters[1]}, lOld[2] = {iters[2], iters[3]};
          SoftmaxStep step = softmax(sAcc, it, mOld, lOld);
          SmallVector<Value> o(iters.begin() + 4, iters.end());
          rescale(o, step.alpha);
          o = issuePV(packP(step.p), o, it, kNoTurn);
          waitGroups(0);
          release(it);
          SmallVector<Value> yields = {step.m[0], step.m[1], step.l[0],
                                       step.l[1]};
          yields.append(o);
          scf::YieldOp::create(b, loc, yields);
        });
    results.assign(loop.getResults().begin(), loop.getResults().end());

    // Pingpong: consumer 0's last wait takes consumer 1's last arrive, so
    // both named barriers end with every phase complete.
    if (s.pingpong) {
      Value first = cmp(arith::CmpIPredicate::eq, wg, ci(0));
      scf::IfOp::create(b, loc, first, [&](OpBuilder &, Location) {
        takeTurn();
        scf::YieldOp::create(b, loc);
      });
    }

    // Epilogue: O · outScale / l and LSE = scale · m + ln(l).
    SmallVector<Value> &res = results;
    Value inv[2], lse[2];
    for (int64_t row = 0; row < 2; ++row)
      std::tie(inv[row], lse[row]) = finalizeRow(
          res[row], res[2 + row], [&] { return outScale; },
          [&] { return scaleQK; });
    for (int64_t row = 0; row < 2; ++row) {
      Value inside = cmp(arith::CmpIPredicate::slt, rowAbs[row], seqQ);
      scf::IfOp::create(b, loc, inside, [&](OpBuilder &, Location) {
        // O[b, row, h, :] at ((b * Sq + row) * Hq + h) * D elements.
        Value rowIndex =
            add(mul(add(mul(sext64(batch), sext64(seqQ)), sext64(rowAbs[row])),
                    cl(s.numQHeads)),
                sext64(head));
        Value rowBase = mul(rowIndex, cl(s.headDim * 2));
        for (int64_t j = 0; j < s.headDim / 8; ++j) {
          int64_t r = 4 * j + 2 * row;
          Value packed =
              pack(fmul(res[4 + r], inv[row]), fmul(res[4 + r + 1], inv[row]));
          Value byte =
              add(rowBase, zext64(mul(add(ci(j * 8), colInBlock), ci(2))));
          Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, b.getI8Type(),
                                          outPtr, ValueRange{byte});
          LLVM::StoreOp::create(b, loc, packed, ptr, /*alignment=*/4);
        }
        Value lane0 = cmp(arith::CmpIPredicate::eq, remu(lane, ci(4)), ci(0));
        scf::IfOp::create(b, loc, lane0, [&](OpBuilder &, Location) {
          Value idx =
              add(mul(add(mul(sext64(batch), cl(s.numQHeads)), sext64(head)),
                      sext64(seqQ)),
                  sext64(rowAbs[row]));
          Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, f32, lsePtr,
                                          ValueRange{idx});
          LLVM::StoreOp::create(b, loc, lse[row], ptr, /*alignment=*/4);
          scf::YieldOp::create(b, loc);
        });
        scf::YieldOp::create(b, loc);
      });
    }
  };

  auto loadQ = [&] {
    expectTx(barQ(), tileBytes(s.blockM));
    for (int64_t atom = 0; atom < s.headDim / atomCols(); ++atom)
      tmaLoad(smemAt(ci(offQ + atom * s.blockM * rowAtom())), tmaQ,
              {ci(atom * atomCols()), qStart, head, batch}, barQ());
  };
  if (!s.warpSpecialized()) {
    // Prologue: Q, then the first `stages` key blocks; the consumers refill
    // the ring themselves (see `release`).
    scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
      loadQ();
      for (int64_t st = 0; st < s.stages; ++st) {
        Value has = cmp(arith::CmpIPredicate::slt, ci(st), numBlocks);
        scf::IfOp::create(b, loc, has, [&](OpBuilder &, Location) {
          issueKV(ci(st), add(blockLo, ci(st)));
          scf::YieldOp::create(b, loc);
        });
      }
      scf::YieldOp::create(b, loc);
    });
    buildConsumer(wg);
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
            loadQ();
            // Block `it` goes into slot it % stages once the consumers have
            // released that slot's previous block (it - stages).
            scf::ForOp::create(
                b, loc, ci(0), numBlocks, ci(1), ValueRange(),
                [&](OpBuilder &, Location, Value it, ValueRange) {
                  Value stage = remu(it, ci(s.stages));
                  Value parity = andi(divu(it, ci(s.stages)), ci(1));
                  Value reused = cmp(arith::CmpIPredicate::uge, it,
                                     ci(s.stages));
                  scf::IfOp::create(b, loc, reused, [&](OpBuilder &, Location) {
                    waitParity(barFull(2, stage), xori(parity, ci(1)));
                    scf::YieldOp::create(b, loc);
                  });
                  issueKV(stage, add(blockLo, it));
                  scf::YieldOp::create(b, loc);
                });
            scf::YieldOp::create(b, loc);
          });
          scf::YieldOp::create(b, loc);
        },
        [&](OpBuilder &, Location) {
          NVVM::SetMaxRegisterOp::create(b, loc, s.consumerRegs,
                                         NVVM::SetMaxRegisterAction::increase);
          buildConsumer(sub(wg, ci(1)));
          scf::YieldOp::create(b, loc);
        });
  }
  LLVM::ReturnOp::create(b, loc, ValueRange());
  return fn;
}

LLVM::LLVMFuncOp KernelBuilder::buildValueTranspose(gpu::GPUModuleOp module) {
  OpBuilder::InsertionGuard guard(b);
  declareDynamicSmem(module);
  b.setInsertionPointToEnd(module.getBody());
  auto fnType = LLVM::LLVMFunctionType::get(
      LLVM::LLVMVoidType::get(b.getContext()), {globalPtr, globalPtr, i32, i32});
  auto fn = LLVM::LLVMFuncOp::create(b, loc, s.valueTransposeKernelName(),
                                     fnType);
  fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
              b.getDenseI32ArrayAttr({int32_t(kTransposeThreads), 1, 1}));
  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  Value src = entry->getArgument(0), dst = entry->getArgument(1);
  Value seqK = entry->getArgument(2), seqPad = entry->getArgument(3);
  // One CTA per block of 128 key slots of one (batch, kv head): the 128
  // source rows go through shared memory (rows padded by 4 bytes so that the
  // column reads of phase 2 hit distinct banks), so that both the reads of V
  // (D bytes per key) and the writes of V' (128 slots per row) are
  // coalesced 4-byte accesses.
  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value slot0 = mul(NVVM::BlockIdXOp::create(b, loc, i32), ci(kTransposeSlots));
  Value h = NVVM::BlockIdYOp::create(b, loc, i32);
  Value bIdx = NVVM::BlockIdZOp::create(b, loc, i32);
  Value raw = LLVM::AddressOfOp::create(b, loc, smemPtr, kDynamicSmemName);
  const int64_t d = s.headDim, pitch = d + 4, words = d / 4;
  Type i8 = b.getI8Type();

  // Phase 1: V[b, slot0 + r, h, :] -> tile row r (zeros past Sk).
  for (int64_t i = 0; i < kTransposeSlots * words / kTransposeThreads; ++i) {
    Value item = add(tid, ci(i * kTransposeThreads));
    Value row = divu(item, ci(words)), word = remu(item, ci(words));
    Value key = add(slot0, row);
    Value inside = cmp(arith::CmpIPredicate::slt, key, seqK);
    auto loaded = scf::IfOp::create(b, loc, TypeRange{i32}, inside,
                                    /*addElseBlock=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loaded.thenBlock());
      Value idx = add(mul(add(mul(add(mul(sext64(bIdx), sext64(seqK)),
                                      sext64(key)),
                                  cl(s.numKVHeads)),
                              sext64(h)),
                          cl(d)),
                      zext64(mul(word, ci(4))));
      Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, i8, src,
                                      ValueRange{idx});
      scf::YieldOp::create(
          b, loc, ValueRange{LLVM::LoadOp::create(b, loc, i32, ptr, 4)});
      b.setInsertionPointToStart(loaded.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{ci(0)});
    }
    Value at = add(mul(row, ci(pitch)), mul(word, ci(4)));
    LLVM::StoreOp::create(
        b, loc, loaded.getResult(0),
        LLVM::GEPOp::create(b, loc, smemPtr, i8, raw, ValueRange{at}), 4);
  }
  NVVM::Barrier0Op::create(b, loc);

  // Phase 2: V'[b, h, c, slot0 + 4g .. +3] from tile rows π(4g + v), column
  // c. Slot a = 32q + 16u + 4t + v holds key 32q + 16u + 2t + (v & 1) +
  // 8 (v >> 1) (see the A-fragment packing in the kernel).
  for (int64_t i = 0; i < d * (kTransposeSlots / 4) / kTransposeThreads; ++i) {
    Value item = add(tid, ci(i * kTransposeThreads));
    Value col = divu(item, ci(kTransposeSlots / 4));
    Value group = remu(item, ci(kTransposeSlots / 4));
    Value packed = ci(0);
    for (int64_t v = 0; v < 4; ++v) {
      Value slot = add(mul(group, ci(4)), ci(v));
      Value j = remu(slot, ci(32));
      Value key = add(add(sub(slot, j), mul(divu(j, ci(16)), ci(16))),
                      ci(0));
      key = add(key, add(mul(divu(remu(j, ci(16)), ci(4)), ci(2)),
                         ci((v & 1) + 8 * (v >> 1))));
      Value at = add(mul(key, ci(pitch)), col);
      Value byte = LLVM::LoadOp::create(
          b, loc, i8, LLVM::GEPOp::create(b, loc, smemPtr, i8, raw,
                                          ValueRange{at}));
      Value wide = arith::ExtUIOp::create(b, loc, i32, byte);
      packed = ori(packed, arith::ShLIOp::create(b, loc, wide, ci(8 * v)));
    }
    Value out = add(mul(add(mul(add(mul(sext64(bIdx), cl(s.numKVHeads)),
                                    sext64(h)),
                                cl(d)),
                            zext64(col)),
                        sext64(seqPad)),
                    zext64(add(slot0, mul(group, ci(4)))));
    LLVM::StoreOp::create(
        b, loc, packed,
        LLVM::GEPOp::create(b, loc, globalPtr, i8, dst, ValueRange{out}), 4);
  }
  LLVM::ReturnOp::create(b, loc, ValueRange());
  return fn;
}

LLVM::LLVMFuncOp
mlir::fa3::buildHopperAttentionKernel(OpBuilder &builder,
                                      gpu::GPUModuleOp module,
                                      const HopperAttentionSpec &spec) {
  KernelBuilder kb(builder, module.getLoc(), spec);
  if (spec.fp8)
    kb.buildValueTranspose(module);
  return kb.build(module);
}
