/*===- fa3-c/FA3.h - C API of fa3's attention JIT -----------------*- C -*-===*\
|*                                                                            *|
|* Part of the fa3 project: an MLIR-based attention compiler for Hopper.      *|
|*                                                                            *|
|* A C interface for embedding fa3 (Python through ctypes, other runtimes):   *|
|* compile the fa3.attention of an MLIR function for the current CUDA device  *|
|* and launch it on device buffers the caller owns. Every call that can fail *|
|* returns an error string the caller frees with fa3_free_string.            *|
\*===----------------------------------------------------------------------===*/

#ifndef FA3_C_FA3_H
#define FA3_C_FA3_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fa3_kernel fa3_kernel;

/** The fa3 version string. */
const char *fa3_version(void);

/** The fields of a `#fa3.schedule` (see FA3Attrs.td); booleans as 0/1. */
typedef struct fa3_schedule {
  int64_t block_m, block_n, stages, consumer_wgs, producer_regs,
      consumer_regs;
  int pingpong, intra_wg_overlap, persistent;
  int64_t cluster;
  int64_t rescale_threshold; /* lazy rescaling's τ, 0 = off */
  int64_t poly_exp2; /* every N-th FP8 exponential on the FMA pipe, 0 = off */
} fa3_schedule;

/** The forward schedule fa3-select-schedule picks on sm_90a for head dim
 *  `head_dim`, query length `seq_q` and key length `seq_k` (<= 0: unknown),
 *  FP8 (e4m3) or 16-bit, causal or not, in `*out`. The lengths choose the
 *  query tile (short queries) and a persistent grid (short key loops): the
 *  runtime compiles one kernel per distinct schedule (length buckets), with
 *  the schedule written into the fa3.attention it compiles. */
/** The number of key splits (split-KV, fa3.attention_kvcache's num_splits)
 *  for `work_tiles` (batch, head, query tile) units of `key_blocks` key
 *  blocks each on `multiprocessors` SMs, at most `max_splits`:
 *  FlashAttention-3's wave-efficiency rule (docs/Design.md, section 10). */
int64_t fa3_select_num_splits(int64_t work_tiles, int64_t multiprocessors,
                              int64_t key_blocks, int64_t max_splits);

/** Whether to pack the `group_size` query heads of each KV head into the
 *  rows of one `block_m`-row tile for `seq_q` queries (PackGQA,
 *  fa3.attention_kvcache's pack_gqa): 1 or 0, FlashAttention-3's rule. */
int fa3_should_pack_gqa(int64_t seq_q, int64_t group_size, int64_t block_m);

void fa3_select_forward_schedule(int64_t head_dim, int fp8, int causal,
                                 int64_t seq_q, int64_t seq_k,
                                 fa3_schedule *out);

/** Compiles `function` of `mlir_source` (a function whose body is one
 *  fa3.attention on its three arguments, four with dropout's rng, returning
 *  its O and LSE) for the
 *  Hopper GPU of the calling thread's current CUDA context (device 0 when it
 *  has none; PyTorch's current device, `torch.cuda.device(n)`), or loads it
 *  from the kernel cache. The kernel stays on that device: launches run in
 *  its context whatever context is current then, and leave the caller's
 *  current context as it was; the stream and buffers must be that device's.
 *  `block_m`/`block_n` override the tiles (0: the cost model's choice).
 *  Returns NULL and sets `*error` on failure. `*cache_hit` (may be NULL) is
 *  set to 1 when the kernel came from the cache. */
fa3_kernel *fa3_compile_attention(const char *mlir_source, const char *function,
                                  int64_t block_m, int64_t block_n,
                                  int *cache_hit, char **error);

/** Launches the kernel on `stream` (a CUstream; NULL for the default one).
 *  q, k, v: contiguous [B, S, H, D] device buffers of the kernel's element
 *  type; out: [B, Sq, Hq, D] of that type; lse: [B, Hq, Sq] f32. Returns 0,
 *  or non-zero with `*error` set. Asynchronous like any kernel launch. */
