//===- FA3ToHopper.h - fa3 attention to Hopper kernels -----------*- C++
//-*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_CONVERSION_FA3TOHOPPER_FA3TOHOPPER_H
#define FA3_CONVERSION_FA3TOHOPPER_FA3TOHOPPER_H

#include "fa3/Dialect/FA3/Utils/ValueTransposeLayout.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Support/LLVM.h"

#include <array>
#include <string>
#include <tuple>

namespace mlir {
class OpBuilder;
namespace gpu {
class GPUModuleOp;
} // namespace gpu

class ModuleOp;
namespace fa3 {
class AttentionOp;
class AttentionGradOp;
class AttentionKVCacheOp;
class AttentionVarlenOp;
class AttentionVarlenGradOp;
class HadamardOp;
class QuantizeOp;
class ScheduleAttr;

/// The `gpu.module` that holds fa3's kernels, and the attributes naming a
/// host op's kernel (a symbol ref into it) and its launch (threads, dynamic
/// shared memory, block_m, block_n) for the runtime.
inline constexpr llvm::StringLiteral kKernelModuleName = "fa3_kernels";
inline constexpr llvm::StringLiteral kKernelAttrName = "fa3.kernel";
inline constexpr llvm::StringLiteral kLaunchAttrName = "fa3.launch";
/// The `#fa3.schedule` of a kernel function outlined by
/// fa3-outline-hopper-kernels, which convert-fa3-tile-to-hopper builds.
inline constexpr llvm::StringLiteral kScheduleAttrName = "fa3.schedule";

/// `module`'s @fa3_kernels, created for `chip` (with the container-module
/// attribute on `module`) when absent.
gpu::GPUModuleOp getOrCreateHopperKernelModule(ModuleOp module, StringRef chip);
/// Sets `fa3.kernel` = @fa3_kernels::@`name` and `fa3.launch` on `op`. A
/// persistent kernel's launch also says `persistent = 1`: the runtime
/// launches min(tiles, SMs) CTAs instead of one per tile. A forward with
/// PackGQA says `packed_heads = G`: its tiles hold blockM / G queries of G
/// heads, its grid runs over the key/value heads and the runtime describes
/// Q and O to TMA as [B, S, H / G, G, D].
void annotateHopperLaunch(Operation *op, gpu::GPUModuleOp kernels,
                          StringRef name, int64_t threads, int64_t sharedMemory,
                          int64_t blockM, int64_t blockN,
                          bool persistent = false, int64_t packedHeads = 1,
                          bool kvCache = false, bool paged = false,
                          int64_t numSplits = 1);

/// Everything the Hopper forward kernel is specialized on. Sequence lengths
/// and the batch are run-time values; the rest is compiled in.
struct HopperAttentionSpec {
  bool bf16 = true; ///< bf16, else f16 (the output type in FP8 mode: bf16)
  /// e4m3 Q, K, V with descales: e4m3 wgmma for both GEMMs, V read through
  /// a transposed copy V' (see buildValueTransposeKernel), bf16 output.
  bool fp8 = false;
  int64_t headDim = 128;
  int64_t numQHeads = 1, numKVHeads = 1;
  bool causal = false;
  int64_t windowLeft = -1, windowRight = -1; ///< causal folds into right = 0
  float scale = 1.0f;
  float softcap = 0.0f;
  /// Attention dropout's probability (0: off): the kernel takes the Philox
  /// (seed, offset) as its last parameter, a global i64 [2] (fa3.dropout).
  float dropout = 0.0f;
  int64_t blockM = 128, blockN = 128, stages = 2;
  /// Issue block i+1's QKᵀ before block i's PV and overlap its softmax
  /// with that PV (the schedule's `intra_wg_overlap`); needs registers for
  /// two S tiles.
  bool intraWarpgroupOverlap = false;
  /// Lazy rescaling (the schedule's `rescale_threshold` τ, 0 = off; the key
  /// loop's fa3.online_softmax carries it): a row keeps its max until a
  /// block raises c · max by more than τ, and O's rescale is skipped where
  /// a warp's rows all kept theirs.
  int64_t rescaleThreshold = 0;
  /// FP8: every N-th exponential of a consumer thread's probabilities is a
  /// polynomial on the FMA pipe instead of a MUFU.EX2 (the schedule's
  /// `poly_exp2`, 0 = off; TileKernelEmitter::onlineSoftmax).
  int64_t polyExp2 = 0;
  /// Warp specialization (the schedule's `producer_regs`/`consumer_regs`,
  /// 0 = off): warpgroup 0 becomes a producer that only issues the TMA
  /// loads of Q and of the K/V ring and gives its registers away with
  /// `setmaxnreg.dec` to `producerRegs`; the consumer warpgroups take them
  /// with `setmaxnreg.inc` to `consumerRegs`.
  int64_t producerRegs = 0, consumerRegs = 0;
  /// Pingpong (the schedule's `pingpong`, needs warp specialization and two
  /// consumer warpgroups): the consumers take turns issuing their wgmmas,
  /// ordered by two named barriers, so one warpgroup's softmax runs while
  /// the other's GEMMs occupy the tensor cores.
  bool pingpong = false;
  /// With pingpong: the turns restart at every tile (fa3-pingpong's
  /// `fa3.pingpong_turns = "per_tile"`) instead of running on across a
  /// persistent CTA's tiles.
  bool pingpongPerTile = false;
  /// A persistent grid (the schedule's `persistent`, needs warp
  /// specialization): one CTA per SM takes tiles of the
  /// tile-level grid from an atomic counter, in the grid's order, so the
  /// producer loads tile n + 1's Q and first K/V blocks while the consumers
  /// still finish tile n. The K/V ring's slots and phases run on across tiles;
  /// Q-empty mbarriers hand the Q tiles (two where they fit, see
  /// queryBuffers) back to the producer.
  bool persistent = false;
  /// PackGQA (the attention's `pack_gqa`; 16-bit only): the Hq / Hkv query
  /// heads of one key/value head are the rows of one tile, blockM /
  /// packedHeads queries of each; 1 = off. Must divide 64, so that each
  /// consumer warpgroup's rows are whole queries.
  int64_t packedHeads = 1;
  /// An fa3.attention_kvcache (contiguous cache, one split): K and V are
  /// the caches [B, S_cache, Hkv, D], batch b attends to its first
  /// min(cache_seqlens[b], S_cache) keys (bottom-right causal per batch),
  /// and the kernel takes the i32 cache_seqlens pointer as its last
  /// parameter.
  bool kvCache = false;
  /// A paged KV cache (fa3.attention_kvcache with a page table): K and V
  /// are [num_pages, page_size, Hkv, D] and key j of batch b is slot j %
  /// page_size of page page_table[b, j / page_size]. The page size is a
  /// run-time value: the kernel takes the page table pointer, its width
  /// (max_pages), the page size and the chunk rows c = gcd(page_size,
  /// blockN) after cache_seqlens, and loads each K/V tile as blockN / c TMA
  /// boxes of c rows (fa3.tma_load_paged_tile), none of which crosses a
  /// page.
  bool paged = false;
  /// Split-KV (fa3.attention_kvcache's num_splits = N > 1): the kernel
  /// attends to split s of batch b's key blocks in grid z = s·B + b and
  /// writes f32 partials (O [N·B, Sq, Hq, D] through a plain pointer in the
  /// O tensor map's place, LSE [N·B, Hq, Sq]); a second kernel,
  /// combineKernelName(), merges them into O and the LSE. 1 = off.
  int64_t numSplits = 1;
  /// A packed variable-length batch (fa3.attention_varlen): Q, K, V and O
  /// are [T, H, D], described to TMA as [1, T, H, D], the LSE [Hq, Tq];
  /// the kernel takes the cu_seqlens_q and cu_seqlens_k pointers (i32
  /// [B + 1]) after the tile counter, and the seqused_k pointer (i32 [B])
  /// after those when `sequsedK`. Grid z runs over the sequences and x
  /// over query blocks; a block past its sequence's end exits at once, and
  /// O rows are stored up to the sequence's end only (TMA for a warpgroup's
  /// 64 rows inside it, else a copy of the rows inside). Never persistent
  /// or split; PackGQA as the dense forward's.
  bool varlen = false;
  bool sequsedK = false;

