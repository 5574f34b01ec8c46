//===- HopperCodegen.cpp - LLVM/NVVM building blocks for sm_90a --------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "HopperCodegen.h"

#include "fa3/Conversion/InlinePtx.h"

#include <limits>

#include <cassert>
#include <cstdio>
#include <cstring>

using namespace mlir;
using namespace mlir::fa3::detail;

std::string mlir::fa3::detail::attentionKernelNamePrefix(
    StringRef direction, StringRef type, int64_t headDim, int64_t numQHeads,
    int64_t numKVHeads, int64_t blockM, int64_t blockN, int64_t stages) {
  return ("fa3_" + direction + "_" + type + "_d" + Twine(headDim) + "_h" +
          Twine(numQHeads) + "x" + Twine(numKVHeads) + "_m" + Twine(blockM) +
          "n" + Twine(blockN) + "s" + Twine(stages))
      .str();
}

std::string mlir::fa3::detail::registerSplitSuffix(int64_t producerRegs,
                                                   int64_t consumerRegs) {
  if (producerRegs == 0)
    return "";
  return ("_ws" + Twine(producerRegs) + "x" + Twine(consumerRegs)).str();
}

Value mlir::fa3::detail::cloneIndexOpAsI32(OpBuilder &b, Location loc,
                                           Operation *op, ValueRange operands) {
  OperationState state(loc, op->getName());
  state.addOperands(operands);
  for (Type t : op->getResultTypes())
    state.addTypes(t.isIndex() ? b.getI32Type() : t);
  state.addAttributes(op->getAttrs());
  return b.create(state)->getResult(0);
}

std::string mlir::fa3::detail::floatBitsSuffix(StringRef tag, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", bits);
  return ("_" + tag + hex).str();
}

mlir::fa3::DropoutGenerator HopperCodegen::loadDropoutGenerator(Value rngPtr) {
  auto word = [&](int32_t i) -> Value {
    Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, i64, rngPtr,
                                    ArrayRef<LLVM::GEPArg>{i});
    return LLVM::LoadOp::create(b, loc, i64, ptr, /*alignment=*/8);
  };
  return DropoutGenerator::fromSeedAndOffset(b, loc, word(0), word(1));
}

HopperCodegen::HopperCodegen(OpBuilder &b, Location loc, bool bf16, bool fp8)
    : b(b), loc(loc), bf16(bf16), fp8(fp8) {
  MLIRContext *ctx = b.getContext();
  i1 = b.getI1Type();
  i32 = b.getI32Type();
  i64 = b.getI64Type();
  f32 = b.getF32Type();
  elt = bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
  smemPtr = LLVM::LLVMPointerType::get(ctx, 3);
  globalPtr = LLVM::LLVMPointerType::get(ctx, 1);
  genericPtr = LLVM::LLVMPointerType::get(ctx);
}


Value HopperCodegen::ptxUnary(StringRef ptx, Value x) {
  return LLVM::InlineAsmOp::create(
             b, loc, f32, ValueRange{x}, b.getStringAttr(ptx),
             b.getStringAttr("=f,f"), /*has_side_effects=*/UnitAttr(),
             /*is_align_stack=*/UnitAttr(), LLVM::TailCallKindAttr(),
             LLVM::AsmDialectAttr(), ArrayAttr())
      .getResult(0);
}

void HopperCodegen::ptxVoid(StringRef ptx, StringRef constraints,
                            ValueRange operands) {
  inlinePtx(b, loc, Type(), operands, ptx, constraints);
}

void HopperCodegen::declareDynamicSmem(gpu::GPUModuleOp module) {
  if (module.lookupSymbol(kDynamicSmemName))
    return;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  // extern __shared__ __align__(1024) char fa3_dynamic_smem[];
  LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External,
                         kDynamicSmemName, Attribute(), /*alignment=*/1024,
                         /*addrSpace=*/3);
}

void HopperCodegen::setAlignedDynamicSmem() {
  Value raw = LLVM::AddressOfOp::create(b, loc, smemPtr, kDynamicSmemName);
  Value rawAddr = smemAddr(raw);
  Value pad = sub(andi(add(rawAddr, ci(1023)), ci(~1023)), rawAddr);
  smem = LLVM::GEPOp::create(b, loc, smemPtr, b.getI8Type(), raw,
                             ValueRange{pad});
}

Value HopperCodegen::descriptor(Value addr, int64_t leadingBytes,
                                int64_t strideBytes, int64_t swizzleBytes) {
  assert((swizzleBytes == 128 || swizzleBytes == 64) && "unsupported swizzle");
  Value lo = arith::ShRUIOp::create(b, loc, andi(addr, ci(0x3FFFF)), ci(4));
  int64_t fixed = ((leadingBytes >> 4) & 0x3FFF) << 16;
  fixed |= ((strideBytes >> 4) & 0x3FFF) << 32;
  fixed |= int64_t(swizzleBytes == 128 ? 1 : 2) << 62;
  return arith::OrIOp::create(b, loc, zext64(lo), cl(fixed));
}

void HopperCodegen::bulkLoad(Value dst, Value src, int64_t bytes, Value bar) {
  // Inline PTX rather than nvvm.cp.async.bulk.shared.cluster.global, which
  // changes the backward's address arithmetic (not byte-identical PTX).
  ptxVoid("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
          "[$0], [$1], $2, [$3];",
          "r,l,r,r", {smemAddr(dst), src, ci(bytes), smemAddr(bar)});
}

void HopperCodegen::namedBarrier(int64_t id, int64_t threads) {
  namedBarrierSync(ci(id), threads);
}

