/*===- fa3-capi-test.c - fa3's C API, tested from C ---------------*- C -*-===*\
|*                                                                            *|
|* Part of the fa3 project: an MLIR-based attention compiler for Hopper.      *|
|*                                                                            *|
|* Plain C against include/fa3-c/FA3.h and libfa3 (as MLIR's standalone       *|
|* example tests its C API): the CPU JIT on host buffers against a float64    *|
|* reference written here, PTX-only compiles, the cost model's query tile,    *|
|* and the errors each entry point reports. `--gpu` runs a bf16 attention     *|
|* through fa3_compile_attention / fa3_launch_attention on device buffers     *|
|* (the CUDA driver opened with dlopen, so the program builds without the     *|
|* CUDA toolkit). Each check prints one line the lit test matches; a failed   *|
|* check prints FAIL and the program exits non-zero.                          *|
\*===----------------------------------------------------------------------===*/

// RUN: fa3-capi-test 2>&1 | FileCheck %s
// The GPU half runs where a CUDA device is (the H200 runs it from
// scripts/gpu/run.sh as well).
// RUN: %if cuda %{ fa3-capi-test --gpu 2>&1 | FileCheck %s --check-prefix=GPU %}

// `--ptx-varlen-grad` (the varlen backward compiled to PTX) is its own lit
// test, varlen-grad-ptx.test.

#include "fa3-c/FA3.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void check(int ok, const char *what) {
  printf("%s: %s\n", what, ok ? "ok" : "FAIL");
  if (!ok)
    ++failures;
}

/* Deterministic inputs in [-1, 1): a 64-bit LCG. */
static uint64_t lcgState = 0x2545F4914F6CDD1DULL;
static float nextUniform(void) {
  lcgState = lcgState * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((lcgState >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f;
}

/* Round-to-nearest-even f32 -> bf16 and back. */
static uint16_t toBf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}
static float fromBf16(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float x;
  memcpy(&x, &bits, 4);
  return x;
}

/* Attention in double over [B, S, H, D] inputs (GQA: query head h reads kv
 * head h / (hq / hkv)), bottom-right causal when `causal`. Writes O [B, Sq,
 * Hq, D] and the LSE [B, Hq, Sq]. */
static void reference(const float *q, const float *k, const float *v, int b,
                      int sq, int sk, int hq, int hkv, int d, int causal,
                      double *o, double *lse) {
  double scale = 1.0 / sqrt((double)d);
  double *s = malloc(sizeof(double) * (size_t)(sk > 0 ? sk : 1));
  for (int bi = 0; bi < b; ++bi)
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < sq; ++i) {
        int g = h / (hq / hkv);
        double m = -INFINITY;
        for (int j = 0; j < sk; ++j) {
          s[j] = -INFINITY;
          if (causal && j > i + (sk - sq))
            continue;
          double dot = 0;
          for (int x = 0; x < d; ++x)
            dot += (double)q[(((size_t)bi * sq + i) * hq + h) * d + x] *
                   k[(((size_t)bi * sk + j) * hkv + g) * d + x];
          s[j] = dot * scale;
          if (s[j] > m)
            m = s[j];
        }
        double sum = 0;
        for (int j = 0; j < sk; ++j)
          sum += s[j] == -INFINITY ? 0 : exp(s[j] - m);
        for (int x = 0; x < d; ++x) {
          double acc = 0;
          for (int j = 0; j < sk; ++j)
            if (s[j] != -INFINITY)
              acc += exp(s[j] - m) / sum *
                     v[(((size_t)bi * sk + j) * hkv + g) * d + x];
          o[(((size_t)bi * sq + i) * hq + h) * d + x] = acc;
        }
        lse[((size_t)bi * hq + h) * sq + i] = m + log(sum);
      }
  free(s);
}

static const char *kCausalF32 =
    "func.func @attn(%q: tensor<?x?x4x16xf32>, %k: tensor<?x?x2x16xf32>, "
    "%v: tensor<?x?x2x16xf32>) -> (tensor<?x?x4x16xf32>, tensor<?x4x?xf32>) "
    "{\n"
    "  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<?x?x4x16xf32>, "
    "tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>) -> (tensor<?x?x4x16xf32>, "
    "tensor<?x4x?xf32>)\n"
    "  return %o, %lse : tensor<?x?x4x16xf32>, tensor<?x4x?xf32>\n}\n";

/* Returns whether `error` is set and contains `needle`; frees it. */
static int errorContains(char *error, const char *needle) {
  int ok = error && strstr(error, needle) != NULL;
  if (!ok)
    fprintf(stderr, "expected an error containing '%s', got: %s\n", needle,
            error ? error : "(none)");
  fa3_free_string(error);
  return ok;
}

static void testCpu(void) {
  char *error = NULL;
  fa3_cpu_function *fn = fa3_cpu_compile(kCausalF32, "attn", 0, 0, &error);
  check(fn != NULL, "cpu compile");
  if (!fn) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  check(fa3_cpu_num_inputs(fn) == 3 && fa3_cpu_num_results(fn) == 2,
        "cpu signature 3 -> 2");
  /* Sq = 17 < Sk = 33 (neither a tile multiple), GQA 4:2, causal. */
  int b = 2, sq = 17, sk = 33, hq = 4, hkv = 2, d = 16;
  size_t nq = (size_t)b * sq * hq * d, nk = (size_t)b * sk * hkv * d;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
  for (size_t i = 0; i < nq; ++i)
    q[i] = 2 * nextUniform();
  for (size_t i = 0; i < nk; ++i) {
    k[i] = 2 * nextUniform();
    v[i] = nextUniform();
  }
  fa3_tensor inputs[3] = {{FA3_DTYPE_F32, 4, {b, sq, hq, d}, q},
                          {FA3_DTYPE_F32, 4, {b, sk, hkv, d}, k},
                          {FA3_DTYPE_F32, 4, {b, sk, hkv, d}, v}};
  fa3_tensor outputs[2];
  memset(outputs, 0, sizeof(outputs));
  int rc = fa3_cpu_run(fn, inputs, 3, outputs, 2, &error);
  check(rc == 0, "cpu run");
  if (rc == 0) {
    check(outputs[0].rank == 4 && outputs[0].shape[1] == sq &&
              outputs[1].rank == 3 && outputs[1].shape[2] == sq,
          "cpu result shapes");
    double *o = malloc(nq * 8), *lse = malloc((size_t)b * hq * sq * 8);
    reference(q, k, v, b, sq, sk, hq, hkv, d, 1, o, lse);
    double errO = 0, errL = 0;
    const float *got = outputs[0].data, *gotL = outputs[1].data;
    for (size_t i = 0; i < nq; ++i)
      errO = fmax(errO, fabs(got[i] - o[i]));
    for (size_t i = 0; i < (size_t)b * hq * sq; ++i)
      errL = fmax(errL, fabs(gotL[i] - lse[i]));
    /* f32 arithmetic over 33 keys: a few ulps of |O| <= 1. */
    printf("cpu max |O - ref| = %.2e, max |LSE - ref| = %.2e\n", errO, errL);
    check(errO < 1e-5 && errL < 1e-5, "cpu matches the float64 reference");
    free(o);
    free(lse);
    fa3_free_tensor_data(&outputs[0]);
    fa3_free_tensor_data(&outputs[1]);
  } else {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
  }

  /* A wrong K shape (3 heads for a 2-head signature) names the input. */
  inputs[1].shape[2] = 3;
  error = NULL;
  rc = fa3_cpu_run(fn, inputs, 3, outputs, 2, &error);
  check(rc != 0 && errorContains(error, "input #1"),
        "cpu run rejects a wrong shape, naming input #1");
  error = NULL;
  rc = fa3_cpu_run(fn, inputs, 2, outputs, 2, &error);
  check(rc != 0 && error != NULL, "cpu run rejects a wrong input count");
  fa3_free_string(error);
  free(q);
  free(k);
  free(v);
  fa3_cpu_destroy(fn);

  error = NULL;
  check(fa3_cpu_compile("func.func @attn(", "attn", 0, 0, &error) == NULL &&
            errorContains(error, "cannot parse the MLIR source"),
        "cpu compile reports a parse error");
  error = NULL;
  check(fa3_cpu_compile(NULL, "attn", 0, 0, &error) == NULL &&
            errorContains(error, "must not be NULL"),
        "cpu compile rejects NULL");
}

static const char *kDropoutF32 =
    "func.func @attn(%q: tensor<?x?x2x16xf32>, %k: tensor<?x?x2x16xf32>, "
    "%v: tensor<?x?x2x16xf32>, %rng: tensor<2xi64>) -> "
    "(tensor<?x?x2x16xf32>, tensor<?x2x?xf32>) {\n"
    "  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {dropout = 0.5 : f32} "
    ": (tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, "
    "tensor<2xi64>) -> (tensor<?x?x2x16xf32>, tensor<?x2x?xf32>)\n"
    "  return %o, %lse : tensor<?x?x2x16xf32>, tensor<?x2x?xf32>\n}\n";

/* Attention dropout through the CPU JIT: the Philox (seed, offset) is an
 * int64 input; the same seed gives the same bits, another seed another
 * output, and the LSE (the undropped softmax's) does not depend on it. */
static void testCpuDropout(void) {
  char *error = NULL;
  fa3_cpu_function *fn = fa3_cpu_compile(kDropoutF32, "attn", 0, 0, &error);
  check(fn != NULL && fa3_cpu_num_inputs(fn) == 4,
        "cpu dropout compile: 4 inputs");
  if (!fn) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  int b = 1, s = 40, h = 2, d = 16;
  size_t n = (size_t)b * s * h * d;
  float *x = malloc(3 * n * 4);
  for (size_t i = 0; i < 3 * n; ++i)
    x[i] = 2 * nextUniform() - 1;
  int64_t seeds[3][2] = {{11, 0}, {11, 0}, {12, 0}};
  fa3_tensor outputs[3][2];
  memset(outputs, 0, sizeof(outputs));
  int ok = 1;
  for (int run = 0; run < 3; ++run) {
    fa3_tensor inputs[4] = {{FA3_DTYPE_F32, 4, {b, s, h, d}, x},
                            {FA3_DTYPE_F32, 4, {b, s, h, d}, x + n},
                            {FA3_DTYPE_F32, 4, {b, s, h, d}, x + 2 * n},
                            {FA3_DTYPE_I64, 1, {2}, seeds[run]}};
    if (fa3_cpu_run(fn, inputs, 4, outputs[run], 2, &error) != 0) {
      fprintf(stderr, "%s\n", error);
      fa3_free_string(error);
      error = NULL;
      ok = 0;
    }
  }
  check(ok, "cpu dropout run");
  if (ok) {
    size_t lseBytes = (size_t)b * h * s * 4;
    check(memcmp(outputs[0][0].data, outputs[1][0].data, n * 4) == 0 &&
              memcmp(outputs[0][0].data, outputs[2][0].data, n * 4) != 0,
          "cpu dropout: same seed same bits, another seed another output");
    check(memcmp(outputs[0][1].data, outputs[2][1].data, lseBytes) == 0,
          "cpu dropout: the LSE does not depend on the mask");
  }
  for (int run = 0; run < 3; ++run)
    for (int i = 0; i < 2; ++i)
      if (outputs[run][i].data)
        fa3_free_tensor_data(&outputs[run][i]);
  /* An int32 seed is the wrong type: the error names input #3. */
  int32_t narrow[2] = {11, 0};
  fa3_tensor bad[4] = {{FA3_DTYPE_F32, 4, {b, s, h, d}, x},
                       {FA3_DTYPE_F32, 4, {b, s, h, d}, x + n},
                       {FA3_DTYPE_F32, 4, {b, s, h, d}, x + 2 * n},
                       {FA3_DTYPE_I32, 1, {2}, narrow}};
  fa3_tensor out[2];
  memset(out, 0, sizeof(out));
  check(fa3_cpu_run(fn, bad, 4, out, 2, &error) != 0 &&
            errorContains(error, "input #3"),
        "cpu dropout rejects an int32 rng, naming input #3");
  free(x);
  fa3_cpu_destroy(fn);
}

/* A packed batch (fa3.attention_varlen) through the CPU JIT: int32 offsets
 * beside f32 tensors, each sequence checked against the reference on its
 * rows alone; mismatched offset counts are rejected before running. */
static const char *kVarlenF32 =
    "func.func @varlen(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, "
    "%v: tensor<?x2x16xf32>, %cq: tensor<?xi32>, %ck: tensor<?xi32>) -> "
    "(tensor<?x4x16xf32>, tensor<4x?xf32>) {\n"
    "  %o, %l = fa3.attention_varlen %q, %k, %v, %cq, %ck {causal} : "
    "(tensor<?x4x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, "
    "tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x16xf32>, tensor<4x?xf32>)\n"
    "  return %o, %l : tensor<?x4x16xf32>, tensor<4x?xf32>\n}\n";

