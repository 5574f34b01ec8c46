//===- HopperFP8PrepKernels.cpp - FP8 preparation kernels for sm_90a ------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The kernels of the tensor-level ops fa3-cast-fp8 inserts before an FP8
// attention. Both are memory-bound elementwise/reduction kernels: plain
// global loads and stores, warp shuffles, and one atomic per warp.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"
#include "fa3/Dialect/FA3/Utils/E4M3.h"

#include "HopperCodegen.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa3;
using namespace mlir::fa3::detail;

static FailureOr<HopperScalar> scalarOf(Operation *op, Type type,
                                        StringRef what) {
  if (type.isF32())
    return HopperScalar::F32;
  if (type.isBF16())
    return HopperScalar::BF16;
  if (type.isF16())
    return HopperScalar::F16;
  return op->emitOpError() << "has no Hopper kernel for " << what << " of "
                           << type;
}

static StringRef scalarName(HopperScalar s) {
  switch (s) {
  case HopperScalar::F32:
    return "f32";
  case HopperScalar::BF16:
    return "bf16";
  case HopperScalar::F16:
    return "f16";
  }
  llvm_unreachable("unknown scalar");
}

FailureOr<HopperHadamardSpec> HopperHadamardSpec::fromOp(HadamardOp op) {
  auto in = cast<RankedTensorType>(op.getInput().getType());
  auto out = cast<RankedTensorType>(op.getResult().getType());
  HopperHadamardSpec spec;
  auto input = scalarOf(op, in.getElementType(), "the input");
  auto output = scalarOf(op, out.getElementType(), "the result");
  if (failed(input) || failed(output))
    return failure();
  spec.input = *input;
  spec.output = *output;
  spec.dim = in.getShape().back();
  if (spec.dim < 32 || spec.dim > 256)
    return op.emitOpError() << "the Hopper kernel transforms rows of 32 to "
                               "256 elements (one warp per row), got "
                            << spec.dim;
  spec.seed = op.getSeed();
  return spec;
}

std::string HopperHadamardSpec::kernelName() const {
  return ("fa3_hadamard_" + scalarName(input) + "_" + scalarName(output) +
          "_d" + llvm::Twine(dim) + "_s" + llvm::Twine(seed < 0 ? "m" : "") +
          llvm::Twine(seed < 0 ? -uint64_t(seed) : uint64_t(seed)))
      .str();
}

FailureOr<HopperQuantizeSpec> HopperQuantizeSpec::fromOp(QuantizeOp op) {
  auto in = cast<RankedTensorType>(op.getInput().getType());
  auto descale = cast<RankedTensorType>(op.getDescale().getType());
  HopperQuantizeSpec spec;
  auto input = scalarOf(op, in.getElementType(), "the input");
  if (failed(input))
    return failure();
  spec.input = *input;
  spec.numHeads = in.getDimSize(2);
  spec.numGroups = descale.getDimSize(1);
  spec.headDim = in.getDimSize(3);
  if (ShapedType::isDynamic(spec.headDim) || spec.headDim % 4 != 0)
    return op.emitOpError() << "the Hopper kernel casts 4 elements at a "
                               "time; the head dim must be a static multiple "
                               "of 4, got "
                            << in.getDimSize(3);
  if (std::optional<int64_t> seed = op.getHadamardSeed()) {
    spec.hadamard = true;
    spec.seed = *seed;
    if (spec.headDim < 32 || spec.headDim > 256)
      return op.emitOpError() << "the Hopper kernel transforms rows of 32 to "
                                 "256 elements (one warp per row), got "
                              << spec.headDim;
  }
  return spec;
}

std::string HopperQuantizeSpec::kernelName() const {
  std::string name = ("fa3_quantize_" + scalarName(input) + "_h" +
                      llvm::Twine(numHeads) + "g" + llvm::Twine(numGroups) +
                      "_d" + llvm::Twine(headDim))
                         .str();
  if (hadamard)
    name += ("_hadamard_s" + llvm::Twine(seed < 0 ? "m" : "") +
             llvm::Twine(seed < 0 ? -uint64_t(seed) : uint64_t(seed)))
                .str();
  return name;
}

