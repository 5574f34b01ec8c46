//===- SelectSchedule.cpp - Choose a #fa3.schedule per attention -------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Dialect/FA3/Transforms/Passes.h"

#include "llvm/Support/MathExtras.h"

#include <limits>

namespace mlir::fa3 {
#define GEN_PASS_DEF_FA3SELECTSCHEDULE
#include "fa3/Dialect/FA3/Transforms/Passes.h.inc"
} // namespace mlir::fa3

using namespace mlir;
using namespace mlir::fa3;

/// Throughput per computed query row (padding included) of the 64- and
/// 128-row forward tiles at d <= 64, relative to the 192-row tile's, on a
/// plain grid (key loops too long for a persistent one, below), measured on
/// the H200 (bf16, FA3-paper and ViT shapes; docs/Performance.md, "Query
/// tiles by sequence length"): the 64-row tile keeps pace while its key loop
/// is short (Sk up to 1k, 2k causal, whose tiles do half the work) and falls
/// to 0.8-0.9 beyond (Sq = Sk = 2k-16k; causal 4k: 371 against 381 TFLOP/s;
/// Sq = 512 over Sk = 8192: 376 against 416, 0.8 per computed row); the
/// 128-row tile runs at ~0.85 throughout (0.83-0.85 at Sq = Sk = 512-4k,
/// 0.84 at Sq = 512 over Sk = 8192).
static constexpr double kRate64Short = 1.0, kRate64Long = 0.85, kRate128 = 0.85;
static constexpr int64_t kShortKeys = 1024, kShortKeysCausal = 2048;

/// The same relative to the 192-row tile on a persistent grid, where the
/// key loops are short enough for one (Sk <= 4096 at d <= 64), measured on
/// the H100 (bf16, two runs; docs/Performance.md, "Dynamic tile scheduler
/// and an O tile of its own"): the 64-row tile (one consumer, no producer,
/// a plain grid) at 0.84-0.86 per row non-causal (Sq = Sk = 512-2k) and
/// 0.82-0.93 causal, taken as 0.85; the 128-row tile on a persistent grid
/// at 0.80-0.84 non-causal. Causal, the 128-row tile with intra-warpgroup
/// overlap (which the two-consumer d64 kernels have since 2026-12-07): 1.00
/// and 1.02 at 4k / 2k in one H100 run, 1.06 and 1.07 in another (bench/
/// bench_sustained.py, alternating windows; docs/Performance.md), taken as
/// 1.03 (without the overlap it was 0.90-0.94). Below 256 query rows the
/// 128-row tile is no candidate: it was slower than both there (ViT S = 197:
/// 124 against 170 for 64 rows, H100; 162 against 169-172, H200).
static constexpr double kRate64VsPersistent = 0.85, kRate128Persistent = 0.82,
                        kRate128PersistentCausal = 1.03;
static constexpr int64_t kPersistent128MinQueries = 256;

/// Up to how many keys (Sk) a persistent grid pays on the warp-specialized
/// forward, measured with the dynamic tile scheduler and (d <= 128) an O
/// tile of its own on the H100 (bf16, Sq = Sk = 512-4k; docs/Performance.md,
/// "Dynamic tile scheduler and an O tile of its own"). With a key loop this
/// short the per-tile start (the Q load, the first K wait) and end (the O
/// epilogue) are a large part of a tile, and one CTA per SM overlaps them
/// with its next tile's loads. d64's 192-row tile: +28% / +11% / +5% / +3%
/// at 512 / 1k / 2k / 4k non-causal, +8% / +1% at 2k / 4k causal. d128:
/// causal +13% / +8% / +3% at 1k / 2k / 4k (the static tile order of an
/// earlier kernel lost there; the dynamic one deals tiles as they finish),
/// non-causal even at 512-1k and -1% to -3% at 2k-4k. d256 (one Q tile, O
/// staged in it) loses 4-10% at every length. Longer key loops were not
/// measured with this kernel and stay on a plain grid.
static constexpr int64_t kPersistentKeysD64 = 4096, kPersistentKeys = 1024,
                         kPersistentKeysCausal = 4096;
static constexpr int64_t kPersistentMaxHeadDim = 128;

