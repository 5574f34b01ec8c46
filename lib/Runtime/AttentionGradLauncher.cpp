//===- AttentionGradLauncher.cpp - Launch fa3's Hopper backward kernels ---===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/AttentionLauncher.h"

#include "TensorMaps.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>

using namespace fa3::runtime;

static llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument,
                                 message.str().c_str());
}

llvm::Expected<AttentionGradKernels>
fa3::runtime::getAttentionGradKernels(const CudaModule &module,
                                      const AttentionKernelInfo &info) {
  if (!info.backward)
    return error("kernel " + info.name +
                 " is a forward kernel, not a backward");
  auto pre = module.getFunction(info.name + "_pre");
  if (!pre)
    return pre.takeError();
  auto main = module.getFunction(info.name);
  if (!main)
    return main.takeError();
  auto post = module.getFunction(info.name + "_post");
  if (!post)
    return post.takeError();
  return AttentionGradKernels{*pre, *main, *post};
}

/// The dense and the packed backward store dQ, dK and dV in 16-byte pieces
/// of their rows: an error naming the first output off 16 bytes.
static llvm::Error checkGradAlignment(const AttentionKernelInfo &info,
                                      DevicePtr gradQ, DevicePtr gradK,
                                      DevicePtr gradV) {
  for (auto [name, ptr] : {std::pair<const char *, DevicePtr>{"dQ", gradQ},
                           {"dK", gradK},
                           {"dV", gradV}})
    if (ptr % 16 != 0)
      return error("kernel " + info.name +
                   ": dQ, dK and dV must be 16-byte aligned (the kernels "
                   "store 16-byte pieces of their rows); " +
                   name + " is not");
  return llvm::Error::success();
}

/// Query rows padded to whole backward steps, so that the per-step LSE and
/// Δ rows are 16-byte aligned bulk copies.
static int64_t paddedSeqQ(const AttentionKernelInfo &info, int64_t seqQ) {
  return (seqQ + info.blockM - 1) / info.blockM * info.blockM;
}

namespace {
/// Where the backward's scratch lies in its workspace: byte offsets from its
/// start (the dQ accumulator is at 0), and the number of turn counters.
struct GradWorkspaceLayout {
  int64_t lse2 = 0, delta = 0, turns = 0, end = 0;
  int64_t counters = 0;
};
} // namespace

/// The layout attentionGradWorkspaceBytes documents. The statistics are
/// `slabs` rows of `rows` f32 each: one per (batch, head) of `rows` =
/// roundup(Sq, blockM) dense, one per head of every sequence's padded rows
/// varlen.
static GradWorkspaceLayout gradWorkspaceLayout(const AttentionKernelInfo &info,
                                               int64_t batch, int64_t seqQ) {
  // Varlen: sequence b's statistics start at floor((cu_q[b] + b·blockM) /
  // blockM)·blockM and take roundup(its rows, blockM), so the last one ends
  // by floor((Tq + B·blockM) / blockM)·blockM (FlashAttention-3's padded
  // offsets).
  int64_t rows = info.varlen
                     ? (seqQ + batch * info.blockM) / info.blockM * info.blockM
                     : paddedSeqQ(info, seqQ);
  int64_t slabs = info.varlen ? info.numQHeads : batch * info.numQHeads;
  GradWorkspaceLayout layout;
  // The dQ accumulator has the statistics' rows, of D f32 each.
  layout.lse2 = alignUp(slabs * rows * info.headDim * 4, 256);
  layout.delta = layout.lse2 + slabs * rows * 4;
  layout.turns = layout.delta + slabs * rows * 4;
  // A deterministic backward's dQ turn counters: one per query block of each
  // statistics row.
  layout.counters = info.deterministic ? slabs * (rows / info.blockM) : 0;
  layout.end = layout.turns + layout.counters * 4;
  return layout;
}

int64_t
fa3::runtime::attentionGradWorkspaceBytes(const AttentionKernelInfo &info,
                                          int64_t batch, int64_t seqQ,
                                          int64_t seqK) {
  (void)seqK;
  return gradWorkspaceLayout(info, batch, seqQ).end;
}

namespace {
/// The TMA descriptors of the main backward kernel's loads.
struct GradTensorMaps {
  TensorMap q, k, v, dO;
};
} // namespace