int64_t HopperQuantizeSpec::rowsPerChunk() const {
  int64_t perRow = numHeads / numGroups * headDim;
  return std::max<int64_t>(1, 16384 / perRow);
}

namespace {
class PrepKernelBuilder : public HopperCodegen {
public:
  PrepKernelBuilder(OpBuilder &b, Location loc)
      : HopperCodegen(b, loc, /*bf16=*/true) {}

  /// An `nvvm.kernel` llvm.func with `params` and `threads` per CTA; the
  /// builder is left at the start of its body.
  LLVM::LLVMFuncOp startKernel(gpu::GPUModuleOp module, StringRef name,
                               ArrayRef<Type> params, int64_t threads) {
    b.setInsertionPointToEnd(module.getBody());
    auto type = LLVM::LLVMFunctionType::get(
        LLVM::LLVMVoidType::get(b.getContext()), params);
    auto fn = LLVM::LLVMFuncOp::create(b, loc, name, type);
    fn->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), b.getUnitAttr());
    fn->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
                b.getDenseI32ArrayAttr({int32_t(threads), 1, 1}));
    b.setInsertionPointToStart(fn.addEntryBlock(b));
    return fn;
  }

  Type storageType(HopperScalar s) {
    switch (s) {
    case HopperScalar::F32:
      return f32;
    case HopperScalar::BF16:
      return b.getBF16Type();
    case HopperScalar::F16:
      return b.getF16Type();
    }
    llvm_unreachable("unknown scalar");
  }

  /// Element `index` (i64) of `base` read as f32.
  Value loadF32(Value base, Value index, HopperScalar s) {
    Type t = storageType(s);
    Value ptr =
        LLVM::GEPOp::create(b, loc, globalPtr, t, base, ValueRange{index});
    Value v = LLVM::LoadOp::create(b, loc, t, ptr);
    return s == HopperScalar::F32 ? v : arith::ExtFOp::create(b, loc, f32, v);
  }
  void storeF32(Value x, Value base, Value index, HopperScalar s) {
    Type t = storageType(s);
    Value v =
        s == HopperScalar::F32 ? x : arith::TruncFOp::create(b, loc, t, x);
    Value ptr =
        LLVM::GEPOp::create(b, loc, globalPtr, t, base, ValueRange{index});
    LLVM::StoreOp::create(b, loc, v, ptr);
  }
  /// `then` under `cond`, with no results.
  void ifThen(Value cond, llvm::function_ref<void()> then) {
    auto op = scf::IfOp::create(b, loc, TypeRange{}, cond,
                                /*addElseBlock=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(op.thenBlock());
    then();
  }
  Value fdiv(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value bitcast(Type t, Value v) {
    return arith::BitcastOp::create(b, loc, t, v);
  }
  /// max(amax / 448, 1e-12), then its reciprocal: correctly rounded divides
  /// (div.rn.f32), as the CPU lowering computes them.
  std::pair<Value, Value> descaleAndScale(Value amaxBits) {
    Value descale =
        fmax(fdiv(bitcast(f32, amaxBits), cf(kE4M3Max)), cf(kMinDescale));
    return {descale, fdiv(cf(1.0f), descale)};
  }

  /// This lane's d / 32 elements of the row at element offset `rowBase`
  /// (i64) of `in`, times diag(s)·H/sqrt(d) (fa3.hadamard with `seed`), in
  /// f32. Every lane of the warp must call it for the same row.
  SmallVector<Value> transformRow(Value in, Value rowBase, Value lane,
                                  int64_t d, int64_t seed, HopperScalar input);

  /// The largest `m` of the warp, atomically maxed by lane 0 into the amax
  /// bits of (batch, group).
  void warpMaxToAmax(Value m, Value lane, Value amax, Value batch, Value group,
                     int64_t numGroups) {
    for (int64_t laneMask : {16, 8, 4, 2, 1})
      m = fmax(m, shflXor(m, laneMask));
    ifThen(cmp(arith::CmpIPredicate::eq, lane, ci(0)), [&] {
      Value slot = add(mul(zext64(batch), cl(numGroups)), zext64(group));
      Value ptr =
          LLVM::GEPOp::create(b, loc, globalPtr, i32, amax, ValueRange{slot});
      LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::umax, ptr,
                                bitcast(i32, m),
                                LLVM::AtomicOrdering::monotonic);
    });
  }
  /// The amax bits of (batch, group) slot `slot` (i64).
  Value loadAmax(Value amax, Value slot) {
    return LLVM::LoadOp::create(
        b, loc, i32,
        LLVM::GEPOp::create(b, loc, globalPtr, i32, amax, ValueRange{slot}));
  }
  /// Thread `t` (i64) of a _cast kernel writes descale t when t < slots.
  void writeDescale(Value t, Value slots, Value amax, Value descales) {
    ifThen(cmp(arith::CmpIPredicate::slt, t, slots), [&] {
      Value ptr =
          LLVM::GEPOp::create(b, loc, globalPtr, f32, descales, ValueRange{t});
      LLVM::StoreOp::create(b, loc, descaleAndScale(loadAmax(amax, t)).first,
                            ptr);
    });
  }

  void buildHadamard(gpu::GPUModuleOp module, const HopperHadamardSpec &s);
  void buildFusedQuantize(gpu::GPUModuleOp module, const HopperQuantizeSpec &s);
  void buildQuantize(gpu::GPUModuleOp module, const HopperQuantizeSpec &s);
};
} // namespace

SmallVector<Value> PrepKernelBuilder::transformRow(Value in, Value rowBase,
                                                  Value lane, int64_t d,
                                                  int64_t seed,
                                                  HopperScalar input) {
  const int64_t perLane = d / 32;
  Value base = add(rowBase, zext64(mul(lane, ci(perLane))));
  // The signs of this lane's elements: bits lane·E .. lane·E + E - 1 of the
  // D-bit sign string (one 64-bit word holds them all: E <= 8 and aligned),
  // with 1/sqrt(D) folded into the factor.
  SmallVector<uint64_t> words((d + 63) / 64, 0);
  for (int64_t i = 0; i < d; ++i)
    if (HadamardOp::getSign(seed, i) < 0)
      words[i / 64] |= uint64_t(1) << (i % 64);
  Value bitIndex = mul(lane, ci(perLane));
  Value wordIndex = divu(bitIndex, ci(64));
  Value word = cl(int64_t(words[0]));
  for (size_t w = 1; w < words.size(); ++w)
    word = select(cmp(arith::CmpIPredicate::eq, wordIndex, ci(w)),
                  cl(int64_t(words[w])), word);
  Value laneBits =
      arith::ShRUIOp::create(b, loc, word, zext64(remu(bitIndex, ci(64))));
  float norm = 1.0f / std::sqrt(float(d));
  SmallVector<Value> x;
  for (int64_t j = 0; j < perLane; ++j) {
    Value negative = cmp(arith::CmpIPredicate::ne,
                         andi(laneBits, cl(int64_t(1) << j)), cl(0));
    Value factor = select(negative, cf(-norm), cf(norm));
    x.push_back(fmul(loadF32(in, add(base, cl(j)), input), factor));
  }
  // Butterfly h pairs element i with i ^ h: the lower one gets the sum, the
  // upper one (lower - upper).
  for (int64_t h = 1; h < d; h *= 2) {
    SmallVector<Value> next(perLane);
    for (int64_t j = 0; j < perLane; ++j) {
      if (h < perLane) {
        Value partner = x[j ^ h];
        next[j] = (j & h) ? fsub(partner, x[j]) : fadd(x[j], partner);
        continue;
      }
      int64_t laneMask = h / perLane;
      Value partner = shflXor(x[j], laneMask);
      Value upper =
          cmp(arith::CmpIPredicate::ne, andi(lane, ci(laneMask)), ci(0));
      next[j] = select(upper, fsub(partner, x[j]), fadd(x[j], partner));
    }
    x = std::move(next);
  }
  return x;
}

void PrepKernelBuilder::buildHadamard(gpu::GPUModuleOp module,
                                      const HopperHadamardSpec &s) {
  startKernel(module, s.kernelName(), {globalPtr, globalPtr, i64},
              s.numThreads());
  Block *entry = b.getInsertionBlock();
  Value in = entry->getArgument(0), out = entry->getArgument(1);
  Value rows = entry->getArgument(2);
  const int64_t d = s.dim, perLane = d / 32;
  Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
  Value lane = remu(tid, ci(32));
  Value row = add(mul(zext64(NVVM::BlockIdXOp::create(b, loc, i32)),
                      cl(HopperHadamardSpec::kRowsPerBlock)),
                  zext64(divu(tid, ci(32))));
  // A whole warp shares its row, so the shuffles never see an inactive lane.
  ifThen(cmp(arith::CmpIPredicate::slt, row, rows), [&] {
    Value rowBase = mul(row, cl(d));
    SmallVector<Value> x = transformRow(in, rowBase, lane, d, s.seed, s.input);
    Value base = add(rowBase, zext64(mul(lane, ci(perLane))));
    for (int64_t j = 0; j < perLane; ++j)
      storeF32(x[j], out, add(base, cl(j)), s.output);
  });
  LLVM::ReturnOp::create(b, loc, ValueRange());
}

void PrepKernelBuilder::buildQuantize(gpu::GPUModuleOp module,
                                      const HopperQuantizeSpec &s) {
  const int64_t threads = HopperQuantizeSpec::kThreads;
  const int64_t perGroup = s.numHeads / s.numGroups;
  const int64_t rowElems = perGroup * s.headDim, chunk = s.rowsPerChunk();

  // _amax: CTA (c, g, b) reduces rows [c·chunk, (c+1)·chunk) of group g.
  {
    startKernel(module, s.amaxKernelName(), {globalPtr, globalPtr, i32},
                threads);
    Block *entry = b.getInsertionBlock();
    Value in = entry->getArgument(0), amax = entry->getArgument(1);
    Value seq = entry->getArgument(2);
    Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
    Value rowStart = mul(NVVM::BlockIdXOp::create(b, loc, i32), ci(chunk));
    Value g = NVVM::BlockIdYOp::create(b, loc, i32);
    Value bIdx = NVVM::BlockIdZOp::create(b, loc, i32);
    Value rowsHere = minsi(sub(seq, rowStart), ci(chunk));
    Value count = mul(rowsHere, ci(rowElems));
    auto loop = scf::ForOp::create(b, loc, tid, count, ci(threads),
                                   ValueRange{cf(0.0f)});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value item = loop.getInductionVar();
      Value r = divu(item, ci(rowElems)), col = remu(item, ci(rowElems));
      Value token = add(rowStart, r);
      // ((b·S + s)·H + g·H/G)·D + col.
      Value index =
          add(mul(add(mul(add(mul(zext64(bIdx), zext64(seq)), zext64(token)),
                          cl(s.numHeads)),
                      zext64(mul(g, ci(perGroup)))),
                  cl(s.headDim)),
              zext64(col));
      Value magnitude =
          LLVM::FAbsOp::create(b, loc, f32, loadF32(in, index, s.input));
      scf::YieldOp::create(
          b, loc, ValueRange{fmax(loop.getRegionIterArgs()[0], magnitude)});
    }
    warpMaxToAmax(loop.getResult(0), remu(tid, ci(32)), amax, bIdx, g, s.numGroups);
    LLVM::ReturnOp::create(b, loc, ValueRange());
  }

  // _cast: thread t writes descale t (t < B·G) and elements 4t .. 4t+3.
  {
    startKernel(module, s.castKernelName(),
                {globalPtr, globalPtr, globalPtr, globalPtr, i64, i64, i64},
                threads);
    Block *entry = b.getInsertionBlock();
    Value in = entry->getArgument(0), amax = entry->getArgument(1);
    Value out = entry->getArgument(2), descales = entry->getArgument(3);
    Value count = entry->getArgument(4), perBatch = entry->getArgument(5);
    Value slots = entry->getArgument(6);
    Value t =
        add(mul(zext64(NVVM::BlockIdXOp::create(b, loc, i32)), cl(threads)),
            zext64(NVVM::ThreadIdXOp::create(b, loc, i32)));
    writeDescale(t, slots, amax, descales);
    Value first = mul(t, cl(4));
    ifThen(cmp(arith::CmpIPredicate::slt, first, count), [&] {
      // The four elements share a head: D is a multiple of 4.
      Value batch = arith::DivUIOp::create(b, loc, first, perBatch);
      Value head = arith::RemUIOp::create(
          b, loc, arith::DivUIOp::create(b, loc, first, cl(s.headDim)),
          cl(s.numHeads));
      Value slot = add(mul(batch, cl(s.numGroups)),
                       arith::DivUIOp::create(b, loc, head, cl(perGroup)));
      Value scale = descaleAndScale(loadAmax(amax, slot)).second;
      SmallVector<Value> x;
      for (int64_t j = 0; j < 4; ++j)
        x.push_back(fmul(loadF32(in, add(first, cl(j)), s.input), scale));
      Value packed = packE4M3(x[0], x[1], x[2], x[3]);
      Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, b.getI8Type(), out,
                                      ValueRange{first});
      LLVM::StoreOp::create(b, loc, packed, ptr, /*alignment=*/4);
    });
    LLVM::ReturnOp::create(b, loc, ValueRange());
  }
}

