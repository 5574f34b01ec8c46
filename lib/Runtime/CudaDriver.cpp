//===- CudaDriver.cpp - Devices, memory, modules and launches -------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
//===----------------------------------------------------------------------===//

#include "fa3/Runtime/CudaDriver.h"

#include "CudaDriverApi.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

using namespace fa3::runtime;
using namespace fa3::runtime::cuda;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

char CudaDriverError::ID = 0;

void CudaDriverError::log(llvm::raw_ostream &os) const { os << message; }

std::error_code CudaDriverError::convertToErrorCode() const {
  return llvm::inconvertibleErrorCode();
}

static Error invalidArgument(const llvm::Twine &message) {
  return llvm::createStringError(
      std::make_error_code(std::errc::invalid_argument), message);
}

//===----------------------------------------------------------------------===//
// Loading the driver
//===----------------------------------------------------------------------===//

namespace {
/// The process's one libcuda: loaded on first use and never unloaded, so that
/// buffers and modules freed from static destructors still find it.
struct Driver {
  std::string path;
  void *library = nullptr;
  /// Why the library could not be loaded; empty once it is.
  std::string loadError;
  DriverApi api;

  std::once_flag initOnce;
  CUresult initResult = CUDA_ERROR_NOT_INITIALIZED;

  /// Primary contexts retained so far, by device ordinal.
  std::mutex contextsMutex;
  std::map<int, CUcontext> primaryContexts;

  Driver() { load(); }
  void load();
};
} // namespace

/// Resolves `name` the way the CUDA runtime does: cuGetProcAddress picks the
/// variant with CUDA 12.0 semantics; a driver without it exports the
/// versioned `symbol` cuda.h would have bound `name` to.
static void *resolveEntryPoint(void *library, const char *name,
                               const char *symbol) {
  // Object-to-function pointer conversions go through memcpy: ISO C++ leaves
  // a direct cast conditionally supported.
  auto lookup = [&](const char *sym, auto &fn) {
    void *address = dlsym(library, sym);
    static_assert(sizeof(fn) == sizeof(address), "function pointer size");
    std::memcpy(&fn, &address, sizeof(address));
    return address != nullptr;
  };
  void *fn = nullptr;
  PFN_cuGetProcAddress_v2 getProcAddressV2 = nullptr;
  PFN_cuGetProcAddress_v1 getProcAddressV1 = nullptr;
  if (lookup("cuGetProcAddress_v2", getProcAddressV2)) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (getProcAddressV2(name, &fn, kRequestedCudaVersion,
                         CU_GET_PROC_ADDRESS_DEFAULT,
                         &status) == CUDA_SUCCESS &&
        status == CU_GET_PROC_ADDRESS_SUCCESS && fn)
      return fn;
  } else if (lookup("cuGetProcAddress", getProcAddressV1)) {
    if (getProcAddressV1(name, &fn, kRequestedCudaVersion,
                         CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS &&
        fn)
      return fn;
  }
  return dlsym(library, symbol);
}

void Driver::load() {
  path = cudaDriverPath();
  library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    loadError = "cannot load the CUDA driver (" + path +
                "): " + (why ? why : "unknown dlopen error");
    return;
  }
#define FA3_RESOLVE_ENTRY_POINT(name, symbol, params)                          \
  {                                                                            \
    void *address = resolveEntryPoint(library, #name, symbol);                 \
    std::memcpy(&api.name, &address, sizeof(address));                         \
  }
  FA3_CUDA_DRIVER_ENTRY_POINTS(FA3_RESOLVE_ENTRY_POINT)
#undef FA3_RESOLVE_ENTRY_POINT
}

static Driver &getDriver() {
  // Leaked on purpose; see Driver.
  static Driver *driver = new Driver();
  return *driver;
}

std::string fa3::runtime::cudaDriverPath() {
  const char *path = std::getenv("FA3_LIBCUDA");
  return path && *path ? path : "libcuda.so.1";
}