/// The FP8 forward on a persistent grid, measured on the H100 (e4m3, Sq =
/// Sk = 1k-16k, docs/Performance.md, "The FP8 forward through the tile
/// level"): d64 gains at every length (+4% to +30%), d128 causal at 1k-8k
/// (+5% to +16%; even at 16k) and non-causal at 1k (+10%; -2% to -5% from
/// 4k), d256 loses from 4k (-1% to -11%). Half-size e4m3 tiles make the key
/// loop's blocks cheaper, so the tile's start and end weigh more than in
/// the 16-bit kernel at the same length.
static constexpr int64_t kPersistentKeysFP8 = 1024;

/// Whether a warp-specialized Hopper forward of head dim `headDim` over
/// `seqLenK` keys (dynamic or <= 0: unknown) runs on a persistent grid.
/// Where a length limit decides, an unknown length does not.
static bool persistentPays(int64_t headDim, bool fp8, bool causal,
                           int64_t seqLenK) {
  bool known = !ShapedType::isDynamic(seqLenK) && seqLenK > 0;
  if (fp8)
    return headDim <= 64 ||
           (headDim <= 128 &&
            (causal || (known && seqLenK <= kPersistentKeysFP8)));
  if (headDim > kPersistentMaxHeadDim || !known)
    return false;
  if (causal)
    return seqLenK <= kPersistentKeysCausal;
  return seqLenK <= (headDim <= 64 ? kPersistentKeysD64 : kPersistentKeys);
}

/// The Hopper forward's kernel structure for `blockM` query rows (one
/// consumer warpgroup per 64): with two or three consumers a producer
/// warpgroup issues the loads and the register file is split as in
/// FlashAttention-3 (24/240 for 2 consumers, 32/160 for 3: what 64 Ki
/// registers allow); two consumers also pingpong and overlap the next
/// block's QKᵀ with this block's softmax (measured on the H200: +7-11% at
/// d128 and d256, 2k-8k; on the H100 +3-4% for d64's causal 128-row tile
/// at 512-4k; docs/Performance.md). Three consumers (d64's 192-row tile)
/// run without it: it measured -1-2% there, and again 0% to -14% with the
/// consumers at their full 160 registers (.reqntid, 2026-12-07). One
/// consumer (too few rows to hide the producer's cost) and four (no registers
/// left to give) run without a producer. FP8 takes the same structure
/// (FlashAttention-3's FP8 forward is warp-specialized with the overlap too).
/// `persistent` asks for a persistent grid, which only a warp-specialized
/// kernel has.
static ScheduleAttr hopperForwardSchedule(MLIRContext *context, int64_t blockM,
                                          int64_t blockN,
                                          bool persistent = false,
                                          int64_t rescaleThreshold = 0,
                                          int64_t polyExp2 = 0) {
  int64_t consumers = blockM / 64;
  int64_t producerRegs = 0, consumerRegs = 0;
  if (consumers == 2) {
    producerRegs = 24;
    consumerRegs = 240;
  } else if (consumers == 3) {
    producerRegs = 32;
    consumerRegs = 160;
  }
  bool pingpong = producerRegs > 0 && consumers == 2;
  return ScheduleAttr::get(context, blockM, blockN, /*stages=*/2, consumers,
                           producerRegs, consumerRegs, pingpong,
                           /*intra_wg_overlap=*/pingpong,
                           /*persistent=*/persistent && producerRegs > 0,
                           /*cluster=*/1, rescaleThreshold, polyExp2);
}

namespace {
/// The query tile of a Hopper forward and whether it runs on a persistent
/// grid.
struct ForwardTiles {
  int64_t blockM;
  bool persistent;
};
} // namespace

