//===- fa3_jax_ffi.cpp - XLA FFI handlers for fa3.jax ---------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The fa3._fa3_jax extension: XLA FFI handlers (the typed FFI of the headers
// jaxlib ships, `jax.ffi.include_dir()`) that run fa3's attention forward
// and backward over fa3's C API (include/fa3-c/FA3.h). python/fa3/jax.py
// registers them as the custom-call targets `fa3_attention_fwd` and
// `fa3_attention_bwd`, one handler per platform: "CUDA" launches the sm_90a
// kernels on XLA's stream, "cpu" runs the CPU pipeline on host buffers.
// The backward takes the LSE's gradient (zeros when nothing uses the LSE).
//
// The MLIR function to compile travels as a string attribute of the call, so
// a jitted or serialized computation carries everything its handler needs;
// each handler compiles it once per (device, function, tile) and keeps it for
// the process (fa3's on-disk kernel cache serves later processes).
//
//===----------------------------------------------------------------------===//

#include "fa3-c/FA3.h"

#include "xla/ffi/api/ffi.h"

#include <pybind11/pybind11.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace py = pybind11;
namespace ffi = xla::ffi;

namespace {

/// Takes ownership of a C API error string and turns it into an FFI error
/// naming the call that failed.
ffi::Error takeError(char *error, const char *call) {
  std::string message = std::string("fa3: ") + call + ": " +
                        (error ? error : "failed without a message");
  fa3_free_string(error);
  return ffi::Error::Internal(std::move(message));
}

/// The function names the Python side generates (fa3._spec.AttentionSpec).
constexpr const char *kForwardFunction = "attention";
constexpr const char *kBackwardFunction = "attention_grad";

//===----------------------------------------------------------------------===//
// Compiled-function caches
//===----------------------------------------------------------------------===//

// Kernels and CPU functions live until the process exits and are never
// destroyed: XLA may run a call on any thread at any time, and unloading CUDA
// modules during process teardown (after the driver has shut down) fails.

using CudaKey = std::tuple<int, std::string, bool>;

/// The CUDA kernel of `source` on `device`, compiled (or loaded from the
/// kernel cache) on first use. fa3 compiles for the current CUDA context's
/// device; XLA runs a call with its device's context current, and the check
/// below turns a mismatch into an error instead of a launch on the wrong GPU.
ffi::ErrorOr<const fa3_kernel *> cudaKernel(int device, std::string_view source,
                                            bool backward) {
  static std::mutex mutex;
  static std::map<CudaKey, fa3_kernel *> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  CudaKey key(device, std::string(source), backward);
  auto it = kernels.find(key);
  if (it != kernels.end())
    return it->second;
  char *error = nullptr;
  const std::string &text = std::get<1>(key);
  fa3_kernel *kernel =
      backward ? fa3_compile_attention_grad(text.c_str(), kBackwardFunction,
                                            0, 0, nullptr, &error)
               : fa3_compile_attention(text.c_str(), kForwardFunction, 0, 0,
                                       nullptr, &error);
  if (!kernel)
    return ffi::Unexpected(takeError(error, backward
                                                ? "fa3_compile_attention_grad"
                                                : "fa3_compile_attention"));
  if (fa3_kernel_device(kernel) != device) {
    int loadedOn = fa3_kernel_device(kernel);
    fa3_destroy_kernel(kernel);
    return ffi::Unexpected(ffi::Error::Internal(
        "fa3: XLA runs this call on CUDA device " + std::to_string(device) +
        " but the current CUDA context is device " + std::to_string(loadedOn)));
  }
  kernels.emplace(std::move(key), kernel);
  return kernel;
}

using CpuKey = std::tuple<std::string, bool>;

/// The CPU function of `source`, compiled on first use.
ffi::ErrorOr<const fa3_cpu_function *>
cpuFunction(std::string_view source, bool backward) {
  static std::mutex mutex;
  static std::map<CpuKey, fa3_cpu_function *> functions;
  std::lock_guard<std::mutex> lock(mutex);
  CpuKey key(std::string(source), backward);
  auto it = functions.find(key);
  if (it != functions.end())
    return it->second;
  char *error = nullptr;
  fa3_cpu_function *fn = fa3_cpu_compile(
      std::get<0>(key).c_str(), backward ? kBackwardFunction : kForwardFunction,
      0, 0, &error);
  if (!fn)
    return ffi::Unexpected(takeError(error, "fa3_cpu_compile"));
  functions.emplace(std::move(key), fn);
  return fn;
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

uint64_t address(const ffi::AnyBuffer &buffer) {
  return reinterpret_cast<uint64_t>(buffer.untyped_data());
}

/// (batch, seq_q, seq_k) of q [B, Sq, H, D] and k [B, Sk, H, D]; the Python
/// side checked the ranks and the LSE's type, this guards the handler against
/// a hand-made call.
ffi::ErrorOr<std::tuple<int64_t, int64_t, int64_t>>
sizes(const ffi::AnyBuffer &q, const ffi::AnyBuffer &k,
      const ffi::AnyBuffer &lse) {
  if (q.dimensions().size() != 4 || k.dimensions().size() != 4)
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        "fa3: q and k must be rank-4 [batch, seq, heads, head_dim] buffers"));
  if (lse.element_type() != ffi::DataType::F32)
    return ffi::Unexpected(
        ffi::Error::InvalidArgument("fa3: the LSE must be float32"));
  return std::make_tuple(q.dimensions()[0], q.dimensions()[1],
                         k.dimensions()[1]);
}