/// "CUDA_ERROR_INVALID_VALUE: invalid argument".
static std::string describeResult(const DriverApi &api, CUresult result) {
  const char *name = nullptr, *text = nullptr;
  if (api.cuGetErrorName && api.cuGetErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (api.cuGetErrorString &&
      api.cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  // A stub libcuda names nothing, not even its own errors.
  std::string s = name ? name : "CUDA error " + std::to_string(result);
  return s + ": " + (text ? text : "no description from the driver");
}

/// "CALL(SUBJECT): CUDA_ERROR_...: text (DETAIL)".
static Error driverError(CUresult result, StringRef call, StringRef subject,
                         StringRef detail = {}) {
  std::string message = call.str();
  if (!subject.empty())
    message += "(" + subject.str() + ")";
  message += ": " + describeResult(getDriver().api, result);
  if (!detail.empty())
    message += " (" + detail.str() + ")";
  return llvm::make_error<CudaDriverError>(result, std::move(message));
}

/// The error for an entry point the loaded driver lacks.
static Error missingEntryPoint(StringRef call) {
  return llvm::make_error<CudaDriverError>(
      CUDA_ERROR_NOT_FOUND,
      (call + ": not provided by the CUDA driver (" + getDriver().path +
       "); fa3 needs a driver for CUDA 12.0 or newer")
          .str());
}

/// Calls a driver entry point and turns a failure into a CudaDriverError.
template <typename... Params, typename... Args>
static Error callDriver(const char *call, CUresult (*fn)(Params...),
                        StringRef subject, Args &&...args) {
  if (!fn)
    return missingEntryPoint(call);
  CUresult result = fn(std::forward<Args>(args)...);
  if (result == CUDA_SUCCESS)
    return Error::success();
  return driverError(result, call, subject);
}

/// The entry points of a loaded driver.
static Expected<const DriverApi *> getApi() {
  Driver &driver = getDriver();
  if (!driver.loadError.empty())
    return llvm::make_error<CudaDriverError>(CUDA_ERROR_NOT_INITIALIZED,
                                             driver.loadError);
  return &driver.api;
}

/// The entry points of a loaded driver on which cuInit has succeeded.
static Expected<const DriverApi *> getInitializedApi() {
  auto api = getApi();
  if (!api)
    return api.takeError();
  Driver &driver = getDriver();
  if (!driver.api.cuInit)
    return missingEntryPoint("cuInit");
  std::call_once(driver.initOnce,
                 [&] { driver.initResult = driver.api.cuInit(0); });
  if (driver.initResult != CUDA_SUCCESS)
    return driverError(driver.initResult, "cuInit", "");
  return api;
}

Error fa3::runtime::loadCudaDriver() { return getApi().takeError(); }

Expected<int> fa3::runtime::cudaDriverVersion() {
  auto api = getApi();
  if (!api)
    return api.takeError();
  int version = 0;
  if (Error err = callDriver("cuDriverGetVersion", (*api)->cuDriverGetVersion,
                             "", &version))
    return std::move(err);
  return version;
}

Expected<int> fa3::runtime::cudaDeviceCount() {
  auto api = getInitializedApi();
  if (!api)
    return api.takeError();
  int count = 0;
  if (Error err =
          callDriver("cuDeviceGetCount", (*api)->cuDeviceGetCount, "", &count))
    return std::move(err);
  return count;
}

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

/// The calling thread's current context (null when it has none).
static Expected<CUcontext> currentContext(const DriverApi &api) {
  CUcontext current = nullptr;
  if (Error err =
          callDriver("cuCtxGetCurrent", api.cuCtxGetCurrent, "", &current))
    return std::move(err);
  return current;
}

Expected<CudaDevice> CudaDevice::get(int ordinal) {
  auto apiOrErr = getInitializedApi();
  if (!apiOrErr)
    return apiOrErr.takeError();
  const DriverApi &api = **apiOrErr;

  auto count = cudaDeviceCount();
  if (!count)
    return count.takeError();
  if (ordinal < 0 || ordinal >= *count)
    return invalidArgument("CUDA device " + llvm::Twine(ordinal) +
                           " does not exist: the driver sees " +
                           llvm::Twine(*count) + " device(s)");

  CudaDevice device;
  device.ordinal = ordinal;
  std::string subject = "device " + std::to_string(ordinal);
  if (Error err = callDriver("cuDeviceGet", api.cuDeviceGet, subject,
                             &device.handle, ordinal))
    return std::move(err);

  // Work in the caller's context when it is on this device, as PyTorch's is,
  // so that its allocations and ours are one address space.
  auto currentOrErr = currentContext(api);
  if (!currentOrErr)
    return currentOrErr.takeError();
  CUcontext current = *currentOrErr;
  CUdevice currentDevice = -1;
  if (current && api.cuCtxGetDevice(&currentDevice) == CUDA_SUCCESS &&
      currentDevice == device.handle) {
    device.context = current;
  } else {
    Driver &driver = getDriver();
    std::lock_guard<std::mutex> lock(driver.contextsMutex);
    CUcontext &primary = driver.primaryContexts[ordinal];
    if (!primary) {
      if (Error err = callDriver("cuDevicePrimaryCtxRetain",
                                 api.cuDevicePrimaryCtxRetain, subject,
                                 &primary, device.handle)) {
        driver.primaryContexts.erase(ordinal);
        return std::move(err);
      }
    }
    device.context = primary;
    if (!current)
      if (Error err = callDriver("cuCtxSetCurrent", api.cuCtxSetCurrent,
                                 subject, primary))
        return std::move(err);
  }

  char name[256] = {};
  if (Error err =
          callDriver("cuDeviceGetName", api.cuDeviceGetName, subject, name,
                     static_cast<int>(sizeof(name)) - 1, device.handle))
    return std::move(err);
  device.name = name;

  struct {
    CUdevice_attribute attribute;
    const char *attributeName;
    int *value;
  } queries[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR",
       &device.ccMajor},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR",
       &device.ccMinor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT",
       &device.smCount},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
       "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", &device.smemPerBlockOptin},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
       "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", &device.smemPerSm},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK",
       &device.maxThreadsPerBlock},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE",
       &device.l2CacheBytes},
  };
  for (const auto &query : queries)
    if (Error err = callDriver("cuDeviceGetAttribute", api.cuDeviceGetAttribute,
                               subject + ", " + query.attributeName,
                               query.value, query.attribute, device.handle))
      return std::move(err);
  // Cluster launch is queryable from CUDA 11.8; older drivers cannot launch
  // clusters anyway.
  int clusterLaunch = 0;
  if (api.cuDeviceGetAttribute(&clusterLaunch,
                               CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH,
                               device.handle) == CUDA_SUCCESS)
    device.clusterLaunch = clusterLaunch != 0;
  if (Error err = callDriver("cuDeviceTotalMem", api.cuDeviceTotalMem, subject,
                             &device.totalMemoryBytes, device.handle))
    return std::move(err);
  return device;
}