static void testCpuVarlen(void) {
  char *error = NULL;
  fa3_cpu_function *fn = fa3_cpu_compile(kVarlenF32, "varlen", 0, 0, &error);
  check(fn != NULL, "cpu varlen compile");
  if (!fn) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  enum { kSeqs = 3, kHq = 4, kHkv = 2, kD = 16 };
  int32_t cuQ[kSeqs + 1] = {0, 5, 5, 75}, cuK[kSeqs + 1] = {0, 9, 12, 82};
  int tq = cuQ[kSeqs], tk = cuK[kSeqs];
  float *q = malloc((size_t)tq * kHq * kD * 4);
  float *k = malloc((size_t)tk * kHkv * kD * 4);
  float *v = malloc((size_t)tk * kHkv * kD * 4);
  for (int i = 0; i < tq * kHq * kD; ++i)
    q[i] = 2 * nextUniform();
  for (int i = 0; i < tk * kHkv * kD; ++i) {
    k[i] = 2 * nextUniform();
    v[i] = nextUniform();
  }
  fa3_tensor inputs[5] = {{FA3_DTYPE_F32, 3, {tq, kHq, kD}, q},
                          {FA3_DTYPE_F32, 3, {tk, kHkv, kD}, k},
                          {FA3_DTYPE_F32, 3, {tk, kHkv, kD}, v},
                          {FA3_DTYPE_I32, 1, {kSeqs + 1}, cuQ},
                          {FA3_DTYPE_I32, 1, {kSeqs + 1}, cuK}};
  fa3_tensor outputs[2];
  memset(outputs, 0, sizeof(outputs));
  int rc = fa3_cpu_run(fn, inputs, 5, outputs, 2, &error);
  check(rc == 0, "cpu varlen run");
  if (rc == 0) {
    double errO = 0, errL = 0;
    const float *got = outputs[0].data, *gotL = outputs[1].data;
    for (int s = 0; s < kSeqs; ++s) {
      int sq = cuQ[s + 1] - cuQ[s], sk = cuK[s + 1] - cuK[s];
      double *o = malloc(sizeof(double) * (size_t)(sq ? sq : 1) * kHq * kD);
      double *lse = malloc(sizeof(double) * (size_t)(sq ? sq : 1) * kHq);
      reference(q + (size_t)cuQ[s] * kHq * kD, k + (size_t)cuK[s] * kHkv * kD,
                v + (size_t)cuK[s] * kHkv * kD, 1, sq, sk, kHq, kHkv, kD, 1, o,
                lse);
      for (int i = 0; i < sq * kHq * kD; ++i)
        errO = fmax(errO, fabs(got[(size_t)cuQ[s] * kHq * kD + i] - o[i]));
      for (int h = 0; h < kHq; ++h)
        for (int i = 0; i < sq; ++i)
          errL = fmax(errL, fabs(gotL[(size_t)h * tq + cuQ[s] + i] -
                                 lse[(size_t)h * sq + i]));
      free(o);
      free(lse);
    }
    printf("cpu varlen max |O - ref| = %.2e, max |LSE - ref| = %.2e\n", errO,
           errL);
    check(errO < 1e-5 && errL < 1e-5,
          "cpu varlen matches the float64 reference per sequence");
    fa3_free_tensor_data(&outputs[0]);
    fa3_free_tensor_data(&outputs[1]);
  } else {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
  }
  /* cu_seqlens_k with one offset fewer than cu_seqlens_q. */
  inputs[4].shape[0] = kSeqs;
  error = NULL;
  rc = fa3_cpu_run(fn, inputs, 5, outputs, 2, &error);
  check(rc != 0 && errorContains(error, "cu_seqlens_q and cu_seqlens_k must "
                                        "both have B + 1 entries"),
        "cpu varlen rejects mismatched offsets");
  free(q);
  free(k);
  free(v);
  fa3_cpu_destroy(fn);

  /* The launch-time choices of the KV-cache attention. */
  check(fa3_select_num_splits(8, 132, 256, 128) == 14 &&
            fa3_select_num_splits(256, 132, 256, 128) == 1,
        "split-KV rule: 14 splits for 8 tiles over 256 blocks, 1 for 256");
  check(fa3_should_pack_gqa(1, 4, 64) == 1 && fa3_should_pack_gqa(64, 4, 64) == 0,
        "PackGQA rule: decode packs, 64 queries do not");
}

static char *bf16Source(int heads, int kvHeads, int d, int causal) {
  char *buffer = malloc(2048);
  char q[64], kv[64], l[64];
  snprintf(q, sizeof(q), "tensor<?x?x%dx%dxbf16>", heads, d);
  snprintf(kv, sizeof(kv), "tensor<?x?x%dx%dxbf16>", kvHeads, d);
  snprintf(l, sizeof(l), "tensor<?x%dx?xf32>", heads);
  snprintf(buffer, 2048,
           "func.func @attn(%%q: %s, %%k: %s, %%v: %s) -> (%s, %s) {\n"
           "  %%o, %%lse = fa3.attention %%q, %%k, %%v%s : (%s, %s, %s) -> "
           "(%s, %s)\n"
           "  return %%o, %%lse : %s, %s\n}\n",
           q, kv, kv, q, l, causal ? " {causal}" : "", q, kv, kv, q, l, q, l);
  return buffer;
}

/* `@kv(q, k_cache, v_cache, cache_seqlens[, page_table])`: one causal
 * fa3.attention_kvcache, paged when `paged`, in `splits` key splits
 * (split-KV when > 1). */
static char *kvcacheSource(int heads, int kvHeads, int d, int paged,
                           int splits) {
  char *buffer = malloc(2048);
  char q[64], kv[64], l[64], attrs[64];
  snprintf(q, sizeof(q), "tensor<?x?x%dx%dxbf16>", heads, d);
  snprintf(kv, sizeof(kv), "tensor<?x?x%dx%dxbf16>", kvHeads, d);
  snprintf(l, sizeof(l), "tensor<?x%dx?xf32>", heads);
  const char *table = paged ? ", %pages: tensor<?x?xi32>" : "";
  const char *operand = paged ? ", %pages" : "";
  const char *type = paged ? ", tensor<?x?xi32>" : "";
  if (splits > 1)
    snprintf(attrs, sizeof(attrs), "{causal, num_splits = %d : i64}", splits);
  else
    snprintf(attrs, sizeof(attrs), "{causal}");
  snprintf(buffer, 2048,
           "func.func @kv(%%q: %s, %%kc: %s, %%vc: %s, %%lens: tensor<?xi32>%s)"
           " -> (%s, %s) {\n"
           "  %%o, %%lse = fa3.attention_kvcache %%q, %%kc, %%vc, %%lens%s "
           "%s : (%s, %s, %s, tensor<?xi32>%s) -> (%s, %s)\n"
           "  return %%o, %%lse : %s, %s\n}\n",
           q, kv, kv, table, q, l, operand, attrs, q, kv, kv, type, q, l, q,
           l);
  return buffer;
}

/* `@varlen(q, k, v, cu_seqlens_q, cu_seqlens_k[, seqused_k])`: one causal
 * bf16 fa3.attention_varlen on packed [T, H, D] tensors. */
static char *varlenSource(int heads, int kvHeads, int d, int seqused) {
  char *buffer = malloc(2048);
  char q[64], kv[64], l[64];
  snprintf(q, sizeof(q), "tensor<?x%dx%dxbf16>", heads, d);
  snprintf(kv, sizeof(kv), "tensor<?x%dx%dxbf16>", kvHeads, d);
  snprintf(l, sizeof(l), "tensor<%dx?xf32>", heads);
  const char *usedArg = seqused ? ", %used: tensor<?xi32>" : "";
  const char *usedOperand = seqused ? ", %used" : "";
  const char *usedType = seqused ? ", tensor<?xi32>" : "";
  snprintf(buffer, 2048,
           "func.func @varlen(%%q: %s, %%k: %s, %%v: %s, %%cq: tensor<?xi32>, "
           "%%ck: tensor<?xi32>%s) -> (%s, %s) {\n"
           "  %%o, %%lse = fa3.attention_varlen %%q, %%k, %%v, %%cq, %%ck%s "
           "{causal} : (%s, %s, %s, tensor<?xi32>, tensor<?xi32>%s) -> (%s, "
           "%s)\n"
           "  return %%o, %%lse : %s, %s\n}\n",
           q, kv, kv, usedArg, q, l, usedOperand, q, kv, kv, usedType, q, l, q,
           l);
  return buffer;
}

/* `@varlen_grad(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k[,
 * seqused_k])`: the backward of varlenSource's attention, packed. */
static char *varlenGradSource(int heads, int kvHeads, int d, int seqused,
                              int deterministic) {
  char *buffer = malloc(4096);
  char q[64], kv[64], l[64];
  snprintf(q, sizeof(q), "tensor<?x%dx%dxbf16>", heads, d);
  snprintf(kv, sizeof(kv), "tensor<?x%dx%dxbf16>", kvHeads, d);
  snprintf(l, sizeof(l), "tensor<%dx?xf32>", heads);
  const char *usedArg = seqused ? ", %used: tensor<?xi32>" : "";
  const char *usedOperand = seqused ? " seqused_k %used" : "";
  const char *usedType = seqused ? ", tensor<?xi32>" : "";
  snprintf(buffer, 4096,
           "func.func @varlen_grad(%%do: %s, %%q: %s, %%k: %s, %%v: %s, "
           "%%o: %s, %%lse: %s, %%cq: tensor<?xi32>, %%ck: tensor<?xi32>%s) "
           "-> (%s, %s, %s) {\n"
           "  %%dq, %%dk, %%dv = fa3.attention_varlen_grad %%do, %%q, %%k, "
           "%%v, %%o, %%lse, %%cq, %%ck%s {causal%s} : (%s, %s, %s, %s, %s, "
           "%s, tensor<?xi32>, tensor<?xi32>%s) -> (%s, %s, %s)\n"
           "  return %%dq, %%dk, %%dv : %s, %s, %s\n}\n",
           q, q, kv, kv, q, l, usedArg, q, kv, kv, usedOperand,
           deterministic ? ", deterministic" : "", q, q, kv, kv, q, l, usedType,
           q, kv, kv, q, kv, kv);
  return buffer;
}

/* The dense backward of bf16Source's causal attention. */
static char *gradSource(int heads, int kvHeads, int d) {
  char *buffer = malloc(4096);
  char q[64], kv[64], l[64];
  snprintf(q, sizeof(q), "tensor<?x?x%dx%dxbf16>", heads, d);
  snprintf(kv, sizeof(kv), "tensor<?x?x%dx%dxbf16>", kvHeads, d);
  snprintf(l, sizeof(l), "tensor<?x%dx?xf32>", heads);
  snprintf(buffer, 4096,
           "func.func @grad(%%do: %s, %%q: %s, %%k: %s, %%v: %s, %%o: %s, "
           "%%lse: %s) -> (%s, %s, %s) {\n"
           "  %%dq, %%dk, %%dv = fa3.attention_grad %%do, %%q, %%k, %%v, "
           "%%o, %%lse {causal} : (%s, %s, %s, %s, %s, %s) -> (%s, %s, %s)\n"
           "  return %%dq, %%dk, %%dv : %s, %s, %s\n}\n",
           q, q, kv, kv, q, l, q, kv, kv, q, q, kv, kv, q, l, q, kv, kv, q, kv,
           kv);
  return buffer;
}

/* fa3_attention_grad_workspace_size of a varlen backward: the f32 dQ
 * accumulator [Hq, P, D] at a 256-byte boundary, LSE·log2(e) and Δ f32
 * [Hq, P] with P = floor((Tq + B·M) / M)·M for block_m M (the default
 * schedule's: 128 at D = 64, else 64), and, when deterministic, the i32
 * turn counters [Hq, P / M]. */
static int64_t varlenGradWorkspace(int64_t b, int64_t tq, int64_t hq, int64_t d,
                                   int deterministic) {
  int64_t m = d == 64 ? 128 : 64;
  int64_t rows = (tq + b * m) / m * m;
  int64_t acc = (hq * rows * d * 4 + 255) / 256 * 256;
  return acc + 2 * hq * rows * 4 + (deterministic ? hq * (rows / m) * 4 : 0);
}

