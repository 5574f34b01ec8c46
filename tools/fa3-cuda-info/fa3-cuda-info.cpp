//===- fa3-cuda-info.cpp - What the CUDA driver sees ----------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// fa3-cuda-info prints the driver version and, for each device, what the
// Hopper backend depends on: compute capability, SM count, the shared memory
// a block may opt in to. `--smoke-test` also runs two tiny PTX kernels on a
// device, one launched as clusters and one loading a tile through a TMA
// descriptor, which exercises every part of fa3's CUDA runtime.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/CudaDriver.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

using namespace fa3::runtime;
namespace cl = llvm::cl;
using llvm::Error;

static cl::opt<bool>
    smokeTest("smoke-test",
              cl::desc("Also load, launch and check two small kernels"));
static cl::opt<int> smokeDevice("device", cl::init(0),
                                cl::desc("Device for --smoke-test"));

static int fail(Error err) {
  llvm::errs() << "fa3-cuda-info: error: " << llvm::toString(std::move(err))
               << "\n";
  return 1;
}

static int fail(const llvm::Twine &message) {
  llvm::errs() << "fa3-cuda-info: error: " << message << "\n";
  return 1;
}

//===----------------------------------------------------------------------===//
// Smoke test
//===----------------------------------------------------------------------===//

/// fa3_smoke_cluster: out[i] = in[i] + %cluster_ctarank, which shows that the
/// cluster launch attribute arrived. fa3_smoke_tma: one thread loads a 32x32
/// f32 box at (x=32, y=0) of a 64x64 tensor through a __grid_constant__
/// tensor map into shared memory; the block copies it to `out`.
static constexpr const char *kSmokePtx = R"PTX(
.version 8.0
.target sm_90
.address_size 64

.visible .entry fa3_smoke_cluster(
    .param .u64 out, .param .u64 in, .param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  .reg .f32 %f<4>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [in];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  mov.u32 %r6, %cluster_ctarank;
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  mul.wide.u32 %rd5, %r5, 4;
  add.u64 %rd6, %rd4, %rd5;
  ld.global.f32 %f1, [%rd6];
  cvt.rn.f32.u32 %f2, %r6;
  add.f32 %f3, %f1, %f2;
  add.u64 %rd7, %rd3, %rd5;
  st.global.f32 [%rd7], %f3;
DONE:
  ret;
}

.visible .entry fa3_smoke_tma(
    .param .align 64 .b8 tmap[128], .param .u64 out)
{
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<12>;
  .reg .f32 %f<2>;
  .shared .align 128 .b8 tile[4096];
  .shared .align 8 .b64 bar;

  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra SYNC;
  mbarrier.init.shared::cta.b64 [bar], 1;
  fence.mbarrier_init.release.cluster;
  fence.proxy.async.shared::cta;
  mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [bar], 4096;
  mov.u64 %rd2, tmap;
  cvta.param.u64 %rd3, %rd2;
  mov.u32 %r2, 32;
  mov.u32 %r3, 0;
  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [tile], [%rd3, {%r2, %r3}], [bar];
SYNC:
  bar.sync 0;
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
  @!%p2 bra WAIT;

  ld.param.u64 %rd4, [out];
  cvta.to.global.u64 %rd5, %rd4;
  mov.u64 %rd6, tile;
  mov.u32 %r4, %tid.x;
LOOP:
  setp.ge.u32 %p3, %r4, 1024;
  @%p3 bra END;
  mul.wide.u32 %rd7, %r4, 4;
  add.u64 %rd8, %rd6, %rd7;
  ld.shared.f32 %f1, [%rd8];
  add.u64 %rd9, %rd5, %rd7;
  st.global.f32 [%rd9], %f1;
  add.u32 %r4, %r4, 128;
  bra LOOP;
END:
  ret;
}
)PTX";