Expected<CudaDevice> CudaDevice::getCurrent() {
  auto api = getInitializedApi();
  if (!api)
    return api.takeError();
  auto currentOrErr = currentContext(**api);
  if (!currentOrErr)
    return currentOrErr.takeError();
  CUcontext current = *currentOrErr;
  if (!current)
    return get(0);
  CUdevice handle = -1;
  if (Error err = callDriver("cuCtxGetDevice", (*api)->cuCtxGetDevice,
                             "the current context", &handle))
    return std::move(err);
  auto count = cudaDeviceCount();
  if (!count)
    return count.takeError();
  for (int ordinal = 0; ordinal < *count; ++ordinal) {
    CUdevice candidate = -1;
    if (Error err = callDriver("cuDeviceGet", (*api)->cuDeviceGet,
                               "device " + std::to_string(ordinal), &candidate,
                               ordinal))
      return std::move(err);
    if (candidate == handle)
      return get(ordinal);
  }
  return invalidArgument("the current CUDA context's device is not among "
                         "the driver's " +
                         llvm::Twine(*count) + " device(s)");
}

Expected<ScopedCudaContext> ScopedCudaContext::enter(const CudaDevice &device) {
  auto api = getInitializedApi();
  if (!api)
    return api.takeError();
  auto currentOrErr = currentContext(**api);
  if (!currentOrErr)
    return currentOrErr.takeError();
  CUcontext current = *currentOrErr;
  if (current == device.getContext())
    return ScopedCudaContext(false);
  if (Error err = callDriver("cuCtxPushCurrent", (*api)->cuCtxPushCurrent,
                             "device " + std::to_string(device.getOrdinal()),
                             device.getContext()))
    return std::move(err);
  return ScopedCudaContext(true);
}

ScopedCudaContext::~ScopedCudaContext() {
  if (!pushed)
    return;
  CUcontext popped = nullptr;
  (void)getDriver().api.cuCtxPopCurrent(&popped);
}

std::string CudaDevice::getSmArch() const {
  return "sm_" + std::to_string(ccMajor * 10 + ccMinor);
}

Error CudaDevice::makeCurrent() const {
  auto api = getInitializedApi();
  if (!api)
    return api.takeError();
  auto current = currentContext(**api);
  if (!current)
    return current.takeError();
  if (*current == context)
    return Error::success();
  return callDriver("cuCtxSetCurrent", (*api)->cuCtxSetCurrent,
                    "device " + std::to_string(ordinal), context);
}

Error CudaDevice::synchronize() const {
  if (Error err = makeCurrent())
    return err;
  return callDriver("cuCtxSynchronize", getDriver().api.cuCtxSynchronize,
                    "device " + std::to_string(ordinal));
}

Error fa3::runtime::memsetAsync32(DevicePtr dst, uint32_t value, size_t count,
                                  CudaStream stream) {
  if (count == 0)
    return Error::success();
  auto api = getInitializedApi();
  if (!api)
    return api.takeError();
  return callDriver("cuMemsetD32Async", (*api)->cuMemsetD32Async,
                    std::to_string(count) + " words", dst, value, count,
                    stream);
}

