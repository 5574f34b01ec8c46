"""fa3.attention_varlen on torch CUDA tensors (the Hopper kernel of
fa3.attention_varlen: packed sequences, offsets and seqused_k read on the
device) against the float64 reference (fa3.reference.attention_varlen, one
attention per sequence), with PyTorch SDPA's own error in the same dtype
as the yardstick, as in test_kvcache_gpu.py: max |O - ref| <= 2 * max
|SDPA - ref| + 1e-5 over the rows that see a key (SDPA per sequence on its
own rows, the bottom-right causal / window mask explicit). No SDPA backend
has softcap: with softcap the bound is the dtype's rounding of O and P,
4 * 2^-8 * max |V| (as test_python_gpu.py's softcap case), far below a lost
softcap. The LSE within 1e-3 relative (fa3 accumulates it in float32).

Gradients (autograd: the varlen Hopper backward, fa3.attention_varlen_grad's
three kernels in one launch) against the float64 gradient
(fa3.reference.attention_varlen_grad) with SDPA's autograd per sequence as
the yardstick, or, with softcap, fa3's dense backward on each sequence alone.

Rows that see no key, and the rows past cu_seqlens_q[-1], must be O = 0,
LSE = -inf (outputs come from torch.empty: only the launch's fill defines
the tail rows). Key rows that no sequence uses (past cu_seqlens_k[-1], and
past seqused_k[b] in a sequence) hold large finite garbage: a kernel that
reads them into the softmax fails. Lengths are ragged (0, 1, 17, 1000, not
multiples of the tiles), Sq != Sk per sequence, GQA 32:8 and 4:1, head dims
64/128/192/256 and 40/96 (zero-padded to a kernel's), each case with PackGQA
(the default with grouped heads) and without.
"""

import math
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fa3
from fa3 import reference

CASES = [  # seqlens_q, seqlens_k, hq, hkv, d, dtype, causal, window, softcap, seqused_k
    ([1, 17, 1000, 0, 130], [1000, 17, 1000, 5, 131], 32, 8, 128, torch.bfloat16, True, (-1, -1), 0.0, None),
    ([1, 17, 1000, 0, 130], [1000, 17, 1000, 5, 131], 32, 8, 128, torch.bfloat16, False, (-1, -1), 0.0, None),
    ([17, 0, 1, 300], [1, 0, 64, 1000], 4, 1, 64, torch.bfloat16, True, (-1, -1), 0.0, None),
    ([17, 0, 1, 300], [1, 0, 64, 1000], 4, 1, 64, torch.float16, False, (-1, -1), 0.0, None),
    ([1000, 1, 17], [1000, 2000, 17], 8, 2, 256, torch.float16, True, (32, 0), 0.0, None),
    ([129, 64, 1], [257, 65, 3], 16, 4, 64, torch.bfloat16, False, (16, 40), 0.0, None),
    ([129, 64, 1], [257, 65, 3], 16, 4, 128, torch.bfloat16, True, (-1, -1), 30.0, None),
    ([17, 1, 1000, 5], [300, 10, 1000, 64], 32, 8, 128, torch.bfloat16, True, (-1, -1), 0.0, [250, 0, 999, 64]),
    ([17, 1, 1000, 5], [300, 10, 1000, 64], 4, 1, 256, torch.bfloat16, False, (-1, -1), 0.0, [1, 10, 17, 0]),
    ([100, 33], [200, 1], 8, 8, 192, torch.bfloat16, True, (-1, -1), 0.0, None),
    # Head dims without a kernel: zero-padded to 128 and 64.
    ([17, 200], [40, 200], 8, 2, 96, torch.bfloat16, True, (-1, -1), 0.0, None),
    ([1, 129], [65, 129], 4, 4, 40, torch.float16, False, (-1, -1), 0.0, None),
]
# Packed rows past the last sequence: query rows the fill must define, and
# key rows of garbage.
TAIL_Q, TAIL_K = 3, 5


def _lengths_id(lengths):
    return "-".join(map(str, lengths)) if len(lengths) <= 6 else f"{len(lengths)}seqs{sum(lengths)}"


def _case_id(c):
    return (f"q{_lengths_id(c[0])}_k{_lengths_id(c[1])}-h{c[2]}x{c[3]}-d{c[4]}-{str(c[5])[6:]}-"
            f"{'causal' if c[6] else 'full'}-win{c[7][0]}.{c[7][1]}-cap{c[8]:g}-{'used' if c[9] else 'all'}")


