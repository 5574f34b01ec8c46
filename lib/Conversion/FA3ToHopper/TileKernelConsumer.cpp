//===- TileKernelConsumer.cpp - A consumer warpgroup's key loop -----------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// A consumer warpgroup of convert-fa3-tile-to-hopper's forward kernel: its
// key loop emitted op by op in IR order (plain, or as fa3-intra-wg-overlap
// rotated it), each wgmma result waited for right before its first use,
// fa3-pingpong's fa3.mma_turn ops as named-barrier turns.
//
// Register fragments: each consumer warpgroup owns 64 rows of the query
// tile; a thread holds two of them (lane / 4 and lane / 4 + 8 of its warp's
// 16). An f32 [R, C] tile is C / 2 registers a thread (the wgmma
// accumulator layout), a [R] statistics tile 2. A running row sum stays per
// thread (a quarter of its row) until fa3.finalize reduces it.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "TileKernelEmitter.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

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
  // Every column, the row sums' too (rowSumByMma).
  int64_t nO = o.size();
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
  // poly_exp2 = N: every N-th exponential on the FMA pipe, the rest by
  // MUFU.EX2, whose pipe (an eighth of the FMA pipe's rate) the FP8
  // softmax otherwise saturates.
  for (int64_t r = 0; r < nS; ++r) {
    int64_t row = (r % 4) / 2;
    Value x = fma(sv[r], cLog2, probsBase[row]);
    bool onFmaPipe = s.polyExp2 > 0 && r % s.polyExp2 == s.polyExp2 - 1;
    step.p[r] = onFmaPipe ? exp2OnFmaPipe(x) : exp2(x);
    rowProbs[row].push_back(step.p[r]);
  }
  // rowSumByMma: the PV wgmma sums P into O's last columns, rescaled with
  // O; l stays what it was (unused: emitConsumer reads l from O).
  for (int64_t row = 0; row < 2; ++row)
    step.l[row] = s.rowSumByMma()
                      ? lOld[row]
                      : fma(lOld[row], step.alpha[row],
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
      add(add(smemAddr(smem), ci(offV)), mul(stage, ci(valueTileBytes())));
  // rowSumByMma: O has kRowSumRows more columns (N = D + 8), which read
  // the rows of ones after each atom's D rows.
  assert((!s.rowSumByMma() || o.size() == size_t(s.valueTileRows() / 2)) &&
         "O's fragment has the row sums' columns");
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  for (int64_t kk = 0; kk < s.blockN / mmaK(); ++kk) {
    // 16-bit: V MN-major, 16 keys (rows of 128-byte atoms) a step. FP8:
    // V'ᵀ K-major (D rows of 128-key atoms, or of 64 keys where block_n
    // is not whole 128-key atoms; valueTileRows() rows an atom), 32 keys =
    // 32 bytes a step.
    const int64_t vAtom = valueTransposeAtomKeys(s.blockN);
    Value bd =
        s.fp8 ? descriptor(add(vTileAddr, ci((kk / (vAtom / 32)) *
                                                 s.valueTileRows() * vAtom +
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
  // The only splat tiles are the statistics' and O's initial values; O
  // has the row sums' columns too (rowSumByMma).
  auto fragment = [&](Value v) -> SmallVector<Value> {
    if (auto found = producedBy.find(v); found != producedBy.end())
      completeUpTo(found->second);
    if (std::optional<float> splat = splatValue(v)) {
      auto type = cast<RankedTensorType>(v.getType());
      int64_t rowSumColumns = s.rowSumByMma() ? s.kRowSumRows : 0;
      return SmallVector<Value>(
          type.getRank() == 1 ? 2 : (type.getDimSize(1) + rowSumColumns) / 2,
          cf(*splat));
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
  SmallVector<Value> o = fragment(keyResults[0]);
  if (s.rowSumByMma()) {
    // l of rows r and r + 8: O's first row-sum column (col D + 2t is
    // register D / 2 for row r, D / 2 + 2 for row r + 8), the whole row's
    // sum in each lane of the quad.
    int64_t d = s.headDim;
    results.append({o[d / 2], o[d / 2 + 2]});
    o.resize(d / 2);
  } else {
    results.append(fragment(keyResults[2]));
  }
  results.append(o);

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
