"""The GPU's tiling on the CPU: `fa3-run --grid` compiles with
fa3-cpu-pipeline{grid=true}, i.e. fa3-tile{grid=true} (the scf.forall grid
the Hopper kernels are built from: one iteration per query block, head and
sequence or split, each with its sequence's rows, row limits and key range)
and fa3-serialize-grid, and runs it. Checked against the float64 reference
under the f32 bound of the CPU suite (|O - ref| <= 1e-5 (1 + max|V|): f32
arithmetic over at most a few hundred keys), and, where the tiles and key
blocks are the same, bit for bit against the serial tiling (both run the
same tile ops on the same tiles, in another order). Small tiles
(--block-m/--block-n 16) put many tile edges inside sequences. The
backward's grid is checked under the backward's bounds (GradCase)."""

import zlib

import numpy as np
import pytest
from grad_case import GradCase
from npy_run import run

from fa3 import reference


def _run(fa3_run, tmp_path, source, function, inputs, outputs, extra=()):
    proc, arrays = run(fa3_run, tmp_path, source, function, inputs, outputs, extra)
    assert proc.returncode == 0, proc.stderr
    return arrays


def _check(o, lse, ref_o, ref_lse, v):
    assert o.shape == ref_o.shape and lse.shape == ref_lse.shape
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    assert np.abs(o - ref_o).max(initial=0) <= 1e-5 * (1 + np.abs(v).max())
    seen = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), seen)
    assert np.abs(lse[seen] - ref_lse[seen]).max(initial=0) <= 1e-5 * (1 + np.abs(ref_lse[seen]).max(initial=0))


def _packed_function(name, op, operands, results, attrs, used, used_keyword=""):
    """`func.func @name` around one packed-batch op: `operands` and
    `results` are (SSA name, type) pairs, followed by cu_seqlens_q,
    cu_seqlens_k and, with `used`, seqused_k (after `used_keyword` in the
    op's operand list)."""
    i32 = "tensor<?xi32>"
    operands = list(operands) + [("%cuq", i32), ("%cuk", i32)]
    names = ", ".join(n for n, _ in operands)
    if used:
        operands.append(("%u", i32))
        names += f"{used_keyword or ','} %u"
    args = ", ".join(f"{n}: {t}" for n, t in operands)
    types = ", ".join(t for _, t in operands)
    result_names = ", ".join(n for n, _ in results)
    result_types = ", ".join(t for _, t in results)
    attr_dict = " {" + ", ".join(attrs) + "}" if attrs else ""
    return (f"func.func @{name}({args}) -> ({result_types}) {{\n"
            f"  {result_names} = {op} {names}{attr_dict} : ({types}) -> ({result_types})\n"
            f"  return {result_names} : {result_types}\n}}\n")


def _varlen_source(hq, hkv, d, attrs, used):
    t, kt = f"tensor<?x{hq}x{d}xf32>", f"tensor<?x{hkv}x{d}xf32>"
    return _packed_function("varlen", "fa3.attention_varlen", [("%q", t), ("%k", kt), ("%v", kt)],
                            [("%o", t), ("%lse", f"tensor<{hq}x?xf32>")], attrs, used)


VARLEN_CASES = {
    # Ragged lengths with an empty sequence and one of one row; Sq != Sk per
    # sequence; rows past cu_seqlens_q[B] (tail) must read O = 0, LSE = -inf.
    "causal-gqa": dict(lens_q=[5, 0, 70, 1, 17], lens_k=[9, 3, 70, 130, 17], hq=4, hkv=2, attrs=["causal"],
                       tail=3),
    "plain": dict(lens_q=[33, 1, 48], lens_k=[20, 64, 48], hq=2, hkv=2, attrs=[]),
    "window-softcap": dict(lens_q=[40, 23], lens_k=[40, 50], hq=4, hkv=1,
                           attrs=["window = array<i64: 8, 3>", "softcap = 5.0 : f32"]),
    "seqused": dict(lens_q=[12, 31], lens_k=[40, 50], hq=2, hkv=1, attrs=["causal"], used=[25, 50]),
    "splits": dict(lens_q=[19, 0, 33], lens_k=[90, 10, 33], hq=4, hkv=2, attrs=["causal", "num_splits = 3 : i64"],
                   bitwise=False),
    "pack-gqa": dict(lens_q=[3, 20], lens_k=[37, 20], hq=4, hkv=1, attrs=["causal", "pack_gqa"]),
}


