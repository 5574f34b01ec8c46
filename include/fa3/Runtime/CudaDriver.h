//===- CudaDriver.h - Devices, memory, modules and launches -----*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The CUDA side of the runtime. libcuda.so.1 is loaded with dlopen on first
// use (FA3_LIBCUDA names another file), so fa3 builds and runs without CUDA
// and only the calls below need a driver. Every failing driver call becomes
// an llvm::Error naming the call, the kernel or object it was about, and the
// driver's error name and string:
//
//   cuLaunchKernelEx(fa3_fwd_bf16_d128): CUDA_ERROR_INVALID_VALUE: invalid
//   argument
//
// Handles are the driver's own (`CUstream_st *` is cuda.h's CUstream), so a
// stream or device pointer from PyTorch passes straight through.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_RUNTIME_CUDADRIVER_H
#define FA3_RUNTIME_CUDADRIVER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <cstdint>
#include <string>

struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;

namespace fa3::runtime {

/// A CUDA stream; nullptr is the legacy default stream.
using CudaStream = CUstream_st *;
/// A device address, as cuda.h's CUdeviceptr.
using DevicePtr = unsigned long long;

/// A grid, block or cluster shape.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// A failed driver call. `getResult()` is the driver's CUresult, for callers
/// that map some codes (CUDA_ERROR_OUT_OF_MEMORY = 2) to their own errors.
class CudaDriverError : public llvm::ErrorInfo<CudaDriverError> {
public:
  static char ID;

  CudaDriverError(int result, std::string message)
      : result(result), message(std::move(message)) {}

  int getResult() const { return result; }
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;

private:
  int result;
  std::string message;
};

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

/// The file the driver is (or would be) loaded from: $FA3_LIBCUDA, else
/// "libcuda.so.1".
std::string cudaDriverPath();

/// Loads the driver if needed; fails with "cannot load the CUDA driver
/// (PATH): <dlerror>" when it cannot be loaded.
llvm::Error loadCudaDriver();

/// The driver's CUDA version, e.g. 12080 for 12.8; needs no device.
llvm::Expected<int> cudaDriverVersion();

/// Number of CUDA devices (initializes the driver).
llvm::Expected<int> cudaDeviceCount();

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

/// A device and the context fa3 works in on it: the calling thread's current
/// context when it is on this device (PyTorch's), else the device's primary
/// context, retained for the rest of the process as the CUDA runtime does, so
/// that buffers and modules never outlive it. Cheap to copy.
class CudaDevice {
public:
  /// Initializes the driver and picks the context. It becomes the thread's
  /// current context only when the thread has none (as the CUDA runtime's
  /// lazy initialization does): a caller working on another device keeps
  /// its context, and fa3 enters this one per call (ScopedCudaContext).
  static llvm::Expected<CudaDevice> get(int ordinal = 0);

  /// The device of the calling thread's current context (PyTorch's current
  /// device once it has touched CUDA), or device 0 when there is none.
  static llvm::Expected<CudaDevice> getCurrent();

  int getOrdinal() const { return ordinal; }
  llvm::StringRef getName() const { return name; }
  int getComputeCapabilityMajor() const { return ccMajor; }
  int getComputeCapabilityMinor() const { return ccMinor; }
  /// "sm_90" for compute capability 9.0.
  std::string getSmArch() const;
  int getMultiprocessorCount() const { return smCount; }
  /// Dynamic + static shared memory a block may opt in to (227 KiB on H100).
  int getMaxSharedMemoryPerBlockOptin() const { return smemPerBlockOptin; }
  int getMaxSharedMemoryPerMultiprocessor() const { return smemPerSm; }
  int getMaxThreadsPerBlock() const { return maxThreadsPerBlock; }
  int getL2CacheBytes() const { return l2CacheBytes; }
  size_t getTotalMemoryBytes() const { return totalMemoryBytes; }
  bool supportsClusterLaunch() const { return clusterLaunch; }
  CUctx_st *getContext() const { return context; }

  /// Makes this device's context the calling thread's current one.
  llvm::Error makeCurrent() const;
  /// Waits for all work in the context (cuCtxSynchronize).
  llvm::Error synchronize() const;

private:
  CudaDevice() = default;

  int ordinal = 0;
  int handle = 0;
  CUctx_st *context = nullptr;
  std::string name;
  int ccMajor = 0, ccMinor = 0;
  int smCount = 0, smemPerBlockOptin = 0, smemPerSm = 0;
  int maxThreadsPerBlock = 0, l2CacheBytes = 0;
  size_t totalMemoryBytes = 0;
  bool clusterLaunch = false;
};

/// Makes a device's context current for one scope and restores the caller's
/// on exit (cuCtxPushCurrent/cuCtxPopCurrent), doing nothing when it already
/// is current: a library call into fa3 on device N leaves the thread on the
/// device it was on. Move-only.
class ScopedCudaContext {
public:
  static llvm::Expected<ScopedCudaContext> enter(const CudaDevice &device);