def _offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def _inputs(seq_q, seq_k, hq, hkv, d, dtype, seqused=None, seed=0):
    """Random packed q, k, v with TAIL_Q / TAIL_K rows past the sequences;
    the key rows no sequence uses hold large finite garbage."""
    torch.manual_seed(seed)
    cu_q, cu_k = _offsets(seq_q), _offsets(seq_k)
    q = torch.randn(int(cu_q[-1]) + TAIL_Q, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(int(cu_k[-1]) + TAIL_K, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn_like(k)
    unused = torch.ones(k.shape[0], dtype=torch.bool, device="cuda")
    for b in range(len(seq_k)):
        end = cu_k[b] + (seqused[b] if seqused is not None else seq_k[b])
        unused[cu_k[b]:end] = False
    k[unused] = 300.0
    v[unused] = -3000.0
    return q, k, v, cu_q, cu_k


def _reference_and_sdpa(q, k, v, cu_q, cu_k, used, causal, window, softcap, scale):
    """float64 reference (fa3.reference) and SDPA's output in q's dtype on
    the same rounded inputs, sequence by sequence (SDPA: None with
    softcap)."""
    ref_o, ref_lse = reference.attention_varlen(q.double().cpu().numpy(), k.double().cpu().numpy(),
                                                v.double().cpu().numpy(), cu_q, cu_k, seqused_k=used,
                                                causal=causal, window=window, scale=scale, softcap=softcap)
    sdpa = None
    if not softcap:
        sdpa = torch.zeros_like(q)
        group = q.shape[1] // k.shape[1]
        for b in range(len(cu_q) - 1):
            q0, q1 = int(cu_q[b]), int(cu_q[b + 1])
            n = int(used[b]) if used is not None else int(cu_k[b + 1] - cu_k[b])
            if q1 == q0 or n == 0:
                continue
            k0 = int(cu_k[b])
            mask = torch.from_numpy(reference.visible(q1 - q0, n, causal, window)).to(q.device)
            kb = k[k0:k0 + n].repeat_interleave(group, 1)
            vb = v[k0:k0 + n].repeat_interleave(group, 1)
            sdpa[q0:q1] = F.scaled_dot_product_attention(q[q0:q1].transpose(0, 1)[None], kb.transpose(0, 1)[None],
                                                         vb.transpose(0, 1)[None], attn_mask=mask,
                                                         scale=scale)[0].transpose(0, 1).nan_to_num(0.0)
    return torch.from_numpy(ref_o).to(q.device), torch.from_numpy(ref_lse).to(q.device), sdpa


def _assert_matches_reference(q, k, v, out, lse, cu_q, cu_k, used=None, causal=False, window=(-1, -1),
                              softcap=0.0, scale=None):
    """O and LSE against the float64 reference under the bound of the
    module docstring; rows that see no key (the tail included) exactly
    O = 0, LSE = -inf."""
    total_q, hq, d = q.shape
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (hq, total_q)
    assert lse.dtype == torch.float32
    scale = scale or 1 / math.sqrt(d)
    ref_o, ref_lse, sdpa = _reference_and_sdpa(q, k, v, cu_q, cu_k, used, causal, window, softcap, scale)
    seen = torch.isfinite(ref_lse)  # [Hq, Tq]
    assert torch.equal(torch.isneginf(lse), ~seen), "rows with LSE = -inf differ from the reference"
    seen_rows = seen.t()  # [Tq, Hq]
    assert (out[~seen_rows] == 0).all(), "a row that sees no key (or past the sequences) is not 0"
    if not seen.any():
        return
    err = (out.double() - ref_o).abs()[seen_rows].max().item()
    if sdpa is not None:
        bound = 2 * (sdpa.double() - ref_o).abs()[seen_rows].max().item() + 1e-5
    else:
        bound = 4 * 2**-8 * v.abs().max().item()
    assert err <= bound, f"O error {err:.3g} > {bound:.3g}"
    lse_err = (lse.double() - ref_lse).abs()[seen]
    assert (lse_err <= 1e-3 * (1 + ref_lse.abs()[seen])).all(), f"LSE error {lse_err.max().item():.3g}"
    print(f"O err {err:.3e} (bound {bound:.3e})")


def _call(q, k, v, cu_q, cu_k, used=None, max_q=None, max_k=None, **options):
    """fa3.attention_varlen with the offsets (and seqused_k) as CUDA int32
    tensors and the exact max_seqlen_* unless given."""
    seq_q = np.diff(cu_q)
    seq_k = np.diff(cu_k) if used is None else np.asarray(used)
    max_q = int(seq_q.max(initial=0)) if max_q is None else max_q
    max_k = int(seq_k.max(initial=0)) if max_k is None else max_k
    dev = lambda a: torch.tensor(np.asarray(a, np.int32), device="cuda")  # noqa: E731
    return fa3.attention_varlen(q, k, v, dev(cu_q), dev(cu_k), max_q, max_k, return_lse=True,
                                seqused_k=None if used is None else dev(used), **options)


@pytest.mark.parametrize("pack_gqa", [None, False], ids=["packed-if-grouped", "unpacked"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_varlen_matches_reference(case, pack_gqa):
    """Both kernels: PackGQA (the default with grouped heads: a tile holds
    the query heads of one key/value head) and one head per tile."""
    seq_q, seq_k, hq, hkv, d, dtype, causal, window, softcap, used = case
    if pack_gqa is False and hq == hkv:
        pytest.skip("no grouped heads: None and False are the same kernel")
    q, k, v, cu_q, cu_k = _inputs(seq_q, seq_k, hq, hkv, d, dtype, used, seed=sum(seq_q) + sum(seq_k) + d)
    out, lse = _call(q, k, v, cu_q, cu_k, used, causal=causal, window_size=window, softcap=softcap,
                     pack_gqa=pack_gqa)
    _assert_matches_reference(q, k, v, out, lse, cu_q, cu_k, used, causal, window, softcap)
    assert (out[int(cu_q[-1]):] == 0).all() and torch.isneginf(lse[:, int(cu_q[-1]):]).all(), "tail rows"


def test_scale_reaches_the_kernel():
    q, k, v, cu_q, cu_k = _inputs([65, 3], [70, 200], 8, 2, 128, torch.bfloat16, seed=1)
    out, lse = _call(q, k, v, cu_q, cu_k, causal=True, softmax_scale=0.05)
    _assert_matches_reference(q, k, v, out, lse, cu_q, cu_k, causal=True, scale=0.05)


def test_max_seqlen_larger_than_needed_changes_nothing():
    """max_seqlen_q / max_seqlen_k above the longest sequence are accepted
    and give the same result bit for bit (the grid is sized by the longest
    sequence read from the offsets)."""
    q, k, v, cu_q, cu_k = _inputs([1, 300, 17], [64, 300, 1], 16, 4, 64, torch.bfloat16, seed=2)
    exact = _call(q, k, v, cu_q, cu_k, causal=True)
    loose = _call(q, k, v, cu_q, cu_k, max_q=100000, max_k=5000, causal=True)
    assert torch.equal(exact[0], loose[0]) and torch.equal(exact[1], loose[1])


def test_no_sequences_and_no_rows():
    """B = 0 with packed rows: every row is O = 0, LSE = -inf (the fill
    alone); Tq = 0: empty outputs."""
    q = torch.randn(9, 8, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 2, 64, device="cuda", dtype=torch.bfloat16)
    zero = torch.zeros(1, dtype=torch.int32, device="cuda")
    out, lse = fa3.attention_varlen(q, k, k, zero, zero, 0, 0, return_lse=True)
    assert out.shape == q.shape and (out == 0).all() and torch.isneginf(lse).all()
    empty = q[:0]
    cu = torch.zeros(3, dtype=torch.int32, device="cuda")
    out, lse = fa3.attention_varlen(empty, k, k, cu, torch.tensor([0, 2, 4], dtype=torch.int32, device="cuda"), 0, 2,
                                    return_lse=True)
    assert out.shape == (0, 8, 64) and lse.shape == (8, 0)
    # Sequences with queries but no keys at all (Tk = 0).
    cu_q = torch.tensor([0, 5, 9], dtype=torch.int32, device="cuda")
    out, lse = fa3.attention_varlen(q, k[:0], k[:0], cu_q, cu, 5, 0, return_lse=True)
    assert (out == 0).all() and torch.isneginf(lse).all()


def test_matches_dense_attention_per_sequence():
    """Each sequence's rows equal, up to rounding, fa3.attention on that
    sequence alone (the dense Hopper kernel, [1, Sq, H, D]): the packed
    launch places every sequence at its own rows and keys."""
    seq_q, seq_k = [1, 200, 77], [500, 200, 1]
    q, k, v, cu_q, cu_k = _inputs(seq_q, seq_k, 32, 8, 128, torch.bfloat16, seed=3)
    out, _ = _call(q, k, v, cu_q, cu_k, causal=True)
    for b in range(len(seq_q)):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        dense = fa3.attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal=True)[0]
        diff = (out[q0:q1].float() - dense.float()).abs().max().item()
        # Both within bf16 rounding of the same attention (few ulps of
        # |O| <= max |V|); the tilings may differ.
        assert diff <= 2**-7 * v[k0:k1].abs().max().item(), f"sequence {b}: {diff:.3g}"


def test_cuda_graph_capture_is_a_clear_error():
    """The host check of the offsets cannot run inside a CUDA graph capture:
    the call says so (not CUDA's "operation not permitted"), and the stream
    is usable after the aborted capture."""
    q, k, v, cu_q, cu_k = _inputs([5, 7], [5, 7], 4, 1, 64, torch.bfloat16, seed=14)
    cu_qt, cu_kt = (torch.tensor(c, device="cuda") for c in (cu_q, cu_k))
    fa3.attention_varlen(q, k, v, cu_qt, cu_kt, 7, 7)  # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="which a CUDA graph capture forbids"):
        with torch.cuda.graph(graph):
            fa3.attention_varlen(q, k, v, cu_qt, cu_kt, 7, 7)
    torch.cuda.synchronize()
    assert fa3.attention_varlen(q, k, v, cu_qt, cu_kt, 7, 7).shape == q.shape


def test_strided_inputs_and_a_side_stream():
    """q, k, v whose heads are strided views run through copies; the launch
    (fill and kernel) follows the current stream."""
    q, k, v, cu_q, cu_k = _inputs([40, 90], [100, 90], 8, 2, 64, torch.float16, seed=4)
    want = _call(q, k, v, cu_q, cu_k, causal=True)
    wide_q = torch.zeros(q.shape[0], 16, 64, device="cuda", dtype=q.dtype)
    wide_q[:, ::2] = q
    got = _call(wide_q[:, ::2], k, v, cu_q, cu_k, causal=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = _call(q, k, v, cu_q, cu_k, causal=True)
    side.synchronize()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_under_torch_compile():
    """A function calling fa3.attention_varlen compiles with no graph break
    (the op is torch.ops.fa3.attention_varlen_cuda) and gives eager's
    result."""
    def f(q, k, v, cu_q, cu_k):
        return fa3.attention_varlen(q, k, v, cu_q, cu_k, 300, 300, causal=True) * 2

    q, k, v, cu_q, cu_k = _inputs([300, 1, 17], [1, 300, 17], 8, 2, 128, torch.bfloat16, seed=5)
    cu_q, cu_k = (torch.tensor(c, device="cuda") for c in (cu_q, cu_k))
    explain = torch._dynamo.explain(f)(q, k, v, cu_q, cu_k)
    assert explain.graph_break_count == 0, explain.break_reasons
    got = torch.compile(f, fullgraph=True)(q, k, v, cu_q, cu_k)
    assert torch.equal(got, f(q, k, v, cu_q, cu_k))


# 40 sequences of 0 to 70 queries and keys (B launches of the dense backward
# before the varlen one).
_MANY = np.random.default_rng(40).integers(0, 71, (2, 40)).tolist()
MANY_Q, MANY_K = _MANY[0], _MANY[1]

GRAD_CASES = [  # seqlens_q, seqlens_k, hq, hkv, d, dtype, causal, window, softcap, seqused_k
    ([1, 17, 300, 0, 130], [300, 17, 300, 5, 131], 8, 2, 128, torch.bfloat16, True, (-1, -1), 0.0, None),
    ([17, 0, 1, 200], [1, 0, 64, 300], 4, 1, 64, torch.float16, False, (16, 40), 0.0, None),
    # d192: the forward's kernel, the backward zero-padded to 256.
    ([100, 33], [200, 1], 4, 4, 192, torch.bfloat16, True, (-1, -1), 0.0, None),
    # d96: forward and backward zero-padded to 128; seqused_k.
    ([17, 1, 300, 5], [100, 10, 300, 64], 8, 2, 96, torch.bfloat16, True, (-1, -1), 0.0, [50, 0, 299, 64]),
    (MANY_Q, MANY_K, 8, 2, 64, torch.bfloat16, False, (-1, -1), 0.0, None),
    (MANY_Q, MANY_K, 8, 2, 64, torch.bfloat16, True, (-1, -1), 0.0, None),
    (MANY_Q, MANY_K, 16, 2, 128, torch.bfloat16, True, (-1, -1), 0.0, [n // 2 for n in MANY_K]),
    ([100, 1, 257], [300, 17, 257], 8, 2, 256, torch.bfloat16, True, (-1, -1), 0.0, None),
    # f16 with a window and softcap (the yardstick: fa3's dense backward).
    ([129, 64, 1, 0], [257, 65, 3, 10], 16, 4, 128, torch.float16, False, (16, 40), 2.0, None),
]


def _sdpa_grads(q, k, v, do, cu_q, cu_k, used, causal, window, scale):
    """SDPA autograd in q's dtype, sequence by sequence on the rows that see
    a key (explicit bottom-right masks; K/V repeated over the group, so
    autograd sums dK/dV over it): the yardstick of the gradient bounds."""
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    group = q.shape[1] // k.shape[1]
    for b in range(len(cu_q) - 1):
        q0, q1, k0 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b])
        n = int(used[b]) if used is not None else int(cu_k[b + 1]) - k0
        if q1 == q0 or n == 0:
            continue
        mask = torch.from_numpy(reference.visible(q1 - q0, n, causal, window)).to(q.device)
        rows = mask.any(1)
        qb = q[q0:q1][rows].detach().transpose(0, 1)[None].requires_grad_()
        kb = k[k0:k0 + n].detach().requires_grad_()
        vb = v[k0:k0 + n].detach().requires_grad_()
        out = F.scaled_dot_product_attention(qb, kb.repeat_interleave(group, 1).transpose(0, 1)[None],
                                             vb.repeat_interleave(group, 1).transpose(0, 1)[None],
                                             attn_mask=mask[rows], scale=scale)
        gq, gk, gv = torch.autograd.grad(out, (qb, kb, vb), do[q0:q1][rows].transpose(0, 1)[None])
        dq[q0:q1][rows] = gq[0].transpose(0, 1)
        dk[k0:k0 + n], dv[k0:k0 + n] = gk, gv
    return dq, dk, dv


def _dense_grads(q, k, v, do, cu_q, cu_k, used, causal, window, softcap, scale):
    """fa3's dense Hopper backward (fa3.attention's autograd) on each
    sequence alone, as a batch of one: the yardstick where no SDPA backend
    has the option (softcap)."""
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for b in range(len(cu_q) - 1):
        q0, q1, k0 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b])
        n = int(used[b]) if used is not None else int(cu_k[b + 1]) - k0
        if q1 == q0 or n == 0:
            continue
        qb, kb, vb = (t.detach()[None].requires_grad_() for t in (q[q0:q1], k[k0:k0 + n], v[k0:k0 + n]))
        out = fa3.attention(qb, kb, vb, causal=causal, softmax_scale=scale, window_size=window, softcap=softcap)
        gq, gk, gv = torch.autograd.grad(out, (qb, kb, vb), do[None, q0:q1])
        dq[q0:q1], dk[k0:k0 + n], dv[k0:k0 + n] = gq[0], gk[0], gv[0]
    return dq, dk, dv


def _poison_allocator():
    """Frees NaN-filled blocks into both pools of torch's caching allocator
    (small: 512 KiB blocks, large: 64 MiB), so that a row of a torch.empty
    output the launch fails to write most likely reads NaN, not zero."""
    blocks = [torch.full((1 << 17,), float("nan"), device="cuda") for _ in range(32)]
    blocks.append(torch.full((1 << 24,), float("nan"), device="cuda"))
    del blocks


@pytest.mark.parametrize("case", GRAD_CASES, ids=_case_id)
def test_varlen_gradients_match_reference(case):
    """dq, dk, dv through fa3.attention_varlen's autograd (one launch of the
    varlen Hopper backward) against the float64 gradient
    (fa3.reference.attention_varlen_grad): max |fa3 - ref| <= 2 * max |SDPA -
    ref| + 1e-4 per tensor (test_attention_grad_gpu.py's bound, SDPA's
    autograd per sequence as the yardstick; with softcap, which no SDPA
    backend has, fa3's dense backward per sequence instead). Rows that see no
    key get dq = 0 exactly; key rows no sequence uses (garbage), and the rows
    past the sequences, dk = dv = 0 exactly (the kernels write every row of
    outputs from torch.empty, over a NaN-poisoned allocator)."""
    seq_q, seq_k, hq, hkv, d, dtype, causal, window, softcap, used = case
    q, k, v, cu_q, cu_k = _inputs(seq_q, seq_k, hq, hkv, d, dtype, used, seed=11)
    cu_qt, cu_kt = (torch.tensor(c, device="cuda") for c in (cu_q, cu_k))
    used_t = torch.tensor(used, dtype=torch.int32, device="cuda") if used is not None else None
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = fa3.attention_varlen(q, k, v, cu_qt, cu_kt, max(seq_q), max(seq_k), causal=causal, window_size=window,
                               softcap=softcap, seqused_k=used_t)
    do = torch.randn_like(out)
    _poison_allocator()
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), do)
    scale = 1 / math.sqrt(d)
    numpy = [t.detach().double().cpu().numpy() for t in (q, k, v, do)]
    want = [torch.from_numpy(g).to("cuda") for g in reference.attention_varlen_grad(
        *numpy, cu_q, cu_k, seqused_k=used, causal=causal, window=window, scale=scale, softcap=softcap)]
    if softcap:
        yardstick = _dense_grads(q, k, v, do, cu_q, cu_k, used, causal, window, softcap, scale)
    else:
        yardstick = _sdpa_grads(q, k, v, do, cu_q, cu_k, used, causal, window, scale)
    for name, got, ref, other in zip(("dq", "dk", "dv"), (dq, dk, dv), want, yardstick):
        assert not got.isnan().any(), f"NaN in {name}"
        err = (got.double() - ref).abs().max().item()
        bound = 2 * (other.double() - ref).abs().max().item() + 1e-4
        assert err <= bound, f"{name}: error {err:.3g} exceeds {bound:.3g}"
    # Exact zeros: rows that see no key, unused and tail key rows.
    seen = torch.from_numpy(np.isfinite(reference.attention_varlen(
        *numpy[:3], cu_q, cu_k, seqused_k=used, causal=causal, window=window, scale=scale,
        softcap=softcap)[1])).to("cuda")
    assert (dq[~seen.t()] == 0).all()
    unused = torch.ones(k.shape[0], dtype=torch.bool, device="cuda")
    for b in range(len(seq_k)):
        unused[cu_k[b]:cu_k[b] + (used[b] if used is not None else seq_k[b])] = False
    assert (dk[unused] == 0).all() and (dv[unused] == 0).all()


