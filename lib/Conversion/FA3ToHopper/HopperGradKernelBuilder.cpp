//===- HopperGradKernelBuilder.cpp - sm_90a backward attention kernels ---===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The backward as three kernels (see HopperAttentionGradSpec):
//
//   * `_pre`, one warp per query row: Δ = rowsum(dO ∘ O), LSE·log2(e) (+inf
//     for rows that saw no key and for the padding rows up to a whole query
//     block, so their probabilities come out 0), and the f32 dQ
//     accumulator's row of the same index zeroed (its 64-row blocks hold
//     their rows in wgmma fragment order; see FA3ToHopper.h).
//   * the main kernel, one CTA per key block of `blockN` rows (the key
//     grid's coordinates, the query blocks of its steps and which steps
//     mask, and the coordinates of every load, come from the tile level:
//     GradKeyGridReplay replays that IR, so fa3-order-grid's longest-first
//     order of causal GQA grids too), two
//     consumer warpgroups and, with the
//     schedule's producer_regs, a producer warpgroup whose first thread
//     issues every load. K and V are loaded once by TMA; Q and dO tiles of
//     `blockM` rows (128 at D = 64, else 64; plus their LSE and Δ, 1-D bulk
//     copies) stream through a ring of `stages` buffers over every query
//     head of the GQA group and every query block that can see the key
//     block. Per step, each warpgroup computes for its 64 key rows
//       Sᵀ = K Qᵀ and dPᵀ = V dOᵀ            (wgmma, both operands in smem)
//       Pᵀ = exp2(c·Sᵀ − LSE₂),  dSᵀ = Pᵀ ∘ (dPᵀ − Δ)   (registers)
//       dV += Pᵀ dO                          (register-A wgmma, dO MN-major)
//     then writes dSᵀ to shared memory (128-byte swizzled, 64 query columns
//     per atom row: exactly the MN-major layout of the A operand dS; two
//     tiles by step parity, so only a barrier after the store), computes
//     its share of dQ = dS K (A and B MN-major), issues dK += dSᵀ Q
//     (register A, Q MN-major) and, while that runs, adds dQ to the f32
//     accumulator: at D <= 128 through a shared-memory staging tile and one
//     cp.reduce.async.bulk per warpgroup, at D = 256 (no room for the
//     tiles) with red.global.add.v4.f32. At D = 256 the two warpgroups
//     share the 64 key rows: each computes Sᵀ and dPᵀ for half of the
//     query columns, Pᵀ goes to shared memory like dSᵀ, and dV and dK read
//     A from there. The wgmma groups are FA3's: Pᵀ is computed while dPᵀ's
//     wgmmas run, dV's while dSᵀ is stored, dK's while dQ is added.
//   * `_post`, a CTA per 64-row block: dQ = scale · accumulator, rounded to
//     the storage type, through a shared tile so that dQ is written in whole
//     16-byte pieces of rows.
//
// dK/dV accumulate in registers across the whole GQA group, so they need no
// atomics; memory beyond the tensors is O(N) (the accumulator, Δ, LSE₂).
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Conversion/InlinePtx.h"
#include "fa3/Dialect/FA3/Utils/Philox.h"

#include "GradKernelBuilder.h"
#include "HopperCodegen.h"
#include "TileKernel.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <tuple>

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

bool HopperAttentionGradSpec::dQThroughSharedMemory() const {
  // Each warpgroup's share of a step's dQ is one 64 × 64 tile at D <= 128
  // (64 columns each at D = 128; at D = 64 its own 64 query rows with
  // 128-row steps, or all 64 over its own key rows with 64-row steps).
  return headDim <= 128 &&
         GradSmemLayout(*this, /*dsBuffers=*/1, /*dQStaging=*/true).bytes() <=
             kMaxSharedMemory;
}

int64_t HopperAttentionGradSpec::dsBuffers() const {
  return GradSmemLayout(*this, 2, dQThroughSharedMemory()).bytes() <=
                 kMaxSharedMemory
             ? 2
             : 1;
}

int64_t HopperAttentionGradSpec::sharedMemoryBytes() const {
  return GradSmemLayout(*this, dsBuffers(), dQThroughSharedMemory()).bytes();
}

std::string HopperAttentionGradSpec::kernelName() const {
  std::string name =
      attentionKernelNamePrefix("bwd", bf16 ? "bf16" : "f16", headDim,
                                numQHeads, numKVHeads, blockM, blockN, stages);
  name += registerSplitSuffix(producerRegs, consumerRegs);
  if (causal)
    name += "_causal";
  if (deterministic)
    name += "_det";
  if (varlen)
    name += sequsedK ? "_varlen_used" : "_varlen";
  auto bound = [](int64_t b) {
    return b < 0 ? std::string("inf") : std::to_string(b);
  };
  if (windowLeft >= 0 || (!causal && windowRight >= 0))
    name += "_w" + bound(windowLeft) + "_" + bound(windowRight);
  if (softcap > 0)
    name += floatBitsSuffix("cap", softcap);
  if (dropout > 0)
    name += floatBitsSuffix("drop", dropout);
  return name + floatBitsSuffix("s", scale);
}

LLVM::LLVMFuncOp GradKernelBuilder::createKernel(gpu::GPUModuleOp module,
                                                 StringRef name,
                                                 ArrayRef<Type> params,
                                                 int64_t threads) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  auto fnType = LLVM::LLVMFunctionType::get(
      LLVM::LLVMVoidType::get(b.getContext()), params);
  auto fn = LLVM::LLVMFuncOp::create(b, loc, name, fnType);
  fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
              b.getDenseI32ArrayAttr({int32_t(threads), 1, 1}));
  fn.addEntryBlock(b);
  return fn;
}

