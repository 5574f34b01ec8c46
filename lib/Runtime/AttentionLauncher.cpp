//===- AttentionLauncher.cpp - Launch fa3's Hopper attention kernels --------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/AttentionLauncher.h"

#include "TensorMaps.h"

#include "fa3/Dialect/FA3/Utils/ValueTransposeLayout.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <numeric>
#include <optional>

using namespace fa3::runtime;

static llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument,
                                 message.str().c_str());
}

std::map<std::string, std::string> AttentionKernelInfo::toManifest() const {
  if (kind != Kind::Attention)
    return {{"kernel", name},
            {"direction", kind == Kind::Hadamard ? "hadamard" : "quantize"},
            {"dtype", elementTypeName(inputType).str()},
            {"out_dtype", elementTypeName(outputType).str()},
            {"hadamard", hadamard ? "1" : "0"},
            {"head_dim", std::to_string(headDim)},
            {"q_heads", std::to_string(numQHeads)},
            {"kv_heads", std::to_string(numKVHeads)},
            {"block_m", std::to_string(blockM)},
            {"block_n", std::to_string(blockN)},
            {"threads", std::to_string(threads)},
            {"shared_memory", std::to_string(sharedMemory)}};
  return {{"kernel", name},
          {"direction", backward ? "bwd" : "fwd"},
          {"dtype", fp8    ? "e4m3"
                    : bf16 ? "bf16"
                           : "f16"},
          {"head_dim", std::to_string(headDim)},
          {"q_heads", std::to_string(numQHeads)},
          {"kv_heads", std::to_string(numKVHeads)},
          {"block_m", std::to_string(blockM)},
          {"block_n", std::to_string(blockN)},
          {"threads", std::to_string(threads)},
          {"shared_memory", std::to_string(sharedMemory)},
          {"persistent", persistent ? "1" : "0"},
          {"packed_heads", std::to_string(packedHeads)},
          {"kvcache", kvCache ? "1" : "0"},
          {"paged", paged ? "1" : "0"},
          {"num_splits", std::to_string(numSplits)},
          {"varlen", varlen ? "1" : "0"},
          {"seqused", sequsedK ? "1" : "0"},
          {"deterministic", deterministic ? "1" : "0"},
          {"dropout", dropout ? "1" : "0"}};
}

/// Why a varlen kernel like `info` cannot be launched, or None: its launch
/// (launchAttentionVarlen, launchAttentionVarlenBackward) has no persistent
/// tile loop and no split-KV merge, and its operands are not a KV cache.
static std::optional<std::string>
unlaunchableVarlen(const AttentionKernelInfo &info) {
  if (!info.varlen)
    return info.sequsedK ? std::optional<std::string>(
                               "seqused = 1 needs varlen = 1 (only a "
                               "varlen kernel takes seqused_k)")
                         : std::nullopt;
  if (info.kvCache)
    return std::string("varlen = 1 and kvcache = 1 exclude each other");
  if (info.persistent || info.numSplits != 1)
    return "a varlen kernel is never persistent or split, got "
           "persistent = " +
           std::to_string(info.persistent) +
           ", num_splits = " + std::to_string(info.numSplits);
  return std::nullopt;
}