static void testPtx(void) {
  char *source = bf16Source(8, 2, 128, 1), *error = NULL;
  int hit = -1;
  fa3_kernel *kernel = fa3_compile_ptx(source, "attn", 0, 0, &hit, &error);
  check(kernel != NULL, "ptx compile");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    free(source);
    return;
  }
  check(hit == 0 || hit == 1, "ptx compile sets cache_hit");
  check(strstr(fa3_kernel_ptx(kernel), ".target sm_90a") != NULL,
        "ptx targets sm_90a");
  check(strncmp(fa3_kernel_name(kernel), "fa3_fwd", 7) == 0,
        "ptx kernel is named fa3_fwd*");
  check(fa3_kernel_device(kernel) == -1, "ptx kernel has no device");
  error = NULL;
  check(fa3_launch_attention(kernel, 0, 0, 0, 0, 0, 1, 1, 1, NULL, &error) !=
                0 &&
            errorContains(error, "compiled to PTX only"),
        "launching a PTX-only kernel is refused");
  error = NULL;
  check(fa3_launch_attention_kvcache(kernel, 0, 0, 0, 0, 0, 0, 1, 1, 1, NULL,
                                     &error) != 0 &&
            errorContains(error, "fa3_launch_attention_kvcache: the kernel "
                                 "was compiled to PTX only"),
        "the KV-cache launch names itself and refuses a PTX-only kernel");
  error = NULL;
  check(fa3_launch_attention_kvcache(NULL, 0, 0, 0, 0, 0, 0, 1, 1, 1, NULL,
                                     &error) != 0 &&
            errorContains(error, "kernel is NULL"),
        "the KV-cache launch refuses a NULL kernel");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache(kernel, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1,
                                           16, 1, NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_paged_kvcache: the "
                                 "kernel was compiled to PTX only"),
        "the paged KV-cache launch names itself and refuses a PTX-only "
        "kernel");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache(NULL, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1,
                                           16, 1, NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_paged_kvcache: kernel "
                                 "is NULL"),
        "the paged KV-cache launch refuses a NULL kernel");
  error = NULL;
  check(fa3_launch_attention_kvcache_splits(kernel, 0, 0, 0, 0, 0, 0, 0, 1, 1,
                                            1, NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_kvcache_splits: the "
                                 "kernel was compiled to PTX only"),
        "the split-KV launch names itself and refuses a PTX-only kernel");
  error = NULL;
  check(fa3_launch_attention_kvcache_splits(NULL, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1,
                                            NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_kvcache_splits: "
                                 "kernel is NULL"),
        "the split-KV launch refuses a NULL kernel");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache_splits(kernel, 0, 0, 0, 0, 0, 0, 0,
                                                  0, 1, 1, 1, 16, 1, NULL,
                                                  &error) != 0 &&
            errorContains(error, "fa3_launch_attention_paged_kvcache_splits: "
                                 "the kernel was compiled to PTX only"),
        "the paged split-KV launch names itself and refuses a PTX-only "
        "kernel");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache_splits(NULL, 0, 0, 0, 0, 0, 0, 0, 0,
                                                  1, 1, 1, 16, 1, NULL,
                                                  &error) != 0 &&
            errorContains(error, "fa3_launch_attention_paged_kvcache_splits: "
                                 "kernel is NULL"),
        "the paged split-KV launch refuses a NULL kernel");
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_varlen: the kernel is "
                                 "not an fa3.attention_varlen forward; launch "
                                 "it with fa3_launch_attention"),
        "the varlen launch names the entry of a dense forward");
  error = NULL;
  check(fa3_launch_attention_varlen(NULL, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_varlen: kernel is NULL"),
        "the varlen launch refuses a NULL kernel");
  check(fa3_attention_workspace_size(kernel, 2, 3, 4) == 0 &&
            fa3_attention_workspace_size(kernel, -1, 3, 4) == -1 &&
            fa3_attention_workspace_size(NULL, 2, 3, 4) == -1,
        "a 16-bit forward of one split needs no workspace");
  error = NULL;
  check(fa3_launch_attention_grad(kernel, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                  1, 1, NULL, &error) != 0 &&
            errorContains(error, "is a forward"),
        "a forward is not launched as a backward");
  check(fa3_attention_grad_workspace_size(kernel, 1, 1, 1) == -1,
        "a forward has no backward workspace");
  error = NULL;
  check(fa3_launch_attention_varlen_grad(kernel, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 1, 1, 1, 1, 1, NULL,
                                         &error) != 0 &&
            errorContains(error, "fa3_launch_attention_varlen_grad: the "
                                 "kernel is a forward; launch it with "
                                 "fa3_launch_attention"),
        "the varlen backward launch names the entry of a forward");
  error = NULL;
  check(fa3_launch_attention_varlen_grad(NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 1, 1, 1, 1, 1, NULL,
                                         &error) != 0 &&
            errorContains(error, "fa3_launch_attention_varlen_grad: kernel "
                                 "is NULL"),
        "the varlen backward launch refuses a NULL kernel");
  fa3_destroy_kernel(kernel);

  error = NULL;
  check(fa3_compile_ptx(source, "nope", 0, 0, NULL, &error) == NULL &&
            errorContains(error, "nope"),
        "ptx compile names an unknown function");
  free(source);
  char *d96 = bf16Source(8, 2, 96, 0);
  error = NULL;
  check(fa3_compile_ptx(d96, "attn", 0, 0, NULL, &error) == NULL &&
            errorContains(error, "head dim"),
        "ptx compile rejects head dim 96");
  free(d96);
}

/* A PTX-only fa3.attention_varlen kernel: what a kernel is decides its
 * entry point before whether it was loaded, so without a GPU the entries
 * already refuse it but its own, and its own checks seqused_k and the
 * offsets' pointers before reporting the missing load. */
static void testPtxVarlen(void) {
  char *error = NULL;
  char *plain = varlenSource(8, 2, 128, 0);
  fa3_kernel *kernel = fa3_compile_ptx(plain, "varlen", 0, 0, NULL, &error);
  free(plain);
  check(kernel != NULL, "varlen ptx compile");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  check(strstr(fa3_kernel_ptx(kernel), ".target sm_90a") != NULL &&
            strncmp(fa3_kernel_name(kernel), "fa3_fwd", 7) == 0,
        "varlen ptx targets sm_90a");
  /* Device addresses that are never dereferenced: every call fails first. */
  const uint64_t p = 256;
  error = NULL;
  check(fa3_launch_attention(kernel, p, p, p, p, p, 1, 1, 1, NULL, &error) !=
                0 &&
            errorContains(error, "launch it with fa3_launch_attention_varlen"),
        "a varlen kernel is not launched as a dense forward");
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, p, p, p, p, p, p, p, p, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "compiled without seqused_k; pass 0"),
        "the varlen launch refuses seqused_k the kernel does not take");
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, p, p, p, p, p, 0, p, 0, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "cu_seqlens_q is NULL"),
        "the varlen launch refuses NULL cu_seqlens_q");
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, p, p, p, p, p, p, 0, 0, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "cu_seqlens_k is NULL"),
        "the varlen launch refuses NULL cu_seqlens_k");
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, p, p, p, 0, p, p, p, 0, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "out is NULL"),
        "the varlen launch refuses a NULL output");
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, p, p, p, p, p, p, p, 0, 1, 1, 1, -1,
                                    NULL, &error) != 0 &&
            errorContains(error, "negative"),
        "the varlen launch refuses a negative max_seqlen_q");
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, p, p, p, p, p, p, p, 0, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_varlen: the kernel was "
                                 "compiled to PTX only"),
        "the varlen launch refuses a PTX-only kernel last");
  check(fa3_attention_workspace_size(kernel, 2, 3, 4) == 0,
        "a varlen forward needs no workspace");
  fa3_destroy_kernel(kernel);

  char *used = varlenSource(8, 2, 128, 1);
  error = NULL;
  kernel = fa3_compile_ptx(used, "varlen", 0, 0, NULL, &error);
  free(used);
  check(kernel != NULL, "varlen ptx compile with seqused_k");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, p, p, p, p, p, p, p, 0, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "seqused_k is NULL, but the kernel was "
                                 "compiled with it"),
        "the varlen launch needs the seqused_k its kernel takes");
  fa3_destroy_kernel(kernel);
}

/* A PTX-only dense backward: the varlen backward entry refuses it, naming
 * fa3_launch_attention_grad, which refuses it only for want of a load. */
static void testPtxGrad(void) {
  char *source = gradSource(8, 2, 64), *error = NULL;
  fa3_kernel *kernel = fa3_compile_ptx(source, "grad", 0, 0, NULL, &error);
  free(source);
  check(kernel != NULL, "backward ptx compile");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  const uint64_t p = 256;
  error = NULL;
  check(fa3_launch_attention_varlen_grad(kernel, p, p, p, p, p, p, 0, p, p, 0,
                                         p, p, p, p, 1, 1, 1, 1, 1, NULL,
                                         &error) != 0 &&
            errorContains(error, "the kernel is a dense backward "
                                 "(fa3.attention_grad); launch it with "
                                 "fa3_launch_attention_grad"),
        "the varlen backward launch names the entry of a dense backward");
  error = NULL;
  check(fa3_launch_attention_grad(kernel, p, p, p, p, p, p, 0, p, p, p, p, 1, 1,
                                  1, NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_grad: the kernel was "
                                 "compiled to PTX only"),
        "the dense backward launch refuses a PTX-only kernel");
  fa3_destroy_kernel(kernel);
}

/* `--ptx-varlen-grad`: a PTX-only fa3.attention_varlen_grad backward (its
 * own lit test, varlen-grad-ptx.test). Its workspace size answers without a
 * GPU; what the kernel is decides its entry point before whether it was
 * loaded, so the entries refuse it but its own, which checks seqused_k, the
 * offsets, sizes and pointers before reporting the missing load. */