Expected<DevicePtr> fa3::runtime::zeroedCounter(CudaStream stream) {
  auto api = getInitializedApi();
  if (!api)
    return api.takeError();
  if (!(*api)->cuStreamIsCapturing)
    return missingEntryPoint("cuStreamIsCapturing");
  CUcontext context = nullptr;
  if (Error err =
          callDriver("cuCtxGetCurrent", (*api)->cuCtxGetCurrent, "", &context))
    return std::move(err);
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (Error err = callDriver("cuStreamIsCapturing", (*api)->cuStreamIsCapturing,
                             "", reinterpret_cast<CUstream>(stream), &capture))
    return std::move(err);
  // Counters are handed out from 4 KiB blocks per context.
  struct Pool {
    CUdeviceptr block = 0;
    size_t used = 0;
    std::map<CudaStream, DevicePtr> perStream;
  };
  static std::mutex mutex;
  static std::map<CUcontext, Pool> pools;
  std::lock_guard<std::mutex> lock(mutex);
  Pool &pool = pools[context];
  DevicePtr counter = 0;
  bool captured = capture != CU_STREAM_CAPTURE_STATUS_NONE;
  if (!captured) {
    auto it = pool.perStream.find(stream);
    if (it != pool.perStream.end())
      counter = it->second;
  }
  if (!counter) {
    constexpr size_t kBlockBytes = 4096;
    if (!pool.block || pool.used + 4 > kBlockBytes) {
      if (Error err =
              callDriver("cuMemAlloc", (*api)->cuMemAlloc,
                         "a block of tile counters", &pool.block, kBlockBytes))
        return std::move(err);
      pool.used = 0;
    }
    counter = pool.block + pool.used;
    pool.used += 4;
    if (!captured)
      pool.perStream[stream] = counter;
  }
  if (Error err = memsetAsync32(counter, 0u, 1, stream))
    return std::move(err);
  return counter;
}