llvm::Expected<AttentionKernelInfo> AttentionKernelInfo::fromManifest(
    const std::map<std::string, std::string> &manifest) {
  AttentionKernelInfo info;
  auto get = [&](const char *key) -> llvm::Expected<std::string> {
    auto it = manifest.find(key);
    if (it == manifest.end())
      return error(llvm::Twine("kernel manifest lacks '") + key + "'");
    return it->second;
  };
  auto getInt = [&](const char *key, int64_t &out) -> llvm::Error {
    auto s = get(key);
    if (!s)
      return s.takeError();
    if (llvm::StringRef(*s).getAsInteger(10, out))
      return error(llvm::Twine("kernel manifest: '") + key +
                   "' is not an integer: " + *s);
    return llvm::Error::success();
  };
  auto name = get("kernel");
  if (!name)
    return name.takeError();
  info.name = *name;
  auto direction = get("direction");
  if (!direction)
    return direction.takeError();
  if (*direction != "fwd" && *direction != "bwd" &&
      *direction != "hadamard" && *direction != "quantize")
    return error("kernel manifest: unknown direction '" + *direction + "'");
  info.backward = *direction == "bwd";
  auto dtype = get("dtype");
  if (!dtype)
    return dtype.takeError();
  if (*direction == "hadamard" || *direction == "quantize") {
    info.kind = *direction == "hadamard" ? Kind::Hadamard : Kind::Quantize;
    auto outDtype = get("out_dtype");
    if (!outDtype)
      return outDtype.takeError();
    auto in = parseElementType(*dtype), out = parseElementType(*outDtype);
    if (!in || !out)
      return error("kernel manifest: unknown element type '" + *dtype +
                   "' or '" + *outDtype + "'");
    info.inputType = *in;
    info.outputType = *out;
    auto hadamard = get("hadamard");
    if (!hadamard)
      return hadamard.takeError();
    info.hadamard = *hadamard == "1";
  } else {
    auto persistent = get("persistent");
    if (!persistent)
      return persistent.takeError();
    info.persistent = *persistent == "1";
  }
  info.fp8 = *dtype == "e4m3";
  info.bf16 = *dtype == "bf16" || info.fp8;
  for (auto [key, field] :
       {std::pair<const char *, int64_t *>{"head_dim", &info.headDim},
        {"q_heads", &info.numQHeads},
        {"kv_heads", &info.numKVHeads},
        {"block_m", &info.blockM},
        {"block_n", &info.blockN},
        {"threads", &info.threads},
        {"shared_memory", &info.sharedMemory}})
    if (llvm::Error err = getInt(key, *field))
      return std::move(err);
  if (info.kind == Kind::Attention) {
    auto deterministic = get("deterministic");
    if (!deterministic)
      return deterministic.takeError();
    info.deterministic = *deterministic == "1";
    // Absent in manifests written before dropout existed: no dropout.
    auto dropout = manifest.find("dropout");
    info.dropout = dropout != manifest.end() && dropout->second == "1";
  }
  if (info.kind == Kind::Attention && !info.backward) {
    if (llvm::Error err = getInt("packed_heads", info.packedHeads))
      return std::move(err);
    auto kvCache = get("kvcache");
    if (!kvCache)
      return kvCache.takeError();
    info.kvCache = *kvCache == "1";
    auto paged = get("paged");
    if (!paged)
      return paged.takeError();
    info.paged = *paged == "1";
    if (info.paged && !info.kvCache)
      return error("kernel manifest: paged = 1 needs kvcache = 1 (a paged "
                   "kernel attends to a KV cache)");
    // Absent in the manifests of kernels from before split-KV: one split.
    if (manifest.count("num_splits"))
      if (llvm::Error err = getInt("num_splits", info.numSplits))
        return std::move(err);
    if (info.numSplits < 1)
      return error("kernel manifest: num_splits = " +
                   llvm::Twine(info.numSplits) + " must be at least 1");
    if (info.numSplits > 1 && (!info.kvCache || info.persistent))
      return error(
          "kernel manifest: num_splits = " + llvm::Twine(info.numSplits) +
          " needs kvcache = 1 and persistent = 0 (split-KV splits "
          "a KV cache's keys over a non-persistent grid)");
    if (info.packedHeads < 1 || info.numQHeads % info.packedHeads != 0 ||
        info.blockM % info.packedHeads != 0)
      return error(
          "kernel manifest: packed_heads = " + llvm::Twine(info.packedHeads) +
          " must divide q_heads and block_m");
  }
  if (info.kind == Kind::Attention) {
    // Forward or backward. Absent in the manifests of kernels from before
    // varlen: dense.
    for (auto [key, field] :
         {std::pair<const char *, bool *>{"varlen", &info.varlen},
          {"seqused", &info.sequsedK}})
      if (manifest.count(key))
        *field = manifest.at(key) == "1";
    if (auto why = unlaunchableVarlen(info))
      return error("kernel manifest: " + *why);
  }
  return info;
}

/// The rows of one consumer warpgroup: the box of the forward kernel's TMA
/// store of O.
static constexpr int64_t kOutputStoreRows = 64;