static void testPtxVarlenGrad(void) {
  enum { kHq = 8, kHkv = 2, kD = 128 };
  char *error = NULL;
  char *plain = varlenGradSource(kHq, kHkv, kD, 0, 0);
  fa3_kernel *kernel =
      fa3_compile_ptx(plain, "varlen_grad", 0, 0, NULL, &error);
  free(plain);
  check(kernel != NULL, "varlen backward ptx compile");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  /* The main kernel and its two companions, named after it. */
  char entry[512];
  const char *ptx = fa3_kernel_ptx(kernel), *name = fa3_kernel_name(kernel);
  int entries = strstr(ptx, ".target sm_90a") != NULL;
  snprintf(entry, sizeof(entry), ".entry %s(", name);
  entries &= strstr(ptx, entry) != NULL;
  snprintf(entry, sizeof(entry), ".entry %s_pre(", name);
  entries &= strstr(ptx, entry) != NULL;
  snprintf(entry, sizeof(entry), ".entry %s_post(", name);
  entries &= strstr(ptx, entry) != NULL;
  check(entries, "varlen backward ptx has the main, _pre and _post kernels");
  int64_t sizes[][3] = {{3, 150, 320}, {1, 64, 64}, {40, 1000, 900},
                        {0, 150, 320}, {0, 10, 10}, {3, 0, 320},
                        {3, 150, 0},   {0, 0, 0}};
  int sizesOk = 1;
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    int64_t got = fa3_attention_grad_workspace_size(kernel, sizes[i][0],
                                                    sizes[i][1], sizes[i][2]);
    int64_t want = varlenGradWorkspace(sizes[i][0], sizes[i][1], kHq, kD, 0);
    if (got != want) {
      fprintf(stderr, "workspace of B=%lld Tq=%lld Tk=%lld: %lld, want %lld\n",
              (long long)sizes[i][0], (long long)sizes[i][1],
              (long long)sizes[i][2], (long long)got, (long long)want);
      sizesOk = 0;
    }
  }
  printf("varlen backward workspace B=3 Tq=150: %lld bytes\n",
         (long long)fa3_attention_grad_workspace_size(kernel, 3, 150, 320));
  check(sizesOk, "varlen backward workspace: accumulator, then the padded "
                 "statistics");
  check(fa3_attention_grad_workspace_size(kernel, -1, 1, 1) == -1 &&
            fa3_attention_grad_workspace_size(kernel, 1, -1, 1) == -1 &&
            fa3_attention_workspace_size(kernel, 1, 1, 1) == -1,
        "varlen backward workspace refuses negative sizes and the forward's "
        "query");

  /* Device addresses that are never dereferenced: every call fails first. */
  const uint64_t p = 256;
  error = NULL;
  check(fa3_launch_attention_grad(kernel, p, p, p, p, p, p, 0, p, p, p, p, 1, 1,
                                  1, NULL, &error) != 0 &&
            errorContains(error, "fa3_launch_attention_grad: the kernel is an "
                                 "fa3.attention_varlen_grad backward; launch "
                                 "it with fa3_launch_attention_varlen_grad"),
        "a varlen backward is not launched as a dense backward");
  error = NULL;
  check(fa3_launch_attention_varlen(kernel, p, p, p, p, p, p, p, 0, 1, 1, 1, 1,
                                    NULL, &error) != 0 &&
            errorContains(error, "the kernel is a backward; launch it with "
                                 "fa3_launch_attention_varlen_grad"),
        "a varlen backward is not launched as a varlen forward");
  error = NULL;
  check(fa3_launch_attention(kernel, p, p, p, p, p, 1, 1, 1, NULL, &error) !=
                0 &&
            errorContains(error, "launch it with "
                                 "fa3_launch_attention_varlen_grad"),
        "a varlen backward is not launched as a dense forward");
  /* grad_out, q, k, v, out, lse, grad_lse, cu_q, cu_k, seqused_k, grad_q,
   * grad_k, grad_v, workspace, batch, total_q, total_k, max_q, max_k. */
  struct {
    uint64_t cuQ, cuK, used, gradK, workspace;
    int64_t maxK;
    const char *message, *what;
  } bad[] = {
      {p, p, p, p, p, 1, "compiled without seqused_k; pass 0",
       "the varlen backward launch refuses seqused_k the kernel does not "
       "take"},
      {0, p, 0, p, p, 1, "cu_seqlens_q is NULL",
       "the varlen backward launch refuses NULL cu_seqlens_q"},
      {p, 0, 0, p, p, 1, "cu_seqlens_k is NULL",
       "the varlen backward launch refuses NULL cu_seqlens_k"},
      {p, p, 0, p, p, -1, "negative",
       "the varlen backward launch refuses a negative max_seqlen_k"},
      {p, p, 0, 0, p, 1, "grad_k is NULL",
       "the varlen backward launch refuses a NULL grad_k"},
      {p, p, 0, p, 0, 1, "workspace is NULL",
       "the varlen backward launch refuses a NULL workspace"},
      {p, p, 0, p, p, 1,
       "fa3_launch_attention_varlen_grad: the kernel was compiled to PTX "
       "only",
       "the varlen backward launch refuses a PTX-only kernel last"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    error = NULL;
    check(fa3_launch_attention_varlen_grad(
              kernel, p, p, p, p, p, p, 0, bad[i].cuQ, bad[i].cuK, bad[i].used,
              p, bad[i].gradK, p, bad[i].workspace, 1, 1, 1, 1, bad[i].maxK,
              NULL, &error) != 0 &&
              errorContains(error, bad[i].message),
          bad[i].what);
  }
  fa3_destroy_kernel(kernel);

  char *used = varlenGradSource(kHq, kHkv, kD, 1, 0);
  error = NULL;
  kernel = fa3_compile_ptx(used, "varlen_grad", 0, 0, NULL, &error);
  free(used);
  check(kernel != NULL, "varlen backward ptx compile with seqused_k");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  error = NULL;
  check(fa3_launch_attention_varlen_grad(kernel, p, p, p, p, p, p, 0, p, p, 0,
                                         p, p, p, p, 1, 1, 1, 1, 1, NULL,
                                         &error) != 0 &&
            errorContains(error, "seqused_k is NULL, but the kernel was "
                                 "compiled with it"),
        "the varlen backward launch needs the seqused_k its kernel takes");
  fa3_destroy_kernel(kernel);

  char *deterministic = varlenGradSource(kHq, kHkv, kD, 0, 1);
  error = NULL;
  kernel = fa3_compile_ptx(deterministic, "varlen_grad", 0, 0, NULL, &error);
  free(deterministic);
  check(kernel != NULL, "deterministic varlen backward ptx compile");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return;
  }
  check(fa3_attention_grad_workspace_size(kernel, 3, 150, 320) ==
                varlenGradWorkspace(3, 150, kHq, kD, 1) &&
            fa3_attention_grad_workspace_size(kernel, 40, 1000, 900) ==
                varlenGradWorkspace(40, 1000, kHq, kD, 1),
        "deterministic varlen backward workspace adds the turn counters");
  fa3_destroy_kernel(kernel);
}

static void testCostModel(void) {
  /* d <= 64: the query tile follows the sequence length (ViT's 49 rows take
   * 64-row tiles, long sequences 192); d128 keeps 128 and runs on a
   * persistent grid when the key loop is short. */
  fa3_schedule short64, long64, short128, long128, causal128;
  fa3_select_forward_schedule(64, 0, 0, 49, 49, &short64);
  fa3_select_forward_schedule(64, 0, 0, 8192, 8192, &long64);
  fa3_select_forward_schedule(128, 0, 0, 512, 512, &short128);
  fa3_select_forward_schedule(128, 0, 0, 8192, 8192, &long128);
  fa3_select_forward_schedule(128, 0, 1, 8192, 8192, &causal128);
  printf("block_m: d64 S=49 -> %lld, d64 S=8192 -> %lld, d128 -> %lld; "
         "persistent d128 S=512 %d, S=8192 %d, causal S=8192 %d\n",
         (long long)short64.block_m, (long long)long64.block_m,
         (long long)long128.block_m, short128.persistent, long128.persistent,
         causal128.persistent);
  check(short64.block_m == 64 && long64.block_m == 192 &&
            long128.block_m == 128 && short128.block_m == 128,
        "cost model block_m by length");
  check(short128.persistent && !long128.persistent && !causal128.persistent &&
            !short64.persistent,
        "cost model persistent grid by length");
  /* The whole schedule: d128 runs warp-specialized (24/240) with pingpong
   * and intra-warpgroup overlap; d64's 192-row tile has three consumers
   * (32/160) and neither. */
  fa3_schedule s128, s64;
  fa3_select_forward_schedule(128, 0, 0, 0, 0, &s128);
  fa3_select_forward_schedule(64, 0, 1, 0, 0, &s64);
  printf("schedule d128: %lldx%lld, %lld consumers, regs %lld/%lld, pingpong %d, "
         "overlap %d, persistent %d\n",
         (long long)s128.block_m, (long long)s128.block_n,
         (long long)s128.consumer_wgs, (long long)s128.producer_regs,
         (long long)s128.consumer_regs, s128.pingpong, s128.intra_wg_overlap,
         s128.persistent);
  check(s128.block_m == 128 && s128.block_n == 128 && s128.stages == 2 &&
            s128.consumer_wgs == 2 && s128.producer_regs == 24 &&
            s128.consumer_regs == 240 && s128.pingpong &&
            s128.intra_wg_overlap && !s128.persistent && s128.cluster == 1 &&
            s64.block_m == 192 && s64.consumer_wgs == 3 &&
            s64.producer_regs == 32 && !s64.pingpong && !s64.intra_wg_overlap,
        "cost model schedule");
  /* Every field is written, rescale_threshold (lazy rescaling) and
     poly_exp2 included. */
  fa3_schedule filled;
  memset(&filled, 0xff, sizeof filled);
  fa3_select_forward_schedule(256, 0, 0, 0, 0, &filled);
  check(filled.rescale_threshold >= 0 && filled.rescale_threshold <= 8 &&
            filled.poly_exp2 >= 0 && filled.poly_exp2 <= 16 &&
            filled.cluster == 1,
        "cost model schedule: every field written");
  printf("version %s\n", fa3_version());
}

/*===----------------------------------------------------------------------===*
 * --gpu: the CUDA half, with the driver through dlopen.
 *===----------------------------------------------------------------------===*/

typedef int (*CuInit)(unsigned);
typedef int (*CuDeviceGet)(int *, int);
typedef int (*CuCtxRetain)(void **, int);
typedef int (*CuCtxSetCurrent)(void *);
typedef int (*CuMemAlloc)(uint64_t *, size_t);
typedef int (*CuMemFree)(uint64_t);
typedef int (*CuMemcpyHtoD)(uint64_t, const void *, size_t);
typedef int (*CuMemcpyDtoH)(void *, uint64_t, size_t);
typedef int (*CuCtxSynchronize)(void);

/* `--gpu`, split-KV: a contiguous and a paged fa3.attention_kvcache of 4
 * splits. Each entry point refuses them but its own; the split entries
 * check the workspace, lengths and page table before any launch; and the
 * contiguous one, on the caches [B, Sk, Hkv, D] at full length (so the
 * bottom-right causal mask is the dense one), matches the float64
 * reference. The one-split kernels are refused by the split entries. */