void PrepKernelBuilder::buildFusedQuantize(gpu::GPUModuleOp module,
                                           const HopperQuantizeSpec &s) {
  const int64_t threads = HopperQuantizeSpec::kThreads, warps = threads / 32;
  const int64_t perGroup = s.numHeads / s.numGroups, d = s.headDim;
  const int64_t perLane = d / 32, chunk = s.rowsPerChunk();

  // _amax: CTA (c, g, b) transforms the rows (s, r) of tokens [c·chunk,
  // (c+1)·chunk) and heads g·H/G + r, one warp per row.
  {
    startKernel(module, s.amaxKernelName(), {globalPtr, globalPtr, i32},
                threads);
    Block *entry = b.getInsertionBlock();
    Value in = entry->getArgument(0), amax = entry->getArgument(1);
    Value seq = entry->getArgument(2);
    Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
    Value lane = remu(tid, ci(32)), warp = divu(tid, ci(32));
    Value rowStart = mul(NVVM::BlockIdXOp::create(b, loc, i32), ci(chunk));
    Value g = NVVM::BlockIdYOp::create(b, loc, i32);
    Value bIdx = NVVM::BlockIdZOp::create(b, loc, i32);
    Value rowsHere = mul(minsi(sub(seq, rowStart), ci(chunk)), ci(perGroup));
    // The trip count is the same for every lane of a warp.
    auto loop = scf::ForOp::create(b, loc, warp, rowsHere, ci(warps),
                                   ValueRange{cf(0.0f)});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value item = loop.getInductionVar();
      Value token = add(rowStart, divu(item, ci(perGroup)));
      Value head = add(mul(g, ci(perGroup)), remu(item, ci(perGroup)));
      Value rowBase = mul(
          add(mul(add(mul(zext64(bIdx), zext64(seq)), zext64(token)),
                  cl(s.numHeads)),
              zext64(head)),
          cl(d));
      Value m = loop.getRegionIterArgs()[0];
      for (Value x : transformRow(in, rowBase, lane, d, s.seed, s.input))
        m = fmax(m, LLVM::FAbsOp::create(b, loc, f32, x));
      scf::YieldOp::create(b, loc, ValueRange{m});
    }
    warpMaxToAmax(loop.getResult(0), lane, amax, bIdx, g, s.numGroups);
    LLVM::ReturnOp::create(b, loc, ValueRange());
  }

  // _cast: thread t writes descale t (t < B·G); warp w of CTA c transforms
  // row 8c + w of the B·S·H rows, scales it and stores its e4m3 bytes.
  {
    startKernel(module, s.castKernelName(),
                {globalPtr, globalPtr, globalPtr, globalPtr, i64, i64, i64},
                threads);
    Block *entry = b.getInsertionBlock();
    Value in = entry->getArgument(0), amax = entry->getArgument(1);
    Value out = entry->getArgument(2), descales = entry->getArgument(3);
    Value rows = entry->getArgument(4), rowsPerBatch = entry->getArgument(5);
    Value slots = entry->getArgument(6);
    Value tid = NVVM::ThreadIdXOp::create(b, loc, i32);
    Value lane = remu(tid, ci(32));
    Value block = zext64(NVVM::BlockIdXOp::create(b, loc, i32));
    Value t = add(mul(block, cl(threads)), zext64(tid));
    writeDescale(t, slots, amax, descales);
    Value row = add(mul(block, cl(warps)), zext64(divu(tid, ci(32))));
    ifThen(cmp(arith::CmpIPredicate::slt, row, rows), [&] {
      Value batch = arith::DivUIOp::create(b, loc, row, rowsPerBatch);
      Value head = arith::RemUIOp::create(b, loc, row, cl(s.numHeads));
      Value slot = add(mul(batch, cl(s.numGroups)),
                       arith::DivUIOp::create(b, loc, head, cl(perGroup)));
      Value scale = descaleAndScale(loadAmax(amax, slot)).second;
      Value rowBase = mul(row, cl(d));
      SmallVector<Value> x =
          transformRow(in, rowBase, lane, d, s.seed, s.input);
      for (Value &v : x)
        v = fmul(v, scale);
      // This lane's E = d/32 consecutive bytes, 4 per store (E = 8: two).
      Value first = add(rowBase, zext64(mul(lane, ci(perLane))));
      Value zero = cf(0.0f);
      for (int64_t j = 0; j < perLane; j += 4) {
        auto at = [&](int64_t i) { return j + i < perLane ? x[j + i] : zero; };
        Value packed = packE4M3(at(0), at(1), at(2), at(3));
        int64_t bytes = std::min<int64_t>(4, perLane - j);
        Type type = b.getIntegerType(8 * bytes);
        if (bytes < 4)
          packed = arith::TruncIOp::create(b, loc, type, packed);
        Value ptr = LLVM::GEPOp::create(b, loc, globalPtr, b.getI8Type(), out,
                                        ValueRange{add(first, cl(j))});
        LLVM::StoreOp::create(b, loc, packed, ptr, /*alignment=*/bytes);
      }
    });
    LLVM::ReturnOp::create(b, loc, ValueRange());
  }
}

void mlir::fa3::buildHopperHadamardKernel(OpBuilder &builder,
                                          gpu::GPUModuleOp module,
                                          const HopperHadamardSpec &spec) {
  OpBuilder::InsertionGuard guard(builder);
  PrepKernelBuilder(builder, module.getLoc()).buildHadamard(module, spec);
}

void mlir::fa3::buildHopperQuantizeKernels(OpBuilder &builder,
                                           gpu::GPUModuleOp module,
                                           const HopperQuantizeSpec &spec) {
  OpBuilder::InsertionGuard guard(builder);
  PrepKernelBuilder kb(builder, module.getLoc());
  if (spec.hadamard)
    kb.buildFusedQuantize(module, spec);
  else
    kb.buildQuantize(module, spec);
}
