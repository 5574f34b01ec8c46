//===- fa3_module.cpp - The fa3._fa3 Python extension -------------------------===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// pybind11 bindings over fa3's C API (include/fa3-c/FA3.h, libfa3): the CPU
// JIT on numpy buffers and the CUDA JIT on device pointers. The module links
// only the C API, so it builds in seconds against a prebuilt libfa3 (the
// GPU machine's Python and pybind11 with the bundle's library). Python-level
// argument checking, torch integration and caching live in python/fa3.
//
//===----------------------------------------------------------------------===//

#include "fa3-c/FA3.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

/// A failure reported by fa3 (compile errors, CUDA driver errors): raised in
/// Python as fa3._fa3.Error, a RuntimeError.
struct Fa3Exception : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Takes ownership of a C API error string and throws it.
[[noreturn]] void raise(char *error, const char *fallback) {
  std::string message = error ? error : fallback;
  fa3_free_string(error);
  throw Fa3Exception(message);
}

/// numpy dtype <-> fa3 dtype. bf16 arrives as ml_dtypes.bfloat16, which numpy
/// sees as a 2-byte void-kind dtype named "bfloat16".
int dtypeOf(const py::dtype &dtype) {
  if (dtype.is(py::dtype::of<float>()))
    return FA3_DTYPE_F32;
  std::string name = py::str(dtype.attr("name"));
  if (name == "float16")
    return FA3_DTYPE_F16;
  if (name == "bfloat16")
    return FA3_DTYPE_BF16;
  if (name == "float32")
    return FA3_DTYPE_F32;
  if (name == "int32")
    return FA3_DTYPE_I32;
  if (name == "int64")
    return FA3_DTYPE_I64;
  throw py::type_error("fa3 CPU tensors must be float32, float16, bfloat16, "
                       "(offsets, lengths, page tables) int32 or (dropout's "
                       "seed and offset) int64, got " +
                       name);
}

py::dtype numpyDtype(int dtype) {
  switch (dtype) {
  case FA3_DTYPE_F16:
    return py::dtype("float16");
  case FA3_DTYPE_BF16:
    return py::dtype::from_args(
        py::module_::import("ml_dtypes").attr("bfloat16"));
  case FA3_DTYPE_I32:
    return py::dtype("int32");
  case FA3_DTYPE_I64:
    return py::dtype("int64");
  default:
    return py::dtype::of<float>();
  }
}

class CpuFunction {
public:
  CpuFunction(const std::string &mlir, const std::string &function,
              int64_t blockM, int64_t blockN) {
    char *error = nullptr;
    fn = fa3_cpu_compile(mlir.c_str(), function.c_str(), blockM, blockN,
                         &error);
    if (!fn)
      raise(error, "fa3_cpu_compile failed");
  }
  ~CpuFunction() { fa3_cpu_destroy(fn); }
  CpuFunction(const CpuFunction &) = delete;
  CpuFunction &operator=(const CpuFunction &) = delete;

  double compileMs() const { return fa3_cpu_compile_ms(fn); }
  bool cacheHit() const { return fa3_cpu_cache_hit(fn) != 0; }
  int numInputs() const { return fa3_cpu_num_inputs(fn); }
  int numResults() const { return fa3_cpu_num_results(fn); }

  /// Runs on C-contiguous arrays; returns new arrays.
  py::list run(const std::vector<py::array> &arrays) const {
    std::vector<fa3_tensor> inputs(arrays.size());
    for (size_t i = 0; i < arrays.size(); ++i) {
      const py::array &a = arrays[i];
      if (!(a.flags() & py::array::c_style))
        throw py::value_error("input #" + std::to_string(i) +
                              " must be C-contiguous");
      if (a.ndim() > FA3_MAX_RANK)
        throw py::value_error("input #" + std::to_string(i) +
                              " has too many dimensions");
      fa3_tensor &t = inputs[i];
      t.dtype = dtypeOf(a.dtype());
      t.rank = int(a.ndim());
      for (int d = 0; d < t.rank; ++d)
        t.shape[d] = a.shape(d);
      t.data = const_cast<void *>(a.data());
    }
    std::vector<fa3_tensor> outputs(numResults());
    char *error = nullptr;
    int rc;
    {
      py::gil_scoped_release release;
      rc = fa3_cpu_run(fn, inputs.data(), int(inputs.size()), outputs.data(),
                       int(outputs.size()), &error);
    }
    if (rc != 0)
      raise(error, "fa3_cpu_run failed");
    py::list results;
    for (fa3_tensor &t : outputs) {
      std::vector<py::ssize_t> shape(t.shape, t.shape + t.rank);
      py::array out(numpyDtype(t.dtype), shape);
      std::memcpy(out.mutable_data(), t.data, out.nbytes());
      fa3_free_tensor_data(&t);
      results.append(out);
    }
    return results;
  }

private:
  fa3_cpu_function *fn = nullptr;
};

