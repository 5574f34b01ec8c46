"""fa3.attention_varlen and fa3.attention_with_kvcache on torch CPU tensors
(the custom ops of fa3._inference_torch): autograd through the output and
the LSE against float64 gradients, torch.compile(fullgraph=True) equal to
eager, the KV cache written in place, and the errors for what is not
supported (devices other than the CPU and CUDA, mixed kinds, wrong index
dtypes), and the host-side pieces of the CUDA varlen path that run without
a GPU.

Bounds as in test_inference_numpy.py: float32 gradients within 1e-4 of
their scale; bf16 outputs within 8·u·(1 + max|V|)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fa3  # noqa: E402
from fa3 import reference  # noqa: E402


def _offsets(lengths):
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)


def test_varlen_autograd_matches_reference():
    torch.manual_seed(0)
    lq, lk = [5, 0, 1, 70], [9, 3, 0, 130]
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    q = torch.randn(int(cu_q[-1]), 4, 32, requires_grad=True)
    k = torch.randn(int(cu_k[-1]), 2, 32, requires_grad=True)
    v = torch.randn(int(cu_k[-1]), 2, 32, requires_grad=True)
    do, dlse = torch.randn(q.shape), torch.randn(4, q.shape[0])
    out, lse = fa3.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True, return_lse=True)
    ((out * do).sum() + (torch.where(lse.isfinite(), lse, 0) * dlse).sum()).backward()
    args = (q.detach().numpy(), k.detach().numpy(), v.detach().numpy())
    ref_o, ref_lse = reference.attention_varlen(*args, cu_q.numpy(), cu_k.numpy(), causal=True)
    assert np.abs(out.detach().numpy() - ref_o).max() <= 1e-5 * (1 + np.abs(args[2]).max())
    ref = reference.attention_varlen_grad(*args, do.numpy(), cu_q.numpy(), cu_k.numpy(), dlse=dlse.numpy(),
                                          causal=True)
    for name, got, want in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref):
        err = np.abs(got.numpy() - want).max()
        assert err <= 1e-4 * (1 + np.abs(want).max()), f"{name} error {err:.3g}"


def test_varlen_autograd_with_seqused_k():
    """seqused_k through the torch op: the forward and the autograd backward
    use each sequence's first seqused_k[b] keys (the float64 reference's
    gradients), the unused keys get exactly 0, and torch.compile traces it."""
    torch.manual_seed(2)
    lq, lk = [6, 33, 1], [10, 40, 4]
    cu_q, cu_k = _offsets(lq), _offsets(lk)
    used = torch.tensor([4, 40, 0], dtype=torch.int32)
    q = torch.randn(int(cu_q[-1]), 4, 32, requires_grad=True)
    k = torch.randn(int(cu_k[-1]), 2, 32, requires_grad=True)
    v = torch.randn(int(cu_k[-1]), 2, 32, requires_grad=True)
    do = torch.randn(q.shape)
    out = fa3.attention_varlen(q, k, v, cu_q, cu_k, max(lq), 40, causal=True, seqused_k=used)
    (out * do).sum().backward()
    args = (q.detach().numpy(), k.detach().numpy(), v.detach().numpy())
    ref_o, _ = reference.attention_varlen(*args, cu_q.numpy(), cu_k.numpy(), seqused_k=used.numpy(), causal=True)
    assert np.abs(out.detach().numpy() - ref_o).max() <= 1e-5 * (1 + np.abs(args[2]).max())
    ref = reference.attention_varlen_grad(*args, do.numpy(), cu_q.numpy(), cu_k.numpy(), seqused_k=used.numpy(),
                                          causal=True)
    for name, got, want in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref):
        err = np.abs(got.numpy() - want).max()
        assert err <= 1e-4 * (1 + np.abs(want).max()), f"{name} error {err:.3g}"
    assert (k.grad[4:10] == 0).all() and (v.grad[50:54] == 0).all()
    compiled = torch.compile(lambda *a: fa3.attention_varlen(*a, max(lq), 40, causal=True, seqused_k=used),
                             fullgraph=True)
    assert torch.equal(compiled(q.detach(), k.detach(), v.detach(), cu_q, cu_k), out.detach())


def test_varlen_bf16_and_torch_compile():
    torch.manual_seed(1)
    cu_q, cu_k = _offsets([17, 64]), _offsets([20, 100])
    q = torch.randn(81, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(120, 2, 64, dtype=torch.bfloat16)
    v = torch.randn(120, 2, 64, dtype=torch.bfloat16)
    eager = fa3.attention_varlen(q, k, v, cu_q, cu_k, 64, 100, causal=True)
    assert eager.dtype == torch.bfloat16 and eager.shape == (81, 4, 64)
    ref_o, _ = reference.attention_varlen(q.float().numpy(), k.float().numpy(), v.float().numpy(), cu_q.numpy(),
                                          cu_k.numpy(), causal=True)
    assert np.abs(eager.float().numpy() - ref_o).max() <= 8 * 2.0**-8 * (1 + v.float().abs().max().item())
    compiled = torch.compile(lambda q, k, v: fa3.attention_varlen(q, k, v, cu_q, cu_k, 64, 100, causal=True),
                             fullgraph=True)
    assert torch.equal(compiled(q, k, v), eager)


def test_kvcache_torch_updates_the_cache_in_place():
    torch.manual_seed(2)
    batch, hq, hkv, d = 2, 8, 2, 64
    k_cache = torch.randn(6, 16, hkv, d)
    v_cache = torch.randn(6, 16, hkv, d)
    table = torch.tensor([[4, 0, 2], [5, 1, 3]], dtype=torch.int32)
    lens = torch.tensor([3, 30], dtype=torch.int32)
    q = torch.randn(batch, 1, hq, d)
    k, v = torch.randn(batch, 1, hkv, d), torch.randn(batch, 1, hkv, d)
    before = k_cache.clone()
    out = fa3.attention_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens, page_table=table,
                                     causal=True)
    for b in range(batch):
        pos = int(lens[b])
        assert torch.equal(k_cache[table[b, pos // 16], pos % 16], k[b, 0])
    assert int((k_cache != before).any(dim=(2, 3)).sum()) == batch
    ref_o, _ = reference.attention_kvcache(q.numpy(), k_cache.numpy(), v_cache.numpy(), (lens + 1).numpy(),
                                           table.numpy(), causal=True)
    assert np.abs(out.numpy() - ref_o).max() <= 1e-5 * (1 + v_cache.abs().max().item())


def test_cuda_paged_append_indexing_on_cpu_tensors():
    """The CUDA path's paged append (fa3._kvcache_cuda, torch indexing on
    any device) run on CPU tensors: row i of batch b lands in slot p %
    page_size of page page_table[b, p // page_size], p = cache_seqlens[b] +
    i; lengths past the table and used pages outside the cache are refused
    before anything is written, unused slots are not checked."""
    from fa3 import _kvcache_cuda

    torch.manual_seed(4)
    page_size, max_pages, batch, n, hkv, d = 16, 4, 3, 3, 2, 8
    num_pages = batch * max_pages + 2
    k_cache = torch.randn(num_pages, page_size, hkv, d)
    v_cache = torch.randn_like(k_cache)
    table = torch.randperm(num_pages)[:batch * max_pages].view(batch, max_pages).to(torch.int32)
    table[0, 3] = -7  # past batch 0's pages after the append: never read
    lens = torch.tensor([0, 20, 61], dtype=torch.int32)
    k, v = torch.randn(batch, n, hkv, d), torch.randn(batch, n, hkv, d)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    for b, start in enumerate(lens.tolist()):
        for i in range(n):
            p = start + i
            want_k[table[b, p // page_size], p % page_size] = k[b, i]
            want_v[table[b, p // page_size], p % page_size] = v[b, i]
    _kvcache_cuda._append_paged(k_cache, v_cache, k, v, lens, table)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    with pytest.raises(ValueError, match=r"cache_seqlens \+ 3 new rows must lie in \[0, 64\] \(the cache's capacity = "
                                         r"max_pages \* page_size = 4 \* 16\), got a range \[0, 65\]"):
        _kvcache_cuda._append_paged(k_cache, v_cache, k, v, torch.tensor([0, 20, 62], dtype=torch.int32), table)
    bad = table.clone()
    bad[2, 3] = num_pages
    with pytest.raises(ValueError, match=rf"page_table\[2, 3\] = {num_pages} is not a page of the cache"):
        _kvcache_cuda._append_paged(k_cache, v_cache, k, v, lens, bad)
    assert torch.equal(k_cache, want_k), "a refused append wrote into the cache"
    schema = str(torch.ops.fa3.attention_kvcache_cuda.default._schema)
    assert "Tensor? page_table" in schema and "Int num_splits" in schema, schema


def test_cuda_split_choice_on_the_cpu(monkeypatch):
    """The CUDA path's num_splits=0 (fa3._kvcache_cuda.choose_num_splits)
    with the SM count of an H100/H200 (132) standing in for the device's:
    FlashAttention-3's rule over the kernel's tiles and the cache's key
    blocks, rounded up to a power of two, at most 64."""
    from fa3 import _fa3, _kvcache_cuda
    from fa3._spec import AttentionSpec

    monkeypatch.setattr(_kvcache_cuda, "_multiprocessors", lambda index: 132)
    spec = AttentionSpec("bf16", 32, 8, 128, 128)
    for batch, pack, seq_q, rows in [(1, True, 1, 32768), (1, False, 1, 32768), (4, True, 1, 8192),
                                     (32, True, 1, 32768), (2, True, 7, 300), (1, True, 1, 512)]:
        got = _kvcache_cuda.choose_num_splits(spec, pack, batch, seq_q, rows, 0)
        fields = _kvcache_cuda._schedule_fields(spec, pack, seq_q, rows)
        packed = 4 if pack else 1
        tiles = batch * (32 // packed) * -(-seq_q // (fields["block_m"] // packed))
        n = _fa3.select_num_splits(tiles, 132, -(-rows // fields["block_n"]), 64)
        want = 1
        while want < n:
            want *= 2
        assert got == want and got in (1, 2, 4, 8, 16, 32, 64), (batch, pack, seq_q, rows, got, n)
    # The decode shape of docs/Design.md section 10: 14 splits, rounded to 16.
    assert _kvcache_cuda.choose_num_splits(spec, True, 1, 1, 32768, 0) == 16
    assert _kvcache_cuda.choose_num_splits(spec, True, 32, 1, 32768, 0) == 1
    # A split kernel's schedule is never persistent.
    assert not _kvcache_cuda._schedule_fields(spec, True, 1, 512, num_splits=4)["persistent"]


def test_cuda_kvcache_fake_with_splits():
    """The op's fake (torch.compile's shape function) takes num_splits and
    gives the shapes of one split."""
    from fa3 import _kvcache_cuda  # noqa: F401 (registers the op)

    q = torch.empty(2, 3, 8, 64, device="meta", dtype=torch.bfloat16)
    kc = torch.empty(2, 100, 2, 64, device="meta", dtype=torch.bfloat16)
    lens = torch.empty(2, device="meta", dtype=torch.int32)
    out, lse = torch.ops.fa3.attention_kvcache_cuda(q, kc, kc.clone(), None, None, lens, None, True, 0.125, -1, -1,
                                                    0.0, None, 4)
    assert out.shape == (2, 3, 8, 64) and lse.shape == (2, 8, 3) and lse.dtype == torch.float32


def test_torch_errors():
    q = torch.zeros(4, 2, 32)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(TypeError, match="cu_seqlens_q must be an int32 tensor"):
        fa3.attention_varlen(q, q, q, cu.long(), cu, 4, 4)
    with pytest.raises(TypeError, match="k must be a torch.Tensor like the others"):
        fa3.attention_varlen(q, q.numpy(), q, cu, cu, 4, 4)
    with pytest.raises(TypeError, match="k has dtype torch.float16 but q has torch.float32"):
        fa3.attention_varlen(q, q.half(), q, cu, cu, 4, 4)
    with pytest.raises(ValueError, match="max_seqlen_q = 3 is less than the longest sequence"):
        fa3.attention_varlen(q, q, q, cu, cu, 3, 4)
    # A device that is neither the CPU nor CUDA is refused.
    m = q.to("meta")
    with pytest.raises(ValueError, match="q is on meta; fa3's varlen attention and attention_with_kvcache take "
                                         "all their tensors on q's device"):
        fa3.attention_varlen(m, m, m, cu, cu, 4, 4)


def test_cuda_varlen_fake_and_schema():
    """The CUDA varlen op's fake (torch.compile's shape function): O like q,
    LSE (num_heads, total_q) float32; seqused_k optional."""
    from fa3 import _varlen_cuda  # noqa: F401 (registers the op)

    q = torch.empty(11, 8, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(20, 2, 64, device="meta", dtype=torch.bfloat16)
    cu = torch.empty(3, device="meta", dtype=torch.int32)
    for used in (None, torch.empty(2, device="meta", dtype=torch.int32)):
        out, lse = torch.ops.fa3.attention_varlen_cuda(q, k, k, cu, cu, used, 7, 9, True, 0.125, -1, -1, 0.0)
        assert out.shape == (11, 8, 64) and out.dtype == torch.bfloat16
        assert lse.shape == (8, 11) and lse.dtype == torch.float32
    schema = str(torch.ops.fa3.attention_varlen_cuda.default._schema)
    assert "Tensor? seqused_k" in schema and "max_seqlen_q" in schema


def test_cuda_varlen_offset_checks_on_cpu_tensors():
    """The CUDA path's value checks (fa3._varlen_cuda.check_offsets: one
    host copy of the offsets and seqused_k, the CPU path's checks) on CPU
    int32 tensors: the longest query count, which sizes the grid, or the
    CPU path's ValueErrors."""
    from fa3 import _varlen_cuda

    cu_q, cu_k = _offsets([3, 0, 17]), _offsets([5, 2, 1])
    used = torch.tensor([4, 0, 1], dtype=torch.int32)
    assert _varlen_cuda.check_offsets(cu_q, cu_k, None, 25, 8, 17, 5) == 17
    assert _varlen_cuda.check_offsets(cu_q, cu_k, used, 20, 8, 100, 4) == 17
    assert _varlen_cuda.check_offsets(_offsets([]), _offsets([]), None, 4, 0, 0, 0) == 0
    with pytest.raises(ValueError, match=r"max_seqlen_q = 16 is less than the longest sequence \(17\)"):
        _varlen_cuda.check_offsets(cu_q, cu_k, None, 20, 8, 16, 5)
    with pytest.raises(ValueError, match=r"max_seqlen_k = 3 is less than the longest sequence \(4\)"):
        _varlen_cuda.check_offsets(cu_q, cu_k, used, 20, 8, 17, 3)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[-1\] = 20 exceeds the 19 packed rows of q"):
        _varlen_cuda.check_offsets(cu_q, cu_k, None, 19, 8, 17, 5)
    with pytest.raises(ValueError, match=r"cu_seqlens_k must be non-decreasing, but cu_seqlens_k\[2\] = 4 < "):
        _varlen_cuda.check_offsets(cu_q, torch.tensor([0, 5, 4, 8], dtype=torch.int32), None, 20, 8, 17, 5)
    with pytest.raises(ValueError, match=r"seqused_k\[0\] = 6 must lie in \[0, 5\]"):
        _varlen_cuda.check_offsets(cu_q, cu_k, torch.tensor([6, 0, 1], dtype=torch.int32), 20, 8, 17, 9)


