"""reference.attention_grad against central finite differences of
reference.attention, on tiny float64 shapes (no fa3-run needed).

The scalar is L = sum(O * dO), whose gradient is exactly what attention_grad
returns. Each input element x is moved by ±h and
(L(x + h) - L(x - h)) / 2h is compared with the analytic value. Its error is
the truncation h²/6 · |L'''| (~1e-12 at h = 1e-6 for these O(1) inputs) plus
the float64 rounding of the two L values over 2h, ~eps · Σ|O·dO| / h ≈
1e-16 · 10 / 1e-6 = 1e-9. The asserted tolerance, 1e-6 of the largest
gradient entry of that input (or 1e-6 absolute if all are tiny), leaves about
three orders of magnitude of margin, while a missing term (the Delta of the
softmax Jacobian, tanh' of softcap, a GQA sum, the scale) changes entries by
a large fraction of that largest entry.
"""

import zlib

import numpy as np
import pytest

from fa3 import reference

H = 1e-6
RTOL = 1e-6


def _loss(q, k, v, do, kw):
    o, _ = reference.attention(q, k, v, **kw)
    return float(np.sum(o * do))


def _fd_grad(arrays, index, do, kw):
    """Central differences of L with respect to arrays[index], element-wise."""
    x = arrays[index]
    grad = np.zeros_like(x)
    for pos in np.ndindex(x.shape):
        saved = x[pos]
        x[pos] = saved + H
        plus = _loss(*arrays, do, kw)
        x[pos] = saved - H
        minus = _loss(*arrays, do, kw)
        x[pos] = saved
        grad[pos] = (plus - minus) / (2 * H)
    return grad


# (b, sq, sk, hq, hkv, d, dv, kwargs)
CASES = [
    (1, 3, 3, 1, 1, 4, 4, {}),
    (2, 3, 5, 4, 2, 4, 3, {}),
    (1, 5, 3, 4, 2, 4, 4, {"causal": True}),
    (1, 3, 5, 4, 2, 4, 3, {"causal": True}),
    (1, 5, 5, 4, 1, 4, 4, {"window": (1, 1)}),
    (2, 5, 3, 2, 2, 4, 3, {"window": (-1, 0), "scale": 0.7}),
    (1, 5, 5, 4, 2, 4, 4, {"causal": True, "window": (2, -1)}),
    (1, 3, 5, 4, 2, 4, 4, {"softcap": 1.5}),
    (1, 5, 3, 4, 2, 4, 3, {"softcap": 0.8, "scale": 1.3, "causal": True}),
    (2, 1, 5, 4, 2, 4, 4, {"window": (1, 1), "softcap": 2.0}),
    (1, 1, 1, 2, 1, 4, 3, {}),
    # Sq > Sk with causal: the first two rows see no key (o = 0, dq = 0).
    (1, 5, 3, 4, 2, 4, 3, {"causal": True, "window": (0, 0)}),
    # A (0, 0) window far from some keys: keys that no query sees.
    (1, 3, 5, 2, 1, 4, 4, {"window": (0, 0)}),
    # No keys at all.
    (1, 3, 0, 4, 2, 4, 3, {}),
]


def _id(case):
    b, sq, sk, hq, hkv, d, dv, kw = case
    extra = "-".join(f"{k}{v}" for k, v in kw.items()).replace(" ", "")
    return f"b{b}-sq{sq}-sk{sk}-h{hq}x{hkv}-d{d}-dv{dv}" + (f"-{extra}" if extra else "")


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_grad_matches_finite_differences(case):
    b, sq, sk, hq, hkv, d, dv, kw = case
    rng = np.random.default_rng(zlib.crc32(_id(case).encode()))
    q = rng.standard_normal((b, sq, hq, d))
    k = rng.standard_normal((b, sk, hkv, d))
    v = rng.standard_normal((b, sk, hkv, dv))
    do = rng.standard_normal((b, sq, hq, dv))
    grads = reference.attention_grad(q, k, v, do, **kw)
    for name, x, g in zip(("dq", "dk", "dv"), (q, k, v), grads):
        assert g.shape == x.shape, f"{name} shape {g.shape}, expected {x.shape}"
        assert g.dtype == np.float64
    arrays = [q.copy(), k.copy(), v.copy()]
    for index, name in enumerate(("dq", "dk", "dv")):
        fd = _fd_grad(arrays, index, do, kw)
        scale = max(np.abs(fd).max(initial=0.0), 1.0)
        err = np.abs(grads[index] - fd).max(initial=0.0)
        assert err <= RTOL * scale, f"{name}: |analytic - FD| = {err:.3g}, relative {err / scale:.3g}"