static Error runClusterKernel(const CudaDevice &device,
                              const CudaModule &module) {
  constexpr unsigned kBlock = 128, kBlocks = 8, kN = kBlock * kBlocks;
  Dim3 cluster{device.supportsClusterLaunch() ? 2u : 1u, 1, 1};
  std::vector<float> in(kN), out(kN);
  for (unsigned i = 0; i < kN; ++i)
    in[i] = static_cast<float>(i % 97) * 0.5f;

  auto kernel = module.getFunction("fa3_smoke_cluster");
  if (!kernel)
    return kernel.takeError();
  auto inBuf = DeviceBuffer::allocate(device, kN * sizeof(float));
  if (!inBuf)
    return inBuf.takeError();
  auto outBuf = DeviceBuffer::allocate(device, kN * sizeof(float));
  if (!outBuf)
    return outBuf.takeError();
  if (Error err = inBuf->copyFromHost(in.data(), kN * sizeof(float)))
    return err;
  if (Error err = outBuf->memset(0xff))
    return err;
  // More than the 48 KiB default, as fa3's kernels need.
  unsigned smem = 64 * 1024;
  if (Error err = kernel->setMaxDynamicSharedMemory(smem))
    return err;

  auto start = CudaEvent::create(device);
  if (!start)
    return start.takeError();
  auto stop = CudaEvent::create(device);
  if (!stop)
    return stop.takeError();
  DevicePtr outPtr = outBuf->ptr(), inPtr = inBuf->ptr();
  unsigned n = kN;
  void *params[] = {&outPtr, &inPtr, &n};
  if (Error err = start->record(nullptr))
    return err;
  if (Error err = kernel->launch({kBlocks, 1, 1}, {kBlock, 1, 1}, smem, nullptr,
                                 params, cluster))
    return err;
  if (Error err = stop->record(nullptr))
    return err;
  if (Error err = stop->synchronize())
    return err;
  auto ms = stop->elapsedMillisecondsSince(*start);
  if (!ms)
    return ms.takeError();
  if (Error err = outBuf->copyToHost(out.data(), kN * sizeof(float)))
    return err;
  for (unsigned i = 0; i < kN; ++i) {
    float expected = in[i] + static_cast<float>((i / kBlock) % cluster.x);
    if (out[i] != expected)
      return llvm::createStringError(
          "fa3_smoke_cluster: out[%u] = %g, expected %g", i, out[i], expected);
  }
  auto attrs = kernel->getAttributes();
  if (!attrs)
    return attrs.takeError();
  llvm::outs() << "  fa3_smoke_cluster: ok (cluster " << cluster.x << "x1x1, "
               << attrs->numRegisters << " registers, "
               << llvm::format("%.3f", *ms) << " ms)\n";
  return Error::success();
}

static Error runTmaKernel(const CudaDevice &device, const CudaModule &module) {
  constexpr unsigned kDim = 64, kBox = 32;
  std::vector<float> in(kDim * kDim), out(kBox * kBox);
  for (unsigned i = 0; i < in.size(); ++i)
    in[i] = static_cast<float>(i);

  auto kernel = module.getFunction("fa3_smoke_tma");
  if (!kernel)
    return kernel.takeError();
  auto inBuf = DeviceBuffer::allocate(device, in.size() * sizeof(float));
  if (!inBuf)
    return inBuf.takeError();
  auto outBuf = DeviceBuffer::allocate(device, out.size() * sizeof(float));
  if (!outBuf)
    return outBuf.takeError();
  if (Error err = inBuf->copyFromHost(in.data(), in.size() * sizeof(float)))
    return err;
  if (Error err = outBuf->memset(0xff))
    return err;

  TiledTensorMapDesc desc;
  desc.dataType = TensorMapDataType::Float32;
  desc.globalAddress = inBuf->ptr();
  desc.globalDims = {kDim, kDim};
  desc.globalStrides = {kDim * sizeof(float)};
  desc.boxDims = {kBox, kBox};
  desc.swizzle = TensorMapSwizzle::None;
  auto tmap = encodeTiledTensorMap(desc, "smoke input");
  if (!tmap)
    return tmap.takeError();

  DevicePtr outPtr = outBuf->ptr();
  void *params[] = {&*tmap, &outPtr};
  if (Error err = kernel->launch({1, 1, 1}, {128, 1, 1}, 0, nullptr, params))
    return err;
  if (Error err = synchronizeStream(nullptr))
    return err;
  if (Error err = outBuf->copyToHost(out.data(), out.size() * sizeof(float)))
    return err;
  for (unsigned y = 0; y < kBox; ++y)
    for (unsigned x = 0; x < kBox; ++x) {
      float expected = in[y * kDim + kBox + x];
      if (out[y * kBox + x] != expected)
        return llvm::createStringError(
            "fa3_smoke_tma: out[%u][%u] = %g, expected %g", y, x,
            out[y * kBox + x], expected);
    }
  llvm::outs() << "  fa3_smoke_tma: ok\n";
  return Error::success();
}

