"""fa3.jax on the H200: the `fa3_attention_fwd`/`_bwd` FFI targets' CUDA
handlers (python/src/fa3_jax_ffi.cpp) launching fa3's sm_90a kernels on
XLA's stream, under jit and jax.grad, against the float64 reference
(fa3.reference) with jax's own attention in the same dtype
(`jax.nn.dot_product_attention`, XLA) as the yardstick, as the torch GPU
tests use SDPA's:
  max |fa3 - ref| <= 2 * max |jax - ref| + 1e-5 (O), + 1e-4 (gradients).
The yardstick runs on the query rows that see at least one key (jax gives a
row without keys the mean of V, fa3 and the reference 0); fa3's other rows
must be exactly 0 with LSE -inf."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import fa3.jax as fa3_jax  # noqa: E402
from fa3 import reference  # noqa: E402


def test_jax_sees_the_gpu():
    # Failing, not skipping: these tests must run on jax's CUDA backend.
    assert jax.default_backend() == "gpu", jax.devices()


def _inputs(seed, b, sq, sk, hq, hkv, d, dtype):
    rng = np.random.default_rng(seed)
    shapes = ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d), (b, sq, hq, d))
    return tuple(jnp.asarray(rng.standard_normal(s, dtype=np.float32), dtype=dtype) for s in shapes)


def _f64(x):
    return np.asarray(jnp.asarray(x, jnp.float32), dtype=np.float64)


def _loss(attn, do):
    return lambda q, k, v: jnp.sum(attn(q, k, v).astype(jnp.float32) * do.astype(jnp.float32))


CASES = [  # b, sq, sk, hq, hkv, d, dtype, causal
    (2, 1000, 1000, 8, 2, 128, jnp.bfloat16, True),
    (1, 17, 1000, 4, 4, 64, jnp.float16, False),
    (1, 1000, 300, 8, 1, 256, jnp.bfloat16, True),  # Sq > Sk: 700 rows see no key
    (3, 128, 128, 16, 2, 64, jnp.bfloat16, False),
    (4, 1, 4096, 8, 2, 128, jnp.bfloat16, False),  # one decode step
    (2, 129, 257, 4, 2, 96, jnp.bfloat16, True),  # run at d128, zero-padded
    (1, 100, 100, 4, 4, 40, jnp.float16, False),  # run at d64, zero-padded
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}-sq{}-sk{}-h{}x{}-d{}-{}-{}".format(
    *c[:6], np.dtype(c[6]).name, "causal" if c[7] else "full"))
def test_forward_and_gradient_against_float64(case):
    b, sq, sk, hq, hkv, d, dtype, causal = case
    q, k, v, do = _inputs(sum(case[:6]), b, sq, sk, hq, hkv, d, dtype)
    fa3_attn = lambda q, k, v: fa3_jax.attention(q, k, v, causal=causal)  # noqa: E731
    o, lse = jax.jit(lambda q, k, v: fa3_jax.attention(q, k, v, causal=causal, return_lse=True))(q, k, v)
    grads = jax.jit(jax.grad(_loss(fa3_attn, do), argnums=(0, 1, 2)))(q, k, v)
    assert o.dtype == dtype and lse.dtype == jnp.float32 and lse.shape == (b, hq, sq)
    assert all(g.dtype == dtype and g.shape == x.shape for g, x in zip(grads, (q, k, v)))

    ref_o, ref_lse = reference.attention(_f64(q), _f64(k), _f64(v), causal=causal)
    ref_grads = reference.attention_grad(_f64(q), _f64(k), _f64(v), _f64(do), causal=causal)

    # jax's attention on the rows that see a key, with fa3's (bottom-right) mask.
    visible = reference.visible(sq, sk, causal)
    rows = np.nonzero(visible.any(axis=-1))[0]
    without = np.nonzero(~visible.any(axis=-1))[0]
    mask = jnp.asarray(visible[rows])[None, None]
    jax_attn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, mask=mask)  # noqa: E731
    qs, dos = q[:, rows], do[:, rows]
    theirs = jax.jit(jax_attn)(qs, k, v)
    their_grads = jax.jit(jax.grad(_loss(jax_attn, dos), argnums=(0, 1, 2)))(qs, k, v)

    err = np.abs(_f64(o)[:, rows] - ref_o[:, rows]).max()
    yardstick = np.abs(_f64(theirs) - ref_o[:, rows]).max()
    assert err <= 2 * yardstick + 1e-5, (err, yardstick)
    assert not np.any(_f64(o)[:, without]), "rows without keys must be 0"
    assert np.all(np.isneginf(_f64(lse)[:, :, without]))
    lse_err = np.abs(_f64(lse)[:, :, rows] - ref_lse[:, :, rows]).max()
    assert lse_err <= 2e-3, lse_err  # f32 LSE of bf16/f16 scores: ~1e-5 relative

    for name, g, t, r in zip("qkv", grads, their_grads, ref_grads):
        g64 = _f64(g)
        if name == "q":
            assert not np.any(g64[:, without]), "dq of rows without keys must be 0"
            g64, r = g64[:, rows], r[:, rows]
        err = np.abs(g64 - r).max()
        yardstick = np.abs(_f64(t) - r).max()
        assert err <= 2 * yardstick + 1e-4, (name, err, yardstick)


def test_jit_and_eager_agree_bit_for_bit_and_repeat():
    q, k, v, do = _inputs(5, 2, 333, 333, 8, 2, 128, jnp.bfloat16)
    eager = fa3_jax.attention(q, k, v, causal=True)
    f = jax.jit(lambda q, k, v: fa3_jax.attention(q, k, v, causal=True))
    assert "fa3_attention_fwd" in f.lower(q, k, v).as_text()
    for _ in range(3):
        assert np.array_equal(np.asarray(f(q, k, v)), np.asarray(eager))


def test_value_and_grad_in_one_jitted_step():
    # A training-style step: loss and gradients from one executable; the
    # backward's workspace is an extra result of its custom call.
    q, k, v, do = _inputs(11, 2, 512, 512, 8, 8, 64, jnp.bfloat16)
    step = jax.jit(jax.value_and_grad(_loss(lambda q, k, v: fa3_jax.attention(q, k, v, causal=True), do),
                                      argnums=(0, 1, 2)))
    loss, grads = step(q, k, v)
    ref_o, _ = reference.attention(_f64(q), _f64(k), _f64(v), causal=True)
    assert abs(float(loss) - (ref_o * _f64(do)).sum()) <= 1e-3 * np.abs(ref_o * _f64(do)).sum()
    loss2, grads2 = step(q, k, v)
    assert float(loss2) == float(loss)
    assert all(np.isfinite(_f64(g)).all() for g in grads)


def test_gpu_argument_errors():
    q, k, v, _ = _inputs(1, 1, 64, 64, 2, 2, 64, jnp.float32)
    with pytest.raises(TypeError, match="bfloat16 or float16 on gpu"):
        fa3_jax.attention(q, k, v)
    q, k, v, _ = _inputs(1, 1, 64, 64, 2, 2, 100, jnp.bfloat16)
    with pytest.raises(ValueError, match=r"q/k head dim must be a multiple of 8 in \[8, 256\], got 100"):
        fa3_jax.attention(q, k, v)
