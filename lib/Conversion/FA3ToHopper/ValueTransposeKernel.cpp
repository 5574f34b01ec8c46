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
// packP in TileToHopper.cpp and docs/Design.md section 9).
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
  // source rows go through shared memory (rows padded by 4 bytes so that the
  // column reads of phase 2 hit distinct banks), so that both the reads of V
  // (D bytes per key) and the writes of V' (128 slots per row) are
  // coalesced 4-byte accesses.
  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value slot0 = mul(NVVM::BlockIdXOp::create(b, loc, i32), ci(kTransposeSlots));
  Value h = NVVM::BlockIdYOp::create(b, loc, i32);
  Value bIdx = NVVM::BlockIdZOp::create(b, loc, i32);
  Value raw = LLVM::AddressOfOp::create(b, loc, smemPtr, kDynamicSmemName);
  const int64_t d = s.headDim, pitch = d + 4;
  Type i8 = b.getI8Type();

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
    for (int64_t w = 0; w < 4; ++w) {
      Value at = add(mul(row, ci(pitch)), add(mul(chunk, ci(16)), ci(4 * w)));
      LLVM::StoreOp::create(
          b, loc, LLVM::ExtractElementOp::create(b, loc, v, ci(w)),
          LLVM::GEPOp::create(b, loc, smemPtr, i8, raw, ValueRange{at}), 4);
    }
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
      Value key = add(add(sub(slot, j), mul(divu(j, ci(16)), ci(16))), ci(0));
      key = add(key, add(mul(divu(remu(j, ci(16)), ci(4)), ci(2)),
                         ci((v & 1) + 8 * (v >> 1))));
      Value at = add(mul(key, ci(pitch)), col);
      Value byte = LLVM::LoadOp::create(
          b, loc, i8,
          LLVM::GEPOp::create(b, loc, smemPtr, i8, raw, ValueRange{at}));
      Value wide = arith::ExtUIOp::create(b, loc, i32, byte);
      packed = ori(packed, arith::ShLIOp::create(b, loc, wide, ci(8 * v)));
    }
    Value out = add(
        mul(add(mul(add(mul(sext64(bIdx), cl(s.numKVHeads)), sext64(h)), cl(d)),
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

LLVM::LLVMFuncOp mlir::fa3::buildValueTransposeKernel(
    OpBuilder &builder, gpu::GPUModuleOp module,
    const HopperAttentionSpec &spec, StringRef name) {
  return ValueTransposeKernelBuilder(builder, module.getLoc(), spec)
      .build(module, name);
}