int fa3_launch_attention(const fa3_kernel *kernel, uint64_t q, uint64_t k,
                         uint64_t v, uint64_t out, uint64_t lse, int64_t batch,
                         int64_t seq_q, int64_t seq_k, void *stream,
                         char **error);

/** fa3_launch_attention for a kernel compiled with dropout (an
 *  fa3.attention with `dropout` and an `rng` fourth argument): `rng` is the
 *  Philox (seed, offset), i64 [2] on the device, read when the kernel runs
 *  (a captured graph can update it in place). Each launch refuses the other
 *  kind of kernel. */
int fa3_launch_attention_dropout(const fa3_kernel *kernel, uint64_t q,
                                 uint64_t k, uint64_t v, uint64_t out,
                                 uint64_t lse, uint64_t rng, int64_t batch,
                                 int64_t seq_q, int64_t seq_k, void *stream,
                                 char **error);

/** Launches an fa3.attention_kvcache kernel of one split (a contiguous
 *  cache; split-KV: fa3_launch_attention_kvcache_splits): q
 *  [B, Sq, Hq, D]; k_cache, v_cache [B, cache_rows, Hkv, D]; out, lse as in
 *  fa3_launch_attention; cache_seqlens i32 [B] on the device (batch b
 *  attends to its first min(cache_seqlens[b], cache_rows) keys; the cache
 *  rows past that are read and must hold finite values). */
int fa3_launch_attention_kvcache(const fa3_kernel *kernel, uint64_t q,
                                 uint64_t k_cache, uint64_t v_cache,
                                 uint64_t out, uint64_t lse,
                                 uint64_t cache_seqlens, int64_t batch,
                                 int64_t seq_q, int64_t cache_rows,
                                 void *stream, char **error);

/** Launches a paged fa3.attention_kvcache kernel of one split (one
 *  compiled with a page table; split-KV:
 *  fa3_launch_attention_paged_kvcache_splits): q [B, Sq, Hq, D]; k_cache,
 *  v_cache [num_pages, page_size, Hkv, D]; out, lse as in
 *  fa3_launch_attention; cache_seqlens i32 [B] and
 *  page_table i32 [B, table_width] (row-major) on the device. Key j of
 *  batch b is row j % page_size of page page_table[b, j / page_size]; batch
 *  b attends to its first min(cache_seqlens[b], table_width * page_size)
 *  keys. Any page size >= 1 (one kernel serves them all), pages in any
 *  order; page_size * table_width must fit in 32 bits. Keys are read in
 *  whole tiles, so table entries and cache rows a little past a batch's
 *  length are read (and masked) too: keep every entry of the table a page
 *  of the cache, in [0, num_pages) (unused slots included; they are not
 *  checked), and every page finite. */
int fa3_launch_attention_paged_kvcache(
    const fa3_kernel *kernel, uint64_t q, uint64_t k_cache, uint64_t v_cache,
    uint64_t out, uint64_t lse, uint64_t cache_seqlens, uint64_t page_table,
    int64_t batch, int64_t seq_q, int64_t num_pages, int64_t page_size,
    int64_t table_width, void *stream, char **error);

/** Launches a split-KV fa3.attention_kvcache kernel (one compiled with
 *  num_splits = N > 1) on a contiguous cache: the arguments as
 *  fa3_launch_attention_kvcache's, plus `workspace`, a device buffer of
 *  fa3_attention_workspace_size bytes, 256-byte aligned, where the N partial
 *  attentions of each batch go (f32; nothing needs initializing). Two kernels
 *  run on `stream`: the partial attentions over N ranges of whole key blocks,
 *  then their merge into out and lse. The workspace must not be reused
 *  before both ran (stream order suffices). A batch or a split with no key
 *  gives O = 0 and LSE = -inf, as one split does. A kernel of one split is
 *  refused (fa3_launch_attention_kvcache launches it), and a split kernel is
 *  refused by fa3_launch_attention_kvcache. */