namespace {
/// Where a split-KV kernel writes its partial attentions: f32 O [N·B, Sq,
/// Hq, D] and LSE [N·B, Hq, Sq] in the launch's workspace.
struct SplitPartials {
  DevicePtr out = 0, lse = 0;
};
/// What an FP8 forward reads besides the dense forward's operands: V' [B,
/// Hkv, D, paddedKeys] (the layout kernel's output, keys innermost) in V's
/// place, and the q/k/v descales.
struct FP8Operands {
  DevicePtr valueTransposed = 0;
  int64_t paddedKeys = 0;
};
} // namespace

/// Bytes of a split-KV kernel's partial O, which its partial LSE follows.
static int64_t splitPartialOutBytes(const AttentionKernelInfo &info,
                                    int64_t batch, int64_t seqQ) {
  return alignUp(
      info.numSplits * batch * seqQ * info.numQHeads * info.headDim * 4, 256);
}

/// The cache lengths and page table a forward launch takes, as `info` wants
/// them.
static llvm::Error checkForwardOperands(const AttentionKernelInfo &info,
                                        const AttentionDeviceArgs &args) {
  if (info.kvCache && !args.cacheSeqlens)
    return error("kernel " + info.name +
                 " attends to a KV cache: the launch needs cache_seqlens");
  if (!info.kvCache && args.cacheSeqlens)
    return error("kernel " + info.name +
                 " is not a KV cache kernel: it takes no cache_seqlens");
  if (info.paged && !args.pageTable)
    return error("kernel " + info.name +
                 " reads a paged KV cache: the launch needs a page table");
  if (!info.paged && args.pageTable)
    return error("kernel " + info.name +
                 " is not a paged KV cache kernel: it takes no page table");
  if (!info.varlen && (args.cuSeqlensQ || args.cuSeqlensK || args.sequsedK))
    return error("kernel " + info.name +
                 " is not a varlen kernel: it takes no sequence offsets "
                 "(cu_seqlens_q/k, seqused_k)");
  if (info.varlen && (!args.cuSeqlensQ || !args.cuSeqlensK))
    return error("kernel " + info.name +
                 " attends to packed sequences: the launch needs "
                 "cu_seqlens_q and cu_seqlens_k");
  if (info.sequsedK && !args.sequsedK)
    return error("kernel " + info.name +
                 " was compiled with seqused_k: the launch needs it");
  if (info.varlen && !info.sequsedK && args.sequsedK)
    return error("kernel " + info.name +
                 " was compiled without seqused_k: it takes none");
  return llvm::Error::success();
}

/// The TMA descriptor of an FP8 forward's V' [B, Hkv, D, paddedKeys]: boxes
/// of one atom of keys by all D rows (fa3.tma_load_tile {transposed}).
/// Without keys it points at Q, which exists and is never read through it.
static llvm::Expected<TensorMap>
valueTransposedTensorMap(const AttentionKernelInfo &info,
                         const AttentionDeviceArgs &args,
                         const FP8Operands &fp8) {
  TiledTensorMapDesc desc;
  desc.dataType = TensorMapDataType::UInt8;
  desc.globalAddress = args.seqK ? fp8.valueTransposed : args.q;
  uint64_t pad = uint64_t(std::max<int64_t>(fp8.paddedKeys, 128));
  desc.globalDims = {pad, uint64_t(info.headDim), uint64_t(info.numKVHeads),
                     uint64_t(args.batch)};
  desc.globalStrides = {pad, pad * info.headDim,
                        pad * info.headDim * info.numKVHeads};
  int64_t atom = mlir::fa3::valueTransposeAtomKeys(info.blockN);
  desc.boxDims = {uint32_t(atom), uint32_t(info.headDim), 1, 1};
  desc.swizzle =
      atom == 128 ? TensorMapSwizzle::Bytes128 : TensorMapSwizzle::Bytes64;
  desc.l2Promotion = TensorMapL2Promotion::Bytes128;
  desc.oobFill = TensorMapOOBFill::None;
  return encodeTiledTensorMap(desc, "V'");
}