  /// Reads the spec of a scheduled fa3.attention (or fa3.attention_kvcache,
  /// fa3.attention_varlen); emits a diagnostic naming what the Hopper
  /// backend does not support and fails otherwise.
  static FailureOr<HopperAttentionSpec> fromOp(AttentionOp op);
  static FailureOr<HopperAttentionSpec> fromOp(AttentionKVCacheOp op);
  static FailureOr<HopperAttentionSpec> fromOp(AttentionVarlenOp op);

  /// A kernel name unique to the spec, e.g.
  /// fa3_fwd_bf16_d128_h8x2_m128n128_causal.
  std::string kernelName() const;
  /// Split-KV only: the kernel merging the partials by their LSE
  /// (buildCombineSplitsKernel) has grid (ceildiv(Sq · Hq,
  /// kCombineRowsPerCta), B) and kCombineThreads threads (a warp per
  /// (query, head) row), no shared memory; params partial O, partial LSE,
  /// O, LSE, Sq, B.
  static constexpr int64_t kCombineThreads = 128, kCombineRowsPerCta = 4;
  int64_t elementBytes() const { return fp8 ? 1 : 2; }
  /// FP8 below D = 256 (N = D + 8 fits a wgmma), without dropout (whose
  /// row sum is of P before the mask) or a paged cache: each V' atom in
  /// shared memory has kRowSumRows rows of e4m3 1.0 after its D rows, so
  /// the PV wgmma (N = D + 8) also accumulates each row's sum of the e4m3
  /// P · s it multiplies, in every lane of the row's quad. The softmax
  /// keeps no row sum of its own: l is those columns of O.
  bool rowSumByMma() const {
    return fp8 && headDim + kRowSumRows <= 256 && dropout == 0.0f && !paged;
  }
  static constexpr int64_t kRowSumRows = 8;
  /// The rows of each V atom in shared memory: D, and kRowSumRows more with
  /// rowSumByMma().
  int64_t valueTileRows() const {
    return headDim + (rowSumByMma() ? kRowSumRows : 0);
  }
  int64_t numConsumerWarpgroups() const { return blockM / 64; }
  bool warpSpecialized() const { return producerRegs > 0; }
  int64_t numConsumerThreads() const { return numConsumerWarpgroups() * 128; }
  /// The consumers plus, with warp specialization, the producer warpgroup.
  int64_t numThreads() const {
    return numConsumerThreads() + (warpSpecialized() ? 128 : 0);
  }
  /// Q tiles in shared memory: two on a persistent grid where they fit, so
  /// the producer loads tile n + 1's Q while the consumers still compute
  /// tile n; one otherwise.
  int64_t queryBuffers() const;
  /// Whether the forward stages O for its TMA store in a tile of its own
  /// (after the V ring) rather than in the Q tile: always for FP8 (its bf16
  /// O does not fit the e4m3 Q tile), else on a persistent grid where it
  /// fits. There a warpgroup's O store is waited for only before
  /// its next tile's epilogue writes the O tile again, and Q is released
  /// right after the key loop, so nothing of the store delays the next
  /// tile; in the Q tile, the store had to be read before Q was released.
  bool separateOutputTile() const;
  /// Dynamic shared memory: the Q tiles, `stages` K and V tiles, the O tile
  /// (separateOutputTile()), mbarriers
  /// (Q full per Q tile; K full, V full, K empty and V empty per stage; Q
  /// empty per Q tile if persistent), and 1 KiB of slack to align the tiles
  /// to the 128-byte swizzle's 1 KiB period.
  int64_t sharedMemoryBytes() const;
};

/// The dynamic shared memory a Hopper CTA can have (227 KiB).
inline constexpr int64_t kMaxSharedMemory = 232448;

/// annotateHopperLaunch for the 16-bit forward kernel of `spec` named
/// `name`: its threads, shared memory, tiles and the launch flags of its
/// kind (persistent, packed_heads, kvcache, paged, num_splits, and for a
/// packed variable-length batch `varlen = 1`, with `seqused = 1` when it
/// reads seqused_k).
void annotateHopperForwardLaunch(Operation *op, gpu::GPUModuleOp kernels,
                                 StringRef name,
                                 const HopperAttentionSpec &spec);

/// FP8 only: emits the V layout kernel of `spec` into `module` as `name`
/// (the attention kernel's name + "_vt"): V [B, Sk, Hkv, D] to V' [B, Hkv,
/// D, P] (P = valueTransposePaddedKeys(block_n, Sk); keys innermost, permuted
/// within groups of 32); grid (P / 128, Hkv, B), 256 threads, 128 ·
/// valueTransposeRowBytes(D) bytes of dynamic shared memory; params V, V',
/// Sk, padded Sk.
LLVM::LLVMFuncOp buildValueTransposeKernel(OpBuilder &builder,
                                           gpu::GPUModuleOp module,
                                           const HopperAttentionSpec &spec,
                                           StringRef name);

/// Emits kernel `name` (the split kernel's name + "_combine") into
/// `module`: fa3.combine_splits of a split-KV forward's f32 partials into O
/// (the 16-bit type) and the LSE (see HopperAttentionSpec::numSplits).
void buildCombineSplitsKernel(OpBuilder &builder, gpu::GPUModuleOp module,
                              const HopperAttentionSpec &spec, StringRef name);

/// Everything the Hopper backward kernels are specialized on.
///
/// The backward runs as three kernels: `<name>_pre` (per query row: Δ =
/// rowsum(dO ∘ O), the LSE in base 2 and a zeroed f32 dQ accumulator),
/// `<name>` (per key block of `blockN` rows: dK and dV in registers, dQ
/// partials reduced into the accumulator) and `<name>_post` (dQ = scale ·
/// accumulator in the storage type).
struct HopperAttentionGradSpec {
  bool bf16 = true;
  int64_t headDim = 128;
  int64_t numQHeads = 1, numKVHeads = 1;
  bool causal = false;
  int64_t windowLeft = -1, windowRight = -1;
  float scale = 1.0f;
  float softcap = 0.0f;
  /// Attention dropout's probability (0: off): the main kernel regenerates
  /// the forward's mask from the Philox (seed, offset), its last parameter.
  float dropout = 0.0f;
  /// Query rows per step (the N of the Sᵀ tile: 64, or 128 at D = 64, where
  /// the warpgroups then split dQ's query rows) and key rows per CTA (64 per
  /// warpgroup, or 64 shared by both warpgroups, which then split the head
  /// dim of dK and dV and the query columns of Sᵀ and dPᵀ).
  int64_t blockM = 64, blockN = 128, stages = 2;
  /// The op's `deterministic`: the key-block CTAs add their dQ partials of
  /// each (head, query block) in key-block order (a turn counter per
  /// (batch, head, query block) in the workspace, zero at launch; the main
  /// kernel's last parameter), and at D = 64 with 64-row steps the two
  /// warpgroups, which add to the same elements, one after the other (with
  /// 128-row steps they add disjoint rows). dQ is then bit-identical
  /// from run to run; dK and dV always are (registers).
  bool deterministic = false;
  /// The backward of an fa3.attention_varlen (fa3.attention_varlen_grad):
  /// dO, Q, O and dQ are packed [Tq, Hq, D] (described to TMA as [1, Tq,
  /// Hq, D]), K, V, dK, dV [Tk, Hkv, D], the LSE and dLSE [Hq, Tq]; grid z
  /// runs over the B sequences plus one, whose CTAs zero the rows past the
  /// last sequence (see buildHopperAttentionGradKernels).
  bool varlen = false;
  /// A varlen backward with seqused_k: keys past seqused_k[b] are hidden
  /// (and get zero gradients).
  bool sequsedK = false;
  /// The schedule's producer_regs/consumer_regs (both 0: no producer). With
  /// them the main kernel has a producer warpgroup (warpgroup 0, as in the
  /// forward) whose first thread loads K, V and the Q/dO/LSE₂/Δ ring for the
  /// consumers, which never wait for a slot's release themselves; setmaxnreg
  /// gives it `producerRegs` registers a thread and the two consumer
  /// warpgroups `consumerRegs`.
  int64_t producerRegs = 0, consumerRegs = 0;

