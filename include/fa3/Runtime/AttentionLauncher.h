//===- AttentionLauncher.h - Launch fa3's Hopper kernels --------*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The host side of the compiled attention kernels (forward and backward),
// with no MLIR: device buffers, the TMA descriptors of Q, K and V, the grid
// rules and the launches.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_RUNTIME_ATTENTIONLAUNCHER_H
#define FA3_RUNTIME_ATTENTIONLAUNCHER_H

#include "fa3/Runtime/CudaDriver.h"
#include "fa3/Runtime/HostTensor.h"

#include <map>
#include <string>

namespace fa3::runtime {

/// What the compiler tells the runtime about one kernel (the
/// `fa3.launch` metadata plus the spec it was built for).
struct AttentionKernelInfo {
  /// What the kernel computes: an attention (forward or backward), or one
  /// of the FP8 preparation ops fa3-cast-fp8 inserts (see
  /// FP8PrepLauncher.h).
  enum class Kind { Attention, Hadamard, Quantize };
  Kind kind = Kind::Attention;
  /// The forward's kernel, or the main backward kernel (its `_pre` and
  /// `_post` companions are named after it); for Quantize, the name its
  /// `_amax` and `_cast` kernels extend.
  std::string name;
  bool backward = false;
  bool bf16 = true; ///< the 16-bit type (FP8: of the output, bf16)
  bool fp8 = false; ///< e4m3 inputs with descales

  int64_t headDim = 0, numQHeads = 0, numKVHeads = 0;
  int64_t blockM = 0, blockN = 0, threads = 0, sharedMemory = 0;
  /// A persistent forward: min(tiles, SMs) CTAs walk the ceildiv(Sq,
  /// blockM) x Hq x B tiles (see AttentionDeviceArgs::multiprocessors).
  bool persistent = false;
  /// A forward with PackGQA: the Hq / Hkv query heads of one key/value head
  /// share each tile, blockM / packedHeads queries of each, so the grid is
  /// ceildiv(Sq, blockM / packedHeads) x Hkv x B and Q and O are described
  /// to TMA as [B, S, Hkv, G, D]. 1: off.
  int64_t packedHeads = 1;
  /// An fa3.attention_kvcache forward: K and V are the caches [B, S_cache,
  /// Hkv, D] and the launch passes cache_seqlens (AttentionDeviceArgs).
  bool kvCache = false;
  /// A paged fa3.attention_kvcache forward (kvCache is set too): K and V are
  /// the caches [num_pages, page_size, Hkv, D], read through a page table
  /// whose geometry (page size included) is a launch argument.
  bool paged = false;
  /// A split-KV fa3.attention_kvcache forward when > 1 (kvCache is set, the
  /// grid is never persistent): each batch's keys are split into numSplits
  /// ranges of whole key blocks, the kernel writes one f32 partial O and LSE
  /// per split into the launch's workspace, and its `_combine` companion
  /// merges them into O and LSE. 1: one split, no workspace.
  int64_t numSplits = 1;
  /// An fa3.attention_varlen forward or fa3.attention_varlen_grad backward:
  /// Q, K, V and O (and dO, dQ, dK, dV) are packed [T, H, D] (described to
  /// TMA as [1, T, H, D]), LSE is [Hq, Tq], and the launch passes the
  /// sequence offsets (cuSeqlensQ/K of AttentionDeviceArgs or
  /// AttentionGradDeviceArgs). Never persistent, split or a KV cache; a
  /// forward with PackGQA (packedHeads = G > 1) describes Q and O as [1, T,
  /// Hkv, G, D] and runs its grid over the key/value heads. Launched by
  /// launchAttentionVarlen (forward) or launchAttentionVarlenBackward.
  bool varlen = false;
  /// A varlen kernel compiled with seqused_k: the launch passes it too.
  bool sequsedK = false;
  /// A deterministic backward: the workspace also holds the dQ turn
  /// counters (i32 [B, Hq, query blocks]; varlen: [Hq, padded rows /
  /// blockM], see attentionGradWorkspaceBytes), zeroed by the launch and
  /// passed to the main kernel.
  bool deterministic = false;
  /// Attention dropout (a dense 16-bit forward or backward): the kernel's
  /// last parameter is the Philox (seed, offset), a device i64 [2]
  /// (AttentionDeviceArgs::rng, AttentionGradDeviceArgs::rng).
  bool dropout = false;

