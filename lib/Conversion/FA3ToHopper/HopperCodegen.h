//===- HopperCodegen.h - LLVM/NVVM building blocks for sm_90a ---*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// What the forward and backward kernel builders share: scalar arithmetic,
// shared-memory addressing, mbarriers, TMA, wgmma matrix descriptors and the
// inline-PTX wgmma forms, register packing and quad reductions. Index math is
// i32 (sequence lengths fit); global byte offsets are i64.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_CONVERSION_FA3TOHOPPER_HOPPERCODEGEN_H
#define FA3_LIB_CONVERSION_FA3TOHOPPER_HOPPERCODEGEN_H

#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Utils/Philox.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

namespace mlir::fa3::detail {

/// The tile level's index (or i1) arithmetic op `op` again at `b`, on
/// `operands`, with its index results as i32: the kernels compute indices
/// in i32 (sequence lengths fit).
Value cloneIndexOpAsI32(OpBuilder &b, Location loc, Operation *op,
                        ValueRange operands);

/// `_<tag><the 8 hex digits of v's bits>`: a kernel name's part for a float
/// compiled into the kernel (symbol names take [A-Za-z0-9_$.] only).
std::string floatBitsSuffix(StringRef tag, float v);

/// The start every attention kernel's name shares:
/// `fa3_<direction>_<type>_d<D>_h<Hq>x<Hkv>_m<block_m>n<block_n>s<stages>`.
std::string attentionKernelNamePrefix(StringRef direction, StringRef type,
                                      int64_t headDim, int64_t numQHeads,
                                      int64_t numKVHeads, int64_t blockM,
                                      int64_t blockN, int64_t stages);

/// `_ws<producer_regs>x<consumer_regs>` for a kernel with a producer
/// warpgroup (the setmaxnreg split), "" without one.
std::string registerSplitSuffix(int64_t producerRegs, int64_t consumerRegs);

/// The number of bytes in one row of a 128-byte swizzle atom, and its
/// element count for 16-bit types.
inline constexpr int64_t kAtomBytes = 128;
inline constexpr int64_t kAtomCols = 64;

/// The name of the dynamic shared memory symbol of fa3's kernels.
inline constexpr llvm::StringLiteral kDynamicSmemName = "fa3_dynamic_smem";

class HopperCodegen {
public:
  /// `bf16` picks the 16-bit type of packed results and, unless `fp8`, of
  /// the wgmma operands; with `fp8` the wgmma operands are e4m3 (k = 32,
  /// both K-major).
  HopperCodegen(OpBuilder &b, Location loc, bool bf16, bool fp8 = false);

protected:
  // Scalars.
  Value ci(int64_t v) { return arith::ConstantIntOp::create(b, loc, i32, v); }
  Value cl(int64_t v) { return arith::ConstantIntOp::create(b, loc, i64, v); }
  Value cf(float v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value divu(Value x, Value y) { return arith::DivUIOp::create(b, loc, x, y); }
  Value remu(Value x, Value y) { return arith::RemUIOp::create(b, loc, x, y); }
  Value minsi(Value x, Value y) { return arith::MinSIOp::create(b, loc, x, y); }
  Value maxsi(Value x, Value y) { return arith::MaxSIOp::create(b, loc, x, y); }
  Value andi(Value x, Value y) { return arith::AndIOp::create(b, loc, x, y); }
  Value ori(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value xori(Value x, Value y) { return arith::XOrIOp::create(b, loc, x, y); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y);
  }
  Value fadd(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value fmul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value fsub(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value fmax(Value x, Value y) {
    return arith::MaximumFOp::create(b, loc, x, y);
  }
  /// x · y + z with one rounding (fma.rn.f32).
  Value fma(Value x, Value y, Value z) {
    return LLVM::FMAOp::create(b, loc, x, y, z);
  }
  /// The max or sum of `values` as a balanced tree of pairwise ops.
  Value treeReduce(ArrayRef<Value> values, bool isMax) {
    SmallVector<Value> level(values);
    while (level.size() > 1) {
      SmallVector<Value> next;
      for (size_t i = 0; i + 1 < level.size(); i += 2)
        next.push_back(isMax ? fmax(level[i], level[i + 1])
                             : fadd(level[i], level[i + 1]));
      if (level.size() % 2)
        next.push_back(level.back());
      level = std::move(next);
    }
    return level.front();
  }
  Value select(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, loc, c, x, y);
  }
  /// 2^x as one MUFU.EX2: the flush-to-zero form. The non-ftz
  /// `ex2.approx.f32` that llvm.exp2 lowers to costs ptxas three extra
  /// instructions per call (a denormal range check and two rescaling FMULs),
  /// and the softmax issues one per score; FA3/CUTLASS use the ftz form too.
  /// Inputs are ≤ 0 here, so flushing denormal results changes p by < 2^-126.
  Value exp2(Value x) {
    return LLVM::CallIntrinsicOp::create(
               b, loc, f32, b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"),
               ValueRange{x})
        .getResult(0);
  }
  /// 2^x on the FMA pipe instead of MUFU (FlashAttention-4's split of the
  /// softmax's exponentials): x = n + f with n = round(x), which adding
  /// 1.5 · 2^23 leaves in the low mantissa bits, and f in [-0.5, 0.5]; 2^f
  /// by a degree-2 minimax polynomial (relative error < 1.8e-3 over the
  /// whole range, checked in f32 by bench/poly_exp2_accuracy.py), n shifted
  /// into its exponent bits. x is clamped to -125 first: masked scores are
  /// -inf, and an n below -126 would wrap the exponent field. Results under
  /// 2^-125 then come out as ~2^-125, which FP8's e4m3 P (smallest
  /// subnormal 2^-9) rounds to 0 as it does the exact value.
  Value exp2OnFmaPipe(Value x) {
    Value magic = cf(12582912.0f);
    Value clamped = fmax(x, cf(-125.0f));
    Value shifted = fadd(clamped, magic);
    Value f = fsub(clamped, fsub(shifted, magic));
    Value p =
        fma(fma(cf(0.238422066f), f, cf(0.703434348f)), f, cf(1.00044262f));
    Value exponent = arith::ShLIOp::create(
        b, loc, arith::BitcastOp::create(b, loc, i32, shifted), ci(23));
    return arith::BitcastOp::create(
        b, loc, f32, add(arith::BitcastOp::create(b, loc, i32, p), exponent));
  }
  Value zext64(Value x) { return arith::ExtUIOp::create(b, loc, i64, x); }
  Value sext64(Value x) { return arith::ExtSIOp::create(b, loc, i64, x); }

  /// A one-result PTX snippet with f32 operands, e.g. tanh.approx.
  Value ptxUnary(StringRef ptx, Value x);
  /// A PTX statement with operands and no results.
  void ptxVoid(StringRef ptx, StringRef constraints, ValueRange operands);

  /// Marks the first `count` parameters of `fn` as CUtensorMaps passed by
  /// value in parameter space (byval [16 x i64], 64-byte aligned,
  /// __grid_constant__), so TMA reads them without a trip through global
  /// memory.
  void passTensorMapsByValue(LLVM::LLVMFuncOp fn, unsigned count) {
    auto mapType = LLVM::LLVMArrayType::get(i64, 16);
    for (unsigned i = 0; i < count; ++i) {
      fn.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(),
                    TypeAttr::get(mapType));
      fn.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(),
                    b.getI64IntegerAttr(64));
      fn.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(),
                    b.getUnitAttr());
    }
  }