  ScopedCudaContext(ScopedCudaContext &&other) noexcept : pushed(other.pushed) {
    other.pushed = false;
  }
  ScopedCudaContext(const ScopedCudaContext &) = delete;
  ScopedCudaContext &operator=(const ScopedCudaContext &) = delete;
  ScopedCudaContext &operator=(ScopedCudaContext &&) = delete;
  ~ScopedCudaContext();

private:
  explicit ScopedCudaContext(bool pushed) : pushed(pushed) {}
  bool pushed;
};

/// Waits for all work queued on `stream`.
llvm::Error synchronizeStream(CudaStream stream);
/// Sets `count` 32-bit words at `dst` to `value`, in order on `stream`.
/// A 32-bit counter in the calling thread's current context that is zero
/// when the next kernel on `stream` starts (a cuMemsetD32Async on `stream`
/// is enqueued first): the tile counter of a persistent launch. Outside
/// graph capture each (context, stream) reuses one counter, since launches
/// on one stream run in order; a launch captured into a graph gets one of
/// its own, never reused, since replays may run beside anything. Counters
/// live as long as the process.
llvm::Expected<DevicePtr> zeroedCounter(CudaStream stream);

llvm::Error memsetAsync32(DevicePtr dst, uint32_t value, size_t count,
                          CudaStream stream);

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

/// Device memory owned by cuMemAlloc/cuMemFree. Move-only.
class DeviceBuffer {
public:
  /// Allocates `bytes` in `device`'s context; 0 bytes gives an empty buffer.
  static llvm::Expected<DeviceBuffer> allocate(const CudaDevice &device,
                                               size_t bytes);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer();

  DevicePtr ptr() const { return devicePtr; }
  size_t size() const { return numBytes; }

  /// Synchronous copies of `bytes` at byte `offset` into the buffer.
  llvm::Error copyFromHost(const void *src, size_t bytes, size_t offset = 0);
  llvm::Error copyToHost(void *dst, size_t bytes, size_t offset = 0) const;
  /// Sets every byte of the buffer to `value` (e.g. 0xff to poison outputs).
  llvm::Error memset(uint8_t value);
  /// Frees now and reports a failure the destructor would have to drop.
  llvm::Error release();

private:
  llvm::Error checkRange(llvm::StringRef what, size_t bytes,
                         size_t offset) const;

  DevicePtr devicePtr = 0;
  size_t numBytes = 0;
};

//===----------------------------------------------------------------------===//
// Modules and kernels
//===----------------------------------------------------------------------===//

/// Static resources of a compiled kernel, from cuFuncGetAttribute.
struct KernelAttributes {
  int numRegisters = 0;
  int staticSharedBytes = 0;
  int localBytes = 0;
  int maxThreadsPerBlock = 0;
};

/// A kernel of a loaded CudaModule; valid while the module is.
class CudaKernel {
public:
  CudaKernel(const CudaKernel &other)
      : function(other.function), name(other.name),
        dynamicSharedLimit(other.dynamicSharedLimit.load()) {}
  CudaKernel &operator=(const CudaKernel &other) {
    function = other.function;
    name = other.name;
    dynamicSharedLimit = other.dynamicSharedLimit.load();
    return *this;
  }

  llvm::StringRef getName() const { return name; }
  /// The driver's CUfunction.
  CUfunc_st *getHandle() const { return function; }

  /// Lets launches use up to `bytes` of dynamic shared memory; needed above
  /// 48 KiB (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). The driver is
  /// called once per kernel and size, not per launch: the attribute stays.
  llvm::Error setMaxDynamicSharedMemory(unsigned bytes) const;
  llvm::Expected<KernelAttributes> getAttributes() const;

  /// Launches with cuLaunchKernelEx. `params` holds one pointer per kernel
  /// parameter, to its value (a TensorMap for a __grid_constant__ CUtensorMap
  /// parameter). A cluster other than 1x1x1 adds the cluster-dimension launch
  /// attribute; the grid must be a multiple of it.
  llvm::Error launch(Dim3 grid, Dim3 block, unsigned dynamicSharedBytes,
                     CudaStream stream, llvm::ArrayRef<void *> params,
                     Dim3 cluster = {}) const;

private:
  friend class CudaModule;
  CudaKernel(CUfunc_st *function, std::string name)
      : function(function), name(std::move(name)) {}

