//===- ValueTransposeKernel.cpp - V' for the FP8 forward as an sm_90a kernel
//===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The FP8 forward's layout kernel: V [B, Sk, Hkv, D] (e4m3) to V' [B, Hkv,
// D, roundup(Sk, block_n)], keys innermost, so that the e4m3 wgmma of P V,
// which takes no transposed B operand, reads V'ᵀ K-major (the attention
// kernel loads it with a transposed fa3.tma_load_tile). Within each group of
// 32 keys the keys are permuted: the S accumulator fragment, packed to e4m3
// in register order, is then the A fragment of P V'ᵀ with no shuffles (see
// TileKernelEmitter::packProbs and docs/Design.md section 9).
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"

#include "HopperCodegen.h"

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

/// Key slots per CTA and threads.
static constexpr int64_t kTransposeSlots = 128, kTransposeThreads = 256;

namespace {
class ValueTransposeKernelBuilder : public HopperCodegen {
public:
  ValueTransposeKernelBuilder(OpBuilder &b, Location loc,
                              const HopperAttentionSpec &spec)
      : HopperCodegen(b, loc, /*bf16=*/true, /*fp8=*/true), s(spec) {}

  LLVM::LLVMFuncOp build(gpu::GPUModuleOp module, StringRef name);

private:
  const HopperAttentionSpec &s;
};
} // namespace