static int testGpuSplitKV(int b, int sq, int sk, int hq, int hkv, int d,
                          uint64_t dq, uint64_t dk, uint64_t dv, uint64_t dout,
                          uint64_t dlse, const float *qf, const float *kf,
                          const float *vf, CuMemAlloc cuMemAlloc,
                          CuMemFree cuMemFree, CuMemcpyHtoD cuMemcpyHtoD,
                          CuMemcpyDtoH cuMemcpyDtoH,
                          CuCtxSynchronize cuCtxSynchronize) {
  const int splits = 4;
  char *error = NULL;
  char *plain = kvcacheSource(hq, hkv, d, 0, 1);
  fa3_kernel *kernel = fa3_compile_attention(plain, "kv", 0, 0, NULL, &error);
  check(kernel != NULL, "gpu kvcache compile");
  free(plain);
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return 1;
  }
  error = NULL;
  check(fa3_launch_attention_kvcache_splits(kernel, dq, dk, dv, dout, dlse, dq,
                                            dq, b, sq, sk, NULL, &error) != 0 &&
            errorContains(error, "attends in one split (num_splits = 1); "
                                 "launch it with "
                                 "fa3_launch_attention_kvcache"),
        "gpu: a kernel of one split is not launched as split-KV");
  check(fa3_attention_workspace_size(kernel, b, sq, sk) == 0,
        "gpu: a kernel of one split needs no workspace");
  fa3_destroy_kernel(kernel);

  char *split = kvcacheSource(hq, hkv, d, 0, splits);
  error = NULL;
  kernel = fa3_compile_attention(split, "kv", 0, 0, NULL, &error);
  check(kernel != NULL, "gpu split-KV compile");
  free(split);
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return 1;
  }
  /* f32 partial O [N*B, Sq, Hq, D], then at a 256-byte boundary the f32
   * partial LSE [N*B, Hq, Sq]. */
  int64_t partialO = (int64_t)splits * b * sq * hq * d * 4;
  int64_t want = (partialO + 255) / 256 * 256 + (int64_t)splits * b * hq * sq * 4;
  int64_t bytes = fa3_attention_workspace_size(kernel, b, sq, sk);
  printf("gpu split-KV workspace: %lld bytes\n", (long long)bytes);
  check(bytes == want, "gpu: the split-KV workspace holds the partials");
  error = NULL;
  check(fa3_launch_attention_kvcache(kernel, dq, dk, dv, dout, dlse, dq, b, sq,
                                     sk, NULL, &error) != 0 &&
            errorContains(error, "splits the keys (num_splits = 4); launch it "
                                 "with fa3_launch_attention_kvcache_splits"),
        "gpu: a split-KV kernel is not launched as one split");
  error = NULL;
  check(fa3_launch_attention(kernel, dq, dk, dv, dout, dlse, b, sq, sk, NULL,
                             &error) != 0 &&
            errorContains(error, "launch it with "
                                 "fa3_launch_attention_kvcache_splits"),
        "gpu: a split-KV kernel is not launched as a dense forward");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache_splits(kernel, dq, dk, dv, dout,
                                                  dlse, dq, dq, dq, b, sq, 4,
                                                  16, 4, NULL, &error) != 0 &&
            errorContains(error, "does not read a paged KV cache; launch it "
                                 "with fa3_launch_attention_kvcache_splits"),
        "gpu: a contiguous split-KV kernel is not launched as paged");
  error = NULL;
  check(fa3_launch_attention_kvcache_splits(kernel, dq, dk, dv, dout, dlse, dq,
                                            0, b, sq, sk, NULL, &error) != 0 &&
            errorContains(error, "workspace is NULL"),
        "gpu: the split-KV launch refuses a NULL workspace");
  error = NULL;
  check(fa3_launch_attention_kvcache_splits(kernel, dq, dk, dv, dout, dlse, 0,
                                            dq, b, sq, sk, NULL, &error) != 0 &&
            errorContains(error, "cache_seqlens is NULL"),
        "gpu: the split-KV launch refuses NULL cache_seqlens");
  error = NULL;
  check(fa3_launch_attention_kvcache_splits(kernel, dq, dk, dv, dout, dlse, dq,
                                            dq + 16, b, sq, sk, NULL,
                                            &error) != 0 &&
            errorContains(error, "256-byte aligned"),
        "gpu: the split-KV launch refuses an unaligned workspace");
  /* The run: every batch at its full length sk. */
  uint64_t workspace = 0, lens = 0;
  int32_t *hostLens = malloc(sizeof(int32_t) * (size_t)b);
  for (int i = 0; i < b; ++i)
    hostLens[i] = sk;
  size_t nq = (size_t)b * sq * hq * d, nl = (size_t)b * hq * sq;
  uint16_t *ho16 = malloc(nq * 2);
  float *lseGot = malloc(nl * 4);
  double *o = malloc(nq * 8), *lse = malloc(nl * 8);
  if (cuMemAlloc(&workspace, (size_t)bytes) ||
      cuMemAlloc(&lens, sizeof(int32_t) * (size_t)b) ||
      cuMemcpyHtoD(lens, hostLens, sizeof(int32_t) * (size_t)b)) {
    printf("gpu: split-KV allocation failed: FAIL\n");
    return 1;
  }
  error = NULL;
  int rc = fa3_launch_attention_kvcache_splits(kernel, dq, dk, dv, dout, dlse,
                                               lens, workspace, b, sq, sk,
                                               NULL, &error);
  check(rc == 0, "gpu split-KV launch");
  if (rc) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return 1;
  }
  cuCtxSynchronize();
  cuMemcpyDtoH(ho16, dout, nq * 2);
  cuMemcpyDtoH(lseGot, dlse, nl * 4);
  reference(qf, kf, vf, b, sq, sk, hq, hkv, d, 1, o, lse);
  double errO = 0, errL = 0;
  for (size_t i = 0; i < nq; ++i)
    errO = fmax(errO, fabs(fromBf16(ho16[i]) - o[i]));
  for (size_t i = 0; i < nl; ++i)
    errL = fmax(errL, fabs(lseGot[i] - lse[i]));
  printf("gpu split-KV max |O - ref| = %.2e, max |LSE - ref| = %.2e\n", errO,
         errL);
  check(errO < 1.0 / 64 && errL < 1e-3,
        "gpu split-KV matches the float64 reference");
  fa3_destroy_kernel(kernel);
  free(hostLens);
  free(ho16);
  free(lseGot);
  free(o);
  free(lse);
  cuMemFree(workspace);
  cuMemFree(lens);

  /* The paged split-KV kernel: its own entry checks its pointers and page
   * geometry before any launch (the buffers are never read). */
  char *paged = kvcacheSource(hq, hkv, d, 1, splits);
  error = NULL;
  kernel = fa3_compile_attention(paged, "kv", 0, 0, NULL, &error);
  check(kernel != NULL, "gpu paged split-KV compile");
  free(paged);
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return 1;
  }
  error = NULL;
  check(fa3_launch_attention_paged_kvcache(kernel, dq, dk, dv, dout, dlse, dq,
                                           dq, b, sq, 4, 16, 4, NULL,
                                           &error) != 0 &&
            errorContains(error, "launch it with "
                                 "fa3_launch_attention_paged_kvcache_splits"),
        "gpu: a paged split-KV kernel is not launched as one split");
  error = NULL;
  check(fa3_launch_attention_kvcache_splits(kernel, dq, dk, dv, dout, dlse, dq,
                                            dq, b, sq, sk, NULL, &error) != 0 &&
            errorContains(error, "reads a paged KV cache; launch it with "
                                 "fa3_launch_attention_paged_kvcache_splits"),
        "gpu: a paged split-KV kernel is not launched as contiguous");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache_splits(kernel, dq, dk, dv, dout,
                                                  dlse, dq, 0, dq, b, sq, 4, 16,
                                                  4, NULL, &error) != 0 &&
            errorContains(error, "page_table is NULL"),
        "gpu: the paged split-KV launch refuses a NULL page table");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache_splits(kernel, dq, dk, dv, dout,
                                                  dlse, 0, dq, dq, b, sq, 4, 16,
                                                  4, NULL, &error) != 0 &&
            errorContains(error, "cache_seqlens is NULL"),
        "gpu: the paged split-KV launch refuses NULL cache_seqlens");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache_splits(kernel, dq, dk, dv, dout,
                                                  dlse, dq, dq, 0, b, sq, 4, 16,
                                                  4, NULL, &error) != 0 &&
            errorContains(error, "workspace is NULL"),
        "gpu: the paged split-KV launch refuses a NULL workspace");
  {
    struct {
      int64_t pages, size, width;
      const char *message;
    } bad[] = {{4, 0, 4, "page_size = 0 must be at least 1"},
               {4, 16, 0, "(max_pages) = 0 must be at least 1"},
               {0, 16, 4, "num_pages = 0 must be at least 1"},
               {4, 65536, 65536, "must fit in 32 bits"}};
    int ok = 1;
    /* A 256-byte aligned address that is never written: the checks fail
     * before any launch. */
    uint64_t aligned = dq & ~(uint64_t)255;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
      error = NULL;
      ok &= fa3_launch_attention_paged_kvcache_splits(
                kernel, dq, dk, dv, dout, dlse, dq, dq, aligned, b, sq,
                bad[i].pages, bad[i].size, bad[i].width, NULL, &error) != 0 &&
            errorContains(error, bad[i].message);
    }
    check(ok, "gpu: the paged split-KV launch checks the page geometry");
  }
  fa3_destroy_kernel(kernel);
  return 0;
}

/* `--gpu`, varlen: a causal bf16 fa3.attention_varlen (GQA 8:2, d64) on 3
 * packed sequences of 1, 129 and 17 queries over 300, 1 and 17 keys, with
 * 3 query rows past cu_seqlens_q[3] and 2 key rows past cu_seqlens_k[3],
 * and max_seqlen_q = 1000 (the CTAs past a sequence exit). Each sequence
 * against the float64 reference on its own rows (the bound of the dense
 * case), the tail rows O = 0 and LSE = -inf over poisoned outputs; then
 * the kernel compiled with seqused_k, on 250, 1 and 0 used keys (the last
 * sequence sees no key: O = 0, LSE = -inf). The other entries refuse the
 * kernel. */
static int testGpuVarlen(CuMemAlloc cuMemAlloc, CuMemFree cuMemFree,
                         CuMemcpyHtoD cuMemcpyHtoD, CuMemcpyDtoH cuMemcpyDtoH,
                         CuCtxSynchronize cuCtxSynchronize) {
  enum { kSeqs = 3, kHq = 8, kHkv = 2, kD = 64, kTq = 150, kTk = 320 };
  int32_t cuQ[kSeqs + 1] = {0, 1, 130, 147}, cuK[kSeqs + 1] = {0, 300, 301, 318};
  int32_t used[kSeqs] = {250, 1, 0};
  size_t nq = (size_t)kTq * kHq * kD, nk = (size_t)kTk * kHkv * kD,
         nl = (size_t)kHq * kTq;
  uint16_t *q16 = malloc(nq * 2), *k16 = malloc(nk * 2), *v16 = malloc(nk * 2),
           *o16 = malloc(nq * 2);
  float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4),
        *lseGot = malloc(nl * 4);
  for (size_t i = 0; i < nq; ++i)
    qf[i] = fromBf16(q16[i] = toBf16(2 * nextUniform()));
  for (size_t i = 0; i < nk; ++i) {
    kf[i] = fromBf16(k16[i] = toBf16(2 * nextUniform()));
    vf[i] = fromBf16(v16[i] = toBf16(nextUniform()));
  }
  /* All-ones bytes: NaN in bf16 and f32, so a row the launch leaves alone
   * fails the comparison. */
  unsigned char *poison = malloc(nq * 2 > nl * 4 ? nq * 2 : nl * 4);
  memset(poison, 0xFF, nq * 2 > nl * 4 ? nq * 2 : nl * 4);
  uint64_t dq = 0, dk = 0, dv = 0, dout = 0, dlse = 0, dcq = 0, dck = 0,
           dused = 0;
  if (cuMemAlloc(&dq, nq * 2) || cuMemAlloc(&dk, nk * 2) ||
      cuMemAlloc(&dv, nk * 2) || cuMemAlloc(&dout, nq * 2) ||
      cuMemAlloc(&dlse, nl * 4) || cuMemAlloc(&dcq, sizeof(cuQ)) ||
      cuMemAlloc(&dck, sizeof(cuK)) || cuMemAlloc(&dused, sizeof(used)) ||
      cuMemcpyHtoD(dq, q16, nq * 2) || cuMemcpyHtoD(dk, k16, nk * 2) ||
      cuMemcpyHtoD(dv, v16, nk * 2) || cuMemcpyHtoD(dcq, cuQ, sizeof(cuQ)) ||
      cuMemcpyHtoD(dck, cuK, sizeof(cuK)) ||
      cuMemcpyHtoD(dused, used, sizeof(used))) {
    printf("gpu: varlen allocation or copy failed: FAIL\n");
    return 1;
  }
  for (int withUsed = 0; withUsed <= 1; ++withUsed) {
    char *source = varlenSource(kHq, kHkv, kD, withUsed), *error = NULL;
    fa3_kernel *kernel =
        fa3_compile_attention(source, "varlen", 0, 0, NULL, &error);
    free(source);
    check(kernel != NULL, withUsed ? "gpu varlen compile with seqused_k"
                                   : "gpu varlen compile");
    if (!kernel) {
      fprintf(stderr, "%s\n", error);
      fa3_free_string(error);
      return 1;
    }
    if (!withUsed) {
      error = NULL;
      check(fa3_launch_attention(kernel, dq, dk, dv, dout, dlse, 1, kTq, kTk,
                                 NULL, &error) != 0 &&
                errorContains(error, "launch it with "
                                     "fa3_launch_attention_varlen"),
            "gpu: a varlen kernel is not launched as a dense forward");
      error = NULL;
      check(fa3_launch_attention_kvcache(kernel, dq, dk, dv, dout, dlse, dcq,
                                         1, kTq, kTk, NULL, &error) != 0 &&
                errorContains(error, "launch it with "
                                     "fa3_launch_attention_varlen"),
            "gpu: a varlen kernel is not launched as a KV cache");
      error = NULL;
      check(fa3_launch_attention_varlen(kernel, dq, dk, dv, dout, dlse, dcq,
                                        dck, dused, kSeqs, kTq, kTk, 1000,
                                        NULL, &error) != 0 &&
                errorContains(error, "compiled without seqused_k"),
            "gpu: the varlen launch refuses an unexpected seqused_k");
    } else {
      error = NULL;
      check(fa3_launch_attention_varlen(kernel, dq, dk, dv, dout, dlse, dcq,
                                        dck, 0, kSeqs, kTq, kTk, 1000, NULL,
                                        &error) != 0 &&
                errorContains(error, "seqused_k is NULL"),
            "gpu: the varlen launch needs its seqused_k");
    }
    cuMemcpyHtoD(dout, poison, nq * 2);
    cuMemcpyHtoD(dlse, poison, nl * 4);
    error = NULL;
    int rc = fa3_launch_attention_varlen(kernel, dq, dk, dv, dout, dlse, dcq,
                                         dck, withUsed ? dused : 0, kSeqs, kTq,
                                         kTk, 1000, NULL, &error);
    check(rc == 0, withUsed ? "gpu varlen launch with seqused_k"
                            : "gpu varlen launch");
    if (rc) {
      fprintf(stderr, "%s\n", error);
      fa3_free_string(error);
      return 1;
    }
    cuCtxSynchronize();
    cuMemcpyDtoH(o16, dout, nq * 2);
    cuMemcpyDtoH(lseGot, dlse, nl * 4);
    double errO = 0, errL = 0;
    int lseInfOk = 1;
    for (int b = 0; b < kSeqs; ++b) {
      int sq = cuQ[b + 1] - cuQ[b];
      int sk = withUsed ? used[b] : cuK[b + 1] - cuK[b];
      double *o = malloc(sizeof(double) * (size_t)(sq ? sq : 1) * kHq * kD);
      double *lse = malloc(sizeof(double) * (size_t)(sq ? sq : 1) * kHq);
      reference(qf + (size_t)cuQ[b] * kHq * kD, kf + (size_t)cuK[b] * kHkv * kD,
                vf + (size_t)cuK[b] * kHkv * kD, 1, sq, sk, kHq, kHkv, kD, 1, o,
                lse);
      for (int i = 0; i < sq * kHq * kD; ++i) {
        double got = fromBf16(o16[(size_t)cuQ[b] * kHq * kD + i]);
        errO = isnan(got) ? INFINITY : fmax(errO, fabs(got - o[i]));
      }
      for (int h = 0; h < kHq; ++h)
        for (int i = 0; i < sq; ++i) {
          double want = lse[(size_t)h * sq + i];
          float got = lseGot[(size_t)h * kTq + cuQ[b] + i];
          if (isinf(want))
            lseInfOk &= isinf(got) && got < 0;
          else
            errL = isnan(got) ? INFINITY : fmax(errL, fabs(got - want));
        }
      free(o);
      free(lse);
    }
    /* The rows past cu_seqlens_q[3]: the launch's fill. */
    int tailOk = 1;
    for (size_t i = (size_t)cuQ[kSeqs] * kHq * kD; i < nq; ++i)
      tailOk &= o16[i] == 0;
    for (int h = 0; h < kHq; ++h)
      for (int i = cuQ[kSeqs]; i < kTq; ++i)
        tailOk &= isinf(lseGot[(size_t)h * kTq + i]) &&
                  lseGot[(size_t)h * kTq + i] < 0;
    printf("gpu varlen%s max |O - ref| = %.2e, max |LSE - ref| = %.2e\n",
           withUsed ? " (seqused_k)" : "", errO, errL);
    /* The dense case's bound (testGpu): bf16 rounding of O and of P. */
    check(errO < 1.0 / 64 && errL < 1e-3 && lseInfOk,
          withUsed ? "gpu varlen with seqused_k matches the float64 reference"
                   : "gpu varlen matches the float64 reference");
    check(tailOk, withUsed ? "gpu varlen with seqused_k fills the tail rows"
                           : "gpu varlen fills the tail rows");
    fa3_destroy_kernel(kernel);
  }
  free(q16);
  free(k16);
  free(v16);
  free(o16);
  free(qf);
  free(kf);
  free(vf);
  free(lseGot);
  free(poison);
  uint64_t buffers[] = {dq, dk, dv, dout, dlse, dcq, dck, dused};
  for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); ++i)
    cuMemFree(buffers[i]);
  return 0;
}