/// Owns an fa3_kernel from one of the C API's compile entry points, called
/// without the GIL (compiles take seconds); raises the C API's error.
class OwnedKernel {
public:
  OwnedKernel(const OwnedKernel &) = delete;
  OwnedKernel &operator=(const OwnedKernel &) = delete;
  ~OwnedKernel() { fa3_destroy_kernel(kernel); }

  std::string name() const { return fa3_kernel_name(kernel); }
  std::string ptx() const { return fa3_kernel_ptx(kernel); }
  double compileMs() const { return fa3_kernel_compile_ms(kernel); }
  int device() const { return fa3_kernel_device(kernel); }

  bool cacheHit = false;

protected:
  /// `compile(&hit, &error)` returns the kernel or NULL.
  template <typename Compile>
  OwnedKernel(Compile &&compile, const char *failure) {
    char *error = nullptr;
    int hit = 0;
    {
      py::gil_scoped_release release;
      kernel = compile(&hit, &error);
    }
    if (!kernel)
      raise(error, failure);
    cacheHit = hit != 0;
  }

  fa3_kernel *kernel = nullptr;
};

/// A compiled Hopper kernel: a forward, a backward, or PTX only.
class CudaKernel : public OwnedKernel {
public:
  enum class Kind { Forward, Backward, PtxOnly };

  CudaKernel(const std::string &mlir, const std::string &function, Kind kind,
             int64_t blockM, int64_t blockN)
      : OwnedKernel(
            [&](int *hit, char **error) {
              const char *src = mlir.c_str(), *fn = function.c_str();
              switch (kind) {
              case Kind::Forward:
                return fa3_compile_attention(src, fn, blockM, blockN, hit,
                                             error);
              case Kind::Backward:
                return fa3_compile_attention_grad(src, fn, blockM, blockN, hit,
                                                  error);
              case Kind::PtxOnly:
                break;
              }
              return fa3_compile_ptx(src, fn, blockM, blockN, hit, error);
            },
            "fa3: compiling the kernel failed"),
        kind(kind) {}

  /// A dense forward; `rng` (the Philox seed and offset, i64 [2] on the
  /// device) for a kernel compiled with dropout, else 0.
  void launch(uint64_t q, uint64_t k, uint64_t v, uint64_t out, uint64_t lse,
              int64_t batch, int64_t seqQ, int64_t seqK, uint64_t stream,
              uint64_t rng) {
    char *error = nullptr;
    int rc =
        rng ? fa3_launch_attention_dropout(
                  kernel, q, k, v, out, lse, rng, batch, seqQ, seqK,
                  reinterpret_cast<void *>(stream), &error)
            : fa3_launch_attention(kernel, q, k, v, out, lse, batch, seqQ, seqK,
                                   reinterpret_cast<void *>(stream), &error);
    if (rc != 0)
      raise(error, "fa3_launch_attention failed");
  }

  /// fa3.attention_kvcache forwards: contiguous caches and i32 lengths.
  void launchKVCache(uint64_t q, uint64_t kCache, uint64_t vCache, uint64_t out,
                     uint64_t lse, uint64_t cacheSeqlens, int64_t batch,
                     int64_t seqQ, int64_t cacheRows, uint64_t stream) {
    char *error = nullptr;
    if (fa3_launch_attention_kvcache(
            kernel, q, kCache, vCache, out, lse, cacheSeqlens, batch, seqQ,
            cacheRows, reinterpret_cast<void *>(stream), &error) != 0)
      raise(error, "fa3_launch_attention_kvcache failed");
  }

  /// Paged fa3.attention_kvcache forwards: [num_pages, page_size, Hkv, D]
  /// caches read through an i32 [B, table_width] page table.
  void launchPagedKVCache(uint64_t q, uint64_t kCache, uint64_t vCache,
                          uint64_t out, uint64_t lse, uint64_t cacheSeqlens,
                          uint64_t pageTable, int64_t batch, int64_t seqQ,
                          int64_t numPages, int64_t pageSize,
                          int64_t tableWidth, uint64_t stream) {
    char *error = nullptr;
    if (fa3_launch_attention_paged_kvcache(
            kernel, q, kCache, vCache, out, lse, cacheSeqlens, pageTable, batch,
            seqQ, numPages, pageSize, tableWidth,
            reinterpret_cast<void *>(stream), &error) != 0)
      raise(error, "fa3_launch_attention_paged_kvcache failed");
  }

