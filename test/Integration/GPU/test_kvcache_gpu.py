"""fa3.attention_with_kvcache on torch CUDA tensors (the Hopper kernel of
fa3.attention_kvcache: a contiguous or paged cache, lengths and page table
read on the device) against the float64 reference
(fa3.reference.attention_kvcache, which gathers a paged cache through its
page table itself), with PyTorch SDPA's own error in the same dtype as the
yardstick, as in test_attention_gpu.py: max |O - ref| <= 2 * max |SDPA -
ref| + 1e-5 over the rows that see a key (SDPA per batch on its first
cache_seqlens[b] keys, gathered through the page table when paged, the
bottom-right causal mask explicit). Rows that see no key must be O = 0,
LSE = -inf. Cache rows past a batch's length hold large finite garbage: a
kernel that reads them into the softmax fails. Paged tables are shuffled
(torch.randperm of the pages), their unused slots hold random valid page
ids, and the pages no batch uses hold garbage too. The reference tests of
one split pass num_splits=1; the split-KV tests (num_splits N > 1, and 0:
fa3's choice) hold the same bound, and more splits than key blocks (empty
splits) change nothing."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fa3
from fa3 import reference

CASES = [  # b, sq, cache_rows, hq, hkv, d, dtype, causal, window, lens, pack_gqa
    (4, 1, 4096, 32, 8, 128, torch.bfloat16, False, (-1, -1), [4096, 1, 0, 1777], None),
    (4, 1, 4096, 32, 8, 128, torch.bfloat16, True, (-1, -1), [4096, 1, 0, 1777], False),
    (3, 17, 1000, 16, 2, 64, torch.bfloat16, True, (-1, -1), [1000, 9, 517], True),
    (3, 17, 1000, 16, 2, 64, torch.bfloat16, True, (-1, -1), [1000, 9, 517], False),
    (2, 5, 300, 8, 8, 256, torch.float16, True, (32, 0), [300, 133], None),
    (2, 130, 700, 8, 1, 128, torch.bfloat16, True, (-1, -1), [700, 200], None),
]


def _keys(cache, b, n, page_table=None):
    """The first n rows of batch b's cache [1, n, H, D]: its rows, or
    gathered through its page table row."""
    if page_table is None:
        return cache[b:b + 1, :n]
    pos = torch.arange(n, device=cache.device)
    page_size = cache.shape[1]
    return cache[page_table[b, pos // page_size].long(), pos % page_size][None]


def _reference_and_sdpa(q, kc, vc, lens, causal, window, scale, page_table=None):
    """float64 reference (fa3.reference) and SDPA's output on the same
    rounded inputs, batch by batch."""
    ref_o, ref_lse = reference.attention_kvcache(q.double().cpu().numpy(), kc.double().cpu().numpy(),
                                                 vc.double().cpu().numpy(), lens,
                                                 page_table=None if page_table is None else page_table.cpu().numpy(),
                                                 causal=causal, window=window, scale=scale)
    sdpa = torch.zeros_like(q)
    group = q.shape[2] // kc.shape[2]
    for b, n in enumerate(lens):
        if n == 0:
            continue
        mask = torch.from_numpy(reference.visible(q.shape[1], n, causal, window)).to(q.device)
        kb = _keys(kc, b, n, page_table).repeat_interleave(group, 2)
        vb = _keys(vc, b, n, page_table).repeat_interleave(group, 2)
        sdpa[b:b + 1] = F.scaled_dot_product_attention(q[b:b + 1].transpose(1, 2), kb.transpose(1, 2),
                                                       vb.transpose(1, 2), attn_mask=mask,
                                                       scale=scale).transpose(1, 2).nan_to_num(0.0)
    return torch.from_numpy(ref_o).to(q.device), torch.from_numpy(ref_lse).to(q.device), sdpa


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-sq{c[1]}-cache{c[2]}-h{c[3]}x{c[4]}-d{c[5]}-"
                         f"{str(c[6])[6:]}-{'causal' if c[7] else 'full'}-win{c[8][0]}-pack{c[10]}")
def test_kvcache_matches_reference(case):
    b, sq, rows, hq, hkv, d, dtype, causal, window, lens, pack = case
    torch.manual_seed(sum(lens) + sq)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    kc = torch.randn(b, rows, hkv, d, device="cuda", dtype=dtype)
    vc = torch.randn(b, rows, hkv, d, device="cuda", dtype=dtype)
    for i, n in enumerate(lens):  # garbage past each length
        kc[i, n:] = 300.0
        vc[i, n:] = -3000.0
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = fa3.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=causal, window_size=window,
                                          return_lse=True, pack_gqa=pack, num_splits=1)
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (b, hq, sq)
    scale = 1 / math.sqrt(d)
    ref_o, ref_lse, sdpa = _reference_and_sdpa(q, kc, vc, lens, causal, window, scale)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~seen), "rows with LSE = -inf differ from the reference"
    seen_rows = seen.permute(0, 2, 1)
    assert (out[~seen_rows] == 0).all(), "a row that sees no key is not 0"
    err = (out.double() - ref_o).abs()[seen_rows].max().item()
    sdpa_err = (sdpa.double() - ref_o).abs()[seen_rows].max().item()
    assert err <= 2 * sdpa_err + 1e-5, f"O error {err:.3g} > 2 x SDPA's {sdpa_err:.3g} + 1e-5"
    lse_err = (lse.double() - ref_lse).abs()[seen]
    assert (lse_err <= 1e-3 * (1 + ref_lse.abs()[seen])).all(), f"LSE error {lse_err.max().item():.3g}"
    print(f"O err {err:.3e} (SDPA {sdpa_err:.3e})")


def test_append_writes_the_cache_and_attends_to_it():
    """k/v rows go to positions cache_seqlens[b] + [0, n) of each batch (the
    rest of the cache untouched), and the attention sees them."""
    torch.manual_seed(5)
    b, n, rows, hq, hkv, d = 3, 3, 512, 16, 4, 128
    kc = torch.randn(b, rows, hkv, d, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    k_before, v_before = kc.clone(), vc.clone()
    q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = [0, 100, 509]
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = fa3.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, causal=True)
    want_k, want_v = k_before.clone(), v_before.clone()
    for i, p in enumerate(lens):
        want_k[i, p:p + n], want_v[i, p:p + n] = k[i], v[i]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
    total = [p + n for p in lens]
    ref_o, _, sdpa = _reference_and_sdpa(q, kc, vc, total, True, (-1, -1), 1 / math.sqrt(d))
    err = (out.double() - ref_o).abs().max().item()
    sdpa_err = (sdpa.double() - ref_o).abs().max().item()
    assert err <= 2 * sdpa_err + 1e-5, f"O error {err:.3g} > 2 x SDPA's {sdpa_err:.3g} + 1e-5"
    assert torch.equal(seqlens.cpu(), torch.tensor(lens, dtype=torch.int32)), "cache_seqlens was modified"


def test_decode_step_under_torch_compile():
    def step(q, kc, vc, k, v, lens):
        return fa3.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens)

    torch.manual_seed(7)
    kc = torch.zeros(2, 256, 2, 64, device="cuda", dtype=torch.float16)
    vc = torch.zeros_like(kc)
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(2, 1, 2, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    lens = torch.tensor([5, 200], dtype=torch.int32, device="cuda")
    explain = torch._dynamo.explain(step)(q, kc.clone(), vc.clone(), k, v, lens)
    assert explain.graph_break_count == 0, explain.break_reasons
    kc2, vc2 = kc.clone(), vc.clone()
    got = torch.compile(step, fullgraph=True)(q, kc2, vc2, k, v, lens)
    want = step(q, kc, vc, k, v, lens)
    assert torch.equal(got, want) and torch.equal(kc2, kc) and torch.equal(vc2, vc)


def test_cuda_argument_errors():
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
    kc = torch.zeros(2, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([3, 4], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"num_splits must be an int >= 0 \(0: fa3 chooses\), got -1"):
        fa3.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, num_splits=-1)
    with pytest.raises(TypeError, match="cache_seqlens must be an int32 tensor"):
        fa3.attention_with_kvcache(q, kc, kc, cache_seqlens=lens.long())
    with pytest.raises(ValueError, match="runs head dims"):
        q96, kc96 = q.new_zeros(2, 1, 8, 96), kc.new_zeros(2, 64, 2, 96)
        fa3.attention_with_kvcache(q96, kc96, kc96, cache_seqlens=lens)
    k = torch.zeros(2, 3, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"cache_seqlens \+ 3 new rows must lie in \[0, 64\]"):
        fa3.attention_with_kvcache(q, kc, kc.clone(), k, k, cache_seqlens=torch.tensor([3, 62], dtype=torch.int32,
                                                                                       device="cuda"))
    with pytest.raises(TypeError, match="k_cache has dtype torch.float16 but q has torch.bfloat16"):
        fa3.attention_with_kvcache(q, kc.half(), kc.half(), cache_seqlens=lens)


def test_fa3_run_runs_an_attention_kvcache_function(fa3_run, tmp_path):
    """The CUDA runtime behind fa3-run (HopperProgram) takes the i32 lengths
    as an input of the function."""
    import subprocess

    torch.manual_seed(11)
    b, sq, rows, hq, hkv, d = 3, 2, 300, 8, 2, 64
    e = "bf16"
    qt, ct = f"tensor<?x?x{hq}x{d}x{e}>", f"tensor<?x?x{hkv}x{d}x{e}>"
    lt, it = f"tensor<?x{hq}x?xf32>", "tensor<?xi32>"
    (tmp_path / "kv.mlir").write_text(
        f"func.func @kv(%q: {qt}, %kc: {ct}, %vc: {ct}, %lens: {it}) -> ({qt}, {lt}) {{\n"
        f"  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens {{causal}} : ({qt}, {ct}, {ct}, {it}) -> ({qt}, {lt})\n"
        f"  return %o, %lse : {qt}, {lt}\n}}\n")
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    kc, vc = (torch.randn(b, rows, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = [300, 1, 150]
    for name, x in (("q", q), ("kc", kc), ("vc", vc)):
        np.save(tmp_path / f"{name}.npy", x.float().cpu().numpy())
    np.save(tmp_path / "lens.npy", np.array(lens, np.int32))
    for name in ("o", "lse"):
        np.save(tmp_path / f"{name}.npy", np.full((1,), np.nan, np.float32))
    cmd = [fa3_run, str(tmp_path / "kv.mlir"), "--function=kv", "--device=cuda"]
    cmd += [f"--input=@{tmp_path / n}.npy" for n in ("q", "kc", "vc", "lens")]
    cmd += [f"--output=@{tmp_path / 'o'}.npy", f"--output=@{tmp_path / 'lse'}.npy"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = torch.from_numpy(np.load(tmp_path / "o.npy")).to("cuda").double()
    ref_o, ref_lse, sdpa = _reference_and_sdpa(q, kc, vc, lens, True, (-1, -1), 1 / math.sqrt(d))
    seen_rows = torch.isfinite(ref_lse).permute(0, 2, 1)
    err = (out - ref_o).abs()[seen_rows].max().item()
    sdpa_err = (sdpa.double() - ref_o).abs()[seen_rows].max().item()
    assert err <= 2 * sdpa_err + 1e-5, f"O error {err:.3g} > 2 x SDPA's {sdpa_err:.3g} + 1e-5"
    assert (out[~seen_rows] == 0).all()


def _assert_matches_reference(q, out, lse, kc, vc, lens, causal, window, page_table=None):
    """O and LSE against the float64 reference under the bound of the
    module docstring."""
    b, sq, hq, d = q.shape
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (b, hq, sq)
    ref_o, ref_lse, sdpa = _reference_and_sdpa(q, kc, vc, lens, causal, window, 1 / math.sqrt(d), page_table)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~seen), "rows with LSE = -inf differ from the reference"
    seen_rows = seen.permute(0, 2, 1)
    assert (out[~seen_rows] == 0).all(), "a row that sees no key is not 0"
    if not seen.any():
        return
    err = (out.double() - ref_o).abs()[seen_rows].max().item()
    sdpa_err = (sdpa.double() - ref_o).abs()[seen_rows].max().item()
    assert err <= 2 * sdpa_err + 1e-5, f"O error {err:.3g} > 2 x SDPA's {sdpa_err:.3g} + 1e-5"
    lse_err = (lse.double() - ref_lse).abs()[seen]
    assert (lse_err <= 1e-3 * (1 + ref_lse.abs()[seen])).all(), f"LSE error {lse_err.max().item():.3g}"
    print(f"O err {err:.3e} (SDPA {sdpa_err:.3e})")


def _paged_cache(lens, page_size, max_pages, hkv, d, dtype, garbage=True, spare_pages=3):
    """Random caches (num_pages, page_size, hkv, d) and a shuffled page
    table (batch, max_pages): the pages batches use are distinct
    (torch.randperm of all pages), the unused slots past a batch's pages
    hold random valid page ids (possibly another batch's pages). With
    `garbage`, the rows past each length in its last pages and the pages
    no batch uses hold large finite values."""
    b = len(lens)
    num_pages = b * max_pages + spare_pages
    kc = torch.randn(num_pages, page_size, hkv, d, device="cuda", dtype=dtype)
    vc = torch.randn_like(kc)
    table = torch.randperm(num_pages, device="cuda")[:b * max_pages].view(b, max_pages).to(torch.int32)
    used = torch.zeros(num_pages, dtype=torch.bool, device="cuda")
    for i, n in enumerate(lens):
        pages = -(-n // page_size)
        used[table[i, :pages].long()] = True
        if garbage:
            pos = torch.arange(n, pages * page_size, device="cuda")
            kc[table[i, pos // page_size].long(), pos % page_size] = 300.0
            vc[table[i, pos // page_size].long(), pos % page_size] = -3000.0
        table[i, pages:] = torch.randint(0, num_pages, (max_pages - pages,), device="cuda", dtype=torch.int32)
    if garbage:
        kc[~used] = 300.0
        vc[~used] = -3000.0
    return kc, vc, table.contiguous()


PAGED_CASES = [  # b, sq, page_size, max_pages, hq, hkv, d, dtype, causal, window, lens, pack_gqa
    (4, 1, 1, 300, 32, 8, 128, torch.bfloat16, False, (-1, -1), [300, 1, 0, 177], None),
    (4, 7, 1, 300, 32, 8, 128, torch.bfloat16, True, (-1, -1), [300, 1, 0, 177], True),
    (3, 7, 16, 40, 16, 2, 64, torch.bfloat16, True, (-1, -1), [640, 0, 333], True),
    (3, 7, 16, 40, 16, 2, 64, torch.bfloat16, True, (-1, -1), [640, 0, 333], False),
    (4, 1, 64, 20, 32, 8, 128, torch.bfloat16, True, (-1, -1), [1280, 1, 0, 700], None),
    (4, 1, 64, 20, 32, 8, 128, torch.bfloat16, False, (-1, -1), [1280, 1, 0, 700], False),
    (2, 7, 256, 6, 8, 8, 128, torch.float16, False, (-1, -1), [1536, 257], None),
    (2, 7, 256, 6, 8, 2, 64, torch.bfloat16, True, (-1, -1), [1, 1000], True),
    (3, 1, 48, 9, 16, 4, 64, torch.bfloat16, True, (-1, -1), [432, 1, 200], True),
    (3, 7, 48, 9, 16, 4, 128, torch.bfloat16, False, (-1, -1), [0, 47, 432], False),
    (3, 7, 48, 9, 16, 4, 64, torch.float16, False, (-1, -1), [49, 0, 431], None),
    (2, 7, 16, 32, 8, 2, 128, torch.bfloat16, True, (32, 0), [512, 100], None),
    (2, 1, 64, 8, 8, 8, 256, torch.float16, True, (-1, -1), [512, 65], None),
]


@pytest.mark.parametrize("case", PAGED_CASES, ids=lambda c: f"b{c[0]}-sq{c[1]}-page{c[2]}x{c[3]}-h{c[4]}x{c[5]}-"
                         f"d{c[6]}-{str(c[7])[6:]}-{'causal' if c[8] else 'full'}-win{c[9][0]}-pack{c[11]}")
def test_paged_kvcache_matches_reference(case):
    b, sq, page_size, max_pages, hq, hkv, d, dtype, causal, window, lens, pack = case
    torch.manual_seed(sum(lens) + sq + page_size)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    kc, vc, table = _paged_cache(lens, page_size, max_pages, hkv, d, dtype)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    table_before = table.clone()
    out, lse = fa3.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, page_table=table, causal=causal,
                                          window_size=window, return_lse=True, pack_gqa=pack, num_splits=1)
    _assert_matches_reference(q, out, lse, kc, vc, lens, causal, window, table)
    assert torch.equal(table, table_before), "the page table was modified"


def test_paged_default_lengths_are_the_whole_table():
    """cache_seqlens=None attends to max_pages * page_size keys of every
    batch."""
    torch.manual_seed(3)
    b, page_size, max_pages, hq, hkv, d = 2, 48, 5, 8, 2, 128
    lens = [page_size * max_pages] * b
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
    kc, vc, table = _paged_cache(lens, page_size, max_pages, hkv, d, torch.bfloat16)
    out, lse = fa3.attention_with_kvcache(q, kc, vc, page_table=table, return_lse=True)
    _assert_matches_reference(q, out, lse, kc, vc, lens, False, (-1, -1), table)


@pytest.mark.parametrize("page_size, max_pages, lens", [(16, 32, [0, 100, 509]), (48, 11, [0, 100, 525]),
                                                        (1, 64, [0, 30, 61]), (256, 2, [255, 0, 509])])
def test_paged_append_writes_through_the_page_table(page_size, max_pages, lens):
    """k/v row i of batch b goes to slot p % page_size of page
    page_table[b, p // page_size], p = cache_seqlens[b] + i (every other row
    of every page untouched), and the attention sees it."""
    torch.manual_seed(page_size)
    b, n, hq, hkv, d = 3, 3, 16, 4, 128
    # The pages of the rows after the append are distinct, the rest random.
    kc, vc, table = _paged_cache([p + n for p in lens], page_size, max_pages, hkv, d, torch.bfloat16,
                                 garbage=False)
    k_before, v_before = kc.clone(), vc.clone()
    q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = fa3.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, page_table=table, causal=True,
                                          return_lse=True)
    want_k, want_v = k_before.clone(), v_before.clone()
    for i, p in enumerate(lens):
        pos = torch.arange(p, p + n, device="cuda")
        pages = table[i, pos // page_size].long()
        want_k[pages, pos % page_size], want_v[pages, pos % page_size] = k[i], v[i]
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
    assert torch.equal(seqlens.cpu(), torch.tensor(lens, dtype=torch.int32)), "cache_seqlens was modified"
    _assert_matches_reference(q, out, lse, kc, vc, [p + n for p in lens], True, (-1, -1), table)


def test_paged_prefill_and_decode_steps():
    """A prefill and four decode steps appended through a shuffled paged
    cache (page size 16, from torch.zeros), each step against the
    reference."""
    torch.manual_seed(13)
    b, hq, hkv, d, page_size, max_pages, prefill = 2, 16, 4, 64, 16, 8, 21
    kc = torch.zeros(b * max_pages + 2, page_size, hkv, d, device="cuda", dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    table = torch.randperm(kc.shape[0], device="cuda")[:b * max_pages].view(b, max_pages).to(torch.int32)
    lens = torch.zeros(b, dtype=torch.int32, device="cuda")
    for step, n in enumerate([prefill, 1, 1, 1, 1]):
        q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out, lse = fa3.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, page_table=table, causal=True,
                                              return_lse=True)
        lens = lens + n
        _assert_matches_reference(q, out, lse, kc, vc, lens.tolist(), True, (-1, -1), table)


def test_paged_decode_step_under_torch_compile():
    def step(q, kc, vc, k, v, lens, table):
        return fa3.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, page_table=table)

    torch.manual_seed(17)
    kc = torch.zeros(12, 16, 2, 64, device="cuda", dtype=torch.float16)
    vc = torch.zeros_like(kc)
    table = torch.randperm(12, device="cuda")[:8].view(2, 4).to(torch.int32).contiguous()
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(2, 1, 2, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    lens = torch.tensor([5, 60], dtype=torch.int32, device="cuda")
    explain = torch._dynamo.explain(step)(q, kc.clone(), vc.clone(), k, v, lens, table)
    assert explain.graph_break_count == 0, explain.break_reasons
    kc2, vc2 = kc.clone(), vc.clone()
    got = torch.compile(step, fullgraph=True)(q, kc2, vc2, k, v, lens, table)
    want = step(q, kc, vc, k, v, lens, table)
    assert torch.equal(got, want) and torch.equal(kc2, kc) and torch.equal(vc2, vc)
    assert kc.abs().sum() > 0, "the append wrote nothing"


def test_paged_argument_errors():
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
    kc = torch.zeros(8, 16, 2, 64, device="cuda", dtype=torch.bfloat16)
    table = torch.arange(8, dtype=torch.int32, device="cuda").view(2, 4)
    lens = torch.tensor([3, 4], dtype=torch.int32, device="cuda")

    def call(**changes):
        args = dict(q=q, k_cache=kc, v_cache=kc.clone(), cache_seqlens=lens, page_table=table)
        args.update(changes)
        return fa3.attention_with_kvcache(**args)

    with pytest.raises(TypeError, match="page_table must be an int32 tensor, got torch.int64"):
        call(page_table=table.long())
    with pytest.raises(TypeError, match="page_table must be an int32 CUDA tensor"):
        call(page_table=table.cpu().numpy())
    with pytest.raises(ValueError, match="page_table is on cpu but q is on cuda"):
        call(page_table=table.cpu())
    with pytest.raises(ValueError, match=r"page_table must have shape \(batch, max_pages\) = \(2, max_pages\)"):
        call(page_table=table.view(4, 2))
    with pytest.raises(ValueError, match=r"page_table must have shape \(batch, max_pages\)"):
        call(page_table=table.view(8))
    with pytest.raises(ValueError, match="page_table must be contiguous"):
        call(page_table=torch.arange(8, dtype=torch.int32, device="cuda").view(4, 2).t())
    with pytest.raises(ValueError, match=r"page_table must have at least one column"):
        call(page_table=table[:, :0])
    with pytest.raises(ValueError, match="k_cache and v_cache must both be"):
        call(v_cache=kc[:, :8].clone())
    with pytest.raises(ValueError, match=r"k_cache's page size \(dim 1\) must be at least 1"):
        call(k_cache=kc[:, :0], v_cache=kc[:, :0].clone())
    with pytest.raises(ValueError, match="k_cache must be contiguous"):
        call(k_cache=kc.transpose(0, 1).contiguous().transpose(0, 1))
    with pytest.raises(ValueError, match=r"num_splits must be an int >= 0"):
        call(num_splits=1.5)
    k = torch.ones(2, 3, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"cache_seqlens \+ 3 new rows must lie in \[0, 64\] \(the cache's "
                                         r"capacity = max_pages \* page_size = 4 \* 16\)"):
        call(k=k, v=k, cache_seqlens=torch.tensor([3, 62], dtype=torch.int32, device="cuda"))
    bad = table.clone()
    bad[1, 1] = 8  # a page past the cache, used by batch 1 after the append
    bad[0, 3] = -1  # unused by batch 0 (rows [0, 6)): not an error
    k_before = kc.clone()
    with pytest.raises(ValueError, match=r"page_table\[1, 1\] = 8 is not a page of the cache \(num_pages = 8\)"):
        call(k_cache=kc, k=k, v=k, cache_seqlens=torch.tensor([3, 15], dtype=torch.int32, device="cuda"),
             page_table=bad)
    assert torch.equal(kc, k_before), "a rejected append wrote into the cache"


def test_fa3_run_runs_a_paged_attention_kvcache_function(fa3_run, tmp_path):
    """HopperProgram feeds the i32 lengths and the 2-D i32 page table of a
    paged fa3.attention_kvcache to its kernel."""
    import subprocess

    torch.manual_seed(19)
    b, sq, hq, hkv, d, page_size, max_pages = 3, 2, 8, 2, 64, 48, 7
    e = "bf16"
    qt, ct = f"tensor<?x?x{hq}x{d}x{e}>", f"tensor<?x?x{hkv}x{d}x{e}>"
    lt, it, pt = f"tensor<?x{hq}x?xf32>", "tensor<?xi32>", "tensor<?x?xi32>"
    (tmp_path / "kv.mlir").write_text(
        f"func.func @kv(%q: {qt}, %kc: {ct}, %vc: {ct}, %lens: {it}, %pages: {pt}) -> ({qt}, {lt}) {{\n"
        f"  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens, %pages {{causal}} : "
        f"({qt}, {ct}, {ct}, {it}, {pt}) -> ({qt}, {lt})\n"
        f"  return %o, %lse : {qt}, {lt}\n}}\n")
    lens = [336, 1, 150]
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    kc, vc, table = _paged_cache(lens, page_size, max_pages, hkv, d, torch.bfloat16)
    for name, x in (("q", q), ("kc", kc), ("vc", vc)):
        np.save(tmp_path / f"{name}.npy", x.float().cpu().numpy())
    np.save(tmp_path / "lens.npy", np.array(lens, np.int32))
    np.save(tmp_path / "pages.npy", table.cpu().numpy())
    for name in ("o", "lse"):
        np.save(tmp_path / f"{name}.npy", np.full((1,), np.nan, np.float32))
    cmd = [fa3_run, str(tmp_path / "kv.mlir"), "--function=kv", "--device=cuda"]
    cmd += [f"--input=@{tmp_path / n}.npy" for n in ("q", "kc", "vc", "lens", "pages")]
    cmd += [f"--output=@{tmp_path / 'o'}.npy", f"--output=@{tmp_path / 'lse'}.npy"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = torch.from_numpy(np.load(tmp_path / "o.npy")).to("cuda").to(torch.bfloat16)
    lse = torch.from_numpy(np.load(tmp_path / "lse.npy")).to("cuda")
    _assert_matches_reference(q, out, lse, kc, vc, lens, True, (-1, -1), table)


# --- split-KV -------------------------------------------------------------------

# Ragged lengths of 32 batches in a 4096-row cache: full, empty, one key,
# a block and one past, the rest spread.
_RAGGED32 = [4096, 0, 1, 128, 129] + [(37 * i * i + 11 * i) % 4097 for i in range(5, 32)]

SPLIT_CASES = [  # b, sq, cache_rows, hq, hkv, d, dtype, causal, window, lens, pack_gqa, num_splits
    (4, 1, 4096, 32, 8, 128, torch.bfloat16, False, (-1, -1), [4096, 1, 0, 1777], None, 2),
    (4, 1, 4096, 32, 8, 128, torch.bfloat16, True, (-1, -1), [4096, 1, 0, 1777], False, 3),
    (3, 7, 1000, 16, 2, 64, torch.bfloat16, True, (-1, -1), [1000, 9, 517], True, 4),
    (3, 7, 1000, 16, 2, 64, torch.bfloat16, False, (-1, -1), [1000, 0, 1], False, 7),
    (2, 1, 2048, 8, 8, 256, torch.float16, True, (-1, -1), [2048, 133], None, 16),
    (2, 7, 2048, 8, 2, 256, torch.bfloat16, False, (-1, -1), [1, 2047], True, 4),
    (2, 5, 300, 8, 8, 256, torch.float16, True, (32, 0), [300, 133], None, 2),
    # 64 splits of a 300-key cache: 3 blocks of 128 keys, 61+ empty splits.
    (2, 1, 300, 32, 8, 128, torch.bfloat16, True, (-1, -1), [300, 1], None, 64),
    (2, 7, 300, 16, 2, 64, torch.bfloat16, False, (-1, -1), [300, 0], False, 64),
    (2, 1, 300, 8, 8, 128, torch.float16, False, (-1, -1), [0, 0], None, 4),  # every batch empty
    # fa3 chooses: B = 1 splits, B = 32 (256 packed tiles) does not.
    (1, 1, 32768, 32, 8, 128, torch.bfloat16, False, (-1, -1), [32768], None, 0),
    (1, 7, 8192, 32, 8, 64, torch.bfloat16, True, (-1, -1), [5000], None, 0),
    (32, 1, 4096, 32, 8, 128, torch.bfloat16, True, (-1, -1), _RAGGED32, None, 0),
]


def _split_id(c):
    return (f"b{c[0]}-sq{c[1]}-cache{c[2]}-h{c[3]}x{c[4]}-d{c[5]}-{str(c[6])[6:]}-{'causal' if c[7] else 'full'}-"
            f"win{c[8][0]}-pack{c[10]}-splits{c[11]}")


@pytest.mark.parametrize("case", SPLIT_CASES, ids=_split_id)
def test_split_kvcache_matches_reference(case):
    b, sq, rows, hq, hkv, d, dtype, causal, window, lens, pack, splits = case
    torch.manual_seed(sum(lens) + sq + splits)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    kc = torch.randn(b, rows, hkv, d, device="cuda", dtype=dtype)
    vc = torch.randn(b, rows, hkv, d, device="cuda", dtype=dtype)
    for i, n in enumerate(lens):  # garbage past each length
        kc[i, n:] = 300.0
        vc[i, n:] = -3000.0
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = fa3.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=causal, window_size=window,
                                          return_lse=True, pack_gqa=pack, num_splits=splits)
    _assert_matches_reference(q, out, lse, kc, vc, lens, causal, window)


def test_fa3_chooses_splits_by_batch():
    """num_splits=0 on the bench's decode shape (GQA 32:8, d128, Sq = 1,
    32k keys): B = 1 splits (a power of two, at most 64), B = 32 fills the
    GPU with its tiles and does not."""
    from fa3 import _kvcache_cuda
    from fa3._spec import AttentionSpec

    spec = AttentionSpec("bf16", 32, 8, 128, 128)
    index = torch.cuda.current_device()
    one = _kvcache_cuda.choose_num_splits(spec, True, 1, 1, 32768, index)
    many = _kvcache_cuda.choose_num_splits(spec, True, 32, 1, 32768, index)
    print(f"fa3 chooses {one} splits at B=1 and {many} at B=32")
    assert 1 < one <= 64 and one & (one - 1) == 0
    assert many == 1


PAGED_SPLIT_CASES = [  # b, sq, page_size, max_pages, hq, hkv, d, dtype, causal, window, lens, pack, num_splits
    (4, 1, 16, 64, 32, 8, 128, torch.bfloat16, False, (-1, -1), [1024, 1, 0, 700], None, 4),
    (3, 7, 16, 40, 16, 2, 64, torch.bfloat16, True, (-1, -1), [640, 0, 333], True, 3),
    (3, 7, 16, 40, 16, 2, 64, torch.bfloat16, False, (-1, -1), [640, 1, 333], False, 7),
    (4, 1, 64, 20, 32, 8, 128, torch.bfloat16, True, (-1, -1), [1280, 1, 0, 700], False, 8),
    (2, 7, 64, 8, 8, 8, 256, torch.float16, True, (-1, -1), [512, 65], None, 2),
    # More splits than key blocks: 5 pages of 64 = 320 keys, 3 blocks.
    (2, 1, 64, 5, 32, 8, 128, torch.bfloat16, True, (-1, -1), [320, 65], None, 64),
    (2, 7, 16, 20, 8, 2, 256, torch.bfloat16, False, (-1, -1), [0, 300], True, 16),
    # fa3 chooses.
    (1, 1, 64, 512, 32, 8, 128, torch.bfloat16, False, (-1, -1), [32768], None, 0),
    (1, 7, 16, 256, 32, 8, 64, torch.float16, True, (-1, -1), [4000], None, 0),
    (32, 1, 16, 256, 32, 8, 128, torch.bfloat16, True, (-1, -1), _RAGGED32, None, 0),
]


@pytest.mark.parametrize("case", PAGED_SPLIT_CASES,
                         ids=lambda c: f"b{c[0]}-sq{c[1]}-page{c[2]}x{c[3]}-h{c[4]}x{c[5]}-d{c[6]}-{str(c[7])[6:]}-"
                         f"{'causal' if c[8] else 'full'}-pack{c[11]}-splits{c[12]}")
def test_paged_split_kvcache_matches_reference(case):
    b, sq, page_size, max_pages, hq, hkv, d, dtype, causal, window, lens, pack, splits = case
    torch.manual_seed(sum(lens) + sq + page_size + splits)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    kc, vc, table = _paged_cache(lens, page_size, max_pages, hkv, d, dtype)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    table_before = table.clone()
    out, lse = fa3.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, page_table=table, causal=causal,
                                          window_size=window, return_lse=True, pack_gqa=pack, num_splits=splits)
    _assert_matches_reference(q, out, lse, kc, vc, lens, causal, window, table)
    assert torch.equal(table, table_before), "the page table was modified"


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("splits", [4, 0])
def test_split_append_writes_the_cache_and_attends_to_it(paged, splits):
    """An append followed by the split-KV kernel: the new rows land where
    the lengths say, and the split attention sees them."""
    torch.manual_seed(23 + splits)
    b, n, hq, hkv, d, page_size, max_pages = 3, 3, 32, 8, 128, 64, 16
    lens = [0, 100, 1020]
    if paged:
        kc, vc, table = _paged_cache([p + n for p in lens], page_size, max_pages, hkv, d, torch.bfloat16,
                                     garbage=False)
    else:
        kc = torch.randn(b, page_size * max_pages, hkv, d, device="cuda", dtype=torch.bfloat16)
        vc, table = torch.randn_like(kc), None
    q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = fa3.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, page_table=table, causal=True,
                                          return_lse=True, num_splits=splits)
    for i, p in enumerate(lens):
        got_k = _keys(kc, i, p + n, table)[0, p:]
        got_v = _keys(vc, i, p + n, table)[0, p:]
        assert torch.equal(got_k, k[i]) and torch.equal(got_v, v[i]), f"batch {i}'s new rows"
    assert torch.equal(seqlens.cpu(), torch.tensor(lens, dtype=torch.int32)), "cache_seqlens was modified"
    _assert_matches_reference(q, out, lse, kc, vc, [p + n for p in lens], True, (-1, -1), table)


@pytest.mark.parametrize("splits", [4, 0])
def test_split_decode_step_under_torch_compile(splits):
    """A split-KV decode step (append, then partial attentions and their
    merge) under torch.compile(fullgraph=True): no graph break, the same
    output and caches as eager."""
    def step(q, kc, vc, k, v, lens):
        return fa3.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, num_splits=splits)

    torch.manual_seed(29)
    kc = torch.zeros(1, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
    kc[:, :3000] = torch.randn(1, 3000, 8, 128, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 1, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([3000], dtype=torch.int32, device="cuda")
    explain = torch._dynamo.explain(step)(q, kc.clone(), vc.clone(), k, v, lens)
    assert explain.graph_break_count == 0, explain.break_reasons
    kc2, vc2 = kc.clone(), vc.clone()
    got = torch.compile(step, fullgraph=True)(q, kc2, vc2, k, v, lens)
    want = step(q, kc, vc, k, v, lens)
    assert torch.equal(got, want) and torch.equal(kc2, kc) and torch.equal(vc2, vc)
    _assert_matches_reference(q, *fa3.attention_with_kvcache(q, kc, vc, cache_seqlens=lens + 1, num_splits=splits,
                                                              return_lse=True),
                              kc, vc, [3001], False, (-1, -1))


def test_split_kvcache_close_to_one_split():
    """The split-KV kernel against the kernel of one split on one decode
    batch: the same attention up to rounding of the merge."""
    torch.manual_seed(31)
    b, rows, hq, hkv, d = 2, 8192, 32, 8, 128
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
    kc, vc = (torch.randn(b, rows, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([8192, 5000], dtype=torch.int32, device="cuda")
    one, lse_one = fa3.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, return_lse=True, num_splits=1)
    for splits in (2, 8, 32):
        out, lse = fa3.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, return_lse=True, num_splits=splits)
        assert (out.float() - one.float()).abs().max().item() <= 2 ** -7, f"{splits} splits"
        assert (lse - lse_one).abs().max().item() <= 1e-3, f"{splits} splits"


def test_fa3_run_runs_a_split_attention_kvcache_function(fa3_run, tmp_path):
    """HopperProgram gives a split-KV fa3.attention_kvcache its workspace
    and runs the merge kernel after it."""
    import subprocess

    torch.manual_seed(37)
    b, sq, rows, hq, hkv, d = 3, 2, 700, 8, 2, 64
    e = "bf16"
    qt, ct = f"tensor<?x?x{hq}x{d}x{e}>", f"tensor<?x?x{hkv}x{d}x{e}>"
    lt, it = f"tensor<?x{hq}x?xf32>", "tensor<?xi32>"
    (tmp_path / "kv.mlir").write_text(
        f"func.func @kv(%q: {qt}, %kc: {ct}, %vc: {ct}, %lens: {it}) -> ({qt}, {lt}) {{\n"
        f"  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens {{causal, num_splits = 4 : i64}} : "
        f"({qt}, {ct}, {ct}, {it}) -> ({qt}, {lt})\n"
        f"  return %o, %lse : {qt}, {lt}\n}}\n")
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    kc, vc = (torch.randn(b, rows, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = [700, 0, 333]
    for name, x in (("q", q), ("kc", kc), ("vc", vc)):
        np.save(tmp_path / f"{name}.npy", x.float().cpu().numpy())
    np.save(tmp_path / "lens.npy", np.array(lens, np.int32))
    for name in ("o", "lse"):
        np.save(tmp_path / f"{name}.npy", np.full((1,), np.nan, np.float32))
    cmd = [fa3_run, str(tmp_path / "kv.mlir"), "--function=kv", "--device=cuda"]
    cmd += [f"--input=@{tmp_path / n}.npy" for n in ("q", "kc", "vc", "lens")]
    cmd += [f"--output=@{tmp_path / 'o'}.npy", f"--output=@{tmp_path / 'lse'}.npy"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = torch.from_numpy(np.load(tmp_path / "o.npy")).to("cuda").to(torch.bfloat16)
    lse = torch.from_numpy(np.load(tmp_path / "lse.npy")).to("cuda")
    _assert_matches_reference(q, out, lse, kc, vc, lens, True, (-1, -1))