int fa3_launch_attention_kvcache_splits(const fa3_kernel *kernel, uint64_t q,
                                        uint64_t k_cache, uint64_t v_cache,
                                        uint64_t out, uint64_t lse,
                                        uint64_t cache_seqlens,
                                        uint64_t workspace, int64_t batch,
                                        int64_t seq_q, int64_t cache_rows,
                                        void *stream, char **error);

/** Launches a split-KV paged fa3.attention_kvcache kernel: the arguments as
 *  fa3_launch_attention_paged_kvcache's, plus `workspace` as in
 *  fa3_launch_attention_kvcache_splits. */
int fa3_launch_attention_paged_kvcache_splits(
    const fa3_kernel *kernel, uint64_t q, uint64_t k_cache, uint64_t v_cache,
    uint64_t out, uint64_t lse, uint64_t cache_seqlens, uint64_t page_table,
    uint64_t workspace, int64_t batch, int64_t seq_q, int64_t num_pages,
    int64_t page_size, int64_t table_width, void *stream, char **error);

/** Launches an fa3.attention_varlen kernel (FlashAttention's
 *  flash_attn_varlen_func: `batch` sequences packed without padding):
 *  q, out [total_q, Hq, D] and k, v [total_k, Hkv, D], contiguous, of the
 *  kernel's element type, 16-byte aligned; lse [Hq, total_q] f32;
 *  cu_seqlens_q and cu_seqlens_k i32 [batch + 1] on the device. Sequence b
 *  owns query rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and key rows
 *  [cu_seqlens_k[b], cu_seqlens_k[b + 1]), of which only the first
 *  seqused_k[b] take part when the kernel was compiled with seqused_k (i32
 *  [batch] on the device; pass 0 for a kernel without it: each mismatch is
 *  an error). Causal masks align at each sequence's own bottom-right
 *  corner.
 *
 *  First, on `stream`, out is filled with 0 and lse with -inf, so that the
 *  rows past cu_seqlens_q[batch] read O = 0, LSE = -inf; the kernel then
 *  writes each sequence's rows. `max_seqlen_q` sizes the grid: it must be
 *  at least every sequence's query count, or the rows past it keep the
 *  fill (no error is reported; a larger value is only slower). The offsets
 *  are read on the device and not checked here: they must be non-decreasing
 *  from 0, cu_seqlens_q[batch] <= total_q, cu_seqlens_k[batch] <= total_k,
 *  and 0 <= seqused_k[b] <= the sequence's keys. Keys are read in whole
 *  tiles, so rows of k and v past a sequence's (used) keys are read and
 *  masked: they must hold finite values. total_q = 0 launches nothing;
 *  batch = 0 only fills. total_q and total_k must fit in 32 bits, batch and
 *  Hq in the grid's 65535. A kernel of another forward is refused, naming
 *  its entry point, and fa3_launch_attention refuses a varlen kernel. */
int fa3_launch_attention_varlen(const fa3_kernel *kernel, uint64_t q,
                                uint64_t k, uint64_t v, uint64_t out,
                                uint64_t lse, uint64_t cu_seqlens_q,
                                uint64_t cu_seqlens_k, uint64_t seqused_k,
                                int64_t batch, int64_t total_q, int64_t total_k,
                                int64_t max_seqlen_q, void *stream,
                                char **error);

/** Bytes of device workspace a forward launch of these sizes needs: for FP8
 *  forwards (e4m3 q, k, v) the transposed V'; for split-KV kernels of N
 *  splits the partial attentions, f32 O [N*B, Sq, Hq, D] and LSE [N*B, Hq,
 *  Sq] (seq_k unused); 0 for other forwards; -1 for a backward or a negative
 *  size. A kernel compiled with fa3_compile_ptx answers as well. */