  /// Split-KV fa3.attention_kvcache forwards on a contiguous cache: as
  /// launchKVCache, plus the partial attentions' workspace
  /// (forwardWorkspaceBytes).
  void launchKVCacheSplits(uint64_t q, uint64_t kCache, uint64_t vCache,
                           uint64_t out, uint64_t lse, uint64_t cacheSeqlens,
                           uint64_t workspace, int64_t batch, int64_t seqQ,
                           int64_t cacheRows, uint64_t stream) {
    char *error = nullptr;
    if (fa3_launch_attention_kvcache_splits(
            kernel, q, kCache, vCache, out, lse, cacheSeqlens, workspace, batch,
            seqQ, cacheRows, reinterpret_cast<void *>(stream), &error) != 0)
      raise(error, "fa3_launch_attention_kvcache_splits failed");
  }

  /// Split-KV paged fa3.attention_kvcache forwards.
  void launchPagedKVCacheSplits(uint64_t q, uint64_t kCache, uint64_t vCache,
                                uint64_t out, uint64_t lse,
                                uint64_t cacheSeqlens, uint64_t pageTable,
                                uint64_t workspace, int64_t batch, int64_t seqQ,
                                int64_t numPages, int64_t pageSize,
                                int64_t tableWidth, uint64_t stream) {
    char *error = nullptr;
    if (fa3_launch_attention_paged_kvcache_splits(
            kernel, q, kCache, vCache, out, lse, cacheSeqlens, pageTable,
            workspace, batch, seqQ, numPages, pageSize, tableWidth,
            reinterpret_cast<void *>(stream), &error) != 0)
      raise(error, "fa3_launch_attention_paged_kvcache_splits failed");
  }

  /// fa3.attention_varlen forwards: packed [T, H, D] tensors, i32 offsets
  /// [B + 1] and, for a kernel compiled with it, seqused_k [B] (else 0).
  void launchVarlen(uint64_t q, uint64_t k, uint64_t v, uint64_t out,
                    uint64_t lse, uint64_t cuSeqlensQ, uint64_t cuSeqlensK,
                    uint64_t sequsedK, int64_t batch, int64_t totalQ,
                    int64_t totalK, int64_t maxSeqlenQ, uint64_t stream) {
    char *error = nullptr;
    if (fa3_launch_attention_varlen(
            kernel, q, k, v, out, lse, cuSeqlensQ, cuSeqlensK, sequsedK, batch,
            totalQ, totalK, maxSeqlenQ, reinterpret_cast<void *>(stream),
            &error) != 0)
      raise(error, "fa3_launch_attention_varlen failed");
  }

  /// FP8 forwards: e4m3 q/k/v, f32 descales [B, Hkv], V' workspace.
  void launchFP8(uint64_t q, uint64_t k, uint64_t v, uint64_t out,
                 uint64_t lse, uint64_t qDescale, uint64_t kDescale,
                 uint64_t vDescale, uint64_t workspace, int64_t batch,
                 int64_t seqQ, int64_t seqK, uint64_t stream) {
    char *error = nullptr;
    if (fa3_launch_attention_fp8(kernel, q, k, v, out, lse, qDescale, kDescale,
                                 vDescale, workspace, batch, seqQ, seqK,
                                 reinterpret_cast<void *>(stream),
                                 &error) != 0)
      raise(error, "fa3_launch_attention_fp8 failed");
  }

  int64_t forwardWorkspaceBytes(int64_t batch, int64_t seqQ,
                                int64_t seqK) const {
    int64_t bytes = fa3_attention_workspace_size(kernel, batch, seqQ, seqK);
    if (bytes < 0)
      throw Fa3Exception("forward_workspace_bytes: not a forward kernel, or "
                         "a negative size");
    return bytes;
  }

  int64_t workspaceBytes(int64_t batch, int64_t seqQ, int64_t seqK) const {
    int64_t bytes =
        fa3_attention_grad_workspace_size(kernel, batch, seqQ, seqK);
    if (bytes < 0)
      throw Fa3Exception("workspace_bytes: not a backward kernel, or a "
                         "negative size");
    return bytes;
  }