void HopperCodegen::namedBarrierSync(Value id, int64_t threads) {
  NamedBarrierOp::create(b, loc, id, b.getI64IntegerAttr(threads),
                         UnitAttr());
}

void HopperCodegen::namedBarrierArrive(Value id, int64_t threads) {
  NamedBarrierOp::create(b, loc, id, b.getI64IntegerAttr(threads),
                         b.getUnitAttr());
}

SmallVector<Value>
HopperCodegen::maskFragment(ArrayRef<Value> acc, Value needMask,
                            llvm::function_ref<Value(int64_t)> hidden) {
  float negInf = -std::numeric_limits<float>::infinity();
  auto masked = scf::IfOp::create(
      b, loc, TypeRange(SmallVector<Type>(acc.size(), f32)), needMask,
      /*addElseBlock=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(masked.thenBlock());
  SmallVector<Value> m;
  for (int64_t r = 0, e = acc.size(); r < e; ++r)
    m.push_back(select(hidden(r), cf(negInf), acc[r]));
  scf::YieldOp::create(b, loc, m);
  b.setInsertionPointToStart(masked.elseBlock());
  scf::YieldOp::create(b, loc, acc);
  return SmallVector<Value>(masked.getResults());
}

void HopperCodegen::fenceProxyAsyncShared() {
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
}

void HopperCodegen::reduceAddPair(Value ptr, Value x, Value y) {
  ptxVoid("red.global.add.v2.f32 [$0], {$1, $2};", "l,f,f", {ptr, x, y});
}

Value HopperCodegen::keyHidden(Value query, Value key, Value seqK,
                               Value offset, int64_t left, int64_t right) {
  Value diag = add(query, offset);
  Value hidden = cmp(arith::CmpIPredicate::sge, key, seqK);
  if (right >= 0)
    hidden = ori(hidden,
                 cmp(arith::CmpIPredicate::sgt, key, add(diag, ci(right))));
  if (left >= 0)
    hidden =
        ori(hidden, cmp(arith::CmpIPredicate::slt, key, sub(diag, ci(left))));
  return hidden;
}

std::pair<Value, Value> HopperCodegen::finalizeRow(
    Value m, Value partialSum, llvm::function_ref<Value()> makeNumerator,
    llvm::function_ref<Value()> makeScale, float lnOffset, bool wholeRowSum) {
  Value l = wholeRowSum ? partialSum : quadReduce(partialSum, /*isMax=*/false);
  Value empty =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, l, cf(0));
  Value inv =
      select(empty, cf(0),
             arith::DivFOp::create(b, loc, makeNumerator(), l).getResult());
  Value ln = fmul(ptxUnary("lg2.approx.f32 $0, $1;", l),
                  cf(static_cast<float>(M_LN2)));
  if (lnOffset != 0.0f)
    ln = fsub(ln, cf(lnOffset));
  Value lse = select(empty, cf(-std::numeric_limits<float>::infinity()),
                     fadd(fmul(m, makeScale()), ln));
  return {inv, lse};
}

Value HopperCodegen::pack(Value lo, Value hi) {
  auto v2f32 = VectorType::get({2}, f32);
  Value v = LLVM::UndefOp::create(b, loc, v2f32);
  v = LLVM::InsertElementOp::create(b, loc, v, lo, ci(0));
  v = LLVM::InsertElementOp::create(b, loc, v, hi, ci(1));
  Value t = LLVM::FPTruncOp::create(b, loc, VectorType::get({2}, elt), v);
  return LLVM::BitcastOp::create(b, loc, i32, t);
}

Value HopperCodegen::packE4M3(Value x0, Value x1, Value x2, Value x3) {
  // cvt.e4m3x2 puts its first source in the high byte.
  return LLVM::InlineAsmOp::create(
             b, loc, i32, ValueRange{x0, x1, x2, x3},
             b.getStringAttr("{\n.reg .b16 lo, hi;\n"
                             "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
                             "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
                             "mov.b32 $0, {lo, hi};\n}"),
             b.getStringAttr("=r,f,f,f,f"), /*has_side_effects=*/UnitAttr(),
             /*is_align_stack=*/UnitAttr(), LLVM::TailCallKindAttr(),
             LLVM::AsmDialectAttr(), ArrayAttr())
      .getResult(0);
}

SmallVector<Value> HopperCodegen::wgmmaSS(ArrayRef<Value> acc, Value descA,
                                          Value descB, bool accumulate,
                                          bool transA, bool transB) {
  assert(!(fp8 && (transA || transB)) && "e4m3 wgmma operands are K-major");
  auto op = WgmmaOp::create(
      b, loc, SmallVector<Type>(acc.size(), f32), acc, ValueRange(), descA,
      descB, ci(accumulate ? 1 : 0), TypeAttr::get(mmaType()),
      transA ? b.getUnitAttr() : UnitAttr(),
      transB ? b.getUnitAttr() : UnitAttr());
  return SmallVector<Value>(op.getResults());
}

SmallVector<Value> HopperCodegen::wgmmaRS(ArrayRef<Value> acc,
                                          ArrayRef<Value> a, Value descB) {
  // 16-bit B is read MN-major (imm-trans-b), e4m3 B K-major.
  auto op = WgmmaOp::create(b, loc, SmallVector<Type>(acc.size(), f32), acc,
                            a, Value(), descB, ci(1), TypeAttr::get(mmaType()),
                            UnitAttr(), fp8 ? UnitAttr() : b.getUnitAttr());
  return SmallVector<Value>(op.getResults());
}