/// Encodes the TMA descriptors and launches the attention kernel. With
/// `partials` (split-KV), parameter 3 is the partial O's address instead of
/// O's descriptor, the LSE parameter the partial LSE's, and the grid has
/// B·N batches.
static llvm::Error launchForwardTiles(const CudaKernel &kernel,
                                      const AttentionKernelInfo &info,
                                      const AttentionDeviceArgs &args,
                                      CudaStream stream,
                                      const SplitPartials *partials,
                                      const FP8Operands *fp8 = nullptr) {
  if (args.batch == 0 || args.seqQ == 0)
    return llvm::Error::success();
  // A paged kernel addresses up to pageTableWidth * pageSize keys.
  int64_t keys = args.seqK;
  if (info.paged) {
    if (args.pageSize < 1)
      return error("kernel " + info.name + ": page_size = " +
                   llvm::Twine(args.pageSize) + " must be at least 1");
    if (args.pageTableWidth < 1)
      return error("kernel " + info.name +
                   ": the page table's width (max_pages) = " +
                   llvm::Twine(args.pageTableWidth) + " must be at least 1");
    if (args.numPages < 1)
      return error("kernel " + info.name + ": num_pages = " +
                   llvm::Twine(args.numPages) + " must be at least 1");
    if (args.pageSize > INT32_MAX / args.pageTableWidth)
      return error("kernel " + info.name +
                   ": page_size * max_pages = " + llvm::Twine(args.pageSize) +
                   " * " + llvm::Twine(args.pageTableWidth) +
                   " keys must fit in 32 bits");
    keys = args.pageSize * args.pageTableWidth;
  }
  if (args.seqQ > INT32_MAX || keys > INT32_MAX)
    return error("sequence lengths must fit in 32 bits");
  // A zero-length K/V has nothing to load; point its descriptor at Q, which
  // exists and is never read through it.
  DevicePtr k = keys ? args.k : args.q, v = keys ? args.v : args.q;
  int64_t kvBatch = args.batch, kvSeq = keys ? keys : args.seqQ;
  int64_t kvHeads = keys ? info.numKVHeads : info.numQHeads;
  int64_t kvRows = info.blockN, chunkRows = 0;
  // A paged cache is described as it is, [numPages, pageSize, Hkv, D]; the
  // kernel loads a tile of blockN keys as blockN / chunkRows boxes of
  // chunkRows rows, which divide the page size: no box crosses a page.
  if (info.paged) {
    kvBatch = args.numPages;
    kvSeq = args.pageSize;
    chunkRows = std::gcd(args.pageSize, info.blockN);
    kvRows = chunkRows;
  }
  // PackGQA: Q and O as [B, S, Hkv, G, D], tiles of G heads.
  int64_t group = info.packedHeads;
  bool e4m3 = fp8 != nullptr;
  auto mapQ =
      bshdTensorMap(args.q, info.bf16, args.batch, args.seqQ, info.numQHeads,
                    info.headDim, info.blockM, "Q", e4m3, group);
  if (!mapQ)
    return mapQ.takeError();
  auto mapK = bshdTensorMap(k, info.bf16, kvBatch, kvSeq, kvHeads, info.headDim,
                            kvRows, "K", e4m3);
  if (!mapK)
    return mapK.takeError();
  auto mapV = e4m3 ? valueTransposedTensorMap(info, args, *fp8)
                   : bshdTensorMap(v, info.bf16, kvBatch, kvSeq, kvHeads,
                                   info.headDim, kvRows, "V");
  if (!mapV)
    return mapV.takeError();
  // O is stored by TMA in boxes of one consumer warpgroup's 64 rows; a
  // split-KV kernel stores its f32 partial O through a plain pointer.
  std::optional<TensorMap> mapO;
  if (!partials) {
    auto map = bshdTensorMap(args.out, info.bf16, args.batch, args.seqQ,
                             info.numQHeads, info.headDim, kOutputStoreRows,
                             "O", /*fp8=*/false, group);
    if (!map)
      return map.takeError();
    mapO = *map;
  }
  if (llvm::Error err = kernel.setMaxDynamicSharedMemory(info.sharedMemory))
    return err;

  DevicePtr lse = partials ? partials->lse : args.lse, tileCounter = 0,
            lengths = args.cacheSeqlens;
  DevicePtr partialOut = partials ? partials->out : 0;
  void *outParam =
      partials ? static_cast<void *>(&partialOut) : static_cast<void *>(&*mapO);
  int32_t seqQ32 = int32_t(args.seqQ), seqK32 = int32_t(keys);
  int32_t batch32 = int32_t(args.batch);
  DevicePtr pageTable = args.pageTable;
  int32_t tableWidth32 = int32_t(args.pageTableWidth),
          pageSize32 = int32_t(args.pageSize), chunkRows32 = int32_t(chunkRows);
  void *params[] = {&*mapQ,       &*mapK,      &*mapV,     outParam,
                    &lse,         &seqQ32,     &seqK32,    &batch32,
                    &tileCounter, &lengths,    &pageTable, &tableWidth32,
                    &pageSize32,  &chunkRows32};
  int64_t queriesPerTile = info.blockM / group;
  int64_t queryTiles = (args.seqQ + queriesPerTile - 1) / queriesPerTile;
  int64_t tileHeads = info.numQHeads / group;
  // Split s of batch b is grid batch s·B + b.
  int64_t gridBatches = args.batch * (partials ? info.numSplits : 1);
  Dim3 grid{unsigned(queryTiles), unsigned(tileHeads), unsigned(gridBatches)};
  if (info.persistent) {
    if (args.multiprocessors <= 0)
      return error("kernel " + info.name +
                   " is persistent: launchAttentionForward needs the "
                   "device's multiprocessor count");
    int64_t tiles = queryTiles * tileHeads * args.batch;
    if (tiles > INT32_MAX)
      return error("kernel " + info.name + ": " + llvm::Twine(tiles) +
                   " tiles do not fit the persistent kernel's 32-bit tile "
                   "index");
    grid = Dim3{unsigned(std::min(tiles, args.multiprocessors)), 1, 1};
    // The CTAs take tiles from a counter that must read 0 at the start.
    auto counter = zeroedCounter(stream);
    if (!counter)
      return counter.takeError();
    tileCounter = *counter;
  }
  Dim3 block{unsigned(info.threads), 1, 1};
  // A KV cache kernel takes cache_seqlens after the dense forward's nine
  // parameters; a paged one the page table's four after that; a dropout
  // kernel (dense) the Philox (seed, offset) pointer.
  size_t numParams = info.paged ? 14 : info.kvCache ? 10 : 9;
  llvm::SmallVector<void *, 16> launchParams(params, params + numParams);
  // An FP8 kernel takes its q, k and v descales after those nine.
  DevicePtr descales[3] = {args.qDescale, args.kDescale, args.vDescale};
  if (e4m3)
    for (DevicePtr &descale : descales)
      launchParams.push_back(&descale);
  DevicePtr rng = args.rng;
  if (info.dropout)
    launchParams.push_back(&rng);
  return kernel.launch(grid, block, unsigned(info.sharedMemory), stream,
                       launchParams);
}

