"""fa3-run --device=cuda (the sm_90a TMA + wgmma kernel) against a float64
reference, with PyTorch's own SDPA error in the same dtype as the yardstick:
max |O - ref| <= 2 * max |SDPA - ref| + 1e-5 over the rows that see a key.
Outputs are poisoned (NaN) by the runtime before each launch; NaN fails.
Rows that see no key must be exactly O = 0, LSE = -inf."""

import dataclasses
import os
import subprocess
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fa3 import reference, schedules


@dataclasses.dataclass
class GpuCase:
    b: int
    sq: int
    sk: int
    d: int
    hq: int = 8
    hkv: int = 2
    dtype: str = "bf16"
    causal: bool = False
    window: tuple = (-1, -1)
    # A kernel structure other than the cost model's (fa3.schedules).
    structure: str = ""
    # PackGQA: the hq / hkv heads of a kv head as rows of one tile.
    pack_gqa: bool = False

    def id(self):
        s = f"b{self.b}-sq{self.sq}-sk{self.sk}-d{self.d}-h{self.hq}x{self.hkv}-{self.dtype}"
        if self.causal:
            s += "-causal"
        if self.window != (-1, -1):
            s += f"-win{self.window[0]}_{self.window[1]}"
        if self.structure:
            s += "-" + self.structure
        if self.pack_gqa:
            s += "-pack"
        return s

    def mlir(self):
        e = self.dtype
        qt = f"tensor<?x?x{self.hq}x{self.d}x{e}>"
        kt = f"tensor<?x?x{self.hkv}x{self.d}x{e}>"
        lt = f"tensor<?x{self.hq}x?xf32>"
        attrs = []
        if self.causal:
            attrs.append("causal")
        if self.window != (-1, -1):
            attrs.append(f"window = array<i64: {self.window[0]}, {self.window[1]}>")
        if self.structure:
            attrs.append(f"schedule = {schedules.hopper_forward(self.d, self.structure)}")
        if self.pack_gqa:
            attrs.append("pack_gqa")
        a = " {" + ", ".join(attrs) + "}" if attrs else ""
        return (f"func.func @attn(%q: {qt}, %k: {kt}, %v: {kt}) -> ({qt}, {lt}) {{\n"
                f"  %o, %lse = fa3.attention %q, %k, %v{a} : ({qt}, {kt}, {kt}) -> ({qt}, {lt})\n"
                f"  return %o, %lse : {qt}, {lt}\n}}\n")


