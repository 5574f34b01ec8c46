"""fa3.attention_grad through fa3-run on the CPU against the float64
reference gradient, over shapes, masks, head dims, GQA and dtypes; and a
forward + backward function. Inputs are fresh N(0, 1) draws each run; the
seed is printed on failure (set FA3_TEST_SEED to replay one).

The kernel gets o and lse from the float64 reference forward (o rounded to
the dtype, lse to f32) and is compared with the exact float64 gradient at the
rounded q, k, v, do under GradCase.bounds (docs/Testing.md, "Backward
bounds"). The bound itself is tested without fa3-run: a NumPy model of the
kernel's rounding passes it, and wrong gradients (a missing scale, a mask off
by one, a missing Delta, the LSE read as base 2, no GQA sum) exceed it by far.

The matrix is lighter than the forward's (sequences up to 300, not 1000): the
scalar CPU pipeline runs ~0.3 GFLOP/s and the backward costs ~2.5x the
forward; the whole file should take under two minutes.
"""

import dataclasses
import itertools
import os
import zlib

import numpy as np
import pytest

from fa3 import reference
from grad_case import GradCase, to_storage

SEQ_LENS = (1, 17, 128, 300)


def _cases():
    cases = []
    # Every (Sq, Sk) pair, causal and not, GQA 8:2, d = 64, f16.
    for sq, sk in itertools.product(SEQ_LENS, SEQ_LENS):
        for causal in (False, True):
            heavy = sq * sk >= 128 * 300
            cases.append(GradCase(sq=sq, sk=sk, causal=causal, hq=4 if heavy else 8, hkv=1 if heavy else 2))
    # Every head dim in every dtype, causal with Sq != Sk, static and dynamic.
    for d, dtype in itertools.product((32, 64, 128, 256), ("f32", "f16", "bf16")):
        cases.append(GradCase(sq=70, sk=100, d=d, dtype=dtype, causal=True, b=2, hq=4, hkv=2, dynamic=d != 128))
    # Windows (local attention), with and without causal, Sq != Sk.
    cases += [
        GradCase(sq=200, sk=200, window=(32, 0), causal=True),
        GradCase(sq=100, sk=150, window=(16, 16)),
        GradCase(sq=150, sk=100, window=(-1, 8), dtype="bf16"),
        GradCase(sq=300, sk=17, window=(5, 3), dtype="f32", hq=2, hkv=1),
        GradCase(sq=40, sk=40, window=(0, 0), b=3),
    ]
    # Softcap, with an explicit scale too.
    cases += [
        GradCase(sq=100, sk=150, softcap=30.0, causal=True),
        GradCase(sq=64, sk=64, softcap=2.0, scale=0.5, dtype="f32"),
        GradCase(sq=90, sk=60, softcap=5.0, dtype="bf16", window=(20, 20)),
    ]
    # MQA, MHA, Dv != D, several batches, a non-default scale.
    cases += [
        GradCase(sq=60, sk=80, hq=8, hkv=1, b=3),
        GradCase(sq=60, sk=80, hq=3, hkv=3, causal=True),
        GradCase(sq=77, sk=99, d=128, dv=64, dtype="bf16"),
        GradCase(sq=77, sk=99, d=64, dv=128, dtype="f32", causal=True, hq=4),
        GradCase(sq=50, sk=60, scale=0.3, dtype="f32", dynamic=False),
    ]
    # Small tiles: many query and key blocks, ragged in both directions.
    cases += [
        GradCase(sq=100, sk=83, causal=True, block_m=16, block_n=32),
        GradCase(sq=37, sk=61, window=(7, 5), block_m=8, block_n=8, dtype="f32"),
        GradCase(sq=61, sk=37, causal=True, block_m=8, block_n=8, dtype="bf16", hq=4),
        GradCase(sq=129, sk=129, d=128, block_m=128, block_n=128, dtype="bf16", causal=True, hq=4),
    ]
    # Empty key sequences: dq is 0, dk and dv are empty.
    cases.append(GradCase(sq=5, sk=0, dtype="f32"))
    cases.append(GradCase(sq=17, sk=0, dtype="bf16", causal=True))
    return cases


CASES = _cases()

# fa3.attention then fa3.attention_grad on its results, in one function.
TRAIN_STEP_CASES = [
    GradCase(sq=100, sk=130, causal=True),
    GradCase(sq=70, sk=50, d=128, dv=64, dtype="bf16", softcap=10.0, window=(16, 4)),
    GradCase(sq=45, sk=45, dtype="f32", hq=4, hkv=1, block_m=16, block_n=8),
]


def _seed():
    return int(os.environ.get("FA3_TEST_SEED", np.random.SeedSequence().entropy % 2**32))


@pytest.mark.parametrize("case", CASES, ids=[c.id() for c in CASES])
def test_attention_grad_matches_reference(case, fa3_run, tmp_path):
    seed = _seed()
    rng = np.random.default_rng(zlib.crc32(case.id().encode()) ^ seed)
    (q, k, v, do, _, _), grads = case.run(fa3_run, tmp_path, rng)
    try:
        case.check(q, k, v, do, grads)
    except AssertionError as e:
        raise AssertionError(f"{e}\n(replay with FA3_TEST_SEED={seed})") from None