DETERMINISTIC_CASES = [  # seqlens_q, seqlens_k, hq, hkv, d, seqused_k
    ([300, 17, 129], [300, 40, 129], 8, 2, 128, None),
    # Many sequences, a group of 8 query heads (their dK, dV sums), seqused_k.
    (MANY_Q, MANY_K, 16, 2, 64, [n // 2 for n in MANY_K]),
]


@pytest.mark.parametrize("case", DETERMINISTIC_CASES, ids=lambda c: f"{_lengths_id(c[0])}-h{c[2]}x{c[3]}-d{c[4]}")
def test_deterministic_gradients_are_bit_identical(case):
    """deterministic=True: two backward passes give the same bits (the varlen
    backward's deterministic kernel: each dQ block accumulated in a fixed
    order); the gradients still match the default backward's within bf16
    rounding of their largest entry."""
    seq_q, seq_k, hq, hkv, d, used = case
    q, k, v, cu_q, cu_k = _inputs(seq_q, seq_k, hq, hkv, d, torch.bfloat16, used, seed=13)
    cu_qt, cu_kt = (torch.tensor(c, device="cuda") for c in (cu_q, cu_k))
    used_t = torch.tensor(used, dtype=torch.int32, device="cuda") if used is not None else None
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    do = torch.randn(q.shape, device="cuda", dtype=q.dtype)

    def grads(deterministic):
        out = fa3.attention_varlen(q, k, v, cu_qt, cu_kt, max(seq_q), max(seq_k), causal=True,
                                   seqused_k=used_t, deterministic=deterministic)
        return torch.autograd.grad(out, (q, k, v), do)

    first, second, default = grads(True), grads(True), grads(False)
    for name, a, b, c in zip(("dq", "dk", "dv"), first, second, default):
        assert torch.equal(a, b), f"{name} differs between two deterministic runs"
        assert (a.float() - c.float()).abs().max().item() <= 2**-7 * c.float().abs().max().item() + 1e-4, name


def test_gradients_without_sequences_are_zero():
    """B = 0 with packed rows: the launch's extra grid row zeroes every row
    of dq, dk, dv (from torch.empty, over a NaN-poisoned allocator). No
    queries (Tq = 0) or no keys (Tk = 0): zeros, without a kernel."""
    q = torch.randn(9, 8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(5, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(5, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    zero = torch.zeros(1, dtype=torch.int32, device="cuda")
    out, lse = fa3.attention_varlen(q, k, v, zero, zero, 0, 0, return_lse=True)
    _poison_allocator()
    dq, dk, dv = torch.autograd.grad((out, lse), (q, k, v), (torch.randn_like(out), torch.randn_like(lse)))
    for name, g, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        assert g.shape == like.shape and (g == 0).all(), name
    cu = torch.tensor([0, 0, 0], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda")
    empty = q.detach()[:0].clone().requires_grad_()
    out = fa3.attention_varlen(empty, k, v, cu, cu_k, 0, 3)
    dq, dk, dv = torch.autograd.grad(out, (empty, k, v), torch.randn_like(out))
    assert dq.shape == (0, 8, 64) and (dk == 0).all() and (dv == 0).all()
    cu_q = torch.tensor([0, 4, 9], dtype=torch.int32, device="cuda")
    no_k, no_v = (t.detach()[:0].clone().requires_grad_() for t in (k, v))
    out = fa3.attention_varlen(q, no_k, no_v, cu_q, cu, 5, 0)
    dq, dk, dv = torch.autograd.grad(out, (q, no_k, no_v), torch.randn_like(out))
    assert (dq == 0).all() and dk.shape == (0, 2, 64) and dv.shape == (0, 2, 64)


def test_varlen_gradient_through_the_lse_reaches_the_inputs():
    """A loss on the LSE alone (return_lse=True) gives the float64 gradient
    through dLSE (each row's dLSE adds P ∘ dLSE to dS): within 2e-2 of its
    largest entry in bf16 (no SDPA backend returns the LSE to measure its own
    error by)."""
    q, k, v, cu_q, cu_k = _inputs([40, 7], [40, 90], 4, 2, 64, torch.bfloat16, seed=12)
    cu_qt, cu_kt = (torch.tensor(c, device="cuda") for c in (cu_q, cu_k))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    _, lse = fa3.attention_varlen(q, k, v, cu_qt, cu_kt, 40, 90, causal=True, return_lse=True)
    dlse = torch.randn_like(lse).masked_fill(~torch.isfinite(lse), 0.0)
    got = torch.autograd.grad(lse, (q, k, v), dlse)
    numpy = [t.detach().double().cpu().numpy() for t in (q, k, v)]
    want = reference.attention_varlen_grad(*numpy, np.zeros(q.shape), cu_q, cu_k, dlse=dlse.double().cpu().numpy(),
                                           causal=True, scale=1 / math.sqrt(64))
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        w = torch.from_numpy(w).to("cuda")
        assert (g.double() - w).abs().max().item() <= 2e-2 * (w.abs().max().item() + 1e-3), name


def test_argument_errors():
    q = torch.randn(10, 8, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(12, 2, 64, device="cuda", dtype=torch.bfloat16)
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 6, 12], dtype=torch.int32, device="cuda")

    def call(**changes):
        args = dict(q=q, k=k, v=k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=6, max_seqlen_k=6)
        args.update(changes)
        return fa3.attention_varlen(**args)

    call()
    with pytest.raises(ValueError, match=r"max_seqlen_q = 5 is less than the longest sequence \(6\)"):
        call(max_seqlen_q=5)
    with pytest.raises(ValueError, match=r"max_seqlen_k = 2 is less than the longest sequence \(6\)"):
        call(max_seqlen_k=2)
    used = torch.tensor([2, 3], dtype=torch.int32, device="cuda")
    call(seqused_k=used, max_seqlen_k=3)  # the used keys bound max_seqlen_k
    with pytest.raises(ValueError, match=r"seqused_k\[1\] = 7 must lie in \[0, 6\]"):
        call(seqused_k=torch.tensor([2, 7], dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match=r"cu_seqlens_q must be non-decreasing, but cu_seqlens_q\[2\] = 3 < "):
        call(cu_seqlens_q=torch.tensor([0, 4, 3], dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[-1\] = 13 exceeds the 12 packed rows of k and v"):
        call(cu_seqlens_k=torch.tensor([0, 6, 13], dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="cu_seqlens_q must start at 0, got 1"):
        call(cu_seqlens_q=torch.tensor([1, 4, 10], dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match=r"cu_seqlens_k must have shape \(3,\)"):
        call(cu_seqlens_k=cu_k[:2])
    with pytest.raises(TypeError, match="cu_seqlens_q must be an int32 tensor, got torch.int64"):
        call(cu_seqlens_q=cu_q.long())
    with pytest.raises(ValueError, match="cu_seqlens_k is on cpu but q is on cuda"):
        call(cu_seqlens_k=cu_k.cpu())
    with pytest.raises(ValueError, match=r"seqused_k must have shape \(2,\)"):
        call(seqused_k=used[:1])
    with pytest.raises(TypeError, match="k has dtype torch.float16 but q has torch.bfloat16"):
        call(k=k.half(), v=k.half())
    with pytest.raises(TypeError, match="fa3 on CUDA takes torch.bfloat16 or torch.float16"):
        call(q=q.float(), k=k.float(), v=k.float())
    with pytest.raises(ValueError, match="v must be a CUDA tensor like q"):
        call(v=k.cpu())
    with pytest.raises(ValueError, match=r"multiples of 8 up to 256 .* got head_dim 100"):
        call(q=q.new_zeros(10, 8, 100), k=k.new_zeros(12, 2, 100), v=k.new_zeros(12, 2, 100))
    with pytest.raises(ValueError, match="q's 8 heads must be a positive multiple of k/v's 3 heads"):
        call(k=k.new_zeros(12, 3, 64), v=k.new_zeros(12, 3, 64))
    with pytest.raises(ValueError, match="q's last dim must be contiguous"):
        call(q=q.new_zeros(10, 8, 128)[..., ::2])
    with pytest.raises(ValueError, match=r"num_splits 0 or 1\), got num_splits = 2"):
        call(num_splits=2)
    with pytest.raises(ValueError, match="pack_gqa=True needs the 3 query heads per key/value head to divide 64"):
        call(q=q.new_zeros(10, 6, 64), pack_gqa=True)


def test_fa3_run_runs_an_attention_varlen_function(fa3_run, tmp_path):
    """The CUDA runtime behind fa3-run (HopperProgram) takes the offsets and
    seqused_k as inputs of the function, checks them on the host and sizes
    the grid by the longest sequence."""
    seq_q, seq_k, used = [3, 0, 130], [300, 5, 130], [299, 5, 1]
    hq, hkv, d = 8, 2, 64
    q, k, v, cu_q, cu_k = _inputs(seq_q, seq_k, hq, hkv, d, torch.bfloat16, used, seed=7)
    e = "bf16"
    qt, kt, lt, it = (f"tensor<?x{hq}x{d}x{e}>", f"tensor<?x{hkv}x{d}x{e}>", f"tensor<{hq}x?xf32>",
                      "tensor<?xi32>")
    (tmp_path / "varlen.mlir").write_text(
        f"func.func @varlen(%q: {qt}, %k: {kt}, %v: {kt}, %cq: {it}, %ck: {it}, %used: {it}) -> ({qt}, {lt}) {{\n"
        f"  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck, %used {{causal}} : "
        f"({qt}, {kt}, {kt}, {it}, {it}, {it}) -> ({qt}, {lt})\n"
        f"  return %o, %lse : {qt}, {lt}\n}}\n")
    for name, x in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", x.float().cpu().numpy())
    for name, x in (("cq", cu_q), ("ck", cu_k), ("used", np.array(used, np.int32))):
        np.save(tmp_path / f"{name}.npy", x)
    cmd = [fa3_run, str(tmp_path / "varlen.mlir"), "--function=varlen", "--device=cuda"]
    cmd += [f"--input=@{tmp_path / n}.npy" for n in ("q", "k", "v", "cq", "ck", "used")]
    cmd += [f"--output=@{tmp_path / 'o'}.npy", f"--output=@{tmp_path / 'lse'}.npy"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = torch.from_numpy(np.load(tmp_path / "o.npy")).to("cuda").to(torch.bfloat16)
    lse = torch.from_numpy(np.load(tmp_path / "lse.npy")).to("cuda")
    _assert_matches_reference(q, k, v, out, lse, cu_q, cu_k, used, causal=True)
    # A bad offset is refused on the host before any launch.
    np.save(tmp_path / "cq.npy", np.array([0, 3, 2, 133], np.int32))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "must be non-decreasing" in proc.stderr, proc.stderr


def test_fa3_run_runs_an_attention_varlen_grad_function(fa3_run, tmp_path):
    """HopperProgram runs a training step: fa3.attention_varlen, then
    fa3.attention_varlen_grad on its O and LSE (seqused_k, GQA, a sequence
    without queries and one without keys), the offsets checked on the host;
    the gradients as test_varlen_gradients_match_reference bounds them
    (dq, dk, dv allocated poisoned: the kernels write every row)."""
    seq_q, seq_k, used = [3, 0, 130, 17], [300, 5, 130, 0], [299, 5, 1, 0]
    hq, hkv, d = 8, 2, 64
    q, k, v, cu_q, cu_k = _inputs(seq_q, seq_k, hq, hkv, d, torch.bfloat16, used, seed=8)
    do = torch.randn_like(q)
    e = "bf16"
    qt, kt, lt, it = (f"tensor<?x{hq}x{d}x{e}>", f"tensor<?x{hkv}x{d}x{e}>", f"tensor<{hq}x?xf32>",
                      "tensor<?xi32>")
    (tmp_path / "step.mlir").write_text(
        f"func.func @step(%q: {qt}, %k: {kt}, %v: {kt}, %cq: {it}, %ck: {it}, %used: {it}, %do: {qt})"
        f" -> ({qt}, {kt}, {kt}) {{\n"
        f"  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck, %used {{causal}} : "
        f"({qt}, {kt}, {kt}, {it}, {it}, {it}) -> ({qt}, {lt})\n"
        f"  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cq, %ck seqused_k %used "
        f"{{causal}} : ({qt}, {qt}, {kt}, {kt}, {qt}, {lt}, {it}, {it}, {it}) -> ({qt}, {kt}, {kt})\n"
        f"  return %dq, %dk, %dv : {qt}, {kt}, {kt}\n}}\n")
    for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
        np.save(tmp_path / f"{name}.npy", x.float().cpu().numpy())
    for name, x in (("cq", cu_q), ("ck", cu_k), ("used", np.array(used, np.int32))):
        np.save(tmp_path / f"{name}.npy", x)
    cmd = [fa3_run, str(tmp_path / "step.mlir"), "--function=step", "--device=cuda"]
    cmd += [f"--input=@{tmp_path / n}.npy" for n in ("q", "k", "v", "cq", "ck", "used", "do")]
    cmd += [f"--output=@{tmp_path / n}.npy" for n in ("dq", "dk", "dv")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = [torch.from_numpy(np.load(tmp_path / f"{n}.npy")).to("cuda").double() for n in ("dq", "dk", "dv")]
    scale = 1 / math.sqrt(d)
    numpy = [t.double().cpu().numpy() for t in (q, k, v, do)]
    want = [torch.from_numpy(g).to("cuda") for g in reference.attention_varlen_grad(
        *numpy, cu_q, cu_k, seqused_k=used, causal=True, scale=scale)]
    yardstick = _sdpa_grads(q, k, v, do, cu_q, cu_k, used, True, (-1, -1), scale)
    for name, g, ref, sdpa in zip(("dq", "dk", "dv"), got, want, yardstick):
        assert not g.isnan().any(), f"NaN in {name}"
        err = (g - ref).abs().max().item()
        bound = 2 * (sdpa.double() - ref).abs().max().item() + 1e-4
        assert err <= bound, f"{name}: error {err:.3g} exceeds {bound:.3g}"
    assert (got[0][int(cu_q[-1]):] == 0).all() and (got[1][int(cu_k[-1]):] == 0).all()