/// The query tile of one Hopper forward CTA for head dim `headDim`, query
/// length `seqLenQ` and key length `seqLenK` (dynamic or <= 0: unknown,
/// giving the long-sequence tile on a plain grid). At d <= 64 (bf16/f16):
/// among 64, 128 and 192 rows, the one that minimizes ceil(Sq / block_m) ·
/// block_m / rate(block_m), the rows computed (padding included) over the
/// measured throughput per row of that tile; ties go to the larger tile.
/// Other head dims and FP8 keep their long-sequence tile (192 at d <= 64,
/// else 128). A warp-specialized tile (128 or 192 rows) runs on a
/// persistent grid where that measured faster (persistentPays).
static ForwardTiles selectHopperForwardTiles(int64_t headDim, bool fp8,
                                             bool causal, int64_t seqLenQ,
                                             int64_t seqLenK) {
  int64_t longTile = headDim <= 64 ? 192 : 128;
  bool persistent = persistentPays(headDim, fp8, causal, seqLenK);
  // Only the 16-bit d <= 64 forward has measured alternatives (its 192-row
  // tile is the one short sequences waste most of).
  if (fp8 || longTile != 192 || ShapedType::isDynamic(seqLenQ) ||
      seqLenQ <= 0)
    return {longTile, persistent};
  struct Candidate {
    int64_t rows;
    double rate;
  };
  // Where the key length is unknown, the query length stands in for it.
  int64_t keys =
      !ShapedType::isDynamic(seqLenK) && seqLenK > 0 ? seqLenK : seqLenQ;
  SmallVector<Candidate, 3> candidates;
  if (persistent) {
    // Rates relative to the 192-row tile on a persistent grid.
    candidates.push_back({64, kRate64VsPersistent});
    if (seqLenQ >= kPersistent128MinQueries)
      candidates.push_back(
          {128, causal ? kRate128PersistentCausal : kRate128Persistent});
  } else {
    bool short64 = keys <= (causal ? kShortKeysCausal : kShortKeys);
    candidates.push_back({64, short64 ? kRate64Short : kRate64Long});
    candidates.push_back({128, kRate128});
  }
  candidates.push_back({192, 1.0});
  int64_t best = longTile;
  double bestCost = std::numeric_limits<double>::infinity();
  for (Candidate c : candidates) {
    double rows = static_cast<double>(llvm::divideCeil(seqLenQ, c.rows) * c.rows);
    double cost = rows / c.rate;
    // Ties go to the larger tile (fewer CTAs, fewer K/V reads).
    if (cost <= bestCost) {
      bestCost = cost;
      best = c.rows;
    }
  }
  // The 64-row tile has one consumer and no producer warpgroup, hence no
  // persistent grid (hopperForwardSchedule drops the flag).
  return {best, persistent};
}

FailureOr<ScheduleAttr> mlir::fa3::selectSchedule(MLIRContext *context,
                                                  StringRef target,
                                                  int64_t headDim,
                                                  Type elementType,
                                                  bool causal,
                                                  int64_t seqLenQ,
                                                  int64_t seqLenK) {
  if (target == "cpu")
    return ScheduleAttr::get(context, /*block_m=*/64, /*block_n=*/64,
                             /*stages=*/1, /*consumer_wgs=*/1,
                             /*producer_regs=*/0, /*consumer_regs=*/0,
                             /*pingpong=*/false, /*intra_wg_overlap=*/false,
                             /*persistent=*/false, /*cluster=*/1,
                             /*rescale_threshold=*/0, /*poly_exp2=*/0);
  if (target != "sm_90a")
    return failure();
  // FlashAttention-3's forward tiles (see the pass description for why):
  // the O accumulator of block_m x D f32 and the S tile of block_m x block_n
  // f32 must both fit the consumers' registers.
  bool fp8 = elementType && isa<Float8E4M3FNType>(elementType);
  ForwardTiles tiles =
      selectHopperForwardTiles(headDim, fp8, causal, seqLenQ, seqLenK);
  int64_t blockN = headDim > 128 ? 80 : 128;
  // FP8 reads V' in atoms of 128 keys (128 bytes of e4m3; 64 where block_n
  // is not whole 128-key atoms); its tiles are half as large, so d256 fits
  // 128 x 128 too. At d128 non-causal on a plain grid, 192-key blocks:
  // measured on the H100 at 8k, +2.0% and +3.2% over 128 in two runs
  // (docs/Performance.md, 2026-12-07). FlashAttention-3 takes 224 at e4m3
  // d128, causal or not; here causal and persistent d128 kernels keep 128
  // (192 measured -4% / -5% causal at 8k / 4k on the H100, 2026-12-07,
  // before the row sums and poly_exp2; again -2% / -3% after them). d64
  // (192-row persistent tiles) takes 192-key blocks too, FlashAttention-3's
  // 192 x 160 rounded to whole 64-key V' atoms: on the H100 in sustained
  // rounds (2026-12-07), 608 -> 621, 647 -> 664, 526 -> 542, 659 -> 678 and
  // 304 -> 315 TFLOP/s at 8k causal, 8k, 4k causal, 16k and 1k causal
  // (+2% to +4%).
  if (fp8)
    blockN = headDim <= 64 || (headDim == 128 && !causal && !tiles.persistent)
                 ? 192
                 : 128;
  // Lazy rescaling (fa3-lazy-rescale, tau = 8) on the FP8 d256 kernel, in
  // alternating sustained rounds at 8k on the H100 (2026-12-07): causal
  // 1013-1030 -> 1045-1051 TFLOP/s (+2% to +3%, six rounds), non-causal
  // 1107 / 1108 -> 1138 / 1144 (+3%). At d128 it lost (-6% causal, -1%
  // non-causal).
  int64_t rescaleThreshold = fp8 && headDim > 128 ? 8 : 0;
  // Every 8th exponential of P on the FMA pipe (poly_exp2 = 8) where a
  // pingpong turn's softmax computes 192 keys' exponentials, the FP8 d128
  // non-causal kernel: on the H100 at 8k, 855 -> 891 and 852 -> 890
  // TFLOP/s (+4.2%, +4.5%; two sustained runs of two rounds, 2026-12-07);
  // N = 6 and 4 gained less (+2.8%, +2.6%). On the 128-key kernels it lost:
  // d128 causal 802 -> 795 (-0.9%), d64 causal 602 -> 591 (-1.8%). d64's
  // 192-key kernel: mixed (causal 620 -> 609, non-causal 665 -> 670), off.
  int64_t polyExp2 = fp8 && headDim == 128 && blockN == 192 ? 8 : 0;
  return hopperForwardSchedule(context, tiles.blockM, blockN, tiles.persistent,
                               rescaleThreshold, polyExp2);
}