std::pair<Value, Value> GradKernelBuilder::loadPair(Value ptr) {
  Value packed = LLVM::LoadOp::create(b, loc, VectorType::get({2}, elt), ptr,
                                      /*alignment=*/4);
  Value wide = LLVM::FPExtOp::create(b, loc, VectorType::get({2}, f32), packed);
  return {LLVM::ExtractElementOp::create(b, loc, wide, ci(0)),
          LLVM::ExtractElementOp::create(b, loc, wide, ci(1))};
}

//===----------------------------------------------------------------------===//
// The main kernel
//===----------------------------------------------------------------------===//

/// dQ's tile through shared memory (see the declaration).
void GradKernelBuilder::reduceDQTileViaSharedMemory(
    ArrayRef<Value> qAcc, Value accPtr, Value tileElem, Value tInWG, Value wg,
    Value isIssuer, Value smemBase, int64_t stagingOffset) {
  Value stagingSlot = add(add(ci(stagingOffset), mul(tInWG, ci(16))),
                          mul(wg, ci(HopperAttentionGradSpec::kDQTileBytes)));
  for (int64_t j = 0; j < 8; ++j) {
    Value v = LLVM::UndefOp::create(b, loc, VectorType::get({4}, f32));
    for (int64_t e = 0; e < 4; ++e)
      v = LLVM::InsertElementOp::create(b, loc, v, qAcc[4 * j + e], ci(e));
    LLVM::StoreOp::create(b, loc, v, smemAt(add(stagingSlot, ci(j * 128 * 16))),
                          /*alignment=*/16);
  }
  fenceProxyAsyncShared();
  Value stagingBarrier = add(wg, ci(2));
  scf::IfOp::create(
      b, loc, cmp(arith::CmpIPredicate::ult, tInWG, ci(32)),
      [&](OpBuilder &, Location) {
        namedBarrierSync(stagingBarrier, 128);
        scf::YieldOp::create(b, loc);
      },
      [&](OpBuilder &, Location) {
        namedBarrierArrive(stagingBarrier, 128);
        scf::YieldOp::create(b, loc);
      });
  scf::IfOp::create(b, loc, isIssuer, [&](OpBuilder &, Location) {
    Value staging = add(add(smemBase, ci(stagingOffset)),
                        mul(wg, ci(HopperAttentionGradSpec::kDQTileBytes)));
    ptxVoid("cp.reduce.async.bulk.global.shared::cta.bulk_group."
            "add.f32 [$0], [$1], $2;",
            "l,r,r",
            {elemPtr(accPtr, f32, tileElem), staging,
             ci(HopperAttentionGradSpec::kDQTileBytes)});
    ptxVoid("cp.async.bulk.commit_group;", "", {});
    // Deterministic: the adds are complete before the turn passes.
    if (s.deterministic)
      ptxVoid("cp.async.bulk.wait_group 0;", "", {});
    scf::YieldOp::create(b, loc);
  });
}