def test_cuda_varlen_checks_on_fake_cuda_tensors():
    """fa3.attention_varlen's CUDA path up to its op, on fake CUDA tensors
    (FakeTensorMode needs no GPU; the op runs its fake): the dispatch by
    q's device, every check of types, shapes and devices, autograd up to
    the backward op, and the outputs' shapes. The offsets' values are checked in
    the op's real implementation (test above and the GPU tests)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(10, 8, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(12, 2, 64, device="cuda", dtype=torch.bfloat16)
        cu_q = torch.empty(3, device="cuda", dtype=torch.int32)
        cu_k = torch.empty(3, device="cuda", dtype=torch.int32)

        def call(**changes):
            args = dict(q=q, k=k, v=k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=6, max_seqlen_k=6,
                        return_lse=True)
            args.update(changes)
            return fa3.attention_varlen(**args)

        out, lse = call()
        assert out.shape == (10, 8, 64) and out.device == q.device and out.dtype == torch.bfloat16
        assert lse.shape == (8, 10) and lse.dtype == torch.float32
        out, _ = call(seqused_k=torch.empty(2, device="cuda", dtype=torch.int32), num_splits=0, pack_gqa=False)
        assert out.shape == (10, 8, 64)
        assert call(deterministic=True)[0].shape == (10, 8, 64)
        # PackGQA explicitly, and G = 3 unpacked by default (3 does not divide 64).
        assert call(pack_gqa=True)[0].shape == (10, 8, 64)
        assert call(q=q.new_empty(10, 6, 64))[0].shape == (10, 6, 64)
        # 40 and 96 run zero-padded to the 64 and 128 kernels, sliced back.
        for d in (40, 96, 128, 192, 256):
            assert call(q=q.new_empty(10, 8, d), k=k.new_empty(12, 2, d), v=k.new_empty(12, 2, d))[0].shape[-1] == d
        errors = [
            (TypeError, "cu_seqlens_q must be an int32 tensor, got torch.int64", dict(cu_seqlens_q=cu_q.long())),
            (ValueError, "cu_seqlens_k is on cpu but q is on cuda:0",
             dict(cu_seqlens_k=torch.empty(3, dtype=torch.int32))),
            (ValueError, r"cu_seqlens_k must have shape \(3,\)", dict(cu_seqlens_k=cu_k[:2])),
            (ValueError, r"cu_seqlens_q must have batch \+ 1 >= 1 entries", dict(cu_seqlens_q=cu_q[:0],
                                                                               cu_seqlens_k=cu_k[:0])),
            (ValueError, r"seqused_k must have shape \(2,\)",
             dict(seqused_k=torch.empty(3, device="cuda", dtype=torch.int32))),
            (TypeError, "seqused_k must be an int32 tensor", dict(seqused_k=torch.empty(2, device="cuda"))),
            (TypeError, "k has dtype torch.float16 but q has torch.bfloat16", dict(k=k.half(), v=k.half())),
            (TypeError, "fa3 on CUDA takes torch.bfloat16 or torch.float16",
             dict(q=q.float(), k=k.float(), v=k.float())),
            (ValueError, "v must be a CUDA tensor like q", dict(v=torch.empty(12, 2, 64, dtype=torch.bfloat16))),
            (ValueError, r"multiples of 8 up to 256 .* got head_dim 100",
             dict(q=q.new_empty(10, 8, 100), k=k.new_empty(12, 2, 100), v=k.new_empty(12, 2, 100))),
            (ValueError, r"with k's and v's equal to q's, got head_dim 64 \(k and v: 128\)",
             dict(k=k.new_empty(12, 2, 128), v=k.new_empty(12, 2, 128))),
            (ValueError, "k and v must have one shape", dict(v=k.new_empty(11, 2, 64))),
            (ValueError, "q's 8 heads must be a positive multiple of k/v's 3 heads",
             dict(k=k.new_empty(12, 3, 64), v=k.new_empty(12, 3, 64))),
            (ValueError, r"q must have 3 dims \(total_q, num_heads, head_dim\)", dict(q=q[None])),
            (ValueError, "q's last dim must be contiguous", dict(q=q.new_empty(10, 8, 128)[..., ::2])),
            (ValueError, r"num_splits 0 or 1\), got num_splits = 2", dict(num_splits=2)),
            (ValueError, "pack_gqa=True needs the 3 query heads per key/value head to divide 64",
             dict(q=q.new_empty(10, 6, 64), pack_gqa=True)),
            (TypeError, "max_seqlen_q must be an int", dict(max_seqlen_q=6.0)),
            (TypeError, "deterministic must be a bool, got int", dict(deterministic=1)),
        ]
        for error, message, changes in errors:
            with pytest.raises(error, match=message):
                call(**changes)
        # Autograd records the op (its backward needs a GPU to run: the
        # engine does not run on fake CUDA tensors); the backward op's fake
        # gives gradients shaped like q, k and v.
        for d in (64, 96):
            qg, kg, vg = (t.clone().requires_grad_() for t in (q.new_empty(10, 8, d), k.new_empty(12, 2, d),
                                                                 k.new_empty(12, 2, d)))
            out, lse = call(q=qg, k=kg, v=vg)
            assert out.requires_grad and lse.requires_grad and out.grad_fn is not None
        dq, dk, dv = torch.ops.fa3.attention_varlen_cuda_bwd(q, lse.new_empty(8, 10), q, k, k, q,
                                                             lse.new_empty(8, 10), cu_q, cu_k, None, True, 0.125,
                                                             -1, -1, 0.0)
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape
        with torch.no_grad():
            assert not call(q=q.clone().requires_grad_())[0].requires_grad


def test_cuda_varlen_refuses_a_graph_capture(monkeypatch):
    """Inside a CUDA graph capture the CUDA varlen path cannot copy its
    offsets to the host: a clear RuntimeError (the capture state stubbed:
    no GPU here; test_varlen_gpu.py captures for real)."""
    from fa3 import _varlen_cuda

    class CudaOffsets:  # what the check reads of a CUDA offsets tensor
        is_cuda = True

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="which a CUDA graph capture forbids; call it outside the capture"):
        _varlen_cuda._refuse_capture(CudaOffsets())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    _varlen_cuda._refuse_capture(CudaOffsets())