LLVM::LLVMFuncOp ValueTransposeKernelBuilder::build(gpu::GPUModuleOp module,
                                                    StringRef name) {
  OpBuilder::InsertionGuard guard(b);
  declareDynamicSmem(module);
  b.setInsertionPointToEnd(module.getBody());
  auto fnType =
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(b.getContext()),
                                  {globalPtr, globalPtr, i32, i32});
  auto fn = LLVM::LLVMFuncOp::create(b, loc, name, fnType);
  fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
              b.getDenseI32ArrayAttr({int32_t(kTransposeThreads), 1, 1}));
  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  Value src = entry->getArgument(0), dst = entry->getArgument(1);
  Value seqK = entry->getArgument(2), seqPad = entry->getArgument(3);
  // One CTA per block of 128 key slots of one (batch, kv head): the 128
  // source rows go through shared memory so that both the reads of V (D
  // bytes per key) and the writes of V' (128 slots per row) are coalesced.
  // A tile row takes valueTransposeRowBytes(d) bytes; its 4-byte words are
  // XOR-swizzled by the row (rowSwizzle) so that phase 1's word stores and
  // phase 2's word loads each hit 32 distinct banks per warp (d256's phase
  // 1: 2).
  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value slot0 = mul(NVVM::BlockIdXOp::create(b, loc, i32), ci(kTransposeSlots));
  Value h = NVVM::BlockIdYOp::create(b, loc, i32);
  Value bIdx = NVVM::BlockIdZOp::create(b, loc, i32);
  Value raw = LLVM::AddressOfOp::create(b, loc, smemPtr, kDynamicSmemName);
  const int64_t d = s.headDim, rowWords = valueTransposeRowBytes(d) / 4;
  Type i8 = b.getI8Type();
  auto bit = [&](Value x, int64_t i) {
    return andi(arith::ShRUIOp::create(b, loc, x, ci(i)), ci(1));
  };
  auto shl = [&](Value x, int64_t i) {
    return arith::ShLIOp::create(b, loc, x, ci(i)).getResult();
  };
  // The XOR swizzle of tile row r's words, 5 bits of r: bijective over the
  // rows one phase-2 load of a warp reads (bits 1, 2, 4, 5, 6 vary, 0 and 3
  // fixed; see the slot permutation below) and, in its low two bits, over
  // four consecutive rows (bits 0, 1 vary: a warp's phase-1 stores at d128;
  // bits 0, 1 and 4 over the eight rows of one at d64).
  auto rowSwizzle = [&](Value r) {
    Value s0 = bit(r, 1), s1 = xori(bit(r, 2), bit(r, 0));
    Value s4 = xori(bit(r, 6), bit(r, 2));
    return ori(ori(ori(s0, shl(s1, 1)), shl(bit(r, 4), 2)),
               ori(shl(bit(r, 5), 3), shl(s4, 4)));
  };
  auto wordAt = [&](Value r, Value word) {
    Value at = mul(add(mul(r, ci(rowWords)), xori(word, rowSwizzle(r))), ci(4));
    return LLVM::GEPOp::create(b, loc, smemPtr, i8, raw, ValueRange{at});
  };

  // Phase 1: V[b, slot0 + r, h, :] -> tile row r (zeros past Sk), 16 bytes
  // a load, every load issued before the first shared store so that they
  // are in flight together (one 4-byte load at a time left the kernel at
  // about a third of the memory bandwidth).
  const int64_t chunks = d / 16;
  SmallVector<std::pair<Value, Value>> rows; // (row, chunk)
  SmallVector<Value> loads;
  Type vec = VectorType::get({4}, i32);
  for (int64_t i = 0; i < kTransposeSlots * chunks / kTransposeThreads; ++i) {
    Value item = add(tid, ci(i * kTransposeThreads));
    Value row = divu(item, ci(chunks)), chunk = remu(item, ci(chunks));
    Value key = add(slot0, row);
    Value inside = cmp(arith::CmpIPredicate::slt, key, seqK);
    auto loaded = scf::IfOp::create(b, loc, TypeRange{vec}, inside,
                                    /*addElseBlock=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loaded.thenBlock());
      Value idx =
          add(mul(add(mul(add(mul(sext64(bIdx), sext64(seqK)), sext64(key)),
                          cl(s.numKVHeads)),
                      sext64(h)),
                  cl(d)),
              zext64(mul(chunk, ci(16))));
      Value ptr =
          LLVM::GEPOp::create(b, loc, globalPtr, i8, src, ValueRange{idx});
      scf::YieldOp::create(
          b, loc, ValueRange{LLVM::LoadOp::create(b, loc, vec, ptr, 16)});
      b.setInsertionPointToStart(loaded.elseBlock());
      scf::YieldOp::create(
          b, loc, ValueRange{LLVM::ZeroOp::create(b, loc, vec).getResult()});
    }
    rows.push_back({row, chunk});
    loads.push_back(loaded.getResult(0));
  }
  for (auto [rc, v] : llvm::zip(rows, loads)) {
    auto [row, chunk] = rc;
    for (int64_t w = 0; w < 4; ++w)
      LLVM::StoreOp::create(b, loc,
                            LLVM::ExtractElementOp::create(b, loc, v, ci(w)),
                            wordAt(row, add(mul(chunk, ci(4)), ci(w))), 4);
  }
  NVVM::Barrier0Op::create(b, loc);

  // Phase 2: a thread takes 4 slots (4g .. 4g + 3, g its lane) of 4
  // columns (4c .. 4c + 3): one 4-byte load from each of the 4 tile rows
  // π(4g + v), a 4 x 4 byte transpose in 8 prmt, and one 4-byte store to
  // each of the 4 V' rows, V'[b, h, 4c + k, slot0 + 4g .. +3] (a warp's
  // store covers 128 slots of one row). Slot a = 32q + 16u + 4t + v holds
  // key π(a) = 32q + 16u + 2t + (v & 1) + 8 (v >> 1) (see the A-fragment
  // packing in the kernel).
  Value lane = remu(tid, ci(32));
  Value q = divu(lane, ci(8)), u = remu(divu(lane, ci(4)), ci(2));
  Value t = remu(lane, ci(4));
  Value keyBase = add(add(mul(q, ci(32)), mul(u, ci(16))), mul(t, ci(2)));
  auto prmt = [&](Value lo, Value hi, int64_t selector) {
    return NVVM::PermuteOp::create(b, loc, i32, lo, hi, ci(selector),
                                   NVVM::PermuteMode::DEFAULT)
        .getResult();
  };
  Value rowBase =
      mul(add(mul(sext64(bIdx), cl(s.numKVHeads)), sext64(h)), cl(d));
  Value slotOut = zext64(add(slot0, mul(lane, ci(4))));
  for (int64_t i = 0; i < (d / 4) * 32 / kTransposeThreads; ++i) {
    Value col4 = divu(add(tid, ci(i * kTransposeThreads)), ci(32));
    Value w[4];
    for (int64_t v = 0; v < 4; ++v) {
      Value key = add(keyBase, ci((v & 1) + 8 * (v >> 1)));
      w[v] = LLVM::LoadOp::create(b, loc, i32, wordAt(key, col4), 4);
    }
    // With w = (a, b, c, d) and byte 0 first: (a0 b0 a1 b1), (c0 d0 c1
    // d1), (a2 b2 a3 b3), (c2 d2 c3 d3), then column k = (a_k b_k c_k d_k).
    Value lo01 = prmt(w[0], w[1], 0x5140), hi01 = prmt(w[2], w[3], 0x5140);
    Value lo23 = prmt(w[0], w[1], 0x7362), hi23 = prmt(w[2], w[3], 0x7362);
    Value cols[4] = {prmt(lo01, hi01, 0x5410), prmt(lo01, hi01, 0x7632),
                     prmt(lo23, hi23, 0x5410), prmt(lo23, hi23, 0x7632)};
    for (int64_t k = 0; k < 4; ++k) {
      Value col = zext64(add(mul(col4, ci(4)), ci(k)));
      Value out = add(mul(add(rowBase, col), sext64(seqPad)), slotOut);
      LLVM::StoreOp::create(
          b, loc, cols[k],
          LLVM::GEPOp::create(b, loc, globalPtr, i8, dst, ValueRange{out}), 4);
    }
  }
  LLVM::ReturnOp::create(b, loc, ValueRange());
  return fn;
}

LLVM::LLVMFuncOp mlir::fa3::buildValueTransposeKernel(
    OpBuilder &builder, gpu::GPUModuleOp module,
    const HopperAttentionSpec &spec, StringRef name) {
  return ValueTransposeKernelBuilder(builder, module.getLoc(), spec)
      .build(module, name);
}