def test_rows_without_keys_have_zero_gradient():
    # Causal with Sq > Sk: rows 0 and 1 see no key; window (0, 0): key 0 and
    # key 4 are seen by no query in a 3 x 5 problem.
    rng = np.random.default_rng(7)
    q, do = rng.standard_normal((2, 1, 5, 4, 4))
    k, v = rng.standard_normal((2, 1, 3, 2, 4))
    dq, dk, dv = reference.attention_grad(q, k, v, do, causal=True)
    assert (dq[:, :2] == 0).all() and (dq[:, 2:] != 0).any()
    q, do = rng.standard_normal((2, 1, 3, 4, 4))
    k, v = rng.standard_normal((2, 1, 5, 2, 4))
    dq, dk, dv = reference.attention_grad(q, k, v, do, window=(0, 0))
    assert (dk[:, :2] == 0).all() and (dv[:, :2] == 0).all()
    # Each query sees exactly one key: the softmax is constant, so dq and dk
    # vanish (up to the rounding of dP - Delta, two equal sums).
    assert np.abs(dq).max() < 1e-12 and np.abs(dk).max() < 1e-12 and (dv[:, 2:] != 0).all()


def test_empty_keys():
    q, do = np.ones((2, 1, 3, 4, 4))
    dq, dk, dv = reference.attention_grad(q, np.ones((1, 0, 2, 4)), np.ones((1, 0, 2, 4)), do)
    assert dq.shape == q.shape and (dq == 0).all()
    assert dk.shape == (1, 0, 2, 4) and dv.shape == (1, 0, 2, 4)


def _loss_with_lse(q, k, v, do, dlse, kw):
    o, lse = reference.attention(q, k, v, **kw)
    # Rows without keys have lse = -inf and a constant value: no gradient.
    return float(np.sum(o * do) + np.sum(np.where(np.isfinite(lse), lse * dlse, 0.0)))


LSE_CASES = [c for c in CASES if c[2] > 0][:10] + [CASES[-3]]


@pytest.mark.parametrize("case", LSE_CASES, ids=[_id(c) for c in LSE_CASES])
def test_grad_with_lse_gradient_matches_finite_differences(case):
    # L = sum(O * dO) + sum(LSE * dLSE): the gradient that reaches fa3's
    # attention when a caller merges partial results by their LSE.
    b, sq, sk, hq, hkv, d, dv, kw = case
    rng = np.random.default_rng(zlib.crc32(("lse" + _id(case)).encode()))
    q = rng.standard_normal((b, sq, hq, d))
    k = rng.standard_normal((b, sk, hkv, d))
    v = rng.standard_normal((b, sk, hkv, dv))
    do = rng.standard_normal((b, sq, hq, dv))
    dlse = rng.standard_normal((b, hq, sq))
    grads = reference.attention_grad(q, k, v, do, dlse=dlse, **kw)
    without = reference.attention_grad(q, k, v, do, **kw)
    arrays = [q.copy(), k.copy(), v.copy()]
    for index, name in enumerate(("dq", "dk", "dv")):
        x = arrays[index]
        fd = np.zeros_like(x)
        for pos in np.ndindex(x.shape):
            saved = x[pos]
            x[pos] = saved + H
            plus = _loss_with_lse(*arrays, do, dlse, kw)
            x[pos] = saved - H
            minus = _loss_with_lse(*arrays, do, dlse, kw)
            x[pos] = saved
            fd[pos] = (plus - minus) / (2 * H)
        scale = max(np.abs(fd).max(initial=0.0), 1.0)
        err = np.abs(grads[index] - fd).max(initial=0.0)
        assert err <= RTOL * scale, f"{name}: |analytic - FD| = {err:.3g}, relative {err / scale:.3g}"
    # The LSE's gradient moves dq and dk (dv does not depend on it).
    assert np.abs(grads[0] - without[0]).max() > 1e-3
    assert np.array_equal(grads[2], without[2])