  void launchGrad(uint64_t gradOut, uint64_t q, uint64_t k, uint64_t v,
                  uint64_t out, uint64_t lse, uint64_t gradQ, uint64_t gradK,
                  uint64_t gradV, uint64_t workspace, int64_t batch,
                  int64_t seqQ, int64_t seqK, uint64_t stream, uint64_t gradLse,
                  uint64_t rng) {
    char *error = nullptr;
    int rc = rng ? fa3_launch_attention_grad_dropout(
                       kernel, gradOut, q, k, v, out, lse, gradLse, rng, gradQ,
                       gradK, gradV, workspace, batch, seqQ, seqK,
                       reinterpret_cast<void *>(stream), &error)
                 : fa3_launch_attention_grad(
                       kernel, gradOut, q, k, v, out, lse, gradLse, gradQ,
                       gradK, gradV, workspace, batch, seqQ, seqK,
                       reinterpret_cast<void *>(stream), &error);
    if (rc != 0)
      raise(error, "fa3_launch_attention_grad failed");
  }

  /// fa3.attention_varlen_grad backwards: launchGrad's tensors packed
  /// ([T, H, D], LSE and dLSE [Hq, Tq]), the i32 offsets [B + 1], seqused_k
  /// [B] for a kernel compiled with it (else 0), and the longest sequence's
  /// query and key counts.
  void launchVarlenGrad(uint64_t gradOut, uint64_t q, uint64_t k, uint64_t v,
                        uint64_t out, uint64_t lse, uint64_t gradLse,
                        uint64_t cuSeqlensQ, uint64_t cuSeqlensK,
                        uint64_t sequsedK, uint64_t gradQ, uint64_t gradK,
                        uint64_t gradV, uint64_t workspace, int64_t batch,
                        int64_t totalQ, int64_t totalK, int64_t maxSeqlenQ,
                        int64_t maxSeqlenK, uint64_t stream) {
    char *error = nullptr;
    if (fa3_launch_attention_varlen_grad(
            kernel, gradOut, q, k, v, out, lse, gradLse, cuSeqlensQ, cuSeqlensK,
            sequsedK, gradQ, gradK, gradV, workspace, batch, totalQ, totalK,
            maxSeqlenQ, maxSeqlenK, reinterpret_cast<void *>(stream),
            &error) != 0)
      raise(error, "fa3_launch_attention_varlen_grad failed");
  }

  Kind kind;
};

/// The kernels of an fa3.quantize function (FP8 input preparation).
class QuantizeKernel : public OwnedKernel {
public:
  QuantizeKernel(const std::string &mlir, const std::string &function)
      : OwnedKernel(
            [&](int *hit, char **error) {
              return fa3_compile_quantize(mlir.c_str(), function.c_str(), hit,
                                          error);
            },
            "fa3_compile_quantize failed") {}

  int64_t workspaceBytes(int64_t batch) const {
    int64_t bytes = fa3_quantize_workspace_size(kernel, batch);
    if (bytes < 0)
      throw py::value_error("workspace_bytes: negative batch");
    return bytes;
  }

  void launch(uint64_t input, uint64_t output, uint64_t descale,
              uint64_t workspace, int64_t batch, int64_t seq,
              uint64_t stream) {
    char *error = nullptr;
    if (fa3_launch_quantize(kernel, input, output, descale, workspace, batch,
                            seq, reinterpret_cast<void *>(stream),
                            &error) != 0)
      raise(error, "fa3_launch_quantize failed");
  }
};

} // namespace

