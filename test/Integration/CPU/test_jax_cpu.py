"""fa3.jax on jax's CPU platform: the `fa3_attention_fwd`/`_bwd` FFI targets'
"cpu" handlers (python/src/fa3_jax_ffi.cpp) running fa3's CPU pipeline,
under jit and jax.grad, against the float64 reference (fa3.reference) on
fresh random inputs. jax is installed by scripts/install.sh: a missing jax
or fa3._fa3_jax fails these tests rather than skipping them.

Bounds: f32 inputs: 2e-5 absolute on O and the gradients (entries O(1);
measured ~1e-6: the CPU pipeline accumulates in f32). bf16 inputs: jax's own
bf16 attention (`jax.nn.dot_product_attention`, XLA CPU) is the yardstick,
max |fa3 - ref| <= 2 * max |jax - ref| + 1e-3 (fa3 rounds O to bf16 once,
about 4e-3 relative; the yardstick's error is of the same size).
"""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

jax.config.update("jax_platforms", "cpu")

import fa3.jax as fa3_jax  # noqa: E402  (after the platform is fixed)
from fa3 import reference  # noqa: E402


def _inputs(seed, b, sq, sk, hq, hkv, d, dtype):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, sq, hq, d), dtype=np.float32)
    k = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
    v = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
    do = rng.standard_normal((b, sq, hq, d), dtype=np.float32)
    return tuple(jnp.asarray(x, dtype=dtype) for x in (q, k, v, do))


def _f64(x):
    return np.asarray(jnp.asarray(x, jnp.float32), dtype=np.float64)


CASES = [  # b, sq, sk, hq, hkv, d, causal
    (2, 17, 29, 4, 2, 32, True),
    (1, 1, 1000, 2, 1, 64, False),
    (1, 1000, 17, 2, 2, 16, True),  # Sq > Sk causal: the first 983 rows see no key
    (3, 33, 33, 8, 8, 128, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}-sq{}-sk{}-h{}x{}-d{}-{}".format(
    *c[:6], "causal" if c[6] else "full"))
def test_forward_and_gradient_f32(case):
    b, sq, sk, hq, hkv, d, causal = case
    q, k, v, do = _inputs(sum(case[:6]), b, sq, sk, hq, hkv, d, jnp.float32)

    def loss(q, k, v):
        return jnp.sum(fa3_jax.attention(q, k, v, causal=causal) * do)

    o, lse = jax.jit(lambda q, k, v: fa3_jax.attention(q, k, v, causal=causal, return_lse=True))(q, k, v)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    ref_o, ref_lse = reference.attention(_f64(q), _f64(k), _f64(v), causal=causal)
    ref_grads = reference.attention_grad(_f64(q), _f64(k), _f64(v), _f64(do), causal=causal)

    assert o.shape == (b, sq, hq, d) and o.dtype == jnp.float32
    assert lse.shape == (b, hq, sq) and lse.dtype == jnp.float32
    assert np.abs(_f64(o) - ref_o).max() <= 2e-5
    seen = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(_f64(lse)), seen)  # -inf exactly where no key is visible
    assert np.abs(_f64(lse)[seen] - ref_lse[seen]).max() <= 2e-5
    for name, g, ref in zip("qkv", grads, ref_grads):
        assert g.shape == ref.shape, name
        assert np.abs(_f64(g) - ref).max() <= 2e-5, (name, np.abs(_f64(g) - ref).max())


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_within_twice_jax_own_error(causal):
    b, sq, sk, hq, hkv, d = 2, 65, 65, 4, 2, 64
    q, k, v, do = _inputs(7 + causal, b, sq, sk, hq, hkv, d, jnp.bfloat16)
    ours = fa3_jax.attention(q, k, v, causal=causal)
    theirs = jax.nn.dot_product_attention(q, k, v, is_causal=causal)  # Sq == Sk: one diagonal convention
    ref, _ = reference.attention(_f64(q), _f64(k), _f64(v), causal=causal)
    assert ours.dtype == jnp.bfloat16
    yardstick = np.abs(_f64(theirs) - ref).max()
    assert np.abs(_f64(ours) - ref).max() <= 2 * yardstick + 1e-3

    g_ours = jax.grad(lambda q, k, v: jnp.sum(fa3_jax.attention(q, k, v, causal=causal).astype(jnp.float32)
                                              * do.astype(jnp.float32)), (0, 1, 2))(q, k, v)
    g_theirs = jax.grad(lambda q, k, v: jnp.sum(jax.nn.dot_product_attention(q, k, v, is_causal=causal)
                                                .astype(jnp.float32) * do.astype(jnp.float32)),
                        (0, 1, 2))(q, k, v)
    g_ref = reference.attention_grad(_f64(q), _f64(k), _f64(v), _f64(do), causal=causal)
    for name, a, t, r in zip("qkv", g_ours, g_theirs, g_ref):
        assert a.dtype == jnp.bfloat16, name
        assert np.abs(_f64(a) - r).max() <= 2 * np.abs(_f64(t) - r).max() + 1e-3, name