llvm::Error fa3::runtime::launchAttentionForward(
    const CudaKernel &kernel, const AttentionKernelInfo &info,
    const AttentionDeviceArgs &args, CudaStream stream) {
  if (info.backward)
    return error("kernel " + info.name +
                 " is a backward kernel, not a forward");
  if (info.fp8)
    return error("kernel " + info.name +
                 " is an FP8 kernel: launch it with launchAttentionForwardFP8");
  if (info.numSplits > 1)
    return error(
        "kernel " + info.name +
        " is a split-KV kernel (num_splits = " + llvm::Twine(info.numSplits) +
        "): launch it with launchAttentionSplitKV");
  if (info.varlen)
    return error("kernel " + info.name +
                 " is an fa3.attention_varlen forward: launch it with "
                 "launchAttentionVarlen");
  if (llvm::Error err = checkForwardOperands(info, args))
    return err;
  if (info.dropout && !args.rng)
    return error("kernel " + info.name +
                 " has dropout: its launch needs the Philox (seed, offset) "
                 "pointer (rng, i64 [2] on the device)");
  return launchForwardTiles(kernel, info, args, stream, /*partials=*/nullptr);
}

llvm::Error fa3::runtime::launchAttentionSplitKV(
    const CudaKernel &kernel, const CudaKernel &combine,
    const AttentionKernelInfo &info, const AttentionDeviceArgs &args,
    CudaStream stream) {
  if (info.backward || info.fp8 || !info.kvCache)
    return error("kernel " + info.name +
                 " is not an fa3.attention_kvcache forward: only those "
                 "split the keys");
  if (info.numSplits < 2)
    return error("kernel " + info.name +
                 " is not a split-KV kernel (num_splits = " +
                 llvm::Twine(info.numSplits) +
                 "): launch it with launchAttentionForward");
  if (info.persistent)
    return error("kernel " + info.name +
                 " (num_splits = " + llvm::Twine(info.numSplits) +
                 ") is persistent: a split-KV kernel's grid never is");
  if (llvm::Error err = checkForwardOperands(info, args))
    return err;
  if (args.batch == 0 || args.seqQ == 0)
    return llvm::Error::success();
  if (args.batch < 0 || args.seqQ < 0)
    return error("kernel " + info.name + ": negative batch or query length");
  if (!args.workspace)
    return error("kernel " + info.name + " splits the keys " +
                 llvm::Twine(info.numSplits) +
                 " ways: the launch needs a workspace of " +
                 llvm::Twine(attentionForwardWorkspaceBytes(
                     info, args.batch, args.seqQ, args.seqK)) +
                 " bytes for the partial attentions "
                 "(attentionForwardWorkspaceBytes)");
  if (args.workspace % 256 != 0)
    return error("the split-KV workspace must be 256-byte aligned");
  if (args.batch * info.numSplits > kMaxGridYZ)
    return error("kernel " + info.name + ": batch * num_splits = " +
                 llvm::Twine(args.batch) + " * " + llvm::Twine(info.numSplits) +
                 " exceeds the grid's " + llvm::Twine(kMaxGridYZ) + " batches");
  SplitPartials partials;
  partials.out = args.workspace;
  partials.lse =
      args.workspace + splitPartialOutBytes(info, args.batch, args.seqQ);
  if (llvm::Error err =
          launchForwardTiles(kernel, info, args, stream, &partials))
    return err;
  // One warp merges the N splits of one (query, head) row; 4 rows per CTA.
  DevicePtr partialOut = partials.out, partialLse = partials.lse,
            out = args.out, lse = args.lse;
  int32_t seqQ32 = int32_t(args.seqQ), batch32 = int32_t(args.batch);
  void *params[] = {&partialOut, &partialLse, &out, &lse, &seqQ32, &batch32};
  int64_t rows = args.seqQ * info.numQHeads;
  Dim3 grid{unsigned((rows + 3) / 4), unsigned(args.batch), 1};
  return combine.launch(grid, Dim3{128, 1, 1}, 0, stream, params);
}

