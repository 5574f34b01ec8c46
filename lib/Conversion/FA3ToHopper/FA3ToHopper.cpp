//===- FA3ToHopper.cpp - Generate sm_90a kernels for fa3.attention -----------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Conversion/FA3ToHopper/FA3ToHopper.h"
#include "fa3/Conversion/Passes.h"
#include "fa3/Dialect/FA3/IR/FA3Ops.h"

#include "HopperCodegen.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinOps.h"

#include <algorithm>

#define DEBUG_TYPE "convert-fa3-to-hopper"

namespace mlir::fa3 {
#define GEN_PASS_DEF_CONVERTFA3TOHOPPER
#include "fa3/Conversion/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;
using mlir::fa3::detail::attentionKernelNamePrefix;
using mlir::fa3::detail::floatBitsSuffix;
using mlir::fa3::detail::registerSplitSuffix;

/// The widest wgmma accumulator (f32 registers a thread) ptxas compiles
/// in a 512-thread kernel: 96 (m64n192) does, 104 (m64n208) does not.
static constexpr int64_t kMaxAccumulatorRegistersAt512Threads = 100;

/// Reads what the forward and backward specs share (head dims and counts,
/// masking, scale, softcap, the schedule's tile sizes) from `op`, an
/// fa3.attention, fa3.attention_varlen, fa3.attention_kvcache or
/// fa3.attention_grad: its Q, K and V are [..., H, D] (BSHD, or packed
/// [T, H, D]); `backend` names the kernel in diagnostics.
template <typename Spec, typename Op>
static LogicalResult readSharedSpec(Op op, Value key, Value value, Spec &spec,
                                    StringRef backend) {
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto k = cast<RankedTensorType>(key.getType());
  auto v = cast<RankedTensorType>(value.getType());
  auto headDimOf = [](RankedTensorType t) { return t.getShape().back(); };
  auto headsOf = [](RankedTensorType t) {
    return t.getDimSize(t.getRank() - 2);
  };
  spec.headDim = headDimOf(q);
  if (headDimOf(v) != spec.headDim)
    return op.emitOpError() << "the Hopper " << backend
                            << " needs the value head dim to equal the query "
                               "head dim, got "
                            << headDimOf(v) << " vs " << spec.headDim;
  spec.numQHeads = headsOf(q);
  spec.numKVHeads = headsOf(k);
  spec.causal = op.getCausal();
  std::tie(spec.windowLeft, spec.windowRight) = op.getWindowBounds();
  spec.scale = op.getEffectiveScale();
  spec.softcap = op.getEffectiveSoftcap();
  ScheduleAttr schedule = op.getScheduleAttr();
  if (!schedule)
    return op.emitOpError()
           << "has no #fa3.schedule; run fa3-select-schedule{target=sm_90a}";
  spec.blockM = schedule.getBlockM();
  spec.blockN = schedule.getBlockN();
  spec.stages = schedule.getStages();
  return success();
}

/// Rejects the `#fa3.schedule` fields no Hopper kernel implements, so that
/// no schedule in the IR describes a kernel that is not built. The forward
/// implements `persistent` and checks it itself; `poly_exp2` only the FP8
/// forward builds.
static LogicalResult rejectUnbuiltScheduleFields(Operation *op,
                                                 ScheduleAttr schedule,
                                                 StringRef kernel,
                                                 bool persistentBuilt = false,
                                                 bool polyExp2Built = false) {
  if (schedule.getPersistent() && !persistentBuilt)
    return op->emitOpError()
           << "persistent = true: the Hopper " << kernel
           << " kernel has no persistent tile scheduler (one CTA per tile)";
  if (schedule.getCluster() != 1)
    return op->emitOpError()
           << "cluster = " << schedule.getCluster() << ": the Hopper "
           << kernel << " kernel does not use thread block clusters (TMA "
           << "multicast); cluster must be 1";
  // The polynomial's error (< 1.8e-3 relative) hides under e4m3's rounding
  // of P only: 16-bit P and the backward's P keep MUFU.EX2.
  if (schedule.getPolyExp2() != 0 && !polyExp2Built)
    return op->emitOpError()
           << "poly_exp2 = " << schedule.getPolyExp2() << ": the Hopper "
           << kernel << " kernel computes every exponential with MUFU.EX2 "
           << "(the polynomial is built for the FP8 forward only); poly_exp2 "
           << "must be 0";
  return success();
}

/// producer_regs/consumer_regs of a kernel with `consumerWgs` consumer
/// warpgroups: both 0 (no producer warpgroup) or a split setmaxnreg can make.
static LogicalResult checkRegisterSplit(Operation *op, int64_t producerRegs,
                                        int64_t consumerRegs,
                                        int64_t consumerWgs) {
  if ((producerRegs == 0) != (consumerRegs == 0))
    return op->emitOpError()
           << "producer_regs and consumer_regs turn warp specialization on "
              "together (both 0: off), got "
           << producerRegs << " and " << consumerRegs;
  if (producerRegs == 0)
    return success();
  // setmaxnreg moves registers between warpgroups of a CTA that starts with
  // 64 Ki / threads each (in steps of 8): the producer can only shrink, the
  // consumers only grow, and they share only what the CTA was launched with
  // (its pool): a split past that leaves setmaxnreg.inc waiting forever.
  int64_t threads = 128 * (consumerWgs + 1);
  int64_t atLaunch = std::min<int64_t>(256, (65536 / threads) / 8 * 8);
  if (producerRegs > atLaunch || consumerRegs < atLaunch)
    return op->emitOpError()
           << "with " << threads << " threads a warpgroup starts with "
           << atLaunch << " registers a thread; setmaxnreg needs "
           << "producer_regs <= " << atLaunch << " <= consumer_regs, got "
           << producerRegs << " and " << consumerRegs;
  int64_t total = producerRegs + consumerWgs * consumerRegs;
  int64_t pool = atLaunch * (consumerWgs + 1);
  if (total > pool)
    return op->emitOpError()
           << "producer_regs + consumer_wgs x consumer_regs = " << total
           << " registers a thread exceeds the " << pool << " ("
           << consumerWgs + 1 << " warpgroups x " << atLaunch
           << ") the CTA is launched with, which setmaxnreg shares out";
  return success();
}

/// Dynamic shared memory of the forward with `queryTiles` Q tiles and
/// `outputTiles` (0 or 1) O staging tiles.
static int64_t forwardSharedMemory(const HopperAttentionSpec &spec,
                                   int64_t queryTiles, int64_t outputTiles) {
  int64_t tile = spec.elementBytes() * spec.headDim; // bytes per Q/K/V row
  int64_t outputTile = 2 * spec.headDim;             // O is 16-bit
  int64_t barriers =
      8 * (queryTiles * (spec.persistent ? 2 : 1) + 4 * spec.stages);
  // Persistent: the tile index beside each Q tile.
  int64_t tileSlots = spec.persistent ? 4 * queryTiles : 0;
  int64_t valueTile = spec.elementBytes() * spec.valueTileRows();
  // The O tile after the K/V ring starts at a multiple of 1024 bytes.
  return queryTiles * spec.blockM * tile +
         outputTiles * spec.blockM * outputTile +
         llvm::alignTo(spec.stages * spec.blockN * (tile + valueTile), 1024) +
         barriers + tileSlots + 1024;
}

int64_t HopperAttentionSpec::queryBuffers() const {
  int64_t outputTiles = fp8 ? 1 : 0;
  return persistent &&
                 forwardSharedMemory(*this, 2, outputTiles) <= kMaxSharedMemory
             ? 2
             : 1;
}

bool HopperAttentionSpec::separateOutputTile() const {
  // FP8's bf16 O does not fit its e4m3 Q tile.
  return fp8 || (persistent && forwardSharedMemory(*this, queryBuffers(), 1) <=
                                   kMaxSharedMemory);
}

int64_t HopperAttentionSpec::sharedMemoryBytes() const {
  return forwardSharedMemory(*this, queryBuffers(),
                             separateOutputTile() ? 1 : 0);
}

std::string HopperAttentionSpec::kernelName() const {
  std::string name = attentionKernelNamePrefix("fwd",
                                               fp8    ? "e4m3"
                                               : bf16 ? "bf16"
                                                      : "f16",
                                               headDim, numQHeads, numKVHeads,
                                               blockM, blockN, stages);
  if (intraWarpgroupOverlap)
    name += "_ov";
  name += registerSplitSuffix(producerRegs, consumerRegs);
  if (pingpong)
    name += "_pp";
  if (rescaleThreshold > 0)
    name += "_lr" + std::to_string(rescaleThreshold);
  if (polyExp2 > 0)
    name += "_pe" + std::to_string(polyExp2);
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

/// The forward spec of `op` (fa3.attention, or fa3.attention_kvcache with
/// its caches as `key` and `value`).
template <typename Op>
static FailureOr<HopperAttentionSpec> forwardSpec(Op op, Value key, Value value,
                                                  bool fp8) {
  HopperAttentionSpec spec;
  Type elt = cast<RankedTensorType>(op.getQuery().getType()).getElementType();
  spec.fp8 = fp8;
  if (!elt.isBF16() && !elt.isF16() && !spec.fp8)
    return op.emitOpError() << "the Hopper backend supports f16, bf16 and "
                               "f8E4M3FN (f32 runs with fa3-cpu-pipeline), got "
                            << elt;
  spec.bf16 = elt.isBF16() || spec.fp8;
  if (failed(readSharedSpec(op, key, value, spec, "backend")))
    return failure();
  if (spec.headDim % 64 != 0)
    return op.emitOpError()
           << "the Hopper backend supports head dims 64, 128, 192 and 256 "
              "(whole 128-byte swizzle atoms), got "
           << spec.headDim;
  ScheduleAttr schedule = op.getScheduleAttr();
  spec.intraWarpgroupOverlap = schedule.getIntraWgOverlap();
  spec.rescaleThreshold = schedule.getRescaleThreshold();
  spec.polyExp2 = schedule.getPolyExp2();
  spec.producerRegs = schedule.getProducerRegs();
  spec.consumerRegs = schedule.getConsumerRegs();
  spec.pingpong = schedule.getPingpong();
  spec.persistent = schedule.getPersistent();
  if (failed(rejectUnbuiltScheduleFields(op, schedule,
                                         spec.fp8 ? "FP8 forward" : "forward",
                                         /*persistentBuilt=*/true,
                                         /*polyExp2Built=*/spec.fp8)))
    return failure();
  if (spec.blockM % 64 != 0 || spec.blockM > 256)
    return op.emitOpError() << "block_m must be 64, 128, 192 or 256 on "
                               "Hopper (64 rows per warpgroup), got "
                            << spec.blockM;
  if (schedule.getConsumerWgs() != spec.numConsumerWarpgroups())
    return op.emitOpError()
           << "consumer_wgs must be block_m / 64 on Hopper (each consumer "
              "warpgroup owns 64 query rows), got consumer_wgs = "
           << schedule.getConsumerWgs() << " with block_m = " << spec.blockM;
  if (failed(checkRegisterSplit(op, spec.producerRegs, spec.consumerRegs,
                                spec.numConsumerWarpgroups())))
    return failure();
  // A wgmma's accumulator lives in registers whole: block_n / 2 f32
  // registers a thread for S, head_dim / 2 for O, and ptxas needs about 26
  // more beside the widest one. At 512 threads (three consumers and the
  // producer) ptxas compiles every instruction within the 128 registers a
  // thread has at launch, whatever setmaxnreg.inc gives the consumers (it
  // raises the limit at 384 threads, not at 512: m64n208 fails with
  // "insufficient registers (128)" at 512 and compiles at 384, ptxas 13.0).
  if (spec.numThreads() == 512) {
    int64_t widest = std::max(spec.blockN, spec.headDim);
    if (widest / 2 > kMaxAccumulatorRegistersAt512Threads)
      return op.emitOpError()
             << "a 512-thread kernel (three consumer warpgroups and a "
                "producer) compiles each wgmma within 128 registers a "
                "thread, so its accumulator (max(block_n, head dim) / 2 = "
             << widest / 2 << " f32 registers) must stay within "
             << kMaxAccumulatorRegistersAt512Threads
             << ": block_n and the head dim at most "
             << 2 * kMaxAccumulatorRegistersAt512Threads
             << ", got block_n = " << spec.blockN << ", head dim "
             << spec.headDim;
  }
  if (spec.pingpong &&
      (!spec.warpSpecialized() || spec.numConsumerWarpgroups() != 2))
    return op.emitOpError()
           << "pingpong is implemented for two consumer warpgroups with a "
              "producer warpgroup (block_m = 128, producer_regs and "
              "consumer_regs set), got block_m = "
           << spec.blockM << ", producer_regs = " << spec.producerRegs;
  if (spec.persistent && !spec.warpSpecialized())
    return op.emitOpError()
           << "persistent = true needs a producer warpgroup (producer_regs and "
              "consumer_regs set): it loads the next tile's Q and K/V while "
              "the consumers finish this one, got producer_regs = "
           << spec.producerRegs;
  if (spec.intraWarpgroupOverlap && !spec.warpSpecialized())
    return op.emitOpError()
           << "intra_wg_overlap = true needs a producer warpgroup "
              "(producer_regs and consumer_regs set): without one the "
              "consumers refill the ring and the overlap lost 10-25% on the "
              "H200, got producer_regs = "
           << spec.producerRegs;
  if (spec.blockN % 16 != 0 || spec.blockN > 256)
    return op.emitOpError() << "block_n must be a multiple of 16 up to 256 "
                               "on Hopper (the wgmma N and K steps), got "
                            << spec.blockN;
  if (spec.fp8) {
    if (spec.headDim != 64 && spec.headDim != 128 && spec.headDim != 256)
      return op.emitOpError() << "the Hopper FP8 kernel supports head dims "
                                 "64, 128 and 256, got "
                              << spec.headDim;
    if (spec.blockN % 64 != 0)
      return op.emitOpError() << "the Hopper FP8 kernel reads V' in atoms of "
                                 "64 or 128 keys (64 or 128 bytes of e4m3); "
                                 "block_n must be a multiple of 64, got "
                              << spec.blockN;
  }
  if (op.getPackGqa()) {
    spec.packedHeads = spec.numQHeads / spec.numKVHeads;
    if (64 % spec.packedHeads != 0)
      return op.emitOpError()
             << "pack_gqa on Hopper needs Hq / Hkv to divide 64 (each "
                "consumer warpgroup's 64 rows hold whole queries), got "
             << spec.numQHeads << " / " << spec.numKVHeads << " = "
             << spec.packedHeads;
  }
  // A persistent kernel keeps a second Q tile only where it fits
  // (queryBuffers()), so a schedule over the limit has one.
  if (spec.sharedMemoryBytes() > kMaxSharedMemory)
    return op.emitOpError()
           << "the schedule needs " << spec.sharedMemoryBytes()
           << " bytes of shared memory (Q tile, " << spec.stages
           << " K and V stages), more than the " << kMaxSharedMemory
           << " a Hopper CTA has";
  return spec;
}

FailureOr<HopperAttentionSpec> HopperAttentionSpec::fromOp(AttentionOp op) {
  FailureOr<HopperAttentionSpec> spec =
      forwardSpec(op, op.getKey(), op.getValue(), op.isFP8());
  if (succeeded(spec))
    spec->dropout = op.getEffectiveDropout();
  return spec;
}

FailureOr<HopperAttentionSpec>
HopperAttentionSpec::fromOp(AttentionKVCacheOp op) {
  FailureOr<HopperAttentionSpec> spec =
      forwardSpec(op, op.getKeyCache(), op.getValueCache(), /*fp8=*/false);
  if (succeeded(spec)) {
    spec->kvCache = true;
    spec->paged = op.isPaged();
    spec->numSplits = static_cast<int64_t>(op.getNumSplits().value_or(1));
  }
  return spec;
}

FailureOr<HopperAttentionSpec>
HopperAttentionSpec::fromOp(AttentionVarlenOp op) {
  FailureOr<HopperAttentionSpec> spec =
      forwardSpec(op, op.getKey(), op.getValue(), /*fp8=*/false);
  if (failed(spec))
    return failure();
  // The sequences' tiles start at their own rows: the persistent
  // scheduler's fixed grid and the split-KV partials are written for whole
  // batches.
  if (spec->persistent)
    return op.emitOpError()
           << "persistent = true: the Hopper varlen forward runs one CTA per "
              "(query block, head, sequence)";
  if (op.getNumSplits().value_or(1) > 1)
    return op.emitOpError() << "num_splits = " << *op.getNumSplits()
                            << ": the Hopper varlen forward has no split-KV "
                               "form; use num_splits = 1";
  spec->varlen = true;
  spec->sequsedK = static_cast<bool>(op.getSequsedK());
  return spec;
}

LogicalResult mlir::fa3::checkHopperGradSpec(Operation *op,
                                             ScheduleAttr schedule,
                                             HopperAttentionGradSpec &spec) {
  if (spec.headDim != 64 && spec.headDim != 128 && spec.headDim != 256)
    return op->emitOpError()
           << "the Hopper backward supports head dims 64, 128 and 256 (the "
              "CPU pipeline takes any), got "
           << spec.headDim;
  if (spec.blockM != 64 && !(spec.blockM == 128 && spec.headDim == 64))
    return op->emitOpError()
           << "the Hopper backward steps over 64 query rows (128 at D = 64, "
              "where Sᵀ, dPᵀ, dK and dV fit the registers); block_m = "
           << spec.blockM << " is not built at D = " << spec.headDim;
  if (spec.blockN != 64 && spec.blockN != 128)
    return op->emitOpError() << "the Hopper backward's block_n (key rows per "
                                "CTA) must be 64 or 128, got "
                             << spec.blockN;
  if (spec.blockN == 64 && spec.headDim < 128)
    return op->emitOpError() << "block_n = 64 splits the head dim across the "
                                "two warpgroups and needs D >= 128, got "
                             << spec.headDim;
  if (spec.stages < 1 || spec.stages > 4)
    return op->emitOpError() << "stages must be 1 to 4, got " << spec.stages;
  if (failed(rejectUnbuiltScheduleFields(op, schedule, "backward")))
    return failure();
  if (schedule.getConsumerWgs() != HopperAttentionGradSpec::kNumWarpgroups)
    return op->emitOpError() << "the Hopper backward runs two warpgroups; "
                                "consumer_wgs must be 2, got "
                             << schedule.getConsumerWgs();
  spec.producerRegs = schedule.getProducerRegs();
  spec.consumerRegs = schedule.getConsumerRegs();
  if (failed(checkRegisterSplit(op, spec.producerRegs, spec.consumerRegs,
                                HopperAttentionGradSpec::kNumWarpgroups)))
    return failure();
  if (schedule.getPingpong() || schedule.getIntraWgOverlap())
    return op->emitOpError() << "pingpong and intra_wg_overlap are not "
                                "implemented by the Hopper backward";
  if (spec.sharedMemoryBytes() > kMaxSharedMemory)
    return op->emitOpError()
           << "the backward schedule needs " << spec.sharedMemoryBytes()
           << " bytes of shared memory, more than the 232448 a Hopper CTA has";
  return success();
}

/// The backward spec of `op` (fa3.attention_grad or
/// fa3.attention_varlen_grad): what both read and check.
template <typename Op>
static FailureOr<HopperAttentionGradSpec> gradSpec(Op op) {
  HopperAttentionGradSpec spec;
  Type elt = cast<RankedTensorType>(op.getQuery().getType()).getElementType();
  if (!elt.isBF16() && !elt.isF16())
    return op.emitOpError() << "the Hopper backend supports f16 and bf16 "
                               "(f32 runs with fa3-cpu-pipeline), got "
                            << elt;
  spec.bf16 = elt.isBF16();
  if (failed(readSharedSpec(op, op.getKey(), op.getValue(), spec, "backward")))
    return failure();
  spec.deterministic = op.getDeterministic();
  if (failed(checkHopperGradSpec(op, op.getScheduleAttr(), spec)))
    return failure();
  return spec;
}

FailureOr<HopperAttentionGradSpec>
HopperAttentionGradSpec::fromOp(AttentionGradOp op) {
  FailureOr<HopperAttentionGradSpec> spec = gradSpec(op);
  if (succeeded(spec))
    spec->dropout = op.getEffectiveDropout();
  return spec;
}

FailureOr<HopperAttentionGradSpec>
HopperAttentionGradSpec::fromOp(AttentionVarlenGradOp op) {
  FailureOr<HopperAttentionGradSpec> spec = gradSpec(op);
  if (failed(spec))
    return failure();
  spec->varlen = true;
  spec->sequsedK = static_cast<bool>(op.getSequsedK());
  return spec;
}

gpu::GPUModuleOp mlir::fa3::getOrCreateHopperKernelModule(ModuleOp module,
                                                          StringRef chip) {
  if (auto existing = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName))
    return existing;
  MLIRContext *ctx = module.getContext();
  OpBuilder builder(ctx);
  builder.setInsertionPointToEnd(module.getBody());
  auto target = NVVM::NVVMTargetAttr::get(
      ctx, /*optLevel=*/3, "nvptx64-nvidia-cuda", chip, "+ptx86");
  auto kernels =
      gpu::GPUModuleOp::create(builder, module.getLoc(), kKernelModuleName,
                               builder.getArrayAttr({target}));
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  builder.getUnitAttr());
  return kernels;
}