def test_options_reach_the_kernel():
    # softmax_scale, a sliding window and softcap are compiled into the call.
    q, k, v, _ = _inputs(3, 1, 40, 50, 2, 1, 32, jnp.float32)
    o = fa3_jax.attention(q, k, v, softmax_scale=0.3, window_size=(5, 2), softcap=4.0)
    ref, _ = reference.attention(_f64(q), _f64(k), _f64(v), scale=0.3, window=(5, 2), softcap=4.0)
    assert np.abs(_f64(o) - ref).max() <= 2e-5


def test_jit_retraces_per_shape_on_one_compiled_function():
    # Two calls of one shape under jit reuse the compiled executable; a new
    # shape retraces and runs the same compiled fa3 function (dynamic B/S).
    f = jax.jit(lambda q, k, v: fa3_jax.attention(q, k, v, causal=True))
    for s in (17, 31):
        q, k, v, _ = _inputs(s, 1, s, s, 2, 2, 32, jnp.float32)
        assert "fa3_attention_fwd" in f.lower(q, k, v).as_text()  # an FFI custom call, not jax math
        ref, _ = reference.attention(_f64(q), _f64(k), _f64(v), causal=True)
        assert np.abs(_f64(f(q, k, v)) - ref).max() <= 2e-5


def test_gradient_through_the_lse():
    # L = sum(O * dO) + sum(LSE * dLSE): the LSE's gradient runs through
    # fa3.attention_grad's grad_lse, against the float64 reference.
    q, k, v, do = _inputs(1, 2, 24, 40, 4, 2, 16, jnp.float32)
    dlse = jnp.asarray(np.random.default_rng(2).standard_normal((2, 4, 24)), jnp.float32)

    def loss(q, k, v):
        o, lse = fa3_jax.attention(q, k, v, causal=True, return_lse=True)
        return jnp.sum(o * do) + jnp.sum(lse * dlse)

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    ref = reference.attention_grad(_f64(q), _f64(k), _f64(v), _f64(do), causal=True, dlse=_f64(dlse))
    without = reference.attention_grad(_f64(q), _f64(k), _f64(v), _f64(do), causal=True)
    for name, g, r, w in zip("qkv", grads, ref, without):
        assert np.abs(_f64(g) - r).max() <= 2e-5, name
    assert np.abs(ref[0] - without[0]).max() > 0.1  # the LSE term matters here
    # Only the LSE differentiated: dO is a symbolic zero.
    g_lse = jax.grad(lambda q: jnp.sum(fa3_jax.attention(q, k, v, causal=True, return_lse=True)[1] * dlse))(q)
    ref_lse = reference.attention_grad(_f64(q), _f64(k), _f64(v), np.zeros(do.shape), causal=True,
                                       dlse=_f64(dlse))[0]
    assert np.abs(_f64(g_lse) - ref_lse).max() <= 2e-5


def test_argument_errors_name_the_argument():
    q, k, v, _ = _inputs(1, 1, 8, 8, 2, 1, 16, jnp.float32)
    with pytest.raises(TypeError, match="k is float16"):
        fa3_jax.attention(q, k.astype(jnp.float16), v)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        fa3_jax.attention(q.astype(jnp.int32), k.astype(jnp.int32), v.astype(jnp.int32))
    with pytest.raises(ValueError, match="heads"):
        fa3_jax.attention(q[:, :, :1], k.repeat(2, axis=2), v.repeat(2, axis=2))
    with pytest.raises(ValueError, match="head dim"):
        fa3_jax.attention(q[..., :12], k[..., :12], v)
    with pytest.raises(TypeError, match="causal must be a bool"):
        fa3_jax.attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="q must be a jax array"):
        fa3_jax.attention([1.0], k, v)