int64_t fa3_attention_workspace_size(const fa3_kernel *kernel, int64_t batch,
                                     int64_t seq_q, int64_t seq_k);

/** Launches an FP8 forward: q, k, v contiguous e4m3 [B, S, H, D]; out bf16
 *  [B, Sq, Hq, D]; lse f32 [B, Hq, Sq]; q/k/v_descale f32 [B, Hkv];
 *  workspace of fa3_attention_workspace_size bytes, 256-byte aligned. */
int fa3_launch_attention_fp8(const fa3_kernel *kernel, uint64_t q, uint64_t k,
                             uint64_t v, uint64_t out, uint64_t lse,
                             uint64_t q_descale, uint64_t k_descale,
                             uint64_t v_descale, uint64_t workspace,
                             int64_t batch, int64_t seq_q, int64_t seq_k,
                             void *stream, char **error);

/** Compiles `function` of `mlir_source`, a function whose body is one
 *  fa3.attention_grad on its six arguments (dO, Q, K, V, O, LSE) returning
 *  (dQ, dK, dV), or one fa3.attention_varlen_grad on its eight (dO, Q, K,
 *  V, O, LSE, cu_seqlens_q, cu_seqlens_k; nine with seqused_k) returning
 *  (dQ, dK, dV), into the backward's kernels; otherwise as
 *  fa3_compile_attention. The LSE's gradient is a launch argument, so the
 *  function needs no grad_lse operand. */
fa3_kernel *fa3_compile_attention_grad(const char *mlir_source,
                                       const char *function, int64_t block_m,
                                       int64_t block_n, int *cache_hit,
                                       char **error);

/** Bytes of device workspace one backward launch of these sizes needs (the
 *  f32 dQ accumulator and per-row statistics); -1 for a forward kernel or a
 *  negative size. A backward compiled with fa3_compile_ptx answers as well.
 *  The launch initializes the workspace itself. For an
 *  fa3.attention_varlen_grad backward `batch` is the number of sequences,
 *  `seq_q` total_q and `seq_k` total_k. */
int64_t fa3_attention_grad_workspace_size(const fa3_kernel *kernel,
                                          int64_t batch, int64_t seq_q,
                                          int64_t seq_k);

/** Launches the backward on `stream`: grad_out, q, out: [B, Sq, Hq, D];
 *  k, v: [B, Sk, Hkv, D], all contiguous in the kernel's element type; lse:
 *  [B, Hq, Sq] f32 (the forward's); grad_lse: the gradient reaching the
 *  LSE, [B, Hq, Sq] f32, or 0 when it has none (see fa3.attention_grad);
 *  grad_q/k/v shaped like q/k/v; workspace:
 *  fa3_attention_grad_workspace_size bytes, 256-byte aligned. Returns 0, or
 *  non-zero with `*error` set. Asynchronous. A varlen backward is refused:
 *  fa3_launch_attention_varlen_grad launches it. */
int fa3_launch_attention_grad(const fa3_kernel *kernel, uint64_t grad_out,
                              uint64_t q, uint64_t k, uint64_t v, uint64_t out,
                              uint64_t lse, uint64_t grad_lse,
                              uint64_t grad_q, uint64_t grad_k,
                              uint64_t grad_v, uint64_t workspace,
                              int64_t batch, int64_t seq_q, int64_t seq_k,
                              void *stream, char **error);

/** fa3_launch_attention_grad for a backward compiled with dropout (its
 *  function's seventh argument is the rng): `rng` is the forward's Philox
 *  (seed, offset), i64 [2] on the device, from which the kernel
 *  regenerates the forward's mask. Each launch refuses the other kind of
 *  kernel. */
int fa3_launch_attention_grad_dropout(
    const fa3_kernel *kernel, uint64_t grad_out, uint64_t q, uint64_t k,
    uint64_t v, uint64_t out, uint64_t lse, uint64_t grad_lse, uint64_t rng,
    uint64_t grad_q, uint64_t grad_k, uint64_t grad_v, uint64_t workspace,
    int64_t batch, int64_t seq_q, int64_t seq_k, void *stream, char **error);