llvm::Error fa3::runtime::launchAttentionVarlen(const CudaKernel &kernel,
                                                const AttentionKernelInfo &info,
                                                const AttentionDeviceArgs &args,
                                                CudaStream stream) {
  if (info.kind != AttentionKernelInfo::Kind::Attention || info.backward ||
      info.fp8 || !info.varlen) {
    const char *launcher =
        info.kind != AttentionKernelInfo::Kind::Attention ? nullptr
        : info.backward      ? (info.varlen ? "launchAttentionVarlenBackward"
                                            : "launchAttentionBackward")
        : info.fp8           ? "launchAttentionForwardFP8"
        : info.numSplits > 1 ? "launchAttentionSplitKV"
                             : "launchAttentionForward";
    return error("kernel " + info.name +
                 " is not an fa3.attention_varlen forward" +
                 (launcher ? std::string(": launch it with ") + launcher
                           : std::string()));
  }
  if (auto why = unlaunchableVarlen(info))
    return error("kernel " + info.name + ": " + *why);
  if (llvm::Error err = checkForwardOperands(info, args))
    return err;
  if (args.batch < 0 || args.seqQ < 0 || args.seqK < 0 || args.maxSeqlenQ < 0)
    return error("kernel " + info.name +
                 ": negative batch, token count or max_seqlen_q");
  if (args.seqQ > INT32_MAX || args.seqK > INT32_MAX)
    return error(
        "kernel " + info.name + ": total_q = " + llvm::Twine(args.seqQ) +
        " and total_k = " + llvm::Twine(args.seqK) + " must fit in 32 bits");
  if (args.batch > kMaxGridYZ || info.numQHeads > kMaxGridYZ)
    return error("kernel " + info.name +
                 ": batch = " + llvm::Twine(args.batch) + " sequences and " +
                 llvm::Twine(info.numQHeads) +
                 " query heads must each be at most the grid's " +
                 llvm::Twine(kMaxGridYZ));
  if (args.seqQ == 0)
    return llvm::Error::success();
  // No sequence is longer than the packed rows (the offsets end within
  // them), so a larger max_seqlen_q only adds CTAs that exit at once.
  int64_t maxSeqlenQ = std::min(args.maxSeqlenQ, args.seqQ);
  // PackGQA: a tile holds blockM / G queries of the G query heads of one
  // key/value head; the grid's y runs over the key/value heads.
  int64_t group = info.packedHeads;
  int64_t queriesPerTile = info.blockM / group;
  int64_t queryTiles = (maxSeqlenQ + queriesPerTile - 1) / queriesPerTile;
  bool launch = args.batch > 0 && queryTiles > 0;
  // K and V of no rows are never read; their descriptors point at Q (as in
  // launchForwardTiles).
  bool noKeys = args.seqK == 0;
  DevicePtr k = noKeys ? args.q : args.k, v = noKeys ? args.q : args.v;
  int64_t kvSeq = noKeys ? args.seqQ : args.seqK;
  int64_t kvHeads = noKeys ? info.numQHeads : info.numKVHeads;
  // The packed tensors are the dense forward's [B, S, H, D] with B = 1:
  // one sequence of T rows, whose boxes the kernel places at its offsets.
  std::optional<TensorMap> mapQ, mapK, mapV, mapO;
  if (launch) {
    // Q and O packed as [1, T, Hkv, G, D] with PackGQA.
    for (auto [map, base, seq, heads, rows, what, viewGroup] :
         {std::tuple<std::optional<TensorMap> *, DevicePtr, int64_t, int64_t,
                     int64_t, const char *, int64_t>{&mapQ, args.q, args.seqQ,
                                                     info.numQHeads,
                                                     info.blockM, "Q", group},
          {&mapK, k, kvSeq, kvHeads, info.blockN, "K", 1},
          {&mapV, v, kvSeq, kvHeads, info.blockN, "V", 1},
          {&mapO, args.out, args.seqQ, info.numQHeads, kOutputStoreRows, "O",
           group}}) {
      auto encoded =
          bshdTensorMap(base, info.bf16, /*batch=*/1, seq, heads, info.headDim,
                        rows, what, /*fp8=*/false, viewGroup);
      if (!encoded)
        return encoded.takeError();
      *map = *encoded;
    }
  }
  // The kernel writes the rows inside a sequence; the rows past
  // cu_seqlens_q[B] are defined as O = 0, LSE = -inf. Filling the whole
  // tensors in stream order is one pass over O, cheaper than finding the
  // tail (its offset is on the device). O's Tq·Hq·D 16-bit elements are whole
  // 32-bit words: Hopper head dims are multiples of 64.
  int64_t outWords = args.seqQ * info.numQHeads * info.headDim / 2;
  if (llvm::Error err = memsetAsync32(args.out, 0, size_t(outWords), stream))
    return err;
  constexpr uint32_t kNegativeInfinity = 0xFF800000u; // f32 -inf
  if (llvm::Error err =
          memsetAsync32(args.lse, kNegativeInfinity,
                        size_t(info.numQHeads * args.seqQ), stream))
    return err;
  if (!launch)
    return llvm::Error::success();
  if (llvm::Error err = kernel.setMaxDynamicSharedMemory(info.sharedMemory))
    return err;
  // After the dense forward's nine: the offsets, O as a plain pointer (the
  // warpgroup whose rows cross its sequence's end copies the rows inside
  // with 16-byte stores, where a TMA box would write the next sequence's),
  // then seqused_k.
  DevicePtr lse = args.lse, tileCounter = 0, cuSeqlensQ = args.cuSeqlensQ,
            cuSeqlensK = args.cuSeqlensK, out = args.out,
            sequsedK = args.sequsedK;
  int32_t seqQ32 = int32_t(args.seqQ), seqK32 = int32_t(args.seqK),
          batch32 = int32_t(args.batch);
  void *params[] = {&*mapQ,      &*mapK,  &*mapV,   &*mapO,       &lse,
                    &seqQ32,     &seqK32, &batch32, &tileCounter, &cuSeqlensQ,
                    &cuSeqlensK, &out,    &sequsedK};
  Dim3 grid{unsigned(queryTiles), unsigned(info.numQHeads / group),
            unsigned(args.batch)};
  // seqused_k is the last parameter of a kernel compiled with it only.
  return kernel.launch(
      grid, Dim3{unsigned(info.threads), 1, 1}, unsigned(info.sharedMemory),
      stream, llvm::ArrayRef<void *>(params).drop_back(info.sequsedK ? 0 : 1));
}