/// An XLA buffer as a fa3 host tensor (no copy).
ffi::ErrorOr<fa3_tensor> hostTensor(const ffi::AnyBuffer &buffer,
                                    const char *name) {
  fa3_tensor t{};
  switch (buffer.element_type()) {
  case ffi::DataType::F32:
    t.dtype = FA3_DTYPE_F32;
    break;
  case ffi::DataType::F16:
    t.dtype = FA3_DTYPE_F16;
    break;
  case ffi::DataType::BF16:
    t.dtype = FA3_DTYPE_BF16;
    break;
  default:
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        std::string("fa3: ") + name +
        " must be float32, float16 or bfloat16 on the CPU"));
  }
  auto dims = buffer.dimensions();
  if (dims.size() > FA3_MAX_RANK)
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        std::string("fa3: ") + name + " has too many dimensions"));
  t.rank = int(dims.size());
  for (int d = 0; d < t.rank; ++d)
    t.shape[d] = dims[d];
  t.data = buffer.untyped_data();
  return t;
}

/// Runs `fn` on host buffers and copies its results (allocated by fa3) into
/// XLA's result buffers, checking that each has the size XLA expects.
template <size_t NumInputs, size_t NumResults>
ffi::Error runOnHost(const fa3_cpu_function *fn,
                     const ffi::AnyBuffer *const (&inputs)[NumInputs],
                     const char *const (&inputNames)[NumInputs],
                     ffi::AnyBuffer *const (&results)[NumResults]) {
  fa3_tensor in[NumInputs];
  for (size_t i = 0; i < NumInputs; ++i) {
    auto t = hostTensor(*inputs[i], inputNames[i]);
    if (t.has_error())
      return t.error();
    in[i] = *t;
  }
  fa3_tensor out[NumResults] = {};
  char *error = nullptr;
  if (fa3_cpu_run(fn, in, int(NumInputs), out, int(NumResults), &error) != 0)
    return takeError(error, "fa3_cpu_run");
  ffi::Error status = ffi::Error::Success();
  for (size_t i = 0; i < NumResults; ++i) {
    int64_t elements = 1;
    for (int d = 0; d < out[i].rank; ++d)
      elements *= out[i].shape[d];
    size_t bytes = size_t(elements) * (out[i].dtype == FA3_DTYPE_F32 ? 4 : 2);
    if (bytes != results[i]->size_bytes()) {
      status =
          ffi::Error::Internal("fa3: result #" + std::to_string(i) + " has " +
                               std::to_string(bytes) + " bytes, XLA expects " +
                               std::to_string(results[i]->size_bytes()));
    } else if (bytes) {
      std::memcpy(results[i]->untyped_data(), out[i].data, bytes);
    }
    fa3_free_tensor_data(&out[i]);
  }
  return status;
}