@pytest.mark.parametrize("name", sorted(VARLEN_CASES))
def test_varlen_grid_matches_float64(fa3_run, tmp_path, name):
    case = VARLEN_CASES[name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    hq, hkv, d = case["hq"], case["hkv"], 32
    cu_q = np.concatenate([[0], np.cumsum(case["lens_q"])]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(case["lens_k"])]).astype(np.int32)
    tq = int(cu_q[-1]) + case.get("tail", 0)
    tk = int(cu_k[-1])
    q = rng.standard_normal((tq, hq, d)).astype(np.float32)
    k = rng.standard_normal((tk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((tk, hkv, d)).astype(np.float32)
    used = case.get("used")
    inputs = [q, k, v, cu_q, cu_k] + ([np.array(used, np.int32)] if used else [])
    source = _varlen_source(hq, hkv, d, case["attrs"], used is not None)
    tiles = ["--block-m=16", "--block-n=16"]
    o, lse = _run(fa3_run, tmp_path, source, "varlen", inputs, 2, ["--grid", *tiles])
    options = dict(causal="causal" in case["attrs"])
    if name == "window-softcap":
        options.update(window=(8, 3), softcap=5.0)
    ref_o, ref_lse = reference.attention_varlen(q, k, v, cu_q, cu_k,
                                                seqused_k=None if used is None else np.array(used), **options)
    _check(o, lse, ref_o, ref_lse, v)
    if case.get("tail"):
        assert (o[cu_q[-1]:] == 0).all() and np.isneginf(lse[:, cu_q[-1]:]).all()
    if case.get("bitwise", True):
        serial_o, serial_lse = _run(fa3_run, tmp_path, source, "varlen", inputs, 2, tiles)
        np.testing.assert_array_equal(o, serial_o)
        np.testing.assert_array_equal(lse, serial_lse)


def _kvcache_source(paged, attrs):
    q = "tensor<?x3x4x32xf32>"
    cache = "tensor<?x8x2x32xf32>" if paged else "tensor<?x?x2x32xf32>"
    lens = "tensor<?xi32>"
    table = ", %pages: tensor<?x?xi32>" if paged else ""
    table_op = ", %pages" if paged else ""
    table_type = ", tensor<?x?xi32>" if paged else ""
    attr_dict = " {" + ", ".join(attrs) + "}" if attrs else ""
    return (f"func.func @decode(%q: {q}, %kc: {cache}, %vc: {cache}, %lens: {lens}{table}) "
            f"-> ({q}, tensor<?x4x3xf32>) {{\n"
            f"  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens{table_op}{attr_dict} "
            f": ({q}, {cache}, {cache}, {lens}{table_type}) -> ({q}, tensor<?x4x3xf32>)\n"
            f"  return %o, %lse : {q}, tensor<?x4x3xf32>\n}}\n")


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("attrs", [["causal"], ["causal", "num_splits = 4 : i64"], ["pack_gqa"]],
                         ids=["one-split", "four-splits", "pack-gqa"])
def test_kvcache_grid_matches_float64(fa3_run, tmp_path, paged, attrs):
    rng = np.random.default_rng(11 + paged + 2 * len(attrs))
    batch, rows = 3, 72
    lens = np.array([0, 37, 72], np.int32)
    q = rng.standard_normal((batch, 3, 4, 32)).astype(np.float32)
    if paged:
        pages = rows // 8
        table = rng.permutation(batch * pages).reshape(batch, pages).astype(np.int32)
        kc = rng.standard_normal((batch * pages, 8, 2, 32)).astype(np.float32)
        inputs_tail = [table]
    else:
        table = None
        kc = rng.standard_normal((batch, rows, 2, 32)).astype(np.float32)
        inputs_tail = []
    vc = rng.standard_normal(kc.shape).astype(np.float32)
    source = _kvcache_source(paged, attrs)
    inputs = [q, kc, vc, lens] + inputs_tail
    tiles = ["--block-m=16", "--block-n=16"]
    o, lse = _run(fa3_run, tmp_path, source, "decode", inputs, 2, ["--grid", *tiles])
    ref_o, ref_lse = reference.attention_kvcache(q, kc, vc, lens, table, causal="causal" in attrs)
    _check(o, lse, ref_o, ref_lse, vc)
    if not any("num_splits" in a for a in attrs):
        serial_o, serial_lse = _run(fa3_run, tmp_path, source, "decode", inputs, 2, tiles)
        np.testing.assert_array_equal(o, serial_o)
        np.testing.assert_array_equal(lse, serial_lse)


@pytest.mark.parametrize("causal", [False, True])
def test_dense_grid_matches_float64(fa3_run, tmp_path, causal):
    rng = np.random.default_rng(5 + causal)
    t = "tensor<?x?x4x32xf32>"
    kt = "tensor<?x?x2x32xf32>"
    attr = " {causal}" if causal else ""
    source = (f"func.func @attn(%q: {t}, %k: {kt}, %v: {kt}) -> ({t}, tensor<?x4x?xf32>) {{\n"
              f"  %o, %lse = fa3.attention %q, %k, %v{attr} : ({t}, {kt}, {kt}) -> ({t}, tensor<?x4x?xf32>)\n"
              f"  return %o, %lse : {t}, tensor<?x4x?xf32>\n}}\n")
    q = rng.standard_normal((2, 37, 4, 32)).astype(np.float32)
    k = rng.standard_normal((2, 53, 2, 32)).astype(np.float32)
    v = rng.standard_normal((2, 53, 2, 32)).astype(np.float32)
    tiles = ["--block-m=16", "--block-n=16"]
    o, lse = _run(fa3_run, tmp_path, source, "attn", [q, k, v], 2, ["--grid", *tiles])
    ref_o, ref_lse = reference.attention(q, k, v, causal=causal)
    _check(o, lse, ref_o, ref_lse, v)
    serial_o, serial_lse = _run(fa3_run, tmp_path, source, "attn", [q, k, v], 2, tiles)
    np.testing.assert_array_equal(o, serial_o)
    np.testing.assert_array_equal(lse, serial_lse)


# The backward's grid (fa3-tile{grid=true} of fa3.attention_grad: three
# scf.foralls, the key blocks adding their dQ partials into a buffer with
# fa3.accumulate_tile), serialized and run: against the float64 gradient
# under the CPU suite's backward bounds (GradCase.check, docs/Testing.md).
# Not bit for bit against the serial tiling: there a step folds dS K into
# the accumulator tile (acc + dS K), here it adds a partial (acc + (dS K)),
# as the Hopper kernel does.
GRAD_GRID_CASES = [
    GradCase(sq=100, sk=83, causal=True, block_m=16, block_n=32),
    GradCase(sq=17, sk=300, causal=True, dtype="bf16", hq=4, hkv=2, b=2, block_m=16, block_n=16),
    GradCase(sq=1, sk=17, dtype="f32"),
    GradCase(sq=150, sk=100, window=(-1, 8), dtype="bf16", block_m=32, block_n=16),
    GradCase(sq=90, sk=60, softcap=5.0, dtype="bf16", window=(20, 20), block_m=16, block_n=16),
    GradCase(sq=60, sk=80, hq=8, hkv=1, b=3, d=128, dtype="bf16", block_m=16, block_n=32),
    GradCase(sq=17, sk=0, dtype="bf16", causal=True),
]


@pytest.mark.parametrize("case", GRAD_GRID_CASES, ids=[c.id() for c in GRAD_GRID_CASES])
def test_grad_grid_matches_float64(fa3_run, tmp_path, case):
    rng = np.random.default_rng(zlib.crc32(case.id().encode()))
    (q, k, v, do, _, _), grads = case.run(fa3_run, tmp_path, rng, extra=["--grid"])
    case.check(q, k, v, do, grads)


def _varlen_grad_source(hq, hkv, d, attrs, used):
    t, kt = f"tensor<?x{hq}x{d}xf32>", f"tensor<?x{hkv}x{d}xf32>"
    return _packed_function("varlen_bwd", "fa3.attention_varlen_grad",
                            [("%do", t), ("%q", t), ("%k", kt), ("%v", kt), ("%o", t),
                             ("%lse", f"tensor<{hq}x?xf32>")],
                            [("%dq", t), ("%dk", kt), ("%dv", kt)], attrs, used, used_keyword=" seqused_k")


# The packed backward's grid: z over the sequences, each iteration's rows
# at its sequence's offsets with its end as the limit, the rows outside
# every sequence (tail) zero. f32 against the float64 gradient of each
# sequence alone (reference.attention_varlen_grad), the f32 bound of the
# CPU suite scaled by the largest gradient.
VARLEN_GRAD_CASES = {
    "causal-gqa": dict(lens_q=[5, 0, 70, 1, 17], lens_k=[9, 3, 70, 130, 17], hq=4, hkv=2, attrs=["causal"], tail=3),
    "window-softcap": dict(lens_q=[40, 23], lens_k=[40, 50], hq=4, hkv=1,
                           attrs=["window = array<i64: 8, 3>", "softcap = 5.0 : f32"]),
    "seqused-det": dict(lens_q=[12, 31], lens_k=[40, 50], hq=2, hkv=1, attrs=["causal", "deterministic"],
                        used=[25, 50]),
}


@pytest.mark.parametrize("name", list(VARLEN_GRAD_CASES))
def test_varlen_grad_grid_matches_float64(fa3_run, tmp_path, name):
    c = VARLEN_GRAD_CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    hq, hkv, d, tail = c["hq"], c["hkv"], 32, c.get("tail", 0)
    cu_q = np.concatenate([[0], np.cumsum(c["lens_q"])]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(c["lens_k"])]).astype(np.int32)
    tq, tk = int(cu_q[-1]) + tail, int(cu_k[-1])
    q = rng.standard_normal((tq, hq, d)).astype(np.float32)
    k = rng.standard_normal((tk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((tk, hkv, d)).astype(np.float32)
    do = rng.standard_normal((tq, hq, d)).astype(np.float32)
    used = np.array(c["used"], np.int32) if "used" in c else None
    options = dict(causal="causal" in c["attrs"])
    if name == "window-softcap":
        options.update(window=(8, 3), softcap=5.0)
    o, lse = reference.attention_varlen(q, k, v, cu_q, cu_k, seqused_k=used, **options)
    inputs = [do, q, k, v, o.astype(np.float32), lse.astype(np.float32), cu_q, cu_k] + ([used] if used is not None else [])
    source = _varlen_grad_source(hq, hkv, d, c["attrs"], used is not None)
    tiles = ["--block-m=16", "--block-n=16"]
    dq, dk, dv = _run(fa3_run, tmp_path, source, "varlen_bwd", inputs, 3, ["--grid", *tiles])
    refs = reference.attention_varlen_grad(q, k, v, do, cu_q, cu_k, seqused_k=used, **options)
    for name_, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        assert got.shape == ref.shape and not np.isnan(got).any(), name_
        assert np.abs(got - ref).max(initial=0) <= 1e-4 * (1 + np.abs(ref).max(initial=0)), name_
    assert (dq[int(cu_q[-1]):] == 0).all(), "dq rows past the last sequence are not 0"