  static FailureOr<HopperAttentionGradSpec> fromOp(AttentionGradOp op);
  static FailureOr<HopperAttentionGradSpec> fromOp(AttentionVarlenGradOp op);

  std::string kernelName() const;
  std::string preprocessKernelName() const { return kernelName() + "_pre"; }
  std::string postprocessKernelName() const { return kernelName() + "_post"; }
  /// Consumer warpgroups of the main kernel.
  static constexpr int64_t kNumWarpgroups = 2;
  bool hasProducer() const { return producerRegs > 0; }
  int64_t numConsumerThreads() const { return kNumWarpgroups * 128; }
  int64_t numThreads() const {
    return numConsumerThreads() + (hasProducer() ? 128 : 0);
  }
  /// Key-row slabs of 64: 2 when each warpgroup owns its own rows.
  int64_t keySlabs() const { return blockN / 64; }
  /// Head-dim columns of dK/dV each warpgroup accumulates.
  int64_t sliceWidth() const { return headDim * keySlabs() / kNumWarpgroups; }
  /// Where both warpgroups share the key rows (one slab), each computes Sᵀ
  /// and dPᵀ for half of the step's query columns, and Pᵀ goes through
  /// shared memory like dSᵀ (dV and dK read A from there): no tensor work
  /// is done twice.
  bool splitQueryColumns() const { return keySlabs() == 1; }
  /// A warpgroup's dQ partial of one step: a 64 × 64 f32 tile.
  static constexpr int64_t kDQTileBytes = 64 * 64 * 4;
  /// Whether the main kernel stages each warpgroup's dQ partial in shared
  /// memory and adds it to the accumulator with one cp.reduce.async.bulk
  /// (where a staging tile per warpgroup fits beside the K/V tiles and the
  /// ring: D = 64 and 128), rather than with red.global.add from registers.
  bool dQThroughSharedMemory() const;
  /// dSᵀ tiles in shared memory: 2 where they fit (step `it` writes buffer
  /// it % 2, so no warpgroup waits before its dS store for the others to
  /// finish reading the previous step's; FA3's Stages_dS = 2), else 1.
  int64_t dsBuffers() const;
  int64_t sharedMemoryBytes() const;
  /// Threads of the pre- and postprocessing kernels; the preprocessing
  /// handles one query row per warp, the postprocessing one 64-row block of
  /// the accumulator per CTA (a thread per wgmma fragment slot).
  static constexpr int64_t kPreThreads = 128, kPostThreads = 128;
};

/// What the backward's key grid stores into dK or dV: `scale` times the
/// accumulator that its step loops carry as value `carried` (0 or 1).
struct GradKeyGradient {
  unsigned carried;
  float scale;
};

/// Emits the three backward kernels of `spec` into `module`. Parameters:
/// The dQ accumulator (f32) has the statistics' rows: [B, Hq,
/// roundup(Sq, blockM)] dense, [Hq, P] varlen (below), each of D elements,
/// and each block of 64 rows is one contiguous 64·D tile in the order the
/// main kernel's wgmma fragments hold it: D / 64 column chunks of 64 × 64,
/// and in a chunk, for 8-column block j and warpgroup thread t, the four
/// values t holds of it at ((j·128 + t)·4 + e) (e = 2·(row's 8-row half) +
/// column parity). A chunk is then one bulk reduce (or 8 coalesced 16-byte
/// reductions a thread), and _post reads it with 16-byte loads.
///  * pre: dO, O (storage type), LSE (f32 [B, Hq, Sq]), dLSE (the same, or
///    null), dQ accumulator, LSE·log2(e) and Δ (f32 [B, Hq, roundup(Sq,
///    blockM)]), Sq (i32). Grid (roundup(Sq, blockM) / 4, Hq, B); zeroes
///    the accumulator rows of its statistics rows.
///  * main: the CUtensorMaps of Q, K, V and dO (by value), LSE·log2(e), Δ,
///    the dQ accumulator, dK, dV, Sq, Sk (i32) and, deterministic, the turn
///    counters (i32 [B, Hq, roundup(Sq, blockM) / blockM]). Grid
///    (ceildiv(Sk, blockN), Hkv, B), numThreads(), sharedMemoryBytes().
///  * post: the dQ accumulator, dQ, Sq (i32). Grid (roundup(Sq, 64) / 64,
///    Hq, B), kPostThreads: a CTA converts one 64-row block.
///
/// Varlen (packed [T, H, D] tensors; Sq, Sk are the row counts Tq, Tk;
/// LSE and dLSE [Hq, Tq]; B sequences): the statistics LSE·log2(e) and Δ are
/// [Hq, P] with P = floor((Tq + B·blockM) / blockM)·blockM, sequence b's
/// rows starting at the blockM-aligned floor((cu_q[b] + b·blockM) /
/// blockM)·blockM (FA3's padded offsets), so that each step's rows are one
/// aligned bulk copy; the turn counters are [Hq, P / blockM].
///  * pre: the dense parameters, then cu_seqlens_q. Grid (max(1,
///    roundup(max Sq_b, blockM) / 4), Hq, B).
///  * main: the dense parameters up to Sk, then cu_seqlens_q, cu_seqlens_k,
///    seqused_k (with sequsedK) and the turn counters (deterministic). Q and
///    dO are described to TMA as [1, Tq, Hq, D], K and V as [1, Tk, Hkv, D].
///    Grid (max(1, ceildiv(max Sk_b, blockN)), Hkv, B + 1); z = B zeroes
///    the dK and dV rows past cu_k[B].
///  * post: the dense parameters, then cu_seqlens_q. Grid (max(1,
///    roundup(max Sq_b, 64) / 64), Hq, B + 1); z = B zeroes the dQ rows past
///    cu_q[B].
///
/// `keyGrid` is what the main kernel reads from the tile level's key-block
/// grid (convert-fa3-tile-to-hopper replays the grid's index arithmetic):
/// its coordinates, the query blocks of its steps and which of them are
/// masked.
/// What the backward's main kernel loads from global memory: K and V once,
/// then a step's Q, dO, LSE (base 2, from `_pre`) and Δ.
enum class GradLoad { Key, Value, Query, GradOutput, LSE, Delta };

class GradKeyGridReplay {
public:
  virtual ~GradKeyGridReplay() = default;
  /// At the kernel's entry: the CTA's (key block, K/V head, batch) from its
  /// block ids (x, y, z) and the kernel's Sq and Sk (i32); a packed
  /// backward's `lengthPointers` are its cu_seqlens_q, cu_seqlens_k and
  /// seqused_k parameters (the i32 vectors the grid's arithmetic reads).
  virtual std::array<Value, 3>
  coordinates(OpBuilder &b, std::array<Value, 3> blockIds, Value seqQ,
              Value seqK, ArrayRef<Value> lengthPointers) = 0;
  /// Packed, after coordinates(): the CTA's sequence, (first query row,
  /// first key row, query rows, used key rows), emitted where `b` is.
  virtual std::tuple<Value, Value, Value, Value> sequence(OpBuilder &b) = 0;
  /// After coordinates(): the first query block of the key block's steps
  /// and the end of them (each query head of the group walks the same
  /// blocks), emitted where `b` is.
  virtual std::pair<Value, Value> queryBlocks(OpBuilder &b) = 0;
  /// Whether the step of query head `g` of the group (0 .. Hq/Hkv) at query
  /// block `qb` needs the mask (i1), emitted where `b` is.
  virtual Value needsMask(OpBuilder &b, Value g, Value qb) = 0;
  /// The tile ops of one step (one query block of one query head against
  /// the CTA's key block), in the order the kernel emits them.
  virtual Block &stepBody() = 0;
  /// What the grid stores into dK (first) and dV (second).
  virtual std::array<GradKeyGradient, 2> keyGradients() = 0;
  /// After coordinates(): the (batch, row, head) at which the kernel loads
  /// `what`, from the IR that loads it (fa3-warp-specialize's fill where
  /// the grid has a producer, else the consumers' load), emitted where `b`
  /// is; a step's load (Q, dO, LSE, Δ) for query head `g` of the group and
  /// query block `qb`. A packed batch's rows are the sequence's first row
  /// plus the block's.
  virtual std::array<Value, 3> loadCoordinates(OpBuilder &b, GradLoad what,
                                               Value g = Value(),
                                               Value qb = Value()) = 0;
};
void buildHopperAttentionGradKernels(OpBuilder &builder,
                                     gpu::GPUModuleOp module,
                                     const HopperAttentionGradSpec &spec,
                                     GradKeyGridReplay &keyGrid);

/// The checks of a backward spec that do not depend on where it was read
/// (the L0 op, or the tile-level kernel function): head dim, tiles, stages,
/// the schedule's fields, the register split (which it fills in) and the
/// shared memory. Diagnostics go to `op`.
LogicalResult checkHopperGradSpec(Operation *op, ScheduleAttr schedule,
                                  HopperAttentionGradSpec &spec);

/// annotateHopperLaunch for the backward kernels of `spec`: the main
/// kernel's name, threads, shared memory and tiles, and the flags the
/// runtime's launch reads (deterministic, varlen, seqused, dropout).
void annotateHopperGradLaunch(Operation *op, gpu::GPUModuleOp kernels,
                              const HopperAttentionGradSpec &spec);

/// The element types the FP8 preparation kernels read and write.
enum class HopperScalar { F32, BF16, F16 };

/// fa3.hadamard on Hopper: one warp per row of `dim` elements (32 to 256),
/// each lane holding dim / 32 consecutive ones; butterflies within a lane
/// run in registers, the others through shfl.bfly.
struct HopperHadamardSpec {
  HopperScalar input = HopperScalar::BF16, output = HopperScalar::F32;
  int64_t dim = 128;
  int64_t seed = 0;