/* The float64 gradients of the packed causal attention of `batch`
 * sequences (seqused_k: `used`, else NULL), given the forward's LSE per
 * packed row (`lse` [Hq, Tq], -inf for a row that sees no key) and the O the
 * backward reads (`o`, the kernel's bf16 copy): per sequence and query head,
 * P = exp(S - LSE), dP = dO Vᵀ, Δ = rowsum(dO ∘ O) - dLSE, dS = P ∘ (dP -
 * Δ), dQ = scale dS K, dK = scale dSᵀ Q, dV = Pᵀ dO (dK, dV summed over the
 * group of query heads). `mag*` receive the same sums over absolute values
 * (|dS| bounded by P (|dP| + |Δ|)), which bound the bf16 rounding. The
 * outputs must be zeroed by the caller; rows outside every sequence stay
 * 0. */
static void referenceVarlenGrad(const float *q, const float *k, const float *v,
                                const float *dO, const float *o,
                                const double *lse, const float *dlse,
                                const int32_t *cuQ, const int32_t *cuK,
                                const int32_t *used, int batch, int totalQ,
                                int hq, int hkv, int d, double *dq, double *dk,
                                double *dv, double *magQ, double *magK,
                                double *magV) {
  double scale = 1.0 / sqrt((double)d);
  for (int b = 0; b < batch; ++b) {
    int sq = cuQ[b + 1] - cuQ[b];
    int sk = used ? used[b] : cuK[b + 1] - cuK[b];
    for (int h = 0; h < hq; ++h) {
      int g = h / (hq / hkv);
      for (int i = 0; i < sq; ++i) {
        size_t row = (size_t)cuQ[b] + i;
        double l = lse[(size_t)h * totalQ + row];
        if (isinf(l))
          continue; /* sees no key: P = 0 */
        const float *qi = q + (row * hq + h) * d,
                    *doi = dO + (row * hq + h) * d;
        double delta = 0;
        for (int x = 0; x < d; ++x)
          delta += (double)doi[x] * o[(row * hq + h) * d + x];
        if (dlse)
          delta -= dlse[(size_t)h * totalQ + row];
        for (int j = 0; j < sk && j <= i + (sk - sq); ++j) {
          size_t col = (size_t)cuK[b] + j;
          const float *kj = k + (col * hkv + g) * d,
                      *vj = v + (col * hkv + g) * d;
          double s = 0, dp = 0;
          for (int x = 0; x < d; ++x) {
            s += (double)qi[x] * kj[x];
            dp += (double)doi[x] * vj[x];
          }
          double p = exp(s * scale - l);
          double ds = p * (dp - delta), mag = p * (fabs(dp) + fabs(delta));
          for (int x = 0; x < d; ++x) {
            dq[(row * hq + h) * d + x] += scale * ds * kj[x];
            magQ[(row * hq + h) * d + x] += scale * mag * fabs(kj[x]);
            dk[(col * hkv + g) * d + x] += scale * ds * qi[x];
            magK[(col * hkv + g) * d + x] += scale * mag * fabs(qi[x]);
            dv[(col * hkv + g) * d + x] += p * doi[x];
            magV[(col * hkv + g) * d + x] += p * fabs(doi[x]);
          }
        }
      }
    }
  }
}

/* `--gpu`, the packed backward: the causal bf16 fa3.attention_varlen_grad
 * (GQA 8:2, d64) of 4 sequences of 1, 0, 17 and 130 queries over 65, 17, 0
 * and 129 keys, with 3 query rows past cu_seqlens_q[4] and 2 key rows past
 * cu_seqlens_k[4], launched with max_seqlen_q = 1000 and max_seqlen_k =
 * 200 (CTAs past a sequence's rows). O and the LSE are the float64
 * forward's (O rounded to bf16). Every output is poisoned (NaN) first, so a
 * row the launch leaves alone fails. Bound, per element: the kernel reads
 * bf16 inputs exactly and accumulates in f32, but rounds P (for dV) and dS
 * (for dQ, dK) to bf16 before the tensor-core products and its outputs to
 * bf16: at most 2·2^-8 times the sum of the absolute terms
 * (referenceVarlenGrad's magnitudes), plus 1e-5 for the f32 arithmetic. Rows
 * that get no gradient (the tails, the sequence without keys, the one without
 * queries, the first causal query of the last, keys past seqused_k) must be
 * exactly 0. Then the kernel compiled with seqused_k, on 60, 5, 0 and 100 used
 * keys, with a dLSE. */
