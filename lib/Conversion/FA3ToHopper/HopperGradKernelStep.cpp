//===- HopperGradKernelStep.cpp - One step of the backward's main kernel --===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// A consumer warpgroup's step of the backward's main kernel (one query
// block of one query head against the CTA's key block), emitted op by op
// from the key grid's step at the tile level: each tile op becomes the
// code of its GradKernelBuilder method, each MMA a committed wgmma group
// waited for where an op first reads its result.
//
//===----------------------------------------------------------------------===//

#include "GradKernelBuilder.h"
#include "TileKernel.h"

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

void GradKernelBuilder::emitStep(const MainKernel &k, Value it,
                                 ValueRange iters) {
  const GradSmemLayout layout(s, s.dsBuffers(), s.dQThroughSharedMemory());
  const int64_t bm = s.blockM, bn = s.blockN, tile = layout.rowBytes;
  const int64_t offK = layout.k, offQ = layout.q, offDO = layout.dO;
  const int64_t offDS = layout.dS, offP = layout.p, offStats = layout.stats;
  const int64_t offDQ = layout.dQ, dsTileBytes = layout.dsTileBytes;
  const int64_t sliceW = s.sliceWidth(), nAcc = sliceW / 2;
  const bool splitQueries = s.splitQueryColumns();
  const int64_t qCols = splitQueries ? bm / 2 : bm, nS = qCols / 2;
  const bool viaSmem = s.dQThroughSharedMemory(), producer = s.hasProducer();
  const int64_t left = s.windowLeft, right = s.windowRight;
  // The step's tile ops, emitted one by one in the IR's order (which
  // fa3-grad-mma-order made FA3's and matchGradKeyGrid checked); `iters`
  // are the query loop's carried values (dK, then dV), nAcc registers each.
  Block &stepOps = keyGrid.stepBody();
  auto kernelFunc = stepOps.getParentOp()->getParentOfType<func::FuncOp>();
  // dSᵀ as dQ's fa3.pv reads it (and so as the shared tile holds it).
  Value dsOfStep = (*stepOps.getOps<PVOp>().begin()).getProbs();
  Value stage = remu(it, ci(s.stages));
  Value parity = andi(divu(it, ci(s.stages)), ci(1));
  auto [head, qStart] = k.stepOf(it);
  // Each IR value of the step as this thread's registers.
  DenseMap<Value, SmallVector<Value>> regs;
  for (auto [i, carried] : llvm::enumerate(stepOps.getArguments().drop_front()))
    regs[carried] = SmallVector<Value>(iters.begin() + i * nAcc,
                                       iters.begin() + (i + 1) * nAcc);

  // The committed wgmma groups not yet waited for, oldest first: an
  // op waits for the groups of the MMA results it reads, and with
  // them for every older one.
  SmallVector<Value> pending;
  auto commitGroup = [&](Value result) { pending.push_back(result); };
  auto waitFor = [&](Value result) {
    auto at = llvm::find(pending, result);
    if (at == pending.end())
      return;
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, pending.end() - at - 1);
    pending.erase(pending.begin(), at + 1);
  };

  // The ring slot's tiles: the first ring op waits for them to land.
  bool landed = false;
  Value qRowsOff, qAddr, qColsAddr, doAddr, doColsAddr;
  auto land = [&] {
    if (landed)
      return;
    waitParity(k.barFull(stage), parity);
    landed = true;
    // This warpgroup's query rows of the Q and dO tiles (whole 8-row
    // swizzle atoms).
    qRowsOff = mul(k.qCol0, ci(kAtomBytes));
  };
  // LSE₂ and Δ of this thread's query columns, from shared memory.
  Value statsPtr, statCol;
  auto statistics = [&] {
    if (statsPtr)
      return;
    statsPtr = smemAt(add(ci(offStats), mul(stage, ci(8 * bm))));
    statCol = mul(add(k.qCol0, k.colInBlock), ci(4));
  };
  // Dropout's keep factors (one mask for Pᵀ and dPᵀ), and the dPᵀ
  // that fa3.dropout scales by them (applied in fa3.softmax_grad).
  SmallVector<Value> keepScale;
  DenseMap<Value, Value> droppedGradProbs;

  // The step's Pᵀ and dSᵀ tiles in shared memory: row = key, 64 query
  // columns = one 128-byte swizzled row (exactly the K-major layout of
  // A for dV += Pᵀ dO and dK += dSᵀ Q, and the MN-major one of dS for
  // dQ). With two buffers, step it's were last read by step it − 2's
  // wgmmas, which every warpgroup has waited for before it reached
  // step it − 1's barrier below; with one, every warpgroup must first
  // be done with the previous step's (a barrier before the stores).
  bool doubleDS = s.dsBuffers() == 2;
  Value dsOff, dsAddr, pAddr, sliceOff;
  auto sharedTiles = [&] {
    if (dsOff)
      return;
    dsOff = doubleDS ? mul(andi(it, ci(1)), ci(dsTileBytes)) : ci(0);
    dsAddr = add(k.dsBase, dsOff);
    pAddr = add(k.pBase, dsOff);
    sliceOff = mul(k.slice, ci((sliceW / kAtomCols) * bm * kAtomBytes));
  };
  auto packFragments = [&](ArrayRef<Value> values) {
    SmallVector<SmallVector<Value>> frag;
    for (int64_t k = 0; k < qCols / 16; ++k)
      frag.push_back(packAFragment(values, k));
    return frag;
  };
  // dV += Pᵀ dO and dK += dSᵀ Q over this warpgroup's head-dim slice,
  // dO and Q read MN-major. A warpgroup that owns its key rows holds
  // all of Pᵀ and dSᵀ and reads A from registers; where the
  // warpgroups split the query columns, A is read from the shared
  // tiles after the barrier.
  auto descMNMajor = [&](Value tileAddr, int64_t k) {
    return descriptor(add(add(tileAddr, sliceOff), ci(k * 16 * kAtomBytes)),
                      bm * kAtomBytes, 1024);
  };
  // k-chunk k (16 query columns) of a Pᵀ or dSᵀ tile, K-major.
  auto descKMajor = [&](Value tileAddr, int64_t k) {
    return descriptor(
        add(tileAddr, ci((k / 4) * bn * kAtomBytes + (k % 4) * 32)), 16, 1024);
  };
  auto issueKeyProduct = [&](SmallVector<Value> acc,
                             ArrayRef<SmallVector<Value>> frag, Value tileAddr,
                             Value operandAddr) {
    for (int64_t k = 0; k < bm / 16; ++k)
      acc = splitQueries
                ? wgmmaSS(acc, descKMajor(tileAddr, k),
                          descMNMajor(operandAddr, k), /*accumulate=*/true,
                          /*transA=*/false, /*transB=*/true)
                : wgmmaRS(acc, frag[k], descMNMajor(operandAddr, k));
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    return acc;
  };

  // dSᵀ (what dQ's fa3.pv reads; Pᵀ ∘ Z too where the warpgroups split
  // the query columns) published in shared memory, once per step.
  // The previous step's bulk reduces have read their staging buffers
  // before anyone of the warpgroup writes them again (after the
  // barrier that follows the stores).
  SmallVector<SmallVector<Value>> pFrag, dsFrag;
  bool published = false;
  auto waitStagingRead = [&] {
    if (!viaSmem)
      return;
    scf::IfOp::create(b, loc, k.isIssuer, [&](OpBuilder &, Location) {
      ptxVoid("cp.async.bulk.wait_group.read 0;", "", {});
      scf::YieldOp::create(b, loc);
    });
  };
  auto storeTile = [&](ArrayRef<SmallVector<Value>> frag, int64_t tileOffset) {
    storeTransposedTile(frag, add(ci(tileOffset), dsOff), k.slab, k.rowInSlab,
                        k.qCol0, k.lane);
  };
  auto publish = [&] {
    if (published)
      return;
    published = true;
    dsFrag = packFragments(regs.lookup(dsOfStep));
    if (!doubleDS) {
      waitStagingRead();
      namedBarrier(1, s.numConsumerThreads());
    }
    if (splitQueries)
      storeTile(pFrag, offP);
    storeTile(dsFrag, offDS);
    fenceProxyAsyncShared();
    if (doubleDS)
      waitStagingRead();
    namedBarrier(1, s.numConsumerThreads());
  };

  // dQ's chunks: the first is issued by fa3.pv, the rest by
  // fa3.accumulate_tile as it adds the one before (dK's wgmmas run
  // while the first is added). Deterministic: the key blocks add their
  // dQ partials of (head, query block) in key-block order.
  SmallVector<Value> dqChunk;
  Value turnPtr;
  auto dqAccRow = [&] {
    return k.statIndex(head, add(qStart, mul(k.dqShare.qBlock, ci(64))));
  };

  for (Operation &op : stepOps) {
    if (isKernelScalar(&op, kernelFunc) ||
        (op.getNumResults() == 1 && splatValue(op.getResult(0))))
      continue;
    if (auto load = dyn_cast<LoadTileOp>(op)) {
      land();
      if (gradStepTileOf(load.getResult(), kernelFunc) == GradStepTile::Query) {
        qAddr = add(add(k.base, ci(offQ)), mul(stage, ci(bm * tile)));
        qColsAddr = add(qAddr, qRowsOff);
      } else {
        doAddr = add(add(k.base, ci(offDO)), mul(stage, ci(bm * tile)));
        doColsAddr = add(doAddr, qRowsOff);
      }
    } else if (isa<LoadStatsOp>(op)) {
      // Read at their first use (fa3.recompute_probs).
      land();
    } else if (auto qk = dyn_cast<QKOp>(op)) {
      // Sᵀ = K Qᵀ or dPᵀ = V dOᵀ, K-major operands. The first wgmma
      // ignores its accumulator (scale-d = 0): undefined inputs need
      // no register moves between wgmmas. Each commits its own group:
      // Pᵀ = exp2(…) needs only Sᵀ and runs while dPᵀ's wgmmas do.
      bool isS =
          gradStepTileOf(qk.getQuery(), kernelFunc) == GradStepTile::Query;
      regs[qk.getResult()] = transposedProductChain(
          isS ? k.kSlabAddr : k.vSlabAddr, isS ? qColsAddr : doColsAddr,
          SmallVector<Value>(nS, LLVM::UndefOp::create(b, loc, f32)));
      commitGroup(qk.getResult());
    } else if (auto softcap = dyn_cast<SoftcapOp>(op)) {
      waitFor(softcap.getScores());
      SmallVector<Value> v = regs.lookup(softcap.getScores());
      float scale = softcap.getScale().convertToFloat();
      float cap = softcap.getSoftcap().convertToFloat();
      Value in = cf(scale / cap), out = cf(cap / scale);
      for (Value &x : v)
        x = fmul(ptxUnary("tanh.approx.f32 $0, $1;", fmul(x, in)), out);
      regs[softcap.getResult()] = v;
    } else if (auto maskIf = dyn_cast<scf::IfOp>(op)) {
      // The key grid's scf.if around fa3.mask: mask only blocks that
      // cross the end of the keys, the diagonal or a window edge.
      MaskOp mask = *maskIf.thenBlock()->getOps<MaskOp>().begin();
      waitFor(mask.getScores());
      Value needMask = keyGrid.needsMask(b, divu(it, k.perHead),
                                         add(k.qbLo, remu(it, k.perHead)));
      regs[maskIf.getResult(0)] =
          maskFragment(regs.lookup(mask.getScores()), needMask, [&](int64_t r) {
            Value key = k.keyRow[(r % 4) / 2];
            Value query =
                add(add(add(qStart, k.qCol0), ci((r / 4) * 8 + r % 2)),
                    k.colInBlock);
            return keyHidden(query, key, k.seqK, k.offset, left, right);
          });
    } else if (auto probs = dyn_cast<RecomputeProbsOp>(op)) {
      waitFor(probs.getScores());
      statistics();
      regs[probs.getResult()] = recomputeProbs(
          regs.lookup(probs.getScores()), probs.getExp2Scale().convertToFloat(),
          statsPtr, statCol);
    } else if (auto drop = dyn_cast<DropoutOp>(op)) {
      // Dropout (FlashAttention-2's backward): dV takes Pᵀ ∘ Z and dSᵀ
      // = Pᵀ ∘ (Z ∘ dPᵀ − Δ), Z regenerated (from Pᵀ's fa3.dropout)
      // while dPᵀ's wgmmas run.
      if (drop.getProbs().getDefiningOp<QKOp>()) {
        droppedGradProbs[drop.getResult()] = drop.getProbs();
        continue;
      }
      SmallVector<Value> dropped;
      std::tie(keepScale, dropped) =
          applyDropout(k.dropoutGen, drop.getP().convertToFloat(),
                       regs.lookup(drop.getProbs()), k.batch, head, qStart,
                       k.qCol0, k.keyRow[0], k.colInBlock, qCols);
      regs[drop.getResult()] = dropped;
    } else if (auto grad = dyn_cast<SoftmaxGradOp>(op)) {
      Value dp = grad.getGradProbs();
      bool dropped = droppedGradProbs.count(dp);
      if (dropped)
        dp = droppedGradProbs.lookup(dp);
      waitFor(dp);
      statistics();
      // Softcap's derivative (the fa3.softcap_grad of this dSᵀ) in the
      // same pass: 1 − (capped · scale / softcap)².
      auto capGrad =
          grad.getResult().hasOneUse()
              ? dyn_cast<SoftcapGradOp>(*grad.getResult().getUsers().begin())
              : SoftcapGradOp();
      SmallVector<Value> capped;
      float capFactor = 0;
      if (capGrad) {
        capped = regs.lookup(capGrad.getCapped());
        capFactor = capGrad.getScale().convertToFloat() /
                    capGrad.getSoftcap().convertToFloat();
      }
      SmallVector<Value> ds =
          softmaxGrad(regs.lookup(grad.getProbs()), regs.lookup(dp),
                      dropped ? ArrayRef<Value>(keepScale) : ArrayRef<Value>(),
                      capped, capFactor, statsPtr, statCol);
      regs[capGrad ? capGrad.getResult() : grad.getResult()] = ds;
    } else if (isa<SoftcapGradOp>(op)) {
      // Computed with its fa3.softmax_grad.
    } else if (auto mma = dyn_cast<MmaTNOp>(op)) {
      sharedTiles();
      bool isDV =
          gradStepTileOf(mma.getRhs(), kernelFunc) == GradStepTile::GradOutput;
      SmallVector<Value> acc = regs.lookup(mma.getAcc());
      if (isDV) {
        // dV's wgmmas run while dSᵀ goes to shared memory; where the
        // warpgroups split the query columns they read Pᵀ from there.
        pFrag = packFragments(regs.lookup(mma.getLhs()));
        if (splitQueries)
          publish();
        NVVM::WgmmaFenceAlignedOp::create(b, loc);
        acc = issueKeyProduct(acc, pFrag, pAddr, doAddr);
      } else {
        acc = issueKeyProduct(acc, dsFrag, dsAddr, qAddr);
      }
      regs[mma.getResult()] = acc;
      commitGroup(mma.getResult());
    } else if (auto pv = dyn_cast<PVOp>(op)) {
      sharedTiles();
      publish();
      if (s.deterministic)
        turnPtr = waitDQTurn(
            k.turnsPtr, k.kBlock, qStart, k.offset,
            [&](Value qb) {
              // The counter of (batch, head, query block); varlen: of
              // the statistics' row block.
              if (s.varlen)
                return divu(k.statIndex(head, qStart), cl(bm));
              Value blocks = divu(k.seqPad, ci(bm));
              return add(
                  mul(add(mul(sext64(k.batch), cl(s.numQHeads)), sext64(head)),
                      sext64(blocks)),
                  sext64(qb));
            },
            k.isConsumer0);
      dqChunk = issueDQChunk(k.dqShare, dsAddr, k.base, offK, 0);
      commitGroup(pv.getResult());
    } else if (auto addOp = dyn_cast<AccumulateTileOp>(op)) {
      Value dq = addOp.getTile();
      for (int64_t chunk = 0; chunk < numDQChunks(k.dqShare); ++chunk) {
        waitFor(dq);
        addDQChunk(dqChunk, k.dqShare, chunk, k.accPtr, dqAccRow(), k.wg,
                   k.tInWG, k.isIssuer, k.base, offDQ);
        if (chunk + 1 < numDQChunks(k.dqShare)) {
          dqChunk = issueDQChunk(k.dqShare, dsAddr, k.base, offK, chunk + 1);
          commitGroup(dq);
        }
      }
    } else {
      auto yield = cast<scf::YieldOp>(op);
      // The step's last wgmmas complete before its ring slot goes back
      // and before the turn passes (where dQ's last chunk was the last
      // group, its add waited for all of them).
      if (!pending.empty())
        NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
      pending.clear();
      if (s.deterministic)
        passDQTurn(turnPtr, k.isConsumer0);
      // Release the ring slot. Without a producer, warp 0 refills it
      // once every thread is done.
      arrive(k.barEmpty(stage));
      if (!producer) {
        Value next = add(it, ci(s.stages));
        Value refill = andi(cmp(arith::CmpIPredicate::ult, k.tid, ci(32)),
                            cmp(arith::CmpIPredicate::slt, next, k.numIters));
        scf::IfOp::create(b, loc, refill, [&](OpBuilder &, Location) {
          waitParity(k.barEmpty(stage), parity);
          scf::IfOp::create(b, loc, k.isThread0, [&](OpBuilder &, Location) {
            k.issueStep(stage, next);
            scf::YieldOp::create(b, loc);
          });
          scf::YieldOp::create(b, loc);
        });
      }
      SmallVector<Value> yields;
      for (Value carried : yield.getOperands())
        llvm::append_range(yields, regs.lookup(carried));
      scf::YieldOp::create(b, loc, yields);
    }
  }
}