  static FailureOr<HopperHadamardSpec> fromOp(HadamardOp op);
  /// e.g. fa3_hadamard_bf16_f32_d128_s0.
  std::string kernelName() const;
  static constexpr int64_t kRowsPerBlock = 8;
  int64_t numThreads() const { return kRowsPerBlock * 32; }
};

/// Emits the Hadamard kernel. Parameters: input, output, rows (i64: the
/// product of all but the last dimension). Grid ceildiv(rows, 8), 256
/// threads.
void buildHopperHadamardKernel(OpBuilder &builder, gpu::GPUModuleOp module,
                               const HopperHadamardSpec &spec);

/// fa3.quantize on Hopper, as two kernels: `<name>_amax` reduces |x| per
/// (batch, group) into u32 bits of non-negative floats (whose unsigned
/// order is the float order) with atomic max, from chunks of rows spread
/// over the grid; `<name>_cast` writes the descales and the e4m3 values
/// (cvt.rn.satfinite.e4m3x2, four elements per thread).
struct HopperQuantizeSpec {
  HopperScalar input = HopperScalar::F32;
  int64_t numHeads = 1, numGroups = 1, headDim = 128;
  /// `hadamard_seed`: both kernels transform each row (one warp per row, as
  /// the Hadamard kernel does) before using it; no f32 copy is stored.
  bool hadamard = false;
  int64_t seed = 0;