static int testGpuVarlenGrad(CuMemAlloc cuMemAlloc, CuMemFree cuMemFree,
                             CuMemcpyHtoD cuMemcpyHtoD,
                             CuMemcpyDtoH cuMemcpyDtoH,
                             CuCtxSynchronize cuCtxSynchronize) {
  enum { kSeqs = 4, kHq = 8, kHkv = 2, kD = 64, kTq = 151, kTk = 213 };
  int32_t cuQ[kSeqs + 1] = {0, 1, 1, 18, 148},
                      cuK[kSeqs + 1] = {0, 65, 82, 82, 211};
  int32_t used[kSeqs] = {60, 5, 0, 100};
  size_t nq = (size_t)kTq * kHq * kD, nk = (size_t)kTk * kHkv * kD,
         nl = (size_t)kHq * kTq;
  uint16_t *q16 = malloc(nq * 2), *k16 = malloc(nk * 2), *v16 = malloc(nk * 2),
           *do16 = malloc(nq * 2), *o16 = malloc(nq * 2),
           *dq16 = malloc(nq * 2), *dk16 = malloc(nk * 2),
           *dv16 = malloc(nk * 2);
  float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4),
        *dof = malloc(nq * 4), *of = malloc(nq * 4), *lsef = malloc(nl * 4),
        *dlsef = malloc(nl * 4);
  double *lse = malloc(nl * 8), *ref = malloc((nq + 2 * nk) * 8),
         *mag = malloc((nq + 2 * nk) * 8);
  for (size_t i = 0; i < nq; ++i) {
    qf[i] = fromBf16(q16[i] = toBf16(2 * nextUniform()));
    dof[i] = fromBf16(do16[i] = toBf16(nextUniform()));
  }
  for (size_t i = 0; i < nk; ++i) {
    kf[i] = fromBf16(k16[i] = toBf16(2 * nextUniform()));
    vf[i] = fromBf16(v16[i] = toBf16(nextUniform()));
  }
  for (size_t i = 0; i < nl; ++i)
    dlsef[i] = nextUniform();
  unsigned char *poison = malloc(nk * 2 > nq * 2 ? nk * 2 : nq * 2);
  memset(poison, 0xFF, nk * 2 > nq * 2 ? nk * 2 : nq * 2);
  uint64_t dq = 0, dk = 0, dv = 0, ddo = 0, dout = 0, dlse = 0, ddlse = 0,
           dcq = 0, dck = 0, dused = 0, dgq = 0, dgk = 0, dgv = 0;
  if (cuMemAlloc(&dq, nq * 2) || cuMemAlloc(&dk, nk * 2) ||
      cuMemAlloc(&dv, nk * 2) || cuMemAlloc(&ddo, nq * 2) ||
      cuMemAlloc(&dout, nq * 2) || cuMemAlloc(&dlse, nl * 4) ||
      cuMemAlloc(&ddlse, nl * 4) || cuMemAlloc(&dcq, sizeof(cuQ)) ||
      cuMemAlloc(&dck, sizeof(cuK)) || cuMemAlloc(&dused, sizeof(used)) ||
      cuMemAlloc(&dgq, nq * 2) || cuMemAlloc(&dgk, nk * 2) ||
      cuMemAlloc(&dgv, nk * 2) || cuMemcpyHtoD(dq, q16, nq * 2) ||
      cuMemcpyHtoD(dk, k16, nk * 2) || cuMemcpyHtoD(dv, v16, nk * 2) ||
      cuMemcpyHtoD(ddo, do16, nq * 2) || cuMemcpyHtoD(ddlse, dlsef, nl * 4) ||
      cuMemcpyHtoD(dcq, cuQ, sizeof(cuQ)) ||
      cuMemcpyHtoD(dck, cuK, sizeof(cuK)) ||
      cuMemcpyHtoD(dused, used, sizeof(used))) {
    printf("gpu: varlen backward allocation or copy failed: FAIL\n");
    return 1;
  }
  for (int withUsed = 0; withUsed <= 1; ++withUsed) {
    /* The forward's O and LSE in float64 (the rows outside every sequence:
     * O = 0, LSE = -inf), O rounded to bf16 as the kernel reads it. */
    for (size_t i = 0; i < nq; ++i)
      of[i] = 0;
    for (size_t i = 0; i < nl; ++i)
      lse[i] = -INFINITY;
    for (int b = 0; b < kSeqs; ++b) {
      int sq = cuQ[b + 1] - cuQ[b];
      int sk = withUsed ? used[b] : cuK[b + 1] - cuK[b];
      double *ob = malloc(sizeof(double) * (size_t)(sq ? sq : 1) * kHq * kD);
      double *lb = malloc(sizeof(double) * (size_t)(sq ? sq : 1) * kHq);
      reference(qf + (size_t)cuQ[b] * kHq * kD, kf + (size_t)cuK[b] * kHkv * kD,
                vf + (size_t)cuK[b] * kHkv * kD, 1, sq, sk, kHq, kHkv, kD, 1,
                ob, lb);
      for (int i = 0; i < sq * kHq * kD; ++i) {
        size_t at = (size_t)cuQ[b] * kHq * kD + i;
        of[at] = fromBf16(o16[at] = toBf16((float)ob[i]));
      }
      for (int h = 0; h < kHq; ++h)
        for (int i = 0; i < sq; ++i)
          lse[(size_t)h * kTq + cuQ[b] + i] = lb[(size_t)h * sq + i];
      free(ob);
      free(lb);
    }
    for (size_t i = (size_t)cuQ[kSeqs] * kHq * kD; i < nq; ++i)
      o16[i] = 0;
    for (size_t i = 0; i < nl; ++i)
      lsef[i] = (float)lse[i];
    memset(ref, 0, (nq + 2 * nk) * 8);
    memset(mag, 0, (nq + 2 * nk) * 8);
    referenceVarlenGrad(qf, kf, vf, dof, of, lse, withUsed ? dlsef : NULL, cuQ,
                        cuK, withUsed ? used : NULL, kSeqs, kTq, kHq, kHkv, kD,
                        ref, ref + nq, ref + nq + nk, mag, mag + nq,
                        mag + nq + nk);
    cuMemcpyHtoD(dout, o16, nq * 2);
    cuMemcpyHtoD(dlse, lsef, nl * 4);

    char *source = varlenGradSource(kHq, kHkv, kD, withUsed, 0), *error = NULL;
    fa3_kernel *kernel =
        fa3_compile_attention_grad(source, "varlen_grad", 0, 0, NULL, &error);
    free(source);
    check(kernel != NULL, withUsed
                              ? "gpu varlen backward compile with seqused_k"
                              : "gpu varlen backward compile");
    if (!kernel) {
      fprintf(stderr, "%s\n", error);
      fa3_free_string(error);
      return 1;
    }
    int64_t bytes = fa3_attention_grad_workspace_size(kernel, kSeqs, kTq, kTk);
    uint64_t workspace = 0;
    if (bytes != varlenGradWorkspace(kSeqs, kTq, kHq, kD, 0) ||
        cuMemAlloc(&workspace, (size_t)bytes)) {
      printf("gpu: varlen backward workspace of %lld bytes: FAIL\n",
             (long long)bytes);
      return 1;
    }
    if (!withUsed) {
      error = NULL;
      check(fa3_launch_attention_grad(kernel, ddo, dq, dk, dv, dout, dlse, 0,
                                      dgq, dgk, dgv, workspace, 1, kTq, kTk,
                                      NULL, &error) != 0 &&
                errorContains(error, "launch it with "
                                     "fa3_launch_attention_varlen_grad"),
            "gpu: a varlen backward is not launched as a dense backward");
      error = NULL;
      check(fa3_launch_attention_varlen_grad(kernel, ddo, dq, dk, dv, dout,
                                             dlse, 0, dcq, dck, dused, dgq, dgk,
                                             dgv, workspace, kSeqs, kTq, kTk,
                                             1000, 200, NULL, &error) != 0 &&
                errorContains(error, "compiled without seqused_k"),
            "gpu: the varlen backward launch refuses an unexpected seqused_k");
      error = NULL;
      check(fa3_launch_attention_varlen_grad(
                kernel, ddo, dq, dk, dv, dout, dlse, 0, dcq, dck, 0, dgq, dgk,
                dgv, workspace + 16, kSeqs, kTq, kTk, 1000, 200, NULL,
                &error) != 0 &&
                errorContains(error, "256-byte aligned"),
            "gpu: the varlen backward launch refuses an unaligned workspace");
      error = NULL;
      check(fa3_launch_attention_varlen_grad(kernel, ddo, dq, dk, dv, dout,
                                             dlse, 0, dcq, dck, 0, dgq + 2, dgk,
                                             dgv, workspace, kSeqs, kTq, kTk,
                                             1000, 200, NULL, &error) != 0 &&
                errorContains(error, "dQ, dK and dV must be 16-byte aligned"),
            "gpu: the varlen backward launch refuses a dQ off 16 bytes");
      error = NULL;
      check(fa3_launch_attention_varlen_grad(
                kernel, ddo, dq, dk, dv, dout, dlse, 0, dcq, dck, 0, dgq, dgk,
                dgv + 4, workspace, kSeqs, kTq, kTk, 1000, 200, NULL,
                &error) != 0 &&
                errorContains(error, "dQ, dK and dV must be 16-byte aligned"),
            "gpu: the varlen backward launch refuses a dV off 16 bytes");
      error = NULL;
      check(fa3_launch_attention_varlen_grad(kernel, ddo, dq, dk, dv, dout,
                                             dlse, 0, dcq, dck, 0, dgq, dgk,
                                             dgv, workspace, 65535, kTq, kTk,
                                             1000, 200, NULL, &error) != 0 &&
                errorContains(error, "must each be at most the grid's 65535"),
            "gpu: the varlen backward launch refuses 65535 sequences");
    }
    cuMemcpyHtoD(dgq, poison, nq * 2);
    cuMemcpyHtoD(dgk, poison, nk * 2);
    cuMemcpyHtoD(dgv, poison, nk * 2);
    error = NULL;
    int rc = fa3_launch_attention_varlen_grad(
        kernel, ddo, dq, dk, dv, dout, dlse, withUsed ? ddlse : 0, dcq, dck,
        withUsed ? dused : 0, dgq, dgk, dgv, workspace, kSeqs, kTq, kTk, 1000,
        200, NULL, &error);
    check(rc == 0, withUsed ? "gpu varlen backward launch with seqused_k"
                            : "gpu varlen backward launch");
    if (rc) {
      fprintf(stderr, "%s\n", error);
      fa3_free_string(error);
      return 1;
    }
    cuCtxSynchronize();
    cuMemcpyDtoH(dq16, dgq, nq * 2);
    cuMemcpyDtoH(dk16, dgk, nk * 2);
    cuMemcpyDtoH(dv16, dgv, nk * 2);
    /* Every element within its bound (NaN fails); an element whose
     * reference has no term at all is exactly 0. */
    const uint16_t *got[3] = {dq16, dk16, dv16};
    size_t sizes[3] = {nq, nk, nk}, offsets[3] = {0, nq, nq + nk};
    double worst[3] = {0, 0, 0};
    int withinBound = 1, zerosExact = 1;
    for (int t = 0; t < 3; ++t)
      for (size_t i = 0; i < sizes[t]; ++i) {
        double g = fromBf16(got[t][i]), r = ref[offsets[t] + i],
               m = mag[offsets[t] + i];
        if (m == 0) {
          zerosExact &= g == 0;
          continue;
        }
        double err = fabs(g - r), bound = 2.0 / 256 * m + 1e-5;
        withinBound &= err <= bound;
        worst[t] = isnan(err) ? INFINITY : fmax(worst[t], err / bound);
      }
    printf("gpu varlen backward%s: max error / bound dq %.2f, dk %.2f, "
           "dv %.2f\n",
           withUsed ? " (seqused_k, dLSE)" : "", worst[0], worst[1], worst[2]);
    check(withinBound,
          withUsed ? "gpu varlen backward with seqused_k matches the float64 "
                     "reference"
                   : "gpu varlen backward matches the float64 reference");
    check(zerosExact, withUsed ? "gpu varlen backward with seqused_k zeroes "
                                 "the rows without gradient"
                               : "gpu varlen backward zeroes the rows "
                                 "without gradient");
    /* The tails explicitly: the rows past the last sequence. */
    int tailOk = 1;
    for (size_t i = (size_t)cuQ[kSeqs] * kHq * kD; i < nq; ++i)
      tailOk &= dq16[i] == 0;
    for (size_t i = (size_t)cuK[kSeqs] * kHkv * kD; i < nk; ++i)
      tailOk &= dk16[i] == 0 && dv16[i] == 0;
    check(tailOk, withUsed ? "gpu varlen backward with seqused_k zeroes the "
                             "tail rows"
                           : "gpu varlen backward zeroes the tail rows");
    fa3_destroy_kernel(kernel);
    cuMemFree(workspace);
  }
  void *host[] = {q16, k16, v16, do16, o16,   dq16, dk16, dv16, qf,    kf,
                  vf,  dof, of,  lsef, dlsef, lse,  ref,  mag,  poison};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); ++i)
    free(host[i]);
  uint64_t buffers[] = {dq,  dk,  dv,    ddo, dout, dlse, ddlse,
                        dcq, dck, dused, dgq, dgk,  dgv};
  for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); ++i)
    cuMemFree(buffers[i]);
  return 0;
}

static int testGpu(void) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) {
    printf("gpu: cannot open libcuda.so.1: FAIL\n");
    return 1;
  }
#define LOAD(type, name)                                                       \
  type name = (type)dlsym(cuda, #name);                                        \
  if (!name) {                                                                 \
    printf("gpu: no %s in libcuda: FAIL\n", #name);                            \
    return 1;                                                                  \
  }
  LOAD(CuInit, cuInit)
  LOAD(CuDeviceGet, cuDeviceGet)
  LOAD(CuCtxRetain, cuDevicePrimaryCtxRetain)
  LOAD(CuCtxSetCurrent, cuCtxSetCurrent)
  CuMemAlloc cuMemAlloc = (CuMemAlloc)dlsym(cuda, "cuMemAlloc_v2");
  CuMemFree cuMemFree = (CuMemFree)dlsym(cuda, "cuMemFree_v2");
  CuMemcpyHtoD cuMemcpyHtoD = (CuMemcpyHtoD)dlsym(cuda, "cuMemcpyHtoD_v2");
  CuMemcpyDtoH cuMemcpyDtoH = (CuMemcpyDtoH)dlsym(cuda, "cuMemcpyDtoH_v2");
  LOAD(CuCtxSynchronize, cuCtxSynchronize)
#undef LOAD
  int device = 0;
  void *context = NULL;
  if (cuInit(0) || cuDeviceGet(&device, 0) ||
      cuDevicePrimaryCtxRetain(&context, device) || cuCtxSetCurrent(context)) {
    printf("gpu: no CUDA context: FAIL\n");
    return 1;
  }

  /* B=2, Sq=100, Sk=300, GQA 8:2, d64, causal: ragged lengths. */
  int b = 2, sq = 100, sk = 300, hq = 8, hkv = 2, d = 64;
  size_t nq = (size_t)b * sq * hq * d, nk = (size_t)b * sk * hkv * d,
         nl = (size_t)b * hq * sq;
  uint16_t *hq16 = malloc(nq * 2), *hk16 = malloc(nk * 2),
           *hv16 = malloc(nk * 2), *ho16 = malloc(nq * 2);
  float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4),
        *lseGot = malloc(nl * 4);
  for (size_t i = 0; i < nq; ++i)
    qf[i] = fromBf16(hq16[i] = toBf16(2 * nextUniform()));
  for (size_t i = 0; i < nk; ++i) {
    kf[i] = fromBf16(hk16[i] = toBf16(2 * nextUniform()));
    vf[i] = fromBf16(hv16[i] = toBf16(nextUniform()));
  }
  uint64_t dq = 0, dk = 0, dv = 0, dout = 0, dlse = 0;
  if (cuMemAlloc(&dq, nq * 2) || cuMemAlloc(&dk, nk * 2) ||
      cuMemAlloc(&dv, nk * 2) || cuMemAlloc(&dout, nq * 2) ||
      cuMemAlloc(&dlse, nl * 4) || cuMemcpyHtoD(dq, hq16, nq * 2) ||
      cuMemcpyHtoD(dk, hk16, nk * 2) || cuMemcpyHtoD(dv, hv16, nk * 2)) {
    printf("gpu: allocation or copy failed: FAIL\n");
    return 1;
  }
  char *source = bf16Source(hq, hkv, d, 1), *error = NULL;
  int hit = -1;
  fa3_kernel *kernel =
      fa3_compile_attention(source, "attn", 0, 0, &hit, &error);
  check(kernel != NULL, "gpu compile");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return 1;
  }
  check(fa3_kernel_device(kernel) == 0, "gpu kernel on device 0");
  int rc = fa3_launch_attention(kernel, dq, dk, dv, dout, dlse, b, sq, sk,
                                NULL, &error);
  check(rc == 0, "gpu launch");
  if (rc) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return 1;
  }
  cuCtxSynchronize();
  cuMemcpyDtoH(ho16, dout, nq * 2);
  cuMemcpyDtoH(lseGot, dlse, nl * 4);
  double *o = malloc(nq * 8), *lse = malloc(nl * 8);
  reference(qf, kf, vf, b, sq, sk, hq, hkv, d, 1, o, lse);
  double errO = 0, errL = 0;
  for (size_t i = 0; i < nq; ++i)
    errO = fmax(errO, fabs(fromBf16(ho16[i]) - o[i]));
  for (size_t i = 0; i < nl; ++i)
    errL = fmax(errL, fabs(lseGot[i] - lse[i]));
  /* O is rounded to bf16 once (|O| <= 1: 2^-8) on top of P rounded to bf16
   * for the PV product (another 2^-8 relative to sum P|V| <= 1). */
  printf("gpu max |O - ref| = %.2e, max |LSE - ref| = %.2e\n", errO, errL);
  check(errO < 1.0 / 64 && errL < 1e-3, "gpu matches the float64 reference");
  error = NULL;
  check(fa3_launch_attention(kernel, dq, dk, dv, dout, dlse, -1, sq, sk, NULL,
                             &error) != 0 &&
            errorContains(error, "negative"),
        "gpu launch rejects a negative batch");
  error = NULL;
  check(fa3_launch_attention_kvcache(kernel, dq, dk, dv, dout, dlse, dq, b, sq,
                                     sk, NULL, &error) != 0 &&
            errorContains(error, "not an fa3.attention_kvcache forward"),
        "gpu: a dense forward is not launched as a KV cache");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache(kernel, dq, dk, dv, dout, dlse, dq,
                                           dq, b, sq, 4, 16, 4, NULL,
                                           &error) != 0 &&
            errorContains(error, "does not read a paged KV cache; launch it "
                                 "with fa3_launch_attention"),
        "gpu: a dense forward is not launched as a paged KV cache");
  fa3_destroy_kernel(kernel);

  /* A paged KV-cache kernel: each entry point refuses it but its own, which
   * checks the page table's pointer and geometry before any launch (the
   * buffers are never read). */
  char *paged = kvcacheSource(hq, hkv, d, 1, 1);
  error = NULL;
  kernel = fa3_compile_attention(paged, "kv", 0, 0, NULL, &error);
  check(kernel != NULL, "gpu paged compile");
  if (!kernel) {
    fprintf(stderr, "%s\n", error);
    fa3_free_string(error);
    return 1;
  }
  error = NULL;
  check(fa3_launch_attention_kvcache(kernel, dq, dk, dv, dout, dlse, dq, b, sq,
                                     sk, NULL, &error) != 0 &&
            errorContains(error, "launch it with "
                                 "fa3_launch_attention_paged_kvcache"),
        "gpu: a paged kernel is not launched as a contiguous KV cache");
  error = NULL;
  check(fa3_launch_attention(kernel, dq, dk, dv, dout, dlse, b, sq, sk, NULL,
                             &error) != 0 &&
            errorContains(error, "launch it with "
                                 "fa3_launch_attention_paged_kvcache"),
        "gpu: a paged kernel is not launched as a dense forward");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache(kernel, dq, dk, dv, dout, dlse, dq,
                                           0, b, sq, 4, 16, 4, NULL,
                                           &error) != 0 &&
            errorContains(error, "page_table is NULL"),
        "gpu: the paged launch refuses a NULL page table");
  error = NULL;
  check(fa3_launch_attention_paged_kvcache(kernel, dq, dk, dv, dout, dlse, 0,
                                           dq, b, sq, 4, 16, 4, NULL,
                                           &error) != 0 &&
            errorContains(error, "cache_seqlens is NULL"),
        "gpu: the paged launch refuses NULL cache_seqlens");
  {
    /* num_pages, page_size, table_width and the message naming the bad one */
    struct {
      int64_t pages, size, width;
      const char *message;
    } bad[] = {{4, 0, 4, "page_size = 0 must be at least 1"},
               {4, 16, 0, "(max_pages) = 0 must be at least 1"},
               {0, 16, 4, "num_pages = 0 must be at least 1"},
               {4, 65536, 65536, "must fit in 32 bits"}};
    int ok = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
      error = NULL;
      ok &= fa3_launch_attention_paged_kvcache(
                kernel, dq, dk, dv, dout, dlse, dq, dq, b, sq, bad[i].pages,
                bad[i].size, bad[i].width, NULL, &error) != 0 &&
            errorContains(error, bad[i].message);
    }
    check(ok, "gpu: the paged launch checks the page geometry");
  }
  error = NULL;
  check(fa3_launch_attention_paged_kvcache_splits(kernel, dq, dk, dv, dout,
                                                  dlse, dq, dq, dq, b, sq, 4,
                                                  16, 4, NULL, &error) != 0 &&
            errorContains(error, "attends in one split (num_splits = 1); "
                                 "launch it with "
                                 "fa3_launch_attention_paged_kvcache"),
        "gpu: a paged kernel of one split is not launched as split-KV");
  fa3_destroy_kernel(kernel);
  free(paged);
  if (testGpuSplitKV(b, sq, sk, hq, hkv, d, dq, dk, dv, dout, dlse, qf, kf, vf,
                     cuMemAlloc, cuMemFree, cuMemcpyHtoD, cuMemcpyDtoH,
                     cuCtxSynchronize))
    return 1;
  if (testGpuVarlen(cuMemAlloc, cuMemFree, cuMemcpyHtoD, cuMemcpyDtoH,
                    cuCtxSynchronize))
    return 1;
  if (testGpuVarlenGrad(cuMemAlloc, cuMemFree, cuMemcpyHtoD, cuMemcpyDtoH,
                        cuCtxSynchronize))
    return 1;
  error = NULL;
  check(fa3_compile_attention_grad(source, "attn", 0, 0, NULL, &error) ==
                NULL &&
            errorContains(error, "fa3_compile_attention"),
        "gpu: a forward function is not a backward");
  free(source);
  cuMemFree(dq);
  cuMemFree(dk);
  cuMemFree(dv);
  cuMemFree(dout);
  cuMemFree(dlse);
  return failures != 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--gpu") == 0)
    return testGpu();
  if (argc > 1 && strcmp(argv[1], "--ptx-varlen-grad") == 0) {
    testPtxVarlenGrad();
    return failures != 0;
  }
  testCostModel();
  testCpu();
  testCpuVarlen();
  testCpuDropout();
  testPtx();
  testPtxVarlen();
  testPtxGrad();
  return failures != 0;
}