  /// Hadamard and Quantize: the element types read and written (Quantize
  /// writes e4m3). Their `headDim` is the last dimension; for Quantize,
  /// `numQHeads` is H, `numKVHeads` the groups G, and `blockM` the rows one
  /// `_amax` CTA reduces.
  ElementType inputType = ElementType::BF16, outputType = ElementType::BF16;
  /// Quantize: the kernels transform each row first (`hadamard_seed`).
  bool hadamard = false;

  /// As key=value pairs for a KernelCache manifest, and back.
  std::map<std::string, std::string> toManifest() const;
  static llvm::Expected<AttentionKernelInfo>
  fromManifest(const std::map<std::string, std::string> &manifest);
};

/// Device-resident Q, K, V ([B, S, H, D], contiguous) and outputs. FP8
/// kernels also take the descales ([B, Hkv] f32) and a workspace of
/// attentionForwardWorkspaceBytes() bytes (256-byte aligned) for V', and
/// split-KV kernels one of as many bytes for their partial O and LSE. A KV
/// cache kernel reads K and V as the caches (seqK = S_cache, their rows)
/// and the lengths `cacheSeqlens` (i32 [B]). A paged one reads them as
/// [numPages, pageSize, Hkv, D] through `pageTable` (i32 [B,
/// pageTableWidth], row-major): key j of batch b is row j % pageSize of page
/// pageTable[b, j / pageSize]. Its key count is pageTableWidth * pageSize,
/// the most keys a table row addresses; `seqK` is not read.
///
/// A varlen kernel (launchAttentionVarlen) reads packed Q, O [Tq, Hq, D],
/// K, V [Tk, Hkv, D] and LSE [Hq, Tq] with seqQ = Tq, seqK = Tk and `batch`
/// the number of sequences B; `cuSeqlensQ`, `cuSeqlensK` (i32 [B + 1]) and,
/// for a kernel compiled with it, `sequsedK` (i32 [B]) are on the device,
/// and `maxSeqlenQ` bounds every sequence's query count.
struct AttentionDeviceArgs {
  DevicePtr q = 0, k = 0, v = 0, out = 0, lse = 0;
  int64_t batch = 0, seqQ = 0, seqK = 0;
  DevicePtr cacheSeqlens = 0;
  DevicePtr pageTable = 0;
  int64_t numPages = 0, pageSize = 0, pageTableWidth = 0;
  DevicePtr cuSeqlensQ = 0, cuSeqlensK = 0, sequsedK = 0;
  int64_t maxSeqlenQ = 0;
  DevicePtr qDescale = 0, kDescale = 0, vDescale = 0, workspace = 0;
  /// A dropout kernel's Philox (seed, offset): i64 [2] on the device, read
  /// by the kernel when it runs (so a captured graph may update it).
  DevicePtr rng = 0;
  /// The device's multiprocessor count: how many CTAs a persistent kernel
  /// launches at most (one per SM: its shared memory and registers admit
  /// no second). Unused by other kernels.
  int64_t multiprocessors = 0;