void mlir::fa3::annotateHopperLaunch(Operation *op, gpu::GPUModuleOp kernels,
                                     StringRef name, int64_t threads,
                                     int64_t sharedMemory, int64_t blockM,
                                     int64_t blockN, bool persistent,
                                     int64_t packedHeads, bool kvCache,
                                     bool paged, int64_t numSplits) {
  MLIRContext *ctx = op->getContext();
  Builder builder(ctx);
  op->setAttr(kKernelAttrName,
              SymbolRefAttr::get(kernels.getSymNameAttr(),
                                 {FlatSymbolRefAttr::get(ctx, name)}));
  SmallVector<NamedAttribute> launch = {
      builder.getNamedAttr("threads", builder.getI64IntegerAttr(threads)),
      builder.getNamedAttr("shared_memory",
                           builder.getI64IntegerAttr(sharedMemory)),
      builder.getNamedAttr("block_m", builder.getI64IntegerAttr(blockM)),
      builder.getNamedAttr("block_n", builder.getI64IntegerAttr(blockN))};
  if (persistent)
    launch.push_back(
        builder.getNamedAttr("persistent", builder.getI64IntegerAttr(1)));
  if (packedHeads > 1)
    launch.push_back(builder.getNamedAttr(
        "packed_heads", builder.getI64IntegerAttr(packedHeads)));
  if (kvCache)
    launch.push_back(
        builder.getNamedAttr("kvcache", builder.getI64IntegerAttr(1)));
  if (paged)
    launch.push_back(
        builder.getNamedAttr("paged", builder.getI64IntegerAttr(1)));
  if (numSplits > 1)
    launch.push_back(builder.getNamedAttr(
        "num_splits", builder.getI64IntegerAttr(numSplits)));
  op->setAttr(kLaunchAttrName, builder.getDictionaryAttr(launch));
}