static Error runSmokeTest(int ordinal) {
  auto device = CudaDevice::get(ordinal);
  if (!device)
    return device.takeError();
  llvm::outs() << "smoke test on device " << ordinal << ":\n";
  if (device->getComputeCapabilityMajor() < 9)
    return llvm::createStringError(
        "the smoke test needs sm_90 or newer; device %d is %s", ordinal,
        device->getSmArch().c_str());
  auto module = CudaModule::load(*device, kSmokePtx, "fa3-cuda-info smoke");
  if (!module)
    return module.takeError();
  if (Error err = runClusterKernel(*device, *module))
    return err;
  if (Error err = runTmaKernel(*device, *module))
    return err;
  // A kernel that is not there names both itself and the module.
  auto missing = module->getFunction("fa3_no_such_kernel");
  if (missing)
    return llvm::createStringError("fa3_no_such_kernel was found");
  llvm::outs() << "  missing kernel: " << llvm::toString(missing.takeError())
               << "\n";
  // So does a launch the driver refuses: 4096 threads per block.
  auto kernel = module->getFunction("fa3_smoke_cluster");
  if (!kernel)
    return kernel.takeError();
  DevicePtr null = 0;
  unsigned n = 0;
  void *params[] = {&null, &null, &n};
  Error refused = kernel->launch({1, 1, 1}, {4096, 1, 1}, 0, nullptr, params);
  if (!refused)
    return llvm::createStringError("a 4096-thread block was launched");
  llvm::outs() << "  refused launch: " << llvm::toString(std::move(refused))
               << "\n";
  llvm::outs() << "smoke test: ok\n";
  return Error::success();
}

//===----------------------------------------------------------------------===//
// main
//===----------------------------------------------------------------------===//

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "fa3-cuda-info: the CUDA devices fa3 can use\n");

  auto version = cudaDriverVersion();
  if (!version)
    return fail(version.takeError());
  llvm::outs() << "CUDA driver: " << cudaDriverPath() << ", CUDA "
               << *version / 1000 << "." << (*version % 1000) / 10 << "\n";

  auto count = cudaDeviceCount();
  if (!count)
    return fail(count.takeError());
  llvm::outs() << "devices: " << *count << "\n";
  for (int i = 0; i < *count; ++i) {
    auto device = CudaDevice::get(i);
    if (!device)
      return fail(device.takeError());
    llvm::outs() << "device " << i << ": " << device->getName() << "\n"
                 << "  compute capability: "
                 << device->getComputeCapabilityMajor() << "."
                 << device->getComputeCapabilityMinor() << " ("
                 << device->getSmArch() << ")\n"
                 << "  multiprocessors: " << device->getMultiprocessorCount()
                 << "\n"
                 << "  shared memory per block (opt-in): "
                 << device->getMaxSharedMemoryPerBlockOptin() << " bytes\n"
                 << "  shared memory per multiprocessor: "
                 << device->getMaxSharedMemoryPerMultiprocessor() << " bytes\n"
                 << "  L2 cache: " << device->getL2CacheBytes() << " bytes\n"
                 << "  global memory: "
                 << device->getTotalMemoryBytes() / (1024 * 1024) << " MiB\n"
                 << "  cluster launch: "
                 << (device->supportsClusterLaunch() ? "yes" : "no") << "\n";
  }
  if (!smokeTest)
    return 0;
  if (smokeDevice < 0 || smokeDevice >= *count)
    return fail("--device=" + llvm::Twine(smokeDevice) +
                " does not exist: the driver sees " + llvm::Twine(*count) +
                " device(s)");
  if (Error err = runSmokeTest(smokeDevice))
    return fail(std::move(err));
  return 0;
}