//===----------------------------------------------------------------------===//
// Handlers
//===----------------------------------------------------------------------===//

ffi::Error forwardCuda(void *stream, int32_t device, ffi::AnyBuffer q,
                       ffi::AnyBuffer k, ffi::AnyBuffer v,
                       ffi::Result<ffi::AnyBuffer> o,
                       ffi::Result<ffi::AnyBuffer> lse,
                       std::string_view source) {
  auto dims = sizes(q, k, *lse);
  if (dims.has_error())
    return dims.error();
  auto [batch, seqQ, seqK] = *dims;
  auto kernel = cudaKernel(device, source, /*backward=*/false);
  if (kernel.has_error())
    return kernel.error();
  char *error = nullptr;
  if (fa3_launch_attention(*kernel, address(q), address(k), address(v),
                           reinterpret_cast<uint64_t>(o->untyped_data()),
                           reinterpret_cast<uint64_t>(lse->untyped_data()),
                           batch, seqQ, seqK, stream, &error) != 0)
    return takeError(error, "fa3_launch_attention");
  return ffi::Error::Success();
}

ffi::Error backwardCuda(void *stream, int32_t device, ffi::AnyBuffer dO,
                        ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                        ffi::AnyBuffer o, ffi::AnyBuffer lse,
                        ffi::AnyBuffer gradLse, ffi::Result<ffi::AnyBuffer> dQ,
                        ffi::Result<ffi::AnyBuffer> dK,
                        ffi::Result<ffi::AnyBuffer> dV,
                        ffi::Result<ffi::AnyBuffer> workspace,
                        std::string_view source) {
  auto dims = sizes(q, k, lse);
  if (dims.has_error())
    return dims.error();
  auto [batch, seqQ, seqK] = *dims;
  auto kernel = cudaKernel(device, source, /*backward=*/true);
  if (kernel.has_error())
    return kernel.error();
  int64_t bytes = fa3_attention_grad_workspace_size(*kernel, batch, seqQ, seqK);
  if (bytes < 0)
    return ffi::Error::Internal(
        "fa3: fa3_attention_grad_workspace_size failed");
  // The workspace (the f32 dQ accumulator, per-row statistics) is the call's
  // last result, sized by fa3.jax with 256 bytes to spare for the alignment
  // the launch needs (XLA's FFI scratch allocator gives nothing on jax's GPU
  // backend). The launch initializes it.
  uint64_t base = reinterpret_cast<uint64_t>(workspace->untyped_data());
  uint64_t aligned = (base + 255) / 256 * 256;
  if (aligned - base + uint64_t(bytes) > workspace->size_bytes())
    return ffi::Error::InvalidArgument(
        "fa3: the backward workspace has " +
        std::to_string(workspace->size_bytes()) + " bytes; this launch needs " +
        std::to_string(bytes) + " at a 256-byte aligned address");
  char *error = nullptr;
  if (fa3_launch_attention_grad(
          *kernel, address(dO), address(q), address(k), address(v), address(o),
          reinterpret_cast<uint64_t>(lse.untyped_data()), address(gradLse),
          reinterpret_cast<uint64_t>(dQ->untyped_data()),
          reinterpret_cast<uint64_t>(dK->untyped_data()),
          reinterpret_cast<uint64_t>(dV->untyped_data()), aligned, batch, seqQ,
          seqK, stream, &error) != 0)
    return takeError(error, "fa3_launch_attention_grad");
  return ffi::Error::Success();
}

ffi::Error forwardCpu(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                      ffi::Result<ffi::AnyBuffer> o,
                      ffi::Result<ffi::AnyBuffer> lse,
                      std::string_view source) {
  auto fn = cpuFunction(source, /*backward=*/false);
  if (fn.has_error())
    return fn.error();
  return runOnHost<3, 2>(*fn, {&q, &k, &v}, {"q", "k", "v"}, {&*o, &*lse});
}