  /// Declares the dynamic shared memory symbol at the end of `module` once.
  void declareDynamicSmem(gpu::GPUModuleOp module);
  /// Sets `smem` to the 1 KiB-aligned base of the dynamic shared memory (the
  /// 128-byte swizzle repeats every 1 KiB); emitted at the insertion point.
  void setAlignedDynamicSmem();
  /// Shared memory: the tiles and barriers at byte offsets from `smem`.
  Value smemAt(Value byteOffset) {
    return LLVM::GEPOp::create(b, loc, smemPtr, b.getI8Type(), smem,
                               ValueRange{byteOffset});
  }
  Value smemAddr(Value ptr) { // 32-bit shared-window address
    return LLVM::PtrToIntOp::create(b, loc, i32, ptr);
  }

  /// The 64-bit wgmma matrix descriptor of a swizzled operand at shared
  /// address `addr` (bits 0-13: addr >> 4; 16-29: leading byte offset >> 4;
  /// 32-45: stride byte offset >> 4; 62-63: swizzle mode, 1 = 128B, 2 =
  /// 64B).
  Value descriptor(Value addr, int64_t leadingBytes, int64_t strideBytes,
                   int64_t swizzleBytes = 128);

  void barrierInit(Value bar, int64_t count) {
    NVVM::MBarrierInitOp::create(b, loc, bar, ci(count), Value());
  }
  void waitParity(Value bar, Value parity) {
    NVVM::MBarrierTryWaitParityOp::create(b, loc, bar, parity, ci(0x989680));
  }
  void expectTx(Value bar, int64_t bytes) {
    NVVM::MBarrierArriveExpectTxOp::create(b, loc, Type(), bar, ci(bytes),
                                           NVVM::MemScopeKind::CTA,
                                           /*relaxed=*/false, Value());
  }
  void arrive(Value bar) {
    NVVM::MBarrierArriveOp::create(b, loc, Type(), bar, Value(),
                                   NVVM::MemScopeKind::CTA, false);
  }
  void tmaLoad(Value dst, Value map, ArrayRef<Value> coords, Value bar) {
    NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
        b, loc, dst, map, coords, bar, ValueRange(), Value(), Value(),
        NVVM::TMALoadMode::TILE, /*isCTAOnly=*/true,
        NVVM::CTAGroupKindAttr(), Value());
  }
  /// The TMA store of the box at `coords` of `map` from shared `src`, in
  /// the thread's current bulk async-group.
  void tmaStore(Value map, Value src, ArrayRef<Value> coords) {
    NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
        b, loc, map, src, coords, Value(), NVVM::TMAStoreMode::TILE, Value());
  }
  /// A 1-D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte
  /// aligned) from global `src` to shared `dst`, completing on `bar`.
  void bulkLoad(Value dst, Value src, int64_t bytes, Value bar);
  /// bar.sync on named barrier `id` with `threads` threads (fa3.named_barrier).
  void namedBarrier(int64_t id, int64_t threads);
  /// bar.sync / bar.arrive on a named barrier chosen at run time (not the
  /// .aligned forms: the other warpgroups of the CTA do not execute them).
  void namedBarrierSync(Value id, int64_t threads);
  void namedBarrierArrive(Value id, int64_t threads);
  /// Orders this thread's generic-proxy shared-memory writes before later
  /// async-proxy reads (wgmma operands).
  void fenceProxyAsyncShared();
  /// red.global.add.v2.f32: two adjacent f32 atomically added at `ptr`.
  void reduceAddPair(Value ptr, Value x, Value y);

  /// The visibility rule of fa3.mask on run-time indices (i32): whether
  /// key `key` is hidden from query `query`. `offset` is Sk - Sq (query q's
  /// diagonal is key q + offset); `left`/`right` the resolved window (-1:
  /// unbounded). (Which blocks need the mask is the tile level's scf.if,
  /// replayed.)
  Value keyHidden(Value query, Value key, Value seqK, Value offset,
                  int64_t left, int64_t right);
  /// `acc` (an f32 accumulator fragment) with the registers `hidden(r)`
  /// says are masked set to -inf, under `scf.if needMask` so that blocks
  /// without a mask edge skip the per-register tests.
  SmallVector<Value> maskFragment(ArrayRef<Value> acc, Value needMask,
                                  llvm::function_ref<Value(int64_t)> hidden);

  Value shflXor(Value v, int64_t lane) {
    return NVVM::ShflOp::create(b, loc, f32, ci(-1), v, ci(lane), ci(0x1f),
                                NVVM::ShflKind::bfly, UnitAttr());
  }
  Value quadReduce(Value v, bool isMax) {
    for (int64_t lane : {1, 2}) {
      Value other = shflXor(v, lane);
      v = isMax ? fmax(v, other) : fadd(v, other);
    }
    return v;
  }
  /// fa3.finalize for one of a thread's two rows: the row sum l from its
  /// quad's partial sums `partialSum` (or `partialSum` itself where it is
  /// the whole row's, `wholeRowSum`), then (numerator / l, LSE = scale · m
  /// + ln l − lnOffset), or (0, −inf) for a row that saw no key (l = 0).
  /// `makeScale` and `makeNumerator` build their values where they are first
  /// used; `lnOffset` is ln of a factor the sum carries (the FP8 kernel's
  /// P · 2^8).
  std::pair<Value, Value> finalizeRow(Value m, Value partialSum,
                                      llvm::function_ref<Value()> makeNumerator,
                                      llvm::function_ref<Value()> makeScale,
                                      float lnOffset = 0.0f,
                                      bool wholeRowSum = false);
  /// Packs two f32 into one register of two bf16/f16, `lo` in bits 0-15.
  Value pack(Value lo, Value hi);
  /// Packs four f32 into one register of four e4m3 (round to nearest,
  /// saturating), `x0` in the low byte.
  Value packE4M3(Value x0, Value x1, Value x2, Value x3);

  /// `fa3.wgmma` (the Hopper kernel level's MMA, lowered to inline PTX by
  /// convert-fa3-kernel-to-nvvm) with A and B from shared memory;
  /// `transA`/`transB` read them MN-major (16-bit types only: e4m3 operands
  /// are always K-major).
  SmallVector<Value> wgmmaSS(ArrayRef<Value> acc, Value descA, Value descB,
                             bool accumulate, bool transA = false,
                             bool transB = false);
  /// A in registers (4 x b32 of bf16/f16 pairs, or of e4m3 quadruples), B
  /// in shared memory: MN-major (imm-trans-b = 1) for 16-bit types, K-major
  /// for e4m3.
  SmallVector<Value> wgmmaRS(ArrayRef<Value> acc, ArrayRef<Value> a,
                             Value descB);
  /// The A fragment of k-chunk `k` of a register-A wgmma made from an m64
  /// f32 accumulator fragment: registers 8k .. 8k+7, pairwise packed.
  /// Dropout's Philox key and offset words, loaded from the kernel's (seed,
  /// offset) parameter `rngPtr` (a global i64 [2]) when the kernel runs.
  DropoutGenerator loadDropoutGenerator(Value rngPtr);

  SmallVector<Value> packAFragment(ArrayRef<Value> acc, int64_t k) {
    int64_t base = 8 * k;
    return {pack(acc[base], acc[base + 1]), pack(acc[base + 2], acc[base + 3]),
            pack(acc[base + 4], acc[base + 5]),
            pack(acc[base + 6], acc[base + 7])};
  }

  OpBuilder &b;
  Location loc;
  bool bf16, fp8;
  /// The K of one wgmma: 16 for 16-bit operands, 32 for e4m3.
  int64_t mmaK() const { return fp8 ? 32 : 16; }
  /// The element type of the wgmma operands.
  Type mmaType() const {
    return fp8 ? Type(b.getType<Float8E4M3FNType>()) : elt;
  }
  Type i1, i32, i64, f32, elt;
  LLVM::LLVMPointerType smemPtr, globalPtr, genericPtr;
  Value smem;
};

} // namespace mlir::fa3::detail

#endif // FA3_LIB_CONVERSION_FA3TOHOPPER_HOPPERCODEGEN_H
