//===- CombineSplitsKernel.cpp - fa3.combine_splits as an sm_90a kernel --===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The second kernel of a split-KV forward: fa3.combine_splits of the f32
// partials the split kernel wrote. One warp per (query, head) row reads the
// row's N partial LSEs (one broadcast load each), weighs each split by
// exp(lse_s - max) and sums the N partial O rows, D / 32 columns a lane in
// one vector load per split; lane 0 writes the merged LSE. A row whose
// splits all saw no key (every lse_s = -inf) gets O = 0 and LSE = -inf, as
// fa3.combine_splits defines.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"

#include "HopperCodegen.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

namespace {

class CombineSplitsKernelBuilder : public HopperCodegen {
public:
  CombineSplitsKernelBuilder(OpBuilder &b, Location loc,
                             const HopperAttentionSpec &spec)
      : HopperCodegen(b, loc, spec.bf16), s(spec) {}

  void build(gpu::GPUModuleOp module, StringRef name);

private:
  Value elemPtr(Value base, Type type, Value index) {
    return LLVM::GEPOp::create(b, loc, globalPtr, type, base,
                               ValueRange{index});
  }
  /// 2^x and log2(x) through MUFU (the merge needs natural-log LSEs:
  /// exp(x) = 2^(x·log2 e), log(x) = log2(x) · ln 2).
  Value expE(Value x) { return exp2(fmul(x, cf(float(M_LOG2E)))); }
  Value logE(Value x) {
    return fmul(LLVM::CallIntrinsicOp::create(
                    b, loc, f32, b.getStringAttr("llvm.nvvm.lg2.approx.f"),
                    ValueRange{x})
                    .getResult(0),
                cf(float(M_LN2)));
  }

  const HopperAttentionSpec &s;
};

} // namespace