  /// The operands every forward launch has; the FP8 ones and
  /// `multiprocessors` are set by name after. (Fields are never initialized
  /// by position: 70a7e9e fixed a launch whose positional initializers had
  /// shifted when a field was added.)
  static AttentionDeviceArgs forward(DevicePtr q, DevicePtr k, DevicePtr v,
                                     DevicePtr out, DevicePtr lse,
                                     int64_t batch, int64_t seqQ,
                                     int64_t seqK) {
    AttentionDeviceArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.out = out;
    args.lse = lse;
    args.batch = batch;
    args.seqQ = seqQ;
    args.seqK = seqK;
    return args;
  }
};

/// Workspace bytes of a forward launch: 0; for FP8 the transposed V'
/// [B, Hkv, D, roundup(Sk, block_n)] in e4m3; for a split-KV kernel of N
/// splits the f32 partial O [N·B, Sq, Hq, D], then (at the next 256-byte
/// boundary) the f32 partial LSE [N·B, Hq, Sq], where split s of batch b is
/// batch s·B + b.
int64_t attentionForwardWorkspaceBytes(const AttentionKernelInfo &info,
                                       int64_t batch, int64_t seqQ,
                                       int64_t seqK);

/// The name of a split-KV kernel's merge kernel, in the same module.
std::string attentionCombineKernelName(const AttentionKernelInfo &info);

/// FP8: launches the V' layout kernel (`<name>_vt`) and then the attention
/// kernel on `stream`.
llvm::Error launchAttentionForwardFP8(const CudaKernel &valueTranspose,
                                      const CudaKernel &kernel,
                                      const AttentionKernelInfo &info,
                                      const AttentionDeviceArgs &args,
                                      CudaStream stream);

/// Encodes the TMA descriptors and launches `kernel` on `stream`. Checks the
/// shapes against `info` first; a launch with no rows (B or Sq = 0) does
/// nothing. A split-KV kernel is refused: it needs launchAttentionSplitKV;
/// so is a varlen one: it needs launchAttentionVarlen.
llvm::Error launchAttentionForward(const CudaKernel &kernel,
                                   const AttentionKernelInfo &info,
                                   const AttentionDeviceArgs &args,
                                   CudaStream stream);

/// Split-KV (info.numSplits > 1): launches `kernel`, which writes the
/// partial attentions into `args.workspace` (attentionForwardWorkspaceBytes,
/// 256-byte aligned) on a (query tiles, heads, B·N) grid, and then on the
/// same stream `combine` (attentionCombineKernelName), which merges them
/// into `args.out` and `args.lse`. A launch with no rows does nothing.
llvm::Error launchAttentionSplitKV(const CudaKernel &kernel,
                                   const CudaKernel &combine,
                                   const AttentionKernelInfo &info,
                                   const AttentionDeviceArgs &args,
                                   CudaStream stream);

/// A packed variable-length forward (info.varlen): on `stream`, fills O with
/// zeros and LSE with -inf, then launches `kernel` on a (ceildiv(maxSeqlenQ,
/// blockM / G), Hq / G, B) grid (G = packedHeads), which writes the rows of
/// every sequence. O (like
/// Q, K and V for TMA) must be 16-byte aligned: the kernel also stores
/// through it with 16-byte stores. Rows past
/// cu_seqlens_q[B] thus read O = 0, LSE = -inf. `maxSeqlenQ` must be at
/// least every sequence's query count: the CTAs past it are never launched
/// and their rows keep the fill (the caller checks it; the offsets are on
/// the device). With Tq = 0 nothing is launched; with B = 0 only the fills.
llvm::Error launchAttentionVarlen(const CudaKernel &kernel,
                                  const AttentionKernelInfo &info,
                                  const AttentionDeviceArgs &args,
                                  CudaStream stream);

/// Device-resident operands of a backward launch ([B, S, H, D] contiguous
/// tensors, LSE [B, Hq, Sq] f32) and a workspace of
/// attentionGradWorkspaceBytes() bytes, 256-byte aligned. The launch
/// initializes the workspace itself.
///
/// A varlen backward (launchAttentionVarlenBackward) reads packed dO, Q, O
/// [Tq, Hq, D], K, V [Tk, Hkv, D], LSE and dLSE [Hq, Tq] and writes dQ, dK,
/// dV shaped like Q, K, V, with seqQ = Tq, seqK = Tk and `batch` the number
/// of sequences B; cuSeqlensQ, cuSeqlensK (i32 [B + 1]) and, for a kernel
/// compiled with it, sequsedK (i32 [B]) are on the device, and maxSeqlenQ /
/// maxSeqlenK bound every sequence's query and key counts.
struct AttentionGradDeviceArgs {
  DevicePtr gradOut = 0, q = 0, k = 0, v = 0, out = 0, lse = 0;
  /// dLSE [B, Hq, Sq] f32, or 0 when the LSE has no gradient.
  DevicePtr gradLse = 0;
  DevicePtr gradQ = 0, gradK = 0, gradV = 0, workspace = 0;
  int64_t batch = 0, seqQ = 0, seqK = 0;
  DevicePtr cuSeqlensQ = 0, cuSeqlensK = 0, sequsedK = 0;
  int64_t maxSeqlenQ = 0, maxSeqlenK = 0;
  /// A dropout backward's Philox (seed, offset), the forward's: i64 [2] on
  /// the device.
  DevicePtr rng = 0;
};

/// The three kernels of a compiled backward.
struct AttentionGradKernels {
  CudaKernel preprocess, main, postprocess;
};

/// Loads the backward's three kernels from `module`.
llvm::Expected<AttentionGradKernels>
getAttentionGradKernels(const CudaModule &module,
                        const AttentionKernelInfo &info);

/// Bytes of workspace a backward launch needs: the f32 dQ accumulator
/// [B, Hq, roundup(Sq, blockM), D] (in 64-row blocks of wgmma fragment
/// order, see buildHopperAttentionGradKernels), then LSE·log2(e) and Δ, f32
/// [B, Hq, roundup(Sq, blockM)], then (deterministic) the i32 turn counters
/// [B, Hq, roundup(Sq, blockM) / blockM].
///
/// Varlen (batch = B sequences, seqQ = Tq, seqK = Tk): the accumulator
/// [Hq, P, D], then LSE·log2(e) and Δ, f32 [Hq, P] with P = floor((Tq +
/// B·blockM) / blockM)·blockM (sequence b's rows start at the aligned
/// floor((cu_q[b] + b·blockM) / blockM)·blockM), then (deterministic) the
/// turn counters [Hq, P / blockM].
int64_t attentionGradWorkspaceBytes(const AttentionKernelInfo &info,
                                    int64_t batch, int64_t seqQ, int64_t seqK);

/// Launches the backward (preprocessing, main, postprocessing) on `stream`.
/// A varlen backward is refused: it needs launchAttentionVarlenBackward.
llvm::Error launchAttentionBackward(const AttentionGradKernels &kernels,
                                    const AttentionKernelInfo &info,
                                    const AttentionGradDeviceArgs &args,
                                    CudaStream stream);

/// A packed variable-length backward (info.varlen, info.backward): on
/// `stream`, the preprocessing (Δ, the statistics, a zeroed dQ accumulator;
/// grid (max(1, roundup(maxSeqlenQ, blockM) / 4), Hq, B)), the main
/// kernel (dK, dV and the dQ accumulation; grid (max(1, ceildiv(maxSeqlenK,
/// blockN)), Hkv, B + 1)) and the postprocessing (dQ from the accumulator;
/// grid (max(1, ceildiv(maxSeqlenQ, 64)), Hq, B + 1)).
/// The CTAs of z = B zero the dQ, dK and dV rows past cu_seqlens_q[B] and
/// cu_seqlens_k[B], so every row of dQ, dK and dV is written: each
/// sequence's gradients of its own attention, zeros elsewhere (and for keys
/// past seqused_k[b]).
///
/// The offsets are on the device and not checked: they must be
/// non-decreasing from 0 with cu_seqlens_q[B] <= Tq, cu_seqlens_k[B] <= Tk,
/// 0 <= seqused_k[b] <= sequence b's keys, and maxSeqlenQ / maxSeqlenK at
/// least every sequence's cu_seqlens_q / cu_seqlens_k difference (seqused_k
/// does not shorten it: the CTAs past the used keys zero their gradients);
/// both are clamped to Tq and Tk. Whole tiles are read, so the rows of Q,
/// dO, K and V must hold finite values. Tq = Tk = 0 launches nothing; B = 0
/// launches the zeroing CTAs alone. Q, K, V, dO must be 16-byte aligned
/// (TMA).
llvm::Error launchAttentionVarlenBackward(const AttentionGradKernels &kernels,
                                          const AttentionKernelInfo &info,
                                          const AttentionGradDeviceArgs &args,
                                          CudaStream stream);

} // namespace fa3::runtime

#endif // FA3_RUNTIME_ATTENTIONLAUNCHER_H