FailureOr<ScheduleAttr> mlir::fa3::selectGradSchedule(MLIRContext *context,
                                                      StringRef target,
                                                      int64_t headDim,
                                                      bool elementwiseState) {
  if (target == "cpu")
    return selectSchedule(context, target, headDim, Type(), false);
  if (target != "sm_90a")
    return failure();
  // Two consumer warpgroups, each owning 64 key rows' dK and dV (64 x D f32
  // each) plus the 64 x block_m f32 tiles Sᵀ and dPᵀ: 192 registers a thread
  // at D = 128 with 64-row steps. At D = 64 the steps take 128 query rows
  // (FA3's 128 x 128 tile), which halves the per-step barriers and waits
  // and the dQ reductions per unit of work; not with a softcap, whose
  // derivative's 64 more registers a thread would spill (ptxas: ~0.5 KB),
  // nor with dropout's keep mask and Philox words.
  // At D = 256 the two warpgroups split the head dim of one 64-row key
  // block instead (block_n = 64).
  // A producer warpgroup (FA3's 24/240 split) loads K, V and the Q/dO ring,
  // so no consumer warp waits for the slot's release to refill it.
  int64_t blockM = headDim <= 64 && !elementwiseState ? 128 : 64;
  int64_t blockN = headDim <= 128 ? 128 : 64;
  return ScheduleAttr::get(context, blockM, blockN, /*stages=*/2,
                           /*consumer_wgs=*/2, /*producer_regs=*/24,
                           /*consumer_regs=*/240, /*pingpong=*/false,
                           /*intra_wg_overlap=*/false, /*persistent=*/false,
                           /*cluster=*/1, /*rescale_threshold=*/0,
                           /*poly_exp2=*/0);
}