def _cases():
    cases = []
    lens = (1, 17, 128, 1000, 4096)
    # Sequence-length pairs (incl. Sq != Sk), d = 128, causal and not.
    for sq, sk in [(1, 1), (17, 17), (128, 128), (1000, 1000), (4096, 4096), (1, 4096), (4096, 17),
                   (17, 1000), (1000, 128), (128, 4096), (4096, 1000)]:
        for causal in (False, True):
            cases.append(GpuCase(b=1 if sq * sk > 10**6 else 3, sq=sq, sk=sk, d=128, causal=causal))
    # Every head dim, both dtypes, ragged lengths, GQA and MHA.
    for d in (64, 128, 256):
        for dtype in ("bf16", "f16"):
            cases.append(GpuCase(b=3, sq=1000, sk=1000, d=d, dtype=dtype, causal=True))
            cases.append(GpuCase(b=1, sq=17, sk=4096, d=d, dtype=dtype, hq=4, hkv=4))
            cases.append(GpuCase(b=1, sq=4096, sk=4096, d=d, dtype=dtype, hq=16, hkv=2))
    # Sliding windows.
    cases += [
        GpuCase(b=1, sq=1000, sk=1000, d=128, window=(128, 0), causal=True),
        GpuCase(b=3, sq=1000, sk=4096, d=64, window=(256, 256)),
        GpuCase(b=1, sq=4096, sk=1000, d=256, window=(-1, 64), dtype="f16"),
    ]
    # The other kernel structures the benchmark compares (the default is
    # warp-specialized, with pingpong and intra-warpgroup overlap at
    # d > 64): ragged, Sq != Sk, causal, windowed, GQA. Overlap is toggled
    # where the default lacks it (d64) or has it (d128, d256).
    structure_dims = {"no_ws": (64, 128, 256), "ws_no_pp": (64, 128, 256), "ws_overlap": (64,),
                      "ws_no_overlap": (128, 256), "n176_overlap": (128,), "persistent": (64, 128, 256),
                      "lazy_rescale": (64, 128, 256)}
    for structure, dims in structure_dims.items():
        for d in dims:
            cases.append(GpuCase(b=3, sq=1000, sk=1000, d=d, causal=True, structure=structure))
            cases.append(GpuCase(b=1, sq=17, sk=4096, d=d, structure=structure))
        cases.append(GpuCase(b=2, sq=1, sk=1, d=128, structure=structure))
        cases.append(GpuCase(b=1, sq=4096, sk=1000, d=128, causal=True, window=(300, 0), structure=structure))
    # Persistent grids where each CTA walks several tiles (2048, 704 and 512
    # tiles on 132 SMs; the K/V ring's phases run on across them), and tiles
    # that see no key (causal Sq > Sk: the ring does not advance).
    cases += [
        GpuCase(b=4, sq=4096, sk=4096, d=128, hq=16, hkv=2, causal=True, structure="persistent"),
        GpuCase(b=2, sq=4096, sk=1000, d=64, hq=16, hkv=16, dtype="f16", structure="persistent"),
        GpuCase(b=2, sq=4096, sk=17, d=256, causal=True, structure="persistent"),
    ]
    # PackGQA (the Hq / Hkv heads of a kv head in one tile; Q and O through
    # the [B, S, Hkv, G, D] TMA view): decode (Sq = 1), ragged and long
    # queries, causal with Sq != Sk, windows, groups 2 to 16, every head dim,
    # and the other kernel structures (a persistent grid walks kv-head
    # tiles).
    cases += [
        GpuCase(b=3, sq=1, sk=4096, d=128, hq=32, hkv=8, pack_gqa=True),
        GpuCase(b=2, sq=1, sk=1000, d=128, hq=32, hkv=8, causal=True, pack_gqa=True),
        GpuCase(b=2, sq=17, sk=1000, d=64, hq=16, hkv=1, causal=True, pack_gqa=True),
        GpuCase(b=1, sq=1000, sk=1000, d=128, hq=8, hkv=2, causal=True, pack_gqa=True),
        GpuCase(b=1, sq=1000, sk=4096, d=256, hq=8, hkv=4, dtype="f16", pack_gqa=True),
        GpuCase(b=2, sq=4096, sk=4096, d=64, hq=16, hkv=4, causal=True, pack_gqa=True),
        GpuCase(b=1, sq=300, sk=1000, d=128, hq=16, hkv=2, window=(64, 0), causal=True, pack_gqa=True),
        GpuCase(b=2, sq=17, sk=17, d=64, hq=8, hkv=4, pack_gqa=True),
    ]
    for structure in ("no_ws", "ws_no_pp", "ws_overlap", "persistent"):
        cases.append(GpuCase(b=3, sq=1000, sk=1000, d=128, hq=16, hkv=4, causal=True, structure=structure,
                             pack_gqa=True))
        cases.append(GpuCase(b=4, sq=1, sk=4096, d=128, hq=32, hkv=8, structure=structure, pack_gqa=True))
    assert {c.sq for c in cases} >= set(lens)
    return cases


CASES = _cases()


def _round(x, dtype):
    return x.to(torch.bfloat16 if dtype == "bf16" else torch.float16)


def _reference_f64(q, k, v, case, mask):
    """Float64 attention on the GPU from the rounded inputs (torch in float64:
    an implementation independent of fa3's)."""
    group = case.hq // case.hkv
    q64, k64, v64 = (x.double() for x in (q, k, v))
    k64 = k64.repeat_interleave(group, dim=2)
    v64 = v64.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q64, k64) / np.sqrt(case.d)
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf for rows without keys
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    p = torch.where(torch.isfinite(lse)[..., None], p, torch.zeros_like(p))
    o = torch.einsum("bhqk,bkhd->bqhd", p, v64)
    return o, lse


