"""`import fa3` on the H200: fa3.attention on torch CUDA tensors, forward and
backward (torch autograd through torch.ops.fa3.attention_fwd/bwd), against a
float64 reference with PyTorch SDPA's own error in the same dtype as the
yardstick (as test_attention_gpu.py and test_attention_grad_gpu.py):
  max |fa3 - ref| <= 2 * max |SDPA - ref| + 1e-5 (O), + 1e-4 (gradients),
torch.compile without graph breaks, strided inputs, streams, and the
argument errors of the torch path."""

import math

import pytest
import torch
import torch.nn.functional as F

import fa3
from fa3 import reference


def _ref(q, k, v, causal, window=(-1, -1), softcap=0.0, scale=None):
    """float64 O and the gradients of sum(O * do) by autograd (GQA by
    repeating K/V; rows without keys give 0)."""
    group = q.shape[2] // k.shape[2]
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    kk, vv = k64.repeat_interleave(group, 2), v64.repeat_interleave(group, 2)
    scale = scale or 1 / math.sqrt(q.shape[-1])
    s = torch.einsum("bqhd,bkhd->bhqk", q64, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    mask = torch.from_numpy(reference.visible(q.shape[1], k.shape[1], causal, window)).to(q.device)
    s = s.masked_fill(~mask, float("-inf"))
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    p = e / torch.where(l > 0, l, torch.ones_like(l))
    o = torch.einsum("bhqk,bkhd->bqhd", p, vv)
    return o, q64, k64, v64


def _sdpa(q, k, v, causal):
    group = q.shape[2] // k.shape[2]
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    kk, vv = leaves[1].repeat_interleave(group, 2), leaves[2].repeat_interleave(group, 2)
    mask = None
    if causal and q.shape[1] != k.shape[1]:
        mask = torch.from_numpy(reference.visible(q.shape[1], k.shape[1], True)).to(q.device)
    o = F.scaled_dot_product_attention(leaves[0].transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2),
                                       attn_mask=mask, is_causal=causal and mask is None).transpose(1, 2)
    return o, leaves


CASES = [  # b, sq, sk, hq, hkv, d, dtype, causal
    (2, 1000, 1000, 8, 2, 128, torch.bfloat16, True),
    (1, 17, 1000, 4, 4, 64, torch.float16, False),
    (1, 1000, 300, 8, 1, 256, torch.bfloat16, True),
    (3, 128, 128, 16, 2, 64, torch.bfloat16, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-sq{c[1]}-sk{c[2]}-h{c[3]}x{c[4]}-d{c[5]}-"
                         f"{str(c[6])[6:]}-{'causal' if c[7] else 'full'}")
def test_forward_and_backward_match_reference(case):
    b, sq, sk, hq, hkv, d, dtype, causal = case
    torch.manual_seed(hash(case) % 2**31)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    do = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    out, lse = fa3.attention(q, k, v, causal=causal, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.requires_grad  # test_shard_merge_gpu.py
    out.backward(do)

    ref_o, q64, k64, v64 = _ref(q, k, v, causal)
    ref_grads = torch.autograd.grad(ref_o, (q64, k64, v64), do.double())
    s_o, leaves = _sdpa(q, k, v, causal)
    s_grads = torch.autograd.grad(s_o, leaves, do)
    seen = torch.isfinite(lse)
    o_err = (out.double() - ref_o).abs().max().item()
    o_sdpa = (s_o.double() - ref_o).abs().max().item()
    line = [f"O {o_err:.2e} (SDPA {o_sdpa:.2e})"]
    assert seen.all() or causal
    assert o_err <= 2 * o_sdpa + 1e-5, line
    for name, g, r, s in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref_grads, s_grads):
        assert g is not None and g.shape == r.shape and g.dtype == dtype
        err = (g.double() - r).abs().max().item()
        sd = (s.double() - r).abs().max().item()
        line.append(f"{name} {err:.2e} (SDPA {sd:.2e})")
        assert err <= 2 * sd + 1e-4, line
    print(case, ", ".join(line))


@pytest.mark.parametrize("sq, sk, hq, hkv, causal, pack_gqa", [
    (1, 1000, 32, 8, False, None),  # decode: fa3's rule packs
    (1, 4096, 32, 8, True, True),
    (17, 1000, 16, 2, True, True),
    (300, 300, 8, 2, True, True),
])
def test_pack_gqa_forward_and_backward_match_reference(sq, sk, hq, hkv, causal, pack_gqa):
    """PackGQA through fa3.attention: the packed forward's O against the
    reference, and the backward (which reads the packed forward's O and LSE)
    against autograd's, with SDPA's error as the yardstick."""
    torch.manual_seed(sq * 7 + sk)
    b, d, dtype = 3, 128, torch.bfloat16
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    do = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    out = fa3.attention(q, k, v, causal=causal, pack_gqa=pack_gqa)
    # The call's cached plan (the same key fa3.attention used) packs.
    assert fa3._torch._plan(q, k, v, causal, None, (-1, -1), 0.0, pack_gqa).spec.pack_gqa
    out.backward(do)
    ref_o, q64, k64, v64 = _ref(q, k, v, causal)
    s_o, leaves = _sdpa(q, k, v, causal)
    o_err = (out.double() - ref_o).abs().max().item()
    o_sdpa = (s_o.double() - ref_o).abs().max().item()
    assert o_err <= 2 * o_sdpa + 1e-5, f"O {o_err:.2e} (SDPA {o_sdpa:.2e})"
    ref_grads = torch.autograd.grad(ref_o, (q64, k64, v64), do.double())
    s_grads = torch.autograd.grad(s_o, leaves, do)
    for name, g, r, sg in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref_grads, s_grads):
        err, sd = (g.double() - r).abs().max().item(), (sg.double() - r).abs().max().item()
        assert err <= 2 * sd + 1e-4, f"{name} {err:.2e} (SDPA {sd:.2e})"
    # The unpacked kernel gives the same attention (every row's arithmetic
    # is the same; only the tiles' row sets differ).
    with torch.no_grad():
        unpacked = fa3.attention(q, k, v, causal=causal, pack_gqa=False)
    assert (unpacked.double() - out.double()).abs().max().item() <= 2 * o_sdpa + 1e-5