  CUfunc_st *function;
  std::string name;
  /// The largest size setMaxDynamicSharedMemory has set (0: none yet).
  mutable std::atomic<unsigned> dynamicSharedLimit{0};
};

/// A cubin, fatbin or PTX image loaded with cuModuleLoadDataEx. Move-only;
/// unloaded on destruction.
class CudaModule {
public:
  /// Loads `image` into `device`'s context. An ELF (cubin) or fatbin image
  /// is loaded as is; anything else is taken as PTX text and JIT-compiled,
  /// with the JIT's error log appended to the error on failure. `name`
  /// names the module in errors.
  static llvm::Expected<CudaModule>
  load(const CudaDevice &device, llvm::StringRef image, llvm::StringRef name);

  CudaModule() = default;
  CudaModule(CudaModule &&other) noexcept;
  CudaModule &operator=(CudaModule &&other) noexcept;
  CudaModule(const CudaModule &) = delete;
  CudaModule &operator=(const CudaModule &) = delete;
  ~CudaModule();

  llvm::StringRef getName() const { return name; }
  /// The JIT's informational log (PTX images only; may be empty).
  llvm::StringRef getJitLog() const { return jitLog; }

  /// Looks up a kernel by its mangled name.
  llvm::Expected<CudaKernel> getFunction(llvm::StringRef kernelName) const;

private:
  CUmod_st *module = nullptr;
  /// The context the module was loaded into.
  CUctx_st *context = nullptr;
  std::string name;
  std::string jitLog;
};

//===----------------------------------------------------------------------===//
// Tensor maps
//===----------------------------------------------------------------------===//

/// A TMA descriptor as cuda.h's CUtensorMap: 128 opaque bytes, aligned as
/// cuTensorMapEncodeTiled requires. Passed by value to kernels.
struct alignas(64) TensorMap {
  uint64_t opaque[16];
};
static_assert(sizeof(TensorMap) == 128, "a CUtensorMap is 128 bytes");

enum class TensorMapDataType {
  UInt8,
  UInt16,
  UInt32,
  Int32,
  UInt64,
  Int64,
  Float16,
  Float32,
  Float64,
  BFloat16,
  Float32Ftz,
  TFloat32,
  TFloat32Ftz,
};
enum class TensorMapInterleave { None, Bytes16, Bytes32 };
enum class TensorMapSwizzle { None, Bytes32, Bytes64, Bytes128 };
enum class TensorMapL2Promotion { None, Bytes64, Bytes128, Bytes256 };
enum class TensorMapOOBFill { None, NaNRequestZeroFMA };

/// Bytes of one element of `type`.
size_t tensorMapElementSize(TensorMapDataType type);

/// The arguments of cuTensorMapEncodeTiled. Dimensions run innermost
/// (contiguous) first, as the driver takes them.
struct TiledTensorMapDesc {
  TensorMapDataType dataType = TensorMapDataType::Float16;
  DevicePtr globalAddress = 0;
  /// Elements along each of the 1..5 dimensions.
  llvm::SmallVector<uint64_t, 5> globalDims;
  /// Byte strides of dimensions 1..rank-1 (dimension 0 is contiguous).
  llvm::SmallVector<uint64_t, 4> globalStrides;
  /// Elements of the box one TMA copy moves, per dimension.
  llvm::SmallVector<uint32_t, 5> boxDims;
  /// Traversal strides per dimension; empty means all 1.
  llvm::SmallVector<uint32_t, 5> elementStrides;
  TensorMapInterleave interleave = TensorMapInterleave::None;
  TensorMapSwizzle swizzle = TensorMapSwizzle::None;
  TensorMapL2Promotion l2Promotion = TensorMapL2Promotion::None;
  TensorMapOOBFill oobFill = TensorMapOOBFill::None;
};

/// Checks `desc` against cuTensorMapEncodeTiled's rules without a driver; the
/// error names `what` (e.g. "Q") and the offending argument.
llvm::Error validateTiledTensorMap(const TiledTensorMapDesc &desc,
                                   llvm::StringRef what);

/// Validates `desc`, then encodes it with cuTensorMapEncodeTiled.
llvm::Expected<TensorMap> encodeTiledTensorMap(const TiledTensorMapDesc &desc,
                                               llvm::StringRef what);

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

/// A timing event (cuEventCreate with default flags). Move-only.
class CudaEvent {
public:
  static llvm::Expected<CudaEvent> create(const CudaDevice &device);

  CudaEvent() = default;
  CudaEvent(CudaEvent &&other) noexcept;
  CudaEvent &operator=(CudaEvent &&other) noexcept;
  CudaEvent(const CudaEvent &) = delete;
  CudaEvent &operator=(const CudaEvent &) = delete;
  ~CudaEvent();

  llvm::Error record(CudaStream stream);
  llvm::Error synchronize() const;
  /// Milliseconds from `start` to this event; both must have completed
  /// (synchronize this one first).
  llvm::Expected<float> elapsedMillisecondsSince(const CudaEvent &start) const;

private:
  CUevent_st *event = nullptr;
};

} // namespace fa3::runtime

#endif // FA3_RUNTIME_CUDADRIVER_H