/// Adds `name = 1` to `op`'s fa3.launch for each flag that is set.
static void setLaunchFlags(Operation *op,
                           ArrayRef<std::pair<StringRef, bool>> flags) {
  Builder builder(op->getContext());
  NamedAttrList launch(op->getAttrOfType<DictionaryAttr>(kLaunchAttrName));
  for (auto [name, set] : flags)
    if (set)
      launch.set(name, builder.getI64IntegerAttr(1));
  op->setAttr(kLaunchAttrName, launch.getDictionary(op->getContext()));
}

void mlir::fa3::annotateHopperForwardLaunch(Operation *op,
                                            gpu::GPUModuleOp kernels,
                                            StringRef name,
                                            const HopperAttentionSpec &spec) {
  annotateHopperLaunch(op, kernels, name, spec.numThreads(),
                       spec.sharedMemoryBytes(), spec.blockM, spec.blockN,
                       spec.persistent, spec.packedHeads, spec.kvCache,
                       spec.paged, spec.numSplits);
  // The launch passes the Philox (seed, offset) pointer last.
  setLaunchFlags(op, {{"varlen", spec.varlen},
                      {"seqused", spec.sequsedK},
                      {"dropout", spec.dropout > 0}});
}

void mlir::fa3::annotateHopperGradLaunch(Operation *op,
                                         gpu::GPUModuleOp kernels,
                                         const HopperAttentionGradSpec &spec) {
  // Main grid: ceildiv(Sk, block_n) x Hkv x B (varlen: B + 1); the _pre and
  // _post kernels are named after it.
  annotateHopperLaunch(op, kernels, spec.kernelName(), spec.numThreads(),
                       spec.sharedMemoryBytes(), spec.blockM, spec.blockN);
  // The runtime zeroes the dQ turn counters and passes them
  // (deterministic), and passes the sequence offsets (varlen).
  setLaunchFlags(op, {{"deterministic", spec.deterministic},
                      {"varlen", spec.varlen},
                      {"seqused", spec.sequsedK},
                      {"dropout", spec.dropout > 0}});
}