def test_pack_gqa_under_torch_compile():
    def step(q, k, v):
        return fa3.attention(q, k, v, pack_gqa=True)

    torch.manual_seed(3)
    q = torch.randn(4, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(4, 777, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    explain = torch._dynamo.explain(step)(q, k, v)
    assert explain.graph_break_count == 0, explain.break_reasons
    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(q, k, v), step(q, k, v))
    with pytest.raises(ValueError, match="pack_gqa=True: the group of 24 / 8 = 3 query heads must divide 64"):
        fa3.attention(torch.randn(1, 1, 24, 128, device="cuda", dtype=torch.bfloat16), k[:1], v[:1],
                      pack_gqa=True)


@pytest.mark.parametrize("sq, sk, hq, hkv, d, causal, window, softcap", [
    (1000, 1000, 8, 2, 64, True, (-1, -1), 0.0),  # d64: 128-row steps, each warpgroup its own dQ rows
    (1000, 1000, 8, 2, 64, True, (-1, -1), 20.0),  # d64 softcap: 64-row steps, the warpgroups add in turn
    (777, 1500, 4, 4, 128, False, (-1, -1), 0.0),
    (1500, 1500, 8, 2, 128, True, (200, 0), 0.0),  # a left window: turns start past key block 0
    (300, 300, 4, 1, 256, True, (-1, -1), 0.0),
])
def test_deterministic_backward_is_bit_identical(sq, sk, hq, hkv, d, causal, window, softcap):
    """deterministic=True: two backwards of the same inputs give the same
    bits (dQ added in key-block order), and the gradients match the
    reference as the default backward's do."""
    torch.manual_seed(sq + d)
    b, dtype = 2, torch.bfloat16
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    do = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    runs = []
    for _ in range(3):
        out = fa3.attention(q, k, v, causal=causal, window_size=window, softcap=softcap, deterministic=True)
        runs.append(torch.autograd.grad(out, (q, k, v), do))
    for again in runs[1:]:
        for name, g0, g1 in zip(("dq", "dk", "dv"), runs[0], again):
            assert torch.equal(g0, g1), f"{name} differs between two deterministic backwards"
    ref_o, q64, k64, v64 = _ref(q, k, v, causal, window=window, softcap=softcap)
    refs = torch.autograd.grad(ref_o, (q64, k64, v64), do.double())
    default = torch.autograd.grad(fa3.attention(q, k, v, causal=causal, window_size=window, softcap=softcap),
                                  (q, k, v), do)
    for name, g, dflt, r in zip(("dq", "dk", "dv"), runs[0], default, refs):
        err, err_default = (g.double() - r).abs().max().item(), (dflt.double() - r).abs().max().item()
        assert err <= 1.5 * err_default + 1e-4, f"{name}: deterministic {err:.3g} vs default {err_default:.3g}"
    with pytest.raises(TypeError, match="deterministic must be a bool, got int"):
        fa3.attention(q, k, v, deterministic=1)


def test_softcap_window_and_scale_reach_the_kernels():
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 300, 4, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    out = fa3.attention(q, k, v, softmax_scale=0.1, window_size=(32, 16), softcap=3.0)
    ref_o, q64, k64, v64 = _ref(q, k, v, False, window=(32, 16), softcap=3.0, scale=0.1)
    # No SDPA backend has softcap: the bound is bf16's rounding of O and P
    # (a few 2^-8 of max|V|), far below a lost window or softcap.
    assert (out.double() - ref_o).abs().max().item() <= 4 * 2**-8 * v.abs().max().item()
    do = torch.randn_like(out)
    out.backward(do)
    refs = torch.autograd.grad(ref_o, (q64, k64, v64), do.double())
    for g, r in zip((q.grad, k.grad, v.grad), refs):
        assert (g.double() - r).abs().max().item() <= 8 * 2**-8 * (1 + r.abs().max().item())


def test_torch_compile_has_no_graph_break():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(512, 3 * 512, dtype=torch.bfloat16, device="cuda")

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.proj(x).view(b, s, 3, 4, 128).unbind(2)
            return fa3.attention(q, k, v, causal=True).reshape(b, s, 512)

    torch.manual_seed(0)
    block = Block()
    x = torch.randn(2, 256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    explain = torch._dynamo.explain(block)(x)
    assert explain.graph_break_count == 0, explain.break_reasons
    compiled = torch.compile(block, fullgraph=True)
    y = compiled(x)
    y.sum().backward()
    eager_x = x.detach().clone().requires_grad_()
    y_eager = block(eager_x)
    y_eager.sum().backward()
    # The same attention kernels; Inductor may fuse the projection
    # differently, hence bf16-level tolerances.
    assert torch.allclose(y, y_eager, atol=2e-2, rtol=2e-2)
    assert torch.allclose(x.grad, eager_x.grad, atol=5e-2, rtol=5e-2)


def test_strided_inputs_and_side_stream():
    torch.manual_seed(2)
    qkv = torch.randn(2, 200, 3, 8, 64, device="cuda", dtype=torch.float16)
    q, k, v = qkv.unbind(2)  # strided views, last dim contiguous
    assert not q.is_contiguous()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = fa3.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    expected = fa3.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(out, expected)


def test_torch_argument_errors():
    q = torch.zeros(1, 8, 4, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q is on cpu; fa3 runs torch tensors on CUDA"):
        fa3.attention(q.cpu(), q.cpu(), q.cpu())
    with pytest.raises(TypeError, match="q has dtype torch.float32"):
        fa3.attention(q.float(), q.float(), q.float())
    with pytest.raises(TypeError, match="k has dtype torch.float16 but q has torch.bfloat16"):
        fa3.attention(q, q.half(), q)
    with pytest.raises(ValueError, match=r"q/k head dim must be a multiple of 8 in \[8, 256\], got 36"):
        fa3.attention(q[..., :36], q[..., :36], q[..., :36])
    wide = torch.zeros(1, 8, 4, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q's last dim must be contiguous"):
        fa3.attention(wide[..., ::2], q, q)
    with pytest.raises(TypeError, match="q, k and v must all be torch tensors or all numpy arrays"):
        fa3.attention(q, q.cpu().float().numpy(), q)


@pytest.mark.parametrize("sq, sk", [(0, 7), (9, 0), (0, 0)])
def test_empty_sequences(sq, sk):
    """No query rows or no keys: nothing to compute, but every output and
    gradient element that exists is defined: O = 0 and LSE = -inf for rows
    without keys, dQ = 0, and dK = dV = 0 for keys no query sees."""
    q = torch.randn(2, sq, 4, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, sk, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, sk, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out, lse = fa3.attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == (2, sq, 4, 128) and lse.shape == (2, 4, sq)
    assert (out == 0).all() and torch.isneginf(lse).all()
    out.backward(torch.randn_like(out))
    for g, x in ((q.grad, q), (k.grad, k), (v.grad, v)):
        assert g is not None and g.shape == x.shape and (g == 0).all()