// The expected lines are not C: clang-format must not reflow them.
// clang-format off
// CHECK: block_m: d64 S=49 -> 64, d64 S=8192 -> 192, d128 -> 128; persistent d128 S=512 1, S=8192 0, causal S=8192 0
// CHECK: cost model block_m by length: ok
// CHECK: cost model persistent grid by length: ok
// CHECK: schedule d128: 128x128, 2 consumers, regs 24/240, pingpong 1, overlap 1, persistent 0
// CHECK: cost model schedule: ok
// CHECK: version {{[0-9]+\.[0-9]+}}
// CHECK: cpu compile: ok
// CHECK: cpu signature 3 -> 2: ok
// CHECK: cpu run: ok
// CHECK: cpu result shapes: ok
// CHECK: cpu matches the float64 reference: ok
// CHECK: cpu run rejects a wrong shape, naming input #1: ok
// CHECK: cpu run rejects a wrong input count: ok
// CHECK: cpu compile reports a parse error: ok
// CHECK: cpu compile rejects NULL: ok
// CHECK: cpu varlen compile: ok
// CHECK: cpu varlen run: ok
// CHECK: cpu varlen matches the float64 reference per sequence: ok
// CHECK: cpu varlen rejects mismatched offsets: ok
// CHECK: split-KV rule: 14 splits for 8 tiles over 256 blocks, 1 for 256: ok
// CHECK: PackGQA rule: decode packs, 64 queries do not: ok
// CHECK: cpu dropout compile: 4 inputs: ok
// CHECK: cpu dropout run: ok
// CHECK: cpu dropout: same seed same bits, another seed another output: ok
// CHECK: cpu dropout: the LSE does not depend on the mask: ok
// CHECK: cpu dropout rejects an int32 rng, naming input #3: ok
// CHECK: ptx compile: ok
// CHECK: ptx compile sets cache_hit: ok
// CHECK: ptx targets sm_90a: ok
// CHECK: ptx kernel is named fa3_fwd*: ok
// CHECK: ptx kernel has no device: ok
// CHECK: launching a PTX-only kernel is refused: ok
// CHECK: the paged KV-cache launch names itself and refuses a PTX-only kernel: ok
// CHECK: the paged KV-cache launch refuses a NULL kernel: ok
// CHECK: the split-KV launch names itself and refuses a PTX-only kernel: ok
// CHECK: the split-KV launch refuses a NULL kernel: ok
// CHECK: the paged split-KV launch names itself and refuses a PTX-only kernel: ok
// CHECK: the paged split-KV launch refuses a NULL kernel: ok
// CHECK: the varlen launch names the entry of a dense forward: ok
// CHECK: the varlen launch refuses a NULL kernel: ok
// CHECK: a 16-bit forward of one split needs no workspace: ok
// CHECK: a forward is not launched as a backward: ok
// CHECK: a forward has no backward workspace: ok
// CHECK: the varlen backward launch names the entry of a forward: ok
// CHECK: the varlen backward launch refuses a NULL kernel: ok
// CHECK: ptx compile names an unknown function: ok
// CHECK: ptx compile rejects head dim 96: ok
// CHECK: varlen ptx compile: ok
// CHECK: varlen ptx targets sm_90a: ok
// CHECK: a varlen kernel is not launched as a dense forward: ok
// CHECK: the varlen launch refuses seqused_k the kernel does not take: ok
// CHECK: the varlen launch refuses NULL cu_seqlens_q: ok
// CHECK: the varlen launch refuses NULL cu_seqlens_k: ok
// CHECK: the varlen launch refuses a NULL output: ok
// CHECK: the varlen launch refuses a negative max_seqlen_q: ok
// CHECK: the varlen launch refuses a PTX-only kernel last: ok
// CHECK: a varlen forward needs no workspace: ok
// CHECK: varlen ptx compile with seqused_k: ok
// CHECK: the varlen launch needs the seqused_k its kernel takes: ok
// CHECK: backward ptx compile: ok
// CHECK: the varlen backward launch names the entry of a dense backward: ok
// CHECK: the dense backward launch refuses a PTX-only kernel: ok
// CHECK-NOT: FAIL

// GPU: gpu compile: ok
// GPU: gpu kernel on device 0: ok
// GPU: gpu launch: ok
// GPU: gpu matches the float64 reference: ok
// GPU: gpu launch rejects a negative batch: ok
// GPU: gpu: a dense forward is not launched as a KV cache: ok
// GPU: gpu: a dense forward is not launched as a paged KV cache: ok
// GPU: gpu paged compile: ok
// GPU: gpu: a paged kernel is not launched as a contiguous KV cache: ok
// GPU: gpu: a paged kernel is not launched as a dense forward: ok
// GPU: gpu: the paged launch refuses a NULL page table: ok
// GPU: gpu: the paged launch refuses NULL cache_seqlens: ok
// GPU: gpu: the paged launch checks the page geometry: ok
// GPU: gpu: a paged kernel of one split is not launched as split-KV: ok
// GPU: gpu kvcache compile: ok
// GPU: gpu: a kernel of one split is not launched as split-KV: ok
// GPU: gpu: a kernel of one split needs no workspace: ok
// GPU: gpu split-KV compile: ok
// GPU: gpu: the split-KV workspace holds the partials: ok
// GPU: gpu: a split-KV kernel is not launched as one split: ok
// GPU: gpu: a split-KV kernel is not launched as a dense forward: ok
// GPU: gpu: a contiguous split-KV kernel is not launched as paged: ok
// GPU: gpu: the split-KV launch refuses a NULL workspace: ok
// GPU: gpu: the split-KV launch refuses NULL cache_seqlens: ok
// GPU: gpu: the split-KV launch refuses an unaligned workspace: ok
// GPU: gpu split-KV launch: ok
// GPU: gpu split-KV matches the float64 reference: ok
// GPU: gpu paged split-KV compile: ok
// GPU: gpu: a paged split-KV kernel is not launched as one split: ok
// GPU: gpu: a paged split-KV kernel is not launched as contiguous: ok
// GPU: gpu: the paged split-KV launch refuses a NULL page table: ok
// GPU: gpu: the paged split-KV launch refuses NULL cache_seqlens: ok
// GPU: gpu: the paged split-KV launch refuses a NULL workspace: ok
// GPU: gpu: the paged split-KV launch checks the page geometry: ok
// GPU: gpu varlen compile: ok
// GPU: gpu: a varlen kernel is not launched as a dense forward: ok
// GPU: gpu: a varlen kernel is not launched as a KV cache: ok
// GPU: gpu: the varlen launch refuses an unexpected seqused_k: ok
// GPU: gpu varlen launch: ok
// GPU: gpu varlen matches the float64 reference: ok
// GPU: gpu varlen fills the tail rows: ok
// GPU: gpu varlen compile with seqused_k: ok
// GPU: gpu: the varlen launch needs its seqused_k: ok
// GPU: gpu varlen launch with seqused_k: ok
// GPU: gpu varlen with seqused_k matches the float64 reference: ok
// GPU: gpu varlen with seqused_k fills the tail rows: ok
// GPU: gpu varlen backward compile: ok
// GPU: gpu: a varlen backward is not launched as a dense backward: ok
// GPU: gpu: the varlen backward launch refuses an unexpected seqused_k: ok
// GPU: gpu: the varlen backward launch refuses an unaligned workspace: ok
// GPU: gpu: the varlen backward launch refuses 65535 sequences: ok
// GPU: gpu varlen backward launch: ok
// GPU: gpu varlen backward matches the float64 reference: ok
// GPU: gpu varlen backward zeroes the rows without gradient: ok
// GPU: gpu varlen backward zeroes the tail rows: ok
// GPU: gpu varlen backward compile with seqused_k: ok
// GPU: gpu varlen backward launch with seqused_k: ok
// GPU: gpu varlen backward with seqused_k matches the float64 reference: ok
// GPU: gpu varlen backward with seqused_k zeroes the rows without gradient: ok
// GPU: gpu varlen backward with seqused_k zeroes the tail rows: ok
// GPU: gpu: a forward function is not a backward: ok
// GPU-NOT: FAIL