namespace {
struct ConvertFA3ToHopperPass
    : public fa3::impl::ConvertFA3ToHopperBase<ConvertFA3ToHopperPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    OpBuilder builder(&getContext());
    gpu::GPUModuleOp kernels;
    bool failedAny = false;
    auto getKernels = [&] {
      if (!kernels)
        kernels = getOrCreateHopperKernelModule(module, chip);
      return kernels;
    };
    // The host side stays at L0; the runtime launches the kernels with this
    // metadata.
    auto annotate = [&](Operation *op, StringRef name, int64_t threads,
                        int64_t sharedMemory, int64_t blockM, int64_t blockN) {
      annotateHopperLaunch(op, getKernels(), name, threads, sharedMemory,
                           blockM, blockN);
    };
    module.walk([&](Operation *op) {
      // fa3-outline-hopper-kernels took this op's kernel to the tile level.
      if (op->hasAttr(kKernelAttrName))
        return;
      if (auto attention = dyn_cast<AttentionOp>(op)) {
        attention.emitOpError()
            << "the forward is built from the tile level: run "
               "fa3-outline-hopper-kernels, fa3-tile{grid=true}, "
               "fa3-fuse-softmax and convert-fa3-tile-to-hopper first (as "
               "fa3-hopper-pipeline does)";
        failedAny = true;
      } else if (isa<AttentionKVCacheOp, AttentionVarlenOp>(op)) {
        // What has no Hopper kernel says so; the rest is built from the
        // tile level.
        FailureOr<HopperAttentionSpec> spec =
            isa<AttentionKVCacheOp>(op)
                ? HopperAttentionSpec::fromOp(cast<AttentionKVCacheOp>(op))
                : HopperAttentionSpec::fromOp(cast<AttentionVarlenOp>(op));
        if (succeeded(spec))
          op->emitOpError()
              << "is built from the tile level: run "
                 "fa3-outline-hopper-kernels, fa3-tile{grid=true}, "
                 "fa3-fuse-softmax and convert-fa3-tile-to-hopper first (as "
                 "fa3-hopper-pipeline does)";
        failedAny = true;
      } else if (isa<KVCacheAppendOp>(op)) {
        op->emitOpError() << "has no Hopper kernel yet; the CPU pipeline "
                             "(fa3-cpu-pipeline) runs it";
        failedAny = true;
      } else if (isa<AttentionGradOp, AttentionVarlenGradOp>(op)) {
        FailureOr<HopperAttentionGradSpec> spec =
            isa<AttentionGradOp>(op)
                ? HopperAttentionGradSpec::fromOp(cast<AttentionGradOp>(op))
                : HopperAttentionGradSpec::fromOp(
                      cast<AttentionVarlenGradOp>(op));
        if (succeeded(spec))
          op->emitOpError()
              << "is built from the tile level: run "
                 "fa3-outline-hopper-kernels, fa3-tile{grid=true} and "
                 "convert-fa3-tile-to-hopper first (as fa3-hopper-pipeline "
                 "does)";
        failedAny = true;
      } else if (auto hadamard = dyn_cast<HadamardOp>(op)) {
        FailureOr<HopperHadamardSpec> spec = HopperHadamardSpec::fromOp(hadamard);
        if (failed(spec)) {
          failedAny = true;
          return;
        }
        std::string name = spec->kernelName();
        if (!getKernels().lookupSymbol(name))
          buildHopperHadamardKernel(builder, kernels, *spec);
        annotate(op, name, spec->numThreads(), 0,
                 HopperHadamardSpec::kRowsPerBlock, 0);
      } else if (auto quantize = dyn_cast<QuantizeOp>(op)) {
        FailureOr<HopperQuantizeSpec> spec = HopperQuantizeSpec::fromOp(quantize);
        if (failed(spec)) {
          failedAny = true;
          return;
        }
        std::string name = spec->kernelName();
        if (!getKernels().lookupSymbol(spec->amaxKernelName()))
          buildHopperQuantizeKernels(builder, kernels, *spec);
        // block_m: the rows of one _amax CTA.
        annotate(op, name, HopperQuantizeSpec::kThreads, 0,
                 spec->rowsPerChunk(), 0);
      }
    });
    if (failedAny)
      signalPassFailure();
  }
};
} // namespace
