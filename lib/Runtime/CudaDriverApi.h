//===- CudaDriverApi.h - The CUDA driver API slice fa3 uses -----*- C++ -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// fa3 builds without the CUDA toolkit and loads libcuda.so.1 at run time, so
// it declares the few driver types, enum values and entry points it calls
// instead of including <cuda.h>. Every value below is part of the driver's
// stable ABI and was copied from cuda.h of CUDA 13.0 (CUDA_VERSION 13000);
// the layouts are the ones that header gives. Private to lib/Runtime.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_LIB_RUNTIME_CUDADRIVERAPI_H
#define FA3_LIB_RUNTIME_CUDADRIVERAPI_H

#include <cstddef>
#include <cstdint>

// The handle types are pointers to the same incomplete structs cuda.h names,
// so that code including both sees one type.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;

namespace fa3::runtime::cuda {

using cuuint32_t = uint32_t;
using cuuint64_t = uint64_t;

using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = CUctx_st *;
using CUmodule = CUmod_st *;
using CUfunction = CUfunc_st *;
using CUstream = CUstream_st *;
using CUevent = CUevent_st *;

/// cudaError_enum; only the values fa3 tests for. The driver names every
/// code through cuGetErrorName, so the rest need no declaration.
enum CUresult : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_NOT_FOUND = 500,
};

/// CUdevice_attribute_enum.
enum CUdevice_attribute : int {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120,
};

