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

/** Compiles `function` of `mlir_source` (a function whose body is one
 *  fa3.attention on its three arguments, returning its O and LSE) for the
 *  Hopper GPU of the current CUDA context, or loads it from the kernel cache.
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

/** The kernel's name and PTX (owned by the kernel). */
const char *fa3_kernel_name(const fa3_kernel *kernel);
const char *fa3_kernel_ptx(const fa3_kernel *kernel);

void fa3_destroy_kernel(fa3_kernel *kernel);
void fa3_free_string(char *string);

#ifdef __cplusplus
}
#endif

#endif /* FA3_C_FA3_H */