/** Launches an fa3.attention_varlen_grad backward (the gradients of
 *  fa3_launch_attention_varlen's attention) on `stream`: grad_out, q, out
 *  [total_q, Hq, D] and k, v [total_k, Hkv, D], contiguous, of the kernel's
 *  element type, 16-byte aligned; lse [Hq, total_q] f32 (the forward's);
 *  grad_lse, the gradient reaching the LSE, [Hq, total_q] f32, or 0 when it
 *  has none; cu_seqlens_q, cu_seqlens_k i32 [batch + 1] and, for a kernel
 *  compiled with it, seqused_k i32 [batch] on the device (pass 0 for a
 *  kernel without it: each mismatch is an error), as the forward took them;
 *  grad_q, grad_k, grad_v shaped like q, k, v; workspace:
 *  fa3_attention_grad_workspace_size(kernel, batch, total_q, total_k)
 *  bytes, 256-byte aligned (the launch initializes it).
 *
 *  Three kernels run (preprocessing, main, postprocessing), each over the
 *  sequences and one more grid row whose CTAs zero the gradient rows past
 *  cu_seqlens_q[batch] and cu_seqlens_k[batch]: every row of grad_q,
 *  grad_k, grad_v is written, with each sequence's gradients of its own
 *  attention (bottom-right causal per sequence), zeros for the keys past
 *  seqused_k[b] and for the rows outside every sequence. `max_seqlen_q` and
 *  `max_seqlen_k` size the grids: they must be at least every sequence's
 *  cu_seqlens_q[b + 1] - cu_seqlens_q[b] and cu_seqlens_k[b + 1] -
 *  cu_seqlens_k[b] (seqused_k does not shorten the latter: the CTAs past
 *  the used keys zero their gradients), or rows past them are left
 *  unwritten without an error; larger values are only slower. The offsets
 *  are read on the device and not checked here: they must be
 *  non-decreasing from 0, cu_seqlens_q[batch] <= total_q,
 *  cu_seqlens_k[batch] <= total_k, and 0 <= seqused_k[b] <= the sequence's
 *  keys. Whole tiles are read, so the rows of q, grad_out, k and v must
 *  hold finite values. total_q = total_k = 0 launches nothing; batch = 0
 *  only zeroes. total_q and total_k must fit in 32 bits, batch + 1 and Hq
 *  in the grid's 65535. A forward or a dense backward is refused, naming
 *  its entry point, and fa3_launch_attention_grad refuses a varlen
 *  backward. Returns 0, or non-zero with `*error` set. Asynchronous. */
int fa3_launch_attention_varlen_grad(
    const fa3_kernel *kernel, uint64_t grad_out, uint64_t q, uint64_t k,
    uint64_t v, uint64_t out, uint64_t lse, uint64_t grad_lse,
    uint64_t cu_seqlens_q, uint64_t cu_seqlens_k, uint64_t seqused_k,
    uint64_t grad_q, uint64_t grad_k, uint64_t grad_v, uint64_t workspace,
    int64_t batch, int64_t total_q, int64_t total_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, void *stream, char **error);

/** The ordinal of the CUDA device the kernel is loaded on; -1 for a kernel
 *  compiled with fa3_compile_ptx. */
int fa3_kernel_device(const fa3_kernel *kernel);

/** The kernel's name (for a backward, its main kernel's) and PTX (owned by
 *  the kernel). */
const char *fa3_kernel_name(const fa3_kernel *kernel);
const char *fa3_kernel_ptx(const fa3_kernel *kernel);

/** Compile time of the last compile of this kernel in milliseconds (0 on a
 *  cache hit's load), for reports. */
double fa3_kernel_compile_ms(const fa3_kernel *kernel);