/// CUfunction_attribute_enum.
enum CUfunction_attribute : int {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

/// CUjit_option_enum.
enum CUjit_option : int {
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_LOG_VERBOSE = 12,
};

/// CUevent_flags_enum.
enum CUstreamCaptureStatus : int {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};

enum CUevent_flags : unsigned {
  CU_EVENT_DEFAULT = 0x0,
};

/// CUdriverProcAddress_flags_enum.
enum CUdriverProcAddress_flags : unsigned long long {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
};

/// CUdriverProcAddressQueryResult_enum.
enum CUdriverProcAddressQueryResult : int {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

//===----------------------------------------------------------------------===//
// Tensor maps (TMA descriptors)
//===----------------------------------------------------------------------===//

/// CUtensorMap_st: 16 opaque quadwords. cuda.h 13.0 aligns it to 128 bytes;
/// cuTensorMapEncodeTiled itself requires 64.
struct alignas(128) CUtensorMap {
  cuuint64_t opaque[16];
};
static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");

enum CUtensorMapDataType : int {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
  CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
  CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
  CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
  CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4,
  CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8,
  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ = 10,
  CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 = 11,
  CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ = 12,
};

enum CUtensorMapInterleave : int {
  CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
  CU_TENSOR_MAP_INTERLEAVE_16B = 1,
  CU_TENSOR_MAP_INTERLEAVE_32B = 2,
};

enum CUtensorMapSwizzle : int {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_32B = 1,
  CU_TENSOR_MAP_SWIZZLE_64B = 2,
  CU_TENSOR_MAP_SWIZZLE_128B = 3,
};

enum CUtensorMapL2promotion : int {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
  CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1,
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
};

enum CUtensorMapFloatOOBfill : int {
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1,
};

//===----------------------------------------------------------------------===//
// cuLaunchKernelEx
//===----------------------------------------------------------------------===//

/// CUlaunchAttributeID_enum.
enum CUlaunchAttributeID : int {
  CU_LAUNCH_ATTRIBUTE_IGNORE = 0,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
};

/// CUlaunchAttributeValue_union, padded to 64 bytes; fa3 sets clusterDim.
union CUlaunchAttributeValue {
  char pad[64];
  struct {
    unsigned int x;
    unsigned int y;
    unsigned int z;
  } clusterDim;
};

/// CUlaunchAttribute_st.
struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
};
static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute layout");

/// CUlaunchConfig_st.
struct CUlaunchConfig {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
};

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

/// The CUDA version fa3 asks cuGetProcAddress for: entry points with the
/// semantics of CUDA 12.0, the first with cuLaunchKernelEx and tensor maps.
constexpr int kRequestedCudaVersion = 12000;

/// X(name, exported symbol, parameter list) for each entry point fa3 calls.
/// `name` is what cuGetProcAddress takes; the exported symbol is the
/// versioned one cuda.h maps `name` to, used when cuGetProcAddress is absent.
#define FA3_CUDA_DRIVER_ENTRY_POINTS(X)                                        \
  X(cuInit, "cuInit", (unsigned int flags))                                    \
  X(cuDriverGetVersion, "cuDriverGetVersion", (int *version))                  \
  X(cuGetErrorName, "cuGetErrorName", (CUresult error, const char **str))      \
  X(cuGetErrorString, "cuGetErrorString", (CUresult error, const char **str))  \
  X(cuDeviceGetCount, "cuDeviceGetCount", (int *count))                        \
  X(cuDeviceGet, "cuDeviceGet", (CUdevice * device, int ordinal))              \
  X(cuDeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice dev))   \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute",                              \
    (int *value, CUdevice_attribute attribute, CUdevice dev))                  \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t * bytes, CUdevice dev))   \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                      \
    (CUcontext * context, CUdevice dev))                                       \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", (CUcontext * context))                 \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext context))                   \
  X(cuCtxGetDevice, "cuCtxGetDevice", (CUdevice * device))                     \
  X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext context))              \
  X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext * context))              \
  X(cuCtxSynchronize, "cuCtxSynchronize", ())                                  \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr * ptr, size_t bytes))            \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr ptr))                              \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2",                                           \
    (CUdeviceptr dst, const void *src, size_t bytes))                          \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2",                                           \
    (void *dst, CUdeviceptr src, size_t bytes))                                \
  X(cuMemsetD8, "cuMemsetD8_v2",                                               \
    (CUdeviceptr dst, unsigned char value, size_t count))                      \
  X(cuMemsetD32Async, "cuMemsetD32Async",                                      \
    (CUdeviceptr dst, unsigned int value, size_t count, CUstream stream))      \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx",                                  \
    (CUmodule * module, const void *image, unsigned int numOptions,            \
     CUjit_option *options, void **optionValues))                              \
  X(cuModuleUnload, "cuModuleUnload", (CUmodule module))                       \
  X(cuModuleGetFunction, "cuModuleGetFunction",                                \
    (CUfunction * function, CUmodule module, const char *name))                \
  X(cuFuncGetAttribute, "cuFuncGetAttribute",                                  \
    (int *value, CUfunction_attribute attribute, CUfunction function))         \
  X(cuFuncSetAttribute, "cuFuncSetAttribute",                                  \
    (CUfunction function, CUfunction_attribute attribute, int value))          \
  X(cuLaunchKernelEx, "cuLaunchKernelEx",                                      \
    (const CUlaunchConfig *config, CUfunction function, void **kernelParams,   \
     void **extra))                                                            \
  X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream stream))             \
  X(cuStreamIsCapturing, "cuStreamIsCapturing",                                \
    (CUstream stream, CUstreamCaptureStatus * status))                         \
  X(cuEventCreate, "cuEventCreate", (CUevent * event, unsigned int flags))     \
  X(cuEventDestroy, "cuEventDestroy_v2", (CUevent event))                      \
  X(cuEventRecord, "cuEventRecord", (CUevent event, CUstream stream))          \
  X(cuEventSynchronize, "cuEventSynchronize", (CUevent event))                 \
  X(cuEventElapsedTime, "cuEventElapsedTime",                                  \
    (float *milliseconds, CUevent start, CUevent end))                         \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled",                          \
    (CUtensorMap * tensorMap, CUtensorMapDataType dataType, cuuint32_t rank,   \
     void *globalAddress, const cuuint64_t *globalDim,                         \
     const cuuint64_t *globalStrides, const cuuint32_t *boxDim,                \
     const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,       \
     CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,           \
     CUtensorMapFloatOOBfill oobFill))

/// cuGetProcAddress_v2 (CUDA 12.0 on) and its CUDA 11.3 predecessor.
using PFN_cuGetProcAddress_v2 = CUresult (*)(
    const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult *symbolStatus);
using PFN_cuGetProcAddress_v1 = CUresult (*)(const char *symbol, void **pfn,
                                             int cudaVersion, cuuint64_t flags);

/// The resolved entry points; null where the loaded driver lacks one.
struct DriverApi {
#define FA3_DECLARE_ENTRY_POINT(name, symbol, params)                          \
  CUresult(*name) params = nullptr;
  FA3_CUDA_DRIVER_ENTRY_POINTS(FA3_DECLARE_ENTRY_POINT)
#undef FA3_DECLARE_ENTRY_POINT
};

} // namespace fa3::runtime::cuda

#endif // FA3_LIB_RUNTIME_CUDADRIVERAPI_H