PYBIND11_MODULE(_fa3, m) {
  m.doc() = "fa3's compiler and runtime (through libfa3's C API)";
  py::register_exception<Fa3Exception>(m, "Error", PyExc_RuntimeError);
  m.def("version", [] { return std::string(fa3_version()); });
  m.def(
      "select_num_splits",
      [](int64_t workTiles, int64_t multiprocessors, int64_t keyBlocks,
         int64_t maxSplits) {
        return fa3_select_num_splits(workTiles, multiprocessors, keyBlocks,
                                     maxSplits);
      },
      py::arg("work_tiles"), py::arg("multiprocessors"), py::arg("key_blocks"),
      py::arg("max_splits") = 128,
      "How many key splits a split-KV attention of work_tiles (batch, head, "
      "query tile) units over key_blocks key blocks takes on that many SMs "
      "(FlashAttention-3's wave-efficiency rule)");
  m.def(
      "should_pack_gqa",
      [](int64_t seqQ, int64_t groupSize, int64_t blockM) {
        return fa3_should_pack_gqa(seqQ, groupSize, blockM) != 0;
      },
      py::arg("seq_q"), py::arg("group_size"), py::arg("block_m"),
      "Whether a KV-cache attention of seq_q queries packs the group_size "
      "query heads of each KV head into one block_m-row tile (PackGQA; "
      "FlashAttention-3's rule)");
  m.def(
      "select_forward_schedule",
      [](int64_t headDim, bool fp8, bool causal, int64_t seqQ, int64_t seqK) {
        // Zeroed: a libfa3.so of an older C API (the A/B benchmark swaps
        // them) fills fewer fields.
        fa3_schedule chosen{};
        fa3_select_forward_schedule(headDim, fp8 ? 1 : 0, causal ? 1 : 0, seqQ,
                                    seqK, &chosen);
        py::dict fields;
        fields["block_m"] = chosen.block_m;
        fields["block_n"] = chosen.block_n;
        fields["stages"] = chosen.stages;
        fields["consumer_wgs"] = chosen.consumer_wgs;
        fields["producer_regs"] = chosen.producer_regs;
        fields["consumer_regs"] = chosen.consumer_regs;
        fields["pingpong"] = chosen.pingpong != 0;
        fields["intra_wg_overlap"] = chosen.intra_wg_overlap != 0;
        fields["persistent"] = chosen.persistent != 0;
        fields["cluster"] = chosen.cluster;
        fields["rescale_threshold"] = chosen.rescale_threshold;
        fields["poly_exp2"] = chosen.poly_exp2;
        return fields;
      },
      py::arg("head_dim"), py::arg("fp8"), py::arg("causal"), py::arg("seq_q"),
      py::arg("seq_k"),
      "The forward's #fa3.schedule fields that fa3-select-schedule picks on "
      "sm_90a for this head dim, query length and key length (<= 0: "
      "unknown): the length bucket's schedule");

  py::class_<CpuFunction>(m, "CpuFunction",
                          "An fa3 function compiled for the host CPU")
      .def(py::init<const std::string &, const std::string &, int64_t,
                    int64_t>(),
           py::arg("mlir"), py::arg("function"), py::arg("block_m") = 0,
           py::arg("block_n") = 0)
      .def_property_readonly("compile_ms", &CpuFunction::compileMs)
      .def_property_readonly("cache_hit", &CpuFunction::cacheHit,
                             "Whether the object code came from the on-disk "
                             "kernel cache")
      .def_property_readonly("num_inputs", &CpuFunction::numInputs)
      .def_property_readonly("num_results", &CpuFunction::numResults)
      .def("run", &CpuFunction::run, py::arg("inputs"),
           "Runs on C-contiguous numpy arrays; returns new arrays");

  py::class_<CudaKernel> kernel(m, "CudaKernel",
                                "A compiled sm_90a attention kernel");
  py::enum_<CudaKernel::Kind>(kernel, "Kind")
      .value("FORWARD", CudaKernel::Kind::Forward)
      .value("BACKWARD", CudaKernel::Kind::Backward)
      .value("PTX_ONLY", CudaKernel::Kind::PtxOnly);
  kernel
      .def(py::init<const std::string &, const std::string &, CudaKernel::Kind,
                    int64_t, int64_t>(),
           py::arg("mlir"), py::arg("function"), py::arg("kind"),
           py::arg("block_m") = 0, py::arg("block_n") = 0)
      .def_readonly("kind", &CudaKernel::kind)
      .def_readonly("cache_hit", &CudaKernel::cacheHit)
      .def_property_readonly("name", &CudaKernel::name)
      .def_property_readonly("ptx", &CudaKernel::ptx)
      .def_property_readonly("compile_ms", &CudaKernel::compileMs)
      .def_property_readonly("device", &CudaKernel::device,
                             "The CUDA device ordinal it is loaded on (-1: "
                             "PTX only)")
      .def("launch", &CudaKernel::launch, py::arg("q"), py::arg("k"),
           py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("batch"),
           py::arg("seq_q"), py::arg("seq_k"), py::arg("stream"),
           py::arg("rng") = 0,
           "A dense forward (fa3_launch_attention; with rng, the Philox "
           "(seed, offset) device pointer of a dropout kernel, "
           "fa3_launch_attention_dropout)")
      .def("launch_kvcache", &CudaKernel::launchKVCache, py::arg("q"),
           py::arg("k_cache"), py::arg("v_cache"), py::arg("out"),
           py::arg("lse"), py::arg("cache_seqlens"), py::arg("batch"),
           py::arg("seq_q"), py::arg("cache_rows"), py::arg("stream"))
      .def("launch_paged_kvcache", &CudaKernel::launchPagedKVCache,
           py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("out"),
           py::arg("lse"), py::arg("cache_seqlens"), py::arg("page_table"),
           py::arg("batch"), py::arg("seq_q"), py::arg("num_pages"),
           py::arg("page_size"), py::arg("table_width"), py::arg("stream"))
      .def("launch_kvcache_splits", &CudaKernel::launchKVCacheSplits,
           py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("out"),
           py::arg("lse"), py::arg("cache_seqlens"), py::arg("workspace"),
           py::arg("batch"), py::arg("seq_q"), py::arg("cache_rows"),
           py::arg("stream"))
      .def("launch_paged_kvcache_splits", &CudaKernel::launchPagedKVCacheSplits,
           py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("out"),
           py::arg("lse"), py::arg("cache_seqlens"), py::arg("page_table"),
           py::arg("workspace"), py::arg("batch"), py::arg("seq_q"),
           py::arg("num_pages"), py::arg("page_size"), py::arg("table_width"),
           py::arg("stream"))
      .def("launch_varlen", &CudaKernel::launchVarlen, py::arg("q"),
           py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
           py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"),
           py::arg("seqused_k"), py::arg("batch"), py::arg("total_q"),
           py::arg("total_k"), py::arg("max_seqlen_q"), py::arg("stream"),
           "Fills out with 0 and lse with -inf, then launches an "
           "fa3.attention_varlen kernel (fa3_launch_attention_varlen; "
           "seqused_k: 0 for a kernel without it)")
      .def("launch_fp8", &CudaKernel::launchFP8, py::arg("q"), py::arg("k"),
           py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("q_descale"),
           py::arg("k_descale"), py::arg("v_descale"), py::arg("workspace"),
           py::arg("batch"), py::arg("seq_q"), py::arg("seq_k"),
           py::arg("stream"))
      .def("forward_workspace_bytes", &CudaKernel::forwardWorkspaceBytes,
           py::arg("batch"), py::arg("seq_q"), py::arg("seq_k"))
      .def("workspace_bytes", &CudaKernel::workspaceBytes, py::arg("batch"),
           py::arg("seq_q"), py::arg("seq_k"),
           "Bytes of workspace a backward launch needs (varlen: batch "
           "sequences, seq_q = total_q, seq_k = total_k)")
      .def("launch_grad", &CudaKernel::launchGrad, py::arg("grad_out"),
           py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"),
           py::arg("lse"), py::arg("grad_q"), py::arg("grad_k"),
           py::arg("grad_v"), py::arg("workspace"), py::arg("batch"),
           py::arg("seq_q"), py::arg("seq_k"), py::arg("stream"),
           py::arg("grad_lse") = 0, py::arg("rng") = 0)
      .def("launch_varlen_grad", &CudaKernel::launchVarlenGrad,
           py::arg("grad_out"), py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("out"), py::arg("lse"), py::arg("grad_lse"),
           py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"),
           py::arg("seqused_k"), py::arg("grad_q"), py::arg("grad_k"),
           py::arg("grad_v"), py::arg("workspace"), py::arg("batch"),
           py::arg("total_q"), py::arg("total_k"), py::arg("max_seqlen_q"),
           py::arg("max_seqlen_k"), py::arg("stream"),
           "Launches an fa3.attention_varlen_grad backward "
           "(fa3_launch_attention_varlen_grad; grad_lse and seqused_k: 0 "
           "for none), which writes every row of grad_q, grad_k and grad_v");

  py::class_<QuantizeKernel>(m, "QuantizeKernel",
                             "The sm_90a kernels of an fa3.quantize function")
      .def(py::init<const std::string &, const std::string &>(),
           py::arg("mlir"), py::arg("function"))
      .def_readonly("cache_hit", &QuantizeKernel::cacheHit)
      .def_property_readonly("compile_ms", &QuantizeKernel::compileMs)
      .def_property_readonly("device", &QuantizeKernel::device)
      .def("workspace_bytes", &QuantizeKernel::workspaceBytes, py::arg("batch"))
      .def("launch", &QuantizeKernel::launch, py::arg("input"),
           py::arg("output"), py::arg("descale"), py::arg("workspace"),
           py::arg("batch"), py::arg("seq"), py::arg("stream"));
}