/// One committed wgmma chain of an m64 accumulator over the head dim: A
/// the 64 key rows of a K or V tile at `slab`, B the step's query columns
/// of the Q or dO tile at `cols`, both K-major in 128-byte swizzle atoms;
/// the first wgmma ignores `acc` (scale-d = 0).
SmallVector<Value>
GradKernelBuilder::transposedProductChain(Value slab, Value cols,
                                          SmallVector<Value> acc) {
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  for (int64_t k = 0; k < s.headDim / 16; ++k) {
    int64_t atom = k / 4, inAtom = (k % 4) * 32;
    Value a = descriptor(add(slab, ci(atom * s.blockN * kAtomBytes + inAtom)),
                         16, 1024);
    Value bDesc = descriptor(
        add(cols, ci(atom * s.blockM * kAtomBytes + inAtom)), 16, 1024);
    acc = wgmmaSS(acc, a, bDesc, k > 0);
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  return acc;
}

/// The forward's dropout mask Z over one step's Pᵀ fragment `p`: the
/// factor each register takes (1 / (1 - dropout) kept, 0 dropped) and
/// Pᵀ ∘ Z, for key row `keyRow0` (and keyRow0 + 8) and the step's `qCols`
/// query columns from qStart + qCol0 of query head `head`. Register 8f + 4·qh +
/// 2·kh + e holds query i + 8·qh (i = the step's query column 16f + e of this
/// thread) and key j + 8·kh (j = keyRow0): half j % 2 of word 2·qh + kh of
/// query i's Philox group. The thread of key j ^ 1 (lane ^ 4) has the same
/// queries and needs the other halves of the same calls, so each of the two
/// computes the call of one query parity (e = j % 2) and hands the other
/// thread its halves (two shuffles): one call per eight registers of the
/// pair.
std::pair<SmallVector<Value>, SmallVector<Value>>
GradKernelBuilder::applyDropout(const DropoutGenerator &dropoutGen,
                                float dropoutP, ArrayRef<Value> p, Value batch,
                                Value head, Value qStart, Value qCol0,
                                Value keyRow0, Value colInBlock,
                                int64_t qCols) {
  DropoutConstants constants = DropoutConstants::of(dropoutP);
  Value threshold = ci(static_cast<int32_t>(constants.threshold));
  Value stream = add(mul(batch, ci(s.numQHeads)), head);
  Value odd = andi(keyRow0, ci(1));
  Value isOdd = cmp(arith::CmpIPredicate::ne, odd, ci(0));
  Value lowMask = ci(0xFFFF), highMask = ci(static_cast<int32_t>(0xFFFF0000u));
  auto shr16 = [&](Value x) -> Value {
    return arith::ShRUIOp::create(b, loc, x, ci(16));
  };
  auto shl16 = [&](Value x) -> Value {
    return arith::ShLIOp::create(b, loc, x, ci(16));
  };
  auto shuffle = [&](Value x) -> Value {
    return NVVM::ShflOp::create(b, loc, i32, ci(-1), x, ci(4), ci(0x1f),
                                NVVM::ShflKind::bfly, UnitAttr());
  };
  SmallVector<Value> keepScale(qCols / 2), pDropped(p);
  for (int64_t f = 0; f < qCols / 16; ++f) {
    Value query =
        add(add(add(add(qStart, qCol0), ci(16 * f)), colInBlock), odd);
    std::array<Value, 4> words =
        buildDropoutGroupWords(b, loc, dropoutGen, query, keyRow0, stream);
    // This thread's halves (of its own query parity) and the other
    // thread's, packed two per 32 bits: words 2·k and 2·k + 1.
    SmallVector<Value, 4> mine, received;
    for (int64_t w = 0; w < 4; ++w)
      mine.push_back(select(isOdd, shr16(words[w]), andi(words[w], lowMask)));
    for (int64_t k = 0; k < 2; ++k) {
      Value w0 = words[2 * k], w1 = words[2 * k + 1];
      Value send = select(isOdd, ori(andi(w0, lowMask), shl16(w1)),
                          ori(shr16(w0), andi(w1, highMask)));
      Value got = shuffle(send);
      received.push_back(andi(got, lowMask));
      received.push_back(shr16(got));
    }
    for (int64_t w = 0; w < 4; ++w)
      for (int64_t e = 0; e < 2; ++e) {
        int64_t qh = w / 2, kh = w % 2;
        int64_t reg = 8 * f + 4 * qh + 2 * kh + e;
        // Query parity e is this thread's own call when e = j % 2.
        Value value = e == 0 ? select(isOdd, received[w], mine[w])
                             : select(isOdd, mine[w], received[w]);
        Value keep = cmp(arith::CmpIPredicate::uge, value, threshold);
        keepScale[reg] = select(keep, cf(constants.scale), cf(0));
        pDropped[reg] = fmul(p[reg], keepScale[reg]);
      }
  }
  return {keepScale, pDropped};
}

/// Two f32 statistics (LSE₂ or Δ) of this thread's query columns 8j and
/// 8j + 1 of a step, `byteOffset` + 32j bytes into the ring slot's
/// statistics at `statsPtr` (`statCol`: the thread's first column, in bytes).
std::pair<Value, Value> GradKernelBuilder::loadStatPair(Value statsPtr,
                                                        Value statCol,
                                                        int64_t byteOffset,
                                                        int64_t j) {
  Value p =
      LLVM::GEPOp::create(b, loc, smemPtr, b.getI8Type(), statsPtr,
                          ValueRange{add(ci(byteOffset + j * 32), statCol)});
  Value v = LLVM::LoadOp::create(b, loc, VectorType::get({2}, f32), p,
                                 /*alignment=*/8);
  return std::make_pair(LLVM::ExtractElementOp::create(b, loc, v, ci(0)),
                        LLVM::ExtractElementOp::create(b, loc, v, ci(1)));
}

/// fa3.recompute_probs on the Sᵀ fragment: register 4j + e holds query
/// column 8j + e % 2 (e < 4), Pᵀ = exp2(c·Sᵀ − LSE₂) with c = the op's
/// exp2_scale (scale·log2(e)).
SmallVector<Value> GradKernelBuilder::recomputeProbs(ArrayRef<Value> masked,
                                                     float c, Value statsPtr,
                                                     Value statCol) {
  SmallVector<Value> p(masked.size());
  for (int64_t j = 0; j < static_cast<int64_t>(masked.size()) / 4; ++j) {
    auto [lse0, lse1] = loadStatPair(statsPtr, statCol, 0, j);
    for (int64_t r = 4 * j; r < 4 * j + 4; ++r)
      p[r] = exp2(fsub(fmul(masked[r], cf(c)), r % 2 ? lse1 : lse0));
  }
  return p;
}

/// fa3.softmax_grad on the fragments: dSᵀ = Pᵀ ∘ (dPᵀ − Δ), dPᵀ times the
/// dropout keep factors where there are any, times softcap's derivative
/// 1 − tanh² = 1 − (capFactor · capped)² where `capped` (the capped
/// scores) is not empty.
SmallVector<Value> GradKernelBuilder::softmaxGrad(
    ArrayRef<Value> p, ArrayRef<Value> dpAcc, ArrayRef<Value> keepScale,
    ArrayRef<Value> capped, float capFactor, Value statsPtr, Value statCol) {
  SmallVector<Value> ds(p.size());
  for (int64_t j = 0; j < static_cast<int64_t>(p.size()) / 4; ++j) {
    auto [delta0, delta1] = loadStatPair(statsPtr, statCol, 4 * s.blockM, j);
    for (int64_t r = 4 * j; r < 4 * j + 4; ++r) {
      Value delta = r % 2 ? delta1 : delta0;
      Value dp = keepScale.empty() ? dpAcc[r] : fmul(dpAcc[r], keepScale[r]);
      ds[r] = fmul(p[r], fsub(dp, delta));
      if (!capped.empty()) {
        Value t = fmul(capped[r], cf(capFactor));
        ds[r] = fmul(ds[r], fsub(cf(1), fmul(t, t)));
      }
    }
  }
  return ds;
}

/// Chunk `chunk` (64 columns) of dQ = dS K: dS (its query rows' atom of
/// the tile at `dsAddr`) and K both read MN-major; one committed group.
SmallVector<Value> GradKernelBuilder::issueDQChunk(const DQShare &share,
                                                   Value dsAddr, Value smemBase,
                                                   int64_t offK,
                                                   int64_t chunk) {
  const int64_t bn = s.blockN;
  Value dsRowsAddr = share.splitRows
                         ? add(dsAddr, mul(share.qBlock, ci(bn * kAtomBytes)))
                         : dsAddr;
  Value col0 = add(share.n0, ci(chunk * 64));
  SmallVector<Value> qAcc(32, LLVM::UndefOp::create(b, loc, f32));
  Value kColAddr = add(add(smemBase, ci(offK)),
                       mul(divu(col0, ci(kAtomCols)), ci(bn * kAtomBytes)));
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  for (int64_t k = 0; k < share.kRows / 16; ++k) {
    Value rowOff = mul(add(share.k0, ci(16 * k)), ci(kAtomBytes));
    Value a = descriptor(add(dsRowsAddr, rowOff), bn * kAtomBytes, 1024);
    Value bk = descriptor(add(kColAddr, rowOff), bn * kAtomBytes, 1024);
    qAcc = wgmmaSS(qAcc, a, bk, k > 0, /*transA=*/true, /*transB=*/true);
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  return qAcc;
}

/// The chunk's 64 × 64 tile goes to its place in the step's accumulator
/// block (`accRow`, the statistics' row index of its first query row,
/// times D) in fragment-slot order: through the warpgroup's staging tile
/// and a bulk reduce, or with per-thread reductions. Where both warpgroups
/// add to the same elements under `deterministic`, warpgroup 0 adds
/// first, then 1.
void GradKernelBuilder::addDQChunk(ArrayRef<Value> qAcc, const DQShare &share,
                                   int64_t chunk, Value accPtr, Value accRow,
                                   Value wg, Value tInWG, Value isIssuer,
                                   Value smemBase, int64_t stagingOffset) {
  Value col0 = add(share.n0, ci(chunk * 64));
  Value chunkElem = add(mul(accRow, cl(s.headDim)),
                        mul(zext64(divu(col0, ci(64))), cl(64 * 64)));
  auto addPartial = [&] {
    if (s.dQThroughSharedMemory())
      reduceDQTileViaSharedMemory(qAcc, accPtr, chunkElem, tInWG, wg, isIssuer,
                                  smemBase, stagingOffset);
    else
      reduceDQTileToGlobal(qAcc, accPtr, chunkElem, tInWG);
  };
  if (!s.deterministic || share.disjoint) {
    addPartial();
    return;
  }
  for (int64_t first = 0; first < 2; ++first) {
    scf::IfOp::create(b, loc, cmp(arith::CmpIPredicate::eq, wg, ci(first)),
                      [&](OpBuilder &, Location) {
                        addPartial();
                        scf::YieldOp::create(b, loc);
                      });
    consumerBarrier();
  }
}

/// Register k of a thread's A fragments (16 query columns each) holds
/// rows rowInSlab and rowInSlab + 8 of its warpgroup's 64 key rows (slab
/// `slab`) at two 8-column halves; each goes to its 16-byte chunk of a
/// 128-byte swizzled row. Without split query columns the warpgroup's
/// chunks are 0-7 (j % 8); with them, its columns start at qCol0. A step
/// of 128 query columns has two 64-column atoms of blockN rows.
void GradKernelBuilder::storeTransposedTile(ArrayRef<SmallVector<Value>> frag,
                                            Value tileAddr, Value slab,
                                            Value rowInSlab, Value qCol0,
                                            Value lane) {
  const bool splitQueries = s.splitQueryColumns();
  for (int64_t k = 0; k < static_cast<int64_t>(frag.size()); ++k)
    for (int64_t i = 0; i < 4; ++i) {
      int64_t j = 2 * k + i / 2, half = i % 2;
      Value row = add(add(mul(slab, ci(64)), rowInSlab), ci(8 * half));
      Value qChunk = splitQueries ? add(divu(qCol0, ci(8)), ci(j)) : ci(j % 8);
      Value chunk = xori(qChunk, remu(row, ci(8)));
      Value byte = add(add(mul(row, ci(kAtomBytes)), mul(chunk, ci(16))),
                       mul(remu(lane, ci(4)), ci(4)));
      if (j >= 8)
        byte = add(byte, ci((j / 8) * s.blockN * kAtomBytes));
      LLVM::StoreOp::create(b, loc, frag[k][i], smemAt(add(tileAddr, byte)),
                            /*alignment=*/4);
    }
}

/// The turn counter of (batch, head, query block) counts the key blocks
/// that have added their dQ partials; this block's turn is its place among
/// the contiguous key blocks that see the query block (with a left window
/// edge the first of them is not block 0).
Value GradKernelBuilder::waitDQTurn(Value turnsPtr, Value kBlock, Value qStart,
                                    Value offset,
                                    function_ref<Value(Value qb)> counterIndex,
                                    Value isConsumer0) {
  const int64_t bm = s.blockM, bn = s.blockN, left = s.windowLeft;
  Value qb = divu(qStart, ci(bm));
  Value first = ci(0);
  if (left >= 0) {
    // The first key block whose last key a row of qb sees:
    // floordiv(qb·bm + Sk − Sq − left, bn), at least 0.
    Value t = sub(add(mul(qb, ci(bm)), offset), ci(left));
    first = maxsi(arith::FloorDivSIOp::create(b, loc, t, ci(bn)), ci(0));
  }
  Value turn = sub(kBlock, first);
  Value turnPtr = elemPtr(turnsPtr, i32, counterIndex(qb));
  scf::IfOp::create(b, loc, isConsumer0, [&](OpBuilder &, Location) {
    scf::WhileOp::create(
        b, loc, TypeRange{}, ValueRange{},
        [&](OpBuilder &, Location, ValueRange) {
          Value now = inlinePtx(b, loc, i32, ValueRange{turnPtr},
                                "ld.acquire.gpu.global.u32 $0, [$1];", "=r,l")
                          .getResult(0);
          scf::ConditionOp::create(
              b, loc, cmp(arith::CmpIPredicate::ne, now, turn), ValueRange{});
        },
        [&](OpBuilder &, Location, ValueRange) {
          scf::YieldOp::create(b, loc);
        });
    scf::YieldOp::create(b, loc);
  });
  consumerBarrier();
  return turnPtr;
}

void GradKernelBuilder::passDQTurn(Value turnPtr, Value isConsumer0) {
  consumerBarrier();
  scf::IfOp::create(b, loc, isConsumer0, [&](OpBuilder &, Location) {
    inlinePtx(b, loc, Type(), ValueRange{turnPtr},
              "fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.u32 [$0], 1;",
              "l");
    scf::YieldOp::create(b, loc);
  });
}

/// Rows past the keys are skipped (varlen: the keys past seqused_k are
/// stored, as zeros). Like the dQ conversion, through shared memory: the
/// fragments go row-major (rows padded by 16 bytes, so a store's 8 rows
/// fall in distinct banks) into the K/V tiles' space, free once both
/// warpgroups are past their last step's wgmmas (the first barrier), and
/// each row then leaves in 16-byte pieces, a warp's 512 contiguous bytes,
/// instead of 4-byte pairs that fill half of each sector. `stagingOffset`:
/// where the dQ staging tiles begin, which the two tiles must not reach.
void GradKernelBuilder::storeKeyGradients(ArrayRef<Value> acc, Value dkPtr,
                                          Value dvPtr, const KeyBlockRows &rows,
                                          ArrayRef<Value> keyRow, Value slice,
                                          Value colInBlock, Value ctid,
                                          int64_t stagingOffset) {
  const int64_t d = s.headDim, bn = s.blockN, sliceW = s.sliceWidth();
  const int64_t nAcc = sliceW / 2;
  const int64_t epilogueRow = 2 * d + 16, pieces = 2 * d / 16;
  const int64_t epilogueTile = bn * epilogueRow;
  assert(2 * epilogueTile <= stagingOffset &&
         "dK/dV tiles overlap the dQ staging");
  (void)stagingOffset;
  // Element r of dK (tensor 0) or dV (1): the key grid's fa3.scale_cast of
  // the accumulator it stores there.
  std::array<GradKeyGradient, 2> stored = keyGrid.keyGradients();
  auto scaled = [&](int64_t tensor, int64_t r) {
    Value x = acc[stored[tensor].carried * nAcc + r];
    return stored[tensor].scale == 1.0f ? x : fmul(x, cf(stored[tensor].scale));
  };
  consumerBarrier();
  for (int64_t half = 0; half < 2; ++half) {
    Value rowOff = mul(sub(keyRow[half], rows.kStart), ci(epilogueRow));
    for (int64_t j = 0; j < sliceW / 8; ++j) {
      int64_t r = 4 * j + 2 * half;
      Value col = add(add(mul(slice, ci(sliceW)), ci(8 * j)), colInBlock);
      Value byte = add(rowOff, mul(col, ci(2)));
      Value dk = pack(scaled(0, r), scaled(0, r + 1));
      Value dv = pack(scaled(1, r), scaled(1, r + 1));
      LLVM::StoreOp::create(b, loc, dk, smemAt(byte), /*alignment=*/4);
      LLVM::StoreOp::create(b, loc, dv, smemAt(add(byte, ci(epilogueTile))),
                            /*alignment=*/4);
    }
  }
  consumerBarrier();
  for (int64_t i = 0; i < 2 * bn * pieces / s.numConsumerThreads(); ++i) {
    // Piece p of the two tiles: tensor p / (bn · pieces), then row and
    // 16-byte piece within the row.
    int64_t perTensor = bn * pieces / s.numConsumerThreads();
    bool isValue = i >= perTensor;
    Value p = add(ctid, ci((i % perTensor) * s.numConsumerThreads()));
    Value row = divu(p, ci(pieces)), piece = remu(p, ci(pieces));
    Value v = LLVM::LoadOp::create(
        b, loc, VectorType::get({4}, i32),
        smemAt(add(add(mul(row, ci(epilogueRow)), mul(piece, ci(16))),
                   ci(isValue ? epilogueTile : 0))),
        /*alignment=*/16);
    Value key = add(rows.kStart, row);
    Value inside = cmp(arith::CmpIPredicate::slt, key, rows.storedKeys);
    scf::IfOp::create(b, loc, inside, [&](OpBuilder &, Location) {
      Value idx =
          add(mul(rows.rowOfKey(key), cl(d)), zext64(mul(piece, ci(8))));
      LLVM::StoreOp::create(b, loc, v,
                            elemPtr(isValue ? dvPtr : dkPtr, elt, idx),
                            /*alignment=*/16);
      scf::YieldOp::create(b, loc);
    });
  }
}

void GradKernelBuilder::buildMain(gpu::GPUModuleOp module) {
  declareDynamicSmem(module);
  // Varlen: cu_seqlens_q, cu_seqlens_k[, seqused_k]. Deterministic: a last
  // parameter, the dQ turn counters (zero at launch).
  SmallVector<Type> params = {genericPtr, genericPtr, genericPtr, genericPtr,
                              globalPtr,  globalPtr,  globalPtr,  globalPtr,
                              globalPtr,  i32,        i32};
  if (s.varlen)
    params.append(s.sequsedK ? 3 : 2, globalPtr);
  if (s.deterministic)
    params.push_back(globalPtr);
  // Dropout: the forward's Philox (seed, offset), i64 [2], last.
  if (s.dropout > 0)
    params.push_back(globalPtr);
  auto fn = createKernel(module, s.kernelName(), params, s.numThreads());
  // setmaxnreg needs the register count at entry, which ptxas derives from
  // the threads and the CTAs per SM: without .minnctapersm it may ignore
  // every setmaxnreg (C7508; seen at D = 64 with a softcap) and compile the
  // consumers with the 168 registers of 384 threads.
  if (s.hasProducer())
    fn->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                b.getI32IntegerAttr(1));
  passTensorMapsByValue(fn, 4);
  OpBuilder::InsertionGuard guard(b);
  Block *entry = &fn.getBody().front();
  b.setInsertionPointToStart(entry);
  Value tmaQ = entry->getArgument(0), tmaK = entry->getArgument(1);
  Value tmaV = entry->getArgument(2), tmaDO = entry->getArgument(3);
  Value lse2Ptr = entry->getArgument(4), deltaPtr = entry->getArgument(5);
  Value accPtr = entry->getArgument(6), dkPtr = entry->getArgument(7);
  Value dvPtr = entry->getArgument(8);
  Value seqQ = entry->getArgument(9), seqK = entry->getArgument(10);
  unsigned numArgs = fn.getNumArguments();
  Value turnsPtr = s.deterministic
                       ? entry->getArgument(numArgs - (s.dropout > 0 ? 2 : 1))
                       : Value();
  DropoutGenerator dropoutGen;
  if (s.dropout > 0)
    dropoutGen = loadDropoutGenerator(entry->getArgument(numArgs - 1));

  const int64_t d = s.headDim, bm = s.blockM, bn = s.blockN;
  const int64_t group = s.numQHeads / s.numKVHeads;
  const int64_t sliceW = s.sliceWidth();
  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  // The key-block grid's (key block, K/V head, batch) of this CTA, as the
  // IR numbers them (fa3-order-grid's longest-first order).
  SmallVector<Value> lengthPointers;
  if (s.varlen)
    for (unsigned i = 11; i < (s.sequsedK ? 14u : 13u); ++i)
      lengthPointers.push_back(entry->getArgument(i));
  auto [kBlock, kvHead, batch] = keyGrid.coordinates(
      b,
      {NVVM::BlockIdXOp::create(b, loc, i32),
       NVVM::BlockIdYOp::create(b, loc, i32),
       NVVM::BlockIdZOp::create(b, loc, i32)},
      seqQ, seqK, lengthPointers);
  // With a producer warpgroup (warpgroup 0) the consumers are threads 128 on;
  // `ctid` numbers the consumer threads from 0 (the producer's is unused).
  const bool producer = s.hasProducer();
  Value ctid = producer ? sub(tid, ci(128)) : tid;
  Value wg = divu(ctid, ci(128));
  Value warp = divu(remu(ctid, ci(128)), ci(32));
  Value lane = remu(ctid, ci(32));
  // Which 64 key rows this warpgroup owns and which head-dim slice of dK/dV.
  Value slab = s.keySlabs() == 2 ? wg : ci(0);
  Value slice = s.keySlabs() == 2 ? ci(0) : wg;

  // This CTA's sequence: Q rows from token qRow0 and K rows from kRow0,
  // seqQ queries and seqK (used) keys, dK and dV
  // stored for its first storedKeys keys. rowOfKey indexes the [*, Hkv, D]
  // rows of dK/dV, statIndex the statistics (times D, the dQ accumulator's
  // rows; divided by bm, the turn counters). Dense: batch `batch` of Sq and
  // Sk rows.
  // kStart (the first key) and seqPad (Sq in whole steps) are emitted
  // early only for varlen.
  Value qRow0, kRow0, storedKeys = seqK;
  Value kStart, seqPad, statBase, statRows;
  std::function<Value(Value)> rowOfKey = [&](Value key) {
    return add(mul(add(mul(sext64(batch), sext64(seqK)), sext64(key)),
                   cl(s.numKVHeads)),
               sext64(kvHead));
  };
  auto statIndex = [&](Value head, Value qStart) {
    if (!s.varlen)
      return denseStatRow(batch, head, seqPad, qStart);
    return varlenStatRow(head, statRows, statBase, qStart);
  };
  if (s.varlen) {
    kStart = mul(kBlock, ci(bn));
    Value cuK = entry->getArgument(12);
    Value rowsQ = seqQ, rowsK = seqK;
    // Grid z = B + 1: the last z zeroes the dK and dV rows past the last
    // sequence (its CTAs stride over them) and does nothing else.
    Value numSeqs = sub(NVVM::GridDimZOp::create(b, loc, i32), ci(1));
    auto tail =
        scf::IfOp::create(b, loc, cmp(arith::CmpIPredicate::eq, batch, numSeqs),
                          /*withElseRegion=*/true);
    b.setInsertionPointToStart(tail.thenBlock());
    zeroKeyRowsPastSequences(add(loadI32(cuK, numSeqs), kBlock), rowsK, kvHead,
                             tid, {dkPtr, dvPtr});
    b.setInsertionPointToStart(tail.elseBlock());
    // The sequence's first query and key rows and its query and (used) key
    // counts, as the key grid reads them.
    std::tie(qRow0, kRow0, seqQ, seqK) = keyGrid.sequence(b);
    storedKeys = sub(loadI32(cuK, add(batch, ci(1))), kRow0);
    seqPad = mul(divu(add(seqQ, ci(bm - 1)), ci(bm)), ci(bm));
    statRows = paddedStatRows(rowsQ, numSeqs);
    statBase = paddedStatOffset(qRow0, batch);
    rowOfKey = [&, kRow0](Value key) {
      return add(mul(sext64(add(kRow0, key)), cl(s.numKVHeads)),
                 sext64(kvHead));
    };
    // Key blocks past the sequence's keys have nothing to do.
    auto active = scf::IfOp::create(
        b, loc, cmp(arith::CmpIPredicate::slt, kStart, storedKeys),
        /*withElseRegion=*/false);
    b.setInsertionPointToStart(active.thenBlock());
  }

  setAlignedDynamicSmem();
  const GradSmemLayout layout(s, s.dsBuffers(), s.dQThroughSharedMemory());
  const int64_t tile = layout.rowBytes;
  const int64_t offK = layout.k, offV = layout.v, offQ = layout.q;
  const int64_t offDO = layout.dO, offDS = layout.dS, offP = layout.p;
  const int64_t offStats = layout.stats, offDQ = layout.dQ;
  const int64_t offBar = layout.barriers;
  auto barKV = [&] { return smemAt(ci(offBar)); };
  auto barFull = [&](Value st) {
    return smemAt(add(ci(offBar + 8), mul(st, ci(8))));
  };
  auto barEmpty = [&](Value st) {
    return smemAt(add(ci(offBar + 8 * (1 + s.stages)), mul(st, ci(8))));
  };

  Value isThread0 = cmp(arith::CmpIPredicate::eq, tid, ci(0));
  Value isConsumer0 = cmp(arith::CmpIPredicate::eq, ctid, ci(0));
  scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
    barrierInit(barKV(), 1);
    for (int64_t st = 0; st < s.stages; ++st) {
      barrierInit(barFull(ci(st)), 1);
      barrierInit(barEmpty(ci(st)), s.numConsumerThreads());
    }
    NVVM::FenceMbarrierInitOp::create(b, loc);
    scf::YieldOp::create(b, loc);
  });
  NVVM::Barrier0Op::create(b, loc);

  // The query rows that see some key of this block (as in fa3-tile).
  if (!s.varlen)
    kStart = mul(kBlock, ci(bn));
  Value offset = sub(seqK, seqQ);
  // The key grid's query-block loop bounds (fa3-tile's visible rows).
  Value qbLo, qbHi;
  std::tie(qbLo, qbHi) = keyGrid.queryBlocks(b);
  Value perHead = sub(qbHi, qbLo);
  Value numIters = mul(perHead, ci(group));
  if (!s.varlen)
    seqPad = mul(divu(add(seqQ, ci(bm - 1)), ci(bm)), ci(bm));
  // A varlen block of keys past seqused_k (seqK < storedKeys) sees no query:
  // its dK and dV are 0.
  if (s.sequsedK)
    numIters =
        select(cmp(arith::CmpIPredicate::slt, kStart, seqK), numIters, ci(0));

  // Step `it` walks query block qbLo + it % perHead of query head g =
  // it / perHead of the group (kvHead * group + g).
  auto stepIndices = [&](Value it) {
    Value g = divu(it, perHead);
    return std::make_pair(g, add(qbLo, remu(it, perHead)));
  };
  auto stepOf = [&](Value it) {
    auto [g, qb] = stepIndices(it);
    Value qStart = mul(qb, ci(bm));
    return std::make_pair(add(mul(kvHead, ci(group)), g), qStart);
  };
  // A step's loads at the coordinates the IR loads them at (the producer
  // region's fills, or the consumers' loads), into ring slot `stage` (the
  // fills' use is the step's number `it`, as matchGradKeyGrid checked).
  // TMA takes a packed batch's rows as they are; the statistics' padded
  // rows are indexed by the row within the sequence.
  auto issueStep = [&](Value stage, Value it) {
    auto [g, qb] = stepIndices(it);
    std::array<Value, 3> at[] = {
        keyGrid.loadCoordinates(b, GradLoad::Query, g, qb),
        keyGrid.loadCoordinates(b, GradLoad::GradOutput, g, qb)};
    Value bar = barFull(stage);
    expectTx(bar, 2 * bm * tile + 8 * bm);
    for (auto [coordinates, map, base] :
         {std::tuple<std::array<Value, 3>, Value, int64_t>{at[0], tmaQ, offQ},
          {at[1], tmaDO, offDO}}) {
      auto [batchAt, row, head] = coordinates;
      Value tileOff = add(ci(base), mul(stage, ci(bm * tile)));
      for (int64_t atom = 0; atom < d / kAtomCols; ++atom)
        tmaLoad(smemAt(add(tileOff, ci(atom * bm * kAtomBytes))), map,
                {ci(atom * kAtomCols), row, head, batchAt}, bar);
    }
    // LSE₂ and Δ of the block: 4·bm bytes each, 16-byte aligned because
    // rows are padded to whole blocks.
    auto statIndexOf = [&](GradLoad what) {
      auto [batchAt, row, head] = keyGrid.loadCoordinates(b, what, g, qb);
      return statIndex(head, s.varlen ? sub(row, qRow0) : row);
    };
    Value lseIdx = statIndexOf(GradLoad::LSE);
    Value deltaIdx = statIndexOf(GradLoad::Delta);
    Value statsOff = add(ci(offStats), mul(stage, ci(8 * bm)));
    bulkLoad(smemAt(statsOff), elemPtr(lse2Ptr, f32, lseIdx), 4 * bm, bar);
    bulkLoad(smemAt(add(statsOff, ci(4 * bm))),
             elemPtr(deltaPtr, f32, deltaIdx), 4 * bm, bar);
  };

  // K and V, once, at the coordinates the IR loads them at.
  auto loadKeysAndValues = [&] {
    expectTx(barKV(), 2 * bn * tile);
    for (auto [what, map, base] :
         {std::tuple<GradLoad, Value, int64_t>{GradLoad::Key, tmaK, offK},
          {GradLoad::Value, tmaV, offV}}) {
      auto [batchAt, row, head] = keyGrid.loadCoordinates(b, what);
      for (int64_t atom = 0; atom < d / kAtomCols; ++atom)
        tmaLoad(smemAt(ci(base + atom * bn * kAtomBytes)), map,
                {ci(atom * kAtomCols), row, head, batchAt}, barKV());
    }
  };
  if (!producer) {
    // Thread 0 fills the ring's first slots; warp 0 refills each slot at
    // the end of the step that releases it (below).
    scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
      loadKeysAndValues();
      for (int64_t st = 0; st < s.stages; ++st) {
        Value has = cmp(arith::CmpIPredicate::slt, ci(st), numIters);
        scf::IfOp::create(b, loc, has, [&](OpBuilder &, Location) {
          issueStep(ci(st), ci(st));
          scf::YieldOp::create(b, loc);
        });
      }
      scf::YieldOp::create(b, loc);
    });
  }
  // Everything below is the consumers': with a producer, the else branch of
  // the warpgroup split; the split's then branch is the producer's loop.
  if (producer) {
    auto split =
        scf::IfOp::create(b, loc, cmp(arith::CmpIPredicate::ult, tid, ci(128)),
                          /*withElseRegion=*/true);
    b.setInsertionPointToStart(split.thenBlock());
    NVVM::SetMaxRegisterOp::create(b, loc, s.producerRegs,
                                   NVVM::SetMaxRegisterAction::decrease);
    // The producer's first thread issues fa3-warp-specialize's fills: K
    // and V, then every step's Q, dO, LSE₂ and Δ as soon as the consumers
    // released the slot's previous use. Its loops over the group's heads
    // and the query blocks run as one loop over the step's number.
    scf::IfOp::create(b, loc, isThread0, [&](OpBuilder &, Location) {
      loadKeysAndValues();
      scf::ForOp::create(b, loc, ci(0), numIters, ci(1), ValueRange{},
                         [&](OpBuilder &, Location, Value it, ValueRange) {
                           // The empty ring, by its first barrier: use `it`
                           // waits for the release of use it - stages (the
                           // first `stages` do not wait).
                           RingWaitOp::create(b, loc, barEmpty(ci(0)), it,
                                              s.stages,
                                              /*previous=*/true);
                           issueStep(remu(it, ci(s.stages)), it);
                           scf::YieldOp::create(b, loc);
                         });
      scf::YieldOp::create(b, loc);
    });
    b.setInsertionPointToStart(split.elseBlock());
    NVVM::SetMaxRegisterOp::create(b, loc, s.consumerRegs,
                                   NVVM::SetMaxRegisterAction::increase);
  }
  waitParity(barKV(), ci(0));

  // Fragment coordinates of an m64 accumulator: this thread's two rows and
  // the first column of its pair in every 8-column block.
  Value rowInSlab = add(mul(warp, ci(16)), divu(lane, ci(4)));
  Value colInBlock = mul(remu(lane, ci(4)), ci(2));
  Value keyRow[2] = {add(add(kStart, mul(slab, ci(64))), rowInSlab),
                     add(add(add(kStart, mul(slab, ci(64))), rowInSlab), ci(8))};

  // Query columns of Sᵀ/dPᵀ per warpgroup: all bm where each owns its own
  // key rows; where both share the key rows, the first bm/2 and the second
  // (FA3's split of S between warpgroups: no tensor work twice).
  const bool splitQueries = s.splitQueryColumns();
  const int64_t qCols = splitQueries ? bm / 2 : bm;
  Value qCol0 = splitQueries ? mul(wg, ci(qCols)) : ci(0);
  const int64_t nAcc = sliceW / 2;
  Value base = smemAddr(smem);
  Value kSlabAddr = add(add(base, ci(offK)), mul(slab, ci(64 * kAtomBytes)));
  Value vSlabAddr = add(add(base, ci(offV)), mul(slab, ci(64 * kAtomBytes)));
  Value dsBase = add(base, ci(offDS));
  Value pBase = add(base, ci(offP));
  // dQ's share of this warpgroup: query rows [64·qBlock, 64·qBlock + 64)
  // of the step, columns [n0, n0 + nWidth), over key rows [k0, k0 + kRows).
  // With D >= 128 the warpgroups split the columns and read every key row's
  // dS; with 128-row steps (D = 64) they split the query rows instead; with
  // 64-row steps at D = 64 each reads only its own key rows (and both add
  // to the same elements).
  bool splitColumns = d / HopperAttentionGradSpec::kNumWarpgroups >= 64;
  bool splitRows = !splitColumns && bm == 2 * 64;
  bool disjointDQ = splitColumns || splitRows;
  Value qBlock = splitRows ? wg : ci(0);
  // dQ through shared memory: a 64 × 64 staging tile per warpgroup, handed to
  // the bulk copy unit by the warpgroup's first thread (the issuer).
  bool viaSmem = s.dQThroughSharedMemory();
  Value tInWG = remu(tid, ci(128));
  Value isIssuer = cmp(arith::CmpIPredicate::eq, tInWG, ci(0));
  int64_t nWidth = splitColumns ? d / HopperAttentionGradSpec::kNumWarpgroups
                                : d;
  int64_t kRows = disjointDQ ? bn : 64;
  Value n0 = splitColumns ? mul(wg, ci(nWidth)) : ci(0);
  Value k0 = disjointDQ ? ci(0) : mul(slab, ci(64));
  const DQShare dqShare{n0, nWidth, k0, kRows, qBlock, splitRows, disjointDQ};

  const MainKernel kernel{base,       kSlabAddr,
                          vSlabAddr,  dsBase,
                          pBase,      tid,
                          wg,         lane,
                          slab,       slice,
                          rowInSlab,  colInBlock,
                          qCol0,      {keyRow[0], keyRow[1]},
                          tInWG,      isIssuer,
                          isThread0,  isConsumer0,
                          batch,      kBlock,
                          seqK,       offset,
                          perHead,    qbLo,
                          numIters,   seqPad,
                          turnsPtr,   accPtr,
                          dropoutGen, dqShare,
                          stepOf,     statIndex,
                          barFull,    barEmpty,
                          issueStep};
  SmallVector<Value> init(2 * nAcc, cf(0));
  auto loop = scf::ForOp::create(
      b, loc, ci(0), numIters, ci(1), init,
      [&](OpBuilder &, Location, Value it, ValueRange iters) {
        emitStep(kernel, it, iters);
      });

  // The last bulk reduces complete before the CTA's shared memory goes.
  if (viaSmem)
    scf::IfOp::create(b, loc, isIssuer, [&](OpBuilder &, Location) {
      ptxVoid("cp.async.bulk.wait_group 0;", "", {});
      scf::YieldOp::create(b, loc);
    });

  storeKeyGradients(SmallVector<Value>(loop.getResults()), dkPtr, dvPtr,
                    {kStart, storedKeys, rowOfKey}, keyRow, slice, colInBlock,
                    ctid, offDQ);
  b.setInsertionPointToEnd(entry);
  LLVM::ReturnOp::create(b, loc, ValueRange());
}

void mlir::fa3::buildHopperAttentionGradKernels(
    OpBuilder &builder, gpu::GPUModuleOp module,
    const HopperAttentionGradSpec &spec,
    GradKeyGridReplay &keyGrid) {
  GradKernelBuilder kb(builder, module.getLoc(), spec, keyGrid);
  kb.buildPreprocess(module);
  kb.buildMain(module);
  kb.buildPostprocess(module);
}