/// Q and dO in boxes of blockM rows, K and V in boxes of blockN, as
/// [batch, S, H, D]. As in the forward, a zero-length Q has nothing to
/// load: its descriptors then point at K and are never read.
static llvm::Expected<GradTensorMaps>
encodeGradTensorMaps(const AttentionKernelInfo &info,
                     const AttentionGradDeviceArgs &args, int64_t batch) {
  bool noRows = args.seqQ == 0;
  int64_t seqQ = noRows ? args.seqK : args.seqQ;
  int64_t qHeads = noRows ? info.numKVHeads : info.numQHeads;
  DevicePtr q = noRows ? args.k : args.q, dO = noRows ? args.k : args.gradOut;
  GradTensorMaps maps;
  for (auto [map, base, seq, heads, rows, what] :
       {std::tuple<TensorMap *, DevicePtr, int64_t, int64_t, int64_t,
                   const char *>{&maps.q, q, seqQ, qHeads, info.blockM, "Q"},
        {&maps.k, args.k, args.seqK, info.numKVHeads, info.blockN, "K"},
        {&maps.v, args.v, args.seqK, info.numKVHeads, info.blockN, "V"},
        {&maps.dO, dO, seqQ, qHeads, info.blockM, "dO"}}) {
    auto encoded = bshdTensorMap(base, info.bf16, batch, seq, heads,
                                 info.headDim, rows, what);
    if (!encoded)
      return encoded.takeError();
    *map = *encoded;
  }
  return maps;
}

/// The postprocessing: dQ from the f32 accumulator, a CTA of 128 threads
/// per 64-row block of each (batch or sequence, head); `seqQ` rows each
/// (the longest sequence's varlen), `zBlocks` batches (varlen: the
/// sequences and one more, which zeroes the rows past them).
static llvm::Error launchGradPost(const AttentionGradKernels &kernels,
                                  const AttentionKernelInfo &info,
                                  llvm::ArrayRef<void *> params, int64_t seqQ,
                                  unsigned zBlocks, CudaStream stream) {
  Dim3 grid{unsigned(std::max<int64_t>(1, (seqQ + 63) / 64)),
            unsigned(info.numQHeads), zBlocks};
  return kernels.postprocess.launch(grid, Dim3{128, 1, 1}, 0, stream, params);
}

llvm::Error fa3::runtime::launchAttentionBackward(
    const AttentionGradKernels &kernels, const AttentionKernelInfo &info,
    const AttentionGradDeviceArgs &args, CudaStream stream) {
  if (!info.backward)
    return error("kernel " + info.name + " is not a backward kernel");
  if (info.varlen)
    return error("kernel " + info.name +
                 " is an fa3.attention_varlen_grad backward: launch it with "
                 "launchAttentionVarlenBackward");
  if (info.dropout && !args.rng)
    return error("kernel " + info.name +
                 " has dropout: its launch needs the forward's Philox (seed, "
                 "offset) pointer (rng, i64 [2] on the device)");
  if (args.batch == 0)
    return llvm::Error::success();
  if (args.seqQ > INT32_MAX || args.seqK > INT32_MAX)
    return error("sequence lengths must fit in 32 bits");
  if (args.workspace % 256 != 0)
    return error("the backward workspace must be 256-byte aligned");
  if (llvm::Error err =
          checkGradAlignment(info, args.gradQ, args.gradK, args.gradV))
    return err;
  int64_t seqPad = paddedSeqQ(info, args.seqQ);
  GradWorkspaceLayout layout = gradWorkspaceLayout(info, args.batch, args.seqQ);
  DevicePtr acc = args.workspace, lse2 = args.workspace + layout.lse2,
            delta = args.workspace + layout.delta,
            turns = args.workspace + layout.turns;
  int32_t seqQ32 = int32_t(args.seqQ), seqK32 = int32_t(args.seqK);
  if (layout.counters)
    if (llvm::Error err =
            memsetAsync32(turns, 0, size_t(layout.counters), stream))
      return err;

  if (args.seqQ > 0) {
    DevicePtr dO = args.gradOut, o = args.out, lse = args.lse,
              gradLse = args.gradLse;
    void *params[] = {&dO, &o, &lse, &gradLse, &acc, &lse2, &delta, &seqQ32};
    Dim3 grid{unsigned(seqPad / 4), unsigned(info.numQHeads),
              unsigned(args.batch)};
    if (llvm::Error err =
            kernels.preprocess.launch(grid, Dim3{128, 1, 1}, 0, stream, params))
      return err;
  }
  if (args.seqK > 0) {
    auto maps = encodeGradTensorMaps(info, args, args.batch);
    if (!maps)
      return maps.takeError();
    if (llvm::Error err =
            kernels.main.setMaxDynamicSharedMemory(info.sharedMemory))
      return err;
    DevicePtr dk = args.gradK, dv = args.gradV;
    void *params[] = {&maps->q, &maps->k, &maps->v, &maps->dO, &lse2,   &delta,
                      &acc,     &dk,      &dv,      &seqQ32,   &seqK32, &turns};
    Dim3 grid{unsigned((args.seqK + info.blockN - 1) / info.blockN),
              unsigned(info.numKVHeads), unsigned(args.batch)};
    // The turn counters are a deterministic kernel's parameter only, the
    // Philox (seed, offset) pointer a dropout kernel's, last.
    llvm::SmallVector<void *, 16> mainParams(
        llvm::ArrayRef<void *>(params).drop_back(info.deterministic ? 0 : 1));
    DevicePtr rng = args.rng;
    if (info.dropout)
      mainParams.push_back(&rng);
    if (llvm::Error err = kernels.main.launch(
            grid, Dim3{unsigned(info.threads), 1, 1},
            unsigned(info.sharedMemory), stream, mainParams))
      return err;
  }
  if (args.seqQ > 0) {
    DevicePtr gradQ = args.gradQ;
    void *params[] = {&acc, &gradQ, &seqQ32};
    return launchGradPost(kernels, info, params, args.seqQ,
                          unsigned(args.batch), stream);
  }
  return llvm::Error::success();
}