@pytest.mark.parametrize("case", TRAIN_STEP_CASES, ids=[c.id() for c in TRAIN_STEP_CASES])
def test_train_step(case, fa3_run, tmp_path):
    """o, lse from fa3.attention, then dq, dk, dv from fa3.attention_grad fed
    with them: the forward is checked under its own bound, and the backward
    under a bound that takes the forward's error bounds as the error of its
    o and lse operands."""
    seed = _seed()
    rng = np.random.default_rng(zlib.crc32(("train" + case.id()).encode()) ^ seed)
    (q, k, v, do), (o, lse, *grads) = case.run_train_step(fa3_run, tmp_path, rng)
    fwd = case.forward_case()
    try:
        fwd.check((q, k, v), o, lse)
        ref_o, ref_lse = reference.attention(*(x.astype(np.float64) for x in (q, k, v)), **case.kwargs())
        o_err, lse_err = fwd.bounds(*(x.astype(np.float64) for x in (q, k, v)), ref_o, ref_lse)
        case.check(q, k, v, do, grads, o_err=o_err, lse_err=lse_err)
    except AssertionError as e:
        raise AssertionError(f"{e}\n(replay with FA3_TEST_SEED={seed})") from None


# -- the bound itself, without fa3-run ---------------------------------------

EMULATED_CASES = [
    GradCase(sq=128, sk=128, causal=True, dtype="bf16"),
    GradCase(sq=128, sk=300, dtype="f16"),
    GradCase(sq=70, sk=100, d=256, dtype="f32", causal=True, b=2, hq=4),
    GradCase(sq=90, sk=60, softcap=5.0, dtype="bf16", window=(20, 20)),
    GradCase(sq=64, sk=64, softcap=2.0, scale=0.5, dtype="f32"),
    GradCase(sq=77, sk=99, d=128, dv=64, dtype="bf16", hq=8, hkv=1),
    GradCase(sq=300, sk=17, causal=True, hq=4),  # rows without keys
    GradCase(sq=37, sk=61, window=(0, 0), dtype="f16"),  # keys without queries
    GradCase(sq=5, sk=0, dtype="bf16"),
]


@pytest.mark.parametrize("case", EMULATED_CASES, ids=[c.id() for c in EMULATED_CASES])
def test_bound_accepts_emulated_kernel(case):
    """A NumPy f32 model of the kernel's arithmetic, rounding where it rounds,
    stays within the bound (measured over the whole fa3-run matrix: at most
    0.44 of it in f16 and bf16, where a sum of a few rounded terms can reach
    the undoubled bound, i.e. 0.5; ~0.005 in f32)."""
    rng = np.random.default_rng(zlib.crc32(case.id().encode()))
    q, k, v, do = case.grad_inputs(rng)
    o, lse = case.forward_reference(q, k, v)
    case.check(q, k, v, do, case.emulate(q, k, v, do, o, lse))


def test_bound_accepts_emulated_train_step():
    """The train-step bound: o and lse operands off by up to half the
    forward's bounds (as a forward kernel may leave them) still pass."""
    case = TRAIN_STEP_CASES[1]
    rng = np.random.default_rng(3)
    q, k, v, do = case.grad_inputs(rng)
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    ref_o, ref_lse = reference.attention(q64, k64, v64, **case.kwargs())
    o_err, lse_err = case.forward_case().bounds(q64, k64, v64, ref_o, ref_lse)
    o = to_storage(ref_o + 0.5 * o_err * rng.uniform(-1, 1, ref_o.shape), case.dtype)
    lse = (ref_lse + 0.5 * lse_err * rng.uniform(-1, 1, ref_lse.shape)).astype(np.float32)
    case.check(q, k, v, do, case.emulate(q, k, v, do, o, lse), o_err=o_err, lse_err=lse_err)


def _wrong_gradients(case, q, k, v, do, o, lse):
    """Gradients of plausible broken kernels: (name, (dq, dk, dv))."""
    scale = 1.0 / np.sqrt(case.d)
    dq, dk, dv = case.emulate(q, k, v, do, o, lse)
    g = case.hq // case.hkv
    # dk, dv from the first query head of each group only (no GQA sum).
    _, dk1, dv1 = reference.attention_grad(
        q[:, :, ::g].astype(np.float64), k, v, do[:, :, ::g].astype(np.float64), **case.kwargs()
    )
    off_by_one = dataclasses.replace(case, causal=False, window=(-1, 1))
    return [
        ("scale missing", (dq / scale, dk / scale, dv)),
        ("causal mask off by one", off_by_one.emulate(q, k, v, do, o, lse)),
        ("Delta missing", case.emulate(q, k, v, do, np.zeros_like(o), lse)),
        ("LSE read as base 2", case.emulate(q, k, v, do, o, lse * np.float32(np.log(2)))),
        ("no GQA sum", (dq, to_storage(dk1, case.dtype), to_storage(dv1, case.dtype))),
    ]


@pytest.mark.parametrize("dtype", ("f32", "f16", "bf16"))
def test_bound_rejects_wrong_gradients(dtype):
    """Each broken kernel's error exceeds the bound at least tenfold somewhere
    (measured in bf16, the loosest: 50x for a missing Delta to 7e3x for the
    mask), so the bound cannot pass such garbage."""
    case = GradCase(sq=128, sk=128, causal=True, dtype=dtype)
    rng = np.random.default_rng(11)
    q, k, v, do = case.grad_inputs(rng)
    o, lse = case.forward_reference(q, k, v)
    args = [x.astype(np.float64) for x in (q, k, v, do)]
    refs = reference.attention_grad(*args, **case.kwargs())
    bounds = case.bounds(*args, refs)
    for name, wrong in _wrong_gradients(case, q, k, v, do, o, lse):
        ratio = max((np.abs(w - r) / b).max() for w, r, b in zip(wrong, refs, bounds))
        assert ratio > 10, f"{name}: worst error only {ratio:.3g} times the bound"