static int64_t paddedSeqK(const AttentionKernelInfo &info, int64_t seqK) {
  return mlir::fa3::valueTransposePaddedKeys(info.blockN, seqK);
}

int64_t
fa3::runtime::attentionForwardWorkspaceBytes(const AttentionKernelInfo &info,
                                             int64_t batch, int64_t seqQ,
                                             int64_t seqK) {
  if (info.backward)
    return 0;
  if (info.numSplits > 1)
    return splitPartialOutBytes(info, batch, seqQ) +
           info.numSplits * batch * info.numQHeads * seqQ * 4;
  if (!info.fp8)
    return 0;
  return batch * info.numKVHeads * info.headDim * paddedSeqK(info, seqK);
}

std::string
fa3::runtime::attentionCombineKernelName(const AttentionKernelInfo &info) {
  return info.name + "_combine";
}

llvm::Error fa3::runtime::launchAttentionForwardFP8(
    const CudaKernel &valueTranspose, const CudaKernel &kernel,
    const AttentionKernelInfo &info, const AttentionDeviceArgs &args,
    CudaStream stream) {
  if (!info.fp8 || info.backward)
    return error("kernel " + info.name + " is not an FP8 forward kernel");
  if (args.batch == 0 || args.seqQ == 0)
    return llvm::Error::success();
  if (args.seqQ > INT32_MAX || args.seqK > INT32_MAX)
    return error("sequence lengths must fit in 32 bits");
  if (!args.qDescale || !args.kDescale || !args.vDescale)
    return error("FP8 attention needs q, k and v descale buffers");
  if (args.workspace % 256 != 0)
    return error("the FP8 workspace must be 256-byte aligned");
  if (args.v % 16 != 0)
    return error("kernel " + info.name +
                 ": V must be 16-byte aligned (the V' layout kernel reads "
                 "16-byte pieces of its rows)");
  int32_t seqK32 = int32_t(args.seqK);
  int64_t seqPad = paddedSeqK(info, args.seqK);
  int32_t seqPad32 = int32_t(seqPad);
  DevicePtr v = args.v, vt = args.workspace;
  if (args.seqK > 0) {
    // 128 key slots per CTA through a shared-memory tile of 128 rows.
    void *params[] = {&v, &vt, &seqK32, &seqPad32};
    Dim3 grid{unsigned(seqPad / 128), unsigned(info.numKVHeads),
              unsigned(args.batch)};
    if (llvm::Error err = valueTranspose.launch(
            grid, Dim3{256, 1, 1},
            unsigned(128 * mlir::fa3::valueTransposeRowBytes(info.headDim)),
            stream, params))
      return err;
  }
  FP8Operands fp8{vt, seqPad};
  return launchForwardTiles(kernel, info, args, stream, /*partials=*/nullptr,
                            &fp8);
}
