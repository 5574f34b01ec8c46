"""fa3.attention_with_kvcache on torch CUDA tensors (the Hopper kernel of
fa3.attention_kvcache: a contiguous cache, lengths read on the device)
against the float64 reference (fa3.reference.attention_kvcache), with
PyTorch SDPA's own error in the same dtype as the yardstick, as in
test_attention_gpu.py: max |O - ref| <= 2 * max |SDPA - ref| + 1e-5 over
the rows that see a key (SDPA per batch on its first cache_seqlens[b] keys,
the bottom-right causal mask explicit). Rows that see no key must be O = 0,
LSE = -inf. Cache rows past a batch's length hold large finite garbage: a
kernel that reads them into the softmax fails."""

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


def _reference_and_sdpa(q, kc, vc, lens, causal, window, scale):
    """float64 reference (fa3.reference) and SDPA's output on the same
    rounded inputs, batch by batch."""
    ref_o, ref_lse = reference.attention_kvcache(q.double().cpu().numpy(), kc.double().cpu().numpy(),
                                                 vc.double().cpu().numpy(), lens, causal=causal, window=window,
                                                 scale=scale)
    sdpa = torch.zeros_like(q)
    group = q.shape[2] // kc.shape[2]
    for b, n in enumerate(lens):
        if n == 0:
            continue
        mask = torch.from_numpy(reference.visible(q.shape[1], n, causal, window)).to(q.device)
        kb = kc[b:b + 1, :n].repeat_interleave(group, 2)
        vb = vc[b:b + 1, :n].repeat_interleave(group, 2)
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
                                          return_lse=True, pack_gqa=pack)
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
    with pytest.raises(ValueError, match="page_table: paged KV caches have no Hopper kernel yet"):
        fa3.attention_with_kvcache(q, kc, kc, cache_seqlens=lens,
                                   page_table=torch.zeros(2, 4, dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="num_splits = 2: split-KV has no Hopper kernel yet"):
        fa3.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, num_splits=2)
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
