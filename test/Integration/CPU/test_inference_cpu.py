"""The inference ops through the driver: fa3-run compiles an MLIR file with
fa3.attention_varlen, or fa3.kvcache_append + fa3.attention_kvcache on a
paged cache, runs it on the CPU with .npy inputs (int32 offsets, lengths and
page tables beside float32 tensors) and writes .npy outputs, checked against
the float64 reference under the f32 bound of the CPU suite
(|O - ref| <= 1e-5 (1 + max|V|): f32 arithmetic over at most a few hundred
keys). A wrong element type of an index input is the driver's error."""

import numpy as np
from npy_run import run

from fa3 import reference

VARLEN = """
func.func @varlen(%q: tensor<?x4x32xf32>, %k: tensor<?x2x32xf32>, %v: tensor<?x2x32xf32>,
                  %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) -> (tensor<?x4x32xf32>, tensor<4x?xf32>) {
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk {causal, num_splits = 2 : i64}
      : (tensor<?x4x32xf32>, tensor<?x2x32xf32>, tensor<?x2x32xf32>, tensor<?xi32>, tensor<?xi32>)
      -> (tensor<?x4x32xf32>, tensor<4x?xf32>)
  return %o, %lse : tensor<?x4x32xf32>, tensor<4x?xf32>
}
"""

PAGED = """
func.func @decode(%q: tensor<?x1x8x32xf32>, %kc: tensor<?x16x2x32xf32>, %vc: tensor<?x16x2x32xf32>,
                  %k: tensor<?x1x2x32xf32>, %v: tensor<?x1x2x32xf32>, %before: tensor<?xi32>,
                  %after: tensor<?xi32>, %pages: tensor<?x?xi32>)
    -> (tensor<?x1x8x32xf32>, tensor<?x8x1xf32>) {
  %kc1, %vc1 = fa3.kvcache_append %kc, %vc, %k, %v, %before, %pages
      : (tensor<?x16x2x32xf32>, tensor<?x16x2x32xf32>, tensor<?x1x2x32xf32>, tensor<?x1x2x32xf32>,
         tensor<?xi32>, tensor<?x?xi32>) -> (tensor<?x16x2x32xf32>, tensor<?x16x2x32xf32>)
  %o, %lse = fa3.attention_kvcache %q, %kc1, %vc1, %after, %pages {causal, pack_gqa}
      : (tensor<?x1x8x32xf32>, tensor<?x16x2x32xf32>, tensor<?x16x2x32xf32>, tensor<?xi32>, tensor<?x?xi32>)
      -> (tensor<?x1x8x32xf32>, tensor<?x8x1xf32>)
  return %o, %lse : tensor<?x1x8x32xf32>, tensor<?x8x1xf32>
}
"""


def test_fa3_run_varlen(fa3_run, tmp_path):
    rng = np.random.default_rng(7)
    cu_q = np.array([0, 5, 5, 75, 76], np.int32)
    cu_k = np.array([0, 9, 12, 82, 212], np.int32)
    q = rng.standard_normal((76, 4, 32)).astype(np.float32)
    k = rng.standard_normal((212, 2, 32)).astype(np.float32)
    v = rng.standard_normal((212, 2, 32)).astype(np.float32)
    proc, (o, lse) = run(fa3_run, tmp_path, VARLEN, "varlen", [q, k, v, cu_q, cu_k], 2)
    assert proc.returncode == 0, proc.stderr
    ref_o, ref_lse = reference.attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    assert o.shape == ref_o.shape and lse.shape == ref_lse.shape
    assert np.abs(o - ref_o).max() <= 1e-5 * (1 + np.abs(v).max())
    seen = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), seen)
    assert np.abs(lse[seen] - ref_lse[seen]).max() <= 1e-5 * (1 + np.abs(ref_lse[seen]).max())


def test_fa3_run_paged_decode_step(fa3_run, tmp_path):
    rng = np.random.default_rng(8)
    batch, pages_per_seq = 3, 4
    table = rng.permutation(batch * pages_per_seq + 2)[:batch * pages_per_seq].reshape(batch, -1).astype(np.int32)
    kc = rng.standard_normal((batch * pages_per_seq + 2, 16, 2, 32)).astype(np.float32)
    vc = rng.standard_normal(kc.shape).astype(np.float32)
    before = np.array([0, 17, 63], np.int32)
    q = rng.standard_normal((batch, 1, 8, 32)).astype(np.float32)
    k = rng.standard_normal((batch, 1, 2, 32)).astype(np.float32)
    v = rng.standard_normal((batch, 1, 2, 32)).astype(np.float32)
    proc, (o, lse) = run(fa3_run, tmp_path, PAGED, "decode",
                          [q, kc, vc, k, v, before, before + 1, table], 2)
    assert proc.returncode == 0, proc.stderr
    kc2, vc2 = kc.copy(), vc.copy()
    for b in range(batch):
        page, slot = table[b, before[b] // 16], before[b] % 16
        kc2[page, slot], vc2[page, slot] = k[b, 0], v[b, 0]
    ref_o, ref_lse = reference.attention_kvcache(q, kc2, vc2, before + 1, table, causal=True)
    assert np.abs(o - ref_o).max() <= 1e-5 * (1 + np.abs(vc).max())
    assert np.abs(lse - ref_lse).max() <= 1e-5 * (1 + np.abs(ref_lse).max())


def test_fa3_run_names_a_wrong_index_type(fa3_run, tmp_path):
    q = np.zeros((4, 4, 32), np.float32)
    k = np.zeros((4, 2, 32), np.float32)
    offsets = np.array([0, 4], np.int32)
    # float32 offsets: the argument needs int32.
    proc, _ = run(fa3_run, tmp_path, VARLEN, "varlen", [q, k, k, offsets.astype(np.float32), offsets], 2)
    assert proc.returncode != 0
    assert "input #3" in proc.stderr and "needs an int32 .npy file" in proc.stderr, proc.stderr
    # int64 offsets (a dtype fa3-run reads, for dropout's seed): still not int32.
    proc, _ = run(fa3_run, tmp_path, VARLEN, "varlen", [q, k, k, offsets.astype(np.int64), offsets], 2)
    assert proc.returncode != 0
    assert "input #3" in proc.stderr and "needs an int32 .npy file" in proc.stderr and "got i64" in proc.stderr, (
        proc.stderr)
    # int16 offsets: not a dtype fa3-run reads; the error names the file.
    proc, _ = run(fa3_run, tmp_path, VARLEN, "varlen", [q, k, k, offsets.astype(np.int16), offsets], 2)
    assert proc.returncode != 0
    assert "in3.npy" in proc.stderr and "unsupported dtype '<i2'" in proc.stderr, proc.stderr