/** Compiles `function` (any function the other compile entries take) to
 *  sm_90a PTX through the kernel cache without needing a GPU or a CUDA
 *  driver; the kernel can be inspected (name, PTX, workspace sizes) but not
 *  launched. */
fa3_kernel *fa3_compile_ptx(const char *mlir_source, const char *function,
                            int64_t block_m, int64_t block_n, int *cache_hit,
                            char **error);

/** Compiles `function` of `mlir_source`, a function whose body is one
 *  fa3.quantize of its [B, S, H, D] argument (f32, f16 or bf16; with
 *  `hadamard_seed`, of its Hadamard transform) returning the e4m3 tensor and
 *  the f32 [B, G] descales, into its kernels on the current device. */
fa3_kernel *fa3_compile_quantize(const char *mlir_source, const char *function,
                                 int *cache_hit, char **error);

/** Bytes of device workspace one quantization of `batch` needs (the
 *  per-group amax, zeroed by the launch); -1 for another kernel. */
int64_t fa3_quantize_workspace_size(const fa3_kernel *kernel, int64_t batch);

/** Quantizes input [batch, seq, H, D] (contiguous) into output (e4m3, same
 *  shape) and descale (f32 [batch, G]) on `stream`; workspace of
 *  fa3_quantize_workspace_size bytes. Asynchronous. */
int fa3_launch_quantize(const fa3_kernel *kernel, uint64_t input,
                        uint64_t output, uint64_t descale, uint64_t workspace,
                        int64_t batch, int64_t seq, void *stream, char **error);

void fa3_destroy_kernel(fa3_kernel *kernel);
void fa3_free_string(char *string);

/*===----------------------------------------------------------------------===*
 * The CPU JIT: any fa3 function through fa3-cpu-pipeline and MLIR's
 * ExecutionEngine, on host buffers.
 *===----------------------------------------------------------------------===*/

enum {
  FA3_DTYPE_F32 = 0,
  FA3_DTYPE_F16 = 1,
  FA3_DTYPE_BF16 = 2,
  FA3_DTYPE_I32 = 3, /* sequence offsets, lengths and page tables */
  FA3_DTYPE_I64 = 4  /* dropout's Philox seed and offset */
};
#define FA3_MAX_RANK 8

/** A dense row-major host tensor. Inputs: `data` is the caller's. Outputs
 *  of fa3_cpu_run: `data` is allocated by fa3; free it with
 *  fa3_free_tensor_data. */
typedef struct fa3_tensor {
  int dtype;
  int rank;
  int64_t shape[FA3_MAX_RANK];
  void *data;
} fa3_tensor;

typedef struct fa3_cpu_function fa3_cpu_function;

/** Compiles `function` of `mlir_source` for the host CPU. NULL and `*error`
 *  on failure. */
fa3_cpu_function *fa3_cpu_compile(const char *mlir_source,
                                  const char *function, int64_t block_m,
                                  int64_t block_n, char **error);
int fa3_cpu_num_inputs(const fa3_cpu_function *fn);
int fa3_cpu_num_results(const fa3_cpu_function *fn);
/** Milliseconds fa3_cpu_compile took (parse, pipeline, LLVM JIT; on a
 *  cache hit parse and load only). */
double fa3_cpu_compile_ms(const fa3_cpu_function *fn);
/** 1 when the function's object code came from the kernel cache
 *  (FA3_CACHE_DIR, as for CUDA kernels), else 0. */
int fa3_cpu_cache_hit(const fa3_cpu_function *fn);
/** Runs the function; checks dtypes and shapes against its signature (the
 *  error names the input) and fills `outputs`. 0 on success. */
int fa3_cpu_run(const fa3_cpu_function *fn, const fa3_tensor *inputs,
                int num_inputs, fa3_tensor *outputs, int num_outputs,
                char **error);
void fa3_free_tensor_data(fa3_tensor *tensor);
void fa3_cpu_destroy(fa3_cpu_function *fn);

#ifdef __cplusplus
}
#endif

#endif /* FA3_C_FA3_H */
