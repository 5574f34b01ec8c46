"""Attention over keys split into shards, merged by the LSE
(fa3.merge_attention), against the unsplit float64 reference: the forward
and, through fa3's backward with the LSE's gradient (fa3.attention_grad's
grad_lse), the gradients. This is what ring / context-parallel attention
computes on each rank, in one process on the CPU pipeline (f32).

A causal attention over Sk keys split at key a: the shard [a, a + L) is
visible to query i up to key i + Sk - Sq, i.e. fa3's window (-1, Sk - a - L)
around the shard's own bottom-right diagonal (the last shard's is causal).

The merge's chain rule, with w_i = exp(LSE_i - LSE) (0 where a row sees no
key of shard i): dO_i = w_i dO and dLSE_i = w_i (rowsum(dO ∘ O_i) -
rowsum(dO ∘ O) + dLSE), summed over shards for dQ and concatenated for dK
and dV. Bounds: f32 end to end, 2e-5 absolute on entries of O(1) (measured
<= 6.4e-7), 1e-5 relative to the largest gradient entry (measured <= 6.8e-7).
"""

import numpy as np
import pytest

import fa3
from fa3 import reference


def _shard_window(a, length, sk, causal):
    return (-1, sk - a - length) if causal else (-1, -1)


def _split(sk, parts):
    edges = np.linspace(0, sk, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


CASES = [  # b, sq, sk, hq, hkv, d, shards, causal
    (2, 33, 100, 4, 2, 32, 3, False),
    (1, 64, 64, 4, 4, 64, 4, True),
    (1, 17, 1000, 2, 1, 16, 5, True),
    (2, 100, 40, 2, 2, 32, 2, True),  # Sq > Sk: 60 rows see no key at all
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}-sq{}-sk{}-h{}x{}-d{}-{}shards-{}".format(
    *c[:7], "causal" if c[7] else "full"))
def test_sharded_keys_merge_to_the_whole_attention(case):
    b, sq, sk, hq, hkv, d, parts, causal = case
    rng = np.random.default_rng(sum(case[:7]))
    q = rng.standard_normal((b, sq, hq, d), dtype=np.float32)
    k = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
    v = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
    do = rng.standard_normal((b, sq, hq, d), dtype=np.float32)
    dlse = rng.standard_normal((b, hq, sq)).astype(np.float32)
    scale = 1 / np.sqrt(d)

    shards = []
    for a, e in _split(sk, parts):
        window = _shard_window(a, e - a, sk, causal)
        fwd = fa3.compile("f32", hq, d, hkv, softmax_scale=scale, window_size=window, device="cpu")
        bwd = fa3.compile("f32", hq, d, hkv, softmax_scale=scale, window_size=window, device="cpu",
                          backward=True, grad_lse=True)
        ks, vs = np.ascontiguousarray(k[:, a:e]), np.ascontiguousarray(v[:, a:e])
        o, lse = fwd(q, ks, vs)
        shards.append((ks, vs, o, lse, bwd))
    out, lse = fa3.merge_attention([s[2] for s in shards], [s[3] for s in shards])

    ref_o, ref_lse = reference.attention(q, k, v, causal=causal, scale=scale)
    assert out.dtype == np.float32 and lse.dtype == np.float32
    assert np.abs(out - ref_o).max() <= 2e-5
    seen = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), seen)
    assert np.abs(lse[seen] - ref_lse[seen]).max() <= 2e-5

    # Backward through the merge (see the module docstring), then each shard.
    dot_merged = np.einsum("bqhd,bqhd->bhq", do, out)
    dq = np.zeros_like(q, dtype=np.float64)
    dks, dvs = [], []
    for ks, vs, o_i, lse_i, bwd in shards:
        w = np.where(np.isfinite(lse_i), np.exp(lse_i - np.where(seen, lse, 0.0)), 0.0).astype(np.float32)
        do_i = (w.transpose(0, 2, 1)[..., None] * do).astype(np.float32)
        dlse_i = (w * (np.einsum("bqhd,bqhd->bhq", do, o_i) - dot_merged + dlse)).astype(np.float32)
        dq_i, dk_i, dv_i = bwd(do_i, q, ks, vs, o_i, lse_i, dlse_i)
        dq += dq_i
        dks.append(dk_i)
        dvs.append(dv_i)
    grads = (dq, np.concatenate(dks, axis=1), np.concatenate(dvs, axis=1))
    ref_grads = reference.attention_grad(q, k, v, do, causal=causal, scale=scale, dlse=dlse)
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads):
        assert g.shape == r.shape, name
        err = np.abs(g - r).max()
        assert err <= 1e-5 * max(np.abs(r).max(), 1.0), (name, err)


def test_merge_attention_errors():
    o = np.zeros((1, 4, 2, 8), np.float32)
    lse = np.zeros((1, 2, 4), np.float32)
    with pytest.raises(ValueError, match="one lse per out"):
        fa3.merge_attention([o, o], [lse])
    with pytest.raises(ValueError, match=r"lses\[0\] has shape \(1, 4, 2\)"):
        fa3.merge_attention([o], [lse.transpose(0, 2, 1)])
    with pytest.raises(TypeError, match="lists"):
        fa3.merge_attention(o, lse)
    # One part merges to itself.
    out, merged = fa3.merge_attention([o + 1], [lse - 3])
    assert np.array_equal(out, o + 1) and np.allclose(merged, lse - 3)