  static FailureOr<HopperQuantizeSpec> fromOp(QuantizeOp op);
  /// e.g. fa3_quantize_f32_h8g2_d128.
  std::string kernelName() const;
  std::string amaxKernelName() const { return kernelName() + "_amax"; }
  std::string castKernelName() const { return kernelName() + "_cast"; }
  /// Rows of one (batch, group) an _amax CTA reduces: about 16 Ki elements.
  int64_t rowsPerChunk() const;
  static constexpr int64_t kThreads = 256;
};

/// Emits the two quantization kernels. Parameters:
///  * _amax: input, the zeroed amax bits (u32 [B, G]), S (i32). Grid
///    (ceildiv(S, rowsPerChunk()), G, B).
///  * _cast: input, the amax bits, the e4m3 output, the descales (f32
///    [B, G]), the element count B·S·H·D, the elements per batch S·H·D and
///    B·G (i64). Grid ceildiv(max(count / 4, B·G), 256).
/// With `hadamard`, _cast takes the row count B·S·H and the rows per batch
/// S·H instead of the element counts, and its grid is
/// max(ceildiv(B·S·H, 8), ceildiv(B·G, 256)) (one warp per row).
void buildHopperQuantizeKernels(OpBuilder &builder, gpu::GPUModuleOp module,
                                const HopperQuantizeSpec &spec);

} // namespace fa3
} // namespace mlir

#endif // FA3_CONVERSION_FA3TOHOPPER_FA3TOHOPPER_H