ffi::Error
backwardCpu(ffi::AnyBuffer dO, ffi::AnyBuffer q, ffi::AnyBuffer k,
            ffi::AnyBuffer v, ffi::AnyBuffer o, ffi::AnyBuffer lse,
            ffi::AnyBuffer gradLse, ffi::Result<ffi::AnyBuffer> dQ,
            ffi::Result<ffi::AnyBuffer> dK, ffi::Result<ffi::AnyBuffer> dV,
            ffi::Result<ffi::AnyBuffer> /*workspace: none on the CPU*/,
            std::string_view source) {
  auto fn = cpuFunction(source, /*backward=*/true);
  if (fn.has_error())
    return fn.error();
  return runOnHost<7, 3>(*fn, {&dO, &q, &k, &v, &o, &lse, &gradLse},
                         {"grad_out", "q", "k", "v", "out", "lse", "grad_lse"},
                         {&*dQ, &*dK, &*dV});
}

} // namespace

// One call signature per direction, shared by the platforms' handlers
// (what fa3.jax's ffi_call passes); each platform prepends its context.

/// (q, k, v) -> (o, lse), attribute source (the MLIR function, its
/// schedule written in where the runtime chose one).
template <typename Binding> static auto forwardSignature(Binding binding) {
  return std::move(binding)
      .template Arg<ffi::AnyBuffer>() // q
      .template Arg<ffi::AnyBuffer>() // k
      .template Arg<ffi::AnyBuffer>() // v
      .template Ret<ffi::AnyBuffer>() // o
      .template Ret<ffi::AnyBuffer>() // lse
      .template Attr<std::string_view>("source");
}

/// (grad_out, q, k, v, out, lse, grad_lse) -> (grad_q, grad_k, grad_v,
/// workspace), attribute source.
template <typename Binding> static auto backwardSignature(Binding binding) {
  return std::move(binding)
      .template Arg<ffi::AnyBuffer>() // grad_out
      .template Arg<ffi::AnyBuffer>() // q
      .template Arg<ffi::AnyBuffer>() // k
      .template Arg<ffi::AnyBuffer>() // v
      .template Arg<ffi::AnyBuffer>() // out
      .template Arg<ffi::AnyBuffer>() // lse
      .template Arg<ffi::AnyBuffer>() // grad_lse
      .template Ret<ffi::AnyBuffer>() // grad_q
      .template Ret<ffi::AnyBuffer>() // grad_k
      .template Ret<ffi::AnyBuffer>() // grad_v
      .template Ret<ffi::AnyBuffer>() // workspace
      .template Attr<std::string_view>("source");
}

/// XLA's stream and device ordinal, for the CUDA handlers.
static auto cudaContext() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<void *>>()
      .Ctx<ffi::DeviceOrdinal>();
}

XLA_FFI_DEFINE_HANDLER(kForwardCuda, forwardCuda,
                       forwardSignature(cudaContext()));
XLA_FFI_DEFINE_HANDLER(kBackwardCuda, backwardCuda,
                       backwardSignature(cudaContext()));
XLA_FFI_DEFINE_HANDLER(kForwardCpu, forwardCpu,
                       forwardSignature(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER(kBackwardCpu, backwardCpu,
                       backwardSignature(ffi::Ffi::Bind()));

PYBIND11_MODULE(_fa3_jax, m) {
  m.doc() = "XLA FFI handlers of fa3's attention (see fa3.jax)";
  // {target name: {platform: handler capsule}} for
  // jax.ffi.register_ffi_target.
  m.def("registrations", [] {
    auto capsule = [](XLA_FFI_Handler *handler) {
      return py::capsule(reinterpret_cast<void *>(handler));
    };
    py::dict forward, backward, all;
    forward["CUDA"] = capsule(kForwardCuda);
    forward["cpu"] = capsule(kForwardCpu);
    backward["CUDA"] = capsule(kBackwardCuda);
    backward["cpu"] = capsule(kBackwardCpu);
    all["fa3_attention_fwd"] = forward;
    all["fa3_attention_bwd"] = backward;
    return all;
  });
}