@pytest.mark.parametrize("case", CASES, ids=[c.id() for c in CASES])
def test_attention_gpu_matches_reference(case, fa3_run, tmp_path):
    seed = int(os.environ.get("FA3_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(case.id().encode()) ^ seed)
    dev = "cuda"
    q = _round(torch.randn(case.b, case.sq, case.hq, case.d, device=dev, generator=gen), case.dtype)
    k = _round(torch.randn(case.b, case.sk, case.hkv, case.d, device=dev, generator=gen), case.dtype)
    v = _round(torch.randn(case.b, case.sk, case.hkv, case.d, device=dev, generator=gen), case.dtype)

    (tmp_path / "attn.mlir").write_text(case.mlir())
    # fa3-run reads f16 as float16 and bf16 as float32 rounded to bf16.
    np_dtype = np.float16 if case.dtype == "f16" else np.float32
    for name, x in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", x.float().cpu().numpy().astype(np_dtype))
    for name in ("o", "lse"):
        np.save(tmp_path / f"{name}.npy", np.full((1,), np.nan, np.float32))
    cmd = [fa3_run, str(tmp_path / "attn.mlir"), "--function=attn", "--device=cuda"]
    cmd += [f"--input=@{tmp_path / n}.npy" for n in ("q", "k", "v")]
    cmd += [f"--output=@{tmp_path / 'o'}.npy", f"--output=@{tmp_path / 'lse'}.npy"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"fa3-run failed (seed {seed}):\n{proc.stderr}"
    o = torch.from_numpy(np.load(tmp_path / "o.npy")).to(dev).double()
    lse = torch.from_numpy(np.load(tmp_path / "lse.npy")).to(dev).double()
    assert o.shape == (case.b, case.sq, case.hq, case.d)
    assert lse.shape == (case.b, case.hq, case.sq)
    assert not torch.isnan(o).any(), "NaN in O (an element was not written?)"
    assert not torch.isnan(lse).any(), "NaN in LSE"

    mask = torch.from_numpy(reference.visible(case.sq, case.sk, case.causal, case.window)).to(dev)
    ref_o, ref_lse = _reference_f64(q, k, v, case, mask)
    seen = torch.isfinite(ref_lse)  # [B, Hq, Sq]
    assert torch.equal(torch.isneginf(lse), ~seen), "rows with LSE = -inf differ from the reference"
    seen_rows = seen.permute(0, 2, 1)  # [B, Sq, Hq]
    assert (o[~seen_rows] == 0).all(), "a row that sees no key is not 0"

    # PyTorch's SDPA on the same rounded inputs, same dtype, explicit mask.
    group = case.hq // case.hkv
    sdpa = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.repeat_interleave(group, 2).transpose(1, 2),
        v.repeat_interleave(group, 2).transpose(1, 2), attn_mask=mask).transpose(1, 2).double()
    sdpa_err = (sdpa - ref_o).abs()[seen_rows].max().item() if seen.any() else 0.0
    fa3_err = (o - ref_o).abs()[seen_rows].max().item() if seen.any() else 0.0
    # Lazy rescaling keeps a row's max while a block raises it by up to 2^8,
    # so the row's largest probability (exactly 1 in the eager kernel and in
    # SDPA) is rounded to bf16/f16 too: up to one more rounding of the
    # dominant term, about SDPA's own output rounding. Measured on an H100
    # (fa3 / SDPA max error, 16 seeds, Sq = Sk = 4096, d256): median 1.34,
    # max 1.65, against 1.00 / 1.07 eagerly; one run of this test 2.29.
    factor = 3 if case.structure == "lazy_rescale" else 2
    bound = factor * sdpa_err + 1e-5
    assert fa3_err <= bound, f"O error {fa3_err:.3g} > {factor} x SDPA's {sdpa_err:.3g} + 1e-5 (seed {seed})"

    # LSE: f32 scores and approximate exp2/log2 on the GPU; 1e-3 relative
    # bounds rounding of any score by 2^-10 (far above f32 accumulation over
    # D <= 256 terms, far below an off-by-one mask or a lost rescale).
    lse_err = (lse - ref_lse).abs()[seen]
    lse_bound = 1e-3 * (1 + ref_lse.abs()[seen])
    assert (lse_err <= lse_bound).all(), f"LSE error {lse_err.max().item():.3g} over its bound (seed {seed})"
    print(f"{case.id()}: O err {fa3_err:.3e} (SDPA {sdpa_err:.3e}), LSE err {lse_err.max().item() if seen.any() else 0:.3e}")