void CombineSplitsKernelBuilder::build(gpu::GPUModuleOp module,
                                       StringRef name) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  // (partial O, partial LSE, O, LSE, Sq, B).
  SmallVector<Type> params = {globalPtr, globalPtr, globalPtr,
                              globalPtr, i32,       i32};
  auto fnType = LLVM::LLVMFunctionType::get(
      LLVM::LLVMVoidType::get(b.getContext()), params);
  auto fn = LLVM::LLVMFuncOp::create(b, loc, name, fnType);
  fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
              b.getDenseI32ArrayAttr(
                  {int32_t(HopperAttentionSpec::kCombineThreads), 1, 1}));
  for (unsigned i = 0; i < 4; ++i)
    fn.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  Value partialO = entry->getArgument(0), partialLse = entry->getArgument(1);
  Value outPtr = entry->getArgument(2), lsePtr = entry->getArgument(3);
  Value seqQ = entry->getArgument(4), numBatches = entry->getArgument(5);

  const int64_t n = s.numSplits, d = s.headDim, heads = s.numQHeads;
  const int64_t perLane = d / 32;
  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value warp = divu(tid, ci(32)), lane = remu(tid, ci(32));
  Value batch = NVVM::BlockIdYOp::create(b, loc, i32);
  // Row r = q · Hq + h: consecutive warps read consecutive heads, which
  // are adjacent in the [., Sq, Hq, D] partials.
  Value row = add(mul(NVVM::BlockIdXOp::create(b, loc, i32),
                      ci(HopperAttentionSpec::kCombineRowsPerCta)),
                  warp);
  Value inside = cmp(arith::CmpIPredicate::ult, row, mul(seqQ, ci(heads)));
  scf::IfOp::create(b, loc, inside, [&](OpBuilder &, Location) {
    Value query = divu(row, ci(heads)), head = remu(row, ci(heads));
    // Split s of batch b is partial batch s · B + b.
    auto partialBatch = [&](int64_t split) {
      return add(sext64(mul(ci(split), numBatches)), sext64(batch));
    };
    SmallVector<Value> lse(n);
    for (int64_t split = 0; split < n; ++split) {
      // partial LSE [N·B, Hq, Sq].
      Value index =
          add(mul(add(mul(partialBatch(split), cl(heads)), sext64(head)),
                  sext64(seqQ)),
              sext64(query));
      lse[split] = LLVM::LoadOp::create(
          b, loc, f32, elemPtr(partialLse, f32, index), /*alignment=*/4);
    }
    Value max = treeReduce(lse, /*isMax=*/true);
    float inf = std::numeric_limits<float>::infinity();
    Value none =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, max, cf(-inf));
    // With no key anywhere the weights below would be NaN: weigh against 0
    // instead, which makes every weight exp(-inf) = 0.
    Value pivot = select(none, cf(0), max);
    // This lane's columns [lane · perLane, (lane + 1) · perLane).
    auto vecType = VectorType::get({perLane}, f32);
    // The largest power of two dividing the vector's bytes (d = 192: 8).
    int64_t vectorAlignment = (4 * perLane) & -(4 * perLane);
    // Each split's weight is computed where its partial row is read, so
    // only the N LSEs stay live across the loop (64 splits spilled with
    // the weights kept too).
    SmallVector<Value> acc(perLane, cf(0));
    Value total = cf(0);
    for (int64_t split = 0; split < n; ++split) {
      Value weight = expE(fsub(lse[split], pivot));
      total = fadd(total, weight);
      // partial O [N·B, Sq, Hq, D].
      Value rowIndex =
          add(mul(add(mul(partialBatch(split), sext64(seqQ)), sext64(query)),
                  cl(heads)),
              sext64(head));
      Value index = add(mul(rowIndex, cl(d)), zext64(mul(lane, ci(perLane))));
      Value v =
          LLVM::LoadOp::create(b, loc, vecType, elemPtr(partialO, f32, index),
                               /*alignment=*/vectorAlignment);
      for (int64_t c = 0; c < perLane; ++c)
        acc[c] = fma(weight, LLVM::ExtractElementOp::create(b, loc, v, ci(c)),
                     acc[c]);
    }
    Value inverse =
        select(none, cf(0), arith::DivFOp::create(b, loc, cf(1), total));
    // O [B, Sq, Hq, D] in the 16-bit type, perLane / 2 packed pairs.
    Value outRow = add(
        mul(add(mul(sext64(batch), sext64(seqQ)), sext64(query)), cl(heads)),
        sext64(head));
    Value outIndex = add(mul(outRow, cl(d)), zext64(mul(lane, ci(perLane))));
    for (int64_t c = 0; c < perLane; c += 2) {
      Value packed = pack(fmul(acc[c], inverse), fmul(acc[c + 1], inverse));
      LLVM::StoreOp::create(b, loc, packed,
                            elemPtr(outPtr, elt, add(outIndex, cl(c))),
                            /*alignment=*/4);
    }
    // LSE [B, Hq, Sq] = max + log Σ weights (-inf without keys).
    Value merged = select(none, cf(-inf), fadd(max, logE(total)));
    Value lane0 = cmp(arith::CmpIPredicate::eq, lane, ci(0));
    scf::IfOp::create(b, loc, lane0, [&](OpBuilder &, Location) {
      Value index = add(
          mul(add(mul(sext64(batch), cl(heads)), sext64(head)), sext64(seqQ)),
          sext64(query));
      LLVM::StoreOp::create(b, loc, merged, elemPtr(lsePtr, f32, index),
                            /*alignment=*/4);
      scf::YieldOp::create(b, loc);
    });
    scf::YieldOp::create(b, loc);
  });
  LLVM::ReturnOp::create(b, loc, ValueRange());
}

void mlir::fa3::buildCombineSplitsKernel(OpBuilder &builder,
                                         gpu::GPUModuleOp module,
                                         const HopperAttentionSpec &spec,
                                         StringRef name) {
  CombineSplitsKernelBuilder(builder, module.getLoc(), spec)
      .build(module, name);
}
