//===- AttentionGradLauncher.cpp - Launch fa3's Hopper backward kernels ---===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/AttentionLauncher.h"

#include "TensorMaps.h"

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

/// Query rows padded to whole backward steps, so that the per-step LSE and
/// Δ rows are 16-byte aligned bulk copies.
static int64_t paddedSeqQ(const AttentionKernelInfo &info, int64_t seqQ) {
  return (seqQ + info.blockM - 1) / info.blockM * info.blockM;
}

/// A deterministic backward's dQ turn counters: one per (batch, query head,
/// query block), after Δ in the workspace.
static int64_t gradTurnCounters(const AttentionKernelInfo &info, int64_t batch,
                                int64_t seqQ) {
  if (!info.deterministic)
    return 0;
  return batch * info.numQHeads * (paddedSeqQ(info, seqQ) / info.blockM);
}

int64_t
fa3::runtime::attentionGradWorkspaceBytes(const AttentionKernelInfo &info,
                                          int64_t batch, int64_t seqQ,
                                          int64_t seqK) {
  (void)seqK;
  int64_t acc = alignUp(batch * seqQ * info.numQHeads * info.headDim * 4, 256);
  int64_t rows = batch * info.numQHeads * paddedSeqQ(info, seqQ) * 4;
  return acc + 2 * rows + gradTurnCounters(info, batch, seqQ) * 4;
}

llvm::Error fa3::runtime::launchAttentionBackward(
    const AttentionGradKernels &kernels, const AttentionKernelInfo &info,
    const AttentionGradDeviceArgs &args, CudaStream stream) {
  if (!info.backward)
    return error("kernel " + info.name + " is not a backward kernel");
  if (args.batch == 0)
    return llvm::Error::success();
  if (args.seqQ > INT32_MAX || args.seqK > INT32_MAX)
    return error("sequence lengths must fit in 32 bits");
  if (args.workspace % 256 != 0)
    return error("the backward workspace must be 256-byte aligned");
  int64_t seqPad = paddedSeqQ(info, args.seqQ);
  DevicePtr acc = args.workspace;
  DevicePtr lse2 =
      acc +
      alignUp(args.batch * args.seqQ * info.numQHeads * info.headDim * 4, 256);
  DevicePtr delta = lse2 + args.batch * info.numQHeads * seqPad * 4;
  DevicePtr turns = delta + args.batch * info.numQHeads * seqPad * 4;
  int32_t seqQ32 = int32_t(args.seqQ), seqK32 = int32_t(args.seqK);
  if (int64_t counters = gradTurnCounters(info, args.batch, args.seqQ))
    if (llvm::Error err = memsetAsync32(turns, 0, size_t(counters), stream))
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
    // As in the forward, a zero-length Q has nothing to load: its
    // descriptors point at K and are never read.
    bool noRows = args.seqQ == 0;
    int64_t seqQ = noRows ? args.seqK : args.seqQ;
    int64_t qHeads = noRows ? info.numKVHeads : info.numQHeads;
    DevicePtr q = noRows ? args.k : args.q, dO = noRows ? args.k : args.gradOut;
    auto mapQ = bshdTensorMap(q, info.bf16, args.batch, seqQ, qHeads,
                              info.headDim, info.blockM, "Q");
    if (!mapQ)
      return mapQ.takeError();
    auto mapK = bshdTensorMap(args.k, info.bf16, args.batch, args.seqK,
                              info.numKVHeads, info.headDim, info.blockN, "K");
    if (!mapK)
      return mapK.takeError();
    auto mapV = bshdTensorMap(args.v, info.bf16, args.batch, args.seqK,
                              info.numKVHeads, info.headDim, info.blockN, "V");
    if (!mapV)
      return mapV.takeError();
    auto mapDO = bshdTensorMap(dO, info.bf16, args.batch, seqQ, qHeads,
                               info.headDim, info.blockM, "dO");
    if (!mapDO)
      return mapDO.takeError();
    if (llvm::Error err =
            kernels.main.setMaxDynamicSharedMemory(info.sharedMemory))
      return err;
    DevicePtr dk = args.gradK, dv = args.gradV;
    void *params[] = {&*mapQ, &*mapK, &*mapV, &*mapDO, &lse2,   &delta,
                      &acc,   &dk,    &dv,    &seqQ32, &seqK32, &turns};
    Dim3 grid{unsigned((args.seqK + info.blockN - 1) / info.blockN),
              unsigned(info.numKVHeads), unsigned(args.batch)};
    // The turn counters are a deterministic kernel's last parameter only.
    if (llvm::Error err =
            kernels.main.launch(grid, Dim3{unsigned(info.threads), 1, 1},
                                unsigned(info.sharedMemory), stream,
                                llvm::ArrayRef<void *>(params).drop_back(
                                    info.deterministic ? 0 : 1)))
      return err;
  }
  if (args.seqQ > 0) {
    int64_t pairs = args.batch * args.seqQ * info.numQHeads * info.headDim / 2;
    DevicePtr dq = args.gradQ;
    void *params[] = {&acc, &dq, &pairs};
    Dim3 grid{unsigned((pairs + 255) / 256), 1, 1};
    if (llvm::Error err = kernels.postprocess.launch(grid, Dim3{256, 1, 1}, 0,
                                                     stream, params))
      return err;
  }
  return llvm::Error::success();
}