/// The launcher of a kernel like `info`'s that is not a varlen backward.
static const char *
launcherOtherThanVarlenGrad(const AttentionKernelInfo &info) {
  if (info.kind != AttentionKernelInfo::Kind::Attention)
    return nullptr;
  if (info.backward)
    return "launchAttentionBackward";
  if (info.varlen)
    return "launchAttentionVarlen";
  if (info.fp8)
    return "launchAttentionForwardFP8";
  return info.numSplits > 1 ? "launchAttentionSplitKV"
                            : "launchAttentionForward";
}

llvm::Error fa3::runtime::launchAttentionVarlenBackward(
    const AttentionGradKernels &kernels, const AttentionKernelInfo &info,
    const AttentionGradDeviceArgs &args, CudaStream stream) {
  if (info.kind != AttentionKernelInfo::Kind::Attention || !info.backward ||
      !info.varlen) {
    const char *launcher = launcherOtherThanVarlenGrad(info);
    return error("kernel " + info.name +
                 " is not an fa3.attention_varlen_grad backward" +
                 (launcher ? std::string(": launch it with ") + launcher
                           : std::string()));
  }
  if (info.kvCache || info.persistent || info.numSplits != 1)
    return error("kernel " + info.name +
                 ": a varlen backward is never a KV cache, persistent or "
                 "split");
  if (!args.cuSeqlensQ || !args.cuSeqlensK)
    return error("kernel " + info.name +
                 " attends to packed sequences: the launch needs "
                 "cu_seqlens_q and cu_seqlens_k");
  if (info.sequsedK && !args.sequsedK)
    return error("kernel " + info.name +
                 " was compiled with seqused_k: the launch needs it");
  if (!info.sequsedK && args.sequsedK)
    return error("kernel " + info.name +
                 " was compiled without seqused_k: it takes none");
  if (args.batch < 0 || args.seqQ < 0 || args.seqK < 0 || args.maxSeqlenQ < 0 ||
      args.maxSeqlenK < 0)
    return error("kernel " + info.name +
                 ": negative batch, token count, max_seqlen_q or "
                 "max_seqlen_k");
  if (args.seqQ > INT32_MAX || args.seqK > INT32_MAX)
    return error(
        "kernel " + info.name + ": total_q = " + llvm::Twine(args.seqQ) +
        " and total_k = " + llvm::Twine(args.seqK) + " must fit in 32 bits");
  // One grid z per sequence, and one more for the rows past the last.
  if (args.batch + 1 > kMaxGridYZ || info.numQHeads > kMaxGridYZ)
    return error("kernel " + info.name +
                 ": batch + 1 = " + llvm::Twine(args.batch + 1) +
                 " (the sequences and the rows past them) and " +
                 llvm::Twine(info.numQHeads) +
                 " query heads must each be at most the grid's " +
                 llvm::Twine(kMaxGridYZ));
  if (args.seqQ == 0 && args.seqK == 0)
    return llvm::Error::success();
  GradWorkspaceLayout layout = gradWorkspaceLayout(info, args.batch, args.seqQ);
  if (!args.workspace)
    return error("kernel " + info.name + ": the launch needs a workspace of " +
                 llvm::Twine(layout.end) +
                 " bytes (attentionGradWorkspaceBytes)");
  if (args.workspace % 256 != 0)
    return error("the backward workspace must be 256-byte aligned");
  if (llvm::Error err =
          checkGradAlignment(info, args.gradQ, args.gradK, args.gradV))
    return err;
  DevicePtr acc = args.workspace, lse2 = args.workspace + layout.lse2,
            delta = args.workspace + layout.delta,
            turns = args.workspace + layout.turns;
  DevicePtr cuSeqlensQ = args.cuSeqlensQ, cuSeqlensK = args.cuSeqlensK,
            sequsedK = args.sequsedK;
  int32_t seqQ32 = int32_t(args.seqQ), seqK32 = int32_t(args.seqK);
  unsigned zBlocks = unsigned(args.batch + 1);

  // (Without sequences, every packed row is past the last: _post zeroes
  // them.)
  if (args.seqQ > 0 && args.batch > 0) {
    // No sequence is longer than the packed rows (the offsets end within
    // them): a larger max_seqlen_q only adds CTAs that exit.
    int64_t maxSeqlenQ = std::min(args.maxSeqlenQ, args.seqQ);
    DevicePtr dO = args.gradOut, o = args.out, lse = args.lse,
              gradLse = args.gradLse;
    void *params[] = {&dO,   &o,     &lse,    &gradLse,   &acc,
                      &lse2, &delta, &seqQ32, &cuSeqlensQ};
    Dim3 grid{unsigned(std::max<int64_t>(1, paddedSeqQ(info, maxSeqlenQ) / 4)),
              unsigned(info.numQHeads), unsigned(args.batch)};
    if (llvm::Error err =
            kernels.preprocess.launch(grid, Dim3{128, 1, 1}, 0, stream, params))
      return err;
  }
  if (args.seqK > 0) {
    if (layout.counters)
      if (llvm::Error err =
              memsetAsync32(turns, 0, size_t(layout.counters), stream))
        return err;
    // The packed tensors are the dense backward's [B, S, H, D] with B = 1:
    // one sequence of T rows, whose boxes the kernel places at its offsets.
    auto maps = encodeGradTensorMaps(info, args, /*batch=*/1);
    if (!maps)
      return maps.takeError();
    if (llvm::Error err =
            kernels.main.setMaxDynamicSharedMemory(info.sharedMemory))
      return err;
    DevicePtr dk = args.gradK, dv = args.gradV;
    // After the dense backward's eleven (up to Tk): the offsets, then
    // seqused_k and the turn counters when the kernel takes them.
    llvm::SmallVector<void *, 16> params = {
        &maps->q, &maps->k, &maps->v, &maps->dO, &lse2,       &delta,     &acc,
        &dk,      &dv,      &seqQ32,  &seqK32,   &cuSeqlensQ, &cuSeqlensK};
    if (info.sequsedK)
      params.push_back(&sequsedK);
    if (info.deterministic)
      params.push_back(&turns);
    int64_t maxSeqlenK = std::min(args.maxSeqlenK, args.seqK);
    int64_t keyBlocks = (maxSeqlenK + info.blockN - 1) / info.blockN;
    Dim3 grid{unsigned(std::max<int64_t>(1, keyBlocks)),
              unsigned(info.numKVHeads), zBlocks};
    if (llvm::Error err =
            kernels.main.launch(grid, Dim3{unsigned(info.threads), 1, 1},
                                unsigned(info.sharedMemory), stream, params))
      return err;
  }
  if (args.seqQ > 0) {
    DevicePtr gradQ = args.gradQ;
    void *params[] = {&acc, &gradQ, &seqQ32, &cuSeqlensQ};
    return launchGradPost(kernels, info, params,
                          std::min(args.maxSeqlenQ, args.seqQ), zBlocks,
                          stream);
  }
  return llvm::Error::success();
}