Error fa3::runtime::synchronizeStream(CudaStream stream) {
  auto api = getInitializedApi();
  if (!api)
    return api.takeError();
  return callDriver("cuStreamSynchronize", (*api)->cuStreamSynchronize, "",
                    stream);
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

Expected<DeviceBuffer> DeviceBuffer::allocate(const CudaDevice &device,
                                              size_t bytes) {
  if (Error err = device.makeCurrent())
    return std::move(err);
  DeviceBuffer buffer;
  if (bytes == 0)
    return buffer;
  if (Error err = callDriver("cuMemAlloc", getDriver().api.cuMemAlloc,
                             std::to_string(bytes) + " bytes on device " +
                                 std::to_string(device.getOrdinal()),
                             &buffer.devicePtr, bytes))
    return std::move(err);
  buffer.numBytes = bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : devicePtr(std::exchange(other.devicePtr, 0)),
      numBytes(std::exchange(other.numBytes, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    llvm::consumeError(release());
    devicePtr = std::exchange(other.devicePtr, 0);
    numBytes = std::exchange(other.numBytes, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  // A destructor cannot report; call release() to see a failure.
  llvm::consumeError(release());
}

Error DeviceBuffer::release() {
  if (!devicePtr)
    return Error::success();
  DevicePtr ptr = std::exchange(devicePtr, 0);
  numBytes = 0;
  return callDriver("cuMemFree", getDriver().api.cuMemFree, "", ptr);
}

Error DeviceBuffer::checkRange(StringRef what, size_t bytes,
                               size_t offset) const {
  if (offset > numBytes || bytes > numBytes - offset)
    return invalidArgument(what + ": " + llvm::Twine(bytes) +
                           " bytes at offset " + llvm::Twine(offset) +
                           " exceed the " + llvm::Twine(numBytes) +
                           "-byte device buffer");
  return Error::success();
}

Error DeviceBuffer::copyFromHost(const void *src, size_t bytes, size_t offset) {
  if (Error err = checkRange("copyFromHost", bytes, offset))
    return err;
  if (bytes == 0)
    return Error::success();
  return callDriver("cuMemcpyHtoD", getDriver().api.cuMemcpyHtoD,
                    std::to_string(bytes) + " bytes", devicePtr + offset, src,
                    bytes);
}

Error DeviceBuffer::copyToHost(void *dst, size_t bytes, size_t offset) const {
  if (Error err = checkRange("copyToHost", bytes, offset))
    return err;
  if (bytes == 0)
    return Error::success();
  return callDriver("cuMemcpyDtoH", getDriver().api.cuMemcpyDtoH,
                    std::to_string(bytes) + " bytes", dst, devicePtr + offset,
                    bytes);
}

Error DeviceBuffer::memset(uint8_t value) {
  if (numBytes == 0)
    return Error::success();
  return callDriver("cuMemsetD8", getDriver().api.cuMemsetD8,
                    std::to_string(numBytes) + " bytes", devicePtr,
                    static_cast<unsigned char>(value), numBytes);
}

//===----------------------------------------------------------------------===//
// Modules and kernels
//===----------------------------------------------------------------------===//

/// Cubins are ELF files; fatbins start with the fatbin magic 0xBA55ED50.
static bool isBinaryImage(StringRef image) {
  return image.starts_with("\x7f"
                           "ELF") ||
         image.starts_with("\x50\xed\x55\xba");
}

Expected<CudaModule> CudaModule::load(const CudaDevice &device, StringRef image,
                                      StringRef name) {
  auto scope = ScopedCudaContext::enter(device);
  if (!scope)
    return scope.takeError();
  if (image.empty())
    return invalidArgument("cannot load CUDA module '" + name +
                           "': the image is empty");
  // PTX must be NUL-terminated; a StringRef need not be.
  std::string ptx;
  const void *data = image.data();
  if (!isBinaryImage(image)) {
    ptx = image.str();
    data = ptx.c_str();
  }

  constexpr size_t kLogSize = 16384;
  std::string errorLog(kLogSize, '\0'), infoLog(kLogSize, '\0');
  CUjit_option options[] = {
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {errorLog.data(), reinterpret_cast<void *>(kLogSize),
                    infoLog.data(), reinterpret_cast<void *>(kLogSize)};
  auto trimLog = [](std::string &log) {
    log.resize(std::strlen(log.c_str()));
    log = StringRef(log).rtrim().str();
  };

  CudaModule module;
  module.name = name.str();
  module.context = device.getContext();
  const DriverApi &api = getDriver().api;
  if (!api.cuModuleLoadDataEx)
    return missingEntryPoint("cuModuleLoadDataEx");
  CUresult result = api.cuModuleLoadDataEx(&module.module, data,
                                           std::size(options), options, values);
  trimLog(errorLog);
  trimLog(infoLog);
  if (result != CUDA_SUCCESS) {
    std::string detail = errorLog.empty() ? "" : "JIT log:\n" + errorLog;
    Error err = driverError(result, "cuModuleLoadDataEx", name);
    if (detail.empty())
      return std::move(err);
    std::string message = llvm::toString(std::move(err)) + "\n" + detail;
    return llvm::make_error<CudaDriverError>(result, std::move(message));
  }
  module.jitLog = std::move(infoLog);
  return module;
}

CudaModule::CudaModule(CudaModule &&other) noexcept
    : module(std::exchange(other.module, nullptr)),
      context(std::exchange(other.context, nullptr)),
      name(std::move(other.name)), jitLog(std::move(other.jitLog)) {}

/// Unloads `module` in its own context (cuModuleUnload acts on the current
/// one), restoring the caller's.
static void unloadModule(CUmodule module, CUcontext context) {
  const DriverApi &api = getDriver().api;
  CUcontext current = nullptr;
  bool push = context && api.cuCtxGetCurrent(&current) == CUDA_SUCCESS &&
              current != context &&
              api.cuCtxPushCurrent(context) == CUDA_SUCCESS;
  (void)api.cuModuleUnload(module);
  if (push)
    (void)api.cuCtxPopCurrent(&current);
}

CudaModule &CudaModule::operator=(CudaModule &&other) noexcept {
  if (this != &other) {
    if (module)
      unloadModule(module, context);
    module = std::exchange(other.module, nullptr);
    context = std::exchange(other.context, nullptr);
    name = std::move(other.name);
    jitLog = std::move(other.jitLog);
  }
  return *this;
}

CudaModule::~CudaModule() {
  if (module)
    unloadModule(module, context);
}

Expected<CudaKernel> CudaModule::getFunction(StringRef kernelName) const {
  if (!module)
    return invalidArgument("cannot look up kernel '" + kernelName +
                           "': no module is loaded");
  CUfunction function = nullptr;
  std::string nameStr = kernelName.str();
  if (Error err = callDriver(
          "cuModuleGetFunction", getDriver().api.cuModuleGetFunction,
          nameStr + " in " + name, &function, module, nameStr.c_str()))
    return std::move(err);
  return CudaKernel(function, std::move(nameStr));
}

Error CudaKernel::setMaxDynamicSharedMemory(unsigned bytes) const {
  if (bytes <= dynamicSharedLimit.load(std::memory_order_relaxed))
    return Error::success();
  const DriverApi &api = getDriver().api;
  if (!api.cuFuncSetAttribute)
    return missingEntryPoint("cuFuncSetAttribute");
  CUresult result = api.cuFuncSetAttribute(
      function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
      static_cast<int>(bytes));
  if (result == CUDA_SUCCESS) {
    dynamicSharedLimit.store(bytes, std::memory_order_relaxed);
    return Error::success();
  }
  return driverError(result, "cuFuncSetAttribute", name,
                     "MAX_DYNAMIC_SHARED_SIZE_BYTES = " +
                         std::to_string(bytes));
}

Expected<KernelAttributes> CudaKernel::getAttributes() const {
  const DriverApi &api = getDriver().api;
  KernelAttributes attrs;
  struct {
    CUfunction_attribute attribute;
    int *value;
  } queries[] = {
      {CU_FUNC_ATTRIBUTE_NUM_REGS, &attrs.numRegisters},
      {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &attrs.staticSharedBytes},
      {CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &attrs.localBytes},
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &attrs.maxThreadsPerBlock},
  };
  for (const auto &query : queries)
    if (Error err = callDriver("cuFuncGetAttribute", api.cuFuncGetAttribute,
                               name, query.value, query.attribute, function))
      return std::move(err);
  return attrs;
}

static std::string formatDim3(Dim3 d) {
  return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" +
         std::to_string(d.z);
}

Error CudaKernel::launch(Dim3 grid, Dim3 block, unsigned dynamicSharedBytes,
                         CudaStream stream, llvm::ArrayRef<void *> params,
                         Dim3 cluster) const {
  auto hasZero = [](Dim3 d) { return !d.x || !d.y || !d.z; };
  for (auto [what, dims] : {std::pair<const char *, Dim3>{"grid", grid},
                            {"block", block},
                            {"cluster", cluster}})
    if (hasZero(dims))
      return invalidArgument("cannot launch " + name + ": " + what + " " +
                             formatDim3(dims) + " has a zero dimension");
  if (grid.x % cluster.x || grid.y % cluster.y || grid.z % cluster.z)
    return invalidArgument("cannot launch " + name + ": grid " +
                           formatDim3(grid) + " is not a multiple of cluster " +
                           formatDim3(cluster));

  CUlaunchAttribute attribute;
  std::memset(&attribute, 0, sizeof(attribute));
  attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attribute.value.clusterDim.x = cluster.x;
  attribute.value.clusterDim.y = cluster.y;
  attribute.value.clusterDim.z = cluster.z;
  bool clustered = cluster.x * cluster.y * cluster.z != 1;

  CUlaunchConfig config;
  std::memset(&config, 0, sizeof(config));
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = block.x;
  config.blockDimY = block.y;
  config.blockDimZ = block.z;
  config.sharedMemBytes = dynamicSharedBytes;
  config.hStream = stream;
  config.attrs = clustered ? &attribute : nullptr;
  config.numAttrs = clustered ? 1 : 0;

  const DriverApi &api = getDriver().api;
  if (!api.cuLaunchKernelEx)
    return missingEntryPoint("cuLaunchKernelEx");
  CUresult result = api.cuLaunchKernelEx(
      &config, function, const_cast<void **>(params.data()), nullptr);
  if (result == CUDA_SUCCESS)
    return Error::success();
  return driverError(result, "cuLaunchKernelEx", name,
                     "grid " + formatDim3(grid) + ", block " +
                         formatDim3(block) + ", cluster " +
                         formatDim3(cluster) + ", " +
                         std::to_string(dynamicSharedBytes) +
                         " bytes of dynamic shared memory, " +
                         std::to_string(params.size()) + " parameters");
}

//===----------------------------------------------------------------------===//
// Tensor maps
//===----------------------------------------------------------------------===//

size_t fa3::runtime::tensorMapElementSize(TensorMapDataType type) {
  switch (type) {
  case TensorMapDataType::UInt8:
    return 1;
  case TensorMapDataType::UInt16:
  case TensorMapDataType::Float16:
  case TensorMapDataType::BFloat16:
    return 2;
  case TensorMapDataType::UInt32:
  case TensorMapDataType::Int32:
  case TensorMapDataType::Float32:
  case TensorMapDataType::Float32Ftz:
  case TensorMapDataType::TFloat32:
  case TensorMapDataType::TFloat32Ftz:
    return 4;
  case TensorMapDataType::UInt64:
  case TensorMapDataType::Int64:
  case TensorMapDataType::Float64:
    return 8;
  }
  return 0;
}

static bool isFloatType(TensorMapDataType type) {
  switch (type) {
  case TensorMapDataType::Float16:
  case TensorMapDataType::Float32:
  case TensorMapDataType::Float64:
  case TensorMapDataType::BFloat16:
  case TensorMapDataType::Float32Ftz:
  case TensorMapDataType::TFloat32:
  case TensorMapDataType::TFloat32Ftz:
    return true;
  default:
    return false;
  }
}

static uint64_t swizzleBytes(TensorMapSwizzle swizzle) {
  switch (swizzle) {
  case TensorMapSwizzle::None:
    return 0;
  case TensorMapSwizzle::Bytes32:
    return 32;
  case TensorMapSwizzle::Bytes64:
    return 64;
  case TensorMapSwizzle::Bytes128:
    return 128;
  }
  return 0;
}

template <typename T> static std::string formatList(llvm::ArrayRef<T> values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i)
    s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

static std::string describeTensorMap(const TiledTensorMapDesc &desc) {
  return "dims " + formatList<uint64_t>(desc.globalDims) + ", strides " +
         formatList<uint64_t>(desc.globalStrides) + ", box " +
         formatList<uint32_t>(desc.boxDims) + ", address 0x" +
         llvm::utohexstr(desc.globalAddress, /*LowerCase=*/true);
}

Error fa3::runtime::validateTiledTensorMap(const TiledTensorMapDesc &desc,
                                           StringRef what) {
  auto bad = [&](const llvm::Twine &why) {
    return invalidArgument("tensor map for " + what + ": " + why);
  };
  size_t rank = desc.globalDims.size();
  bool interleaved = desc.interleave != TensorMapInterleave::None;
  uint64_t elementBytes = tensorMapElementSize(desc.dataType);
  if (rank < 1 || rank > 5)
    return bad("rank " + llvm::Twine(rank) + " is not in 1..5");
  if (interleaved && rank < 3)
    return bad("an interleaved layout needs rank 3 or more, not " +
               llvm::Twine(rank));
  if (desc.globalStrides.size() != rank - 1)
    return bad("globalStrides has " + llvm::Twine(desc.globalStrides.size()) +
               " entries; rank " + llvm::Twine(rank) + " needs " +
               llvm::Twine(rank - 1));
  if (desc.boxDims.size() != rank)
    return bad("boxDims has " + llvm::Twine(desc.boxDims.size()) +
               " entries; rank " + llvm::Twine(rank) + " needs " +
               llvm::Twine(rank));
  if (!desc.elementStrides.empty() && desc.elementStrides.size() != rank)
    return bad("elementStrides has " + llvm::Twine(desc.elementStrides.size()) +
               " entries; rank " + llvm::Twine(rank) + " needs " +
               llvm::Twine(rank));

  uint64_t addressAlign =
      desc.interleave == TensorMapInterleave::Bytes32 ? 32 : 16;
  if (desc.globalAddress % addressAlign)
    return bad("globalAddress 0x" +
               llvm::utohexstr(desc.globalAddress, /*LowerCase=*/true) +
               " is not " + llvm::Twine(addressAlign) + "-byte aligned");
  for (size_t i = 0; i < rank; ++i)
    if (desc.globalDims[i] == 0 || desc.globalDims[i] > (uint64_t(1) << 32))
      return bad("globalDims[" + llvm::Twine(i) + "] = " +
                 llvm::Twine(desc.globalDims[i]) + " is not in 1..2^32");
  uint64_t strideAlign = addressAlign;
  for (size_t i = 0; i + 1 < rank; ++i) {
    uint64_t stride = desc.globalStrides[i];
    if (stride % strideAlign)
      return bad("globalStrides[" + llvm::Twine(i) +
                 "] = " + llvm::Twine(stride) + " bytes is not a multiple of " +
                 llvm::Twine(strideAlign));
    if (stride >= (uint64_t(1) << 40))
      return bad("globalStrides[" + llvm::Twine(i) +
                 "] = " + llvm::Twine(stride) + " bytes is not below 2^40");
  }
  for (size_t i = 0; i < rank; ++i)
    if (desc.boxDims[i] == 0 || desc.boxDims[i] > 256)
      return bad("boxDims[" + llvm::Twine(i) +
                 "] = " + llvm::Twine(desc.boxDims[i]) + " is not in 1..256");
  for (size_t i = 0; i < desc.elementStrides.size(); ++i)
    if (desc.elementStrides[i] == 0 || desc.elementStrides[i] > 8)
      return bad("elementStrides[" + llvm::Twine(i) + "] = " +
                 llvm::Twine(desc.elementStrides[i]) + " is not in 1..8");

  uint64_t innerBoxBytes = desc.boxDims[0] * elementBytes;
  if (!interleaved && innerBoxBytes % 16)
    return bad("the inner box dimension, boxDims[0] = " +
               llvm::Twine(desc.boxDims[0]) + " elements of " +
               llvm::Twine(elementBytes) + " bytes, is " +
               llvm::Twine(innerBoxBytes) + " bytes, not a multiple of 16");
  if (uint64_t span = swizzleBytes(desc.swizzle);
      !interleaved && span && innerBoxBytes > span)
    return bad("the inner box dimension, boxDims[0] = " +
               llvm::Twine(desc.boxDims[0]) + " elements of " +
               llvm::Twine(elementBytes) + " bytes, is " +
               llvm::Twine(innerBoxBytes) + " bytes, wider than the " +
               llvm::Twine(span) + "-byte swizzle");
  if (desc.interleave == TensorMapInterleave::Bytes32 &&
      desc.swizzle != TensorMapSwizzle::Bytes32)
    return bad("a 32-byte interleaved layout needs the 32-byte swizzle");
  if (desc.oobFill == TensorMapOOBFill::NaNRequestZeroFMA &&
      !isFloatType(desc.dataType))
    return bad("the NaN out-of-bounds fill needs a floating-point data type");
  return Error::success();
}

Expected<TensorMap>
fa3::runtime::encodeTiledTensorMap(const TiledTensorMapDesc &desc,
                                   StringRef what) {
  if (Error err = validateTiledTensorMap(desc, what))
    return std::move(err);
  auto api = getInitializedApi();
  if (!api)
    return api.takeError();
  if (!(*api)->cuTensorMapEncodeTiled)
    return missingEntryPoint("cuTensorMapEncodeTiled");

  size_t rank = desc.globalDims.size();
  llvm::SmallVector<cuuint32_t, 5> elementStrides(desc.elementStrides.begin(),
                                                  desc.elementStrides.end());
  if (elementStrides.empty())
    elementStrides.assign(rank, 1);
  CUtensorMap encoded;
  std::memset(&encoded, 0, sizeof(encoded));
  // Public enums list the driver's values in the driver's order.
  CUresult result = (*api)->cuTensorMapEncodeTiled(
      &encoded, static_cast<CUtensorMapDataType>(desc.dataType),
      static_cast<cuuint32_t>(rank),
      reinterpret_cast<void *>(static_cast<uintptr_t>(desc.globalAddress)),
      desc.globalDims.data(), desc.globalStrides.data(), desc.boxDims.data(),
      elementStrides.data(),
      static_cast<CUtensorMapInterleave>(desc.interleave),
      static_cast<CUtensorMapSwizzle>(desc.swizzle),
      static_cast<CUtensorMapL2promotion>(desc.l2Promotion),
      static_cast<CUtensorMapFloatOOBfill>(desc.oobFill));
  if (result != CUDA_SUCCESS)
    return driverError(result, "cuTensorMapEncodeTiled", what,
                       describeTensorMap(desc));
  TensorMap map;
  std::memcpy(map.opaque, encoded.opaque, sizeof(map.opaque));
  return map;
}

// The casts above rely on the public enums mirroring the driver's.
static_assert(static_cast<int>(TensorMapDataType::BFloat16) ==
                  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
              "TensorMapDataType mirrors CUtensorMapDataType");
static_assert(static_cast<int>(TensorMapDataType::TFloat32Ftz) ==
                  CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ,
              "TensorMapDataType mirrors CUtensorMapDataType");
static_assert(static_cast<int>(TensorMapInterleave::Bytes32) ==
                  CU_TENSOR_MAP_INTERLEAVE_32B,
              "TensorMapInterleave mirrors CUtensorMapInterleave");
static_assert(static_cast<int>(TensorMapSwizzle::Bytes128) ==
                  CU_TENSOR_MAP_SWIZZLE_128B,
              "TensorMapSwizzle mirrors CUtensorMapSwizzle");
static_assert(static_cast<int>(TensorMapL2Promotion::Bytes256) ==
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              "TensorMapL2Promotion mirrors CUtensorMapL2promotion");
static_assert(static_cast<int>(TensorMapOOBFill::NaNRequestZeroFMA) ==
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
              "TensorMapOOBFill mirrors CUtensorMapFloatOOBfill");
static_assert(sizeof(TensorMap) == sizeof(CUtensorMap),
              "TensorMap is a CUtensorMap");

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

Expected<CudaEvent> CudaEvent::create(const CudaDevice &device) {
  if (Error err = device.makeCurrent())
    return std::move(err);
  CudaEvent event;
  if (Error err = callDriver("cuEventCreate", getDriver().api.cuEventCreate, "",
                             &event.event, CU_EVENT_DEFAULT))
    return std::move(err);
  return event;
}

CudaEvent::CudaEvent(CudaEvent &&other) noexcept
    : event(std::exchange(other.event, nullptr)) {}

CudaEvent &CudaEvent::operator=(CudaEvent &&other) noexcept {
  if (this != &other) {
    if (event)
      (void)getDriver().api.cuEventDestroy(event);
    event = std::exchange(other.event, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event)
    (void)getDriver().api.cuEventDestroy(event);
}

Error CudaEvent::record(CudaStream stream) {
  return callDriver("cuEventRecord", getDriver().api.cuEventRecord, "", event,
                    stream);
}

Error CudaEvent::synchronize() const {
  return callDriver("cuEventSynchronize", getDriver().api.cuEventSynchronize,
                    "", event);
}

Expected<float>
CudaEvent::elapsedMillisecondsSince(const CudaEvent &start) const {
  float ms = 0;
  if (Error err =
          callDriver("cuEventElapsedTime", getDriver().api.cuEventElapsedTime,
                     "", &ms, start.event, event))
    return std::move(err);
  return ms;
}