namespace {
struct FA3SelectSchedulePass
    : public fa3::impl::FA3SelectScheduleBase<FA3SelectSchedulePass> {
  using Base::Base;

  void runOnOperation() override {
    if (target != "cpu" && target != "sm_90a") {
      getOperation()->emitError()
          << "fa3-select-schedule: unknown target '" << target
          << "' (expected 'cpu' or 'sm_90a')";
      return signalPassFailure();
    }
    if (target == "sm_90a" && blockM % 64 != 0) {
      getOperation()->emitError()
          << "fa3-select-schedule: on sm_90a block-m must be a multiple of 64 "
             "(64 query rows per consumer warpgroup), got "
          << static_cast<int64_t>(blockM);
      return signalPassFailure();
    }
    for (int64_t block : {blockM.getValue(), blockN.getValue()}) {
      if (block < 0 || block % 8 != 0) {
        getOperation()->emitError()
            << "fa3-select-schedule: block sizes must be non-negative "
               "multiples of 8, got "
            << block;
        return signalPassFailure();
      }
    }
    auto applyOverrides = [&](ScheduleAttr chosen) {
      if (blockM <= 0 && blockN <= 0)
        return chosen;
      int64_t rows = blockM > 0 ? blockM : chosen.getBlockM();
      int64_t cols = blockN > 0 ? blockN : chosen.getBlockN();
      return ScheduleAttr::get(
          chosen.getContext(), rows, cols, chosen.getStages(),
          chosen.getConsumerWgs(), chosen.getProducerRegs(),
          chosen.getConsumerRegs(), chosen.getPingpong(),
          chosen.getIntraWgOverlap(), chosen.getPersistent(),
          chosen.getCluster(), chosen.getRescaleThreshold(),
          chosen.getPolyExp2());
    };
    // Varlen and KV-cache attentions: their per-sequence lengths are data,
    // so they take the schedule of dynamic lengths.
    // An overridden block_m on Hopper gets the kernel structure of its own
    // consumer count, as fa3.attention's does below.
    auto scheduleForDynamicLengths = [&](auto op) {
      if (op.getSchedule())
        return;
      auto q = cast<RankedTensorType>(op.getQuery().getType());
      ScheduleAttr chosen = *selectSchedule(
          op->getContext(), target, q.getShape().back(), q.getElementType(),
          op.getCausal(), ShapedType::kDynamic, ShapedType::kDynamic);
      if (target == "sm_90a" && (blockM > 0 || blockN > 0))
        chosen = hopperForwardSchedule(
            op->getContext(), blockM > 0 ? blockM : chosen.getBlockM(),
            blockN > 0 ? blockN : chosen.getBlockN(), chosen.getPersistent());
      op.setScheduleAttr(applyOverrides(chosen));
    };
    getOperation()->walk([&](Operation *op) {
      if (auto attention = dyn_cast<AttentionOp>(op)) {
        if (attention.getSchedule())
          return;
        auto q = cast<RankedTensorType>(attention.getQuery().getType());
        auto k = cast<RankedTensorType>(attention.getKey().getType());
        // PackGQA: a head's tiles hold the G heads of its group, Sq · G rows.
        int64_t rows = q.getDimSize(1);
        if (attention.getPackGqa() && !ShapedType::isDynamic(rows))
          rows *= q.getDimSize(2) / k.getDimSize(2);
        ScheduleAttr chosen = *selectSchedule(
            op->getContext(), target, q.getDimSize(3), q.getElementType(),
            attention.getCausal(), rows, k.getDimSize(1));
        // On Hopper block_m decides the warpgroups, so an overridden block_m
        // gets the kernel structure of its own consumer count.
        if (target == "sm_90a" && (blockM > 0 || blockN > 0))
          chosen = hopperForwardSchedule(
              op->getContext(), blockM > 0 ? blockM : chosen.getBlockM(),
              blockN > 0 ? blockN : chosen.getBlockN(), chosen.getPersistent());
        // Dropout's keep mask is applied between the softmax and P V, which
        // the rotated key loop of intra-warpgroup overlap does not build.
        if (target == "sm_90a" && attention.getEffectiveDropout() > 0 &&
            chosen.getIntraWgOverlap())
          chosen = ScheduleAttr::get(
              chosen.getContext(), chosen.getBlockM(), chosen.getBlockN(),
              chosen.getStages(), chosen.getConsumerWgs(),
              chosen.getProducerRegs(), chosen.getConsumerRegs(),
              chosen.getPingpong(), /*intra_wg_overlap=*/false,
              chosen.getPersistent(), chosen.getCluster(),
              chosen.getRescaleThreshold(), chosen.getPolyExp2());
        attention.setScheduleAttr(applyOverrides(chosen));
      } else if (auto varlen = dyn_cast<AttentionVarlenOp>(op)) {
        scheduleForDynamicLengths(varlen);
      } else if (auto cache = dyn_cast<AttentionKVCacheOp>(op)) {
        scheduleForDynamicLengths(cache);
      } else if (auto varlenGrad = dyn_cast<AttentionVarlenGradOp>(op)) {
        if (varlenGrad.getSchedule())
          return;
        auto q = cast<RankedTensorType>(varlenGrad.getQuery().getType());
        varlenGrad.setScheduleAttr(applyOverrides(
            *selectGradSchedule(op->getContext(), target, q.getShape().back(),
                                varlenGrad.getEffectiveSoftcap() > 0)));
      } else if (auto grad = dyn_cast<AttentionGradOp>(op)) {
        if (grad.getSchedule())
          return;
        auto q = cast<RankedTensorType>(grad.getQuery().getType());
        grad.setScheduleAttr(applyOverrides(*selectGradSchedule(
            op->getContext(), target, q.getDimSize(3),
            grad.getEffectiveSoftcap() > 0 || grad.getEffectiveDropout() > 0)));
      }
    });
  }
};
} // namespace
